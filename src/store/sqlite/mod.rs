//! The SQLite engine: the default, one file on one machine (DESIGN §7).
//!
//! Its rooms are the files beside this one: the rows of every area the
//! rules above decide on (`queue.rs`, `read.rs`, `check.rs`, `gate.rs`,
//! `outbox.rs`, `retention.rs`, `meta.rs`, and `write.rs` for claims and
//! fenced writes), its transactions in `tx.rs` (group commit, turnstile,
//! `BEGIN IMMEDIATE`, bounded BUSY retries); here
//! each operation of [`Engine`] is one of those functions inside one
//! transaction or one read. What only SQLite has (the file's path, the
//! journal mode, the integrity check, checkpoints, who holds the write lock)
//! is on [`Sqlite`] itself, not on the interface.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::store::engine::Engine;
use crate::store::fencing::{WriteOp, WriteOut};
use crate::store::options::Policy;
use crate::store::read::KnownSource;
use crate::store::retention::{sweep as sweep_history, window as history_window, HistoryPrune};
use crate::store::search::{IndexCheck, IndexDoc, Search, SearchPage, Tokenizer, TOKENIZER_META};
use crate::store::sqlite::search_table::Chosen;
use checkpoint::Checkpointer;
use open::Access;
use pool::{ClosesConnections, Pool, Pooled};
use rows::Rows;
use turnstile::Turnstile;

use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::group::GroupCommit;
use crate::job::{Claim, Fenced, Owner, Parked};
use crate::store::completion::Completion;
use crate::store::options::StoreOptions;
use crate::store::rules::Driver;

pub(crate) mod checkpoint;
pub(crate) mod holder;
pub(crate) mod open;
pub(crate) mod pool;
pub(crate) mod turnstile;
pub(crate) mod tx;
pub(crate) mod write;
pub(crate) mod write_waits;

mod check;
pub(crate) mod meta;
#[cfg(test)]
mod plan;
mod queue;
mod read;
mod retention;
pub(crate) mod rows;
pub(crate) mod search_index;
pub(crate) mod search_purge;
mod search_rank;
mod search_salvage;
mod search_snippets;
pub(crate) mod search_table;

mod gate;
mod outbox;

/// One SQLite file: its pool, its group-commit queue, its turnstile and its
/// checkpointer.
pub(crate) struct Sqlite {
    pub(crate) path: PathBuf,
    pub(crate) pool: Pool,
    pub(crate) opts: StoreOptions,
    pub(crate) policy: Policy,
    pub(crate) group: GroupCommit<WriteOp, Result<WriteOut>>,
    pub(crate) turnstile: Arc<Turnstile>,
    /// The connection write transactions run on (see `tx.rs`: `writer_conn`),
    /// taken at the first write.
    pub(crate) writer: std::sync::Mutex<Option<Pooled>>,
    /// This handle's write-lock waits not yet folded into the store.
    pub(crate) waits: write_waits::Pending,
    /// Read-write, or read only (every write then refused, see `tx.rs`).
    pub(crate) access: Access,
    // Held for its Drop: stops and joins the checkpoint thread with the last handle.
    _checkpointer: Option<Checkpointer>,
    // Dropped last, after every field that holds the pool: waits for the
    // pool's connections to close (`pool.rs`).
    _closes: ClosesConnections,
}

impl Sqlite {
    /// Validate, migrate and pool the file at `path`.
    pub(crate) fn open(path: &Path, opts: StoreOptions) -> Result<Sqlite> {
        let path = path.to_path_buf();
        let (pool, access) = open::open_pool(&path, &opts)?;
        let turnstile = Arc::new(Turnstile::open(&path, opts.busy_timeout));
        let checkpointer = opts
            .checkpoint_every
            .filter(|_| access == Access::ReadWrite)
            .and_then(|every| Checkpointer::start(&pool, &turnstile, &path, every, opts.busy_timeout));
        let policy = Policy::of(&opts);
        let closes = pool.closing(&path);
        let sqlite = Sqlite {
            path,
            pool,
            opts,
            policy,
            group: GroupCommit::new(|reason| {
                Err(Error::InvalidInput {
                    what: "group commit",
                    reason: reason.into(),
                })
            }),
            turnstile,
            writer: std::sync::Mutex::new(None),
            waits: write_waits::Pending::default(),
            access,
            _checkpointer: checkpointer,
            _closes: closes,
        };
        let writable = access == Access::ReadWrite;
        if writable && (sqlite.opts.create || sqlite.opts.tokenizer.is_some()) {
            sqlite.choose_tokenizer()?;
        }
        Ok(sqlite)
    }

