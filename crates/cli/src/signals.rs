//! SIGINT (Ctrl-C) and SIGTERM (`kill`, systemd): both ask for the same
//! graceful stop, and the exit code says which one came (130 or 143, as shells
//! and service managers expect).
//!
//! Why not the `ctrlc` crate on unix: `ctrlc` calls one handler with no
//! argument, and with its `termination` feature SIGTERM and SIGHUP call that
//! same handler, so the handler cannot tell SIGINT from SIGTERM.
//! `signal-hook`'s iterator can: its handler writes into a self-pipe (saving
//! errno, on every unix), and an ordinary thread reads which signal came and
//! does the real work, so no lock or allocation ever runs inside a handler.
//! That is what our own handler did, for glibc only.
//!
//! On Windows, Ctrl-C and Ctrl-Break (the `ctrlc` crate's console handler)
//! ask for the same graceful stop as SIGINT.

/// A signal that asks leasehold to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Interrupt {
    /// Ctrl-C.
    #[serde(rename = "SIGINT")]
    Int,
    /// `kill PID`, systemd stopping a service (Windows has no such signal:
    /// Ctrl-C and Ctrl-Break both arrive as `Int`).
    #[serde(rename = "SIGTERM")]
    #[cfg_attr(windows, allow(dead_code))]
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

    #[cfg(unix)]
    fn from_signal(sig: libc::c_int) -> Option<Interrupt> {
        match sig {
            libc::SIGINT => Some(Interrupt::Int),
            libc::SIGTERM => Some(Interrupt::Term),
            _ => None,
        }
    }
}

/// From now on, SIGINT and SIGTERM (on Windows Ctrl-C and Ctrl-Break) call
/// `act` on a thread of its own (once per signal received) instead of ending
/// the process. Installs at most once per process; a later call does nothing.
/// If the handler cannot be set up, the signals keep their default action
/// (the process ends), which is said once on stderr.
pub fn catch(act: fn(Interrupt)) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Err(e) = install(act) {
            eprintln!("leasehold: cannot catch SIGINT/SIGTERM ({e}); a signal ends the process at once");
        }
    });
}

#[cfg(unix)]
fn install(act: fn(Interrupt)) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM])?;
    std::thread::Builder::new()
        .name("leasehold-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if let Some(interrupt) = Interrupt::from_signal(sig) {
                    act(interrupt);
                }
            }
        })?;
    Ok(())
}

#[cfg(windows)]
fn install(act: fn(Interrupt)) -> std::io::Result<()> {
    ctrlc::set_handler(move || act(Interrupt::Int)).map_err(std::io::Error::other)
}

#[cfg(not(any(unix, windows)))]
fn install(_act: fn(Interrupt)) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "no signals here",
    ))
}
