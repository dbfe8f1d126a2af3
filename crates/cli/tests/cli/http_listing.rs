//! The HTTP source against a hostile or broken upstream, end to end through
//! the `leasehold` binary and a real HTTP server on 127.0.0.1 (tiny_http):
//! bad listing records are skipped, counted and shown by `status`; ids are one
//! escaped path segment; a complete listing marks removed documents gone and a
//! failed one marks nothing; a server echoing the password in every encoding
//! leaks it to no output, database byte or notify command.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde_json::{json, Value};

use common::gate_env::{source_account, USER};
use common::BIN;

/// A password whose encodings all differ from it: a quote, a slash, a space,
/// a plus, an ampersand, a non-ASCII letter.
const PASSWORD: &str = "Pw\"sl/ash é+&Q7-kZ93";
/// Records per listing page.
const PAGE: usize = 3;

/// What the upstream serves and how.
#[derive(Default)]
struct State {
    /// The listing, as raw JSON records (any shape).
    records: Vec<Value>,
    /// Listing pages (by index) answered 500 instead.
    failing_pages: Vec<usize>,
    /// Every request's method and raw target, in order.
    seen: Vec<String>,
    /// Answer every request 401 with a body echoing the password.
    echo_401: bool,
    /// The last page's `next_cursor` points back to this page instead of null.
    cycle_to: Option<usize>,
}

/// A tiny_http server on 127.0.0.1 serving `State`; stops when dropped.
struct Upstream {
    state: Arc<Mutex<State>>,
    server: Arc<tiny_http::Server>,
    url: String,
}

