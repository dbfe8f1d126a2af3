//! A generation written and renamed into place: before it is durable
//! ([`Staged`], withdrawn if dropped so), after ([`Written`]), and the sync
//! rounds that make the staged writes of this process's threads durable
//! together.

use std::fs::{self, File};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use super::error::MirrorError;
use crate::group::GroupCommit;

/// Result of a successful write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// '/'-separated, relative to the root.
    pub rel_path: String,
    /// Lower-case hex SHA-256 of the bytes written.
    pub sha256: String,
    /// Bytes written.
    pub len: u64,
}

/// A generation renamed into place whose bytes and name are not yet durable.
/// It holds no lock: once renamed, the generation is the claim's own file,
/// which a cleanup keeps while the claim is current (and may delete once it
/// is not, when its completion will be refused anyway). Dropping it unsynced
/// withdraws the file.
#[derive(Debug)]
pub struct Staged {
    pub(super) written: Written,
    /// Set by the sync round that made it durable; unset at drop means withdraw.
    pub(super) durable: AtomicBool,
    pub(super) file: File,
    pub(super) dir: PathBuf,
    pub(super) final_path: PathBuf,
}

impl Staged {
    /// The generation as it will be accepted, once synced.
    pub fn written(&self) -> &Written {
        &self.written
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // Not durable means nobody was told it is: a failed round, an error path
        // or a panic. Withdraw it, so that "not synced" always means "nothing new
        // is visible", as a failed write does.
        if !self.durable.load(Ordering::SeqCst) {
            let _ = fs::remove_file(&self.final_path);
        }
    }
}

/// The mirror's sync rounds: writes staged by this process's threads at about
/// the same moment share one round of fsyncs. An op is a caller's staged
/// writes; the answer, one result per write in order (or one error for all if
/// the round itself failed to answer).
/// The group's answer to one caller: its results, or why its round answered
/// nobody (only after a panic in the round), turned into errors by [`Mirror::sync`].
pub(super) struct SyncGroup(pub(super) GroupCommit<Vec<Staged>, Result<Vec<SyncResult>, String>>);

pub(super) type SyncResult = Result<Written, MirrorError>;

impl SyncGroup {
    pub(super) fn new() -> Self {
        SyncGroup(GroupCommit::new(|reason| {
            Err(format!("mirror sync round: {reason}"))
        }))
    }
}

impl std::fmt::Debug for SyncGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SyncGroup")
    }
}
