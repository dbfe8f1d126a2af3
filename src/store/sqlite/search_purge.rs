//! Purging deleted text from the FTS5 index.
//!
//! The index runs with FTS5's `secure-delete` off: with it on, each deleted
//! row was searched for in every older segment, which made replacing a
//! document cost tens of times what adding one did, growing with the index.
//! Off, a deletion is a marker that hides the old row, and the old row's
//! terms stay in the file until a merge drops them. So deleted text is
//! purged on a schedule instead: every row the index deletes is counted
//! (`search_deleted`), and when the count reaches a tenth of the documents
//! indexed at the last purge (or at the first deletion; at least
//! [`PURGE_MIN`]), or when `gc` asks, a
//! purge merges the whole index into one segment, which keeps no deleted
//! row. It goes in steps of [`MERGE_PAGES`] pages, one short write
//! transaction each, taken after completions as the retired parts' purge
//! is (after a completion, by the store's upkeep), so no writer waits long on it.
//! SQLite's own `secure_delete` pragma zeroes the pages a merge frees.

use rusqlite::{Connection, OptionalExtension};

use super::meta::{meta, meta_set};

/// Rows deleted from the index since the last purge finished.
const DELETED: &str = "search_deleted";
/// How many deleted rows make a purge due (a tenth of the documents indexed
/// when the last one finished).
const DUE_AT: &str = "search_purge_at";
/// While a purge runs: the count of deleted rows when it began (those
/// deleted since are left for the next).
const RUNNING: &str = "search_purging";
/// The smallest number of deleted rows that makes a purge due.
pub(crate) const PURGE_MIN: i64 = 32;
/// Pages of the index one merge step writes: a short hold of the write lock.
const MERGE_PAGES: i64 = 64;

/// Count `n` rows deleted from the index, in the deleting transaction.
pub(crate) fn note_deleted(tx: &Connection, n: usize) -> rusqlite::Result<()> {
    if n == 0 {
        return Ok(());
    }
    tx.prepare_cached(
        "INSERT INTO meta (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = CAST(value AS INTEGER) + ?2",
    )?
    .execute(rusqlite::params![DELETED, n as i64])?;
    if number(tx, DUE_AT)?.is_none() {
        // The first deletion of a store: its due point from its size, so
        // that a large index made before purges were counted is not merged
        // whole after its first few changes.
        set_due_at(tx)?;
    }
    Ok(())
}

/// A tenth of the documents indexed now (at least [`PURGE_MIN`]) as the
/// deleted rows that make the next purge due.
fn set_due_at(tx: &Connection) -> rusqlite::Result<()> {
    let indexed: i64 = tx.query_row(
        "SELECT count(*) FROM jobs WHERE result_path IS NOT NULL",
        [],
        |r| r.get(0),
    )?;
    meta_set(tx, DUE_AT, &(indexed / 10).max(PURGE_MIN).to_string())
}

/// Whether a purge runs or is due; with `now`, whether any deleted row is
/// waiting at all (`gc` purges whatever there is). A read, so that a store
/// with nothing to do takes no write lock for it.
pub(crate) fn due(c: &Connection, now: bool) -> rusqlite::Result<bool> {
    if meta(c, RUNNING)?.is_some() {
        return Ok(true);
    }
    let deleted = number(c, DELETED)?.unwrap_or(0);
    let at = number(c, DUE_AT)?.unwrap_or(PURGE_MIN);
    Ok(deleted > 0 && (now || deleted >= at))
}

/// The index's upkeep due after a completion ([`next`]).
pub(crate) enum Upkeep {
    /// Retired parts of long texts wait to be deleted.
    Parts,
    /// A purge of deleted text runs or is due.
    Purge,
    /// Nothing.
    Nothing,
}

/// What upkeep is due, in one read: a store with nothing to do takes no
/// write lock and one read transaction for it.
pub(crate) fn next(c: &Connection, now: bool) -> rusqlite::Result<Upkeep> {
    Ok(if has_parts_to_purge(c)? {
        Upkeep::Parts
    } else if due(c, now)? {
        Upkeep::Purge
    } else {
        Upkeep::Nothing
    })
}

