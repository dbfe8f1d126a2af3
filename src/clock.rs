//! Time, injected.
//!
//! Every time the store writes (lease expiry, retry_at, history) comes from a
//! [`Clock`] passed in at the top of a component, never from the system clock
//! deep inside SQL. Tests use [`ManualClock`] so that a lease expires because the
//! test said so, not because it slept.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (or since any fixed origin, for a manual clock).
pub type Millis = i64;

/// A source of "now" in integer milliseconds.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in milliseconds.
    fn now_ms(&self) -> Millis;
}

/// The wall clock. Leases across processes compare these values, so all
/// processes sharing a database must share one host clock (DESIGN §8).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        duration_ms(since)
    }
}

/// A clock that moves only when told to. Clones share the same time, so several
/// `Store` handles in one test can see one timeline.
#[derive(Debug, Default, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock that starts at `start_ms`.
    pub fn new(start_ms: Millis) -> Self {
        ManualClock {
            now: Arc::new(AtomicI64::new(start_ms)),
        }
    }

    /// Move time forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(duration_ms(by), Ordering::SeqCst);
    }

    /// Jump to `t_ms`; may go backwards (clock-jump tests need that).
    pub fn set(&self, t_ms: Millis) {
        self.now.store(t_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

/// The wall clock plus an offset read from a file on every call, so that a test
/// can jump the clock of several processes at once (forwards or backwards) by
/// rewriting one file. A missing or unreadable file means no offset.
#[derive(Debug, Clone)]
pub struct OffsetFileClock {
    path: std::path::PathBuf,
}

impl OffsetFileClock {
    /// A clock offset by the integer milliseconds written in `path`.
    pub fn new(path: impl Into<std::path::PathBuf>) -> Self {
        OffsetFileClock { path: path.into() }
    }
}

impl Clock for OffsetFileClock {
    fn now_ms(&self) -> Millis {
        let offset = std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(0);
        SystemClock.now_ms().saturating_add(offset)
    }
}

/// `ms` since the Unix epoch as RFC 3339 (UTC, whole seconds), for people.
pub fn rfc3339(ms: Millis) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A duration in whole milliseconds, saturating instead of overflowing.
pub fn duration_ms(d: Duration) -> Millis {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_time() {
        let a = ManualClock::new(5);
        let b = a.clone();
        assert_eq!(a.now_ms(), 5);
        a.advance(Duration::from_millis(10));
        assert_eq!(b.now_ms(), 15);
        b.set(3);
        assert_eq!(a.now_ms(), 3);
    }

    #[test]
    fn offset_file_clock_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("offset");
        let clock = OffsetFileClock::new(&path);
        let base = SystemClock.now_ms();
        assert!((clock.now_ms() - base).abs() < 60_000, "no file, no offset");
        std::fs::write(&path, "-3600000\n").unwrap();
        assert!(clock.now_ms() < base - 3_000_000);
        std::fs::write(&path, "7200000").unwrap();
        assert!(clock.now_ms() > base + 7_000_000);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
