//! Leases against a moving clock and dying workers (DESIGN §2, §4), on a real
//! database with the injected clock, SQLite and PostgreSQL (each body runs on
//! both: `sqlite::NAME`, `postgres::NAME`):
//! - a lease whose expiry lies further ahead than now plus its own length (the
//!   clock went back) counts as expired, judged by the length of the claim that
//!   holds it, not by the claimer's;
//! - a renewal re-anchors the lease from now;
//! - a takeover of a lost lease refunds the attempt and counts a lost lease; a
//!   document that loses every worker dies at the lost-lease cap, named so.

use crate::common;

use std::time::Duration;

use common::{Backend, TestDb};
use leasehold::{Completion, Fenced, NewDoc, Status, Store};

const HOUR_MS: i64 = 3_600_000;
const START_MS: i64 = 10 * HOUR_MS;

fn store(t: &TestDb, lease_ms: u64) -> Store {
    t.open(t.options(lease_ms).checkpoint_every(None))
}

fn a_dead_workers_lease_is_over_when_the_clock_goes_back_an_hour(b: Backend) {
    let t = TestDb::new(b);
    t.clock.set(START_MS);
    let (a, b) = (store(&t, 2_000), store(&t, 2_000));
    let id = a.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
    let dead = a.claim("A").unwrap().expect("A claims");
    // A is killed; the clock is set back an hour.
    t.clock.set(START_MS - HOUR_MS);
    assert_eq!(b.next_claimable_at().unwrap(), Some(START_MS - HOUR_MS));
    assert!(b.live_leases().unwrap().is_empty(), "not shown as live");
    let taken = b
        .claim("B")
        .unwrap()
        .expect("B takes over at once, not in an hour");
    assert_eq!(taken.id, id);
    assert_eq!(taken.fence, dead.fence + 1);
    assert_eq!(taken.lease_expires_at, START_MS - HOUR_MS + 2_000);
    let row = b.job(id).unwrap().unwrap();
    assert_eq!((row.attempts, row.lost_leases), (1, 1));
    let claimed = b.history(id).unwrap().pop().unwrap();
    assert_eq!(claimed.event, "claimed");
    assert!(
        claimed
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("the clock went back"),
        "{claimed:?}"
    );
    // The dead worker's late write is still fenced out; the new owner's is not.
    assert!(!a
        .complete(dead, Completion::new("old", "old"))
        .unwrap()
        .is_accepted());
    assert!(b
        .complete(taken, Completion::new("new", "new"))
        .unwrap()
        .is_accepted());
}

fn a_lease_is_judged_by_its_own_length_not_the_claimers(b: Backend) {
    let t = TestDb::new(b);
    t.clock.set(START_MS);
    let (long, short) = (store(&t, 60_000), store(&t, 1_000));
    long.enqueue(&NewDoc::new("doc", "v1")).unwrap();
    let held = long.claim("long").unwrap().expect("claims with a 60 s lease");
    // Time goes on normally: a 1 s claimer must not call the 60 s lease over.
    for at in [START_MS + 1, START_MS + 30_000, START_MS + 59_999] {
        t.clock.set(at);
        assert!(short.claim("short").unwrap().is_none(), "at {at}");
    }
    t.clock.set(START_MS + 60_000);
    let taken = short.claim("short").unwrap().expect("expired");
    assert_eq!(taken.id, held.id);
}

fn a_small_step_back_within_the_lease_keeps_it(b: Backend) {
    // Granted at START, clock back 1 ms: the expiry lies 1 ms further ahead
    // than a lease can reach: over. Granted at START, clock forward then back
    // to START: exactly one lease ahead: still held.
    let t = TestDb::new(b);
    t.clock.set(START_MS);
    let (a, b) = (store(&t, 5_000), store(&t, 5_000));
    a.enqueue(&NewDoc::new("doc", "v1")).unwrap();
    let _held = a.claim("A").unwrap().unwrap();
    t.clock.set(START_MS + 3_000);
    t.clock.set(START_MS);
    assert!(b.claim("B").unwrap().is_none(), "granted at now: held");
    t.clock.set(START_MS - 1);
    assert!(b.claim("B").unwrap().is_some(), "granted after now: over");
}

