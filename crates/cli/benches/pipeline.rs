//! The whole pipeline against its floors, in one run, plus peak memory.
//!
//! Run: `cargo bench --bench pipeline`. Flags after `--`: `--quick` (a smaller
//! corpus, one round, no memory runs), `--memory-only`, `--only-workers N` (just
//! P(N), for a profiler; `--claim-ahead N` sets its claims ahead),
//! `--mirror-threads N` (the mirror alone, written from N threads: how far this
//! disk lets fsyncs overlap). Prints, for one generated
//! corpus of small text files, per round and as medians over the rounds:
//! - S: the store's claim + complete rate (1 thread, no work);
//! - M: the mirror's write + fsync rate for the same texts (1 thread);
//! - P(w): the pipeline's rate with a no-op extractor and w workers (1, 2, 4);
//! - P1(1): P(1) claiming one document at a time (`claim_ahead` 1), the effect
//!   of claims ahead;
//! - the ratios P(1) / (1 / (1/S + 1/M)), P(4) / P(1), P(4) / M and P(1) / P1(1);
//! - peak RSS of a whole `run` (discover + work) over 10,000 vs 100,000 documents,
//!   each measured in a child process;
//! - isolation (also alone with `--isolation`): P(1) over 3,000 small text files
//!   with the built-in registry in this process vs in supervised child processes
//!   (the `leasehold` binary), interleaved rounds, and their ratio.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::mirror::Mirror;
use leasehold::pipeline::{Pipeline, PoolOptions, WorkerPool};
use leasehold::source::DirSource;
use leasehold::{NewDoc, Store, StoreOptions};
use leasehold_extract::{ExtractError, Extractor, ExtractorRegistry, IsolatedExtractor, Limits};

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
        assert!(store
            .complete(c, leasehold::Completion::new("r", "s"))
            .unwrap()
            .is_accepted());
    }
    rate(n, start.elapsed())
}

/// M: atomic write + fsync of the same texts, one thread.
fn mirror_rate(dir: &tempfile::TempDir, n: usize) -> f64 {
    mirror_rate_threads(dir, n, 1)
}

/// The same writes from `threads` threads, each taking every `threads`-th
/// document: how far the disk itself lets mirror writes overlap, the ceiling
/// P(w) works under.
fn mirror_rate_threads(dir: &tempfile::TempDir, n: usize, threads: usize) -> f64 {
    let mirror = Mirror::open(dir.path().join("m")).unwrap();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for first in 0..threads {
            let mirror = &mirror;
            scope.spawn(move || {
                for i in (first..n).step_by(threads) {
                    mirror.write(i as i64 + 1, 1, text(i).as_bytes()).unwrap();
                }
            });
        }
    });
    rate(n, start.elapsed())
}

/// Discover `corpus` into a fresh data directory and run a pool to idle;
/// returns (documents indexed, time spent working, CPU time the process spent
/// meanwhile as (user, system)).
fn pipeline_run(corpus: &Path, data: &Path, workers: usize) -> (u64, Duration, (Duration, Duration)) {
    pipeline_run_with(corpus, data, workers, Arc::new(NoopExtractor), AHEAD)
}

/// The pool's default claims ahead.
const AHEAD: usize = 8;

/// [`pipeline_run`] with another extractor.
fn pipeline_run_with(
    corpus: &Path,
    data: &Path,
    workers: usize,
    extractor: Arc<dyn Extractor>,
    claim_ahead: usize,
) -> (u64, Duration, (Duration, Duration)) {
    let store = Store::open(data.join("p.db"), store_options()).unwrap();
    let source = DirSource::open(corpus).unwrap();
    source.discover(&store, 1 << 20).unwrap();
    let pipeline = Pipeline {
        store: store.clone(),
        mirror: Mirror::open(data.join("mirror")).unwrap(),
        source: Arc::new(source),
        extractor,
        max_input_bytes: 1 << 20,
        deliver_results: false,
    };
    let opts = PoolOptions {
        workers,
        claim_ahead,
        until_idle: true,
        ..PoolOptions::default()
    };
    let (cpu, start) = (cpu_time(), Instant::now());
    WorkerPool::start(pipeline, opts, None)
        .expect("pool starts")
        .join();
    let (took, after) = (start.elapsed(), cpu_time());
    let cpu = (after.0 - cpu.0, after.1 - cpu.1);
    (store.counts().unwrap().indexed, took, cpu)
}

