//! The rank of an SQLite search: FTS5's bm25, to the last bit, at a fraction
//! of its cost on broad queries (issue 15's latency targets).
//!
//! # Why not FTS5's own `bm25()`
//! A ranked search scores every matching row before it can keep the best
//! ten. Profiled on the search bench's 100,000 documents, FTS5's `bm25()`
//! spent most of a broad query in two places:
//! - each row's length, read by a fresh lookup in the `search_text_docsize`
//!   table (reset, bind, B-tree seek, step): over half the query;
//! - the IDF of each phrase, found by running the phrase over the whole
//!   index a second time before the first row is scored.
//!
//! [`FUNCTION`] computes the same formula with the same floating-point steps,
//! but
//! - reads the lengths with one cursor that walks `search_text_docsize`
//!   forward beside the match (rows come in rowid order), seeking only
//!   across a gap;
//! - for a query of one phrase (a word, a prefix, a quoted phrase: most
//!   queries), leaves the IDF out: it is the same positive factor for every
//!   row, so the order does not change, and the number of matching rows it
//!   needs is known once every row is scored. [`Scoring`] counts them and
//!   [`Tally::rank`] multiplies the factor in afterwards;
//! - lets a search run as two queries over halves of the rowids, on two
//!   connections at once, and [`Tally::join`] their counts.
//!
//! A test compares its ranks with `bm25()`'s for words, phrases, prefixes,
//! boolean and NEAR queries (`tests/engine/search.rs`): equal bit for bit on x86-64.
//! Where the C compiler fuses a multiply and an add into one instruction
//! (aarch64 by default), SQLite's last bit may differ from ours.
//!
//! # Safety
//! This is the one place the store calls SQLite's C interface directly
//! (rusqlite has no FTS5 auxiliary functions). Everything unsafe is here: the
//! pointers FTS5 hands a call are valid for that call; the per-query state is
//! a `Box` given to FTS5 with its destructor; the connection pointer given at
//! registration outlives the function, which SQLite drops with it. No
//! function here can panic across the C boundary: every fallible step returns
//! an SQLite error code instead.

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::Arc;

use rusqlite::{ffi, Connection};

/// The SQL name of the ranking function, registered on every connection of
/// an SQLite store. Only for the one query shape [`search_sql`] gives: every
/// matching row scored, in rowid order, on the calling thread.
pub(crate) const FUNCTION: &str = "leasehold_rank";

/// bm25's parameters, as FTS5 fixes them.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A row further ahead than this is sought; nearer, the length cursor steps.
const STEP_RATHER_THAN_SEEK: i64 = 24;

/// The ranking query: the best `?2` rows for the MATCH expression `?1`
/// among rowids `?3` to `?4`, ties by rowid; the raw scores of
/// [`Tally::rank`].
pub(crate) fn search_sql() -> String {
    format!(
        "SELECT rowid, {FUNCTION}(search_text) AS r FROM search_text
         WHERE search_text MATCH ?1 AND rowid BETWEEN ?3 AND ?4 ORDER BY r, rowid LIMIT ?2"
    )
}

/// Make [`FUNCTION`] known to `conn`'s FTS5.
pub(crate) fn register(conn: &Connection) -> rusqlite::Result<()> {
    // SAFETY: `handle` is this open connection's; FTS5 hands out its API
    // through a pointer bound to `SELECT fts5(?1)`, which fills `api`.
    unsafe {
        let db = conn.handle();
        let mut api: *mut ffi::fts5_api = ptr::null_mut();
        let mut stmt = ptr::null_mut();
        check(
            db,
            ffi::sqlite3_prepare_v2(db, c"SELECT fts5(?1)".as_ptr(), -1, &mut stmt, ptr::null_mut()),
        )?;
        let bound = ffi::sqlite3_bind_pointer(
            stmt,
            1,
            (&mut api as *mut *mut ffi::fts5_api).cast(),
            c"fts5_api_ptr".as_ptr(),
            None,
        );
        let stepped = if bound == ffi::SQLITE_OK {
            ffi::sqlite3_step(stmt)
        } else {
            bound
        };
        ffi::sqlite3_finalize(stmt);
        if stepped != ffi::SQLITE_ROW && stepped != ffi::SQLITE_DONE {
            return check(db, stepped);
        }
        let Some(create) = api.as_ref().and_then(|a| a.xCreateFunction) else {
            return Err(error(ffi::SQLITE_ERROR, "this SQLite has no FTS5"));
        };
        let name = c"leasehold_rank";
        debug_assert_eq!(name.to_str().ok(), Some(FUNCTION));
        check(db, create(api, name.as_ptr(), db.cast(), Some(rank), None))
    }
}

