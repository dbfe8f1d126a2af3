//! The gate's reads: until when an account is blocked, its history, every state.

use rusqlite::{Connection, OptionalExtension};

use super::{AccountState, GateEvent, GateState};
use crate::clock::Millis;

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

/// Accounts whose lock has run out with its probe slot free: the next
/// `admit` of any of them grants the probe. Nobody may be about to use them
/// (no holder, or holders with nothing to do), so a background sweep probes
/// them rather than leaving them locked until someone does.
pub(crate) fn probe_due(c: &Connection, now: Millis) -> rusqlite::Result<Vec<String>> {
    let mut s = c.prepare_cached(
        "SELECT name FROM accounts
         WHERE state = 'locked' AND locked_until <= ?1 AND (probe_until IS NULL OR probe_until <= ?1)
         ORDER BY name",
    )?;
    let names = s.query_map([now], |r| r.get(0))?;
    names.collect()
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
