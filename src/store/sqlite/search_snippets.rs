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
//! `snippet()` of the stored copy too. A result missing from the mirror, or
//! no mirror given, gives an empty snippet: the hit is still found.

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
/// when there is no mirror, the file cannot be read, or it no longer holds
/// the part (a result is written once, so only damage does that).
pub(crate) fn snippet(
    c: &Connection,
    mirror: Option<&Mirror>,
    row: &MatchedRow<'_>,
    asked: &Asked<'_>,
) -> rusqlite::Result<Snippet> {
    let Some(mirror) = mirror else {
        return Ok(Snippet::default());
    };
    let part = part_number(c, row)?;
    let Some(text) = read_part(mirror, row.result_path, part) else {
        return Ok(Snippet::default());
    };
    let labels = indexed_labels_of(c, row.doc)?;
    let table = scratch_table(c, asked.tokenizer)?;
    c.prepare_cached(&format!("DELETE FROM temp.{table}"))?
        .execute([])?;
    c.prepare_cached(&format!(
        "INSERT INTO temp.{table} (rowid, body, title, author) VALUES (1, ?1, ?2, ?3)"
    ))?
    .execute(params![text, labels.title, labels.author])?;
    let marked: Option<String> = c
        .prepare_cached(&format!(
            "SELECT snippet({table}, 0, ?2, ?3, ?4, ?5) FROM temp.{table} WHERE {table} MATCH ?1"
        ))?
        .query_row(
            params![asked.expr, MARK_OPEN, MARK_CLOSE, ELLIPSIS, asked.tokens],
            |r| r.get(0),
        )
        .optional()?;
    c.prepare_cached(&format!("DELETE FROM temp.{table}"))?
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
fn read_part(mirror: &Mirror, rel_path: &str, n: usize) -> Option<String> {
    let file = mirror.open_result(rel_path).ok()?;
    PartReader::new(BufReader::new(file)).nth(n)?.ok()
}

/// The temporary FTS5 table snippets are cut in for `tokenizer`, made on
/// first use on this connection; its name. In the temp schema, so a search
/// on a read-only store writes nothing to the file.
fn scratch_table(c: &Connection, tokenizer: Tokenizer) -> rusqlite::Result<&'static str> {
    let table = match tokenizer {
        Tokenizer::Trigram => "search_snippet_trigram",
        Tokenizer::Unicode61 | Tokenizer::PgSimple => "search_snippet_words",
    };
    // The tokenizer's spec is a constant of `Tokenizer`, never user text.
    c.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table} USING fts5 (body, title, author, tokenize = '{}')",
        tokenizer.spec()
    ))?;
    Ok(table)
}
