//! The rules of claims and fenced writes, once for both engines (DESIGN §2,
//! §3): the operations a group commit carries, what a claim candidate is and
//! when it is buried, how a refused write is told from an accepted one, and
//! the words the history records for each. The drivers run the SQL.

use super::completion::Completion;
use super::driver::Rows;
use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::job::{Claim, Fenced, Owner, Parked, Rejection, Status};
use crate::store::options::Policy;

/// What a refused write's row holds: its status, owner token and fence.
pub(crate) type OwnerRow = (String, Option<String>, i64);

/// The row operations the fencing rules need from an engine.
pub(crate) trait FenceRows: Rows {
    /// Document `id`'s status, owner token and fence, locked for this
    /// transaction where the engine locks rows; `None` when there is no row.
    fn owner_row(&mut self, id: i64) -> std::result::Result<Option<OwnerRow>, Self::Error>;
    /// Append one line to the document's history.
    fn record(
        &mut self,
        job_id: i64,
        now: Millis,
        event: &str,
        token: Option<&str>,
        fence: Option<i64>,
        detail: Option<&str>,
    ) -> std::result::Result<(), Self::Error>;
    /// An error that fails (and rolls back) the transaction, saying why.
    fn refuse(why: String) -> Self::Error;
    /// Bury row `id` with reason `why` if it is still claimable and has
    /// used up its attempts or lost leases (`policy`'s bounds); rows changed.
    fn bury_row(
        &mut self,
        id: i64,
        now: Millis,
        why: &str,
        policy: &Policy,
    ) -> std::result::Result<u64, Self::Error>;
    /// Extend `o`'s lease to `until` (of `lease_ms`) if `o` still owns it;
    /// rows changed.
    fn renew_row(
        &mut self,
        o: &Owner,
        until: Millis,
        now: Millis,
        lease_ms: i64,
    ) -> std::result::Result<u64, Self::Error>;
    /// Record `o`'s failure if `o` still owns it: `dead` when `permanent` or
    /// out of attempts, else `retrying` at `retry_at`; the status written and
    /// its retry time, `None` when `o` no longer owns it.
    fn fail_row(
        &mut self,
        o: &Owner,
        permanent: bool,
        retry_at: Millis,
        error: &str,
        now: Millis,
    ) -> std::result::Result<Option<(String, Option<Millis>)>, Self::Error>;
    /// Hand `o`'s claim back without spending the attempt, parked until
    /// `until` on `account` when given; rows changed.
    fn release_row(
        &mut self,
        o: &Owner,
        now: Millis,
        until: Option<Millis>,
        reason: &str,
        account: Option<&str>,
    ) -> std::result::Result<u64, Self::Error>;
}

/// Move claimable row `c`, which has used up what it may spend, to `dead`,
/// so that a document that fails every time, or kills every worker that
/// takes it, stops being handed out; a lost lease found here is counted (and
/// its attempt refunded) like a takeover's. Whether it was buried (a claim
/// elsewhere may have taken it first).
pub(crate) fn bury<R: FenceRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    policy: &Policy,
    c: &Candidate,
) -> std::result::Result<bool, R::Error> {
    let why = bury_reason(c);
    let buried = rows.bury_row(c.id, now, &why, policy)? == 1;
    if buried {
        guard::<R>(status_of(&c.status), Status::Dead)?;
        rows.record(c.id, now, "dead", c.token.as_deref(), Some(c.fence), Some(&why))?;
    }
    Ok(buried)
}

/// Extend `o`'s lease from now. Fenced.
pub(crate) fn renew<R: FenceRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    policy: &Policy,
    o: &Owner,
) -> std::result::Result<Fenced, R::Error> {
    let n = rows.renew_row(o, now.saturating_add(policy.lease_ms), now, policy.lease_ms)?;
    settle(rows, now, o, n, "renew", None)
}

/// Record a failure: `retrying` after the backoff for its attempt, or
/// `dead` when `permanent` or out of attempts. Fenced.
pub(crate) fn fail<R: FenceRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    policy: &Policy,
    o: &Owner,
    error: &str,
    permanent: bool,
) -> std::result::Result<Fenced, R::Error> {
    let retry_at = now.saturating_add(policy.backoff.delay_ms(o.attempts));
    let row = rows.fail_row(o, permanent, retry_at, error, now)?;
    if let Some((status, _)) = &row {
        guard::<R>(Status::Extracting, status_of(status))?;
    }
    let detail = row.as_ref().map(|(status, at)| match at {
        Some(at) => format!("{status} at {at}: {error}"),
        None => format!("{status}: {error}"),
    });
    settle(rows, now, o, u64::from(row.is_some()), "fail", detail.as_deref())
}

