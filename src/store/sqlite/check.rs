//! The read-only checks `leasehold doctor` runs on a SQLite store (through
//! the store's read connections), beside SQLite's own `integrity_check`:
//! lease invariants read without indexes (so that a damaged index cannot
//! hide a duplicate), the accepted results page by page, and the search
//! index's pages.

use rusqlite::{Connection, OptionalExtension};

use super::rows::Rows;
use crate::store::check::{
    accepted_result_from, broken_owner, indexed_row_from, shared_key, shared_token, AcceptedResult,
    CheckReads, IndexedRow, IntegrityProblem, ACCEPTED_COLUMNS, INDEXED_COLUMNS,
};

/// Run SQLite's `quick_check` (or the full `integrity_check`); the problems found.
pub(crate) fn integrity(c: &Connection, full: bool) -> rusqlite::Result<Vec<String>> {
    let sql = if full {
        "PRAGMA integrity_check"
    } else {
        "PRAGMA quick_check"
    };
    with_current_search_structure(c, |c| {
        let mut stmt = c.prepare(sql)?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        let lines = rows.collect::<rusqlite::Result<Vec<String>>>()?;
        Ok(lines.into_iter().filter(|l| l != "ok").collect())
    })
}

/// Run `check` (SQLite's integrity checks, which ask FTS5 to check the
/// search index) in one read transaction that first opens a cursor on the
/// index.
///
/// Why: FTS5 keeps each connection's copy of the index's structure (which
/// segments exist) from its last read, and compares it with the database's
/// version only when a cursor on the table opens; its integrity check opens
/// none. On a pooled connection that read the index before another
/// connection merged segments away, the check would read the gone segments
/// and report them as corruption. The cursor opened here, in the check's
/// own snapshot, has FTS5 re-read the structure when the database moved.
/// Its error (a damaged index) is left for the check to report.
fn with_current_search_structure<T>(
    c: &Connection,
    check: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let tx = c.unchecked_transaction()?;
    let _ = tx.query_row("SELECT count(*) FROM search_text WHERE rowid = 0", [], |r| {
        r.get::<_, i64>(0)
    });
    let out = check(&tx);
    drop(tx);
    out
}

/// [`integrity`]'s problems, one a line, each with the table it is about
/// ([`IntegrityProblem`]). When the whole file's check finds anything, each
/// table is checked alone (`PRAGMA integrity_check(TABLE)`: its b-tree and
/// its indexes; for the FTS5 table, FTS5's own check), which tells whose
/// pages are damaged whatever SQLite's wording. A check that stops at a page
/// it cannot read counts that error as its one line. Lines of the whole
/// check no table's check gives ("Page N: never used", the free list) are
/// the index's when every damaged table is the index's (pages of its
/// damaged b-trees), else nobody's.
pub(crate) fn integrity_by_table(c: &Connection, full: bool) -> rusqlite::Result<Vec<IntegrityProblem>> {
    with_current_search_structure(c, |c| problems_by_table(c, full))
}

/// [`integrity_by_table`] in its read transaction.
fn problems_by_table(c: &Connection, full: bool) -> rusqlite::Result<Vec<IntegrityProblem>> {
    let pragma = if full { "integrity_check" } else { "quick_check" };
    let whole = checked_lines(c, &format!("PRAGMA {pragma}"))?;
    if whole.is_empty() {
        return Ok(Vec::new());
    }
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for table in tables {
        let quoted = table.replace('"', "\"\"");
        for line in checked_lines(c, &format!("PRAGMA {pragma}(\"{quoted}\")"))? {
            out.push(IntegrityProblem {
                line,
                table: Some(table.clone()),
            });
        }
    }
    let explained = !out.is_empty();
    let index_only = explained && out.iter().all(IntegrityProblem::is_search_index);
    for line in whole {
        if out.iter().any(|p| p.line == line) || (explained && line.starts_with(CHECK_STOPPED)) {
            continue;
        }
        let table = index_only.then(|| "search_text".to_owned());
        out.push(IntegrityProblem { line, table });
    }
    Ok(out)
}

/// How [`checked_lines`] begins the line of a check stopped by an error.
const CHECK_STOPPED: &str = "the check stopped: ";

