//! The search index over the accepted text (DESIGN §12): what a hit is, the
//! tokenizer a data directory chose, what `doctor` finds wrong with the index,
//! and how a query is read.
//!
//! # Layout
//! - `mod.rs`: the public vocabulary ([`Hit`], [`IndexCheck`], [`IndexDoc`],
//!   [`Search`], [`SearchPage`]).
//! - `tokenizer.rs`: how text is cut into terms ([`Tokenizer`]), its name
//!   and meta row; `snippet.rs`: a hit's [`Snippet`] and the marks engines
//!   put around a matched term.
//! - `language.rs`: the query language people type (the default): words,
//!   phrases, prefixes, exclusions, OR, groups, read into a tree and written
//!   as an FTS5 expression or a PostgreSQL tsquery. Pure: no SQL is run there.
//! - `query.rs`: a query in FTS5's own syntax (`--fts`), read once into terms
//!   and operators, and turned into what each engine runs (an FTS5 MATCH, a
//!   LIKE fallback, a PostgreSQL tsquery); the caps both languages share.
//! - `stemming.rs`: a word's other forms (English Snowball stems), looked up
//!   in the index's vocabulary at query time.
//! - `parts.rs`: a long text cut into the parts the index takes one at a
//!   time, so memory and write transactions stay bounded.
//!
//! Each engine's statements live in its driver, beside its other SQL:
//! `sqlite/search_index.rs` (FTS5: written inside the completion's
//! transaction, further parts staged before it, ranked by FTS5's own
//! `bm25()`, checked), `sqlite/search_table.rs` (the table made, its
//! tokenizer chosen, reset for another, remade without reading its pages
//! when they are damaged, which `sqlite/search_salvage.rs` runs) and
//! `postgres/search_index.rs` (a `tsvector` column and its GIN index).
//!
//! The one rule: the index holds, for every document with an accepted result
//! (`jobs.result_path` set), that result's text, and nothing else. The writes
//! that keep it so are made inside the transactions that change the accepted
//! result (the fenced completion, the source going away), so a refused
//! completion can never reach the index.

pub(crate) mod fields;
pub(crate) mod language;
pub(crate) mod parts;
pub(crate) mod query;
pub(crate) mod snippet;
pub(crate) mod stemming;
pub(crate) mod tokenizer;

pub use snippet::{Snippet, ELLIPSIS};
pub(crate) use snippet::{MARK_CLOSE, MARK_OPEN};
pub use stemming::Stemming;
pub use tokenizer::Tokenizer;
pub(crate) use tokenizer::{snippet_tokens, TOKENIZER_META};

use std::time::Duration;

use crate::error::{Error, Result};

/// What a search found, or why the query could not run.
#[derive(Debug)]
pub(crate) enum Found {
    Hits(SearchPage),
    /// The query is malformed; the message says how.
    BadQuery(String),
    /// The search ran past its time limit and was stopped.
    TimedOut(std::time::Duration),
}

impl Found {
    /// The hits; a malformed query as [`Error::InvalidInput`], one stopped
    /// at its time limit as [`Error::SearchTimedOut`], each naming it (its
    /// start, when it is long).
    pub(crate) fn into_page(self, query: &str) -> Result<SearchPage> {
        match self {
            Found::Hits(hits) => Ok(hits),
            Found::BadQuery(why) => Err(Error::InvalidInput {
                what: "search query",
                reason: format!("{}: {why}", shown(query)),
            }),
            Found::TimedOut(limit) => Err(Error::SearchTimedOut {
                query: shown(query),
                limit,
            }),
        }
    }
}

/// `query` quoted for a message: at most 60 characters of it.
fn shown(query: &str) -> String {
    const SHOWN: usize = 60;
    match query.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{:?}…", &query[..end]),
        None => format!("{query:?}"),
    }
}