    /// Now, from the injected clock.
    pub(crate) fn now(&self) -> Millis {
        self.opts.clock.now_ms()
    }

    /// The schema version applied to the file (its `user_version`).
    pub(crate) fn applied_version(&self) -> Result<i64> {
        open::read_user_version(&*self.conn()?, &self.path)
    }

    /// SQLite's `quick_check` (or the full `integrity_check`); the problems found.
    pub(crate) fn check_integrity(&self, full: bool) -> Result<Vec<String>> {
        self.read(|c| check::integrity(c, full))
    }

    /// [`Sqlite::check_integrity`]'s problems, each with the table it is about.
    pub(crate) fn check_integrity_by_table(
        &self,
        full: bool,
    ) -> Result<Vec<crate::store::check::IntegrityProblem>> {
        self.read(|c| check::integrity_by_table(c, full))
    }

    /// A cheap sign that the search index's pages are damaged (see `check.rs`).
    pub(crate) fn search_finds_itself(&self) -> Result<Option<String>> {
        self.read(check::search_finds_itself)
    }

    /// What FTS5 finds wrong with the search index's structures; empty when sound.
    pub(crate) fn search_index_damage(&self) -> Result<Vec<String>> {
        self.read(check::search_index_damage)
    }

    /// The journal mode in force (should be "wal").
    pub(crate) fn journal_mode(&self) -> Result<String> {
        self.read(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
    }

    /// Checkpoint the WAL now.
    ///
    /// A checkpoint that finds another one running (the background thread's)
    /// does nothing and says so (`busy`), and one that a reader's older
    /// snapshot holds back copies only part of the log: it is tried again
    /// until every frame is in the file, for at most the busy timeout, so
    /// that "now" means now.
    pub(crate) fn checkpoint(&self) -> Result<()> {
        let give_up = std::time::Instant::now() + self.opts.busy_timeout;
        loop {
            let (busy, log, copied): (i64, i64, i64) = self.read(|c| {
                c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
            })?;
            if (busy == 0 && copied == log) || std::time::Instant::now() >= give_up {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    fn fenced(&self, op: WriteOp) -> Result<Fenced> {
        self.submit(op)?.fenced()
    }
}

/// The document, sequence and rowid of the line a
/// [`history_mark`](Engine::history_mark) names (`job_id:seq@rowid`);
/// `None` for a text that is not one (a mark of an earlier version).
fn parse_mark(mark: &str) -> Option<(i64, i64, i64)> {
    let (job_id, rest) = mark.split_once(':')?;
    let (seq, rowid) = rest.split_once('@')?;
    Some((job_id.parse().ok()?, seq.parse().ok()?, rowid.parse().ok()?))
}

impl Engine for Sqlite {
    fn source_stats(&self, keys: &[String]) -> Result<HashMap<String, KnownSource>> {
        self.read(|c| read::source_stats(c, keys))
    }

    fn sources_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<(String, KnownSource)>> {
        self.read(|c| read::sources_after(c, after, limit))
    }

    fn meta(&self, name: &str) -> Result<Option<String>> {
        self.read(|c| meta::meta(c, name))
    }

    fn history_mark(&self) -> Result<Option<String>> {
        use rusqlite::OptionalExtension;
        // The line with the largest rowid is the newest: the table is
        // appended to (schema version 17). It is named by its document and
        // sequence, which no later line takes again, and by its rowid: the
        // lines after it are the ones with larger rowids
        // (`history_docs_since`) only in the file that wrote them, and a
        // copy of the table (`migrate`) numbers them in another order.
        self.read(|c| {
            c.query_row(
                "SELECT job_id || ':' || seq || '@' || rowid FROM history ORDER BY rowid DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
        })
    }

    fn history_docs_since(&self, mark: &str, most: i64) -> Result<Option<Vec<i64>>> {
        use rusqlite::OptionalExtension;
        let Some((job_id, seq, from)) = parse_mark(mark) else {
            return Ok(None);
        };
        // Lines after the mark's are the ones with a larger rowid while its
        // line still has the rowid the mark names (see `history_mark`). The
        // rowids between it and the newest bound how many there are
        // (deleted lines only leave gaps), so that bound is checked before
        // any line is read.
        self.read(|c| {
            let at: Option<i64> = c
                .query_row(
                    "SELECT rowid FROM history WHERE job_id = ?1 AND seq = ?2",
                    rusqlite::params![job_id, seq],
                    |r| r.get(0),
                )
                .optional()?;
            if at != Some(from) {
                return Ok(None);
            }
            let newest: i64 = c.query_row("SELECT coalesce(max(rowid), 0) FROM history", [], |r| r.get(0))?;
            if newest.saturating_sub(from) > most {
                return Ok(None);
            }
            let mut docs = c.prepare_cached("SELECT DISTINCT job_id FROM history WHERE rowid > ?1")?;
            let docs = docs
                .query_map([from], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()?;
            Ok(Some(docs))
        })
    }

    fn claim_batch(&self, worker: &str, n: usize) -> Result<Vec<Claim>> {
        self.submit(WriteOp::claim(worker, n))?.claims()
    }

    /// A renewal that would change nothing (the row was set in this same
    /// millisecond, typically by the claim or by the renewal before the
    /// previous stage, so its lease already runs to now + lease) is answered
    /// from a read that confirms the ownership, without a write transaction.
    /// Anything else, including a refusal (which history records), goes
    /// through the write.
    fn renew(&self, owner: &Owner) -> Result<Fenced> {
        let (now, lease_ms) = (self.now(), self.policy.lease_ms);
        if self.read(|c| read::renewal_is_noop(c, owner, now, lease_ms))? {
            return Ok(Fenced::Accepted);
        }
        self.fenced(WriteOp::Renew(owner.clone()))
    }

    /// One write transaction for all of them (a worker's held claims, renewed
    /// together by its heartbeat), one statement per claim.
    fn renew_many(&self, owners: &[Owner]) -> Result<Vec<Fenced>> {
        match owners {
            [] => Ok(Vec::new()),
            [one] => Ok(vec![self.renew(one)?]),
            _ => {
                let policy = &self.policy;
                self.write_tx(|tx, now| owners.iter().map(|o| write::renew(tx, now, policy, o)).collect())
            }
        }
    }

    fn complete(&self, owner: &Owner, c: Completion<'_>) -> Result<Fenced> {
        self.fenced(WriteOp::complete(owner, c))
    }

    fn complete_many(&self, done: &[(Owner, Completion<'_>)]) -> Result<Vec<Fenced>> {
        let policy = &self.policy;
        self.write_tx(|tx, now| write::complete_each(tx, now, policy, done))
    }

    fn fail(&self, owner: &Owner, error: &str, permanent: bool) -> Result<Fenced> {
        self.fenced(WriteOp::Fail {
            owner: owner.clone(),
            error: error.to_owned(),
            permanent,
        })
    }

    fn release(&self, owner: &Owner, reason: &str, parked: Option<&Parked>) -> Result<Fenced> {
        self.fenced(WriteOp::Release {
            owner: owner.clone(),
            reason: reason.to_owned(),
            parked: parked.cloned(),
        })
    }

    /// Every window a write transaction; with `dry_run`, a read.
    fn prune_history(&self, cutoff: Millis, dry_run: bool) -> Result<HistoryPrune> {
        let last = self.read(retention::last_history_job)?;
        sweep_history(cutoff, last, |lo, hi| {
            if dry_run {
                self.read(|c| history_window(&mut Rows(c), lo, hi, cutoff, false))
            } else {
                self.write_tx(|tx, _| history_window(&mut Rows(tx), lo, hi, cutoff, true))
            }
        })
    }

    fn search(&self, search: &Search<'_>, time_limit: std::time::Duration) -> Result<SearchPage> {
        let mut c = self.conn()?;
        search_index::search(&mut c, search, time_limit)
            .map_err(|e| Error::from_sqlite(&self.path, e))?
            .into_page(search.query())
    }

    fn search_tokenizer(&self) -> Result<Tokenizer> {
        self.read(search_table::table_tokenizer)
    }

    fn search_check(&self) -> Result<IndexCheck> {
        self.read(search_index::check)
    }

    fn search_reset(&self, tokenizer: Tokenizer) -> Result<()> {
        refuse_pg_tokenizer(tokenizer)?;
        match self.write_tx(|tx, _| search_table::reset(tx, tokenizer)) {
            // Its pages are damaged: dropping it reads them (`search_salvage.rs`).
            Err(e) if e.is_corrupt() => self.search_reset_hard(tokenizer),
            done => done,
        }
    }

    fn search_put(&self, docs: &[IndexDoc<'_>]) -> Result<usize> {
        self.write_tx(|tx, _| search_index::put_if_accepted(tx, docs))
    }

    fn search_prune(&self) -> Result<usize> {
        self.write_tx(|tx, _| search_index::prune(tx))
    }

    fn search_stage(
        &self,
        owner: &Owner,
        result: (&str, &str),
        labels: &crate::store::search::Labels,
        parts: &[&str],
    ) -> Result<Fenced> {
        let policy = &self.policy;
        self.write_tx(|tx, now| {
            let renewed = write::renew(tx, now, policy, owner)?;
            if renewed.is_accepted() {
                search_index::put_parts(tx, owner.id.0, &owner.token, result, labels, parts)?;
            }
            Ok(renewed)
        })
    }

    fn search_stage_accepted(&self, doc: &IndexDoc<'_>, parts: &[&str], fresh: bool) -> Result<()> {
        self.write_tx(|tx, _| {
            if fresh {
                search_index::retire_staged(tx, doc.id, doc.checksum)?;
            }
            let labels = search_index::indexed_labels_of(tx, doc.id)?;
            let result = (doc.result_path, doc.checksum);
            search_index::put_parts(tx, doc.id, doc.checksum, result, &labels, parts)
        })
    }

    fn search_purge(&self, now: bool) -> Result<bool> {
        match self.read(|c| search_purge::next(c, now))? {
            search_purge::Upkeep::Parts => {
                let more = self.write_tx(|tx, _| search_index::purge_retired(tx))?;
                Ok(more || self.read(|c| search_purge::due(c, now))?)
            }
            search_purge::Upkeep::Purge => self.write_tx(|tx, _| search_purge::step(tx, now)),
            search_purge::Upkeep::Nothing => Ok(false),
        }
    }
}

/// PostgreSQL's configuration is no FTS5 tokenizer.
fn refuse_pg_tokenizer(tokenizer: Tokenizer) -> Result<()> {
    if tokenizer == Tokenizer::PgSimple {
        return Err(Error::InvalidInput {
            what: "tokenizer",
            reason: "simple is PostgreSQL's; SQLite's are unicode61 and trigram".into(),
        });
    }
    Ok(())
}

impl Sqlite {
    /// Make the index's tokenizer the one asked for (or recorded), while the
    /// index is empty; refuse to change it under text made with another one.
    /// A read first, so that an open that changes nothing takes no write lock.
    fn choose_tokenizer(&self) -> Result<()> {
        let requested = self.opts.tokenizer;
        if let Some(t) = requested {
            refuse_pg_tokenizer(t)?;
        }
        let (table, recorded) = self.read(|c| {
            let recorded = meta::meta(c, TOKENIZER_META)?;
            Ok((search_table::table_tokenizer(c)?, recorded))
        })?;
        let recorded = recorded.as_deref().and_then(Tokenizer::from_spec);
        let wanted = requested.or(recorded).unwrap_or(table);
        if wanted == table && (requested.is_none() || recorded == requested) {
            return Ok(());
        }
        match self.write_tx(|tx, _| search_table::choose(tx, requested))? {
            Chosen::InForce(_) => Ok(()),
            Chosen::Mismatch { table, wanted } => Err(Error::InvalidInput {
                what: "tokenizer",
                reason: format!(
                    "{}: its search index is made with {table}, not {wanted}; to change it run \
                     `leasehold reindex --tokenizer {wanted}`",
                    self.path.display()
                ),
            }),
        }
    }
}

impl Driver for Sqlite {
    type Error = rusqlite::Error;
    type Tx<'t> = Rows<'t>;
    type Reader<'t> = Rows<'t>;

    fn write<T>(&self, mut f: impl FnMut(&mut Rows<'_>, Millis) -> rusqlite::Result<T>) -> Result<T> {
        self.write_tx(|c, now| f(&mut Rows(c), now))
    }

    fn read<T>(&self, mut f: impl FnMut(&mut Rows<'_>) -> rusqlite::Result<T>) -> Result<T> {
        Sqlite::read(self, |c| f(&mut Rows(c)))
    }

    fn policy(&self) -> &Policy {
        &self.policy
    }

    fn max_attempts(&self) -> i64 {
        i64::from(self.opts.max_attempts)
    }

    fn grant_skew(&self) -> Millis {
        0
    }
}
