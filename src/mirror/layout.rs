//! Where things live under the mirror root, and the small file-system helpers the
//! write, lock and sweep paths share. Nothing here comes from a document's name:
//! every path derives from the numeric id and the claim's fence.
//!
//! The layout (DESIGN §5): shard directories `s{id >> 20:03x}/{(id >> 10) & 0x3ff:03x}/`
//! of 1,024 consecutive ids each, holding the shard's `.lock` and one file per generation,
//! `{id}.g{fence:06}.txt`, and transient `{id}.g{fence:06}.tmp-{unique}` files. Mirrors made
//! before it (`{id/10^6:03}/{(id/10^3)%10^3:03}/{id}/g{fence:06}.txt` with a `.lock` per
//! document, "legacy" here) are read side by side: their accepted results stay readable
//! where they are, and a document's cleanup removes what it has there.
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::error::MirrorError;

/// The lock file of a shard (and of a legacy document directory).
pub(super) const LOCK_NAME: &str = ".lock";
/// What follows a generation's stem (`{id}.g{fence:06}`) in a temp file's name.
pub(super) const TEMP_MARK: &str = ".tmp-";
/// The start of a temp file's name in a legacy document directory.
pub(super) const LEGACY_TEMP_PREFIX: &str = ".tmp-g";
/// The start of the name of the file that checks the root is writable.
pub(super) const PROBE_PREFIX: &str = ".probe-";
/// Files and directories are the owner's alone: results hold documents' text.
pub(super) const FILE_MODE: u32 = 0o600;
/// See [`FILE_MODE`].
pub(super) const DIR_MODE: u32 = 0o700;
/// Per-process counter so temp/probe names from threads of one process never collide.
pub(super) static SEQ: AtomicU64 = AtomicU64::new(0);

/// The path as a C string, for the calls std does not wrap (unix only).
#[cfg(unix)]
pub(super) fn cstring(path: &Path) -> Result<std::ffi::CString, MirrorError> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| MirrorError::UnsafePath {
        path: path.display().to_string(),
    })
}

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

/// Shard directory of a document relative to the root: 1,024 consecutive ids per shard,
/// 1,024 shards under each top directory, so a shard holds at most 1,025 entries (its
/// generations and `.lock`) and 10M documents make 10 top directories.
pub(super) fn shard_rel(job_id: i64) -> Result<String, MirrorError> {
    check_ids(job_id, 0)?;
    let shard = job_id >> SHARD_SHIFT;
    Ok(format!("s{:03x}/{:03x}", shard >> 10, shard & 0x3ff))
}

/// A shard holds the ids that agree above their low `SHARD_SHIFT` bits.
pub(super) const SHARD_SHIFT: u32 = 10;

/// A generation's file name in its shard.
pub(super) fn gen_name(job_id: i64, fence: i64) -> String {
    format!("{job_id}.g{fence:06}.txt")
}

/// The start of a temp file's name for generation `fence` of `job_id`.
pub(super) fn temp_stem(job_id: i64, fence: i64) -> String {
    format!("{job_id}.g{fence:06}{TEMP_MARK}")
}

/// The document id a shard entry's name starts with (`{id}.`), if it starts with one in
/// canonical spelling (no sign, no leading zero).
pub(super) fn entry_id(name: &str) -> Option<i64> {
    let (digits, _) = name.split_once('.')?;
    canonical_number(digits)
}

pub(super) fn canonical_number(digits: &str) -> Option<i64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    (n.to_string() == digits).then_some(n)
}

/// Digits of a fence as [`gen_name`] spells it (at least six, no extra zeros).
fn canonical_fence(digits: &str) -> Option<i64> {
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let fence: i64 = digits.parse().ok()?;
    (format!("{fence:06}") == digits).then_some(fence)
}

/// What an entry of document `job_id` in its shard is (the name starts with `{job_id}.`).
/// Odd spellings (extra zeros, signs) are unknown, so that they are reported, never deleted.
pub(super) fn classify_shard_entry(job_id: i64, name: &str, is_file: bool) -> Kind {
    let Some(rest) = name.strip_prefix(&format!("{job_id}.g")) else {
        return Kind::Unknown;
    };
    if !is_file {
        return Kind::Unknown;
    }
    if let Some(digits) = rest.strip_suffix(".txt") {
        return canonical_fence(digits).map_or(Kind::Unknown, Kind::Generation);
    }
    match rest.split_once(TEMP_MARK) {
        Some((digits, _)) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Kind::Temp(digits.parse().ok())
        }
        _ => Kind::Unknown,
    }
}

