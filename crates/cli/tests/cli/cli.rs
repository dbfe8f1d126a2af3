//! End to end through the built `leasehold` binary: the sample corpus, re-runs,
//! two worker processes on one data directory, exit codes.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

use crate::common;

use common::{leasehold, samples, BIN, SAMPLE_PHRASES};

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Every `indexed` row: key → (result_path, checksum), read straight from SQLite.
fn accepted(data: &Path) -> HashMap<String, (String, String)> {
    let c = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    let mut stmt = c
        .prepare("SELECT doc_key, result_path, checksum FROM jobs WHERE status = 'indexed'")
        .unwrap();
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
        .unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

#[test]
fn run_on_the_sample_corpus_indexes_every_format_and_a_rerun_does_nothing() {
    let data = tempfile::tempdir().unwrap();
    let summary = json(&leasehold(
        data.path(),
        &["run", samples().to_str().unwrap(), "--json"],
    ));
    assert_eq!(summary["indexed"], SAMPLE_PHRASES.len(), "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");

    let rows = accepted(data.path());
    let phrases = SAMPLE_PHRASES;
    assert_eq!(rows.len(), phrases.len());
    for (key, phrase) in phrases {
        let (path, sum) = rows.get(key).unwrap_or_else(|| panic!("{key} not indexed"));
        let bytes = std::fs::read(data.path().join("mirror").join(path)).unwrap();
        assert_eq!(&hex::encode(Sha256::digest(&bytes)), sum, "{key}: checksum");
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains(phrase), "{key}: {phrase:?} not in {text:?}");
    }
    assert!(
        !std::fs::read_to_string(data.path().join("mirror").join(&rows["page.html"].0))
            .unwrap()
            .contains("forbidden"),
        "script or style text leaked into the HTML result"
    );

    let again = json(&leasehold(
        data.path(),
        &["run", samples().to_str().unwrap(), "--json"],
    ));
    assert_eq!(
        (again["indexed"].as_u64(), again["unchanged"].as_u64()),
        (Some(0), Some(SAMPLE_PHRASES.len() as u64)),
        "{again}"
    );
    assert_eq!(accepted(data.path()), rows, "a re-run changed accepted results");
}

