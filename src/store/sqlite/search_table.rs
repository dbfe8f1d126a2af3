//! The FTS5 table itself: how it is made, which tokenizer it was made with
//! and which one a store wants, and how it is made again, empty (a plain
//! reset, or the hard way when its own pages are damaged). The rows it holds
//! are `search_index.rs`'s.

use rusqlite::{Connection, OptionalExtension};

use crate::store::search::{Tokenizer, TOKENIZER_META};
use crate::store::sqlite::meta;

/// What choosing a tokenizer at open did ([`choose`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Chosen {
    /// The table is made with the tokenizer wanted (now, or already).
    InForce(Tokenizer),
    /// The table holds text made with `table`, and `wanted` differs: only a
    /// reindex may change it.
    Mismatch { table: Tokenizer, wanted: Tokenizer },
}

/// The tokenizer the table was made with, read from its definition (the
/// truth: the meta row is the record of the choice).
pub(crate) fn table_tokenizer(c: &Connection) -> rusqlite::Result<Tokenizer> {
    Ok(form(c)?.tokenizer)
}

/// What the table's definition says a search needs to know.
pub(crate) struct TableForm {
    /// The tokenizer it was made with ([`table_tokenizer`]).
    pub(crate) tokenizer: Tokenizer,
    /// Whether it keeps a copy of each row's text ([`keeps_text`]).
    pub(crate) keeps_text: bool,
}

/// The table's form, from one read of its definition.
pub(crate) fn form(c: &Connection) -> rusqlite::Result<TableForm> {
    let sql = table_sql(c)?;
    let spec = sql.as_deref().and_then(|s| {
        let start = s.find("tokenize = '")? + "tokenize = '".len();
        let len = s[start..].find('\'')?;
        Some(&s[start..start + len])
    });
    Ok(TableForm {
        tokenizer: spec
            .and_then(Tokenizer::from_spec)
            .unwrap_or(Tokenizer::Unicode61),
        keeps_text: !sql.is_some_and(|sql| sql.contains("content = ''")),
    })
}

/// The table's definition, as it was made.
fn table_sql(c: &Connection) -> rusqlite::Result<Option<String>> {
    c.query_row(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'search_text'",
        [],
        |r| r.get(0),
    )
    .optional()
}

/// Whether the table keeps a copy of each row's text (made before the
/// word index dropped it, or a trigram index): else a snippet is cut from
/// the mirror's file, and no text can be read back from the table.
pub(crate) fn keeps_text(c: &Connection) -> rusqlite::Result<bool> {
    Ok(form(c)?.keeps_text)
}

/// Whether the table is made as [`create_table`] makes it today with
/// `tokenizer`: its options are the ones this version gives.
pub(crate) fn is_current_form(c: &Connection, tokenizer: Tokenizer) -> rusqlite::Result<bool> {
    Ok(table_sql(c)?.is_some_and(|sql| sql.contains(&tokenizer.fts5_options())))
}

/// Make the table's tokenizer the one wanted: `requested`, else the one the
/// meta row records, else the table's. An empty index is remade with it and
/// the choice recorded; a non-empty one is left alone ([`Chosen::Mismatch`]).
pub(crate) fn choose(tx: &Connection, requested: Option<Tokenizer>) -> rusqlite::Result<Chosen> {
    let table = table_tokenizer(tx)?;
    let recorded = meta::meta(tx, TOKENIZER_META)?
        .as_deref()
        .and_then(Tokenizer::from_spec);
    let wanted = requested.or(recorded).unwrap_or(table);
    if wanted != table {
        if !is_empty(tx)? {
            return Ok(Chosen::Mismatch { table, wanted });
        }
        reset(tx, wanted)?;
    }
    if recorded != Some(wanted) {
        meta::meta_set(tx, TOKENIZER_META, wanted.spec())?;
    }
    Ok(Chosen::InForce(wanted))
}

/// Whether the index holds no row.
pub(crate) fn is_empty(c: &Connection) -> rusqlite::Result<bool> {
    let any: Option<i64> = c
        .query_row("SELECT rowid FROM search_text LIMIT 1", [], |r| r.get(0))
        .optional()?;
    Ok(any.is_none())
}

/// Drop the index and make it again, empty, with `tokenizer`, recorded in meta.
pub(crate) fn reset(tx: &Connection, tokenizer: Tokenizer) -> rusqlite::Result<()> {
    drop_table(tx, "search_text")?;
    tx.execute_batch("DELETE FROM search_parts")?;
    create_table(tx, tokenizer)?;
    meta::meta_set(tx, TOKENIZER_META, tokenizer.spec())
}

/// Drop the FTS5 table `name` and its shadow tables. FTS5 (3.54) drops and
/// renames `<name>_content` only for a table that keeps its texts: a
/// contentless table's (`contentless_unindexed`: the path and checksum)
/// would be left behind, and the next table made under the name would fail.
pub(crate) fn drop_table(tx: &Connection, name: &str) -> rusqlite::Result<()> {
    tx.execute_batch(&format!(
        "DROP TABLE {name}; DROP TABLE IF EXISTS {name}_content;"
    ))
}

