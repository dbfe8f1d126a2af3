//! The reads' vocabulary, and the row mappings both engines share: a
//! document, a history line, a lease built from the columns of a row of
//! either engine ([`Columns`]). The statements are each engine's
//! (`sqlite/read.rs`, `postgres/read.rs`, [`JobReads`]): one short statement
//! each.

use super::driver::Rows;
use crate::clock::Millis;
use crate::job::{Counts, HistoryEntry, Job, JobFilter, LiveLease, Status, UnknownStatus};

/// What a scan reads of a known document, after its key where it asks for
/// it: [`KnownSource`]'s fingerprint, whether its version is a content
/// hash, and whether it waits for work (queued, retrying, under a claim).
macro_rules! known_source_columns {
    () => {
        "source_stat, version LIKE 'sha256:%', status IN ('discovered', 'retrying', 'extracting')"
    };
}
pub(crate) use known_source_columns;

/// A document's columns, in the order [`job_from`] reads them.
pub(crate) const JOB_COLUMNS: &str = "id, doc_key, version, status, owner_token, owner_worker, fence,
    lease_expires_at, attempts, max_attempts, retry_at, last_error, result_path, checksum,
    source_gone, created_at, updated_at, lost_leases, result_bytes, no_text, title, author, doc_date, pages, language";

/// A history line's columns, in the order [`history_entry_from`] reads them.
pub(crate) const HISTORY_COLUMNS: &str = "job_id, at, event, token, fence, detail";

/// A live lease's columns, in the order [`live_lease_from`] reads them.
pub(crate) const LEASE_COLUMNS: &str = "id, doc_key, owner_token, owner_worker, fence, lease_expires_at";

/// One result row of either engine, read column by column (from 0).
pub(crate) trait Columns {
    /// The engine's error.
    type Error;
    /// An integer column.
    fn int(&self, i: usize) -> Result<i64, Self::Error>;
    /// An integer column that may be NULL.
    fn opt_int(&self, i: usize) -> Result<Option<i64>, Self::Error>;
    /// A text column.
    fn text(&self, i: usize) -> Result<String, Self::Error>;
    /// A text column that may be NULL.
    fn opt_text(&self, i: usize) -> Result<Option<String>, Self::Error>;
    /// A boolean column.
    fn flag(&self, i: usize) -> Result<bool, Self::Error>;
    /// The error for text column `i` holding no status the store writes.
    fn not_a_status(&self, i: usize, e: UnknownStatus) -> Self::Error;

    /// A status column.
    fn status(&self, i: usize) -> Result<Status, Self::Error> {
        self.text(i)?.parse().map_err(|e| self.not_a_status(i, e))
    }
}

/// What [`ReadRows::each_row`] does with each row.
pub(crate) type EachRow<'a, E> = dyn FnMut(&dyn Columns<Error = E>) -> Result<(), E> + 'a;

/// A read connection that runs a statement without parameters and hands
/// over each row of its answer.
pub(crate) trait ReadRows: Rows {
    /// Run `sql`; `each` of its rows in turn.
    fn each_row(&mut self, sql: &'static str, each: &mut EachRow<'_, Self::Error>)
        -> Result<(), Self::Error>;
}

