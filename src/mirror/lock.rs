//! The shard's `.lock` (and a legacy document directory's): writers hold it shared around
//! their temp write and rename, a cleanup exclusive for its few file operations (DESIGN §5).
//!
//! No wait on it is unbounded: a process stopped (SIGSTOP, a debugger) while it
//! holds the lock would otherwise stall every other process that touches the
//! same shard. Locks are taken without blocking, retried with a short sleep
//! until a deadline, and then given up with [`MirrorError::LockBusy`]; each
//! caller decides what giving up means (a cleanup is skipped and counted, a
//! write is handed back).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use super::error::MirrorError;
use super::layout::{create_private_dirs, io_err};
use super::layout::{FILE_MODE, LOCK_NAME};

/// How often a locker retries when the `.lock` it locked was removed by a pruning sweep.
pub(super) const LOCK_ATTEMPTS: usize = 64;
/// Longest a write waits for its shard's lock. Only a cleanup holds it exclusive, for a
/// few file deletions; a holder slower than this is stopped or stuck, and the write is handed
/// back ([`MirrorError::LockBusy`]) rather than stalling its worker.
pub const WRITE_LOCK_WAIT: Duration = Duration::from_secs(2);
/// Longest a cleanup (or `gc`, or doctor's dry run) waits for a shard's lock. Writers hold
/// it shared for a temp write and a rename, which may be long for a large text; a cleanup that cannot get it is skipped,
/// and its leftovers go at the next cleanup of that document or the next `gc`.
pub const CLEANUP_LOCK_WAIT: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy)]
pub(super) enum LockMode {
    Shared,
    Exclusive,
}

/// Whether the `.lock` path still names the inode we locked. A pruning sweep may unlink `.lock`
/// (and the directory) while we wait; a lock on the unlinked inode would protect nothing.
pub(super) fn still_current(file: &File, lock_path: &Path) -> Result<bool, MirrorError> {
    let held = file.metadata().map_err(io_err(lock_path))?;
    match fs::symlink_metadata(lock_path) {
        // Without device and inode numbers (Windows) the name is taken to be the file: an open
        // file there cannot be unlinked from under its handle by a sweep that takes the lock.
        Ok(now) => Ok(crate::portable::same_file(&now, &held).unwrap_or(true)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(lock_path)(e)),
    }
}

pub(super) fn open_lock_file(lock_path: &Path, create: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    crate::portable::private_open(opts.read(true), FILE_MODE);
    if create {
        opts.write(true).create(true);
    }
    let file = opts.open(lock_path)?;
    if create {
        // The umask may have stripped bits from a new file (or an older one was made
        // under a laxer rule): the lock file is exactly 0600 whoever made it.
        let mode = crate::portable::mode_of(&file.metadata()?);
        if mode.is_some_and(|mode| mode != FILE_MODE) {
            crate::portable::set_file_mode(&file, FILE_MODE)?;
        }
    }
    Ok(file)
}

/// First sleep between two tries of a busy lock; it doubles up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(1);
/// Longest sleep between two tries: a lock freed is seen within this.
const MAX_POLL: Duration = Duration::from_millis(20);

/// Takes the lock without ever blocking in the kernel: tries, sleeps a little,
/// tries again until `deadline`. `Ok(false)` means still held by someone else at
/// the deadline.
pub(super) fn apply_lock(file: &File, mode: LockMode, deadline: Instant) -> io::Result<bool> {
    let mut pause = FIRST_POLL;
    loop {
        // fs2 called explicitly: std::fs::File has inherent lock methods that would win otherwise.
        let tried = match mode {
            LockMode::Shared => fs2::FileExt::try_lock_shared(file),
            LockMode::Exclusive => fs2::FileExt::try_lock_exclusive(file),
        };
        match tried {
            Ok(()) => return Ok(true),
            Err(e) if is_contended(&e) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(MAX_POLL);
    }
}

/// The answer of a non-blocking flock on a lock someone else holds.
fn is_contended(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == fs2::lock_contended_error().raw_os_error()
}

/// Creates a shard directory (retry-safe against concurrent pruning) and refuses a symlink.
/// Looks before it creates: the directory is usually there already (the shard's other
/// documents), and a `mkdir` would take the parent directory's lock in the kernel.
pub(super) fn create_dir(dir: &Path) -> Result<bool, MirrorError> {
    if dir_exists(dir)? {
        return Ok(true);
    }
    match create_private_dirs(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err(dir)(e)),
    }
    dir_exists(dir)
}

/// True for a real directory, false when nothing is there; anything else (a symlink, a file)
/// is refused.
pub(super) fn dir_exists(dir: &Path) -> Result<bool, MirrorError> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => Ok(true),
        Ok(_) => Err(MirrorError::UnsafePath {
            path: dir.display().to_string(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(dir)(e)),
    }
}

/// Locks the `.lock` of `dir` (a shard, or a legacy document directory), waiting at most `wait` in all. Returns `None` only when
/// `create` is false and there is no `.lock` (dry runs must not create files); a lock still
/// held by another process after `wait` is [`MirrorError::LockBusy`]. The returned file holds
/// the lock until dropped.
pub(super) fn lock_dir(
    dir: &Path,
    mode: LockMode,
    create: bool,
    wait: Duration,
) -> Result<Option<File>, MirrorError> {
    let lock_path = dir.join(LOCK_NAME);
    let deadline = Instant::now() + wait;
    for _ in 0..LOCK_ATTEMPTS {
        if create && !create_dir(dir)? {
            continue;
        }
        let file = match open_lock_file(&lock_path, create) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(&lock_path)(e)),
        };
        match apply_lock(&file, mode, deadline) {
            Ok(true) => {}
            Ok(false) => {
                return Err(MirrorError::LockBusy {
                    path: lock_path,
                    waited: wait,
                })
            }
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
