//! For tests of a statement's plan: `EXPLAIN QUERY PLAN` on a store whose
//! schema is made as any open makes it.

use rusqlite::Connection;

/// The plan's lines (the `detail` column) of `sql` with `params`, on a fresh
/// store (statistics gathered first when `analyze`).
pub(crate) fn query_plan(sql: &str, params: impl rusqlite::Params, analyze: bool) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    drop(super::open::open_pool(&path, &crate::store::options::StoreOptions::default()).unwrap());
    let c = Connection::open(&path).unwrap();
    if analyze {
        c.execute_batch("ANALYZE").unwrap();
    }
    let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let lines = stmt.query_map(params, |r| r.get::<_, String>(3)).unwrap();
    lines.collect::<rusqlite::Result<_>>().unwrap()
}
