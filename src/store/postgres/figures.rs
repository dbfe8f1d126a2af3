//! The history's figures for `leasehold metrics` on PostgreSQL: the same
//! statements as `store/figures.rs` (plain SQL both engines read alike), each
//! in its own snapshot, like every read here.

use super::PgStore;
use crate::error::Result;
use crate::store::figures::{HistoryFigures, HistoryLine, EVENTS, EXTRACTIONS, FAILURES, LINES, TAKEOVERS};

fn count(n: i64) -> u64 {
    n.max(0) as u64
}

pub(crate) fn history_figures(pg: &PgStore) -> Result<HistoryFigures> {
    pg.read(|c| {
        let mut f = HistoryFigures::default();
        for row in c.query(EVENTS, &[])? {
            f.events.insert(row.get(0), count(row.get(1)));
        }
        f.takeovers = count(c.query_one(TAKEOVERS, &[])?.get(0));
        for row in c.query(FAILURES, &[])? {
            f.failures.push((row.get(0), row.get(1), count(row.get(2))));
        }
        for row in c.query(EXTRACTIONS, &[])? {
            f.extractions.push((row.get(0), row.get(1)));
        }
        Ok(f)
    })
}

pub(crate) fn history_lines(pg: &PgStore) -> Result<Vec<HistoryLine>> {
    pg.read(|c| {
        Ok(c.query(LINES, &[])?
            .iter()
            .map(|row| HistoryLine {
                job_id: row.get(0),
                at: row.get(1),
                event: row.get(2),
                detail: row.get(3),
                key: row.get(4),
                status: row.get(5),
            })
            .collect())
    })
}
