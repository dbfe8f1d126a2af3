//! The search index (issue 15's targets), in one run:
//! - build: a store of `--docs N` documents (default 100,000) whose accepted
//!   texts go into the index through the fenced completion (`finish_many`,
//!   batches of 64), and the rate it went at;
//! - latency: p50 and p99 of `Store::search(query, 10)` for single-word,
//!   phrase and prefix queries (`--queries Q` each, default 500), the words
//!   drawn from random places in random documents (so frequent words are
//!   asked as often as they occur);
//! - indexing cost: P(1) (the pipeline, one worker, a no-op extractor, over
//!   2,000 small text files, as `benches/pipeline.rs` measures it) with the
//!   index on and off, interleaved over `--rounds R` rounds (default 5), and
//!   the cost `1 - P(1) on / P(1) off` (target <= 20 %).
//!
//! Run: `cargo bench --bench search` (flags after `--`; `--quick` is a smoke
//! test: 2,000 documents, 50 queries, 300 files, one round). `--tokenizer
//! trigram` builds the index with the trigram tokenizer instead.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::extract::{ExtractError, Extractor};
use leasehold::mirror::Mirror;
use leasehold::pipeline::{Pipeline, PoolOptions, WorkerPool};
use leasehold::source::DirSource;
use leasehold::{Claim, Completion, NewDoc, Store, StoreOptions, Tokenizer};

/// Passes the bytes through: the bench measures the machinery, not parsing.
struct NoopExtractor;

