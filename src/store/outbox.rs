//! The SQL of the outbox and of notice sending (DESIGN §6).
//!
//! The outbox row of a result is written by the transaction that accepts it
//! (the fenced `complete`), so an accepted result is queued exactly once and a
//! refused one never. Rows leave the outbox in two ways only: delivered (after
//! their batch got a 2xx), or dropped by the cap, oldest first, and counted.
//! A drain claims a batch with a short sending lease, so two processes never
//! send the same rows at once, and a crashed sender's batch goes again (the
//! only duplicates are the batch that was in flight).

use rusqlite::{params, Connection, OptionalExtension};

use crate::clock::Millis;

/// The outbox cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxCap {
    /// Rows older than this many milliseconds are dropped (and counted).
    pub max_age_ms: Millis,
    /// While the payload total is above this many bytes, the oldest rows are
    /// dropped (never the newest one, never rows in flight).
    pub max_bytes: u64,
}

/// One result waiting for the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxItem {
    /// The outbox row's id (not the job's).
    pub id: i64,
    /// The document key.
    pub key: String,
    /// The source version the result was extracted from.
    pub version: String,
    /// The SHA-256 of the accepted result.
    pub checksum: String,
    /// The extracted text to deliver.
    pub text: String,
}

/// A batch claimed for sending: deliver it, then report with its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxBatch {
    /// Names this claim of the rows: reporting matches on it, so a batch whose
    /// sending lease ran out and was claimed again changes nothing.
    pub token: String,
    /// The rows, oldest first.
    pub items: Vec<OutboxItem>,
}

/// What a drain step may do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drain {
    /// Nothing is waiting (or everything waiting is being sent by someone else).
    Empty,
    /// The shared pace says not before `until`.
    Paced {
        /// When the next batch may go (ms from the injected clock).
        until: Millis,
    },
    /// Deliver this batch, then report it delivered or undelivered.
    Send(OutboxBatch),
}

/// The outbox's figures, for `auth status` and the recovery notice.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OutboxTotals {
    /// Results waiting now (including those in flight).
    pub rows: i64,
    /// Their payload, in bytes.
    pub bytes: i64,
    /// Results the cap has dropped, ever.
    pub dropped: i64,
    /// The payload of those, in bytes.
    pub dropped_bytes: i64,
    /// Results delivered, ever.
    pub delivered: i64,
    /// When the oldest waiting result was queued (ms from the injected clock);
    /// `None` when the outbox is empty.
    pub oldest_at: Option<Millis>,
}

/// Queue the accepted result of job `id` (its key and version are read from the
/// row), then apply the cap.
pub(crate) fn push(
    tx: &Connection,
    now: Millis,
    cap: &OutboxCap,
    id: i64,
    checksum: &str,
    text: &str,
) -> rusqlite::Result<()> {
    let bytes = text.len() as i64;
    tx.prepare_cached(
        "INSERT INTO outbox (job_id, doc_key, version, checksum, body, bytes, created_at)
         SELECT id, doc_key, version, ?2, ?3, ?4, ?5 FROM jobs WHERE id = ?1",
    )?
    .execute(params![id, checksum, text, bytes, now])?;
    tx.prepare_cached("UPDATE outbox_totals SET rows = rows + 1, bytes = bytes + ?1 WHERE id = 1")?
        .execute([bytes])?;
    enforce_cap(tx, now, cap)
}

