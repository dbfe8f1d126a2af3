//! The vocabulary of the jobs table: ids, states, claims and fenced outcomes.
//!
//! These are plain values; only `store` turns them into SQL.

use std::fmt;
use std::str::FromStr;

use crate::clock::Millis;

/// The row id of a document in the jobs table. Mirror paths derive from it, never
/// from the document's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub i64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a document is in its life. Each variant names the component that moves
/// documents out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Enqueued, never claimed (or re-queued after a change/release). Left by a claim.
    Discovered,
    /// Owned by a claim until its lease is over (expired, or granted after now
    /// because the clock went back). Left by complete/fail/release, or by a
    /// re-claim once the lease is over (a lost lease, counted apart from attempts).
    Extracting,
    /// Accepted result. Left only when the source changes (re-enqueue) or by `retry`.
    Indexed,
    /// Failed, waiting for `retry_at`. Left by a claim at or after `retry_at`.
    Retrying,
    /// Gave up: attempts exhausted or a permanent error. Left only by `retry` or a
    /// changed source.
    Dead,
}

impl Status {
    /// Every state, in life order.
    pub const ALL: [Status; 5] = [
        Status::Discovered,
        Status::Extracting,
        Status::Indexed,
        Status::Retrying,
        Status::Dead,
    ];

