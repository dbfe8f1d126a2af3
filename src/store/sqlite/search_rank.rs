//! `leasehold_rank()`: FTS5's `bm25()` with the same scores, which skips
//! reading the length of a row that cannot reach the best `k`.
//!
//! FTS5 ranks every match before `ORDER BY ... LIMIT` keeps the best, and
//! `bm25()` reads each matching row's length from the `_docsize` table: for a
//! word in nearly every document, one B-tree seek per match was 38 % of a
//! search's time. A row's score only grows with its term frequencies and
//! shrinks with its length, and a row is at least as long as its last
//! matching token's offset plus one in each column. So the score with that
//! lower bound for the length is an upper bound of the row's score: when it
//! is below the `k`-th best score seen so far in the query, the row cannot be
//! among the best `k` and its length is not read. Such a row is given a rank
//! after every real one ([`PRUNED`]); every other row gets what `bm25()`
//! gives (the same formula, in the same order of operations, from the same
//! FTS5 figures: to the last bit where the C compiler does not fuse a
//! multiply and an add, as by default on x86-64, within rounding where it
//! does), so the best `k` and their order are `bm25()`'s. The ruling out
//! compares this function's own scores only, so it holds either way.
//!
//! Arguments: the table, then `k` (negative: rank every row exactly), then the
//! column weights as `bm25()` takes them. Registered on every connection
//! through the `fts5_api` (documented interfaces only).

use std::cell::Cell;
use std::collections::BinaryHeap;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

use rusqlite::ffi;

/// The function's name in SQL. Its ruling out is right only where each row
/// is ranked once by it and the statement keeps the `k` lowest ranks first:
/// `ORDER BY` it (then the rowid) `LIMIT k`, no `OFFSET`, no key before it,
/// no second call in the statement (FTS5 keeps one state per cursor and
/// function). `search_index::ranked` is its one use.
pub(super) const NAME: &str = "leasehold_rank";

/// The rank of a row that cannot be among the best `k`: after every real
/// rank (`bm25()`'s are never above zero).
pub(super) const PRUNED: f64 = 1.0;

/// `bm25()`'s constants (FTS5's `fts5Bm25Function`).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Registers [`NAME`] on `conn`. A SQLite without FTS5 has no `fts5_api`:
/// nothing is registered (such a store is refused when opened).
pub(super) fn register(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    // SAFETY: the handle is the live connection's, used on this thread only
    // for the calls below, which is what `Connection::handle` allows.
    let api = unsafe { fts5_api(conn.handle()) }.map_err(|rc| {
        rusqlite::Error::SqliteFailure(ffi::Error::new(rc), Some("asking for FTS5's API".into()))
    })?;
    let Some(api) = api else {
        return Ok(());
    };
    let name = std::ffi::CString::new(NAME).expect("no NUL in the name");
    // SAFETY: `api` came from this connection's FTS5 and lives as long as it;
    // FTS5 copies the name.
    let rc = unsafe {
        match (*api).xCreateFunction {
            Some(create) => create(api, name.as_ptr(), null_mut(), Some(rank), None),
            None => ffi::SQLITE_ERROR,
        }
    };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(rc),
            Some("registering leasehold_rank".into()),
        ))
    }
}

/// The connection's `fts5_api` (`SELECT fts5(?1)` with a pointer bound, as
/// FTS5's documentation says), `None` without FTS5 (no function `fts5`), or
/// the code of another failure.
///
/// # Safety
/// `db` must be a live connection used by no other thread meanwhile.
unsafe fn fts5_api(db: *mut ffi::sqlite3) -> Result<Option<*mut ffi::fts5_api>, c_int> {
    let mut stmt = null_mut();
    let sql = c"SELECT fts5(?1)";
    let rc = ffi::sqlite3_prepare_v2(db, sql.as_ptr(), -1, &mut stmt, null_mut());
    if rc != ffi::SQLITE_OK {
        let message = std::ffi::CStr::from_ptr(ffi::sqlite3_errmsg(db)).to_string_lossy();
        return if message.starts_with("no such function") {
            Ok(None)
        } else {
            Err(rc)
        };
    }
    let mut api: *mut ffi::fts5_api = null_mut();
    let bound = ffi::sqlite3_bind_pointer(
        stmt,
        1,
        (&mut api as *mut *mut ffi::fts5_api).cast::<c_void>(),
        c"fts5_api_ptr".as_ptr(),
        None,
    );
    if bound == ffi::SQLITE_OK {
        ffi::sqlite3_step(stmt);
    }
    ffi::sqlite3_finalize(stmt);
    Ok((!api.is_null()).then_some(api))
}