/// The language a query is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuerySyntax {
    /// People's language (the default): words (each searched as the phrase
    /// the index cuts it into, so `qemu-img`, `C++` and URLs work as
    /// written), `"phrases"`, `prefix*`, `-word` or `NOT word` to exclude,
    /// `OR` or `|` (binding tighter than the space), `(groups)`.
    #[default]
    Plain,
    /// SQLite FTS5's own syntax, passed on as written (on PostgreSQL
    /// translated to a tsquery): for what the plain language cannot say,
    /// such as `NEAR`.
    Fts5,
}

/// One search: the query, its language, and which of the matches, best
/// first, to return.
///
/// ```
/// use leasehold::{QuerySyntax, Search};
/// let page = Search::new("qemu-img -windows").offset(20).limit(20);
/// let raw = Search::new("NEAR(a b)").syntax(QuerySyntax::Fts5);
/// # let _ = (page, raw);
/// ```
#[derive(Debug, Clone)]
pub struct Search<'q> {
    pub(crate) query: &'q str,
    pub(crate) syntax: QuerySyntax,
    pub(crate) offset: usize,
    pub(crate) limit: Option<usize>,
    pub(crate) snippets: bool,
    pub(crate) time_limit: Option<Duration>,
    pub(crate) stemming: Option<Stemming>,
    /// The folders keys are made from, each with its key prefix
    /// ([`Search::folders`]).
    pub(crate) folders: &'q [(std::path::PathBuf, String)],
    /// Where the results are, for snippets of an index that keeps no copy
    /// of its texts ([`Search::mirror`]).
    pub(crate) mirror: Option<&'q crate::mirror::Mirror>,
}

impl<'q> Search<'q> {
    /// `query` in people's language; the first 20 matches, with snippets,
    /// stopped after [`crate::StoreOptions::search_timeout`].
    pub fn new(query: &'q str) -> Search<'q> {
        Search {
            query,
            syntax: QuerySyntax::Plain,
            offset: 0,
            limit: Some(20),
            snippets: true,
            time_limit: None,
            stemming: None,
            folders: &[],
            mirror: None,
        }
    }

    /// Read the query in this language.
    pub fn syntax(mut self, syntax: QuerySyntax) -> Self {
        self.syntax = syntax;
        self
    }

    /// Skip the best `n` matches (the next page).
    pub fn offset(mut self, n: usize) -> Self {
        self.offset = n;
        self
    }

    /// Return at most `n` matches.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Return every match after the offset.
    pub fn unlimited(mut self) -> Self {
        self.limit = None;
        self
    }

    /// Leave the snippets empty (a list of files needs none, and each costs
    /// a read of the text).
    pub fn without_snippets(mut self) -> Self {
        self.snippets = false;
        self
    }

    /// Stop the search after `limit` instead of the store's
    /// [`crate::StoreOptions::search_timeout`].
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = Some(limit);
        self
    }

    /// The folders the keys were made from, each with what its keys start
    /// with (`DirSource::key_prefix`: nothing for the folder keyed relative
    /// to it): `dir:` with a full path inside one of them then takes that
    /// folder's keys under it, whichever way they are written.
    pub fn folders(mut self, folders: &'q [(std::path::PathBuf, String)]) -> Self {
        self.folders = folders;
        self
    }

    /// The mirror the accepted results are in. SQLite's word index keeps no
    /// copy of the texts (the mirror holds them), so its snippets are cut
    /// from the result files there; without it, its hits come without one.
    pub fn mirror(mut self, mirror: &'q crate::mirror::Mirror) -> Self {
        self.mirror = Some(mirror);
        self
    }

    /// Stem the words (or not) as `stemming` says instead of as the data
    /// directory records ([`crate::StoreOptions::stemming`]).
    pub fn stemming(mut self, stemming: Stemming) -> Self {
        self.stemming = Some(stemming);
        self
    }

    /// The query as written.
    pub fn query(&self) -> &str {
        self.query
    }

