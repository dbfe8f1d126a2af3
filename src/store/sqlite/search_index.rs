//! The search index in SQLite: the FTS5 table `search_text`, one row per
//! document with an accepted result (rowid = its id), a long text's further
//! parts at rowids listed in `search_parts`. The writes that change what is
//! searchable take the caller's transaction (the fenced completion's, or the
//! one that marks a source gone), so a refused completion never reaches the
//! index. Searches rank with FTS5's own `bm25()`: documented interfaces only.

use std::time::{Duration, Instant};

use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection, ErrorCode, OptionalExtension};

use crate::store::search::fields::{self, Dialect, Filter};
use crate::store::search::language::Node;
use crate::store::search::parts::TX_TEXT_BYTES;
use crate::store::search::query::{self, Plan};
use crate::store::search::stemming::{Stemming, VocabularyRange, STEMMING_META};
use crate::store::search::{file_name, Described, Labels, AUTHOR_WEIGHT, TITLE_WEIGHT};
use crate::store::search::{stemmed_fts5, Found, Search, SearchPage, Snippet};
use crate::store::search::{IndexCheck, IndexDoc, Tokenizer, ELLIPSIS, MARK_CLOSE, MARK_OPEN};
use crate::store::sqlite::search_purge as purge;
use crate::store::sqlite::search_snippets::{Cutter, MatchedRow};
use crate::store::sqlite::search_table::{self, create_table, table_tokenizer};

/// The first rowid of a long text's further parts: far above any document
/// id, so a rowid tells a document's first part (its id) from a further one.
pub(crate) const PART_ROWID_BASE: i64 = 1 << 48;

/// A document's accepted text, for the index: its id, the accepted result
/// (path, checksum) the text came from, its first part (None: the result has
/// no searchable text, and the previous version's is taken out), and the tag
/// its further parts were staged under, if any.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Accepted<'a> {
    pub(crate) id: i64,
    pub(crate) result: (&'a str, &'a str),
    pub(crate) text: Option<&'a str>,
    pub(crate) parts_tag: Option<&'a str>,
    /// Its title and author for the index; None: read from its row.
    pub(crate) labels: Option<&'a Labels>,
}

/// Make `doc`'s text the document's text in the index, replacing what it
/// had. Called inside the transaction that accepted the result.
pub(crate) fn accepted(tx: &Connection, doc: &Accepted<'_>) -> rusqlite::Result<()> {
    accept_all(tx, std::slice::from_ref(doc))
}

/// [`accepted`] for the documents of one transaction, in the order of their
/// ids: every document's further parts settled first (the old text's
/// retired, staged ones of the new text made live), then each one's old
/// first part taken out and its new one put in at once.
///
/// Why that order: FTS5 writes out what it holds (a flush, then merge work)
/// whenever a write's rowid is below the one before, and at every statement
/// that opens a statement transaction while it holds pending writes (SQLite
/// tells every virtual table of the transaction of each such savepoint). The
/// parts' UPDATE is such a statement: run between one document's insert and
/// the next, it made every document a segment of its own. In rowid order,
/// with nothing but FTS5 writes between them, the batch flushes once.
pub(crate) fn accept_all(tx: &Connection, docs: &[Accepted<'_>]) -> rusqlite::Result<()> {
    let mut docs = last_of_each(docs);
    docs.sort_by_key(|d| d.id);
    for d in &docs {
        settle_parts(tx, d.id, d.parts_tag)?;
    }
    let mut deleted = 0;
    for d in &docs {
        deleted += delete_first_part(tx, d.id)?;
        if let Some(body) = d.text {
            let read;
            let labels = match d.labels {
                Some(labels) => labels,
                None => {
                    read = indexed_labels_of(tx, d.id)?;
                    &read
                }
            };
            insert_rows(
                tx,
                &[Row {
                    rowid: d.id,
                    body,
                    labels: labels.as_refs(),
                    result: d.result,
                }],
            )?;
        }
    }
    purge::note_deleted(tx, deleted)
}

/// One row of the index: a document's first part at its id, or a further
/// part, each with the document's title and author.
struct Row<'a> {
    rowid: i64,
    body: &'a str,
    labels: (Option<&'a str>, Option<&'a str>),
    result: (&'a str, &'a str),
}