thread_local! {
    /// While [`counting_below`] runs a ranking on this thread: the rowid
    /// below which rows are counted, and how many were ranked so far. SQLite
    /// calls the function on the thread that steps the statement.
    static COUNTING: Cell<Option<(i64, u64)>> = const { Cell::new(None) };
}

/// Runs `ranking`, a statement that ranks with [`NAME`], and says how many of
/// the rows it ranked have a rowid below `end`: every row its whole condition
/// keeps is ranked once, so that is what a `count(*)` of the same condition
/// with `rowid < end` would say, without a second pass over the matches (a
/// word in nearly every document has as many as the index has rows).
pub(super) fn counting_below<T>(end: i64, ranking: impl FnOnce() -> T) -> (T, u64) {
    let before = COUNTING.replace(Some((end, 0)));
    let out = ranking();
    let counted = COUNTING.replace(before).map_or(0, |(_, n)| n);
    (out, counted)
}

/// One more ranked row, when [`counting_below`] counts and its rowid is below
/// the bound.
///
/// # Safety
/// `api` and `fts` as FTS5 passes them to an auxiliary function.
unsafe fn count_row_ranked(api: &ffi::Fts5ExtensionApi, fts: *mut ffi::Fts5Context) {
    let Some((end, n)) = COUNTING.get() else {
        return;
    };
    // SAFETY: `fts` is the context FTS5 passed to the function for this row.
    let rowid = api.xRowid.map(|rowid| unsafe { rowid(fts) });
    if rowid.is_some_and(|r| r < end) {
        COUNTING.set(Some((end, n + 1)));
    }
}

/// What one query's calls share: `bm25()`'s figures, read once, and the best
/// scores seen so far.
struct Query {
    /// Per phrase: its inverse document frequency, as `bm25()` computes it.
    idf: Vec<f64>,
    /// Tokens per row on average.
    avgdl: f64,
    /// How many best rows are wanted; `None`: every row is ranked exactly.
    k: Option<usize>,
    /// The best `k` scores seen (the smallest on top).
    best: BinaryHeap<std::cmp::Reverse<Score>>,
    /// Per column, its weight (1.0 where the call gives none): constant for
    /// the statement, so read once rather than at every match.
    weights: Vec<f64>,
    /// Per phrase, the row's weighted frequency (reused from row to row).
    freq: Vec<f64>,
    /// Per column, the row's last matching offset (reused; -1: none).
    last: Vec<c_int>,
}

/// A score, ordered by `f64::total_cmp` (never NaN here).
#[derive(Clone, Copy, PartialEq)]
struct Score(f64);

impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Query {
    /// `bm25()`'s score of the row whose weighted frequencies `freq` holds,
    /// `tokens` long (summed as FTS5 sums them, left to right).
    fn score(&self, tokens: f64) -> f64 {
        let mut score = 0.0;
        for (idf, f) in self.idf.iter().zip(&self.freq) {
            score += idf * ((f * (K1 + 1.0)) / (f + K1 * (1.0 - B + B * tokens / self.avgdl)));
        }
        score
    }

    /// Whether a row scoring at most `bound` cannot be among the best `k`.
    fn out_of_reach(&self, bound: f64) -> bool {
        match (self.k, self.best.peek()) {
            (Some(k), Some(std::cmp::Reverse(kth))) => self.best.len() >= k && bound < kth.0,
            _ => false,
        }
    }

    /// Notes an exact score among the best seen.
    fn saw(&mut self, score: f64) {
        let Some(k) = self.k else { return };
        if self.best.len() < k {
            self.best.push(std::cmp::Reverse(Score(score)));
        } else if self.best.peek().is_some_and(|kth| score > kth.0 .0) {
            self.best.pop();
            self.best.push(std::cmp::Reverse(Score(score)));
        }
    }
}

