//! The vocabulary of the read-only checks `leasehold doctor` runs, and what
//! both engines say about a broken lease. The checks themselves are each
//! engine's: `sqlite/check.rs` (beside SQLite's own integrity check) and
//! `postgres/read.rs`.

use super::driver::Rows;
use super::read::{bytes, Columns};

/// The reads of `doctor`'s checks that each engine answers in its own SQL.
pub(crate) trait CheckReads: Rows {
    /// Rows that break the lease columns' rules, (subject, message).
    fn lease_violations(&mut self) -> Result<Vec<(String, String)>, Self::Error>;
    /// Up to `limit` indexed documents after id `after`, by id.
    fn indexed_page(&mut self, after: i64, limit: i64) -> Result<Vec<IndexedRow>, Self::Error>;
    /// [`CheckReads::indexed_page`] as a rerun's look at each result needs
    /// it: the path and the size, without the key and the checksum.
    fn accepted_page(&mut self, after: i64, limit: i64) -> Result<Vec<AcceptedResult>, Self::Error>;
}

/// One problem an integrity check found, and the table it is about when
/// the line names one (through a b-tree's root page, an index or an FTS5
/// table): what mends it depends on whose pages are damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntegrityProblem {
    /// SQLite's line.
    pub line: String,
    /// The table, when the line tells which.
    pub table: Option<String>,
}

impl IntegrityProblem {
    /// Whether the problem is the search index's (its FTS5 table, a shadow
    /// table of it, or `search_parts`): rebuilding the index from the mirror
    /// mends it (`leasehold reindex`). A line naming no table is not.
    pub fn is_search_index(&self) -> bool {
        self.table
            .as_deref()
            .is_some_and(crate::store::search::is_index_table)
    }
}

/// One indexed row, as the results check needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedRow {
    /// The document's id.
    pub id: i64,
    /// The document's key.
    pub key: String,
    /// The accepted result, relative to the mirror root.
    pub result_path: Option<String>,
    /// Its SHA-256.
    pub checksum: Option<String>,
    /// Its size in bytes, when the completion recorded it.
    pub result_bytes: Option<u64>,
}

/// An indexed row's columns, in the order [`indexed_row_from`] reads them.
pub(crate) const INDEXED_COLUMNS: &str = "id, doc_key, result_path, checksum, result_bytes";

/// An indexed row from the [`INDEXED_COLUMNS`] of a row.
pub(crate) fn indexed_row_from<C: Columns + ?Sized>(r: &C) -> Result<IndexedRow, C::Error> {
    Ok(IndexedRow {
        id: r.int(0)?,
        key: r.text(1)?,
        result_path: r.opt_text(2)?,
        checksum: r.opt_text(3)?,
        result_bytes: bytes(r.opt_int(4)?),
    })
}

/// One indexed document's accepted result, as a rerun's look at it needs
/// it ([`crate::pipeline::recheck_results`]): a rerun reads one a document,
/// and without the key and the checksum the page reads a third faster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedResult {
    /// The document's id.
    pub id: i64,
    /// The accepted result, relative to the mirror root.
    pub result_path: String,
    /// Its size in bytes, when the completion recorded it.
    pub result_bytes: Option<u64>,
}

/// An accepted result's columns, in the order [`accepted_result_from`] reads them.
pub(crate) const ACCEPTED_COLUMNS: &str = "id, result_path, result_bytes";

/// An accepted result from the [`ACCEPTED_COLUMNS`] of a row.
pub(crate) fn accepted_result_from<C: Columns + ?Sized>(r: &C) -> Result<AcceptedResult, C::Error> {
    Ok(AcceptedResult {
        id: r.int(0)?,
        result_path: r.text(1)?,
        result_bytes: bytes(r.opt_int(2)?),
    })
}

/// A lease violation, (subject, message): `n` rows share document key `key`.
pub(crate) fn shared_key(key: String, n: i64) -> (String, String) {
    let message = format!("{key:?}: {n} rows share this document key");
    (key, message)
}

/// A lease violation, (subject, message): document `key` is `status` with
/// owner columns that status forbids (extracting without a token, or
/// without an expiry; anything else with a token).
pub(crate) fn broken_owner(key: String, status: &str, no_token: bool) -> (String, String) {
    let what = match (status, no_token) {
        ("extracting", true) => "is extracting without an owner token".to_string(),
        ("extracting", false) => "is extracting without a lease expiry".to_string(),
        _ => format!("is {status} but still holds an owner token"),
    };
    let message = format!("{key:?}: {what}");
    (key, message)
}

/// A lease violation, (subject, message): the owner token of document `key`
/// is held by `n` documents. The token is a claim's capability: named by
/// the document, never printed.
pub(crate) fn shared_token(key: String, n: i64) -> (String, String) {
    let message = format!("{key:?}: its owner token is shared by {n} documents");
    (key, message)
}
