//! One supervised child: start it, send it one document, wait for the answer with a bound,
//! and kill, reap and classify it when anything goes wrong.
//!
//! Every wait here is bounded (DESIGN.md §10): pipes are non-blocking and polled in short
//! slices that also check the stop flag and the deadline; reaping after a kill is polled too,
//! and a child that will not die in time is handed to a background reaper thread rather than
//! waited on.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::super::{ExtractError, Extracted};
use super::capture::{last_lines, Capture};
use super::child::{ChildConfig, CHILD_ARG};
use super::protocol::{encode, lengths, Request, Response, MAX_HEADER_LEN, PREFIX_LEN, PROTOCOL_VERSION};
use super::{LimitKind, Limits};

/// How long one poll(2) waits before the stop flag and the deadline are checked again.
const SLICE: Duration = Duration::from_millis(50);
/// How long reaping may take after SIGKILL (or after the child closed its pipe) before the
/// child is left to a background reaper.
const REAP_BOUND: Duration = Duration::from_secs(2);
/// How long to wait for the child's last stderr bytes after it was reaped.
const TAIL_BOUND: Duration = Duration::from_millis(500);
/// How long a new child may take to greet (exec, loading, setting its limits).
const START_BOUND: Duration = Duration::from_secs(10);
/// First read size for a response; small answers then take one read.
const FIRST_READ: usize = 64 * 1024;

/// What one document did to its child.
pub(super) struct Outcome {
    pub result: Result<Extracted, ExtractError>,
    /// The child answered cleanly and may serve the next document.
    pub reusable: bool,
}

impl Outcome {
    fn lost(error: ExtractError) -> Self {
        Outcome {
            result: Err(error),
            reusable: false,
        }
    }
}

/// A running child and its pipes. Dropping it kills and reaps the child.
pub(super) struct ChildHandle {
    child: Child,
    requests: ChildStdin,
    responses: ChildStdout,
    stderr: Arc<Capture>,
    config: ChildConfig,
    /// The CPU budget of the document in flight, to name it if the child hits it.
    cpu_secs: u64,
    /// Response buffer, kept between documents so a small answer costs no allocation but
    /// its text.
    buf: Vec<u8>,
    reaped: bool,
}

impl ChildHandle {
    /// Starts a child and waits (bounded, stop-aware) for its greeting. Failing to start is
    /// `Unavailable`: the machine's or the configuration's fault, never the document's.
    pub(super) fn start(program: &Path, limits: &Limits, stop: &AtomicBool) -> Result<Self, ExtractError> {
        let unavailable = |why: String| ExtractError::Unavailable {
            reason: format!("cannot start {} as an extraction child: {why}", program.display()),
        };
        let mut handle = Self::spawn(program, limits).map_err(|e| unavailable(e.to_string()))?;
        let wait = Wait {
            deadline: Instant::now() + START_BOUND,
            limit: START_BOUND,
            stop,
        };
        let (header_len, _) = match handle.read_frame(0, &wait) {
            Ok(lengths) => lengths,
            Err(ExtractError::Stopped) => return Err(ExtractError::Stopped),
            Err(e) => return Err(unavailable(e.to_string())),
        };
        let header = &handle.buf[PREFIX_LEN..PREFIX_LEN + header_len];
        match serde_json::from_slice::<Response>(header) {
            Ok(Response::Ready { protocol }) if protocol == PROTOCOL_VERSION => Ok(handle),
            _ => Err(unavailable(format!(
                "it did not greet with protocol version {PROTOCOL_VERSION}"
            ))),
        }
    }

