//! Fenced cleanup of one document and the sweep over the whole mirror (`gc`):
//! lock the document exclusively, then ask the store what to keep, then delete.

use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::layout::{
    check_ids, doc_rel, is_real_dir, is_shard_name, list_dir, parse_doc_dir, parse_generation,
    remove_dir_if_empty, remove_if_present, scan_doc, temp_fence, Kind,
};
use super::lock::{lock_doc, LockMode};
use super::{CleanupReport, Fencing, Keep, Mirror, MirrorError, CLEANUP_LOCK_WAIT, LOCK_NAME, PROBE_PREFIX};

/// What a walk of the root found: document ids, probe leftovers, entries not ours.
type Found = (Vec<i64>, Vec<String>, Vec<String>);

/// How a document cleanup behaves; sweep differs from a single cleanup only here.
#[derive(Debug, Clone, Copy)]
pub(super) struct CleanOpts {
    dry_run: bool,
    prune: bool,
}

/// Fence of `accepted` if it is exactly a generation path of `job_id`.
pub(super) fn accepted_fence(job_id: i64, accepted: &str) -> Result<i64, MirrorError> {
    let foreign = || MirrorError::ForeignAccepted {
        job_id,
        accepted: accepted.to_string(),
    };
    let (dir, name) = accepted.rsplit_once('/').ok_or_else(foreign)?;
    if dir != doc_rel(job_id)? {
        return Err(foreign());
    }
    parse_generation(name).ok_or_else(foreign)
}

/// The generations a cleanup keeps: the accepted one (which must be exactly a
/// generation path of this job) and the current claim's.
fn kept_fences(job_id: i64, keep: &Keep) -> Result<[Option<i64>; 2], MirrorError> {
    let accepted = match &keep.accepted {
        Some(path) => Some(accepted_fence(job_id, path)?),
        None => None,
    };
    if let Some(fence) = keep.current_fence {
        check_ids(job_id, fence)?;
    }
    Ok([accepted, keep.current_fence])
}

/// Report for a document whose row is gone: everything is kept, nothing deleted.
pub(super) fn report_untouched(job_id: i64, rel_dir: &str, entries: &[(String, Kind)]) -> CleanupReport {
    let mut report = CleanupReport {
        missing_rows: vec![job_id],
        ..CleanupReport::default()
    };
    for (name, kind) in entries {
        let rel = format!("{rel_dir}/{name}");
        match kind {
            Kind::Lock => {}
            Kind::Unknown => report.unknown.push(rel),
            Kind::Generation(_) | Kind::Temp => report.kept.push(rel),
        }
    }
    report
}

/// What a cleanup keeps of one document directory, and until when it may delete.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stale {
    /// Generations kept: the accepted one, the current claim's.
    keep_fences: [Option<i64>; 2],
    /// A claim whose temp files are kept (it may be writing them).
    keep_temps_of: Option<i64>,
    /// No deletion after this (the fence that allowed it may be gone).
    deadline: Option<Instant>,
    dry_run: bool,
}

/// Deletes (unless dry run) every temp and every generation whose fence is not kept,
/// and keeps the temp files of `keep_temps_of`. Past the deadline it stops and
/// says so (`false`): the rest is left for a later cleanup.
pub(super) fn delete_stale(
    dir: &Path,
    rel_dir: &str,
    entries: &[(String, Kind)],
    rule: Stale,
) -> Result<(CleanupReport, bool), MirrorError> {
    let Stale {
        keep_fences,
        keep_temps_of,
        deadline,
        dry_run,
    } = rule;
    let mut report = CleanupReport::default();
    for (name, kind) in entries {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok((report, false));
        }
        let rel = format!("{rel_dir}/{name}");
        match *kind {
            Kind::Lock => continue,
            Kind::Unknown => report.unknown.push(rel),
            Kind::Generation(f) if keep_fences.contains(&Some(f)) => report.kept.push(rel),
            Kind::Temp if keep_temps_of.is_some() && temp_fence(name) == keep_temps_of => {
                report.kept.push(rel)
            }
            Kind::Generation(_) | Kind::Temp => {
                if !dry_run {
                    remove_if_present(&dir.join(name))?;
                }
                report.removed.push(rel);
            }
        }
    }
    Ok((report, true))
}

