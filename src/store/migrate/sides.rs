//! The two sides of a migration, as each engine implements them (a reader of
//! one snapshot, a writer of one transaction), and why a migration did not
//! happen.

use super::tables::{Row, Table};
use crate::clock::{rfc3339, Millis};
use crate::error::Error;

/// Rows read or written at a time: bounded memory, and few round trips.
pub(super) const BATCH: usize = 500;

/// Why a migration did not happen. The target is left as it was in each case.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// Reading or writing either database failed.
    #[error(transparent)]
    Store(#[from] Error),
    /// Workers hold leases on the source: their results would be accepted
    /// into a database that is no longer the one in use.
    #[error(
        "{source_db}: {count} document(s) are being extracted under live leases (the last expires at {}); \
         stop the workers (or let their leases run out) and run migrate again",
        rfc3339(*last_expires_at)
    )]
    LiveLeases {
        /// The source database, without a password.
        source_db: String,
        /// Documents held by a live lease.
        count: u64,
        /// When the last of those leases runs out.
        last_expires_at: Millis,
    },
    /// The target already holds leasehold rows; a migration never merges.
    #[error("{target}: the target is not empty: table {table} holds {rows} row(s); migrate into an empty database")]
    TargetNotEmpty {
        /// The target database, without a password.
        target: String,
        /// The first table found holding rows.
        table: &'static str,
        /// How many.
        rows: u64,
    },
    /// What was read back from the target is not what was read from the source.
    #[error(
        "{target}: verification failed for table {table}: source {source_rows} rows (sha256 {source_sum}), \
         target {target_rows} rows (sha256 {target_sum}); nothing was committed"
    )]
    Mismatch {
        /// The target database, without a password.
        target: String,
        /// The table that differs.
        table: &'static str,
        /// Rows read from the source.
        source_rows: u64,
        /// Their checksum.
        source_sum: String,
        /// Rows read back from the target.
        target_rows: u64,
        /// Their checksum.
        target_sum: String,
    },
    /// A source value that does not fit its column (SQLite stores any type
    /// in any column): moved as it is, it would change meaning or fail later.
    #[error("{db}: table {table}, column {column}: unexpected value ({found})")]
    UnexpectedValue {
        /// The database that holds it.
        db: String,
        /// Its table.
        table: &'static str,
        /// Its column.
        column: &'static str,
        /// The type found.
        found: String,
    },
}

pub(super) type Result<T> = std::result::Result<T, MigrateError>;

/// One side of a migration, inside its transaction: the rows of a table,
/// in key order, a batch at a time.
pub(super) trait Reader {
    /// How many documents are held by a lease that has not run out at `now`
    /// (judged as the store's claims judge it), and the latest expiry.
    fn live_leases(&mut self, now: Millis) -> Result<(u64, Millis)>;
    /// Hand every row of `table` to `each`, in key order, `BATCH` at a time.
    fn scan(&mut self, table: &'static Table, each: &mut dyn FnMut(&[Row]) -> Result<()>) -> Result<()>;
}

/// The target, inside its one write transaction.
pub(super) trait Writer: Reader {
    /// How many rows `table` holds.
    fn count(&mut self, table: &Table) -> Result<u64>;
    /// Remove the rows the schema seeded into `table`.
    fn clear(&mut self, table: &Table) -> Result<()>;
    /// Insert `rows` as they are, ids included.
    fn insert(&mut self, table: &'static Table, rows: &[Row]) -> Result<()>;
    /// Make new rows of `table` get ids above the copied ones.
    fn continue_ids(&mut self, table: &Table) -> Result<()>;
}