/// This process's resource usage so far.
fn rusage() -> libc::rusage {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage
}

/// User and system CPU time of this process so far.
fn cpu_time() -> (Duration, Duration) {
    let usage = rusage();
    let dur = |t: libc::timeval| Duration::from_micros(t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64);
    (dur(usage.ru_utime), dur(usage.ru_stime))
}

/// The pipeline's rate, and its CPU time per document as (user, system) µs.
fn pipeline_rate(data: &tempfile::TempDir, corpus: &Path, n: usize, workers: usize) -> (f64, (f64, f64)) {
    pipeline_rate_ahead(data, corpus, n, workers, AHEAD)
}

/// [`pipeline_rate`] with `claim_ahead` claims at most per batch.
fn pipeline_rate_ahead(
    data: &tempfile::TempDir,
    corpus: &Path,
    n: usize,
    workers: usize,
    claim_ahead: usize,
) -> (f64, (f64, f64)) {
    let (indexed, took, (user, sys)) =
        pipeline_run_with(corpus, data.path(), workers, Arc::new(NoopExtractor), claim_ahead);
    assert_eq!(indexed as usize, n, "every document indexed");
    let per_doc = |t: Duration| t.as_secs_f64() * 1e6 / n as f64;
    (rate(n, took), (per_doc(user), per_doc(sys)))
}

