//! The auth gate's and the outbox's rules on a real database, SQLite and
//! PostgreSQL (each body runs on both, `sqlite::NAME` and `postgres::NAME`),
//! driven by the manual clock: locks, the single probe, stale permits,
//! notices, expiry, pool holds, and the outbox cap and drain.

use crate::common;

use std::time::Duration;

use common::{Backend, TestDb};
use leasehold::store::{Admission, Answer, Drain, GateChange, GatePolicy, OutboxCap};
use leasehold::{Completion, NewDoc, Store};

const POLICY: GatePolicy = GatePolicy {
    lock_ttl: 10_000,
    probe_ttl: 2_000,
    notify_every: 3_600_000,
};

fn rejected() -> Answer {
    Answer::Rejected {
        error: "account a: credentials refused (HTTP 401)".into(),
        until: None,
    }
}

fn notices_of(s: &Store, kind: &str) -> usize {
    s.notices()
        .all()
        .unwrap()
        .iter()
        .filter(|n| n.kind == kind)
        .count()
}

/// Lock `a` with a rejection, let the lock run out, and take the probe slot.
fn locked_then_probing(t: &TestDb, s: &Store) -> leasehold::store::ProbePermit {
    s.accounts().report("a", None, &rejected(), &POLICY).unwrap();
    t.clock.advance(Duration::from_millis(10_000));
    permit(s.accounts().admit("a", "p", &POLICY).unwrap())
}

fn permit(a: Admission) -> leasehold::store::ProbePermit {
    match a {
        Admission::Probe(p) => p,
        other => panic!("expected the probe slot, got {other:?}"),
    }
}

fn a_rejection_locks_for_everyone_until_the_ttl_then_one_probe(b: Backend) {
    let t = TestDb::new(b);
    let (p1, p2) = (t.handle(30_000), t.handle(30_000));
    assert_eq!(p1.accounts().admit("a", "p", &POLICY).unwrap(), Admission::Go);
    let change = p1.accounts().report("a", None, &rejected(), &POLICY).unwrap();
    assert_eq!(
        change,
        GateChange::Locked {
            epoch: 1,
            until: 10_000
        }
    );
    // Another process (its own handle) may not call the upstream.
    assert_eq!(
        p2.accounts().admit("a", "p", &POLICY).unwrap(),
        Admission::Wait {
            until: 10_000,
            probing: false
        }
    );
    // A second rejection seen by another process does not start a new incident.
    assert_eq!(
        p2.accounts().report("a", None, &rejected(), &POLICY).unwrap(),
        GateChange::Unchanged
    );
    t.clock.advance(Duration::from_millis(10_000));
    let probe = permit(p2.accounts().admit("a", "p", &POLICY).unwrap());
    assert_eq!(probe.epoch, 1);
    // Everyone else waits while the probe slot is held.
    assert!(matches!(
        p1.accounts().admit("a", "p", &POLICY).unwrap(),
        Admission::Wait { probing: true, .. }
    ));
    // The probe fails: locked for another TTL, one probe counted.
    let again = p2
        .accounts()
        .report("a", Some(&probe), &rejected(), &POLICY)
        .unwrap();
    assert_eq!(
        again,
        GateChange::Locked {
            epoch: 1,
            until: 20_000
        }
    );
    let state = &p1.accounts().states().unwrap()[0];
    assert_eq!((state.state.as_str(), state.probes), ("locked", 1));
    assert_eq!(notices_of(&p1, "lock"), 1, "one lock notice per notify_every");
}

fn retry_after_sets_the_end_of_the_lock(b: Backend) {
    let t = TestDb::new(b);
    let s = t.handle(30_000);
    let answer = Answer::Rejected {
        error: "locked upstream".into(),
        until: Some(42_000),
    };
    assert_eq!(
        s.accounts().report("a", None, &answer, &POLICY).unwrap(),
        GateChange::Locked {
            epoch: 1,
            until: 42_000
        }
    );
}

