//! How long writers waited for SQLite's write lock, kept in the store so that
//! `leasehold metrics`, run anywhere, sees every process's waits (the same
//! rule as the other figures: read from the store, not one process's memory).
//!
//! A wait is measured in [`super::tx`]: from a write transaction being
//! asked for (before the turnstile that takes processes in turn) to its
//! `BEGIN IMMEDIATE` holding the lock. Each handle adds its waits to a tally in
//! memory and folds it into the `meta` row [`META`] inside a write transaction
//! it runs anyway, at most once per [`FOLD_EVERY`], so the tally costs no
//! transaction of its own while work goes on; [`crate::Store::fold_write_waits`]
//! folds what is left (a command's end, each metrics refresh). A process killed
//! loses at most its last [`FOLD_EVERY`] of waits: figures, not records.
//!
//! PostgreSQL has no database-wide write lock (it locks rows), so nothing is
//! measured there.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// The `meta` row holding the tally.
pub(crate) const META: &str = "write_waits";

/// Upper bounds of the buckets, in seconds: from an uncontended lock (well
/// under a millisecond) to a neighbour stopped inside a transaction.
pub const WAIT_BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

/// How often a handle folds its waits into the store while it writes.
const FOLD_EVERY: Duration = Duration::from_secs(5);

/// The row's format tag; another tag (a later bucket layout) starts afresh.
const FORMAT: &str = "v1";

/// Waits counted per bucket (not cumulative), their number and their sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteWaits {
    /// Waits in each bucket of [`WAIT_BUCKETS`], then the ones above the last.
    pub buckets: [u64; WAIT_BUCKETS.len() + 1],
    /// Number of waits.
    pub count: u64,
    /// Their sum, in microseconds.
    pub sum_us: u64,
}

impl WriteWaits {
    /// Count one wait.
    pub(crate) fn add(&mut self, waited: Duration) {
        let secs = waited.as_secs_f64();
        let at = WAIT_BUCKETS
            .iter()
            .position(|le| secs <= *le)
            .unwrap_or(WAIT_BUCKETS.len());
        self.buckets[at] += 1;
        self.count += 1;
        self.sum_us = self
            .sum_us
            .saturating_add(waited.as_micros().min(u64::MAX as u128) as u64);
    }

    /// Both tallies together.
    fn plus(&self, other: &WriteWaits) -> WriteWaits {
        let mut out = self.clone();
        for (b, o) in out.buckets.iter_mut().zip(other.buckets) {
            *b = b.saturating_add(o);
        }
        out.count = out.count.saturating_add(other.count);
        out.sum_us = out.sum_us.saturating_add(other.sum_us);
        out
    }

    /// This tally less `other`, a part of it taken earlier.
    fn minus(&self, other: &WriteWaits) -> WriteWaits {
        let mut out = self.clone();
        for (b, o) in out.buckets.iter_mut().zip(other.buckets) {
            *b = b.saturating_sub(o);
        }
        out.count = out.count.saturating_sub(other.count);
        out.sum_us = out.sum_us.saturating_sub(other.sum_us);
        out
    }

    /// The row's text: `v1 COUNT SUM_US B0,B1,...`.
    fn to_text(&self) -> String {
        let buckets: Vec<String> = self.buckets.iter().map(u64::to_string).collect();
        format!("{FORMAT} {} {} {}", self.count, self.sum_us, buckets.join(","))
    }

    /// The row's text read back; anything else (another format, a damaged
    /// row) reads as no waits, so the tally starts afresh rather than failing
    /// the write it rides on.
    fn from_text(text: &str) -> WriteWaits {
        let mut parts = text.split(' ');
        let (Some(FORMAT), Some(count), Some(sum), Some(buckets), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return WriteWaits::default();
        };
        let mut out = WriteWaits::default();
        let read: Option<Vec<u64>> = buckets.split(',').map(|b| b.parse().ok()).collect();
        match (count.parse(), sum.parse(), read) {
            (Ok(count), Ok(sum_us), Some(read)) if read.len() == out.buckets.len() => {
                out.buckets.copy_from_slice(&read);
                out.count = count;
                out.sum_us = sum_us;
                out
            }
            _ => WriteWaits::default(),
        }
    }
}

/// The tally stored in `c`.
pub(crate) fn stored(c: &Connection) -> rusqlite::Result<WriteWaits> {
    Ok(super::meta::meta(c, META)?
        .as_deref()
        .map(WriteWaits::from_text)
        .unwrap_or_default())
}

/// One handle's waits not yet in the store.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    state: Mutex<PendingState>,
}

#[derive(Debug, Default)]
struct PendingState {
    waits: WriteWaits,
    folded_at: Option<Instant>,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, PendingState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count one wait.
    pub(crate) fn add(&self, waited: Duration) {
        self.lock().waits.add(waited);
    }

    /// What to fold in the transaction about to run: everything pending, if
    /// `always` or [`FOLD_EVERY`] has passed since the last fold and there is
    /// something to fold.
    pub(crate) fn due(&self, always: bool) -> Option<WriteWaits> {
        let s = self.lock();
        let due = always || s.folded_at.is_none_or(|t| t.elapsed() >= FOLD_EVERY);
        (due && s.waits.count > 0).then(|| s.waits.clone())
    }

    /// `folded` reached the store (its transaction committed): it is no
    /// longer pending. Waits added meanwhile stay.
    pub(crate) fn folded(&self, folded: &WriteWaits) {
        let mut s = self.lock();
        s.waits = s.waits.minus(folded);
        s.folded_at = Some(Instant::now());
    }
}

/// Add `waits` to the stored tally, in the caller's write transaction.
pub(crate) fn fold(tx: &Connection, waits: &WriteWaits) -> rusqlite::Result<()> {
    let total = stored(tx)?.plus(waits);
    tx.prepare_cached(
        "INSERT INTO meta (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    )?
    .execute([META, &total.to_text()])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_land_in_their_buckets_and_read_back() {
        let mut w = WriteWaits::default();
        w.add(Duration::from_micros(300));
        w.add(Duration::from_millis(3));
        w.add(Duration::from_secs(60));
        assert_eq!(w.buckets[0], 1);
        assert_eq!(w.buckets[1], 1);
        assert_eq!(w.buckets[WAIT_BUCKETS.len()], 1);
        assert_eq!(w.count, 3);
        assert_eq!(w.sum_us, 60_003_300);
        assert_eq!(WriteWaits::from_text(&w.to_text()), w);
        assert_eq!(w.plus(&w).minus(&w), w);
    }

    #[test]
    fn a_damaged_row_starts_afresh() {
        for bad in [
            "",
            "v1 1 2",
            "v2 1 2 0,0",
            "v1 x 2 0,0,0,0,0,0,0,0,0,0,0",
            "v1 1 2 0,0",
        ] {
            assert_eq!(WriteWaits::from_text(bad), WriteWaits::default(), "{bad:?}");
        }
    }

    #[test]
    fn only_what_was_folded_stops_being_pending() {
        let p = Pending::default();
        assert_eq!(p.due(true), None, "nothing to fold");
        p.add(Duration::from_millis(2));
        let taken = p.due(false).expect("a first fold is due at once");
        p.add(Duration::from_millis(20));
        p.folded(&taken);
        assert_eq!(p.due(false), None, "the next fold waits its turn");
        let rest = p.due(true).unwrap();
        assert_eq!((rest.count, rest.buckets[3]), (1, 1));
    }
}
