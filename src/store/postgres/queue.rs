//! The queue's rows on PostgreSQL ([`QueueRows`]); the rules are in
//! `store/queue.rs`.
//!
//! Why READ COMMITTED is safe here, statement by statement:
//! - enqueue: `INSERT … ON CONFLICT DO NOTHING` waits for a concurrent
//!   insert of the same key and then does nothing; the row is then read
//!   `FOR UPDATE`, so the version compared is the one the UPDATE changes.
//! - requeue, marking gone: conditional UPDATEs, re-checked against the
//!   newest row version; their history lines are written under the row lock
//!   the UPDATE took. Forgetting a result reads the row `FOR UPDATE`.
//! - a scan is judged only by the newest scan begun: `finish_scan` reads
//!   the scan counter `FOR UPDATE`, so no scan can begin until it commits.
//! - settings set once among rivals take [`META_LOCK`], so two processes
//!   with different sources cannot both see none set and both win.

use ::postgres::Transaction;

use super::conn::Sql;
use super::conn::Tx;
use super::write::record;
use crate::clock::Millis;
use crate::store::queue::{KnownDoc, NewDoc, QueueRows, Vanished};

/// The transaction-level advisory lock that makes "set once among rivals"
/// one decision at a time: "leasemet" in ASCII.
const META_LOCK: i64 = 0x6c65_6173_656d_6574;

/// What a source that went away does to its document: dead, owner and
/// result forgotten; `$2` is now, `$3` the reason; the caller adds which.
const GONE: &str =
    "UPDATE jobs SET source_gone = TRUE, status = 'dead', owner_token = NULL, owner_worker = NULL,
            lease_expires_at = NULL, retry_at = NULL, parked_on = NULL, result_path = NULL,
            checksum = NULL, last_error = $3, updated_at = $2
     WHERE NOT source_gone AND ";

/// The ids a `RETURNING id` statement gave.
fn ids(rows: &[::postgres::Row]) -> Sql<Vec<i64>> {
    Ok(rows.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?)
}

