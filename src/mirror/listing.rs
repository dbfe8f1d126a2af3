//! A rerun's look at every accepted result, by its shard's listing rather
//! than a stat of each file (DESIGN §9a).
//!
//! A stat per result was a third of an unchanged rerun's CPU: the kernel
//! looks up each name and fills a `stat` for it. A shard's listing answers
//! for its 1,024 documents at once, with each entry's type, which is all a
//! present result needs; a name it lacks is stat'ed before it is called
//! missing, since the listing may be older than the row that names it. What
//! a listing cannot see is a result cut or added to in place; the reads see
//! it (`search` and `show` per hit, `doctor`, `reindex`), as they see one
//! rewritten to the same size.

use std::collections::HashMap;

use super::layout::read_dir_if_present;
use super::{is_generated, Mirror, MirrorError, ResultFile};

/// Entries a listing keeps before it is given up for stats: a shard holds
/// 1,024 documents' generations and its `.lock`, and this leaves room for
/// temp files and leftovers. A directory stuffed past it costs a stat a
/// result, not memory.
const MAX_LISTED: usize = 4 * 1024;

/// The accepted results of a rerun, looked up in the listing of their shard,
/// one shard kept at a time: the results come in id order, so each shard is
/// listed once.
pub struct ListedResults<'m> {
    mirror: &'m Mirror,
    /// For a result no listing answers for (not in a shard, its shard too
    /// big or unreadable, an entry that is not a regular file).
    stats: crate::portable::Stats,
    /// The shard listed last, relative to the root, and what it holds.
    shard: Option<(String, Listing)>,
}

/// A shard's entries by name, each true when it is a regular file; `None`
/// when the shard could not be listed or held too much, and its results are
/// stat'ed. A hash of the names rather than the cleanup's sorted
/// `ShardListing`: sorting each shard's names made an unchanged rerun at
/// 100k take 1.06 × the CPU (15 alternated pairs).
type Listing = Option<HashMap<String, bool>>;

impl<'m> ListedResults<'m> {
    /// Looks at results under `mirror`'s root.
    pub fn new(mirror: &'m Mirror) -> Self {
        ListedResults {
            mirror,
            stats: crate::portable::Stats::default(),
            shard: None,
        }
    }

    /// Whether the accepted result `rel_path` is there: present when its
    /// shard's listing names it as a regular file. Anything else is stat'ed
    /// as [`Mirror::stat_result`] does, with the size `recorded`: a name the
    /// listing lacks (it may have been renamed into place since the listing,
    /// by another process, after the row was read; a missing one is rare), a
    /// link or a directory in its place, a path outside the shards, a shard
    /// that cannot be listed.
    pub fn look(&mut self, rel_path: &str, recorded: Option<u64>) -> Result<ResultFile, MirrorError> {
        let listed = shard_and_name(rel_path).and_then(|(shard, name)| {
            let listing = self.listing(shard).as_ref()?;
            listing.get(name).copied()
        });
        match listed {
            Some(true) => Ok(ResultFile::Present),
            Some(false) | None => self.mirror.stat_result_with(&mut self.stats, rel_path, recorded),
        }
    }

    /// Forget the listing kept, so that the next result looked at lists its
    /// shard anew: a check that stamps a shard before listing it
    /// (`pipeline/recheck.rs`) must not be answered by an older listing.
    pub fn forget_listing(&mut self) {
        self.shard = None;
    }

    /// The listing of `shard`, read when the last one was another.
    fn listing(&mut self, shard: &str) -> &Listing {
        if self.shard.as_ref().is_none_or(|(listed, _)| listed != shard) {
            let listing = list(&self.mirror.root.join(shard));
            self.shard = Some((shard.to_owned(), listing));
        }
        &self.shard.as_ref().expect("set above").1
    }
}

/// The entries of the shard directory `dir`; none when it does not exist
/// (its files are gone with it), `None` when it cannot be read or holds more
/// than [`MAX_LISTED`].
fn list(dir: &std::path::Path) -> Listing {
    let Some(entries) = read_dir_if_present(dir).ok()? else {
        return Some(HashMap::new());
    };
    let mut out = HashMap::new();
    for (seen, entry) in entries.enumerate() {
        let entry = entry.ok()?;
        if seen == MAX_LISTED {
            return None;
        }
        // Not UTF-8: no result is named so.
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        // The type from the listing where the system gives it (`d_type`,
        // Windows' find data), else a stat of the entry (a file system
        // that leaves `d_type` unknown costs a stat an entry again).
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        out.insert(name, regular);
    }
    Some(out)
}

/// A result path in a shard, `sXXX/YYY/NAME`, cut into the shard and the
/// name; `None` for any other path (the layout before shards, or a path the
/// mirror does not make), which is stat'ed.
pub(super) fn shard_and_name(rel_path: &str) -> Option<(&str, &str)> {
    let b = rel_path.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    let in_shard = b.len() > 9
        && b[0] == b's'
        && hex(1..4)
        && b[4] == b'/'
        && hex(5..8)
        && b[8] == b'/'
        && !b[9..].contains(&b'/')
        && is_generated(rel_path);
    in_shard.then(|| (&rel_path[..8], &rel_path[9..]))
}

#[cfg(test)]
mod tests {
    use super::shard_and_name;

    #[test]
    fn a_shard_path_is_cut_at_its_shard_and_any_other_path_is_left_to_a_stat() {
        assert_eq!(
            shard_and_name("s000/04a/1098.g000002.txt"),
            Some(("s000/04a", "1098.g000002.txt"))
        );
        for other in [
            "000/001/1098/g000002.txt",
            "s000/04a/",
            "s000/04a/..",
            "s000/04a/x/1098.g000002.txt",
            "s00/004a/1098.g000002.txt",
            "sxyz/04a/1098.g000002.txt",
            "s000\\04a\\1098.g000002.txt",
        ] {
            assert_eq!(shard_and_name(other), None, "{other}");
        }
    }
}
