//! The seam's PostgreSQL side: [`Engine`] for [`PgStore`]: the queue, the
//! claims, the fenced writes, the reads, the auth gate, the notices, the
//! outbox and the checks, each one transaction or one read; the claims and
//! fenced writes through group commit (`group.rs`). A completion that
//! carries text for the sink writes its outbox row in the transaction that
//! accepts the result.

use std::collections::HashMap;

use super::{read, retention, search, write, PgStore};
use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::job::{
    Claim, Counts, Enqueued, Fenced, HistoryEntry, Job, JobId, LiveLease, Owner, Parked, Status,
};
use crate::store::check::IndexedRow;
use crate::store::engine::Engine;
use crate::store::fencing::WriteOp;
use crate::store::figures::{self, HistoryFigures, HistoryLine};
use crate::store::gate::{
    self, AccountState, Admission, Answer, GateChange, GateEvent, GatePolicy, ProbePermit,
};
use crate::store::outbox::{self, Drain, NoticeRecord, OutboxBatch, OutboxTotals, PendingNotice};
use crate::store::queue::{self, NewDoc};
use crate::store::read::{KnownSource, Totals};
use crate::store::retention::HistoryPrune;
use crate::store::search::{Hit, IndexCheck, IndexDoc, Tokenizer};
use crate::store::Completion;

impl Engine for PgStore {
    fn enqueue_many(&self, docs: &[NewDoc]) -> Result<Vec<Enqueued>> {
        let max = self.max_attempts();
        self.write_tx(|tx, now| queue::enqueue_many(tx, now, max, docs))
    }

    fn requeue(&self, id: JobId, why: &str) -> Result<bool> {
        self.write_tx(|tx, now| queue::requeue(tx, now, id.0, why))
    }

    fn forget_result(&self, id: JobId, result_path: &str, why: &str) -> Result<bool> {
        self.write_tx(|tx, now| queue::forget_result(tx, now, id.0, result_path, why))
    }

    fn requeue_dead(&self, why: &str) -> Result<usize> {
        self.write_tx(|tx, now| queue::requeue_dead(tx, now, why))
    }

    fn begin_scan(&self) -> Result<i64> {
        self.write_tx(|tx, _| queue::begin_scan(tx))
    }

    fn record_scan(&self, scan: i64, unchanged: &[String], changed: &[NewDoc]) -> Result<Vec<Enqueued>> {
        let max = self.max_attempts();
        self.write_tx(|tx, now| queue::record_scan(tx, now, max, scan, unchanged, changed))
    }

    fn finish_scan(&self, scan: i64, why: &str) -> Result<usize> {
        self.write_tx(|tx, now| queue::finish_scan(tx, now, scan, why))
    }

    fn mark_gone(&self, keys: &[String], prefixes: &[String], why: &str) -> Result<usize> {
        self.write_tx(|tx, now| queue::mark_gone(tx, now, keys, prefixes, why))
    }

    fn source_stats(&self, keys: &[String]) -> Result<HashMap<String, KnownSource>> {
        self.read(|c| read::source_stats(c, keys))
    }

    fn meta(&self, name: &str) -> Result<Option<String>> {
        self.read(|c| read::meta(c, name))
    }

    fn set_meta(&self, name: &str, value: &str) -> Result<()> {
        self.write_tx(|tx, _| queue::set_meta(tx, name, value))
    }

    fn meta_set_once_among(&self, name: &str, value: &str, rivals: &[&str]) -> Result<(String, String)> {
        self.write_tx(|tx, _| queue::meta_set_once_among(tx, name, value, rivals))
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

    fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.read(|c| read::job_by_id(c, id.0))
    }

    fn job_by_key(&self, key: &str) -> Result<Option<Job>> {
        self.read(|c| read::job_by_key(c, key))
    }

    fn jobs_after(&self, statuses: &[Status], after: JobId, n: i64) -> Result<Vec<Job>> {
        self.read(|c| read::jobs_after(c, statuses, after.0, n))
    }

    fn history(&self, id: JobId) -> Result<Vec<HistoryEntry>> {
        self.read(|c| read::history(c, id.0))
    }

    fn counts(&self) -> Result<Counts> {
        self.read(read::counts)
    }

    fn totals(&self) -> Result<Totals> {
        self.read(read::totals)
    }

    fn live_leases(&self, now: Millis) -> Result<Vec<LiveLease>> {
        let skew = self.policy().clock_skew_ms;
        self.read(|c| read::live_leases(c, now, skew))
    }

    fn next_claimable_at(&self, now: Millis) -> Result<Option<Millis>> {
        let skew = self.policy().clock_skew_ms;
        self.read(|c| read::next_claimable_at(c, now, skew))
    }

    fn count_extracting(&self) -> Result<u64> {
        self.read(read::count_extracting)
    }

    fn history_figures(&self) -> Result<HistoryFigures> {
        self.read(figures::history_figures)
    }

    fn history_lines(&self) -> Result<Vec<HistoryLine>> {
        self.read(figures::history_lines)
    }