    /// What SQLite runs for this search on an index cut by `tokenizer`,
    /// the fields that narrow it, and the words stemming may widen (a query
    /// in people's language on a word index).
    pub(crate) fn sqlite_plan(&self, tokenizer: Tokenizer) -> std::result::Result<SqlitePlan, String> {
        match self.syntax {
            QuerySyntax::Fts5 => Ok(SqlitePlan {
                plan: query::plan(self.query, tokenizer)?,
                filters: Vec::new(),
                words: None,
            }),
            QuerySyntax::Plain => {
                let q = language::read(self.query, tokenizer).map_err(|e| e.to_string())?;
                let (plan, words) = match tokenizer {
                    Tokenizer::Trigram => (language::trigram_plan(&q.root)?, None),
                    _ => (query::Plan::Match(language::fts5(&q.root, true)), Some(q.root)),
                };
                Ok(SqlitePlan {
                    plan,
                    filters: fields::in_folders(q.filters, self.folders),
                    words,
                })
            }
        }
    }

    /// The tsquery PostgreSQL runs for this search, the fields that narrow
    /// it, and the words stemming may widen (people's language).
    // PostgreSQL only (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn pg_plan(&self) -> std::result::Result<PgPlan, String> {
        match self.syntax {
            QuerySyntax::Fts5 => Ok(PgPlan {
                tsquery: query::pg_tsquery(self.query)?,
                filters: Vec::new(),
                words: None,
            }),
            QuerySyntax::Plain => language::read(self.query, Tokenizer::PgSimple)
                .map(|q| PgPlan {
                    tsquery: language::tsquery(&q.root),
                    filters: fields::in_folders(q.filters, self.folders),
                    words: Some(q.root),
                })
                .map_err(|e| e.to_string()),
        }
    }

    /// The most rows to rank: the offset and the page.
    pub(crate) fn wanted(&self) -> Option<usize> {
        self.limit.map(|l| l.saturating_add(self.offset))
    }
}

/// What SQLite runs for a search ([`Search::sqlite_plan`]).
pub(crate) struct SqlitePlan {
    pub plan: query::Plan,
    pub filters: Vec<fields::Filter>,
    /// The query read, when stemming may widen its words.
    pub words: Option<language::Node>,
}

/// What PostgreSQL runs for a search ([`Search::pg_plan`]).
// PostgreSQL only (feature `postgres`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) struct PgPlan {
    pub tsquery: String,
    pub filters: Vec<fields::Filter>,
    /// The query read, when stemming may widen its words.
    pub words: Option<language::Node>,
}

/// The tsquery of `words` widened by stemming through `probe`, which keeps
/// the candidate forms the index holds; None when no word has another form
/// there.
// PostgreSQL only (feature `postgres`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn stemmed_tsquery<E>(
    words: &language::Node,
    probe: &mut stemming::Probe<'_, E>,
) -> std::result::Result<Option<String>, E> {
    Ok(stemming::expand_with(words, stemming::Lookup::Probe(probe))?.map(|n| language::tsquery(&n)))
}

/// The FTS5 expression of `words` widened by stemming
/// ([`stemming::expand`]), or None when no word has another form in the
/// index. `vocabulary` lists the index's terms in a range, in order.
pub(crate) fn stemmed_fts5<E>(
    words: &language::Node,
    vocabulary: &mut stemming::Vocabulary<'_, E>,
) -> std::result::Result<Option<String>, E> {
    Ok(stemming::expand(words, vocabulary)?.map(|n| language::fts5(&n, true)))
}

/// One page of a search's matches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchPage {
    /// The matches asked for, best first.
    pub hits: Vec<Hit>,
    /// How many documents match in all.
    pub total: u64,
}

