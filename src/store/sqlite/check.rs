//! The read-only checks `leasehold doctor` runs on a SQLite store (through
//! the store's read connections), beside SQLite's own `integrity_check`:
//! lease invariants read without indexes (so that a damaged index cannot
//! hide a duplicate), the accepted results page by page, and the search
//! index's pages.

use rusqlite::{Connection, OptionalExtension};

use crate::store::check::{
    broken_owner, indexed_row_from, shared_key, shared_token, IndexedRow, IntegrityProblem, INDEXED_COLUMNS,
};

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

/// [`integrity`]'s problems, one a line, each with the table it is about
/// ([`IntegrityProblem`]). When the whole file's check finds anything, each
/// table is checked alone (`PRAGMA integrity_check(TABLE)`: its b-tree and
/// its indexes; for the FTS5 table, FTS5's own check), which tells whose
/// pages are damaged whatever SQLite's wording. A check that stops at a page
/// it cannot read counts that error as its one line. Lines of the whole
/// check no table's check gives ("Page N: never used", the free list) are
/// the index's when every damaged table is the index's (pages of its
/// damaged b-trees), else nobody's.
pub(crate) fn integrity_by_table(c: &Connection, full: bool) -> rusqlite::Result<Vec<IntegrityProblem>> {
    let pragma = if full { "integrity_check" } else { "quick_check" };
    let whole = checked_lines(c, &format!("PRAGMA {pragma}"))?;
    if whole.is_empty() {
        return Ok(Vec::new());
    }
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for table in tables {
        let quoted = table.replace('"', "\"\"");
        for line in checked_lines(c, &format!("PRAGMA {pragma}(\"{quoted}\")"))? {
            out.push(IntegrityProblem {
                line,
                table: Some(table.clone()),
            });
        }
    }
    let explained = !out.is_empty();
    let index_only = explained && out.iter().all(IntegrityProblem::is_search_index);
    for line in whole {
        if out.iter().any(|p| p.line == line) || (explained && line.starts_with(CHECK_STOPPED)) {
            continue;
        }
        let table = index_only.then(|| "search_text".to_owned());
        out.push(IntegrityProblem { line, table });
    }
    Ok(out)
}

/// How [`checked_lines`] begins the line of a check stopped by an error.
const CHECK_STOPPED: &str = "the check stopped: ";

/// The problem lines a check pragma (`sql`) gives, one a line (SQLite puts
/// several in one row, after a "*** in database" header); a check that
/// stops at a corrupt page, its error as the last line.
fn checked_lines(c: &Connection, sql: &str) -> rusqlite::Result<Vec<String>> {
    let corrupt = |e: &rusqlite::Error| e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseCorrupt);
    let mut stmt = match c.prepare(sql) {
        Ok(stmt) => stmt,
        Err(e) if corrupt(&e) => return Ok(vec![format!("{CHECK_STOPPED}{e}")]),
        Err(e) => return Err(e),
    };
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    loop {
        match rows.next() {
            Ok(Some(row)) => {
                let text: String = row.get(0)?;
                out.extend(
                    text.lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty() && *l != "ok" && !l.starts_with("*** in database"))
                        .map(str::to_owned),
                );
            }
            Ok(None) => return Ok(out),
            Err(e) if corrupt(&e) => {
                out.push(format!("{CHECK_STOPPED}{e}"));
                return Ok(out);
            }
            Err(e) => return Err(e),
        }
    }
}

/// What is wrong with the search index's own structures (FTS5's inverted
/// index against its stored texts, e.g. "malformed inverted index"), empty
/// when it is sound. SQLite's integrity check of that one table, which asks
/// FTS5: a read, where FTS5's `'integrity-check'` command is an INSERT that
/// takes the write lock; then the b-trees of its shadow tables. An index too
/// damaged to be read answers with SQLite's error as a problem.
pub(crate) fn search_index_damage(c: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut out = Vec::new();
    for table in INDEX_TABLES {
        out.extend(checked_lines(c, &format!("PRAGMA integrity_check({table})"))?);
    }
    Ok(out)
}

/// The search index's tables: FTS5's own check of `search_text`, then the
/// b-trees of its shadow tables and of `search_parts` (a damaged page there
/// is not always met by FTS5's check: the content table's, say).
const INDEX_TABLES: [&str; 7] = [
    "search_text",
    "search_text_data",
    "search_text_idx",
    "search_text_content",
    "search_text_docsize",
    "search_text_config",
    "search_parts",
];