/// One ranking query's scoring, on the calling thread: begun before the
/// query runs, finished after its rows are read (on the same thread: it is
/// not `Send`).
pub(crate) struct Scoring(std::marker::PhantomData<*const ()>);

impl Scoring {
    /// Start counting the rows the next ranking query on this thread scores;
    /// it reads row lengths from `lengths` when given (the index version the
    /// query reads), else from `search_text_docsize`.
    pub(crate) fn begin(lengths: Option<Arc<DocLengths>>) -> Scoring {
        TALLY.with(|t| t.set(Tally::default()));
        HELD.with(|h| *h.borrow_mut() = lengths);
        Scoring(std::marker::PhantomData)
    }

    /// What the query saw, to turn its raw scores into ranks.
    pub(crate) fn finish(self) -> Tally {
        TALLY.with(Cell::get)
    }
}

impl Drop for Scoring {
    fn drop(&mut self) {
        HELD.with(|h| h.borrow_mut().take());
    }
}

/// Every row's length (tokens over all columns) in one version of the index,
/// read in one pass: what the ranking function otherwise reads row by row
/// beside the match. On the search bench that walk was 38 % of a query, and
/// held lengths made word and prefix queries 2 to 2.5 times faster. 16 bits a
/// row; a longer row, or a row not read, is looked up in the table.
#[derive(Debug)]
pub(crate) struct DocLengths {
    first: i64,
    lengths: Vec<u16>,
}

impl DocLengths {
    /// Above this span of rowids the lengths are not held (16 MiB).
    const MAX_SPAN: i64 = 8 << 20;
    /// Marks a length not held.
    const NOT_HELD: u16 = u16::MAX;

    /// The lengths of every row in `c`'s view of the index, if its rowids
    /// span at most [`DocLengths::MAX_SPAN`].
    pub(crate) fn read(c: &Connection, (lo, hi): (i64, i64)) -> rusqlite::Result<Option<DocLengths>> {
        let Some(span) = hi.checked_sub(lo).filter(|s| (0..Self::MAX_SPAN).contains(s)) else {
            return Ok(None);
        };
        let mut lengths = vec![Self::NOT_HELD; usize::try_from(span + 1).unwrap_or(0)];
        let mut stmt =
            c.prepare_cached("SELECT id, sz FROM search_text_docsize WHERE id BETWEEN ?1 AND ?2")?;
        let mut rows = stmt.query([lo, hi])?;
        while let Some(row) = rows.next()? {
            let id: i64 = row.get(0)?;
            let sizes = row.get_ref(1)?.as_blob_or_null()?.unwrap_or_default();
            let slot = usize::try_from(id - lo).ok().and_then(|i| lengths.get_mut(i));
            if let Some(slot) = slot {
                *slot = u16::try_from(sum_of_varints(sizes)).unwrap_or(Self::NOT_HELD);
            }
        }
        Ok(Some(DocLengths { first: lo, lengths }))
    }

    /// Row `id`'s length, if held.
    fn of(&self, id: i64) -> Option<i64> {
        let at = usize::try_from(id.checked_sub(self.first)?).ok()?;
        self.lengths
            .get(at)
            .filter(|&&l| l != Self::NOT_HELD)
            .map(|&l| i64::from(l))
    }
}

/// What a ranking query saw: set by [`rank`] on the query's thread, read by
/// [`Scoring::finish`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Tally {
    /// Rows in the index and their tokens (bm25's N and average length);
    /// None when no row was scored.
    index: Option<(i64, i64)>,
    /// Distinct rows scored (the rows matching the query's one phrase).
    matched: i64,
    /// The last row scored, so a row scored twice counts once.
    last: Option<i64>,
    /// The scores lack the IDF factor (one phrase).
    idf_left_out: bool,
}

