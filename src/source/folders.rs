//! Several folders as one source: a store may index a person's documents
//! and notes together. Each folder keys its documents so that no two make
//! the same key (at most one keyed relative to its root, the others by full
//! path: [`DirSource::keyed_by_full_path`]), and a document is read from the
//! folder its key belongs to.

use std::sync::Arc;

use super::contract::{Source, SourceError};
use super::dir::{DirSource, Original};
use crate::clock::{Clock, Millis};

/// How long a document whose folder this process cannot read waits before
/// it is claimed again.
const FOLDER_AWAY_WAIT_MS: Millis = 60_000;

/// The folders of one store, each a [`DirSource`].
#[derive(Debug, Clone, Default)]
pub struct Folders {
    folders: Vec<DirSource>,
    /// The clock a document waits by when no folder here holds its key
    /// ([`Folders::waiting_by`]); without one such a document fails.
    clock: Option<Arc<dyn Clock>>,
}

impl Folders {
    /// The folders `folders`; the caller keeps their keys apart (one keyed
    /// relative at most, none nested in another).
    pub fn new(folders: Vec<DirSource>) -> Folders {
        Folders { folders, clock: None }
    }

    /// Let a document no folder here holds wait (parked by `clock`'s time,
    /// its attempts kept) instead of failing: its folder may be recorded
    /// but not there now (an unmounted disk), or added by another process
    /// after this one opened its folders, and either will read it later.
    pub fn waiting_by(mut self, clock: Arc<dyn Clock>) -> Folders {
        self.clock = Some(clock);
        self
    }

    /// The folders, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = &DirSource> {
        self.folders.iter()
    }

    /// Whether there is no folder.
    pub fn is_empty(&self) -> bool {
        self.folders.is_empty()
    }

    /// The folder document `key` belongs to, if any.
    pub fn owner_of(&self, key: &str) -> Option<&DirSource> {
        self.folders.iter().find(|f| f.owns(key))
    }
}

impl Folders {
    /// The original of `key`, opened by its folder ([`DirSource::open_original`]).
    pub fn open_original(&self, key: &str, max_bytes: u64) -> Result<Original, SourceError> {
        self.holder_of(key)?.open_original(key, max_bytes)
    }

    /// The folder that holds `key`, or why none is read: it waits (with a
    /// clock, [`Folders::waiting_by`]) or fails.
    fn holder_of(&self, key: &str) -> Result<&DirSource, SourceError> {
        match (self.owner_of(key), &self.clock) {
            (Some(folder), _) => Ok(folder),
            (None, Some(clock)) => Err(SourceError::Deferred {
                key: key.to_owned(),
                reason: "no folder this process has open holds it (not there now, or added \
                         since it started): waiting"
                    .into(),
                until: clock.now_ms().saturating_add(FOLDER_AWAY_WAIT_MS),
                account: None,
            }),
            (None, None) => Err(SourceError::BadKey {
                key: key.to_owned(),
                reason: "no folder of this data directory holds it",
            }),
        }
    }
}

impl Source for Folders {
    fn fetch(&self, key: &str, max_bytes: u64) -> Result<Vec<u8>, SourceError> {
        self.holder_of(key)?.fetch(key, max_bytes)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::job::Status;
    use crate::store::Store;
    use std::path::Path;

    fn write(root: &Path, rel: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, rel).unwrap();
    }

    fn folders_of(a: &DirSource, b: &DirSource) -> Folders {
        Folders::new(vec![a.clone(), b.clone()])
    }

    fn status(store: &Store, key: &str) -> Option<Status> {
        store.job_by_key(key).unwrap().map(|j| j.status)
    }

