//! Tests of the mirror: layout, atomic writes, fenced cleanup, sweeps and races.

use super::layout::LOCK_NAME;
use super::write::{link_then_unlink, rename_noreplace, sync_each};
use super::*;
use sha2::{Digest, Sha256};
use std::os::unix::fs::symlink;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Debug)]
enum TestErr {
    Db,
    Mirror(MirrorError),
}

impl From<MirrorError> for TestErr {
    fn from(e: MirrorError) -> Self {
        TestErr::Mirror(e)
    }
}

fn setup() -> (tempfile::TempDir, Mirror) {
    let tmp = tempfile::tempdir().unwrap();
    let mirror = Mirror::open(tmp.path().join("mirror")).unwrap();
    (tmp, mirror)
}

fn rel(job_id: i64, fence: i64) -> String {
    Mirror::generation_rel_path(job_id, fence).unwrap()
}

fn exists(m: &Mirror, rel_path: &str) -> bool {
    m.root().join(rel_path).exists()
}

fn temps(m: &Mirror, job_id: i64) -> Vec<String> {
    let files = m.list_doc_files(job_id).unwrap();
    files.into_iter().filter(|f| f.contains(".tmp-")).collect()
}

fn keep(accepted: Option<String>, current_fence: Option<i64>) -> Keep {
    Keep {
        accepted,
        current_fence,
    }
}

/// Every file in the whole tree, relative to the root, to prove "nothing deleted".
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn layout_is_sharded_by_id() {
    assert_eq!(rel(7, 3), "s000/000/7.g000003.txt");
    assert_eq!(rel(1_234_567_890, 42), "s499/180/1234567890.g000042.txt");
    assert_eq!(rel(999_999, 1_234_567), "s000/3d0/999999.g1234567.txt");
    assert_eq!(rel(1_023, 0), "s000/000/1023.g000000.txt");
    assert_eq!(rel(1_024, 0), "s000/001/1024.g000000.txt");
    let (_t, m) = setup();
    assert_eq!(m.doc_dir(5_001_002).unwrap(), m.root().join("s004/313"));
    let w = m.write(5_001_002, 9, b"x").unwrap();
    assert_eq!(w.rel_path, "s004/313/5001002.g000009.txt");
    assert!(m.root().join("s004/313/.lock").is_file());
    assert_eq!(
        Mirror::legacy_generation_rel_path(5_001_002, 9).unwrap(),
        "005/001/5001002/g000009.txt"
    );
    assert_eq!(Mirror::doc_id_of("s004/313/5001002.g000009.txt"), Some(5_001_002));
    assert_eq!(Mirror::doc_id_of("005/001/5001002/g000009.txt"), Some(5_001_002));
    assert_eq!(Mirror::doc_id_of("s000/000/5001002.g000009.txt"), None);
    assert_eq!(Mirror::doc_id_of("000/000/5001002/g000009.txt"), None);
}

#[test]
fn negative_ids_are_rejected() {
    let (_t, m) = setup();
    fn invalid<T>(r: Result<T, MirrorError>) -> bool {
        matches!(r, Err(MirrorError::InvalidId { .. }))
    }
    assert!(invalid(Mirror::generation_rel_path(-1, 0)));
    assert!(invalid(Mirror::generation_rel_path(0, -1)));
    assert!(invalid(m.doc_dir(-5)));
    assert!(invalid(m.write(1, -1, b"x")));
    assert!(invalid(m.write(i64::MIN, 1, b"x")));
    let r = m.cleanup(-1, || Ok::<_, MirrorError>(None));
    assert!(matches!(r, Err(MirrorError::InvalidId { job_id: -1, .. })));
}

#[test]
fn write_returns_sha_mode_and_content() {
    let (_t, m) = setup();
    let bytes = b"extracted text \xe2\x9c\x93";
    let w = m.write(12, 3, bytes).unwrap();
    assert_eq!(w.rel_path, rel(12, 3));
    assert_eq!(w.sha256, hex::encode(Sha256::digest(bytes)));
    assert_eq!(w.len, bytes.len() as u64);
    let path = m.root().join(&w.rel_path);
    assert_eq!(fs::read(&path).unwrap(), bytes);
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(m.read(&w.rel_path).unwrap(), bytes);
    assert!(temps(&m, 12).is_empty());
}

