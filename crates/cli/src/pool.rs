//! Running a worker pool from the command line: progress on stderr, the
//! graceful stop on SIGINT or SIGTERM, the courier beside the pool, and the
//! summary's counts.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::config::Config;
use super::error::CliError;
use super::progress::{say, Progress};
use super::signals::{self, Interrupt};
use super::summary::{Failure, Summary, MAX_LISTED_FAILURES};
use leasehold::pipeline::{PoolOptions, StopHandle, WorkerPool};
use leasehold::upstream::{Courier, CourierHandle};
use leasehold::watch::WatchReport;
use leasehold::{JobFilter, JobId, Status};

/// How long in-flight documents get to finish after the first signal; what is
/// still running then is released (handed back without spending an attempt).
/// Well inside systemd's default stop timeout (90 s).
const GRACE: Duration = Duration::from_secs(10);
/// How often the progress is refreshed (and `work` looks at what it waits
/// for) while no document finishes.
const IDLE_TICK: Duration = Duration::from_secs(1);

/// Run a pool until it exits (idle, or stopped by a signal) and count what it did.
pub fn work_pool(
    cfg: &Config,
    until_idle: bool,
    no_wait: bool,
    started: Instant,
) -> Result<Summary, CliError> {
    work_pool_beside(cfg, until_idle, no_wait, started, None)
}

/// Reports of a component running beside the pool (`watch`'s watcher),
/// taken on the pool's loop so that stdout and the progress line have one
/// writer.
pub struct Beside<'a> {
    /// Where the component's reports arrive.
    pub reports: &'a Receiver<WatchReport>,
    /// What to do with each: count it, print it, grow the progress total.
    pub on_report: &'a mut dyn FnMut(WatchReport, &mut Summary, &mut Progress),
    /// What an idle pool waits for, said instead of the queue's state.
    pub waiting_for: String,
}

