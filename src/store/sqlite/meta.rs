//! The data directory's settings (the `meta` table) in SQLite's SQL: a
//! room of its own, since the queue, the gate and the search index all keep
//! settings there.

use rusqlite::{Connection, OptionalExtension};

/// A setting of the data directory.
pub(crate) fn meta(c: &Connection, name: &str) -> rusqlite::Result<Option<String>> {
    c.prepare_cached("SELECT value FROM meta WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()
}

/// Set `name` to `value` unless it is already set.
pub(crate) fn meta_insert(tx: &Connection, name: &str, value: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO meta (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
        [name, value],
    )?;
    Ok(())
}

/// Set `name` to `value`, replacing any value it had.
pub(crate) fn meta_set(tx: &Connection, name: &str, value: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO meta (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        [name, value],
    )?;
    Ok(())
}
