//! The read-only checks `leasehold doctor` runs on a SQLite store (through the
//! store's read connections), beside SQLite's own `integrity_check`: lease
//! invariants read without indexes (so that a damaged index cannot hide a
//! duplicate), and the accepted results page by page. The PostgreSQL engine
//! has its own (`postgres/read.rs`).

use rusqlite::Connection;

/// Run SQLite's `quick_check` (or the full `integrity_check`); the problems found.
pub(crate) fn integrity(c: &Connection, full: bool) -> rusqlite::Result<Vec<String>> {
    let sql = if full {
        "PRAGMA integrity_check"
    } else {
        "PRAGMA quick_check"
    };
    let mut stmt = c.prepare(sql)?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let lines = rows.collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(lines.into_iter().filter(|l| l != "ok").collect())
}

/// What is wrong with the search index's own structures (FTS5's inverted
/// index against its stored texts, e.g. "malformed inverted index"), empty
/// when it is sound. SQLite's integrity check of that one table, which asks
/// FTS5: a read, where FTS5's `'integrity-check'` command is an INSERT that
/// takes the write lock. An index too damaged to be read at all answers with
/// SQLite's error as the one problem.
pub(crate) fn search_index_damage(c: &Connection) -> rusqlite::Result<Vec<String>> {
    let checked = c
        .prepare("PRAGMA integrity_check(search_text)")
        .and_then(|mut stmt| {
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<rusqlite::Result<Vec<String>>>()
        });
    match checked {
        Ok(lines) => Ok(lines.into_iter().filter(|l| l != "ok").collect()),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            Ok(vec![e.to_string()])
        }
        Err(e) => Err(e),
    }
}

/// One indexed row, as the results check needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedRow {
    /// The document's id.
    pub id: i64,
    /// The document's key.
    pub key: String,
    /// The accepted result, relative to the mirror root.
    pub result_path: Option<String>,
    /// Its SHA-256.
    pub checksum: Option<String>,
    /// Its size in bytes, when the completion recorded it.
    pub result_bytes: Option<u64>,
}

pub(crate) fn indexed_page(conn: &Connection, after: i64, limit: i64) -> rusqlite::Result<Vec<IndexedRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, doc_key, result_path, checksum, result_bytes FROM jobs
         WHERE status = 'indexed' AND id > ?1 ORDER BY id LIMIT ?2",
    )?;
    let rows = stmt.query_map([after, limit], |r| {
        Ok(IndexedRow {
            id: r.get(0)?,
            key: r.get(1)?,
            result_path: r.get(2)?,
            checksum: r.get(3)?,
            result_bytes: r.get::<_, Option<i64>>(4)?.and_then(|b| u64::try_from(b).ok()),
        })
    })?;
    rows.collect()
}

/// (subject, message) for every row that breaks "at most one live owner".
pub(crate) fn lease_violations(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut stmt =
        conn.prepare("SELECT doc_key, count(*) FROM jobs NOT INDEXED GROUP BY doc_key HAVING count(*) > 1")?;
    for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
        let (key, n) = row?;
        out.push((key.clone(), format!("{key:?}: {n} rows share this document key")));
    }
    let mut stmt = conn.prepare(
        "SELECT doc_key, status, owner_token IS NULL OR owner_token = '', lease_expires_at IS NULL
         FROM jobs NOT INDEXED
         WHERE (status = 'extracting' AND (owner_token IS NULL OR owner_token = '' OR lease_expires_at IS NULL))
            OR (status <> 'extracting' AND owner_token IS NOT NULL)",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, bool>(2)?,
            r.get::<_, bool>(3)?,
        ))
    })?;
    for row in rows {
        let (key, status, no_token, no_lease) = row?;
        let what = match (status.as_str(), no_token, no_lease) {
            ("extracting", true, _) => "is extracting without an owner token".to_string(),
            ("extracting", _, _) => "is extracting without a lease expiry".to_string(),
            _ => format!("is {status} but still holds an owner token"),
        };
        out.push((key.clone(), format!("{key:?}: {what}")));
    }
    let mut stmt = conn.prepare(
        "SELECT owner_token, count(*), min(doc_key) FROM jobs NOT INDEXED
         WHERE owner_token IS NOT NULL GROUP BY owner_token HAVING count(*) > 1",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    for row in rows {
        let (_token, n, key) = row?;
        // The token is a claim's capability: named by the document, never printed.
        out.push((
            key.clone(),
            format!("{key:?}: its owner token is shared by {n} documents"),
        ));
    }
    Ok(out)
}
