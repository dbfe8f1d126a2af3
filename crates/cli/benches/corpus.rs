//! `leasehold run` against Recoll's `recollindex` on a mixed real corpus.
//!
//! Run: `cargo bench --bench corpus -- [CORPUS] [--rounds N] [--by-format] [--ocr]`.
//! `CORPUS` is the folder `crates/cli/benches/corpus/build_corpus.sh OUT` builds (`OUT` or
//! `OUT/docs`); without it the bench looks in `$LEASEHOLD_BENCH_CORPUS`, then
//! `$CARGO_TARGET_DIR/bench-corpus`, then `target/bench-corpus`. Without a corpus
//! it prints how to get one and exits 0, so plain `cargo bench` stays cheap.
//!
//! Each round (3 by default) runs, in an order rotated from round to round:
//! - the real `leasehold` binary, `run CORPUS -q --json --workers W` into a fresh
//!   data directory, for W = 1, 2 and 4;
//! - `recollindex -c CONF -z` when it is on PATH, CONF a fresh configuration
//!   directory (`topdirs` = the corpus, `noaspell = 1`: the spelling dictionary is
//!   not text extraction). Its filters run with `/usr/bin` first on PATH, so they
//!   get the system Python its package was built for, not a user's shim.
//!
//! Runs' directories are deleted only when the rounds are over (one run of
//! each side takes about 150 MB): deleting thousands of files just before a
//! run slows that run's own file creation on ext4 without a journal.
//!
//! Per run: wall time, user and system CPU, and peak RSS, all from `wait4` on the
//! child: CPU includes every process it waited for (extractor children, Recoll's
//! filters), peak RSS is the largest single process among them. Reported: medians
//! over the rounds of docs/s (files in the corpus / wall time), and coverage per
//! format: documents whose text has at least one alphanumeric character
//! (leasehold: the accepted result file; Recoll: the stored abstract, which is
//! the start of the body text, read back with `xadump`). The ratios are leasehold
//! with W workers over `recollindex`, all measured within this run; the issue's
//! target is leasehold(2) >= 2.5 x `recollindex` with at least its coverage.
//!
//! After the rounds, the last round's `leasehold run` with 2 workers (its
//! search index built as it ran) and `recollindex` answer the same 20 fixed
//! one-word queries, both without a result limit, twice: with stemming (each
//! side's default: `leasehold search` and `recollq`'s English stem
//! expansion), then with words as written (`search --exact`, `recollq -s ""`):
//! per query the documents each found, those both found, and leasehold's
//! recall against Recoll's set.
//!
//! OCR: leasehold reads pictures and scanned PDF pages through tesseract when
//! it is installed; Recoll's default configuration, which the bench uses,
//! reads neither. So leasehold runs with OCR off (a configuration file with
//! `[extract] ocr_languages = []`), the same work on both sides; `--ocr` leaves
//! leasehold's on (its own default) to show what it costs: on the corpus
//! `build_corpus.sh` made for issue 29's note, 1,477 documents with text
//! either way, one worker 7.8 s without and 10.6 s with, peak RSS 96 and 224 MB
//! (tesseract's).
//!
//! `--by-format` adds one run of each side per format folder (`html`, `pdf`, ...),
//! leasehold with 1 worker, to show where the time goes.
//!
//! Install Recoll for the comparison with `apt-get install -y recoll poppler-utils`;
//! the bench installs nothing.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Deserialize;

mod common;

const DEFAULT_ROUNDS: usize = 3;
const WORKERS: [usize; 3] = [1, 2, 4];

/// What one child process cost, from `wait4`.
#[derive(Clone, Copy)]
struct Cost {
    wall: Duration,
    user: Duration,
    sys: Duration,
    /// KiB, the largest single process in the tree that was waited for.
    peak_rss_kib: u64,
}

/// Per format folder: (files, files with text).
type Coverage = BTreeMap<String, (usize, usize)>;

/// One measured run of one side.
struct Run {
    cost: Cost,
    coverage: Coverage,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    Leasehold(usize),
    Recoll,
}

