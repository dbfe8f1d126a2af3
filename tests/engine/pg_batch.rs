//! PostgreSQL's one statement for a batch of claims and plain completions
//! (`src/store/postgres/batch.rs`), on operations the test chooses through
//! the hook `leasehold::testing::pg_batch`.

use crate::common;

use std::time::Duration;

use common::{Backend, TestDb};
use leasehold::testing::pg_batch::{candidates, in_one_statement, Op, Out};
use leasehold::{Fenced, JobId, NewDoc, Rejection, Store};

const LEASE_MS: u64 = 60_000;

/// A store on a fresh database with one document per key.
fn store_with(t: &TestDb, keys: &[&str], max_lost_leases: u32) -> Store {
    let store = t.open(t.options(LEASE_MS).max_lost_leases(max_lost_leases));
    let docs: Vec<NewDoc> = keys.iter().map(|k| NewDoc::new(*k, "v1")).collect();
    store.enqueue_many(&docs).unwrap();
    store
}

fn run(store: &Store, ops: Vec<Op>) -> Vec<Out> {
    in_one_statement(store, ops)
        .expect("the batch fits one statement and it ran")
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

fn events(store: &Store, id: JobId) -> Vec<String> {
    store.history(id).unwrap().into_iter().map(|h| h.event).collect()
}

fn claim(worker: &str) -> Op {
    Op::Claim(worker.to_owned())
}

/// The completed document's lease ran out, so a claim on its own would
/// take it first; in the completion's statement it must not.
#[test]
fn a_claim_never_takes_the_document_its_statement_completes() {
    let t = TestDb::new(Backend::Postgres);
    let store = store_with(&t, &["a", "b"], 3);
    let a = store.claim_batch("w1", 1).unwrap().pop().unwrap();
    t.clock.advance(Duration::from_millis(LEASE_MS * 2));
    let outs = run(
        &store,
        vec![Op::Complete(a.owner(), Some("text".into())), claim("w2")],
    );
    assert!(matches!(outs[0], Out::Fenced(Fenced::Accepted)), "{outs:?}");
    let Out::Claims(claims) = &outs[1] else {
        panic!("{outs:?}")
    };
    assert_eq!(claims.iter().map(|c| c.key.as_str()).collect::<Vec<_>>(), ["b"]);
    let lines = store.history(a.id).unwrap();
    let said: Vec<&str> = lines.iter().map(|h| h.event.as_str()).collect();
    assert_eq!(said, ["enqueued", "claimed", "completed"]);
    assert_eq!(
        lines[2].detail.as_deref(),
        Some("version v1; r; sha256 s; extracted as text")
    );
    assert_eq!(
        (lines[2].token.as_deref(), lines[2].fence),
        (Some(a.token.as_str()), Some(a.fence))
    );
}

/// The statement's claim never considers a document the same statement
/// completes (here one whose lease ran out, which it would take first):
/// two changes of one row in one statement, of which the server makes only
/// the one it happens to run first.
#[test]
fn a_batch_claim_leaves_out_the_documents_its_statement_completes() {
    let t = TestDb::new(Backend::Postgres);
    let store = store_with(&t, &["a", "b"], 3);
    let a = store.claim_batch("w1", 1).unwrap().pop().unwrap();
    t.clock.advance(Duration::from_millis(LEASE_MS * 2));
    let ids = |completing: &[JobId]| candidates(&store, completing, 1).unwrap().unwrap();
    assert_eq!(ids(&[]), [a.id], "alone, the lapsed lease comes first");
    let b = JobId(store.job_by_key("b").unwrap().unwrap().id);
    assert_eq!(ids(&[a.id]), [b]);
    // Nothing was claimed.
    assert_eq!(events(&store, b), ["enqueued"]);
}

/// The statement's claim takes lapsed leases, then leases granted ahead,
/// then due retries, then new documents, each set in its own order, as the
/// SQL states it (not the order of ids, nor of a union's parts).
#[test]
fn a_batch_claim_takes_the_sets_in_their_order() {
    let t = TestDb::new(Backend::Postgres);
    let store = store_with(&t, &["a", "b", "c", "d", "e"], 3);
    let mut first = store.claim_batch("w1", 3).unwrap().into_iter();
    let (a, b, c) = (
        first.next().unwrap(),
        first.next().unwrap(),
        first.next().unwrap(),
    );
    // a's lease now ends after b's; c waits for its retry.
    t.clock.advance(Duration::from_millis(1_000));
    assert!(store.renew(&a.owner()).unwrap().is_accepted());
    let c_id = c.id;
    assert!(store.fail(c, "flaky", false).unwrap().is_accepted());
    // d is claimed late (a, b and c held by another transaction, so that
    // the claim skips them), then the clock goes back: its lease was
    // granted ahead.
    t.clock.set(LEASE_MS as i64 * 20);
    let mut other = postgres::Client::connect(&t.location, postgres::NoTls).unwrap();
    let mut holding = other.transaction().unwrap();
    holding
        .execute(
            "SELECT id FROM jobs WHERE doc_key IN ('a', 'b', 'c') FOR UPDATE",
            &[],
        )
        .unwrap();
    let d = store.claim_batch("w2", 1).unwrap().pop().unwrap();
    holding.commit().unwrap();
    assert_eq!(d.key, "d");
    t.clock.set(LEASE_MS as i64 * 10);
    let e = JobId(store.job_by_key("e").unwrap().unwrap().id);
    let ids = |limit: usize| candidates(&store, &[], limit).unwrap().unwrap();
    assert_eq!(ids(10), [b.id, a.id, d.id, c_id, e]);
    assert_eq!(ids(3), [b.id, a.id, d.id]);
}

/// A completion with a text for the search index goes in the batch
/// statement too: its text is searchable under its title at once, a new
/// version's text replaces the old one, and one without text takes it out.
#[test]
fn a_batch_statement_indexes_the_texts_it_accepts() {
    let t = TestDb::new(Backend::Postgres);
    let store = store_with(&t, &["notes/a.txt", "b"], 3);
    let hits = |q: &str| -> Vec<String> { store.search(q, 10).unwrap().into_iter().map(|h| h.key).collect() };
    let text = |owner, text: &str| Op::CompleteWithText {
        owner,
        key: "notes/a.txt".into(),
        text: text.into(),
    };
    let a = store.claim_batch("w1", 1).unwrap().pop().unwrap();
    let outs = run(&store, vec![text(a.owner(), "a quokka\0 smiles"), claim("w2")]);
    assert!(matches!(outs[0], Out::Fenced(Fenced::Accepted)), "{outs:?}");
    assert_eq!(hits("quokka"), ["notes/a.txt"]);
    // Its title label, the file's name, is in the index too.
    assert_eq!(hits("title:a"), ["notes/a.txt"]);
    // A new version: its text replaces the old one.
    store.enqueue_many(&[NewDoc::new("notes/a.txt", "v2")]).unwrap();
    let a2 = store.claim_batch("w1", 1).unwrap().pop().unwrap();
    assert_eq!(a2.key, "notes/a.txt");
    let outs = run(&store, vec![text(a2.owner(), "a wombat")]);
    assert!(matches!(outs[0], Out::Fenced(Fenced::Accepted)), "{outs:?}");
    assert!(hits("quokka").is_empty());
    assert_eq!(hits("wombat"), ["notes/a.txt"]);
    // A version without text takes it out.
    store.enqueue_many(&[NewDoc::new("notes/a.txt", "v3")]).unwrap();
    let a3 = store.claim_batch("w1", 1).unwrap().pop().unwrap();
    let outs = run(&store, vec![Op::Complete(a3.owner(), None)]);
    assert!(matches!(outs[0], Out::Fenced(Fenced::Accepted)), "{outs:?}");
    assert!(hits("wombat").is_empty());
}

/// A completion in the batch statement records why its text holds no word,
/// as a lone one does; the count of such documents sees it.
#[test]
fn a_batch_statement_completion_records_a_text_without_words() {
    let t = TestDb::new(Backend::Postgres);
    let store = store_with(&t, &["a", "b"], 3);
    let a = store.claim_batch("w1", 1).unwrap().pop().unwrap();
    let outs = run(
        &store,
        vec![
            Op::CompleteWithoutText(a.owner(), "the file is empty".into()),
            claim("w2"),
        ],
    );
    assert!(matches!(outs[0], Out::Fenced(Fenced::Accepted)), "{outs:?}");
    let job = store.job(a.id).unwrap().unwrap();
    assert_eq!(job.no_text.as_deref(), Some("the file is empty"));
    assert_eq!(store.counts().unwrap().no_text, 1);
    assert_eq!(store.totals().unwrap().no_text, 1);
}

/// A stale owner's completion in a batch statement is refused and the
/// refusal recorded, as a lone one's is.
#[test]
fn a_refused_completion_of_a_batch_statement_is_recorded() {
    let t = TestDb::new(Backend::Postgres);
    let store = store_with(&t, &["a", "b"], 3);
    let stale = store.claim_batch("w1", 1).unwrap().pop().unwrap();
    t.clock.advance(Duration::from_millis(LEASE_MS * 2));
    let now_owner = store.claim_batch("w2", 1).unwrap().pop().unwrap();
    assert_eq!(now_owner.id, stale.id);
    let outs = run(&store, vec![Op::Complete(stale.owner(), None), claim("w3")]);
    let Out::Fenced(Fenced::Rejected(why)) = &outs[0] else {
        panic!("{outs:?}")
    };
    assert_eq!(
        *why,
        Rejection::OtherOwner {
            fence: now_owner.fence
        }
    );
    assert_eq!(
        events(&store, stale.id),
        ["enqueued", "claimed", "claimed", "complete_rejected"]
    );
    assert!(matches!(&outs[1], Out::Claims(c) if c.len() == 1 && c[0].key == "b"));
}

/// A candidate that has used up its lost leases is buried, and the caller
/// whose slot it was claims again on its own.
#[test]
fn a_used_up_candidate_is_buried_and_its_caller_claims_the_next() {
    let t = TestDb::new(Backend::Postgres);
    let store = store_with(&t, &["a", "b", "c"], 1);
    let lost = store.claim_batch("w1", 1).unwrap().pop().unwrap();
    t.clock.advance(Duration::from_millis(LEASE_MS * 2));
    let outs = run(&store, vec![claim("w2"), claim("w3")]);
    let keys: Vec<Vec<&str>> = outs
        .iter()
        .map(|o| match o {
            Out::Claims(c) => c.iter().map(|c| c.key.as_str()).collect(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(keys, [vec!["c"], vec!["b"]]);
    assert_eq!(events(&store, lost.id), ["enqueued", "claimed", "dead"]);
}

/// Operations that do not fit one statement are left to the transaction.
#[test]
fn a_document_completed_twice_or_a_renewal_is_left_to_the_transaction() {
    let t = TestDb::new(Backend::Postgres);
    let store = store_with(&t, &["a"], 3);
    let a = store.claim_batch("w1", 1).unwrap().pop().unwrap();
    let twice = || vec![Op::Complete(a.owner(), None), Op::Complete(a.owner(), None)];
    let renewal = || vec![Op::Complete(a.owner(), None), Op::Renew(a.owner())];
    assert!(in_one_statement(&store, twice()).is_none());
    assert!(in_one_statement(&store, renewal()).is_none());
    assert_eq!(events(&store, a.id), ["enqueued", "claimed"]);
}