/// Put `rows` in, in the order given.
fn insert_rows(tx: &Connection, rows: &[Row<'_>]) -> rusqlite::Result<()> {
    for r in rows {
        let (path, checksum) = r.result;
        tx.prepare_cached(
            "INSERT INTO search_text (rowid, body, title, author, path, checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![r.rowid, r.body, r.labels.0, r.labels.1, path, checksum])?;
    }
    Ok(())
}

/// The title and author document `id`'s rows are indexed with, from its
/// row (which the accepting transaction has just written, or the accepted
/// result's): see [`Labels::of`].
pub(crate) fn indexed_labels_of(tx: &Connection, id: i64) -> rusqlite::Result<Labels> {
    Ok(match described(tx, id)? {
        Some(d) => Labels::of(&d.key, d.title.as_deref(), d.author.as_deref()),
        None => Labels::default(),
    })
}

/// `docs` with only the last of each document (as one after the other
/// would leave the index), in order.
fn last_of_each<'a>(docs: &[Accepted<'a>]) -> Vec<Accepted<'a>> {
    let mut seen = std::collections::HashSet::new();
    let mut kept: Vec<Accepted<'a>> = docs.iter().rev().filter(|d| seen.insert(d.id)).copied().collect();
    kept.reverse();
    kept
}

/// Take documents `ids` out of the index (their sources went away): their
/// first parts now, their further parts retired for [`purge_retired`]; the
/// parts first, for the reason [`accept_all`] gives.
pub(crate) fn remove_all(tx: &Connection, ids: &[i64]) -> rusqlite::Result<()> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    for &id in &ids {
        settle_parts(tx, id, None)?;
    }
    let mut deleted = 0;
    for &id in &ids {
        deleted += delete_first_part(tx, id)?;
    }
    purge::note_deleted(tx, deleted)
}

/// Delete document `id`'s first part from the index; how many rows it
/// deleted (for [`purge::note_deleted`]).
fn delete_first_part(tx: &Connection, id: i64) -> rusqlite::Result<usize> {
    tx.prepare_cached("DELETE FROM search_text WHERE rowid = ?1")?
        .execute([id])
}

/// Retire document `id`'s further parts, except the ones staged under
/// `keep`, which become live: the new text's. Most documents have none, and
/// a read says so: each `UPDATE` opens (and tears down) SQLite's temporary
/// structures for a statement, which a first run paid for every document.
fn settle_parts(tx: &Connection, id: i64, keep: Option<&str>) -> rusqlite::Result<()> {
    let has_parts: bool = tx
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM search_parts WHERE doc = ?1)")?
        .query_row([id], |r| r.get(0))?;
    if !has_parts {
        return Ok(());
    }
    tx.prepare_cached(
        "UPDATE search_parts SET state = 'retired'
         WHERE doc = ?1 AND state IN ('staged', 'live') AND (state = 'live' OR tag IS NOT ?2)",
    )?
    .execute(params![id, keep])?;
    if let Some(tag) = keep {
        tx.prepare_cached(
            "UPDATE search_parts SET state = 'live' WHERE doc = ?1 AND state = 'staged' AND tag = ?2",
        )?
        .execute(params![id, tag])?;
    }
    Ok(())
}

/// Put further parts of document `doc`'s text into the index, staged under
/// `tag`, each with the document's indexed `labels`: invisible until the
/// transaction that accepts `result` makes them live ([`accepted`],
/// [`put_if_accepted`]). At most [`TX_TEXT_BYTES`] a transaction is the
/// caller's to keep.
pub(crate) fn put_parts(
    tx: &Connection,
    doc: i64,
    tag: &str,
    result: (&str, &str),
    labels: &Labels,
    parts: &[&str],
) -> rusqlite::Result<()> {
    let first: i64 = tx
        .prepare_cached("SELECT coalesce(max(rowid) + 1, ?1) FROM search_parts")?
        .query_row([PART_ROWID_BASE], |r| r.get(0))?;
    let mut rows = Vec::with_capacity(parts.len());
    for (i, body) in parts.iter().enumerate() {
        let rowid = first + i as i64;
        tx.prepare_cached("INSERT INTO search_parts (rowid, doc, tag, state) VALUES (?1, ?2, ?3, 'staged')")?
            .execute(params![rowid, doc, tag])?;
        rows.push(Row {
            rowid,
            body,
            labels: labels.as_refs(),
            result,
        });
    }
    insert_rows(tx, &rows)
}

