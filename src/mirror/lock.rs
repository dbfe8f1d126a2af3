//! The per-document `.lock`: writers hold it shared, cleanup exclusive (DESIGN §5).

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::layout::io_err;
use super::{MirrorError, DIR_MODE, FILE_MODE, LOCK_ATTEMPTS, LOCK_NAME};

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
        Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(lock_path)(e)),
    }
}

pub(super) fn open_lock_file(lock_path: &Path, create: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if create {
        opts.write(true).create(true).mode(FILE_MODE);
    }
    opts.open(lock_path)
}

pub(super) fn apply_lock(file: &File, mode: LockMode) -> io::Result<()> {
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
pub(super) fn create_doc_dir(dir: &Path) -> Result<bool, MirrorError> {
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

/// Locks the document's `.lock`. Returns `None` only when `create` is false and there is no
/// `.lock` (dry runs must not create files). The returned file holds the lock until dropped.
pub(super) fn lock_doc(dir: &Path, mode: LockMode, create: bool) -> Result<Option<File>, MirrorError> {
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
