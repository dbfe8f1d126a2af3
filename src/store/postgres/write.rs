//! Claim and the fenced writes on PostgreSQL: the rules of `store/write.rs`
//! (DESIGN §2, §3), statement for statement, with the same history lines.
//!
//! Why each is safe at READ COMMITTED:
//! - A claim selects its candidates `FOR UPDATE SKIP LOCKED`, set by set in
//!   the same order as SQLite's, so each candidate is locked by this
//!   transaction and its values are the newest committed ones; rows another
//!   claim holds are skipped, not waited for. The conditional UPDATE that
//!   takes (or buries) a candidate repeats the claimability and exhaustion
//!   guards all the same. The transaction ends before any work starts.
//! - A fenced write is one UPDATE guarded by id + token + `extracting`,
//!   never by the expiry. A concurrent claim that committed first is seen
//!   by the guard's re-check of the newest row version, so a stale owner
//!   changes nothing. A refusal reads the row `FOR UPDATE` to say why.
//! - History: every line for a document is written while this transaction
//!   holds the document's row lock (taken by the UPDATE, or by the refusal's
//!   read), so the `max(seq) + 1` of the next line, read after the lock was
//!   granted, sees every line before it: one row per transition, seq 1, 2, 3…

use ::postgres::Transaction;

use super::tx::{Fail, Sql};
use crate::clock::Millis;
use crate::job::{Claim, Fenced, JobId, Owner, Parked, Rejection, Status};
use crate::store::options::Policy;
use crate::store::write::{
    accepted_event, bury_reason, claim_detail, complete_detail, refusal_detail, rejection_of, status_of,
    Candidate,
};
use crate::store::Completion;
use crate::store::OutboxCap;

/// The four claimable sets in SQLite's order (older work first), each
/// locking what it returns and skipping what another claim holds. Ties are
/// broken by id, as SQLite's partial indexes yield them. $1 is now, except
/// in the second set (leases granted after now), where it is now plus the
/// clock skew allowed ([`Policy::clock_skew_ms`]); $2 the limit.
const CANDIDATE_QUERIES: [&str; 4] = [
    "SELECT id, status, owner_token, fence, lease_expires_at, lost_leases FROM jobs
     WHERE status = 'extracting' AND lease_expires_at <= $1
     ORDER BY lease_expires_at, id LIMIT $2 FOR UPDATE SKIP LOCKED",
    "SELECT id, status, owner_token, fence, lease_expires_at, lost_leases FROM jobs
     WHERE status = 'extracting' AND lease_expires_at - lease_ms > $1
     ORDER BY lease_expires_at - lease_ms, id LIMIT $2 FOR UPDATE SKIP LOCKED",
    "SELECT id, status, owner_token, fence, lease_expires_at, lost_leases FROM jobs
     WHERE status = 'retrying' AND retry_at <= $1
     ORDER BY retry_at, id LIMIT $2 FOR UPDATE SKIP LOCKED",
    "SELECT id, status, owner_token, fence, lease_expires_at, lost_leases FROM jobs
     WHERE status = 'discovered' AND $1::BIGINT IS NOT NULL
     ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED",
];

/// Whether any row of the first three sets exists (see `store/write.rs`);
/// $1 now, $2 now plus the clock skew allowed.
const OLDER_WORK: &str = "SELECT
        EXISTS (SELECT 1 FROM jobs WHERE status = 'extracting' AND lease_expires_at <= $1)
     OR EXISTS (SELECT 1 FROM jobs WHERE status = 'extracting' AND lease_expires_at - lease_ms > $2)
     OR EXISTS (SELECT 1 FROM jobs WHERE status = 'retrying' AND retry_at <= $1)";

