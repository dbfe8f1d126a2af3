//! The auth gate's rows on PostgreSQL (DESIGN §6); the rules, the same for
//! both engines, are in `store/gate/`.
//!
//! SQLite's gate is safe because its single writer runs each decision alone.
//! Here READ COMMITTED transactions of many machines run at once, so every
//! decision takes the lock that makes it alone:
//! - the account's row (`FOR NO KEY UPDATE`, taken right after the row is
//!   made sure to exist, in `account_for_update`): admit, report, unlock and
//!   the probe slot read and change an account only under it, so exactly one
//!   transaction grants the slot after the lock ran out, a lock notice is due
//!   at most once per `notify_every`, and a probe answer meets the epoch and
//!   token it was granted with. `NO KEY` because the pool's holder rows
//!   reference the account (their foreign-key check takes `KEY SHARE`, which
//!   this lock does not block);
//! - [`GATE_LOCK`] (advisory, per transaction, `serialize_rejections`) for
//!   every rejection: whether other accounts locked recently (the shared
//!   cause) is a question about every account at once, and two accounts
//!   rejected at the same moment would otherwise each see only itself
//!   locked, and nobody would say "shared cause". It is taken before the
//!   account's row, always, so two rejections never wait for each other in
//!   a circle;
//! - [`POOL_LOCK`] (advisory, `serialize_choices`) while a holder chooses an
//!   account, so two processes choosing together do not both count the
//!   other's choice as absent and crowd onto one account;
//! - the expiry warning is one conditional UPDATE of the day warned (the
//!   newest row version is re-checked), so one process per day writes it.
//!
//! Every notice is written in the transaction of the change it announces.

use ::postgres::Client;

use super::conn::Sql;
use super::conn::Tx;
use crate::clock::Millis;
use crate::store::gate::text::{Incident, NoticeText};
use crate::store::gate::{AccountRow, AccountState, GateEvent, GateReads, GateRows, GateState};

/// Serialises the rejections of all accounts (see the module's docs):
/// "leasgate" in ASCII.
const GATE_LOCK: i64 = 0x6c65_6173_6761_7465;

/// Serialises the pool's choices of an account: "leaspool" in ASCII.
const POOL_LOCK: i64 = 0x6c65_6173_706f_6f6c;

/// Accounts locked within the last `lock_ttl` and still locked ($1 is now -
/// lock_ttl).
const RECENTLY_LOCKED: &str = "state = 'locked' AND locked_at >= $1";

