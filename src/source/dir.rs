//! The local directory source.
//!
//! The local directory source walks a tree, keys each file by its path relative
//! to the root, and versions it by a content hash that is only recomputed when
//! the file's size or modification time changed, so a re-scan of an unchanged
//! tree reads no file contents. The source is never written to.
//!
//! A symbolic link that leads outside the root is never followed, neither by
//! the scan (no stat, no hash of its target) nor by `fetch`, which opens only
//! what resolves inside the root and then asks the kernel where the opened file
//! really is, so a link or directory swapped between the check and the open is
//! caught. A link that pointed outside when its document was fetched fails that
//! attempt (and the document dies, the error being permanent); once it points
//! inside again, the next scan queues the document again even if its
//! fingerprint did not change.
//!
//! The files beside this one: `folder.rs` (the handle's fields, a walk's
//! entries, why a file could not be opened), `keys.rs` (document keys),
//! `known.rs` (the store's rows read beside the walk), `changed.rs` (a
//! rescan of the paths a watcher saw change), `mailbox.rs` and
//! `mailbox_split.rs` (a mailbox's messages as documents).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::contract::{Source, SourceError};
use crate::error::Result;
use crate::job::Status;
use crate::portable::{FileStat, Stats};
use crate::store::{NewDoc, Store};

mod changed;
mod folder;
mod keys;
mod known;
mod mailbox;
mod mailbox_split;

pub use folder::{DirSource, Discovered};
use folder::{Entry, Excluded, Fingerprinted, Link, Looked, OpenError, Staged, SCAN_BATCH, STAGED_BATCHES};
pub use keys::{
    full_path_prefix, is_full_path_key, key_below_folder, key_for, key_in_folder, relative_path_of,
};
use known::{KnownInRange, ScanState};

impl DirSource {
    /// A source rooted at `root`, which must be a directory.
    pub fn open(root: impl AsRef<Path>) -> std::result::Result<DirSource, SourceError> {
        let root = root.as_ref();
        let canonical = root.canonicalize().map_err(|e| SourceError::Scan {
            path: root.to_path_buf(),
            reason: e.to_string(),
        })?;
        if !canonical.is_dir() {
            return Err(SourceError::Scan {
                path: root.to_path_buf(),
                reason: "not a directory".into(),
            });
        }
        Ok(DirSource {
            root_dir: crate::portable::open_dir_handle(&canonical).map(std::sync::Arc::new),
            root: canonical,
            include_hidden: false,
            excluded: Excluded::default(),
            key_prefix: String::new(),
            mailboxes: Default::default(),
        })
    }

    /// Key this folder's documents by their full path (the root's, then the
    /// path below it as [`key_for`] writes it) instead of the path relative
    /// to the root, so that it can share a store with other folders: one
    /// folder keyed relative and any number keyed by full path never make
    /// the same key, since a relative key never starts with a separator
    /// ([`is_full_path_key`]) and two full-path roots that are not nested
    /// never prefix each other's keys. A root whose path is not UTF-8 has no
    /// such key.
    pub fn keyed_by_full_path(mut self) -> std::result::Result<DirSource, SourceError> {
        self.key_prefix = full_path_prefix(&self.root).ok_or_else(|| SourceError::Scan {
            path: self.root.clone(),
            reason: "its path is not UTF-8, so it cannot be one of several folders".into(),
        })?;
        Ok(self)
    }

    /// What every key of this folder starts with (empty when keys are
    /// relative to the root).
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// Whether document `key` would be this folder's: a relative key for a
    /// folder keyed relative, a key under its root for one keyed by full
    /// path. Says nothing of whether the file exists.
    pub fn owns(&self, key: &str) -> bool {
        key_in_folder(&self.key_prefix, key)
    }

    /// The key of the file at `rel` below the root.
    fn key_of(&self, rel: &Path) -> String {
        let key = key_for(rel);
        match self.key_prefix.as_str() {
            "" => key,
            prefix => format!("{prefix}{key}"),
        }
    }