    /// Every window a write transaction, a dry run's too.
    fn prune_history(&self, cutoff: Millis, dry_run: bool) -> Result<HistoryPrune> {
        let last = self.read(retention::last_history_job)?;
        crate::store::retention::sweep(cutoff, last, |lo, hi| {
            self.write_tx(|tx, _| crate::store::retention::window(tx, lo, hi, cutoff, !dry_run))
        })
    }

    fn admit(&self, account: &str, holder: &str, policy: &GatePolicy) -> Result<Admission> {
        self.write_tx(|tx, now| gate::admit(tx, now, policy, account, holder))
    }

    fn report(
        &self,
        account: &str,
        permit: Option<&ProbePermit>,
        answer: &Answer,
        policy: &GatePolicy,
    ) -> Result<GateChange> {
        self.write_tx(|tx, now| gate::report(tx, now, policy, account, permit, answer))
    }

    fn unlock(&self, account: &str, by: &str) -> Result<bool> {
        self.write_tx(|tx, now| gate::unlock(tx, now, account, by))
    }

    fn blocked_until(&self, account: &str, now: Millis, recheck_ms: Millis) -> Result<Option<Millis>> {
        self.read(|c| gate::blocked_until(c, now, account, recheck_ms))
    }

    fn account_states(&self, now: Millis) -> Result<Vec<AccountState>> {
        self.read(|c| gate::states(c, now))
    }

    fn gate_history(&self, account: &str) -> Result<Vec<GateEvent>> {
        self.read(|c| gate::history(c, account))
    }

    fn expiry(&self, account: &str, expires_on: i64, warn_days: i64) -> Result<i64> {
        self.write_tx(|tx, now| gate::expiry(tx, now, account, expires_on, warn_days))
    }

    fn hold(
        &self,
        holder: &str,
        candidates: &[String],
        hold_ms: Millis,
        policy: &GatePolicy,
    ) -> Result<Option<String>> {
        self.write_tx(|tx, now| gate::hold(tx, now, policy, holder, candidates, hold_ms))
    }

    fn unhold(&self, holder: &str) -> Result<()> {
        self.write_tx(|tx, _| gate::unhold(tx, holder))
    }

    fn probe_due(&self, now: Millis) -> Result<Vec<String>> {
        self.read(|c| gate::probe_due(c, now))
    }

    fn claim_notice(&self, sender: &str, lease_ms: Millis) -> Result<Option<PendingNotice>> {
        self.write_tx(|tx, now| outbox::claim_notice(tx, now, sender, lease_ms))
    }

    fn notice_done(&self, n: &PendingNotice, error: Option<&str>, retry_ms: Millis) -> Result<()> {
        self.write_tx(|tx, now| outbox::notice_sent(tx, now, n, error, retry_ms))
    }

    fn notices(&self) -> Result<Vec<NoticeRecord>> {
        self.read(outbox::notices)
    }

    fn outbox_claim(&self, n: usize, lease_ms: Millis, interval_ms: Millis) -> Result<Drain> {
        let cap = self.policy().outbox;
        self.write_tx(|tx, now| outbox::claim_batch(tx, now, &cap, n, lease_ms, interval_ms))
    }

    fn outbox_delivered(&self, batch: &OutboxBatch) -> Result<usize> {
        self.write_tx(|tx, _| outbox::delivered(tx, batch))
    }

    fn outbox_undelivered(&self, batch: &OutboxBatch, not_before: Millis) -> Result<()> {
        self.write_tx(|tx, _| outbox::undelivered(tx, batch, not_before))
    }

    fn outbox_totals(&self) -> Result<OutboxTotals> {
        self.read(outbox::totals)
    }

    fn lease_violations(&self) -> Result<Vec<(String, String)>> {
        self.read(read::lease_violations)
    }

    fn indexed_page(&self, after: i64, limit: i64) -> Result<Vec<IndexedRow>> {
        self.read(|c| read::indexed_page(c, after, limit))
    }

    fn search(&self, query: &str, limit: usize, time_limit: std::time::Duration) -> Result<Vec<Hit>> {
        self.read(|c| search::search(c, query, limit, time_limit))?
            .into_hits(query)
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
    fn search_stage(&self, owner: &Owner, _result: (&str, &str), _parts: &[&str]) -> Result<Fenced> {
        self.renew(owner)
    }

    fn search_stage_accepted(&self, _doc: &IndexDoc<'_>, _parts: &[&str], _fresh: bool) -> Result<()> {
        Ok(())
    }

    fn search_purge(&self) -> Result<bool> {
        Ok(false)
    }
}

/// The PostgreSQL edition searches with PostgreSQL's `simple` configuration
/// only (prefix terms make Korean particles findable, as on SQLite).
pub(crate) fn only_simple(tokenizer: Tokenizer) -> Result<()> {
    if tokenizer == Tokenizer::PgSimple {
        return Ok(());
    }
    Err(Error::NotOnPostgres {
        operation: "a tokenizer choice (the PostgreSQL edition searches with its 'simple' configuration)",
    })
}
