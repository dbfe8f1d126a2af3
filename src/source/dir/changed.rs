//! Discovery of only the paths a watcher named (`leasehold watch`): the rules
//! of a full scan (hidden names, leasehold's own files, links, the input
//! limit, content hashes only when the fingerprint changed) applied to a few
//! paths, so a change in a tree of a million files costs a few stats.

use std::path::{Component, Path, PathBuf};

use super::folder::{DirSource, Discovered, SCAN_BATCH};
use super::keys::{key_for, HEX_KEY};
use super::known::KnownInRange;
use crate::error::Result;
use crate::store::Store;

impl DirSource {
    /// Whether a change at `path` concerns this source: a path under the
    /// root (not the root itself) that a scan would look at, that is no part
    /// of it hidden (unless hidden files are taken) and none of it
    /// leasehold's own files (the data directory, the mirror, the database
    /// and its sidecars, the configuration file). A watcher drops events
    /// about anything else before they take memory, so the mirror's writes
    /// inside the watched tree never come back as work.
    pub fn concerns(&self, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(&self.root) else {
            return false;
        };
        let mut at = self.root.clone();
        let mut any = false;
        for part in rel.components() {
            let Component::Normal(name) = part else {
                return false;
            };
            if !self.include_hidden && name.as_encoded_bytes().starts_with(b".") {
                return false;
            }
            at.push(name);
            if self.excluded.covers(&at) {
                return false;
            }
            any = true;
        }
        any
    }

    /// Bring the store up to date for `paths` only (absolute paths under the
    /// root, as a watcher reports them; others are ignored): a file that is
    /// there is enqueued when new or changed; a directory that is there is
    /// walked (one moved into the tree is one event); a path that is not
    /// there any more has its document, or every document under it, marked
    /// gone, as a full scan would. Each path is looked at now, whatever the
    /// event said, so a rename is simply its old path (gone) and its new one
    /// (new), and events that arrive late or twice change nothing.
    ///
    /// A full scan running at the same time in another process does not take
    /// a file recorded here for vanished: it marks a document gone only while
    /// its stored fingerprint is the one its walk read.
    ///
    /// # Failure
    /// The store's errors.
    pub fn discover_paths(&self, store: &Store, paths: &[PathBuf], max_bytes: u64) -> Result<Discovered> {
        let mut report = Discovered::default();
        let mut batch = Vec::with_capacity(SCAN_BATCH.min(paths.len()));
        let mut removed = Vec::new();
        let mut skipped = Vec::new();
        // Mailboxes read, with their message count: the messages past it are gone.
        let mut lost_messages = Vec::new();
        let mut stats = crate::portable::Stats::default();
        for path in paths {
            if !self.concerns(path) {
                continue;
            }
            match std::fs::symlink_metadata(path) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if let Ok(rel) = path.strip_prefix(&self.root) {
                        removed.push(rel.to_path_buf());
                    }
                    continue;
                }
                Err(e) => {
                    skipped.push(format!("{}: {e}: skipped", path.display()));
                    continue;
                }
            }
            let (mut read_mailboxes, mut notes) = (Vec::new(), Vec::new());
            for entry in self.walk_from(path, &mut skipped) {
                let documents = self.documents_of(store, entry, &mut notes)?;
                read_mailboxes.extend(documents.read_mailbox);
                for entry in documents.entries {
                    batch.push(entry);
                    if batch.len() == SCAN_BATCH {
                        let files = self.fingerprinted(&mut batch, &mut stats);
                        self.record_batch(store, files, by_key(store), max_bytes, &mut report)?;
                    }
                }
            }
            skipped.append(&mut notes);
            lost_messages.append(&mut read_mailboxes);
        }
        let files = self.fingerprinted(&mut batch, &mut stats);
        self.record_batch(store, files, by_key(store), max_bytes, &mut report)?;
        for (mailbox, count) in lost_messages {
            report.gone += self.forget_messages_after(store, &mailbox, count)?;
        }
        report.skipped = skipped;
        if !removed.is_empty() {
            let (keys, prefixes) = removed_keys(&removed, self.key_prefix());
            report.gone += store.mark_gone(&keys, &prefixes)?;
        }
        Ok(report)
    }
}

