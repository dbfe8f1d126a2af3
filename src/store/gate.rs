//! The SQL of the auth gate (DESIGN §6): one row per account, shared by every
//! process through the database.
//!
//! Each function runs inside the caller's `BEGIN IMMEDIATE` transaction, so a
//! state change and the notice announcing it commit together or not at all.
//! The rules, in order of a life:
//! - `open`: requests go;
//! - a rejection (401, a lock answer) while open locks the account for everyone,
//!   starts an incident (`epoch + 1`) and writes a lock notice, at most one per
//!   `notify_every` (a recovery resets that);
//! - while locked and before `locked_until`: nobody calls the upstream;
//! - after `locked_until`: one process takes the probe slot (set-if-absent with
//!   `probe_ttl`) and makes one request; the permit carries the epoch and a
//!   token, so a probe answer that arrives after its slot was taken over
//!   changes nothing;
//! - probe success: open for everyone and a recovery notice (outage, probes,
//!   results held and dropped); probe rejection: locked for another TTL;
//!   a transient probe answer frees the slot without counting.

use rusqlite::{params, Connection, OptionalExtension};

use crate::clock::Millis;

/// The gate's timings, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatePolicy {
    /// How long a rejection locks the account for every process.
    pub lock_ttl: Millis,
    /// How long the prober holds the probe slot before another process may take it.
    pub probe_ttl: Millis,
    /// The least time between two lock notices for one account (a recovery resets it).
    pub notify_every: Millis,
}

/// What a process may do with an account now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Open: make the request.
    Go,
    /// Locked (or someone else is probing): do not call the upstream before `until`.
    Wait {
        /// When the lock (or the other process's probe slot) runs out, in ms from the injected clock.
        until: Millis,
        /// Another process holds the probe slot: its answer may open the account sooner.
        probing: bool,
    },
    /// The lock ran out and this process holds the probe slot: make exactly one
    /// request and report its answer with this permit.
    Probe(ProbePermit),
    /// Open, but the upstream asked to slow down (429): not before `until`.
    Paced {
        /// The end of the pause the upstream asked for, in ms from the injected clock.
        until: Millis,
    },
}

/// The right to make the one probe request of an incident's round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePermit {
    /// The account being probed.
    pub account: String,
    /// The incident the probe belongs to; an answer for an older epoch changes nothing.
    pub epoch: i64,
    /// Names this holder of the probe slot, so an answer that arrives after the
    /// slot was taken over is recognised as stale.
    pub token: String,
}

/// What the upstream answered, as far as the gate cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The credential worked.
    Accepted,
    /// 401 or a lock answer; lock until `until` if the upstream said so.
    Rejected {
        /// What the upstream said, kept as the account's last error.
        error: String,
        /// The lock's end as the upstream gave it (ms from the injected clock);
        /// otherwise the policy's `lock_ttl` applies.
        until: Option<Millis>,
    },
    /// 5xx, timeout, connection error: says nothing about the credential.
    Transient,
    /// 429: nothing about the credential either, but every process holds off
    /// until `until`.
    RateLimited {
        /// When requests may resume (ms from the injected clock).
        until: Millis,
    },
}

/// What a report changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateChange {
    /// Nothing: the answer says nothing new (a success while open, a transient
    /// error, a rejection while already locked).
    Unchanged,
    /// The account is locked (a new incident, or a failed probe).
    Locked {
        /// The incident's number; +1 for each new incident of the account.
        epoch: i64,
        /// When the lock runs out (ms from the injected clock).
        until: Millis,
    },
    /// A probe succeeded: open for everyone.
    Recovered {
        /// The incident that ended.
        epoch: i64,
    },
    /// A probe answer from an old permit: ignored.
    Stale,
    /// A transient probe answer: the slot is free again, nothing counted.
    SlotFreed,
    /// A 429: everyone holds off until `until`.
    Paced {
        /// When requests may resume (ms from the injected clock).
        until: Millis,
    },
}

/// One line of the gate's history (locks, probes, recoveries, manual unlocks).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GateEvent {
    /// When it happened (ms from the injected clock).
    pub at: Millis,
    /// e.g. `locked`, `probe_granted`, `probe_failed`, `recovered`, `manual_unlock`.
    pub event: String,
    /// The incident it belongs to.
    pub epoch: i64,
    /// Free text: the upstream's error, the probe's holder, how it recovered...
    pub detail: Option<String>,
}