#[test]
fn sha_of_known_input() {
    let (_t, m) = setup();
    let w = m.write(1, 1, b"abc").unwrap();
    assert_eq!(
        w.sha256,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn write_refuses_to_replace_existing_generation() {
    let (_t, m) = setup();
    m.write(4, 5, b"first").unwrap();
    let err = m.write(4, 5, b"second").unwrap_err();
    match &err {
        MirrorError::GenerationExists { path } => {
            assert_eq!(path, &m.root().join(rel(4, 5)))
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("g000005.txt"));
    assert_eq!(m.read(&rel(4, 5)).unwrap(), b"first");
    assert!(temps(&m, 4).is_empty());
    assert_eq!(m.list_doc_files(4).unwrap(), vec![rel(4, 5)]);
}

#[test]
fn fail_fsync_leaves_no_temp_and_no_final() {
    let (_t, m) = setup();
    let m = m.with_fault(Some(Fault::FailFsync));
    let err = m.write(8, 1, b"data").unwrap_err();
    // The fsync comes after the rename; the withdrawn file is named.
    assert!(matches!(&err, MirrorError::Io { path, .. } if path.ends_with("8.g000001.txt")));
    assert!(!err.is_disk_full());
    assert!(m.list_doc_files(8).unwrap().is_empty());
    let m = m.with_fault(None);
    m.write(8, 1, b"data").unwrap();
}

#[test]
fn disk_full_on_write_is_flagged_and_cleaned_up() {
    let (_t, m) = setup();
    let m = m.with_fault(Some(Fault::DiskFullOnWrite));
    let err = m.write(8, 2, b"data").unwrap_err();
    assert!(err.is_disk_full(), "{err}");
    // The named temp file on the portable path, the generation on Linux's.
    assert!(err.to_string().contains("8.g000002."), "{err}");
    assert!(m.list_doc_files(8).unwrap().is_empty());
}

#[test]
fn fail_dir_fsync_withdraws_the_final_file() {
    let (_t, m) = setup();
    let m = m.with_fault(Some(Fault::FailDirFsync));
    let err = m.write(9, 2, b"data").unwrap_err();
    assert!(matches!(&err, MirrorError::Io { path, .. } if path == &m.doc_dir(9).unwrap()));
    assert!(m.list_doc_files(9).unwrap().is_empty());
}

/// Generations 1..=5, a stale temp and an unknown file in doc 21.
fn populated() -> (tempfile::TempDir, Mirror, Vec<String>) {
    let (t, m) = setup();
    for fence in 1..=5 {
        m.write(21, fence, format!("gen {fence}").as_bytes()).unwrap();
    }
    let dir = m.doc_dir(21).unwrap();
    fs::write(dir.join("21.g000009.tmp-crashed"), b"partial").unwrap();
    fs::write(dir.join("21.notes.txt"), b"not ours").unwrap();
    let before = tree(m.root());
    (t, m, before)
}

#[test]
fn cleanup_keeps_accepted_and_current_and_removes_the_rest() {
    let (_t, m, _) = populated();
    let r = m
        .cleanup(21, || Ok::<_, TestErr>(Some(keep(Some(rel(21, 2)), Some(4)))))
        .unwrap();
    let d = "s000/000";
    let expect_removed = [
        "21.g000001.txt",
        "21.g000003.txt",
        "21.g000005.txt",
        "21.g000009.tmp-crashed",
    ];
    let expect_removed: Vec<String> = expect_removed.iter().map(|n| format!("{d}/{n}")).collect();
    assert_eq!(r.removed, expect_removed);
    assert_eq!(r.kept, vec![rel(21, 2), rel(21, 4)]);
    assert_eq!(r.unknown, vec![format!("{d}/21.notes.txt")]);
    let left = m.list_doc_files(21).unwrap();
    assert_eq!(
        left,
        vec![
            format!("{d}/21.g000002.txt"),
            format!("{d}/21.g000004.txt"),
            format!("{d}/21.notes.txt")
        ]
    );
    assert_eq!(m.read(&rel(21, 2)).unwrap(), b"gen 2");
}

/// A document whose only file is its accepted generation needs no cleanup,
/// whatever else its shard holds (the lock, other documents' files); any other
/// file of its own (another generation, a temp file, an odd name, a legacy
/// directory) needs one, and so does a path that is not this document's.
#[test]
fn holds_only_is_true_for_the_accepted_generation_alone() {
    let (_t, m) = setup();
    m.write(21, 3, b"gen 3").unwrap();
    let dir = m.doc_dir(21).unwrap();
    fs::write(dir.join(LOCK_NAME), b"").unwrap();
    assert!(m.holds_only(21, &rel(21, 3)).unwrap());
    assert!(!m.holds_only(21, &rel(21, 2)).unwrap(), "not the file there");
    assert!(!m.holds_only(22, &rel(21, 3)).unwrap(), "another document's path");
    m.write(22, 1, b"another document").unwrap();
    fs::write(dir.join("210.g000001.txt"), b"x").unwrap();
    assert!(m.holds_only(21, &rel(21, 3)).unwrap(), "other documents' files");
    for (extra, what) in [
        ("21.g000002.txt", "an older generation"),
        ("21.g000004.tmp-x", "a writer's temp file"),
        ("21.notes.txt", "an odd name of its own"),
    ] {
        fs::write(dir.join(extra), b"x").unwrap();
        assert!(!m.holds_only(21, &rel(21, 3)).unwrap(), "{what}");
        fs::remove_file(dir.join(extra)).unwrap();
    }
    let legacy = m.legacy_doc_dir(21).unwrap();
    fs::create_dir_all(&legacy).unwrap();
    assert!(!m.holds_only(21, &rel(21, 3)).unwrap(), "a legacy directory");
    fs::remove_dir(&legacy).unwrap();
    assert!(m.holds_only(21, &rel(21, 3)).unwrap());
    assert_eq!(
        m.holds_only_all(&[(21, &rel(21, 3)), (22, &rel(22, 2)), (22, &rel(22, 1))])
            .unwrap(),
        [true, false, true]
    );
}

/// A batch's cleanups list each shard once, before its lock: a document
/// whose accepted result is alone is left without asking for its row; the
/// others lose what the row read under the lock does not keep, among them a
/// dead writer's temp file; what the listing did not see is left alone.
#[test]
fn a_batch_cleanup_lists_each_shard_once_and_deletes_what_the_row_does_not_keep() {
    let (_t, m) = setup();
    let dir = m.doc_dir(21).unwrap();
    m.write(21, 1, b"old").unwrap();
    m.write(21, 2, b"new").unwrap();
    m.write(22, 1, b"alone").unwrap();
    m.write(23, 4, b"a failed claim's late write").unwrap();
    fs::write(dir.join("21.g000003.tmp-x"), b"a dead writer's").unwrap();
    fs::write(dir.join("21.notes.txt"), b"not ours").unwrap();
    let mut asked = Vec::new();
    let reports = m.cleanup_batch(
        &[
            (21, Some(rel(21, 2).as_str())),
            (22, Some(rel(22, 1).as_str())),
            (23, None),
            (24, None),
        ],
        |id| {
            asked.push(id);
            if id == 21 {
                // Appears after the listing: left for a later cleanup.
                fs::write(dir.join("21.g000006.tmp-y"), b"unseen").unwrap();
            }
            // 23's row: a later claim (fence 5) is extracting; 24 has no files.
            Ok::<_, TestErr>(Some(match id {
                21 => keep(Some(rel(21, 2)), None),
                _ => keep(None, Some(5)),
            }))
        },
    );
    let reports: Vec<CleanupReport> = reports.into_iter().map(Result::unwrap).collect();
    assert_eq!(asked, [21, 23], "22 is alone, 24 has nothing listed");
    let d = shard_rel(21).unwrap();
    assert_eq!(
        reports[0].removed,
        [format!("{d}/21.g000001.txt"), format!("{d}/21.g000003.tmp-x")]
    );
    assert_eq!(reports[0].unknown, [format!("{d}/21.notes.txt")]);
    assert_eq!(reports[2].removed, [format!("{d}/23.g000004.txt")]);
    assert!(reports[1] == CleanupReport::default() && reports[3] == CleanupReport::default());
    assert_eq!(
        m.list_doc_files(21).unwrap(),
        [
            rel(21, 2),
            format!("{d}/21.g000006.tmp-y"),
            format!("{d}/21.notes.txt")
        ]
    );
    assert_eq!(m.list_doc_files(22).unwrap(), [rel(22, 1)]);
    assert!(m.list_doc_files(23).unwrap().is_empty());
}

#[test]
fn cleanup_with_lookup_error_deletes_nothing() {
    let (_t, m, before) = populated();
    let r = m.cleanup(21, || Err::<Option<Keep>, _>(TestErr::Db));
    assert!(matches!(r, Err(TestErr::Db)));
    assert_eq!(tree(m.root()), before);
}

#[test]
fn cleanup_with_missing_row_deletes_nothing() {
    let (_t, m, before) = populated();
    let r = m.cleanup(21, || Ok::<_, TestErr>(None)).unwrap();
    assert!(r.removed.is_empty());
    assert_eq!(r.missing_rows, vec![21]);
    assert_eq!(r.kept.len(), 6);
    assert_eq!(tree(m.root()), before);
}

#[test]
fn cleanup_refuses_foreign_accepted_path_and_bad_fence() {
    let (_t, m, before) = populated();
    for bad in [
        rel(22, 2),
        Mirror::legacy_generation_rel_path(22, 2).unwrap(),
        "../x/g000002.txt".into(),
        "s000/000/21.g2.txt".into(),
        "000/000/21/g2.txt".into(),
    ] {
        let r = m.cleanup(21, || Ok::<_, TestErr>(Some(keep(Some(bad.clone()), None))));
        assert!(
            matches!(
                r,
                Err(TestErr::Mirror(MirrorError::ForeignAccepted { job_id: 21, .. }))
            ),
            "{bad}: {r:?}"
        );
    }
    let r = m.cleanup(21, || Ok::<_, TestErr>(Some(keep(None, Some(-3)))));
    assert!(matches!(r, Err(TestErr::Mirror(MirrorError::InvalidId { .. }))));
    assert_eq!(tree(m.root()), before);
}

#[test]
fn link_fallback_never_replaces() {
    let (_t, m) = setup();
    let dir = m.root();
    fs::write(dir.join("a"), b"a").unwrap();
    fs::write(dir.join("b"), b"b").unwrap();
    let err = link_then_unlink(&dir.join("a"), &dir.join("b")).unwrap_err();
    assert!(matches!(err, MirrorError::GenerationExists { .. }));
    assert_eq!(fs::read(dir.join("b")).unwrap(), b"b");
    link_then_unlink(&dir.join("a"), &dir.join("c")).unwrap();
    assert!(!dir.join("a").exists());
    assert_eq!(fs::read(dir.join("c")).unwrap(), b"a");
}

#[test]
fn keep_lookup_runs_under_the_exclusive_lock() {
    let (_t, m) = setup();
    m.write(30, 1, b"x").unwrap();
    let lock_path = m.doc_dir(30).unwrap().join(LOCK_NAME);
    let mut called = false;
    m.cleanup(30, || {
        called = true;
        let probe = File::open(&lock_path).unwrap();
        let contended = fs2::FileExt::try_lock_shared(&probe).is_err();
        assert!(contended, "keep() ran without the exclusive lock held");
        Ok::<_, MirrorError>(None)
    })
    .unwrap();
    assert!(called);
    let probe = File::open(&lock_path).unwrap();
    fs2::FileExt::try_lock_exclusive(&probe).expect("lock released after cleanup");
}

#[test]
fn cleanup_of_missing_doc_is_empty_and_skips_lookup() {
    let (_t, m) = setup();
    let r = m.cleanup(99, || -> Result<Option<Keep>, TestErr> {
        panic!("lookup called")
    });
    assert_eq!(r.unwrap(), CleanupReport::default());
    assert!(!m.doc_dir(99).unwrap().exists());
}

#[test]
fn sweep_dry_run_reports_but_deletes_nothing() {
    let (_t, m, _) = populated();
    m.write(2_000_123, 1, b"a").unwrap();
    m.write(2_000_123, 2, b"b").unwrap();
    fs::write(m.root().join("stray.txt"), b"?").unwrap();
    fs::create_dir_all(m.root().join("000/abc")).unwrap();
    let before = tree(m.root());
    let lookup = |id: i64| -> Result<Option<Keep>, TestErr> {
        Ok(match id {
            21 => Some(keep(Some(rel(21, 5)), None)),
            2_000_123 => Some(keep(None, Some(2))),
            _ => panic!("unexpected id {id}"),
        })
    };
    let dry = m.sweep(true, lookup).unwrap();
    assert_eq!(tree(m.root()), before);
    let removed_21 = [1, 2, 3, 4].map(|f| rel(21, f));
    assert!(removed_21.iter().all(|r| dry.removed.contains(r)), "{dry:?}");
    assert!(dry.removed.contains(&rel(2_000_123, 1)));
    assert!(dry
        .removed
        .contains(&"s000/000/21.g000009.tmp-crashed".to_string()));
    assert_eq!(dry.removed.len(), 6);
    fs::create_dir_all(m.root().join("s000/zzz")).unwrap();
    fs::write(m.root().join("s000/000/notes.txt"), b"?").unwrap();
    let dry = m.sweep(true, lookup).unwrap();
    for u in [
        "s000/000/21.notes.txt",
        "s000/000/notes.txt",
        "s000/zzz",
        "000/abc",
        "stray.txt",
    ] {
        assert!(
            dry.unknown.contains(&u.to_string()),
            "{u} not in {:?}",
            dry.unknown
        );
    }
    let real = m.sweep(false, lookup).unwrap();
    assert_eq!(real, dry);
    assert!(dry.removed.iter().all(|r| !exists(&m, r)));
    assert!(dry.kept.iter().chain(&dry.unknown).all(|r| exists(&m, r)));
}

#[test]
fn sweep_prunes_emptied_doc_dirs_and_writes_still_work() {
    let (_t, m) = setup();
    m.write(3_004_005, 1, b"a").unwrap();
    m.write(7, 1, b"b").unwrap();
    let lookup =
        |id: i64| -> Result<Option<Keep>, TestErr> { Ok(if id == 7 { None } else { Some(Keep::default()) }) };
    let r = m.sweep(false, lookup).unwrap();
    assert_eq!(r.removed, vec![rel(3_004_005, 1)]);
    assert_eq!(r.missing_rows, vec![7]);
    assert!(!m.root().join("s002").exists(), "empty shards should be pruned");
    assert!(exists(&m, &rel(7, 1)));
    m.write(3_004_005, 2, b"c").unwrap();
    assert_eq!(m.read(&rel(3_004_005, 2)).unwrap(), b"c");
}

#[test]
fn unsafe_rel_paths_are_refused() {
    let (tmp, m) = setup();
    let w = m.write(1, 1, b"secret-inside").unwrap();
    fs::write(tmp.path().join("outside.txt"), b"outside").unwrap();
    symlink(
        tmp.path().join("outside.txt"),
        m.root().join("s000/000/1.link.txt"),
    )
    .unwrap();
    let escape = format!("{}/../../../../outside.txt", w.rel_path);
    let abs = m.root().join(&w.rel_path).display().to_string();
    for bad in [
        "",
        "/etc/passwd",
        "../outside.txt",
        "./000/000/1/g000001.txt",
        &escape,
        &abs,
    ] {
        let r = m.read(bad);
        assert!(matches!(r, Err(MirrorError::UnsafePath { .. })), "{bad:?}: {r:?}");
        let v = m.verify(bad, &w.sha256);
        assert!(matches!(v, Err(MirrorError::UnsafePath { .. })), "{bad:?}: {v:?}");
    }
    let r = m.read("s000/000/1.link.txt");
    assert!(matches!(r, Err(MirrorError::UnsafePath { .. })), "{r:?}");
    let r = m.read("s000/000/1.missing.txt").unwrap_err();
    assert!(r.is_not_found() && r.to_string().contains("missing.txt"), "{r}");
}

#[test]
fn verify_compares_sha256() {
    let (_t, m) = setup();
    let w = m.write(2, 1, b"payload").unwrap();
    assert!(m.verify(&w.rel_path, &w.sha256).unwrap());
    assert!(m.verify(&w.rel_path, &w.sha256.to_uppercase()).unwrap());
    assert!(!m
        .verify(&w.rel_path, &hex::encode(Sha256::digest(b"other")))
        .unwrap());
    assert!(!m.verify(&w.rel_path, "not-hex").unwrap());
    fs::write(m.root().join(&w.rel_path), b"tampered").unwrap();
    assert!(!m.verify(&w.rel_path, &w.sha256).unwrap());
}

#[test]
fn open_refuses_symlink_and_regular_file_roots() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    fs::create_dir(&real).unwrap();
    symlink(&real, tmp.path().join("link")).unwrap();
    let r = Mirror::open(tmp.path().join("link"));
    assert!(matches!(&r, Err(MirrorError::BadRoot { reason, .. }) if reason.contains("symlink")));
    fs::write(tmp.path().join("file"), b"").unwrap();
    let r = Mirror::open(tmp.path().join("file"));
    assert!(matches!(&r, Err(MirrorError::BadRoot { reason, .. }) if reason.contains("not a directory")));
    assert!(r.unwrap_err().to_string().contains("file"));
}

#[test]
fn open_creates_root_but_not_its_parent() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Mirror::open(tmp.path().join("new")).unwrap();
    assert_eq!(m.root(), fs::canonicalize(tmp.path().join("new")).unwrap());
    assert!(
        fs::read_dir(m.root()).unwrap().next().is_none(),
        "probe left behind"
    );
    let missing = tmp.path().join("no/such");
    let err = Mirror::open(&missing).unwrap_err();
    assert!(matches!(err, MirrorError::BadRoot { .. }));
    assert!(err.to_string().contains(&missing.display().to_string()), "{err}");
    assert!(!tmp.path().join("no").exists());
}

#[test]
fn open_refuses_unwritable_root() {
    // /proc is a directory no one (root included) can create files in.
    if !Path::new("/proc/self").exists() {
        return;
    }
    let r = Mirror::open("/proc");
    assert!(
        matches!(&r, Err(MirrorError::BadRoot { reason, .. }) if reason.contains("not writable")),
        "{r:?}"
    );
}

#[test]
fn race_writer_vs_cleanup_never_deletes_kept_files() {
    let (_t, m) = setup();
    let job = 77;
    m.write(job, 0, b"gen 0").unwrap();
    for k in 0..1000 {
        let kept = keep(Some(rel(job, k)), Some(k + 1));
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let r = m.write(job, k + 1, format!("gen {}", k + 1).as_bytes());
                done.store(true, Ordering::SeqCst);
                r
            });
            for _ in 0..2 {
                s.spawn(|| loop {
                    let r = m
                        .cleanup(job, || Ok::<_, MirrorError>(Some(kept.clone())))
                        .unwrap();
                    assert!(!r.removed.contains(&rel(job, k)), "accepted deleted: {r:?}");
                    assert!(!r.removed.contains(&rel(job, k + 1)), "current deleted: {r:?}");
                    assert!(r.removed.iter().all(|p| !p.contains(".tmp-")), "live temp: {r:?}");
                    if done.load(Ordering::SeqCst) {
                        break;
                    }
                });
            }
            writer.join().unwrap().unwrap();
        });
        assert_eq!(m.read(&rel(job, k)).unwrap(), format!("gen {k}").as_bytes());
        assert_eq!(
            m.read(&rel(job, k + 1)).unwrap(),
            format!("gen {}", k + 1).as_bytes()
        );
        if k > 0 {
            assert!(!exists(&m, &rel(job, k - 1)), "round {k}: stale gen kept");
        }
        assert!(temps(&m, job).is_empty(), "round {k}: temp left");
    }
}

