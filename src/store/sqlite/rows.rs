//! A SQLite connection as the engine-neutral rules see it: the type each
//! row trait of the rules (`QueueRows`, `JobReads`, `GateRows`…) is
//! implemented for, in the files beside this one.

use crate::store::driver::Rows as EngineRows;

/// A connection (a write transaction or a pooled read connection): the
/// SQLite side of [`EngineRows`].
pub(crate) struct Rows<'c>(pub(crate) &'c rusqlite::Connection);

impl EngineRows for Rows<'_> {
    type Error = rusqlite::Error;
}
