//! Fair turns at the SQLite write lock across processes.
//!
//! SQLite's busy handler polls with growing sleeps (up to 100 ms), so a process
//! that has waited a while sleeps longest, while a process whose threads commit
//! back to back takes the lock again within microseconds of releasing it. Under
//! load from several processes that starves some of them (measured: one process
//! got 0.06 of the mean share). The turnstile forces turns with two file locks
//! next to the database:
//!
//! - `<db>-next` is held by the one writer that goes next;
//! - `<db>-write` is held by the writer whose transaction is running.
//!
//! To write, a process takes `next`, then `write`, then lets `next` go. A
//! process that has just written must take `next` again before it writes again,
//! and the writer already holding `next` gets `write` first: no process can take
//! two turns while another waits at the head of the line.
//!
//! Locks are fs2 (`flock`) locks, released by the kernel if a process dies. They
//! are only polled, never waited on without a bound: a process stopped while
//! holding one (SIGSTOP) delays the others at most `wait`, after which they go
//! to SQLite's own locking, which stays the single source of exclusion. Threads
//! of one process take turns through a mutex first, since `flock` is per open
//! file and would not exclude them.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The two lock files, or none if they could not be opened (then SQLite alone
/// decides who writes, as it always does).
pub(crate) struct Turnstile {
    files: Option<(File, File)>,
    local: Mutex<()>,
    wait: Duration,
}

/// One turn at writing; the `write` lock is released when it is dropped.
pub(crate) struct Turn<'a> {
    _local: MutexGuard<'a, ()>,
    write: Option<&'a File>,
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

fn open_lock_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

impl Turnstile {
    /// Open (creating) the lock files next to `db`. `wait` bounds every wait.
    pub(crate) fn open(db: &Path, wait: Duration) -> Turnstile {
        let files = open_lock_file(&sidecar(db, "-next"))
            .and_then(|next| Ok((next, open_lock_file(&sidecar(db, "-write"))?)))
            .ok();
        Turnstile {
            files,
            local: Mutex::new(()),
            wait,
        }
    }

    /// Wait for this process's turn to write.
    pub(crate) fn enter(&self) -> Turn<'_> {
        // Nothing the guard protects can be left half-done by a panic.
        let local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let Some((next, write)) = &self.files else {
            return Turn {
                _local: local,
                write: None,
            };
        };
        let deadline = Instant::now() + self.wait;
        if !poll_lock(next, deadline) {
            return Turn {
                _local: local,
                write: None,
            };
        }
        let got = poll_lock(write, deadline);
        let _ = fs2::FileExt::unlock(next);
        Turn {
            _local: local,
            write: got.then_some(write),
        }
    }
}

/// Take an exclusive lock on `file`, polling with short growing sleeps until
/// `deadline`. False if the deadline passed or locking is not supported here.
fn poll_lock(file: &File, deadline: Instant) -> bool {
    let start = Instant::now();
    let mut pause = Duration::from_micros(10);
    loop {
        // fs2 called explicitly: std::fs::File has inherent lock methods.
        match fs2::FileExt::try_lock_exclusive(file) {
            Ok(()) => return true,
            Err(e) if e.kind() == fs2::lock_contended_error().kind() => {}
            Err(_) => return false,
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(pause_cap(now - start));
    }
}

/// Turns last one transaction (tens to hundreds of µs), so the first waits
/// poll finely; a wait that has gone on is behind something slow (a checkpoint,
/// a stopped process) and polls at a gentler pace.
fn pause_cap(waited: Duration) -> Duration {
    if waited < Duration::from_millis(20) {
        Duration::from_micros(100)
    } else {
        Duration::from_millis(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_excludes_another_handle_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.db");
        let a = Turnstile::open(&db, Duration::from_secs(5));
        let b = Turnstile::open(&db, Duration::from_millis(50));
        let turn = a.enter();
        assert!(turn.write.is_some());
        // b cannot get the write lock while a holds it, and gives up at its bound.
        assert!(b.enter().write.is_none());
        drop(turn);
        assert!(b.enter().write.is_some());
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
                let _t = b.enter();
                tx.send("b").unwrap();
            })
        };
        // Wait until b is at the head of the line (holds `next`).
        let (next, _) = a.files.as_ref().unwrap();
        while fs2::FileExt::try_lock_exclusive(next).is_ok() {
            fs2::FileExt::unlock(next).unwrap();
            std::thread::yield_now();
        }
        drop(first);
        let second = a.enter();
        // a's second turn could only start after b's turn.
        assert_eq!(rx.try_recv(), Ok("b"));
        drop(second);
        waiter.join().unwrap();
    }
}
