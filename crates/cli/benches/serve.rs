//! `leasehold serve` under load (issue 32): many clients searching at once
//! through the page's API while a `run` indexes into the same data directory.
//!
//! Run: `cargo bench --bench serve -- [--docs N] [--clients C] [--seconds S]
//! [--handlers H] [--keep DIR] [--json]`. Defaults: the scale bench's tree of
//! 100,000 documents (`--keep DIR` keeps it in `DIR/tree-N-29` for the next
//! run, and reuses the scale bench's), 50 clients for 30 s, the server's own
//! handler count.
//!
//! 1. The tree is indexed by `leasehold run` into a fresh data directory.
//! 2. `leasehold serve` starts on it; its address and token are read from its
//!    first line.
//! 3. A second folder of N/10 documents is generated, and `leasehold run` on
//!    it starts as the load does: the searches run against an index that is
//!    being written (its documents/s are reported).
//! 4. C clients, each on its own keep-alive connection, search in a loop for
//!    S seconds, no pause between requests: one word per request, cycling
//!    through words of the vocabulary's ranks 40, 2,000 and 30,000 (common,
//!    middling, rare; the very commonest, in nearly every document, is
//!    reported apart at the end, one client, since ranking all of a 100,000-
//!    document index costs what it costs whatever serves it). A request is an
//!    error unless it answers 200 with a JSON page.
//! 5. The server's resident memory is read from `/proc/PID/status` every
//!    second (Linux; elsewhere not reported).
//!
//! Reports requests/s, latency p50/p95/p99/max per rank and overall, errors,
//! and the server's memory at the start, its peak, and at the end. The
//! target: p99 <= 100 ms over 30 s with 50 clients, no error, memory flat.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The tests' server and client (`tests/common/served.rs`).
#[path = "../../../tests/common/served.rs"]
mod served;
use served::Served;

/// `leasehold --data DATA`, as `tests/common` spells it (`served.rs` asks for it).
fn leasehold_command(data: &Path) -> Command {
    let mut command = Command::new(BIN);
    command.arg("--data").arg(data);
    command
}

#[path = "common/tree.rs"]
#[allow(dead_code)]
mod tree;
use tree::{ensure_tree, vocabulary, SEED};

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");
/// The vocabulary's ranks the load cycles through.
const RANKS: [usize; 3] = [40, 2_000, 30_000];

struct Args {
    docs: usize,
    clients: usize,
    seconds: u64,
    handlers: Option<usize>,
    keep: Option<PathBuf>,
    json: bool,
}

fn parse_args() -> Args {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let number = |flag: &str, default: usize| {
        value(flag).map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{flag} N")))
    };
    Args {
        docs: number("--docs", 100_000),
        clients: number("--clients", 50),
        seconds: number("--seconds", 30) as u64,
        handlers: value("--handlers").map(|v| v.parse().expect("--handlers N")),
        keep: value("--keep").map(PathBuf::from),
        json: args.iter().any(|a| a == "--json"),
    }
}

