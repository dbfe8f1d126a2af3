//! One supervised child: start it, send it one document, wait for the answer with a bound,
//! and kill and reap it when anything goes wrong (`ending` says whose fault that was).
//!
//! Every wait here is bounded (DESIGN.md §10): pipes are non-blocking and polled in short
//! slices that also check the stop flag and the deadline; reaping after a kill is polled too,
//! and a child that will not die in time is handed to a background reaper thread rather than
//! waited on. The child is reaped here with wait4(2), not through `std::process::Child`,
//! because its resource usage (the CPU time it had) is what tells a child that ran on a
//! document from one that was stopped or starved.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::capture::Capture;
use super::child::{ChildConfig, CHILD_ARG};
use super::ending::{self, Budget, Death};
use super::protocol::{
    encode_split, lengths, Reply, Request, Response, MAX_HEADER_LEN, PREFIX_LEN, PROTOCOL_VERSION,
};
use leasehold::extract::{clean_date, clean_language, clean_title};
use leasehold::extract::{ExtractError, Extracted};
use leasehold::extract::{LimitKind, Limits};

/// How long one poll(2) waits before the stop flag and the deadline are checked again.
const SLICE: Duration = Duration::from_millis(50);
/// A parent that looks at the clock this much later than it meant to was not running (its
/// process was stopped, its machine suspended or overloaded): the time it did not watch is
/// not counted against the document's deadline.
const STALL_GRACE: Duration = Duration::from_millis(250);
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
    pid: libc::pid_t,
    life: Life,
    requests: ChildStdin,
    responses: ChildStdout,
    stderr: Arc<Capture>,
    config: ChildConfig,
    /// The CPU budget of the document in flight, to name it if the child hits it.
    cpu_secs: u64,
    /// The CPU time the child had used when it sent its last frame: where the document in
    /// flight started.
    cpu_before: Duration,
    /// Response buffer, kept between documents so a small answer costs no allocation but
    /// its text.
    buf: Vec<u8>,
}

/// Where a child is in its life, as far as this parent knows. Only a `Running` child is
/// ever signalled: once reaped, its pid may belong to another process.
#[derive(Debug, Clone, Copy)]
enum Life {
    Running,
    /// Reaped here, with how it ended.
    Reaped(Reaped),
    /// Left to the background reaper, or reaped by someone else: nothing more is known.
    Gone,
}

/// A reaped child's wait status and the CPU time it used in its whole life.
#[derive(Debug, Clone, Copy)]
struct Reaped {
    status: ExitStatus,
    cpu: Duration,
}

/// What one non-blocking wait4(2) saw.
enum Seen {
    Running,
    /// Stopped by a signal (reported once per stop, and only when asked with `WUNTRACED`).
    Stopped,
    Ended(Reaped),
    /// No such child any more.
    Gone,
}

/// Waits for `pid` without blocking; `flags` may add `WUNTRACED` to see a stop.
fn look(pid: libc::pid_t, flags: libc::c_int) -> Seen {
    let mut status = 0;
    loop {
        // SAFETY: wait4 writes the status and the zeroed rusage we pass; `pid` is our child.
        let (seen, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            let seen = libc::wait4(pid, &mut status, libc::WNOHANG | flags, &mut usage);
            (seen, usage)
        };
        return match seen {
            0 => Seen::Running,
            seen if seen == pid && libc::WIFSTOPPED(status) => Seen::Stopped,
            seen if seen == pid => Seen::Ended(Reaped {
                status: ExitStatus::from_raw(status),
                cpu: ending::cpu_of(&usage),
            }),
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
            _ => Seen::Gone,
        };
    }
}

