//! What the gate's rules ask of an engine: narrow operations on the
//! `accounts`, `account_holders`, `auth_history` and `notices` rows, each in
//! the engine's own SQL, inside the transaction (or read) its driver opened.

use super::text::{Incident, NoticeText};
use super::vocabulary::{AccountState, GateEvent};
use crate::clock::Millis;
use crate::store::driver::Rows;

/// One account's row as the rules read it.
pub(crate) struct AccountRow {
    /// `state = 'locked'`: the account is in an incident.
    pub(crate) locked: bool,
    pub(crate) epoch: i64,
    pub(crate) locked_until: Option<Millis>,
    pub(crate) locked_at: Option<Millis>,
    pub(crate) probe_token: Option<String>,
    pub(crate) probe_until: Option<Millis>,
    pub(crate) probes: i64,
    pub(crate) lock_notice_at: Option<Millis>,
    pub(crate) dropped_at_lock: i64,
    pub(crate) paced_until: Option<Millis>,
}

/// The gate's row operations inside a write transaction.
pub(crate) trait GateRows: Rows {
    /// Make a rejection run alone among every account's rejections (the
    /// shared cause is a question about all accounts); taken before any
    /// account row. A no-op where the write transaction already runs alone.
    fn serialize_rejections(&mut self) -> Result<(), Self::Error>;
    /// Make sure the accounts have rows (open).
    fn ensure_accounts(&mut self, now: Millis, accounts: &[&str]) -> Result<(), Self::Error>;
    /// Make sure `account` has a row, then read it, locked until the
    /// transaction ends where the engine needs that.
    fn account_for_update(&mut self, now: Millis, account: &str) -> Result<AccountRow, Self::Error>;
    /// Give the probe slot to `slot` (token, until when), or free it with `None`.
    fn set_probe_slot(
        &mut self,
        now: Millis,
        account: &str,
        slot: Option<(&str, Millis)>,
    ) -> Result<(), Self::Error>;
    /// Raise `paced_until` to `until`; never lowers it.
    fn raise_pace(&mut self, account: &str, until: Millis) -> Result<(), Self::Error>;
    /// Set the columns of a new incident: locked, its epoch, until, error,
    /// the outbox's drop counter now; the probe slot and count cleared.
    fn start_lock(
        &mut self,
        now: Millis,
        account: &str,
        incident: &Incident<'_>,
        dropped: i64,
    ) -> Result<(), Self::Error>;
    /// Set a failed probe's columns: the new `locked_until` and error, the
    /// slot freed, one more probe counted.
    fn prolong_lock(
        &mut self,
        now: Millis,
        account: &str,
        until: Millis,
        error: &str,
    ) -> Result<(), Self::Error>;
    /// Set the columns of an open account (incident, slot, probes, notice time cleared).
    fn reopen(&mut self, now: Millis, account: &str) -> Result<(), Self::Error>;
    /// Set `lock_notice_at` of `account` to now.
    fn mark_told(&mut self, now: Millis, account: &str) -> Result<(), Self::Error>;
    /// Set `lock_notice_at` to now on every account locked at or after `since` and still locked.
    fn mark_told_since(&mut self, now: Millis, since: Millis) -> Result<(), Self::Error>;
    /// The names of the accounts locked at or after `since` and still locked, in byte order.
    fn locked_since(&mut self, since: Millis) -> Result<Vec<String>, Self::Error>;
    /// The `meta` row `name`'s value.
    fn meta(&mut self, name: &str) -> Result<Option<String>, Self::Error>;
    /// Set the `meta` row `name` to `value`.
    fn set_meta(&mut self, name: &str, value: &str) -> Result<(), Self::Error>;
    /// The outbox totals' waiting rows and drop counter.
    fn outbox_figures(&mut self) -> Result<(i64, i64), Self::Error>;
    /// Let the retrying documents parked on `account` go now.
    fn wake_parked(&mut self, now: Millis, account: &str) -> Result<(), Self::Error>;
    /// Insert a history line.
    fn event(
        &mut self,
        now: Millis,
        account: &str,
        event: &str,
        epoch: i64,
        detail: Option<&str>,
    ) -> Result<(), Self::Error>;
    /// Insert a notice, due now; it is sent after the commit.
    fn notice(&mut self, now: Millis, account: &str, n: &NoticeText) -> Result<(), Self::Error>;
    /// Set `expiry_warned` to `today` unless it already is; whether it changed
    /// (of transactions doing this together, exactly one sees `true`).
    fn mark_expiry_warned(&mut self, account: &str, today: i64) -> Result<bool, Self::Error>;
    /// The account `holder`'s hold names, if the hold is live.
    fn live_hold(&mut self, now: Millis, holder: &str) -> Result<Option<String>, Self::Error>;
    /// Make a pool choice run alone among every holder's choices; whether
    /// that may have waited for another's (then the holder's hold is read
    /// again). `false`, without waiting, where the transaction runs alone.
    fn serialize_choices(&mut self) -> Result<bool, Self::Error>;
    /// For each of `names` that has a row: its name, whether it is locked,
    /// and its live holders.
    fn candidate_loads(
        &mut self,
        now: Millis,
        names: &[String],
    ) -> Result<Vec<(String, bool, i64)>, Self::Error>;
    /// Insert or replace `holder`'s hold.
    fn set_hold(&mut self, holder: &str, account: &str, expires_at: Millis) -> Result<(), Self::Error>;
    /// Delete `holder`'s hold.
    fn release_hold(&mut self, holder: &str) -> Result<(), Self::Error>;
}

/// The gate's row reads, on a read connection.
pub(crate) trait GateReads: Rows {
    /// `account`'s `locked_until`, `probe_until` and `paced_until`, if it has a row.
    #[allow(clippy::type_complexity)]
    fn account_timers(
        &mut self,
        account: &str,
    ) -> Result<Option<(Option<Millis>, Option<Millis>, Option<Millis>)>, Self::Error>;
    /// The names of the locked accounts whose lock and probe slot ran out by `now`, in byte order.
    fn locks_run_out(&mut self, now: Millis) -> Result<Vec<String>, Self::Error>;
    /// `account`'s history lines, oldest first.
    fn events(&mut self, account: &str) -> Result<Vec<GateEvent>, Self::Error>;
    /// Every account's state (by [`super::GateState::of`]) with its live holders, by name.
    fn accounts(&mut self, now: Millis) -> Result<Vec<AccountState>, Self::Error>;
}
