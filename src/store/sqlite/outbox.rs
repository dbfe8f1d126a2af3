//! The outbox's and the notices' rows on SQLite (the rules are in
//! `store/outbox.rs`). The single writer runs each write transaction alone,
//! so the totals row needs no lock of its own.

use rusqlite::{params, OptionalExtension};

use super::rows::Rows;
use crate::clock::Millis;
use crate::store::outbox::{
    breaks_cap, NoticeRecord, OutboxBatch, OutboxCap, OutboxItem, OutboxReads, OutboxRows, OutboxTotals,
    PendingNotice,
};

impl OutboxRows for Rows<'_> {
    fn lock_totals(&mut self) -> rusqlite::Result<(i64, Millis)> {
        self.0
            .prepare_cached("SELECT bytes, next_send_at FROM outbox_totals WHERE id = 1")?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
    }

    fn insert_result(
        &mut self,
        now: Millis,
        id: i64,
        checksum: &str,
        text: &str,
        bytes: i64,
    ) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "INSERT INTO outbox (job_id, doc_key, version, checksum, body, bytes, created_at)
                 SELECT id, doc_key, version, ?2, ?3, ?4, ?5 FROM jobs WHERE id = ?1",
            )?
            .execute(params![id, checksum, text, bytes, now])?;
        self.0
            .prepare_cached("UPDATE outbox_totals SET rows = rows + 1, bytes = bytes + ?1 WHERE id = 1")?
            .execute([bytes])?;
        Ok(())
    }

    /// Row by row, oldest first, below the newest row.
    fn drop_over_cap(&mut self, now: Millis, cap: &OutboxCap, mut total: i64) -> rusqlite::Result<()> {
        let tx = self.0;
        let newest: Option<i64> = tx
            .prepare_cached("SELECT max(id) FROM outbox")?
            .query_row([], |r| r.get(0))?;
        let Some(newest) = newest else { return Ok(()) };
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
            if !breaks_cap(cap, now, created, total) {
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

    fn waiting(&mut self, now: Millis, n: usize) -> rusqlite::Result<Vec<OutboxItem>> {
        let mut s = self.0.prepare(
            "SELECT id, doc_key, version, checksum, body FROM outbox
             WHERE sending_until IS NULL OR sending_until <= ?1
             ORDER BY id LIMIT ?2",
        )?;
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        let rows = s.query_map(params![now, limit], |r| {
            Ok(OutboxItem {
                id: r.get(0)?,
                key: r.get(1)?,
                version: r.get(2)?,
                checksum: r.get(3)?,
                text: r.get(4)?,
            })
        })?;
        rows.collect()
    }

    fn lease_rows(&mut self, ids: &[i64], token: &str, until: Millis) -> rusqlite::Result<()> {
        for id in ids {
            self.0.execute(
                "UPDATE outbox SET sender = ?2, sending_until = ?3 WHERE id = ?1",
                params![id, token, until],
            )?;
        }
        Ok(())
    }

    fn set_next_send(&mut self, at: Millis) -> rusqlite::Result<()> {
        self.0
            .execute("UPDATE outbox_totals SET next_send_at = ?1 WHERE id = 1", [at])?;
        Ok(())
    }

    fn defer_next_send(&mut self, at: Millis) -> rusqlite::Result<()> {
        self.0.execute(
            "UPDATE outbox_totals SET next_send_at = max(next_send_at, ?1) WHERE id = 1",
            [at],
        )?;
        Ok(())
    }

    fn remove_leased(&mut self, batch: &OutboxBatch) -> rusqlite::Result<(i64, i64)> {
        let (mut done, mut bytes) = (0i64, 0i64);
        for it in &batch.items {
            let size: Option<i64> = self
                .0
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
        Ok((done, bytes))
    }

    fn count_delivered(&mut self, n: i64, bytes: i64) -> rusqlite::Result<()> {
        self.0.execute(
            "UPDATE outbox_totals SET rows = rows - ?1, bytes = bytes - ?2, delivered = delivered + ?1
             WHERE id = 1",
            params![n, bytes],
        )?;
        Ok(())
    }

    fn release_leased(&mut self, batch: &OutboxBatch) -> rusqlite::Result<()> {
        for it in &batch.items {
            self.0.execute(
                "UPDATE outbox SET sender = NULL, sending_until = NULL WHERE id = ?1 AND sender = ?2",
                params![it.id, batch.token],
            )?;
        }
        Ok(())
    }

    fn take_notice(
        &mut self,
        now: Millis,
        sender: &str,
        until: Millis,
    ) -> rusqlite::Result<Option<PendingNotice>> {
        let n = self
            .0
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
            self.0.execute(
                "UPDATE notices SET sender = ?2, sending_until = ?3, attempts = attempts + 1 WHERE id = ?1",
                params![n.id, sender, until],
            )?;
        }
        Ok(n)
    }

    fn notice_delivered(&mut self, now: Millis, n: &PendingNotice) -> rusqlite::Result<()> {
        self.0.execute(
            "UPDATE notices SET sent_at = ?3, sending_until = NULL, last_error = NULL
             WHERE id = ?1 AND sender = ?2",
            params![n.id, n.sender, now],
        )?;
        Ok(())
    }

    fn notice_failed(&mut self, n: &PendingNotice, error: &str, retry_at: Millis) -> rusqlite::Result<()> {
        self.0.execute(
            "UPDATE notices SET sending_until = NULL, last_error = ?3, next_try_at = ?4
             WHERE id = ?1 AND sender = ?2",
            params![n.id, n.sender, error, retry_at],
        )?;
        Ok(())
    }
}

impl OutboxReads for Rows<'_> {
    fn outbox_totals(&mut self) -> rusqlite::Result<OutboxTotals> {
        let oldest: Option<Millis> = self
            .0
            .query_row("SELECT min(created_at) FROM outbox", [], |r| r.get(0))?;
        self.0.query_row(
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

    fn notice_records(&mut self) -> rusqlite::Result<Vec<NoticeRecord>> {
        let mut s = self.0.prepare(
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
}
