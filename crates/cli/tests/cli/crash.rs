//! Crash recovery through the built binary: a `run` is made to die (`_exit`, no
//! destructors, like `kill -9`) at each crash point of the result path
//! (`LEASEHOLD_CRASH_AT`, see `leasehold::fault`), then restarted without it.
//! The restart must finish every document exactly once, leave no accepted row
//! pointing at a missing or partial file, and leave nothing for `gc`.
//!
//! The crash points and the mid-batch crash run on the PostgreSQL edition too
//! (`LEASEHOLD_DB` naming a fresh database on the test server): the result
//! path is the same, only the database differs.
//!
//! Both runs use a 200 ms lease: the crashed claim's lease is still held when the
//! restart begins, so the restart waits for it to expire (by the system clock, as
//! a separate process must) and re-claims the document.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use crate::common;

use leasehold::mirror::Mirror;
use leasehold::testing::{CrashPoint, CRASH_AFTER_N_ENV, CRASH_AT_ENV, CRASH_EXIT_CODE};
use sha2::{Digest, Sha256};

const DOCS: usize = 20;

fn corpus() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..DOCS {
        let body = format!("document {i}\nthe phrase is marker-{i:02}-end\n");
        std::fs::write(dir.path().join(format!("doc-{i:02}.txt")), body).unwrap();
    }
    dir
}

thread_local! {
    /// The PostgreSQL database of the test running on this thread, if it runs
    /// on PostgreSQL (each test has a thread of its own).
    static POSTGRES: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `test` with every `leasehold` it starts, and every row it reads, on a
/// fresh PostgreSQL database.
fn on_postgres(test: impl FnOnce()) {
    let url = common::pg::server().fresh_database();
    POSTGRES.with(|db| *db.borrow_mut() = Some(url));
    test();
    POSTGRES.with(|db| *db.borrow_mut() = None);
}

fn postgres_url() -> Option<String> {
    POSTGRES.with(|db| db.borrow().clone())
}

/// A new empty store for the next scenario: on PostgreSQL a fresh database
/// (on SQLite each scenario has a fresh data directory already).
fn fresh_store() {
    POSTGRES.with(|db| {
        let mut db = db.borrow_mut();
        if db.is_some() {
            *db = Some(common::pg::server().fresh_database());
        }
    });
}

/// `leasehold --data DATA --lease 200ms --workers 1 --claim-ahead 1 ARGS`, with
/// `env` added: one claim at a time, so that the crash state is exactly one
/// document's (flags in ARGS win: `crash_mid_batch` claims ahead).
fn leasehold(data: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = common::leasehold_command(data);
    cmd.args(["--lease", "200ms", "--workers", "1", "--claim-ahead", "1"])
        .args(args)
        .env_remove(CRASH_AT_ENV)
        .env_remove(CRASH_AFTER_N_ENV)
        .env_remove("LEASEHOLD_DB");
    if let Some(url) = postgres_url() {
        cmd.env("LEASEHOLD_DB", url);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run leasehold")
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// One row of the jobs table, with its count of accepted completions and claims.
#[derive(Debug)]
struct Row {
    id: i64,
    status: String,
    fence: i64,
    result_path: Option<String>,
    checksum: Option<String>,
    completed: i64,
    claimed: i64,
}

const ROWS: &str = "SELECT doc_key, id, status, fence, result_path, checksum,
        (SELECT count(*) FROM history h WHERE h.job_id = j.id AND h.event = 'completed'),
        (SELECT count(*) FROM history h WHERE h.job_id = j.id AND h.event = 'claimed')
     FROM jobs j";

/// Every row, from the test's PostgreSQL database or the data directory's file.
fn rows(data: &Path) -> HashMap<String, Row> {
    let Some(url) = postgres_url() else {
        return sqlite_rows(data);
    };
    let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let found = c.query(ROWS, &[]).unwrap();
    found
        .iter()
        .map(|r| {
            let row = Row {
                id: r.get(1),
                status: r.get(2),
                fence: r.get(3),
                result_path: r.get(4),
                checksum: r.get(5),
                completed: r.get(6),
                claimed: r.get(7),
            };
            (r.get(0), row)
        })
        .collect()
}

fn sqlite_rows(data: &Path) -> HashMap<String, Row> {
    let c = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    let mut stmt = c.prepare(ROWS).unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                Row {
                    id: r.get(1)?,
                    status: r.get(2)?,
                    fence: r.get(3)?,
                    result_path: r.get(4)?,
                    checksum: r.get(5)?,
                    completed: r.get(6)?,
                    claimed: r.get(7)?,
                },
            ))
        })
        .unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

