//! The seam's PostgreSQL side: [`Engine`] for [`PgStore`]: the queue, the
//! claims, the fenced writes, the reads, the auth gate, the notices, the
//! outbox and the checks, each one transaction or one read; the claims and
//! fenced writes through group commit (`group.rs`). A completion that
//! carries text for the sink writes its outbox row in the transaction that
//! accepts the result.

use std::collections::HashMap;

use super::{only_simple, read, retention, write, PgStore};
use crate::clock::Millis;
use crate::error::Result;
use crate::job::{Claim, Fenced, Owner, Parked};
use crate::store::completion::Completion;
use crate::store::engine::Engine;
use crate::store::fencing::WriteOp;
use crate::store::postgres::search_index as search;
use crate::store::read::KnownSource;
use crate::store::retention::HistoryPrune;
use crate::store::search::{IndexCheck, IndexDoc, Search, SearchPage, Tokenizer};

impl Engine for PgStore {
    fn source_stats(&self, keys: &[String]) -> Result<HashMap<String, KnownSource>> {
        self.read(|c| read::source_stats(c, keys))
    }

    fn sources_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<(String, KnownSource)>> {
        self.read(|c| read::sources_after(c, after, limit))
    }

    fn meta(&self, name: &str) -> Result<Option<String>> {
        self.read(|c| read::meta(c, name))
    }

    fn history_mark(&self) -> Result<Option<String>> {
        // A heap keyed by document and sequence: nothing says which line
        // came last. Nothing asks on this edition (its mirror stamps no
        // shards, `mirror/shard_stamp.rs`).
        Ok(None)
    }

    fn history_docs_since(&self, _mark: &str, _most: i64) -> Result<Option<Vec<i64>>> {
        // No marks here (`history_mark`), so none to read after.
        Ok(None)
    }

    fn claim_batch(&self, worker: &str, n: usize) -> Result<Vec<Claim>> {
        self.submit(WriteOp::claim(worker, n))?.claims()
    }

    fn renew(&self, owner: &Owner) -> Result<Fenced> {
        self.submit(WriteOp::Renew(owner.clone()))?.fenced()
    }

    fn complete(&self, owner: &Owner, c: Completion<'_>) -> Result<Fenced> {
        let c = search::gated(c, self.policy().search_index);
        self.submit(WriteOp::complete(owner, c))?.fenced()
    }

    /// Many completions in one transaction: one UPDATE and one history
    /// INSERT for all (`write::complete_each`).
    fn complete_many(&self, done: &[(Owner, Completion<'_>)]) -> Result<Vec<Fenced>> {
        let cap = self.policy().outbox;
        let on = self.policy().search_index;
        let done: Vec<(Owner, Completion<'_>)> = done
            .iter()
            .map(|(o, c)| (o.clone(), search::gated(c.clone(), on)))
            .collect();
        self.write_tx(|tx, now| write::complete_each(tx, now, &cap, &done))
    }

    fn fail(&self, owner: &Owner, error: &str, permanent: bool) -> Result<Fenced> {
        self.submit(WriteOp::Fail {
            owner: owner.clone(),
            error: error.to_owned(),
            permanent,
        })?
        .fenced()
    }

    fn release(&self, owner: &Owner, reason: &str, parked: Option<&Parked>) -> Result<Fenced> {
        self.submit(WriteOp::Release {
            owner: owner.clone(),
            reason: reason.to_owned(),
            parked: parked.cloned(),
        })?
        .fenced()
    }

    /// Every window a write transaction, a dry run's too.
    fn prune_history(&self, cutoff: Millis, dry_run: bool) -> Result<HistoryPrune> {
        let last = self.read(retention::last_history_job)?;
        crate::store::retention::sweep(cutoff, last, |lo, hi| {
            self.write_tx(|tx, _| crate::store::retention::window(tx, lo, hi, cutoff, !dry_run))
        })
    }

    fn search(&self, search: &Search<'_>, time_limit: std::time::Duration) -> Result<SearchPage> {
        self.read_tx(|tx| search::search(tx, search, time_limit))?
            .into_page(search.query())
    }

    fn search_tokenizer(&self) -> Result<Tokenizer> {
        Ok(Tokenizer::PgSimple)
    }

    fn search_check(&self) -> Result<IndexCheck> {
        self.read(search::check)
    }

    fn search_reset(&self, tokenizer: Tokenizer) -> Result<()> {
        only_simple(tokenizer)?;
        self.write_tx(|tx, _| search::reset(tx))
    }

    fn search_put(&self, docs: &[IndexDoc<'_>]) -> Result<usize> {
        self.write_tx(|tx, _| search::put_if_accepted(tx, docs))
    }

    fn search_prune(&self) -> Result<usize> {
        self.write_tx(|tx, _| search::prune(tx))
    }

    /// PostgreSQL indexes a document's first 200,000 characters, all in
    /// its first part: the further parts are not kept, the lease is renewed.
    fn search_stage(
        &self,
        owner: &Owner,
        _result: (&str, &str),
        _labels: &crate::store::search::Labels,
        _parts: &[&str],
    ) -> Result<Fenced> {
        self.renew(owner)
    }

    fn search_stage_accepted(&self, _doc: &IndexDoc<'_>, _parts: &[&str], _fresh: bool) -> Result<()> {
        Ok(())
    }

    /// PostgreSQL rewrites a deleted row's GIN entries itself (VACUUM).
    fn search_purge(&self, _now: bool) -> Result<bool> {
        Ok(false)
    }
}

impl crate::store::rules::Driver for PgStore {
    type Error = super::conn::Fail;
    type Tx<'t> = super::conn::Tx<'t>;
    type Reader<'t> = ::postgres::Client;

    fn write<T>(&self, f: impl FnMut(&mut super::conn::Tx<'_>, Millis) -> super::conn::Sql<T>) -> Result<T> {
        self.write_tx(f)
    }

    fn read<T>(&self, f: impl FnMut(&mut ::postgres::Client) -> super::conn::Sql<T>) -> Result<T> {
        PgStore::read(self, f)
    }

    fn policy(&self) -> &crate::store::options::Policy {
        PgStore::policy(self)
    }

    fn max_attempts(&self) -> i64 {
        PgStore::max_attempts(self)
    }

    fn grant_skew(&self) -> Millis {
        self.policy().clock_skew_ms
    }
}