/// Where an account is in the gate's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GateState {
    /// Requests go.
    Open,
    /// Nobody calls the upstream with it until the lock runs out.
    Locked,
    /// Locked, and one process holds the probe slot.
    Probing,
}

impl GateState {
    /// The name shown by `auth status`.
    pub fn as_str(self) -> &'static str {
        match self {
            GateState::Open => "open",
            GateState::Locked => "locked",
            GateState::Probing => "probing",
        }
    }
}

impl std::fmt::Display for GateState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One account's state, for `auth status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AccountState {
    /// The account's name from the configuration.
    pub name: String,
    /// Open, locked or probing.
    pub state: GateState,
    /// When the current lock runs out (ms from the injected clock); `None` while open.
    pub locked_until: Option<Millis>,
    /// When the current incident began; `None` while open.
    pub locked_at: Option<Millis>,
    /// The number of the latest incident (0 if the account was never locked).
    pub epoch: i64,
    /// Probes made in the current incident; reset on recovery.
    pub probes: i64,
    /// The latest rejection (the one that started or prolonged a lock); kept
    /// after a recovery.
    pub last_error: Option<String>,
    /// Gates (one per process) whose hold on this account has not run out: the
    /// load the account pool spreads.
    pub holders: i64,
}

/// Make sure the account has a row (open).
fn ensure(tx: &Connection, now: Millis, account: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO accounts (name, updated_at) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
        params![account, now],
    )?;
    Ok(())
}

struct Row {
    /// `state = 'locked'`: the account is in an incident.
    locked: bool,
    epoch: i64,
    locked_until: Option<Millis>,
    locked_at: Option<Millis>,
    probe_token: Option<String>,
    probe_until: Option<Millis>,
    probes: i64,
    lock_notice_at: Option<Millis>,
    dropped_at_lock: i64,
    paced_until: Option<Millis>,
}

fn row(tx: &Connection, account: &str) -> rusqlite::Result<Row> {
    tx.query_row(
        "SELECT state = 'locked', epoch, locked_until, locked_at, probe_token, probe_until, probes,
                lock_notice_at, dropped_at_lock, paced_until
         FROM accounts WHERE name = ?1",
        [account],
        |r| {
            Ok(Row {
                locked: r.get(0)?,
                epoch: r.get(1)?,
                locked_until: r.get(2)?,
                locked_at: r.get(3)?,
                probe_token: r.get(4)?,
                probe_until: r.get(5)?,
                probes: r.get(6)?,
                lock_notice_at: r.get(7)?,
                dropped_at_lock: r.get(8)?,
                paced_until: r.get(9)?,
            })
        },
    )
}

fn event(
    tx: &Connection,
    now: Millis,
    account: &str,
    event: &str,
    epoch: i64,
    detail: Option<&str>,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO auth_history (account, at, event, epoch, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![account, now, event, epoch, detail],
    )?;
    Ok(())
}

/// Queue a notice; it is sent after the commit by whoever gets there first.
fn notice(
    tx: &Connection,
    now: Millis,
    account: &str,
    kind: &str,
    message: &str,
    details: &serde_json::Value,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO notices (account, kind, message, details, created_at, next_try_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
        params![account, kind, message, details.to_string(), now],
    )?;
    Ok(())
}

/// May `holder` use `account` now?
pub(crate) fn admit(
    tx: &Connection,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    holder: &str,
) -> rusqlite::Result<Admission> {
    ensure(tx, now, account)?;
    let r = row(tx, account)?;
    let Some(until) = r.locked_until else {
        return Ok(match r.paced_until {
            Some(until) if until > now => Admission::Paced { until },
            _ => Admission::Go,
        });
    };
    if now < until {
        return Ok(Admission::Wait {
            until,
            probing: false,
        });
    }
    if let (Some(_), Some(slot_until)) = (&r.probe_token, r.probe_until) {
        if now < slot_until {
            return Ok(Admission::Wait {
                until: slot_until,
                probing: true,
            });
        }
    }
    let token = uuid::Uuid::new_v4().to_string();
    tx.execute(
        "UPDATE accounts SET probe_token = ?2, probe_until = ?3, updated_at = ?4 WHERE name = ?1",
        params![account, token, now + p.probe_ttl, now],
    )?;
    event(tx, now, account, "probe_granted", r.epoch, Some(holder))?;
    Ok(Admission::Probe(ProbePermit {
        account: account.to_owned(),
        epoch: r.epoch,
        token,
    }))
}

