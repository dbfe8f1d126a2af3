//! The one library error type.
//!
//! Every variant names the thing it is about (a path, a document key), never a
//! secret. SQLite result codes are mapped here once (DESIGN §8), so callers can
//! act on meaning (`is_corrupt`, `is_disk_full`) rather than on codes.
//!
//! No variant names a type of a database client (rusqlite, the PostgreSQL
//! client, r2d2): their errors are held by the opaque [`DatabaseError`], so
//! upgrading one of those crates does not change this API.

use std::path::PathBuf;

use rusqlite::ErrorCode;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the library can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database's directory does not exist; nothing was created.
    #[error("{path}: directory does not exist")]
    MissingDirectory {
        /// The database path whose parent directory is missing.
        path: PathBuf,
    },
    /// The file exists but is not a SQLite database.
    #[error("{path}: not a SQLite database")]
    NotADatabase {
        /// The database file.
        path: PathBuf,
    },
    /// The database is damaged. No mirror sweeps run while the store is in this state.
    #[error("{path}: corrupt store: {detail}")]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// SQLite's message, or what the integrity check found.
        detail: String,
    },
    /// The database (or its directory) cannot be written.
    #[error("{path}: read-only: {detail}")]
    ReadOnly {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// The database cannot be opened at all.
    #[error("{path}: cannot open: {detail}")]
    CannotOpen {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// The SQLite library this build links has no FTS5, which the store's
    /// search index needs: build with the `bundled` feature (the default), or
    /// link a SQLite compiled with `SQLITE_ENABLE_FTS5`. Nothing was created.
    #[error("{path}: the linked SQLite {sqlite_version} has no FTS5, which leasehold's search index needs (build with the `bundled` feature, or link a SQLite compiled with SQLITE_ENABLE_FTS5)")]
    NoFts5 {
        /// The database that was to be opened.
        path: PathBuf,
        /// The version of the SQLite library in use, e.g. `3.40.1`.
        sqlite_version: String,
    },
    /// The file was written by a newer leasehold; refusing to downgrade it.
    #[error("{path}: schema version {found} is newer than this build supports ({supported})")]
    SchemaTooNew {
        /// The database file, or for PostgreSQL the database's URL without
        /// its password.
        path: PathBuf,
        /// The file's `user_version`.
        found: i64,
        /// The newest schema version this build knows how to use.
        supported: i64,
    },
    /// The database is a SQLite file but not a leasehold store.
    #[error("{path}: not a leasehold store: {detail}")]
    ForeignSchema {
        /// The database file.
        path: PathBuf,
        /// What gave it away (e.g. tables without a leasehold schema version).
        detail: String,
    },
    /// `journal_mode=WAL` did not take (e.g. a file system without shared memory).
    #[error("{path}: journal_mode is {mode:?}, expected \"wal\"")]
    WalNotEnabled {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite reported back instead of `wal`.
        mode: String,
    },
    /// The disk is full: the operation failed, nothing was lost; retry later.
    #[error("{path}: disk full")]
    DiskFull {
        /// The database file.
        path: PathBuf,
    },
    /// Still busy after the bounded retries.
    #[error("{path}: database stayed busy after {attempts} attempts{}", held_by(.holder))]
    Busy {
        /// The database file.
        path: PathBuf,
        /// How many times the operation was tried before giving up.
        attempts: u32,
        /// The process holding SQLite's write lock when the last attempt
        /// failed, e.g. `pid 4242 (stopped)`, if it could be found.
        holder: Option<String>,
    },
    /// Any other SQLite failure.
    #[error("{path}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// The error as SQLite reported it ([`DatabaseError::sqlite_code`]).
        #[source]
        source: DatabaseError,
    },
    /// The connection pool could not hand out a connection.
    #[error("{path}: connection pool: {source}")]
    Pool {
        /// The database file.
        path: PathBuf,
        /// The pool's error: a timeout waiting for a free connection, or one that failed to open.
        #[source]
        source: DatabaseError,
    },
    /// The PostgreSQL server could not be reached, or refused the login.
    #[error("{url}: cannot connect: {}", pg_detail(.source))]
    PostgresConnect {
        /// The database's URL without its password.
        url: String,
        /// The client's error (it never holds the password either).
        #[source]
        source: DatabaseError,
    },
    /// The connection to PostgreSQL went while a write waited for its
    /// answer, and whether the write was done could not be found out. It is
    /// not run again (it could claim twice or refuse its own completions);
    /// what it claimed, if anything, lapses with its leases.
    #[error("{url}: {reason}")]
    PostgresOutcomeUnknown {
        /// The database's URL without its password.
        url: String,
        /// What was lost and why the lookup failed.
        reason: String,
    },
    /// A pooler in front of the PostgreSQL server hands out server sessions
    /// in a way the store cannot work with (per statement: no transactions).
    #[error("{url}: {reason}")]
    PostgresPooler {
        /// The database's URL without its password.
        url: String,
        /// What the pooler refused and which pooling mode the store needs.
        reason: String,
    },
    /// A PostgreSQL statement or transaction failed.
    #[error("{url}: {}", pg_detail(.source))]
    Postgres {
        /// The database's URL without its password.
        url: String,
        /// The client's error: the server's message and SQLSTATE
        /// ([`DatabaseError::sqlstate`]), or a closed connection.
        #[source]
        source: DatabaseError,
    },
    /// The PostgreSQL connection pool could not hand out a connection.
    #[error("{url}: connection pool: {source}")]
    PostgresPool {
        /// The database's URL without its password.
        url: String,
        /// The pool's error: a timeout waiting for a free connection, or one that failed to open.
        #[source]
        source: DatabaseError,
    },
    /// An operation the PostgreSQL edition does not have yet (issue 14): the
    /// store refuses it by name rather than doing nothing.
    #[error("{operation} is not built on PostgreSQL yet; use a SQLite database for it")]
    NotOnPostgres {
        /// The operation refused, e.g. "the auth gate (admit)".
        operation: &'static str,
    },
    /// An operation that belongs to SQLite's file (integrity check, journal
    /// mode, checkpoint) asked of a PostgreSQL store.
    #[error("{operation} is a SQLite operation; this store is a PostgreSQL database")]
    SqliteOnly {
        /// The operation refused.
        operation: &'static str,
    },
    /// `leasehold migrate` moved this store's contents to another database:
    /// work here would be lost to the one in use (and could touch its files
    /// in a shared mirror).
    #[error("this store was moved to {to} by `leasehold migrate`; point --db (or LEASEHOLD_DB) there")]
    Moved {
        /// The database it was moved to, without a password.
        to: String,
    },
    /// No leasehold database at the location, and the store was opened
    /// without [`crate::StoreOptions::create`].
    #[error("{name}: no leasehold database here (wrong --data or --db?)")]
    NoStore {
        /// The location, without a password.
        name: String,
    },
    /// An operation of the PostgreSQL edition (the row-locked mirror cleanup)
    /// asked of a SQLite store, whose cleanup is fenced by file locks.
    #[error("{operation} is a PostgreSQL operation; this store is a SQLite file")]
    PostgresOnly {
        /// The operation refused.
        operation: &'static str,
    },
    /// A file-system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// A search ran past its time limit and was stopped: a well-formed
    /// query that matches too much to rank in time, not a usage error.
    #[error("search {query}: stopped after {} s, the search time limit: it matches too much to rank in time; narrow it (fewer prefixes, more words), or allow longer (--timeout)", .limit.as_secs_f64())]
    SearchTimedOut {
        /// The query, quoted (its start, when it is long).
        query: String,
        /// The time limit it ran into.
        limit: std::time::Duration,
    },
    /// A caller passed something the store cannot take.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// Which input was refused (an option name, a parameter).
        what: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// Something that cannot happen did (a bug, or a panic caught on a worker
    /// thread): not the caller's input, not the configuration.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Map a SQLite error on the database at `path` to what it means.
    pub(crate) fn from_sqlite(path: &std::path::Path, source: rusqlite::Error) -> Error {
        let path = path.to_path_buf();
        let Some(code) = source.sqlite_error_code() else {
            return Error::Sqlite {
                path,
                source: DatabaseError::sqlite(source),
            };
        };
        let detail = source.to_string();
        match code {
            ErrorCode::NotADatabase => Error::NotADatabase { path },
            ErrorCode::DatabaseCorrupt => Error::Corrupt { path, detail },
            ErrorCode::DiskFull => Error::DiskFull { path },
            ErrorCode::ReadOnly => Error::ReadOnly { path, detail },
            ErrorCode::CannotOpen => Error::CannotOpen { path, detail },
            _ => Error::Sqlite {
                path,
                source: DatabaseError::sqlite(source),
            },
        }
    }

    /// The store is damaged: stop, and never sweep the mirror.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, Error::Corrupt { .. } | Error::NotADatabase { .. })
    }

    /// The disk is full: nothing was lost, retry later.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Error::DiskFull { .. })
    }

    /// A configuration problem found at start (bad path, read-only, newer schema).
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Error::MissingDirectory { .. }
                | Error::NoFts5 { .. }
                | Error::ReadOnly { .. }
                | Error::CannotOpen { .. }
                | Error::SchemaTooNew { .. }
                | Error::ForeignSchema { .. }
                | Error::WalNotEnabled { .. }
                | Error::InvalidInput { .. }
                | Error::NotOnPostgres { .. }
                | Error::SqliteOnly { .. }
                | Error::PostgresOnly { .. }
                | Error::NoStore { .. }
                | Error::Moved { .. }
        )
    }
}

