//! A group-commit batch of claims and completions (with or without a text
//! for the search index, none for the sink) in one statement that commits
//! on its own: one round trip for the batch, where a transaction costs its
//! BEGIN, a statement per kind (and per completion the search index's
//! write) and its COMMIT, each waiting on the server.
//!
//! That is the common batch of a busy pool (each worker completes one
//! document and claims the next), so it is worth its own statement:
//! [`CLAIM_AND_COMPLETE`], the claim's CTEs (`write.rs: claim_ctes`) beside
//! the completions' UPDATE, their history lines and their search index
//! rows (the text put in for those with one, taken out for the others). Every CTE of a
//! statement reads one snapshot and the order in which its sub-statements
//! change rows is not defined, so the claim never takes a document that a
//! completion of the same statement names: whether that completion is
//! accepted or refused, the batch ran as if the claim came after it (or
//! found the row locked). The completions' ids are distinct (a batch with a
//! document twice goes the transaction's way), so no row is changed twice,
//! and every history line of the statement is of another document.
//!
//! Fencing is the completion's own: id + token + `extracting`, the UPDATE
//! re-checked against the newest row version. History seq: as for every
//! statement that writes its own line (`write.rs`' docs), a line committed
//! while the statement waited for a row lock collides on (job, seq) and the
//! whole statement, which then changed nothing, runs again (`tx.rs`).
//!
//! What the statement cannot settle is done after it, each in its own
//! transaction, as after a lone claim or completion: a refused completion
//! is read and recorded (`complete_rejected`); candidates that have used up
//! what they may spend are buried, and a caller that got no document then
//! claims again on its own.

use super::conn::Conn;
use super::conn::{Fail, Sql};
use super::recover::{fresh_tokens, recover_in_flight, InFlight, Recovered};
use super::search_index::without_nul;
use super::tx::is_lost;
use super::write::{
    self, candidates_of, claim_columns, claim_ctes, claimable_at, exhausted, next_seq, pages_column, Taken,
};
use super::PgStore;
use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::job::{Claim, Fenced, Owner, Status};
use crate::store::completion::Completion;
use crate::store::fencing::{
    complete_detail_after, status_of, Candidate, WriteOp, WriteOut, LEASE_AHEAD, LEASE_EXPIRED,
};
use crate::store::options::Policy;
use crate::store::search::Labels;
use std::borrow::Cow;

/// The claim's candidates leave out the documents the statement completes
/// ($10). Without it, whether such a document is claimed or completed would
/// rest on the order in which the server runs the statement's parts, which
/// it does not promise: two changes of one row in one statement, of which
/// only one happens.
macro_rules! not_completed {
    () => {
        " AND id <> ALL($10::BIGINT[])"
    };
}

/// The candidates [`CLAIM_AND_COMPLETE`]'s claim takes, in its order, and
/// nothing else ([`PgStore::batch_candidates`]).
const CANDIDATES: &str = concat!(
    "WITH ",
    claim_ctes!(not_completed!(), "$11"),
    " SELECT c.c_id FROM c ORDER BY c.c_pos"
);

