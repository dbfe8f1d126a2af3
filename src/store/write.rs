//! The SQL of every write: claim and the fenced operations.
//!
//! Each function takes an open `BEGIN IMMEDIATE` transaction and `now` from the
//! injected clock; none of them opens, commits or retries (that is `tx.rs`), and
//! none of them touches the file system.

use rusqlite::types::Null;
use rusqlite::{params, Connection, OptionalExtension, ToSql};

use super::Policy;
use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::job::{Claim, Fenced, JobId, Owner, Parked, Rejection, Status};

/// One write that can share a group-commit transaction with others.
#[derive(Debug)]
pub(crate) enum WriteOp {
    Claim {
        worker: String,
        max: usize,
    },
    Renew(Owner),
    Complete(CompleteOp),
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

/// A completion, owned for the group-commit queue.
#[derive(Debug)]
pub(crate) struct CompleteOp {
    pub(crate) owner: Owner,
    pub(crate) path: String,
    pub(crate) checksum: String,
    /// What extraction decided, for the history.
    pub(crate) note: Option<String>,
    /// The text to queue for the sink if the result is accepted.
    pub(crate) delivery: Option<String>,
    /// The text to make searchable if the result is accepted.
    pub(crate) index: Option<String>,
    /// The result's size in bytes, recorded with it.
    pub(crate) bytes: Option<u64>,
}

impl CompleteOp {
    /// The completion borrowed, as the write paths take it.
    pub(crate) fn borrowed(&self) -> Completing<'_> {
        Completing {
            owner: &self.owner,
            path: &self.path,
            checksum: &self.checksum,
            note: self.note.as_deref(),
            delivery: self.delivery.as_deref(),
            index: self.index.as_deref(),
            bytes: self.bytes,
        }
    }
}

/// What a [`WriteOp`] answered.
#[derive(Debug)]
pub(crate) enum WriteOut {
    Claims(Vec<Claim>),
    Fenced(Fenced),
}

impl WriteOp {
    /// The completion `c` of `owner`'s claim, owned for the group-commit queue.
    pub(crate) fn complete(owner: &Owner, c: &crate::store::Completion<'_>) -> WriteOp {
        WriteOp::Complete(CompleteOp {
            owner: owner.clone(),
            path: c.result_path.to_owned(),
            checksum: c.checksum.to_owned(),
            note: c.note.map(str::to_owned),
            delivery: c.deliver.map(str::to_owned),
            index: c.index.map(str::to_owned),
            bytes: c.result_bytes,
        })
    }

    /// A claim of up to `max` documents for `worker`.
    pub(crate) fn claim(worker: &str, max: usize) -> WriteOp {
        WriteOp::Claim {
            worker: worker.to_owned(),
            max,
        }
    }

    /// This operation as a completion, if it is one, borrowed.
    // PostgreSQL only (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn completing(&self) -> Option<Completing<'_>> {
        match self {
            WriteOp::Complete(c) => Some(c.borrowed()),
            _ => None,
        }
    }

    /// This operation as a completion with nothing for the sink or the search
    /// index, if it is one: what PostgreSQL accepts in a statement that
    /// commits on its own (alone, or in a batch's one statement).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn plain_completion(&self) -> Option<Completing<'_>> {
        self.completing()
            .filter(|c| c.delivery.is_none() && c.index.is_none())
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

/// Run one operation inside the caller's transaction.
pub(crate) fn apply(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    op: &WriteOp,
) -> rusqlite::Result<WriteOut> {
    Ok(match op {
        WriteOp::Claim { worker, max } => WriteOut::Claims(claim(tx, now, policy, worker, *max)?),
        WriteOp::Renew(o) => WriteOut::Fenced(renew(tx, now, policy, o)?),
        WriteOp::Complete(c) => WriteOut::Fenced(complete_one(tx, now, policy, &c.borrowed())?),
        WriteOp::Fail {
            owner,
            error,
            permanent,
        } => WriteOut::Fenced(fail(tx, now, policy, owner, error, *permanent)?),
        WriteOp::Release {
            owner,
            reason,
            parked,
        } => WriteOut::Fenced(release(tx, now, owner, reason, parked.as_ref())?),
    })
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

/// The four claimable sets, each an index seek on its own partial index.
/// Leases that are over and due retries go first: they are older work. A lease
/// is over when it expired, or when it was granted after now (expiry minus its
/// length lies ahead: the clock went back, and waiting for that expiry could
/// take as long as the jump).
const CANDIDATE_QUERIES: [&str; 4] = [
    "SELECT id, status, owner_token, fence, lease_expires_at, lost_leases FROM jobs
     WHERE status = 'extracting' AND lease_expires_at <= ?1
     ORDER BY lease_expires_at LIMIT ?2",
    "SELECT id, status, owner_token, fence, lease_expires_at, lost_leases FROM jobs
     WHERE status = 'extracting' AND lease_expires_at - lease_ms > ?1
     ORDER BY lease_expires_at - lease_ms LIMIT ?2",
    "SELECT id, status, owner_token, fence, lease_expires_at, lost_leases FROM jobs
     WHERE status = 'retrying' AND retry_at <= ?1
     ORDER BY retry_at LIMIT ?2",
    "SELECT id, status, owner_token, fence, lease_expires_at, lost_leases FROM jobs
     WHERE status = 'discovered'
     ORDER BY id LIMIT ?2",
];

/// The claim statements, exposed so the plan test can EXPLAIN exactly these.
pub fn claim_candidate_queries() -> [&'static str; 4] {
    CANDIDATE_QUERIES
}

/// Whether any row of the first three claimable sets (leases that are over,
/// due retries) exists: one statement instead of three index seeks that find
/// nothing, the usual case. Each EXISTS repeats its set's query terms, so it is
/// a seek on that set's partial index.
const OLDER_WORK: &str = "SELECT
        EXISTS (SELECT 1 FROM jobs WHERE status = 'extracting' AND lease_expires_at <= ?1)
     OR EXISTS (SELECT 1 FROM jobs WHERE status = 'extracting' AND lease_expires_at - lease_ms > ?1)
     OR EXISTS (SELECT 1 FROM jobs WHERE status = 'retrying' AND retry_at <= ?1)";

// The SQL fragments below are macros, not consts, so that every statement is
// one `concat!`-ed literal: no formatting per call, and a short key for the
// statement cache.

/// The claimability condition, repeated in every conditional UPDATE so that a
/// row changed since it was selected is not taken.
macro_rules! claimable {
    () => {
        "(status = 'discovered'
     OR (status = 'retrying' AND retry_at <= ?2)
     OR (status = 'extracting' AND (lease_expires_at <= ?2 OR lease_expires_at - lease_ms > ?2)))"
    };
}

