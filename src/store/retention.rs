//! History retention: `gc` removes history lines older than
//! [`StoreOptions::history_keep`](super::StoreOptions::history_keep), on both
//! engines: the rule and its windows here, each engine's statements in its
//! `retention.rs` ([`RetentionRows`]).
//!
//! Without it the history table grows by a few lines per document per run,
//! forever. What stays:
//! - every line younger than the setting, refused writes (`*_rejected`)
//!   included, so "why was this result not taken" can be answered for as long
//!   as the setting says;
//! - each document's last line, however old: `inspect` still says how the
//!   document came to be where it is, and the next line's number
//!   (`max(seq) + 1`, on both engines) is never reused.
//!
//! The sweep goes through the documents in windows of ids, one short write
//! transaction each (SQLite has one writer: one transaction over the whole
//! table would stop every worker for as long as it takes). Counts are read in
//! the transaction that deletes, so they are exact. A line written while the
//! sweep runs is newer than the cutoff, and a document's last line is never a
//! candidate, so nothing a writer does concurrently can be lost.

use super::driver::Rows;
use crate::clock::Millis;

/// Documents per window (per write transaction).
const WINDOW: i64 = 2_000;

/// What a history sweep removed, or would remove with `--dry-run`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HistoryPrune {
    /// Lines older than this (injected clock, ms) were candidates.
    pub cutoff: Millis,
    /// Lines removed (or that would be).
    pub removed: u64,
    /// Of those, refused writes (`*_rejected`).
    pub removed_rejected: u64,
    /// Lines older than the cutoff kept because each is its document's last.
    pub kept_last: u64,
}

impl HistoryPrune {
    fn add(&mut self, other: HistoryPrune) {
        self.removed += other.removed;
        self.removed_rejected += other.removed_rejected;
        self.kept_last += other.kept_last;
    }
}

/// One window's figures: (removable, removable refused writes, kept as last).
pub(crate) type WindowCounts = (i64, i64, i64);

/// The row operations of one window, in one engine's SQL.
pub(crate) trait RetentionRows: Rows {
    /// Over the history of documents `lo <= job_id < hi` older than `cutoff`:
    /// lines that are not their document's last, of those the refused
    /// writes (`*_rejected`), and lines that are their document's last.
    fn count_window(&mut self, lo: i64, hi: i64, cutoff: Millis) -> Result<WindowCounts, Self::Error>;
    /// Delete those of documents `lo <= job_id < hi` older than `cutoff`
    /// that are not their document's last.
    fn delete_window(&mut self, lo: i64, hi: i64, cutoff: Millis) -> Result<(), Self::Error>;
}

/// Count, and with `delete` remove, the removable lines of documents
/// `lo <= job_id < hi`: the counts are read in the transaction that deletes,
/// so they are exact.
pub(crate) fn window<R: RetentionRows + ?Sized>(
    rows: &mut R,
    lo: i64,
    hi: i64,
    cutoff: Millis,
    delete: bool,
) -> Result<WindowCounts, R::Error> {
    let counts = rows.count_window(lo, hi, cutoff)?;
    if delete && counts.0 > 0 {
        rows.delete_window(lo, hi, cutoff)?;
    }
    Ok(counts)
}

/// The sweep over documents `0..=last` (the highest id with history), one
/// [`WINDOW`] of ids at a time through `each` (one transaction each): the
/// sum of what each window removed, or would remove.
pub(crate) fn sweep<E>(
    cutoff: Millis,
    last: i64,
    mut each: impl FnMut(i64, i64) -> Result<WindowCounts, E>,
) -> Result<HistoryPrune, E> {
    let mut total = HistoryPrune {
        cutoff,
        ..HistoryPrune::default()
    };
    let mut lo = 0;
    while lo <= last {
        let hi = lo.saturating_add(WINDOW);
        let (removed, rejected, kept) = each(lo, hi)?;
        total.add(HistoryPrune {
            cutoff,
            removed: removed.max(0) as u64,
            removed_rejected: rejected.max(0) as u64,
            kept_last: kept.max(0) as u64,
        });
        lo = hi;
    }
    Ok(total)
}