    /// `key` without this folder's prefix (as [`key_for`] made it), or
    /// `None` when it is not this folder's.
    fn below_root<'k>(&self, key: &'k str) -> Option<&'k str> {
        key_below_folder(&self.key_prefix, key)
    }

    /// Never take the directory `dir` (the data directory, the mirror) nor
    /// anything under it. A path that does not exist is ignored.
    pub fn exclude_dir(mut self, dir: &Path) -> Self {
        if let Ok(real) = dir.canonicalize() {
            self.excluded.dirs.push(real);
        }
        self
    }

    /// Never take the file `file` (the database, the configuration file),
    /// nor its sidecars named `<file>-...` (`-wal`, `-shm`, lock files), which
    /// may not exist yet. Ignored when its directory does not exist.
    pub fn exclude_file_family(mut self, file: &Path) -> Self {
        let dir = match file.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if let (Ok(real), Some(name)) = (dir.canonicalize(), file.file_name()) {
            self.excluded.families.push((real, name.to_os_string()));
        }
        self
    }

    /// Also take files and directories whose name starts with a dot.
    pub fn include_hidden(mut self, yes: bool) -> Self {
        self.include_hidden = yes;
        self
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Scan the tree and bring the store up to date: enqueue new and changed
    /// files, mark vanished ones. Files up to `max_bytes` are hashed when their
    /// fingerprint changed; larger ones are versioned by fingerprint alone.
    ///
    /// The walk yields files in the byte order of their keys, and the store's
    /// documents are read beside it in the same order (`dir/known.rs`): a
    /// known document the walk passes without finding is gone, so an
    /// unchanged tree costs a read of each row and no write, and the vanished
    /// files need no second pass. Works in batches, so memory does not grow
    /// with the size of the tree (only with the number of vanished files).
    ///
    /// The walk and its stats run on a thread of their own, at most
    /// [`STAGED_BATCHES`] batches ahead of this one, which reads the store
    /// and writes: over an unchanged tree these are the two halves of the
    /// work (DESIGN §5).
    pub fn discover(&self, store: &Store, max_bytes: u64) -> Result<Discovered> {
        let mut scan = ScanState::new(store, self);
        let mut report = Discovered::default();
        let (stage, staged) = crossbeam_channel::bounded::<Staged>(STAGED_BATCHES);
        // Set when the comparison fails: the walk stops at its next entry
        // rather than at its next full batch (a mailbox's split, a hash).
        let stopped = std::sync::atomic::AtomicBool::new(false);
        let (compared, walked) = std::thread::scope(|s| {
            let stopped = &stopped;
            let walker = std::thread::Builder::new()
                .name("leasehold-walk".into())
                .spawn_scoped(s, move || {
                    let hand = |batch| stage.send(batch).is_ok();
                    self.walk_staged(store, hand, || stopped.load(std::sync::atomic::Ordering::Relaxed))
                })
                .map_err(|e| crate::Error::Io {
                    path: self.root.clone(),
                    source: std::io::Error::new(e.kind(), format!("starting the walk's thread: {e}")),
                })?;
            let mut ended = false;
            let compared = staged.iter().try_for_each(|batch| {
                ended = batch.last;
                let known = |keys: &[&str]| scan.known_for(keys, batch.last);
                self.record_batch(store, batch.files, known, max_bytes, &mut report)
            });
            // A failed comparison stops the walk: at its next entry, or at
            // its next hand-over, which finds no one to take it.
            stopped.store(true, std::sync::atomic::Ordering::Relaxed);
            drop(staged);
            let walked = walker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            Ok::<_, crate::Error>((compared.map(|()| ended), walked))
        })?;
        // The comparison's error first: the walk was ahead of it, so the
        // comparison's came first (and a failing store may fail both).
        // The walk sends its last batch only after it has ended well.
        let ended = compared?;
        let skipped = walked?;
        // A part of the tree that could not be read is not a part that is gone:
        // only a complete walk may mark documents removed.
        let walk_failed = skipped.iter().any(|s| s.starts_with(WALK_ERROR));
        report.skipped = skipped;
        if ended && !walk_failed {
            for vanished in scan.vanished().chunks(SCAN_BATCH) {
                report.gone += store.mark_vanished(vanished)?;
            }
        }
        Ok(report)
    }

    /// The walk's side of [`DirSource::discover`]: every document in walk
    /// order, fingerprinted in batches of [`SCAN_BATCH`] handed to `hand`
    /// (false: stop walking), the last one marked; before each entry it
    /// stops if `stopped` says so. Returns what it skipped, and why (a
    /// mailbox's notes after the walk's own). A mailbox is listed here, on
    /// the walk's thread: its split, its messages' hashes and its reads of
    /// the store.
    fn walk_staged(
        &self,
        store: &Store,
        mut hand: impl FnMut(Staged) -> bool,
        stopped: impl Fn() -> bool,
    ) -> Result<Vec<String>> {
        let (mut skipped, mut mailbox_notes) = (Vec::new(), Vec::new());
        let mut batch = Vec::with_capacity(SCAN_BATCH);
        // Kept across batches: a directory's files may span two.
        let mut stats = Stats::default();
        let mut taken = true;
        'walk: for entry in self.walk(&mut skipped) {
            if stopped() {
                taken = false;
                break;
            }
            for entry in self.documents_of(store, entry, &mut mailbox_notes)?.entries {
                batch.push(entry);
                if batch.len() == SCAN_BATCH {
                    let files = self.fingerprinted(&mut batch, &mut stats);
                    taken = hand(Staged { files, last: false });
                    if !taken {
                        break 'walk;
                    }
                }
            }
        }
        if taken {
            let files = self.fingerprinted(&mut batch, &mut stats);
            hand(Staged { files, last: true });
        }
        skipped.append(&mut mailbox_notes);
        Ok(skipped)
    }

    /// The entries of `batch` (drained), each with what its fingerprint is
    /// made of.
    fn fingerprinted(&self, batch: &mut Vec<Entry>, stats: &mut Stats) -> Vec<Fingerprinted> {
        batch
            .drain(..)
            .map(|entry| {
                let looked = match &entry.message {
                    Some(message) => Looked::Message(message.stat.clone()),
                    None => self.look(&entry, stats),
                };
                Fingerprinted { entry, looked }
            })
            .collect()
    }

    /// Compare one batch with what `known` says the store holds for its
    /// keys, hash what changed (outside any transaction), then enqueue it in
    /// one write.
    fn record_batch(
        &self,
        store: &Store,
        batch: Vec<Fingerprinted>,
        known: impl FnOnce(&[&str]) -> Result<KnownInRange>,
        max_bytes: u64,
        report: &mut Discovered,
    ) -> Result<()> {
        let keys: Vec<&str> = batch.iter().map(|f| f.entry.key.as_str()).collect();
        let known = known(&keys)?;
        let (mut unchanged, mut changed, mut relinked) = (0, Vec::new(), Vec::new());
        let mut stat = String::new();
        for Fingerprinted { entry: e, looked } in batch {
            let meta = looked.write_fingerprint(&mut stat);
            let stored = known.get(&e.key);
            let same =
                stored.is_some_and(|k| k.stat == stat && (k.hashed || !fits(meta.as_ref(), max_bytes)));
            if same {
                report.pending += usize::from(stored.is_some_and(|k| k.pending));
                if e.link == Link::Inside {
                    relinked.push(e.key);
                }
                unchanged += 1;
            } else {
                let version = match &e.message {
                    // A message whose mailbox was not read (its first message
                    // says it did not change) but whose own row was written
                    // under another fingerprint, by a scan cut short: read again.
                    Some(message) => message.version.clone().unwrap_or_else(|| format!("stat:{stat}")),
                    None => self.version_of(&e, &stat, meta.as_ref(), max_bytes),
                };
                changed.push(NewDoc::new(e.key, version).with_stat(stat.clone()));
            }
        }
        let requeued = requeue_relinked(store, &relinked)?;
        report.changed += requeued;
        report.unchanged += unchanged - requeued;
        if changed.is_empty() {
            return Ok(());
        }
        for (doc, outcome) in changed.iter().zip(store.enqueue_many(&changed)?) {
            match outcome {
                crate::job::Enqueued::Inserted(_) => report.new += 1,
                crate::job::Enqueued::Requeued(_) => report.changed += 1,
                crate::job::Enqueued::Unchanged(_) => {
                    report.unchanged += 1;
                    if known.get(&doc.key).is_some_and(|k| k.pending) {
                        report.pending += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Every candidate file, lazily. Directories behind symlinks are not
    /// entered; symlinked files are kept so that `fetch` can refuse the ones
    /// pointing outside the root with a recorded error.
    fn walk<'a>(&'a self, skipped: &'a mut Vec<String>) -> impl Iterator<Item = Entry> + 'a {
        self.walk_from(&self.root, skipped)
    }

    /// [`DirSource::walk`] from `start` (the root, or a path under it that
    /// [`DirSource::concerns`] a watcher's event). `start` itself is not
    /// judged by its name: the caller did. A link named as `start` is not
    /// entered either.
    fn walk_from<'a>(
        &'a self,
        start: &Path,
        skipped: &'a mut Vec<String>,
    ) -> impl Iterator<Item = Entry> + 'a {
        let hidden = self.include_hidden;
        let excluded = &self.excluded;
        walkdir::WalkDir::new(start)
            .follow_links(false)
            .follow_root_links(false)
            .sort_by(walk_order)
            .into_iter()
            .filter_entry(move |e| {
                let shown = hidden || e.depth() == 0 || !name_bytes(e).starts_with(b".");
                shown && (e.depth() == 0 || !excluded.covers(e.path()))
            })
            .filter_map(move |entry| self.candidate(entry, skipped))
    }

    fn candidate(
        &self,
        entry: walkdir::Result<walkdir::DirEntry>,
        skipped: &mut Vec<String>,
    ) -> Option<Entry> {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let path = e.path().map(|p| p.display().to_string()).unwrap_or_default();
                skipped.push(format!("{WALK_ERROR}{path}: {e}"));
                return None;
            }
        };
        let ft = entry.file_type();
        if ft.is_dir() {
            return None;
        }
        if !ft.is_file() && !ft.is_symlink() {
            skipped.push(format!("{}: not a regular file: skipped", entry.path().display()));
            return None;
        }
        let link = if ft.is_symlink() {
            self.link_kind(entry.path())
        } else {
            Link::No
        };
        if link == Link::Inside {
            if let Some(why) = unfollowed_link(entry.path()) {
                skipped.push(format!("{}: {why}", entry.path().display()));
                return None;
            }
        }
        let key = self.key_of(below_root(&self.root, entry.path())?);
        Some(Entry {
            key,
            // The walk's own path, not a copy of it.
            path: entry.into_path(),
            link,
            message: None,
        })
    }

    /// Where a symbolic link leads, resolved without opening its target.
    fn link_kind(&self, path: &Path) -> Link {
        match path.canonicalize() {
            Ok(real) if real.starts_with(&self.root) => Link::Inside,
            Ok(_) => Link::Outside,
            Err(_) => Link::Broken,
        }
    }

    /// Opens the file at `path` for reading only if it really is inside the
    /// root: `Ok(None)` when it resolves outside. Where the system can, one
    /// call opens it below the root's handle and the kernel keeps every link
    /// it follows below the root (`portable::open_beneath`). Otherwise, and
    /// for what that call will not decide (a link leading out, among others),
    /// the path is resolved first, the final component is opened with
    /// `O_NOFOLLOW` (a link swapped in after the check is refused, `ELOOP`),
    /// and the kernel's name for the opened file is checked again, so that a
    /// directory swapped for a link in between is caught too.
    /// `O_NONBLOCK`: a FIFO swapped in returns at once instead of waiting for a
    /// writer (reads of a regular file ignore the flag).
    fn open_inside(&self, path: &Path) -> std::result::Result<Option<File>, OpenError> {
        let beneath = self.root_dir.as_deref().zip(path.strip_prefix(&self.root).ok());
        if let Some(file) = beneath.and_then(|(dir, rel)| crate::portable::open_beneath(dir, rel)) {
            return Ok(Some(file));
        }
        let real = path.canonicalize().map_err(OpenError::Resolving)?;
        if !real.starts_with(&self.root) {
            return Ok(None);
        }
        let mut options = std::fs::OpenOptions::new();
        crate::portable::private_open(options.read(true), 0o600);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::custom_flags(
            &mut options,
            libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        );
        let file = options.open(&real).map_err(OpenError::Opening)?;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            if let Ok(opened) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
                if !opened.starts_with(&self.root) {
                    return Ok(None);
                }
            }
        }
        // Without /proc the check before the open stands alone.
        Ok(Some(file))
    }

    /// Size and modification time (of the link target, for a link inside the
    /// root), or a marker when there is nothing to stat (a broken link, still
    /// enqueued so that its error is recorded) or nothing to follow (a link
    /// outside the root, whose target is never looked at).
    /// A batch's files are stat'ed through `stats`, which keeps their
    /// directory open (the walk yields a directory's files together).
    fn fingerprint(&self, e: &Entry, stats: &mut Stats) -> (String, Option<FileStat>) {
        self.look(e, stats).fingerprint()
    }

    /// What [`DirSource::fingerprint`] is made of, read from the file system
    /// and not yet written out: the walk's thread takes these, the scan's
    /// own thread writes the fingerprints.
    fn look(&self, e: &Entry, stats: &mut Stats) -> Looked {
        let target = || {
            std::fs::read_link(&e.path)
                .map(|t| t.display().to_string())
                .unwrap_or_default()
        };
        let link = match e.link {
            Link::No => String::new(),
            Link::Outside => return Looked::Outside { target: target() },
            Link::Inside | Link::Broken => target(),
        };
        Looked::Stat {
            stat: stats.stat(&e.path, true),
            link,
        }
    }

    /// The content hash of the file, or the fingerprint when it is too large
    /// to be worth reading (it will fail as too large), cannot be read (it will
    /// fail with the read error, recorded at fetch) or leads outside the root
    /// (never read; it will fail at fetch).
    fn version_of(&self, e: &Entry, stat: &str, meta: Option<&FileStat>, max_bytes: u64) -> String {
        if !fits(meta, max_bytes) {
            return format!("stat:{stat}");
        }
        match self.open_inside(&e.path) {
            Ok(Some(mut f)) => match crate::digest::sha256_hex(&mut f) {
                Ok(hex) => format!("sha256:{hex}"),
                Err(_) => format!("stat:{stat}"),
            },
            Ok(None) => format!("stat:outside:{stat}"),
            Err(_) => format!("stat:{stat}"),
        }
    }

    /// The file behind `key`, refusing keys that would leave the root.
    fn path_of(&self, key: &str) -> std::result::Result<PathBuf, SourceError> {
        let bad = |reason| SourceError::BadKey {
            key: key.to_owned(),
            reason,
        };
        let below = self
            .below_root(key)
            .ok_or_else(|| bad("not a key of this folder"))?;
        let rel = relative_path_of(below).map_err(bad)?;
        Ok(self.root.join(rel))
    }
}

