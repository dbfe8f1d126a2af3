//! Reads on PostgreSQL: one statement each, each in its own snapshot, the
//! same rows and orders as `store/read.rs`; and the checks `doctor` runs
//! (`store/check.rs`).

use std::collections::HashMap;

use ::postgres::{Client, Row};

use super::tx::{Fail, Sql};
use crate::clock::Millis;
use crate::job::{Counts, HistoryEntry, Job, LiveLease, Status};
use crate::store::check::IndexedRow;
use crate::store::read::{KnownSource, Totals};

const JOB_COLUMNS: &str = "id, doc_key, version, status, owner_token, owner_worker, fence,
    lease_expires_at, attempts, max_attempts, retry_at, last_error, result_path, checksum,
    source_gone, created_at, updated_at, lost_leases, result_bytes";

fn job_from_row(r: &Row) -> Sql<Job> {
    let status: String = r.try_get(3)?;
    let status = status
        .parse::<Status>()
        .map_err(|e| Fail::Refused(format!("a row holds {e}")))?;
    Ok(Job {
        id: r.try_get(0)?,
        key: r.try_get(1)?,
        version: r.try_get(2)?,
        status,
        owner_token: r.try_get(4)?,
        owner_worker: r.try_get(5)?,
        fence: r.try_get(6)?,
        lease_expires_at: r.try_get(7)?,
        attempts: r.try_get(8)?,
        max_attempts: r.try_get(9)?,
        retry_at: r.try_get(10)?,
        last_error: r.try_get(11)?,
        result_path: r.try_get(12)?,
        checksum: r.try_get(13)?,
        source_gone: r.try_get(14)?,
        created_at: r.try_get(15)?,
        updated_at: r.try_get(16)?,
        lost_leases: r.try_get(17)?,
        result_bytes: r
            .try_get::<_, Option<i64>>(18)?
            .and_then(|b| u64::try_from(b).ok()),
    })
}

pub(crate) fn job_by_id(c: &mut Client, id: i64) -> Sql<Option<Job>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
    c.query_opt(&sql, &[&id])?.as_ref().map(job_from_row).transpose()
}

/// [`job_by_id`] with the row locked until the transaction ends (mirror
/// cleanup, `fence.rs`).
pub(crate) fn job_by_id_locked(tx: &mut ::postgres::Transaction<'_>, id: i64) -> Sql<Option<Job>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 FOR UPDATE");
    tx.query_opt(&sql, &[&id])?.as_ref().map(job_from_row).transpose()
}

pub(crate) fn job_by_key(c: &mut Client, key: &str) -> Sql<Option<Job>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE doc_key = $1");
    c.query_opt(&sql, &[&key])?.as_ref().map(job_from_row).transpose()
}

/// Up to `n` documents with an id above `after`, in id order, only those in
/// `statuses` (all when empty).
pub(crate) fn jobs_after(c: &mut Client, statuses: &[Status], after: i64, n: i64) -> Sql<Vec<Job>> {
    let names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE id > $1 AND (cardinality($3::TEXT[]) = 0 OR status = ANY($3))
         ORDER BY id LIMIT $2"
    );
    c.query(&sql, &[&after, &n, &names])?
        .iter()
        .map(job_from_row)
        .collect()
}

pub(crate) fn history(c: &mut Client, id: i64) -> Sql<Vec<HistoryEntry>> {
    let rows = c.query(
        "SELECT job_id, at, event, token, fence, detail FROM history WHERE job_id = $1 ORDER BY seq",
        &[&id],
    )?;
    rows.iter()
        .map(|r| {
            Ok(HistoryEntry {
                job_id: r.try_get(0)?,
                at: r.try_get(1)?,
                event: r.try_get(2)?,
                token: r.try_get(3)?,
                fence: r.try_get(4)?,
                detail: r.try_get(5)?,
            })
        })
        .collect()
}

pub(crate) fn counts(c: &mut Client) -> Sql<Counts> {
    let mut counts = Counts::default();
    for r in c.query("SELECT status, count(*) FROM jobs GROUP BY status", &[])? {
        let (status, n): (String, i64) = (r.try_get(0)?, r.try_get(1)?);
        if let Ok(s) = status.parse::<Status>() {
            counts.add(s, n.max(0) as u64);
        }
    }
    Ok(counts)
}

