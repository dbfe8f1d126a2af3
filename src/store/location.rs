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
    /// is never printed: `Debug` shows the variant only).
    Postgres(String),
    /// A URL of another scheme (`postgress://`, `mysql://`), kept as its
    /// scheme and `://` alone: refused when opened, by that alone, since the
    /// rest may hold a password that a path would print.
    Unsupported(String),
}

impl DbLocation {
    /// The location `text` names: PostgreSQL when it begins with one of the
    /// PostgreSQL schemes (in any case), else a path.
    pub fn of(text: impl AsRef<OsStr>) -> DbLocation {
        let text = text.as_ref();
        match text.to_str().map(str::trim) {
            Some(s) if is_postgres_url(s) => DbLocation::Postgres(s.to_owned()),
            Some(s) => match url_scheme(s) {
                Some(scheme) => DbLocation::Unsupported(format!("{scheme}://")),
                None => DbLocation::Sqlite(PathBuf::from(text)),
            },
            None => DbLocation::Sqlite(PathBuf::from(text)),
        }
    }

    /// The SQLite file, if it is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            DbLocation::Sqlite(p) => Some(p),
            DbLocation::Postgres(_) | DbLocation::Unsupported(_) => None,
        }
    }
}

/// The scheme of text shaped like a URL (`scheme://…`, RFC 3986's scheme
/// characters), which no file path of ours starts with.
fn url_scheme(s: &str) -> Option<&str> {
    let (scheme, _) = s.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    let valid = first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
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
            DbLocation::Unsupported(scheme) => OsStr::new(scheme),
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
            DbLocation::Unsupported(scheme) => write!(f, "Unsupported({scheme}…)"),
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
        for bad in ["postgress://u:hunter2@h/q", " mysql://h/q", "pg+x://u:pw@h"] {
            let found = DbLocation::of(bad);
            assert!(matches!(found, DbLocation::Unsupported(_)), "{bad}: {found:?}");
            assert!(!format!("{found:?}").contains("hunter2"));
        }
        assert_eq!(
            DbLocation::of(" postgres://h/q\n"),
            DbLocation::Postgres("postgres://h/q".into())
        );
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