fn main() {
    let args = parse_args();
    let tmp = tempfile::tempdir().expect("temp dir");
    let tree = match &args.keep {
        Some(dir) => dir.join(format!("tree-{}-{SEED}", args.docs)),
        None => tmp.path().join("tree"),
    };
    let vocab = vocabulary(SEED);
    ensure_tree(&tree, args.docs, &vocab);
    let data = tmp.path().join("data");
    let started = Instant::now();
    let indexed = leasehold_command(&data)
        .args(["run", "-q"])
        .arg(&tree)
        .status()
        .expect("leasehold run");
    assert!(indexed.success(), "the first run failed");
    eprintln!(
        "serve bench: {} documents indexed in {:.1} s",
        args.docs,
        started.elapsed().as_secs_f64()
    );

    let more = tmp.path().join("more");
    ensure_tree(&more, (args.docs / 10).max(100), &vocabulary(SEED + 1));
    let mut server = Server::start(&data, args.handlers);
    let mut run = leasehold_command(&data)
        .args(["run", "-q", "--json"])
        .arg(&more)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the run beside the load");
    let words: Vec<(usize, String)> = RANKS.iter().map(|&r| (r, vocab[r].clone())).collect();
    let cpu_before = cpu_seconds(server.served.pid());
    let load = load(
        &mut server,
        &words,
        args.clients,
        Duration::from_secs(args.seconds),
    );
    let cpu_used = cpu_seconds(server.served.pid())
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    let mut summary = String::new();
    run.stdout.take().unwrap().read_to_string(&mut summary).unwrap();
    let run_done = run.wait().expect("the run's end").success();
    let run_rate = serde_json::from_str::<serde_json::Value>(&summary)
        .ok()
        .and_then(|s| s["docs_per_second"].as_f64());
    let commonest = load_one_word(&server, &vocab[0], Duration::from_secs(5));
    // Each word alone, one client, the run over: what one search costs.
    let alone: Vec<(usize, Vec<f64>)> = words
        .iter()
        .map(|(rank, word)| (*rank, load_one_word(&server, word, Duration::from_secs(3))))
        .collect();
    server.stop();

    let all: Vec<f64> = load
        .latencies
        .iter()
        .flat_map(|(_, l)| l.iter().copied())
        .collect();
    let rate = all.len() as f64 / load.elapsed.as_secs_f64();
    if args.json {
        let per_rank: Vec<serde_json::Value> = load
            .latencies
            .iter()
            .map(|(rank, l)| serde_json::json!({ "rank": rank, "ms": percentiles(l) }))
            .collect();
        let out = serde_json::json!({
            "docs": args.docs, "clients": args.clients, "seconds": load.elapsed.as_secs_f64(),
            "requests": all.len(), "requests_per_second": rate, "errors": load.errors,
            "ms": percentiles(&all), "per_rank": per_rank,
            "commonest_word_ms": percentiles(&commonest),
            "alone_ms": alone.iter().map(|(r, l)| serde_json::json!({ "rank": r, "ms": percentiles(l) })).collect::<Vec<_>>(),
            "server_cpu_ms_per_request": cpu_used.map(|c| c * 1e3 / all.len().max(1) as f64),
            "server_rss_kib": { "start": server.rss_start, "peak": server.rss_peak, "end": server.rss_end },
            "run_beside": { "succeeded": run_done, "docs_per_second": run_rate },
        });
        println!("{out}");
        return;
    }
    let p = percentiles(&all);
    println!(
        "serve bench: {} documents, {} clients for {:.1} s",
        args.docs,
        args.clients,
        load.elapsed.as_secs_f64()
    );
    println!("| measure | figure |\n|---|---|");
    println!(
        "| requests | {} ({rate:.0}/s), {} errors |",
        all.len(),
        load.errors
    );
    println!(
        "| latency, all | p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms (target p99 <= 100 ms) |",
        p[0], p[1], p[2], p[3]
    );
    for (rank, l) in &load.latencies {
        let p = percentiles(l);
        println!(
            "| latency, rank {rank} word | p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms ({} requests) |",
            p[0],
            p[1],
            p[2],
            l.len()
        );
    }
    let c = percentiles(&commonest);
    println!(
        "| the commonest word, one client | p50 {:.1} ms, p99 {:.1} ms ({} requests) |",
        c[0],
        c[2],
        commonest.len()
    );
    for (rank, l) in &alone {
        let p = percentiles(l);
        println!(
            "| rank {rank} word alone, one client | p50 {:.2} ms, p99 {:.2} ms ({} requests) |",
            p[0],
            p[2],
            l.len()
        );
    }
    if let Some(cpu) = cpu_used {
        println!(
            "| server CPU during the load | {:.1} s, {:.2} ms per request (the run beside used the rest) |",
            cpu,
            cpu * 1e3 / all.len().max(1) as f64
        );
    }
    let kib = |v: Option<u64>| v.map_or("n/a".to_owned(), |k| format!("{:.1} MB", k as f64 / 1024.0));
    println!(
        "| server memory | start {}, peak {}, end {} |",
        kib(server.rss_start),
        kib(server.rss_peak),
        kib(server.rss_end)
    );
    println!(
        "| run beside the load | {} at {} documents/s |",
        if run_done { "finished" } else { "FAILED" },
        run_rate.map_or("?".into(), |r| format!("{r:.0}"))
    );
}

