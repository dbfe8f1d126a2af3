//! How a store behaves: the options an embedding program sets, and the part of
//! them the write SQL needs.

use std::sync::Arc;
use std::time::Duration;

use super::outbox::OutboxCap;
use super::search::{Stemming, Tokenizer};
use crate::clock::{duration_ms, Clock, Millis, SystemClock};
use crate::error::{Error, Result};

/// `synchronous` pragma: NORMAL (durable across process crashes; a power loss
/// may lose the last commits) or FULL (every commit waits for an fsync).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Durable across process crashes, not power loss; one fsync per checkpoint
    /// rather than per commit. The default.
    #[default]
    Normal,
    /// Every commit is on disk before it returns.
    Full,
}

/// Retry delay after a failure: exponential from `base`, capped at `max`, with up
/// to `jitter` (0..1) of it taken off at random so that a burst of failures does
/// not come back as a burst.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The delay after the first failure; doubles with each further attempt.
    pub base: Duration,
    /// The longest delay, however many attempts have failed.
    pub max: Duration,
    /// The largest fraction of the delay taken off at random, from 0 (none) to 1.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(2),
            max: Duration::from_secs(600),
            jitter: 0.25,
        }
    }
}

impl Backoff {
    /// The delay before retry number `attempts` (1 = after the first failure).
    pub fn delay_ms(&self, attempts: i64) -> Millis {
        let exp = attempts.clamp(1, 40) - 1;
        let raw = duration_ms(self.base).saturating_mul(1i64 << exp.min(40));
        let capped = raw.min(duration_ms(self.max)).max(0);
        let jitter = self.jitter.clamp(0.0, 1.0);
        let off = (capped as f64 * jitter * fastrand::f64()) as i64;
        (capped - off).max(0)
    }
}

