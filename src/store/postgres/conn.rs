//! Pooled connections that keep their prepared statements.
//!
//! The client prepares a statement given as text on every call: one round
//! trip to prepare it, one to run it. The hot statements are prepared once
//! per connection instead and kept with it, so each costs one round trip:
//! those that commit on their own (a claim, a completion, the batch
//! statement) as the call of their function (`called.rs`, which says why),
//! the others as they are. A connection the pool drops (broken, or closed
//! by a server restart) takes its statements with it; a new one prepares
//! them again. Behind a pooler that hands out server sessions per
//! transaction (`pooler.rs`), a statement prepared in one session is not
//! there in the next: the hot statements are then sent unnamed with their
//! parameter types, parsed and run in one round trip
//! ([`Prepared::Unnamed`]); the types are learnt once per connection,
//! inside a transaction, and the named statement that taught them is closed
//! (dropped) before that transaction ends.
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
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::postgres::types::{ToSql, Type};
use ::postgres::{Client, GenericClient, Row, Statement, Transaction};
use r2d2_postgres::PostgresConnectionManager;

use super::pooler::{Pooling, SharedPooling};

/// How long after a connection last answered it is handed out unchecked.
pub(crate) const TRUSTED_FOR: Duration = Duration::from_millis(500);

/// A hot statement ready to run on a connection (see the module's docs).
#[derive(Clone)]
pub(crate) enum Prepared {
    /// Prepared under a name on this connection's one server session, kept.
    Kept(Statement),
    /// Sent with its text each time, unnamed, its parameters typed: the
    /// statement itself (inside a transaction), or the call of its function
    /// (`called.rs`, outside one).
    Unnamed { sql: Arc<str>, types: Arc<[Type]> },
}

impl Prepared {
    /// Run it with `params`; its rows.
    pub(crate) fn query(
        &self,
        db: &mut impl GenericClient,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, ::postgres::Error> {
        match self {
            Prepared::Kept(s) => db.query(s, params),
            Prepared::Unnamed { sql, types } => db.query_typed(sql, &typed(params, types)),
        }
    }

    /// Run it with `params`; its one row, if any (more is an error).
    pub(crate) fn query_opt(
        &self,
        db: &mut impl GenericClient,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, ::postgres::Error> {
        match self {
            Prepared::Kept(s) => db.query_opt(s, params),
            Prepared::Unnamed { sql, types } => db.query_typed_opt(sql, &typed(params, types)),
        }
    }

    /// Run it with `params`; the rows it changed.
    pub(crate) fn execute(
        &self,
        db: &mut impl GenericClient,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, ::postgres::Error> {
        match self {
            Prepared::Kept(s) => db.execute(s, params),
            Prepared::Unnamed { sql, types } => db.execute_typed(sql, &typed(params, types)),
        }
    }
}

/// The first column of the first row `sql` answers, as text (`None`: no
/// row, or NULL): a simple query, one exchange that leaves no statement
/// behind, as a pooler per transaction needs outside a transaction
/// (`pooler.rs`).
pub(crate) fn first_value(
    db: &mut impl GenericClient,
    sql: &str,
) -> Result<Option<String>, ::postgres::Error> {
    let answer = db.simple_query(sql)?;
    Ok(answer.iter().find_map(|m| match m {
        ::postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    }))
}

/// Each parameter with the type the server gave it when the statement was
/// first prepared (a missing type, which a statement's text cannot make,
/// goes as text and the server says what is wrong).
fn typed<'p>(params: &[&'p (dyn ToSql + Sync)], types: &[Type]) -> Vec<(&'p (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .enumerate()
        .map(|(i, p)| (*p, types.get(i).cloned().unwrap_or(Type::TEXT)))
        .collect()
}

/// The statements of one connection, by their text: those run inside
/// transactions kept under their names, or ([`Pooling::PerTransaction`])
/// their types, to send them unnamed; those that commit on their own
/// (`calls`) as the calls of their functions, kept under a name per
/// connection, unnamed per transaction.
struct Statements {
    pooling: SharedPooling,
    kept: HashMap<&'static str, Statement>,
    types: HashMap<&'static str, Arc<[Type]>>,
    calls: HashMap<&'static str, Prepared>,
}

impl Statements {
    fn known(&self, sql: &'static str) -> Option<Prepared> {
        match self.pooling.get() {
            Pooling::PerConnection => self.kept.get(sql).cloned().map(Prepared::Kept),
            Pooling::PerTransaction => self.types.get(sql).map(|types| Prepared::Unnamed {
                sql: Arc::from(sql),
                types: Arc::clone(types),
            }),
        }
    }

