//! The command-line tool: turn flags into a validated `config::Config`, then
//! run one command.

mod args;
mod auth;
mod charts;
mod config;
mod doctor;
mod error;
mod folder_commands;
mod folders;
mod logs;
mod metrics;
mod migrate;
mod page;
mod pool;
mod progress;
mod report;
mod run;
mod search;
mod serve;
mod shown;
mod signals;
mod summary;
mod sync;
mod testing;
mod watch;

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use args::{AuthCommand, Cli, Command, FoldersAction, WorkFlags};
use config::{Existing, FileUse};
use error::print_bytes;
pub use error::CliError;

/// The `leasehold` command: parse, validate, run one command; errors are one
/// readable line on stderr. Exit codes: 0 success (and when the reader of our
/// output went away, as ripgrep and fd do), 1 runtime failure, 2 usage or
/// configuration error, 130/143 stopped by SIGINT/SIGTERM.
pub fn main() -> ExitCode {
    use clap::Parser;
    quiet_panics();
    ignore_file_size_signal();
    let mut args = Cli::parse();
    args.global.settle_data();
    progress::set_verbosity(args.global.quiet, args.global.verbose);
    if let Err(e) = logs::init(
        args.global.log_level.as_deref(),
        args.global.log_format,
        default_log_level(&args.command, args.global.quiet),
    ) {
        let _ = writeln!(std::io::stderr().lock(), "leasehold: {e}");
        return ExitCode::from(e.exit_code());
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(args))) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            let _ = writeln!(std::io::stderr().lock(), "leasehold: {e}");
            ExitCode::from(e.exit_code())
        }
        Err(_) if READER_GONE.load(Ordering::SeqCst) => ExitCode::SUCCESS,
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

/// The log level when neither `--log-level` nor `RUST_LOG` says: the
/// long-running commands tell what happens; the others (a person watching
/// `run`'s progress), and any command asked to be `--quiet`, only warn.
fn default_log_level(command: &Command, quiet: bool) -> &'static str {
    match command {
        Command::Work { .. } | Command::Sync { .. } | Command::Serve { .. } if !quiet => {
            logs::SERVICE_DEFAULT
        }
        _ => logs::PERSON_DEFAULT,
    }
}

/// Set when printing failed because whoever read our stdout or stderr closed
/// it (`leasehold status | head -1`): the command then ends quietly.
static READER_GONE: AtomicBool = AtomicBool::new(false);

/// Whether printing panicked because the reader of stdout or stderr is gone.
///
/// Rust ignores SIGPIPE, so a write to a closed pipe fails with EPIPE and
/// `println!` panics. We keep SIGPIPE ignored (a child that dies before
/// reading its input must not kill us) and recognise that one panic instead:
/// its message names the stream, and `poll` confirms the stream's other end
/// is closed (POLLERR on a pipe whose readers are gone), so no other panic
/// is ever mistaken for it.
#[cfg(not(unix))]
fn is_closed_output(_message: &str) -> bool {
    false
}

#[cfg(unix)]
fn is_closed_output(message: &str) -> bool {
    let fd = if message.starts_with("failed printing to stdout") {
        libc::STDOUT_FILENO
    } else if message.starts_with("failed printing to stderr") {
        libc::STDERR_FILENO
    } else {
        return false;
    };
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd we own, without waiting.
    let ready = unsafe { libc::poll(&mut p, 1, 0) };
    ready == 1 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// A file-size limit (`ulimit -f`) reached by a store or mirror write makes
/// that write fail with EFBIG, reported like a full disk, instead of killing
/// the process without a word (SIGXFSZ's default action).
fn ignore_file_size_signal() {
    #[cfg(unix)]
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
        if is_closed_output(&message) {
            READER_GONE.store(true, Ordering::SeqCst);
            return;
        }
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let _ = writeln!(
            std::io::stderr().lock(),
            "leasehold: internal error: {}{at}",
            message.replace('\n', " ")
        );
    }));
}

