//! DESIGN §3 on a real database, SQLite and PostgreSQL (each test body runs
//! on both, `sqlite::NAME` and `postgres::NAME`): the stale worker is refused,
//! fences only grow, poison documents die, backoff is honoured, refusals are
//! recorded.

use crate::common;

use std::time::Duration;

use common::{Backend, TempStore, TestDb};
use leasehold::testing::dup;
use leasehold::{Claim, Fenced, NewDoc, Rejection, Status, Store};

/// The fenced write a scenario exercises.
#[derive(Debug, Clone, Copy)]
enum Op {
    Complete,
    Renew,
    Fail,
}

fn apply(store: &Store, claim: &Claim, op: Op, tag: &str) -> Fenced {
    match op {
        Op::Complete => store.complete(
            dup(claim),
            leasehold::Completion::new(&format!("result-{tag}"), &format!("sum-{tag}")),
        ),
        Op::Renew => store.renew(&claim.owner()),
        Op::Fail => store.fail(dup(claim), &format!("error from {tag}"), false),
    }
    .expect("no store error")
}

/// A claims at 0; B cannot claim at 9 but can at 10; A's write is refused while
/// B owns the row and after B completed; the stored result is B's.
fn stale_worker_is_refused(b: Backend, op: Op) {
    let t = TestDb::new(b);
    let (a, b) = (t.handle(10), t.handle(10));
    let id = a.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();

    let claim_a = a.claim("A").unwrap().expect("A claims at t=0");
    t.clock.set(9);
    assert!(b.claim("B").unwrap().is_none(), "lease still held at t=9");
    t.clock.set(10);
    let claim_b = b.claim("B").unwrap().expect("B re-claims at t=10");
    assert_eq!(claim_b.fence, claim_a.fence + 1);

    let before = b.job(id).unwrap().unwrap();
    let refused = apply(&a, &claim_a, op, "A");
    assert_eq!(
        refused,
        Fenced::Rejected(Rejection::OtherOwner { fence: claim_b.fence }),
        "{op:?}"
    );
    let after = b.job(id).unwrap().unwrap();
    assert_eq!(before, after, "a refused {op:?} changed the row");
    assert_eq!(after.owner_token.as_deref(), Some(claim_b.token.as_str()));
    assert_eq!(after.result_path, None);

    assert!(b
        .complete(dup(&claim_b), leasehold::Completion::new("result-B", "sum-B"))
        .unwrap()
        .is_accepted());
    let late = apply(&a, &claim_a, op, "A");
    assert_eq!(
        late,
        Fenced::Rejected(Rejection::NotExtracting {
            status: Status::Indexed,
            fence: claim_b.fence
        })
    );
    let row = a.job(id).unwrap().unwrap();
    assert_eq!(row.status, Status::Indexed);
    assert_eq!(row.result_path.as_deref(), Some("result-B"));
    assert_eq!(row.checksum.as_deref(), Some("sum-B"));
}

/// A's lease runs out at 11 but nobody re-claims: A may still write.
fn expired_but_unreplaced_owner_may_write(b: Backend, op: Op) {
    let t = TestDb::new(b);
    let (a, b) = (t.handle(10), t.handle(10));
    let id = a.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
    let claim_a = a.claim("A").unwrap().unwrap();
    t.clock.set(11);
    assert_eq!(apply(&a, &claim_a, op, "A"), Fenced::Accepted, "{op:?}");
    let row = b.job(id).unwrap().unwrap();
    match op {
        Op::Complete => {
            assert_eq!(row.status, Status::Indexed);
            assert_eq!(row.result_path.as_deref(), Some("result-A"));
        }
        Op::Renew => {
            assert_eq!(row.status, Status::Extracting);
            assert_eq!(row.lease_expires_at, Some(21), "renewal extends from now");
        }
        Op::Fail => {
            assert_eq!(row.status, Status::Retrying);
            assert_eq!(row.last_error.as_deref(), Some("error from A"));
        }
    }
}

fn stale_complete_is_refused_and_the_result_is_the_new_owners(b: Backend) {
    stale_worker_is_refused(b, Op::Complete);
}

fn stale_renew_is_refused(b: Backend) {
    stale_worker_is_refused(b, Op::Renew);
}

fn stale_fail_is_refused(b: Backend) {
    stale_worker_is_refused(b, Op::Fail);
}

fn expired_owner_nobody_replaced_may_complete(b: Backend) {
    expired_but_unreplaced_owner_may_write(b, Op::Complete);
}

