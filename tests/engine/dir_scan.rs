//! A directory scan reads the store beside its walk (`src/source/dir.rs`,
//! `src/source/dir/known.rs`), on a real tree and a real database, SQLite and
//! PostgreSQL (each body runs on both: `sqlite::NAME`, `postgres::NAME`):
//! - the walk yields files in the byte order of their keys, which is the
//!   order the store is read in on both engines (PostgreSQL's collation
//!   would sort `a-b` after `a.txt` and `B` beside `b`);
//! - a rescan of an unchanged tree commits nothing (SQLite, where a commit is
//!   seen through `PRAGMA data_version`);
//! - the files that vanished are found wherever they sort, across batches,
//!   among names that are not UTF-8, and nothing present is taken for gone;
//! - a document recorded again meanwhile (another fingerprint) is not marked
//!   gone by a walk that passed its key while the file was away.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{Backend, TestDb};
use leasehold::source::DirSource;
use leasehold::{NewDoc, Store, Vanished};

const LIMIT: u64 = 1 << 20;

fn store(t: &TestDb) -> Store {
    t.open(t.options(60_000).checkpoint_every(None))
}

fn write(root: &Path, rel: &str, body: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

/// The keys of the documents not gone, as the store lists them.
fn present(store: &Store) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut after = None;
    loop {
        let page = store.sources_after(after.as_deref(), 100).unwrap();
        let Some((last, _)) = page.last() else { return out };
        after = Some(last.clone());
        out.extend(page.into_iter().map(|(k, _)| k));
    }
}

/// Names chosen so that sorting by name and sorting by key differ (`a` is a
/// directory: `a-b` and `a.txt` sort before `a/…` as keys), and so that a
/// word-wise collation differs from bytes (`B` and `b`, `_x` and `x`).
const TRICKY: [&str; 9] = [
    "a/x.txt",
    "a-b.txt",
    "a.txt",
    "a/y/z.txt",
    "B.txt",
    "b.txt",
    "_x.txt",
    "x.txt",
    "a0.txt",
];

fn the_walk_and_the_store_agree_on_the_order_of_keys(b: Backend) {
    let t = TestDb::new(b);
    let root = t.dir.path().join("src");
    for rel in TRICKY {
        write(&root, rel, rel);
    }
    let store = store(&t);
    let src = DirSource::open(&root).unwrap();
    assert_eq!(src.discover(&store, LIMIT).unwrap().new, TRICKY.len());
    let read: Vec<String> = store
        .sources_after(None, 100)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let mut bytewise: Vec<String> = TRICKY.iter().map(|s| s.to_string()).collect();
    bytewise.sort();
    assert_eq!(read, bytewise, "the store reads keys in byte order");
    let again = src.discover(&store, LIMIT).unwrap();
    assert_eq!((again.new, again.changed, again.gone), (0, 0, 0), "{again:?}");
    assert_eq!(again.unchanged, TRICKY.len());
}

/// The walk runs ahead of the comparison on a thread of its own, a few
/// batches at most: when the store refuses the first batch's write, the scan
/// returns that error instead of waiting for a walk stuck on a full hand-over,
/// and records nothing. SQLite only: another connection holds its write
/// lock (the scan's logic is the engines' one).
#[test]
fn sqlite_only_a_scan_whose_write_is_refused_stops_its_walk_and_says_why() {
    let t = TestDb::new(Backend::Sqlite);
    let root = t.dir.path().join("src");
    // Ten batches of 1,000: more than the walk may hold ready (two wait
    // between the threads).
    for i in 0..10_000 {
        write(&root, &format!("d{}/f{i:04}.txt", i % 9), "words");
    }
    let mut opts = t.options(60_000).checkpoint_every(None);
    opts.busy_timeout = std::time::Duration::from_millis(20);
    let store = t.open(opts);
    let holder = rusqlite::Connection::open(&t.location).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (done, finished) = std::sync::mpsc::channel();
    let scan = std::thread::spawn(move || {
        let src = DirSource::open(&root).unwrap();
        let found = src.discover(&store, LIMIT);
        done.send(()).unwrap();
        (found.map(|d| d.new), present(&store).len())
    });
    // A generous bound on a scan of 10,000 small files: its end, not its time, is checked.
    finished
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the scan returned while its walk was ahead of it");
    let (found, present) = scan.join().unwrap();
    let err = found.expect_err("the write was refused");
    assert!(
        matches!(err, leasehold::Error::Busy { .. }),
        "the store's own error: {err}"
    );
    assert_eq!(present, 0, "nothing was recorded");
    holder.execute_batch("ROLLBACK").unwrap();
}

