//! Pools of accounts (which process uses which) and expiry warnings.

use rusqlite::{params, Connection, OptionalExtension};

use super::incident::shared_cause_active;
use super::text::{best_of, day_of, expiry_notice};
use super::{ensure, notice, GatePolicy};
use crate::clock::Millis;

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
    let today = day_of(now);
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
    let n = expiry_notice(account, left, expires_on);
    notice(tx, now, account, n.kind, &n.message, &n.details)?;
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
    let mut keys = Vec::with_capacity(candidates.len());
    for (i, a) in candidates.iter().enumerate() {
        let (locked, holders): (bool, i64) = tx.query_row(
            "SELECT state = 'locked',
                    (SELECT count(*) FROM account_holders WHERE account = ?1 AND expires_at > ?2)
             FROM accounts WHERE name = ?1",
            params![a, now],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let locked = locked && !shared;
        keys.push((locked, holders, i));
    }
    Ok(best_of(keys).map(|i| candidates[i].clone()))
}

/// Let go of a holder's account (the process is stopping).
pub(crate) fn unhold(tx: &Connection, holder: &str) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM account_holders WHERE holder = ?1", [holder])?;
    Ok(())
}
