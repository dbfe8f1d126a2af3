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
    /// Scan the whole tree, for the reason given (the first that came).
    Rescan(Why),
}

/// Why a whole-tree scan stands in for named paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// The first pass: the initial run.
    Start,
    /// The kernel's event queue overflowed: events were lost.
    Overflow,
    /// More changed paths than the set keeps.
    Cap,
    /// notify reported an error that may have cost an event.
    NotifyError,
    /// Notifications stopped (a limit reached): from now on, the timer.
    Lost,
    /// The fallback's timer.
    Timer,
    /// The previous pass failed.
    Retry,
}

/// Paths waiting to be applied, or a pending rescan.
#[derive(Debug)]
pub struct Pending {
    paths: HashSet<PathBuf>,
    rescan: Option<Why>,
    cap: usize,
}

impl Pending {
    /// An empty set that holds at most `cap` paths (at least 1).
    pub fn new(cap: usize) -> Pending {
        Pending {
            paths: HashSet::new(),
            rescan: None,
            cap: cap.max(1),
        }
    }

    /// Note a change at `path`. Past the cap, the set gives its memory back
    /// and asks for a rescan instead.
    pub fn add(&mut self, path: PathBuf) {
        if self.rescan.is_some() || self.paths.contains(&path) {
            return;
        }
        if self.paths.len() >= self.cap {
            self.rescan(Why::Cap);
            return;
        }
        self.paths.insert(path);
    }

    /// Ask for a full rescan: it covers every path noted so far. A rescan
    /// already asked for keeps its reason.
    pub fn rescan(&mut self, why: Why) {
        self.rescan.get_or_insert(why);
        self.paths = HashSet::new();
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.rescan.is_none() && self.paths.is_empty()
    }

    /// Take what waits, leaving the set empty (and its memory freed).
    pub fn take(&mut self) -> Option<Batch> {
        if let Some(why) = self.rescan.take() {
            self.paths = HashSet::new();
            return Some(Batch::Rescan(why));
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
        assert_eq!(p.take(), Some(Batch::Rescan(Why::Cap)));
        assert_eq!(p.take(), None);
        p.add("/r/later".into());
        assert_eq!(p.take(), Some(Batch::Paths(vec!["/r/later".into()])));
    }

    #[test]
    fn a_rescan_covers_paths_noted_before_and_after() {
        let mut p = Pending::new(10);
        p.add("/r/a".into());
        p.rescan(Why::Overflow);
        p.rescan(Why::Timer);
        p.add("/r/b".into());
        assert_eq!(p.take(), Some(Batch::Rescan(Why::Overflow)), "the first reason");
        assert!(p.is_empty());
    }
}
