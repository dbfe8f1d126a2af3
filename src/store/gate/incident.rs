//! An incident's life: admit, report, lock, probe, recover, unlock.

use super::rows::{AccountRow, GateRows};
use super::text::{self, answer_name, lock_until, notice_due, Incident, Outage, Recovery};
use super::vocabulary::{Admission, Answer, GateChange, GatePolicy, ProbePermit};
use crate::clock::Millis;

/// May `holder` use `account` now?
pub(crate) fn admit<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    holder: &str,
) -> Result<Admission, R::Error> {
    let r = rows.account_for_update(now, account)?;
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
    rows.set_probe_slot(now, account, Some((&token, now + p.probe_ttl)))?;
    rows.event(now, account, "probe_granted", r.epoch, Some(holder))?;
    Ok(Admission::Probe(ProbePermit {
        account: account.to_owned(),
        epoch: r.epoch,
        token,
    }))
}

/// Record what the upstream answered to a request made with `account`;
/// `permit` is set when the request was the probe.
pub(crate) fn report<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    permit: Option<&ProbePermit>,
    answer: &Answer,
) -> Result<GateChange, R::Error> {
    if matches!(answer, Answer::Rejected { .. }) {
        rows.serialize_rejections()?;
    }
    let r = rows.account_for_update(now, account)?;
    if let Some(permit) = permit {
        let current =
            r.locked && r.epoch == permit.epoch && r.probe_token.as_deref() == Some(permit.token.as_str());
        if !current {
            let name = answer_name(answer);
            rows.event(now, account, "probe_stale", permit.epoch, Some(name))?;
            return Ok(GateChange::Stale);
        }
        return probe_answer(rows, now, p, account, &r, answer);
    }
    match answer {
        Answer::RateLimited { until } => pace(rows, account, *until),
        Answer::Rejected { error, until } if !r.locked => {
            let incident = Incident {
                epoch: r.epoch + 1,
                until: lock_until(now, p, *until),
                error,
            };
            lock(rows, now, p, account, &r, &incident)
        }
        _ => Ok(GateChange::Unchanged),
    }
}

/// Hold everyone off until `until` (a 429); never shortens an earlier pace.
fn pace<R: GateRows + ?Sized>(rows: &mut R, account: &str, until: Millis) -> Result<GateChange, R::Error> {
    rows.raise_pace(account, until)?;
    Ok(GateChange::Paced { until })
}

fn probe_answer<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    r: &AccountRow,
    answer: &Answer,
) -> Result<GateChange, R::Error> {
    match answer {
        Answer::Transient | Answer::RateLimited { .. } => {
            if let Answer::RateLimited { until } = answer {
                pace(rows, account, *until)?;
            }
            rows.set_probe_slot(now, account, None)?;
            rows.event(now, account, "probe_transient", r.epoch, None)?;
            Ok(GateChange::SlotFreed)
        }
        Answer::Rejected { error, until } => {
            let until = lock_until(now, p, *until);
            rows.prolong_lock(now, account, until, error)?;
            rows.event(now, account, "probe_failed", r.epoch, Some(error))?;
            // A reminder at most once per notify_every while the incident lasts.
            if notice_due(r.lock_notice_at, now, p) {
                let incident = Incident {
                    epoch: r.epoch,
                    until,
                    error,
                };
                lock_notice(rows, now, account, &incident, "still locked after a probe")?;
            }
            Ok(GateChange::Locked {
                epoch: r.epoch,
                until,
            })
        }
        Answer::Accepted => recover(rows, now, account, r, Recovery::Probe),
    }
}

