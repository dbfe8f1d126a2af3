//! Cleanup: the rule that joins the store and the mirror (DESIGN §5).
//!
//! A document's files are deleted only under its lock, and the row is read only
//! once that lock is held: the accepted `result_path` and the current owner's
//! generation are kept, every other generation and temp file goes. The lock is
//! the document's exclusive fs2 lock on SQLite, and its row lock on PostgreSQL
//! (DESIGN §12), where machines share the mirror and its file system may not
//! lock; there the current owner's temp files are kept too, since its writer
//! holds no file lock. The worker runs [`cleanup`] after every claim; `gc` and `doctor` run
//! [`sweep`] over the whole mirror (a dry run for doctor).
//!
//! None of them waits long for a lock: a document whose lock another process
//! holds (a slow or stopped writer) is skipped, listed in
//! [`CleanupReport::busy`] and counted by the mirror
//! ([`Mirror::cleanups_skipped`]); its leftovers go at its next cleanup or the
//! next `gc`.

use crate::error::{Error, Result};
use crate::job::{Job, JobId, Status};
use crate::mirror::{CleanupReport, Keep, Mirror, MirrorError};
use crate::store::{RowLock, Store};

/// Why a cleanup deleted nothing: the store could not say what to keep, or
/// the mirror could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    /// Reading the row failed (a damaged store among others: then no sweep runs).
    #[error(transparent)]
    Store(#[from] Error),
    /// The mirror failed.
    #[error(transparent)]
    Mirror(#[from] MirrorError),
}

impl CleanupError {
    /// The store is damaged: its rows cannot be trusted to decide deletions.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, CleanupError::Store(e) if e.is_corrupt())
    }
}

/// What a cleanup must keep, read from the row while the mirror lock is held;
/// `None` when the row does not exist (then nothing is deleted).
pub fn keep_for(store: &Store, id: JobId) -> Result<Option<Keep>> {
    Ok(store.job(id)?.as_ref().map(keep_of))
}

/// What to keep of a document, from its row.
fn keep_of(job: &Job) -> Keep {
    Keep {
        accepted: job.result_path.clone(),
        current_fence: (job.status == Status::Extracting).then_some(job.fence),
    }
}

/// Remove every generation of document `id` that is neither accepted nor the
/// current owner's; skipped (`busy`) when its lock is held elsewhere. On
/// a store that [locks rows](Store::locks_rows) the lock is the document's
/// row lock, else its fs2 lock.
pub fn cleanup(store: &Store, mirror: &Mirror, id: JobId) -> Result<CleanupReport, CleanupError> {
    if store.locks_rows() {
        return cleanup_under_row_lock(store, mirror, id, false, false);
    }
    mirror.cleanup(id.0, || Ok(keep_for(store, id)?))
}

/// [`cleanup`] after this worker's result `accepted` was accepted: when it
/// is the document's only file ([`Mirror::holds_only`]), the lock and the
/// row read are skipped. That is the usual case, and the full cleanup cost
/// about 20 µs a small document, a quarter of the finisher thread's time
/// with the index on.
pub fn cleanup_accepted(
    store: &Store,
    mirror: &Mirror,
    id: JobId,
    accepted: &str,
) -> Result<CleanupReport, CleanupError> {
    cleanup_all(store, mirror, &[(id, Some(accepted))])
        .pop()
        .unwrap_or_else(|| Ok(CleanupReport::default()))
}

/// The cleanups after a batch: [`cleanup_accepted`] of each document whose
/// result was `Some` accepted, [`cleanup`] of the others, in order. The
/// documents' shards are listed once for the batch (its consecutive ids
/// share one), not once a document ([`Mirror::cleanup_batch`]).
pub fn cleanup_all(
    store: &Store,
    mirror: &Mirror,
    docs: &[(JobId, Option<&str>)],
) -> Vec<Result<CleanupReport, CleanupError>> {
    if !store.locks_rows() {
        let docs: Vec<(i64, Option<&str>)> = docs.iter().map(|(id, path)| (id.0, *path)).collect();
        return mirror.cleanup_batch(&docs, |id| Ok(keep_for(store, JobId(id))?));
    }
    let accepted: Vec<(i64, &str)> = docs
        .iter()
        .filter_map(|(id, path)| path.map(|p| (id.0, p)))
        .collect();
    let mut alone = match mirror.holds_only_all(&accepted) {
        Ok(alone) => alone.into_iter(),
        // The full cleanup of each says what the listing could not.
        Err(_) => vec![false; accepted.len()].into_iter(),
    };
    docs.iter()
        .map(|(id, path)| {
            if path.is_some() && alone.next() == Some(true) {
                return Ok(CleanupReport::default());
            }
            cleanup(store, mirror, *id)
        })
        .collect()
}

