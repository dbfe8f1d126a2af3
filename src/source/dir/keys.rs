//! Document keys of a folder's files: a path below the root, or its bytes
//! in hexadecimal when it is not UTF-8, behind the folder's prefix when the
//! folder is keyed by full path.

use std::path::{Component, Path, PathBuf};

/// Prefix of keys for paths that are not valid UTF-8: the raw bytes in hex, so
/// the key maps back to exactly one file.
pub(super) const HEX_KEY: &str = "hex:";

/// The path relative to the root that document `key` names ([`key_for`]
/// backwards: a `hex:` key is decoded), or why it names none: a bad hex key,
/// a name this system cannot hold, a NUL, or a path that is not plainly
/// relative (`..`, a root, a prefix).
pub fn relative_path_of(key: &str) -> std::result::Result<PathBuf, &'static str> {
    let rel = match key.strip_prefix(HEX_KEY) {
        Some(digits) => PathBuf::from(
            crate::portable::os_string_from_bytes(hex::decode(digits).map_err(|_| "bad hex")?)
                .ok_or("not a file name of this system")?,
        ),
        None => PathBuf::from(key),
    };
    if key.contains('\0') {
        return Err("contains NUL");
    }
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err("not a plain relative path");
    }
    Ok(rel)
}

/// Whether `key` is a full-path key (`DirSource::keyed_by_full_path`): it
/// starts with this system's separator, which a key relative to a root never
/// does (a root's full path starts with `/` on Unix and `\\?\` once Windows
/// has made it canonical). Only the system's own: a file on Unix may be
/// named `\odd.txt`, and its relative key starts with a backslash.
pub fn is_full_path_key(key: &str) -> bool {
    key.starts_with(std::path::MAIN_SEPARATOR)
}

/// What every key of the folder at `root` (canonical) starts with when it is
/// keyed by full path: the root and a separator. `None` when the path is not
/// UTF-8.
pub fn full_path_prefix(root: &Path) -> Option<String> {
    let mut prefix = root.to_str()?.to_owned();
    if !prefix.ends_with(std::path::MAIN_SEPARATOR) {
        prefix.push(std::path::MAIN_SEPARATOR);
    }
    Some(prefix)
}

/// Whether `key` belongs to the folder whose keys start with `prefix`
/// (`DirSource::key_prefix`; empty: the folder keyed relative, which holds
/// every key but the full-path ones).
pub fn key_in_folder(prefix: &str, key: &str) -> bool {
    key_below_folder(prefix, key).is_some()
}

/// `key` without the prefix of the folder it belongs to (what [`key_for`]
/// made of the path below the root), or `None` when it is not that
/// folder's ([`key_in_folder`]).
pub fn key_below_folder<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    match prefix {
        "" => (!is_full_path_key(key)).then_some(key),
        prefix => key.strip_prefix(prefix),
    }
}

/// The document key of a path relative to the root: '/'-joined UTF-8, or the raw
/// bytes in hex when the path is not UTF-8 (or could be mistaken for such a key).
pub fn key_for(rel: &Path) -> String {
    match rel.to_str() {
        Some(s) if !s.starts_with(HEX_KEY) => s.to_owned(),
        _ => format!("{HEX_KEY}{}", hex::encode(rel.as_os_str().as_encoded_bytes())),
    }
}
