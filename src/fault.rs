//! Crash points on the result path, for crash tests of the whole binary, and
//! stop points ([`StopPoint`]) where a process stops itself for tests of a
//! paused neighbour.
//!
//! A test sets `LEASEHOLD_CRASH_AT` to one of [`CrashPoint::ALL`]'s names (and
//! optionally `LEASEHOLD_CRASH_AFTER_N=k`, default 1) in a child process's
//! environment; the k-th time that process reaches the named point it ends at
//! once with exit status [`CRASH_EXIT_CODE`], through `_exit`: no destructors,
//! no buffered output flushed, no SQLite rollback or checkpoint, no lock released
//! other than by the kernel. That is as close to `kill -9` at a chosen instruction
//! as a test can get, and it is deterministic.
//!
//! The variables are read once per process (a `OnceLock`); when they are unset a
//! crash point costs one atomic load. A value that cannot be parsed is reported
//! once on stderr and leaves the hook inert, so a typo shows up as "did not
//! crash" in the test instead of silently changing behaviour.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The variable naming the crash point.
pub const CRASH_AT_ENV: &str = "LEASEHOLD_CRASH_AT";
/// The variable saying at which arrival (1-based) to crash.
pub const CRASH_AFTER_N_ENV: &str = "LEASEHOLD_CRASH_AFTER_N";
/// The exit status of a process that crashed at a crash point.
pub const CRASH_EXIT_CODE: i32 = 86;

/// A step on the result path after which a crash leaves a distinct on-disk state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrashPoint {
    /// The temp file holds the bytes, not yet fsynced nor renamed.
    AfterTempWrite,
    /// The generation file has its final name and its bytes are durable (its
    /// sync round waited for them); the directory is not yet fsynced.
    AfterFsync,
    /// The generation file has its final name, nothing of it durable yet.
    AfterRename,
    /// The generation file is durable; the store knows nothing of it yet.
    AfterDirFsync,
    /// The store accepted the completion; the document's cleanup has not run.
    AfterCommit,
    /// An outbox batch got its 2xx from the sink; its rows are not yet removed.
    AfterDelivery,
}

impl CrashPoint {
    /// Every crash point, in the order the result path reaches them (the last
    /// only when results are delivered to a sink).
    pub const ALL: [CrashPoint; 6] = [
        CrashPoint::AfterTempWrite,
        CrashPoint::AfterFsync,
        CrashPoint::AfterRename,
        CrashPoint::AfterDirFsync,
        CrashPoint::AfterCommit,
        CrashPoint::AfterDelivery,
    ];

    /// The name `LEASEHOLD_CRASH_AT` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            CrashPoint::AfterTempWrite => "after_temp_write",
            CrashPoint::AfterFsync => "after_fsync",
            CrashPoint::AfterRename => "after_rename",
            CrashPoint::AfterDirFsync => "after_dir_fsync",
            CrashPoint::AfterCommit => "after_commit",
            CrashPoint::AfterDelivery => "after_delivery",
        }
    }

    /// The point named `name`, if any.
    pub fn from_name(name: &str) -> Option<CrashPoint> {
        CrashPoint::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

/// The armed crash point of this process and how often it has been reached.
struct Armed {
    point: CrashPoint,
    at: u64,
    reached: AtomicU64,
}

static ARMED: OnceLock<Option<Armed>> = OnceLock::new();

fn armed() -> Option<&'static Armed> {
    ARMED.get_or_init(read_env).as_ref()
}

fn read_env() -> Option<Armed> {
    let name = std::env::var(CRASH_AT_ENV).ok()?;
    let Some(point) = CrashPoint::from_name(name.trim()) else {
        eprintln!("leasehold: ignoring {CRASH_AT_ENV}={name:?}: not a crash point");
        return None;
    };
    let at = match std::env::var(CRASH_AFTER_N_ENV) {
        Err(_) => 1,
        Ok(n) => match n.trim().parse::<u64>() {
            Ok(k) if k >= 1 => k,
            _ => {
                eprintln!(
                    "leasehold: ignoring {CRASH_AT_ENV}: {CRASH_AFTER_N_ENV}={n:?} is not a count >= 1"
                );
                return None;
            }
        },
    };
    Some(Armed {
        point,
        at,
        reached: AtomicU64::new(0),
    })
}

/// Mark that `point` was reached; end the process here if a test armed it.
#[inline]
pub fn crash_point(point: CrashPoint) {
    let Some(armed) = armed() else { return };
    if armed.point != point || armed.reached.fetch_add(1, Ordering::SeqCst) + 1 != armed.at {
        return;
    }
    eprintln!(
        "leasehold: crash point {} reached ({CRASH_AT_ENV}), exiting {CRASH_EXIT_CODE}",
        point.as_str()
    );
    // SAFETY: _exit(2) takes no pointers and never returns; skipping destructors
    // and atexit handlers is the point.
    #[cfg(unix)]
    unsafe {
        libc::_exit(CRASH_EXIT_CODE)
    }
    // Elsewhere the nearest: no destructors of ours run, the C runtime's handlers do.
    #[cfg(not(unix))]
    std::process::exit(CRASH_EXIT_CODE)
}