    /// How `sql`, a statement that commits on its own, runs on this
    /// connection, once learnt ([`Conn::prepared`]); a statement kept under
    /// a name is forgotten once sessions turn out to be pooled per
    /// transaction.
    fn called(&self, sql: &'static str) -> Option<Prepared> {
        match (self.calls.get(sql)?, self.pooling.get()) {
            (Prepared::Kept(_), Pooling::PerTransaction) => None,
            (p, _) => Some(p.clone()),
        }
    }

    /// `statement`, just prepared inside a transaction or (per connection)
    /// outside one, as it is run from now on.
    fn learn(&mut self, sql: &'static str, statement: Statement) -> Prepared {
        match self.pooling.get() {
            Pooling::PerConnection => {
                self.kept.insert(sql, statement.clone());
                Prepared::Kept(statement)
            }
            Pooling::PerTransaction => {
                // Dropping the statement closes it before the transaction
                // that prepared it ends.
                let types: Arc<[Type]> = Arc::from(statement.params());
                self.types.insert(sql, Arc::clone(&types));
                Prepared::Unnamed {
                    sql: Arc::from(sql),
                    types,
                }
            }
        }
    }
}

/// One pooled connection and the statements prepared on it, by their text.
pub(crate) struct Conn {
    client: Client,
    statements: Statements,
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

    /// `sql`, a statement that runs outside any transaction, ready on this
    /// connection: the call of its function (`called.rs`), made or found
    /// once, then kept.
    pub(crate) fn prepared(&mut self, sql: &'static str) -> Sql<Prepared> {
        if let Some(p) = self.statements.called(sql) {
            return Ok(p);
        }
        // (A role that may not create a function cannot open the store
        // either: the open creates what the schema lacks.)
        let p = self.as_function(sql)?;
        self.statements.calls.insert(sql, p.clone());
        Ok(p)
    }

    /// `sql` as the call of its function (`called.rs`), learnt in a
    /// transaction of its own with the time limits set (it may wait for
    /// another process making the function): kept per connection, unnamed
    /// per transaction.
    fn as_function(&mut self, sql: &'static str) -> Sql<Prepared> {
        let mut tx = self.client.transaction()?;
        tx.batch_execute(&super::local_limits())?;
        let s = tx.prepare(sql)?;
        let called = super::called::function_of(&mut tx, sql, &s)?;
        drop(s);
        tx.commit()?;
        // Read after the transaction: another connection may have learnt
        // meanwhile that sessions are pooled per transaction.
        match self.statements.pooling.get() {
            Pooling::PerConnection => Ok(Prepared::Kept(
                self.client.prepare_typed(&called.call, &called.params)?,
            )),
            Pooling::PerTransaction => Ok(Prepared::Unnamed {
                sql: Arc::from(called.call),
                types: Arc::from(called.params),
            }),
        }
    }

    /// How this connection's server sessions are given out.
    pub(crate) fn pooling(&self) -> Pooling {
        self.statements.pooling.get()
    }

    /// Whether `e` showed that sessions are pooled per transaction (learnt
    /// for every connection of the pool): the operation may run again.
    pub(crate) fn learn_pooling(&self, e: &::postgres::Error) -> bool {
        self.statements.pooling.learn_from(e)
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
    /// Per transaction pooling, it sets the time limits a direct connection
    /// sets once ([`super::session_limits`]) for itself.
    pub(crate) fn transaction(&mut self) -> Result<Tx<'_>, ::postgres::Error> {
        let Conn {
            client, statements, ..
        } = self;
        let mut tx = client.transaction()?;
        if statements.pooling.get() == Pooling::PerTransaction {
            tx.batch_execute(&super::session_limits("SET LOCAL"))?;
        }
        Ok(Tx { tx, statements })
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

/// The pool's manager: `r2d2_postgres`'s, with a statement map per
/// connection, and how the server's sessions are pooled.
pub(crate) struct Manager(
    pub(crate) PostgresConnectionManager<super::tls::Connector>,
    pub(crate) SharedPooling,
);

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
            statements: Statements {
                pooling: self.1.clone(),
                kept: HashMap::new(),
                types: HashMap::new(),
                calls: HashMap::new(),
            },
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
    statements: &'a mut Statements,
}

impl<'a> Tx<'a> {
    /// `sql` prepared on this connection: once, then kept.
    pub(crate) fn prepared(&mut self, sql: &'static str) -> Sql<Prepared> {
        if let Some(p) = self.statements.known(sql) {
            return Ok(p);
        }
        let s = self.tx.prepare(sql)?;
        Ok(self.statements.learn(sql, s))
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
