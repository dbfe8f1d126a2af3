//! The outbox's and the notices' rows on PostgreSQL; the rules, the same
//! for both engines, are in `store/outbox.rs`.
//!
//! SQLite runs every outbox write alone under its single writer. Here every
//! transaction that writes the outbox first locks its one totals row
//! (`outbox_totals`, `lock_totals`), so pushes, cap drops, batch claims
//! and reports still run one at a time, always taking that lock before any
//! outbox row (the same order everywhere, so they never wait for each other
//! in a circle). Under it the newest row, the running totals, the shared
//! pace and which rows are in flight are read as the previous writer left
//! them; and ids are handed out in commit order, so "oldest first" is by id
//! as on SQLite.
//!
//! Notices are claimed with `FOR UPDATE SKIP LOCKED`: two senders never take
//! the same notice, and neither waits for the other.

use ::postgres::Client;

use super::conn::Sql;
use super::conn::Tx;
use crate::clock::Millis;
use crate::store::outbox::{
    NoticeRecord, OutboxBatch, OutboxCap, OutboxItem, OutboxReads, OutboxRows, OutboxTotals, PendingNotice,
};

impl OutboxRows for Tx<'_> {
    fn lock_totals(&mut self) -> Sql<(i64, Millis)> {
        let r = self.query_one(
            "SELECT bytes, next_send_at FROM outbox_totals WHERE id = 1 FOR UPDATE",
            &[],
        )?;
        Ok((r.try_get(0)?, r.try_get(1)?))
    }

    fn insert_result(&mut self, now: Millis, id: i64, checksum: &str, text: &str, bytes: i64) -> Sql<()> {
        self.execute(
            "INSERT INTO outbox (job_id, doc_key, version, checksum, body, bytes, created_at)
             SELECT id, doc_key, version, $2, $3, $4, $5 FROM jobs WHERE id = $1",
            &[&id, &checksum, &text, &bytes, &now],
        )?;
        self.execute(
            "UPDATE outbox_totals SET rows = rows + 1, bytes = bytes + $1 WHERE id = 1",
            &[&bytes],
        )?;
        Ok(())
    }

    /// One statement picks the rows to drop (the oldest first, while either
    /// cap is broken, with the total counted down row by row, as
    /// `breaks_cap` row after row would) and deletes them; one more counts
    /// them, only when some were dropped. It reads the waiting rows' sizes
    /// and ages (not their text), which the size cap bounds.
    fn drop_over_cap(&mut self, now: Millis, cap: &OutboxCap, total: i64) -> Sql<()> {
        let max_bytes = i64::try_from(cap.max_bytes).unwrap_or(i64::MAX);
        let dropped = self.query_one(
            "WITH newest AS (SELECT max(id) AS id FROM outbox),
             waiting AS (
                 SELECT o.id, o.bytes, o.created_at,
                        ($3::BIGINT - coalesce(sum(o.bytes) OVER (ORDER BY o.id
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::BIGINT AS total_before
                 FROM outbox o, newest
                 WHERE o.id < newest.id AND (o.sending_until IS NULL OR o.sending_until <= $1)
             ),
             -- A row is kept, and so is every row after it, from the first
             -- one that breaks neither cap: the row-by-row walk stops there.
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
            self.execute(
                "UPDATE outbox_totals SET rows = rows - $1, bytes = bytes - $2,
                        dropped = dropped + $1, dropped_bytes = dropped_bytes + $2
                 WHERE id = 1",
                &[&n, &bytes],
            )?;
        }
        Ok(())
    }

    fn waiting(&mut self, now: Millis, n: usize) -> Sql<Vec<OutboxItem>> {
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        let rows = self.query(
            "SELECT id, doc_key, version, checksum, body FROM outbox
             WHERE sending_until IS NULL OR sending_until <= $1
             ORDER BY id LIMIT $2",
            &[&now, &limit],
        )?;
        rows.iter()
            .map(|r| {
                Ok(OutboxItem {
                    id: r.try_get(0)?,
                    key: r.try_get(1)?,
                    version: r.try_get(2)?,
                    checksum: r.try_get(3)?,
                    text: r.try_get(4)?,
                })
            })
            .collect()
    }

    fn lease_rows(&mut self, ids: &[i64], token: &str, until: Millis) -> Sql<()> {
        self.execute(
            "UPDATE outbox SET sender = $2, sending_until = $3 WHERE id = ANY($1)",
            &[&ids, &token, &until],
        )?;
        Ok(())
    }

    fn set_next_send(&mut self, at: Millis) -> Sql<()> {
        self.execute("UPDATE outbox_totals SET next_send_at = $1 WHERE id = 1", &[&at])?;
        Ok(())
    }

    fn defer_next_send(&mut self, at: Millis) -> Sql<()> {
        self.execute(
            "UPDATE outbox_totals SET next_send_at = GREATEST(next_send_at, $1) WHERE id = 1",
            &[&at],
        )?;
        Ok(())
    }

    fn remove_leased(&mut self, batch: &OutboxBatch) -> Sql<(i64, i64)> {
        let ids: Vec<i64> = batch.items.iter().map(|it| it.id).collect();
        let r = self.query_one(
            "WITH gone AS (DELETE FROM outbox WHERE id = ANY($1) AND sender = $2 RETURNING bytes)
             SELECT count(*), coalesce(sum(bytes), 0)::BIGINT FROM gone",
            &[&ids, &batch.token],
        )?;
        Ok((r.try_get(0)?, r.try_get(1)?))
    }

    fn count_delivered(&mut self, n: i64, bytes: i64) -> Sql<()> {
        self.execute(
            "UPDATE outbox_totals SET rows = rows - $1, bytes = bytes - $2, delivered = delivered + $1
             WHERE id = 1",
            &[&n, &bytes],
        )?;
        Ok(())
    }

    fn release_leased(&mut self, batch: &OutboxBatch) -> Sql<()> {
        let ids: Vec<i64> = batch.items.iter().map(|it| it.id).collect();
        self.execute(
            "UPDATE outbox SET sender = NULL, sending_until = NULL WHERE id = ANY($1) AND sender = $2",
            &[&ids, &batch.token],
        )?;
        Ok(())
    }

    /// One statement; `SKIP LOCKED`, so two senders never take the same
    /// notice and neither waits for the other.
    fn take_notice(&mut self, now: Millis, sender: &str, until: Millis) -> Sql<Option<PendingNotice>> {
        let r = self.query_opt(
            "UPDATE notices SET sender = $2, sending_until = $3, attempts = attempts + 1
             WHERE id = (SELECT id FROM notices
                         WHERE sent_at IS NULL AND next_try_at <= $1
                           AND (sending_until IS NULL OR sending_until <= $1)
                         ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING id, account, kind, message, details",
            &[&now, &sender, &until],
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

    fn notice_delivered(&mut self, now: Millis, n: &PendingNotice) -> Sql<()> {
        self.execute(
            "UPDATE notices SET sent_at = $3, sending_until = NULL, last_error = NULL
             WHERE id = $1 AND sender = $2",
            &[&n.id, &n.sender, &now],
        )?;
        Ok(())
    }

    fn notice_failed(&mut self, n: &PendingNotice, error: &str, retry_at: Millis) -> Sql<()> {
        self.execute(
            "UPDATE notices SET sending_until = NULL, last_error = $3, next_try_at = $4
             WHERE id = $1 AND sender = $2",
            &[&n.id, &n.sender, &error, &retry_at],
        )?;
        Ok(())
    }
}

impl OutboxReads for Client {
    /// Read in one snapshot.
    fn outbox_totals(&mut self) -> Sql<OutboxTotals> {
        let r = self.query_one(
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

    fn notice_records(&mut self) -> Sql<Vec<NoticeRecord>> {
        let rows = self.query(
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
}