/// The variable naming a stop point: the process stops itself (SIGSTOP) there,
/// holding whatever it holds, until someone sends it SIGCONT. Tests of a paused
/// neighbour use it to stop a process at exactly its worst moment.
pub const STOP_AT_ENV: &str = "LEASEHOLD_STOP_AT";
/// The variable saying at which arrival (1-based) to stop; default 1.
pub const STOP_AFTER_N_ENV: &str = "LEASEHOLD_STOP_AFTER_N";

/// A place where a stopped process costs its neighbours the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopPoint {
    /// Just after taking the turnstile's `next` lock, outside any SQLite
    /// transaction: every other writer waits for this process's turn.
    HoldingTurnstileNext,
    /// A mirror write holds its document's lock (shared), before the temp
    /// file exists: a cleanup or `gc` of that document waits for it.
    WriteLockHeld,
}

impl StopPoint {
    /// Every stop point.
    pub const ALL: [StopPoint; 2] = [StopPoint::HoldingTurnstileNext, StopPoint::WriteLockHeld];

    /// The name `LEASEHOLD_STOP_AT` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            StopPoint::HoldingTurnstileNext => "holding_turnstile_next",
            StopPoint::WriteLockHeld => "write_lock_held",
        }
    }
}

struct ArmedStop {
    point: StopPoint,
    at: u64,
    reached: AtomicU64,
}

static ARMED_STOP: OnceLock<Option<ArmedStop>> = OnceLock::new();

fn read_stop_env() -> Option<ArmedStop> {
    let name = std::env::var(STOP_AT_ENV).ok()?;
    let Some(point) = StopPoint::ALL.into_iter().find(|p| p.as_str() == name.trim()) else {
        eprintln!("leasehold: ignoring {STOP_AT_ENV}={name:?}: not a stop point");
        return None;
    };
    let at = match std::env::var(STOP_AFTER_N_ENV) {
        Err(_) => 1,
        Ok(n) => match n.trim().parse::<u64>() {
            Ok(k) if k >= 1 => k,
            _ => {
                eprintln!("leasehold: ignoring {STOP_AT_ENV}: {STOP_AFTER_N_ENV}={n:?} is not a count >= 1");
                return None;
            }
        },
    };
    Some(ArmedStop {
        point,
        at,
        reached: AtomicU64::new(0),
    })
}

/// Mark that `point` was reached; stop the whole process here (SIGSTOP) if a
/// test armed it. It goes on from here when continued.
#[inline]
pub fn stop_point(point: StopPoint) {
    let Some(armed) = ARMED_STOP.get_or_init(read_stop_env).as_ref() else {
        return;
    };
    if armed.point != point || armed.reached.fetch_add(1, Ordering::SeqCst) + 1 != armed.at {
        return;
    }
    eprintln!(
        "leasehold: stop point {} reached ({STOP_AT_ENV}), stopping",
        point.as_str()
    );
    // SAFETY: raise(3) takes no pointers; SIGSTOP cannot be caught, so this
    // stops every thread of the process until SIGCONT. (No such thing on Windows.)
    #[cfg(unix)]
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}

/// `PERCENT:MS`: before a fenced completion, stall MS milliseconds (heartbeat
/// and all, like a process frozen by the OS) in PERCENT of the calls. The soak
/// uses it to put workers to sleep in the one window the lease keeper cannot
/// watch, between the last stage and the completion, so that stale completions
/// really reach the store and are refused there.
pub const STALL_ENV: &str = "LEASEHOLD_STALL_BEFORE_COMPLETE";

static STALL: OnceLock<Option<(u32, u64)>> = OnceLock::new();

/// When the stall under way ends: a stall freezes the whole process, so the
/// worker's other thread waits it out too ([`wait_out_stall`]).
static STALLED_UNTIL: Mutex<Option<Instant>> = Mutex::new(None);

fn stall_spec() -> Option<(u32, u64)> {
    *STALL.get_or_init(|| {
        let spec = std::env::var(STALL_ENV).ok()?;
        let (pct, ms) = spec.split_once(':')?;
        Some((pct.trim().parse().ok()?, ms.trim().parse().ok()?))
    })
}

/// Stall here if a test asked for it (see [`STALL_ENV`]).
#[inline]
pub fn stall_point() {
    if let Some((pct, ms)) = stall_spec() {
        if fastrand::u32(0..100) < pct {
            let pause = Duration::from_millis(ms);
            *STALLED_UNTIL.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + pause);
            std::thread::sleep(pause);
        }
    }
}

/// Wait while another thread of this process is stalled at [`stall_point`]:
/// a frozen process claims nothing and renews nothing either. Without it, a
/// worker's stager would take over the very lease its stalled finisher let
/// run out, and its heartbeat would keep that lease alive.
#[inline]
pub fn wait_out_stall() {
    if stall_spec().is_none() {
        return;
    }
    loop {
        let until = *STALLED_UNTIL.lock().unwrap_or_else(|p| p.into_inner());
        match until.map(|t| t.saturating_duration_since(Instant::now())) {
            Some(left) if !left.is_zero() => std::thread::sleep(left),
            _ => return,
        }
    }
}