fn probe_success_opens_for_everyone_with_one_recovery_notice(b: Backend) {
    let t = TestDb::new(b);
    let s = t.handle(30_000);
    let probe = locked_then_probing(&t, &s);
    assert_eq!(
        s.accounts()
            .report("a", Some(&probe), &Answer::Accepted, &POLICY)
            .unwrap(),
        GateChange::Recovered { epoch: 1 }
    );
    assert_eq!(s.accounts().admit("a", "p", &POLICY).unwrap(), Admission::Go);
    assert_eq!(notices_of(&s, "lock"), 1);
    assert_eq!(notices_of(&s, "recovery"), 1);
    let recovery = s
        .notices()
        .all()
        .unwrap()
        .into_iter()
        .find(|n| n.kind == "recovery")
        .unwrap();
    assert!(recovery.message.contains("after 10 s"), "{}", recovery.message);
    assert!(recovery.message.contains("1 probe(s)"), "{}", recovery.message);
    // The next lock is a new incident, announced again.
    s.accounts().report("a", None, &rejected(), &POLICY).unwrap();
    assert_eq!(notices_of(&s, "lock"), 2);
    assert_eq!(s.accounts().states().unwrap()[0].epoch, 2);
}

fn a_late_probe_answer_from_an_expired_slot_changes_nothing(b: Backend) {
    let t = TestDb::new(b);
    let (dead, alive) = (t.handle(30_000), t.handle(30_000));
    let old = locked_then_probing(&t, &dead);
    // The prober goes silent past probe_ttl; another process takes the slot.
    t.clock.advance(Duration::from_millis(2_000));
    let fresh = permit(alive.accounts().admit("a", "p", &POLICY).unwrap());
    assert_ne!(old.token, fresh.token);
    alive
        .accounts()
        .report("a", Some(&fresh), &rejected(), &POLICY)
        .unwrap();
    let before = alive.accounts().states().unwrap();
    // The old prober's answer arrives now: a success must not unlock.
    assert_eq!(
        dead.accounts()
            .report("a", Some(&old), &Answer::Accepted, &POLICY)
            .unwrap(),
        GateChange::Stale
    );
    assert_eq!(alive.accounts().states().unwrap(), before);
    assert_eq!(notices_of(&alive, "recovery"), 0);
}

fn a_transient_probe_answer_frees_the_slot_without_counting(b: Backend) {
    let t = TestDb::new(b);
    let s = t.handle(30_000);
    let probe = locked_then_probing(&t, &s);
    assert_eq!(
        s.accounts()
            .report("a", Some(&probe), &Answer::Transient, &POLICY)
            .unwrap(),
        GateChange::SlotFreed
    );
    assert_eq!(s.accounts().states().unwrap()[0].probes, 0);
    // The slot is free at once, not after probe_ttl.
    assert!(matches!(
        s.accounts().admit("a", "p", &POLICY).unwrap(),
        Admission::Probe(_)
    ));
}

fn a_manual_unlock_opens_and_is_recorded(b: Backend) {
    let t = TestDb::new(b);
    let s = t.handle(30_000);
    s.accounts().report("a", None, &rejected(), &POLICY).unwrap();
    assert!(s.accounts().unlock("a", "tester").unwrap());
    assert_eq!(s.accounts().admit("a", "p", &POLICY).unwrap(), Admission::Go);
    let history = s.accounts().history("a").unwrap();
    assert!(history
        .iter()
        .any(|h| h.event == "manual_unlock" && h.detail.as_deref() == Some("tester")));
    assert_eq!(notices_of(&s, "recovery"), 1);
    assert!(!s.accounts().unlock("a", "tester").unwrap(), "already open");
}

fn expiry_warnings_start_at_the_window_and_go_once_a_day(b: Backend) {
    let t = TestDb::new(b);
    let (p1, p2) = (t.handle(30_000), t.handle(30_000));
    let day = 86_400_000i64;
    let expires_on = 100; // day 100 since 1970-01-01
    let warned_on = |days_before: i64| {
        t.clock.set((expires_on - days_before) * day + 3_600_000);
        let before = notices_of(&p1, "expiry");
        // Two processes check the same day: one warning between them.
        assert_eq!(p1.accounts().expiry("a", expires_on, 14).unwrap(), days_before);
        assert_eq!(p2.accounts().expiry("a", expires_on, 14).unwrap(), days_before);
        notices_of(&p1, "expiry") - before
    };
    assert_eq!(warned_on(20), 0);
    assert_eq!(warned_on(15), 0);
    assert_eq!(warned_on(14), 1);
    assert_eq!(warned_on(13), 1);
    assert_eq!(warned_on(0), 1);
}

