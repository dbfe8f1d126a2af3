//! `leasehold run` at scale (issue 29): many small text documents, what a
//! first run, a rerun and a search cost, and what the results leave on disk.
//!
//! Run: `cargo bench --bench scale -- [--docs N] [--rounds R] [--keep DIR] [--json]
//! [--bin PATH] [--growth N1,N2,...]`.
//! - `--docs N`: documents to generate (default 10,000: a few minutes at most).
//!   `--docs 100000` is the figure; `--docs 1000000` is opt-in and needs
//!   about 25 GB free (at the end of issue 29 the tree took ~4 GB, the mirror
//!   ~4 GB and the database ~2 GB; the rest is room, for recollindex among
//!   others); the bench warns when the file system has less.
//! - `--rounds R`: rounds of first run + reruns, each into a fresh data
//!   directory; figures are medians over them (default 3 up to 10,000
//!   documents, 1 above). Search and disk use come from the last round.
//! - `--keep DIR`: generate the tree in `DIR/tree-N-SEED` and keep it, so the
//!   next invocation reuses it (generated again only when missing). Data
//!   directories always go to a temporary directory deleted at the end.
//! - `--json`: one JSON object on stdout instead of the table (progress goes to
//!   stderr either way).
//! - `--bin PATH`: measure another `leasehold` binary (say, the build of the
//!   commit before a change) with the same tree; the warm searches still run
//!   in this process, with this build's library.
//! - `--growth N1,N2,...`: first runs only (`scale/growth.rs`). Each round
//!   (default 2) runs each size once, in the order given; documents per
//!   second and peak RSS at each size are given against the first size's.
//!   `--growth 100000,1000000 --keep DIR` measures the growth
//!   targets; it needs about 7 KB a document and round besides the trees.
//!   `--docs` is not used then.
//!
//! First runs right after a large deletion on the same file system (a previous
//! invocation's cleanup, a removed tree) are slower on ext4: for a minute or
//! more its inode allocator skips recently deleted inodes one by one. Leave
//! a few minutes between invocations, or compare builds with `--bin` in one.
//!
//! The tree: N documents of 40-300 words drawn from a Zipf-Mandelbrot
//! distribution over a 50,000-word made-up vocabulary (frequent words short),
//! in sentences, in a two-level tree of about 100 files per leaf directory; all
//! of it deterministic from a fixed seed (`fastrand`), no network.
//!
//! Each round measures, with the real `leasehold` binary as a child (wall, user
//! and system CPU and peak RSS from `wait4`, as in corpus.rs):
//! 1. the walk floor: Rust's walkdir + metadata of every entry, and `find DIR
//!    -printf '%s %T@\n' > /dev/null` when `find` exists (median of 3 each);
//!    the floor is the faster of the two;
//! 2. `leasehold run DIR -q --json` into a fresh data directory (docs/s, CPU,
//!    peak RSS);
//! 3. the same again with nothing changed (median of 3), against the floor;
//!    the first of them is also given alone: its check of the results looks
//!    at every shard the first run wrote, the later ones pass over the
//!    shards it found whole (DESIGN §9a);
//! 4. `recollindex` on the tree with a fresh configuration when it is on PATH;
//! 5. 1 % of the files rewritten with other words (mtime moved 2 s), then
//!    `leasehold run` again: seconds, per changed document, against the first
//!    run's cost per document, and against the budget `walk + 1.2 x the changed
//!    documents' first-run cost` (the target); then Recoll's incremental
//!    `recollindex` when it ran in 4;
//! 6. 1 % new documents written into `added/` below the tree, then `leasehold
//!    run` again: what an added document costs beyond the unchanged rerun,
//!    against a changed one (the same kind of rerun, the same number of
//!    documents); then `added/` is removed, so a kept tree stays as generated
//!    (a leftover of an interrupted invocation is removed before a round).
//!
//! In the last round, between 5 and 6, on its data directory as the 1 %
//! change left it: search latency for
//! four words of falling frequency, as `leasehold search WORD` one-shot (the
//! first call after the runs, then median and min of 7) and warm (one
//! `Store` opened in this process, `Store::search_page` with the CLI's default
//! limit of 20 and its snippets, median and min of 21: the CLI has no server; the warm figure leaves
//! out the CLI's per-hit stat of the result file); and disk use: the mirror's
//! allocated blocks (what `du` counts, not apparent size) and inodes (files +
//! directories), the database and its WAL, each per document and against the
//! text's bytes and the text rounded up to whole blocks.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

mod common;
#[path = "scale/growth.rs"]
mod growth;
use common::tree::{doc_path, document, ensure_tree, vocabulary, Zipf, SEED};
use serde_json::json;

/// The `leasehold` binary measured: the one this bench was built with, or
/// `--bin PATH` (another build, e.g. the commit before a change, to compare
/// in one session).
static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn bin() -> &'static Path {
    BIN.get_or_init(|| PathBuf::from(env!("CARGO_BIN_EXE_leasehold")))
}
/// Ranks (0 = most frequent) of the searched words: from one in nearly
/// every document to one in a handful.
const SEARCH_RANKS: [usize; 4] = [0, 40, 2_000, 30_000];
const CLI_SEARCHES: usize = 7;
const WARM_SEARCHES: usize = 21;
const UNCHANGED_RERUNS: usize = 3;
const WALKS: usize = 3;

