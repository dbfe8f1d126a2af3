//! A throwaway PostgreSQL cluster for the tests of the PostgreSQL edition.
//!
//! [`server`] starts one cluster per test binary, the first time a test asks
//! for it, in a temporary directory: `initdb`, then `pg_ctl start` on
//! 127.0.0.1 at a free port, with its Unix socket in the same directory.
//! Each test takes [`PgServer::fresh_database`], an empty database of its
//! own, so tests share the server but never see each other's rows.
//!
//! PostgreSQL refuses to run as root; a root test process runs `initdb` and
//! `pg_ctl` as an unprivileged user (`postgres` when the distribution's
//! package made it, else `leasehold-pg`, created as a system user), and the
//! directory is theirs.
//!
//! Nothing outlives the test process: an `atexit` hook stops the server and
//! removes the directory when the process exits, and a watchdog process
//! (a shell reading a pipe only this process writes to) does the same if the
//! process dies without running it (a signal, `kill -9`).
//!
//! `LEASEHOLD_TEST_PG=postgres://user@host:port/db` uses that server instead
//! (its user must be able to create databases; the databases are left
//! there). [`PgServer::restart_immediate`] needs a cluster of our own.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The environment variable naming a server to use instead of our own.
pub const SERVER_ENV: &str = "LEASEHOLD_TEST_PG";

/// The superuser of our cluster, trusted on 127.0.0.1 without a password.
/// Every other role must give its password (see [`PgServer::create_role`]).
pub const SUPERUSER: &str = "leasehold";

/// Tries at starting on a free port (another process may take the port
/// between our look and the server's bind).
const START_TRIES: u32 = 5;

static SERVER: OnceLock<PgServer> = OnceLock::new();

/// The server of this test binary, started on first use.
pub fn server() -> &'static PgServer {
    SERVER.get_or_init(PgServer::start)
}

/// A cluster of the caller's own, stopped and removed when dropped: for a
/// test that crashes its server ([`PgServer::restart_immediate`]), which on
/// the shared [`server`] would cut off every test running beside it in the
/// same binary.
pub fn private_server() -> PgServer {
    let bin = find_bin_dir().unwrap_or_else(|| {
        panic!("no initdb/pg_ctl/postgres on PATH or under /usr/lib/postgresql/*/bin: install PostgreSQL (apt-get install postgresql) or set {SERVER_ENV}")
    });
    let run_as = is_root().then(unprivileged_user);
    let (cluster, port) = Cluster::create_with(bin, run_as, None);
    PgServer {
        url: format!("postgres://{SUPERUSER}@127.0.0.1:{port}/postgres"),
        cluster: Some(cluster),
    }
}

/// A cluster of the caller's own that speaks TLS: `server.crt`, `server.key`
/// and `ca.crt` from `certs` (PEM) are its certificate, its key and the
/// authority it trusts for client certificates. The superuser is trusted on
/// 127.0.0.1 with and without TLS; the role `cert_role` may log in over TLS
/// only, by a client certificate that authority signed for its name.
pub fn private_tls_server(certs: &Path, cert_role: &str) -> PgServer {
    let bin = find_bin_dir().unwrap_or_else(|| {
        panic!("no initdb/pg_ctl/postgres on PATH or under /usr/lib/postgresql/*/bin: install PostgreSQL (apt-get install postgresql) or set {SERVER_ENV}")
    });
    let run_as = is_root().then(unprivileged_user);
    let tls = Tls {
        certs: certs.to_path_buf(),
        cert_role: cert_role.to_owned(),
    };
    let (cluster, port) = Cluster::create_with(bin, run_as, Some(&tls));
    PgServer {
        url: format!("postgres://{SUPERUSER}@127.0.0.1:{port}/postgres"),
        cluster: Some(cluster),
    }
}

/// What [`private_tls_server`] sets its cluster up with.
struct Tls {
    certs: PathBuf,
    cert_role: String,
}

/// A PostgreSQL server the tests connect to.
pub struct PgServer {
    /// A superuser's URL on the `postgres` database.
    url: String,
    /// Our own cluster; `None` for a server named by [`SERVER_ENV`].
    cluster: Option<Cluster>,
}

