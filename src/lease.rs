//! Running a stage under a lease (DESIGN §4).
//!
//! Before a stage starts its lease is renewed once; while it runs, a heartbeat
//! thread renews it every `max(100 ms, lease / 3)` of the injected clock. A
//! refused or failed renewal marks the lease lost and raises a [`LeaseFlag`] the
//! stage may poll to stop early. The stage itself is never killed (it may be
//! blocked in a syscall); when it returns, the heartbeat is stopped and joined
//! (so no renewal is in flight) and the loss, if any, is reported. Renewing is an
//! optimisation: the final guard is always the fenced `complete`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::clock::{duration_ms, Millis};
use crate::job::{Claim, Fenced};
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
    pub key: String,
    pub fence: i64,
    pub reason: String,
}

/// Keeps claims alive while stages run. Owns one heartbeat thread for its whole
/// life (a worker runs three stages per document; a thread per stage would cost
/// three spawns per document), stopped and joined on drop.
#[derive(Debug)]
pub struct LeaseKeeper {
    /// One stage at a time: the heartbeat watches one claim, so a second thread
    /// sharing this keeper waits here rather than run a stage nobody renews.
    one_stage: Mutex<()>,
    store: Store,
    watch: Option<Sender<Watch>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One stage for the heartbeat thread to keep alive.
struct Watch {
    claim: Claim,
    /// When the pre-stage renewal was made: the renewal interval counts from here.
    renewed_at: Millis,
    flag: Arc<LeaseFlag>,
    /// Closed by the stage runner when the stage returned.
    done: Receiver<()>,
    /// The heartbeat answers here once it has stopped renewing this claim.
    ack: Sender<()>,
}

/// What the heartbeat thread needs besides the watched claim.
struct Heartbeat {
    store: Store,
    ticks: Ticks,
    interval_ms: Millis,
    cancel: Receiver<()>,
}

impl LeaseKeeper {
    /// A keeper renewing every `max(100 ms, lease / 3)`.
    pub fn new(store: Store, ticks: Ticks) -> Self {
        Self::with_cancel(store, ticks, crossbeam_channel::never())
    }

    /// Like [`LeaseKeeper::new`]; when `cancel` closes (the pool stops hard),
    /// every running stage's stop signal is raised.
    pub fn with_cancel(store: Store, ticks: Ticks, cancel: Receiver<()>) -> Self {
        let beat = Heartbeat {
            interval_ms: duration_ms(renew_interval(&store)),
            store: store.clone(),
            ticks,
            cancel,
        };
        let (watch, watches) = crossbeam_channel::unbounded::<Watch>();
        let thread = std::thread::Builder::new()
            .name("leasehold-heartbeat".into())
            .spawn(move || {
                for w in watches.iter() {
                    beat.keep(&w.claim, w.renewed_at, &w.flag, &w.done);
                    let _ = w.ack.send(());
                }
            })
            .ok();
        LeaseKeeper {
            one_stage: Mutex::new(()),
            store,
            watch: Some(watch),
            thread,
        }
    }

    /// How often the heartbeat renews.
    pub fn interval(&self) -> Duration {
        renew_interval(&self.store)
    }

    /// Run `stage` under `claim`'s lease: renew first (a refused renewal means the
    /// stage does not run), renew on the heartbeat while it runs, and report
    /// [`LeaseLost`] if any renewal was refused or failed.
    pub fn run<T>(&self, claim: &Claim, stage: impl FnOnce(&LeaseFlag) -> T) -> Result<T, LeaseLost> {
        let _one = self.one_stage.lock().unwrap_or_else(|e| e.into_inner());
        // Read before renewing: the renewal extends the lease from at least this
        // time, so counting the interval from it never renews late.
        let renewed_at = self.store.now();
        if let Some(why) = renew_reason(&self.store, claim) {
            return Err(lost(claim, why));
        }
        let flag = Arc::new(LeaseFlag::default());
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
        let (ack_tx, ack_rx) = crossbeam_channel::bounded::<()>(1);
        let watched = self.watch.as_ref().is_some_and(|w| {
            w.send(Watch {
                claim: shadow(claim),
                renewed_at,
                flag: Arc::clone(&flag),
                done: done_rx,
                ack: ack_tx,
            })
            .is_ok()
        });
        let out = stage(&flag);
        drop(done_tx); // a closed channel ends the heartbeat's watch
        if watched {
            // Wait until the heartbeat has let go: no renewal is left in flight.
            let _ = ack_rx.recv();
        }
        match flag.reason() {
            Some(why) => Err(lost(claim, why)),
            None => Ok(out),
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        drop(self.watch.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Heartbeat {
    /// Renew `claim` when due, until its stage is done or the lease is lost. Due
    /// counts from `renewed_at` (the pre-stage renewal), not from when this thread
    /// picked the stage up, which may be later.
    fn keep(&self, claim: &Claim, renewed_at: Millis, flag: &LeaseFlag, done: &Receiver<()>) {
        // Exactly one of the two tick sources is live; the other never fires.
        let (manual, timer) = match &self.ticks {
            Ticks::Manual(rx) => (rx.clone(), crossbeam_channel::never()),
            Ticks::Timer => (
                crossbeam_channel::never(),
                crossbeam_channel::tick(Duration::from_millis(self.interval_ms as u64) / 2),
            ),
        };
        let mut last_renewal = renewed_at;
        loop {
            let ticked = crossbeam_channel::select! {
                recv(done) -> _ => return,
                recv(self.cancel) -> _ => {
                    flag.cancel();
                    // Keep the stage company until it returns; renew no more.
                    let _ = done.recv();
                    return;
                }
                recv(manual) -> t => t.is_ok(),
                recv(timer) -> t => t.is_ok(),
            };
            if !ticked {
                let _ = done.recv();
                return;
            }
            let now = self.store.now();
            if now.saturating_sub(last_renewal) < self.interval_ms {
                continue;
            }
            if let Some(why) = renew_reason(&self.store, claim) {
                flag.raise(why);
                let _ = done.recv();
                return;
            }
            last_renewal = now;
        }
    }
}

fn renew_interval(store: &Store) -> Duration {
    (store.options().lease / 3).max(Duration::from_millis(100))
}

/// `None` if the renewal was accepted, else why the lease is lost.
fn renew_reason(store: &Store, claim: &Claim) -> Option<String> {
    match store.renew(claim) {
        Ok(Fenced::Accepted) => None,
        Ok(Fenced::Rejected(r)) => Some(format!("renewal refused: {r}")),
        Err(e) => Some(format!("renewal failed: {e}")),
    }
}

/// The heartbeat's own copy of the claim's identity, for renewing only. The
/// stage keeps the real `Claim`; this copy never completes anything.
fn shadow(c: &Claim) -> Claim {
    Claim {
        id: c.id,
        key: c.key.clone(),
        version: c.version.clone(),
        token: c.token.clone(),
        fence: c.fence,
        attempts: c.attempts,
        lease_expires_at: c.lease_expires_at,
    }
}

fn lost(claim: &Claim, reason: String) -> LeaseLost {
    LeaseLost {
        key: claim.key.clone(),
        fence: claim.fence,
        reason,
    }
}
