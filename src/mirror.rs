//! Mirror directory: extracted document text stored on disk, one file per claim generation.
//!
//! Several workers (threads and processes) may hold claims on the same document at once; each
//! claim carries a `fence` that grows by one per claim. Every claim therefore writes its own file
//! (`g{fence:06}.txt`), and nothing is ever overwritten: a stale owner can at worst add a file
//! that cleanup later removes, never clobber the accepted result.
//!
//! Layout under the root (nothing comes from a document name, only from the numeric id):
//! `{id/1_000_000:03}/{(id/1000)%1000:03}/{id}/g{fence:06}.txt`, plus `.lock` and transient
//! `.tmp-g{fence:06}-{unique}` files in the document directory.
//!
//! Concurrency: writers hold an fs2 *shared* lock on the document's `.lock` for the whole write
//! (temp creation through rename and directory fsync); cleanup holds it *exclusive* and reads the
//! database row only while holding it. So cleanup never sees a temp file that is still in use, and
//! the row it reads is at least as new as every file already renamed into place.

use std::ffi::CString;
use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::fault::{crash_point, CrashPoint};

const LOCK_NAME: &str = ".lock";
const TEMP_PREFIX: &str = ".tmp-g";
const PROBE_PREFIX: &str = ".probe-";
/// How often a locker retries when the `.lock` it locked was removed by a pruning sweep.
const LOCK_ATTEMPTS: usize = 64;
/// How often temp creation retries on a (practically impossible) name collision.
const TEMP_ATTEMPTS: usize = 16;
const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;

/// Per-process counter so temp/probe names from threads of one process never collide.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// Errors of the mirror. Every variant that concerns a file names it.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("I/O error on {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("generation file already exists: {}", .path.display())]
    GenerationExists { path: PathBuf },
    #[error("unusable mirror root {}: {reason}", .path.display())]
    BadRoot { path: PathBuf, reason: String },
    #[error("unsafe mirror path {path:?}")]
    UnsafePath { path: String },
    /// `fence` is 0 when only a job id was involved.
    #[error("invalid job id {job_id} or fence {fence}: must be >= 0")]
    InvalidId { job_id: i64, fence: i64 },
    /// The row's accepted path is not a generation file of this job: the store may be corrupt,
    /// so cleanup deletes nothing.
    #[error("accepted path {accepted:?} is not a generation of job {job_id}; nothing deleted")]
    ForeignAccepted { job_id: i64, accepted: String },
}

impl MirrorError {
    /// True for ENOSPC / EDQUOT, so callers can stop claiming work instead of retrying.
    pub fn is_disk_full(&self) -> bool {
        match self {
            MirrorError::Io { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
            }
            _ => false,
        }
    }

    /// True when the mirror cannot be written at all right now (read-only file
    /// system, permissions): like a full disk, not the document's fault.
    pub fn is_unwritable(&self) -> bool {
        match self {
            MirrorError::Io { source, .. } => {
                matches!(
                    source.raw_os_error(),
                    Some(libc::EROFS | libc::EACCES | libc::EPERM)
                )
            }
            _ => false,
        }
    }

    /// True when the error is a missing file (e.g. `verify` of a path that was never written).
    pub fn is_not_found(&self) -> bool {
        matches!(self, MirrorError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

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

/// Handle on a mirror root. Cheap to clone; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Mirror {
    root: PathBuf,
    fault: Option<Fault>,
}

/// Result of a successful write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// '/'-separated, relative to the root.
    pub rel_path: String,
    /// Lower-case hex SHA-256 of the bytes written.
    pub sha256: String,
    pub len: u64,
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
    pub removed: Vec<String>,
    pub kept: Vec<String>,
    pub unknown: Vec<String>,
    /// Jobs whose row did not exist: their files were all kept.
    pub missing_rows: Vec<i64>,
}

impl CleanupReport {
    fn merge(&mut self, other: CleanupReport) {
        self.removed.extend(other.removed);
        self.kept.extend(other.kept);
        self.unknown.extend(other.unknown);
        self.missing_rows.extend(other.missing_rows);
    }
}

#[derive(Debug, Clone, Copy)]
enum LockMode {
    Shared,
    Exclusive,
}

/// Classification of one entry of a document directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Generation(i64),
    Temp,
    Lock,
    Unknown,
}

/// How a document cleanup behaves; sweep differs from a single cleanup only here.
#[derive(Debug, Clone, Copy)]
struct CleanOpts {
    dry_run: bool,
    prune: bool,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> MirrorError + '_ {
    move |source| MirrorError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn check_ids(job_id: i64, fence: i64) -> Result<(), MirrorError> {
    if job_id < 0 || fence < 0 {
        return Err(MirrorError::InvalidId { job_id, fence });
    }
    Ok(())
}

/// Sharded directory of a document relative to the root: at most 1000 entries per level for
/// ids below 10^9 (the top level grows beyond that only for larger ids).
fn doc_rel(job_id: i64) -> Result<String, MirrorError> {
    check_ids(job_id, 0)?;
    Ok(format!(
        "{:03}/{:03}/{}",
        job_id / 1_000_000,
        (job_id / 1000) % 1000,
        job_id
    ))
}

fn gen_name(fence: i64) -> String {
    format!("g{fence:06}.txt")
}

/// Fence of a generation file name, only if the name is exactly the canonical spelling, so that
/// odd names (extra zeros, signs) are reported as unknown instead of being deleted.
fn parse_generation(name: &str) -> Option<i64> {
    let digits = name.strip_prefix('g')?.strip_suffix(".txt")?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let fence: i64 = digits.parse().ok()?;
    (gen_name(fence) == name).then_some(fence)
}

fn classify(name: &str, is_file: bool) -> Kind {
    if !is_file {
        return Kind::Unknown;
    }
    if name == LOCK_NAME {
        Kind::Lock
    } else if name.starts_with(TEMP_PREFIX) {
        Kind::Temp
    } else if let Some(fence) = parse_generation(name) {
        Kind::Generation(fence)
    } else {
        Kind::Unknown
    }
}

/// Name suffix unique across processes (pid) and threads (counter), with time against pid reuse.
fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{}-{}-{}", std::process::id(), seq, nanos)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// Creates a new file that cannot be a pre-planted file or symlink, with exactly mode 0600
/// (fchmod afterwards because the umask could otherwise strip bits).
fn new_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

fn cstring(path: &Path) -> Result<CString, MirrorError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| MirrorError::UnsafePath {
        path: path.display().to_string(),
    })
}

