//! A search query as the user wrote it, in FTS5's syntax (bare words, "quoted
//! phrases", `word*` prefixes, AND / OR / NOT, parentheses), read once into
//! pieces and turned into what an engine runs. Nothing here runs SQL; FTS5
//! itself is the final judge of the syntax on SQLite (its error becomes
//! [`crate::Error::InvalidInput`] in `sqlite/search_index.rs`).
//!
//! Why rewrite at all: `unicode61` cuts words at spaces and punctuation only,
//! so a Korean noun with its particle (`계정이`) is one term, and a Japanese
//! or Thai sentence without spaces is one long term. A bare query term in
//! those scripts is therefore searched as a prefix (`계정` → `계정*`), which
//! finds a word with its particles, and a run of Han, Kana or Thai from its
//! start. Text inside such a run is found only by the trigram tokenizer
//! (docs/DESIGN.md, "The search index").

use super::snippet::{ELLIPSIS, MARK_CLOSE, MARK_OPEN};
use super::tokenizer::Tokenizer;

/// What the engine runs for a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// An FTS5 MATCH expression.
    Match(String),
    /// Every term must occur as a substring (the trigram tokenizer's fallback
    /// for terms shorter than three characters, which its index cannot find).
    Like(Vec<String>),
}

/// One piece of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    /// A bare word (FTS5's "bareword" characters).
    Word(String),
    /// A quoted phrase: its text as written between the quotes (with `""`
    /// for a quote), and as meant.
    Phrase { raw: String, text: String },
    /// Any other character that is not a space: `*`, `(`, `)`, `^`, `:`, `+`…
    Op(char),
    /// One or more spaces.
    Space,
}

/// Why a query cannot be run; the message names what is wrong.
pub(crate) type QueryError = String;

/// The longest query taken, in bytes: far beyond what a person types, short
/// enough that reading it costs nothing.
pub const MAX_QUERY_BYTES: usize = 4096;

/// The most terms (words and phrases) a query may have. FTS5's work grows
/// faster than the number of terms (800 prefix terms took a second, 12,000
/// ran for minutes); people search with a handful.
pub const MAX_QUERY_TERMS: usize = 64;

/// The FTS5 operators written as bare words.
const KEYWORDS: [&str; 4] = ["AND", "OR", "NOT", "NEAR"];

/// FTS5's bareword characters: letters and digits of ASCII, `_`, the
/// substitute character, and everything beyond ASCII.
fn is_bareword_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '\u{1a}' || !c.is_ascii()
}

/// Scripts whose words run on without a space: Korean attaches particles to
/// nouns (`계정이`), and Chinese, Japanese, Thai, Lao, Khmer and Myanmar put
/// no spaces between words at all.
pub(crate) fn is_glued_script(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF | 0x3130..=0x318F | 0xA960..=0xA97F | 0xAC00..=0xD7FF // Hangul
        | 0x2E80..=0x2FDF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF
        | 0x20000..=0x2FA1F // Han
        | 0x3040..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9F // Kana
        | 0x0E00..=0x0EFF // Thai, Lao
        | 0x1780..=0x17FF // Khmer
        | 0x1000..=0x109F // Myanmar
    )
}

/// Cut `query` into pieces; an unclosed quote, an empty query and one
/// beyond [`MAX_QUERY_BYTES`] or [`MAX_QUERY_TERMS`] are errors.
fn pieces(query: &str) -> Result<Vec<Piece>, QueryError> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(format!(
            "the query is {} bytes long; at most {MAX_QUERY_BYTES} are taken",
            query.len()
        ));
    }
    let out = cut_pieces(query)?;
    let terms = out
        .iter()
        .filter(|p| match p {
            Piece::Word(w) => !KEYWORDS.contains(&w.as_str()),
            Piece::Phrase { .. } => true,
            Piece::Op(_) | Piece::Space => false,
        })
        .count();
    if terms > MAX_QUERY_TERMS {
        return Err(format!(
            "the query has {terms} terms; at most {MAX_QUERY_TERMS} are taken"
        ));
    }
    Ok(out)
}

