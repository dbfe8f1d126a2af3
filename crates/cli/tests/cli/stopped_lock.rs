//! A process stopped (SIGSTOP) while it holds a shard's mirror lock must not
//! stall the others: real `leasehold` processes on one data directory, one of
//! them made to stop itself right after taking the lock for its first write
//! (`LEASEHOLD_STOP_AT=write_lock_held`, see `leasehold::fault`). The others
//! take over its document once its lease has expired (the shared test clock is
//! moved forward) and finish everything; their cleanups, with nothing to
//! delete (the stopped writer wrote nothing yet), never touch its lock. `gc`,
//! which must look under the lock, finishes too and names the document it
//! skipped. Then the stopped process is
//! continued: its late result is refused, nothing is lost or accepted twice.
//!
//! No timing is asserted. Each process gets a generous deadline only so that a
//! regression (a wait on the lock that never ends) fails instead of hanging.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold::testing::{CRASH_AFTER_N_ENV, CRASH_AT_ENV, STOP_AT_ENV};

use crate::common::BIN;
const CLOCK_FILE_ENV: &str = "LEASEHOLD_TEST_CLOCK_FILE";
const DOCS: usize = 8;
/// Far beyond anything these commands need on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(180);

struct Env {
    _tmp: tempfile::TempDir,
    data: std::path::PathBuf,
    src: std::path::PathBuf,
    clock: std::path::PathBuf,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir(&src).unwrap();
        for i in 0..DOCS {
            let body = format!("document {i}\nthe phrase is marker-{i:02}-end\n");
            std::fs::write(src.join(format!("doc-{i:02}.txt")), body).unwrap();
        }
        let clock = tmp.path().join("clock");
        std::fs::write(&clock, "0").unwrap();
        Env {
            data: tmp.path().join("data"),
            src,
            clock,
            _tmp: tmp,
        }
    }

    /// `leasehold --data DATA --lease 30s --workers 1 ARGS` on the shared clock,
    /// with no fault armed unless `stop` says so.
    fn cmd(&self, args: &[&str], stop: bool) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--data")
            .arg(&self.data)
            .args(["--lease", "30s", "--workers", "1"])
            .args(args)
            .env(CLOCK_FILE_ENV, &self.clock)
            .env_remove(CRASH_AT_ENV)
            .env_remove(CRASH_AFTER_N_ENV)
            .env_remove(STOP_AT_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if stop {
            c.env(STOP_AT_ENV, "write_lock_held");
        }
        c
    }

    fn db(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(self.data.join("leasehold.db")).unwrap();
        c.busy_timeout(Duration::from_secs(10)).unwrap();
        c
    }

    fn scalar(&self, sql: &str) -> i64 {
        self.db().query_row(sql, [], |r| r.get(0)).unwrap()
    }
}

