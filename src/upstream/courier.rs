//! The courier: while a pool works, one background component sends due notices,
//! checks account expiry, drains the outbox to the sink, and probes accounts
//! whose lock ran out with nobody about to use them.
//!
//! That last duty is why a lock ends on time even on an account no process
//! holds (a pool's spare, a sink with an empty outbox): every courier looks
//! (one read) at most once a second; the probe slot, taken
//! set-if-absent in a write transaction, lets exactly one process across all
//! of them make the probe request, and its answer writes the recovery or
//! reminder notice like any other probe.
//!
//! [`Courier::run_once`] is one step (what tests drive); [`Courier::start`] runs
//! it on a [`Service`] between naps and [`Courier::stop`] ends it with what it did.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{Account, HttpClient, UpstreamError};
use super::gate::Gate;
use super::sink::{DrainStep, Sink};
use crate::clock::Millis;
use crate::config::FileConfig;
use crate::service::Service;

/// A cheap request that shows whether an account's credential works (any
/// answer but a 401 or a lock answer counts as working).
pub type ProbeRequest = Arc<dyn Fn(&Account) -> Result<(), UpstreamError> + Send + Sync>;

/// How often a courier looks for locks that ran out (on the injected clock).
pub(crate) const PROBE_SWEEP_EVERY: Millis = 1_000;
/// Time allowed for one probe request the courier makes.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the courier checks expiry dates (a warning goes out once a day).
const EXPIRY_EVERY: Duration = Duration::from_secs(60);
/// The courier's longest nap when there is nothing to do.
pub(crate) const NAP: Duration = Duration::from_millis(200);

/// How often the courier looks for results the outbox's cap dropped.
const DROPS_EVERY: Duration = Duration::from_secs(5);

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
    /// The probe request of each account this process can probe.
    probes: Vec<(String, ProbeRequest)>,
    /// When the courier next looks for locks that ran out.
    next_sweep: Millis,
    /// The outbox's dropped count when last looked at, and when that was:
    /// the log says when the cap drops results (`log_drops`).
    drops_seen: Option<(i64, Instant)>,
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
            probes: Vec::new(),
            next_sweep: Millis::MIN,
            drops_seen: None,
            done: Delivered::default(),
        }
    }

    /// Probe `account` with `request` when its lock runs out and nobody else
    /// has taken the probe slot. The first request given for an account counts.
    pub fn probing(mut self, account: impl Into<String>, request: ProbeRequest) -> Courier {
        let account = account.into();
        if !self.probes.iter().any(|(name, _)| *name == account) {
            self.probes.push((account, request));
        }
        self
    }

    /// Probe every account `file` uses: a source account with the listing's
    /// first page, the sink's account with an empty batch (it delivers nothing).
    pub fn probing_accounts_of(mut self, file: &FileConfig) -> Courier {
        let client = HttpClient::new(PROBE_TIMEOUT);
        if let Some(source) = &file.source_http {
            for account in &source.accounts {
                let (client, base) = (client.clone(), source.base_url.clone());
                let list: ProbeRequest = Arc::new(move |a| client.list(&base, a, None).map(|_| ()));
                self = self.probing(account.clone(), list);
            }
        }
        if let Some(sink) = &file.sink_http {
            let (client, url) = (client.clone(), sink.url.clone());
            let empty: ProbeRequest = Arc::new(move |a| client.deliver(&url, a, &[]));
            self = self.probing(sink.account.clone(), empty);
        }
        self
    }

    /// One step: send due notices, check expiry when due, send one outbox
    /// batch, probe locks that ran out. Returns how long to nap before the
    /// next step.
    pub fn run_once(&mut self) -> Duration {
        let nap = self.deliver_once();
        self.probe_expired_locks();
        nap
    }

    /// Probe each account this process can probe whose lock ran out with the
    /// probe slot free (see the module's doc). Runs after the outbox step, so
    /// a sink with results waiting is probed by a real batch.
    fn probe_expired_locks(&mut self) {
        let now = self.gate.store().now();
        if self.probes.is_empty() || now < self.next_sweep {
            return;
        }
        self.next_sweep = now + PROBE_SWEEP_EVERY;
        let due = match self.gate.store().accounts().probe_due() {
            Ok(due) => due,
            Err(e) => return self.done.errors.push(e.to_string()),
        };
        for (name, request) in &self.probes {
            if !due.contains(name) {
                continue;
            }
            let Ok(account) = self.gate.account(name) else {
                continue;
            };
            // A refused or failed probe is the gate's business (it re-locks or
            // frees the slot); only a store failure is the courier's error.
            if let Err(e @ super::gate::GateError::Store(_)) = self.gate.probe_if_due(account, |a| request(a))
            {
                self.done.errors.push(e.to_string());
            }
        }
    }

    /// The notices, expiry and outbox part of a step.
    fn deliver_once(&mut self) -> Duration {
        self.gate.send_notices();
        if self.expiry_checked.is_none_or(|t| t.elapsed() >= EXPIRY_EVERY) {
            if let Err(e) = self.gate.check_expiry() {
                self.done.errors.push(e.to_string());
            }
            self.expiry_checked = Some(Instant::now());
        }
        self.log_drops();
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

    /// Every [`DROPS_EVERY`], with a sink: log the results the outbox's cap
    /// dropped since the last look (by any process: the count is the store's).
    fn log_drops(&mut self) {
        if self.sink.is_none() || self.drops_seen.is_some_and(|(_, at)| at.elapsed() < DROPS_EVERY) {
            return;
        }
        let Ok(totals) = self.gate.store().outbox().totals() else {
            return;
        };
        if let Some((before, _)) = self.drops_seen {
            if totals.dropped > before {
                tracing::warn!(
                    target: "leasehold::outbox",
                    event = "outbox_dropped",
                    dropped = totals.dropped - before,
                    dropped_total = totals.dropped,
                    waiting = totals.rows,
                    "the outbox's cap dropped results that could not be delivered"
                );
            }
        }
        self.drops_seen = Some((totals.dropped, Instant::now()));
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
pub fn nap_until(now: Millis, until: Millis) -> Duration {
    Duration::from_millis((until - now).clamp(1, NAP.as_millis() as i64) as u64)
}
