//! Opening a store: validate the file without touching it, set WAL once, migrate
//! from `schema.sql`, and build the connection pool.
//!
//! Order matters so that a bad file is never modified: every check that can fail
//! (missing directory, read-only, not a database, newer schema, corruption seen on
//! first read) runs before the first write (`journal_mode=WAL`, migrations).
//!
//! A read-only open ([`StoreOptions::read_only`]) makes no write at all: no
//! WAL switch, no migration; `mode=ro`, or `immutable=1` where SQLite can
//! neither find nor make the `-wal` and `-shm` files it shares with writers.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::pool::{self, Pool};
use crate::error::{DatabaseError, Error, Result};
use crate::store::options::StoreOptions;
use crate::store::schema::{sections, SCHEMA_SQL};

/// The highest `-- version: N` section in `schema.sql`.
pub fn schema_version() -> i64 {
    migrations().last().map(|m| m.0).unwrap_or(0)
}

/// `schema.sql` split into `(version, sql)` sections.
fn migrations() -> Vec<(i64, String)> {
    sections(SCHEMA_SQL)
}

/// How a SQLite store was opened ([`crate::Store::access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and written: the default.
    ReadWrite,
    /// Read only ([`StoreOptions::read_only`]), sharing the `-wal` and `-shm`
    /// files with any writer (SQLite's `mode=ro`): it sees every commit.
    ReadOnly,
    /// Read only, as a file nobody changes (SQLite's `immutable=1`): no
    /// `-wal` or `-shm` could be found or made beside it (a read-only
    /// medium), so commits that only a `-wal` file holds are not seen.
    Immutable,
}

/// Validate and pool the database at `path`: migrated and read-write, or
/// read-only as [`StoreOptions::read_only`] asks.
pub(crate) fn open_pool(path: &Path, opts: &StoreOptions) -> Result<(Pool, Access)> {
    require_fts5(path)?;
    if opts.read_only {
        return open_read_only(path, opts);
    }
    Ok((open_read_write(path, opts)?, Access::ReadWrite))
}

/// Refuse, before anything is created, a SQLite library without FTS5 (a
/// system SQLite built without it, linked with `--no-default-features`):
/// the schema's search index and the ranking function need it. Asked once
/// per process, of an in-memory database.
fn require_fts5(path: &Path) -> Result<()> {
    static HAS_FTS5: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // A library that cannot even open an in-memory database is left to fail
    // on the file, with SQLite's own error.
    let has = *HAS_FTS5.get_or_init(|| Connection::open_in_memory().map_or(true, |c| has_fts5(&c)));
    if has {
        Ok(())
    } else {
        Err(no_fts5(path))
    }
}

fn no_fts5(path: &Path) -> Error {
    Error::NoFts5 {
        path: path.to_path_buf(),
        sqlite_version: rusqlite::version().to_owned(),
    }
}

/// Whether `conn` knows the `fts5` module: false only when SQLite says it
/// has no such module.
fn has_fts5(conn: &Connection) -> bool {
    match conn.execute_batch(
        "CREATE VIRTUAL TABLE temp.leasehold_fts5_probe USING fts5(x); DROP TABLE temp.leasehold_fts5_probe;",
    ) {
        Err(rusqlite::Error::SqliteFailure(_, Some(msg))) => !msg.starts_with("no such module"),
        _ => true,
    }
}

