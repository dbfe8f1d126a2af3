//! `leasehold metrics`: the store's figures in the Prometheus text exposition
//! format (version 0.0.4), and `--metrics-file`, which keeps a file in that
//! format up to date for node_exporter's textfile collector.
//!
//! Every figure is read from the store (counts, leases, the history table,
//! the outbox's totals, the accounts, the write-lock waits every process
//! folds into it) and the mirror (the size of each accepted text), never
//! from one process's memory, so `metrics` run anywhere, and every process's
//! file, say the same. Counters
//! drawn from the history count the lines it still holds: `gc`'s retention
//! removes old ones, which Prometheus reads as a counter reset.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Sender};

use leasehold::mirror::Mirror;
use leasehold::store::{GateState, WriteWaits, WAIT_BUCKETS};
use leasehold::{Status, Store};

use super::args::WorkFlags;
use super::config::Config;
use super::error::CliError;

/// How often `--metrics-file` is rewritten while a command runs.
pub const METRICS_FILE_EVERY: Duration = Duration::from_secs(5);

/// Upper bounds (seconds) of the extraction-time histogram's buckets.
const SECONDS_BUCKETS: [f64; 10] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];

/// Upper bounds (bytes) of the extracted-size histogram's buckets: 1 KiB to 64 MiB.
const BYTES_BUCKETS: [f64; 9] = [
    1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0,
];

/// Indexed documents read per page when sizing their accepted texts.
const SIZES_PAGE: i64 = 1000;

/// A text in the exposition format, written one family at a time.
#[derive(Default)]
pub struct Exposition {
    text: String,
}

/// A metric or label name the format accepts: `[a-zA-Z_:][a-zA-Z0-9_:]*`
/// (labels without the colon). Our names are constants; this catches a typo.
fn valid_name(name: &str, colon: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (!first && c.is_ascii_digit())
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

/// A label value: backslash, double quote and line feed escaped.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

impl Exposition {
    /// Start a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        debug_assert!(valid_name(name, true), "metric name {name}");
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample of the family begun last (or of its `_bucket`/`_sum`/`_count`).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            let pairs: Vec<String> = labels
                .iter()
                .map(|(k, v)| {
                    debug_assert!(valid_name(k, false), "label name {k}");
                    format!("{k}=\"{}\"", escape_label(v))
                })
                .collect();
            let _ = write!(self.text, "{{{}}}", pairs.join(","));
        }
        let _ = writeln!(self.text, " {}", number(value));
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The text.
    pub fn finish(self) -> String {
        self.text
    }
}

/// A value as the format writes it (`+Inf`, integers without a fraction).
fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// What a failure's reason is about, in a few classes a dashboard can group
/// by. Reasons are free text (the extractor's or the source's words): this
/// reads their stable beginnings (`extract::ExtractError`, `source::SourceError`,
/// `store::write::bury_reason`); anything else is `other`.
pub fn reason_class(event: &str, reason: &str) -> &'static str {
    let r = reason.to_ascii_lowercase();
    let has = |needle: &str| r.contains(needle);
    if event == "dead" {
        return if has("lost leases exhausted") {
            "lost_leases"
        } else {
            "attempts_exhausted"
        };
    }
    if has("deadline") || has("timed out") {
        "timeout"
    } else if has("exceeded its") || has("-byte cap") || has("over the limit") || has("input limit") {
        "limit"
    } else if has("crashed") || has("panicked") {
        "crash"
    } else if has("unsupported") {
        "unsupported"
    } else if has("malformed") || has("encoding") {
        "malformed"
    } else if has("does not exist")
        || has("outside the source")
        || has("not a regular file")
        || has("cannot read")
    {
        "source"
    } else if has("converter") {
        "converter"
    } else {
        "other"
    }
}

/// A document's format for the histograms: its key's extension, lower case
/// (`none` without one).
pub fn format_of(key: &str) -> String {
    let name = key.rsplit('/').next().unwrap_or(key);
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() => ext.to_ascii_lowercase(),
        _ => "none".to_owned(),
    }
}

/// The whole exposition, read from `store` and `mirror` now; `sizes` keeps
/// the accepted texts' sizes between calls.
pub fn gather(store: &Store, mirror: &Mirror, sizes: &mut TextSizes) -> leasehold::Result<String> {
    let mut x = Exposition::default();
    documents(&mut x, store)?;
    history(&mut x, store)?;
    sizes.refresh(store, mirror)?;
    sizes.histogram(&mut x);
    write_waits(&mut x, store)?;
    outbox(&mut x, store)?;
    accounts(&mut x, store)?;
    Ok(x.finish())
}

