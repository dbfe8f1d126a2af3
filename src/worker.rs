//! The worker pool (DESIGN §2 "worker"): synchronous threads that each loop
//! claim → fetch → extract → mirror write → complete → cleanup.
//!
//! Every step after the claim runs under the claim's lease ([`LeaseKeeper`]);
//! the fenced `complete` is the final guard, and its refusal is reported as
//! [`Processed::Superseded`], never as success. Cleanup of the document's mirror
//! directory runs after every claim, whatever happened.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::extract::{ExtractError, Extractor};
use crate::job::{Claim, Fenced, JobId, Rejection, Status};
use crate::lease::{LeaseKeeper, Ticks};
use crate::mirror::{Keep, Mirror};
use crate::source::{Source, SourceError};
use crate::store::Store;

/// What happened to one claim. Only `Indexed` means our result was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// Nothing was claimable.
    Idle,
    /// Our result was accepted.
    Indexed { key: String, path: String },
    /// Our completion was refused: someone else owns or finished the document.
    Superseded { key: String, rejection: Rejection },
    /// Failed; will be retried at `at`.
    Retrying { key: String, at: Millis, error: String },
    /// Failed for good.
    Dead { key: String, error: String },
    /// A renewal was refused or failed; the work was abandoned.
    LeaseLost { key: String, reason: String },
    /// Handed back without spending the attempt (the pool is stopping).
    Released { key: String },
    /// Handed back without spending the attempt until `until`: the source
    /// cannot be used now (a locked credential, a rate limit).
    Waiting {
        key: String,
        until: Millis,
        reason: String,
    },
}

/// Everything a worker needs, shared by the pool's threads.
pub struct Pipeline {
    pub store: Store,
    pub mirror: Mirror,
    pub source: Arc<dyn Source>,
    pub extractor: Arc<dyn Extractor>,
    /// Larger inputs fail permanently.
    pub max_input_bytes: u64,
    /// Queue each accepted result's text for the sink (the outbox), in the
    /// transaction that accepts it.
    pub deliver_results: bool,
}

/// A fetch that failed: a deferral (a locked credential, a rate limit) hands
/// the document back without spending the attempt; anything else is a failure.
fn stop_for_fetch(e: SourceError) -> Stop {
    match e {
        SourceError::Deferred { until, .. } => Stop::Wait {
            reason: e.to_string(),
            until,
        },
        e => Stop::Failed {
            permanent: e.is_permanent(),
            error: e.to_string(),
        },
    }
}

/// What a cleanup must keep, read from the row while the mirror lock is held.
pub fn keep_for(store: &Store, id: JobId) -> Result<Option<Keep>> {
    Ok(store.job(id)?.map(|job| Keep {
        accepted: job.result_path.clone(),
        current_fence: (job.status == Status::Extracting).then_some(job.fence),
    }))
}

/// One worker: a name, a lease keeper and the pipeline. `process_one` is the
/// step tests drive directly.
pub struct Worker {
    pipeline: Arc<Pipeline>,
    keeper: LeaseKeeper,
    name: String,
    /// Set when the pool stops hard: finish the current stage, then release.
    hard_stop: Arc<AtomicBool>,
}

/// Why a claim ended before completion; turned into a store write by `settle`.
enum Stop {
    Lost(String),
    Failed {
        error: String,
        permanent: bool,
    },
    Release,
    /// Hand back without spending the attempt, not before `until`: the cause
    /// (a full disk) is not the document's fault.
    Defer {
        error: String,
        until: Millis,
    },
    /// Like `Defer`, for a source that cannot be used now (a locked credential).
    Wait {
        reason: String,
        until: Millis,
    },
}

impl Worker {
    pub fn new(pipeline: Arc<Pipeline>, keeper: LeaseKeeper, name: impl Into<String>) -> Self {
        Worker {
            pipeline,
            keeper,
            name: name.into(),
            hard_stop: Arc::new(AtomicBool::new(false)),
        }
    }

