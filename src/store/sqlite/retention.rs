//! History retention's statements in SQLite's SQL ([`RetentionRows`]); the
//! rule and its windows are in `store/retention.rs`.

use rusqlite::{params, Connection};

use super::rows::Rows;
use crate::clock::Millis;
use crate::store::retention::{RetentionRows, WindowCounts};

/// The three counts over documents `lo <= job_id < hi`. `?3` is the cutoff.
const COUNT: &str = "SELECT count(*) FILTER (WHERE h.seq < m.last),
            count(*) FILTER (WHERE h.seq < m.last AND h.event LIKE '%!_rejected' ESCAPE '!'),
            count(*) FILTER (WHERE h.seq = m.last)
       FROM history h
       JOIN (SELECT job_id, max(seq) AS last FROM history
              WHERE job_id >= ?1 AND job_id < ?2 GROUP BY job_id) m ON m.job_id = h.job_id
      WHERE h.job_id >= ?1 AND h.job_id < ?2 AND h.at < ?3";

const DELETE: &str = "DELETE FROM history
      WHERE job_id >= ?1 AND job_id < ?2 AND at < ?3
        AND seq < (SELECT max(l.seq) FROM history l WHERE l.job_id = history.job_id)";

impl RetentionRows for Rows<'_> {
    fn count_window(&mut self, lo: i64, hi: i64, cutoff: Millis) -> rusqlite::Result<WindowCounts> {
        self.0.query_row(COUNT, params![lo, hi, cutoff], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
    }

    fn delete_window(&mut self, lo: i64, hi: i64, cutoff: Millis) -> rusqlite::Result<()> {
        self.0.execute(DELETE, params![lo, hi, cutoff])?;
        Ok(())
    }
}

/// The highest document id with history (0 for none).
pub(crate) fn last_history_job(c: &Connection) -> rusqlite::Result<i64> {
    c.query_row("SELECT coalesce(max(job_id), 0) FROM history", [], |r| r.get(0))
}
