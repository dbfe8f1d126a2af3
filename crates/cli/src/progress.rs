//! What a running pool shows on stderr while it works: a bar on a terminal, a
//! plain line now and then otherwise; each failure once as it happens (the
//! first [`MAX_LIVE_FAILURES`], then a count); what `work` waits for.
//! Standard output is left to the summary.

use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::shown::shown;
use super::summary::{Summary, MORE_FAILURES_HINT};
use leasehold::pipeline::{Event, Processed};
use leasehold::upstream::one_line;

/// How much a command says while it works (`-q` / `-v`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// The summary only; errors still go to stderr.
    Quiet,
    /// Progress, failures as they happen, the summary.
    Normal,
    /// And each document as it finishes.
    Verbose,
}

static VERBOSITY: OnceLock<Verbosity> = OnceLock::new();

/// Set once, from the global flags, before the command runs.
pub fn set_verbosity(quiet: bool, verbose: bool) {
    let v = match (quiet, verbose) {
        (true, _) => Verbosity::Quiet,
        (false, true) => Verbosity::Verbose,
        (false, false) => Verbosity::Normal,
    };
    let _ = VERBOSITY.set(v);
}

pub fn verbosity() -> Verbosity {
    VERBOSITY.get().copied().unwrap_or(Verbosity::Normal)
}

/// Failures shown as they happen; the rest are counted and pointed to at the end.
pub const MAX_LIVE_FAILURES: u64 = 20;
/// Without a terminal (a log file, a pipe), a progress line this often.
const PLAIN_LINE_EVERY: Duration = Duration::from_secs(10);
/// A repeated error is shown again at most this often (with its count).
const REPEAT_EVERY: Duration = Duration::from_secs(5);
/// What `work` waits for is said again at most this often when it has not changed.
const WAITING_AGAIN_EVERY: Duration = Duration::from_secs(60);
/// ... and no more often than this when it has.
const WAITING_AT_MOST_EVERY: Duration = Duration::from_secs(10);

/// Where progress goes.
enum Display {
    /// A terminal: a bar redrawn in place, lines printed above it.
    Bar(indicatif::ProgressBar),
    /// Not a terminal: plain lines, no control codes, at most one every
    /// [`PLAIN_LINE_EVERY`] and only when the count moved (an idle `work`
    /// does not fill a log).
    Lines { last: Instant, last_done: u64 },
    /// `--quiet`: nothing but errors.
    Silent,
}

/// A running pool's progress on stderr.
pub struct Progress {
    display: Display,
    verbosity: Verbosity,
    started: Instant,
    /// Documents claimable when the pool started.
    total: u64,
    failures_seen: u64,
    /// The last error shown, how many times it came again since, and when it
    /// was last shown: a failure repeated by every worker is one line, not a flood.
    last_warning: Option<(String, u64, Instant)>,
    /// What the last "waiting for work" line said, and when.
    last_waiting: Option<(String, Instant)>,
}

impl Progress {
    pub fn new(total: u64, started: Instant) -> Progress {
        let verbosity = verbosity();
        let display = if verbosity == Verbosity::Quiet {
            Display::Silent
        } else if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:20} {wide_msg}") {
                bar.set_style(style);
            }
            Display::Bar(bar)
        } else {
            Display::Lines {
                last: Instant::now(),
                last_done: 0,
            }
        };
        Progress {
            display,
            verbosity,
            started,
            total,
            failures_seen: 0,
            last_warning: None,
            last_waiting: None,
        }
    }

    /// Whether failures were shown as they happened (so the summary need
    /// not list them again on the same terminal).
    pub fn shows_failures(&self) -> bool {
        !matches!(self.display, Display::Silent)
    }

    /// One event of the pool, already counted in `s`.
    pub fn event(&mut self, event: &Event, s: &Summary) {
        match &event.outcome {
            Err(error) => self.warn(error),
            Ok(Processed::Retrying { key, error, .. }) => self.failure(key, error, "will retry"),
            Ok(Processed::Dead { key, error }) => self.failure(key, error, "dead"),
            Ok(done) if self.verbosity == Verbosity::Verbose => {
                if let Some(line) = verbose_line(done) {
                    self.above(&line);
                }
            }
            Ok(_) => {}
        }
        self.tick(s);
    }

    /// Nothing happened for a while: refresh the line, and say what the pool
    /// waits for (`None`: it is busy, not waiting).
    pub fn idle(&mut self, s: &Summary, waiting_for: Option<String>) {
        self.tick(s);
        let Some(what) = waiting_for else {
            self.last_waiting = None;
            return;
        };
        let due = match &self.last_waiting {
            None => true,
            Some((said, at)) if *said == what => at.elapsed() >= WAITING_AGAIN_EVERY,
            Some((_, at)) => at.elapsed() >= WAITING_AT_MOST_EVERY,
        };
        if due && !matches!(self.display, Display::Silent) {
            self.above(&format!("leasehold: waiting for work ({what})"));
            self.last_waiting = Some((what, Instant::now()));
        }
    }

    /// More documents were queued after the pool started (`watch`'s passes):
    /// the total grows with them.
    pub fn add_total(&mut self, n: u64) {
        self.total += n;
    }

    /// A line said once whatever the verbosity (`watch` falling back to
    /// rescans): above the bar, or on its own.
    pub fn notice(&self, line: &str) {
        match &self.display {
            Display::Bar(bar) => bar.println(line),
            _ => say(line),
        }
    }

    /// An error that is not one document's (e.g. a store write that failed),
    /// shown as it happens even with `--quiet`.
    fn warn(&mut self, error: &str) {
        let line = match &mut self.last_warning {
            Some((last, again, shown)) if last == error => {
                *again += 1;
                if shown.elapsed() < REPEAT_EVERY {
                    return;
                }
                let line = format!("leasehold: {} (again, {again} times)", one_line(error));
                (*again, *shown) = (0, Instant::now());
                line
            }
            _ => {
                self.last_warning = Some((error.to_owned(), 0, Instant::now()));
                format!("leasehold: {}", one_line(error))
            }
        };
        match &self.display {
            Display::Bar(bar) => bar.println(line),
            _ => say(&line),
        }
    }

    /// A document failed: shown once, while fewer than [`MAX_LIVE_FAILURES`] were.
    fn failure(&mut self, key: &str, error: &str, then: &str) {
        self.failures_seen += 1;
        if self.failures_seen <= MAX_LIVE_FAILURES {
            self.above(&format!("failed {key:?} ({then}): {}", one_line(error)));
        }
    }

    /// A line above the bar (or on its own without one); nothing when quiet.
    fn above(&self, line: &str) {
        match &self.display {
            Display::Bar(bar) => bar.println(line),
            Display::Lines { .. } => say(line),
            Display::Silent => {}
        }
    }

    fn tick(&mut self, s: &Summary) {
        let line = progress_line(
            s.indexed + s.failed,
            self.total,
            s.failed,
            s.waiting,
            self.started.elapsed(),
        );
        match &mut self.display {
            Display::Bar(bar) => {
                bar.set_length(self.total.max(s.indexed + s.failed));
                bar.set_position(s.indexed + s.failed);
                bar.set_message(line);
            }
            Display::Lines { last, last_done }
                if last.elapsed() >= PLAIN_LINE_EVERY && *last_done != s.indexed + s.failed =>
            {
                say(&format!("leasehold: {line}"));
                *last = Instant::now();
                *last_done = s.indexed + s.failed;
            }
            Display::Lines { .. } | Display::Silent => {}
        }
    }

    /// The pool has ended: clear the bar; say how many failures were not shown.
    pub fn done(&self) {
        if let Display::Bar(bar) = &self.display {
            bar.finish_and_clear();
        }
        let hidden = self.failures_seen.saturating_sub(MAX_LIVE_FAILURES);
        if hidden > 0 {
            self.above(&format!("... {hidden} more failures; {MORE_FAILURES_HINT}"));
        }
    }
}

