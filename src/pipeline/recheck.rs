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
//!
//! A shard the last check found whole, and whose directory has not changed
//! since, is passed over while none of its documents has been written in
//! the store since either (`CheckedShards`, DESIGN §9a): an unchanged rerun
//! then lists nothing, and one after a few edits only their shards.

use std::collections::HashMap;

use crate::error::Result;
use crate::job::JobId;
use crate::mirror::{ListedResults, Mirror, ResultFile, ShardStamp};
use crate::store::{Store, CHECKED_SHARDS};

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
    /// Shards passed over: their directory was as the last check that found
    /// all of their results there left it (see [`ShardStamp`]).
    pub shards_as_checked: u64,
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

/// [`recheck_results`], calling `wait` before each document it queues again
/// and before it records the shards it found whole: beside a discovery, the
/// stats overlap it and the writes come after it (the caller's `wait`
/// returns once it has ended), so the discovery never meets a document this
/// queued and counts it as one left from an earlier run.
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
    let mut shards = CheckedShards::read(store, mirror);
    'pages: loop {
        let page = store.accepted_page(after, shards.rows_to_read(after))?;
        if page.is_empty() {
            break;
        }
        for row in page {
            after = row.id;
            match shards.enter(Mirror::shard_of(row.id)) {
                Shard::AsChecked => {
                    // Its other results too: the next page starts past the shard.
                    out.shards_as_checked += 1;
                    after = Mirror::last_id_of_shard(Mirror::shard_of(row.id));
                    continue 'pages;
                }
                // Listed after its stamp, not before (a result of another
                // shard's row may have had it listed already).
                Shard::New => results.forget_listing(),
                Shard::Same => {}
            }
            let path = row.result_path.as_str();
            out.checked += 1;
            if !Mirror::in_own_shard(row.id, path) {
                shards.not_whole();
            }
            let damage = match results.look(path, row.result_bytes) {
                Ok(file) => Damage::of(file),
                Err(e) => {
                    shards.not_whole();
                    if out.unchecked.len() < NAMED {
                        out.unchecked
                            .push(format!("{}: {path}: {e}", doc_name(store, row.id)?));
                    }
                    None
                }
            };
            let Some(damage) = damage else { continue };
            shards.not_whole();
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
    if shards.stamps {
        wait();
        shards.record(store);
    }
    Ok(out)
}

/// The most history lines written since the stamps' mark that a check
/// reads to tell which shards they left as they were; past it, every
/// shard is looked at. A line costs far less to read than a result to
/// look at, and a run that wrote this many looks at most shards anyway.
const MOST_LINES_SINCE: i64 = 200_000;

/// What the check does with a shard's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shard {
    /// Its directory is as the last check that found it whole left it: its
    /// results are passed over.
    AsChecked,
    /// Its results are looked at, from this one on.
    New,
    /// The shard of the result before: looked at.
    Same,
}

/// The shards a check may pass over and the ones it leaves stamped (see
/// [`ShardStamp`](crate::mirror::ShardStamp)). A shard is stamped when all
/// of its results were there, each a file of its own shard, and its
/// directory's times had settled; its stamp is taken before its listing,
/// so a change made while it was looked at is a change the next check sees.
/// And only when the store was quiet: no history line written during the
/// check (no claim or completion came in between) and no document under a
/// claim at its end. A result accepted later then comes from a later claim,
/// whose file is renamed into the shard after the stamp and changes it;
/// without that, a claim's file renamed and deleted before the stamp and
/// accepted after it would be missing in a shard passed over. The stamps
/// are kept with the store's history mark, and a check passes a shard over
/// only if no document of it has had a history line since: once one was
/// claimed, completed or queued again, its shard is looked at again, so a
/// mirror rolled back to a snapshot (the same inodes and times) cannot
/// hide a result accepted after the stamps. The other shards keep their
/// stamps, so a rerun after a few edits lists only the shards they are in.
struct CheckedShards<'m> {
    mirror: &'m Mirror,
    /// Shards are stamped here at all ([`Mirror::stamps_shards`]).
    stamps: bool,
    /// The store's [`history_mark`](Store::history_mark) when the check began.
    mark: Option<String>,
    /// The stamps the last check left, of the shards in which no document
    /// was written since ([`valid_stamps`]).
    recorded: HashMap<i64, String>,
    /// The mark the last check left its stamps at, if it left any setting.
    left_at: Option<String>,
    /// Shards passed over, with their stamp (still the recorded one).
    passed: HashMap<i64, String>,
    /// Shards found whole by this check, with their stamp.
    verified: HashMap<i64, String>,
    /// The shard whose results are being looked at: its number, its stamp
    /// taken before its listing, and whether all were there so far.
    looking: Option<(i64, Option<ShardStamp>, bool)>,
    /// The time of the check, from the store's clock (the system's, but
    /// for tests).
    now_ms: i64,
}

