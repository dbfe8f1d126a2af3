//! Fair turns at the SQLite write lock across processes, that no stopped or
//! hostile process can hold up for more than a short, bounded delay.
//!
//! Two `flock` files beside the database (`<db>-next`, `<db>-write`) make
//! writers take turns; SQLite's own lock stays the single source of
//! exclusion, so leaving the line is always safe, only less fair. A wait is
//! polled, asks the kernel who holds a lock once it goes on, and detours to a
//! second lane around a stopped or hostile holder. Why, and the measurements
//! behind each bound: DESIGN §7, "The turnstile".

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::holder;
use crate::fault::{stop_point, StopPoint};

/// Lane 0 and one detour lane.
const LANES: usize = 2;

/// The bounds of every wait in the turnstile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// How long a wait goes on before the waiter asks who holds the lock.
    pub ask_after: Duration,
    /// How often it asks again while it keeps waiting.
    pub ask_every: Duration,
    /// The longest wait for a turn in one lane, whoever holds it.
    pub give_up: Duration,
    /// The longest wait while the line moves.
    pub sqlite_cap: Duration,
    /// The detour away from lane 0 after its holder was found stopped: short,
    /// since finding that out again costs only `ask_after`, and once the
    /// holder is continued everyone should be back in one line soon.
    pub stopped_detour: Duration,
    /// The first detour after a wait timed out.
    pub detour: Duration,
    /// The longest detour, after lane 0's waits timed out several times in a row.
    pub max_detour: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            ask_after: Duration::from_millis(2),
            ask_every: Duration::from_millis(10),
            give_up: Duration::from_secs(1),
            sqlite_cap: Duration::from_secs(5),
            stopped_detour: Duration::from_millis(250),
            detour: Duration::from_secs(1),
            max_detour: Duration::from_secs(8),
        }
    }
}

/// One pair of lock files.
struct Lane {
    next: File,
    write: File,
}

/// Where this process takes its turns at the moment.
#[derive(Debug, Default)]
struct Route {
    /// The lane to start from (`LANES`: none, SQLite alone) until `until`.
    lane: usize,
    until: Option<Instant>,
    /// Timed-out waits for lane 0 in a row: each doubles the next detour.
    strikes: u32,
}

impl Route {
    fn first_lane(&mut self, now: Instant) -> usize {
        match self.until {
            Some(until) if now < until => self.lane,
            _ => {
                self.until = None;
                0
            }
        }
    }

    /// Start from lane `to` until `length` from `now`.
    fn detour(&mut self, to: usize, now: Instant, length: Duration) {
        self.lane = to;
        self.until = Some(now + length);
    }

    /// How long to stay away after lane 0's wait timed out once more.
    fn timed_out(&mut self, timing: &Timing) -> Duration {
        self.strikes = self.strikes.saturating_add(1);
        let factor = 1u32 << (self.strikes - 1).min(16);
        timing.detour.saturating_mul(factor).min(timing.max_detour)
    }
}

/// The lock files next to a database, or none if they could not be opened
/// (then SQLite alone decides who writes, as it always does).
pub(crate) struct Turnstile {
    db: PathBuf,
    lanes: [OnceLock<Option<Lane>>; LANES],
    route: Mutex<Route>,
    timing: Timing,
}

/// One turn at writing; the `write` lock is released when it is dropped.
pub(crate) struct Turn<'a> {
    _route: MutexGuard<'a, Route>,
    write: Option<&'a File>,
    #[cfg_attr(not(all(test, unix)), allow(dead_code))]
    lane: Option<usize>,
}

impl Turn<'_> {
    /// The lane this turn was taken in; `None` if SQLite alone orders it.
    /// Read by the tests only (Unix: see the tests module).
    #[cfg_attr(not(all(test, unix)), allow(dead_code))]
    pub(crate) fn lane(&self) -> Option<usize> {
        self.lane
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.write {
            let _ = fs2::FileExt::unlock(f);
        }
    }
}

