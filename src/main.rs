//! The `leasehold` command: parse → validate configuration → run.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.
//! Errors are one readable line on stderr.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::args::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
