//! The child side: the same binary started with [`CHILD_ARG`], serving one document at a time
//! over its stdin and a private duplicate of its original stdout.
//!
//! Start-up order matters and is the point of this file:
//! 1. keep the protocol channel clean: duplicate fd 1 for the protocol, then point fd 1 (and
//!    so Rust's `stdout`, which writes to fd 1) at fd 2, the parent's capture pipe. Parsers
//!    that print debug output (some PDF parsers do) now write into the capture, never into a
//!    frame and never onto the user's terminal;
//! 2. a quiet panic hook (one line to the capture, no backtrace hint) and no core dumps;
//! 3. the extraction thread with its large stack is created *before* the memory limit, so
//!    the limit is "what the parser may allocate" on top of the child's fixed footprint;
//! 4. then `RLIMIT_AS`, once, before any document is read.

use std::fs::File;
use std::io::{self, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::panic;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::Duration;

use super::protocol::{encode_split, read_frame, Reply, Request, Response, WireError, PROTOCOL_VERSION};
use crate::registry::ExtractorRegistry;
use leasehold::extract::Extractor;
use leasehold::process::{set_limit, status_bytes};

/// The hidden first argument that turns `leasehold` into an extraction child. `main.rs`
/// checks for it before parsing flags, so it never shows in `--help`.
pub const CHILD_ARG: &str = "__extract-child";

/// What the parent fixes when it starts a child (positional arguments after [`CHILD_ARG`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ChildConfig {
    pub memory_bytes: u64,
    pub max_input_bytes: u64,
    pub stack_bytes: u64,
}

impl ChildConfig {
    pub(super) fn to_args(self) -> [String; 3] {
        [
            self.memory_bytes.to_string(),
            self.max_input_bytes.to_string(),
            self.stack_bytes.to_string(),
        ]
    }

    fn from_args(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut next = |what: &str| -> Result<u64, String> {
            let raw = args.next().ok_or_else(|| format!("missing {what}"))?;
            raw.parse().map_err(|e| format!("bad {what} {raw:?}: {e}"))
        };
        Ok(Self {
            memory_bytes: next("memory limit")?,
            max_input_bytes: next("input limit")?,
            stack_bytes: next("stack size")?,
        })
    }
}

/// Entry point of the child mode; `main.rs` calls it when the first argument is
/// [`CHILD_ARG`]. Exits 0 when the parent closes the request pipe, 2 on a start-up or
/// protocol failure (explained on stderr, which the parent captures).
pub fn child_main() -> ExitCode {
    let config = match ChildConfig::from_args(std::env::args().skip(2)) {
        Ok(config) => config,
        Err(e) => return fail(&format!("extraction child: {e}")),
    };
    let protocol = match take_stdout() {
        Ok(protocol) => protocol,
        Err(e) => return fail(&format!("extraction child: cannot set up the protocol pipe: {e}")),
    };
    panic::set_hook(Box::new(|info| {
        let _ = writeln!(io::stderr(), "extraction child: {info}");
    }));
    let _ = set_limit(libc::RLIMIT_CORE, 0, 0);
    let worker = thread::Builder::new()
        .name("extract".into())
        .stack_size(usize::try_from(config.stack_bytes).unwrap_or(usize::MAX))
        .spawn(move || serve(config, protocol));
    match worker.map(|w| w.join()) {
        Ok(Ok(Ok(()))) => ExitCode::SUCCESS,
        Ok(Ok(Err(e))) => fail(&format!("extraction child: {e}")),
        Ok(Err(_)) => fail("extraction child: the serving thread panicked"),
        Err(e) => fail(&format!(
            "extraction child: cannot start the extraction thread: {e}"
        )),
    }
}

fn fail(message: &str) -> ExitCode {
    let _ = writeln!(io::stderr(), "{message}");
    ExitCode::from(2)
}

