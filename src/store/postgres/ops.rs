//! The seam's PostgreSQL side: [`Engine`] for [`PgStore`]. The queue, the
//! claims, the fenced writes, the reads and the checks are built; the auth
//! gate, the notices and the outbox are not yet, and answer
//! [`Error::NotOnPostgres`] naming the operation: never a panic, never a
//! silent no-op. A completion that would queue text for the sink is refused
//! the same way, before anything is written, since the outbox row must be
//! written in the transaction that accepts the result.

use std::collections::HashMap;

use super::{queue, read, write, PgStore};
use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::job::{
    Claim, Counts, Enqueued, Fenced, HistoryEntry, Job, JobId, LiveLease, Owner, Parked, Status,
};
use crate::store::check::IndexedRow;
use crate::store::engine::Engine;
use crate::store::gate::{AccountState, Admission, Answer, GateChange, GateEvent, GatePolicy, ProbePermit};
use crate::store::outbox::{Drain, NoticeRecord, OutboxBatch, OutboxTotals, PendingNotice};
use crate::store::queue::NewDoc;
use crate::store::read::{KnownSource, Totals};
use crate::store::Completion;

/// The refusal of an operation the PostgreSQL edition does not have yet.
fn not_yet<T>(operation: &'static str) -> Result<T> {
    Err(Error::NotOnPostgres { operation })
}