/// Hand back without spending the attempt the claim took. A parked row
/// waits in `retrying` (the reason kept as its last error, the account it
/// waits for in `parked_on`) so that a full disk or a locked credential is
/// not hammered. Fenced.
pub(crate) fn release<R: FenceRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    o: &Owner,
    reason: &str,
    parked: Option<&Parked>,
) -> std::result::Result<Fenced, R::Error> {
    let (until, account) = (parked.map(Parked::until), parked.and_then(Parked::account));
    let n = rows.release_row(o, now, until, reason, account)?;
    settle(rows, now, o, n, "release", Some(reason))
}

/// Turn "rows changed" by a fenced write `what` into its outcome; on zero,
/// read the row to say why and record the refusal. Accepted renewals are not
/// recorded (they are not transitions, and would flood the history).
pub(crate) fn settle<R: FenceRows + ?Sized>(
    rows: &mut R,
    now: Millis,
    o: &Owner,
    changed: u64,
    what: &str,
    detail: Option<&str>,
) -> std::result::Result<Fenced, R::Error> {
    if changed == 1 {
        if let Some(event) = accepted_event(what) {
            rows.record(o.id.0, now, event, Some(&o.token), Some(o.fence), detail)?;
        }
        return Ok(Fenced::Accepted);
    }
    let rejection = rejection_of(o, rows.owner_row(o.id.0)?);
    if rejection != Rejection::Missing {
        let detail = refusal_detail(&rejection);
        let event = format!("{what}_rejected");
        rows.record(o.id.0, now, &event, Some(&o.token), Some(o.fence), Some(&detail))?;
    }
    Ok(Fenced::Rejected(rejection))
}

/// The store never writes a transition DESIGN §3 does not allow: one that
/// would be written fails its transaction instead (and rolls back).
pub(crate) fn guard<R: FenceRows + ?Sized>(from: Status, to: Status) -> std::result::Result<(), R::Error> {
    if from.can_transition_to(to) {
        return Ok(());
    }
    Err(R::refuse(format!("refused transition {from} -> {to}")))
}

/// One write that can share a group-commit transaction with others.
#[derive(Debug)]
pub(crate) enum WriteOp {
    Claim {
        worker: String,
        max: usize,
    },
    Renew(Owner),
    Complete {
        owner: Owner,
        /// Boxed: a completion is several times the size of the other operations.
        completion: Box<Completion<'static>>,
    },
    Fail {
        owner: Owner,
        error: String,
        permanent: bool,
    },
    Release {
        owner: Owner,
        reason: String,
        /// What it waits for before it is claimable again (disk full, locked credential).
        parked: Option<Parked>,
    },
}

/// What a [`WriteOp`] answered.
#[derive(Debug)]
pub(crate) enum WriteOut {
    Claims(Vec<Claim>),
    Fenced(Fenced),
}

impl WriteOp {
    /// The completion `c` of `owner`'s claim, owned for the group-commit queue.
    pub(crate) fn complete(owner: &Owner, c: Completion<'_>) -> WriteOp {
        WriteOp::Complete {
            owner: owner.clone(),
            completion: Box::new(c.into_owned()),
        }
    }

    /// A claim of up to `max` documents for `worker`.
    pub(crate) fn claim(worker: &str, max: usize) -> WriteOp {
        WriteOp::Claim {
            worker: worker.to_owned(),
            max,
        }
    }

    /// This operation as a completion, if it is one.
    // PostgreSQL only (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn completion(&self) -> Option<(&Owner, &Completion<'static>)> {
        match self {
            WriteOp::Complete { owner, completion } => Some((owner, &**completion)),
            _ => None,
        }
    }

    /// This operation as a completion with nothing for the sink or the search
    /// index, if it is one: what PostgreSQL's lone completion statement
    /// (`COMPLETE`, committing on its own) takes.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn plain_completion(&self) -> Option<(&Owner, &Completion<'static>)> {
        self.completion()
            .filter(|(_, c)| c.deliver.is_none() && c.index.is_none())
    }

    /// This operation as a completion with nothing for the sink, whose text
    /// for the search index (if any) comes with its labels: what PostgreSQL's
    /// batch statement takes (`postgres/batch.rs`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn batchable_completion(&self) -> Option<(&Owner, &Completion<'static>)> {
        self.completion()
            .filter(|(_, c)| c.deliver.is_none() && (c.index.is_none() || c.labels.is_some()))
    }
}

impl WriteOut {
    /// The claims of a claim.
    pub(crate) fn claims(self) -> Result<Vec<Claim>> {
        match self {
            WriteOut::Claims(c) => Ok(c),
            WriteOut::Fenced(_) => Err(Error::Internal(
                "a claim was answered with a fenced outcome".into(),
            )),
        }
    }