/// p50, p95, p99 and max, in ms (0 for none).
fn percentiles(v: &[f64]) -> [f64; 4] {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        v.get(((v.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0.0)
    };
    [at(0.5), at(0.95), at(0.99), v.last().copied().unwrap_or(0.0)]
}

/// A running `leasehold serve` (the tests' own, `tests/common/served.rs`),
/// and its memory as sampled.
struct Server {
    served: Served,
    port: u16,
    cookie: String,
    rss_start: Option<u64>,
    rss_peak: Option<u64>,
    rss_end: Option<u64>,
}

impl Server {
    fn start(data: &Path, handlers: Option<usize>) -> Server {
        let handlers = handlers.map(|h| h.to_string());
        let args: Vec<&str> = match &handlers {
            Some(h) => vec!["--handlers", h],
            None => vec![],
        };
        let served = Served::start(data, &args);
        let rss = rss_kib(served.pid());
        Server {
            port: served.port,
            cookie: served.cookie(),
            served,
            rss_start: rss,
            rss_peak: rss,
            rss_end: None,
        }
    }

    fn sample(&mut self) {
        let now = rss_kib(self.served.pid());
        self.rss_peak = self.rss_peak.max(now);
        self.rss_end = now;
    }

    fn stop(&mut self) {
        self.served.stop();
    }
}

/// The user and system CPU seconds process `pid` used so far (Linux's
/// `/proc`; elsewhere not reported).
#[cfg(not(target_os = "linux"))]
fn cpu_seconds(_pid: u32) -> Option<f64> {
    None
}

/// The user and system CPU seconds process `pid` used so far (Linux's `/proc`).
#[cfg(target_os = "linux")]
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / per_second)
}

/// The resident set of process `pid` in KiB (Linux's `/proc`).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

struct Load {
    /// Per rank, each request's latency in ms.
    latencies: Vec<(usize, Vec<f64>)>,
    errors: usize,
    elapsed: Duration,
}

/// `clients` threads searching `words` in turn for `length`; the server's
/// memory sampled every second meanwhile.
fn load(server: &mut Server, words: &[(usize, String)], clients: usize, length: Duration) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (port, cookie, stop) = (server.port, server.cookie.clone(), stop.clone());
            let words = words.to_vec();
            std::thread::spawn(move || {
                let mut client = Client::connect(port, &cookie);
                let mut mine: Vec<(usize, Vec<f64>)> = words.iter().map(|(r, _)| (*r, Vec::new())).collect();
                let mut errors = 0;
                let mut i = c;
                while !stop.load(Ordering::Relaxed) {
                    let (_, word) = &words[i % words.len()];
                    let t = Instant::now();
                    match client.search(word) {
                        Ok(()) => mine[i % words.len()].1.push(t.elapsed().as_secs_f64() * 1e3),
                        Err(_) => {
                            errors += 1;
                            client = Client::connect(port, &cookie);
                        }
                    }
                    i += 1;
                }
                (mine, errors)
            })
        })
        .collect();
    while started.elapsed() < length {
        std::thread::sleep(Duration::from_secs(1));
        server.sample();
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let mut latencies: Vec<(usize, Vec<f64>)> = words.iter().map(|(r, _)| (*r, Vec::new())).collect();
    let mut errors = 0;
    for t in threads {
        let (mine, e) = t.join().expect("a client");
        for (all, (_, l)) in latencies.iter_mut().zip(mine) {
            all.1.extend(l);
        }
        errors += e;
    }
    Load {
        latencies,
        errors,
        elapsed,
    }
}

/// One client searching `word` for `length`: the latencies in ms.
fn load_one_word(server: &Server, word: &str, length: Duration) -> Vec<f64> {
    let mut client = Client::connect(server.port, &server.cookie);
    let started = Instant::now();
    let mut out = Vec::new();
    while started.elapsed() < length {
        let t = Instant::now();
        if client.search(word).is_ok() {
            out.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    out
}

/// A keep-alive HTTP/1.1 connection to the server.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    head: String,
}

impl Client {
    fn connect(port: u16, cookie: &str) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            head: format!("Host: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n"),
        }
    }

    /// One search; an error unless 200 with a JSON object holding `total`.
    fn search(&mut self, word: &str) -> std::io::Result<()> {
        let request = format!("GET /api/search?q={word} HTTP/1.1\r\n{}\r\n", self.head);
        self.writer.write_all(request.as_bytes())?;
        let mut status = String::new();
        self.reader.read_line(&mut status)?;
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line)?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body)?;
        let ok = status.starts_with("HTTP/1.1 200")
            && body.starts_with(b"{")
            && body.windows(7).any(|w| w == b"\"total\"");
        match ok {
            true => Ok(()),
            false => Err(std::io::Error::other(status)),
        }
    }
}