/// Drop rows older than the age cap, then the oldest rows while the total is
/// over the size cap, never the newest row. Rows in flight are not dropped:
/// their batch may already have reached the sink.
fn enforce_cap(tx: &Connection, now: Millis, cap: &OutboxCap) -> rusqlite::Result<()> {
    let newest: Option<i64> = tx
        .prepare_cached("SELECT max(id) FROM outbox")?
        .query_row([], |r| r.get(0))?;
    let Some(newest) = newest else { return Ok(()) };
    let mut total: i64 = tx
        .prepare_cached("SELECT bytes FROM outbox_totals WHERE id = 1")?
        .query_row([], |r| r.get(0))?;
    let mut oldest = tx.prepare_cached(
        "SELECT id, bytes, created_at FROM outbox
         WHERE id < ?1 AND (sending_until IS NULL OR sending_until <= ?2)
         ORDER BY id LIMIT 1",
    )?;
    loop {
        let row: Option<(i64, i64, Millis)> = oldest
            .query_row(params![newest, now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let Some((id, size, created)) = row else {
            return Ok(());
        };
        let too_old = now - created > cap.max_age_ms;
        let too_big = total as u64 > cap.max_bytes;
        if !too_old && !too_big {
            return Ok(());
        }
        tx.prepare_cached("DELETE FROM outbox WHERE id = ?1")?
            .execute([id])?;
        tx.prepare_cached(
            "UPDATE outbox_totals SET rows = rows - 1, bytes = bytes - ?1,
                    dropped = dropped + 1, dropped_bytes = dropped_bytes + ?1
             WHERE id = 1",
        )?
        .execute([size])?;
        total -= size;
    }
}

/// Claim the oldest `n` rows not in flight for `lease_ms`, if the shared pace
/// allows a batch now; the next batch may go `interval_ms` later.
pub(crate) fn claim_batch(
    tx: &Connection,
    now: Millis,
    cap: &OutboxCap,
    n: usize,
    lease_ms: Millis,
    interval_ms: Millis,
) -> rusqlite::Result<Drain> {
    enforce_cap(tx, now, cap)?;
    let next_at: Millis = tx.query_row("SELECT next_send_at FROM outbox_totals WHERE id = 1", [], |r| {
        r.get(0)
    })?;
    let items: Vec<OutboxItem> = {
        let mut s = tx.prepare(
            "SELECT id, doc_key, version, checksum, body FROM outbox
             WHERE sending_until IS NULL OR sending_until <= ?1
             ORDER BY id LIMIT ?2",
        )?;
        let rows = s.query_map(params![now, n as i64], |r| {
            Ok(OutboxItem {
                id: r.get(0)?,
                key: r.get(1)?,
                version: r.get(2)?,
                checksum: r.get(3)?,
                text: r.get(4)?,
            })
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    if items.is_empty() {
        return Ok(Drain::Empty);
    }
    if now < next_at {
        return Ok(Drain::Paced { until: next_at });
    }
    let token = uuid::Uuid::new_v4().to_string();
    for it in &items {
        tx.execute(
            "UPDATE outbox SET sender = ?2, sending_until = ?3 WHERE id = ?1",
            params![it.id, token, now + lease_ms],
        )?;
    }
    tx.execute(
        "UPDATE outbox_totals SET next_send_at = ?1 WHERE id = 1",
        [now + interval_ms],
    )?;
    Ok(Drain::Send(OutboxBatch { token, items }))
}

/// The batch got a 2xx: remove its rows (those still ours).
pub(crate) fn delivered(tx: &Connection, batch: &OutboxBatch) -> rusqlite::Result<usize> {
    let (mut done, mut bytes) = (0i64, 0i64);
    for it in &batch.items {
        let size: Option<i64> = tx
            .query_row(
                "DELETE FROM outbox WHERE id = ?1 AND sender = ?2 RETURNING bytes",
                params![it.id, batch.token],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(size) = size {
            done += 1;
            bytes += size;
        }
    }
    tx.execute(
        "UPDATE outbox_totals SET rows = rows - ?1, bytes = bytes - ?2, delivered = delivered + ?1
         WHERE id = 1",
        params![done, bytes],
    )?;
    Ok(done as usize)
}

/// The batch was not delivered: its rows wait again, and no batch goes before
/// `not_before` (a 429's Retry-After, a lock, a backoff).
pub(crate) fn undelivered(tx: &Connection, batch: &OutboxBatch, not_before: Millis) -> rusqlite::Result<()> {
    for it in &batch.items {
        tx.execute(
            "UPDATE outbox SET sender = NULL, sending_until = NULL WHERE id = ?1 AND sender = ?2",
            params![it.id, batch.token],
        )?;
    }
    tx.execute(
        "UPDATE outbox_totals SET next_send_at = max(next_send_at, ?1) WHERE id = 1",
        [not_before],
    )?;
    Ok(())
}

pub(crate) fn totals(c: &Connection) -> rusqlite::Result<OutboxTotals> {
    let oldest: Option<Millis> = c.query_row("SELECT min(created_at) FROM outbox", [], |r| r.get(0))?;
    c.query_row(
        "SELECT rows, bytes, dropped, dropped_bytes, delivered FROM outbox_totals WHERE id = 1",
        [],
        |r| {
            Ok(OutboxTotals {
                rows: r.get(0)?,
                bytes: r.get(1)?,
                dropped: r.get(2)?,
                dropped_bytes: r.get(3)?,
                delivered: r.get(4)?,
                oldest_at: oldest,
            })
        },
    )
}

/// A notice to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingNotice {
    /// The notice's row id.
    pub id: i64,
    /// The account it is about.
    pub account: String,
    /// `lock`, `recovery`, `shared_cause` or `expiry`.
    pub kind: String,
    /// The human-readable line sent to the channels.
    pub message: String,
    /// JSON text.
    pub details: String,
    /// Who claimed it for sending; the outcome is recorded only for this sender.
    pub sender: String,
}

/// Take the oldest unsent notice that is due and not being sent by someone else.
pub(crate) fn claim_notice(
    tx: &Connection,
    now: Millis,
    sender: &str,
    lease_ms: Millis,
) -> rusqlite::Result<Option<PendingNotice>> {
    let n = tx
        .query_row(
            "SELECT id, account, kind, message, details FROM notices
             WHERE sent_at IS NULL AND next_try_at <= ?1
               AND (sending_until IS NULL OR sending_until <= ?1)
             ORDER BY id LIMIT 1",
            [now],
            |r| {
                Ok(PendingNotice {
                    id: r.get(0)?,
                    account: r.get(1)?,
                    kind: r.get(2)?,
                    message: r.get(3)?,
                    details: r.get(4)?,
                    sender: sender.to_owned(),
                })
            },
        )
        .optional()?;
    if let Some(n) = &n {
        tx.execute(
            "UPDATE notices SET sender = ?2, sending_until = ?3, attempts = attempts + 1 WHERE id = ?1",
            params![n.id, sender, now + lease_ms],
        )?;
    }
    Ok(n)
}

/// Record the outcome of sending a notice we hold; a failure is tried again later.
pub(crate) fn notice_sent(
    tx: &Connection,
    now: Millis,
    n: &PendingNotice,
    error: Option<&str>,
    retry_ms: Millis,
) -> rusqlite::Result<()> {
    match error {
        None => tx.execute(
            "UPDATE notices SET sent_at = ?3, sending_until = NULL, last_error = NULL
             WHERE id = ?1 AND sender = ?2",
            params![n.id, n.sender, now],
        )?,
        Some(e) => tx.execute(
            "UPDATE notices SET sending_until = NULL, last_error = ?3, next_try_at = ?4
             WHERE id = ?1 AND sender = ?2",
            params![n.id, n.sender, e, now + retry_ms],
        )?,
    };
    Ok(())
}

/// A sent or unsent notice, for tests and `auth status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NoticeRecord {
    /// The notice's row id.
    pub id: i64,
    /// The account it is about.
    pub account: String,
    /// `lock`, `recovery`, `shared_cause` or `expiry`.
    pub kind: String,
    /// The human-readable line sent to the channels.
    pub message: String,
    /// When it was written (ms from the injected clock).
    pub created_at: Millis,
    /// When a send succeeded; `None` while it is still due.
    pub sent_at: Option<Millis>,
    /// Sends tried so far.
    pub attempts: i64,
}

pub(crate) fn notices(c: &Connection) -> rusqlite::Result<Vec<NoticeRecord>> {
    let mut s = c.prepare(
        "SELECT id, account, kind, message, created_at, sent_at, attempts FROM notices ORDER BY id",
    )?;
    let rows = s.query_map([], |r| {
        Ok(NoticeRecord {
            id: r.get(0)?,
            account: r.get(1)?,
            kind: r.get(2)?,
            message: r.get(3)?,
            created_at: r.get(4)?,
            sent_at: r.get(5)?,
            attempts: r.get(6)?,
        })
    })?;
    rows.collect()
}