fn cut_pieces(query: &str) -> Result<Vec<Piece>, QueryError> {
    let mut out = Vec::new();
    let mut chars = query.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            out.push(Piece::Space);
        } else if c == '"' {
            let (mut raw, mut text) = (String::new(), String::new());
            loop {
                match chars.next() {
                    None => return Err("a quoted phrase is not closed (a \" is missing)".into()),
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        raw.push_str("\"\"");
                        text.push('"');
                    }
                    Some('"') => break,
                    Some(c) => {
                        raw.push(c);
                        text.push(c);
                    }
                }
            }
            out.push(Piece::Phrase { raw, text });
        } else if is_bareword_char(c) {
            let mut word = c.to_string();
            while let Some(c) = chars.next_if(|c| is_bareword_char(*c)) {
                word.push(c);
            }
            out.push(Piece::Word(word));
        } else {
            out.push(Piece::Op(c));
        }
    }
    if out.iter().all(|p| *p == Piece::Space) {
        return Err("the query is empty".into());
    }
    Ok(out)
}

/// The next piece after `i` that is not a space.
fn next_solid(pieces: &[Piece], i: usize) -> Option<&Piece> {
    pieces[i + 1..].iter().find(|p| **p != Piece::Space)
}

/// Whether the bare word at `i` is a term to search as a prefix: it has a
/// glued-script character and is not already a prefix or a column name.
fn wants_prefix(pieces: &[Piece], i: usize, word: &str) -> bool {
    let already = matches!(pieces.get(i + 1), Some(Piece::Op('*')));
    let column = matches!(next_solid(pieces, i), Some(Piece::Op(':')));
    !already && !column && !KEYWORDS.contains(&word) && word.chars().any(is_glued_script)
}

/// What SQLite runs for `query` under `tokenizer`.
pub(crate) fn plan(query: &str, tokenizer: Tokenizer) -> Result<Plan, QueryError> {
    let pieces = pieces(query)?;
    match tokenizer {
        Tokenizer::Trigram => trigram_plan(query, &pieces),
        Tokenizer::Unicode61 | Tokenizer::PgSimple => Ok(Plan::Match(with_prefixes(&pieces))),
    }
}

/// The query written back with glued-script words made prefixes.
fn with_prefixes(pieces: &[Piece]) -> String {
    let mut out = String::new();
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Word(w) => {
                out.push_str(w);
                if wants_prefix(pieces, i, w) {
                    out.push('*');
                }
            }
            Piece::Phrase { raw, .. } => {
                out.push('"');
                out.push_str(raw);
                out.push('"');
            }
            Piece::Op(c) => out.push(*c),
            Piece::Space => out.push(' '),
        }
    }
    out
}

/// The trigram tokenizer matches substrings of three or more characters; a
/// shorter term matches no row through the index. A plain list of words and
/// phrases with such a term is run as LIKE instead (every term a substring);
/// with operators it is refused, since LIKE cannot say OR or NOT.
fn trigram_plan(query: &str, pieces: &[Piece]) -> Result<Plan, QueryError> {
    let mut terms = Vec::new();
    let mut plain = true;
    for p in pieces {
        match p {
            Piece::Word(w) if !KEYWORDS.contains(&w.as_str()) => terms.push(w.clone()),
            Piece::Phrase { text, .. } => terms.push(text.clone()),
            Piece::Space => {}
            _ => plain = false,
        }
    }
    let short = terms.iter().find(|t| t.chars().count() < 3);
    match (short, plain) {
        (None, _) => Ok(Plan::Match(query.to_owned())),
        (Some(_), true) => Ok(Plan::Like(terms)),
        (Some(t), false) => Err(format!(
            "{t:?} is shorter than 3 characters: with the trigram tokenizer such terms work only \
             in a plain list of words (no AND, OR, NOT, prefixes or parentheses)"
        )),
    }
}