fn sidecar(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Open (creating) a lock file readable by its owner only, whatever the umask:
/// anyone who can open it can take the lock.
fn open_lock_file(path: &Path) -> std::io::Result<File> {
    let file = crate::portable::create_mode(
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
        0o600,
    )
    .open(path)?;
    // A file made by an older build (or under another rule) is narrowed too;
    // failing that (not ours), it still works as a lock.
    if let Ok(meta) = file.metadata() {
        if crate::portable::mode_of(&meta).is_some_and(|mode| mode & 0o777 != 0o600) {
            let _ = crate::portable::set_file_mode(&file, 0o600);
        }
    }
    Ok(file)
}

fn open_lane(db: &Path, lane: usize) -> Option<Lane> {
    let tag = if lane == 0 {
        String::new()
    } else {
        format!(".{lane}")
    };
    let next = open_lock_file(&sidecar(db, &format!("-next{tag}"))).ok()?;
    let write = open_lock_file(&sidecar(db, &format!("-write{tag}"))).ok()?;
    Some(Lane { next, write })
}

/// Why a lane gave no turn.
#[derive(Debug)]
enum Blocked {
    /// The holder is stopped and will not let go.
    Stopped,
    /// The bound passed.
    TimedOut,
    /// Locking failed for another reason (not supported here).
    Unsupported,
}

impl Turnstile {
    /// Open (creating) lane 0's lock files next to `db`. No wait is longer
    /// than `busy` (SQLite's own bound) nor than the default [`Timing`].
    pub(crate) fn open(db: &Path, busy: Duration) -> Turnstile {
        let mut timing = Timing::default();
        timing.give_up = timing.give_up.min(busy);
        timing.sqlite_cap = busy;
        Turnstile::with_timing(db, timing)
    }

    pub(crate) fn with_timing(db: &Path, timing: Timing) -> Turnstile {
        let t = Turnstile {
            db: db.to_path_buf(),
            lanes: Default::default(),
            route: Mutex::new(Route::default()),
            timing,
        };
        // Lane 0 now, so that its files exist from the first open on.
        t.lane(0);
        t
    }

    fn lane(&self, i: usize) -> Option<&Lane> {
        self.lanes[i].get_or_init(|| open_lane(&self.db, i)).as_ref()
    }

    /// Wait (a bounded time) for this process's turn to write.
    pub(crate) fn enter(&self) -> Turn<'_> {
        // Nothing the guard protects can be left half-done by a panic.
        let mut route = self.route.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        for i in route.first_lane(now)..LANES {
            let Some(lane) = self.lane(i) else { break };
            match take_turn(lane, &self.timing, &self.db) {
                Ok(()) => {
                    if i == 0 {
                        route.strikes = 0;
                    }
                    return Turn {
                        _route: route,
                        write: Some(&lane.write),
                        lane: Some(i),
                    };
                }
                Err(Blocked::Unsupported) => break,
                Err(Blocked::Stopped) => route.detour(i + 1, Instant::now(), self.timing.stopped_detour),
                Err(Blocked::TimedOut) => {
                    // Only lane 0's waits lengthen detours; lane 1 is only
                    // ever a step of a detour that began there.
                    let length = if i == 0 {
                        route.timed_out(&self.timing)
                    } else {
                        self.timing.detour
                    };
                    route.detour(i + 1, Instant::now(), length)
                }
            }
        }
        Turn {
            _route: route,
            write: None,
            lane: None,
        }
    }
}

/// Take `next`, then `write`, then let `next` go; on failure hold nothing.
fn take_turn(lane: &Lane, timing: &Timing, db: &Path) -> Result<(), Blocked> {
    let line = Line {
        lane,
        db,
        timing,
        cap: Instant::now() + timing.sqlite_cap.max(timing.give_up),
    };
    line.wait_for(&lane.next)?;
    stop_point(StopPoint::HoldingTurnstileNext);
    let got = line.wait_for(&lane.write);
    let _ = fs2::FileExt::unlock(&lane.next);
    got
}

/// One turn's wait in one lane.
struct Line<'a> {
    lane: &'a Lane,
    db: &'a Path,
    timing: &'a Timing,
    /// No wait for this turn goes past this.
    cap: Instant,
}