    /// Two folders in one store, one keyed relative and one by full path:
    /// each scan reads and judges only its own documents (the full-path keys
    /// sort among the relative ones: `-dash.txt` < `/…` < `a.txt`), a file
    /// removed from one folder is gone there only, and each document is read
    /// from its own folder.
    #[test]
    fn two_folders_share_a_store_and_never_judge_each_others_documents() {
        let dir = tempfile::tempdir().unwrap();
        // A relative name that starts with a backslash is a relative key.
        write(&dir.path().join("docs"), "\\odd.txt");
        let (docs, notes) = (dir.path().join("docs"), dir.path().join("notes"));
        for rel in ["-dash.txt", "a.txt", "sub/b.txt", "zz.txt"] {
            write(&docs, rel);
        }
        for rel in ["n.txt", "sub/b.txt"] {
            write(&notes, rel);
        }
        let store = Store::open(dir.path().join("q.db"), crate::StoreOptions::default()).unwrap();
        let first = DirSource::open(&docs).unwrap();
        let second = DirSource::open(&notes).unwrap().keyed_by_full_path().unwrap();
        let prefix = second.key_prefix().to_owned();
        assert!(prefix.starts_with('/') && prefix.ends_with('/'), "{prefix}");
        assert_eq!(first.discover(&store, 1 << 20).unwrap().new, 5);
        assert_eq!(second.discover(&store, 1 << 20).unwrap().new, 2);
        for _ in 0..2 {
            let again = first.discover(&store, 1 << 20).unwrap();
            assert_eq!((again.unchanged, again.new, again.gone), (5, 0, 0), "{again:?}");
            let again = second.discover(&store, 1 << 20).unwrap();
            assert_eq!((again.unchanged, again.new, again.gone), (2, 0, 0), "{again:?}");
        }

        assert_eq!(
            folders_of(&first, &second).fetch("\\odd.txt", 100).unwrap(),
            b"\\odd.txt"
        );
        // A name, not a root: on Unix a backslash is a character.
        let odd = "\\odd.txt";
        let mut path = docs.clone();
        path.push(std::ffi::OsStr::new(odd));
        std::fs::remove_file(path).unwrap();
        assert_eq!(first.discover(&store, 1 << 20).unwrap().gone, 1);
        std::fs::remove_file(notes.join("n.txt")).unwrap();
        assert_eq!(first.discover(&store, 1 << 20).unwrap().gone, 0);
        assert_eq!(second.discover(&store, 1 << 20).unwrap().gone, 1);
        assert_eq!(status(&store, &format!("{prefix}n.txt")), Some(Status::Dead));
        assert_eq!(status(&store, "a.txt"), Some(Status::Discovered));

        // A removed directory, as a watcher names it: only that folder's.
        std::fs::remove_dir_all(notes.join("sub")).unwrap();
        let second_notes = second.root().join("sub");
        let found = second.discover_paths(&store, &[second_notes], 1 << 20).unwrap();
        assert_eq!(found.gone, 1, "{found:?}");
        assert_eq!(status(&store, "sub/b.txt"), Some(Status::Discovered));

        write(&notes, "again.txt");
        let folders = Folders::new(vec![first.clone(), second.clone()]);
        assert_eq!(folders.fetch("sub/b.txt", 100).unwrap(), b"sub/b.txt");
        assert_eq!(
            folders.fetch(&format!("{prefix}again.txt"), 100).unwrap(),
            b"again.txt"
        );
        assert!(matches!(
            second.fetch("a.txt", 100),
            Err(SourceError::BadKey { .. })
        ));
        assert!(matches!(
            first.fetch(&format!("{prefix}again.txt"), 100),
            Err(SourceError::BadKey { .. })
        ));
        assert!(matches!(
            folders.fetch("/elsewhere/x.txt", 100),
            Err(SourceError::BadKey { .. })
        ));
        let clock = Arc::new(crate::ManualClock::new(1_000));
        let waiting = Folders::new(vec![first.clone()]).waiting_by(clock);
        assert!(matches!(
            waiting.fetch(&format!("{prefix}again.txt"), 100),
            Err(SourceError::Deferred { until: 61_000, .. })
        ));

        // A folder taken out of the store: its documents only are gone.
        assert_eq!(second.discover(&store, 1 << 20).unwrap().new, 1);
        assert_eq!(super::super::dir::mark_folder_gone(&store, &prefix).unwrap(), 1);
        assert_eq!(status(&store, &format!("{prefix}again.txt")), Some(Status::Dead));
        assert_eq!(status(&store, "a.txt"), Some(Status::Discovered));
        assert_eq!(super::super::dir::mark_folder_gone(&store, "").unwrap(), 4);
        assert_eq!(store.counts().unwrap().discovered, 0);
    }
}
