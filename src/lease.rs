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
use std::sync::{Condvar, Mutex};
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

/// Keeps claims alive while stages run.
#[derive(Debug, Clone)]
pub struct LeaseKeeper {
    store: Store,
    ticks: Ticks,
    interval_ms: Millis,
    /// Closed when the pool stops hard: raises the stage's stop signal.
    cancel: Receiver<()>,
}

impl LeaseKeeper {
    /// A keeper renewing every `max(100 ms, lease / 3)`.
    pub fn new(store: Store, ticks: Ticks) -> Self {
        let lease = store.options().lease;
        let interval = (lease / 3).max(Duration::from_millis(100));
        LeaseKeeper {
            store,
            ticks,
            interval_ms: duration_ms(interval),
            cancel: crossbeam_channel::never(),
        }
    }

    /// Raise every running stage's stop signal when `cancel` closes (hard stop).
    pub fn with_cancel(mut self, cancel: Receiver<()>) -> Self {
        self.cancel = cancel;
        self
    }

    /// How often the heartbeat renews.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms as u64)
    }

    /// Run `stage` under `claim`'s lease: renew first (a refused renewal means the
    /// stage does not run), renew on the heartbeat while it runs, and report
    /// [`LeaseLost`] if any renewal was refused or failed.
    pub fn run<T>(&self, claim: &Claim, stage: impl FnOnce(&LeaseFlag) -> T) -> Result<T, LeaseLost> {
        let flag = LeaseFlag::default();
        if let Some(why) = self.renew_reason(claim) {
            return Err(lost(claim, why));
        }
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let out = std::thread::scope(|s| {
            s.spawn(|| self.heartbeat(claim, &flag, &stop_rx));
            let out = stage(&flag);
            stop(stop_tx);
            out
            // The scope joins the heartbeat here: no renewal is left in flight.
        });
        match flag.reason() {
            Some(why) => Err(lost(claim, why)),
            None => Ok(out),
        }
    }

    /// The heartbeat loop: renew when due, until stopped or the lease is lost.
    fn heartbeat(&self, claim: &Claim, flag: &LeaseFlag, stop: &Receiver<()>) {
        // Exactly one of the two tick sources is live; the other never fires.
        let (manual, timer) = match &self.ticks {
            Ticks::Manual(rx) => (rx.clone(), crossbeam_channel::never()),
            Ticks::Timer => (
                crossbeam_channel::never(),
                crossbeam_channel::tick(self.interval() / 2),
            ),
        };
        let mut last_renewal = self.store.now();
        loop {
            let ticked = crossbeam_channel::select! {
                recv(stop) -> _ => return,
                recv(self.cancel) -> _ => {
                    flag.cancel();
                    return;
                }
                recv(manual) -> t => t.is_ok(),
                recv(timer) -> t => t.is_ok(),
            };
            if !ticked {
                return;
            }
            let now = self.store.now();
            if now.saturating_sub(last_renewal) < self.interval_ms {
                continue;
            }
            if let Some(why) = self.renew_reason(claim) {
                flag.raise(why);
                return;
            }
            last_renewal = now;
        }
    }

    /// `None` if the renewal was accepted, else why the lease is lost.
    fn renew_reason(&self, claim: &Claim) -> Option<String> {
        match self.store.renew(claim) {
            Ok(Fenced::Accepted) => None,
            Ok(Fenced::Rejected(r)) => Some(format!("renewal refused: {r}")),
            Err(e) => Some(format!("renewal failed: {e}")),
        }
    }
}

fn stop(tx: Sender<()>) {
    drop(tx); // a closed channel wakes the heartbeat's select
}

fn lost(claim: &Claim, reason: String) -> LeaseLost {
    LeaseLost {
        key: claim.key.clone(),
        fence: claim.fence,
        reason,
    }
}
