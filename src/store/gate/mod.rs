//! The auth gate's rules (DESIGN §6): one row per account, shared by every
//! process through the database; written once, over the row operations of
//! [`GateRows`] and [`GateReads`] that each engine's driver implements.
//!
//! Each rule runs inside the caller's write transaction, so a state change
//! and the notice announcing it commit together or not at all.
//! The rules, in order of a life:
//! - `open`: requests go;
//! - a rejection (401, a lock answer) while open locks the account for everyone,
//!   starts an incident (`epoch + 1`) and writes a lock notice, at most one per
//!   `notify_every` (a recovery resets that);
//! - while locked and before `locked_until`: nobody calls the upstream;
//! - after `locked_until`: one process takes the probe slot (set-if-absent with
//!   `probe_ttl`) and makes one request; the permit carries the epoch and a
//!   token, so a probe answer that arrives after its slot was taken over
//!   changes nothing;
//! - probe success: open for everyone and a recovery notice (outage, probes,
//!   results held and dropped); probe rejection: locked for another TTL;
//!   a transient probe answer frees the slot without counting.
//!
//! Every lock is told (a lock notice, or the shared-cause notice of a pool
//! whose accounts lock together; an account that locks after that notice gets
//! its own), and every recovery is told, by a probe or by `auth unlock`.
//! `probe_due` lists the locks that ran out with the slot free, so a
//! background courier can probe an account nobody is about to use.

mod incident;
mod pool;
mod read;
mod rows;
pub(crate) mod text;
mod vocabulary;

pub(crate) use incident::{admit, report, unlock};
pub(crate) use pool::{expiry, hold, unhold};
pub(crate) use read::{blocked_until, history, probe_due, states};
pub(crate) use rows::{AccountRow, GateReads, GateRows};
pub use vocabulary::{
    AccountState, Admission, Answer, GateChange, GateEvent, GatePolicy, GateState, ProbePermit,
};
