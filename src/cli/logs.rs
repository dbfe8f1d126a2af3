//! The log subscriber: leveled, structured events (`tracing`) on stderr
//! only, as text or one JSON object per line.
//!
//! The library emits events where things happen (a claim taken over, a
//! refused write, the gate's lock, probe and recovery, a notice, an outbox
//! drop, a limit hit); this room decides where they go and how many. The
//! level comes from `--log-level`, else `RUST_LOG`, else the command's
//! default: `warn` for commands a person runs and watches (`run`, the small
//! commands), `info` for the long-running ones (`work`, `sync`). Events carry
//! names, keys, numbers and reasons; never a secret, never document text.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use super::args::LogFormat;
use super::CliError;

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