fn expired_owner_nobody_replaced_may_renew(b: Backend) {
    expired_but_unreplaced_owner_may_write(b, Op::Renew);
}

fn expired_owner_nobody_replaced_may_fail(b: Backend) {
    expired_but_unreplaced_owner_may_write(b, Op::Fail);
}

fn fences_only_grow_and_accepted_writes_carry_the_newest_fence(b: Backend) {
    let t = TestDb::new(b);
    let store = t.open(t.options(10).max_attempts(100));
    let id = store.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
    let mut claims = Vec::new();
    for k in 1..=7 {
        let c = store.claim("w").unwrap().expect("claimable after expiry");
        assert_eq!(c.fence, k, "fence after {k} claims");
        claims.push(c);
        t.clock.advance(Duration::from_millis(10));
    }
    // Every older claim is refused; only the newest is accepted.
    for old in &claims[..claims.len() - 1] {
        assert!(!store
            .complete(dup(old), leasehold::Completion::new("old", "old"))
            .unwrap()
            .is_accepted());
    }
    let newest = claims.last().unwrap();
    assert!(store
        .complete(dup(newest), leasehold::Completion::new("new", "new"))
        .unwrap()
        .is_accepted());
    let accepted: Vec<_> = store
        .history(id)
        .unwrap()
        .into_iter()
        .filter(|h| h.event == "completed")
        .collect();
    assert_eq!(accepted.len(), 1);
    assert_eq!(accepted[0].fence, Some(7));
    assert_eq!(store.job(id).unwrap().unwrap().fence, 7);
}

fn poison_document_dies_after_its_attempts_and_is_never_claimed_again(b: Backend) {
    let t = TestDb::new(b);
    let store = t.open(t.options(10).max_attempts(3));
    let id = store.enqueue(&NewDoc::new("poison", "v1")).unwrap().id();
    for attempt in 1..=3 {
        let c = store.claim("w").unwrap().expect("claimable");
        assert_eq!(c.attempts, attempt);
        assert!(store.fail(c, "parser error", false).unwrap().is_accepted());
        t.clock.advance(Duration::from_secs(3600)); // past any backoff
    }
    assert!(store.claim("w").unwrap().is_none(), "exhausted: not handed out");
    let row = store.job(id).unwrap().unwrap();
    assert_eq!(row.status, Status::Dead);
    assert!(row.last_error.unwrap().contains("parser error"));
    t.clock.advance(Duration::from_secs(3600));
    assert!(store.claim("w").unwrap().is_none());
    assert_eq!(store.history(id).unwrap().last().unwrap().event, "failed");
}

fn failed_document_waits_for_retry_at_exactly(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(10_000);
    let id = store.enqueue(&NewDoc::new("flaky", "v1")).unwrap().id();
    let c = store.claim("w").unwrap().unwrap();
    assert!(store.fail(c, "upstream hiccup", false).unwrap().is_accepted());
    let row = store.job(id).unwrap().unwrap();
    assert_eq!(row.status, Status::Retrying);
    let retry_at = row.retry_at.expect("retry_at set");
    assert!(retry_at > 0, "backoff is not zero");
    t.clock.set(retry_at - 1);
    assert!(store.claim("w").unwrap().is_none(), "not before retry_at");
    t.clock.set(retry_at);
    let again = store.claim("w").unwrap().expect("claimable at retry_at");
    assert_eq!(again.attempts, 2);
}

fn permanent_failure_goes_straight_to_dead(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(10_000);
    let id = store.enqueue(&NewDoc::new("bad", "v1")).unwrap().id();
    let c = store.claim("w").unwrap().unwrap();
    assert!(store.fail(c, "not a PDF", true).unwrap().is_accepted());
    let row = store.job(id).unwrap().unwrap();
    assert_eq!(
        (row.status, row.last_error.as_deref()),
        (Status::Dead, Some("not a PDF"))
    );
}

fn release_hands_back_without_spending_an_attempt(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(10_000);
    let id = store.enqueue(&NewDoc::new("d", "v1")).unwrap().id();
    let c = store.claim("w").unwrap().unwrap();
    assert!(store.release(dup(&c), "shutdown").unwrap().is_accepted());
    let row = store.job(id).unwrap().unwrap();
    assert_eq!((row.status, row.attempts), (Status::Discovered, 0));
    assert!(
        !store.release(c, "again").unwrap().is_accepted(),
        "a released claim is spent"
    );
    assert_eq!(store.claim("w").unwrap().unwrap().attempts, 1);
}

