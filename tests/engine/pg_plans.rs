//! The PostgreSQL edition's hot statements and their plans
//! (`src/store/postgres/called.rs`): the statements that commit on their
//! own run as functions whose plan is made once per server session.

use crate::common;

use std::time::Duration;

use common::pg;
use leasehold::{Completion, NewDoc, Store, StoreOptions};

fn options() -> StoreOptions {
    StoreOptions::default().lease(Duration::from_secs(60))
}

/// The functions of the database (name, settings), by name.
fn functions(c: &mut postgres::Client) -> Vec<(String, Vec<String>)> {
    c.query(
        "SELECT proname::TEXT, coalesce(proconfig, '{}') FROM pg_proc
         WHERE proname LIKE 'leasehold_q_%' ORDER BY proname",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// One document enqueued, claimed and completed through `store`.
fn one_pair(store: &Store, key: &str) {
    store.enqueue_many(&[NewDoc::new(key, "v1")]).unwrap();
    let claim = store.claim("w").unwrap().expect("a claim");
    let done = store.complete(claim, Completion::new("r", "sum")).unwrap();
    assert!(done.is_accepted(), "{done:?}");
}

/// On a direct connection too, the claim and the completion run as
/// functions that plan their statement once for any values (the batch
/// statement's plan for each run's values cost more than its run), from
/// indexes (a plan made on a small table must not scan it whole once it
/// grew), and never compile it (JIT's threshold is below the generic
/// plan's estimate).
#[test]
fn the_hot_statements_run_as_functions_with_one_plan_and_no_jit() {
    let url = pg::server().fresh_database();
    let store = Store::open(&url, options()).unwrap();
    one_pair(&store, "a");
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let made = functions(&mut c);
    assert_eq!(made.len(), 2, "the claim's and the completion's: {made:?}");
    for (name, settings) in &made {
        assert_eq!(
            settings,
            &[
                "plan_cache_mode=force_generic_plan",
                "jit=off",
                "enable_seqscan=off"
            ],
            "{name}"
        );
    }
}
