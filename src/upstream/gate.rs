//! The auth gate at run time (DESIGN §6): the one door every request with an
//! account goes through.
//!
//! Every request with an account goes through [`Gate::call`]: ask the shared
//! state first (open, locked, or this process holds the probe slot), make the
//! request only if allowed, and report the answer, all in short transactions in
//! the jobs database, so that every process sharing the file acts as one body.
//! The rules themselves (locks, epochs, probes, notices) live next to their
//! SQL in `store/gate/`; this module decides what an HTTP answer means for
//! them and what a caller does while it waits.

use std::time::Duration;

use super::client::{Account, UpstreamError};
use super::notify::{Notice, Notifier};
use crate::clock::{duration_ms, rfc3339, Millis};
use crate::config::{Day, FileConfig};
use crate::error::Error;
use crate::store::{Admission, Answer, GateChange, GatePolicy, ProbePermit, Store};

/// Why a gated request did not return a result.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The account is locked (or another process is probing it): no request made.
    #[error("account {account}: locked, nobody calls the upstream with it before {}", rfc3339(*until))]
    Locked {
        /// The account's configured name.
        account: String,
        /// When the lock (or the other process's probe slot) runs out, in ms
        /// from the injected clock.
        until: Millis,
        /// Another process holds the probe slot: its answer may open the account
        /// before `until`, so callers look again sooner.
        probing: bool,
    },
    /// The upstream asked everyone to slow down (429): no request before `until`.
    #[error("account {account}: rate limited, no request before {}", rfc3339(*until))]
    Paced {
        /// The account's configured name.
        account: String,
        /// When requests may resume (ms from the injected clock).
        until: Millis,
    },
    /// The request was made and failed; a credential failure has locked the account.
    #[error("{}", with_account(account, error))]
    Upstream {
        /// The account the request was made with.
        account: String,
        /// How the request failed.
        error: UpstreamError,
        /// Set when the account is locked now (this answer or an earlier one).
        locked_until: Option<Millis>,
    },
    /// A caller named an account the configuration does not have (the name is given).
    #[error("no account named {0:?} in the configuration")]
    UnknownAccount(String),
    /// The gate's shared state could not be read or written in the store.
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

    /// The store that holds the gate's shared state (and whose clock it reads).
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
        let name = self
            .store
            .accounts()
            .hold(&self.holder, pool, hold, &self.policy)?;
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = name.clone();
        self.account(name.as_deref().unwrap_or_default())
    }

    /// The account of `pool` this process uses, as of its last `hold`; `None`
    /// before the first. Reads nothing.
    pub(super) fn last_held(&self, pool: &[String]) -> Option<String> {
        match pool {
            [one] => Some(one.clone()),
            _ => self.held.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    /// Give up this process's pool hold (it is stopping).
    pub fn unhold(&self) {
        let _ = self.store.accounts().unhold(&self.holder);
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
            match self
                .store
                .accounts()
                .admit(&account.name, &self.holder, &self.policy)?
            {
                Admission::Go => None,
                Admission::Probe(p) => {
                    log_probe(&account.name);
                    Some(p)
                }
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
                .accounts()
                .report(&account.name, permit.as_ref(), &answer, &self.policy)?
        };
        log_change(&account.name, &change);
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

    /// If `account`'s lock has run out and nobody holds its probe slot, take
    /// the slot and make `request` as the probe: its answer opens or re-locks
    /// the account for everyone, and the notice goes out. Makes no request
    /// otherwise (open, still locked, or another process is probing): this
    /// is how a lock that nobody is waiting on still ends on time.
    pub fn probe_if_due(
        &self,
        account: &Account,
        request: impl FnOnce(&Account) -> Result<(), UpstreamError>,
    ) -> Result<Option<GateChange>, GateError> {
        let store = self.store.accounts();
        let Admission::Probe(permit) = store.admit(&account.name, &self.holder, &self.policy)? else {
            return Ok(None);
        };
        log_probe(&account.name);
        let answer = answer_for(&request(account), self.store.now());
        let change = store.report(&account.name, Some(&permit), &answer, &self.policy)?;
        log_change(&account.name, &change);
        self.send_notices();
        Ok(Some(change))
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
    pub(super) fn blocked_until(&self, account: &str) -> Option<Millis> {
        let recheck = Duration::from_millis(PROBE_RECHECK_MS as u64);
        self.store
            .accounts()
            .blocked_until(account, recheck)
            .ok()
            .flatten()
    }

    /// Send every due notice this process can take. Returns how many went out.
    pub fn send_notices(&self) -> usize {
        let mut sent = 0;
        while let Ok(Some(n)) = self.store.notices().claim(&self.holder, Duration::from_secs(30)) {
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
                .notices()
                .done(&n, error.as_deref(), Duration::from_secs(10))
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
            left.push((
                name.clone(),
                self.store.accounts().expiry(name, day.0, self.warn_days)?,
            ));
        }
        if !left.is_empty() {
            self.send_notices();
        }
        Ok(left)
    }
}

/// The upstream's error, with the account named once: credential errors
/// name it themselves.
fn with_account(account: &str, error: &UpstreamError) -> String {
    match error.account() {
        Some(_) => error.to_string(),
        None => format!("account {account}: {error}"),
    }
}

/// What an answer means for the credential. Only 401 and lock answers count
/// against it; a 5xx, a timeout or a 429 says nothing either way; any other
/// answer (even a 404) proves the credential works.
fn answer_for<T>(result: &Result<T, UpstreamError>, now: Millis) -> Answer {
    match result {
        Ok(_) => Answer::Accepted,
        // The account's own record: its name is beside the reason already.
        Err(e) if e.is_credential_problem() => Answer::Rejected {
            error: e.without_account(),
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
pub(super) const PROBE_RECHECK_MS: Millis = 1000;

/// Log that this process took `account`'s probe slot.
fn log_probe(account: &str) {
    tracing::info!(
        target: "leasehold::gate",
        event = "gate_probe",
        account,
        "probing a locked account once for everyone"
    );
}

/// Log what an answer did to `account`'s gate: a lock for everyone, a
/// recovery, a pace. Nothing for an unchanged gate.
fn log_change(account: &str, change: &GateChange) {
    match change {
        GateChange::Locked { epoch, until } => tracing::warn!(
            target: "leasehold::gate",
            event = "gate_locked",
            account,
            incident = epoch,
            until_ms = until,
            "the account is locked for every process"
        ),
        GateChange::Recovered { epoch } => tracing::info!(
            target: "leasehold::gate",
            event = "gate_recovered",
            account,
            incident = epoch,
            "the probe succeeded: the account is open again"
        ),
        GateChange::Paced { until } => tracing::info!(
            target: "leasehold::gate",
            event = "gate_paced",
            account,
            until_ms = until,
            "the upstream asked everyone to slow down"
        ),
        GateChange::Unchanged | GateChange::Stale | GateChange::SlotFreed => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_error_names_its_account_once() {
        let refused = GateError::Upstream {
            account: "main".into(),
            error: UpstreamError::Auth {
                account: "main".into(),
                status: 401,
                detail: "bad password".into(),
            },
            locked_until: None,
        };
        let shown = refused.to_string();
        assert_eq!(shown.matches("account main").count(), 1, "{shown}");
        let down = GateError::Upstream {
            account: "main".into(),
            error: UpstreamError::Transient {
                detail: "connection refused".into(),
            },
            locked_until: None,
        };
        let shown = down.to_string();
        assert_eq!(shown.matches("account main").count(), 1, "{shown}");
    }

    #[test]
    fn a_refusal_recorded_for_the_account_does_not_name_it_again() {
        let refused: Result<(), UpstreamError> = Err(UpstreamError::Auth {
            account: "main".into(),
            status: 401,
            detail: "bad password".into(),
        });
        let Answer::Rejected { error, .. } = answer_for(&refused, 0) else {
            panic!("a 401 counts against the credential");
        };
        assert!(error.starts_with("credentials refused (HTTP 401)"), "{error}");
    }
}