fn a_renewal_after_the_clock_went_back_re_anchors_the_lease(b: Backend) {
    let t = TestDb::new(b);
    t.clock.set(START_MS);
    let (a, b) = (store(&t, 2_000), store(&t, 2_000));
    let id = a.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
    let claim = a.claim("A").unwrap().unwrap();
    let back = START_MS - HOUR_MS;
    t.clock.set(back);
    // The owner is alive and renews before anyone takes the lease over.
    assert!(a.renew(&claim.owner()).unwrap().is_accepted());
    let row = a.job(id).unwrap().unwrap();
    assert_eq!(row.lease_expires_at, Some(back + 2_000), "re-anchored from now");
    assert!(b.claim("B").unwrap().is_none(), "live again");
    t.clock.set(back + 1_999);
    assert!(b.claim("B").unwrap().is_none());
    t.clock.set(back + 2_000);
    assert!(
        b.claim("B").unwrap().is_some(),
        "expires one lease after the renewal"
    );
}

fn a_takeover_after_expiry_does_not_spend_an_attempt(b: Backend) {
    let t = TestDb::new(b);
    t.clock.set(START_MS);
    let opts = t.options(1_000).max_attempts(2).checkpoint_every(None);
    let store = t.open(opts);
    let id = store.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
    // Three workers die holding it; each takeover keeps attempt 1.
    let mut last = store.claim("w0").unwrap().unwrap();
    for lost in 1..=3 {
        t.clock.advance(Duration::from_millis(1_000));
        last = store.claim(&format!("w{lost}")).unwrap().expect("taken over");
        assert_eq!(last.attempts, 1, "takeover {lost}");
        let row = store.job(id).unwrap().unwrap();
        assert_eq!(
            (row.status, row.attempts, row.lost_leases),
            (Status::Extracting, 1, lost)
        );
    }
    // Failures still count: two failures make it dead, not one.
    assert!(store.fail(last, "bad bytes", false).unwrap().is_accepted());
    assert_eq!(store.job(id).unwrap().unwrap().status, Status::Retrying);
    t.clock.advance(Duration::from_secs(3_600));
    let second = store.claim("w").unwrap().expect("a second attempt");
    assert_eq!(second.attempts, 2);
    assert!(store.fail(second, "bad bytes", false).unwrap().is_accepted());
    let row = store.job(id).unwrap().unwrap();
    assert_eq!((row.status, row.attempts, row.lost_leases), (Status::Dead, 2, 3));
}

fn a_document_that_kills_every_worker_dies_at_its_lost_lease_cap(b: Backend) {
    let t = TestDb::new(b);
    t.clock.set(START_MS);
    let opts = t
        .options(1_000)
        .max_attempts(5)
        .max_lost_leases(3)
        .checkpoint_every(None);
    let store = t.open(opts);
    let id = store.enqueue(&NewDoc::new("poison", "v1")).unwrap().id();
    store.enqueue(&NewDoc::new("healthy", "v1")).unwrap();
    let _first = store.claim("w").unwrap().unwrap();
    for _ in 0..2 {
        t.clock.advance(Duration::from_millis(1_000)); // the worker died
        let c = store.claim("w").unwrap().expect("taken over");
        assert_eq!(c.id, id);
    }
    t.clock.advance(Duration::from_millis(1_000));
    // The third lost lease buries it; the claim goes on to the next document.
    let next = store.claim("w").unwrap().expect("the healthy document");
    assert_ne!(next.id, id);
    let row = store.job(id).unwrap().unwrap();
    assert_eq!(row.status, Status::Dead);
    assert_eq!((row.lost_leases, row.attempts), (3, 0));
    let why = row.last_error.unwrap();
    assert!(
        why.starts_with("lost leases exhausted: 3 leases expired"),
        "{why}"
    );
    assert_eq!(store.history(id).unwrap().last().unwrap().event, "dead");
    // `retry` gives it fresh attempts and lost leases.
    assert!(store.requeue(id, "retry").unwrap());
    let row = store.job(id).unwrap().unwrap();
    assert_eq!(
        (row.status, row.attempts, row.lost_leases),
        (Status::Discovered, 0, 0)
    );
}

