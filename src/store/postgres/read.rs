//! Reads on PostgreSQL: one statement each, each in its own snapshot, the
//! same rows and orders as `sqlite/read.rs`, mapped by `store/read.rs`; and
//! the checks `doctor` runs (`store/check.rs`).

use std::collections::HashMap;

use ::postgres::{Client, Row};

use super::conn::{Fail, Sql};
use crate::clock::Millis;
use crate::job::{Counts, HistoryEntry, Job, JobFilter, LiveLease, UnknownStatus};
use crate::store::check::{
    accepted_result_from, broken_owner, indexed_row_from, shared_key, shared_token, AcceptedResult,
    CheckReads, IndexedRow, ACCEPTED_COLUMNS, INDEXED_COLUMNS,
};
use crate::store::read::{
    add_count, history_entry_from, job_from, known_source_columns, live_lease_from, Claimable, Columns,
    EachRow, JobReads, KnownSource, ReadRows, Totals, HISTORY_COLUMNS, JOB_COLUMNS, LEASE_COLUMNS,
};

impl Columns for Row {
    type Error = Fail;

    fn int(&self, i: usize) -> Sql<i64> {
        Ok(self.try_get(i)?)
    }

    fn opt_int(&self, i: usize) -> Sql<Option<i64>> {
        Ok(self.try_get(i)?)
    }

    fn text(&self, i: usize) -> Sql<String> {
        Ok(self.try_get(i)?)
    }

    fn opt_text(&self, i: usize) -> Sql<Option<String>> {
        Ok(self.try_get(i)?)
    }

    fn flag(&self, i: usize) -> Sql<bool> {
        Ok(self.try_get(i)?)
    }

    fn not_a_status(&self, _i: usize, e: UnknownStatus) -> Fail {
        Fail::Refused(format!("a row holds {e}"))
    }
}

impl ReadRows for Client {
    fn each_row(&mut self, sql: &'static str, each: &mut EachRow<'_, Fail>) -> Sql<()> {
        for r in self.query(sql, &[])? {
            each(&r)?;
        }
        Ok(())
    }
}

impl JobReads for Client {
    fn job_by_id(&mut self, id: i64) -> Sql<Option<Job>> {
        let c = self;
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
        c.query_opt(&sql, &[&id])?.as_ref().map(job_from).transpose()
    }

    fn job_by_key(&mut self, key: &str) -> Sql<Option<Job>> {
        let c = self;
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE doc_key = $1");
        c.query_opt(&sql, &[&key])?.as_ref().map(job_from).transpose()
    }

    /// Up to `n` documents with an id above `after`, in id order, only those in
    /// `statuses` (all when empty).
    fn jobs_after(&mut self, filter: &JobFilter, after: i64, n: i64) -> Sql<Vec<Job>> {
        let c = self;
        let names: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE id > $1 AND (cardinality($3::TEXT[]) = 0 OR status = ANY($3))
               AND ($4::BOOLEAN IS NULL OR source_gone = $4) AND (NOT $5 OR no_text IS NOT NULL)
             ORDER BY id LIMIT $2"
        );
        c.query(&sql, &[&after, &n, &names, &filter.source_gone, &filter.no_text])?
            .iter()
            .map(job_from)
            .collect()
    }

    fn history(&mut self, id: i64) -> Sql<Vec<HistoryEntry>> {
        let c = self;
        let sql = format!("SELECT {HISTORY_COLUMNS} FROM history WHERE job_id = $1 ORDER BY seq");
        c.query(&sql, &[&id])?.iter().map(history_entry_from).collect()
    }

    fn counts(&mut self) -> Sql<Counts> {
        let c = self;
        let mut counts = Counts::default();
        for r in c.query(
            "SELECT status, source_gone, count(*), count(no_text) FROM jobs GROUP BY status, source_gone",
            &[],
        )? {
            let (status, gone) = (r.try_get::<_, String>(0)?, r.try_get(1)?);
            let n = [r.try_get(2)?, r.try_get(3)?];
            add_count(&mut counts, &status, gone, n);
        }
        Ok(counts)
    }

    /// The store's [`Totals`], in one statement of counts ([`crate::store::read::TOTALS`]).
    fn totals(&mut self) -> Sql<Totals> {
        let r = self.query_one(crate::store::read::TOTALS, &[])?;
        let mut counts = [0i64; 8];
        for (i, n) in counts.iter_mut().enumerate() {
            *n = r.try_get(i)?;
        }
        Ok(Totals::from_counts(counts))
    }

    fn live_leases(&mut self, now: Millis, granted_by: Millis) -> Sql<Vec<LiveLease>> {
        let sql = format!(
            "SELECT {LEASE_COLUMNS} FROM jobs
             WHERE status = 'extracting' AND lease_expires_at > $1
               AND NOT coalesce(lease_expires_at - lease_ms > $2, FALSE)
             ORDER BY lease_expires_at, id"
        );
        self.query(&sql, &[&now, &granted_by])?
            .iter()
            .map(live_lease_from)
            .collect()
    }

    /// One round trip.
    fn claimable(&mut self, granted_by: Millis) -> Sql<Claimable> {
        let row = self.query_one(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE status = 'discovered'),
                    EXISTS (SELECT 1 FROM jobs WHERE status = 'extracting' AND lease_expires_at - lease_ms > $1),
                    (SELECT min(retry_at) FROM jobs WHERE status = 'retrying'),
                    (SELECT min(lease_expires_at) FROM jobs WHERE status = 'extracting')",
            &[&granted_by],
        )?;
        Ok(Claimable {
            discovered: row.try_get(0)?,
            granted_ahead: row.try_get(1)?,
            retry: row.try_get(2)?,
            lease: row.try_get(3)?,
        })
    }

    fn count_extracting(&mut self) -> Sql<u64> {
        let c = self;
        let n: i64 = c
            .query_one("SELECT count(*) FROM jobs WHERE status = 'extracting'", &[])?
            .try_get(0)?;
        Ok(n.max(0) as u64)
    }

    fn count_pending(&mut self) -> Sql<u64> {
        let n: i64 = self
            .query_one(crate::store::read::COUNT_PENDING, &[])?
            .try_get(0)?;
        Ok(n.max(0) as u64)
    }
}

