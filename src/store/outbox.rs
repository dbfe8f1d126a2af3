//! The outbox and notice sending (DESIGN §6): their vocabulary and rules,
//! written once over the row operations of [`OutboxRows`] and
//! [`OutboxReads`] that each engine's driver implements.
//!
//! The outbox row of a result is written by the transaction that accepts it
//! (the fenced `complete`), so an accepted result is queued exactly once and a
//! refused one never. Rows leave the outbox in two ways only: delivered (after
//! their batch got a 2xx), or dropped by the cap, oldest first, and counted.
//! A drain claims a batch with a short sending lease, so two processes never
//! send the same rows at once, and a crashed sender's batch goes again (the
//! only duplicates are the batch that was in flight).

use crate::clock::Millis;
use crate::store::driver::Rows;

/// The outbox cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxCap {
    /// Rows older than this many milliseconds are dropped (and counted).
    pub max_age_ms: Millis,
    /// While the payload total is above this many bytes, the oldest rows are
    /// dropped (never the newest one, never rows in flight).
    pub max_bytes: u64,
}

/// One result waiting for the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxItem {
    /// The outbox row's id (not the job's).
    pub id: i64,
    /// The document key.
    pub key: String,
    /// The source version the result was extracted from.
    pub version: String,
    /// The SHA-256 of the accepted result.
    pub checksum: String,
    /// The extracted text to deliver.
    pub text: String,
}

/// A batch claimed for sending: deliver it, then report with its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxBatch {
    /// Names this claim of the rows: reporting matches on it, so a batch whose
    /// sending lease ran out and was claimed again changes nothing.
    pub token: String,
    /// The rows, oldest first.
    pub items: Vec<OutboxItem>,
}

/// What a drain step may do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drain {
    /// Nothing is waiting (or everything waiting is being sent by someone else).
    Empty,
    /// The shared pace says not before `until`.
    Paced {
        /// When the next batch may go (ms from the injected clock).
        until: Millis,
    },
    /// Deliver this batch, then report it delivered or undelivered.
    Send(OutboxBatch),
}

/// The outbox's figures, for `auth status` and the recovery notice.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OutboxTotals {
    /// Results waiting now (including those in flight).
    pub rows: i64,
    /// Their payload, in bytes.
    pub bytes: i64,
    /// Results the cap has dropped, ever.
    pub dropped: i64,
    /// The payload of those, in bytes.
    pub dropped_bytes: i64,
    /// Results delivered, ever.
    pub delivered: i64,
    /// When the oldest waiting result was queued (ms from the injected clock);
    /// `None` when the outbox is empty.
    pub oldest_at: Option<Millis>,
}

/// Whether the waiting row queued at `created`, with `total` bytes waiting
/// in all, is dropped by the cap: too old, or the total over the size cap.
pub(crate) fn breaks_cap(cap: &OutboxCap, now: Millis, created: Millis, total: i64) -> bool {
    now - created > cap.max_age_ms || total as u64 > cap.max_bytes
}

/// The outbox's and the notices' row operations inside a write transaction.
pub(crate) trait OutboxRows: Rows {
    /// The totals row's payload bytes and shared pace, locked until the
    /// transaction ends where the engine needs that; taken before any outbox row.
    fn lock_totals(&mut self) -> Result<(i64, Millis), Self::Error>;
    /// Insert the outbox row of job `id` (its key and version read from the
    /// job) with `bytes` of payload, and count it in the totals.
    fn insert_result(
        &mut self,
        now: Millis,
        id: i64,
        checksum: &str,
        text: &str,
        bytes: i64,
    ) -> Result<(), Self::Error>;
    /// Delete and count as dropped the oldest waiting rows, one after the
    /// other while [`breaks_cap`] holds (with `total` bytes waiting before
    /// the first, less each one dropped); never the newest row, never rows in flight.
    fn drop_over_cap(&mut self, now: Millis, cap: &OutboxCap, total: i64) -> Result<(), Self::Error>;
    /// The oldest `n` rows not in flight at `now`.
    fn waiting(&mut self, now: Millis, n: usize) -> Result<Vec<OutboxItem>, Self::Error>;
    /// Put rows `ids` in flight for `token` until `until`.
    fn lease_rows(&mut self, ids: &[i64], token: &str, until: Millis) -> Result<(), Self::Error>;
    /// Set the shared pace: no batch before `at`.
    fn set_next_send(&mut self, at: Millis) -> Result<(), Self::Error>;
    /// Raise the shared pace to `at`; never lowers it.
    fn defer_next_send(&mut self, at: Millis) -> Result<(), Self::Error>;
    /// Delete the batch's rows still in flight for it; how many and their bytes.
    fn remove_leased(&mut self, batch: &OutboxBatch) -> Result<(i64, i64), Self::Error>;
    /// Count `n` rows of `bytes` delivered in the totals.
    fn count_delivered(&mut self, n: i64, bytes: i64) -> Result<(), Self::Error>;
    /// Take the batch's rows still in flight for it out of flight.
    fn release_leased(&mut self, batch: &OutboxBatch) -> Result<(), Self::Error>;
    /// The oldest unsent notice due at `now` and not in flight, put in
    /// flight for `sender` until `until` with one more attempt counted.
    fn take_notice(
        &mut self,
        now: Millis,
        sender: &str,
        until: Millis,
    ) -> Result<Option<PendingNotice>, Self::Error>;
    /// Mark notice `n` sent at `now`, if `n.sender` still holds it.
    fn notice_delivered(&mut self, now: Millis, n: &PendingNotice) -> Result<(), Self::Error>;
    /// Take notice `n` out of flight with `error`, due again at `retry_at`,
    /// if `n.sender` still holds it.
    fn notice_failed(&mut self, n: &PendingNotice, error: &str, retry_at: Millis) -> Result<(), Self::Error>;
}