/// The store's [`Totals`], in one grouped scan.
pub(crate) fn totals(c: &mut Client) -> Sql<Totals> {
    let rows = c.query(
        "SELECT status, source_gone, parked_on IS NOT NULL, count(*) FROM jobs GROUP BY 1, 2, 3",
        &[],
    )?;
    let mut t = Totals::default();
    for r in rows {
        let (status, gone, parked, n): (String, bool, bool, i64) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
        let n = n.max(0) as u64;
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

/// Leases that are not over (see `store/read.rs: live_leases`); a lease
/// granted up to `skew` ms after now is not over (see `StoreOptions::clock_skew`).
pub(crate) fn live_leases(c: &mut Client, now: Millis, skew: Millis) -> Sql<Vec<LiveLease>> {
    let rows = c.query(
        "SELECT id, doc_key, owner_token, owner_worker, fence, lease_expires_at FROM jobs
         WHERE status = 'extracting' AND lease_expires_at > $1
           AND NOT coalesce(lease_expires_at - lease_ms > $2, FALSE)
         ORDER BY lease_expires_at, id",
        &[&now, &now.saturating_add(skew)],
    )?;
    rows.iter()
        .map(|r| {
            Ok(LiveLease {
                id: r.try_get(0)?,
                key: r.try_get(1)?,
                owner_token: r.try_get(2)?,
                owner_worker: r.try_get(3)?,
                fence: r.try_get(4)?,
                lease_expires_at: r.try_get(5)?,
            })
        })
        .collect()
}

/// What a claim could take and when (see `store/read.rs: next_claimable_at`).
pub(crate) fn next_claimable_at(c: &mut Client, now: Millis, skew: Millis) -> Sql<Option<Millis>> {
    let row = c.query_one(
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE status = 'discovered'),
                EXISTS (SELECT 1 FROM jobs WHERE status = 'extracting' AND lease_expires_at - lease_ms > $1),
                (SELECT min(retry_at) FROM jobs WHERE status = 'retrying'),
                (SELECT min(lease_expires_at) FROM jobs WHERE status = 'extracting')",
        &[&now.saturating_add(skew)],
    )?;
    let (discovered, granted_ahead): (bool, bool) = (row.try_get(0)?, row.try_get(1)?);
    if discovered || granted_ahead {
        return Ok(Some(now));
    }
    let (retry, lease): (Option<i64>, Option<i64>) = (row.try_get(2)?, row.try_get(3)?);
    Ok(match (retry, lease) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// The stored fingerprint of each key, one statement for the batch.
pub(crate) fn source_stats(c: &mut Client, keys: &[String]) -> Sql<HashMap<String, KnownSource>> {
    let rows = c.query(
        "SELECT doc_key, source_stat, version LIKE 'sha256:%' FROM jobs
         WHERE doc_key = ANY($1) AND NOT source_gone",
        &[&keys],
    )?;
    let mut out = HashMap::with_capacity(rows.len());
    for r in rows {
        out.insert(
            r.try_get(0)?,
            KnownSource {
                stat: r.try_get(1)?,
                hashed: r.try_get(2)?,
            },
        );
    }
    Ok(out)
}

pub(crate) fn count_extracting(c: &mut Client) -> Sql<u64> {
    let n: i64 = c
        .query_one("SELECT count(*) FROM jobs WHERE status = 'extracting'", &[])?
        .try_get(0)?;
    Ok(n.max(0) as u64)
}

pub(crate) fn meta(c: &mut Client, name: &str) -> Sql<Option<String>> {
    Ok(c.query_opt("SELECT value FROM meta WHERE name = $1", &[&name])?
        .map(|r| r.try_get(0))
        .transpose()?)
}

/// Up to `limit` indexed rows with ids after `after`, in id order.
pub(crate) fn indexed_page(c: &mut Client, after: i64, limit: i64) -> Sql<Vec<IndexedRow>> {
    let rows = c.query(
        "SELECT id, doc_key, result_path, checksum, result_bytes FROM jobs
         WHERE status = 'indexed' AND id > $1 ORDER BY id LIMIT $2",
        &[&after, &limit],
    )?;
    rows.iter()
        .map(|r| {
            Ok(IndexedRow {
                id: r.try_get(0)?,
                key: r.try_get(1)?,
                result_path: r.try_get(2)?,
                checksum: r.try_get(3)?,
                result_bytes: r
                    .try_get::<_, Option<i64>>(4)?
                    .and_then(|b| u64::try_from(b).ok()),
            })
        })
        .collect()
}

/// (subject, message) for every row that breaks "at most one live owner"
/// (the checks of `store/check.rs`, with the same messages).
pub(crate) fn lease_violations(c: &mut Client) -> Sql<Vec<(String, String)>> {
    let mut out = Vec::new();
    for r in c.query(
        "SELECT doc_key, count(*) FROM jobs GROUP BY doc_key HAVING count(*) > 1 ORDER BY doc_key",
        &[],
    )? {
        let (key, n): (String, i64) = (r.try_get(0)?, r.try_get(1)?);
        out.push((key.clone(), format!("{key:?}: {n} rows share this document key")));
    }
    for r in c.query(
        "SELECT doc_key, status, owner_token IS NULL OR owner_token = '', lease_expires_at IS NULL
         FROM jobs
         WHERE (status = 'extracting' AND (owner_token IS NULL OR owner_token = '' OR lease_expires_at IS NULL))
            OR (status <> 'extracting' AND owner_token IS NOT NULL)
         ORDER BY id",
        &[],
    )? {
        let (key, status, no_token, _no_lease): (String, String, bool, bool) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
        let what = match (status.as_str(), no_token) {
            ("extracting", true) => "is extracting without an owner token".to_string(),
            ("extracting", false) => "is extracting without a lease expiry".to_string(),
            _ => format!("is {status} but still holds an owner token"),
        };
        out.push((key.clone(), format!("{key:?}: {what}")));
    }
    for r in c.query(
        "SELECT count(*), min(doc_key) FROM jobs
         WHERE owner_token IS NOT NULL GROUP BY owner_token HAVING count(*) > 1",
        &[],
    )? {
        let (n, key): (i64, String) = (r.try_get(0)?, r.try_get(1)?);
        // The token is a claim's capability: named by the document, never printed.
        out.push((
            key.clone(),
            format!("{key:?}: its owner token is shared by {n} documents"),
        ));
    }
    Ok(out)
}
