//! History retention: `gc` removes history lines older than
//! [`StoreOptions::history_keep`](super::StoreOptions::history_keep), on both
//! engines.
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

use rusqlite::{params, Connection};

use super::engine::Backend;
use super::Store;
use crate::clock::{duration_ms, Millis};
use crate::error::Result;

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

/// The three counts over documents `lo <= job_id < hi`. `?3` is the cutoff.
const COUNT_SQLITE: &str = "SELECT count(*) FILTER (WHERE h.seq < m.last),
            count(*) FILTER (WHERE h.seq < m.last AND h.event LIKE '%!_rejected' ESCAPE '!'),
            count(*) FILTER (WHERE h.seq = m.last)
       FROM history h
       JOIN (SELECT job_id, max(seq) AS last FROM history
              WHERE job_id >= ?1 AND job_id < ?2 GROUP BY job_id) m ON m.job_id = h.job_id
      WHERE h.job_id >= ?1 AND h.job_id < ?2 AND h.at < ?3";

const DELETE_SQLITE: &str = "DELETE FROM history
      WHERE job_id >= ?1 AND job_id < ?2 AND at < ?3
        AND seq < (SELECT max(l.seq) FROM history l WHERE l.job_id = history.job_id)";

fn sqlite_window(
    c: &Connection,
    lo: i64,
    hi: i64,
    cutoff: Millis,
    delete: bool,
) -> rusqlite::Result<WindowCounts> {
    let counts = c.query_row(COUNT_SQLITE, params![lo, hi, cutoff], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })?;
    if delete && counts.0 > 0 {
        c.execute(DELETE_SQLITE, params![lo, hi, cutoff])?;
    }
    Ok(counts)
}

impl Store {
    /// Apply the history retention ([`StoreOptions::history_keep`](super::StoreOptions::history_keep)):
    /// remove every history line older than it except each document's last;
    /// with `dry_run`, only count. "Now" is the injected clock's.
    pub fn prune_history(&self, dry_run: bool) -> Result<HistoryPrune> {
        let keep = duration_ms(self.inner.opts.history_keep);
        let cutoff = self.now().saturating_sub(keep);
        let mut total = HistoryPrune {
            cutoff,
            ..HistoryPrune::default()
        };
        let last = self.last_history_job()?;
        let mut lo = 0;
        while lo <= last {
            let hi = lo.saturating_add(WINDOW);
            let (removed, rejected, kept) = self.prune_window(lo, hi, cutoff, !dry_run)?;
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

    /// The highest document id with history (0 for none).
    fn last_history_job(&self) -> Result<i64> {
        match &self.inner.backend {
            Backend::Sqlite(s) => {
                s.read(|c| c.query_row("SELECT coalesce(max(job_id), 0) FROM history", [], |r| r.get(0)))
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(p) => super::postgres::retention::last_history_job(p),
        }
    }

    fn prune_window(&self, lo: i64, hi: i64, cutoff: Millis, delete: bool) -> Result<WindowCounts> {
        match &self.inner.backend {
            Backend::Sqlite(s) if delete => s.write_tx(|tx, _| sqlite_window(tx, lo, hi, cutoff, true)),
            Backend::Sqlite(s) => s.read(|c| sqlite_window(c, lo, hi, cutoff, false)),
            #[cfg(feature = "postgres")]
            Backend::Postgres(p) => super::postgres::retention::prune_window(p, lo, hi, cutoff, delete),
        }
    }
}