/// Delete retired parts from the index, about [`TX_TEXT_BYTES`] of text in
/// this transaction, after retiring staged parts nobody will make live (the
/// claim that staged them is over, and they are not a reindex's of the
/// accepted text); whether any are left.
pub(crate) fn purge_retired(tx: &Connection) -> rusqlite::Result<bool> {
    tx.prepare_cached(
        "UPDATE search_parts SET state = 'retired' WHERE state = 'staged' AND NOT EXISTS (
             SELECT 1 FROM jobs j WHERE j.id = search_parts.doc AND (
                 (j.status = 'extracting' AND j.owner_token = search_parts.tag)
                 OR j.checksum = search_parts.tag))",
    )?
    .execute([])?;
    let per_tx = (TX_TEXT_BYTES / crate::store::search::parts::PART_BYTES).max(1);
    let gone: Vec<i64> = tx
        .prepare_cached("SELECT rowid FROM search_parts WHERE state = 'retired' LIMIT ?1")?
        .query_map([per_tx as i64 + 1], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut deleted = 0;
    for rowid in gone.iter().take(per_tx) {
        deleted += tx
            .prepare_cached("DELETE FROM search_text WHERE rowid = ?1")?
            .execute([rowid])?;
        tx.prepare_cached("DELETE FROM search_parts WHERE rowid = ?1")?
            .execute([rowid])?;
    }
    purge::note_deleted(tx, deleted)?;
    Ok(gone.len() > per_tx)
}

/// The table remade as this version makes it ([`create_table`]) with the
/// tokenizer it had, when it is not made so yet, every row copied into it
/// (rowids kept, so the parts list still holds). Two forms came before: a
/// table without `title` and `author` (before schema version 12), whose
/// documents' first parts are titled by their file names, since results
/// accepted before it carry no title of their own; and a word index that
/// kept a copy of its texts, which the mirror holds. FTS5 cannot change a
/// table's columns or options; the copy costs what indexing the texts again
/// does, once, without reading the mirror. Run at every read-write open, in
/// a transaction of its own after the migrations (a look at the table's
/// definition and its merge setting when there is nothing to do; the
/// setting is written there on a table made before it,
/// [`search_table::keep_merge_policy`]).
///
/// An index too damaged to be read is made again empty instead, its pages
/// orphaned as a reindex of a damaged index leaves them
/// ([`search_table::remake`]): the store still opens, and `leasehold
/// reindex` (which `doctor` names) fills the index from the mirror.
pub(crate) fn bring_to_current_form(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let tokenizer = table_tokenizer(&tx)?;
    let titled = has_metadata_columns(&tx)?;
    if titled && search_table::is_current_form(&tx, tokenizer)? {
        return match search_table::keep_merge_policy(&tx) {
            Ok(()) => tx.commit(),
            // Setting it reads FTS5's structure: an index too damaged for
            // that keeps its setting, and the store opens as before (a
            // search or `doctor` finds the damage; a reindex makes the
            // table again with the setting).
            Err(e) if is_damage(&e) => Ok(()),
            Err(e) => Err(e),
        };
    }
    // (A damaged index cannot say; its copy fails below, and it is remade.)
    if !search_table::is_empty(&tx).unwrap_or(false) {
        // Seconds per 100,000 documents: worth a line where a run's log goes.
        tracing::info!(
            target: "leasehold::store",
            "copying the search index into this version's form (once; the texts are not read again)"
        );
    }
    match copy_into_current_table(&tx, tokenizer, titled) {
        Ok(()) => tx.commit(),
        Err(e) if is_damage(&e) => {
            drop(tx);
            search_table::remake(conn, tokenizer)
        }
        // A full disk, an I/O error: nothing is lost (the transaction rolls
        // back), and the next open copies again.
        Err(e) => Err(e),
    }
}

/// Whether `e` says the index's pages cannot be read: SQLite's corruption
/// codes, or FTS5 failing to read its own structure ("vtable constructor
/// failed", a plain error).
fn is_damage(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
    matches!(e.sqlite_error_code(), Some(DatabaseCorrupt | NotADatabase))
        || e.to_string().contains("vtable constructor failed")
}

/// [`bring_to_current_form`]'s copy: the table renamed, the new one made,
/// every row put in it, the old one dropped. `titled`: the old table has
/// `title` and `author`; else each first part is titled by its file name.
fn copy_into_current_table(tx: &Connection, tokenizer: Tokenizer, titled: bool) -> rusqlite::Result<()> {
    search_table::rename_table(tx, "search_text", "search_text_previous")?;
    create_table(tx, tokenizer)?;
    let labels = match titled {
        true => "s.title, s.author",
        false => "NULL, NULL",
    };
    {
        let mut old = tx.prepare(&format!(
            "SELECT s.rowid, s.body, s.path, s.checksum, j.doc_key, {labels}
               FROM search_text_previous s LEFT JOIN jobs j ON j.id = s.rowid ORDER BY s.rowid"
        ))?;
        let mut rows = old.query([])?;
        while let Some(r) = rows.next()? {
            let key: Option<String> = r.get(4)?;
            let (body, path, checksum): (String, String, String) = (r.get(1)?, r.get(2)?, r.get(3)?);
            let (title, author): (Option<String>, Option<String>) = (r.get(5)?, r.get(6)?);
            let title = match titled {
                true => title.as_deref(),
                false => key.as_deref().and_then(file_name),
            };
            insert_rows(
                tx,
                &[Row {
                    rowid: r.get(0)?,
                    body: &body,
                    labels: (title, author.as_deref()),
                    result: (&path, &checksum),
                }],
            )?;
        }
    }
    search_table::drop_table(tx, "search_text_previous")
}

