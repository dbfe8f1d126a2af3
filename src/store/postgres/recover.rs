//! A statement that commits on its own (a claim, the batch of claims and
//! completions) whose answer was lost with its connection: it may have
//! committed or not, and running it again would claim other documents while
//! the first ones' leases run out unused, and refuse its own completions as
//! not the owner's.
//!
//! So its claims carry owner tokens the caller made (the claim's SQL takes
//! them as a parameter, `write.rs: claim_ctes`), and before it runs again on
//! a new connection the caller asks for them: a row that holds one of them
//! was claimed by that statement, which then committed whole (a statement
//! is atomic), and its answer is rebuilt from the rows; a completion of it
//! was accepted when its `completed` history line, with its token and
//! fence, is there. When nothing of it is found, it did not commit, or
//! committed without effect: running it again is safe either way.
//!
//! The lost statement may still be running: the server notices a client
//! gone only when it writes the answer. A completion's UPDATE may be
//! waiting for a row lock; so the lookup first locks the completions' rows
//! (`FOR UPDATE`, within the transaction's lock limit), which queues it
//! behind that statement. A claim skips locked rows and waits for none, so
//! its window is its own run; a claim that commits after the lookup found
//! nothing leaves its leases to run out, as before.

use ::postgres::GenericClient;

use super::conn::{Conn, Prepared, Sql, Tx};
use crate::job::{Claim, JobId, Owner};

/// The claims holding one of `tokens`, in the tokens' order, with whether
/// each took over a lease that was over (its `claimed` line says so) and
/// the place of its token (from 1).
const CLAIMED_WITH: &str = "SELECT j.id, j.doc_key, j.version, j.owner_token, j.fence, j.attempts,
        j.lease_expires_at,
        EXISTS (SELECT 1 FROM history h WHERE h.job_id = j.id AND h.token = j.owner_token
                AND h.event = 'claimed' AND h.detail LIKE '%took over%'),
        array_position($1::TEXT[], j.owner_token)
   FROM jobs j
  WHERE j.owner_token = ANY($1::TEXT[]) AND j.status = 'extracting'
  ORDER BY array_position($1::TEXT[], j.owner_token)";

/// The completions' rows, locked: behind the lost statement, if it still
/// runs.
const LOCK_COMPLETED: &str = "SELECT id FROM jobs WHERE id = ANY($1::BIGINT[]) ORDER BY id FOR UPDATE";

/// Per completion (document, token, fence), whether its `completed` line
/// was written.
const COMPLETED_WITH: &str = "SELECT EXISTS (SELECT 1 FROM history h
        WHERE h.job_id = g.id AND h.event = 'completed' AND h.token = g.token AND h.fence = g.fence)
   FROM unnest($1::BIGINT[], $2::TEXT[], $3::BIGINT[]) WITH ORDINALITY AS g (id, token, fence, n)
  ORDER BY g.n";

/// `n` owner tokens for the rows a claim asks for.
pub(crate) fn fresh_tokens(n: usize) -> Vec<String> {
    (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect()
}

/// A statement sent whose answer has not come back: its tokens and the
/// completions it carried. Kept by the caller across tries.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    tokens: Vec<String>,
    completions: Vec<(i64, String, i64)>,
}

impl InFlight {
    /// `tokens` and `completions` (owners) are about to be sent.
    pub(crate) fn sent(tokens: &[String], completions: &[&Owner]) -> InFlight {
        InFlight {
            tokens: tokens.to_vec(),
            completions: completions
                .iter()
                .map(|o| (o.id.0, o.token.clone(), o.fence))
                .collect(),
        }
    }
}

/// What a lost statement did, when it committed.
pub(crate) struct Recovered {
    /// Its claims, each with the place of its token (from 0): the slot it
    /// was claimed for.
    pub(crate) claims: Vec<(usize, Claim)>,
    /// Per completion it carried, whether it was accepted.
    pub(crate) accepted: Vec<bool>,
}

/// What the statement `in_flight` holds did, if one is held ([`recover`]);
/// once looked for, nothing is in flight (a lookup that fails keeps it,
/// for the next try to look again).
pub(crate) fn recover_in_flight(conn: &mut Conn, in_flight: &mut Option<InFlight>) -> Sql<Option<Recovered>> {
    let Some(lost) = in_flight.as_ref() else {
        return Ok(None);
    };
    let found = recover(conn, lost)?;
    *in_flight = None;
    Ok(found)
}

/// Look for what `lost` did; `None` when nothing of it is there (it did not
/// commit, or changed nothing: either way it may run again).
fn recover(conn: &mut Conn, lost: &InFlight) -> Sql<Option<Recovered>> {
    let mut tx = conn.transaction()?;
    let found = look_for(&mut tx, lost)?;
    tx.commit()?;
    if found.claims.is_empty() && !found.accepted.contains(&true) {
        return Ok(None);
    }
    tracing::info!(
        claims = found.claims.len(),
        accepted = found.accepted.iter().filter(|a| **a).count(),
        "a statement whose answer was lost had committed: its answer rebuilt from the rows"
    );
    Ok(Some(found))
}

/// The lost statement's claims and completions' outcomes, in `tx`.
fn look_for(tx: &mut Tx<'_>, lost: &InFlight) -> Sql<Recovered> {
    if !lost.completions.is_empty() {
        let ids: Vec<i64> = lost.completions.iter().map(|c| c.0).collect();
        let lock = tx.prepared(LOCK_COMPLETED)?;
        lock.query(&mut **tx, &[&ids])?;
    }
    let claimed = tx.prepared(CLAIMED_WITH)?;
    let claims = claims_with(&mut **tx, &claimed, &lost.tokens)?;
    let accepted = if lost.completions.is_empty() {
        Vec::new()
    } else {
        let completed = tx.prepared(COMPLETED_WITH)?;
        completed_with(&mut **tx, &completed, &lost.completions)?
    };
    Ok(Recovered { claims, accepted })
}

fn claims_with(
    db: &mut impl GenericClient,
    claimed: &Prepared,
    tokens: &[String],
) -> Sql<Vec<(usize, Claim)>> {
    let rows = claimed.query(db, &[&tokens])?;
    let mut claims = Vec::with_capacity(rows.len());
    for r in &rows {
        let place: i32 = r.try_get(8)?;
        let place = usize::try_from(place.saturating_sub(1)).unwrap_or(0);
        claims.push((
            place,
            Claim {
                id: JobId(r.try_get(0)?),
                key: r.try_get(1)?,
                version: r.try_get(2)?,
                token: r.try_get(3)?,
                fence: r.try_get(4)?,
                attempts: r.try_get(5)?,
                lease_expires_at: r.try_get(6)?,
                took_over: r.try_get(7)?,
            },
        ));
    }
    Ok(claims)
}

fn completed_with(
    db: &mut impl GenericClient,
    completed: &Prepared,
    completions: &[(i64, String, i64)],
) -> Sql<Vec<bool>> {
    let ids: Vec<i64> = completions.iter().map(|c| c.0).collect();
    let tokens: Vec<&str> = completions.iter().map(|c| c.1.as_str()).collect();
    let fences: Vec<i64> = completions.iter().map(|c| c.2).collect();
    let rows = completed.query(db, &[&ids, &tokens, &fences])?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}
