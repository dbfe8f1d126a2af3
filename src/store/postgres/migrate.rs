//! Applying `schema.pg.sql`: each `-- version: N` section once, in order, each
//! in its own transaction, one opener at a time.
//!
//! The applied version lives in `leasehold_schema`, a one-row table outside
//! the sections (PostgreSQL has no `user_version`). Every transaction here
//! first takes a transaction-level advisory lock on [`MIGRATION_LOCK`], so
//! openers that start together queue up: the first applies a section, the
//! next finds it applied and skips it. The lock ends with the transaction, so
//! a process killed mid-section leaves neither the lock nor half a section
//! behind (PostgreSQL's DDL is transactional).
//!
//! The transactions run at READ COMMITTED, PostgreSQL's default, on purpose:
//! each statement there takes a fresh snapshot, so the version read after the
//! lock was granted sees what the previous holder committed. At REPEATABLE
//! READ the snapshot could predate the wait, and a section would be applied
//! twice.

use ::postgres::{Client, Transaction};
use std::path::PathBuf;

use super::conn::first_value;
use crate::error::{Error, Result};
use crate::store::schema::{sections, PG_SCHEMA_SQL};

/// The advisory lock key that serializes migrations on one database: the
/// bytes of "leasehol" (ASCII), so it is recognisable in `pg_locks`
/// (classid 0x6c656173, objid 0x65686f6c) and unlikely to meet another
/// application's key.
pub(crate) const MIGRATION_LOCK: i64 = 0x6c65_6173_6568_6f6c;

/// The highest `-- version: N` section in `schema.pg.sql`.
pub fn schema_version() -> i64 {
    sections(PG_SCHEMA_SQL).last().map(|s| s.0).unwrap_or(0)
}

/// The table that records the applied version. Created by the opener, not by
/// a section, since it must exist before the first section is looked up.
const VERSION_TABLE: &str = "
    CREATE TABLE IF NOT EXISTS leasehold_schema (
        id      SMALLINT PRIMARY KEY DEFAULT 1 CHECK (id = 1),
        version BIGINT   NOT NULL CHECK (version >= 0)
    );
    INSERT INTO leasehold_schema (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;";

/// Bring the database at `label` up to [`schema_version`]; returns the
/// version it was at before.
///
/// # Failure
/// [`Error::SchemaTooNew`] when a newer leasehold migrated it (nothing is
/// changed), [`Error::Postgres`] when a statement fails (that section is
/// rolled back; the ones before it stay applied).
pub(crate) fn migrate(client: &mut Client, label: &str) -> Result<i64> {
    let found = prepare(client, label)?;
    for (version, sql) in sections(PG_SCHEMA_SQL).into_iter().filter(|s| s.0 > found) {
        apply(client, label, version, &sql)?;
    }
    Ok(found)
}

/// Whether leasehold's tables were ever made here (the version table exists).
pub(crate) fn has_schema(client: &mut Client, label: &str) -> Result<bool> {
    let value = one_value(
        client,
        "SELECT to_regclass('leasehold_schema') IS NOT NULL",
        label,
    )?;
    Ok(value.as_deref() == Some("t"))
}

/// The applied version, read without taking the migration lock.
pub(crate) fn applied_version(client: &mut Client, label: &str) -> Result<i64> {
    let value = one_value(client, "SELECT version FROM leasehold_schema", label)?;
    value
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::Internal(format!("{label}: leasehold_schema holds no version")))
}

/// The first column of the first row of `sql`, as text ([`first_value`]).
fn one_value(client: &mut Client, sql: &str, label: &str) -> Result<Option<String>> {
    first_value(client, sql).map_err(|source| pg_error(label, source))
}

/// Create the version table if needed and read the version, refusing a newer one.
fn prepare(client: &mut Client, label: &str) -> Result<i64> {
    let mut tx = begin_locked(client, label)?;
    tx.batch_execute(VERSION_TABLE)
        .map_err(|source| pg_error(label, source))?;
    let found = read_version(&mut tx, label)?;
    tx.commit().map_err(|source| pg_error(label, source))?;
    refuse_newer(found, label)?;
    Ok(found)
}

/// Apply one section unless another opener did while this one waited.
fn apply(client: &mut Client, label: &str, version: i64, sql: &str) -> Result<()> {
    let mut tx = begin_locked(client, label)?;
    let now = read_version(&mut tx, label)?;
    refuse_newer(now, label)?;
    if now >= version {
        // Dropping the transaction rolls it back, which releases the lock.
        return Ok(());
    }
    tx.batch_execute(sql).map_err(|source| pg_error(label, source))?;
    tx.execute("UPDATE leasehold_schema SET version = $1", &[&version])
        .map_err(|source| pg_error(label, source))?;
    tx.commit().map_err(|source| pg_error(label, source))
}

fn begin_locked<'a>(client: &'a mut Client, label: &str) -> Result<Transaction<'a>> {
    let mut tx = client.transaction().map_err(|source| pg_error(label, source))?;
    // The open's connection sets them for its session only when it keeps
    // one (`pooler.rs`); a migration waits no longer either way.
    tx.batch_execute(&super::session_limits("SET LOCAL"))
        .map_err(|source| pg_error(label, source))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(|source| pg_error(label, source))?;
    Ok(tx)
}

fn read_version(tx: &mut Transaction<'_>, label: &str) -> Result<i64> {
    tx.query_one("SELECT version FROM leasehold_schema", &[])
        .and_then(|row| row.try_get(0))
        .map_err(|source| pg_error(label, source))
}

fn refuse_newer(found: i64, label: &str) -> Result<()> {
    if found > schema_version() {
        return Err(Error::SchemaTooNew {
            path: PathBuf::from(label),
            found,
            supported: schema_version(),
        });
    }
    Ok(())
}

pub(crate) fn pg_error(label: &str, source: ::postgres::Error) -> Error {
    Error::Postgres {
        url: label.to_string(),
        source: crate::error::DatabaseError::postgres(source),
    }
}