/// Claims and completions in one statement. $1–$9 are [`write::claim_ctes`]'
/// (now, now plus the skew allowed, rows wanted, their workers, the lease's
/// end and length, the lost leases allowed, the two ways a lease is over);
/// $10–$16 the completions, one element each: document, token, result
/// path, checksum, fence, the history detail after the version
/// (`complete_detail_after`), the result's size in bytes; $17 why each
/// text holds no word (NULL: it has words); $18–$20 each document's own
/// title, author and date; $21–$22 its page count and language; $23 the
/// claims' owner tokens (`recover.rs`); $24–$26 each completion's text for
/// the search index (NULL: none; the previous one is taken out) and the
/// index's title and author (`search_index.rs: put`, as one statement). No candidate is one of $10. Each row is a
/// candidate as [`write::claim_columns`] gives it (NULLs when there was
/// none) and the ids of the accepted completions (NULL when none was).
const CLAIM_AND_COMPLETE: &str = concat!(
    "WITH ",
    claim_ctes!(not_completed!(), "$23"),
    ",
     given AS (
        SELECT * FROM unnest($10::BIGINT[], $11::TEXT[], $12::TEXT[], $13::TEXT[],
                             $14::BIGINT[], $15::TEXT[], $16::BIGINT[], $17::TEXT[], $18::TEXT[],
                             $19::TEXT[], $20::TEXT[], $21::BIGINT[], $22::TEXT[],
                             $24::TEXT[], $25::TEXT[], $26::TEXT[])
                      AS g (id, token, path, sum, fence, after, bytes, no_text, title, author, date, pages, language,
                            body, label_title, label_author)
     ),
     accepted AS (
        UPDATE jobs SET status = 'indexed', result_path = given.path, checksum = given.sum,
                result_bytes = given.bytes, no_text = given.no_text, title = given.title, author = given.author, doc_date = given.date, pages = given.pages, language = given.language, owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
                last_error = NULL, parked_on = NULL, updated_at = $1
        FROM given
        WHERE jobs.id = given.id AND jobs.owner_token = given.token AND jobs.status = 'extracting'
        RETURNING jobs.id, jobs.version, given.token, given.fence, given.after, given.path, given.sum,
                  given.body, given.label_title, given.label_author
     ),
     accepted_lines AS (
        INSERT INTO history (job_id, seq, at, event, token, fence, detail)
        SELECT accepted.id, ",
    next_seq!("accepted.id"),
    ", $1, 'completed', accepted.token, accepted.fence,
               'version ' || accepted.version || accepted.after
        FROM accepted
     ),
     unindexed AS (DELETE FROM search_text WHERE job_id IN (SELECT id FROM accepted WHERE body IS NULL)),
     indexed AS (
        INSERT INTO search_text (job_id, body, path, checksum, title, author)
        SELECT id, body, path, sum, label_title, label_author FROM accepted WHERE body IS NOT NULL
        ON CONFLICT (job_id) DO UPDATE
        SET body = excluded.body, path = excluded.path, checksum = excluded.checksum,
            title = excluded.title, author = excluded.author
     )
     SELECT ",
    claim_columns!(),
    ", a.ids
     FROM (SELECT array_agg(id) AS ids FROM accepted) a
          LEFT JOIN (c LEFT JOIN t ON t.id = c.c_id) ON true
     ORDER BY c.c_pos"
);

/// A batch that fits [`CLAIM_AND_COMPLETE`]: its claims as slots (one per
/// document wanted, the caller's index in the batch) and its completions.
struct Plan<'a> {
    /// The batch index of the caller each row wanted is for.
    slots: Vec<usize>,
    /// The worker of each slot.
    workers: Vec<&'a str>,
    /// The completions: batch index, owner, result path, checksum, note.
    done: Vec<Done<'a>>,
}

/// One completion of a batch.
struct Done<'a> {
    /// Its place in the batch.
    at: usize,
    owner: &'a Owner,
    completion: &'a Completion<'static>,
}

/// What [`CLAIM_AND_COMPLETE`] answered: per slot, its candidate (if there
/// was one) and the claim; per completion, whether it was accepted.
struct Answer {
    now: Millis,
    /// Each candidate with the slot it was for (its place in the claim).
    taken: Vec<(usize, Taken)>,
    accepted: Vec<bool>,
}

