//! What can go wrong in the mirror, and which failures are not the
//! document's fault (a full disk, a read-only file system, a busy lock).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Errors of the mirror. Every variant that concerns a file names it.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// A file-system operation failed; [`MirrorError::is_disk_full`] and
    /// [`MirrorError::is_unwritable`] tell whether the document is to blame.
    #[error("I/O error on {}: {source}", .path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// The generation file is already there: generations are written once, so
    /// a second write for the same fence is refused rather than replacing it.
    #[error("generation file already exists: {}", .path.display())]
    GenerationExists {
        /// The generation file that exists.
        path: PathBuf,
    },
    /// The mirror root cannot be used: missing parent, a symlink, not a
    /// directory, or not writable.
    #[error("unusable mirror root {}: {reason}", .path.display())]
    BadRoot {
        /// The root as given.
        path: PathBuf,
        /// Which of those it is.
        reason: String,
    },
    /// A path that could lead outside the root: absolute, with `..` or a NUL,
    /// resolving outside it, or a symlink where a directory belongs.
    #[error("unsafe mirror path {path:?}")]
    UnsafePath {
        /// The path as given (or as found on disk).
        path: String,
    },
    /// A negative job id or fence, which cannot name a document directory or a generation.
    /// `fence` is 0 when only a job id was involved.
    #[error("invalid job id {job_id} or fence {fence}: must be >= 0")]
    InvalidId {
        /// The job id given.
        job_id: i64,
        /// The fence given, or 0.
        fence: i64,
    },
    /// The document's `.lock` was still held by another process after `waited`: that process
    /// is slow, stopped or stuck, and nobody waits for it longer. Not the document's fault.
    #[error("mirror lock {} still held by another process after {waited:?}; not waiting longer", .path.display())]
    LockBusy {
        /// The `.lock` file.
        path: PathBuf,
        /// How long this caller waited.
        waited: Duration,
    },
    /// A cleanup through file locks asked of a mirror whose writers take none
    /// (`Fencing::RowLocks`): it could delete a temp file a writer still needs.
    #[error("mirror {}: its cleanup is fenced by database row locks, not file locks", .root.display())]
    NotFileLocked {
        /// The mirror root.
        root: PathBuf,
    },
    /// The row's accepted path is not a generation file of this job: the store may be corrupt,
    /// so cleanup deletes nothing.
    #[error("accepted path {accepted:?} is not a generation of job {job_id}; nothing deleted")]
    ForeignAccepted {
        /// The document being cleaned up.
        job_id: i64,
        /// The row's accepted result path, which does not belong to it.
        accepted: String,
    },
}

impl MirrorError {
    /// True for ENOSPC / EDQUOT, so callers can stop claiming work instead of retrying.
    pub fn is_disk_full(&self) -> bool {
        match self {
            MirrorError::Io { source, .. } => {
                #[cfg(unix)]
                let full = matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT));
                #[cfg(not(unix))]
                let full = matches!(
                    source.kind(),
                    io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
                );
                full
            }
            _ => false,
        }
    }

    /// True when the mirror cannot be written at all right now (read-only file
    /// system, permissions): like a full disk, not the document's fault.
    pub fn is_unwritable(&self) -> bool {
        match self {
            MirrorError::Io { source, .. } => {
                #[cfg(unix)]
                let unwritable = matches!(
                    source.raw_os_error(),
                    Some(libc::EROFS | libc::EACCES | libc::EPERM)
                );
                #[cfg(not(unix))]
                let unwritable = matches!(
                    source.kind(),
                    io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::PermissionDenied
                );
                unwritable
            }
            _ => false,
        }
    }

    /// True when another process held the document's lock for longer than we wait: the
    /// document is not to blame; try it again later.
    pub fn is_busy(&self) -> bool {
        matches!(self, MirrorError::LockBusy { .. })
    }

    /// True when the error is a missing file (e.g. `verify` of a path that was never written).
    pub fn is_not_found(&self) -> bool {
        matches!(self, MirrorError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}
