//! Mirror directory: extracted document text stored on disk, one file per claim generation.
//!
//! Several workers (threads and processes) may hold claims on the same document at once; each
//! claim carries a `fence` that grows by one per claim. Every claim therefore writes its own file
//! (`{id}.g{fence:06}.txt`), and nothing is ever overwritten: a stale owner can at worst add a
//! file that cleanup later removes, never clobber the accepted result.
//!
//! Layout under the root (nothing comes from a document name, only from the numeric id): shard
//! directories of 1,024 consecutive ids, `s{id >> 20:03x}/{(id >> 10) & 0x3ff:03x}/`, each with
//! one `.lock` and the generation files `{id}.g{fence:06}.txt` of its documents (transient
//! `{id}.g{fence:06}.tmp-{unique}` files while a write runs): one inode per live generation.
//! Results of the layout before shards (`{id/10^6:03}/{(id/10^3)%10^3:03}/{id}/g{fence:06}.txt`
//! with a `.lock` per document) stay readable where they are; a document's cleanup removes
//! what it has there (see `layout.rs`).
//!
//! Concurrency: writers hold an fs2 *shared* lock on the shard's `.lock` around their temp
//! write and rename; a cleanup holds it *exclusive* and reads the database row only while
//! holding it, for the few file operations of one document. So cleanup never sees a temp file
//! that is still in use, and the row it reads is at least as new as every file already renamed
//! into place. No lock wait is unbounded (see `lock.rs`): a writer gives up after
//! [`WRITE_LOCK_WAIT`], a cleanup after [`CLEANUP_LOCK_WAIT`], and a cleanup that gave up is
//! reported in [`CleanupReport::busy`] and counted ([`Mirror::cleanups_skipped`]), its files
//! left for a later cleanup or `gc`.

mod error;
mod gc;
mod layout;
mod listing;
mod lock;
mod shard_stamp;
mod staged;
// The tests use Unix file modes, symlinks and FIFOs; the code paths other
// systems take are run on Linux through LEASEHOLD_FORCE_PORTABLE (src/portable.rs).
#[cfg(all(test, unix))]
mod tests;
mod write;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use error::MirrorError;
pub use listing::ListedResults;
pub use lock::{CLEANUP_LOCK_WAIT, WRITE_LOCK_WAIT};
pub use shard_stamp::{ShardStamp, SETTLED_MS};
use staged::SyncGroup;
pub use staged::{Staged, Written};

use layout::{
    check_ids, gen_name, io_err, legacy_doc_rel, new_file, scan_legacy_doc, scan_shard_doc, shard_rel,
    unique_suffix, Kind, DIR_MODE, FILE_MODE, PROBE_PREFIX,
};

/// Fault injection for tests of callers: simulates failures that are hard to provoke for real.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The temp file's fsync fails with EIO.
    FailFsync,
    /// The directory fsync after the rename fails with EIO.
    FailDirFsync,
    /// Writing the bytes fails with ENOSPC.
    DiskFullOnWrite,
}

/// What keeps a cleanup from deleting a file a writer still needs (DESIGN §5, §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fencing {
    /// Each document's fs2 `.lock`: writers hold it shared, cleanup exclusive
    /// ([`Mirror::cleanup`], [`Mirror::sweep`]). The SQLite edition: one machine.
    #[default]
    FileLocks,
    /// The document's database row lock, which the caller of
    /// [`Mirror::cleanup_held`] holds; writers take no file lock. The PostgreSQL
    /// edition, whose machines share a mirror on a file system that may not lock.
    RowLocks,
}

/// Handle on a mirror root. Cheap to clone; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Mirror {
    root: PathBuf,
    fault: Option<Fault>,
    fencing: Fencing,
    /// Cleanups given up because the document's lock was held (shared by clones).
    skipped: Arc<AtomicU64>,
    /// Sync rounds shared by this process's writers (and by clones).
    syncs: Arc<SyncGroup>,
}