/// Whether the row has used up what it may spend: for a lost lease, the lost
/// leases (this one included) against the cap in parameter `$max_lost`;
/// otherwise the attempts (in effect, failures).
macro_rules! exhausted {
    ($max_lost:literal) => {
        concat!(
            "(CASE WHEN status = 'extracting' THEN lost_leases + 1 >= ",
            $max_lost,
            "
          ELSE attempts >= max_attempts END)"
        )
    };
}

/// The fence condition every fenced write repeats. It does not look at the lease
/// expiry: expiry decides who may re-claim, token and status decide who may write.
macro_rules! fence {
    () => {
        "id = ?1 AND owner_token = ?2 AND status = 'extracting'"
    };
}

const TAKE: &str = concat!(
    "UPDATE jobs SET status = 'extracting', owner_token = ?3, owner_worker = ?4,
                fence = fence + 1, lease_expires_at = ?5, lease_ms = ?6,
                attempts = CASE WHEN status = 'extracting' THEN attempts ELSE attempts + 1 END,
                lost_leases = lost_leases + (status = 'extracting'),
                retry_at = NULL, parked_on = NULL, updated_at = ?2
         WHERE id = ?1 AND ",
    claimable!(),
    " AND NOT ",
    exhausted!("?7"),
    "
         RETURNING doc_key, version, fence, attempts, lost_leases"
);

