//! Where a store's database is: a SQLite file, or a PostgreSQL database named
//! by URL. The text decides: `postgres://` or `postgresql://` at its start is
//! PostgreSQL, anything else a path (`--db`, the configuration, `LEASEHOLD_DB`
//! all give text).

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

/// The URL schemes that name a PostgreSQL database.
const POSTGRES_SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// A database location. Build it with [`DbLocation::of`]; [`crate::Store::open`]
/// takes anything it can be built from.
#[derive(Clone, PartialEq, Eq)]
pub enum DbLocation {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database: the URL as given (it may hold a password, so it
    /// is never printed: `Display` and `Debug` show the scheme only).
    Postgres(String),
}

impl DbLocation {
    /// The location `text` names: PostgreSQL when it begins with one of the
    /// PostgreSQL schemes (in any case), else a path.
    pub fn of(text: impl AsRef<OsStr>) -> DbLocation {
        let text = text.as_ref();
        match text.to_str() {
            Some(s) if is_postgres_url(s) => DbLocation::Postgres(s.to_owned()),
            _ => DbLocation::Sqlite(PathBuf::from(text)),
        }
    }

    /// The SQLite file, if it is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            DbLocation::Sqlite(p) => Some(p),
            DbLocation::Postgres(_) => None,
        }
    }
}

fn is_postgres_url(s: &str) -> bool {
    POSTGRES_SCHEMES.iter().any(|scheme| {
        s.get(..scheme.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
    })
}

impl AsRef<OsStr> for DbLocation {
    fn as_ref(&self) -> &OsStr {
        match self {
            DbLocation::Sqlite(p) => p.as_os_str(),
            DbLocation::Postgres(url) => OsStr::new(url),
        }
    }
}

/// Never the URL itself: it may carry a password. The store's own name for a
/// PostgreSQL database (`Store::path`) is rebuilt without it.
impl fmt::Debug for DbLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbLocation::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            DbLocation::Postgres(_) => f.write_str("Postgres(<url>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_picks_the_engine() {
        for url in ["postgres://a@h/q", "postgresql://h/q", "POSTGRES://h/q"] {
            assert!(matches!(DbLocation::of(url), DbLocation::Postgres(_)), "{url}");
        }
        for path in ["q.db", "/data/leasehold.db", "postgres:/x", "./postgres://x", ""] {
            assert_eq!(
                DbLocation::of(path),
                DbLocation::Sqlite(PathBuf::from(path)),
                "{path}"
            );
        }
        let p = PathBuf::from("dir/q.db");
        assert_eq!(DbLocation::of(&p).path(), Some(p.as_path()));
    }

    #[test]
    fn debug_never_shows_the_url() {
        let shown = format!("{:?}", DbLocation::of("postgres://alice:hunter2@h/q"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
