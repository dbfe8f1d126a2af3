//! Store throughput and claim latency, side by side with a raw-SQL baseline.
//!
//! Run: `cargo bench --bench store`. Figures to compare are printed by criterion
//! as elements per second (one element = one claim + one complete); the fairness
//! figure is printed at the end.
//!
//! - `raw/{normal,full}/T`: the bare protocol, one job per transaction, one
//!   connection per thread: `BEGIN IMMEDIATE; UPDATE … RETURNING; COMMIT` and the
//!   fenced `UPDATE` in its own transaction. No history, no pool.
//! - `store/{normal,full}/T`: the same work through the public API; threads share
//!   one `Store` (group commit).
//! - `raw_batch32/{normal,full}`: the bare protocol 32 jobs per transaction:
//!   one `BEGIN IMMEDIATE; UPDATE … RETURNING` claims 32, one transaction holds
//!   their 32 fenced `UPDATE`s.
//! - `store_batch32/{normal,full}`: `claim_batch(32)` + `complete_many`.
//! - `claim_latency/*`: one claim with 10k vs 1M queued, 1M indexed, 10k live leases ahead.
//! - `outbox_secure_delete/{on,off}`: claim + complete with a 16 KiB result for
//!   the sink + its delivery (the delete that `secure_delete` zeroes), one
//!   document at a time: the cost of not leaving delivered text in free pages.
//!
//! - `pairs/pg/raw/T`, `claim_latency/pg_raw/*`: the same bare protocol on a
//!   real PostgreSQL server with `SKIP LOCKED` (`store/pg.rs`; skipped, with a
//!   line saying so, where PostgreSQL is not installed).
//!
//! At the end a table gives the rates the pair benchmarks measured in this run
//! (all their timed pairs over all their timed time) and the ratios store/raw,
//! so that one run gives one set of figures.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

#[path = "store/pg.rs"]
mod pg_rows;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use leasehold::store::Drain;
use leasehold::{Completion, NewDoc, Store, StoreOptions, Synchronous};
use rusqlite::{params, Connection, TransactionBehavior};

const THREADS: [usize; 3] = [1, 4, 16];

/// Pairs done and time spent, per benchmark id, over the whole run.
static MEASURED: Mutex<BTreeMap<String, (u64, Duration)>> = Mutex::new(BTreeMap::new());

/// Count `pairs` done in `spent` towards `id`'s rate; returns `spent` for criterion.
fn measured(id: &str, pairs: u64, spent: Duration) -> Duration {
    let mut m = MEASURED.lock().unwrap();
    let e = m.entry(id.to_owned()).or_default();
    e.0 += pairs;
    e.1 += spent;
    spent
}

/// Pairs per second measured for `id` in this run, if it ran.
fn rate(id: &str) -> Option<f64> {
    let m = MEASURED.lock().unwrap();
    m.get(id).map(|(n, t)| *n as f64 / t.as_secs_f64())
}

/// The store/raw table of this run.
fn print_ratios() {
    let k = |r: f64| format!("{:.2}k", r / 1000.0);
    println!("\nstore vs raw, pairs/s in this run (criterion's timed pairs / timed time):");
    println!("{:<22} {:>10} {:>10} {:>7}", "case", "raw", "store", "ratio");
    for sync in ["normal", "full"] {
        let mut cases: Vec<(String, String, String)> = THREADS
            .iter()
            .map(|t| {
                (
                    format!("{sync} {t} thread(s)"),
                    format!("pairs/{sync}/raw/{t}"),
                    format!("pairs/{sync}/store/{t}"),
                )
            })
            .collect();
        cases.push((
            format!("{sync} batch32"),
            format!("pairs/{sync}/raw_batch32/1"),
            format!("pairs/{sync}/store_batch32/1"),
        ));
        if sync == "full" {
            cases.extend(THREADS.iter().map(|t| {
                (
                    format!("postgres {t} thread(s)"),
                    format!("pairs/pg/raw/{t}"),
                    format!("pairs/pg/store/{t}"),
                )
            }));
        }
        for (name, raw, store) in cases {
            if let (Some(raw), None) = (rate(&raw), rate(&store)) {
                println!("{name:<22} {:>10} {:>10} {:>7}", k(raw), "-", "-");
                continue;
            }
            if let (Some(raw), Some(store)) = (rate(&raw), rate(&store)) {
                println!("{name:<22} {:>10} {:>10} {:>7.2}", k(raw), k(store), store / raw);
            }
        }
    }
}