/// Open -> locked: a new incident. The caller serialised the rejection
/// ([`GateRows::serialize_rejections`]), so the accounts locked recently and
/// the last shared-cause notice are read after every other rejection.
fn lock<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    r: &AccountRow,
    incident: &Incident<'_>,
) -> Result<GateChange, R::Error> {
    let Incident { epoch, until, error } = *incident;
    let (_, dropped) = rows.outbox_figures()?;
    rows.start_lock(now, account, incident, dropped)?;
    rows.event(now, account, "locked", epoch, Some(error))?;
    // Another account locked within one `lock_ttl`, and still locked: the
    // cause is likely shared (an upstream outage, a changed policy). One
    // shared-cause notice tells every account locked so far; an account that
    // locks after it still gets a lock notice of its own, naming the others,
    // so that no lock (and so no recovery) goes untold.
    let locked = rows.locked_since(now - p.lock_ttl)?;
    let shared = locked.iter().any(|name| name != account);
    if shared && !shared_cause_recent(rows, now, p)? {
        shared_cause_notice(rows, now, p, account, &locked)?;
    } else if shared {
        lock_notice(rows, now, account, incident, &text::locked_too(&locked))?;
    } else if notice_due(r.lock_notice_at, now, p) {
        lock_notice(rows, now, account, incident, "locked")?;
    }
    Ok(GateChange::Locked { epoch, until })
}

/// The meta key holding when the last shared-cause notice was written.
const SHARED_CAUSE_AT: &str = "shared_cause_notice_at";

/// Whether the last shared-cause notice is less than one `lock_ttl` old.
fn shared_cause_recent<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    p: &GatePolicy,
) -> Result<bool, R::Error> {
    let at = rows.meta(SHARED_CAUSE_AT)?;
    Ok(at
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|at| now - at < p.lock_ttl))
}

/// Whether a shared cause was declared within the last `lock_ttl`: then no
/// process moves onto the remaining accounts of a pool.
pub(super) fn shared_cause_active<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    p: &GatePolicy,
) -> Result<bool, R::Error> {
    Ok(rows.locked_since(now - p.lock_ttl)?.len() >= 2 && shared_cause_recent(rows, now, p)?)
}

/// The one notice for accounts locked together; the caller checked that no
/// other shared-cause notice is recent.
fn shared_cause_notice<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    p: &GatePolicy,
    account: &str,
    locked: &[String],
) -> Result<(), R::Error> {
    rows.set_meta(SHARED_CAUSE_AT, &now.to_string())?;
    // Every account in it counts as told: no separate lock notices follow.
    rows.mark_told_since(now, now - p.lock_ttl)?;
    rows.notice(now, account, &text::shared_cause_notice(p, locked))
}

fn lock_notice<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    account: &str,
    incident: &Incident<'_>,
    what: &str,
) -> Result<(), R::Error> {
    rows.mark_told(now, account)?;
    rows.notice(now, account, &text::lock_notice(now, account, incident, what))
}

/// Locked -> open, with the recovery notice, and the documents parked on
/// the account woken. Every lock is told (a lock notice or a shared-cause
/// notice), so every recovery is told too.
fn recover<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    account: &str,
    r: &AccountRow,
    how: Recovery,
) -> Result<GateChange, R::Error> {
    let (held, dropped) = rows.outbox_figures()?;
    let outage = Outage {
        epoch: r.epoch,
        locked_at: r.locked_at,
        probes: r.probes,
        held,
        dropped: (dropped, r.dropped_at_lock),
    };
    let told = text::recovery_notice(now, account, how, &outage);
    rows.reopen(now, account)?;
    rows.event(now, account, "recovered", r.epoch, Some(how.text()))?;
    rows.wake_parked(now, account)?;
    rows.notice(now, account, &told)?;
    Ok(GateChange::Recovered { epoch: r.epoch })
}

/// Manual override (`auth unlock`): open the account now, recorded in history.
pub(crate) fn unlock<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    account: &str,
    by: &str,
) -> Result<bool, R::Error> {
    let r = rows.account_for_update(now, account)?;
    if !r.locked {
        rows.event(now, account, "unlock_noop", r.epoch, Some(by))?;
        return Ok(false);
    }
    rows.event(now, account, "manual_unlock", r.epoch, Some(by))?;
    recover(rows, now, account, &r, Recovery::ByHand)?;
    Ok(true)
}