impl<'a> Plan<'a> {
    /// `ops` as one statement's work, or `None` when an operation is neither
    /// a claim nor a completion the statement takes
    /// (`WriteOp::batchable_completion`: no text for the sink; a text for
    /// the index with its labels), a document is completed twice, or more
    /// rows are wanted than one claim statement asks for.
    fn of(ops: &'a [&'a WriteOp]) -> Option<Plan<'a>> {
        let mut plan = Plan {
            slots: Vec::new(),
            workers: Vec::new(),
            done: Vec::new(),
        };
        for (at, op) in ops.iter().enumerate() {
            match op {
                WriteOp::Claim { worker, max } => {
                    plan.slots.extend(std::iter::repeat_n(at, *max));
                    plan.workers.extend(std::iter::repeat_n(worker.as_str(), *max));
                }
                _ => {
                    let (owner, completion) = op.batchable_completion()?;
                    plan.done.push(Done {
                        at,
                        owner,
                        completion,
                    });
                }
            }
        }
        let mut ids: Vec<i64> = plan.done.iter().map(|d| d.owner.id.0).collect();
        ids.sort_unstable();
        ids.dedup();
        let distinct = ids.len() == plan.done.len();
        (distinct && plan.slots.len() <= write::CLAIM_ROWS).then_some(plan)
    }

    /// Run the statement; it commits on its own. When a try before this
    /// one sent it and lost the answer with its connection (`in_flight`),
    /// what it did is looked for first and, when it committed, is the
    /// answer (`recover.rs`).
    fn run(
        &self,
        conn: &mut Conn,
        now: Millis,
        policy: &Policy,
        in_flight: &mut Option<InFlight>,
    ) -> Sql<Answer> {
        if let Some(found) = recover_in_flight(conn, in_flight)? {
            return Ok(self.recovered(now, found));
        }
        let tokens = fresh_tokens(self.workers.len());
        let owners: Vec<&Owner> = self.done.iter().map(|d| d.owner).collect();
        *in_flight = Some(InFlight::sent(&tokens, &owners));
        let answer = self.send(conn, now, policy, &tokens);
        // An answer, or the server's refusal (nothing committed): nothing
        // is left to look for. A lost connection leaves it in flight.
        if !matches!(&answer, Err(Fail::Pg(e)) if is_lost(e)) {
            *in_flight = None;
        }
        answer
    }

    /// The answer of a statement that committed, rebuilt from its rows: its
    /// claims in the slots they were for (a candidate it did not take is not
    /// known any more; a later claim buries it), and its completions'
    /// outcomes.
    fn recovered(&self, now: Millis, found: Recovered) -> Answer {
        let taken = found
            .claims
            .into_iter()
            .map(|(slot, claim)| {
                // The row as the statement took it: the guard that follows
                // checks only that a claim may take a row in this state.
                let candidate = Candidate {
                    id: claim.id.0,
                    status: Status::Extracting.as_str().to_owned(),
                    token: None,
                    fence: claim.fence - 1,
                    lease_expires_at: None,
                    lost_leases: 0,
                };
                (slot, (candidate, Some(claim)))
            })
            .collect();
        Answer {
            now,
            taken,
            accepted: found.accepted,
        }
    }

    /// Send the statement with the claims' owner tokens; its answer.
    fn send(&self, conn: &mut Conn, now: Millis, policy: &Policy, claim_tokens: &[String]) -> Sql<Answer> {
        let statement = conn.prepared(CLAIM_AND_COMPLETE)?;
        let limit = i64::try_from(self.workers.len()).unwrap_or(i64::MAX);
        let ahead = now.saturating_add(policy.clock_skew_ms);
        let lease_until = now.saturating_add(policy.lease_ms);
        let ids: Vec<i64> = self.done.iter().map(|d| d.owner.id.0).collect();
        let tokens: Vec<&str> = self.done.iter().map(|d| d.owner.token.as_str()).collect();
        let paths: Vec<&str> = self.done.iter().map(|d| &*d.completion.result_path).collect();
        let sums: Vec<&str> = self.done.iter().map(|d| &*d.completion.checksum).collect();
        let fences: Vec<i64> = self.done.iter().map(|d| d.owner.fence).collect();
        let sizes: Vec<Option<i64>> = self
            .done
            .iter()
            .map(|d| d.completion.result_bytes.and_then(|b| i64::try_from(b).ok()))
            .collect();
        let no_text: Vec<Option<&str>> = self
            .done
            .iter()
            .map(|d| d.completion.no_text.as_deref())
            .collect();
        let titles: Vec<Option<&str>> = self.done.iter().map(|d| d.completion.title.as_deref()).collect();
        let authors: Vec<Option<&str>> = self.done.iter().map(|d| d.completion.author.as_deref()).collect();
        let dates: Vec<Option<&str>> = self.done.iter().map(|d| d.completion.date.as_deref()).collect();
        let pages: Vec<Option<i64>> = self
            .done
            .iter()
            .map(|d| pages_column(d.completion.pages))
            .collect();
        let languages: Vec<Option<&str>> = self
            .done
            .iter()
            .map(|d| d.completion.language.as_deref())
            .collect();
        // PostgreSQL's text cannot hold NUL; the mirror's copy keeps them.
        let bodies: Vec<Option<Cow<'_, str>>> = self
            .done
            .iter()
            .map(|d| d.completion.index_text().map(without_nul))
            .collect();
        let label = |d: &Done<'_>, pick: fn(&Labels) -> &Option<String>| -> Option<String> {
            d.completion.labels.as_deref().and_then(|l| pick(l).clone())
        };
        let label_titles: Vec<Option<String>> = self.done.iter().map(|d| label(d, |l| &l.title)).collect();
        let label_authors: Vec<Option<String>> = self.done.iter().map(|d| label(d, |l| &l.author)).collect();
        let afters: Vec<String> = self
            .done
            .iter()
            .map(|d| {
                let c = d.completion;
                complete_detail_after(&c.result_path, &c.checksum, c.note.as_deref())
            })
            .collect();
        let rows = statement.query(
            &mut **conn,
            &[
                &now,
                &ahead,
                &limit,
                &self.workers,
                &lease_until,
                &policy.lease_ms,
                &policy.max_lost_leases,
                &LEASE_EXPIRED,
                &LEASE_AHEAD,
                &ids,
                &tokens,
                &paths,
                &sums,
                &fences,
                &afters,
                &sizes,
                &no_text,
                &titles,
                &authors,
                &dates,
                &pages,
                &languages,
                &claim_tokens,
                &bodies,
                &label_titles,
                &label_authors,
            ],
        )?;
        let mut taken = Vec::new();
        let mut accepted_ids: Vec<i64> = Vec::new();
        for r in &rows {
            if let Some(ids) = r.try_get::<_, Option<Vec<i64>>>(12)? {
                accepted_ids = ids;
            }
            if r.try_get::<_, Option<i64>>(0)?.is_some() {
                taken.push((taken.len(), write::taken_of(r, lease_until)?));
            }
        }
        let accepted = ids.iter().map(|id| accepted_ids.contains(id)).collect();
        Ok(Answer { now, taken, accepted })
    }
}