/// Rename the FTS5 table `from` and its shadow tables to `to` (see
/// [`drop_table`] for the one FTS5 leaves).
pub(crate) fn rename_table(tx: &Connection, from: &str, to: &str) -> rusqlite::Result<()> {
    tx.execute_batch(&format!("ALTER TABLE {from} RENAME TO {to}"))?;
    let left: Option<String> = tx
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [format!("{from}_content")],
            |r| r.get(0),
        )
        .optional()?;
    match left {
        Some(_) => tx.execute_batch(&format!("ALTER TABLE {from}_content RENAME TO {to}_content")),
        None => Ok(()),
    }
}

/// Make the FTS5 table as this version has it, empty: the text, the title
/// and the author (weighted [`TITLE_WEIGHT`](crate::store::search::TITLE_WEIGHT) and
/// [`AUTHOR_WEIGHT`](crate::store::search::AUTHOR_WEIGHT) in the
/// ranking), and the accepted result the row was read from.
pub(crate) fn create_table(c: &Connection, tokenizer: Tokenizer) -> rusqlite::Result<()> {
    // The options are constants of `Tokenizer`, never user text.
    c.execute_batch(&format!(
        "CREATE VIRTUAL TABLE search_text USING fts5 (
             body, title, author, path UNINDEXED, checksum UNINDEXED,
             {}
         );",
        tokenizer.fts5_options()
    ))?;
    keep_merge_policy(c)
}

/// FTS5 merges a level of the index's segments once it holds 8 of them
/// (`automerge` 8; its default, 4, merged at 4). At each commit FTS5 merges
/// in proportion to the pages written and the rows deleted, times the
/// index's levels; merging 8 segments at a time, each posting is merged
/// again fewer times, and a changed document's deletion pays for less of it.
/// A rerun changing 1,000 documents of 100,000 took 0.93 × the wall (six
/// alternated pairs on copies of one store); searches and the database's size
/// did not move (DESIGN §14). `automerge` 0 (only a level of 16 merged,
/// whole, inside one commit) was faster still but grew the database by a
/// tenth and would merge a large index's top level in one transaction.
const AUTOMERGE: i64 = 8;

/// Set [`AUTOMERGE`] on the index unless it is set already (a read of its
/// settings table, which FTS5's own structure is not read for): every table
/// made here, and at open one made before this setting
/// ([`bring_to_current_form`](super::search_index::bring_to_current_form)).
pub(crate) fn keep_merge_policy(c: &Connection) -> rusqlite::Result<()> {
    let set = c
        .prepare("SELECT 1 FROM search_text_config WHERE k = 'automerge' AND v = ?1")?
        .exists([AUTOMERGE])?;
    if set {
        return Ok(());
    }
    c.execute(
        "INSERT INTO search_text (search_text, rank) VALUES ('automerge', ?1)",
        [AUTOMERGE],
    )?;
    Ok(())
}

/// The schema rows of the search index: the FTS5 table, its shadow tables
/// (`search_text_data`, `_idx`, `_content`, `_docsize`, `_config`) and
/// their automatic indexes, and `search_parts` with its indexes.
const INDEX_ROWS: &str = "name = 'search_text' OR tbl_name GLOB 'search_text_*' OR tbl_name = 'search_parts'";

/// In one `BEGIN IMMEDIATE` transaction: forget the index's schema rows
/// (their pages are left orphaned, unread), reload the schema, and create
/// the tables again as they were defined (`search_parts` by its own
/// statements; the FTS5 table with `tokenizer`).
pub(crate) fn remake(c: &Connection, tokenizer: Tokenizer) -> rusqlite::Result<()> {
    c.execute_batch("BEGIN IMMEDIATE")?;
    let done = (|| {
        // The table first, then its indexes: the order they are made in.
        let parts: Vec<String> = c
            .prepare(
                "SELECT sql FROM sqlite_schema WHERE tbl_name = 'search_parts' AND sql IS NOT NULL
                 ORDER BY type = 'index', rowid",
            )?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        c.execute_batch("PRAGMA writable_schema = ON")?;
        let forgot = c.execute(&format!("DELETE FROM sqlite_master WHERE {INDEX_ROWS}"), []);
        c.execute_batch("PRAGMA writable_schema = RESET")?;
        forgot?;
        create_table(c, tokenizer)?;
        for sql in &parts {
            c.execute_batch(sql)?;
        }
        crate::store::sqlite::meta::meta_set(c, TOKENIZER_META, tokenizer.spec())
    })();
    match done {
        Ok(()) => c.execute_batch("COMMIT"),
        Err(e) => {
            let _ = c.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}
