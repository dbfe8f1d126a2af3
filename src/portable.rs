//! The portable paths, and the switch that forces them on Linux.
//!
//! leasehold uses a few Linux-only calls where they make the common case
//! cheaper or safer: `renameat2(RENAME_NOREPLACE)`, `O_TMPFILE`, `syncfs`,
//! `sync_file_range`, `openat2(RESOLVE_BENEATH)`, `/proc`. Each sits behind `cfg(target_os = "linux")`
//! and has a portable fallback that every other system uses (hard link +
//! unlink, a named temp file, one fsync per file and per directory, no
//! writeback hint, no `/proc` answer). Every fast path asks [`fast`] first.
//!
//! `LEASEHOLD_FORCE_PORTABLE=1` in the environment makes [`fast`] false on
//! Linux too, so the fallbacks run (and are tested, in CI) on the system
//! where the fast paths live. It is a test and diagnostic switch, read once
//! per process; it is not meant for production.
//!
//! The small helpers below hide the unix-only parts of `std` (file modes,
//! `O_NOFOLLOW`, device and inode numbers) behind one signature per job, so
//! that a call site reads the same on every system.

use std::fs::{DirBuilder, File, Metadata, OpenOptions};
use std::io;
use std::path::Path;

mod beneath;
mod stat;
mod switch;
pub use beneath::{open_beneath, open_dir_handle};
pub use stat::{stat_path, FileStat, Stats};
pub use switch::{fast, forced, FORCE_PORTABLE_ENV};

/// `FILE_FLAG_OPEN_REPARSE_POINT`: open a symbolic link itself, not its target.
#[cfg(windows)]
const OPEN_REPARSE_POINT: u32 = 0x0020_0000;

/// Opens with `mode` for a file it creates (unix; Windows has no mode bits),
/// refusing to follow a symbolic link at the last component (`O_NOFOLLOW`;
/// on Windows the link itself is opened, never its target), close-on-exec.
pub fn private_open(opts: &mut OpenOptions, mode: u32) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::OpenOptionsExt;
        let _ = mode;
        opts.custom_flags(OPEN_REPARSE_POINT)
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = mode;
        opts
    }
}

/// Creates with `mode` (unix; nothing elsewhere), following links as usual.
pub fn create_mode(opts: &mut OpenOptions, mode: u32) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = mode;
        opts
    }
}

/// Sets exactly `mode` on an open file (the umask may have stripped bits);
/// nothing on a system without mode bits.
pub fn set_file_mode(file: &File, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (file, mode);
        Ok(())
    }
}

/// Sets exactly `mode` on a path; nothing on a system without mode bits.
pub fn set_path_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// The permission bits of a file (`0o7777`), or `None` without mode bits.
pub fn mode_of(meta: &Metadata) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(meta.mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// A directory builder that creates with `mode` (unix).
pub fn dir_builder(mode: u32) -> DirBuilder {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        let mut builder = DirBuilder::new();
        builder.mode(mode);
        builder
    }
    #[cfg(not(unix))]
    {
        let _ = mode;
        DirBuilder::new()
    }
}

/// Whether two metadata describe the same file (device and inode), or
/// `None` where std does not tell (Windows: the file index is unstable API).
pub fn same_file(a: &Metadata, b: &Metadata) -> Option<bool> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(a.dev() == b.dev() && a.ino() == b.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        None
    }
}

/// Fsyncs a directory, so that the names created or renamed in it are
/// durable. Windows cannot open a directory for flushing through std, and
/// NTFS journals its metadata itself: nothing to do there.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// A file name from the bytes [`std::ffi::OsStr::as_encoded_bytes`] gave: any bytes on unix,
/// UTF-8 only elsewhere (std offers no checked way back from Windows' encoding).
pub fn os_string_from_bytes(bytes: Vec<u8>) -> Option<std::ffi::OsString> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        Some(std::ffi::OsString::from_vec(bytes))
    }
    #[cfg(not(unix))]
    {
        String::from_utf8(bytes).ok().map(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_means_linux_and_not_forced() {
        assert_eq!(fast(), cfg!(target_os = "linux") && !forced());
        assert_eq!(forced(), std::env::var(FORCE_PORTABLE_ENV).as_deref() == Ok("1"));
    }

    #[cfg(unix)]
    #[test]
    fn a_private_open_refuses_a_symlink_and_creates_with_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let refused = private_open(OpenOptions::new().read(true), 0o600).open(&link);
        assert!(refused.is_err(), "followed a symlink");
        let new = dir.path().join("new");
        let file = private_open(OpenOptions::new().write(true).create_new(true), 0o600)
            .open(&new)
            .unwrap();
        set_file_mode(&file, 0o600).unwrap();
        assert_eq!(mode_of(&file.metadata().unwrap()), Some(0o600));
        let again = std::fs::metadata(&new).unwrap();
        assert_eq!(same_file(&file.metadata().unwrap(), &again), Some(true));
        assert_eq!(
            same_file(&again, &std::fs::metadata(&target).unwrap()),
            Some(false)
        );
        sync_dir(dir.path()).unwrap();
    }
}