/// How a store behaves. Build with `StoreOptions::default()` and the setters.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How long a claim owns a document without renewing.
    pub lease: Duration,
    /// Attempts a document may spend before it is declared dead. A claim spends
    /// one; handing it back or losing its lease (see
    /// [`StoreOptions::max_lost_leases`]) refunds it, so in effect this counts
    /// failures.
    pub max_attempts: u32,
    /// Leases of one document that may expire and be taken over (its worker died
    /// or stalled) before it is declared dead. Kept apart from, and larger than,
    /// [`StoreOptions::max_attempts`]: killed workers must not make a healthy
    /// document dead, yet a document that kills every worker that takes it (an
    /// in-process extractor crash) must end.
    pub max_lost_leases: u32,
    /// How long a failed document waits before it may be claimed again.
    pub backoff: Backoff,
    /// How durable a commit is (the `synchronous` pragma).
    pub synchronous: Synchronous,
    /// Pooled connections: SQLite keeps one for its writes, the rest serve
    /// reads and the checkpointer (at least 3 in all).
    pub pool_size: u32,
    /// How long one statement waits for the write lock before SQLite says BUSY.
    pub busy_timeout: Duration,
    /// How often the background thread checkpoints the WAL; `None` disables it.
    pub checkpoint_every: Option<Duration>,
    /// Where "now" comes from.
    pub clock: Arc<dyn Clock>,
    /// The cap of the outbox of results waiting for a sink.
    pub outbox: OutboxCap,
    /// PostgreSQL only: how far after this process's "now" a lease may have
    /// been granted before it counts as granted after now (the clock went
    /// back, so the lease is over). Processes, and machines, read their
    /// clocks at different moments: a claim that read a later time can commit
    /// while another transaction that read an earlier one runs, and clocks of
    /// machines differ a little. Set it above the largest clock difference
    /// between the processes plus a transaction's length; a clock that goes
    /// back by more is still caught. SQLite needs none: it reads now under
    /// its write lock, so grants are ordered. Default 1 s.
    pub clock_skew: Duration,
    /// Create the database (a new SQLite file, leasehold's tables in an empty
    /// PostgreSQL database) when there is none. Off for commands that only
    /// look at a store (`status`, `doctor`): a mistyped location must not
    /// leave an empty store behind. An older schema is migrated either way.
    pub create: bool,
    /// Overwrite deleted rows with zeros (SQLite's `secure_delete`), so that a
    /// delivered outbox row's text does not stay readable in free pages. On
    /// by default; turn it off only for a store that holds nothing private.
    pub secure_delete: bool,
    /// The search index's tokenizer for a store created now (recorded in
    /// the data directory). `None` keeps what the store has (the default,
    /// [`Tokenizer::Unicode61`], for a new one). Asking an existing store
    /// for another tokenizer than its index was made with is refused unless
    /// the index is empty: changing it means rebuilding the index
    /// (`leasehold reindex --tokenizer`).
    pub tokenizer: Option<Tokenizer>,
    /// Whether a query's words also find their other forms, recorded in the
    /// data directory when the store is opened for writing. `None` keeps
    /// what the store records ([`Stemming::English`] when it records
    /// nothing). Changed at any time: the index does not depend on it.
    pub stemming: Option<Stemming>,
    /// Make each accepted text searchable in the completion's transaction.
    /// On by default; off only to measure what indexing costs (an accepted
    /// result then takes the previous text out and puts none in, so such
    /// documents are not searchable until `leasehold reindex`).
    pub search_index: bool,
    /// How long one search may run before it is stopped
    /// ([`crate::Store::search`]); a broad query on a large index is
    /// refused with a message instead of running on. Default 10 s.
    pub search_timeout: Duration,
    /// Open the SQLite file for reading only (a backup, a mounted snapshot,
    /// a read-only medium): nothing is created, migrated or checkpointed,
    /// and every write fails with [`Error::ReadOnly`]. SQLite's `mode=ro`
    /// shares the `-wal` and `-shm` files with writers when it can; where
    /// they can be neither found nor made, the file is opened `immutable`
    /// ([`crate::Store::access`] says which), which reads the main file
    /// alone. The file must carry this build's schema (an older one cannot
    /// be migrated without writing). Off by default; ignored on PostgreSQL.
    pub read_only: bool,
    /// How long `gc` keeps history lines ([`crate::Store::prune_history`]).
    /// Older lines are removed, except each document's last one: `inspect`
    /// still says how a document came to be where it is, and the next line's
    /// number, which follows the last, is never reused. Default 30 days.
    pub history_keep: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            lease: Duration::from_secs(30),
            max_attempts: 5,
            max_lost_leases: 20,
            backoff: Backoff::default(),
            synchronous: Synchronous::Normal,
            pool_size: 8,
            busy_timeout: Duration::from_secs(5),
            checkpoint_every: Some(Duration::from_millis(250)),
            clock: Arc::new(SystemClock),
            outbox: OutboxCap {
                max_age_ms: 24 * 3600 * 1000,
                max_bytes: 256 * 1024 * 1024,
            },
            clock_skew: Duration::from_secs(1),
            create: true,
            secure_delete: true,
            tokenizer: None,
            stemming: None,
            search_index: true,
            search_timeout: Duration::from_secs(10),
            read_only: false,
            history_keep: Duration::from_secs(30 * 24 * 60 * 60),
        }
    }
}

