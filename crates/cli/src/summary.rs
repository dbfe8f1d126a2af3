//! What a command did, printed at the end (`--json` for machines), and the
//! exit code it maps to.

use std::process::ExitCode;

use super::error::CliError;
use super::shown::shown;
use super::signals::Interrupt;
use leasehold::pipeline::{Event, Processed};
use leasehold::source::Discovered;
use leasehold::store::Totals;
use leasehold::upstream::one_line;

/// What a run did, printed at the end (`--json` for machines).
#[derive(Debug, Default, serde::Serialize)]
pub struct Summary {
    pub indexed: u64,
    pub failed: u64,
    pub retrying: u64,
    pub dead: u64,
    /// Our completion was refused: another worker owns or finished the document.
    pub superseded: u64,
    pub lease_lost: u64,
    pub released: u64,
    /// Handed back until an upstream account can be used again (not failures).
    pub waiting: u64,
    /// Sources the scan found as they were, whose document needs nothing.
    pub unchanged: usize,
    /// Sources the scan found as they were, whose document was still to do
    /// from an earlier command (an interrupted run, a retry): work for this
    /// one, so not among the unchanged.
    pub resumed: usize,
    /// Documents the scan accounted for (new, changed, as they were, and
    /// removed): `indexed + failed + unchanged + removed + left`. None for a
    /// command without a scan (`work`).
    pub seen: Option<u64>,
    pub new: usize,
    pub changed: usize,
    pub gone: usize,
    /// Documents whose source was unchanged but whose accepted result was
    /// missing from the mirror (or no longer a file of its size): queued
    /// again by this command.
    pub results_requeued: u64,
    /// Entries discovery skipped, with why (not a regular file, unreadable...).
    pub skipped: Vec<String>,
    pub seconds: f64,
    pub docs_per_second: f64,
    pub database: String,
    pub mirror: String,
    /// Documents that failed in this run, with why.
    pub failures: Vec<Failure>,
    /// Errors that were not about one document (e.g. the store): each
    /// distinct message once, at most [`MAX_ERRORS`] of them.
    pub errors: Vec<String>,
    /// How many such errors there were in all, repeats included.
    pub error_count: u64,
    /// Why the pool stopped by itself (e.g. store failures in a row), if it did.
    pub halted: Option<String>,
    /// The signal that stopped the command early, if one did.
    pub interrupted: Option<Interrupt>,
    /// Documents left to do at the end (queued, retrying from an earlier
    /// command, under a claim); for a command without a scan, only when a
    /// signal stopped it.
    pub left: Option<u64>,
    /// Failures were shown on stderr as they happened (not `--quiet`).
    #[serde(skip)]
    pub failures_shown_live: bool,
    /// Results the sink acknowledged during this command.
    pub delivered: u64,
    /// Results still waiting in the outbox at the end.
    pub outbox_waiting: u64,
    /// Cleanups skipped because another process held the document's mirror
    /// lock (a slow or stopped writer); `gc` removes what they left.
    pub cleanups_skipped: u64,
    /// The most memory this process held at once (resident set), in bytes;
    /// extraction children are not counted (each has its own cap).
    pub peak_memory_bytes: u64,
    /// The most memory any extraction child (or converter) held, in bytes, as
    /// the kernel reports for children that have ended.
    pub children_peak_memory_bytes: u64,
    /// The whole store after the command (not only what this run touched):
    /// a rerun that failed nothing still says how many documents are dead.
    /// Absent if the store could not be read at the end.
    pub store: Option<Totals>,
    /// What `watch` did besides the pool's work (absent for other commands).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchTotals>,
    /// The first dead documents of the store whose source exists (from any
    /// run), for `--fail-on-error`'s list.
    #[serde(skip)]
    pub store_dead: Vec<Failure>,
}

