//! The write path: temp file (on Linux an unnamed `O_TMPFILE` inode), put in
//! place without replacing (`linkat`, `renameat2(NOREPLACE)`, or link + unlink),
//! then the file's and the directory's fsync, shared with every write finishing
//! at about the same moment.
//! A generation file, once visible, is never replaced.
//!
//! Durability is a group affair ([`crate::group`]): a write is *staged* (bytes in
//! a temp file renamed to the generation's name, not yet durable) and then
//! *synced* together with whatever other writes of this process are waiting. The
//! sync round starts writeback of every file, waits for each file's data, then
//! fsyncs each distinct directory once. On a journalling file system the first
//! wait commits the journal for all of them, so a round of n writes costs about
//! one commit instead of 2n. Every file and every directory is still fsynced, so
//! this holds on any POSIX file system. A staged file is not yet a result: nothing
//! accepts it before its round says it is durable, and a crash before that leaves
//! a generation file nobody accepted, which cleanup removes like any stale one.

#[cfg(target_os = "linux")]
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

use super::error::MirrorError;
#[cfg(target_os = "linux")]
use super::layout::cstring;
use super::layout::{io_err, new_file, temp_stem, unique_suffix};
use super::lock::WRITE_LOCK_WAIT;
use super::lock::{create_dir, lock_dir, LockMode};
use super::staged::{Staged, SyncResult, Written};
use super::Fencing;
use super::{Fault, Mirror};
use crate::fault::{crash_point, stop_point, CrashPoint, StopPoint};

/// How often temp creation retries on a (practically impossible) name collision.
const TEMP_ATTEMPTS: usize = 16;

/// Renames without ever replacing `to`: a stale claim must not clobber a generation that exists.
/// Uses renameat2(RENAME_NOREPLACE) on Linux ([`crate::portable::fast`]); elsewhere, and where
/// the file system lacks it, a hard link (which refuses an existing name) and an unlink.
pub(super) fn rename_noreplace(from: &Path, to: &Path) -> Result<(), MirrorError> {
    #[cfg(target_os = "linux")]
    if crate::portable::fast() {
        return renameat2_noreplace(from, to);
    }
    link_then_unlink(from, to)
}

