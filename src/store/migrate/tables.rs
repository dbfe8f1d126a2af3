//! What a migration moves: every table of the schema with every column, in
//! the order foreign keys need, and the canonical form of a row that both
//! sides' checksums are computed over.

use sha2::{Digest, Sha256};

/// How a column's values are held. The two schemas differ only in the flag:
/// SQLite's 0/1 INTEGER is PostgreSQL's BOOLEAN; both are a [`Cell::Int`]
/// of 0 or 1 here, so the checksums compare values, not encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Int,
    Text,
    Flag,
}

/// One column of a table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column {
    pub name: &'static str,
    pub kind: Kind,
}

/// One table: its columns, the primary key the rows are read in (the
/// checksum's order), and what the target needs besides the rows.
#[derive(Debug)]
pub(crate) struct Table {
    pub name: &'static str,
    pub columns: &'static [Column],
    pub key: &'static [&'static str],
    /// `id` is an identity column on PostgreSQL: its sequence must continue
    /// above the copied ids (SQLite's rowid does so by itself).
    // PostgreSQL only (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub identity: bool,
    /// The schema inserts this table's rows itself (the one `outbox_totals`
    /// row): the target's seed is replaced by the source's row, and its
    /// presence does not make a target "not empty".
    pub seeded: bool,
    /// The rows not copied, by a column and its value: a row that holds
    /// only against the source file (`meta`'s
    /// [`CHECKED_SHARDS`](crate::store::CHECKED_SHARDS), stamps of the
    /// source's history order). They are not read, written or compared.
    pub left_behind: Option<(&'static str, &'static str)>,
}

const fn int(name: &'static str) -> Column {
    Column {
        name,
        kind: Kind::Int,
    }
}

const fn text(name: &'static str) -> Column {
    Column {
        name,
        kind: Kind::Text,
    }
}

/// Every table of `schema.sql` / `schema.pg.sql`, parents before children
/// (history after jobs, account_holders after accounts). A unit test checks
/// this list against the columns of a freshly migrated SQLite file, so a
/// column added to the schema cannot be left behind by a migration.
pub(crate) const TABLES: &[Table] = &[
    Table {
        name: "jobs",
        columns: &[
            int("id"),
            text("doc_key"),
            text("version"),
            text("source_stat"),
            text("status"),
            text("owner_token"),
            text("owner_worker"),
            int("fence"),
            int("lease_expires_at"),
            int("attempts"),
            int("max_attempts"),
            int("retry_at"),
            text("last_error"),
            text("result_path"),
            text("checksum"),
            Column {
                name: "source_gone",
                kind: Kind::Flag,
            },
            int("seen_scan"),
            int("created_at"),
            int("updated_at"),
            text("parked_on"),
            int("lease_ms"),
            int("lost_leases"),
            int("result_bytes"),
            text("no_text"),
            text("title"),
            text("author"),
            text("doc_date"),
            int("pages"),
            text("language"),
        ],
        key: &["id"],
        identity: true,
        seeded: false,
        left_behind: None,
    },
    Table {
        name: "history",
        columns: &[
            int("job_id"),
            int("seq"),
            int("at"),
            text("event"),
            text("token"),
            int("fence"),
            text("detail"),
        ],
        key: &["job_id", "seq"],
        identity: false,
        seeded: false,
        left_behind: None,
    },
    Table {
        name: "meta",
        columns: &[text("name"), text("value")],
        key: &["name"],
        identity: false,
        seeded: false,
        left_behind: Some(("name", crate::store::CHECKED_SHARDS)),
    },
    Table {
        name: "accounts",
        columns: &[
            text("name"),
            text("state"),
            int("epoch"),
            int("locked_until"),
            int("locked_at"),
            text("probe_token"),
            int("probe_until"),
            int("probes"),
            text("last_error"),
            int("paced_until"),
            int("lock_notice_at"),
            int("expiry_warned"),
            int("dropped_at_lock"),
            int("updated_at"),
        ],
        key: &["name"],
        identity: false,
        seeded: false,
        left_behind: None,
    },
    Table {
        name: "account_holders",
        columns: &[text("holder"), text("account"), int("expires_at")],
        key: &["holder"],
        identity: false,
        seeded: false,
        left_behind: None,
    },
    Table {
        name: "auth_history",
        columns: &[
            int("id"),
            text("account"),
            int("at"),
            text("event"),
            int("epoch"),
            text("detail"),
        ],
        key: &["id"],
        identity: true,
        seeded: false,
        left_behind: None,
    },
    Table {
        name: "notices",
        columns: &[
            int("id"),
            text("account"),
            text("kind"),
            text("message"),
            text("details"),
            int("created_at"),
            int("sent_at"),
            int("attempts"),
            int("next_try_at"),
            text("sender"),
            int("sending_until"),
            text("last_error"),
        ],
        key: &["id"],
        identity: true,
        seeded: false,
        left_behind: None,
    },
    Table {
        name: "outbox",
        columns: &[
            int("id"),
            int("job_id"),
            text("doc_key"),
            text("version"),
            text("checksum"),
            text("body"),
            int("bytes"),
            int("created_at"),
            text("sender"),
            int("sending_until"),
        ],
        key: &["id"],
        identity: true,
        seeded: false,
        left_behind: None,
    },
    Table {
        name: "outbox_totals",
        columns: &[
            int("id"),
            int("rows"),
            int("bytes"),
            int("dropped"),
            int("dropped_bytes"),
            int("delivered"),
            int("next_send_at"),
        ],
        key: &["id"],
        identity: false,
        seeded: true,
        left_behind: None,
    },
];