/// The auxiliary function (see the module docs). Nothing in it panics: a
/// panic may not cross into SQLite.
///
/// # Safety
/// Called by FTS5 only, with its extension API, the query's context, the SQL
/// function's result context and its `n_val` values.
unsafe extern "C" fn rank(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    n_val: c_int,
    vals: *mut *mut ffi::sqlite3_value,
) {
    let args = if n_val > 0 && !vals.is_null() {
        std::slice::from_raw_parts(vals, n_val as usize)
    } else {
        &[]
    };
    match rank_row(&*api, fts, args) {
        Ok(r) => ffi::sqlite3_result_double(ctx, r),
        Err(rc) => ffi::sqlite3_result_error_code(ctx, rc),
    }
}

/// Checks an FTS5 return code.
fn ok(rc: c_int) -> Result<(), c_int> {
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rc)
    }
}

/// The rank of the current row, or an SQLite error code.
///
/// # Safety
/// `api` and `fts` as FTS5 passes them to an auxiliary function; `args` its
/// values.
unsafe fn rank_row(
    api: &ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    args: &[*mut ffi::sqlite3_value],
) -> Result<f64, c_int> {
    let missing = ffi::SQLITE_MISUSE;
    // The query's state, made on its first row and handed to FTS5, which
    // frees it (`drop_query`) when the query ends, or at once when it
    // cannot keep it. Rows of one query are ranked one at a time.
    let query = match (api.xGetAuxdata.ok_or(missing)?)(fts, 0).cast::<Query>() {
        q if !q.is_null() => &mut *q,
        _ => {
            let made = Box::into_raw(Box::new(start_query(api, fts, args)?));
            ok((api.xSetAuxdata.ok_or(missing)?)(
                fts,
                made.cast(),
                Some(drop_query),
            ))?;
            &mut *made
        }
    };
    count_row_ranked(api, fts);
    query.freq.iter_mut().for_each(|f| *f = 0.0);
    query.last.iter_mut().for_each(|o| *o = -1);
    // Each phrase's matches in this row, column by column and in order: the
    // instances `bm25()` reads through `xInst`, whose array FTS5 would build
    // for every row first, summed per phrase in the same order.
    let (first, next) = (api.xPhraseFirst.ok_or(missing)?, api.xPhraseNext.ok_or(missing)?);
    for phrase in 0..query.freq.len() {
        let mut matches = ffi::Fts5PhraseIter {
            a: std::ptr::null(),
            b: std::ptr::null(),
        };
        let (mut col, mut off) = (0, 0);
        ok(first(fts, phrase as c_int, &mut matches, &mut col, &mut off))?;
        while col >= 0 {
            let c = col as usize;
            query.freq[phrase] += query.weights.get(c).copied().unwrap_or(1.0);
            if let Some(last) = query.last.get_mut(c) {
                *last = (*last).max(off);
            }
            next(fts, &mut matches, &mut col, &mut off);
        }
    }
    // At least as long as its last match in each column.
    let shortest: i64 = query
        .last
        .iter()
        .filter(|o| **o >= 0)
        .map(|o| i64::from(*o) + 1)
        .sum();
    if query.out_of_reach(query.score(shortest as f64)) {
        return Ok(PRUNED);
    }
    let mut tokens = 0;
    ok((api.xColumnSize.ok_or(missing)?)(fts, -1, &mut tokens))?;
    let score = query.score(f64::from(tokens));
    query.saw(score);
    Ok(-score)
}

