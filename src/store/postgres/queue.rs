//! Putting documents into the queue on PostgreSQL: enqueue (idempotent on
//! the key), requeue, scans and the data directory's settings. The same
//! statements and history lines as `store/queue.rs`.
//!
//! Why READ COMMITTED is safe here, statement by statement:
//! - enqueue: `INSERT … ON CONFLICT DO NOTHING` waits for a concurrent
//!   insert of the same key and then does nothing; the row is then read
//!   `FOR UPDATE`, so the version compared is the one the UPDATE changes.
//! - requeue, marking gone: conditional UPDATEs, re-checked against the
//!   newest row version; their history lines are written under the row lock
//!   the UPDATE took.
//! - a scan is judged only by the newest scan begun: `finish_scan` reads
//!   the scan counter `FOR UPDATE`, so no scan can begin until it commits.
//! - settings set once among rivals take [`META_LOCK`], so two processes
//!   with different sources cannot both see none set and both win.

use ::postgres::Transaction;

use super::tx::Sql;
use super::write::record;
use crate::clock::Millis;
use crate::job::{Enqueued, JobId};
use crate::store::queue::NewDoc;

/// The transaction-level advisory lock that makes "set once among rivals"
/// one decision at a time: "leasemet" in ASCII.
const META_LOCK: i64 = 0x6c65_6173_656d_6574;

/// Insert a new document, or re-queue a known one whose version changed
/// (see `store/queue.rs: enqueue` for the rule).
pub(crate) fn enqueue(
    tx: &mut Transaction<'_>,
    now: Millis,
    max_attempts: i64,
    doc: &NewDoc,
) -> Sql<Enqueued> {
    let inserted = tx.query_opt(
        "INSERT INTO jobs (doc_key, version, source_stat, status, max_attempts, created_at, updated_at)
         VALUES ($1, $2, $5, 'discovered', $3, $4, $4)
         ON CONFLICT (doc_key) DO NOTHING RETURNING id",
        &[&doc.key, &doc.version, &max_attempts, &now, &doc.stat],
    )?;
    if let Some(row) = inserted {
        let id: i64 = row.try_get(0)?;
        let detail = format!("version {}", doc.version);
        record(tx, id, now, "enqueued", None, None, Some(&detail))?;
        return Ok(Enqueued::Inserted(JobId(id)));
    }
    let row = tx.query_one(
        "SELECT id, version, source_stat, status, source_gone FROM jobs WHERE doc_key = $1 FOR UPDATE",
        &[&doc.key],
    )?;
    let (id, version, stat, status, gone): (i64, String, String, String, bool) = (
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
    );
    if version == doc.version && !gone {
        if stat != doc.stat {
            tx.execute(
                "UPDATE jobs SET source_stat = $2 WHERE id = $1",
                &[&id, &doc.stat],
            )?;
        }
        return Ok(Enqueued::Unchanged(JobId(id)));
    }
    tx.execute(
        "UPDATE jobs SET version = $2, source_stat = $5, status = 'discovered', attempts = 0, lost_leases = 0,
                owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
                last_error = NULL, parked_on = NULL, source_gone = FALSE, max_attempts = $3,
                updated_at = $4
         WHERE id = $1",
        &[&id, &doc.version, &max_attempts, &now, &doc.stat],
    )?;
    let detail = format!("version {version} -> {} (was {status})", doc.version);
    record(tx, id, now, "requeued", None, None, Some(&detail))?;
    Ok(Enqueued::Requeued(JobId(id)))
}

/// Put a settled document back in the queue with fresh attempts and lost leases.
pub(crate) fn requeue(tx: &mut Transaction<'_>, now: Millis, id: i64, why: &str) -> Sql<bool> {
    let n = tx.execute(
        "UPDATE jobs SET status = 'discovered', attempts = 0, lost_leases = 0, retry_at = NULL,
                parked_on = NULL, updated_at = $2
         WHERE id = $1 AND status IN ('dead', 'retrying', 'indexed') AND NOT source_gone",
        &[&id, &now],
    )?;
    if n == 1 {
        record(tx, id, now, "requeued", None, None, Some(why))?;
    }
    Ok(n == 1)
}

/// Forget document `id`'s accepted result `result_path` and queue it again if
/// it was indexed (see `store/queue.rs: forget_result`). The row is read
/// `FOR UPDATE`, so the status decided on is the one the UPDATE changes.
pub(crate) fn forget_result(
    tx: &mut Transaction<'_>,
    now: Millis,
    id: i64,
    result_path: &str,
    why: &str,
) -> Sql<bool> {
    let row = tx.query_opt(
        "SELECT status FROM jobs WHERE id = $1 AND result_path = $2 FOR UPDATE",
        &[&id, &result_path],
    )?;
    let Some(row) = row else {
        return Ok(false);
    };
    let status: String = row.try_get(0)?;
    tx.execute(
        "UPDATE jobs SET result_path = NULL, checksum = NULL, result_bytes = NULL, updated_at = $2,
                status = CASE status WHEN 'indexed' THEN 'discovered' ELSE status END,
                attempts = CASE status WHEN 'indexed' THEN 0 ELSE attempts END,
                lost_leases = CASE status WHEN 'indexed' THEN 0 ELSE lost_leases END
         WHERE id = $1",
        &[&id, &now],
    )?;
    super::search::remove(tx, &[id])?;
    let event = if status == "indexed" {
        "requeued"
    } else {
        "result_forgotten"
    };
    record(tx, id, now, event, None, None, Some(why))?;
    Ok(true)
}