/// What the command line asked for.
struct Args {
    docs: usize,
    rounds: usize,
    keep: Option<PathBuf>,
    json: bool,
    /// `--growth`: the sizes whose first runs are compared (empty: the
    /// usual rounds at `docs`).
    growth: Vec<usize>,
}

/// What one child process cost, from `wait4`.
#[derive(Clone, Copy, Default)]
struct Cost {
    wall: f64,
    cpu: f64,
    /// Bytes: the largest single process among those reaped.
    peak_rss: u64,
}

/// The part of `leasehold run --json`'s summary the bench checks and prints.
#[derive(Deserialize, Default, Clone)]
struct Summary {
    indexed: u64,
    failed: u64,
    new: usize,
    changed: usize,
    unchanged: usize,
    peak_memory_bytes: u64,
}

/// One round's measurements, in seconds unless named otherwise.
#[derive(Default, Clone)]
struct Round {
    walkdir: f64,
    find: Option<f64>,
    first: Cost,
    first_summary: Summary,
    unchanged: f64,
    /// The first unchanged rerun, whose check looks at every shard the
    /// first run wrote (the later ones pass over those it found whole).
    unchanged_first: f64,
    changed_docs: usize,
    changed: Cost,
    added_docs: usize,
    added: Cost,
    recoll_first: Option<Cost>,
    recoll_incremental: Option<Cost>,
}

impl Round {
    /// The walk floor: the faster of the two walks (the stricter target).
    fn floor(&self) -> f64 {
        self.find.map_or(self.walkdir, |f| f.min(self.walkdir))
    }
}

fn main() {
    let args = parse_args();
    warn_about_disk(&args);
    let scratch = match &args.keep {
        Some(dir) => {
            std::fs::create_dir_all(dir).expect("the --keep directory");
            tempfile::tempdir_in(dir)
        }
        None => tempfile::tempdir(),
    }
    .expect("a temporary directory");
    if !args.growth.is_empty() {
        growth::measure_growth(&args, scratch.path());
        remove_scratch(scratch);
        return;
    }
    let tree = match &args.keep {
        Some(dir) => dir.join(format!("tree-{}-{SEED}", args.docs)),
        None => scratch.path().join("tree"),
    };
    let vocab = vocabulary(SEED);
    let mut phases: Vec<(String, f64)> = Vec::new();
    let started = Instant::now();
    let generated = ensure_tree(&tree, args.docs, &vocab);
    phases.push((
        if generated {
            "generate"
        } else {
            "reuse (kept tree)"
        }
        .into(),
        started.elapsed().as_secs_f64(),
    ));
    let mut rounds = Vec::new();
    let mut last_store = None;
    for r in 0..args.rounds {
        let data = scratch.path().join(format!("round{r}"));
        let setup = RoundSetup {
            tree: &tree,
            dir: &data,
            round: r,
            n: args.docs,
            vocab: &vocab,
        };
        let mut round = setup.run(&mut phases);
        if r + 1 == args.rounds {
            // The last round's store as the 1 % change left it, before
            // documents are added to it and taken out of the tree again.
            let started = Instant::now();
            let searches = measure_searches(&tree, &data, &vocab);
            phases.push(("search".into(), started.elapsed().as_secs_f64()));
            let started = Instant::now();
            let disk = measure_disk(&tree, &data);
            phases.push(("disk use".into(), started.elapsed().as_secs_f64()));
            last_store = Some((searches, disk));
        }
        setup.rerun_added(&mut phases, &mut round);
        rounds.push(round);
    }
    let (searches, disk) = last_store.expect("at least one round");
    let report = report_json(&args, &rounds, &searches, &disk, &phases);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("JSON"));
    } else {
        print_table(&args, &rounds, &searches, &disk, &phases);
    }
    remove_scratch(scratch);
}

/// Deletes the data directories (and a tree not kept), saying how long it
/// took: a deletion this large slows the next first run on ext4.
fn remove_scratch(scratch: tempfile::TempDir) {
    let started = Instant::now();
    drop(scratch);
    eprintln!("cleanup: {:.1} s", started.elapsed().as_secs_f64());
}

