//! Fenced cleanup of one document and the sweep over the whole mirror (`gc`):
//! lock the document's shard exclusively (and its legacy directory, if it has
//! one), then ask the store what to keep, then delete.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::error::MirrorError;
use super::layout::{
    check_ids, entry_id, generation_of, is_legacy_shard_name, is_real_dir, is_shard_rel, is_shard_top,
    legacy_doc_rel, list_dir, parse_legacy_doc_dir, remove_dir_if_empty, remove_if_present, removed,
    scan_legacy_doc, scan_shard_doc, shard_rel, Kind, ShardListing, LOCK_NAME, PROBE_PREFIX,
};
use super::lock::CLEANUP_LOCK_WAIT;
use super::lock::{lock_dir, LockMode};
use super::{CleanupReport, Fencing, Keep, Mirror};

/// What a walk of the root found: document ids (of either layout), the shard directories,
/// probe leftovers, entries not ours.
#[derive(Debug, Default)]
struct Found {
    docs: BTreeSet<i64>,
    shards: Vec<String>,
    probes: Vec<String>,
    unknown: Vec<String>,
}

/// One place a document's files are: its shard (only the entries named after it) or its
/// legacy directory.
struct Place {
    dir: PathBuf,
    rel: String,
    entries: Vec<(String, Kind)>,
    legacy: bool,
}

impl Place {
    fn shard(root: &Path, job_id: i64) -> Result<Place, MirrorError> {
        let rel = shard_rel(job_id)?;
        let dir = root.join(&rel);
        let entries = scan_shard_doc(&dir, job_id)?;
        Ok(Place {
            dir,
            rel,
            entries,
            legacy: false,
        })
    }

    fn legacy(root: &Path, job_id: i64) -> Result<Place, MirrorError> {
        let rel = legacy_doc_rel(job_id)?;
        let dir = root.join(&rel);
        let entries = scan_legacy_doc(&dir)?;
        Ok(Place {
            dir,
            rel,
            entries,
            legacy: true,
        })
    }
}

/// Checks what a row says to keep: the accepted path must be exactly a generation path of
/// `job_id` (in either layout), the current fence a valid one.
fn check_keep(job_id: i64, keep: &Keep) -> Result<(), MirrorError> {
    if let Some(path) = &keep.accepted {
        if generation_of(job_id, path).is_none() {
            return Err(MirrorError::ForeignAccepted {
                job_id,
                accepted: path.clone(),
            });
        }
    }
    if let Some(fence) = keep.current_fence {
        check_ids(job_id, fence)?;
    }
    Ok(())
}

/// Report for a document whose row is gone: everything is kept, nothing deleted.
fn report_untouched(job_id: i64, places: &[Place]) -> CleanupReport {
    let mut report = CleanupReport {
        missing_rows: vec![job_id],
        ..CleanupReport::default()
    };
    for place in places {
        for (name, kind) in &place.entries {
            let rel = format!("{}/{name}", place.rel);
            match kind {
                Kind::Lock => {}
                Kind::Unknown => report.unknown.push(rel),
                Kind::Generation(_) | Kind::Temp(_) => report.kept.push(rel),
            }
        }
    }
    report
}

/// What a cleanup keeps of a document's files, and until when it may delete.
#[derive(Debug, Clone, Copy)]
struct Stale<'a> {
    /// The accepted result's path, relative to the root.
    accepted: Option<&'a str>,
    /// The current claim's fence: its generation is kept.
    current: Option<i64>,
    /// A claim whose temp files are kept (it may be writing them).
    keep_temps_of: Option<i64>,
    /// No deletion after this (the fence that allowed it may be gone).
    deadline: Option<Instant>,
    dry_run: bool,
}

/// Deletes (unless dry run) every temp and every generation of the place that is neither
/// the accepted result nor the current claim's, and keeps the temp files of
/// `keep_temps_of`. Past the deadline it stops and says so (`false`): the rest is left for a
/// later cleanup.
fn delete_stale(place: &Place, rule: Stale<'_>) -> Result<(CleanupReport, bool), MirrorError> {
    let mut report = CleanupReport::default();
    for (name, kind) in &place.entries {
        if rule.deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok((report, false));
        }
        let rel = format!("{}/{name}", place.rel);
        match *kind {
            Kind::Lock => continue,
            Kind::Unknown => report.unknown.push(rel),
            Kind::Generation(f) if Some(rel.as_str()) == rule.accepted || Some(f) == rule.current => {
                report.kept.push(rel)
            }
            Kind::Temp(f) if f.is_some() && f == rule.keep_temps_of => report.kept.push(rel),
            Kind::Generation(_) | Kind::Temp(_) => {
                // A file listed before the lock may have gone since (a temp
                // renamed, another cleanup): reported only if it was removed.
                if rule.dry_run || removed(&place.dir.join(name))? {
                    report.removed.push(rel);
                }
            }
        }
    }
    Ok((report, true))
}