fn opts(sync: Synchronous) -> StoreOptions {
    StoreOptions::default()
        .lease(Duration::from_secs(600))
        .synchronous(sync)
        .pool_size(20)
}

fn sync_name(s: Synchronous) -> &'static str {
    match s {
        Synchronous::Normal => "normal",
        Synchronous::Full => "full",
    }
}

/// Add `n` discovered rows quickly (setup, untimed).
fn bulk_enqueue(path: &Path, n: u64, status: &str, lease_until: i64) {
    let mut c = Connection::open(path).unwrap();
    // The store's background checkpointer may hold the file a moment. The
    // transaction takes the write lock at BEGIN, where the busy timeout waits
    // for it: a read transaction upgraded to a write later fails at once with
    // "database is locked" when another connection wrote since its snapshot.
    c.busy_timeout(Duration::from_secs(30)).unwrap();
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let start: i64 = tx
        .query_row("SELECT coalesce(max(id), 0) FROM jobs", [], |r| r.get(0))
        .unwrap();
    {
        let mut stmt = tx
            .prepare(
                "INSERT INTO jobs (doc_key, version, status, owner_token, lease_expires_at, max_attempts,
                                   result_path, checksum, created_at, updated_at)
                 VALUES (?1, 'v', ?2, ?3, ?4, 5, ?5, ?5, 0, 0)",
            )
            .unwrap();
        for i in 0..n as i64 {
            let key = format!("k{}", start + i + 1);
            let extracting = status == "extracting";
            let token = extracting.then_some("someone");
            let lease = extracting.then_some(lease_until);
            let result = (status == "indexed").then_some("r");
            stmt.execute(params![key, status, token, lease, result]).unwrap();
        }
    }
    tx.commit().unwrap();
}

fn raw_connection(path: &Path, sync: Synchronous) -> Connection {
    let c = Connection::open(path).unwrap();
    c.busy_timeout(Duration::from_secs(30)).unwrap();
    c.pragma_update(None, "synchronous", sync_name(sync)).unwrap();
    c
}

/// The bare protocol: claim in one transaction, fenced complete in another.
fn raw_pair(c: &mut Connection, token: &str) {
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let id: i64 = tx
        .prepare_cached(
            "UPDATE jobs SET status = 'extracting', owner_token = ?1, fence = fence + 1,
                    lease_expires_at = 9999999999999, attempts = attempts + 1, updated_at = 1
             WHERE id = (SELECT id FROM jobs WHERE status = 'discovered' ORDER BY id LIMIT 1)
             RETURNING id",
        )
        .unwrap()
        .query_row([token], |r| r.get(0))
        .unwrap();
    tx.commit().unwrap();
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let n = tx
        .prepare_cached(
            "UPDATE jobs SET status = 'indexed', result_path = 'r', checksum = 's', owner_token = NULL,
                    lease_expires_at = NULL, updated_at = 2
             WHERE id = ?1 AND owner_token = ?2 AND status = 'extracting'",
        )
        .unwrap()
        .execute(params![id, token])
        .unwrap();
    assert_eq!(n, 1);
    tx.commit().unwrap();
}

