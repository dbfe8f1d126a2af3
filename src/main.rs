//! The `leasehold` command: parse → validate configuration → run.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.
//! Errors are one readable line on stderr.

mod cli;

use std::process::ExitCode;

use clap::Parser;
use leasehold::extract;

fn main() -> ExitCode {
    // The hidden extraction-child mode (DESIGN.md §9), before clap so it never shows in help.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == extract::CHILD_ARG)
    {
        return extract::child_main();
    }
    let args = cli::args::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
