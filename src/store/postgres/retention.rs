//! History retention on PostgreSQL: the statements of `store/retention.rs`
//! in PostgreSQL's SQL (the rules and their reasons are there).
//!
//! No row lock is needed: a writer appends a document's next line as
//! `max(seq) + 1` under the document's row lock, and the sweep never removes
//! a document's last line, so the number a writer reads stays where it is.
//! A line committed while the sweep runs is newer than the cutoff.

use super::tx::Sql;
use super::PgStore;
use crate::clock::Millis;
use crate::error::Result;
use crate::store::retention::WindowCounts;

const COUNT: &str = "SELECT count(*) FILTER (WHERE h.seq < m.last),
            count(*) FILTER (WHERE h.seq < m.last AND h.event LIKE '%!_rejected' ESCAPE '!'),
            count(*) FILTER (WHERE h.seq = m.last)
       FROM history h
       JOIN (SELECT job_id, max(seq) AS last FROM history
              WHERE job_id >= $1 AND job_id < $2 GROUP BY job_id) m ON m.job_id = h.job_id
      WHERE h.job_id >= $1 AND h.job_id < $2 AND h.at < $3";

const DELETE: &str = "DELETE FROM history h
      WHERE h.job_id >= $1 AND h.job_id < $2 AND h.at < $3
        AND h.seq < (SELECT max(l.seq) FROM history l WHERE l.job_id = h.job_id)";

/// The highest document id with history (0 for none).
pub(crate) fn last_history_job(pg: &PgStore) -> Result<i64> {
    pg.read(|c| {
        let row = c.query_one("SELECT coalesce(max(job_id), 0)::bigint FROM history", &[])?;
        Ok(row.get(0))
    })
}

/// Count, and with `delete` remove, the removable lines of documents
/// `lo <= job_id < hi` in one transaction.
pub(crate) fn prune_window(
    pg: &PgStore,
    lo: i64,
    hi: i64,
    cutoff: Millis,
    delete: bool,
) -> Result<WindowCounts> {
    let run = |c: &mut ::postgres::Transaction<'_>| -> Sql<WindowCounts> {
        let row = c.query_one(COUNT, &[&lo, &hi, &cutoff])?;
        let counts: WindowCounts = (row.get(0), row.get(1), row.get(2));
        if delete && counts.0 > 0 {
            c.execute(DELETE, &[&lo, &hi, &cutoff])?;
        }
        Ok(counts)
    };
    pg.write_tx(|tx, _| run(&mut *tx))
}