/// What one stat says of an accepted result ([`Mirror::stat_result`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultFile {
    /// There, with the size its completion recorded (or any size, when none was).
    Present,
    /// No file at the result's path.
    Missing,
    /// There, but truncated or added to: `found` bytes where `recorded` were accepted.
    Resized {
        /// The file's size now.
        found: u64,
        /// The size its completion recorded.
        recorded: u64,
    },
}

/// What cleanup must keep for one document, read from the database while the exclusive lock is held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keep {
    /// Relative path of the accepted result, exactly as returned in [`Written::rel_path`].
    pub accepted: Option<String>,
    /// Fence of the claim currently extracting, whose generation may be in progress.
    pub current_fence: Option<i64>,
}

/// What cleanup/sweep removed (or, in a dry run, would remove), kept, and did not recognise.
/// All entries are '/'-separated paths relative to the root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// Stale generations and temp files deleted (or, in a dry run, that would be).
    pub removed: Vec<String>,
    /// Files left in place: the accepted result, the current claim's generation,
    /// and everything of a document whose row is missing.
    pub kept: Vec<String>,
    /// Entries that are not the mirror's own files; never deleted.
    pub unknown: Vec<String>,
    /// Jobs whose row did not exist: their files were all kept.
    pub missing_rows: Vec<i64>,
    /// Jobs whose lock another process held past [`CLEANUP_LOCK_WAIT`]: not looked at, nothing
    /// deleted; a later cleanup or `gc` does it.
    pub busy: Vec<i64>,
}

impl CleanupReport {
    fn merge(&mut self, other: CleanupReport) {
        self.removed.extend(other.removed);
        self.kept.extend(other.kept);
        self.unknown.extend(other.unknown);
        self.missing_rows.extend(other.missing_rows);
        self.busy.extend(other.busy);
    }
}

/// Whether `rel_path` is plainly relative in the shape the mirror's own
/// paths have (`s000/04a/218.g000001.txt`): pieces of ASCII letters, digits,
/// `.`, `_` and `-` joined by `/`, none of them empty, `.` or `..`. Such a
/// path has only normal components on every system (no root, drive or
/// backslash), so a rerun's check of every result skips `Path`'s parsing;
/// any other path is parsed.
fn is_generated(rel_path: &str) -> bool {
    rel_path.split('/').all(|piece| {
        !matches!(piece, "" | "." | "..")
            && piece
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    })
}

fn create_root(root: &Path) -> Result<(), MirrorError> {
    match crate::portable::dir_builder(DIR_MODE).create(root) {
        // Exactly 0700 whatever the umask.
        Ok(()) => crate::portable::set_path_mode(root, DIR_MODE).map_err(io_err(root)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => check_existing_root(root),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(MirrorError::BadRoot {
            path: root.to_path_buf(),
            reason: "parent directory does not exist".into(),
        }),
        Err(e) => Err(io_err(root)(e)),
    }
}

/// Refuses a symlink root (it could be repointed under us) and a non-directory.
fn check_existing_root(root: &Path) -> Result<(), MirrorError> {
    let bad = |reason: &str| MirrorError::BadRoot {
        path: root.to_path_buf(),
        reason: reason.into(),
    };
    let meta = fs::symlink_metadata(root).map_err(io_err(root))?;
    if meta.file_type().is_symlink() {
        return Err(bad("is a symlink"));
    }
    if !meta.is_dir() {
        return Err(bad("is not a directory"));
    }
    Ok(())
}

/// Proves writability by doing it: permission bits prove nothing for root, and read-only mounts
/// or immutable attributes only show up when a write is attempted. The probe is an unnamed
/// `O_TMPFILE` inode where the file system has them, so a process killed mid-probe leaves
/// nothing behind; elsewhere a named `.probe-*` file, which `gc` removes if a kill left it.
fn probe_writable(root: &Path) -> Result<(), MirrorError> {
    let not_writable = |what: String, e: io::Error| MirrorError::BadRoot {
        path: root.to_path_buf(),
        reason: format!("not writable ({what}): {e}"),
    };
    match unnamed_probe(root) {
        Ok(()) => return Ok(()),
        Err(e) if !unnamed_unsupported(&e) => {
            return Err(not_writable("unnamed probe file".into(), e));
        }
        Err(_) => {}
    }
    named_probe(root).map_err(|(probe, e)| not_writable(format!("probe {}", probe.display()), e))
}

/// The portable probe: a named `.probe-*` file in `root`, written, synced and removed.
fn named_probe(root: &Path) -> Result<(), (PathBuf, io::Error)> {
    let probe = root.join(format!("{PROBE_PREFIX}{}", unique_suffix()));
    let result = new_file(&probe).and_then(|mut f| {
        let written = f.write_all(b"probe").and_then(|()| f.sync_all());
        drop(f);
        // Gone already is fine: a concurrent `gc` may take it for a leftover.
        let removed = match fs::remove_file(&probe) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        };
        written.and(removed)
    });
    result.map_err(|e| (probe, e))
}

