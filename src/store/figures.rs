//! Figures drawn from the history table for `leasehold metrics`, on both
//! engines: what every process did, read from the store, so any process (or
//! none) sees the same numbers.
//!
//! The statements take no parameters and use SQL both engines read alike, so
//! one text serves both (`postgres/figures.rs` runs them there).
//!
//! The figures count the lines the history still holds: `gc`'s retention
//! ([`crate::StoreOptions::history_keep`]) removes old ones, which a
//! monitoring system sees as a counter reset.

use std::collections::BTreeMap;

use rusqlite::Connection;

use super::engine::Backend;
use super::Store;
use crate::clock::Millis;
use crate::error::Result;

/// Lines per event name.
pub(crate) const EVENTS: &str = "SELECT event, count(*) FROM history GROUP BY event";

/// Claims that took over a lease that was over (the claim's detail says so,
/// `store/write.rs: claim_detail`).
pub(crate) const TAKEOVERS: &str =
    "SELECT count(*) FROM history WHERE event = 'claimed' AND detail LIKE '%took over from fence%'";

/// Failure reasons (accepted `fail`s and burials) and how often each was given.
pub(crate) const FAILURES: &str = "SELECT event, coalesce(detail, ''), count(*) FROM history
      WHERE event IN ('failed', 'dead') GROUP BY event, detail";

/// Each accepted completion's document key and the time from its claim (the
/// `claimed` line with the same token) to the completion.
pub(crate) const EXTRACTIONS: &str = "SELECT j.doc_key, d.at - c.at
       FROM history d
       JOIN history c ON c.job_id = d.job_id AND c.token = d.token AND c.event = 'claimed'
       JOIN jobs j ON j.id = d.job_id
      WHERE d.event = 'completed'";

/// Every history line with its document's key and status, oldest first: the
/// raw material of `leasehold report --html`.
pub(crate) const LINES: &str = "SELECT h.job_id, h.at, h.event, coalesce(h.detail, ''), j.doc_key, j.status
       FROM history h JOIN jobs j ON j.id = h.job_id
      ORDER BY h.at, h.job_id, h.seq";

/// One history line as the report draws it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryLine {
    /// The document's row id.
    pub job_id: i64,
    /// When (ms from the injected clock).
    pub at: Millis,
    /// `claimed`, `completed`, `failed`, `complete_rejected`, ...
    pub event: String,
    /// The line's detail (a failure's reason, a takeover's wording).
    pub detail: String,
    /// The document's key.
    pub key: String,
    /// The document's status now.
    pub status: String,
}

/// What the history says about the work done, as `leasehold metrics` needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryFigures {
    /// Lines per event (`claimed`, `completed`, `complete_rejected`, ...).
    pub events: BTreeMap<String, u64>,
    /// Claims that took over a lease that was over.
    pub takeovers: u64,
    /// (event, reason, count) of every `failed` and `dead` line.
    pub failures: Vec<(String, String, u64)>,
    /// (document key, milliseconds from claim to accepted completion).
    pub extractions: Vec<(String, Millis)>,
}

fn count(n: i64) -> u64 {
    n.max(0) as u64
}

fn sqlite_figures(c: &Connection) -> rusqlite::Result<HistoryFigures> {
    let mut f = HistoryFigures::default();
    let mut stmt = c.prepare(EVENTS)?;
    for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
        let (event, n) = row?;
        f.events.insert(event, count(n));
    }
    f.takeovers = count(c.query_row(TAKEOVERS, [], |r| r.get(0))?);
    let mut stmt = c.prepare(FAILURES)?;
    for row in stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, count(r.get(2)?))))? {
        f.failures.push(row?);
    }
    let mut stmt = c.prepare(EXTRACTIONS)?;
    for row in stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))? {
        f.extractions.push(row?);
    }
    Ok(f)
}

fn sqlite_lines(c: &Connection) -> rusqlite::Result<Vec<HistoryLine>> {
    let mut stmt = c.prepare(LINES)?;
    let rows = stmt.query_map([], |r| {
        Ok(HistoryLine {
            job_id: r.get(0)?,
            at: r.get(1)?,
            event: r.get(2)?,
            detail: r.get(3)?,
            key: r.get(4)?,
            status: r.get(5)?,
        })
    })?;
    rows.collect()
}

impl Store {
    /// Every history line, oldest first, with its document's key and status
    /// (see [`HistoryLine`]). Reads the whole table: what `gc`'s retention
    /// keeps bounds it.
    pub fn history_lines(&self) -> Result<Vec<HistoryLine>> {
        match &self.inner.backend {
            Backend::Sqlite(s) => s.read(sqlite_lines),
            #[cfg(feature = "postgres")]
            Backend::Postgres(p) => super::postgres::figures::history_lines(p),
        }
    }

    /// The history's figures for `leasehold metrics` (see [`HistoryFigures`]).
    pub fn history_figures(&self) -> Result<HistoryFigures> {
        match &self.inner.backend {
            Backend::Sqlite(s) => s.read(sqlite_figures),
            #[cfg(feature = "postgres")]
            Backend::Postgres(p) => super::postgres::figures::history_figures(p),
        }
    }
}