/// [`TAKE`] for the `(id, token)` rows of a `VALUES` list (see [`values`])
/// between this head and [`TAKE_EACH_TAIL`]; ?1 worker, ?2 now, ?3 lease
/// expiry, ?4 lease length, ?5 lost-lease cap, the rows from ?6.
const TAKE_EACH_HEAD: &str =
    "UPDATE jobs SET status = 'extracting', owner_token = c.column2, owner_worker = ?1,
                fence = fence + 1, lease_expires_at = ?3, lease_ms = ?4,
                attempts = CASE WHEN status = 'extracting' THEN attempts ELSE attempts + 1 END,
                lost_leases = lost_leases + (status = 'extracting'),
                retry_at = NULL, parked_on = NULL, updated_at = ?2
         FROM (VALUES ";

const TAKE_EACH_TAIL: &str = concat!(
    ") AS c
         WHERE id = c.column1 AND ",
    claimable!(),
    " AND NOT ",
    exhausted!("?5"),
    "
         RETURNING id, doc_key, version, fence, attempts, lost_leases"
);

/// [`fence!`] for each row `c` of a batch: `(id, token, ...)`.
macro_rules! fence_each {
    () => {
        "id = c.column1 AND owner_token = c.column2 AND status = 'extracting'"
    };
}

/// [`COMPLETE`] for the `(id, token, result path, checksum, bytes)` rows of a
/// `VALUES` list between this head and [`COMPLETE_EACH_TAIL`]; ?1 now, the
/// rows from ?2.
const COMPLETE_EACH_HEAD: &str =
    "UPDATE jobs SET status = 'indexed', result_path = c.column3, checksum = c.column4,
                result_bytes = c.column5, owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
                last_error = NULL, parked_on = NULL, updated_at = ?1
         FROM (VALUES ";

const COMPLETE_EACH_TAIL: &str = concat!(") AS c WHERE ", fence_each!(), " RETURNING id, version");

/// The history INSERT of [`record`] for the `(job id, token, fence, detail)`
/// rows of a `VALUES` list between this head and [`RECORD_EACH_TAIL`]; ?1
/// now, ?2 the event, the rows from ?3. Padding rows (all NULL) are skipped.
const RECORD_EACH_HEAD: &str = "INSERT INTO history (job_id, seq, at, event, token, fence, detail)
     SELECT r.column1, (SELECT coalesce(max(seq), 0) + 1 FROM history WHERE job_id = r.column1),
            ?1, ?2, r.column2, r.column3, r.column4
     FROM (VALUES ";

const RECORD_EACH_TAIL: &str = ") AS r WHERE r.column1 IS NOT NULL";

/// The most rows one batch statement takes (its parameters stay far below
/// SQLite's limit); a larger batch is taken in slices of this many.
const MAX_ROWS: usize = 256;

/// The rows of a batch statement: `n` padded with NULL rows up to a power of
/// two, so that a handful of statement texts (the key of `prepare_cached`)
/// serve every batch size.
fn padded(n: usize) -> usize {
    n.next_power_of_two().max(2)
}

/// `head (?first, ...), (...) tail`: a batch statement of `rows` rows of
/// `cols` parameters each, numbered from `first`.
fn values(head: &str, first: usize, rows: usize, cols: usize, tail: &str) -> String {
    use std::fmt::Write;
    let mut sql = String::with_capacity(head.len() + tail.len() + rows * cols * 6);
    sql.push_str(head);
    for r in 0..rows {
        sql.push_str(if r == 0 { "(" } else { ", (" });
        for c in 0..cols {
            let sep = if c == 0 { "" } else { ", " };
            let _ = write!(sql, "{sep}?{}", first + r * cols + c);
        }
        sql.push(')');
    }
    sql.push_str(tail);
    sql
}

const BURY: &str = concat!(
    "UPDATE jobs SET status = 'dead', owner_token = NULL, owner_worker = NULL,
                lease_expires_at = NULL, retry_at = NULL,
                attempts = CASE WHEN status = 'extracting' THEN max(attempts - 1, 0) ELSE attempts END,
                lost_leases = lost_leases + (status = 'extracting'),
                last_error = CASE WHEN last_error IS NULL THEN ?3 ELSE ?3 || '; last error: ' || last_error END,
                updated_at = ?2
         WHERE id = ?1 AND ",
    claimable!(),
    " AND ",
    exhausted!("?4")
);

const RENEW: &str = concat!(
    "UPDATE jobs SET lease_expires_at = ?3, lease_ms = ?5, updated_at = ?4 WHERE ",
    fence!()
);

const COMPLETE: &str = concat!(
    "UPDATE jobs SET status = 'indexed', result_path = ?3, checksum = ?4, result_bytes = ?6,
                owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
                last_error = NULL, parked_on = NULL, updated_at = ?5
         WHERE ",
    fence!(),
    " RETURNING version"
);

const FAIL: &str = concat!(
    "UPDATE jobs SET
            status = CASE WHEN ?3 OR attempts >= max_attempts THEN 'dead' ELSE 'retrying' END,
            retry_at = CASE WHEN ?3 OR attempts >= max_attempts THEN NULL ELSE ?4 END,
            last_error = ?5, owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL,
            parked_on = NULL, updated_at = ?6
         WHERE ",
    fence!(),
    " RETURNING status, retry_at"
);

const RELEASE: &str = concat!(
    "UPDATE jobs SET status = CASE WHEN ?4 IS NULL THEN 'discovered' ELSE 'retrying' END,
                retry_at = ?4, last_error = CASE WHEN ?4 IS NULL THEN last_error ELSE ?5 END,
                parked_on = ?6, attempts = max(attempts - 1, 0), owner_token = NULL,
                owner_worker = NULL, lease_expires_at = NULL, updated_at = ?3
         WHERE ",
    fence!()
);

/// Claim up to `max` documents (DESIGN §2). Rows that have used up their
/// attempts or their lost leases are moved to `dead` on the way and not counted.
pub(crate) fn claim(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    worker: &str,
    max: usize,
) -> rusqlite::Result<Vec<Claim>> {
    let mut claims = Vec::new();
    let older = tx
        .prepare_cached(OLDER_WORK)?
        .query_row([now], |r| r.get::<_, bool>(0))?;
    // Without older work only the last set (discovered) can hold candidates.
    let sets = if older {
        &CANDIDATE_QUERIES[..]
    } else {
        &CANDIDATE_QUERIES[3..]
    };
    for &sql in sets {
        // Dead rows found on the way do not count, so look again until the set is
        // empty or we have enough.
        loop {
            let want = max - claims.len();
            if want == 0 {
                return Ok(claims);
            }
            let found = candidates(tx, sql, now, want.min(MAX_ROWS))?;
            if found.is_empty() {
                break;
            }
            // One candidate goes through the single-row statements; more share
            // one UPDATE and one history INSERT.
            let taken = if let [c] = &found[..] {
                vec![take(tx, now, policy, worker, c)?]
            } else {
                take_each(tx, now, policy, worker, &found)?
            };
            let mut progressed = false;
            for (c, taken) in found.iter().zip(taken) {
                if let Some(claim) = taken {
                    claims.push(claim);
                    progressed = true;
                } else {
                    progressed |= bury(tx, now, policy, c)?;
                }
            }
            if !progressed {
                break;
            }
        }
    }
    Ok(claims)
}

fn candidates(tx: &Connection, sql: &str, now: Millis, limit: usize) -> rusqlite::Result<Vec<Candidate>> {
    let mut stmt = tx.prepare_cached(sql)?;
    let rows = stmt.query_map(params![now, limit as i64], |r| {
        Ok(Candidate {
            id: r.get(0)?,
            status: r.get(1)?,
            token: r.get(2)?,
            fence: r.get(3)?,
            lease_expires_at: r.get(4)?,
            lost_leases: r.get(5)?,
        })
    })?;
    rows.collect()
}

/// The conditional UPDATE that makes a claim; `None` if the row was not taken
/// (it has used up its attempts or its lost leases).
///
/// Taking over a lease that is over refunds the lost claim's attempt (the
/// worker died or stalled: not the document's fault) and counts a lost lease
/// instead; any other claim spends an attempt.
fn take(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    worker: &str,
    c: &Candidate,
) -> rusqlite::Result<Option<Claim>> {
    let token = uuid::Uuid::new_v4().to_string();
    let lease_until = now.saturating_add(policy.lease_ms);
    let mut stmt = tx.prepare_cached(TAKE)?;
    let row = stmt
        .query_row(
            params![
                c.id,
                now,
                token,
                worker,
                lease_until,
                policy.lease_ms,
                policy.max_lost_leases
            ],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            },
        )
        .optional()?;
    let Some((key, version, fence, attempts, lost)) = row else {
        return Ok(None);
    };
    guard(status_of(&c.status), Status::Extracting)?;
    let detail = claim_detail(now, policy, worker, c, (attempts, lost));
    record(tx, c.id, now, "claimed", Some(&token), Some(fence), Some(&detail))?;
    Ok(Some(Claim {
        id: JobId(c.id),
        key,
        version,
        token,
        fence,
        attempts,
        lease_expires_at: lease_until,
        took_over: c.lease_lost(),
    }))
}

/// [`take`] for several candidates at once: one conditional UPDATE over the
/// `[id, token]` pairs (a fresh token each), one history INSERT for the rows
/// it took. One answer per candidate, in their order; `None` where the row
/// was not taken (the caller buries it, as after [`take`]).
fn take_each(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    worker: &str,
    found: &[Candidate],
) -> rusqlite::Result<Vec<Option<Claim>>> {
    let tokens: Vec<String> = found.iter().map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let lease_until = now.saturating_add(policy.lease_ms);
    let rows = padded(found.len());
    let mut p: Vec<&dyn ToSql> = vec![
        &worker,
        &now,
        &lease_until,
        &policy.lease_ms,
        &policy.max_lost_leases,
    ];
    for (c, token) in found.iter().zip(&tokens) {
        p.extend([&c.id as &dyn ToSql, token]);
    }
    p.resize(p.len() + (rows - found.len()) * 2, &Null);
    let mut taken: Vec<Option<(Claim, i64)>> = found.iter().map(|_| None).collect();
    {
        let mut stmt = tx.prepare_cached(&values(TAKE_EACH_HEAD, 6, rows, 2, TAKE_EACH_TAIL))?;
        let mut out = stmt.query(&p[..])?;
        while let Some(r) = out.next()? {
            let id: i64 = r.get(0)?;
            let Some(i) = found.iter().position(|c| c.id == id) else {
                continue;
            };
            let claim = Claim {
                id: JobId(id),
                key: r.get(1)?,
                version: r.get(2)?,
                token: tokens[i].clone(),
                fence: r.get(3)?,
                attempts: r.get(4)?,
                lease_expires_at: lease_until,
                took_over: found[i].lease_lost(),
            };
            taken[i] = Some((claim, r.get(5)?));
        }
    }
    let mut details = Vec::new();
    for (c, t) in found.iter().zip(&taken) {
        if let Some((claim, lost)) = t {
            guard(status_of(&c.status), Status::Extracting)?;
            details.push(claim_detail(now, policy, worker, c, (claim.attempts, *lost)));
        }
    }
    let lines: Vec<Line<'_>> = taken
        .iter()
        .flatten()
        .zip(&details)
        .map(|((claim, _), detail)| {
            (
                claim.id.0,
                Some(claim.token.as_str()),
                Some(claim.fence),
                Some(detail.as_str()),
            )
        })
        .collect();
    record_each(tx, now, "claimed", &lines)?;
    Ok(taken.into_iter().map(|t| t.map(|(claim, _)| claim)).collect())
}

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

/// Move a claimable row that has used up what it may spend to `dead`, so that
/// a document that fails every time, or kills every worker that takes it,
/// stops being handed out. A lost lease found here is counted (and its
/// attempt refunded) like a takeover's.
fn bury(tx: &Connection, now: Millis, policy: &Policy, c: &Candidate) -> rusqlite::Result<bool> {
    let why = bury_reason(c);
    let n = tx
        .prepare_cached(BURY)?
        .execute(params![c.id, now, why, policy.max_lost_leases])?;
    if n == 1 {
        guard(status_of(&c.status), Status::Dead)?;
        record(
            tx,
            c.id,
            now,
            "dead",
            c.token.as_deref(),
            Some(c.fence),
            Some(&why),
        )?;
    }
    Ok(n == 1)
}

/// Extend the owner's lease to now plus its length, from now whatever the row
/// held: after the clock went back, the old expiry lies further ahead than a
/// lease can reach and already counts as over, so keeping it (max()) would leave
/// the lease lost; re-anchoring makes it live again. Shortening a lease is safe:
/// only the fence (token and status) decides who may write, never the clock.
pub(crate) fn renew(tx: &Connection, now: Millis, policy: &Policy, o: &Owner) -> rusqlite::Result<Fenced> {
    let n = tx.prepare_cached(RENEW)?.execute(params![
        o.id.0,
        o.token,
        now.saturating_add(policy.lease_ms),
        now,
        policy.lease_ms
    ])?;
    settle(tx, now, o, n, "renew", None)
}

pub(crate) fn complete(
    tx: &Connection,
    now: Millis,
    o: &Owner,
    (path, checksum, bytes): (&str, &str, Option<u64>),
    note: Option<&str>,
) -> rusqlite::Result<Fenced> {
    let bytes = bytes.and_then(|b| i64::try_from(b).ok());
    let version: Option<String> = tx
        .prepare_cached(COMPLETE)?
        .query_row(params![o.id.0, o.token, path, checksum, now, bytes], |r| r.get(0))
        .optional()?;
    let detail = version
        .as_deref()
        .map(|v| complete_detail(v, path, checksum, note));
    settle(
        tx,
        now,
        o,
        usize::from(version.is_some()),
        "complete",
        detail.as_deref(),
    )
}

/// One completion of a batch ([`complete_each`]).
#[derive(Debug)]
pub(crate) struct Completing<'a> {
    pub owner: &'a Owner,
    pub path: &'a str,
    pub checksum: &'a str,
    /// What extraction decided, for the history.
    pub note: Option<&'a str>,
    /// The text to queue for the sink if the result is accepted.
    pub delivery: Option<&'a str>,
    /// The text to make searchable if the result is accepted.
    pub index: Option<&'a str>,
    /// The result's size in bytes, recorded with it.
    pub bytes: Option<u64>,
}

impl<'a> Completing<'a> {
    /// The same completion as the store's public [`Completion`] reads it.
    // PostgreSQL only (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn as_completion(&self) -> crate::store::Completion<'a> {
        crate::store::Completion {
            result_path: self.path,
            checksum: self.checksum,
            note: self.note,
            deliver: self.delivery,
            index: self.index,
            result_bytes: self.bytes,
        }
    }
}