/// `query` as a PostgreSQL tsquery for `to_tsquery('simple', …)`: words and
/// phrases quoted (a quoted phrase becomes `<->`), glued-script words and
/// `word*` prefixes `:*`, AND `&`, OR `|`, NOT `& !`, adjacent terms ANDed.
// PostgreSQL only (feature `postgres`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn pg_tsquery(query: &str) -> Result<String, QueryError> {
    let pieces = pieces(query)?;
    let mut out = String::new();
    // Whether the last thing written ends an operand (a term or a `)`).
    let mut after_operand = false;
    for (i, p) in pieces.iter().enumerate() {
        let operand = match p {
            Piece::Space => continue,
            Piece::Word(w) if w == "AND" => Some("&"),
            Piece::Word(w) if w == "OR" => Some("|"),
            Piece::Word(w) if w == "NOT" => Some("& !"),
            Piece::Word(w) if w == "NEAR" => return Err("NEAR is not supported on PostgreSQL".into()),
            Piece::Op('*') if matches!(i.checked_sub(1).map(|j| &pieces[j]), Some(Piece::Word(_))) => {
                continue
            }
            Piece::Op('(') => {
                if after_operand {
                    out.push_str(" & ");
                }
                out.push('(');
                after_operand = false;
                continue;
            }
            Piece::Op(')') => {
                out.push(')');
                after_operand = true;
                continue;
            }
            Piece::Op(c) => return Err(format!("{c:?} is not supported in a query on PostgreSQL")),
            Piece::Word(_) | Piece::Phrase { .. } => None,
        };
        if let Some(op) = operand {
            out.push(' ');
            out.push_str(op);
            out.push(' ');
            after_operand = false;
            continue;
        }
        if after_operand {
            out.push_str(" & ");
        }
        match p {
            Piece::Word(w) => {
                out.push_str(&pg_quoted(w));
                let star = matches!(pieces.get(i + 1), Some(Piece::Op('*')));
                if star || wants_prefix(&pieces, i, w) {
                    out.push_str(":*");
                }
            }
            Piece::Phrase { text, .. } => out.push_str(&pg_quoted(text)),
            _ => {}
        }
        after_operand = true;
    }
    Ok(out)
}

/// A tsquery lexeme in quotes: `to_tsquery` runs the text inside through the
/// configuration's parser, so a quoted phrase becomes its words joined by `<->`.
// PostgreSQL only (feature `postgres`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn pg_quoted(text: &str) -> String {
    let inner = text.replace('\\', "\\\\").replace('\'', "''");
    format!("'{inner}'")
}

/// LIKE patterns for [`Plan::Like`]'s terms: `%term%`, with `\` escaping.
pub(crate) fn like_patterns(terms: &[String]) -> Vec<String> {
    terms
        .iter()
        .map(|t| {
            let escaped = t.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
            format!("%{escaped}%")
        })
        .collect()
}

