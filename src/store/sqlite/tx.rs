//! The write transaction: group commit within a process, fair turns between
//! processes, `BEGIN IMMEDIATE`, and bounded retries after BUSY (DESIGN §8).

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};

use super::holder;
use super::pool::Pooled;
use super::write;
use super::write_waits;
use super::Sqlite;
use crate::clock::Millis;
use crate::error::{is_retryable, Error, Result};
use crate::store::fencing::{WriteOp, WriteOut};

/// Bounded retries of a whole transaction after BUSY/LOCKED (beyond busy_timeout).
const BUSY_RETRIES: u32 = 10;

impl Sqlite {
    pub(crate) fn submit(&self, op: WriteOp) -> Result<WriteOut> {
        self.group.submit(op, |ops| self.commit_batch(ops))
    }

    /// Commit a group-commit batch: all in one transaction; if that fails for a
    /// reason other than contention, each op alone, so one bad op fails alone.
    fn commit_batch(&self, ops: &[&WriteOp]) -> Vec<Result<WriteOut>> {
        let policy = &self.policy;
        let all: Result<Vec<WriteOut>> =
            self.write_tx(|tx, now| ops.iter().map(|op| write::apply(tx, now, policy, op)).collect());
        match all {
            Ok(outs) => outs.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) if ops.len() == 1 => vec![Err(e)],
            // Contention outlived the retries: replaying op by op would only
            // multiply the wait (and starve every heartbeat in the batch).
            Err(Error::Busy {
                path,
                attempts,
                holder,
            }) => ops
                .iter()
                .map(|_| {
                    Err(Error::Busy {
                        path: path.clone(),
                        attempts,
                        holder: holder.clone(),
                    })
                })
                .collect(),
            Err(_) => ops
                .iter()
                .map(|op| self.write_tx(|tx, now| write::apply(tx, now, policy, op)))
                .collect(),
        }
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction with `now` read after the
    /// write lock is held; retry the whole transaction a bounded number of
    /// times, with jitter, when SQLite says BUSY/LOCKED past busy_timeout.
    ///
    /// A stall of seconds is nearly always one process holding SQLite's write
    /// lock (stopped inside a transaction, say): the wait is then warned about
    /// on stderr, and the error after the last retry names that process.
    pub(crate) fn write_tx<T>(&self, f: impl FnMut(&Connection, Millis) -> rusqlite::Result<T>) -> Result<T> {
        self.write_tx_folding(false, f)
    }

    /// Fold this handle's write-lock waits into the store now, if it has any
    /// (see `write_waits.rs`); a write transaction of its own.
    pub(crate) fn fold_write_waits(&self) -> Result<()> {
        if self.waits.due(true).is_none() {
            return Ok(());
        }
        self.write_tx_folding(true, |_, _| Ok(()))
    }

    /// [`Sqlite::write_tx`], folding the pending write-lock waits into the
    /// store in the same transaction when they are due (`always`: whatever
    /// is pending).
    fn write_tx_folding<T>(
        &self,
        always: bool,
        mut f: impl FnMut(&Connection, Millis) -> rusqlite::Result<T>,
    ) -> Result<T> {
        if self.access != super::open::Access::ReadWrite {
            return Err(Error::ReadOnly {
                path: self.path.clone(),
                detail: "opened for reading only; nothing was written".into(),
            });
        }
        let asked = Instant::now();
        let _turn = self.turnstile.enter();
        // The turn already makes this handle's writers take turns; the lock
        // only lends the connection out.
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if writer.is_none() {
            *writer = Some(self.writer_conn()?);
        }
        let Some(conn) = writer.as_mut() else {
            return Err(Error::Internal("the writer connection vanished".into()));
        };
        let started = Instant::now();
        let mut waited = Some(asked);
        for attempt in 1..=BUSY_RETRIES {
            match self.try_write_tx(conn, (&mut waited, always), &mut f) {
                Ok(v) => return Ok(v),
                Err(e) if is_retryable(&e) => {
                    if started.elapsed() >= STALL_WARN_AFTER {
                        warn_stall(&self.path, started.elapsed());
                    }
                    backoff_sleep(attempt)
                }
                Err(e) => return Err(Error::from_sqlite(&self.path, e)),
            }
        }
        Err(Error::Busy {
            path: self.path.clone(),
            attempts: BUSY_RETRIES,
            holder: holder::sqlite_write_lock_holder(&self.path).map(|h| h.to_string()),
        })
    }