fn refused_stale_complete_is_in_the_history_with_both_fences(b: Backend) {
    let t = TestDb::new(b);
    let (a, b) = (t.handle(10), t.handle(10));
    let id = a.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
    let stale = a.claim("A").unwrap().unwrap();
    t.clock.set(10);
    let owner = b.claim("B").unwrap().unwrap();
    assert!(!a
        .complete(dup(&stale), leasehold::Completion::new("x", "y"))
        .unwrap()
        .is_accepted());
    let refused = a
        .history(id)
        .unwrap()
        .into_iter()
        .find(|h| h.event == "complete_rejected")
        .expect("refusal recorded");
    assert_eq!(refused.token.as_deref(), Some(stale.token.as_str()));
    assert_eq!(refused.fence, Some(stale.fence));
    let detail = refused.detail.unwrap();
    assert!(detail.contains(&format!("fence {}", owner.fence)), "{detail}");
    assert_eq!(refused.at, 10);
}

fn enqueue_is_idempotent_and_a_new_version_requeues_an_indexed_document(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(10_000);
    let first = store.enqueue(&NewDoc::new("k", "v1")).unwrap();
    assert!(matches!(first, leasehold::Enqueued::Inserted(_)));
    assert!(matches!(
        store.enqueue(&NewDoc::new("k", "v1")).unwrap(),
        leasehold::Enqueued::Unchanged(_)
    ));
    let c = store.claim("w").unwrap().unwrap();
    assert!(store
        .complete(c, leasehold::Completion::new("p1", "s1"))
        .unwrap()
        .is_accepted());
    assert!(matches!(
        store.enqueue(&NewDoc::new("k", "v1")).unwrap(),
        leasehold::Enqueued::Unchanged(_)
    ));
    assert!(store.claim("w").unwrap().is_none(), "unchanged: nothing to do");
    assert!(matches!(
        store.enqueue(&NewDoc::new("k", "v2")).unwrap(),
        leasehold::Enqueued::Requeued(_)
    ));
    let c2 = store
        .claim("w")
        .unwrap()
        .expect("changed version is extracted again");
    assert_eq!((c2.version.as_str(), c2.fence, c2.attempts), ("v2", 2, 1));
}

fn a_new_version_fences_out_the_worker_extracting_the_old_one(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(10_000);
    store.enqueue(&NewDoc::new("k", "v1")).unwrap();
    let old = store.claim("w").unwrap().unwrap();
    store.enqueue(&NewDoc::new("k", "v2")).unwrap();
    assert!(!store
        .complete(old, leasehold::Completion::new("p", "s"))
        .unwrap()
        .is_accepted());
    assert_eq!(store.claim("w").unwrap().unwrap().version, "v2");
}

fn bad_keys_are_refused_with_a_clear_error(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(10);
    let err = store.enqueue(&NewDoc::new("a\0b", "v")).unwrap_err();
    assert!(err.to_string().contains("NUL"), "{err}");
    assert!(store.enqueue(&NewDoc::new("", "v")).is_err());
    assert_eq!(store.counts().unwrap().total(), 0);
}

fn claim_batch_and_complete_many_settle_each_claim_on_its_own_fence(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(10);
    let docs: Vec<_> = (0..40).map(|i| NewDoc::new(format!("d{i}"), "v")).collect();
    store.enqueue_many(&docs).unwrap();
    let batch = store.claim_batch("w", 32).unwrap();
    assert_eq!(batch.len(), 32);
    // One of them is taken over by someone else before the batch settles.
    t.clock.set(10);
    let other = t.handle(10);
    let stolen = other.claim("thief").unwrap().unwrap();
    let done: Vec<_> = batch
        .iter()
        .map(|c| (dup(c), leasehold::Completion::new("p", "s")))
        .collect();
    let outcomes = store.complete_many(done).unwrap();
    for (c, o) in batch.iter().zip(&outcomes) {
        assert_eq!(o.is_accepted(), c.id != stolen.id, "claim {}", c.id);
    }
    assert_eq!(store.counts().unwrap().indexed, 31);
}

fn counts_and_live_leases_report_what_is_held(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(10);
    store
        .enqueue_many(&[NewDoc::new("a", "v"), NewDoc::new("b", "v")])
        .unwrap();
    let c = store.claim("worker-1").unwrap().unwrap();
    let leases = store.live_leases().unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(
        (leases[0].id, leases[0].owner_worker.as_deref()),
        (c.id.0, Some("worker-1"))
    );
    let counts = store.counts().unwrap();
    assert_eq!((counts.discovered, counts.extracting), (1, 1));
    t.clock.set(10);
    assert!(
        store.live_leases().unwrap().is_empty(),
        "expired leases are not live"
    );
    assert_eq!(store.next_claimable_at().unwrap(), Some(10));
}