fn max_lost_leases_must_be_at_least_one(b: Backend) {
    let t = TestDb::new(b);
    let err = Store::open(&t.location, t.options(1_000).max_lost_leases(0)).unwrap_err();
    assert!(err.to_string().contains("max_lost_leases"), "{err}");
}

/// The history lines of a claim, a takeover and a completion say the same,
/// word for word, on both engines (PostgreSQL words them in SQL, in the
/// statement that makes the change; SQLite in Rust).
fn history_lines_read_the_same_on_both_engines(b: Backend) {
    let t = TestDb::new(b);
    t.clock.set(START_MS);
    let s = t.open(t.options(1_000).checkpoint_every(None).max_lost_leases(7));
    let id = s.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
    let lost = s.claim("A").unwrap().expect("A claims");
    t.clock.advance(Duration::from_millis(1_500));
    let taken = s.claim("B").unwrap().expect("B takes over");
    let done = Completion::new("doc/result.txt", "abc123").note("plain text");
    assert!(s.complete(taken, done).unwrap().is_accepted());
    let lines: Vec<(String, String)> = s
        .history(id)
        .unwrap()
        .into_iter()
        .filter(|h| h.event != "enqueued")
        .map(|h| (h.event, h.detail.unwrap_or_default()))
        .collect();
    let expected = [
        ("claimed", "worker A; from discovered; attempt 1".to_owned()),
        (
            "claimed",
            format!(
                "worker B; took over from fence 1 ({}) after lease expiry; attempt 1 refunded and \
                 kept; lost leases 1/7",
                lost.token
            ),
        ),
        (
            "completed",
            "version v1; doc/result.txt; sha256 abc123; extracted as plain text".to_owned(),
        ),
    ];
    let expected: Vec<(String, String)> = expected.into_iter().map(|(e, d)| (e.to_owned(), d)).collect();
    assert_eq!(lines, expected);
}

/// The accepted results a rerun pages through (`accepted_page`) are the
/// indexed documents of `indexed_page`, in id order after the id given,
/// with their path and recorded size, on both engines.
fn accepted_results_page_as_the_indexed_documents_do(b: Backend) {
    let t = TestDb::new(b);
    t.clock.set(START_MS);
    let s = t.open(t.options(1_000).checkpoint_every(None));
    for n in 0..5 {
        s.enqueue(&NewDoc::new(format!("doc{n}"), "v1")).unwrap();
    }
    // doc0..doc3 are accepted, doc1 without a recorded size; doc4 waits.
    for n in 0..4_u64 {
        let claim = s.claim("w").unwrap().expect("a document to claim");
        let path = format!("r/{n}.txt");
        let done = Completion::new(&path, "abc123");
        let done = if n == 1 { done } else { done.result_bytes(10 + n) };
        assert!(s.complete(claim, done).unwrap().is_accepted());
    }
    let all = s.accepted_page(i64::MIN, 100).unwrap();
    let indexed = s.indexed_page(i64::MIN, 100).unwrap();
    assert_eq!(all.len(), 4);
    for (a, i) in all.iter().zip(&indexed) {
        assert_eq!(
            (a.id, Some(&a.result_path), a.result_bytes),
            (i.id, i.result_path.as_ref(), i.result_bytes)
        );
    }
    let sizes: Vec<Option<u64>> = all.iter().map(|a| a.result_bytes).collect();
    assert_eq!(sizes, [Some(10), None, Some(12), Some(13)]);
    let after = s.accepted_page(all[1].id, 2).unwrap();
    let ids: Vec<i64> = after.iter().map(|a| a.id).collect();
    assert_eq!(ids, [all[2].id, all[3].id]);
}

