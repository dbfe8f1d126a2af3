//! Shared helpers for the integration tests: a temp directory with a store file
//! in it, and a manual clock; [`TestDb`], a database of either engine, for the
//! conformance tests that run the same body on SQLite and on PostgreSQL.
#![allow(dead_code)]

pub mod browser;
pub mod cdp;
pub mod cut_proxy;
pub mod gate_env;
pub mod hostile;
pub mod output;
pub mod pg;
pub mod pgbouncer;
pub mod served;
pub mod upstream_server;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold::{ManualClock, Store, StoreOptions};

/// A temp directory holding one database path; removed on drop.
pub struct TempStore {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub clock: ManualClock,
}

impl TempStore {
    pub fn new() -> TempStore {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("leasehold.db");
        TempStore {
            dir,
            path,
            clock: ManualClock::new(0),
        }
    }

    /// Options with the test clock and a lease of `lease_ms`.
    pub fn options(&self, lease_ms: u64) -> StoreOptions {
        StoreOptions::default()
            .lease(Duration::from_millis(lease_ms))
            .clock(Arc::new(self.clock.clone()))
    }

    /// A fresh handle of its own (own pool, own group-commit queue) on the file.
    pub fn handle(&self, lease_ms: u64) -> Store {
        Store::open(&self.path, self.options(lease_ms)).expect("open store")
    }
}

/// The engine a conformance test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in a temporary directory.
    Sqlite,
    /// A fresh database on the test binary's PostgreSQL server (`pg::server`).
    Postgres,
    /// The same, reached through PgBouncer in transaction pooling mode
    /// (`pgbouncer::pooler`).
    PgBouncer,
}

/// A database of one engine for one test, with the test's manual clock. The
/// same body runs on both: only the location differs.
pub struct TestDb {
    pub backend: Backend,
    /// What `Store::open` is given: a file path, or a `postgres://` URL.
    pub location: String,
    pub clock: ManualClock,
    /// Holds the SQLite file (and is empty for PostgreSQL); removed on drop.
    pub dir: tempfile::TempDir,
}

impl TestDb {
    pub fn new(backend: Backend) -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let location = match backend {
            Backend::Sqlite => dir.path().join("leasehold.db").display().to_string(),
            Backend::Postgres => pg::server().fresh_database(),
            Backend::PgBouncer => pgbouncer::pooler().fresh_database(),
        };
        TestDb {
            backend,
            location,
            clock: ManualClock::new(0),
            dir,
        }
    }

    /// Options with the test clock and a lease of `lease_ms`. No clock skew
    /// is allowed on PostgreSQL: the test's one manual clock is read in
    /// order, so both engines must judge leases exactly alike.
    pub fn options(&self, lease_ms: u64) -> StoreOptions {
        StoreOptions::default()
            .lease(Duration::from_millis(lease_ms))
            .clock(Arc::new(self.clock.clone()))
            .clock_skew(Duration::ZERO)
    }

    /// A fresh handle of its own (own pool) on the database.
    pub fn handle(&self, lease_ms: u64) -> Store {
        self.open(self.options(lease_ms))
    }

    /// A handle with `opts`.
    pub fn open(&self, opts: StoreOptions) -> Store {
        Store::open(&self.location, opts).expect("open store")
    }
}

/// Run each named test body, a `fn(Backend)`, as three tests: `sqlite::NAME`,
/// `postgres::NAME` and `pgbouncer::NAME` (PostgreSQL behind a pooler in
/// transaction mode).
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $name() {
                super::$name($crate::common::Backend::Sqlite)
            })*
        }
        mod postgres {
            $(#[test]
            fn $name() {
                super::$name($crate::common::Backend::Postgres)
            })*
        }
        mod pgbouncer {
            $(#[test]
            fn $name() {
                super::$name($crate::common::Backend::PgBouncer)
            })*
        }
    };
}

/// The full name the test harness gives test `name` of module `module`
/// (pass `module_path!()`): a test binary made of modules names each test by
/// its path below the crate, and a child process re-running the binary for
/// one test (`--exact`) must use that name.
pub fn this_test(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_binary, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// The built `leasehold` binary. Cargo names it only for the tests of the
/// crate that builds it (`crates/cli`); the engine's own tests never run it.
pub const BIN: &str = match option_env!("CARGO_BIN_EXE_leasehold") {
    Some(bin) => bin,
    None => "leasehold (built only for crates/cli's tests)",
};

/// The top of the repository: the workspace, whichever crate's tests run.
pub fn workspace() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("schema.sql").is_file())
        .expect("the workspace holds schema.sql")
        .to_path_buf()
}