impl PgStore {
    /// The documents [`CLAIM_AND_COMPLETE`] would claim, `limit` wanted,
    /// while it completes `completing`, in the order it takes them; its
    /// changes rolled back. For the tests of the exclusion and the order
    /// (`leasehold::testing::pg_batch::candidates`).
    pub(crate) fn batch_candidates(&self, completing: &[i64], limit: usize) -> Result<Vec<i64>> {
        let policy = self.policy();
        let now = self.now();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let workers: Vec<&str> = vec!["candidates"; usize::try_from(limit).unwrap_or(0)];
        let mut conn = self.connection()?;
        let mut tx = conn.transaction().map_err(|e| self.error(e.into()))?;
        let rows = tx
            .query(
                CANDIDATES,
                &[
                    &now,
                    &now.saturating_add(policy.clock_skew_ms),
                    &limit,
                    &workers,
                    &now.saturating_add(policy.lease_ms),
                    &policy.lease_ms,
                    &policy.max_lost_leases,
                    &LEASE_EXPIRED,
                    &LEASE_AHEAD,
                    &completing,
                    &super::recover::fresh_tokens(workers.len()),
                ],
            )
            .map_err(|e| self.error(e.into()))?;
        // Dropping the transaction rolls the claims back.
        rows.iter()
            .map(|r| r.try_get(0).map_err(|e| self.error(e.into())))
            .collect()
    }

