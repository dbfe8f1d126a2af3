//! The worker pool: N threads, each looping claim → process → report, and the
//! handle that stops them (drain first, then hard).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::cleanup::OwedCleanups;
use super::lease::{LeaseKeeper, Ticks};
use super::worker::panic_message;
use super::worker::{Batch, Pipeline, Processed, StagedBatch, Worker};
use crate::error::Error;
use crate::service::Service;
use crate::store::{Store, WorkWaker};

/// How a pool runs.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Worker threads (at least one).
    pub workers: usize,
    /// Heartbeat ticks (a timer, or manual in tests).
    pub ticks: Ticks,
    /// Exit when nothing is claimable and no lease is held anywhere (for `run`
    /// and `work --until-empty`); documents waiting for a later retry are left.
    pub until_idle: bool,
    /// The longest an idle worker sleeps before looking again.
    pub idle_wait_cap: Duration,
    /// When the source cannot be used (its account is locked), wait for it;
    /// if false and `until_idle`, the worker exits instead.
    pub wait_for_source: bool,
    /// Prefix of worker names (the process id is added).
    pub name_prefix: String,
    /// Store failures in a row (across all workers, e.g. a full disk or a
    /// read-only file system) after which the pool stops claiming and reports
    /// the cause through [`StopHandle::halted`]. Between failures each worker
    /// backs off, so the bound is reached in seconds, not in a spin.
    pub max_store_failures: u32,
    /// The most documents a worker claims at once (in one transaction) when
    /// documents are small and fast; 1 claims one at a time. See [`Pace`].
    /// Above 1, a worker stages its next batch while its last one is made
    /// durable and completed, so it may hold twice this many claims. The
    /// default, 128, is what keeps the search index cheap for small texts:
    /// FTS5 writes one segment per transaction, and every segment is merge
    /// work later (DESIGN §5 has the figures); [`Pace`] still keeps a batch
    /// of larger documents to about 25 ms of work.
    pub claim_ahead: usize,
    /// Whether a worker sizes each batch by the pace of its recent
    /// documents ([`Pace`]: about 25 ms of their own steps, at most
    /// `claim_ahead`, the first batch one document). False claims up to
    /// `claim_ahead` every time: for documents whose cost is known, and for
    /// tests, whose batches must not depend on how busy the machine is.
    pub paced: bool,
}

impl PoolOptions {
    /// The most workers a pool runs. A worker is four threads of this process
    /// (claimer, finisher, lease heartbeat, the drain of its extraction
    /// child's stderr) and that child: 256 workers are about a thousand
    /// threads and 256 processes, inside macOS's default limits (2,048
    /// threads a process, a few thousand processes a user) and far from
    /// Linux's 65,530 memory mappings a process (about 16,000 threads), past
    /// which the standard library aborts a thread's start instead of
    /// returning an error. More workers than that on one machine only wait
    /// for each other; several machines share work through PostgreSQL.
    pub const MAX_WORKERS: usize = 256;
    /// The most documents a worker claims at once: a batch is one transaction,
    /// and its documents are held in memory together.
    pub const MAX_CLAIM_AHEAD: usize = 1024;

    /// [`Error::InvalidInput`] naming the first count over its maximum.
    fn check(&self) -> crate::error::Result<()> {
        let over = |what, n: usize, max: usize| {
            (n > max).then(|| Error::InvalidInput {
                what,
                reason: format!("{n} is more than the most a pool runs, {max}"),
            })
        };
        match over("PoolOptions::workers", self.workers, Self::MAX_WORKERS).or_else(|| {
            over(
                "PoolOptions::claim_ahead",
                self.claim_ahead,
                Self::MAX_CLAIM_AHEAD,
            )
        }) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            workers: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(Self::MAX_WORKERS),
            ticks: Ticks::Timer,
            until_idle: false,
            idle_wait_cap: Duration::from_secs(1),
            wait_for_source: true,
            name_prefix: "worker".into(),
            max_store_failures: 10,
            claim_ahead: 128,
            paced: true,
        }
    }
}

