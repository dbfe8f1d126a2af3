//! Log events of the store's facade (DESIGN §3): a refused fenced write and
//! a lease taken over are worth a line wherever they happen, on either
//! engine. The history keeps them too; the log says them as they happen,
//! once each: here, after the transaction committed, never from inside one
//! that may still roll back or be run again.

use crate::job::{Claim, Fenced, Owner};

/// Log each of `claims` that took over a lease that was over.
pub(super) fn took_over(worker: &str, claims: &[Claim]) {
    for c in claims.iter().filter(|c| c.took_over) {
        tracing::warn!(
            target: "leasehold::lease",
            event = "claim_taken_over",
            doc_id = c.id.0,
            from_fence = c.fence - 1,
            worker,
            "took over a lease that was over"
        );
    }
}

/// Log `out` if the store refused `operation` of `owner`.
pub(super) fn refused(operation: &'static str, owner: &Owner, out: &Fenced) {
    if let Fenced::Rejected(why) = out {
        tracing::warn!(
            target: "leasehold::fence",
            event = "write_refused",
            operation,
            doc_id = owner.id.0,
            fence = owner.fence,
            why = %why,
            "a fenced write was refused: this worker no longer owns the document"
        );
    }
}
