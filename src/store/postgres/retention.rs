//! History retention's statements in PostgreSQL's SQL ([`RetentionRows`]);
//! the rule, its windows and their reasons are in `store/retention.rs`.
//!
//! No row lock is needed: a writer appends a document's next line as
//! `max(seq) + 1` under the document's row lock, and the sweep never removes
//! a document's last line, so the number a writer reads stays where it is.
//! A line committed while the sweep runs is newer than the cutoff.

use ::postgres::Client;

use super::conn::Sql;
use super::conn::Tx;
use crate::clock::Millis;
use crate::store::retention::{RetentionRows, WindowCounts};

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

impl RetentionRows for Tx<'_> {
    fn count_window(&mut self, lo: i64, hi: i64, cutoff: Millis) -> Sql<WindowCounts> {
        let row = self.query_one(COUNT, &[&lo, &hi, &cutoff])?;
        Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
    }

    fn delete_window(&mut self, lo: i64, hi: i64, cutoff: Millis) -> Sql<()> {
        self.execute(DELETE, &[&lo, &hi, &cutoff])?;
        Ok(())
    }
}

/// The highest document id with history (0 for none).
pub(crate) fn last_history_job(c: &mut Client) -> Sql<i64> {
    let row = c.query_one("SELECT coalesce(max(job_id), 0)::bigint FROM history", &[])?;
    Ok(row.try_get(0)?)
}
