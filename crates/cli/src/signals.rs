//! SIGINT (Ctrl-C) and SIGTERM (`kill`, systemd): both ask for the same
//! graceful stop, and the exit code says which one came (130 or 143, as shells
//! and service managers expect).
//!
//! Why our own code and not the `ctrlc` crate: `ctrlc` calls one handler with
//! no argument, and with its `termination` feature SIGTERM and SIGHUP call that
//! same handler, so the handler cannot tell SIGINT from SIGTERM. Telling them
//! apart takes only a self-pipe: the signal handler writes the signal's number
//! into a pipe (`write` is async-signal-safe), and an ordinary thread reads it
//! and does the real work, so no lock or allocation ever runs inside a handler.

use std::sync::atomic::{AtomicI32, Ordering};

/// A signal that asks leasehold to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Interrupt {
    /// Ctrl-C.
    #[serde(rename = "SIGINT")]
    Int,
    /// `kill PID`, systemd stopping a service.
    #[serde(rename = "SIGTERM")]
    Term,
}

impl Interrupt {
    /// 128 + the signal's number: what a shell reports for a program the
    /// signal ended.
    pub fn exit_code(self) -> u8 {
        match self {
            Interrupt::Int => 130,
            Interrupt::Term => 143,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Interrupt::Int => "SIGINT",
            Interrupt::Term => "SIGTERM",
        }
    }

    fn from_signal(sig: libc::c_int) -> Option<Interrupt> {
        match sig {
            libc::SIGINT => Some(Interrupt::Int),
            libc::SIGTERM => Some(Interrupt::Term),
            _ => None,
        }
    }
}

/// The write end of the self-pipe, read by the signal handler (-1: none yet).
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);

/// The signal handler: only an atomic load and one `write(2)`. A full pipe
/// (thousands of signals unread) drops the byte; the first ones already tell.
extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_WRITE.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = sig as u8;
        // SAFETY: write(2) on our own pipe with a one-byte stack buffer;
        // async-signal-safe. errno is saved and restored around it.
        unsafe {
            let errno = *libc::__errno_location();
            libc::write(fd, (&byte as *const u8).cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// From now on, SIGINT and SIGTERM call `act` on a thread of its own (once
/// per signal received) instead of ending the process. Installs at most once
/// per process; a later call does nothing. If the pipe or handler cannot be
/// set up, the signals keep their default action (the process ends), which is
/// said once on stderr.
pub fn catch(act: fn(Interrupt)) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Err(e) = install(act) {
            eprintln!("leasehold: cannot catch SIGINT/SIGTERM ({e}); a signal ends the process at once");
        }
    });
}

fn install(act: fn(Interrupt)) -> std::io::Result<()> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the two-int array we pass. Close-on-exec keeps the
    // pipe out of extraction children; the write end never blocks a handler.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [read_fd, write_fd] = fds;
    // The reader blocks: clear O_NONBLOCK on the read end only.
    // SAFETY: fcntl on a descriptor we just created.
    unsafe {
        let flags = libc::fcntl(read_fd, libc::F_GETFL);
        libc::fcntl(read_fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    PIPE_WRITE.store(write_fd, Ordering::SeqCst);
    std::thread::Builder::new()
        .name("leasehold-signals".into())
        .spawn(move || read_signals(read_fd, act))?;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with our handler, an empty mask and
        // SA_RESTART (interrupted reads and writes elsewhere resume).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The thread that turns bytes from the self-pipe into calls of `act`.
fn read_signals(read_fd: libc::c_int, act: fn(Interrupt)) {
    loop {
        let mut byte = 0u8;
        // SAFETY: read(2) of one byte into a stack buffer from our pipe.
        let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
        match n {
            1 => {
                if let Some(interrupt) = Interrupt::from_signal(libc::c_int::from(byte)) {
                    act(interrupt);
                }
            }
            -1 if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return,
        }
    }
}
