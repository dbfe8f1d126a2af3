//! Putting documents into the queue and taking them back out of it by hand:
//! enqueue (idempotent on the key), requeue, forgetting a damaged result,
//! directory scans and marking vanished sources, and the settings set once.
//!
//! The decisions and their history lines are written here once, over
//! [`QueueRows`]; each engine's rows (`sqlite/queue.rs`, `postgres/queue.rs`)
//! are its SQL and the locks its concurrency needs.

use super::driver::Rows;
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

/// A known document whose file a directory walk did not find, with the
/// fingerprint the store held for it when the walk passed its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vanished {
    /// The document's key.
    pub key: String,
    /// Its stored source fingerprint at the time.
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

/// A known document's row, as enqueue compares it with a new version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KnownDoc {
    pub(crate) id: i64,
    pub(crate) version: String,
    pub(crate) stat: String,
    pub(crate) status: String,
    pub(crate) gone: bool,
}

/// The row operations the queue's rules need, in one engine's SQL, inside
/// one write transaction.
pub(crate) trait QueueRows: Rows {
    /// Insert `doc` as a new `discovered` row unless its key is known; its id when inserted.
    fn insert_doc(
        &mut self,
        now: Millis,
        max_attempts: i64,
        doc: &NewDoc,
    ) -> Result<Option<i64>, Self::Error>;
    /// The row of `key`, locked until the transaction ends where the engine needs it.
    fn known_doc(&mut self, key: &str) -> Result<KnownDoc, Self::Error>;
    /// Set row `id`'s source fingerprint.
    fn set_stat(&mut self, id: i64, stat: &str) -> Result<(), Self::Error>;
    /// Row `id` at `doc`'s version and fingerprint, `discovered`, with fresh
    /// attempts and lost leases, no owner, lease, retry, error, parking or gone mark.
    fn reset_to_version(
        &mut self,
        id: i64,
        now: Millis,
        max_attempts: i64,
        doc: &NewDoc,
    ) -> Result<(), Self::Error>;
    /// Row `id` back to `discovered` with fresh attempts and lost leases, if it
    /// is dead, retrying or indexed and its source exists; whether it changed.
    fn requeue_settled(&mut self, id: i64, now: Millis) -> Result<bool, Self::Error>;
    /// Row `id`'s status while `result_path` is its accepted result (locked
    /// where the engine needs it); `None` otherwise.
    fn status_with_result(&mut self, id: i64, result_path: &str) -> Result<Option<String>, Self::Error>;
    /// Clear row `id`'s result columns; an indexed row goes back to
    /// `discovered` with fresh attempts and lost leases, others keep their state.
    fn clear_result(&mut self, id: i64, now: Millis) -> Result<(), Self::Error>;
    /// The ids of the dead rows whose source exists.
    fn dead_ids(&mut self) -> Result<Vec<i64>, Self::Error>;
    /// Take documents `ids`' texts out of the search index.
    fn unindex(&mut self, ids: &[i64]) -> Result<(), Self::Error>;
    /// Append history line `event` (with `detail`) to row `id`.
    fn history(&mut self, id: i64, now: Millis, event: &str, detail: Option<&str>)
        -> Result<(), Self::Error>;
    /// Raise the scan counter by one (from none to 1); the new number.
    fn next_scan(&mut self) -> Result<i64, Self::Error>;
    /// The scan counter, locked until the transaction ends where the engine
    /// needs it (so no scan begins meanwhile); `None` before the first scan.
    fn latest_scan(&mut self) -> Result<Option<i64>, Self::Error>;
    /// Stamp `key`'s row as seen by scan `scan`, never lowering a newer stamp.
    fn mark_seen(&mut self, scan: i64, key: &str) -> Result<(), Self::Error>;
    /// Mark gone (dead, owner and result forgotten, `last_error` = `why`)
    /// every row not gone that scan `scan` did not see; their ids.
    fn gone_unseen(&mut self, now: Millis, scan: i64, why: &str) -> Result<Vec<i64>, Self::Error>;
    /// Mark gone, as [`QueueRows::gone_unseen`] does, the rows not gone of
    /// `keys` and of every key that starts with one of `prefixes` (an empty
    /// prefix stands for nothing); their ids.
    fn gone_keys(
        &mut self,
        now: Millis,
        keys: &[String],
        prefixes: &[String],
        why: &str,
    ) -> Result<Vec<i64>, Self::Error>;
    /// Mark gone, as [`QueueRows::gone_unseen`] does, each row not gone of
    /// `vanished`'s keys whose source fingerprint is still the one given
    /// (a file recorded again meanwhile has another); their ids.
    fn gone_unchanged(
        &mut self,
        now: Millis,
        vanished: &[Vanished],
        why: &str,
    ) -> Result<Vec<i64>, Self::Error>;
    /// Setting `name`.
    fn meta(&mut self, name: &str) -> Result<Option<String>, Self::Error>;
    /// Set `name` to `value` unless it is set.
    fn meta_insert(&mut self, name: &str, value: &str) -> Result<(), Self::Error>;
    /// Set `name` to `value`, replacing any value it had.
    fn meta_put(&mut self, name: &str, value: &str) -> Result<(), Self::Error>;
    /// Remove setting `name`, if it is set.
    fn meta_remove(&mut self, name: &str) -> Result<(), Self::Error>;
    /// Make "set once among rivals" one decision at a time, where the engine
    /// lets two write transactions run together.
    fn lock_meta(&mut self) -> Result<(), Self::Error>;
}

