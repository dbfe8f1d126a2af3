//! Pools of accounts (which process uses which) and expiry warnings.

use super::incident::shared_cause_active;
use super::rows::GateRows;
use super::text::{best_of, day_of, expiry_notice};
use super::vocabulary::GatePolicy;
use crate::clock::Millis;

/// Once a day (per account, across processes) from `warn_days` before the
/// expiry day: a warning notice. Returns the days left.
pub(crate) fn expiry<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    account: &str,
    expires_on: i64,
    warn_days: i64,
) -> Result<i64, R::Error> {
    rows.ensure_accounts(now, &[account])?;
    let today = day_of(now);
    let left = expires_on - today;
    if left > warn_days {
        return Ok(left);
    }
    if rows.mark_expiry_warned(account, today)? {
        rows.notice(now, account, &expiry_notice(account, left, expires_on))?;
    }
    Ok(left)
}

/// The account this holder uses: its own while its hold is live (sticky);
/// otherwise the open account with the fewest live holders, chosen alone
/// ([`GateRows::serialize_choices`], then its own hold read again: another
/// transaction of the same holder may have chosen meanwhile, and its choice
/// stands). During a shared cause, or when every account is locked, locks
/// are not a reason to choose: nobody fails over onto the remaining accounts.
pub(crate) fn hold<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    p: &GatePolicy,
    holder: &str,
    candidates: &[String],
    hold_ms: Millis,
) -> Result<Option<String>, R::Error> {
    let names: Vec<&str> = candidates.iter().map(String::as_str).collect();
    rows.ensure_accounts(now, &names)?;
    let mut chosen = current_hold(rows, now, holder, candidates)?;
    if chosen.is_none() && rows.serialize_choices()? {
        chosen = current_hold(rows, now, holder, candidates)?;
    }
    if chosen.is_none() {
        chosen = choose(rows, now, p, candidates)?;
    }
    if let Some(a) = &chosen {
        rows.set_hold(holder, a, now + hold_ms)?;
    }
    Ok(chosen)
}

/// The holder's live hold, if it is one of `candidates`.
fn current_hold<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    holder: &str,
    candidates: &[String],
) -> Result<Option<String>, R::Error> {
    Ok(rows.live_hold(now, holder)?.filter(|a| candidates.contains(a)))
}

/// The candidate to hold: the first of the open ones with the fewest live
/// holders; during a shared cause a lock is no reason to choose.
fn choose<R: GateRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    p: &GatePolicy,
    candidates: &[String],
) -> Result<Option<String>, R::Error> {
    let shared = shared_cause_active(rows, now, p)?;
    let loads = rows.candidate_loads(now, candidates)?;
    let keys = loads.into_iter().filter_map(|(name, locked, holders)| {
        let i = candidates.iter().position(|c| *c == name)?;
        Some((locked && !shared, holders, i))
    });
    Ok(best_of(keys).map(|i| candidates[i].clone()))
}

/// Let go of a holder's account (the process is stopping).
pub(crate) fn unhold<R: GateRows + ?Sized>(rows: &mut R, holder: &str) -> Result<(), R::Error> {
    rows.release_hold(holder)
}
