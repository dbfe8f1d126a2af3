//! `run` and `work`: discover (for `run`), then a worker pool until the work is
//! done, then the summary.

use std::process::ExitCode;
use std::time::Instant;

use super::config::Config;
use super::logs;
use super::pool::{catch_interrupts, settle_courier, start_courier, work_pool};
use super::summary::{add_discovery, finish};
use super::CliError;

/// `leasehold run DIR`.
pub fn run(cfg: &Config, json: bool, fail_on_error: bool) -> Result<ExitCode, CliError> {
    let source = cfg
        .source
        .as_ref()
        .ok_or_else(|| CliError::Config("no source directory".into()))?;
    catch_interrupts();
    logs::started("run", cfg);
    let started = Instant::now();
    let found = source
        .discover(&cfg.store, cfg.max_input)
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    logs::discovered(&found);
    let courier = start_courier(cfg);
    let mut summary = work_pool(cfg, true, false, started)?;
    add_discovery(&mut summary, &found);
    settle_courier(cfg, courier, &mut summary)?;
    finish(summary, json, fail_on_error)
}

/// `leasehold work`.
pub fn work(cfg: &Config, until_empty: bool, json: bool, no_wait: bool) -> Result<ExitCode, CliError> {
    catch_interrupts();
    // A refused source is one line, with no start logged before it.
    cfg.check_source()?;
    logs::started("work", cfg);
    let courier = start_courier(cfg);
    let mut summary = work_pool(cfg, until_empty, no_wait, Instant::now())?;
    settle_courier(cfg, courier, &mut summary)?;
    finish(summary, json, false)
}
