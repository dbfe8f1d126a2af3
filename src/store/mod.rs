//! The jobs table: the only code that writes SQL (DESIGN §3, §8).
//!
//! # Layout
//! - `open.rs`: validate the file, set WAL, migrate from `schema.sql`, build the pool.
//! - `write.rs`: claim and the fenced writes, each a function of (transaction, now).
//! - `queue.rs`: enqueue, requeue, marking vanished sources.
//! - `read.rs`: the reads.
//! - `gate.rs`: the auth gate's accounts, probes, pool holds and notices.
//! - `outbox.rs`: results waiting for the sink, and sending notices.
//! - `group.rs`: group commit of concurrent writes from one process.
//! - `turnstile.rs`: fair turns at the write lock between processes.
//!
//! Every write is one short `BEGIN IMMEDIATE` transaction that never touches the
//! file system. A `Store` is cheap to clone; clones share one pool and one
//! group-commit queue, so threads of a process should share clones, while separate
//! processes (or separate `Store::open`s) coordinate through SQLite alone.

mod gate;
mod group;
mod open;
mod outbox;
mod queue;
mod read;
mod turnstile;
mod write;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

pub use gate::{AccountState, Admission, Answer, GateChange, GateEvent, GatePolicy, ProbePermit};
pub use open::schema_version;
pub use outbox::{Drain, NoticeRecord, OutboxBatch, OutboxCap, OutboxItem, OutboxTotals, PendingNotice};
pub use queue::NewDoc;
pub use write::claim_candidate_queries;

use crate::clock::{duration_ms, Clock, Millis, SystemClock};
use crate::error::{is_retryable, Error, Result};
use crate::job::{Claim, Counts, Enqueued, Fenced, HistoryEntry, Job, JobId, LiveLease};
use group::GroupCommit;
use open::Pool;
use turnstile::Turnstile;
use write::{Owner, WriteOp, WriteOut};

/// `synchronous` pragma: NORMAL (durable across process crashes; a power loss
/// may lose the last commits) or FULL (every commit waits for an fsync).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    #[default]
    Normal,
    Full,
}

/// Retry delay after a failure: exponential from `base`, capped at `max`, with up
/// to `jitter` (0..1) of it taken off at random so that a burst of failures does
/// not come back as a burst.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(2),
            max: Duration::from_secs(600),
            jitter: 0.25,
        }
    }
}

impl Backoff {
    /// The delay before retry number `attempts` (1 = after the first failure).
    pub fn delay_ms(&self, attempts: i64) -> Millis {
        let exp = attempts.clamp(1, 40) - 1;
        let raw = duration_ms(self.base).saturating_mul(1i64 << exp.min(40));
        let capped = raw.min(duration_ms(self.max)).max(0);
        let jitter = self.jitter.clamp(0.0, 1.0);
        let off = (capped as f64 * jitter * fastrand::f64()) as i64;
        (capped - off).max(0)
    }
}

/// How a store behaves. Build with `StoreOptions::default()` and the setters.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How long a claim owns a document without renewing.
    pub lease: Duration,
    /// Claims a document may take before it is declared dead.
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub synchronous: Synchronous,
    /// Pooled connections (readers and the group-commit leader share them).
    pub pool_size: u32,
    /// How long one statement waits for the write lock before SQLite says BUSY.
    pub busy_timeout: Duration,
    /// How often the background thread checkpoints the WAL; `None` disables it.
    pub checkpoint_every: Option<Duration>,
    /// Where "now" comes from.
    pub clock: Arc<dyn Clock>,
    /// The cap of the outbox of results waiting for a sink.
    pub outbox: OutboxCap,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            lease: Duration::from_secs(30),
            max_attempts: 5,
            backoff: Backoff::default(),
            synchronous: Synchronous::Normal,
            pool_size: 8,
            busy_timeout: Duration::from_secs(5),
            checkpoint_every: Some(Duration::from_millis(250)),
            clock: Arc::new(SystemClock),
            outbox: OutboxCap {
                max_age_ms: 24 * 3600 * 1000,
                max_bytes: 256 * 1024 * 1024,
            },
        }
    }
}