/// Child: a whole run over `n` documents; prints the peak RSS.
fn memory_child(n: usize) {
    let corpus = tempfile::tempdir().unwrap();
    make_corpus(corpus.path(), n);
    let data = tempfile::tempdir().unwrap();
    let (indexed, _, _) = pipeline_run(corpus.path(), data.path(), 4);
    assert_eq!(indexed as usize, n);
    println!("MAXRSS_KB {}", rusage().ru_maxrss);
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
    if let Some(threads) = arg_after("--mirror-threads") {
        let n = if quick { 500 } else { 2000 };
        let dir = tempfile::tempdir().unwrap();
        let threads: usize = threads.parse().expect("--mirror-threads N");
        let r = mirror_rate_threads(&dir, n, threads);
        println!("M({threads}) mirror write+fsync, {threads} threads: {r:>9.0} docs/s");
        return;
    }
    if let Some(workers) = arg_after("--only-workers") {
        // For profilers: just P(w), on a fresh corpus.
        let n = if quick { 500 } else { 2000 };
        let (corpus, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        make_corpus(corpus.path(), n);
        let ahead = arg_after("--claim-ahead").map_or(AHEAD, |a| a.parse().expect("--claim-ahead N"));
        let (r, (user, sys)) = pipeline_rate_ahead(
            &data,
            corpus.path(),
            n,
            workers.parse().expect("--only-workers N"),
            ahead,
        );
        println!("P({workers}) pipeline, no-op extractor   : {r:>9.0} docs/s, CPU per doc: user {user:.0} µs, system {sys:.0} µs");
        return;
    }
    if std::env::args().any(|a| a == "--memory-only") {
        report_memory();
        return;
    }
    if std::env::args().any(|a| a == "--isolation") {
        report_isolation(quick);
        return;
    }
    let (n, rounds) = if quick { (500, 1) } else { (2000, ROUNDS) };
    let corpus = tempfile::tempdir().unwrap();
    make_corpus(corpus.path(), n);
    println!(
        "corpus: {n} text files of {} bytes; {rounds} round(s)",
        text(0).len()
    );

    // Every directory lives until the end: deleting thousands of inodes between
    // measurements makes ext4's inode allocation slower for the ones that follow.
    let mut keep = Vec::new();
    let mut rates: Vec<Rates> = Vec::new();
    for round in 0..rounds {
        let r = measure_round(corpus.path(), n, round % 2 == 1, &mut keep);
        println!(
            "round {}: S {:.0}  M {:.0}  floor {:.0}  P(1) {:.0}  P(2) {:.0}  P(4) {:.0}  P1(1) {:.0}  P(1)/floor {:.2}  P(4)/P(1) {:.2}  P(4)/M {:.2}  P(1)/P1(1) {:.2}",
            round + 1,
            r.s,
            r.m,
            r.floor(),
            r.p[0],
            r.p[1],
            r.p[2],
            r.p1,
            r.p[0] / r.floor(),
            r.p[2] / r.p[0],
            r.p[2] / r.m,
            r.p[0] / r.p1,
        );
        rates.push(r);
    }
    let med = |f: &dyn Fn(&Rates) -> f64| median(rates.iter().map(f).collect());
    let (s, m) = (med(&|r| r.s), med(&|r| r.m));
    let floor = floor(s, m);
    let p: Vec<f64> = (0..3).map(|i| med(&|r| r.p[i])).collect();
    println!("medians over the rounds:");
    println!("S  store claim+complete, 1 thread : {s:>9.0} docs/s");
    println!("M  mirror write+fsync, 1 thread   : {m:>9.0} docs/s");
    println!("   serial floor 1/(1/S+1/M)       : {floor:>9.0} docs/s");
    for (i, workers) in [1, 2, 4].into_iter().enumerate() {
        let (user, sys) = (med(&|r| r.cpu[i].0), med(&|r| r.cpu[i].1));
        println!(
            "P({workers}) pipeline, no-op extractor   : {:>9.0} docs/s  (CPU per doc: user {user:.0} µs, system {sys:.0} µs)",
            p[i]
        );
    }
    let p1 = med(&|r| r.p1);
    let (user, sys) = (med(&|r| r.cpu1.0), med(&|r| r.cpu1.1));
    println!(
        "P1(1) one claim at a time         : {p1:>9.0} docs/s  (CPU per doc: user {user:.0} µs, system {sys:.0} µs)"
    );
    // Ratios are medians of each round's own ratio: the disk's rate drifts
    // between rounds, a round measures everything side by side.
    let ratio = |f: &dyn Fn(&Rates) -> f64| med(f);
    println!(
        "ratio P(1) / floor  = {:.2}  (target >= 0.70)",
        ratio(&|r| r.p[0] / r.floor())
    );
    println!(
        "ratio P(4) / P(1)   = {:.2}  (target >= 2.00)",
        ratio(&|r| r.p[2] / r.p[0])
    );
    println!(
        "ratio P(4) / M      = {:.2}  (target >= 2.50)",
        ratio(&|r| r.p[2] / r.m)
    );
    println!(
        "ratio P(1) / P1(1)  = {:.2}  (claims ahead)",
        ratio(&|r| r.p[0] / r.p1)
    );
    if !quick {
        report_memory();
        report_isolation(quick);
    }
}

/// P(1) with the built-in registry in this process vs in supervised children,
/// interleaved rounds over one corpus of small text files; medians and ratio.
fn report_isolation(quick: bool) {
    let (n, rounds) = if quick { (500, 1) } else { (3000, ROUNDS) };
    let corpus = tempfile::tempdir().unwrap();
    make_corpus(corpus.path(), n);
    let mut keep = Vec::new();
    let (mut inproc, mut isolated) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut order = [false, true];
        if round % 2 == 1 {
            order.reverse();
        }
        for isolate in order {
            let extractor: Arc<dyn Extractor> = if isolate {
                let limits = Limits {
                    max_input_bytes: 1 << 20,
                    ..Limits::default()
                };
                Arc::new(IsolatedExtractor::new(env!("CARGO_BIN_EXE_leasehold"), limits))
            } else {
                Arc::new(ExtractorRegistry::new(1 << 20))
            };
            let data = tempfile::tempdir().unwrap();
            let (indexed, took, _) = pipeline_run_with(corpus.path(), data.path(), 1, extractor, AHEAD);
            assert_eq!(indexed as usize, n, "every document indexed");
            let r = rate(n, took);
            if isolate { &mut isolated } else { &mut inproc }.push(r);
            keep.push(data);
        }
        println!(
            "isolation round {}: P(1) in process {:.0}  isolated {:.0} docs/s",
            round + 1,
            inproc[round],
            isolated[round]
        );
    }
    let (a, b) = (median(inproc), median(isolated));
    println!("P(1) built-in registry, in process : {a:>9.0} docs/s  ({n} small text files)");
    println!("P(1) built-in registry, isolated   : {b:>9.0} docs/s");
    println!("ratio isolated / in process = {:.2}  (target >= 0.85)", b / a);
}

