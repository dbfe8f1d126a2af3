//! Group commit on PostgreSQL: the claims and fenced writes that the threads
//! of one process make at about the same moment share one transaction, and
//! in it one statement per kind where the kind allows.
//!
//! The queue is `crate::group`'s leader–follower one, as on SQLite. What
//! differs is what a batch costs: the server does the work of each statement,
//! each statement waits for its answer, and a commit waits for its WAL
//! flush. The common batch of a busy pool, claims and completions with no
//! text for the sink (a text for the index goes with them), is one
//! statement that commits on its own
//! (`batch.rs`): one round trip and one flush whatever its size. Any other
//! batch is one transaction that folds its claims into one
//! [`write::claim_for`] (one `CLAIM` and one history INSERT for every
//! caller) and its completions into one [`write::complete_each`], and
//! commits once. A lone caller's claim or plain completion is one statement
//! of its own. A handle has [`LANES`](super::LANES) queues (see there why one),
//! and their leaders gather: when the last batch was answered, its callers
//! come back one wake-up after another, so a new leader waits (no longer
//! than the last batch took, and 2 ms) until as many are queued as that
//! batch had, rather than run a statement for the first few and another for
//! the rest (`crate::group::GroupCommit::gathering`).
//!
//! Order inside a batch: renewals, then failures and releases, then
//! completions, then claims. The operations of a batch were concurrent, so
//! any order is one they could have run in; this one renews a lease before
//! the completion that a worker's lease keeper raced, and lets a claim take
//! what a release in the same batch handed back.

use super::conn::Tx;
use super::conn::{Fail, Sql};
use super::{write, PgStore};
use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::group::GroupCommit;
use crate::job::{Claim, Owner};
use crate::store::completion::Completion;
use crate::store::fencing::{WriteOp, WriteOut};
use crate::store::options::Policy;

impl PgStore {
    /// Queue `op` with the others of this moment and return its own answer.
    pub(super) fn submit(&self, op: WriteOp) -> Result<WriteOut> {
        let lanes = &self.inner.group;
        let lane = lanes
            .iter()
            .position(GroupCommit::is_idle)
            .unwrap_or_else(|| lane_of_this_thread() % lanes.len());
        lanes[lane].submit(op, |ops| self.commit_batch(ops))
    }

    /// A batch in one transaction; if that fails, each operation alone, so
    /// that one bad operation fails alone and every caller gets its own error.
    /// A lone claim, or a lone completion with nothing for the sink, runs
    /// outside any transaction: one statement that commits on its own; so
    /// does a batch of only such claims and completions (`batch.rs`).
    fn commit_batch(&self, ops: &[&WriteOp]) -> Vec<Result<WriteOut>> {
        let policy = self.policy();
        if let [op] = ops {
            if let Some(out) = self.alone(op) {
                return vec![out];
            }
        }
        if let Some(outs) = self.in_one_statement(ops) {
            return outs;
        }
        // Run again, a batch that committed would claim other documents
        // and refuse its own completions: its COMMIT is looked up when its
        // answer is lost (`tx.rs`), and one whose fate stays unknown fails
        // every operation rather than running them again.
        match self.write_tx_known(|tx, now| apply_batch(tx, now, policy, ops)) {
            Ok(outs) => outs.into_iter().map(Ok).collect(),
            Err(u) if u.maybe_committed => self.all_unknown(ops, &u.error),
            Err(u) if ops.len() == 1 => vec![Err(u.error)],
            Err(_) => ops
                .iter()
                .map(|op| {
                    self.write_tx_known(|tx, now| apply_batch(tx, now, policy, &[op]))
                        .map_err(|u| match u.maybe_committed {
                            true => self.outcome_unknown(&u.error),
                            false => u.error,
                        })
                        .and_then(only_answer)
                })
                .collect(),
        }
    }
}

impl PgStore {
    /// The error of a batch (one statement, or a transaction's COMMIT) whose
    /// answer was lost and whose lookup failed (`lookup`): it may have
    /// committed, so it is not run again.
    fn outcome_unknown(&self, lookup: &Error) -> Error {
        Error::PostgresOutcomeUnknown {
            url: self.url().to_owned(),
            reason: format!("a batch's answer was lost and what it did could not be read back: {lookup}"),
        }
    }

    /// [`PgStore::outcome_unknown`] for each of `ops`.
    pub(super) fn all_unknown(&self, ops: &[&WriteOp], lookup: &Error) -> Vec<Result<WriteOut>> {
        ops.iter().map(|_| Err(self.outcome_unknown(lookup))).collect()
    }