/// A histogram family by format from (format, value) samples, `bounds` its
/// buckets' upper bounds.
fn histogram_by_format(
    x: &mut Exposition,
    name: &str,
    help: &str,
    bounds: &[f64],
    values: &BTreeMap<String, Vec<f64>>,
) {
    x.family(name, "histogram", help);
    for (format, vs) in values {
        for le in bounds {
            let n = vs.iter().filter(|v| **v <= *le).count();
            x.sample(
                &format!("{name}_bucket"),
                &[("format", format), ("le", &number(*le))],
                n as f64,
            );
        }
        x.sample(
            &format!("{name}_bucket"),
            &[("format", format), ("le", "+Inf")],
            vs.len() as f64,
        );
        x.sample(&format!("{name}_sum"), &[("format", format)], vs.iter().sum());
        x.sample(&format!("{name}_count"), &[("format", format)], vs.len() as f64);
    }
}

/// The size of each indexed document's accepted text in the mirror. A
/// result's path names its generation and never changes content, so a size
/// is read once per path and kept (`--metrics-file` rewrites every few
/// seconds); documents no longer indexed are dropped at each refresh.
#[derive(Debug, Default)]
pub struct TextSizes {
    /// Document id → (key, result path, size in bytes).
    known: std::collections::HashMap<i64, (String, String, u64)>,
}

impl TextSizes {
    /// Page through the indexed documents; stat only the results not seen
    /// before. A result the mirror no longer has (its source went away and
    /// `gc` ran meanwhile) is left out.
    fn refresh(&mut self, store: &Store, mirror: &Mirror) -> leasehold::Result<()> {
        let mut fresh = std::collections::HashMap::with_capacity(self.known.len());
        let mut after = 0;
        loop {
            let page = store.indexed_page(after, SIZES_PAGE)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for row in page {
                let Some(path) = row.result_path else { continue };
                let size = match self.known.remove(&row.id) {
                    Some((_, p, size)) if p == path => Some(size),
                    _ => mirror.file_len(&path).ok(),
                };
                if let Some(size) = size {
                    fresh.insert(row.id, (row.key, path, size));
                }
            }
        }
        self.known = fresh;
        Ok(())
    }

    fn histogram(&self, x: &mut Exposition) {
        let mut by_format: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for (key, _, size) in self.known.values() {
            by_format.entry(format_of(key)).or_default().push(*size as f64);
        }
        histogram_by_format(
            x,
            "leasehold_extracted_bytes",
            "Size of each indexed document's accepted text, by document format.",
            &BYTES_BUCKETS,
            &by_format,
        );
    }
}

/// Waits for SQLite's write lock, of every process (nothing on PostgreSQL,
/// which has none).
fn write_waits(x: &mut Exposition, store: &Store) -> leasehold::Result<()> {
    let Some(w) = store.write_waits()? else {
        return Ok(());
    };
    write_waits_histogram(x, &w);
    Ok(())
}

fn write_waits_histogram(x: &mut Exposition, w: &WriteWaits) {
    let name = "leasehold_write_lock_wait_seconds";
    x.family(
        name,
        "histogram",
        "Time write transactions of every process waited for the database's write lock.",
    );
    let mut below = 0;
    for (le, n) in WAIT_BUCKETS.iter().zip(w.buckets) {
        below += n;
        x.sample(&format!("{name}_bucket"), &[("le", &number(*le))], below as f64);
    }
    x.sample(&format!("{name}_bucket"), &[("le", "+Inf")], w.count as f64);
    x.sample(&format!("{name}_sum"), &[], w.sum_us as f64 / 1e6);
    x.sample(&format!("{name}_count"), &[], w.count as f64);
}

fn documents(x: &mut Exposition, store: &Store) -> leasehold::Result<()> {
    let counts = store.counts()?;
    x.family(
        "leasehold_documents",
        "gauge",
        "Documents in the store by status.",
    );
    for s in Status::ALL {
        x.sample(
            "leasehold_documents",
            &[("status", s.as_str())],
            counts.get(s) as f64,
        );
    }
    // A removed source is not a failure: its own status, never in "dead".
    x.sample(
        "leasehold_documents",
        &[("status", "removed")],
        counts.removed as f64,
    );
    let totals = store.totals()?;
    x.single(
        "leasehold_documents_parked",
        "gauge",
        "Retrying documents handed back until an upstream account can be used again.",
        totals.parked as f64,
    );
    x.single(
        "leasehold_documents_gone",
        "gauge",
        "Documents whose source was removed (also leasehold_documents{status=\"removed\"}).",
        counts.removed as f64,
    );
    x.single(
        "leasehold_documents_no_text",
        "gauge",
        "Indexed documents whose text holds no word (an empty file, a PDF of scanned pages).",
        counts.no_text as f64,
    );
    x.single(
        "leasehold_live_leases",
        "gauge",
        "Claims whose lease has not run out.",
        store.live_leases()?.len() as f64,
    );
    Ok(())
}

