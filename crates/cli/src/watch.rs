//! `watch [DIR…]`: a watcher (`leasehold::watch`) per folder beside a worker
//! pool that never goes idle, until SIGINT or SIGTERM; then the summary.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::config::Config;
use super::error::CliError;
use super::pool::{
    catch_interrupts, settle_courier, start_courier, stop_requested, work_pool_beside, Beside,
};
use super::progress::{say, Progress};
use super::summary::{add_discovery, add_recheck, finish_watch, Summary, WatchTotals};
use leasehold::source::Discovered;
use leasehold::watch::{WatchOptions, WatchReport, Watcher};

/// Skipped entries kept over a whole watch: it may run for months.
const MAX_SKIPPED: usize = 1000;

/// `watch`'s own flags, validated.
#[derive(Debug, Clone, Copy)]
pub struct WatchFlags {
    pub debounce: Option<Duration>,
    pub rescan_every: Option<Duration>,
    pub poll: bool,
    pub max_pending: Option<usize>,
}

/// `leasehold watch [DIR…]`.
pub fn watch(cfg: &Config, flags: WatchFlags, json: bool, fail_on_error: bool) -> Result<ExitCode, CliError> {
    catch_interrupts();
    cfg.log_started("watch");
    let started = Instant::now();
    let defaults = WatchOptions::default();
    let opts = WatchOptions {
        debounce: flags.debounce.unwrap_or(defaults.debounce),
        rescan_every: flags.rescan_every.unwrap_or(defaults.rescan_every),
        poll: flags.poll,
        max_pending: flags.max_pending.unwrap_or(defaults.max_pending),
        max_input: cfg.max_input,
    };
    let watching = match cfg.scanned.as_slice() {
        [one] => one.root().display().to_string(),
        several => format!("{} folders", several.len()),
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut watchers = Vec::with_capacity(cfg.scanned.len());
    for folder in &cfg.scanned {
        let started = Watcher::start(folder.clone(), cfg.store.clone(), opts.clone(), tx.clone());
        match started {
            Ok(w) => watchers.push(w),
            Err(e) => {
                watchers.into_iter().for_each(Watcher::stop);
                return Err(e.into());
            }
        }
    }
    drop(tx);
    let courier = start_courier(cfg);
    let mut totals = WatchTotals::default();
    let mut found = Discovered::default();
    first_pass(&rx, watchers.len(), json, &mut totals, &mut found);
    let rechecked = super::run::recheck(cfg)?;
    let mut on_report = |report: WatchReport, _: &mut Summary, progress: &mut Progress| {
        let shown = take_report(report, json, &mut totals, &mut found);
        if let Some(line) = shown.notice {
            progress.notice(&line);
        }
        progress.add_total(shown.queued);
    };
    let beside = Beside {
        reports: &rx,
        on_report: &mut on_report,
        waiting_for: format!("watching {watching} for changes"),
    };
    let pool = work_pool_beside(cfg, false, false, started, Some(beside));
    watchers.into_iter().for_each(Watcher::stop);
    let mut summary = pool?;
    // What the last pass sent while the pool was ending.
    for report in rx.try_iter() {
        if let Some(line) = take_report(report, json, &mut totals, &mut found).notice {
            say(&line);
        }
    }
    add_discovery(&mut summary, &found);
    add_recheck(&mut summary, &rechecked);
    // Passes add up over time, and a document can be seen by many of them:
    // no total of documents seen.
    summary.seen = None;
    summary.watch = Some(totals);
    settle_courier(cfg, courier, &mut summary)?;
    finish_watch(summary, json, fail_on_error)
}

/// Wait for each of the `watchers`' first pass (the initial run's scan)
/// before the pool starts, as `run` discovers before it works: the pool's
/// progress then starts from the queue those scans found. A signal ends the
/// wait (the pool then starts stopped and the summary follows).
fn first_pass(
    rx: &Receiver<WatchReport>,
    watchers: usize,
    json: bool,
    totals: &mut WatchTotals,
    found: &mut Discovered,
) {
    let mut left = watchers;
    while left > 0 {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(report) => {
                let done = matches!(report, WatchReport::Pass { .. } | WatchReport::Failed { .. });
                if let Some(line) = take_report(report, json, totals, found).notice {
                    say(&line);
                }
                left -= usize::from(done);
            }
            Err(RecvTimeoutError::Timeout) if !stop_requested() => {}
            Err(_) => return,
        }
    }
}

/// What one report means for the live display.
struct Shown {
    /// A line for stderr, said whatever the verbosity.
    notice: Option<String>,
    /// Documents the pass queued (new or changed): the progress total grows.
    queued: u64,
}

/// Count one report of the watcher; with `--json` print it as one line.
fn take_report(report: WatchReport, json: bool, totals: &mut WatchTotals, found: &mut Discovered) -> Shown {
    if json {
        if let Ok(line) = serde_json::to_string(&report) {
            println!("{line}");
        }
    }
    let mut shown = Shown {
        notice: None,
        queued: 0,
    };
    match report {
        WatchReport::Pass { full, found: d, .. } => {
            super::logs::discovered(&d);
            totals.passes += 1;
            totals.full_scans += u64::from(full);
            found.new += d.new;
            found.changed += d.changed;
            found.gone += d.gone;
            // A full scan counts every file again: the last one's count stands.
            if full {
                found.unchanged = d.unchanged;
            }
            let room = MAX_SKIPPED.saturating_sub(found.skipped.len());
            found.skipped.extend(d.skipped.into_iter().take(room));
            shown.queued = (d.new + d.changed) as u64;
        }
        WatchReport::Rescanning {
            reason,
            every_seconds,
        } => {
            shown.notice = Some(format!(
                "leasehold: watch: no change notifications ({reason}); rescanning every {}",
                super::progress::format_duration(Duration::from_secs_f64(every_seconds))
            ));
            totals.rescanning = Some(reason);
        }
        WatchReport::Failed { error } => {
            totals.failed_passes += 1;
            shown.notice = Some(format!("leasehold: watch: a pass failed, retrying: {error}"));
        }
    }
    shown
}