/// The problem lines a check pragma (`sql`) gives, one a line (SQLite puts
/// several in one row, after a "*** in database" header); a check that
/// stops at a corrupt page, its error as the last line.
fn checked_lines(c: &Connection, sql: &str) -> rusqlite::Result<Vec<String>> {
    let corrupt = |e: &rusqlite::Error| e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseCorrupt);
    let mut stmt = match c.prepare(sql) {
        Ok(stmt) => stmt,
        Err(e) if corrupt(&e) => return Ok(vec![format!("{CHECK_STOPPED}{e}")]),
        Err(e) => return Err(e),
    };
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    loop {
        match rows.next() {
            Ok(Some(row)) => {
                let text: String = row.get(0)?;
                out.extend(
                    text.lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty() && *l != "ok" && !l.starts_with("*** in database"))
                        .map(str::to_owned),
                );
            }
            Ok(None) => return Ok(out),
            Err(e) if corrupt(&e) => {
                out.push(format!("{CHECK_STOPPED}{e}"));
                return Ok(out);
            }
            Err(e) => return Err(e),
        }
    }
}

/// What is wrong with the search index's own structures (FTS5's inverted
/// index against its stored texts, e.g. "malformed inverted index"), empty
/// when it is sound. SQLite's integrity check of that one table, which asks
/// FTS5: a read, where FTS5's `'integrity-check'` command is an INSERT that
/// takes the write lock; then the b-trees of its shadow tables. An index too
/// damaged to be read answers with SQLite's error as a problem.
pub(crate) fn search_index_damage(c: &Connection) -> rusqlite::Result<Vec<String>> {
    with_current_search_structure(c, |c| {
        let mut out = Vec::new();
        for table in INDEX_TABLES {
            out.extend(checked_lines(c, &format!("PRAGMA integrity_check({table})"))?);
        }
        Ok(out)
    })
}

/// The search index's tables: FTS5's own check of `search_text`, then the
/// b-trees of its shadow tables and of `search_parts` (a damaged page there
/// is not always met by FTS5's check: the content table's, say).
const INDEX_TABLES: [&str; 7] = [
    "search_text",
    "search_text_data",
    "search_text_idx",
    "search_text_content",
    "search_text_docsize",
    "search_text_config",
    "search_parts",
];

/// A cheap sign that the search index is damaged, for a search that found
/// nothing (is "no match" the truth?): the first and the last indexed text
/// are each searched for by a word of their own, through the index as any
/// query is. A text its own word does not find means the index lost terms
/// (FTS5 reads a zeroed page as one without terms, and answers no match).
/// Only documented interfaces: the table's rows and MATCH. Not FTS5's full
/// check (that reads every page and tokenizes every text), which
/// [`search_index_damage`] runs. None when both texts are found.
///
/// A table that keeps no copy of its texts is probed with a word of the
/// first and the last document's indexed title (every document has one:
/// its own, else its file name), whose terms are in the same segments.
pub(crate) fn search_finds_itself(c: &Connection) -> rusqlite::Result<Option<String>> {
    let mut probe =
        c.prepare_cached("SELECT count(*) FROM search_text WHERE search_text MATCH ?1 AND rowid = ?2")?;
    let keeps_text = crate::store::sqlite::search_table::keeps_text(c)?;
    for end in ["ASC", "DESC"] {
        let sql = match keeps_text {
            true => {
                format!("SELECT rowid, substr(body, 1, 4096) FROM search_text ORDER BY rowid {end} LIMIT 1")
            }
            false => format!(
                "SELECT rowid, '' FROM search_text WHERE rowid < {} ORDER BY rowid {end} LIMIT 1",
                crate::store::sqlite::search_index::PART_ROWID_BASE
            ),
        };
        let row: Option<(i64, String)> = c.query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
        let Some((rowid, mut text)) = row else {
            return Ok(None);
        };
        if !keeps_text {
            let labels = crate::store::sqlite::search_index::indexed_labels_of(c, rowid)?;
            text = labels.title.unwrap_or_default();
        }
        let Some(word) = own_word(&text) else {
            continue;
        };
        let found: i64 = probe.query_row(rusqlite::params![format!("\"{word}\""), rowid], |r| r.get(0))?;
        if found == 0 {
            return Ok(Some(format!(
                "indexed text {rowid} is not found by its own word {word:?}"
            )));
        }
    }
    Ok(None)
}

/// A word of `text` that any of the index's tokenizers keeps whole: ASCII
/// letters and digits, at least three (trigram's shortest term), between
/// ASCII separators or the text's ends. A run touching any other character
/// is passed over, since that character may belong to the token.
fn own_word(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        if !bytes[start].is_ascii_alphanumeric() {
            start += 1;
            continue;
        }
        let end = start
            + bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric())
                .count();
        let before_ok = start == 0 || bytes[start - 1].is_ascii();
        let after_ok = end == bytes.len() || bytes[end].is_ascii();
        if before_ok && after_ok && end - start >= 3 {
            return Some(&text[start..end]);
        }
        start = end;
    }
    None
}