fn history(x: &mut Exposition, store: &Store) -> leasehold::Result<()> {
    let f = store.history_figures()?;
    let event = |name: &str| f.events.get(name).copied().unwrap_or(0) as f64;
    x.single(
        "leasehold_claims_total",
        "counter",
        "Claims taken (history lines).",
        event("claimed"),
    );
    x.family(
        "leasehold_completions_total",
        "counter",
        "Fenced completions by outcome.",
    );
    x.sample(
        "leasehold_completions_total",
        &[("outcome", "accepted")],
        event("completed"),
    );
    x.sample(
        "leasehold_completions_total",
        &[("outcome", "refused")],
        event("complete_rejected"),
    );
    x.single(
        "leasehold_lease_takeovers_total",
        "counter",
        "Claims that took over a lease that was over.",
        f.takeovers as f64,
    );
    x.family(
        "leasehold_refused_writes_total",
        "counter",
        "Fenced writes refused, by operation.",
    );
    for (name, n) in f.events.iter().filter(|(e, _)| e.ends_with("_rejected")) {
        let op = name.trim_end_matches("_rejected");
        x.sample("leasehold_refused_writes_total", &[("operation", op)], *n as f64);
    }
    x.family(
        "leasehold_history_events_total",
        "counter",
        "History lines by event.",
    );
    for (name, n) in &f.events {
        x.sample("leasehold_history_events_total", &[("event", name)], *n as f64);
    }
    let mut classes: BTreeMap<&str, u64> = BTreeMap::new();
    for (event, reason, n) in &f.failures {
        *classes.entry(reason_class(event, reason)).or_default() += n;
    }
    x.family(
        "leasehold_failures_total",
        "counter",
        "Failures and burials by reason class.",
    );
    for (class, n) in classes {
        x.sample("leasehold_failures_total", &[("reason", class)], n as f64);
    }
    extraction_histogram(x, &f.extractions);
    Ok(())
}

/// Seconds from claim to accepted completion, by format.
fn extraction_histogram(x: &mut Exposition, extractions: &[(String, i64)]) {
    let mut by_format: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (key, ms) in extractions {
        by_format
            .entry(format_of(key))
            .or_default()
            .push(*ms.max(&0) as f64 / 1000.0);
    }
    histogram_by_format(
        x,
        "leasehold_extraction_seconds",
        "Time from claim to accepted completion, by document format.",
        &SECONDS_BUCKETS,
        &by_format,
    );
}

fn outbox(x: &mut Exposition, store: &Store) -> leasehold::Result<()> {
    let t = store.outbox().totals()?;
    x.single(
        "leasehold_outbox_depth",
        "gauge",
        "Results waiting for the sink.",
        t.rows as f64,
    );
    x.single(
        "leasehold_outbox_bytes",
        "gauge",
        "Payload of the results waiting.",
        t.bytes as f64,
    );
    x.single(
        "leasehold_outbox_dropped_total",
        "counter",
        "Results the outbox's cap dropped.",
        t.dropped as f64,
    );
    x.single(
        "leasehold_outbox_delivered_total",
        "counter",
        "Results delivered to the sink.",
        t.delivered as f64,
    );
    Ok(())
}

fn accounts(x: &mut Exposition, store: &Store) -> leasehold::Result<()> {
    let states = store.accounts().states()?;
    let name = "leasehold_account_state";
    x.family(name, "gauge", "1 for the state each upstream account is in.");
    for a in &states {
        for (state, label) in [
            (GateState::Open, "open"),
            (GateState::Locked, "locked"),
            (GateState::Probing, "probing"),
        ] {
            let on = if a.state == state { 1.0 } else { 0.0 };
            x.sample(name, &[("account", &a.name), ("state", label)], on);
        }
    }
    x.family(
        "leasehold_account_incidents_total",
        "counter",
        "Lock incidents of each upstream account.",
    );
    for a in &states {
        x.sample(
            "leasehold_account_incidents_total",
            &[("account", &a.name)],
            a.epoch as f64,
        );
    }
    Ok(())
}

/// `leasehold metrics`: print the exposition once.
pub fn metrics(cfg: &Config) -> Result<ExitCode, CliError> {
    let text = gather(&cfg.store, &cfg.mirror, &mut TextSizes::default())?;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(CliError::Runtime(format!("writing the metrics: {e}"))),
    }
}

