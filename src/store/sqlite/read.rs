//! Reads in SQLite's SQL: one short statement each, finished before the
//! connection goes back to the pool (an open statement would pin a read
//! snapshot and starve checkpoints). The rows become documents, history
//! lines and leases through the mappings of `store/read.rs`.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, Row};

use super::rows::Rows;
use crate::clock::Millis;
use crate::job::{Counts, HistoryEntry, Job, JobFilter, LiveLease, Owner, UnknownStatus};
use crate::store::read::{
    add_count, history_entry_from, job_from, known_source_columns, live_lease_from, Claimable, Columns,
    EachRow, JobReads, KnownSource, ReadRows, Totals, HISTORY_COLUMNS, JOB_COLUMNS, LEASE_COLUMNS,
};

impl Columns for Row<'_> {
    type Error = rusqlite::Error;

    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }

    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }

    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }

    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }

    fn flag(&self, i: usize) -> rusqlite::Result<bool> {
        self.get(i)
    }

    fn not_a_status(&self, i: usize, e: UnknownStatus) -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    }
}

impl ReadRows for Rows<'_> {
    fn each_row(
        &mut self,
        sql: &'static str,
        each: &mut EachRow<'_, rusqlite::Error>,
    ) -> rusqlite::Result<()> {
        let mut stmt = self.0.prepare(sql)?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            each(r)?;
        }
        Ok(())
    }
}

