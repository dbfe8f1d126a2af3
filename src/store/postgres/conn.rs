//! Pooled connections that keep their prepared statements.
//!
//! The client prepares a statement given as text on every call: one round
//! trip to prepare it, one to run it. The hot statements (a claim, a
//! completion and their history lines) are prepared once per connection
//! instead and kept with it, so each costs one round trip. A connection
//! the pool drops (broken, or closed by a server restart) takes its
//! statements with it; a new one prepares them again.
//!
//! Every connection is checked (an empty query) as it is handed out, except
//! to the callers that can tell a connection that died from a failure of
//! their own and start again (`tx.rs`: a transaction whose BEGIN fails, a
//! claim, a read): those get a connection that answered within the last
//! [`TRUSTED_FOR`] unchecked, which saves a round trip per operation (a
//! claim is one round trip). A connection that failed is checked before its
//! next use, and one whose check fails is dropped.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use ::postgres::{Client, Statement, Transaction};
use r2d2_postgres::PostgresConnectionManager;

/// How long after a connection last answered it is handed out unchecked.
pub(crate) const TRUSTED_FOR: Duration = Duration::from_millis(500);

/// One pooled connection and the statements prepared on it, by their text.
pub(crate) struct Conn {
    client: Client,
    statements: HashMap<&'static str, Statement>,
    /// When it last completed a transaction or a read; `None` when it never
    /// did, or failed since (it is checked before its next use).
    answered_at: Option<Instant>,
    /// Its check failed: the pool drops it when it comes back.
    broken: bool,
}

impl Conn {
    /// The connection just answered: it may skip the check for a while.
    pub(crate) fn answered(&mut self) {
        self.answered_at = Some(Instant::now());
    }

    /// The connection failed: check it before it is used again.
    pub(crate) fn failed(&mut self) {
        self.answered_at = None;
    }

    /// `sql` prepared on this connection, for a statement that runs outside
    /// any transaction: once, then kept.
    pub(crate) fn prepared(&mut self, sql: &'static str) -> Result<Statement, ::postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }

    /// Whether it may be handed out without a round trip.
    pub(crate) fn trusted(&self) -> bool {
        !self.client.is_closed() && self.answered_at.is_some_and(|t| t.elapsed() < TRUSTED_FOR)
    }

    /// Check it with an empty query; one that fails is marked broken.
    pub(crate) fn check(&mut self) -> Result<(), ::postgres::Error> {
        match self.client.simple_query("") {
            Ok(_) => {
                self.answered();
                Ok(())
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    /// A transaction that can use (and add to) the connection's statements.
    pub(crate) fn transaction(&mut self) -> Result<Tx<'_>, ::postgres::Error> {
        let Conn {
            client, statements, ..
        } = self;
        Ok(Tx {
            tx: client.transaction()?,
            statements,
        })
    }
}

impl Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// The pool's manager: `r2d2_postgres`'s, with a statement map per connection.
pub(crate) struct Manager(pub(crate) PostgresConnectionManager<super::tls::Connector>);

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Manager")
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = ::postgres::Error;

    fn connect(&self) -> Result<Conn, ::postgres::Error> {
        Ok(Conn {
            client: self.0.connect()?,
            statements: HashMap::new(),
            answered_at: None,
            broken: false,
        })
    }

    /// Not used on checkout (the pool's own check is off: `PgStore` checks,
    /// see the module's docs); r2d2 asks it of nothing else.
    fn is_valid(&self, conn: &mut Conn) -> Result<(), ::postgres::Error> {
        conn.check()
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || self.0.has_broken(&mut conn.client)
    }
}

/// A transaction on a pooled connection; everything of [`Transaction`]
/// through `Deref`, and [`Tx::prepared`].
pub(crate) struct Tx<'a> {
    tx: Transaction<'a>,
    statements: &'a mut HashMap<&'static str, Statement>,
}

impl<'a> Tx<'a> {
    /// `sql` prepared on this connection: once, then kept.
    pub(crate) fn prepared(&mut self, sql: &'static str) -> Sql<Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.tx.prepare(sql)?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }

    pub(crate) fn commit(self) -> Sql<()> {
        Ok(self.tx.commit()?)
    }
}

impl<'a> Deref for Tx<'a> {
    type Target = Transaction<'a>;
    fn deref(&self) -> &Transaction<'a> {
        &self.tx
    }
}

impl<'a> DerefMut for Tx<'a> {
    fn deref_mut(&mut self) -> &mut Transaction<'a> {
        &mut self.tx
    }
}

/// A write transaction as the engine-neutral rules see it.
impl crate::store::driver::Rows for Tx<'_> {
    type Error = Fail;
}

/// A read connection as the engine-neutral rules see it.
impl crate::store::driver::Rows for Client {
    type Error = Fail;
}

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
