//! The store's operations whose decisions are written once above the
//! drivers (the queue's compositions, the gate, the outbox and notices, the
//! history's figures), implemented once for any [`Driver`]: each is one rule
//! inside one of the driver's transactions or reads. [`Driver`] is what an
//! engine gives them.

use super::check::{AcceptedResult, CheckReads, IndexedRow};
use super::driver::Rows;
use super::figures::{self, HistoryFigures, HistoryLine};
use super::gate::{
    self, AccountState, Admission, Answer, GateChange, GateEvent, GatePolicy, GateReads, GateRows,
    ProbePermit,
};
use super::options::Policy;
use super::outbox::{
    self, Drain, NoticeRecord, OutboxBatch, OutboxReads, OutboxRows, OutboxTotals, PendingNotice,
};
use super::queue::{self, NewDoc, QueueRows, Vanished};
use super::read::{self, JobReads, ReadRows, Totals};
use crate::clock::Millis;
use crate::error::Result;
use crate::job::{Counts, Enqueued, HistoryEntry, Job, JobFilter, JobId, LiveLease};

/// What an engine gives the rules: its transactions and its reads, each over
/// rows of its own that implement every area's row trait.
pub(crate) trait Driver: Send + Sync {
    /// The engine's error inside a transaction or a read.
    type Error;
    /// A write transaction's rows.
    type Tx<'t>: Rows<Error = Self::Error> + QueueRows + GateRows + OutboxRows;
    /// A read's rows.
    type Reader<'t>: Rows<Error = Self::Error> + GateReads + OutboxReads + ReadRows + JobReads + CheckReads;