/// A takeover is logged once, by the claim that made it, after its
/// transaction committed, on both engines; a fresh claim is not.
fn a_takeover_is_logged_once(b: Backend) {
    let t = TestDb::new(b);
    t.clock.set(START_MS);
    let s = store(&t, 1_000);
    s.enqueue(&NewDoc::new("doc", "v1")).unwrap();
    let lines = captured_logs(|| {
        let first = s.claim("A").unwrap().expect("A claims");
        assert!(!first.took_over);
        t.clock.advance(Duration::from_millis(1_500));
        let second = s.claim("B").unwrap().expect("B takes over");
        assert!(second.took_over);
    });
    let taken: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["fields"]["event"] == "claim_taken_over")
        .collect();
    assert_eq!(taken.len(), 1, "{lines:?}");
    assert_eq!(taken[0]["fields"]["from_fence"], 1);
    assert_eq!(taken[0]["fields"]["worker"], "B");
}

/// The JSON log lines `f` emits on this thread. One global subscriber (set
/// once for this test binary) writes each thread's lines to that thread's
/// own buffer: a subscriber scoped to one thread would race with the tests
/// running beside it over tracing's per-callsite interest cache. A thread
/// keeps lines only while it captures, so the other tests of the binary,
/// whose events reach the same subscriber, leave nothing behind.
fn captured_logs(f: impl FnOnce()) -> Vec<serde_json::Value> {
    thread_local! {
        static LINES: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
    }
    struct ThisThread;
    impl std::io::Write for ThisThread {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            LINES.with(|l| {
                if let Some(lines) = l.borrow_mut().as_mut() {
                    lines.extend_from_slice(b);
                }
            });
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(|| ThisThread)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
    });
    LINES.with(|l| *l.borrow_mut() = Some(Vec::new()));
    f();
    let bytes = LINES.with(|l| l.borrow_mut().take()).unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON log line"))
        .collect()
}

/// A worker's held claims renewed together: each from now, each fenced on
/// its own token, so the one taken over meanwhile is refused alone.
fn renew_many_extends_each_held_lease_and_refuses_the_one_taken_over(b: Backend) {
    let t = TestDb::new(b);
    let (mine, other) = (store(&t, 1_000), store(&t, 1_000));
    for key in ["a", "b", "c"] {
        mine.enqueue(&NewDoc::new(key, "v1")).unwrap();
    }
    let claims = mine.claim_batch("mine", 3).unwrap();
    assert_eq!(claims.len(), 3);
    t.clock.advance(Duration::from_millis(1_001));
    let taken = other
        .claim("thief")
        .unwrap()
        .expect("an expired lease is re-claimed");
    let owners: Vec<_> = claims.iter().map(|c| c.owner()).collect();

    let answers = mine.renew_many(&owners).unwrap();

    for (claim, answer) in claims.iter().zip(&answers) {
        let row = mine.job(claim.id).unwrap().unwrap();
        if claim.id == taken.id {
            assert!(matches!(answer, Fenced::Rejected(_)), "{answer:?}");
            assert_eq!(row.owner_token.as_deref(), Some(taken.token.as_str()));
        } else {
            assert_eq!(*answer, Fenced::Accepted);
            assert_eq!(row.lease_expires_at, Some(1_001 + 1_000));
        }
    }
    assert!(other.claim("thief").unwrap().is_none(), "the renewed leases hold");
    assert!(mine.renew_many(&[]).unwrap().is_empty());
}

on_both_backends!(
    a_takeover_is_logged_once,
    history_lines_read_the_same_on_both_engines,
    accepted_results_page_as_the_indexed_documents_do,
    a_dead_workers_lease_is_over_when_the_clock_goes_back_an_hour,
    a_lease_is_judged_by_its_own_length_not_the_claimers,
    a_small_step_back_within_the_lease_keeps_it,
    a_renewal_after_the_clock_went_back_re_anchors_the_lease,
    a_takeover_after_expiry_does_not_spend_an_attempt,
    a_document_that_kills_every_worker_dies_at_its_lost_lease_cap,
    max_lost_leases_must_be_at_least_one,
    renew_many_extends_each_held_lease_and_refuses_the_one_taken_over,
);