    /// One try: `BEGIN IMMEDIATE` (the wait since the write was asked for is
    /// counted the first time a try holds the lock, once per write however
    /// many tries it takes), the due waits folded, `f`, COMMIT.
    fn try_write_tx<T>(
        &self,
        conn: &mut Connection,
        (asked, always): (&mut Option<Instant>, bool),
        f: &mut impl FnMut(&Connection, Millis) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if let Some(asked) = asked.take() {
            self.waits.add(asked.elapsed());
        }
        let now = self.now();
        let folding = self.waits.due(always);
        let done = match &folding {
            Some(waits) => write_waits::fold(&tx, waits).and_then(|_| f(&tx, now)),
            None => f(&tx, now),
        };
        match done {
            // A failed COMMIT leaves the transaction open; dropping `tx` (inside
            // commit) issues the ROLLBACK.
            Ok(v) => {
                tx.commit()?;
                if let Some(waits) = &folding {
                    self.waits.folded(waits);
                }
                Ok(v)
            }
            Err(e) => {
                let _ = tx.rollback();
                Err(e)
            }
        }
    }

    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let conn = self.conn()?;
        f(&conn).map_err(|e| Error::from_sqlite(&self.path, e))
    }

    /// The connection this handle's write transactions run on, taken from
    /// the pool once and kept, with a page cache of [`WRITER_CACHE_KIB`].
    ///
    /// Why one: SQLite drops a connection's whole page cache when it finds
    /// that the database changed since its last transaction. Writes that
    /// took turns on any pooled connection therefore found a cold cache each
    /// time, and read back from the WAL every page the last write had just
    /// written; FTS5's merges made that dozens of `pread`s per document. On
    /// one connection, a write finds the pages of the writes before it
    /// (unless another process wrote in between).
    fn writer_conn(&self) -> Result<Pooled> {
        let conn = self.conn()?;
        conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)
            .map_err(|e| Error::from_sqlite(&self.path, e))?;
        Ok(conn)
    }

    pub(crate) fn conn(&self) -> Result<Pooled> {
        self.pool.get().map_err(|source| Error::Pool {
            path: self.path.clone(),
            source: crate::error::DatabaseError::pool(source),
        })
    }
}

/// Page cache of the writer connection, in KiB: room for the pages a run of
/// writes keeps touching (the b-trees' upper levels, the search index's
/// newest segments as FTS5 merges them). The other pooled connections keep
/// `open.rs`'s small cache.
const WRITER_CACHE_KIB: i64 = 16 * 1024;

/// How long writers wait on SQLite's lock before the wait is worth a warning.
const STALL_WARN_AFTER: Duration = Duration::from_secs(2);
/// At most one stall warning per this long, per process.
const STALL_WARN_EVERY: Duration = Duration::from_secs(10);

static LAST_STALL_WARNING: Mutex<Option<Instant>> = Mutex::new(None);

/// Say on stderr that writes to `db` stall, and who holds the write lock;
/// at most once per [`STALL_WARN_EVERY`], however many threads stall.
fn warn_stall(db: &Path, waited: Duration) {
    let mut last = LAST_STALL_WARNING.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < STALL_WARN_EVERY) {
        return;
    }
    *last = Some(now);
    let who = holder::sqlite_write_lock_holder(db)
        .map(|h| format!("held by {h}"))
        .unwrap_or_else(|| "holder not found".into());
    // Never a panic for a closed stderr: a stalled write is not a failure.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "leasehold: warning: {}: writes have waited {:.1} s for the database write lock ({who})",
        db.display(),
        waited.as_secs_f64()
    );
}

/// Sleep a little, growing and jittered, so that retrying processes spread out.
fn backoff_sleep(attempt: u32) {
    let cap = 2u64.saturating_pow(attempt.min(8)).min(200);
    std::thread::sleep(Duration::from_millis(1 + fastrand::u64(0..=cap)));
}
