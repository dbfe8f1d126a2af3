//! PostgreSQL as a side of a migration: a snapshot in one REPEATABLE READ,
//! read-only transaction, or every write in one transaction. Rows are read
//! through a portal, a batch at a time, so a table never sits in memory.

use ::postgres::types::ToSql;
use ::postgres::{IsolationLevel, Transaction};

use super::sides::{MigrateError, Reader, Result, Writer, BATCH};
use super::tables::{Cell, Kind, Row, Table, TABLES};
use crate::clock::Millis;
use crate::error::Error;
use crate::store::postgres::PgStore;

/// A transaction on one PostgreSQL database.
struct Side<'c> {
    tx: Transaction<'c>,
    /// The URL without its password.
    url: &'c str,
    /// How far ahead a lease may have been granted before it counts as
    /// granted after now ([`crate::StoreOptions::clock_skew`]), as the claims judge it.
    skew: Millis,
}

pub(super) fn with_snapshot<T>(db: &PgStore, f: &mut dyn FnMut(&mut dyn Reader) -> Result<T>) -> Result<T> {
    let mut conn = db.connection()?;
    let mut tx = conn
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(|e| pg_error(db.url(), e))?;
    // Behind a pooler per transaction the session has no limits of ours.
    tx.batch_execute(&crate::store::postgres::local_limits())
        .map_err(|e| pg_error(db.url(), e))?;
    let mut side = Side {
        tx,
        url: db.url(),
        skew: db.policy().clock_skew_ms,
    };
    f(&mut side)
}

pub(super) fn with_write<T>(db: &PgStore, f: &mut dyn FnMut(&mut dyn Writer) -> Result<T>) -> Result<T> {
    let mut conn = db.connection()?;
    // The client's own transaction, not the connection's statement-keeping one.
    let mut tx = ::postgres::Client::transaction(&mut conn).map_err(|e| pg_error(db.url(), e))?;
    // Behind a pooler per transaction the session has no limits of ours.
    tx.batch_execute(&crate::store::postgres::local_limits())
        .map_err(|e| pg_error(db.url(), e))?;
    // Other writers (a worker pointed at the new database too early) wait
    // until the copy commits or rolls back: the emptiness checked first
    // still holds when the rows go in. Readers are not held up.
    let names: Vec<&str> = TABLES.iter().map(|t| t.name).collect();
    tx.batch_execute(&format!("LOCK TABLE {} IN EXCLUSIVE MODE", names.join(", ")))
        .map_err(|e| pg_error(db.url(), e))?;
    let mut side = Side {
        tx,
        url: db.url(),
        skew: db.policy().clock_skew_ms,
    };
    let out = f(&mut side)?;
    side.tx.commit().map_err(|e| pg_error(db.url(), e))?;
    Ok(out)
}

fn pg_error(url: &str, source: ::postgres::Error) -> MigrateError {
    Error::Postgres {
        url: url.to_owned(),
        source: crate::error::DatabaseError::postgres(source),
    }
    .into()
}

impl Side<'_> {
    fn err(&self, e: ::postgres::Error) -> MigrateError {
        pg_error(self.url, e)
    }

    /// One row as cells; the flag's BOOLEAN becomes 0 or 1, as on SQLite.
    fn row(&self, table: &Table, r: &::postgres::Row) -> Result<Row> {
        let mut row = Vec::with_capacity(table.columns.len());
        for (i, column) in table.columns.iter().enumerate() {
            let cell = match column.kind {
                Kind::Int => r.try_get::<_, Option<i64>>(i).map(|v| v.map(Cell::Int)),
                Kind::Text => r.try_get::<_, Option<String>>(i).map(|v| v.map(Cell::Text)),
                Kind::Flag => r
                    .try_get::<_, Option<bool>>(i)
                    .map(|v| v.map(|b| Cell::Int(i64::from(b)))),
            }
            .map_err(|e| self.err(e))?;
            row.push(cell.unwrap_or(Cell::Null));
        }
        Ok(row)
    }
}

/// A cell as a parameter of its column's type.
fn param(kind: Kind, cell: &Cell) -> Box<dyn ToSql + Sync> {
    match (kind, cell) {
        (Kind::Flag, Cell::Int(n)) => Box::new(Some(*n != 0)),
        (Kind::Flag, _) => Box::new(None::<bool>),
        (_, Cell::Int(n)) => Box::new(Some(*n)),
        (_, Cell::Text(s)) => Box::new(Some(s.clone())),
        (Kind::Int, Cell::Null) => Box::new(None::<i64>),
        (Kind::Text, Cell::Null) => Box::new(None::<String>),
    }
}