/// Insert a new document, or re-queue a known one whose version changed.
///
/// A changed version moves any state back to `discovered` with fresh attempts
/// and no lost leases: a changed file deserves a new extraction, and a worker
/// still extracting the old version is fenced out (its completion is refused).
/// The previously accepted `result_path` stays until a new one is accepted.
/// A known row whose source was gone is queued again likewise.
pub(crate) fn enqueue<R: QueueRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    max_attempts: i64,
    doc: &NewDoc,
) -> Result<Enqueued, R::Error> {
    if let Some(id) = rows.insert_doc(now, max_attempts, doc)? {
        rows.history(id, now, "enqueued", Some(&format!("version {}", doc.version)))?;
        return Ok(Enqueued::Inserted(JobId(id)));
    }
    let known = rows.known_doc(&doc.key)?;
    if known.version == doc.version && !known.gone {
        if known.stat != doc.stat {
            rows.set_stat(known.id, &doc.stat)?;
        }
        return Ok(Enqueued::Unchanged(JobId(known.id)));
    }
    rows.reset_to_version(known.id, now, max_attempts, doc)?;
    let detail = format!(
        "version {} -> {} (was {})",
        known.version, doc.version, known.status
    );
    rows.history(known.id, now, "requeued", Some(&detail))?;
    Ok(Enqueued::Requeued(JobId(known.id)))
}

/// [`enqueue`] for each of `docs`, in order: one outcome each.
pub(crate) fn enqueue_many<R: QueueRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    max_attempts: i64,
    docs: &[NewDoc],
) -> Result<Vec<Enqueued>, R::Error> {
    docs.iter().map(|d| enqueue(rows, now, max_attempts, d)).collect()
}

/// Put a settled document back in the queue with fresh attempts and lost leases
/// (`leasehold retry`).
/// A document being extracted is left alone: its owner may still finish.
pub(crate) fn requeue<R: QueueRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    id: i64,
    why: &str,
) -> Result<bool, R::Error> {
    let changed = rows.requeue_settled(id, now)?;
    if changed {
        rows.history(id, now, "requeued", Some(why))?;
    }
    Ok(changed)
}

/// [`requeue`] every dead document whose source exists (`retry --dead`); how many.
pub(crate) fn requeue_dead<R: QueueRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    why: &str,
) -> Result<usize, R::Error> {
    let mut n = 0;
    for id in rows.dead_ids()? {
        n += usize::from(requeue(rows, now, id, why)?);
    }
    Ok(n)
}

/// Forget document `id`'s accepted result `result_path` (its file in the
/// mirror is missing or altered), take its text out of the search index, and,
/// if it was indexed, queue it again with fresh attempts: the next worker
/// extracts it anew. Only while `result_path` is still the accepted one (a
/// completion meanwhile made a newer result, which stands). Other states keep
/// theirs: a document queued, retrying, extracting or dead is already on its
/// way to a new result or settled without one. True if the row changed.
pub(crate) fn forget_result<R: QueueRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    id: i64,
    result_path: &str,
    why: &str,
) -> Result<bool, R::Error> {
    let Some(status) = rows.status_with_result(id, result_path)? else {
        return Ok(false);
    };
    rows.clear_result(id, now)?;
    rows.unindex(&[id])?;
    let event = if status == "indexed" {
        "requeued"
    } else {
        "result_forgotten"
    };
    rows.history(id, now, event, Some(why))?;
    Ok(true)
}

/// Start a directory scan: a new scan number, stamped on every row it sees.
pub(crate) fn begin_scan<R: QueueRows + ?Sized>(rows: &mut R) -> Result<i64, R::Error> {
    rows.next_scan()
}