/// The claimability condition every conditional UPDATE repeats: $2 is now,
/// `$ahead` now plus the clock skew allowed (a lease granted later than that
/// was granted after now: the clock went back).
macro_rules! claimable {
    ($ahead:literal) => {
        concat!(
            "(status = 'discovered'
     OR (status = 'retrying' AND retry_at <= $2)
     OR (status = 'extracting' AND (lease_expires_at <= $2 OR lease_expires_at - lease_ms > ",
            $ahead,
            ")))"
        )
    };
}

/// Whether the row has used up what it may spend (see `store/write.rs`).
macro_rules! exhausted {
    ($max_lost:literal) => {
        concat!(
            "(CASE WHEN status = 'extracting' THEN lost_leases + 1 >= ",
            $max_lost,
            " ELSE attempts >= max_attempts END)"
        )
    };
}

/// The fence: id, token, extracting. Never the expiry.
macro_rules! fence {
    () => {
        "id = $1 AND owner_token = $2 AND status = 'extracting'"
    };
}

const TAKE: &str = concat!(
    "UPDATE jobs SET status = 'extracting', owner_token = $3, owner_worker = $4,
                fence = fence + 1, lease_expires_at = $5, lease_ms = $6,
                attempts = CASE WHEN status = 'extracting' THEN attempts ELSE attempts + 1 END,
                lost_leases = lost_leases + CASE WHEN status = 'extracting' THEN 1 ELSE 0 END,
                retry_at = NULL, parked_on = NULL, updated_at = $2
         WHERE id = $1 AND ",
    claimable!("$8"),
    " AND NOT ",
    exhausted!("$7"),
    " RETURNING doc_key, version, fence, attempts, lost_leases"
);

const BURY: &str = concat!(
    "UPDATE jobs SET status = 'dead', owner_token = NULL, owner_worker = NULL,
                lease_expires_at = NULL, retry_at = NULL,
                attempts = CASE WHEN status = 'extracting' THEN GREATEST(attempts - 1, 0) ELSE attempts END,
                lost_leases = lost_leases + CASE WHEN status = 'extracting' THEN 1 ELSE 0 END,
                last_error = CASE WHEN last_error IS NULL THEN $3::TEXT
                                  ELSE $3::TEXT || '; last error: ' || last_error END,
                updated_at = $2
         WHERE id = $1 AND ",
    claimable!("$5"),
    " AND ",
    exhausted!("$4")
);

const RENEW: &str = concat!(
    "UPDATE jobs SET lease_expires_at = $3, lease_ms = $5, updated_at = $4 WHERE ",
    fence!()
);

const COMPLETE: &str = concat!(
    "UPDATE jobs SET status = 'indexed', result_path = $3, checksum = $4, owner_token = NULL,
                owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL, last_error = NULL,
                parked_on = NULL, updated_at = $5
         WHERE ",
    fence!(),
    " RETURNING version"
);

const FAIL: &str = concat!(
    "UPDATE jobs SET
            status = CASE WHEN $3 OR attempts >= max_attempts THEN 'dead' ELSE 'retrying' END,
            retry_at = CASE WHEN $3 OR attempts >= max_attempts THEN NULL ELSE $4::BIGINT END,
            last_error = $5, owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL,
            parked_on = NULL, updated_at = $6
         WHERE ",
    fence!(),
    " RETURNING status, retry_at"
);

const RELEASE: &str = concat!(
    "UPDATE jobs SET status = CASE WHEN $4::BIGINT IS NULL THEN 'discovered' ELSE 'retrying' END,
                retry_at = $4::BIGINT,
                last_error = CASE WHEN $4::BIGINT IS NULL THEN last_error ELSE $5::TEXT END,
                parked_on = $6::TEXT, attempts = GREATEST(attempts - 1, 0), owner_token = NULL,
                owner_worker = NULL, lease_expires_at = NULL, updated_at = $3
         WHERE ",
    fence!()
);

/// Claim up to `max` documents (DESIGN §2), burying on the way the rows that
/// have used up what they may spend. One candidate at a time goes through
/// the single-row statements (a batch shares the transaction).
pub(crate) fn claim(
    tx: &mut Transaction<'_>,
    now: Millis,
    policy: &Policy,
    worker: &str,
    max: usize,
) -> Sql<Vec<Claim>> {
    let mut claims = Vec::new();
    let ahead = now.saturating_add(policy.clock_skew_ms);
    let older: bool = tx.query_one(OLDER_WORK, &[&now, &ahead])?.try_get(0)?;
    let first = if older { 0 } else { 3 };
    for (set, &sql) in CANDIDATE_QUERIES.iter().enumerate().skip(first) {
        let bound = if set == 1 { ahead } else { now };
        loop {
            let want = max - claims.len();
            if want == 0 {
                return Ok(claims);
            }
            let found = candidates(tx, sql, bound, want)?;
            if found.is_empty() {
                break;
            }
            let mut progressed = false;
            for c in &found {
                if let Some(claim) = take(tx, now, policy, worker, c)? {
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

fn candidates(tx: &mut Transaction<'_>, sql: &str, bound: Millis, limit: usize) -> Sql<Vec<Candidate>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = tx.query(sql, &[&bound, &limit])?;
    rows.iter()
        .map(|r| {
            Ok(Candidate {
                id: r.try_get(0)?,
                status: r.try_get(1)?,
                token: r.try_get(2)?,
                fence: r.try_get(3)?,
                lease_expires_at: r.try_get(4)?,
                lost_leases: r.try_get(5)?,
            })
        })
        .collect()
}

/// The conditional UPDATE that makes a claim; `None` if the row was not
/// taken (it has used up its attempts or its lost leases).
fn take(
    tx: &mut Transaction<'_>,
    now: Millis,
    policy: &Policy,
    worker: &str,
    c: &Candidate,
) -> Sql<Option<Claim>> {
    let token = uuid::Uuid::new_v4().to_string();
    let lease_until = now.saturating_add(policy.lease_ms);
    let row = tx.query_opt(
        TAKE,
        &[
            &c.id,
            &now,
            &token,
            &worker,
            &lease_until,
            &policy.lease_ms,
            &policy.max_lost_leases,
            &now.saturating_add(policy.clock_skew_ms),
        ],
    )?;
    let Some(row) = row else {
        return Ok(None);
    };
    let (key, version, fence, attempts, lost): (String, String, i64, i64, i64) = (
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
    );
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
    }))
}

/// Move a claimable, exhausted row to `dead` (see `store/write.rs: bury`).
fn bury(tx: &mut Transaction<'_>, now: Millis, policy: &Policy, c: &Candidate) -> Sql<bool> {
    let why = bury_reason(c);
    let ahead = now.saturating_add(policy.clock_skew_ms);
    let n = tx.execute(BURY, &[&c.id, &now, &why, &policy.max_lost_leases, &ahead])?;
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

/// Extend the owner's lease to now plus its length, from now (see
/// `store/write.rs: renew` for why it may shorten a lease).
pub(crate) fn renew(tx: &mut Transaction<'_>, now: Millis, policy: &Policy, o: &Owner) -> Sql<Fenced> {
    let until = now.saturating_add(policy.lease_ms);
    let n = tx.execute(RENEW, &[&o.id.0, &o.token, &until, &now, &policy.lease_ms])?;
    settle(tx, now, o, n, "renew", None)
}

/// Accept `path` and `checksum` as the document's result.
pub(crate) fn complete(
    tx: &mut Transaction<'_>,
    now: Millis,
    o: &Owner,
    (path, checksum): (&str, &str),
    note: Option<&str>,
) -> Sql<Fenced> {
    let version: Option<String> = tx
        .query_opt(COMPLETE, &[&o.id.0, &o.token, &path, &checksum, &now])?
        .map(|r| r.try_get(0))
        .transpose()?;
    let detail = version
        .as_deref()
        .map(|v| complete_detail(v, path, checksum, note));
    settle(
        tx,
        now,
        o,
        u64::from(version.is_some()),
        "complete",
        detail.as_deref(),
    )
}

/// Record a failure: retrying with backoff, or dead.
pub(crate) fn fail(
    tx: &mut Transaction<'_>,
    now: Millis,
    policy: &Policy,
    o: &Owner,
    error: &str,
    permanent: bool,
) -> Sql<Fenced> {
    let retry_at = now.saturating_add(policy.backoff.delay_ms(o.attempts));
    let row = tx.query_opt(FAIL, &[&o.id.0, &o.token, &permanent, &retry_at, &error, &now])?;
    let row: Option<(String, Option<i64>)> = row
        .map(|r| Ok::<_, Fail>((r.try_get(0)?, r.try_get(1)?)))
        .transpose()?;
    if let Some((status, _)) = &row {
        guard(Status::Extracting, status_of(status))?;
    }
    let detail = row.as_ref().map(|(status, at)| match at {
        Some(at) => format!("{status} at {at}: {error}"),
        None => format!("{status}: {error}"),
    });
    settle(tx, now, o, u64::from(row.is_some()), "fail", detail.as_deref())
}

/// Hand back without spending the attempt, parked or not.
pub(crate) fn release(
    tx: &mut Transaction<'_>,
    now: Millis,
    o: &Owner,
    reason: &str,
    parked: Option<&Parked>,
) -> Sql<Fenced> {
    let (until, account) = (parked.map(Parked::until), parked.and_then(Parked::account));
    let n = tx.execute(RELEASE, &[&o.id.0, &o.token, &now, &until, &reason, &account])?;
    settle(tx, now, o, n, "release", Some(reason))
}

/// Rows changed into an outcome; on zero, lock and read the row to say why
/// and record the refusal (see `store/write.rs: settle`).
fn settle(
    tx: &mut Transaction<'_>,
    now: Millis,
    o: &Owner,
    changed: u64,
    what: &str,
    detail: Option<&str>,
) -> Sql<Fenced> {
    if changed == 1 {
        if let Some(event) = accepted_event(what) {
            record(tx, o.id.0, now, event, Some(&o.token), Some(o.fence), detail)?;
        }
        return Ok(Fenced::Accepted);
    }
    let row = tx
        .query_opt(
            "SELECT status, owner_token, fence FROM jobs WHERE id = $1 FOR UPDATE",
            &[&o.id.0],
        )?
        .map(|r| Ok::<_, Fail>((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .transpose()?;
    let rejection = rejection_of(o, row);
    if rejection != Rejection::Missing {
        let detail = refusal_detail(&rejection);
        let event = format!("{what}_rejected");
        record(
            tx,
            o.id.0,
            now,
            &event,
            Some(&o.token),
            Some(o.fence),
            Some(&detail),
        )?;
    }
    Ok(Fenced::Rejected(rejection))
}

/// The store never writes a transition DESIGN §3 does not allow: the
/// transaction fails (and rolls back) instead.
fn guard(from: Status, to: Status) -> Sql<()> {
    if from.can_transition_to(to) {
        return Ok(());
    }
    Err(Fail::Refused(format!("refused transition {from} -> {to}")))
}

/// Append one line to the history table. The caller holds the document's
/// row lock (see the module's docs), so the seq read here is the next one.
pub(crate) fn record(
    tx: &mut Transaction<'_>,
    job_id: i64,
    now: Millis,
    event: &str,
    token: Option<&str>,
    fence: Option<i64>,
    detail: Option<&str>,
) -> Sql<()> {
    tx.execute(
        "INSERT INTO history (job_id, seq, at, event, token, fence, detail)
         VALUES ($1, (SELECT coalesce(max(seq), 0) + 1 FROM history WHERE job_id = $1), $2, $3, $4, $5, $6)",
        &[&job_id, &now, &event, &token, &fence, &detail],
    )?;
    Ok(())
}

/// The fenced completion, and, when it is accepted and carries text for the
/// sink, its outbox row, in the caller's transaction: an accepted result is
/// queued exactly once, a refused one never.
pub(crate) fn complete_and_push(
    tx: &mut Transaction<'_>,
    now: Millis,
    cap: &OutboxCap,
    o: &Owner,
    c: &Completion<'_>,
) -> Sql<Fenced> {
    let out = complete(tx, now, o, (c.result_path, c.checksum), c.note)?;
    if let (Fenced::Accepted, Some(text)) = (&out, c.deliver) {
        super::outbox::push(tx, now, cap, o.id.0, c.checksum, text)?;
    }
    Ok(out)
}