/// SQLite only: `PRAGMA data_version` is the observation (the scan's logic
/// is the engines' one).
#[test]
fn sqlite_only_a_rescan_of_an_unchanged_tree_commits_nothing() {
    let t = TestDb::new(Backend::Sqlite);
    let root = t.dir.path().join("src");
    for i in 0..50 {
        write(&root, &format!("d{}/f{i}.txt", i % 5), "words");
    }
    let store = store(&t);
    let src = DirSource::open(&root).unwrap();
    assert_eq!(src.discover(&store, LIMIT).unwrap().new, 50);
    // data_version changes on this connection when any other commits.
    let watcher = rusqlite::Connection::open(&t.location).unwrap();
    let version = || -> i64 {
        watcher
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .unwrap()
    };
    let before = version();
    let again = src.discover(&store, LIMIT).unwrap();
    assert_eq!(again.unchanged, 50, "{again:?}");
    assert_eq!(version(), before, "the rescan wrote to the database");
}

fn vanished_files_are_found_across_batches_and_nothing_present_is_gone(b: Backend) {
    let t = TestDb::new(b);
    let root = t.dir.path().join("src");
    // More files than one batch of the scan (1,000), in directories whose
    // names sort around each other's files.
    let mut all = Vec::new();
    for i in 0..2_500 {
        let rel = format!("{}/{:04}.txt", ["a", "a-", "a.b", "b"][i % 4], i);
        write(&root, &rel, &rel);
        all.push(rel);
    }
    #[cfg(unix)]
    let raw = {
        use std::os::unix::ffi::OsStrExt;
        let kept = root.join(std::ffi::OsStr::from_bytes(b"a/raw-\xff-kept.txt"));
        let lost = root.join(std::ffi::OsStr::from_bytes(b"b/raw-\xfe-lost.txt"));
        std::fs::write(&kept, "kept").unwrap();
        std::fs::write(&lost, "lost").unwrap();
        lost
    };
    let store = store(&t);
    let src = DirSource::open(&root).unwrap();
    src.discover(&store, LIMIT).unwrap();
    let mut removed = BTreeSet::new();
    for (i, rel) in all.iter().enumerate() {
        // The first and last keys, and a run in each batch.
        if i == 0 || i == all.len() - 1 || i % 97 == 0 {
            std::fs::remove_file(root.join(rel)).unwrap();
            removed.insert(rel.clone());
        }
    }
    #[cfg(unix)]
    std::fs::remove_file(&raw).unwrap();
    let before = present(&store);
    let again = src.discover(&store, LIMIT).unwrap();
    let expected_gone = removed.len() + usize::from(cfg!(unix));
    assert_eq!(again.gone, expected_gone, "{again:?}");
    let after = present(&store);
    let gone: BTreeSet<String> = before.difference(&after).cloned().collect();
    assert!(removed.is_subset(&gone), "every removed file is gone");
    assert_eq!(gone.len(), expected_gone, "only the removed ones: {gone:?}");
    let third = src.discover(&store, LIMIT).unwrap();
    assert_eq!((third.new, third.changed, third.gone), (0, 0, 0), "{third:?}");
}

