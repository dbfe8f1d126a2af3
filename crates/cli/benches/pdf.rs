//! PDF extraction against poppler's `pdftotext`, on a folder of real PDFs.
//!
//! Run: `cargo bench --bench pdf -- CORPUS_DIR`, where `CORPUS_DIR` is the folder
//! `crates/cli/benches/corpus/fetch_pdfs.sh OUT` builds (`OUT` or `OUT/pdfs`; every `*.pdf`
//! below it, recursively, in sorted order). Without a folder it prints how to get
//! one and exits 0, so plain `cargo bench` and CI's `cargo bench --no-run` stay
//! cheap.
//!
//! Each file goes through leasehold's isolated extractor (the `leasehold` binary as
//! a supervised child, 30 s per file, so a parser that crashes or hangs costs that
//! file only) and through `pdftotext -enc UTF-8 FILE -` (30 s, killed after). A side
//! "reads" a file when its text has at least one word. On the files both read, word
//! recall is the share of pdftotext's words (lowercased, split on anything not
//! alphanumeric, compared as multisets) that leasehold's text also has. This is the
//! harness behind the table in `src/extract/pdf.rs` and the README; its targets are
//! "reads at least pdftotext's count minus 2%" and "median recall at least 0.95".
//!
//! Without `pdftotext` on PATH it reports leasehold's own figures only.
//!
//! Then the large PDFs (at least [`LARGE_PAGES`] pages, as leasehold counts them):
//! each side [`ROUNDS`] times in a process of its own, interleaved, with the CPU
//! time (user + system) and peak RSS that `wait4` reports; the median of each is
//! compared. The target is issue 31's: leasehold's CPU at most 1.5 × pdftotext's on
//! every large file. Its peak memory is shown against the file's size; the fixed cap
//! is the extraction memory limit (`--extract-memory`, 1 GiB by default), which the
//! child runs under. leasehold's side is this bench binary run again with
//! `--extract-one FILE`, reading it through the same registry the child uses.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use leasehold_extract::{Extractor, IsolatedExtractor, Limits};

/// Per-file bound on each side: the figure the README's table was measured with.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Two files at a time keeps a few-hundred-file corpus to a couple of minutes
/// without the two sides fighting much over CPU time.
const THREADS: usize = 2;
/// Progress goes to stderr this often, so a long run shows it is alive.
const PROGRESS_EVERY: usize = 50;
/// At most this many missed files are listed: enough to spot a pattern.
const MAX_LISTED: usize = 20;
/// What one run cost: CPU seconds (user + system) and peak RSS in bytes.
type Cost = (f64, u64);

/// A PDF of this many pages or more is large (issue 31's "large PDFs").
const LARGE_PAGES: u32 = 500;
/// Runs of each side per large file; the median is reported.
const ROUNDS: usize = 3;
/// The argument that makes this binary extract one file and exit.
const EXTRACT_ONE: &str = "--extract-one";
/// The argument that makes this binary run a command and print its CPU seconds
/// and peak RSS ([`measure_command`]).
const MEASURE: &str = "--measure";

/// What one file gave each side.
struct Outcome {
    /// The path below the corpus folder, for the report.
    name: String,
    ours: Side,
    /// `None` when pdftotext is not installed.
    reference: Option<Side>,
    /// Word recall, when both sides read the file.
    recall: Option<f64>,
    /// The page count leasehold read, when it read the file.
    pages: Option<u32>,
}

/// One side's verdict on one file.
struct Side {
    /// At least one word of text.
    read: bool,
    /// Why it produced no words (an error, a timeout, or empty text).
    error: Option<String>,
    elapsed: Duration,
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(at) = args.iter().position(|a| a == MEASURE) {
        measure_command(&args[at + 1..]);
        return;
    }
    if let Some(file) = args.iter().skip_while(|a| *a != EXTRACT_ONE).nth(1) {
        extract_one(Path::new(file));
        return;
    }
    let Some(dir) = corpus_arg() else {
        println!("{}", how_to_get_a_corpus());
        return;
    };
    let root = pdf_root(&dir);
    let files = pdf_files(&root);
    let have_reference = pdftotext_available();
    if !have_reference {
        println!("pdftotext not found on PATH (apt-get install poppler-utils): leasehold's figures only");
    }
    let outcomes = run_all(&root, &files, have_reference);
    report(&root, &outcomes, files.len() - outcomes.len(), have_reference);
    if have_reference {
        report_large(&root, &outcomes);
    }
}