/// The end of [`Error::Busy`]'s message: who holds the write lock, if known.
fn held_by(holder: &Option<String>) -> String {
    holder
        .as_ref()
        .map(|h| format!("; database write lock held by {h}"))
        .unwrap_or_default()
}

/// A PostgreSQL client error with its cause: the client prints only its kind
/// ("db error", "error connecting to server") and keeps the server's message
/// or the OS error in its source, which a one-line message would lose.
fn pg_detail(e: &DatabaseError) -> String {
    let code = e
        .sqlstate()
        .map(|c| format!(" (SQLSTATE {c})"))
        .unwrap_or_default();
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}{code}"),
        None => format!("{e}{code}"),
    }
}

/// An error of a database client library: SQLite's (through rusqlite), the
/// PostgreSQL client's, or the connection pool's. Opaque, so that upgrading
/// one of those crates is not a breaking change of leasehold's API.
///
/// It is transparent in print: its `Display` and its
/// [`source`](std::error::Error::source) are the client error's own, so a
/// report that walks the chain of an [`Error`] reads SQLite's or the
/// server's message as before. What a caller acts on is here without the
/// client's types: [`sqlite_code`](Self::sqlite_code),
/// [`sqlstate`](Self::sqlstate), [`is_busy`](Self::is_busy). A caller that
/// depends on the same client crate itself can still
/// [`downcast`](Self::get_ref) to its error type.
pub struct DatabaseError {
    inner: Box<dyn std::error::Error + Send + Sync + 'static>,
    /// SQLite's extended result code, when SQLite said it.
    sqlite_code: Option<i32>,
    /// PostgreSQL's five-character SQLSTATE, when the server said it.
    sqlstate: Option<String>,
}