/// Whether a file of `meta` is hashed under the input limit `max_bytes`. A
/// known file that was not hashed (over the limit of an earlier scan) and now
/// fits is hashed again even with the same fingerprint: raising `--max-input`
/// queues the documents that failed the old limit.
fn fits(meta: Option<&FileStat>, max_bytes: u64) -> bool {
    meta.is_some_and(|m| m.is_file && m.len <= max_bytes)
}

/// A document's original, ready to be read: an open file of a known length,
/// to be read in pieces (`serve` sends one without holding it whole), or the
/// bytes of a message cut from its mailbox.
#[derive(Debug)]
pub enum Original {
    /// A file, opened inside its folder.
    File {
        /// The file, at its start.
        file: File,
        /// Its length when opened (at most the limit asked for). Read no
        /// more than that: it may have grown since.
        len: u64,
    },
    /// A mailbox's message.
    Message(Vec<u8>),
}

impl DirSource {
    /// The original of `key`, opened with every check [`Source::fetch`]
    /// makes (inside the folder, a regular file, within `max_bytes`), not
    /// read: a file comes back open, a mailbox's message as its bytes.
    pub fn open_original(&self, key: &str, max_bytes: u64) -> std::result::Result<Original, SourceError> {
        let path = self.path_of(key)?;
        if let Some((mailbox, n)) = mailbox::message_path(&path) {
            if let Some(bytes) = self.fetch_message(key, mailbox, n, max_bytes)? {
                return Ok(Original::Message(bytes));
            }
        }
        let opened = self.open_inside(&path).map_err(|e| e.for_document(key, &path))?;
        let Some(file) = opened else {
            return Err(SourceError::OutsideRoot { key: key.to_owned() });
        };
        let unreadable = |source| SourceError::Unreadable {
            key: key.to_owned(),
            path: path.clone(),
            source,
        };
        // A FIFO that a link was swapped to (after the scan) was opened without
        // blocking; the fstat below refuses it without a read.
        let meta = file.metadata().map_err(unreadable)?;
        if !meta.is_file() {
            return Err(SourceError::NotAFile { key: key.to_owned() });
        }
        if meta.len() > max_bytes {
            return Err(SourceError::TooLarge {
                key: key.to_owned(),
                size: meta.len(),
                limit: max_bytes,
            });
        }
        Ok(Original::File {
            file,
            len: meta.len(),
        })
    }
}