/// Writes and syncs an `O_TMPFILE` file in `root`: it has no name, so it vanishes when closed,
/// however the process ends. Linux only ([`crate::portable::fast`]); elsewhere it answers
/// "unsupported", and the caller takes a named probe file.
fn unnamed_probe(root: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    if crate::portable::fast() {
        return unnamed_probe_linux(root);
    }
    let _ = root;
    Err(io::Error::new(io::ErrorKind::Unsupported, "no O_TMPFILE here"))
}

#[cfg(target_os = "linux")]
fn unnamed_probe_linux(root: &Path) -> io::Result<()> {
    let mut file = open_unnamed(root)?;
    file.write_all(b"probe")?;
    file.sync_all()
}

/// A new `O_TMPFILE` inode of `dir`, opened for writing (Linux): it has no
/// name until it is linked, and is freed when closed unlinked.
#[cfg(target_os = "linux")]
fn open_unnamed(dir: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
}

/// The answers of a kernel or file system without `O_TMPFILE`.
fn unnamed_unsupported(e: &io::Error) -> bool {
    if e.kind() == io::ErrorKind::Unsupported {
        return true;
    }
    #[cfg(unix)]
    return matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL | libc::ENOSYS)
    );
    #[cfg(not(unix))]
    return false;
}

/// The error of a full disk, as a test injects it.
fn disk_full_error() -> io::Error {
    #[cfg(unix)]
    return io::Error::from_raw_os_error(libc::ENOSPC);
    #[cfg(not(unix))]
    return io::Error::new(io::ErrorKind::StorageFull, "no space left on device (injected)");
}

/// Whether this process may create files in `root`, asked of the kernel with `access(2)`
/// rather than by writing: it sees permissions and a read-only mount (`EROFS`), not every
/// obstacle a real write could meet (a full disk, a quota). Without `access(2)` (Windows) only
/// the read-only attribute of the root is looked at.
#[cfg(not(unix))]
fn access_writable(root: &Path) -> Result<(), MirrorError> {
    let meta = fs::metadata(root).map_err(io_err(root))?;
    if meta.permissions().readonly() {
        return Err(MirrorError::BadRoot {
            path: root.to_path_buf(),
            reason: "not writable: read-only".into(),
        });
    }
    Ok(())
}

#[cfg(unix)]
fn access_writable(root: &Path) -> Result<(), MirrorError> {
    let c = layout::cstring(root)?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let rc = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    Err(MirrorError::BadRoot {
        path: root.to_path_buf(),
        reason: format!("not writable: {}", io::Error::last_os_error()),
    })
}

