//! PgBouncer in transaction pooling mode in front of the test binary's
//! PostgreSQL server, for the conformance tests' third backend
//! ([`super::Backend::PgBouncer`]).
//!
//! [`pooler`] starts one per test binary on first use, from the
//! distribution's package (`apt-get install pgbouncer`; `.ci/run` installs
//! it): every database name is passed through to the server
//! (`* = host=… port=…`), the superuser is trusted as on the server, and a
//! server session serves one transaction at a time. Pools are small and
//! idle sessions close after a few seconds, so the many fresh databases of a
//! test run stay within the server's connection limit.
//!
//! PgBouncer refuses to run as root: a root test process runs it as the
//! cluster's unprivileged user. A shell between us and it (as for the
//! cluster, `pg.rs`) stops it when this process ends, however it ends.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::pg::{self, SUPERUSER};

/// Longest PgBouncer may take to listen.
const START_WAIT: Duration = Duration::from_secs(20);

static POOLER: OnceLock<Pooler> = OnceLock::new();

/// The pooler of this test binary, started on first use (with the server).
pub fn pooler() -> &'static Pooler {
    POOLER.get_or_init(|| Pooler::start("transaction", 8))
}

/// A pooler of the caller's own in `pool_mode` (`session`, `transaction`
/// or `statement`), stopped when dropped.
pub fn private_pooler(pool_mode: &str) -> Pooler {
    Pooler::start(pool_mode, 8)
}

/// [`private_pooler`] with `sessions` server sessions per database.
pub fn private_pooler_of(pool_mode: &str, sessions: u32) -> Pooler {
    Pooler::start(pool_mode, sessions)
}

/// A running PgBouncer.
pub struct Pooler {
    port: u16,
    /// Removed when the process exits (by the shell below, or left to the
    /// system's temporary directory cleaning after a `kill -9`).
    _dir: PathBuf,
    /// Held open for the life of the process: the shell stops PgBouncer
    /// when it reads the end of this pipe.
    _watch: (Child, ChildStdin),
}

impl Pooler {
    fn start(pool_mode: &str, sessions: u32) -> Pooler {
        let server = pg::server();
        let bin = find_pgbouncer().unwrap_or_else(|| {
            panic!("no pgbouncer on PATH or in /usr/sbin: install it (apt-get install pgbouncer)")
        });
        let run_as = pg::is_root().then(pg::unprivileged_user);
        let dir = tempfile::Builder::new()
            .prefix("leasehold-pgbouncer-")
            .tempdir()
            .expect("temp dir for PgBouncer")
            .keep();
        let port = pg::free_port();
        let config = dir.join("pgbouncer.ini");
        let users = dir.join("users.txt");
        std::fs::write(&users, format!("\"{SUPERUSER}\" \"\"\n")).expect("write PgBouncer's users");
        std::fs::write(&config, settings(server.port(), port, &dir, pool_mode, sessions))
            .expect("write pgbouncer.ini");
        if let Some(user) = run_as {
            for path in [&dir, &config, &users] {
                std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
                    .expect("chown PgBouncer's files");
            }
        }
        let watch = spawn(&bin, &config, &dir, run_as);
        wait_for(port, &dir);
        Pooler {
            port,
            _dir: dir,
            _watch: watch,
        }
    }

    /// A new, empty database on the server; its URL through the pooler.
    pub fn fresh_database(&self) -> String {
        let direct = pg::server().fresh_database();
        let name = direct
            .rsplit('/')
            .next()
            .expect("a database URL ends with its name");
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{name}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// A database's URL through the pooler ([`Pooler::fresh_database`]) as the
/// server's own: for a test's checks, which must not depend on the pooler.
pub fn direct_url(pooled: &str) -> String {
    let name = pooled
        .rsplit('/')
        .next()
        .expect("a database URL ends with its name");
    pg::with_database(pg::server().url(), name)
}

/// `pgbouncer.ini`: every database to the server at `server_port`, in
/// `pool_mode`, listening on `port`.
fn settings(server_port: u16, port: u16, dir: &std::path::Path, pool_mode: &str, sessions: u32) -> String {
    format!(
        "[databases]\n\
         * = host=127.0.0.1 port={server_port}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {users}\n\
         pool_mode = {pool_mode}\n\
         max_client_conn = 2000\n\
         default_pool_size = {sessions}\n\
         max_user_connections = 60\n\
         server_idle_timeout = 5\n\
         logfile = {log}\n",
        users = dir.join("users.txt").display(),
        log = dir.join("pgbouncer.log").display(),
    )
}

/// PATH, else Debian's `/usr/sbin` (not on a plain user's PATH).
fn find_pgbouncer() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("pgbouncer"))
        .find(|bin| bin.is_file())
}

/// A shell in a process group of its own that starts PgBouncer, waits for
/// the end of its standard input (only this process holds the pipe), then
/// stops it and removes its directory.
fn spawn(
    bin: &std::path::Path,
    config: &std::path::Path,
    dir: &std::path::Path,
    run_as: Option<pg::UnixUser>,
) -> (Child, ChildStdin) {
    let script = r#"trap '' INT TERM HUP QUIT
"$0" "$1" >/dev/null 2>&1 &
pid=$!
read -r _
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$2""#;
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .arg(bin)
        .arg(config)
        .arg(dir)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    pg::as_user(&mut cmd, run_as);
    let mut child = cmd.spawn().expect("start PgBouncer");
    let stdin = child.stdin.take().expect("the shell's stdin is piped");
    (child, stdin)
}

/// Wait until PgBouncer accepts connections on `port`; its log's tail if it
/// never does.
fn wait_for(port: u16, dir: &std::path::Path) {
    let started = Instant::now();
    while started.elapsed() < START_WAIT {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default();
    let mut out = std::io::stderr();
    let _ = writeln!(out, "{log}");
    panic!("PgBouncer did not listen on port {port} within {START_WAIT:?}");
}
