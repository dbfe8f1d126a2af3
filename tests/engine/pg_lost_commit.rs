//! A statement that commits on its own, whose answer is lost with its
//! connection after the commit (`src/store/postgres/recover.rs`): the store
//! finds what it did by the owner tokens it carried, instead of running it
//! again. A proxy between the store and the server drops the answer
//! (`tests/common/cut_proxy.rs`).

use crate::common;

use common::cut_proxy::CutProxy;
use common::pg::{self, SUPERUSER};
use common::{Backend, TestDb};
use leasehold::testing::pg_batch::{in_one_statement, Op, Out};
use leasehold::{Completion, Fenced, JobId, NewDoc, Store};

const LEASE_MS: u64 = 60_000;

/// A store on `t`'s database through `proxy`, with one document per key.
fn store_through(t: &TestDb, proxy: &CutProxy, keys: &[&str]) -> Store {
    let name = t
        .location
        .rsplit('/')
        .next()
        .expect("a database URL ends with its name");
    let url = format!("postgres://{SUPERUSER}@127.0.0.1:{}/{name}", proxy.port());
    let store = Store::open(&url, t.options(LEASE_MS)).expect("open through the proxy");
    let docs: Vec<NewDoc> = keys.iter().map(|k| NewDoc::new(*k, "v1")).collect();
    store.enqueue_many(&docs).unwrap();
    store
}

fn events(store: &Store, key: &str) -> Vec<String> {
    let id = JobId(store.job_by_key(key).unwrap().unwrap().id);
    store.history(id).unwrap().into_iter().map(|h| h.event).collect()
}

/// A claim whose answer is lost after it committed, and then `more`
/// answers of what follows (the lookup's): the store answers with the
/// document it claimed, under a live lease, and claims no other.
fn a_lost_claim_is_found(more: usize) {
    let t = TestDb::new(Backend::Postgres);
    let proxy = CutProxy::start(pg::server().port());
    let store = store_through(&t, &proxy, &["a", "b", "c"]);
    // The claim's statement is prepared on the connection first.
    let warm = store.claim("w0").unwrap().expect("a claim");
    assert_eq!(warm.key, "a");
    for _ in 0..=more {
        proxy.arm();
    }
    let claim = store.claim("w1").unwrap().expect("a claim");
    assert_eq!(proxy.cuts(), 1 + more, "the answers were lost");
    assert_eq!(claim.key, "b", "the committed claim is the answer");
    assert_eq!(events(&store, "b"), ["enqueued", "claimed"]);
    assert_eq!(events(&store, "c"), ["enqueued"], "no second document claimed");
    let done = store.complete(claim, Completion::new("r/b", "sum")).unwrap();
    assert!(done.is_accepted(), "its lease is live: {done:?}");
}

#[test]
fn a_claim_whose_answer_was_lost_is_found_by_its_token_not_run_again() {
    a_lost_claim_is_found(0);
}

/// The lookup itself loses its answer too: the next try still looks for
/// the claim (it is kept until answered), and finds it.
#[test]
fn a_claim_is_looked_for_again_when_the_lookup_loses_its_answer_too() {
    a_lost_claim_is_found(1);
}

/// A batch in a transaction (more rows wanted than one claim statement
/// asks for) whose COMMIT's answer was lost: its transaction id says it
/// committed, and its claims are the answer, not a second set.
#[test]
fn a_batch_transaction_whose_commit_answer_was_lost_is_looked_up_not_run_again() {
    let t = TestDb::new(Backend::Postgres);
    let proxy = CutProxy::start(pg::server().port());
    let keys: Vec<String> = (0..1100).map(|i| format!("d{i:04}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let store = store_through(&t, &proxy, &refs);
    proxy.arm_commit();
    let claims = store.claim_batch("w1", 1025).unwrap();
    assert_eq!(proxy.cuts(), 1, "the COMMIT's answer was lost");
    assert_eq!(claims.len(), 1025, "the committed claims are the answer");
    let mut direct = postgres::Client::connect(&t.location, postgres::NoTls).unwrap();
    let counted =
        |sql: &str, direct: &mut postgres::Client| -> i64 { direct.query_one(sql, &[]).unwrap().get(0) };
    let extracting = "SELECT count(*) FROM jobs WHERE status = 'extracting'";
    assert_eq!(
        counted(extracting, &mut direct),
        1025,
        "no document claimed by a second run"
    );
    let lines = "SELECT count(*) FROM history WHERE event = 'claimed'";
    assert_eq!(counted(lines, &mut direct), 1025);
    let first = claims.into_iter().next().unwrap();
    assert!(store
        .complete(first, Completion::new("r", "s"))
        .unwrap()
        .is_accepted());
}

/// The batch statement (a completion and a claim) committed and its answer
/// was lost: the completion is known accepted and the claim is the
/// document it took.
#[test]
fn a_batch_statement_whose_answer_was_lost_is_found_not_run_again() {
    let t = TestDb::new(Backend::Postgres);
    let proxy = CutProxy::start(pg::server().port());
    let store = store_through(&t, &proxy, &["a", "b", "c", "d"]);
    let a = store.claim("w1").unwrap().expect("a claim");
    let b = store.claim("w1").unwrap().expect("a claim");
    // The batch statement is prepared on the connection first.
    let warm = in_one_statement(
        &store,
        vec![Op::Complete(a.owner(), None), Op::Claim("w2".into())],
    )
    .expect("the batch fits one statement");
    assert!(matches!(warm[0], Ok(Out::Fenced(Fenced::Accepted))), "{warm:?}");
    proxy.arm();
    let outs = in_one_statement(
        &store,
        vec![Op::Complete(b.owner(), None), Op::Claim("w3".into())],
    )
    .expect("the batch fits one statement and it ran");
    assert_eq!(proxy.cuts(), 1, "the answer was lost");
    assert!(matches!(outs[0], Ok(Out::Fenced(Fenced::Accepted))), "{outs:?}");
    let Ok(Out::Claims(claims)) = &outs[1] else {
        panic!("{outs:?}")
    };
    let keys: Vec<&str> = claims.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(keys, ["d"], "the claim the statement made");
    assert_eq!(events(&store, "b"), ["enqueued", "claimed", "completed"]);
    assert_eq!(events(&store, "d"), ["enqueued", "claimed"]);
}
