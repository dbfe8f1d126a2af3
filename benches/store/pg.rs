//! The PostgreSQL rows of the store bench: the bare `SKIP LOCKED` protocol on
//! a real server, the baseline the PostgreSQL edition is measured against.
//!
//! The server is the tests' throwaway cluster (`tests/common/pg.rs`), switched
//! to `fsync = on` for the bench: the tests run it without fsync, which would
//! make every commit free and the figures meaningless. Without PostgreSQL on
//! the machine these rows are skipped with a line saying so.
//!
//! - `pairs/pg/raw/T`: T threads, one connection each; per pair one claim
//!   statement (`UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED)`, its
//!   own transaction) and the fenced complete in another.
//! - `pairs/pg/store/T`: the same work through the public API on a
//!   PostgreSQL `Store` shared by T threads (claim + complete, with history).
//! - `claim_latency/pg_raw/{10k,1M}_queued`: one such claim, then its release,
//!   with 10,000 vs 1,000,000 rows queued; `claim_latency/pg_store/*` the
//!   store's claim the same way.
//! - At the end, the same pairs in interleaved rounds: raw and store take
//!   turns (the order alternating round by round) on one database, so that a
//!   burst of load on this noisy machine (every commit waits for an fsync)
//!   falls on both; the store/raw ratios the targets are read from. Then
//!   the same again through PgBouncer in transaction mode
//!   (`tests/common/pgbouncer.rs`; skipped without it), the raw side's two
//!   statements sent unnamed (a named one may meet another server session
//!   there).

#[path = "../../tests/common/pg.rs"]
#[allow(dead_code)]
mod pg;
#[path = "../../tests/common/pgbouncer.rs"]
#[allow(dead_code)]
mod pgbouncer;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use postgres::{Client, NoTls};

use super::{measured, opts, timed_threads, THREADS};
use leasehold::{Store, Synchronous};

/// The claim of the bare protocol: the lowest discovered id nobody has locked.
const RAW_CLAIM: &str = "UPDATE jobs SET status = 'extracting', owner_token = $1, fence = fence + 1,
            lease_expires_at = 9999999999999, attempts = attempts + 1, updated_at = 1
     WHERE id = (SELECT id FROM jobs WHERE status = 'discovered' ORDER BY id LIMIT 1
                 FOR UPDATE SKIP LOCKED)
     RETURNING id";

/// The fenced complete of the bare protocol.
const RAW_COMPLETE: &str = "UPDATE jobs SET status = 'indexed', result_path = 'r', checksum = 's',
            owner_token = NULL, lease_expires_at = NULL, updated_at = 2
     WHERE id = $1 AND owner_token = $2 AND status = 'extracting'";

/// A fresh database with leasehold's schema on the bench server (fsync on),
/// or `None` when this machine has no PostgreSQL.
fn database() -> Option<String> {
    let server = std::panic::catch_unwind(pg::server).ok()?;
    let mut admin = server.admin();
    admin
        .batch_execute("ALTER SYSTEM SET fsync = on")
        .and_then(|()| admin.batch_execute("SELECT pg_reload_conf()"))
        .expect("turn fsync on for the bench");
    let url = server.fresh_database();
    drop(leasehold::Store::open(&url, opts(Synchronous::Full)).expect("migrate the bench database"));
    Some(url)
}

fn connect(url: &str) -> Client {
    Client::connect(url, NoTls).expect("connect to the bench server")
}

/// Adds `n` rows of `status` in one statement (setup, untimed).
fn bulk_enqueue(c: &mut Client, n: u64, status: &str) {
    c.execute(
        "INSERT INTO jobs (doc_key, version, status, max_attempts, created_at, updated_at)
         SELECT 'k' || (coalesce((SELECT max(id) FROM jobs), 0) + g), 'v', $2, 5, 0, 0
         FROM generate_series(1, $1::bigint) AS g",
        &[&(n as i64), &status],
    )
    .expect("bulk enqueue");
    c.batch_execute("ANALYZE jobs").expect("analyze");
}