fn a_document_recorded_again_meanwhile_is_not_taken_for_vanished(b: Backend) {
    let t = TestDb::new(b);
    let store = store(&t);
    store
        .enqueue(&NewDoc::new("kept", "v1").with_stat("10:1.0:"))
        .unwrap();
    store
        .enqueue(&NewDoc::new("gone", "v1").with_stat("10:1.0:"))
        .unwrap();
    // A walk read both at 10:1.0 and found neither; meanwhile `kept` came
    // back and was recorded with its new fingerprint.
    store
        .enqueue(&NewDoc::new("kept", "v2").with_stat("12:2.0:"))
        .unwrap();
    let vanished = ["kept", "gone"].map(|k| Vanished {
        key: k.into(),
        stat: "10:1.0:".into(),
    });
    assert_eq!(store.mark_vanished(&vanished).unwrap(), 1);
    assert_eq!(present(&store), BTreeSet::from(["kept".to_string()]));
}

/// Two folders in one store, one keyed relative and one by full path, each
/// past a page of the scan's reads (1,000 rows), the full-path keys sorting
/// among the relative ones: each rescan judges only its own folder's rows,
/// a removal is seen in its folder only, and `mark_folder_gone` takes one
/// folder out. On PostgreSQL this also holds its reads to byte order.
fn two_folders_each_judge_only_their_own_documents(b: Backend) {
    let t = TestDb::new(b);
    let (first, second) = (t.dir.path().join("first"), t.dir.path().join("second"));
    for i in 0..1100 {
        write(
            &first,
            &format!("{}{i:04}.txt", if i % 2 == 0 { "-" } else { "z" }),
            "one",
        );
        write(&second, &format!("d{}/f{i:04}.txt", i % 7), "two");
    }
    for rel in TRICKY {
        write(&first, rel, rel);
    }
    let store = store(&t);
    let relative = DirSource::open(&first).unwrap();
    let full = DirSource::open(&second).unwrap().keyed_by_full_path().unwrap();
    let n_first = 1100 + TRICKY.len();
    assert_eq!(relative.discover(&store, LIMIT).unwrap().new, n_first);
    assert_eq!(full.discover(&store, LIMIT).unwrap().new, 1100);
    for _ in 0..2 {
        let again = relative.discover(&store, LIMIT).unwrap();
        assert_eq!((again.unchanged, again.gone), (n_first, 0), "{again:?}");
        let again = full.discover(&store, LIMIT).unwrap();
        assert_eq!((again.unchanged, again.gone), (1100, 0), "{again:?}");
    }
    std::fs::remove_file(first.join("a.txt")).unwrap();
    std::fs::remove_file(second.join("d0/f0000.txt")).unwrap();
    assert_eq!(relative.discover(&store, LIMIT).unwrap().gone, 1);
    assert_eq!(full.discover(&store, LIMIT).unwrap().gone, 1);
    assert_eq!(present(&store).len(), n_first - 1 + 1099);
    let gone = leasehold::source::mark_folder_gone(&store, full.key_prefix()).unwrap();
    assert_eq!(gone, 1099);
    let left = present(&store);
    assert_eq!(left.len(), n_first - 1);
    assert!(
        left.iter().all(|k| relative.owns(k)),
        "only the first folder's documents are left"
    );
}

/// `Store::edit_meta` reads several settings, and writes and removes them
/// as the edit decides, in one transaction.
fn settings_are_edited_together(b: Backend) {
    let t = TestDb::new(b);
    let store = store(&t);
    store.set_meta("one", "1").unwrap();
    let names = ["one", "two", "three"];
    let seen = store
        .edit_meta(&names, |values| {
            let before = values.to_vec();
            values[0] = None;
            values[1] = Some("2".into());
            before
        })
        .unwrap();
    assert_eq!(seen, [Some("1".to_owned()), None, None]);
    let now: Vec<Option<String>> = names.iter().map(|n| store.meta(n).unwrap()).collect();
    assert_eq!(now, [None, Some("2".to_owned()), None]);
}

on_both_backends!(
    two_folders_each_judge_only_their_own_documents,
    settings_are_edited_together,
    the_walk_and_the_store_agree_on_the_order_of_keys,
    vanished_files_are_found_across_batches_and_nothing_present_is_gone,
    a_document_recorded_again_meanwhile_is_not_taken_for_vanished,
);