impl Mirror {
    /// Opens (creating if missing, but not its parent) a mirror root and stores its canonical form.
    pub fn open(root: impl AsRef<Path>) -> Result<Mirror, MirrorError> {
        let root = root.as_ref();
        match fs::symlink_metadata(root) {
            Ok(_) => check_existing_root(root)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => create_root(root)?,
            Err(e) => return Err(io_err(root)(e)),
        }
        let canonical = fs::canonicalize(root).map_err(io_err(root))?;
        probe_writable(&canonical)?;
        Ok(Mirror::at(canonical))
    }

    /// Opens an existing mirror root for inspection (`doctor`) and creates nothing: no root,
    /// no probe file. Writability is asked of the kernel (`access(2)`), not tried.
    pub fn inspect(root: impl AsRef<Path>) -> Result<Mirror, MirrorError> {
        let mirror = Mirror::inspect_readable(root)?;
        mirror.writable()?;
        Ok(mirror)
    }

    /// [`Mirror::inspect`] without the writability check: an existing root
    /// (a real directory, not a link) to read, such as a read-only copy.
    pub fn inspect_readable(root: impl AsRef<Path>) -> Result<Mirror, MirrorError> {
        let root = root.as_ref();
        check_existing_root(root)?;
        let canonical = fs::canonicalize(root).map_err(io_err(root))?;
        Ok(Mirror::at(canonical))
    }

    /// Whether this process may create files in the root, asked of the kernel
    /// (`access(2)`; it sees permissions and a read-only mount), not tried.
    pub fn writable(&self) -> Result<(), MirrorError> {
        access_writable(&self.root)
    }

