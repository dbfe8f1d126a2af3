//! The one library error type.
//!
//! Every variant names the thing it is about (a path, a document key), never a
//! secret. SQLite result codes are mapped here once (DESIGN §8), so callers can
//! act on meaning (`is_corrupt`, `is_disk_full`) rather than on codes.

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
        /// The error as rusqlite reported it.
        #[source]
        source: rusqlite::Error,
    },
    /// The connection pool could not hand out a connection.
    #[error("{path}: connection pool: {source}")]
    Pool {
        /// The database file.
        path: PathBuf,
        /// The pool's error: a timeout waiting for a free connection, or one that failed to open.
        #[source]
        source: r2d2::Error,
    },
    /// The PostgreSQL server could not be reached, or refused the login.
    #[error("{url}: cannot connect: {}", pg_detail(.source))]
    PostgresConnect {
        /// The database's URL without its password.
        url: String,
        /// The client's error (it never holds the password either).
        #[source]
        source: postgres::Error,
    },
    /// A PostgreSQL statement or transaction failed.
    #[error("{url}: {}", pg_detail(.source))]
    Postgres {
        /// The database's URL without its password.
        url: String,
        /// The client's error: the server's message and SQLSTATE, or a closed connection.
        #[source]
        source: postgres::Error,
    },
    /// The PostgreSQL connection pool could not hand out a connection.
    #[error("{url}: connection pool: {source}")]
    PostgresPool {
        /// The database's URL without its password.
        url: String,
        /// The pool's error: a timeout waiting for a free connection, or one that failed to open.
        #[source]
        source: r2d2::Error,
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
            return Error::Sqlite { path, source };
        };
        let detail = source.to_string();
        match code {
            ErrorCode::NotADatabase => Error::NotADatabase { path },
            ErrorCode::DatabaseCorrupt => Error::Corrupt { path, detail },
            ErrorCode::DiskFull => Error::DiskFull { path },
            ErrorCode::ReadOnly => Error::ReadOnly { path, detail },
            ErrorCode::CannotOpen => Error::CannotOpen { path, detail },
            _ => Error::Sqlite { path, source },
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
fn pg_detail(e: &postgres::Error) -> String {
    let code = e
        .code()
        .map(|c| format!(" (SQLSTATE {})", c.code()))
        .unwrap_or_default();
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}{code}"),
        None => format!("{e}{code}"),
    }
}

/// SQLite said BUSY or LOCKED: the transaction may be retried after a ROLLBACK.
pub(crate) fn is_retryable(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}
