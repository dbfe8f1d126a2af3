//! SQLite as a side of a migration: a snapshot in one read transaction, or
//! every write in one `BEGIN IMMEDIATE` transaction.

use std::path::Path;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Transaction, TransactionBehavior};

use super::sides::{MigrateError, Reader, Result, Writer, BATCH};
use super::tables::{Cell, Kind, Row, Table};
use crate::clock::Millis;
use crate::error::Error;
use crate::store::sqlite::Sqlite;

/// A transaction on one SQLite file.
struct Side<'c> {
    tx: Transaction<'c>,
    path: &'c Path,
}

pub(super) fn with_snapshot<T>(db: &Sqlite, f: &mut dyn FnMut(&mut dyn Reader) -> Result<T>) -> Result<T> {
    let mut conn = db.pool.get().map_err(|source| Error::Pool {
        path: db.path.clone(),
        source: crate::error::DatabaseError::pool(source),
    })?;
    // A deferred transaction: its first read fixes the snapshot every later
    // read of the migration sees (WAL keeps it while writers go on).
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Deferred)
        .map_err(|e| Error::from_sqlite(&db.path, e))?;
    let mut side = Side { tx, path: &db.path };
    f(&mut side)
}

pub(super) fn with_write<T>(db: &Sqlite, f: &mut dyn FnMut(&mut dyn Writer) -> Result<T>) -> Result<T> {
    let mut conn = db.pool.get().map_err(|source| Error::Pool {
        path: db.path.clone(),
        source: crate::error::DatabaseError::pool(source),
    })?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| Error::from_sqlite(&db.path, e))?;
    let mut side = Side { tx, path: &db.path };
    let out = f(&mut side)?;
    side.tx.commit().map_err(|e| Error::from_sqlite(&db.path, e))?;
    Ok(out)
}

impl Side<'_> {
    fn err(&self, e: rusqlite::Error) -> MigrateError {
        Error::from_sqlite(self.path, e).into()
    }

    /// The cell of `column` in a value read from SQLite, which stores any
    /// type in any column: only what the column means is taken.
    fn cell(&self, table: &'static Table, i: usize, v: ValueRef<'_>) -> Result<Cell> {
        let column = &table.columns[i];
        let cell = match (column.kind, v) {
            (_, ValueRef::Null) => Some(Cell::Null),
            (Kind::Int, ValueRef::Integer(n)) => Some(Cell::Int(n)),
            (Kind::Flag, ValueRef::Integer(n @ (0 | 1))) => Some(Cell::Int(n)),
            (Kind::Text, ValueRef::Text(t)) => std::str::from_utf8(t).ok().map(|s| Cell::Text(s.to_owned())),
            _ => None,
        };
        cell.ok_or_else(|| MigrateError::UnexpectedValue {
            db: self.path.display().to_string(),
            table: table.name,
            column: column.name,
            found: format!("{:?}", v.data_type()),
        })
    }
}

impl Reader for Side<'_> {
    fn live_leases(&mut self, now: Millis) -> Result<(u64, Millis)> {
        // The claim's rule (store/read.rs: live_leases): not run out, and not
        // granted after now (the clock went back).
        self.tx
            .query_row(
                "SELECT count(*), coalesce(max(lease_expires_at), 0) FROM jobs
                 WHERE status = 'extracting' AND lease_expires_at > ?1
                   AND NOT coalesce(lease_expires_at - lease_ms > ?1, 0)",
                [now],
                |r| Ok((r.get::<_, i64>(0)?.unsigned_abs(), r.get(1)?)),
            )
            .map_err(|e| self.err(e))
    }

    fn scan(&mut self, table: &'static Table, each: &mut dyn FnMut(&[Row]) -> Result<()>) -> Result<()> {
        let sql = format!(
            "SELECT {} FROM {}{} ORDER BY {}",
            table.column_list(),
            table.name,
            table.rows_copied(),
            table.key.join(", ")
        );
        let mut stmt = self.tx.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        let mut batch = Vec::with_capacity(BATCH);
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let mut row = Vec::with_capacity(table.columns.len());
            for i in 0..table.columns.len() {
                let v = r.get_ref(i).map_err(|e| self.err(e))?;
                row.push(self.cell(table, i, v)?);
            }
            batch.push(row);
            if batch.len() == BATCH {
                each(&batch)?;
                batch.clear();
            }
        }
        if !batch.is_empty() {
            each(&batch)?;
        }
        Ok(())
    }
}

impl Writer for Side<'_> {
    fn count(&mut self, table: &Table) -> Result<u64> {
        self.tx
            .query_row(&format!("SELECT count(*) FROM {}", table.name), [], |r| {
                r.get::<_, i64>(0)
            })
            .map(i64::unsigned_abs)
            .map_err(|e| self.err(e))
    }

    fn clear(&mut self, table: &Table) -> Result<()> {
        self.tx
            .execute(&format!("DELETE FROM {}", table.name), [])
            .map(drop)
            .map_err(|e| self.err(e))
    }

    fn insert(&mut self, table: &'static Table, rows: &[Row]) -> Result<()> {
        let marks = vec!["?"; table.columns.len()].join(", ");
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({marks})",
            table.name,
            table.column_list()
        );
        let mut stmt = self.tx.prepare_cached(&sql).map_err(|e| self.err(e))?;
        for row in rows {
            let values = row.iter().map(|cell| match cell {
                Cell::Null => Value::Null,
                Cell::Int(n) => Value::Integer(*n),
                Cell::Text(s) => Value::Text(s.clone()),
            });
            stmt.execute(rusqlite::params_from_iter(values))
                .map_err(|e| Error::from_sqlite(self.path, e))?;
        }
        Ok(())
    }

    /// SQLite's rowid ids continue above the largest one by themselves.
    fn continue_ids(&mut self, _table: &Table) -> Result<()> {
        Ok(())
    }
}
