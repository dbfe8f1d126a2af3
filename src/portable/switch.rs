//! The switch between the Linux fast paths and the portable ones that every
//! other system takes: `LEASEHOLD_FORCE_PORTABLE=1` makes Linux take the
//! portable ones, so CI runs them here.

use std::sync::OnceLock;

/// The environment variable that forces the portable paths (value `1`).
pub const FORCE_PORTABLE_ENV: &str = "LEASEHOLD_FORCE_PORTABLE";

/// Whether `LEASEHOLD_FORCE_PORTABLE=1` was set when this process first asked.
pub fn forced() -> bool {
    static FORCED: OnceLock<bool> = OnceLock::new();
    *FORCED.get_or_init(|| std::env::var_os(FORCE_PORTABLE_ENV).is_some_and(|v| v == "1"))
}

/// Whether the Linux fast paths are to be taken: on Linux, unless forced off.
pub fn fast() -> bool {
    cfg!(target_os = "linux") && !forced()
}
