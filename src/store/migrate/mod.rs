//! Moving a store to another database: SQLite to PostgreSQL and back
//! (`leasehold migrate --to`, DESIGN §12).
//!
//! # Layout
//! - `mod.rs`: [`migrate`], its refusals, and the copy of each table.
//! - `sides.rs`: what each engine does as a side of a copy, and the errors.
//! - `tables.rs`: the tables and columns moved, and the checksum.
//! - `sqlite.rs`, `postgres.rs`: each engine as a side to read a snapshot
//!   from and to write in one transaction.
//!
//! The source is read in one consistent snapshot (SQLite: one read
//! transaction; PostgreSQL: REPEATABLE READ, read-only), table by table in
//! primary-key order, a batch at a time, and each batch is written to the
//! target at once: memory holds a batch, never a table. The whole target is
//! written in one transaction; before it commits, every table is read back
//! from it and its row count and checksum compared with the source's, so a
//! failure or a mismatch anywhere leaves the target as it was.

#[cfg(feature = "postgres")]
mod postgres;
mod sides;
mod sqlite;
mod tables;

use super::Backend;
use super::Store;
use crate::clock::Millis;
use crate::error::Error;
pub use sides::MigrateError;
use sides::{Reader, Result, Writer};
use tables::{Table, Tally, TABLES};

/// The result of one migration: what moved, and how it was verified.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Migration {
    /// The source database (a file, or a URL without its password).
    pub source: String,
    /// The target database, named the same way.
    pub target: String,
    /// One line per table, in the order they were copied.
    pub tables: Vec<TableCopy>,
}

/// One table's copy: equal on both sides, or the migration failed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableCopy {
    /// The table.
    pub table: &'static str,
    /// Its rows, on each side.
    pub rows: u64,
    /// SHA-256 over the rows in primary-key order (see `tables::Tally`),
    /// computed alike from the rows read from the source and read back from
    /// the target.
    pub sha256: String,
}

/// Copy every table of `source` into `target`, verify, and commit.
///
/// # Failure
/// [`MigrateError::LiveLeases`] when a document of the source is held by a
/// live lease (by the source store's clock); [`MigrateError::TargetNotEmpty`]
/// when a table of the target holds rows (bar the schema's own seed);
/// [`MigrateError::Mismatch`] when a table read back from the target differs
/// from the source; [`MigrateError::Store`] for a database error. In each case
/// nothing of the target's transaction is committed.
pub fn migrate(source: &Store, target: &Store) -> Result<Migration> {
    if let Some(to) = source.moved_to()? {
        return Err(Error::Moved { to }.into());
    }
    let now = source.now();
    let tables = with_snapshot(source, &mut |reader| {
        refuse_live_leases(reader, source, now)?;
        with_write(target, &mut |writer| copy_all(reader, writer, &name(target)))
    })?;
    // From here on the source refuses to claim or enqueue: work there would
    // be lost to the database in use, and its cleanups could delete results
    // of the target's in a mirror they share.
    source.mark_moved(&name(target))?;
    Ok(Migration {
        source: name(source),
        target: name(target),
        tables,
    })
}

fn name(store: &Store) -> String {
    store.path().display().to_string()
}

/// Inside the snapshot the copy reads, so no claim slips in between the
/// check and the copy.
fn refuse_live_leases(reader: &mut dyn Reader, source: &Store, now: Millis) -> Result<()> {
    let (count, last_expires_at) = reader.live_leases(now)?;
    if count > 0 {
        return Err(MigrateError::LiveLeases {
            source_db: name(source),
            count,
            last_expires_at,
        });
    }
    Ok(())
}

fn copy_all(reader: &mut dyn Reader, writer: &mut dyn Writer, target: &str) -> Result<Vec<TableCopy>> {
    for table in TABLES.iter().filter(|t| !t.seeded) {
        let rows = writer.count(table)?;
        if rows > 0 {
            return Err(MigrateError::TargetNotEmpty {
                target: target.to_owned(),
                table: table.name,
                rows,
            });
        }
    }
    TABLES
        .iter()
        .map(|table| copy_table(reader, writer, table, target))
        .collect()
}