/// `--docs`, `--rounds`, `--keep`, `--json`, `--bin`, `--growth`; `--bench`, which `cargo bench`
/// passes to every bench, is taken and ignored; anything else is a mistake
/// that must not quietly measure something else.
fn parse_args() -> Args {
    let mut args = Args {
        docs: 10_000,
        rounds: 0,
        keep: None,
        json: false,
        growth: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    let number = |flag: &str, v: Option<String>| -> usize {
        let v = v.unwrap_or_else(|| panic!("{flag} takes a number"));
        v.replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{flag} takes a number, not {v:?}"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--docs" => args.docs = number("--docs", it.next()),
            "--rounds" => args.rounds = number("--rounds", it.next()),
            "--keep" => args.keep = Some(PathBuf::from(it.next().expect("--keep takes a directory"))),
            "--json" => args.json = true,
            "--growth" => {
                let list = it.next().expect("--growth takes sizes, e.g. 100000,1000000");
                args.growth = list
                    .split(',')
                    .map(|n| number("--growth", Some(n.into())))
                    .collect();
            }
            "--bin" => {
                let path = PathBuf::from(it.next().expect("--bin takes the path of a leasehold binary"));
                BIN.set(path).expect("--bin given once");
            }
            "--bench" => {}
            other => {
                panic!("scale bench: unknown argument {other:?} (see the doc comment of benches/scale.rs)")
            }
        }
    }
    assert!(
        args.docs >= 100 || !args.growth.is_empty(),
        "--docs must be at least 100 (1 % of it is changed)"
    );
    assert!(
        args.growth.iter().all(|&n| n >= 1),
        "--growth sizes are numbers of documents, at least 1"
    );
    if args.rounds == 0 {
        args.rounds = match (args.growth.is_empty(), args.docs <= 10_000) {
            (false, _) => 2,
            (true, true) => 3,
            (true, false) => 1,
        };
    }
    args
}

/// Says on stderr when the file system holding the tree and the data has
/// less room than the run needs (about 25 KB a document with everything
/// kept, as measured in issue 29; for `--growth`, 5 KB a document for the
/// trees and 7 KB a document and round for the data directories, kept to
/// the end): a million documents fill a small disk.
fn warn_about_disk(args: &Args) {
    let dir = args.keep.clone().unwrap_or_else(std::env::temp_dir);
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).expect("a path");
    // SAFETY: statvfs fills the struct we own from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return;
    }
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    let (docs, need) = match args.growth.iter().sum::<usize>() as u64 {
        0 => (args.docs as u64, args.docs as u64 * 25_000),
        all => (all, all * (5_000 + args.rounds as u64 * 7_000)),
    };
    if free < need {
        eprintln!(
            "scale bench: WARNING: {} has {:.1} GB free; {docs} documents need about {:.1} GB",
            dir.display(),
            free as f64 / 1e9,
            need as f64 / 1e9
        );
    }
}

/// Rewrites 1 % of the documents (chosen from the round's seed) with other
/// words, and moves their mtime 2 s on so a size-and-mtime check sees the
/// change even when the size did not move. Returns how many.
fn change_one_percent(tree: &Path, n: usize, round: usize, vocab: &[String]) -> usize {
    let zipf = Zipf::new(vocab.len());
    let mut rng = fastrand::Rng::with_seed(SEED ^ (0x5ca1e << 8) ^ round as u64);
    let mut all: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut all);
    let picked = &all[..n / 100];
    for &i in picked {
        let path = doc_path(tree, n, i);
        let before = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .expect("an mtime");
        // A kept tree was changed by the same seed before: draw again until
        // the text differs from what is there, or nothing would change.
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        let text = std::iter::repeat_with(|| document(&mut rng, &zipf, vocab))
            .find(|t| *t != current)
            .expect("an endless iterator");
        std::fs::write(&path, text).expect("a rewrite");
        let file = File::options()
            .write(true)
            .open(&path)
            .expect("the rewritten file");
        file.set_modified(before + Duration::from_secs(2))
            .expect("set the mtime");
    }
    picked.len()
}

/// What one round works on: the tree, the round's own directory, its
/// number, the tree's document count and the vocabulary of its words.
struct RoundSetup<'a> {
    tree: &'a Path,
    dir: &'a Path,
    round: usize,
    n: usize,
    vocab: &'a [String],
}

