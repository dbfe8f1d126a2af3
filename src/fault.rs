//! Crash points on the result path, for crash tests of the whole binary.
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
use std::sync::OnceLock;

/// The variable naming the crash point.
pub const CRASH_AT_ENV: &str = "LEASEHOLD_CRASH_AT";
/// The variable saying at which arrival (1-based) to crash.
pub const CRASH_AFTER_N_ENV: &str = "LEASEHOLD_CRASH_AFTER_N";
/// The exit status of a process that crashed at a crash point.
pub const CRASH_EXIT_CODE: i32 = 86;

/// A step on the result path after which a crash leaves a distinct on-disk state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrashPoint {
    /// The temp file holds the bytes, not yet fsynced.
    AfterTempWrite,
    /// The temp file is durable, not yet renamed.
    AfterFsync,
    /// The generation file has its final name; the directory is not yet fsynced.
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
    unsafe { libc::_exit(CRASH_EXIT_CODE) }
}

/// `PERCENT:MS`: before a fenced completion, stall MS milliseconds (heartbeat
/// and all, like a process frozen by the OS) in PERCENT of the calls. The soak
/// uses it to put workers to sleep in the one window the lease keeper cannot
/// watch, between the last stage and the completion, so that stale completions
/// really reach the store and are refused there.
pub const STALL_ENV: &str = "LEASEHOLD_STALL_BEFORE_COMPLETE";

static STALL: OnceLock<Option<(u32, u64)>> = OnceLock::new();

/// Stall here if a test asked for it (see [`STALL_ENV`]).
#[inline]
pub fn stall_point() {
    let stall = STALL.get_or_init(|| {
        let spec = std::env::var(STALL_ENV).ok()?;
        let (pct, ms) = spec.split_once(':')?;
        Some((pct.trim().parse().ok()?, ms.trim().parse().ok()?))
    });
    if let Some((pct, ms)) = *stall {
        if fastrand::u32(0..100) < pct {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
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