/// Removes a directory that holds nothing but `.lock` (a legacy document directory, or a
/// shard), while we hold its exclusive lock, and its parents up to the root if they are left
/// empty. Safe against waiting lockers because they re-check the `.lock` inode after locking
/// and retry.
fn prune_dir(dir: &Path, parents: usize) -> Result<(), MirrorError> {
    remove_if_present(&dir.join(LOCK_NAME))?;
    remove_dir_if_empty(dir)?;
    for parent in dir.ancestors().skip(1).take(parents) {
        remove_dir_if_empty(parent)?;
    }
    Ok(())
}

/// Whether a cleanup left nothing in the place (its entries were all removed).
fn emptied(report: &CleanupReport) -> bool {
    report.kept.is_empty() && report.unknown.is_empty()
}

/// The shards listed last ([`ShardListing`]), each read once while it is
/// among the [`Listings::KEPT`] newest: a batch's documents, and a sweep's in
/// id order, come shard by shard, and memory stays a few shards' names
/// however large the mirror.
#[derive(Default)]
struct Listings(std::collections::VecDeque<(String, ShardListing)>);

impl Listings {
    const KEPT: usize = 4;

    /// Shard `rel`'s listing, read on first use.
    fn of(&mut self, root: &Path, rel: &str) -> Result<&ShardListing, MirrorError> {
        let at = match self.0.iter().position(|(r, _)| r == rel) {
            Some(at) => at,
            None => {
                if self.0.len() == Self::KEPT {
                    self.0.pop_front();
                }
                let listing = ShardListing::read(&root.join(rel))?;
                self.0.push_back((rel.to_owned(), listing));
                self.0.len() - 1
            }
        };
        Ok(&self.0[at].1)
    }

    /// Document `job_id`'s entries in its shard's listing; `None` when the
    /// shard cannot be listed (the caller's cleanup then lists under the
    /// lock, and reports what failed).
    fn doc(&mut self, root: &Path, job_id: i64) -> Option<Vec<(String, Kind)>> {
        let rel = shard_rel(job_id).ok()?;
        Some(self.of(root, &rel).ok()?.doc(job_id))
    }
}

impl Mirror {
    /// Removes stale generations and temp files of one document. The exclusive lock is taken
    /// before `keep` runs, so the row it reads cannot be older than any file on disk. A lookup
    /// error or a missing row deletes nothing. A document with no shard directory and no
    /// legacy directory returns an empty report without calling `keep`. A legacy directory it
    /// leaves empty is removed.
    pub fn cleanup<E: From<MirrorError>>(
        &self,
        job_id: i64,
        keep: impl FnOnce() -> Result<Option<Keep>, E>,
    ) -> Result<CleanupReport, E> {
        self.clean_doc(job_id, false, None, keep)
    }

    /// Whether document `job_id`'s only file is `accepted` (a generation's path relative to
    /// the root, as a completion records it): no other generation or temp file named after it
    /// in its shard, and no legacy directory. Then no cleanup could delete anything, whatever
    /// the row says, and the worker that just had `accepted` accepted skips the lock and the
    /// row read. Read without the lock: a file a writer adds meanwhile is its own, which a
    /// cleanup would keep anyway.
    pub fn holds_only(&self, job_id: i64, accepted: &str) -> Result<bool, MirrorError> {
        Ok(self.holds_only_all(&[(job_id, accepted)])?[0])
    }

    /// [`Mirror::holds_only`] of several documents, each shard listed once (a batch's
    /// documents have consecutive ids and share a shard).
    pub fn holds_only_all(&self, docs: &[(i64, &str)]) -> Result<Vec<bool>, MirrorError> {
        let mut listings = Listings::default();
        docs.iter()
            .map(|&(job_id, accepted)| self.holds_only_in(&mut listings, job_id, accepted))
            .collect()
    }

    fn holds_only_in(
        &self,
        listings: &mut Listings,
        job_id: i64,
        accepted: &str,
    ) -> Result<bool, MirrorError> {
        let rel = shard_rel(job_id)?;
        let name = accepted
            .strip_prefix(rel.as_str())
            .and_then(|r| r.strip_prefix('/'))
            .filter(|_| generation_of(job_id, accepted).is_some());
        let Some(name) = name else {
            return Ok(false);
        };
        if is_real_dir(&self.root.join(legacy_doc_rel(job_id)?))? {
            return Ok(false);
        }
        let entries = listings.of(&self.root, &rel)?.doc(job_id);
        Ok(entries.iter().all(|(n, _)| n == name))
    }

