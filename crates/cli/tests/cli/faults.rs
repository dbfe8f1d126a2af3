//! Faults and bad input on real parts: a full disk under the mirror (injected,
//! and a real 1 MiB tmpfs when the machine allows mounting one), hundreds of
//! corrupted database files, read-only and unusable locations through the
//! binary, and document keys and file names that try to leave the mirror.
//!
//! What every test holds to (DESIGN §7): a clear, typed error naming the thing;
//! nothing lost; no panic; no deletion in the mirror while the store is in error;
//! nothing written outside the mirror root.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;

use leasehold::extract::{ExtractError, Extractor};
use leasehold::mirror::{Mirror, Written};
use leasehold::pipeline::{LeaseKeeper, Ticks};
use leasehold::pipeline::{Pipeline, Processed, Worker};
use leasehold::source::{Source, SourceError};
use leasehold::testing::Fault;
use leasehold::{Error, JobId, ManualClock, NewDoc, Status, Store, StoreOptions};
use sha2::{Digest, Sha256};

use crate::common::output::stderr;
use crate::common::BIN;

// ----- test parts -----

/// Returns bytes for any key at all: the key itself, quoted, plus a fixed body.
struct AnyKey;

impl Source for AnyKey {
    fn fetch(&self, key: &str, _max: u64) -> Result<Vec<u8>, SourceError> {
        Ok(format!("content of {key:?}\n{}", "body text ".repeat(50)).into_bytes())
    }
}

/// The bytes, as text.
struct Plain;