/// One search result.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The document's key.
    pub key: String,
    /// How well it matched, higher is better: minus FTS5's bm25 on SQLite,
    /// `ts_rank` on PostgreSQL. 0 for a match found by the trigram
    /// tokenizer's LIKE fallback, which has no rank. With stemming, the
    /// documents that match the words as written come first, each group
    /// by score.
    pub score: f64,
    /// A short piece of the text around the match.
    pub snippet: Snippet,
    /// Where the text lives: the accepted result, relative to the mirror root.
    pub result_path: String,
    /// The title the document gives itself, if it gives one (see
    /// [`crate::Completion::title`]).
    pub title: Option<String>,
    /// Who it says wrote it ([`crate::Completion::author`]).
    pub author: Option<String>,
    /// The date it gives itself, `YYYY-MM-DD` (or `YYYY-MM`, `YYYY`)
    /// ([`crate::Completion::date`]).
    pub date: Option<String>,
}

/// A document found, as its row describes it: its key, and what it says of
/// itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct Described {
    pub key: String,
    pub title: Option<String>,
    pub author: Option<String>,
    pub date: Option<String>,
}

impl Described {
    /// The hit of this document.
    pub(crate) fn hit(self, score: f64, snippet: Snippet, result_path: String) -> Hit {
        Hit {
            key: self.key,
            score,
            snippet,
            result_path,
            title: self.title,
            author: self.author,
            date: self.date,
        }
    }
}

/// What the index's `title` and `author` columns hold for a document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Labels {
    pub title: Option<String>,
    pub author: Option<String>,
}

impl Labels {
    /// The labels of document `key` whose own title and author are these
    /// (the title else its file name: [`indexed_title`]).
    pub(crate) fn of(key: &str, title: Option<&str>, author: Option<&str>) -> Labels {
        Labels {
            title: indexed_title(key, title).map(str::to_owned),
            author: author.map(str::to_owned),
        }
    }

    /// (title, author), borrowed.
    pub(crate) fn as_refs(&self) -> (Option<&str>, Option<&str>) {
        (self.title.as_deref(), self.author.as_deref())
    }
}

/// How much more a match in a document's title counts than one in its text:
/// FTS5's `bm25()` weight of the `title` column, and the ratio of
/// PostgreSQL's default weights of the labels `A` (title) and `D` (text).
pub(crate) const TITLE_WEIGHT: f64 = 10.0;

/// How much more a match in the document's author counts than one in its
/// text: FTS5's weight of the `author` column, and the ratio of PostgreSQL's
/// default weights of the labels `B` (author) and `D` (text).
pub(crate) const AUTHOR_WEIGHT: f64 = 4.0;

// PostgreSQL gives the title's label `A` 0.1 times this (the text's `D`
// weighs 0.1), and `ts_rank` refuses a weight above 1.
const _: () = assert!(TITLE_WEIGHT > 1.0 && TITLE_WEIGHT <= 10.0);
const _: () = assert!(AUTHOR_WEIGHT > 1.0 && AUTHOR_WEIGHT <= 10.0);

/// What the index's `title` column holds for the document `key`: the title
/// it gives itself, else its file name, so that a document without a title
/// is found by its name and every document ranks a match in its name above
/// one in its text.
pub(crate) fn indexed_title<'a>(key: &'a str, own: Option<&'a str>) -> Option<&'a str> {
    own.or_else(|| file_name(key))
}

/// The file name a key ends with (`Q3.pdf` for `reports/Q3.pdf`); None for
/// a key that spells its name's bytes in hexadecimal (`hex:…`, a name that
/// is not UTF-8), which holds no word.
pub(crate) fn file_name(key: &str) -> Option<&str> {
    if key.starts_with("hex:") {
        return None;
    }
    key.rsplit(['/', '\\']).next().filter(|name| !name.is_empty())
}

