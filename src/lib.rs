//! leasehold: claim documents from a SQLite queue under time-limited leases,
//! extract their text on a worker pool, mirror the results, and refuse every late
//! write from a worker that lost its lease.
//!
//! # Layout
//! One room per part of the design (`docs/DESIGN.md`); arrows only point down:
//! `pipeline`, `upstream`, `watch` → `source`, `extract`, `mirror` → `store` →
//! `job`, `clock`, `error`. The formats live in the `leasehold-extract` crate and
//! the command line in `leasehold-cli`; `upstream` and `config` come with the
//! feature `http`, `watch` with the feature `watch`.
//!
//! | room | holds the rule of |
//! |---|---|
//! | [`job`] | the vocabulary: ids, states and their transitions, claims, fenced outcomes |
//! | [`clock`] | injected time: no test sleeps for a lease to expire |
//! | [`store`] | the jobs table and everything else in SQLite; the only code that writes SQL: claims, fencing, history, the gate's state, the outbox |
//! | [`mirror`] | the results directory: generation paths, atomic writes, locked cleanup |
//! | [`source`] | where bytes come from: the [`source::Source`] trait and a local directory |
//! | [`extract`] | what the pipeline asks of an extractor and hears back: the [`extract::Extractor`] trait, [`extract::ExtractError`] (whose fault a failure was), [`extract::Limits`] |
//! | [`pipeline`] | the worker pool: claim → fetch → extract → mirror → complete → cleanup, under the lease |
//! | `watch` | keeping the store current with a directory: notifications → coalesced paths → discovery; rescans where there are none |
//! | `upstream` | the HTTP API and its shared credential: client, gate, HTTP source, sink, courier, notices |
//! | `config` | the configuration file: accounts, HTTP source and sink, auth, notify, outbox |
//! | [`error`] | the one error type, with SQLite's codes mapped to what they mean |
//! | [`secret`] | passwords that never print |
//! | `service`, `process` | one start/stop shape for background threads; commands run on a leash (own process group, bounded wait) |
//! | `digest` | SHA-256 of a stream, the checksum of results and sources |
//! | `group` | leader–follower group commit: concurrent callers share one transaction (store) or one round of fsyncs (mirror) |
//!
//! # Embedding
//! [`Store`] is the queue; [`pipeline::WorkerPool`] runs the whole pipeline over
//! a [`pipeline::Pipeline`] of a [`source::Source`], an [`extract::Extractor`]
//! and a [`mirror::Mirror`]. `examples/` has a program for each way.

#![warn(missing_docs)]

pub mod clock;
#[cfg(feature = "http")]
pub mod config;
mod digest;
pub mod error;
pub mod extract;
pub mod job;
pub mod mirror;
pub mod pipeline;
/// The platform seam: Linux fast paths and their portable fallbacks, shared
/// with the sibling crates; not part of the API.
#[doc(hidden)]
pub mod portable;
pub mod secret;
/// Sizes as people write them: the configuration's, and search's `size>`.
mod size;
pub mod source;
pub mod store;
#[cfg(feature = "http")]
pub mod upstream;
#[cfg(feature = "watch")]
pub mod watch;

/// Crash points and injected faults for the project's own tests, shared with
/// the sibling crates; inert unless a test arms them. Not part of the API.
#[doc(hidden)]
pub mod fault;
/// Support shared with the command-line crate; not part of the API.
#[doc(hidden)]
pub mod fs_kind;
pub(crate) mod group;
/// Commands on a leash, shared with the command-line and extraction crates; not part of the API.
#[doc(hidden)]
pub mod process;
pub(crate) mod service;

pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use error::{DatabaseError, Error, Result};
pub use job::{
    Claim, Counts, Enqueued, Fenced, HistoryEntry, Job, JobFilter, JobId, LiveLease, Owner, Rejection, Status,
};
pub use store::{
    Backoff, Completion, CompletionText, Hit, KnownSource, NewDoc, QuerySyntax, Search, SearchPage, Snippet,
    Stemming, Store, StoreOptions, Synchronous, Tokenizer, Vanished,
};

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
    /// PostgreSQL's one-statement batch, on operations a test chooses.
    #[cfg(feature = "postgres")]
    pub use crate::store::pg_batch;

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
