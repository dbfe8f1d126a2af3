//! The PostgreSQL engine (DESIGN §12): opening a database by URL, migrating
//! it from `schema.pg.sql`, pooling connections, and the store's operations
//! in PostgreSQL's SQL with the same rules as SQLite's.
//!
//! # Layout
//! - `mod.rs`: [`PgStore`], a handle on one migrated database and its pool.
//! - `url.rs`: parse the URL; the name it goes by in messages has no password.
//! - `migrate.rs`: the versioned sections, applied once each under an
//!   advisory lock.
//! - `conn.rs`: pooled connections that keep their prepared statements.
//! - `pooler.rs`: whether a pooler hands out server sessions per
//!   transaction (then nothing is kept in a session).
//! - `called.rs`: the statements that commit on their own as functions the
//!   database keeps, each planned once per server session.
//! - `tx.rs`: READ COMMITTED transactions with "now" from the injected clock,
//!   bounded retries after a serialization failure or a deadlock.
//! - `queue.rs`: the queue's rows (enqueue, requeue, scans, settings).
//! - `write.rs`: claim (`FOR UPDATE SKIP LOCKED`) and the fenced writes.
//! - `group.rs`: group commit: the claims and fenced writes of one moment in
//!   one transaction, each kind in one statement.
//! - `batch.rs`: a batch of claims and completions in one statement.
//! - `read.rs`: the reads and the checks `doctor` runs.
//! - `gate.rs`: the auth gate's rows (DESIGN §6) under row and advisory locks.
//! - `outbox.rs`: the rows of results waiting for the sink, and of notices.
//! - `fence.rs`: the document's row lock that fences mirror cleanup.
//! - `retention.rs`: the rows of `gc`'s history retention.
//! - `recover.rs`: what a statement whose answer was lost had done, found
//!   by the owner tokens it carried.
//! - `ops.rs`: the seam: [`crate::store`]'s `Engine` for [`PgStore`].
//! - `tls.rs`: TLS with libpq's `sslmode` meanings, through rustls.
//! - `clock.rs`, `search_index.rs`: the server's clock offset; the search
//!   index's statements.
//!
//! Callers use the store's facade, which opens a `PgStore` for a
//! `postgres://` location. The client is the synchronous `postgres` crate,
//! which keeps the thread-pool design; connections are TCP (TLS as the URL's
//! `sslmode` says, `prefer` by default) or a Unix socket.

mod batch;
mod called;
mod clock;
pub(crate) mod conn;
mod fence;
mod gate;
mod group;
mod migrate;
mod ops;
mod outbox;
mod pooler;
mod queue;
mod read;
mod recover;
mod retention;
pub(crate) mod search_index;
mod tls;
mod tx;
mod url;
mod write;

use std::sync::Arc;
use std::time::Duration;

use r2d2_postgres::PostgresConnectionManager;

use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::group::GroupCommit;
use crate::store::fencing::{WriteOp, WriteOut};
use crate::store::options::Policy;
use crate::store::options::StoreOptions;
use crate::store::search::Tokenizer;
pub use migrate::schema_version;
use url::Target;

/// The PostgreSQL edition searches with PostgreSQL's `simple` configuration
/// only (prefix terms make Korean particles findable, as on SQLite).
pub(crate) fn only_simple(tokenizer: Tokenizer) -> Result<()> {
    if tokenizer == Tokenizer::PgSimple {
        return Ok(());
    }
    Err(Error::NotOnPostgres {
        operation: "a tokenizer choice (the PostgreSQL edition searches with its 'simple' configuration)",
    })
}

/// Connection pool of a PostgreSQL store.
type Pool = r2d2::Pool<conn::Manager>;

/// A connection of the pool.
pub(crate) type Pooled = r2d2::PooledConnection<conn::Manager>;

/// Connections whose check may fail in a row before the caller is told: more
/// than the pool holds, so that after a server restart every dead one is
/// dropped and a new one made.
const CHECKS: u32 = 64;

/// Longest any statement waits for a row or advisory lock. Claims skip
/// locked rows and cleanups wait [`ROW_LOCK_WAIT`]; what else waits (a fenced
/// write behind a cleanup, a migration behind another) gives up here with
/// SQLSTATE 55P03 rather than waiting for a stopped process forever.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Longest a session may sit inside a transaction without a statement before
/// the server ends it and releases its locks: a process stopped (SIGSTOP, a
/// debugger) while holding a document's row cannot hold it longer. A cleanup
/// stops deleting well before ([`CLEANUP_DEADLINE`]).
pub const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(60);

