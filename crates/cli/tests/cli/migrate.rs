//! `leasehold migrate --to`: a SQLite data directory with a realistic history
//! moves to PostgreSQL (a real server, tests/common/pg.rs) and back, verified
//! by counts and checksums; the read commands agree on both sides, work goes
//! on after the move; refusals for live leases, a target that is not empty,
//! and a wrong password (which never shows).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::common;

use common::output::{json, ok, stderr, stdout};
use common::{pg, samples, SAMPLE_PHRASES};
use leasehold::store::{Answer, GatePolicy};
use leasehold::{NewDoc, Store, StoreOptions};
use serde_json::Value;

const POLICY: GatePolicy = GatePolicy {
    lock_ttl: 600_000,
    probe_ttl: 60_000,
    notify_every: 3_600_000,
};

/// The binary on data directory `data`, the database given by `--db` when set.
fn leasehold(data: &Path, db: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = common::leasehold_command(data);
    cmd.env_remove("LEASEHOLD_DB");
    if let Some(db) = db {
        cmd.arg("--db").arg(db);
    }
    cmd.args(args).output().expect("run leasehold")
}

fn printed(out: &Output) -> String {
    format!("{}{}", stdout(out), stderr(out))
}

/// A data directory and a copy of the samples plus two documents that cannot
/// be extracted.
struct Corpus {
    _dir: tempfile::TempDir,
    data: PathBuf,
    src: PathBuf,
}

impl Corpus {
    fn new() -> Corpus {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        common::copy_tree(&samples(), &src);
        std::fs::write(src.join("broken.pdf"), b"%PDF-1.4 this is not a pdf").unwrap();
        std::fs::write(src.join("broken.docx"), b"PK not a zip at all").unwrap();
        Corpus {
            data: dir.path().join("data"),
            src,
            _dir: dir,
        }
    }

    fn src(&self) -> &str {
        self.src.to_str().unwrap()
    }
}

/// Two runs with failures and a requeue between them, then gate state, a
/// notice and an outbox row written through the store.
fn history_on_sqlite(c: &Corpus) {
    let first = leasehold(&c.data, None, &["run", c.src(), "--json"]);
    assert!(json(first)["indexed"].as_u64().unwrap() >= SAMPLE_PHRASES.len() as u64);
    ok(leasehold(&c.data, None, &["retry", "--dead"]));
    let _second = leasehold(&c.data, None, &["run", c.src()]);

    let store = Store::open(c.data.join("leasehold.db"), StoreOptions::default()).unwrap();
    let counts = store.counts().unwrap();
    let failed = counts.get(leasehold::Status::Dead) + counts.get(leasehold::Status::Retrying);
    assert_eq!(failed, 2, "the two broken documents failed: {counts:?}");
    let broken = store.job_by_key("broken.pdf").unwrap().unwrap();
    let events: Vec<String> = store
        .history(leasehold::JobId(broken.id))
        .unwrap()
        .into_iter()
        .map(|h| h.event)
        .collect();
    assert!(events.iter().any(|e| e == "requeued"), "{events:?}");
    let rejected = Answer::Rejected {
        error: "account a: credentials refused (HTTP 401)".into(),
        until: None,
    };
    store.accounts().report("a", None, &rejected, &POLICY).unwrap();
    store
        .accounts()
        .hold("proc-1", &["b".to_owned()], Duration::from_secs(600), &POLICY)
        .unwrap();
    // An accepted result with text for the sink: one outbox row. It reuses
    // a sample's mirror file, so doctor still finds every result intact.
    let sample = store.job_by_key("notes.txt").unwrap().unwrap();
    store.enqueue(&NewDoc::new("api/extra.txt", "v1")).unwrap();
    let claim = store.claim("test").unwrap().unwrap();
    let path = sample.result_path.unwrap();
    let sum = sample.checksum.unwrap();
    assert!(store
        .complete(
            claim,
            leasehold::Completion::new(&path, &sum)
                .deliver("extra text")
                .index("extra text")
        )
        .unwrap()
        .is_accepted());
    assert_eq!(store.outbox().totals().unwrap().rows, 1);
    assert!(!store.notices().all().unwrap().is_empty());
}