impl RoundSetup<'_> {
    /// One round: walks, first run, unchanged reruns, Recoll, the 1 % change
    /// and the reruns after it. Each phase's time goes to `phases`.
    fn run(&self, phases: &mut Vec<(String, f64)>) -> Round {
        let (tree, dir, n) = (self.tree, self.dir, self.n);
        std::fs::create_dir_all(dir).expect("a round directory");
        let mut r = Round::default();
        let mut phase = |name: &str, started: Instant| phase_done(phases, self.round, name, started);
        remove_added(tree);
        let t = Instant::now();
        (r.walkdir, r.find) = walk_floor(tree);
        phase("walks", t);
        let t = Instant::now();
        (r.first, r.first_summary) = leasehold_run(tree, dir, "first");
        assert_eq!(
            r.first_summary.indexed as usize, n,
            "the first run indexes every document"
        );
        phase("first run", t);
        let t = Instant::now();
        let mut reruns = Vec::new();
        for i in 0..UNCHANGED_RERUNS {
            let (cost, s) = leasehold_run(tree, dir, &format!("unchanged{i}"));
            assert_eq!((s.unchanged, s.changed, s.new), (n, 0, 0), "an unchanged rerun");
            reruns.push(cost.wall);
        }
        r.unchanged_first = reruns[0];
        r.unchanged = median(reruns);
        phase("reruns, nothing changed", t);
        let recoll = on_path("recollindex");
        if recoll {
            let t = Instant::now();
            r.recoll_first = Some(recollindex(tree, dir, true));
            phase("recollindex, first run", t);
        }
        let t = Instant::now();
        r.changed_docs = change_one_percent(tree, n, self.round, self.vocab);
        phase("change 1 %", t);
        let t = Instant::now();
        let (cost, s) = leasehold_run(tree, dir, "changed");
        assert_eq!(s.changed, r.changed_docs, "the rerun sees every changed document");
        assert_eq!(s.failed, 0, "no document fails");
        r.changed = cost;
        phase("rerun, 1 % changed", t);
        if recoll {
            let t = Instant::now();
            r.recoll_incremental = Some(recollindex(tree, dir, false));
            phase("recollindex, incremental", t);
        }
        r
    }

    /// The end of a round: 1 % new documents, a rerun, and the documents
    /// taken out of the tree again ([`add_one_percent`], [`remove_added`]).
    fn rerun_added(&self, phases: &mut Vec<(String, f64)>, r: &mut Round) {
        let t = Instant::now();
        r.added_docs = add_one_percent(self.tree, self.n, self.round, self.vocab);
        let (cost, s) = leasehold_run(self.tree, self.dir, "added");
        assert_eq!(
            (s.new, s.changed),
            (r.added_docs, 0),
            "the rerun sees every added document and nothing else"
        );
        assert_eq!(s.failed, 0, "no document fails");
        r.added = cost;
        remove_added(self.tree);
        phase_done(phases, self.round, "rerun, 1 % added", t);
    }
}

/// Says on stderr how long phase `name` of round `round` took since
/// `started`, and keeps it in `phases` for the report.
fn phase_done(phases: &mut Vec<(String, f64)>, round: usize, name: &str, started: Instant) {
    let s = started.elapsed().as_secs_f64();
    eprintln!("round {}: {name}: {s:.1} s", round + 1);
    phases.push((format!("round {} {name}", round + 1), s));
}

/// Where [`add_one_percent`] puts its documents, below the tree.
const ADDED: &str = "added";