impl DatabaseError {
    /// A rusqlite error, with SQLite's extended code if it has one.
    pub(crate) fn sqlite(e: rusqlite::Error) -> DatabaseError {
        let sqlite_code = match &e {
            rusqlite::Error::SqliteFailure(f, _) => Some(f.extended_code),
            _ => None,
        };
        DatabaseError {
            inner: Box::new(e),
            sqlite_code,
            sqlstate: None,
        }
    }

    /// A PostgreSQL client error, with the server's SQLSTATE if it has one.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(e: postgres::Error) -> DatabaseError {
        DatabaseError {
            sqlstate: e.code().map(|c| c.code().to_owned()),
            inner: Box::new(e),
            sqlite_code: None,
        }
    }

    /// A PostgreSQL client's error with a plainer word on what it means
    /// (`hint`, said after it).
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres_explained(e: postgres::Error, hint: &'static str) -> DatabaseError {
        DatabaseError {
            sqlstate: e.code().map(|c| c.code().to_owned()),
            inner: Box::new(Explained { inner: e, hint }),
            sqlite_code: None,
        }
    }

    /// A connection pool's error (a timeout, or the last connect failure).
    pub(crate) fn pool(e: r2d2::Error) -> DatabaseError {
        DatabaseError {
            inner: Box::new(e),
            sqlite_code: None,
            sqlstate: None,
        }
    }

    /// SQLite's extended result code (e.g. 2067, `SQLITE_CONSTRAINT_UNIQUE`;
    /// its low byte is the primary code), when the error came from SQLite.
    pub fn sqlite_code(&self) -> Option<i32> {
        self.sqlite_code
    }

    /// PostgreSQL's SQLSTATE (e.g. `40001`), when the server sent one.
    pub fn sqlstate(&self) -> Option<&str> {
        self.sqlstate.as_deref()
    }

    /// The database was busy or locked by another connection (SQLite's
    /// `SQLITE_BUSY`/`SQLITE_LOCKED`, PostgreSQL's `55P03` lock not
    /// available): worth trying again later.
    pub fn is_busy(&self) -> bool {
        const SQLITE_BUSY: i32 = 5;
        const SQLITE_LOCKED: i32 = 6;
        matches!(
            self.sqlite_code.map(|c| c & 0xff),
            Some(SQLITE_BUSY | SQLITE_LOCKED)
        ) || self.sqlstate() == Some("55P03")
    }

    /// The client library's own error, for a caller that depends on that
    /// library itself and wants to `downcast_ref` to its type. Which type it
    /// is (and its version) is not part of leasehold's API.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.inner
    }
}

