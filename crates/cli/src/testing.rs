//! Test hooks of the binary, inert unless their environment variable is set.
//!
//! They let the soak tests run real `leasehold work` processes with an extractor
//! whose time per document is random (often longer than the lease) and with one
//! clock that the test can jump for every process at once. Nothing here is used
//! in normal operation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::clock::OffsetFileClock;
use leasehold::extract::{ExtractError, Extractor};
use leasehold::Clock;

/// `sleep:MIN_MS:MAX_MS`: extract by sleeping a random time in that range, then
/// passing the text through; `panic`: panic in every extraction (a parser bug).
pub const EXTRACTOR_ENV: &str = "LEASEHOLD_TEST_EXTRACTOR";
/// A file holding a millisecond offset added to the system clock.
pub const CLOCK_FILE_ENV: &str = "LEASEHOLD_TEST_CLOCK_FILE";

/// The clock a test asked for, if any.
pub fn clock() -> Option<Arc<dyn Clock>> {
    let path = std::env::var_os(CLOCK_FILE_ENV)?;
    Some(Arc::new(OffsetFileClock::new(path)))
}

/// The slow extractor a test asked for, if any; a malformed spec is an error
/// naming the variable.
pub fn extractor() -> Result<Option<Arc<dyn Extractor>>, String> {
    let Ok(spec) = std::env::var(EXTRACTOR_ENV) else {
        return Ok(None);
    };
    if spec == "panic" {
        return Ok(Some(Arc::new(PanicExtractor)));
    }
    let bad = || format!("{EXTRACTOR_ENV}={spec:?}: expected sleep:MIN_MS:MAX_MS or panic");
    let mut parts = spec.split(':');
    if parts.next() != Some("sleep") {
        return Err(bad());
    }
    let min: u64 = parts.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let max: u64 = parts.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    if min > max {
        return Err(bad());
    }
    Ok(Some(Arc::new(SleepExtractor { min, max })))
}

/// Sleeps like a slow extraction, polling the stop signal like a good extractor.
struct SleepExtractor {
    min: u64,
    max: u64,
}

impl Extractor for SleepExtractor {
    fn extract(&self, _name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
        let until = Instant::now() + Duration::from_millis(fastrand::u64(self.min..=self.max));
        while Instant::now() < until {
            if stop.load(Ordering::SeqCst) {
                return Err(ExtractError::Stopped);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// Panics like a parser with a bug.
struct PanicExtractor;

impl Extractor for PanicExtractor {
    fn extract(&self, name: &str, _bytes: &[u8], _stop: &AtomicBool) -> Result<String, ExtractError> {
        panic!("test parser bug on {name}")
    }
}
