//! A busy shard lock on both sides: a worker whose mirror write finds the
//! lock held by a stopped process (held exclusive, as a cleanup holds it)
//! gives up after a bounded wait and hands the document back without spending
//! an attempt, and is indexed once the lock is free; a cleanup that finds it
//! held shared by the pool's own writers is owed and done before the pool ends.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::TempStore;
use leasehold::mirror::Mirror;
use leasehold::pipeline::{Event, LeaseKeeper, Pipeline, PoolOptions, Processed, Ticks, Worker, WorkerPool};
use leasehold::source::DirSource;
use leasehold::{JobId, Status};
use leasehold_extract::ExtractorRegistry;

/// A store that knows one document, `a.txt`, discovered from a real
/// directory, and the pipeline over it and the mirror under `t`.
fn one_document(t: &TempStore) -> (leasehold::Store, Mirror, Pipeline) {
    let store = t.handle(60_000);
    let src_dir = t.dir.path().join("src");
    std::fs::create_dir(&src_dir).unwrap();
    std::fs::write(src_dir.join("a.txt"), b"the text of a").unwrap();
    let source = DirSource::open(&src_dir).unwrap();
    assert_eq!(source.discover(&store, 1 << 20).unwrap().new, 1);
    let mirror = Mirror::open(t.dir.path().join("mirror")).unwrap();
    let p = Pipeline {
        store: store.clone(),
        mirror: mirror.clone(),
        source: Arc::new(source),
        extractor: Arc::new(ExtractorRegistry::new(1 << 20)),
        max_input_bytes: 1 << 20,
        deliver_results: false,
    };
    (store, mirror, p)
}

#[test]
fn a_write_that_cannot_lock_parks_the_document_without_spending_an_attempt() {
    let t = TempStore::new();
    let (store, mirror, p) = one_document(&t);
    let id = store.job_by_key("a.txt").unwrap().unwrap().id;

    // Another process's cleanup, stopped while holding the document's shard lock.
    let doc = mirror.doc_dir(id).unwrap();
    std::fs::create_dir_all(&doc).unwrap();
    let held = std::fs::File::create(doc.join(".lock")).unwrap();
    fs2::FileExt::lock_exclusive(&held).unwrap();

    let (_ticks, ticks_rx) = crossbeam_channel::bounded::<()>(0);
    let keeper = LeaseKeeper::new(store.clone(), Ticks::Manual(ticks_rx));
    let worker = Arc::new(Worker::new(Arc::new(p), keeper, "w"));

    let w = worker.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(w.process_one()).unwrap());
    // A generous bound against hanging, not a timing assertion.
    let first = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the write waited for the lock without end")
        .unwrap();
    match &first {
        Processed::Retrying { error, .. } => assert!(error.contains(".lock"), "{error}"),
        other => panic!("expected the document handed back: {other:?}"),
    }
    let job = store.job(JobId(id)).unwrap().unwrap();
    assert_eq!(job.status, Status::Retrying);
    assert_eq!(job.attempts, 0, "a held lock is not the document's fault");

    drop(held);
    t.clock.advance(Duration::from_secs(3600));
    match worker.process_one().unwrap() {
        Processed::Indexed { .. } => {}
        other => panic!("expected indexed once the lock is free: {other:?}"),
    }
}

/// A worker's cleanup that finds the shard's lock held shared (another writer
/// of the same pool working in that shard) skips the document, as any busy
/// cleanup does; the pool owes it and does it once the lock is free, so a
/// finished run leaves no old generation for `gc` (issue 29's CI failure: the
/// rerun's two workers kept the lock shared, `doctor` found the leftovers).
#[test]
fn a_cleanup_skipped_behind_the_pools_own_writers_is_done_before_the_pool_ends() {
    let t = TempStore::new();
    let (store, mirror, p) = one_document(&t);

    // A first owner wrote its generation and lost its lease before completing.
    let late = store.claim("late").unwrap().unwrap();
    let id = late.id.0;
    mirror.write(id, late.fence, b"late text").unwrap();
    t.clock.advance(Duration::from_secs(61));

    // A writer holds the shard's lock shared, as the pool's other workers do.
    let writer = std::fs::File::open(mirror.doc_dir(id).unwrap().join(".lock")).unwrap();
    fs2::FileExt::lock_shared(&writer).unwrap();

    let (ticks, ticks_rx) = crossbeam_channel::bounded::<()>(0);
    let (events, events_rx) = crossbeam_channel::unbounded();
    let opts = PoolOptions {
        workers: 1,
        ticks: Ticks::Manual(ticks_rx),
        until_idle: true,
        idle_wait_cap: Duration::from_millis(50),
        ..PoolOptions::default()
    };
    let pool = WorkerPool::start(p, opts, Some(events)).unwrap();
    // A generous bound against hanging, not a timing assertion.
    let event: Event = events_rx.recv_timeout(Duration::from_secs(120)).unwrap();
    assert!(
        matches!(event.outcome, Ok(Processed::Indexed { .. })),
        "{:?}",
        event.outcome
    );
    assert_eq!(
        mirror.list_doc_files(id).unwrap().len(),
        2,
        "the cleanup ran behind the shared lock"
    );

    drop(writer);
    pool.join();
    drop(ticks);
    let left = mirror.list_doc_files(id).unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].ends_with(".g000002.txt"), "{left:?}");
}