impl Source for DirSource {
    fn fetch(&self, key: &str, max_bytes: u64) -> std::result::Result<Vec<u8>, SourceError> {
        let (file, len) = match self.open_original(key, max_bytes)? {
            Original::Message(bytes) => return Ok(bytes),
            Original::File { file, len } => (file, len),
        };
        let unreadable = |source| SourceError::Unreadable {
            key: key.to_owned(),
            path: self.path_of(key).unwrap_or_default(),
            source,
        };
        let mut bytes = Vec::with_capacity(len as usize);
        // take(): the file may grow between stat and read.
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        if bytes.len() as u64 > max_bytes {
            return Err(SourceError::TooLarge {
                key: key.to_owned(),
                size: bytes.len() as u64,
                limit: max_bytes,
            });
        }
        Ok(bytes)
    }
}

/// The order a directory's entries are walked in: by name, a directory's
/// name (and a mailbox's, whose messages are keyed below it as a
/// directory's files are) taken with the separator after it. Siblings then come in the byte
/// order of their keys (`a-b`, `a.txt`, then `a/…`, where sorting by name
/// alone would walk `a/…` before `a-b`), and so does the whole walk, which
/// `dir/known.rs` reads the store beside. Names hold no separator, so two
/// keys are decided within the first component where they differ.
fn walk_order(a: &walkdir::DirEntry, b: &walkdir::DirEntry) -> std::cmp::Ordering {
    fn with_separator(e: &walkdir::DirEntry) -> impl Iterator<Item = u8> + '_ {
        let below = e.file_type().is_dir() || mailbox::is_mailbox_name(name_bytes(e));
        let sep = below.then_some(std::path::MAIN_SEPARATOR as u8);
        name_bytes(e).iter().copied().chain(sep)
    }
    // Names that differ within the shorter one are decided there (most
    // pairs of a sort): the separator only counts when one name begins the
    // other. That length is compared as one slice (`memcmp`), not byte by
    // byte: a directory's names often share a long prefix (`doc00…`), and
    // the comparison was 8 % of the walk thread's CPU on a rerun (5 % after).
    let (na, nb) = (name_bytes(a), name_bytes(b));
    let shared = na.len().min(nb.len());
    match na[..shared].cmp(&nb[..shared]) {
        std::cmp::Ordering::Equal => with_separator(a).cmp(with_separator(b)),
        decided => decided,
    }
}