/// The key columns in the order SQLite sorts them: text by its bytes
/// (collation "C"), whatever the database's default collation is, so that
/// both sides hash the rows in one order.
fn order_by(table: &Table) -> String {
    table
        .key
        .iter()
        .map(
            |k| match table.columns.iter().find(|c| c.name == *k).map(|c| c.kind) {
                Some(Kind::Text) => format!("{k} COLLATE \"C\""),
                _ => (*k).to_owned(),
            },
        )
        .collect::<Vec<_>>()
        .join(", ")
}

impl Reader for Side<'_> {
    fn live_leases(&mut self, now: Millis) -> Result<(u64, Millis)> {
        // The claim's rule (store/postgres/read.rs: live_leases).
        let r = self
            .tx
            .query_one(
                "SELECT count(*), coalesce(max(lease_expires_at), 0) FROM jobs
                 WHERE status = 'extracting' AND lease_expires_at > $1
                   AND NOT coalesce(lease_expires_at - lease_ms > $2, false)",
                &[&now, &now.saturating_add(self.skew)],
            )
            .map_err(|e| self.err(e))?;
        let count: i64 = r.try_get(0).map_err(|e| self.err(e))?;
        let last: i64 = r.try_get(1).map_err(|e| self.err(e))?;
        Ok((count.unsigned_abs(), last))
    }

    fn scan(&mut self, table: &'static Table, each: &mut dyn FnMut(&[Row]) -> Result<()>) -> Result<()> {
        let sql = format!(
            "SELECT {} FROM {}{} ORDER BY {}",
            table.column_list(),
            table.name,
            table.rows_copied(),
            order_by(table)
        );
        let portal = self.tx.bind(sql.as_str(), &[]).map_err(|e| self.err(e))?;
        loop {
            let fetched = self
                .tx
                .query_portal(&portal, BATCH as i32)
                .map_err(|e| self.err(e))?;
            if fetched.is_empty() {
                return Ok(());
            }
            let rows = fetched
                .iter()
                .map(|r| self.row(table, r))
                .collect::<Result<Vec<Row>>>()?;
            each(&rows)?;
        }
    }
}

impl Writer for Side<'_> {
    fn count(&mut self, table: &Table) -> Result<u64> {
        let r = self
            .tx
            .query_one(&format!("SELECT count(*) FROM {}", table.name), &[])
            .map_err(|e| self.err(e))?;
        let n: i64 = r.try_get(0).map_err(|e| self.err(e))?;
        Ok(n.unsigned_abs())
    }

    fn clear(&mut self, table: &Table) -> Result<()> {
        self.tx
            .execute(&format!("DELETE FROM {}", table.name), &[])
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// One multi-row INSERT per batch: a round trip per batch, not per row.
    fn insert(&mut self, table: &'static Table, rows: &[Row]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let width = table.columns.len();
        let tuples: Vec<String> = (0..rows.len())
            .map(|r| {
                let marks: Vec<String> = (1..=width).map(|c| format!("${}", r * width + c)).collect();
                format!("({})", marks.join(", "))
            })
            .collect();
        let sql = format!(
            "INSERT INTO {} ({}) VALUES {}",
            table.name,
            table.column_list(),
            tuples.join(", ")
        );
        let params: Vec<Box<dyn ToSql + Sync>> = rows
            .iter()
            .flat_map(|row| row.iter().zip(table.columns).map(|(cell, c)| param(c.kind, cell)))
            .collect();
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
        self.tx
            .execute(sql.as_str(), &refs)
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// The identity's sequence continues above the largest copied id (or
    /// starts at 1 for an empty table).
    fn continue_ids(&mut self, table: &Table) -> Result<()> {
        if !table.identity {
            return Ok(());
        }
        let sql = format!(
            "SELECT setval(pg_get_serial_sequence('{t}', 'id'),
                           coalesce((SELECT max(id) FROM {t}), 1),
                           (SELECT max(id) FROM {t}) IS NOT NULL)",
            t = table.name
        );
        self.tx
            .execute(sql.as_str(), &[])
            .map(drop)
            .map_err(|e| self.err(e))
    }
}