fn an_older_scan_finishing_late_marks_nothing_gone(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(10_000);
    let keys: Vec<String> = (0..5).map(|i| format!("k{i}")).collect();
    let docs: Vec<_> = keys
        .iter()
        .map(|k| NewDoc::new(k.clone(), "v1").with_stat("s"))
        .collect();
    let first = store.begin_scan().unwrap();
    store.record_scan(first, &[], &docs).unwrap();
    assert_eq!(store.finish_scan(first).unwrap(), 0);
    // Two scans at once: the newer one stamps first, the older one after it.
    let older = store.begin_scan().unwrap();
    let newer = store.begin_scan().unwrap();
    store.record_scan(newer, &keys, &[]).unwrap();
    store.record_scan(older, &keys, &[]).unwrap();
    assert_eq!(
        store.finish_scan(newer).unwrap(),
        0,
        "the older stamp took back the newer one"
    );
    assert_eq!(
        store.finish_scan(older).unwrap(),
        0,
        "an outdated scan judged what is gone"
    );
    // A complete newer scan that does not see k4 does mark it.
    let last = store.begin_scan().unwrap();
    store.record_scan(last, &keys[..4], &[]).unwrap();
    assert_eq!(store.finish_scan(last).unwrap(), 1);
    assert_eq!(store.job_by_key("k4").unwrap().unwrap().status, Status::Dead);
}

/// SQLite only (it reads the file's `data_version`): a renewal in the
/// millisecond its lease was set would change nothing: it is
/// accepted without a commit (another connection sees no new data version). A
/// renewal one millisecond later commits and moves the expiry; a refused one in
/// the thief's own millisecond still goes through the write and is recorded.
#[test]
fn sqlite_only_a_renewal_that_would_change_nothing_commits_nothing_but_a_refusal_is_recorded() {
    let t = TempStore::new();
    let (a, b) = (t.handle(10), t.handle(10));
    let id = a.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
    let raw = rusqlite::Connection::open(&t.path).unwrap();
    let data_version = || -> i64 { raw.query_row("PRAGMA data_version", [], |r| r.get(0)).unwrap() };

    let claim_a = a.claim("A").unwrap().unwrap();
    let before = data_version();
    assert_eq!(a.renew(&claim_a.owner()).unwrap(), Fenced::Accepted);
    assert_eq!(data_version(), before, "a no-op renewal committed something");
    assert_eq!(a.job(id).unwrap().unwrap().lease_expires_at, Some(10));

    t.clock.set(1);
    assert_eq!(a.renew(&claim_a.owner()).unwrap(), Fenced::Accepted);
    assert_ne!(data_version(), before, "a real renewal commits");
    assert_eq!(a.job(id).unwrap().unwrap().lease_expires_at, Some(11));

    t.clock.set(11);
    let claim_b = b.claim("B").unwrap().expect("B re-claims the expired lease");
    let refused = a.renew(&claim_a.owner()).unwrap();
    assert_eq!(
        refused,
        Fenced::Rejected(Rejection::OtherOwner { fence: claim_b.fence })
    );
    let events: Vec<String> = a.history(id).unwrap().into_iter().map(|h| h.event).collect();
    assert_eq!(
        events.last().map(String::as_str),
        Some("renew_rejected"),
        "{events:?}"
    );
}

on_both_backends!(
    stale_complete_is_refused_and_the_result_is_the_new_owners,
    stale_renew_is_refused,
    stale_fail_is_refused,
    expired_owner_nobody_replaced_may_complete,
    expired_owner_nobody_replaced_may_renew,
    expired_owner_nobody_replaced_may_fail,
    fences_only_grow_and_accepted_writes_carry_the_newest_fence,
    poison_document_dies_after_its_attempts_and_is_never_claimed_again,
    failed_document_waits_for_retry_at_exactly,
    permanent_failure_goes_straight_to_dead,
    release_hands_back_without_spending_an_attempt,
    refused_stale_complete_is_in_the_history_with_both_fences,
    enqueue_is_idempotent_and_a_new_version_requeues_an_indexed_document,
    a_new_version_fences_out_the_worker_extracting_the_old_one,
    bad_keys_are_refused_with_a_clear_error,
    claim_batch_and_complete_many_settle_each_claim_on_its_own_fence,
    counts_and_live_leases_report_what_is_held,
    an_older_scan_finishing_late_marks_nothing_gone,
);