/// The corpus folder: the first argument that is not a flag (cargo passes
/// `--bench`), if it exists.
fn corpus_arg() -> Option<PathBuf> {
    let dir = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(PathBuf::from)?;
    dir.is_dir().then_some(dir)
}

/// One line, so that a bench run without a corpus says what to do and nothing else.
fn how_to_get_a_corpus() -> &'static str {
    "pdf bench: no corpus; build one with `crates/cli/benches/corpus/fetch_pdfs.sh OUT`, \
     then run `cargo bench --bench pdf -- OUT`"
}

/// `OUT/pdfs` when given `OUT`: the rest of `OUT` (the download cache) holds PDFs
/// too, which are not part of the corpus.
fn pdf_root(dir: &Path) -> PathBuf {
    let pdfs = dir.join("pdfs");
    if pdfs.is_dir() {
        pdfs
    } else {
        dir.to_path_buf()
    }
}

/// Every `*.pdf` below `root`, sorted, so two runs see the same files in the same
/// order. Unreadable directories are reported and skipped.
fn pdf_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(root) {
        match entry {
            Ok(e) if e.file_type().is_file() && is_pdf(e.path()) => files.push(e.into_path()),
            Ok(_) => {}
            Err(e) => eprintln!("pdf bench: skipping: {e}"),
        }
    }
    files.sort();
    files
}

/// By extension, as the corpus script names its files; case-insensitive because
/// real-world collections have `.PDF` too.
fn is_pdf(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("pdf"))
}

/// Whether the reference can run at all; checked once so a missing poppler is one
/// message, not one error per file.
fn pdftotext_available() -> bool {
    Command::new("pdftotext")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Runs every file on [`THREADS`] threads sharing one index; files that cannot be
/// read are reported and left out. Results come back in corpus order.
fn run_all(root: &Path, files: &[PathBuf], have_reference: bool) -> Vec<Outcome> {
    // A flat deadline, as pdftotext gets: no allowance for the size.
    let limits = Limits {
        deadline: TIMEOUT,
        deadline_per_mib: Duration::ZERO,
        ..Limits::default()
    };
    let extractor = IsolatedExtractor::new(env!("CARGO_BIN_EXE_leasehold"), limits);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Outcome)>> = Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = files.get(i) else { break };
                if let Some(outcome) = run_one(&extractor, root, path, have_reference) {
                    results
                        .lock()
                        .expect("no thread panics holding it")
                        .push((i, outcome));
                }
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, files.len());
            });
        }
    });
    let mut results = results.into_inner().expect("no thread panics holding it");
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, o)| o).collect()
}

/// A line on stderr every [`PROGRESS_EVERY`] files: stdout is kept for the report.
fn progress(done: usize, total: usize) {
    if done.is_multiple_of(PROGRESS_EVERY) {
        eprintln!("pdf bench: {done}/{total} files");
    }
}

/// Both sides on one file; `None` (after saying why) when the file cannot be read,
/// since a corpus problem is not an extraction result.
fn run_one(extractor: &IsolatedExtractor, root: &Path, path: &Path, have_reference: bool) -> Option<Outcome> {
    let name = path.strip_prefix(root).unwrap_or(path).display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("pdf bench: skipping {name}: {e}");
            return None;
        }
    };
    let (ours, our_words, pages) = run_ours(extractor, &name, &bytes);
    let (reference, ref_words) = if have_reference {
        let (side, words) = run_pdftotext(path);
        (Some(side), words)
    } else {
        (None, Vec::new())
    };
    let both = ours.read && reference.as_ref().is_some_and(|r| r.read);
    let recall = both.then(|| recall(&ref_words, &our_words));
    Some(Outcome {
        name,
        ours,
        reference,
        recall,
        pages,
    })
}

/// leasehold's extraction through the `Extractor` trait, timed per call (a fresh
/// child's start-up lands in the first call of each thread and after a crash).
fn run_ours(extractor: &IsolatedExtractor, name: &str, bytes: &[u8]) -> (Side, Vec<String>, Option<u32>) {
    let start = Instant::now();
    let result = extractor.extract_noted(name, bytes, &AtomicBool::new(false));
    let elapsed = start.elapsed();
    match result {
        Ok(done) => {
            let (side, words) = side_from_text(&done.text, elapsed);
            (side, words, done.pages)
        }
        Err(e) => (failed(e.to_string(), elapsed), Vec::new(), None),
    }
}