/// Renames without ever replacing `to`: a stale claim must not clobber a generation that exists.
/// Uses renameat2(RENAME_NOREPLACE); falls back to link()+unlink where the filesystem lacks it.
fn rename_noreplace(from: &Path, to: &Path) -> Result<(), MirrorError> {
    let (c_from, c_to) = (cstring(from)?, cstring(to)?);
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            c_from.as_ptr(),
            libc::AT_FDCWD,
            c_to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EEXIST) => Err(MirrorError::GenerationExists {
            path: to.to_path_buf(),
        }),
        Some(libc::EINVAL | libc::ENOSYS) => link_then_unlink(from, to),
        _ => Err(io_err(to)(err)),
    }
}

fn link_then_unlink(from: &Path, to: &Path) -> Result<(), MirrorError> {
    match fs::hard_link(from, to) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(MirrorError::GenerationExists {
                path: to.to_path_buf(),
            })
        }
        Err(e) => return Err(io_err(to)(e)),
    }
    fs::remove_file(from).map_err(io_err(from))
}

/// Removal that tolerates the file being gone already (another cleanup or a human got there first).
fn remove_if_present(path: &Path) -> Result<(), MirrorError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(path)(e)),
        _ => Ok(()),
    }
}

/// rmdir that ignores "not empty" and "gone": pruning is opportunistic and races with writers.
fn remove_dir_if_empty(path: &Path) -> Result<(), MirrorError> {
    match fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOTEMPTY | libc::EEXIST | libc::ENOENT)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Entries of a directory as (name, is_dir), sorted; symlinks count as non-directories so the
/// walk never leaves the tree. A directory that vanished (pruned concurrently) is empty.
fn list_dir(path: &Path) -> Result<Vec<(String, bool)>, MirrorError> {
    let rd = match fs::read_dir(path) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(path)(e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(io_err(path))?;
        let ft = entry.file_type().map_err(io_err(&entry.path()))?;
        out.push((entry.file_name().to_string_lossy().into_owned(), ft.is_dir()));
    }
    out.sort();
    Ok(out)
}

/// Classified entries of a document directory, sorted by name. Non-UTF-8 names are unknown.
fn scan_doc(dir: &Path) -> Result<Vec<(String, Kind)>, MirrorError> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(io_err(dir))?;
        let ft = entry.file_type().map_err(io_err(&entry.path()))?;
        let kind = match entry.file_name().to_str() {
            Some(name) => classify(name, ft.is_file()),
            None => Kind::Unknown,
        };
        out.push((entry.file_name().to_string_lossy().into_owned(), kind));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn is_real_dir(path: &Path) -> Result<bool, MirrorError> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.file_type().is_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Whether the `.lock` path still names the inode we locked. A pruning sweep may unlink `.lock`
/// (and the directory) while we wait; a lock on the unlinked inode would protect nothing.
fn still_current(file: &File, lock_path: &Path) -> Result<bool, MirrorError> {
    let held = file.metadata().map_err(io_err(lock_path))?;
    match fs::symlink_metadata(lock_path) {
        Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(lock_path)(e)),
    }
}

fn open_lock_file(lock_path: &Path, create: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if create {
        opts.write(true).create(true).mode(FILE_MODE);
    }
    opts.open(lock_path)
}

fn apply_lock(file: &File, mode: LockMode) -> io::Result<()> {
    // fs2 called explicitly: std::fs::File has inherent lock methods that would win otherwise.
    match mode {
        LockMode::Shared => fs2::FileExt::lock_shared(file),
        LockMode::Exclusive => fs2::FileExt::lock_exclusive(file),
    }
}

/// Creates the document directory (retry-safe against concurrent pruning) and refuses a symlink.
/// Looks before it creates: the directory is usually there already (a cleanup, a later
/// generation), and a `mkdir` would take the shard directory's lock, which every writer of a
/// new document in that shard needs too.
fn create_doc_dir(dir: &Path) -> Result<bool, MirrorError> {
    if dir_exists(dir)? {
        return Ok(true);
    }
    match DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err(dir)(e)),
    }
    dir_exists(dir)
}

/// True for a real directory, false when nothing is there; anything else (a symlink, a file)
/// is refused.
fn dir_exists(dir: &Path) -> Result<bool, MirrorError> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => Ok(true),
        Ok(_) => Err(MirrorError::UnsafePath {
            path: dir.display().to_string(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(dir)(e)),
    }
}

