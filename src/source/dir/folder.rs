//! A source folder as its files share it: the [`DirSource`] handle's fields,
//! what a scan found ([`Discovered`]), one entry of a walk, and why a file
//! could not be opened. `dir.rs` walks and fetches; its files beside this
//! one rescan changed paths, read the store beside the walk and read
//! mailboxes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::mailbox_split::MailboxIndexes;
use crate::portable::FileStat;
use crate::source::contract::SourceError;
#[cfg(test)]
use crate::store::Store;

/// A local directory of documents.
#[derive(Debug, Clone)]
pub struct DirSource {
    pub(super) root: PathBuf,
    /// The root, held open to resolve documents below it in one call where
    /// the system can (`portable::open_beneath`).
    pub(super) root_dir: Option<std::sync::Arc<std::fs::File>>,
    pub(super) include_hidden: bool,
    pub(super) excluded: Excluded,
    /// What every key of this folder starts with: nothing when keys are
    /// paths relative to the root, the root's full path when the folder is
    /// one of several a store indexes ([`DirSource::keyed_by_full_path`]).
    pub(super) key_prefix: String,
    /// Where the messages of the mailboxes read last lie, for fetching them.
    pub(super) mailboxes: MailboxIndexes,
}

/// leasehold's own files, never taken as documents when they lie inside the
/// source (`cd docs && leasehold run .` keeps its data directory in `docs`):
/// indexing the database and the mirror would add documents on every run.
/// Paths are canonical, as the walk's are (it starts at the canonical root and
/// enters no symlinked directory).
#[derive(Debug, Clone, Default)]
pub(super) struct Excluded {
    /// Directories not entered: the data directory, the mirror root.
    pub(super) dirs: Vec<PathBuf>,
    /// Files not taken, each with its sidecars: the database and its
    /// `-wal`, `-shm` and lock files, the configuration file.
    pub(super) families: Vec<(PathBuf, OsString)>,
}

impl Excluded {
    /// Whether the walk must leave `path` out. Asked of every entry: the
    /// paths are compared whole only when a cheap look (the length; the
    /// name's start) leaves a chance, since two unequal `Path`s are compared
    /// component by component.
    pub(super) fn covers(&self, path: &Path) -> bool {
        if self.dirs.is_empty() && self.families.is_empty() {
            return false;
        }
        let len = path.as_os_str().len();
        if self.dirs.iter().any(|d| d.as_os_str().len() == len && d == path) {
            return true;
        }
        let Some(name) = path.file_name().map(|n| n.as_encoded_bytes()) else {
            return false;
        };
        self.families.iter().any(|(d, base)| {
            let base = base.as_encoded_bytes();
            let family = name == base || name.strip_prefix(base).is_some_and(|rest| rest.starts_with(b"-"));
            family && path.parent() == Some(d.as_path())
        })
    }
}

/// What a scan found, and what `discover` did with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Discovered {
    /// Files the store did not know: enqueued.
    pub new: usize,
    /// Known files whose version changed: queued again. Also counts links
    /// whose document died because the link pointed outside the root when it
    /// was fetched, and which point inside again.
    pub changed: usize,
    /// Known files with the same version: left alone.
    pub unchanged: usize,
    /// Of the unchanged, those whose document still waits for work from an
    /// earlier command (an interrupted run, a retry): this command may do it.
    pub pending: usize,
    /// Documents the store knew that the scan no longer found: marked gone
    /// (dead, result forgotten, so cleanup removes its files). Stays 0 when part
    /// of the walk failed, since an unread directory is not a removed one.
    pub gone: usize,
    /// Entries skipped, with why (not a regular file, hidden, unreadable directory...).
    pub skipped: Vec<String>,
}

impl Discovered {
    /// Add what another scan found (of another folder): the figures add
    /// up, the skipped entries follow.
    pub fn absorb(&mut self, other: Discovered) {
        self.new += other.new;
        self.changed += other.changed;
        self.unchanged += other.unchanged;
        self.pending += other.pending;
        self.gone += other.gone;
        self.skipped.extend(other.skipped);
    }
}

/// Why [`DirSource::open_inside`] could not open a file: resolving its path
/// (where a loop of links shows) or opening what it resolved to (where
/// `ELOOP` means a link swapped in after the check, a race worth retrying).
#[derive(Debug)]
pub(super) enum OpenError {
    Resolving(std::io::Error),
    Opening(std::io::Error),
}

