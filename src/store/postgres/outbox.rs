//! The outbox and notice sending on PostgreSQL: the rules of
//! `store/outbox.rs`, statement for statement.
//!
//! SQLite runs every outbox write alone under its single writer. Here every
//! transaction that writes the outbox first locks its one totals row
//! (`outbox_totals`, [`lock_totals`]), so pushes, cap drops, batch claims
//! and reports still run one at a time, always taking that lock before any
//! outbox row (the same order everywhere, so they never wait for each other
//! in a circle). Under it the newest row, the running totals, the shared
//! pace and which rows are in flight are read as the previous writer left
//! them; and ids are handed out in commit order, so "oldest first" is by id
//! as on SQLite.
//!
//! Notices are claimed with `FOR UPDATE SKIP LOCKED`: two senders never take
//! the same notice, and neither waits for the other.

use ::postgres::{Client, Transaction};

use super::tx::Sql;
use crate::clock::Millis;
use crate::store::outbox::{
    Drain, NoticeRecord, OutboxBatch, OutboxCap, OutboxItem, OutboxTotals, PendingNotice,
};

/// Lock the totals row until the transaction ends (see the module's docs);
/// the payload total and the shared pace, as they are now.
fn lock_totals(tx: &mut Transaction<'_>) -> Sql<(i64, Millis)> {
    let r = tx.query_one(
        "SELECT bytes, next_send_at FROM outbox_totals WHERE id = 1 FOR UPDATE",
        &[],
    )?;
    Ok((r.try_get(0)?, r.try_get(1)?))
}

/// Queue the accepted result of job `id` (its key and version are read from
/// the row), then apply the cap. Called in the transaction of the fenced
/// completion that accepted it.
pub(crate) fn push(
    tx: &mut Transaction<'_>,
    now: Millis,
    cap: &OutboxCap,
    id: i64,
    checksum: &str,
    text: &str,
) -> Sql<()> {
    let (total, _) = lock_totals(tx)?;
    let bytes = i64::try_from(text.len()).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT INTO outbox (job_id, doc_key, version, checksum, body, bytes, created_at)
         SELECT id, doc_key, version, $2, $3, $4, $5 FROM jobs WHERE id = $1",
        &[&id, &checksum, &text, &bytes, &now],
    )?;
    tx.execute(
        "UPDATE outbox_totals SET rows = rows + 1, bytes = bytes + $1 WHERE id = 1",
        &[&bytes],
    )?;
    enforce_cap(tx, now, cap, total.saturating_add(bytes))
}