/// Run the parsed command.
fn run(cli: Cli) -> Result<ExitCode, CliError> {
    let g = &cli.global;
    let early = cli.early.0;
    let build = |work: &WorkFlags| config::Config::build(g, work, None);
    let existing = |needs: Existing| config::Config::build_existing(g, &early, needs, FileUse::Needed);
    // Commands that only read go on, with a warning, past a broken
    // configuration file.
    let reading = |needs: Existing| config::Config::build_existing(g, &early, needs, FileUse::ReadsOnly);
    match cli.command {
        Command::Run {
            dirs,
            json,
            fail_on_error,
            include_hidden,
            work,
        } => {
            let work = work.or(early);
            let cfg = config::Config::build(g, &work, Some((&dirs, include_hidden)))?;
            let _metrics = metrics::keep_file(&cfg, &work)?;
            run::run(&cfg, json, fail_on_error)
        }
        Command::Watch {
            dirs,
            json,
            fail_on_error,
            include_hidden,
            debounce,
            rescan_every,
            poll,
            max_pending,
            work,
        } => {
            let work = work.or(early);
            let cfg = config::Config::build(g, &work, Some((&dirs, include_hidden)))?;
            let _metrics = metrics::keep_file(&cfg, &work)?;
            let flags = watch::WatchFlags {
                debounce,
                rescan_every,
                poll,
                max_pending,
            };
            watch::watch(&cfg, flags, json, fail_on_error)
        }
        Command::Discover {
            dirs,
            json,
            include_hidden,
            no_wait,
            input,
            search,
        } => {
            let work = WorkFlags {
                input,
                search,
                ..Default::default()
            }
            .or(early);
            if !dirs.is_empty() {
                let cfg = config::Config::build(g, &work, Some((&dirs, include_hidden)))?;
                return report::discover(&cfg, json);
            }
            let mut cfg = build(&work)?;
            if cfg.http_configured() || cfg.recorded.has_no_folder() {
                return sync::discover(&cfg, json, no_wait);
            }
            cfg.scan_every_folder(include_hidden)?;
            report::discover(&cfg, json)
        }
        Command::Work {
            until_empty,
            json,
            no_wait,
            work,
        } => {
            let work = work.or(early);
            let cfg = build(&work)?;
            let _metrics = metrics::keep_file(&cfg, &work)?;
            run::work(&cfg, until_empty, json, no_wait)
        }
        Command::Sync { json, no_wait, work } => {
            let work = work.or(early);
            let cfg = build(&work)?;
            let _metrics = metrics::keep_file(&cfg, &work)?;
            sync::sync(&cfg, json, no_wait)
        }
        Command::Completions { shell } => completions(shell),
        Command::Man { command } => man_page(command.as_deref()),
        // Work flags written before these commands are still taken (and
        // mostly unused), as they were when every flag was global. Commands
        // that only read never create a data directory, database or mirror.
        Command::Folders { action } => match action.unwrap_or(FoldersAction::List { json: false }) {
            FoldersAction::List { json } => folder_commands::list(&reading(Existing::StoreToRead)?, json),
            FoldersAction::Add { dirs } => folder_commands::add_command(&build(&early)?, &dirs),
            FoldersAction::Remove { dirs } => {
                folder_commands::remove_command(&existing(Existing::Store)?, &dirs)
            }
        },
        Command::Status { json } => report::status(&reading(Existing::StoreAndMirror)?, json),
        Command::Inspect { doc, id, json } => report::inspect(
            &reading(Existing::StoreAndMirror)?,
            &report::DocRef::of(doc, id),
            json,
        ),
        Command::List {
            status,
            failed,
            removed,
            no_text,
            limit,
            json,
        } => {
            let filter = match no_text {
                true => report::ListFilter::no_text(),
                false => report::ListFilter::of(status.as_deref(), failed, removed),
            };
            report::list(&reading(Existing::StoreAndMirror)?, &filter, limit, json)
        }
        Command::Search {
            query,
            fts,
            exact,
            limit,
            offset,
            files,
            null,
            color,
            timeout,
            json,
        } => {
            let asked = search::Asked {
                query: query.join(" "),
                fts,
                exact,
                limit,
                offset,
                output: search::Output::of(files, null, json, color),
                timeout,
            };
            search::search(&reading(Existing::StoreAndMirror)?, &asked)
        }
        Command::Reindex { tokenizer, json } => search::reindex(
            &existing(Existing::StoreAndMirrorToWrite)?,
            tokenizer.map(|t| t.tokenizer()),
            json,
        ),
        Command::Show { doc, id } => {
            report::show(&reading(Existing::StoreAndMirror)?, &report::DocRef::of(doc, id))
        }
        Command::Gc { dry_run, json } => report::gc(&existing(Existing::MirrorToSweep)?, dry_run, json),
        Command::Auth { command } => match command {
            AuthCommand::Status { json } => auth::status(&existing(Existing::StoreToRead)?, json),
            AuthCommand::Unlock { account } => auth::unlock(&existing(Existing::Store)?, &account),
        },
        Command::Metrics => metrics::metrics(&reading(Existing::StoreToRead)?),
        Command::Serve {
            listen,
            port,
            open,
            allow_retry,
            handlers,
            head_timeout,
        } => {
            let needs = match allow_retry {
                true => Existing::Serving,
                false => Existing::ServingToRead,
            };
            let options = serve::Options {
                listen,
                port,
                open,
                allow_retry,
                handlers: usize::from(handlers),
                head_timeout,
            };
            // Read-only, it goes on past a broken configuration file as the
            // other readers do; to write it needs the file as `retry` does.
            let cfg = match allow_retry {
                true => existing(needs)?,
                false => reading(needs)?,
            };
            serve::serve(&cfg, &options)
        }
        Command::Report { html } => page::report(&reading(Existing::StoreToRead)?, &html),
        Command::Doctor { json, fix } => doctor::doctor(g, json, fix),
        Command::Migrate { to, json } => migrate::migrate(&existing(Existing::Store)?, &to, json),
        Command::Retry { doc, dead } => report::retry(&existing(Existing::Store)?, doc.as_deref(), dead),
    }
}

/// The clap definition of the whole command line, for completions, the
/// manual page and tests that walk it.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
}

/// `leasehold completions SHELL`: the completion script, on stdout.
fn completions(shell: clap_complete::Shell) -> Result<ExitCode, CliError> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command(), "leasehold", &mut script);
    print_bytes(&script)
}

/// `leasehold man [COMMAND]`: the manual page in roff, on stdout; with a
/// subcommand, that subcommand's page (`leasehold-run(1)`).
fn man_page(subcommand: Option<&str>) -> Result<ExitCode, CliError> {
    let mut top = command();
    top.build();
    let page = match subcommand {
        None => top,
        Some(name) => {
            // Built, a subcommand knows its page name (`leasehold-run`) and
            // how it is typed (`leasehold run`).
            top.find_subcommand(name)
                .cloned()
                .ok_or_else(|| CliError::Config(format!("man: no subcommand named {name:?}")))?
        }
    };
    let mut roff = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut roff)
        .map_err(|e| CliError::Runtime(format!("cannot render the manual page: {e}")))?;
    print_bytes(&roff)
}