    /// The cleanups after a batch of claims, one per document in order: for a document
    /// whose result `Some(accepted)` was just accepted and is its only file
    /// ([`Mirror::holds_only`]), nothing (no lock, no `keep`); for the others,
    /// [`Mirror::cleanup`]. Each shard is listed once for the whole batch, before its lock
    /// is taken, instead of once per document under the lock; a changed document's cleanup
    /// listed its whole shard (1,024 documents' files) for its own one or two.
    ///
    /// Listing before the lock deletes nothing it should not: a generation's name is made
    /// once and the row read under the lock is at least as new as every file renamed into
    /// place before it, so the decision on each listed generation is the same; a temp file
    /// listed while its writer held the shared lock is renamed before the exclusive lock is
    /// ours (its removal then finds nothing); what appears after the listing is left for the
    /// document's next cleanup or `gc`. A shard that cannot be listed falls back to the
    /// cleanup that lists under the lock, which reports the error.
    pub fn cleanup_batch<E: From<MirrorError>>(
        &self,
        docs: &[(i64, Option<&str>)],
        mut keep: impl FnMut(i64) -> Result<Option<Keep>, E>,
    ) -> Vec<Result<CleanupReport, E>> {
        let mut listings = Listings::default();
        docs.iter()
            .map(|&(job_id, accepted)| {
                if let Some(accepted) = accepted {
                    if let Ok(true) = self.holds_only_in(&mut listings, job_id, accepted) {
                        return Ok(CleanupReport::default());
                    }
                }
                let listed = listings.doc(&self.root, job_id);
                self.clean_doc(job_id, false, listed, || keep(job_id))
            })
            .collect()
    }

    /// Runs cleanup for every document of the mirror, in either layout (used by `gc`); stops
    /// at the first error. A dry run reports in `removed` what would be deleted and deletes
    /// nothing. Unrecognised entries are left alone and reported. A real sweep also removes
    /// legacy document directories left empty, shard directories that hold nothing but their
    /// `.lock` (and then-empty parents), and `.probe-*` files that a killed [`Mirror::open`]
    /// left in the root. A document whose lock another process holds is skipped and listed in
    /// [`CleanupReport::busy`]; the sweep goes on.
    pub fn sweep<E: From<MirrorError>>(
        &self,
        dry_run: bool,
        mut keep: impl FnMut(i64) -> Result<Option<Keep>, E>,
    ) -> Result<CleanupReport, E> {
        let found = self.find_docs()?;
        let shards = found.shards.clone();
        // Each shard listed once for its documents, as a batch's cleanups do
        // (see [`Mirror::cleanup_batch`]): listing it again under each
        // document's lock made a sweep cost its documents times their shard.
        let mut listings = Listings::default();
        let report = self.sweep_found(found, dry_run, |job_id| {
            let listed = listings.doc(&self.root, job_id);
            self.clean_doc(job_id, dry_run, listed, || keep(job_id))
        })?;
        if !dry_run && self.fencing == Fencing::FileLocks {
            for shard in shards {
                self.prune_shard(&self.root.join(shard))?;
            }
        }
        Ok(report)
    }

    /// The walk of [`Mirror::sweep`] with each document's cleanup done by `clean`
    /// (the PostgreSQL edition's: under the row lock, then [`Mirror::cleanup_held`]).
    /// Probe leftovers are removed (unless `dry_run`) and unknown entries reported; shard
    /// directories are never removed (a writer of another document may be about to use one).
    pub fn sweep_each<E: From<MirrorError>>(
        &self,
        dry_run: bool,
        clean: impl FnMut(i64) -> Result<CleanupReport, E>,
    ) -> Result<CleanupReport, E> {
        let found = self.find_docs()?;
        self.sweep_found(found, dry_run, clean)
    }

    fn sweep_found<E: From<MirrorError>>(
        &self,
        found: Found,
        dry_run: bool,
        mut clean: impl FnMut(i64) -> Result<CleanupReport, E>,
    ) -> Result<CleanupReport, E> {
        let mut report = CleanupReport {
            unknown: found.unknown,
            ..CleanupReport::default()
        };
        for probe in found.probes {
            if !dry_run {
                remove_if_present(&self.root.join(&probe))?;
            }
            report.removed.push(probe);
        }
        for job_id in found.docs {
            report.merge(clean(job_id)?);
        }
        Ok(report)
    }

