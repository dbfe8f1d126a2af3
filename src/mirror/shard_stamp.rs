//! A shard directory's stamp: what a rerun's check of the accepted results
//! keeps of a shard it found whole, so that the next rerun can pass over it
//! while the directory is as it was (DESIGN §9a).
//!
//! Adding, removing or renaming a name in a directory sets its modification
//! and change times; the change time cannot be set back by hand (setting the
//! modification time back sets it), and a directory made again in its place
//! has another inode. So a shard whose device, inode and both times are the
//! ones recorded holds the names it held then. Two limits, each answered by
//! not stamping:
//! - a file system that keeps times coarsely (FAT's 2 s, ext3's and HFS+'s
//!   1 s) may give a change right after the stat the same times: a stamp is
//!   kept only when both times are at least [`SETTLED_MS`] older than the
//!   check;
//! - a network file system may answer from an attribute cache, and its
//!   server keeps the times: shards are stamped only on a file system known
//!   to be local (`fs_kind::keeps_directory_times`: ext4, xfs, btrfs, tmpfs,
//!   zfs, f2fs), and only where the mirror is fenced by file locks (the
//!   SQLite edition; the PostgreSQL edition's machines share a mirror).
//!
//! Linux gives the file system's kind (`statfs`); elsewhere, and when the
//! portable paths are forced, no shard is stamped and every rerun lists
//! every shard as before. What the store must say besides (that none of the
//! shard's documents was claimed or accepted meanwhile) is the check's
//! part: `CheckedShards` in `pipeline/recheck.rs`.

use super::layout::{shard_rel, SHARD_SHIFT};
use super::listing::shard_and_name;
use super::{Fencing, Mirror};

/// How much older than the check a shard's times must be for its stamp to
/// be kept: the coarsest file system times leasehold meets (FAT's two
/// seconds) cannot hide a change made after the stat.
pub const SETTLED_MS: i64 = 2_000;

/// A shard directory's identity and times, as text to record; and the later
/// of its two times, to tell whether it has settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardStamp {
    /// Device, inode, modification and change times (with nanoseconds).
    pub text: String,
    /// The later of the modification and change times, ms since the epoch.
    pub changed_ms: i64,
}

impl ShardStamp {
    /// Whether a check at `now_ms` may keep this stamp: both times are at
    /// least [`SETTLED_MS`] older.
    pub fn settled_at(&self, now_ms: i64) -> bool {
        self.changed_ms <= now_ms.saturating_sub(SETTLED_MS)
    }
}

impl Mirror {
    /// Whether shards can be stamped here (see the module docs): the Linux
    /// fast paths, file locks, and a file system known to be local. Asked
    /// once a check (a `statfs`).
    pub fn stamps_shards(&self) -> bool {
        self.fencing == Fencing::FileLocks && local_file_system(self.root())
    }

    /// The number of document `job_id`'s shard: the documents of one shard
    /// are the ids from `shard << 10` to `(shard << 10) | 1023`.
    pub fn shard_of(job_id: i64) -> i64 {
        job_id >> SHARD_SHIFT
    }

    /// The last document id of shard `shard` ([`Mirror::shard_of`]).
    pub fn last_id_of_shard(shard: i64) -> i64 {
        ((shard + 1) << SHARD_SHIFT) - 1
    }

    /// Whether `rel_path` is a file directly in document `job_id`'s shard:
    /// a result in the layout before shards is never passed over.
    pub fn in_own_shard(job_id: i64, rel_path: &str) -> bool {
        shard_and_name(rel_path).is_some_and(|(shard, _)| shard_rel(job_id).is_ok_and(|own| own == shard))
    }

    /// The stamp of shard `shard` now; `None` when it is not a directory
    /// (gone, a link) or cannot be stat'ed, and on systems without device
    /// and inode numbers. Whether to keep it is [`Mirror::stamps_shards`]'s
    /// to say.
    pub fn shard_stamp(&self, shard: i64) -> Option<ShardStamp> {
        stamp_of(&self.doc_dir(shard << SHARD_SHIFT).ok()?)
    }
}

#[cfg(unix)]
fn stamp_of(dir: &std::path::Path) -> Option<ShardStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).ok()?;
    if !meta.file_type().is_dir() {
        return None;
    }
    let ms = |secs: i64, nanos: i64| secs.saturating_mul(1000).saturating_add(nanos / 1_000_000);
    Some(ShardStamp {
        text: format!(
            "{:x}:{:x}:{}.{:09}:{}.{:09}",
            meta.dev(),
            meta.ino(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec()
        ),
        changed_ms: ms(meta.mtime(), meta.mtime_nsec()).max(ms(meta.ctime(), meta.ctime_nsec())),
    })
}

#[cfg(not(unix))]
fn stamp_of(_dir: &std::path::Path) -> Option<ShardStamp> {
    None
}

/// Whether `root` is on a file system known to be local (Linux's `statfs`,
/// unless the portable paths are forced); anywhere else, not known.
fn local_file_system(root: &std::path::Path) -> bool {
    crate::portable::fast()
        && crate::fs_kind::fs_magic(root)
            .ok()
            .is_some_and(crate::fs_kind::keeps_directory_times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_in_its_own_shard_only_as_a_plain_name_there() {
        assert!(Mirror::in_own_shard(1098, "s000/001/1098.g000002.txt"));
        for other in [
            "s000/002/1098.g000002.txt",
            "s000/001/x/1098.g000002.txt",
            "s000/001/",
            "000/001/1098/g000002.txt",
            "s000/001/..",
        ] {
            assert!(!Mirror::in_own_shard(1098, other), "{other}");
        }
    }

    #[test]
    fn a_shard_holds_1024_consecutive_ids() {
        assert_eq!(Mirror::shard_of(1023), 0);
        assert_eq!(Mirror::shard_of(1024), 1);
        assert_eq!(Mirror::last_id_of_shard(1), 2047);
        assert_eq!(Mirror::shard_of(Mirror::last_id_of_shard(7)), 7);
    }

    #[test]
    fn a_stamp_is_kept_only_once_both_times_are_two_seconds_old() {
        let stamp = ShardStamp {
            text: String::new(),
            changed_ms: 10_000,
        };
        assert!(!stamp.settled_at(11_999));
        assert!(stamp.settled_at(12_000));
    }
}
