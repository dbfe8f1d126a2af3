//! A paused neighbour: the throughput of three healthy processes while a fourth
//! is stopped (SIGSTOP) holding the turnstile's `next` lock, over the
//! throughput of the same four processes once it is continued. Same run, same
//! database; the target is a ratio >= 0.5 (issue 11).
//!
//! Run: `cargo bench --bench paused_neighbour` (30 s stopped, then 30 s of four
//! healthy processes). `--quick`: 5 s each. `--secs N`: N s each.
//!
//! Each process runs 4 threads that claim and complete as fast as the store
//! lets them, feeding the queue themselves when it runs dry; each writes its
//! own name as the result path, so the parent counts every process's accepted
//! results from the database at the start and end of each window.
//!
//! Then the other worst moment, a process stopped holding a document's mirror
//! lock in the middle of a write: real `leasehold work` processes index a
//! corpus of small files, once four healthy ones, once three healthy ones while
//! a fourth is stopped at `write_lock_held` (`--docs N`, default 3,000; 1,000
//! with `--quick`). The ratio is documents per second of the three over the four.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leasehold::testing::{StopPoint, STOP_AFTER_N_ENV, STOP_AT_ENV};
use leasehold::{NewDoc, Store, StoreOptions};

const CHILD_DB_ENV: &str = "LEASEHOLD_BENCH_NEIGHBOUR_DB";
const CHILD_NAME_ENV: &str = "LEASEHOLD_BENCH_NEIGHBOUR_NAME";
const THREADS: usize = 4;
const WARM_UP: Duration = Duration::from_secs(1);