/// Every file under the mirror, relative, '/'-separated.
fn mirror_files(data: &Path) -> Vec<String> {
    let root = data.join("mirror");
    walkdir::WalkDir::new(&root)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            e.path()
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

fn is_temp(rel: &str) -> bool {
    rel.rsplit('/').next().unwrap_or("").contains(".tmp-")
}

/// What the crashed process must have left behind: proof it died where asked.
fn check_crash_state(point: CrashPoint, n: usize, data: &Path) {
    let rows = rows(data);
    let indexed = rows.values().filter(|r| r.status == "indexed").count();
    let extracting: Vec<&Row> = rows.values().filter(|r| r.status == "extracting").collect();
    let files = mirror_files(data);
    let temps = files.iter().filter(|f| is_temp(f)).count();
    if point == CrashPoint::AfterCommit {
        assert_eq!((indexed, extracting.len()), (n, 0), "{point:?}: {rows:?}");
        return;
    }
    assert_eq!((indexed, extracting.len()), (n - 1, 1), "{point:?}: {rows:?}");
    let crashed = extracting[0];
    let own = Mirror::generation_rel_path(crashed.id, crashed.fence).unwrap();
    let own_generation = files.contains(&own);
    match point {
        CrashPoint::AfterTempWrite => {
            // Linux's fast path writes an unnamed inode, which the crash
            // freed (or, on a file system without them, a named temp file);
            // the portable path leaves its named temp file.
            let allowed: &[usize] = if leasehold::portable::fast() {
                &[0, 1]
            } else {
                &[1]
            };
            assert!(
                allowed.contains(&temps) && !own_generation,
                "{point:?}: {temps} temp file(s), own generation {own_generation}: {files:?}"
            );
        }
        _ => assert_eq!((temps, own_generation), (0, true), "{point:?}: {files:?}"),
    }
}

/// After the restart: every document indexed exactly once, every accepted file
/// whole, no temp file, nothing for gc, doctor clean; exactly one document taken
/// over (none after a crash past the commit).
fn check_recovered(point: CrashPoint, n: usize, data: &Path) {
    let expected = usize::from(point != CrashPoint::AfterCommit);
    check_recovered_taking_over(point, n, expected, data);
}

/// [`check_recovered`] with `taken_over` documents claimed a second time.
fn check_recovered_taking_over(point: CrashPoint, n: usize, taken_over: usize, data: &Path) {
    let on_postgres = postgres_url().is_some();
    assert_eq!(
        !data.join("leasehold.db").exists(),
        on_postgres,
        "{point:?}: the wrong database"
    );
    let rows = rows(data);
    assert_eq!(rows.len(), DOCS);
    let root = data.join("mirror");
    for (key, row) in &rows {
        assert_eq!(row.status, "indexed", "{point:?} {key}: {row:?}");
        assert_eq!(
            row.completed, 1,
            "{point:?} {key}: accepted {} times",
            row.completed
        );
        let bytes = std::fs::read(root.join(row.result_path.as_ref().unwrap()))
            .unwrap_or_else(|e| panic!("{point:?} {key}: result file: {e}"));
        let sum = hex::encode(Sha256::digest(&bytes));
        assert_eq!(
            Some(&sum),
            row.checksum.as_ref(),
            "{point:?} {key}: partial or wrong file"
        );
        let i: usize = key[4..6].parse().unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains(&format!("marker-{i:02}-end")), "{key}: {text:?}");
    }
    let reclaimed = rows.values().filter(|r| r.claimed == 2).count();
    assert_eq!(
        reclaimed, taken_over,
        "{point:?} (crash at arrival {n}): {rows:?}"
    );
    let temps: Vec<String> = mirror_files(data).into_iter().filter(|f| is_temp(f)).collect();
    assert!(temps.is_empty(), "{point:?}: temp files left: {temps:?}");

    let doctor = leasehold(data, &["doctor"], &[]);
    assert_eq!(doctor.status.code(), Some(0), "{point:?}: {}", describe(&doctor));
    let gc = leasehold(data, &["gc", "--json"], &[]);
    assert!(gc.status.success(), "{}", describe(&gc));
    let report: serde_json::Value = serde_json::from_slice(&gc.stdout).unwrap();
    assert_eq!(
        report["removed"].as_array().map(Vec::len),
        Some(0),
        "{point:?}: {report}"
    );
    let doctor = leasehold(data, &["doctor"], &[]);
    assert_eq!(doctor.status.code(), Some(0), "{point:?}: {}", describe(&doctor));
}