/// Rounds of the interleaved comparison, and pairs per round and side.
const ROUNDS: u64 = 12;
const ROUND_PAIRS: u64 = 320;

/// The pairs of `bench_pairs` in interleaved rounds, for each thread count:
/// raw and store alternate (who goes first alternating too), each timed
/// over its own rounds only. Prints pairs/s and store/raw.
pub fn print_interleaved() {
    let Some(url) = database() else {
        return;
    };
    println!("postgres, interleaved rounds ({ROUNDS} × {ROUND_PAIRS} pairs each side), pairs/s:");
    interleaved(&url, &url, raw_pair);
    match std::panic::catch_unwind(pgbouncer::pooler) {
        Ok(pooler) => {
            let name = url.rsplit('/').next().expect("a database URL ends with its name");
            let pooled = format!("postgres://{}@127.0.0.1:{}/{name}", pg::SUPERUSER, pooler.port());
            println!("postgres behind PgBouncer (pool_mode = transaction), the same rounds, pairs/s:");
            interleaved(&url, &pooled, raw_pair_unnamed);
        }
        Err(_) => {
            println!("postgres behind PgBouncer: skipped, no pgbouncer here (apt-get install pgbouncer)")
        }
    }
}

/// The interleaved rounds of [`print_interleaved`] on the database at
/// `direct` (setup), its pairs run through `url`, the raw side's by `raw_pair`.
fn interleaved(direct: &str, url: &str, raw_pair: fn(&mut Client, &str)) {
    let mut setup = connect(direct);
    let store = Store::open(url, opts(Synchronous::Full)).expect("open the PostgreSQL store");
    for threads in THREADS {
        let conns: Vec<_> = (0..threads).map(|_| Mutex::new(connect(url))).collect();
        let raw = || {
            timed_threads(threads, ROUND_PAIRS, |t, quota| {
                let mut c = conns[t].lock().unwrap();
                let token = format!("tok-{t}");
                for _ in 0..quota {
                    raw_pair(&mut c, &token);
                }
            })
        };
        let through_store = || {
            timed_threads(threads, ROUND_PAIRS, |t, quota| {
                let worker = format!("w{t}");
                for _ in 0..quota {
                    let claim = store.claim(&worker).unwrap().expect("queued");
                    assert!(store
                        .complete(claim, leasehold::Completion::new("r", "s"))
                        .unwrap()
                        .is_accepted());
                }
            })
        };
        let (mut raw_spent, mut store_spent) = (Duration::ZERO, Duration::ZERO);
        for round in 0..ROUNDS {
            bulk_enqueue(&mut setup, 2 * ROUND_PAIRS, "discovered");
            if round % 2 == 0 {
                raw_spent += raw();
                store_spent += through_store();
            } else {
                store_spent += through_store();
                raw_spent += raw();
            }
        }
        let pairs = (ROUNDS * ROUND_PAIRS) as f64;
        let (r, s) = (pairs / raw_spent.as_secs_f64(), pairs / store_spent.as_secs_f64());
        println!(
            "  {threads:>2} thread(s): raw {r:>7.0}  store {s:>7.0}  store/raw {:.2}",
            s / r
        );
    }
}

/// One bare claim + fenced complete.
fn raw_pair(c: &mut Client, token: &str) {
    let row = c.query_one(RAW_CLAIM, &[&token]).expect("a queued row");
    let id: i64 = row.get(0);
    assert_eq!(c.execute(RAW_COMPLETE, &[&id, &token]).expect("complete"), 1);
}

/// [`raw_pair`] with each statement unnamed, parsed and run in one exchange.
fn raw_pair_unnamed(c: &mut Client, token: &str) {
    use postgres::types::Type;
    let row = c
        .query_typed_one(RAW_CLAIM, &[(&token, Type::TEXT)])
        .expect("a queued row");
    let id: i64 = row.get(0);
    let done = c
        .execute_typed(RAW_COMPLETE, &[(&id, Type::INT8), (&token, Type::TEXT)])
        .expect("complete");
    assert_eq!(done, 1);
}