fn two_accounts_locked_within_a_ttl_make_one_shared_cause_notice(b: Backend) {
    let t = TestDb::new(b);
    let s = t.handle(30_000);
    let pool = ["a".to_string(), "b".to_string(), "c".to_string()];
    let hold = Duration::from_secs(60);
    s.accounts().report("a", None, &rejected(), &POLICY).unwrap();
    // One lock: a new process is placed on an open account.
    assert_eq!(
        s.accounts().hold("p0", &pool, hold, &POLICY).unwrap().as_deref(),
        Some("b")
    );
    t.clock.advance(Duration::from_millis(3_000));
    s.accounts().report("b", None, &rejected(), &POLICY).unwrap();
    assert_eq!(notices_of(&s, "lock"), 1, "the first lock is announced alone");
    assert_eq!(notices_of(&s, "shared_cause"), 1);
    // A shared cause: locks no longer steer the choice, so nobody is moved
    // onto the remaining open account `c`.
    assert_eq!(
        s.accounts().hold("p1", &pool, hold, &POLICY).unwrap().as_deref(),
        Some("a")
    );
}

fn a_third_account_locked_after_the_shared_cause_notice_is_told_and_so_is_its_recovery(b: Backend) {
    let t = TestDb::new(b);
    let s = t.handle(30_000);
    for a in ["a", "b", "c"] {
        s.accounts().report(a, None, &rejected(), &POLICY).unwrap();
        t.clock.advance(Duration::from_millis(1_000));
    }
    assert_eq!(notices_of(&s, "shared_cause"), 1, "a and b");
    let locks: Vec<String> = s
        .notices()
        .all()
        .unwrap()
        .into_iter()
        .filter(|n| n.kind == "lock")
        .map(|n| n.account)
        .collect();
    assert_eq!(
        locks,
        ["a", "c"],
        "c locked while the shared-cause notice was recent"
    );
    for a in ["a", "b", "c"] {
        assert!(s.accounts().unlock(a, "test").unwrap());
    }
    assert_eq!(notices_of(&s, "recovery"), 3, "every recovery is told");
}

fn probe_due_lists_locks_that_ran_out_with_the_slot_free(b: Backend) {
    let t = TestDb::new(b);
    let s = t.handle(30_000);
    s.accounts().report("a", None, &rejected(), &POLICY).unwrap();
    t.clock.advance(Duration::from_millis(2_000));
    s.accounts().report("b", None, &rejected(), &POLICY).unwrap();
    assert!(s.accounts().probe_due().unwrap().is_empty(), "both still locked");
    t.clock.advance(Duration::from_millis(8_000));
    assert_eq!(s.accounts().probe_due().unwrap(), ["a"]);
    // Someone takes a's slot: not due again until the slot runs out.
    permit(s.accounts().admit("a", "p", &POLICY).unwrap());
    assert!(s.accounts().probe_due().unwrap().is_empty());
    t.clock.advance(Duration::from_millis(2_000));
    assert_eq!(s.accounts().probe_due().unwrap(), ["a", "b"]);
}

fn pool_holds_are_sticky_and_spread_over_open_accounts(b: Backend) {
    let t = TestDb::new(b);
    let s = t.handle(30_000);
    let pool = ["a".to_string(), "b".to_string()];
    let hold = Duration::from_secs(60);
    let p1 = s.accounts().hold("p1", &pool, hold, &POLICY).unwrap().unwrap();
    let p2 = s.accounts().hold("p2", &pool, hold, &POLICY).unwrap().unwrap();
    assert_ne!(p1, p2, "two holders spread over two accounts");
    // p1's account locks: p1 keeps it (and waits); a new process takes the open one.
    s.accounts().report(&p1, None, &rejected(), &POLICY).unwrap();
    assert_eq!(
        s.accounts().hold("p1", &pool, hold, &POLICY).unwrap().as_deref(),
        Some(p1.as_str())
    );
    assert_eq!(
        s.accounts().hold("p3", &pool, hold, &POLICY).unwrap().as_deref(),
        Some(p2.as_str())
    );
    let holders = || {
        s.accounts()
            .states()
            .unwrap()
            .iter()
            .map(|a| a.holders)
            .sum::<i64>()
    };
    assert_eq!(holders(), 3);
    // A process that lets go is no longer counted.
    s.accounts().unhold("p2").unwrap();
    assert_eq!(holders(), 2);
    // A hold that was not renewed lapses.
    t.clock.advance(Duration::from_secs(61));
    assert_eq!(holders(), 0);
}