/// Waits for every child in `children` to exit, at most [`DEADLINE`] in all;
/// past it, kills them and every process in `also` (continuing those first) and
/// fails the test.
fn finish_all(mut children: Vec<Child>, what: &str, also: &mut [&mut Child]) -> Vec<Output> {
    let start = Instant::now();
    while !children.iter_mut().all(|c| c.try_wait().unwrap().is_some()) {
        if start.elapsed() > DEADLINE {
            for other in also.iter_mut() {
                // SAFETY: kill(2) with a pid we spawned and a plain signal number.
                unsafe { libc::kill(other.id() as i32, libc::SIGCONT) };
                let _ = other.kill();
                let _ = other.wait();
            }
            for c in &mut children {
                let _ = c.kill();
            }
            let outs: Vec<String> = children
                .into_iter()
                .map(|c| describe(&c.wait_with_output().unwrap()))
                .collect();
            panic!(
                "{what} did not finish within {DEADLINE:?} (a wait on a stopped process's lock?)\n{}",
                outs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

/// [`finish_all`] of one child.
fn finish(child: Child, what: &str, also: &mut [&mut Child]) -> Output {
    finish_all(vec![child], what, also).pop().unwrap()
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Blocks until `child` has stopped itself (or ended, which fails the test).
fn wait_until_stopped(child: &mut Child) {
    let mut status = 0;
    // SAFETY: waitpid on our own child, with a valid pointer to an int.
    let rc = unsafe { libc::waitpid(child.id() as i32, &mut status, libc::WUNTRACED) };
    assert_eq!(
        rc,
        child.id() as i32,
        "waitpid: {}",
        std::io::Error::last_os_error()
    );
    assert!(
        libc::WIFSTOPPED(status),
        "the armed process ended instead of stopping at its stop point (status {status:#x})"
    );
}

fn ok(status: ExitStatus, out: &Output, what: &str) {
    assert!(status.success(), "{what}: {}", describe(out));
}

#[test]
fn a_process_stopped_holding_a_mirror_lock_stalls_nobody() {
    let env = Env::new();
    let out = env
        .cmd(&["discover", env.src.to_str().unwrap()], false)
        .output()
        .unwrap();
    ok(out.status, &out, "discover");

    // A claims a document and stops itself holding its mirror lock (shared).
    let mut stopped = env.cmd(&["work", "--until-empty"], true).spawn().unwrap();
    wait_until_stopped(&mut stopped);
    let held: Vec<(i64, i64)> = {
        let db = env.db();
        let mut q = db
            .prepare("SELECT id, fence FROM jobs WHERE status = 'extracting'")
            .unwrap();
        let rows = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        rows.collect::<Result<_, _>>().unwrap()
    };
    assert_eq!(held.len(), 1, "the stopped process holds one claim: {held:?}");
    let (held_id, held_fence) = held[0];

    // Its lease runs out on the shared clock; two others do everything.
    std::fs::write(&env.clock, "60000").unwrap();
    let others: Vec<Child> = (0..2)
        .map(|_| {
            env.cmd(&["work", "--until-empty", "--json"], false)
                .spawn()
                .unwrap()
        })
        .collect();
    let mut skipped = 0;
    for out in finish_all(others, "the other workers", &mut [&mut stopped]) {
        ok(out.status, &out, "worker");
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("summary JSON");
        skipped += summary["cleanups_skipped"].as_u64().unwrap();
    }
    assert_eq!(
        env.scalar("SELECT count(*) FROM jobs WHERE status = 'indexed'"),
        DOCS as i64,
        "the others finished every document, the taken-over one included"
    );
    // The taken-over document's directory held only its new result: a
    // cleanup after that result's acceptance has nothing to delete and does
    // not wait on (or count) the stopped process's lock.
    assert_eq!(
        skipped, 0,
        "a cleanup with nothing to delete tried the stopped process's lock"
    );

    // gc finishes, skips the documents of the locked shard (the lock covers
    // 1,024 consecutive ids) and says which.
    let gc = env.cmd(&["gc", "--json"], false).spawn().unwrap();
    let out = finish(gc, "gc", &mut [&mut stopped]);
    ok(out.status, &out, "gc");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("gc JSON");
    let busy: Vec<i64> = report["busy"]
        .as_array()
        .expect("busy ids")
        .iter()
        .map(|id| id.as_i64().unwrap())
        .collect();
    assert!(busy.contains(&held_id), "{report}");
    assert!(
        busy.iter().all(|id| id >> 10 == held_id >> 10),
        "only its shard: {report}"
    );
    let text = env.cmd(&["gc"], false).spawn().unwrap();
    let out = finish(text, "gc", &mut [&mut stopped]);
    ok(out.status, &out, "gc");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("skipped (locked) document id {held_id}")),
        "{stdout}"
    );

    // Continued, the stopped process finishes its write; its result is refused.
    // SAFETY: kill(2) with the pid of our own child.
    assert_eq!(unsafe { libc::kill(stopped.id() as i32, libc::SIGCONT) }, 0);
    let out = finish(stopped, "the continued process", &mut []);
    ok(out.status, &out, "continued process");

    let db = env.db();
    let completed_twice: i64 = db
        .query_row(
            "SELECT count(*) FROM jobs j WHERE (SELECT count(*) FROM history h
               WHERE h.job_id = j.id AND h.event = 'completed') != 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(completed_twice, 0, "every document accepted exactly once");
    let (status, fence): (String, i64) = db
        .query_row("SELECT status, fence FROM jobs WHERE id = ?1", [held_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(status, "indexed");
    assert!(fence > held_fence, "taken over by a later claim");
    drop(db);

    // Nothing is left for gc now that nobody holds the lock, and doctor agrees.
    let gc = env.cmd(&["gc", "--json"], false).spawn().unwrap();
    let out = finish(gc, "gc", &mut []);
    ok(out.status, &out, "gc");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["busy"], serde_json::json!([]), "{report}");
    let doctor = env.cmd(&["doctor"], false).spawn().unwrap();
    let out = finish(doctor, "doctor", &mut []);
    ok(out.status, &out, "doctor");
    assert_healthy_mirror(&env.data.join("mirror"));
}

/// Exactly one generation file per document, no temp file, no probe file.
fn assert_healthy_mirror(root: &Path) {
    let files: Vec<String> = walkdir::WalkDir::new(root)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".lock")
        .collect();
    assert_eq!(files.len(), DOCS, "{files:?}");
    assert!(
        files.iter().all(|f| f.contains(".g") && f.ends_with(".txt")),
        "{files:?}"
    );
}