/// The sample corpus that ships in the repository.
pub fn samples() -> PathBuf {
    workspace().join("samples")
}

/// A copy of the tree `from` (folders and files) at `to`.
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Each sample file and the phrase its extracted text must contain.
pub const SAMPLE_PHRASES: [(&str, &str); 16] = [
    ("notes.txt", "amber lighthouse"),
    ("guide.md", "copper kettle"),
    ("page.html", "velvet harbor"),
    ("report.pdf", "granite orchard"),
    ("letter.docx", "silver meadow"),
    ("nested/more.md", "quiet lantern"),
    ("formats/notes.odt", "cobalt heron"),
    ("formats/inventory.ods", "juniper anvil"),
    ("formats/slides.odp", "marble falcon"),
    ("formats/book.epub", "indigo compass"),
    ("formats/memo.rtf", "crimson tundra"),
    ("formats/ledger.xlsx", "walnut glacier"),
    ("formats/deck.pptx", "ivory pelican"),
    ("formats/weekly-report.hwp", "주간업무보고서"),
    ("formats/draft-form.hwpx", "생산등록번호"),
    ("formats/fable.eml", "Hasen klagten"),
];

/// The binary on the data directory `data`, for a caller to add its
/// arguments and environment to (the runners of the test files build on it).
pub fn leasehold_command(data: &std::path::Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("--data").arg(data);
    cmd
}

/// Run the binary on the data directory `data`.
pub fn leasehold(data: &std::path::Path, args: &[&str]) -> std::process::Output {
    leasehold_command(data)
        .args(args)
        .output()
        .expect("run leasehold")
}

/// `leasehold run DOCS --json EXTRA...` on `data`, and the run's JSON
/// summary (the run must succeed).
pub fn run_json(data: &std::path::Path, docs: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["run", docs.to_str().expect("a UTF-8 path"), "--json"];
    args.extend_from_slice(extra);
    output::json(leasehold(data, &args))
}

/// `leasehold run DOCS --json` on `data` with `PATH` only `path` (the tools a
/// test lends it, or none at all), and the run's JSON summary.
pub fn run_with_path(
    data: &std::path::Path,
    docs: &std::path::Path,
    path: &std::path::Path,
) -> serde_json::Value {
    let run = leasehold_command(data)
        .args(["run", docs.to_str().expect("a UTF-8 path"), "--json"])
        .env("PATH", path)
        .output()
        .expect("run leasehold");
    output::json(run)
}

/// The file `program` in the first of `PATH`'s directories that has it.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|file| file.is_file())
}

/// Overwrite the first 2,000 bytes (header and cell pointers) of one b-tree
/// leaf page of `table` in the SQLite file at `db`, found through `dbstat`
/// after a checkpoint: page-level damage, which SQLite reports as a corrupt
/// database when the page is read.
pub fn damage_a_page(db: &std::path::Path, table: &str) {
    let (page, size) = {
        let c = rusqlite::Connection::open(db).unwrap();
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        let page: i64 = c
            .query_row(
                "SELECT pageno FROM dbstat WHERE name = ?1 AND pagetype = 'leaf' ORDER BY pageno LIMIT 1",
                [table],
                |r| r.get(0),
            )
            .unwrap();
        (page as u64, size as u64)
    };
    assert!(page > 1);
    let mut rng = fastrand::Rng::with_seed(page);
    let junk: Vec<u8> = (0..2000).map(|_| rng.u8(..)).collect();
    use std::io::{Seek, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(db).unwrap();
    f.seek(std::io::SeekFrom::Start((page - 1) * size)).unwrap();
    f.write_all(&junk).unwrap();
    f.sync_all().unwrap();
}

/// `n` spelled in letters (`a`..`z`, least significant first) onto `out`:
/// the tests' distinct words, which FTS5 must keep apart.
pub fn push_spelled(out: &mut String, n: u64) {
    let mut k = n;
    loop {
        out.push(char::from(b'a' + (k % 26) as u8));
        k /= 26;
        if k == 0 {
            break;
        }
    }
}

/// Send `sig` to process `pid`, one the test started (a worker, or a
/// worker's child).
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a process the test started.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// How many documents of the data directory `data` are in `status`, read
/// from its SQLite file.
pub fn count_status(data: &std::path::Path, status: &str) -> i64 {
    let c = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    c.query_row("SELECT count(*) FROM jobs WHERE status = ?1", [status], |r| {
        r.get(0)
    })
    .unwrap()
}