fn outbox_store(t: &TestDb, max_bytes: u64, max_age_ms: i64) -> Store {
    let mut o = t.options(30_000);
    o.outbox = OutboxCap {
        max_age_ms,
        max_bytes,
    };
    t.open(o)
}

fn accept(s: &Store, key: &str, text: &str) {
    s.enqueue(&NewDoc::new(key, "v1")).unwrap();
    let c = s.claim("w").unwrap().unwrap();
    assert!(s
        .complete(c, Completion::new("r", "sum").deliver(text).index(text))
        .unwrap()
        .is_accepted());
}

fn only_accepted_results_enter_the_outbox_once(b: Backend) {
    let t = TestDb::new(b);
    let s = outbox_store(&t, 1 << 20, 86_400_000);
    s.enqueue(&NewDoc::new("k", "v1")).unwrap();
    let stale = s.claim("w1").unwrap().unwrap();
    t.clock.advance(Duration::from_secs(31));
    let owner = s.claim("w2").unwrap().unwrap();
    assert!(!s
        .complete(stale, Completion::new("r", "x").deliver("stale").index("stale"))
        .unwrap()
        .is_accepted());
    assert!(s
        .complete(
            leasehold::testing::dup(&owner),
            Completion::new("r", "y").deliver("fresh").index("fresh")
        )
        .unwrap()
        .is_accepted());
    assert!(!s
        .complete(owner, Completion::new("r", "y").deliver("again").index("again"))
        .unwrap()
        .is_accepted());
    let totals = s.outbox().totals().unwrap();
    assert_eq!(totals.rows, 1);
    match s
        .outbox()
        .claim(10, Duration::from_secs(5), Duration::ZERO)
        .unwrap()
    {
        Drain::Send(b) => {
            assert_eq!(b.items.len(), 1);
            assert_eq!(
                (b.items[0].key.as_str(), b.items[0].text.as_str()),
                ("k", "fresh")
            );
            assert_eq!(b.items[0].version, "v1");
        }
        other => panic!("{other:?}"),
    }
}

fn the_cap_drops_the_oldest_and_counts_them(b: Backend) {
    let t = TestDb::new(b);
    let s = outbox_store(&t, 250, 60_000);
    for i in 0..5 {
        accept(&s, &format!("k{i}"), &"x".repeat(100));
    }
    let totals = s.outbox().totals().unwrap();
    assert_eq!((totals.rows, totals.dropped), (2, 3), "{totals:?}");
    // The kept ones are the newest.
    let Drain::Send(b) = s
        .outbox()
        .claim(10, Duration::from_secs(5), Duration::ZERO)
        .unwrap()
    else {
        panic!("a batch")
    };
    let keys: Vec<_> = b.items.iter().map(|i| i.key.clone()).collect();
    assert_eq!(keys, ["k3", "k4"]);
    s.outbox().undelivered(&b, 0).unwrap();
    // Past max_age, old rows go too (never the newest).
    t.clock.advance(Duration::from_secs(61));
    accept(&s, "k5", "y");
    let totals = s.outbox().totals().unwrap();
    assert_eq!((totals.rows, totals.dropped), (1, 5), "{totals:?}");
}