#[test]
fn race_writer_vs_pruning_sweep() {
    let (_t, m) = setup();
    let m = Arc::new(m);
    let done = Arc::new(AtomicBool::new(false));
    // The writer's claim is current (its generation kept) until it removes
    // its file, which empties the shard for the sweep to prune.
    let current = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let sweeper = {
        let (m, done, current) = (Arc::clone(&m), Arc::clone(&done), Arc::clone(&current));
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                m.sweep(false, |_| {
                    let fence = current.load(Ordering::SeqCst);
                    Ok::<_, MirrorError>(Some(keep(None, Some(fence))))
                })
                .unwrap();
            }
        })
    };
    for fence in 0..300 {
        current.store(fence, Ordering::SeqCst);
        let w = m
            .write(5, fence, b"x")
            .unwrap_or_else(|e| panic!("fence {fence}: {e}"));
        fs::remove_file(m.root().join(&w.rel_path)).unwrap();
    }
    done.store(true, Ordering::SeqCst);
    sweeper.join().unwrap();
}

/// Runs `f` on another thread and gives up after a minute, so that a lock wait
/// that never ends fails the test instead of hanging the suite. Not a timing
/// assertion: the bounded waits under test are a fraction of a second.
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("waited over a minute for a mirror lock")
}

/// Another open file description locking the document's shard `.lock`, as a writer in
/// another process would hold it (flock conflicts between descriptions).
fn hold_lock(m: &Mirror, job_id: i64, exclusive: bool) -> File {
    let f = File::open(m.doc_dir(job_id).unwrap().join(LOCK_NAME)).unwrap();
    if exclusive {
        fs2::FileExt::lock_exclusive(&f).unwrap();
    } else {
        fs2::FileExt::lock_shared(&f).unwrap();
    }
    f
}

