//! Opening a file below a directory with the kernel's promise that the path
//! never resolves outside it: Linux's `openat2` with `RESOLVE_BENEATH`. One
//! call does what a source otherwise does in three steps per document
//! (resolve every component with `realpath`, open the result without
//! following a last link, ask `/proc` what was opened), and a directory
//! swapped for a link meanwhile cannot lead out. Anything it cannot decide
//! (another system, the portable switch, a kernel or sandbox without the call,
//! a link it refuses to cross) is left to the caller's own resolution.

use std::fs::File;
use std::path::Path;

/// Opens `rel` below the directory `dir` read-only, non-blocking (a FIFO
/// returns at once) and close-on-exec, following links only while they stay
/// below `dir`. `None`: not opened this way, for whatever reason; the caller
/// resolves and opens the path itself, which also gives the errors their
/// usual wording.
#[cfg(target_os = "linux")]
pub fn open_beneath(dir: &File, rel: &Path) -> Option<File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Set when the kernel (or a sandbox) does not know the call.
    static UNAVAILABLE: AtomicBool = AtomicBool::new(false);
    if !super::switch::fast() || UNAVAILABLE.load(Ordering::Relaxed) {
        return None;
    }
    let name = std::ffi::CString::new(rel.as_os_str().as_bytes()).ok()?;
    // SAFETY: `open_how` is plain integers, for which all zeros is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `dir` is an open descriptor, `name` a NUL-terminated string and
    // `how` an initialised `open_how` of the size passed; the call writes
    // nothing through them.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd >= 0 {
        // SAFETY: the call returned a new descriptor that nothing else owns.
        return Some(unsafe { File::from_raw_fd(fd as i32) });
    }
    // No openat2 (an older kernel), or a sandbox that refuses syscalls it
    // does not know with EPERM (older container profiles): the old path for
    // good, rather than a failed call per document.
    if matches!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOSYS | libc::EPERM)
    ) {
        UNAVAILABLE.store(true, Ordering::Relaxed);
    }
    None
}

/// Every other system resolves the path itself.
#[cfg(not(target_os = "linux"))]
pub fn open_beneath(_dir: &File, _rel: &Path) -> Option<File> {
    None
}

/// The directory `root` opened as a handle to resolve below
/// ([`open_beneath`]): on Linux a path-only descriptor, which needs no read
/// permission; `None` elsewhere or when it cannot be opened.
pub fn open_dir_handle(root: &Path) -> Option<File> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(root)
            .ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = root;
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Read;

    /// Below the root it opens, following a link that stays below; a link
    /// or a `..` that leads out is left to the caller; under the portable
    /// switch nothing is opened this way.
    #[test]
    fn opens_below_the_root_and_leaves_a_way_out_to_the_caller() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), b"inside").unwrap();
        std::fs::write(tmp.path().join("secret.txt"), b"outside").unwrap();
        std::os::unix::fs::symlink("sub/a.txt", root.join("in.txt")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret.txt"), root.join("out.txt")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), root.join("up")).unwrap();
        let dir = open_dir_handle(&root).expect("the root opens as a handle");
        let read = |rel: &str| {
            open_beneath(&dir, Path::new(rel)).map(|mut f| {
                let mut s = String::new();
                f.read_to_string(&mut s).unwrap();
                s
            })
        };
        if !crate::portable::switch::fast() {
            assert_eq!(read("sub/a.txt"), None, "the portable switch is on");
            return;
        }
        assert_eq!(read("sub/a.txt").as_deref(), Some("inside"));
        assert_eq!(read("in.txt").as_deref(), Some("inside"));
        for out in [
            "out.txt",
            "../secret.txt",
            "up/secret.txt",
            "sub/../../secret.txt",
        ] {
            assert_eq!(read(out), None, "{out}");
        }
        assert_eq!(read("missing.txt"), None);
    }
}
