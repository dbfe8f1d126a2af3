//! The store's pool of SQLite connections, and the count that lets the last
//! handle close them all before its drop returns.
//!
//! r2d2 opens connections on its own worker threads. A connection being opened there keeps the whole pool
//! alive past the handle's drop, and with it the file: the `-wal` file, whose
//! old frames may hold deleted text, stayed up to tens of milliseconds after
//! the drop returned, and a process reopening the file raced it. So every
//! connection is counted, and [`Pool::closing`] gives the handle a guard that
//! refuses new connections and waits, bounded, for the count to reach zero.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::error::{DatabaseError, Error, Result};
use crate::store::options::{StoreOptions, Synchronous};

/// How long the last handle waits for the pool's connections to close: an
/// open under way takes milliseconds; this only bounds a connection held
/// somewhere it should not be.
const CLOSE_BOUND: Duration = Duration::from_secs(10);

/// The store's connection pool: r2d2's pool and the count of its connections.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: r2d2::Pool<Manager>,
    open: Arc<OpenConnections>,
}

/// A connection taken from the pool.
pub(crate) type Pooled = r2d2::PooledConnection<Manager>;

impl Pool {
    /// A connection, waiting for one up to the pool's timeout.
    pub(crate) fn get(&self) -> std::result::Result<Pooled, r2d2::Error> {
        self.inner.get()
    }

    /// The guard the handle drops last ([`ClosesConnections`]).
    pub(crate) fn closing(&self, path: &Path) -> ClosesConnections {
        ClosesConnections {
            open: Arc::clone(&self.open),
            path: path.to_path_buf(),
        }
    }
}

/// Build the pool over the file at `path`: each connection opens `target`
/// (the path, or a read-only URI) with `flags`, then takes the settings.
pub(crate) fn build(path: &Path, (target, flags): (PathBuf, OpenFlags), opts: &StoreOptions) -> Result<Pool> {
    let open = Arc::new(OpenConnections::default());
    let manager = Manager {
        target,
        flags,
        opts: opts.clone(),
        open: Arc::clone(&open),
    };
    let inner = r2d2::Pool::builder()
        // One connection is the writer's for the handle's life (`tx.rs`); at
        // least two stay for reads and the checkpointer.
        .max_size(opts.pool_size.max(3))
        // Opened when asked for, none ahead: a one-shot command (a search)
        // asks for two, and a kept idle one meant an open after each
        // checkout, ~30 % of a search that finds nothing.
        .min_idle(Some(0))
        // A pooled SQLite connection does not go stale; checking it costs a statement per use.
        .test_on_check_out(false)
        .connection_timeout(Duration::from_secs(30))
        .build(manager)
        .map_err(|source| Error::Pool {
            path: path.to_path_buf(),
            source: DatabaseError::pool(source),
        })?;
    Ok(Pool { inner, open })
}

/// r2d2's connection manager for the store's SQLite file: open with the
/// access's flags, then the per-connection settings (`configure_raw`).
///
/// Ours rather than `r2d2_sqlite`'s: that crate pins one rusqlite minor
/// version per release, which would decide the rusqlite an embedder can
/// use next to leasehold (issue 27). A pooled connection is never checked
/// with a statement (`test_on_check_out(false)`) and never goes stale.
pub(crate) struct Manager {
    /// The path, or a `file:` URI for a read-only open.
    target: PathBuf,
    flags: OpenFlags,
    opts: StoreOptions,
    open: Arc<OpenConnections>,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Counted;
    type Error = rusqlite::Error;

    fn connect(&self) -> rusqlite::Result<Counted> {
        // Counted before the open, so the last handle waits for an open under way.
        let seat = self.open.seat().ok_or_else(closed)?;
        let conn = Connection::open_with_flags(&self.target, self.flags)?;
        configure_raw(&conn, &self.opts)?;
        Ok(Counted { conn, _seat: seat })
    }

    fn is_valid(&self, conn: &mut Counted) -> rusqlite::Result<()> {
        conn.execute_batch("")
    }

