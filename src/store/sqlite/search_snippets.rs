//! Snippets of a word index that keeps no copy of its texts: the text of
//! the row that matched is read back from the accepted result in the mirror
//! (the index holds that file's text, cut in parts as
//! [`crate::store::search::parts`] cuts it), put alone into a small FTS5
//! table in the connection's temporary schema, made with the same tokenizer
//! and columns, and FTS5's own `snippet()` cuts it there: the same terms,
//! marks and choice of fragment as a table that keeps its texts gives.
//!
//! What it costs: one file opened and at most one part (1 MiB) read and
//! tokenized per hit shown, which a table with its texts paid for the
//! `snippet()` of the stored copy too (a match in part *n* of a long text
//! reads the *n* parts before it). A result missing from the mirror, or no
//! mirror given, gives an empty snippet: the hit is still found.
//!
//! The small table lives in an in-memory database attached to the
//! connection (`snippets`), not in its temporary schema, which SQLite may
//! spill to a file in the system's temporary directory: a document's text
//! is not written anywhere the store does not keep it.

use std::io::BufReader;

use rusqlite::{params, Connection, OptionalExtension};

use crate::mirror::Mirror;
use crate::store::search::parts::PartReader;
use crate::store::search::{Snippet, Tokenizer, ELLIPSIS, MARK_CLOSE, MARK_OPEN};
use crate::store::sqlite::search_index::{indexed_labels_of, PART_ROWID_BASE};

/// A matched row of the index: its rowid, its document, and the accepted
/// result (a path relative to the mirror) its text came from.
pub(crate) struct MatchedRow<'a> {
    pub(crate) rowid: i64,
    pub(crate) doc: i64,
    pub(crate) result_path: &'a str,
}

/// How a snippet is asked for: the FTS5 expression that matched, and about
/// how many terms to show.
pub(crate) struct Asked<'a> {
    pub(crate) expr: &'a str,
    pub(crate) tokens: i64,
    pub(crate) tokenizer: Tokenizer,
}

/// The snippet of `row` for `asked`, cut from its text in `mirror`; empty
/// when there is no mirror, the file cannot be read, it no longer holds the
/// part (a result is written once, so only damage does that), or the cut
/// fails: a snippet shows a hit, it never stops the search. Only the
/// search's time limit (an interrupt) goes on as an error.
pub(crate) fn snippet(
    c: &Connection,
    mirror: Option<&Mirror>,
    row: &MatchedRow<'_>,
    asked: &Asked<'_>,
) -> rusqlite::Result<Snippet> {
    let Some(mirror) = mirror else {
        return Ok(Snippet::default());
    };
    match cut(c, mirror, row, asked) {
        Ok(snippet) => Ok(snippet),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) => Err(e),
        Err(_) => Ok(Snippet::default()),
    }
}

/// [`snippet`]'s work, every error returned.
fn cut(
    c: &Connection,
    mirror: &Mirror,
    row: &MatchedRow<'_>,
    asked: &Asked<'_>,
) -> rusqlite::Result<Snippet> {
    let part = part_number(c, row)?;
    let Some(text) = read_part(mirror, row.result_path, part) else {
        return Ok(Snippet::default());
    };
    let labels = indexed_labels_of(c, row.doc)?;
    let table = scratch_table(c, asked.tokenizer)?;
    c.prepare_cached(&format!("DELETE FROM snippets.{table}"))?
        .execute([])?;
    c.prepare_cached(&format!(
        "INSERT INTO snippets.{table} (rowid, body, title, author) VALUES (1, ?1, ?2, ?3)"
    ))?
    .execute(params![text, labels.title, labels.author])?;
    let marked: Option<String> = c
        .prepare_cached(&format!(
            "SELECT snippet({table}, 0, ?2, ?3, ?4, ?5) FROM snippets.{table} WHERE {table} MATCH ?1"
        ))?
        .query_row(
            params![asked.expr, MARK_OPEN, MARK_CLOSE, ELLIPSIS, asked.tokens],
            |r| r.get(0),
        )
        .optional()?;
    c.prepare_cached(&format!("DELETE FROM snippets.{table}"))?
        .execute([])?;
    Ok(marked.map(|m| Snippet::from_marked(&m)).unwrap_or_default())
}

/// Which part of its document's text `row` is: 0 for the first (its rowid is
/// the document's id), else how many of the document's live further parts
/// are at or below its rowid (a text's parts are staged in order, at rising
/// rowids).
fn part_number(c: &Connection, row: &MatchedRow<'_>) -> rusqlite::Result<usize> {
    if row.rowid < PART_ROWID_BASE {
        return Ok(0);
    }
    let n: i64 = c
        .prepare_cached(
            "SELECT count(*) FROM search_parts WHERE doc = ?1 AND state = 'live' AND rowid <= ?2",
        )?
        .query_row(params![row.doc, row.rowid], |r| r.get(0))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Part `n` of the result file at `rel_path`: at most one part in memory.
/// None when the file cannot be opened or read that far (a part that could
/// not be read is not counted as one, so no later part stands in for it).
fn read_part(mirror: &Mirror, rel_path: &str, n: usize) -> Option<String> {
    let file = mirror.open_result(rel_path).ok()?;
    let mut parts = PartReader::new(BufReader::new(file));
    for _ in 0..n {
        parts.next()?.ok()?;
    }
    parts.next()?.ok()
}

/// The FTS5 table snippets are cut in for `tokenizer`, in the connection's
/// in-memory `snippets` database (attached on first use), made on first
/// use; its name. Its columns are the index's, so any expression the index
/// took (`title:`, `path:`) is taken here too. Nothing is written to the
/// store's file, so a search on a read-only store cuts snippets as well.
fn scratch_table(c: &Connection, tokenizer: Tokenizer) -> rusqlite::Result<&'static str> {
    let table = match tokenizer {
        Tokenizer::Trigram => "search_snippet_trigram",
        Tokenizer::Unicode61 | Tokenizer::PgSimple => "search_snippet_words",
    };
    let attached: bool = c
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM pragma_database_list WHERE name = 'snippets')")?
        .query_row([], |r| r.get(0))?;
    if !attached {
        c.execute_batch("ATTACH DATABASE ':memory:' AS snippets")?;
    }
    // The tokenizer's spec is a constant of `Tokenizer`, never user text.
    c.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS snippets.{table} USING fts5 (
             body, title, author, path UNINDEXED, checksum UNINDEXED, tokenize = '{}')",
        tokenizer.spec()
    ))?;
    Ok(table)
}
