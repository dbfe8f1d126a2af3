//! Running a stage under a lease, and keeping every held claim's lease (DESIGN §4).
//!
//! Before a stage starts its lease is renewed once (unless it was renewed just
//! now); while it runs, a heartbeat thread renews it every `max(100 ms, lease /
//! 3)` of the injected clock. A claim the worker holds without running a stage
//! on it (claimed ahead in a batch, staged and waiting for the finisher, being
//! completed) is renewed by the same heartbeat once it is [held](LeaseKeeper::hold),
//! until it is [let go](LeaseKeeper::let_go) before the write that ends it: all
//! the claims due on a tick in one [`Store::renew_many`], off the threads that
//! work on them, so no long step of the worker's (a long text's completion)
//! lets another claim's lease run out. A refused or failed renewal marks the
//! lease lost and raises a [`LeaseFlag`] the stage may poll to stop early; a
//! later stage of a lost claim does not run. The stage itself is never killed
//! (it may be blocked in a syscall); when it returns, a renewal still in flight
//! is waited for, and the loss, if any, is reported. Renewing is an
//! optimisation: the final guard is always the fenced `complete`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::clock::{duration_ms, Millis};
use crate::job::{Claim, Fenced, JobId, Owner};
use crate::service::{Service, StopSignal};
use crate::store::Store;

/// Where heartbeat ticks come from. On each tick the heartbeat renews if the
/// clock says a renewal is due, so in tests a [`Ticks::Manual`] channel plus a
/// `ManualClock` drive it step by step without sleeping.
#[derive(Debug, Clone)]
pub enum Ticks {
    /// A real timer: tick every half renewal interval.
    Timer,
    /// Ticks sent by a test.
    Manual(Receiver<()>),
}

/// Raised when the lease is lost (or the pool is stopping hard); shared by the
/// heartbeat and the stage.
#[derive(Debug, Default)]
pub struct LeaseFlag {
    stop: AtomicBool,
    lost: Mutex<Option<String>>,
    raised: Condvar,
}

impl LeaseFlag {
    /// The flag a stage polls to stop early: raised when the lease is lost or the
    /// pool is stopping hard. Extractors take it as a plain `AtomicBool`.
    pub fn stop_signal(&self) -> &AtomicBool {
        &self.stop
    }

    /// True once the stage should stop early (lease lost or hard stop).
    pub fn should_stop(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// True once the lease is lost: the stage may stop early, its result will be refused.
    pub fn is_lost(&self) -> bool {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Wait until the flag is raised or `timeout` passes; true if raised.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let g = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        let (g, _) = self
            .raised
            .wait_timeout_while(g, timeout, |lost| lost.is_none())
            .unwrap_or_else(|e| e.into_inner());
        g.is_some()
    }

    fn raise(&self, why: String) {
        let mut g = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(why);
        }
        self.stop.store(true, Ordering::SeqCst);
        self.raised.notify_all();
    }