    /// Removes a shard directory that holds nothing but its `.lock`, under its exclusive lock
    /// (skipped when the lock is busy: a writer is in it).
    fn prune_shard(&self, dir: &Path) -> Result<(), MirrorError> {
        let lock = match lock_dir(dir, LockMode::Exclusive, false, CLEANUP_LOCK_WAIT) {
            Err(e) if e.is_busy() => return Ok(()),
            locked => locked?,
        };
        let only_lock = list_dir(dir)?
            .iter()
            .all(|(name, is_dir)| !is_dir && name == LOCK_NAME);
        // Only under the lock: a writer between its look at the directory and its temp file
        // holds it shared.
        if only_lock && lock.is_some() {
            prune_dir(dir, 1)?;
        }
        drop(lock);
        Ok(())
    }

    /// Cleanup of one document whose database row lock the caller holds
    /// ([`Fencing::RowLocks`]); `keep` was read under that lock (`None`: the
    /// row does not exist, and nothing is deleted). Without a file lock a
    /// writer of the current claim may be mid-write, so its temp files are
    /// kept with its generation. A legacy directory is removed (by a real
    /// sweep, `prune`) when it is left empty and no claim is current; shard
    /// directories are never removed here. Everything else stale goes, as in
    /// [`Mirror::cleanup`].
    ///
    /// Nothing is deleted after `deadline` (the caller's row lock may be gone
    /// by then): the document is then listed in `busy`, its rest left for a
    /// later cleanup.
    pub fn cleanup_held(
        &self,
        job_id: i64,
        keep: Option<Keep>,
        deadline: Instant,
        dry_run: bool,
        prune: bool,
    ) -> Result<CleanupReport, MirrorError> {
        let places = self.places(job_id)?;
        if places.is_empty() {
            return Ok(CleanupReport::default());
        }
        let Some(keep) = keep else {
            return Ok(report_untouched(job_id, &places));
        };
        check_keep(job_id, &keep)?;
        let rule = Stale {
            accepted: keep.accepted.as_deref(),
            current: keep.current_fence,
            keep_temps_of: keep.current_fence,
            deadline: Some(deadline),
            dry_run,
        };
        let mut report = CleanupReport::default();
        for place in &places {
            let (done, finished) = delete_stale(place, rule)?;
            let idle = keep.current_fence.is_none();
            let prunable = place.legacy && prune && !dry_run && idle && emptied(&done);
            report.merge(done);
            if !finished {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                report.busy.push(job_id);
                return Ok(report);
            }
            if prunable {
                prune_dir(&place.dir, 2)?;
            }
        }
        Ok(report)
    }

    /// Where document `job_id` has files: its shard directory and its legacy directory, each
    /// only if it exists.
    fn places(&self, job_id: i64) -> Result<Vec<Place>, MirrorError> {
        let mut places = Vec::new();
        if is_real_dir(&self.root.join(shard_rel(job_id)?))? {
            places.push(Place::shard(&self.root, job_id)?);
        }
        if is_real_dir(&self.root.join(legacy_doc_rel(job_id)?))? {
            places.push(Place::legacy(&self.root, job_id)?);
        }
        Ok(places)
    }