impl Tally {
    /// The bm25 rank of a row the query returned with `raw`: `raw` itself,
    /// or for a query of one phrase, `raw` times the IDF left out.
    pub(crate) fn rank(&self, raw: f64) -> f64 {
        match self.index {
            Some((rows, _)) if self.idf_left_out => raw * idf(rows, self.matched),
            _ => raw,
        }
    }

    /// The tally of one query run as two over halves of the rowids, if
    /// their scores are comparable: both saw the same N and token total
    /// (else a write landed between their starts). A half that scored no
    /// row agrees with anything.
    pub(crate) fn join(self, other: Tally) -> Option<Tally> {
        match (self.index, other.index) {
            (Some(a), Some(b)) if a != b => None,
            (None, _) => Some(other),
            (_, None) => Some(self),
            _ => Some(Tally {
                matched: self.matched + other.matched,
                last: None,
                ..self
            }),
        }
    }
}

thread_local! {
    /// The lengths [`Scoring::begin`] was given, for the query it begins.
    static HELD: RefCell<Option<Arc<DocLengths>>> = const { RefCell::new(None) };
    static TALLY: Cell<Tally> = const {
        Cell::new(Tally { index: None, matched: 0, last: None, idf_left_out: false })
    };
}

/// FTS5's IDF of a phrase found in `hits` of `rows` rows, with its floor.
fn idf(rows: i64, hits: i64) -> f64 {
    let v = (((rows - hits) as f64 + 0.5) / (hits as f64 + 0.5)).ln();
    if v <= 0.0 {
        1e-6
    } else {
        v
    }
}

/// What one query keeps between rows (FTS5's auxiliary data).
struct Query {
    avgdl: f64,
    /// Per phrase; empty when the query has one phrase (the IDF left out).
    idf: Vec<f64>,
    /// Per phrase, this row's count of it (reused).
    freq: Vec<f64>,
    lengths: Lengths,
}

/// A cursor on `search_text_docsize` (a row's token counts per column).
struct Lengths {
    /// The lengths of this index version read in one pass, if kept.
    held: Option<Arc<DocLengths>>,
    stmt: *mut ffi::sqlite3_stmt,
    /// The row the cursor is on and its length, if on one.
    at: Option<(i64, i64)>,
}

impl Drop for Lengths {
    fn drop(&mut self) {
        // SAFETY: prepared by `Query::new` and finalized only here.
        unsafe { ffi::sqlite3_finalize(self.stmt) };
    }
}

impl Lengths {
    /// The length of row `id` (tokens over all columns, as FTS5's
    /// `xColumnSize(-1)`).
    unsafe fn of(&mut self, id: i64) -> Result<i64, c_int> {
        if let Some(len) = self.held.as_ref().and_then(|h| h.of(id)) {
            return Ok(len);
        }
        let near = matches!(self.at, Some((at, _)) if id.checked_sub(at).is_some_and(|gap| (0..=STEP_RATHER_THAN_SEEK).contains(&gap)));
        if !near {
            ffi::sqlite3_reset(self.stmt);
            let rc = ffi::sqlite3_bind_int64(self.stmt, 1, id);
            if rc != ffi::SQLITE_OK {
                return Err(rc);
            }
            self.at = None;
        }
        loop {
            match self.at {
                Some((at, len)) if at == id => return Ok(len),
                Some((at, _)) if at > id => return Err(ffi::SQLITE_CORRUPT_VTAB),
                _ => {}
            }
            match ffi::sqlite3_step(self.stmt) {
                ffi::SQLITE_ROW => {}
                ffi::SQLITE_DONE => {
                    ffi::sqlite3_reset(self.stmt);
                    self.at = None;
                    return Err(ffi::SQLITE_CORRUPT_VTAB);
                }
                rc => return Err(rc),
            }
            let row = ffi::sqlite3_column_int64(self.stmt, 0);
            let blob = ffi::sqlite3_column_blob(self.stmt, 1).cast::<u8>();
            let n = usize::try_from(ffi::sqlite3_column_bytes(self.stmt, 1)).unwrap_or(0);
            let sizes = if blob.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(blob, n)
            };
            self.at = Some((row, sum_of_varints(sizes)));
        }
    }
}