/// The fenced cleanup over every document directory of the mirror (`gc`); a
/// dry run reports what would go and deletes nothing (`doctor`). Locked
/// documents are skipped and listed in `busy`; the sweep goes on.
pub fn sweep(store: &Store, mirror: &Mirror, dry_run: bool) -> Result<CleanupReport, CleanupError> {
    if store.locks_rows() {
        return mirror.sweep_each(dry_run, |id| {
            cleanup_under_row_lock(store, mirror, JobId(id), dry_run, !dry_run)
        });
    }
    mirror.sweep(dry_run, |id| Ok(keep_for(store, JobId(id))?))
}

/// The cleanup on a store that locks rows (DESIGN §12): the row is read and
/// the files deleted while the row lock is held, so the mirror's file
/// system need not lock. A row locked past the wait is skipped and counted.
fn cleanup_under_row_lock(
    store: &Store,
    mirror: &Mirror,
    id: JobId,
    dry_run: bool,
    prune: bool,
) -> Result<CleanupReport, CleanupError> {
    let held = store.with_job_locked(id, |job, deadline| {
        mirror.cleanup_held(id.0, job.as_ref().map(keep_of), deadline, dry_run, prune)
    })?;
    match held {
        RowLock::Held(report) => Ok(report?),
        RowLock::Busy => {
            mirror.note_cleanup_skipped();
            Ok(CleanupReport {
                busy: vec![id.0],
                ..CleanupReport::default()
            })
        }
    }
}

/// Cleanups a pool's workers skipped because the document's lock was busy,
/// owed until the lock is free. Within one process the pool's own writers
/// hold the shard's lock shared most of the time while they work through
/// its documents, so a worker's cleanup (which waits only
/// [`CLEANUP_LOCK_WAIT`](crate::mirror::CLEANUP_LOCK_WAIT) for it) is
/// skipped now and then; left alone, every such document would keep an old
/// generation until `gc`. The pool retries them when a worker finds nothing
/// to claim and once more after its last worker stopped. The list is bounded
/// ([`OwedCleanups::MAX`]); what does not fit is left to `gc`, as before.
#[derive(Debug, Default)]
pub(crate) struct OwedCleanups {
    ids: std::sync::Mutex<Vec<JobId>>,
}

impl OwedCleanups {
    /// At most this many documents are owed (8 bytes each).
    pub(crate) const MAX: usize = 65_536;

    /// Owe the cleanups a report says were skipped as busy.
    pub(crate) fn note(&self, report: &CleanupReport) {
        if report.busy.is_empty() {
            return;
        }
        let mut ids = self.lock();
        for &id in &report.busy {
            if ids.len() < Self::MAX {
                ids.push(JobId(id));
            }
        }
    }

    /// Retry the owed cleanups in order until one is still busy (a lock
    /// held elsewhere: waiting on for the rest would only add a wait for
    /// each); it and the rest stay owed. A cleanup that failed is not
    /// retried: it is left to `gc`, which reports it.
    pub(crate) fn retry(&self, store: &Store, mirror: &Mirror) {
        let owed = std::mem::take(&mut *self.lock());
        let mut left = owed.into_iter();
        for id in left.by_ref() {
            if let Ok(report) = cleanup(store, mirror, id) {
                if !report.busy.is_empty() {
                    self.note(&report);
                    break;
                }
            }
        }
        let mut ids = self.lock();
        let room = Self::MAX.saturating_sub(ids.len());
        ids.extend(left.take(room));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<JobId>> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }
}