    /// `op` outside any transaction, when it is a claim (of no more than one
    /// statement's rows) or a completion with no text for the sink or the
    /// search index (`None` otherwise). A claim is run again on another
    /// connection if its connection failed, after looking for what the lost
    /// statement claimed by its tokens (`recover.rs`); a completion is not
    /// (it would be refused as not the owner's if the first had committed).
    fn alone(&self, op: &WriteOp) -> Option<Result<WriteOut>> {
        let policy = self.policy();
        if let WriteOp::Claim { worker, max } = op {
            return (*max <= write::CLAIM_ROWS).then(|| {
                let mut in_flight = None;
                self.on_its_own(true, |conn, now| {
                    write::claim_alone(conn, now, policy, worker, *max, &mut in_flight)
                })
                .map(WriteOut::Claims)
            });
        }
        let (owner, c) = op.plain_completion()?;
        Some(
            self.on_its_own(false, |conn, now| write::complete_alone(conn, now, owner, c))
                .map(WriteOut::Fenced),
        )
    }
}

/// The one answer of a batch of one.
fn only_answer(mut outs: Vec<WriteOut>) -> Result<WriteOut> {
    match (outs.pop(), outs.is_empty()) {
        (Some(out), true) => Ok(out),
        _ => Err(Error::Internal(
            "a batch of one gave other than one answer".into(),
        )),
    }
}

/// Run every operation of a batch in the caller's transaction; one answer
/// per operation, in the batch's order.
fn apply_batch(tx: &mut Tx<'_>, now: Millis, policy: &Policy, ops: &[&WriteOp]) -> Sql<Vec<WriteOut>> {
    let mut outs: Vec<Option<WriteOut>> = ops.iter().map(|_| None).collect();
    for (i, op) in ops.iter().enumerate() {
        if let WriteOp::Renew(o) = op {
            outs[i] = Some(WriteOut::Fenced(write::renew(tx, now, policy, o)?));
        }
    }
    for (i, op) in ops.iter().enumerate() {
        let fenced = match op {
            WriteOp::Fail {
                owner,
                error,
                permanent,
            } => write::fail(tx, now, policy, owner, error, *permanent)?,
            WriteOp::Release {
                owner,
                reason,
                parked,
            } => write::release(tx, now, owner, reason, parked.as_ref())?,
            _ => continue,
        };
        outs[i] = Some(WriteOut::Fenced(fenced));
    }
    complete_all(tx, now, policy, ops, &mut outs)?;
    claim_all(tx, now, policy, ops, &mut outs)?;
    outs.into_iter()
        .map(|o| o.ok_or_else(|| Fail::Refused("an operation of the batch was not run".into())))
        .collect()
}

/// The batch's completions, in one [`write::complete_each`].
fn complete_all(
    tx: &mut Tx<'_>,
    now: Millis,
    policy: &Policy,
    ops: &[&WriteOp],
    outs: &mut [Option<WriteOut>],
) -> Sql<()> {
    let mut at = Vec::new();
    let mut done: Vec<(Owner, Completion<'_>)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if let Some((owner, c)) = op.completion() {
            at.push(i);
            done.push((owner.clone(), c.clone()));
        }
    }
    if done.is_empty() {
        return Ok(());
    }
    let fenced = write::complete_each(tx, now, &policy.outbox, &done)?;
    for (i, f) in at.into_iter().zip(fenced) {
        outs[i] = Some(WriteOut::Fenced(f));
    }
    Ok(())
}

/// The batch's claims, in one [`write::claim_for`].
fn claim_all(
    tx: &mut Tx<'_>,
    now: Millis,
    policy: &Policy,
    ops: &[&WriteOp],
    outs: &mut [Option<WriteOut>],
) -> Sql<()> {
    let mut at = Vec::new();
    let mut wants: Vec<(&str, usize)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if let WriteOp::Claim { worker, max } = op {
            at.push(i);
            wants.push((worker, *max));
        }
    }
    if wants.is_empty() {
        return Ok(());
    }
    let got: Vec<Vec<Claim>> = write::claim_for(tx, now, policy, &wants)?;
    for (i, claims) in at.into_iter().zip(got) {
        outs[i] = Some(WriteOut::Claims(claims));
    }
    Ok(())
}

/// A lane for this thread when none is idle: the same one every time.
fn lane_of_this_thread() -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::thread::current().id().hash(&mut h);
    h.finish() as usize
}
