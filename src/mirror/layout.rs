//! Where things live under the mirror root, and the small file-system helpers the
//! write, lock and sweep paths share. Nothing here comes from a document's name:
//! every path derives from the numeric id and the claim's fence.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use super::{MirrorError, DIR_MODE, FILE_MODE, LOCK_NAME, SEQ, TEMP_PREFIX};

pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> MirrorError + '_ {
    move |source| MirrorError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(super) fn check_ids(job_id: i64, fence: i64) -> Result<(), MirrorError> {
    if job_id < 0 || fence < 0 {
        return Err(MirrorError::InvalidId { job_id, fence });
    }
    Ok(())
}

/// Sharded directory of a document relative to the root: at most 1000 entries per level for
/// ids below 10^9 (the top level grows beyond that only for larger ids).
pub(super) fn doc_rel(job_id: i64) -> Result<String, MirrorError> {
    check_ids(job_id, 0)?;
    Ok(format!(
        "{:03}/{:03}/{}",
        job_id / 1_000_000,
        (job_id / 1000) % 1000,
        job_id
    ))
}

pub(super) fn gen_name(fence: i64) -> String {
    format!("g{fence:06}.txt")
}

/// Fence of a generation file name, only if the name is exactly the canonical spelling, so that
/// odd names (extra zeros, signs) are reported as unknown instead of being deleted.
pub(super) fn parse_generation(name: &str) -> Option<i64> {
    let digits = name.strip_prefix('g')?.strip_suffix(".txt")?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let fence: i64 = digits.parse().ok()?;
    (gen_name(fence) == name).then_some(fence)
}

/// Fence of a temp file name (`.tmp-g{fence:06}-{unique}`), for the cleanup
/// that must keep the current claim's temp files (row-lock fencing).
pub(super) fn temp_fence(name: &str) -> Option<i64> {
    let rest = name.strip_prefix(TEMP_PREFIX)?;
    let (digits, _) = rest.split_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Classification of one entry of a document directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Generation(i64),
    Temp,
    Lock,
    Unknown,
}

pub(super) fn classify(name: &str, is_file: bool) -> Kind {
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
pub(super) fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{}-{}-{}", std::process::id(), seq, nanos)
}

/// Creates a new file that cannot be a pre-planted file or symlink, with exactly mode 0600
/// (fchmod afterwards because the umask could otherwise strip bits).
pub(super) fn new_file(path: &Path) -> io::Result<File> {
    let file = crate::portable::private_open(OpenOptions::new().write(true).create_new(true), FILE_MODE)
        .open(path)?;
    crate::portable::set_file_mode(&file, FILE_MODE)?;
    Ok(file)
}

/// Creates `dir` and its missing parents, each exactly 0700 whatever the umask (chmod after
/// mkdir, only on directories made here). A parent that vanished meanwhile (a pruning sweep)
/// is `NotFound`, for the caller to retry.
pub(super) fn create_private_dirs(dir: &Path) -> io::Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|p| fs::symlink_metadata(p).is_err())
        .collect();
    for path in missing.into_iter().rev() {
        match crate::portable::dir_builder(DIR_MODE).create(path) {
            Ok(()) => crate::portable::set_path_mode(path, DIR_MODE)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Removal that tolerates the file being gone already (another cleanup or a human got there first).
pub(super) fn remove_if_present(path: &Path) -> Result<(), MirrorError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(path)(e)),
        _ => Ok(()),
    }
}

/// rmdir that ignores "not empty" and "gone": pruning is opportunistic and races with writers.
pub(super) fn remove_dir_if_empty(path: &Path) -> Result<(), MirrorError> {
    match fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::AlreadyExists | io::ErrorKind::NotFound
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Entries of a directory as (name, is_dir), sorted; symlinks count as non-directories so the
/// walk never leaves the tree. A directory that vanished (pruned concurrently) is empty.
pub(super) fn list_dir(path: &Path) -> Result<Vec<(String, bool)>, MirrorError> {
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
pub(super) fn scan_doc(dir: &Path) -> Result<Vec<(String, Kind)>, MirrorError> {
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

pub(super) fn is_real_dir(path: &Path) -> Result<bool, MirrorError> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.file_type().is_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Shard directory names are decimal digits: exactly 3 for the middle level, at least 3 on top.
pub(super) fn is_shard_name(name: &str, middle: bool) -> bool {
    let len_ok = if middle { name.len() == 3 } else { name.len() >= 3 };
    len_ok && name.bytes().all(|b| b.is_ascii_digit())
}

/// Job id of a leaf directory, only if the whole relative path is exactly where that id lives.
pub(super) fn parse_doc_dir(rel: &str, leaf: &str, is_dir: bool) -> Option<i64> {
    if !is_dir || !leaf.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let job_id: i64 = leaf.parse().ok()?;
    (doc_rel(job_id).ok()? == rel).then_some(job_id)
}
