//! Structured logs (`--log-format json`, `--log-level`, RUST_LOG) of real
//! `leasehold` processes: a late worker whose completion is refused (and the
//! worker that took its lease over), and an account lockout with its probe
//! and recovery. Log lines go to stderr only, are one JSON object each, and
//! carry no secret and no document text.

use crate::common;

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
    // Woken from its stall, the late worker's heartbeat may try to renew
    // before its finisher completes: that renewal is refused too.
    let refused: Vec<_> = events(&late_log, "write_refused")
        .into_iter()
        .filter(|e| e["operation"] != "renew")
        .collect();
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

/// A corpus of one good document, one over a 1 KiB input limit and a loop of
/// symbolic links whose name holds a newline and an escape sequence; and a
/// data directory beside it.
fn failing_corpus() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (docs, data) = (dir.path().join("docs"), dir.path().join("data"));
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("ok.txt"), "the private words of the note").unwrap();
    std::fs::write(docs.join("big.txt"), "words ".repeat(500)).unwrap();
    std::os::unix::fs::symlink(LOOP_KEY, docs.join(LOOP_KEY)).unwrap();
    (dir, docs, data)
}

/// The loop's name (and key).
const LOOP_KEY: &str = "loop\n\u{1b}[31m";

fn leasehold_logging(data: &Path, args: &[&str], rust_log: Option<&str>) -> std::process::Output {
    let mut c = Command::new(BIN);
    c.arg("--data").arg(data).args(args).env_remove("LEASEHOLD_DB");
    match rust_log {
        Some(level) => c.env("RUST_LOG", level),
        None => c.env_remove("RUST_LOG"),
    };
    c.output().unwrap()
}

