//! Structured logs (`--log-format json`, `--log-level`, RUST_LOG) of real
//! `leasehold` processes: a late worker whose completion is refused (and the
//! worker that took its lease over), and an account lockout with its probe
//! and recovery. Log lines go to stderr only, are one JSON object each, and
//! carry no secret and no document text.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::gate_env::{wait_for, Env, HOUR_MS, PASSWORD, USER};
use common::upstream_server::Mode;
use common::{Backend, BIN};

/// The JSON log lines of `stderr` (lines that start with `{`); each must
/// parse. Other stderr lines (the summary, notices' own line) are left.
fn json_lines(stderr: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The lines of event `name`.
fn events<'a>(lines: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["event"] == name).collect()
}

/// Stdout holds leasehold's own output only: no log line.
fn assert_no_logs_on(stdout: &[u8]) {
    let out = String::from_utf8_lossy(stdout);
    assert!(!out.contains("\"level\""), "a log line on stdout: {out}");
}

fn work(data: &Path, stall: Option<&str>) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--data")
        .arg(data)
        .args([
            "--log-format",
            "json",
            "work",
            "--until-empty",
            "--lease",
            "1s",
            "--workers",
            "1",
        ])
        .env_remove("LEASEHOLD_DB")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(spec) = stall {
        c.env("LEASEHOLD_STALL_BEFORE_COMPLETE", spec);
    }
    c
}

/// A worker stalls after extracting, past its lease (the fault hook puts it
/// to sleep in the one window the lease keeper does not watch); a second
/// worker takes the lease over and completes; the first one's completion is
/// refused. Each says so in its log.
#[test]
fn a_late_worker_logs_its_refused_write_and_the_other_the_takeover() {
    let dir = tempfile::tempdir().unwrap();
    let (docs, data) = (dir.path().join("docs"), dir.path().join("data"));
    std::fs::create_dir_all(&docs).unwrap();
    let text = "the private words of document one";
    std::fs::write(docs.join("one.txt"), text).unwrap();
    let out = common::leasehold(&data, &["discover", docs.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let late = work(&data, Some("100:4000")).spawn().unwrap();
    let db = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    let status = || -> String {
        db.query_row("SELECT status FROM jobs", [], |r| r.get(0))
            .unwrap_or_default()
    };
    wait_for(30, "the late worker's claim", || status() == "extracting");
    let taker = work(&data, None).output().unwrap();
    assert!(
        taker.status.success(),
        "{}",
        String::from_utf8_lossy(&taker.stderr)
    );
    let late = late.wait_with_output().unwrap();

    let (late_log, taker_log) = (json_lines(&late.stderr), json_lines(&taker.stderr));
    let refused = events(&late_log, "write_refused");
    assert_eq!(refused.len(), 1, "{late_log:?}");
    assert_eq!(refused[0]["level"], "WARN");
    assert_eq!(refused[0]["operation"], "complete");
    assert_eq!(refused[0]["fence"], 1);
    assert!(
        refused[0]["why"].as_str().unwrap().contains("fence 2"),
        "{}",
        refused[0]
    );
    let taken = events(&taker_log, "claim_taken_over");
    assert_eq!(taken.len(), 1, "{taker_log:?}");
    assert_eq!(taken[0]["level"], "WARN");
    assert_eq!(taken[0]["from_fence"], 1);
    assert!(events(&taker_log, "write_refused").is_empty());
    for out in [&late, &taker] {
        assert_no_logs_on(&out.stdout);
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains(text),
            "document text in a log"
        );
    }
}

/// A lockout: the first process meets the 401 and logs the lock (at
/// `--log-level warn`, nothing below warn); after the lock runs out the next
/// one probes and recovers, at the default level of `work` (info), with the
/// notices. No line carries the password.
fn a_lockout_logs_the_lock_probe_recovery_and_notices(b: Backend) {
    let mut env = Env::on(b, 3);
    let out = env.run(&["discover", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    env.up.set_mode(USER, Mode::Reject401);
    let out = env.run(&[
        "--log-format",
        "json",
        "--log-level",
        "warn",
        "work",
        "--until-empty",
        "--no-wait",
    ]);
    let locked_log = json_lines(&out.stderr);
    let locked = events(&locked_log, "gate_locked");
    assert_eq!(
        locked.len(),
        1,
        "{locked_log:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(locked[0]["level"], "WARN");
    assert_eq!(locked[0]["account"], "main");
    assert_eq!(locked[0]["incident"], 1);
    assert!(
        locked_log
            .iter()
            .all(|l| l["level"] == "WARN" || l["level"] == "ERROR"),
        "--log-level warn let a lower level through: {locked_log:?}"
    );
    assert_no_logs_on(&out.stdout);

    env.up.set_mode(USER, Mode::Accept);
    env.jump(HOUR_MS + 1_000);
    let out = env.run(&["--log-format", "json", "work", "--until-empty"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for(10, "the recovery notice", || env.received("recovery") == 1);
    let log = json_lines(&out.stderr);
    let probe = events(&log, "gate_probe");
    let recovered = events(&log, "gate_recovered");
    assert_eq!(probe.len(), 1, "{log:?}");
    assert_eq!(recovered.len(), 1, "{log:?}");
    assert_eq!(recovered[0]["level"], "INFO");
    assert_eq!(recovered[0]["incident"], 1);
    let notices = events(&log, "notice");
    assert!(notices.iter().any(|n| n["kind"] == "recovery"), "{log:?}");
    assert_no_logs_on(&out.stdout);
    for (lines, text) in [(&locked_log, "lock"), (&log, "recovery")] {
        assert!(
            lines.iter().all(|l| !l.to_string().contains(PASSWORD)),
            "the password in a {text} log line"
        );
    }
    env.assert_no_secret();
}

/// A document over the input limit is logged at `run`'s default level
/// (warn) with its key and the limit, not its text.
#[test]
fn a_limit_hit_is_logged_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let (docs, data) = (dir.path().join("docs"), dir.path().join("data"));
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("big.txt"), "words ".repeat(500)).unwrap();
    let out = Command::new(BIN)
        .arg("--data")
        .arg(&data)
        .args([
            "--log-format",
            "json",
            "run",
            docs.to_str().unwrap(),
            "--max-input",
            "1KiB",
        ])
        .env_remove("RUST_LOG")
        .env_remove("LEASEHOLD_DB")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = json_lines(&out.stderr);
    let hit = events(&log, "limit_hit");
    assert_eq!(hit.len(), 1, "{log:?}");
    assert_eq!(hit[0]["level"], "WARN");
    assert_eq!(hit[0]["key"], "big.txt");
    assert!(
        hit[0]["limit"]
            .as_str()
            .unwrap()
            .contains("1024-byte input limit"),
        "{}",
        hit[0]
    );
    assert!(
        log.iter().all(|l| l["level"] != "INFO"),
        "run is quiet below warn: {log:?}"
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("words words"));
    assert_no_logs_on(&out.stdout);
}

/// `RUST_LOG` sets the level when `--log-level` does not; a bad one is a
/// configuration error (exit 2) naming it.
#[test]
fn rust_log_sets_the_level_and_a_bad_level_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("--data")
        .arg(dir.path())
        .args(["--log-level", "loud=[", "status"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--log-level"));
    let out = Command::new(BIN)
        .arg("--data")
        .arg(dir.path())
        .arg("status")
        .env("RUST_LOG", "loud=[")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("RUST_LOG"));
}

on_both_backends!(a_lockout_logs_the_lock_probe_recovery_and_notices);