/// The query's figures, as `bm25()` reads them (`fts5Bm25GetData`), and `k`.
unsafe fn start_query(
    api: &ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    args: &[*mut ffi::sqlite3_value],
) -> Result<Query, c_int> {
    let missing = ffi::SQLITE_MISUSE;
    let (mut rows, mut tokens) = (0i64, 0i64);
    ok((api.xRowCount.ok_or(missing)?)(fts, &mut rows))?;
    ok((api.xColumnTotalSize.ok_or(missing)?)(fts, -1, &mut tokens))?;
    let phrases = (api.xPhraseCount.ok_or(missing)?)(fts).max(0) as usize;
    let mut idf = Vec::with_capacity(phrases);
    for phrase in 0..phrases {
        let mut hits = 0i64;
        let count = (&mut hits as *mut i64).cast::<c_void>();
        ok((api.xQueryPhrase.ok_or(missing)?)(
            fts,
            phrase as c_int,
            count,
            Some(count_row),
        ))?;
        let i = ((rows - hits) as f64 + 0.5) / (hits as f64 + 0.5);
        let i = i.ln();
        idf.push(if i <= 0.0 { 1e-6 } else { i });
    }
    let k = args.first().map(|v| ffi::sqlite3_value_int64(*v));
    let columns = (api.xColumnCount.ok_or(missing)?)(fts).max(0) as usize;
    // Column `c`'s weight follows `k` among the arguments.
    let weights = (0..columns)
        .map(|c| args.get(c + 1).map_or(1.0, |v| ffi::sqlite3_value_double(*v)))
        .collect();
    Ok(Query {
        idf,
        avgdl: tokens as f64 / rows as f64,
        k: k.and_then(|k| usize::try_from(k).ok()).filter(|k| *k > 0),
        best: BinaryHeap::new(),
        weights,
        freq: vec![0.0; phrases],
        last: vec![-1; columns],
    })
}

/// `xQueryPhrase`'s callback: one more row holds the phrase.
unsafe extern "C" fn count_row(
    _: *const ffi::Fts5ExtensionApi,
    _: *mut ffi::Fts5Context,
    hits: *mut c_void,
) -> c_int {
    *hits.cast::<i64>() += 1;
    ffi::SQLITE_OK
}

/// Frees a query's [`Query`] when FTS5 is done with it.
unsafe extern "C" fn drop_query(query: *mut c_void) {
    drop(Box::from_raw(query.cast::<Query>()));
}

#[cfg(test)]
mod tests {
    use super::{counting_below, register, NAME, PRUNED};
    use crate::store::search::Tokenizer;
    use rusqlite::Connection;

