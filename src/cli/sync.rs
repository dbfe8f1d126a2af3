//! `sync`, `auth status`, `auth unlock`, and the courier: the thread that,
//! while a pool works, sends notices, checks account expiry and drains the
//! outbox to the sink.

use std::process::ExitCode;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Sender};
use leasehold::auth::{DrainStep, GateError, Sink};
use leasehold::clock::{rfc3339, Millis};
use leasehold::config::Day;

use super::config::{Config, Upstream};
use super::run::{finish, settle_courier, work_pool, Summary};
use super::CliError;

/// How often the courier checks expiry dates (a warning goes out once a day).
const EXPIRY_EVERY: Duration = Duration::from_secs(60);
/// The courier's longest nap when there is nothing to do.
const NAP: Duration = Duration::from_millis(200);

/// The courier thread; stopping it returns how many results it delivered and
/// the errors it met.
pub struct Courier {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<(u64, Vec<String>)>>,
}

impl Courier {
    /// Start the courier for `up` (notices and expiry always; the outbox if a
    /// sink is configured).
    pub fn start(up: &Upstream) -> Courier {
        let (stop, stopped) = bounded::<()>(0);
        let gate = Arc::clone(&up.gate);
        let sink = up.sink.clone();
        let thread = std::thread::Builder::new()
            .name("leasehold-courier".into())
            .spawn(move || {
                let (mut delivered, mut errors) = (0u64, Vec::new());
                let mut expiry_checked: Option<Instant> = None;
                loop {
                    gate.send_notices();
                    if expiry_checked.is_none_or(|t| t.elapsed() >= EXPIRY_EVERY) {
                        if let Err(e) = gate.check_expiry() {
                            errors.push(e.to_string());
                        }
                        expiry_checked = Some(Instant::now());
                    }
                    let nap = match sink.as_deref().map(Sink::drain_once) {
                        Some(Ok(DrainStep::Sent(n))) => {
                            delivered += n as u64;
                            Duration::ZERO
                        }
                        Some(Ok(DrainStep::Wait { until, .. })) => until_from(gate.store().now(), until),
                        Some(Err(e)) => {
                            errors.push(e.to_string());
                            Duration::from_secs(1)
                        }
                        Some(Ok(DrainStep::Empty)) | None => NAP,
                    };
                    match stopped.recv_timeout(nap) {
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                        _ => return (delivered, errors),
                    }
                }
            })
            .ok();
        Courier {
            stop: Some(stop),
            thread,
        }
    }

