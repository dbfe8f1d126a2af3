//! `leasehold doctor` through the built binary, on real data directories: a
//! healthy run, then one kind of damage at a time, each named in the output.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common;

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
    let file = result_file(data.path(), "page.html");
    let dir = file.parent().unwrap().to_path_buf();
    // The shard's files are named after their document (`{id}.g…`).
    let id = file
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .to_owned();
    let stray = dir.join(format!("{id}.g000042.txt"));
    std::fs::write(&stray, b"orphan").unwrap();
    assert_one_problem(data.path(), "leftover", &[&stray.display().to_string()]);
    let temp = format!("{id}.g000043.tmp-1-2-3");
    std::fs::write(dir.join(&temp), b"partial").unwrap();
    let (code, lines, _) = doctor(data.path());
    assert_eq!((code, lines.len()), (1, 2), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains(&temp)), "{lines:?}");

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

/// What is done to an accepted result file behind leasehold's back.
#[derive(Debug, Clone, Copy)]
enum Harm {
    Delete,
    Truncate,
    Append,
    /// One byte changed, the size kept.
    Rewrite,
}

/// Do `how` to `key`'s accepted result file.
fn harm(data: &Path, key: &str, how: Harm) {
    let file = result_file(data, key);
    let mut bytes = std::fs::read(&file).unwrap();
    match how {
        Harm::Delete => return std::fs::remove_file(&file).unwrap(),
        Harm::Truncate => bytes.truncate(bytes.len() / 2),
        Harm::Append => bytes.extend_from_slice(b" and a line added by hand\n"),
        Harm::Rewrite => bytes[0] ^= 0x20,
    }
    std::fs::write(&file, &bytes).unwrap();
}

const HARMED: [(&str, Harm); 3] = [
    ("notes.txt", Harm::Delete),
    ("guide.md", Harm::Truncate),
    ("page.html", Harm::Append),
];

