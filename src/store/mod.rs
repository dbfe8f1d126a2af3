//! The jobs table and everything else the processes share, in SQLite or in
//! PostgreSQL: the only code that writes SQL (DESIGN §1 "Inside the store",
//! §3, §6, §7, §12).
//!
//! Decisions are written once, here, over narrow row traits; each engine's
//! driver (`sqlite/`, `postgres/`) implements the rows in its own SQL.
//! - `mod.rs`: the [`Store`] facade, the one handle callers use whatever the
//!   engine ([`Accounts`], [`Notices`] and [`Outbox`] are its views); it
//!   checks keys, wakes this process's idle workers and answers what the store
//!   can do (`locks_rows`, `checks_pages`, `tokenizers`).
//! - `engine.rs`: the operations one engine answers; `driver.rs`: the base
//!   of the row traits.
//! - The rules and their vocabulary: `fencing.rs` (claims and fenced
//!   writes), `queue.rs`, `gate/`, `outbox.rs`, `read.rs`, `check.rs`,
//!   `figures.rs`, `retention.rs`, `long_texts.rs`, `search/`.
//! - `location.rs`, `options.rs`, `events.rs`, `migrate/` (between engines).
//!
//! A `Store` is cheap to clone; clones share one engine (pool, group-commit
//! queue), so threads of a process should share clones, while separate
//! processes (or separate `Store::open`s) coordinate through the database.

mod check;
mod completion;
mod driver;
mod engine;
mod events;
mod fencing;
mod figures;
mod gate;
mod location;
mod long_texts;
pub mod migrate;
mod options;
mod outbox;
#[cfg(feature = "postgres")]
#[doc(hidden)]
pub mod pg_batch;
#[cfg(feature = "postgres")]
mod postgres;
mod queue;
mod read;
mod retention;
mod rules;
mod schema;
pub mod search;
mod sqlite;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

pub use check::{AcceptedResult, IndexedRow, IntegrityProblem};
pub use completion::{Completion, CompletionText};
pub use fencing::RowLock;
pub use figures::{HistoryFigures, HistoryLine};
pub use gate::{AccountState, Admission, Answer, GateChange, GateEvent, GatePolicy, GateState, ProbePermit};
pub use location::DbLocation;
pub use options::{Backoff, StoreOptions, Synchronous};
pub use outbox::{Drain, NoticeRecord, OutboxBatch, OutboxCap, OutboxItem, OutboxTotals, PendingNotice};
#[cfg(feature = "postgres")]
pub use postgres::{
    schema_version as pg_schema_version, CLEANUP_DEADLINE, IDLE_IN_TRANSACTION, LOCK_WAIT, ROW_LOCK_WAIT,
};
pub use queue::{NewDoc, Vanished};
pub use read::{KnownSource, Totals};
pub use retention::HistoryPrune;
pub use search::{Hit, IndexCheck, IndexDoc, QuerySyntax, Search, SearchPage, Snippet, Stemming, Tokenizer};
pub use sqlite::open::{schema_version, Access};
#[doc(hidden)]
pub use sqlite::write::claim_candidate_queries;
pub use sqlite::write_waits::{WriteWaits, WAIT_BUCKETS};

/// The setting in which a rerun's check of the results leaves the stamps of
/// the shards it found whole (`pipeline/recheck.rs`): a `mark=` line, the
/// [`history_mark`](Store::history_mark) then, and one `shard=stamp` line
/// each. They hold only against this file's history, in the order it was
/// written: `migrate` leaves the setting behind, and the target's first
/// check looks at every shard.
pub(crate) const CHECKED_SHARDS: &str = "checked_shards";

use crate::clock::{duration_ms, Millis};
use crate::error::{Error, Result};
use crate::job::{
    Claim, Counts, Enqueued, Fenced, HistoryEntry, Job, JobFilter, JobId, LiveLease, Owner, Parked,
};
use engine::Engine;
#[cfg(feature = "postgres")]
use postgres::PgStore;
use sqlite::Sqlite;

/// The engine a store was opened on: the seam's two implementations, and the
/// way to what only one of them has.
// One per store, inside its Arc: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Backend {
    Sqlite(Sqlite),
    #[cfg(feature = "postgres")]
    Postgres(PgStore),
}

impl Backend {
    /// The shared operations.
    pub(crate) fn engine(&self) -> &dyn Engine {
        match self {
            Backend::Sqlite(s) => s,
            #[cfg(feature = "postgres")]
            Backend::Postgres(p) => p,
        }
    }
}

/// Wakes in-process workers when new work may be claimable.
#[derive(Default)]
struct WorkSignal {
    generation: Mutex<Generation>,
    changed: Condvar,
}

impl WorkSignal {
    /// Wake every thread in [`Store::wait_for_work`].
    fn notify(&self) {
        let mut g = self.generation.lock().unwrap_or_else(|e| e.into_inner());
        g.count += 1;
        if g.waiters > 0 {
            self.changed.notify_all();
        }
    }
}

/// What wakes a store's waiting workers without holding the store: a pool's
/// stop handle keeps one, so that a handle kept after its pool (a signal
/// handler's) does not keep the database open.
#[derive(Clone)]
pub(crate) struct WorkWaker(Arc<WorkSignal>);

impl WorkWaker {
    /// As [`Store::notify_work`].
    pub(crate) fn notify(&self) {
        self.0.notify();
    }
}

/// The count [`Store::work_token`] hands out, and how many threads wait on
/// it: a notify with nobody waiting skips the wake-up (a system call per
/// completion). Both change under the one mutex, so no wake-up is lost.
#[derive(Default)]
struct Generation {
    count: u64,
    waiters: usize,
}

