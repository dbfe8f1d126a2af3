//! Running a stage under a lease (DESIGN §4).
//!
//! Before a stage starts its lease is renewed once; while it runs, a heartbeat
//! thread renews it every `max(100 ms, lease / 3)` of the injected clock. A
//! refused or failed renewal marks the lease lost and raises a [`LeaseFlag`] the
//! stage may poll to stop early. The stage itself is never killed (it may be
//! blocked in a syscall); when it returns, the heartbeat stops watching it, a
//! renewal still in flight is waited for, and the loss, if any, is reported.
//! Renewing is an optimisation: the final guard is always the fenced `complete`.

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

/// Keeps claims alive while stages run. Owns one heartbeat thread for its whole
/// life, stopped and joined on drop. A stage and the heartbeat meet only through
/// a mutex-guarded slot: starting or ending a stage wakes no thread (a worker runs
/// three stages per document, and a hand-off per stage cost more than the
/// renewals themselves); the heartbeat looks at the slot on its own ticks.
#[derive(Debug)]
pub struct LeaseKeeper {
    /// One stage at a time: the heartbeat watches one claim, so a second thread
    /// sharing this keeper waits here rather than run a stage nobody renews.
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
    /// The stage being kept alive, if one is running.
    watch: Option<Watch>,
    /// The heartbeat is renewing the watched claim (outside the lock) right now.
    renewing: bool,
    /// The pool is stopping hard: every stage's stop signal is raised, nothing
    /// is renewed any more.
    cancelled: bool,
}

/// One running stage.
#[derive(Debug)]
struct Watch {
    /// The heartbeat's handle on the claim: it can renew, never finish; shared
    /// so a renewal outside the lock needs no copy of its own.
    owner: Arc<Owner>,
    /// When the last accepted renewal was made (before the stage, at first):
    /// the next one is due an interval later.
    last_renewal: Millis,
    flag: Arc<LeaseFlag>,
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

    /// When `claim`'s lease was granted or last renewed, if that was less than
    /// half a renewal interval before `now` (by the claim's own expiry, or by
    /// this keeper's last stage of the same claim).
    fn fresh_since(&self, claim: &Claim, now: Millis) -> Option<Millis> {
        let lease = duration_ms(self.store.options().lease);
        let mut granted = claim.lease_expires_at.saturating_sub(lease);
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
        self.shared.watch(Watch {
            owner: Arc::new(owner),
            last_renewal: renewed_at,
            flag: Arc::clone(&flag),
        });
        let out = stage(&flag);
        // Waits for a renewal in flight: none is left running once we report.
        let last = self.shared.unwatch().unwrap_or(renewed_at);
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

    fn watch(&self, w: Watch) {
        let mut slot = self.lock();
        if slot.cancelled {
            w.flag.cancel();
        }
        slot.watch = Some(w);
    }

    /// Stop watching; returns when the watched claim was last renewed.
    fn unwatch(&self) -> Option<Millis> {
        let mut slot = self.lock();
        while slot.renewing {
            slot = self.renewal_done.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
        slot.watch.take().map(|w| w.last_renewal)
    }

    /// The pool stops hard: raise the running stage's stop signal and every
    /// later one's, and renew nothing more.
    fn cancel(&self) {
        let mut slot = self.lock();
        slot.cancelled = true;
        if let Some(w) = &slot.watch {
            w.flag.cancel();
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

    /// Renew the watched claim if a renewal is due. The renewal runs outside the
    /// lock (the stage goes on meanwhile); a stage that ends waits for it.
    fn tick(&self) {
        let now = self.store.now();
        let (owner, flag) = {
            let mut slot = self.shared.lock();
            let Some(w) = &slot.watch else { return };
            // Stopping covers both a lost lease and a hard stop (`cancelled`
            // raises the stop signal of every watched stage).
            if w.flag.should_stop() || now.saturating_sub(w.last_renewal) < self.interval_ms {
                return;
            }
            let due = (Arc::clone(&w.owner), Arc::clone(&w.flag));
            slot.renewing = true;
            due
        };
        let refused = renew_reason(&self.store, &owner);
        let mut slot = self.shared.lock();
        match refused {
            Some(why) => flag.raise(why),
            None => {
                // Still the same stage: a stage that ends waits for this renewal.
                if let Some(w) = slot.watch.as_mut() {
                    w.last_renewal = now;
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
        Ok(Fenced::Accepted) => None,
        Ok(Fenced::Rejected(r)) => Some(format!("renewal refused: {r}")),
        Err(e) => Some(format!("renewal failed: {e}")),
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
