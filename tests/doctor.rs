//! `leasehold doctor` through the built binary, on real data directories: a
//! healthy run, then one kind of damage at a time, each named in the output.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;

use common::{leasehold, samples};

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A data directory after `run samples`.
fn after_run() -> tempfile::TempDir {
    let data = tempfile::tempdir().unwrap();
    let out = leasehold(data.path(), &["run", samples().to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
    data
}

/// The accepted result file of `key`, read straight from SQLite.
fn result_file(data: &Path, key: &str) -> PathBuf {
    let c = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    let rel: String = c
        .query_row("SELECT result_path FROM jobs WHERE doc_key = ?1", [key], |r| {
            r.get(0)
        })
        .unwrap();
    data.join("mirror").join(rel)
}

/// Doctor's verdict: exit code, problem lines on stdout, and the JSON report.
fn doctor(data: &Path) -> (i32, Vec<String>, serde_json::Value) {
    let out = leasehold(data, &["doctor"]);
    let (stdout, stderr) = text(&out);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines = stdout.lines().map(str::to_owned).collect();
    let js = leasehold(data, &["doctor", "--json"]);
    assert_eq!(
        js.status.code(),
        out.status.code(),
        "--json agrees on the exit code"
    );
    let report = serde_json::from_slice(&js.stdout).expect("JSON on stdout");
    (out.status.code().unwrap_or(-1), lines, report)
}

fn assert_one_problem(data: &Path, kind: &str, names: &[&str]) -> serde_json::Value {
    let (code, lines, report) = doctor(data);
    assert_eq!(code, 1, "{lines:?}");
    assert_eq!(lines.len(), 1, "one line per problem: {lines:?}");
    for n in names {
        assert!(lines[0].contains(n), "{n:?} not named in {:?}", lines[0]);
    }
    assert_eq!(report["healthy"], false);
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{report}");
    assert_eq!(problems[0]["kind"], kind, "{report}");
    assert_eq!(problems[0]["message"], lines[0].as_str());
    report
}

#[test]
fn a_fresh_run_is_healthy() {
    let data = after_run();
    let (code, lines, report) = doctor(data.path());
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines.len(), 1);
    assert!(lines[0].starts_with("healthy:"), "{lines:?}");
    assert_eq!(report["healthy"], true, "{report}");
    assert_eq!(report["problems"].as_array().unwrap().len(), 0);
    let c = &report["checked"];
    let n = common::SAMPLE_PHRASES.len() as u64;
    assert_eq!(c["integrity_check"], "ok");
    assert_eq!(c["journal_mode"], "wal");
    assert_eq!(
        (c["documents"].as_u64(), c["results_verified"].as_u64()),
        (Some(n), Some(n))
    );
    assert_eq!(c["leftovers"], 0);
    assert!(c["filesystems"]["database"].is_string(), "{c}");
    assert!(c["filesystems"]["mirror"].is_string(), "{c}");
}

#[test]
fn a_tampered_result_is_named_by_key_and_path() {
    let data = after_run();
    let file = result_file(data.path(), "notes.txt");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[0] ^= 0x20;
    std::fs::write(&file, &bytes).unwrap();
    let report = assert_one_problem(
        data.path(),
        "checksum_mismatch",
        &["notes.txt", &file.display().to_string()],
    );
    assert_eq!(report["problems"][0]["subject"], "notes.txt");
}

#[test]
fn a_deleted_result_is_named_by_key() {
    let data = after_run();
    let file = result_file(data.path(), "guide.md");
    std::fs::remove_file(&file).unwrap();
    assert_one_problem(data.path(), "result_missing", &["guide.md", "missing"]);
}

#[test]
fn a_stray_generation_and_a_stale_temp_are_reported_until_gc_removes_them() {
    let data = after_run();
    let dir = result_file(data.path(), "page.html")
        .parent()
        .unwrap()
        .to_path_buf();
    std::fs::write(dir.join("g000042.txt"), b"orphan").unwrap();
    assert_one_problem(
        data.path(),
        "leftover",
        &[&dir.join("g000042.txt").display().to_string()],
    );
    std::fs::write(dir.join(".tmp-g000043-1-2-3"), b"partial").unwrap();
    let (code, lines, _) = doctor(data.path());
    assert_eq!((code, lines.len()), (1, 2), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains(".tmp-g000043-1-2-3")),
        "{lines:?}"
    );

    assert!(leasehold(data.path(), &["gc"]).status.success());
    let (code, lines, _) = doctor(data.path());
    assert_eq!(code, 0, "gc left something doctor objects to: {lines:?}");
}

