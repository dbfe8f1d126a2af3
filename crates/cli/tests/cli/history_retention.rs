//! History retention (`[store] history_keep`, applied by `gc`) on both
//! engines, verified by counts: lines older than the setting go, each
//! document's last line stays however old, younger lines (refused writes
//! included) stay, and a dry run changes nothing.

use crate::common;

use std::time::Duration;

use common::{Backend, TestDb};
use leasehold::testing::dup;
use leasehold::{JobId, NewDoc, Store};

const DAY_MS: i64 = 24 * 3600 * 1000;
const LEASE_MS: u64 = 10;

fn lines(store: &Store, id: JobId) -> Vec<String> {
    store.history(id).unwrap().into_iter().map(|h| h.event).collect()
}

/// A claim by `worker` whose lease runs out, taken over by `thief`, whose
/// completion is accepted after the first's is refused.
fn refused_then_accepted(t: &TestDb, store: &Store, worker: &str, thief: &str) {
    let late = store.claim(worker).unwrap().expect("a claimable document");
    t.clock.advance(Duration::from_millis(LEASE_MS + 1));
    let taken = store
        .claim(thief)
        .unwrap()
        .expect("the expired lease is taken over");
    assert_eq!(taken.id, late.id);
    assert!(!store
        .complete(dup(&late), leasehold::Completion::new("late", "late"))
        .unwrap()
        .is_accepted());
    assert!(store
        .complete(taken, leasehold::Completion::new("r", "s"))
        .unwrap()
        .is_accepted());
}

fn retention_keeps_last_and_young(backend: Backend) {
    let t = TestDb::new(backend);
    let store = t.open(
        t.options(LEASE_MS)
            .history_keep(Duration::from_millis(30 * DAY_MS as u64)),
    );
    // Day 0: `a` done plainly, `b` through a refused write.
    let a = store.enqueue(&NewDoc::new("a", "v1")).unwrap().id();
    assert!(store
        .complete(
            store.claim("w").unwrap().unwrap(),
            leasehold::Completion::new("ra", "sa")
        )
        .unwrap()
        .is_accepted());
    let b = store.enqueue(&NewDoc::new("b", "v1")).unwrap().id();
    refused_then_accepted(&t, &store, "late", "thief");
    // Day 31: `a` requeued (its old lines are no longer its last); `c` new,
    // with a refused write of its own.
    t.clock.set(31 * DAY_MS);
    assert!(store.requeue(a, "again").unwrap());
    assert!(store
        .complete(
            store.claim("w").unwrap().unwrap(),
            leasehold::Completion::new("ra2", "sa2")
        )
        .unwrap()
        .is_accepted());
    let c = store.enqueue(&NewDoc::new("c", "v1")).unwrap().id();
    refused_then_accepted(&t, &store, "late", "thief");

    let (a_before, b_before, c_before) = (lines(&store, a), lines(&store, b), lines(&store, c));
    assert_eq!(a_before.len(), 6, "{a_before:?}");
    assert!(b_before.iter().any(|e| e == "complete_rejected"), "{b_before:?}");
    assert!(c_before.iter().any(|e| e == "complete_rejected"), "{c_before:?}");
    // a: its three day-0 lines; b: all but its last.
    let expected_removed = 3 + (b_before.len() as u64 - 1);

    let dry = store.prune_history(true).unwrap();
    assert_eq!(dry.cutoff, 31 * DAY_MS + LEASE_MS as i64 + 1 - 30 * DAY_MS);
    assert_eq!(
        (dry.removed, dry.removed_rejected, dry.kept_last),
        (expected_removed, 1, 1)
    );
    assert_eq!(lines(&store, a), a_before, "a dry run removes nothing");
    assert_eq!(lines(&store, b), b_before, "a dry run removes nothing");

    let done = store.prune_history(false).unwrap();
    assert_eq!(done, dry, "the sweep removes what the dry run counted");
    assert_eq!(
        lines(&store, a),
        a_before[3..].to_vec(),
        "a keeps its young lines"
    );
    assert_eq!(
        lines(&store, b),
        vec![b_before.last().unwrap().clone()],
        "b keeps its last line"
    );
    assert_eq!(
        lines(&store, c),
        c_before,
        "young lines, refused writes too, stay"
    );

    // The next line of b follows its kept last one; then the old last line
    // is no longer last and goes at the next sweep.
    assert!(store.requeue(b, "again").unwrap());
    assert_eq!(lines(&store, b).len(), 2);
    let again = store.prune_history(false).unwrap();
    assert_eq!(
        (again.removed, again.removed_rejected, again.kept_last),
        (1, 0, 0)
    );
    assert_eq!(lines(&store, b), vec!["requeued".to_owned()]);
}