/// A command that ran a worker pool lets go of its store when it ends, as
/// every other command does: the last handle's drop checkpoints the file and
/// removes its `-wal` and `-shm` (the signal handler's stop handle kept one,
/// and with it a WAL as large as the run's writes).
#[test]
fn a_run_leaves_no_write_ahead_log_behind() {
    let data = tempfile::tempdir().unwrap();
    let out = leasehold(data.path(), &["run", samples().to_str().unwrap(), "-q"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for sidecar in ["leasehold.db-wal", "leasehold.db-shm"] {
        let path = data.path().join(sidecar);
        assert!(
            !path.exists(),
            "{sidecar} left behind ({} bytes)",
            std::fs::metadata(&path).map_or(0, |m| m.len())
        );
    }
}

#[test]
fn two_work_processes_index_every_document_exactly_once() {
    let data = tempfile::tempdir().unwrap();
    let corpus = tempfile::tempdir().unwrap();
    for i in 0..300 {
        std::fs::write(
            corpus.path().join(format!("doc-{i:03}.txt")),
            format!("document number {i}\n"),
        )
        .unwrap();
    }
    let found = json(&leasehold(
        data.path(),
        &["discover", corpus.path().to_str().unwrap(), "--json"],
    ));
    assert_eq!(found["new"], 300);
    let workers: Vec<_> = (0..2)
        .map(|_| {
            Command::new(BIN)
                .arg("--data")
                .arg(data.path())
                .args(["work", "--until-empty", "--json", "--workers", "3"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut indexed = 0;
    for w in workers {
        let summary = json(&w.wait_with_output().unwrap());
        indexed += summary["indexed"].as_u64().unwrap();
    }
    assert_eq!(indexed, 300, "indexed across both processes");
    let c = rusqlite::Connection::open(data.path().join("leasehold.db")).unwrap();
    let per_doc: Vec<i64> = c
        .prepare(
            "SELECT (SELECT count(*) FROM history h WHERE h.job_id = j.id AND h.event = 'completed')
             FROM jobs j",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(per_doc.len(), 300);
    assert!(
        per_doc.iter().all(|&n| n == 1),
        "a document was accepted twice or never"
    );
}

#[test]
fn status_inspect_and_gc_report_on_a_run() {
    let data = tempfile::tempdir().unwrap();
    json(&leasehold(
        data.path(),
        &["run", samples().to_str().unwrap(), "--json"],
    ));
    let status = json(&leasehold(data.path(), &["status", "--json"]));
    assert_eq!(status["counts"]["indexed"], SAMPLE_PHRASES.len());
    let inspect = json(&leasehold(data.path(), &["inspect", "notes.txt", "--json"]));
    assert_eq!(inspect["job"]["status"], "indexed");
    let events: Vec<&str> = inspect["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["enqueued", "claimed", "completed"]);
    // An orphan generation and a stale temp file: gc removes both, keeps the result.
    let result = inspect["job"]["result_path"].as_str().unwrap();
    let result_file = data.path().join("mirror").join(result);
    let doc_dir = result_file.parent().unwrap().to_path_buf();
    // The shard's files are named after their document (`{id}.g…`).
    let name = result_file.file_name().unwrap().to_str().unwrap();
    let id = name.split('.').next().unwrap();
    let (orphan, temp) = (format!("{id}.g000099.txt"), format!("{id}.g000098.tmp-1-1"));
    std::fs::write(doc_dir.join(&orphan), b"orphan").unwrap();
    std::fs::write(doc_dir.join(&temp), b"stale").unwrap();
    let dry = json(&leasehold(data.path(), &["gc", "--dry-run", "--json"]));
    assert_eq!(dry["removed"].as_array().unwrap().len(), 2, "{dry}");
    assert!(doc_dir.join(&orphan).exists(), "dry run deleted");
    json(&leasehold(data.path(), &["gc", "--json"]));
    assert!(!doc_dir.join(&orphan).exists());
    assert!(!doc_dir.join(&temp).exists());
    assert!(
        data.path().join("mirror").join(result).exists(),
        "gc removed the accepted result"
    );
}

#[test]
fn bad_configuration_exits_2_with_one_line_naming_the_thing() {
    let data = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["run", "/no/such/corpus"], "/no/such/corpus"),
        (&["work", "--lease", "soon"], "--lease"),
        (&["--db", "/no/such/dir/x.db", "status"], "/no/such/dir"),
        (&["inspect-all"], "inspect-all"),
    ];
    for (args, names) in cases {
        let out = leasehold(data.path(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{args:?}: {stderr}");
    }
    let out = leasehold(data.path(), &["work", "--lease", "50ms"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--lease"), "{stderr}");
}

#[test]
fn a_changed_file_is_extracted_again_and_a_removed_one_is_swept_by_gc() {
    let data = tempfile::tempdir().unwrap();
    let corpus = tempfile::tempdir().unwrap();
    for name in ["a.txt", "b.txt", "c.txt"] {
        std::fs::write(corpus.path().join(name), format!("first text of {name}\n")).unwrap();
    }
    let dir = corpus.path().to_str().unwrap();
    json(&leasehold(data.path(), &["run", dir, "--json"]));
    let before = accepted(data.path());
    std::fs::write(corpus.path().join("a.txt"), "second text of a.txt, longer\n").unwrap();
    std::fs::remove_file(corpus.path().join("b.txt")).unwrap();

    let summary = json(&leasehold(data.path(), &["run", dir, "--json"]));
    assert_eq!(
        (
            summary["indexed"].as_u64(),
            summary["changed"].as_u64(),
            summary["gone"].as_u64(),
            summary["unchanged"].as_u64()
        ),
        (Some(1), Some(1), Some(1), Some(1)),
        "{summary}"
    );
    let after = accepted(data.path());
    let new_a = std::fs::read_to_string(data.path().join("mirror").join(&after["a.txt"].0)).unwrap();
    assert!(new_a.contains("second text"), "{new_a}");
    assert!(
        !data.path().join("mirror").join(&before["a.txt"].0).exists(),
        "old generation of a.txt left"
    );
    assert!(
        !after.contains_key("b.txt"),
        "a removed source is no longer indexed"
    );
    let b_file = data.path().join("mirror").join(&before["b.txt"].0);
    assert!(b_file.exists(), "nothing is removed before gc");
    json(&leasehold(data.path(), &["gc", "--json"]));
    assert!(!b_file.exists(), "gc removes the result of a removed source");
    assert!(data.path().join("mirror").join(&after["c.txt"].0).exists());
}

#[test]
fn ctrl_c_stops_a_worker_cleanly_with_no_lease_left_held() {
    let data = tempfile::tempdir().unwrap();
    let corpus = tempfile::tempdir().unwrap();
    for i in 0..2000 {
        std::fs::write(
            corpus.path().join(format!("d{i:04}.md")),
            format!("# doc {i}\n\ntext {i}\n"),
        )
        .unwrap();
    }
    json(&leasehold(
        data.path(),
        &["discover", corpus.path().to_str().unwrap(), "--json"],
    ));
    // Without --until-empty the worker runs until it is told to stop.
    let child = Command::new(BIN)
        .arg("--data")
        .arg(data.path())
        .args(["work", "--json", "--workers", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while common::count_status(data.path(), "indexed") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never indexed anything"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    common::signal(child.id(), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    // Stopped by Ctrl-C: exit 130, as a shell reports it, with the summary.
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(
        common::count_status(data.path(), "extracting"),
        0,
        "a lease was left held"
    );
    let indexed = common::count_status(data.path(), "indexed");
    assert_eq!(summary["indexed"].as_i64(), Some(indexed), "{summary}");
    assert_eq!(
        indexed + common::count_status(data.path(), "discovered"),
        2000,
        "a document was lost"
    );
}

/// `[extract.commands]`: a configured converter extracts its extension, the
/// built-in registry the rest; a converter that fails names itself.
#[test]
fn configured_converters_extract_their_extensions() {
    let dir = tempfile::tempdir().unwrap();
    let (src, data) = (dir.path().join("src"), dir.path().join("data"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("shout.up"), "amber lighthouse").unwrap();
    std::fs::write(src.join("broken.bad"), "x").unwrap();
    std::fs::write(src.join("plain.txt"), "copper kettle").unwrap();
    let config = dir.path().join("leasehold.toml");
    std::fs::write(
        &config,
        "[extract.commands]\nup = [\"tr\", \"a-z\", \"A-Z\"]\nbad = [\"sh\", \"-c\", \"echo no good >&2; exit 4\"]\n",
    )
    .unwrap();
    let summary = json(&leasehold(
        &data,
        &[
            "--config",
            config.to_str().unwrap(),
            "run",
            src.to_str().unwrap(),
            "--json",
        ],
    ));
    assert_eq!(summary["indexed"], 2, "{summary}");
    let rows = accepted(&data);
    let text = |key: &str| std::fs::read_to_string(data.join("mirror").join(&rows[key].0)).unwrap();
    assert_eq!(text("shout.up"), "AMBER LIGHTHOUSE");
    assert_eq!(text("plain.txt"), "copper kettle");
    let failure = summary["failures"][0]["error"].as_str().unwrap();
    assert!(
        failure.contains("converter sh failed") && failure.contains("no good"),
        "{failure}"
    );
}

/// A parser that panics fails its document with the panic's message, and no
/// panic text reaches the terminal.
#[test]
fn a_panicking_parser_fails_its_document_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), "amber lighthouse").unwrap();
    let out = std::process::Command::new(BIN)
        .env("LEASEHOLD_TEST_EXTRACTOR", "panic")
        .arg("--data")
        .arg(dir.path().join("data"))
        .args(["run", src.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Rust's panic text ("thread '…' panicked at …") never; the failure line
    // above the progress may name the panic as the document's reason.
    assert!(!stderr.contains("panicked at"), "{stderr}");
    assert!(!stderr.contains("thread '"), "{stderr}");
    let summary = json(&out);
    let error = summary["failures"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("extractor panicked: test parser bug on a.txt"),
        "{error}"
    );
}

/// What extraction decided (format, encoding) is recorded with the accepted
/// result, so odd text can be explained: here Latin-1 bytes, decoded as such.
#[test]
fn the_encoding_decision_is_recorded_in_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let (src, data) = (dir.path().join("src"), dir.path().join("data"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("latin1.txt"),
        b"caf\xe9 cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade",
    )
    .unwrap();
    let summary = json(&leasehold(&data, &["run", src.to_str().unwrap(), "--json"]));
    assert_eq!(summary["indexed"], 1, "{summary}");
    let inspect = json(&leasehold(&data, &["inspect", "latin1.txt", "--json"]));
    let completed = inspect["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["event"] == "completed")
        .expect("a completed event");
    let detail = completed["detail"].as_str().unwrap();
    assert!(
        detail.contains("extracted as plain_text, encoding windows-1252; took "),
        "{detail}"
    );
    let rows = accepted(&data);
    let text = std::fs::read_to_string(data.join("mirror").join(&rows["latin1.txt"].0)).unwrap();
    assert_eq!(text, "café crème brûlée, naïve façade");
}
