//! Whether a connection pooler that hands out server sessions per
//! transaction sits between us and the server (PgBouncer's
//! `pool_mode = transaction`, a cloud provider's proxy), found out once when
//! the store opens.
//!
//! Behind such a pooler, two statements of one client connection may run in
//! two server sessions, and a session may have served another client
//! between them. What lives in a session outside a transaction is then
//! lost or shared: a statement prepared under a name (the client prepares,
//! then runs, in two exchanges), and a session's `SET`. So the store keeps
//! nothing there ([`Pooling::PerTransaction`]): the statements that commit
//! on their own run as functions the database keeps, called unnamed
//! (`called.rs`), and the hot statements inside transactions are sent
//! unnamed with their parameter types, parsed and run in one exchange
//! (`conn.rs`: [`super::conn::Prepared`]); every other statement runs
//! inside a transaction, and every transaction sets its own time limits
//! with `SET LOCAL`. Advisory locks were transaction-scoped already.
//!
//! How it is found out: a direct connection (or one through a pooler in
//! session mode) keeps one server process for its whole life, and no other
//! client connection ever shares it. The probe takes two connections. The
//! first asks for its server process; the second begins a transaction and
//! asks for its own, which holds that server session until it ends; the
//! first asks again. A pooler per transaction hands the second connection
//! the session the first just gave back (PgBouncer reuses the most recent
//! idle one), or gives the first another session because the second holds
//! its old one: one of the two answers differs from a direct connection's.
//! A pooler per statement refuses the second connection's transaction, and
//! the store with it: its operations need transactions.
//!
//! The probe can miss: other clients of the pooler may take and give back
//! sessions between its steps so that each answer looks direct. Then the
//! first statement that meets another session usually fails at once with
//! "prepared statement ... does not exist" (or "already exists"), before
//! anything ran: the store learns the pooling from it ([`SharedPooling`]),
//! for every connection of its pool, and runs the operation again. What a
//! missed probe leaves: the client names its statements `s0`, `s1`, … in
//! every process, so a statement may meet another leasehold process's
//! statement of the same name and text in that session and run (the same
//! statement: no harm, but nothing is learnt); and the connections made
//! before it was learnt set their time limits for their sessions, which
//! stay with those server sessions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ::postgres::error::SqlState;
use ::postgres::Client;

use super::conn::first_value;

use crate::error::{Error, Result};

impl super::PgStore {
    /// Whether the store's connections reach server sessions per
    /// transaction, as found or learnt so far.
    pub(crate) fn pooled_per_transaction(&self) -> Result<bool> {
        let conn = self.connection()?;
        Ok(conn.pooling() == Pooling::PerTransaction)
    }
}

/// How server sessions are given to the store's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooling {
    /// One server session per connection, for the connection's life: a
    /// direct connection, or a pooler in session mode. Statements are
    /// prepared once per connection and kept; the time limits are set
    /// once per connection.
    PerConnection,
    /// A server session per transaction (a pooler in transaction mode):
    /// nothing is kept in a session between transactions.
    PerTransaction,
}

/// The pooling of one store's connections, shared by all of them: found by
/// the probe, or learnt later from a statement the pooler lost.
#[derive(Debug, Clone)]
pub(crate) struct SharedPooling(Arc<AtomicBool>);

impl SharedPooling {
    pub(crate) fn new(found: Pooling) -> SharedPooling {
        SharedPooling(Arc::new(AtomicBool::new(found == Pooling::PerTransaction)))
    }

    pub(crate) fn get(&self) -> Pooling {
        if self.0.load(Ordering::Relaxed) {
            Pooling::PerTransaction
        } else {
            Pooling::PerConnection
        }
    }

    /// When `e` says a named statement was not where it was prepared (or
    /// another client's was), sessions are pooled per transaction: note it
    /// and say the operation may run again (the statement ran nothing).
    pub(crate) fn learn_from(&self, e: &::postgres::Error) -> bool {
        let lost = e.code().is_some_and(|c| {
            *c == SqlState::INVALID_SQL_STATEMENT_NAME || *c == SqlState::DUPLICATE_PSTATEMENT
        });
        if lost && !self.0.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "the database's sessions are pooled per transaction: no statement is kept in a session"
            );
        }
        lost
    }
}

/// The server process of the session `client`'s next statement runs in.
fn backend(client: &mut Client) -> std::result::Result<i32, ::postgres::Error> {
    let pid = first_value(client, "SELECT pg_backend_pid()")?;
    Ok(pid.and_then(|v| v.parse().ok()).unwrap_or_default())
}

/// Find out how sessions are pooled, with `first` (already connected) and
/// `second`, a new connection to the same place (see the module's docs).
///
/// # Failure
/// [`Error::PostgresPooler`] when the second connection may not begin a
/// transaction (a pooler per statement); [`Error::Postgres`] when a
/// statement fails otherwise.
pub(crate) fn probe(first: &mut Client, second: &mut Client, label: &str) -> Result<Pooling> {
    let failed = |source| super::migrate::pg_error(label, source);
    let before = backend(first).map_err(failed)?;
    second
        .batch_execute("BEGIN")
        .map_err(|source| Error::PostgresPooler {
            url: label.to_owned(),
            reason: format!(
                "a transaction could not begin ({source}); a pooler in front of the server must \
             pool per transaction or per session (PgBouncer: pool_mode = transaction or session)"
            ),
        })?;
    let held = backend(second).map_err(failed)?;
    // The second holds the session the first had: that is the answer, and
    // behind a pool of one session the first would wait for it forever.
    let after = if held == before {
        before
    } else {
        backend(first).map_err(failed)?
    };
    second.batch_execute("COMMIT").map_err(failed)?;
    Ok(judge(before, held, after))
}

/// The probe's verdict from the three process ids it read.
fn judge(before: i32, held: i32, after: i32) -> Pooling {
    if held == before || after != before {
        Pooling::PerTransaction
    } else {
        Pooling::PerConnection
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_shared_or_changed_means_a_pooler_per_transaction() {
        // Direct: each connection keeps its own process.
        assert_eq!(judge(10, 11, 10), Pooling::PerConnection);
        // The second connection was handed the first's session.
        assert_eq!(judge(10, 10, 11), Pooling::PerTransaction);
        // The first was moved to another session.
        assert_eq!(judge(10, 11, 12), Pooling::PerTransaction);
    }
}
