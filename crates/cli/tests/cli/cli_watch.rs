//! `leasehold watch` as a real process on a real directory: files created,
//! changed, removed and renamed reach the store; hidden files and the data
//! directory inside the tree do not; without notifications it rescans;
//! SIGTERM ends it with a summary and exit 0; two watchers on one data
//! directory accept every document once. Every wait polls the store with a
//! deadline: nothing sleeps for correctness.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use leasehold::{Status, Store, StoreOptions};
use sha2::{Digest, Sha256};

use crate::common;

use common::BIN;

/// How long any expected state may take to appear.
const PATIENCE: Duration = Duration::from_secs(60);

/// A running `leasehold watch`, its stdout lines and stderr collected by threads.
struct Watch {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

impl Watch {
    fn start(data: &Path, dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Watch {
        Watch::start_on(data, &[dir], extra, env)
    }

    /// [`Watch::start`] on the folders `dirs` (none: every recorded one).
    fn start_on(data: &Path, dirs: &[&Path], extra: &[&str], env: &[(&str, &str)]) -> Watch {
        let mut cmd = Command::new(BIN);
        cmd.env_remove("LEASEHOLD_DB")
            .env_remove("LEASEHOLD_CONFIG")
            .arg("--data")
            .arg(data)
            .args(["watch", "--json", "--workers", "2"]);
        if !extra.contains(&"--debounce") {
            cmd.args(["--debounce", "50ms"]);
        }
        cmd.args(extra)
            .args(dirs)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start leasehold watch");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let (etx, stderr) = mpsc::channel();
        let mut err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            let _ = etx.send(s);
        });
        Watch { child, lines, stderr }
    }

    /// SIGTERM, then the exit code, every stdout line and stderr (bounded wait).
    fn stop(mut self) -> (Option<i32>, Vec<String>, String) {
        common::signal(self.child.id(), libc::SIGTERM);
        let status = wait_exit(&mut self.child);
        let stderr = self.stderr.recv_timeout(PATIENCE).unwrap_or_default();
        // Every line up to the reader's end of file (it closes the channel),
        // not only those it had passed on when the process ended: the last
        // one is the summary.
        let deadline = Instant::now() + PATIENCE;
        let mut lines = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            lines.push(line);
        }
        (status.code(), lines, stderr)
    }
}

/// The child's exit, waited for with a deadline.
fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "the process did not end after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn store(data: &Path) -> Store {
    Store::open(data.join("leasehold.db"), StoreOptions::default()).expect("open the watch's store")
}

/// The version a file of `content` is indexed at.
fn version_of(content: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(content.as_bytes())))
}

/// Poll until `check` holds, or fail saying `what`.
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until `key` is indexed at the version of `content`.
fn wait_indexed(data: &Path, key: &str, content: &str) {
    wait_until(&format!("{key} is indexed with its new content"), || {
        store_if_there(data).is_some_and(|s| is_indexed(&s, key, content))
    });
}

/// Whether `key` is indexed at the version of `content`.
fn is_indexed(store: &Store, key: &str, content: &str) -> bool {
    let want = version_of(content);
    store
        .job_by_key(key)
        .ok()
        .flatten()
        .is_some_and(|job| job.status == Status::Indexed && job.version == want)
}

/// Whether `key` is marked gone.
fn is_gone(store: &Store, key: &str) -> bool {
    store
        .job_by_key(key)
        .ok()
        .flatten()
        .is_some_and(|j| j.status == Status::Dead && j.source_gone)
}

/// The store, once the watch has created it.
fn store_if_there(data: &Path) -> Option<Store> {
    data.join("leasehold.db").exists().then(|| store(data))
}

fn wait_gone(data: &Path, key: &str) {
    wait_until(&format!("{key} is marked gone"), || is_gone(&store(data), key));
}

/// Every line is one JSON object with a kind; the last is the summary.
fn json_lines(lines: &[String]) -> Vec<serde_json::Value> {
    let values: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for v in &values {
        assert!(v["kind"].is_string(), "no kind: {v}");
    }
    assert_eq!(
        values.last().map(|v| v["kind"].clone()),
        Some("summary".into()),
        "{lines:?}"
    );
    values
}

fn write(path: &Path, content: &str) {
    std::fs::write(path, content).unwrap();
}

/// A source directory with the data directory inside it, as `cd docs &&
/// leasehold watch .` would have.
fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("docs");
    std::fs::create_dir(&dir).unwrap();
    let data = dir.join("leasehold-data");
    (tmp, dir, data)
}

