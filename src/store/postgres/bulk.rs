//! A pooled connection for work on the whole database outside the
//! operations' transactions: `store::migrate` reads a snapshot of every table
//! or writes every table in one transaction of its own.

use ::postgres::NoTls;
use r2d2_postgres::PostgresConnectionManager;

use super::PgStore;
use crate::error::Result;

impl PgStore {
    /// A connection of the pool, for a transaction the caller runs itself.
    pub(crate) fn bulk_connection(&self) -> Result<r2d2::PooledConnection<PostgresConnectionManager<NoTls>>> {
        self.connection()
    }
}