/// Complete many claims in the caller's transaction, each fenced on its own
/// token: what [`complete`] (and the sink's push) does for each, with one
/// UPDATE for all of them and one history INSERT for the accepted ones.
/// Refusals are settled one by one, as after [`complete`]. A single claim, or
/// two claims of the same document, go through [`complete`] one at a time.
pub(crate) fn complete_each(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    done: &[Completing<'_>],
) -> rusqlite::Result<Vec<Fenced>> {
    let mut ids: Vec<i64> = done.iter().map(|d| d.owner.id.0).collect();
    ids.sort_unstable();
    ids.dedup();
    if done.len() < 2 || ids.len() < done.len() {
        return done.iter().map(|d| complete_one(tx, now, policy, d)).collect();
    }
    let mut out = Vec::with_capacity(done.len());
    for slice in done.chunks(MAX_ROWS) {
        out.extend(complete_slice(tx, now, policy, slice)?);
    }
    Ok(out)
}

/// [`complete_each`] for at most [`MAX_ROWS`] claims of distinct documents.
fn complete_slice(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    done: &[Completing<'_>],
) -> rusqlite::Result<Vec<Fenced>> {
    if let [d] = done {
        return Ok(vec![complete_one(tx, now, policy, d)?]);
    }
    let rows = padded(done.len());
    let sizes: Vec<Option<i64>> = done
        .iter()
        .map(|d| d.bytes.and_then(|b| i64::try_from(b).ok()))
        .collect();
    let mut p: Vec<&dyn ToSql> = vec![&now];
    for (d, size) in done.iter().zip(&sizes) {
        p.extend([
            &d.owner.id.0 as &dyn ToSql,
            &d.owner.token,
            &d.path,
            &d.checksum,
            size,
        ]);
    }
    p.resize(p.len() + (rows - done.len()) * 5, &Null);
    let mut versions: Vec<Option<String>> = done.iter().map(|_| None).collect();
    {
        let mut stmt = tx.prepare_cached(&values(COMPLETE_EACH_HEAD, 2, rows, 5, COMPLETE_EACH_TAIL))?;
        let mut out = stmt.query(&p[..])?;
        while let Some(r) = out.next()? {
            let id: i64 = r.get(0)?;
            if let Some(i) = done.iter().position(|d| d.owner.id.0 == id) {
                versions[i] = Some(r.get(1)?);
            }
        }
    }
    let details: Vec<Option<String>> = done
        .iter()
        .zip(&versions)
        .map(|(d, v)| {
            v.as_deref()
                .map(|v| complete_detail(v, d.path, d.checksum, d.note))
        })
        .collect();
    let lines: Vec<Line<'_>> = done
        .iter()
        .zip(&details)
        .filter_map(|(d, detail)| {
            let o = d.owner;
            detail
                .as_deref()
                .map(|t| (o.id.0, Some(o.token.as_str()), Some(o.fence), Some(t)))
        })
        .collect();
    record_each(tx, now, "completed", &lines)?;
    let mut searchable = Vec::new();
    let out = done
        .iter()
        .zip(&versions)
        .map(|(d, v)| {
            if v.is_none() {
                return settle(tx, now, d.owner, 0, "complete", None);
            }
            deliver(tx, now, policy, d)?;
            searchable.push(search_text(policy, d));
            Ok(Fenced::Accepted)
        })
        .collect::<rusqlite::Result<_>>()?;
    super::search::sqlite::accept_all(tx, &searchable)?;
    Ok(out)
}

/// One completion alone: what [`apply`] does for a [`WriteOp::Complete`].
fn complete_one(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    d: &Completing<'_>,
) -> rusqlite::Result<Fenced> {
    let out = complete(tx, now, d.owner, (d.path, d.checksum, d.bytes), d.note)?;
    if out.is_accepted() {
        accepted_text(tx, now, policy, d)?;
    }
    Ok(out)
}

/// What an accepted completion does with its text, in its transaction: queue
/// it for the sink, and make it the document's searchable text (replacing the
/// previous version's; without text, or with the index off, the previous
/// text is taken out, since it no longer belongs to the accepted result).
fn accepted_text(tx: &Connection, now: Millis, policy: &Policy, d: &Completing<'_>) -> rusqlite::Result<()> {
    deliver(tx, now, policy, d)?;
    super::search::sqlite::accepted(tx, &search_text(policy, d))
}

/// Queue an accepted completion's text for the sink, if it carries one.
fn deliver(tx: &Connection, now: Millis, policy: &Policy, d: &Completing<'_>) -> rusqlite::Result<()> {
    match d.delivery {
        Some(text) => super::outbox::push(
            &mut super::sqlite::Rows(tx),
            now,
            &policy.outbox,
            d.owner.id.0,
            d.checksum,
            text,
        ),
        None => Ok(()),
    }
}

/// What an accepted completion makes searchable: its text, or with none (or
/// the index off) nothing, so the previous version's text is taken out.
fn search_text<'a>(policy: &Policy, d: &Completing<'a>) -> super::search::sqlite::Accepted<'a> {
    super::search::sqlite::Accepted {
        id: d.owner.id.0,
        result: (d.path, d.checksum),
        text: d.index.filter(|_| policy.search_index),
        parts_tag: Some(d.owner.token.as_str()),
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

pub(crate) fn fail(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    o: &Owner,
    error: &str,
    permanent: bool,
) -> rusqlite::Result<Fenced> {
    let retry_at = now.saturating_add(policy.backoff.delay_ms(o.attempts));
    let row: Option<(String, Option<i64>)> = tx
        .prepare_cached(FAIL)?
        .query_row(params![o.id.0, o.token, permanent, retry_at, error, now], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    if let Some((status, _)) = &row {
        guard(Status::Extracting, status_of(status))?;
    }
    let detail = row.as_ref().map(|(status, at)| match at {
        Some(at) => format!("{status} at {at}: {error}"),
        None => format!("{status}: {error}"),
    });
    settle(tx, now, o, usize::from(row.is_some()), "fail", detail.as_deref())
}

pub(crate) fn release(
    tx: &Connection,
    now: Millis,
    o: &Owner,
    reason: &str,
    parked: Option<&Parked>,
) -> rusqlite::Result<Fenced> {
    // Handing back does not spend the attempt the claim took. A parked row
    // waits in `retrying` (reason kept as its last error, the account it waits
    // for in `parked_on`) so that a full disk or a locked credential is not hammered.
    let (until, account) = (parked.map(Parked::until), parked.and_then(Parked::account));
    let n = tx
        .prepare_cached(RELEASE)?
        .execute(params![o.id.0, o.token, now, until, reason, account])?;
    settle(tx, now, o, n, "release", Some(reason))
}

/// Turn "rows changed" into an outcome; on zero, read the row to say why and
/// record the refusal. Accepted renewals are not recorded (they are not
/// transitions, and would flood the history).
fn settle(
    tx: &Connection,
    now: Millis,
    o: &Owner,
    changed: usize,
    what: &str,
    detail: Option<&str>,
) -> rusqlite::Result<Fenced> {
    if changed == 1 {
        if let Some(event) = accepted_event(what) {
            record(tx, o.id.0, now, event, Some(&o.token), Some(o.fence), detail)?;
        }
        return Ok(Fenced::Accepted);
    }
    let rejection = why_rejected(tx, o)?;
    if rejection != Rejection::Missing {
        let detail = refusal_detail(&rejection);
        record(
            tx,
            o.id.0,
            now,
            &format!("{what}_rejected"),
            Some(&o.token),
            Some(o.fence),
            Some(&detail),
        )?;
    }
    Ok(Fenced::Rejected(rejection))
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
pub(crate) fn rejection_of(o: &Owner, row: Option<(String, Option<String>, i64)>) -> Rejection {
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

fn why_rejected(tx: &Connection, o: &Owner) -> rusqlite::Result<Rejection> {
    let row: Option<(String, Option<String>, i64)> = tx
        .prepare_cached("SELECT status, owner_token, fence FROM jobs WHERE id = ?1")?
        .query_row([o.id.0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(rejection_of(o, row))
}

/// A status read back from SQL; the schema's CHECK allows only known names,
/// so anything else is treated as the most final state.
pub(crate) fn status_of(name: &str) -> Status {
    name.parse().unwrap_or(Status::Dead)
}

/// The store never writes a transition DESIGN §3 does not allow: one that
/// would be written fails its transaction instead (and rolls back).
fn guard(from: Status, to: Status) -> rusqlite::Result<()> {
    if from.can_transition_to(to) {
        return Ok(());
    }
    Err(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
        Some(format!("refused transition {from} -> {to}")),
    ))
}

/// Append one line to the history table.
pub(crate) fn record(
    tx: &Connection,
    job_id: i64,
    now: Millis,
    event: &str,
    token: Option<&str>,
    fence: Option<i64>,
    detail: Option<&str>,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO history (job_id, seq, at, event, token, fence, detail)
         VALUES (?1, (SELECT coalesce(max(seq), 0) + 1 FROM history WHERE job_id = ?1), ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![job_id, now, event, token, fence, detail])?;
    Ok(())
}

/// One history line of a batch: job id, token, fence, detail.
type Line<'a> = (i64, Option<&'a str>, Option<i64>, Option<&'a str>);

/// [`record`] for several documents at once, all with `event`: one INSERT.
/// Each document at most once (every seq is read before the first line is
/// written).
fn record_each(tx: &Connection, now: Millis, event: &str, lines: &[Line<'_>]) -> rusqlite::Result<()> {
    match lines {
        [] => Ok(()),
        [(id, token, fence, detail)] => record(tx, *id, now, event, *token, *fence, *detail),
        _ => {
            let rows = padded(lines.len());
            let mut p: Vec<&dyn ToSql> = vec![&now, &event];
            for (id, token, fence, detail) in lines {
                p.extend([id as &dyn ToSql, token, fence, detail]);
            }
            p.resize(p.len() + (rows - lines.len()) * 4, &Null);
            tx.prepare_cached(&values(RECORD_EACH_HEAD, 3, rows, 4, RECORD_EACH_TAIL))?
                .execute(&p[..])?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The precheck must be three seeks on the partial indexes of the sets it
    /// stands for: a scan of `jobs` would step over every indexed row.
    #[test]
    fn the_older_work_precheck_seeks_the_partial_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        drop(crate::Store::open(&path, crate::StoreOptions::default()).unwrap());
        let c = Connection::open(&path).unwrap();
        c.execute_batch("ANALYZE").unwrap();
        let plan: Vec<String> = c
            .prepare(&format!("EXPLAIN QUERY PLAN {OLDER_WORK}"))
            .unwrap()
            .query_map([1_000i64], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let joined = plan.join(" | ");
        for index in ["jobs_lease_expiry", "jobs_lease_granted", "jobs_retry_due"] {
            assert!(joined.contains(index), "{index} not used: {joined}");
        }
        assert!(!plan.iter().any(|l| l.trim() == "SCAN jobs"), "scan: {joined}");
    }
}

/// A batch claim and a batch completion write exactly the rows and the history
/// that the same claims and completions one at a time write.
#[cfg(test)]
mod batch_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rusqlite::Connection;

    use crate::job::{Claim, Fenced};
    use crate::store::{Backoff, Completion, NewDoc, Store, StoreOptions};
    use crate::ManualClock;

    /// Every table a claim or a completion writes, as text, with each owner
    /// token replaced by its order of first appearance (tokens are random).
    fn dump(path: &std::path::Path) -> String {
        let c = Connection::open(path).unwrap();
        let mut out = String::new();
        for sql in [
            "SELECT * FROM history ORDER BY job_id, seq",
            "SELECT * FROM jobs ORDER BY id",
            "SELECT * FROM outbox ORDER BY id",
            "SELECT * FROM outbox_totals",
        ] {
            let mut stmt = c.prepare(sql).unwrap();
            let n = stmt.column_count();
            let mut rows = stmt.query([]).unwrap();
            while let Some(r) = rows.next().unwrap() {
                let line: Vec<String> = (0..n)
                    .map(|i| format!("{:?}", r.get::<_, rusqlite::types::Value>(i).unwrap()))
                    .collect();
                out.push_str(&line.join(" | "));
                out.push('\n');
            }
            out.push_str("--\n");
        }
        let tokens: Vec<String> = c
            .prepare("SELECT token FROM history WHERE token IS NOT NULL ORDER BY job_id, seq")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let mut seen: Vec<&String> = Vec::new();
        for t in &tokens {
            if !seen.contains(&t) {
                seen.push(t);
            }
        }
        for (i, t) in seen.iter().enumerate() {
            out = out.replace(t.as_str(), &format!("<token {i}>"));
        }
        out
    }

    /// The same story twice; `batch` decides whether the last claims and
    /// completions go one at a time or as batches. It covers fresh rows, a due
    /// retry, a lease taken over, a row whose lost leases are used up (buried
    /// on the way), a stale claim refused, a note and a delivery.
    fn story(batch: bool) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let clock = ManualClock::new(1_000_000);
        let opts = StoreOptions::default()
            .clock(Arc::new(clock.clone()))
            .lease(Duration::from_secs(10))
            .max_attempts(3)
            .max_lost_leases(2)
            .backoff(Backoff {
                jitter: 0.0,
                ..Backoff::default()
            });
        let store = Store::open(&path, opts).unwrap();
        let docs: Vec<NewDoc> = (0..8).map(|i| NewDoc::new(format!("d{i}"), "v1")).collect();
        store.enqueue_many(&docs).unwrap();
        // d0: its lease lost once already, and lost again below: buried.
        drop(store.claim("setup").unwrap().unwrap());
        clock.advance(Duration::from_secs(11));
        drop(store.claim("setup").unwrap().unwrap());
        // d1: a claim whose lease runs out; the batch below takes it over.
        let stale = store.claim("setup").unwrap().unwrap();
        // d2: failed once, its retry is due below.
        let failing = store.claim("setup").unwrap().unwrap();
        assert!(store.fail(failing, "boom", false).unwrap().is_accepted());
        clock.advance(Duration::from_secs(3600));

        let claims: Vec<Claim> = if batch {
            store.claim_batch("w", 6).unwrap()
        } else {
            (0..6).map_while(|_| store.claim("w").unwrap()).collect()
        };
        assert_eq!(claims.len(), 6);
        clock.advance(Duration::from_secs(1));
        // The new claim of d1 is finished last, alone; the stale one is refused.
        let (taken_over, claims): (Vec<Claim>, Vec<Claim>) =
            claims.into_iter().partition(|c| c.id == stale.id);
        let mut done: Vec<(Claim, Completion<'_>)> = vec![(stale, Completion::new("r/stale", "s0"))];
        for (i, c) in claims.into_iter().enumerate() {
            let completion = match i {
                0 => Completion {
                    note: Some("plain text"),
                    ..Completion::new("r/a", "s1")
                },
                1 => Completion {
                    deliver: Some("the text"),
                    ..Completion::new("r/b", "s2")
                },
                _ => Completion::new("r/c", "s3"),
            };
            done.push((c, completion));
        }
        let outcomes: Vec<Fenced> = if batch {
            store.finish_many(done).unwrap()
        } else {
            done.into_iter()
                .map(|(c, d)| store.finish(c, d).unwrap())
                .collect()
        };
        assert!(!outcomes[0].is_accepted());
        assert!(outcomes[1..].iter().all(Fenced::is_accepted), "{outcomes:?}");
        for c in taken_over {
            assert!(store.complete(c, "r/d1", "s4").unwrap().is_accepted());
        }
        drop(store);
        dump(&path)
    }

    /// A batch larger than one statement can bind is taken in slices.
    #[test]
    fn a_batch_of_thousands_is_claimed_and_completed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("q.db"), StoreOptions::default()).unwrap();
        let docs: Vec<NewDoc> = (0..9000).map(|i| NewDoc::new(format!("d{i}"), "v1")).collect();
        store.enqueue_many(&docs).unwrap();
        let claims = store.claim_batch("w", 9000).unwrap();
        assert_eq!(claims.len(), 9000);
        let done: Vec<_> = claims.into_iter().map(|c| (c, "r", "s")).collect();
        let out = store.complete_many(done).unwrap();
        assert!(out.iter().all(Fenced::is_accepted));
        assert_eq!(store.counts().unwrap().get(crate::job::Status::Indexed), 9000);
    }

    #[test]
    fn a_batch_writes_the_rows_and_history_of_one_at_a_time() {
        let one_by_one = story(false);
        assert!(one_by_one.contains("took over from fence"), "{one_by_one}");
        assert!(one_by_one.contains("lost leases exhausted"), "{one_by_one}");
        assert!(one_by_one.contains("complete_rejected"), "{one_by_one}");
        assert!(one_by_one.contains("from retrying"), "{one_by_one}");
        assert_eq!(story(true), one_by_one);
    }
}