/// [`job_by_id`] with the row locked until the transaction ends (mirror
/// cleanup, `fence.rs`).
pub(crate) fn job_by_id_locked(tx: &mut ::postgres::Transaction<'_>, id: i64) -> Sql<Option<Job>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 FOR UPDATE");
    tx.query_opt(&sql, &[&id])?.as_ref().map(job_from).transpose()
}

/// A page of present documents' keys and fingerprints after `after`, in
/// byte order (`COLLATE "C"`, which the index `jobs_doc_key_bytes` serves;
/// the database's own collation would order keys as words).
pub(crate) fn sources_after(
    c: &mut Client,
    after: Option<&str>,
    limit: usize,
) -> Sql<Vec<(String, KnownSource)>> {
    // Two statements, as on SQLite: a page after a key is a seek into the
    // "C"-collated index, whatever plan a statement without it would get.
    let limit = limit as i64;
    let rows = match after {
        None => c.query(
            concat!(
                "SELECT doc_key, ",
                known_source_columns!(),
                r#" FROM jobs WHERE NOT source_gone ORDER BY doc_key COLLATE "C" LIMIT $1"#
            ),
            &[&limit],
        )?,
        Some(after) => c.query(
            concat!(
                "SELECT doc_key, ",
                known_source_columns!(),
                r#" FROM jobs WHERE doc_key COLLATE "C" > $1::TEXT COLLATE "C" AND NOT source_gone
               ORDER BY doc_key COLLATE "C" LIMIT $2"#
            ),
            &[&after, &limit],
        )?,
    };
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get(0)?,
                KnownSource {
                    stat: r.try_get(1)?,
                    hashed: r.try_get(2)?,
                    pending: r.try_get(3)?,
                },
            ))
        })
        .collect()
}

/// The stored fingerprint of each key, one statement for the batch.
pub(crate) fn source_stats(c: &mut Client, keys: &[String]) -> Sql<HashMap<String, KnownSource>> {
    let rows = c.query(
        concat!(
            "SELECT doc_key, ",
            known_source_columns!(),
            " FROM jobs WHERE doc_key = ANY($1) AND NOT source_gone"
        ),
        &[&keys],
    )?;
    let mut out = HashMap::with_capacity(rows.len());
    for r in rows {
        out.insert(
            r.try_get(0)?,
            KnownSource {
                stat: r.try_get(1)?,
                hashed: r.try_get(2)?,
                pending: r.try_get(3)?,
            },
        );
    }
    Ok(out)
}

pub(crate) fn meta(c: &mut Client, name: &str) -> Sql<Option<String>> {
    Ok(c.query_opt("SELECT value FROM meta WHERE name = $1", &[&name])?
        .map(|r| r.try_get(0))
        .transpose()?)
}

impl CheckReads for Client {
    /// Up to `limit` indexed rows with ids after `after`, in id order.
    fn indexed_page(&mut self, after: i64, limit: i64) -> Sql<Vec<IndexedRow>> {
        let c = self;
        let sql = format!(
            "SELECT {INDEXED_COLUMNS} FROM jobs WHERE status = 'indexed' AND id > $1 ORDER BY id LIMIT $2"
        );
        c.query(&sql, &[&after, &limit])?
            .iter()
            .map(indexed_row_from)
            .collect()
    }

    fn accepted_page(&mut self, after: i64, limit: i64) -> Sql<Vec<AcceptedResult>> {
        let sql = format!(
            "SELECT {ACCEPTED_COLUMNS} FROM jobs WHERE status = 'indexed' AND id > $1 ORDER BY id LIMIT $2"
        );
        self.query(&sql, &[&after, &limit])?
            .iter()
            .map(accepted_result_from)
            .collect()
    }

    /// (subject, message) for every row that breaks "at most one live owner"
    /// (the checks of `sqlite/check.rs`, with the same messages).
    fn lease_violations(&mut self) -> Sql<Vec<(String, String)>> {
        let c = self;
        let mut out = Vec::new();
        for r in c.query(
            "SELECT doc_key, count(*) FROM jobs GROUP BY doc_key HAVING count(*) > 1 ORDER BY doc_key",
            &[],
        )? {
            out.push(shared_key(r.try_get(0)?, r.try_get(1)?));
        }
        for r in c.query(
            "SELECT doc_key, status, owner_token IS NULL OR owner_token = ''
             FROM jobs
             WHERE (status = 'extracting' AND (owner_token IS NULL OR owner_token = '' OR lease_expires_at IS NULL))
                OR (status <> 'extracting' AND owner_token IS NOT NULL)
             ORDER BY id",
            &[],
        )? {
            let status: String = r.try_get(1)?;
            out.push(broken_owner(r.try_get(0)?, &status, r.try_get(2)?));
        }
        for r in c.query(
            "SELECT count(*), min(doc_key) FROM jobs
             WHERE owner_token IS NOT NULL GROUP BY owner_token HAVING count(*) > 1",
            &[],
        )? {
            out.push(shared_token(r.try_get(1)?, r.try_get(0)?));
        }
        Ok(out)
    }
}