/// Each document's status and result path, and whether the index holds its text.
fn rows(data: &Path, keys: &[&str]) -> Vec<(String, Option<String>, bool)> {
    let c = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    keys.iter()
        .map(|key| {
            c.query_row(
                "SELECT status, result_path, EXISTS (SELECT 1 FROM search_text s WHERE s.rowid = j.id)
                 FROM jobs j WHERE doc_key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
        })
        .collect()
}

#[test]
fn a_deleted_truncated_or_appended_result_names_its_fix_and_doctor_fix_queues_it_again() {
    let data = after_run();
    let d = data.path();
    for (key, how) in HARMED {
        harm(d, key, how);
    }
    let (code, lines, report) = doctor(d);
    assert_eq!(code, 1);
    assert_eq!(lines.len(), HARMED.len(), "one line per problem: {lines:?}");
    for (key, _) in HARMED {
        let line = lines
            .iter()
            .find(|l| l.contains(&format!("{key:?}")))
            .unwrap_or_else(|| panic!("{key} not named: {lines:?}"));
        assert!(line.contains("(fix: `leasehold doctor --fix`)"), "{line}");
    }
    for p in report["problems"].as_array().unwrap() {
        assert_eq!(p["fix"], "leasehold doctor --fix", "{p}");
    }

    // Until then, a search leaves out a hit whose text the mirror lost.
    let out = leasehold(d, &["search", "amber lighthouse"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stdout.contains("notes.txt"), "{stdout}");
    assert!(
        stderr.contains("\"notes.txt\"") && stderr.contains("doctor --fix"),
        "{stderr}"
    );

    let out = leasehold(d, &["doctor", "--fix"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("fixed: queued again 3 document(s)"), "{stdout}");
    let (code, lines, report) = doctor(d);
    assert_eq!(code, 0, "a second doctor is healthy: {lines:?}");
    assert_eq!(report["checked"]["leftovers"], 0, "the damaged files went");
    let keys: Vec<&str> = HARMED.iter().map(|h| h.0).collect();
    for (status, result, searchable) in rows(d, &keys) {
        assert_eq!((status.as_str(), result, searchable), ("discovered", None, false));
    }

    // The next run extracts them again.
    let summary: serde_json::Value =
        serde_json::from_slice(&leasehold(d, &["run", samples().to_str().unwrap(), "--json"]).stdout)
            .unwrap();
    assert_eq!(summary["indexed"], 3, "{summary}");
    let (code, _, report) = doctor(d);
    assert_eq!(code, 0);
    let n = common::SAMPLE_PHRASES.len() as u64;
    assert_eq!(report["checked"]["results_verified"].as_u64(), Some(n));
    let out = leasehold(d, &["search", "amber lighthouse"]);
    assert!(text(&out).0.contains("notes.txt"), "{:?}", text(&out));
}

#[test]
fn a_rerun_extracts_again_a_result_deleted_and_leaves_one_changed_in_place_to_doctor() {
    let data = after_run();
    let d = data.path();
    for (key, how) in HARMED {
        harm(d, key, how);
    }
    harm(d, "letter.docx", Harm::Rewrite);
    let out = leasehold(d, &["run", samples().to_str().unwrap(), "--json"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    let n = common::SAMPLE_PHRASES.len();
    // The deleted one is missing from its shard's listing; the others are
    // files of their own names, cut, added to or rewritten in place, which
    // only a read tells (DESIGN §9a).
    assert_eq!(summary["indexed"], 1, "{summary}");
    assert_eq!(summary["results_requeued"], 1, "{summary}");
    assert_eq!(summary["unchanged"], n - 1, "{summary}");
    assert!(stderr.contains("\"notes.txt\""), "notes.txt not said: {stderr}");
    let (status, result, searchable) = rows(d, &["notes.txt"]).remove(0);
    assert_eq!(status, "indexed");
    assert!(
        result.is_some_and(|r| r.ends_with("g000002.txt")),
        "a new generation"
    );
    assert!(searchable);
    // Until `doctor --fix`, a search leaves out the ones a stat tells (cut,
    // added to) and `show` refuses them.
    for (key, phrase) in [("guide.md", "copper kettle"), ("page.html", "velvet harbor")] {
        let (stdout, stderr) = text(&leasehold(d, &["search", phrase]));
        assert!(!stdout.contains(key), "{key} shown: {stdout}");
        assert!(
            stderr.contains(&format!("{key:?}")) && stderr.contains("left out"),
            "{key}: {stderr}"
        );
        let out = leasehold(d, &["show", key]);
        assert!(!out.status.success(), "show {key}: {:?}", text(&out));
    }
    let (code, lines, report) = doctor(d);
    assert_eq!(code, 1, "{lines:?}");
    let keys = ["guide.md", "page.html", "letter.docx"];
    assert_eq!(lines.len(), keys.len(), "one line per document: {lines:?}");
    for key in keys {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("{key:?}")) && l.contains("does not match its checksum")),
            "{key} not named: {lines:?}"
        );
    }
    for p in report["problems"].as_array().unwrap() {
        assert_eq!(p["kind"], "checksum_mismatch", "{p}");
    }
    assert_eq!(report["checked"]["results_verified"].as_u64(), Some(n as u64 - 3));
}

/// Overwrite FTS5's index blocks (not its structure record, id 10, nor its
/// averages, id 1) with bytes that decode as nothing sensible: "malformed
/// inverted index".
fn corrupt_search_index(data: &Path) {
    let c = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    let blocks: Vec<(i64, usize)> = {
        let mut stmt = c
            .prepare("SELECT id, length(block) FROM search_text_data WHERE id > 10")
            .unwrap();
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as usize)))
            .unwrap();
        rows.collect::<Result<_, _>>().unwrap()
    };
    assert!(!blocks.is_empty());
    let mut rng = fastrand::Rng::with_seed(26);
    for (id, len) in blocks {
        let junk: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
        c.execute(
            "UPDATE search_text_data SET block = ?1 WHERE id = ?2",
            rusqlite::params![junk, id],
        )
        .unwrap();
    }
}

