//! The harness of the auth-gate tests: a data directory, a config file, a
//! clock-offset file shared by every `leasehold` process, and a real upstream
//! on 127.0.0.1 (see `upstream_server`).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::upstream_server::Upstream;
use super::{pg, Backend, BIN};

/// The account's password: it must never appear in any output, notice or row.
pub const PASSWORD: &str = "pw-Sekrit-7f3a9c41";
pub const USER: &str = "svc";
pub const HOUR_MS: i64 = 3_600_000;

/// A data directory, a config file, a clock-offset file and an upstream.
pub struct Env {
    _dir: tempfile::TempDir,
    pub data: PathBuf,
    pub config: PathBuf,
    clock_file: PathBuf,
    log_dir: PathBuf,
    offset_ms: i64,
    pub up: Upstream,
    /// Every stdout/stderr seen, for the secrets check.
    pub outputs: Vec<String>,
    /// The PostgreSQL database every process uses (`LEASEHOLD_DB`), or
    /// `None` for the data directory's SQLite file.
    pub db_url: Option<String>,
    /// The same database as the test's own checks reach it: straight to the
    /// server (behind PgBouncer, `db_url` goes through the pooler).
    check_url: Option<String>,
}

/// The `main` account (user [`USER`], password from `LH_TEST_PASSWORD`) and an
/// HTTP source at `base` read through it: the start of every test config.
pub fn source_account(base: &str) -> String {
    format!(
        r#"
[[account]]
name = "main"
username = "{USER}"
password_env = "LH_TEST_PASSWORD"

[source.http]
base_url = "{base}"
account = "main"
"#
    )
}

impl Env {
    /// An upstream with `docs` text documents and one account, read as the
    /// source through the `main` account; notices go to the upstream's webhook.
    pub fn new(docs: usize) -> Env {
        Env::on(Backend::Sqlite, docs)
    }

    /// [`Env::new`] on the engine `backend`.
    pub fn on(backend: Backend, docs: usize) -> Env {
        Env::with_config_on(backend, docs, |base, hook, _sink| {
            format!(
                r#"{}
[auth]
lock_ttl = "1h"
probe_ttl = "30s"
notify_every = "24h"

[notify]
webhook = "{hook}"
"#,
                source_account(base)
            )
        })
    }

    /// An upstream with `docs` text documents and the one account `USER`; the
    /// whole config file is `config(base_url, webhook_url, sink_url)`.
    pub fn with_config(docs: usize, config: impl FnOnce(&str, &str, &str) -> String) -> Env {
        Env::with_config_on(Backend::Sqlite, docs, config)
    }

