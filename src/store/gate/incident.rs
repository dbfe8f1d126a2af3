//! An incident's life: admit, report, lock, probe, recover, unlock.

use rusqlite::{params, Connection, OptionalExtension};

use super::text::{self, answer_name, lock_until, notice_due, Incident, NoticeText, Outage, Recovery};
use super::{ensure, event, notice, row, Admission, Answer, GateChange, GatePolicy, ProbePermit, Row};
use crate::clock::Millis;

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
    // cause is likely shared (an upstream outage, a changed policy). One
    // shared-cause notice tells every account locked so far; an account that
    // locks after it still gets a lock notice of its own, naming the others,
    // so that no lock (and so no recovery) goes untold.
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
pub(crate) const SHARED_CAUSE_AT: &str = "shared_cause_notice_at";

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
pub(super) fn shared_cause_active(tx: &Connection, now: Millis, p: &GatePolicy) -> rusqlite::Result<bool> {
    Ok(recently_locked(tx, now, p)?.len() >= 2 && shared_cause_recent(tx, now, p)?)
}

/// The one notice for accounts locked together; the caller checked that no
/// other shared-cause notice is recent.
fn shared_cause_notice(
    tx: &Connection,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    locked: &[String],
) -> rusqlite::Result<()> {
    crate::store::queue::meta_set(tx, SHARED_CAUSE_AT, &now.to_string())?;
    // Every account in it counts as told: no separate lock notices follow.
    tx.execute(
        &format!("UPDATE accounts SET lock_notice_at = ?2 WHERE {RECENTLY_LOCKED}"),
        params![now - p.lock_ttl, now],
    )?;
    write_notice(tx, now, account, &text::shared_cause_notice(p, locked))
}

/// Write a notice built by `text`.
fn write_notice(tx: &Connection, now: Millis, account: &str, n: &NoticeText) -> rusqlite::Result<()> {
    notice(tx, now, account, n.kind, &n.message, &n.details)
}

fn lock_notice(
    tx: &Connection,
    now: Millis,
    account: &str,
    incident: &Incident<'_>,
    what: &str,
) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE accounts SET lock_notice_at = ?2 WHERE name = ?1",
        params![account, now],
    )?;
    write_notice(tx, now, account, &text::lock_notice(now, account, incident, what))
}

/// Locked -> open, with the recovery notice. Every lock is told (a lock
/// notice or a shared-cause notice), so every recovery is told too.
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
    let outage = Outage {
        epoch: r.epoch,
        locked_at: r.locked_at,
        probes: r.probes,
        held,
        dropped: (dropped, r.dropped_at_lock),
    };
    let told = text::recovery_notice(now, account, how, &outage);
    tx.execute(
        "UPDATE accounts SET state = 'open', locked_until = NULL, locked_at = NULL,
                probe_token = NULL, probe_until = NULL, probes = 0, lock_notice_at = NULL,
                updated_at = ?2
         WHERE name = ?1",
        params![account, now],
    )?;
    event(tx, now, account, "recovered", r.epoch, Some(how.text()))?;
    // Documents parked on this account may go at once.
    tx.prepare_cached(
        "UPDATE jobs SET retry_at = min(retry_at, ?1), parked_on = NULL
         WHERE parked_on = ?2 AND status = 'retrying'",
    )?
    .execute(params![now, account])?;
    write_notice(tx, now, account, &told)?;
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