/// An error and what it means, said after it.
#[cfg(feature = "postgres")]
#[derive(Debug)]
struct Explained {
    inner: postgres::Error,
    hint: &'static str,
}

#[cfg(feature = "postgres")]
impl std::fmt::Display for Explained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.inner, self.hint)
    }
}

#[cfg(feature = "postgres")]
impl std::error::Error for Explained {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.inner)
    }
}

impl std::fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl std::fmt::Debug for DatabaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl std::error::Error for DatabaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.source()
    }
}

/// SQLite said BUSY or LOCKED: the transaction may be retried after a ROLLBACK.
pub(crate) fn is_retryable(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message of `e`'s chain, outermost first.
    fn chain(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
        std::iter::successors(Some(e), |e| e.source())
            .map(|e| e.to_string())
            .collect()
    }

    /// An error SQLite raised on a real file: leasehold's `Error` names no
    /// rusqlite type, yet its chain still reads SQLite's own message, and
    /// the code is there as a number.
    #[test]
    fn the_source_chain_reaches_sqlites_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chain.db");
        let conn = rusqlite::Connection::open(&path).unwrap();
        let e = conn.execute("INSERT INTO nowhere VALUES (1)", []).unwrap_err();
        let err = Error::from_sqlite(&path, e);
        let messages = chain(&err);
        assert!(
            messages[0].starts_with(&path.display().to_string()),
            "{messages:?}"
        );
        assert!(messages[0].ends_with("no such table: nowhere"), "{messages:?}");
        let Error::Sqlite { source, .. } = &err else {
            panic!("not Error::Sqlite: {err:?}");
        };
        assert_eq!(source.to_string(), "no such table: nowhere");
        assert_eq!(source.sqlite_code(), Some(1), "SQLITE_ERROR");
        assert!(!source.is_busy());
        // Someone who uses rusqlite too can still get at its error.
        assert!(source.get_ref().downcast_ref::<rusqlite::Error>().is_some());
    }

    #[test]
    fn the_extended_code_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unique.db");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (x UNIQUE); INSERT INTO t VALUES (1);")
            .unwrap();
        let e = conn.execute("INSERT INTO t VALUES (1)", []).unwrap_err();
        let Error::Sqlite { source, .. } = Error::from_sqlite(&path, e) else {
            panic!("a constraint failure is Error::Sqlite");
        };
        assert_eq!(source.sqlite_code(), Some(2067), "SQLITE_CONSTRAINT_UNIQUE");
        let messages = chain(&source);
        assert!(
            messages[0].contains("UNIQUE constraint failed: t.x"),
            "{messages:?}"
        );
    }

    #[test]
    fn busy_is_told_by_the_code() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("busy.db");
        let a = rusqlite::Connection::open(&path).unwrap();
        let b = rusqlite::Connection::open(&path).unwrap();
        b.busy_timeout(std::time::Duration::ZERO).unwrap();
        a.execute_batch("CREATE TABLE t (x); BEGIN IMMEDIATE; INSERT INTO t VALUES (1);")
            .unwrap();
        let e = b.execute_batch("BEGIN IMMEDIATE").unwrap_err();
        assert!(is_retryable(&e));
        let e = DatabaseError::sqlite(e);
        assert!(e.is_busy(), "{e:?}");
        assert_eq!(e.sqlite_code().map(|c| c & 0xff), Some(5), "SQLITE_BUSY");
    }
}
