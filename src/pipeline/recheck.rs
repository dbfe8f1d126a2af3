//! Accepted results that are no longer what was accepted: a result file
//! deleted, truncated, added to or rewritten after its completion.
//!
//! Such a result is forgotten and its document queued again
//! ([`Store::forget_result`]): its text leaves the search index and the next
//! worker extracts it anew, so nothing keeps answering with text the mirror no
//! longer holds. A rerun ([`recheck_results`]) looks for each in its
//! shard's listing ([`ListedResults`]: no read), and stats only what a
//! listing cannot tell (a name it lacks, a link or a directory in a
//! result's place, a result outside the shards): missing, or not of the
//! size the completion recorded, is damage. One cut, added to or rewritten
//! in place is left to what reads: `search` and `show` leave out such a
//! hit, `doctor --fix` and `reindex` read every result against its
//! checksum and forget it the same way ([`requeue_damaged`]).

use crate::error::Result;
use crate::job::JobId;
use crate::mirror::{ListedResults, Mirror, ResultFile};
use crate::store::Store;

/// Indexed rows read per query (no read snapshot is held across the
/// listings and stats).
const PAGE: i64 = 500;
/// How many requeued documents a report names.
const NAMED: usize = 20;

/// How an accepted result differs from what was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// The file is not there.
    Missing,
    /// The file was truncated or added to.
    Resized {
        /// Its size now.
        found: u64,
        /// The size its completion recorded.
        recorded: u64,
    },
    /// The file's SHA-256 is not the accepted one.
    Altered,
}

impl Damage {
    /// What a stat found, as damage (`None`: the result is as accepted).
    pub fn of(file: ResultFile) -> Option<Damage> {
        match file {
            ResultFile::Present => None,
            ResultFile::Missing => Some(Damage::Missing),
            ResultFile::Resized { found, recorded } => Some(Damage::Resized { found, recorded }),
        }
    }

    /// The damage, naming the result file (relative to the mirror root).
    pub fn describe(&self, result_path: &str) -> String {
        match self {
            Damage::Missing => format!("its result {result_path} is missing from the mirror"),
            Damage::Resized { found, recorded } => format!(
                "its result {result_path} is {found} bytes, not the {recorded} accepted (truncated or added to)"
            ),
            Damage::Altered => format!("its result {result_path} does not match its checksum (altered)"),
        }
    }
}

/// Forget document `id`'s damaged result `result_path` and queue the
/// document again, the reason going into its history. False when the row
/// holds another result by now (a newer one was accepted meanwhile).
pub fn requeue_damaged(store: &Store, id: i64, result_path: &str, damage: Damage) -> Result<bool> {
    let why = format!("{}; queued to be extracted again", damage.describe(result_path));
    store.forget_result(JobId(id), result_path, &why)
}

/// How document `key`'s accepted result `result_path` differs from what was
/// accepted, as far as one stat tells (`None`: as accepted, or it cannot be
/// told): for a search, which shows only hits whose text the mirror still
/// holds.
pub fn stat_damage(store: &Store, mirror: &Mirror, key: &str, result_path: &str) -> Result<Option<Damage>> {
    let recorded = store
        .job_by_key(key)?
        .filter(|job| job.result_path.as_deref() == Some(result_path))
        .and_then(|job| job.result_bytes);
    Ok(mirror
        .stat_result(result_path, recorded)
        .ok()
        .and_then(Damage::of))
}

/// Document `id` as a report's line names it, by its quoted key: the pages
/// a rerun reads leave the keys out, and only the few named documents need
/// one. A row gone meanwhile is named by its id.
fn doc_name(store: &Store, id: i64) -> Result<String> {
    Ok(store
        .job(JobId(id))?
        .map_or_else(|| format!("document {id}"), |job| format!("{:?}", job.key)))
}

/// What [`recheck_results`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Rechecked {
    /// Accepted results looked at.
    pub checked: u64,
    /// Documents queued again: their result was missing, or not a file of
    /// its recorded size.
    pub requeued: u64,
    /// The first of them, one line each: the key and why.
    pub named: Vec<String>,
    /// The first results that could not be looked at (an I/O error, a path
    /// that left the mirror), one line each; left as they are for `doctor`.
    pub unchecked: Vec<String>,
}

/// Look for every indexed document's accepted result; queue again each one
/// that is missing or, stat'ed, not of the recorded size (see the module
/// docs). Run beside or after a full discovery (`run` does it beside, on
/// its own thread, through [`recheck_results_writing_after`]): what both
/// leave indexed is unchanged and there as far as a listing can tell.
/// Beside one, a document the discovery also queues (changed) or marks gone
/// may be counted here too; the rows end the same either way.
///
/// # Failure
/// The store's errors; a result that cannot be looked at is listed, not an error.
pub fn recheck_results(store: &Store, mirror: &Mirror) -> Result<Rechecked> {
    recheck_results_writing_after(store, mirror, || ())
}

/// [`recheck_results`], calling `wait` before each document it queues again:
/// beside a discovery, the stats overlap it and the writes come after it (the
/// caller's `wait` returns once it has ended), so the discovery never meets
/// a document this queued and counts it as one left from an earlier run.
///
/// # Failure
/// As [`recheck_results`].
pub fn recheck_results_writing_after(
    store: &Store,
    mirror: &Mirror,
    mut wait: impl FnMut(),
) -> Result<Rechecked> {
    let mut out = Rechecked::default();
    let mut after = i64::MIN;
    let mut results = ListedResults::new(mirror);
    loop {
        let page = store.accepted_page(after, PAGE)?;
        let Some(last) = page.last() else {
            return Ok(out);
        };
        after = last.id;
        for row in page {
            let path = row.result_path.as_str();
            out.checked += 1;
            let damage = match results.look(path, row.result_bytes) {
                Ok(file) => Damage::of(file),
                Err(e) => {
                    if out.unchecked.len() < NAMED {
                        out.unchecked
                            .push(format!("{}: {path}: {e}", doc_name(store, row.id)?));
                    }
                    None
                }
            };
            let Some(damage) = damage else { continue };
            wait();
            if requeue_damaged(store, row.id, path, damage)? {
                out.requeued += 1;
                if out.named.len() < NAMED {
                    let doc = doc_name(store, row.id)?;
                    out.named.push(format!("{doc}: {}", damage.describe(path)));
                }
            }
        }
    }
}
