//! The test cluster itself (tests/common/pg.rs): its immediate restart, which
//! the reconnect tests build on, and that nothing of it outlives the test
//! process. The restart crashes a private cluster: the shared one serves the
//! tests running beside it.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::pg;
use leasehold::store::pg_schema_version as schema_version;
use leasehold::StoreOptions;

#[test]
fn after_an_immediate_restart_the_pool_hands_out_working_connections() {
    let server = pg::private_server();
    let url = server.fresh_database();
    let store = leasehold::Store::open(&url, StoreOptions::default().pool_size(2)).expect("open");
    assert_eq!(store.applied_version().unwrap(), schema_version());
    let mut held = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    held.query_one("SELECT 1", &[]).unwrap();

    server.restart_immediate();

    // The server really went down: the connection held across it is cut.
    assert!(
        held.query_one("SELECT 1", &[]).is_err(),
        "a connection survived the restart"
    );
    // What was committed before the crash is there; pooled connections that
    // the restart broke are replaced when they are handed out.
    assert_eq!(store.applied_version().unwrap(), schema_version());
}

/// Set for the child process.
const CHILD_ENV: &str = "LEASEHOLD_PG_CLUSTER_CHILD";

/// A child test process that starts a cluster, says where it is, then waits
/// on standard input: it ends normally when the parent closes it (once the
/// parent has seen the cluster run), or is killed.
#[test]
#[ignore = "run as a child process by the cleanup tests"]
fn cluster_child_process() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let server = pg::server();
    let dir = server.cluster_dir().expect("a cluster of our own");
    println!("cluster {} {}", server.port(), dir.display());
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Start the child; returns it, waiting, with its cluster's port and
/// directory.
fn start_child() -> (Child, u16, PathBuf) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            common::this_test(module_path!(), "cluster_child_process").as_str(),
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .env_remove(pg::SERVER_ENV)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child test process");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let line = (&mut stdout)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("cluster "))
        .expect("the child names its cluster");
    // Read the rest, so the child's last lines never meet a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let mut words = line.split_whitespace().skip(1);
    let port = words.next().unwrap().parse().unwrap();
    let dir = PathBuf::from(words.next().unwrap());
    assert!(dir.exists() && listening(port), "the child's cluster runs");
    (child, port, dir)
}

fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

fn gone(port: u16, dir: &Path) -> bool {
    !dir.exists() && !listening(port)
}

#[test]
fn the_cluster_is_gone_when_its_test_process_has_exited() {
    let (mut child, port, dir) = start_child();
    // Its standard input closed, the child returns and its process exits.
    // (Exiting on its own, it could stop the cluster before this process
    // saw it run.)
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    // Stopped by the exit hook before the process ended, not some time later.
    assert!(
        gone(port, &dir),
        "server on {port} or {} left after exit",
        dir.display()
    );
}

#[test]
fn the_cluster_is_gone_when_its_test_process_is_killed() {
    let (mut child, port, dir) = start_child();
    child.kill().unwrap();
    child.wait().unwrap();
    // The watchdog notices the end of its pipe and stops the server; it runs
    // on its own, so wait for it, with a bound (well under the quarter of a
    // minute a server takes to end by itself once its directory is gone).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(port, &dir) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        gone(port, &dir),
        "server on {port} or {} left after kill -9",
        dir.display()
    );
}