#[test]
fn a_corrupt_search_index_is_named_and_built_again_by_reindex_or_doctor_fix() {
    let data = after_run();
    let d = data.path();
    corrupt_search_index(d);
    let report = assert_one_problem(
        d,
        "search_index_damaged",
        &["search index is damaged", "(fix: `leasehold reindex`)"],
    );
    assert_eq!(report["problems"][0]["fix"], "leasehold reindex");

    // A search meets it: a runtime failure in one line that names the mend.
    let out = leasehold(d, &["search", "amber"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("leasehold reindex"), "{stderr}");

    let out = leasehold(d, &["reindex"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("damaged"), "{stdout}");
    let (code, lines, _) = doctor(d);
    assert_eq!(code, 0, "{lines:?}");
    let out = leasehold(d, &["search", "amber lighthouse"]);
    assert!(text(&out).0.contains("notes.txt"), "{:?}", text(&out));

    // The same damage again, mended by doctor --fix.
    corrupt_search_index(d);
    let out = leasehold(d, &["doctor", "--fix"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("fixed: built the search index again"), "{stdout}");
    let (code, lines, _) = doctor(d);
    assert_eq!(code, 0, "{lines:?}");
}

#[test]
fn reindex_takes_a_missing_result_out_of_the_index_and_queues_it_again() {
    let data = after_run();
    let d = data.path();
    harm(d, "notes.txt", Harm::Delete);
    let out = leasehold(d, &["reindex", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["requeued"], 1, "{report}");
    assert_eq!(report["unreadable"], 0, "{report}");
    assert_eq!(rows(d, &["notes.txt"]), [("discovered".to_owned(), None, false)]);
    let (code, lines, _) = doctor(d);
    assert_eq!(code, 0, "{lines:?}");
}

#[test]
fn a_removed_source_file_is_no_problem_its_files_wait_for_gc() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("docs");
    std::fs::create_dir(&source).unwrap();
    for name in ["a.txt", "b.txt"] {
        std::fs::write(source.join(name), format!("the text of {name}")).unwrap();
    }
    let data = tmp.path().join("data");
    let run = || {
        let out = leasehold(&data, &["run", source.to_str().unwrap()]);
        assert!(out.status.success(), "{:?}", text(&out));
    };
    run();
    std::fs::remove_file(source.join("a.txt")).unwrap();
    run();
    let out = leasehold(&data, &["doctor"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("healthy:"), "{stdout}");
    assert!(
        stderr.contains("1 file(s) of documents whose source was removed wait for `leasehold gc`"),
        "{stderr}"
    );
    assert!(leasehold(&data, &["gc"]).status.success());
    let (code, _, report) = doctor(&data);
    assert_eq!(code, 0);
    assert_eq!(report["checked"]["leftovers_of_removed"], 0, "{report}");
}

/// SQLite's full integrity check of the data directory's database, and its
/// documents' keys with their accepted results.
fn integrity_and_rows(data: &Path) -> (Vec<String>, Vec<(String, Option<String>)>) {
    let c = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    let check = c
        .prepare("PRAGMA integrity_check")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let rows = c
        .prepare("SELECT doc_key, result_path FROM jobs ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    (check, rows)
}

#[test]
fn a_damaged_page_of_the_search_index_is_mended_by_reindex_or_doctor_fix() {
    for table in ["search_text_data", "search_text_content"] {
        for mend in [&["reindex"][..], &["doctor", "--fix"][..]] {
            let data = after_run();
            let d = data.path();
            let (_, before) = integrity_and_rows(d);
            common::damage_a_page(&d.join("leasehold.db"), table);
            let (code, lines, report) = doctor(d);
            assert_eq!(code, 1, "{table}: {lines:?}");
            for p in report["problems"].as_array().unwrap() {
                assert_eq!(p["fix"], "leasehold reindex", "{table}: {report}");
            }

            let out = leasehold(d, mend);
            let (stdout, stderr) = text(&out);
            assert_eq!(out.status.code(), Some(0), "{table} {mend:?}: {stdout}{stderr}");
            let (check, after) = integrity_and_rows(d);
            assert_eq!(check, ["ok"], "{table} {mend:?}");
            assert_eq!(after, before, "{table} {mend:?}: every document kept");
            let out = leasehold(d, &["search", "amber lighthouse"]);
            assert!(
                text(&out).0.contains("notes.txt"),
                "{table} {mend:?}: {:?}",
                text(&out)
            );
            let (code, lines, _) = doctor(d);
            assert_eq!(code, 0, "{table} {mend:?}: {lines:?}");
        }
    }
}

#[test]
fn a_damaged_page_of_the_documents_is_not_sent_to_reindex() {
    // Enough documents for the table to have leaves below its root: the
    // store opens, and the damage is met by the checks.
    let src = tempfile::tempdir().unwrap();
    for i in 0..400 {
        std::fs::write(
            src.path().join(format!("note{i:03}.txt")),
            format!("note number {i} of many"),
        )
        .unwrap();
    }
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let out = leasehold(d, &["run", src.path().to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
    common::damage_a_page(&d.join("leasehold.db"), "jobs");
    let (code, lines, report) = doctor(d);
    assert_eq!(code, 1, "{lines:?}");
    assert!(!lines.is_empty());
    for l in &lines {
        assert!(!l.contains("(fix: `leasehold reindex`)"), "{lines:?}");
    }
    for p in report["problems"].as_array().unwrap() {
        assert_ne!(p["fix"], "leasehold reindex", "{report}");
    }
    assert!(lines.iter().any(|l| l.contains("backup")), "{lines:?}");
}

#[test]
fn a_search_on_an_index_with_zeroed_leaves_fails_naming_reindex() {
    let data = after_run();
    let d = data.path();
    {
        let c = rusqlite::Connection::open(d.join("leasehold.db")).unwrap();
        c.execute(
            "UPDATE search_text_data SET block = zeroblob(length(block)) WHERE id > 10",
            [],
        )
        .unwrap();
    }
    let out = leasehold(d, &["search", "amber"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    // A failing read (corrupt) or no match on leaves found damaged: either
    // way, the mend is named.
    assert!(stderr.contains("leasehold reindex"), "{stderr}");
    assert!(!stderr.contains("no document matches"), "{stderr}");
    // A healthy index that matches nothing says so, exit 1 as grep.
    let out = leasehold(d, &["reindex"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let out = leasehold(d, &["search", "zzyzxunmatched"]);
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    assert!(text(&out).1.contains("no document matches"), "{:?}", text(&out));
}
