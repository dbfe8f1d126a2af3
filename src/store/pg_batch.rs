//! A test hook: PostgreSQL's one-statement batch of claims and plain
//! completions (`postgres/batch.rs`), run on operations the test chooses. A
//! black-box test cannot choose what the group-commit queue puts together.

use super::completion::Completion;
use super::fencing::{WriteOp, WriteOut};
use super::Store;
use crate::error::Result;
use crate::job::{Claim, Fenced, JobId, Owner};

/// One operation of a batch.
#[derive(Debug)]
pub enum Op {
    /// A claim of one document by a worker.
    Claim(String),
    /// A completion of `r` with checksum `s` by its owner, with a note.
    Complete(Owner, Option<String>),
    /// The same, of a text that holds no word, with why.
    CompleteWithoutText(Owner, String),
    /// The same, with a text for the search index, of document `key`.
    CompleteWithText { owner: Owner, key: String, text: String },
    /// A renewal (never part of a batch statement).
    Renew(Owner),
}

/// What one operation of a batch answered.
#[derive(Debug)]
pub enum Out {
    /// A claim's claims.
    Claims(Vec<Claim>),
    /// A fenced write's outcome.
    Fenced(Fenced),
}

/// `ops` run as one statement on a PostgreSQL store, one answer each; `None`
/// when they do not fit one (left to a transaction) or the store is not on
/// PostgreSQL.
pub fn in_one_statement(store: &Store, ops: Vec<Op>) -> Option<Vec<Result<Out>>> {
    let pg = store.postgres()?;
    let ops: Vec<WriteOp> = ops
        .into_iter()
        .map(|op| match op {
            Op::Claim(worker) => WriteOp::claim(&worker, 1),
            Op::Complete(owner, note) => {
                WriteOp::complete(&owner, Completion::new("r", "s").note(note.as_deref()))
            }
            Op::CompleteWithoutText(owner, why) => {
                WriteOp::complete(&owner, Completion::new("r", "s").no_text(why.as_str()))
            }
            Op::CompleteWithText { owner, key, text } => WriteOp::complete(
                &owner,
                Completion::new("r", "s").index(text.as_str()).labelled(&key),
            ),
            Op::Renew(owner) => WriteOp::Renew(owner),
        })
        .collect();
    let refs: Vec<&WriteOp> = ops.iter().collect();
    let outs = pg.in_one_statement(&refs)?;
    Some(
        outs.into_iter()
            .map(|o| {
                o.map(|o| match o {
                    WriteOut::Claims(c) => Out::Claims(c),
                    WriteOut::Fenced(f) => Out::Fenced(f),
                })
            })
            .collect(),
    )
}

/// The documents a batch statement's claim would take, `limit` wanted, while
/// the statement completes `completing`, in the order it takes them; nothing
/// is changed. `None` when the store is not on PostgreSQL.
pub fn candidates(store: &Store, completing: &[JobId], limit: usize) -> Option<Result<Vec<JobId>>> {
    let pg = store.postgres()?;
    let ids: Vec<i64> = completing.iter().map(|id| id.0).collect();
    Some(
        pg.batch_candidates(&ids, limit)
            .map(|ids| ids.into_iter().map(JobId).collect()),
    )
}

/// Whether the store reaches PostgreSQL's server sessions per transaction
/// (a pooler in transaction mode, found when it opened or learnt since).
/// `None` when the store is not on PostgreSQL.
pub fn pooled_per_transaction(store: &Store) -> Option<Result<bool>> {
    Some(store.postgres()?.pooled_per_transaction())
}
