//! The command-line tool: turn flags into a validated `config::Config`, then
//! run one command.

mod args;
mod auth;
mod config;
mod doctor;
mod pool;
mod report;
mod run;
mod summary;
mod sync;
mod testing;

use std::fmt;
use std::process::ExitCode;

use args::{AuthCommand, Cli, Command};
use config::Existing;

/// A failure of the command, with the exit code it maps to.
#[derive(Debug)]
pub enum CliError {
    /// Bad flags or configuration found before any work (exit 2).
    Config(String),
    /// Something failed while running (exit 1).
    Runtime(String),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_) => 2,
            CliError::Runtime(_) => 1,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Config(m) | CliError::Runtime(m) => f.write_str(m),
        }
    }
}

impl From<crate::Error> for CliError {
    fn from(e: crate::Error) -> Self {
        // One line, whatever the error chain holds.
        let line = e.to_string().replace('\n', " ");
        if e.is_config() || e.is_corrupt() {
            CliError::Config(line)
        } else {
            CliError::Runtime(line)
        }
    }
}

impl From<crate::pipeline::CleanupError> for CliError {
    fn from(e: crate::pipeline::CleanupError) -> Self {
        match e {
            crate::pipeline::CleanupError::Store(e) => e.into(),
            mirror => CliError::Runtime(mirror.to_string().replace('\n', " ")),
        }
    }
}

/// The `leasehold` command: parse, validate, run one command; errors are one
/// readable line on stderr. Exit codes: 0 success, 1 runtime failure, 2 usage
/// or configuration error.
pub fn main() -> ExitCode {
    use clap::Parser;
    quiet_panics();
    ignore_file_size_signal();
    let args = Cli::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// A file-size limit (`ulimit -f`) reached by a store or mirror write makes
/// that write fail with EFBIG, reported like a full disk, instead of killing
/// the process without a word (SIGXFSZ's default action).
fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Panic text never reaches the user as it is. A panic on a worker thread is
/// caught and reported as that document's failure (or the step's error), so it
/// prints nothing; anywhere else it is a bug, said in one line of our own.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        if thread.name().is_some_and(|n| n.starts_with("leasehold-worker")) {
            return;
        }
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("leasehold: internal error: {}{at}", message.replace('\n', " "));
    }));
}

/// Run the parsed command.
fn run(cli: Cli) -> Result<ExitCode, CliError> {
    let g = &cli.global;
    match cli.command {
        Command::Run {
            dir,
            json,
            fail_on_error,
            include_hidden,
        } => run::run(
            &config::Config::build(g, Some((&dir, include_hidden)))?,
            json,
            fail_on_error,
        ),
        Command::Discover {
            dir: Some(dir),
            json,
            include_hidden,
            ..
        } => report::discover(&config::Config::build(g, Some((&dir, include_hidden)))?, json),
        Command::Discover {
            dir: None,
            json,
            no_wait,
            ..
        } => sync::discover(&config::Config::build(g, None)?, json, no_wait),
        Command::Work {
            until_empty,
            json,
            no_wait,
        } => run::work(&config::Config::build(g, None)?, until_empty, json, no_wait),
        Command::Status { json } => report::status(
            &config::Config::build_existing(g, Existing::StoreAndMirror)?,
            json,
        ),
        Command::Inspect { doc, id, json } => {
            let cfg = config::Config::build_existing(g, Existing::StoreAndMirror)?;
            report::inspect(&cfg, &report::DocRef::of(doc, id), json)
        }
        Command::List {
            status,
            failed,
            limit,
            json,
        } => {
            let filter = report::ListFilter::of(status.as_deref(), failed);
            report::list(
                &config::Config::build_existing(g, Existing::StoreAndMirror)?,
                &filter,
                limit,
                json,
            )
        }
        Command::Show { doc, id } => report::show(
            &config::Config::build_existing(g, Existing::StoreAndMirror)?,
            &report::DocRef::of(doc, id),
        ),
        Command::Gc { dry_run, json } => report::gc(
            &config::Config::build_existing(g, Existing::StoreAndMirror)?,
            dry_run,
            json,
        ),
        Command::Sync { json, no_wait } => sync::sync(&config::Config::build(g, None)?, json, no_wait),
        Command::Auth { command } => match command {
            AuthCommand::Status { json } => {
                auth::status(&config::Config::build_existing(g, Existing::Store)?, json)
            }
            AuthCommand::Unlock { account } => {
                auth::unlock(&config::Config::build_existing(g, Existing::Store)?, &account)
            }
        },
        Command::Doctor { json } => doctor::doctor(g, json),
        Command::Retry { doc, dead } => report::retry(
            &config::Config::build_existing(g, Existing::Store)?,
            doc.as_deref(),
            dead,
        ),
    }
}
