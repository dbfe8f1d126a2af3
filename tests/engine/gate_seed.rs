//! The credential gate on its seed figures, end to end (issue 11, point 10):
//! lock 1,800 s, probe slot 60 s, a lock notice at most once an hour, an
//! outbox that keeps one day. Four "processes" are four `Store` handles on one
//! database file, each with its own gate, HTTP source and courier (the code
//! `leasehold work` runs), against a real upstream on 127.0.0.1; time is a
//! shared manual clock stepped through simulated hours, so every figure is
//! counted on the injected clock, never timed.
//!
//! The configuration has no `[auth]` or `[outbox]` section: the figures are
//! the defaults the file parser gives.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::upstream_server::{Mode, Upstream};
use leasehold::config::FileConfig;
use leasehold::source::Source;
use leasehold::store::{GateEvent, NoticeRecord, OutboxCap};
use leasehold::upstream::{Courier, Gate, HttpClient, HttpSource, Sink};
use leasehold::{ManualClock, NewDoc, Store, StoreOptions};

const PASSWORD: &str = "pw-seed-5e3d";
const USER: &str = "svc";
const USER_SINK: &str = "svc-sink";
const SEC: i64 = 1_000;
const HOUR: i64 = 3_600 * SEC;
/// Where the simulated timeline starts (ms since the Unix epoch).
const T0: i64 = 1_750_000_000_000;

/// One database file, one upstream, one clock.
struct World {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    clock: ManualClock,
    up: Upstream,
    config: String,
}

impl World {
    /// Account `main` reads the source; with `sink`, account `sink` (its own
    /// user) takes the results.
    fn new(sink: bool) -> World {
        let dir = tempfile::tempdir().unwrap();
        let up = Upstream::start();
        up.add_account(USER, PASSWORD);
        up.add_account(USER_SINK, PASSWORD);
        let mut config = format!(
            r#"
[[account]]
name = "main"
username = "{USER}"
password_env = "PW"

[[account]]
name = "sink"
username = "{USER_SINK}"
password_env = "PW"

[source.http]
base_url = "{}"
account = "main"

[notify]
webhook = "{}"
"#,
            up.base_url(),
            up.webhook_url()
        );
        if sink {
            config += &format!("\n[sink.http]\nurl = \"{}\"\naccount = \"sink\"\n", up.sink_url());
        }
        World {
            path: dir.path().join("leasehold.db"),
            _dir: dir,
            clock: ManualClock::new(T0),
            up,
            config,
        }
    }

    fn file(&self) -> FileConfig {
        FileConfig::parse_with_env(&self.config, &self.path, &|_| Some(PASSWORD.into())).unwrap()
    }

    /// Process `n`: its own store handle, gate, source and courier.
    fn process(&self, n: usize) -> Proc {
        let file = self.file();
        let mut options = StoreOptions::default()
            .lease(Duration::from_secs(60))
            .clock(Arc::new(self.clock.clone()));
        options.outbox = OutboxCap {
            max_age_ms: file.outbox.max_age.as_millis() as i64,
            max_bytes: file.outbox.max_bytes,
        };
        let store = Store::open(&self.path, options).unwrap();
        let gate = Arc::new(Gate::new(&store, &file, format!("proc{n}")));
        let client = HttpClient::new(Duration::from_secs(10));
        let source = HttpSource::new(
            file.source_http.as_ref().unwrap(),
            Arc::clone(&gate),
            client.clone(),
        );
        let sink = file
            .sink_http
            .as_ref()
            .map(|c| Arc::new(Sink::new(c, Arc::clone(&gate), client.clone())));
        let courier = Courier::new(Arc::clone(&gate), sink).probing_accounts_of(&file);
        Proc {
            store,
            source,
            courier,
        }
    }

    fn now(&self) -> i64 {
        use leasehold::Clock;
        self.clock.now_ms()
    }

    fn step(&self, ms: i64) {
        self.clock.advance(Duration::from_millis(ms as u64));
    }
}

struct Proc {
    store: Store,
    source: HttpSource,
    courier: Courier,
}

fn history(s: &Store, account: &str, event: &str) -> Vec<GateEvent> {
    let all = s.accounts().history(account).unwrap();
    all.into_iter().filter(|e| e.event == event).collect()
}

