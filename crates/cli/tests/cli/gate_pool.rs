//! Pool notices (issue 11, point 10): in a pool of three accounts all
//! refused, every lock is told (a shared-cause notice may cover several) and
//! every recovery is told, whether it comes from `auth unlock` or from a
//! lock that ran out with nobody holding the account.
//!
//! Three in-process gates (one per account, as three `work` processes would
//! spread) and the real `leasehold auth unlock` share one database (a SQLite file,
//! or PostgreSQL: each test runs on both) and one
//! clock: the clock-offset file every `leasehold` process reads. A second test
//! checks the same with a real `leasehold work` process that has nothing to do.

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::gate_env::{Env, PASSWORD, USER};
use common::upstream_server::Mode;
use common::Backend;
use leasehold::clock::OffsetFileClock;
use leasehold::config::FileConfig;
use leasehold::source::Source;
use leasehold::upstream::{Courier, Gate, HttpClient, HttpSource};
use leasehold::{Store, StoreOptions};

const USERS: [(&str, &str); 3] = [("a", USER), ("b", "svc-b"), ("c", "svc-c")];

fn pool_env(b: Backend) -> Env {
    let env = Env::with_config_on(b, 3, |base, hook, _| {
        let mut text = String::new();
        for (name, user) in USERS {
            text += &format!(
                "[[account]]\nname = \"{name}\"\nusername = \"{user}\"\npassword_env = \"LH_TEST_PASSWORD\"\n\n"
            );
        }
        text + &format!(
            "[source.http]\nbase_url = \"{base}\"\naccounts = [\"a\", \"b\", \"c\"]\n\n[notify]\nwebhook = \"{hook}\"\n"
        )
    });
    for (_, user) in &USERS[1..] {
        env.up.add_account(user, PASSWORD);
    }
    env
}

/// A process of the pool: its store handle on the shared file and clock, its
/// gate, source and courier.
struct Proc {
    store: Store,
    gate: Arc<Gate>,
    source: HttpSource,
    courier: Courier,
}

fn process(env: &Env, holder: &str) -> Proc {
    let text = std::fs::read_to_string(&env.config).unwrap();
    let file = FileConfig::parse_with_env(&text, &env.config, &|_| Some(PASSWORD.into())).unwrap();
    let clock = OffsetFileClock::new(env.dir().join("clock-offset"));
    let options = StoreOptions::default().clock(Arc::new(clock));
    let store = match &env.db_url {
        Some(url) => Store::open(url, options),
        None => Store::open(env.data.join("leasehold.db"), options),
    }
    .unwrap();
    let gate = Arc::new(Gate::new(&store, &file, holder));
    let source = HttpSource::new(
        file.source_http.as_ref().unwrap(),
        Arc::clone(&gate),
        HttpClient::new(Duration::from_secs(10)),
    );
    let courier = Courier::new(Arc::clone(&gate), None).probing_accounts_of(&file);
    Proc {
        store,
        gate,
        source,
        courier,
    }
}