impl Extractor for Plain {
    fn extract(&self, _name: &str, bytes: &[u8], _stop: &AtomicBool) -> Result<String, ExtractError> {
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// A store on a manual clock and the heartbeat ticks of the workers built on it
/// (the heartbeat never ticks: leases are renewed only before each stage).
struct Rig {
    clock: ManualClock,
    store: Store,
    _ticks: Vec<Sender<()>>,
}

impl Rig {
    fn new(db: &Path) -> Rig {
        let clock = ManualClock::new(1_000_000);
        let opts = StoreOptions::default()
            .lease(Duration::from_secs(30))
            .clock(Arc::new(clock.clone()))
            .checkpoint_every(None);
        let store = Store::open(db, opts).expect("open store");
        Rig {
            clock,
            store,
            _ticks: Vec::new(),
        }
    }

    fn worker(&mut self, mirror: &Mirror, source: Arc<dyn Source>) -> Worker {
        let (tx, rx) = crossbeam_channel::bounded(0);
        self._ticks.push(tx);
        let pipeline = Pipeline {
            store: self.store.clone(),
            mirror: mirror.clone(),
            source,
            extractor: Arc::new(Plain),
            max_input_bytes: 1 << 20,
            deliver_results: false,
        };
        let keeper = LeaseKeeper::new(self.store.clone(), Ticks::Manual(rx));
        Worker::new(Arc::new(pipeline), keeper, "faults")
    }
}

fn leasehold(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run leasehold")
}

/// Every path under `root` (not following links), with file contents.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    walkdir::WalkDir::new(root)
        .follow_links(false)
        .into_iter()
        .map(|e| e.expect("walk"))
        .map(|e| {
            let bytes = e.file_type().is_file().then(|| std::fs::read(e.path()).unwrap());
            (e.path().to_path_buf(), bytes)
        })
        .collect()
}

// ----- a full disk under the mirror -----

/// One injected mirror fault through a worker: a typed error naming a path under
/// the mirror, the document left retrying (claimable after its backoff), no file
/// at its final path or in temp, a sound store; then the retry succeeds.
fn mirror_fault_leaves_the_document_claimable(fault: Fault) {
    let tmp = tempfile::tempdir().unwrap();
    let mut rig = Rig::new(&tmp.path().join("q.db"));
    let healthy = Mirror::open(tmp.path().join("mirror")).unwrap();
    let id = rig.store.enqueue(&NewDoc::new("report.txt", "v1")).unwrap().id();

    let direct = healthy
        .clone()
        .with_fault(Some(fault))
        .write(999, 1, b"x")
        .unwrap_err();
    assert!(
        direct.to_string().contains(&healthy.root().display().to_string()),
        "{direct}"
    );
    assert_eq!(direct.is_disk_full(), fault == Fault::DiskFullOnWrite, "{direct}");

    let failing = rig.worker(&healthy.clone().with_fault(Some(fault)), Arc::new(AnyKey));
    let (at, error) = match failing.process_one().unwrap() {
        Processed::Retrying { key, at, error } => {
            assert_eq!(key, "report.txt");
            (at, error)
        }
        other => panic!("{fault:?}: expected Retrying, got {other:?}"),
    };
    assert!(
        error.contains(&healthy.root().display().to_string()),
        "{fault:?}: {error}"
    );
    // The key is beside the reason (above), not repeated inside it.
    assert!(!error.contains("report.txt"), "{error}");
    let job = rig.store.job(id).unwrap().unwrap();
    assert_eq!(job.status, Status::Retrying);
    assert_eq!(job.last_error.as_deref(), Some(error.as_str()));
    assert!(at > rig.store.now(), "retried with a backoff");
    assert!(
        healthy.list_doc_files(id.0).unwrap().is_empty(),
        "{fault:?}: a file was left: {:?}",
        healthy.list_doc_files(id.0)
    );
    assert!(rig.store.check_integrity(true).unwrap().is_empty());
    assert!(
        matches!(failing.process_one().unwrap(), Processed::Idle),
        "not before retry_at"
    );

    rig.clock.set(at);
    let fixed = rig.worker(&healthy, Arc::new(AnyKey));
    let path = match fixed.process_one().unwrap() {
        Processed::Indexed { path, .. } => path,
        other => panic!("{fault:?}: retry: {other:?}"),
    };
    let job = rig.store.job(id).unwrap().unwrap();
    assert!(healthy.verify(&path, job.checksum.as_deref().unwrap()).unwrap());
    assert_eq!(healthy.list_doc_files(id.0).unwrap(), vec![path]);
}

#[test]
fn injected_disk_full_on_write() {
    mirror_fault_leaves_the_document_claimable(Fault::DiskFullOnWrite);
}

#[test]
fn injected_fsync_failure() {
    mirror_fault_leaves_the_document_claimable(Fault::FailFsync);
}

#[test]
fn injected_directory_fsync_failure() {
    mirror_fault_leaves_the_document_claimable(Fault::FailDirFsync);
}

/// A tmpfs of `size`, unmounted (lazily) on drop. `None` when mounting is not
/// allowed here (not root, no CAP_SYS_ADMIN, a restrictive container).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let target = CString::new(dir.path().as_os_str().as_bytes()).ok()?;
        let data = CString::new(format!("size={size},mode=0700")).unwrap();
        // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            println!("note: cannot mount a tmpfs here ({err}); skipping the real ENOSPC variant");
            return None;
        }
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write a filler file until the file system says it is full.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0xA5u8; 16 * 1024];
        loop {
            match f.write_all(&chunk).and_then(|()| f.sync_all()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return path,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if let Ok(target) = CString::new(self.path().as_os_str().as_bytes()) {
            // SAFETY: a valid path string; MNT_DETACH so a leaked fd cannot block it.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

#[test]
fn real_enospc_under_the_mirror() {
    let Some(fs) = Tmpfs::mount("1m") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut rig = Rig::new(&tmp.path().join("q.db"));
    let mirror = Mirror::open(fs.path().join("mirror")).unwrap();
    let id = rig.store.enqueue(&NewDoc::new("big.txt", "v1")).unwrap().id();
    let filler = fs.fill();

    let direct = mirror.write(999, 1, &[b'x'; 64 * 1024]).unwrap_err();
    assert!(direct.is_disk_full(), "{direct:?}");
    assert!(
        direct.to_string().contains(&mirror.root().display().to_string()),
        "{direct}"
    );
    assert!(
        mirror.list_doc_files(999).unwrap().is_empty(),
        "a partial file was left"
    );

    let worker = rig.worker(&mirror, Arc::new(AnyKey));
    let (at, error) = match worker.process_one().unwrap() {
        Processed::Retrying { at, error, .. } => (at, error),
        other => panic!("expected Retrying on a full disk, got {other:?}"),
    };
    assert!(error.contains("No space left on device"), "{error}");
    assert!(error.contains(&mirror.root().display().to_string()), "{error}");
    let left: Vec<_> = mirror.list_doc_files(id.0).unwrap();
    assert!(
        left.is_empty(),
        "partial or temp file left on a full disk: {left:?}"
    );
    assert!(rig.store.check_integrity(true).unwrap().is_empty());
    assert_eq!(rig.store.job(id).unwrap().unwrap().status, Status::Retrying);

    std::fs::remove_file(filler).unwrap();
    rig.clock.set(at);
    match worker.process_one().unwrap() {
        Processed::Indexed { path, .. } => {
            let job = rig.store.job(id).unwrap().unwrap();
            assert!(mirror.verify(&path, job.checksum.as_deref().unwrap()).unwrap());
        }
        other => panic!("after space was freed: {other:?}"),
    }
}

#[test]
fn real_enospc_under_the_database() {
    let Some(fs) = Tmpfs::mount("4m") else { return };
    let db = fs.path().join("q.db");
    let store = Store::open(&db, StoreOptions::default().checkpoint_every(None)).unwrap();
    store.enqueue(&NewDoc::new("first.txt", "v1")).unwrap();
    let filler = fs.fill();
    // About 1.5 MiB of rows: the WAL must grow, and cannot until the filler goes.
    let many: Vec<NewDoc> = (0..3000)
        .map(|i| NewDoc::new(format!("docs/{i:05}/{}", "k".repeat(200)), "v1"))
        .collect();
    let err = store.enqueue_many(&many).expect_err("the disk is full");
    assert!(err.is_disk_full(), "{err:?}");
    assert!(err.to_string().contains(&db.display().to_string()), "{err}");
    assert_eq!(
        store.counts().unwrap().total(),
        1,
        "a failed write left part of itself"
    );

    std::fs::remove_file(filler).unwrap();
    store.enqueue_many(&many).expect("room again");
    assert_eq!(store.counts().unwrap().total(), 3001);
    assert!(store.check_integrity(true).unwrap().is_empty());
}

// ----- corrupt database files -----

/// A populated store, checkpointed into its main file, and a mirror whose
/// accepted results are real plus leftovers a sweep would delete.
struct Corpus {
    dir: tempfile::TempDir,
    pristine: Vec<u8>,
    /// A pristine copy of the mirror, to restore after a legitimate sweep.
    mirror_copy: PathBuf,
}

impl Corpus {
    fn db(&self) -> PathBuf {
        self.dir.path().join("trial.db")
    }
    fn mirror(&self) -> PathBuf {
        self.dir.path().join("mirror")
    }

    fn build() -> Corpus {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("trial.db");
        let mirror = Mirror::open(dir.path().join("mirror")).unwrap();
        {
            let store = Store::open(&db, StoreOptions::default()).unwrap();
            let docs: Vec<_> = (0..400)
                .map(|i| NewDoc::new(format!("dir-{}/doc-{i:04}.txt", i % 7), "v1"))
                .collect();
            store.enqueue_many(&docs).unwrap();
            // Real files for the first 80 documents only: every mirror operation is a
            // handful of metadata syscalls, and 500 trials multiply them.
            for (n, c) in store.claim_batch("w", 260).unwrap().into_iter().enumerate() {
                let text = format!("text {n}");
                let w = if n < 80 {
                    mirror.write(c.id.0, c.fence, text.as_bytes()).unwrap()
                } else {
                    Written {
                        rel_path: Mirror::generation_rel_path(c.id.0, c.fence).unwrap(),
                        sha256: hex::encode(Sha256::digest(text.as_bytes())),
                        len: text.len() as u64,
                    }
                };
                if n < 200 {
                    let (id, fence) = (c.id.0, c.fence);
                    assert!(store
                        .complete(c, leasehold::Completion::new(&w.rel_path, &w.sha256))
                        .unwrap()
                        .is_accepted());
                    // A leftover generation that a sweep of a sound store removes.
                    if n < 80 && n % 4 == 0 {
                        mirror.write(id, fence + 5, b"stale").unwrap();
                    }
                } else if n < 230 {
                    let _ = store.fail(c, "failed on purpose", false).unwrap();
                }
            }
        }
        let c = rusqlite::Connection::open(&db).unwrap();
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        drop(c);
        let pristine = std::fs::read(&db).unwrap();
        let mirror_copy = dir.path().join("mirror-copy");
        copy_tree(mirror.root(), &mirror_copy);
        Corpus {
            dir,
            pristine,
            mirror_copy,
        }
    }

    fn install(&self, bytes: &[u8]) {
        for ext in ["db-wal", "db-shm"] {
            let _ = std::fs::remove_file(self.db().with_extension(ext));
        }
        std::fs::write(self.db(), bytes).unwrap();
    }

    /// Put back what a sweep removed (it deletes and prunes; it never rewrites).
    fn restore_mirror(&self) {
        copy_tree(&self.mirror_copy, &self.mirror());
    }
}

/// Copy every directory and file of `from` that `to` lacks.
fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let dest = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else if std::fs::symlink_metadata(&dest).is_err() {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// One way of damaging the file, chosen by the trial number.
fn damage(pristine: &[u8], trial: usize, rng: &mut fastrand::Rng) -> (Vec<u8>, String) {
    let mut b = pristine.to_vec();
    let page = usize::from(u16::from_be_bytes([b[16], b[17]])).max(512);
    let pages = b.len() / page;
    match trial % 4 {
        0 => {
            let k = rng.usize(1..=4);
            for _ in 0..k {
                let at = rng.usize(..b.len());
                b[at] ^= 1 << rng.u8(0..8);
            }
            (b, format!("{k} random bit flip(s)"))
        }
        1 => {
            // Flips where structure lives: the file header and b-tree page headers.
            let p = rng.usize(..pages);
            let base = if p == 0 {
                rng.usize(0..100)
            } else {
                p * page + rng.usize(0..12)
            };
            b[base] ^= 1 << rng.u8(0..8);
            (b, format!("bit flip at structural byte {base}"))
        }
        2 => {
            let len = if rng.bool() {
                rng.usize(..b.len())
            } else {
                rng.usize(..pages) * page
            };
            b.truncate(len);
            (b, format!("truncated to {len} bytes"))
        }
        _ => {
            if rng.bool() {
                let start = rng.usize(0..100);
                let end = (start + rng.usize(1..=32)).min(100);
                rng.fill(&mut b[start..end]);
                (b, format!("header bytes {start}..{end} smashed"))
            } else {
                let p = rng.usize(..pages);
                rng.fill(&mut b[p * page..(p + 1) * page]);
                (b, format!("page {p} smashed"))
            }
        }
    }
}

/// What one trial found in-process.
enum Verdict {
    /// `Store::open` refused the file.
    OpenRefused(Error),
    /// It opened, but a first use failed (with this error) or the quick check found damage.
    InError(Option<Error>),
    /// Sound enough to sweep; the sweep ran (its own error, if any, is typed).
    Swept,
}

fn trial_in_process(c: &Corpus) -> Verdict {
    let opts = StoreOptions::default().checkpoint_every(None).pool_size(2);
    let store = match Store::open(c.db(), opts) {
        Ok(s) => s,
        Err(e) => return Verdict::OpenRefused(e),
    };
    let first_use = store
        .counts()
        .and_then(|_| store.job(JobId(1)))
        .and_then(|_| store.next_claimable_at())
        .and_then(|_| store.check_integrity(false));
    match first_use {
        Err(e) => return Verdict::InError(Some(e)),
        Ok(problems) if !problems.is_empty() => return Verdict::InError(None),
        Ok(_) => {}
    }
    let mirror = Mirror::open(c.mirror()).unwrap();
    let _ = leasehold::pipeline::sweep(&store, &mirror, false);
    Verdict::Swept
}

#[test]
fn corrupt_database_files_never_panic_and_never_cost_a_mirror_file() {
    const TRIALS: usize = 520;
    let c = Corpus::build();
    let mut rng = fastrand::Rng::with_seed(0x1ea5_e401d);
    let (mut refused, mut in_error, mut swept, mut gc_checked) = (0, 0, 0, 0);
    let db_name = c.db().display().to_string();
    for trial in 0..TRIALS {
        let (bytes, what) = damage(&c.pristine, trial, &mut rng);
        c.install(&bytes);
        let verdict = catch_unwind(AssertUnwindSafe(|| trial_in_process(&c)))
            .unwrap_or_else(|_| panic!("trial {trial} ({what}): the library panicked"));
        match verdict {
            Verdict::OpenRefused(e) => {
                refused += 1;
                assert!(e.to_string().contains(&db_name), "trial {trial} ({what}): {e}");
                if e.is_corrupt() {
                    assert_eq!(
                        std::fs::read(c.db()).unwrap(),
                        bytes,
                        "trial {trial} ({what}): {e}"
                    );
                }
            }
            Verdict::InError(e) => {
                in_error += 1;
                if let Some(e) = e {
                    assert!(e.to_string().contains(&db_name), "trial {trial} ({what}): {e}");
                }
            }
            Verdict::Swept => {
                swept += 1;
                c.restore_mirror();
                continue;
            }
        }
        // The store is in error: `gc` must refuse and delete nothing. The binary
        // is slow next to the in-process trial, so check a sample.
        if (refused + in_error) % 6 == 1 {
            gc_checked += 1;
            let before = snapshot(&c.mirror());
            let out = leasehold(&["--db", &db_name, "--mirror", c.mirror().to_str().unwrap(), "gc"]);
            let err = stderr(&out);
            assert!(!err.contains("panicked"), "trial {trial} ({what}): {err}");
            assert_ne!(
                out.status.code(),
                Some(0),
                "trial {trial} ({what}): gc swept a damaged store"
            );
            // Only the first line: `gc` quotes SQLite's quick_check line, which may hold
            // a newline (reported; the contract wants one line).
            let first = err.lines().next().unwrap_or("");
            assert!(first.contains(&db_name), "trial {trial} ({what}): {err}");
            assert!(
                snapshot(&c.mirror()) == before,
                "trial {trial} ({what}): gc changed the mirror"
            );
        }
    }
    println!("{TRIALS} trials: {refused} refused at open, {in_error} in error at first use, {swept} sound; gc checked {gc_checked}");
    assert!(
        refused + in_error > TRIALS / 3,
        "the damage was too gentle to prove anything"
    );
    assert!(gc_checked >= 40);
}

// ----- unusable locations, refused at start -----

fn assert_refused(args: &[&str], names: &str) {
    assert_refused_with(2, args, names);
}

/// A read-only data directory is what the command met, not how it was
/// asked: exit 1, in one line naming it.
fn assert_read_only_refused(args: &[&str], names: &str) {
    assert_refused_with(1, args, names);
}

fn assert_refused_with(code: i32, args: &[&str], names: &str) {
    let out = leasehold(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(names), "{args:?}: {names:?} not in {err}");
}

/// A data directory with a discovered corpus, and the corpus.
fn discovered() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir(&corpus).unwrap();
    std::fs::write(corpus.join("a.txt"), "alpha").unwrap();
    let data = tmp.path().join("data");
    let out = leasehold(&[
        "--data",
        data.to_str().unwrap(),
        "discover",
        corpus.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    (tmp, data, corpus)
}

#[test]
fn a_read_only_database_file_is_refused_at_start() {
    let (_tmp, data, corpus) = discovered();
    let db = data.join("leasehold.db");
    let before = std::fs::read(&db).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    let d = data.to_str().unwrap();
    assert_read_only_refused(
        &["--data", d, "run", corpus.to_str().unwrap()],
        &db.display().to_string(),
    );
    assert_read_only_refused(&["--data", d, "gc"], &db.display().to_string());
    assert_eq!(std::fs::read(&db).unwrap(), before);
}

#[test]
fn a_read_only_database_directory_is_refused_at_start() {
    let (tmp, data, corpus) = discovered();
    let c = corpus.to_str().unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o555)).unwrap();
    assert_read_only_refused(
        &["--data", data.to_str().unwrap(), "run", c],
        &data.display().to_string(),
    );
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();

    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let db = ro.join("new.db");
    let m = tmp.path().join("m");
    let args = [
        "--db",
        db.to_str().unwrap(),
        "--mirror",
        m.to_str().unwrap(),
        "run",
        c,
    ];
    assert_read_only_refused(&args, &ro.display().to_string());
    assert!(!db.exists(), "a database was created in a read-only directory");
}

#[test]
fn unusable_mirror_roots_are_refused_at_start() {
    let (tmp, data, corpus) = discovered();
    let (d, c) = (data.to_str().unwrap(), corpus.to_str().unwrap());
    let real = tmp.path().join("real-mirror");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.path().join("link-mirror");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let under_file = file.join("mirror");
    let mut roots = vec![link.clone(), file.clone(), under_file];
    if Path::new("/proc/self").exists() {
        // Nobody, root included, can create files in /proc.
        roots.push(PathBuf::from("/proc"));
        roots.push(PathBuf::from("/proc/leasehold-mirror"));
    }
    for root in &roots {
        let r = root.to_str().unwrap();
        assert_refused(&["--data", d, "--mirror", r, "run", c], r);
    }
    assert!(
        std::fs::read_dir(&real).unwrap().next().is_none(),
        "wrote through the symlink"
    );
    let db = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    let indexed: i64 = db
        .query_row("SELECT count(*) FROM jobs WHERE status = 'indexed'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(indexed, 0, "work started before the mirror was checked");
}

// ----- keys and names that try to escape -----

/// Paths that appeared under `root` between two snapshots, and paths whose
/// contents changed, outside `allowed` (and the database files).
fn escaped(
    before: &BTreeMap<PathBuf, Option<Vec<u8>>>,
    after: &BTreeMap<PathBuf, Option<Vec<u8>>>,
    allowed: &Path,
    db: &Path,
) -> Vec<PathBuf> {
    let db_files: BTreeSet<PathBuf> = ["", "-wal", "-shm", "-next", "-write", "-next.1", "-write.1"]
        .iter()
        .map(|s| PathBuf::from(format!("{}{s}", db.display())))
        .collect();
    after
        .iter()
        .filter(|(p, _)| !p.starts_with(allowed) && !db_files.contains(*p))
        .filter(|(p, bytes)| before.get(*p) != Some(bytes))
        .map(|(p, _)| p.clone())
        .chain(before.keys().filter(|p| !after.contains_key(*p)).cloned())
        .collect()
}

#[test]
fn hostile_keys_never_reach_outside_the_mirror() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("canary"), "do not touch").unwrap();
    let canary = outside.join("canary").display().to_string();
    let db = tmp.path().join("q.db");
    let mut rig = Rig::new(&db);
    let mirror = Mirror::open(tmp.path().join("mirror")).unwrap();

    let long_name = "n".repeat(300);
    let deep = "d/".repeat(400) + "x";
    let climb = "../".repeat(40) + "tmp/escaped";
    let mut keys: Vec<String> = vec![
        "../x".into(),
        "../../outside/canary".into(),
        climb,
        "/etc/passwd".into(),
        canary,
        "/".into(),
        ".".into(),
        "..".into(),
        "./../x".into(),
        "mirror/../outside/new".into(),
        "000/000/1/g000002.txt".into(),
        "s000/000/1.g000002.txt".into(),
        "1.g000001.tmp-1-1-1".into(),
        ".lock".into(),
        ".tmp-g000001-1-1-1".into(),
        "hex:2e2e2f78".into(),
        "ctrl\u{1}\u{1b}[31mred\r\n\t.txt".into(),
        "ключ/文件 🗂.txt".into(),
        "C:\\Windows\\system32".into(),
        long_name,
        deep,
        "x".repeat(5000),
    ];
    let refused = rig
        .store
        .enqueue(&NewDoc::new("nul\0byte", "v1"))
        .expect_err("a key with NUL is refused");
    assert!(matches!(refused, Error::InvalidInput { .. }), "{refused:?}");
    assert!(
        rig.store.enqueue(&NewDoc::new("", "v1")).is_err(),
        "an empty key is refused"
    );
    let mut ids = Vec::new();
    for k in &keys {
        ids.push(rig.store.enqueue(&NewDoc::new(k.clone(), "v1")).unwrap().id());
    }
    keys.sort();
    keys.dedup();

    let before = snapshot(tmp.path());
    let worker = rig.worker(&mirror, Arc::new(AnyKey));
    let mut indexed = 0;
    loop {
        match worker.process_one().unwrap() {
            Processed::Idle => break,
            Processed::Indexed { .. } => indexed += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(indexed, keys.len());
    for id in ids {
        let job = rig.store.job(id).unwrap().unwrap();
        let path = job.result_path.as_deref().unwrap();
        assert_eq!(
            path,
            Mirror::generation_rel_path(id.0, job.fence).unwrap(),
            "{:?}",
            job.key
        );
        let text = String::from_utf8(mirror.read(path).unwrap()).unwrap();
        assert!(
            text.starts_with(&format!("content of {:?}", job.key)),
            "{:?}",
            job.key
        );
    }
    let after = snapshot(tmp.path());
    let bad = escaped(&before, &after, mirror.root(), &db);
    assert!(bad.is_empty(), "written or removed outside the mirror: {bad:?}");
    assert!(after.len() > before.len(), "nothing was written at all");
}

/// Create `name` under `dir` if the OS allows it; `false` (with a note) if not.
fn try_create(dir: &Path, name: &[u8], body: &str) -> bool {
    let path = dir.join(OsString::from_vec(name.to_vec()));
    if let Some(parent) = path.parent() {
        if std::fs::create_dir_all(parent).is_err() {
            println!("note: cannot create the directories of {path:?}; skipped");
            return false;
        }
    }
    match std::fs::write(&path, body) {
        Ok(()) => true,
        Err(e) => {
            println!("note: the OS refuses the file name {:?} ({e}); skipped", path);
            false
        }
    }
}

#[test]
fn odd_file_names_stay_inside_the_mirror_through_the_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "SECRET-OUTSIDE-THE-ROOT").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), corpus.join("link-out.txt")).unwrap();

    let long = format!("{}.txt", "n".repeat(251));
    let too_long = format!("{}.txt", "m".repeat(296));
    let deep = format!("{}/{}/{}.txt", "d".repeat(120), "e".repeat(120), "f".repeat(120));
    let names: Vec<Vec<u8>> = vec![
        b"bad\xff\xfename.txt".to_vec(),
        b"ctrl\x01\x1b[31m.txt".to_vec(),
        b"new\nline.txt".to_vec(),
        b"tab\tand\rcr.txt".to_vec(),
        b"-rf .txt".to_vec(),
        b"a..b.txt".to_vec(),
        b"back\\slash.txt".to_vec(),
        b"hex:2e2e2f78.txt".to_vec(),
        "ключ 文件 🗂.txt".as_bytes().to_vec(),
        long.into_bytes(),
        too_long.into_bytes(),
        deep.into_bytes(),
    ];
    let mut made = Vec::new();
    for (i, n) in names.iter().enumerate() {
        if try_create(&corpus, n, &format!("body of file number {i}\n")) {
            made.push(i);
        }
    }
    assert!(made.len() >= 10, "too few odd names could be made: {made:?}");

    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let before = snapshot(tmp.path());
    let out = leasehold(&[
        "--data",
        data.to_str().unwrap(),
        "run",
        corpus.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["indexed"].as_u64(), Some(made.len() as u64), "{summary}");
    assert_eq!(summary["dead"], 1, "the link out of the root: {summary}");

    let after = snapshot(tmp.path());
    let bad = escaped(&before, &after, &data.join("mirror"), &data.join("leasehold.db"));
    assert!(bad.is_empty(), "written or removed outside the mirror: {bad:?}");
    let mut texts = Vec::new();
    for (path, bytes) in &after {
        if path.starts_with(data.join("mirror")) {
            if let Some(b) = bytes {
                texts.push(String::from_utf8_lossy(b).into_owned());
            }
        }
    }
    assert!(
        texts.iter().all(|t| !t.contains("SECRET")),
        "a file outside the root was read"
    );
    for i in made {
        let want = format!("body of file number {i}");
        assert!(
            texts.iter().any(|t| t.contains(&want)),
            "{want:?} not in the mirror"
        );
    }
}