impl StoreOptions {
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }
    pub fn backoff(mut self, b: Backoff) -> Self {
        self.backoff = b;
        self
    }
    pub fn synchronous(mut self, s: Synchronous) -> Self {
        self.synchronous = s;
        self
    }
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    pub fn checkpoint_every(mut self, every: Option<Duration>) -> Self {
        self.checkpoint_every = every;
        self
    }

    fn validate(&self) -> Result<()> {
        if self.lease.is_zero() {
            return Err(invalid("lease", "must be longer than zero"));
        }
        if self.max_attempts == 0 {
            return Err(invalid("max_attempts", "must be at least 1"));
        }
        if !(0.0..=1.0).contains(&self.backoff.jitter) {
            return Err(invalid("backoff jitter", "must be between 0 and 1"));
        }
        Ok(())
    }
}

fn invalid(what: &'static str, reason: &str) -> Error {
    Error::InvalidInput {
        what,
        reason: reason.into(),
    }
}

/// The parts of the options the write SQL needs.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub lease_ms: Millis,
    pub backoff: Backoff,
    pub outbox: OutboxCap,
}

/// Wakes in-process workers when new work may be claimable.
#[derive(Default)]
struct WorkSignal {
    generation: Mutex<u64>,
    changed: Condvar,
}

/// Bounded retries of a whole transaction after BUSY/LOCKED (beyond busy_timeout).
const BUSY_RETRIES: u32 = 10;

/// A handle on one SQLite file. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    pool: Pool,
    opts: StoreOptions,
    policy: Policy,
    group: GroupCommit<WriteOp, WriteOut>,
    turnstile: Arc<Turnstile>,
    signal: WorkSignal,
    // Held for its Drop: stops and joins the checkpoint thread with the last handle.
    _checkpointer: Option<Checkpointer>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.inner.path).finish()
    }
}