impl Upstream {
    fn start() -> Upstream {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let url = format!("http://{}", server.server_addr().to_ip().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let (s, st) = (server.clone(), state.clone());
        std::thread::spawn(move || {
            for request in s.incoming_requests() {
                let (status, body) = answer(&st, &request);
                let _ = request.respond(tiny_http::Response::from_data(body).with_status_code(status));
            }
        });
        Upstream { state, server, url }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The raw targets of the GET requests the server received.
    fn gets(&self) -> Vec<String> {
        self.state()
            .seen
            .iter()
            .filter_map(|s| s.strip_prefix("GET ").map(str::to_owned))
            .collect()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

fn record(id: &str, version: &str) -> Value {
    json!({ "id": id, "version": version, "name": format!("{id}.txt"), "content_type": "text/plain" })
}

/// The password in every form the redaction must catch.
fn password_forms() -> Vec<(&'static str, String)> {
    let std64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let url64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let pct_upper: String = PASSWORD.bytes().map(|b| format!("%{b:02X}")).collect();
    let pct_lower: String = PASSWORD.bytes().map(|b| format!("%{b:02x}")).collect();
    let form: String = PASSWORD
        .bytes()
        .map(|b| match b {
            b' ' => "+".to_string(),
            b if b.is_ascii_alphanumeric() => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    vec![
        ("raw", PASSWORD.to_string()),
        ("upper", PASSWORD.to_uppercase()),
        ("lower", PASSWORD.to_lowercase()),
        (
            "json",
            serde_json::to_string(PASSWORD)
                .unwrap()
                .trim_matches('"')
                .to_string(),
        ),
        ("url upper", pct_upper),
        ("url lower", pct_lower),
        ("form", form),
        ("base64", std64(PASSWORD.as_bytes())),
        (
            "base64 unpadded",
            std64(PASSWORD.as_bytes()).trim_end_matches('=').to_string(),
        ),
        ("base64url", url64(PASSWORD.as_bytes())),
        ("basic", std64(format!("{USER}:{PASSWORD}").as_bytes())),
        ("basic 1", std64(format!("x{USER}:{PASSWORD}").as_bytes())),
        ("basic 2", url64(format!("xy{USER}:{PASSWORD}").as_bytes())),
        ("hex", hex::encode(PASSWORD)),
        ("HEX", hex::encode_upper(PASSWORD)),
    ]
}

/// What a leak looks like: each form, and for base64 forms the part of it
/// that encodes only the password (2 characters off each end of the run).
fn leak_markers() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (what, form) in password_forms() {
        out.push((what.to_string(), form.clone()));
        if what.starts_with("base64") || what.starts_with("basic") {
            let skip = if what.starts_with("basic") { 8 } else { 2 };
            let core: String = form.trim_end_matches('=').chars().skip(skip).collect();
            let core: String = core
                .chars()
                .take(core.chars().count().saturating_sub(2))
                .collect();
            out.push((format!("{what} core"), core));
        }
    }
    out
}

fn answer(state: &Mutex<State>, request: &tiny_http::Request) -> (u16, Vec<u8>) {
    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
    let target = request.url().to_string();
    st.seen.push(format!("{} {target}", request.method()));
    if st.echo_401 {
        let forms: Vec<String> = password_forms()
            .into_iter()
            .map(|(w, f)| format!("{w}={f}"))
            .collect();
        return (
            401,
            format!("{{\"error\":\"bad password\",\"echo\":\"{}\"}}", forms.join(" ")).into_bytes(),
        );
    }
    let basic = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.to_string())
        .unwrap_or_default();
    let want = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    );
    if basic != want {
        return (401, b"{\"error\":\"unauthorized\"}".to_vec());
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    if path == "/documents" {
        let page: usize = query
            .strip_prefix("cursor=")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if st.failing_pages.contains(&page) {
            return (500, b"{\"error\":\"listing broke\"}".to_vec());
        }
        let start = (page * PAGE).min(st.records.len());
        let end = (start + PAGE).min(st.records.len());
        let next = match (end < st.records.len(), st.cycle_to) {
            (true, _) => Some((page + 1).to_string()),
            (false, back) => back.map(|p| p.to_string()),
        };
        let body = json!({ "documents": &st.records[start..end], "next_cursor": next });
        return (200, body.to_string().into_bytes());
    }
    if let Some(id) = path
        .strip_prefix("/documents/")
        .and_then(|p| p.strip_suffix("/content"))
    {
        return (200, format!("the text of the document {id}\n").into_bytes());
    }
    (404, b"{\"error\":\"no such path\"}".to_vec())
}

/// A data directory and a config file pointing at `up`, notices to a command
/// that writes its arguments, environment and stdin to `notify.out`.
struct Env {
    _dir: tempfile::TempDir,
    data: PathBuf,
    config: PathBuf,
    notify_out: PathBuf,
    outputs: Vec<String>,
}

impl Env {
    fn new(up: &Upstream) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let notify_out = dir.path().join("notify.out");
        let script = "{ printf 'ARGV:'; printf '%s ' \"$0\" \"$@\"; echo; printf 'ENV:'; env; printf 'STDIN:'; cat; } >> \"$0\"";
        let config = dir.path().join("leasehold.toml");
        std::fs::write(
            &config,
            format!(
                r#"{}
[auth]
lock_ttl = "1h"
probe_ttl = "30s"

[notify]
command = ["sh", "-c", {script:?}, {:?}]
"#,
                source_account(&up.url),
                notify_out.display().to_string()
            ),
        )
        .unwrap();
        Env {
            _dir: dir,
            data,
            config,
            notify_out,
            outputs: Vec::new(),
        }
    }

    fn run(&mut self, args: &[&str]) -> Output {
        let out = Command::new(BIN)
            .arg("--data")
            .arg(&self.data)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env("LH_TEST_PASSWORD", PASSWORD)
            .output()
            .unwrap();
        self.outputs
            .push(String::from_utf8_lossy(&out.stdout).into_owned());
        self.outputs
            .push(String::from_utf8_lossy(&out.stderr).into_owned());
        out
    }

    fn ok(&mut self, args: &[&str]) -> Output {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "leasehold {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn status_json(&mut self) -> Value {
        serde_json::from_slice(&self.ok(&["status", "--json"]).stdout).unwrap()
    }

    fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.data.join("leasehold.db")).unwrap()
    }

    /// `(status, source_gone)` of the document `key`.
    fn doc(&self, key: &str) -> (String, i64) {
        self.db()
            .query_row(
                "SELECT status, source_gone FROM jobs WHERE doc_key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
    }
}

fn files_bytes(dir: &Path, names: &[&str]) -> Vec<(String, Vec<u8>)> {
    names
        .iter()
        .filter_map(|n| std::fs::read(dir.join(n)).ok().map(|b| (n.to_string(), b)))
        .collect()
}

#[test]
fn bad_records_are_skipped_counted_and_shown_and_the_good_ones_indexed() {
    let up = Upstream::start();
    let tricky = "a/b ?#%é..";
    up.state().records = vec![
        record("good-1", "v1"),
        record("", "v1"),
        record("nul\0id", "v1"),
        record("..", "v1"),
        record(tricky, "v1"),
        json!({ "id": "no-version", "name": "n", "content_type": "text/plain" }),
        record("good-2", "v1"),
    ];
    let mut env = Env::new(&up);
    let out = env.ok(&["sync", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("skipped 4 bad record(s)"), "{stderr}");

    let status = env.status_json();
    assert_eq!(status["counts"]["indexed"], 3, "{status}");
    let listing = &status["listing"];
    assert_eq!(listing["skipped"], 4, "{status}");
    assert_eq!(listing["listed"], 3, "{status}");
    assert_eq!(listing["complete"], true, "{status}");
    let last = listing["last_skip"].as_str().unwrap();
    assert!(
        last.contains("no-version") && last.contains("missing field"),
        "{last}"
    );
    let text = String::from_utf8_lossy(&env.ok(&["status"]).stdout).into_owned();
    assert!(text.contains("skipped 4"), "{text}");
    assert!(
        text.contains("last skipped: record 3 of its page (id \"no-version\")"),
        "{text}"
    );

    // Each id went out as one escaped segment; `..` never reached a parent path.
    let gets = up.gets();
    assert!(
        gets.contains(&"/documents/a%2Fb%20%3F%23%25%C3%A9../content".to_string()),
        "{gets:?}"
    );
    for target in &gets {
        let path = target.split('?').next().unwrap();
        assert!(
            path == "/documents" || (path.starts_with("/documents/") && path.ends_with("/content")),
            "a request outside the documents: {target} in {gets:?}"
        );
        assert!(!path.contains("/../") && path != "/documents/content", "{gets:?}");
    }
    let contents = gets.iter().filter(|g| g.ends_with("/content")).count();
    assert_eq!(contents, 3, "only the good documents were fetched: {gets:?}");
}

#[test]
fn a_document_removed_upstream_is_gone_after_a_complete_listing_only() {
    let up = Upstream::start();
    up.state().records = (1..=5).map(|i| record(&format!("doc-{i}"), "v1")).collect();
    let mut env = Env::new(&up);
    env.ok(&["sync"]);
    assert_eq!(env.doc("doc-1"), ("indexed".to_string(), 0));

    // doc-1 removed, and the second page of the listing fails.
    {
        let mut st = up.state();
        st.records.remove(0);
        st.failing_pages = vec![1];
    }
    let out = env.run(&["discover", "--no-wait"]);
    assert!(!out.status.success(), "the listing failed");
    assert_eq!(
        env.doc("doc-1"),
        ("indexed".to_string(), 0),
        "incomplete: nothing gone"
    );
    let listing = env.status_json()["listing"].clone();
    assert_eq!(listing["complete"], false, "{listing}");
    assert_eq!(listing["gone"], 0, "{listing}");

    // The listing works again: doc-1 is gone, the others stay.
    up.state().failing_pages.clear();
    let listed: Value = serde_json::from_slice(&env.ok(&["discover", "--json"]).stdout).unwrap();
    assert_eq!(listed["gone"], 1, "{listed}");
    assert_eq!(env.doc("doc-1"), ("dead".to_string(), 1));
    let why: String = env
        .db()
        .query_row("SELECT last_error FROM jobs WHERE doc_key = 'doc-1'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(why, "the upstream listing no longer holds it");
    for i in 2..=5 {
        assert_eq!(env.doc(&format!("doc-{i}")), ("indexed".to_string(), 0));
    }
    assert_eq!(env.status_json()["listing"]["complete"], true);
}

#[test]
fn a_listing_whose_cursors_go_round_in_a_circle_stops_and_marks_nothing_gone() {
    let up = Upstream::start();
    up.state().records = (1..=5).map(|i| record(&format!("doc-{i}"), "v1")).collect();
    let mut env = Env::new(&up);
    env.ok(&["discover"]);
    {
        let mut st = up.state();
        st.records.remove(0);
        st.cycle_to = Some(0);
    }
    let err_path = env.data.with_file_name("discover.err");
    let mut child = Command::new(BIN)
        .arg("--data")
        .arg(&env.data)
        .arg("--config")
        .arg(&env.config)
        .args(["discover", "--no-wait"])
        .env("LH_TEST_PASSWORD", PASSWORD)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    // A bound on a hang, not a speed target: the listing would never end.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("discover still listing after 60 s: the cursors go round");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("came back to a cursor"), "{stderr}");
    assert_eq!(env.doc("doc-1").1, 0, "an incomplete listing marks nothing gone");
    assert_eq!(env.status_json()["listing"]["complete"], false);
}

#[test]
fn an_upstream_echoing_the_password_leaks_it_nowhere() {
    let up = Upstream::start();
    up.state().records = (1..=3).map(|i| record(&format!("doc-{i}"), "v1")).collect();
    let mut env = Env::new(&up);
    // Listed, then every request refused with the echo: documents handed
    // back, the account locked, a lock notice sent to the command.
    env.ok(&["discover"]);
    up.state().echo_401 = true;
    env.run(&["work", "--until-empty", "--no-wait"]);
    let failed = env.run(&["discover", "--no-wait"]);
    assert!(!failed.status.success());
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["inspect", "doc-1"],
        &["inspect", "doc-1", "--json"],
        &["auth", "status"],
        &["auth", "status", "--json"],
    ] {
        env.run(args);
    }
    let notified = std::fs::read_to_string(&env.notify_out).expect("the notify command ran");
    assert!(notified.contains("\"kind\":\"lock\""), "{notified}");
    assert!(notified.contains("401"), "the error is in the notice: {notified}");
    let everything = env.outputs.join("\n");
    assert!(everything.contains("credentials refused"), "{everything}");

    let mut places: Vec<(String, Vec<u8>)> = files_bytes(&env.data, &["leasehold.db", "leasehold.db-wal"]);
    places.push(("notify command".into(), notified.into_bytes()));
    for (i, o) in env.outputs.iter().enumerate() {
        places.push((format!("output {i}"), o.clone().into_bytes()));
    }
    for (place, bytes) in &places {
        let text = String::from_utf8_lossy(bytes);
        for (what, marker) in leak_markers() {
            assert!(
                !text.contains(&marker),
                "{place} holds the password as {what} ({marker})"
            );
        }
    }
}
