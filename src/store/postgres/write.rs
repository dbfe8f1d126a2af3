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

use super::conn::Tx;
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

/// The claimability condition every conditional UPDATE repeats: `$now` is
/// now (`$2` unless said), `$ahead` now plus the clock skew allowed (a lease
/// granted later than that was granted after now: the clock went back).
macro_rules! claimable_at {
    ($now:literal, $ahead:literal) => {
        concat!(
            "(status = 'discovered'
     OR (status = 'retrying' AND retry_at <= ",
            $now,
            ")
     OR (status = 'extracting' AND (lease_expires_at <= ",
            $now,
            " OR lease_expires_at - lease_ms > ",
            $ahead,
            ")))"
        )
    };
}

macro_rules! claimable {
    ($ahead:literal) => {
        claimable_at!("$2", $ahead)
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

/// One claimable set's candidates as a CTE, its columns renamed so that the
/// UPDATE that takes them can name the row's own columns unqualified. $1 is
/// now, $2 now plus the clock skew allowed (for leases granted after now),
/// $3 the limit.
macro_rules! candidates_of {
    ($name:literal, $where:literal, $order:literal) => {
        concat!(
            $name,
            " AS (SELECT id AS c_id, status AS c_status, owner_token AS c_token, fence AS c_fence,
                     lease_expires_at AS c_expires, lost_leases AS c_lost
              FROM jobs WHERE ",
            $where,
            " ORDER BY ",
            $order,
            " LIMIT $3 FOR UPDATE SKIP LOCKED)"
        )
    };
}

/// A claim in one statement (DESIGN §2): the candidates of the four
/// claimable sets in SQLite's order (older work first: expired leases,
/// leases granted ahead, due retries, discovered; ties by id), each locking
/// what it returns and skipping what another claim holds, and the
/// conditional UPDATE that takes them (claimability and exhaustion repeated,
/// fence + 1, a fresh token). The sets are CTEs (a locking clause is not
/// allowed inside `UNION`), read only as far as the `UNION ALL` under its
/// `LIMIT` asks: a set is read (and its rows locked) only when the sets
/// before it had too few. Every candidate comes back, with the taken row's
/// new values, or NULLs when it was not taken (it has used up what it may
/// spend: the caller buries it). $4 is the worker, $5 the lease's end, $6
/// its length, $7 the lost leases allowed.
const CLAIM: &str = concat!(
    "WITH ",
    candidates_of!(
        "expired",
        "status = 'extracting' AND lease_expires_at <= $1",
        "lease_expires_at, id"
    ),
    ", ",
    candidates_of!(
        "ahead",
        "status = 'extracting' AND lease_expires_at - lease_ms > $2",
        "lease_expires_at - lease_ms, id"
    ),
    ", ",
    candidates_of!("due", "status = 'retrying' AND retry_at <= $1", "retry_at, id"),
    ", ",
    candidates_of!("fresh", "status = 'discovered' AND $1::BIGINT IS NOT NULL", "id"),
    ",
     c AS (
        SELECT u.*, row_number() OVER () AS c_pos FROM (
            SELECT * FROM expired UNION ALL SELECT * FROM ahead
            UNION ALL SELECT * FROM due UNION ALL SELECT * FROM fresh LIMIT $3) u
     ),
     t AS (
        UPDATE jobs SET status = 'extracting', owner_token = gen_random_uuid()::TEXT, owner_worker = $4,
                fence = fence + 1, lease_expires_at = $5, lease_ms = $6,
                attempts = CASE WHEN status = 'extracting' THEN attempts ELSE attempts + 1 END,
                lost_leases = lost_leases + CASE WHEN status = 'extracting' THEN 1 ELSE 0 END,
                retry_at = NULL, parked_on = NULL, updated_at = $1
        FROM c WHERE id = c.c_id AND ",
    claimable_at!("$1", "$2"),
    " AND NOT ",
    exhausted!("$7"),
    " RETURNING id, doc_key, version, owner_token, fence, attempts, lost_leases
     )
     SELECT c.c_id, c.c_status, c.c_token, c.c_fence, c.c_expires, c.c_lost,
            t.doc_key, t.version, t.owner_token, t.fence, t.attempts, t.lost_leases
     FROM c LEFT JOIN t ON t.id = c.c_id ORDER BY c.c_pos"
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

/// Claim up to `max` documents (DESIGN §2), burying on the way the rows
/// that have used up what they may spend: one [`CLAIM`] statement and one
/// history INSERT for the claims (again only while rows were buried and
/// more are wanted). Round trips of a claim, one document or many: BEGIN,
/// the claim, the history, COMMIT (each statement prepared and run).
pub(crate) fn claim(
    tx: &mut Tx<'_>,
    now: Millis,
    policy: &Policy,
    worker: &str,
    max: usize,
) -> Sql<Vec<Claim>> {
    let mut claims = Vec::new();
    let mut lines = Vec::new();
    while claims.len() < max {
        let found = take_some(tx, now, policy, worker, max - claims.len())?;
        if found.is_empty() {
            break;
        }
        let mut progressed = false;
        for (c, taken) in found {
            match taken {
                Some((claim, lost)) => {
                    guard(status_of(&c.status), Status::Extracting)?;
                    let detail = claim_detail(now, policy, worker, &c, (claim.attempts, lost));
                    lines.push((claim.id.0, claim.token.clone(), claim.fence, detail));
                    claims.push(claim);
                    progressed = true;
                }
                None => progressed |= bury(tx, now, policy, &c)?,
            }
        }
        if !progressed {
            break;
        }
    }
    record_claims(tx, now, &lines)?;
    Ok(claims)
}

/// A candidate of [`CLAIM`], and what taking it gave (the claim and the
/// row's lost leases), or `None` when it was not taken.
type Taken = (Candidate, Option<(Claim, i64)>);

/// Run [`CLAIM`] for up to `want` rows.
fn take_some(tx: &mut Tx<'_>, now: Millis, policy: &Policy, worker: &str, want: usize) -> Sql<Vec<Taken>> {
    let limit = i64::try_from(want).unwrap_or(i64::MAX);
    let ahead = now.saturating_add(policy.clock_skew_ms);
    let lease_until = now.saturating_add(policy.lease_ms);
    let claim = tx.prepared(CLAIM)?;
    let rows = tx.query(
        &claim,
        &[
            &now,
            &ahead,
            &limit,
            &worker,
            &lease_until,
            &policy.lease_ms,
            &policy.max_lost_leases,
        ],
    )?;
    rows.iter()
        .map(|r| {
            let c = Candidate {
                id: r.try_get(0)?,
                status: r.try_get(1)?,
                token: r.try_get(2)?,
                fence: r.try_get(3)?,
                lease_expires_at: r.try_get(4)?,
                lost_leases: r.try_get(5)?,
            };
            let key: Option<String> = r.try_get(6)?;
            let taken = match key {
                None => None,
                Some(key) => Some((
                    Claim {
                        id: JobId(c.id),
                        key,
                        version: r.try_get(7)?,
                        token: r.try_get(8)?,
                        fence: r.try_get(9)?,
                        attempts: r.try_get(10)?,
                        lease_expires_at: lease_until,
                    },
                    r.try_get(11)?,
                )),
            };
            Ok((c, taken))
        })
        .collect()
}

/// The `claimed` history lines of a claim, in one INSERT: (job, token,
/// fence, detail) of distinct documents, each locked by this transaction.
fn record_claims(tx: &mut Tx<'_>, now: Millis, lines: &[(i64, String, i64, String)]) -> Sql<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = lines.iter().map(|l| l.0).collect();
    let tokens: Vec<Option<&str>> = lines.iter().map(|l| Some(l.1.as_str())).collect();
    let fences: Vec<Option<i64>> = lines.iter().map(|l| Some(l.2)).collect();
    let details: Vec<Option<&str>> = lines.iter().map(|l| Some(l.3.as_str())).collect();
    record_each(tx, now, "claimed", (&ids, &tokens, &fences, &details))
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
    tx: &mut Tx<'_>,
    now: Millis,
    o: &Owner,
    (path, checksum): (&str, &str),
    note: Option<&str>,
) -> Sql<Fenced> {
    let update = tx.prepared(COMPLETE)?;
    let version: Option<String> = tx
        .query_opt(&update, &[&o.id.0, &o.token, &path, &checksum, &now])?
        .map(|r| r.try_get(0))
        .transpose()?;
    let Some(version) = version else {
        return settle(tx, now, o, 0, "complete", None);
    };
    // What `settle` records for an accepted completion, prepared once.
    let detail = complete_detail(&version, path, checksum, note);
    let line = tx.prepared(RECORD)?;
    let event = "completed";
    tx.execute(
        &line,
        &[
            &o.id.0,
            &now,
            &event,
            &Some(o.token.as_str()),
            &Some(o.fence),
            &Some(detail.as_str()),
        ],
    )?;
    Ok(Fenced::Accepted)
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

/// One history line; $1 the document, whose row lock the caller holds.
const RECORD: &str = "INSERT INTO history (job_id, seq, at, event, token, fence, detail)
     VALUES ($1, (SELECT coalesce(max(seq), 0) + 1 FROM history WHERE job_id = $1), $2, $3, $4, $5, $6)";

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
    tx.execute(RECORD, &[&job_id, &now, &event, &token, &fence, &detail])?;
    Ok(())
}

/// [`record`] for many documents: one line each, all of one event.
const RECORD_EACH: &str = "INSERT INTO history (job_id, seq, at, event, token, fence, detail)
     SELECT l.job_id, (SELECT coalesce(max(h.seq), 0) + 1 FROM history h WHERE h.job_id = l.job_id),
            $1, $2, l.token, l.fence, l.detail
     FROM unnest($3::BIGINT[], $4::TEXT[], $5::BIGINT[], $6::TEXT[]) AS l (job_id, token, fence, detail)";

/// The columns of many history lines of one event: job ids (distinct), and
/// for each its token, fence and detail.
type Lines<'a> = (
    &'a [i64],
    &'a [Option<&'a str>],
    &'a [Option<i64>],
    &'a [Option<&'a str>],
);

/// Append one line per document to the history table, all of one `event`, in
/// one INSERT. The caller holds every document's row lock and the ids are
/// distinct, so each line's seq is its document's next one (see [`record`]).
fn record_each(
    tx: &mut Tx<'_>,
    now: Millis,
    event: &str,
    (ids, tokens, fences, details): Lines<'_>,
) -> Sql<()> {
    let insert = tx.prepared(RECORD_EACH)?;
    tx.execute(&insert, &[&now, &event, &ids, &tokens, &fences, &details])?;
    Ok(())
}

/// [`COMPLETE`] for many claims of distinct documents in one statement.
const COMPLETE_EACH: &str = "UPDATE jobs SET status = 'indexed', result_path = d.path, checksum = d.sum,
            owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
            last_error = NULL, parked_on = NULL, updated_at = $1
     FROM unnest($2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::TEXT[]) AS d (id, token, path, sum)
     WHERE jobs.id = d.id AND jobs.owner_token = d.token AND jobs.status = 'extracting'
     RETURNING jobs.id, jobs.version";

/// Complete many claims in the caller's transaction, each fenced on its own
/// token, with what the sink is given queued for the accepted ones: the same
/// rows, history and outbox rows as one [`complete`] after another, in one
/// UPDATE and one history INSERT (refusals are settled one by one, as after
/// [`complete`]). Claims of one document twice go one at a time.
pub(crate) fn complete_each(
    tx: &mut Tx<'_>,
    now: Millis,
    cap: &OutboxCap,
    done: &[(Owner, Completion<'_>)],
) -> Sql<Vec<Fenced>> {
    let mut ids: Vec<i64> = done.iter().map(|(o, _)| o.id.0).collect();
    ids.sort_unstable();
    ids.dedup();
    if done.len() < 2 || ids.len() < done.len() {
        return done
            .iter()
            .map(|(o, c)| complete_and_push(tx, now, cap, o, c))
            .collect();
    }
    let ids: Vec<i64> = done.iter().map(|(o, _)| o.id.0).collect();
    let tokens: Vec<&str> = done.iter().map(|(o, _)| o.token.as_str()).collect();
    let paths: Vec<&str> = done.iter().map(|(_, c)| c.result_path).collect();
    let sums: Vec<&str> = done.iter().map(|(_, c)| c.checksum).collect();
    let rows = tx.query(COMPLETE_EACH, &[&now, &ids, &tokens, &paths, &sums])?;
    let mut versions: Vec<Option<String>> = vec![None; done.len()];
    for r in &rows {
        let id: i64 = r.try_get(0)?;
        if let Some(i) = ids.iter().position(|&x| x == id) {
            versions[i] = Some(r.try_get(1)?);
        }
    }
    let accepted: Vec<usize> = (0..done.len()).filter(|&i| versions[i].is_some()).collect();
    let details: Vec<String> = accepted
        .iter()
        .map(|&i| {
            let c = &done[i].1;
            complete_detail(
                versions[i].as_deref().unwrap_or_default(),
                c.result_path,
                c.checksum,
                c.note,
            )
        })
        .collect();
    let line_ids: Vec<i64> = accepted.iter().map(|&i| ids[i]).collect();
    let line_tokens: Vec<Option<&str>> = accepted.iter().map(|&i| Some(tokens[i])).collect();
    let line_fences: Vec<Option<i64>> = accepted.iter().map(|&i| Some(done[i].0.fence)).collect();
    let line_details: Vec<Option<&str>> = details.iter().map(|d| Some(d.as_str())).collect();
    if !accepted.is_empty() {
        record_each(
            tx,
            now,
            "completed",
            (&line_ids, &line_tokens, &line_fences, &line_details),
        )?;
    }
    done.iter()
        .zip(&versions)
        .map(|((o, c), v)| {
            if v.is_none() {
                return settle(tx, now, o, 0, "complete", None);
            }
            if let Some(text) = c.deliver {
                super::outbox::push(tx, now, cap, o.id.0, c.checksum, text)?;
            }
            super::search::accepted(tx, o.id.0, c)?;
            Ok(Fenced::Accepted)
        })
        .collect()
}

/// The fenced completion, and, when it is accepted and carries text for the
/// sink, its outbox row, in the caller's transaction: an accepted result is
/// queued exactly once, a refused one never.
pub(crate) fn complete_and_push(
    tx: &mut Tx<'_>,
    now: Millis,
    cap: &OutboxCap,
    o: &Owner,
    c: &Completion<'_>,
) -> Sql<Fenced> {
    let out = complete(tx, now, o, (c.result_path, c.checksum), c.note)?;
    if let (Fenced::Accepted, Some(text)) = (&out, c.deliver) {
        super::outbox::push(tx, now, cap, o.id.0, c.checksum, text)?;
    }
    if out.is_accepted() {
        super::search::accepted(tx, o.id.0, c)?;
    }
    Ok(out)
}