/// Whether the table has its `author` column, made with `title` by this
/// version.
fn has_metadata_columns(c: &Connection) -> rusqlite::Result<bool> {
    let n: i64 = c.query_row(
        "SELECT count(*) FROM pragma_table_info('search_text') WHERE name = 'author'",
        [],
        |r| r.get(0),
    )?;
    Ok(n > 0)
}

/// Put texts read back from the mirror into the index, each only if it is
/// still its document's accepted result (a completion meanwhile indexed a
/// newer one itself): its first part, and the further parts staged under its
/// checksum ([`put_parts`]) made live. Returns how many went in.
pub(crate) fn put_if_accepted(tx: &Connection, docs: &[IndexDoc<'_>]) -> rusqlite::Result<usize> {
    let mut current = Vec::new();
    for d in docs {
        match accepted_labels(tx, d.id, (d.result_path, d.checksum))? {
            Some(labels) => current.push((d, labels)),
            None => retire_staged(tx, d.id, d.checksum)?,
        }
    }
    let current_docs: Vec<Accepted<'_>> = current
        .iter()
        .map(|(d, labels)| Accepted {
            id: d.id,
            result: (d.result_path, d.checksum),
            text: Some(d.text),
            parts_tag: Some(d.checksum),
            labels: Some(labels),
        })
        .collect();
    accept_all(tx, &current_docs)?;
    Ok(current_docs.len())
}

/// The index's labels of document `id` when its accepted result is
/// `result` (path, checksum); None when it is not.
fn accepted_labels(
    tx: &Connection,
    id: i64,
    (path, checksum): (&str, &str),
) -> rusqlite::Result<Option<Labels>> {
    tx.prepare_cached(
        "SELECT doc_key, title, author FROM jobs WHERE id = ?1 AND result_path = ?2 AND checksum = ?3",
    )?
    .query_row(params![id, path, checksum], |r| {
        let (key, title, author): (String, Option<String>, Option<String>) =
            (r.get(0)?, r.get(1)?, r.get(2)?);
        Ok(Labels::of(&key, title.as_deref(), author.as_deref()))
    })
    .optional()
}

/// Retire the parts of document `id` staged under `tag`: a version that
/// will not be accepted, or the leftovers of an earlier try of this one.
pub(crate) fn retire_staged(tx: &Connection, id: i64, tag: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE search_parts SET state = 'retired' WHERE doc = ?1 AND state = 'staged' AND tag = ?2",
    )?
    .execute(params![id, tag])?;
    Ok(())
}

/// Rows that are not the text of their document's accepted result: no
/// accepted result, or another one. First parts, live further parts, and
/// part rows nothing lists; staged and retired parts are not searched and
/// are left to [`purge_retired`]. Shared by [`prune`] and [`check`].
const NOT_ACCEPTED: &str = "SELECT s.rowid AS rowid, j.doc_key, j.result_path IS NULL
     FROM search_text s
     LEFT JOIN search_parts p ON p.rowid = s.rowid
     LEFT JOIN jobs j ON j.id = coalesce(p.doc, s.rowid)
     WHERE (s.rowid < 281474976710656 OR p.state = 'live' OR p.rowid IS NULL)
       AND (j.result_path IS NULL OR s.path IS NOT j.result_path OR s.checksum IS NOT j.checksum)";

/// Take every row out that is not its document's accepted text (further
/// parts are retired for [`purge_retired`]); how many.
pub(crate) fn prune(tx: &Connection) -> rusqlite::Result<usize> {
    let wrong: Vec<i64> = tx
        .prepare(NOT_ACCEPTED)?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for rowid in &wrong {
        let listed = tx
            .prepare_cached("UPDATE search_parts SET state = 'retired' WHERE rowid = ?1")?
            .execute([rowid])?;
        if listed == 0 {
            tx.prepare_cached("DELETE FROM search_text WHERE rowid = ?1")?
                .execute([rowid])?;
        }
    }
    Ok(wrong.len())
}

