//! The PostgreSQL edition behind the store's facade: `Store::open` picks it by
//! the location's scheme, and what it does not have yet is refused by name,
//! before anything is written (DESIGN §12). The queue's rules themselves are
//! the conformance suite's (`store_fencing`, `store_leases`, `store_race`,
//! `model`), run on both engines.

mod common;

use std::time::Duration;

use common::{Backend, TestDb};
use leasehold::store::GatePolicy;
use leasehold::{Error, NewDoc, Status};

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
fn the_gate_notices_and_outbox_are_refused_by_name_not_ignored() {
    let t = TestDb::new(Backend::Postgres);
    let store = t.handle(1_000);
    let policy = GatePolicy {
        lock_ttl: 1_000,
        probe_ttl: 100,
        notify_every: 1_000,
    };
    let refusals = [
        store.accounts().admit("acct", "me", &policy).err(),
        store.notices().all().err(),
        store.outbox().totals().err(),
        store
            .outbox()
            .claim(10, Duration::from_secs(1), Duration::ZERO)
            .err(),
    ];
    for err in refusals {
        match err {
            Some(e @ Error::NotOnPostgres { .. }) => assert!(e.to_string().contains("PostgreSQL"), "{e}"),
            other => panic!("expected NotOnPostgres, got {other:?}"),
        }
    }
    for err in [store.journal_mode().err(), store.check_integrity(false).err()] {
        assert!(matches!(err, Some(Error::SqliteOnly { .. })), "{err:?}");
    }
}

#[test]
fn a_completion_with_text_for_the_sink_is_refused_before_anything_is_written() {
    let t = TestDb::new(Backend::Postgres);
    let store = t.handle(1_000);
    let id = store.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
    let claim = store.claim("w").unwrap().unwrap();
    let err = store.complete_and_deliver(claim, "r", "s", "text").unwrap_err();
    assert!(matches!(err, Error::NotOnPostgres { .. }), "{err:?}");
    let row = store.job(id).unwrap().unwrap();
    assert_eq!(
        row.status,
        Status::Extracting,
        "the result was accepted without its outbox row"
    );
    let events: Vec<String> = store.history(id).unwrap().into_iter().map(|h| h.event).collect();
    assert_eq!(events, ["enqueued", "claimed"]);
}