    /// Stop (after its current step) and report.
    pub fn finish(mut self) -> (u64, Vec<String>) {
        drop(self.stop.take());
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

/// How long to nap before `until` (on the injected clock), at most [`NAP`].
fn until_from(now: Millis, until: Millis) -> Duration {
    Duration::from_millis((until - now).clamp(1, NAP.as_millis() as i64) as u64)
}

/// Says once per distinct lock that the command is waiting for it.
fn waiting_line() -> impl FnMut(&GateError) {
    let mut last: Option<(String, Millis)> = None;
    move |e| {
        if let GateError::Locked { account, until, .. } = e {
            if last.as_ref() != Some(&(account.clone(), *until)) {
                eprintln!("leasehold: waiting: {e}");
                last = Some((account.clone(), *until));
            }
        }
    }
}

#[derive(serde::Serialize)]
struct Listed {
    listed: usize,
    queued: usize,
}

/// `leasehold discover` without a directory: list the HTTP source.
pub fn discover(cfg: &Config, json: bool, no_wait: bool) -> Result<ExitCode, CliError> {
    let http = cfg
        .upstream
        .as_ref()
        .and_then(|u| u.http_source.as_ref())
        .ok_or_else(|| {
            CliError::Config("discover needs a DIR, or [source.http] in the configuration file".into())
        })?;
    let (listed, queued) = http
        .discover(!no_wait, &mut waiting_line())
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    if let Some(up) = &cfg.upstream {
        up.gate.send_notices();
        up.gate.unhold();
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&Listed { listed, queued }).unwrap_or_default()
        );
    } else {
        println!("listed {listed}, new or changed {queued}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `leasehold sync`: discover from the HTTP source, work until every document
/// is indexed or dead, deliver the outbox, print the summary.
pub fn sync(cfg: &Config, json: bool, no_wait: bool) -> Result<ExitCode, CliError> {
    let up = cfg
        .upstream
        .as_ref()
        .ok_or_else(|| CliError::Config("sync needs a configuration file (--config FILE)".into()))?;
    let http = up
        .http_source
        .as_ref()
        .ok_or_else(|| CliError::Config("sync needs [source.http] in the configuration file".into()))?;
    let started = Instant::now();
    let mut on_wait = waiting_line();
    let (listed, queued) = http
        .discover(!no_wait, &mut on_wait)
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    let courier = Courier::start(up);
    let mut summary = work_until_settled(cfg, no_wait, started)?;
    settle_courier(cfg, Some(courier), &mut summary)?;
    if let Some(sink) = &up.sink {
        summary.delivered += drain(sink, cfg, no_wait, &mut on_wait)?;
        summary.outbox_waiting = cfg.store.outbox_totals()?.rows as u64;
    }
    summary.new = queued;
    summary.unchanged = listed - queued;
    summary.set_seconds(started.elapsed().as_secs_f64());
    let waiting = summary.waiting;
    let code = finish(summary, json, false)?;
    if no_wait && waiting > 0 {
        return Err(CliError::Runtime(format!(
            "{waiting} document(s) wait for a locked account (--no-wait)"
        )));
    }
    Ok(code)
}

/// Run the pool; documents handed back until a lock ends are taken up again
/// when it ends, until nothing is left but indexed and dead documents.
fn work_until_settled(cfg: &Config, no_wait: bool, started: Instant) -> Result<Summary, CliError> {
    let mut total = work_pool(cfg, true, no_wait, started)?;
    if no_wait {
        total.waiting = cfg.store.counts()?.retrying;
        return Ok(total);
    }
    let mut said: Option<Millis> = None;
    loop {
        if super::run::stop_requested() {
            return Ok(total);
        }
        let c = cfg.store.counts()?;
        if c.discovered + c.retrying + c.extracting == 0 {
            return Ok(total);
        }
        let now = cfg.store.now();
        if let Some(next) = cfg.store.next_claimable_at()? {
            if next > now {
                if said != Some(next) {
                    said = Some(next);
                    eprintln!(
                        "leasehold: waiting: {} document(s) not claimable for {} s",
                        c.retrying,
                        (next - now + 999) / 1000
                    );
                }
                // Short naps, so that a Ctrl-C while waiting ends the run soon.
                let nap = until_from(now, next).clamp(Duration::from_millis(50), Duration::from_millis(250));
                std::thread::sleep(nap);
                continue;
            }
        }
        total.add(work_pool(cfg, true, no_wait, started)?);
    }
}

/// Deliver everything in the outbox; waits out locks and the pace unless
/// `no_wait` (then a lock ends the drain with what is left counted).
fn drain(
    sink: &Sink,
    cfg: &Config,
    no_wait: bool,
    on_wait: &mut dyn FnMut(&GateError),
) -> Result<u64, CliError> {
    let mut delivered = 0u64;
    loop {
        match sink.drain_once() {
            Ok(DrainStep::Sent(n)) => delivered += n as u64,
            Ok(DrainStep::Empty) => return Ok(delivered),
            Ok(DrainStep::Wait { until, why }) => {
                // Without waiting, only the sink's own pace is sat out.
                if no_wait && why != "pace" {
                    return Ok(delivered);
                }
                if why == "locked" {
                    on_wait(&GateError::Locked {
                        account: "sink".into(),
                        until,
                        probing: false,
                    });
                }
                std::thread::sleep(until_from(cfg.store.now(), until));
            }
            Err(e) => return Err(CliError::Runtime(e.to_string())),
        }
    }
}

/// One account, as `auth status` shows it.
#[derive(Debug, serde::Serialize)]
struct AccountLine {
    name: String,
    state: String,
    locked_until: Option<String>,
    epoch: i64,
    probes: i64,
    last_error: Option<String>,
    holders: i64,
    expires_on: Option<String>,
    days_left: Option<i64>,
}

#[derive(Debug, serde::Serialize)]
struct AuthStatus {
    accounts: Vec<AccountLine>,
    outbox: leasehold::store::OutboxTotals,
}

/// `leasehold auth status`.
pub fn status(cfg: &Config, json: bool) -> Result<ExitCode, CliError> {
    let states = cfg.store.gate_states()?;
    let today = Day::from_millis(cfg.store.now());
    let mut names: Vec<String> = cfg
        .upstream
        .iter()
        .flat_map(|u| u.file.accounts.iter().map(|a| a.name.clone()))
        .collect();
    for s in &states {
        if !names.contains(&s.name) {
            names.push(s.name.clone());
        }
    }
    let accounts = names
        .into_iter()
        .map(|name| {
            let s = states.iter().find(|s| s.name == name);
            let expires = cfg
                .upstream
                .as_ref()
                .and_then(|u| u.file.account(&name))
                .and_then(|a| a.expires_on);
            AccountLine {
                state: s.map_or("open".into(), |s| s.state.clone()),
                locked_until: s.and_then(|s| s.locked_until).map(rfc3339),
                epoch: s.map_or(0, |s| s.epoch),
                probes: s.map_or(0, |s| s.probes),
                last_error: s.and_then(|s| s.last_error.clone()),
                holders: s.map_or(0, |s| s.holders),
                expires_on: expires.map(|d| d.to_string()),
                days_left: expires.map(|d| d.0 - today.0),
                name,
            }
        })
        .collect();
    let report = AuthStatus {
        accounts,
        outbox: cfg.store.outbox_totals()?,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        print_status(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_status(r: &AuthStatus) {
    if r.accounts.is_empty() {
        println!("no accounts configured");
    }
    for a in &r.accounts {
        let mut line = format!("{}: {}", a.name, a.state);
        if let Some(u) = &a.locked_until {
            line += &format!(" until {u}");
        }
        line += &format!(
            ", epoch {}, {} probe(s), {} holder(s)",
            a.epoch, a.probes, a.holders
        );
        if let (Some(on), Some(left)) = (&a.expires_on, a.days_left) {
            line += &format!(", expires {on} ({left} day(s) left)");
        }
        if let Some(e) = &a.last_error {
            line += &format!("; last error: {e}");
        }
        println!("{line}");
    }
    let o = &r.outbox;
    println!(
        "outbox: {} result(s) waiting ({} bytes), {} dropped ({} bytes), {} delivered",
        o.rows, o.bytes, o.dropped, o.dropped_bytes, o.delivered
    );
}

/// `leasehold auth unlock ACCOUNT`.
pub fn unlock(cfg: &Config, account: &str) -> Result<ExitCode, CliError> {
    let known = cfg.store.gate_states()?.iter().any(|s| s.name == account)
        || cfg
            .upstream
            .as_ref()
            .is_some_and(|u| u.file.account(account).is_some());
    if !known {
        return Err(CliError::Config(format!(
            "auth unlock: no account named {account:?}"
        )));
    }
    let by = format!("auth unlock (pid {})", std::process::id());
    let opened = cfg.store.gate_unlock(account, &by)?;
    if let Some(up) = &cfg.upstream {
        up.gate.send_notices();
    }
    if opened {
        println!("{account}: unlocked");
    } else {
        println!("{account}: was not locked");
    }
    Ok(ExitCode::SUCCESS)
}