/// A handle on one store: a SQLite file, or a PostgreSQL database. Cheap to
/// clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    /// The engine the operations go to.
    backend: Backend,
    /// What messages call the database: the file, or the URL without its password.
    name: PathBuf,
    opts: StoreOptions,
    /// Kept here for both engines: it wakes threads of this process only.
    signal: Arc<WorkSignal>,
    /// What this handle last saw of the `migrate` marker.
    moved: Mutex<Moved>,
}

/// The meta row `leasehold migrate` writes into a store it moved away from.
const MOVED_TO: &str = "moved_to";

/// How often a handle looks for [`MOVED_TO`].
const MOVED_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The `migrate` marker as a handle last read it.
#[derive(Default)]
struct Moved {
    /// Where the store went, once seen (it is never taken back).
    to: Option<String>,
    /// When it was last looked up, by the store's clock.
    checked: Option<Millis>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.inner.name).finish()
    }
}

/// Record the stemming a store was opened with in its meta table unless
/// it is already: a read first, so that an open that changes nothing takes
/// no write lock. Called by the opens that may write.
fn record_stemming(engine: &dyn Engine, stemming: Option<Stemming>) -> Result<()> {
    let Some(stemming) = stemming else { return Ok(()) };
    if engine.meta(search::stemming::STEMMING_META)?.as_deref() != Some(stemming.name()) {
        engine.set_meta(search::stemming::STEMMING_META, stemming.name())?;
    }
    Ok(())
}