    /// A connection still inside a transaction is not given to the next
    /// user: its reads would keep an old snapshot of the file (WAL) and its
    /// next `BEGIN` would fail. Every user ends its transactions (`tx.rs`,
    /// the snippets' savepoint); this only keeps a slip from spreading.
    fn has_broken(&self, conn: &mut Counted) -> bool {
        !conn.is_autocommit()
    }
}

/// Per-connection settings, in the order DESIGN §8 asks: busy_timeout first.
/// For the opening connection (`open.rs`) and every pooled one.
pub(super) fn configure_raw(conn: &Connection, opts: &StoreOptions) -> rusqlite::Result<()> {
    let sync = match opts.synchronous {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    conn.busy_timeout(opts.busy_timeout)?;
    // One plan per statement, whatever its parameters hold. Without it
    // SQLite marks a parameter the planner may look at (a LIMIT's, the key
    // of `max(seq)` over a history prefix) and prepares the statement again
    // at every new binding, and rusqlite clears a cached statement's
    // bindings: every history line was compiled twice. A rerun with changed
    // documents took 0.86-0.97 x the time with it (DESIGN §7). The plans
    // are the ones the plan tests EXPLAIN.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "synchronous", sync)?;
    // Checkpoints run on the store's background thread, off the hot path.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    // Each pooled connection has its own page cache; SQLite's default (2 MiB)
    // times the pool is most of a run's memory on a large store. 512 KiB still
    // holds every interior page a claim or a fenced write touches.
    conn.pragma_update(None, "cache_size", -512)?;
    // Deleted rows (a delivered outbox row holds a document's whole text) are
    // overwritten with zeros rather than left readable in free pages.
    conn.pragma_update(None, "secure_delete", opts.secure_delete)?;
    // The writes, reads and the batch statements of a few sizes (see
    // `write::padded`) outnumber rusqlite's default of 16 cached statements;
    // an evicted one is prepared again on its next use.
    conn.set_prepared_statement_cache_capacity(64);
    // The rank a search orders by (`search_rank.rs`).
    super::search_rank::register(conn)?;
    Ok(())
}

/// The error an open gets once the last handle is closing the pool; r2d2
/// only keeps it as the last start error of a pool nobody holds.
fn closed() -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISUSE),
        Some("the store is closing".into()),
    )
}

/// A pooled connection and its place in the count. The connection is
/// declared first, so it is closed before its seat is given back.
pub(crate) struct Counted {
    conn: Connection,
    _seat: Seat,
}

impl Deref for Counted {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for Counted {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

/// How many of the pool's connections are open, and whether new ones are
/// still allowed.
#[derive(Default)]
struct OpenConnections {
    state: Mutex<Count>,
    all_closed: Condvar,
}

#[derive(Default)]
struct Count {
    open: usize,
    closing: bool,
}

impl OpenConnections {
    fn lock(&self) -> MutexGuard<'_, Count> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for one more connection; `None` once the pool is closing.
    fn seat(self: &Arc<Self>) -> Option<Seat> {
        let mut count = self.lock();
        if count.closing {
            return None;
        }
        count.open += 1;
        Some(Seat(Arc::clone(self)))
    }

