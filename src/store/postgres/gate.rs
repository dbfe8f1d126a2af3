//! The auth gate on PostgreSQL (DESIGN §6): the rules of `store/gate/`,
//! statement for statement, with the same history lines and notice texts
//! (`store/gate/text.rs`).
//!
//! SQLite's gate is safe because its single writer runs each decision alone.
//! Here READ COMMITTED transactions of many machines run at once, so every
//! decision takes the lock that makes it alone:
//! - the account's row (`FOR NO KEY UPDATE`, taken right after the row is
//!   made sure to exist): admit, report, unlock and the probe slot read and
//!   change an account only under it, so exactly one transaction grants the
//!   slot after the lock ran out, a lock notice is due at most once per
//!   `notify_every`, and a probe answer meets the epoch and token it was
//!   granted with. `NO KEY` because the pool's holder rows reference the
//!   account (their foreign-key check takes `KEY SHARE`, which this lock does
//!   not block);
//! - [`GATE_LOCK`] (advisory, per transaction) for every rejection: whether
//!   other accounts locked recently (the shared cause) is a question about
//!   every account at once, and two accounts rejected at the same moment
//!   would otherwise each see only itself locked, and nobody would say
//!   "shared cause". It is taken before the account's row, always, so two
//!   rejections never wait for each other in a circle;
//! - [`POOL_LOCK`] (advisory) while a holder chooses an account, so two
//!   processes choosing together do not both count the other's choice as
//!   absent and crowd onto one account;
//! - the expiry warning is one conditional UPDATE of the day warned (the
//!   newest row version is re-checked), so one process per day writes it.
//!
//! Every notice is written in the transaction of the change it announces.

use ::postgres::{Client, Transaction};

use super::tx::Sql;
use crate::clock::Millis;
use crate::store::gate::incident::SHARED_CAUSE_AT;
use crate::store::gate::text::{
    self, answer_name, best_of, day_of, expiry_notice, lock_until, notice_due, Incident, NoticeText, Outage,
    Recovery,
};
use crate::store::gate::{
    AccountState, Admission, Answer, GateChange, GateEvent, GatePolicy, GateState, ProbePermit,
};

/// Serialises the rejections of all accounts (see the module's docs):
/// "leasgate" in ASCII.
const GATE_LOCK: i64 = 0x6c65_6173_6761_7465;

/// Serialises the pool's choices of an account: "leaspool" in ASCII.
const POOL_LOCK: i64 = 0x6c65_6173_706f_6f6c;

/// Accounts locked within the last `lock_ttl` and still locked ($1 is now -
/// lock_ttl), as SQLite's `RECENTLY_LOCKED`.
const RECENTLY_LOCKED: &str = "state = 'locked' AND locked_at >= $1";