    fn spawn(program: &Path, limits: &Limits) -> io::Result<Self> {
        let config = ChildConfig {
            memory_bytes: limits.memory_bytes,
            max_input_bytes: limits.max_input_bytes,
            stack_bytes: limits.stack_bytes,
        };
        let mut child = Command::new(program)
            .arg(CHILD_ARG)
            .args(config.to_args())
            // One malloc arena: glibc reserves 64 MiB of address space per extra arena,
            // which would eat the RLIMIT_AS budget without being used.
            .env("MALLOC_ARENA_MAX", "1")
            // No backtraces: a crash's last stderr lines must be its reason (an
            // allocation failure, a stack overflow), not frames that push it
            // out of the captured tail.
            .env("RUST_BACKTRACE", "0")
            .env("RUST_LIB_BACKTRACE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (Some(requests), Some(responses), Some(stderr)) = pipes else {
            unreachable!("all three pipes were requested");
        };
        let mut handle = ChildHandle {
            child,
            requests,
            responses,
            stderr: Arc::new(Capture::default()),
            config,
            cpu_secs: 0,
            buf: vec![0; FIRST_READ],
            reaped: false,
        };
        // From here on a failure drops `handle`, which kills and reaps the child.
        handle.stderr = Capture::start(stderr)?;
        set_nonblocking(handle.requests.as_raw_fd())?;
        set_nonblocking(handle.responses.as_raw_fd())?;
        Ok(handle)
    }

    /// Whether the child is still running; an idle child that died is not worth a document.
    pub(super) fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends one document and waits for its answer, all within `limits.deadline`.
    pub(super) fn extract(
        &mut self,
        name: &str,
        bytes: &[u8],
        limits: &Limits,
        stop: &AtomicBool,
    ) -> Outcome {
        let deadline = Instant::now() + limits.deadline;
        let request = Request {
            name: name.to_owned(),
            max_output_bytes: limits.max_output_bytes,
            cpu_secs: limits.cpu_time.as_secs_f64().ceil() as u64,
        };
        self.cpu_secs = request.cpu_secs;
        self.stderr.clear();
        let frame = encode(&request, bytes);
        let wait = Wait {
            deadline,
            limit: limits.deadline,
            stop,
        };
        if let Err(error) = self.send(&frame, &wait) {
            return Outcome::lost(error);
        }
        self.receive(limits, &wait)
    }

