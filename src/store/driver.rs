//! The narrow interface each database engine implements: row operations in
//! its own SQL, inside a transaction its driver opened. The decisions made on
//! those rows (claimability, fencing, the gate's states, caps, windows) live
//! above it, once, in the rooms of `store/`.

/// A transaction (or read connection) of one engine, as the rules see it.
#[allow(dead_code)] // Implemented by both drivers; the rules take it up area by area.
pub(crate) trait Rows {
    /// The engine's own error, so that its transaction layer can still tell
    /// a retryable failure (SQLite BUSY, PostgreSQL serialization) from others.
    type Error;
}