/// The accounts a kind of notice the webhook received names (the notice's
/// own account, and for a shared cause every account it lists).
fn told(env: &Env, kind: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for n in env.notices_of(kind) {
        names.insert(n["account"].as_str().unwrap().to_owned());
        if let Some(list) = n["details"]["accounts"].as_array() {
            names.extend(list.iter().map(|a| a.as_str().unwrap().to_owned()));
        }
    }
    names
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn a_pool_of_three_refused_tells_every_lock_and_every_recovery(b: Backend) {
    let mut env = pool_env(b);
    for (_, user) in USERS {
        env.up.set_mode(user, Mode::Reject401);
    }
    let pool: Vec<String> = USERS.iter().map(|(n, _)| n.to_string()).collect();
    let mut procs: Vec<Proc> = (0..3).map(|i| process(&env, &format!("p{i}"))).collect();
    let held: Vec<String> = procs
        .iter()
        .map(|p| p.gate.hold(&pool).unwrap().name.clone())
        .collect();
    assert_eq!(
        held,
        ["a", "b", "c"],
        "three processes spread over three accounts"
    );

    // Each is refused in turn, within a minute: a's lock notice, one
    // shared-cause notice for a and b, and c locked while it is recent.
    for p in &procs {
        assert!(p.source.fetch("doc-0000", 1 << 20).is_err());
        env.jump(20_000);
    }
    for p in &procs {
        p.gate.send_notices();
    }
    for (name, _) in USERS {
        assert_eq!(env.account_state(name), "locked", "{name}");
    }
    assert_eq!(env.received("shared_cause"), 1, "{:?}", env.up.notices());
    assert_eq!(told(&env, "shared_cause"), set(&["a", "b"]));
    assert_eq!(
        told(&env, "lock")
            .union(&told(&env, "shared_cause"))
            .cloned()
            .collect::<BTreeSet<_>>(),
        set(&["a", "b", "c"]),
        "every lock is told: {:?}",
        env.up.notices()
    );
    assert!(
        env.notices_of("lock").iter().any(|n| n["account"] == "c"),
        "c's lock has a notice of its own"
    );

    // The upstream accepts again. c is opened by hand with `auth unlock`.
    for (_, user) in USERS {
        env.up.set_mode(user, Mode::Accept);
    }
    let out = env.run(&["auth", "unlock", "c"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(told(&env, "recovery"), set(&["c"]), "{:?}", env.up.notices());

    // The processes stop (nobody holds a or b), and their locks run out. A
    // process that only runs its courier probes each of them once, without
    // anyone fetching, and their recoveries go out.
    for p in &procs {
        p.gate.unhold();
    }
    let fetched_before = content_requests(&env);
    env.jump(1_800_000);
    procs.truncate(1);
    let p = &mut procs[0];
    p.courier.run_once();
    assert_eq!(env.account_state("a"), "open");
    assert_eq!(env.account_state("b"), "open");
    assert_eq!(
        told(&env, "recovery"),
        set(&["a", "b", "c"]),
        "{:?}",
        env.up.notices()
    );
    assert_eq!(env.received("recovery"), 3);
    assert_eq!(content_requests(&env), fetched_before, "no document was fetched");
    let probes = p
        .store
        .accounts()
        .history("a")
        .unwrap()
        .into_iter()
        .chain(p.store.accounts().history("b").unwrap())
        .filter(|e| e.event == "probe_granted")
        .count();
    assert_eq!(probes, 2, "one probe for each account");
    env.assert_no_secret();
}

/// Requests for a document's content, any account.
fn content_requests(env: &Env) -> usize {
    env.up
        .request_log()
        .iter()
        .filter(|r| r.path.ends_with("/content"))
        .count()
}

/// The wiring in `leasehold work`: an account locked with nothing queued (no
/// worker will ever fetch with it) is probed by the process's courier when
/// its lock runs out, and the recovery notice goes out.
fn a_work_process_with_nothing_to_do_still_ends_a_lock_on_time(b: Backend) {
    let mut env = Env::on(b, 0);
    env.up.set_mode(USER, Mode::Reject401);
    let out = env.run(&["discover", "--no-wait"]);
    assert!(!out.status.success(), "the listing is refused");
    assert_eq!(env.account_state("main"), "locked");
    let workers = env.workers(1);
    env.up.set_mode(USER, Mode::Accept);
    let before = env.up.requests(USER);
    env.quiet_for(USER, 1, "nobody calls while the lock holds");
    env.jump(common::gate_env::HOUR_MS + 1_000);
    common::gate_env::wait_for(30, "the recovery notice", || env.received("recovery") == 1);
    assert_eq!(env.account_state("main"), "open");
    assert_eq!(env.up.requests(USER), before + 1, "one probe");
    env.stop(workers);
    assert_eq!(env.received("recovery"), 1);
    env.assert_no_secret();
}

on_both_backends!(
    a_pool_of_three_refused_tells_every_lock_and_every_recovery,
    a_work_process_with_nothing_to_do_still_ends_a_lock_on_time,
);