#[test]
fn watch_follows_creates_changes_removals_and_renames() {
    let (_tmp, dir, data) = tree();
    write(&dir.join("a.txt"), "first a");
    let watch = Watch::start(&data, &dir, &[], &[]);
    wait_indexed(&data, "a.txt", "first a");

    write(&dir.join("b.txt"), "new b");
    wait_indexed(&data, "b.txt", "new b");

    write(&dir.join("a.txt"), "second a, longer");
    wait_indexed(&data, "a.txt", "second a, longer");

    std::fs::remove_file(dir.join("b.txt")).unwrap();
    wait_gone(&data, "b.txt");

    std::fs::rename(dir.join("a.txt"), dir.join("c.txt")).unwrap();
    wait_gone(&data, "a.txt");
    wait_indexed(&data, "c.txt", "second a, longer");

    std::fs::create_dir(dir.join("sub")).unwrap();
    write(&dir.join("sub/d.txt"), "in a new directory");
    wait_indexed(&data, "sub/d.txt", "in a new directory");

    // A directory renamed inside the tree: its files move with it, and the
    // watch follows it there.
    std::fs::rename(dir.join("sub"), dir.join("sub2")).unwrap();
    wait_gone(&data, "sub/d.txt");
    wait_indexed(&data, "sub2/d.txt", "in a new directory");
    write(&dir.join("sub2/e.txt"), "in the renamed directory");
    wait_indexed(&data, "sub2/e.txt", "in the renamed directory");

    // Hidden files are not taken; the sentinel written after them is the
    // proof that their events were seen and dropped.
    write(&dir.join(".hidden.txt"), "hidden");
    std::fs::create_dir(dir.join(".git")).unwrap();
    write(&dir.join(".git/config"), "hidden too");
    write(&dir.join("z.txt"), "sentinel");
    wait_indexed(&data, "z.txt", "sentinel");

    let s = store(&data);
    for key in [".hidden.txt", ".git/config"] {
        assert!(s.job_by_key(key).unwrap().is_none(), "{key} was taken");
    }
    // The data directory inside the tree (database, mirror) never becomes work.
    let all = s
        .jobs_after(
            &[
                Status::Discovered,
                Status::Extracting,
                Status::Indexed,
                Status::Retrying,
                Status::Dead,
            ],
            leasehold::JobId(0),
            1000,
        )
        .unwrap();
    let keys: Vec<&str> = all.iter().map(|j| j.key.as_str()).collect();
    assert!(keys.iter().all(|k| !k.starts_with("leasehold-data")), "{keys:?}");
    assert_eq!(keys.len(), 7, "a b c sub/d sub2/d sub2/e z: {keys:?}");

    let (code, lines, stderr) = watch.stop();
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let values = json_lines(&lines);
    let summary = values.last().unwrap();
    assert_eq!(summary["interrupted"], "SIGTERM", "{summary}");
    assert!(summary["watch"]["passes"].as_u64().unwrap() >= 6, "{summary}");
    assert_eq!(
        summary["watch"]["full_scans"], 1,
        "only the first pass: {summary}"
    );
    assert_eq!(values[0]["why"], "start", "{lines:?}");
    assert!(
        values
            .iter()
            .any(|v| v["kind"] == "pass" && v["full"] == false && v["gone"] == 1),
        "a pass that marked a removal: {lines:?}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// One `watch` without a folder follows every folder the data directory
/// indexes: files created in each are taken under their folder's keys, and
/// a removal is marked gone in its folder only.
#[test]
fn one_watch_follows_every_folder_of_the_data_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let (docs, notes) = (tmp.path().join("docs"), tmp.path().join("notes"));
    std::fs::create_dir(&docs).unwrap();
    std::fs::create_dir(&notes).unwrap();
    write(&docs.join("a.txt"), "first folder");
    write(&notes.join("a.txt"), "second folder");
    let data = tmp.path().join("data");
    let out = common::leasehold(
        &data,
        &["run", docs.to_str().unwrap(), notes.to_str().unwrap(), "-q"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let notes_key = |name: &str| format!("{}/{name}", notes.canonicalize().unwrap().display());

    let w = Watch::start_on(&data, &[], &[], &[]);
    wait_until("both folders' first passes are done", || {
        store_if_there(&data).is_some_and(|s| s.counts().is_ok_and(|c| c.indexed == 2))
    });
    write(&docs.join("new.txt"), "new in the first");
    write(&notes.join("new.txt"), "new in the second");
    wait_indexed(&data, "new.txt", "new in the first");
    wait_indexed(&data, &notes_key("new.txt"), "new in the second");
    std::fs::remove_file(notes.join("a.txt")).unwrap();
    wait_gone(&data, &notes_key("a.txt"));
    assert!(is_indexed(&store(&data), "a.txt", "first folder"));
    let (code, lines, stderr) = w.stop();
    assert_eq!(code, Some(0), "{stderr}");
    json_lines(&lines);
}

/// Without notifications (forced by the test hook that makes the notifier
/// fail as if the inotify watch limit were reached) the tree is rescanned on
/// the timer, and that is said once on stderr and once in JSON.
#[test]
fn without_notifications_it_rescans_and_says_so_once() {
    let (_tmp, dir, data) = tree();
    write(&dir.join("a.txt"), "before");
    let watch = Watch::start(
        &data,
        &dir,
        &["--rescan-every", "200ms"],
        &[(leasehold::watch::NOTIFY_FAILS_ENV, "1")],
    );
    wait_indexed(&data, "a.txt", "before");
    write(&dir.join("b.txt"), "found by a rescan");
    wait_indexed(&data, "b.txt", "found by a rescan");
    std::fs::remove_file(dir.join("a.txt")).unwrap();
    wait_gone(&data, "a.txt");

    let (code, lines, stderr) = watch.stop();
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(
        stderr.matches("rescanning every").count(),
        1,
        "said once: {stderr}"
    );
    assert!(stderr.contains("max_user_watches"), "{stderr}");
    let values = json_lines(&lines);
    let fallbacks = values.iter().filter(|v| v["kind"] == "rescanning").count();
    assert_eq!(fallbacks, 1, "{lines:?}");
    let summary = values.last().unwrap();
    assert!(summary["watch"]["full_scans"].as_u64().unwrap() >= 2, "{summary}");
    assert!(values.iter().any(|v| v["why"] == "timer"), "{lines:?}");
    assert!(summary["watch"]["rescanning"]
        .as_str()
        .unwrap()
        .contains("inotify"));
}

/// `--poll` never uses notifications: changes are found by rescans only.
#[test]
fn poll_finds_changes_by_rescanning() {
    let (_tmp, dir, data) = tree();
    write(&dir.join("early.txt"), "found by the first scan");
    let watch = Watch::start(&data, &dir, &["--poll", "--rescan-every", "200ms"], &[]);
    wait_indexed(&data, "early.txt", "found by the first scan");
    write(&dir.join("late.txt"), "written after the start");
    wait_indexed(&data, "late.txt", "written after the start");
    let (code, lines, stderr) = watch.stop();
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let values = json_lines(&lines);
    assert!(
        values.iter().all(|v| v["kind"] != "pass" || v["full"] == true),
        "{lines:?}"
    );
}

/// A burst of more changed paths than the watch keeps (here 20, by the
/// hidden --max-pending) becomes one full rescan, which finds every file.
#[test]
fn a_burst_past_the_cap_becomes_a_full_rescan() {
    let (_tmp, dir, data) = tree();
    write(&dir.join("first.txt"), "first");
    // A long debounce gathers the whole burst into one delivery.
    let watch = Watch::start(&data, &dir, &["--max-pending", "20", "--debounce", "500ms"], &[]);
    wait_indexed(&data, "first.txt", "first");
    let n = 200;
    for i in 0..n {
        write(&dir.join(format!("b{i:03}.txt")), &format!("burst {i}"));
    }
    for i in 0..n {
        wait_indexed(&data, &format!("b{i:03}.txt"), &format!("burst {i}"));
    }
    let (code, lines, stderr) = watch.stop();
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let values = json_lines(&lines);
    let passes: Vec<_> = values.iter().filter(|v| v["kind"] == "pass").collect();
    assert!(
        passes.iter().all(|v| v["paths"].as_u64().unwrap() <= 20),
        "no pass holds more than the cap: {lines:?}"
    );
    assert!(
        passes
            .iter()
            .skip(1)
            .any(|v| v["why"] == "cap" && v["new"].as_u64().unwrap() > 0),
        "a full rescan found the burst: {lines:?}"
    );
}

/// SIGTERM while documents are being extracted: they finish (or are released
/// after the grace period), the summary is printed, exit 0, no lease held.
#[test]
fn sigterm_mid_work_stops_gracefully_with_a_summary() {
    let (_tmp, dir, data) = tree();
    let watch = Watch::start(&data, &dir, &[], &[("LEASEHOLD_TEST_EXTRACTOR", "sleep:300:600")]);
    wait_until("the watch has made its store", || store_if_there(&data).is_some());
    for i in 0..10 {
        write(&dir.join(format!("d{i}.txt")), &format!("doc {i}"));
    }
    wait_until("a document is being extracted", || {
        store(&data).counts().is_ok_and(|c| c.extracting > 0)
    });
    let (code, lines, stderr) = watch.stop();
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let values = json_lines(&lines);
    let summary = values.last().unwrap();
    assert_eq!(summary["interrupted"], "SIGTERM");
    assert!(summary["indexed"].as_u64().unwrap() >= 1, "{summary}");
    assert_eq!(store(&data).live_leases().unwrap().len(), 0, "no lease left held");
}

/// Two watchers and a `work` process on one data directory: the watchers see
/// the same events and enqueue the same files, three pools claim them, and
/// every version of every document is accepted exactly once (fencing as
/// always).
#[test]
fn two_watchers_and_a_worker_accept_every_document_once() {
    let (_tmp, dir, data) = tree();
    let first = Watch::start(&data, &dir, &[], &[]);
    wait_until("the first watch has recorded its source", || {
        store_if_there(&data).is_some_and(|s| s.meta("source_root").is_ok_and(|v| v.is_some()))
    });
    let second = Watch::start(&data, &dir, &[], &[]);
    // And a plain worker on the same queue.
    let mut worker = Command::new(BIN)
        .arg("--data")
        .arg(&data)
        .args(["-q", "work", "--workers", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start leasehold work");
    let n = 40;
    for i in 0..n {
        write(&dir.join(format!("f{i:02}.txt")), &format!("file {i}"));
    }
    for i in 0..n {
        wait_indexed(&data, &format!("f{i:02}.txt"), &format!("file {i}"));
    }
    for w in [first, second] {
        let (code, lines, stderr) = w.stop();
        assert_eq!(code, Some(0), "stderr: {stderr}");
        json_lines(&lines);
    }
    common::signal(worker.id(), libc::SIGTERM);
    let status = wait_exit(&mut worker);
    let mut stderr = String::new();
    let _ = worker.stderr.take().unwrap().read_to_string(&mut stderr);
    assert_eq!(status.code(), Some(143), "work stops as it always does: {stderr}");
    let s = store(&data);
    for i in 0..n {
        let job = s.job_by_key(&format!("f{i:02}.txt")).unwrap().unwrap();
        let history = s.history(leasehold::JobId(job.id)).unwrap();
        // A watcher may catch a file between its creation and its write (an
        // empty version) and then its written one: each version is accepted
        // once, never twice, and the last is the file as written.
        let versions: Vec<&str> = history
            .iter()
            .filter(|h| h.event == "completed")
            .filter_map(|h| h.detail.as_deref()?.split(';').next())
            .collect();
        let distinct: std::collections::HashSet<&&str> = versions.iter().collect();
        assert_eq!(distinct.len(), versions.len(), "f{i:02}.txt: {history:?}");
        assert_eq!(
            versions.last().copied(),
            Some(format!("version {}", job.version).as_str()),
            "f{i:02}.txt: {history:?}"
        );
    }
}

/// On PostgreSQL as on SQLite: new files, removed files and a removed
/// directory are taken by path, with no full scan after the first.
#[test]
fn on_postgres_changes_and_removals_are_taken_by_path() {
    let url = common::pg::server().fresh_database();
    let (_tmp, dir, data) = tree();
    write(&dir.join("a.txt"), "first");
    std::fs::create_dir(dir.join("sub")).unwrap();
    write(&dir.join("sub").join("c.txt"), "third");
    let watch = Watch::start(&data, &dir, &[], &[("LEASEHOLD_DB", url.as_str())]);
    let s = Store::open(&url, StoreOptions::default()).unwrap();
    wait_until("a.txt is indexed", || is_indexed(&s, "a.txt", "first"));
    wait_until("sub/c.txt is indexed", || is_indexed(&s, "sub/c.txt", "third"));
    write(&dir.join("b.txt"), "second");
    wait_until("b.txt is indexed", || is_indexed(&s, "b.txt", "second"));
    std::fs::remove_file(dir.join("a.txt")).unwrap();
    wait_until("a.txt is marked gone", || is_gone(&s, "a.txt"));
    std::fs::remove_dir_all(dir.join("sub")).unwrap();
    wait_until("sub/c.txt is marked gone", || is_gone(&s, "sub/c.txt"));
    let (code, lines, stderr) = watch.stop();
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let values = json_lines(&lines);
    let passes: Vec<_> = values.iter().filter(|v| v["kind"] == "pass").collect();
    assert!(passes.len() > 1, "{lines:?}");
    assert!(
        passes[1..].iter().all(|v| v["full"] == false),
        "after the first, every pass by path: {lines:?}"
    );
    let gone: u64 = passes[1..].iter().map(|v| v["gone"].as_u64().unwrap_or(0)).sum();
    assert_eq!(gone, 2, "{lines:?}");
}