    fn with_hard_stop(mut self, flag: Arc<AtomicBool>) -> Self {
        self.hard_stop = flag;
        self
    }

    /// The worker's name, as recorded with its claims.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Claim one document and take it as far as it goes. Never reports success
    /// for a refused completion; runs cleanup either way.
    pub fn process_one(&self) -> Result<Processed> {
        let store = &self.pipeline.store;
        let Some(claim) = store.claim(&self.name)? else {
            return Ok(Processed::Idle);
        };
        let outcome = match catch_unwind(AssertUnwindSafe(|| self.work_on(&claim))) {
            Ok(Ok(Ok((written, text)))) => self.complete(&claim, written, &text),
            Ok(Ok(Err(stop))) => self.settle(&claim, stop),
            Ok(Err(e)) => Err(e),
            Err(panic) => self.settle(
                &claim,
                Stop::Failed {
                    error: format!("{:?}: worker panicked: {}", claim.key, panic_message(&*panic)),
                    permanent: true,
                },
            ),
        };
        self.cleanup(claim.id)?;
        outcome
    }

    /// fetch → extract → mirror write, each under the lease. `Ok(Ok(path))` is a
    /// written result waiting for its fenced completion.
    fn work_on(&self, claim: &Claim) -> Result<std::result::Result<(crate::mirror::Written, String), Stop>> {
        let p = &self.pipeline;
        let bytes = match self.stage(claim, |_| p.source.fetch(&claim.key, p.max_input_bytes))? {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => return Ok(Err(stop_for_fetch(e))),
            Err(stop) => return Ok(Err(stop)),
        };
        let extracted = self.stage(claim, |flag| {
            catch_unwind(AssertUnwindSafe(|| {
                p.extractor.extract(&claim.key, &bytes, flag.stop_signal())
            }))
        })?;
        let text = match extracted {
            Ok(Ok(Ok(text))) => text,
            Ok(Ok(Err(ExtractError::Stopped))) => return Ok(Err(Stop::Release)),
            Ok(Ok(Err(e))) => {
                let error = format!("{:?}: {e}", claim.key);
                return Ok(Err(Stop::Failed {
                    permanent: e.is_permanent(),
                    error,
                }));
            }
            Ok(Err(panic)) => {
                let error = format!("{:?}: extractor panicked: {}", claim.key, panic_message(&*panic));
                return Ok(Err(Stop::Failed {
                    error,
                    permanent: true,
                }));
            }
            Err(stop) => return Ok(Err(stop)),
        };
        match self.stage(claim, |_| {
            p.mirror.write(claim.id.0, claim.fence, text.as_bytes())
        })? {
            Ok(Ok(written)) => Ok(Ok((written, text))),
            Ok(Err(e)) if e.is_disk_full() || e.is_unwritable() => Ok(Err(Stop::Defer {
                error: format!("{:?}: mirror write failed, will retry: {e}", claim.key),
                until: p.store.now() + p.store.options().backoff.delay_ms(claim.attempts),
            })),
            Ok(Err(e)) => Ok(Err(Stop::Failed {
                error: format!("{:?}: mirror write failed: {e}", claim.key),
                permanent: false,
            })),
            Err(stop) => Ok(Err(stop)),
        }
    }

    /// Run one stage under the lease, unless the pool is stopping hard.
    fn stage<T>(
        &self,
        claim: &Claim,
        f: impl FnOnce(&crate::lease::LeaseFlag) -> T,
    ) -> Result<std::result::Result<T, Stop>> {
        if self.hard_stop.load(Ordering::SeqCst) {
            return Ok(Err(Stop::Release));
        }
        match self.keeper.run(claim, f) {
            Ok(out) => Ok(Ok(out)),
            Err(lost) => Ok(Err(Stop::Lost(lost.reason))),
        }
    }