/// The reference: `pdftotext -enc UTF-8 FILE -`, killed after [`TIMEOUT`].
/// Its words count whatever its exit status, as poppler prints what it could
/// read of a damaged file and then fails.
fn run_pdftotext(path: &Path) -> (Side, Vec<String>) {
    let start = Instant::now();
    let child = Command::new("pdftotext")
        .args(["-enc", "UTF-8"])
        .arg(path)
        .arg("-")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return (
                failed(format!("pdftotext did not start: {e}"), start.elapsed()),
                Vec::new(),
            )
        }
    };
    // The output is drained on its own thread: a big document fills the pipe long
    // before pdftotext exits, and polling `try_wait` alone would then never end.
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let reader = thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).map(|_| out)
    });
    let timed_out = wait_or_kill(&mut child);
    let elapsed = start.elapsed();
    let output = reader.join().expect("the reader does not panic");
    match (timed_out, output) {
        (true, _) => (
            failed(format!("timed out after {}s", TIMEOUT.as_secs()), elapsed),
            Vec::new(),
        ),
        (false, Err(e)) => (failed(format!("reading its output: {e}"), elapsed), Vec::new()),
        (false, Ok(out)) => side_from_text(&String::from_utf8_lossy(&out), elapsed),
    }
}

/// Polls the child until it exits or [`TIMEOUT`] passes, then kills it; true when
/// it had to be killed. Polling keeps this to std, with no timer thread per file.
fn wait_or_kill(child: &mut std::process::Child) -> bool {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return false,
            Ok(None) if start.elapsed() < TIMEOUT => thread::sleep(Duration::from_millis(5)),
            // Timed out, or the status cannot be read: either way, make sure it is gone.
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return true;
            }
        }
    }
}

/// A side's verdict from its text: "read" means at least one word, the same test
/// for both sides.
fn side_from_text(text: &str, elapsed: Duration) -> (Side, Vec<String>) {
    let words = words(text);
    if words.is_empty() {
        (failed("no words in its text".to_string(), elapsed), words)
    } else {
        let side = Side {
            read: true,
            error: None,
            elapsed,
        };
        (side, words)
    }
}

/// A side that read nothing, with the reason for the report.
fn failed(error: String, elapsed: Duration) -> Side {
    Side {
        read: false,
        error: Some(error),
        elapsed,
    }
}

/// Lowercased runs of alphanumerics: tolerant of the spacing, hyphenation and
/// punctuation differences between extractors, strict about the letters.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// |reference ∩ ours| / |reference| as multisets: repeating a word does not earn
/// credit for a missing one. `reference` is never empty here (the file was read).
fn recall(reference: &[String], ours: &[String]) -> f64 {
    let mut left: HashMap<&str, usize> = HashMap::new();
    for w in ours {
        *left.entry(w.as_str()).or_default() += 1;
    }
    let found = reference
        .iter()
        .filter(|w| match left.get_mut(w.as_str()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        })
        .count();
    found as f64 / reference.len() as f64
}

/// The whole report on stdout, with or without the reference.
fn report(root: &Path, outcomes: &[Outcome], skipped: usize, have_reference: bool) {
    println!("pdf bench: {} files in {}", outcomes.len(), root.display());
    if skipped > 0 {
        println!("skipped (could not be read): {skipped}");
    }
    if have_reference {
        report_reads(outcomes);
        report_recall(outcomes);
        report_times(outcomes);
        report_missed(outcomes);
    } else {
        report_ours_only(outcomes);
    }
}

/// Without pdftotext: how many files leasehold reads and how long one takes.
fn report_ours_only(outcomes: &[Outcome]) {
    let read = outcomes.iter().filter(|o| o.ours.read).count();
    println!("leasehold reads: {read} of {}", outcomes.len());
    let ms = median(outcomes.iter().map(|o| millis(o.ours.elapsed)).collect());
    println!("median time per file: leasehold {}", fmt_ms(ms));
}

/// The read counts and the first target: leasehold reads nearly every file the
/// reference reads (2% slack for the odd file poppler alone handles).
fn report_reads(outcomes: &[Outcome]) {
    let ref_read = |o: &Outcome| o.reference.as_ref().is_some_and(|r| r.read);
    let r = outcomes.iter().filter(|o| ref_read(o)).count();
    let l = outcomes.iter().filter(|o| ref_read(o) && o.ours.read).count();
    let extra = outcomes.iter().filter(|o| !ref_read(o) && o.ours.read).count();
    let target = (r as f64 * 0.98).ceil() as usize;
    println!("pdftotext reads: {r}");
    println!("leasehold reads: {l} of the {r} (and {extra} that pdftotext does not)");
    println!(
        "target: leasehold reads >= R - 2% (= {target}): {}",
        verdict(l >= target)
    );
}