    /// Run `f` in one write transaction, with now from the injected clock;
    /// the engine retries what it may and maps its errors.
    fn write<T>(
        &self,
        f: impl FnMut(&mut Self::Tx<'_>, Millis) -> std::result::Result<T, Self::Error>,
    ) -> Result<T>;
    /// Run `f` on a read connection.
    fn read<T>(
        &self,
        f: impl FnMut(&mut Self::Reader<'_>) -> std::result::Result<T, Self::Error>,
    ) -> Result<T>;
    /// The rules' settings from the store's options.
    fn policy(&self) -> &Policy;
    /// How many attempts a document gets.
    fn max_attempts(&self) -> i64;
    /// How far after now a lease may have been granted and still be live:
    /// PostgreSQL's allowance for skewed clocks; none on SQLite, which reads
    /// now under its write lock, so its grants are ordered.
    fn grant_skew(&self) -> Millis;
}

/// The operations decided by the rules of `store/`, the same on every engine.
pub(crate) trait Rules {
    /// Insert new documents, re-queue changed ones; one outcome per document.
    fn enqueue_many(&self, docs: &[NewDoc]) -> Result<Vec<Enqueued>>;

    /// Requeue one settled document with fresh attempts.
    fn requeue(&self, id: JobId, why: &str) -> Result<bool>;

    /// Forget a document's accepted result while it is still `result_path`
    /// (missing or altered in the mirror) and queue it again if it was
    /// indexed; true if the row changed.
    fn forget_result(&self, id: JobId, result_path: &str, why: &str) -> Result<bool>;

    /// Requeue every dead document whose source exists; how many.
    fn requeue_dead(&self, why: &str) -> Result<usize>;

    /// A new scan number.
    fn begin_scan(&self) -> Result<i64>;

    /// Enqueue `changed` and stamp them and `unchanged` as seen by `scan`.
    fn record_scan(&self, scan: i64, unchanged: &[String], changed: &[NewDoc]) -> Result<Vec<Enqueued>>;

    /// Mark what the newest scan `scan` did not see as gone, with reason `why`.
    fn finish_scan(&self, scan: i64, why: &str) -> Result<usize>;

    /// Mark the documents `keys`, and every document whose key starts with
    /// one of `prefixes`, gone with reason `why`; how many.
    fn mark_gone(&self, keys: &[String], prefixes: &[String], why: &str) -> Result<usize>;

    /// Mark the documents of `vanished` gone with reason `why` where their
    /// fingerprint is still the one given; how many.
    fn mark_vanished(&self, vanished: &[Vanished], why: &str) -> Result<usize>;

    /// Set a setting, replacing its value.
    fn set_meta(&self, name: &str, value: &str) -> Result<()>;

    /// Set `name` unless it or a rival is set, in one transaction; the
    /// setting in force.
    fn meta_set_once_among(&self, name: &str, value: &str, rivals: &[&str]) -> Result<(String, String)>;

    /// Read the settings `names`, let `edit` change them, and write what it
    /// changed (`None` removes a setting), in one transaction.
    fn edit_meta(&self, names: &[&str], edit: &mut dyn FnMut(&mut [Option<String>])) -> Result<()>;

    fn admit(&self, account: &str, holder: &str, policy: &GatePolicy) -> Result<Admission>;

    fn report(
        &self,
        account: &str,
        permit: Option<&ProbePermit>,
        answer: &Answer,
        policy: &GatePolicy,
    ) -> Result<GateChange>;

    fn unlock(&self, account: &str, by: &str) -> Result<bool>;

    fn blocked_until(&self, account: &str, now: Millis, recheck_ms: Millis) -> Result<Option<Millis>>;

    fn account_states(&self, now: Millis) -> Result<Vec<AccountState>>;

    fn gate_history(&self, account: &str) -> Result<Vec<GateEvent>>;

    fn expiry(&self, account: &str, expires_on: i64, warn_days: i64) -> Result<i64>;

    fn hold(
        &self,
        holder: &str,
        candidates: &[String],
        hold_ms: Millis,
        policy: &GatePolicy,
    ) -> Result<Option<String>>;

    fn unhold(&self, holder: &str) -> Result<()>;

    fn probe_due(&self, now: Millis) -> Result<Vec<String>>;

    fn claim_notice(&self, sender: &str, lease_ms: Millis) -> Result<Option<PendingNotice>>;

    fn notice_done(&self, n: &PendingNotice, error: Option<&str>, retry_ms: Millis) -> Result<()>;

    fn notices(&self) -> Result<Vec<NoticeRecord>>;

    fn outbox_claim(&self, n: usize, lease_ms: Millis, interval_ms: Millis) -> Result<Drain>;

    fn outbox_delivered(&self, batch: &OutboxBatch) -> Result<usize>;

    fn outbox_undelivered(&self, batch: &OutboxBatch, not_before: Millis) -> Result<()>;

    fn outbox_totals(&self) -> Result<OutboxTotals>;

    /// The history's figures for `leasehold metrics`.
    fn history_figures(&self) -> Result<HistoryFigures>;

    /// Every history line, oldest first, with its document's key and status.
    fn history_lines(&self) -> Result<Vec<HistoryLine>>;

    fn job(&self, id: JobId) -> Result<Option<Job>>;
    fn job_by_key(&self, key: &str) -> Result<Option<Job>>;
    fn jobs_after(&self, filter: &JobFilter, after: JobId, n: i64) -> Result<Vec<Job>>;
    fn history(&self, id: JobId) -> Result<Vec<HistoryEntry>>;
    fn counts(&self) -> Result<Counts>;
    fn totals(&self) -> Result<Totals>;
    fn live_leases(&self, now: Millis) -> Result<Vec<LiveLease>>;
    /// When a claim could take something ([`read::next_claimable_at`]).
    fn next_claimable_at(&self, now: Millis) -> Result<Option<Millis>>;
    fn count_extracting(&self) -> Result<u64>;
    fn count_pending(&self) -> Result<u64>;
    fn lease_violations(&self) -> Result<Vec<(String, String)>>;
    fn indexed_page(&self, after: i64, limit: i64) -> Result<Vec<IndexedRow>>;
    fn accepted_page(&self, after: i64, limit: i64) -> Result<Vec<AcceptedResult>>;
}

impl<D: Driver> Rules for D {
    fn enqueue_many(&self, docs: &[NewDoc]) -> Result<Vec<Enqueued>> {
        let max = self.max_attempts();
        self.write(|tx, now| queue::enqueue_many(tx, now, max, docs))
    }

    fn requeue(&self, id: JobId, why: &str) -> Result<bool> {
        self.write(|tx, now| queue::requeue(tx, now, id.0, why))
    }

    fn forget_result(&self, id: JobId, result_path: &str, why: &str) -> Result<bool> {
        self.write(|tx, now| queue::forget_result(tx, now, id.0, result_path, why))
    }

    fn requeue_dead(&self, why: &str) -> Result<usize> {
        self.write(|tx, now| queue::requeue_dead(tx, now, why))
    }

    fn begin_scan(&self) -> Result<i64> {
        self.write(|tx, _| queue::begin_scan(tx))
    }

    fn record_scan(&self, scan: i64, unchanged: &[String], changed: &[NewDoc]) -> Result<Vec<Enqueued>> {
        let max = self.max_attempts();
        self.write(|tx, now| queue::record_scan(tx, now, max, scan, unchanged, changed))
    }

    fn finish_scan(&self, scan: i64, why: &str) -> Result<usize> {
        self.write(|tx, now| queue::finish_scan(tx, now, scan, why))
    }

    fn mark_gone(&self, keys: &[String], prefixes: &[String], why: &str) -> Result<usize> {
        self.write(|tx, now| queue::mark_gone(tx, now, keys, prefixes, why))
    }

    fn mark_vanished(&self, vanished: &[Vanished], why: &str) -> Result<usize> {
        self.write(|tx, now| queue::mark_vanished(tx, now, vanished, why))
    }

    fn set_meta(&self, name: &str, value: &str) -> Result<()> {
        self.write(|tx, _| queue::set_meta(tx, name, value))
    }

    fn meta_set_once_among(&self, name: &str, value: &str, rivals: &[&str]) -> Result<(String, String)> {
        self.write(|tx, _| queue::meta_set_once_among(tx, name, value, rivals))
    }

    fn edit_meta(&self, names: &[&str], edit: &mut dyn FnMut(&mut [Option<String>])) -> Result<()> {
        self.write(|tx, _| queue::edit_meta(tx, names, &mut *edit))
    }

    fn admit(&self, account: &str, holder: &str, policy: &GatePolicy) -> Result<Admission> {
        self.write(|tx, now| gate::admit(tx, now, policy, account, holder))
    }

    fn report(
        &self,
        account: &str,
        permit: Option<&ProbePermit>,
        answer: &Answer,
        policy: &GatePolicy,
    ) -> Result<GateChange> {
        self.write(|tx, now| gate::report(tx, now, policy, account, permit, answer))
    }

    fn unlock(&self, account: &str, by: &str) -> Result<bool> {
        self.write(|tx, now| gate::unlock(tx, now, account, by))
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
        self.write(|tx, now| gate::expiry(tx, now, account, expires_on, warn_days))
    }

    fn hold(
        &self,
        holder: &str,
        candidates: &[String],
        hold_ms: Millis,
        policy: &GatePolicy,
    ) -> Result<Option<String>> {
        self.write(|tx, now| gate::hold(tx, now, policy, holder, candidates, hold_ms))
    }

    fn unhold(&self, holder: &str) -> Result<()> {
        self.write(|tx, _| gate::unhold(tx, holder))
    }

    fn probe_due(&self, now: Millis) -> Result<Vec<String>> {
        self.read(|c| gate::probe_due(c, now))
    }

    fn claim_notice(&self, sender: &str, lease_ms: Millis) -> Result<Option<PendingNotice>> {
        self.write(|tx, now| outbox::claim_notice(tx, now, sender, lease_ms))
    }

    fn notice_done(&self, n: &PendingNotice, error: Option<&str>, retry_ms: Millis) -> Result<()> {
        self.write(|tx, now| outbox::notice_sent(tx, now, n, error, retry_ms))
    }

    fn notices(&self) -> Result<Vec<NoticeRecord>> {
        self.read(|c| outbox::notices(c))
    }

    fn outbox_claim(&self, n: usize, lease_ms: Millis, interval_ms: Millis) -> Result<Drain> {
        let cap = self.policy().outbox;
        self.write(|tx, now| outbox::claim_batch(tx, now, &cap, n, lease_ms, interval_ms))
    }

    fn outbox_delivered(&self, batch: &OutboxBatch) -> Result<usize> {
        self.write(|tx, _| outbox::delivered(tx, batch))
    }

    fn outbox_undelivered(&self, batch: &OutboxBatch, not_before: Millis) -> Result<()> {
        self.write(|tx, _| outbox::undelivered(tx, batch, not_before))
    }

    fn outbox_totals(&self) -> Result<OutboxTotals> {
        self.read(|c| outbox::totals(c))
    }

    fn history_figures(&self) -> Result<HistoryFigures> {
        self.read(|c| figures::history_figures(c))
    }

    fn history_lines(&self) -> Result<Vec<HistoryLine>> {
        self.read(|c| figures::history_lines(c))
    }

    fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.read(|r| r.job_by_id(id.0))
    }

    fn job_by_key(&self, key: &str) -> Result<Option<Job>> {
        self.read(|r| r.job_by_key(key))
    }

    fn jobs_after(&self, filter: &JobFilter, after: JobId, n: i64) -> Result<Vec<Job>> {
        self.read(|r| r.jobs_after(filter, after.0, n))
    }

    fn history(&self, id: JobId) -> Result<Vec<HistoryEntry>> {
        self.read(|r| r.history(id.0))
    }

    fn counts(&self) -> Result<Counts> {
        self.read(|r| r.counts())
    }

    fn totals(&self) -> Result<Totals> {
        self.read(|r| r.totals())
    }

    fn live_leases(&self, now: Millis) -> Result<Vec<LiveLease>> {
        let granted_by = now.saturating_add(self.grant_skew());
        self.read(|r| r.live_leases(now, granted_by))
    }

    fn next_claimable_at(&self, now: Millis) -> Result<Option<Millis>> {
        let granted_by = now.saturating_add(self.grant_skew());
        let found = self.read(|r| r.claimable(granted_by))?;
        Ok(read::next_claimable_at(found, now))
    }

    fn count_extracting(&self) -> Result<u64> {
        self.read(|r| r.count_extracting())
    }

    fn count_pending(&self) -> Result<u64> {
        self.read(|r| r.count_pending())
    }

    fn lease_violations(&self) -> Result<Vec<(String, String)>> {
        self.read(|r| r.lease_violations())
    }

    fn indexed_page(&self, after: i64, limit: i64) -> Result<Vec<IndexedRow>> {
        self.read(|r| r.indexed_page(after, limit))
    }

    fn accepted_page(&self, after: i64, limit: i64) -> Result<Vec<AcceptedResult>> {
        self.read(|r| r.accepted_page(after, limit))
    }
}