impl Store {
    /// Open (creating if needed) the store at `path`.
    ///
    /// # Failure
    /// A missing directory, a read-only file or directory, a file that is not a
    /// SQLite database or is damaged, or a schema newer than this build: each a
    /// typed [`Error`] naming the path, and the file is left as it was.
    ///
    /// # Example
    /// ```
    /// use leasehold::{Store, StoreOptions, NewDoc};
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("q.db"), StoreOptions::default()).unwrap();
    /// store.enqueue(&NewDoc::new("a.txt", "v1")).unwrap();
    /// let claim = store.claim("w1").unwrap().expect("one document is claimable");
    /// assert!(store.complete(&claim, "r/a", "abc").unwrap().is_accepted());
    /// ```
    pub fn open(path: impl AsRef<Path>, opts: StoreOptions) -> Result<Store> {
        opts.validate()?;
        let path = path.as_ref().to_path_buf();
        let pool = open::open_pool(&path, &opts)?;
        let turnstile = Arc::new(Turnstile::open(&path, opts.busy_timeout));
        let checkpointer = opts.checkpoint_every.map(|every| {
            Checkpointer::start(
                pool.clone(),
                Arc::clone(&turnstile),
                wal_path(&path),
                every,
                opts.busy_timeout,
            )
        });
        let policy = Policy {
            lease_ms: duration_ms(opts.lease),
            backoff: opts.backoff,
            outbox: opts.outbox,
        };
        Ok(Store {
            inner: Arc::new(Inner {
                path,
                pool,
                opts,
                policy,
                group: GroupCommit::new(),
                turnstile,
                signal: WorkSignal::default(),
                _checkpointer: checkpointer,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.inner.opts
    }

    /// Now, from the injected clock.
    pub fn now(&self) -> Millis {
        self.inner.opts.clock.now_ms()
    }

    // ----- queue -----

    /// Enqueue one document; idempotent on its key (see [`NewDoc`]).
    pub fn enqueue(&self, doc: &NewDoc) -> Result<Enqueued> {
        check_key(&doc.key)?;
        let max = i64::from(self.inner.opts.max_attempts);
        let out = self.write_tx(|tx, now| queue::enqueue(tx, now, max, doc))?;
        if !matches!(out, Enqueued::Unchanged(_)) {
            self.notify_work();
        }
        Ok(out)
    }

    /// Enqueue many documents in one transaction; one outcome per document.
    pub fn enqueue_many(&self, docs: &[NewDoc]) -> Result<Vec<Enqueued>> {
        for d in docs {
            check_key(&d.key)?;
        }
        let max = i64::from(self.inner.opts.max_attempts);
        let out: Vec<Enqueued> =
            self.write_tx(|tx, now| docs.iter().map(|d| queue::enqueue(tx, now, max, d)).collect())?;
        if out.iter().any(|e| !matches!(e, Enqueued::Unchanged(_))) {
            self.notify_work();
        }
        Ok(out)
    }

    /// Requeue a settled document with fresh attempts; false if it was being
    /// extracted, was gone, or did not exist.
    pub fn requeue(&self, id: JobId, why: &str) -> Result<bool> {
        let done = self.write_tx(|tx, now| queue::requeue(tx, now, id.0, why))?;
        if done {
            self.notify_work();
        }
        Ok(done)
    }

    /// Requeue every dead document; returns how many.
    pub fn requeue_dead(&self, why: &str) -> Result<usize> {
        let n = self.write_tx(|tx, now| {
            let mut n = 0;
            for id in queue::dead_ids(tx)? {
                n += usize::from(queue::requeue(tx, now, id, why)?);
            }
            Ok(n)
        })?;
        if n > 0 {
            self.notify_work();
        }
        Ok(n)
    }

    /// Start a directory scan; its number stamps every document it sees.
    pub fn begin_scan(&self) -> Result<i64> {
        self.write_tx(|tx, _| queue::begin_scan(tx))
    }

    /// Record one batch of a scan in one transaction: enqueue `changed` (new or
    /// changed sources) and stamp them and `unchanged` keys as seen by `scan`.
    pub fn record_scan(&self, scan: i64, unchanged: &[String], changed: &[NewDoc]) -> Result<Vec<Enqueued>> {
        for d in changed {
            check_key(&d.key)?;
        }
        let max = i64::from(self.inner.opts.max_attempts);
        let out: Vec<Enqueued> = self.write_tx(|tx, now| {
            let mut out = Vec::with_capacity(changed.len());
            for d in changed {
                out.push(queue::enqueue(tx, now, max, d)?);
                queue::mark_seen(tx, scan, &d.key)?;
            }
            for k in unchanged {
                queue::mark_seen(tx, scan, k)?;
            }
            Ok(out)
        })?;
        if out.iter().any(|e| !matches!(e, Enqueued::Unchanged(_))) {
            self.notify_work();
        }
        Ok(out)
    }

    /// Finish scan `scan`: every present document it did not see is marked gone
    /// (dead, result forgotten, so cleanup removes its files). Returns how many.
    pub fn finish_scan(&self, scan: i64) -> Result<usize> {
        self.write_tx(|tx, now| queue::mark_unseen_gone(tx, now, scan))
    }

    /// The source fingerprint stored for each of `keys` (absent keys are left out).
    pub fn source_stats(&self, keys: &[String]) -> Result<std::collections::HashMap<String, String>> {
        self.read(|c| read::source_stats(c, keys))
    }

    /// A setting of this data directory (e.g. `source_root`).
    pub fn meta(&self, name: &str) -> Result<Option<String>> {
        use rusqlite::OptionalExtension;
        self.read(|c| {
            c.query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| r.get(0))
                .optional()
        })
    }

    /// Set `name` to `value` unless it is already set; returns the value in force.
    pub fn meta_set_once(&self, name: &str, value: &str) -> Result<String> {
        self.write_tx(|tx, _| {
            tx.execute(
                "INSERT INTO meta (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
                [name, value],
            )?;
            tx.query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| r.get(0))
        })
    }

    // ----- claims and fenced writes -----

    /// Claim one claimable document for `worker`, or `None` if there is none.
    pub fn claim(&self, worker: &str) -> Result<Option<Claim>> {
        Ok(self.claim_batch(worker, 1)?.pop())
    }

    /// Claim up to `n` documents in one transaction.
    pub fn claim_batch(&self, worker: &str, n: usize) -> Result<Vec<Claim>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let op = WriteOp::Claim {
            worker: worker.to_owned(),
            max: n,
        };
        match self.submit(op)? {
            WriteOut::Claims(c) => Ok(c),
            WriteOut::Fenced(_) => unreachable_out(),
        }
    }

    /// Extend the lease of `claim` from now. Fenced on id + token + extracting;
    /// an expired lease that nobody re-claimed can still be renewed.
    ///
    /// A renewal that would change nothing (the row was set in this same
    /// millisecond, typically by the claim or by the renewal before the previous
    /// stage, so its lease already runs to now + lease) is answered from a read
    /// that confirms the ownership, without a write transaction. Anything else,
    /// including a refusal (which history records), goes through the write.
    pub fn renew(&self, claim: &Claim) -> Result<Fenced> {
        let (now, lease_ms) = (self.now(), self.inner.policy.lease_ms);
        if self.read(|c| read::renewal_is_noop(c, claim.id.0, &claim.token, now, lease_ms))? {
            return Ok(Fenced::Accepted);
        }
        self.fenced(WriteOp::Renew(Owner::from(claim)))
    }

    /// Accept `result_path` (relative to the mirror root) and its SHA-256 as the
    /// document's result. Fenced; a rejection means someone else owns it now.
    pub fn complete(&self, claim: &Claim, result_path: &str, checksum: &str) -> Result<Fenced> {
        self.complete_op(claim, result_path, checksum, None)
    }

    fn complete_op(
        &self,
        claim: &Claim,
        path: &str,
        checksum: &str,
        delivery: Option<&str>,
    ) -> Result<Fenced> {
        let out = self.fenced(WriteOp::Complete {
            owner: Owner::from(claim),
            path: path.to_owned(),
            checksum: checksum.to_owned(),
            delivery: delivery.map(str::to_owned),
        })?;
        // Idle workers waiting to see whether the run is over look again.
        self.notify_work();
        Ok(out)
    }

    /// Settle many claims in one transaction; one outcome per claim, each fenced
    /// on its own token.
    pub fn complete_many(&self, done: &[(&Claim, &str, &str)]) -> Result<Vec<Fenced>> {
        let ops: Vec<WriteOp> = done
            .iter()
            .map(|(c, path, sum)| WriteOp::Complete {
                owner: Owner::from(*c),
                path: (*path).to_owned(),
                checksum: (*sum).to_owned(),
                delivery: None,
            })
            .collect();
        let policy = self.inner.policy.clone();
        self.write_tx(|tx, now| {
            ops.iter()
                .map(|op| match write::apply(tx, now, &policy, op)? {
                    WriteOut::Fenced(f) => Ok(f),
                    WriteOut::Claims(_) => Ok(Fenced::Accepted),
                })
                .collect()
        })
    }

    /// Record a failure: `retrying` with backoff, or `dead` when attempts are
    /// exhausted or `permanent`. Fenced.
    pub fn fail(&self, claim: &Claim, error: &str, permanent: bool) -> Result<Fenced> {
        let out = self.fenced(WriteOp::Fail {
            owner: Owner::from(claim),
            error: error.to_owned(),
            permanent,
        })?;
        self.notify_work();
        Ok(out)
    }

    /// Hand the document back without spending the attempt (shutdown). Fenced.
    pub fn release(&self, claim: &Claim, reason: &str) -> Result<Fenced> {
        self.release_op(claim, reason, None)
    }

    /// Hand the document back without spending the attempt, claimable again
    /// from `not_before` (a full disk, a locked credential: retrying sooner
    /// would only fail again). Fenced.
    pub fn release_until(&self, claim: &Claim, reason: &str, not_before: Millis) -> Result<Fenced> {
        self.release_op(claim, reason, Some(not_before))
    }

    fn release_op(&self, claim: &Claim, reason: &str, not_before: Option<Millis>) -> Result<Fenced> {
        let out = self.fenced(WriteOp::Release {
            owner: Owner::from(claim),
            reason: reason.to_owned(),
            not_before,
        })?;
        self.notify_work();
        Ok(out)
    }

    fn fenced(&self, op: WriteOp) -> Result<Fenced> {
        match self.submit(op)? {
            WriteOut::Fenced(f) => Ok(f),
            WriteOut::Claims(_) => unreachable_out(),
        }
    }

    /// [`Store::complete`], and when accepted, queue `text` for the sink in the
    /// same transaction: an accepted result is queued exactly once, a refused
    /// one never. The outbox cap ([`StoreOptions::outbox`]) is applied there too.
    pub fn complete_and_deliver(
        &self,
        claim: &Claim,
        result_path: &str,
        checksum: &str,
        text: &str,
    ) -> Result<Fenced> {
        self.complete_op(claim, result_path, checksum, Some(text))
    }

    // ----- the auth gate (DESIGN §6) -----

    /// May `holder` (a process) call the upstream with `account` now? See
    /// [`Admission`]. The holder is recorded with a granted probe slot.
    pub fn gate_admit(&self, account: &str, holder: &str, policy: &GatePolicy) -> Result<Admission> {
        self.write_tx(|tx, now| gate::admit(tx, now, policy, account, holder))
    }

    /// Record what the upstream answered a request made with `account`
    /// (`permit` set when it was the probe). Locks, unlocks and notices follow
    /// the rules of [`gate`](self).
    pub fn gate_report(
        &self,
        account: &str,
        permit: Option<&ProbePermit>,
        answer: &Answer,
        policy: &GatePolicy,
    ) -> Result<GateChange> {
        let change = self.write_tx(|tx, now| gate::report(tx, now, policy, account, permit, answer))?;
        if matches!(change, GateChange::Recovered { .. }) {
            self.notify_work();
        }
        Ok(change)
    }

    /// Open a locked account by hand; recorded in the gate's history with `by`.
    /// False if it was not locked.
    pub fn gate_unlock(&self, account: &str, by: &str) -> Result<bool> {
        let done = self.write_tx(|tx, now| gate::unlock(tx, now, account, by))?;
        self.notify_work();
        Ok(done)
    }

    /// Until when nobody should call the upstream with `account`, if not now
    /// (a read; see [`Admission`] for the write that decides).
    pub fn gate_blocked_until(&self, account: &str, recheck: Duration) -> Result<Option<Millis>> {
        let (now, recheck) = (self.now(), duration_ms(recheck));
        self.read(|c| gate::blocked_until(c, now, account, recheck))
    }

    /// Every account the database knows, with its state.
    pub fn gate_states(&self) -> Result<Vec<AccountState>> {
        let now = self.now();
        self.read(|c| gate::states(c, now))
    }

    /// The gate's history of `account`, oldest first.
    pub fn gate_history(&self, account: &str) -> Result<Vec<GateEvent>> {
        self.read(|c| gate::history(c, account))
    }

    /// Expiry check for `account` expiring on day `expires_on` (days since
    /// 1970-01-01): from `warn_days` before, one warning notice a day across
    /// processes. Returns the days left.
    pub fn gate_expiry(&self, account: &str, expires_on: i64, warn_days: i64) -> Result<i64> {
        self.write_tx(|tx, now| gate::expiry(tx, now, account, expires_on, warn_days))
    }

    /// The pool account `holder` uses now (sticky while its hold is renewed
    /// within `hold`), or `None` if `candidates` is empty.
    pub fn gate_hold(
        &self,
        holder: &str,
        candidates: &[String],
        hold: Duration,
        policy: &GatePolicy,
    ) -> Result<Option<String>> {
        let ms = duration_ms(hold);
        self.write_tx(|tx, now| gate::hold(tx, now, policy, holder, candidates, ms))
    }

    /// Let go of `holder`'s pool account.
    pub fn gate_unhold(&self, holder: &str) -> Result<()> {
        self.write_tx(|tx, _| gate::unhold(tx, holder))
    }

    // ----- notices -----

    /// Take the oldest due notice for sending by `sender` (for `lease`).
    pub fn notice_claim(&self, sender: &str, lease: Duration) -> Result<Option<PendingNotice>> {
        let ms = duration_ms(lease);
        self.write_tx(|tx, now| outbox::claim_notice(tx, now, sender, ms))
    }

    /// Record the outcome of sending `n`; a failure is tried again after `retry`.
    pub fn notice_done(&self, n: &PendingNotice, error: Option<&str>, retry: Duration) -> Result<()> {
        let ms = duration_ms(retry);
        self.write_tx(|tx, now| outbox::notice_sent(tx, now, n, error, ms))
    }

    /// Every notice, oldest first.
    pub fn notices(&self) -> Result<Vec<NoticeRecord>> {
        self.read(outbox::notices)
    }

    // ----- the outbox -----

    /// Claim the next batch of at most `n` results for the sink, for `lease`,
    /// if the shared pace allows one now; the next batch may go `interval` later.
    pub fn outbox_claim(&self, n: usize, lease: Duration, interval: Duration) -> Result<Drain> {
        let cap = self.inner.policy.outbox;
        let (lease, interval) = (duration_ms(lease), duration_ms(interval));
        self.write_tx(|tx, now| outbox::claim_batch(tx, now, &cap, n, lease, interval))
    }

    /// The batch got a 2xx: remove its rows. Returns how many were still ours.
    pub fn outbox_delivered(&self, batch: &OutboxBatch) -> Result<usize> {
        self.write_tx(|tx, _| outbox::delivered(tx, batch))
    }

    /// The batch was not delivered: its rows wait again; no batch before `not_before`.
    pub fn outbox_undelivered(&self, batch: &OutboxBatch, not_before: Millis) -> Result<()> {
        self.write_tx(|tx, _| outbox::undelivered(tx, batch, not_before))
    }

    /// Depth, bytes, dropped and delivered counts of the outbox.
    pub fn outbox_totals(&self) -> Result<OutboxTotals> {
        self.read(outbox::totals)
    }

    // ----- reads -----

    /// One document by id.
    pub fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.read(|c| read::job_by_id(c, id.0))
    }

    /// One document by key.
    pub fn job_by_key(&self, key: &str) -> Result<Option<Job>> {
        self.read(|c| read::job_by_key(c, key))
    }

    /// Everything that happened to a document, oldest first.
    pub fn history(&self, id: JobId) -> Result<Vec<HistoryEntry>> {
        self.read(|c| read::history(c, id.0))
    }

    /// Documents per status.
    pub fn counts(&self) -> Result<Counts> {
        self.read(read::counts)
    }

    /// Leases that have not run out, soonest expiry first.
    pub fn live_leases(&self) -> Result<Vec<LiveLease>> {
        let now = self.now();
        self.read(|c| read::live_leases(c, now))
    }

    /// When something is next claimable: `Some(t <= now)` now, `Some(t)` later,
    /// `None` not without a new enqueue.
    pub fn next_claimable_at(&self) -> Result<Option<Millis>> {
        let now = self.now();
        self.read(|c| read::next_claimable_at(c, now))
    }

    /// How many documents are being extracted (live or expired leases).
    pub fn counts_extracting(&self) -> Result<u64> {
        self.read(|c| {
            c.query_row("SELECT count(*) FROM jobs WHERE status = 'extracting'", [], |r| {
                r.get::<_, i64>(0)
            })
        })
        .map(|n| n.max(0) as u64)
    }

    /// Run SQLite's `quick_check` (or the full `integrity_check`); the problems found.
    pub fn check_integrity(&self, full: bool) -> Result<Vec<String>> {
        let sql = if full {
            "PRAGMA integrity_check"
        } else {
            "PRAGMA quick_check"
        };
        let lines = self.read(|c| {
            let mut stmt = c.prepare(sql)?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<rusqlite::Result<Vec<String>>>()
        })?;
        Ok(lines.into_iter().filter(|l| l != "ok").collect())
    }

    /// The journal mode in force (should be "wal").
    pub fn journal_mode(&self) -> Result<String> {
        self.read(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
    }

    /// Checkpoint the WAL now (also done periodically in the background).
    pub fn checkpoint(&self) -> Result<()> {
        self.read(|c| c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())))
    }

    // ----- waking workers -----

    /// A token for [`Store::wait_for_work`]: take it *before* looking for work,
    /// so that a wake-up between the look and the wait is not lost.
    pub fn work_token(&self) -> u64 {
        *self
            .inner
            .signal
            .generation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until another thread of this process enqueues, completes or hands
    /// back work after `token` was taken, or `timeout` passes. A condition
    /// variable, no polling.
    pub fn wait_for_work(&self, token: u64, timeout: Duration) {
        let s = &self.inner.signal;
        let g = s.generation.lock().unwrap_or_else(|e| e.into_inner());
        let _ = s
            .changed
            .wait_timeout_while(g, timeout, |g| *g == token)
            .map_err(|e| e.into_inner());
    }

    /// Wake every thread in [`Store::wait_for_work`].
    pub fn notify_work(&self) {
        let s = &self.inner.signal;
        *s.generation.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        s.changed.notify_all();
    }

    // ----- transactions -----

    fn submit(&self, op: WriteOp) -> Result<WriteOut> {
        self.inner.group.submit(op, |ops| self.commit_batch(ops))
    }

    /// Commit a group-commit batch: all in one transaction; if that fails for a
    /// reason other than contention, each op alone, so one bad op fails alone.
    fn commit_batch(&self, ops: &[&WriteOp]) -> Vec<Result<WriteOut>> {
        let policy = &self.inner.policy;
        let all: Result<Vec<WriteOut>> =
            self.write_tx(|tx, now| ops.iter().map(|op| write::apply(tx, now, policy, op)).collect());
        match all {
            Ok(outs) => outs.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) if ops.len() == 1 => vec![Err(e)],
            // Contention outlived the retries: replaying op by op would only
            // multiply the wait (and starve every heartbeat in the batch).
            Err(Error::Busy { path, attempts }) => ops
                .iter()
                .map(|_| {
                    Err(Error::Busy {
                        path: path.clone(),
                        attempts,
                    })
                })
                .collect(),
            Err(_) => ops
                .iter()
                .map(|op| self.write_tx(|tx, now| write::apply(tx, now, policy, op)))
                .collect(),
        }
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction with `now` read after the
    /// write lock is held; retry the whole transaction a bounded number of
    /// times, with jitter, when SQLite says BUSY/LOCKED past busy_timeout.
    pub(crate) fn write_tx<T>(
        &self,
        mut f: impl FnMut(&Connection, Millis) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let mut conn = self.conn()?;
        let _turn = self.inner.turnstile.enter();
        for attempt in 1..=BUSY_RETRIES {
            match self.try_write_tx(&mut conn, &mut f) {
                Ok(v) => return Ok(v),
                Err(e) if is_retryable(&e) => backoff_sleep(attempt),
                Err(e) => return Err(Error::from_sqlite(&self.inner.path, e)),
            }
        }
        Err(Error::Busy {
            path: self.inner.path.clone(),
            attempts: BUSY_RETRIES,
        })
    }

    fn try_write_tx<T>(
        &self,
        conn: &mut Connection,
        f: &mut impl FnMut(&Connection, Millis) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = self.now();
        match f(&tx, now) {
            // A failed COMMIT leaves the transaction open; dropping `tx` (inside
            // commit) issues the ROLLBACK.
            Ok(v) => tx.commit().map(|_| v),
            Err(e) => {
                let _ = tx.rollback();
                Err(e)
            }
        }
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let conn = self.conn()?;
        f(&conn).map_err(|e| Error::from_sqlite(&self.inner.path, e))
    }

    fn conn(&self) -> Result<r2d2::PooledConnection<r2d2_sqlite::SqliteConnectionManager>> {
        self.inner.pool.get().map_err(|source| Error::Pool {
            path: self.inner.path.clone(),
            source,
        })
    }
}

