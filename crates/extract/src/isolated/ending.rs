//! Whose fault it was when a child's attempt at a document ended without an answer
//! (DESIGN.md §9).
//!
//! The rule: a document is charged only for what it provoked. That is a fault its own code
//! raised (a signal the process raises on itself: SIGSEGV, SIGABRT, ...; Rust reports a stack
//! overflow and a failed allocation under the memory limit that way), the CPU limit
//! (SIGXCPU), or a deadline that passed while the child was really running on it. Anything
//! else came from outside: a signal leasehold did not send (SIGKILL from an operator or the
//! kernel's OOM killer, SIGTERM, ...), a child found stopped at its deadline, or a deadline
//! that passed while the child hardly ran (stopped for a while, or starved of CPU). Those are
//! [`ExtractError::Interrupted`]: an ordinary, retryable attempt.

use std::process::ExitStatus;
use std::time::Duration;

use super::capture::last_lines;
use leasehold::extract::ExtractError;
use leasehold::extract::{Interruption, LimitKind};

/// A child that ran on a CPU for at least this share of its deadline (1/N) was running on the
/// document when the deadline passed; below it, it was stopped or starved for most of it. A
/// tenth leaves room for a busy machine, where a child shares a CPU with several others (a
/// spinning child on this project's loaded 2-core test machine gets about a fifth).
const RUNNING_SHARE: u32 = 10;

/// How a child died while the parent waited for its answer.
pub(super) struct Death<'a> {
    /// Its wait status; `None` when it could not be reaped even after SIGKILL.
    pub status: Option<ExitStatus>,
    /// It closed its pipe but did not exit, so the parent killed it: the status is the
    /// parent's own SIGKILL.
    pub lingered: bool,
    /// The tail of its stderr.
    pub stderr: &'a str,
}

/// The limits that name a document's fault.
pub(super) struct Budget {
    pub memory_bytes: u64,
    pub cpu_secs: u64,
}

/// Names why a child died. The stderr text wins over the signal because Rust reports both a
/// stack overflow and a failed allocation by printing a line and then aborting (SIGABRT).
pub(super) fn died(death: &Death, budget: &Budget) -> ExtractError {
    use std::os::unix::process::ExitStatusExt;

    let lines = last_lines(death.stderr);
    let crashed = |what: String| ExtractError::Crashed {
        reason: if lines.is_empty() {
            what
        } else {
            format!("{what} (child stderr: {lines})")
        },
    };
    if death.stderr.contains("has overflowed its stack") {
        return crashed("stack overflow".into());
    }
    if death.stderr.contains("memory allocation of") && death.stderr.contains("failed") {
        return ExtractError::Limit {
            what: LimitKind::Memory {
                bytes: budget.memory_bytes,
            },
        };
    }
    if death.lingered {
        return crashed("closed its pipe but did not exit".into());
    }
    let Some(status) = death.status else {
        return crashed("did not exit after SIGKILL".into());
    };
    match (status.signal(), status.code()) {
        (Some(libc::SIGXCPU), _) => ExtractError::Limit {
            what: LimitKind::CpuTime {
                secs: budget.cpu_secs,
            },
        },
        (Some(signal), _) if raised_by_its_own_code(signal) => crashed(format!("killed by signal {signal}")),
        (Some(signal), _) => ExtractError::Interrupted {
            cause: Interruption::Signal(signal),
        },
        (None, Some(code)) => crashed(format!("exited with status {code}")),
        (None, None) => crashed("ended for an unknown reason".into()),
    }
}

/// Names a deadline that passed: the document's fault if the child was running on it, an
/// interruption if it was found stopped or had too little CPU (`cpu` is what it used on this
/// document; `None` when it could not be measured, which charges the document as before).
pub(super) fn overdue(deadline: Duration, stopped: bool, cpu: Option<Duration>) -> ExtractError {
    let cause = match cpu {
        _ if stopped => Interruption::Stopped { deadline },
        Some(cpu) if cpu * RUNNING_SHARE < deadline => Interruption::Starved { deadline, cpu },
        _ => {
            return ExtractError::Limit {
                what: LimitKind::Deadline(deadline),
            }
        }
    };
    ExtractError::Interrupted { cause }
}

/// Signals a process raises on itself by what its code does (a bad access, an abort, a
/// trap, a file size limit). Anyone may send them with kill(2), but nobody does in
/// practice; every other signal is taken to come from outside.
fn raised_by_its_own_code(signal: i32) -> bool {
    [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
        libc::SIGTRAP,
        libc::SIGSYS,
        libc::SIGXFSZ,
    ]
    .contains(&signal)
}