/// One account's row as the rules read it.
struct Row {
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

/// Make sure the accounts have rows (open), in name order, so two
/// transactions making the same new accounts never wait for each other in a
/// circle.
fn ensure(tx: &mut Transaction<'_>, now: Millis, accounts: &[&str]) -> Sql<()> {
    tx.execute(
        "INSERT INTO accounts (name, updated_at)
         SELECT name, $2 FROM unnest($1::TEXT[]) AS a (name) ORDER BY name
         ON CONFLICT (name) DO NOTHING",
        &[&accounts, &now],
    )?;
    Ok(())
}

/// Make sure `account` exists, then lock and read its row.
fn locked_row(tx: &mut Transaction<'_>, now: Millis, account: &str) -> Sql<Row> {
    ensure(tx, now, &[account])?;
    let r = tx.query_one(
        "SELECT state = 'locked', epoch, locked_until, locked_at, probe_token, probe_until, probes,
                lock_notice_at, dropped_at_lock, paced_until
         FROM accounts WHERE name = $1 FOR NO KEY UPDATE",
        &[&account],
    )?;
    Ok(Row {
        locked: r.try_get(0)?,
        epoch: r.try_get(1)?,
        locked_until: r.try_get(2)?,
        locked_at: r.try_get(3)?,
        probe_token: r.try_get(4)?,
        probe_until: r.try_get(5)?,
        probes: r.try_get(6)?,
        lock_notice_at: r.try_get(7)?,
        dropped_at_lock: r.try_get(8)?,
        paced_until: r.try_get(9)?,
    })
}

fn event(
    tx: &mut Transaction<'_>,
    now: Millis,
    account: &str,
    event: &str,
    epoch: i64,
    detail: Option<&str>,
) -> Sql<()> {
    tx.execute(
        "INSERT INTO auth_history (account, at, event, epoch, detail) VALUES ($1, $2, $3, $4, $5)",
        &[&account, &now, &event, &epoch, &detail],
    )?;
    Ok(())
}

/// Queue a notice; it is sent after the commit by whoever gets there first.
fn notice(tx: &mut Transaction<'_>, now: Millis, account: &str, n: &NoticeText) -> Sql<()> {
    tx.execute(
        "INSERT INTO notices (account, kind, message, details, created_at, next_try_at)
         VALUES ($1, $2, $3, $4, $5, $5)",
        &[&account, &n.kind, &n.message, &n.details.to_string(), &now],
    )?;
    Ok(())
}

/// May `holder` use `account` now? (`store/gate/incident.rs: admit`)
pub(crate) fn admit(
    tx: &mut Transaction<'_>,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    holder: &str,
) -> Sql<Admission> {
    let r = locked_row(tx, now, account)?;
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
        "UPDATE accounts SET probe_token = $2, probe_until = $3, updated_at = $4 WHERE name = $1",
        &[&account, &token, &(now + p.probe_ttl), &now],
    )?;
    event(tx, now, account, "probe_granted", r.epoch, Some(holder))?;
    Ok(Admission::Probe(ProbePermit {
        account: account.to_owned(),
        epoch: r.epoch,
        token,
    }))
}