/// Recall on the files both read, and the second target.
fn report_recall(outcomes: &[Outcome]) {
    let recalls: Vec<f64> = outcomes.iter().filter_map(|o| o.recall).collect();
    let under = recalls.iter().filter(|&&r| r < 0.5).count();
    let mean = (!recalls.is_empty()).then(|| recalls.iter().sum::<f64>() / recalls.len() as f64);
    let n = recalls.len();
    let median = median(recalls);
    println!(
        "word recall on the {n} files both read: median {}, mean {}, under 0.5: {under}",
        fmt_ratio(median),
        fmt_ratio(mean)
    );
    let met = median.is_some_and(|m| m >= 0.95);
    println!("target: median recall >= 0.95: {}", verdict(met));
}

/// Median wall-clock time per file on each side, over every file, and their ratio.
fn report_times(outcomes: &[Outcome]) {
    let ours = median(outcomes.iter().map(|o| millis(o.ours.elapsed)).collect());
    let theirs = median(
        outcomes
            .iter()
            .filter_map(|o| o.reference.as_ref())
            .map(|r| millis(r.elapsed))
            .collect(),
    );
    let ratio = ours.zip(theirs).filter(|(_, t)| *t > 0.0).map(|(o, t)| o / t);
    println!(
        "median time per file: leasehold {}, pdftotext {}, ratio {}",
        fmt_ms(ours),
        fmt_ms(theirs),
        ratio.map_or("n/a".to_string(), |r| format!("{r:.2}x"))
    );
}

/// The files the reference reads and leasehold does not, with leasehold's reason:
/// the list to start from when the first target is missed.
fn report_missed(outcomes: &[Outcome]) {
    let missed: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| !o.ours.read && o.reference.as_ref().is_some_and(|r| r.read))
        .collect();
    if missed.is_empty() {
        return;
    }
    let shown = missed.len().min(MAX_LISTED);
    println!(
        "pdftotext reads, leasehold does not ({}, first {shown}):",
        missed.len()
    );
    for o in &missed[..shown] {
        println!("  {}: {}", o.name, o.ours.error.as_deref().unwrap_or("?"));
    }
}

/// leasehold's side of a large file, in a process of its own: the registry the
/// extraction child runs, on `file`, its text thrown away.
fn extract_one(file: &Path) {
    let bytes = std::fs::read(file).unwrap_or_default();
    let registry = leasehold_extract::ExtractorRegistry::new(u64::MAX);
    let _ = registry.extract(&file.display().to_string(), &bytes, &AtomicBool::new(false));
}

/// CPU seconds and peak RSS (bytes) of one large file on each side, each side run
/// [`ROUNDS`] times, interleaved; then the target.
fn report_large(root: &Path, outcomes: &[Outcome]) {
    let large: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.recall.is_some() && o.pages.is_some_and(|p| p >= LARGE_PAGES))
        .collect();
    println!("large PDFs (>= {LARGE_PAGES} pages) both read: {}", large.len());
    if large.is_empty() {
        return;
    }
    println!("  file: pages, MB | pdftotext CPU s, peak MB | leasehold CPU s, peak MB (x file) | CPU ratio");
    let mut worst: Option<f64> = None;
    let mut over_memory = Vec::new();
    for o in large {
        let path = root.join(&o.name);
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        let (theirs, ours) = measure_both(&path);
        let (Some((t_cpu, t_rss)), Some((o_cpu, o_rss))) = (theirs, ours) else {
            println!("  {}: could not be measured", o.name);
            continue;
        };
        let ratio = o_cpu / t_cpu.max(0.001);
        if o_rss > memory_bound(size) {
            over_memory.push(o.name.as_str());
        }
        worst = Some(worst.map_or(ratio, |w: f64| w.max(ratio)));
        println!(
            "  {}: {}, {:.1} | {t_cpu:.2}, {:.0} | {o_cpu:.2}, {:.0} ({:.1}x) | {ratio:.2}x",
            o.name,
            o.pages.unwrap_or(0),
            mb(size),
            mb(t_rss),
            mb(o_rss),
            o_rss as f64 / size.max(1) as f64,
        );
    }
    let met = worst.is_some_and(|w| w <= 1.5);
    println!(
        "target: leasehold CPU <= 1.5 x pdftotext's on every large PDF (worst {}): {}",
        worst.map_or("n/a".into(), |w| format!("{w:.2}x")),
        verdict(met)
    );
    println!(
        "target: leasehold's peak memory <= {MEMORY_PER_FILE_BYTE} x the file's size or {} MB, whichever is larger: {}{}",
        MEMORY_FLOOR / 1_000_000,
        verdict(over_memory.is_empty()),
        if over_memory.is_empty() { String::new() } else { format!(" ({})", over_memory.join(", ")) }
    );
}