/// A cluster this process started.
struct Cluster {
    /// The directory of `initdb`, `pg_ctl` and `postgres`.
    bin: PathBuf,
    /// The temporary directory holding everything below; removed at exit.
    root: PathBuf,
    data: PathBuf,
    log: PathBuf,
    /// Whom `initdb` and `pg_ctl` run as: `None` unless we are root.
    run_as: Option<UnixUser>,
    /// Held open for the life of the process: the watchdog stops the server
    /// when it reads the end of this pipe.
    _watchdog: (Child, ChildStdin),
}

#[derive(Clone, Copy)]
pub(super) struct UnixUser {
    pub(super) uid: u32,
    pub(super) gid: u32,
}

impl PgServer {
    fn start() -> PgServer {
        if let Some(url) = std::env::var(SERVER_ENV).ok().filter(|u| !u.is_empty()) {
            return PgServer { url, cluster: None };
        }
        let server = private_server();
        register_exit_hook();
        server
    }

    /// A superuser's URL on the `postgres` database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A connection as the superuser to the `postgres` database.
    pub fn admin(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to the test server {}: {e}", self.url))
    }

    /// A new, empty database; returns its URL (the superuser's).
    pub fn fresh_database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "lh_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.admin()
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        with_database(&self.url, &name)
    }

    /// A login role that must give `password` on 127.0.0.1 (our cluster asks
    /// every role but the superuser for one); returns its name.
    pub fn create_role(&self, password: &str) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "lh_role_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let quoted = password.replace('\'', "''");
        self.admin()
            .batch_execute(&format!("CREATE ROLE {name} LOGIN PASSWORD '{quoted}'"))
            .unwrap_or_else(|e| panic!("create role {name}: {e}"));
        name
    }

    /// The temporary directory of our cluster (`None` for [`SERVER_ENV`]'s server).
    pub fn cluster_dir(&self) -> Option<&Path> {
        self.cluster.as_ref().map(|c| c.root.as_path())
    }

    /// The port our cluster listens on, from the URL.
    pub fn port(&self) -> u16 {
        let after_host = self
            .url
            .rsplit_once(':')
            .map(|(_, rest)| rest)
            .unwrap_or_default();
        let digits: String = after_host.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().expect("the test server's URL has a port")
    }

    /// Crash the server (`pg_ctl stop -m immediate`: no shutdown checkpoint,
    /// every connection cut) and start it again on the same port; returns when
    /// it accepts connections. Every test using this server sees the
    /// restart, so a test that restarts uses a [`private_server`].
    pub fn restart_immediate(&self) {
        let cluster = self
            .cluster
            .as_ref()
            .unwrap_or_else(|| panic!("restart_immediate needs our own cluster, not {SERVER_ENV}"));
        cluster.stop_immediate();
        cluster
            .pg_ctl_start()
            .unwrap_or_else(|log| panic!("restart: {log}"));
    }
}

impl Drop for PgServer {
    /// A [`private_server`]'s cluster goes with it (the shared one is a
    /// static, stopped at exit instead).
    fn drop(&mut self) {
        if let Some(cluster) = &self.cluster {
            cluster.stop_and_remove();
        }
    }
}

impl Cluster {
    /// `initdb` into a new temporary directory, configure, start; returns the
    /// cluster and its port.
    fn create_with(bin: PathBuf, run_as: Option<UnixUser>, tls: Option<&Tls>) -> (Cluster, u16) {
        let root = tempfile::Builder::new()
            .prefix("leasehold-pg-")
            .tempdir()
            .expect("temp dir for the test cluster")
            .keep();
        if let Some(user) = run_as {
            std::os::unix::fs::chown(&root, Some(user.uid), Some(user.gid))
                .expect("chown the cluster directory");
        }
        let data = root.join("data");
        let log = root.join("server.log");
        // The watchdog first, so a failure below still leaves nothing behind.
        let watchdog = spawn_watchdog(&bin, &data, &root, run_as);
        let cluster = Cluster {
            bin,
            root,
            data,
            log,
            run_as,
            _watchdog: watchdog,
        };
        cluster.initdb();
        cluster.configure();
        if let Some(tls) = tls {
            cluster.configure_tls(tls);
        }
        let port = cluster.start_on_free_port();
        (cluster, port)
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        as_user(&mut cmd, self.run_as);
        // Root's home or the caller's directory may be closed to the user.
        cmd.current_dir(&self.root);
        cmd
    }