fn a_batch_in_flight_is_not_sent_twice_and_comes_back_if_its_sender_dies(b: Backend) {
    let t = TestDb::new(b);
    let s = outbox_store(&t, 1 << 20, 86_400_000);
    for i in 0..5 {
        accept(&s, &format!("k{i}"), "text");
    }
    let lease = Duration::from_secs(5);
    let Drain::Send(first) = s.outbox().claim(3, lease, Duration::ZERO).unwrap() else {
        panic!()
    };
    let Drain::Send(second) = s.outbox().claim(3, lease, Duration::ZERO).unwrap() else {
        panic!()
    };
    assert_eq!(first.items.len(), 3);
    assert_eq!(second.items.len(), 2, "rows in flight are not handed out again");
    assert_eq!(s.outbox().delivered(&second).unwrap(), 2);
    // The first sender dies; after its lease its rows go again, exactly those.
    t.clock.advance(Duration::from_secs(6));
    let Drain::Send(again) = s.outbox().claim(10, lease, Duration::ZERO).unwrap() else {
        panic!()
    };
    assert_eq!(again.items, first.items);
    // The dead sender's late report removes nothing that is no longer its own.
    assert_eq!(s.outbox().delivered(&first).unwrap(), 0);
    assert_eq!(s.outbox().delivered(&again).unwrap(), 3);
    assert_eq!(s.outbox().totals().unwrap().rows, 0);
    assert_eq!(s.outbox().totals().unwrap().delivered, 5);
}

fn the_shared_pace_spaces_batches(b: Backend) {
    let t = TestDb::new(b);
    let (p1, p2) = (outbox_store(&t, 1 << 20, 86_400_000), t.handle(30_000));
    for i in 0..4 {
        accept(&p1, &format!("k{i}"), "text");
    }
    let lease = Duration::from_secs(5);
    let interval = Duration::from_millis(500);
    assert!(matches!(
        p1.outbox().claim(1, lease, interval).unwrap(),
        Drain::Send(_)
    ));
    // Another process is held to the same pace.
    assert_eq!(
        p2.outbox().claim(1, lease, interval).unwrap(),
        Drain::Paced { until: 500 }
    );
    t.clock.advance(interval);
    assert!(matches!(
        p2.outbox().claim(1, lease, interval).unwrap(),
        Drain::Send(_)
    ));
}

fn a_429_paces_everyone_and_never_locks(b: Backend) {
    let t = TestDb::new(b);
    let (p1, p2) = (t.handle(30_000), t.handle(30_000));
    let paced = Answer::RateLimited { until: 5_000 };
    assert_eq!(
        p1.accounts().report("a", None, &paced, &POLICY).unwrap(),
        GateChange::Paced { until: 5_000 }
    );
    assert_eq!(
        p2.accounts().admit("a", "p2", &POLICY).unwrap(),
        Admission::Paced { until: 5_000 }
    );
    let state = &p2.accounts().states().unwrap()[0];
    assert_eq!(
        (state.state.as_str(), state.epoch),
        ("open", 0),
        "a 429 is never a lock"
    );
    assert_eq!(notices_of(&p1, "lock"), 0);
    t.clock.advance(Duration::from_millis(5_000));
    assert_eq!(p2.accounts().admit("a", "p2", &POLICY).unwrap(), Admission::Go);
}