/// The bare protocol 32 at a time: claim up to `n` in one transaction, then
/// their fenced completions in another. Returns how many it did.
fn raw_batch(c: &mut Connection, token: &str, n: usize) -> usize {
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let ids: Vec<i64> = tx
        .prepare_cached(
            "UPDATE jobs SET status = 'extracting', owner_token = ?1, fence = fence + 1,
                    lease_expires_at = 9999999999999, attempts = attempts + 1, updated_at = 1
             WHERE id IN (SELECT id FROM jobs WHERE status = 'discovered' ORDER BY id LIMIT ?2)
             RETURNING id",
        )
        .unwrap()
        .query_map(params![token, n as i64], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    tx.commit().unwrap();
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    {
        let mut stmt = tx
            .prepare_cached(
                "UPDATE jobs SET status = 'indexed', result_path = 'r', checksum = 's', owner_token = NULL,
                        lease_expires_at = NULL, updated_at = 2
                 WHERE id = ?1 AND owner_token = ?2 AND status = 'extracting'",
            )
            .unwrap();
        for id in &ids {
            assert_eq!(stmt.execute(params![id, token]).unwrap(), 1);
        }
    }
    tx.commit().unwrap();
    ids.len()
}

/// Run `iters` pairs split over `threads`, timing only the work.
fn timed_threads(threads: usize, iters: u64, work: impl Fn(usize, u64) + Sync) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let quota = iters / threads as u64 + u64::from((t as u64) < iters % threads as u64);
            let (work, barrier) = (&work, &barrier);
            s.spawn(move || {
                barrier.wait();
                work(t, quota);
            });
        }
        barrier.wait();
        let start = Instant::now();
        // Scope joins every thread before returning.
        start
    })
    .elapsed()
}

fn bench_raw_vs_store(c: &mut Criterion) {
    for sync in [Synchronous::Normal, Synchronous::Full] {
        let group = format!("pairs/{}", sync_name(sync));
        let mut g = c.benchmark_group(&group);
        g.throughput(Throughput::Elements(1));
        for threads in THREADS {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("raw.db");
            drop(Store::open(&path, opts(sync)).unwrap());
            g.bench_function(BenchmarkId::new("raw", threads), |b| {
                b.iter_custom(|iters| {
                    bulk_enqueue(&path, iters, "discovered", 0);
                    let conns: Vec<_> = (0..threads)
                        .map(|_| Mutex::new(raw_connection(&path, sync)))
                        .collect();
                    let spent = timed_threads(threads, iters, |t, quota| {
                        let mut c = conns[t].lock().unwrap();
                        let token = format!("tok-{t}");
                        for _ in 0..quota {
                            raw_pair(&mut c, &token);
                        }
                    });
                    measured(&format!("{group}/raw/{threads}"), iters, spent)
                })
            });
            let path = dir.path().join("store.db");
            let store = Store::open(&path, opts(sync)).unwrap();
            g.bench_function(BenchmarkId::new("store", threads), |b| {
                b.iter_custom(|iters| {
                    bulk_enqueue(&path, iters, "discovered", 0);
                    let spent = timed_threads(threads, iters, |t, quota| {
                        let worker = format!("w{t}");
                        for _ in 0..quota {
                            let claim = store.claim(&worker).unwrap().expect("queued");
                            assert!(store
                                .complete(claim, Completion::new("r", "s"))
                                .unwrap()
                                .is_accepted());
                        }
                    });
                    measured(&format!("{group}/store/{threads}"), iters, spent)
                })
            });
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw_batch.db");
        drop(Store::open(&path, opts(sync)).unwrap());
        g.bench_function(BenchmarkId::new("raw_batch32", 1), |b| {
            b.iter_custom(|iters| {
                bulk_enqueue(&path, iters, "discovered", 0);
                let mut c = raw_connection(&path, sync);
                let start = Instant::now();
                let mut left = iters as usize;
                while left > 0 {
                    left -= raw_batch(&mut c, "tok", left.min(32));
                }
                measured(&format!("{group}/raw_batch32/1"), iters, start.elapsed())
            })
        });
        let path = dir.path().join("batch.db");
        let store = Store::open(&path, opts(sync)).unwrap();
        g.bench_function(BenchmarkId::new("store_batch32", 1), |b| {
            b.iter_custom(|iters| {
                bulk_enqueue(&path, iters, "discovered", 0);
                let start = Instant::now();
                let mut left = iters as usize;
                while left > 0 {
                    let claims = store.claim_batch("w", left.min(32)).unwrap();
                    let n = claims.len();
                    let done: Vec<_> = claims
                        .into_iter()
                        .map(|c| (c, Completion::new("r", "s")))
                        .collect();
                    let out = store.complete_many(done).unwrap();
                    assert!(out.iter().all(|o| o.is_accepted()));
                    left -= n;
                }
                measured(&format!("{group}/store_batch32/1"), iters, start.elapsed())
            })
        });
        g.finish();
    }
}

/// Claim latency is one index seek whatever sits in the table.
fn bench_claim_latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("claim_latency");
    let far = i64::MAX / 2;
    let cases: [(&str, &[(u64, &str)]); 4] = [
        ("10k_queued", &[(10_000, "discovered")]),
        ("1M_queued", &[(1_000_000, "discovered")]),
        (
            "1M_indexed_10k_queued",
            &[(1_000_000, "indexed"), (10_000, "discovered")],
        ),
        (
            "10k_leases_10k_queued",
            &[(10_000, "extracting"), (10_000, "discovered")],
        ),
    ];
    for (name, layers) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lat.db");
        drop(Store::open(&path, opts(Synchronous::Normal)).unwrap());
        for (n, status) in layers {
            bulk_enqueue(&path, *n, status, far);
        }
        let store = Store::open(&path, opts(Synchronous::Normal)).unwrap();
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let claim = store.claim("w").unwrap().expect("queued");
                    spent += start.elapsed();
                    assert!(store.release(claim, "bench").unwrap().is_accepted());
                }
                spent
            })
        });
    }
    g.finish();
}