/// Validate, migrate and pool the database at `path`.
fn open_read_write(path: &Path, opts: &StoreOptions) -> Result<Pool> {
    check_location(path)?;
    let exists = path.exists();
    if !exists && !opts.create {
        return Err(Error::NoStore {
            name: path.display().to_string(),
        });
    }
    if !exists {
        create_private(path)?;
    }
    let mut conn = open_connection(path, exists)?;
    configure(&conn, opts, path)?;
    let version = read_user_version(&conn, path)?;
    if version > schema_version() {
        return Err(Error::SchemaTooNew {
            path: path.to_path_buf(),
            found: version,
            supported: schema_version(),
        });
    }
    if version > 0 {
        probe_tables(&conn, path, version)?;
    } else if exists && has_foreign_tables(&conn, path)? && read_user_version(&conn, path)? == 0 {
        // (Re-read: another process may have just migrated a fresh file.)
        return Err(Error::ForeignSchema {
            path: path.to_path_buf(),
            detail: "it has tables but no leasehold schema version".into(),
        });
    }
    enable_wal(&conn, path)?;
    migrate(&mut conn, path, version)?;
    // What SQL cannot say in a section: the index's title and author columns
    // (version 12), and the word index without its copy of the texts.
    crate::store::sqlite::search_index::bring_to_current_form(&mut conn)
        .map_err(|e| Error::from_sqlite(path, e))?;
    let pool = pool::build(path, pool_target(path, Access::ReadWrite), opts)?;
    // The pool's first connection opens before this one closes: the last
    // connection to close a file checkpoints it and deletes its `-wal` and
    // `-shm` files, which the next open would make again.
    let first = pool.get().map_err(|source| Error::Pool {
        path: path.to_path_buf(),
        source: DatabaseError::pool(source),
    })?;
    drop(conn);
    drop(first);
    Ok(pool)
}

/// Open the database at `path` for reading only: `mode=ro`, else (no `-shm`
/// to share) `immutable=1`. It must exist and carry this build's schema, which
/// a read-only open cannot migrate.
fn open_read_only(path: &Path, opts: &StoreOptions) -> Result<(Pool, Access)> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(Error::CannotOpen {
                path: path.to_path_buf(),
                detail: "it is a directory".into(),
            })
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NoStore {
                name: path.display().to_string(),
            })
        }
        Err(e) => {
            return Err(Error::CannotOpen {
                path: path.to_path_buf(),
                detail: e.to_string(),
            })
        }
    }
    let (conn, access) = match first_read(path, Access::ReadOnly) {
        Ok(conn) => (conn, Access::ReadOnly),
        // No `-shm` to share, and none can be made: a read-only medium.
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
            ) =>
        {
            let conn = first_read(path, Access::Immutable).map_err(|e| Error::from_sqlite(path, e))?;
            (conn, Access::Immutable)
        }
        Err(e) => return Err(Error::from_sqlite(path, e)),
    };
    configure(&conn, opts, path)?;
    let version = read_user_version(&conn, path)?;
    if version > schema_version() {
        return Err(Error::SchemaTooNew {
            path: path.to_path_buf(),
            found: version,
            supported: schema_version(),
        });
    }
    if version == 0 {
        return Err(Error::ForeignSchema {
            path: path.to_path_buf(),
            detail: "it has no leasehold schema version".into(),
        });
    }
    if version < schema_version() {
        return Err(Error::ReadOnly {
            path: path.to_path_buf(),
            detail: format!(
                "it has schema version {version}, older than this build's {}, and a read-only \
                 file cannot be brought up to date: open it once where it can be written",
                schema_version()
            ),
        });
    }
    probe_tables(&conn, path, version)?;
    drop(conn);
    Ok((pool::build(path, pool_target(path, access), opts)?, access))
}

/// A read-only connection to `path` that has read the schema, which makes
/// SQLite open (or fail to open) the `-wal` and `-shm` files.
fn first_read(path: &Path, access: Access) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(uri(path, access), read_only_flags())?;
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))?;
    Ok(conn)
}

fn read_only_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI
}

/// The characters of a path that a SQLite URI must escape (and every byte
/// outside ASCII, which percent-encoding escapes anyway).
const URI_ESCAPED: &percent_encoding::AsciiSet =
    &percent_encoding::CONTROLS.add(b' ').add(b'?').add(b'#').add(b'%');

/// `path` as a SQLite URI that opens it as `access` says.
fn uri(path: &Path, access: Access) -> String {
    let query = match access {
        Access::Immutable => "immutable=1",
        Access::ReadOnly | Access::ReadWrite => "mode=ro",
    };
    let escaped = percent_encoding::percent_encode(path.as_os_str().as_encoded_bytes(), URI_ESCAPED);
    format!("file:{escaped}?{query}")
}

