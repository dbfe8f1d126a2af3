//! Cleanup: the rule that joins the store and the mirror (DESIGN §5).
//!
//! A document's files are deleted only under its exclusive mirror lock, and the
//! row is read only once that lock is held: the accepted `result_path` and the
//! current owner's generation are kept, every other generation and temp file
//! goes. The worker runs [`cleanup`] after every claim; `gc` and `doctor` run
//! [`sweep`] over the whole mirror (a dry run for doctor).
//!
//! None of them waits long for a lock: a document whose lock another process
//! holds (a slow or stopped writer) is skipped, listed in
//! [`CleanupReport::busy`] and counted by the mirror
//! ([`Mirror::cleanups_skipped`]); its leftovers go at its next cleanup or the
//! next `gc`.

use crate::error::{Error, Result};
use crate::job::{JobId, Status};
use crate::mirror::{CleanupReport, Keep, Mirror, MirrorError};
use crate::store::Store;

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
    Ok(store.job(id)?.map(|job| Keep {
        accepted: job.result_path.clone(),
        current_fence: (job.status == Status::Extracting).then_some(job.fence),
    }))
}

/// Remove every generation of document `id` that is neither accepted nor the
/// current owner's; skipped (`busy`) when its lock is held elsewhere.
pub fn cleanup(store: &Store, mirror: &Mirror, id: JobId) -> Result<CleanupReport, CleanupError> {
    mirror.cleanup(id.0, || Ok(keep_for(store, id)?))
}

/// The fenced cleanup over every document directory of the mirror (`gc`); a
/// dry run reports what would go and deletes nothing (`doctor`). Locked
/// documents are skipped and listed in `busy`; the sweep goes on.
pub fn sweep(store: &Store, mirror: &Mirror, dry_run: bool) -> Result<CleanupReport, CleanupError> {
    mirror.sweep(dry_run, |id| Ok(keep_for(store, JobId(id))?))
}