    /// [`Env::with_config`] on the engine `backend`: for PostgreSQL a fresh
    /// database on the test binary's server, given to every process as
    /// `LEASEHOLD_DB`.
    pub fn with_config_on(
        backend: Backend,
        docs: usize,
        config: impl FnOnce(&str, &str, &str) -> String,
    ) -> Env {
        let (db_url, check_url) = match backend {
            Backend::Sqlite => (None, None),
            Backend::Postgres => {
                let url = pg::server().fresh_database();
                (Some(url.clone()), Some(url))
            }
            Backend::PgBouncer => {
                let pooled = super::pgbouncer::pooler().fresh_database();
                let direct = super::pgbouncer::direct_url(&pooled);
                (Some(pooled), Some(direct))
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let up = Upstream::start();
        up.add_account(USER, PASSWORD);
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let path = dir.path().join("leasehold.toml");
        let text = config(&up.base_url(), &up.webhook_url(), &up.sink_url());
        std::fs::write(&path, text).unwrap();
        let log_dir = dir.path().join("logs");
        std::fs::create_dir(&log_dir).unwrap();
        let env = Env {
            clock_file: dir.path().join("clock-offset"),
            log_dir,
            _dir: dir,
            data,
            config: path,
            offset_ms: 0,
            up,
            outputs: Vec::new(),
            db_url,
            check_url,
        };
        env.add_docs(0..docs);
        env
    }

    /// Add (or re-add) documents `doc-NNNN` for each index.
    pub fn add_docs(&self, range: std::ops::Range<usize>) {
        for i in range {
            let body = format!("document number {i} says lantern{i}\n");
            self.up.add_document(
                &format!("doc-{i:04}"),
                "v1",
                &format!("d{i}.txt"),
                "text/plain",
                body.as_bytes(),
            );
        }
    }

    /// Assert that nobody calls the upstream as `user` for `secs` seconds (an
    /// observation window: a violation shows within it).
    pub fn quiet_for(&self, user: &str, secs: u64, why: &str) {
        let before = self.up.requests(user);
        std::thread::sleep(Duration::from_secs(secs));
        assert_eq!(self.up.requests(user), before, "{why}");
    }

    /// The directory holding the config file (for password files and the like).
    pub fn dir(&self) -> &std::path::Path {
        self.config.parent().unwrap()
    }

    /// Set every process's clock so that "now" is about `target_ms` (ms since
    /// the Unix epoch) on the injected clock.
    pub fn set_now(&mut self, target_ms: i64) {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        self.jump(target_ms - wall - self.offset_ms);
    }

    /// Start `leasehold ARGS` with extra environment variables, output piped.
    pub fn spawn(&self, args: &[&str], vars: &[(&str, &str)]) -> Child {
        let mut c = self.cmd(args);
        c.envs(vars.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    }

    /// Wait for a child to end; its output is kept for the secrets check.
    pub fn finish(&mut self, child: Child) -> Output {
        let out = child.wait_with_output().unwrap();
        self.keep(&out);
        out
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--data")
            .arg(&self.data)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env("LH_TEST_PASSWORD", PASSWORD)
            .env("LEASEHOLD_TEST_CLOCK_FILE", &self.clock_file);
        match &self.db_url {
            Some(url) => c.env("LEASEHOLD_DB", url),
            None => c.env_remove("LEASEHOLD_DB"),
        };
        c
    }

    /// Run to the end; the output is kept for the secrets check.
    pub fn run(&mut self, args: &[&str]) -> Output {
        let out = self.cmd(args).output().unwrap();
        self.keep(&out);
        out
    }

    pub fn keep(&mut self, out: &Output) {
        self.outputs
            .push(String::from_utf8_lossy(&out.stdout).into_owned());
        self.outputs
            .push(String::from_utf8_lossy(&out.stderr).into_owned());
    }

    /// `n` `leasehold work` processes with two threads each. Their output goes
    /// to files (a pipe nobody reads could fill and stall them).
    pub fn workers(&self, n: usize) -> Vec<Child> {
        (0..n)
            .map(|_| {
                let log = |ext: &str| {
                    let path = self.log_dir.join(format!("{}.{ext}", uuid_like()));
                    std::fs::File::create(path).unwrap()
                };
                self.cmd(&["--workers", "2", "--lease", "30s", "work"])
                    .stdout(Stdio::from(log("out")))
                    .stderr(Stdio::from(log("err")))
                    .spawn()
                    .unwrap()
            })
            .collect()
    }

    /// Kill the workers and keep what they printed.
    pub fn stop(&mut self, children: Vec<Child>) {
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.keep_logs();
    }

    /// Everything the workers printed so far, kept for the secrets check.
    pub fn keep_logs(&mut self) {
        for e in std::fs::read_dir(&self.log_dir).unwrap().flatten() {
            self.outputs
                .push(std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }

    /// Move every process's clock forward.
    pub fn jump(&mut self, ms: i64) {
        self.offset_ms += ms;
        std::fs::write(&self.clock_file, self.offset_ms.to_string()).unwrap();
    }

    /// The SQLite file (SQLite-only tests).
    pub fn db(&self) -> rusqlite::Connection {
        assert!(
            self.db_url.is_none(),
            "db() is the SQLite file; use scalar or texts"
        );
        let c = rusqlite::Connection::open(self.data.join("leasehold.db")).unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        c
    }

    /// A client on the PostgreSQL database, `None` on SQLite.
    pub fn pg(&self) -> Option<postgres::Client> {
        self.check_url.as_deref().map(pg_client)
    }

    /// The first column of `sql`'s first row, an integer, on either engine
    /// (`sql` in the SQL both speak).
    pub fn scalar(&self, sql: &str) -> i64 {
        match &self.db_url {
            None => self.db().query_row(sql, [], |r| r.get(0)).unwrap(),
            Some(_) => pg_client(self.check_url.as_deref().unwrap())
                .query_one(sql, &[])
                .unwrap()
                .get(0),
        }
    }

    /// The first column of every row of `sql`, as text, on either engine.
    pub fn texts(&self, sql: &str) -> Vec<String> {
        match &self.db_url {
            None => {
                let db = self.db();
                let mut s = db.prepare(sql).unwrap();
                let rows = s.query_map([], |r| r.get(0)).unwrap();
                rows.map(|r| r.unwrap()).collect()
            }
            Some(_) => pg_client(self.check_url.as_deref().unwrap())
                .query(sql, &[])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect(),
        }
    }

    pub fn account_state(&self, name: &str) -> String {
        let sql = format!("SELECT state FROM accounts WHERE name = '{name}'");
        self.texts(&sql).pop().unwrap_or_else(|| "none".into())
    }

    /// Notices the webhook received, of one kind.
    pub fn received(&self, kind: &str) -> usize {
        self.notices_of(kind).len()
    }

    /// The bodies of the notices the webhook received, of one kind.
    pub fn notices_of(&self, kind: &str) -> Vec<serde_json::Value> {
        self.up
            .notices()
            .into_iter()
            .filter(|n| n["kind"] == kind)
            .collect()
    }

    /// Fail unless the password appears nowhere: outputs, notices, the
    /// database file and its WAL, the gate's history.
    pub fn assert_no_secret(&self) {
        for (i, o) in self.outputs.iter().enumerate() {
            assert!(!o.contains(PASSWORD), "output {i} shows the password:\n{o}");
        }
        for n in self.up.notices() {
            assert!(
                !n.to_string().contains(PASSWORD),
                "a notice shows the password: {n}"
            );
        }
        for text in self.texts(
            "SELECT message || details FROM notices UNION ALL
             SELECT coalesce(detail, '') FROM auth_history UNION ALL
             SELECT coalesce(last_error, '') FROM accounts",
        ) {
            assert!(
                !text.contains(PASSWORD),
                "the database holds the password: {text}"
            );
        }
        for f in ["leasehold.db", "leasehold.db-wal"] {
            if let Ok(bytes) = std::fs::read(self.data.join(f)) {
                assert!(
                    !bytes.windows(PASSWORD.len()).any(|w| w == PASSWORD.as_bytes()),
                    "{f} holds the password"
                );
            }
        }
    }
}

/// A client on the test's PostgreSQL database.
fn pg_client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).unwrap()
}

/// A name unique within the test process.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("p{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// Poll `cond` until it holds, or fail after `secs` naming `what`.
pub fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
