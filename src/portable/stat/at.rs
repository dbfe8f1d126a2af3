//! `fstatat` on a directory's descriptor, on the systems whose `stat` fields
//! are named as read here (the list is on `mod at` in `stat.rs`).

use super::file_stat::FileStat;
use std::ffi::OsStr;
use std::fs::File;
use std::path::Path;

/// The directory opened for `fstatat`; `None` when it cannot be.
pub(super) fn open_dir(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)
        .ok()
}

/// `fstatat` of `name` in `dir`; `None` when the call failed (the caller
/// stats the path instead).
pub(super) fn stat_at(dir: &File, name: &OsStr, follow: bool) -> Option<FileStat> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    // A name that fits is made NUL-terminated on the stack: a rerun stats
    // every file, and need not allocate for each.
    let bytes = name.as_bytes();
    let mut on_stack = [0u8; 256];
    let owned;
    let name: &std::ffi::CStr = if bytes.len() < on_stack.len() {
        on_stack[..bytes.len()].copy_from_slice(bytes);
        std::ffi::CStr::from_bytes_with_nul(&on_stack[..=bytes.len()]).ok()?
    } else {
        owned = std::ffi::CString::new(bytes).ok()?;
        &owned
    };
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, a NUL-terminated name and a buffer of
    // the size the call writes; it is read only when the call succeeded.
    let st = unsafe {
        if libc::fstatat(dir.as_raw_fd(), name.as_ptr(), st.as_mut_ptr(), flags) != 0 {
            return None;
        }
        st.assume_init()
    };
    Some(FileStat {
        is_file: st.st_mode & libc::S_IFMT == libc::S_IFREG,
        len: u64::try_from(st.st_size).ok()?,
        #[allow(clippy::unnecessary_cast)] // time_t is 32 bits on some systems
        mtime_s: st.st_mtime as i64,
        mtime_ns: u32::try_from(st.st_mtime_nsec).ok()?,
    })
}
