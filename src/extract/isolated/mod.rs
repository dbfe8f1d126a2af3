//! Extraction in supervised child processes (DESIGN.md §9).
//!
//! Parsers are the least trusted code in the process: a hostile document can overflow the
//! stack, allocate without bound, spin, or print onto stdout. [`IsolatedExtractor`] runs the
//! built-in [`ExtractorRegistry`](super::ExtractorRegistry) in a child process (the same
//! binary in a hidden mode, see [`child_main`]) under [`Limits`], and turns every way a child
//! can fail into a typed [`ExtractError`](super::ExtractError) for *that document*.
//!
//! # Layout
//! - `protocol`: length-prefixed frames; a small JSON header, the document or text raw.
//! - `child`: the child's side: clean protocol channel, quiet panics, rlimits, serve loop.
//! - `handle`: the parent's side of one child: bounded send/receive, kill, reap.
//! - `ending`: whose fault it was when a child's attempt ended without an answer.
//! - `capture`: the child's stderr, drained into a small ring buffer.
//!
//! # Failure
//! Only what the document provoked is charged to it (see `ending`). Deadline, memory, CPU
//! and output limits give [`ExtractError::Limit`](super::ExtractError); a child that dies of
//! its own fault gives `ExtractError::Crashed` with the cause (stack overflow, signal, exit
//! status) and at most three sanitised lines of its stderr. Both are permanent: the same
//! bytes would do the same again. An end from outside (a signal leasehold did not send, a
//! child found stopped or starved at its deadline) gives `ExtractError::Interrupted`, which
//! is retried. A parent that was itself stopped does not count the time it did not watch
//! against the deadline, and always takes an answer already waiting in the pipe. A raised
//! stop flag kills the child and gives `Stopped`; a child that cannot be started gives
//! `Unavailable` (not the document's fault). A parent that dies closes the child's request
//! pipe; the child finishes (bounded by its CPU limit) and exits on the next read.
//!
//! # Platforms
//! Children need unix: pipes polled without threads, `wait4`, rlimits. The memory limit
//! holds on Linux only (it reads `/proc/self/status`, and macOS does not enforce
//! `RLIMIT_AS`); deadline, CPU time and output cap hold on every unix. Elsewhere (Windows)
//! no child can start: every document is `Unavailable`, and the command line extracts in
//! its own process instead.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::{check_stop, ExtractError, Extracted, Extractor, ExtractorRegistry};

#[cfg(unix)]
mod capture;
#[cfg(unix)]
mod child;
#[cfg(unix)]
mod ending;
#[cfg(unix)]
mod handle;
#[cfg(unix)]
mod protocol;

#[cfg(unix)]
pub use child::{child_main, CHILD_ARG};
#[cfg(not(unix))]
use elsewhere::ChildHandle;
#[cfg(not(unix))]
pub use elsewhere::{child_main, CHILD_ARG};
#[cfg(unix)]
use handle::ChildHandle;

/// Where children cannot run (not unix): the same names, and no child ever starts.
#[cfg(not(unix))]
mod elsewhere {
    use std::convert::Infallible;
    use std::path::Path;
    use std::process::ExitCode;
    use std::sync::atomic::AtomicBool;

    use super::super::{ExtractError, Extracted};
    use super::Limits;

    /// The hidden first argument that turns `leasehold` into an extraction child.
    pub const CHILD_ARG: &str = "__extract-child";

    /// Entry point of the child mode: there is none here.
    pub fn child_main() -> ExitCode {
        eprintln!("extraction child: isolated extraction needs a unix system");
        ExitCode::from(2)
    }

    /// What one document did to its child.
    pub(super) struct Outcome {
        pub result: Result<Extracted, ExtractError>,
        pub reusable: bool,
    }

    /// A child that can never exist.
    pub(super) struct ChildHandle(Infallible);

    impl ChildHandle {
        pub(super) fn start(_: &Path, _: &Limits, _: &AtomicBool) -> Result<Self, ExtractError> {
            Err(ExtractError::Unavailable {
                reason: "isolated extraction needs a unix system; extract in-process instead".into(),
            })
        }

        pub(super) fn can_serve(&mut self) -> bool {
            match self.0 {}
        }

        pub(super) fn extract(&mut self, _: &str, _: &[u8], _: &Limits, _: &AtomicBool) -> Outcome {
            match self.0 {}
        }
    }
}