/// The documented bound on an extraction's peak memory for a large PDF (the README's
/// PDF section): this many bytes per byte of the file...
const MEMORY_PER_FILE_BYTE: u64 = 5;
/// ...or this many bytes, whichever is larger.
const MEMORY_FLOOR: u64 = 64_000_000;

fn memory_bound(file_bytes: u64) -> u64 {
    (file_bytes.saturating_mul(MEMORY_PER_FILE_BYTE)).max(MEMORY_FLOOR)
}

/// The median CPU seconds and peak RSS of pdftotext and of leasehold on `path`,
/// [`ROUNDS`] runs each, one after the other in turn.
fn measure_both(path: &Path) -> (Option<Cost>, Option<Cost>) {
    let (mut theirs, mut ours) = (Vec::new(), Vec::new());
    let this = std::env::current_exe().expect("this bench binary");
    for _ in 0..ROUNDS {
        theirs.extend(measured(&[
            "pdftotext".as_ref(),
            "-enc".as_ref(),
            "UTF-8".as_ref(),
            path.as_os_str(),
            "-".as_ref(),
        ]));
        ours.extend(measured(&[
            this.as_os_str(),
            EXTRACT_ONE.as_ref(),
            path.as_os_str(),
        ]));
    }
    (median_pair(theirs), median_pair(ours))
}

/// `argv` run by a fresh process of this binary ([`measure_command`]), which
/// prints what it measured. Not run from here: a child's peak RSS as `wait4`
/// reports it starts from its parent's high-water mark (Linux carries the old
/// address space's peak across `exec`), and this process has read the corpus.
fn measured(argv: &[&std::ffi::OsStr]) -> Option<Cost> {
    let out = Command::new(std::env::current_exe().ok()?)
        .arg(MEASURE)
        .args(argv)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let line = String::from_utf8_lossy(&out.stdout);
    let mut fields = line.split_whitespace();
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// Runs `argv` with its output thrown away and prints its CPU seconds and peak RSS
/// in bytes, or nothing when it could not be measured.
fn measure_command(argv: &[std::ffi::OsString]) {
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some((cpu, rss)) = wait_measured(cmd) {
        println!("{cpu} {rss}");
    }
}

/// The median CPU time and the median peak RSS of `runs`.
fn median_pair(runs: Vec<Cost>) -> Option<Cost> {
    let cpu = median(runs.iter().map(|r| r.0).collect())?;
    let rss = median(runs.iter().map(|r| r.1 as f64).collect())?;
    Some((cpu, rss as u64))
}

/// CPU seconds (user + system) and peak RSS in bytes of `cmd`, run to its end
/// with its output thrown away, as `wait4` reports them.
#[cfg(unix)]
fn wait_measured(mut cmd: Command) -> Option<Cost> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for; both pointers are live.
    // A run that failed is no measurement: it would count as a cheap one.
    if unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } != pid
        || !libc::WIFEXITED(status)
        || libc::WEXITSTATUS(status) != 0
    {
        return None;
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // Linux counts ru_maxrss in KiB, macOS in bytes.
    let unit = if cfg!(target_os = "macos") { 1 } else { 1024 };
    Some((
        seconds(usage.ru_utime) + seconds(usage.ru_stime),
        usage.ru_maxrss.max(0) as u64 * unit,
    ))
}

#[cfg(not(unix))]
fn wait_measured(_cmd: Command) -> Option<Cost> {
    None
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median, or `None` for no values (a corpus with nothing both sides read).
fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    })
}

fn fmt_ms(ms: Option<f64>) -> String {
    ms.map_or("n/a".to_string(), |m| format!("{m:.1} ms"))
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or("n/a".to_string(), |r| format!("{r:.3}"))
}