/// The sum of the SQLite varints in `b` (a docsize row: one per column).
fn sum_of_varints(mut b: &[u8]) -> i64 {
    let mut total = 0i64;
    while !b.is_empty() {
        let mut v: u64 = 0;
        let mut used = 0;
        for (i, byte) in b.iter().enumerate() {
            used = i + 1;
            if i == 8 {
                v = (v << 8) | u64::from(*byte);
                break;
            }
            v = (v << 7) | u64::from(byte & 0x7f);
            if byte & 0x80 == 0 {
                break;
            }
        }
        total = total.saturating_add(i64::try_from(v).unwrap_or(i64::MAX));
        b = &b[used..];
    }
    total
}

impl Query {
    /// The query's constants, as FTS5's bm25 computes them at its first row.
    unsafe fn new(api: &ffi::Fts5ExtensionApi, fts: *mut ffi::Fts5Context) -> Result<Query, c_int> {
        let (Some(user_data), Some(row_count), Some(total_size), Some(phrase_count), Some(query_phrase)) = (
            api.xUserData,
            api.xRowCount,
            api.xColumnTotalSize,
            api.xPhraseCount,
            api.xQueryPhrase,
        ) else {
            return Err(ffi::SQLITE_ERROR);
        };
        let (mut rows, mut tokens) = (0i64, 0i64);
        rc(row_count(fts, &mut rows))?;
        rc(total_size(fts, -1, &mut tokens))?;
        let phrases = usize::try_from(phrase_count(fts)).unwrap_or(0);
        let mut idf_of = Vec::new();
        if phrases > 1 {
            for i in 0..phrases {
                let mut hits = 0i64;
                let i = c_int::try_from(i).map_err(|_| ffi::SQLITE_ERROR)?;
                rc(query_phrase(
                    fts,
                    i,
                    (&mut hits as *mut i64).cast(),
                    Some(count_row),
                ))?;
                idf_of.push(idf(rows, hits));
            }
        }
        TALLY.with(|t| {
            t.set(Tally {
                index: Some((rows, tokens)),
                idf_left_out: phrases == 1,
                ..t.get()
            })
        });
        let db = user_data(fts).cast::<ffi::sqlite3>();
        let mut stmt = ptr::null_mut();
        rc(ffi::sqlite3_prepare_v2(
            db,
            c"SELECT id, sz FROM main.search_text_docsize WHERE id >= ?1 ORDER BY id".as_ptr(),
            -1,
            &mut stmt,
            ptr::null_mut(),
        ))?;
        Ok(Query {
            avgdl: tokens as f64 / rows as f64,
            idf: idf_of,
            freq: vec![0.0; phrases],
            lengths: Lengths {
                held: HELD.with(|h| h.borrow().clone()),
                stmt,
                at: None,
            },
        })
    }

    /// This row's score, bm25 with FTS5's steps (minus the IDF when the
    /// query has one phrase).
    unsafe fn score(
        &mut self,
        api: &ffi::Fts5ExtensionApi,
        fts: *mut ffi::Fts5Context,
    ) -> Result<f64, c_int> {
        let (Some(first), Some(next), Some(rowid)) = (api.xPhraseFirst, api.xPhraseNext, api.xRowid) else {
            return Err(ffi::SQLITE_ERROR);
        };
        for (i, freq) in self.freq.iter_mut().enumerate() {
            let mut iter = ffi::Fts5PhraseIter {
                a: ptr::null(),
                b: ptr::null(),
            };
            let (mut col, mut off) = (0, 0);
            let i = c_int::try_from(i).map_err(|_| ffi::SQLITE_ERROR)?;
            rc(first(fts, i, &mut iter, &mut col, &mut off))?;
            let mut n = 0.0;
            while col >= 0 {
                n += 1.0;
                next(fts, &mut iter, &mut col, &mut off);
            }
            *freq = n;
        }
        let id = rowid(fts);
        let d = self.lengths.of(id)? as f64;
        let mut score = 0.0;
        for (i, f) in self.freq.iter().enumerate() {
            let idf = self.idf.get(i).copied().unwrap_or(1.0);
            score += idf * ((f * (K1 + 1.0)) / (f + K1 * (1.0 - B + B * d / self.avgdl)));
        }
        TALLY.with(|t| {
            let mut tally = t.get();
            if tally.last != Some(id) {
                tally.matched += 1;
                tally.last = Some(id);
            }
            t.set(tally)
        });
        Ok(-score)
    }
}

