//! Mirror cleanup fenced on both editions: by the document's fs2 lock on
//! SQLite, by its row lock on PostgreSQL (DESIGN §5, §12). The same story
//! runs on both; what only the row lock does (keep a current writer's temp
//! files, give up on a row another transaction holds) runs on PostgreSQL.

use std::time::{Duration, Instant};

use crate::common;

use common::{Backend, TestDb};
use leasehold::mirror::{Fencing, Mirror};
use leasehold::pipeline::{cleanup, sweep};
use leasehold::{NewDoc, Store};

const LEASE_MS: u64 = 1_000;

/// The mirror as the command line opens it for this engine.
fn mirror_for(db: &TestDb, store: &Store) -> Mirror {
    let mirror = Mirror::open(db.dir.path().join("mirror")).unwrap();
    if store.locks_rows() {
        mirror.fenced_by(Fencing::RowLocks)
    } else {
        mirror
    }
}

fn files(mirror: &Mirror, id: i64) -> Vec<String> {
    let all = mirror.list_doc_files(id).unwrap();
    all.into_iter()
        .map(|p| {
            let name = p.rsplit('/').next().unwrap();
            // The shard's files are named after their document: `{id}.g…`.
            name.strip_prefix(&format!("{id}.")).unwrap_or(name).to_owned()
        })
        .collect()
}

fn a_late_workers_generation_goes_and_the_accepted_one_stays(backend: Backend) {
    let db = TestDb::new(backend);
    let store = db.handle(LEASE_MS);
    let mirror = mirror_for(&db, &store);
    store.enqueue(&NewDoc::new("a.txt", "v1")).unwrap();
    let late = store.claim("late").unwrap().unwrap();
    let id = late.id;
    mirror.write(id.0, late.fence, b"late text").unwrap();
    db.clock.advance(Duration::from_millis(LEASE_MS + 1));
    let owner = store.claim("owner").unwrap().unwrap();
    let written = mirror.write(id.0, owner.fence, b"owner text").unwrap();
    assert!(store
        .complete(
            owner,
            leasehold::Completion::new(&written.rel_path, &written.sha256)
        )
        .unwrap()
        .is_accepted());
    assert!(!store
        .complete(late, leasehold::Completion::new("x", "y"))
        .unwrap()
        .is_accepted());

    let report = cleanup(&store, &mirror, id).unwrap();
    assert_eq!(report.removed.len(), 1, "{report:?}");
    assert_eq!(files(&mirror, id.0), ["g000002.txt"]);
    // A whole sweep (gc) finds nothing more, and the accepted text is intact.
    let swept = sweep(&store, &mirror, false).unwrap();
    assert!(swept.removed.is_empty() && swept.busy.is_empty(), "{swept:?}");
    assert!(mirror.verify(&written.rel_path, &written.sha256).unwrap());
}

fn a_sweep_keeps_what_a_current_claim_wrote_and_a_dry_run_deletes_nothing(backend: Backend) {
    let db = TestDb::new(backend);
    let store = db.handle(LEASE_MS);
    let mirror = mirror_for(&db, &store);
    store.enqueue(&NewDoc::new("b.txt", "v1")).unwrap();
    let first = store.claim("w").unwrap().unwrap();
    mirror.write(first.id.0, first.fence, b"one").unwrap();
    assert!(store.release(first, "handed back").unwrap().is_accepted());
    let current = store.claim("w").unwrap().unwrap();
    mirror.write(current.id.0, current.fence, b"two").unwrap();

    let dry = sweep(&store, &mirror, true).unwrap();
    assert_eq!(dry.removed.len(), 1, "{dry:?}");
    assert_eq!(files(&mirror, current.id.0), ["g000001.txt", "g000002.txt"]);
    sweep(&store, &mirror, false).unwrap();
    assert_eq!(files(&mirror, current.id.0), ["g000002.txt"]);
}

on_both_backends!(
    a_late_workers_generation_goes_and_the_accepted_one_stays,
    a_sweep_keeps_what_a_current_claim_wrote_and_a_dry_run_deletes_nothing,
);