/// What one document may cost its child. The defaults suit a desktop or edge machine: a
/// minute of time, a gigabyte of memory. Deadline, CPU time and output cap apply per
/// document; memory, input size and stack are fixed when a child starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time from sending the document to having its text, measured by the
    /// parent, which kills the child when it passes. Starting a fresh child is not counted
    /// (it has its own bound of 10 s and fails as `Unavailable`). Default 60 s.
    pub deadline: Duration,
    /// Memory the parser may allocate, enforced with `RLIMIT_AS` in the child on top of the
    /// address space the child has mapped at start-up (binary, libraries, stacks). It also
    /// covers the child's copy of the document. Default 1 GiB.
    pub memory_bytes: u64,
    /// CPU time (user + system) for one document, enforced with `RLIMIT_CPU` in the child
    /// (whole seconds, rounded up; the child dies of SIGXCPU). Default 60 s.
    pub cpu_time: Duration,
    /// Largest extracted text accepted, in bytes. The child checks it, and the parent never
    /// reads more than this plus a small header. Default 64 MiB.
    pub max_output_bytes: u64,
    /// Largest document accepted, in bytes; bigger ones fail as `TooLarge` in the parent
    /// without reaching a child. Default: the registry's, 64 MiB.
    pub max_input_bytes: u64,
    /// Stack of the child's extraction thread: large, so that honest deeply nested documents
    /// parse, while a hostile one still overflows and is reported. Default 256 MiB (address
    /// space, reserved at start-up; only touched pages cost memory).
    pub stack_bytes: u64,
}

impl Limits {
    /// Wall-clock time one document may take: 60 s.
    pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);
    /// Address space of a child: 1 GiB.
    pub const DEFAULT_MEMORY_BYTES: u64 = 1 << 30;
    /// CPU time one document may take: 60 s.
    pub const DEFAULT_CPU_TIME: Duration = Duration::from_secs(60);
    /// Extracted text of one document: 64 MiB.
    pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 64 << 20;
    /// Stack of the child's extraction thread: 256 MiB.
    pub const DEFAULT_STACK_BYTES: u64 = 256 << 20;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Self::DEFAULT_DEADLINE,
            memory_bytes: Self::DEFAULT_MEMORY_BYTES,
            cpu_time: Self::DEFAULT_CPU_TIME,
            max_output_bytes: Self::DEFAULT_MAX_OUTPUT_BYTES,
            max_input_bytes: ExtractorRegistry::DEFAULT_MAX_INPUT_BYTES,
            stack_bytes: Self::DEFAULT_STACK_BYTES,
        }
    }
}

/// Which limit a document exceeded; carried by [`ExtractError::Limit`](super::ExtractError).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// The wall-clock deadline, as configured.
    Deadline(Duration),
    /// The memory budget: an allocation failed under `RLIMIT_AS`.
    Memory {
        /// The budget in bytes.
        bytes: u64,
    },
    /// The per-document CPU time, in whole seconds.
    CpuTime {
        /// The budget in seconds.
        secs: u64,
    },
    /// The cap on extracted text, in bytes.
    Output {
        /// The cap in bytes.
        cap: u64,
    },
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitKind::Deadline(limit) => write!(f, "extraction exceeded its {} deadline", Seconds(*limit)),
            LimitKind::Memory { bytes } => {
                write!(f, "extraction exceeded its memory limit of {}", Bytes(*bytes))
            }
            LimitKind::CpuTime { secs } => write!(f, "extraction exceeded its CPU time limit of {secs} s"),
            LimitKind::Output { cap } => write!(f, "extracted text over the {cap}-byte cap"),
        }
    }
}

/// How a child's attempt at a document ended from outside, not by the document's doing;
/// carried by [`ExtractError::Interrupted`](super::ExtractError), which is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    /// Killed by a signal leasehold did not send and the child's code does not raise itself:
    /// SIGKILL from an operator or the kernel's OOM killer, SIGTERM, SIGHUP, ...
    Signal(i32),
    /// Found stopped (SIGSTOP, SIGTSTP, a debugger) when its deadline passed; the parent
    /// killed it.
    Stopped {
        /// The deadline, as configured.
        deadline: Duration,
    },
    /// The deadline passed while the child had had little CPU: it was stopped for a while or
    /// starved by a busy machine, not running on the document.
    Starved {
        /// The deadline, as configured.
        deadline: Duration,
        /// The CPU time the child used on the document.
        cpu: Duration,
    },
}

/// The name of a signal (unix; there are none elsewhere).
fn signal_name(signal: i32) -> Option<&'static str> {
    #[cfg(unix)]
    return ending::signal_name(signal);
    #[cfg(not(unix))]
    return {
        let _ = signal;
        None
    };
}

impl fmt::Display for Interruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Interruption::Signal(signal) => match signal_name(*signal) {
                Some(name) => write!(
                    f,
                    "the child was killed by {name} (signal {signal}), which leasehold did not send"
                ),
                None => write!(
                    f,
                    "the child was killed by signal {signal}, which leasehold did not send"
                ),
            },
            Interruption::Stopped { deadline } => {
                write!(
                    f,
                    "the child was found stopped at its {} deadline",
                    Seconds(*deadline)
                )
            }
            Interruption::Starved { deadline, cpu } => write!(
                f,
                "the child had only {} of CPU by its {} deadline (stopped or starved)",
                Seconds(*cpu),
                Seconds(*deadline)
            ),
        }
    }
}

/// "60 s", or "200 ms" below a second or off the whole second.
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.subsec_nanos() == 0 {
            write!(f, "{} s", self.0.as_secs())
        } else {
            write!(f, "{} ms", self.0.as_millis())
        }
    }
}