/// Set (to anything) in the environment of a process whose extraction children
/// should act out the fault a document names in its first bytes, written
/// `LEASEHOLD-FAULT:` then `overflow`, `alloc`, `spin`, `abort` or `print`. Tests of the
/// supervisor use it to make a child overflow its stack, exhaust its memory,
/// spin, abort, or print junk on demand, whatever today's parsers survive. The
/// variable is inherited by the children; unset, the check is one lookup.
///
/// Three more make a healthy document slow, for tests of what happens to it
/// from outside (a child killed or stopped mid-document): `sleep MS` sleeps MS
/// milliseconds; `hold-once MS PATH` does so, and `busy-once MS PATH` runs MS
/// milliseconds of CPU time, only in the first child that creates the file
/// PATH (holding that child's pid, so the test knows whom to signal). All
/// three then extract the document as usual.
pub const CHILD_FAULT_ENV: &str = "LEASEHOLD_TEST_CHILD_FAULT";

/// The marker a fault document starts with.
pub const CHILD_FAULT_MARKER: &[u8] = b"LEASEHOLD-FAULT:";

static CHILD_FAULTS: OnceLock<bool> = OnceLock::new();

/// In an extraction child: act out the fault `bytes` names, if a test armed it.
/// `print` writes junk on both output streams and returns; the others never return.
pub fn child_fault(bytes: &[u8]) {
    if !*CHILD_FAULTS.get_or_init(|| std::env::var_os(CHILD_FAULT_ENV).is_some()) {
        return;
    }
    let Some(rest) = bytes.strip_prefix(CHILD_FAULT_MARKER) else {
        return;
    };
    let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut words = line.splitn(3, |&b| b == b' ');
    let name = words.next().unwrap_or_default().trim_ascii();
    match name {
        b"sleep" => sleep_ms(words.next()),
        b"hold-once" | b"busy-once" => {
            let ms = words.next();
            if !words
                .next()
                .is_some_and(|path| first_to_create(path.trim_ascii()))
            {
                return;
            }
            match name {
                b"hold-once" => sleep_ms(ms),
                _ => busy_ms(ms),
            }
        }
        b"overflow" => {
            std::hint::black_box(recurse(0));
        }
        b"alloc" => {
            // Far over any memory limit a test sets: fails under RLIMIT_AS.
            let v = vec![1u8; 1 << 40];
            std::hint::black_box(v);
        }
        b"spin" => loop {
            std::hint::black_box(fastrand::u64(..));
        },
        b"abort" => std::process::abort(),
        b"print" => {
            println!("junk a parser printed on stdout");
            eprintln!("junk a parser printed on stderr");
        }
        _ => {}
    }
}

/// Sleeps the milliseconds `ms` spells (nothing if it spells no number).
fn sleep_ms(ms: Option<&[u8]>) {
    let ms = ms.and_then(|ms| std::str::from_utf8(ms).ok()?.trim().parse().ok());
    std::thread::sleep(Duration::from_millis(ms.unwrap_or(0)));
}

/// Runs the milliseconds of CPU time `ms` spells: the time counts only while
/// this thread is on a CPU, so a stop or a starved machine makes it last longer.
fn busy_ms(ms: Option<&[u8]>) {
    let ms: u64 = ms
        .and_then(|ms| std::str::from_utf8(ms).ok()?.trim().parse().ok())
        .unwrap_or(0);
    #[cfg(not(unix))]
    let cpu_ns = {
        // No thread CPU clock through std: wall-clock time stands in.
        let start = std::time::Instant::now();
        move || start.elapsed().as_nanos() as u64
    };
    #[cfg(unix)]
    let cpu_ns = || {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the struct we pass.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    };
    let until = cpu_ns() + ms * 1_000_000;
    while cpu_ns() < until {
        std::hint::black_box(fastrand::u64(..));
    }
}

/// Creates the file `path` holding this process's pid; false if it was there.
fn first_to_create(path: &[u8]) -> bool {
    use std::io::Write;
    let Ok(path) = std::str::from_utf8(path) else {
        return false;
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(mut file) => {
            let _ = write!(file, "{}", std::process::id());
            true
        }
        Err(_) => false,
    }
}

/// Recursion that no optimiser can turn into a loop: every frame keeps a buffer
/// alive across the call. It ends only by overflowing the stack, on purpose.
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 32]);
    recurse(depth + 1).wrapping_add(frame[depth as usize % 32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in CrashPoint::ALL {
            assert_eq!(CrashPoint::from_name(p.as_str()), Some(p));
        }
        assert_eq!(CrashPoint::from_name("after_lunch"), None);
    }

    #[test]
    fn unarmed_points_are_inert() {
        // The unit-test process never sets the variable.
        if std::env::var_os(CRASH_AT_ENV).is_none() {
            for p in CrashPoint::ALL {
                crash_point(p);
            }
        }
    }
}
