//! Figures drawn from the history table for `leasehold metrics` and the
//! report, on both engines: what every process did, read from the store, so
//! any process (or none) sees the same numbers.
//!
//! The statements take no parameters and use SQL both engines read alike, so
//! the whole reading is written here once, over [`ReadRows`]; each engine
//! only runs a statement and hands over its rows.
//!
//! The figures count the lines the history still holds: `gc`'s retention
//! ([`crate::StoreOptions::history_keep`]) removes old ones, which a
//! monitoring system sees as a counter reset.

use std::collections::BTreeMap;

use super::read::ReadRows;
use crate::clock::Millis;

/// Lines per event name.
const EVENTS: &str = "SELECT event, count(*) FROM history GROUP BY event";

/// Claims that took over a lease that was over (the claim's detail says so,
/// `store/write.rs: claim_detail`).
const TAKEOVERS: &str =
    "SELECT count(*) FROM history WHERE event = 'claimed' AND detail LIKE '%took over from fence%'";

/// Failure reasons (accepted `fail`s and burials) and how often each was given.
const FAILURES: &str = "SELECT event, coalesce(detail, ''), count(*) FROM history
      WHERE event IN ('failed', 'dead') GROUP BY event, detail";

/// Each accepted completion's document key and the time from its claim (the
/// `claimed` line with the same token) to the completion.
const EXTRACTIONS: &str = "SELECT j.doc_key, d.at - c.at
       FROM history d
       JOIN history c ON c.job_id = d.job_id AND c.token = d.token AND c.event = 'claimed'
       JOIN jobs j ON j.id = d.job_id
      WHERE d.event = 'completed'";

/// Every history line with its document's key and status, oldest first: the
/// raw material of `leasehold report --html`.
const LINES: &str = "SELECT h.job_id, h.at, h.event, coalesce(h.detail, ''), j.doc_key, j.status
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

/// The history's figures for `leasehold metrics` (see [`HistoryFigures`]).
pub(crate) fn history_figures<R: ReadRows + ?Sized>(c: &mut R) -> Result<HistoryFigures, R::Error> {
    let mut f = HistoryFigures::default();
    c.each_row(EVENTS, &mut |r| {
        f.events.insert(r.text(0)?, count(r.int(1)?));
        Ok(())
    })?;
    c.each_row(TAKEOVERS, &mut |r| {
        f.takeovers = count(r.int(0)?);
        Ok(())
    })?;
    c.each_row(FAILURES, &mut |r| {
        f.failures.push((r.text(0)?, r.text(1)?, count(r.int(2)?)));
        Ok(())
    })?;
    c.each_row(EXTRACTIONS, &mut |r| {
        f.extractions.push((r.text(0)?, r.int(1)?));
        Ok(())
    })?;
    Ok(f)
}

/// Every history line, oldest first, with its document's key and status
/// (see [`HistoryLine`]).
pub(crate) fn history_lines<R: ReadRows + ?Sized>(c: &mut R) -> Result<Vec<HistoryLine>, R::Error> {
    let mut out = Vec::new();
    c.each_row(LINES, &mut |r| {
        out.push(HistoryLine {
            job_id: r.int(0)?,
            at: r.int(1)?,
            event: r.text(2)?,
            detail: r.text(3)?,
            key: r.text(4)?,
            status: r.text(5)?,
        });
        Ok(())
    })?;
    Ok(out)
}