impl<'m> CheckedShards<'m> {
    /// What the last check left; nothing (every shard looked at, none
    /// stamped) where shards are not stamped or the store cannot say.
    fn read(store: &Store, mirror: &'m Mirror) -> Self {
        let stamps = mirror.stamps_shards();
        let mark = stamps.then(|| store.history_mark().ok().flatten()).flatten();
        let (recorded, left_at) = match &mark {
            Some(mark) => {
                let setting = store.meta(CHECKED_SHARDS).ok().flatten().unwrap_or_default();
                valid_stamps(store, &setting, mark)
            }
            None => (HashMap::new(), None),
        };
        CheckedShards {
            mirror,
            stamps: mark.is_some(),
            mark,
            recorded,
            left_at,
            passed: HashMap::new(),
            verified: HashMap::new(),
            looking: None,
            now_ms: store.now(),
        }
    }

    /// How many rows the next page after `after` reads: where shards are
    /// stamped, one to find the next shard with results, then the rest of
    /// that shard's ids at most, so a shard passed over costs one row read.
    fn rows_to_read(&self, after: i64) -> i64 {
        if !self.stamps {
            return PAGE;
        }
        match self.looking {
            Some((shard, _, _)) if after < Mirror::last_id_of_shard(shard) => {
                PAGE.min(Mirror::last_id_of_shard(shard) - after)
            }
            _ => 1,
        }
    }

    /// The check reaches a result of shard `shard` (in id order).
    fn enter(&mut self, shard: i64) -> Shard {
        if self.looking.as_ref().is_some_and(|(s, _, _)| *s == shard) {
            return Shard::Same;
        }
        self.leave();
        if !self.stamps {
            self.looking = Some((shard, None, false));
            return Shard::New;
        }
        let now = self.mirror.shard_stamp(shard);
        if let (Some(now), Some(recorded)) = (&now, self.recorded.get(&shard)) {
            if now.text == *recorded {
                self.passed.insert(shard, now.text.clone());
                return Shard::AsChecked;
            }
        }
        self.looking = Some((shard, now, true));
        Shard::New
    }

    /// A result of the shard being looked at was not there, or could not be
    /// looked at, or is not a file of its shard: the shard is not stamped.
    fn not_whole(&mut self) {
        if let Some((_, _, whole)) = self.looking.as_mut() {
            *whole = false;
        }
    }

    /// The check is past the shard it was looking at: stamp it if it was
    /// whole and its times had settled.
    fn leave(&mut self) {
        if let Some((shard, Some(stamp), true)) = self.looking.take() {
            if stamp.settled_at(self.now_ms) {
                self.verified.insert(shard, stamp.text);
            }
        }
    }

    /// Leave the stamps of the shards passed over and found whole, with the
    /// mark, when the store was quiet and they are not already what the
    /// setting says at this mark.
    /// They only spare the next check work: a store that cannot say it was
    /// quiet, or cannot take them (read-only, full), leaves that check to
    /// look at more.
    fn record(mut self, store: &Store) {
        self.leave();
        let Some(mark) = self.mark.take() else {
            return;
        };
        let quiet = store.history_mark().ok().flatten().as_ref() == Some(&mark)
            && store.counts_extracting().ok() == Some(0);
        let mut kept = self.passed;
        kept.extend(self.verified);
        // Nothing new to say: the same stamps at this mark, or none where
        // there was no setting.
        let same = kept == self.recorded && self.left_at.as_ref().map_or(kept.is_empty(), |at| *at == mark);
        if !quiet || same {
            return;
        }
        let mut shards: Vec<_> = kept.into_iter().collect();
        shards.sort();
        let mut text = format!("mark={mark}\n");
        for (shard, stamp) in shards {
            text.push_str(&format!("{shard}={stamp}\n"));
        }
        if let Err(e) = store.set_meta(CHECKED_SHARDS, &text) {
            tracing::debug!(target: "leasehold::recheck", error = %e, "the checked shards were not recorded");
        }
    }
}

/// The stamps of a [`CHECKED_SHARDS`] setting that still hold at history
/// mark `mark`, and the mark the setting was left at: all of them when it
/// is `mark`; when it is an earlier one, those of the shards in which no
/// document has had a history line since ([`Store::history_docs_since`]);
/// none when that cannot be said. A line that does not read as a stamp is
/// left out: its shard is looked at again.
fn valid_stamps(store: &Store, text: &str, mark: &str) -> (HashMap<i64, String>, Option<String>) {
    let mut lines = text.lines();
    let Some(left_at) = lines.next().and_then(|l| l.strip_prefix("mark=")) else {
        return (HashMap::new(), None);
    };
    let mut stamps: HashMap<i64, String> = lines
        .filter_map(|line| {
            let (shard, stamp) = line.split_once('=')?;
            Some((shard.parse().ok()?, stamp.to_owned()))
        })
        .collect();
    if left_at != mark {
        match store.history_docs_since(left_at, MOST_LINES_SINCE) {
            Ok(Some(written)) => {
                for doc in written {
                    stamps.remove(&Mirror::shard_of(doc));
                }
            }
            _ => stamps.clear(),
        }
    }
    (stamps, Some(left_at.to_owned()))
}