/// Drop rows older than the age cap, then the oldest rows while the total
/// (`total` bytes now) is over the size cap; never the newest row, never
/// rows in flight. The caller holds the totals row. One statement picks the
/// rows to drop (the oldest first, while either cap is broken, with the
/// total counted down row by row, as SQLite's loop does) and deletes them;
/// one more counts them, only when some were dropped. It reads the waiting
/// rows' sizes and ages (not their text), which the size cap bounds.
fn enforce_cap(tx: &mut Transaction<'_>, now: Millis, cap: &OutboxCap, total: i64) -> Sql<()> {
    let max_bytes = i64::try_from(cap.max_bytes).unwrap_or(i64::MAX);
    let dropped = tx.query_one(
        "WITH newest AS (SELECT max(id) AS id FROM outbox),
         waiting AS (
             SELECT o.id, o.bytes, o.created_at,
                    ($3::BIGINT - coalesce(sum(o.bytes) OVER (ORDER BY o.id
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::BIGINT AS total_before
             FROM outbox o, newest
             WHERE o.id < newest.id AND (o.sending_until IS NULL OR o.sending_until <= $1)
         ),
         -- A row is kept, and so is every row after it, from the first
         -- one that breaks neither cap: SQLite's loop stops there.
         marked AS (
             SELECT id, bool_or($1 - created_at <= $2::BIGINT AND total_before <= $4::BIGINT)
                        OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) AS kept
             FROM waiting
         ),
         gone AS (DELETE FROM outbox WHERE id IN (SELECT id FROM marked WHERE NOT kept) RETURNING bytes)
         SELECT count(*), coalesce(sum(bytes), 0)::BIGINT FROM gone",
        &[&now, &cap.max_age_ms, &total, &max_bytes],
    )?;
    let (n, bytes): (i64, i64) = (dropped.try_get(0)?, dropped.try_get(1)?);
    if n > 0 {
        tx.execute(
            "UPDATE outbox_totals SET rows = rows - $1, bytes = bytes - $2,
                    dropped = dropped + $1, dropped_bytes = dropped_bytes + $2
             WHERE id = 1",
            &[&n, &bytes],
        )?;
    }
    Ok(())
}

/// Claim the oldest `n` rows not in flight for `lease_ms`, if the shared
/// pace allows a batch now; the next batch may go `interval_ms` later.
pub(crate) fn claim_batch(
    tx: &mut Transaction<'_>,
    now: Millis,
    cap: &OutboxCap,
    n: usize,
    lease_ms: Millis,
    interval_ms: Millis,
) -> Sql<Drain> {
    let (total, next_at) = lock_totals(tx)?;
    enforce_cap(tx, now, cap, total)?;
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    let rows = tx.query(
        "SELECT id, doc_key, version, checksum, body FROM outbox
         WHERE sending_until IS NULL OR sending_until <= $1
         ORDER BY id LIMIT $2",
        &[&now, &limit],
    )?;
    let items = rows
        .iter()
        .map(|r| {
            Ok(OutboxItem {
                id: r.try_get(0)?,
                key: r.try_get(1)?,
                version: r.try_get(2)?,
                checksum: r.try_get(3)?,
                text: r.try_get(4)?,
            })
        })
        .collect::<Sql<Vec<_>>>()?;
    if items.is_empty() {
        return Ok(Drain::Empty);
    }
    if now < next_at {
        return Ok(Drain::Paced { until: next_at });
    }
    let token = uuid::Uuid::new_v4().to_string();
    let ids: Vec<i64> = items.iter().map(|it| it.id).collect();
    tx.execute(
        "UPDATE outbox SET sender = $2, sending_until = $3 WHERE id = ANY($1)",
        &[&ids, &token, &(now + lease_ms)],
    )?;
    tx.execute(
        "UPDATE outbox_totals SET next_send_at = $1 WHERE id = 1",
        &[&(now + interval_ms)],
    )?;
    Ok(Drain::Send(OutboxBatch { token, items }))
}

/// The batch got a 2xx: remove its rows (those still ours).
pub(crate) fn delivered(tx: &mut Transaction<'_>, batch: &OutboxBatch) -> Sql<usize> {
    lock_totals(tx)?;
    let ids: Vec<i64> = batch.items.iter().map(|it| it.id).collect();
    let r = tx.query_one(
        "WITH gone AS (DELETE FROM outbox WHERE id = ANY($1) AND sender = $2 RETURNING bytes)
         SELECT count(*), coalesce(sum(bytes), 0)::BIGINT FROM gone",
        &[&ids, &batch.token],
    )?;
    let (done, bytes): (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
    tx.execute(
        "UPDATE outbox_totals SET rows = rows - $1, bytes = bytes - $2, delivered = delivered + $1
         WHERE id = 1",
        &[&done, &bytes],
    )?;
    Ok(usize::try_from(done).unwrap_or(0))
}

/// The batch was not delivered: its rows wait again, and no batch goes
/// before `not_before`.
pub(crate) fn undelivered(tx: &mut Transaction<'_>, batch: &OutboxBatch, not_before: Millis) -> Sql<()> {
    lock_totals(tx)?;
    let ids: Vec<i64> = batch.items.iter().map(|it| it.id).collect();
    tx.execute(
        "UPDATE outbox SET sender = NULL, sending_until = NULL WHERE id = ANY($1) AND sender = $2",
        &[&ids, &batch.token],
    )?;
    tx.execute(
        "UPDATE outbox_totals SET next_send_at = GREATEST(next_send_at, $1) WHERE id = 1",
        &[&not_before],
    )?;
    Ok(())
}

/// The outbox's figures, read in one snapshot.
pub(crate) fn totals(c: &mut Client) -> Sql<OutboxTotals> {
    let r = c.query_one(
        "SELECT rows, bytes, dropped, dropped_bytes, delivered, (SELECT min(created_at) FROM outbox)
         FROM outbox_totals WHERE id = 1",
        &[],
    )?;
    Ok(OutboxTotals {
        rows: r.try_get(0)?,
        bytes: r.try_get(1)?,
        dropped: r.try_get(2)?,
        dropped_bytes: r.try_get(3)?,
        delivered: r.try_get(4)?,
        oldest_at: r.try_get(5)?,
    })
}

/// Take the oldest unsent notice that is due and not being sent by someone
/// else, in one statement.
pub(crate) fn claim_notice(
    tx: &mut Transaction<'_>,
    now: Millis,
    sender: &str,
    lease_ms: Millis,
) -> Sql<Option<PendingNotice>> {
    let r = tx.query_opt(
        "UPDATE notices SET sender = $2, sending_until = $3, attempts = attempts + 1
         WHERE id = (SELECT id FROM notices
                     WHERE sent_at IS NULL AND next_try_at <= $1
                       AND (sending_until IS NULL OR sending_until <= $1)
                     ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING id, account, kind, message, details",
        &[&now, &sender, &(now + lease_ms)],
    )?;
    r.map(|r| {
        Ok(PendingNotice {
            id: r.try_get(0)?,
            account: r.try_get(1)?,
            kind: r.try_get(2)?,
            message: r.try_get(3)?,
            details: r.try_get(4)?,
            sender: sender.to_owned(),
        })
    })
    .transpose()
}

/// Record the outcome of sending a notice we hold; a failure is tried again
/// later.
pub(crate) fn notice_sent(
    tx: &mut Transaction<'_>,
    now: Millis,
    n: &PendingNotice,
    error: Option<&str>,
    retry_ms: Millis,
) -> Sql<()> {
    match error {
        None => tx.execute(
            "UPDATE notices SET sent_at = $3, sending_until = NULL, last_error = NULL
             WHERE id = $1 AND sender = $2",
            &[&n.id, &n.sender, &now],
        )?,
        Some(e) => tx.execute(
            "UPDATE notices SET sending_until = NULL, last_error = $3, next_try_at = $4
             WHERE id = $1 AND sender = $2",
            &[&n.id, &n.sender, &e, &(now + retry_ms)],
        )?,
    };
    Ok(())
}

/// Every notice, oldest first.
pub(crate) fn notices(c: &mut Client) -> Sql<Vec<NoticeRecord>> {
    let rows = c.query(
        "SELECT id, account, kind, message, created_at, sent_at, attempts FROM notices ORDER BY id",
        &[],
    )?;
    rows.iter()
        .map(|r| {
            Ok(NoticeRecord {
                id: r.try_get(0)?,
                account: r.try_get(1)?,
                kind: r.try_get(2)?,
                message: r.try_get(3)?,
                created_at: r.try_get(4)?,
                sent_at: r.try_get(5)?,
                attempts: r.try_get(6)?,
            })
        })
        .collect()
}