/// The keys of removed paths, and the key prefixes of what was under them
/// (they may have been directories). A file under a directory is keyed
/// `dir/name`, or `hex:` and the bytes of `dir/name` in hex when the whole
/// path is not UTF-8 (`key_for`), so both spellings of `dir/` are prefixes.
/// Each is written after `folder`, the folder's own key prefix.
fn removed_keys(removed: &[PathBuf], folder: &str) -> (Vec<String>, Vec<String>) {
    let mut keys = Vec::with_capacity(removed.len());
    let mut prefixes = Vec::with_capacity(2 * removed.len());
    for rel in removed {
        let key = key_for(rel);
        if !key.starts_with(HEX_KEY) {
            prefixes.push(format!("{folder}{key}/"));
        }
        let mut bytes = rel.as_os_str().as_encoded_bytes().to_vec();
        bytes.push(b'/');
        prefixes.push(format!("{folder}{HEX_KEY}{}", hex::encode(bytes)));
        keys.push(format!("{folder}{key}"));
    }
    (keys, prefixes)
}

/// The stored fingerprints of a batch's keys, looked up by key: the paths of
/// events come in no order a range could follow.
fn by_key(store: &Store) -> impl FnOnce(&[&str]) -> Result<KnownInRange> + '_ {
    move |keys| {
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        store.source_stats(&keys)
    }
}

