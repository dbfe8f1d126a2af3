//! What every source does: hand over one document's bytes, or say why it
//! could not, so that the pipeline can tell a missing file from a locked
//! account from a file it must not read.

use std::path::PathBuf;

use crate::clock::Millis;

/// Reads the bytes of one document.
pub trait Source: Send + Sync {
    /// The bytes of the document `key`; more than `max_bytes` is an error.
    fn fetch(&self, key: &str, max_bytes: u64) -> std::result::Result<Vec<u8>, SourceError>;

    /// When this source can be used again, if not now (its account is locked):
    /// workers wait instead of claiming documents they could only hand back,
    /// which would keep them from workers whose source is fine.
    fn ready_at(&self) -> Option<Millis> {
        None
    }
}

/// Why a document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The document is not there (any more). Permanent.
    #[error("{key:?}: the source file does not exist (or is a broken link)")]
    NotFound {
        /// The document key.
        key: String,
    },
    /// The document is bigger than the input limit. Permanent.
    #[error("{key:?}: {size} bytes is over the {limit}-byte input limit")]
    TooLarge {
        /// The document key.
        key: String,
        /// Its size in bytes (as far as it was read, when the size was not known up front).
        size: u64,
        /// The limit it exceeds, in bytes.
        limit: u64,
    },
    /// A symbolic link that leads out of the source directory; never followed. Permanent.
    #[error("{key:?}: symbolic link points outside the source directory")]
    OutsideRoot {
        /// The document key.
        key: String,
    },
    /// The key names a directory, a device or some other non-regular file. Permanent.
    #[error("{key:?}: not a regular file")]
    NotAFile {
        /// The document key.
        key: String,
    },
    /// The key cannot name a file under the root (absolute, `..`, bad `hex:`
    /// encoding...). Permanent.
    #[error("{key:?}: not a valid document key ({reason})")]
    BadKey {
        /// The document key.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A symbolic link that leads back to itself, directly or through other
    /// links: it never resolves, however often it is tried. Permanent; once
    /// the link is mended its fingerprint (which holds the link's target)
    /// changes, and the next scan queues it again.
    #[error("{key:?}: cannot read {path}: a loop of symbolic links (mend or remove the link)")]
    LinkLoop {
        /// The document key.
        key: String,
        /// The link the key maps to.
        path: PathBuf,
    },
    /// The file (or a directory on its way) may not be read by this user.
    /// Permanent for this version of the file: trying again changes nothing
    /// until someone changes the permissions, and a scan that could not read
    /// a file gives it no content hash, so the first scan after the fix reads
    /// it and queues it again.
    #[error("{key:?}: cannot read {path}: permission denied (fix its permissions, then run again)")]
    PermissionDenied {
        /// The document key.
        key: String,
        /// The file the key maps to.
        path: PathBuf,
    },
    /// The file is there but reading it failed; worth retrying.
    #[error("{key:?}: cannot read {path}: {source}")]
    Unreadable {
        /// The document key.
        key: String,
        /// The file the key maps to.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The source directory itself cannot be opened or walked.
    #[error("{path}: cannot scan: {reason}")]
    Scan {
        /// The source root (or the part of it that failed).
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Not now, and not the document's fault (a locked credential, a rate
    /// limit): hand it back without spending an attempt, not before `until`,
    /// or sooner when `account` (the locked account it waits for) recovers.
    #[error("{key:?}: {reason}")]
    Deferred {
        /// The document key.
        key: String,
        /// Why it must wait (the gate's or the upstream's message).
        reason: String,
        /// The latest time to try again (ms from the injected clock).
        until: Millis,
        /// The locked account the document waits for; `None` when only time
        /// ends the wait (pacing, a rate limit).
        account: Option<String>,
    },
    /// The upstream failed (5xx, timeout, connection) or refused this document.
    #[error("{key:?}: {detail}")]
    Upstream {
        /// The document key.
        key: String,
        /// What the upstream (or the gate in front of it) said.
        detail: String,
        /// Whether trying again later may help (5xx, timeout, connection);
        /// `false` for a refusal of this document, which is permanent.
        transient: bool,
    },
}

impl SourceError {
    /// Retrying will not help (the file is gone, too big, or outside the root).
    pub fn is_permanent(&self) -> bool {
        match self {
            SourceError::Unreadable { .. } | SourceError::Scan { .. } | SourceError::Deferred { .. } => false,
            SourceError::Upstream { transient, .. } => !transient,
            _ => true,
        }
    }
}