/// Fence of `rel` if it is exactly the path of a generation of `job_id`, in either layout.
pub(super) fn generation_of(job_id: i64, rel: &str) -> Option<i64> {
    let (dir, name) = rel.rsplit_once('/')?;
    if dir == shard_rel(job_id).ok()? {
        return match classify_shard_entry(job_id, name, true) {
            Kind::Generation(fence) => Some(fence),
            _ => None,
        };
    }
    if dir == legacy_doc_rel(job_id).ok()? {
        return legacy_generation(name);
    }
    None
}

/// Classification of one entry of a document's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Generation(i64),
    /// A temp file, with its fence when the name spells one.
    Temp(Option<i64>),
    Lock,
    Unknown,
}

/// Directory of a document in the layout before shards (legacy), relative to the root.
pub(super) fn legacy_doc_rel(job_id: i64) -> Result<String, MirrorError> {
    check_ids(job_id, 0)?;
    Ok(format!(
        "{:03}/{:03}/{}",
        job_id / 1_000_000,
        (job_id / 1000) % 1000,
        job_id
    ))
}

/// Fence of a legacy generation file name (`g{fence:06}.txt`), canonical spelling only.
pub(super) fn legacy_generation(name: &str) -> Option<i64> {
    canonical_fence(name.strip_prefix('g')?.strip_suffix(".txt")?)
}