/// What a look at the kernel's lock table says about a wait.
enum Look {
    /// The holder of the awaited lock is stopped: it will not let go.
    Stopped,
    /// The turn in progress is inside SQLite: the line moves, or waits for
    /// SQLite's own lock, which a detour would meet as well.
    Moving,
    /// Neither: the holder may be stuck (or caught between two steps).
    Unclear,
}

impl Line<'_> {
    /// Take an exclusive lock on `file`, polling with short growing sleeps.
    /// Every [`Timing::ask_every`] after the first [`Timing::ask_after`], look
    /// at the lock table: leave at once if the holder is stopped; wait
    /// [`Timing::give_up`] more whenever the line is seen moving, never past
    /// `cap`. A holder that keeps the lock without a turn inside SQLite (a
    /// hostile or stuck one) thus costs `give_up`.
    fn wait_for(&self, file: &File) -> Result<(), Blocked> {
        let start = Instant::now();
        let mut pause = Duration::from_micros(10);
        let mut ask_at = start + self.timing.ask_after;
        let mut deadline = (start + self.timing.give_up).min(self.cap);
        loop {
            // fs2 called explicitly: std::fs::File has inherent lock methods.
            match fs2::FileExt::try_lock_exclusive(file) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == fs2::lock_contended_error().kind() => {}
                Err(_) => return Err(Blocked::Unsupported),
            }
            let now = Instant::now();
            if now >= ask_at {
                match self.look(file) {
                    Look::Stopped => return Err(Blocked::Stopped),
                    Look::Moving => deadline = (now + self.timing.give_up).min(self.cap),
                    Look::Unclear => {}
                }
                ask_at = now + self.timing.ask_every;
            }
            if now >= deadline {
                return Err(Blocked::TimedOut);
            }
            std::thread::sleep(
                pause
                    .min(deadline - now)
                    .min(ask_at.saturating_duration_since(now)),
            );
            pause = (pause * 2).min(pause_cap(now - start));
        }
    }

    /// Who holds `file`, and is the turn in progress (the holder of `write`)
    /// the process holding SQLite's write lock?
    fn look(&self, file: &File) -> Look {
        let Some(locks) = holder::Locks::read() else {
            return Look::Unclear;
        };
        let holder_of = |f: &File| holder::FileId::of_file(f).and_then(|id| locks.flock_holder(id));
        let stopped = |pid: Option<i32>| pid.is_some_and(|pid| holder::proc_state(pid).is_stopped());
        let turn = holder_of(&self.lane.write);
        // Waiting for `write` is waiting for the turn: one lookup. The holder
        // of `next` waits for the turn in progress: if that one is stopped,
        // the whole line is.
        let awaits_turn = std::ptr::eq(file, &self.lane.write);
        let awaited = if awaits_turn { turn } else { holder_of(file) };
        if stopped(awaited) || (!awaits_turn && stopped(turn)) {
            return Look::Stopped;
        }
        match (turn, locks.sqlite_write_lock_holder(self.db)) {
            (Some(turn), Some(sqlite)) if turn == sqlite => Look::Moving,
            _ => Look::Unclear,
        }
    }
}

/// Turns last one transaction (tens to hundreds of µs), so the first waits
/// poll finely; a wait that has gone on is behind something slow (a checkpoint,
/// a busy disk) and polls at a gentler pace.
fn pause_cap(waited: Duration) -> Duration {
    if waited < Duration::from_millis(20) {
        Duration::from_micros(100)
    } else {
        Duration::from_millis(1)
    }
}