/// A snippet made by hand for a LIKE match (FTS5's `snippet()` needs MATCH):
/// about 40 characters either side of the first term found, the term
/// between the engines' marks ([`super::Snippet::from_marked`] reads it).
/// Matching folds ASCII case only, as LIKE does.
pub(crate) fn excerpt(body: &str, terms: &[String]) -> String {
    let folded = body.to_ascii_lowercase();
    let found = terms
        .iter()
        .filter_map(|t| folded.find(&t.to_ascii_lowercase()).map(|at| (at, t.len())))
        .min();
    let Some((at, len)) = found else {
        return body.chars().take(80).collect();
    };
    let before: String = body[..at]
        .chars()
        .rev()
        .take(40)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let after: String = body[at + len..].chars().take(40).collect();
    let lead = if before.len() < at { ELLIPSIS } else { "" };
    let tail = if at + len + after.len() < body.len() {
        ELLIPSIS
    } else {
        ""
    };
    let matched = &body[at..at + len];
    format!("{lead}{before}{}{matched}{}{after}{tail}", MARK_OPEN, MARK_CLOSE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fts(q: &str) -> String {
        match plan(q, Tokenizer::Unicode61).unwrap() {
            Plan::Match(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn glued_script_words_become_prefixes_and_others_stay() {
        assert_eq!(fts("계정"), "계정*");
        assert_eq!(fts("계정* 설정"), "계정* 설정*");
        assert_eq!(fts("东京 AND tokyo"), "东京* AND tokyo");
        assert_eq!(fts("\"계정 설정\" OR (a NOT b)"), "\"계정 설정\" OR (a NOT b)");
        assert_eq!(fts("body: 계정"), "body: 계정*");
        assert_eq!(fts("café"), "café");
    }

    #[test]
    fn an_unclosed_phrase_or_an_empty_query_is_an_error() {
        assert!(plan("\"open", Tokenizer::Unicode61).is_err());
        assert!(plan("   ", Tokenizer::Unicode61).is_err());
    }

    #[test]
    fn queries_beyond_the_caps_are_refused_on_every_engine() {
        let many = "new* ".repeat(MAX_QUERY_TERMS + 1);
        let at_cap = "new* ".repeat(MAX_QUERY_TERMS);
        for tokenizer in [Tokenizer::Unicode61, Tokenizer::Trigram] {
            let why = plan(&many, tokenizer).unwrap_err();
            assert!(why.contains("65 terms; at most 64"), "{why}");
            assert!(plan(&at_cap, tokenizer).is_ok());
            // Operators are no terms.
            let with_ops = format!("{} AND (xxx OR NOT yyy)", "new* ".repeat(MAX_QUERY_TERMS - 2));
            assert!(plan(&with_ops, tokenizer).is_ok());
        }
        assert!(pg_tsquery(&many).is_err());
        let long = format!("\"{}\"", "x".repeat(MAX_QUERY_BYTES));
        assert!(plan(&long, Tokenizer::Unicode61)
            .unwrap_err()
            .contains("bytes long"));
        assert!(pg_tsquery(&long).is_err());
    }

    #[test]
    fn trigram_short_terms_fall_back_to_like_in_a_plain_list_only() {
        assert_eq!(
            plan("계정 \"ab\"", Tokenizer::Trigram).unwrap(),
            Plan::Like(vec!["계정".into(), "ab".into()])
        );
        assert_eq!(
            plan("abc def", Tokenizer::Trigram).unwrap(),
            Plan::Match("abc def".into())
        );
        assert!(plan("ab OR abc", Tokenizer::Trigram).is_err());
        assert_eq!(
            like_patterns(&["a%_\\".into()]),
            vec!["%a\\%\\_\\\\%".to_string()]
        );
    }

    #[test]
    fn tsquery_translation() {
        assert_eq!(pg_tsquery("계정").unwrap(), "'계정':*");
        assert_eq!(pg_tsquery("a b*").unwrap(), "'a' & 'b':*");
        assert_eq!(pg_tsquery("\"big cat\" OR dog").unwrap(), "'big cat' | 'dog'");
        assert_eq!(pg_tsquery("a NOT (b c)").unwrap(), "'a' & ! ('b' & 'c')");
        assert_eq!(pg_tsquery("\"it's\"").unwrap(), "'it''s'");
        assert!(pg_tsquery("a NEAR b").is_err());
        assert!(pg_tsquery("^a").is_err());
    }

    #[test]
    fn excerpts_mark_the_first_term_and_stay_on_one_line() {
        let e = excerpt("line one\nthe 계정이 is here", &["계정".into()]);
        let snippet = crate::store::search::snippet::Snippet::from_marked(&e);
        assert_eq!(snippet.marked("[", "]"), "line one the [계정]이 is here");
        assert_eq!(&snippet.text()[snippet.highlights()[0].clone()], "계정");
    }
}
