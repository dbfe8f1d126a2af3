//! The shared credential end to end: real `leasehold` processes, one
//! database (each test runs on a SQLite file and on PostgreSQL,
//! `sqlite::NAME` and `postgres::NAME`), and a real HTTP upstream on
//! 127.0.0.1 that counts every request per account and rejects, locks,
//! rate-limits or hangs on command.
//!
//! Lock TTLs are an hour and the test moves every process's clock past them
//! through `LEASEHOLD_TEST_CLOCK_FILE`, so "nobody calls during the lock" and
//! "exactly one probe per TTL" are counted, not timed. The only sleeps are
//! windows in which the test watches that *no* request arrives.

use crate::common;

use std::time::{Duration, Instant};

use common::gate_env::{wait_for, Env, HOUR_MS, USER};
use common::upstream_server::Mode;
use common::Backend;

/// Watch for `secs`: the account's request count must not move.
fn discover(env: &mut Env, expect: usize) {
    let out = env.run(&["discover", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["listed"], expect as u64, "{v}");
}

/// Tests 1 and 2 of the issue: four processes, one rejected account.
fn four_processes_share_one_lockout_one_probe_per_ttl_and_one_recovery(b: Backend) {
    let mut env = Env::on(b, 40);
    discover(&mut env, 40);
    env.up.set_mode(USER, Mode::Reject401);
    let workers = env.workers(4);

    // The first rejection locks the account for every process.
    wait_for(30, "the lock", || env.account_state("main") == "locked");
    wait_for(30, "every document handed back", || {
        env.scalar("SELECT count(*) FROM jobs WHERE status = 'extracting'") == 0
    });
    let during_lock = env.up.requests(USER);
    // 1 listing + at most one request per worker thread that was already past
    // the gate when the lock was committed.
    assert!(
        during_lock <= 1 + 8,
        "{during_lock} requests before the lock held"
    );
    env.quiet_for(USER, 3, "nobody calls the upstream while the account is locked");
    assert_eq!(
        env.scalar("SELECT max(attempts) FROM jobs"),
        0,
        "no attempt spent"
    );
    assert_eq!(env.scalar("SELECT count(*) FROM jobs WHERE status = 'dead'"), 0);

    // Each time the lock runs out, exactly one process probes (and fails).
    for round in 1..=2 {
        let before = env.up.requests(USER);
        env.jump(HOUR_MS + 1_000);
        wait_for(30, "the probe", || env.up.requests(USER) == before + 1);
        wait_for(30, "the lock again", || {
            env.scalar("SELECT probes FROM accounts WHERE name = 'main'") == round
        });
        env.quiet_for(USER, 2, "one probe per lock TTL");
        assert_eq!(env.up.requests(USER), before + 1);
    }
    assert_eq!(
        env.scalar("SELECT max(attempts) FROM jobs"),
        0,
        "no attempt spent"
    );

    // Recovery: the next probe succeeds and all four processes resume.
    env.up.set_mode(USER, Mode::Accept);
    env.jump(HOUR_MS + 1_000);
    wait_for(60, "every document indexed", || {
        env.scalar("SELECT count(*) FROM jobs WHERE status = 'indexed'") == 40
    });
    wait_for(10, "the recovery notice", || env.received("recovery") == 1);
    env.stop(workers);
    assert_eq!(
        env.received("lock"),
        1,
        "one lock notice across four processes: {:?}",
        env.up.notices()
    );
    assert_eq!(env.received("recovery"), 1);
    let recovery = env.notices_of("recovery").remove(0);
    assert_eq!(recovery["details"]["probes"], 3, "{recovery}");
    assert!(
        recovery["details"]["outage_ms"].as_i64().unwrap() >= 3 * HOUR_MS,
        "{recovery}"
    );
    assert_eq!(
        env.scalar("SELECT max(attempts) FROM jobs"),
        1,
        "each indexed on its first attempt"
    );
    println!(
        "lockout: {during_lock} requests before the lock held, 2 failed probes, 1 successful; \
         {} lock notice, {} recovery notice",
        env.received("lock"),
        env.received("recovery")
    );
    env.assert_no_secret();
}

/// Test 3: the prober dies mid-probe; after probe_ttl another process probes.
fn a_prober_killed_mid_probe_is_replaced_after_the_probe_ttl(b: Backend) {
    let mut env = Env::on(b, 12);
    discover(&mut env, 12);
    env.up.set_mode(USER, Mode::Reject401);
    let mut workers = env.workers(3);
    wait_for(30, "the lock", || env.account_state("main") == "locked");
    wait_for(30, "every document handed back", || {
        env.scalar("SELECT count(*) FROM jobs WHERE status = 'extracting'") == 0
    });

    // The probe request hangs; find and kill the process that made it.
    env.up.set_mode(USER, Mode::Hang(Duration::from_secs(120)));
    env.jump(HOUR_MS + 1_000);
    let granted = |env: &Env| -> Vec<String> {
        env.texts("SELECT detail FROM auth_history WHERE event = 'probe_granted' ORDER BY id")
    };
    wait_for(30, "the probe slot taken", || granted(&env).len() == 1);
    let prober = granted(&env)[0].clone();
    let pid: u32 = prober
        .strip_prefix("pid")
        .and_then(|s| s.split('-').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("holder {prober:?}"));
    let idx = workers
        .iter()
        .position(|c| c.id() == pid)
        .expect("the prober is one of ours");
    let mut dead = workers.remove(idx);
    dead.kill().unwrap();
    dead.wait().unwrap();
    env.up.set_mode(USER, Mode::Accept);

    // Its slot is held until probe_ttl runs out: nobody else probes before.
    env.quiet_for(USER, 2, "nobody calls while the dead prober's slot lives");
    assert_eq!(
        granted(&env).len(),
        1,
        "no second probe while the dead one's slot lives"
    );

    env.jump(31_000);
    wait_for(60, "every document indexed", || {
        env.scalar("SELECT count(*) FROM jobs WHERE status = 'indexed'") == 12
    });
    let all = granted(&env);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_ne!(all[1], prober, "another process took the probe");
    assert_eq!(env.account_state("main"), "open");
    env.stop(workers);
    wait_for(10, "the recovery notice", || env.received("recovery") == 1);
    assert_eq!(env.received("lock"), 1);
    env.assert_no_secret();
}

/// Test 4a: a 429 with Retry-After slows everyone down and never locks.
fn a_429_with_retry_after_slows_down_and_never_locks(b: Backend) {
    let mut env = Env::on(b, 20);
    env.up
        .set_next(USER, vec![Mode::RateLimit429 { retry_after: Some(2) }]);
    let started = Instant::now();
    let out = env.run(&["--workers", "2", "sync", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        env.scalar("SELECT count(*) FROM jobs WHERE status = 'indexed'"),
        20
    );
    assert_eq!(
        env.scalar("SELECT epoch FROM accounts WHERE name = 'main'"),
        0,
        "never locked"
    );
    assert_eq!(env.received("lock"), 0);
    // The request after the 429 waited out its Retry-After.
    let log: Vec<_> = env
        .up
        .request_log()
        .into_iter()
        .filter(|r| r.account.as_deref() == Some(USER))
        .collect();
    assert_eq!(log[0].status, 429);
    let gap = log[1].at.duration_since(log[0].at);
    assert!(gap >= Duration::from_millis(1_900), "next request after {gap:?}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    env.assert_no_secret();
}

/// Test 4b: a 503 answering the probe frees the slot without counting a probe.
fn a_503_during_a_probe_frees_the_slot_without_counting(b: Backend) {
    let mut env = Env::on(b, 10);
    env.up.set_mode(USER, Mode::Reject401);
    let out = env.run(&["discover", "--no-wait"]);
    assert!(!out.status.success(), "a locked account with --no-wait fails");
    let line = String::from_utf8_lossy(&out.stderr);
    assert!(line.contains("main"), "the error names the account: {line}");
    assert_eq!(env.account_state("main"), "locked");

    env.up.set_mode(USER, Mode::Accept);
    env.up.set_next(USER, vec![Mode::Unavailable503]);
    env.jump(HOUR_MS + 1_000);
    let out = env.run(&["--workers", "2", "sync"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        env.scalar("SELECT count(*) FROM jobs WHERE status = 'indexed'"),
        10
    );
    let events: Vec<String> = env.texts("SELECT event FROM auth_history ORDER BY id");
    let probes: Vec<&str> = events
        .iter()
        .map(String::as_str)
        .filter(|e| e.starts_with("probe") || *e == "recovered")
        .collect();
    assert_eq!(
        probes,
        ["probe_granted", "probe_transient", "probe_granted", "recovered"],
        "{events:?}"
    );
    wait_for(10, "the recovery notice", || env.received("recovery") == 1);
    let recovery = env.notices_of("recovery").remove(0);
    assert_eq!(
        recovery["details"]["probes"], 1,
        "the 503 did not count: {recovery}"
    );
    env.assert_no_secret();
}

on_both_backends!(
    four_processes_share_one_lockout_one_probe_per_ttl_and_one_recovery,
    a_prober_killed_mid_probe_is_replaced_after_the_probe_ttl,
    a_429_with_retry_after_slows_down_and_never_locks,
    a_503_during_a_probe_frees_the_slot_without_counting,
);