/// Compare the index with the accepted results (`doctor`): read only, one
/// pass over each; keeps at most [`CHECK_EXAMPLES`] lines.
pub(crate) fn check(c: &Connection) -> rusqlite::Result<IndexCheck> {
    let mut out = IndexCheck {
        tokenizer: Some(table_tokenizer(c)?),
        accepted: count(c.query_row(
            "SELECT count(*) FROM jobs WHERE result_path IS NOT NULL",
            [],
            |r| r.get(0),
        )?),
        rows: count(c.query_row(
            "SELECT count(*) FROM search_text WHERE rowid < ?1",
            [PART_ROWID_BASE],
            |r| r.get(0),
        )?),
        ..IndexCheck::default()
    };
    let mut missing = c.prepare(
        "SELECT doc_key FROM jobs j WHERE result_path IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM search_text s WHERE s.rowid = j.id)",
    )?;
    let mut rows = missing.query([])?;
    while let Some(r) = rows.next()? {
        out.add_missing(&r.get::<_, String>(0)?);
    }
    drop(rows);
    let mut wrong = c.prepare(NOT_ACCEPTED)?;
    let mut rows = wrong.query([])?;
    while let Some(r) = rows.next()? {
        out.add_wrong(r.get(0)?, r.get(1)?, r.get(2)?);
    }
    Ok(out)
}

/// A `count(*)` as the unsigned number it is (rusqlite reads only signed
/// integers; a count is never negative).
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Run `query` (FTS5 syntax) under the table's tokenizer: at most `limit`
/// hits, best first, within `time_limit`.
pub(crate) fn search(
    c: &mut Connection,
    search: &Search<'_>,
    time_limit: Duration,
) -> rusqlite::Result<Found> {
    let form = search_table::form(c)?;
    let planned = match search.sqlite_plan(form.tokenizer) {
        Ok(planned) => planned,
        Err(why) => return Ok(Found::BadQuery(why)),
    };
    let stops = Deadline::on(c, Instant::now() + time_limit)?;
    let c: &Connection = &stops;
    let filters = &planned.filters;
    let found = match &planned.plan {
        Plan::Match(written) => stemmed(c, planned.words.as_ref(), search.stemming).and_then(|widened| {
            let m = Matching {
                expr: widened.as_deref().unwrap_or(written),
                written: widened.is_some().then_some(written.as_str()),
                filters,
            };
            search_match(c, &m, search, &form)
        }),
        Plan::Like(terms) => search_like(c, terms, filters, search),
    };
    match found {
        Ok(page) => Ok(Found::Hits(page)),
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == ErrorCode::OperationInterrupted => {
            Ok(Found::TimedOut(time_limit))
        }
        // FTS5 reports a malformed query (syntax, an unknown column) as a
        // plain SQLITE_ERROR; nothing else in these reads does.
        Err(rusqlite::Error::SqliteFailure(e, msg)) if e.code == ErrorCode::Unknown => {
            Ok(Found::BadQuery(msg.unwrap_or_else(|| e.to_string())))
        }
        Err(e) => Err(e),
    }
}

/// The FTS5 expression of `words` (a query that stemming may widen) with
/// each word's other forms in the index, when stemming is on (`asked`, else
/// as the data directory records) and some word has one.
fn stemmed(
    c: &Connection,
    words: Option<&Node>,
    asked: Option<Stemming>,
) -> rusqlite::Result<Option<String>> {
    let Some(words) = words else {
        return Ok(None);
    };
    let stemming = match asked {
        Some(asked) => asked,
        None => Stemming::recorded(crate::store::sqlite::meta::meta(c, STEMMING_META)?.as_deref()),
    };
    if stemming == Stemming::Off {
        return Ok(None);
    }
    const VOCABULARY: &str = "SELECT term FROM temp.search_vocabulary WHERE term >= ?1 AND term < ?2";
    let mut stmt = match c.prepare_cached(VOCABULARY) {
        Ok(stmt) => stmt,
        // The index's vocabulary, a view made once per connection in its
        // temp schema, so the file is not changed by a search.
        Err(_) => {
            c.execute_batch(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_vocabulary USING fts5vocab(main, search_text, row)",
            )?;
            c.prepare_cached(VOCABULARY)?
        }
    };
    stemmed_fts5(
        words,
        &mut |range: &VocabularyRange, visit: &mut dyn FnMut(&str) -> bool| {
            let mut rows = stmt.query([&range.lo, &range.hi])?;
            while let Some(r) = rows.next()? {
                if !visit(r.get_ref(0)?.as_str()?) {
                    break;
                }
            }
            Ok(())
        },
    )
}

/// Stops the statements of a connection once a deadline passes (SQLite's
/// progress handler, called every [`Deadline::EVERY`] virtual machine
/// steps): they fail with `SQLITE_INTERRUPT`. Dropped, it disarms, so the
/// pooled connection goes back without it.
struct Deadline<'c> {
    conn: &'c mut Connection,
}