/// The outbox's and the notices' reads, on a read connection.
pub(crate) trait OutboxReads: Rows {
    /// The totals row, with the oldest waiting row's time.
    fn outbox_totals(&mut self) -> Result<OutboxTotals, Self::Error>;
    /// Every notice, oldest first.
    fn notice_records(&mut self) -> Result<Vec<NoticeRecord>, Self::Error>;
}

/// Queue the accepted result of job `id` (its key and version are read from
/// the row), then apply the cap. Called in the transaction of the fenced
/// completion that accepted it.
pub(crate) fn push<R: OutboxRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    cap: &OutboxCap,
    id: i64,
    checksum: &str,
    text: &str,
) -> Result<(), R::Error> {
    let (total, _) = rows.lock_totals()?;
    let bytes = i64::try_from(text.len()).unwrap_or(i64::MAX);
    rows.insert_result(now, id, checksum, text, bytes)?;
    rows.drop_over_cap(now, cap, total.saturating_add(bytes))
}

/// Claim the oldest `n` rows not in flight for `lease_ms`, if the shared pace
/// allows a batch now; the next batch may go `interval_ms` later. The cap is
/// applied first.
pub(crate) fn claim_batch<R: OutboxRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    cap: &OutboxCap,
    n: usize,
    lease_ms: Millis,
    interval_ms: Millis,
) -> Result<Drain, R::Error> {
    let (total, next_at) = rows.lock_totals()?;
    rows.drop_over_cap(now, cap, total)?;
    let items = rows.waiting(now, n)?;
    if items.is_empty() {
        return Ok(Drain::Empty);
    }
    if now < next_at {
        return Ok(Drain::Paced { until: next_at });
    }
    let token = uuid::Uuid::new_v4().to_string();
    let ids: Vec<i64> = items.iter().map(|it| it.id).collect();
    rows.lease_rows(&ids, &token, now + lease_ms)?;
    rows.set_next_send(now + interval_ms)?;
    Ok(Drain::Send(OutboxBatch { token, items }))
}

/// The batch got a 2xx: remove its rows (those still ours).
pub(crate) fn delivered<R: OutboxRows + ?Sized>(
    rows: &mut R,
    batch: &OutboxBatch,
) -> Result<usize, R::Error> {
    rows.lock_totals()?;
    let (done, bytes) = rows.remove_leased(batch)?;
    rows.count_delivered(done, bytes)?;
    Ok(usize::try_from(done).unwrap_or(0))
}

/// The batch was not delivered: its rows wait again, and no batch goes before
/// `not_before` (a 429's Retry-After, a lock, a backoff).
pub(crate) fn undelivered<R: OutboxRows + ?Sized>(
    rows: &mut R,
    batch: &OutboxBatch,
    not_before: Millis,
) -> Result<(), R::Error> {
    rows.lock_totals()?;
    rows.release_leased(batch)?;
    rows.defer_next_send(not_before)
}

/// The outbox's figures.
pub(crate) fn totals<R: OutboxReads + ?Sized>(rows: &mut R) -> Result<OutboxTotals, R::Error> {
    rows.outbox_totals()
}

/// A notice to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingNotice {
    /// The notice's row id.
    pub id: i64,
    /// The account it is about.
    pub account: String,
    /// `lock`, `recovery`, `shared_cause` or `expiry`.
    pub kind: String,
    /// The human-readable line sent to the channels.
    pub message: String,
    /// JSON text.
    pub details: String,
    /// Who claimed it for sending; the outcome is recorded only for this sender.
    pub sender: String,
}

/// Take the oldest unsent notice that is due and not being sent by someone else.
pub(crate) fn claim_notice<R: OutboxRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    sender: &str,
    lease_ms: Millis,
) -> Result<Option<PendingNotice>, R::Error> {
    rows.take_notice(now, sender, now + lease_ms)
}

/// Record the outcome of sending a notice we hold; a failure is tried again later.
pub(crate) fn notice_sent<R: OutboxRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    n: &PendingNotice,
    error: Option<&str>,
    retry_ms: Millis,
) -> Result<(), R::Error> {
    match error {
        None => rows.notice_delivered(now, n),
        Some(e) => rows.notice_failed(n, e, now + retry_ms),
    }
}

/// A sent or unsent notice, for tests and `auth status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NoticeRecord {
    /// The notice's row id.
    pub id: i64,
    /// The account it is about.
    pub account: String,
    /// `lock`, `recovery`, `shared_cause` or `expiry`.
    pub kind: String,
    /// The human-readable line sent to the channels.
    pub message: String,
    /// When it was written (ms from the injected clock).
    pub created_at: Millis,
    /// When a send succeeded; `None` while it is still due.
    pub sent_at: Option<Millis>,
    /// Sends tried so far.
    pub attempts: i64,
}

/// Every notice, oldest first.
pub(crate) fn notices<R: OutboxReads + ?Sized>(rows: &mut R) -> Result<Vec<NoticeRecord>, R::Error> {
    rows.notice_records()
}
