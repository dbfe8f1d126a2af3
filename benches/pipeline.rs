//! The whole pipeline against its floors, in one run, plus peak memory.
//!
//! Run: `cargo bench --bench pipeline` (add `-- --quick` for a smaller corpus and
//! no memory runs, or `-- --memory-only`). Prints, for one generated corpus of small text files:
//! - S: the store's claim + complete rate (1 thread, no work);
//! - M: the mirror's write + fsync rate for the same texts (1 thread);
//! - P(w): the pipeline's rate with a no-op extractor and w workers (1, 2, 4);
//! - the ratios P(1) / (1 / (1/S + 1/M)) and P(4) / P(1);
//! - peak RSS of a whole `run` (discover + work) over 10,000 vs 100,000 documents,
//!   each measured in a child process.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::extract::{ExtractError, Extractor};
use leasehold::mirror::Mirror;
use leasehold::source::DirSource;
use leasehold::worker::{Pipeline, PoolOptions, WorkerPool};
use leasehold::{NewDoc, Store, StoreOptions};

const CHILD_ENV: &str = "LEASEHOLD_BENCH_MEMORY_DOCS";

/// Passes the bytes through: the bench measures the machinery, not parsing.
struct NoopExtractor;

impl Extractor for NoopExtractor {
    fn extract(&self, _name: &str, bytes: &[u8], _stop: &AtomicBool) -> Result<String, ExtractError> {
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

fn text(i: usize) -> String {
    format!("document {i}\n{}\n", "lorem ipsum dolor sit amet ".repeat(30))
}

fn make_corpus(dir: &Path, n: usize) {
    for i in 0..n {
        let sub = dir.join(format!("d{:03}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&sub).unwrap();
        }
        std::fs::write(sub.join(format!("f{i:06}.txt")), text(i)).unwrap();
    }
}

fn store_options() -> StoreOptions {
    StoreOptions::default().lease(Duration::from_secs(30))
}

fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

/// S: claim + complete, one thread, nothing else.
fn store_rate(dir: &tempfile::TempDir, n: usize) -> f64 {
    let store = Store::open(dir.path().join("s.db"), store_options()).unwrap();
    let docs: Vec<_> = (0..n).map(|i| NewDoc::new(format!("k{i}"), "v")).collect();
    store.enqueue_many(&docs).unwrap();
    let start = Instant::now();
    while let Some(c) = store.claim("w").unwrap() {
        assert!(store.complete(&c, "r", "s").unwrap().is_accepted());
    }
    rate(n, start.elapsed())
}

/// M: atomic write + fsync of the same texts, one thread.
fn mirror_rate(dir: &tempfile::TempDir, n: usize) -> f64 {
    let mirror = Mirror::open(dir.path().join("m")).unwrap();
    let start = Instant::now();
    for i in 0..n {
        mirror.write(i as i64 + 1, 1, text(i).as_bytes()).unwrap();
    }
    rate(n, start.elapsed())
}

/// Discover `corpus` into a fresh data directory and run a pool to idle;
/// returns (documents indexed, time spent working).
fn pipeline_run(corpus: &Path, data: &Path, workers: usize) -> (u64, Duration) {
    let store = Store::open(data.join("p.db"), store_options()).unwrap();
    let source = DirSource::open(corpus).unwrap();
    source.discover(&store, 1 << 20).unwrap();
    let pipeline = Pipeline {
        store: store.clone(),
        mirror: Mirror::open(data.join("mirror")).unwrap(),
        source: Arc::new(source),
        extractor: Arc::new(NoopExtractor),
        max_input_bytes: 1 << 20,
        deliver_results: false,
    };
    let opts = PoolOptions {
        workers,
        until_idle: true,
        ..PoolOptions::default()
    };
    let start = Instant::now();
    WorkerPool::start(pipeline, opts, None).join();
    let took = start.elapsed();
    (store.counts().unwrap().indexed, took)
}

fn pipeline_rate(data: &tempfile::TempDir, corpus: &Path, n: usize, workers: usize) -> f64 {
    let (indexed, took) = pipeline_run(corpus, data.path(), workers);
    assert_eq!(indexed as usize, n, "every document indexed");
    rate(n, took)
}

/// Child: a whole run over `n` documents; prints the peak RSS.
fn memory_child(n: usize) {
    let corpus = tempfile::tempdir().unwrap();
    make_corpus(corpus.path(), n);
    let data = tempfile::tempdir().unwrap();
    let (indexed, _) = pipeline_run(corpus.path(), data.path(), 4);
    assert_eq!(indexed as usize, n);
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    println!("MAXRSS_KB {}", usage.ru_maxrss);
}

fn peak_rss_kb(n: usize) -> u64 {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, n.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "memory child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("MAXRSS_KB "))
        .and_then(|v| v.trim().parse().ok())
        .expect("child printed MAXRSS_KB")
}

fn main() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        memory_child(n.parse().unwrap());
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if std::env::args().any(|a| a == "--memory-only") {
        report_memory();
        return;
    }
    let n = if quick { 500 } else { 3000 };
    let corpus = tempfile::tempdir().unwrap();
    make_corpus(corpus.path(), n);

    // Every directory lives until the end: deleting thousands of inodes between
    // measurements makes ext4's inode allocation slower for the ones that follow.
    let dirs: Vec<tempfile::TempDir> = (0..5).map(|_| tempfile::tempdir().unwrap()).collect();
    let s = store_rate(&dirs[0], n);
    let m = mirror_rate(&dirs[1], n);
    let floor = 1.0 / (1.0 / s + 1.0 / m);
    println!("corpus: {n} text files of {} bytes", text(0).len());
    println!("S  store claim+complete, 1 thread : {s:>9.0} docs/s");
    println!("M  mirror write+fsync, 1 thread   : {m:>9.0} docs/s");
    println!("   serial floor 1/(1/S+1/M)       : {floor:>9.0} docs/s");
    let mut p = Vec::new();
    for (workers, dir) in [1, 2, 4].into_iter().zip(&dirs[2..]) {
        let r = pipeline_rate(dir, corpus.path(), n, workers);
        println!("P({workers}) pipeline, no-op extractor   : {r:>9.0} docs/s");
        p.push(r);
    }
    println!("ratio P(1) / floor  = {:.2}  (target >= 0.70)", p[0] / floor);
    println!("ratio P(4) / P(1)   = {:.2}  (target >= 2.00)", p[2] / p[0]);
    if !quick {
        report_memory();
    }
}

fn report_memory() {
    let small = peak_rss_kb(10_000);
    let large = peak_rss_kb(100_000);
    println!("peak RSS, run of  10,000 docs: {small} KiB");
    println!("peak RSS, run of 100,000 docs: {large} KiB");
    println!("ratio = {:.2}  (target <= 1.20)", large as f64 / small as f64);
}
