//! leasehold: claim documents from a SQLite queue under time-limited leases,
//! extract their text on a worker pool, mirror the results, and refuse every late
//! write from a worker that lost its lease.
//!
//! # Layout
//! One room per part of the design (`docs/DESIGN.md`); arrows only point down:
//! `cli` → `pipeline`, `upstream`, `watch` → `source`, `extract`, `mirror` → `store` →
//! `job`, `clock`, `error`.
//!
//! | room | holds the rule of |
//! |---|---|
//! | [`job`] | the vocabulary: ids, states and their transitions, claims, fenced outcomes |
//! | [`clock`] | injected time: no test sleeps for a lease to expire |
//! | [`store`] | the jobs table and everything else in SQLite; the only code that writes SQL: claims, fencing, history, the gate's state, the outbox |
//! | [`mirror`] | the results directory: generation paths, atomic writes, locked cleanup |
//! | [`source`] | where bytes come from: the [`source::Source`] trait and a local directory |
//! | [`extract`] | how text is extracted, by format, in supervised child processes under limits; external converters |
//! | [`pipeline`] | the worker pool: claim → fetch → extract → mirror → complete → cleanup, under the lease |
//! | [`watch`] | keeping the store current with a directory: notifications → coalesced paths → discovery; rescans where there are none |
//! | [`upstream`] | the HTTP API and its shared credential: client, gate, HTTP source, sink, courier, notices |
//! | [`config`] | the configuration file: accounts, HTTP source and sink, auth, notify, outbox |
//! | [`error`] | the one error type, with SQLite's codes mapped to what they mean |
//! | [`secret`] | passwords that never print |
//! | `service`, `process` | one start/stop shape for background threads; commands run on a leash (own process group, bounded wait) |
//! | `group` | leader–follower group commit: concurrent callers share one transaction (store) or one round of fsyncs (mirror) |
//! | `cli` | the command-line tool: flags → validated parts → one call per command; the log subscriber, `metrics` and the HTML report (the library emits `tracing` events, the CLI decides where they go) |
//!
//! # Embedding
//! [`Store`] is the queue; [`pipeline::WorkerPool`] runs the whole pipeline over
//! a [`pipeline::Pipeline`] of a [`source::Source`], an [`extract::Extractor`]
//! and a [`mirror::Mirror`]. `examples/` has a program for each way.

#![warn(missing_docs)]

pub mod clock;
pub mod config;
pub mod error;
pub mod extract;
pub mod job;
pub mod mirror;
pub mod pipeline;
pub mod secret;
pub mod source;
pub mod store;
pub mod upstream;
pub mod watch;

#[doc(hidden)]
pub mod cli;
pub(crate) mod fault;
pub(crate) mod fs_kind;
pub(crate) mod group;
pub(crate) mod process;
pub(crate) mod service;

pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use error::{DatabaseError, Error, Result};
pub use job::{
    Claim, Counts, Enqueued, Fenced, HistoryEntry, Job, JobId, LiveLease, Owner, Rejection, Status,
};
pub use store::{Backoff, Completion, Hit, NewDoc, Store, StoreOptions, Synchronous, Tokenizer};

/// Hooks for the project's own tests (crash points, injected mirror faults, the
/// claim queries whose plans a test checks). Not part of the API: inert unless
/// a test arms them.
#[doc(hidden)]
pub mod testing {
    pub use crate::fault::{
        CrashPoint, StopPoint, CHILD_FAULT_ENV, CHILD_FAULT_MARKER, CRASH_AFTER_N_ENV, CRASH_AT_ENV,
        CRASH_EXIT_CODE, STOP_AFTER_N_ENV, STOP_AT_ENV,
    };
    pub use crate::mirror::Fault;
    pub use crate::store::claim_candidate_queries;

    /// A second handle on the same claim, for tests that play a worker who
    /// kept a stale copy (the store must refuse its writes; the type system
    /// otherwise keeps a finished claim from being used again).
    pub fn dup(c: &crate::Claim) -> crate::Claim {
        crate::Claim {
            id: c.id,
            key: c.key.clone(),
            version: c.version.clone(),
            token: c.token.clone(),
            fence: c.fence,
            attempts: c.attempts,
            lease_expires_at: c.lease_expires_at,
            took_over: c.took_over,
        }
    }
}

/// The README's examples compile and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
