//! The auth gate at run time (DESIGN §6), and the parts that talk to the
//! upstream through it: the HTTP source, the sink's outbox drain, and notices.
//!
//! Every request with an account goes through [`Gate::call`]: ask the shared
//! state first (open, locked, or this process holds the probe slot), make the
//! request only if allowed, and report the answer, all in short transactions in
//! the jobs database, so that every process sharing the file acts as one body.
//! The rules themselves (locks, epochs, probes, notices) live next to their
//! SQL in `store/gate.rs`; this module decides what an HTTP answer means for
//! them and what a caller does while it waits.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{duration_ms, rfc3339, Millis};
use crate::config::{Day, FileConfig, HttpSinkConfig, HttpSourceConfig};
use crate::error::Error;
use crate::notify::{Notice, Notifier};
use crate::source::{Source, SourceError};
use crate::store::{Admission, Answer, Drain, GateChange, GatePolicy, NewDoc, ProbePermit, Store};
use crate::upstream::{Account, Delivery, HttpClient, UpstreamError};

/// Why a gated request did not return a result.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The account is locked (or another process is probing it): no request made.
    #[error("account {account}: locked, nobody calls the upstream with it before {}", rfc3339(*until))]
    Locked {
        account: String,
        until: Millis,
        probing: bool,
    },
    /// The upstream asked everyone to slow down (429): no request before `until`.
    #[error("account {account}: rate limited, no request before {}", rfc3339(*until))]
    Paced { account: String, until: Millis },
    /// The request was made and failed; a credential failure has locked the account.
    #[error("account {account}: {error}")]
    Upstream {
        account: String,
        error: UpstreamError,
        /// Set when the account is locked now (this answer or an earlier one).
        locked_until: Option<Millis>,
    },
    #[error("no account named {0:?} in the configuration")]
    UnknownAccount(String),
    #[error(transparent)]
    Store(#[from] Error),
}

/// The shared gate of one process: its accounts (with their secrets), the
/// timings, and where notices go.
pub struct Gate {
    store: Store,
    policy: GatePolicy,
    accounts: Vec<Account>,
    expiries: Vec<(String, Day)>,
    warn_days: i64,
    holder: String,
    /// The pool account `hold` chose last (a copy of this process's hold row).
    held: std::sync::Mutex<Option<String>>,
    notifier: Notifier,
}