impl Table {
    /// The column names, comma-separated, in the table's order.
    pub(crate) fn column_list(&self) -> String {
        self.columns.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
    }

    /// The condition on the rows copied ([`Table::left_behind`]), or
    /// nothing when every row is.
    pub(crate) fn rows_copied(&self) -> String {
        match self.left_behind {
            Some((column, value)) => format!(" WHERE {column} <> '{value}'"),
            None => String::new(),
        }
    }
}

/// One value, as both engines hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// One row: a cell per column, in the table's column order.
pub(crate) type Row = Vec<Cell>;

/// The row count and SHA-256 of a table's rows in key order, computed the
/// same way from whichever side they were read.
///
/// Each cell is a tag byte and its value (NULL: tag 0; an integer: tag 1 and
/// 8 bytes big-endian; text: tag 2, its length as 8 bytes big-endian, its
/// UTF-8 bytes), so no two different rows encode alike and a value cannot
/// move between columns unnoticed.
#[derive(Default)]
pub(crate) struct Tally {
    pub rows: u64,
    hash: Sha256,
}

impl Tally {
    /// Add the next rows, in key order.
    pub(crate) fn add(&mut self, rows: &[Row]) {
        for row in rows {
            self.rows += 1;
            for cell in row {
                match cell {
                    Cell::Null => self.hash.update([0u8]),
                    Cell::Int(v) => {
                        self.hash.update([1u8]);
                        self.hash.update(v.to_be_bytes());
                    }
                    Cell::Text(s) => {
                        self.hash.update([2u8]);
                        self.hash.update((s.len() as u64).to_be_bytes());
                        self.hash.update(s.as_bytes());
                    }
                }
            }
        }
    }

    /// The checksum, as lowercase hex.
    pub(crate) fn hex(self) -> String {
        self.hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every column of a freshly migrated SQLite file is in [`TABLES`], and
    /// nothing else: a schema section that adds a column or a table fails here
    /// until the migration moves it too. The search index (`search_text` and
    /// FTS5's own tables behind it) is not moved: each engine indexes in its
    /// own way, and `leasehold reindex` rebuilds it from the mirror.
    #[test]
    fn the_list_matches_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let store = crate::Store::open(&path, crate::StoreOptions::default()).unwrap();
        drop(store);
        let c = rusqlite::Connection::open(&path).unwrap();
        let mut names: Vec<String> = c
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
                 AND name NOT LIKE 'search%' ORDER BY name",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let mut listed: Vec<String> = TABLES.iter().map(|t| t.name.to_owned()).collect();
        names.sort();
        listed.sort();
        assert_eq!(names, listed);
        for t in TABLES {
            let cols: Vec<String> = c
                .prepare(&format!(
                    "SELECT name FROM pragma_table_info('{}') ORDER BY cid",
                    t.name
                ))
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            let mine: Vec<&str> = t.columns.iter().map(|c| c.name).collect();
            assert_eq!(cols, mine, "table {}", t.name);
        }
    }

    #[test]
    fn different_rows_tally_differently() {
        let sum = |rows: &[Row]| {
            let mut t = Tally::default();
            t.add(rows);
            t.hex()
        };
        let a = vec![vec![Cell::Text("ab".into()), Cell::Text("c".into())]];
        let b = vec![vec![Cell::Text("a".into()), Cell::Text("bc".into())]];
        let c = vec![vec![Cell::Null, Cell::Int(0)]];
        let d = vec![vec![Cell::Int(0), Cell::Null]];
        assert_ne!(sum(&a), sum(&b));
        assert_ne!(sum(&c), sum(&d));
        assert_eq!(sum(&a), sum(&a.clone()));
    }
}
