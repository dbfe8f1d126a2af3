//! The plans of the statements that must seek an index, tested:
//! `EXPLAIN QUERY PLAN` on a store whose schema is made as any open makes
//! it, so a schema or statement change that turns a seek into a scan fails
//! here rather than on a large store.

use rusqlite::Connection;

use super::open::open_pool;
use super::read::SOURCES_AFTER;
use super::write::OLDER_WORK;
use crate::store::options::StoreOptions;
use crate::store::read::TOTALS;

/// The plan's lines (the `detail` column) of `sql` with `params`, on a fresh
/// store (statistics gathered first when `analyze`).
fn query_plan(sql: &str, params: impl rusqlite::Params, analyze: bool) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    drop(open_pool(&path, &StoreOptions::default()).unwrap());
    let c = Connection::open(&path).unwrap();
    // Planned as the store's own connections plan (QPSG among the settings).
    super::pool::configure_raw(&c, &StoreOptions::default()).unwrap();
    if analyze {
        c.execute_batch("ANALYZE").unwrap();
    }
    let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let lines = stmt.query_map(params, |r| r.get::<_, String>(3)).unwrap();
    lines.collect::<rusqlite::Result<_>>().unwrap()
}

/// A scan reads its pages with [`SOURCES_AFTER`]: each page must seek into
/// `doc_key`'s index, not step over every key before it.
#[test]
fn a_later_page_of_known_sources_seeks_the_key_index() {
    let plan = query_plan(SOURCES_AFTER, rusqlite::params!["a", 10i64], false);
    let joined = plan.join(" | ");
    assert!(
        joined.contains("SEARCH jobs USING INDEX") && joined.contains("(doc_key>?)"),
        "{joined}"
    );
    assert!(!joined.contains("TEMP B-TREE"), "{joined}");
}

/// The summary's counts read the partial index of each state that is not
/// `indexed`; the count of all reads the smallest full index. No count reads
/// the table (schema version 10).
#[test]
fn the_totals_read_partial_indexes_not_the_table() {
    let plan = query_plan(TOTALS, [], false);
    let joined = plan.join(" | ");
    for index in ["jobs_discovered", "jobs_retry_due", "jobs_dead"] {
        assert!(joined.contains(index), "{index}: {joined}");
    }
    assert!(
        plan.iter()
            .all(|l| !l.starts_with("SCAN jobs") || l.contains("INDEX")),
        "{joined}"
    );
}

/// The older-work precheck of a claim must be three seeks on the partial
/// indexes of the sets it stands for: a scan of `jobs` would step over every
/// indexed row.
#[test]
fn the_older_work_precheck_seeks_the_partial_indexes() {
    let plan = query_plan(OLDER_WORK, [1_000i64], true);
    let joined = plan.join(" | ");
    for index in ["jobs_lease_expiry", "jobs_lease_granted", "jobs_retry_due"] {
        assert!(joined.contains(index), "{index} not used: {joined}");
    }
    assert!(!plan.iter().any(|l| l.trim() == "SCAN jobs"), "scan: {joined}");
}