/// `watch`'s passes of discovery, counted for its summary.
#[derive(Debug, Default, serde::Serialize)]
pub struct WatchTotals {
    /// Passes applied (each a set of changed paths, or the whole tree).
    pub passes: u64,
    /// Of those, whole-tree scans: the first, and any after an overflow,
    /// a lost notification or on the fallback's timer.
    pub full_scans: u64,
    /// Passes that failed (and were retried as a rescan).
    pub failed_passes: u64,
    /// Why notifications were not used, if they were not: the tree was
    /// rescanned on a timer instead.
    pub rescanning: Option<String>,
}

/// Distinct errors kept for the summary: a store failing for hours must not
/// grow the summary without bound.
pub const MAX_ERRORS: usize = 20;

/// Failures listed in the text summary; the rest are counted.
pub const MAX_LISTED_FAILURES: usize = 20;

/// Skipped entries listed in the text summary; the rest are counted (JSON
/// keeps them all).
const MAX_LISTED_SKIPPED: usize = 20;

/// Where to look for the failures a summary or the live lines did not show.
pub const MORE_FAILURES_HINT: &str =
    "`leasehold list --failed` lists them, `leasehold inspect KEY` shows one's history";

#[derive(Debug, serde::Serialize)]
pub struct Failure {
    pub key: String,
    pub error: String,
}

impl Summary {
    /// Add the counts of a later pass of the same command.
    pub fn add(&mut self, more: Summary) {
        self.indexed += more.indexed;
        self.failed += more.failed;
        self.retrying += more.retrying;
        self.dead += more.dead;
        self.superseded += more.superseded;
        self.lease_lost += more.lease_lost;
        self.released += more.released;
        self.waiting += more.waiting;
        // A running total of the same mirror handle, not a per-pass count.
        self.cleanups_skipped = self.cleanups_skipped.max(more.cleanups_skipped);
        self.failures.extend(more.failures);
        for e in more.errors {
            self.keep_error(e);
        }
        self.error_count += more.error_count;
        self.halted = self.halted.take().or(more.halted);
        self.interrupted = self.interrupted.or(more.interrupted);
        self.left = more.left.or(self.left);
        self.failures_shown_live |= more.failures_shown_live;
        // The store as the later pass left it.
        if more.store.is_some() {
            self.store = more.store;
            self.store_dead = more.store_dead;
        }
        // Every pass measures from the same start.
        self.set_seconds(more.seconds);
    }

    /// After a scan, what is left to do: the store's documents waiting for
    /// work (queued, under a claim, retrying) less the ones that failed in
    /// this command and will be retried, which count as failed. One source
    /// per data directory, so the store's are the scan's.
    fn count_left(&mut self) {
        if let (Some(_), Some(t)) = (self.seen, &self.store) {
            let waiting = t.queued + t.extracting + t.retrying;
            self.left = Some(waiting.saturating_sub(self.retrying));
        }
    }

    /// The run took `seconds`; the rate counts every document processed in it.
    pub fn set_seconds(&mut self, seconds: f64) {
        self.seconds = seconds;
        let processed = self.indexed + self.failed;
        self.docs_per_second = processed as f64 / seconds.max(1e-9);
    }

    pub fn count(&mut self, e: &Event) {
        match &e.outcome {
            Ok(Processed::Indexed { .. }) => self.indexed += 1,
            Ok(Processed::Retrying { key, error, .. }) => {
                self.retrying += 1;
                self.fail(key, error);
            }
            Ok(Processed::Dead { key, error }) => {
                self.dead += 1;
                self.fail(key, error);
            }
            Ok(Processed::Superseded { .. }) => self.superseded += 1,
            Ok(Processed::LeaseLost { .. }) => self.lease_lost += 1,
            Ok(Processed::Released { .. }) => self.released += 1,
            Ok(Processed::Waiting { .. }) => self.waiting += 1,
            Ok(Processed::Idle) => {}
            Err(msg) => self.add_error(msg.clone()),
        }
    }

    /// Count an error that was not about one document.
    pub fn add_error(&mut self, msg: String) {
        self.error_count += 1;
        self.keep_error(msg);
    }