impl JobReads for Rows<'_> {
    fn job_by_id(&mut self, id: i64) -> rusqlite::Result<Option<Job>> {
        let c = self.0;
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
        c.prepare_cached(&sql)?
            .query_row([id], |r| job_from(r))
            .optional()
    }

    fn job_by_key(&mut self, key: &str) -> rusqlite::Result<Option<Job>> {
        let c = self.0;
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE doc_key = ?1");
        c.prepare_cached(&sql)?
            .query_row([key], |r| job_from(r))
            .optional()
    }

    /// Up to `n` documents with an id above `after`, in id order, only those in
    /// `statuses` (every document when it is empty). A range over the rowid that
    /// stops after `n` matches, so a listing pages through a store of any size
    /// with bounded memory and without holding a read snapshot between pages.
    fn jobs_after(&mut self, taken: &JobFilter, after: i64, n: i64) -> rusqlite::Result<Vec<Job>> {
        let c = self.0;
        // The status names are the enum's own constants, never user text.
        let mut filter = if taken.statuses.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = taken
                .statuses
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect();
            format!(" AND status IN ({})", names.join(", "))
        };
        if let Some(gone) = taken.source_gone {
            filter.push_str(&format!(" AND source_gone = {}", i32::from(gone)));
        }
        if taken.no_text {
            filter.push_str(" AND no_text IS NOT NULL");
        }
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id > ?1{filter} ORDER BY id LIMIT ?2");
        let mut stmt = c.prepare_cached(&sql)?;
        let rows = stmt.query_map(rusqlite::params![after, n], |r| job_from(r))?;
        rows.collect()
    }

    fn history(&mut self, id: i64) -> rusqlite::Result<Vec<HistoryEntry>> {
        let c = self.0;
        let sql = format!("SELECT {HISTORY_COLUMNS} FROM history WHERE job_id = ?1 ORDER BY seq");
        let mut stmt = c.prepare_cached(&sql)?;
        let rows = stmt.query_map([id], |r| history_entry_from(r))?;
        rows.collect()
    }

    fn counts(&mut self) -> rusqlite::Result<Counts> {
        let c = self.0;
        let mut stmt = c.prepare_cached(
            "SELECT status, source_gone <> 0, count(*), count(no_text) FROM jobs GROUP BY status, source_gone",
        )?;
        let mut counts = Counts::default();
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, bool>(1)?,
                [r.get::<_, i64>(2)?, r.get::<_, i64>(3)?],
            ))
        })?;
        for row in rows {
            let (status, gone, n) = row?;
            add_count(&mut counts, &status, gone, n);
        }
        Ok(counts)
    }

    /// The store's [`Totals`], in one statement of counts ([`crate::store::read::TOTALS`]).
    fn totals(&mut self) -> rusqlite::Result<Totals> {
        let counts = self
            .0
            .prepare_cached(crate::store::read::TOTALS)?
            .query_row([], |r| {
                let mut counts = [0i64; 8];
                for (i, n) in counts.iter_mut().enumerate() {
                    *n = r.get(i)?;
                }
                Ok(counts)
            })?;
        Ok(Totals::from_counts(counts))
    }

    fn live_leases(&mut self, now: Millis, granted_by: Millis) -> rusqlite::Result<Vec<LiveLease>> {
        let sql = format!(
            "SELECT {LEASE_COLUMNS} FROM jobs
             WHERE status = 'extracting' AND lease_expires_at > ?1
               AND NOT coalesce(lease_expires_at - lease_ms > ?2, 0)
             ORDER BY lease_expires_at"
        );
        let mut stmt = self.0.prepare_cached(&sql)?;
        let rows = stmt.query_map([now, granted_by], |r| live_lease_from(r))?;
        rows.collect()
    }

    /// Up to four index seeks, stopping at the first fact that makes
    /// something claimable now (the rule needs nothing else then).
    fn claimable(&mut self, granted_by: Millis) -> rusqlite::Result<Claimable> {
        let c = self.0;
        let mut found = Claimable {
            discovered: c
                .prepare_cached("SELECT 1 FROM jobs WHERE status = 'discovered' LIMIT 1")?
                .exists([])?,
            granted_ahead: false,
            retry: None,
            lease: None,
        };
        if found.discovered {
            return Ok(found);
        }
        found.granted_ahead = c
            .prepare_cached(
                "SELECT 1 FROM jobs WHERE status = 'extracting' AND lease_expires_at - lease_ms > ?1 LIMIT 1",
            )?
            .exists([granted_by])?;
        if found.granted_ahead {
            return Ok(found);
        }
        found.retry = c
            .prepare_cached("SELECT min(retry_at) FROM jobs WHERE status = 'retrying'")?
            .query_row([], |r| r.get(0))?;
        found.lease = c
            .prepare_cached("SELECT min(lease_expires_at) FROM jobs WHERE status = 'extracting'")?
            .query_row([], |r| r.get(0))?;
        Ok(found)
    }

    fn count_extracting(&mut self) -> rusqlite::Result<u64> {
        let c = self.0;
        c.prepare_cached("SELECT count(*) FROM jobs WHERE status = 'extracting'")?
            .query_row([], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
    }

    fn count_pending(&mut self) -> rusqlite::Result<u64> {
        self.0
            .prepare_cached(crate::store::read::COUNT_PENDING)?
            .query_row([], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
    }
}

/// Whether a renewal of `o`'s claim at `now` would change nothing: the
/// token owns the extracting row, its lease runs to `now + lease_ms` or later, and the
/// row was last updated at `now`.
pub(crate) fn renewal_is_noop(
    c: &Connection,
    o: &Owner,
    now: Millis,
    lease_ms: Millis,
) -> rusqlite::Result<bool> {
    c.prepare_cached(
        "SELECT 1 FROM jobs WHERE id = ?1 AND owner_token = ?2 AND status = 'extracting'
                              AND lease_expires_at >= ?3 AND updated_at = ?4",
    )?
    .exists(rusqlite::params![
        o.id.0,
        o.token,
        now.saturating_add(lease_ms),
        now
    ])
}

/// The first page of a scan's known documents ([`sources_after`]).
pub(crate) const FIRST_SOURCES: &str = concat!(
    "SELECT doc_key, ",
    known_source_columns!(),
    " FROM jobs WHERE source_gone = 0 ORDER BY doc_key LIMIT ?1"
);
/// Every later page: a seek into `doc_key`'s index. One statement for both
/// (`?1 IS NULL OR doc_key > ?1`) is planned without knowing ?1, so SQLite
/// scanned the index from its start for every page, which made a scan's
/// reads grow with the square of the documents.
pub(crate) const SOURCES_AFTER: &str = concat!(
    "SELECT doc_key, ",
    known_source_columns!(),
    " FROM jobs WHERE doc_key > ?1 AND source_gone = 0 ORDER BY doc_key LIMIT ?2"
);

/// A page of present documents' keys and fingerprints after `after`, in
/// byte order: `doc_key`'s unique index compares with SQLite's BINARY
/// collation, so the walk of the range is the index's own order.
pub(crate) fn sources_after(
    c: &Connection,
    after: Option<&str>,
    limit: usize,
) -> rusqlite::Result<Vec<(String, KnownSource)>> {
    let known = |r: &rusqlite::Row<'_>| {
        Ok((
            r.get(0)?,
            KnownSource {
                stat: r.get(1)?,
                hashed: r.get(2)?,
                pending: r.get(3)?,
            },
        ))
    };
    match after {
        None => c
            .prepare_cached(FIRST_SOURCES)?
            .query_map([limit as i64], known)?
            .collect(),
        Some(after) => c
            .prepare_cached(SOURCES_AFTER)?
            .query_map(rusqlite::params![after, limit as i64], known)?
            .collect(),
    }
}

/// The stored fingerprint of each key, so a re-scan can skip reading files
/// whose fingerprint did not change. One short read for a whole batch.
pub(crate) fn source_stats(
    c: &Connection,
    keys: &[String],
) -> rusqlite::Result<HashMap<String, KnownSource>> {
    let mut stmt = c.prepare_cached(concat!(
        "SELECT ",
        known_source_columns!(),
        " FROM jobs WHERE doc_key = ?1 AND source_gone = 0"
    ))?;
    let mut out = HashMap::with_capacity(keys.len());
    for k in keys {
        let known = stmt
            .query_row([k], |r| {
                Ok(KnownSource {
                    stat: r.get(0)?,
                    hashed: r.get(1)?,
                    pending: r.get(2)?,
                })
            })
            .optional()?;
        if let Some(known) = known {
            out.insert(k.clone(), known);
        }
    }
    Ok(out)
}