impl OpenError {
    /// The document's error: what will not change by trying again (gone, a
    /// loop of links, no permission) is said as such; the rest is retried.
    pub(super) fn for_document(self, key: &str, path: &Path) -> SourceError {
        let (key, path) = (key.to_owned(), path.to_path_buf());
        let (resolving, e) = match self {
            OpenError::Resolving(e) => (true, e),
            OpenError::Opening(e) => (false, e),
        };
        match e.kind() {
            std::io::ErrorKind::NotFound => SourceError::NotFound { key },
            std::io::ErrorKind::PermissionDenied => SourceError::PermissionDenied { key, path },
            _ if resolving && is_link_loop(&e) => SourceError::LinkLoop { key, path },
            _ => SourceError::Unreadable { key, path, source: e },
        }
    }
}

/// `ELOOP`: too many symbolic links (unix; Windows says no such thing).
fn is_link_loop(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    return e.raw_os_error() == Some(libc::ELOOP);
    #[cfg(not(unix))]
    return {
        let _ = e;
        false
    };
}

/// Whether a scanned entry is a symbolic link, and where it leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    /// A regular file.
    No,
    /// A link that resolves inside the root.
    Inside,
    /// A link that resolves outside the root: never followed.
    Outside,
    /// A link that resolves to nothing: enqueued so that fetch records why.
    Broken,
}

/// How many files a scan compares and records per transaction.
pub(super) const SCAN_BATCH: usize = 1000;

/// How many fingerprinted batches wait between the walk of a scan and its
/// comparison with the store: the walk's thread stats the next files while
/// the scan's own thread reads the store's rows of the last ones (an
/// unchanged rerun is bound by these two on one core). With the one being
/// compared and the one the walk is handing over, three batches more than a
/// scan on one thread holds.
pub(super) const STAGED_BATCHES: usize = 2;

/// A file of a scan's batch and what its fingerprint is made of, looked at
/// on the walk's thread.
pub(super) struct Fingerprinted {
    pub(super) entry: Entry,
    pub(super) looked: Looked,
}

/// What a file's fingerprint is made of ([`DirSource::fingerprint`]).
pub(super) enum Looked {
    /// A mailbox's message: its fingerprint, already made.
    Message(String),
    /// A link leading outside the root, which is not followed.
    Outside {
        /// Where it points.
        target: String,
    },
    /// A file, a link inside the root (followed) or a broken link.
    Stat {
        /// The stat, following a link.
        stat: std::io::Result<FileStat>,
        /// A link's target; empty for a file.
        link: String,
    },
}

impl Looked {
    /// The fingerprint (`size:mtime:link`, or a marker when there is
    /// nothing to stat or follow), and the stat when there is one.
    pub(super) fn fingerprint(self) -> (String, Option<FileStat>) {
        let mut out = String::new();
        let stat = self.write_fingerprint(&mut out);
        (out, stat)
    }

    /// [`Looked::fingerprint`] written over `out`: a rerun compares every
    /// file's with the stored one, and one buffer for all of them saves an
    /// allocation a file.
    pub(super) fn write_fingerprint(&self, out: &mut String) -> Option<FileStat> {
        use std::fmt::Write;
        out.clear();
        // Writing to a String cannot fail.
        let _ = match self {
            Looked::Message(stat) => write!(out, "{stat}"),
            Looked::Outside { target } => write!(out, "outside:{target}"),
            Looked::Stat { stat: Ok(m), link } => write!(out, "{}:{}:{link}", m.len, m.mtime()),
            Looked::Stat { stat: Err(err), link } => write!(out, "unreadable:{}:{link}", err.kind()),
        };
        match self {
            Looked::Stat { stat: Ok(m), .. } => Some(*m),
            _ => None,
        }
    }
}

/// A batch of a walk, fingerprinted. Only a walk that ended without
/// returning an error sends one marked `last`, and a scan without it marks
/// nothing gone (nor does one whose walk skipped an unreadable directory).
pub(super) struct Staged {
    pub(super) files: Vec<Fingerprinted>,
    pub(super) last: bool,
}

/// One file found by a scan, or one message of a mailbox file.
pub(super) struct Entry {
    pub(super) key: String,
    /// The file (a message's: its mailbox).
    pub(super) path: PathBuf,
    pub(super) link: Link,
    /// Set for a message of a mailbox (`dir/mailbox.rs`).
    pub(super) message: Option<MessageVersion>,
}

/// A mailbox message's fingerprint, and its version when its mailbox was read.
pub(super) struct MessageVersion {
    pub(super) stat: String,
    pub(super) version: Option<String>,
}

/// A source folder `src` and a store beside it, in a temporary directory
/// (the store's, the folder's canonical root, the store, the source).
#[cfg(test)]
pub(super) fn test_folder() -> (tempfile::TempDir, PathBuf, Store, DirSource) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("src");
    std::fs::create_dir(&root).unwrap();
    let store = Store::open(dir.path().join("q.db"), crate::StoreOptions::default()).unwrap();
    let src = DirSource::open(&root).unwrap();
    let root = src.root().to_path_buf();
    (dir, root, store, src)
}