impl StoreOptions {
    /// Sets [`StoreOptions::lease`]; must be longer than zero.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }
    /// Sets [`StoreOptions::max_attempts`]; must be at least 1.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }
    /// Sets [`StoreOptions::max_lost_leases`]; must be at least 1.
    pub fn max_lost_leases(mut self, n: u32) -> Self {
        self.max_lost_leases = n;
        self
    }
    /// Sets [`StoreOptions::backoff`]; its jitter must be between 0 and 1.
    pub fn backoff(mut self, b: Backoff) -> Self {
        self.backoff = b;
        self
    }
    /// Sets [`StoreOptions::synchronous`].
    pub fn synchronous(mut self, s: Synchronous) -> Self {
        self.synchronous = s;
        self
    }
    /// Sets [`StoreOptions::pool_size`].
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }
    /// Sets [`StoreOptions::clock`]; tests pass a [`crate::ManualClock`] so no
    /// test sleeps for a lease to expire.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// Sets [`StoreOptions::checkpoint_every`]; `None` stops the background
    /// checkpoints (SQLite's own autocheckpoint stays off).
    pub fn checkpoint_every(mut self, every: Option<Duration>) -> Self {
        self.checkpoint_every = every;
        self
    }
    /// The outbox's cap (age and bytes).
    pub fn outbox(mut self, cap: OutboxCap) -> Self {
        self.outbox = cap;
        self
    }

    /// Sets [`StoreOptions::clock_skew`] (PostgreSQL only).
    pub fn clock_skew(mut self, skew: Duration) -> Self {
        self.clock_skew = skew;
        self
    }

    /// Sets [`StoreOptions::create`].
    pub fn create_if_missing(mut self, on: bool) -> Self {
        self.create = on;
        self
    }

    /// Sets [`StoreOptions::secure_delete`].
    pub fn secure_delete(mut self, on: bool) -> Self {
        self.secure_delete = on;
        self
    }

    /// Sets [`StoreOptions::tokenizer`].
    pub fn tokenizer(mut self, tokenizer: Tokenizer) -> Self {
        self.tokenizer = Some(tokenizer);
        self
    }

    /// Sets [`StoreOptions::stemming`].
    pub fn stemming(mut self, stemming: Stemming) -> Self {
        self.stemming = Some(stemming);
        self
    }

    /// Sets [`StoreOptions::search_index`].
    pub fn search_index(mut self, on: bool) -> Self {
        self.search_index = on;
        self
    }

    /// Sets [`StoreOptions::search_timeout`]; must be longer than zero.
    pub fn search_timeout(mut self, limit: Duration) -> Self {
        self.search_timeout = limit;
        self
    }

    /// Sets [`StoreOptions::read_only`].
    pub fn read_only(mut self, on: bool) -> Self {
        self.read_only = on;
        self
    }

    /// Sets [`StoreOptions::history_keep`]; must be longer than zero.
    pub fn history_keep(mut self, keep: Duration) -> Self {
        self.history_keep = keep;
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        if self.lease.is_zero() {
            return Err(invalid("lease", "must be longer than zero"));
        }
        if self.max_attempts == 0 {
            return Err(invalid("max_attempts", "must be at least 1"));
        }
        if self.max_lost_leases == 0 {
            return Err(invalid("max_lost_leases", "must be at least 1"));
        }
        if self.history_keep.is_zero() {
            return Err(invalid("history_keep", "must be longer than zero"));
        }
        if self.search_timeout.is_zero() {
            return Err(invalid("search_timeout", "must be longer than zero"));
        }
        if !(0.0..=1.0).contains(&self.backoff.jitter) {
            return Err(invalid("backoff jitter", "must be between 0 and 1"));
        }
        Ok(())
    }
}

fn invalid(what: &'static str, reason: &str) -> Error {
    Error::InvalidInput {
        what,
        reason: reason.into(),
    }
}

/// The parts of the options the write SQL needs.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub lease_ms: Millis,
    pub max_lost_leases: i64,
    pub backoff: Backoff,
    pub outbox: OutboxCap,
    /// [`StoreOptions::clock_skew`] in ms (PostgreSQL only).
    // PostgreSQL only (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub clock_skew_ms: Millis,
    /// [`StoreOptions::search_index`].
    pub search_index: bool,
}

impl Policy {
    pub(crate) fn of(opts: &StoreOptions) -> Policy {
        Policy {
            lease_ms: duration_ms(opts.lease).max(1),
            max_lost_leases: i64::from(opts.max_lost_leases),
            backoff: opts.backoff,
            outbox: opts.outbox,
            clock_skew_ms: duration_ms(opts.clock_skew),
            search_index: opts.search_index,
        }
    }
}
