//! The pipeline end to end on real parts: a SQLite file in a temp dir, a real
//! mirror directory, real worker threads. Time comes only from the shared
//! `ManualClock` and heartbeat ticks only from `Ticks::Manual` channels the tests
//! send on, so a lease expires because a test said so, never because it slept.
//! (The results check's tests set that clock from the shard directories'
//! own times, which the kernel's clock gave them.)
//! Every wait for another thread is a channel receive with a timeout: a broken
//! build fails these tests, it never hangs them.

use crate::common;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};

use common::TempStore;
use leasehold::mirror::{Mirror, Written};
use leasehold::pipeline::{Event, Pipeline, PoolOptions, Processed, Worker, WorkerPool};
use leasehold::pipeline::{LeaseKeeper, LeaseLost, Ticks};
use leasehold::source::{key_for, DirSource, Source, SourceError};
use leasehold::{Claim, Clock, Enqueued, Fenced, JobId, NewDoc, Rejection, Status, Store};
use leasehold_extract::{ExtractError, Extractor, ExtractorRegistry};

/// The lease of every test store.
const LEASE_MS: u64 = 1_200;
const LEASE: Duration = Duration::from_millis(LEASE_MS);
/// The longest any test waits for another thread before failing. Never reached
/// when the code works; only there so that a regression fails instead of hanging.
const WAIT: Duration = Duration::from_secs(30);
/// Generous input limit for tests that are not about the limit.
const MAX_INPUT: u64 = 1 << 20;

// ----- test parts -----

/// Documents held in memory. A key listed in `panic_on` makes `fetch` panic.
struct MemSource {
    docs: HashMap<String, Vec<u8>>,
    panic_on: Option<String>,
}

impl MemSource {
    fn new(docs: &[(&str, &[u8])]) -> Arc<MemSource> {
        MemSource::build(docs, None)
    }

    fn panicking_on(docs: &[(&str, &[u8])], key: &str) -> Arc<MemSource> {
        MemSource::build(docs, Some(key))
    }

    fn build(docs: &[(&str, &[u8])], panic_on: Option<&str>) -> Arc<MemSource> {
        Arc::new(MemSource {
            docs: docs.iter().map(|(k, v)| ((*k).to_owned(), v.to_vec())).collect(),
            panic_on: panic_on.map(str::to_owned),
        })
    }
}

impl Source for MemSource {
    fn fetch(&self, key: &str, _max_bytes: u64) -> Result<Vec<u8>, SourceError> {
        if self.panic_on.as_deref() == Some(key) {
            panic!("source exploded while reading {key}");
        }
        self.docs
            .get(key)
            .cloned()
            .ok_or_else(|| SourceError::NotFound { key: key.to_owned() })
    }
}

/// The bytes, as text.
struct Plain;

