//! What the benches that time the real binary share.

use std::process::{Command, Stdio};

#[allow(dead_code)]
pub mod tree;
use std::time::{Duration, Instant};

/// What one child process cost, as the kernel counted it when it was reaped.
#[derive(Clone, Copy)]
pub struct Reaped {
    pub wall: Duration,
    /// CPU of every process the child waited for too (extractor children,
    /// converters), not only its own.
    pub user: Duration,
    pub sys: Duration,
    /// KiB, the largest single process among them.
    pub peak_rss_kib: u64,
    /// The wait status.
    pub status: i32,
}

impl Reaped {
    /// Whether the child exited (was not killed) with status `code`.
    pub fn exited_with(&self, code: i32) -> bool {
        libc::WIFEXITED(self.status) && libc::WEXITSTATUS(self.status) == code
    }
}

/// Spawns `cmd` (stdin closed, `out` and `err` as given) and waits for it
/// with `wait4`, which gives the CPU time of the whole tree it reaped and its
/// largest RSS.
#[expect(
    clippy::zombie_processes,
    reason = "the child is reaped by wait4, which std's Child::wait cannot replace: it gives no rusage"
)]
pub fn run_reaped(cmd: &mut Command, out: Stdio, err: Stdio) -> Reaped {
    let start = Instant::now();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is a plain struct we own; wait4 fills it and keeps no pointer.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own child, not yet reaped (Child is never waited on).
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    assert_eq!(rc, pid, "wait4 on {cmd:?}: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Reaped {
        wall,
        user: tv(usage.ru_utime),
        sys: tv(usage.ru_stime),
        peak_rss_kib: usage.ru_maxrss.max(0) as u64,
        status,
    }
}
