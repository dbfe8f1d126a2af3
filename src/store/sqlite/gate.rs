//! The auth gate's rows on SQLite (the rules are in `store/gate/`). A write
//! transaction here is `BEGIN IMMEDIATE` under the single writer, so every
//! decision already runs alone: nothing to lock beyond it.

use rusqlite::{params, OptionalExtension};

use super::rows::Rows;
use crate::clock::Millis;
use crate::store::gate::text::{Incident, NoticeText};
use crate::store::gate::{AccountRow, AccountState, GateEvent, GateReads, GateRows, GateState};

/// Accounts locked within the last `lock_ttl` and still locked (`?1` is
/// now - lock_ttl).
const RECENTLY_LOCKED: &str = "state = 'locked' AND locked_at >= ?1";

impl GateRows for Rows<'_> {
    fn serialize_rejections(&mut self) -> rusqlite::Result<()> {
        Ok(())
    }

    fn ensure_accounts(&mut self, now: Millis, accounts: &[&str]) -> rusqlite::Result<()> {
        for a in accounts {
            self.0.execute(
                "INSERT INTO accounts (name, updated_at) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
                params![a, now],
            )?;
        }
        Ok(())
    }

    fn account_for_update(&mut self, now: Millis, account: &str) -> rusqlite::Result<AccountRow> {
        self.ensure_accounts(now, &[account])?;
        self.0.query_row(
            "SELECT state = 'locked', epoch, locked_until, locked_at, probe_token, probe_until, probes,
                    lock_notice_at, dropped_at_lock, paced_until
             FROM accounts WHERE name = ?1",
            [account],
            |r| {
                Ok(AccountRow {
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

    fn set_probe_slot(
        &mut self,
        now: Millis,
        account: &str,
        slot: Option<(&str, Millis)>,
    ) -> rusqlite::Result<()> {
        let (token, until) = slot.unzip();
        self.0.execute(
            "UPDATE accounts SET probe_token = ?2, probe_until = ?3, updated_at = ?4 WHERE name = ?1",
            params![account, token, until, now],
        )?;
        Ok(())
    }

    fn raise_pace(&mut self, account: &str, until: Millis) -> rusqlite::Result<()> {
        self.0.execute(
            "UPDATE accounts SET paced_until = max(coalesce(paced_until, 0), ?2) WHERE name = ?1",
            params![account, until],
        )?;
        Ok(())
    }

    fn start_lock(
        &mut self,
        now: Millis,
        account: &str,
        i: &Incident<'_>,
        dropped: i64,
    ) -> rusqlite::Result<()> {
        self.0.execute(
            "UPDATE accounts SET state = 'locked', epoch = ?2, locked_until = ?3, locked_at = ?4,
                    probe_token = NULL, probe_until = NULL, probes = 0, last_error = ?5,
                    dropped_at_lock = ?6, updated_at = ?4
             WHERE name = ?1",
            params![account, i.epoch, i.until, now, i.error, dropped],
        )?;
        Ok(())
    }

    fn prolong_lock(
        &mut self,
        now: Millis,
        account: &str,
        until: Millis,
        error: &str,
    ) -> rusqlite::Result<()> {
        self.0.execute(
            "UPDATE accounts SET locked_until = ?2, probe_token = NULL, probe_until = NULL,
                    probes = probes + 1, last_error = ?3, updated_at = ?4
             WHERE name = ?1",
            params![account, until, error, now],
        )?;
        Ok(())
    }

    fn reopen(&mut self, now: Millis, account: &str) -> rusqlite::Result<()> {
        self.0.execute(
            "UPDATE accounts SET state = 'open', locked_until = NULL, locked_at = NULL,
                    probe_token = NULL, probe_until = NULL, probes = 0, lock_notice_at = NULL,
                    updated_at = ?2
             WHERE name = ?1",
            params![account, now],
        )?;
        Ok(())
    }

    fn mark_told(&mut self, now: Millis, account: &str) -> rusqlite::Result<()> {
        self.0.execute(
            "UPDATE accounts SET lock_notice_at = ?2 WHERE name = ?1",
            params![account, now],
        )?;
        Ok(())
    }

    fn mark_told_since(&mut self, now: Millis, since: Millis) -> rusqlite::Result<()> {
        self.0.execute(
            &format!("UPDATE accounts SET lock_notice_at = ?2 WHERE {RECENTLY_LOCKED}"),
            params![since, now],
        )?;
        Ok(())
    }

    fn locked_since(&mut self, since: Millis) -> rusqlite::Result<Vec<String>> {
        let sql = format!("SELECT name FROM accounts WHERE {RECENTLY_LOCKED} ORDER BY name");
        let mut s = self.0.prepare_cached(&sql)?;
        let names = s.query_map([since], |r| r.get(0))?;
        names.collect()
    }

    fn meta(&mut self, name: &str) -> rusqlite::Result<Option<String>> {
        self.0
            .query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| r.get(0))
            .optional()
    }

    fn set_meta(&mut self, name: &str, value: &str) -> rusqlite::Result<()> {
        super::meta::meta_set(self.0, name, value)
    }

    fn outbox_figures(&mut self) -> rusqlite::Result<(i64, i64)> {
        self.0
            .query_row("SELECT rows, dropped FROM outbox_totals WHERE id = 1", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
    }

    fn wake_parked(&mut self, now: Millis, account: &str) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "UPDATE jobs SET retry_at = min(retry_at, ?1), parked_on = NULL
                 WHERE parked_on = ?2 AND status = 'retrying'",
            )?
            .execute(params![now, account])?;
        Ok(())
    }

    fn event(
        &mut self,
        now: Millis,
        account: &str,
        event: &str,
        epoch: i64,
        detail: Option<&str>,
    ) -> rusqlite::Result<()> {
        self.0.execute(
            "INSERT INTO auth_history (account, at, event, epoch, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![account, now, event, epoch, detail],
        )?;
        Ok(())
    }

    fn notice(&mut self, now: Millis, account: &str, n: &NoticeText) -> rusqlite::Result<()> {
        self.0.execute(
            "INSERT INTO notices (account, kind, message, details, created_at, next_try_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
            params![account, n.kind, n.message, n.details.to_string(), now],
        )?;
        Ok(())
    }

    fn mark_expiry_warned(&mut self, account: &str, today: i64) -> rusqlite::Result<bool> {
        let warned: Option<i64> = self.0.query_row(
            "SELECT expiry_warned FROM accounts WHERE name = ?1",
            [account],
            |r| r.get(0),
        )?;
        if warned == Some(today) {
            return Ok(false);
        }
        self.0.execute(
            "UPDATE accounts SET expiry_warned = ?2 WHERE name = ?1",
            params![account, today],
        )?;
        Ok(true)
    }

    fn live_hold(&mut self, now: Millis, holder: &str) -> rusqlite::Result<Option<String>> {
        self.0
            .query_row(
                "SELECT account FROM account_holders WHERE holder = ?1 AND expires_at > ?2",
                params![holder, now],
                |r| r.get(0),
            )
            .optional()
    }

    fn serialize_choices(&mut self) -> rusqlite::Result<bool> {
        Ok(false)
    }

    fn candidate_loads(
        &mut self,
        now: Millis,
        names: &[String],
    ) -> rusqlite::Result<Vec<(String, bool, i64)>> {
        let mut loads = Vec::with_capacity(names.len());
        for a in names {
            let (locked, holders): (bool, i64) = self.0.query_row(
                "SELECT state = 'locked',
                        (SELECT count(*) FROM account_holders WHERE account = ?1 AND expires_at > ?2)
                 FROM accounts WHERE name = ?1",
                params![a, now],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            loads.push((a.clone(), locked, holders));
        }
        Ok(loads)
    }

    fn set_hold(&mut self, holder: &str, account: &str, expires_at: Millis) -> rusqlite::Result<()> {
        self.0.execute(
            "INSERT INTO account_holders (holder, account, expires_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (holder) DO UPDATE SET account = excluded.account, expires_at = excluded.expires_at",
            params![holder, account, expires_at],
        )?;
        Ok(())
    }

    fn release_hold(&mut self, holder: &str) -> rusqlite::Result<()> {
        self.0
            .execute("DELETE FROM account_holders WHERE holder = ?1", [holder])?;
        Ok(())
    }
}

impl GateReads for Rows<'_> {
    fn account_timers(
        &mut self,
        account: &str,
    ) -> rusqlite::Result<Option<(Option<Millis>, Option<Millis>, Option<Millis>)>> {
        self.0
            .query_row(
                "SELECT locked_until, probe_until, paced_until FROM accounts WHERE name = ?1",
                [account],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
    }

    fn locks_run_out(&mut self, now: Millis) -> rusqlite::Result<Vec<String>> {
        let mut s = self.0.prepare_cached(
            "SELECT name FROM accounts
             WHERE state = 'locked' AND locked_until <= ?1 AND (probe_until IS NULL OR probe_until <= ?1)
             ORDER BY name",
        )?;
        let names = s.query_map([now], |r| r.get(0))?;
        names.collect()
    }

    fn events(&mut self, account: &str) -> rusqlite::Result<Vec<GateEvent>> {
        let mut s = self.0.prepare_cached(
            "SELECT at, event, epoch, detail FROM auth_history WHERE account = ?1 ORDER BY id",
        )?;
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

    fn accounts(&mut self, now: Millis) -> rusqlite::Result<Vec<AccountState>> {
        let mut s = self.0.prepare(
            "SELECT a.name, a.state = 'locked', a.locked_until, a.locked_at, a.epoch, a.probes, a.last_error,
                    a.probe_until,
                    (SELECT count(*) FROM account_holders h WHERE h.account = a.name AND h.expires_at > ?1)
             FROM accounts a ORDER BY a.name",
        )?;
        let rows = s.query_map([now], |r| {
            Ok(AccountState {
                name: r.get(0)?,
                state: GateState::of(r.get(1)?, r.get(7)?, now),
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
}
