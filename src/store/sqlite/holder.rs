//! Who holds a lock, and is that process stopped?
//!
//! Two waits in the write path can last as long as another process holds a
//! lock: the turnstile's `flock` files and SQLite's own write lock. When such a
//! wait goes on, the waiter asks the kernel who holds the lock, so that it can
//! stop waiting for a process that is stopped (SIGSTOP, or a debugger), and so
//! that a stall of seconds names the process behind it.
//!
//! The kernel lists every file lock in `/proc/locks`, with the pid that took it,
//! the file's device and inode, and the byte range:
//!
//! ```text
//! 7: FLOCK  ADVISORY  WRITE 2453 fe:00:10010627 0 EOF
//! 9: POSIX  ADVISORY  WRITE 2611 fe:00:10010630 120 120
//! ```
//!
//! SQLite in WAL mode takes its write lock (`WAL_WRITE_LOCK`, lock 0) as a POSIX
//! `fcntl` write lock on one byte of the `-shm` file, at `UNIX_SHM_BASE + 0`,
//! where `UNIX_SHM_BASE = (22 + SQLITE_SHM_NLOCK) * 4 = 120` (sqlite3.c, os_unix,
//! `unixShmLock`). `fcntl(F_GETLK)` on that byte would name the holder too, but
//! only through a file descriptor for `-shm`, and closing any descriptor of a
//! file drops every POSIX lock the process holds on it, SQLite's own included
//! (its dead-man switch among them). Reading `/proc/locks` needs no descriptor.
//!
//! Everything here is best effort: on a system without `/proc/locks`, or for a
//! holder in another pid namespace, the answer is "unknown" and the callers
//! fall back to their time bounds.

//!
//! `/proc` is Linux's: on every other system each question here answers
//! "unknown", and the callers rely on their time bounds alone.

use std::fmt;
use std::path::Path;

/// The byte of `-shm` that SQLite locks for writing (see the module doc).
pub(crate) const WAL_WRITE_LOCK_BYTE: u64 = 120;

/// What a process is doing, from the state letter of `/proc/<pid>/stat`.
// Without `/proc` (every system but Linux) only `Unknown` is ever read.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProcState {
    /// Stopped by a signal (`T`): it will do nothing until continued.
    Stopped,
    /// Stopped by a tracer (`t`): likewise.
    Traced,
    /// Running, sleeping, or waiting for I/O: it will let go in its own time.
    Live,
    /// Gone, or not visible from here.
    Unknown,
}

impl ProcState {
    /// True if the process cannot make progress until someone continues it.
    pub(crate) fn is_stopped(self) -> bool {
        matches!(self, ProcState::Stopped | ProcState::Traced)
    }
}

/// A process holding a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    pub pid: i32,
    pub state: ProcState,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            ProcState::Stopped => " (stopped)",
            ProcState::Traced => " (stopped by a tracer)",
            ProcState::Live => "",
            ProcState::Unknown => " (state unknown)",
        };
        write!(f, "pid {}{state}", self.pid)
    }
}

/// The kind of lock looked for in `/proc/locks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Flock,
    Posix,
}

/// The holder of the exclusive `flock` on the file `file` is open on, if any.
#[cfg(test)]
fn flock_holder(file: &std::fs::File) -> Option<Holder> {
    let pid = Locks::read()?.flock_holder(FileId::of_file(file)?)?;
    Some(Holder::of(pid))
}

/// The holder of SQLite's write lock on the WAL database `db`, if any.
pub(crate) fn sqlite_write_lock_holder(db: &Path) -> Option<Holder> {
    let pid = Locks::read()?.sqlite_write_lock_holder(db)?;
    Some(Holder::of(pid))
}

impl Holder {
    fn of(pid: i32) -> Holder {
        Holder {
            pid,
            state: proc_state(pid),
        }
    }
}

/// A file as `/proc/locks` names it: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: (u32, u32),
    ino: u64,
}

impl FileId {
    /// The file `file` is open on.
    pub(crate) fn of_file(file: &std::fs::File) -> Option<FileId> {
        file.metadata().ok().and_then(|m| FileId::of(&m))
    }