#[test]
fn cleanup_skips_a_document_whose_lock_is_held_and_counts_it() {
    let (_t, m) = setup();
    m.write(40, 1, b"stale").unwrap();
    m.write(40, 2, b"accepted").unwrap();
    let writer = hold_lock(&m, 40, false);
    let before = tree(m.root());
    let m2 = m.clone();
    let report = within_a_minute(move || {
        m2.cleanup(40, || -> Result<Option<Keep>, TestErr> {
            panic!("row read without the lock")
        })
    })
    .unwrap();
    assert_eq!(report.busy, vec![40], "{report:?}");
    assert!(report.removed.is_empty(), "{report:?}");
    assert_eq!(tree(m.root()), before, "nothing deleted");
    assert_eq!(m.cleanups_skipped(), 1);
    drop(writer);
    let report = m
        .cleanup(40, || Ok::<_, TestErr>(Some(keep(Some(rel(40, 2)), None))))
        .unwrap();
    assert_eq!(report.removed, vec![rel(40, 1)], "the next cleanup does it");
    assert_eq!(m.cleanups_skipped(), 1);
}

#[test]
fn sweep_skips_locked_documents_reports_them_and_goes_on() {
    let (_t, m) = setup();
    // Three shards: the lock of one covers only its own documents.
    let (a, b, c) = (41, 5_041, 10_041);
    for id in [a, b, c] {
        m.write(id, 1, b"stale").unwrap();
    }
    let writer = hold_lock(&m, b, false);
    let m2 = m.clone();
    let lookup = |_id: i64| -> Result<Option<Keep>, TestErr> { Ok(Some(Keep::default())) };
    let (dry, real) = within_a_minute(move || (m2.sweep(true, lookup), m2.sweep(false, lookup)));
    let (dry, real) = (dry.unwrap(), real.unwrap());
    assert_eq!(dry.busy, vec![b]);
    assert_eq!(real.busy, vec![b]);
    assert_eq!(real.removed, vec![rel(a, 1), rel(c, 1)]);
    assert!(exists(&m, &rel(b, 1)), "the locked document is left alone");
    drop(writer);
    let again = m.sweep(false, lookup).unwrap();
    assert_eq!(again.removed, vec![rel(b, 1)]);
    assert!(again.busy.is_empty());
}