impl Store {
    /// Open (creating if needed) the store at `location`: a PostgreSQL
    /// database when it begins with `postgres://` or `postgresql://`, else a
    /// SQLite file (see [`DbLocation`]).
    ///
    /// # Failure
    /// A missing directory, a read-only file or directory, a file that is not a
    /// SQLite database or is damaged, or a schema newer than this build: each a
    /// typed [`Error`] naming the path, and the file is left as it was. For
    /// PostgreSQL: an unreachable server, a refused login or a schema newer
    /// than this build, each a typed [`Error`] naming the URL without its
    /// password.
    ///
    /// # Example
    /// ```
    /// use leasehold::{Completion, NewDoc, Store, StoreOptions};
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("q.db"), StoreOptions::default()).unwrap();
    /// store.enqueue(&NewDoc::new("a.txt", "v1")).unwrap();
    /// let claim = store.claim("w1").unwrap().expect("one document is claimable");
    /// assert!(store.complete(claim, Completion::new("r/a", "abc")).unwrap().is_accepted());
    /// ```
    pub fn open(location: impl AsRef<OsStr>, opts: StoreOptions) -> Result<Store> {
        opts.validate()?;
        let (backend, name) = match DbLocation::of(location) {
            DbLocation::Sqlite(path) => {
                let sqlite = Sqlite::open(&path, opts.clone())?;
                if sqlite.access == Access::ReadWrite {
                    record_stemming(&sqlite, opts.stemming)?;
                }
                (Backend::Sqlite(sqlite), path)
            }
            #[cfg(feature = "postgres")]
            DbLocation::Postgres(url) => {
                if let Some(t) = opts.tokenizer {
                    postgres::only_simple(t)?;
                }
                let pg = PgStore::open(&url, opts.clone())?;
                record_stemming(&pg, opts.stemming)?;
                let name = PathBuf::from(pg.url());
                (Backend::Postgres(pg), name)
            }
            #[cfg(not(feature = "postgres"))]
            DbLocation::Postgres(_) => {
                return Err(Error::InvalidInput {
                    what: "database location",
                    reason: "postgres:// needs leasehold's `postgres` feature, which this build leaves out"
                        .into(),
                })
            }
            DbLocation::Unsupported(scheme) => {
                return Err(Error::InvalidInput {
                    what: "database location",
                    reason: format!(
                        "{scheme} is not a database leasehold opens (a SQLite path, or postgres://)"
                    ),
                })
            }
        };
        Ok(Store {
            inner: Arc::new(Inner {
                backend,
                name,
                opts,
                signal: Arc::default(),
                moved: Mutex::new(Moved::default()),
            }),
        })
    }

    /// The database file. For a PostgreSQL store, its URL without the
    /// password (what every message names it by); there is no file.
    pub fn path(&self) -> &Path {
        &self.inner.name
    }

    /// How the store was opened: read-write, or (SQLite,
    /// [`StoreOptions::read_only`]) read only, sharing the `-wal` with
    /// writers or, on a read-only medium without one to share, immutable.
    pub fn access(&self) -> Access {
        match &self.inner.backend {
            Backend::Sqlite(s) => s.access,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Access::ReadWrite,
        }
    }

    // ----- what this store can do (asked instead of which engine it is) -----

    /// Whether the database's own pages are checked here
    /// ([`Store::check_integrity`], [`Store::journal_mode`]): true for a file
    /// this process opens, false for a server that keeps its own files sound.
    pub fn checks_pages(&self) -> bool {
        matches!(self.inner.backend, Backend::Sqlite(_))
    }

    /// Whether the store can lock one document's row for the mirror's
    /// cleanup ([`Store::with_job_locked`]). When it can, machines may share
    /// one mirror whose file system does not lock
    /// ([`crate::mirror::Fencing::RowLocks`]); when not, the cleanup takes the
    /// document's file lock.
    pub fn locks_rows(&self) -> bool {
        !self.checks_pages()
    }

    /// The tokenizers this store's search index can be made with.
    pub fn tokenizers(&self) -> &'static [Tokenizer] {
        match self.inner.backend {
            Backend::Sqlite(_) => &[Tokenizer::Unicode61, Tokenizer::Trigram],
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => &[Tokenizer::PgSimple],
        }
    }

    /// The schema version applied to the database.
    pub fn applied_version(&self) -> Result<i64> {
        match &self.inner.backend {
            Backend::Sqlite(s) => s.applied_version(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.applied_version(),
        }
    }

    /// The newest schema version this build knows for the store's engine.
    pub fn supported_version(&self) -> i64 {
        match &self.inner.backend {
            Backend::Sqlite(_) => sqlite::open::schema_version(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => postgres::schema_version(),
        }
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.inner.opts
    }

    /// Now, from the injected clock.
    pub fn now(&self) -> Millis {
        self.inner.opts.clock.now_ms()
    }

    /// The PostgreSQL engine, if the store is on one (for the test hooks).
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(&self) -> Option<&postgres::PgStore> {
        match &self.inner.backend {
            Backend::Postgres(pg) => Some(pg),
            Backend::Sqlite(_) => None,
        }
    }

    fn engine(&self) -> &dyn Engine {
        self.inner.backend.engine()
    }

    /// Run `f` on document `id`'s row while its row lock is held, waiting
    /// for the lock at most a short bound (100 ms): the fence for mirror
    /// cleanup on a store that [locks rows](Store::locks_rows), which holds
    /// on a mirror whose file system cannot lock. `f` also gets the instant
    /// after which it must not delete any more. [`Error::PostgresOnly`] on a
    /// store that does not lock rows, whose cleanup takes the document's
    /// file lock instead.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub fn with_job_locked<T>(
        &self,
        id: JobId,
        f: impl FnOnce(Option<Job>, std::time::Instant) -> T,
    ) -> Result<RowLock<T>> {
        match &self.inner.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.with_job_locked(id.0, f),
            Backend::Sqlite(_) => Err(Error::PostgresOnly {
                operation: "the row-locked mirror cleanup",
            }),
        }
    }

    /// PostgreSQL only: the server's clock minus this process's, in ms, and
    /// the round trip the reading took (its uncertainty); `None` on SQLite,
    /// where every process reads one machine's clock.
    pub fn clock_offset_ms(&self) -> Result<Option<(i64, i64)>> {
        match &self.inner.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.clock_offset_ms().map(Some),
            Backend::Sqlite(_) => Ok(None),
        }
    }

    /// The SQLite engine, for what only SQLite has; a typed error naming
    /// `operation` on PostgreSQL.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    fn sqlite(&self, operation: &'static str) -> Result<&Sqlite> {
        match &self.inner.backend {
            Backend::Sqlite(s) => Ok(s),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Err(Error::SqliteOnly { operation }),
        }
    }

    // ----- queue -----

    /// Enqueue one document; idempotent on its key (see [`NewDoc`]).
    pub fn enqueue(&self, doc: &NewDoc) -> Result<Enqueued> {
        Ok(self.enqueue_many(std::slice::from_ref(doc))?.remove(0))
    }

    /// Enqueue many documents in one transaction; one outcome per document.
    pub fn enqueue_many(&self, docs: &[NewDoc]) -> Result<Vec<Enqueued>> {
        for d in docs {
            check_key(&d.key)?;
        }
        self.refuse_if_moved()?;
        let out = self.engine().enqueue_many(docs)?;
        self.notify_if_queued(&out);
        Ok(out)
    }

    /// Requeue a settled document with fresh attempts; false if it was being
    /// extracted, was gone, or did not exist.
    pub fn requeue(&self, id: JobId, why: &str) -> Result<bool> {
        let done = self.engine().requeue(id, why)?;
        if done {
            self.notify_work();
        }
        Ok(done)
    }

    /// Forget document `id`'s accepted result, found missing or altered in
    /// the mirror, while `result_path` is still the accepted one: its text
    /// leaves the search index, and an indexed document is queued again with
    /// fresh attempts, so the next worker extracts it anew. `why` goes into
    /// its history. False if the row no longer holds that result (a newer
    /// one was accepted meanwhile, or the source went away).
    pub fn forget_result(&self, id: JobId, result_path: &str, why: &str) -> Result<bool> {
        let done = self.engine().forget_result(id, result_path, why)?;
        if done {
            self.notify_work();
        }
        Ok(done)
    }

    /// Requeue every dead document; returns how many.
    pub fn requeue_dead(&self, why: &str) -> Result<usize> {
        let n = self.engine().requeue_dead(why)?;
        if n > 0 {
            self.notify_work();
        }
        Ok(n)
    }

    /// Start a scan of a source (a directory walk, an HTTP listing); its number
    /// stamps every document it sees.
    pub fn begin_scan(&self) -> Result<i64> {
        self.refuse_if_moved()?;
        self.engine().begin_scan()
    }

    /// Record one batch of a scan in one transaction: enqueue `changed` (new or
    /// changed sources) and stamp them and `unchanged` keys as seen by `scan`.
    pub fn record_scan(&self, scan: i64, unchanged: &[String], changed: &[NewDoc]) -> Result<Vec<Enqueued>> {
        for d in changed {
            check_key(&d.key)?;
        }
        let out = self.engine().record_scan(scan, unchanged, changed)?;
        self.notify_if_queued(&out);
        Ok(out)
    }

    /// Finish scan `scan`: every present document it did not see is marked gone
    /// (dead, result forgotten, so cleanup removes its files). Returns how many.
    pub fn finish_scan(&self, scan: i64) -> Result<usize> {
        self.engine().finish_scan(scan, "the source file was removed")
    }

    /// [`Store::finish_scan`] for a complete HTTP listing: the documents it
    /// did not list are gone upstream.
    pub fn finish_listing(&self, scan: i64) -> Result<usize> {
        self.engine()
            .finish_scan(scan, "the upstream listing no longer holds it")
    }

    /// Sources were removed: mark the documents `keys`, and every document
    /// whose key starts with one of `prefixes` (what was under a removed
    /// directory), gone, as a scan that no longer finds them would. Returns
    /// how many. Used by `watch` for the paths a notification named.
    pub fn mark_gone(&self, keys: &[String], prefixes: &[String]) -> Result<usize> {
        self.refuse_if_moved()?;
        self.engine()
            .mark_gone(keys, prefixes, "the source file was removed")
    }

    /// Up to `limit` present (not gone) documents whose key comes after
    /// `after`, in the keys' byte order, with their fingerprints: a directory
    /// scan walks the tree in that order and reads the store beside it
    /// (`source::dir`), so an unchanged tree costs reads, not writes.
    pub fn sources_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<(String, KnownSource)>> {
        self.engine().sources_after(after, limit)
    }

    /// Mark the documents of `vanished` (a directory walk passed their keys
    /// without finding their files) gone, as [`Store::mark_gone`] does, each
    /// only while its stored fingerprint is still the one the walk read.
    /// Returns how many.
    pub fn mark_vanished(&self, vanished: &[Vanished]) -> Result<usize> {
        self.refuse_if_moved()?;
        self.engine()
            .mark_vanished(vanished, "the source file was removed")
    }

    /// The source fingerprint stored for each of `keys` (absent keys are left out).
    pub fn source_stats(&self, keys: &[String]) -> Result<HashMap<String, KnownSource>> {
        self.engine().source_stats(keys)
    }

    /// A setting of this data directory (e.g. `source_root`).
    pub fn meta(&self, name: &str) -> Result<Option<String>> {
        self.engine().meta(name)
    }

    /// The newest history line, by its document, sequence and place in the
    /// table: every claim, completion, requeue and forgotten result writes
    /// a line, so two equal marks say no such write came between them.
    /// `None` before the first line, and on PostgreSQL, whose lines are not
    /// kept in the order written.
    pub(crate) fn history_mark(&self) -> Result<Option<String>> {
        self.engine().history_mark()
    }

    /// The documents whose history lines were written after the line
    /// `mark` names (a [`Store::history_mark`]), each once: the documents
    /// claimed, completed, queued again or forgotten since. `None` when
    /// that cannot be said: no line has that name and place any more
    /// (history older than `history_keep` is pruned, `migrate` copies it in
    /// another order), more than `most` lines may follow it, or the store
    /// keeps no marks (PostgreSQL).
    pub(crate) fn history_docs_since(&self, mark: &str, most: i64) -> Result<Option<Vec<i64>>> {
        self.engine().history_docs_since(mark, most)
    }

    /// Set `name` to `value`, replacing any value it had (e.g. the last
    /// listing's figures, which `status` shows).
    pub fn set_meta(&self, name: &str, value: &str) -> Result<()> {
        self.engine().set_meta(name, value)
    }

    /// Set `name` to `value` unless it is already set; returns the value in force.
    pub fn meta_set_once(&self, name: &str, value: &str) -> Result<String> {
        Ok(self.engine().meta_set_once_among(name, value, &[])?.1)
    }

    /// Set `name` to `value` unless `name` or one of `rivals` is already set,
    /// in one transaction; returns the setting in force as `(name, value)`.
    /// A data directory records its one source this way: whichever kind of
    /// source (a directory, an HTTP base URL) came first holds, even when two
    /// processes start at once.
    pub fn meta_set_once_among(&self, name: &str, value: &str, rivals: &[&str]) -> Result<(String, String)> {
        self.engine().meta_set_once_among(name, value, rivals)
    }

    /// Read the settings `names`, let `edit` change them in place (`None`
    /// removes one) and say what it decided, and write what changed, in one
    /// transaction: several settings decided together, as a data directory's
    /// folders are, even when two processes change them at once. `edit` may
    /// be called again if the transaction has to be retried.
    pub fn edit_meta<T>(
        &self,
        names: &[&str],
        mut edit: impl FnMut(&mut [Option<String>]) -> T,
    ) -> Result<T> {
        let mut decided = None;
        self.engine()
            .edit_meta(names, &mut |values| decided = Some(edit(values)))?;
        decided.ok_or_else(|| Error::Internal("the settings edit was never run".into()))
    }

    fn notify_if_queued(&self, out: &[Enqueued]) {
        if out.iter().any(|e| e.queued()) {
            self.notify_work();
        }
    }

    // ----- claims and fenced writes -----

    /// Claim one claimable document for `worker`, or `None` if there is none.
    pub fn claim(&self, worker: &str) -> Result<Option<Claim>> {
        Ok(self.claim_batch(worker, 1)?.pop())
    }

    /// Claim up to `n` documents in one transaction. A store that
    /// `leasehold migrate` moved away from answers [`Error::Moved`].
    pub fn claim_batch(&self, worker: &str, n: usize) -> Result<Vec<Claim>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        self.refuse_if_moved()?;
        let claims = self.engine().claim_batch(worker, n)?;
        events::took_over(worker, &claims);
        Ok(claims)
    }

    /// [`Error::Moved`] if the store carries the marker `leasehold migrate`
    /// leaves in a store it moved away from. Looked up at most once per
    /// [`MOVED_CHECK_EVERY`] per handle (and its clones), so claims pay
    /// nothing for it; a process that was running during the move stops
    /// claiming within that time.
    fn refuse_if_moved(&self) -> Result<()> {
        let now = self.now();
        let mut seen = self.inner.moved.lock().unwrap_or_else(|e| e.into_inner());
        let every = duration_ms(MOVED_CHECK_EVERY);
        let due = seen
            .checked
            .is_none_or(|at| now.saturating_sub(at) >= every || now < at);
        if seen.to.is_none() && due {
            seen.to = self.engine().meta(MOVED_TO)?;
            seen.checked = Some(now);
        }
        match &seen.to {
            Some(to) => Err(Error::Moved { to: to.clone() }),
            None => Ok(()),
        }
    }

    /// Leave the marker that makes every later claim here refuse: this
    /// store's contents now live at `to` (`leasehold migrate`).
    pub fn mark_moved(&self, to: &str) -> Result<()> {
        self.engine().set_meta(MOVED_TO, to)
    }

    /// Where `leasehold migrate` moved this store, if it did.
    pub fn moved_to(&self) -> Result<Option<String>> {
        self.engine().meta(MOVED_TO)
    }

    /// Extend the lease of `owner`'s claim from now. Fenced on id + token +
    /// extracting; an expired lease that nobody re-claimed can still be renewed.
    pub fn renew(&self, owner: &Owner) -> Result<Fenced> {
        let out = self.engine().renew(owner)?;
        events::refused("renew", owner, &out);
        Ok(out)
    }

    /// [`Store::renew`] for many claims at once (every claim a worker holds),
    /// in one transaction on SQLite; one answer per owner, in order, each
    /// fenced on its own token.
    pub fn renew_many(&self, owners: &[Owner]) -> Result<Vec<Fenced>> {
        let out = self.engine().renew_many(owners)?;
        for (owner, answer) in owners.iter().zip(&out) {
            events::refused("renew", owner, answer);
        }
        Ok(out)
    }

    /// Accept the completion's result (its path relative to the mirror
    /// root, and its SHA-256) as the document's, with what else the
    /// completion carries ([`Completion`]). Fenced; a rejection means someone
    /// else owns it now. The claim is spent either way.
    ///
    /// A text to index longer than one part of the index (1 MiB) goes in
    /// parts: the further ones first, in short transactions of their own
    /// that renew the lease, invisible until this completion is accepted.
    pub fn complete(&self, claim: Claim, c: Completion<'_>) -> Result<Fenced> {
        let owner = claim.owner();
        let c = self.stage_further_parts(&owner, c.labelled(&claim.key))?;
        let out = self.engine().complete(&owner, c)?;
        events::refused("complete", &owner, &out);
        self.purge_search_parts_step()?;
        // Idle workers waiting to see whether the run is over look again.
        self.notify_work();
        Ok(out)
    }

    /// [`Store::complete`] for many claims (a worker's batch of small
    /// documents): in one transaction, or in as many as keep each one's text
    /// to index within 1 MiB (each short, however long the texts); one
    /// outcome per claim, each fenced on its own token.
    pub fn complete_many(&self, done: Vec<(Claim, Completion<'_>)>) -> Result<Vec<Fenced>> {
        let mut staged = Vec::with_capacity(done.len());
        for (claim, c) in done {
            let owner = claim.owner();
            let c = self.stage_further_parts(&owner, c.labelled(&claim.key))?;
            staged.push((owner, c));
        }
        let mut out = Vec::with_capacity(staged.len());
        for run in search::parts::by_text_bytes(&staged, |(_, c)| c.index_text().map_or(0, str::len)) {
            out.extend(self.engine().complete_many(run)?);
        }
        for ((owner, _), out) in staged.iter().zip(&out) {
            events::refused("complete", owner, out);
        }
        self.purge_search_parts_step()?;
        self.notify_work();
        Ok(out)
    }

    /// Record a failure: `retrying` with backoff, or `dead` when attempts are
    /// exhausted or `permanent`. Fenced; the claim is spent either way.
    pub fn fail(&self, claim: Claim, error: &str, permanent: bool) -> Result<Fenced> {
        let owner = claim.owner();
        let out = self.engine().fail(&owner, error, permanent)?;
        events::refused("fail", &owner, &out);
        self.notify_work();
        Ok(out)
    }

    /// Hand the document back without spending the attempt (shutdown). Fenced.
    pub fn release(&self, claim: Claim, reason: &str) -> Result<Fenced> {
        let owner = claim.owner();
        let out = self.engine().release(&owner, reason, None)?;
        events::refused("release", &owner, &out);
        self.notify_work();
        Ok(out)
    }

    /// Hand the document back without spending the attempt, and park it until
    /// what it waits for (see [`Parked`]): a full disk or a rate limit for a
    /// while, a locked account until that account recovers. Fenced.
    pub fn park(&self, claim: Claim, reason: &str, parked: Parked) -> Result<Fenced> {
        let owner = claim.owner();
        let out = self.engine().release(&owner, reason, Some(&parked))?;
        events::refused("release", &owner, &out);
        self.notify_work();
        Ok(out)
    }

    // ----- views on the shared credential's tables -----

    /// The auth gate's accounts: locks, probes, pool holds, expiry (DESIGN §6).
    pub fn accounts(&self) -> Accounts<'_> {
        Accounts(self)
    }

    /// Notices written by the gate, until some process sends them.
    pub fn notices(&self) -> Notices<'_> {
        Notices(self)
    }

    /// Accepted results waiting for the sink.
    pub fn outbox(&self) -> Outbox<'_> {
        Outbox(self)
    }

    // ----- reads -----

    /// One document by id.
    pub fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.engine().job(id)
    }

    /// One document by key.
    pub fn job_by_key(&self, key: &str) -> Result<Option<Job>> {
        self.engine().job_by_key(key)
    }

    /// A page of at most `n` documents after id `after` (exclusive), in id
    /// order, only those in `statuses` (all when empty). Page on with the last
    /// id returned; an empty page is the end.
    pub fn jobs_after(&self, statuses: &[crate::job::Status], after: JobId, n: usize) -> Result<Vec<Job>> {
        self.jobs_where(
            &JobFilter {
                statuses: statuses.to_vec(),
                ..JobFilter::default()
            },
            after,
            n,
        )
    }

    /// [`Store::jobs_after`] for the documents `filter` takes (say, the
    /// failed ones, or those whose source was removed).
    pub fn jobs_where(&self, filter: &JobFilter, after: JobId, n: usize) -> Result<Vec<Job>> {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.engine().jobs_after(filter, after, n)
    }

    /// Everything that happened to a document, oldest first.
    pub fn history(&self, id: JobId) -> Result<Vec<HistoryEntry>> {
        self.engine().history(id)
    }

    /// Documents per status.
    pub fn counts(&self) -> Result<Counts> {
        self.engine().counts()
    }

    /// The per-status counts with the dead and retrying split by why (source
    /// gone, parked on an account), for a command's summary.
    pub fn totals(&self) -> Result<Totals> {
        self.engine().totals()
    }

    /// Leases that have not run out, soonest expiry first.
    pub fn live_leases(&self) -> Result<Vec<LiveLease>> {
        self.engine().live_leases(self.now())
    }

    /// When something is next claimable: `Some(t <= now)` now, `Some(t)` later,
    /// `None` not without a new enqueue.
    pub fn next_claimable_at(&self) -> Result<Option<Millis>> {
        self.engine().next_claimable_at(self.now())
    }

    /// How many documents are being extracted (live or expired leases).
    pub fn counts_extracting(&self) -> Result<u64> {
        self.engine().count_extracting()
    }

    /// How many documents wait for a claim or are under one: discovered,
    /// retrying and extracting. Cheap at any size (the partial indexes of
    /// those statuses), where [`Store::counts`] reads every row.
    pub fn count_pending(&self) -> Result<u64> {
        self.engine().count_pending()
    }

    // ----- checks (doctor) -----

    /// (subject, message) for every row that breaks "at most one live owner"
    /// (a key on two rows, an extracting row without owner or lease, a
    /// settled row with an owner, a token shared by two rows).
    pub fn lease_violations(&self) -> Result<Vec<(String, String)>> {
        self.engine().lease_violations()
    }

    /// Up to `limit` indexed rows with ids after `after`, in id order: the
    /// accepted results a check of the mirror pages through.
    pub fn indexed_page(&self, after: i64, limit: i64) -> Result<Vec<IndexedRow>> {
        self.engine().indexed_page(after, limit)
    }

    /// Up to `limit` accepted results with ids after `after`, in id order:
    /// [`Store::indexed_page`] without the keys and checksums, for a look at
    /// each result in the mirror.
    pub fn accepted_page(&self, after: i64, limit: i64) -> Result<Vec<AcceptedResult>> {
        self.engine().accepted_page(after, limit)
    }

    // ----- the search index (DESIGN §12) -----

    /// At most `limit` documents whose accepted text matches `query` (in
    /// people's language, [`QuerySyntax::Plain`]), best first: key, score,
    /// and the accepted result's path in the mirror. [`Store::search_page`]
    /// says more; its [`Search::mirror`] gives SQLite's word index, which
    /// keeps no copy of the texts, the files to cut snippets from (this
    /// short form names no mirror, so there its snippets are empty).
    ///
    /// # Example
    /// ```
    /// use leasehold::mirror::Mirror;
    /// use leasehold::{Completion, NewDoc, Search, Store, StoreOptions};
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("q.db"), StoreOptions::default()).unwrap();
    /// let mirror = Mirror::open(dir.path().join("mirror")).unwrap();
    /// store.enqueue(&NewDoc::new("a.txt", "v1")).unwrap();
    /// let claim = store.claim("w1").unwrap().unwrap();
    /// let text = "계정이 잠겼습니다: see qemu-img";
    /// std::fs::write(mirror.root().join("a.txt"), text).unwrap();
    /// let done = Completion::new("a.txt", "abc").index(text);
    /// assert!(store.complete(claim, done).unwrap().is_accepted());
    /// let hits = store.search("계정", 10).unwrap();
    /// assert_eq!(hits[0].key, "a.txt");
    /// assert_eq!(store.search("qemu-img -windows", 10).unwrap().len(), 1);
    /// let page = store.search_page(&Search::new("계정").mirror(&mirror)).unwrap();
    /// assert_eq!(page.hits[0].snippet.marked("[", "]"), "[계정이] 잠겼습니다: see qemu-img");
    /// ```
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<Hit>> {
        Ok(self.search_page(&Search::new(query).limit(limit))?.hits)
    }

    /// One page of the documents whose accepted text matches, best first,
    /// and how many match in all. The query is in people's language by
    /// default ([`QuerySyntax::Plain`]): words (each searched as the phrase
    /// the index cuts it into), `"a phrase"`, `prefix*`, `-excluded`, `OR`,
    /// parentheses; or in FTS5's own ([`QuerySyntax::Fts5`]). Words in
    /// Hangul, Han, Kana and Thai are searched as prefixes, so `계정` finds
    /// `계정이`.
    ///
    /// # Failure
    /// [`Error::InvalidInput`] naming the query and what is wrong with it: a
    /// malformed query (in people's language, with the column), one longer
    /// than 4,096 bytes or with more than 64 terms;
    /// [`Error::SearchTimedOut`] for one that ran past its time limit.
    pub fn search_page(&self, search: &Search<'_>) -> Result<SearchPage> {
        let time_limit = search.time_limit.unwrap_or(self.options().search_timeout);
        self.engine().search(search, time_limit)
    }

    /// The tokenizer the search index is made with.
    pub fn search_tokenizer(&self) -> Result<Tokenizer> {
        self.engine().search_tokenizer()
    }

    /// Whether a query's words also find their other forms: what the data
    /// directory records ([`StoreOptions::stemming`]).
    pub fn search_stemming(&self) -> Result<Stemming> {
        let recorded = self.meta(search::stemming::STEMMING_META)?;
        Ok(Stemming::recorded(recorded.as_deref()))
    }

    /// The search index compared with the accepted results (`doctor`).
    pub fn check_search_index(&self) -> Result<IndexCheck> {
        self.engine().search_check()
    }

    /// Empty the search index, made again with `tokenizer`, which the data
    /// directory records (`leasehold reindex --tokenizer`). Nothing is
    /// searchable until the texts are put back ([`Store::reindex_texts`]).
    pub fn reset_search_index(&self, tokenizer: Tokenizer) -> Result<()> {
        self.engine().search_reset(tokenizer)
    }

    /// Put accepted texts read back from the mirror into the search index;
    /// a text goes in only if it is still its document's accepted result.
    /// In one transaction, or in as many as keep each short: a text longer
    /// than one part of the index goes in parts, as a completion's does
    /// (its further parts first, [`Store::reindex_stage_parts`]). Returns
    /// how many went in.
    pub fn reindex_texts(&self, docs: &[IndexDoc<'_>]) -> Result<usize> {
        let mut firsts = Vec::with_capacity(docs.len());
        for doc in docs {
            firsts.push(self.stage_further_parts_of_accepted(doc)?);
        }
        let mut n = 0;
        for run in search::parts::by_text_bytes(&firsts, |d| d.text.len()) {
            n += self.engine().search_put(run)?;
        }
        Ok(n)
    }

    /// Delete every search index row that is not its document's accepted
    /// text (the end of a reindex); how many.
    pub fn prune_search_index(&self) -> Result<usize> {
        self.engine().search_prune()
    }

    // ----- the history's figures and retention -----

    /// Every history line, oldest first, with its document's key and status
    /// (see [`HistoryLine`]). Reads the whole table: what `gc`'s retention
    /// keeps bounds it.
    pub fn history_lines(&self) -> Result<Vec<HistoryLine>> {
        self.engine().history_lines()
    }

    /// The history's figures for `leasehold metrics` (see [`HistoryFigures`]).
    pub fn history_figures(&self) -> Result<HistoryFigures> {
        self.engine().history_figures()
    }

    /// Apply the history retention ([`StoreOptions::history_keep`]): remove
    /// every history line older than it except each document's last; with
    /// `dry_run`, only count. "Now" is the injected clock's.
    pub fn prune_history(&self, dry_run: bool) -> Result<HistoryPrune> {
        let cutoff = self
            .now()
            .saturating_sub(duration_ms(self.inner.opts.history_keep));
        self.engine().prune_history(cutoff, dry_run)
    }

    // ----- SQLite only -----

    /// Run SQLite's `quick_check` (or the full `integrity_check`); the
    /// problems found. SQLite only: [`Error::SqliteOnly`] on PostgreSQL.
    pub fn check_integrity(&self, full: bool) -> Result<Vec<String>> {
        self.sqlite("integrity check")?.check_integrity(full)
    }

    /// [`Store::check_integrity`], one problem a line, each with the table
    /// it is about when the line tells ([`IntegrityProblem::is_search_index`]:
    /// whether rebuilding the search index mends it). SQLite only.
    pub fn check_integrity_by_table(&self, full: bool) -> Result<Vec<IntegrityProblem>> {
        self.sqlite("integrity check")?.check_integrity_by_table(full)
    }

    /// What is wrong with the search index's own structures (on SQLite,
    /// FTS5's inverted index against its stored texts: "malformed inverted
    /// index"), empty when it is sound; a read. Such an index is beyond
    /// mending row by row: [`crate::pipeline::reindex`] drops it and builds
    /// it again from the mirror. Always empty on PostgreSQL, whose server
    /// keeps its own indexes sound.
    pub fn search_index_damage(&self) -> Result<Vec<String>> {
        match &self.inner.backend {
            Backend::Sqlite(s) => s.search_index_damage(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Ok(Vec::new()),
        }
    }

    /// A cheap sign that the search index is damaged, for a search that
    /// found nothing: the first and the last indexed text searched for by a
    /// word of their own (two lookups, not SQLite's full check, which
    /// [`Store::search_index_damage`] runs). Some(what is wrong) when one is
    /// not found; always None on PostgreSQL.
    pub fn search_index_looks_damaged(&self) -> Result<Option<String>> {
        match &self.inner.backend {
            Backend::Sqlite(s) => s.search_finds_itself(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Ok(None),
        }
    }

    /// The journal mode in force (should be "wal"). SQLite only.
    pub fn journal_mode(&self) -> Result<String> {
        self.sqlite("journal mode")?.journal_mode()
    }

    /// Checkpoint the WAL now (also done periodically in the background).
    /// SQLite only.
    pub fn checkpoint(&self) -> Result<()> {
        self.sqlite("WAL checkpoint")?.checkpoint()
    }

    /// How long writers of every process waited for SQLite's write lock, as
    /// folded into the store so far (see [`WriteWaits`]); this handle's own
    /// pending waits are folded first. `None` on PostgreSQL, which has no
    /// database-wide write lock.
    pub fn write_waits(&self) -> Result<Option<WriteWaits>> {
        match &self.inner.backend {
            Backend::Sqlite(s) => {
                s.fold_write_waits()?;
                s.read(sqlite::write_waits::stored).map(Some)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Ok(None),
        }
    }

    /// Fold this handle's write-lock waits into the store now (a command's
    /// end); they are otherwise folded during writes, at most every few
    /// seconds. Nothing to do on PostgreSQL.
    pub fn fold_write_waits(&self) -> Result<()> {
        match &self.inner.backend {
            Backend::Sqlite(s) => s.fold_write_waits(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Ok(()),
        }
    }

    // ----- waking workers -----

    /// A token for [`Store::wait_for_work`]: take it *before* looking for work,
    /// so that a wake-up between the look and the wait is not lost.
    pub fn work_token(&self) -> u64 {
        self.inner
            .signal
            .generation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .count
    }

    /// Wait until another thread of this process enqueues, completes or hands
    /// back work after `token` was taken, or `timeout` passes. A condition
    /// variable, no polling.
    pub fn wait_for_work(&self, token: u64, timeout: Duration) {
        let s = &self.inner.signal;
        let mut g = s.generation.lock().unwrap_or_else(|e| e.into_inner());
        g.waiters += 1;
        let (mut g, _) = s
            .changed
            .wait_timeout_while(g, timeout, |g| g.count == token)
            .unwrap_or_else(|e| e.into_inner());
        g.waiters -= 1;
    }

    /// Wake every thread in [`Store::wait_for_work`].
    pub fn notify_work(&self) {
        self.inner.signal.notify();
    }

    /// What wakes this store's waiting workers, without holding the store.
    pub(crate) fn work_waker(&self) -> WorkWaker {
        WorkWaker(self.inner.signal.clone())
    }
}

/// The auth gate's accounts in the store ([`Store::accounts`]). Every write is
/// one transaction with the notice it causes (DESIGN §6).
#[derive(Debug, Clone, Copy)]
pub struct Accounts<'a>(&'a Store);

impl Accounts<'_> {
    /// May `holder` (a process) call the upstream with `account` now? See
    /// [`Admission`]. The holder is recorded with a granted probe slot.
    pub fn admit(&self, account: &str, holder: &str, policy: &GatePolicy) -> Result<Admission> {
        self.0.engine().admit(account, holder, policy)
    }

    /// Record what the upstream answered a request made with `account`
    /// (`permit` set when it was the probe). Locks, unlocks and notices follow
    /// the gate's rules; a recovery wakes the documents parked on the account.
    pub fn report(
        &self,
        account: &str,
        permit: Option<&ProbePermit>,
        answer: &Answer,
        policy: &GatePolicy,
    ) -> Result<GateChange> {
        let change = self.0.engine().report(account, permit, answer, policy)?;
        if matches!(change, GateChange::Recovered { .. }) {
            self.0.notify_work();
        }
        Ok(change)
    }

    /// Open a locked account by hand; recorded in the gate's history with `by`.
    /// False if it was not locked.
    pub fn unlock(&self, account: &str, by: &str) -> Result<bool> {
        let done = self.0.engine().unlock(account, by)?;
        self.0.notify_work();
        Ok(done)
    }

    /// Until when nobody should call the upstream with `account`, if not now
    /// (a read; see [`Admission`] for the write that decides).
    pub fn blocked_until(&self, account: &str, recheck: Duration) -> Result<Option<Millis>> {
        let (now, recheck) = (self.0.now(), duration_ms(recheck));
        self.0.engine().blocked_until(account, now, recheck)
    }

    /// The accounts whose lock has run out and whose probe slot is free (a
    /// read): whoever asks `admit` for one of them next makes the probe.
    pub fn probe_due(&self) -> Result<Vec<String>> {
        self.0.engine().probe_due(self.0.now())
    }

    /// Every account the database knows, with its state.
    pub fn states(&self) -> Result<Vec<AccountState>> {
        let now = self.0.now();
        self.0.engine().account_states(now)
    }

    /// The gate's history of `account`, oldest first.
    pub fn history(&self, account: &str) -> Result<Vec<GateEvent>> {
        self.0.engine().gate_history(account)
    }

    /// Expiry check for `account` expiring on day `expires_on` (days since
    /// 1970-01-01): from `warn_days` before, one warning notice a day across
    /// processes. Returns the days left.
    pub fn expiry(&self, account: &str, expires_on: i64, warn_days: i64) -> Result<i64> {
        self.0.engine().expiry(account, expires_on, warn_days)
    }

    /// The pool account `holder` uses now (sticky while its hold is renewed
    /// within `hold`), or `None` if `candidates` is empty.
    pub fn hold(
        &self,
        holder: &str,
        candidates: &[String],
        hold: Duration,
        policy: &GatePolicy,
    ) -> Result<Option<String>> {
        let ms = duration_ms(hold);
        self.0.engine().hold(holder, candidates, ms, policy)
    }

    /// Let go of `holder`'s pool account.
    pub fn unhold(&self, holder: &str) -> Result<()> {
        self.0.engine().unhold(holder)
    }
}

/// Notices waiting to be sent ([`Store::notices`]).
#[derive(Debug, Clone, Copy)]
pub struct Notices<'a>(&'a Store);

impl Notices<'_> {
    /// Take the oldest due notice for sending by `sender` (for `lease`).
    pub fn claim(&self, sender: &str, lease: Duration) -> Result<Option<PendingNotice>> {
        let ms = duration_ms(lease);
        self.0.engine().claim_notice(sender, ms)
    }

    /// Record the outcome of sending `n`; a failure is tried again after `retry`.
    pub fn done(&self, n: &PendingNotice, error: Option<&str>, retry: Duration) -> Result<()> {
        let ms = duration_ms(retry);
        self.0.engine().notice_done(n, error, ms)
    }

    /// Every notice, oldest first.
    pub fn all(&self) -> Result<Vec<NoticeRecord>> {
        self.0.engine().notices()
    }
}

