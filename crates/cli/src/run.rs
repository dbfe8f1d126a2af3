//! `run` and `work`: discover (for `run`), then a worker pool until the work is
//! done, then the summary.

use std::process::ExitCode;
use std::time::Instant;

use super::config::Config;
use super::error::CliError;
use super::logs;
use super::pool::{catch_interrupts, settle_courier, start_courier, work_pool};
use super::progress::say;
use super::summary::{add_discovery, add_recheck, finish};
use leasehold::pipeline::Rechecked;

/// `leasehold run [DIR…]`.
pub fn run(cfg: &Config, json: bool, fail_on_error: bool) -> Result<ExitCode, CliError> {
    catch_interrupts();
    cfg.log_started("run");
    let started = Instant::now();
    let (found, rechecked) = std::thread::scope(|s| {
        s.spawn(|| cfg.prepare_extractor());
        discover_and_recheck(cfg, &cfg.scanned)
    })?;
    logs::discovered(&found);
    let courier = start_courier(cfg);
    let mut summary = work_pool(cfg, true, false, started)?;
    add_discovery(&mut summary, &found);
    add_recheck(&mut summary, &rechecked);
    settle_courier(cfg, courier, &mut summary)?;
    finish(summary, json, fail_on_error)
}

/// The discovery of the folders `scanned`, one after the other, and, on a
/// thread beside them, the check of the accepted results ([`recheck`]): over
/// an unchanged tree the one stats each document's source, the other lists
/// each shard of the mirror, and on two cores they overlap.
///
/// Why they may overlap: each changes a row only through the store's fenced
/// writes, and either order leaves the same rows. A document the discovery
/// queues again (changed) or marks gone is extracted again or removed
/// whatever the check finds; one whose result the check forgets is queued,
/// and the discovery still judges its source by its fingerprint. Only the
/// stats overlap: the check's writes wait for the discovery's end, or the
/// discovery would count a document the check had just queued as one an
/// earlier run left (`resumed`) and the summary would count it twice.
fn discover_and_recheck(
    cfg: &Config,
    scanned: &[leasehold::source::DirSource],
) -> Result<(leasehold::source::Discovered, Rechecked), CliError> {
    let discovered = Ended::default();
    std::thread::scope(|s| {
        let rechecked = s.spawn(|| {
            leasehold::pipeline::recheck_results_writing_after(&cfg.store, &cfg.mirror, || discovered.wait())
        });
        let found = {
            // Ended even when the discovery panics: the check would wait forever.
            let _ending = discovered.on_drop();
            discover_all(cfg, scanned)
        };
        let rechecked = rechecked
            .join()
            .map_err(|_| CliError::Runtime("the check of the accepted results stopped".into()))?;
        let found = found.map_err(|e| CliError::Runtime(e.to_string()))?;
        Ok((found, say_rechecked(rechecked?)))
    })
}

/// A one-way latch: [`Ended::wait`] returns once [`Ended::end`] was called.
#[derive(Default)]
struct Ended {
    ended: std::sync::Mutex<bool>,
    signal: std::sync::Condvar,
}

/// Ends its latch when dropped.
struct Ending<'a>(&'a Ended);

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

impl Ended {
    /// A guard that ends the latch when it goes, however it goes.
    fn on_drop(&self) -> Ending<'_> {
        Ending(self)
    }

    fn end(&self) {
        *self.ended.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.signal.notify_all();
    }

    fn wait(&self) {
        let ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        drop(
            self.signal
                .wait_while(ended, |ended| !*ended)
                .unwrap_or_else(|e| e.into_inner()),
        );
    }
}

/// Discover each of the folders `scanned` and add up what they found.
pub(super) fn discover_all(
    cfg: &Config,
    scanned: &[leasehold::source::DirSource],
) -> leasehold::Result<leasehold::source::Discovered> {
    let mut found = leasehold::source::Discovered::default();
    for folder in scanned {
        found.absorb(folder.discover(&cfg.store, cfg.max_input)?);
    }
    Ok(found)
}

/// After a full discovery, before the pool: the accepted results of the
/// documents left unchanged are looked for, and each one missing (or no
/// longer a file of its size) is said on stderr and queued again, so the
/// pool extracts it anew (`pipeline::recheck_results`).
pub(super) fn recheck(cfg: &Config) -> Result<Rechecked, CliError> {
    let found = leasehold::pipeline::recheck_results(&cfg.store, &cfg.mirror)?;
    Ok(say_rechecked(found))
}

/// Say on stderr what the check of the results queued again and what it
/// could not look at.
fn say_rechecked(found: Rechecked) -> Rechecked {
    for line in &found.named {
        say(&format!("leasehold: {line}: extracting it again"));
    }
    let more = found.requeued.saturating_sub(found.named.len() as u64);
    if more > 0 {
        say(&format!(
            "leasehold: ... and {more} more document(s) whose result was missing or altered: extracting them again"
        ));
    }
    for line in &found.unchecked {
        say(&format!("leasehold: {line}: result not checked"));
    }
    found
}

/// `leasehold work`.
pub fn work(cfg: &Config, until_empty: bool, json: bool, no_wait: bool) -> Result<ExitCode, CliError> {
    catch_interrupts();
    // A refused source is one line, with no start logged before it.
    cfg.check_source()?;
    cfg.log_started("work");
    let courier = start_courier(cfg);
    let mut summary = work_pool(cfg, until_empty, no_wait, Instant::now())?;
    settle_courier(cfg, courier, &mut summary)?;
    finish(summary, json, false)
}