fn unreachable_out<T>() -> Result<T> {
    Err(Error::InvalidInput {
        what: "store operation",
        reason: "internal: answer of the wrong kind".into(),
    })
}

/// Keys are stored as given; they never reach a file-system path, but an empty
/// key or one with NUL cannot be told apart reliably by users.
fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(invalid("document key", "it is empty"));
    }
    if key.contains('\0') {
        return Err(Error::InvalidInput {
            what: "document key",
            reason: format!("{:?} contains a NUL byte", key),
        });
    }
    Ok(())
}

/// Sleep a little, growing and jittered, so that retrying processes spread out.
fn backoff_sleep(attempt: u32) {
    let cap = 2u64.saturating_pow(attempt.min(8)).min(200);
    std::thread::sleep(Duration::from_millis(1 + fastrand::u64(0..=cap)));
}

/// Checkpoints the WAL from a background thread so that no writer pays for it.
///
/// A passive checkpoint never blocks anyone, but under continuous writes from
/// several processes (or with a long reader) it never catches up, and the WAL
/// only restarts from its beginning after a checkpoint that did. So once the WAL
/// passes [`WAL_RESTART_BYTES`], the checkpointer asks for a RESTART, which makes
/// new writers wait (at most [`RESTART_WAIT`]) until the log is fully copied and
/// can be reused: a short stall instead of an unbounded file.
struct Checkpointer {
    stop: Option<crossbeam_channel::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// WAL size past which a blocking RESTART checkpoint is used.
const WAL_RESTART_BYTES: u64 = 64 * 1024 * 1024;
/// The longest a RESTART checkpoint waits for readers and writers.
const RESTART_WAIT: Duration = Duration::from_secs(1);

fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

impl Checkpointer {
    fn start(
        pool: Pool,
        turnstile: Arc<Turnstile>,
        wal: PathBuf,
        every: Duration,
        busy: Duration,
    ) -> Checkpointer {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("leasehold-checkpoint".into())
            .spawn(move || loop {
                match stopped.recv_timeout(every) {
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        checkpoint_once(&pool, &turnstile, &wal, busy)
                    }
                    _ => {
                        if let Ok(c) = pool.get() {
                            let _ = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
                        }
                        return;
                    }
                }
            })
            .ok();
        Checkpointer {
            stop: Some(stop),
            thread,
        }
    }
}

/// One checkpoint: passive while the WAL is small, RESTART once it is not.
/// A RESTART holds the write lock while it waits, so it takes a turn like any
/// writer: otherwise writers committing back to back could keep it out.
fn checkpoint_once(pool: &Pool, turnstile: &Turnstile, wal: &Path, busy: Duration) {
    let Ok(c) = pool.get() else { return };
    let big = std::fs::metadata(wal)
        .map(|m| m.len() > WAL_RESTART_BYTES)
        .unwrap_or(false);
    if !big {
        let _ = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        return;
    }
    let _turn = turnstile.enter();
    if c.busy_timeout(RESTART_WAIT).is_ok() {
        let _ = c.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
        // Back to the pool's own timeout before the connection is reused.
        let _ = c.busy_timeout(busy);
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
