//! PostgreSQL transactions: READ COMMITTED, "now" from the injected clock,
//! and bounded retries of a whole transaction after a serialization failure
//! or a deadlock.
//!
//! READ COMMITTED is enough because no decision rests on a snapshot alone:
//! every write is a conditional UPDATE that repeats its guard (a concurrent
//! change that commits first is re-checked against the newest row version
//! before the UPDATE touches it), and every read that a decision rests on
//! takes the row's lock first (`FOR UPDATE`, or `SKIP LOCKED` for claims).
//! Each module's docs say which lock guards what.

use std::time::Duration;

use ::postgres::error::SqlState;
use ::postgres::Client;

use super::conn::{first_value, Conn, Fail, Sql, Tx};
use super::pooler::Pooling;

use super::{PgStore, Pooled};
use crate::clock::Millis;
use crate::error::{Error, Result};

/// Tries of one transaction when the server answers with a serialization
/// failure or a deadlock (it rolled the transaction back; trying again is
/// safe). Bounded: contention that outlives them is an error, not a hang.
const RETRIES: u32 = 10;

/// Connections tried for one transaction whose BEGIN fails (nothing of it
/// ran), or one claim or read whose connection failed: after a server
/// restart every pooled connection is dead, and the first use of each finds
/// out and starts again on a checked one (see `conn.rs`).
const FRESH_CONNECTIONS: u32 = 4;

/// Where a transaction failed: at its BEGIN (nothing ran: safe to run again
/// on another connection), or after.
enum Step<T> {
    Begin(::postgres::Error),
    Run(Fail),
    /// The connection went while COMMIT waited for its answer: the
    /// transaction (its id) may have committed, with this outcome.
    CommitLost(::postgres::Error, String, T),
}

/// Whether a transaction's COMMIT whose answer is lost is looked up by its
/// transaction id ([`PgStore::write_tx_known`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Unknown,
    Known,
}

/// A transaction of [`PgStore::write_tx_known`] that did not end well.
pub(crate) struct Unsettled {
    pub(crate) error: Error,
    /// Its COMMIT's answer was lost and whether it committed could not be
    /// found out.
    pub(crate) maybe_committed: bool,
}

/// How long a lookup waits for a transaction the server still runs (its
/// connection gone, its COMMIT not yet done).
const COMMIT_LOOKUP: Duration = Duration::from_secs(10);