/// `xQueryPhrase`'s callback: one more row has the phrase.
unsafe extern "C" fn count_row(
    _api: *const ffi::Fts5ExtensionApi,
    _fts: *mut ffi::Fts5Context,
    hits: *mut c_void,
) -> c_int {
    *hits.cast::<i64>() += 1;
    ffi::SQLITE_OK
}

unsafe extern "C" fn drop_query(p: *mut c_void) {
    drop(Box::from_raw(p.cast::<Query>()));
}

/// The auxiliary function FTS5 calls for each row.
unsafe extern "C" fn rank(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    _argc: c_int,
    _argv: *mut *mut ffi::sqlite3_value,
) {
    match ranked(&*api, fts) {
        Ok(score) => ffi::sqlite3_result_double(ctx, score),
        Err(code) => ffi::sqlite3_result_error_code(ctx, code),
    }
}

unsafe fn ranked(api: &ffi::Fts5ExtensionApi, fts: *mut ffi::Fts5Context) -> Result<f64, c_int> {
    let (Some(get), Some(set)) = (api.xGetAuxdata, api.xSetAuxdata) else {
        return Err(ffi::SQLITE_ERROR);
    };
    let mut query = get(fts, 0).cast::<Query>();
    if query.is_null() {
        query = Box::into_raw(Box::new(Query::new(api, fts)?));
        // On failure FTS5 has already run the destructor on it.
        rc(set(fts, query.cast(), Some(drop_query)))?;
    }
    (*query).score(api, fts)
}

fn rc(code: c_int) -> Result<(), c_int> {
    if code == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(code)
    }
}

unsafe fn check(db: *mut ffi::sqlite3, code: c_int) -> rusqlite::Result<()> {
    if code == ffi::SQLITE_OK {
        return Ok(());
    }
    let msg = CStr::from_ptr(ffi::sqlite3_errmsg(db))
        .to_string_lossy()
        .into_owned();
    Err(error(code, &msg))
}

fn error(code: c_int, msg: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some(msg.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_of_one_to_nine_bytes_are_summed() {
        assert_eq!(sum_of_varints(&[]), 0);
        assert_eq!(sum_of_varints(&[0x05, 0x00, 0x00]), 5);
        // 300 = 0b10_0101100: two bytes, high group first.
        assert_eq!(sum_of_varints(&[0x82, 0x2c, 0x07]), 307);
        assert_eq!(sum_of_varints(&[0xff; 9]), i64::MAX);
    }

    #[test]
    fn halves_join_only_when_they_saw_the_same_index() {
        let half = |index, matched| Tally {
            index,
            matched,
            last: Some(9),
            idf_left_out: true,
        };
        let joined = half(Some((100, 900)), 3).join(half(Some((100, 900)), 4)).unwrap();
        assert_eq!((joined.matched, joined.index), (7, Some((100, 900))));
        assert_eq!(joined.rank(-2.0), -2.0 * idf(100, 7));
        assert_eq!(half(Some((100, 900)), 3).join(half(Some((101, 905)), 4)), None);
        assert_eq!(
            half(None, 0).join(half(Some((5, 9)), 2)),
            Some(half(Some((5, 9)), 2))
        );
        assert_eq!(
            half(Some((5, 9)), 2).join(half(None, 0)),
            Some(half(Some((5, 9)), 2))
        );
    }

    #[test]
    fn the_idf_has_fts5s_floor() {
        assert_eq!(idf(10, 10), 1e-6);
        assert!((idf(100, 1) - (99.5f64 / 1.5).ln()).abs() < 1e-12);
    }
}