/// Writes `n / 100` new documents (of the tree's kind) into the tree's
/// [`ADDED`] folder, 100 to a leaf as in the tree: what a rerun that adds
/// documents is measured on, beside the one that changes as many.
fn add_one_percent(tree: &Path, n: usize, round: usize, vocab: &[String]) -> usize {
    let zipf = Zipf::new(vocab.len());
    let mut rng = fastrand::Rng::with_seed(SEED ^ (0xadd << 8) ^ round as u64);
    let count = n / 100;
    for i in 0..count {
        let leaf = tree.join(ADDED).join(format!("s{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&leaf).expect("an added leaf");
        }
        std::fs::write(
            leaf.join(format!("new{i:07}.txt")),
            document(&mut rng, &zipf, vocab),
        )
        .expect("an added document");
    }
    count
}

/// Takes the added documents out again, so the kept tree is the generated
/// one for the next round or invocation (also a leftover of an interrupted
/// one).
fn remove_added(tree: &Path) {
    match std::fs::remove_dir_all(tree.join(ADDED)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("removing the added documents: {e}"),
        _ => {}
    }
}

/// Medians of `WALKS` walks each: Rust's walkdir + metadata, and `find
/// -printf` when it is there. One unmeasured walk first warms the caches.
fn walk_floor(tree: &Path) -> (f64, Option<f64>) {
    rust_walk(tree);
    let walkdir = median((0..WALKS).map(|_| rust_walk(tree)).collect());
    let find = on_path("find").then(|| {
        median(
            (0..WALKS)
                .map(|_| {
                    let mut cmd = Command::new("find");
                    cmd.arg(tree).args(["-printf", "%s %T@\\n"]);
                    measure(&mut cmd, Stdio::null(), Stdio::null()).wall
                })
                .collect(),
        )
    });
    (walkdir, find)
}

/// Seconds to walk the tree and stat every entry, summing sizes so the
/// compiler cannot drop the stat.
fn rust_walk(tree: &Path) -> f64 {
    let t = Instant::now();
    let mut bytes = 0u64;
    for e in walkdir::WalkDir::new(tree).into_iter().filter_map(Result::ok) {
        bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
    }
    std::hint::black_box(bytes);
    t.elapsed().as_secs_f64()
}

/// `leasehold --data DIR/data run TREE -q --json`: its cost and summary.
/// stdout (the JSON) and stderr go to files named after `label`.
fn leasehold_run(tree: &Path, dir: &Path, label: &str) -> (Cost, Summary) {
    let out = dir.join(format!("{label}.json"));
    let err = dir.join(format!("{label}.log"));
    let mut cmd = Command::new(bin());
    cmd.arg("--data")
        .arg(dir.join("data"))
        .arg("run")
        .arg(tree)
        .args(["-q", "--json"]);
    let cost = measure(
        &mut cmd,
        File::create(&out).expect("a summary file").into(),
        File::create(&err).expect("a log file").into(),
    );
    let text = std::fs::read_to_string(&out).expect("the summary");
    let summary = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{label}'s summary: {e}: {text}"));
    (cost, summary)
}

/// `recollindex` on the tree with the configuration in `dir/recoll` (a fresh
/// one, `topdirs` = the tree, `noaspell = 1`, as corpus.rs does): with `-z`
/// (from nothing) when `first`, else incremental.
fn recollindex(tree: &Path, dir: &Path, first: bool) -> Cost {
    let conf = dir.join("recoll");
    if first {
        std::fs::create_dir_all(&conf).expect("a Recoll configuration directory");
        std::fs::write(
            conf.join("recoll.conf"),
            format!("topdirs = {}\nloglevel = 2\nnoaspell = 1\n", tree.display()),
        )
        .expect("recoll.conf");
    }
    let mut cmd = Command::new("recollindex");
    cmd.arg("-c").arg(&conf).env("RECOLL_CONFDIR", &conf);
    if first {
        cmd.arg("-z");
    }
    let log = File::create(dir.join(if first {
        "recoll-first.log"
    } else {
        "recoll-incr.log"
    }))
    .expect("a log file");
    measure(&mut cmd, Stdio::null(), log.into())
}

/// Runs `cmd` to its end ([`common::run_reaped`]); panics when it fails.
/// What the commands before it left unwritten is written first (`sync`),
/// so that a command does not wait in its own sync rounds for the write-back
/// of the one before it (`recollindex` leaves its index to write back).
fn measure(cmd: &mut Command, out: Stdio, err: Stdio) -> Cost {
    measure_exiting(cmd, out, err, 0)
}

/// [`measure`] of a command that must exit with `code`: `search` exits 1
/// when nothing matches, as a word the tree does not hold must not.
fn measure_exiting(cmd: &mut Command, out: Stdio, err: Stdio, code: i32) -> Cost {
    settle_writes();
    let r = common::run_reaped(cmd, out, err);
    assert!(
        r.exited_with(code),
        "{cmd:?} did not exit with {code} (wait status {})",
        r.status
    );
    Cost {
        wall: r.wall.as_secs_f64(),
        cpu: (r.user + r.sys).as_secs_f64(),
        peak_rss: r.peak_rss_kib * 1024,
    }
}

/// The file systems' dirty data written back (`sync`, where there is one;
/// the bench runs on unix only).
fn settle_writes() {
    let _ = Command::new("sync").status();
}

/// One searched word's figures, in milliseconds.
struct Search {
    word: String,
    rank: usize,
    /// Documents whose text has the word, counted in the tree.
    docs: usize,
    cli_first: f64,
    cli_median: f64,
    cli_min: f64,
    warm_median: f64,
    warm_min: f64,
}

/// The one-shot CLI first (the first call right after the runs is timed on
/// its own), then the warm in-process searches.
fn measure_searches(tree: &Path, dir: &Path, vocab: &[String]) -> Vec<Search> {
    let words: Vec<&String> = SEARCH_RANKS.iter().map(|&r| &vocab[r]).collect();
    let docs = document_frequencies(tree, &words);
    let data = dir.join("data");
    let mut searches = Vec::new();
    for (i, &rank) in SEARCH_RANKS.iter().enumerate() {
        let word = words[i];
        // A small tree may not hold a rare word: its search must find nothing.
        let found = docs[i] > 0;
        let cli_first = cli_search(&data, word, found);
        let cli: Vec<f64> = (0..CLI_SEARCHES)
            .map(|_| cli_search(&data, word, found))
            .collect();
        searches.push(Search {
            word: word.clone(),
            rank,
            docs: docs[i],
            cli_first,
            cli_median: median(cli.clone()),
            cli_min: cli.iter().copied().fold(f64::INFINITY, f64::min),
            warm_median: 0.0,
            warm_min: 0.0,
        });
    }
    let store = leasehold::Store::open(data.join("leasehold.db"), leasehold::StoreOptions::default())
        .expect("open the store");
    // The snippets are cut from the mirror's files, as the CLI's are.
    let mirror = leasehold::mirror::Mirror::open(data.join("mirror")).expect("open the mirror");
    let search = |word: &str| {
        let asked = leasehold::Search::new(word).limit(20).mirror(&mirror);
        store.search_page(&asked).expect("a search")
    };
    for s in &mut searches {
        let _ = search(&s.word);
        let ms: Vec<f64> = (0..WARM_SEARCHES)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(search(&s.word));
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        s.warm_min = ms.iter().copied().fold(f64::INFINITY, f64::min);
        s.warm_median = median(ms);
    }
    searches
}

/// Milliseconds of one `leasehold search WORD` (text output, discarded),
/// which must find something exactly when `found`.
fn cli_search(data: &Path, word: &str, found: bool) -> f64 {
    let mut cmd = Command::new(bin());
    cmd.arg("--data").arg(data).args(["search", word]);
    measure_exiting(&mut cmd, Stdio::null(), Stdio::null(), i32::from(!found)).wall * 1e3
}

/// For each word, the documents of the tree that contain it (as a
/// lowercased alphabetic token); reading every file also warms the page
/// cache for nothing else.
fn document_frequencies(tree: &Path, words: &[&String]) -> Vec<usize> {
    let mut counts = vec![0; words.len()];
    for e in walkdir::WalkDir::new(tree).into_iter().filter_map(Result::ok) {
        if !e.file_type().is_file() || e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .to_lowercase();
        let tokens: HashSet<&str> = text.split(|c: char| !c.is_alphabetic()).collect();
        for (i, w) in words.iter().enumerate() {
            counts[i] += usize::from(tokens.contains(w.as_str()));
        }
    }
    counts
}

/// Bytes and inodes of a directory tree.
#[derive(Default, Clone, Copy)]
struct Usage {
    /// Allocated blocks in bytes, what `du` counts.
    blocks: u64,
    /// Apparent size of the regular files.
    apparent: u64,
    /// Each file's size rounded up to its file system's block size.
    rounded: u64,
    files: u64,
    dirs: u64,
}

/// Disk use after the runs: the tree, the mirror, the database.
struct Disk {
    docs: u64,
    tree: Usage,
    mirror: Usage,
    db: u64,
    wal: u64,
}

fn measure_disk(tree: &Path, dir: &Path) -> Disk {
    let data = dir.join("data");
    let size = |name: &str| std::fs::metadata(data.join(name)).map_or(0, |m| m.len());
    let tree = usage(tree, true);
    Disk {
        docs: tree.files,
        tree,
        mirror: usage(&data.join("mirror"), false),
        db: size("leasehold.db"),
        wal: size("leasehold.db-wal"),
    }
}

/// Every entry's allocated blocks (as `du` counts them), regular files'
/// sizes and the count of files and directories; `skip_hidden` leaves out
/// dot files (the tree's marker), which are no document.
fn usage(root: &Path, skip_hidden: bool) -> Usage {
    let mut u = Usage::default();
    for e in walkdir::WalkDir::new(root).into_iter().filter_map(Result::ok) {
        if skip_hidden && e.depth() > 0 && e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let Ok(m) = e.metadata() else { continue };
        u.blocks += m.blocks() * 512;
        if m.is_dir() {
            u.dirs += 1;
        } else {
            u.files += 1;
            u.apparent += m.len();
            let b = m.blksize().max(1);
            u.rounded += m.len().div_ceil(b) * b;
        }
    }
    u
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median over the rounds of one figure.
fn med(rounds: &[Round], f: impl Fn(&Round) -> f64) -> f64 {
    median(rounds.iter().map(f).collect())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// The derived figures both outputs print, so the table and the JSON agree.
struct Derived {
    n: f64,
    floor: f64,
    docs_per_s: f64,
    per_doc_ms: f64,
    changed_docs: f64,
    changed_s: f64,
    changed_cpu: f64,
    per_changed_ms: f64,
    marginal_ms: f64,
    budget: f64,
    added_docs: f64,
    added_s: f64,
    /// An added document's cost beyond the unchanged rerun, ms.
    marginal_added_ms: f64,
}

fn derive(rounds: &[Round]) -> Derived {
    let n = rounds[0].first_summary.indexed as f64;
    let first = med(rounds, |r| r.first.wall);
    let changed_docs = rounds[0].changed_docs as f64;
    let changed_s = med(rounds, |r| r.changed.wall);
    let unchanged = med(rounds, |r| r.unchanged);
    let floor = med(rounds, Round::floor);
    let added_docs = rounds[0].added_docs.max(1) as f64;
    let added_s = med(rounds, |r| r.added.wall);
    Derived {
        n,
        floor,
        docs_per_s: med(rounds, |r| n / r.first.wall),
        per_doc_ms: first / n * 1e3,
        changed_docs,
        changed_s,
        changed_cpu: med(rounds, |r| r.changed.cpu),
        per_changed_ms: changed_s / changed_docs * 1e3,
        marginal_ms: (changed_s - unchanged).max(0.0) / changed_docs * 1e3,
        budget: floor + 1.2 * changed_docs * first / n,
        added_docs,
        added_s,
        marginal_added_ms: (added_s - unchanged).max(0.0) / added_docs * 1e3,
    }
}

fn report_json(
    args: &Args,
    rounds: &[Round],
    searches: &[Search],
    disk: &Disk,
    phases: &[(String, f64)],
) -> serde_json::Value {
    let d = derive(rounds);
    let unchanged = med(rounds, |r| r.unchanged);
    let recoll = rounds[0].recoll_first.is_some().then(|| {
        let first = med(rounds, |r| r.recoll_first.unwrap_or_default().wall);
        let incr = med(rounds, |r| r.recoll_incremental.unwrap_or_default().wall);
        json!({
            "first_s": first, "docs_per_s": d.n / first,
            "cpu_s": med(rounds, |r| r.recoll_first.unwrap_or_default().cpu),
            "peak_rss_bytes": med(rounds, |r| r.recoll_first.unwrap_or_default().peak_rss as f64),
            "incremental_s": incr,
            "leasehold_throughput_ratio": d.docs_per_s / (d.n / first),
            "incremental_ratio": d.changed_s / incr,
        })
    });
    json!({
        "docs": args.docs, "seed": SEED, "rounds": args.rounds,
        "walk": {
            "walkdir_s": med(rounds, |r| r.walkdir),
            "find_s": rounds[0].find.map(|_| med(rounds, |r| r.find.unwrap_or(f64::NAN))),
            "floor_s": d.floor,
        },
        "first_run": {
            "wall_s": med(rounds, |r| r.first.wall), "docs_per_s": d.docs_per_s,
            "cpu_s": med(rounds, |r| r.first.cpu), "ms_per_doc": d.per_doc_ms,
            "peak_rss_bytes": med(rounds, |r| r.first.peak_rss as f64),
            "main_peak_memory_bytes": med(rounds, |r| r.first_summary.peak_memory_bytes as f64),
        },
        "rerun_unchanged": {
            "wall_s": unchanged, "ratio_to_walk": unchanged / d.floor,
            "first_wall_s": med(rounds, |r| r.unchanged_first),
            "first_ratio_to_walk": med(rounds, |r| r.unchanged_first) / d.floor,
        },
        "rerun_changed": {
            "changed_docs": d.changed_docs, "wall_s": d.changed_s, "cpu_s": d.changed_cpu,
            "ms_per_changed_doc": d.per_changed_ms,
            "ratio_to_first_run_per_doc": d.per_changed_ms / d.per_doc_ms,
            "marginal_ms_per_changed_doc": d.marginal_ms,
            "marginal_ratio_to_first_run_per_doc": d.marginal_ms / d.per_doc_ms,
            "budget_s": d.budget, "ratio_to_budget": d.changed_s / d.budget,
            "marginal_ratio_to_added_doc": d.marginal_ms / d.marginal_added_ms,
        },
        "rerun_added": {
            "added_docs": d.added_docs, "wall_s": d.added_s,
            "marginal_ms_per_added_doc": d.marginal_added_ms,
            "marginal_ratio_to_first_run_per_doc": d.marginal_added_ms / d.per_doc_ms,
        },
        "search": searches.iter().map(|s| json!({
            "word": s.word, "rank": s.rank, "docs_with_word": s.docs,
            "cli_first_ms": s.cli_first, "cli_median_ms": s.cli_median, "cli_min_ms": s.cli_min,
            "warm_median_ms": s.warm_median, "warm_min_ms": s.warm_min,
        })).collect::<Vec<_>>(),
        "disk": disk_json(disk),
        "recollindex": recoll,
        "phases_s": phases.iter().map(|(k, v)| json!({"phase": k, "s": v})).collect::<Vec<_>>(),
    })
}

fn disk_json(d: &Disk) -> serde_json::Value {
    let n = d.docs.max(1) as f64;
    json!({
        "text_bytes": d.tree.apparent, "text_block_rounded_bytes": d.tree.rounded,
        "tree_du_bytes": d.tree.blocks,
        "mirror_du_bytes": d.mirror.blocks, "mirror_files": d.mirror.files, "mirror_dirs": d.mirror.dirs,
        "mirror_du_per_doc": d.mirror.blocks as f64 / n,
        "mirror_inodes_per_doc": (d.mirror.files + d.mirror.dirs) as f64 / n,
        "mirror_du_to_rounded_text": d.mirror.blocks as f64 / d.tree.rounded.max(1) as f64,
        "db_bytes": d.db, "wal_bytes": d.wal,
        "db_per_doc": (d.db + d.wal) as f64 / n,
        "db_to_text": (d.db + d.wal) as f64 / d.tree.apparent.max(1) as f64,
    })
}

fn print_table(args: &Args, rounds: &[Round], searches: &[Search], disk: &Disk, phases: &[(String, f64)]) {
    let d = derive(rounds);
    let mut o = BufWriter::new(std::io::stdout().lock());
    let mb = |b: f64| b / 1e6;
    let _ = writeln!(
        o,
        "scale bench: {} documents, {} round(s) (medians), seed {SEED}",
        args.docs, args.rounds
    );
    let _ = writeln!(o, "| measure | figure |\n|---|---|");
    let find = rounds[0].find.map_or("no find on PATH".into(), |_| {
        format!(
            "find -printf {:.3} s",
            med(rounds, |r| r.find.unwrap_or(f64::NAN))
        )
    });
    let _ = writeln!(
        o,
        "| walk floor (faster of the two) | {:.3} s (walkdir+metadata {:.3} s, {find}) |",
        d.floor,
        med(rounds, |r| r.walkdir)
    );
    let _ = writeln!(
        o,
        "| first run | {:.2} s ({:.0} docs/s, {:.3} ms/doc), CPU {:.2} s, peak RSS {:.0} MB (main process {:.0} MB) |",
        med(rounds, |r| r.first.wall),
        d.docs_per_s,
        d.per_doc_ms,
        med(rounds, |r| r.first.cpu),
        mb(med(rounds, |r| r.first.peak_rss as f64)),
        mb(med(rounds, |r| r.first_summary.peak_memory_bytes as f64)),
    );
    let unchanged = med(rounds, |r| r.unchanged);
    let unchanged_first = med(rounds, |r| r.unchanged_first);
    let _ = writeln!(
        o,
        "| rerun, nothing changed | {unchanged:.3} s ({:.2} x the walk floor; target <= 1.5 x); \
         the first after the run {unchanged_first:.3} s ({:.2} x), its check looking at every shard the run wrote |",
        unchanged / d.floor,
        unchanged_first / d.floor
    );
    let _ = writeln!(
        o,
        "| rerun, 1 % changed ({:.0} docs) | {:.2} s, CPU {:.2} s, {:.2} ms per changed doc ({:.1} x a first-run doc); \
         beyond the unchanged rerun {:.2} ms/doc ({:.1} x); {:.2} x the budget walk + 1.2 x their first-run cost ({:.2} s) |",
        d.changed_docs,
        d.changed_s,
        d.changed_cpu,
        d.per_changed_ms,
        d.per_changed_ms / d.per_doc_ms,
        d.marginal_ms,
        d.marginal_ms / d.per_doc_ms,
        d.changed_s / d.budget,
        d.budget,
    );
    let _ = writeln!(
        o,
        "| rerun, 1 % added ({:.0} docs) | {:.2} s; beyond the unchanged rerun {:.2} ms/doc ({:.1} x a first-run doc); \
         a changed doc costs {:.1} x an added one |",
        d.added_docs,
        d.added_s,
        d.marginal_added_ms,
        d.marginal_added_ms / d.per_doc_ms,
        d.marginal_ms / d.marginal_added_ms,
    );
    print_disk_rows(&mut o, disk);
    print_search_rows(&mut o, searches);
    print_recoll_rows(&mut o, rounds, &d);
    let _ = writeln!(o, "\nphases (s):");
    for (name, s) in phases {
        let _ = writeln!(o, "  {name:<40} {s:>8.1}");
    }
}

fn print_disk_rows(o: &mut impl Write, d: &Disk) {
    let n = d.docs.max(1) as f64;
    let _ = writeln!(
        o,
        "| text | {} docs, {:.1} MB ({:.0} B/doc; {:.1} MB rounded up to blocks); the tree takes {:.1} MB (du) |",
        d.docs,
        d.tree.apparent as f64 / 1e6,
        d.tree.apparent as f64 / n,
        d.tree.rounded as f64 / 1e6,
        d.tree.blocks as f64 / 1e6
    );
    let _ = writeln!(
        o,
        "| mirror on disk | {:.1} MB du ({:.0} B/doc, {:.2} x the text rounded to blocks; target <= 1.1 x), \
         {} inodes ({} files + {} dirs, {:.2} per doc; target 1) |",
        d.mirror.blocks as f64 / 1e6,
        d.mirror.blocks as f64 / n,
        d.mirror.blocks as f64 / d.tree.rounded.max(1) as f64,
        d.mirror.files + d.mirror.dirs,
        d.mirror.files,
        d.mirror.dirs,
        (d.mirror.files + d.mirror.dirs) as f64 / n
    );
    let _ = writeln!(
        o,
        "| database | {:.1} MB + WAL {:.1} MB ({:.0} B/doc, {:.2} x the text; target <= 2 x) |",
        d.db as f64 / 1e6,
        d.wal as f64 / 1e6,
        (d.db + d.wal) as f64 / n,
        (d.db + d.wal) as f64 / d.tree.apparent.max(1) as f64
    );
}

fn print_search_rows(o: &mut impl Write, searches: &[Search]) {
    for s in searches {
        let _ = writeln!(
            o,
            "| search {:?} (rank {}, in {} docs) | one-shot CLI: first {:.1} ms, median {:.1} ms, min {:.1} ms of {CLI_SEARCHES}; \
             warm Store::search: median {:.2} ms, min {:.2} ms of {WARM_SEARCHES} |",
            s.word, s.rank, s.docs, s.cli_first, s.cli_median, s.cli_min, s.warm_median, s.warm_min
        );
    }
}

fn print_recoll_rows(o: &mut impl Write, rounds: &[Round], d: &Derived) {
    if rounds[0].recoll_first.is_none() {
        let _ = writeln!(
            o,
            "| recollindex | not on PATH: no comparison (`apt-get install -y recoll`) |"
        );
        return;
    }
    let first = med(rounds, |r| r.recoll_first.unwrap_or_default().wall);
    let incr = med(rounds, |r| r.recoll_incremental.unwrap_or_default().wall);
    let _ = writeln!(
        o,
        "| recollindex first run | {first:.2} s ({:.0} docs/s), CPU {:.2} s, peak RSS {:.0} MB; leasehold {:.2} x its throughput |",
        d.n / first,
        med(rounds, |r| r.recoll_first.unwrap_or_default().cpu),
        med(rounds, |r| r.recoll_first.unwrap_or_default().peak_rss as f64) / 1e6,
        d.docs_per_s / (d.n / first),
    );
    let _ = writeln!(
        o,
        "| recollindex incremental, 1 % changed | {incr:.2} s; leasehold's rerun takes {:.2} x as long |",
        d.changed_s / incr
    );
}
