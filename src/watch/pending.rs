//! The changes a watcher has heard of and not yet applied: a set of paths,
//! coalesced (a file written a thousand times is one entry) and capped, so a
//! burst of any size costs bounded memory. Past the cap the paths are
//! dropped and one full rescan stands for them all.

use std::collections::HashSet;
use std::path::PathBuf;

/// What to apply next.
#[derive(Debug, PartialEq, Eq)]
pub enum Batch {
    /// Look at these paths (files or directories; gone or there).
    Paths(Vec<PathBuf>),
    /// Scan the whole tree: the queue of events overflowed (in the kernel or
    /// here), notifications stopped, or it is the first pass.
    Rescan,
}

/// Paths waiting to be applied, or a pending rescan.
#[derive(Debug)]
pub struct Pending {
    paths: HashSet<PathBuf>,
    rescan: bool,
    cap: usize,
}

impl Pending {
    /// An empty set that holds at most `cap` paths (at least 1).
    pub fn new(cap: usize) -> Pending {
        Pending {
            paths: HashSet::new(),
            rescan: false,
            cap: cap.max(1),
        }
    }

    /// Note a change at `path`. Past the cap, the set gives its memory back
    /// and asks for a rescan instead.
    pub fn add(&mut self, path: PathBuf) {
        if self.rescan || self.paths.contains(&path) {
            return;
        }
        if self.paths.len() >= self.cap {
            self.rescan();
            return;
        }
        self.paths.insert(path);
    }

    /// Ask for a full rescan: it covers every path noted so far.
    pub fn rescan(&mut self) {
        self.rescan = true;
        self.paths = HashSet::new();
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        !self.rescan && self.paths.is_empty()
    }

    /// Take what waits, leaving the set empty (and its memory freed).
    pub fn take(&mut self) -> Option<Batch> {
        if std::mem::take(&mut self.rescan) {
            self.paths = HashSet::new();
            return Some(Batch::Rescan);
        }
        if self.paths.is_empty() {
            return None;
        }
        let mut paths: Vec<PathBuf> = std::mem::take(&mut self.paths).into_iter().collect();
        // Sorted: a directory comes before what is under it, and the order of
        // the store's writes does not depend on hashing.
        paths.sort();
        Some(Batch::Paths(paths))
    }

    /// How many paths wait (0 while a rescan waits).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.paths.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_paths_coalesce_and_come_out_sorted() {
        let mut p = Pending::new(10);
        for _ in 0..1000 {
            p.add("/r/b".into());
            p.add("/r/a".into());
        }
        assert_eq!(p.len(), 2);
        assert_eq!(p.take(), Some(Batch::Paths(vec!["/r/a".into(), "/r/b".into()])));
        assert!(p.is_empty());
        assert_eq!(p.take(), None);
    }

    /// 100,000 distinct paths never hold more than the cap: past it, one
    /// rescan stands for them all, and the set is empty again after it.
    #[test]
    fn a_burst_past_the_cap_becomes_one_rescan() {
        let mut p = Pending::new(1000);
        for i in 0..100_000 {
            p.add(PathBuf::from(format!("/r/f{i}")));
            assert!(p.len() <= 1000);
        }
        assert_eq!(p.len(), 0, "the paths were dropped for the rescan");
        assert_eq!(p.take(), Some(Batch::Rescan));
        assert_eq!(p.take(), None);
        p.add("/r/later".into());
        assert_eq!(p.take(), Some(Batch::Paths(vec!["/r/later".into()])));
    }

    #[test]
    fn a_rescan_covers_paths_noted_before_and_after() {
        let mut p = Pending::new(10);
        p.add("/r/a".into());
        p.rescan();
        p.add("/r/b".into());
        assert_eq!(p.take(), Some(Batch::Rescan));
        assert!(p.is_empty());
    }
}