/// The reads of documents and leases each engine answers in its own SQL.
/// `granted_by`: a lease granted after it is over (the clock went back),
/// now plus the engine's allowance for skewed clocks.
pub(crate) trait JobReads: Rows {
    /// Document `id`.
    fn job_by_id(&mut self, id: i64) -> Result<Option<Job>, Self::Error>;
    /// The document of `key`.
    fn job_by_key(&mut self, key: &str) -> Result<Option<Job>, Self::Error>;
    /// At most `n` documents after id `after` in id order, those `filter`
    /// takes.
    fn jobs_after(&mut self, filter: &JobFilter, after: i64, n: i64) -> Result<Vec<Job>, Self::Error>;
    /// Document `id`'s history, oldest first.
    fn history(&mut self, id: i64) -> Result<Vec<HistoryEntry>, Self::Error>;
    /// The documents per status.
    fn counts(&mut self) -> Result<Counts, Self::Error>;
    /// The documents per status, the dead and retrying split by why.
    fn totals(&mut self) -> Result<Totals, Self::Error>;
    /// Leases not over at `now`, soonest expiry first.
    fn live_leases(&mut self, now: Millis, granted_by: Millis) -> Result<Vec<LiveLease>, Self::Error>;
    /// What [`next_claimable_at`] decides from.
    fn claimable(&mut self, granted_by: Millis) -> Result<Claimable, Self::Error>;
    /// Documents under a claim.
    fn count_extracting(&mut self) -> Result<u64, Self::Error>;
    /// How many documents wait for a claim or are under one (discovered,
    /// retrying, extracting), counted on the partial indexes of those
    /// statuses: not a scan of every row, as [`JobReads::counts`] is.
    fn count_pending(&mut self) -> Result<u64, Self::Error>;
}

/// [`JobReads::count_pending`]'s statement, the same text for both engines:
/// each count reads the partial index of its status.
pub(crate) const COUNT_PENDING: &str = "SELECT (SELECT count(*) FROM jobs WHERE status = 'discovered')
     + (SELECT count(*) FROM jobs WHERE status = 'retrying')
     + (SELECT count(*) FROM jobs WHERE status = 'extracting')";

/// [`JobReads::totals`]' statement, the same text for both engines: one
/// row of counts, each but the first read from the partial index of its
/// state (schema version 10); `indexed` is what the others leave of the
/// first ([`Totals::from_counts`]).
pub(crate) const TOTALS: &str = "SELECT (SELECT count(*) FROM jobs),
     (SELECT count(*) FROM jobs WHERE status = 'discovered'),
     (SELECT count(*) FROM jobs WHERE status = 'extracting'),
     (SELECT count(*) FROM jobs WHERE status = 'retrying'),
     (SELECT count(*) FROM jobs WHERE status = 'retrying' AND parked_on IS NOT NULL),
     (SELECT count(*) FROM jobs WHERE status = 'dead' AND NOT source_gone),
     (SELECT count(*) FROM jobs WHERE status = 'dead' AND source_gone),
     (SELECT count(*) FROM jobs WHERE no_text IS NOT NULL AND status = 'indexed')";

/// What decides when a claim could next take something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claimable {
    /// A document waits for its first claim.
    pub discovered: bool,
    /// A lease was granted after `granted_by`: over already.
    pub granted_ahead: bool,
    /// The first retry due.
    pub retry: Option<Millis>,
    /// The first lease to expire.
    pub lease: Option<Millis>,
}

/// When a claim could take something: `Some(t <= now)` now; `Some(t)` the
/// earliest time something becomes claimable; `None` nothing will without
/// a new enqueue.
pub(crate) fn next_claimable_at(c: Claimable, now: Millis) -> Option<Millis> {
    if c.discovered || c.granted_ahead {
        return Some(now);
    }
    earliest(c.retry, c.lease)
}

/// A size column as a byte count (a negative one is none).
pub(crate) fn bytes(b: Option<i64>) -> Option<u64> {
    b.and_then(|b| u64::try_from(b).ok())
}

/// A document from the [`JOB_COLUMNS`] of a row.
pub(crate) fn job_from<C: Columns + ?Sized>(r: &C) -> Result<Job, C::Error> {
    Ok(Job {
        id: r.int(0)?,
        key: r.text(1)?,
        version: r.text(2)?,
        status: r.status(3)?,
        owner_token: r.opt_text(4)?,
        owner_worker: r.opt_text(5)?,
        fence: r.int(6)?,
        lease_expires_at: r.opt_int(7)?,
        attempts: r.int(8)?,
        max_attempts: r.int(9)?,
        retry_at: r.opt_int(10)?,
        last_error: r.opt_text(11)?,
        result_path: r.opt_text(12)?,
        checksum: r.opt_text(13)?,
        source_gone: r.flag(14)?,
        created_at: r.int(15)?,
        updated_at: r.int(16)?,
        lost_leases: r.int(17)?,
        result_bytes: bytes(r.opt_int(18)?),
        no_text: r.opt_text(19)?,
        title: r.opt_text(20)?,
        author: r.opt_text(21)?,
        doc_date: r.opt_text(22)?,
        pages: r.opt_int(23)?.and_then(|n| u32::try_from(n).ok()),
        language: r.opt_text(24)?,
    })
}