/// Copy one table a batch at a time, then read it back from the target (in
/// the same, uncommitted transaction) and compare.
fn copy_table(
    reader: &mut dyn Reader,
    writer: &mut dyn Writer,
    table: &'static Table,
    target: &str,
) -> Result<TableCopy> {
    if table.seeded {
        writer.clear(table)?;
    }
    let mut from = Tally::default();
    reader.scan(table, &mut |rows| {
        from.add(rows);
        writer.insert(table, rows)
    })?;
    writer.continue_ids(table)?;
    let mut back = Tally::default();
    writer.scan(table, &mut |rows| {
        back.add(rows);
        Ok(())
    })?;
    let (source_rows, target_rows) = (from.rows, back.rows);
    let (source_sum, target_sum) = (from.hex(), back.hex());
    if source_rows != target_rows || source_sum != target_sum {
        return Err(MigrateError::Mismatch {
            target: target.to_owned(),
            table: table.name,
            source_rows,
            source_sum,
            target_rows,
            target_sum,
        });
    }
    Ok(TableCopy {
        table: table.name,
        rows: source_rows,
        sha256: source_sum,
    })
}

/// Run `f` on a read-only snapshot of `store`.
fn with_snapshot<T>(store: &Store, f: &mut dyn FnMut(&mut dyn Reader) -> Result<T>) -> Result<T> {
    match &store.inner.backend {
        Backend::Sqlite(s) => sqlite::with_snapshot(s, f),
        #[cfg(feature = "postgres")]
        Backend::Postgres(p) => postgres::with_snapshot(p, f),
    }
}

/// Run `f` in one write transaction on `store`; commit when it succeeds.
fn with_write<T>(store: &Store, f: &mut dyn FnMut(&mut dyn Writer) -> Result<T>) -> Result<T> {
    match &store.inner.backend {
        Backend::Sqlite(s) => sqlite::with_write(s, f),
        #[cfg(feature = "postgres")]
        Backend::Postgres(p) => postgres::with_write(p, f),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::sides::BATCH;
    use super::tables::{Cell, Row};
    use super::*;

    /// Tables in memory; a writer that loses the last row of each batch when
    /// `lossy`, as a faulty type mapping or a silent insert failure would.
    #[derive(Default)]
    struct Memory {
        tables: HashMap<&'static str, Vec<Row>>,
        lossy: bool,
    }

    impl Reader for Memory {
        fn live_leases(&mut self, _now: Millis) -> Result<(u64, Millis)> {
            Ok((0, 0))
        }
        fn scan(&mut self, table: &'static Table, each: &mut dyn FnMut(&[Row]) -> Result<()>) -> Result<()> {
            let rows = self.tables.get(table.name).cloned().unwrap_or_default();
            rows.chunks(BATCH).try_for_each(each)
        }
    }

    impl Writer for Memory {
        fn count(&mut self, table: &Table) -> Result<u64> {
            Ok(self.tables.get(table.name).map_or(0, |t| t.len() as u64))
        }
        fn clear(&mut self, table: &Table) -> Result<()> {
            self.tables.remove(table.name);
            Ok(())
        }
        fn insert(&mut self, table: &'static Table, rows: &[Row]) -> Result<()> {
            let keep = if self.lossy { rows.len() - 1 } else { rows.len() };
            self.tables
                .entry(table.name)
                .or_default()
                .extend_from_slice(&rows[..keep]);
            Ok(())
        }
        fn continue_ids(&mut self, _table: &Table) -> Result<()> {
            Ok(())
        }
    }

    fn source() -> Memory {
        let meta = (0..1200)
            .map(|i| vec![Cell::Text(format!("k{i:05}")), Cell::Text(format!("v{i}"))])
            .collect();
        Memory {
            tables: HashMap::from([("meta", meta)]),
            lossy: false,
        }
    }

    #[test]
    fn a_faithful_copy_verifies_in_batches() {
        let (mut from, mut to) = (source(), Memory::default());
        let copied = copy_all(&mut from, &mut to, "target").unwrap();
        let meta = copied.iter().find(|t| t.table == "meta").unwrap();
        assert_eq!(meta.rows, 1200);
        assert_eq!(to.tables["meta"], from.tables["meta"]);
    }

    #[test]
    fn a_lost_row_fails_verification_naming_the_table() {
        let (mut from, mut to) = (
            source(),
            Memory {
                lossy: true,
                ..Memory::default()
            },
        );
        let err = copy_all(&mut from, &mut to, "target").unwrap_err();
        assert!(
            matches!(
                err,
                MigrateError::Mismatch {
                    table: "meta",
                    source_rows: 1200,
                    target_rows: 1197,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_target_with_rows_is_refused_naming_the_table() {
        let (mut from, mut to) = (source(), source());
        let err = copy_all(&mut from, &mut to, "target").unwrap_err();
        assert!(
            matches!(
                err,
                MigrateError::TargetNotEmpty {
                    table: "meta",
                    rows: 1200,
                    ..
                }
            ),
            "{err}"
        );
    }
}
