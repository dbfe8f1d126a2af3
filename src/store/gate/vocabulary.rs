//! The gate's vocabulary: its timings, what it answers a caller that asks to
//! call the upstream, what the caller reports back, and the states and
//! events `auth status` and the history show.

use crate::clock::Millis;

/// The gate's timings, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatePolicy {
    /// How long a rejection locks the account for every process.
    pub lock_ttl: Millis,
    /// How long the prober holds the probe slot before another process may take it.
    pub probe_ttl: Millis,
    /// The least time between two lock notices for one account (a recovery resets it).
    pub notify_every: Millis,
}

/// What a process may do with an account now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Open: make the request.
    Go,
    /// Locked (or someone else is probing): do not call the upstream before `until`.
    Wait {
        /// When the lock (or the other process's probe slot) runs out, in ms from the injected clock.
        until: Millis,
        /// Another process holds the probe slot: its answer may open the account sooner.
        probing: bool,
    },
    /// The lock ran out and this process holds the probe slot: make exactly one
    /// request and report its answer with this permit.
    Probe(ProbePermit),
    /// Open, but the upstream asked to slow down (429): not before `until`.
    Paced {
        /// The end of the pause the upstream asked for, in ms from the injected clock.
        until: Millis,
    },
}

/// The right to make the one probe request of an incident's round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePermit {
    /// The account being probed.
    pub account: String,
    /// The incident the probe belongs to; an answer for an older epoch changes nothing.
    pub epoch: i64,
    /// Names this holder of the probe slot, so an answer that arrives after the
    /// slot was taken over is recognised as stale.
    pub token: String,
}

/// What the upstream answered, as far as the gate cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The credential worked.
    Accepted,
    /// 401 or a lock answer; lock until `until` if the upstream said so.
    Rejected {
        /// What the upstream said, kept as the account's last error.
        error: String,
        /// The lock's end as the upstream gave it (ms from the injected clock);
        /// otherwise the policy's `lock_ttl` applies.
        until: Option<Millis>,
    },
    /// 5xx, timeout, connection error: says nothing about the credential.
    Transient,
    /// 429: nothing about the credential either, but every process holds off
    /// until `until`.
    RateLimited {
        /// When requests may resume (ms from the injected clock).
        until: Millis,
    },
}

/// What a report changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateChange {
    /// Nothing: the answer says nothing new (a success while open, a transient
    /// error, a rejection while already locked).
    Unchanged,
    /// The account is locked (a new incident, or a failed probe).
    Locked {
        /// The incident's number; +1 for each new incident of the account.
        epoch: i64,
        /// When the lock runs out (ms from the injected clock).
        until: Millis,
    },
    /// A probe succeeded: open for everyone.
    Recovered {
        /// The incident that ended.
        epoch: i64,
    },
    /// A probe answer from an old permit: ignored.
    Stale,
    /// A transient probe answer: the slot is free again, nothing counted.
    SlotFreed,
    /// A 429: everyone holds off until `until`.
    Paced {
        /// When requests may resume (ms from the injected clock).
        until: Millis,
    },
}

/// One line of the gate's history (locks, probes, recoveries, manual unlocks).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GateEvent {
    /// When it happened (ms from the injected clock).
    pub at: Millis,
    /// e.g. `locked`, `probe_granted`, `probe_failed`, `recovered`, `manual_unlock`.
    pub event: String,
    /// The incident it belongs to.
    pub epoch: i64,
    /// Free text: the upstream's error, the probe's holder, how it recovered...
    pub detail: Option<String>,
}

/// Where an account is in the gate's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GateState {
    /// Requests go.
    Open,
    /// Nobody calls the upstream with it until the lock runs out.
    Locked,
    /// Locked, and one process holds the probe slot.
    Probing,
}

impl GateState {
    /// The state of an account `locked` or not whose probe slot is held
    /// until `probe_until`, at `now`.
    pub(crate) fn of(locked: bool, probe_until: Option<Millis>, now: Millis) -> GateState {
        match (locked, probe_until.is_some_and(|u| u > now)) {
            (false, _) => GateState::Open,
            (true, false) => GateState::Locked,
            (true, true) => GateState::Probing,
        }
    }

    /// The name shown by `auth status`.
    pub fn as_str(self) -> &'static str {
        match self {
            GateState::Open => "open",
            GateState::Locked => "locked",
            GateState::Probing => "probing",
        }
    }
}

impl std::fmt::Display for GateState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One account's state, for `auth status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AccountState {
    /// The account's name from the configuration.
    pub name: String,
    /// Open, locked or probing.
    pub state: GateState,
    /// When the current lock runs out (ms from the injected clock); `None` while open.
    pub locked_until: Option<Millis>,
    /// When the current incident began; `None` while open.
    pub locked_at: Option<Millis>,
    /// The number of the latest incident (0 if the account was never locked).
    pub epoch: i64,
    /// Probes made in the current incident; reset on recovery.
    pub probes: i64,
    /// The latest rejection (the one that started or prolonged a lock); kept
    /// after a recovery.
    pub last_error: Option<String>,
    /// Gates (one per process) whose hold on this account has not run out: the
    /// load the account pool spreads.
    pub holders: i64,
}