    /// A handle on the mirror at `root` for commands that only read results
    /// (`status`, `list`, `show`): creates, probes and writes nothing; a root
    /// that does not exist yet is taken as given (there is nothing to read).
    pub fn locate(root: impl AsRef<Path>) -> Result<Mirror, MirrorError> {
        let root = root.as_ref();
        Ok(Mirror::at(
            fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf()),
        ))
    }

    fn at(root: PathBuf) -> Mirror {
        Mirror {
            root,
            fault: None,
            fencing: Fencing::FileLocks,
            skipped: Arc::new(AtomicU64::new(0)),
            syncs: Arc::new(SyncGroup::new()),
        }
    }

    /// Whether a path relative to the root is a leftover writability probe, as a sweep
    /// reports it in [`CleanupReport::removed`].
    pub fn is_probe_name(rel_path: &str) -> bool {
        !rel_path.contains('/') && rel_path.starts_with(PROBE_PREFIX)
    }

    /// Counts a cleanup given up because another process held the document's
    /// row lock (the PostgreSQL edition's fence), like a busy `.lock`.
    pub fn note_cleanup_skipped(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// How many cleanups through this handle (and its clones) were skipped because another
    /// process held the document's lock past [`CLEANUP_LOCK_WAIT`].
    pub fn cleanups_skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// The same mirror with cleanup fenced by `fencing`.
    #[must_use]
    pub fn fenced_by(self, fencing: Fencing) -> Mirror {
        Mirror { fencing, ..self }
    }

    /// How cleanup is fenced against writers.
    pub fn fencing(&self) -> Fencing {
        self.fencing
    }

    /// Sets (or clears) an injected fault; meant for tests of callers.
    #[must_use]
    pub fn with_fault(self, fault: Option<Fault>) -> Mirror {
        Mirror { fault, ..self }
    }

    /// Canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Absolute shard directory of a document (it may not exist yet); the document's files in
    /// it are named `{job_id}.*`.
    pub fn doc_dir(&self, job_id: i64) -> Result<PathBuf, MirrorError> {
        Ok(self.root.join(shard_rel(job_id)?))
    }

    /// Absolute directory of a document in the layout before shards (it may not exist).
    pub fn legacy_doc_dir(&self, job_id: i64) -> Result<PathBuf, MirrorError> {
        Ok(self.root.join(legacy_doc_rel(job_id)?))
    }

    /// Relative path of a generation file; what [`Mirror::write`] returns for these ids.
    pub fn generation_rel_path(job_id: i64, fence: i64) -> Result<String, MirrorError> {
        check_ids(job_id, fence)?;
        Ok(format!("{}/{}", shard_rel(job_id)?, gen_name(job_id, fence)))
    }

    /// Relative path a generation had in the layout before shards, where a mirror made by an
    /// older leasehold keeps its results (and where they are read).
    pub fn legacy_generation_rel_path(job_id: i64, fence: i64) -> Result<String, MirrorError> {
        check_ids(job_id, fence)?;
        Ok(format!("{}/g{fence:06}.txt", legacy_doc_rel(job_id)?))
    }

    /// Validates a caller-supplied relative path: relative, only normal components, and its
    /// canonical form (after symlinks) still inside the root.
    fn safe_path(&self, rel_path: &str) -> Result<PathBuf, MirrorError> {
        let joined = self.joined(rel_path)?;
        let canonical = fs::canonicalize(&joined).map_err(io_err(&joined))?;
        if canonical == self.root || !canonical.starts_with(&self.root) {
            return Err(MirrorError::UnsafePath {
                path: rel_path.to_string(),
            });
        }
        Ok(canonical)
    }

    /// `rel_path` under the root, checked as written (relative, only normal
    /// components) but not resolved: what [`Mirror::safe_path`] resolves.
    fn joined(&self, rel_path: &str) -> Result<PathBuf, MirrorError> {
        let rel = Path::new(rel_path);
        let plain = !rel_path.is_empty()
            && !rel_path.contains('\0')
            && (is_generated(rel_path) || rel.components().all(|c| matches!(c, Component::Normal(_))));
        if !plain {
            return Err(MirrorError::UnsafePath {
                path: rel_path.to_string(),
            });
        }
        Ok(self.root.join(rel))
    }

    fn open_rel(&self, rel_path: &str) -> Result<(PathBuf, File), MirrorError> {
        let path = self.safe_path(rel_path)?;
        let file = crate::portable::private_open(OpenOptions::new().read(true), FILE_MODE)
            .open(&path)
            .map_err(io_err(&path))?;
        Ok((path, file))
    }

    /// Whether the file's SHA-256 equals `sha256_hex` (case-insensitive). A malformed digest
    /// simply does not match; a missing file is an error (see [`MirrorError::is_not_found`]).
    pub fn verify(&self, rel_path: &str, sha256_hex: &str) -> Result<bool, MirrorError> {
        Ok(self.open_verified(rel_path, sha256_hex)?.is_some())
    }

    /// Size in bytes of a file under the root (not following a symlink), with
    /// the same path checks as [`Mirror::read`].
    pub fn file_len(&self, rel_path: &str) -> Result<u64, MirrorError> {
        let path = self.safe_path(rel_path)?;
        let meta = std::fs::symlink_metadata(&path).map_err(io_err(&path))?;
        Ok(meta.len())
    }

    /// Whether the accepted result `rel_path` is there with the size its
    /// completion recorded (`recorded`; `None`: any size): one stat, no read,
    /// so that a rerun can look at every unchanged document's result. An
    /// alteration that keeps the size is left to the checksum (`doctor`).
    ///
    /// The path is checked as written, not resolved (a resolution cost a
    /// `readlink` per component, most of a rerun's time): a stat reads
    /// nothing and deletes nothing, and the final component is not followed,
    /// so a link put in place of the result counts as damage.
    pub fn stat_result(&self, rel_path: &str, recorded: Option<u64>) -> Result<ResultFile, MirrorError> {
        self.result_file(rel_path, recorded, |path| crate::portable::stat_path(path, false))
    }

    /// [`Mirror::stat_result`] for results one after another (a rerun's, in
    /// the order of their ids): `stats` keeps the shard directory of the last
    /// one open, so a stat resolves the file's name alone.
    pub fn stat_result_with(
        &self,
        stats: &mut crate::portable::Stats,
        rel_path: &str,
        recorded: Option<u64>,
    ) -> Result<ResultFile, MirrorError> {
        self.result_file(rel_path, recorded, |path| stats.stat(path, false))
    }

    /// What `stat` (not following a link at the end) tells of the result.
    fn result_file(
        &self,
        rel_path: &str,
        recorded: Option<u64>,
        stat: impl FnOnce(&Path) -> io::Result<crate::portable::FileStat>,
    ) -> Result<ResultFile, MirrorError> {
        let path = self.joined(rel_path)?;
        let found = match stat(&path) {
            Ok(meta) => meta.len,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ResultFile::Missing),
            Err(e) => return Err(io_err(&path)(e)),
        };
        Ok(match recorded {
            Some(recorded) if recorded != found => ResultFile::Resized { found, recorded },
            _ => ResultFile::Present,
        })
    }

    /// A file under the root, open for reading, with the same path checks
    /// as [`Mirror::read`]: a result's text streamed without holding it all.
    pub(crate) fn open_result(&self, rel_path: &str) -> Result<File, MirrorError> {
        Ok(self.open_rel(rel_path)?.1)
    }

    /// Contents of a file under the root.
    pub fn read(&self, rel_path: &str) -> Result<Vec<u8>, MirrorError> {
        let (path, mut file) = self.open_rel(rel_path)?;
        let mut out = Vec::new();
        file.read_to_end(&mut out).map_err(io_err(&path))?;
        Ok(out)
    }

    /// A file under the root, checked against its SHA-256 and rewound, so that
    /// a caller can stream one result (`leasehold show`) without holding it
    /// all in memory; `None` if it does not match. The same path checks as
    /// [`Mirror::read`].
    pub fn open_verified(&self, rel_path: &str, sha256_hex: &str) -> Result<Option<File>, MirrorError> {
        use std::io::Seek;
        let (path, mut file) = self.open_rel(rel_path)?;
        if !crate::digest::sha256_hex(&mut file)
            .map_err(io_err(&path))?
            .eq_ignore_ascii_case(sha256_hex)
        {
            return Ok(None);
        }
        file.rewind().map_err(io_err(&path))?;
        Ok(Some(file))
    }

    /// The document a mirror file (a path relative to the root, in either layout) belongs to,
    /// if it is where that document's files go.
    pub fn doc_id_of(rel_path: &str) -> Option<i64> {
        let mut parts = rel_path.splitn(4, '/');
        let (top, mid, third) = (parts.next()?, parts.next()?, parts.next()?);
        let shard = format!("{top}/{mid}");
        let id = layout::entry_id(third).filter(|&id| shard_rel(id).ok().as_deref() == Some(shard.as_str()));
        id.or_else(|| {
            let id = layout::canonical_number(third)?;
            (legacy_doc_rel(id).ok()? == format!("{shard}/{third}")).then_some(id)
        })
    }

    /// Relative paths of the document's files (generations, temps and unknown entries named
    /// after it) in its shard, then those of its legacy directory except `.lock`, each sorted
    /// by name; empty if there are none.
    pub fn list_doc_files(&self, job_id: i64) -> Result<Vec<String>, MirrorError> {
        let shard = shard_rel(job_id)?;
        let legacy = legacy_doc_rel(job_id)?;
        let mut out: Vec<String> = scan_shard_doc(&self.root.join(&shard), job_id)?
            .into_iter()
            .map(|(name, _)| format!("{shard}/{name}"))
            .collect();
        out.extend(
            scan_legacy_doc(&self.root.join(&legacy))?
                .into_iter()
                .filter(|(_, kind)| *kind != Kind::Lock)
                .map(|(name, _)| format!("{legacy}/{name}")),
        );
        Ok(out)
    }
}