#[test]
fn write_gives_up_on_a_lock_held_exclusive_and_leaves_nothing() {
    let (_t, m) = setup();
    m.write(44, 1, b"first").unwrap();
    let cleaner = hold_lock(&m, 44, true);
    let m2 = m.clone();
    let err = within_a_minute(move || m2.write(44, 2, b"second")).unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert!(!err.is_disk_full() && !err.is_unwritable(), "{err}");
    assert!(err.to_string().contains(".lock"), "{err}");
    assert_eq!(m.list_doc_files(44).unwrap(), vec![rel(44, 1)]);
    drop(cleaner);
    m.write(44, 2, b"second").unwrap();
}

#[test]
fn sweep_removes_probe_leftovers_in_the_root_only() {
    let (_t, m) = setup();
    m.write(45, 1, b"kept").unwrap();
    let leftover = ".probe-4242-0-1700000000000000000";
    fs::write(m.root().join(leftover), b"probe").unwrap();
    fs::create_dir(m.root().join(".probe-dir")).unwrap();
    symlink(m.root().join(leftover), m.root().join(".probe-link")).unwrap();
    let lookup = |_id: i64| -> Result<Option<Keep>, TestErr> { Ok(Some(keep(Some(rel(45, 1)), None))) };
    let dry = m.sweep(true, lookup).unwrap();
    assert_eq!(dry.removed, vec![leftover.to_string()]);
    assert!(Mirror::is_probe_name(&dry.removed[0]));
    assert!(m.root().join(leftover).exists(), "a dry run deletes nothing");
    let real = m.sweep(false, lookup).unwrap();
    assert_eq!(real.removed, vec![leftover.to_string()]);
    assert!(!m.root().join(leftover).exists());
    for other in [".probe-dir", ".probe-link"] {
        assert!(real.unknown.contains(&other.to_string()), "{real:?}");
        assert!(
            fs::symlink_metadata(m.root().join(other)).is_ok(),
            "{other} left alone"
        );
    }
}

#[test]
fn open_leaves_no_probe_file_and_inspect_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mirror");
    let m = Mirror::open(&root).unwrap();
    assert_eq!(tree(m.root()), Vec::<String>::new());
    let before = fs::metadata(&root).unwrap();
    let inspected = Mirror::inspect(&root).unwrap();
    assert_eq!(inspected.root(), m.root());
    let after = fs::metadata(&root).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (before.mtime(), before.mtime_nsec(), before.nlink()),
        (after.mtime(), after.mtime_nsec(), after.nlink()),
        "inspect changed the root directory"
    );
    assert_eq!(tree(m.root()), Vec::<String>::new());
    let missing = tmp.path().join("none");
    assert!(Mirror::inspect(&missing).is_err());
    assert!(!missing.exists(), "inspect created the root");
}

#[test]
fn a_round_of_many_writes_makes_each_durable_with_its_own_answer() {
    let (_t, m) = setup();
    let staged: Vec<Staged> = (1..=3)
        .map(|id| m.stage(id, 2, format!("text {id}").as_bytes()).unwrap())
        .collect();
    let expected: Vec<Written> = staged.iter().map(|s| s.written().clone()).collect();
    let out: Vec<Written> = m.sync(staged).into_iter().map(Result::unwrap).collect();
    assert_eq!(out, expected);
    for (id, w) in (1..=3).zip(&out) {
        assert_eq!(m.read(&w.rel_path).unwrap(), format!("text {id}").as_bytes());
        assert!(m.verify(&w.rel_path, &w.sha256).unwrap());
        assert!(temps(&m, id).is_empty());
    }
}

#[test]
fn a_failed_round_withdraws_every_write_in_it() {
    for fault in [Fault::FailFsync, Fault::FailDirFsync] {
        let (_t, m) = setup();
        let m = m.with_fault(Some(fault));
        let staged = vec![m.stage(11, 1, b"a").unwrap(), m.stage(12, 1, b"b").unwrap()];
        let out = m.sync(staged);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(Result::is_err), "{fault:?}: {out:?}");
        for id in [11, 12] {
            assert!(m.list_doc_files(id).unwrap().is_empty(), "{fault:?}");
            assert!(temps(&m, id).is_empty(), "{fault:?}");
        }
        // Nothing stops the next round.
        let m = m.with_fault(None);
        m.write(11, 1, b"a").unwrap();
    }
}

#[test]
fn a_staged_write_dropped_unsynced_is_withdrawn() {
    let (_t, m) = setup();
    let staged = m.stage(21, 1, b"never accepted").unwrap();
    assert_eq!(m.list_doc_files(21).unwrap(), vec![rel(21, 1)]);
    drop(staged);
    assert!(m.list_doc_files(21).unwrap().is_empty());
    assert!(temps(&m, 21).is_empty());
}

/// A mirror whose cleanup the database fences, with generations 1–5 of
/// document 31 and temp files of claims 3 (current) and 9 (a crashed one).
fn row_locked() -> (tempfile::TempDir, Mirror) {
    let (t, m) = setup();
    let m = m.fenced_by(Fencing::RowLocks);
    for fence in 1..=5 {
        m.write(31, fence, format!("gen {fence}").as_bytes()).unwrap();
    }
    let dir = m.doc_dir(31).unwrap();
    fs::write(dir.join("31.g000003.tmp-writing"), b"partial").unwrap();
    fs::write(dir.join("31.g000009.tmp-crashed"), b"partial").unwrap();
    (t, m)
}

/// A deadline no test reaches.
fn later() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(3600)
}

#[test]
fn cleanup_held_past_its_deadline_deletes_nothing_and_says_busy() {
    let (_t, m) = row_locked();
    let before = tree(m.root());
    let past = std::time::Instant::now();
    let r = m
        .cleanup_held(31, Some(keep(None, None)), past, false, true)
        .unwrap();
    assert_eq!(r.busy, vec![31]);
    assert!(r.removed.is_empty(), "{r:?}");
    assert_eq!(tree(m.root()), before);
    assert_eq!(m.cleanups_skipped(), 1);
}

