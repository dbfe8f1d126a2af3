//! Reads: one short statement each, finished before the connection goes back to
//! the pool (an open statement would pin a read snapshot and starve checkpoints).

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, Row};

use crate::clock::Millis;
use crate::job::{Counts, HistoryEntry, Job, LiveLease, Owner, Status};

const JOB_COLUMNS: &str = "id, doc_key, version, status, owner_token, owner_worker, fence,
    lease_expires_at, attempts, max_attempts, retry_at, last_error, result_path, checksum,
    source_gone, created_at, updated_at, lost_leases, result_bytes";

fn job_from_row(r: &Row<'_>) -> rusqlite::Result<Job> {
    let status: String = r.get(3)?;
    let status = status.parse::<Status>().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(3, rusqlite::types::Type::Text, Box::new(e))
    })?;
    Ok(Job {
        id: r.get(0)?,
        key: r.get(1)?,
        version: r.get(2)?,
        status,
        owner_token: r.get(4)?,
        owner_worker: r.get(5)?,
        fence: r.get(6)?,
        lease_expires_at: r.get(7)?,
        attempts: r.get(8)?,
        max_attempts: r.get(9)?,
        retry_at: r.get(10)?,
        last_error: r.get(11)?,
        result_path: r.get(12)?,
        checksum: r.get(13)?,
        source_gone: r.get(14)?,
        created_at: r.get(15)?,
        updated_at: r.get(16)?,
        lost_leases: r.get(17)?,
        result_bytes: r.get::<_, Option<i64>>(18)?.and_then(|b| u64::try_from(b).ok()),
    })
}

pub(crate) fn job_by_id(c: &Connection, id: i64) -> rusqlite::Result<Option<Job>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
    c.prepare_cached(&sql)?.query_row([id], job_from_row).optional()
}

/// Whether a renewal of `o`'s claim at `now` would change nothing: the
/// token owns the extracting row, its lease runs to `now + lease_ms` or later, and the
/// row was last updated at `now`.
pub(crate) fn renewal_is_noop(
    c: &Connection,
    o: &Owner,
    now: Millis,
    lease_ms: Millis,
) -> rusqlite::Result<bool> {
    c.prepare_cached(
        "SELECT 1 FROM jobs WHERE id = ?1 AND owner_token = ?2 AND status = 'extracting'
                              AND lease_expires_at >= ?3 AND updated_at = ?4",
    )?
    .exists(rusqlite::params![
        o.id.0,
        o.token,
        now.saturating_add(lease_ms),
        now
    ])
}

pub(crate) fn job_by_key(c: &Connection, key: &str) -> rusqlite::Result<Option<Job>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE doc_key = ?1");
    c.prepare_cached(&sql)?.query_row([key], job_from_row).optional()
}

pub(crate) fn history(c: &Connection, id: i64) -> rusqlite::Result<Vec<HistoryEntry>> {
    let mut stmt = c.prepare_cached(
        "SELECT job_id, at, event, token, fence, detail FROM history WHERE job_id = ?1 ORDER BY seq",
    )?;
    let rows = stmt.query_map([id], |r| {
        Ok(HistoryEntry {
            job_id: r.get(0)?,
            at: r.get(1)?,
            event: r.get(2)?,
            token: r.get(3)?,
            fence: r.get(4)?,
            detail: r.get(5)?,
        })
    })?;
    rows.collect()
}

pub(crate) fn counts(c: &Connection) -> rusqlite::Result<Counts> {
    let mut stmt = c.prepare_cached("SELECT status, count(*) FROM jobs GROUP BY status")?;
    let mut counts = Counts::default();
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    for row in rows {
        let (status, n) = row?;
        if let Ok(s) = status.parse::<Status>() {
            counts.add(s, n.max(0) as u64);
        }
    }
    Ok(counts)
}

/// Leases that are not over: not expired, and not granted after now (the clock
/// went back; see `write.rs`).
pub(crate) fn live_leases(c: &Connection, now: Millis) -> rusqlite::Result<Vec<LiveLease>> {
    let mut stmt = c.prepare_cached(
        "SELECT id, doc_key, owner_token, owner_worker, fence, lease_expires_at FROM jobs
         WHERE status = 'extracting' AND lease_expires_at > ?1
           AND NOT coalesce(lease_expires_at - lease_ms > ?1, 0)
         ORDER BY lease_expires_at",
    )?;
    let rows = stmt.query_map([now], |r| {
        Ok(LiveLease {
            id: r.get(0)?,
            key: r.get(1)?,
            owner_token: r.get(2)?,
            owner_worker: r.get(3)?,
            fence: r.get(4)?,
            lease_expires_at: r.get(5)?,
        })
    })?;
    rows.collect()
}