/// Removes a document directory that holds nothing but `.lock`, while we hold its exclusive lock.
/// Safe against waiting lockers because they re-check the `.lock` inode after locking and retry.
pub(super) fn prune_doc_dir(dir: &Path) -> Result<(), MirrorError> {
    let lock_path = dir.join(LOCK_NAME);
    remove_if_present(&lock_path)?;
    remove_dir_if_empty(dir)?;
    for shard in dir.ancestors().skip(1).take(2) {
        remove_dir_if_empty(shard)?;
    }
    Ok(())
}

impl Mirror {
    /// Removes stale generations and temp files of one document. The exclusive lock is taken
    /// before `keep` runs, so the row it reads cannot be older than any file on disk. A lookup
    /// error or a missing row deletes nothing. A missing document directory returns an empty
    /// report without calling `keep`.
    pub fn cleanup<E: From<MirrorError>>(
        &self,
        job_id: i64,
        keep: impl FnOnce() -> Result<Option<Keep>, E>,
    ) -> Result<CleanupReport, E> {
        let opts = CleanOpts {
            dry_run: false,
            prune: false,
        };
        self.clean_doc(job_id, opts, keep)
    }

    /// Whether document `job_id`'s directory holds nothing but `accepted` (a
    /// generation's path relative to the root, as a completion records it) and
    /// the lock file. Then no cleanup could delete anything, whatever the row
    /// says, and the worker that just had `accepted` accepted skips the lock and
    /// the row read. Read without the lock: a file a writer adds meanwhile is
    /// its own, which a cleanup would keep anyway.
    pub fn holds_only(&self, job_id: i64, accepted: &str) -> Result<bool, MirrorError> {
        let rel = doc_rel(job_id)?;
        let Some(name) = accepted
            .strip_prefix(rel.as_str())
            .and_then(|r| r.strip_prefix('/'))
        else {
            return Ok(false);
        };
        let entries = scan_doc(&self.root.join(&rel))?;
        Ok(entries.iter().all(|(entry, kind)| match kind {
            Kind::Lock => true,
            Kind::Generation(_) => entry == name,
            Kind::Temp | Kind::Unknown => false,
        }))
    }

    /// Runs cleanup for every document directory under the root (used by `gc`); stops at the
    /// first error. A dry run reports in `removed` what would be deleted and deletes nothing.
    /// Unrecognised entries are left alone and reported. A real sweep also removes document
    /// directories left empty (and then-empty shard directories), and `.probe-*` files that a
    /// killed [`Mirror::open`] left in the root. A document whose lock another process holds
    /// is skipped and listed in [`CleanupReport::busy`]; the sweep goes on.
    pub fn sweep<E: From<MirrorError>>(
        &self,
        dry_run: bool,
        mut keep: impl FnMut(i64) -> Result<Option<Keep>, E>,
    ) -> Result<CleanupReport, E> {
        let opts = CleanOpts {
            dry_run,
            prune: !dry_run,
        };
        self.sweep_each(dry_run, |job_id| self.clean_doc(job_id, opts, || keep(job_id)))
    }

    /// The walk of [`Mirror::sweep`] with each document's cleanup done by `clean`
    /// (the PostgreSQL edition's: under the row lock, then [`Mirror::cleanup_held`]).
    /// Probe leftovers are removed (unless `dry_run`) and unknown entries reported.
    pub fn sweep_each<E: From<MirrorError>>(
        &self,
        dry_run: bool,
        mut clean: impl FnMut(i64) -> Result<CleanupReport, E>,
    ) -> Result<CleanupReport, E> {
        let (docs, probes, unknown) = self.find_docs()?;
        let mut report = CleanupReport {
            unknown,
            ..CleanupReport::default()
        };
        for probe in probes {
            if !dry_run {
                remove_if_present(&self.root.join(&probe))?;
            }
            report.removed.push(probe);
        }
        for job_id in docs {
            report.merge(clean(job_id)?);
        }
        Ok(report)
    }

