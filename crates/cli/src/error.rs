//! How a command fails: one line and an exit code (2 for how it was asked,
//! 1 for what it met), and the one way generated text reaches standard
//! output, where a reader that went away is no failure.

use std::fmt;
use std::io::Write;
use std::process::ExitCode;

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

impl From<leasehold::Error> for CliError {
    /// A damaged store and a read-only one are failures of what the command
    /// met, not of how it was asked (exit 1, with the way on); other
    /// configuration errors are exit 2.
    fn from(e: leasehold::Error) -> Self {
        // One line, whatever the error chain holds.
        let line = e.to_string().replace('\n', " ");
        if e.is_corrupt() {
            CliError::Runtime(format!(
                "{line} (`leasehold doctor` says what is damaged and what mends it)"
            ))
        } else if matches!(e, leasehold::Error::ReadOnly { .. }) {
            CliError::Runtime(format!(
                "{line} (commands that only read it, such as status, list, show, search and doctor, still work)"
            ))
        } else if e.is_config() {
            CliError::Config(line)
        } else {
            CliError::Runtime(line)
        }
    }
}

impl From<leasehold::pipeline::CleanupError> for CliError {
    fn from(e: leasehold::pipeline::CleanupError) -> Self {
        match e {
            leasehold::pipeline::CleanupError::Store(e) => e.into(),
            mirror => CliError::Runtime(mirror.to_string().replace('\n', " ")),
        }
    }
}

/// Write generated text to stdout; a reader that went away (`| head`) is not an error.
pub(crate) fn print_bytes(bytes: &[u8]) -> Result<ExitCode, CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(CliError::Runtime(format!("cannot write to standard output: {e}"))),
    }
}