/// The run after a crash at `point`: it succeeds; its JSON summary.
fn restart(data: &Path, args: &[&str], point: CrashPoint) -> serde_json::Value {
    let restarted = leasehold(data, args, &[]);
    assert_eq!(
        restarted.status.code(),
        Some(0),
        "{point:?}: {}",
        describe(&restarted)
    );
    serde_json::from_slice(&restarted.stdout).unwrap()
}

/// Crash at the `n`-th arrival at `point`, restart, check.
fn crash_and_recover(point: CrashPoint, n: usize) {
    fresh_store();
    let corpus = corpus();
    let data = tempfile::tempdir().unwrap();
    let dir = corpus.path().to_str().unwrap();
    let env = [
        (CRASH_AT_ENV, point.as_str().to_owned()),
        (CRASH_AFTER_N_ENV, n.to_string()),
    ];
    let crashed = leasehold(data.path(), &["run", dir, "--json"], &env);
    assert_eq!(
        crashed.status.code(),
        Some(CRASH_EXIT_CODE),
        "{point:?}: {}",
        describe(&crashed)
    );
    assert!(
        crashed.stdout.is_empty(),
        "the crash printed a summary: {}",
        describe(&crashed)
    );
    check_crash_state(point, n, data.path());

    let summary = restart(data.path(), &["run", dir, "--json"], point);
    let already = if point == CrashPoint::AfterCommit {
        n
    } else {
        n - 1
    };
    assert_eq!(
        summary["indexed"].as_u64(),
        Some((DOCS - already) as u64),
        "{summary}"
    );
    assert_eq!(summary["failed"], 0, "{summary}");
    check_recovered(point, n, data.path());
}

#[test]
fn crash_after_temp_write() {
    crash_and_recover(CrashPoint::AfterTempWrite, 1);
    crash_and_recover(CrashPoint::AfterTempWrite, 7);
}

#[test]
fn crash_after_fsync() {
    crash_and_recover(CrashPoint::AfterFsync, 1);
    crash_and_recover(CrashPoint::AfterFsync, 7);
}

#[test]
fn crash_after_rename() {
    crash_and_recover(CrashPoint::AfterRename, 1);
    crash_and_recover(CrashPoint::AfterRename, 7);
}

#[test]
fn crash_after_dir_fsync() {
    crash_and_recover(CrashPoint::AfterDirFsync, 1);
    crash_and_recover(CrashPoint::AfterDirFsync, 7);
}