    /// Refuse new connections, then wait until none is open or `bound` has
    /// passed; true if none is open.
    fn close_all(&self, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        let mut count = self.lock();
        count.closing = true;
        while count.open > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            count = match self.all_closed.wait_timeout(count, left) {
                Ok((c, _)) => c,
                Err(e) => e.into_inner().0,
            };
        }
        true
    }
}

/// One open connection's place in [`OpenConnections`].
struct Seat(Arc<OpenConnections>);

impl Drop for Seat {
    fn drop(&mut self) {
        let mut count = self.0.lock();
        count.open -= 1;
        if count.open == 0 {
            self.0.all_closed.notify_all();
        }
    }
}

/// Dropped as the store handle's last field, after the pool and every clone
/// of it the handle held: waits until each connection is closed, so that
/// when the drop returns the file is as the last close left it (WAL
/// checkpointed and removed, locks released).
pub(crate) struct ClosesConnections {
    open: Arc<OpenConnections>,
    path: PathBuf,
}

impl Drop for ClosesConnections {
    fn drop(&mut self) {
        if !self.open.close_all(CLOSE_BOUND) {
            tracing::warn!(
                db = %self.path.display(),
                "a connection to the store was still open {} s after its last handle was dropped",
                CLOSE_BOUND.as_secs()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cached statement whose parameters the planner could look at (a
    /// LIMIT, the job of a history line's `max(seq)`) is not compiled again
    /// when it is used again with new values.
    #[test]
    fn a_cached_statement_is_not_prepared_again_for_new_parameters() {
        let reprepared = |configured: bool| {
            let conn = Connection::open_in_memory().unwrap();
            if configured {
                configure_raw(&conn, &StoreOptions::default()).unwrap();
            }
            statements_prepared_again(&conn)
        };
        // The SQLite built in does prepare them again on a plain
        // connection, so the settings are what keeps them (a system
        // library may be older than that behaviour).
        if cfg!(feature = "bundled") {
            let plain = reprepared(false);
            assert!(plain.iter().all(|n| *n > 0), "{plain:?}");
        }
        assert_eq!(reprepared(true), [0, 0]);
    }

    /// How many times each of two statements whose parameters the planner
    /// could look at was prepared again over three uses with new values.
    fn statements_prepared_again(conn: &Connection) -> Vec<i32> {
        conn.execute_batch(
            "CREATE TABLE h (job INTEGER, seq INTEGER, PRIMARY KEY (job, seq));
             INSERT INTO h VALUES (1, 1), (1, 2), (2, 1), (3, 1);",
        )
        .unwrap();
        [
            "SELECT seq FROM h WHERE job >= ?1 ORDER BY job LIMIT ?2",
            "SELECT coalesce(max(seq), 0) + 1 FROM h WHERE job = ?1",
        ]
        .iter()
        .map(|sql| {
            for n in 1..=3_i64 {
                let mut stmt = conn.prepare_cached(sql).unwrap();
                let values = std::iter::repeat_n(n, stmt.parameter_count());
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(values), |_| Ok(()))
                    .unwrap()
                    .count();
                assert!(rows > 0, "{sql}");
            }
            conn.prepare_cached(sql)
                .unwrap()
                .get_status(rusqlite::StatementStatus::RePrepare)
        })
        .collect()
    }

    /// The count waits for a seat given back on another thread, and refuses
    /// new seats once closing.
    #[test]
    fn closing_waits_for_the_last_seat_and_refuses_new_ones() {
        let open = Arc::new(OpenConnections::default());
        let seat = open.seat().unwrap();
        let closer = {
            let open = Arc::clone(&open);
            std::thread::spawn(move || open.close_all(Duration::from_secs(60)))
        };
        // Give the seat back only once the closer is waiting (or about to);
        // the deadline only bounds a closer that never starts.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !open.lock().closing {
            assert!(Instant::now() < deadline, "the closer never started");
            std::thread::yield_now();
        }
        assert!(open.seat().is_none(), "a seat was given while closing");
        drop(seat);
        assert!(closer.join().unwrap());
    }

    /// A connection handed back inside a transaction is not lent again: the
    /// next one out of the pool is in autocommit.
    #[test]
    fn a_connection_given_back_inside_a_transaction_is_not_lent_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool.db");
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let pool = build(&path, (path.clone(), flags), &StoreOptions::default()).unwrap();
        {
            let c = pool.get().unwrap();
            c.execute_batch("BEGIN; CREATE TABLE t (x); INSERT INTO t VALUES (1)")
                .unwrap();
            assert!(!c.is_autocommit());
        }
        for _ in 0..3 {
            let c = pool.get().unwrap();
            assert!(c.is_autocommit(), "a connection left in a transaction was lent");
        }
    }

    #[test]
    fn closing_gives_up_after_its_bound() {
        let open = Arc::new(OpenConnections::default());
        let _seat = open.seat().unwrap();
        assert!(!open.close_all(Duration::from_millis(1)));
    }
}