    fn cancel(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    fn reason(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The lease was lost before or during a stage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lease on document {key:?} (fence {fence}) lost: {reason}")]
pub struct LeaseLost {
    /// The document key of the claim.
    pub key: String,
    /// The fence of the claim that lost its lease; its writes are refused from now on.
    pub fence: i64,
    /// Why the lease is gone: the renewal's rejection or error, as text.
    pub reason: String,
}

/// Keeps claims alive while they are held and while stages run. Owns one
/// heartbeat thread for its whole life, stopped and joined on drop. A stage and
/// the heartbeat meet only through a mutex-guarded slot: starting or ending a
/// stage wakes no thread (a worker runs three stages per document, and a
/// hand-off per stage cost more than the renewals themselves); the heartbeat
/// looks at the slot on its own ticks.
#[derive(Debug)]
pub struct LeaseKeeper {
    /// One stage at a time (a stage's flag is kept on its claim's entry).
    one_stage: Mutex<()>,
    store: Store,
    shared: Arc<Shared>,
    /// The claim whose stage ran last and when its lease was last renewed: the
    /// next stage of the same claim need not renew a lease renewed just now.
    recent: Mutex<Option<(JobId, i64, Millis)>>,
    /// The heartbeat thread; stopped and joined with the keeper.
    _heartbeat: Option<Service>,
}

/// The slot a stage fills and the heartbeat reads.
#[derive(Debug, Default)]
struct Shared {
    slot: Mutex<Slot>,
    /// Signalled when a renewal in flight has finished.
    renewal_done: Condvar,
}

#[derive(Debug, Default)]
struct Slot {
    /// Every claim kept alive: those held, and the one a stage runs on.
    kept: Vec<Kept>,
    /// The heartbeat is renewing claims (outside the lock) right now.
    renewing: bool,
    /// The pool is stopping hard: every stage's stop signal is raised, nothing
    /// is renewed any more.
    cancelled: bool,
}

/// One claim kept alive.
#[derive(Debug)]
struct Kept {
    /// The heartbeat's handle on the claim: it can renew, never finish; shared
    /// so a renewal outside the lock needs no copy of its own.
    owner: Arc<Owner>,
    /// When the lease was granted or last renewed: the next renewal is due an
    /// interval later.
    last_renewal: Millis,
    /// Why the lease is lost, once a renewal was refused or failed.
    lost: Option<String>,
    /// The flag of the stage running on the claim, if one is.
    stage: Option<Arc<LeaseFlag>>,
    /// Held (by [`LeaseKeeper::hold`]) rather than kept only while a stage runs.
    held: bool,
}

impl Kept {
    fn is(&self, claim: &Claim) -> bool {
        (self.owner.id, self.owner.fence) == (claim.id, claim.fence) && self.owner.token == claim.token
    }
}

/// Claims held by [`LeaseKeeper::hold`]: each is renewed by the heartbeat
/// until it is let go ([`LeaseKeeper::let_go`]) or this is dropped (a batch
/// dropped unfinished leaves its leases to run out).
#[derive(Debug)]
pub struct Holding {
    shared: Arc<Shared>,
    claims: Vec<(JobId, i64)>,
}

impl Drop for Holding {
    fn drop(&mut self) {
        for (id, fence) in std::mem::take(&mut self.claims) {
            self.shared.let_go(id, fence);
        }
    }
}

/// What the heartbeat thread needs.
struct Heartbeat {
    store: Store,
    shared: Arc<Shared>,
    interval_ms: Millis,
}

impl LeaseKeeper {
    /// A keeper renewing every `max(100 ms, lease / 3)`.
    pub fn new(store: Store, ticks: Ticks) -> Self {
        Self::with_cancel(store, ticks, crossbeam_channel::never())
    }

    /// Like [`LeaseKeeper::new`]; when `cancel` closes (the pool stops hard),
    /// every running stage's stop signal is raised.
    pub(crate) fn with_cancel(store: Store, ticks: Ticks, cancel: Receiver<()>) -> Self {
        let shared = Arc::new(Shared::default());
        let beat = Heartbeat {
            interval_ms: duration_ms(renew_interval(&store)),
            store: store.clone(),
            shared: Arc::clone(&shared),
        };
        // Without a heartbeat a stage is renewed once, before it starts; the
        // fenced completion stays the guard.
        let heartbeat =
            Service::start("leasehold-heartbeat", move |stop| beat.run(ticks, cancel, &stop)).ok();
        LeaseKeeper {
            one_stage: Mutex::new(()),
            store,
            shared,
            recent: Mutex::new(None),
            _heartbeat: heartbeat,
        }
    }

    /// How often the heartbeat renews.
    pub fn interval(&self) -> Duration {
        renew_interval(&self.store)
    }

    /// Keep `claims` alive from now on, whether or not a stage runs on them,
    /// until each is let go ([`LeaseKeeper::let_go`]) or the returned
    /// [`Holding`] is dropped. A worker holds every claim from its claim to
    /// the write that ends it.
    pub fn hold(&self, claims: &[Claim]) -> Holding {
        let lease = duration_ms(self.store.options().lease);
        let mut slot = self.shared.lock();
        for claim in claims {
            let granted = claim.lease_expires_at.saturating_sub(lease);
            match slot.kept.iter_mut().find(|k| k.is(claim)) {
                Some(k) => k.held = true,
                None => slot.kept.push(Kept {
                    owner: Arc::new(claim.owner()),
                    last_renewal: granted,
                    lost: None,
                    stage: None,
                    held: true,
                }),
            }
        }
        Holding {
            shared: Arc::clone(&self.shared),
            claims: claims.iter().map(|c| (c.id, c.fence)).collect(),
        }
    }

    /// Stop keeping `claim` alive, before the write that ends it: returns once
    /// no renewal of it is in flight, so none lands after that write.
    pub fn let_go(&self, claim: &Claim) {
        self.shared.let_go(claim.id, claim.fence);
    }

    /// When `claim`'s lease was granted or last renewed, if that was less than
    /// half a renewal interval before `now` (by the claim's own expiry, or by
    /// this keeper's last stage of the same claim).
    fn fresh_since(&self, claim: &Claim, now: Millis) -> Option<Millis> {
        let lease = duration_ms(self.store.options().lease);
        let mut granted = claim.lease_expires_at.saturating_sub(lease);
        if let Some(k) = self.shared.lock().kept.iter().find(|k| k.is(claim)) {
            granted = granted.max(k.last_renewal);
        }
        if let Some((id, fence, at)) = *self.recent.lock().unwrap_or_else(|e| e.into_inner()) {
            if (id, fence) == (claim.id, claim.fence) {
                granted = granted.max(at);
            }
        }
        let half = duration_ms(self.interval()) / 2;
        (granted <= now && now - granted < half).then_some(granted)
    }

    /// Run `stage` under `claim`'s lease: renew first (a refused renewal means the
    /// stage does not run), renew on the heartbeat while it runs, and report
    /// [`LeaseLost`] if any renewal was refused or failed.
    ///
    /// The first renewal is skipped when the lease was granted or renewed less
    /// than half an interval ago (the claim itself, or the previous stage of the
    /// same claim): the heartbeat would not renew it either, nobody can re-claim
    /// a lease with most of its time left, and the fenced completion stays the
    /// final guard. Small documents run three stages in a few milliseconds, and
    /// a write transaction per stage cost more than the document.
    pub fn run<T>(&self, claim: &Claim, stage: impl FnOnce(&LeaseFlag) -> T) -> Result<T, LeaseLost> {
        let _one = self.one_stage.lock().unwrap_or_else(|e| e.into_inner());
        // A held claim whose renewal was refused meanwhile: the stage does not run.
        if let Some(why) = self.shared.lost(claim) {
            return Err(lost(claim, why));
        }
        // Read before renewing: the renewal extends the lease from at least this
        // time, so counting the interval from it never renews late.
        let now = self.store.now();
        let owner = claim.owner();
        let renewed_at = match self.fresh_since(claim, now) {
            Some(granted) => granted,
            None => {
                if let Some(why) = renew_reason(&self.store, &owner) {
                    return Err(lost(claim, why));
                }
                now
            }
        };
        let flag = Arc::new(LeaseFlag::default());
        self.shared.watch(owner, renewed_at, Arc::clone(&flag));
        let out = stage(&flag);
        // Waits for a renewal in flight: none is left running once we report.
        let last = self.shared.unwatch(claim).unwrap_or(renewed_at);
        *self.recent.lock().unwrap_or_else(|e| e.into_inner()) = Some((claim.id, claim.fence, last));
        match flag.reason() {
            Some(why) => Err(lost(claim, why)),
            None => Ok(out),
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until no renewal is in flight.
    fn settled(&self) -> std::sync::MutexGuard<'_, Slot> {
        let mut slot = self.lock();
        while slot.renewing {
            slot = self.renewal_done.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
        slot
    }

    /// Why the claim's lease is lost, if a renewal of it was refused.
    fn lost(&self, claim: &Claim) -> Option<String> {
        let slot = self.lock();
        slot.kept
            .iter()
            .find(|k| k.is(claim))
            .and_then(|k| k.lost.clone())
    }

    /// A stage starts on `owner`'s claim, renewed at `renewed_at`.
    fn watch(&self, owner: Owner, renewed_at: Millis, flag: Arc<LeaseFlag>) {
        let mut slot = self.lock();
        if slot.cancelled {
            flag.cancel();
        }
        let same = |k: &&mut Kept| {
            (k.owner.id, k.owner.fence) == (owner.id, owner.fence) && k.owner.token == owner.token
        };
        match slot.kept.iter_mut().find(same) {
            Some(k) => {
                k.last_renewal = k.last_renewal.max(renewed_at);
                k.stage = Some(flag);
            }
            None => slot.kept.push(Kept {
                owner: Arc::new(owner),
                last_renewal: renewed_at,
                lost: None,
                stage: Some(flag),
                held: false,
            }),
        }
    }

    /// The stage on `claim` ended; returns when the claim was last renewed.
    fn unwatch(&self, claim: &Claim) -> Option<Millis> {
        let mut slot = self.settled();
        let at = slot.kept.iter().position(|k| k.is(claim))?;
        let k = &mut slot.kept[at];
        k.stage = None;
        let last = k.last_renewal;
        if !k.held {
            slot.kept.swap_remove(at);
        }
        Some(last)
    }

    /// Stop keeping the claim alive, once no renewal is in flight.
    fn let_go(&self, id: JobId, fence: i64) {
        let mut slot = self.settled();
        slot.kept
            .retain(|k| (k.owner.id, k.owner.fence) != (id, fence) || k.stage.is_some());
        // A stage still running on it keeps it until the stage ends.
        for k in slot
            .kept
            .iter_mut()
            .filter(|k| (k.owner.id, k.owner.fence) == (id, fence))
        {
            k.held = false;
        }
    }

    /// The pool stops hard: raise the running stage's stop signal and every
    /// later one's, and renew nothing more.
    fn cancel(&self) {
        let mut slot = self.lock();
        slot.cancelled = true;
        for flag in slot.kept.iter().filter_map(|k| k.stage.as_ref()) {
            flag.cancel();
        }
    }
}

impl Heartbeat {
    /// Wait for ticks until the keeper is dropped. Exactly one tick source is
    /// live; the other never fires. A closed manual channel ticks no more.
    fn run(&self, ticks: Ticks, mut cancel: Receiver<()>, stop: &StopSignal) {
        let (mut manual, timer) = match ticks {
            Ticks::Manual(rx) => (rx, crossbeam_channel::never()),
            Ticks::Timer => (
                crossbeam_channel::never(),
                crossbeam_channel::tick(Duration::from_millis(self.interval_ms as u64) / 2),
            ),
        };
        loop {
            crossbeam_channel::select! {
                recv(stop.receiver()) -> _ => return,
                recv(cancel) -> _ => {
                    self.shared.cancel();
                    cancel = crossbeam_channel::never();
                }
                recv(manual) -> t => match t {
                    Ok(()) => self.tick(),
                    Err(_) => manual = crossbeam_channel::never(),
                },
                recv(timer) -> _ => self.tick(),
            }
        }
    }

    /// Renew every kept claim whose renewal is due, all in one
    /// [`Store::renew_many`]. The renewal runs outside the lock (the stages
    /// and the finisher go on meanwhile); a stage that ends, or a claim let
    /// go, waits for it.
    fn tick(&self) {
        // A test's stall freezes the whole worker, as the OS freezes a
        // process: its heartbeat renews nothing meanwhile (fault.rs).
        crate::fault::wait_out_stall();
        let now = self.store.now();
        let due: Vec<Arc<Owner>> = {
            let mut slot = self.shared.lock();
            if slot.cancelled {
                return;
            }
            let due: Vec<Arc<Owner>> = slot
                .kept
                .iter()
                .filter(|k| {
                    // A stage told to stop covers a hard stop as well.
                    let stopping = k.stage.as_ref().is_some_and(|f| f.should_stop());
                    k.lost.is_none() && !stopping && now.saturating_sub(k.last_renewal) >= self.interval_ms
                })
                .map(|k| Arc::clone(&k.owner))
                .collect();
            if due.is_empty() {
                return;
            }
            slot.renewing = true;
            due
        };
        let owners: Vec<Owner> = due.iter().map(|o| Owner::clone(o)).collect();
        let answers: Vec<Option<String>> = match self.store.renew_many(&owners) {
            Ok(answers) => answers.into_iter().map(refusal).collect(),
            Err(e) => vec![Some(format!("renewal failed: {e}")); owners.len()],
        };
        let mut slot = self.shared.lock();
        for (owner, refused) in due.iter().zip(answers) {
            // Still kept: whatever ends it waits for this renewal.
            let Some(k) = slot.kept.iter_mut().find(|k| Arc::ptr_eq(&k.owner, owner)) else {
                continue;
            };
            match refused {
                None => k.last_renewal = now,
                Some(why) => {
                    if let Some(flag) = &k.stage {
                        flag.raise(why.clone());
                    }
                    k.lost = Some(why);
                }
            }
        }
        slot.renewing = false;
        self.shared.renewal_done.notify_all();
    }
}

fn renew_interval(store: &Store) -> Duration {
    (store.options().lease / 3).max(Duration::from_millis(100))
}

/// `None` if the renewal was accepted, else why the lease is lost.
fn renew_reason(store: &Store, owner: &Owner) -> Option<String> {
    match store.renew(owner) {
        Ok(answer) => refusal(answer),
        Err(e) => Some(format!("renewal failed: {e}")),
    }
}

/// `None` for an accepted renewal, else why the lease is lost.
fn refusal(answer: Fenced) -> Option<String> {
    match answer {
        Fenced::Accepted => None,
        Fenced::Rejected(r) => Some(format!("renewal refused: {r}")),
    }
}

fn lost(claim: &Claim, reason: String) -> LeaseLost {
    LeaseLost {
        key: claim.key.clone(),
        fence: claim.fence,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::{NewDoc, StoreOptions};

    const LEASE: Duration = Duration::from_millis(1_200);
    const WAIT: Duration = Duration::from_secs(30);

    fn open(path: &std::path::Path, clock: &ManualClock) -> Store {
        let opts = StoreOptions::default()
            .lease(LEASE)
            .clock(Arc::new(clock.clone()));
        Store::open(path, opts).expect("open store")
    }

    /// A stage that returns while the heartbeat's renewal is still waiting for
    /// the database must not report before that renewal has finished; here the
    /// renewal is refused (another worker took over), so the stage ends
    /// `LeaseLost` although its flag was clear when it returned.
    #[test]
    fn a_stage_ending_during_a_renewal_waits_for_it_and_reports_its_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let clock = ManualClock::new(0);
        let (mine, other) = (open(&path, &clock), open(&path, &clock));
        mine.enqueue(&NewDoc::new("doc", "v1")).unwrap();
        let claim = mine.claim("mine").unwrap().unwrap();
        let (ticks, ticks_rx) = crossbeam_channel::bounded::<()>(0);
        let keeper = LeaseKeeper::new(mine.clone(), Ticks::Manual(ticks_rx));
        let (returned_tx, returned_rx) = crossbeam_channel::bounded::<()>(1);
        let mut holder = None;

        let out = keeper.run(&claim, |flag| {
            clock.advance(LEASE + Duration::from_millis(1));
            other
                .claim("thief")
                .unwrap()
                .expect("the expired lease is re-claimed");
            // Hold the database's write lock so the renewal has to wait for it.
            let raw = rusqlite::Connection::open(&path).unwrap();
            raw.execute_batch("BEGIN IMMEDIATE").unwrap();
            ticks.send_timeout((), WAIT).expect("the heartbeat took the tick");
            let deadline = std::time::Instant::now() + WAIT;
            while !keeper.shared.lock().renewing {
                assert!(std::time::Instant::now() < deadline, "the renewal never started");
                std::thread::yield_now();
            }
            // Let go of the lock only once `run` has returned, or after a
            // while if it does not return on its own (as it must not).
            let returned = returned_rx.clone();
            holder = Some(std::thread::spawn(move || {
                let early = returned.recv_timeout(Duration::from_millis(300)).is_ok();
                raw.execute_batch("ROLLBACK").unwrap();
                early
            }));
            assert!(!flag.is_lost(), "nothing is known to be lost yet");
        });
        returned_tx.send(()).unwrap();

        let early = holder.unwrap().join().unwrap();
        assert!(!early, "run returned while its renewal was still in flight");
        let lost = out.expect_err("the refused renewal is reported");
        assert!(lost.reason.starts_with("renewal refused"), "{}", lost.reason);
    }

    /// A stage renews before it starts and on its ticks; once it has ended, its
    /// claim is no longer watched and ticks renew nothing.
    #[test]
    fn ticks_between_stages_renew_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let store = open(&dir.path().join("q.db"), &clock);
        let id = store.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
        let claim = store.claim("mine").unwrap().unwrap();
        let (ticks, ticks_rx) = crossbeam_channel::bounded::<()>(0);
        let keeper = LeaseKeeper::new(store.clone(), Ticks::Manual(ticks_rx));
        let expiry = || store.job(id).unwrap().unwrap().lease_expires_at;

        clock.advance(LEASE / 2);
        let before = expiry();
        let during = keeper.run(&claim, |_| {
            let at_start = expiry();
            clock.advance(LEASE / 2);
            for _ in 0..2 {
                ticks.send_timeout((), WAIT).expect("the heartbeat took the tick");
            }
            (at_start, expiry())
        });
        let (at_start, after_tick) = during.expect("the lease was kept");
        assert!(at_start > before, "renewed before the stage");
        assert!(after_tick > at_start, "renewed on the heartbeat");

        clock.advance(LEASE / 2);
        let after_stage = expiry();
        for _ in 0..2 {
            ticks.send_timeout((), WAIT).expect("the heartbeat took the tick");
        }
        assert_eq!(expiry(), after_stage, "no stage: no renewal");
    }
}
