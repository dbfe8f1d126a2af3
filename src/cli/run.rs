//! `run` and `work`: a worker pool with progress, Ctrl-C handling and a summary.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use leasehold::source::Discovered;
use leasehold::worker::{Event, PoolOptions, Processed, StopHandle, WorkerPool};

use super::config::Config;
use super::sync::Courier;
use super::CliError;

/// How long in-flight documents get to finish after the first Ctrl-C.
const GRACE: Duration = Duration::from_secs(10);

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
    pub unchanged: usize,
    pub new: usize,
    pub changed: usize,
    pub gone: usize,
    /// Entries discovery skipped, with why (not a regular file, unreadable...).
    pub skipped: Vec<String>,
    pub seconds: f64,
    pub docs_per_second: f64,
    pub database: String,
    pub mirror: String,
    /// Documents that failed in this run, with why.
    pub failures: Vec<Failure>,
    /// Errors that were not about one document (e.g. the store).
    pub errors: Vec<String>,
    /// Results the sink acknowledged during this command.
    pub delivered: u64,
    /// Results still waiting in the outbox at the end.
    pub outbox_waiting: u64,
}

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
        self.failures.extend(more.failures);
        self.errors.extend(more.errors);
        // Every pass measures from the same start.
        self.set_seconds(more.seconds);
    }

    /// The run took `seconds`; the rate counts every document processed in it.
    pub fn set_seconds(&mut self, seconds: f64) {
        self.seconds = seconds;
        let processed = self.indexed + self.failed;
        self.docs_per_second = processed as f64 / seconds.max(1e-9);
    }

    fn count(&mut self, e: &Event) {
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
            Err(msg) => self.errors.push(msg.clone()),
        }
    }

    fn fail(&mut self, key: &str, error: &str) {
        self.failed += 1;
        self.failures.push(Failure {
            key: key.to_owned(),
            error: error.to_owned(),
        });
    }

    pub fn print(&self, json: bool) {
        if json {
            println!("{}", serde_json::to_string_pretty(self).unwrap_or_default());
            return;
        }
        println!(
            "indexed {}, failed {} ({} will retry, {} dead), unchanged {}, superseded {}, released {}",
            self.indexed,
            self.failed,
            self.retrying,
            self.dead,
            self.unchanged,
            self.superseded,
            self.released
        );
        println!(
            "{:.1} documents/s over {:.2}s; results in {} (database {})",
            self.docs_per_second, self.seconds, self.mirror, self.database
        );
        if self.delivered > 0 || self.outbox_waiting > 0 || self.waiting > 0 {
            println!(
                "delivered {} to the sink, {} waiting in the outbox, {} document(s) handed back for a locked account",
                self.delivered, self.outbox_waiting, self.waiting
            );
        }
        for f in self.failures.iter().take(20) {
            println!("  failed {:?}: {}", f.key, f.error);
        }
        if self.failures.len() > 20 {
            println!(
                "  ... and {} more (see `leasehold status`)",
                self.failures.len() - 20
            );
        }
        for e in &self.errors {
            println!("  error: {e}");
        }
        for s in self.skipped.iter().take(20) {
            println!("  skipped {s}");
        }
    }
}

/// `leasehold run DIR`.
pub fn run(cfg: &Config, json: bool, fail_on_error: bool) -> Result<ExitCode, CliError> {
    let source = cfg
        .source
        .as_ref()
        .ok_or_else(|| CliError::Config("no source directory".into()))?;
    let started = Instant::now();
    let found = source
        .discover(&cfg.store, cfg.max_input)
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    let courier = cfg.upstream.as_ref().map(Courier::start);
    let mut summary = work_pool(cfg, true, false, started)?;
    add_discovery(&mut summary, &found);
    settle_courier(cfg, courier, &mut summary)?;
    finish(summary, json, fail_on_error)
}

/// `leasehold work`.
pub fn work(cfg: &Config, until_empty: bool, json: bool, no_wait: bool) -> Result<ExitCode, CliError> {
    let courier = cfg.upstream.as_ref().map(Courier::start);
    let mut summary = work_pool(cfg, until_empty, no_wait, Instant::now())?;
    settle_courier(cfg, courier, &mut summary)?;
    finish(summary, json, false)
}

/// Stop the courier and count what it delivered and what still waits.
pub fn settle_courier(cfg: &Config, courier: Option<Courier>, summary: &mut Summary) -> Result<(), CliError> {
    let Some(courier) = courier else { return Ok(()) };
    let (delivered, errors) = courier.finish();
    summary.delivered = delivered;
    summary.errors.extend(errors);
    summary.outbox_waiting = cfg.store.outbox_totals()?.rows as u64;
    if let Some(up) = &cfg.upstream {
        up.gate.send_notices();
        up.gate.unhold();
    }
    Ok(())
}

pub fn finish(summary: Summary, json: bool, fail_on_error: bool) -> Result<ExitCode, CliError> {
    summary.print(json);
    if !summary.errors.is_empty() {
        return Err(CliError::Runtime(format!(
            "{} error(s); first: {}",
            summary.errors.len(),
            summary.errors[0]
        )));
    }
    if fail_on_error && summary.failed > 0 {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn add_discovery(s: &mut Summary, d: &Discovered) {
    s.unchanged = d.unchanged;
    s.new = d.new;
    s.changed = d.changed;
    s.gone = d.gone;
    s.skipped = d.skipped.clone();
}

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
    let pool = WorkerPool::start(cfg.pipeline()?, opts, Some(tx));
    install_ctrl_c(pool.stop_handle());
    let mut summary = Summary::default();
    let mut progress = Progress::new(total);
    for event in rx.iter() {
        summary.count(&event);
        progress.tick(&summary);
    }
    pool.join();
    progress.done();
    summary.set_seconds(started.elapsed().as_secs_f64());
    summary.database = cfg.store.path().display().to_string();
    summary.mirror = cfg.mirror.root().display().to_string();
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
}

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