/// Refuse completions that carry text for the sink while the outbox is not
/// built here: accepting the result without its outbox row would break the
/// rule that an accepted result is queued exactly once.
fn refuse_delivery(done: &[Completion<'_>]) -> Result<()> {
    if done.iter().any(|c| c.deliver.is_some()) {
        return not_yet("the outbox (a completion with text for the sink)");
    }
    Ok(())
}

impl Engine for PgStore {
    fn enqueue_many(&self, docs: &[NewDoc]) -> Result<Vec<Enqueued>> {
        let max = self.max_attempts();
        self.write_tx(|tx, now| docs.iter().map(|d| queue::enqueue(tx, now, max, d)).collect())
    }

    fn requeue(&self, id: JobId, why: &str) -> Result<bool> {
        self.write_tx(|tx, now| queue::requeue(tx, now, id.0, why))
    }

    fn requeue_dead(&self, why: &str) -> Result<usize> {
        self.write_tx(|tx, now| {
            let mut n = 0;
            for id in queue::dead_ids(tx)? {
                n += usize::from(queue::requeue(tx, now, id, why)?);
            }
            Ok(n)
        })
    }

    fn begin_scan(&self) -> Result<i64> {
        self.write_tx(|tx, _| queue::begin_scan(tx))
    }

    fn record_scan(&self, scan: i64, unchanged: &[String], changed: &[NewDoc]) -> Result<Vec<Enqueued>> {
        let max = self.max_attempts();
        self.write_tx(|tx, now| {
            let mut out = Vec::with_capacity(changed.len());
            for d in changed {
                out.push(queue::enqueue(tx, now, max, d)?);
                queue::mark_seen(tx, scan, &d.key)?;
            }
            for k in unchanged {
                queue::mark_seen(tx, scan, k)?;
            }
            Ok(out)
        })
    }

    fn finish_scan(&self, scan: i64, why: &str) -> Result<usize> {
        self.write_tx(|tx, now| queue::mark_unseen_gone(tx, now, scan, why))
    }

    fn source_stats(&self, keys: &[String]) -> Result<HashMap<String, KnownSource>> {
        self.read(|c| read::source_stats(c, keys))
    }

    fn meta(&self, name: &str) -> Result<Option<String>> {
        self.read(|c| read::meta(c, name))
    }

    fn set_meta(&self, name: &str, value: &str) -> Result<()> {
        self.write_tx(|tx, _| queue::meta_set(tx, name, value))
    }

    fn meta_set_once_among(&self, name: &str, value: &str, rivals: &[&str]) -> Result<(String, String)> {
        self.write_tx(|tx, _| queue::meta_set_once_among(tx, name, value, rivals))
    }

    fn claim_batch(&self, worker: &str, n: usize) -> Result<Vec<Claim>> {
        let policy = self.policy();
        self.write_tx(|tx, now| write::claim(tx, now, policy, worker, n))
    }

    fn renew(&self, owner: &Owner) -> Result<Fenced> {
        let policy = self.policy();
        self.write_tx(|tx, now| write::renew(tx, now, policy, owner))
    }

    fn finish(&self, owner: &Owner, c: &Completion<'_>) -> Result<Fenced> {
        refuse_delivery(std::slice::from_ref(c))?;
        self.write_tx(|tx, now| write::complete(tx, now, owner, (c.result_path, c.checksum), c.note))
    }

    /// One completion after another in one transaction: the same rows and
    /// history as one at a time (SQLite's batch statement is an optimisation
    /// of exactly that).
    fn finish_many(&self, done: &[(Owner, Completion<'_>)]) -> Result<Vec<Fenced>> {
        let completions: Vec<Completion<'_>> = done.iter().map(|(_, c)| *c).collect();
        refuse_delivery(&completions)?;
        self.write_tx(|tx, now| {
            done.iter()
                .map(|(o, c)| write::complete(tx, now, o, (c.result_path, c.checksum), c.note))
                .collect()
        })
    }

    fn fail(&self, owner: &Owner, error: &str, permanent: bool) -> Result<Fenced> {
        let policy = self.policy();
        self.write_tx(|tx, now| write::fail(tx, now, policy, owner, error, permanent))
    }

    fn release(&self, owner: &Owner, reason: &str, parked: Option<&Parked>) -> Result<Fenced> {
        self.write_tx(|tx, now| write::release(tx, now, owner, reason, parked))
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

    fn admit(&self, _account: &str, _holder: &str, _policy: &GatePolicy) -> Result<Admission> {
        not_yet("the auth gate (admit)")
    }

    fn report(
        &self,
        _account: &str,
        _permit: Option<&ProbePermit>,
        _answer: &Answer,
        _policy: &GatePolicy,
    ) -> Result<GateChange> {
        not_yet("the auth gate (report)")
    }

    fn unlock(&self, _account: &str, _by: &str) -> Result<bool> {
        not_yet("the auth gate (unlock)")
    }

    fn blocked_until(&self, _account: &str, _now: Millis, _recheck_ms: Millis) -> Result<Option<Millis>> {
        not_yet("the auth gate (blocked_until)")
    }

    fn account_states(&self, _now: Millis) -> Result<Vec<AccountState>> {
        not_yet("the auth gate (account states)")
    }

    fn gate_history(&self, _account: &str) -> Result<Vec<GateEvent>> {
        not_yet("the auth gate (history)")
    }

    fn expiry(&self, _account: &str, _expires_on: i64, _warn_days: i64) -> Result<i64> {
        not_yet("the auth gate (expiry warnings)")
    }

    fn hold(
        &self,
        _holder: &str,
        _candidates: &[String],
        _hold_ms: Millis,
        _policy: &GatePolicy,
    ) -> Result<Option<String>> {
        not_yet("the account pool (hold)")
    }

    fn unhold(&self, _holder: &str) -> Result<()> {
        not_yet("the account pool (unhold)")
    }

    fn probe_due(&self, _now: Millis) -> Result<Vec<String>> {
        not_yet("the auth gate (probe_due)")
    }

    fn claim_notice(&self, _sender: &str, _lease_ms: Millis) -> Result<Option<PendingNotice>> {
        not_yet("notices (claim)")
    }

    fn notice_done(&self, _n: &PendingNotice, _error: Option<&str>, _retry_ms: Millis) -> Result<()> {
        not_yet("notices (done)")
    }

    fn notices(&self) -> Result<Vec<NoticeRecord>> {
        not_yet("notices (list)")
    }

    fn outbox_claim(&self, _n: usize, _lease_ms: Millis, _interval_ms: Millis) -> Result<Drain> {
        not_yet("the outbox (claim)")
    }

    fn outbox_delivered(&self, _batch: &OutboxBatch) -> Result<usize> {
        not_yet("the outbox (delivered)")
    }

    fn outbox_undelivered(&self, _batch: &OutboxBatch, _not_before: Millis) -> Result<()> {
        not_yet("the outbox (undelivered)")
    }

    fn outbox_totals(&self) -> Result<OutboxTotals> {
        not_yet("the outbox (totals)")
    }

    fn lease_violations(&self) -> Result<Vec<(String, String)>> {
        self.read(read::lease_violations)
    }

    fn indexed_page(&self, after: i64, limit: i64) -> Result<Vec<IndexedRow>> {
        self.read(|c| read::indexed_page(c, after, limit))
    }
}