/// Record what the upstream answered (`store/gate/incident.rs: report`).
pub(crate) fn report(
    tx: &mut Transaction<'_>,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    permit: Option<&ProbePermit>,
    answer: &Answer,
) -> Sql<GateChange> {
    if matches!(answer, Answer::Rejected { .. }) {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&GATE_LOCK])?;
    }
    let r = locked_row(tx, now, account)?;
    if let Some(permit) = permit {
        let current =
            r.locked && r.epoch == permit.epoch && r.probe_token.as_deref() == Some(permit.token.as_str());
        if !current {
            let name = answer_name(answer);
            event(tx, now, account, "probe_stale", permit.epoch, Some(name))?;
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

/// Hold everyone off until `until` (a 429); never shortens an earlier pace.
fn pace(tx: &mut Transaction<'_>, account: &str, until: Millis) -> Sql<GateChange> {
    tx.execute(
        "UPDATE accounts SET paced_until = GREATEST(coalesce(paced_until, 0), $2) WHERE name = $1",
        &[&account, &until],
    )?;
    Ok(GateChange::Paced { until })
}

fn probe_answer(
    tx: &mut Transaction<'_>,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    r: &Row,
    answer: &Answer,
) -> Sql<GateChange> {
    match answer {
        Answer::Transient | Answer::RateLimited { .. } => {
            if let Answer::RateLimited { until } = answer {
                pace(tx, account, *until)?;
            }
            tx.execute(
                "UPDATE accounts SET probe_token = NULL, probe_until = NULL, updated_at = $2 WHERE name = $1",
                &[&account, &now],
            )?;
            event(tx, now, account, "probe_transient", r.epoch, None)?;
            Ok(GateChange::SlotFreed)
        }
        Answer::Rejected { error, until } => {
            let until = lock_until(now, p, *until);
            tx.execute(
                "UPDATE accounts SET locked_until = $2, probe_token = NULL, probe_until = NULL,
                        probes = probes + 1, last_error = $3, updated_at = $4
                 WHERE name = $1",
                &[&account, &until, &error, &now],
            )?;
            event(tx, now, account, "probe_failed", r.epoch, Some(error))?;
            // A reminder at most once per notify_every while the incident lasts.
            if notice_due(r.lock_notice_at, now, p) {
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

/// Open -> locked: a new incident. The caller holds [`GATE_LOCK`], so the
/// accounts locked recently and the last shared-cause notice are read
/// after every other rejection committed.
fn lock(
    tx: &mut Transaction<'_>,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    r: &Row,
    incident: &Incident<'_>,
) -> Sql<GateChange> {
    let Incident { epoch, until, error } = *incident;
    let dropped: i64 = tx
        .query_one("SELECT dropped FROM outbox_totals WHERE id = 1", &[])?
        .try_get(0)?;
    tx.execute(
        "UPDATE accounts SET state = 'locked', epoch = $2, locked_until = $3, locked_at = $4,
                probe_token = NULL, probe_until = NULL, probes = 0, last_error = $5,
                dropped_at_lock = $6, updated_at = $4
         WHERE name = $1",
        &[&account, &epoch, &until, &now, &error, &dropped],
    )?;
    event(tx, now, account, "locked", epoch, Some(error))?;
    // The shared cause, as on SQLite (`store/gate/incident.rs: lock`).
    let locked = recently_locked(tx, now, p)?;
    let shared = locked.iter().any(|name| name != account);
    if shared && !shared_cause_recent(tx, now, p)? {
        shared_cause_notice(tx, now, p, account, &locked)?;
    } else if shared {
        lock_notice(tx, now, account, incident, &text::locked_too(&locked))?;
    } else if notice_due(r.lock_notice_at, now, p) {
        lock_notice(tx, now, account, incident, "locked")?;
    }
    Ok(GateChange::Locked { epoch, until })
}

/// The names of the accounts [`RECENTLY_LOCKED`], in order.
fn recently_locked(tx: &mut Transaction<'_>, now: Millis, p: &GatePolicy) -> Sql<Vec<String>> {
    let sql = format!("SELECT name FROM accounts WHERE {RECENTLY_LOCKED} ORDER BY name COLLATE \"C\"");
    let rows = tx.query(&sql, &[&(now - p.lock_ttl)])?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

/// Whether the last shared-cause notice is less than one `lock_ttl` old.
fn shared_cause_recent(tx: &mut Transaction<'_>, now: Millis, p: &GatePolicy) -> Sql<bool> {
    let at: Option<String> = tx
        .query_opt("SELECT value FROM meta WHERE name = $1", &[&SHARED_CAUSE_AT])?
        .map(|r| r.try_get(0))
        .transpose()?;
    Ok(at
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|at| now - at < p.lock_ttl))
}

/// The one notice for accounts locked together. Every account in it counts
/// as told: no separate lock notices follow.
fn shared_cause_notice(
    tx: &mut Transaction<'_>,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    locked: &[String],
) -> Sql<()> {
    super::queue::meta_set(tx, SHARED_CAUSE_AT, &now.to_string())?;
    tx.execute(
        &format!("UPDATE accounts SET lock_notice_at = $2 WHERE {RECENTLY_LOCKED}"),
        &[&(now - p.lock_ttl), &now],
    )?;
    notice(tx, now, account, &text::shared_cause_notice(p, locked))
}

fn lock_notice(
    tx: &mut Transaction<'_>,
    now: Millis,
    account: &str,
    incident: &Incident<'_>,
    what: &str,
) -> Sql<()> {
    tx.execute(
        "UPDATE accounts SET lock_notice_at = $2 WHERE name = $1",
        &[&account, &now],
    )?;
    notice(tx, now, account, &text::lock_notice(now, account, incident, what))
}

/// Locked -> open, with the recovery notice, and the documents parked on the
/// account woken (`store/gate/incident.rs: recover`).
fn recover(tx: &mut Transaction<'_>, now: Millis, account: &str, r: &Row, how: Recovery) -> Sql<GateChange> {
    let totals = tx.query_one("SELECT rows, dropped FROM outbox_totals WHERE id = 1", &[])?;
    let outage = Outage {
        epoch: r.epoch,
        locked_at: r.locked_at,
        probes: r.probes,
        held: totals.try_get(0)?,
        dropped: (totals.try_get(1)?, r.dropped_at_lock),
    };
    let told = text::recovery_notice(now, account, how, &outage);
    tx.execute(
        "UPDATE accounts SET state = 'open', locked_until = NULL, locked_at = NULL,
                probe_token = NULL, probe_until = NULL, probes = 0, lock_notice_at = NULL,
                updated_at = $2
         WHERE name = $1",
        &[&account, &now],
    )?;
    event(tx, now, account, "recovered", r.epoch, Some(how.text()))?;
    // LEAST ignores a NULL where SQLite's min() returns it; a retrying row
    // always has its retry_at, so both wake the same rows at the same time.
    tx.execute(
        "UPDATE jobs SET retry_at = LEAST(retry_at, $1), parked_on = NULL
         WHERE parked_on = $2 AND status = 'retrying'",
        &[&now, &account],
    )?;
    notice(tx, now, account, &told)?;
    Ok(GateChange::Recovered { epoch: r.epoch })
}

/// Manual override (`auth unlock`): open the account now, recorded in history.
pub(crate) fn unlock(tx: &mut Transaction<'_>, now: Millis, account: &str, by: &str) -> Sql<bool> {
    let r = locked_row(tx, now, account)?;
    if !r.locked {
        event(tx, now, account, "unlock_noop", r.epoch, Some(by))?;
        return Ok(false);
    }
    event(tx, now, account, "manual_unlock", r.epoch, Some(by))?;
    recover(tx, now, account, &r, Recovery::ByHand)?;
    Ok(true)
}

/// Once a day per account from `warn_days` before the expiry day: a warning
/// (`store/gate/pool.rs: expiry`). The day warned is set by one conditional
/// UPDATE, so of processes warning together exactly one changes it and
/// writes the notice. Returns the days left.
pub(crate) fn expiry(
    tx: &mut Transaction<'_>,
    now: Millis,
    account: &str,
    expires_on: i64,
    warn_days: i64,
) -> Sql<i64> {
    ensure(tx, now, &[account])?;
    let today = day_of(now);
    let left = expires_on - today;
    if left > warn_days {
        return Ok(left);
    }
    let changed = tx.execute(
        "UPDATE accounts SET expiry_warned = $2 WHERE name = $1 AND expiry_warned IS DISTINCT FROM $2",
        &[&account, &today],
    )?;
    if changed == 1 {
        notice(tx, now, account, &expiry_notice(account, left, expires_on))?;
    }
    Ok(left)
}

/// The account this holder uses (`store/gate/pool.rs: hold`): its own while
/// its hold is live, otherwise the open account with the fewest live
/// holders, chosen under [`POOL_LOCK`] (its own hold read again under it).
pub(crate) fn hold(
    tx: &mut Transaction<'_>,
    now: Millis,
    p: &GatePolicy,
    holder: &str,
    candidates: &[String],
    hold_ms: Millis,
) -> Sql<Option<String>> {
    let names: Vec<&str> = candidates.iter().map(String::as_str).collect();
    ensure(tx, now, &names)?;
    let chosen = match current_hold(tx, now, holder, candidates)? {
        Some(a) => Some(a),
        None => {
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&POOL_LOCK])?;
            // Another transaction of this same holder (a thread of the same
            // process) may have chosen while we waited: its choice stands,
            // or the process's threads would spread over the pool.
            match current_hold(tx, now, holder, candidates)? {
                Some(a) => Some(a),
                None => choose(tx, now, p, candidates)?,
            }
        }
    };
    if let Some(a) = &chosen {
        tx.execute(
            "INSERT INTO account_holders (holder, account, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (holder) DO UPDATE SET account = excluded.account, expires_at = excluded.expires_at",
            &[&holder, a, &(now + hold_ms)],
        )?;
    }
    Ok(chosen)
}

/// The holder's live hold, if it is one of `candidates`.
fn current_hold(
    tx: &mut Transaction<'_>,
    now: Millis,
    holder: &str,
    candidates: &[String],
) -> Sql<Option<String>> {
    let current: Option<String> = tx
        .query_opt(
            "SELECT account FROM account_holders WHERE holder = $1 AND expires_at > $2",
            &[&holder, &now],
        )?
        .map(|r| r.try_get(0))
        .transpose()?;
    Ok(current.filter(|a| candidates.contains(a)))
}

/// The candidate to hold: the first of the open ones with the fewest live
/// holders; during a shared cause a lock is no reason to choose.
fn choose(
    tx: &mut Transaction<'_>,
    now: Millis,
    p: &GatePolicy,
    candidates: &[String],
) -> Sql<Option<String>> {
    let shared = recently_locked(tx, now, p)?.len() >= 2 && shared_cause_recent(tx, now, p)?;
    let rows = tx.query(
        "SELECT a.name, a.state = 'locked',
                (SELECT count(*) FROM account_holders h WHERE h.account = a.name AND h.expires_at > $2)
         FROM accounts a WHERE a.name = ANY($1)",
        &[&candidates, &now],
    )?;
    let mut keys = Vec::with_capacity(rows.len());
    for r in &rows {
        let name: String = r.try_get(0)?;
        let locked: bool = r.try_get(1)?;
        let holders: i64 = r.try_get(2)?;
        if let Some(i) = candidates.iter().position(|c| *c == name) {
            keys.push((locked && !shared, holders, i));
        }
    }
    Ok(best_of(keys).map(|i| candidates[i].clone()))
}

/// Let go of a holder's account (the process is stopping).
pub(crate) fn unhold(tx: &mut Transaction<'_>, holder: &str) -> Sql<()> {
    tx.execute("DELETE FROM account_holders WHERE holder = $1", &[&holder])?;
    Ok(())
}

/// Until when nobody should call the upstream with `account`
/// (`store/gate/read.rs: blocked_until`).
pub(crate) fn blocked_until(
    c: &mut Client,
    now: Millis,
    account: &str,
    recheck: Millis,
) -> Sql<Option<Millis>> {
    let row = c.query_opt(
        "SELECT locked_until, probe_until, paced_until FROM accounts WHERE name = $1",
        &[&account],
    )?;
    let Some(row) = row else { return Ok(None) };
    let (locked, probe, paced): (Option<Millis>, Option<Millis>, Option<Millis>) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    Ok(match (locked, probe, paced) {
        (Some(locked), _, _) if now < locked => Some(locked),
        (Some(_), Some(probe), _) if now < probe => Some(probe.min(now + recheck)),
        (Some(_), _, _) => None,
        (None, _, Some(paced)) if now < paced => Some(paced),
        _ => None,
    })
}

/// Accounts whose lock ran out with the probe slot free.
pub(crate) fn probe_due(c: &mut Client, now: Millis) -> Sql<Vec<String>> {
    let rows = c.query(
        "SELECT name FROM accounts
         WHERE state = 'locked' AND locked_until <= $1 AND (probe_until IS NULL OR probe_until <= $1)
         ORDER BY name COLLATE \"C\"",
        &[&now],
    )?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

/// The gate's history of `account`, oldest first.
pub(crate) fn history(c: &mut Client, account: &str) -> Sql<Vec<GateEvent>> {
    let rows = c.query(
        "SELECT at, event, epoch, detail FROM auth_history WHERE account = $1 ORDER BY id",
        &[&account],
    )?;
    rows.iter()
        .map(|r| {
            Ok(GateEvent {
                at: r.try_get(0)?,
                event: r.try_get(1)?,
                epoch: r.try_get(2)?,
                detail: r.try_get(3)?,
            })
        })
        .collect()
}

/// Every account's state, with its live holders.
pub(crate) fn states(c: &mut Client, now: Millis) -> Sql<Vec<AccountState>> {
    let rows = c.query(
        "SELECT a.name, a.state = 'locked', a.locked_until, a.locked_at, a.epoch, a.probes, a.last_error,
                a.probe_until,
                (SELECT count(*) FROM account_holders h WHERE h.account = a.name AND h.expires_at > $1)
         FROM accounts a ORDER BY a.name COLLATE \"C\"",
        &[&now],
    )?;
    rows.iter()
        .map(|r| {
            let locked: bool = r.try_get(1)?;
            let probe_until: Option<Millis> = r.try_get(7)?;
            let state = match (locked, probe_until.is_some_and(|u| u > now)) {
                (false, _) => GateState::Open,
                (true, false) => GateState::Locked,
                (true, true) => GateState::Probing,
            };
            Ok(AccountState {
                name: r.try_get(0)?,
                state,
                locked_until: r.try_get(2)?,
                locked_at: r.try_get(3)?,
                epoch: r.try_get(4)?,
                probes: r.try_get(5)?,
                last_error: r.try_get(6)?,
                holders: r.try_get(8)?,
            })
        })
        .collect()
}
