//! The queue's rows in SQLite's SQL ([`QueueRows`]). One writer holds the
//! file for the whole transaction, so no row needs a lock of its own.

use rusqlite::{params, OptionalExtension};

use super::meta;
use super::rows::Rows;
use super::write::record;
use crate::clock::Millis;
use crate::store::queue::{KnownDoc, NewDoc, QueueRows, Vanished};

/// What a gone source does to its row (`?1` now, `?2` why), before the
/// condition that picks the rows: dead, owner and result forgotten.
const GONE: &str =
    "UPDATE jobs SET source_gone = 1, status = 'dead', owner_token = NULL, owner_worker = NULL,
            lease_expires_at = NULL, retry_at = NULL, parked_on = NULL, result_path = NULL,
            checksum = NULL,
            last_error = ?2, updated_at = ?1
     WHERE source_gone = 0 AND ";

impl QueueRows for Rows<'_> {
    fn insert_doc(&mut self, now: Millis, max_attempts: i64, doc: &NewDoc) -> rusqlite::Result<Option<i64>> {
        self.0
            .prepare_cached(
                "INSERT INTO jobs (doc_key, version, source_stat, status, max_attempts, created_at, updated_at)
                 VALUES (?1, ?2, ?5, 'discovered', ?3, ?4, ?4)
                 ON CONFLICT (doc_key) DO NOTHING RETURNING id",
            )?
            .query_row(params![doc.key, doc.version, max_attempts, now, doc.stat], |r| {
                r.get(0)
            })
            .optional()
    }

    fn known_doc(&mut self, key: &str) -> rusqlite::Result<KnownDoc> {
        self.0
            .prepare_cached(
                "SELECT id, version, source_stat, status, source_gone FROM jobs WHERE doc_key = ?1",
            )?
            .query_row([key], |r| {
                Ok(KnownDoc {
                    id: r.get(0)?,
                    version: r.get(1)?,
                    stat: r.get(2)?,
                    status: r.get(3)?,
                    gone: r.get(4)?,
                })
            })
    }

    fn set_stat(&mut self, id: i64, stat: &str) -> rusqlite::Result<()> {
        self.0
            .prepare_cached("UPDATE jobs SET source_stat = ?2 WHERE id = ?1")?
            .execute(params![id, stat])?;
        Ok(())
    }

    fn reset_to_version(
        &mut self,
        id: i64,
        now: Millis,
        max_attempts: i64,
        doc: &NewDoc,
    ) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "UPDATE jobs SET version = ?2, source_stat = ?5, status = 'discovered', attempts = 0, lost_leases = 0,
                        owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
                        last_error = NULL, parked_on = NULL, source_gone = 0, max_attempts = ?3,
                        updated_at = ?4
                 WHERE id = ?1",
            )?
            .execute(params![id, doc.version, max_attempts, now, doc.stat])?;
        Ok(())
    }

    fn requeue_settled(&mut self, id: i64, now: Millis) -> rusqlite::Result<bool> {
        let n = self
            .0
            .prepare_cached(
                "UPDATE jobs SET status = 'discovered', attempts = 0, lost_leases = 0, retry_at = NULL,
                        parked_on = NULL,
                        updated_at = ?2
                 WHERE id = ?1 AND status IN ('dead', 'retrying', 'indexed') AND source_gone = 0",
            )?
            .execute(params![id, now])?;
        Ok(n == 1)
    }

    fn status_with_result(&mut self, id: i64, result_path: &str) -> rusqlite::Result<Option<String>> {
        self.0
            .prepare_cached("SELECT status FROM jobs WHERE id = ?1 AND result_path = ?2")?
            .query_row(params![id, result_path], |r| r.get(0))
            .optional()
    }

    fn clear_result(&mut self, id: i64, now: Millis) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "UPDATE jobs SET result_path = NULL, checksum = NULL, result_bytes = NULL, no_text = NULL, title = NULL, author = NULL, doc_date = NULL, pages = NULL, language = NULL, updated_at = ?2,
                        status = CASE status WHEN 'indexed' THEN 'discovered' ELSE status END,
                        attempts = CASE status WHEN 'indexed' THEN 0 ELSE attempts END,
                        lost_leases = CASE status WHEN 'indexed' THEN 0 ELSE lost_leases END
                 WHERE id = ?1",
            )?
            .execute(params![id, now])?;
        Ok(())
    }

    fn dead_ids(&mut self) -> rusqlite::Result<Vec<i64>> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT id FROM jobs WHERE status = 'dead' AND source_gone = 0")?;
        let ids = stmt.query_map([], |r| r.get(0))?;
        ids.collect()
    }

    fn unindex(&mut self, ids: &[i64]) -> rusqlite::Result<()> {
        super::search_index::remove_all(self.0, ids)
    }

    fn history(&mut self, id: i64, now: Millis, event: &str, detail: Option<&str>) -> rusqlite::Result<()> {
        record(self.0, id, now, event, None, None, detail)
    }

    fn next_scan(&mut self) -> rusqlite::Result<i64> {
        self.0.execute(
            "INSERT INTO meta (name, value) VALUES ('scan', '1')
             ON CONFLICT (name) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
            [],
        )?;
        self.0.query_row(
            "SELECT CAST(value AS INTEGER) FROM meta WHERE name = 'scan'",
            [],
            |r| r.get(0),
        )
    }

    fn latest_scan(&mut self) -> rusqlite::Result<Option<i64>> {
        self.0
            .query_row(
                "SELECT CAST(value AS INTEGER) FROM meta WHERE name = 'scan'",
                [],
                |r| r.get(0),
            )
            .optional()
    }

    fn mark_seen(&mut self, scan: i64, key: &str) -> rusqlite::Result<()> {
        self.0
            .prepare_cached("UPDATE jobs SET seen_scan = max(seen_scan, ?2) WHERE doc_key = ?1")?
            .execute(params![key, scan])?;
        Ok(())
    }

    fn gone_unseen(&mut self, now: Millis, scan: i64, why: &str) -> rusqlite::Result<Vec<i64>> {
        self.0
            .prepare_cached(&format!("{GONE} seen_scan < ?3 RETURNING id"))?
            .query_map(params![now, why, scan], |r| r.get(0))?
            .collect()
    }

    /// One statement per key and per prefix; a prefix is a range the key's
    /// unique index answers: prefix <= k < the prefix with its last
    /// character one higher.
    fn gone_keys(
        &mut self,
        now: Millis,
        keys: &[String],
        prefixes: &[String],
        why: &str,
    ) -> rusqlite::Result<Vec<i64>> {
        let mut ids = Vec::new();
        let mut exact = self
            .0
            .prepare_cached(&format!("{GONE} doc_key = ?3 RETURNING id"))?;
        for key in keys {
            for id in exact.query_map(params![now, why, key], |r| r.get::<_, i64>(0))? {
                ids.push(id?);
            }
        }
        let mut under = self
            .0
            .prepare_cached(&format!("{GONE} doc_key >= ?3 AND doc_key < ?4 RETURNING id"))?;
        for prefix in prefixes {
            let Some(end) = prefix_end(prefix) else { continue };
            for id in under.query_map(params![now, why, prefix, end], |r| r.get::<_, i64>(0))? {
                ids.push(id?);
            }
        }
        Ok(ids)
    }

    fn gone_unchanged(
        &mut self,
        now: Millis,
        vanished: &[Vanished],
        why: &str,
    ) -> rusqlite::Result<Vec<i64>> {
        let mut stmt = self
            .0
            .prepare_cached(&format!("{GONE} doc_key = ?3 AND source_stat = ?4 RETURNING id"))?;
        let mut ids = Vec::new();
        for v in vanished {
            for id in stmt.query_map(params![now, why, v.key, v.stat], |r| r.get::<_, i64>(0))? {
                ids.push(id?);
            }
        }
        Ok(ids)
    }

    fn meta(&mut self, name: &str) -> rusqlite::Result<Option<String>> {
        meta::meta(self.0, name)
    }

    fn meta_insert(&mut self, name: &str, value: &str) -> rusqlite::Result<()> {
        meta::meta_insert(self.0, name, value)
    }

    fn meta_put(&mut self, name: &str, value: &str) -> rusqlite::Result<()> {
        meta::meta_set(self.0, name, value)
    }

    fn meta_remove(&mut self, name: &str) -> rusqlite::Result<()> {
        self.0.execute("DELETE FROM meta WHERE name = ?1", [name])?;
        Ok(())
    }

    /// One writer holds the file: the decision is one at a time already.
    fn lock_meta(&mut self) -> rusqlite::Result<()> {
        Ok(())
    }
}

/// The least string above every string that starts with `prefix`: its last
/// character one higher. `None` for an empty prefix or one whose last
/// character has no successor.
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    let last = chars.pop()?;
    let next = char::from_u32(u32::from(last) + 1)?;
    chars.push(next);
    Some(chars.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_ends_just_above_everything_it_starts() {
        assert_eq!(prefix_end("dir/").as_deref(), Some("dir0"));
        assert_eq!(prefix_end("hex:6469722f").as_deref(), Some("hex:6469722g"));
        assert_eq!(prefix_end(""), None);
        let end = prefix_end("a/").unwrap();
        for inside in ["a/", "a/b", "a/\u{10ffff}"] {
            assert!(inside >= "a/" && inside < end.as_str(), "{inside}");
        }
        for outside in ["a", "a0", "a.txt", "b/"] {
            assert!(!(outside >= "a/" && outside < end.as_str()), "{outside}");
        }
    }
}