impl ChildHandle {
    /// Starts a child and waits (bounded, stop-aware) for its greeting. Failing to start is
    /// `Unavailable`: the machine's or the configuration's fault, never the document's.
    pub(super) fn start(program: &Path, limits: &Limits, stop: &AtomicBool) -> Result<Self, ExtractError> {
        let unavailable = |why: String| ExtractError::Unavailable {
            reason: format!("cannot start {} as an extraction child: {why}", program.display()),
        };
        let mut handle = Self::spawn(program, limits).map_err(|e| unavailable(e.to_string()))?;
        let mut wait = Wait::new(START_BOUND, stop);
        let (header_len, _) = match handle.read_frame(0, &mut wait) {
            Ok(lengths) => lengths,
            Err(ExtractError::Stopped) => return Err(ExtractError::Stopped),
            Err(e) => return Err(unavailable(e.to_string())),
        };
        let header = &handle.buf[PREFIX_LEN..PREFIX_LEN + header_len];
        match serde_json::from_slice::<Reply>(header) {
            Ok(Reply {
                response: Response::Ready { protocol },
                cpu_us,
            }) if protocol == PROTOCOL_VERSION => {
                handle.cpu_before = Duration::from_micros(cpu_us);
                Ok(handle)
            }
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
        // From here on the child is reaped by this handle alone (see `look`); std's `Child`
        // neither waits for nor kills it when dropped.
        let mut handle = ChildHandle {
            pid: child.id() as libc::pid_t,
            life: Life::Running,
            requests,
            responses,
            stderr: Arc::new(Capture::default()),
            config,
            cpu_secs: 0,
            cpu_before: Duration::ZERO,
            buf: vec![0; FIRST_READ],
        };
        // From here on a failure drops `handle`, which kills and reaps the child.
        handle.stderr = Capture::start(stderr)?;
        set_nonblocking(handle.requests.as_raw_fd())?;
        set_nonblocking(handle.responses.as_raw_fd())?;
        Ok(handle)
    }

    /// Whether the child can take a document: an idle child that died, or that someone
    /// stopped, is not worth one (dropping it kills and reaps it).
    pub(super) fn can_serve(&mut self) -> bool {
        if !matches!(self.life, Life::Running) {
            return false;
        }
        match look(self.pid, libc::WUNTRACED) {
            Seen::Running => true,
            Seen::Stopped => false,
            Seen::Ended(reaped) => {
                self.life = Life::Reaped(reaped);
                false
            }
            Seen::Gone => {
                self.life = Life::Gone;
                false
            }
        }
    }

    /// Sends one document and waits for its answer, all within `limits.deadline`.
    pub(super) fn extract(
        &mut self,
        name: &str,
        bytes: &[u8],
        limits: &Limits,
        stop: &AtomicBool,
    ) -> Outcome {
        let request = Request {
            name: name.to_owned(),
            max_output_bytes: limits.max_output_bytes,
            cpu_secs: limits.cpu_time.as_secs_f64().ceil() as u64,
        };
        self.cpu_secs = request.cpu_secs;
        self.stderr.clear();
        let (head, rest) = encode_split(&request, bytes);
        let mut wait = Wait::new(limits.deadline, stop);
        if let Err(error) = self
            .send(&head, &mut wait)
            .and_then(|()| self.send(rest, &mut wait))
        {
            return Outcome::lost(error);
        }
        self.receive(limits, &mut wait)
    }

    fn send(&mut self, frame: &[u8], wait: &mut Wait) -> Result<(), ExtractError> {
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
    fn receive(&mut self, limits: &Limits, wait: &mut Wait) -> Outcome {
        let (header_len, total) = match self.read_frame(limits.max_output_bytes, wait) {
            Ok(lengths) => lengths,
            Err(error) => return Outcome::lost(error),
        };
        let header = &self.buf[PREFIX_LEN..PREFIX_LEN + header_len];
        let response = serde_json::from_slice::<Reply>(header).map(|reply| {
            self.cpu_before = Duration::from_micros(reply.cpu_us);
            reply.response
        });
        let outcome = match response {
            Ok(Response::Ok {
                note,
                title,
                author,
                date,
                pages,
                language,
            }) => match self.take_text(PREFIX_LEN + header_len, total) {
                Some(text) => Outcome {
                    result: Ok(Extracted {
                        text,
                        note,
                        // Cleaned again: the child's word is not trusted to be one line.
                        title: title.as_deref().and_then(clean_title),
                        author: author.as_deref().and_then(clean_title),
                        date: date.as_deref().and_then(clean_date),
                        pages,
                        language: language.as_deref().and_then(clean_language),
                    }),
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
    fn read_frame(&mut self, max_body: u64, wait: &mut Wait) -> Result<(usize, usize), ExtractError> {
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
    /// read or write then says how). Raised `stop` or a passed deadline kill the child. A
    /// deadline found passed still gets one look at the pipe first (a zero timeout): an
    /// answer the child left there is taken, whatever held the parent up meanwhile.
    fn wait_ready(&mut self, fd: RawFd, events: libc::c_short, wait: &mut Wait) -> Result<(), ExtractError> {
        loop {
            if wait.stop.load(Ordering::Relaxed) {
                self.kill_and_reap();
                return Err(ExtractError::Stopped);
            }
            let left = wait.left(Instant::now());
            let slice = left.min(SLICE);
            wait.sleeping(slice);
            match poll_once(fd, events, slice) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(error) => {
                    self.kill_and_reap();
                    return Err(ExtractError::Unavailable {
                        reason: format!("poll on the extraction child's pipe failed: {error}"),
                    });
                }
            }
            if left.is_zero() {
                return Err(self.overdue(wait.limit));
            }
        }
    }

    /// The deadline passed without an answer: see whether the child was stopped, kill it,
    /// and let `ending` weigh the CPU it had on the document.
    fn overdue(&mut self, limit: Duration) -> ExtractError {
        let mut stopped = false;
        if let Life::Running = self.life {
            match look(self.pid, libc::WUNTRACED) {
                Seen::Running => {}
                Seen::Stopped => stopped = true,
                // It died just as the deadline passed: that is what to explain.
                Seen::Ended(reaped) => {
                    self.life = Life::Reaped(reaped);
                    return self.died();
                }
                Seen::Gone => self.life = Life::Gone,
            }
        }
        self.kill_and_reap();
        ending::overdue(limit, stopped, self.cpu_on_document())
    }

    /// The CPU time the child used on the document in flight, once it is reaped.
    fn cpu_on_document(&self) -> Option<Duration> {
        match self.life {
            Life::Reaped(reaped) => Some(reaped.cpu.saturating_sub(self.cpu_before)),
            _ => None,
        }
    }

    fn kill_with(&mut self, error: ExtractError) -> Outcome {
        self.kill_and_reap();
        Outcome::lost(error)
    }

    /// The child closed its pipe or stopped reading: it is exiting or dead. Reap it (killing
    /// it if it lingers) and say why, from its wait status and the tail of its stderr.
    fn died(&mut self) -> ExtractError {
        let mut reaped = self.reap_within(REAP_BOUND);
        let lingered = reaped.is_none() && matches!(self.life, Life::Running);
        if lingered {
            self.kill_and_reap();
            reaped = match self.life {
                Life::Reaped(reaped) => Some(reaped),
                _ => None,
            };
        }
        let stderr = self.stderr.tail(TAIL_BOUND);
        let death = Death {
            status: reaped.map(|r| r.status),
            lingered,
            stderr: &stderr,
        };
        let budget = Budget {
            memory_bytes: self.config.memory_bytes,
            cpu_secs: self.cpu_secs,
        };
        ending::died(&death, &budget)
    }

    pub(super) fn kill_and_reap(&mut self) {
        if !matches!(self.life, Life::Running) {
            return;
        }
        // SAFETY: kill(2) on our child, which is not reaped yet, so its pid is still its own.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        if self.reap_within(REAP_BOUND).is_none() {
            self.abandon();
        }
    }

    /// Reaps the child if it ends within `bound`; its end, if known.
    fn reap_within(&mut self, bound: Duration) -> Option<Reaped> {
        let until = Instant::now() + bound;
        loop {
            match self.life {
                Life::Reaped(reaped) => return Some(reaped),
                Life::Gone => return None,
                Life::Running => {}
            }
            match look(self.pid, 0) {
                Seen::Ended(reaped) => self.life = Life::Reaped(reaped),
                Seen::Gone => self.life = Life::Gone,
                Seen::Running | Seen::Stopped if Instant::now() < until => {
                    thread::sleep(Duration::from_millis(2))
                }
                Seen::Running | Seen::Stopped => return None,
            }
        }
    }

    /// A child that outlived SIGKILL plus the bound (stuck in the kernel): a detached thread
    /// waits for it so it never stays a zombie, and nobody here waits any longer.
    fn abandon(&mut self) {
        if !matches!(self.life, Life::Running) {
            return;
        }
        let pid = self.pid;
        // SAFETY: kill(2) on our child, not reaped yet.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        self.life = Life::Gone;
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

/// One poll(2) of `fd` for `events`, up to `slice` (zero: just a look). Interrupted is
/// "not ready yet".
fn poll_once(fd: RawFd, events: libc::c_short, slice: Duration) -> io::Result<bool> {
    let mut pollfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = if slice.is_zero() {
        0
    } else {
        slice.as_millis().clamp(1, libc::c_int::MAX as u128) as libc::c_int
    };
    // SAFETY: one valid pollfd, for the duration of the call.
    match unsafe { libc::poll(&mut pollfd, 1, ms) } {
        ready if ready > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::Interrupted => Ok(false),
                _ => Err(error),
            }
        }
    }
}

/// The bounds on every wait for one document: the stop flag, and the deadline, which counts
/// only time the parent was there to watch.
struct Wait<'a> {
    deadline: Instant,
    limit: Duration,
    stop: &'a AtomicBool,
    /// When the parent last looked at the clock, and how long it then meant to sleep.
    looked: Instant,
    meant: Duration,
}

impl<'a> Wait<'a> {
    fn new(limit: Duration, stop: &'a AtomicBool) -> Self {
        let now = Instant::now();
        Wait {
            deadline: now + limit,
            limit,
            stop,
            looked: now,
            meant: Duration::ZERO,
        }
    }

    /// Time left before the deadline at `now`. Looking back more than [`STALL_GRACE`] later
    /// than meant is a stall of the parent's own (a stopped process, a suspended machine);
    /// the deadline moves out by all of it, so the document is not charged for time nobody
    /// watched, and the child, stopped with its parent or not, gets the rest of its time.
    fn left(&mut self, now: Instant) -> Duration {
        let late = now
            .saturating_duration_since(self.looked)
            .saturating_sub(self.meant);
        if late > STALL_GRACE {
            self.deadline += late;
        }
        self.looked = now;
        self.meant = Duration::ZERO;
        self.deadline.saturating_duration_since(now)
    }

    /// The parent is about to sleep up to `slice` for the child.
    fn sleeping(&mut self, slice: Duration) {
        self.meant = slice;
    }
}

fn protocol_error(what: &str) -> ExtractError {
    ExtractError::Crashed {
        reason: format!("the child sent {what}"),
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

    #[test]
    fn the_deadline_counts_only_time_the_parent_watched() {
        let stop = AtomicBool::new(false);
        let mut wait = Wait::new(Duration::from_secs(1), &stop);
        let start = wait.looked;
        let at = |ms: u64| start + Duration::from_millis(ms);
        // Slices that come back about on time are all charged.
        wait.sleeping(SLICE);
        assert_eq!(wait.left(at(60)), Duration::from_millis(940));
        wait.sleeping(SLICE);
        assert_eq!(wait.left(at(300)), Duration::from_millis(700));
        // Then the parent is stopped for 5 s in a 50 ms slice: only the slice is charged.
        wait.sleeping(SLICE);
        assert_eq!(wait.left(at(5350)), Duration::from_millis(650));
        // A deadline that passes while the parent watches is passed.
        wait.sleeping(Duration::from_millis(650));
        assert_eq!(wait.left(at(6000)), Duration::ZERO);
        assert_eq!(wait.left(at(6100)), Duration::ZERO);
    }
}