#[cfg(target_os = "linux")]
fn renameat2_noreplace(from: &Path, to: &Path) -> Result<(), MirrorError> {
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

pub(super) fn link_then_unlink(from: &Path, to: &Path) -> Result<(), MirrorError> {
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

/// Set when an unnamed write could not be done here (`Mirror::stage_unnamed`),
/// so the writes after it go straight to the named temp file.
#[cfg(target_os = "linux")]
static UNNAMED_UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// Creates the temp file for a write; O_EXCL + O_NOFOLLOW so nothing pre-planted is reused.
pub(super) fn create_temp(dir: &Path, job_id: i64, fence: i64) -> Result<(PathBuf, File), MirrorError> {
    let stem = temp_stem(job_id, fence);
    let mut attempt = 0;
    loop {
        let path = dir.join(format!("{stem}{}", unique_suffix()));
        match new_file(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < TEMP_ATTEMPTS => {
                attempt += 1;
            }
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
}

impl Mirror {
    /// Writes generation `fence` of `job_id` durably and atomically, never replacing an existing
    /// generation. On error no temp file is left and no new generation file is visible.
    /// Equal to [`Mirror::stage`] then [`Mirror::sync`].
    pub fn write(&self, job_id: i64, fence: i64, bytes: &[u8]) -> Result<Written, MirrorError> {
        let staged = self.stage(job_id, fence, bytes)?;
        let answer = self.sync(vec![staged]).pop();
        answer.unwrap_or_else(|| {
            Err(io_err(&self.root)(io::Error::other(
                "the sync round gave no answer",
            )))
        })
    }

    /// First half of [`Mirror::write`]: the bytes in a temp file renamed to generation `fence`'s
    /// name, not yet durable. Never replaces an existing generation; on error no temp file is
    /// left and nothing new is visible.
    pub fn stage(&self, job_id: i64, fence: i64, bytes: &[u8]) -> Result<Staged, MirrorError> {
        let rel_path = Self::generation_rel_path(job_id, fence)?;
        let dir = self.doc_dir(job_id)?;
        let final_path = self.root.join(&rel_path);
        let lock = self.lock_for_write(&dir)?;
        stop_point(StopPoint::WriteLockHeld);
        let file = match self.stage_unnamed(&dir, &final_path, bytes)? {
            Some(file) => file,
            None => self.stage_named(&dir, job_id, fence, &final_path, bytes)?,
        };
        // The temp file is gone: from here the generation is the claim's own file.
        drop(lock);
        crash_point(CrashPoint::AfterRename);
        Ok(Staged {
            written: Written {
                rel_path,
                sha256: hex::encode(Sha256::digest(bytes)),
                len: bytes.len() as u64,
            },
            durable: AtomicBool::new(false),
            file,
            dir,
            final_path,
        })
    }

    /// The bytes in a named temp file (`O_EXCL`), renamed to `final_path`
    /// without replacing it; on error the temp file is removed.
    fn stage_named(
        &self,
        dir: &Path,
        job_id: i64,
        fence: i64,
        final_path: &Path,
        bytes: &[u8],
    ) -> Result<File, MirrorError> {
        let (tmp_path, file) = create_temp(dir, job_id, fence)?;
        let staged = self
            .fill_temp(&file, &tmp_path, bytes)
            .and_then(|()| rename_noreplace(&tmp_path, final_path));
        match staged {
            Ok(()) => Ok(file),
            Err(e) => {
                let _ = fs::remove_file(&tmp_path);
                Err(e)
            }
        }
    }

    /// Linux ([`crate::portable::fast`]): the bytes in an `O_TMPFILE` inode
    /// of `dir`, then linked as `final_path` (`linkat` refuses an existing
    /// name, as `RENAME_NOREPLACE` does). `None` when this cannot be done
    /// here (no `O_TMPFILE` on the file system, no `/proc` to name the
    /// inode by): the caller takes the named temp file.
    ///
    /// Why: creating a named file allocates its inode while holding the
    /// directory's lock, and the rename takes that lock again. A shard
    /// directory is shared by every writer of 1,024 consecutive documents,
    /// and on ext4 the allocation can be slow (it skips recently deleted
    /// inodes), so writers queued on the lock. An unnamed inode is
    /// allocated outside it, and the link holds it once. A crash before the
    /// link leaves no file at all.
    fn stage_unnamed(
        &self,
        dir: &Path,
        final_path: &Path,
        bytes: &[u8],
    ) -> Result<Option<File>, MirrorError> {
        #[cfg(target_os = "linux")]
        if crate::portable::fast() && !UNNAMED_UNAVAILABLE.load(Ordering::Relaxed) {
            return self.stage_unnamed_linux(dir, final_path, bytes);
        }
        let _ = (dir, final_path, bytes);
        Ok(None)
    }

    #[cfg(target_os = "linux")]
    fn stage_unnamed_linux(
        &self,
        dir: &Path,
        final_path: &Path,
        bytes: &[u8],
    ) -> Result<Option<File>, MirrorError> {
        use std::os::unix::io::AsRawFd;
        let file = match super::open_unnamed(dir) {
            Ok(file) => file,
            Err(e) if super::unnamed_unsupported(&e) => {
                // The file system has no unnamed inodes: every later write
                // of this process takes the named file.
                UNNAMED_UNAVAILABLE.store(true, Ordering::Relaxed);
                return Ok(None);
            }
            Err(e) => return Err(io_err(dir)(e)),
        };
        crate::portable::set_file_mode(&file, super::layout::FILE_MODE).map_err(io_err(dir))?;
        // The inode has no name yet: errors name the generation it is for.
        self.fill_temp(&file, final_path, bytes)?;
        let by_fd = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).expect("no NUL in a number");
        let to = cstring(final_path)?;
        // SAFETY: both pointers are valid NUL-terminated strings that outlive the call.
        let rc = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                by_fd.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if rc == 0 {
            return Ok(Some(file));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EEXIST) => Err(MirrorError::GenerationExists {
                path: final_path.to_path_buf(),
            }),
            // No /proc (the name by descriptor is missing), a sandbox that
            // refuses it, or a file system that refuses the link: the unnamed
            // inode goes with `file`, and this write takes the named file.
            // Only a missing /proc turns the unnamed path off for good.
            Some(libc::ENOENT | libc::EPERM | libc::EACCES | libc::EXDEV | libc::EOPNOTSUPP)
                if !final_path.exists() =>
            {
                if !Path::new("/proc/self/fd").is_dir() {
                    UNNAMED_UNAVAILABLE.store(true, Ordering::Relaxed);
                }
                Ok(None)
            }
            _ => Err(io_err(final_path)(err)),
        }
    }

    /// With file locks, the shard's lock taken shared, held until the temp
    /// file is renamed: cleanup, which takes it exclusive, can then never
    /// delete a temp file still being written. With row locks, only the shard
    /// directory: cleanup keeps the current claim's temp files (see
    /// [`Mirror::cleanup_held`]).
    fn lock_for_write(&self, dir: &Path) -> Result<Option<File>, MirrorError> {
        match self.fencing {
            Fencing::FileLocks => lock_dir(dir, LockMode::Shared, true, WRITE_LOCK_WAIT)?
                .map(Some)
                .ok_or_else(|| io_err(dir)(io::Error::other("the shard's lock file could not be created"))),
            Fencing::RowLocks => {
                // Shard directories are never pruned under row locks; one more
                // try covers a racing mkdir of the same directory.
                for _ in 0..2 {
                    if create_dir(dir)? {
                        return Ok(None);
                    }
                }
                Err(io_err(dir)(io::Error::other(
                    "the shard directory kept disappearing",
                )))
            }
        }
    }

    /// Second half of [`Mirror::write`]: makes staged writes durable, in one round shared with
    /// whatever else this process is syncing. One answer per write, in order; a write whose
    /// file or directory could not be synced is withdrawn (its file removed) and fails.
    pub fn sync(&self, staged: Vec<Staged>) -> Vec<SyncResult> {
        let n = staged.len();
        if n == 0 {
            return Vec::new();
        }
        let (fault, root) = (self.fault, self.root.as_path());
        match self.syncs.0.submit(staged, |ops| sync_round(ops, root, fault)) {
            Ok(answers) => answers,
            Err(reason) => (0..n)
                .map(|_| Err(io_err(&self.root)(io::Error::other(reason.clone()))))
                .collect(),
        }
    }

    fn fill_temp(&self, mut file: &File, path: &Path, bytes: &[u8]) -> Result<(), MirrorError> {
        if self.fault == Some(Fault::DiskFullOnWrite) {
            return Err(io_err(path)(super::disk_full_error()));
        }
        file.write_all(bytes).map_err(io_err(path))?;
        crash_point(CrashPoint::AfterTempWrite);
        Ok(())
    }
}

/// One sync round over every caller's staged writes; answers one list per caller.
///
/// A round of one write fsyncs its file and its directory. A larger round writes every file's
/// data and waits for it (each file's own write errors are reported on its own descriptor),
/// then makes all of it durable with one `syncfs` of the mirror's file system: the files'
/// inodes, the renames in their directories and one flush of the device's cache, where one
/// fsync per file and per directory would cost a cache flush each. `syncfs` reports a
/// write-back error of the file system (Linux ≥ 5.8), which then fails the whole round.
fn sync_round(
    ops: &[&Vec<Staged>],
    root: &Path,
    fault: Option<Fault>,
) -> Vec<Result<Vec<SyncResult>, String>> {
    let all: Vec<&Staged> = ops.iter().flat_map(|op| op.iter()).collect();
    let results = if all.len() == 1 {
        sync_one(all[0], fault)
    } else {
        sync_many(&all, root, fault)
    };
    let mut results = results.into_iter();
    ops.iter()
        .map(|op| {
            Ok(op
                .iter()
                .map(|s| {
                    let result = results.next().unwrap_or_else(|| {
                        Err(io_err(&s.final_path)(io::Error::other(
                            "no answer in its sync round",
                        )))
                    });
                    result.map(|()| {
                        s.durable.store(true, Ordering::SeqCst);
                        s.written.clone()
                    })
                })
                .collect())
        })
        .collect()
}

/// A round of one: fsync the file, then its directory.
fn sync_one(s: &Staged, fault: Option<Fault>) -> Vec<Result<(), MirrorError>> {
    let file = sync_file(s, fault);
    crash_point(CrashPoint::AfterFsync);
    let done = file.and_then(|()| sync_dir(&s.dir, fault));
    crash_point(CrashPoint::AfterDirFsync);
    vec![done]
}

/// A larger round. On Linux ([`crate::portable::fast`]): every file's data written and waited
/// for, then one `syncfs`. Elsewhere: [`sync_each`].
fn sync_many(all: &[&Staged], root: &Path, fault: Option<Fault>) -> Vec<Result<(), MirrorError>> {
    #[cfg(target_os = "linux")]
    if crate::portable::fast() {
        return sync_many_syncfs(all, root, fault);
    }
    let _ = root;
    sync_each(all, fault)
}

#[cfg(target_os = "linux")]
fn sync_many_syncfs(all: &[&Staged], root: &Path, fault: Option<Fault>) -> Vec<Result<(), MirrorError>> {
    for s in all {
        let _ = range_sync(&s.file, libc::SYNC_FILE_RANGE_WRITE);
    }
    let wait =
        libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    let mut results: Vec<Result<(), MirrorError>> = all
        .iter()
        .map(|s| {
            injected(fault, Fault::FailFsync, &s.final_path)?;
            range_sync(&s.file, wait).map_err(io_err(&s.final_path))
        })
        .collect();
    crash_point(CrashPoint::AfterFsync);
    let synced = injected(fault, Fault::FailDirFsync, root).and_then(|()| sync_file_system(root));
    if let Err(e) = synced {
        for result in results.iter_mut().filter(|r| r.is_ok()) {
            *result = Err(io_err(root)(copy_io_error(&e)));
        }
    }
    crash_point(CrashPoint::AfterDirFsync);
    results
}

/// The portable round: an fsync of every file, then one of each distinct directory; a
/// directory that fails its fsync fails every write renamed into it.
pub(super) fn sync_each(all: &[&Staged], fault: Option<Fault>) -> Vec<Result<(), MirrorError>> {
    let mut results: Vec<Result<(), MirrorError>> = all.iter().map(|s| sync_file(s, fault)).collect();
    crash_point(CrashPoint::AfterFsync);
    let mut dirs: Vec<&Path> = all.iter().map(|s| s.dir.as_path()).collect();
    dirs.sort_unstable();
    dirs.dedup();
    for dir in dirs {
        if let Err(e) = sync_dir(dir, fault) {
            let failed = all.iter().zip(results.iter_mut());
            for (_, result) in failed.filter(|(s, r)| s.dir == dir && r.is_ok()) {
                *result = Err(io_err(dir)(copy_io_error(&e)));
            }
        }
    }
    crash_point(CrashPoint::AfterDirFsync);
    results
}

fn sync_file(s: &Staged, fault: Option<Fault>) -> Result<(), MirrorError> {
    injected(fault, Fault::FailFsync, &s.final_path)?;
    s.file.sync_all().map_err(io_err(&s.final_path))
}

/// The EIO a test injects with `failing` (a failed fsync of a file, or of what
/// makes the names durable), if `fault` is it.
fn injected(fault: Option<Fault>, failing: Fault, path: &Path) -> Result<(), MirrorError> {
    if fault == Some(failing) {
        return Err(io_err(path)(injected_error()));
    }
    Ok(())
}

/// The error a test injects: EIO, or its nearest kind where errno is not the OS's error.
fn injected_error() -> io::Error {
    #[cfg(unix)]
    return io::Error::from_raw_os_error(libc::EIO);
    #[cfg(not(unix))]
    return io::Error::other("input/output error (injected)");
}

/// `sync_file_range` over the whole file with `flags` (a writeback hint and a wait; Linux only).
#[cfg(target_os = "linux")]
fn range_sync(file: &File, flags: libc::c_uint) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor; the call reads no memory of ours.
    let rc = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `syncfs` of the file system holding `root` (Linux only).
#[cfg(target_os = "linux")]
fn sync_file_system(root: &Path) -> Result<(), MirrorError> {
    use std::os::fd::AsRawFd;
    let dir = File::open(root).map_err(io_err(root))?;
    // SAFETY: a valid open descriptor.
    let rc = unsafe { libc::syncfs(dir.as_raw_fd()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io_err(root)(io::Error::last_os_error()))
    }
}

/// The same operating-system error again, for every write of a round whose `syncfs` failed.
fn copy_io_error(e: &MirrorError) -> io::Error {
    match e {
        MirrorError::Io { source, .. } => match source.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(source.kind(), source.to_string()),
        },
        other => io::Error::other(other.to_string()),
    }
}

/// Makes a rename durable; without it a crash could lose an accepted generation.
fn sync_dir(dir: &Path, fault: Option<Fault>) -> Result<(), MirrorError> {
    injected(fault, Fault::FailDirFsync, dir)?;
    crate::portable::sync_dir(dir).map_err(io_err(dir))
}