#[test]
fn crash_after_commit() {
    crash_and_recover(CrashPoint::AfterCommit, 1);
    crash_and_recover(CrashPoint::AfterCommit, 7);
}

/// Every crash point on the PostgreSQL edition, at the 4th arrival.
#[test]
fn crash_points_on_postgres() {
    on_postgres(|| {
        for point in [
            CrashPoint::AfterTempWrite,
            CrashPoint::AfterFsync,
            CrashPoint::AfterRename,
            CrashPoint::AfterDirFsync,
            CrashPoint::AfterCommit,
        ] {
            crash_and_recover(point, 4);
        }
    });
}

#[test]
fn crash_mid_batch_on_postgres() {
    on_postgres(crash_mid_batch_points);
}

/// Claims ahead: a crash in the middle of a batch leaves several documents
/// under lease, some staged in the mirror and none accepted; the restart takes
/// each of them over once, and nothing is lost or accepted twice.
#[test]
fn crash_mid_batch() {
    crash_mid_batch_points();
}

fn crash_mid_batch_points() {
    for point in [
        CrashPoint::AfterRename,
        CrashPoint::AfterFsync,
        CrashPoint::AfterDirFsync,
        CrashPoint::AfterCommit,
    ] {
        fresh_store();
        let corpus = corpus();
        let data = tempfile::tempdir().unwrap();
        let dir = corpus.path().to_str().unwrap();
        let env = [
            (CRASH_AT_ENV, point.as_str().to_owned()),
            (CRASH_AFTER_N_ENV, "4".to_owned()),
        ];
        // In process: documents of a few hundred microseconds, so that batches
        // form however loaded the machine is (a batch is sized by time).
        let run = ["run", dir, "--json", "--claim-ahead", "8", "--in-process"];
        let crashed = leasehold(data.path(), &run, &env);
        assert_eq!(
            crashed.status.code(),
            Some(CRASH_EXIT_CODE),
            "{point:?}: {}",
            describe(&crashed)
        );
        let rows = rows(data.path());
        let held = rows.values().filter(|r| r.status == "extracting").count();
        let indexed = rows.values().filter(|r| r.status == "indexed").count();
        if point != CrashPoint::AfterCommit {
            assert!(
                held > 1,
                "{point:?}: no batch was under lease at the crash: {rows:?}"
            );
        }
        let summary = restart(data.path(), &run[..3], point);
        assert_eq!(
            summary["indexed"].as_u64(),
            Some((DOCS - indexed) as u64),
            "{summary}"
        );
        check_recovered_taking_over(point, 4, held, data.path());
    }
}

#[test]
fn an_unknown_crash_point_is_reported_and_inert() {
    let corpus = corpus();
    let data = tempfile::tempdir().unwrap();
    let env = [(CRASH_AT_ENV, "after_lunch".to_owned())];
    let out = leasehold(
        data.path(),
        &["run", corpus.path().to_str().unwrap(), "--json"],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("after_lunch"),
        "{}",
        describe(&out)
    );
    assert!(rows(data.path()).values().all(|r| r.status == "indexed"));
}

/// Poll the database until a row is being extracted; bounded.
fn wait_for_extracting(data: &Path) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if data.join("leasehold.db").exists() {
            if let Some((key, _)) = rows(data).into_iter().find(|(_, r)| r.status == "extracting") {
                return key;
            }
        }
        assert!(std::time::Instant::now() < deadline, "no document was claimed");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Run `cmd` to its end, or kill it after `limit` and say so.
fn output_within(mut cmd: Command, limit: std::time::Duration) -> (Output, bool) {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let fired = done_rx.recv_timeout(limit).is_err();
        if fired {
            common::signal(pid, libc::SIGKILL);
        }
        fired
    });
    let out = child.wait_with_output().unwrap();
    let _ = done_tx.send(());
    (out, watchdog.join().unwrap())
}

