//! One data directory, one source, through the real binary: a data directory
//! records the source it indexes (a directory, or an HTTP base URL) and
//! refuses another with one line and exit 2, before anything is enqueued.
//! The HTTP source is a real upstream on 127.0.0.1 (`common::upstream_server`).

use crate::common;
use crate::common::output::stderr;

use std::process::Output;

use common::gate_env::{source_account, Env, USER};

/// An upstream of `docs` text documents read through the account `main`,
/// whose results go to the upstream's sink through the same account.
fn env_with_sink(docs: usize) -> Env {
    Env::with_config(docs, config_text)
}

fn config_text(base: &str, hook: &str, sink: &str) -> String {
    format!(
        r#"{}
[sink.http]
url = "{sink}"
account = "main"

[notify]
webhook = "{hook}"
"#,
        source_account(base)
    )
}

/// Rewrite the configuration file with another `[source.http] base_url`.
fn set_base_url(env: &Env, base: &str) {
    let text = config_text(base, &env.up.webhook_url(), &env.up.sink_url());
    std::fs::write(&env.config, text).unwrap();
}

fn assert_ok(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
}

/// A refusal: exit 2 and one line on stderr holding each of `parts`.
fn assert_refused(out: &Output, parts: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    for part in parts {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
}

/// Every document row as `(key, version, status, attempts, result_path)`.
fn rows(env: &Env) -> Vec<(String, String, String, i64, Option<String>)> {
    let db = env.db();
    let mut s = db
        .prepare("SELECT doc_key, version, status, attempts, result_path FROM jobs ORDER BY doc_key")
        .unwrap();
    let rows = s.query_map([], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    });
    rows.unwrap().map(Result::unwrap).collect()
}

/// Results the sink received, counted.
fn delivered(env: &Env) -> usize {
    env.up.sink_batches().iter().map(Vec::len).sum()
}

/// The issue's case: a data directory used by `sync` is given `run LOCALDIR`
/// holding a file named like an HTTP document's key. Before, the local text
/// was posted to the sink and the HTTP documents went dead.
#[test]
fn run_dir_on_a_data_directory_of_an_http_source_is_refused_before_anything_is_enqueued() {
    let mut env = env_with_sink(3);
    assert_ok(&env.run(&["sync", "--json"]));
    let before = rows(&env);
    assert_eq!(before.len(), 3);
    assert!(before.iter().all(|r| r.2 == "indexed"), "{before:?}");
    let sent = delivered(&env);
    assert_eq!(sent, 3);

    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("doc-0000"), "local text, not the upstream's\n").unwrap();
    std::fs::write(local.path().join("notes.txt"), "a local note\n").unwrap();
    let out = env.run(&["run", local.path().to_str().unwrap()]);
    assert_refused(
        &out,
        &[
            env.data.to_str().unwrap(),
            &format!(
                "belongs to the HTTP source {}",
                env.up.base_url().trim_end_matches('/')
            ),
            "--data",
        ],
    );
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        rows(&env),
        before,
        "nothing enqueued, the HTTP documents untouched"
    );
    assert_eq!(delivered(&env), sent, "nothing posted to the sink");

    let again = env.run(&["sync", "--json"]);
    assert_ok(&again);
    let v: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(v["failed"], 0, "{v}");
    assert_eq!(rows(&env), before, "a later sync finds them as they were");
}

/// `sync` on a data directory of a source directory: refused, and the
/// upstream is not even asked for its listing.
#[test]
fn sync_on_a_data_directory_of_a_source_directory_is_refused() {
    let mut env = env_with_sink(3);
    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("a.txt"), "a local note\n").unwrap();
    let root = local.path().canonicalize().unwrap();
    assert_ok(&env.run(&["run", root.to_str().unwrap()]));
    let before = rows(&env);
    assert_eq!(before.len(), 1);
    // The run's courier may have delivered the result to the sink already
    // (how soon depends on the machine's load): what counts is after it.
    let asked = env.up.requests(USER);

    for args in [&["sync"][..], &["discover"][..]] {
        let out = env.run(args);
        assert_refused(
            &out,
            &[
                &format!("belongs to the source directory {}", root.display()),
                "--data",
            ],
        );
    }
    assert_eq!(env.up.requests(USER), asked, "the upstream was not called");
    assert_eq!(rows(&env), before);
}

/// A base URL changed in the configuration file: the keys recorded belong to
/// the old one, so the data directory refuses and says how to move on.
#[test]
fn a_changed_base_url_is_refused_and_the_way_on_is_named() {
    let mut env = env_with_sink(2);
    assert_ok(&env.run(&["sync"]));
    let before = rows(&env);
    let old = env.up.base_url();
    let old = old.trim_end_matches('/');
    let new = format!("{old}/v2");
    set_base_url(&env, &new);
    let calls = env.up.requests(USER);

    for args in [&["sync"][..], &["discover"][..], &["work", "--until-empty"][..]] {
        let out = env.run(args);
        assert_refused(
            &out,
            &[
                &format!("belongs to the HTTP source {old}, not {new}"),
                "new data directory",
            ],
        );
    }
    assert_eq!(env.up.requests(USER), calls, "the new base URL was not called");
    assert_eq!(rows(&env), before);
}

/// The same source again is accepted: the HTTP base URL (with or without a
/// trailing slash) and the directory, each on its own data directory.
#[test]
fn the_same_source_again_is_accepted() {
    let mut env = env_with_sink(2);
    assert_ok(&env.run(&["sync"]));
    set_base_url(&env, &format!("{}/", env.up.base_url().trim_end_matches('/')));
    assert_ok(&env.run(&["sync"]));
    assert_ok(&env.run(&["discover"]));
    assert_eq!(rows(&env).len(), 2);
    // `status` names the source the data directory belongs to.
    let status = env.run(&["status", "--json"]);
    assert_ok(&status);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        status["source"],
        env.up.base_url().trim_end_matches('/'),
        "{status}"
    );

    let data = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("a.txt"), "a local note\n").unwrap();
    let dir = local.path().to_str().unwrap();
    assert_ok(&common::leasehold(data.path(), &["run", dir]));
    assert_ok(&common::leasehold(data.path(), &["run", dir]));
    assert_ok(&common::leasehold(data.path(), &["discover", dir]));
}

/// A data directory synced by a leasehold that did not yet record the base
/// URL (simulated: the record removed) still refuses a directory: its
/// listing's figures show that an HTTP source filled it.
#[test]
fn a_data_directory_synced_before_sources_were_recorded_refuses_a_directory() {
    let mut env = env_with_sink(2);
    assert_ok(&env.run(&["sync"]));
    let removed = env
        .db()
        .execute("DELETE FROM meta WHERE name = 'source_url'", [])
        .unwrap();
    assert_eq!(removed, 1, "the base URL was recorded under source_url");
    let before = rows(&env);

    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("doc-0000"), "local text\n").unwrap();
    let out = env.run(&["run", local.path().to_str().unwrap()]);
    assert_refused(&out, &["belongs to an HTTP source", "--data"]);
    assert_eq!(rows(&env), before);

    assert_ok(&env.run(&["sync"]));
    assert_eq!(rows(&env), before, "sync records the base URL and goes on");
}
