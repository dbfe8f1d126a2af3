//! Log events of the store's facade (DESIGN §3): a refused fenced write is
//! worth a line wherever it happens, on either engine. The history keeps the
//! refusal too; the log says it as it happens.

use crate::job::{Fenced, Owner};

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