/// `path` relative to `root`: when both are UTF-8 and what follows the
/// root's own text and a separator is plain names (no empty, `.` or `..`
/// piece, which a walk from a caller's path such as `root/./a.txt` can
/// have), that text is cut off (`Path::strip_prefix` compares the two
/// component by component, a few percent of a rerun's walk); anything else
/// is compared by components as before. The key is made from this text, so
/// it is the same bytes `strip_prefix` gives.
fn below_root<'p>(root: &Path, path: &'p Path) -> Option<&'p Path> {
    let cut = root.to_str().zip(path.to_str()).and_then(|(root, path)| {
        let rest = path.strip_prefix(root)?;
        let ends_in_separator = root.chars().next_back().is_some_and(std::path::is_separator);
        let rest = if ends_in_separator {
            rest
        } else {
            rest.strip_prefix(std::path::is_separator)?
        };
        // Names only: `a//b`, `./x`, `x/` and the like are left to the
        // comparison by components.
        let plain = rest
            .split(std::path::is_separator)
            .all(|piece| !matches!(piece, "" | "." | ".."));
        plain.then_some(rest)
    });
    match cut {
        Some(rest) => Some(Path::new(rest)),
        None => path.strip_prefix(root).ok(),
    }
}

/// The entry's own name, cut from its path after the last separator.
/// `DirEntry::file_name` parses the whole path into components each time,
/// and a directory's sort asks for two names per comparison.
fn name_bytes(e: &walkdir::DirEntry) -> &[u8] {
    let path = e.path().as_os_str().as_encoded_bytes();
    let start = path
        .iter()
        .rposition(|&b| std::path::is_separator(char::from(b)))
        .map_or(0, |i| i + 1);
    &path[start..]
}