// The tests use Unix file modes, symlinks and FIFOs; the code paths other
// systems take are run on Linux through LEASEHOLD_FORCE_PORTABLE (src/portable.rs).
#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn quick() -> Timing {
        Timing {
            give_up: Duration::from_millis(50),
            ..Timing::default()
        }
    }

    #[test]
    fn a_turn_excludes_another_handle_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.db");
        let a = Turnstile::open(&db, Duration::from_secs(5));
        let b = Turnstile::with_timing(&db, quick());
        let turn = a.enter();
        assert_eq!(turn.lane(), Some(0));
        // b cannot get lane 0 while a holds it, gives up at its bound and
        // takes the detour lane instead.
        assert_eq!(b.enter().lane(), Some(1));
        drop(turn);
        // b stays on its detour until it ends.
        assert_eq!(b.enter().lane(), Some(1));
        // A handle with no detour gets lane 0 again: dropping the turn freed it.
        let c = Turnstile::with_timing(&db, quick());
        assert_eq!(c.enter().lane(), Some(0));
    }

    #[test]
    fn the_writer_holding_next_goes_before_the_one_that_just_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.db");
        let a = Turnstile::open(&db, Duration::from_secs(5));
        let b = std::sync::Arc::new(Turnstile::open(&db, Duration::from_secs(5)));
        let first = a.enter();
        let (tx, rx) = crossbeam_channel::unbounded();
        let waiter = {
            let b = std::sync::Arc::clone(&b);
            std::thread::spawn(move || {
                let t = b.enter();
                tx.send(t.lane()).unwrap();
            })
        };
        // Wait until b is at the head of the line (holds `next`).
        let next = &a.lane(0).unwrap().next;
        while fs2::FileExt::try_lock_exclusive(next).is_ok() {
            fs2::FileExt::unlock(next).unwrap();
            std::thread::yield_now();
        }
        drop(first);
        let second = a.enter();
        // a's second turn could only start after b's turn (in lane 0: the
        // holder was live and let go well within the bound).
        assert_eq!(rx.try_recv(), Ok(Some(0)));
        drop(second);
        waiter.join().unwrap();
    }

    /// A hostile handle keeps `next` of both lanes forever: the first write
    /// waits its bound once per lane, every later one during the detour waits
    /// not at all (before the fix each waited the full busy timeout).
    #[test]
    fn a_lock_held_forever_costs_one_bounded_wait_per_detour() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.db");
        let timing = Timing {
            give_up: Duration::from_millis(50),
            detour: Duration::from_secs(3600),
            max_detour: Duration::from_secs(3600),
            ..Timing::default()
        };
        let t = Turnstile::with_timing(&db, timing);
        let hostile = Turnstile::open(&db, Duration::from_secs(5));
        let held: Vec<&File> = (0..LANES).map(|i| &hostile.lane(i).unwrap().next).collect();
        for f in &held {
            fs2::FileExt::try_lock_exclusive(*f).unwrap();
        }
        let first = t.enter();
        assert_eq!(first.lane(), None, "every lane is held: SQLite alone");
        drop(first);
        for _ in 0..100 {
            let turn = t.enter();
            assert_eq!(turn.lane(), None);
        }
        let route = t.route.lock().unwrap();
        assert_eq!(route.lane, LANES);
        assert_eq!(route.strikes, 1, "one detour, not one wait per write");
    }

    #[test]
    fn a_detour_ends_and_grows_while_lane_zero_keeps_timing_out() {
        let timing = Timing::default();
        let mut r = Route::default();
        let t0 = Instant::now();
        assert_eq!(r.first_lane(t0), 0);
        let first = r.timed_out(&timing);
        r.detour(1, t0, first);
        assert_eq!(r.first_lane(t0 + first - Duration::from_millis(1)), 1);
        assert_eq!(r.first_lane(t0 + first), 0);
        assert_eq!(r.timed_out(&timing), 2 * first);
        for _ in 0..20 {
            r.timed_out(&timing);
        }
        assert_eq!(r.timed_out(&timing), timing.max_detour);
    }

    #[test]
    fn lock_files_are_created_or_narrowed_to_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.db");
        // An existing file left world-readable by an older build is narrowed.
        std::fs::write(sidecar(&db, "-write"), b"").unwrap();
        std::fs::set_permissions(sidecar(&db, "-write"), std::fs::Permissions::from_mode(0o644)).unwrap();
        // (The umask is not changed here: other tests run in this process at
        // the same time. Under the usual 022 a plain open gives 0644.)
        let t = Turnstile::open(&db, Duration::from_secs(5));
        t.lane(1).unwrap();
        for suffix in ["-next", "-write", "-next.1", "-write.1"] {
            let mode = std::fs::metadata(sidecar(&db, suffix))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{suffix}");
        }
    }
}