    /// Keep `msg` unless it is already kept or enough are.
    fn keep_error(&mut self, msg: String) {
        if self.errors.len() < MAX_ERRORS && !self.errors.contains(&msg) {
            self.errors.push(msg);
        }
    }

    fn fail(&mut self, key: &str, error: &str) {
        self.failed += 1;
        self.failures.push(Failure {
            key: key.to_owned(),
            error: error.to_owned(),
        });
    }

    /// Record this process's peak resident memory so far: `VmHWM`, the high
    /// water mark of this program's own memory. (`getrusage`'s `ru_maxrss`
    /// would also count what the process that started us held when it forked.)
    pub fn measure_memory(&mut self) {
        self.peak_memory_bytes = leasehold::process::status_bytes("VmHWM").unwrap_or(0);
        #[cfg(unix)]
        self.measure_children();
    }

    /// The children's peak: `ru_maxrss` of `RUSAGE_CHILDREN` (unix only).
    #[cfg(unix)]
    fn measure_children(&mut self) {
        // SAFETY: getrusage fills the plain struct we pass and keeps no pointer.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } == 0 {
            // ru_maxrss is in KiB on Linux, in bytes on macOS.
            let unit = if cfg!(target_os = "macos") { 1 } else { 1024 };
            self.children_peak_memory_bytes = usage.ru_maxrss.max(0) as u64 * unit;
        }
    }

    pub fn print(&self, json: bool) {
        if json {
            println!("{}", serde_json::to_string_pretty(self).unwrap_or_default());
            return;
        }
        // Removed sources are not failures: said apart, when there are some
        // (`watch` says them on its own line).
        let removed = match (self.gone, &self.watch) {
            (0, _) | (_, Some(_)) => String::new(),
            (n, None) => format!(", removed {n}"),
        };
        // The documents the scan saw, each counted once: what is left to do
        // and the total, which the counts before add up to.
        let seen = match (self.seen, self.left, &self.watch) {
            (Some(seen), Some(left), None) => format!(", left {left} (of {seen} seen)"),
            _ => String::new(),
        };
        println!(
            "indexed {}, failed {} ({} will retry, {} dead), unchanged {}{removed}{seen}; superseded {}, released {}",
            self.indexed,
            self.failed,
            self.retrying,
            self.dead,
            self.unchanged,
            self.superseded,
            self.released
        );
        if self.results_requeued > 0 {
            println!(
                "queued again {} document(s) whose accepted result was missing or altered in the mirror",
                self.results_requeued
            );
        }
        println!(
            "{:.1} documents/s over {:.2}s; results in {} (database {})",
            self.docs_per_second,
            self.seconds,
            shown(&self.mirror),
            shown(&self.database)
        );
        if self.delivered > 0 || self.outbox_waiting > 0 || self.waiting > 0 {
            println!(
                "delivered {} to the sink, {} waiting in the outbox, {} document(s) handed back for a locked account",
                self.delivered, self.outbox_waiting, self.waiting
            );
        }
        if self.cleanups_skipped > 0 {
            println!(
                "{} cleanup(s) skipped: another process held the document's mirror lock (`leasehold gc` finishes them)",
                self.cleanups_skipped
            );
        }
        if let Some(store) = &self.store {
            // The hint to `list --failed` once: here, or after the failures.
            println!("{}", store_line(store, !self.failures_say_where_the_rest_are()));
        }
        self.print_failures();
        for e in &self.errors {
            println!("  error: {}", one_line(e));
        }
        for s in self.skipped.iter().take(MAX_LISTED_SKIPPED) {
            println!("  skipped {}", shown(s));
        }
        if self.skipped.len() > MAX_LISTED_SKIPPED {
            println!(
                "  ... and {} more skipped (`leasehold discover DIR` lists them all)",
                self.skipped.len() - MAX_LISTED_SKIPPED
            );
        }
        if let Some(w) = &self.watch {
            println!(
                "watched: {} pass(es) of discovery, {} of them over the whole tree: {} new, {} changed, {} gone{}",
                w.passes,
                w.full_scans,
                self.new,
                self.changed,
                self.gone,
                match &w.rescanning {
                    Some(why) => format!("; rescanned on a timer ({why})"),
                    None => String::new(),
                }
            );
            if let (Some(signal), Some(left)) = (self.interrupted, self.left) {
                println!("stopped by {}; {left} document(s) left to do", signal.name());
            }
            return;
        }
        if let (Some(signal), Some(left)) = (self.interrupted, self.left) {
            println!(
                "interrupted by {}, {left} left (run the command again to go on)",
                signal.name()
            );
        }
    }

    /// Whether [`Summary::print_failures`] ends with [`MORE_FAILURES_HINT`].
    fn failures_say_where_the_rest_are(&self) -> bool {
        !self.failures.is_empty()
            && (self.failures_shown_live_here() || self.failures.len() > MAX_LISTED_FAILURES)
    }

    /// The failures were shown as they happened, on the terminal this
    /// summary goes to.
    fn failures_shown_live_here(&self) -> bool {
        use std::io::IsTerminal;
        self.failures_shown_live && std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
    }

    /// The first failures, then how many more; on a terminal that already
    /// showed them as they happened, only the count.
    fn print_failures(&self) {
        if self.failures.is_empty() {
            return;
        }
        if self.failures_shown_live_here() {
            println!(
                "  {} failure(s) shown above; {MORE_FAILURES_HINT}",
                self.failures.len()
            );
            return;
        }
        for f in self.failures.iter().take(MAX_LISTED_FAILURES) {
            println!("  failed {:?}: {}", f.key, one_line(&f.error));
        }
        if self.failures.len() > MAX_LISTED_FAILURES {
            println!(
                "  ... {} more failures; {MORE_FAILURES_HINT}",
                self.failures.len() - MAX_LISTED_FAILURES
            );
        }
    }
}

