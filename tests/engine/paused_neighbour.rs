//! A paused neighbour: four real processes share one database; one of them
//! stops itself (SIGSTOP) at its worst moment outside a write transaction,
//! holding the turnstile's `next` lock. The other three must still finish
//! every document the stopped one does not hold; once it is continued, it
//! finishes its own, and nothing is lost or accepted twice.
//!
//! Before the fix every write of the other three waited the full busy timeout
//! (5 s) for the stopped holder, so 1,500 documents would have taken them
//! about 20 minutes; the generous overall timeout below only keeps a
//! regression from hanging CI.

use crate::common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leasehold::testing::{StopPoint, STOP_AFTER_N_ENV, STOP_AT_ENV};
use leasehold::{NewDoc, Store, StoreOptions};

const CHILD_ENV: &str = "LEASEHOLD_PAUSED_NEIGHBOUR_DB";
const DOCS: usize = 1_500;
const THREADS: usize = 4;
/// Only there to end a run that would otherwise hang; nothing is timed.
const OVERALL: Duration = Duration::from_secs(300);

/// One child: THREADS workers claim and complete until nothing is claimable,
/// then print every key this process had accepted, one per line.
#[test]
#[ignore = "child process of three_processes_finish_while_the_fourth_is_stopped_holding_the_turnstile"]
fn paused_neighbour_child() {
    let path = std::env::var(CHILD_ENV).expect("run by the parent test");
    let store = Store::open(&path, StoreOptions::default().lease(Duration::from_secs(3600))).unwrap();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            let name = format!("p{}-t{t}", std::process::id());
            std::thread::spawn(move || {
                let mut accepted = Vec::new();
                while let Some(claim) = store.claim(&name).unwrap() {
                    let key = claim.key.clone();
                    if store
                        .complete(claim, leasehold::Completion::new("r", "s"))
                        .unwrap()
                        .is_accepted()
                    {
                        accepted.push(key);
                    }
                }
                accepted
            })
        })
        .collect();
    for w in workers {
        for key in w.join().unwrap() {
            println!("ACCEPTED {key}");
        }
    }
    println!("CHILD DONE");
}

fn spawn_child(db: &Path, stop_after: Option<u32>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        common::this_test(module_path!(), "paused_neighbour_child").as_str(),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, db)
    .env_remove(STOP_AT_ENV)
    .env_remove(STOP_AFTER_N_ENV)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(n) = stop_after {
        cmd.env(STOP_AT_ENV, StopPoint::HoldingTurnstileNext.as_str())
            .env(STOP_AFTER_N_ENV, n.to_string());
    }
    cmd.spawn().unwrap()
}

/// The child's state letter in /proc (`T` once it stopped itself).
fn is_stopped(child: &Child) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// Wait for `child` to exit; kill every process in `all` and fail if the
/// overall deadline passes first.
fn wait_or_fail(child: &mut Child, deadline: Instant, all_pids: &[u32], what: &str) -> String {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            assert!(
                status.success() && out.contains("CHILD DONE"),
                "{what} failed: {status}\n{out}\n{err}"
            );
            return out;
        }
        if Instant::now() > deadline {
            for &pid in all_pids {
                // SAFETY: as in `signal`; these are our children.
                unsafe {
                    libc::kill(pid as i32, libc::SIGCONT);
                    libc::kill(pid as i32, libc::SIGKILL);
                }
            }
            panic!("{what} made no progress to the end within {OVERALL:?} while a neighbour was stopped");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn three_processes_finish_while_the_fourth_is_stopped_holding_the_turnstile() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("paused.db");
    {
        let store = Store::open(&db, StoreOptions::default()).unwrap();
        let docs: Vec<_> = (0..DOCS)
            .map(|i| NewDoc::new(format!("doc-{i:05}"), "v1"))
            .collect();
        store.enqueue_many(&docs).unwrap();
    }
    let deadline = Instant::now() + OVERALL;

    // The fourth process goes first and stops itself on its 20th turn, holding
    // `next`, with documents claimed and a write on its way.
    let mut paused = spawn_child(&db, Some(20));
    while !is_stopped(&paused) {
        assert!(
            paused.try_wait().unwrap().is_none(),
            "the paused child exited before it reached its stop point"
        );
        assert!(Instant::now() < deadline, "the paused child never stopped");
        std::thread::sleep(Duration::from_millis(5));
    }

    let mut healthy: Vec<Child> = (0..3).map(|_| spawn_child(&db, None)).collect();
    let all_pids: Vec<u32> = healthy.iter().map(Child::id).chain([paused.id()]).collect();
    let mut outputs = Vec::new();
    for child in &mut healthy {
        outputs.push(wait_or_fail(child, deadline, &all_pids, "a healthy process"));
    }
    assert!(
        is_stopped(&paused),
        "the paused child was continued by someone else"
    );

    // While it is still stopped: every document is done except those its
    // workers hold (at most one per thread).
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let counts = store.counts().unwrap();
    assert_eq!(counts.discovered + counts.retrying + counts.dead, 0, "{counts:?}");
    assert!(counts.extracting <= THREADS as u64, "{counts:?}");
    assert_eq!(counts.indexed + counts.extracting, DOCS as u64, "{counts:?}");

    signal(&paused, libc::SIGCONT);
    outputs.push(wait_or_fail(
        &mut paused,
        deadline,
        &all_pids,
        "the continued process",
    ));

    let counts = store.counts().unwrap();
    assert_eq!(counts.indexed, DOCS as u64, "{counts:?}");
    let mut accepted: BTreeMap<String, usize> = BTreeMap::new();
    for out in &outputs {
        for key in out
            .lines()
            .filter_map(|l| l.split_once("ACCEPTED ").map(|(_, k)| k))
        {
            *accepted.entry(key.to_owned()).or_default() += 1;
        }
    }
    let twice: Vec<_> = accepted.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "accepted more than once: {twice:?}");
    let missing: Vec<_> = (0..DOCS)
        .map(|i| format!("doc-{i:05}"))
        .filter(|k| !accepted.contains_key(k))
        .collect();
    assert!(
        missing.is_empty(),
        "no process accepted {missing:?}; the continued one said:\n{}",
        outputs[3]
    );
}

