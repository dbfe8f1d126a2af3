//! Batches on SQLite: a batch claim and a batch completion write exactly the
//! rows and the history that the same claims and completions one at a time
//! write, and a batch larger than one statement can bind is taken whole.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use leasehold::{Backoff, Claim, Completion, Fenced, ManualClock, NewDoc, Status, Store, StoreOptions};

/// Every table a claim or a completion writes, as text, with each owner
/// token replaced by its order of first appearance (tokens are random).
fn dump(path: &std::path::Path) -> String {
    let c = Connection::open(path).unwrap();
    let mut out = String::new();
    for sql in [
        "SELECT * FROM history ORDER BY job_id, seq",
        "SELECT * FROM jobs ORDER BY id",
        "SELECT * FROM outbox ORDER BY id",
        "SELECT * FROM outbox_totals",
    ] {
        let mut stmt = c.prepare(sql).unwrap();
        let n = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            let line: Vec<String> = (0..n)
                .map(|i| format!("{:?}", r.get::<_, rusqlite::types::Value>(i).unwrap()))
                .collect();
            out.push_str(&line.join(" | "));
            out.push('\n');
        }
        out.push_str("--\n");
    }
    let tokens: Vec<String> = c
        .prepare("SELECT token FROM history WHERE token IS NOT NULL ORDER BY job_id, seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let mut seen: Vec<&String> = Vec::new();
    for t in &tokens {
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    for (i, t) in seen.iter().enumerate() {
        out = out.replace(t.as_str(), &format!("<token {i}>"));
    }
    out
}

/// The same story twice; `batch` decides whether the last claims and
/// completions go one at a time or as batches. It covers fresh rows, a due
/// retry, a lease taken over, a row whose lost leases are used up (buried
/// on the way), a stale claim refused, a note and a delivery.
fn story(batch: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let clock = ManualClock::new(1_000_000);
    let opts = StoreOptions::default()
        .clock(Arc::new(clock.clone()))
        .lease(Duration::from_secs(10))
        .max_attempts(3)
        .max_lost_leases(2)
        .backoff(Backoff {
            jitter: 0.0,
            ..Backoff::default()
        });
    let store = Store::open(&path, opts).unwrap();
    let docs: Vec<NewDoc> = (0..8).map(|i| NewDoc::new(format!("d{i}"), "v1")).collect();
    store.enqueue_many(&docs).unwrap();
    // d0: its lease lost once already, and lost again below: buried.
    drop(store.claim("setup").unwrap().unwrap());
    clock.advance(Duration::from_secs(11));
    drop(store.claim("setup").unwrap().unwrap());
    // d1: a claim whose lease runs out; the batch below takes it over.
    let stale = store.claim("setup").unwrap().unwrap();
    // d2: failed once, its retry is due below.
    let failing = store.claim("setup").unwrap().unwrap();
    assert!(store.fail(failing, "boom", false).unwrap().is_accepted());
    clock.advance(Duration::from_secs(3600));

    let claims: Vec<Claim> = if batch {
        store.claim_batch("w", 6).unwrap()
    } else {
        (0..6).map_while(|_| store.claim("w").unwrap()).collect()
    };
    assert_eq!(claims.len(), 6);
    clock.advance(Duration::from_secs(1));
    // The new claim of d1 is finished last, alone; the stale one is refused.
    let (taken_over, claims): (Vec<Claim>, Vec<Claim>) = claims.into_iter().partition(|c| c.id == stale.id);
    let mut done: Vec<(Claim, Completion<'_>)> = vec![(stale, Completion::new("r/stale", "s0"))];
    for (i, c) in claims.into_iter().enumerate() {
        let completion = match i {
            0 => Completion::new("r/a", "s1").note("plain text"),
            1 => Completion::new("r/b", "s2").deliver("the text"),
            _ => Completion::new("r/c", "s3"),
        };
        done.push((c, completion));
    }
    let outcomes: Vec<Fenced> = if batch {
        store.complete_many(done).unwrap()
    } else {
        done.into_iter()
            .map(|(c, d)| store.complete(c, d).unwrap())
            .collect()
    };
    assert!(!outcomes[0].is_accepted());
    assert!(outcomes[1..].iter().all(Fenced::is_accepted), "{outcomes:?}");
    for c in taken_over {
        assert!(store
            .complete(c, Completion::new("r/d1", "s4"))
            .unwrap()
            .is_accepted());
    }
    drop(store);
    dump(&path)
}

/// A batch larger than one statement can bind is taken in slices.
#[test]
fn a_batch_of_thousands_is_claimed_and_completed_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("q.db"), StoreOptions::default()).unwrap();
    let docs: Vec<NewDoc> = (0..9000).map(|i| NewDoc::new(format!("d{i}"), "v1")).collect();
    store.enqueue_many(&docs).unwrap();
    let claims = store.claim_batch("w", 9000).unwrap();
    assert_eq!(claims.len(), 9000);
    let done: Vec<_> = claims
        .into_iter()
        .map(|c| (c, Completion::new("r", "s")))
        .collect();
    let out = store.complete_many(done).unwrap();
    assert!(out.iter().all(Fenced::is_accepted));
    assert_eq!(store.counts().unwrap().get(Status::Indexed), 9000);
}

#[test]
fn a_batch_writes_the_rows_and_history_of_one_at_a_time() {
    let one_by_one = story(false);
    assert!(one_by_one.contains("took over from fence"), "{one_by_one}");
    assert!(one_by_one.contains("lost leases exhausted"), "{one_by_one}");
    assert!(one_by_one.contains("complete_rejected"), "{one_by_one}");
    assert!(one_by_one.contains("from retrying"), "{one_by_one}");
    assert_eq!(story(true), one_by_one);
}