// The tests use Unix file modes, symlinks and FIFOs; the code paths other
// systems take are run on Linux through LEASEHOLD_FORCE_PORTABLE (src/portable.rs).
#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::job::Status;

    use super::super::folder::test_folder as setup;

    fn status(store: &Store, key: &str) -> Option<(Status, bool)> {
        store.job_by_key(key).unwrap().map(|j| (j.status, j.source_gone))
    }

    /// New, changed, removed and renamed paths, and a directory moved in and
    /// out: each is looked at as it is now.
    #[test]
    fn named_paths_are_enqueued_changed_and_marked_gone() {
        let (_dir, root, store, src) = setup();
        std::fs::write(root.join("a.txt"), b"one").unwrap();
        std::fs::write(root.join("b.txt"), b"two").unwrap();
        let found = src
            .discover_paths(&store, &[root.join("a.txt")], 1 << 20)
            .unwrap();
        assert_eq!((found.new, found.gone), (1, 0), "{found:?}");
        assert!(status(&store, "b.txt").is_none(), "only the named path");

        std::fs::write(root.join("a.txt"), b"one, longer").unwrap();
        let found = src
            .discover_paths(&store, &[root.join("a.txt")], 1 << 20)
            .unwrap();
        assert_eq!(found.changed, 1, "{found:?}");

        std::fs::rename(root.join("a.txt"), root.join("c.txt")).unwrap();
        let found = src
            .discover_paths(&store, &[root.join("a.txt"), root.join("c.txt")], 1 << 20)
            .unwrap();
        assert_eq!((found.new, found.gone), (1, 1), "{found:?}");
        assert_eq!(status(&store, "a.txt"), Some((Status::Dead, true)));

        let sub = root.join("sub");
        std::fs::create_dir_all(sub.join("deep")).unwrap();
        std::fs::write(sub.join("x.txt"), b"x").unwrap();
        std::fs::write(sub.join("deep/y.txt"), b"y").unwrap();
        let found = src
            .discover_paths(&store, std::slice::from_ref(&sub), 1 << 20)
            .unwrap();
        assert_eq!(found.new, 2, "a directory is walked: {found:?}");
        std::fs::rename(&sub, _dir.path().join("moved-out")).unwrap();
        let found = src.discover_paths(&store, &[sub], 1 << 20).unwrap();
        assert_eq!(found.gone, 2, "everything under a removed directory: {found:?}");
        assert_eq!(status(&store, "sub/deep/y.txt"), Some((Status::Dead, true)));
        assert_eq!(status(&store, "c.txt"), Some((Status::Discovered, false)));
    }

    /// A directory removed at once takes every document under it, whatever
    /// its names' encoding (a non-UTF-8 name is keyed `hex:`), and nothing
    /// beside it whose name merely starts the same.
    #[test]
    fn a_removed_directory_takes_its_hex_keyed_files_too() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let (dir, root, store, src) = setup();
        let sub = root.join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("plain.txt"), b"p").unwrap();
        std::fs::write(sub.join(OsStr::from_bytes(b"bad\xff.txt")), b"b").unwrap();
        std::fs::write(root.join("sub.txt"), b"beside").unwrap();
        std::fs::write(root.join("subway"), b"beside too").unwrap();
        let found = src.discover(&store, 1 << 20).unwrap();
        assert_eq!(found.new, 4, "{found:?}");
        std::fs::rename(&sub, dir.path().join("away")).unwrap();
        let found = src.discover_paths(&store, &[sub], 1 << 20).unwrap();
        assert_eq!(found.gone, 2, "{found:?}");
        for key in ["sub.txt", "subway"] {
            assert_eq!(status(&store, key), Some((Status::Discovered, false)), "{key}");
        }
    }

    /// A file removed while a worker extracts it: the worker's completion is
    /// refused (fenced out), and the row keeps no result.
    #[test]
    fn a_removal_fences_out_the_worker_on_it() {
        let (_dir, root, store, src) = setup();
        std::fs::write(root.join("a.txt"), b"one").unwrap();
        src.discover_paths(&store, &[root.join("a.txt")], 1 << 20)
            .unwrap();
        let claim = store.claim("w").unwrap().expect("claimable");
        std::fs::remove_file(root.join("a.txt")).unwrap();
        let found = src
            .discover_paths(&store, &[root.join("a.txt")], 1 << 20)
            .unwrap();
        assert_eq!(found.gone, 1);
        let done = store
            .complete(claim, crate::store::Completion::new("late/path", "sum"))
            .unwrap();
        assert!(matches!(done, crate::job::Fenced::Rejected(_)), "{done:?}");
        let job = store.job_by_key("a.txt").unwrap().unwrap();
        assert_eq!((job.status, job.result_path), (Status::Dead, None));
    }

    /// Hidden names, leasehold's own files and paths outside the root are
    /// not the source's concern; a directory named like a kept file's
    /// prefix is not swept with it.
    #[test]
    fn hidden_own_and_outside_paths_are_not_concerns() {
        let (dir, root, store, src) = setup();
        let data = root.join("leasehold-data");
        std::fs::create_dir(&data).unwrap();
        let src = src.exclude_dir(&data).exclude_file_family(&root.join("q.db"));
        assert!(src.concerns(&root.join("a.txt")));
        assert!(src.concerns(&root.join("sub/a.txt")));
        assert!(!src.concerns(&root));
        assert!(!src.concerns(&root.join(".hidden/a.txt")));
        assert!(!src.concerns(&root.join("sub/.a.txt")));
        assert!(!src.concerns(&data.join("mirror/000/x")));
        assert!(!src.concerns(&root.join("q.db-wal")));
        assert!(!src.concerns(&dir.path().join("elsewhere.txt")));
        assert!(src
            .clone()
            .include_hidden(true)
            .concerns(&root.join(".hidden/a.txt")));

        std::fs::write(root.join(".secret"), b"s").unwrap();
        let found = src
            .discover_paths(&store, &[root.join(".secret")], 1 << 20)
            .unwrap();
        assert_eq!(found, Discovered::default());

        std::fs::write(root.join("ab.txt"), b"keep").unwrap();
        std::fs::write(root.join("a"), b"file a").unwrap();
        src.discover_paths(&store, &[root.join("ab.txt"), root.join("a")], 1 << 20)
            .unwrap();
        std::fs::remove_file(root.join("a")).unwrap();
        let found = src.discover_paths(&store, &[root.join("a")], 1 << 20).unwrap();
        assert_eq!(found.gone, 1, "{found:?}");
        assert_eq!(status(&store, "ab.txt"), Some((Status::Discovered, false)));
    }
}