#[test]
fn writers_of_a_row_locked_mirror_make_no_lock_file() {
    let (_t, m) = row_locked();
    let dir = m.doc_dir(31).unwrap();
    assert!(!dir.join(LOCK_NAME).exists());
    assert_eq!(m.read(&rel(31, 5)).unwrap(), b"gen 5");
}

#[test]
fn cleanup_held_keeps_the_current_claims_temp_files_and_the_rest_goes() {
    let (_t, m) = row_locked();
    let d = "s000/000";
    let r = m
        .cleanup_held(31, Some(keep(Some(rel(31, 2)), Some(3))), later(), false, true)
        .unwrap();
    let names = |v: &[&str]| v.iter().map(|n| format!("{d}/{n}")).collect::<Vec<_>>();
    assert_eq!(
        r.removed,
        names(&[
            "31.g000001.txt",
            "31.g000004.txt",
            "31.g000005.txt",
            "31.g000009.tmp-crashed",
        ])
    );
    assert_eq!(
        r.kept,
        names(&["31.g000002.txt", "31.g000003.tmp-writing", "31.g000003.txt"])
    );
    // A claim is current: its writer may need the directory, which stays.
    assert!(m.doc_dir(31).unwrap().is_dir());
}

#[test]
fn cleanup_held_without_a_row_deletes_nothing_and_never_prunes_a_shard() {
    let (_t, m) = row_locked();
    let before = tree(m.root());
    let r = m.cleanup_held(31, None, later(), false, true).unwrap();
    assert_eq!(r.missing_rows, vec![31]);
    assert_eq!(tree(m.root()), before);
    // Settled, nothing accepted (e.g. dead): everything goes, but not the
    // shard, where another document's writer may be about to write.
    let r = m
        .cleanup_held(31, Some(keep(None, None)), later(), false, true)
        .unwrap();
    assert_eq!(r.removed.len(), 7, "{r:?}");
    assert!(m.list_doc_files(31).unwrap().is_empty());
    assert!(m.doc_dir(31).unwrap().is_dir());
}

#[test]
fn a_row_locked_mirror_refuses_the_file_locked_cleanup() {
    let (_t, m) = row_locked();
    let before = tree(m.root());
    let e = m
        .cleanup(31, || Ok::<_, TestErr>(Some(keep(None, None))))
        .unwrap_err();
    assert!(
        matches!(e, TestErr::Mirror(MirrorError::NotFileLocked { .. })),
        "{e:?}"
    );
    let e = m
        .sweep(false, |_| Ok::<_, TestErr>(Some(keep(None, None))))
        .unwrap_err();
    assert!(
        matches!(e, TestErr::Mirror(MirrorError::NotFileLocked { .. })),
        "{e:?}"
    );
    assert_eq!(tree(m.root()), before);
}

#[test]
fn temp_names_give_their_fence_only_when_well_formed() {
    use super::layout::{classify_shard_entry, legacy_temp_fence};
    assert_eq!(legacy_temp_fence(".tmp-g000003-123-4-5"), Some(3));
    assert_eq!(legacy_temp_fence(".tmp-g1234567-x"), Some(1_234_567));
    for odd in [
        ".tmp-g-x",
        ".tmp-gabc-x",
        ".tmp-g000003",
        "g000003.txt",
        ".tmp-g+3-x",
    ] {
        assert_eq!(legacy_temp_fence(odd), None, "{odd}");
    }
    assert_eq!(
        classify_shard_entry(7, "7.g000003.tmp-1-2-3", true),
        Kind::Temp(Some(3))
    );
    assert_eq!(
        classify_shard_entry(7, "7.g000003.txt", true),
        Kind::Generation(3)
    );
    for odd in [
        "7.g0000003.txt",
        "7.g+00003.txt",
        "7.g.tmp-x",
        "7.gabc.tmp-x",
        "7.notes",
    ] {
        assert_eq!(classify_shard_entry(7, odd, true), Kind::Unknown, "{odd}");
    }
    assert_eq!(classify_shard_entry(7, "7.g000003.txt", false), Kind::Unknown);
}

// The portable paths (crate::portable), run directly whatever the platform
// and the LEASEHOLD_FORCE_PORTABLE switch.

#[test]
fn the_no_replace_rename_of_this_platform_refuses_an_existing_name() {
    let (_t, m) = setup();
    let dir = m.root();
    fs::write(dir.join("a"), b"a").unwrap();
    fs::write(dir.join("b"), b"b").unwrap();
    let err = rename_noreplace(&dir.join("a"), &dir.join("b")).unwrap_err();
    assert!(matches!(err, MirrorError::GenerationExists { .. }), "{err:?}");
    assert_eq!(fs::read(dir.join("b")).unwrap(), b"b");
    assert_eq!(fs::read(dir.join("a")).unwrap(), b"a");
    rename_noreplace(&dir.join("a"), &dir.join("c")).unwrap();
    assert!(!dir.join("a").exists());
    assert_eq!(fs::read(dir.join("c")).unwrap(), b"a");
}

#[test]
fn the_portable_round_fsyncs_each_file_and_directory_and_answers_each() {
    let (_t, m) = setup();
    let staged = [
        m.stage(41, 1, b"one").unwrap(),
        m.stage(41, 2, b"two").unwrap(),
        m.stage(42, 1, b"three").unwrap(),
    ];
    let all: Vec<&Staged> = staged.iter().collect();
    let results = sync_each(&all, None);
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    for s in &staged {
        let w = s.written();
        assert!(m.verify(&w.rel_path, &w.sha256).unwrap());
    }
}

#[test]
fn the_portable_round_fails_every_write_of_a_directory_whose_fsync_failed() {
    for fault in [Fault::FailFsync, Fault::FailDirFsync] {
        let (_t, m) = setup();
        let m = m.with_fault(Some(fault));
        let staged = [m.stage(51, 1, b"a").unwrap(), m.stage(51, 2, b"b").unwrap()];
        let all: Vec<&Staged> = staged.iter().collect();
        let results = sync_each(&all, m.fault);
        assert!(results.iter().all(Result::is_err), "{fault:?}: {results:?}");
        if fault == Fault::FailDirFsync {
            for result in &results {
                let dir = m.doc_dir(51).unwrap();
                assert!(matches!(result, Err(MirrorError::Io { path, .. }) if path == &dir));
            }
        }
        // Unsynced, they are withdrawn when dropped.
        drop(staged);
        assert!(m.list_doc_files(51).unwrap().is_empty(), "{fault:?}");
    }
}

#[test]
fn the_named_probe_leaves_nothing_and_fails_where_it_cannot_write() {
    let (_t, m) = setup();
    named_probe(m.root()).unwrap();
    assert_eq!(tree(m.root()), Vec::<String>::new());
    let (probe, e) = named_probe(&m.root().join("missing")).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(probe.starts_with(m.root().join("missing")));
}

