//! Where document bytes come from (DESIGN §2 "source"): the [`Source`] trait
//! and its errors, and the local directory source ([`DirSource`]). The HTTP
//! source reads through the shared credential and lives with it, in
//! [`crate::upstream`].

mod dir;

pub use dir::{key_for, DirSource, Discovered};

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
    #[error("{key:?}: the source file does not exist (or is a broken link)")]
    NotFound { key: String },
    #[error("{key:?}: {size} bytes is over the {limit}-byte input limit")]
    TooLarge { key: String, size: u64, limit: u64 },
    #[error("{key:?}: symbolic link points outside the source directory")]
    OutsideRoot { key: String },
    #[error("{key:?}: not a regular file")]
    NotAFile { key: String },
    #[error("{key:?}: not a valid document key ({reason})")]
    BadKey { key: String, reason: &'static str },
    #[error("{key:?}: cannot read {path}: {source}")]
    Unreadable {
        key: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot scan: {reason}")]
    Scan { path: PathBuf, reason: String },
    /// Not now, and not the document's fault (a locked credential, a rate
    /// limit): hand it back without spending an attempt, not before `until`,
    /// or sooner when `account` (the locked account it waits for) recovers.
    #[error("{key:?}: {reason}")]
    Deferred {
        key: String,
        reason: String,
        until: Millis,
        account: Option<String>,
    },
    /// The upstream failed (5xx, timeout, connection) or refused this document.
    #[error("{key:?}: {detail}")]
    Upstream {
        key: String,
        detail: String,
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
