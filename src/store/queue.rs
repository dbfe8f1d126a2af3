//! Putting documents into the queue and taking them back out of it by hand:
//! enqueue (idempotent on the key), requeue, and marking vanished sources.

use rusqlite::{params, Connection, OptionalExtension};

use super::sqlite::write::record;
use crate::clock::Millis;
use crate::job::{Enqueued, JobId};

/// A document to enqueue: its unique key and the version of its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDoc {
    /// Unique document key (for the directory source: the path relative to the root).
    pub key: String,
    /// Source version; re-enqueuing with another version queues the document again.
    pub version: String,
    /// A cheap fingerprint (e.g. size and mtime) kept beside the version so a
    /// re-scan can skip reading unchanged sources; changing it alone re-queues nothing.
    pub stat: String,
}

impl NewDoc {
    /// A document `key` at source `version`, with no stat fingerprint.
    pub fn new(key: impl Into<String>, version: impl Into<String>) -> Self {
        NewDoc {
            key: key.into(),
            version: version.into(),
            stat: String::new(),
        }
    }

    /// The same document with a source fingerprint.
    pub fn with_stat(mut self, stat: impl Into<String>) -> Self {
        self.stat = stat.into();
        self
    }
}

/// Insert a new document, or re-queue a known one whose version changed.
///
/// A changed version moves any state back to `discovered` with fresh attempts
/// and no lost leases: a changed file deserves a new extraction, and a worker
/// still extracting the old version is fenced out (its completion is refused).
/// The previously accepted `result_path` stays until a new one is accepted.
pub(crate) fn enqueue(
    tx: &Connection,
    now: Millis,
    max_attempts: i64,
    doc: &NewDoc,
) -> rusqlite::Result<Enqueued> {
    let inserted: Option<i64> = tx
        .prepare_cached(
            "INSERT INTO jobs (doc_key, version, source_stat, status, max_attempts, created_at, updated_at)
             VALUES (?1, ?2, ?5, 'discovered', ?3, ?4, ?4)
             ON CONFLICT (doc_key) DO NOTHING RETURNING id",
        )?
        .query_row(params![doc.key, doc.version, max_attempts, now, doc.stat], |r| {
            r.get(0)
        })
        .optional()?;
    if let Some(id) = inserted {
        record(
            tx,
            id,
            now,
            "enqueued",
            None,
            None,
            Some(&format!("version {}", doc.version)),
        )?;
        return Ok(Enqueued::Inserted(JobId(id)));
    }
    let (id, version, stat, status, gone): (i64, String, String, String, bool) = tx
        .prepare_cached("SELECT id, version, source_stat, status, source_gone FROM jobs WHERE doc_key = ?1")?
        .query_row([&doc.key], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?;
    if version == doc.version && !gone {
        if stat != doc.stat {
            tx.prepare_cached("UPDATE jobs SET source_stat = ?2 WHERE id = ?1")?
                .execute(params![id, doc.stat])?;
        }
        return Ok(Enqueued::Unchanged(JobId(id)));
    }
    tx.prepare_cached(
        "UPDATE jobs SET version = ?2, source_stat = ?5, status = 'discovered', attempts = 0, lost_leases = 0,
                owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
                last_error = NULL, parked_on = NULL, source_gone = 0, max_attempts = ?3,
                updated_at = ?4
         WHERE id = ?1",
    )?
    .execute(params![id, doc.version, max_attempts, now, doc.stat])?;
    let detail = format!("version {version} -> {} (was {status})", doc.version);
    record(tx, id, now, "requeued", None, None, Some(&detail))?;
    Ok(Enqueued::Requeued(JobId(id)))
}

/// Put a settled document back in the queue with fresh attempts and lost leases
/// (`leasehold retry`).
/// A document being extracted is left alone: its owner may still finish.
pub(crate) fn requeue(tx: &Connection, now: Millis, id: i64, why: &str) -> rusqlite::Result<bool> {
    let n = tx
        .prepare_cached(
            "UPDATE jobs SET status = 'discovered', attempts = 0, lost_leases = 0, retry_at = NULL,
                    parked_on = NULL,
                    updated_at = ?2
             WHERE id = ?1 AND status IN ('dead', 'retrying', 'indexed') AND source_gone = 0",
        )?
        .execute(params![id, now])?;
    if n == 1 {
        record(tx, id, now, "requeued", None, None, Some(why))?;
    }
    Ok(n == 1)
}

/// Forget document `id`'s accepted result `result_path` (its file in the
/// mirror is missing or altered), take its text out of the search index, and,
/// if it was indexed, queue it again with fresh attempts: the next worker
/// extracts it anew. Only while `result_path` is still the accepted one (a
/// completion meanwhile made a newer result, which stands). Other states keep
/// theirs: a document queued, retrying, extracting or dead is already on its
/// way to a new result or settled without one. True if the row changed.
pub(crate) fn forget_result(
    tx: &Connection,
    now: Millis,
    id: i64,
    result_path: &str,
    why: &str,
) -> rusqlite::Result<bool> {
    let status: Option<String> = tx
        .prepare_cached("SELECT status FROM jobs WHERE id = ?1 AND result_path = ?2")?
        .query_row(params![id, result_path], |r| r.get(0))
        .optional()?;
    let Some(status) = status else {
        return Ok(false);
    };
    tx.prepare_cached(
        "UPDATE jobs SET result_path = NULL, checksum = NULL, result_bytes = NULL, updated_at = ?2,
                status = CASE status WHEN 'indexed' THEN 'discovered' ELSE status END,
                attempts = CASE status WHEN 'indexed' THEN 0 ELSE attempts END,
                lost_leases = CASE status WHEN 'indexed' THEN 0 ELSE lost_leases END
         WHERE id = ?1",
    )?
    .execute(params![id, now])?;
    super::search::sqlite::remove(tx, id)?;
    let event = if status == "indexed" {
        "requeued"
    } else {
        "result_forgotten"
    };
    record(tx, id, now, event, None, None, Some(why))?;
    Ok(true)
}

/// Every dead document's id, for `retry --dead`.
pub(crate) fn dead_ids(tx: &Connection) -> rusqlite::Result<Vec<i64>> {
    let mut stmt = tx.prepare_cached("SELECT id FROM jobs WHERE status = 'dead' AND source_gone = 0")?;
    let ids = stmt.query_map([], |r| r.get(0))?;
    ids.collect()
}

/// Start a directory scan: a new scan number, stamped on every row it sees.
pub(crate) fn begin_scan(tx: &Connection) -> rusqlite::Result<i64> {
    tx.execute(
        "INSERT INTO meta (name, value) VALUES ('scan', '1')
         ON CONFLICT (name) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
        [],
    )?;
    tx.query_row(
        "SELECT CAST(value AS INTEGER) FROM meta WHERE name = 'scan'",
        [],
        |r| r.get(0),
    )
}

/// Stamp `key` as seen by scan `scan`.
pub(crate) fn mark_seen(tx: &Connection, scan: i64, key: &str) -> rusqlite::Result<()> {
    // max(): a slower, older scan running at the same time never takes back a
    // newer scan's stamp.
    tx.prepare_cached("UPDATE jobs SET seen_scan = max(seen_scan, ?2) WHERE doc_key = ?1")?
        .execute(params![key, scan])?;
    Ok(())
}

/// Sources a finished scan did not see have disappeared: stop extracting them
/// and forget their results, so that cleanup removes their mirror files. The
/// rows and their history stay.
pub(crate) fn mark_unseen_gone(
    tx: &Connection,
    now: Millis,
    scan: i64,
    why: &str,
) -> rusqlite::Result<usize> {
    // Only the newest scan begun may judge: an older one finishing late has not
    // seen what the newer one saw.
    let latest: i64 = tx.query_row(
        "SELECT CAST(value AS INTEGER) FROM meta WHERE name = 'scan'",
        [],
        |r| r.get(0),
    )?;
    if latest != scan {
        return Ok(0);
    }
    let ids: Vec<i64> = tx
        .prepare_cached(&format!("{GONE} seen_scan < ?3 RETURNING id"))?
        .query_map(params![now, why, scan], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    record_gone(tx, now, &ids)
}

/// What a gone source does to its row (`?1` now, `?2` why), before the
/// condition that picks the rows: dead, owner and result forgotten.
const GONE: &str =
    "UPDATE jobs SET source_gone = 1, status = 'dead', owner_token = NULL, owner_worker = NULL,
            lease_expires_at = NULL, retry_at = NULL, parked_on = NULL, result_path = NULL,
            checksum = NULL,
            last_error = ?2, updated_at = ?1
     WHERE source_gone = 0 AND ";

/// The history line and the search index's removal of each document `ids`
/// marked gone; how many there were.
fn record_gone(tx: &Connection, now: Millis, ids: &[i64]) -> rusqlite::Result<usize> {
    for id in ids {
        record(tx, *id, now, "source_gone", None, None, None)?;
        super::search::sqlite::remove(tx, *id)?;
    }
    Ok(ids.len())
}

/// Mark the documents of removed paths gone, as a finished scan marks the
/// sources it did not see (`mark_unseen_gone`): dead, owner and result
/// forgotten, so a worker still extracting is fenced out and cleanup removes
/// the files. `keys` are documents; `prefixes` stand for every document whose
/// key starts with one (a directory moved out of the tree is one event). The
/// caller has just seen that the paths are not there; a file that comes back
/// is queued again by its next event (`enqueue` requeues a gone row).
pub(crate) fn mark_gone(
    tx: &Connection,
    now: Millis,
    keys: &[String],
    prefixes: &[String],
    why: &str,
) -> rusqlite::Result<usize> {
    let mut ids = Vec::new();
    let mut exact = tx.prepare_cached(&format!("{GONE} doc_key = ?3 RETURNING id"))?;
    for key in keys {
        for id in exact.query_map(params![now, why, key], |r| r.get::<_, i64>(0))? {
            ids.push(id?);
        }
    }
    // A range the key's unique index answers: prefix <= k < the prefix with
    // its last character one higher.
    let mut under = tx.prepare_cached(&format!("{GONE} doc_key >= ?3 AND doc_key < ?4 RETURNING id"))?;
    for prefix in prefixes {
        let Some(end) = prefix_end(prefix) else { continue };
        for id in under.query_map(params![now, why, prefix, end], |r| r.get::<_, i64>(0))? {
            ids.push(id?);
        }
    }
    drop((exact, under));
    record_gone(tx, now, &ids)
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

/// Set `name` to `value` unless it is already set; returns the value in force.
pub(crate) fn meta_set_once(tx: &Connection, name: &str, value: &str) -> rusqlite::Result<String> {
    tx.execute(
        "INSERT INTO meta (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
        [name, value],
    )?;
    tx.query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| r.get(0))
}

/// Set `name` to `value`, replacing any value it had.
pub(crate) fn meta_set(tx: &Connection, name: &str, value: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO meta (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        [name, value],
    )?;
    Ok(())
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