/// Refuse a missing directory, a read-only file or directory, before SQLite
/// creates anything. Permission bits are checked by hand because root ignores them.
fn check_location(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir_meta = std::fs::metadata(&dir).map_err(|_| Error::MissingDirectory { path: dir.clone() })?;
    if !dir_meta.is_dir() {
        return Err(Error::MissingDirectory { path: dir });
    }
    if dir_meta.permissions().readonly() {
        return Err(Error::ReadOnly {
            path: dir,
            detail: "the database directory is not writable (WAL needs to create files there)".into(),
        });
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(Error::CannotOpen {
            path: path.to_path_buf(),
            detail: "it is a directory".into(),
        }),
        Ok(m) if m.permissions().readonly() => Err(Error::ReadOnly {
            path: path.to_path_buf(),
            detail: "the database file is not writable".into(),
        }),
        _ => Ok(()),
    }
}

/// Owner-only access for the database: the queue names every document, and
/// the outbox holds extracted text.
const FILE_MODE: u32 = 0o600;

/// Create the database file owner-only before SQLite would (SQLite creates it
/// 0644 less the umask, and gives its `-wal` and `-shm` the database's own
/// mode, so this one file decides all three). The mode is set explicitly after
/// creating, since `open`'s mode is masked by the umask. A file another process
/// created first is left as it is: that process made it the same way.
fn create_private(path: &Path) -> Result<()> {
    let created = crate::portable::create_mode(
        std::fs::OpenOptions::new().write(true).create_new(true),
        FILE_MODE,
    )
    .open(path);
    let file = match created {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => {
            return Err(Error::CannotOpen {
                path: path.to_path_buf(),
                detail: format!("cannot create the database file: {e}"),
            })
        }
    };
    crate::portable::set_file_mode(&file, FILE_MODE).map_err(|e| Error::CannotOpen {
        path: path.to_path_buf(),
        detail: format!("cannot make the database file private: {e}"),
    })
}

fn open_connection(path: &Path, exists: bool) -> Result<Connection> {
    let mut flags =
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    if !exists {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags).map_err(|e| Error::from_sqlite(path, e))?;
    if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
        return Err(Error::ReadOnly {
            path: path.to_path_buf(),
            detail: "SQLite opened it read-only".into(),
        });
    }
    Ok(conn)
}

/// The per-connection settings (`pool::configure_raw`) on the opening
/// connection, its error naming the file.
fn configure(conn: &Connection, opts: &StoreOptions, path: &Path) -> Result<()> {
    pool::configure_raw(conn, opts).map_err(|e| Error::from_sqlite(path, e))
}

pub(crate) fn read_user_version(conn: &Connection, path: &Path) -> Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| Error::from_sqlite(path, e))
}

/// The schema version from which `history` is a rowid table.
const HISTORY_APPENDED: i64 = 17;

/// A cheap read of each b-tree's root and rightmost path, so that a truncated or
/// damaged file is found at open rather than mid-run. A full `quick_check` is left
/// to `doctor`, since it reads the whole file.
fn probe_tables(conn: &Connection, path: &Path, version: i64) -> Result<()> {
    let probes = [
        "SELECT max(id) FROM jobs",
        "SELECT max(seq) FROM history WHERE job_id = (SELECT max(job_id) FROM history)",
        "SELECT max(doc_key) FROM jobs",
        "SELECT id FROM jobs WHERE status = 'discovered' ORDER BY id DESC LIMIT 1",
        "SELECT retry_at FROM jobs WHERE status = 'retrying' ORDER BY retry_at DESC LIMIT 1",
        "SELECT lease_expires_at FROM jobs WHERE status = 'extracting' ORDER BY lease_expires_at DESC LIMIT 1",
        "SELECT max(job_id) FROM history",
    ];
    // From version 17 history is a rowid table beside its primary key's
    // index (schema.sql), and the lines above read only that index.
    let appended_history = (version >= HISTORY_APPENDED).then_some("SELECT max(rowid) FROM history");
    for sql in probes.into_iter().chain(appended_history) {
        let res = conn
            .prepare(sql)
            .and_then(|mut stmt| stmt.query([])?.next().map(|_| ()));
        if let Err(e) = res {
            let err = Error::from_sqlite(path, e);
            return Err(match err {
                Error::Sqlite { path, source } => Error::ForeignSchema {
                    path,
                    detail: source.to_string(),
                },
                other => other,
            });
        }
    }
    Ok(())
}