/// Record what the upstream answered to a request made with `account`;
/// `permit` is set when the request was the probe.
pub(crate) fn report(
    tx: &Connection,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    permit: Option<&ProbePermit>,
    answer: &Answer,
) -> rusqlite::Result<GateChange> {
    ensure(tx, now, account)?;
    let r = row(tx, account)?;
    if let Some(permit) = permit {
        let current =
            r.locked && r.epoch == permit.epoch && r.probe_token.as_deref() == Some(permit.token.as_str());
        if !current {
            event(
                tx,
                now,
                account,
                "probe_stale",
                permit.epoch,
                Some(answer_name(answer)),
            )?;
            return Ok(GateChange::Stale);
        }
        return probe_answer(tx, now, p, account, &r, answer);
    }
    match answer {
        Answer::RateLimited { until } => pace(tx, account, *until),
        Answer::Rejected { error, until } if !r.locked => {
            let incident = Incident {
                epoch: r.epoch + 1,
                until: lock_until(now, p, *until),
                error,
            };
            lock(tx, now, p, account, &r, &incident)
        }
        _ => Ok(GateChange::Unchanged),
    }
}

/// Until when a rejection locks: what the upstream said, else one lock TTL;
/// always in the future.
fn lock_until(now: Millis, p: &GatePolicy, said: Option<Millis>) -> Millis {
    said.unwrap_or(now + p.lock_ttl).max(now + 1)
}

/// A lock notice (or reminder) at most once per `notify_every` per incident.
fn notice_due(r: &Row, now: Millis, p: &GatePolicy) -> bool {
    r.lock_notice_at.is_none_or(|at| now - at >= p.notify_every)
}

fn answer_name(a: &Answer) -> &'static str {
    match a {
        Answer::Accepted => "accepted",
        Answer::Rejected { .. } => "rejected",
        Answer::Transient => "transient",
        Answer::RateLimited { .. } => "rate limited",
    }
}

/// Hold everyone off until `until` (a 429); never shortens an earlier pace.
fn pace(tx: &Connection, account: &str, until: Millis) -> rusqlite::Result<GateChange> {
    tx.execute(
        "UPDATE accounts SET paced_until = max(coalesce(paced_until, 0), ?2) WHERE name = ?1",
        params![account, until],
    )?;
    Ok(GateChange::Paced { until })
}

fn probe_answer(
    tx: &Connection,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    r: &Row,
    answer: &Answer,
) -> rusqlite::Result<GateChange> {
    match answer {
        Answer::Transient | Answer::RateLimited { .. } => {
            if let Answer::RateLimited { until } = answer {
                pace(tx, account, *until)?;
            }
            tx.execute(
                "UPDATE accounts SET probe_token = NULL, probe_until = NULL, updated_at = ?2 WHERE name = ?1",
                params![account, now],
            )?;
            event(tx, now, account, "probe_transient", r.epoch, None)?;
            Ok(GateChange::SlotFreed)
        }
        Answer::Rejected { error, until } => {
            let until = lock_until(now, p, *until);
            tx.execute(
                "UPDATE accounts SET locked_until = ?2, probe_token = NULL, probe_until = NULL,
                        probes = probes + 1, last_error = ?3, updated_at = ?4
                 WHERE name = ?1",
                params![account, until, error, now],
            )?;
            event(tx, now, account, "probe_failed", r.epoch, Some(error))?;
            // A reminder at most once per notify_every while the incident lasts.
            if notice_due(r, now, p) {
                let incident = Incident {
                    epoch: r.epoch,
                    until,
                    error,
                };
                lock_notice(tx, now, account, &incident, "still locked after a probe")?;
            }
            Ok(GateChange::Locked {
                epoch: r.epoch,
                until,
            })
        }
        Answer::Accepted => recover(tx, now, account, r, Recovery::Probe),
    }
}

/// What a lock notice tells: the incident, until when, and why.
struct Incident<'a> {
    epoch: i64,
    until: Millis,
    error: &'a str,
}