    fn complete(&self, claim: &Claim, written: crate::mirror::Written, text: &str) -> Result<Processed> {
        let store = &self.pipeline.store;
        crate::fault::stall_point();
        let answer = if self.pipeline.deliver_results {
            store.complete_and_deliver(claim, &written.rel_path, &written.sha256, text)?
        } else {
            store.complete(claim, &written.rel_path, &written.sha256)?
        };
        Ok(match answer {
            Fenced::Accepted => {
                crate::fault::crash_point(crate::fault::CrashPoint::AfterCommit);
                Processed::Indexed {
                    key: claim.key.clone(),
                    path: written.rel_path,
                }
            }
            Fenced::Rejected(rejection) => Processed::Superseded {
                key: claim.key.clone(),
                rejection,
            },
        })
    }

    /// Write what ended the claim early, and say what the row became.
    fn settle(&self, claim: &Claim, stop: Stop) -> Result<Processed> {
        let store = &self.pipeline.store;
        let key = claim.key.clone();
        let fenced = match &stop {
            Stop::Lost(reason) => {
                return Ok(Processed::LeaseLost {
                    key,
                    reason: reason.clone(),
                })
            }
            Stop::Release => store.release(claim, "released: the worker pool is stopping")?,
            Stop::Defer { error, until } => store.release_until(claim, error, *until)?,
            Stop::Wait { reason, until } => store.release_until(claim, reason, *until)?,
            Stop::Failed { error, permanent } => store.fail(claim, error, *permanent)?,
        };
        if let Fenced::Rejected(rejection) = fenced {
            return Ok(Processed::Superseded { key, rejection });
        }
        Ok(match stop {
            Stop::Release => Processed::Released { key },
            Stop::Wait { reason, until } => Processed::Waiting { key, until, reason },
            Stop::Defer { error, until } => Processed::Retrying {
                key,
                at: until,
                error,
            },
            Stop::Failed { error, .. } => match store.job(claim.id)? {
                Some(job) if job.status == Status::Retrying => Processed::Retrying {
                    key,
                    at: job.retry_at.unwrap_or_default(),
                    error,
                },
                _ => Processed::Dead { key, error },
            },
            Stop::Lost(_) => unreachable!("returned above"),
        })
    }

    /// Remove every generation of the document that is neither accepted nor the
    /// current owner's. A failure other than a damaged store is left to `gc`.
    fn cleanup(&self, id: JobId) -> Result<()> {
        let store = &self.pipeline.store;
        match self.pipeline.mirror.cleanup(id.0, || keep_for(store, id)) {
            Ok(_) => Ok(()),
            Err(e) if e.is_corrupt() => Err(e),
            Err(_) => Ok(()),
        }
    }
}

/// The text of a panic payload.
fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

/// How a pool runs.
#[derive(Debug, Clone)]
pub struct PoolOptions {
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
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            workers: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            ticks: Ticks::Timer,
            until_idle: false,
            idle_wait_cap: Duration::from_secs(1),
            wait_for_source: true,
            name_prefix: "worker".into(),
        }
    }
}

/// One report per claim, for progress and summaries.
#[derive(Debug, Clone)]
pub struct Event {
    pub worker: String,
    pub outcome: std::result::Result<Processed, String>,
}

/// Stops a pool from another thread (e.g. a Ctrl-C handler).
#[derive(Clone)]
pub struct StopHandle {
    stop_claiming: Arc<AtomicBool>,
    hard: Arc<AtomicBool>,
    cancel: Arc<std::sync::Mutex<Option<Sender<()>>>>,
    store: Store,
}

impl StopHandle {
    /// Stop claiming; documents in flight may finish.
    pub fn stop_claiming(&self) {
        self.stop_claiming.store(true, Ordering::SeqCst);
        self.store.notify_work();
    }