fn main() {
    if let Ok(db) = std::env::var(CHILD_DB_ENV) {
        let name = std::env::var(CHILD_NAME_ENV).unwrap_or_else(|_| "child".into());
        child(Path::new(&db), &name);
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let secs = match args.iter().position(|a| a == "--secs") {
        Some(i) => args.get(i + 1).and_then(|s| s.parse().ok()).expect("--secs N"),
        None if args.iter().any(|a| a == "--quick") => 5,
        None => 30,
    };
    parent(Duration::from_secs(secs));
    let docs = match args.iter().position(|a| a == "--docs") {
        Some(i) => args.get(i + 1).and_then(|s| s.parse().ok()).expect("--docs N"),
        None if args.iter().any(|a| a == "--quick") => 1_000,
        None => 3_000,
    };
    mirror_lock(docs);
}

/// The built command-line tool, for the mirror-lock scenario.
const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// Four `work` processes on a fresh corpus of `docs` files, the fourth stopped
/// at its first mirror write if `stop_one`; documents per second of the ones
/// left running, until they have indexed everything.
fn index_corpus(docs: usize, stop_one: bool) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let (src, data) = (dir.path().join("src"), dir.path().join("data"));
    std::fs::create_dir(&src).unwrap();
    for i in 0..docs {
        std::fs::write(src.join(format!("d{i:05}.txt")), format!("document {i}\n")).unwrap();
    }
    let found = Command::new(BIN)
        .arg("--data")
        .arg(&data)
        .arg("discover")
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        found.status.success(),
        "{}",
        String::from_utf8_lossy(&found.stderr)
    );
    let work = |stop: bool| {
        let mut cmd = Command::new(BIN);
        cmd.arg("--data")
            .arg(&data)
            .args(["work", "--until-empty", "--workers", "2", "--lease", "2s"])
            .env_remove(STOP_AT_ENV)
            .env_remove(STOP_AFTER_N_ENV)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if stop {
            cmd.env(STOP_AT_ENV, StopPoint::WriteLockHeld.as_str());
        }
        cmd.spawn().unwrap()
    };
    let mut paused = work(stop_one);
    if stop_one {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !is_stopped(paused.id()) {
            assert!(Instant::now() < deadline, "the fourth process never stopped");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let start = Instant::now();
    let healthy: Vec<Child> = (0..3).map(|_| work(false)).collect();
    for mut c in healthy {
        assert!(c.wait().unwrap().success(), "a healthy work process failed");
    }
    let secs = start.elapsed().as_secs_f64();
    // SAFETY: kill(2) on our own, unreaped child.
    unsafe { libc::kill(paused.id() as i32, libc::SIGCONT) };
    let _ = paused.wait();
    docs as f64 / secs
}

fn mirror_lock(docs: usize) {
    let four = index_corpus(docs, false);
    let three = index_corpus(docs, true);
    println!("mirror lock, {docs} small files, `work --workers 2` processes");
    println!("four healthy: {four:.0} documents/s");
    println!("three healthy, the fourth stopped holding a document's mirror lock: {three:.0} documents/s");
    println!(
        "ratio (three while stopped / four healthy): {:.2}   (target >= 0.5)",
        three / four.max(f64::MIN_POSITIVE)
    );
}

/// A worker process: claim + complete at full speed until the stop file appears.
fn child(db: &Path, name: &str) {
    let store = Store::open(db, StoreOptions::default().lease(Duration::from_secs(3600))).unwrap();
    let stop = stop_file(db);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, stop, name) = (store.clone(), stop.clone(), name.to_owned());
            std::thread::spawn(move || {
                let worker = format!("{name}-t{t}");
                let mut fed = 0u64;
                for round in 0u64.. {
                    if round % 64 == 0 && stop.exists() {
                        return;
                    }
                    match store.claim(&worker) {
                        Ok(Some(c)) => {
                            let _ = store.complete(c, leasehold::Completion::new(&name, "s"));
                        }
                        Ok(None) => {
                            let docs: Vec<_> = (0..200)
                                .map(|i| NewDoc::new(format!("{worker}-{fed}-{i}"), "v"))
                                .collect();
                            fed += 1;
                            let _ = store.enqueue_many(&docs);
                        }
                        Err(e) => eprintln!("{worker}: {e}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn stop_file(db: &Path) -> PathBuf {
    db.with_extension("stop")
}

fn spawn(db: &Path, name: &str, stop_at_turn: Option<u32>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env(CHILD_DB_ENV, db)
        .env(CHILD_NAME_ENV, name)
        .env_remove(STOP_AT_ENV)
        .env_remove(STOP_AFTER_N_ENV)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(n) = stop_at_turn {
        cmd.env(STOP_AT_ENV, StopPoint::HoldingTurnstileNext.as_str())
            .env(STOP_AFTER_N_ENV, n.to_string());
    }
    cmd.spawn().unwrap()
}

fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// Accepted results per process name.
fn accepted(db: &Path) -> BTreeMap<String, u64> {
    let c = rusqlite::Connection::open(db).unwrap();
    c.busy_timeout(Duration::from_secs(30)).unwrap();
    let mut q = c
        .prepare("SELECT result_path, count(*) FROM jobs WHERE status = 'indexed' GROUP BY result_path")
        .unwrap();
    let rows = q
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// Results per second of each process over `window`.
fn rates(db: &Path, window: Duration) -> BTreeMap<String, f64> {
    let before = accepted(db);
    let start = Instant::now();
    std::thread::sleep(window);
    let after = accepted(db);
    let secs = start.elapsed().as_secs_f64();
    after
        .iter()
        .map(|(name, n)| (name.clone(), (n - before.get(name).unwrap_or(&0)) as f64 / secs))
        .collect()
}

fn summary(what: &str, rates: &BTreeMap<String, f64>, names: &[&str]) -> f64 {
    let each: Vec<f64> = names
        .iter()
        .map(|n| rates.get(*n).copied().unwrap_or(0.0))
        .collect();
    let total: f64 = each.iter().sum();
    let mean = total / each.len() as f64;
    let min = each.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "{what}: {total:.0} results/s ({}), min/mean {:.2}",
        names
            .iter()
            .zip(&each)
            .map(|(n, r)| format!("{n} {r:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        if mean > 0.0 { min / mean } else { 0.0 }
    );
    total
}

fn parent(window: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("neighbour.db");
    drop(Store::open(&db, StoreOptions::default()).unwrap());

    // The fourth process goes first and stops itself on its 20th turn, holding
    // `next`: its worst moment outside a write transaction.
    let mut paused = spawn(&db, "paused", Some(20));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !is_stopped(paused.id()) {
        assert!(Instant::now() < deadline, "the fourth process never stopped");
        assert!(paused.try_wait().unwrap().is_none(), "the fourth process exited");
        std::thread::sleep(Duration::from_millis(5));
    }
    let healthy: Vec<Child> = ["a", "b", "c"].iter().map(|n| spawn(&db, n, None)).collect();
    std::thread::sleep(WARM_UP);
    let stopped = rates(&db, window);
    // SAFETY: kill(2) on our own, unreaped child.
    unsafe { libc::kill(paused.id() as i32, libc::SIGCONT) };
    std::thread::sleep(WARM_UP);
    let all = rates(&db, window);

    std::fs::write(stop_file(&db), b"").unwrap();
    for mut c in healthy.into_iter().chain([paused]) {
        let _ = c.wait();
    }

    println!(
        "paused neighbour, {} s windows, {THREADS} threads per process",
        window.as_secs()
    );
    let three = ["a", "b", "c"];
    let while_stopped = summary(
        "three healthy, the fourth stopped holding `next`",
        &stopped,
        &three,
    );
    let four = summary("four healthy (after SIGCONT)", &all, &["a", "b", "c", "paused"]);
    let same_three = summary("  of which the same three", &all, &three);
    println!(
        "ratio (three while stopped / four healthy): {:.2}   (target >= 0.5)",
        while_stopped / four.max(f64::MIN_POSITIVE)
    );
    println!(
        "ratio (three while stopped / the same three then): {:.2}",
        while_stopped / same_three.max(f64::MIN_POSITIVE)
    );
}
