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

use super::conn::{Conn, Tx};

use super::PgStore;
use crate::clock::Millis;
use crate::error::{Error, Result};

/// Tries of one transaction when the server answers with a serialization
/// failure or a deadlock (it rolled the transaction back; trying again is
/// safe). Bounded: contention that outlives them is an error, not a hang.
const RETRIES: u32 = 10;

/// Why a statement of ours failed: the client's error, or a transition the
/// store refuses to write (DESIGN §3, `Status::can_transition_to`).
#[derive(Debug)]
pub(crate) enum Fail {
    Pg(::postgres::Error),
    Refused(String),
}

impl From<::postgres::Error> for Fail {
    fn from(e: ::postgres::Error) -> Fail {
        Fail::Pg(e)
    }
}

/// The result of one statement or step inside a transaction.
pub(crate) type Sql<T> = std::result::Result<T, Fail>;

impl PgStore {
    /// Run `f` in one transaction with `now` read from the injected clock
    /// after it began; commit, or roll back on any error. A serialization
    /// failure or a deadlock runs the whole transaction again, at most
    /// [`RETRIES`] times, with a growing, jittered pause.
    pub(crate) fn write_tx<T>(&self, mut f: impl FnMut(&mut Tx<'_>, Millis) -> Sql<T>) -> Result<T> {
        let mut client = self.connection()?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_tx(&mut client, &mut f) {
                Ok(v) => return Ok(v),
                Err(Fail::Pg(e)) if is_retryable(&e) && attempt < RETRIES => pause(attempt),
                Err(e) => return Err(self.error(e)),
            }
        }
    }

    fn try_tx<T>(&self, client: &mut Conn, f: &mut impl FnMut(&mut Tx<'_>, Millis) -> Sql<T>) -> Sql<T> {
        let mut tx = client.transaction()?;
        let now = self.now();
        // Dropping `tx` on an error rolls it back.
        let v = f(&mut tx, now)?;
        tx.commit()?;
        Ok(v)
    }

    /// Run the reads of `f` on one pooled connection, each statement in its
    /// own snapshot (no transaction is held between them).
    pub(crate) fn read<T>(&self, f: impl FnOnce(&mut Client) -> Sql<T>) -> Result<T> {
        let mut client = self.connection()?;
        f(&mut client).map_err(|e| self.error(e))
    }

    /// The library error for a failure on this database.
    pub(crate) fn error(&self, e: Fail) -> Error {
        match e {
            Fail::Pg(source) => Error::Postgres {
                url: self.url().to_owned(),
                source,
            },
            Fail::Refused(what) => Error::Internal(format!("{}: {what}", self.url())),
        }
    }
}

/// The server rolled the transaction back because of another one: running it
/// again is safe.
fn is_retryable(e: &::postgres::Error) -> bool {
    e.code()
        .is_some_and(|c| *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

/// A pause before try `attempt + 1`: 1 ms up to about 200 ms, jittered, so
/// that the transactions that collided do not collide again.
fn pause(attempt: u32) {
    let cap = 2u64.saturating_pow(attempt.min(8)).min(200);
    std::thread::sleep(Duration::from_millis(1 + fastrand::u64(0..=cap)));
}
