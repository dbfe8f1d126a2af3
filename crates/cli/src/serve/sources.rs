//! The folders `serve` reads originals from, read again when the data
//! directory's record of them changes.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use leasehold::source::Folders;
use leasehold::Store;

use crate::config::Config;
use crate::folders::Recorded;

/// The folders the data directory records, and each opened to read its
/// originals: read again when the record changed, so a folder a `run` adds
/// while the server runs is searched, listed and served without a restart.
pub struct Sources {
    pub recorded: Recorded,
    pub folders: Folders,
}

/// The [`Sources`] last read, shared by the handlers, and when the record
/// was last looked at.
pub(super) struct Live(Mutex<(Arc<Sources>, Instant)>);

/// How often the record is read again: a folder added shows within it.
const RECORD_CHECKED_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

impl Live {
    pub(super) fn new(cfg: &Config) -> Live {
        let sources = Arc::new(Sources::of(cfg.recorded.clone()));
        Live(Mutex::new((sources, Instant::now())))
    }

    /// The sources as the store records them, read again at most every
    /// [`RECORD_CHECKED_EVERY`]; the folders are opened again, outside the
    /// lock (a folder on a mount that does not answer stalls no other
    /// request), only when the record changed.
    pub(super) fn current(&self, store: &Store) -> Arc<Sources> {
        let held = {
            let mut held = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if held.1.elapsed() < RECORD_CHECKED_EVERY {
                return held.0.clone();
            }
            held.1 = Instant::now();
            held.0.clone()
        };
        match Recorded::load(store) {
            Ok(now) if now != held.recorded => {
                let fresh = Arc::new(Sources::of(now));
                let mut held = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                held.0 = fresh.clone();
                fresh
            }
            _ => held,
        }
    }
}

impl Sources {
    fn of(recorded: Recorded) -> Sources {
        let (opened, _unavailable) = crate::folders::open(&recorded);
        Sources {
            recorded,
            folders: Folders::new(opened),
        }
    }
}
