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

use crate::stop::check_stop;
use leasehold::extract::{ExtractError, Extracted, Extractor, Limits};
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

    use leasehold::extract::Limits;
    use leasehold::extract::{ExtractError, Extracted};

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

/// An [`Extractor`] that runs the built-in registry in supervised children, one per
/// concurrent caller, reused across documents.
///
/// # Example
/// ```no_run
/// use leasehold_extract::{Extractor, IsolatedExtractor, Limits};
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

    /// The limits every document runs under, before its size's allowance
    /// ([`Limits::for_input`]).
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
        let outcome = child.extract(name, bytes, &self.limits.for_input(size), stop);
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