impl GateRows for Tx<'_> {
    fn serialize_rejections(&mut self) -> Sql<()> {
        self.execute("SELECT pg_advisory_xact_lock($1)", &[&GATE_LOCK])?;
        Ok(())
    }

    /// In name order, so two transactions making the same new accounts never
    /// wait for each other in a circle.
    fn ensure_accounts(&mut self, now: Millis, accounts: &[&str]) -> Sql<()> {
        self.execute(
            "INSERT INTO accounts (name, updated_at)
             SELECT name, $2 FROM unnest($1::TEXT[]) AS a (name) ORDER BY name
             ON CONFLICT (name) DO NOTHING",
            &[&accounts, &now],
        )?;
        Ok(())
    }

    fn account_for_update(&mut self, now: Millis, account: &str) -> Sql<AccountRow> {
        self.ensure_accounts(now, &[account])?;
        let r = self.query_one(
            "SELECT state = 'locked', epoch, locked_until, locked_at, probe_token, probe_until, probes,
                    lock_notice_at, dropped_at_lock, paced_until
             FROM accounts WHERE name = $1 FOR NO KEY UPDATE",
            &[&account],
        )?;
        Ok(AccountRow {
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

    fn set_probe_slot(&mut self, now: Millis, account: &str, slot: Option<(&str, Millis)>) -> Sql<()> {
        let (token, until) = slot.unzip();
        self.execute(
            "UPDATE accounts SET probe_token = $2, probe_until = $3, updated_at = $4 WHERE name = $1",
            &[&account, &token, &until, &now],
        )?;
        Ok(())
    }

    fn raise_pace(&mut self, account: &str, until: Millis) -> Sql<()> {
        self.execute(
            "UPDATE accounts SET paced_until = GREATEST(coalesce(paced_until, 0), $2) WHERE name = $1",
            &[&account, &until],
        )?;
        Ok(())
    }

    fn start_lock(&mut self, now: Millis, account: &str, i: &Incident<'_>, dropped: i64) -> Sql<()> {
        self.execute(
            "UPDATE accounts SET state = 'locked', epoch = $2, locked_until = $3, locked_at = $4,
                    probe_token = NULL, probe_until = NULL, probes = 0, last_error = $5,
                    dropped_at_lock = $6, updated_at = $4
             WHERE name = $1",
            &[&account, &i.epoch, &i.until, &now, &i.error, &dropped],
        )?;
        Ok(())
    }

    fn prolong_lock(&mut self, now: Millis, account: &str, until: Millis, error: &str) -> Sql<()> {
        self.execute(
            "UPDATE accounts SET locked_until = $2, probe_token = NULL, probe_until = NULL,
                    probes = probes + 1, last_error = $3, updated_at = $4
             WHERE name = $1",
            &[&account, &until, &error, &now],
        )?;
        Ok(())
    }

    fn reopen(&mut self, now: Millis, account: &str) -> Sql<()> {
        self.execute(
            "UPDATE accounts SET state = 'open', locked_until = NULL, locked_at = NULL,
                    probe_token = NULL, probe_until = NULL, probes = 0, lock_notice_at = NULL,
                    updated_at = $2
             WHERE name = $1",
            &[&account, &now],
        )?;
        Ok(())
    }

    fn mark_told(&mut self, now: Millis, account: &str) -> Sql<()> {
        self.execute(
            "UPDATE accounts SET lock_notice_at = $2 WHERE name = $1",
            &[&account, &now],
        )?;
        Ok(())
    }

    fn mark_told_since(&mut self, now: Millis, since: Millis) -> Sql<()> {
        self.execute(
            &format!("UPDATE accounts SET lock_notice_at = $2 WHERE {RECENTLY_LOCKED}"),
            &[&since, &now],
        )?;
        Ok(())
    }

    fn locked_since(&mut self, since: Millis) -> Sql<Vec<String>> {
        let sql = format!("SELECT name FROM accounts WHERE {RECENTLY_LOCKED} ORDER BY name COLLATE \"C\"");
        let rows = self.query(&sql, &[&since])?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    fn meta(&mut self, name: &str) -> Sql<Option<String>> {
        self.query_opt("SELECT value FROM meta WHERE name = $1", &[&name])?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(Into::into)
    }

    fn set_meta(&mut self, name: &str, value: &str) -> Sql<()> {
        super::queue::meta_set(self, name, value)
    }

    fn outbox_figures(&mut self) -> Sql<(i64, i64)> {
        let r = self.query_one("SELECT rows, dropped FROM outbox_totals WHERE id = 1", &[])?;
        Ok((r.try_get(0)?, r.try_get(1)?))
    }

    /// LEAST ignores a NULL where SQLite's min() returns it; a retrying row
    /// always has its retry_at, so both wake the same rows at the same time.
    fn wake_parked(&mut self, now: Millis, account: &str) -> Sql<()> {
        self.execute(
            "UPDATE jobs SET retry_at = LEAST(retry_at, $1), parked_on = NULL
             WHERE parked_on = $2 AND status = 'retrying'",
            &[&now, &account],
        )?;
        Ok(())
    }

    fn event(
        &mut self,
        now: Millis,
        account: &str,
        event: &str,
        epoch: i64,
        detail: Option<&str>,
    ) -> Sql<()> {
        self.execute(
            "INSERT INTO auth_history (account, at, event, epoch, detail) VALUES ($1, $2, $3, $4, $5)",
            &[&account, &now, &event, &epoch, &detail],
        )?;
        Ok(())
    }

    fn notice(&mut self, now: Millis, account: &str, n: &NoticeText) -> Sql<()> {
        self.execute(
            "INSERT INTO notices (account, kind, message, details, created_at, next_try_at)
             VALUES ($1, $2, $3, $4, $5, $5)",
            &[&account, &n.kind, &n.message, &n.details.to_string(), &now],
        )?;
        Ok(())
    }

    /// One conditional UPDATE (the newest row version is re-checked), so of
    /// processes warning together exactly one changes it.
    fn mark_expiry_warned(&mut self, account: &str, today: i64) -> Sql<bool> {
        let changed = self.execute(
            "UPDATE accounts SET expiry_warned = $2 WHERE name = $1 AND expiry_warned IS DISTINCT FROM $2",
            &[&account, &today],
        )?;
        Ok(changed == 1)
    }

    fn live_hold(&mut self, now: Millis, holder: &str) -> Sql<Option<String>> {
        self.query_opt(
            "SELECT account FROM account_holders WHERE holder = $1 AND expires_at > $2",
            &[&holder, &now],
        )?
        .map(|r| r.try_get(0))
        .transpose()
        .map_err(Into::into)
    }

    fn serialize_choices(&mut self) -> Sql<bool> {
        self.execute("SELECT pg_advisory_xact_lock($1)", &[&POOL_LOCK])?;
        Ok(true)
    }

    fn candidate_loads(&mut self, now: Millis, names: &[String]) -> Sql<Vec<(String, bool, i64)>> {
        let rows = self.query(
            "SELECT a.name, a.state = 'locked',
                    (SELECT count(*) FROM account_holders h WHERE h.account = a.name AND h.expires_at > $2)
             FROM accounts a WHERE a.name = ANY($1)",
            &[&names, &now],
        )?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect()
    }

    fn set_hold(&mut self, holder: &str, account: &str, expires_at: Millis) -> Sql<()> {
        self.execute(
            "INSERT INTO account_holders (holder, account, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (holder) DO UPDATE SET account = excluded.account, expires_at = excluded.expires_at",
            &[&holder, &account, &expires_at],
        )?;
        Ok(())
    }

    fn release_hold(&mut self, holder: &str) -> Sql<()> {
        self.execute("DELETE FROM account_holders WHERE holder = $1", &[&holder])?;
        Ok(())
    }
}

impl GateReads for Client {
    fn account_timers(
        &mut self,
        account: &str,
    ) -> Sql<Option<(Option<Millis>, Option<Millis>, Option<Millis>)>> {
        let row = self.query_opt(
            "SELECT locked_until, probe_until, paced_until FROM accounts WHERE name = $1",
            &[&account],
        )?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
    }

    fn locks_run_out(&mut self, now: Millis) -> Sql<Vec<String>> {
        let rows = self.query(
            "SELECT name FROM accounts
             WHERE state = 'locked' AND locked_until <= $1 AND (probe_until IS NULL OR probe_until <= $1)
             ORDER BY name COLLATE \"C\"",
            &[&now],
        )?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    fn events(&mut self, account: &str) -> Sql<Vec<GateEvent>> {
        let rows = self.query(
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

    fn accounts(&mut self, now: Millis) -> Sql<Vec<AccountState>> {
        let rows = self.query(
            "SELECT a.name, a.state = 'locked', a.locked_until, a.locked_at, a.epoch, a.probes, a.last_error,
                    a.probe_until,
                    (SELECT count(*) FROM account_holders h WHERE h.account = a.name AND h.expires_at > $1)
             FROM accounts a ORDER BY a.name COLLATE \"C\"",
            &[&now],
        )?;
        rows.iter()
            .map(|r| {
                Ok(AccountState {
                    name: r.try_get(0)?,
                    state: GateState::of(r.try_get(1)?, r.try_get(7)?, now),
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
}