impl Extractor for NoopExtractor {
    fn extract(&self, _name: &str, bytes: &[u8], _stop: &AtomicBool) -> Result<String, ExtractError> {
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// Words of the synthetic language: a few thousand, drawn with a Zipf-like
/// skew (word k about 1/k as often as word 1), as natural text is.
struct Language {
    words: Vec<String>,
    /// Cumulative weights, for drawing.
    cumulative: Vec<f64>,
}

impl Language {
    fn new(size: usize) -> Language {
        let syllables = [
            "ka", "lo", "mi", "ren", "tu", "sa", "vo", "ne", "di", "par", "quel", "zo",
        ];
        let mut words = Vec::with_capacity(size);
        for k in 0..size {
            let (mut n, mut w) = (k + 1, String::new());
            while n > 0 {
                w.push_str(syllables[n % syllables.len()]);
                n /= syllables.len();
            }
            words.push(w);
        }
        let mut total = 0.0;
        let cumulative = (1..=size)
            .map(|k| {
                total += 1.0 / k as f64;
                total
            })
            .collect();
        Language { words, cumulative }
    }

    fn word(&self, rng: &mut fastrand::Rng) -> &str {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let x = rng.f64() * total;
        let i = self.cumulative.partition_point(|c| *c < x);
        &self.words[i.min(self.words.len() - 1)]
    }

    /// A document of 50 to 300 words, every tenth one in Korean with a
    /// particle attached (`계정이`), as the Korean example needs.
    fn text(&self, rng: &mut fastrand::Rng, i: usize) -> String {
        let n = rng.usize(50..300);
        let mut out = String::with_capacity(n * 6);
        for j in 0..n {
            if j > 0 {
                out.push(if j.is_multiple_of(12) { '\n' } else { ' ' });
            }
            out.push_str(self.word(rng));
        }
        if i.is_multiple_of(10) {
            out.push_str(" 계정이 잠겼습니다");
        }
        out
    }
}

fn arg_after(flag: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

fn number(flag: &str, default: usize) -> usize {
    arg_after(flag).map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{flag} N")))
}

/// Enqueue, claim and complete `texts` into `store` in batches of 64, each
/// completion carrying its text for the index.
fn build(store: &Store, texts: &[String]) {
    const BATCH: usize = 64;
    for (b, chunk) in texts.chunks(BATCH).enumerate() {
        let docs: Vec<NewDoc> = (0..chunk.len())
            .map(|i| NewDoc::new(format!("doc{:07}", b * BATCH + i), "v1"))
            .collect();
        store.enqueue_many(&docs).unwrap();
        let claims = store.claim_batch("bench", chunk.len()).unwrap();
        let done: Vec<(Claim, Completion<'_>)> = claims
            .into_iter()
            .map(|c| {
                let i: usize = c.key[3..].parse().unwrap();
                let text = texts[i].as_str();
                (
                    c,
                    Completion {
                        index: Some(text),
                        ..Completion::new("r", "s")
                    },
                )
            })
            .collect();
        assert!(store.finish_many(done).unwrap().iter().all(|f| f.is_accepted()));
    }
}

/// Queries of one kind, drawn from the texts.
fn queries(kind: &str, texts: &[String], n: usize, rng: &mut fastrand::Rng) -> Vec<String> {
    (0..n)
        .map(|_| {
            let words: Vec<&str> = texts[rng.usize(..texts.len())].split_whitespace().collect();
            let at = rng.usize(..words.len() - 1);
            match kind {
                "word" => words[at].to_owned(),
                "phrase" => format!("\"{} {}\"", words[at], words[at + 1]),
                // Three characters: the trigram tokenizer takes no shorter prefix.
                _ => {
                    let long = words[at..]
                        .iter()
                        .find(|w| w.chars().count() >= 3)
                        .unwrap_or(&"kalo");
                    format!("{}*", long.chars().take(3).collect::<String>())
                }
            }
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn report_latency(store: &Store, texts: &[String], n: usize) {
    let mut rng = fastrand::Rng::with_seed(7);
    for kind in ["word", "phrase", "prefix"] {
        let asked = queries(kind, texts, n, &mut rng);
        let mut took = Vec::with_capacity(n);
        let mut hits = 0;
        for q in &asked {
            let start = Instant::now();
            hits += store.search(q, 10).unwrap().len();
            took.push(start.elapsed());
        }
        took.sort();
        println!(
            "{kind:<7} queries: {n}, p50 {:>7.2} ms (target <= 10), p99 {:>7.2} ms (target <= 50), max {:>7.2} ms, {:.1} hits each",
            ms(percentile(&took, 0.50)),
            ms(percentile(&took, 0.99)),
            ms(percentile(&took, 1.0)),
            hits as f64 / n as f64
        );
    }
    let korean = store.search("계정", 10).unwrap();
    println!(
        "계정 -> {} hit(s), e.g. {:?}",
        korean.len(),
        korean.first().map(|h| &h.snippet)
    );
}

/// P(1) over `corpus` into a fresh data directory, the index on or off.
fn pipeline_rate(corpus: &Path, n: usize, index: bool) -> f64 {
    let data = tempfile::tempdir().unwrap();
    let opts = StoreOptions::default()
        .lease(Duration::from_secs(30))
        .search_index(index);
    let store = Store::open(data.path().join("p.db"), opts).unwrap();
    let source = DirSource::open(corpus).unwrap();
    source.discover(&store, 1 << 20).unwrap();
    let pipeline = Pipeline {
        store: store.clone(),
        mirror: Mirror::open(data.path().join("mirror")).unwrap(),
        source: Arc::new(source),
        extractor: Arc::new(NoopExtractor),
        max_input_bytes: 1 << 20,
        deliver_results: false,
    };
    let opts = PoolOptions {
        workers: 1,
        until_idle: true,
        ..PoolOptions::default()
    };
    let start = Instant::now();
    WorkerPool::start(pipeline, opts, None)
        .expect("pool starts")
        .join();
    let took = start.elapsed();
    assert_eq!(
        store.counts().unwrap().indexed as usize,
        n,
        "every document indexed"
    );
    n as f64 / took.as_secs_f64()
}

fn report_indexing_cost(files: usize, rounds: usize) {
    let corpus = tempfile::tempdir().unwrap();
    let language = Language::new(5000);
    let mut rng = fastrand::Rng::with_seed(3);
    for i in 0..files {
        let text = language.text(&mut rng, i).chars().take(900).collect::<String>();
        std::fs::write(corpus.path().join(format!("f{i:05}.txt")), text).unwrap();
    }
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which goes first, so neither always meets a warmer disk.
        let (a, b) = if round.is_multiple_of(2) {
            (true, false)
        } else {
            (false, true)
        };
        let ra = pipeline_rate(corpus.path(), files, a);
        let rb = pipeline_rate(corpus.path(), files, b);
        let (r_on, r_off) = if a { (ra, rb) } else { (rb, ra) };
        println!("round {round}: P(1) index on {r_on:>7.0} docs/s, off {r_off:>7.0} docs/s");
        on.push(r_on);
        off.push(r_off);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (on, off) = (median(on), median(off));
    println!(
        "P(1) median: index on {on:.0}, off {off:.0} docs/s; indexing costs {:.1} % of P(1) (target <= 20 %)",
        (1.0 - on / off) * 100.0
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let docs = number("--docs", if quick { 2000 } else { 100_000 });
    let asked = number("--queries", if quick { 50 } else { 500 });
    let rounds = number("--rounds", if quick { 1 } else { 5 });
    let files = if quick { 300 } else { 2000 };
    let tokenizer = match arg_after("--tokenizer").as_deref() {
        Some(name) => Tokenizer::parse(name).expect("--tokenizer unicode61|trigram"),
        None => Tokenizer::Unicode61,
    };

    let language = Language::new(20_000);
    let mut rng = fastrand::Rng::with_seed(15);
    let texts: Vec<String> = (0..docs).map(|i| language.text(&mut rng, i)).collect();
    let bytes: usize = texts.iter().map(String::len).sum();
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions::default().tokenizer(tokenizer);
    let store = Store::open(dir.path().join("search.db"), opts).unwrap();
    let start = Instant::now();
    build(&store, &texts);
    let took = start.elapsed();
    store.checkpoint().unwrap();
    let size = std::fs::metadata(dir.path().join("search.db")).map_or(0, |m| m.len());
    println!(
        "built: {docs} documents, {:.1} MB of text, {tokenizer} tokenizer, in {:.1} s ({:.0} docs/s); database {:.1} MB",
        bytes as f64 / 1e6,
        took.as_secs_f64(),
        docs as f64 / took.as_secs_f64(),
        size as f64 / 1e6
    );
    report_latency(&store, &texts, asked);
    drop(store);
    report_indexing_cost(files, rounds);
}