/// A cheap sign that the search index's pages are damaged, for a search
/// that found nothing (is "no match" the truth?): the first leaf of each of
/// FTS5's segments, one lookup each (a handful; at most a few thousand),
/// read for a header FTS5 could have written. A leaf starts with two
/// big-endian 16-bit offsets: its first rowid's (0 for none, else within
/// the leaf) and its footer's (the leaf's size: at least the 4 header bytes,
/// at most the block's). Zeroed or overwritten blocks fail it; FTS5 itself
/// reads a zeroed leaf as one without terms, and answers no match. Not
/// FTS5's full check (that reads every page and tokenizes every text):
/// damage to later leaves only that check finds. None when the leaves
/// read look sound.
pub(crate) fn search_leaves_damage(c: &Connection) -> rusqlite::Result<Option<String>> {
    // FTS5's block ids: segment << 37 | doclist-index flag << 36 | height << 31 | page.
    const SEGMENT: i64 = 1 << 37;
    const LEAVES: i64 = 1 << 31;
    let mut stmt = c.prepare_cached(
        "SELECT id, block FROM search_text_data WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT 1",
    )?;
    let mut segment: i64 = 1;
    // Segment ids are below 2^16 (higher ones are tombstones, which this table has none of).
    while segment < 1 << 16 {
        let base = segment * SEGMENT;
        let Some((id, block)) = stmt
            .query_row([base, (1 << 16) * SEGMENT], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .optional()?
        else {
            return Ok(None);
        };
        segment = id / SEGMENT;
        if id % SEGMENT < LEAVES {
            if let Some(why) = bad_leaf(&block) {
                return Ok(Some(format!(
                    "leaf {} of segment {segment} in search_text_data: {why}",
                    id % SEGMENT
                )));
            }
        }
        segment += 1;
    }
    Ok(None)
}

/// What is wrong with the header of FTS5 leaf `block`, if anything.
fn bad_leaf(block: &[u8]) -> Option<String> {
    let [a, b, c, d, ..] = *block else {
        return Some(format!("{} bytes, shorter than a leaf's header", block.len()));
    };
    let first_rowid = usize::from(u16::from_be_bytes([a, b]));
    let size = usize::from(u16::from_be_bytes([c, d]));
    if size < 4 || size > block.len() {
        return Some(format!(
            "its header gives a size of {size} bytes, the block holds {}",
            block.len()
        ));
    }
    if first_rowid != 0 && !(4..size).contains(&first_rowid) {
        return Some(format!(
            "its first rowid is at byte {first_rowid}, outside its {size} bytes"
        ));
    }
    None
}

/// Up to `limit` indexed rows with ids after `after`, in id order.
pub(crate) fn indexed_page(conn: &Connection, after: i64, limit: i64) -> rusqlite::Result<Vec<IndexedRow>> {
    let sql = format!(
        "SELECT {INDEXED_COLUMNS} FROM jobs WHERE status = 'indexed' AND id > ?1 ORDER BY id LIMIT ?2"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([after, limit], |r| indexed_row_from(r))?;
    rows.collect()
}

/// (subject, message) for every row that breaks "at most one live owner".
pub(crate) fn lease_violations(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut stmt =
        conn.prepare("SELECT doc_key, count(*) FROM jobs NOT INDEXED GROUP BY doc_key HAVING count(*) > 1")?;
    for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
        let (key, n) = row?;
        out.push(shared_key(key, n));
    }
    let mut stmt = conn.prepare(
        "SELECT doc_key, status, owner_token IS NULL OR owner_token = ''
         FROM jobs NOT INDEXED
         WHERE (status = 'extracting' AND (owner_token IS NULL OR owner_token = '' OR lease_expires_at IS NULL))
            OR (status <> 'extracting' AND owner_token IS NOT NULL)",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, bool>(2)?,
        ))
    })?;
    for row in rows {
        let (key, status, no_token) = row?;
        out.push(broken_owner(key, &status, no_token));
    }
    let mut stmt = conn.prepare(
        "SELECT count(*), min(doc_key) FROM jobs NOT INDEXED
         WHERE owner_token IS NOT NULL GROUP BY owner_token HAVING count(*) > 1",
    )?;
    for row in stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))? {
        let (n, key) = row?;
        out.push(shared_token(key, n));
    }
    Ok(out)
}
