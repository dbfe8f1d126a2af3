//! Private text stays private on a shared machine (issue 11, point 6): the data
//! directory is 0700 and every file leasehold creates 0600 whatever the umask,
//! and a delivered outbox row's text does not stay behind in free pages.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common;

use common::{samples, TempStore, BIN};
use leasehold::store::Drain;
use leasehold::NewDoc;

/// Every directory and file under `root` (and `root` itself) with a mode that
/// lets anyone but the owner in.
fn too_open(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(path) = todo.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        let want = if meta.is_dir() { 0o700 } else { 0o600 };
        if mode != want {
            bad.push(format!("{} is {mode:o}, not {want:o}", path.display()));
        }
        if meta.is_dir() {
            todo.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    bad
}

/// `leasehold --data DATA ARGS` under `umask 000`, which must succeed.
fn run_with_open_umask(data: &Path, args: &[&std::ffi::OsStr]) {
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 000 && exec \"$0\" \"$@\"")
        .arg(BIN)
        .arg("--data")
        .arg(data)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_data_directory_and_every_file_in_it_are_owner_only_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let corpus = samples();
    run_with_open_umask(&data, &["run".as_ref(), corpus.as_os_str()]);
    // A second process while the first's files exist, as in a shared data dir.
    run_with_open_umask(&data, &["work".as_ref(), "--until-empty".as_ref()]);
    let bad = too_open(&data);
    assert!(bad.is_empty(), "readable by others:\n{}", bad.join("\n"));
}

/// The distinctive text of the delivered result: never stored anywhere else.
const MARKER: &str = "zanzibar-quokka-7781-private";

fn contains(path: &Path, needle: &[u8]) -> bool {
    match std::fs::read(path) {
        Ok(bytes) => bytes.windows(needle.len()).any(|w| w == needle),
        Err(_) => false,
    }
}

#[test]
fn a_delivered_result_leaves_no_text_in_the_database_file() {
    let t = TempStore::new();
    {
        let store = t.handle(30_000);
        store.enqueue(&NewDoc::new("secret.txt", "v1")).unwrap();
        let claim = store.claim("w").unwrap().unwrap();
        // Big enough for overflow pages, which go to the free list when deleted.
        let text = format!("{MARKER} ").repeat(2_000);
        let done = leasehold::Completion::new("000/001/1/g000001.txt", "00").deliver(&text);
        assert_eq!(store.complete(claim, done).unwrap(), leasehold::Fenced::Accepted);
        store.checkpoint().unwrap();
        assert!(
            contains(&t.path, MARKER.as_bytes()),
            "the outbox row was not written out"
        );
        let Drain::Send(batch) = store
            .outbox()
            .claim(10, Duration::from_secs(30), Duration::ZERO)
            .unwrap()
        else {
            panic!("nothing to deliver");
        };
        assert_eq!(store.outbox().delivered(&batch).unwrap(), 1);
        store.checkpoint().unwrap();
    }
    let [wal, shm] = ["-wal", "-shm"].map(|s| {
        let mut p = t.path.clone().into_os_string();
        p.push(s);
        std::path::PathBuf::from(p)
    });
    // The last connection closed before the drop returned (the store waits
    // for the pool's connections, `store/sqlite/pool.rs`): the WAL, its old
    // frames holding the text, was checkpointed into the file and deleted.
    assert!(!wal.exists(), "{} outlived the last handle", wal.display());
    let files = [t.path.clone(), wal, shm];
    for f in files {
        assert!(
            !contains(&f, MARKER.as_bytes()),
            "{} still holds the delivered text",
            f.display()
        );
    }
}
