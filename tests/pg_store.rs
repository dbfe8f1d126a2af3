//! The PostgreSQL edition behind the store's facade: `Store::open` picks it by
//! the location's scheme, and what belongs to SQLite's file is refused by
//! name (DESIGN §12). The rules themselves are the conformance suite's
//! (`store_fencing`, `store_leases`, `store_race`, `model`, `gate_store`,
//! `auth_gate`, `auth_more`, `gate_pool`), run on both engines.

mod common;

use common::{Backend, TestDb};
use leasehold::Error;

#[test]
fn a_postgres_url_opens_the_postgres_engine_and_names_it_without_its_password() {
    let t = TestDb::new(Backend::Postgres);
    let store = t.handle(1_000);
    assert!(store.is_postgres());
    let name = store.path().display().to_string();
    assert!(name.starts_with("postgres://"), "{name}");
    let sqlite = TestDb::new(Backend::Sqlite).handle(1_000);
    assert!(!sqlite.is_postgres());
}

#[test]
fn what_belongs_to_the_sqlite_file_is_refused_by_name() {
    let t = TestDb::new(Backend::Postgres);
    let store = t.handle(1_000);
    for err in [store.journal_mode().err(), store.check_integrity(false).err()] {
        assert!(matches!(err, Some(Error::SqliteOnly { .. })), "{err:?}");
    }
}
