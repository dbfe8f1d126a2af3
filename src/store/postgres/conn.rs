//! Pooled connections that keep their prepared statements.
//!
//! The client prepares a statement given as text on every call: one round
//! trip to prepare it, one to run it. The hot statements (a claim, a
//! completion and their history lines) are prepared once per connection
//! instead and kept with it, so each costs one round trip. A connection
//! the pool drops (broken, or closed by a server restart) takes its
//! statements with it; a new one prepares them again.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};

use ::postgres::{Client, NoTls, Statement, Transaction};
use r2d2_postgres::PostgresConnectionManager;

use super::tx::Sql;

/// One pooled connection and the statements prepared on it, by their text.
pub(crate) struct Conn {
    client: Client,
    statements: HashMap<&'static str, Statement>,
}

impl Conn {
    /// A transaction that can use (and add to) the connection's statements.
    pub(crate) fn transaction(&mut self) -> Sql<Tx<'_>> {
        let Conn { client, statements } = self;
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
#[derive(Debug)]
pub(crate) struct Manager(pub(crate) PostgresConnectionManager<NoTls>);

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = ::postgres::Error;

    fn connect(&self) -> Result<Conn, ::postgres::Error> {
        Ok(Conn {
            client: self.0.connect()?,
            statements: HashMap::new(),
        })
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), ::postgres::Error> {
        self.0.is_valid(&mut conn.client)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        self.0.has_broken(&mut conn.client)
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