    /// Linux only: elsewhere nothing would name it.
    #[cfg(not(target_os = "linux"))]
    fn of(_meta: &std::fs::Metadata) -> Option<FileId> {
        None
    }

    #[cfg(target_os = "linux")]
    fn of(meta: &std::fs::Metadata) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        Some(FileId {
            dev: split_dev(meta.dev()),
            ino: meta.ino(),
        })
    }
}

/// `/proc/locks` in as few reads as possible. The kernel fills one read from
/// one walk of its lock list, but a later read starts again by position: a
/// lock let go between two reads shifts the list, and the entry after it is
/// never seen. `read_to_string` starts with small reads, so with a few
/// hundred locks in the table (SQLite holds several per connection) a held
/// lock could go unlisted; one read of a large buffer takes the table whole.
#[cfg(not(target_os = "linux"))]
fn read_table() -> Option<String> {
    None
}

#[cfg(target_os = "linux")]
fn read_table() -> Option<String> {
    use std::io::Read;
    /// Room for about 16,000 lines in the first read.
    const FIRST_READ: usize = 1 << 20;
    let mut file = std::fs::File::open("/proc/locks").ok()?;
    let mut buf = vec![0u8; FIRST_READ];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).ok()
}

/// One reading of `/proc/locks`, so that several questions about one moment
/// cost one read.
pub(crate) struct Locks {
    lines: Vec<LockLine>,
}

impl Locks {
    /// The kernel's lock table now; `None` where there is none to read.
    pub(crate) fn read() -> Option<Locks> {
        let table = read_table()?;
        Some(Locks {
            lines: table.lines().filter_map(parse_line).collect(),
        })
    }

    /// The pid holding the exclusive `flock` on `file`.
    pub(crate) fn flock_holder(&self, file: FileId) -> Option<i32> {
        self.write_lock_holder(Kind::Flock, file, 0)
    }

    /// The pid holding SQLite's write lock on the WAL database `db`.
    pub(crate) fn sqlite_write_lock_holder(&self, db: &Path) -> Option<i32> {
        let mut shm = db.as_os_str().to_owned();
        shm.push("-shm");
        // metadata() is stat(2): no descriptor is opened, so no lock is dropped.
        let meta = std::fs::metadata(shm).ok()?;
        self.write_lock_holder(Kind::Posix, FileId::of(&meta)?, WAL_WRITE_LOCK_BYTE)
    }

    fn write_lock_holder(&self, kind: Kind, file: FileId, byte: u64) -> Option<i32> {
        self.lines
            .iter()
            .find(|l| l.kind == kind && l.write && l.dev == file.dev && l.ino == file.ino && l.covers(byte))
            .map(|l| l.pid)
            .filter(|&pid| pid > 0)
    }
}

/// The state of process `pid`: unknown without `/proc`.
#[cfg(not(target_os = "linux"))]
pub(crate) fn proc_state(_pid: i32) -> ProcState {
    ProcState::Unknown
}

/// The state of process `pid`.
#[cfg(target_os = "linux")]
pub(crate) fn proc_state(pid: i32) -> ProcState {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return ProcState::Unknown;
    };
    // The command name (field 2) is in parentheses and may hold anything,
    // parentheses and spaces included; the state is the first field after it.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    match state {
        Some("T") => ProcState::Stopped,
        Some("t") => ProcState::Traced,
        Some(_) => ProcState::Live,
        None => ProcState::Unknown,
    }
}

/// One line of `/proc/locks`, the fields this module needs.
#[derive(Debug, PartialEq, Eq)]
struct LockLine {
    kind: Kind,
    write: bool,
    pid: i32,
    dev: (u32, u32),
    ino: u64,
    start: u64,
    /// `None` for `EOF`.
    end: Option<u64>,
}

impl LockLine {
    fn covers(&self, byte: u64) -> bool {
        self.start <= byte && self.end.is_none_or(|end| byte <= end)
    }
}