impl Side {
    fn label(self) -> String {
        match self {
            Side::Leasehold(w) => format!("leasehold {w}w"),
            Side::Recoll => "recollindex".to_string(),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(docs) = corpus_dir(&args) else {
        println!(
            "corpus bench: no corpus; build one with `crates/cli/benches/corpus/build_corpus.sh [OUT]` \
             (default OUT: $LEASEHOLD_BENCH_CORPUS or target/bench-corpus), then run \
             `cargo bench --bench corpus -- [OUT]`"
        );
        return;
    };
    let rounds = flag_value(&args, "--rounds").unwrap_or(DEFAULT_ROUNDS);
    let ocr = args.iter().any(|a| a == "--ocr");
    let files = corpus_files(&docs);
    print_composition(&docs, &files);
    if ocr {
        println!("leasehold: OCR as installed (--ocr); recollindex: none, as configured by default");
    } else {
        println!("leasehold: OCR off, as recollindex's default configuration (--ocr turns leasehold's on)");
    }
    let recoll = on_path("recollindex") && on_path("xadump");
    if !recoll {
        println!("recollindex (or xadump) not found on PATH: leasehold's figures only, no ratio");
        println!("  (install it with `apt-get install -y recoll poppler-utils`)");
    }
    warm_page_cache(&files);
    let scratch = tempfile::tempdir().expect("a temporary directory");

    let mut sides: Vec<Side> = WORKERS.iter().map(|&w| Side::Leasehold(w)).collect();
    if recoll {
        sides.push(Side::Recoll);
    }
    let mut runs: BTreeMap<Side, Vec<Run>> = BTreeMap::new();
    let mut kept: BTreeMap<Side, PathBuf> = BTreeMap::new();
    for round in 0..rounds {
        let mut order = sides.clone();
        order.rotate_left(round % sides.len());
        for side in order {
            let dir = scratch
                .path()
                .join(format!("r{round}-{}", side.label().replace(' ', "-")));
            let run = run_side(side, &docs, &dir, ocr);
            println!(
                "round {}: {:<12} {:>7.2} s  {:>7.1} docs/s  cpu {:>6.2} s  peak {:>4} MB  with text {}",
                round + 1,
                side.label(),
                run.cost.wall.as_secs_f64(),
                files.len() as f64 / run.cost.wall.as_secs_f64(),
                (run.cost.user + run.cost.sys).as_secs_f64(),
                run.cost.peak_rss_kib / 1024,
                total_with_text(&run.coverage),
            );
            // Every run's directory stays until the rounds end (the scratch
            // directory goes then): on ext4 without a journal, inodes freed
            // in the last minutes are skipped by the allocator's search, so
            // deleting a run's thousands of files made the next run's file
            // creation pay for the bench's own cleanup.
            if round + 1 == rounds && matches!(side, Side::Leasehold(2) | Side::Recoll) {
                kept.insert(side, dir);
            }
            runs.entry(side).or_default().push(run);
        }
    }
    report(files.len(), &runs);
    if let (Some(ours), Some(theirs)) = (kept.get(&Side::Leasehold(2)), kept.get(&Side::Recoll)) {
        print_recall(&docs, ours, theirs);
    }
    if args.iter().any(|a| a == "--by-format") {
        by_format(&docs, recoll, ocr, scratch.path());
    }
}

/// The corpus's `docs` folder: the first argument that is not a flag (or a flag's
/// value), else the environment's or the target directory's `bench-corpus`.
fn corpus_dir(args: &[String]) -> Option<PathBuf> {
    let mut positional = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--rounds" {
            it.next();
        } else if !a.starts_with('-') && positional.is_none() {
            positional = Some(PathBuf::from(a));
        }
    }
    // A folder named on the command line is the only candidate: a typo must not
    // quietly measure another corpus.
    let candidates: Vec<PathBuf> = match positional {
        Some(dir) => vec![dir],
        None => [
            std::env::var_os("LEASEHOLD_BENCH_CORPUS").map(PathBuf::from),
            std::env::var_os("CARGO_TARGET_DIR").map(|t| Path::new(&t).join("bench-corpus")),
            Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-corpus")),
        ]
        .into_iter()
        .flatten()
        .collect(),
    };
    for dir in candidates {
        let docs = dir.join("docs");
        if docs.is_dir() {
            return Some(docs);
        }
        if dir.is_dir() && dir.file_name().is_some_and(|n| n == "docs") {
            return Some(dir);
        }
    }
    None
}