/// User plus system time of a `rusage`.
pub(super) fn cpu_of(usage: &libc::rusage) -> Duration {
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    const BUDGET: Budget = Budget {
        memory_bytes: 1 << 30,
        cpu_secs: 7,
    };

    fn killed_by(signal: i32, stderr: &str) -> ExtractError {
        let death = Death {
            status: Some(ExitStatus::from_raw(signal)),
            lingered: false,
            stderr,
        };
        died(&death, &BUDGET)
    }

    #[test]
    fn stack_overflow_is_named_from_stderr() {
        let stderr = "\nthread 'extract' has overflowed its stack\nfatal runtime error: stack overflow\n";
        let reason = killed_by(libc::SIGABRT, stderr).to_string();
        assert!(
            reason.starts_with("extractor crashed: stack overflow"),
            "{reason}"
        );
    }

    #[test]
    fn failed_allocation_is_the_memory_limit() {
        let error = killed_by(libc::SIGABRT, "memory allocation of 1073741824 bytes failed\n");
        assert_eq!(error.to_string(), "extraction exceeded its memory limit of 1 GiB");
        assert!(error.is_permanent());
    }

    #[test]
    fn faults_of_the_childs_own_code_are_the_documents() {
        let cpu = killed_by(libc::SIGXCPU, "");
        assert!(
            matches!(
                cpu,
                ExtractError::Limit {
                    what: LimitKind::CpuTime { secs: 7 }
                }
            ),
            "{cpu:?}"
        );
        for signal in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGABRT,
        ] {
            let error = killed_by(signal, "");
            assert!(
                matches!(error, ExtractError::Crashed { .. }),
                "{signal}: {error:?}"
            );
            assert!(error.is_permanent());
        }
        let segv = killed_by(libc::SIGSEGV, "junk\n").to_string();
        assert_eq!(
            segv,
            "extractor crashed: killed by signal 11 (child stderr: junk)"
        );
        let exit = Death {
            status: Some(ExitStatus::from_raw(2 << 8)),
            lingered: false,
            stderr: "",
        };
        assert_eq!(
            died(&exit, &BUDGET).to_string(),
            "extractor crashed: exited with status 2"
        );
    }

    #[test]
    fn signals_from_outside_are_retryable_interruptions() {
        for signal in [
            libc::SIGKILL,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGUSR1,
        ] {
            let error = killed_by(signal, "");
            assert!(
                matches!(error, ExtractError::Interrupted { cause: Interruption::Signal(s) } if s == signal),
                "{signal}: {error:?}"
            );
            assert!(!error.is_permanent(), "{error}");
        }
        assert_eq!(
            killed_by(libc::SIGKILL, "").to_string(),
            "extraction interrupted from outside, not the document's fault: \
             the child was killed by SIGKILL (signal 9), which leasehold did not send"
        );
    }

    #[test]
    fn a_child_that_lingered_after_closing_its_pipe_is_the_documents() {
        let death = Death {
            status: Some(ExitStatus::from_raw(libc::SIGKILL)),
            lingered: true,
            stderr: "",
        };
        let error = died(&death, &BUDGET);
        assert!(matches!(error, ExtractError::Crashed { .. }), "{error:?}");
    }

    #[test]
    fn a_deadline_is_the_documents_only_if_its_child_was_running() {
        let deadline = Duration::from_secs(60);
        let ran = |cpu: u64| overdue(deadline, false, Some(Duration::from_secs(cpu)));
        assert!(
            matches!(ran(6), ExtractError::Limit { what: LimitKind::Deadline(d) } if d == deadline),
            "{:?}",
            ran(6)
        );
        assert!(ran(60).is_permanent());
        let starved = ran(5);
        assert!(
            matches!(
                starved,
                ExtractError::Interrupted {
                    cause: Interruption::Starved { .. }
                }
            ),
            "{starved:?}"
        );
        assert!(!starved.is_permanent());
        assert!(
            starved
                .to_string()
                .ends_with("the child had only 5 s of CPU by its 60 s deadline (stopped or starved)"),
            "{starved}"
        );
        // Found stopped: outside, however long it had run before.
        let stopped = overdue(deadline, true, Some(deadline));
        assert!(
            matches!(
                stopped,
                ExtractError::Interrupted {
                    cause: Interruption::Stopped { .. }
                }
            ),
            "{stopped:?}"
        );
        assert!(stopped.to_string().contains("found stopped"), "{stopped}");
        // Not measured: charged, as a deadline always was.
        assert!(overdue(deadline, false, None).is_permanent());
    }
}