/// Group-commit queues of one handle, each with at most one batch in
/// flight (`group.rs`). A caller takes the first idle lane, else its
/// thread's own. One lane keeps a single batch in flight, so threads wait on
/// each other's commits; since a batch of claims and completions is one
/// statement whose cost hardly grows with its size, the biggest batches win
/// (the lanes measured: docs/DESIGN.md, "PostgreSQL").
const LANES: usize = 1;

/// [`LANES`] empty queues, each gathering (`group.rs`): a new leader waits,
/// a batch's time at most, for as many callers as the last batch had.
fn lanes() -> Vec<GroupCommit<WriteOp, Result<WriteOut>>> {
    (0..LANES)
        .map(|_| GroupCommit::gathering(|reason| Err(Error::Internal(format!("group commit: {reason}")))))
        .collect()
}

/// Longest a cleanup waits for a document's row lock; the same bound as the
/// SQLite edition's wait for its `.lock` (`mirror::CLEANUP_LOCK_WAIT`).
pub const ROW_LOCK_WAIT: Duration = Duration::from_millis(100);

/// How long after the row lock was granted a cleanup may still delete: half
/// the time after which the server ends a session idle in its transaction
/// ([`IDLE_IN_TRANSACTION`]) and so releases the lock. A cleanup
/// stopped past it (SIGSTOP) must not resume deleting on a decision a new
/// claim may have overtaken.
pub const CLEANUP_DEADLINE: Duration = Duration::from_secs(30);

/// The time limits above as one statement: `set` is `SET` (run once on
/// every new connection that keeps its server session) or `SET LOCAL` (run
/// by every transaction behind a pooler per transaction, where a session's
/// settings would stay with a server session other clients get next).
fn session_limits(set: &str) -> String {
    format!(
        "{set} lock_timeout = '{}ms'; {set} idle_in_transaction_session_timeout = '{}ms'",
        LOCK_WAIT.as_millis(),
        IDLE_IN_TRANSACTION.as_millis()
    )
}

/// [`session_limits`] for one transaction: for a transaction begun on a
/// pooled connection's client itself, which [`conn::Conn::transaction`]
/// does not see (a migration between stores).
pub(crate) fn local_limits() -> String {
    session_limits("SET LOCAL")
}

/// Applies [`session_limits`] to each connection the pool makes that keeps
/// its server session.
#[derive(Debug)]
struct SessionLimits;

impl r2d2::CustomizeConnection<conn::Conn, ::postgres::Error> for SessionLimits {
    fn on_acquire(&self, conn: &mut conn::Conn) -> std::result::Result<(), ::postgres::Error> {
        match conn.pooling() {
            pooler::Pooling::PerConnection => conn.batch_execute(&session_limits("SET")),
            pooler::Pooling::PerTransaction => Ok(()),
        }
    }
}

/// How long a caller waits for a free pooled connection, as on SQLite.
const POOL_WAIT: Duration = Duration::from_secs(30);

/// A handle on one PostgreSQL database with leasehold's schema. Cheap to clone.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The URL without its password: what every error names.
    label: String,
    pool: Pool,
    /// The options it was opened with: the clock every "now" comes from.
    opts: StoreOptions,
    /// The part of the options the SQL needs.
    policy: Policy,
    /// Claims and fenced writes of this process waiting to share a
    /// transaction, in [`LANES`] lanes.
    group: Vec<GroupCommit<WriteOp, Result<WriteOut>>>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("url", &self.inner.label).finish()
    }
}

