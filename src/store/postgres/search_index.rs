//! The search index on PostgreSQL (DESIGN §12): the table `search_text`
//! (schema.pg.sql, version 5) with a stored tsvector in the `simple`
//! configuration and a GIN index; `ts_rank` ranks and `ts_headline` marks.
//!
//! The writes take the caller's transaction (the fenced completion's, or the
//! scan's that marks sources gone), as on SQLite, so a refused completion
//! never reaches the index. They run under the document's row lock, which
//! the completion's UPDATE (or the gone scan's) holds, so two writers of one
//! document's text take turns.

use std::borrow::Cow;

use ::postgres::error::SqlState;
use ::postgres::types::ToSql;
use ::postgres::{Client, Transaction};

use crate::store::completion::Completion;
use crate::store::postgres::conn::{Fail, Sql};
use crate::store::search::fields::{self, Dialect, Filter};
use crate::store::search::stemming::{Stemming, STEMMING_META};
use crate::store::search::{
    stemmed_tsquery, Described, Found, IndexCheck, IndexDoc, Labels, Search, SearchPage, Snippet,
    AUTHOR_WEIGHT, MARK_CLOSE, MARK_OPEN, TITLE_WEIGHT,
};

/// How much of a text `ts_headline` reads for a snippet (the tsvector holds
/// no more; see schema.pg.sql).
const SEARCHABLE_CHARS: i32 = 200_000;

/// `c` as the engine should write it: without its text for the index when
/// indexing is off, so that the accepted result takes the previous text out.
pub(crate) fn gated(mut c: Completion<'_>, index_on: bool) -> Completion<'_> {
    if !index_on {
        c.index = None;
    }
    c
}

/// Make `c`'s text document `id`'s searchable text (or, without text, take
/// the previous one out). Called in the transaction that accepted `c`.
pub(crate) fn accepted(tx: &mut Transaction<'_>, id: i64, c: &Completion<'_>) -> Sql<()> {
    match &c.index {
        Some(text) => {
            let labels = match c.labels.as_deref() {
                Some(labels) => labels.clone(),
                None => indexed_labels_of(tx, id)?,
            };
            put(tx, id, (&c.result_path, &c.checksum), text, &labels)
        }
        None => {
            tx.execute("DELETE FROM search_text WHERE job_id = $1", &[&id])?;
            Ok(())
        }
    }
}

/// `text` as PostgreSQL's text can hold it: NUL is the one character it
/// cannot (the mirror's copy keeps them), so each becomes a space.
pub(crate) fn without_nul(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', " "))
    } else {
        Cow::Borrowed(text)
    }
}

fn put(
    tx: &mut Transaction<'_>,
    id: i64,
    (path, checksum): (&str, &str),
    text: &str,
    labels: &Labels,
) -> Sql<()> {
    let body = without_nul(text);
    tx.execute(
        "INSERT INTO search_text (job_id, body, path, checksum, title, author) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (job_id) DO UPDATE
         SET body = excluded.body, path = excluded.path, checksum = excluded.checksum,
             title = excluded.title, author = excluded.author",
        &[&id, &body.as_ref(), &path, &checksum, &labels.title, &labels.author],
    )?;
    Ok(())
}

/// The title and author document `id` is indexed with, from its row (which
/// the accepting transaction has just written): see [`Labels::of`].
fn indexed_labels_of(tx: &mut Transaction<'_>, id: i64) -> Sql<Labels> {
    let row = tx.query_opt("SELECT doc_key, title, author FROM jobs WHERE id = $1", &[&id])?;
    row.as_ref().map_or(Ok(Labels::default()), labels_of_row)
}

/// The labels of a row of `doc_key, title, author`.
fn labels_of_row(row: &::postgres::Row) -> Sql<Labels> {
    let (key, title, author): (String, Option<String>, Option<String>) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    Ok(Labels::of(&key, title.as_deref(), author.as_deref()))
}

/// Take the documents `ids` out of the index (their sources went away).
pub(crate) fn remove(tx: &mut Transaction<'_>, ids: &[i64]) -> Sql<()> {
    if !ids.is_empty() {
        tx.execute("DELETE FROM search_text WHERE job_id = ANY($1)", &[&ids])?;
    }
    Ok(())
}

/// Empty the index (`reindex`: the configuration never changes here).
pub(crate) fn reset(tx: &mut Transaction<'_>) -> Sql<()> {
    tx.execute("DELETE FROM search_text", &[])?;
    Ok(())
}