/// Open -> locked: a new incident.
fn lock(
    tx: &Connection,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    r: &Row,
    incident: &Incident<'_>,
) -> rusqlite::Result<GateChange> {
    let Incident { epoch, until, error } = *incident;
    let dropped: i64 = tx.query_row("SELECT dropped FROM outbox_totals WHERE id = 1", [], |r| r.get(0))?;
    tx.execute(
        "UPDATE accounts SET state = 'locked', epoch = ?2, locked_until = ?3, locked_at = ?4,
                probe_token = NULL, probe_until = NULL, probes = 0, last_error = ?5,
                dropped_at_lock = ?6, updated_at = ?4
         WHERE name = ?1",
        params![account, epoch, until, now, error, dropped],
    )?;
    event(tx, now, account, "locked", epoch, Some(error))?;
    // Another account locked within one `lock_ttl`, and still locked: the
    // cause is likely shared (an upstream outage, a changed policy).
    let locked = recently_locked(tx, now, p)?;
    if locked.iter().any(|name| name != account) {
        shared_cause_notice(tx, now, p, account, &locked)?;
    } else if notice_due(r, now, p) {
        lock_notice(tx, now, account, incident, "locked")?;
    }
    Ok(GateChange::Locked { epoch, until })
}

/// Accounts locked within the last `lock_ttl` and still locked (`?1` is
/// now - lock_ttl).
const RECENTLY_LOCKED: &str = "state = 'locked' AND locked_at >= ?1";

/// The names of the accounts [`RECENTLY_LOCKED`], in order.
fn recently_locked(tx: &Connection, now: Millis, p: &GatePolicy) -> rusqlite::Result<Vec<String>> {
    let sql = format!("SELECT name FROM accounts WHERE {RECENTLY_LOCKED} ORDER BY name");
    let mut s = tx.prepare_cached(&sql)?;
    let names = s.query_map([now - p.lock_ttl], |r| r.get(0))?;
    names.collect()
}

/// The meta key holding when the last shared-cause notice was written.
const SHARED_CAUSE_AT: &str = "shared_cause_notice_at";

/// Whether the last shared-cause notice is less than one `lock_ttl` old.
fn shared_cause_recent(tx: &Connection, now: Millis, p: &GatePolicy) -> rusqlite::Result<bool> {
    let at: Option<String> = tx
        .query_row("SELECT value FROM meta WHERE name = ?1", [SHARED_CAUSE_AT], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(at
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|at| now - at < p.lock_ttl))
}

/// Whether a shared cause was declared within the last `lock_ttl`: then no
/// process moves onto the remaining accounts of a pool.
fn shared_cause_active(tx: &Connection, now: Millis, p: &GatePolicy) -> rusqlite::Result<bool> {
    Ok(recently_locked(tx, now, p)?.len() >= 2 && shared_cause_recent(tx, now, p)?)
}

fn shared_cause_notice(
    tx: &Connection,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    locked: &[String],
) -> rusqlite::Result<()> {
    if shared_cause_recent(tx, now, p)? {
        return Ok(());
    }
    tx.execute(
        "INSERT INTO meta (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        params![SHARED_CAUSE_AT, now.to_string()],
    )?;
    // Every account in it counts as told: no separate lock notices follow.
    tx.execute(
        &format!("UPDATE accounts SET lock_notice_at = ?2 WHERE {RECENTLY_LOCKED}"),
        params![now - p.lock_ttl, now],
    )?;
    let message = format!(
        "accounts {} were all rejected within {} s: likely a shared cause; not failing over",
        locked.join(", "),
        p.lock_ttl / 1000
    );
    notice(
        tx,
        now,
        account,
        "shared_cause",
        &message,
        &serde_json::json!({ "accounts": locked }),
    )
}

fn lock_notice(
    tx: &Connection,
    now: Millis,
    account: &str,
    incident: &Incident<'_>,
    what: &str,
) -> rusqlite::Result<()> {
    let Incident { epoch, until, error } = *incident;
    tx.execute(
        "UPDATE accounts SET lock_notice_at = ?2 WHERE name = ?1",
        params![account, now],
    )?;
    let message = format!(
        "account {account} {what}: {error}; nobody uses it for {} s",
        (until - now).max(0) / 1000
    );
    notice(
        tx,
        now,
        account,
        "lock",
        &message,
        &serde_json::json!({ "epoch": epoch, "locked_until": until, "error": error }),
    )
}

/// Locked -> open, with the recovery notice. Only after a lock notice went out
/// for this incident (or an earlier one of the same `notify_every` window).
/// How a lock ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Recovery {
    /// A probe was accepted (it counts among the incident's probes).
    Probe,
    /// `auth unlock`.
    ByHand,
}