#[test]
fn results_of_a_document_the_database_does_not_have_are_reported() {
    let data = after_run();
    let dir = data.path().join("mirror/000/004/4242");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("g000001.txt"), b"from another database").unwrap();
    assert_one_problem(data.path(), "orphan_directory", &["4242"]);
}

#[test]
fn a_broken_lease_invariant_is_named_by_key() {
    let data = after_run();
    {
        let c = rusqlite::Connection::open(data.path().join("leasehold.db")).unwrap();
        // The schema's CHECK forbids this row; a hand edit or a bad restore can still make it.
        c.pragma_update(None, "ignore_check_constraints", true).unwrap();
        c.execute(
            "UPDATE jobs SET status = 'extracting', owner_token = NULL WHERE doc_key = 'notes.txt'",
            [],
        )
        .unwrap();
    }
    let (code, lines, _) = doctor(data.path());
    assert_eq!(code, 1);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("notes.txt") && l.contains("without an owner token")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("integrity_check")), "{lines:?}");
}

#[test]
fn a_corrupt_database_is_a_clear_problem_and_is_left_as_it_was() {
    let data = after_run();
    let db = data.path().join("leasehold.db");
    let full = std::fs::read(&db).unwrap();
    let cut = &full[..full.len() / 2];
    std::fs::write(&db, cut).unwrap();
    let _ = std::fs::remove_file(data.path().join("leasehold.db-wal"));
    let _ = std::fs::remove_file(data.path().join("leasehold.db-shm"));
    let (code, lines, report) = doctor(data.path());
    assert_eq!(code, 1, "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains(&db.display().to_string()), "{lines:?}");
    assert!(lines[0].contains("corrupt"), "{lines:?}");
    assert_eq!(report["problems"][0]["kind"], "store");
    assert_eq!(std::fs::read(&db).unwrap(), cut, "doctor changed a corrupt file");
}

#[test]
fn a_missing_data_directory_is_a_usage_error_and_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("nowhere");
    let out = leasehold(&data, &["doctor"]);
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("nowhere: no such data directory"), "{stderr}");
    assert!(!data.exists(), "doctor created the data directory");
}

#[test]
fn a_data_directory_without_a_database_is_a_finding() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, lines, _) = doctor(tmp.path());
    assert_eq!(code, 1);
    assert!(lines.iter().any(|l| l.contains("no database")), "{lines:?}");
    assert!(
        !tmp.path().join("leasehold.db").exists(),
        "doctor created a database"
    );
}

#[test]
fn a_probe_file_left_by_a_kill_is_reported_until_gc_removes_it() {
    let data = after_run();
    let probe = data.path().join("mirror/.probe-4242-0-1700000000000000000");
    std::fs::write(&probe, b"probe").unwrap();
    assert_one_problem(
        data.path(),
        "probe_leftover",
        &[&probe.display().to_string(), "gc"],
    );
    let out = leasehold(data.path(), &["gc"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(!probe.exists(), "gc left the probe file");
    let (code, lines, _) = doctor(data.path());
    assert_eq!(code, 0, "{lines:?}");
}

/// Every entry under `dir` with its modification time: a file created and
/// removed again still changes its directory's.
fn snapshot(dir: &Path) -> Vec<(PathBuf, std::time::SystemTime)> {
    walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            (e.path().to_path_buf(), e.metadata().unwrap().modified().unwrap())
        })
        .collect()
}

#[test]
fn doctor_creates_nothing_in_the_mirror_not_even_a_probe() {
    let data = after_run();
    let mirror = data.path().join("mirror");
    let before = snapshot(&mirror);
    let (code, lines, _) = doctor(data.path());
    assert_eq!(code, 0, "{lines:?}");
    let after = snapshot(&mirror);
    let changed: Vec<_> = after.iter().filter(|e| !before.contains(e)).collect();
    assert!(changed.is_empty(), "doctor changed the mirror: {changed:?}");
    assert_eq!(after.len(), before.len(), "doctor removed something");
}