/// What scan `scan` found: `changed` documents enqueued (one outcome each)
/// and stamped as seen, `unchanged` keys stamped as seen.
pub(crate) fn record_scan<R: QueueRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    max_attempts: i64,
    scan: i64,
    unchanged: &[String],
    changed: &[NewDoc],
) -> Result<Vec<Enqueued>, R::Error> {
    let mut out = Vec::with_capacity(changed.len());
    for d in changed {
        out.push(enqueue(rows, now, max_attempts, d)?);
        rows.mark_seen(scan, &d.key)?;
    }
    for k in unchanged {
        rows.mark_seen(scan, k)?;
    }
    Ok(out)
}

/// Sources a finished scan did not see have disappeared: stop extracting them
/// and forget their results, so that cleanup removes their mirror files. The
/// rows and their history stay. Only the newest scan begun may judge: an
/// older one finishing late has not seen what the newer one saw.
pub(crate) fn finish_scan<R: QueueRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    scan: i64,
    why: &str,
) -> Result<usize, R::Error> {
    if rows.latest_scan()? != Some(scan) {
        return Ok(0);
    }
    let ids = rows.gone_unseen(now, scan, why)?;
    record_gone(rows, now, ids)
}

/// Mark the documents of removed paths gone, as a finished scan marks the
/// sources it did not see ([`finish_scan`]): dead, owner and result
/// forgotten, so a worker still extracting is fenced out and cleanup removes
/// the files. `keys` are documents; `prefixes` stand for every document whose
/// key starts with one (a directory moved out of the tree is one event). The
/// caller has just seen that the paths are not there; a file that comes back
/// is queued again by its next event ([`enqueue`] requeues a gone row).
pub(crate) fn mark_gone<R: QueueRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    keys: &[String],
    prefixes: &[String],
    why: &str,
) -> Result<usize, R::Error> {
    let ids = rows.gone_keys(now, keys, prefixes, why)?;
    record_gone(rows, now, ids)
}

/// Mark the documents a directory walk passed without finding gone, as
/// [`mark_gone`] does, unless their fingerprint changed since the walk read
/// it: a file recreated and recorded by another process meanwhile stays.
pub(crate) fn mark_vanished<R: QueueRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    vanished: &[Vanished],
    why: &str,
) -> Result<usize, R::Error> {
    let ids = rows.gone_unchanged(now, vanished, why)?;
    record_gone(rows, now, ids)
}

/// The `source_gone` history line of each document of `ids`, in id order,
/// and their texts out of the search index; how many there were.
fn record_gone<R: QueueRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    mut ids: Vec<i64>,
) -> Result<usize, R::Error> {
    ids.sort_unstable();
    for id in &ids {
        rows.history(*id, now, "source_gone", None)?;
    }
    rows.unindex(&ids)?;
    Ok(ids.len())
}

/// Set `name` to `value` unless it or one of `rivals` is set already: the
/// setting in force, as (its name, its value).
pub(crate) fn meta_set_once_among<R: QueueRows + ?Sized>(
    rows: &mut R,
    name: &str,
    value: &str,
    rivals: &[&str],
) -> Result<(String, String), R::Error> {
    rows.lock_meta()?;
    for rival in rivals {
        if let Some(held) = rows.meta(rival)? {
            return Ok(((*rival).to_owned(), held));
        }
    }
    rows.meta_insert(name, value)?;
    let held = rows.meta(name)?.unwrap_or_else(|| value.to_owned());
    Ok((name.to_owned(), held))
}

/// Read the settings `names`, let `edit` change them, and write back the
/// ones it changed (`None` removes one): a decision over several settings
/// made one at a time, as [`meta_set_once_among`]'s.
pub(crate) fn edit_meta<R: QueueRows + ?Sized>(
    rows: &mut R,
    names: &[&str],
    edit: &mut dyn FnMut(&mut [Option<String>]),
) -> Result<(), R::Error> {
    rows.lock_meta()?;
    let mut before = Vec::with_capacity(names.len());
    for name in names {
        before.push(rows.meta(name)?);
    }
    let mut after = before.clone();
    edit(&mut after);
    for ((name, old), new) in names.iter().zip(&before).zip(&after) {
        match new {
            _ if new == old => {}
            Some(value) => rows.meta_put(name, value)?,
            None => rows.meta_remove(name)?,
        }
    }
    Ok(())
}

/// Set `name` to `value`, replacing any value it had.
pub(crate) fn set_meta<R: QueueRows + ?Sized>(rows: &mut R, name: &str, value: &str) -> Result<(), R::Error> {
    rows.meta_put(name, value)
}