fn notices(s: &Store, account: &str, kind: &str) -> Vec<NoticeRecord> {
    let all = s.notices().all().unwrap();
    all.into_iter()
        .filter(|n| n.account == account && n.kind == kind)
        .collect()
}

/// Times (in s from `T0`) of `events`.
fn secs(times: impl IntoIterator<Item = i64>) -> Vec<i64> {
    times.into_iter().map(|t| (t - T0) / SEC).collect()
}

/// No two lock notices of `account` less than an hour apart; returns their times.
fn at_most_one_lock_notice_an_hour(s: &Store, account: &str) -> Vec<i64> {
    let times: Vec<i64> = notices(s, account, "lock").iter().map(|n| n.created_at).collect();
    for w in times.windows(2) {
        assert!(w[1] - w[0] >= HOUR, "lock notices at {:?} s", secs(times.clone()));
    }
    times
}

/// Four processes share one rejected account for three simulated hours: the
/// lock lasts 1,800 s, exactly one probe per lock across the four, a dead
/// prober's slot holds 60 s, a lock notice at most once an hour, and in the
/// last hour, with nobody fetching, the couriers still probe on time and the
/// recovery goes out.
#[test]
fn four_processes_over_three_hours_keep_the_seed_figures() {
    let w = World::new(false);
    w.up.add_document("doc-0", "v1", "d0.txt", "text/plain", b"seed figures\n");
    let mut procs: Vec<Proc> = (0..4).map(|n| w.process(n)).collect();
    let s = procs[0].store.clone();
    w.up.set_mode(USER, Mode::Reject401);
    const STEP: i64 = 10 * SEC;

    // One step: each process tries to fetch (while `fetching`), then runs its courier.
    let step = |procs: &mut [Proc], fetching: bool| {
        for p in procs.iter_mut() {
            if fetching {
                assert!(
                    p.source.fetch("doc-0", 1 << 20).is_err(),
                    "nothing is fetched while refused"
                );
            }
            p.courier.run_once();
        }
    };

    step(&mut procs, true);
    let locked = history(&s, "main", "locked");
    assert_eq!(secs(locked.iter().map(|e| e.at)), [0], "the first refusal locks");
    let state = &s.accounts().states().unwrap()[0];
    assert_eq!(state.locked_until, Some(T0 + 1_800 * SEC), "lock 1,800 s");

    // Hours 0 to 2: the four fetch every 10 s. At 5,400 s a prober takes the
    // slot and dies without an answer (a fifth handle that never reports).
    while w.now() < T0 + 2 * HOUR {
        w.step(STEP);
        if w.now() == T0 + 5_400 * SEC {
            let policy = leasehold::store::GatePolicy {
                lock_ttl: 1_800 * SEC,
                probe_ttl: 60 * SEC,
                notify_every: HOUR,
            };
            let dead = w.process(9).store;
            let granted = dead.accounts().admit("main", "dead-prober", &policy).unwrap();
            assert!(
                matches!(granted, leasehold::store::Admission::Probe(_)),
                "{granted:?}"
            );
        }
        step(&mut procs, true);
    }
    // Hour 2 to 3: nobody fetches; only the couriers run.
    while w.now() < T0 + 3 * HOUR {
        w.step(STEP);
        step(&mut procs, false);
    }
    // The upstream accepts again; still nobody fetches.
    w.up.set_mode(USER, Mode::Accept);
    while w.now() < T0 + 3 * HOUR + 1_800 * SEC {
        w.step(STEP);
        step(&mut procs, false);
    }

    // One probe per 1,800 s lock; the dead prober's slot held the next probe
    // back exactly 60 s; the probes of the last 1.5 hours came from couriers.
    let grants = history(&s, "main", "probe_granted");
    assert_eq!(
        secs(grants.iter().map(|e| e.at)),
        [1_800, 3_600, 5_400, 5_460, 7_260, 9_060, 10_860],
        "{grants:?}"
    );
    assert_eq!(
        w.up.requests(USER),
        1 + 6,
        "the first refusal and one request per probe (the dead prober made none)"
    );
    let failed = history(&s, "main", "probe_failed");
    assert_eq!(
        secs(failed.iter().map(|e| e.at)),
        [1_800, 3_600, 5_460, 7_260, 9_060]
    );

    // A lock notice at most once an hour across the four: 0 s, then the first
    // failed probe at least an hour later each time.
    let lock_notices = at_most_one_lock_notice_an_hour(&s, "main");
    assert_eq!(secs(lock_notices), [0, 3_600, 7_260]);
    let recovery = notices(&s, "main", "recovery");
    assert_eq!(
        secs(recovery.iter().map(|n| n.created_at)),
        [10_860],
        "{recovery:?}"
    );
    assert!(
        recovery[0].message.contains("6 probe(s)"),
        "{}",
        recovery[0].message
    );
    assert_eq!(s.accounts().states().unwrap()[0].state.as_str(), "open");

    // Every notice reached the webhook exactly once.
    let sent = w.up.notices();
    let kinds: Vec<&str> = sent.iter().map(|n| n["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["lock", "lock", "lock", "recovery"], "{sent:?}");
    assert!(s.notices().all().unwrap().iter().all(|n| n.sent_at.is_some()));
    println!(
        "seed figures: probes at {:?} s, lock notices at {:?} s, recovery at 10860 s",
        secs(grants.iter().map(|e| e.at)),
        secs(notices(&s, "main", "lock").iter().map(|n| n.created_at))
    );
}

/// The sink's account is refused for 26 simulated hours while results keep
/// coming: the outbox keeps one day (older results are dropped and counted),
/// lock notices stay at most one an hour, and the recovery notice tells what
/// was held and dropped; then each kept result is delivered once.
#[test]
fn a_sink_refused_for_a_day_keeps_one_day_of_results() {
    let w = World::new(true);
    let mut procs: Vec<Proc> = (0..4).map(|n| w.process(n)).collect();
    let s = procs[0].store.clone();
    w.up.set_mode(USER_SINK, Mode::Reject401);
    const STEP: i64 = 10 * 60 * SEC;
    let accept = |p: &Proc, hour: i64| {
        let key = format!("doc-{hour:02}");
        p.store.enqueue(&NewDoc::new(&key, "v1")).unwrap();
        let claim = p.store.claim("w").unwrap().unwrap();
        let done = p
            .store
            .complete(
                claim,
                leasehold::Completion::new("r", "sum")
                    .deliver(&format!("text of {key}"))
                    .index(&format!("text of {key}")),
            )
            .unwrap();
        assert!(done.is_accepted());
    };
    let mut hour = 0;
    while w.now() <= T0 + 25 * HOUR {
        if (w.now() - T0) % HOUR == 0 {
            accept(&procs[hour as usize % 4], hour);
            hour += 1;
        }
        for p in procs.iter_mut() {
            p.courier.run_once();
        }
        w.step(STEP);
    }
    // The cap applies when a result is added and when a batch is claimed: the
    // result of hour 0 was more than a day old when hour 25's arrived.
    let totals = s.outbox().totals().unwrap();
    assert_eq!((totals.rows, totals.dropped), (25, 1), "{totals:?}");
    let lock_notices = at_most_one_lock_notice_an_hour(&s, "sink");
    assert!(lock_notices.len() <= 26, "{}", lock_notices.len());
    let grants = history(&s, "sink", "probe_granted");
    for g in grants.windows(2) {
        assert_eq!(
            g[1].at - g[0].at,
            1_800 * SEC,
            "one probe per 1,800 s lock: {grants:?}"
        );
    }

    // The sink accepts again: the next probe, at 25.5 h (a real batch, claimed
    // after hour 1's result too turned a day old), recovers it.
    w.up.set_mode(USER_SINK, Mode::Accept);
    while s.outbox().totals().unwrap().rows > 0 {
        assert!(w.now() < T0 + 28 * HOUR, "the outbox never drained");
        for p in procs.iter_mut() {
            p.courier.run_once();
        }
        w.step(SEC);
    }
    let recovery = notices(&s, "sink", "recovery");
    assert_eq!(recovery.len(), 1, "{recovery:?}");
    assert!(
        recovery[0].message.contains("after 91800 s")
            && recovery[0]
                .message
                .contains("24 result(s) held in the outbox, 2 dropped"),
        "{}",
        recovery[0].message
    );
    let mut delivered: Vec<String> =
        w.up.sink_batches()
            .iter()
            .flatten()
            .map(|r| r["key"].as_str().unwrap().to_owned())
            .collect();
    delivered.sort();
    let expected: Vec<String> = (2..=25).map(|h| format!("doc-{h:02}")).collect();
    assert_eq!(
        delivered, expected,
        "each kept result once, the dropped one never"
    );
}