/// Why a symbolic link is not taken as a document: it points at a directory
/// (not followed) or at something that is not a regular file (a FIFO, socket
/// or device, which would block or never end when read). A broken link is
/// taken, so that its error is recorded at fetch.
fn unfollowed_link(path: &Path) -> Option<String> {
    let target = std::fs::metadata(path).ok()?.file_type();
    if target.is_dir() {
        return Some("link to a directory, not followed".into());
    }
    #[cfg(not(unix))]
    return None;
    #[cfg(unix)]
    special_file(target).map(|what| format!("link to {what}, not a regular file: skipped"))
}

/// What a file of type `target` is when it is neither a regular file nor a directory.
#[cfg(unix)]
fn special_file(target: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    Some(if target.is_fifo() {
        "a FIFO"
    } else if target.is_socket() {
        "a socket"
    } else if target.is_block_device() || target.is_char_device() {
        "a device"
    } else {
        return None;
    })
}

/// What [`SourceError::OutsideRoot`] says, as the document's recorded error.
const OUTSIDE_ROOT: &str = "symbolic link points outside the source directory";

/// Queue again the documents among `keys` (links that now point inside the
/// root, with an unchanged fingerprint) that died because the link pointed
/// outside when they were fetched: the link was swapped and put back. One
/// read per link, and links are few. Returns how many were queued.
fn requeue_relinked(store: &Store, keys: &[String]) -> Result<usize> {
    let mut n = 0;
    for key in keys {
        let Some(job) = store.job_by_key(key)? else {
            continue;
        };
        let refused = job
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains(OUTSIDE_ROOT));
        if job.status == Status::Dead && refused {
            let why = "the link points inside the source directory again";
            n += usize::from(store.requeue(crate::job::JobId(job.id), why)?);
        }
    }
    Ok(n)
}

/// Prefix of a skipped entry that the walk could not read (so nothing is marked gone).
const WALK_ERROR: &str = "unreadable, nothing marked removed: ";