fn flag_value(args: &[String], flag: &str) -> Option<usize> {
    let i = args.iter().position(|a| a == flag)?;
    let v = args.get(i + 1)?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{flag} takes a number, not {v:?}")),
    )
}

/// Every regular file below `docs`, sorted.
fn corpus_files(docs: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = walkdir::WalkDir::new(docs)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect();
    files.sort();
    files
}

/// The format folder a file is in (`html`, `pdf`, ...): the first path component
/// below `docs`, as build_corpus.sh lays it out.
fn format_of(docs: &Path, path: &Path) -> String {
    path.strip_prefix(docs)
        .ok()
        .and_then(|p| p.components().next())
        .filter(|_| path.parent() != Some(docs))
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_else(|| "(top)".to_string())
}

fn print_composition(docs: &Path, files: &[PathBuf]) {
    let mut by: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for f in files {
        let e = by.entry(format_of(docs, f)).or_default();
        e.0 += 1;
        e.1 += std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
    }
    let bytes: u64 = by.values().map(|v| v.1).sum();
    println!(
        "corpus: {} ({} files, {:.1} MB)",
        docs.display(),
        files.len(),
        bytes as f64 / 1e6
    );
    for (fmt, (n, b)) in &by {
        println!("  {fmt:<9} {n:>5} files {:>7.1} MB", *b as f64 / 1e6);
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Reads every file once so the first timed run does not pay for the disk alone.
fn warm_page_cache(files: &[PathBuf]) {
    let mut buf = Vec::new();
    for f in files {
        buf.clear();
        if let Ok(mut file) = File::open(f) {
            let _ = file.read_to_end(&mut buf);
        }
    }
}

fn run_side(side: Side, docs: &Path, dir: &Path, ocr: bool) -> Run {
    match side {
        Side::Leasehold(w) => run_leasehold(docs, w, dir, ocr),
        Side::Recoll => run_recoll(docs, dir),
    }
}

/// Runs `cmd` with stdout and stderr into `log` ([`common::run_reaped`]);
/// panics with the log's last lines when it fails.
fn measure(cmd: &mut Command, log: &Path) -> Cost {
    let out = File::create(log).expect("a log file");
    let err = out.try_clone().expect("a second handle on the log");
    let r = common::run_reaped(cmd, out.into(), err.into());
    if !r.exited_with(0) {
        let tail = std::fs::read_to_string(log).unwrap_or_default();
        let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join("\n");
        panic!("{cmd:?} failed (wait status {}); its log ends:\n{tail}", r.status);
    }
    Cost {
        wall: r.wall,
        user: r.user,
        sys: r.sys,
        peak_rss_kib: r.peak_rss_kib,
    }
}

#[derive(Deserialize)]
struct ListRow {
    key: String,
    status: String,
    result: Option<PathBuf>,
}

/// leasehold's `run` with `workers` into `dir`; without `ocr` (`--ocr`, see
/// the module docs) its OCR is turned off by a configuration file.
fn run_leasehold(docs: &Path, workers: usize, dir: &Path, ocr: bool) -> Run {
    std::fs::create_dir_all(dir).expect("a run directory");
    let data = dir.join("data");
    let bin = env!("CARGO_BIN_EXE_leasehold");
    let mut cmd = Command::new(bin);
    cmd.arg("--data").arg(&data);
    if !ocr {
        let config = dir.join("leasehold.toml");
        std::fs::write(&config, "[extract]\nocr_languages = []\n").expect("the configuration file");
        cmd.arg("--config").arg(config);
    }
    let cost = measure(
        cmd.arg("run")
            .arg(docs)
            .args(["-q", "--json", "--workers", &workers.to_string()]),
        &dir.join("run.log"),
    );
    let listing = Command::new(bin)
        .arg("--data")
        .arg(&data)
        .args(["list", "--json", "--limit", "100000000"])
        .stderr(Stdio::inherit())
        .output()
        .expect("leasehold list");
    assert!(listing.status.success(), "leasehold list failed");
    let rows: Vec<ListRow> = serde_json::from_slice(&listing.stdout).expect("list --json parses");
    let mut coverage = Coverage::new();
    for row in rows {
        let e = coverage
            .entry(format_of(Path::new(""), Path::new(&row.key)))
            .or_default();
        e.0 += 1;
        let text = row
            .result
            .filter(|_| row.status == "indexed")
            .and_then(|p| std::fs::read(p).ok());
        if text.is_some_and(|t| has_text(&String::from_utf8_lossy(&t))) {
            e.1 += 1;
        }
    }
    Run { cost, coverage }
}

/// The fixed queries of the recall comparison: words common in the corpus's
/// documentation, licences, papers and office files.
const RECALL_QUERIES: [&str; 20] = [
    "license",
    "copyright",
    "function",
    "example",
    "install",
    "version",
    "error",
    "table",
    "figure",
    "server",
    "network",
    "python",
    "document",
    "software",
    "address",
    "password",
    "chapter",
    "library",
    "warranty",
    "security",
];

/// [`print_recall_of`] with stemming on both sides, then with words as written.
fn print_recall(docs: &Path, ours: &Path, theirs: &Path) {
    print_recall_of(docs, ours, theirs, true);
    print_recall_of(docs, ours, theirs, false);
}

/// Per query: what `leasehold search` (the run in `ours`) and `recollq` (the
/// index in `theirs`) found, and leasehold's recall against Recoll's set;
/// `stems`: each side expands words to their other forms.
fn print_recall_of(docs: &Path, ours: &Path, theirs: &Path, stems: bool) {
    let how = match stems {
        true => "stemming on both sides",
        false => "words as written: search --exact, recollq -s \"\"",
    };
    println!("\nrecall, leasehold search vs recollq ({how}), same corpus:");
    println!(
        "{:<10} {:>9} {:>8} {:>6} {:>7}",
        "query", "leasehold", "recoll", "both", "recall"
    );
    let (mut sum_both, mut sum_theirs) = (0usize, 0usize);
    for q in RECALL_QUERIES {
        let mine = leasehold_search(ours, q, stems);
        let recoll = recollq(docs, theirs, q, stems);
        let both = mine.intersection(&recoll).count();
        let recall = if recoll.is_empty() {
            1.0
        } else {
            both as f64 / recoll.len() as f64
        };
        println!(
            "{q:<10} {:>9} {:>8} {both:>6} {recall:>7.2}",
            mine.len(),
            recoll.len()
        );
        sum_both += both;
        sum_theirs += recoll.len();
    }
    println!(
        "all 20: leasehold found {sum_both} of the {sum_theirs} (query, document) pairs recollq found: recall {:.2}",
        sum_both as f64 / sum_theirs.max(1) as f64
    );
}

/// The keys `leasehold search QUERY` finds in the run's data directory
/// (`--exact` unless `stems`).
fn leasehold_search(run: &Path, query: &str, stems: bool) -> std::collections::BTreeSet<String> {
    #[derive(Deserialize)]
    struct Hit {
        key: String,
    }
    #[derive(Deserialize, Default)]
    struct Page {
        hits: Vec<Hit>,
    }
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("--data")
        .arg(run.join("data"))
        .args(["search", query, "--json", "--limit", "0"])
        .args((!stems).then_some("--exact"))
        .output()
        .expect("leasehold search");
    // Exit 1 with an empty page is no match, as for grep.
    if out.status.code() != Some(1) {
        said_failure("leasehold search", query, &out);
    }
    let page: Page = serde_json::from_slice(&out.stdout).unwrap_or_default();
    page.hits.into_iter().map(|h| h.key).collect()
}

/// The documents (as keys: paths relative to `docs`) `recollq` finds for
/// `query` in the index of the run in `run`; without `stems`, with its stem
/// expansion off (`-s ""`).
fn recollq(docs: &Path, run: &Path, query: &str, stems: bool) -> std::collections::BTreeSet<String> {
    let conf = run.join("recoll");
    let no_stems: &[&str] = if stems { &[] } else { &["-s", ""] };
    let out = Command::new("recollq")
        .arg("-c")
        .arg(&conf)
        .args(["-b", "-n", "0"])
        .args(no_stems)
        .arg(query)
        .env("RECOLL_CONFDIR", &conf)
        .env("PATH", recoll_path())
        .output()
        .expect("recollq");
    said_failure("recollq", query, &out);
    let prefix = format!("file://{}/", docs.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix(&prefix).map(str::to_owned))
        .collect()
}

/// A search that failed would read as no hits (and a recall of 1.0 when
/// Recoll's failed): say so beside the table.
fn said_failure(what: &str, query: &str, out: &std::process::Output) {
    if !out.status.success() {
        eprintln!(
            "{what} {query:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

/// At least one alphanumeric character: the same test for both sides.
fn has_text(s: &str) -> bool {
    s.chars().any(char::is_alphanumeric)
}

/// PATH for Recoll's filters: the system's interpreters first (its Python
/// filters start with `#!/usr/bin/env python3`).
fn recoll_path() -> std::ffi::OsString {
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![PathBuf::from("/usr/bin"), PathBuf::from("/bin")];
    dirs.extend(std::env::split_paths(&rest));
    std::env::join_paths(dirs).expect("PATH entries join")
}

fn run_recoll(docs: &Path, dir: &Path) -> Run {
    let conf = dir.join("recoll");
    std::fs::create_dir_all(&conf).expect("a Recoll configuration directory");
    std::fs::write(
        conf.join("recoll.conf"),
        format!("topdirs = {}\nloglevel = 2\nnoaspell = 1\n", docs.display()),
    )
    .expect("recoll.conf");
    let cost = measure(
        Command::new("recollindex")
            .arg("-c")
            .arg(&conf)
            .arg("-z")
            .env("RECOLL_CONFDIR", &conf)
            .env("PATH", recoll_path()),
        &dir.join("recollindex.log"),
    );
    Run {
        cost,
        coverage: recoll_coverage(docs, &conf),
    }
}

/// Every document Recoll stored below `docs`, by format folder, with text when
/// its stored abstract (the start of the body text, after Recoll's `?!#@` mark
/// for an abstract made from the text) has an alphanumeric character. Read with
/// `xadump -D`, one document id at a time: `recollq` does not print the stored
/// abstract, and a query that matches every document depends on its parser.
fn recoll_coverage(docs: &Path, conf: &Path) -> Coverage {
    let db = conf.join("xapiandb");
    let xadump = |args: &[&str]| {
        let out = Command::new("xadump")
            .arg("-d")
            .arg(&db)
            .args(args)
            .stderr(Stdio::null())
            .output()
            .expect("xadump");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The first line: "DB: ndocs N lastdocid M avglength X".
    let header = xadump(&["-i", "1", "-D"]);
    let last: u32 = header
        .split_whitespace()
        .skip_while(|w| *w != "lastdocid")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no lastdocid in xadump's header: {header:?}"));
    let prefix = format!("file://{}/", docs.display());
    let mut coverage = Coverage::new();
    for id in 1..=last {
        let data = xadump(&["-i", &id.to_string(), "-D"]);
        let field = |name: &str| {
            data.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
                .unwrap_or_default()
        };
        let Some(key) = field("url").strip_prefix(&prefix) else {
            continue;
        };
        if field("mtype") == "inode/directory" {
            continue;
        }
        let e = coverage
            .entry(format_of(Path::new(""), Path::new(key)))
            .or_default();
        e.0 += 1;
        if has_text(field("abstract").trim_start_matches("?!#@")) {
            e.1 += 1;
        }
    }
    coverage
}

fn total_with_text(c: &Coverage) -> usize {
    c.values().map(|v| v.1).sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn report(files: usize, runs: &BTreeMap<Side, Vec<Run>>) {
    let rate = |s: &Side| {
        median(
            runs[s]
                .iter()
                .map(|r| files as f64 / r.cost.wall.as_secs_f64())
                .collect(),
        )
    };
    println!();
    println!(
        "medians over {} round(s), {files} files:",
        runs.values().next().map_or(0, Vec::len)
    );
    println!(
        "  {:<12} {:>9} {:>9} {:>10} {:>10} {:>8}  with text (min-max over rounds)",
        "side", "docs/s", "wall s", "user s", "sys s", "peak MB"
    );
    for (side, rs) in runs {
        let med = |f: &dyn Fn(&Run) -> f64| median(rs.iter().map(f).collect());
        let texts: Vec<usize> = rs.iter().map(|r| total_with_text(&r.coverage)).collect();
        println!(
            "  {:<12} {:>9.1} {:>9.2} {:>10.2} {:>10.2} {:>8.0}  {}-{} of {}",
            side.label(),
            rate(side),
            med(&|r| r.cost.wall.as_secs_f64()),
            med(&|r| r.cost.user.as_secs_f64()),
            med(&|r| r.cost.sys.as_secs_f64()),
            med(&|r| r.cost.peak_rss_kib as f64 / 1024.0),
            texts.iter().min().unwrap_or(&0),
            texts.iter().max().unwrap_or(&0),
            files,
        );
    }
    print_coverage_by_format(runs);
    if runs.contains_key(&Side::Recoll) {
        let reference = rate(&Side::Recoll);
        let recoll_text = runs[&Side::Recoll]
            .iter()
            .map(|r| total_with_text(&r.coverage))
            .min()
            .unwrap_or(0);
        for w in WORKERS {
            let side = Side::Leasehold(w);
            let ours = runs[&side]
                .iter()
                .map(|r| total_with_text(&r.coverage))
                .min()
                .unwrap_or(0);
            println!(
                "  ratio leasehold {w}w / recollindex: {:.2}x throughput, coverage {ours} vs {recoll_text}{}",
                rate(&side) / reference,
                if w == 2 {
                    "   (target >= 2.5x, coverage >= recollindex's)"
                } else {
                    ""
                },
            );
        }
    } else {
        println!("  no recollindex on PATH: no ratio");
    }
}

fn print_coverage_by_format(runs: &BTreeMap<Side, Vec<Run>>) {
    println!("  with text by format (last round): format: files / per side");
    let formats: std::collections::BTreeSet<&String> = runs
        .values()
        .flat_map(|rs| rs.last().into_iter().flat_map(|r| r.coverage.keys()))
        .collect();
    for fmt in formats {
        let cells: Vec<String> = runs
            .iter()
            .map(|(side, rs)| {
                let (n, t) = rs
                    .last()
                    .and_then(|r| r.coverage.get(fmt))
                    .copied()
                    .unwrap_or((0, 0));
                format!("{} {t}/{n}", side.label())
            })
            .collect();
        println!("    {fmt:<9} {}", cells.join("  "));
    }
}

/// One run per side per format folder: leasehold with 1 worker, then recollindex.
fn by_format(docs: &Path, recoll: bool, ocr: bool, scratch: &Path) {
    println!();
    println!("by format (one run each; leasehold 1 worker; CPU = user + system of the whole tree):");
    let mut formats: Vec<PathBuf> = std::fs::read_dir(docs)
        .expect("the corpus folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    formats.sort();
    for sub in formats {
        let n = corpus_files(&sub).len();
        let name = sub.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let mut line = format!("  {name:<9} {n:>5} files");
        let dir = scratch.join(format!("fmt-{name}-leasehold"));
        let ours = run_leasehold(&sub, 1, &dir, ocr).cost;
        let _ = std::fs::remove_dir_all(&dir);
        line += &cost_cells("leasehold", n, ours);
        if recoll {
            let dir = scratch.join(format!("fmt-{name}-recoll"));
            let theirs = run_recoll(&sub, &dir).cost;
            let _ = std::fs::remove_dir_all(&dir);
            line += &cost_cells("recollindex", n, theirs);
        }
        println!("{line}");
    }
}

fn cost_cells(label: &str, n: usize, c: Cost) -> String {
    let cpu = (c.user + c.sys).as_secs_f64();
    format!(
        "  | {label} {:>6.2} s wall, cpu {:>6.2} s ({:>6.1} ms/file)",
        c.wall.as_secs_f64(),
        cpu,
        cpu * 1000.0 / n.max(1) as f64
    )
}