    /// Documents of a skewed vocabulary (a word in nearly every one, others
    /// rarer), of varied lengths, some with a title or an author, in the
    /// store's own FTS5 table on a real file.
    fn index() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let c = Connection::open(dir.path().join("rank.db")).unwrap();
        super::super::search_table::create_table(&c, Tokenizer::Unicode61).unwrap();
        register(&c).unwrap();
        let words = [
            "hi", "ca", "la", "fosvo", "ketre", "mu", "zorb", "pal", "quen", "rin",
        ];
        // A fixed linear congruential sequence: the same documents every run.
        let mut x: u64 = 29;
        let mut next = |n: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        let mut insert = c
            .prepare("INSERT INTO search_text (rowid, body, title, author, path, checksum) VALUES (?1, ?2, ?3, ?4, '', '')")
            .unwrap();
        for id in 1..=1500i64 {
            let len = 5 + next(200);
            let body: Vec<&str> = (0..len)
                .map(|_| {
                    // Word i with a weight falling as 1 / (i + 1).
                    let mut r = next(2929);
                    let mut i = 0;
                    while i + 1 < words.len() && r >= 1000 / (i as u64 + 1) {
                        r -= 1000 / (i as u64 + 1);
                        i += 1;
                    }
                    words[i]
                })
                .collect();
            let title = if next(5) == 0 { words[next(4) as usize] } else { "" };
            let author = if next(7) == 0 {
                words[next(10) as usize]
            } else {
                ""
            };
            insert
                .execute(rusqlite::params![id, body.join(" "), title, author])
                .unwrap();
        }
        // Twenty-five identical short documents that rank first for "hi":
        // equal scores, ordered by rowid.
        for id in 1501..=1525i64 {
            insert
                .execute(rusqlite::params![id, "hi hi hi ca hi", "", ""])
                .unwrap();
        }
        drop(insert);
        (dir, c)
    }

    fn best(c: &Connection, rank: &str, query: &str, filter: &str, k: i64) -> Vec<(i64, f64)> {
        c.prepare(&format!(
            "SELECT rowid, {rank} AS r FROM search_text WHERE search_text MATCH ?1{filter}
             ORDER BY r, rowid LIMIT ?2"
        ))
        .unwrap()
        .query_map(rusqlite::params![query, k], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
    }

    /// The same rows in the same order, and the same scores (to the last bit
    /// on x86-64; within rounding where C fuses multiply-adds).
    fn assert_same(ours: &[(i64, f64)], theirs: &[(i64, f64)], what: &str) {
        let rows = |v: &[(i64, f64)]| v.iter().map(|(id, _)| *id).collect::<Vec<_>>();
        assert_eq!(rows(ours), rows(theirs), "{what}");
        for ((_, a), (_, b)) in ours.iter().zip(theirs) {
            assert!((a - b).abs() <= 1e-12 * b.abs(), "{what}: {a} against {b}");
        }
    }

    /// The best `k` rows and their scores are `bm25()`'s, for words common
    /// and rare, several words, a phrase, a prefix, a column, NEAR groups
    /// (whose matches FTS5 filters), a word given twice, any `k`, and
    /// none; also when other conditions reject rows (bm25's best among them:
    /// the function must rank only the rows the whole condition keeps), and
    /// among rows of equal scores; every row the condition keeps is counted
    /// ([`counting_below`]). And the common word's search did skip rows
    /// (so the comparison is of the pruning, not of two full rankings).
    #[test]
    fn the_best_rows_and_their_scores_are_bm25s_while_rows_out_of_reach_are_skipped() {
        let (_dir, c) = index();
        let bm25 = "bm25(search_text, 1.0, 10.0, 4.0)";
        let queries = [
            "hi",
            "ca",
            "rin",
            "hi ca",
            "\"hi ca\"",
            "fo*",
            "title:hi",
            "hi OR zorb",
            "quen NOT hi",
            "NEAR(hi ca, 2)",
            "NEAR(\"hi ca\" zorb, 5) OR rin",
            "{title author}: hi",
            "hi hi ca",
        ];
        for query in queries {
            let top: Vec<String> = best(&c, bm25, query, "", 30)
                .iter()
                .map(|(id, _)| id.to_string())
                .collect();
            // bm25's own best 30 rejected, and a third of the rest.
            let rejecting = format!(" AND rowid NOT IN ({}) AND rowid % 3 <> 0", top.join(", "));
            for filter in ["", rejecting.as_str()] {
                for k in [1, 7, 20, -1] {
                    let theirs = best(&c, bm25, query, filter, k);
                    let ours = best(
                        &c,
                        &format!("{NAME}(search_text, {k}, 1.0, 10.0, 4.0)"),
                        query,
                        filter,
                        k,
                    );
                    assert!(!filter.is_empty() || !theirs.is_empty(), "{query}: matches");
                    assert_same(&ours, &theirs, &format!("{query}{filter}, k {k}"));
                    // Every row the condition keeps was ranked once: the
                    // count below a bound is a `count(*)`'s.
                    let (_, counted) = counting_below(1000, || {
                        best(
                            &c,
                            &format!("{NAME}(search_text, {k}, 1.0, 10.0, 4.0)"),
                            query,
                            filter,
                            k,
                        )
                    });
                    let counted_by_sql: i64 = c
                        .query_row(
                            &format!("SELECT count(*) FROM search_text WHERE search_text MATCH ?1{filter} AND rowid < 1000"),
                            [query],
                            |r| r.get(0),
                        )
                        .unwrap();
                    assert_eq!(counted as i64, counted_by_sql, "{query}{filter}, k {k}: counted");
                }
            }
        }
        let pruned: i64 = c
            .query_row(
                &format!("SELECT count(*) FROM (SELECT {NAME}(search_text, 20, 1.0, 10.0, 4.0) AS r FROM search_text WHERE search_text MATCH 'hi') WHERE r = ?1"),
                [PRUNED],
                |r| r.get(0),
            )
            .unwrap();
        let all: i64 = c
            .query_row(
                "SELECT count(*) FROM search_text WHERE search_text MATCH 'hi'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(
            pruned * 2 > all,
            "most of the {all} rows of the common word skipped, not {pruned}"
        );
    }
}