/// Duplicates fd 1 (close-on-exec) for the protocol and points fd 1 at fd 2.
fn take_stdout() -> io::Result<File> {
    io::stdout().flush()?;
    // SAFETY: plain fd syscalls; the duplicate is owned by the returned File alone.
    unsafe {
        let fd = libc::fcntl(libc::STDOUT_FILENO, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let protocol = File::from(OwnedFd::from_raw_fd(fd));
        if libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(protocol)
    }
}

/// The request loop, on the large-stack thread. A request whose body is over the input
/// limit is a protocol error: the parent checks sizes before sending.
fn serve(config: ChildConfig, mut protocol: File) -> io::Result<()> {
    let registry = ExtractorRegistry::new(config.max_input_bytes);
    let never = AtomicBool::new(false);
    let mut input = BufReader::with_capacity(64 * 1024, io::stdin().lock());
    limit_memory(config.memory_bytes)?;
    let cpu_hard = cpu_hard_limit();
    let ready = Response::Ready {
        protocol: PROTOCOL_VERSION,
    };
    protocol.write_all(&reply(ready, b"").0)?;
    while let Some((request, body)) = read_frame::<Request>(&mut input, config.max_input_bytes)? {
        limit_cpu(request.cpu_secs, cpu_hard);
        leasehold::fault::child_fault(&body);
        // No stop flag reaches the child: the parent kills it instead.
        let result = registry.extract_noted(&request.name, &body, &never);
        drop(body);
        match result {
            Ok(done) if done.text.len() as u64 > request.max_output_bytes => {
                let cap = WireError::OutputCap {
                    cap: request.max_output_bytes,
                };
                protocol.write_all(&reply(Response::Err(cap), b"").0)?;
            }
            Ok(done) => {
                let ok = Response::Ok {
                    note: done.note,
                    title: done.title,
                    author: done.author,
                    date: done.date,
                    pages: done.pages,
                    language: done.language,
                };
                let (head, rest) = reply(ok, done.text.as_bytes());
                protocol.write_all(&head)?;
                protocol.write_all(rest)?;
            }
            Err(e) => protocol.write_all(&reply(Response::Err(WireError::from_error(&e)), b"").0)?,
        }
    }
    Ok(())
}

/// One frame: `response`, the CPU time used so far, and `body`, in the two
/// pieces of [`encode_split`].
fn reply(response: Response, body: &[u8]) -> (Vec<u8>, &[u8]) {
    let cpu_us = u64::try_from(cpu_used().as_micros()).unwrap_or(u64::MAX);
    encode_split(&Reply { response, cpu_us }, body)
}

/// `RLIMIT_AS` = the address space mapped now (binary, libraries, both stacks) plus the
/// budget, soft and hard, so the parser cannot raise it back.
/// Without `/proc` (macOS, the BSDs) the mapped size is unknown and the memory budget is not
/// enforced; the deadline and the CPU limit still are.
fn limit_memory(budget: u64) -> io::Result<()> {
    if !cfg!(target_os = "linux") {
        return Ok(());
    }
    let mapped = mapped_bytes()?;
    let limit = mapped.saturating_add(budget);
    set_limit(libc::RLIMIT_AS, limit, limit)
}

/// The address space mapped now (`VmSize`), in bytes.
fn mapped_bytes() -> io::Result<u64> {
    status_bytes("VmSize").ok_or_else(|| io::Error::other("no VmSize in /proc/self/status"))
}

/// `RLIMIT_CPU` counts the whole life of the process, and a child serves many documents, so
/// each document gets `secs` on top of what the child has already used: the soft limit moves
/// (SIGXCPU when crossed), the hard limit stays where it was (raising it needs privilege).
fn limit_cpu(secs: u64, hard: u64) {
    let used = cpu_used().as_micros().div_ceil(1_000_000);
    let soft = u64::try_from(used)
        .unwrap_or(u64::MAX)
        .saturating_add(secs)
        .min(hard);
    let _ = set_limit(libc::RLIMIT_CPU, soft, hard);
}

/// The hard CPU limit the child inherited (usually unlimited), read once.
fn cpu_hard_limit() -> u64 {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_CPU, &mut current) } != 0 {
        return libc::RLIM_INFINITY;
    }
    current.rlim_max
}

/// User plus system CPU time of this process so far.
fn cpu_used() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    super::ending::cpu_of(&usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_through_arguments() {
        let config = ChildConfig {
            memory_bytes: 1 << 30,
            max_input_bytes: 99,
            stack_bytes: 1 << 28,
        };
        let back = ChildConfig::from_args(config.to_args().into_iter()).unwrap();
        assert_eq!(back, config);
        assert!(ChildConfig::from_args(["1".to_string()].into_iter()).is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn mapped_bytes_reads_proc() {
        assert!(mapped_bytes().unwrap() > 0);
    }
}