/// Every entry under the root: (files, directories).
fn census(root: &Path) -> (Vec<String>, Vec<String>) {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                stack.push(path);
                dirs.push(rel);
            } else {
                files.push(rel);
            }
        }
    }
    files.sort();
    dirs.sort();
    (files, dirs)
}

/// One inode per document: n documents in two shards leave n result files, the
/// two shards' locks and their directories, and no directory per document.
#[test]
fn a_document_costs_one_inode() {
    let (_t, m) = setup();
    let ids: Vec<i64> = (1..=40).chain(2_048..2_058).collect();
    for &id in &ids {
        m.write(id, 1, b"text").unwrap();
    }
    let (files, dirs) = census(m.root());
    assert_eq!(dirs, ["s000", "s000/000", "s000/002"]);
    let mut expected: Vec<String> = ids.iter().map(|&id| rel(id, 1)).collect();
    expected.extend(["s000/000/.lock".to_string(), "s000/002/.lock".to_string()]);
    expected.sort();
    assert_eq!(files, expected);
}

/// Documents 21, 210 and 22 share a shard; cleaning 21 up (nothing to keep)
/// removes its files only, whatever their names have in common.
#[test]
fn a_cleanup_never_touches_another_documents_files_in_its_shard() {
    let (_t, m) = setup();
    for id in [21, 210, 22, 2] {
        m.write(id, 1, b"one").unwrap();
        m.write(id, 2, b"two").unwrap();
    }
    let dir = m.doc_dir(21).unwrap();
    assert_eq!(dir, m.doc_dir(210).unwrap(), "one shard");
    fs::write(dir.join("210.g000003.tmp-crashed"), b"partial").unwrap();
    fs::write(dir.join("21.g000003.tmp-crashed"), b"partial").unwrap();
    let others: Vec<String> = [210, 22, 2]
        .iter()
        .flat_map(|&id| m.list_doc_files(id).unwrap())
        .collect();
    let r = m
        .cleanup(21, || Ok::<_, TestErr>(Some(keep(None, None))))
        .unwrap();
    assert_eq!(
        r.removed,
        [rel(21, 1), rel(21, 2), "s000/000/21.g000003.tmp-crashed".into()]
    );
    assert!(m.list_doc_files(21).unwrap().is_empty());
    let after: Vec<String> = [210, 22, 2]
        .iter()
        .flat_map(|&id| m.list_doc_files(id).unwrap())
        .collect();
    assert_eq!(after, others);
    assert!(others.iter().all(|f| exists(&m, f)));
}

/// The shard's lock covers its documents: a writer of one (shared) makes a
/// cleanup of another give up after its bounded wait; a cleanup of one
/// (exclusive) makes a write of another give up after its own.
#[test]
fn the_shard_lock_bounds_the_waits_of_its_other_documents() {
    let (_t, m) = setup();
    m.write(50, 1, b"stale").unwrap();
    m.write(51, 1, b"x").unwrap();
    let writer = hold_lock(&m, 51, false);
    let m2 = m.clone();
    let report = within_a_minute(move || {
        m2.cleanup(50, || -> Result<Option<Keep>, TestErr> {
            panic!("row read without the lock")
        })
    })
    .unwrap();
    assert_eq!(report.busy, vec![50]);
    drop(writer);
    let cleaner = hold_lock(&m, 50, true);
    let m2 = m.clone();
    let err = within_a_minute(move || m2.write(51, 2, b"y")).unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert_eq!(m.list_doc_files(51).unwrap(), vec![rel(51, 1)]);
    // Another shard's writes go on.
    m.write(50 + 1024, 1, b"z").unwrap();
    drop(cleaner);
    m.write(51, 2, b"y").unwrap();
}

/// A mirror made before shards: document 60's directory with its `.lock`, its
/// accepted generation 2, a stale one and a killed writer's temp file.
fn legacy_doc(m: &Mirror) -> PathBuf {
    let dir = m.legacy_doc_dir(60).unwrap();
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(LOCK_NAME), b"").unwrap();
    fs::write(dir.join("g000001.txt"), b"stale").unwrap();
    fs::write(dir.join("g000002.txt"), b"accepted").unwrap();
    fs::write(dir.join(".tmp-g000003-1-2-3"), b"partial").unwrap();
    dir
}

/// Results of the layout before shards are read where they are; a cleanup
/// keeps the accepted one and removes the rest there; once the document's
/// newer result (in its shard) is accepted, the old directory goes entirely.
#[test]
fn legacy_results_are_read_side_by_side_until_replaced() {
    let (_t, m) = setup();
    let dir = legacy_doc(&m);
    let old = Mirror::legacy_generation_rel_path(60, 2).unwrap();
    assert_eq!(old, "000/000/60/g000002.txt");
    assert_eq!(m.read(&old).unwrap(), b"accepted");
    assert!(!m.holds_only(60, &old).unwrap());
    let dry = m
        .sweep(true, |_| Ok::<_, TestErr>(Some(keep(Some(old.clone()), None))))
        .unwrap();
    assert_eq!(
        dry.removed,
        ["000/000/60/.tmp-g000003-1-2-3", "000/000/60/g000001.txt"]
    );
    assert_eq!(dry.kept, std::slice::from_ref(&old));
    m.cleanup(60, || Ok::<_, TestErr>(Some(keep(Some(old.clone()), Some(3)))))
        .unwrap();
    assert_eq!(m.list_doc_files(60).unwrap(), std::slice::from_ref(&old));
    // Extracted again: the new generation goes to the shard, both are kept
    // until it is accepted, then the old directory goes with its lock.
    let new = m.write(60, 3, b"newer").unwrap().rel_path;
    let r = m
        .cleanup(60, || Ok::<_, TestErr>(Some(keep(Some(old.clone()), Some(3)))))
        .unwrap();
    assert_eq!(r.kept, [new.clone(), old.clone()]);
    let r = m
        .cleanup(60, || Ok::<_, TestErr>(Some(keep(Some(new.clone()), None))))
        .unwrap();
    assert_eq!(r.removed, [old]);
    assert!(
        !dir.exists() && !m.root().join("000").exists(),
        "legacy directories left"
    );
    assert!(m.holds_only(60, &new).unwrap());
    assert_eq!(m.read(&new).unwrap(), b"newer");
}

/// A sweep takes a legacy document's lock: held by an older leasehold's
/// writer, the document is skipped.
#[test]
fn a_sweep_respects_a_legacy_documents_lock() {
    let (_t, m) = setup();
    let dir = legacy_doc(&m);
    let f = File::open(dir.join(LOCK_NAME)).unwrap();
    fs2::FileExt::lock_shared(&f).unwrap();
    let m2 = m.clone();
    let r = within_a_minute(move || m2.sweep(false, |_| Ok::<_, TestErr>(Some(keep(None, None))))).unwrap();
    assert_eq!(r.busy, [60]);
    assert_eq!(m.list_doc_files(60).unwrap().len(), 3);
    drop(f);
    let r = m
        .sweep(false, |_| Ok::<_, TestErr>(Some(keep(None, None))))
        .unwrap();
    assert_eq!(r.removed.len(), 3, "{r:?}");
    assert!(!dir.exists());
}