/// Nothing older than the setting: nothing to remove, nothing kept.
fn retention_on_young_history_is_a_no_op(backend: Backend) {
    let t = TestDb::new(backend);
    let store = t.handle(LEASE_MS);
    t.clock.set(10 * DAY_MS);
    let a = store.enqueue(&NewDoc::new("a", "v1")).unwrap().id();
    refused_then_accepted(&t, &store, "late", "thief");
    let before = lines(&store, a);
    t.clock.set(39 * DAY_MS);
    let p = store.prune_history(false).unwrap();
    assert_eq!((p.removed, p.removed_rejected, p.kept_last), (0, 0, 0));
    assert_eq!(lines(&store, a), before);
    // Past the default 30 days, all but the last line go.
    t.clock.set(41 * DAY_MS);
    let p = store.prune_history(false).unwrap();
    assert_eq!(
        (p.removed, p.removed_rejected, p.kept_last),
        (before.len() as u64 - 1, 1, 1)
    );
}

fn zero_history_keep_is_refused(backend: Backend) {
    let t = TestDb::new(backend);
    let Err(err) = Store::open(&t.location, t.options(LEASE_MS).history_keep(Duration::ZERO)) else {
        panic!("a zero history_keep is refused");
    };
    assert!(err.to_string().contains("history_keep"), "{err}");
}

on_both_backends!(
    retention_keeps_last_and_young,
    retention_on_young_history_is_a_no_op,
    zero_history_keep_is_refused
);

/// `gc` applies `[store] history_keep` from the configuration file by the
/// injected clock; `--dry-run --json` counts and removes nothing.
#[test]
fn gc_applies_history_keep_from_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let (docs, data) = (dir.path().join("docs"), dir.path().join("data"));
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("one.txt"), "first").unwrap();
    std::fs::write(docs.join("two.txt"), "second").unwrap();
    let clock = dir.path().join("clock");
    let config = dir.path().join("leasehold.toml");
    std::fs::write(&config, "[store]\nhistory_keep = \"10d\"\n").unwrap();
    let run = |offset_days: i64, args: &[&str]| {
        std::fs::write(&clock, (offset_days * DAY_MS).to_string()).unwrap();
        let out = std::process::Command::new(common::BIN)
            .arg("--data")
            .arg(&data)
            .arg("--config")
            .arg(&config)
            .args(args)
            .env("LEASEHOLD_TEST_CLOCK_FILE", &clock)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    run(0, &["run", docs.to_str().unwrap()]);
    let history_of = |offset: i64| {
        let inspect: serde_json::Value =
            serde_json::from_slice(&run(offset, &["inspect", "one.txt", "--json"])).unwrap();
        inspect["history"].as_array().unwrap().len()
    };
    let before = history_of(0);
    assert!(before >= 3, "enqueued, claimed, completed at least");
    let gc = |offset, dry: bool| -> serde_json::Value {
        let args: &[&str] = if dry {
            &["gc", "--dry-run", "--json"]
        } else {
            &["gc", "--json"]
        };
        serde_json::from_slice(&run(offset, args)).expect("gc --json prints JSON")
    };
    // Nine days on, nothing is older than ten.
    assert_eq!(gc(9, false)["history"]["removed"], 0);
    let dry = gc(11, true);
    assert_eq!(dry["history"]["removed"], 2 * (before as u64 - 1), "{dry}");
    assert_eq!(dry["history"]["kept_last"], 2, "{dry}");
    assert_eq!(history_of(11), before, "a dry run removes nothing");
    let done = gc(11, false);
    for figure in ["removed", "removed_rejected", "kept_last"] {
        assert_eq!(done["history"][figure], dry["history"][figure], "{figure}");
    }
    assert_eq!(history_of(11), 1);
}
