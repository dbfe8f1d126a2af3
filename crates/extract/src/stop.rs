//! The stop flag a worker raises when its lease is gone: every reader
//! checks it between parts, so abandoned work ends soon.

use std::sync::atomic::{AtomicBool, Ordering};

use leasehold::extract::ExtractError;

/// Returns `Stopped` once the lease is gone, so callers can bail out with `?`.
pub(crate) fn check_stop(stop: &AtomicBool) -> Result<(), ExtractError> {
    if stop.load(Ordering::Relaxed) {
        Err(ExtractError::Stopped)
    } else {
        Ok(())
    }
}