    /// The name stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Discovered => "discovered",
            Status::Extracting => "extracting",
            Status::Indexed => "indexed",
            Status::Retrying => "retrying",
            Status::Dead => "dead",
        }
    }

    /// The transitions DESIGN §3 allows (plus re-queueing a changed source and
    /// burying a removed one). The store never writes any other.
    pub fn can_transition_to(self, next: Status) -> bool {
        use Status::*;
        matches!(
            (self, next),
            (Discovered, Extracting | Dead)
                | (Extracting, Extracting | Indexed | Retrying | Dead | Discovered)
                | (Retrying, Extracting | Dead | Discovered)
                | (Indexed, Discovered | Dead)
                | (Dead, Discovered)
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`Status::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// The right to be the only writer of one document, for as long as no one else
/// re-claims it. Not `Clone`: one claim, one owner.
#[derive(Debug, PartialEq, Eq)]
pub struct Claim {
    /// The document's row.
    pub id: JobId,
    /// The document key (e.g. a path relative to the source root).
    pub key: String,
    /// The source version this claim is extracting; a completion records it.
    pub version: String,
    /// The owner token; fenced writes match on it.
    pub token: String,
    /// +1 on every claim of this document, never reused: names the mirror generation.
    pub fence: i64,
    /// Attempts spent, including this one. A takeover of a lost lease does not
    /// spend one (the lost claim's is refunded).
    pub attempts: i64,
    /// When the lease runs out unless renewed.
    pub lease_expires_at: Millis,
    /// This claim took over a lease that was over (its worker died or
    /// stalled, or the clock went back): the previous claim is fence - 1.
    pub took_over: bool,
}

impl Claim {
    /// The part of the claim that renews its lease and nothing more: what the
    /// heartbeat holds while the stage keeps the claim itself, so that only the
    /// stage can finish it (finishing consumes the claim).
    pub fn owner(&self) -> Owner {
        Owner {
            id: self.id,
            token: self.token.clone(),
            fence: self.fence,
            attempts: self.attempts,
        }
    }
}

/// Who is writing a claimed row: enough of a [`Claim`] to fence on. It can renew
/// the lease ([`crate::Store::renew`]) but not finish the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The document's row.
    pub id: JobId,
    /// The claim's owner token.
    pub token: String,
    /// The claim's fence.
    pub fence: i64,
    /// Attempts spent, including the claim's (a failure's backoff grows with it).
    pub attempts: i64,
}

/// What a document handed back without spending an attempt waits for. The row
/// records it, so that whatever ends the wait wakes exactly the documents it
/// concerns, whatever the clock said when they were parked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parked {
    /// Time alone: a full disk, a rate limit. Claimable again from `until`.
    Until(Millis),
    /// A locked account: claimable at `until` at the latest, and at once when
    /// the account recovers (a probe succeeds or it is unlocked by hand).
    Account {
        /// The account's name.
        name: String,
        /// When its lock runs out, as the gate said.
        until: Millis,
    },
}

impl Parked {
    /// The latest time the document becomes claimable again.
    pub fn until(&self) -> Millis {
        match self {
            Parked::Until(t) | Parked::Account { until: t, .. } => *t,
        }
    }

    /// The account the document waits for, if any.
    pub fn account(&self) -> Option<&str> {
        match self {
            Parked::Until(_) => None,
            Parked::Account { name, .. } => Some(name),
        }
    }
}

/// The outcome of a fenced write (`renew`, `complete`, `fail`, `release`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a rejected fenced write must not be reported as success"]
pub enum Fenced {
    /// The row was ours and changed.
    Accepted,
    /// The row was not changed; says what it holds now.
    Rejected(Rejection),
}

impl Fenced {
    /// True only for [`Fenced::Accepted`].
    pub fn is_accepted(&self) -> bool {
        matches!(self, Fenced::Accepted)
    }
}

/// Why a fenced write was refused: what the row holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Another claim owns the document now.
    OtherOwner {
        /// The fence of the claim that holds the row.
        fence: i64,
    },
    /// The document is no longer being extracted (completed, failed, released...).
    NotExtracting {
        /// Its status now.
        status: Status,
        /// Its fence now.
        fence: i64,
    },
    /// There is no such document.
    Missing,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::OtherOwner { fence } => write!(f, "another owner holds it now (fence {fence})"),
            Rejection::NotExtracting { status, fence } => {
                write!(f, "it is no longer extracting (status {status}, fence {fence})")
            }
            Rejection::Missing => f.write_str("the document does not exist"),
        }
    }
}

/// A snapshot of one row of the jobs table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Job {
    /// The row id ([`JobId`]); mirror paths derive from it.
    pub id: i64,
    /// The document key (e.g. a path relative to the source root).
    pub key: String,
    /// The source version last enqueued; a changed one re-queues the document.
    pub version: String,
    /// Where the document is in its life.
    #[serde(serialize_with = "ser_status")]
    pub status: Status,
    /// The token of the claim that holds the row now; `None` unless extracting.
    pub owner_token: Option<String>,
    /// The name of the worker that made that claim, for people reading the table;
    /// `None` unless extracting.
    pub owner_worker: Option<String>,
    /// The fence of the latest claim (+1 per claim, never reused); names the
    /// mirror generation.
    pub fence: i64,
    /// When the current lease runs out (ms from the injected clock); `None`
    /// unless extracting.
    pub lease_expires_at: Option<Millis>,
    /// Attempts spent so far, including a claim in progress.
    pub attempts: i64,
    /// Attempts allowed before the document is given up as [`Status::Dead`].
    pub max_attempts: i64,
    /// Claims of this version whose lease was over (the worker died or stalled,
    /// or the clock went back) and that another claim took over. Each refunded
    /// its attempt; past the store's `max_lost_leases` the document is dead.
    pub lost_leases: i64,
    /// When a retrying or parked document becomes claimable again (ms from the
    /// injected clock).
    pub retry_at: Option<Millis>,
    /// The latest failure's message; cleared when a result is accepted.
    pub last_error: Option<String>,
    /// The accepted result, relative to the mirror root; stays until a new one
    /// is accepted.
    pub result_path: Option<String>,
    /// The SHA-256 of the accepted result.
    pub checksum: Option<String>,
    /// The accepted result's size in bytes, when its completion recorded it.
    pub result_bytes: Option<u64>,
    /// Set when the accepted result's text holds no word (no letter or
    /// digit): why, as far as the worker could tell (an empty file, a PDF
    /// without a text layer). None for a result with words.
    pub no_text: Option<String>,
    /// The title the accepted result's document gives itself
    /// ([`crate::Completion::title`]); None when it gives none.
    pub title: Option<String>,
    /// Who the accepted result's document says wrote it
    /// ([`crate::Completion::author`]).
    pub author: Option<String>,
    /// The date it gives itself ([`crate::Completion::date`]): `YYYY-MM-DD`,
    /// or `YYYY-MM`, `YYYY`.
    pub doc_date: Option<String>,
    /// How many pages it says it has ([`crate::Completion::pages`]).
    pub pages: Option<u32>,
    /// The language it says it is in ([`crate::Completion::language`]): a
    /// BCP 47 tag (`ko`, `en-US`).
    pub language: Option<String>,
    /// The source file has disappeared; `gc` removes its mirror files.
    pub source_gone: bool,
    /// When the document was first enqueued (ms from the injected clock).
    pub created_at: Millis,
    /// When the row last changed (ms from the injected clock).
    pub updated_at: Millis,
}

fn ser_status<S: serde::Serializer>(s: &Status, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s.as_str())
}

/// One line of a document's history: a transition, or a refused fenced write.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HistoryEntry {
    /// The document's row id.
    pub job_id: i64,
    /// When it happened (ms from the injected clock).
    pub at: Millis,
    /// e.g. `claimed`, `completed`, `complete_rejected`.
    pub event: String,
    /// The token of the caller (for a rejection: the refused one).
    pub token: Option<String>,
    /// The fence of the caller (for a rejection: the refused one).
    pub fence: Option<i64>,
    /// Free text: the reason, the row's fence, the error...
    pub detail: Option<String>,
}

/// What `enqueue` did with a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new document.
    Inserted(JobId),
    /// Known, and its version changed: queued again.
    Requeued(JobId),
    /// Known, same version: nothing done.
    Unchanged(JobId),
}

impl Enqueued {
    /// Whether the document was queued (new, or a new version).
    pub fn queued(self) -> bool {
        !matches!(self, Enqueued::Unchanged(_))
    }

    /// The document's id, whatever happened.
    pub fn id(self) -> JobId {
        match self {
            Enqueued::Inserted(id) | Enqueued::Requeued(id) | Enqueued::Unchanged(id) => id,
        }
    }
}

/// Number of documents in each status; a dead document whose source was
/// removed is counted as removed, not dead (it did not fail).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Documents waiting for their first (or next) claim.
    pub discovered: u64,
    /// Documents under a claim, whether its lease is live or has run out.
    pub extracting: u64,
    /// Documents with an accepted result.
    pub indexed: u64,
    /// Documents that failed and wait for their `retry_at`.
    pub retrying: u64,
    /// Documents given up on (their source still exists).
    pub dead: u64,
    /// Documents whose source was removed (dead in the queue: never claimed
    /// again unless the source comes back). Not a failure.
    pub removed: u64,
    /// Of the indexed: their text holds no word ([`Job::no_text`]). Part of
    /// [`Counts::indexed`], not counted again in [`Counts::total`].
    pub no_text: u64,
}

impl Counts {
    /// All documents.
    pub fn total(&self) -> u64 {
        self.discovered + self.extracting + self.indexed + self.retrying + self.dead + self.removed
    }

    /// The count for one status (for [`Status::Dead`], the failed ones:
    /// [`Counts::removed`] is apart).
    pub fn get(&self, s: Status) -> u64 {
        match s {
            Status::Discovered => self.discovered,
            Status::Extracting => self.extracting,
            Status::Indexed => self.indexed,
            Status::Retrying => self.retrying,
            Status::Dead => self.dead,
        }
    }

    /// Add `n` documents in status `s`, whose source is `gone` or not.
    pub(crate) fn add(&mut self, s: Status, gone: bool, n: u64) {
        if s == Status::Dead && gone {
            self.removed += n;
            return;
        }
        match s {
            Status::Discovered => self.discovered += n,
            Status::Extracting => self.extracting += n,
            Status::Indexed => self.indexed += n,
            Status::Retrying => self.retrying += n,
            Status::Dead => self.dead += n,
        }
    }
}

/// Which documents a listing takes ([`crate::Store::jobs_where`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Those in these statuses; any when empty.
    pub statuses: Vec<Status>,
    /// Only those whose source is gone (`Some(true)`) or is not; either when None.
    pub source_gone: Option<bool>,
    /// Only those whose accepted text holds no word ([`Job::no_text`]).
    pub no_text: bool,
}

impl JobFilter {
    /// Documents in status `s`; for [`Status::Dead`], the failed ones (their
    /// source is still there), as [`Counts::get`] counts them.
    pub fn status(s: Status) -> JobFilter {
        JobFilter {
            statuses: vec![s],
            source_gone: (s == Status::Dead).then_some(false),
            no_text: false,
        }
    }

    /// The failed documents: retrying, and dead with their source still there.
    pub fn failed() -> JobFilter {
        JobFilter {
            statuses: vec![Status::Retrying, Status::Dead],
            source_gone: Some(false),
            no_text: false,
        }
    }

    /// The documents whose source was removed.
    pub fn removed() -> JobFilter {
        JobFilter {
            statuses: vec![Status::Dead],
            source_gone: Some(true),
            no_text: false,
        }
    }

    /// The indexed documents whose text holds no word.
    pub fn no_text() -> JobFilter {
        JobFilter {
            statuses: vec![Status::Indexed],
            source_gone: None,
            no_text: true,
        }
    }

    /// How many documents this filter takes, from the counts. Only dead
    /// documents have their source gone (the store marks them so).
    pub fn count(&self, counts: &Counts) -> u64 {
        if self.no_text {
            return match self.statuses.is_empty() || self.statuses.contains(&Status::Indexed) {
                true => counts.no_text,
                false => 0,
            };
        }
        let statuses: &[Status] = match self.statuses.is_empty() {
            true => &Status::ALL,
            false => &self.statuses,
        };
        // Only dead documents have their source gone.
        let removed = match statuses.contains(&Status::Dead) {
            true => counts.removed,
            false => 0,
        };
        let present: u64 = statuses.iter().map(|s| counts.get(*s)).sum();
        match self.source_gone {
            Some(true) => removed,
            Some(false) => present,
            None => present + removed,
        }
    }
}

/// A lease that has not run out yet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LiveLease {
    /// The document's row id.
    pub id: i64,
    /// The document key.
    pub key: String,
    /// The token of the claim that holds the row now.
    pub owner_token: String,
    /// The worker that made the claim, if it gave a name.
    pub owner_worker: Option<String>,
    /// The fence of the claim that holds the row now.
    pub fence: i64,
    /// When the lease runs out unless renewed (ms from the injected clock).
    pub lease_expires_at: Millis,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_filters_count_what_they_list() {
        let counts = Counts {
            discovered: 1,
            extracting: 2,
            indexed: 4,
            retrying: 8,
            dead: 16,
            removed: 32,
            no_text: 3,
        };
        let gone = |statuses: Vec<Status>, source_gone| JobFilter {
            statuses,
            source_gone,
            no_text: false,
        };
        assert_eq!(
            JobFilter::default().count(&counts),
            63,
            "no text is part of the indexed"
        );
        assert_eq!(JobFilter::no_text().count(&counts), 3);
        assert_eq!(JobFilter::failed().count(&counts), 24);
        assert_eq!(JobFilter::removed().count(&counts), 32);
        assert_eq!(JobFilter::status(Status::Dead).count(&counts), 16);
        assert_eq!(gone(vec![Status::Dead], None).count(&counts), 48);
        assert_eq!(gone(vec![], Some(true)).count(&counts), 32);
        assert_eq!(gone(vec![], Some(false)).count(&counts), 31);
        assert_eq!(gone(vec![Status::Indexed], Some(true)).count(&counts), 0);
    }

    #[test]
    fn status_names_round_trip() {
        for s in Status::ALL {
            assert_eq!(s.as_str().parse::<Status>(), Ok(s));
        }
        assert!("Indexed".parse::<Status>().is_err());
    }

    #[test]
    fn indexed_leaves_only_for_a_changed_or_removed_source() {
        for s in Status::ALL {
            let allowed = matches!(s, Status::Discovered | Status::Dead);
            assert_eq!(Status::Indexed.can_transition_to(s), allowed, "{s}");
        }
        assert!(
            !Status::Dead.can_transition_to(Status::Extracting),
            "dead is never claimed"
        );
    }
}
