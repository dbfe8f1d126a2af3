//! leasehold: claim documents from a SQLite queue under time-limited leases,
//! extract them on a worker pool, mirror the results, and refuse every late write
//! from a worker that lost its lease.
//!
//! # Layout
//! - [`clock`]: the injected time source (`SystemClock`, `ManualClock`).
//! - [`job`]: ids, states, claims and fenced outcomes: the vocabulary.
//! - [`store`]: the jobs table; the only module that writes SQL.
//! - [`error`]: the one error type.
//!
//! The contract these keep is `DESIGN.md` (states, fencing, mirror, credential).

pub mod clock;
pub mod error;
pub mod extract;
pub mod job;
pub mod lease;
pub mod mirror;
pub mod source;
pub mod store;
pub mod worker;

pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use error::{Error, Result};
pub use job::{Claim, Counts, Enqueued, Fenced, HistoryEntry, Job, JobId, LiveLease, Rejection, Status};
pub use store::{Backoff, NewDoc, Store, StoreOptions, Synchronous};