pub fn finish(mut summary: Summary, json: bool, fail_on_error: bool) -> Result<ExitCode, CliError> {
    summary.count_left();
    summary.measure_memory();
    log_finished(&summary);
    summary.print(json);
    if let Some(signal) = summary.interrupted {
        // Asked to stop: the signal's exit code; an error met on the way is
        // still said.
        if let Err(e) = outcome_code(summary, fail_on_error) {
            eprintln!("leasehold: {e}");
        }
        return Ok(ExitCode::from(signal.exit_code()));
    }
    outcome_code(summary, fail_on_error)
}

/// `watch`'s end: a signal is how a watch ends, so it sets no exit code of
/// its own: 0, or 1 for errors, a halted pool or `--fail-on-error`'s rule,
/// as `run`. With `--json` the summary is one line (`"kind": "summary"`)
/// after the passes' lines, so standard output stays JSON Lines.
pub fn finish_watch(mut summary: Summary, json: bool, fail_on_error: bool) -> Result<ExitCode, CliError> {
    summary.measure_memory();
    log_finished(&summary);
    if json {
        let mut value = serde_json::to_value(&summary).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.insert("kind".into(), "summary".into());
        }
        println!("{value}");
    } else {
        summary.print(false);
    }
    outcome_code(summary, fail_on_error)
}