/// Mark every present document of the folder whose keys start with
/// `prefix` ([`DirSource::key_prefix`]) gone, as a scan that found the
/// folder empty would: the folder is no longer indexed. The folder itself
/// need not exist any more. Written a batch at a time as the folder's rows
/// are read, so memory does not grow with the folder. Returns how many.
pub fn mark_folder_gone(store: &Store, prefix: &str) -> Result<usize> {
    let (mut batch, mut gone, mut failed) = (Vec::with_capacity(SCAN_BATCH), 0, None);
    let mut flush = |batch: &mut Vec<crate::store::Vanished>| -> Result<()> {
        gone += store.mark_vanished(batch)?;
        batch.clear();
        Ok(())
    };
    known::KnownCursor::new(store, prefix).take_through(None, |key, known| {
        batch.push(crate::store::Vanished {
            key,
            stat: known.stat,
        });
        if batch.len() == SCAN_BATCH && failed.is_none() {
            failed = flush(&mut batch).err();
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    flush(&mut batch)?;
    Ok(gone)
}

/// How many present documents the folder whose keys start with `prefix`
/// holds: one read of its rows, beside nothing (a full-path folder's range
/// only).
pub fn count_folder_documents(store: &Store, prefix: &str) -> Result<u64> {
    let mut n = 0u64;
    known::KnownCursor::new(store, prefix).take_through(None, |_, _| n += 1)?;
    Ok(n)
}

// The tests use Unix file modes, symlinks and FIFOs; the code paths other
// systems take are run on Linux through LEASEHOLD_FORCE_PORTABLE (src/portable.rs).
#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};

    /// The cut of a walked path below its root is, byte for byte, what
    /// `Path::strip_prefix` gives (the key is made from its text), for roots
    /// written in the odd ways a user may write them, and refuses what it
    /// refuses.
    #[test]
    fn a_walked_path_below_its_root_is_strip_prefixs_own() {
        let roots = [
            "tree",
            "tree/",
            "./tree",
            "/abs/tree",
            "/abs/tree/",
            "tree/.",
            "a b/ç",
            "/",
        ];
        let rels = [
            "d000/doc1.txt",
            "x",
            "d/é.md",
            ".hidden/f",
            "./x",
            "./sub/x",
            "a/./b",
            "a/../b",
            "a//b",
            "x/",
        ];
        for root in roots {
            for rel in rels {
                let path = Path::new(root).join(rel);
                let want = path.strip_prefix(root).ok().map(|p| p.as_os_str().to_owned());
                let got = below_root(Path::new(root), &path).map(|p| p.as_os_str().to_owned());
                assert_eq!(got, want, "{root:?} + {rel:?}");
            }
        }
        for (root, path) in [
            ("tree", "treeish/x"),
            ("tree", "other/x"),
            ("tree", "tree"),
            ("a", "a//b"),
        ] {
            let want = Path::new(path).strip_prefix(root).ok();
            assert_eq!(
                below_root(Path::new(root), Path::new(path)),
                want,
                "{root:?} {path:?}"
            );
        }
        let raw_root = Path::new(std::ffi::OsStr::from_bytes(b"t\xff"));
        let raw = Path::new(std::ffi::OsStr::from_bytes(b"t\xff/x"));
        assert_eq!(below_root(raw_root, raw), Some(Path::new("x")));
    }

    #[test]
    fn keys_round_trip_for_utf8_and_raw_byte_names() {
        let dir = tempfile::tempdir().unwrap();
        let src = DirSource::open(dir.path()).unwrap();
        for name in [
            &b"plain.txt"[..],
            b"caf\xc3\xa9.md",
            b"bad\xff\xfename.txt",
            b"hex:looks-like-a-key",
        ] {
            let rel = PathBuf::from(OsString::from_vec(name.to_vec()));
            std::fs::write(dir.path().join(&rel), b"x").unwrap();
            let key = key_for(&rel);
            assert_eq!(src.fetch(&key, 10).unwrap(), b"x", "{key}");
        }
    }

    #[test]
    fn keys_that_leave_the_root_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let src = DirSource::open(dir.path()).unwrap();
        for key in [
            "../etc/passwd",
            "/etc/passwd",
            "a/../../b",
            "hex:2e2e2f78",
            "hex:zz",
            "a\0b",
        ] {
            assert!(
                matches!(src.fetch(key, 10), Err(SourceError::BadKey { .. })),
                "{key}"
            );
        }
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo touches no memory of ours.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    /// A FIFO (also behind a link) is reported as skipped by a scan and never
    /// opened for reading; a link swapped to a FIFO after the scan is refused
    /// by fetch without blocking. A link to a FIFO outside the root is not
    /// looked at: it is enqueued and fails as leading outside.
    #[test]
    fn fifos_are_skipped_and_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("src");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("ok.txt"), b"fine").unwrap();
        mkfifo(&dir.path().join("pipe"));
        std::os::unix::fs::symlink(dir.path().join("pipe"), root.join("link-outside")).unwrap();
        mkfifo(&root.join("pipe-inside"));
        std::os::unix::fs::symlink(root.join("pipe-inside"), root.join("link-to-pipe")).unwrap();
        let store = Store::open(dir.path().join("q.db"), crate::StoreOptions::default()).unwrap();
        let src = DirSource::open(&root).unwrap();
        let found = src.discover(&store, 1 << 20).unwrap();
        assert_eq!(found.new, 2, "{found:?}");
        let outside = src.fetch("link-outside", 1 << 20);
        assert!(
            matches!(outside, Err(SourceError::OutsideRoot { .. })),
            "{outside:?}"
        );
        assert!(
            found
                .skipped
                .iter()
                .any(|s| s.contains("link-to-pipe") && s.contains("FIFO")),
            "{found:?}"
        );
        assert!(
            found.skipped.iter().any(|s| s.contains("pipe-inside")),
            "{found:?}"
        );

        std::fs::remove_file(root.join("ok.txt")).unwrap();
        std::os::unix::fs::symlink(root.join("pipe-inside"), root.join("ok.txt")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(src.fetch("ok.txt", 1 << 20)).unwrap());
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("fetch of a FIFO returned instead of blocking");
        assert!(matches!(got, Err(SourceError::NotAFile { .. })), "{got:?}");
    }
    /// The walk yields files in the byte order of their keys (what the scan
    /// reads the store beside), not by name alone: `a-b` and `a.txt` come
    /// before the directory `a`'s files.
    #[test]
    fn the_walk_yields_keys_in_byte_order() {
        let dir = tempfile::tempdir().unwrap();
        for rel in ["a/x", "a-b", "a.txt", "a/y/z", "a0", "B", "b", "_x", "ab/c"] {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, rel).unwrap();
        }
        let src = DirSource::open(dir.path()).unwrap();
        let mut skipped = Vec::new();
        let keys: Vec<String> = src.walk(&mut skipped).map(|e| e.key).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert_eq!(keys.len(), 9);
    }

    /// The error text the scan looks for is what `OutsideRoot` says.
    #[test]
    fn the_outside_root_marker_matches_the_error() {
        let e = SourceError::OutsideRoot { key: "k".into() };
        assert!(e.to_string().ends_with(OUTSIDE_ROOT), "{e}");
    }

    /// A link swapped to point outside the root between the scan and the
    /// fetch fails that attempt with a clear reason (and the document dies);
    /// put back, the next scan queues it again and it is read from inside. A
    /// link that points outside during a scan is enqueued without its target
    /// being read.
    #[test]
    fn a_link_swapped_outside_and_back_is_queued_again_and_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("src");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(root.join("real.txt"), b"inside text").unwrap();
        std::fs::write(outside.join("secret.txt"), b"SECRET").unwrap();
        let link = root.join("link.txt");
        let point = |to: &Path| {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(to, &link).unwrap();
        };
        point(&root.join("real.txt"));
        let store = Store::open(dir.path().join("q.db"), crate::StoreOptions::default()).unwrap();
        let src = DirSource::open(&root).unwrap();
        assert_eq!(src.discover(&store, 1 << 20).unwrap().new, 2);

        // Swapped after the scan: the fetch refuses it; the worker records that.
        point(&outside.join("secret.txt"));
        let err = src.fetch("link.txt", 1 << 20).unwrap_err();
        assert!(matches!(err, SourceError::OutsideRoot { .. }), "{err}");
        let claims: Vec<_> = std::iter::from_fn(|| store.claim("w").unwrap()).collect();
        assert_eq!(claims.len(), 2);
        for claim in claims {
            if claim.key == "link.txt" {
                let fenced = store.fail(claim, &err.to_string(), err.is_permanent()).unwrap();
                assert_eq!(fenced, crate::job::Fenced::Accepted);
            } else {
                let fenced = store.release(claim, "not this one").unwrap();
                assert_eq!(fenced, crate::job::Fenced::Accepted);
            }
        }
        let dead = store.job_by_key("link.txt").unwrap().unwrap();
        assert_eq!(dead.status, Status::Dead);

        // Put back before the next scan, with the very fingerprint the store knows.
        point(&root.join("real.txt"));
        let found = src.discover(&store, 1 << 20).unwrap();
        assert_eq!((found.changed, found.unchanged), (1, 1), "{found:?}");
        let row = store.job_by_key("link.txt").unwrap().unwrap();
        assert_eq!(row.status, Status::Discovered, "queued again");
        assert_eq!(src.fetch("link.txt", 1 << 20).unwrap(), b"inside text");
        // Not again and again: a scan that finds nothing dead changes nothing.
        let found = src.discover(&store, 1 << 20).unwrap();
        assert_eq!((found.changed, found.unchanged), (0, 2), "{found:?}");

        // Outside during a scan: enqueued as changed, its target never read.
        point(&outside.join("secret.txt"));
        let found = src.discover(&store, 1 << 20).unwrap();
        assert_eq!((found.changed, found.unchanged), (1, 1), "{found:?}");
        let row = store.job_by_key("link.txt").unwrap().unwrap();
        assert!(row.version.starts_with("stat:outside:"), "{}", row.version);
        assert!(matches!(
            src.fetch("link.txt", 1 << 20),
            Err(SourceError::OutsideRoot { .. })
        ));
    }

    /// The kernel's name for an opened file is checked: a file reached through
    /// a directory that resolves outside the root is refused.
    #[test]
    fn a_directory_link_outside_is_never_followed_by_fetch() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("src");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), b"SECRET").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("sub")).unwrap();
        let src = DirSource::open(&root).unwrap();
        let got = src.fetch("sub/secret.txt", 1 << 20);
        assert!(matches!(got, Err(SourceError::OutsideRoot { .. })), "{got:?}");
    }
}