impl PgStore {
    /// Run `f` in one transaction with `now` read from the injected clock
    /// after it began; commit, or roll back on any error. A serialization
    /// failure or a deadlock runs the whole transaction again, at most
    /// [`RETRIES`] times, with a growing, jittered pause; a BEGIN that fails
    /// runs it on another connection.
    pub(crate) fn write_tx<T>(&self, f: impl FnMut(&mut Tx<'_>, Millis) -> Sql<T>) -> Result<T> {
        self.write_tx_as(Outcome::Unknown, f).map_err(|u| u.error)
    }

    /// [`PgStore::write_tx`] for a transaction that must not run twice (a
    /// batch of claims and completions: run again, it would claim other
    /// documents and refuse its own completions). It reads its transaction
    /// id first (one more round trip); when the connection goes while its
    /// COMMIT waits for the answer, the server is asked on a new connection
    /// whether that transaction committed (`pg_xact_status`): committed, its
    /// outcome stands; aborted, it runs again; still running, the lookup
    /// waits for it a while.
    ///
    /// Its error says whether the transaction may have committed (its
    /// COMMIT's answer lost and the lookup failed): then it must not run
    /// again.
    pub(crate) fn write_tx_known<T>(
        &self,
        f: impl FnMut(&mut Tx<'_>, Millis) -> Sql<T>,
    ) -> std::result::Result<T, Unsettled> {
        self.write_tx_as(Outcome::Known, f)
    }

    fn write_tx_as<T>(
        &self,
        outcome: Outcome,
        mut f: impl FnMut(&mut Tx<'_>, Millis) -> Sql<T>,
    ) -> std::result::Result<T, Unsettled> {
        // Every failure but a lost COMMIT's failed lookup left nothing done.
        let failed = |error| Unsettled {
            error,
            maybe_committed: false,
        };
        let (mut attempt, mut fresh) = (0, 0);
        loop {
            let mut client = self.connection_after(fresh).map_err(failed)?;
            match self.try_tx(&mut client, outcome, &mut f) {
                Ok(v) => {
                    client.answered();
                    return Ok(v);
                }
                Err(Step::CommitLost(e, xid, v)) => {
                    client.failed();
                    drop(client);
                    match self.committed(&xid) {
                        Ok(true) => return Ok(v),
                        Ok(false) if fresh + 1 < FRESH_CONNECTIONS => fresh += 1,
                        Ok(false) => return Err(failed(self.error(Fail::Pg(e)))),
                        Err(lookup) => {
                            return Err(Unsettled {
                                error: lookup,
                                maybe_committed: true,
                            })
                        }
                    }
                }
                Err(Step::Begin(e)) => {
                    client.failed();
                    fresh += 1;
                    if fresh >= FRESH_CONNECTIONS {
                        return Err(failed(self.error(Fail::Pg(e))));
                    }
                }
                Err(Step::Run(Fail::Pg(e))) if is_retryable(&e) && attempt + 1 < RETRIES => {
                    attempt += 1;
                    pause(attempt)
                }
                Err(Step::Run(Fail::Pg(e))) if client.learn_pooling(&e) && attempt + 1 < RETRIES => {
                    attempt += 1;
                }
                Err(Step::Run(e)) => {
                    client.failed();
                    return Err(failed(self.error(e)));
                }
            }
        }
    }

    fn try_tx<T>(
        &self,
        client: &mut Conn,
        outcome: Outcome,
        f: &mut impl FnMut(&mut Tx<'_>, Millis) -> Sql<T>,
    ) -> std::result::Result<T, Step<T>> {
        let mut tx = client.transaction().map_err(Step::Begin)?;
        let xid = match outcome {
            Outcome::Known => Some(
                first_value(&mut *tx, "SELECT pg_current_xact_id()")
                    .map_err(|e| Step::Run(Fail::Pg(e)))?
                    .unwrap_or_default(),
            ),
            Outcome::Unknown => None,
        };
        let now = self.now();
        // Dropping `tx` on an error rolls it back.
        let v = f(&mut tx, now).map_err(Step::Run)?;
        match (tx.commit(), xid) {
            (Ok(()), _) => Ok(v),
            (Err(Fail::Pg(e)), Some(xid)) if is_lost(&e) => Err(Step::CommitLost(e, xid, v)),
            (Err(e), _) => Err(Step::Run(e)),
        }
    }

    /// Whether transaction `xid` committed, asked on a new connection;
    /// while the server still runs it (its client gone), asked again for up
    /// to [`COMMIT_LOOKUP`].
    fn committed(&self, xid: &str) -> Result<bool> {
        // The id is the server's answer, written into the query: digits only.
        if xid.is_empty() || !xid.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::Internal(format!(
                "{}: the server gave {xid:?} for a transaction id",
                self.url()
            )));
        }
        let started = std::time::Instant::now();
        loop {
            let status = self.again_if_lost(|conn| {
                // A simple query: one exchange, nothing kept in the session.
                first_value(&mut **conn, &format!("SELECT pg_xact_status('{xid}'::xid8)"))
                    .map(Option::unwrap_or_default)
                    .map_err(Fail::Pg)
            })?;
            match status.as_str() {
                "committed" => return Ok(true),
                "aborted" => return Ok(false),
                _ if started.elapsed() < COMMIT_LOOKUP => std::thread::sleep(Duration::from_millis(20)),
                other => {
                    return Err(Error::PostgresOutcomeUnknown {
                        url: self.url().to_owned(),
                        reason: format!(
                            "a transaction whose COMMIT lost its answer is still {other:?} after {COMMIT_LOOKUP:?}"
                        ),
                    })
                }
            }
        }
    }

    /// Run `f` on a pooled connection outside any transaction (its
    /// statements commit one by one: each must be a whole change with its
    /// history, see `write.rs: claim_alone`), with `now` read from the
    /// injected clock. Retried as [`PgStore::write_tx`] is after a
    /// serialization failure or a deadlock. After a failure of the
    /// connection, only when `again_if_lost`: `f`'s first statement may have
    /// committed before the connection went, which the caller must find out
    /// (`recover.rs`: a claim and the batch statement look for what their
    /// lost statement did by its tokens before sending it again).
    pub(crate) fn on_its_own<T>(
        &self,
        again_if_lost: bool,
        mut f: impl FnMut(&mut Conn, Millis) -> Sql<T>,
    ) -> Result<T> {
        let (mut attempt, mut fresh) = (0, 0);
        loop {
            let mut client = self.connection_after(fresh)?;
            let now = self.now();
            match f(&mut client, now) {
                Ok(v) => {
                    client.answered();
                    return Ok(v);
                }
                Err(Fail::Pg(e)) if is_retryable(&e) && attempt + 1 < RETRIES => {
                    attempt += 1;
                    pause(attempt)
                }
                Err(Fail::Pg(e)) if client.learn_pooling(&e) && attempt + 1 < RETRIES => {
                    attempt += 1;
                }
                Err(Fail::Pg(e)) if again_if_lost && is_lost(&e) && fresh + 1 < FRESH_CONNECTIONS => {
                    client.failed();
                    fresh += 1;
                }
                Err(e) => {
                    client.failed();
                    return Err(self.error(e));
                }
            }
        }
    }

    /// Run the reads of `f` on one pooled connection, each statement in its
    /// own snapshot (no transaction is held between them); again on a
    /// checked connection if the first was lost (reads change nothing).
    /// Behind a pooler per transaction, in one READ COMMITTED transaction
    /// (each statement still reads its own snapshot), so that a statement
    /// prepared and run in two exchanges meets one server session.
    pub(crate) fn read<T>(&self, mut f: impl FnMut(&mut Client) -> Sql<T>) -> Result<T> {
        self.again_if_lost(|conn| match conn.pooling() {
            Pooling::PerConnection => f(conn),
            Pooling::PerTransaction => in_one_transaction(conn, &mut f),
        })
    }

    /// Run the reads of `f` in one transaction (READ COMMITTED: each
    /// statement reads its own snapshot), for reads that set something for
    /// themselves with `SET LOCAL`; again on a checked connection if the
    /// first was lost.
    pub(crate) fn read_tx<T>(&self, mut f: impl FnMut(&mut Tx<'_>) -> Sql<T>) -> Result<T> {
        self.again_if_lost(|conn| {
            let mut tx = conn.transaction()?;
            let v = f(&mut tx)?;
            tx.commit()?;
            Ok(v)
        })
    }

    /// Run `f` on a pooled connection; again on a checked one if the
    /// connection was lost, for work that changes nothing.
    fn again_if_lost<T>(&self, mut f: impl FnMut(&mut Conn) -> Sql<T>) -> Result<T> {
        let (mut attempt, mut fresh) = (0, 0);
        loop {
            let mut client = self.connection_after(fresh)?;
            match f(&mut client) {
                Ok(v) => {
                    client.answered();
                    return Ok(v);
                }
                Err(Fail::Pg(e)) if client.learn_pooling(&e) && attempt + 1 < RETRIES => {
                    attempt += 1;
                }
                Err(Fail::Pg(e)) if is_lost(&e) && fresh + 1 < FRESH_CONNECTIONS => {
                    client.failed();
                    fresh += 1;
                }
                Err(e) => {
                    client.failed();
                    return Err(self.error(e));
                }
            }
        }
    }

    /// The first try's connection may be a trusted one; a try after a
    /// connection failed gets a checked one.
    fn connection_after(&self, failures: u32) -> Result<Pooled> {
        if failures == 0 {
            self.trusted_connection()
        } else {
            self.connection()
        }
    }

    /// The library error for a failure on this database.
    pub(crate) fn error(&self, e: Fail) -> Error {
        match e {
            Fail::Pg(source) => Error::Postgres {
                url: self.url().to_owned(),
                source: crate::error::DatabaseError::postgres(source),
            },
            Fail::Refused(what) => Error::Internal(format!("{}: {what}", self.url())),
        }
    }
}

/// `f` between a BEGIN that sets the transaction's time limits and its
/// COMMIT (a ROLLBACK when it fails), on the connection itself: for the
/// reads behind a pooler per transaction.
fn in_one_transaction<T>(conn: &mut Conn, f: &mut impl FnMut(&mut Client) -> Sql<T>) -> Sql<T> {
    conn.batch_execute(&format!("BEGIN; {}", super::session_limits("SET LOCAL")))?;
    match f(conn) {
        Ok(v) => {
            conn.batch_execute("COMMIT")?;
            Ok(v)
        }
        Err(e) => {
            // A connection that cannot roll back is lost: the caller's
            // error says what went wrong first.
            let _ = conn.batch_execute("ROLLBACK");
            Err(e)
        }
    }
}

/// The server rolled the transaction back because of another one: running it
/// again is safe. Besides serialization failures and deadlocks, a history
/// line's seq taken twice: a statement that writes its own history line (a
/// claim, a completion) reads the next seq in the snapshot it started with,
/// and a line another transaction committed while this one waited for the
/// row's lock is not in it; run again, it is.
fn is_retryable(e: &::postgres::Error) -> bool {
    let Some(code) = e.code() else {
        return false;
    };
    *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
        || (*code == SqlState::UNIQUE_VIOLATION
            && e.as_db_error().and_then(|d| d.constraint()) == Some(HISTORY_KEY))
}

/// The primary key of `history` (job, seq), as PostgreSQL names it.
const HISTORY_KEY: &str = "history_pkey";

/// The connection failed or the server went away (no answer, or an answer
/// of class 57: shut down, crashed, cannot connect now).
pub(super) fn is_lost(e: &::postgres::Error) -> bool {
    e.is_closed() || e.code().is_none_or(|c| c.code().starts_with("57"))
}

/// A pause before try `attempt + 1`: 1 ms up to about 200 ms, jittered, so
/// that the transactions that collided do not collide again.
fn pause(attempt: u32) {
    let cap = 2u64.saturating_pow(attempt.min(8)).min(200);
    std::thread::sleep(Duration::from_millis(1 + fastrand::u64(0..=cap)));
}