/// [`work_pool`], taking the reports of `beside` as they come.
pub fn work_pool_beside(
    cfg: &Config,
    until_idle: bool,
    no_wait: bool,
    started: Instant,
    mut beside: Option<Beside<'_>>,
) -> Result<Summary, CliError> {
    // Signals are caught by the callers (`catch_interrupts`), before discovery.
    let total = cfg.store.count_pending()?;
    let opts = PoolOptions {
        workers: cfg.workers,
        claim_ahead: cfg.claim_ahead,
        until_idle,
        wait_for_source: !no_wait,
        ..PoolOptions::default()
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    let pool = WorkerPool::start(cfg.pipeline()?, opts, Some(tx))?;
    let handle = pool.stop_handle();
    stop_on_interrupt(handle.clone());
    let mut summary = Summary::default();
    let mut progress = Progress::new(total, started);
    let mut last_event = Instant::now();
    let never = crossbeam_channel::never();
    loop {
        let reports = beside.as_ref().map_or(&never, |b| b.reports);
        crossbeam_channel::select! {
            recv(rx) -> event => match event {
                Ok(event) => {
                    summary.count(&event);
                    progress.event(&event, &summary);
                    last_event = Instant::now();
                }
                Err(_) => break,
            },
            recv(reports) -> report => match (report, beside.as_mut()) {
                (Ok(report), Some(b)) => (b.on_report)(report, &mut summary, &mut progress),
                // The component ended: nothing more to take from it.
                _ => beside = None,
            },
            default(IDLE_TICK) => {
                // Only a pool that waits for new work says what it waits for.
                let waiting_for = if until_idle || last_event.elapsed() < 5 * IDLE_TICK {
                    None
                } else if let Some(b) = &beside {
                    Some(b.waiting_for.clone())
                } else {
                    what_work_waits_for(cfg)
                };
                progress.idle(&summary, waiting_for);
            }
        }
    }
    pool.join();
    progress.done();
    summary.failures_shown_live = progress.shows_failures();
    summary.halted = handle.halted();
    summary.set_seconds(started.elapsed().as_secs_f64());
    summary.database = cfg.store.path().display().to_string();
    summary.mirror = cfg.mirror.root().display().to_string();
    summary.cleanups_skipped = cfg.mirror.cleanups_skipped();
    note_store(cfg, &mut summary);
    note_interruption(cfg, &mut summary)?;
    Ok(summary)
}

/// The store's totals after the pool, and its first dead documents; a store
/// that cannot be read is an error of the summary, not the end of it.
fn note_store(cfg: &Config, summary: &mut Summary) {
    match cfg.store.totals() {
        Ok(t) => summary.store = Some(t),
        Err(e) => summary.add_error(format!("reading the store's totals: {e}")),
    }
    // The listing below walks the rows in id order until it has found its
    // dead ones: with none, that is a read of the whole table (8 of a rerun's
    // 300 ms at 100,000 documents), which the totals just said is not needed.
    if summary.store.as_ref().is_some_and(|t| t.dead + t.removed == 0) {
        return;
    }
    match cfg
        .store
        .jobs_where(&JobFilter::status(Status::Dead), JobId(0), MAX_LISTED_FAILURES)
    {
        Ok(jobs) => {
            summary.store_dead = jobs
                .into_iter()
                .map(|j| Failure {
                    error: j.last_error.unwrap_or_default(),
                    key: j.key,
                })
                .collect();
        }
        Err(e) => summary.add_error(format!("reading the store's dead documents: {e}")),
    }
}

/// If a signal stopped the command, say so in the summary with how many
/// documents are left to do (queued, retrying, or still leased by others).
pub fn note_interruption(cfg: &Config, summary: &mut Summary) -> Result<(), CliError> {
    if let Some(signal) = interrupted() {
        let c = cfg.store.counts()?;
        summary.interrupted = Some(signal);
        summary.left = Some(c.discovered + c.retrying + c.extracting);
    }
    Ok(())
}

/// Why an idle `work` pool has nothing to do: e.g. "nothing claimable; next
/// retry in 40s". `None` while something is claimable or leased.
fn what_work_waits_for(cfg: &Config) -> Option<String> {
    let counts = cfg.store.counts().ok()?;
    if counts.extracting > 0 {
        return None;
    }
    let now = cfg.store.now();
    match cfg.store.next_claimable_at().ok()? {
        None => Some("nothing queued; `leasehold discover` adds documents".into()),
        Some(next) if next > now => Some(format!(
            "nothing claimable; next retry in {}",
            super::progress::format_duration(Duration::from_millis((next - now) as u64))
        )),
        Some(_) => None,
    }
}

/// The pool a signal stops: the one running now. `sync` runs one pool after
/// another, and a process has one handler per signal.
static CURRENT_POOL: Mutex<Option<StopHandle>> = Mutex::new(None);
/// The first signal received, if any.
static INTERRUPTED: Mutex<Option<Interrupt>> = Mutex::new(None);

/// The signal that asked the process to stop, if one did.
pub fn interrupted() -> Option<Interrupt> {
    *INTERRUPTED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a signal asked the process to stop.
pub fn stop_requested() -> bool {
    interrupted().is_some()
}

/// From now on SIGINT and SIGTERM stop the command gracefully instead of
/// ending the process. Called by the commands that run pools, before their
/// first step; the others keep the default (a signal ends them at once).
pub fn catch_interrupts() {
    signals::catch(on_interrupt);
}

/// Make `handle`'s pool the one a signal stops; if a signal already came
/// (e.g. during discovery, or between `sync`'s passes), stop it now.
fn stop_on_interrupt(handle: StopHandle) {
    *CURRENT_POOL.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle.clone());
    if stop_requested() {
        handle.stop_hard();
    }
}

/// First signal: stop claiming, give in-flight documents [`GRACE`], then
/// release what is left; the command then prints its summary and exits
/// 130/143. Second signal: exit at once (held leases then expire normally).
fn on_interrupt(signal: Interrupt) {
    let first = {
        let mut seen = INTERRUPTED.lock().unwrap_or_else(|e| e.into_inner());
        let first = seen.is_none();
        seen.get_or_insert(signal);
        first
    };
    if !first {
        say(&format!(
            "leasehold: {}: stopping now; leases still held will expire",
            signal.name()
        ));
        std::process::exit(i32::from(signal.exit_code()));
    }
    say(&format!(
        "leasehold: {}: stopping; finishing documents in flight for up to {}s (a second signal quits now)",
        signal.name(),
        GRACE.as_secs()
    ));
    let Some(handle) = CURRENT_POOL.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
        return;
    };
    handle.stop_claiming();
    std::thread::spawn(move || {
        std::thread::sleep(GRACE);
        handle.stop_hard();
        // A pool started later (sync's next pass) is stopped at its start.
    });
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