impl CheckReads for Rows<'_> {
    /// Up to `limit` indexed rows with ids after `after`, in id order.
    fn indexed_page(&mut self, after: i64, limit: i64) -> rusqlite::Result<Vec<IndexedRow>> {
        let conn = self.0;
        let sql = format!(
            "SELECT {INDEXED_COLUMNS} FROM jobs WHERE status = 'indexed' AND id > ?1 ORDER BY id LIMIT ?2"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([after, limit], |r| indexed_row_from(r))?;
        rows.collect()
    }

    fn accepted_page(&mut self, after: i64, limit: i64) -> rusqlite::Result<Vec<AcceptedResult>> {
        let sql = format!(
            "SELECT {ACCEPTED_COLUMNS} FROM jobs WHERE status = 'indexed' AND id > ?1 ORDER BY id LIMIT ?2"
        );
        let mut stmt = self.0.prepare_cached(&sql)?;
        let rows = stmt.query_map([after, limit], |r| accepted_result_from(r))?;
        rows.collect()
    }

    /// (subject, message) for every row that breaks "at most one live owner".
    fn lease_violations(&mut self) -> rusqlite::Result<Vec<(String, String)>> {
        let conn = self.0;
        let mut out = Vec::new();
        let mut stmt = conn
            .prepare("SELECT doc_key, count(*) FROM jobs NOT INDEXED GROUP BY doc_key HAVING count(*) > 1")?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (key, n) = row?;
            out.push(shared_key(key, n));
        }
        let mut stmt = conn.prepare(
            "SELECT doc_key, status, owner_token IS NULL OR owner_token = ''
             FROM jobs NOT INDEXED
             WHERE (status = 'extracting' AND (owner_token IS NULL OR owner_token = '' OR lease_expires_at IS NULL))
                OR (status <> 'extracting' AND owner_token IS NOT NULL)",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, bool>(2)?,
            ))
        })?;
        for row in rows {
            let (key, status, no_token) = row?;
            out.push(broken_owner(key, &status, no_token));
        }
        let mut stmt = conn.prepare(
            "SELECT count(*), min(doc_key) FROM jobs NOT INDEXED
             WHERE owner_token IS NOT NULL GROUP BY owner_token HAVING count(*) > 1",
        )?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))? {
            let (n, key) = row?;
            out.push(shared_token(key, n));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{integrity, own_word, search_index_damage};
    use rusqlite::Connection;

    /// Two connections to one file holding a search index of several
    /// segments, each written by its own transaction.
    fn two_connections(dir: &std::path::Path) -> (Connection, Connection) {
        let path = dir.join("t.db");
        let a = Connection::open(&path).unwrap();
        a.execute_batch(
            "CREATE VIRTUAL TABLE search_text USING fts5 (body);
             CREATE TABLE search_parts (rowid INTEGER PRIMARY KEY);
             INSERT INTO search_text (search_text, rank) VALUES ('secure-delete', 0);",
        )
        .unwrap();
        for i in 0..8 {
            a.execute(
                "INSERT INTO search_text (body) VALUES (?1)",
                [format!("amber stone {i}")],
            )
            .unwrap();
        }
        (a, Connection::open(&path).unwrap())
    }

    /// FTS5 keeps the index's structure from its last read on a connection
    /// and re-reads it only when a cursor opens; its integrity check opens
    /// none. A check after another connection merged the segments away must
    /// still read the index as it is now.
    #[test]
    fn a_check_after_another_connection_merged_reads_the_index_as_it_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two_connections(dir.path());
        assert_eq!(search_index_damage(&a).unwrap(), Vec::<String>::new());
        assert_eq!(integrity(&a, true).unwrap(), Vec::<String>::new());
        b.execute("DELETE FROM search_text WHERE rowid % 2 = 0", [])
            .unwrap();
        b.execute("INSERT INTO search_text (search_text) VALUES ('optimize')", [])
            .unwrap();
        assert_eq!(search_index_damage(&a).unwrap(), Vec::<String>::new());
        assert_eq!(integrity(&a, true).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn an_own_word_is_ascii_whole_and_long_enough_for_every_tokenizer() {
        assert_eq!(own_word("an amber-coloured stone"), Some("amber"));
        assert_eq!(own_word("of 42 x"), None);
        // A run that touches another character may be part of a longer token.
        assert_eq!(own_word("naïve résumé ok fine"), Some("fine"));
        assert_eq!(own_word("計画abc 12345"), Some("12345"));
        assert_eq!(own_word(""), None);
    }
}
