//! Stat'ing many files directory by directory: what a rerun does for every
//! source file and every accepted result.
//!
//! A stat of a joined path has the kernel resolve every component of it
//! again, and over an unchanged tree those lookups were most of a rerun's
//! time. On Linux, macOS and FreeBSD (the systems whose `stat` fields are
//! named as read here) the files of one directory are stat'ed with `fstatat` on
//! the directory's descriptor, so only the file's own name is resolved; the
//! descriptor is kept while the files come from the same directory (a walk
//! in order, results in the order of their ids). Anywhere else, under
//! [`super::switch::forced`], or when that call fails for any reason, the joined
//! path is stat'ed as before, so errors read the same on every path.

use std::io;
use std::path::{Path, PathBuf};

mod file_stat;
pub use file_stat::FileStat;

/// Stats files given by full path, keeping the last directory open for the
/// ones that follow in it.
#[derive(Default)]
pub struct Stats {
    dir: Option<OpenDir>,
}

/// A directory and its descriptor (`None` where `fstatat` is not used, or
/// when it could not be opened: its files are then stat'ed by path).
struct OpenDir {
    path: PathBuf,
    fd: Option<std::fs::File>,
}

/// One stat of `path` by its whole path, following a symbolic link at its
/// end when `follow` (as `std::fs::metadata`) or not (as
/// `std::fs::symlink_metadata`): for a file looked at alone, where opening
/// its directory first would cost more than it saves.
pub fn stat_path(path: &Path, follow: bool) -> io::Result<FileStat> {
    let m = if follow {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    };
    m.map(|m| FileStat::of(&m))
}

impl Stats {
    /// [`stat_path`] of `path`, through its directory's descriptor when the
    /// last file was in the same directory (or opening it for the next ones).
    pub fn stat(&mut self, path: &Path, follow: bool) -> io::Result<FileStat> {
        let by_path = || stat_path(path, follow);
        let Some((parent, name)) = dir_and_name(path) else {
            return by_path();
        };
        if super::switch::forced() {
            return by_path();
        }
        let dir = self.in_dir(parent);
        match dir.fd.as_ref().and_then(|fd| at::stat_at(fd, name, follow)) {
            Some(found) => Ok(found),
            None => by_path(),
        }
    }

    /// The open directory `parent`, opening it when the last one was another.
    fn in_dir(&mut self, parent: &Path) -> &OpenDir {
        // Compared as bytes: a comparison of `Path`s parses both into components.
        if self
            .dir
            .as_ref()
            .is_none_or(|d| d.path.as_os_str() != parent.as_os_str())
        {
            self.dir = Some(OpenDir {
                path: parent.to_path_buf(),
                fd: at::open_dir(parent),
            });
        }
        self.dir.as_ref().expect("set above")
    }
}

/// `path`'s directory and its own name, cut at its last separator: a rerun
/// asks this of every file, and `Path::parent` with `Path::file_name` parse
/// the whole path into components each time. A name that is empty, `.` or
/// `..`, a directory that would be empty, end in a separator or in `/.`,
/// is left to `Path`'s own parsing; what is cut is the bytes `Path` gives
/// (the open directory is kept while the next path's directory is the same
/// bytes).
#[cfg(unix)]
fn dir_and_name(path: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let cut = bytes.iter().rposition(|&b| b == b'/');
    let simple = cut.filter(|&at| {
        let (dir, name) = (&bytes[..at], &bytes[at + 1..]);
        !dir.is_empty()
            && !dir.ends_with(b"/")
            && !dir.ends_with(b"/.")
            && !matches!(name, b"" | b"." | b"..")
    });
    match simple {
        Some(at) => Some((
            Path::new(std::ffi::OsStr::from_bytes(&bytes[..at])),
            std::ffi::OsStr::from_bytes(&bytes[at + 1..]),
        )),
        None => path.parent().zip(path.file_name()),
    }
}

/// Elsewhere every stat goes by path, so `Path`'s parsing is kept.
#[cfg(not(unix))]
fn dir_and_name(path: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    path.parent().zip(path.file_name())
}

/// `fstatat` on a directory's descriptor (`stat/at.rs`) on the systems whose
/// `stat` fields are named as read there; elsewhere every stat is by path
/// (`stat/at_none.rs`).
#[cfg_attr(
    not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd"
    )),
    path = "stat/at_none.rs"
)]
mod at;

#[cfg(test)]
mod tests {
    use super::{FileStat, Stats};

    /// `fstatat` itself answers for a one-byte name and for the longest most
    /// file systems allow (255 bytes, still NUL-terminated on the stack), and
    /// declines a name with a NUL in it; a `Stats` would hide a failure here
    /// behind its stat by path.
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd"
    ))]
    #[test]
    fn fstatat_takes_names_up_to_the_longest_and_refuses_a_nul() {
        let dir = tempfile::tempdir().unwrap();
        let longest = "n".repeat(251) + ".txt";
        std::fs::write(dir.path().join("a"), b"one").unwrap();
        std::fs::write(dir.path().join(&longest), b"long").unwrap();
        let fd = super::at::open_dir(dir.path()).expect("the directory opens");
        let at = |name: &str| super::at::stat_at(&fd, std::ffi::OsStr::new(name), false);
        assert_eq!(at("a").map(|m| m.len), Some(3));
        assert_eq!(at(&longest).map(|m| m.len), Some(4));
        assert_eq!(at("a\0b"), None);
        assert_eq!(at("missing"), None);
    }

    /// The cut at the last separator gives the same directory and name,
    /// byte for byte, as `Path`'s own parsing, for plain paths and for the
    /// odd ones it leaves to it.
    #[test]
    fn a_paths_directory_and_name_are_paths_own() {
        let paths = [
            "a/b",
            "/a/b/c.txt",
            "a//b",
            "./x",
            "../x",
            "/x",
            "x",
            "/",
            "",
            "a/b/",
            "a/b/.",
            "a/..",
            "a/./b",
            "s000/04a/218.g000001.txt",
            "dir with space/é.txt",
            "///x",
            "a/b/../c",
            "./a/b",
            "a/./b/c",
        ];
        for p in paths {
            let path = std::path::Path::new(p);
            let bytes =
                |(d, n): (&std::path::Path, &std::ffi::OsStr)| (d.as_os_str().to_owned(), n.to_owned());
            let want = path.parent().zip(path.file_name()).map(bytes);
            assert_eq!(super::dir_and_name(path).map(bytes), want, "{p:?}");
        }
    }

    /// Files, a link and a missing name, stat'ed one after another through
    /// the open directory: the same facts and errors as `std` gives by path.
    #[test]
    fn stats_in_an_open_directory_match_std_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.txt");
        let sub = dir.path().join("sub");
        std::fs::write(&a, b"twelve bytes").unwrap();
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("b.txt"), b"four").unwrap();
        let mut stats = Stats::default();
        for path in [a.clone(), sub.join("b.txt"), a.clone(), sub.clone()] {
            let by_std = FileStat::of(&std::fs::metadata(&path).unwrap());
            assert_eq!(stats.stat(&path, true).unwrap(), by_std, "{path:?}");
        }
        let missing = stats.stat(&sub.join("none"), true).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        #[cfg(unix)]
        {
            let link = sub.join("link");
            std::os::unix::fs::symlink(&a, &link).unwrap();
            let followed = stats.stat(&link, true).unwrap();
            assert_eq!((followed.is_file, followed.len), (true, 12));
            let itself = stats.stat(&link, false).unwrap();
            assert_eq!(itself, FileStat::of(&std::fs::symlink_metadata(&link).unwrap()));
            assert!(!itself.is_file);
        }
    }
}
