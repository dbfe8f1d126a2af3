//! Through the built binary: a reader that closes our output early, and
//! SIGTERM/SIGINT during a run (the graceful stop, its summary and exit code,
//! no lease left held; a second signal ends the process at once).

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::{leasehold, BIN};

/// A folder of `n` small text documents.
fn corpus(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        std::fs::write(dir.path().join(format!("d{i:04}.txt")), format!("doc {i}\n")).unwrap();
    }
    dir
}

/// Rows by status, straight from SQLite.
fn count(data: &Path, status: &str) -> i64 {
    let c = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    c.query_row("SELECT count(*) FROM jobs WHERE status = ?1", [status], |r| {
        r.get(0)
    })
    .unwrap_or(0)
}

/// `leasehold --data DATA ARGS` with a slow extractor (each document takes
/// `sleep` = "MIN:MAX" milliseconds), stdout and stderr piped.
fn spawn_slow(data: &Path, sleep: &str, args: &[&str]) -> Child {
    Command::new(BIN)
        .arg("--data")
        .arg(data)
        .args(args)
        .env("LEASEHOLD_TEST_EXTRACTOR", format!("sleep:{sleep}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait until the run has indexed something (so it is mid-run).
fn wait_for_first_indexed(data: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(data, "indexed") == 0 {
        assert!(Instant::now() < deadline, "the run never indexed anything");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Panic text and the stdlib's broken-pipe message must never reach the user.
fn assert_no_panic_text(stderr: &str) {
    for bad in ["panicked", "Broken pipe", "failed printing", "internal error"] {
        assert!(!stderr.contains(bad), "{bad:?} on stderr: {stderr}");
    }
}

/// Run with stdout a pipe whose reader is already gone (as `| head -1` once
/// head has read its line): a quiet exit 0, as ripgrep and fd do.
fn run_with_closed_stdout(data: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .arg("--data")
        .arg(data)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close our (the only) read end before the command writes anything.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (child.wait().unwrap().code(), stderr)
}

#[test]
fn a_reader_that_closes_early_ends_the_command_quietly() {
    let data = tempfile::tempdir().unwrap();
    let docs = corpus(5);
    for args in [
        vec!["run", docs.path().to_str().unwrap()],
        vec!["status"],
        vec!["status", "--json"],
    ] {
        let (code, stderr) = run_with_closed_stdout(data.path(), &args);
        assert_no_panic_text(&stderr);
        assert_eq!(code, Some(0), "{args:?}: stderr: {stderr}");
    }
}

/// SIGTERM (systemd, `kill`) mid-run: the summary says "interrupted" and how
/// many are left, exit 143, and no lease is left held for the next run.
#[test]
fn sigterm_stops_a_run_gracefully_with_a_summary_and_no_lease_held() {
    let data = tempfile::tempdir().unwrap();
    let docs = corpus(300);
    let child = spawn_slow(
        data.path(),
        "100:200",
        &["run", docs.path().to_str().unwrap(), "--workers", "2"],
    );
    wait_for_first_indexed(data.path());
    common::signal(child.id(), libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("indexed "), "no summary: {stdout}");
    let left = 300 - count(data.path(), "indexed");
    assert!(
        stdout.contains(&format!("interrupted by SIGTERM, {left} left")),
        "{stdout}"
    );
    assert_no_panic_text(&stderr);
    let status = leasehold(data.path(), &["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        status["counts"]["extracting"], 0,
        "a lease was left held: {status}"
    );
}

/// Ctrl-C: the same stop; `--json` carries the signal and what is left; exit 130.
#[test]
fn sigint_stops_a_run_gracefully_and_exits_130() {
    let data = tempfile::tempdir().unwrap();
    let docs = corpus(300);
    let child = spawn_slow(
        data.path(),
        "100:200",
        &["run", docs.path().to_str().unwrap(), "--workers", "2", "--json"],
    );
    wait_for_first_indexed(data.path());
    common::signal(child.id(), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "stderr: {stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    assert_eq!(summary["interrupted"], "SIGINT", "{summary}");
    let indexed = count(data.path(), "indexed");
    assert_eq!(summary["indexed"].as_i64(), Some(indexed), "{summary}");
    assert_eq!(summary["left"].as_i64(), Some(300 - indexed), "{summary}");
    assert_eq!(count(data.path(), "extracting"), 0, "a lease was left held");
    adds_up(&summary, 300);

    // The next run takes up what is left: those are not unchanged, and the
    // counts still add up to what the scan saw.
    let again = leasehold(data.path(), &["run", docs.path().to_str().unwrap(), "--json"]);
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).expect("JSON summary");
    assert_eq!(again["indexed"].as_i64(), Some(300 - indexed), "{again}");
    assert_eq!(again["unchanged"].as_i64(), Some(indexed), "{again}");
    assert_eq!(again["resumed"].as_i64(), Some(300 - indexed), "{again}");
    assert_eq!(again["left"], 0, "{again}");
    adds_up(&again, 300);
    let text = leasehold(data.path(), &["run", docs.path().to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with("indexed 0, failed 0 (0 will retry, 0 dead), unchanged 300, left 0 (of 300 seen);"),
        "{text}"
    );
}

/// `indexed + failed + unchanged + removed + left` is what the scan saw.
fn adds_up(summary: &serde_json::Value, seen: u64) {
    let n = |k: &str| summary[k].as_u64().unwrap_or_else(|| panic!("{k} in {summary}"));
    assert_eq!(summary["seen"].as_u64(), Some(seen), "{summary}");
    assert_eq!(
        n("indexed") + n("failed") + n("unchanged") + n("gone") + n("left"),
        seen,
        "{summary}"
    );
}

/// A second signal does not wait for the documents in flight: the process
/// ends at once, without the summary (documents here take 60 s each, far
/// beyond the grace period, so a graceful stop would print one).
#[test]
fn a_second_signal_ends_the_process_at_once() {
    let data = tempfile::tempdir().unwrap();
    let docs = corpus(4);
    let mut child = spawn_slow(
        data.path(),
        "60000:60000",
        &["run", docs.path().to_str().unwrap(), "--workers", "2"],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(data.path(), "extracting") == 0 {
        assert!(Instant::now() < deadline, "nothing was ever claimed");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_after_a_minute(&child);
    common::signal(child.id(), libc::SIGTERM);
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    // The first signal is acknowledged before the second is sent.
    while !said.contains("stopping;") {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "stderr ended: {said}");
        said += &line;
    }
    common::signal(child.id(), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    stderr.read_to_string(&mut said).unwrap();
    assert_eq!(out.status.code(), Some(130), "stderr: {said}");
    assert!(said.contains("stopping now"), "{said}");
    assert!(
        out.stdout.is_empty(),
        "a summary means it waited: {:?}",
        out.stdout
    );
    assert_no_panic_text(&said);
}

/// Nothing waits forever: if the line awaited from the child never comes,
/// the child is killed, its stderr ends, and the test fails instead of hanging.
fn kill_after_a_minute(child: &std::process::Child) {
    let pid = child.id() as libc::pid_t;
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        // SAFETY: kill(2) on our own child's pid (a no-op error if it has been reaped).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
}