/// Issue 11, point 7: a worker killed holding a 2 s lease, then the clock set
/// back an hour (for every process, through the test clock file). The next
/// `work --until-empty` takes the dead worker's document over at once instead
/// of waiting out the hour, and the takeover spends no attempt.
#[test]
fn a_dead_workers_lease_does_not_outlive_a_clock_set_back_an_hour() {
    let corpus = corpus();
    let data = tempfile::tempdir().unwrap();
    let clock = data.path().join("clock-offset");
    let base = |args: &[&str]| {
        let mut cmd = common::leasehold_command(data.path());
        cmd.args(["--lease", "2s", "--workers", "1"])
            .args(args)
            .env("LEASEHOLD_TEST_CLOCK_FILE", &clock)
            .env_remove(CRASH_AT_ENV)
            .env_remove(CRASH_AFTER_N_ENV);
        cmd
    };
    let discovered = base(&["discover", corpus.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(discovered.status.success(), "{}", describe(&discovered));
    // A worker whose extraction takes a minute: it holds its lease, renewing.
    let mut holder = base(&["work", "--until-empty"])
        .env("LEASEHOLD_TEST_EXTRACTOR", "sleep:60000:60000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let held = wait_for_extracting(data.path());
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    std::fs::write(&clock, (-3_600_000i64).to_string()).unwrap();

    // Without the rule it would wait out the hour; the watchdog calls that hung.
    let (out, hung) = output_within(
        base(&["work", "--until-empty"]),
        std::time::Duration::from_secs(300),
    );
    assert!(!hung, "work --until-empty waited for the far-future expiry");
    assert!(out.status.success(), "{}", describe(&out));
    let rows = rows(data.path());
    assert!(rows.values().all(|r| r.status == "indexed"), "{rows:?}");
    assert_eq!(rows[&held].claimed, 2, "{rows:?}");
    let c = rusqlite::Connection::open(data.path().join("leasehold.db")).unwrap();
    let (attempts, lost): (i64, i64) = c
        .query_row(
            "SELECT attempts, lost_leases FROM jobs WHERE doc_key = ?1",
            [&held],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((attempts, lost), (1, 1), "the takeover spent no attempt");
    // `inspect` shows the lost lease.
    let inspect = base(&["inspect", &held]).output().unwrap();
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(text.contains("lost leases 1"), "{}", describe(&inspect));
}

/// Issue 11, point 8: a document that crashes its extraction child (isolated
/// mode) is the document's fault: dead within two attempts, with the crash as
/// its reason, while the healthy documents beside it are indexed.
#[test]
fn a_document_that_crashes_its_extractor_is_dead_within_two_attempts() {
    let corpus = corpus();
    let mut crash = leasehold::testing::CHILD_FAULT_MARKER.to_vec();
    crash.extend_from_slice(b"abort");
    std::fs::write(corpus.path().join("crash.txt"), crash).unwrap();
    let data = tempfile::tempdir().unwrap();
    let env = [(leasehold::testing::CHILD_FAULT_ENV, "1".to_owned())];
    let out = leasehold(
        data.path(),
        &["run", corpus.path().to_str().unwrap(), "--json"],
        &env,
    );
    assert!(out.status.success(), "{}", describe(&out));
    let rows = rows(data.path());
    let crashed = &rows["crash.txt"];
    assert_eq!(crashed.status, "dead", "{crashed:?}");
    assert!((1..=2).contains(&crashed.claimed), "{crashed:?}");
    let c = rusqlite::Connection::open(data.path().join("leasehold.db")).unwrap();
    let why: String = c
        .query_row(
            "SELECT last_error FROM jobs WHERE doc_key = 'crash.txt'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(why.contains("extractor crashed"), "{why}");
    let healthy = rows.iter().filter(|(k, _)| k.as_str() != "crash.txt");
    assert!(healthy.clone().count() == DOCS && healthy.into_iter().all(|(_, r)| r.status == "indexed"));
}