impl Gate {
    /// The gate for `cfg`'s accounts, identified as `holder` for pool holds.
    pub fn new(store: &Store, cfg: &FileConfig, holder: impl Into<String>) -> Gate {
        Gate {
            store: store.clone(),
            policy: GatePolicy {
                lock_ttl: duration_ms(cfg.auth.lock_ttl),
                probe_ttl: duration_ms(cfg.auth.probe_ttl),
                notify_every: duration_ms(cfg.auth.notify_every),
            },
            accounts: cfg
                .accounts
                .iter()
                .map(|a| Account::new(&a.name, &a.username, a.password.clone()))
                .collect(),
            expiries: cfg
                .accounts
                .iter()
                .filter_map(|a| a.expires_on.map(|d| (a.name.clone(), d)))
                .collect(),
            warn_days: (cfg.auth.expiry_warning.as_secs() / 86_400) as i64,
            holder: holder.into(),
            held: std::sync::Mutex::new(None),
            notifier: Notifier::new(&cfg.notify),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The configured account called `name`.
    pub fn account(&self, name: &str) -> Result<&Account, GateError> {
        self.accounts
            .iter()
            .find(|a| a.name == name)
            .ok_or_else(|| GateError::UnknownAccount(name.to_owned()))
    }

    /// The account of `pool` this process uses (sticky; see `Store::gate_hold`).
    pub fn hold(&self, pool: &[String]) -> Result<&Account, GateError> {
        if let [one] = pool {
            return self.account(one);
        }
        let hold = Duration::from_millis((2 * self.policy.probe_ttl).max(10_000) as u64);
        let name = self.store.gate_hold(&self.holder, pool, hold, &self.policy)?;
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = name.clone();
        self.account(name.as_deref().unwrap_or_default())
    }

    /// The account of `pool` this process uses, as of its last `hold`; `None`
    /// before the first. Reads nothing.
    fn last_held(&self, pool: &[String]) -> Option<String> {
        match pool {
            [one] => Some(one.clone()),
            _ => self.held.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    /// Give up this process's pool hold (it is stopping).
    pub fn unhold(&self) {
        let _ = self.store.gate_unhold(&self.holder);
    }

    /// Make one request with `account` if the gate allows it, and record the
    /// answer: a credential failure locks the account for every process; the
    /// probe's answer unlocks or re-locks it.
    pub fn call<T>(
        &self,
        account: &Account,
        request: impl FnOnce(&Account) -> Result<T, UpstreamError>,
    ) -> Result<T, GateError> {
        let permit: Option<ProbePermit> =
            match self.store.gate_admit(&account.name, &self.holder, &self.policy)? {
                Admission::Go => None,
                Admission::Probe(p) => Some(p),
                Admission::Paced { until } => {
                    return Err(GateError::Paced {
                        account: account.name.clone(),
                        until,
                    })
                }
                Admission::Wait { until, probing } => {
                    return Err(GateError::Locked {
                        account: account.name.clone(),
                        until,
                        probing,
                    })
                }
            };
        let result = request(account);
        let answer = answer_for(&result, self.store.now());
        // Outside a probe, an accepted or transient answer changes no gate
        // state (admit above made sure the row exists): no write for it.
        let change = if permit.is_none() && matches!(answer, Answer::Accepted | Answer::Transient) {
            GateChange::Unchanged
        } else {
            self.store
                .gate_report(&account.name, permit.as_ref(), &answer, &self.policy)?
        };
        if !matches!(change, GateChange::Unchanged) {
            self.send_notices();
        }
        result.map_err(|error| {
            let locked_until = match change {
                GateChange::Locked { until, .. } => Some(until),
                _ if error.is_credential_problem() => self.blocked_until(&account.name),
                _ => None,
            };
            GateError::Upstream {
                account: account.name.clone(),
                error,
                locked_until,
            }
        })
    }

    /// [`Gate::call`], waiting out locks (unless `wait` is false) and rate
    /// limits; `on_wait` is told each time the caller starts waiting.
    pub fn call_waiting<T>(
        &self,
        account: &Account,
        wait: bool,
        on_wait: &mut dyn FnMut(&GateError),
        mut request: impl FnMut(&Account) -> Result<T, UpstreamError>,
    ) -> Result<T, GateError> {
        loop {
            let until = match self.call(account, &mut request) {
                Err(e @ GateError::Locked { until, .. }) if wait => {
                    on_wait(&e);
                    until
                }
                Err(GateError::Upstream {
                    locked_until: Some(until),
                    ref account,
                    ..
                }) if wait => {
                    on_wait(&GateError::Locked {
                        account: account.clone(),
                        until,
                        probing: false,
                    });
                    until
                }
                // A pace is not a lock: it is waited out even with `wait` false.
                Err(GateError::Paced { until, .. }) => until,
                Err(GateError::Upstream { ref error, .. }) if wait && error.is_transient() => {
                    let pause = error.retry_after().unwrap_or(Duration::from_secs(1));
                    self.store.now() + duration_ms(pause)
                }
                other => return other,
            };
            self.sleep_until(until);
        }
    }

    /// Sleep until `until` on the injected clock, in short steps so that a
    /// clock that jumps (tests) or an unlock by hand is noticed.
    pub fn sleep_until(&self, until: Millis) {
        let left = (until - self.store.now()).clamp(1, 250);
        std::thread::sleep(Duration::from_millis(left as u64));
        self.send_notices();
    }

    /// Until when `account` may not be used, if not now (one row read).
    fn blocked_until(&self, account: &str) -> Option<Millis> {
        let recheck = Duration::from_millis(PROBE_RECHECK_MS as u64);
        self.store.gate_blocked_until(account, recheck).ok().flatten()
    }

    /// Send every due notice this process can take. Returns how many went out.
    pub fn send_notices(&self) -> usize {
        let mut sent = 0;
        while let Ok(Some(n)) = self.store.notice_claim(&self.holder, Duration::from_secs(30)) {
            let notice = Notice {
                id: n.id,
                kind: n.kind.clone(),
                account: n.account.clone(),
                message: n.message.clone(),
                details: serde_json::from_str(&n.details).unwrap_or(serde_json::Value::Null),
            };
            let outcome = self.notifier.send(&notice);
            let error = outcome.as_ref().err().map(|e| e.to_string());
            if self
                .store
                .notice_done(&n, error.as_deref(), Duration::from_secs(10))
                .is_err()
                || error.is_some()
            {
                break;
            }
            sent += 1;
        }
        sent
    }

    /// Expiry warnings for every account with an `expires_on`, once a day
    /// across processes. Returns (account, days left).
    pub fn check_expiry(&self) -> Result<Vec<(String, i64)>, GateError> {
        let mut left = Vec::new();
        for (name, day) in &self.expiries {
            left.push((name.clone(), self.store.gate_expiry(name, day.0, self.warn_days)?));
        }
        if !left.is_empty() {
            self.send_notices();
        }
        Ok(left)
    }
}

/// What an answer means for the credential. Only 401 and lock answers count
/// against it; a 5xx, a timeout or a 429 says nothing either way; any other
/// answer (even a 404) proves the credential works.
fn answer_for<T>(result: &Result<T, UpstreamError>, now: Millis) -> Answer {
    match result {
        Ok(_) => Answer::Accepted,
        Err(e) if e.is_credential_problem() => Answer::Rejected {
            error: e.to_string(),
            until: e.retry_after().map(|d| now + duration_ms(d)),
        },
        Err(e @ UpstreamError::RateLimited { .. }) => Answer::RateLimited {
            until: now + duration_ms(e.retry_after().unwrap_or(Duration::from_secs(1))),
        },
        Err(e) if e.is_transient() => Answer::Transient,
        Err(_) => Answer::Accepted,
    }
}

/// How soon a document held back by someone else's probe is tried again.
const PROBE_RECHECK_MS: Millis = 1000;

/// Documents from an HTTP API (`[source.http]`). Keys are the upstream ids.
pub struct HttpSource {
    client: HttpClient,
    base_url: String,
    pool: Vec<String>,
    gate: Arc<Gate>,
}

impl HttpSource {
    pub fn new(cfg: &HttpSourceConfig, gate: Arc<Gate>, client: HttpClient) -> HttpSource {
        HttpSource {
            client,
            base_url: cfg.base_url.clone(),
            pool: cfg.accounts.clone(),
            gate,
        }
    }

    /// List every page and enqueue each id/version (a new version re-queues the
    /// document). Waits out locks unless `wait` is false. Returns how many
    /// documents the listing held and how many were new or changed.
    pub fn discover(
        &self,
        wait: bool,
        on_wait: &mut dyn FnMut(&GateError),
    ) -> Result<(usize, usize), GateError> {
        let (mut listed, mut queued) = (0, 0);
        let mut cursor: Option<String> = None;
        loop {
            let account = self.gate.hold(&self.pool)?;
            let page = self.gate.call_waiting(account, wait, on_wait, |a| {
                self.client.list(&self.base_url, a, cursor.as_deref())
            })?;
            let docs: Vec<NewDoc> = page
                .documents
                .iter()
                .map(|d| NewDoc::new(&d.id, &d.version))
                .collect();
            listed += docs.len();
            let out = self.gate.store().enqueue_many(&docs)?;
            queued += out.iter().filter(|e| e.queued()).count();
            match page.next_cursor {
                Some(next) if !docs.is_empty() || Some(&next) != cursor.as_ref() => cursor = Some(next),
                _ => return Ok((listed, queued)),
            }
        }
    }
}

impl Source for HttpSource {
    fn ready_at(&self) -> Option<Millis> {
        // The account this process last held: no hold renewal (a write) per claim.
        let account = self.gate.last_held(&self.pool)?;
        self.gate.blocked_until(&account)
    }

    fn fetch(&self, key: &str, max_bytes: u64) -> Result<Vec<u8>, SourceError> {
        let upstream = |detail: String, transient: bool| SourceError::Upstream {
            key: key.to_owned(),
            detail,
            transient,
        };
        let account = self
            .gate
            .hold(&self.pool)
            .map_err(|e| upstream(e.to_string(), true))?;
        let now = self.gate.store().now();
        match self.gate.call(account, |a| {
            self.client.content(&self.base_url, a, key, max_bytes)
        }) {
            Ok(bytes) => Ok(bytes),
            // Another process is probing: look again soon rather than at the
            // end of its slot, since a successful probe opens the account at once.
            Err(
                e @ GateError::Locked {
                    probing: true, until, ..
                },
            ) => Err(SourceError::Deferred {
                key: key.to_owned(),
                reason: e.to_string(),
                until: until.min(now + PROBE_RECHECK_MS),
            }),
            Err(e @ GateError::Locked { until, .. })
            | Err(e @ GateError::Paced { until, .. })
            | Err(
                e @ GateError::Upstream {
                    locked_until: Some(until),
                    ..
                },
            ) => Err(SourceError::Deferred {
                key: key.to_owned(),
                reason: e.to_string(),
                until,
            }),
            Err(GateError::Upstream {
                error: UpstreamError::TooLarge { size, limit },
                ..
            }) => Err(SourceError::TooLarge {
                key: key.to_owned(),
                size,
                limit,
            }),
            Err(GateError::Upstream {
                error: e @ UpstreamError::RateLimited { .. },
                ..
            }) => Err(SourceError::Deferred {
                key: key.to_owned(),
                until: now + duration_ms(e.retry_after().unwrap_or(Duration::from_secs(1))),
                reason: e.to_string(),
            }),
            Err(GateError::Upstream { error, .. }) => {
                let transient = error.is_transient() || matches!(error, UpstreamError::Protocol { .. });
                Err(upstream(error.to_string(), transient))
            }
            Err(e) => Err(upstream(e.to_string(), true)),
        }
    }
}

/// What one drain step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainStep {
    /// A batch of this many results reached the sink.
    Sent(usize),
    /// Nothing waits in the outbox.
    Empty,
    /// Not before `until`: the shared pace, a 429, a lock, or a failed batch.
    Wait { until: Millis, why: &'static str },
}

/// The sink (`[sink.http]`): drains the outbox in batches, under the gate and
/// at most `max_per_second` batches per second across every process.
pub struct Sink {
    client: HttpClient,
    url: String,
    account: String,
    batch_size: usize,
    interval: Duration,
    gate: Arc<Gate>,
}

impl Sink {
    pub fn new(cfg: &HttpSinkConfig, gate: Arc<Gate>, client: HttpClient) -> Sink {
        Sink {
            client,
            url: cfg.url.clone(),
            account: cfg.account.clone(),
            batch_size: cfg.batch_size,
            interval: Duration::from_secs_f64(1.0 / cfg.max_per_second),
            gate,
        }
    }

    /// Until when the sink's account may not be used, if not now.
    pub fn blocked_until(&self) -> Option<Millis> {
        self.gate.blocked_until(&self.account)
    }

    /// Claim the next batch and send it. A batch's rows are removed only after
    /// a 2xx; anything else puts them back, and the pace holds the next batch.
    pub fn drain_once(&self) -> Result<DrainStep, GateError> {
        let store = self.gate.store();
        // A locked account is waited for here, before any batch is claimed, so
        // the outbox's shared pace only ever holds the sink's own rate.
        if let Some(until) = self.blocked_until() {
            return Ok(DrainStep::Wait { until, why: "locked" });
        }
        let lease = self.client.timeout() * 2 + Duration::from_secs(5);
        let mut batch = match store.outbox_claim(self.batch_size, lease, self.interval)? {
            Drain::Empty => return Ok(DrainStep::Empty),
            Drain::Paced { until } => return Ok(DrainStep::Wait { until, why: "pace" }),
            Drain::Send(b) => b,
        };
        // The texts move into the request: reporting back needs only the ids.
        let results: Vec<Delivery> = batch
            .items
            .iter_mut()
            .map(|i| Delivery {
                key: std::mem::take(&mut i.key),
                version: std::mem::take(&mut i.version),
                checksum: std::mem::take(&mut i.checksum),
                text: std::mem::take(&mut i.text),
            })
            .collect();
        let account = self.gate.account(&self.account)?;
        let now = store.now();
        let (until, why) = match self
            .gate
            .call(account, |a| self.client.deliver(&self.url, a, &results))
        {
            Ok(()) => {
                crate::fault::crash_point(crate::fault::CrashPoint::AfterDelivery);
                return Ok(DrainStep::Sent(store.outbox_delivered(&batch)?));
            }
            Err(GateError::Locked { until, .. })
            | Err(GateError::Upstream {
                locked_until: Some(until),
                ..
            }) => {
                store.outbox_undelivered(&batch, now)?;
                return Ok(DrainStep::Wait { until, why: "locked" });
            }
            Err(GateError::Paced { until, .. }) => (until, "rate limited"),
            Err(GateError::Upstream { error, .. }) if matches!(error, UpstreamError::RateLimited { .. }) => {
                let pause = error.retry_after().unwrap_or(self.interval * 2);
                (now + duration_ms(pause), "rate limited")
            }
            Err(GateError::Upstream { .. }) => (now + 1000, "sink failed"),
            Err(e) => {
                store.outbox_undelivered(&batch, now)?;
                return Err(e);
            }
        };
        store.outbox_undelivered(&batch, until)?;
        Ok(DrainStep::Wait { until, why })
    }
}