/// Fence of a legacy temp file name (`.tmp-g{fence:06}-{unique}`).
pub(super) fn legacy_temp_fence(name: &str) -> Option<i64> {
    let rest = name.strip_prefix(LEGACY_TEMP_PREFIX)?;
    let (digits, _) = rest.split_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Classification of an entry of a legacy document directory.
pub(super) fn classify_legacy(name: &str, is_file: bool) -> Kind {
    if !is_file {
        return Kind::Unknown;
    }
    if name == LOCK_NAME {
        Kind::Lock
    } else if name.starts_with(LEGACY_TEMP_PREFIX) {
        Kind::Temp(legacy_temp_fence(name))
    } else if let Some(fence) = legacy_generation(name) {
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
    removed(path).map(drop)
}

/// Removes the file at `path`; whether it was there to remove.
pub(super) fn removed(path: &Path) -> Result<bool, MirrorError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(path)(e)),
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
    let Some(rd) = read_dir_if_present(path)? else {
        return Ok(Vec::new());
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

/// The entries of `dir`; `None` when it does not exist (yet, or any more: pruned
/// concurrently).
pub(super) fn read_dir_if_present(dir: &Path) -> Result<Option<fs::ReadDir>, MirrorError> {
    match fs::read_dir(dir) {
        Ok(rd) => Ok(Some(rd)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(dir)(e)),
    }
}

/// Classified entries of a legacy document directory, sorted by name; a name that is not
/// UTF-8 is nobody's file of ours (unknown). A directory that vanished (pruned
/// concurrently) is empty.
pub(super) fn scan_legacy_doc(dir: &Path) -> Result<Vec<(String, Kind)>, MirrorError> {
    let Some(rd) = read_dir_if_present(dir)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(io_err(dir))?;
        let raw = entry.file_name();
        let is_file = entry.file_type().map_err(io_err(&entry.path()))?.is_file();
        let kind = match raw.to_str() {
            Some(name) => classify_legacy(name, is_file),
            None => Kind::Unknown,
        };
        out.push((raw.to_string_lossy().into_owned(), kind));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Classified entries of document `job_id` in its shard directory (the names that start
/// with `{job_id}.`), sorted by name; the other documents' entries are not looked at.
pub(super) fn scan_shard_doc(shard: &Path, job_id: i64) -> Result<Vec<(String, Kind)>, MirrorError> {
    let prefix = format!("{job_id}.");
    // Only this document's names are kept (and have their type read): a
    // shard holds up to a thousand documents' files.
    Ok(ShardListing::read_only(shard, |name| name.starts_with(prefix.as_bytes()))?.doc(job_id))
}

/// A shard directory's entries read once, to answer for several of its documents (a
/// batch's cleanups: its consecutive ids share a shard).
pub(super) struct ShardListing {
    /// `(name, is a file, the name is UTF-8)`, sorted by name; a name that is not
    /// UTF-8 is kept lossily, and is nobody's file of ours (unknown).
    entries: Vec<(String, bool, bool)>,
}

impl ShardListing {
    /// Lists `shard`; a shard that does not exist (yet, or any more) is empty.
    pub(super) fn read(shard: &Path) -> Result<ShardListing, MirrorError> {
        Self::read_only(shard, |_| true)
    }

    /// Lists the entries of `shard` whose raw name `keep` takes.
    fn read_only(shard: &Path, keep: impl Fn(&[u8]) -> bool) -> Result<ShardListing, MirrorError> {
        let Some(rd) = read_dir_if_present(shard)? else {
            return Ok(ShardListing { entries: Vec::new() });
        };
        let mut entries = Vec::new();
        for entry in rd {
            let entry = entry.map_err(io_err(shard))?;
            if !keep(entry.file_name().as_encoded_bytes()) {
                continue;
            }
            let is_file = entry.file_type().map_err(io_err(&entry.path()))?.is_file();
            let (name, utf8) = match entry.file_name().into_string() {
                Ok(name) => (name, true),
                Err(raw) => (raw.to_string_lossy().into_owned(), false),
            };
            entries.push((name, is_file, utf8));
        }
        entries.sort_unstable();
        Ok(ShardListing { entries })
    }

    /// Document `job_id`'s entries (the names that start with `{job_id}.`),
    /// classified, sorted by name, as they were when the shard was listed.
    pub(super) fn doc(&self, job_id: i64) -> Vec<(String, Kind)> {
        let prefix = format!("{job_id}.");
        let start = self
            .entries
            .partition_point(|(n, _, _)| n.as_str() < prefix.as_str());
        self.entries[start..]
            .iter()
            .take_while(|(n, _, _)| n.starts_with(&prefix))
            .map(|(n, is_file, utf8)| {
                let kind = if *utf8 {
                    classify_shard_entry(job_id, n, *is_file)
                } else {
                    Kind::Unknown
                };
                (n.clone(), kind)
            })
            .collect()
    }
}

pub(super) fn is_real_dir(path: &Path) -> Result<bool, MirrorError> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.file_type().is_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Legacy shard directory names are decimal digits: exactly 3 for the middle level, at least
/// 3 on top.
pub(super) fn is_legacy_shard_name(name: &str, middle: bool) -> bool {
    let len_ok = if middle { name.len() == 3 } else { name.len() >= 3 };
    len_ok && name.bytes().all(|b| b.is_ascii_digit())
}

/// Job id of a legacy document directory, only if the whole relative path is exactly where
/// that id lives.
pub(super) fn parse_legacy_doc_dir(rel: &str, leaf: &str, is_dir: bool) -> Option<i64> {
    if !is_dir {
        return None;
    }
    let job_id = canonical_number(leaf)?;
    (legacy_doc_rel(job_id).ok()? == rel).then_some(job_id)
}

/// Whether `rel` (`top/mid`) is exactly the shard directory of some ids: `s` and at least
/// three lower-case hex digits on top, three below it.
pub(super) fn is_shard_rel(rel: &str) -> bool {
    let Some((top, mid)) = rel.split_once('/') else {
        return false;
    };
    let Some(hi) = top.strip_prefix('s') else {
        return false;
    };
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !hex(hi) || !hex(mid) || mid.len() != 3 {
        return false;
    }
    let (Ok(hi), Ok(lo)) = (i64::from_str_radix(hi, 16), i64::from_str_radix(mid, 16)) else {
        return false;
    };
    lo < 0x400 && hi <= i64::MAX >> 20 && shard_rel(hi << 20 | lo << 10).ok().as_deref() == Some(rel)
}

/// Whether a root entry's name is a shard layout's top directory.
pub(super) fn is_shard_top(name: &str) -> bool {
    name.strip_prefix('s')
        .is_some_and(|hi| hi.len() >= 3 && hi.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}
