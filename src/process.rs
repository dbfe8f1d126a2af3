//! Commands leasehold runs on the user's behalf (a notify command, an external
//! converter), kept on a leash: each gets a process group of its own, so that
//! killing it kills what it started too (`sh -c 'curl ...'` leaves `curl`
//! behind if only `sh` dies); waiting for it is bounded by a deadline (and, for
//! extraction, by a stop flag); and however it ends, it is reaped.
//!
//! On Windows a command gets a process group of its own too
//! (`CREATE_NEW_PROCESS_GROUP`), but killing it ends only the command itself,
//! not what it started, and there are no resource limits: the deadline still
//! kills it.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How a bounded wait ended. Except for `Exited`, the command has been killed
/// with its group and reaped.
#[derive(Debug)]
pub enum Waited {
    /// It ended on its own.
    Exited(ExitStatus),
    /// The deadline passed first.
    TimedOut,
    /// The stop flag was raised first.
    Stopped,
    /// Waiting itself failed.
    Failed(std::io::Error),
}

/// Give the command a process group of its own.
pub fn own_group(cmd: &mut Command) -> &mut Command {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0)
    }
    #[cfg(windows)]
    {
        use std::os::windows::process::CommandExt;
        /// `CREATE_NEW_PROCESS_GROUP`: Ctrl-C in our console does not reach it.
        const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
        cmd.creation_flags(CREATE_NEW_PROCESS_GROUP)
    }
    #[cfg(not(any(unix, windows)))]
    cmd
}

/// Wait for `child` until `deadline` or until `stop` is raised, polling with
/// pauses that grow from 1 ms to 50 ms: quick commands cost little latency,
/// long ones little CPU, and a hung one cannot outlive the deadline.
pub fn wait_bounded(child: &mut Child, deadline: Instant, stop: Option<&AtomicBool>) -> Waited {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Waited::Exited(status),
            Ok(None) => {}
            Err(e) => {
                kill_group(child);
                return Waited::Failed(e);
            }
        }
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            kill_group(child);
            return Waited::Stopped;
        }
        let now = Instant::now();
        if now >= deadline {
            kill_group(child);
            return Waited::TimedOut;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// How feeding a command's standard input ended.
#[derive(Debug)]
pub enum Fed {
    /// Everything was written (or the command closed its input early, which
    /// is its own business: its exit status tells whether it was content).
    Done,
    /// The command did not take it all before the deadline.
    TimedOut,
    /// Writing failed.
    Failed(std::io::Error),
}

/// Write `data` to a command's standard input and close it, never blocking
/// past `deadline`: a command that never reads its input cannot hold the
/// caller (a blocking write would wait for it forever once the pipe is full).
#[cfg(unix)]
pub fn feed_stdin(mut stdin: ChildStdin, data: &[u8], deadline: Instant) -> Fed {
    if let Err(e) = set_nonblocking(&stdin) {
        return Fed::Failed(e);
    }
    let mut rest = data;
    let mut pause = Duration::from_millis(1);
    while !rest.is_empty() {
        match stdin.write(rest) {
            Ok(0) => return Fed::Done,
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Fed::Done,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let now = Instant::now();
                if now >= deadline {
                    return Fed::TimedOut;
                }
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Fed::Failed(e),
        }
    }
    Fed::Done
}

/// Without non-blocking pipes (Windows), the writing happens on a thread of its own and
/// the caller waits for it until `deadline`; a command that never reads keeps that thread
/// blocked until the caller kills it, which breaks the pipe and ends the thread.
#[cfg(not(unix))]
pub fn feed_stdin(mut stdin: ChildStdin, data: &[u8], deadline: Instant) -> Fed {
    let data = data.to_vec();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let written = stdin.write_all(&data);
        drop(stdin);
        let _ = tx.send(written);
    });
    match rx.recv_deadline(deadline) {
        Ok(Ok(())) => Fed::Done,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Fed::Done,
        Ok(Err(e)) => Fed::Failed(e),
        Err(_) => Fed::TimedOut,
    }
}

#[cfg(unix)]
fn set_nonblocking(stdin: &ChildStdin) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = stdin.as_raw_fd();
    // SAFETY: fcntl on a pipe descriptor we own; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Kill the command's process group (made by [`own_group`]) and reap it, so no
/// zombie is left.
pub fn kill_group(child: &mut Child) {
    #[cfg(unix)]
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid signals the process group we
        // created; it touches no memory of ours.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The type of a resource number for `setrlimit`: glibc has its own, musl and
/// the other unix systems take a C `int`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub type Resource = libc::__rlimit_resource_t;
/// The type of a resource number for `setrlimit`.
#[cfg(all(unix, not(all(target_os = "linux", target_env = "gnu"))))]
pub type Resource = libc::c_int;

/// Set a resource limit of this process (`soft` and `hard`). Async-signal-safe,
/// so a command may call it between fork and exec.
#[cfg(unix)]
pub fn set_limit(resource: Resource, soft: u64, hard: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: setrlimit only reads the plain struct passed by reference.
    if unsafe { libc::setrlimit(resource, &limit) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A `kB` figure of this process from `/proc/self/status` (e.g. `VmHWM`,
/// `VmSize`), in bytes; `None` without `/proc` (every system but Linux).
#[cfg(not(target_os = "linux"))]
pub fn status_bytes(_field: &str) -> Option<u64> {
    None
}

/// A `kB` figure of this process from `/proc/self/status` (e.g. `VmHWM`,
/// `VmSize`), in bytes.
#[cfg(target_os = "linux")]
pub fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// How a command ended, for a person: its exit status or its signal.
pub fn describe_exit(status: ExitStatus) -> String {
    #[cfg(unix)]
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    #[cfg(not(unix))]
    let signal: Option<i32> = None;
    match (status.code(), signal) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => format!("ended with {status}"),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::process::Stdio;

    fn sh(script: &str) -> Child {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]).stdout(Stdio::null());
        own_group(&mut cmd).spawn().unwrap()
    }

    #[test]
    fn a_quick_command_exits_and_a_hung_one_is_killed_with_its_group() {
        let mut quick = sh("exit 3");
        let far = Instant::now() + Duration::from_secs(30);
        match wait_bounded(&mut quick, far, None) {
            Waited::Exited(status) => assert_eq!(describe_exit(status), "exited with status 3"),
            other => panic!("{other:?}"),
        }
        let started = Instant::now();
        let mut hung = sh("sleep 30 & sleep 30");
        let soon = Instant::now() + Duration::from_millis(200);
        assert!(matches!(wait_bounded(&mut hung, soon, None), Waited::TimedOut));
        assert!(started.elapsed() < Duration::from_secs(10));
        let mut stopped = sh("sleep 30");
        let stop = AtomicBool::new(true);
        assert!(matches!(
            wait_bounded(&mut stopped, far, Some(&stop)),
            Waited::Stopped
        ));
    }
}