// ----- a hostile holder of the turnstile -----

/// Another process of the same user opens `<db>-next` read-only and keeps an
/// exclusive lock on it forever. Before the fix every write waited the full
/// busy timeout (5 s) for it: 200 writes took over 16 minutes. Now the first
/// write waits a bounded while, and the rest go on a detour.
#[test]
fn a_turnstile_lock_held_forever_does_not_cost_a_busy_timeout_per_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hostile.db");
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let mut next_path = db.as_os_str().to_owned();
    next_path.push("-next");
    let hostile = std::fs::File::open(&next_path).unwrap();
    fs2::FileExt::try_lock_exclusive(&hostile).unwrap();

    let (done, finished) = crossbeam_channel::bounded(1);
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..200 {
                store.enqueue(&NewDoc::new(format!("doc-{i}"), "v1")).unwrap();
            }
            let _ = done.send(());
        })
    };
    assert!(
        finished.recv_timeout(OVERALL).is_ok(),
        "200 writes did not finish within {OVERALL:?} while `next` was held"
    );
    writer.join().unwrap();
    assert_eq!(store.counts().unwrap().discovered, 200);
    drop(hostile);
}

// ----- naming the holder of SQLite's write lock -----

const HOLDER_ENV: &str = "LEASEHOLD_WRITE_LOCK_HOLDER_DB";

/// Holds `BEGIN IMMEDIATE` on the database until its standard input closes.
#[test]
#[ignore = "child process of a_stall_names_the_stopped_process_holding_the_write_lock"]
fn write_lock_holder_child() {
    use std::io::Write;
    let path = std::env::var(HOLDER_ENV).expect("run by the parent test");
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    println!("HOLDING");
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    c.execute_batch("COMMIT").unwrap();
}

/// A process stopped inside a write transaction stops every writer (SQLite's
/// design); the error a writer gets after its retries names that process and
/// says it is stopped. Before the fix it said only "stayed busy".
#[test]
fn a_stall_names_the_stopped_process_holding_the_write_lock() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("held.db");
    let opts = StoreOptions {
        busy_timeout: Duration::from_millis(50),
        ..StoreOptions::default()
    };
    let store = Store::open(&db, opts).unwrap();
    store.enqueue(&NewDoc::new("before", "v1")).unwrap();

    let mut holder = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            common::this_test(module_path!(), "write_lock_holder_child").as_str(),
            "--nocapture",
        ])
        .env(HOLDER_ENV, &db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(holder.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().contains("HOLDING")),
        "the child never took the write lock"
    );
    signal(&holder, libc::SIGSTOP);

    let err = store.enqueue(&NewDoc::new("during", "v1")).unwrap_err();
    let message = err.to_string();
    let expected = format!("held by pid {} (stopped)", holder.id());
    signal(&holder, libc::SIGCONT);
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    assert!(
        matches!(err, leasehold::Error::Busy { .. }) && message.contains(&expected),
        "{message:?} does not say {expected:?}"
    );
    // Once it let go, writes go through again.
    store.enqueue(&NewDoc::new("after", "v1")).unwrap();
}