    fn initdb(&self) {
        let out = self
            .command("initdb")
            .arg("-D")
            .arg(&self.data)
            .args(["-U", SUPERUSER, "--auth=trust", "--encoding=UTF8", "--locale=C"])
            // The cluster is thrown away: no need to wait for its files to reach the disk.
            .arg("--no-sync")
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The superuser is trusted on 127.0.0.1 (so its URL needs no password);
    /// every other role must give its password, so a test can see a wrong one
    /// refused. Unix-socket connections are trusted.
    fn configure(&self) {
        let hba = format!(
            "local all all trust\n\
             host all {SUPERUSER} 127.0.0.1/32 trust\n\
             host all all 127.0.0.1/32 scram-sha-256\n"
        );
        std::fs::write(self.data.join("pg_hba.conf"), hba).expect("write pg_hba.conf");
        // max_connections: every Store handle pools its own connections,
        // and the race tests open many handles at once.
        // fsync=off: the cluster lives for one test process and is removed
        // after it. It only matters if the machine itself crashes; a server
        // crash (restart_immediate) still finds every committed change in the
        // operating system's page cache, so crash-recovery tests stay honest.
        let conf = format!(
            "\n# leasehold tests\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nfsync = off\nmax_connections = 300\n",
            self.root.display()
        );
        append(&self.data.join("postgresql.conf"), &conf);
    }

    /// TLS on: the certificate, key and client authority copied into the
    /// data directory (the key readable by the server's user alone, as it
    /// demands), and the certificate role's `hostssl ... cert` line first.
    fn configure_tls(&self, tls: &Tls) {
        for name in ["server.crt", "server.key", "ca.crt"] {
            let to = self.data.join(name);
            std::fs::copy(tls.certs.join(name), &to).unwrap_or_else(|e| panic!("copy {name}: {e}"));
            std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("chmod a TLS file");
            if let Some(user) = self.run_as {
                std::os::unix::fs::chown(&to, Some(user.uid), Some(user.gid)).expect("chown a TLS file");
            }
        }
        append(
            &self.data.join("postgresql.conf"),
            "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\nssl_ca_file = 'ca.crt'\n",
        );
        let hba = std::fs::read_to_string(self.data.join("pg_hba.conf")).expect("read pg_hba.conf");
        let cert_line = format!("hostssl all {} 127.0.0.1/32 cert\n", tls.cert_role);
        std::fs::write(self.data.join("pg_hba.conf"), cert_line + &hba).expect("write pg_hba.conf");
    }

    fn start_on_free_port(&self) -> u16 {
        let mut last_log = String::new();
        for _ in 0..START_TRIES {
            let port = free_port();
            // The last `port` line of the file wins.
            append(&self.data.join("postgresql.conf"), &format!("port = {port}\n"));
            match self.pg_ctl_start() {
                Ok(()) => return port,
                Err(log) => last_log = log,
            }
        }
        panic!("the test cluster did not start in {START_TRIES} tries: {last_log}");
    }

    /// `pg_ctl start`, waiting until the server accepts connections; the
    /// server log's tail on failure.
    fn pg_ctl_start(&self) -> Result<(), String> {
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .args(["-w", "-t", "60", "start"])
            .output()
            .map_err(|e| format!("run pg_ctl: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(10).collect();
        Err(format!(
            "{}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    }

    /// `pg_ctl stop -m immediate`, waiting until the server is gone.
    fn stop_immediate(&self) {
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "-t", "60", "stop"])
            .output()
            .expect("run pg_ctl stop");
        assert!(
            out.status.success(),
            "pg_ctl stop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// At exit: stop the server if it runs, and remove the directory.
    fn stop_and_remove(&self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "-t", "60", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A shell, in a process group of its own (a terminal's Ctrl-C must not end
/// it before it has cleaned up), that waits for the end of its standard
/// input, then stops the server and removes the directory. Only this process
/// holds the pipe's other end (Rust opens pipes close-on-exec), so the end
/// comes when this process is gone, however it went.
fn spawn_watchdog(bin: &Path, data: &Path, root: &Path, run_as: Option<UnixUser>) -> (Child, ChildStdin) {
    let script = r#"trap '' INT TERM HUP QUIT
read -r _
"$0" -D "$1" -m immediate -w -t 60 stop >/dev/null 2>&1
rm -rf "$2""#;
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .arg(bin.join("pg_ctl"))
        .arg(data)
        .arg(root)
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    // The user owns the directory (and everything the server writes), so it
    // may remove it; `pg_ctl` refuses to run as root.
    as_user(&mut cmd, run_as);
    let mut child = cmd.spawn().expect("start the test cluster's watchdog");
    let stdin = child.stdin.take().expect("the watchdog's stdin is piped");
    (child, stdin)
}

pub(super) fn as_user(cmd: &mut Command, user: Option<UnixUser>) {
    if let Some(user) = user {
        // Setting the uid from root also drops root's supplementary groups.
        cmd.uid(user.uid).gid(user.gid);
    }
}

/// The stop at a normal exit, run by libc's `exit` after the tests: the
/// server is gone before `cargo test` moves on.
fn register_exit_hook() {
    extern "C" fn stop_at_exit() {
        let _ = std::panic::catch_unwind(|| {
            if let Some(cluster) = SERVER.get().and_then(|s| s.cluster.as_ref()) {
                cluster.stop_and_remove();
            }
        });
    }
    // SAFETY: registers a plain function with no arguments; it catches panics.
    let rc = unsafe { libc::atexit(stop_at_exit) };
    assert_eq!(rc, 0, "atexit");
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`: the first on
/// PATH, else the highest version under /usr/lib/postgresql (Debian keeps
/// them off PATH).
pub fn find_bin_dir() -> Option<PathBuf> {
    let has_all = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|p| dir.join(p).is_file())
    };
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    if let Some(dir) = on_path.into_iter().find(|d| has_all(d)) {
        return Some(dir);
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version: Option<Vec<u32>> = name.split('.').map(|n| n.parse().ok()).collect();
            Some((version?, e.path().join("bin")))
        })
        .filter(|(_, bin)| has_all(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

pub(super) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() == 0 }
}

/// The distribution's `postgres` user if there is one, else `leasehold-pg`,
/// created as a system user if missing (under a file lock: test binaries may
/// start together, and `useradd` refuses to run while another holds
/// /etc/passwd).
pub(super) fn unprivileged_user() -> UnixUser {
    for name in ["postgres", "leasehold-pg"] {
        if let Some(user) = lookup_user(name) {
            return user;
        }
    }
    let lock_path = std::env::temp_dir().join("leasehold-pg-useradd.lock");
    let lock = std::fs::File::create(&lock_path).expect("useradd lock file");
    fs2::FileExt::lock_exclusive(&lock).expect("lock useradd");
    if let Some(user) = lookup_user("leasehold-pg") {
        return user;
    }
    let status = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "leasehold-pg",
        ])
        .status()
        .expect("run useradd");
    assert!(status.success(), "useradd leasehold-pg failed");
    lookup_user("leasehold-pg").expect("leasehold-pg exists after useradd")
}

fn lookup_user(name: &str) -> Option<UnixUser> {
    let name = CString::new(name).ok()?;
    // SAFETY: getpwnam returns null or a pointer to a static record, read at
    // once; only the one thread starting the cluster calls it.
    unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        (!pw.is_null()).then(|| UnixUser {
            uid: (*pw).pw_uid,
            gid: (*pw).pw_gid,
        })
    }
}

/// A port nobody listens on now (the kernel's pick for an ephemeral bind).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

fn append(path: &Path, text: &str) {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    file.write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// `url` with its database replaced by `name` (query parameters kept).
pub fn with_database(url: &str, name: &str) -> String {
    let scheme_end = url.find("://").map(|i| i + 3).unwrap_or(0);
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let after = &rest[authority_end..];
    let query = after.find('?').map(|i| &after[i..]).unwrap_or("");
    format!("{}{}/{name}{query}", &url[..scheme_end], &rest[..authority_end])
}
