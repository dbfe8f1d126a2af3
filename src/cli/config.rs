//! From flags to built objects: the store is opened, the mirror checked, the
//! source root pinned, before any work starts. Every failure here is a
//! configuration error (exit 2) naming the thing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use leasehold::extract::ExtractorRegistry;
use leasehold::mirror::Mirror;
use leasehold::source::DirSource;
use leasehold::worker::Pipeline;
use leasehold::{Store, StoreOptions, Synchronous};

use super::args::{Global, Sync};
use super::CliError;

/// The meta key holding the source root this data directory indexes.
const SOURCE_ROOT: &str = "source_root";

/// Everything a command needs, opened and validated.
pub struct Config {
    pub store: Store,
    pub mirror: Mirror,
    /// The directory documents are read from (pinned in the database).
    pub source: Option<DirSource>,
    pub workers: usize,
    pub max_input: u64,
}

impl Config {
    /// Open everything. `source` is the directory given on the command line (for
    /// `run`/`discover`); other commands use the one pinned in the database.
    pub fn build(g: &Global, source: Option<(&PathBuf, bool)>) -> Result<Config, CliError> {
        let lease = humantime::parse_duration(&g.lease)
            .map_err(|e| CliError::Config(format!("--lease {:?}: {e}", g.lease)))?;
        if lease < Duration::from_millis(100) {
            return Err(CliError::Config(format!(
                "--lease {:?}: must be at least 100ms",
                g.lease
            )));
        }
        if g.workers == Some(0) {
            return Err(CliError::Config("--workers: must be at least 1".into()));
        }
        if g.max_attempts == 0 {
            return Err(CliError::Config("--max-attempts: must be at least 1".into()));
        }
        let (db, mirror_root) = paths(g)?;
        let store = Store::open(&db, store_options(g, lease))?;
        let mirror = Mirror::open(&mirror_root).map_err(|e| CliError::Config(e.to_string()))?;
        let source = match source {
            Some((dir, hidden)) => Some(pin_source(&store, dir, hidden)?),
            None => pinned_source(&store)?,
        };
        Ok(Config {
            store,
            mirror,
            source,
            workers: g
                .workers
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
            max_input: g.max_input,
        })
    }

    /// The pipeline for a worker pool; needs a source.
    pub fn pipeline(&self) -> Result<Pipeline, CliError> {
        let source = self.source.clone().ok_or_else(|| {
            CliError::Config(format!(
                "{}: no source directory recorded yet; run `leasehold discover DIR` first",
                self.store.path().display()
            ))
        })?;
        Ok(Pipeline {
            store: self.store.clone(),
            mirror: self.mirror.clone(),
            source: Arc::new(source),
            extractor: super::testing::extractor()
                .map_err(CliError::Config)?
                .unwrap_or_else(|| Arc::new(ExtractorRegistry::new(self.max_input))),
            max_input_bytes: self.max_input,
        })
    }
}

/// The database and mirror paths; creates the data directory (only) when the
/// defaults are used.
fn paths(g: &Global) -> Result<(PathBuf, PathBuf), CliError> {
    if (g.db.is_none() || g.mirror.is_none()) && !g.data.exists() {
        std::fs::create_dir_all(&g.data).map_err(|e| {
            CliError::Config(format!("{}: cannot create data directory: {e}", g.data.display()))
        })?;
    }
    let db = g.db.clone().unwrap_or_else(|| g.data.join("leasehold.db"));
    let mirror = g.mirror.clone().unwrap_or_else(|| g.data.join("mirror"));
    Ok((db, mirror))
}

fn store_options(g: &Global, lease: Duration) -> StoreOptions {
    let options = match super::testing::clock() {
        Some(clock) => StoreOptions::default().clock(clock),
        None => StoreOptions::default(),
    };
    options
        .lease(lease)
        .max_attempts(g.max_attempts)
        .synchronous(match g.synchronous {
            Sync::Normal => Synchronous::Normal,
            Sync::Full => Synchronous::Full,
        })
}

/// Keys are relative to one root: a data directory indexes one source.
fn pin_source(store: &Store, dir: &Path, hidden: bool) -> Result<DirSource, CliError> {
    let source = DirSource::open(dir).map_err(|e| CliError::Config(e.to_string()))?;
    let root = source.root().display().to_string();
    let pinned = store.meta_set_once(SOURCE_ROOT, &root)?;
    if pinned != root {
        return Err(CliError::Config(format!(
            "{}: this data directory indexes {pinned}, not {root}; use --data for another source",
            store.path().display()
        )));
    }
    Ok(source.include_hidden(hidden))
}

fn pinned_source(store: &Store) -> Result<Option<DirSource>, CliError> {
    match store.meta(SOURCE_ROOT)? {
        None => Ok(None),
        Some(root) => DirSource::open(&root)
            .map(Some)
            .map_err(|e| CliError::Config(format!("recorded source directory: {e}"))),
    }
}
