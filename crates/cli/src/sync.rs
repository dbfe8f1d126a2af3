//! `sync` and `discover` without a directory: the HTTP source, the pool, and the
//! outbox drained to the sink.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::config::Config;
use super::error::CliError;
use super::pool::{
    catch_interrupts, note_interruption, settle_courier, start_courier, stop_requested, work_pool,
};
use super::progress::{verbosity, Verbosity};
use super::summary::{finish, Summary};
use leasehold::clock::Millis;
use leasehold::upstream::{nap_until, DrainStep, GateError, ListingReport, Sink, WaitReason};

/// Says once per distinct lock that the command is waiting for it.
fn waiting_line() -> impl FnMut(&GateError) {
    let mut last: Option<(String, Millis)> = None;
    move |e| {
        if let GateError::Locked { account, until, .. } = e {
            if last.as_ref() != Some(&(account.clone(), *until)) {
                if verbosity() != Verbosity::Quiet {
                    eprintln!("leasehold: waiting: {e}");
                }
                last = Some((account.clone(), *until));
            }
        }
    }
}

/// Says on stderr what a listing skipped (the details stay in `status`).
fn say_skipped(listing: &ListingReport) {
    if listing.skipped > 0 {
        eprintln!(
            "leasehold: listing: skipped {} bad record(s); last: {}",
            listing.skipped,
            listing.last_skip.as_deref().unwrap_or("?")
        );
    }
}

/// `leasehold discover` without a directory: list the HTTP source.
pub fn discover(cfg: &Config, json: bool, no_wait: bool) -> Result<ExitCode, CliError> {
    let http = cfg.http_source()?.ok_or_else(|| {
        CliError::Config("discover needs a DIR, or [source.http] in the configuration file".into())
    })?;
    let listing = http
        .discover(!no_wait, &mut waiting_line())
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    if let Some(up) = &cfg.upstream {
        up.gate.send_notices();
        up.gate.unhold();
    }
    say_skipped(&listing);
    if json {
        println!("{}", serde_json::to_string_pretty(&listing).unwrap_or_default());
    } else {
        println!(
            "listed {}, new or changed {}, skipped {}, gone {}",
            listing.listed, listing.queued, listing.skipped, listing.gone
        );
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
    let http = cfg
        .http_source()?
        .ok_or_else(|| CliError::Config("sync needs [source.http] in the configuration file".into()))?;
    catch_interrupts();
    cfg.log_started("sync");
    let started = Instant::now();
    let mut on_wait = waiting_line();
    let listing = http
        .discover(!no_wait, &mut on_wait)
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    say_skipped(&listing);
    let rechecked = super::run::recheck(cfg)?;
    let courier = start_courier(cfg);
    let mut summary = work_until_settled(cfg, no_wait, started)?;
    settle_courier(cfg, courier, &mut summary)?;
    if let Some(sink) = &up.sink {
        summary.delivered += drain(sink, cfg, no_wait, &mut on_wait)?;
        summary.outbox_waiting = cfg.store.outbox().totals()?.rows as u64;
    }
    summary.new = listing.queued;
    summary.unchanged = listing.listed - listing.queued;
    super::summary::add_recheck(&mut summary, &rechecked);
    summary.set_seconds(started.elapsed().as_secs_f64());
    note_interruption(cfg, &mut summary)?;
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
        if stop_requested() {
            return Ok(total);
        }
        let c = cfg.store.counts()?;
        if c.discovered + c.retrying + c.extracting == 0 {
            return Ok(total);
        }
        let now = cfg.store.now();
        if let Some(next) = cfg.store.next_claimable_at()? {
            if next > now {
                if said != Some(next) && verbosity() != Verbosity::Quiet {
                    said = Some(next);
                    eprintln!(
                        "leasehold: waiting: {} document(s) not claimable for {} s",
                        c.retrying,
                        (next - now + 999) / 1000
                    );
                }
                // Short naps, so that a signal while waiting ends the run soon.
                let nap = nap_until(now, next).clamp(Duration::from_millis(50), Duration::from_millis(250));
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
        if stop_requested() {
            return Ok(delivered);
        }
        match sink.drain_once() {
            Ok(DrainStep::Sent(n)) => delivered += n as u64,
            Ok(DrainStep::Empty) => return Ok(delivered),
            Ok(DrainStep::Wait { until, why }) => {
                // Without waiting, only the sink's own pace is sat out.
                if no_wait && why != WaitReason::Pace {
                    return Ok(delivered);
                }
                if why == WaitReason::Locked {
                    on_wait(&GateError::Locked {
                        account: "sink".into(),
                        until,
                        probing: false,
                    });
                }
                // Short naps, so that a signal while waiting ends the drain soon.
                let nap = nap_until(cfg.store.now(), until).min(Duration::from_millis(250));
                std::thread::sleep(nap);
            }
            Err(e) => return Err(CliError::Runtime(e.to_string())),
        }
    }
}