/// Rounds of the full bench. The rate of this machine's disk drifts over
/// minutes; each round measures every rate side by side, alternate rounds in
/// reverse order, and the report uses the median of each rate.
const ROUNDS: usize = 3;

/// One round's rates, docs/s.
struct Rates {
    s: f64,
    m: f64,
    /// P(1), P(2), P(4).
    p: [f64; 3],
    /// P(1) claiming one document at a time, and its CPU per document.
    p1: f64,
    cpu1: (f64, f64),
    /// CPU time per document of P(1), P(2), P(4), as (user, system) µs: on a
    /// machine with few cores it, not the disk, bounds P(4).
    cpu: [(f64, f64); 3],
}

impl Rates {
    fn floor(&self) -> f64 {
        floor(self.s, self.m)
    }
}

/// S, M, P(1), P(2), P(4), P1(1) in that order, or the reverse; every
/// directory is pushed to `keep` so nothing is deleted before the end.
fn measure_round(corpus: &Path, n: usize, reverse: bool, keep: &mut Vec<tempfile::TempDir>) -> Rates {
    let mut steps: Vec<usize> = (0..6).collect();
    if reverse {
        steps.reverse();
    }
    let mut got = [(0.0, (0.0, 0.0)); 6];
    for step in steps {
        let dir = tempfile::tempdir().unwrap();
        got[step] = match step {
            0 => (store_rate(&dir, n), (0.0, 0.0)),
            1 => (mirror_rate(&dir, n), (0.0, 0.0)),
            2 => pipeline_rate(&dir, corpus, n, 1),
            3 => pipeline_rate(&dir, corpus, n, 2),
            4 => pipeline_rate(&dir, corpus, n, 4),
            _ => pipeline_rate_ahead(&dir, corpus, n, 1, 1),
        };
        keep.push(dir);
    }
    Rates {
        s: got[0].0,
        m: got[1].0,
        p: [got[2].0, got[3].0, got[4].0],
        cpu: [got[2].1, got[3].1, got[4].1],
        p1: got[5].0,
        cpu1: got[5].1,
    }
}

/// The serial floor: one claim+complete and one mirror write per document,
/// back to back.
fn floor(s: f64, m: f64) -> f64 {
    1.0 / (1.0 / s + 1.0 / m)
}

/// The command-line argument after `flag`, if any.
fn arg_after(flag: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report_memory() {
    let small = peak_rss_kb(10_000);
    let large = peak_rss_kb(100_000);
    println!("peak RSS, run of  10,000 docs: {small} KiB");
    println!("peak RSS, run of 100,000 docs: {large} KiB");
    println!("ratio = {:.2}  (target <= 1.20)", large as f64 / small as f64);
}