/// Parse `N: KIND ADVISORY RW PID MAJ:MIN:INO START END`; `None` for lines of
/// blocked waiters (`N: -> ...`), other kinds, or anything unexpected.
fn parse_line(line: &str) -> Option<LockLine> {
    let mut f = line.split_whitespace().skip(1);
    let kind = match f.next()? {
        "FLOCK" => Kind::Flock,
        "POSIX" => Kind::Posix,
        _ => return None,
    };
    let _mandatory = f.next()?;
    let write = match f.next()? {
        "WRITE" => true,
        "READ" => false,
        _ => return None,
    };
    let pid = f.next()?.parse().ok()?;
    let mut id = f.next()?.split(':');
    let major = u32::from_str_radix(id.next()?, 16).ok()?;
    let minor = u32::from_str_radix(id.next()?, 16).ok()?;
    let ino = id.next()?.parse().ok()?;
    let start = f.next()?.parse().ok()?;
    let end = match f.next()? {
        "EOF" => None,
        n => Some(n.parse().ok()?),
    };
    Some(LockLine {
        kind,
        write,
        pid,
        dev: (major, minor),
        ino,
        start,
        end,
    })
}

/// `st_dev` as the (major, minor) pair `/proc/locks` prints.
#[cfg(target_os = "linux")]
fn split_dev(dev: u64) -> (u32, u32) {
    (libc::major(dev as libc::dev_t), libc::minor(dev as libc::dev_t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lines_of_proc_locks_parse() {
        let l = parse_line("9: POSIX  ADVISORY  WRITE 2611 fe:00:10010630 120 120").unwrap();
        assert_eq!(
            l,
            LockLine {
                kind: Kind::Posix,
                write: true,
                pid: 2611,
                dev: (0xfe, 0),
                ino: 10010630,
                start: 120,
                end: Some(120),
            }
        );
        assert!(l.covers(120) && !l.covers(121));
        let f = parse_line("7: FLOCK  ADVISORY  WRITE 2453 103:02:77 0 EOF").unwrap();
        assert_eq!((f.kind, f.dev, f.end), (Kind::Flock, (0x103, 2), None));
        assert!(f.covers(u64::MAX));
        assert_eq!(
            parse_line("7: -> FLOCK  ADVISORY  WRITE 2453 fe:00:1 0 EOF"),
            None
        );
        assert_eq!(parse_line("3: OFDLCK ADVISORY  READ -1 fe:00:1 0 0"), None);
        assert_eq!(parse_line("garbage"), None);
    }

    #[test]
    fn the_state_of_this_process_is_live() {
        assert_eq!(proc_state(std::process::id() as i32), ProcState::Live);
        assert!(!proc_state(i32::MAX).is_stopped());
    }

    #[test]
    fn a_flock_names_its_holder() {
        if !Path::new("/proc/locks").exists() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = std::fs::File::create(&path).unwrap();
        let other = std::fs::File::open(&path).unwrap();
        assert_eq!(flock_holder(&other), None);
        fs2::FileExt::lock_exclusive(&held).unwrap();
        let h = flock_holder(&other).expect("the lock is listed");
        assert_eq!(h.pid, std::process::id() as i32);
        assert_eq!(h.state, ProcState::Live);
        fs2::FileExt::unlock(&held).unwrap();
        assert_eq!(flock_holder(&other), None);
    }

    /// Checks the byte against SQLite itself: a real connection in
    /// `BEGIN IMMEDIATE` holds it, and lets it go at COMMIT.
    #[test]
    fn sqlite_takes_its_write_lock_on_byte_120_of_shm() {
        if !Path::new("/proc/locks").exists() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.db");
        let c = rusqlite::Connection::open(&db).unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        let mode: String = c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        c.execute_batch("CREATE TABLE t(x)").unwrap();
        assert_eq!(sqlite_write_lock_holder(&db), None);
        c.execute_batch("BEGIN IMMEDIATE").unwrap();
        let h = sqlite_write_lock_holder(&db).expect("the write lock is listed");
        assert_eq!(h.pid, std::process::id() as i32);
        c.execute_batch("COMMIT").unwrap();
        assert_eq!(sqlite_write_lock_holder(&db), None);
    }
}