/// [`crate::store::sqlite::search_index::put_if_accepted`] on PostgreSQL: each
/// text goes in only if its document's row (locked first) still has that
/// accepted result.
pub(crate) fn put_if_accepted(tx: &mut Transaction<'_>, docs: &[IndexDoc<'_>]) -> Sql<usize> {
    let mut n = 0;
    for d in docs {
        let current = tx.query_opt(
            "SELECT doc_key, title, author FROM jobs WHERE id = $1 AND result_path = $2 AND checksum = $3 FOR UPDATE",
            &[&d.id, &d.result_path, &d.checksum],
        )?;
        if let Some(row) = current {
            let labels = labels_of_row(&row)?;
            put(tx, d.id, (d.result_path, d.checksum), d.text, &labels)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Rows that are not their document's accepted text (see the SQLite twin).
const NOT_ACCEPTED: &str = "SELECT s.job_id, j.doc_key, j.result_path IS NULL
     FROM search_text s LEFT JOIN jobs j ON j.id = s.job_id
     WHERE j.result_path IS NULL OR s.path IS DISTINCT FROM j.result_path
        OR s.checksum IS DISTINCT FROM j.checksum";

/// Delete every row that is not its document's accepted text; how many.
pub(crate) fn prune(tx: &mut Transaction<'_>) -> Sql<usize> {
    let sql = format!("DELETE FROM search_text WHERE job_id IN (SELECT job_id FROM ({NOT_ACCEPTED}) w)");
    Ok(tx.execute(sql.as_str(), &[])? as usize)
}

/// The index against the accepted results, with the lines of the SQLite check.
pub(crate) fn check(c: &mut Client) -> Sql<IndexCheck> {
    let count = |c: &mut Client, sql: &str| -> Sql<u64> {
        let n: i64 = c.query_one(sql, &[])?.try_get(0)?;
        Ok(n.max(0) as u64)
    };
    let mut out = IndexCheck {
        tokenizer: Some(crate::store::search::Tokenizer::PgSimple),
        accepted: count(c, "SELECT count(*) FROM jobs WHERE result_path IS NOT NULL")?,
        rows: count(c, "SELECT count(*) FROM search_text")?,
        ..IndexCheck::default()
    };
    let missing = c.query(
        "SELECT doc_key FROM jobs j WHERE result_path IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM search_text s WHERE s.job_id = j.id) ORDER BY id",
        &[],
    )?;
    for r in &missing {
        out.add_missing(&r.try_get::<_, String>(0)?);
    }
    for r in &c.query(&format!("{NOT_ACCEPTED} ORDER BY s.job_id"), &[])? {
        out.add_wrong(r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
    }
    Ok(out)
}

/// The fields of a search as SQL beside a match on `search_text s` (empty
/// without fields), its parameters numbered from `first`.
fn narrowing(filters: &[Filter], first: usize) -> fields::Condition {
    if filters.is_empty() {
        return fields::Condition::default();
    }
    let cond = fields::condition(filters, Dialect::Postgres, first);
    fields::Condition {
        sql: format!(
            " AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = s.job_id AND {})",
            cond.sql
        ),
        params: cond.params,
    }
}

/// The page of matches asked for, then a headline for each: in a
/// subquery, so that `ts_headline` (which reads the text) runs on the hits
/// only, not on every match; then how many documents match in all.
pub(crate) fn search(
    tx: &mut Transaction<'_>,
    search: &Search<'_>,
    time_limit: std::time::Duration,
) -> Sql<Found> {
    let planned = match search.pg_plan() {
        Ok(planned) => planned,
        Err(why) => return Ok(Found::BadQuery(why)),
    };
    let filters = planned.filters;
    // The server stops the statement at the limit (57014, query_canceled);
    // SET LOCAL keeps the setting to the caller's transaction.
    let started = std::time::Instant::now();
    let ms = time_limit.as_millis().clamp(1, i32::MAX as u128);
    tx.batch_execute(&format!("SET LOCAL statement_timeout = {ms}"))?;
    let written = planned.tsquery;
    let widened = match planned.words {
        Some(words) => stemmed(tx, &words, search.stemming),
        None => Ok(None),
    };
    let widened = match widened {
        Ok(widened) => widened,
        Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => return Ok(Found::TimedOut(time_limit)),
        Err(e) => return Err(Fail::Pg(e)),
    };
    let tsquery = widened.as_ref().unwrap_or(&written);
    // NULL: no limit.
    let limit = search.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
    let offset = i64::try_from(search.offset).unwrap_or(i64::MAX);
    let options = format!(
        "StartSel=\"{MARK_OPEN}\", StopSel=\"{MARK_CLOSE}\", MaxWords=16, MinWords=6, ShortWord=0, \
         MaxFragments=1, FragmentDelimiter=…"
    );
    let mut values: Vec<&(dyn ToSql + Sync)> = vec![
        tsquery,
        &limit,
        &options,
        &SEARCHABLE_CHARS,
        &offset,
        &search.snippets,
    ];
    // Widened by stemming, the words as written ($7) rank first; else every
    // match is written alike and nothing is tested per row.
    let as_written = match widened {
        Some(_) => {
            values.push(&written);
            "s.tsv @@ to_tsquery('simple', $7)"
        }
        None => "TRUE",
    };
    let narrow = narrowing(&filters, values.len() + 1);
    values.extend(narrow.params.iter().map(|p| p as &(dyn ToSql + Sync)));
    let rows = tx.query(
        &format!(
            "SELECT j.doc_key, best.path, best.rank,
                CASE WHEN $6 THEN ts_headline('simple', left(best.body, $4), to_tsquery('simple', $1), $3)
                     ELSE '' END, j.title, j.author, j.doc_date
           FROM (SELECT s.job_id, s.path, s.body,
                        ts_rank('{{0.1, 0.2, {author_weight:.1}, {title_weight:.1}}}', s.tsv, q) AS rank,
                        {as_written} AS as_written
                   FROM search_text s, to_tsquery('simple', $1) q
                  WHERE s.tsv @@ q{}
                  ORDER BY as_written DESC, rank DESC, s.job_id LIMIT $2 OFFSET $5) best
           JOIN jobs j ON j.id = best.job_id
          ORDER BY best.as_written DESC, best.rank DESC, best.job_id",
            narrow.sql,
            // The text's label D weighs 0.1 (PostgreSQL's default); the
            // title's A and the author's B that times their weights.
            title_weight = 0.1 * TITLE_WEIGHT,
            author_weight = 0.1 * AUTHOR_WEIGHT,
        ),
        &values,
    );
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => return Ok(Found::TimedOut(time_limit)),
        Err(e) if is_query_error(&e) => {
            let why = e
                .as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_owned());
            return Ok(Found::BadQuery(why));
        }
        Err(e) => return Err(Fail::Pg(e)),
    };
    let mut hits = Vec::with_capacity(rows.len());
    for r in &rows {
        let rank: f32 = r.try_get(2)?;
        let snippet: String = r.try_get(3)?;
        let doc = Described {
            key: r.try_get(0)?,
            title: r.try_get(4)?,
            author: r.try_get(5)?,
            date: r.try_get(6)?,
        };
        hits.push(doc.hit(f64::from(rank), Snippet::from_marked(&snippet), r.try_get(1)?));
    }
    // A page not cut by its limit (and not past the end) holds every match
    // from the offset on; else count, within what is left of the limit.
    let cut = limit.is_some_and(|l| rows.len() as i64 >= l);
    let total = if !cut && (!rows.is_empty() || offset == 0) {
        search.offset as u64 + rows.len() as u64
    } else {
        let left = time_limit
            .saturating_sub(started.elapsed())
            .as_millis()
            .clamp(1, i32::MAX as u128);
        tx.batch_execute(&format!("SET LOCAL statement_timeout = {left}"))?;
        let narrow = narrowing(&filters, 2);
        let mut values: Vec<&(dyn ToSql + Sync)> = vec![tsquery];
        values.extend(narrow.params.iter().map(|p| p as &(dyn ToSql + Sync)));
        let counted = tx.query_one(
            &format!(
                "SELECT count(*) FROM search_text s WHERE s.tsv @@ to_tsquery('simple', $1){}",
                narrow.sql
            ),
            &values,
        );
        match counted {
            Ok(row) => u64::try_from(row.try_get::<_, i64>(0)?).unwrap_or(0),
            Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => return Ok(Found::TimedOut(time_limit)),
            Err(e) => return Err(Fail::Pg(e)),
        }
    };
    Ok(Found::Hits(SearchPage { hits, total }))
}

/// The tsquery of `words` with each word's other forms the index holds, when
/// stemming is on (`asked`, else as the data directory records) and some
/// word has one.
fn stemmed(
    tx: &mut Transaction<'_>,
    words: &crate::store::search::language::Node,
    asked: Option<Stemming>,
) -> Result<Option<String>, ::postgres::Error> {
    let stemming = match asked {
        Some(asked) => asked,
        None => {
            let row = tx.query_opt("SELECT value FROM meta WHERE name = $1", &[&STEMMING_META])?;
            let recorded: Option<String> = row.map(|r| r.try_get(0)).transpose()?;
            Stemming::recorded(recorded.as_deref())
        }
    };
    if stemming == Stemming::Off {
        return Ok(None);
    }
    stemmed_tsquery(words, &mut |forms: &[String]| held_forms(tx, forms))
}

/// Of the candidate `forms` (ASCII letters only, see `stemming.rs`), those
/// the index holds: one probe of the GIN index each, which stops at the
/// first document.
fn held_forms(tx: &mut Transaction<'_>, forms: &[String]) -> Result<Vec<String>, ::postgres::Error> {
    let rows = tx.query(
        "SELECT f FROM unnest($1::TEXT[]) WITH ORDINALITY AS u (f, n)
          WHERE EXISTS (SELECT 1 FROM search_text s WHERE s.tsv @@ to_tsquery('simple', quote_literal(f)))
          ORDER BY n",
        &[&forms],
    )?;
    rows.iter().map(|r| r.try_get(0)).collect()
}

/// `to_tsquery` refuses what it cannot read as a syntax error.
fn is_query_error(e: &::postgres::Error) -> bool {
    e.code().is_some_and(|c| *c == SqlState::SYNTAX_ERROR)
}