/// What `doctor` found comparing the index with the accepted results.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexCheck {
    /// The tokenizer in force.
    pub tokenizer: Option<Tokenizer>,
    /// Documents with an accepted result.
    pub accepted: u64,
    /// Rows in the index.
    pub rows: u64,
    /// Accepted results that are not in the index (not searchable).
    pub missing: u64,
    /// Index rows whose text is from another result than the accepted one.
    pub stale: u64,
    /// Index rows of documents that have no accepted result.
    pub extra: u64,
    /// Up to [`CHECK_EXAMPLES`] of the above, one line each, naming the
    /// document by key (or by id when it has no row).
    pub examples: Vec<String>,
}

impl IndexCheck {
    /// An accepted result whose text is not in the index (document `key`).
    pub(crate) fn add_missing(&mut self, key: &str) {
        self.missing += 1;
        self.example(|| format!("{key:?}: its accepted text is not in the search index"));
    }

    /// An index row that is not its document's accepted text: row `id`, the
    /// document's `key` (none when the row has no document), `no_result`
    /// when the document has no accepted result (else the row is another
    /// result's text).
    pub(crate) fn add_wrong(&mut self, id: i64, key: Option<String>, no_result: bool) {
        if no_result {
            self.extra += 1;
            let who = key.map_or_else(|| format!("document id {id}"), |k| format!("{k:?}"));
            self.example(|| format!("{who}: in the search index without an accepted result"));
        } else {
            self.stale += 1;
            let key = key.unwrap_or_default();
            self.example(|| {
                format!("{key:?}: the search index holds the text of another result than the accepted one")
            });
        }
    }

    /// Keep `line` while there are fewer than [`CHECK_EXAMPLES`].
    fn example(&mut self, line: impl FnOnce() -> String) {
        if self.examples.len() < CHECK_EXAMPLES {
            self.examples.push(line());
        }
    }

    /// Whether the index holds exactly the accepted texts.
    pub fn is_healthy(&self) -> bool {
        self.missing == 0 && self.stale == 0 && self.extra == 0
    }
}

/// How many problem lines an [`IndexCheck`] keeps.
pub const CHECK_EXAMPLES: usize = 20;

/// One accepted text to put back into the index (`leasehold reindex`). It
/// goes in only if the document's accepted result is still `result_path`
/// with `checksum`: a completion that accepted a newer one meanwhile has
/// indexed its own text.
#[derive(Debug, Clone, Copy)]
pub struct IndexDoc<'a> {
    /// The document's id.
    pub id: i64,
    /// The accepted result the text was read from.
    pub result_path: &'a str,
    /// Its SHA-256.
    pub checksum: &'a str,
    /// The text.
    pub text: &'a str,
}

/// Whether table `name` belongs to the search index (the FTS5 table, a
/// shadow table of it, or `search_parts`): damage there is mended by
/// rebuilding the index from the mirror.
pub fn is_index_table(name: &str) -> bool {
    name == "search_text" || name.starts_with("search_text_") || name == "search_parts"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(s: &str) -> String {
        s.replace('[', MARK_OPEN).replace(']', MARK_CLOSE)
    }

    #[test]
    fn snippets_read_their_marks_as_byte_ranges_on_one_trimmed_line() {
        let s = Snippet::from_marked(&marks("  a [계정]이\n[b]  "));
        assert_eq!(s.text(), "a 계정이 b");
        assert_eq!(s.highlights(), &[2..8, 12..13]);
        assert_eq!(s.marked("<", ">"), "a <계정>이 <b>");
        // Only spaces and controls, a mark left open, one never opened.
        assert_eq!(Snippet::from_marked(" \u{7}\n ").text(), "");
        assert_eq!(
            Snippet::from_marked(&marks("  [ ]  ")).highlights(),
            &[] as &[std::ops::Range<usize>]
        );
        assert_eq!(
            Snippet::from_marked(&marks("x [y")).highlights(),
            &[] as &[std::ops::Range<usize>]
        );
        assert_eq!(Snippet::from_marked(&marks("x] y")).text(), "x y");
    }
}
