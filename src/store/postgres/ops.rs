//! The seam's PostgreSQL side: [`Engine`] for [`PgStore`].
//!
//! What is not built on PostgreSQL yet answers [`Error::NotOnPostgres`],
//! naming the operation: never a panic, never a silent no-op.

use std::collections::HashMap;

use super::PgStore;
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

impl Engine for PgStore {
    fn enqueue_many(&self, _docs: &[NewDoc]) -> Result<Vec<Enqueued>> {
        not_yet("enqueue many")
    }

    fn requeue(&self, _id: JobId, _why: &str) -> Result<bool> {
        not_yet("requeue")
    }

    fn requeue_dead(&self, _why: &str) -> Result<usize> {
        not_yet("requeue dead")
    }

    fn begin_scan(&self) -> Result<i64> {
        not_yet("begin scan")
    }

    fn record_scan(&self, _scan: i64, _unchanged: &[String], _changed: &[NewDoc]) -> Result<Vec<Enqueued>> {
        not_yet("record scan")
    }

    fn finish_scan(&self, _scan: i64, _why: &str) -> Result<usize> {
        not_yet("finish scan")
    }

    fn source_stats(&self, _keys: &[String]) -> Result<HashMap<String, KnownSource>> {
        not_yet("source stats")
    }

    fn meta(&self, _name: &str) -> Result<Option<String>> {
        not_yet("meta")
    }

    fn set_meta(&self, _name: &str, _value: &str) -> Result<()> {
        not_yet("set meta")
    }

    fn meta_set_once_among(&self, _name: &str, _value: &str, _rivals: &[&str]) -> Result<(String, String)> {
        not_yet("meta set once among")
    }

    fn claim_batch(&self, _worker: &str, _n: usize) -> Result<Vec<Claim>> {
        not_yet("claim batch")
    }

    fn renew(&self, _owner: &Owner) -> Result<Fenced> {
        not_yet("renew")
    }

    fn finish(&self, _owner: &Owner, _c: &Completion<'_>) -> Result<Fenced> {
        not_yet("finish")
    }

    fn finish_many(&self, _done: &[(Owner, Completion<'_>)]) -> Result<Vec<Fenced>> {
        not_yet("finish many")
    }

    fn fail(&self, _owner: &Owner, _error: &str, _permanent: bool) -> Result<Fenced> {
        not_yet("fail")
    }

    fn release(&self, _owner: &Owner, _reason: &str, _parked: Option<&Parked>) -> Result<Fenced> {
        not_yet("release")
    }

    fn job(&self, _id: JobId) -> Result<Option<Job>> {
        not_yet("job")
    }

    fn job_by_key(&self, _key: &str) -> Result<Option<Job>> {
        not_yet("job by key")
    }

    fn jobs_after(&self, _statuses: &[Status], _after: JobId, _n: i64) -> Result<Vec<Job>> {
        not_yet("jobs after")
    }

    fn history(&self, _id: JobId) -> Result<Vec<HistoryEntry>> {
        not_yet("history")
    }

    fn counts(&self) -> Result<Counts> {
        not_yet("counts")
    }

    fn totals(&self) -> Result<Totals> {
        not_yet("totals")
    }

    fn live_leases(&self, _now: Millis) -> Result<Vec<LiveLease>> {
        not_yet("live leases")
    }

    fn next_claimable_at(&self, _now: Millis) -> Result<Option<Millis>> {
        not_yet("next claimable at")
    }

    fn count_extracting(&self) -> Result<u64> {
        not_yet("count extracting")
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
        not_yet("lease violations")
    }

    fn indexed_page(&self, _after: i64, _limit: i64) -> Result<Vec<IndexedRow>> {
        not_yet("indexed page")
    }
}
