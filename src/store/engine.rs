//! The seam: the store's operations as one interface, with one implementation
//! per database engine (`sqlite/`, `postgres/`).
//!
//! [`crate::Store`] is the one facade callers see. It checks the input that
//! does not depend on the engine (document keys), keeps the in-process work
//! signal, and hands every operation to its engine through this trait. An
//! implementation owns its connections, its transactions and its retries, and
//! reads "now" from the injected clock of the options it was opened with,
//! never from the database server.
//!
//! Both implementations keep the same rules (DESIGN §2, §3): the same
//! claimable sets in the same order, fence + 1 per claim, a fresh token, the
//! fenced writes guarded by id + token + `extracting` and never by the expiry,
//! and one history row per transition or refusal with the same event names.
//! What an engine has not built answers [`crate::Error::NotOnPostgres`],
//! naming the operation.
//!
//! What belongs to one engine only (SQLite's file, journal mode, integrity
//! check, checkpoint, write-lock holder) is not here: `Backend` (in `mod.rs`) lets the
//! facade reach the SQLite engine for those and say so otherwise.

use std::collections::HashMap;

use super::completion::Completion;
use super::read::KnownSource;
use super::retention::HistoryPrune;
use super::search::{IndexCheck, IndexDoc, Search, SearchPage, Tokenizer};
use crate::clock::Millis;
use crate::error::Result;
use crate::job::{Claim, Fenced, Owner, Parked};

/// The store's operations on one database. Times passed in (`now`) come from
/// the facade's injected clock; operations that take none read the same clock
/// inside their transaction.
pub(crate) trait Engine: super::rules::Rules + Send + Sync {
    // ----- queue -----

    /// The stored fingerprint of each known key.
    fn source_stats(&self, keys: &[String]) -> Result<HashMap<String, KnownSource>>;
    /// Up to `limit` present (not gone) documents whose key comes after
    /// `after` (all, without it), in the keys' byte order, with their
    /// fingerprints.
    fn sources_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<(String, KnownSource)>>;
    /// A setting of the data directory.
    fn meta(&self, name: &str) -> Result<Option<String>>;
    /// The newest history line's identity (`None` where lines are not kept
    /// in the order written): see [`Store::history_mark`](super::Store::history_mark).
    fn history_mark(&self) -> Result<Option<String>>;
    /// The documents of the history lines written after the line `mark`
    /// names: see [`Store::history_docs_since`](super::Store::history_docs_since).
    fn history_docs_since(&self, mark: &str, most: i64) -> Result<Option<Vec<i64>>>;

    // ----- claims and fenced writes -----

    /// Claim up to `n` documents (n > 0) in one transaction.
    fn claim_batch(&self, worker: &str, n: usize) -> Result<Vec<Claim>>;
    /// Extend `owner`'s lease from now. Fenced.
    fn renew(&self, owner: &Owner) -> Result<Fenced>;
    /// Extend each of `owners`' leases from now, each fenced on its own
    /// token; one answer per owner, in order. An engine that can renews
    /// them all in one transaction.
    fn renew_many(&self, owners: &[Owner]) -> Result<Vec<Fenced>> {
        owners.iter().map(|o| self.renew(o)).collect()
    }
    /// Accept a result. Fenced.
    fn complete(&self, owner: &Owner, c: Completion<'_>) -> Result<Fenced>;
    /// Accept many results in one transaction, each fenced on its own token.
    fn complete_many(&self, done: &[(Owner, Completion<'_>)]) -> Result<Vec<Fenced>>;
    /// Record a failure. Fenced.
    fn fail(&self, owner: &Owner, error: &str, permanent: bool) -> Result<Fenced>;
    /// Hand back without spending the attempt, parked or not. Fenced.
    fn release(&self, owner: &Owner, reason: &str, parked: Option<&Parked>) -> Result<Fenced>;

    // ----- the history's figures and retention -----

    /// Remove (or with `dry_run` count) the history lines older than
    /// `cutoff` except each document's last, one window of documents a
    /// transaction.
    fn prune_history(&self, cutoff: Millis, dry_run: bool) -> Result<HistoryPrune>;

    // ----- the auth gate (DESIGN §6) -----

    // ----- notices and the outbox -----

    // ----- the search index (DESIGN §12) -----

    /// At most `limit` documents matching `query`, best first, stopped after
    /// `time_limit`; a malformed query, or one stopped, is
    /// [`crate::Error::InvalidInput`].
    fn search(&self, search: &Search<'_>, time_limit: std::time::Duration) -> Result<SearchPage>;
    /// The tokenizer the index is made with.
    fn search_tokenizer(&self) -> Result<Tokenizer>;
    /// The index compared with the accepted results.
    fn search_check(&self) -> Result<IndexCheck>;
    /// Empty the index, made again with `tokenizer` (recorded in meta).
    fn search_reset(&self, tokenizer: Tokenizer) -> Result<()>;
    /// Put texts read back from the mirror into the index, each only if it
    /// is still its document's accepted result; how many went in.
    fn search_put(&self, docs: &[IndexDoc<'_>]) -> Result<usize>;
    /// Delete every index row that is not its document's accepted text.
    fn search_prune(&self) -> Result<usize>;
    /// Put further parts of `owner`'s result text (`result`: path,
    /// checksum) into the index, staged until its completion is accepted,
    /// and renew its lease, in one transaction. Fenced. An engine that
    /// indexes only the first part renews alone.
    fn search_stage(
        &self,
        owner: &Owner,
        result: (&str, &str),
        labels: &crate::store::search::Labels,
        parts: &[&str],
    ) -> Result<Fenced>;
    /// Put further parts of `doc`'s accepted text into the index, staged
    /// under its checksum for [`Engine::search_put`] of its first part;
    /// `fresh` first retires what an earlier try staged.
    fn search_stage_accepted(&self, doc: &IndexDoc<'_>, parts: &[&str], fresh: bool) -> Result<()>;
    /// One short transaction of the index's upkeep, if any is due: retired
    /// parts deleted, or a step of purging deleted text from the index's
    /// pages (SQLite's FTS5, `sqlite/search_purge.rs`; with `now`, whatever
    /// deleted text there is, as `gc` asks). Whether more is left.
    fn search_purge(&self, now: bool) -> Result<bool>;
}
