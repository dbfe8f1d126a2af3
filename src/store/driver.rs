//! The narrow interface each database engine implements: row operations in
//! its own SQL, inside a transaction its driver opened. The decisions made on
//! those rows (claimability, fencing, the gate's states, caps, windows) live
//! above it, once, in the rooms of `store/`.

use super::gate::{GateReads, GateRows};
use super::options::Policy;
use super::outbox::{OutboxReads, OutboxRows};
use super::queue::QueueRows;
use super::read::ReadRows;
use crate::clock::Millis;
use crate::error::Result;

/// A transaction (or read connection) of one engine, as the rules see it.
#[allow(dead_code)] // Implemented by both drivers; the rules take it up area by area.
pub(crate) trait Rows {
    /// The engine's own error, so that its transaction layer can still tell
    /// a retryable failure (SQLite BUSY, PostgreSQL serialization) from others.
    type Error;
}

/// What an engine gives the rules: its transactions and its reads, each over
/// rows of its own that implement every area's row trait.
pub(crate) trait Driver: Send + Sync {
    /// The engine's error inside a transaction or a read.
    type Error;
    /// A write transaction's rows.
    type Tx<'t>: Rows<Error = Self::Error> + QueueRows + GateRows + OutboxRows;
    /// A read's rows.
    type Reader<'t>: Rows<Error = Self::Error> + GateReads + OutboxReads + ReadRows;

    /// Run `f` in one write transaction, with now from the injected clock;
    /// the engine retries what it may and maps its errors.
    fn write<T>(
        &self,
        f: impl FnMut(&mut Self::Tx<'_>, Millis) -> std::result::Result<T, Self::Error>,
    ) -> Result<T>;
    /// Run `f` on a read connection.
    fn read<T>(
        &self,
        f: impl FnMut(&mut Self::Reader<'_>) -> std::result::Result<T, Self::Error>,
    ) -> Result<T>;
    /// The rules' settings from the store's options.
    fn policy(&self) -> &Policy;
    /// How many attempts a document gets.
    fn max_attempts(&self) -> i64;
}