/// Every dead document's id whose source exists, for `retry --dead`.
pub(crate) fn dead_ids(tx: &mut Transaction<'_>) -> Sql<Vec<i64>> {
    let rows = tx.query(
        "SELECT id FROM jobs WHERE status = 'dead' AND NOT source_gone ORDER BY id",
        &[],
    )?;
    rows.iter().map(|r| r.try_get(0).map_err(Into::into)).collect()
}

/// A new scan number: the counter in `meta` goes up by one, in one statement.
pub(crate) fn begin_scan(tx: &mut Transaction<'_>) -> Sql<i64> {
    let row = tx.query_one(
        "INSERT INTO meta (name, value) VALUES ('scan', '1')
         ON CONFLICT (name) DO UPDATE SET value = (meta.value::BIGINT + 1)::TEXT
         RETURNING value::BIGINT",
        &[],
    )?;
    Ok(row.try_get(0)?)
}

/// Stamp `key` as seen by scan `scan` (never taking back a newer stamp).
pub(crate) fn mark_seen(tx: &mut Transaction<'_>, scan: i64, key: &str) -> Sql<()> {
    tx.execute(
        "UPDATE jobs SET seen_scan = GREATEST(seen_scan, $2) WHERE doc_key = $1",
        &[&key, &scan],
    )?;
    Ok(())
}

/// Sources the newest scan did not see are gone (see `store/queue.rs`).
pub(crate) fn mark_unseen_gone(tx: &mut Transaction<'_>, now: Millis, scan: i64, why: &str) -> Sql<usize> {
    // The lock on the counter keeps a newer scan from beginning meanwhile.
    let latest: Option<i64> = tx
        .query_opt(
            "SELECT value::BIGINT FROM meta WHERE name = 'scan' FOR UPDATE",
            &[],
        )?
        .map(|r| r.try_get(0))
        .transpose()?;
    if latest != Some(scan) {
        return Ok(0);
    }
    let sql = format!("{GONE} seen_scan < $1 RETURNING id");
    let rows = tx.query(sql.as_str(), &[&scan, &now, &why])?;
    record_gone(tx, now, &rows)
}

/// What a source that went away does to its document: dead, owner and
/// result forgotten; `$2` is now, `$3` the reason; the caller adds which.
const GONE: &str =
    "UPDATE jobs SET source_gone = TRUE, status = 'dead', owner_token = NULL, owner_worker = NULL,
            lease_expires_at = NULL, retry_at = NULL, parked_on = NULL, result_path = NULL,
            checksum = NULL, last_error = $3, updated_at = $2
     WHERE NOT source_gone AND ";

/// The `source_gone` history line of each document of `rows` (ids), and
/// its text out of the search index; how many.
fn record_gone(tx: &mut Transaction<'_>, now: Millis, rows: &[::postgres::Row]) -> Sql<usize> {
    let mut ids: Vec<i64> = rows.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
    ids.sort_unstable();
    for id in &ids {
        record(tx, *id, now, "source_gone", None, None, None)?;
    }
    super::search::remove(tx, &ids)?;
    Ok(ids.len())
}

/// Mark the documents of removed paths gone (see `store/queue.rs:
/// mark_gone`): `keys` exactly, and every key that starts with one of
/// `prefixes`. `starts_with` rather than a key range: the range's bounds
/// assume the code-point order, which the database's collation need not be.
pub(crate) fn mark_gone(
    tx: &mut Transaction<'_>,
    now: Millis,
    keys: &[String],
    prefixes: &[String],
    why: &str,
) -> Sql<usize> {
    let sql = format!(
        "{GONE} (doc_key = ANY($1::TEXT[])
                 OR EXISTS (SELECT 1 FROM unnest($4::TEXT[]) AS p (prefix)
                            WHERE p.prefix <> '' AND starts_with(doc_key, p.prefix)))
         RETURNING id"
    );
    let rows = tx.query(sql.as_str(), &[&keys, &now, &why, &prefixes])?;
    record_gone(tx, now, &rows)
}

/// A setting, read inside the transaction.
pub(crate) fn meta(tx: &mut Transaction<'_>, name: &str) -> Sql<Option<String>> {
    Ok(tx
        .query_opt("SELECT value FROM meta WHERE name = $1", &[&name])?
        .map(|r| r.try_get(0))
        .transpose()?)
}

/// Set `name` unless it or one of `rivals` is set; the setting in force.
pub(crate) fn meta_set_once_among(
    tx: &mut Transaction<'_>,
    name: &str,
    value: &str,
    rivals: &[&str],
) -> Sql<(String, String)> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&META_LOCK])?;
    for rival in rivals {
        if let Some(held) = meta(tx, rival)? {
            return Ok(((*rival).to_owned(), held));
        }
    }
    tx.execute(
        "INSERT INTO meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        &[&name, &value],
    )?;
    let held = meta(tx, name)?.unwrap_or_else(|| value.to_owned());
    Ok((name.to_owned(), held))
}

/// Set `name` to `value`, replacing any value it had.
pub(crate) fn meta_set(tx: &mut Transaction<'_>, name: &str, value: &str) -> Sql<()> {
    tx.execute(
        "INSERT INTO meta (name, value) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        &[&name, &value],
    )?;
    Ok(())
}
