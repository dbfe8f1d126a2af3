//! Snippets of a word index that keeps no copy of its texts: the text of
//! the row that matched is read back from the accepted result in the mirror
//! (the index holds that file's text, cut in parts as
//! [`crate::store::search::parts`] cuts it), put alone into a small FTS5
//! table made with the same tokenizer and columns, and FTS5's own
//! `snippet()` cuts it there: the same terms, marks and choice of fragment
//! as a table that keeps its texts gives.
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
//! is not written anywhere the store does not keep it. It holds the last
//! snippet's text until the next one (at most a part).

use std::io::BufReader;

use rusqlite::{params, Connection, OptionalExtension};

use crate::mirror::Mirror;
use crate::store::search::parts::PartReader;
use crate::store::search::{Labels, Snippet, Tokenizer, ELLIPSIS, MARK_CLOSE, MARK_OPEN};
use crate::store::sqlite::search_index::PART_ROWID_BASE;

/// A matched row of the index: its rowid, its document, the accepted result
/// (a path relative to the mirror) its text came from, and the document's
/// title and author as the index holds them.
pub(crate) struct MatchedRow<'a> {
    pub(crate) rowid: i64,
    pub(crate) doc: i64,
    pub(crate) result_path: &'a str,
    pub(crate) labels: Labels,
}

/// Cuts the snippets of one search: its expression, about how many terms a
/// snippet shows, and the table they are cut in, made once for the search.
/// A snippet shows a hit, it never stops the search: no mirror, a file that
/// cannot be read, or a cut that fails give an empty one. Only the search's
/// time limit (an interrupt) goes on as an error.
pub(crate) struct Cutter<'a> {
    conn: &'a Connection,
    mirror: Option<&'a Mirror>,
    expr: &'a str,
    tokens: i64,
    /// The table to cut in; None: no snippets (no mirror, or the table
    /// could not be made).
    table: Option<&'static str>,
}

impl<'a> Cutter<'a> {
    pub(crate) fn new(
        conn: &'a Connection,
        mirror: Option<&'a Mirror>,
        tokenizer: Tokenizer,
        expr: &'a str,
        tokens: i64,
    ) -> rusqlite::Result<Self> {
        let table = match mirror {
            Some(_) => or_empty(scratch_table(conn, tokenizer))?,
            None => None,
        };
        Ok(Cutter {
            conn,
            mirror,
            expr,
            tokens,
            table,
        })
    }

    /// The snippet of `row`, cut from its text in the mirror.
    pub(crate) fn snippet(&self, row: &MatchedRow<'_>) -> rusqlite::Result<Snippet> {
        let (Some(mirror), Some(table)) = (self.mirror, self.table) else {
            return Ok(Snippet::default());
        };
        Ok(or_empty(self.cut(mirror, table, row))?.unwrap_or_default())
    }

    /// [`Cutter::snippet`]'s work, every error returned. The text goes into
    /// the table inside a savepoint that is rolled back after the cut: FTS5
    /// keeps a transaction's new rows in memory, where its queries read them,
    /// so the row is never written out as a segment of the table (a flush,
    /// and merges, at the end of every statement outside a transaction) and
    /// nothing of it is left to delete before the next. That was over half
    /// of a snippet's time.
    fn cut(&self, mirror: &Mirror, table: &str, row: &MatchedRow<'_>) -> rusqlite::Result<Snippet> {
        let c = self.conn;
        let part = part_number(c, row)?;
        let Some(text) = read_part(mirror, row.result_path, part) else {
            return Ok(Snippet::default());
        };
        let marked = c
            .execute_batch("SAVEPOINT leasehold_snippet")
            .and_then(|()| self.mark(table, &text, row));
        let released = leave_savepoint(c);
        let marked = marked?;
        released?;
        Ok(marked.map(|m| Snippet::from_marked(&m)).unwrap_or_default())
    }

    /// `text` as the table's one row, and FTS5's `snippet()` of it: the
    /// matched terms between the marks (`None`: the expression does not match
    /// this part).
    fn mark(&self, table: &str, text: &str, row: &MatchedRow<'_>) -> rusqlite::Result<Option<String>> {
        let c = self.conn;
        c.prepare_cached(&format!(
            "INSERT OR REPLACE INTO snippets.{table} (rowid, body, title, author) VALUES (1, ?1, ?2, ?3)"
        ))?
        .execute(params![text, row.labels.title, row.labels.author])?;
        c.prepare_cached(&format!(
            "SELECT snippet({table}, 0, ?2, ?3, ?4, ?5) FROM snippets.{table} WHERE {table} MATCH ?1"
        ))?
        .query_row(
            params![self.expr, MARK_OPEN, MARK_CLOSE, ELLIPSIS, self.tokens],
            |r| r.get(0),
        )
        .optional()
    }
}