impl QueueRows for Tx<'_> {
    fn insert_doc(&mut self, now: Millis, max_attempts: i64, doc: &NewDoc) -> Sql<Option<i64>> {
        let inserted = self.query_opt(
            "INSERT INTO jobs (doc_key, version, source_stat, status, max_attempts, created_at, updated_at)
             VALUES ($1, $2, $5, 'discovered', $3, $4, $4)
             ON CONFLICT (doc_key) DO NOTHING RETURNING id",
            &[&doc.key, &doc.version, &max_attempts, &now, &doc.stat],
        )?;
        Ok(inserted.map(|r| r.try_get(0)).transpose()?)
    }

    fn known_doc(&mut self, key: &str) -> Sql<KnownDoc> {
        let row = self.query_one(
            "SELECT id, version, source_stat, status, source_gone FROM jobs WHERE doc_key = $1 FOR UPDATE",
            &[&key],
        )?;
        Ok(KnownDoc {
            id: row.try_get(0)?,
            version: row.try_get(1)?,
            stat: row.try_get(2)?,
            status: row.try_get(3)?,
            gone: row.try_get(4)?,
        })
    }

    fn set_stat(&mut self, id: i64, stat: &str) -> Sql<()> {
        self.execute("UPDATE jobs SET source_stat = $2 WHERE id = $1", &[&id, &stat])?;
        Ok(())
    }

    fn reset_to_version(&mut self, id: i64, now: Millis, max_attempts: i64, doc: &NewDoc) -> Sql<()> {
        self.execute(
            "UPDATE jobs SET version = $2, source_stat = $5, status = 'discovered', attempts = 0, lost_leases = 0,
                    owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
                    last_error = NULL, parked_on = NULL, source_gone = FALSE, max_attempts = $3,
                    updated_at = $4
             WHERE id = $1",
            &[&id, &doc.version, &max_attempts, &now, &doc.stat],
        )?;
        Ok(())
    }

    fn requeue_settled(&mut self, id: i64, now: Millis) -> Sql<bool> {
        let n = self.execute(
            "UPDATE jobs SET status = 'discovered', attempts = 0, lost_leases = 0, retry_at = NULL,
                    parked_on = NULL, updated_at = $2
             WHERE id = $1 AND status IN ('dead', 'retrying', 'indexed') AND NOT source_gone",
            &[&id, &now],
        )?;
        Ok(n == 1)
    }

    fn status_with_result(&mut self, id: i64, result_path: &str) -> Sql<Option<String>> {
        let row = self.query_opt(
            "SELECT status FROM jobs WHERE id = $1 AND result_path = $2 FOR UPDATE",
            &[&id, &result_path],
        )?;
        Ok(row.map(|r| r.try_get(0)).transpose()?)
    }

    fn clear_result(&mut self, id: i64, now: Millis) -> Sql<()> {
        self.execute(
            "UPDATE jobs SET result_path = NULL, checksum = NULL, result_bytes = NULL, no_text = NULL, title = NULL, author = NULL, doc_date = NULL, pages = NULL, language = NULL, updated_at = $2,
                    status = CASE status WHEN 'indexed' THEN 'discovered' ELSE status END,
                    attempts = CASE status WHEN 'indexed' THEN 0 ELSE attempts END,
                    lost_leases = CASE status WHEN 'indexed' THEN 0 ELSE lost_leases END
             WHERE id = $1",
            &[&id, &now],
        )?;
        Ok(())
    }

    fn dead_ids(&mut self) -> Sql<Vec<i64>> {
        let rows = self.query(
            "SELECT id FROM jobs WHERE status = 'dead' AND NOT source_gone ORDER BY id",
            &[],
        )?;
        ids(&rows)
    }

    fn unindex(&mut self, ids: &[i64]) -> Sql<()> {
        crate::store::postgres::search_index::remove(self, ids)
    }

    fn history(&mut self, id: i64, now: Millis, event: &str, detail: Option<&str>) -> Sql<()> {
        record(self, id, now, event, None, None, detail)
    }

    /// In one statement.
    fn next_scan(&mut self) -> Sql<i64> {
        let row = self.query_one(
            "INSERT INTO meta (name, value) VALUES ('scan', '1')
             ON CONFLICT (name) DO UPDATE SET value = (meta.value::BIGINT + 1)::TEXT
             RETURNING value::BIGINT",
            &[],
        )?;
        Ok(row.try_get(0)?)
    }

    /// The lock on the counter keeps a newer scan from beginning meanwhile.
    fn latest_scan(&mut self) -> Sql<Option<i64>> {
        Ok(self
            .query_opt(
                "SELECT value::BIGINT FROM meta WHERE name = 'scan' FOR UPDATE",
                &[],
            )?
            .map(|r| r.try_get(0))
            .transpose()?)
    }

    fn mark_seen(&mut self, scan: i64, key: &str) -> Sql<()> {
        self.execute(
            "UPDATE jobs SET seen_scan = GREATEST(seen_scan, $2) WHERE doc_key = $1",
            &[&key, &scan],
        )?;
        Ok(())
    }

    fn gone_unseen(&mut self, now: Millis, scan: i64, why: &str) -> Sql<Vec<i64>> {
        let sql = format!("{GONE} seen_scan < $1 RETURNING id");
        let rows = self.query(sql.as_str(), &[&scan, &now, &why])?;
        ids(&rows)
    }

    /// One statement. `starts_with` rather than a key range: the range's
    /// bounds assume the code-point order, which the database's collation
    /// need not be.
    fn gone_keys(&mut self, now: Millis, keys: &[String], prefixes: &[String], why: &str) -> Sql<Vec<i64>> {
        let sql = format!(
            "{GONE} (doc_key = ANY($1::TEXT[])
                     OR EXISTS (SELECT 1 FROM unnest($4::TEXT[]) AS p (prefix)
                                WHERE p.prefix <> '' AND starts_with(doc_key, p.prefix)))
             RETURNING id"
        );
        let rows = self.query(sql.as_str(), &[&keys, &now, &why, &prefixes])?;
        ids(&rows)
    }

    /// One statement: the pairs as two arrays, unnested side by side.
    fn gone_unchanged(&mut self, now: Millis, vanished: &[Vanished], why: &str) -> Sql<Vec<i64>> {
        let keys: Vec<&str> = vanished.iter().map(|v| v.key.as_str()).collect();
        let stats: Vec<&str> = vanished.iter().map(|v| v.stat.as_str()).collect();
        let sql = format!(
            "{GONE} (doc_key, source_stat) IN (SELECT k, s FROM unnest($1::TEXT[], $4::TEXT[]) AS v (k, s))
             RETURNING id"
        );
        let rows = self.query(sql.as_str(), &[&keys, &now, &why, &stats])?;
        ids(&rows)
    }

    fn meta(&mut self, name: &str) -> Sql<Option<String>> {
        Ok(self
            .query_opt("SELECT value FROM meta WHERE name = $1", &[&name])?
            .map(|r| r.try_get(0))
            .transpose()?)
    }

    fn meta_insert(&mut self, name: &str, value: &str) -> Sql<()> {
        self.execute(
            "INSERT INTO meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            &[&name, &value],
        )?;
        Ok(())
    }

    fn meta_put(&mut self, name: &str, value: &str) -> Sql<()> {
        meta_set(self, name, value)
    }

    fn meta_remove(&mut self, name: &str) -> Sql<()> {
        self.execute("DELETE FROM meta WHERE name = $1", &[&name])?;
        Ok(())
    }

    fn lock_meta(&mut self) -> Sql<()> {
        self.execute("SELECT pg_advisory_xact_lock($1)", &[&META_LOCK])?;
        Ok(())
    }
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