impl Extractor for Plain {
    fn extract(&self, _name: &str, bytes: &[u8], _stop: &AtomicBool) -> Result<String, ExtractError> {
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// Says it started (with the document name), then blocks until the test opens
/// the gate; then extracts the bytes as text, or fails if `fail` is set.
struct Gate {
    started: Sender<String>,
    open: Receiver<()>,
    fail: bool,
}

impl Extractor for Gate {
    fn extract(&self, name: &str, bytes: &[u8], _stop: &AtomicBool) -> Result<String, ExtractError> {
        self.started.send(name.to_owned()).expect("the test is listening");
        if self.open.recv_timeout(WAIT).is_err() {
            return Err(ExtractError::Unsupported {
                reason: "test gate never opened".into(),
            });
        }
        if self.fail {
            return Err(ExtractError::Unsupported {
                reason: "late failure".into(),
            });
        }
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// Panics on documents whose name starts with "boom"; plain text otherwise.
struct Panicky;

impl Extractor for Panicky {
    fn extract(&self, name: &str, bytes: &[u8], _stop: &AtomicBool) -> Result<String, ExtractError> {
        if name.starts_with("boom") {
            panic!("kaboom while reading {name}");
        }
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// Never finishes by itself: says it started, then polls its stop flag; reports
/// on `stopped` when it saw the flag and gave up.
struct Stubborn {
    started: Sender<String>,
    stopped: Sender<String>,
}

impl Extractor for Stubborn {
    fn extract(&self, name: &str, _bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
        let _ = self.started.send(name.to_owned());
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if stop.load(Ordering::SeqCst) {
                let _ = self.stopped.send(name.to_owned());
                return Err(ExtractError::Stopped);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Err(ExtractError::Unsupported {
            reason: "never told to stop".into(),
        })
    }
}

fn open_mirror(t: &TempStore) -> Mirror {
    Mirror::open(t.dir.path().join("mirror")).expect("mirror root")
}

fn pipeline(
    store: &Store,
    mirror: &Mirror,
    source: Arc<dyn Source>,
    extractor: Arc<dyn Extractor>,
) -> Pipeline {
    Pipeline {
        store: store.clone(),
        mirror: mirror.clone(),
        source,
        extractor,
        max_input_bytes: MAX_INPUT,
        deliver_results: false,
    }
}

/// A worker whose heartbeat ticks only when the test sends on the returned sender.
fn worker(p: Pipeline, name: &str) -> (Worker, Sender<()>) {
    let (ticks, ticks_rx) = bounded::<()>(0);
    let keeper = LeaseKeeper::new(p.store.clone(), Ticks::Manual(ticks_rx));
    (Worker::new(Arc::new(p), keeper, name), ticks)
}

/// Run `f` on its own thread and wait for it, failing (not hanging) if it never ends.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = bounded(1);
    let thread = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(WAIT) {
        Ok(v) => {
            thread.join().expect("thread ended");
            v
        }
        Err(RecvTimeoutError::Timeout) => panic!("{what} did not finish"),
        Err(RecvTimeoutError::Disconnected) => {
            let panic = thread.join().expect_err("the thread panicked");
            std::panic::resume_unwind(panic)
        }
    }
}

fn pool_options(workers: usize, ticks: Receiver<()>, until_idle: bool) -> PoolOptions {
    PoolOptions {
        workers,
        ticks: Ticks::Manual(ticks),
        until_idle,
        idle_wait_cap: Duration::from_millis(50),
        wait_for_source: true,
        name_prefix: "test".into(),
        ..PoolOptions::default()
    }
}

/// Run a pool with `until_idle` to the end; every event it reported.
fn run_until_idle(p: Pipeline, workers: usize) -> Vec<Event> {
    let (ticks, ticks_rx) = bounded::<()>(0);
    let (events, events_rx) = unbounded();
    let pool =
        WorkerPool::start(p, pool_options(workers, ticks_rx, true), Some(events)).expect("the pool starts");
    within("the until-idle pool", move || pool.join());
    drop(ticks);
    events_rx.try_iter().collect()
}

/// Send a heartbeat tick and wait until the heartbeat has dealt with it. The tick
/// channel is a rendezvous, so the second tick can only be taken once the
/// heartbeat is back waiting, i.e. done with the first; the second is a no-op
/// (no renewal is due at the same instant as the one just considered).
fn tick_and_wait(ticks: &Sender<()>) {
    ticks.send_timeout((), WAIT).expect("the heartbeat took the tick");
    ticks
        .send_timeout((), WAIT)
        .expect("the heartbeat dealt with the tick");
}

fn job(store: &Store, id: JobId) -> leasehold::Job {
    store.job(id).unwrap().expect("the row exists")
}

fn events_of(store: &Store, id: JobId, fence: i64) -> Vec<String> {
    store
        .history(id)
        .unwrap()
        .into_iter()
        .filter(|h| h.fence == Some(fence))
        .map(|h| h.event)
        .collect()
}

// ----- 1. the late worker -----

/// After its own result is accepted, a worker's cleanup still removes what an
/// earlier claim left in the directory (its unaccepted generation, a crashed
/// writer's temp file): the shortcut for a directory that holds the accepted
/// result alone must not skip them.
#[test]
fn an_accepted_workers_cleanup_removes_what_an_earlier_claim_left() {
    let t = TempStore::new();
    let store = t.handle(LEASE_MS);
    let mirror = open_mirror(&t);
    let key = "doc.txt";
    let source = MemSource::new(&[(key, b"the text")]);
    let id = store.enqueue(&NewDoc::new(key, "v1")).unwrap().id();
    let earlier = store.claim("gone").unwrap().expect("claimable");
    mirror.write(id.0, earlier.fence, b"never accepted").unwrap();
    let temp = mirror
        .doc_dir(id.0)
        .unwrap()
        .join(format!("{}.g000001.tmp-crashed", id.0));
    std::fs::write(&temp, b"partial").unwrap();
    t.clock.advance(LEASE + Duration::from_millis(1));

    let (w, _ticks) = worker(pipeline(&store, &mirror, source, Arc::new(Plain)), "W");
    let Processed::Indexed { path, .. } = w.process_one().unwrap() else {
        panic!("W's result should be accepted");
    };
    assert_eq!(mirror.list_doc_files(id.0).unwrap(), vec![path]);
}

/// A claims and stalls in extraction past its lease (its heartbeat never ticks);
/// B re-claims, writes and completes; the source changes and C claims the new
/// version and has written its generation but not completed. Then A resumes:
/// the renewal before its mirror-write stage is refused, so A reports
/// `LeaseLost` and writes nothing; its cleanup removes A's generation but keeps
/// B's accepted file and C's in-progress one. Finally C completes.
#[test]
fn late_worker_is_fenced_out_and_its_cleanup_spares_the_accepted_and_current_generations() {
    let t = TempStore::new();
    // Three handles of their own: three processes sharing one file and one clock.
    let (store_a, store_b, store_c) = (t.handle(LEASE_MS), t.handle(LEASE_MS), t.handle(LEASE_MS));
    let mirror = open_mirror(&t);
    let key = "doc.txt";
    let source = MemSource::new(&[(key, b"version one text")]);
    let id = store_c.enqueue(&NewDoc::new(key, "v1")).unwrap().id();

    let (started, started_rx) = bounded(1);
    let (gate, gate_rx) = bounded(1);
    let stalled = Arc::new(Gate {
        started,
        open: gate_rx,
        fail: false,
    });
    // `_a_ticks` is held but never sent on: A's heartbeat must not renew.
    let (a, _a_ticks) = worker(pipeline(&store_a, &mirror, source.clone(), stalled), "A");
    let (a_done, a_done_rx) = bounded(1);
    let a_thread = std::thread::spawn(move || {
        let _ = a_done.send(a.process_one());
    });
    assert_eq!(
        started_rx.recv_timeout(WAIT).expect("A reached its extractor"),
        key
    );
    let row = job(&store_c, id);
    assert_eq!(
        (row.status, row.owner_worker.as_deref()),
        (Status::Extracting, Some("A"))
    );
    let a_fence = row.fence;

    // A stalls past its lease; B takes over, writes and completes.
    t.clock.advance(LEASE + Duration::from_millis(1));
    let (b, _b_ticks) = worker(pipeline(&store_b, &mirror, source.clone(), Arc::new(Plain)), "B");
    let b_path = Mirror::generation_rel_path(id.0, a_fence + 1).unwrap();
    assert_eq!(
        b.process_one().unwrap(),
        Processed::Indexed {
            key: key.into(),
            path: b_path.clone()
        }
    );
    let row = job(&store_c, id);
    assert_eq!(
        (row.status, row.result_path.as_deref()),
        (Status::Indexed, Some(b_path.as_str()))
    );
    let b_sum = row.checksum.expect("B's checksum recorded");
    assert!(mirror.verify(&b_path, &b_sum).unwrap());

    // The source changes; C claims the new version and is mid-write: its
    // generation is on disk, its completion not yet made.
    assert!(matches!(
        store_c.enqueue(&NewDoc::new(key, "v2")).unwrap(),
        Enqueued::Requeued(_)
    ));
    let c = store_c.claim("C").unwrap().expect("C claims the new version");
    assert_eq!((c.version.as_str(), c.fence), ("v2", a_fence + 2));
    let c_written = mirror.write(id.0, c.fence, b"version two text").unwrap();
    // A's generation file, as a write of A's that landed before it was fenced
    // would have left it (generation paths depend on the fence alone). The code
    // cannot be made to produce it on cue: A's pre-write renewal refuses first.
    let a_path = mirror.write(id.0, a_fence, b"A's late text").unwrap().rel_path;
    let before = job(&store_c, id);

    // A resumes.
    gate.send_timeout((), WAIT).unwrap();
    let a_outcome = a_done_rx.recv_timeout(WAIT).expect("A finished").unwrap();
    a_thread.join().unwrap();
    assert_eq!(
        a_outcome,
        Processed::LeaseLost {
            key: key.into(),
            reason: format!("renewal refused: another owner holds it now (fence {})", c.fence),
        }
    );

    // A changed nothing in the row; its cleanup removed only its own generation.
    assert_eq!(job(&store_c, id), before);
    assert_eq!(before.owner_token.as_deref(), Some(c.token.as_str()));
    assert_eq!(before.result_path.as_deref(), Some(b_path.as_str()));
    assert_eq!(
        mirror.list_doc_files(id.0).unwrap(),
        vec![b_path.clone(), c_written.rel_path.clone()],
        "{a_path} should be gone, the accepted and the current generation kept"
    );
    assert!(
        mirror.verify(&b_path, &b_sum).unwrap(),
        "B's accepted file is intact"
    );
    assert_eq!(mirror.read(&c_written.rel_path).unwrap(), b"version two text");
    // The store saw A only claim and then be refused: no completion attempt.
    assert_eq!(events_of(&store_c, id, a_fence), ["claimed", "renew_rejected"]);

    // C completes; its cleanup retires B's file.
    assert!(store_c
        .complete(
            c,
            leasehold::Completion::new(&c_written.rel_path, &c_written.sha256)
        )
        .unwrap()
        .is_accepted());
    let report = leasehold::pipeline::cleanup(&store_c, &mirror, id).unwrap();
    assert_eq!(report.removed, vec![b_path]);
    assert_eq!(
        mirror.list_doc_files(id.0).unwrap(),
        vec![c_written.rel_path.clone()]
    );
    let row = job(&store_c, id);
    assert_eq!((row.status, row.version.as_str()), (Status::Indexed, "v2"));
    assert!(mirror
        .verify(&c_written.rel_path, row.checksum.as_deref().unwrap())
        .unwrap());
}

/// A stalls in extraction past its lease, B takes over, then A's extractor fails:
/// A's `fail` is refused and reported as `Superseded`; the row stays B's.
#[test]
fn late_failure_of_a_replaced_worker_is_superseded_and_changes_nothing() {
    let t = TempStore::new();
    let (store_a, store_b) = (t.handle(LEASE_MS), t.handle(LEASE_MS));
    let mirror = open_mirror(&t);
    let source = MemSource::new(&[("doc.txt", b"text")]);
    let id = store_b.enqueue(&NewDoc::new("doc.txt", "v1")).unwrap().id();
    let (started, started_rx) = bounded(1);
    let (gate, gate_rx) = bounded(1);
    let failing = Arc::new(Gate {
        started,
        open: gate_rx,
        fail: true,
    });
    let (a, _a_ticks) = worker(pipeline(&store_a, &mirror, source, failing), "A");
    let (a_done, a_done_rx) = bounded(1);
    let a_thread = std::thread::spawn(move || {
        let _ = a_done.send(a.process_one());
    });
    started_rx.recv_timeout(WAIT).expect("A reached its extractor");

    t.clock.advance(LEASE);
    let b = store_b
        .claim("B")
        .unwrap()
        .expect("B takes over the expired lease");
    let before = job(&store_b, id);
    gate.send_timeout((), WAIT).unwrap();
    let outcome = a_done_rx.recv_timeout(WAIT).expect("A finished").unwrap();
    a_thread.join().unwrap();

    assert_eq!(
        outcome,
        Processed::Superseded {
            key: "doc.txt".into(),
            rejection: Rejection::OtherOwner { fence: b.fence }
        }
    );
    assert_eq!(job(&store_b, id), before, "A's refused failure changed the row");
    assert_eq!(before.last_error, None);
    assert_eq!(events_of(&store_b, id, b.fence - 1), ["claimed", "fail_rejected"]);
}

// ----- 2. lease keeping -----

/// A stage ten leases long, ticking after every quarter lease: no other handle
/// can claim the document at any step, the renewals are accepted (the expiry
/// moves forward) and the stage ends `Ok`.
#[test]
fn a_stage_ten_leases_long_keeps_its_lease_through_heartbeat_renewals() {
    let t = TempStore::new();
    let (mine, other) = (t.handle(LEASE_MS), t.handle(LEASE_MS));
    let id = mine.enqueue(&NewDoc::new("long", "v1")).unwrap().id();
    let claim = mine.claim("keeper").unwrap().unwrap();
    let (ticks, ticks_rx) = bounded::<()>(0);
    let keeper = LeaseKeeper::new(mine.clone(), Ticks::Manual(ticks_rx));
    assert_eq!(keeper.interval(), LEASE / 3);

    let steps = 40; // 10 leases in quarter-lease steps
    let out = keeper.run(&claim, |flag| {
        let mut expiries = Vec::new();
        for step in 1..=steps {
            t.clock.advance(LEASE / 4);
            tick_and_wait(&ticks);
            let now = t.clock.now_ms();
            assert!(
                other.claim("thief").unwrap().is_none(),
                "step {step}: claimed from under us at {now}"
            );
            assert!(!flag.is_lost() && !flag.should_stop(), "step {step}");
            let expiry = job(&other, id).lease_expires_at.unwrap();
            assert!(expiry > now, "step {step}: lease ran out at {now}");
            expiries.push(expiry);
        }
        expiries
    });

    let expiries = out.expect("the stage kept its lease");
    assert_eq!(t.clock.now_ms(), 10 * LEASE_MS as i64);
    assert!(expiries.windows(2).all(|w| w[0] <= w[1]), "{expiries:?}");
    let mut distinct = expiries.clone();
    distinct.dedup();
    assert!(
        distinct.len() >= 10,
        "renewals were accepted all along: {distinct:?}"
    );
    assert!(*distinct.last().unwrap() > 10 * LEASE_MS as i64);
    let row = job(&mine, id);
    assert_eq!(
        (row.status, row.owner_token.as_deref()),
        (Status::Extracting, Some(claim.token.as_str()))
    );
    assert_eq!(
        events_of(&mine, id, claim.fence),
        ["claimed"],
        "no renewal was refused"
    );
    assert!(
        mine.complete(claim, leasehold::Completion::new("r", "s"))
            .unwrap()
            .is_accepted(),
        "still the owner at the end"
    );
}

/// Another worker takes over mid-stage; the next renewal is refused: the stage
/// sees the flag raised, and the run ends `LeaseLost` naming the new owner.
#[test]
fn a_refused_renewal_raises_the_flag_and_the_stage_ends_lease_lost() {
    let t = TempStore::new();
    let (mine, other) = (t.handle(LEASE_MS), t.handle(LEASE_MS));
    let id = mine.enqueue(&NewDoc::new("slow", "v1")).unwrap().id();
    let claim = mine.claim("slow").unwrap().unwrap();
    let (ticks, ticks_rx) = bounded::<()>(0);
    let keeper = LeaseKeeper::new(mine.clone(), Ticks::Manual(ticks_rx));

    let mut thief: Option<Claim> = None;
    let mut seen = (false, false, false);
    let out = keeper.run(&claim, |flag| {
        // No tick before time moves: a tick taken earlier could still be in
        // processing and renew after the advance, racing the thief's claim.
        assert!(!flag.is_lost());
        t.clock.advance(LEASE + Duration::from_millis(1));
        thief = Some(
            other
                .claim("thief")
                .unwrap()
                .expect("the expired lease is re-claimed"),
        );
        ticks.send_timeout((), WAIT).expect("the heartbeat took the tick");
        seen = (
            flag.wait_lost(WAIT),
            flag.is_lost(),
            flag.stop_signal().load(Ordering::SeqCst),
        );
    });

    let thief = thief.unwrap();
    assert_eq!(
        seen,
        (true, true, true),
        "(wait_lost, is_lost, stop signal) inside the stage"
    );
    assert_eq!(
        out,
        Err(LeaseLost {
            key: "slow".into(),
            fence: claim.fence,
            reason: format!(
                "renewal refused: another owner holds it now (fence {})",
                thief.fence
            ),
        })
    );
    let row = job(&mine, id);
    assert_eq!(row.owner_token.as_deref(), Some(thief.token.as_str()));
    assert_eq!(
        row.lease_expires_at,
        Some(thief.lease_expires_at),
        "the refused renewal changed nothing"
    );
    assert_eq!(events_of(&mine, id, claim.fence), ["claimed", "renew_rejected"]);
}

/// A stage whose lease was taken before it started does not run at all.
#[test]
fn a_stage_whose_lease_is_already_taken_does_not_run() {
    let t = TempStore::new();
    let (mine, other) = (t.handle(LEASE_MS), t.handle(LEASE_MS));
    mine.enqueue(&NewDoc::new("gone", "v1")).unwrap();
    let claim = mine.claim("late").unwrap().unwrap();
    t.clock.advance(LEASE);
    let thief = other.claim("thief").unwrap().unwrap();
    let (_ticks, ticks_rx) = bounded::<()>(0);
    let keeper = LeaseKeeper::new(mine.clone(), Ticks::Manual(ticks_rx));
    let mut ran = false;
    let out = keeper.run(&claim, |_| ran = true);
    assert!(!ran, "the stage ran without a lease");
    let lost = out.unwrap_err();
    assert_eq!(lost.fence, claim.fence);
    assert_eq!(
        lost.reason,
        format!(
            "renewal refused: another owner holds it now (fence {})",
            thief.fence
        )
    );
}

// ----- 3. cleanup racing writers -----

/// Raises `stop` when dropped, so a failed assertion ends the helper threads of
/// a `thread::scope` (which would otherwise wait for them forever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One generation's writer: the claim and, once it wrote, what it wrote.
struct Gen {
    claim: Claim,
    written: Option<Written>,
}

/// Write `g`'s generation. A current owner's file must be there right after its
/// write, cleaners or not; a replaced owner's may already be gone.
fn write_gen(mirror: &Mirror, g: &mut Gen, round: usize, current: bool) {
    let text = format!("round {round}, fence {}", g.claim.fence);
    let w = mirror
        .write(g.claim.id.0, g.claim.fence, text.as_bytes())
        .expect("mirror write");
    if current {
        match mirror.read(&w.rel_path) {
            Ok(bytes) => assert_eq!(bytes, text.as_bytes(), "round {round}"),
            Err(e) => panic!("round {round}: the current owner's fresh file is gone: {e}"),
        }
    }
    g.written = Some(w);
}

fn complete_gen(store: &Store, g: &Gen) -> String {
    let w = g.written.as_ref().expect("written before completing");
    assert!(store
        .complete(
            leasehold::testing::dup(&g.claim),
            leasehold::Completion::new(&w.rel_path, &w.sha256)
        )
        .unwrap()
        .is_accepted());
    w.rel_path.clone()
}

/// Writers of successive generations of one document race cleanups from three
/// threads for 1,000 rounds: owners that complete at once, owners that stall and
/// are overtaken after lease expiry (writing late, completing late and being
/// refused, concurrently with the new owner's write), and owners left mid-way
/// across a round. After every round the accepted file verifies and the current
/// owner's file (if written) is intact; at the end no temp file is left.
#[test]
fn cleanups_racing_writers_of_successive_generations_never_delete_the_accepted_or_current_file() {
    const ROUNDS: usize = 1_000;
    const CLEANERS: usize = 3;
    let t = TempStore::new();
    let store = Store::open(&t.path, t.options(LEASE_MS).max_attempts(1_000)).unwrap();
    let mirror = open_mirror(&t);
    let id = store.enqueue(&NewDoc::new("doc", "start")).unwrap().id();
    let stop = AtomicBool::new(false);
    let (store, mirror, stop) = (&store, &mirror, &stop);

    let mut accepted: Option<String> = None;
    std::thread::scope(|s| {
        let (ready, ready_rx) = bounded(CLEANERS);
        let cleaners: Vec<_> = (0..CLEANERS)
            .map(|_| {
                let ready = ready.clone();
                s.spawn(move || -> Result<usize, String> {
                    ready.send(()).unwrap();
                    let mut passes = 0;
                    loop {
                        leasehold::pipeline::cleanup(store, mirror, id).map_err(|e| e.to_string())?;
                        passes += 1;
                        if stop.load(Ordering::SeqCst) {
                            return Ok(passes);
                        }
                    }
                })
            })
            .collect();
        let stopper = StopOnDrop(stop);
        for _ in 0..CLEANERS {
            ready_rx.recv_timeout(WAIT).expect("cleaner started");
        }

        // A claim left extracting at the end of the previous round, to be overtaken.
        let mut stalled: Option<Gen> = None;
        for round in 0..ROUNDS {
            let requeue = |round: usize| {
                let out = store.enqueue(&NewDoc::new("doc", format!("v{round}"))).unwrap();
                assert!(matches!(out, Enqueued::Requeued(_)), "round {round}: {out:?}");
            };
            let take = |round: usize| Gen {
                claim: store
                    .claim("writer")
                    .unwrap()
                    .unwrap_or_else(|| panic!("round {round}: claimable")),
                written: None,
            };
            match round % 5 {
                // Claim, write, complete.
                0 => {
                    requeue(round);
                    let mut g = take(round);
                    write_gen(mirror, &mut g, round, true);
                    accepted = Some(complete_gen(store, &g));
                }
                // Claim and stall before writing.
                1 => {
                    requeue(round);
                    stalled = Some(take(round));
                }
                // Claim and write, but end the round before completing.
                3 => {
                    requeue(round);
                    let mut g = take(round);
                    write_gen(mirror, &mut g, round, true);
                    stalled = Some(g);
                }
                // The stalled owner's lease runs out; a new owner takes over and
                // writes while the old one writes late (if it had not) and
                // completes late, concurrently.
                _ => {
                    let mut old = stalled.take().expect("a stalled owner");
                    t.clock.advance(LEASE);
                    let mut new = take(round);
                    assert_eq!(new.claim.fence, old.claim.fence + 1);
                    let new_fence = new.claim.fence;
                    std::thread::scope(|inner| {
                        let late = inner.spawn(move || {
                            if old.written.is_none() {
                                write_gen(mirror, &mut old, round, false);
                            }
                            let w = old.written.as_ref().unwrap();
                            store
                                .complete(old.claim, leasehold::Completion::new(&w.rel_path, &w.sha256))
                                .unwrap()
                        });
                        write_gen(mirror, &mut new, round, true);
                        assert_eq!(
                            late.join().unwrap(),
                            Fenced::Rejected(Rejection::OtherOwner { fence: new_fence }),
                            "round {round}: a late completion was not refused"
                        );
                    });
                    accepted = Some(complete_gen(store, &new));
                }
            }

            // After every round, with the cleaners still running.
            let row = job(store, id);
            assert_eq!(row.result_path, accepted, "round {round}");
            if let (Some(path), Some(sum)) = (&row.result_path, &row.checksum) {
                match mirror.verify(path, sum) {
                    Ok(true) => {}
                    other => panic!("round {round}: accepted {path} does not verify: {other:?}"),
                }
            }
            if let Some(Gen {
                claim,
                written: Some(w),
            }) = &stalled
            {
                assert_eq!((row.status, row.fence), (Status::Extracting, claim.fence));
                let text = format!("round {round}, fence {}", claim.fence);
                match mirror.read(&w.rel_path) {
                    Ok(bytes) => assert_eq!(bytes, text.as_bytes(), "round {round}"),
                    Err(e) => panic!("round {round}: the current owner's file is gone: {e}"),
                }
            }
        }
        drop(stopper);
        for c in cleaners {
            let passes = c.join().unwrap().expect("cleanup never failed");
            assert!(passes >= 1);
        }
    });

    let accepted = accepted.unwrap();
    let files = mirror.list_doc_files(id.0).unwrap();
    assert!(
        files.iter().all(|f| !f.contains(".tmp-")),
        "temp files left: {files:?}"
    );
    assert!(files.contains(&accepted), "{files:?}");
    leasehold::pipeline::cleanup(store, mirror, id).unwrap();
    assert_eq!(mirror.list_doc_files(id.0).unwrap(), vec![accepted]);
}

// ----- 4. a panicking extractor -----

/// One worker, three documents: one whose extractor panics, one whose source
/// panics, one fine. Both panics end their documents dead with the message in
/// `last_error` and the history; the same worker goes on to index the third; the
/// until-idle pool ends.
#[test]
fn a_panicking_extractor_kills_only_its_document_and_the_worker_carries_on() {
    let t = TempStore::new();
    let store = t.handle(LEASE_MS);
    let mirror = open_mirror(&t);
    let docs: &[(&str, &[u8])] = &[
        ("boom.txt", b"x"),
        ("source-boom.txt", b"y"),
        ("fine.txt", b"fine text"),
    ];
    for (key, _) in docs {
        store.enqueue(&NewDoc::new(*key, "v1")).unwrap();
    }
    let source = MemSource::panicking_on(docs, "source-boom.txt");

    let events = run_until_idle(pipeline(&store, &mirror, source, Arc::new(Panicky)), 1);

    let outcomes: Vec<_> = events
        .into_iter()
        .map(|e| e.outcome.expect("no worker error"))
        .collect();
    assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    assert!(
        matches!(&outcomes[0], Processed::Dead { key, .. } if key == "boom.txt"),
        "{outcomes:?}"
    );
    assert!(
        matches!(&outcomes[1], Processed::Dead { key, .. } if key == "source-boom.txt"),
        "{outcomes:?}"
    );
    assert!(
        matches!(&outcomes[2], Processed::Indexed { key, .. } if key == "fine.txt"),
        "{outcomes:?}"
    );

    for (key, says) in [
        ("boom.txt", "extractor panicked: kaboom while reading boom.txt"),
        (
            "source-boom.txt",
            "worker panicked: source exploded while reading source-boom.txt",
        ),
    ] {
        let row = store.job_by_key(key).unwrap().unwrap();
        assert_eq!(
            (row.status, row.attempts),
            (Status::Dead, 1),
            "{key}: dead at once, not retried"
        );
        let error = row.last_error.unwrap();
        // The key is the row's; the reason does not repeat it.
        assert!(
            error.contains(says) && !error.contains(&format!("{key:?}")),
            "{key}: {error}"
        );
        let history = store.history(JobId(row.id)).unwrap();
        let failed = history
            .iter()
            .find(|h| h.event == "failed")
            .expect("failure recorded");
        assert!(failed.detail.as_deref().unwrap().contains(says), "{failed:?}");
    }
    let fine = store.job_by_key("fine.txt").unwrap().unwrap();
    assert_eq!(fine.status, Status::Indexed);
    assert!(mirror
        .verify(
            fine.result_path.as_deref().unwrap(),
            fine.checksum.as_deref().unwrap()
        )
        .unwrap());
    assert_eq!(store.counts().unwrap().extracting, 0);
}

// ----- 5. stop with work in flight -----

/// A pool stops while its only worker is inside an extractor that runs until told
/// to stop: the extractor sees its stop flag, the document is released
/// (discovered, attempts back to 0, `released` in the history), no lease is
/// left, and the queued document is never claimed.
#[test]
fn stopping_with_work_in_flight_releases_it_without_spending_an_attempt() {
    let t = TempStore::new();
    let store = t.handle(LEASE_MS);
    let mirror = open_mirror(&t);
    let source = MemSource::new(&[("slow.txt", b"slow"), ("queued.txt", b"queued")]);
    let slow = store.enqueue(&NewDoc::new("slow.txt", "v1")).unwrap().id();
    let queued = store.enqueue(&NewDoc::new("queued.txt", "v1")).unwrap().id();
    let (started, started_rx) = bounded(1);
    let (stopped, stopped_rx) = bounded(1);
    let extractor = Arc::new(Stubborn { started, stopped });
    let (_ticks, ticks_rx) = bounded::<()>(0);
    let (events, events_rx) = unbounded();
    let pool = WorkerPool::start(
        pipeline(&store, &mirror, source, extractor),
        pool_options(1, ticks_rx, false),
        Some(events),
    )
    .expect("the pool starts");
    assert_eq!(
        started_rx.recv_timeout(WAIT).expect("the worker is extracting"),
        "slow.txt"
    );
    assert_eq!(store.live_leases().unwrap().len(), 1);

    within("pool.stop", move || pool.stop(Duration::from_millis(20)));

    assert_eq!(
        stopped_rx.try_recv().ok().as_deref(),
        Some("slow.txt"),
        "the extractor saw its stop flag"
    );
    let outcomes: Vec<_> = events_rx.try_iter().map(|e| e.outcome).collect();
    assert_eq!(
        outcomes,
        vec![Ok(Processed::Released {
            key: "slow.txt".into()
        })]
    );
    assert!(store.live_leases().unwrap().is_empty(), "a lease is left");
    let counts = store.counts().unwrap();
    assert_eq!((counts.extracting, counts.discovered), (0, 2));
    let row = job(&store, slow);
    assert_eq!(
        (row.status, row.attempts, row.owner_token),
        (Status::Discovered, 0, None)
    );
    let last = store.history(slow).unwrap().pop().unwrap();
    assert_eq!(last.event, "released");
    assert!(last.detail.unwrap().contains("stopping"));
    let row = job(&store, queued);
    assert_eq!(
        (row.status, row.attempts, row.fence),
        (Status::Discovered, 0, 0),
        "claimed after stop"
    );
}

/// With claims ahead, a worker extracts its next batch while its last one is
/// finished (made durable, completed, reported): here the report of the first
/// document is held back (the events channel is a rendezvous the test has not
/// read yet) and the second document is extracted meanwhile. With
/// `claim_ahead` 1 the worker does one thing at a time: the second document
/// waits until the first one's report is taken.
#[test]
fn a_worker_extracts_its_next_batch_while_the_last_one_is_finished() {
    for claim_ahead in [8, 1] {
        let t = TempStore::new();
        let store = t.handle(LEASE_MS);
        let mirror = open_mirror(&t);
        let source = MemSource::new(&[("a.txt", b"first"), ("b.txt", b"second")]);
        store.enqueue(&NewDoc::new("a.txt", "v1")).unwrap();
        store.enqueue(&NewDoc::new("b.txt", "v1")).unwrap();
        let (started, started_rx) = unbounded();
        let (open, open_rx) = unbounded();
        open.send(()).unwrap();
        open.send(()).unwrap();
        let extractor = Arc::new(Gate {
            started,
            open: open_rx,
            fail: false,
        });
        let (_ticks, ticks_rx) = bounded::<()>(0);
        let (events, events_rx) = bounded(0);
        let opts = PoolOptions {
            claim_ahead,
            ..pool_options(1, ticks_rx, true)
        };
        let pool = WorkerPool::start(pipeline(&store, &mirror, source, extractor), opts, Some(events))
            .expect("the pool starts");
        // Dropped before the pool if an assertion fails, so that a worker
        // blocked sending to it is freed and the pool can be joined.
        let events_rx = events_rx;
        // A worker's first batch is one document.
        assert_eq!(started_rx.recv_timeout(WAIT).as_deref(), Ok("a.txt"));
        if claim_ahead > 1 {
            assert_eq!(
                started_rx.recv_timeout(WAIT).as_deref(),
                Ok("b.txt"),
                "the next batch is extracted while the last one's report waits"
            );
        } else {
            // Nothing can make it start: the one thread is sending the report.
            assert!(started_rx.recv_timeout(Duration::from_millis(300)).is_err());
        }
        let first = events_rx.recv_timeout(WAIT).expect("the first report");
        assert_eq!(
            first.outcome,
            Ok(Processed::Indexed {
                key: "a.txt".into(),
                path: "s000/000/1.g000001.txt".into()
            })
        );
        if claim_ahead == 1 {
            assert_eq!(started_rx.recv_timeout(WAIT).as_deref(), Ok("b.txt"));
        }
        let second = events_rx.recv_timeout(WAIT).expect("the second report");
        assert!(
            matches!(second.outcome, Ok(Processed::Indexed { .. })),
            "{second:?}"
        );
        within("the until-idle pool", move || pool.join());
        assert_eq!(store.counts().unwrap().indexed, 2);
    }
}

/// Every claim a worker holds keeps its lease while the worker is busy
/// elsewhere (issue 26, point 7): documents claimed ahead wait in a batch
/// while the one before them extracts, then wait staged for the finisher,
/// which is held up reporting the previous batch (the events channel is a
/// rendezvous the test has not read yet), i.e. busy finishing. Across three
/// leases of ticks no held lease runs out, nobody can take a document over,
/// and every document is indexed under its first claim.
#[test]
fn claims_held_ahead_keep_their_leases_while_the_finisher_is_busy() {
    let t = TempStore::new();
    let store = t.handle(LEASE_MS);
    let other = t.handle(LEASE_MS);
    let mirror = open_mirror(&t);
    let keys = ["a.txt", "b.txt", "c.txt", "d.txt"];
    let docs: Vec<(&str, &[u8])> = keys.iter().map(|k| (*k, k.as_bytes())).collect();
    let source = MemSource::new(&docs);
    let enqueue = |key: &str| store.enqueue(&NewDoc::new(key, "v1")).unwrap().id();
    let mut ids: Vec<JobId> = vec![enqueue(keys[0])];
    let (started, started_rx) = unbounded();
    let (open, open_rx) = unbounded();
    let extractor = Arc::new(Gate {
        started,
        open: open_rx,
        fail: false,
    });
    let (ticks, ticks_rx) = bounded::<()>(0);
    let (events, events_rx) = bounded(0);
    // Unpaced: every batch claims up to eight, however long a.txt took on
    // this machine (a paced worker's second batch is one document when the
    // first took more than half its 25 ms budget).
    let opts = PoolOptions {
        claim_ahead: 8,
        paced: false,
        ..pool_options(1, ticks_rx, true)
    };
    let pool = WorkerPool::start(pipeline(&store, &mirror, source, extractor), opts, Some(events))
        .expect("the pool starts");
    let events_rx = events_rx;
    // a.txt is alone in the first batch: the others come while it extracts.
    assert_eq!(started_rx.recv_timeout(WAIT).as_deref(), Ok("a.txt"));
    ids.extend(keys[1..].iter().map(|k| enqueue(k)));
    open.send(()).unwrap();
    // The next batch claims the other three at once; b.txt's extraction
    // blocks, c.txt and d.txt wait their turn in the batch.
    assert_eq!(started_rx.recv_timeout(WAIT).as_deref(), Ok("b.txt"));
    for id in &ids[1..] {
        assert_eq!(job(&store, *id).status, Status::Extracting, "claimed ahead");
    }
    // No held lease may run out, whatever the worker is doing.
    let leases_hold = |when: &str| {
        let now = t.clock.now_ms();
        for (key, id) in keys.iter().zip(&ids) {
            let row = job(&other, *id);
            if row.status == Status::Extracting {
                let expiry = row.lease_expires_at.unwrap();
                assert!(expiry > now, "{when}: {key}'s lease ran out at {now} ({expiry})");
            }
        }
        assert!(
            other.claim("thief").unwrap().is_none(),
            "{when}: a held document was taken over"
        );
    };
    for step in 0..12 {
        t.clock.advance(LEASE / 4);
        tick_and_wait(&ticks);
        leases_hold(&format!("while b.txt extracts, step {step}"));
    }
    // Let the batch go: it is staged and waits for the finisher, still busy.
    for _ in 1..keys.len() {
        open.send(()).unwrap();
    }
    for key in &keys[2..] {
        assert_eq!(started_rx.recv_timeout(WAIT).as_deref(), Ok(*key));
    }
    for step in 0..12 {
        t.clock.advance(LEASE / 4);
        tick_and_wait(&ticks);
        leases_hold(&format!("while the batch waits for the finisher, step {step}"));
    }
    for _ in &keys {
        let e = events_rx.recv_timeout(WAIT).expect("a report");
        assert!(matches!(e.outcome, Ok(Processed::Indexed { .. })), "{e:?}");
    }
    within("the until-idle pool", move || pool.join());
    drop(ticks);
    for (key, id) in keys.iter().zip(&ids) {
        let claims = store
            .history(*id)
            .unwrap()
            .into_iter()
            .filter(|h| h.event == "claimed")
            .count();
        assert_eq!(claims, 1, "{key} was claimed once");
    }
    assert_eq!(store.counts().unwrap().indexed, keys.len() as u64);
}

// ----- 6. bad inputs through the real directory source and extractors -----

fn sample(name: &str) -> Vec<u8> {
    std::fs::read(common::workspace().join("samples").join(name)).unwrap()
}

/// Every kind of bad input next to good ones, through `DirSource::discover`, the
/// registry and an until-idle pool with a 1 KiB input limit: each bad document is
/// dead with an error naming it and saying what is wrong; each good one (odd
/// bytes and odd names included) is indexed and its mirror file verifies.
#[test]
fn bad_inputs_fail_alone_with_clear_errors_and_good_ones_are_indexed() {
    const LIMIT: u64 = 1024;
    let t = TempStore::new();
    let store = t.handle(LEASE_MS);
    let mirror = open_mirror(&t);
    let src = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let put =
        |name: &[u8], bytes: &[u8]| std::fs::write(src.path().join(OsStr::from_bytes(name)), bytes).unwrap();

    put(b"good.md", b"# Heading\n\nplain words here\n");
    put(b"bad-utf8.txt", b"caf\xe9 au lait \xff end\n");
    put(b"empty.txt", b"");
    put(b"new\nline.txt", b"newline name content");
    put(b"raw-\xff\xfe.txt", b"raw name content");
    put(b"big.txt", &[b'x'; 2 * LIMIT as usize]);
    // Cut off before its first object: nothing for even a repairing parser to
    // rebuild (a PDF cut in half is repaired and read these days).
    put(
        b"truncated.pdf",
        b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Cat",
    );
    let docx = sample("letter.docx");
    put(b"corrupt.docx", &docx[..docx.len() / 2]);
    // A link to nothing stands in for an unreadable file (tests run as root).
    std::os::unix::fs::symlink("nowhere.txt", src.path().join("broken.txt")).unwrap();
    std::fs::write(outside.path().join("secret.txt"), b"secret").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), src.path().join("escape.txt")).unwrap();

    let dir = DirSource::open(src.path()).unwrap();
    let found = dir.discover(&store, LIMIT).unwrap();
    assert_eq!((found.new, found.skipped.len()), (10, 0), "{found:?}");
    let p = Pipeline {
        max_input_bytes: LIMIT,
        deliver_results: false,
        ..pipeline(
            &store,
            &mirror,
            Arc::new(dir),
            Arc::new(ExtractorRegistry::new(LIMIT)),
        )
    };
    let events = run_until_idle(p, 2);
    assert_eq!(events.len(), 10, "each document processed once: {events:?}");
    assert!(events.iter().all(|e| e.outcome.is_ok()), "{events:?}");

    for (key, says) in [
        ("broken.txt", "does not exist"),
        ("escape.txt", "points outside the source directory"),
        ("big.txt", "2048 bytes is over the 1024-byte input limit"),
        ("truncated.pdf", "malformed pdf document"),
        ("corrupt.docx", "malformed docx document"),
    ] {
        let row = store.job_by_key(key).unwrap().unwrap();
        assert_eq!((row.status, row.attempts), (Status::Dead, 1), "{key}");
        let error = row.last_error.unwrap();
        assert!(
            !error.contains(&format!("{key:?}")),
            "{key}: the error repeats the key beside it: {error}"
        );
        assert!(error.contains(says), "{key}: {error}");
        assert_eq!(row.result_path, None);
    }

    let raw_key = key_for(Path::new(OsStr::from_bytes(b"raw-\xff\xfe.txt")));
    for (key, text) in [
        ("good.md", "plain words here"),
        ("bad-utf8.txt", "caf\u{e9} au lait \u{ff} end"),
        ("empty.txt", ""),
        ("new\nline.txt", "newline name content"),
        (raw_key.as_str(), "raw name content"),
    ] {
        let row = store.job_by_key(key).unwrap().unwrap();
        assert_eq!(row.status, Status::Indexed, "{key:?}: {:?}", row.last_error);
        let (path, sum) = (row.result_path.unwrap(), row.checksum.unwrap());
        assert!(mirror.verify(&path, &sum).unwrap(), "{key:?}");
        let got = String::from_utf8(mirror.read(&path).unwrap()).unwrap();
        if text.is_empty() {
            assert_eq!(got, "", "{key:?}");
        } else {
            assert!(got.contains(text), "{key:?}: {got:?}");
        }
    }
    let counts = store.counts().unwrap();
    assert_eq!((counts.indexed, counts.dead, counts.total()), (5, 5, 10));
}

/// The shipped sample corpus runs to all-indexed, each mirror file holding its
/// phrase; a second discover finds everything unchanged and there is nothing to claim.
#[test]
fn the_sample_corpus_is_indexed_and_a_second_discover_changes_nothing() {
    let t = TempStore::new();
    let store = t.handle(LEASE_MS);
    let mirror = open_mirror(&t);
    let dir = DirSource::open(common::workspace().join("samples")).unwrap();
    let max = ExtractorRegistry::DEFAULT_MAX_INPUT_BYTES;
    let phrases = common::SAMPLE_PHRASES;
    let first = dir.discover(&store, max).unwrap();
    assert_eq!(
        (first.new, first.changed, first.unchanged),
        (phrases.len(), 0, 0),
        "{first:?}"
    );
    let p = Pipeline {
        max_input_bytes: max,
        deliver_results: false,
        ..pipeline(
            &store,
            &mirror,
            Arc::new(dir.clone()),
            Arc::new(ExtractorRegistry::default()),
        )
    };
    let events = run_until_idle(p, 2);
    assert_eq!(events.len(), phrases.len(), "{events:?}");

    for (key, phrase) in phrases {
        let row = store
            .job_by_key(key)
            .unwrap()
            .unwrap_or_else(|| panic!("{key} discovered"));
        assert_eq!(row.status, Status::Indexed, "{key}: {:?}", row.last_error);
        let path = row.result_path.unwrap();
        assert!(mirror.verify(&path, &row.checksum.unwrap()).unwrap(), "{key}");
        let text = String::from_utf8(mirror.read(&path).unwrap()).unwrap();
        assert!(text.contains(phrase), "{key}: {phrase:?} not in {text:?}");
    }
    assert_eq!(store.counts().unwrap().indexed, phrases.len() as u64);

    let again = dir.discover(&store, max).unwrap();
    assert_eq!((again.new, again.changed, again.gone), (0, 0, 0), "{again:?}");
    assert_eq!(again.unchanged, phrases.len());
    assert!(
        store.claim("probe").unwrap().is_none(),
        "a second discover queued work"
    );
    assert_eq!(store.counts().unwrap().indexed, phrases.len() as u64);
}

// ----- the rerun's check of the accepted results -----

/// The documents of `dir` indexed into a new store and mirror of `t`.
fn indexed_tree(t: &TempStore, dir: &Path) -> (Store, Mirror, u64) {
    let store = t.handle(LEASE_MS);
    let mirror = open_mirror(t);
    let dir = DirSource::open(dir).unwrap();
    let max = ExtractorRegistry::DEFAULT_MAX_INPUT_BYTES;
    let found = dir.discover(&store, max).unwrap();
    let p = Pipeline {
        max_input_bytes: max,
        ..pipeline(
            &store,
            &mirror,
            Arc::new(dir),
            Arc::new(ExtractorRegistry::default()),
        )
    };
    run_until_idle(p, 2);
    let n = found.new as u64;
    assert_eq!(store.counts().unwrap().indexed, n);
    (store, mirror, n)
}

/// Set the test clock `by_ms` after the latest change of the shards
/// `shards` (their directories' times are the real clock's); where shards
/// are not stamped, after the real time.
fn clock_after_shards(t: &TempStore, mirror: &Mirror, shards: std::ops::Range<i64>, by_ms: i64) {
    let real_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let changed = shards
        .map(|shard| mirror.shard_stamp(shard).map_or_else(real_now, |s| s.changed_ms))
        .max()
        .unwrap();
    t.clock.set(changed + by_ms);
}

/// The sample corpus indexed, the clock two seconds past its shard's last
/// change: a check may stamp it.
fn settled_samples(t: &TempStore) -> (Store, Mirror, u64) {
    let (store, mirror, n) = indexed_tree(t, &common::workspace().join("samples"));
    clock_after_shards(t, &mirror, 0..1, 2_000);
    (store, mirror, n)
}

/// What a test expects where shards are stamped, else on the portable
/// paths, which look at every result.
fn stamped_or<T>(mirror: &Mirror, stamped: T, portable: T) -> T {
    if mirror.stamps_shards() {
        stamped
    } else {
        portable
    }
}

fn check(store: &Store, mirror: &Mirror) -> leasehold::pipeline::Rechecked {
    leasehold::pipeline::recheck_results(store, mirror).unwrap()
}

/// Delete document `key`'s result, then set its shard directory's
/// modification time back: its change time still moves.
fn delete_result_hiding_it(store: &Store, mirror: &Mirror, key: &str) -> JobId {
    let row = store.job_by_key(key).unwrap().unwrap();
    let result = mirror.root().join(row.result_path.unwrap());
    let shard = result.parent().unwrap().to_owned();
    let modified = std::fs::metadata(&shard).unwrap().modified().unwrap();
    std::fs::remove_file(&result).unwrap();
    std::fs::File::open(&shard)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    assert_eq!(std::fs::metadata(&shard).unwrap().modified().unwrap(), modified);
    JobId(row.id)
}

/// A rerun's check passes over a shard whose directory is as the last check
/// that found all of its results left it, and looks at it again once a name
/// in it changed: a deleted result is found even when the directory's
/// modification time is set back, since its change time moved (DESIGN §9a).
/// Where shards are not stamped (the portable paths), every check looks at
/// every result.
#[test]
fn the_results_check_passes_over_a_shard_left_as_it_was_and_finds_a_deletion_in_it() {
    let t = TempStore::new();
    let (store, mirror, n) = settled_samples(&t);
    let first = check(&store, &mirror);
    assert_eq!(
        (first.checked, first.requeued, first.shards_as_checked),
        (n, 0, 0)
    );
    let second = check(&store, &mirror);
    let expected = stamped_or(&mirror, (0, 0, 1), (n, 0, 0));
    assert_eq!(
        (second.checked, second.requeued, second.shards_as_checked),
        expected
    );

    let id = delete_result_hiding_it(&store, &mirror, "notes.txt");
    let third = check(&store, &mirror);
    assert_eq!(
        (third.checked, third.requeued, third.shards_as_checked),
        (n, 1, 0)
    );
    assert_eq!(job(&store, id).status, Status::Discovered);
}

/// A check made less than two seconds after a shard last changed does not
/// stamp it: a file system that keeps coarse times (FAT's two seconds) could
/// give a change made right after the check the same times. At two seconds
/// it does.
#[test]
fn a_shard_changed_within_two_seconds_of_the_check_is_looked_at_again() {
    let t = TempStore::new();
    let (store, mirror, n) = indexed_tree(&t, &common::workspace().join("samples"));
    clock_after_shards(&t, &mirror, 0..1, 1_999);
    for _ in 0..2 {
        let check = check(&store, &mirror);
        assert_eq!((check.checked, check.shards_as_checked), (n, 0));
    }
    assert_eq!(store.meta("checked_shards").unwrap(), None);
    clock_after_shards(&t, &mirror, 0..1, 2_000);
    check(&store, &mirror);
    let passed = stamped_or(&mirror, 1, 0);
    assert_eq!(check(&store, &mirror).shards_as_checked, passed);
}

/// No shard is stamped by a check that ends while a document is under a
/// claim: its worker may have renamed its file into the shard before the
/// stamp, and a file deleted then and accepted after it would be missing
/// in a shard passed over. Once the claim is let go, a check stamps, and a
/// later one passes over.
#[test]
fn a_check_that_ends_while_a_document_is_under_a_claim_stamps_no_shard() {
    let t = TempStore::new();
    let (store, mirror, n) = settled_samples(&t);
    let id = store.job_by_key("notes.txt").unwrap().unwrap().id;
    assert!(store.requeue(JobId(id), "to be claimed").unwrap());
    let claim = store.claim("holder").unwrap().expect("the requeued document");
    for _ in 0..2 {
        let check = check(&store, &mirror);
        assert_eq!((check.checked, check.shards_as_checked), (n - 1, 0));
    }
    assert_eq!(store.meta("checked_shards").unwrap(), None);
    assert_eq!(store.release(claim, "let go").unwrap(), Fenced::Accepted);
    check(&store, &mirror);
    let after = check(&store, &mirror);
    let expected = stamped_or(&mirror, (0, 1), (n - 1, 0));
    assert_eq!((after.checked, after.shards_as_checked), expected);
}

/// Nor does a check during which a history line was written (a claim or a
/// completion came in between): here a requeue made while the check runs,
/// where its caller's wait is.
#[test]
fn a_check_during_which_the_store_was_written_stamps_no_shard() {
    let t = TempStore::new();
    let (store, mirror, n) = settled_samples(&t);
    let id = store.job_by_key("notes.txt").unwrap().unwrap().id;
    let mut requeued = false;
    let check = leasehold::pipeline::recheck_results_writing_after(&store, &mirror, || {
        if !requeued {
            requeued = store.requeue(JobId(id), "meanwhile").unwrap();
        }
    })
    .unwrap();
    // The wait before the stamps are recorded: where none are, no wait.
    assert_eq!(requeued, mirror.stamps_shards());
    assert_eq!((check.checked, check.shards_as_checked), (n, 0));
    assert_eq!(store.meta("checked_shards").unwrap(), None);
}

/// Once a document was claimed, completed or queued again since the stamps
/// were left, a check looks at its shard again: a mirror rolled back to a
/// snapshot keeps its directories' inodes and times, and would otherwise
/// hide the results accepted after the stamps.
#[test]
fn after_a_write_to_the_store_the_check_looks_at_the_written_documents_shard_again() {
    let t = TempStore::new();
    let (store, mirror, n) = settled_samples(&t);
    check(&store, &mirror);
    let passed = stamped_or(&mirror, 1, 0);
    assert_eq!(check(&store, &mirror).shards_as_checked, passed);
    let id = store.job_by_key("notes.txt").unwrap().unwrap().id;
    assert!(store.requeue(JobId(id), "a write").unwrap());
    let after = check(&store, &mirror);
    assert_eq!((after.checked, after.shards_as_checked), (n - 1, 0));
}

/// 1,100 documents (ids 1 to 1,100, in shards 0 and 1), indexed, checked
/// once and then again: the second check passes over both shards where
/// shards are stamped.
fn two_stamped_shards(t: &TempStore) -> (Store, Mirror, u64) {
    let tree = t.dir.path().join("tree");
    for i in 0..1_100 {
        let sub = tree.join(format!("d{}", i / 100));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{i:04}.txt")), format!("document {i} words\n")).unwrap();
    }
    let (store, mirror, n) = indexed_tree(t, &tree);
    assert_eq!(n, 1_100);
    clock_after_shards(t, &mirror, 0..2, 2_000);
    assert_eq!(check(&store, &mirror).checked, n);
    let second = check(&store, &mirror);
    let expected = stamped_or(&mirror, (0, 2), (n, 0));
    assert_eq!((second.checked, second.shards_as_checked), expected);
    (store, mirror, n)
}

/// How many of the 1,100 documents' results are in shard 1 (ids 1,024 on).
const IN_SHARD_1: u64 = 1_100 - (1 << 10) + 1;

/// Over several shards, the check passes over the ones as they were and
/// finds the deletion in the other, reading past the shards it skips.
#[test]
fn the_check_passes_over_whole_shards_and_looks_into_the_changed_one() {
    let t = TempStore::new();
    let (store, mirror, n) = two_stamped_shards(&t);

    // The last document's result is in shard 1; shard 0 is as it was.
    let last = job(&store, JobId(1_100));
    assert_eq!(last.id >> 10, 1);
    delete_result_hiding_it(&store, &mirror, &last.key);
    let third = check(&store, &mirror);
    let expected = stamped_or(&mirror, (IN_SHARD_1, 1, 1), (n, 1, 0));
    assert_eq!((third.checked, third.requeued, third.shards_as_checked), expected);
}

/// The document and sequence of the history line the stamps were left at
/// (`None` where shards are not stamped): `mark=job_id:seq@rowid`.
fn stamps_mark_line(store: &Store) -> Option<(i64, i64)> {
    let setting = store.meta("checked_shards").unwrap()?;
    let mark = setting.lines().next()?.strip_prefix("mark=")?;
    let (doc, rest) = mark.split_once(':')?;
    let seq = rest.split_once('@')?.0;
    Some((doc.parse().unwrap(), seq.parse().unwrap()))
}

/// A write to one document of the store since the stamps makes its shard
/// looked at again and leaves the others passed over, the shard of the
/// line the stamps were left at among them (the lines read are the ones
/// after it); the check after, quiet, stamps them all at the new mark.
#[test]
fn a_write_to_one_shards_document_leaves_the_other_shards_passed_over() {
    let t = TempStore::new();
    let (store, mirror, n) = two_stamped_shards(&t);
    // A document of the shard the mark's line is not in.
    let written = match stamps_mark_line(&store) {
        Some((doc, _)) if doc >> 10 == 1 => 5,
        _ => 1_100,
    };
    let looked_at = if written >> 10 == 1 {
        IN_SHARD_1
    } else {
        n - IN_SHARD_1
    };
    assert!(store.requeue(JobId(written), "a write").unwrap());
    let third = check(&store, &mirror);
    let expected = stamped_or(&mirror, (looked_at - 1, 1), (n - 1, 0));
    assert_eq!((third.checked, third.shards_as_checked), expected);
    let fourth = check(&store, &mirror);
    let expected = stamped_or(&mirror, (0, 2), (n - 1, 0));
    assert_eq!((fourth.checked, fourth.shards_as_checked), expected);
}

/// A quiet check that stamps nothing new still leaves the stamps it kept
/// at its own mark: left at the old one, every later check would read the
/// lines since it again, more each time.
#[test]
fn a_quiet_check_moves_the_kept_stamps_to_its_mark() {
    let t = TempStore::new();
    let (store, mirror, n) = two_stamped_shards(&t);
    let before = store.meta("checked_shards").unwrap();
    assert!(store.requeue(JobId(1_100), "a write in shard 1").unwrap());
    // Shard 1 is looked at but too young to be stamped again.
    clock_after_shards(&t, &mirror, 1..2, 1_999);
    let third = check(&store, &mirror);
    if !mirror.stamps_shards() {
        assert_eq!((third.checked, third.shards_as_checked), (n - 1, 0));
        return;
    }
    assert_eq!((third.checked, third.shards_as_checked), (IN_SHARD_1 - 1, 1));
    let after = store.meta("checked_shards").unwrap().unwrap();
    assert_ne!(
        Some(after.lines().next().unwrap()),
        before.as_deref().and_then(|b| b.lines().next())
    );
    assert_eq!(
        after
            .lines()
            .skip(1)
            .map(|l| l.split_once('=').unwrap().0)
            .collect::<Vec<_>>(),
        ["0"]
    );
}

/// When the history line the stamps were left at is gone (`gc` prunes lines
/// older than `history_keep`), which documents were written since cannot
/// be said: every shard is looked at.
#[test]
fn when_the_stamps_history_line_is_gone_the_check_looks_at_every_shard() {
    let t = TempStore::new();
    let (store, mirror, n) = two_stamped_shards(&t);
    let Some((doc, seq)) = stamps_mark_line(&store) else {
        assert!(!mirror.stamps_shards());
        return;
    };
    assert!(store.requeue(JobId(5), "a write in shard 0").unwrap());
    let removed = rusqlite::Connection::open(&t.path)
        .unwrap()
        .execute("DELETE FROM history WHERE job_id = ?1 AND seq = ?2", [doc, seq])
        .unwrap();
    assert_eq!(removed, 1);
    let third = check(&store, &mirror);
    assert_eq!((third.checked, third.shards_as_checked), (n - 1, 0));
}