/// A rerun's stat of an accepted result: present at its size, resized,
/// missing, a link put in its place is damage (not followed), and a path
/// that is not plain is refused before any stat.
#[test]
fn stat_result_tells_present_resized_missing_and_a_link_from_the_path_as_written() {
    let (t, m) = setup();
    let w = m.write(7, 1, b"twelve bytes").unwrap();
    assert_eq!(m.stat_result(&w.rel_path, Some(12)).unwrap(), ResultFile::Present);
    assert_eq!(m.stat_result(&w.rel_path, None).unwrap(), ResultFile::Present);
    assert_eq!(
        m.stat_result(&w.rel_path, Some(5)).unwrap(),
        ResultFile::Resized {
            found: 12,
            recorded: 5
        }
    );
    assert_eq!(m.stat_result(&rel(7, 2), Some(1)).unwrap(), ResultFile::Missing);
    assert_eq!(
        m.stat_result("nowhere/at/all.txt", None).unwrap(),
        ResultFile::Missing
    );
    let outside = t.path().join("outside.txt");
    fs::write(&outside, b"twelve bytes").unwrap();
    let path = m.root().join(&w.rel_path);
    fs::remove_file(&path).unwrap();
    symlink(&outside, &path).unwrap();
    assert!(matches!(
        m.stat_result(&w.rel_path, Some(12)).unwrap(),
        ResultFile::Resized { .. }
    ));
    for bad in ["../outside.txt", "/etc/passwd", "", "a/../../b"] {
        assert!(
            matches!(m.stat_result(bad, None), Err(MirrorError::UnsafePath { .. })),
            "{bad:?}"
        );
    }
}

/// A rerun's look at the results by their shards' listings: present,
/// missing, one written after the listing, a shard gone with its files, a
/// link in a result's place stat'ed
/// (damage, as a stat by path says), a path outside the shards and an
/// unsafe one answered as a stat does. A result cut in place is taken as
/// present: the listing's price, left to the reads that verify.
#[test]
fn listed_results_tell_present_and_missing_and_stat_what_a_listing_cannot_tell() {
    let (t, m) = setup();
    let kept = m.write(7, 1, b"twelve bytes").unwrap();
    let cut = m.write(8, 1, b"twelve bytes").unwrap();
    let linked = m.write(9, 1, b"twelve bytes").unwrap();
    let far = m.write(5000, 1, b"twelve bytes").unwrap();
    let mut results = ListedResults::new(&m);
    assert_eq!(
        results.look(&kept.rel_path, Some(12)).unwrap(),
        ResultFile::Present
    );
    assert_eq!(results.look(&rel(7, 2), Some(12)).unwrap(), ResultFile::Missing);
    // Accepted after its shard was listed (another process, while the check
    // read its next page): present, not missing.
    let later = m.write(10, 1, b"twelve bytes").unwrap();
    assert_eq!(
        results.look(&later.rel_path, Some(12)).unwrap(),
        ResultFile::Present
    );

    fs::write(m.root().join(&cut.rel_path), b"twelve").unwrap();
    let outside = t.path().join("outside.txt");
    fs::write(&outside, b"twelve bytes").unwrap();
    let path = m.root().join(&linked.rel_path);
    fs::remove_file(&path).unwrap();
    symlink(&outside, &path).unwrap();
    fs::remove_dir_all(m.root().join(far.rel_path.rsplit_once('/').unwrap().0)).unwrap();
    // A fresh look lists the shards again.
    let mut results = ListedResults::new(&m);
    let mut look = |rel_path: &str| results.look(rel_path, Some(12));
    assert_eq!(look(&kept.rel_path).unwrap(), ResultFile::Present);
    assert_eq!(
        look(&cut.rel_path).unwrap(),
        ResultFile::Present,
        "not seen by a listing"
    );
    assert!(matches!(
        look(&linked.rel_path).unwrap(),
        ResultFile::Resized { .. }
    ));
    assert_eq!(
        look(&far.rel_path).unwrap(),
        ResultFile::Missing,
        "its shard is gone"
    );
    assert_eq!(look("nowhere/at/all.txt").unwrap(), ResultFile::Missing);
    for bad in [
        "../outside.txt",
        "/etc/passwd",
        "",
        "a/../../b",
        "s000/000/../../x",
    ] {
        assert!(
            matches!(look(bad), Err(MirrorError::UnsafePath { .. })),
            "{bad:?}"
        );
    }

    // A shard stuffed past what a listing keeps: its results are stat'ed.
    let shard = m.root().join(kept.rel_path.rsplit_once('/').unwrap().0);
    for i in 0..4_100 {
        fs::write(shard.join(format!("stuffing-{i}")), b"").unwrap();
    }
    let mut results = ListedResults::new(&m);
    let mut look = |rel_path: &str| results.look(rel_path, Some(12)).unwrap();
    assert_eq!(look(&kept.rel_path), ResultFile::Present);
    assert_eq!(look(&rel(7, 2)), ResultFile::Missing);
    assert!(
        matches!(
            look(&cut.rel_path),
            ResultFile::Resized {
                found: 6,
                recorded: 12
            }
        ),
        "a stat sees the cut"
    );
}

/// The shortcut for the mirror's own path shapes takes only paths whose
/// components are all normal ones (so it never lets through what the full
/// parse refuses), and takes the shapes the mirror writes.
#[test]
fn a_generated_result_path_is_one_the_full_check_would_take() {
    let normal = |p: &str| {
        Path::new(p)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
    };
    for p in [
        "s000/04a/218.g000001.txt",
        "s000/000/1.link.txt",
        "000/000/1/g000001.txt",
        "",
        ".",
        "..",
        "./a",
        "a/./b",
        "a/../b",
        "a//b",
        "/etc/passwd",
        "a/",
        "C:x",
        "C:\\x",
        "a\\..\\b",
        "é/x",
        "a b",
    ] {
        if super::is_generated(p) {
            assert!(
                !p.is_empty() && normal(p),
                "{p:?} taken by the shortcut but not plain"
            );
        }
    }
    assert!(super::is_generated("s000/04a/218.g000001.txt"));
    assert!(super::is_generated("000/000/1/g000001.txt"));
    assert!(!super::is_generated("a/../b") && !super::is_generated("C:\\x") && !super::is_generated(""));
    // A drive-relative name is one normal component on unix, and on Windows
    // would replace the root it is joined to: never a shortcut's.
    assert!(!super::is_generated("C:x"));
}