/// On PostgreSQL the current owner's writer holds no file lock: its temp
/// files are kept; a crashed claim's go.
#[test]
fn postgres_keeps_the_current_owners_temp_files() {
    let db = TestDb::new(Backend::Postgres);
    let store = db.handle(LEASE_MS);
    let mirror = mirror_for(&db, &store);
    store.enqueue(&NewDoc::new("c.txt", "v1")).unwrap();
    let old = store.claim("w").unwrap().unwrap();
    assert!(store.release(old, "again").unwrap().is_accepted());
    let current = store.claim("w").unwrap().unwrap();
    let dir = mirror.doc_dir(current.id.0).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let id = current.id.0;
    std::fs::write(dir.join(format!("{id}.g000002.tmp-writing")), b"half").unwrap();
    std::fs::write(dir.join(format!("{id}.g000001.tmp-crashed")), b"half").unwrap();
    cleanup(&store, &mirror, current.id).unwrap();
    assert_eq!(files(&mirror, current.id.0), ["g000002.tmp-writing"]);
}

/// A row another transaction holds (a stopped process mid-transaction) makes
/// the cleanup give up within its bound, counted; once the row is free the
/// cleanup does its work.
#[test]
fn postgres_gives_up_on_a_row_held_elsewhere_and_counts_it() {
    let db = TestDb::new(Backend::Postgres);
    let store = db.handle(LEASE_MS);
    let mirror = mirror_for(&db, &store);
    store.enqueue(&NewDoc::new("d.txt", "v1")).unwrap();
    let old = store.claim("w").unwrap().unwrap();
    let id = old.id;
    mirror.write(id.0, old.fence, b"stale").unwrap();
    assert!(store.release(old, "again").unwrap().is_accepted());

    let mut other = ::postgres::Client::connect(&db.location, ::postgres::NoTls).unwrap();
    let mut tx = other.transaction().unwrap();
    tx.query("SELECT id FROM jobs WHERE id = $1 FOR UPDATE", &[&id.0])
        .unwrap();
    // It returns while the row is still held elsewhere: it gave up, busy.
    let report = cleanup(&store, &mirror, id).unwrap();
    assert_eq!(report.busy, vec![id.0]);
    assert_eq!(mirror.cleanups_skipped(), 1);
    assert_eq!(files(&mirror, id.0), ["g000001.txt"]);
    tx.commit().unwrap();

    let report = cleanup(&store, &mirror, id).unwrap();
    assert!(report.busy.is_empty(), "{report:?}");
    assert!(files(&mirror, id.0).is_empty());
}

/// While a cleanup holds a document's row, no claim can take the document,
/// even one that is claimable: what the cleanup decided to keep cannot change
/// under it.
#[test]
fn postgres_no_claim_takes_a_document_while_its_cleanup_holds_it() {
    let db = TestDb::new(Backend::Postgres);
    let store = db.handle(LEASE_MS);
    store.enqueue(&NewDoc::new("e.txt", "v1")).unwrap();
    let id = leasehold::JobId(store.job_by_key("e.txt").unwrap().unwrap().id);
    let other = db.handle(LEASE_MS);
    let seen = store
        .with_job_locked(id, |job, _deadline| {
            assert!(job.is_some());
            other.claim("w").unwrap()
        })
        .unwrap();
    assert!(matches!(seen, leasehold::store::RowLock::Held(None)), "{seen:?}");
    // Once the cleanup is over the document is claimable again.
    assert!(other.claim("w").unwrap().is_some());
}

/// A fenced write behind a row that a stopped process holds gives up after
/// the session's lock wait instead of waiting for ever.
#[test]
fn postgres_a_fenced_write_behind_a_held_row_gives_up() {
    let db = TestDb::new(Backend::Postgres);
    let store = db.handle(LEASE_MS);
    store.enqueue(&NewDoc::new("f.txt", "v1")).unwrap();
    let claim = store.claim("w").unwrap().unwrap();
    let mut holder = ::postgres::Client::connect(&db.location, ::postgres::NoTls).unwrap();
    let mut tx = holder.transaction().unwrap();
    tx.query("SELECT id FROM jobs WHERE id = $1 FOR UPDATE", &[&claim.id.0])
        .unwrap();
    // The write runs on its own thread; the test waits for its answer while
    // the row is still held (the deadline only bounds a hang).
    let (done, answer) = std::sync::mpsc::channel();
    let writer = store.clone();
    let start = Instant::now();
    std::thread::spawn(move || {
        let answer = writer.complete(claim, leasehold::Completion::new("r", "s"));
        let _ = done.send((answer, start.elapsed()));
    });
    let (answer, waited) = answer
        .recv_timeout(Duration::from_secs(120))
        .expect("the fenced write gave up while the row was still held");
    assert!(answer.is_err(), "{answer:?}");
    assert!(waited >= leasehold::store::LOCK_WAIT, "{waited:?}");
    tx.rollback().unwrap();
}
