//! The test cluster's immediate restart (tests/common/pg.rs), which the
//! reconnect tests build on: in a binary of its own, since every test of a
//! binary shares the server it cuts off.

mod common;

use common::pg;
use leasehold::store::postgres::{schema_version, PgStore};
use leasehold::StoreOptions;

#[test]
fn after_an_immediate_restart_the_pool_hands_out_working_connections() {
    let server = pg::server();
    let url = server.fresh_database();
    let store = PgStore::open(&url, StoreOptions::default().pool_size(2)).expect("open");
    assert_eq!(store.applied_version().unwrap(), schema_version());
    let mut held = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let pid_before: i32 = held.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);

    server.restart_immediate();

    // The server really went down: the connection held across it is cut.
    assert!(
        held.query_one("SELECT 1", &[]).is_err(),
        "a connection survived the restart"
    );
    // What was committed before the crash is there; pooled connections that
    // the restart broke are replaced when they are handed out.
    assert_eq!(store.applied_version().unwrap(), schema_version());
    let mut fresh = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let pid_after: i32 = fresh.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    assert_ne!(pid_before, pid_after);
}