/// Locks the document's `.lock`. Returns `None` only when `create` is false and there is no
/// `.lock` (dry runs must not create files). The returned file holds the lock until dropped.
fn lock_doc(dir: &Path, mode: LockMode, create: bool) -> Result<Option<File>, MirrorError> {
    let lock_path = dir.join(LOCK_NAME);
    for _ in 0..LOCK_ATTEMPTS {
        if create && !create_doc_dir(dir)? {
            continue;
        }
        let file = match open_lock_file(&lock_path, create) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(&lock_path)(e)),
        };
        match apply_lock(&file, mode) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err(&lock_path)(e)),
        }
        if still_current(&file, &lock_path)? {
            return Ok(Some(file));
        }
        if !create {
            return Ok(None);
        }
    }
    Err(io_err(&lock_path)(io::Error::other(
        "lock file kept disappearing (concurrent pruning)",
    )))
}

/// Fence of `accepted` if it is exactly a generation path of `job_id`.
fn accepted_fence(job_id: i64, accepted: &str) -> Result<i64, MirrorError> {
    let foreign = || MirrorError::ForeignAccepted {
        job_id,
        accepted: accepted.to_string(),
    };
    let (dir, name) = accepted.rsplit_once('/').ok_or_else(foreign)?;
    if dir != doc_rel(job_id)? {
        return Err(foreign());
    }
    parse_generation(name).ok_or_else(foreign)
}

/// Report for a document whose row is gone: everything is kept, nothing deleted.
fn report_untouched(job_id: i64, rel_dir: &str, entries: &[(String, Kind)]) -> CleanupReport {
    let mut report = CleanupReport {
        missing_rows: vec![job_id],
        ..CleanupReport::default()
    };
    for (name, kind) in entries {
        let rel = format!("{rel_dir}/{name}");
        match kind {
            Kind::Lock => {}
            Kind::Unknown => report.unknown.push(rel),
            Kind::Generation(_) | Kind::Temp => report.kept.push(rel),
        }
    }
    report
}