/// One document through the outbox: claim, complete with text for the sink,
/// claim the batch, delivered. With and without `secure_delete`.
fn bench_outbox_secure_delete(c: &mut Criterion) {
    let mut g = c.benchmark_group("outbox_secure_delete");
    g.throughput(Throughput::Elements(1));
    let text = "private words of an extracted document ".repeat(420);
    for on in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        let store = Store::open(&path, opts(Synchronous::Normal).secure_delete(on)).unwrap();
        g.bench_function(if on { "on" } else { "off" }, |b| {
            b.iter_custom(|iters| {
                bulk_enqueue(&path, iters, "discovered", 0);
                let start = Instant::now();
                for _ in 0..iters {
                    let claim = store.claim("w").unwrap().expect("queued");
                    let done = Completion::new("r", "s").deliver(&text);
                    assert!(store.complete(claim, done).unwrap().is_accepted());
                    let Drain::Send(batch) = store
                        .outbox()
                        .claim(1, Duration::from_secs(60), Duration::ZERO)
                        .unwrap()
                    else {
                        panic!("the result was not in the outbox");
                    };
                    assert_eq!(store.outbox().delivered(&batch).unwrap(), 1);
                }
                start.elapsed()
            })
        });
    }
    g.finish();
}

/// Of 16 threads hammering claim + complete on one store, how much does the
/// least-served get, relative to the mean? Printed, not asserted.
fn fairness() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fair.db");
    let store = Store::open(&path, opts(Synchronous::Normal)).unwrap();
    let docs: Vec<_> = (0..400_000).map(|i| NewDoc::new(format!("f{i}"), "v")).collect();
    store.enqueue_many(&docs).unwrap();
    let stop = AtomicBool::new(false);
    let counts: Vec<AtomicU64> = (0..16).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        for (t, count) in counts.iter().enumerate() {
            let (store, stop) = (&store, &stop);
            s.spawn(move || {
                let worker = format!("w{t}");
                while !stop.load(Ordering::Relaxed) {
                    let Some(claim) = store.claim(&worker).unwrap() else {
                        break;
                    };
                    assert!(store
                        .complete(claim, Completion::new("r", "s"))
                        .unwrap()
                        .is_accepted());
                    count.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
    });
    let per: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let mean = per.iter().sum::<u64>() as f64 / per.len() as f64;
    let min = *per.iter().min().unwrap() as f64;
    println!(
        "fairness/16 threads, 3 s: per-thread pairs {per:?}; min/mean = {:.2}",
        min / mean
    );
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_raw_vs_store, bench_claim_latency, bench_outbox_secure_delete,
        pg_rows::bench_pairs, pg_rows::bench_claim_latency
}

fn main() {
    benches();
    if !std::env::args().any(|a| a == "--list") {
        fairness();
        print_ratios();
        pg_rows::print_latency();
        pg_rows::print_interleaved();
    }
    Criterion::default().configure_from_args().final_summary();
}