    /// One document's fenced cleanup. `listed` is its shard entries when the caller
    /// listed the shard before the lock ([`Mirror::cleanup_batch`]); else the shard is
    /// listed under the lock.
    fn clean_doc<E: From<MirrorError>>(
        &self,
        job_id: i64,
        dry_run: bool,
        listed: Option<Vec<(String, Kind)>>,
        keep: impl FnOnce() -> Result<Option<Keep>, E>,
    ) -> Result<CleanupReport, E> {
        if self.fencing != Fencing::FileLocks {
            return Err(MirrorError::NotFileLocked {
                root: self.root.clone(),
            }
            .into());
        }
        let rel = shard_rel(job_id)?;
        let shard = self.root.join(&rel);
        let legacy = self.root.join(legacy_doc_rel(job_id)?);
        // Nothing listed in the shard: nothing of it to delete, and no lock to take there.
        let in_shard = match &listed {
            Some(entries) => !entries.is_empty() && is_real_dir(&shard)?,
            None => is_real_dir(&shard)?,
        };
        let in_legacy = is_real_dir(&legacy)?;
        if !in_shard && !in_legacy {
            return Ok(CleanupReport::default());
        }
        // Lock first, then read the row: see the module docs. A dry run does not create
        // `.lock`. The shard's lock first, then the legacy directory's: every locker that
        // takes both takes them in this order.
        let mut locks = Vec::new();
        for (dir, there) in [(&shard, in_shard), (&legacy, in_legacy)] {
            if !there {
                continue;
            }
            match lock_dir(dir, LockMode::Exclusive, !dry_run, CLEANUP_LOCK_WAIT) {
                Err(e) if e.is_busy() => {
                    self.skipped.fetch_add(1, Ordering::Relaxed);
                    return Ok(CleanupReport {
                        busy: vec![job_id],
                        ..CleanupReport::default()
                    });
                }
                locked => locks.push(locked?),
            }
        }
        let keep = keep()?;
        // Only the places that were there when we locked: a shard made since is a writer's,
        // whose temp file we hold no lock against.
        let mut places = Vec::new();
        if in_shard {
            places.push(match listed {
                Some(entries) => Place {
                    dir: shard,
                    rel,
                    entries,
                    legacy: false,
                },
                None => Place::shard(&self.root, job_id)?,
            });
        }
        if in_legacy {
            places.push(Place::legacy(&self.root, job_id)?);
        }
        let Some(keep) = keep else {
            return Ok(report_untouched(job_id, &places));
        };
        check_keep(job_id, &keep)?;
        // Under the exclusive lock no writer is mid-write: every temp is
        // stale, and the lock holds however long the deletions take.
        let rule = Stale {
            accepted: keep.accepted.as_deref(),
            current: keep.current_fence,
            keep_temps_of: None,
            deadline: None,
            dry_run,
        };
        let mut report = CleanupReport::default();
        let legacy_locked = locks.last().is_some_and(Option::is_some) && in_legacy;
        for place in &places {
            let (done, _) = delete_stale(place, rule)?;
            let prunable = place.legacy && legacy_locked && !dry_run && emptied(&done);
            report.merge(done);
            if prunable {
                prune_dir(&place.dir, 2)?;
            }
        }
        Ok(report)
    }

    /// Every document of the mirror (from its shard files and its legacy directories), the
    /// shard directories, the probe files left in the root, plus every entry that does not
    /// fit either layout (reported, never descended into or deleted).
    fn find_docs(&self) -> Result<Found, MirrorError> {
        let mut found = Found::default();
        for (top, top_is_dir) in list_dir(&self.root)? {
            if !top_is_dir && self.is_probe(&top)? {
                found.probes.push(top);
            } else if top_is_dir && is_shard_top(&top) {
                self.find_in_shard_top(&top, &mut found)?;
            } else if top_is_dir && is_legacy_shard_name(&top, false) {
                self.find_in_legacy_top(&top, &mut found)?;
            } else {
                found.unknown.push(top);
            }
        }
        Ok(found)
    }

    fn find_in_shard_top(&self, top: &str, found: &mut Found) -> Result<(), MirrorError> {
        for (mid, mid_is_dir) in list_dir(&self.root.join(top))? {
            let rel = format!("{top}/{mid}");
            if !mid_is_dir || !is_shard_rel(&rel) {
                found.unknown.push(rel);
                continue;
            }
            for (name, is_dir) in list_dir(&self.root.join(&rel))? {
                if !is_dir && name == LOCK_NAME {
                    continue;
                }
                let id = entry_id(&name).filter(|&id| shard_rel(id).ok().as_deref() == Some(rel.as_str()));
                match id {
                    Some(id) => {
                        found.docs.insert(id);
                    }
                    None => found.unknown.push(format!("{rel}/{name}")),
                }
            }
            found.shards.push(rel);
        }
        Ok(())
    }

    fn find_in_legacy_top(&self, top: &str, found: &mut Found) -> Result<(), MirrorError> {
        for (mid, mid_is_dir) in list_dir(&self.root.join(top))? {
            let rel_mid = format!("{top}/{mid}");
            if !mid_is_dir || !is_legacy_shard_name(&mid, true) {
                found.unknown.push(rel_mid);
                continue;
            }
            for (leaf, leaf_is_dir) in list_dir(&self.root.join(&rel_mid))? {
                let rel = format!("{rel_mid}/{leaf}");
                match parse_legacy_doc_dir(&rel, &leaf, leaf_is_dir) {
                    Some(job_id) => {
                        found.docs.insert(job_id);
                    }
                    None => found.unknown.push(rel),
                }
            }
        }
        Ok(())
    }

    /// A regular file named like [`Mirror::open`]'s probe: ours, and never needed after the
    /// probing process returned (a live probe removed early costs that process nothing).
    fn is_probe(&self, name: &str) -> Result<bool, MirrorError> {
        if !name.starts_with(PROBE_PREFIX) {
            return Ok(false);
        }
        let path = self.root.join(name);
        match fs::symlink_metadata(&path) {
            Ok(m) => Ok(m.file_type().is_file()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(super::layout::io_err(&path)(e)),
        }
    }
}