/// A history line from the [`HISTORY_COLUMNS`] of a row.
pub(crate) fn history_entry_from<C: Columns + ?Sized>(r: &C) -> Result<HistoryEntry, C::Error> {
    Ok(HistoryEntry {
        job_id: r.int(0)?,
        at: r.int(1)?,
        event: r.text(2)?,
        token: r.opt_text(3)?,
        fence: r.opt_int(4)?,
        detail: r.opt_text(5)?,
    })
}

/// A live lease from the [`LEASE_COLUMNS`] of a row.
pub(crate) fn live_lease_from<C: Columns + ?Sized>(r: &C) -> Result<LiveLease, C::Error> {
    Ok(LiveLease {
        id: r.int(0)?,
        key: r.text(1)?,
        owner_token: r.text(2)?,
        owner_worker: r.opt_text(3)?,
        fence: r.int(4)?,
        lease_expires_at: r.int(5)?,
    })
}

/// Count `n` documents of status `status` (a name no status has is skipped).
/// `[all, without text]`: `n[1]` of them have no word in their text
/// (counted for the indexed only).
pub(crate) fn add_count(counts: &mut Counts, status: &str, gone: bool, n: [i64; 2]) {
    if let Ok(s) = status.parse::<Status>() {
        counts.add(s, gone, n[0].max(0) as u64);
        if s == Status::Indexed {
            counts.no_text += n[1].max(0) as u64;
        }
    }
}

/// When something becomes claimable if nothing is now: the earlier of the
/// first retry and the first lease to expire.
fn earliest(retry: Option<Millis>, lease: Option<Millis>) -> Option<Millis> {
    match (retry, lease) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What the store knows of a source file from the last scan that saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownSource {
    /// The fingerprint (size, modification time, link target).
    pub stat: String,
    /// Whether its version is a content hash; when not, the file was too
    /// large (or unreadable) then, and a scan whose limit it now fits hashes
    /// it, which queues it again.
    pub hashed: bool,
    /// Its document waits for work from an earlier command (queued, retrying,
    /// or under a claim): an unchanged source that is not done yet.
    pub pending: bool,
}

/// The store's documents after a command, as its summary reports them: the
/// per-status counts with the dead and the retrying split by why, so that a
/// rerun that did nothing still says what is dead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    /// Waiting for their first (or next) claim.
    pub queued: u64,
    /// Under a claim (live or expired lease).
    pub extracting: u64,
    /// With an accepted result.
    pub indexed: u64,
    /// Failed, waiting for their next attempt; includes `parked`.
    pub retrying: u64,
    /// Of the retrying: handed back until an upstream account can be used again.
    pub parked: u64,
    /// Given up on, their source still there: what `--fail-on-error` and
    /// `retry --dead` are about.
    pub dead: u64,
    /// Their source was removed: dead in the queue, but not a failure, and
    /// not counted in `dead` (`retry` cannot help; the source coming back
    /// queues it again).
    pub removed: u64,
    /// Of the indexed: their text holds no word (an empty file, a scan
    /// without a text layer). Nothing of them can be found by a search.
    pub no_text: u64,
}

impl Totals {
    /// The totals from [`TOTALS`]' row: every document, then each count in
    /// the order of the statement. Every row has one of the five statuses
    /// (the schema checks it), so the indexed are the rest.
    pub(crate) fn from_counts(counts: [i64; 8]) -> Totals {
        let [all, queued, extracting, retrying, parked, dead, removed, no_text] =
            counts.map(|n| n.max(0) as u64);
        Totals {
            queued,
            extracting,
            indexed: all.saturating_sub(queued + extracting + retrying + dead + removed),
            retrying,
            parked,
            dead,
            removed,
            no_text,
        }
    }
}