    /// `ops` in one statement that commits on its own (see the module's
    /// docs), then what it could not settle; `None` when they do not fit one
    /// statement ([`Plan::of`]) or the statement failed: the caller then runs
    /// them in a transaction, as it would have (one that fails there fails
    /// alone). A statement whose connection was lost may have committed: on
    /// a new connection, what it did is looked for by its tokens and is the
    /// answer when it did; else it runs again (`recover.rs`). One answer per
    /// operation, in order.
    pub(crate) fn in_one_statement(&self, ops: &[&WriteOp]) -> Option<Vec<Result<WriteOut>>> {
        let plan = Plan::of(ops)?;
        let policy = self.policy();
        let mut in_flight = None;
        let answer = match self.on_its_own(true, |conn, now| plan.run(conn, now, policy, &mut in_flight)) {
            Ok(answer) => answer,
            // Sent, and what it did could not be read back: running the
            // operations again (the caller's transaction) could claim twice
            // and refuse what was accepted. Each fails; the workers' backoff
            // takes it from there.
            Err(e) if in_flight.is_some() => return Some(self.all_unknown(ops, &e)),
            Err(_) => return None,
        };
        let mut outs: Vec<Option<Result<WriteOut>>> = ops.iter().map(|_| None).collect();
        for (d, accepted) in plan.done.iter().zip(&answer.accepted) {
            outs[d.at] = Some(if *accepted {
                Ok(WriteOut::Fenced(Fenced::Accepted))
            } else {
                self.refused_completion(answer.now, d.owner).map(WriteOut::Fenced)
            });
        }
        for (at, claims) in self.claims_of(&plan, ops, answer.taken) {
            outs[at] = Some(claims.map(WriteOut::Claims));
        }
        Some(
            outs.into_iter()
                .map(|o| {
                    o.unwrap_or_else(|| Err(Error::Internal("an operation of the batch was not run".into())))
                })
                .collect(),
        )
    }

    /// A completion the statement did not accept: read the row to say why
    /// and record the refusal, in a transaction of its own.
    fn refused_completion(&self, now: Millis, owner: &Owner) -> Result<Fenced> {
        self.write_tx(|tx, _| write::settle(tx, now, owner, 0, "complete", None))
    }

    /// Each claiming caller's claims, by batch index: what the statement
    /// took for its slots. Candidates that were not taken are buried, and a
    /// caller that got nothing then claims again on its own (as
    /// `write.rs: claim_alone` does after burying), unless nothing was
    /// buried (the rows changed meanwhile: as `claim_alone`, it stops there).
    fn claims_of(
        &self,
        plan: &Plan<'_>,
        ops: &[&WriteOp],
        taken: Vec<(usize, Taken)>,
    ) -> Vec<(usize, Result<Vec<Claim>>)> {
        let mut got: Vec<Option<Result<Vec<Claim>>>> = ops
            .iter()
            .map(|op| matches!(op, WriteOp::Claim { .. }).then(|| Ok(Vec::new())))
            .collect();
        let mut dead = Vec::new();
        for (slot, (candidate, claim)) in taken {
            let Some(&at) = plan.slots.get(slot) else {
                continue;
            };
            let Some(claim) = claim else {
                dead.push(candidate);
                continue;
            };
            let checked = write::guard(status_of(&candidate.status), Status::Extracting);
            match (checked, &mut got[at]) {
                (Ok(()), Some(Ok(claims))) => claims.push(claim),
                (Err(e), entry) => *entry = Some(Err(self.error(e))),
                (Ok(()), _) => {}
            }
        }
        if !dead.is_empty() && !self.buried_none(&dead) {
            for (at, entry) in got.iter_mut().enumerate() {
                if let (WriteOp::Claim { worker, max }, Some(Ok(claims))) = (ops[at], &entry) {
                    if claims.is_empty() {
                        let mut in_flight = None;
                        *entry = Some(self.on_its_own(true, |conn, now| {
                            write::claim_alone(conn, now, self.policy(), worker, *max, &mut in_flight)
                        }));
                    }
                }
            }
        }
        got.into_iter()
            .enumerate()
            .filter_map(|(at, g)| g.map(|g| (at, g)))
            .collect()
    }

    /// Bury the candidates a claim did not take, in one transaction: whether
    /// none was (a failure counts as some: the claims that follow bury them
    /// again, or say why not).
    fn buried_none(&self, dead: &[Candidate]) -> bool {
        let buried = self.write_tx(|tx, now| {
            let mut any = false;
            for c in dead {
                any |= write::bury(tx, now, self.policy(), c)?;
            }
            Ok(any)
        });
        matches!(buried, Ok(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test of the exclusion reads [`CANDIDATES`]; the statement that
    /// runs must hold the same clause.
    #[test]
    fn the_batch_statement_and_its_candidates_leave_out_what_it_completes() {
        assert!(CLAIM_AND_COMPLETE.contains(not_completed!()));
        assert!(CANDIDATES.contains(not_completed!()));
    }
}