/// What a claim could take and when: `Some(t <= now)` means something is
/// claimable now; `Some(t)` the earliest time something becomes claimable;
/// `None` that nothing will without a new enqueue. Four index seeks.
pub(crate) fn next_claimable_at(c: &Connection, now: Millis) -> rusqlite::Result<Option<Millis>> {
    let discovered: Option<i64> = c
        .prepare_cached("SELECT id FROM jobs WHERE status = 'discovered' LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    if discovered.is_some() {
        return Ok(Some(now));
    }
    // A lease granted after now (the clock went back) is over already.
    let granted_ahead = c
        .prepare_cached(
            "SELECT 1 FROM jobs WHERE status = 'extracting' AND lease_expires_at - lease_ms > ?1 LIMIT 1",
        )?
        .exists([now])?;
    if granted_ahead {
        return Ok(Some(now));
    }
    let retry: Option<i64> = c
        .prepare_cached("SELECT min(retry_at) FROM jobs WHERE status = 'retrying'")?
        .query_row([], |r| r.get(0))?;
    let lease: Option<i64> = c
        .prepare_cached("SELECT min(lease_expires_at) FROM jobs WHERE status = 'extracting'")?
        .query_row([], |r| r.get(0))?;
    Ok(match (retry, lease) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// What the store knows of a source file from the last scan that saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownSource {
    /// The fingerprint (size, modification time, link target).
    pub stat: String,
    /// Whether its version is a content hash; when not, the file was too
    /// large (or unreadable) then, and a scan whose limit it now fits hashes
    /// it, which queues it again.
    pub hashed: bool,
}

/// The stored fingerprint of each key, so a re-scan can skip reading files
/// whose fingerprint did not change. One short read for a whole batch.
pub(crate) fn source_stats(
    c: &Connection,
    keys: &[String],
) -> rusqlite::Result<HashMap<String, KnownSource>> {
    let mut stmt = c.prepare_cached(
        "SELECT source_stat, version LIKE 'sha256:%' FROM jobs WHERE doc_key = ?1 AND source_gone = 0",
    )?;
    let mut out = HashMap::with_capacity(keys.len());
    for k in keys {
        let known = stmt
            .query_row([k], |r| {
                Ok(KnownSource {
                    stat: r.get(0)?,
                    hashed: r.get(1)?,
                })
            })
            .optional()?;
        if let Some(known) = known {
            out.insert(k.clone(), known);
        }
    }
    Ok(out)
}

/// How many rows are extracting (live or expired leases).
pub(crate) fn count_extracting(c: &Connection) -> rusqlite::Result<u64> {
    c.prepare_cached("SELECT count(*) FROM jobs WHERE status = 'extracting'")?
        .query_row([], |r| r.get::<_, i64>(0))
        .map(|n| n.max(0) as u64)
}

/// A setting of the data directory.
pub(crate) fn meta(c: &Connection, name: &str) -> rusqlite::Result<Option<String>> {
    c.prepare_cached("SELECT value FROM meta WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()
}

/// Up to `n` documents with an id above `after`, in id order, only those in
/// `statuses` (every document when it is empty). A range over the rowid that
/// stops after `n` matches, so a listing pages through a store of any size
/// with bounded memory and without holding a read snapshot between pages.
pub(crate) fn jobs_after(
    c: &Connection,
    statuses: &[Status],
    after: i64,
    n: i64,
) -> rusqlite::Result<Vec<Job>> {
    // The status names are the enum's own constants, never user text.
    let filter = if statuses.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = statuses.iter().map(|s| format!("'{}'", s.as_str())).collect();
        format!(" AND status IN ({})", names.join(", "))
    };
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id > ?1{filter} ORDER BY id LIMIT ?2");
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(rusqlite::params![after, n], job_from_row)?;
    rows.collect()
}

/// The store's documents after a command, as its summary reports them: the
/// per-status counts with the dead and the retrying split by why, so that a
/// rerun that did nothing still says what is dead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    /// Waiting for their first (or next) claim.
    pub queued: u64,
    /// Under a claim (live or expired lease).
    pub extracting: u64,
    /// With an accepted result.
    pub indexed: u64,
    /// Failed, waiting for their next attempt; includes `parked`.
    pub retrying: u64,
    /// Of the retrying: handed back until an upstream account can be used again.
    pub parked: u64,
    /// Given up on; includes `gone`.
    pub dead: u64,
    /// Of the dead: their source was removed (not a failure; `retry` cannot help).
    pub gone: u64,
}

impl Totals {
    /// Dead documents that failed (their source still exists): what
    /// `--fail-on-error` and `retry --dead` are about.
    pub fn failed_dead(&self) -> u64 {
        self.dead - self.gone
    }
}

/// The store's [`Totals`], in one grouped scan.
pub(crate) fn totals(c: &Connection) -> rusqlite::Result<Totals> {
    let mut stmt = c.prepare_cached(
        "SELECT status, source_gone, parked_on IS NOT NULL, count(*) FROM jobs GROUP BY 1, 2, 3",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, bool>(1)?,
            r.get::<_, bool>(2)?,
            r.get::<_, i64>(3)?.max(0) as u64,
        ))
    })?;
    let mut t = Totals::default();
    for row in rows {
        let (status, gone, parked, n) = row?;
        match status.parse::<Status>() {
            Ok(Status::Discovered) => t.queued += n,
            Ok(Status::Extracting) => t.extracting += n,
            Ok(Status::Indexed) => t.indexed += n,
            Ok(Status::Retrying) => {
                t.retrying += n;
                t.parked += if parked { n } else { 0 };
            }
            Ok(Status::Dead) => {
                t.dead += n;
                t.gone += if gone { n } else { 0 };
            }
            Err(_) => {}
        }
    }
    Ok(t)
}