/// The PostgreSQL pairs: the raw protocol at 1, 4 and 16 threads.
pub fn bench_pairs(c: &mut Criterion) {
    let Some(url) = database() else {
        println!("pairs/pg: skipped, no PostgreSQL on this machine (apt-get install postgresql)");
        return;
    };
    let mut g = c.benchmark_group("pairs/pg");
    g.throughput(Throughput::Elements(1));
    let mut setup = connect(&url);
    for threads in THREADS {
        g.bench_function(BenchmarkId::new("raw", threads), |b| {
            b.iter_custom(|iters| {
                bulk_enqueue(&mut setup, iters, "discovered");
                let conns: Vec<_> = (0..threads).map(|_| Mutex::new(connect(&url))).collect();
                let spent = timed_threads(threads, iters, |t, quota| {
                    let mut c = conns[t].lock().unwrap();
                    let token = format!("tok-{t}");
                    for _ in 0..quota {
                        raw_pair(&mut c, &token);
                    }
                });
                measured(&format!("pairs/pg/raw/{threads}"), iters, spent)
            })
        });
        let store = Store::open(&url, opts(Synchronous::Full)).expect("open the PostgreSQL store");
        g.bench_function(BenchmarkId::new("store", threads), |b| {
            b.iter_custom(|iters| {
                bulk_enqueue(&mut setup, iters, "discovered");
                let spent = timed_threads(threads, iters, |t, quota| {
                    let worker = format!("w{t}");
                    for _ in 0..quota {
                        let claim = store.claim(&worker).unwrap().expect("queued");
                        assert!(store
                            .complete(claim, leasehold::Completion::new("r", "s"))
                            .unwrap()
                            .is_accepted());
                    }
                });
                measured(&format!("pairs/pg/store/{threads}"), iters, spent)
            })
        });
    }
    g.finish();
}

/// One bare claim with 10k vs 1M queued (each released again, untimed).
pub fn bench_claim_latency(c: &mut Criterion) {
    let Some(url) = database() else {
        return;
    };
    let mut g = c.benchmark_group("claim_latency");
    let mut conn = connect(&url);
    let mut queued = 0;
    for (name, n) in [("pg_raw/10k_queued", 10_000u64), ("pg_raw/1M_queued", 1_000_000)] {
        bulk_enqueue(&mut conn, n - queued, "discovered");
        queued = n;
        let store_case = name.replace("pg_raw", "pg_store");
        let store = Store::open(&url, opts(Synchronous::Full)).expect("open the PostgreSQL store");
        g.bench_function(store_case.as_str(), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let claim = store.claim("w").unwrap().expect("queued");
                    spent += start.elapsed();
                    assert!(store.release(claim, "bench").unwrap().is_accepted());
                }
                measured(&format!("claim_latency/{store_case}"), iters, spent)
            })
        });
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let row = conn.query_one(RAW_CLAIM, &[&"w"]).expect("a queued row");
                    spent += start.elapsed();
                    let id: i64 = row.get(0);
                    conn.execute(
                        "UPDATE jobs SET status = 'discovered', owner_token = NULL,
                                lease_expires_at = NULL WHERE id = $1",
                        &[&id],
                    )
                    .expect("release");
                }
                measured(&format!("claim_latency/{name}"), iters, spent)
            })
        });
    }
    g.finish();
}

/// The claim latency rows of this run: mean per claim with 10k and 1M queued,
/// and their ratio (the target: 1M within 1.5 × 10k).
pub fn print_latency() {
    for engine in ["pg_raw", "pg_store"] {
        let mean = |n: &str| super::rate(&format!("claim_latency/{engine}/{n}_queued")).map(|r| 1000.0 / r);
        if let (Some(small), Some(large)) = (mean("10k"), mean("1M")) {
            println!(
                "claim latency {engine:<9} 10k {small:.3} ms, 1M {large:.3} ms, 1M/10k {:.2}",
                large / small
            );
        }
    }
}