impl PgStore {
    /// Open the database at `url` (`postgres://user:password@host:port/db`,
    /// or a `key=value` connection string), apply the sections of
    /// `schema.pg.sql` it lacks, and pool connections to it
    /// ([`StoreOptions::pool_size`]; the clock, lease, attempts and backoff
    /// are the operations', as on SQLite; the SQLite-file settings are not used).
    ///
    /// One connection is made first and migrates, so a wrong address or
    /// password fails at once rather than after the pool's wait.
    ///
    /// # Failure
    /// [`Error::InvalidInput`] for a URL that does not parse,
    /// [`Error::PostgresConnect`] when the server cannot be reached or
    /// refuses the login, [`Error::SchemaTooNew`] when a newer leasehold
    /// migrated the database, [`Error::Postgres`] when a section fails.
    /// No error's text holds the password.
    pub fn open(url: &str, opts: StoreOptions) -> Result<PgStore> {
        opts.validate()?;
        let target = Target::parse(url)?;
        let tls = target.tls.connector(&target.label)?;
        let mut client = connect(&target, &tls)?;
        let pooling = {
            let mut second = connect(&target, &tls)?;
            pooler::probe(&mut client, &mut second, &target.label)?
        };
        if pooling == pooler::Pooling::PerConnection {
            client
                .batch_execute(&session_limits("SET"))
                .map_err(|source| Error::Postgres {
                    url: target.label.clone(),
                    source: crate::error::DatabaseError::postgres(source),
                })?;
        }
        if !opts.create && !migrate::has_schema(&mut client, &target.label)? {
            return Err(Error::NoStore { name: target.label });
        }
        migrate::migrate(&mut client, &target.label)?;
        drop(client);
        let pool = build_pool(&target, tls, &opts, pooling)?;
        let policy = Policy::of(&opts);
        Ok(PgStore {
            inner: Arc::new(Inner {
                label: target.label,
                pool,
                opts,
                policy,
                group: lanes(),
            }),
        })
    }

    /// The database's URL without its password.
    pub fn url(&self) -> &str {
        &self.inner.label
    }

    /// The schema version applied to the database, read back through the pool.
    pub fn applied_version(&self) -> Result<i64> {
        let mut client = self.connection()?;
        migrate::applied_version(&mut client, &self.inner.label)
    }

    /// Now, from the injected clock (never the server's `now()`).
    pub(crate) fn now(&self) -> Millis {
        self.inner.opts.clock.now_ms()
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    pub(crate) fn max_attempts(&self) -> i64 {
        i64::from(self.inner.opts.max_attempts)
    }

    /// A connection of the pool (with its prepared statements), checked
    /// with an empty query; also for `store::migrate`, which runs
    /// whole-database transactions of its own.
    pub(crate) fn connection(&self) -> Result<Pooled> {
        self.checked(false)
    }

    /// A connection that answered moments ago, unchecked, or else a checked
    /// one: only for callers that start again on another when it turns out
    /// dead (`conn.rs`).
    pub(crate) fn trusted_connection(&self) -> Result<Pooled> {
        self.checked(true)
    }

    /// A connection that passed its check (or, when `trust`, was trusted);
    /// one that fails is dropped and the next one tried.
    fn checked(&self, trust: bool) -> Result<Pooled> {
        let mut tries = 0;
        loop {
            let mut c = self.inner.pool.get().map_err(|source| Error::PostgresPool {
                url: self.inner.label.clone(),
                source: crate::error::DatabaseError::pool(source),
            })?;
            if trust && c.trusted() {
                return Ok(c);
            }
            match c.check() {
                Ok(()) => return Ok(c),
                Err(source) if tries >= CHECKS => {
                    return Err(Error::Postgres {
                        url: self.inner.label.clone(),
                        source: crate::error::DatabaseError::postgres(source),
                    })
                }
                Err(_) => tries += 1,
            }
        }
    }
}

/// One connection to `target`, its failure explained where TLS is why.
fn connect(target: &Target, tls: &tls::Connector) -> Result<::postgres::Client> {
    target
        .config
        .connect(tls.clone())
        .map_err(|source| Error::PostgresConnect {
            url: target.label.clone(),
            source: match tls::hint(&source) {
                Some(hint) => crate::error::DatabaseError::postgres_explained(source, hint),
                None => crate::error::DatabaseError::postgres(source),
            },
        })
}

/// The pool. Its own check on checkout is off: [`PgStore::connection`]
/// checks, and skips the check for the callers that can start again
/// (`conn.rs`).
fn build_pool(
    target: &Target,
    tls: tls::Connector,
    opts: &StoreOptions,
    pooling: pooler::Pooling,
) -> Result<Pool> {
    let manager = PostgresConnectionManager::new(target.config.clone(), tls);
    r2d2::Pool::builder()
        .max_size(opts.pool_size.max(2))
        .min_idle(Some(1))
        .connection_timeout(POOL_WAIT)
        .test_on_check_out(false)
        .connection_customizer(Box::new(SessionLimits))
        .build(conn::Manager(manager, pooler::SharedPooling::new(pooling)))
        .map_err(|source| Error::PostgresPool {
            url: target.label.clone(),
            source: crate::error::DatabaseError::pool(source),
        })
}
