//! The PostgreSQL edition behind PgBouncer (`src/store/postgres/pooler.rs`).
//! The conformance suite runs through a pooler in transaction mode as its
//! third backend (`pgbouncer::` tests); these are what only a pooler shows:
//! which modes the store takes, and what it leaves in shared sessions.

use crate::common;

use std::time::Duration;

use common::pgbouncer::{private_pooler, private_pooler_of};
use leasehold::testing::pg_batch::pooled_per_transaction;
use leasehold::{Completion, Error, NewDoc, Store, StoreOptions};

fn options() -> StoreOptions {
    StoreOptions::default().lease(Duration::from_secs(60))
}

/// A pooler per statement allows no transaction; the store's operations
/// need them, so it refuses to open and says which modes it needs.
#[test]
fn a_pooler_per_statement_is_refused_with_the_modes_it_needs() {
    let pooler = private_pooler("statement");
    let err = Store::open(pooler.fresh_database(), options()).expect_err("a pooler per statement is refused");
    let Error::PostgresPooler { reason, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(reason.contains("pool_mode = transaction or session"), "{err}");
}

/// Behind a pooler of one server session per database, the probe's second
/// connection holds the only session: that is found at once, without the
/// first waiting for the session the second holds.
#[test]
fn a_pooler_of_one_session_is_found_without_waiting_for_it() {
    let pooler = private_pooler_of("transaction", 1);
    let store = Store::open(pooler.fresh_database(), options()).expect("open through the pooler");
    assert!(pooled_per_transaction(&store).unwrap().unwrap());
}

/// A direct connection is found to be one.
#[test]
fn a_direct_connection_is_found_per_connection() {
    let t = common::TestDb::new(common::Backend::Postgres);
    let store = t.handle(60_000);
    assert!(!pooled_per_transaction(&store).unwrap().unwrap());
}

/// Per session, every statement of a connection meets one server session:
/// the store keeps its statements there, and works.
#[test]
fn a_pooler_per_session_serves_the_store() {
    let pooler = private_pooler("session");
    let store = Store::open(pooler.fresh_database(), options()).expect("open through the pooler");
    assert!(
        !pooled_per_transaction(&store).unwrap().unwrap(),
        "found per session"
    );
    store.enqueue_many(&[NewDoc::new("a", "v1")]).unwrap();
    let claim = store.claim("w").unwrap().expect("a claim");
    let done = store.complete(claim, Completion::new("r/a", "sum")).unwrap();
    assert!(done.is_accepted(), "{done:?}");
}

/// Per transaction, the claim and the completion that commit on their own
/// run as functions the database keeps (their plans kept by each server
/// session), called unnamed; a second store finds them made.
#[test]
fn a_pooler_per_transaction_runs_the_hot_statements_as_functions() {
    let pooler = private_pooler("transaction");
    let url = pooler.fresh_database();
    let functions = || -> i64 {
        let direct = common::pgbouncer::direct_url(&url);
        let mut c = postgres::Client::connect(&direct, postgres::NoTls).unwrap();
        let row = c
            .query_one(
                "SELECT count(*) FROM pg_proc WHERE proname LIKE 'leasehold_q_%'",
                &[],
            )
            .unwrap();
        row.get(0)
    };
    for round in 0..2 {
        let store = Store::open(&url, options()).expect("open through the pooler");
        store
            .enqueue_many(&[NewDoc::new(format!("d{round}"), "v1")])
            .unwrap();
        let claim = store.claim("w").unwrap().expect("a claim");
        assert!(store
            .complete(claim, Completion::new("r", "sum"))
            .unwrap()
            .is_accepted());
        // The claim's and the completion's.
        assert_eq!(functions(), 2, "round {round}");
    }
}

/// Per transaction, a server session serves other clients next: the store
/// sets its time limits per transaction (`SET LOCAL`), never for the
/// session, so no session it used keeps them.
#[test]
fn a_pooler_per_transaction_is_left_no_session_setting() {
    let pooler = private_pooler("transaction");
    let url = pooler.fresh_database();
    let store = Store::open(&url, options()).expect("open through the pooler");
    assert!(
        pooled_per_transaction(&store).unwrap().unwrap(),
        "found per transaction"
    );
    let docs: Vec<NewDoc> = (0..20).map(|i| NewDoc::new(format!("d{i}"), "v1")).collect();
    store.enqueue_many(&docs).unwrap();
    while let Some(c) = store.claim("w").unwrap() {
        assert!(store
            .complete(c, Completion::new("r", "sum"))
            .unwrap()
            .is_accepted());
    }
    // Every server session of the pool at once: each client holds a
    // transaction, so each is given a session of its own.
    let mut clients: Vec<postgres::Client> = (0..8)
        .map(|_| postgres::Client::connect(&url, postgres::NoTls).expect("connect through the pooler"))
        .collect();
    let mut seen = Vec::new();
    for c in &mut clients {
        c.batch_execute("BEGIN").unwrap();
        for m in c.simple_query("SHOW lock_timeout").unwrap() {
            if let postgres::SimpleQueryMessage::Row(row) = m {
                seen.push(row.get(0).unwrap_or_default().to_owned());
            }
        }
    }
    assert!(
        seen.iter().all(|v| v == "0"),
        "sessions keep a lock_timeout: {seen:?}"
    );
}