    fn send(&mut self, frame: &[u8], wait: &Wait) -> Result<(), ExtractError> {
        let mut sent = 0;
        while sent < frame.len() {
            match self.requests.write(&frame[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait_ready(self.requests.as_raw_fd(), libc::POLLOUT, wait)?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // EPIPE and friends: the child is gone; say why.
                Err(_) => return Err(self.died()),
            }
        }
        Ok(())
    }

    /// Reads exactly one response frame, never more than the header limit plus the output
    /// cap, whatever the child claims or sends.
    fn receive(&mut self, limits: &Limits, wait: &Wait) -> Outcome {
        let (header_len, total) = match self.read_frame(limits.max_output_bytes, wait) {
            Ok(lengths) => lengths,
            Err(error) => return Outcome::lost(error),
        };
        let header = &self.buf[PREFIX_LEN..PREFIX_LEN + header_len];
        let outcome = match serde_json::from_slice::<Response>(header) {
            Ok(Response::Ok { note }) => match self.take_text(PREFIX_LEN + header_len, total) {
                Some(text) => Outcome {
                    result: Ok(Extracted { text, note }),
                    reusable: true,
                },
                None => self.kill_with(protocol_error("text that is not UTF-8")),
            },
            Ok(Response::Err(error)) => {
                let error = error.into_error();
                // A child that hit the output cap held a huge text: start afresh.
                let reusable = !matches!(error, ExtractError::Limit { .. });
                Outcome {
                    result: Err(error),
                    reusable,
                }
            }
            Ok(Response::Ready { .. }) | Err(_) => {
                self.kill_with(protocol_error("an unexpected or unreadable response header"))
            }
        };
        if self.buf.len() != FIRST_READ {
            // Grown for a huge answer, or moved out with its text: one huge answer must not
            // pin its buffer for the child's whole life.
            self.buf = vec![0; FIRST_READ];
        }
        outcome
    }

    /// The text in `buf[start..end]`: copied out when small (the buffer is kept for the next
    /// answer), moved out when large (no second copy of a big text).
    fn take_text(&mut self, start: usize, end: usize) -> Option<String> {
        if end <= FIRST_READ {
            return std::str::from_utf8(&self.buf[start..end]).ok().map(str::to_owned);
        }
        let mut text = std::mem::take(&mut self.buf);
        text.truncate(end);
        text.drain(..start);
        String::from_utf8(text).ok()
    }

    /// Fills `self.buf` with one frame whose body is at most `max_body` bytes and returns
    /// (header length, frame length). On any error the child is already killed and reaped.
    /// Waits for the pipe before each read: the answer is almost never there yet, and a read
    /// that would block is a wasted syscall per document.
    fn read_frame(&mut self, max_body: u64, wait: &Wait) -> Result<(usize, usize), ExtractError> {
        let mut filled = 0;
        let mut frame: Option<(usize, usize)> = None; // (header length, total length)
        loop {
            if let Some((header, total)) = frame {
                if filled == total {
                    return Ok((header, total));
                }
            } else if filled >= PREFIX_LEN {
                let prefix: [u8; PREFIX_LEN] = self.buf[..PREFIX_LEN].try_into().expect("prefix length");
                let (header, body) = lengths(&prefix);
                if body > max_body {
                    self.kill_and_reap();
                    return Err(ExtractError::Limit {
                        what: LimitKind::Output { cap: max_body },
                    });
                }
                let total = PREFIX_LEN + header as usize + body as usize;
                if header > MAX_HEADER_LEN || filled > total {
                    self.kill_and_reap();
                    return Err(protocol_error("a frame that breaks the protocol"));
                }
                if self.buf.len() < total {
                    self.buf.resize(total, 0);
                }
                frame = Some((header as usize, total));
                continue;
            }
            self.wait_ready(self.responses.as_raw_fd(), libc::POLLIN, wait)?;
            let end = frame.map_or(self.buf.len(), |(_, total)| total);
            match self.responses.read(&mut self.buf[filled..end]) {
                Ok(0) => return Err(self.died()),
                Ok(n) => filled += n,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(_) => return Err(self.died()),
            }
        }
    }

    /// Polls `fd` for `events` in short slices until it is ready (or hung up: the following
    /// read or write then says how). Raised `stop` or a passed deadline kill the child.
    fn wait_ready(&mut self, fd: RawFd, events: libc::c_short, wait: &Wait) -> Result<(), ExtractError> {
        loop {
            if wait.stop.load(Ordering::Relaxed) {
                self.kill_and_reap();
                return Err(ExtractError::Stopped);
            }
            let left = wait.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.kill_and_reap();
                return Err(ExtractError::Limit {
                    what: LimitKind::Deadline(wait.limit),
                });
            }
            let mut pollfd = libc::pollfd {
                fd,
                events,
                revents: 0,
            };
            let slice = left.min(SLICE).as_millis().max(1) as libc::c_int;
            // SAFETY: one valid pollfd, for the duration of the call.
            let ready = unsafe { libc::poll(&mut pollfd, 1, slice) };
            if ready > 0 {
                return Ok(());
            }
            if ready < 0 {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    self.kill_and_reap();
                    return Err(ExtractError::Unavailable {
                        reason: format!("poll on the extraction child's pipe failed: {error}"),
                    });
                }
            }
        }
    }

    fn kill_with(&mut self, error: ExtractError) -> Outcome {
        self.kill_and_reap();
        Outcome::lost(error)
    }

    /// The child closed its pipe or stopped reading: it is exiting or dead. Reap it (killing
    /// it if it lingers) and say why, from its wait status and the tail of its stderr.
    fn died(&mut self) -> ExtractError {
        let status = self.reap_within(REAP_BOUND).or_else(|| {
            let _ = self.child.kill();
            self.reap_within(REAP_BOUND)
        });
        let stderr = self.stderr.tail(TAIL_BOUND);
        if status.is_none() {
            self.abandon();
        }
        classify(status, &stderr, &self.config, self.cpu_secs)
    }

    pub(super) fn kill_and_reap(&mut self) {
        if self.reaped {
            return;
        }
        let _ = self.child.kill();
        if self.reap_within(REAP_BOUND).is_none() {
            self.abandon();
        }
    }

    fn reap_within(&mut self, bound: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + bound;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.reaped = true;
                    return Some(status);
                }
                Ok(None) if Instant::now() < until => thread::sleep(Duration::from_millis(2)),
                _ => return None,
            }
        }
    }

    /// A child that outlived SIGKILL plus the bound (stuck in the kernel): a detached thread
    /// waits for it so it never stays a zombie, and nobody here waits any longer.
    fn abandon(&mut self) {
        let _ = self.child.kill();
        let pid = self.child.id() as libc::pid_t;
        self.reaped = true;
        let _ = thread::Builder::new()
            .name("leasehold-child-reaper".into())
            .spawn(move || {
                let mut status = 0;
                // SAFETY: waits for our own child by pid; nothing else reaps it now.
                unsafe { libc::waitpid(pid, &mut status, 0) };
            });
    }
}

