//! `leasehold doctor`: say plainly what is wrong with a data directory, and
//! the command that mends each thing; `doctor --fix` mends what it can.
//!
//! Checks, each reported as one line naming the thing (a path, a document key)
//! and the way to mend it:
//! - the database and the mirror are on local file systems (statfs magic);
//! - the store opens; a SQLite file passes the full `integrity_check` and has
//!   WAL in force (a PostgreSQL database keeps its own files; its rows are
//!   checked like SQLite's). What the check says of the search index (FTS5's
//!   own structures, "malformed inverted index", or a damaged page of one of
//!   its tables, known by the b-tree's root page) is the index's problem,
//!   which `leasehold reindex` mends, not the store's. Damage to the store's
//!   own tables (the documents, history, …) is named with the one way out, a
//!   backup: no command rebuilds them;
//! - leases: no two rows share a key or an owner token, every `extracting` row
//!   has a token and a lease, no other row has a token;
//! - every `indexed` row's result file exists and its SHA-256 matches;
//! - the search index holds exactly the accepted texts: every document with
//!   an accepted result is in it (searchable) with that result's text, and
//!   nothing else is (`leasehold reindex` mends it);
//! - the mirror holds no generation, temp or probe file that `gc` would remove,
//!   and no document directory the database does not know (a document whose
//!   lock another process holds is skipped, with a note). The files of a
//!   document whose source was removed wait for `gc`: that is the ordinary
//!   state after a deletion, a note rather than a problem.
//!
//! Unlike the other commands, doctor without `--fix` never creates anything: a
//! missing database or mirror is a problem to report, not something to set
//! up, and the mirror's writability is asked of the kernel (`access(2)`)
//! instead of tried with a probe file. A read-only data directory (a backup, a
//! mounted snapshot) is opened read-only and checked all the same. Every
//! failure, including a store that cannot be opened at all, becomes a problem
//! line (exit 1), so a damaged data directory gets a diagnosis rather than a
//! refusal.
//!
//! `--fix` is the check with the mends after it, as `fsck -y` and `borg check
//! --repair` are (`fix.rs`); then it checks again, and exits by that second
//! verdict.
//!
//! The row checks' SQL lives in the store (`store/sqlite/check.rs` for
//! SQLite, `store/postgres/read.rs` for PostgreSQL); this room only decides
//! what is a problem and how it reads.

mod checks;
mod fix;

use std::process::ExitCode;

use checks::{Doctor, Place};

use super::args::Global;
use super::error::CliError;

/// `leasehold doctor [--fix]`.
pub fn doctor(g: &Global, json: bool, fix: bool) -> Result<ExitCode, CliError> {
    // Nothing to examine is a usage error, not a finding (exit 2).
    if let Some(line) = super::config::missing_data_directory(g) {
        return Err(CliError::Config(line));
    }
    let (file, broken) = match super::config::load_file_config(g) {
        Ok(file) => (file, None),
        Err(e) => (None, Some(e)),
    };
    let place = Place {
        db: super::config::database(g, file.as_ref()),
        mirror: super::config::mirror_root(g),
        clock_skew: file.as_ref().and_then(|f| f.store.clock_skew),
    };
    let mut d = Doctor::at(&place);
    if let Some(e) = &broken {
        d.broken_config(g, e);
    }
    let store = d.open_store(&place, fix);
    let mirror = store.as_ref().and_then(|s| d.open_mirror(&place.mirror, s));
    if let Some(store) = &store {
        d.examine(store, mirror.as_ref());
    }
    let (true, Some(store), Some(mirror)) = (fix, &store, &mirror) else {
        return Ok(d.report(json));
    };
    let mended = fix::mend(&d, store, mirror);
    let mut after = Doctor::at(&place);
    if let Some(e) = &broken {
        after.broken_config(g, e);
    }
    after.checked.access = d.checked.access;
    after.examine(store, Some(mirror));
    Ok(fix::report(d, mended, after, json))
}
