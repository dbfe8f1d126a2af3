//! The SQL of every write: claim and the fenced operations.
//!
//! Each function takes an open `BEGIN IMMEDIATE` transaction and `now` from the
//! injected clock; none of them opens, commits or retries (that is `tx.rs`), and
//! none of them touches the file system.

use rusqlite::types::Null;
use rusqlite::{params, Connection, OptionalExtension, ToSql};

use super::rows::Rows;
use crate::clock::Millis;
use crate::job::{Claim, Fenced, JobId, Owner, Parked, Status};
use crate::store::completion::Completion;
use crate::store::fencing::{
    self, claim_detail, complete_detail, status_of, Candidate, FenceRows, OwnerRow, WriteOp, WriteOut,
};
use crate::store::options::Policy;

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
        WriteOp::Complete { owner, completion } => {
            WriteOut::Fenced(complete_one(tx, now, policy, owner, completion)?)
        }
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
pub(super) const OLDER_WORK: &str = "SELECT
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

/// [`COMPLETE`] for the `(id, token, result path, checksum, bytes, no text, title, author, date, pages, language)` rows of a
/// `VALUES` list between this head and [`COMPLETE_EACH_TAIL`]; ?1 now, the
/// rows from ?2.
const COMPLETE_EACH_HEAD: &str =
    "UPDATE jobs SET status = 'indexed', result_path = c.column3, checksum = c.column4,
                result_bytes = c.column5, no_text = c.column6, title = c.column7, author = c.column8, doc_date = c.column9, pages = c.column10, language = c.column11, owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
                last_error = NULL, parked_on = NULL, updated_at = ?1
         FROM (VALUES ";

/// The parameters of one row of [`COMPLETE_EACH_HEAD`].
const COMPLETE_COLUMNS: usize = 11;

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
    "UPDATE jobs SET status = 'indexed', result_path = ?3, checksum = ?4, result_bytes = ?6, no_text = ?7, title = ?8, author = ?9, doc_date = ?10,
                pages = ?11, language = ?12, owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
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

/// [`fencing::bury`] on this transaction.
fn bury(tx: &Connection, now: Millis, policy: &Policy, c: &Candidate) -> rusqlite::Result<bool> {
    fencing::bury(&mut Rows(tx), now, policy, c)
}

/// Extend the owner's lease to now plus its length, from now whatever the row
/// held: after the clock went back, the old expiry lies further ahead than a
/// lease can reach and already counts as over, so keeping it (max()) would leave
/// the lease lost; re-anchoring makes it live again. Shortening a lease is safe:
/// only the fence (token and status) decides who may write, never the clock.
pub(crate) fn renew(tx: &Connection, now: Millis, policy: &Policy, o: &Owner) -> rusqlite::Result<Fenced> {
    fencing::renew(&mut Rows(tx), now, policy, o)
}

pub(crate) fn complete(
    tx: &Connection,
    now: Millis,
    o: &Owner,
    c: &Completion<'_>,
) -> rusqlite::Result<Fenced> {
    let (path, checksum, note) = (&*c.result_path, &*c.checksum, c.note.as_deref());
    let bytes = c.result_bytes.and_then(|b| i64::try_from(b).ok());
    let version: Option<String> = tx
        .prepare_cached(COMPLETE)?
        .query_row(
            params![
                o.id.0,
                o.token,
                path,
                checksum,
                now,
                bytes,
                c.no_text.as_deref(),
                c.title.as_deref(),
                c.author.as_deref(),
                c.date.as_deref(),
                c.pages,
                c.language.as_deref()
            ],
            |r| r.get(0),
        )
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

/// Complete many claims in the caller's transaction, each fenced on its own
/// token: what [`complete`] (and the sink's push) does for each, with one
/// UPDATE for all of them and one history INSERT for the accepted ones.
/// Refusals are settled one by one, as after [`complete`]. A single claim, or
/// two claims of the same document, go through [`complete`] one at a time.
pub(crate) fn complete_each(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    done: &[(Owner, Completion<'_>)],
) -> rusqlite::Result<Vec<Fenced>> {
    let mut ids: Vec<i64> = done.iter().map(|(o, _)| o.id.0).collect();
    ids.sort_unstable();
    ids.dedup();
    if done.len() < 2 || ids.len() < done.len() {
        return done
            .iter()
            .map(|(o, c)| complete_one(tx, now, policy, o, c))
            .collect();
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
    done: &[(Owner, Completion<'_>)],
) -> rusqlite::Result<Vec<Fenced>> {
    if let [(o, c)] = done {
        return Ok(vec![complete_one(tx, now, policy, o, c)?]);
    }
    let rows = padded(done.len());
    let sizes: Vec<Option<i64>> = done
        .iter()
        .map(|(_, c)| c.result_bytes.and_then(|b| i64::try_from(b).ok()))
        .collect();
    let mut p: Vec<&dyn ToSql> = vec![&now];
    for ((o, c), size) in done.iter().zip(&sizes) {
        p.extend([
            &o.id.0 as &dyn ToSql,
            &o.token,
            &c.result_path,
            &c.checksum,
            size,
            &c.no_text,
            &c.title,
            &c.author,
            &c.date,
            &c.pages,
            &c.language,
        ]);
    }
    p.resize(p.len() + (rows - done.len()) * COMPLETE_COLUMNS, &Null);
    let mut versions: Vec<Option<String>> = done.iter().map(|_| None).collect();
    {
        let mut stmt = tx.prepare_cached(&values(
            COMPLETE_EACH_HEAD,
            2,
            rows,
            COMPLETE_COLUMNS,
            COMPLETE_EACH_TAIL,
        ))?;
        let mut out = stmt.query(&p[..])?;
        while let Some(r) = out.next()? {
            let id: i64 = r.get(0)?;
            if let Some(i) = done.iter().position(|(o, _)| o.id.0 == id) {
                versions[i] = Some(r.get(1)?);
            }
        }
    }
    let details: Vec<Option<String>> = done
        .iter()
        .zip(&versions)
        .map(|((_, c), v)| {
            v.as_deref()
                .map(|v| complete_detail(v, &c.result_path, &c.checksum, c.note.as_deref()))
        })
        .collect();
    let lines: Vec<Line<'_>> = done
        .iter()
        .zip(&details)
        .filter_map(|((o, _), detail)| {
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
        .map(|((o, c), v)| {
            if v.is_none() {
                return settle(tx, now, o, 0, "complete", None);
            }
            deliver(tx, now, policy, o, c)?;
            searchable.push(search_text(policy, o, c));
            Ok(Fenced::Accepted)
        })
        .collect::<rusqlite::Result<_>>()?;
    crate::store::sqlite::search_index::accept_all(tx, &searchable)?;
    Ok(out)
}

/// One completion alone: what [`apply`] does for a [`WriteOp::Complete`].
fn complete_one(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    o: &Owner,
    c: &Completion<'_>,
) -> rusqlite::Result<Fenced> {
    let out = complete(tx, now, o, c)?;
    if out.is_accepted() {
        deliver(tx, now, policy, o, c)?;
        crate::store::sqlite::search_index::accepted(tx, &search_text(policy, o, c))?;
    }
    Ok(out)
}

/// Queue an accepted completion's text for the sink, if it carries one.
fn deliver(
    tx: &Connection,
    now: Millis,
    policy: &Policy,
    o: &Owner,
    c: &Completion<'_>,
) -> rusqlite::Result<()> {
    match &c.deliver {
        Some(text) => {
            crate::store::outbox::push(&mut Rows(tx), now, &policy.outbox, o.id.0, &c.checksum, text)
        }
        None => Ok(()),
    }
}

/// What an accepted completion makes searchable: its text, or with none (or
/// the index off) nothing, so the previous version's text is taken out,
/// since it no longer belongs to the accepted result.
fn search_text<'a>(
    policy: &Policy,
    o: &'a Owner,
    c: &'a Completion<'_>,
) -> crate::store::sqlite::search_index::Accepted<'a> {
    crate::store::sqlite::search_index::Accepted {
        id: o.id.0,
        result: (&c.result_path, &c.checksum),
        text: c.index.as_deref().filter(|_| policy.search_index),
        parts_tag: Some(o.token.as_str()),
        labels: c.labels.as_deref(),
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
    fencing::fail(&mut Rows(tx), now, policy, o, error, permanent)
}

pub(crate) fn release(
    tx: &Connection,
    now: Millis,
    o: &Owner,
    reason: &str,
    parked: Option<&Parked>,
) -> rusqlite::Result<Fenced> {
    fencing::release(&mut Rows(tx), now, o, reason, parked)
}

/// [`fencing::settle`] on this transaction.
fn settle(
    tx: &Connection,
    now: Millis,
    o: &Owner,
    changed: usize,
    what: &str,
    detail: Option<&str>,
) -> rusqlite::Result<Fenced> {
    fencing::settle(&mut Rows(tx), now, o, changed as u64, what, detail)
}

/// [`fencing::guard`] for this engine.
fn guard(from: Status, to: Status) -> rusqlite::Result<()> {
    fencing::guard::<Rows<'_>>(from, to)
}

impl FenceRows for Rows<'_> {
    fn owner_row(&mut self, id: i64) -> rusqlite::Result<Option<OwnerRow>> {
        self.0
            .prepare_cached("SELECT status, owner_token, fence FROM jobs WHERE id = ?1")?
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()
    }

    fn record(
        &mut self,
        job_id: i64,
        now: Millis,
        event: &str,
        token: Option<&str>,
        fence: Option<i64>,
        detail: Option<&str>,
    ) -> rusqlite::Result<()> {
        record(self.0, job_id, now, event, token, fence, detail)
    }

    fn bury_row(&mut self, id: i64, now: Millis, why: &str, policy: &Policy) -> rusqlite::Result<u64> {
        let n = self
            .0
            .prepare_cached(BURY)?
            .execute(params![id, now, why, policy.max_lost_leases])?;
        Ok(n as u64)
    }

    fn renew_row(&mut self, o: &Owner, until: Millis, now: Millis, lease_ms: i64) -> rusqlite::Result<u64> {
        let n = self
            .0
            .prepare_cached(RENEW)?
            .execute(params![o.id.0, o.token, until, now, lease_ms])?;
        Ok(n as u64)
    }

    fn fail_row(
        &mut self,
        o: &Owner,
        permanent: bool,
        retry_at: Millis,
        error: &str,
        now: Millis,
    ) -> rusqlite::Result<Option<(String, Option<Millis>)>> {
        self.0
            .prepare_cached(FAIL)?
            .query_row(params![o.id.0, o.token, permanent, retry_at, error, now], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
    }

    fn release_row(
        &mut self,
        o: &Owner,
        now: Millis,
        until: Option<Millis>,
        reason: &str,
        account: Option<&str>,
    ) -> rusqlite::Result<u64> {
        let n = self
            .0
            .prepare_cached(RELEASE)?
            .execute(params![o.id.0, o.token, now, until, reason, account])?;
        Ok(n as u64)
    }

    fn refuse(why: String) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
            Some(why),
        )
    }
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