/// A line on stderr; a closed stderr is not worth failing the run for.
pub(super) fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// What `-v` says about a document that did not fail.
fn verbose_line(done: &Processed) -> Option<String> {
    Some(match done {
        Processed::Indexed { key, path } => format!("indexed {key:?} -> {}", shown(path)),
        Processed::Superseded { key, .. } => format!("superseded {key:?} (another worker finished it)"),
        Processed::LeaseLost { key, reason } => format!("lease lost {key:?}: {}", one_line(reason)),
        Processed::Released { key } => format!("released {key:?} (stopping)"),
        Processed::Waiting { key, reason, .. } => format!("handed back {key:?}: {}", one_line(reason)),
        Processed::Idle | Processed::Retrying { .. } | Processed::Dead { .. } => return None,
    })
}

/// `1787/5115 done, 485 failed, 3m 27s elapsed, 518/s, about 6m 25s left`.
/// The total is the documents claimable at the start; past it (new work came
/// in), no total and no estimate.
pub fn progress_line(done: u64, total: u64, failed: u64, waiting: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let mut line = if done <= total {
        format!("{done}/{total} done")
    } else {
        format!("{done} done")
    };
    line += &format!(", {failed} failed");
    if waiting > 0 {
        line += &format!(", {waiting} waiting for a locked account");
    }
    line += &format!(", {} elapsed", format_duration(elapsed));
    if done > 0 {
        line += &format!(", {}", format_rate(rate));
        if done < total && rate > 0.0 {
            let left = Duration::from_secs_f64((total - done) as f64 / rate);
            line += &format!(", about {} left", format_duration(left));
        }
    }
    line
}

/// Three significant figures at most: `518/s`, `51.8/s`, `5.18/s`.
pub fn format_rate(per_second: f64) -> String {
    if per_second >= 100.0 {
        format!("{per_second:.0}/s")
    } else if per_second >= 10.0 {
        format!("{per_second:.1}/s")
    } else {
        format!("{per_second:.2}/s")
    }
}

/// `42s`, `3m 07s`, `2h 05m`: whole seconds, the two largest units.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_keep_three_significant_figures() {
        assert_eq!(format_rate(517.5189), "518/s");
        assert_eq!(format_rate(51.75189), "51.8/s");
        assert_eq!(format_rate(5.175189), "5.18/s");
        assert_eq!(format_rate(0.0), "0.00/s");
    }

    #[test]
    fn durations_show_the_two_largest_units() {
        assert_eq!(format_duration(Duration::from_millis(42_900)), "42s");
        assert_eq!(format_duration(Duration::from_secs(187)), "3m 07s");
        assert_eq!(format_duration(Duration::from_secs(7_500)), "2h 05m");
    }

    #[test]
    fn the_line_has_elapsed_rate_and_an_estimate_until_the_total() {
        let line = progress_line(1787, 5115, 485, 0, Duration::from_secs(10));
        assert_eq!(
            line,
            "1787/5115 done, 485 failed, 10s elapsed, 179/s, about 18s left"
        );
        let past = progress_line(12, 10, 0, 2, Duration::from_secs(4));
        assert_eq!(
            past,
            "12 done, 0 failed, 2 waiting for a locked account, 4s elapsed, 3.00/s"
        );
        let start = progress_line(0, 10, 0, 0, Duration::ZERO);
        assert_eq!(start, "0/10 done, 0 failed, 0s elapsed");
    }
}