/// Write `text` to `path` atomically: a temporary file beside it, then a
/// rename, so a collector never reads half a file.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let result = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Keeps `--metrics-file` up to date while a command runs: a thread rewrites
/// it every [`METRICS_FILE_EVERY`], and dropping the guard writes it a last
/// time and stops the thread at once (the tick waits on a channel, not a sleep).
pub struct MetricsFile {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsFile {
    /// Write the file now (an error here is the command's: the path is bad)
    /// and start the thread.
    pub fn start(store: &Store, mirror: &Mirror, path: &Path) -> Result<MetricsFile, CliError> {
        let mut sizes = TextSizes::default();
        refresh(store, mirror, &mut sizes, path)
            .map_err(|e| CliError::Config(format!("--metrics-file {}: {e}", path.display())))?;
        let (stop, stopped) = bounded::<()>(0);
        let (store, mirror, path): (Store, Mirror, PathBuf) =
            (store.clone(), mirror.clone(), path.to_path_buf());
        let thread = std::thread::Builder::new()
            .name("metrics-file".into())
            .spawn(move || {
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(METRICS_FILE_EVERY)
                {
                    if let Err(e) = refresh(&store, &mirror, &mut sizes, &path) {
                        log_failure(&path, &e);
                    }
                }
                if let Err(e) = refresh(&store, &mirror, &mut sizes, &path) {
                    log_failure(&path, &e);
                }
            })
            .map_err(|e| CliError::Runtime(format!("starting the metrics file's thread: {e}")))?;
        Ok(MetricsFile {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// What a long-running command keeps up while it runs: its `--metrics-file`,
/// if it was given. Dropped at the command's end, it folds the command's
/// last write-lock waits into the store (they are otherwise folded every few
/// seconds while it writes), then writes the file a last time.
pub struct Figures {
    store: Store,
    file: Option<MetricsFile>,
}

/// Start [`Figures`] for a long-running command.
pub fn keep_file(cfg: &Config, work: &WorkFlags) -> Result<Figures, CliError> {
    let file = work
        .metrics_file
        .as_deref()
        .map(|path| MetricsFile::start(&cfg.store, &cfg.mirror, path))
        .transpose()?;
    Ok(Figures {
        store: cfg.store.clone(),
        file,
    })
}

impl Drop for Figures {
    fn drop(&mut self) {
        if let Err(e) = self.store.fold_write_waits() {
            tracing::debug!(
                target: "leasehold::metrics",
                error = %e,
                "could not fold the write-lock waits into the store"
            );
        }
        drop(self.file.take());
    }
}

/// A rewrite that failed (a full disk, a removed directory): said in the log,
/// and tried again at the next tick; the command goes on.
fn log_failure(path: &Path, error: &str) {
    tracing::warn!(
        target: "leasehold::metrics",
        event = "metrics_file_failed",
        path = %path.display(),
        error,
        "could not rewrite the metrics file"
    );
}

fn refresh(store: &Store, mirror: &Mirror, sizes: &mut TextSizes, path: &Path) -> Result<(), String> {
    let text = gather(store, mirror, sizes).map_err(|e| e.to_string())?;
    write_atomically(path, &text).map_err(|e| e.to_string())
}

impl Drop for MetricsFile {
    fn drop(&mut self) {
        // Dropping the sender ends the thread's wait; it writes once more.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped_and_names_checked() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert!(valid_name("leasehold_documents", true));
        assert!(!valid_name("9lives", true));
        assert!(!valid_name("a:b", false));
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
    }

    #[test]
    fn formats_and_reasons_are_classed() {
        assert_eq!(format_of("dir/Report.PDF"), "pdf");
        assert_eq!(format_of("dir/.hidden"), "none");
        assert_eq!(format_of("README"), "none");
        assert_eq!(reason_class("failed", "extractor crashed: signal 11"), "crash");
        assert_eq!(
            reason_class("failed", "unsupported document: zip bomb"),
            "unsupported"
        );
        assert_eq!(
            reason_class("dead", "lost leases exhausted: 20 leases"),
            "lost_leases"
        );
        assert_eq!(reason_class("dead", "attempts exhausted"), "attempts_exhausted");
        assert_eq!(reason_class("failed", "something else"), "other");
        assert_eq!(
            reason_class("failed", "extraction exceeded its 2 s deadline"),
            "timeout"
        );
        assert_eq!(
            reason_class("failed", "extraction exceeded its memory limit of 1 GiB"),
            "limit"
        );
        assert_eq!(
            reason_class("failed", "4096 bytes is over the 1024-byte input limit"),
            "limit"
        );
    }
}