fn has_foreign_tables(conn: &Connection, path: &Path) -> Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(|e| Error::from_sqlite(path, e))
}

/// WAL is persistent, so set it once and read it back: SQLite ignores what it
/// cannot do (e.g. no shared memory) and answers with the mode it kept.
/// Switching a fresh file to WAL needs its exclusive lock; SQLite answers BUSY
/// at once (without the busy handler) when two processes create the file
/// together, so the switch is retried a bounded number of times, jittered.
fn enable_wal(conn: &Connection, path: &Path) -> Result<()> {
    let mut attempt = 0u32;
    let mode: String = loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)) {
            Ok(mode) => break mode,
            Err(e) if crate::error::is_retryable(&e) && attempt < WAL_SWITCH_RETRIES => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(1 + fastrand::u64(0..20)));
            }
            Err(e) => return Err(Error::from_sqlite(path, e)),
        }
    };
    if mode.eq_ignore_ascii_case("wal") {
        Ok(())
    } else {
        Err(Error::WalNotEnabled {
            path: path.to_path_buf(),
            mode,
        })
    }
}

/// How often a BUSY switch to WAL is tried again (about a second in all).
const WAL_SWITCH_RETRIES: u32 = 100;

/// Apply every section newer than `from`, each in its own IMMEDIATE transaction,
/// re-reading the version inside it so two processes opening at once migrate once.
fn migrate(conn: &mut Connection, path: &Path, from: i64) -> Result<()> {
    for (version, sql) in migrations().into_iter().filter(|m| m.0 > from) {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| Error::from_sqlite(path, e))?;
        let now: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| Error::from_sqlite(path, e))?;
        if now >= version {
            continue;
        }
        tx.execute_batch(&sql).map_err(|e| Error::from_sqlite(path, e))?;
        tx.pragma_update(None, "user_version", version)
            .map_err(|e| Error::from_sqlite(path, e))?;
        tx.commit().map_err(|e| Error::from_sqlite(path, e))?;
    }
    Ok(())
}

/// What the pool opens for `access`: the file itself, read-write, or its
/// read-only URI.
fn pool_target(path: &Path, access: Access) -> (PathBuf, OpenFlags) {
    match access {
        Access::ReadWrite => (
            path.to_path_buf(),
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        ),
        Access::ReadOnly | Access::Immutable => (PathBuf::from(uri(path, access)), read_only_flags()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FTS5 is found where it is (every build this crate's CI makes), and
    /// its absence is a typed configuration error: the in-memory connection
    /// has its virtual table modules dropped, as a SQLite built without
    /// FTS5 would lack it.
    #[test]
    fn a_sqlite_without_fts5_is_refused_by_name() {
        let conn = Connection::open_in_memory().unwrap();
        assert!(has_fts5(&conn));
        assert!(require_fts5(Path::new("store.db")).is_ok());
        // SAFETY: the connection is open; a null list keeps no module.
        let rc = unsafe { rusqlite::ffi::sqlite3_drop_modules(conn.handle(), std::ptr::null_mut()) };
        assert_eq!(rc, rusqlite::ffi::SQLITE_OK);
        assert!(!has_fts5(&conn));
        let err = no_fts5(Path::new("store.db"));
        assert!(err.is_config());
        assert!(err.to_string().contains("has no FTS5"), "{err}");
    }

    #[test]
    fn schema_has_a_first_version_with_the_jobs_table() {
        let m = migrations();
        assert_eq!(m[0].0, 1);
        assert!(m[0].1.contains("CREATE TABLE jobs"));
        assert_eq!(schema_version(), m.last().unwrap().0);
    }
}
