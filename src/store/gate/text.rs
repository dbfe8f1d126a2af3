//! The gate's small rules: until when a rejection locks, whether a lock
//! notice is due, and the texts of the notices and history lines, so an
//! incident reads the same on SQLite and PostgreSQL.

use super::vocabulary::{Answer, GatePolicy};
use crate::clock::Millis;

/// Until when a rejection locks: what the upstream said, else one lock TTL;
/// always in the future.
pub(crate) fn lock_until(now: Millis, p: &GatePolicy, said: Option<Millis>) -> Millis {
    said.unwrap_or(now + p.lock_ttl).max(now + 1)
}

/// A lock notice (or reminder) at most once per `notify_every` per incident;
/// `last` is the account's `lock_notice_at`.
pub(crate) fn notice_due(last: Option<Millis>, now: Millis, p: &GatePolicy) -> bool {
    last.is_none_or(|at| now - at >= p.notify_every)
}

/// The answer's name in a `probe_stale` history line.
pub(crate) fn answer_name(a: &Answer) -> &'static str {
    match a {
        Answer::Accepted => "accepted",
        Answer::Rejected { .. } => "rejected",
        Answer::Transient => "transient",
        Answer::RateLimited { .. } => "rate limited",
    }
}

/// What a lock notice tells: the incident, until when, and why.
#[derive(Clone, Copy)]
pub(crate) struct Incident<'a> {
    pub epoch: i64,
    pub until: Millis,
    pub error: &'a str,
}

/// A notice's line and its figures (JSON).
pub(crate) struct NoticeText {
    pub kind: &'static str,
    pub message: String,
    pub details: serde_json::Value,
}

/// The lock notice of `account`; `what` says which kind of lock.
pub(crate) fn lock_notice(now: Millis, account: &str, incident: &Incident<'_>, what: &str) -> NoticeText {
    let Incident { epoch, until, error } = *incident;
    NoticeText {
        kind: "lock",
        message: format!(
            "account {account} {what}: {error}; nobody uses it for {} s",
            (until - now).max(0) / 1000
        ),
        details: serde_json::json!({ "epoch": epoch, "locked_until": until, "error": error }),
    }
}

/// The `what` of a lock notice for an account that locks while a shared-cause
/// notice is recent.
pub(crate) fn locked_too(locked: &[String]) -> String {
    format!(
        "locked too (likely the shared cause already reported; locked now: {})",
        locked.join(", ")
    )
}

/// The one notice for accounts locked together.
pub(crate) fn shared_cause_notice(p: &GatePolicy, locked: &[String]) -> NoticeText {
    NoticeText {
        kind: "shared_cause",
        message: format!(
            "accounts {} were all rejected within {} s: likely a shared cause; not failing over",
            locked.join(", "),
            p.lock_ttl / 1000
        ),
        details: serde_json::json!({ "accounts": locked }),
    }
}

/// How a lock ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recovery {
    /// A probe was accepted (it counts among the incident's probes).
    Probe,
    /// `auth unlock`.
    ByHand,
}

impl Recovery {
    pub(crate) fn text(self) -> &'static str {
        match self {
            Recovery::Probe => "probe succeeded",
            Recovery::ByHand => "unlocked by hand",
        }
    }
}

/// The figures a recovery notice tells.
pub(crate) struct Outage {
    pub epoch: i64,
    /// The incident's `locked_at`.
    pub locked_at: Option<Millis>,
    /// Probes of the incident before this recovery.
    pub probes: i64,
    /// Results waiting in the outbox now.
    pub held: i64,
    /// The outbox's drop counter now, and when the incident began.
    pub dropped: (i64, i64),
}

/// The recovery notice of `account`.
pub(crate) fn recovery_notice(now: Millis, account: &str, how: Recovery, o: &Outage) -> NoticeText {
    let probes = o.probes + i64::from(how == Recovery::Probe);
    let outage = now - o.locked_at.unwrap_or(now);
    let dropped = o.dropped.0 - o.dropped.1;
    let (held, how) = (o.held, how.text());
    NoticeText {
        kind: "recovery",
        message: format!(
            "account {account} works again ({how}) after {} s; {probes} probe(s); \
             {held} result(s) held in the outbox, {dropped} dropped",
            outage / 1000
        ),
        details: serde_json::json!({
            "epoch": o.epoch, "outage_ms": outage, "probes": probes,
            "held": held, "dropped": dropped,
        }),
    }
}

/// The day (days since 1970-01-01) of `now`.
pub(crate) fn day_of(now: Millis) -> i64 {
    now.div_euclid(86_400_000)
}

/// The expiry warning of `account` with `left` days to go.
pub(crate) fn expiry_notice(account: &str, left: i64, expires_on: i64) -> NoticeText {
    let message = if left > 0 {
        format!("account {account} expires in {left} day(s)")
    } else if left == 0 {
        format!("account {account} expires today")
    } else {
        format!("account {account} expired {} day(s) ago", -left)
    };
    NoticeText {
        kind: "expiry",
        message,
        details: serde_json::json!({ "days_left": left, "expires_on_day": expires_on }),
    }
}

/// The account a pool member picks: the first of the lowest key (locked,
/// live holders, position); `None` for no candidates.
pub(crate) fn best_of(keys: impl IntoIterator<Item = (bool, i64, usize)>) -> Option<usize> {
    keys.into_iter().min().map(|(_, _, i)| i)
}
