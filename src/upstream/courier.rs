//! The courier: while a pool works, one background component sends due notices,
//! checks account expiry and drains the outbox to the sink.
//!
//! [`Courier::run_once`] is one step (what tests drive); [`Courier::start`] runs
//! it on a [`Service`] between naps and [`Courier::stop`] ends it with what it did.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::Millis;
use crate::service::Service;
use crate::upstream::{DrainStep, Gate, Sink};

/// How often the courier checks expiry dates (a warning goes out once a day).
const EXPIRY_EVERY: Duration = Duration::from_secs(60);
/// The courier's longest nap when there is nothing to do.
pub(crate) const NAP: Duration = Duration::from_millis(200);

/// What the courier did, reported when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Results the sink acknowledged.
    pub results: u64,
    /// Errors met on the way (a failed expiry check, a store error).
    pub errors: Vec<String>,
}

/// The notices, expiry and outbox component of one process.
pub struct Courier {
    gate: Arc<Gate>,
    sink: Option<Arc<Sink>>,
    expiry_checked: Option<Instant>,
    done: Delivered,
}

/// A running courier; [`CourierHandle::stop`] (or drop) ends it.
pub struct CourierHandle {
    service: Service<Delivered>,
}

impl Courier {
    /// A courier for `gate`'s notices and expiry, and `sink`'s outbox if any.
    pub fn new(gate: Arc<Gate>, sink: Option<Arc<Sink>>) -> Courier {
        Courier {
            gate,
            sink,
            expiry_checked: None,
            done: Delivered::default(),
        }
    }

    /// One step: send due notices, check expiry when due, send one outbox
    /// batch. Returns how long to nap before the next step.
    pub fn run_once(&mut self) -> Duration {
        self.gate.send_notices();
        if self.expiry_checked.is_none_or(|t| t.elapsed() >= EXPIRY_EVERY) {
            if let Err(e) = self.gate.check_expiry() {
                self.done.errors.push(e.to_string());
            }
            self.expiry_checked = Some(Instant::now());
        }
        match self.sink.as_deref().map(Sink::drain_once) {
            Some(Ok(DrainStep::Sent(n))) => {
                self.done.results += n as u64;
                Duration::ZERO
            }
            Some(Ok(DrainStep::Wait { until, .. })) => nap_until(self.gate.store().now(), until),
            Some(Err(e)) => {
                self.done.errors.push(e.to_string());
                Duration::from_secs(1)
            }
            Some(Ok(DrainStep::Empty)) | None => NAP,
        }
    }

    /// Run on a thread of its own until stopped.
    pub fn start(mut self) -> std::io::Result<CourierHandle> {
        let service = Service::start("leasehold-courier", move |stop| loop {
            let nap = self.run_once();
            if !stop.nap(nap) {
                return self.done;
            }
        })?;
        Ok(CourierHandle { service })
    }
}

impl CourierHandle {
    /// Stop after the current step and report what was delivered.
    pub fn stop(self) -> Delivered {
        self.service.stop().unwrap_or_default()
    }
}

/// How long to nap before `until` (on the injected clock), at most [`NAP`].
pub(crate) fn nap_until(now: Millis, until: Millis) -> Duration {
    Duration::from_millis((until - now).clamp(1, NAP.as_millis() as i64) as u64)
}