/// Rows and checksum per table, from a `migrate --json` report.
fn tables(report: &Value) -> Vec<(String, u64, String)> {
    report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["table"].as_str().unwrap().to_owned(),
                t["rows"].as_u64().unwrap(),
                t["sha256"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn rows_of(tables: &[(String, u64, String)], name: &str) -> u64 {
    tables.iter().find(|t| t.0 == name).unwrap().1
}

/// `status --json` without the line naming the database.
fn status(data: &Path, db: Option<&str>) -> Value {
    let mut s = json(ok(leasehold(data, db, &["status", "--json"])));
    s.as_object_mut().unwrap().remove("database");
    s
}

/// What `doctor --json` found, without the database's name and file checks.
fn doctor(data: &Path, db: Option<&str>) -> (Vec<Value>, Value, Value, Value) {
    let out = leasehold(data, db, &["doctor", "--json"]);
    let d: Value = serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", printed(&out)));
    let checked = &d["checked"];
    (
        d["problems"].as_array().cloned().unwrap_or_default(),
        checked["documents"].clone(),
        checked["indexed"].clone(),
        checked["results_verified"].clone(),
    )
}

#[test]
fn sqlite_to_postgres_and_back_keeps_every_row() {
    let c = Corpus::new();
    history_on_sqlite(&c);
    let url = pg::server().fresh_database();
    // A rerun's shard stamps hold against this file's history order only:
    // they stay behind (the rows counted below are the rest of `meta`).
    let source = Store::open(c.data.join("leasehold.db"), StoreOptions::default()).unwrap();
    source
        .set_meta("checked_shards", "mark=1:1@1\n0=stamp\n")
        .unwrap();
    drop(source);

    let there = json(ok(leasehold(&c.data, None, &["migrate", "--to", &url, "--json"])));
    let moved = tables(&there);
    assert_eq!(moved.len(), 9, "{there}");
    for table in [
        "jobs",
        "history",
        "meta",
        "accounts",
        "account_holders",
        "auth_history",
        "notices",
        "outbox",
    ] {
        assert!(rows_of(&moved, table) > 0, "{table} moved nothing: {there}");
    }
    assert_eq!(rows_of(&moved, "outbox_totals"), 1);

    let pg = Store::open(&url, StoreOptions::default()).unwrap();
    assert_eq!(pg.meta("checked_shards").unwrap(), None);
    drop(pg);

    // The read commands say the same on both sides.
    assert_eq!(status(&c.data, None), status(&c.data, Some(&url)));
    let sqlite_doctor = doctor(&c.data, None);
    assert!(sqlite_doctor.0.is_empty(), "{sqlite_doctor:?}");
    assert_eq!(sqlite_doctor, doctor(&c.data, Some(&url)));

    // The store moved from refuses new work, naming where it went.
    let stale = leasehold(&c.data, None, &["run", c.src(), "--json"]);
    assert!(!stale.status.success(), "{}", printed(&stale));
    assert!(
        printed(&stale).contains("was moved to postgres://"),
        "{}",
        printed(&stale)
    );

    // Work goes on on PostgreSQL: a new document gets an id above the old ones.
    let max_id = {
        let pg = Store::open(&url, StoreOptions::default()).unwrap();
        let jobs = pg.jobs_after(&[], leasehold::JobId(0), 1000).unwrap();
        jobs.iter().map(|j| j.id).max().unwrap()
    };
    std::fs::write(c.src.join("late.txt"), "a late arrival, saffron comet").unwrap();
    let run = leasehold(&c.data, Some(&url), &["run", c.src(), "--json"]);
    let summary: Value =
        serde_json::from_str(&stdout(&run)).unwrap_or_else(|e| panic!("{e}: {}", printed(&run)));
    assert_eq!(
        summary["indexed"], 1,
        "only the new document is extracted: {summary}"
    );
    let pg = Store::open(&url, StoreOptions::default()).unwrap();
    let late = pg.job_by_key("late.txt").unwrap().unwrap();
    assert!(late.id > max_id, "{} <= {max_id}", late.id);
    assert_eq!(late.status, leasehold::Status::Indexed);

    // And back, into a new SQLite file: the same rows, the same checksums.
    let back = c.data.join("back.db");
    let back_report = json(ok(leasehold(
        &c.data,
        Some(&url),
        &["migrate", "--to", back.to_str().unwrap(), "--json"],
    )));
    assert_eq!(
        rows_of(&tables(&back_report), "jobs"),
        rows_of(&moved, "jobs") + 1
    );
    assert_eq!(
        status(&c.data, Some(back.to_str().unwrap())),
        status(&c.data, Some(&url))
    );
    // Now PostgreSQL is the store moved from.
    let claim = pg.claim("w");
    assert!(matches!(claim, Err(leasehold::Error::Moved { .. })), "{claim:?}");
}

#[test]
fn refuses_while_a_worker_holds_a_live_lease() {
    let c = Corpus::new();
    ok(leasehold(&c.data, None, &["run", samples().to_str().unwrap()]));
    let store = Store::open(
        c.data.join("leasehold.db"),
        StoreOptions::default().lease(Duration::from_secs(3600)),
    )
    .unwrap();
    store.enqueue(&NewDoc::new("held.txt", "v1")).unwrap();
    let _claim = store.claim("elsewhere").unwrap().unwrap();

    let url = pg::server().fresh_database();
    let out = leasehold(&c.data, None, &["migrate", "--to", &url]);
    let shown = printed(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("1 document(s) are being extracted under live leases"),
        "{shown}"
    );
    let target = Store::open(&url, StoreOptions::default()).unwrap();
    assert_eq!(target.counts().unwrap().total(), 0, "nothing was written");

    // The same on a PostgreSQL source, by its own rule (the clock skew).
    let pg = Store::open(&url, StoreOptions::default().lease(Duration::from_secs(3600))).unwrap();
    pg.enqueue(&NewDoc::new("held.txt", "v1")).unwrap();
    let _pg_claim = pg.claim("elsewhere").unwrap().unwrap();
    let back = c.data.join("back.db");
    let out = leasehold(&c.data, Some(&url), &["migrate", "--to", back.to_str().unwrap()]);
    let shown = printed(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("1 document(s) are being extracted under live leases"),
        "{shown}"
    );
    let back = Store::open(&back, StoreOptions::default()).unwrap();
    assert_eq!(back.counts().unwrap().total(), 0, "nothing was written");
}

#[test]
fn refuses_a_target_that_holds_rows() {
    let c = Corpus::new();
    ok(leasehold(&c.data, None, &["run", samples().to_str().unwrap()]));
    let url = pg::server().fresh_database();
    let first = stdout(&ok(leasehold(&c.data, None, &["migrate", "--to", &url])));
    let jobs_line = first.lines().find(|l| l.starts_with("jobs ")).unwrap_or_default();
    assert!(
        jobs_line.contains(&format!(" {} ", SAMPLE_PHRASES.len())),
        "{first}"
    );
    assert!(
        first.contains("verified: every table's row count and checksum agree"),
        "{first}"
    );

    // The store moved from cannot be moved again (its copy would be stale).
    let again = leasehold(&c.data, None, &["migrate", "--to", &url]);
    assert!(printed(&again).contains("was moved to"), "{}", printed(&again));

    // Another store into the one that now holds rows.
    let second = Corpus::new();
    ok(leasehold(
        &second.data,
        None,
        &["run", samples().to_str().unwrap()],
    ));
    let again = leasehold(&second.data, None, &["migrate", "--to", &url]);
    let shown = printed(&again);
    assert_eq!(again.status.code(), Some(1), "{shown}");
    let jobs = SAMPLE_PHRASES.len();
    assert!(
        shown.contains(&format!("table jobs holds {jobs} row(s)")),
        "{shown}"
    );

    // A SQLite target too, here the source's own data run elsewhere.
    let other = tempfile::tempdir().unwrap();
    let other_data = other.path().join("data");
    ok(leasehold(
        &other_data,
        None,
        &["run", samples().to_str().unwrap()],
    ));
    let out = leasehold(
        &c.data,
        Some(&url),
        &[
            "migrate",
            "--to",
            other_data.join("leasehold.db").to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", printed(&out));
    assert!(printed(&out).contains("table jobs holds"), "{}", printed(&out));
}

#[test]
fn a_wrong_password_is_refused_without_showing_it() {
    let server = pg::server();
    let role = server.create_role("right-pw");
    let url = server.fresh_database();
    let db = url.rsplit('/').next().unwrap().to_owned();
    let port = server.port();
    let plain = format!("postgres://{role}@127.0.0.1:{port}/{db}");
    let wrong = format!("postgres://{role}:Wr0ng-s3cret@127.0.0.1:{port}/{db}");

    let c = Corpus::new();
    ok(leasehold(&c.data, None, &["run", samples().to_str().unwrap()]));
    let out = leasehold(&c.data, None, &["migrate", "--to", &wrong, "--json"]);
    let shown = printed(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains(&plain), "names the database: {shown}");
    assert!(shown.contains("password authentication failed"), "{shown}");
    assert!(!shown.contains("Wr0ng-s3cret"), "{shown}");

    // With the right password: the report names the database without it.
    server
        .admin()
        .batch_execute(&format!("ALTER DATABASE {db} OWNER TO {role}"))
        .unwrap();
    let right = format!("postgres://{role}:right-pw@127.0.0.1:{port}/{db}");
    let out = ok(leasehold(&c.data, None, &["migrate", "--to", &right]));
    let shown = printed(&out);
    assert!(shown.contains(&plain), "{shown}");
    assert!(!shown.contains("right-pw"), "{shown}");
}

#[test]
fn a_failure_mid_copy_leaves_the_target_as_it_was() {
    let c = Corpus::new();
    ok(leasehold(&c.data, None, &["run", samples().to_str().unwrap()]));
    // A value SQLite accepts in an INTEGER column, in a table copied after jobs.
    let db = rusqlite::Connection::open(c.data.join("leasehold.db")).unwrap();
    db.execute("UPDATE history SET fence = 'seven' WHERE seq = 2", [])
        .unwrap();
    drop(db);

    let url = pg::server().fresh_database();
    let out = leasehold(&c.data, None, &["migrate", "--to", &url]);
    let shown = printed(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("table history, column fence: unexpected value (Text)"),
        "{shown}"
    );
    let target = Store::open(&url, StoreOptions::default()).unwrap();
    assert_eq!(
        target.counts().unwrap().total(),
        0,
        "the jobs copied first were rolled back"
    );
}

/// Text keys are hashed in byte order on both sides, whatever the
/// PostgreSQL database's collation (an ICU one sorts "a" before "B";
/// SQLite's BINARY sorts "B" first).
#[test]
fn text_keys_verify_under_a_linguistic_collation() {
    let server = pg::server();
    let name = format!("lh_icu_{}", std::process::id());
    server
        .admin()
        .batch_execute(&format!(
            "CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        ))
        .unwrap();
    let url = pg::with_database(server.url(), &name);
    let mut check = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let order: Vec<String> = check
        .query("SELECT x FROM (VALUES ('B'), ('a')) v(x) ORDER BY x", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order, ["a", "B"], "the database sorts linguistically");

    let c = Corpus::new();
    ok(leasehold(&c.data, None, &["run", samples().to_str().unwrap()]));
    let store = Store::open(c.data.join("leasehold.db"), StoreOptions::default()).unwrap();
    for key in ["B", "a", "Zed", "ähnlich"] {
        store.set_meta(key, "x").unwrap();
    }
    drop(store);
    let report = json(ok(leasehold(&c.data, None, &["migrate", "--to", &url, "--json"])));
    // source_root, search_tokenizer, search_stemming, write_waits (the run's
    // waits for the write lock) and the four keys above.
    assert_eq!(rows_of(&tables(&report), "meta"), 8, "{report}");
}

/// A worker that was running on the store during the move stops claiming
/// within the marker's check interval (by the store's clock), with the error
/// that names where the store went.
#[test]
fn a_running_handle_stops_claiming_once_its_store_was_moved() {
    let dir = tempfile::tempdir().unwrap();
    let clock = leasehold::ManualClock::new(1_000_000);
    let opts = StoreOptions::default().clock(std::sync::Arc::new(clock.clone()));
    let running = Store::open(dir.path().join("q.db"), opts.clone()).unwrap();
    for key in ["a.txt", "b.txt"] {
        running.enqueue(&leasehold::NewDoc::new(key, "v1")).unwrap();
    }
    let first = running.claim("w").unwrap().expect("queued");
    assert!(running.release(first, "handed back").unwrap().is_accepted());

    let target = Store::open(pg::server().fresh_database(), StoreOptions::default()).unwrap();
    leasehold::store::migrate::migrate(&running, &target).unwrap();
    clock.advance(Duration::from_secs(1));
    let refused = running.claim("w");
    assert!(
        matches!(refused, Err(leasehold::Error::Moved { .. })),
        "{refused:?}"
    );
    assert!(refused
        .unwrap_err()
        .to_string()
        .contains(target.path().to_str().unwrap()));
    let enqueue = running.enqueue(&leasehold::NewDoc::new("c.txt", "v1"));
    assert!(
        matches!(enqueue, Err(leasehold::Error::Moved { .. })),
        "{enqueue:?}"
    );
}
