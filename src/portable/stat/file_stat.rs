//! What one stat says of a file, whichever call made it.

use std::fs::Metadata;

/// What a rerun needs of a file: its kind, size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// A regular file (not a directory, link or special file).
    pub is_file: bool,
    /// Size in bytes.
    pub len: u64,
    /// Seconds since the epoch.
    pub mtime_s: i64,
    /// Nanoseconds within that second.
    pub mtime_ns: u32,
}

impl FileStat {
    /// The same facts from `std`'s metadata.
    pub fn of(m: &Metadata) -> FileStat {
        #[cfg(unix)]
        let (mtime_s, mtime_ns) = {
            use std::os::unix::fs::MetadataExt;
            (m.mtime(), m.mtime_nsec() as u32)
        };
        #[cfg(not(unix))]
        let (mtime_s, mtime_ns) = {
            let since = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .unwrap_or_default();
            (since.as_secs() as i64, since.subsec_nanos())
        };
        FileStat {
            is_file: m.is_file(),
            len: m.len(),
            mtime_s,
            mtime_ns,
        }
    }

    /// The modification time as `seconds.nanoseconds`, written into
    /// whatever text it is part of (a scan writes one per file).
    pub fn mtime(&self) -> impl std::fmt::Display {
        MTime(self.mtime_s, self.mtime_ns)
    }
}

/// Seconds and nanoseconds, shown as `seconds.nanoseconds`.
struct MTime(i64, u32);

impl std::fmt::Display for MTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:09}", self.0, self.1)
    }
}
