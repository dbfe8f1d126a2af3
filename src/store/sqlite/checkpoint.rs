//! The WAL checkpointer: a background component of every store handle.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::pool::Pool;
use super::turnstile::Turnstile;
use crate::service::Service;

/// Checkpoints the WAL from a background thread so that no writer pays for it.
///
/// A passive checkpoint never blocks anyone, but under continuous writes from
/// several processes (or with a long reader) it never catches up, and the WAL
/// only restarts from its beginning after a checkpoint that did. So once the WAL
/// passes [`WAL_RESTART_BYTES`], the checkpointer asks for a RESTART, which makes
/// new writers wait (at most [`RESTART_WAIT`]) until the log is fully copied and
/// can be reused: a short stall instead of an unbounded file.
pub(crate) struct Checkpointer {
    _service: Service,
}

/// WAL size past which a blocking RESTART checkpoint is used.
const WAL_RESTART_BYTES: u64 = 64 * 1024 * 1024;
/// The longest a RESTART checkpoint waits for readers and writers.
const RESTART_WAIT: Duration = Duration::from_secs(1);

fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

impl Checkpointer {
    /// Start checkpointing the WAL of the database at `db` every `every`; `None`
    /// if no thread could be started (the store then works without, and the
    /// WAL grows until the next checkpoint of any handle).
    pub(crate) fn start(
        pool: &Pool,
        turnstile: &Arc<Turnstile>,
        db: &Path,
        every: Duration,
        busy: Duration,
    ) -> Option<Checkpointer> {
        let (pool, turnstile, wal) = (pool.clone(), Arc::clone(turnstile), wal_path(db));
        let service = Service::start("leasehold-checkpoint", move |stop| {
            while stop.nap(every) {
                checkpoint_once(&pool, &turnstile, &wal, busy);
            }
            // The last handle is going: leave the WAL empty for the next opener.
            if let Ok(c) = pool.get() {
                let _ = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
            }
        })
        .ok()?;
        Some(Checkpointer { _service: service })
    }
}

/// One checkpoint: passive while the WAL is small, RESTART once it is not.
/// A RESTART holds the write lock while it waits, so it takes a turn like any
/// writer: otherwise writers committing back to back could keep it out.
fn checkpoint_once(pool: &Pool, turnstile: &Turnstile, wal: &Path, busy: Duration) {
    let Ok(c) = pool.get() else { return };
    let big = std::fs::metadata(wal)
        .map(|m| m.len() > WAL_RESTART_BYTES)
        .unwrap_or(false);
    if !big {
        let _ = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        return;
    }
    let _turn = turnstile.enter();
    if c.busy_timeout(RESTART_WAIT).is_ok() {
        let _ = c.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
        // Back to the pool's own timeout before the connection is reused.
        let _ = c.busy_timeout(busy);
    }
}