/// "1 GiB", "256 MiB", or plain bytes when not a whole number of either.
struct Bytes(u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const GIB: u64 = 1 << 30;
        const MIB: u64 = 1 << 20;
        match self.0 {
            0 => write!(f, "0 bytes"),
            n if n % GIB == 0 => write!(f, "{} GiB", n / GIB),
            n if n % MIB == 0 => write!(f, "{} MiB", n / MIB),
            n => write!(f, "{n} bytes"),
        }
    }
}

/// An [`Extractor`] that runs the built-in registry in supervised children, one per
/// concurrent caller, reused across documents.
///
/// # Example
/// ```no_run
/// use leasehold::extract::{Extractor, IsolatedExtractor, Limits};
/// use std::sync::atomic::AtomicBool;
///
/// let program = std::env::current_exe().unwrap();
/// let extractor = IsolatedExtractor::new(program, Limits::default());
/// let text = extractor.extract("notes.txt", b"hello", &AtomicBool::new(false)).unwrap();
/// assert_eq!(text, "hello");
/// ```
/// The program must call [`child_main`] when its first argument is [`CHILD_ARG`].
pub struct IsolatedExtractor {
    /// The binary to start in child mode.
    program: PathBuf,
    limits: Limits,
    /// Children waiting for work. A call takes one (or starts one) and puts it back only
    /// after a clean answer, so N worker threads use at most N children and a child that
    /// crashed, was killed or hit a limit is never reused. This is a `std` mutex held only
    /// to push or pop: no I/O happens under it.
    idle: Mutex<Vec<ChildHandle>>,
}

impl IsolatedExtractor {
    /// No child starts here; the first document starts the first one.
    pub fn new(program: impl Into<PathBuf>, limits: Limits) -> Self {
        Self {
            program: program.into(),
            limits,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The program started as a child (the leasehold binary).
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The limits every document runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How many children are waiting for work (at most the number of callers that ran at
    /// once). For tests and status displays.
    pub fn idle_children(&self) -> usize {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// An idle live child, or a new one.
    fn take_child(&self, stop: &AtomicBool) -> Result<ChildHandle, ExtractError> {
        loop {
            let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
            match idle {
                Some(mut child) => {
                    if child.can_serve() {
                        return Ok(child);
                    }
                }
                None => break,
            }
        }
        ChildHandle::start(&self.program, &self.limits, stop)
    }
}

impl Extractor for IsolatedExtractor {
    fn extract(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
        self.extract_noted(name, bytes, stop).map(|done| done.text)
    }

    fn extract_noted(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<Extracted, ExtractError> {
        let size = bytes.len() as u64;
        if size > self.limits.max_input_bytes {
            return Err(ExtractError::TooLarge {
                size,
                limit: self.limits.max_input_bytes,
            });
        }
        check_stop(stop)?;
        let mut child = self.take_child(stop)?;
        let outcome = child.extract(name, bytes, &self.limits, stop);
        if outcome.reusable {
            self.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(child);
        }
        outcome.result
    }
}

impl Drop for IsolatedExtractor {
    /// Kills and reaps every idle child (each `ChildHandle` does so when dropped).
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(PoisonError::into_inner));
        drop(idle);
    }
}

impl fmt::Debug for IsolatedExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IsolatedExtractor")
            .field("program", &self.program)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_sentences() {
        let deadline = LimitKind::Deadline(Limits::DEFAULT_DEADLINE).to_string();
        assert_eq!(deadline, "extraction exceeded its 60 s deadline");
        let short = LimitKind::Deadline(Duration::from_millis(200)).to_string();
        assert_eq!(short, "extraction exceeded its 200 ms deadline");
        let memory = LimitKind::Memory { bytes: 256 << 20 }.to_string();
        assert_eq!(memory, "extraction exceeded its memory limit of 256 MiB");
        let output = LimitKind::Output { cap: 10 }.to_string();
        assert_eq!(output, "extracted text over the 10-byte cap");
    }

    #[test]
    fn oversized_input_and_raised_stop_never_start_a_child() {
        let limits = Limits {
            max_input_bytes: 4,
            ..Limits::default()
        };
        let extractor = IsolatedExtractor::new("/nonexistent/leasehold", limits);
        let err = extractor
            .extract("a.txt", b"12345", &AtomicBool::new(false))
            .unwrap_err();
        assert!(
            matches!(err, ExtractError::TooLarge { size: 5, limit: 4 }),
            "{err:?}"
        );
        let err = extractor
            .extract("a.txt", b"1", &AtomicBool::new(true))
            .unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err:?}");
    }

    #[test]
    fn a_program_that_cannot_start_is_unavailable_not_the_documents_fault() {
        let extractor = IsolatedExtractor::new("/nonexistent/leasehold", Limits::default());
        let err = extractor
            .extract("a.txt", b"1", &AtomicBool::new(false))
            .unwrap_err();
        assert!(matches!(err, ExtractError::Unavailable { .. }), "{err:?}");
        assert!(!err.is_permanent());
        assert!(err.to_string().contains("/nonexistent/leasehold"), "{err}");
    }
}
