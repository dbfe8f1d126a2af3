//! Running a worker pool from the command line: progress on the terminal,
//! Ctrl-C handling, the courier beside the pool, and the summary's counts.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::config::Config;
use super::summary::Summary;
use super::CliError;
use crate::pipeline::{PoolOptions, StopHandle, WorkerPool};
use crate::upstream::{Courier, CourierHandle};

/// How long in-flight documents get to finish after the first Ctrl-C.
const GRACE: Duration = Duration::from_secs(10);

/// Run a pool until it exits (idle, or stopped by Ctrl-C) and count what it did.
pub fn work_pool(
    cfg: &Config,
    until_idle: bool,
    no_wait: bool,
    started: Instant,
) -> Result<Summary, CliError> {
    let todo = cfg.store.counts()?;
    let total = todo.discovered + todo.retrying + todo.extracting;
    let opts = PoolOptions {
        workers: cfg.workers,
        until_idle,
        wait_for_source: !no_wait,
        ..PoolOptions::default()
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    let pool = WorkerPool::start(cfg.pipeline()?, opts, Some(tx))?;
    let handle = pool.stop_handle();
    install_ctrl_c(handle.clone());
    let mut summary = Summary::default();
    let mut progress = Progress::new(total);
    for event in rx.iter() {
        if let Err(error) = &event.outcome {
            progress.warn(error);
        }
        summary.count(&event);
        progress.tick(&summary);
    }
    pool.join();
    progress.done();
    summary.halted = handle.halted();
    summary.set_seconds(started.elapsed().as_secs_f64());
    summary.database = cfg.store.path().display().to_string();
    summary.mirror = cfg.mirror.root().display().to_string();
    summary.cleanups_skipped = cfg.mirror.cleanups_skipped();
    Ok(summary)
}

/// The pool Ctrl-C stops: the one running now. `sync` runs one pool after
/// another, and a process can have only one Ctrl-C handler.
static CURRENT_POOL: Mutex<Option<StopHandle>> = Mutex::new(None);
/// Set by the first Ctrl-C, for callers that start more than one pool.
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C asked the process to stop.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
}

/// First Ctrl-C: stop claiming, give in-flight documents `GRACE`, then release
/// what is left. Second Ctrl-C: exit at once (leases then expire normally).
/// The handler is installed once and acts on the pool started last.
fn install_ctrl_c(handle: StopHandle) {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    *CURRENT_POOL.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
    INSTALL.call_once(|| {
        let _ = ctrlc::set_handler(on_ctrl_c);
    });
}

fn on_ctrl_c() {
    if STOP_REQUESTED.swap(true, Ordering::SeqCst) {
        eprintln!("leasehold: stopping now; held leases will expire");
        std::process::exit(130);
    }
    eprintln!("leasehold: stopping; finishing documents in flight (Ctrl-C again to quit now)");
    let Some(handle) = CURRENT_POOL.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
        return;
    };
    handle.stop_claiming();
    std::thread::spawn(move || {
        std::thread::sleep(GRACE);
        handle.stop_hard();
    });
}

/// A progress bar on a terminal, a plain line every second otherwise.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    last_line: Instant,
    total: u64,
    /// The last error shown, how many times it came again since, and when it
    /// was last shown: a failure repeated by every worker is one line, not a flood.
    last_warning: Option<(String, u64, Instant)>,
}

/// A repeated error is shown again at most this often (with its count).
const REPEAT_EVERY: Duration = Duration::from_secs(5);

impl Progress {
    fn new(total: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {per_sec} {msg}")
            {
                bar.set_style(style);
            }
            bar
        });
        Progress {
            bar,
            last_line: Instant::now(),
            total,
            last_warning: None,
        }
    }

    /// Show an error that is not one document's (e.g. a store write that
    /// failed) as it happens, on stderr above the bar.
    fn warn(&mut self, error: &str) {
        let line = match &mut self.last_warning {
            Some((last, again, shown)) if last == error => {
                *again += 1;
                if shown.elapsed() < REPEAT_EVERY {
                    return;
                }
                let line = format!("leasehold: {error} (again, {again} times)");
                (*again, *shown) = (0, Instant::now());
                line
            }
            _ => {
                self.last_warning = Some((error.to_owned(), 0, Instant::now()));
                format!("leasehold: {error}")
            }
        };
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn tick(&mut self, s: &Summary) {
        let done = s.indexed + s.failed;
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                let waiting = match s.waiting {
                    0 => String::new(),
                    n => format!(", {n} waiting for a locked account"),
                };
                bar.set_message(format!("{} failed{waiting}", s.failed));
            }
            None if self.last_line.elapsed() >= Duration::from_secs(1) => {
                let waiting = match s.waiting {
                    0 => String::new(),
                    n => format!(", {n} handed back until a locked account opens"),
                };
                eprintln!(
                    "leasehold: {done}/{} processed, {} failed{waiting}",
                    self.total, s.failed
                );
                self.last_line = Instant::now();
            }
            None => {}
        }
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Stop the courier and count what it delivered and what still waits.
pub fn settle_courier(
    cfg: &Config,
    courier: Option<CourierHandle>,
    summary: &mut Summary,
) -> Result<(), CliError> {
    let Some(courier) = courier else { return Ok(()) };
    let done = courier.stop();
    summary.delivered = done.results;
    for e in done.errors {
        summary.add_error(e);
    }
    summary.outbox_waiting = cfg.store.outbox().totals()?.rows as u64;
    if let Some(up) = &cfg.upstream {
        up.gate.send_notices();
        up.gate.unhold();
    }
    Ok(())
}

/// Start the courier beside a pool when a configuration file is in use (its
/// notices, expiry and probes of locks that ran out always; the outbox when a
/// sink is configured).
pub fn start_courier(cfg: &Config) -> Option<CourierHandle> {
    let up = cfg.upstream.as_ref()?;
    let courier =
        Courier::new(std::sync::Arc::clone(&up.gate), up.sink.clone()).probing_accounts_of(&up.file);
    match courier.start() {
        Ok(handle) => Some(handle),
        Err(e) => {
            eprintln!("leasehold: notices and the outbox wait: cannot start the courier: {e}");
            None
        }
    }
}