/// `RUST_LOG=info` on `run`: the start with the settings in force, the
/// discovery's counts, the pool's size, each failed document at warn with
/// its reason, and the end with the summary's figures; nothing at debug, no
/// document text, stdout only the summary.
#[test]
fn info_logs_say_the_lifecycle_and_warn_of_each_failed_document() {
    let (_dir, docs, data) = failing_corpus();
    let args = [
        "--log-format",
        "json",
        "run",
        docs.to_str().unwrap(),
        "--max-input",
        "1KiB",
        "--workers",
        "2",
        "--extract-timeout-per-mib",
        "0s",
        "--json",
    ];
    let out = leasehold_logging(&data, &args, Some("info"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("stdout is the summary alone");
    let log = json_lines(&out.stderr);

    let started = events(&log, "started");
    assert_eq!(started.len(), 1, "{log:?}");
    let s = started[0];
    assert_eq!(
        (&s["level"], &s["command"]),
        (&"INFO".into(), &"run".into()),
        "{s}"
    );
    assert_eq!(
        (&s["workers"], &s["max_input"], &s["lease_ms"]),
        (&2.into(), &1024.into(), &30_000.into()),
        "{s}"
    );
    assert_eq!(s["extract_memory"], 1u64 << 30, "{s}");
    // The time limits' allowances per MiB: turned off by the flag, and the default.
    assert_eq!(
        (&s["extract_timeout_per_mib_ms"], &s["extract_cpu_per_mib_ms"]),
        (&0.into(), &1000.into()),
        "{s}"
    );
    assert_eq!(s["data"], data.to_str().unwrap(), "{s}");
    assert_eq!(s["source"], docs.canonicalize().unwrap().to_str().unwrap(), "{s}");
    let discovered = events(&log, "discovered");
    assert_eq!(
        (discovered.len(), &discovered[0]["new"]),
        (1, &3.into()),
        "{log:?}"
    );
    assert_eq!(events(&log, "pool_started")[0]["workers"], 2, "{log:?}");

    let failed = events(&log, "document_failed");
    assert_eq!(failed.len(), 2, "{log:?}");
    for f in &failed {
        assert_eq!(
            (&f["level"], &f["will_retry"]),
            (&"WARN".into(), &false.into()),
            "{f}"
        );
        let why = match f["key"].as_str().unwrap() {
            "big.txt" => "1024-byte input limit",
            LOOP_KEY => "a loop of symbolic links",
            other => panic!("unexpected failure of {other:?}"),
        };
        assert!(f["reason"].as_str().unwrap().contains(why), "{f}");
    }
    let finished = events(&log, "finished");
    assert_eq!(finished.len(), 1, "{log:?}");
    assert_eq!(
        (&finished[0]["indexed"], &finished[0]["failed"]),
        (&1.into(), &2.into())
    );
    assert_eq!(finished[0]["store_dead"], 2, "{}", finished[0]);
    assert!(log.iter().all(|l| l["level"] != "DEBUG"), "{log:?}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("private words"));
    assert_no_logs_on(&out.stdout);
}

/// `--log-level debug`, text format: each claim and completion; keys are
/// escaped, so a file name cannot start a line of its own or drive the
/// terminal.
#[test]
fn debug_logs_each_claim_and_completion_with_keys_escaped() {
    let (_dir, docs, data) = failing_corpus();
    let d = docs.to_str().unwrap();
    let out = leasehold_logging(&data, &["discover", d, "--max-input", "1KiB"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = leasehold_logging(
        &data,
        &[
            "--log-level",
            "debug",
            "work",
            "--until-empty",
            "--max-input",
            "1KiB",
            "-q",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "a raw escape on stderr: {stderr:?}");
    let lines = |event: &str| {
        stderr
            .lines()
            .filter(|l| l.contains(&format!("event=\"{event}\"")))
            .collect::<Vec<_>>()
    };
    let claimed = lines("claimed");
    assert_eq!(claimed.len(), 3, "{stderr}");
    assert!(
        claimed
            .iter()
            .all(|l| l.contains("DEBUG") && l.contains("fence=1")),
        "{stderr}"
    );
    assert!(
        claimed.iter().any(|l| l.contains(r#"key="loop\n\u{1b}[31m""#)),
        "{stderr}"
    );
    let completed = lines("completed");
    assert_eq!(completed.len(), 1, "{stderr}");
    assert!(
        completed[0].contains(r#"key="ok.txt""#) && completed[0].contains("result="),
        "{stderr}"
    );
    assert_eq!(lines("document_failed").len(), 2, "{stderr}");
    assert!(!stderr.contains("private words"));
}

/// Without `--log-level` or `RUST_LOG`: `run` (a person watching its
/// progress, which shows each failure) logs no lifecycle and no failed
/// document, but still a limit hit; `work` (a service) logs its start and
/// each failed document.
#[test]
fn default_levels_keep_run_quiet_and_tell_an_operator_of_work_everything() {
    let (_dir, docs, data) = failing_corpus();
    let d = docs.to_str().unwrap();
    let run = ["--log-format", "json", "run", d, "--max-input", "1KiB"];
    let out = leasehold_logging(&data, &run, None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = json_lines(&out.stderr);
    assert!(events(&log, "document_failed").is_empty(), "{log:?}");
    assert!(log.iter().all(|l| l["level"] == "WARN"), "{log:?}");
    assert_eq!(events(&log, "limit_hit").len(), 1, "{log:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed \"big.txt\" (dead)"));

    let (_dir, docs, data) = failing_corpus();
    let out = leasehold_logging(&data, &["discover", docs.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let work = [
        "--log-format",
        "json",
        "work",
        "--until-empty",
        "--max-input",
        "1KiB",
    ];
    let out = leasehold_logging(&data, &work, None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = json_lines(&out.stderr);
    for event in ["started", "pool_started", "finished"] {
        assert_eq!(events(&log, event).len(), 1, "{event}: {log:?}");
    }
    assert_eq!(events(&log, "document_failed").len(), 2, "{log:?}");
    assert!(log.iter().all(|l| l["level"] != "DEBUG"), "{log:?}");
    assert_no_logs_on(&out.stdout);
}
