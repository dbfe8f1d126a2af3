//! The gate's reads: until when an account is blocked, its history, every state.

use super::rows::GateReads;
use super::vocabulary::{AccountState, GateEvent};
use crate::clock::Millis;

/// Until when nobody should call the upstream with `account` (locked, being
/// probed by someone, or paced), or `None` if a request may go now. A probe
/// held by someone else is looked at again within `recheck` ms, since its
/// success opens the account at once.
pub(crate) fn blocked_until<R: GateReads + ?Sized>(
    rows: &mut R,
    now: Millis,
    account: &str,
    recheck: Millis,
) -> Result<Option<Millis>, R::Error> {
    Ok(match rows.account_timers(account)? {
        None => None,
        Some((Some(locked), _, _)) if now < locked => Some(locked),
        Some((Some(_), Some(probe), _)) if now < probe => Some(probe.min(now + recheck)),
        Some((Some(_), _, _)) => None,
        Some((None, _, Some(paced))) if now < paced => Some(paced),
        Some(_) => None,
    })
}

/// Accounts whose lock has run out with its probe slot free: the next
/// `admit` of any of them grants the probe. Nobody may be about to use them
/// (no holder, or holders with nothing to do), so a background sweep probes
/// them rather than leaving them locked until someone does.
pub(crate) fn probe_due<R: GateReads + ?Sized>(rows: &mut R, now: Millis) -> Result<Vec<String>, R::Error> {
    rows.locks_run_out(now)
}

/// The gate's history of `account`, oldest first.
pub(crate) fn history<R: GateReads + ?Sized>(
    rows: &mut R,
    account: &str,
) -> Result<Vec<GateEvent>, R::Error> {
    rows.events(account)
}

/// Every account's state, with its live holders.
pub(crate) fn states<R: GateReads + ?Sized>(
    rows: &mut R,
    now: Millis,
) -> Result<Vec<AccountState>, R::Error> {
    rows.accounts(now)
}