impl<'c> Deadline<'c> {
    const EVERY: i32 = 1000;

    fn on(conn: &'c mut Connection, at: Instant) -> rusqlite::Result<Deadline<'c>> {
        conn.progress_handler(Self::EVERY, Some(move || Instant::now() >= at))?;
        Ok(Deadline { conn })
    }
}

impl std::ops::Deref for Deadline<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Deadline<'_> {
    /// Unsetting a handler cannot fail (`sqlite3_progress_handler` returns
    /// nothing; only a new handler's client data can be refused).
    fn drop(&mut self) {
        let _ = self.conn.progress_handler(0, None::<fn() -> bool>);
    }
}

/// The page of matches asked for, then a snippet for each, then how many
/// documents match in all. In steps because SQLite computes every selected
/// column of every match before it sorts: `snippet()` in the ranking query
/// would be run on all the matches.
fn search_match(
    c: &Connection,
    m: &Matching<'_>,
    search: &Search<'_>,
    form: &search_table::TableForm,
) -> rusqlite::Result<SearchPage> {
    let expr = m.expr;
    let wanted = search
        .wanted()
        .map_or(-1, |w| i64::try_from(w).unwrap_or(i64::MAX));
    let (best, matched) = best_documents(c, m, wanted)?;
    let total = match matched {
        Matched::All(all) => all,
        Matched::FirstParts(Some(firsts)) => firsts + matching_only_in_further_parts(c, m)?,
        Matched::FirstParts(None) => matching_first_parts(c, m)? + matching_only_in_further_parts(c, m)?,
    };
    let tokens = crate::store::search::snippet_tokens(form.tokenizer);
    let from_mirror = match search.snippets && !form.keeps_text {
        true => Some(Cutter::new(c, search.mirror, form.tokenizer, expr, tokens)?),
        false => None,
    };
    let mut hits = Vec::with_capacity(best.len().saturating_sub(search.offset));
    for (rowid, id, rank) in best.into_iter().skip(search.offset) {
        let row: Option<(String, String)> = if search.snippets && from_mirror.is_none() {
            c.prepare_cached(
                "SELECT path, snippet(search_text, 0, ?3, ?4, ?5, ?6) FROM search_text
                 WHERE search_text MATCH ?1 AND rowid = ?2",
            )?
            .query_row(
                params![expr, rowid, MARK_OPEN, MARK_CLOSE, ELLIPSIS, tokens],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?
        } else {
            c.prepare_cached("SELECT path, '' FROM search_text WHERE rowid = ?1")?
                .query_row([rowid], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?
        };
        // A completion or a gone source between the two reads: skip it.
        let (Some((path, marked)), Some(doc)) = (row, described(c, id)?) else {
            continue;
        };
        let snippet = match &from_mirror {
            Some(cutter) => cutter.snippet(&MatchedRow {
                rowid,
                doc: id,
                result_path: &path,
                labels: Labels::of(&doc.key, doc.title.as_deref(), doc.author.as_deref()),
            })?,
            None => Snippet::from_marked(&marked),
        };
        hits.push(doc.hit(-rank, snippet, path));
    }
    Ok(SearchPage { hits, total })
}

/// How many documents' first parts match `expr` (a document's id is its
/// first part's rowid), counted on their own: for a page of no hits, whose
/// ranking ranks nothing.
fn matching_first_parts(c: &Connection, m: &Matching<'_>) -> rusqlite::Result<u64> {
    let (narrow, values) = narrowing(m.filters, "search_text.rowid", 3);
    let sql = format!("SELECT count(*) FROM search_text WHERE search_text MATCH ?1 AND rowid < ?2{narrow}");
    let firsts: i64 = c.prepare_cached(&sql)?.query_row(
        params_from_iter(with(
            &[Value::Text(m.expr.to_owned()), PART_ROWID_BASE.into()],
            values,
        )),
        |r| r.get(0),
    )?;
    Ok(u64::try_from(firsts).unwrap_or(0))
}

/// How many documents match `expr` in a live further part but not in their
/// first part (rare: only long texts have further parts). With the first
/// parts that match, which the ranking counts ([`Ranked::first_parts`]: a
/// document's id is its first part's rowid), that is every document that
/// matches.
fn matching_only_in_further_parts(c: &Connection, m: &Matching<'_>) -> rusqlite::Result<u64> {
    let expr = m.expr;
    let mut others = std::collections::HashSet::new();
    let (narrow, values) = narrowing(m.filters, "s.rowid", 3);
    let mut stmt = c.prepare_cached(&format!(
        "SELECT p.doc FROM search_text s JOIN search_parts p ON p.rowid = s.rowid AND p.state = 'live'
         WHERE search_text MATCH ?1 AND s.rowid >= ?2{narrow}"
    ))?;
    let mut rows = stmt.query(params_from_iter(with(
        &[Value::Text(expr.to_owned()), PART_ROWID_BASE.into()],
        values,
    )))?;
    while let Some(r) = rows.next()? {
        others.insert(r.get::<_, i64>(0)?);
    }
    let mut only_later = 0u64;
    for doc in others {
        let first_matches = c
            .prepare_cached("SELECT 1 FROM search_text WHERE search_text MATCH ?1 AND rowid = ?2")?
            .query_row(params![expr, doc], |_| Ok(()))
            .optional()?
            .is_some();
        if !first_matches {
            only_later += 1;
        }
    }
    Ok(only_later)
}

/// The best `limit` documents for `expr` (all of them when `limit` is
/// negative), each as (its best row, its id, the row's rank), and how many
/// documents match as far as the ranking tells ([`Matched`]): a long text has
/// several rows, of which the best stands for it, and staged or retired
/// parts are not searched. When that leaves fewer than `limit` of the rows
/// ranked, more rows are ranked (rare: only long texts in flight or matching
/// in several parts take places).
fn best_documents(c: &Connection, m: &Matching<'_>, limit: i64) -> rusqlite::Result<(Vec<BestRow>, Matched)> {
    let mut want = limit;
    loop {
        let Ranked { rows, first_parts } = ranked(c, m, want)?;
        if want < 0 || (rows.len() as i64) < want {
            // Every match is in `rows`: their documents are all of them.
            let mut docs = documents_of(c, &rows, -1)?;
            let all = docs.len() as u64;
            if limit >= 0 {
                docs.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            }
            return Ok((docs, Matched::All(all)));
        }
        let docs = documents_of(c, &rows, limit)?;
        if docs.len() as i64 >= limit {
            return Ok((docs, Matched::FirstParts(first_parts)));
        }
        want = want.saturating_mul(4);
    }
}

/// How many documents match, as far as a ranking of the matches tells.
enum Matched {
    /// Every match was among the rows kept: this many documents.
    All(u64),
    /// This many documents' first parts match (`None`: not counted, the
    /// page asked for no hits); those that match only in a further part are
    /// still to be counted.
    FirstParts(Option<u64>),
}

/// A document found: its best row, its id, and the row's rank.
type BestRow = (i64, i64, f64);

/// The first `limit` distinct live documents of `rows` (best first).
fn documents_of(c: &Connection, rows: &[(i64, f64)], limit: i64) -> rusqlite::Result<Vec<BestRow>> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for &(rowid, rank) in rows {
        let Some(id) = document_of(c, rowid)? else {
            continue;
        };
        if seen.insert(id) {
            out.push((rowid, id, rank));
            if limit >= 0 && out.len() as i64 >= limit {
                break;
            }
        }
    }
    Ok(out)
}

/// The document whose searchable text row `rowid` is: its id for a first
/// part, the listed document for a live further part, None otherwise.
fn document_of(c: &Connection, rowid: i64) -> rusqlite::Result<Option<i64>> {
    if rowid < PART_ROWID_BASE {
        return Ok(Some(rowid));
    }
    c.prepare_cached("SELECT doc FROM search_parts WHERE rowid = ?1 AND state = 'live'")?
        .query_row([rowid], |r| r.get(0))
        .optional()
}

/// The rank function a search orders by.
const RANK: &str = super::search_rank::NAME;

/// The best `limit` rows for `expr` (all when negative) and their ranks:
/// FTS5's `bm25()` (lower is better), a match in the title weighted
/// [`TITLE_WEIGHT`] times one in the text and one in the author
/// [`AUTHOR_WEIGHT`] times, ties by rowid. SQLite's sorter keeps only
/// `limit`; `leasehold_rank()` (`search_rank.rs`) gives the rows that cannot
/// be among them a rank after all others without reading their length, and
/// every other row `bm25()`'s own score. With stemming, the rows that match
/// the words as written come first whatever their score, so there every row
/// is scored.
fn ranked(c: &Connection, m: &Matching<'_>, limit: i64) -> rusqlite::Result<Ranked> {
    let mut own = vec![Value::Text(m.expr.to_owned()), limit.into()];
    let written_first = match m.written {
        Some(written) => {
            own.push(Value::Text(written.to_owned()));
            "rowid IN (SELECT rowid FROM search_text WHERE search_text MATCH ?3) DESC, "
        }
        None => "",
    };
    let best = if m.written.is_some() { "-1" } else { "?2" };
    let (narrow, values) = narrowing(m.filters, "search_text.rowid", own.len() + 1);
    let mut stmt = c.prepare_cached(&format!(
        "SELECT rowid, {RANK}(search_text, {best}, 1.0, {TITLE_WEIGHT:.1}, {AUTHOR_WEIGHT:.1}) AS r FROM search_text
         WHERE search_text MATCH ?1{narrow} ORDER BY {written_first}r, rowid LIMIT ?2"
    ))?;
    let (rows, first_parts) = super::search_rank::counting_below(PART_ROWID_BASE, || {
        stmt.query_map(params_from_iter(with(&own, values)), |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
    });
    Ok(Ranked {
        rows: rows?,
        // `LIMIT 0` ends the statement before its first row.
        first_parts: (limit != 0).then_some(first_parts),
    })
}

/// What [`ranked`] found: the best rows and their ranks, and how many of
/// all the rows it ranked (every match the condition keeps) are documents'
/// first parts (`None`: it ranked none, asked for none).
struct Ranked {
    rows: Vec<(i64, f64)>,
    first_parts: Option<u64>,
}

/// An FTS5 expression to match, the query as written when stemming widened
/// it (its matches rank first), and the fields that narrow it.
struct Matching<'a> {
    expr: &'a str,
    written: Option<&'a str>,
    filters: &'a [Filter],
}

/// The fields of a search as SQL beside a match (empty without fields):
/// ` AND EXISTS (…)` on the document that the row at `row` (an SQL
/// expression of its rowid) belongs to, its parameters numbered from
/// `first`, returned as values to bind after the statement's own.
fn narrowing(filters: &[Filter], row: &str, first: usize) -> (String, Vec<Value>) {
    if filters.is_empty() {
        return (String::new(), Vec::new());
    }
    let cond = fields::condition(filters, Dialect::Sqlite, first);
    let sql = format!(
        " AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = CASE WHEN {row} < {PART_ROWID_BASE} THEN {row}
             ELSE (SELECT doc FROM search_parts WHERE rowid = {row}) END AND {})",
        cond.sql
    );
    (sql, cond.params.into_iter().map(Value::Text).collect())
}