/// One step of the purge: the first starts FTS5's merge of every segment
/// into one; each later one continues it by [`MERGE_PAGES`] pages, until a
/// step finds nothing left to merge. Whether more steps are needed. The
/// purge being due is asked again here, in the write transaction: another
/// writer may have finished it since the caller's read.
pub(crate) fn step(tx: &Connection, now: bool) -> rusqlite::Result<bool> {
    if !due(tx, now)? {
        return Ok(false);
    }
    let Some(began_with) = number(tx, RUNNING)? else {
        merge(tx, -MERGE_PAGES)?;
        let deleted = number(tx, DELETED)?.unwrap_or(0);
        meta_set(tx, RUNNING, &deleted.to_string())?;
        return Ok(true);
    };
    // FTS5: a merge that changed fewer than two rows found nothing to do.
    if merge(tx, MERGE_PAGES)? >= 2 {
        return Ok(true);
    }
    let deleted = number(tx, DELETED)?.unwrap_or(0);
    meta_set(tx, DELETED, &(deleted - began_with).max(0).to_string())?;
    set_due_at(tx)?;
    tx.execute("DELETE FROM meta WHERE name = ?1", [RUNNING])?;
    Ok(false)
}

/// FTS5's `merge` command with `pages`; the rows it changed.
fn merge(tx: &Connection, pages: i64) -> rusqlite::Result<u64> {
    let before = tx.total_changes();
    tx.prepare_cached("INSERT INTO search_text (search_text, rank) VALUES ('merge', ?1)")?
        .execute([pages])?;
    Ok(tx.total_changes() - before)
}

/// A meta setting read as a number (`None`: unset or not a number).
fn number(c: &Connection, name: &str) -> rusqlite::Result<Option<i64>> {
    Ok(meta(c, name)?.and_then(|v| v.trim().parse().ok()))
}

/// Whether any part waits for [`search_index::purge_retired`](super::search_index::purge_retired): a read, so that a store
/// with nothing to purge takes no write lock for it.
pub(crate) fn has_parts_to_purge(c: &Connection) -> rusqlite::Result<bool> {
    Ok(
        c.prepare_cached("SELECT 1 FROM search_parts WHERE state <> 'live' LIMIT 1")?
            .query_row([], |r| r.get::<_, i64>(0))
            .optional()?
            .is_some(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's file, and a connection of its own on it.
    fn store_file() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        drop(crate::Store::open(&path, crate::StoreOptions::default()).unwrap());
        let conn = Connection::open(&path).unwrap();
        (dir, conn)
    }

    /// A purge starts when due, runs to its end in steps, and a step taken
    /// after it ended (a second writer that read "due" before the first one
    /// finished it) starts nothing.
    #[test]
    fn a_purge_runs_when_due_and_a_late_step_starts_none() {
        let (_dir, c) = store_file();
        assert!(!due(&c, false).unwrap());
        assert!(!step(&c, false).unwrap(), "nothing deleted: nothing to do");
        note_deleted(&c, PURGE_MIN as usize - 1).unwrap();
        assert!(!due(&c, false).unwrap());
        assert!(due(&c, true).unwrap(), "gc purges whatever waits");
        note_deleted(&c, 1).unwrap();
        assert!(due(&c, false).unwrap());
        let mut steps = 0;
        while step(&c, false).unwrap() {
            steps += 1;
            assert!(steps < 1000, "the purge never ends");
        }
        assert_eq!(meta(&c, RUNNING).unwrap(), None);
        assert_eq!(number(&c, DELETED).unwrap(), Some(0));
        assert_eq!(number(&c, DUE_AT).unwrap(), Some(PURGE_MIN));
        assert!(!step(&c, false).unwrap(), "a late step");
        assert_eq!(meta(&c, RUNNING).unwrap(), None, "a late step started a purge");
    }
}
