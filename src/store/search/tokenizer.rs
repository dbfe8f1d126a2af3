//! How text is cut into searchable terms: the tokenizer a data directory
//! chose, how it is named and recorded, and what it makes of a snippet.

use crate::error::{Error, Result};

/// The meta row that records the data directory's tokenizer. Absent, the
/// engine's default is in force (the one its schema section creates).
pub(crate) const TOKENIZER_META: &str = "search_tokenizer";

/// How text is cut into searchable terms; chosen per data directory when its
/// store is created (`--tokenizer`), changed later only by `leasehold reindex
/// --tokenizer`, since the index must be rebuilt with the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tokenizer {
    /// FTS5's `unicode61 remove_diacritics 2`: words split at spaces and
    /// punctuation, case and diacritics folded. The default on SQLite. Query
    /// terms in Hangul, Han, Kana, Thai, Lao, Khmer and Myanmar are searched
    /// as prefixes, so `계정` finds `계정이`.
    Unicode61,
    /// FTS5's `trigram`: any substring of three or more characters matches;
    /// shorter terms are matched with LIKE (a scan). A larger index.
    Trigram,
    /// PostgreSQL's `simple` configuration (the PostgreSQL edition's only
    /// one): words lower-cased, no stemming, no stop words.
    PgSimple,
}

impl Tokenizer {
    /// The tokenizer named on the command line or in the configuration:
    /// `unicode61` or `trigram`.
    pub fn parse(name: &str) -> Result<Tokenizer> {
        match name.trim().to_ascii_lowercase().as_str() {
            "unicode61" => Ok(Tokenizer::Unicode61),
            "trigram" => Ok(Tokenizer::Trigram),
            other => Err(Error::InvalidInput {
                what: "tokenizer",
                reason: format!("{other:?} is not a tokenizer: use unicode61 (the default) or trigram"),
            }),
        }
    }

    /// The short name (`unicode61`, `trigram`, `simple`).
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::Unicode61 => "unicode61",
            Tokenizer::Trigram => "trigram",
            Tokenizer::PgSimple => "simple",
        }
    }

    /// What the meta row holds, and for SQLite the FTS5 `tokenize` argument.
    pub(crate) fn spec(self) -> &'static str {
        match self {
            Tokenizer::Unicode61 => "unicode61 remove_diacritics 2",
            Tokenizer::Trigram => "trigram",
            Tokenizer::PgSimple => "simple",
        }
    }

    /// The FTS5 options of a table made with this tokenizer.
    ///
    /// Words: a prefix index of 2 characters (a short prefix query, as the
    /// glued-script terms are, reads one list instead of merging every term
    /// it begins; a 3-character index cost 290 bytes a document for a few
    /// milliseconds on 3-character prefixes), and no copy of the text: the
    /// mirror holds it, and a snippet is cut from there
    /// (`sqlite/search_snippets.rs`). `contentless_delete` lets a row be
    /// deleted without its text (FTS5 marks the rowid gone instead of
    /// tokenizing the old text again), `contentless_unindexed` keeps the
    /// result's path and checksum readable.
    ///
    /// Trigram keeps its copy: a term shorter than three characters is
    /// matched with LIKE over the stored text. It answers prefixes as
    /// substrings already.
    ///
    /// `contentless_unindexed` came with SQLite 3.47 (`contentless_delete`
    /// with 3.43): a build linked with an older system SQLite (the `sqlite`
    /// feature) keeps the copy, and its snippets are cut from it as before.
    pub(crate) fn fts5_options(self) -> String {
        match self {
            Tokenizer::Unicode61 if rusqlite::version_number() >= CONTENTLESS_SINCE => format!(
                "prefix = '2', content = '', contentless_delete = 1, contentless_unindexed = 1, tokenize = '{}'",
                self.spec()
            ),
            Tokenizer::Unicode61 => format!("prefix = '2', tokenize = '{}'", self.spec()),
            Tokenizer::Trigram | Tokenizer::PgSimple => format!("tokenize = '{}'", self.spec()),
        }
    }

    /// The tokenizer a meta row or a table definition names.
    pub(crate) fn from_spec(spec: &str) -> Option<Tokenizer> {
        [Tokenizer::Unicode61, Tokenizer::Trigram, Tokenizer::PgSimple]
            .into_iter()
            .find(|t| t.spec() == spec.trim())
    }
}

impl std::fmt::Display for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The first SQLite (3.47.0) whose FTS5 has every option of the word index
/// that keeps no copy of its texts ([`Tokenizer::fts5_options`]).
const CONTENTLESS_SINCE: i32 = 3_047_000;

/// About how many terms a snippet shows: words, or for the trigram
/// tokenizer, characters (each a trigram; 64 is FTS5's most).
pub(crate) fn snippet_tokens(tokenizer: Tokenizer) -> i64 {
    match tokenizer {
        Tokenizer::Trigram => 64,
        Tokenizer::Unicode61 | Tokenizer::PgSimple => 16,
    }
}