/// Run `f(i, store)` on `n` threads at once, each with its own store handle
/// (its own connections, as processes have), started together.
fn at_once<T: Send>(t: &TestDb, n: usize, f: impl Fn(usize, &Store) -> T + Sync) -> Vec<T> {
    let stores: Vec<Store> = (0..n).map(|_| t.handle(30_000)).collect();
    let start = std::sync::Barrier::new(n);
    std::thread::scope(|scope| {
        let running: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (start, f) = (&start, &f);
                scope.spawn(move || {
                    start.wait();
                    f(i, s)
                })
            })
            .collect();
        running.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Processes that meet a rejection together make one incident and one lock
/// notice; after the lock, processes asking together get one probe slot.
fn racing_processes_make_one_incident_one_notice_and_one_prober(b: Backend) {
    let t = TestDb::new(b);
    for round in 0..5 {
        let account = format!("acct{round}");
        let changes = at_once(&t, 6, |_, s| {
            s.accounts().report(&account, None, &rejected(), &POLICY).unwrap()
        });
        let locks = changes
            .iter()
            .filter(|c| matches!(c, GateChange::Locked { .. }))
            .count();
        assert_eq!(locks, 1, "round {round}: {changes:?}");
        t.clock.advance(Duration::from_millis(10_000));
        let admissions = at_once(&t, 6, |i, s| {
            s.accounts().admit(&account, &format!("p{i}"), &POLICY).unwrap()
        });
        let probes = admissions
            .iter()
            .filter(|a| matches!(a, Admission::Probe(_)))
            .count();
        assert_eq!(probes, 1, "round {round}: {admissions:?}");
        let s = t.handle(30_000);
        let granted = s
            .accounts()
            .history(&account)
            .unwrap()
            .iter()
            .filter(|e| e.event == "probe_granted")
            .count();
        assert_eq!(granted, 1, "round {round}");
        let lock_notices = s
            .notices()
            .all()
            .unwrap()
            .iter()
            .filter(|n| n.kind == "lock" && n.account == account)
            .count();
        assert_eq!(lock_notices, 1, "round {round}");
        s.accounts().unlock(&account, "test").unwrap();
    }
}

/// Two accounts rejected at the same moment are a shared cause: exactly one
/// shared-cause notice names both, and no lock goes untold.
fn two_accounts_rejected_together_make_one_shared_cause_notice(b: Backend) {
    let t = TestDb::new(b);
    for round in 0..5 {
        let names = [format!("x{round}"), format!("y{round}")];
        at_once(&t, 2, |i, s| {
            s.accounts()
                .report(&names[i], None, &rejected(), &POLICY)
                .unwrap()
        });
        let s = t.handle(30_000);
        let notices = s.notices().all().unwrap();
        let shared: Vec<_> = notices
            .iter()
            .filter(|n| n.kind == "shared_cause" && names.iter().any(|a| n.message.contains(a.as_str())))
            .collect();
        assert_eq!(shared.len(), 1, "round {round}: {notices:?}");
        for a in &names {
            assert!(
                shared[0].message.contains(a.as_str()),
                "{a}: {}",
                shared[0].message
            );
            s.accounts().unlock(a, "test").unwrap();
        }
        // The next round is a new shared cause.
        t.clock.advance(Duration::from_millis(10_001));
    }
}

/// Senders claiming together never take the same notice, nor the same
/// outbox row, and between them take every one.
fn racing_senders_take_each_notice_and_each_outbox_row_once(b: Backend) {
    let t = TestDb::new(b);
    let s = outbox_store(&t, 1 << 20, 86_400_000);
    for i in 0..12 {
        accept(&s, &format!("k{i}"), "text");
        s.accounts()
            .report(&format!("a{i}"), None, &rejected(), &POLICY)
            .unwrap();
    }
    let lease = Duration::from_secs(60);
    let taken = at_once(&t, 4, |i, s| {
        let mut notices = Vec::new();
        while let Some(n) = s.notices().claim(&format!("sender{i}"), lease).unwrap() {
            notices.push(n.id);
        }
        let mut rows = Vec::new();
        while let Drain::Send(batch) = s.outbox().claim(2, lease, Duration::ZERO).unwrap() {
            rows.extend(batch.items.iter().map(|it| it.id));
        }
        (notices, rows)
    });
    let all_notices = s.notices().all().unwrap().len();
    let mut notices: Vec<i64> = taken.iter().flat_map(|(n, _)| n.clone()).collect();
    let mut rows: Vec<i64> = taken.iter().flat_map(|(_, r)| r.clone()).collect();
    notices.sort_unstable();
    rows.sort_unstable();
    let claimed = notices.len();
    notices.dedup();
    rows.dedup();
    assert_eq!(
        (claimed, notices.len()),
        (all_notices, all_notices),
        "a notice taken twice or never"
    );
    assert_eq!(rows.len(), 12, "an outbox row taken twice or never: {taken:?}");
    assert_eq!(taken.iter().map(|(_, r)| r.len()).sum::<usize>(), 12);
}

/// A batch of completions queues the text of exactly its accepted results,
/// once each, in the batch's order; a refused one queues nothing.
fn a_batch_of_completions_queues_exactly_its_accepted_results(b: Backend) {
    let t = TestDb::new(b);
    let s = outbox_store(&t, 1 << 20, 86_400_000);
    for i in 0..4 {
        s.enqueue(&NewDoc::new(format!("k{i}"), "v1")).unwrap();
    }
    let claims = s.claim_batch("w1", 4).unwrap();
    assert_eq!(claims.len(), 4);
    // k1's claim goes stale: another worker takes it over after the lease.
    t.clock.advance(Duration::from_secs(31));
    let mut claims = claims.into_iter();
    let (c0, c1, c2, c3) = (
        claims.next().unwrap(),
        claims.next().unwrap(),
        claims.next().unwrap(),
        claims.next().unwrap(),
    );
    let texts = ["t0", "t1", "t2", "t3"];
    let renewed: Vec<_> = [&c0, &c2, &c3]
        .iter()
        .map(|c| s.renew(&c.owner()).unwrap())
        .collect();
    assert!(renewed.iter().all(|r| r.is_accepted()));
    assert_eq!(s.claim("w2").unwrap().map(|c| c.key), Some("k1".to_string()));
    let done: Vec<_> = [c3, c1, c0, c2]
        .into_iter()
        .map(|c| {
            let i: usize = c.key[1..].parse().unwrap();
            let completion = Completion::new("r", "sum").deliver(texts[i]);
            (c, completion)
        })
        .collect();
    let outcomes = s.complete_many(done).unwrap();
    let accepted: Vec<bool> = outcomes.iter().map(|o| o.is_accepted()).collect();
    assert_eq!(accepted, [true, false, true, true]);
    let Drain::Send(batch) = s
        .outbox()
        .claim(10, Duration::from_secs(5), Duration::ZERO)
        .unwrap()
    else {
        panic!("a batch")
    };
    let queued: Vec<(&str, &str)> = batch
        .items
        .iter()
        .map(|it| (it.key.as_str(), it.text.as_str()))
        .collect();
    assert_eq!(queued, [("k3", "t3"), ("k0", "t0"), ("k2", "t2")]);
    assert_eq!(s.outbox().totals().unwrap().rows, 3);
}

/// The threads of one process share its holder name: holding together, they
/// all get one account (the process's), and the next process the other one.
fn threads_of_one_holder_holding_together_get_one_account(b: Backend) {
    let t = TestDb::new(b);
    let pool = ["a".to_string(), "b".to_string()];
    let hold = Duration::from_secs(60);
    for round in 0..5 {
        let (p1, p2) = (format!("p1-{round}"), format!("p2-{round}"));
        let got = at_once(&t, 4, |i, s| {
            let holder = if i % 2 == 0 { &p1 } else { &p2 };
            (
                i % 2,
                s.accounts().hold(holder, &pool, hold, &POLICY).unwrap().unwrap(),
            )
        });
        let of = |h: usize| -> Vec<&String> { got.iter().filter(|g| g.0 == h).map(|g| &g.1).collect() };
        let (first, second) = (of(0), of(1));
        assert!(first.iter().all(|a| *a == first[0]), "round {round}: {got:?}");
        assert!(second.iter().all(|a| *a == second[0]), "round {round}: {got:?}");
        assert_ne!(
            first[0], second[0],
            "round {round}: two processes spread: {got:?}"
        );
        let s = t.handle(30_000);
        s.accounts().unhold(&p1).unwrap();
        s.accounts().unhold(&p2).unwrap();
    }
}

on_both_backends!(
    threads_of_one_holder_holding_together_get_one_account,
    a_batch_of_completions_queues_exactly_its_accepted_results,
    racing_processes_make_one_incident_one_notice_and_one_prober,
    two_accounts_rejected_together_make_one_shared_cause_notice,
    racing_senders_take_each_notice_and_each_outbox_row_once,
    a_rejection_locks_for_everyone_until_the_ttl_then_one_probe,
    retry_after_sets_the_end_of_the_lock,
    probe_success_opens_for_everyone_with_one_recovery_notice,
    a_late_probe_answer_from_an_expired_slot_changes_nothing,
    a_transient_probe_answer_frees_the_slot_without_counting,
    a_manual_unlock_opens_and_is_recorded,
    expiry_warnings_start_at_the_window_and_go_once_a_day,
    two_accounts_locked_within_a_ttl_make_one_shared_cause_notice,
    a_third_account_locked_after_the_shared_cause_notice_is_told_and_so_is_its_recovery,
    probe_due_lists_locks_that_ran_out_with_the_slot_free,
    pool_holds_are_sticky_and_spread_over_open_accounts,
    only_accepted_results_enter_the_outbox_once,
    the_cap_drops_the_oldest_and_counts_them,
    a_batch_in_flight_is_not_sent_twice_and_comes_back_if_its_sender_dies,
    the_shared_pace_spaces_batches,
    a_429_paces_everyone_and_never_locks,
);