fn create_root(root: &Path) -> Result<(), MirrorError> {
    match DirBuilder::new().mode(DIR_MODE).create(root) {
        Ok(()) => Ok(()),
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
/// or immutable attributes only show up when a write is attempted.
fn probe_writable(root: &Path) -> Result<(), MirrorError> {
    let probe = root.join(format!("{PROBE_PREFIX}{}", unique_suffix()));
    let result = new_file(&probe).and_then(|mut f| {
        let written = f.write_all(b"probe").and_then(|()| f.sync_all());
        let removed = fs::remove_file(&probe);
        written.and(removed)
    });
    result.map_err(|e| MirrorError::BadRoot {
        path: root.to_path_buf(),
        reason: format!("not writable (probe {}): {e}", probe.display()),
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
        Ok(Mirror {
            root: canonical,
            fault: None,
        })
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

    /// Absolute directory of a document (it may not exist yet).
    pub fn doc_dir(&self, job_id: i64) -> Result<PathBuf, MirrorError> {
        Ok(self.root.join(doc_rel(job_id)?))
    }

    /// Relative path of a generation file; what [`Mirror::write`] returns for these ids.
    pub fn generation_rel_path(job_id: i64, fence: i64) -> Result<String, MirrorError> {
        check_ids(job_id, fence)?;
        Ok(format!("{}/{}", doc_rel(job_id)?, gen_name(fence)))
    }

    /// Writes generation `fence` of `job_id` durably and atomically, never replacing an existing
    /// generation. On error no temp file is left and no new generation file is visible.
    pub fn write(&self, job_id: i64, fence: i64, bytes: &[u8]) -> Result<Written, MirrorError> {
        let rel_path = Self::generation_rel_path(job_id, fence)?;
        let dir = self.doc_dir(job_id)?;
        // Held (shared) until return: cleanup, which takes it exclusive, can then never delete
        // our temp file nor observe the directory between our rename and its fsync.
        let _lock = lock_doc(&dir, LockMode::Shared, true)?;
        let final_path = self.root.join(&rel_path);
        let (tmp_path, file) = create_temp(&dir, fence)?;
        let staged = self
            .fill_temp(file, &tmp_path, bytes)
            .and_then(|()| rename_noreplace(&tmp_path, &final_path));
        if let Err(e) = staged {
            let _ = fs::remove_file(&tmp_path);
            return Err(e);
        }
        crash_point(CrashPoint::AfterRename);
        if let Err(e) = self.sync_dir(&dir) {
            // Not retried (a failed fsync may have dropped dirty pages); withdraw the file so
            // an error always means "nothing new is visible".
            let _ = fs::remove_file(&final_path);
            return Err(e);
        }
        crash_point(CrashPoint::AfterDirFsync);
        Ok(Written {
            rel_path,
            sha256: hex(&Sha256::digest(bytes)),
            len: bytes.len() as u64,
        })
    }

    fn fill_temp(&self, mut file: File, path: &Path, bytes: &[u8]) -> Result<(), MirrorError> {
        if self.fault == Some(Fault::DiskFullOnWrite) {
            return Err(io_err(path)(io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        file.write_all(bytes).map_err(io_err(path))?;
        crash_point(CrashPoint::AfterTempWrite);
        if self.fault == Some(Fault::FailFsync) {
            return Err(io_err(path)(io::Error::from_raw_os_error(libc::EIO)));
        }
        file.sync_all().map_err(io_err(path))?;
        crash_point(CrashPoint::AfterFsync);
        Ok(())
    }

    /// Makes the rename durable; without it a crash could lose an accepted generation.
    fn sync_dir(&self, dir: &Path) -> Result<(), MirrorError> {
        if self.fault == Some(Fault::FailDirFsync) {
            return Err(io_err(dir)(io::Error::from_raw_os_error(libc::EIO)));
        }
        File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))
    }

    /// Removes stale generations and temp files of one document. The exclusive lock is taken
    /// before `keep` runs, so the row it reads cannot be older than any file on disk. A lookup
    /// error or a missing row deletes nothing. A missing document directory returns an empty
    /// report without calling `keep`.
    pub fn cleanup<E: From<MirrorError>>(
        &self,
        job_id: i64,
        keep: impl FnOnce() -> Result<Option<Keep>, E>,
    ) -> Result<CleanupReport, E> {
        let opts = CleanOpts {
            dry_run: false,
            prune: false,
        };
        self.clean_doc(job_id, opts, keep)
    }

    /// Runs cleanup for every document directory under the root (used by `gc`); stops at the
    /// first error. A dry run reports in `removed` what would be deleted and deletes nothing.
    /// Unrecognised entries are left alone and reported. A real sweep also removes document
    /// directories left empty (and then-empty shard directories).
    pub fn sweep<E: From<MirrorError>>(
        &self,
        dry_run: bool,
        mut keep: impl FnMut(i64) -> Result<Option<Keep>, E>,
    ) -> Result<CleanupReport, E> {
        let (docs, unknown) = self.find_docs()?;
        let mut report = CleanupReport {
            unknown,
            ..CleanupReport::default()
        };
        let opts = CleanOpts {
            dry_run,
            prune: !dry_run,
        };
        for job_id in docs {
            report.merge(self.clean_doc(job_id, opts, || keep(job_id))?);
        }
        Ok(report)
    }

    fn clean_doc<E: From<MirrorError>>(
        &self,
        job_id: i64,
        opts: CleanOpts,
        keep: impl FnOnce() -> Result<Option<Keep>, E>,
    ) -> Result<CleanupReport, E> {
        let dir = self.doc_dir(job_id)?;
        if !is_real_dir(&dir)? {
            return Ok(CleanupReport::default());
        }
        // Lock first, then read the row: see the module docs. A dry run does not create `.lock`.
        let lock = lock_doc(&dir, LockMode::Exclusive, !opts.dry_run)?;
        let keep = keep()?;
        let rel_dir = doc_rel(job_id)?;
        let entries = scan_doc(&dir)?;
        let Some(keep) = keep else {
            return Ok(report_untouched(job_id, &rel_dir, &entries));
        };
        let accepted = match &keep.accepted {
            Some(path) => Some(accepted_fence(job_id, path)?),
            None => None,
        };
        if let Some(fence) = keep.current_fence {
            check_ids(job_id, fence)?;
        }
        let keep_fences = [accepted, keep.current_fence];
        let report = delete_stale(&dir, &rel_dir, &entries, keep_fences, opts.dry_run)?;
        if opts.prune && lock.is_some() && report.kept.is_empty() && report.unknown.is_empty() {
            prune_doc_dir(&dir)?;
        }
        Ok(report)
    }

    /// Job ids of all well-formed document directories, plus every entry that does not fit the
    /// layout (reported, never descended into or deleted).
    fn find_docs(&self) -> Result<(Vec<i64>, Vec<String>), MirrorError> {
        let (mut docs, mut unknown) = (Vec::new(), Vec::new());
        for (top, top_is_dir) in list_dir(&self.root)? {
            if !top_is_dir || !is_shard_name(&top, false) {
                unknown.push(top);
                continue;
            }
            for (mid, mid_is_dir) in list_dir(&self.root.join(&top))? {
                let rel_mid = format!("{top}/{mid}");
                if !mid_is_dir || !is_shard_name(&mid, true) {
                    unknown.push(rel_mid);
                    continue;
                }
                for (leaf, leaf_is_dir) in list_dir(&self.root.join(&rel_mid))? {
                    let rel = format!("{rel_mid}/{leaf}");
                    match parse_doc_dir(&rel, &leaf, leaf_is_dir) {
                        Some(job_id) => docs.push(job_id),
                        None => unknown.push(rel),
                    }
                }
            }
        }
        Ok((docs, unknown))
    }

    /// Validates a caller-supplied relative path: relative, only normal components, and its
    /// canonical form (after symlinks) still inside the root.
    fn safe_path(&self, rel_path: &str) -> Result<PathBuf, MirrorError> {
        let unsafe_path = || MirrorError::UnsafePath {
            path: rel_path.to_string(),
        };
        let rel = Path::new(rel_path);
        if rel_path.is_empty() || rel_path.contains('\0') {
            return Err(unsafe_path());
        }
        if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(unsafe_path());
        }
        let joined = self.root.join(rel);
        let canonical = fs::canonicalize(&joined).map_err(io_err(&joined))?;
        if canonical == self.root || !canonical.starts_with(&self.root) {
            return Err(unsafe_path());
        }
        Ok(canonical)
    }

    fn open_rel(&self, rel_path: &str) -> Result<(PathBuf, File), MirrorError> {
        let path = self.safe_path(rel_path)?;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io_err(&path))?;
        Ok((path, file))
    }

    /// Whether the file's SHA-256 equals `sha256_hex` (case-insensitive). A malformed digest
    /// simply does not match; a missing file is an error (see [`MirrorError::is_not_found`]).
    pub fn verify(&self, rel_path: &str, sha256_hex: &str) -> Result<bool, MirrorError> {
        let (path, mut file) = self.open_rel(rel_path)?;
        let mut hasher = Sha256::new();
        io::copy(&mut file, &mut hasher).map_err(io_err(&path))?;
        Ok(hex(&hasher.finalize()).eq_ignore_ascii_case(sha256_hex))
    }

    /// Contents of a file under the root.
    pub fn read(&self, rel_path: &str) -> Result<Vec<u8>, MirrorError> {
        let (path, mut file) = self.open_rel(rel_path)?;
        let mut out = Vec::new();
        file.read_to_end(&mut out).map_err(io_err(&path))?;
        Ok(out)
    }

    /// Relative paths of every entry in the document directory except `.lock` (generations,
    /// temps and unknown entries), sorted by name; empty if the directory does not exist.
    pub fn list_doc_files(&self, job_id: i64) -> Result<Vec<String>, MirrorError> {
        let rel_dir = doc_rel(job_id)?;
        let entries = scan_doc(&self.root.join(&rel_dir))?;
        Ok(entries
            .into_iter()
            .filter(|(_, kind)| *kind != Kind::Lock)
            .map(|(name, _)| format!("{rel_dir}/{name}"))
            .collect())
    }
}

/// Deletes (unless dry run) every temp and every generation whose fence is not kept.
fn delete_stale(
    dir: &Path,
    rel_dir: &str,
    entries: &[(String, Kind)],
    keep_fences: [Option<i64>; 2],
    dry_run: bool,
) -> Result<CleanupReport, MirrorError> {
    let mut report = CleanupReport::default();
    for (name, kind) in entries {
        let rel = format!("{rel_dir}/{name}");
        match *kind {
            Kind::Lock => continue,
            Kind::Unknown => report.unknown.push(rel),
            Kind::Generation(f) if keep_fences.contains(&Some(f)) => report.kept.push(rel),
            Kind::Generation(_) | Kind::Temp => {
                if !dry_run {
                    remove_if_present(&dir.join(name))?;
                }
                report.removed.push(rel);
            }
        }
    }
    Ok(report)
}

/// Creates the temp file for a write; O_EXCL + O_NOFOLLOW so nothing pre-planted is reused.
fn create_temp(dir: &Path, fence: i64) -> Result<(PathBuf, File), MirrorError> {
    let mut attempt = 0;
    loop {
        let path = dir.join(format!("{TEMP_PREFIX}{fence:06}-{}", unique_suffix()));
        match new_file(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < TEMP_ATTEMPTS => {
                attempt += 1;
            }
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
}

/// Removes a document directory that holds nothing but `.lock`, while we hold its exclusive lock.
/// Safe against waiting lockers because they re-check the `.lock` inode after locking and retry.
fn prune_doc_dir(dir: &Path) -> Result<(), MirrorError> {
    let lock_path = dir.join(LOCK_NAME);
    remove_if_present(&lock_path)?;
    remove_dir_if_empty(dir)?;
    for shard in dir.ancestors().skip(1).take(2) {
        remove_dir_if_empty(shard)?;
    }
    Ok(())
}

/// Shard directory names are decimal digits: exactly 3 for the middle level, at least 3 on top.
fn is_shard_name(name: &str, middle: bool) -> bool {
    let len_ok = if middle { name.len() == 3 } else { name.len() >= 3 };
    len_ok && name.bytes().all(|b| b.is_ascii_digit())
}

/// Job id of a leaf directory, only if the whole relative path is exactly where that id lives.
fn parse_doc_dir(rel: &str, leaf: &str, is_dir: bool) -> Option<i64> {
    if !is_dir || !leaf.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let job_id: i64 = leaf.parse().ok()?;
    (doc_rel(job_id).ok()? == rel).then_some(job_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[derive(Debug)]
    enum TestErr {
        Db,
        Mirror(MirrorError),
    }

    impl From<MirrorError> for TestErr {
        fn from(e: MirrorError) -> Self {
            TestErr::Mirror(e)
        }
    }

    fn setup() -> (tempfile::TempDir, Mirror) {
        let tmp = tempfile::tempdir().unwrap();
        let mirror = Mirror::open(tmp.path().join("mirror")).unwrap();
        (tmp, mirror)
    }

    fn rel(job_id: i64, fence: i64) -> String {
        Mirror::generation_rel_path(job_id, fence).unwrap()
    }

    fn exists(m: &Mirror, rel_path: &str) -> bool {
        m.root().join(rel_path).exists()
    }

    fn temps(m: &Mirror, job_id: i64) -> Vec<String> {
        let files = m.list_doc_files(job_id).unwrap();
        files.into_iter().filter(|f| f.contains("/.tmp-")).collect()
    }

    fn keep(accepted: Option<String>, current_fence: Option<i64>) -> Keep {
        Keep {
            accepted,
            current_fence,
        }
    }

    /// Every file in the whole tree, relative to the root, to prove "nothing deleted".
    fn tree(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    out.push(path.strip_prefix(root).unwrap().display().to_string());
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn layout_is_sharded_by_id() {
        assert_eq!(rel(7, 3), "000/000/7/g000003.txt");
        assert_eq!(rel(1_234_567_890, 42), "1234/567/1234567890/g000042.txt");
        assert_eq!(rel(999_999, 1_234_567), "000/999/999999/g1234567.txt");
        assert_eq!(rel(1_000, 0), "000/001/1000/g000000.txt");
        let (_t, m) = setup();
        assert_eq!(m.doc_dir(5_001_002).unwrap(), m.root().join("005/001/5001002"));
        let w = m.write(5_001_002, 9, b"x").unwrap();
        assert_eq!(w.rel_path, "005/001/5001002/g000009.txt");
        assert!(m.root().join("005/001/5001002/.lock").is_file());
    }

    #[test]
    fn negative_ids_are_rejected() {
        let (_t, m) = setup();
        fn invalid<T>(r: Result<T, MirrorError>) -> bool {
            matches!(r, Err(MirrorError::InvalidId { .. }))
        }
        assert!(invalid(Mirror::generation_rel_path(-1, 0)));
        assert!(invalid(Mirror::generation_rel_path(0, -1)));
        assert!(invalid(m.doc_dir(-5)));
        assert!(invalid(m.write(1, -1, b"x")));
        assert!(invalid(m.write(i64::MIN, 1, b"x")));
        let r = m.cleanup(-1, || Ok::<_, MirrorError>(None));
        assert!(matches!(r, Err(MirrorError::InvalidId { job_id: -1, .. })));
    }

    #[test]
    fn write_returns_sha_mode_and_content() {
        let (_t, m) = setup();
        let bytes = b"extracted text \xe2\x9c\x93";
        let w = m.write(12, 3, bytes).unwrap();
        assert_eq!(w.rel_path, rel(12, 3));
        assert_eq!(w.sha256, hex(&Sha256::digest(bytes)));
        assert_eq!(w.len, bytes.len() as u64);
        let path = m.root().join(&w.rel_path);
        assert_eq!(fs::read(&path).unwrap(), bytes);
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(m.read(&w.rel_path).unwrap(), bytes);
        assert!(temps(&m, 12).is_empty());
    }

    #[test]
    fn sha_of_known_input() {
        let (_t, m) = setup();
        let w = m.write(1, 1, b"abc").unwrap();
        assert_eq!(
            w.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn write_refuses_to_replace_existing_generation() {
        let (_t, m) = setup();
        m.write(4, 5, b"first").unwrap();
        let err = m.write(4, 5, b"second").unwrap_err();
        match &err {
            MirrorError::GenerationExists { path } => {
                assert_eq!(path, &m.root().join(rel(4, 5)))
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("g000005.txt"));
        assert_eq!(m.read(&rel(4, 5)).unwrap(), b"first");
        assert!(temps(&m, 4).is_empty());
        assert_eq!(m.list_doc_files(4).unwrap(), vec![rel(4, 5)]);
    }

    #[test]
    fn fail_fsync_leaves_no_temp_and_no_final() {
        let (_t, m) = setup();
        let m = m.with_fault(Some(Fault::FailFsync));
        let err = m.write(8, 1, b"data").unwrap_err();
        assert!(
            matches!(&err, MirrorError::Io { path, .. } if path.to_string_lossy().contains(".tmp-g000001-"))
        );
        assert!(!err.is_disk_full());
        assert!(m.list_doc_files(8).unwrap().is_empty());
        let m = m.with_fault(None);
        m.write(8, 1, b"data").unwrap();
    }

    #[test]
    fn disk_full_on_write_is_flagged_and_cleaned_up() {
        let (_t, m) = setup();
        let m = m.with_fault(Some(Fault::DiskFullOnWrite));
        let err = m.write(8, 2, b"data").unwrap_err();
        assert!(err.is_disk_full(), "{err}");
        assert!(err.to_string().contains(".tmp-g000002-"), "{err}");
        assert!(m.list_doc_files(8).unwrap().is_empty());
    }

    #[test]
    fn fail_dir_fsync_withdraws_the_final_file() {
        let (_t, m) = setup();
        let m = m.with_fault(Some(Fault::FailDirFsync));
        let err = m.write(9, 2, b"data").unwrap_err();
        assert!(matches!(&err, MirrorError::Io { path, .. } if path == &m.doc_dir(9).unwrap()));
        assert!(m.list_doc_files(9).unwrap().is_empty());
    }

    /// Generations 1..=5, a stale temp and an unknown file in doc 21.
    fn populated() -> (tempfile::TempDir, Mirror, Vec<String>) {
        let (t, m) = setup();
        for fence in 1..=5 {
            m.write(21, fence, format!("gen {fence}").as_bytes()).unwrap();
        }
        let dir = m.doc_dir(21).unwrap();
        fs::write(dir.join(".tmp-g000009-crashed"), b"partial").unwrap();
        fs::write(dir.join("notes.txt"), b"not ours").unwrap();
        let before = tree(m.root());
        (t, m, before)
    }

    #[test]
    fn cleanup_keeps_accepted_and_current_and_removes_the_rest() {
        let (_t, m, _) = populated();
        let r = m
            .cleanup(21, || Ok::<_, TestErr>(Some(keep(Some(rel(21, 2)), Some(4)))))
            .unwrap();
        let d = "000/000/21";
        let expect_removed = [
            ".tmp-g000009-crashed",
            "g000001.txt",
            "g000003.txt",
            "g000005.txt",
        ];
        let expect_removed: Vec<String> = expect_removed.iter().map(|n| format!("{d}/{n}")).collect();
        assert_eq!(r.removed, expect_removed);
        assert_eq!(r.kept, vec![rel(21, 2), rel(21, 4)]);
        assert_eq!(r.unknown, vec![format!("{d}/notes.txt")]);
        let left = m.list_doc_files(21).unwrap();
        assert_eq!(
            left,
            vec![
                format!("{d}/g000002.txt"),
                format!("{d}/g000004.txt"),
                format!("{d}/notes.txt")
            ]
        );
        assert_eq!(m.read(&rel(21, 2)).unwrap(), b"gen 2");
    }

    #[test]
    fn cleanup_with_lookup_error_deletes_nothing() {
        let (_t, m, before) = populated();
        let r = m.cleanup(21, || Err::<Option<Keep>, _>(TestErr::Db));
        assert!(matches!(r, Err(TestErr::Db)));
        assert_eq!(tree(m.root()), before);
    }

    #[test]
    fn cleanup_with_missing_row_deletes_nothing() {
        let (_t, m, before) = populated();
        let r = m.cleanup(21, || Ok::<_, TestErr>(None)).unwrap();
        assert!(r.removed.is_empty());
        assert_eq!(r.missing_rows, vec![21]);
        assert_eq!(r.kept.len(), 6);
        assert_eq!(tree(m.root()), before);
    }

    #[test]
    fn cleanup_refuses_foreign_accepted_path_and_bad_fence() {
        let (_t, m, before) = populated();
        for bad in [rel(22, 2), "../x/g000002.txt".into(), "000/000/21/g2.txt".into()] {
            let r = m.cleanup(21, || Ok::<_, TestErr>(Some(keep(Some(bad.clone()), None))));
            assert!(
                matches!(
                    r,
                    Err(TestErr::Mirror(MirrorError::ForeignAccepted { job_id: 21, .. }))
                ),
                "{bad}: {r:?}"
            );
        }
        let r = m.cleanup(21, || Ok::<_, TestErr>(Some(keep(None, Some(-3)))));
        assert!(matches!(r, Err(TestErr::Mirror(MirrorError::InvalidId { .. }))));
        assert_eq!(tree(m.root()), before);
    }

    #[test]
    fn link_fallback_never_replaces() {
        let (_t, m) = setup();
        let dir = m.root();
        fs::write(dir.join("a"), b"a").unwrap();
        fs::write(dir.join("b"), b"b").unwrap();
        let err = link_then_unlink(&dir.join("a"), &dir.join("b")).unwrap_err();
        assert!(matches!(err, MirrorError::GenerationExists { .. }));
        assert_eq!(fs::read(dir.join("b")).unwrap(), b"b");
        link_then_unlink(&dir.join("a"), &dir.join("c")).unwrap();
        assert!(!dir.join("a").exists());
        assert_eq!(fs::read(dir.join("c")).unwrap(), b"a");
    }

    #[test]
    fn keep_lookup_runs_under_the_exclusive_lock() {
        let (_t, m) = setup();
        m.write(30, 1, b"x").unwrap();
        let lock_path = m.doc_dir(30).unwrap().join(LOCK_NAME);
        let mut called = false;
        m.cleanup(30, || {
            called = true;
            let probe = File::open(&lock_path).unwrap();
            let contended = fs2::FileExt::try_lock_shared(&probe).is_err();
            assert!(contended, "keep() ran without the exclusive lock held");
            Ok::<_, MirrorError>(None)
        })
        .unwrap();
        assert!(called);
        let probe = File::open(&lock_path).unwrap();
        fs2::FileExt::try_lock_exclusive(&probe).expect("lock released after cleanup");
    }

    #[test]
    fn cleanup_of_missing_doc_is_empty_and_skips_lookup() {
        let (_t, m) = setup();
        let r = m.cleanup(99, || -> Result<Option<Keep>, TestErr> {
            panic!("lookup called")
        });
        assert_eq!(r.unwrap(), CleanupReport::default());
        assert!(!m.doc_dir(99).unwrap().exists());
    }

    #[test]
    fn sweep_dry_run_reports_but_deletes_nothing() {
        let (_t, m, _) = populated();
        m.write(2_000_123, 1, b"a").unwrap();
        m.write(2_000_123, 2, b"b").unwrap();
        fs::write(m.root().join("stray.txt"), b"?").unwrap();
        fs::create_dir_all(m.root().join("000/abc")).unwrap();
        let before = tree(m.root());
        let lookup = |id: i64| -> Result<Option<Keep>, TestErr> {
            Ok(match id {
                21 => Some(keep(Some(rel(21, 5)), None)),
                2_000_123 => Some(keep(None, Some(2))),
                _ => panic!("unexpected id {id}"),
            })
        };
        let dry = m.sweep(true, lookup).unwrap();
        assert_eq!(tree(m.root()), before);
        let removed_21 = [1, 2, 3, 4].map(|f| rel(21, f));
        assert!(removed_21.iter().all(|r| dry.removed.contains(r)), "{dry:?}");
        assert!(dry.removed.contains(&rel(2_000_123, 1)));
        assert!(dry
            .removed
            .contains(&"000/000/21/.tmp-g000009-crashed".to_string()));
        assert_eq!(dry.removed.len(), 6);
        for u in ["000/000/21/notes.txt", "000/abc", "stray.txt"] {
            assert!(
                dry.unknown.contains(&u.to_string()),
                "{u} not in {:?}",
                dry.unknown
            );
        }
        let real = m.sweep(false, lookup).unwrap();
        assert_eq!(real, dry);
        assert!(dry.removed.iter().all(|r| !exists(&m, r)));
        assert!(dry.kept.iter().chain(&dry.unknown).all(|r| exists(&m, r)));
    }

    #[test]
    fn sweep_prunes_emptied_doc_dirs_and_writes_still_work() {
        let (_t, m) = setup();
        m.write(3_004_005, 1, b"a").unwrap();
        m.write(7, 1, b"b").unwrap();
        let lookup = |id: i64| -> Result<Option<Keep>, TestErr> {
            Ok(if id == 7 { None } else { Some(Keep::default()) })
        };
        let r = m.sweep(false, lookup).unwrap();
        assert_eq!(r.removed, vec![rel(3_004_005, 1)]);
        assert_eq!(r.missing_rows, vec![7]);
        assert!(!m.root().join("003").exists(), "empty shards should be pruned");
        assert!(exists(&m, &rel(7, 1)));
        m.write(3_004_005, 2, b"c").unwrap();
        assert_eq!(m.read(&rel(3_004_005, 2)).unwrap(), b"c");
    }

    #[test]
    fn unsafe_rel_paths_are_refused() {
        let (tmp, m) = setup();
        let w = m.write(1, 1, b"secret-inside").unwrap();
        fs::write(tmp.path().join("outside.txt"), b"outside").unwrap();
        symlink(
            tmp.path().join("outside.txt"),
            m.root().join("000/000/1/link.txt"),
        )
        .unwrap();
        let escape = format!("{}/../../../../outside.txt", w.rel_path);
        let abs = m.root().join(&w.rel_path).display().to_string();
        for bad in [
            "",
            "/etc/passwd",
            "../outside.txt",
            "./000/000/1/g000001.txt",
            &escape,
            &abs,
        ] {
            let r = m.read(bad);
            assert!(matches!(r, Err(MirrorError::UnsafePath { .. })), "{bad:?}: {r:?}");
            let v = m.verify(bad, &w.sha256);
            assert!(matches!(v, Err(MirrorError::UnsafePath { .. })), "{bad:?}: {v:?}");
        }
        let r = m.read("000/000/1/link.txt");
        assert!(matches!(r, Err(MirrorError::UnsafePath { .. })), "{r:?}");
        let r = m.read("000/000/1/missing.txt").unwrap_err();
        assert!(r.is_not_found() && r.to_string().contains("missing.txt"), "{r}");
    }

    #[test]
    fn verify_compares_sha256() {
        let (_t, m) = setup();
        let w = m.write(2, 1, b"payload").unwrap();
        assert!(m.verify(&w.rel_path, &w.sha256).unwrap());
        assert!(m.verify(&w.rel_path, &w.sha256.to_uppercase()).unwrap());
        assert!(!m.verify(&w.rel_path, &hex(&Sha256::digest(b"other"))).unwrap());
        assert!(!m.verify(&w.rel_path, "not-hex").unwrap());
        fs::write(m.root().join(&w.rel_path), b"tampered").unwrap();
        assert!(!m.verify(&w.rel_path, &w.sha256).unwrap());
    }

    #[test]
    fn open_refuses_symlink_and_regular_file_roots() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        fs::create_dir(&real).unwrap();
        symlink(&real, tmp.path().join("link")).unwrap();
        let r = Mirror::open(tmp.path().join("link"));
        assert!(matches!(&r, Err(MirrorError::BadRoot { reason, .. }) if reason.contains("symlink")));
        fs::write(tmp.path().join("file"), b"").unwrap();
        let r = Mirror::open(tmp.path().join("file"));
        assert!(matches!(&r, Err(MirrorError::BadRoot { reason, .. }) if reason.contains("not a directory")));
        assert!(r.unwrap_err().to_string().contains("file"));
    }

    #[test]
    fn open_creates_root_but_not_its_parent() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Mirror::open(tmp.path().join("new")).unwrap();
        assert_eq!(m.root(), fs::canonicalize(tmp.path().join("new")).unwrap());
        assert!(
            fs::read_dir(m.root()).unwrap().next().is_none(),
            "probe left behind"
        );
        let missing = tmp.path().join("no/such");
        let err = Mirror::open(&missing).unwrap_err();
        assert!(matches!(err, MirrorError::BadRoot { .. }));
        assert!(err.to_string().contains(&missing.display().to_string()), "{err}");
        assert!(!tmp.path().join("no").exists());
    }

    #[test]
    fn open_refuses_unwritable_root() {
        // /proc is a directory no one (root included) can create files in.
        if !Path::new("/proc/self").exists() {
            return;
        }
        let r = Mirror::open("/proc");
        assert!(
            matches!(&r, Err(MirrorError::BadRoot { reason, .. }) if reason.contains("not writable")),
            "{r:?}"
        );
    }

    #[test]
    fn race_writer_vs_cleanup_never_deletes_kept_files() {
        let (_t, m) = setup();
        let job = 77;
        m.write(job, 0, b"gen 0").unwrap();
        for k in 0..1000 {
            let kept = keep(Some(rel(job, k)), Some(k + 1));
            let done = AtomicBool::new(false);
            std::thread::scope(|s| {
                let writer = s.spawn(|| {
                    let r = m.write(job, k + 1, format!("gen {}", k + 1).as_bytes());
                    done.store(true, Ordering::SeqCst);
                    r
                });
                for _ in 0..2 {
                    s.spawn(|| loop {
                        let r = m
                            .cleanup(job, || Ok::<_, MirrorError>(Some(kept.clone())))
                            .unwrap();
                        assert!(!r.removed.contains(&rel(job, k)), "accepted deleted: {r:?}");
                        assert!(!r.removed.contains(&rel(job, k + 1)), "current deleted: {r:?}");
                        assert!(r.removed.iter().all(|p| !p.contains(".tmp-")), "live temp: {r:?}");
                        if done.load(Ordering::SeqCst) {
                            break;
                        }
                    });
                }
                writer.join().unwrap().unwrap();
            });
            assert_eq!(m.read(&rel(job, k)).unwrap(), format!("gen {k}").as_bytes());
            assert_eq!(
                m.read(&rel(job, k + 1)).unwrap(),
                format!("gen {}", k + 1).as_bytes()
            );
            if k > 0 {
                assert!(!exists(&m, &rel(job, k - 1)), "round {k}: stale gen kept");
            }
            assert!(temps(&m, job).is_empty(), "round {k}: temp left");
        }
    }

    #[test]
    fn race_writer_vs_pruning_sweep() {
        let (_t, m) = setup();
        let m = Arc::new(m);
        let done = Arc::new(AtomicBool::new(false));
        let sweeper = {
            let (m, done) = (Arc::clone(&m), Arc::clone(&done));
            std::thread::spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    m.sweep(false, |_| Ok::<_, MirrorError>(Some(Keep::default())))
                        .unwrap();
                }
            })
        };
        for fence in 0..300 {
            m.write(5, fence, b"x")
                .unwrap_or_else(|e| panic!("fence {fence}: {e}"));
        }
        done.store(true, Ordering::SeqCst);
        sweeper.join().unwrap();
    }
}