impl Recovery {
    fn text(self) -> &'static str {
        match self {
            Recovery::Probe => "probe succeeded",
            Recovery::ByHand => "unlocked by hand",
        }
    }
}

fn recover(
    tx: &Connection,
    now: Millis,
    account: &str,
    r: &Row,
    how: Recovery,
) -> rusqlite::Result<GateChange> {
    let (held, dropped): (i64, i64) =
        tx.query_row("SELECT rows, dropped FROM outbox_totals WHERE id = 1", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    let probes = r.probes + i64::from(how == Recovery::Probe);
    let how = how.text();
    tx.execute(
        "UPDATE accounts SET state = 'open', locked_until = NULL, locked_at = NULL,
                probe_token = NULL, probe_until = NULL, probes = 0, lock_notice_at = NULL,
                updated_at = ?2
         WHERE name = ?1",
        params![account, now],
    )?;
    event(tx, now, account, "recovered", r.epoch, Some(how))?;
    // Documents parked on this account may go at once.
    tx.prepare_cached(
        "UPDATE jobs SET retry_at = min(retry_at, ?1), parked_on = NULL
         WHERE parked_on = ?2 AND status = 'retrying'",
    )?
    .execute(params![now, account])?;
    if r.lock_notice_at.is_some() {
        let outage = now - r.locked_at.unwrap_or(now);
        let dropped = dropped - r.dropped_at_lock;
        let message = format!(
            "account {account} works again ({how}) after {} s; {probes} probe(s); \
             {held} result(s) held in the outbox, {dropped} dropped",
            outage / 1000
        );
        notice(
            tx,
            now,
            account,
            "recovery",
            &message,
            &serde_json::json!({
                "epoch": r.epoch, "outage_ms": outage, "probes": probes,
                "held": held, "dropped": dropped,
            }),
        )?;
    }
    Ok(GateChange::Recovered { epoch: r.epoch })
}

/// Manual override (`auth unlock`): open the account now, recorded in history.
pub(crate) fn unlock(tx: &Connection, now: Millis, account: &str, by: &str) -> rusqlite::Result<bool> {
    ensure(tx, now, account)?;
    let r = row(tx, account)?;
    if !r.locked {
        event(tx, now, account, "unlock_noop", r.epoch, Some(by))?;
        return Ok(false);
    }
    event(tx, now, account, "manual_unlock", r.epoch, Some(by))?;
    recover(tx, now, account, &r, Recovery::ByHand)?;
    Ok(true)
}

/// Until when nobody should call the upstream with `account` (locked, being
/// probed by someone, or paced), or `None` if a request may go now. A probe
/// held by someone else is looked at again within `recheck` ms, since its
/// success opens the account at once.
pub(crate) fn blocked_until(
    c: &Connection,
    now: Millis,
    account: &str,
    recheck: Millis,
) -> rusqlite::Result<Option<Millis>> {
    let r: Option<(Option<Millis>, Option<Millis>, Option<Millis>)> = c
        .query_row(
            "SELECT locked_until, probe_until, paced_until FROM accounts WHERE name = ?1",
            [account],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    Ok(match r {
        None => None,
        Some((Some(locked), _, _)) if now < locked => Some(locked),
        Some((Some(_), Some(probe), _)) if now < probe => Some(probe.min(now + recheck)),
        Some((Some(_), _, _)) => None,
        Some((None, _, Some(paced))) if now < paced => Some(paced),
        Some(_) => None,
    })
}

/// The gate's history of `account`, oldest first.
pub(crate) fn history(c: &Connection, account: &str) -> rusqlite::Result<Vec<GateEvent>> {
    let mut s =
        c.prepare_cached("SELECT at, event, epoch, detail FROM auth_history WHERE account = ?1 ORDER BY id")?;
    let rows = s.query_map([account], |r| {
        Ok(GateEvent {
            at: r.get(0)?,
            event: r.get(1)?,
            epoch: r.get(2)?,
            detail: r.get(3)?,
        })
    })?;
    rows.collect()
}

/// Every account's state, with its live holders.
pub(crate) fn states(c: &Connection, now: Millis) -> rusqlite::Result<Vec<AccountState>> {
    let mut s = c.prepare(
        "SELECT a.name, a.state = 'locked', a.locked_until, a.locked_at, a.epoch, a.probes, a.last_error,
                a.probe_until,
                (SELECT count(*) FROM account_holders h WHERE h.account = a.name AND h.expires_at > ?1)
         FROM accounts a ORDER BY a.name",
    )?;
    let rows = s.query_map([now], |r| {
        let locked: bool = r.get(1)?;
        let probe_until: Option<Millis> = r.get(7)?;
        let state = match (locked, probe_until.is_some_and(|u| u > now)) {
            (false, _) => GateState::Open,
            (true, false) => GateState::Locked,
            (true, true) => GateState::Probing,
        };
        Ok(AccountState {
            name: r.get(0)?,
            state,
            locked_until: r.get(2)?,
            locked_at: r.get(3)?,
            epoch: r.get(4)?,
            probes: r.get(5)?,
            last_error: r.get(6)?,
            holders: r.get(8)?,
        })
    })?;
    rows.collect()
}

/// Once a day (per account, across processes) from `warn_days` before the
/// expiry day: a warning notice. Returns the days left.
pub(crate) fn expiry(
    tx: &Connection,
    now: Millis,
    account: &str,
    expires_on: i64,
    warn_days: i64,
) -> rusqlite::Result<i64> {
    ensure(tx, now, account)?;
    let today = now.div_euclid(86_400_000);
    let left = expires_on - today;
    if left > warn_days {
        return Ok(left);
    }
    let warned: Option<i64> = tx.query_row(
        "SELECT expiry_warned FROM accounts WHERE name = ?1",
        [account],
        |r| r.get(0),
    )?;
    if warned == Some(today) {
        return Ok(left);
    }
    tx.execute(
        "UPDATE accounts SET expiry_warned = ?2 WHERE name = ?1",
        params![account, today],
    )?;
    let message = if left > 0 {
        format!("account {account} expires in {left} day(s)")
    } else if left == 0 {
        format!("account {account} expires today")
    } else {
        format!("account {account} expired {} day(s) ago", -left)
    };
    notice(
        tx,
        now,
        account,
        "expiry",
        &message,
        &serde_json::json!({ "days_left": left, "expires_on_day": expires_on }),
    )?;
    Ok(left)
}

/// The account this holder uses: its own while its hold is live (sticky);
/// otherwise the open account with the fewest live holders. During a shared
/// cause, or when every account is locked, locks are not a reason to choose:
/// nobody fails over onto the remaining accounts.
pub(crate) fn hold(
    tx: &Connection,
    now: Millis,
    p: &GatePolicy,
    holder: &str,
    candidates: &[String],
    hold_ms: Millis,
) -> rusqlite::Result<Option<String>> {
    for a in candidates {
        ensure(tx, now, a)?;
    }
    let current: Option<String> = tx
        .query_row(
            "SELECT account FROM account_holders WHERE holder = ?1 AND expires_at > ?2",
            params![holder, now],
            |r| r.get(0),
        )
        .optional()?;
    let chosen = match current.filter(|a| candidates.contains(a)) {
        Some(a) => Some(a),
        None => choose(tx, now, p, candidates)?,
    };
    if let Some(a) = &chosen {
        tx.execute(
            "INSERT INTO account_holders (holder, account, expires_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (holder) DO UPDATE SET account = excluded.account, expires_at = excluded.expires_at",
            params![holder, a, now + hold_ms],
        )?;
    }
    Ok(chosen)
}

fn choose(
    tx: &Connection,
    now: Millis,
    p: &GatePolicy,
    candidates: &[String],
) -> rusqlite::Result<Option<String>> {
    let shared = shared_cause_active(tx, now, p)?;
    let mut best: Option<(bool, i64, usize)> = None;
    for (i, a) in candidates.iter().enumerate() {
        let (locked, holders): (bool, i64) = tx.query_row(
            "SELECT state = 'locked',
                    (SELECT count(*) FROM account_holders WHERE account = ?1 AND expires_at > ?2)
             FROM accounts WHERE name = ?1",
            params![a, now],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let locked = locked && !shared;
        let key = (locked, holders, i);
        if best.is_none_or(|b| key < b) {
            best = Some(key);
        }
    }
    Ok(best.map(|(_, _, i)| candidates[i].clone()))
}

/// Let go of a holder's account (the process is stopping).
pub(crate) fn unhold(tx: &Connection, holder: &str) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM account_holders WHERE holder = ?1", [holder])?;
    Ok(())
}