    /// Cleanup of one document whose database row lock the caller holds
    /// ([`Fencing::RowLocks`]); `keep` was read under that lock (`None`: the
    /// row does not exist, and nothing is deleted). Without a file lock a
    /// writer of the current claim may be mid-write, so its temp files are
    /// kept with its generation, and a document directory is pruned (by a
    /// real sweep, `prune`) only when no claim is current: a current claim's
    /// writer may have just made it. Everything else stale goes, as in
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
        let dir = self.doc_dir(job_id)?;
        if !is_real_dir(&dir)? {
            return Ok(CleanupReport::default());
        }
        let rel_dir = doc_rel(job_id)?;
        let entries = scan_doc(&dir)?;
        let Some(keep) = keep else {
            return Ok(report_untouched(job_id, &rel_dir, &entries));
        };
        let keep_fences = kept_fences(job_id, &keep)?;
        let rule = Stale {
            keep_fences,
            keep_temps_of: keep.current_fence,
            deadline: Some(deadline),
            dry_run,
        };
        let (mut report, finished) = delete_stale(&dir, &rel_dir, &entries, rule)?;
        if !finished {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            report.busy.push(job_id);
            return Ok(report);
        }
        let idle = keep.current_fence.is_none();
        if prune && !dry_run && idle && report.kept.is_empty() && report.unknown.is_empty() {
            prune_doc_dir(&dir)?;
        }
        Ok(report)
    }

    fn clean_doc<E: From<MirrorError>>(
        &self,
        job_id: i64,
        opts: CleanOpts,
        keep: impl FnOnce() -> Result<Option<Keep>, E>,
    ) -> Result<CleanupReport, E> {
        if self.fencing != Fencing::FileLocks {
            return Err(MirrorError::NotFileLocked {
                root: self.root.clone(),
            }
            .into());
        }
        let dir = self.doc_dir(job_id)?;
        if !is_real_dir(&dir)? {
            return Ok(CleanupReport::default());
        }
        // Lock first, then read the row: see the module docs. A dry run does not create `.lock`.
        let lock = match lock_doc(&dir, LockMode::Exclusive, !opts.dry_run, CLEANUP_LOCK_WAIT) {
            Err(e) if e.is_busy() => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(CleanupReport {
                    busy: vec![job_id],
                    ..CleanupReport::default()
                });
            }
            locked => locked?,
        };
        let keep = keep()?;
        let rel_dir = doc_rel(job_id)?;
        let entries = scan_doc(&dir)?;
        let Some(keep) = keep else {
            return Ok(report_untouched(job_id, &rel_dir, &entries));
        };
        let keep_fences = kept_fences(job_id, &keep)?;
        // Under the exclusive lock no writer is mid-write: every temp is
        // stale, and the lock holds however long the deletions take.
        let rule = Stale {
            keep_fences,
            keep_temps_of: None,
            deadline: None,
            dry_run: opts.dry_run,
        };
        let (report, _) = delete_stale(&dir, &rel_dir, &entries, rule)?;
        if opts.prune && lock.is_some() && report.kept.is_empty() && report.unknown.is_empty() {
            prune_doc_dir(&dir)?;
        }
        Ok(report)
    }

    /// Job ids of all well-formed document directories, the probe files left in the root, plus
    /// every entry that does not fit the layout (reported, never descended into or deleted).
    fn find_docs(&self) -> Result<Found, MirrorError> {
        let (mut docs, mut probes, mut unknown) = (Vec::new(), Vec::new(), Vec::new());
        for (top, top_is_dir) in list_dir(&self.root)? {
            if !top_is_dir && self.is_probe(&top)? {
                probes.push(top);
                continue;
            }
            if !top_is_dir || !is_shard_name(&top, false) {
                unknown.push(top);
                continue;
            }
            for (mid, mid_is_dir) in list_dir(&self.root.join(&top))? {
                let rel_mid = format!("{top}/{mid}");
                if !mid_is_dir || !is_shard_name(&mid, true) {
                    unknown.push(rel_mid);
                    continue;
                }
                for (leaf, leaf_is_dir) in list_dir(&self.root.join(&rel_mid))? {
                    let rel = format!("{rel_mid}/{leaf}");
                    match parse_doc_dir(&rel, &leaf, leaf_is_dir) {
                        Some(job_id) => docs.push(job_id),
                        None => unknown.push(rel),
                    }
                }
            }
        }
        Ok((docs, probes, unknown))
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