    /// Stop claiming and ask running stages to stop; what is in flight is released.
    pub fn stop_hard(&self) {
        self.stop_claiming();
        self.hard.store(true, Ordering::SeqCst);
        self.cancel.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// N worker threads over one pipeline.
pub struct WorkerPool {
    threads: Vec<JoinHandle<()>>,
    handle: StopHandle,
}

impl WorkerPool {
    /// Start `opts.workers` threads; each sends an [`Event`] per claim to `events`.
    pub fn start(pipeline: Pipeline, opts: PoolOptions, events: Option<Sender<Event>>) -> WorkerPool {
        let pipeline = Arc::new(pipeline);
        let (cancel_tx, cancel_rx) = crossbeam_channel::bounded::<()>(0);
        let handle = StopHandle {
            stop_claiming: Arc::new(AtomicBool::new(false)),
            hard: Arc::new(AtomicBool::new(false)),
            cancel: Arc::new(std::sync::Mutex::new(Some(cancel_tx))),
            store: pipeline.store.clone(),
        };
        let threads = (0..opts.workers.max(1))
            .map(|i| {
                let keeper =
                    LeaseKeeper::with_cancel(pipeline.store.clone(), opts.ticks.clone(), cancel_rx.clone());
                let name = format!("{}-{}-{i}", opts.name_prefix, std::process::id());
                let worker =
                    Worker::new(Arc::clone(&pipeline), keeper, name).with_hard_stop(Arc::clone(&handle.hard));
                let (handle, opts, events) = (handle.clone(), opts.clone(), events.clone());
                std::thread::Builder::new()
                    .name(format!("leasehold-worker-{i}"))
                    .spawn(move || run_worker(&worker, &handle, &opts, events.as_ref()))
                    .expect("spawning a worker thread")
            })
            .collect();
        WorkerPool { threads, handle }
    }

    /// A handle that can stop this pool from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.handle.clone()
    }

    /// Stop claiming, give documents in flight `grace` to finish, then ask them
    /// to stop and release what is left; returns when every thread has exited.
    pub fn stop(self, grace: Duration) {
        self.handle.stop_claiming();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.threads.iter().any(|t| !t.is_finished()) {
            std::thread::sleep(Duration::from_millis(5).min(grace));
        }
        self.handle.stop_hard();
        self.join();
    }

    /// Wait for every worker to exit (with `until_idle`, when the work is done).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// A worker thread's loop. A panic inside one step is caught and reported; the
/// loop goes on, so the pool never hangs on one bad document.
fn run_worker(worker: &Worker, stop: &StopHandle, opts: &PoolOptions, events: Option<&Sender<Event>>) {
    let store = &worker.pipeline.store;
    while !stop.stop_claiming.load(Ordering::SeqCst) {
        let token = store.work_token();
        if let Some(wait) = source_pause(worker, opts) {
            if opts.until_idle && !opts.wait_for_source {
                return;
            }
            store.wait_for_work(token, wait);
            continue;
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| worker.process_one())).unwrap_or_else(|p| {
            Err(Error::InvalidInput {
                what: "worker step",
                reason: panic_message(&*p),
            })
        });
        match outcome {
            Ok(Processed::Idle) => {
                if !idle_wait(store, opts, token) {
                    return;
                }
            }
            Ok(done) => send(events, worker, Ok(done)),
            Err(e) => {
                let fatal = e.is_corrupt() || e.is_config();
                send(events, worker, Err(e.to_string()));
                if fatal {
                    stop.stop_claiming();
                    return;
                }
                std::thread::sleep(Duration::from_millis(50 + fastrand::u64(0..100)));
            }
        }
    }
}

/// How long to wait before claiming, if the source cannot be used now (its
/// account is locked): pausing leaves the documents to workers that can.
fn source_pause(worker: &Worker, opts: &PoolOptions) -> Option<Duration> {
    let at = worker.pipeline.source.ready_at()?;
    let now = worker.pipeline.store.now();
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

fn send(events: Option<&Sender<Event>>, worker: &Worker, outcome: std::result::Result<Processed, String>) {
    if let Some(tx) = events {
        let _ = tx.send(Event {
            worker: worker.name.clone(),
            outcome,
        });
    }
}