/// Accepted results waiting for the sink ([`Store::outbox`]).
#[derive(Debug, Clone, Copy)]
pub struct Outbox<'a>(&'a Store);

impl Outbox<'_> {
    /// Claim the next batch of at most `n` results for the sink, for `lease`,
    /// if the shared pace allows one now; the next batch may go `interval` later.
    pub fn claim(&self, n: usize, lease: Duration, interval: Duration) -> Result<Drain> {
        let (lease, interval) = (duration_ms(lease), duration_ms(interval));
        self.0.engine().outbox_claim(n, lease, interval)
    }

    /// The batch got a 2xx: remove its rows. Returns how many were still ours.
    pub fn delivered(&self, batch: &OutboxBatch) -> Result<usize> {
        self.0.engine().outbox_delivered(batch)
    }

    /// The batch was not delivered: its rows wait again; no batch before `not_before`.
    pub fn undelivered(&self, batch: &OutboxBatch, not_before: Millis) -> Result<()> {
        self.0.engine().outbox_undelivered(batch, not_before)
    }

    /// Depth, bytes, dropped and delivered counts of the outbox.
    pub fn totals(&self) -> Result<OutboxTotals> {
        self.0.engine().outbox_totals()
    }
}

/// Keys are stored as given; they never reach a file-system path, but an empty
/// key or one with NUL cannot be told apart reliably by users.
fn check_key(key: &str) -> Result<()> {
    let reason = if key.is_empty() {
        "it is empty".to_owned()
    } else if key.contains('\0') {
        format!("{key:?} contains a NUL byte")
    } else {
        return Ok(());
    };
    Err(Error::InvalidInput {
        what: "document key",
        reason,
    })
}