impl Drop for ChildHandle {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

/// The two bounds on every wait for one document.
struct Wait<'a> {
    deadline: Instant,
    limit: Duration,
    stop: &'a AtomicBool,
}

fn protocol_error(what: &str) -> ExtractError {
    ExtractError::Crashed {
        reason: format!("the child sent {what}"),
    }
}

/// Names why a child died. The stderr text wins over the signal because Rust reports both a
/// stack overflow and a failed allocation by printing a line and then aborting (SIGABRT).
fn classify(status: Option<ExitStatus>, stderr: &str, config: &ChildConfig, cpu_secs: u64) -> ExtractError {
    let lines = last_lines(stderr);
    let with_lines = |what: String| ExtractError::Crashed {
        reason: if lines.is_empty() {
            what
        } else {
            format!("{what} (child stderr: {lines})")
        },
    };
    if stderr.contains("has overflowed its stack") {
        return with_lines("stack overflow".into());
    }
    if stderr.contains("memory allocation of") && stderr.contains("failed") {
        return ExtractError::Limit {
            what: LimitKind::Memory {
                bytes: config.memory_bytes,
            },
        };
    }
    match status {
        Some(status) if status.signal() == Some(libc::SIGXCPU) => ExtractError::Limit {
            what: LimitKind::CpuTime { secs: cpu_secs },
        },
        Some(status) => match (status.signal(), status.code()) {
            (Some(signal), _) => with_lines(format!("killed by signal {signal}")),
            (None, Some(code)) => with_lines(format!("exited with status {code}")),
            (None, None) => with_lines("ended for an unknown reason".into()),
        },
        None => with_lines("did not exit after SIGKILL".into()),
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: ChildConfig = ChildConfig {
        memory_bytes: 1 << 30,
        max_input_bytes: 1 << 20,
        stack_bytes: 1 << 20,
    };

    fn killed_by(signal: i32) -> Option<ExitStatus> {
        Some(ExitStatus::from_raw(signal))
    }

    #[test]
    fn stack_overflow_is_named_from_stderr() {
        let stderr = "\nthread 'extract' has overflowed its stack\nfatal runtime error: stack overflow\n";
        let reason = classify(killed_by(libc::SIGABRT), stderr, &CONFIG, 7).to_string();
        assert!(
            reason.starts_with("extractor crashed: stack overflow"),
            "{reason}"
        );
    }

    #[test]
    fn failed_allocation_is_the_memory_limit() {
        let stderr = "memory allocation of 1073741824 bytes failed\n";
        let error = classify(killed_by(libc::SIGABRT), stderr, &CONFIG, 7);
        assert_eq!(error.to_string(), "extraction exceeded its memory limit of 1 GiB");
        assert!(error.is_permanent());
    }

    #[test]
    fn cpu_limit_and_other_signals() {
        let cpu = classify(killed_by(libc::SIGXCPU), "", &CONFIG, 7);
        assert!(matches!(
            cpu,
            ExtractError::Limit {
                what: LimitKind::CpuTime { secs: 7 }
            }
        ));
        let segv = classify(killed_by(libc::SIGSEGV), "junk\n", &CONFIG, 7).to_string();
        assert_eq!(
            segv,
            "extractor crashed: killed by signal 11 (child stderr: junk)"
        );
        let exit = classify(Some(ExitStatus::from_raw(2 << 8)), "", &CONFIG, 7).to_string();
        assert_eq!(exit, "extractor crashed: exited with status 2");
    }
}
