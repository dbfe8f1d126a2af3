//! The log subscriber: leveled, structured events (`tracing`) on stderr
//! only, as text or one JSON object per line.
//!
//! The library emits events where things happen (a claim taken over, a
//! refused write, the gate's lock, probe and recovery, a notice, an outbox
//! drop, a limit hit, the pool's start, each claim, completion and failed
//! document); this room adds discovery's counts (a command's start with the
//! settings in force is `Config::log_started`, its end the summary's
//! `log_finished`) and decides where events go and how many. The level comes from `--log-level`,
//! else `RUST_LOG`, else the command's default: `warn` for commands a person
//! runs and watches (`run`, `watch`, the small commands), which show each
//! failed document on their own, so its log line waits for a level that is
//! asked for; `info` for the long-running ones (`work`, `sync`). Events
//! carry names, keys, numbers and reasons; never a secret, never document
//! text. Keys and paths are recorded as strings, which both formats escape.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use super::args::LogFormat;

use super::error::CliError;
use leasehold::source::Discovered;

/// Where a command's own lifecycle events go.
pub(crate) const TARGET: &str = "leasehold::command";

/// The default of the commands a person watches: warnings, but not each
/// failed document (`leasehold::document`), which their progress shows.
pub const PERSON_DEFAULT: &str = "warn,leasehold::document=error";
/// The default of the long-running commands: their lifecycle too.
pub const SERVICE_DEFAULT: &str = "info";

/// Install the subscriber for this process. `level` is `--log-level` (a
/// level or any `RUST_LOG`-style directive); `default` is the command's.
pub fn init(level: Option<&str>, format: LogFormat, default: &str) -> Result<(), CliError> {
    let filter =
        match level {
            Some(text) => EnvFilter::try_new(text)
                .map_err(|e| CliError::Config(format!("--log-level {text:?}: {e}")))?,
            None => match std::env::var("RUST_LOG") {
                Ok(text) if !text.trim().is_empty() => EnvFilter::try_new(&text)
                    .map_err(|e| CliError::Config(format!("RUST_LOG={text:?}: {e}")))?,
                _ => EnvFilter::new(default),
            },
        };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (the tests' in-process runs) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    Ok(())
}

/// A scan of the source directory brought the store up to date.
pub fn discovered(found: &Discovered) {
    tracing::info!(
        target: TARGET,
        event = "discovered",
        new = found.new,
        changed = found.changed,
        unchanged = found.unchanged,
        gone = found.gone,
        skipped = found.skipped.len(),
        "discovery done"
    );
}