/// A statement's own values, then `more`.
fn with(own: &[Value], more: Vec<Value>) -> Vec<Value> {
    own.iter().cloned().chain(more).collect()
}

/// Every term a substring (LIKE, case folded for ASCII as LIKE does), in id
/// order: the trigram tokenizer's fallback for short terms. No rank. The
/// scan goes on past the page to count the matching documents.
fn search_like(
    c: &Connection,
    terms: &[String],
    filters: &[Filter],
    search: &Search<'_>,
) -> rusqlite::Result<SearchPage> {
    let patterns = query::like_patterns(terms);
    let (narrow, values) = narrowing(filters, "search_text.rowid", patterns.len() + 1);
    let clauses: Vec<String> = (0..patterns.len())
        .map(|i| format!("body LIKE ?{} ESCAPE '\\'", i + 1))
        .collect();
    let sql = format!(
        "SELECT rowid, path, body FROM search_text WHERE {}{narrow} ORDER BY rowid",
        clauses.join(" AND ")
    );
    let own: Vec<Value> = patterns.into_iter().map(Value::Text).collect();
    let mut stmt = c.prepare(&sql)?;
    let mut rows = stmt.query(params_from_iter(with(&own, values)))?;
    let mut hits = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let end = search.wanted().unwrap_or(usize::MAX);
    while let Some(r) = rows.next()? {
        let rowid: i64 = r.get(0)?;
        let Some(id) = document_of(c, rowid)?.filter(|id| seen.insert(*id)) else {
            continue;
        };
        if seen.len() <= search.offset || seen.len() > end {
            continue;
        }
        let (path, body): (String, String) = (r.get(1)?, r.get(2)?);
        if let Some(doc) = described(c, id)? {
            let snippet = if search.snippets {
                Snippet::from_marked(&query::excerpt(&body, terms))
            } else {
                Snippet::default()
            };
            hits.push(doc.hit(0.0, snippet, path));
        }
    }
    Ok(SearchPage {
        hits,
        total: seen.len() as u64,
    })
}

/// Document `id`'s key and what it says of itself; None once it is gone.
fn described(c: &Connection, id: i64) -> rusqlite::Result<Option<Described>> {
    c.prepare_cached("SELECT doc_key, title, author, doc_date FROM jobs WHERE id = ?1")?
        .query_row([id], |r| {
            Ok(Described {
                key: r.get(0)?,
                title: r.get(1)?,
                author: r.get(2)?,
                date: r.get(3)?,
            })
        })
        .optional()
}
