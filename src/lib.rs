//! leasehold: claim documents from a SQLite queue under time-limited leases,
//! extract them on a worker pool, mirror the results, and refuse every late write
//! from a worker that lost its lease.
//!
//! # Layout
//! One module per part of the design contract (`DESIGN.md` §2):
//! - [`clock`]: the injected time source (`SystemClock`, `ManualClock`).
//! - [`job`]: ids, states, claims and fenced outcomes: the vocabulary.
//! - [`store`]: the jobs table; the only module that writes SQL.
//! - [`lease`]: running a stage under a lease (heartbeat, loss flag).
//! - [`mirror`]: the results directory: generation paths, atomic writes, locked cleanup.
//! - [`source`]: where bytes come from (a local directory).
//! - [`extract`]: how text is extracted (text, Markdown, HTML, PDF, DOCX).
//! - [`worker`]: the pool: claim → fetch → extract → mirror → complete → cleanup.
//! - [`error`]: the one error type.
//! - [`secret`]: passwords that never print.
//! - [`config`]: the TOML file: accounts, HTTP source and sink, auth, notify, outbox.
//! - [`upstream`]: the HTTP API client (source and sink) and how its answers are read.
//! - [`auth`]: the auth gate at run time, the HTTP source and the sink's outbox drain.
//! - [`notify`]: sending notices (command, webhook, log line).
//! - [`fault`]: crash points on the result path, armed only by crash tests.
//!
//! The binary (`src/main.rs`, `src/cli/`) turns flags into these parts.

pub mod auth;
pub mod clock;
pub mod config;
pub mod error;
pub mod extract;
pub mod fault;
pub mod job;
pub mod lease;
pub mod mirror;
pub mod notify;
pub mod secret;
pub mod source;
pub mod store;
pub mod upstream;
pub mod worker;

pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use error::{Error, Result};
pub use job::{Claim, Counts, Enqueued, Fenced, HistoryEntry, Job, JobId, LiveLease, Rejection, Status};
pub use store::{Backoff, NewDoc, Store, StoreOptions, Synchronous};

/// The README's examples compile and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