    /// The fenced outcome of a fenced operation.
    pub(crate) fn fenced(self) -> Result<Fenced> {
        match self {
            WriteOut::Fenced(f) => Ok(f),
            WriteOut::Claims(_) => Err(Error::Internal("a fenced write was answered with claims".into())),
        }
    }
}

/// A row that a claim may take, as seen inside the claiming transaction.
/// Shared with the PostgreSQL engine, whose history must read the same.
pub(crate) struct Candidate {
    pub(crate) id: i64,
    pub(crate) status: String,
    pub(crate) token: Option<String>,
    pub(crate) fence: i64,
    pub(crate) lease_expires_at: Option<Millis>,
    pub(crate) lost_leases: i64,
}

impl Candidate {
    /// An extracting row is claimable only because its lease is over: taking it
    /// means its last owner lost the lease.
    pub(crate) fn lease_lost(&self) -> bool {
        self.status == "extracting"
    }

    /// Why its lease counts as over, for the history.
    fn lease_over(&self, now: Millis) -> &'static str {
        if self.lease_expires_at.is_some_and(|t| t <= now) {
            LEASE_EXPIRED
        } else {
            LEASE_AHEAD
        }
    }
}

/// How a takeover's history says the lease was over: it expired, or...
pub(crate) const LEASE_EXPIRED: &str = "after lease expiry";

/// ...it was granted after now.
pub(crate) const LEASE_AHEAD: &str =
    "whose expiry lay further ahead than its lease length (the clock went back)";

/// The history detail of a claim of `c` that left it with `attempts` and `lost` leases.
pub(crate) fn claim_detail(
    now: Millis,
    policy: &Policy,
    worker: &str,
    c: &Candidate,
    (attempts, lost): (i64, i64),
) -> String {
    match (c.lease_lost(), &c.token) {
        (true, Some(old)) => format!(
            "worker {worker}; took over from fence {} ({old}) {}; attempt {attempts} refunded and kept; \
             lost leases {lost}/{}",
            c.fence,
            c.lease_over(now),
            policy.max_lost_leases
        ),
        _ => format!("worker {worker}; from {}; attempt {attempts}", c.status),
    }
}

/// Why a claimable row that has used up what it may spend is buried: its
/// `last_error` and its `dead` history line.
pub(crate) fn bury_reason(c: &Candidate) -> String {
    if c.lease_lost() {
        format!(
            "lost leases exhausted: {} leases expired without a completion (its worker died or \
             stalled each time)",
            c.lost_leases + 1
        )
    } else {
        "attempts exhausted".to_owned()
    }
}

/// The history detail of an accepted completion.
pub(crate) fn complete_detail(version: &str, path: &str, checksum: &str, note: Option<&str>) -> String {
    format!("version {version}{}", complete_detail_after(path, checksum, note))
}

/// What [`complete_detail`] says after the version (PostgreSQL's completion
/// reads the version and writes the line in one statement).
pub(crate) fn complete_detail_after(path: &str, checksum: &str, note: Option<&str>) -> String {
    match note {
        Some(note) => format!("; {path}; sha256 {checksum}; extracted as {note}"),
        None => format!("; {path}; sha256 {checksum}"),
    }
}

/// The history event of an accepted fenced write `what`; none for a renewal.
pub(crate) fn accepted_event(what: &str) -> Option<&'static str> {
    match what {
        "renew" => None,
        "complete" => Some("completed"),
        "fail" => Some("failed"),
        _ => Some("released"),
    }
}

/// The history detail of a refused fenced write.
pub(crate) fn refusal_detail(rejection: &Rejection) -> String {
    format!("refused: {rejection}")
}

/// What a refused write's row holds, from its status, token and fence.
pub(crate) fn rejection_of(o: &Owner, row: Option<OwnerRow>) -> Rejection {
    match row {
        None => Rejection::Missing,
        Some((status, token, fence)) => {
            let status = status_of(&status);
            if status == Status::Extracting && token.as_deref() != Some(o.token.as_str()) {
                Rejection::OtherOwner { fence }
            } else {
                Rejection::NotExtracting { status, fence }
            }
        }
    }
}

/// A status read back from SQL; the schema's CHECK allows only known names,
/// so anything else is treated as the most final state.
pub(crate) fn status_of(name: &str) -> Status {
    name.parse().unwrap_or(Status::Dead)
}

/// What a cleanup under a document's row lock ([`Store::with_job_locked`])
/// got to see.
#[derive(Debug)]
pub enum RowLock<T> {
    /// The lock was held while `f` ran on the row (`None`: no such row);
    /// `f`'s answer.
    Held(T),
    /// Another transaction held the row past the wait: nothing ran.
    Busy,
}