/// The exit code of a command that ran to its end.
fn outcome_code(summary: Summary, fail_on_error: bool) -> Result<ExitCode, CliError> {
    if let Some(why) = summary.halted {
        return Err(CliError::Runtime(why));
    }
    if !summary.errors.is_empty() {
        return Err(CliError::Runtime(format!(
            "{} error(s); first: {}",
            summary.error_count.max(summary.errors.len() as u64),
            summary.errors[0]
        )));
    }
    if fail_on_error && has_failures(&summary) {
        say_failures(&summary);
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The rule of `--fail-on-error`: a document failed in this run (even one
/// that will be retried), or the store holds dead documents whose source
/// exists, whichever run killed them. A document whose source was removed is
/// not a failure.
fn has_failures(summary: &Summary) -> bool {
    let dead = summary.store.map_or(0, |s| s.dead);
    summary.failed > 0 || dead > 0
}

/// `--fail-on-error`'s account on stderr: how many, then which (this run's
/// failures first, then the store's other dead documents), capped.
fn say_failures(summary: &Summary) {
    let dead = summary.store.map_or(0, |s| s.dead);
    eprintln!(
        "leasehold: --fail-on-error: {} failed in this run; {dead} dead in the store",
        summary.failed
    );
    let mut listed: Vec<&Failure> = Vec::new();
    for f in summary.failures.iter().chain(&summary.store_dead) {
        if listed.len() == MAX_LISTED_FAILURES {
            break;
        }
        if !listed.iter().any(|l| l.key == f.key) {
            listed.push(f);
        }
    }
    for f in &listed {
        eprintln!("  failed {:?}: {}", f.key, one_line(&f.error));
    }
    // This run's dead are also the store's: the sum may count some twice,
    // so only whether there are more is said, not how many.
    let total = (summary.failed + dead) as usize;
    if total > listed.len() {
        eprintln!(
            "  ... only the first {} listed; {MORE_FAILURES_HINT}",
            listed.len()
        );
    }
}

/// The store after the command in one line, e.g. `store: 3091 indexed (2
/// without text: ...), 2024 dead, 3 removed, 0 retrying, 0 queued; ...`: a
/// document whose source was removed did not fail, so it is not dead here;
/// one whose text holds no word is indexed, but nothing finds it.
fn store_line(t: &Totals, hint: bool) -> String {
    let mut line = format!("store: {} indexed", t.indexed);
    if t.no_text > 0 {
        line.push_str(&format!(
            " ({} without text: `leasehold list --no-text`)",
            t.no_text
        ));
    }
    line.push_str(&format!(", {} dead", t.dead));
    if t.removed > 0 {
        line.push_str(&format!(", {} removed", t.removed));
    }
    line.push_str(&format!(", {} retrying", t.retrying));
    if t.parked > 0 {
        line.push_str(&format!(" ({} waiting for a locked account)", t.parked));
    }
    line.push_str(&format!(", {} queued", t.queued));
    if t.extracting > 0 {
        line.push_str(&format!(", {} being extracted", t.extracting));
    }
    if hint && t.dead + t.retrying > 0 {
        line.push_str("; `leasehold list --failed` lists the failed ones");
    }
    line
}

/// The rerun's check of the results (`pipeline::recheck_results`): the
/// documents it queued again are no longer unchanged. After [`add_discovery`].
pub fn add_recheck(s: &mut Summary, r: &leasehold::pipeline::Rechecked) {
    s.results_requeued = r.requeued;
    s.unchanged = s
        .unchanged
        .saturating_sub(usize::try_from(r.requeued).unwrap_or(usize::MAX));
}

pub fn add_discovery(s: &mut Summary, d: &Discovered) {
    s.unchanged = d.unchanged.saturating_sub(d.pending);
    s.resumed = d.pending;
    s.seen = Some((d.new + d.changed + d.unchanged + d.gone) as u64);
    s.new = d.new;
    s.changed = d.changed;
    s.gone = d.gone;
    s.skipped = d.skipped.clone();
}

/// A command ends: the summary's figures.
fn log_finished(summary: &Summary) {
    let store = summary.store.unwrap_or_default();
    tracing::info!(
        target: super::logs::TARGET,
        event = "finished",
        indexed = summary.indexed,
        failed = summary.failed,
        retrying = summary.retrying,
        dead = summary.dead,
        unchanged = summary.unchanged,
        superseded = summary.superseded,
        lease_lost = summary.lease_lost,
        released = summary.released,
        waiting = summary.waiting,
        errors = summary.error_count,
        halted = summary.halted.as_deref(),
        interrupted = summary.interrupted.map(|s| s.name()),
        seconds = summary.seconds,
        docs_per_second = summary.docs_per_second,
        store_indexed = store.indexed,
        store_dead = store.dead,
        store_retrying = store.retrying,
        store_queued = store.queued,
        "finished"
    );
}