/// One report per claim, for progress and summaries.
#[derive(Debug, Clone)]
pub struct Event {
    /// The worker's name.
    pub worker: String,
    /// What happened, or the error that stopped the step.
    pub outcome: std::result::Result<Processed, String>,
}

/// Stops a pool from another thread (e.g. a Ctrl-C handler).
#[derive(Clone)]
pub struct StopHandle {
    stop_claiming: Arc<AtomicBool>,
    hard: Arc<AtomicBool>,
    cancel: Arc<Mutex<Option<Sender<()>>>>,
    /// Wakes the pool's waiting workers (not the store itself: a handle kept
    /// after its pool must not keep the database open).
    wake: WorkWaker,
    failures: Arc<Failures>,
}

/// Store failures in a row across the pool, and why the pool halted if it did.
#[derive(Default)]
struct Failures {
    in_row: AtomicU32,
    halted: Mutex<Option<String>>,
}

impl StopHandle {
    /// Stop claiming; documents in flight may finish.
    pub fn stop_claiming(&self) {
        self.stop_claiming.store(true, Ordering::SeqCst);
        self.wake.notify();
    }

    /// Stop claiming and ask running stages to stop; what is in flight is released.
    pub fn stop_hard(&self) {
        self.stop_claiming();
        self.hard.store(true, Ordering::SeqCst);
        self.cancel.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Why the pool stopped by itself, if it did: a damaged or unusable store,
    /// or `max_store_failures` store failures in a row. One line naming the cause.
    pub fn halted(&self) -> Option<String> {
        self.failures
            .halted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A step succeeded: the store works again.
    fn store_worked(&self) {
        self.failures.in_row.store(0, Ordering::SeqCst);
    }

    /// A step failed with `e`. Returns the failures in a row so far, or `None`
    /// if the pool halted (a fatal error, or the bound reached).
    fn store_failed(&self, e: &Error, limit: u32) -> Option<u32> {
        let in_row = self
            .failures
            .in_row
            .fetch_add(1, Ordering::SeqCst)
            .saturating_add(1);
        let fatal = e.is_corrupt() || e.is_config();
        if !fatal && in_row < limit.max(1) {
            return Some(in_row);
        }
        let why = if fatal {
            e.to_string()
        } else {
            format!("stopped after {in_row} store failures in a row: {e}")
        };
        let mut halted = self.failures.halted.lock().unwrap_or_else(|e| e.into_inner());
        if halted.is_none() {
            tracing::error!(
                target: "leasehold::pool",
                event = "pool_halted",
                why = why.as_str(),
                "the pool stopped claiming"
            );
        }
        halted.get_or_insert(why.replace('\n', " "));
        drop(halted);
        self.stop_claiming();
        None
    }
}

/// The pause after the `in_row`-th store failure in a row: doubling from 50 ms
/// to 2 s, with jitter so workers do not retry in step.
fn failure_backoff(in_row: u32) -> Duration {
    let base = 50u64 << in_row.saturating_sub(1).min(5);
    Duration::from_millis(base.min(2_000) + fastrand::u64(0..50))
}

/// N worker threads over one pipeline. Dropping the pool stops it hard and
/// joins every thread.
pub struct WorkerPool {
    threads: Vec<Service>,
    handle: StopHandle,
    /// Disconnected once every worker thread has returned (each holds a sender).
    alive: Receiver<()>,
    /// The workers' pipeline, for the cleanups still owed when they stopped.
    pipeline: Arc<Pipeline>,
    owed: Arc<OwedCleanups>,
}

impl WorkerPool {
    /// Start `opts.workers` threads; each sends an [`Event`] per claim to `events`.
    ///
    /// # Failure
    /// More than [`PoolOptions::MAX_WORKERS`] workers or
    /// [`PoolOptions::MAX_CLAIM_AHEAD`] claims ahead is [`Error::InvalidInput`],
    /// before any thread starts. A thread that cannot be spawned stops the
    /// pool (what started is stopped and joined) and is returned as
    /// [`Error::Internal`].
    pub fn start(
        pipeline: Pipeline,
        opts: PoolOptions,
        events: Option<Sender<Event>>,
    ) -> crate::error::Result<WorkerPool> {
        opts.check()?;
        let pipeline = Arc::new(pipeline);
        let (cancel_tx, cancel_rx) = crossbeam_channel::bounded::<()>(0);
        let (alive_tx, alive) = crossbeam_channel::bounded::<()>(0);
        let handle = StopHandle {
            stop_claiming: Arc::new(AtomicBool::new(false)),
            hard: Arc::new(AtomicBool::new(false)),
            cancel: Arc::new(Mutex::new(Some(cancel_tx))),
            wake: pipeline.store.work_waker(),
            failures: Arc::default(),
        };
        let mut pool = WorkerPool {
            threads: Vec::new(),
            handle,
            alive,
            pipeline: Arc::clone(&pipeline),
            owed: Arc::default(),
        };
        for i in 0..opts.workers.max(1) {
            let keeper =
                LeaseKeeper::with_cancel(pipeline.store.clone(), opts.ticks.clone(), cancel_rx.clone());
            let name = format!("{}-{}-{i}", opts.name_prefix, std::process::id());
            let worker = Worker::new(Arc::clone(&pipeline), keeper, name)
                .with_hard_stop(Arc::clone(&pool.handle.hard))
                .with_owed_cleanups(Arc::clone(&pool.owed));
            let (handle, opts, events, alive) = (
                pool.handle.clone(),
                opts.clone(),
                events.clone(),
                alive_tx.clone(),
            );
            let thread = Service::start(&format!("leasehold-worker-{i}"), move |_| {
                run_worker(&worker, &handle, &opts, events.as_ref());
                drop(alive);
            })
            .map_err(|e| Error::Internal(format!("cannot start worker thread {i}: {e}")))?;
            pool.threads.push(thread);
        }
        tracing::info!(
            target: "leasehold::pool",
            event = "pool_started",
            workers = opts.workers.max(1),
            claim_ahead = opts.claim_ahead,
            until_idle = opts.until_idle,
            "worker pool started"
        );
        Ok(pool)
    }

    /// A handle that can stop this pool from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.handle.clone()
    }

    /// Stop claiming, give documents in flight `grace` to finish, then ask them
    /// to stop and release what is left; returns when every thread has exited.
    pub fn stop(self, grace: Duration) {
        self.handle.stop_claiming();
        // Nobody sends on `alive`: this returns when the last worker has
        // returned (every sender dropped) or when the grace has run out.
        let _ = self.alive.recv_timeout(grace);
        // Dropping the pool stops hard and joins.
    }

    /// Wait for every worker to exit (with `until_idle`, when the work is done).
    pub fn join(mut self) {
        for t in std::mem::take(&mut self.threads) {
            t.join();
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.handle.stop_hard();
        // Each Service joins its thread as it is dropped.
        self.threads.clear();
        // No writer of this pool is left to hold a shard's lock.
        let p = &self.pipeline;
        self.owed.retry(&p.store, &p.mirror);
    }
}

/// A worker thread's loop, in two halves on two threads. This thread claims
/// and stages batches (fetch, extract, staged mirror write); a finisher thread
/// of its own makes each batch durable, completes it, cleans up and reports
/// ([`finish_batches`]). While the finisher waits for the disk (the sync
/// round) or for the write lock, the next batch is being extracted; the
/// channel between them holds none, so at most one batch waits, staged, for
/// the finisher. With `claim_ahead` 1 (a worker holds one claim at a time)
/// both halves run on this thread, one after the other. A panic inside either
/// half is caught and reported; the loop goes on, so the pool never hangs on
/// one bad document.
fn run_worker(worker: &Worker, stop: &StopHandle, opts: &PoolOptions, events: Option<&Sender<Event>>) {
    let store = &worker.pipeline().store;
    // Both halves here, and after a store failure a nap before the next claim.
    let here = |staged| {
        if let Some(in_row) = report(worker, stop, events, opts, finish(worker, staged)) {
            nap(store, in_row);
        }
    };
    if opts.claim_ahead <= 1 {
        return stage_batches(worker, stop, opts, here);
    }
    let (staged_tx, staged_rx) = crossbeam_channel::bounded::<StagedBatch>(0);
    let (nap_tx, nap_rx) = crossbeam_channel::unbounded::<u32>();
    std::thread::scope(|scope| {
        let finisher = std::thread::Builder::new()
            .name(format!("{}-finisher", worker.name()))
            .spawn_scoped(scope, move || {
                finish_batches(worker, stop, opts, events, &staged_rx, &nap_tx)
            });
        if finisher.is_err() {
            // No thread to spare: both halves on this one.
            return stage_batches(worker, stop, opts, here);
        }
        stage_batches(worker, stop, opts, |staged| match staged_tx.send(staged) {
            // The finisher took it, so it has reported the batch before: a
            // failure there is a nap here, before the next claim.
            Ok(()) => {
                if let Some(in_row) = nap_rx.try_iter().last() {
                    nap(store, in_row);
                }
            }
            // The finisher is gone (it cannot be, short of a bug): finish here.
            Err(crossbeam_channel::SendError(staged)) => here(staged),
        });
        drop(staged_tx);
    });
}

/// The pause after the `in_row`-th store failure in a row ([`failure_backoff`]);
/// a stop (which notifies the store) ends it early.
fn nap(store: &Store, in_row: u32) {
    store.wait_for_work(store.work_token(), failure_backoff(in_row));
}

/// Claim and stage batches until the pool stops claiming or (with
/// `until_idle`) the work is done, handing each to `finish`.
fn stage_batches(
    worker: &Worker,
    stop: &StopHandle,
    opts: &PoolOptions,
    mut finish: impl FnMut(StagedBatch),
) {
    let store = &worker.pipeline().store;
    let mut pace = Pace::new(opts.claim_ahead, opts.paced);
    while !stop.stop_claiming.load(Ordering::SeqCst) {
        let token = store.work_token();
        if let Some(wait) = source_pause(worker, opts) {
            if opts.until_idle && !opts.wait_for_source {
                return;
            }
            store.wait_for_work(token, wait);
            continue;
        }
        // A panic outside a document's own steps (which `stage_batch` contains
        // itself) is a bug, not a configuration error: reported, and the loop goes on.
        let staged = catch_unwind(AssertUnwindSafe(|| worker.stage_batch(pace.batch())))
            .unwrap_or_else(|p| StagedBatch::failed(panicked(&*p)));
        if staged.is_idle() {
            stop.store_worked();
            if !idle_wait(store, opts, token) {
                return;
            }
            continue;
        }
        if let Some((docs, took)) = staged.staged() {
            pace.record(docs, took);
        }
        finish(staged);
    }
}

/// The finisher: each staged batch made durable, completed, cleaned up and
/// reported, until the stager hangs up; a store failure's nap is sent back to
/// the stager (`naps`), which takes it before its next claim. Once the pool has
/// halted (a damaged store, or too many failures in a row), a staged batch is
/// dropped instead: its staged files are withdrawn and its leases left to
/// expire, as the batch that failed left its own.
fn finish_batches(
    worker: &Worker,
    stop: &StopHandle,
    opts: &PoolOptions,
    events: Option<&Sender<Event>>,
    staged: &Receiver<StagedBatch>,
    naps: &Sender<u32>,
) {
    for batch in staged {
        if stop.halted().is_some() {
            drop(batch);
            continue;
        }
        if let Some(in_row) = report(worker, stop, events, opts, finish(worker, batch)) {
            let _ = naps.send(in_row);
        }
    }
}

/// The second half of a batch, a panic in it reported as the batch's answer.
fn finish(worker: &Worker, staged: StagedBatch) -> Batch {
    catch_unwind(AssertUnwindSafe(|| worker.finish_batch(staged))).unwrap_or_else(|p| Batch {
        answers: vec![Err(panicked(&*p))],
    })
}

/// A panic outside a document's own steps, as the batch's error.
fn panicked(payload: &(dyn std::any::Any + Send)) -> Error {
    Error::Internal(format!("worker step panicked: {}", panic_message(payload)))
}

/// Send a finished batch's answers as events and count its store failure, if
/// any. Returns the failures in a row when the batch failed and the pool goes
/// on: the caller naps before the next claim.
fn report(
    worker: &Worker,
    stop: &StopHandle,
    events: Option<&Sender<Event>>,
    opts: &PoolOptions,
    batch: Batch,
) -> Option<u32> {
    let mut failure: Option<Error> = None;
    let mut shown: Vec<String> = Vec::new();
    for outcome in batch.answers {
        match outcome {
            Ok(done) => {
                stop.store_worked();
                log_outcome(worker.name(), &done);
                send(events, worker, Ok(done));
            }
            Err(e) => {
                // Sent first, so a watcher shows each failure as it happens;
                // once when the batch's documents failed together (the
                // others carry the first one's text, `worker::store_failed`).
                let again = matches!(&e, Error::Internal(text) if shown.contains(text));
                if !again {
                    let text = e.to_string();
                    send(events, worker, Err(text.clone()));
                    shown.push(text);
                }
                failure = Some(batch_failure(failure, e));
            }
        }
    }
    let failure = failure?;
    let in_row = stop.store_failed(&failure, opts.max_store_failures);
    log_step_failed(worker.name(), &failure, in_row);
    in_row
}

/// Log a failed batch once (its documents failed together): the first of a
/// run of failures at warn, the ones after it at debug, so a store that keeps
/// failing is one line until the pool halts (`pool_halted`, at error, with
/// the cause); the command shows each failure on its own as it happens.
fn log_step_failed(worker: &str, e: &Error, in_row: Option<u32>) {
    let error = e.to_string();
    match in_row {
        Some(1) => tracing::warn!(
            target: "leasehold::pool",
            event = "step_failed",
            worker,
            error = error.as_str(),
            "a worker's step failed"
        ),
        Some(in_row) => tracing::debug!(
            target: "leasehold::pool",
            event = "step_failed",
            worker,
            error = error.as_str(),
            in_row,
            "a worker's step failed again"
        ),
        None => {}
    }
}

/// Log what became of one claim: a failed document at warn, with its reason
/// (an operator running `work` as a service sees each one), the rest at debug.
fn log_outcome(worker: &str, done: &Processed) {
    const T: &str = "leasehold::document";
    match done {
        Processed::Retrying { key, error, at } => tracing::warn!(
            target: T, event = "document_failed", key = key.as_str(), reason = error.as_str(),
            will_retry = true, retry_at = at, worker, "a document failed; it will be retried"
        ),
        Processed::Dead { key, error } => tracing::warn!(
            target: T, event = "document_failed", key = key.as_str(), reason = error.as_str(),
            will_retry = false, worker, "a document failed for good"
        ),
        Processed::Indexed { key, path } => tracing::debug!(
            target: T, event = "completed", key = key.as_str(), result = path.as_str(), worker,
            "a document's text was accepted"
        ),
        Processed::Superseded { key, .. } => ended(worker, key, "superseded"),
        Processed::LeaseLost { key, .. } => ended(worker, key, "lease_lost"),
        Processed::Released { key } => ended(worker, key, "released"),
        Processed::Waiting { key, .. } => ended(worker, key, "waiting"),
        Processed::Idle => {}
    }
}

/// A claim that ended without a result or a failure (its reasons are logged
/// where they happen: a refused write, a lease lost, a locked account).
fn ended(worker: &str, key: &str, outcome: &'static str) {
    tracing::debug!(
        target: "leasehold::document",
        event = "not_completed",
        key,
        outcome,
        worker,
        "a claim ended without a result"
    );
}

/// How many documents a worker claims at once. Claiming ahead saves a claim
/// transaction per document and lets a batch's mirror writes share one sync
/// round and its completions one transaction; it pays off only for documents
/// that take little time, and a claim held ahead is a document no other worker
/// can take meanwhile. So a worker starts with one, and claims as many as fit
/// in [`Pace::BUDGET`] at the pace of its recent documents' own steps (fetch,
/// extract, staged write: the shared sync round is what a batch amortises, so
/// it does not count) (at most the pool's `claim_ahead`). Every claimed document is under lease from its claim; a
/// batch ends well inside the lease, and a stage whose lease is no longer fresh
/// renews it first, as always.
#[derive(Debug)]
pub(super) struct Pace {
    max: usize,
    /// False: every batch is `max` ([`PoolOptions::paced`]).
    paced: bool,
    /// Moving average of the time one document took, if any was seen.
    per_doc: Option<Duration>,
    /// Batches recorded so far.
    batches: u32,
}

impl Pace {
    /// How long a batch should take at the recent pace.
    const BUDGET: Duration = Duration::from_millis(25);

    pub(super) fn new(max: usize, paced: bool) -> Self {
        Pace {
            max: max.max(1),
            paced,
            per_doc: None,
            batches: 0,
        }
    }

    /// How many to claim next.
    pub(super) fn batch(&self) -> usize {
        if !self.paced {
            return self.max;
        }
        match self.per_doc {
            None => 1,
            Some(d) if d.is_zero() => self.max,
            Some(d) => ((Self::BUDGET.as_secs_f64() / d.as_secs_f64()) as usize).clamp(1, self.max),
        }
    }

    /// `docs` documents took `took` in all.
    pub(super) fn record(&mut self, docs: usize, took: Duration) {
        let one = took / docs.max(1) as u32;
        self.batches = self.batches.saturating_add(1);
        // A quarter of the new figure: one slow document slows the pace at once
        // (a batch of slow documents is what must not happen), a fast one only
        // slowly lets batches grow again. The first batch is the exception:
        // its one document also paid for what the worker starts on first use
        // (its extraction child: 4–8 ms, where a small text file takes
        // 0.1–0.2 ms), so a faster second batch is believed as it is. Averaged
        // in, that start kept a rerun's 1,000 changed files in batches of 1 to
        // 94, 31 batches where full ones would be 8.
        self.per_doc = Some(match self.per_doc {
            Some(avg) if one < avg && self.batches > 2 => (avg * 3 + one) / 4,
            _ => one,
        });
    }
}

/// How long to wait before claiming, if the source cannot be used now (its
/// account is locked): pausing leaves the documents to workers that can.
fn source_pause(worker: &Worker, opts: &PoolOptions) -> Option<Duration> {
    let at = worker.pipeline().source.ready_at()?;
    let now = worker.pipeline().store.now();
    (at > now).then(|| Duration::from_millis((at - now) as u64).min(opts.idle_wait_cap))
}

/// Sleep until something may be claimable (or an in-process enqueue/release
/// wakes us). Returns false when the pool should exit (`until_idle` and nothing
/// left to wait for).
fn idle_wait(store: &Store, opts: &PoolOptions, token: u64) -> bool {
    let now = store.now();
    let (next, leases) = match (store.next_claimable_at(), store.counts_extracting()) {
        (Ok(n), Ok(l)) => (n, l),
        _ => (Some(now), 1),
    };
    if opts.until_idle && leases == 0 && next.is_none_or(|t| t > now) {
        return false;
    }
    let wait = match next {
        Some(t) if t > now => Duration::from_millis((t - now) as u64).min(opts.idle_wait_cap),
        Some(_) => Duration::ZERO,
        None => opts.idle_wait_cap,
    };
    if !wait.is_zero() {
        store.wait_for_work(token, wait);
    }
    true
}

/// The failure a batch counts as: one, whatever the number of its documents
/// the store could not answer, since they failed together (one transaction, one
/// cause), and counting each would reach the bound and nap once per document.
/// A fatal error (a corrupt store, a configuration error) wins, then any real
/// store error over an `Internal` one (the batch's other documents get that
/// error's text, its kind lost).
fn batch_failure(kept: Option<Error>, next: Error) -> Error {
    fn rank(e: &Error) -> u8 {
        match e {
            e if e.is_corrupt() || e.is_config() => 2,
            Error::Internal(_) => 0,
            _ => 1,
        }
    }
    match kept {
        Some(kept) if rank(&kept) >= rank(&next) => kept,
        _ => next,
    }
}

fn send(events: Option<&Sender<Event>>, worker: &Worker, outcome: std::result::Result<Processed, String>) {
    if let Some(tx) = events {
        let _ = tx.send(Event {
            worker: worker.name().to_owned(),
            outcome,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(dir: &tempfile::TempDir) -> StopHandle {
        let store = Store::open(dir.path().join("q.db"), crate::StoreOptions::default()).unwrap();
        StopHandle {
            stop_claiming: Arc::new(AtomicBool::new(false)),
            hard: Arc::new(AtomicBool::new(false)),
            cancel: Arc::new(Mutex::new(None)),
            wake: store.work_waker(),
            failures: Arc::default(),
        }
    }

    fn disk_full() -> Error {
        Error::DiskFull { path: "q.db".into() }
    }

    #[test]
    fn failures_in_a_row_halt_the_pool_at_the_bound_and_a_success_resets_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let h = handle(&dir);
        for n in 1..3 {
            assert_eq!(h.store_failed(&disk_full(), 3), Some(n));
        }
        h.store_worked();
        assert_eq!(h.store_failed(&disk_full(), 3), Some(1));
        assert_eq!(h.store_failed(&disk_full(), 3), Some(2));
        assert_eq!(h.halted(), None);
        assert_eq!(h.store_failed(&disk_full(), 3), None);
        assert!(h.stop_claiming.load(Ordering::SeqCst));
        let why = h.halted().unwrap();
        assert!(
            why.starts_with("stopped after 3 store failures in a row: "),
            "{why}"
        );
    }

    /// A panic caught around a worker step is a bug report, not a configuration
    /// error: the pool goes on (issue 11, point 9).
    #[test]
    fn a_caught_panic_does_not_stop_the_pool_but_a_corrupt_store_does() {
        let dir = tempfile::tempdir().unwrap();
        let h = handle(&dir);
        let panic = Error::Internal("worker step panicked: boom".into());
        assert_eq!(h.store_failed(&panic, 10), Some(1));
        assert!(!h.stop_claiming.load(Ordering::SeqCst));
        let corrupt = Error::Corrupt {
            path: "q.db".into(),
            detail: "malformed".into(),
        };
        assert_eq!(h.store_failed(&corrupt, 10), None);
        assert!(h.halted().unwrap().contains("corrupt store"));
    }

    /// A batch whose completions all failed counts once, as its real cause.
    #[test]
    fn a_failed_batch_counts_once_as_its_worst_error() {
        let internal = || Error::Internal("q.db: disk full".into());
        let corrupt = || Error::Corrupt {
            path: "q.db".into(),
            detail: "malformed".into(),
        };
        let worst = |errors: Vec<Error>| {
            errors
                .into_iter()
                .fold(None, |k, e| Some(batch_failure(k, e)))
                .unwrap()
        };
        assert!(worst(vec![internal(), disk_full(), internal()]).is_disk_full());
        assert!(worst(vec![disk_full(), internal()]).is_disk_full());
        assert!(worst(vec![internal(), disk_full(), corrupt()]).is_corrupt());
        assert!(worst(vec![corrupt(), disk_full()]).is_corrupt());
        assert!(matches!(worst(vec![internal()]), Error::Internal(_)));
    }

    /// Text is the document's bytes: this test never extracts anything.
    struct Utf8;

    impl crate::extract::Extractor for Utf8 {
        fn extract(
            &self,
            _name: &str,
            bytes: &[u8],
            _stop: &std::sync::atomic::AtomicBool,
        ) -> Result<String, crate::extract::ExtractError> {
            Ok(String::from_utf8_lossy(bytes).into_owned())
        }
    }

    #[test]
    fn a_paced_worker_starts_with_one_and_fits_its_batches_to_the_budget() {
        let mut pace = Pace::new(32, true);
        assert_eq!(pace.batch(), 1);
        pace.record(1, Duration::from_millis(5));
        assert_eq!(pace.batch(), 5);
        pace.record(5, Duration::from_millis(250));
        assert_eq!(pace.batch(), 1, "one slow batch slows the pace at once");
        // Fast documents let it grow only slowly: each takes a quarter off
        // the average (50 ms, then 37.5, 28.1, 21.1, 15.8, 11.9).
        for _ in 0..4 {
            pace.record(1, Duration::ZERO);
            assert_eq!(pace.batch(), 1);
        }
        pace.record(1, Duration::ZERO);
        assert_eq!(pace.batch(), 2);
    }

    #[test]
    fn a_slow_first_document_does_not_hold_back_the_fast_ones_after_it() {
        let mut pace = Pace::new(128, true);
        pace.record(1, Duration::from_millis(5));
        assert_eq!(pace.batch(), 5);
        pace.record(5, Duration::from_micros(750));
        assert_eq!(pace.batch(), 128, "the second batch's pace is taken as it is");
        pace.record(128, Duration::from_millis(128 * 5));
        assert_eq!(pace.batch(), 5, "a slow batch still slows the pace at once");
        pace.record(5, Duration::from_micros(750));
        assert_eq!(pace.batch(), 6, "and later fast ones only slowly speed it up");
        let mut pace = Pace::new(128, true);
        pace.record(1, Duration::from_millis(5));
        pace.record(1, Duration::from_millis(5));
        pace.record(5, Duration::from_micros(750));
        assert_eq!(pace.batch(), 6, "a fast third batch is averaged in");
    }

    #[test]
    fn an_unpaced_worker_always_claims_its_whole_batch() {
        let mut pace = Pace::new(8, false);
        assert_eq!(pace.batch(), 8);
        pace.record(1, Duration::from_secs(10));
        assert_eq!(pace.batch(), 8);
    }

    /// A pool refuses more workers (or claims ahead) than it runs, before it
    /// starts a thread: past some thousands of threads the standard library
    /// aborts the process instead of returning an error.
    #[test]
    fn a_pool_refuses_more_workers_than_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let pipeline = || Pipeline {
            store: Store::open(dir.path().join("q.db"), crate::StoreOptions::default()).unwrap(),
            mirror: crate::mirror::Mirror::open(dir.path().join("mirror")).unwrap(),
            source: Arc::new(crate::source::DirSource::open(dir.path().join("src")).unwrap()),
            extractor: Arc::new(Utf8),
            max_input_bytes: 1 << 20,
            deliver_results: false,
        };
        let refused = |opts: PoolOptions| match WorkerPool::start(pipeline(), opts, None) {
            Err(e @ Error::InvalidInput { .. }) => e.to_string(),
            Err(e) => panic!("not refused as invalid input: {e}"),
            Ok(_) => panic!("started"),
        };
        let workers = PoolOptions {
            workers: PoolOptions::MAX_WORKERS + 1,
            ..PoolOptions::default()
        };
        assert!(refused(workers).contains("workers: 257 is more than the most a pool runs, 256"));
        let ahead = PoolOptions {
            workers: 1,
            claim_ahead: PoolOptions::MAX_CLAIM_AHEAD + 1,
            ..PoolOptions::default()
        };
        assert!(refused(ahead).contains("claim_ahead"));
        assert!(PoolOptions::default().workers <= PoolOptions::MAX_WORKERS);
        let at_most = PoolOptions {
            workers: 2,
            until_idle: true,
            ..PoolOptions::default()
        };
        WorkerPool::start(pipeline(), at_most, None).unwrap().join();
    }

    #[test]
    fn the_pause_between_failures_grows_to_two_seconds() {
        assert!(failure_backoff(1) < Duration::from_millis(100));
        assert!(failure_backoff(3) >= Duration::from_millis(200));
        assert!(failure_backoff(30) >= Duration::from_millis(1_600));
        assert!(failure_backoff(30) <= Duration::from_millis(2_050));
    }
}