/// Rolls back and releases a cut's savepoint, so the connection goes back to
/// the pool as it came. Fresh statements (never cached) of a few steps each:
/// the search's time limit, a progress handler called every 1,000 steps of
/// a statement, never stops them, so an expired search still leaves it.
/// Already gone is no error: when a writing statement inside a transaction
/// (the insert) is interrupted, SQLite rolls the whole transaction back, and
/// a savepoint that failed to open was never there. An interrupted read (the
/// snippet's query) leaves the savepoint open, for this to roll back.
fn leave_savepoint(c: &Connection) -> rusqlite::Result<()> {
    match c.execute_batch("ROLLBACK TO leasehold_snippet; RELEASE leasehold_snippet") {
        Err(_) if c.is_autocommit() => Ok(()),
        done => done,
    }
}

/// `done`, with an error other than the time limit's interrupt as None.
fn or_empty<T>(done: rusqlite::Result<T>) -> rusqlite::Result<Option<T>> {
    match done {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) => Err(e),
        Err(_) => Ok(None),
    }
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
/// use; its name. Once a search. Its columns are the index's, so any expression the index
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use rusqlite::Connection;

    use super::{Cutter, MatchedRow};
    use crate::mirror::Mirror;
    use crate::store::search::{Labels, Tokenizer};

    const RESULT: &str = "s000/000/1.g000001.txt";

    fn row() -> MatchedRow<'static> {
        MatchedRow {
            rowid: 1,
            doc: 1,
            result_path: RESULT,
            labels: Labels::default(),
        }
    }

    fn rows_left(c: &Connection) -> i64 {
        c.query_row("SELECT count(*) FROM snippets.search_snippet_words", [], |r| {
            r.get(0)
        })
        .unwrap()
    }

    /// A cut leaves the connection out of any transaction and the scratch
    /// table empty, also when a statement inside its savepoint is stopped
    /// (the search's time limit): the connection goes back to the pool as it
    /// came, and the next cut on it still works.
    #[test]
    fn a_cut_leaves_no_row_and_no_transaction_even_when_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(RESULT);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "the quick brown fox jumps over the lazy dog\n").unwrap();
        let mirror = Mirror::open(dir.path()).unwrap();
        let mut c = Connection::open_in_memory().unwrap();
        // The progress handler stops the statement running at the `stop`-th
        // step counted from when a cut begins (0: never).
        let (steps, stop) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let (seen, at) = (Arc::clone(&steps), Arc::clone(&stop));
        c.progress_handler(
            1,
            Some(move || {
                let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
                n == at.load(Ordering::Relaxed)
            }),
        )
        .unwrap();
        let c = c;
        let cutter = Cutter::new(&c, Some(&mirror), Tokenizer::Unicode61, "fox", 8).unwrap();
        let cut = cutter.cut(&mirror, "search_snippet_words", &row()).unwrap();
        assert!(cut.text().contains("fox"), "{cut:?}");
        assert!(c.is_autocommit());
        assert_eq!(rows_left(&c), 0);
        // Every step of a cut, from the savepoint's opening to its release.
        steps.store(0, Ordering::Relaxed);
        cutter.cut(&mirror, "search_snippet_words", &row()).unwrap();
        let all = steps.load(Ordering::Relaxed);
        // Stopped anywhere but in the release's own few steps (which the
        // search's handler, called every 1,000 steps of a statement, never
        // reaches).
        for at in 1..=all.saturating_sub(8) {
            steps.store(0, Ordering::Relaxed);
            stop.store(at, Ordering::Relaxed);
            let stopped = cutter.cut(&mirror, "search_snippet_words", &row());
            stop.store(0, Ordering::Relaxed);
            assert!(steps.load(Ordering::Relaxed) >= at, "the cut ran to step {at}");
            let interrupted = matches!(&stopped, Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted));
            assert!(interrupted, "stop at {at}: {stopped:?}");
            assert!(c.is_autocommit(), "stop at {at}: out of the savepoint");
            assert_eq!(rows_left(&c), 0, "stop at {at}");
        }
        let again = cutter.cut(&mirror, "search_snippet_words", &row()).unwrap();
        assert_eq!(again, cut);
    }
}
