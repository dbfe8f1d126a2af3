//! The query language people type, the default: words, `"phrases"`,
//! `prefix*`, `-exclusions` (or `NOT`), `OR` (or `|`), parentheses; `AND`
//! may be written but is what a space means. Read once into a tree
//! ([`Node`]), then written as what an engine runs.
//!
//! Why a language of our own in front of FTS5's: in FTS5's syntax a hyphen,
//! a dot, a colon or a plus is an operator or an error, so `qemu-img`,
//! `libffi.so`, `C++` or a URL fail with SQLite's wording. Here every word is
//! handed to the index as a quoted string, which the index's own tokenizer
//! cuts as it cut the documents: `qemu-img` is the phrase `qemu img`, and a
//! word with nothing the tokenizer keeps (`+`, `—`) is left out.
//!
//! `OR` binds tighter than the space between words, as in Recoll and web
//! search engines: `install guide OR manual` is `install (guide OR manual)`.

use super::fields::{self, Field, Filter};
use super::query::{Plan, QueryError};
use super::tokenizer::Tokenizer;

/// A query that cannot be read: where (a column, counted in characters
/// from 1) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub column: usize,
    pub why: String,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at column {}: {}", self.column, self.why)
    }
}

fn error<T>(column: usize, why: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError {
        column,
        why: why.into(),
    })
}

/// A query, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    /// Text searched as the phrase of the terms the index cuts it into;
    /// `prefix`: its last term may be the start of a longer one; `column`:
    /// where it is looked for (`title:word`, `author:word`).
    Term {
        text: String,
        prefix: bool,
        quoted: bool,
        column: Column,
    },
    /// Every one of `must` matches and none of `not` (`must` is never empty).
    All { must: Vec<Node>, not: Vec<Node> },
    /// At least one of them matches.
    Any(Vec<Node>),
}

/// Where a term is looked for: anywhere (the text, the title and the
/// author), or only in the document's title or author (`title:word`,
/// `author:word`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    Any,
    Title,
    Author,
}

impl Column {
    /// The column a word names before its colon (`title:`, `author:`, any
    /// case), with what follows the colon.
    fn named(word: &str) -> Option<(Column, &str)> {
        let (name, rest) = word.split_once(':')?;
        let column = match name.to_ascii_lowercase().as_str() {
            "title" => Column::Title,
            "author" => Column::Author,
            _ => return None,
        };
        Some((column, rest))
    }

    /// The FTS5 column filter it writes before a term (`title : `).
    fn fts5_filter(self) -> &'static str {
        match self {
            Column::Any => "",
            Column::Title => "title : ",
            Column::Author => "author : ",
        }
    }

    /// Its weight label in PostgreSQL's stored tsvector (schema.pg.sql):
    /// the title `A`, the author `B`; none for any.
    // PostgreSQL only (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    fn pg_label(self) -> &'static str {
        match self {
            Column::Any => "",
            Column::Title => "A",
            Column::Author => "B",
        }
    }
}

/// A query, read: what to match, and the fields that narrow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    pub root: Node,
    pub filters: Vec<Filter>,
}

/// The deepest nesting of parentheses taken: far beyond what a person
/// types, and it bounds the reader's recursion.
const MAX_DEPTH: usize = 32;

/// The characters PostgreSQL's parser reads a title with as spaces (the
/// stored tsvector's `translate`, schema.pg.sql version 12; a `title:`
/// term's text alike): with them it takes `plans.txt`, `a/b` or `2.0`
/// whole, as a file name or a number, and no word of a file name would
/// find it.
// PostgreSQL only (feature `postgres`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
const TITLE_SEPARATORS: [char; 3] = ['.', '/', '\\'];

/// Read `query` (people's language) for an index cut by `tokenizer`.
/// Refused with the column: an unclosed quote or parenthesis, an `OR`
/// without a term on one side, an exclusion joined by `OR`, a query or a
/// group that only excludes, one with nothing to search for, and one beyond
/// [`super::query::MAX_QUERY_BYTES`] or [`super::query::MAX_QUERY_TERMS`].
pub(crate) fn read(query: &str, tokenizer: Tokenizer) -> Result<Query, SyntaxError> {
    use super::query::{MAX_QUERY_BYTES, MAX_QUERY_TERMS};
    if query.len() > MAX_QUERY_BYTES {
        return error(
            1,
            format!(
                "the query is {} bytes long; at most {MAX_QUERY_BYTES} are taken",
                query.len()
            ),
        );
    }
    let tokens = lex(query)?;
    let mut reader = Reader {
        tokens: &tokens,
        at: 0,
        tokenizer,
        terms: 0,
        filters: Vec::new(),
        first_field: None,
        last_was_field: false,
    };
    let root = reader.sequence(0, None)?;
    if reader.terms > MAX_QUERY_TERMS {
        return error(
            1,
            format!(
                "the query has {} terms; at most {MAX_QUERY_TERMS} are taken",
                reader.terms
            ),
        );
    }
    match (root, reader.first_field) {
        (Some(root), _) => Ok(Query {
            root,
            filters: reader.filters,
        }),
        (None, Some(column)) => error(column, "fields only narrow a search: add a word to look for"),
        (None, None) => error(1, "nothing to search for: the query has no letters or digits"),
    }
}

/// One piece of the query as written, with its column.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word {
        text: String,
        prefix: bool,
        column: Column,
    },
    Phrase {
        text: String,
        prefix: bool,
        column: Column,
    },
    Open,
    Close,
    /// `-` before a word, a phrase or a group, or `NOT`.
    Exclude,
    /// `OR` or `|`.
    Or,
    /// `dir:notes`, `type:pdf`, `path:"two words"`.
    Field {
        field: Field,
        value: String,
    },
}

/// Cut `query` into tokens. A word runs to a space, a parenthesis or a
/// quote; `AND` is dropped (a space says it).
fn lex(query: &str) -> Result<Vec<(usize, Token)>, SyntaxError> {
    let chars: Vec<char> = query.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let column = i + 1;
        let c = chars[i];
        // Control characters (a NUL, a tab) separate words as spaces do.
        if c.is_whitespace() || c.is_control() {
            i += 1;
        } else if c == '(' || c == ')' {
            out.push((column, if c == '(' { Token::Open } else { Token::Close }));
            i += 1;
        } else if c == '"' {
            let text = quoted(&chars, &mut i)?;
            let prefix = chars.get(i) == Some(&'*');
            if prefix {
                i += 1;
            }
            out.push((
                column,
                Token::Phrase {
                    text,
                    prefix,
                    column: Column::Any,
                },
            ));
        } else if c == '-'
            && chars
                .get(i + 1)
                .is_some_and(|&n| !n.is_whitespace() && !n.is_control() && n != '-')
        {
            out.push((column, Token::Exclude));
            i += 1;
        } else if c == '|' {
            out.push((column, Token::Or));
            i += 1;
        } else {
            let end = chars[i..]
                .iter()
                .position(|&c| c.is_whitespace() || c.is_control() || matches!(c, '(' | ')' | '"'))
                .map_or(chars.len(), |n| i + n);
            let word: String = chars[i..end].iter().collect();
            i = end;
            match word.as_str() {
                "AND" => {}
                "OR" => out.push((column, Token::Or)),
                "NOT" => out.push((column, Token::Exclude)),
                _ if Column::named(&word).is_some() => {
                    let (named, rest) = Column::named(&word).expect("just checked");
                    let rest = rest.to_owned();
                    out.push((column, column_term(&chars, &mut i, column, named, rest)?));
                }
                _ if field_of(&word).is_some() => {
                    let (field, mut value) = field_of(&word).expect("just checked");
                    // `dir:"My Documents"`: the quoted text is the value.
                    if value.is_empty() && chars.get(i) == Some(&'"') {
                        value = quoted(&chars, &mut i)?;
                    }
                    if let Some(why) = fields::refused(field, &value) {
                        return error(column, why);
                    }
                    out.push((column, Token::Field { field, value }));
                }
                _ => {
                    let text = word.trim_end_matches('*');
                    let prefix = text.len() < word.len();
                    out.push((
                        column,
                        Token::Word {
                            text: text.to_owned(),
                            prefix,
                            column: Column::Any,
                        },
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// The term `title:` or `author:` names: the rest of the word
/// (`title:report`, `author:smi*`), or the quoted phrase right after the
/// colon (`title:"annual report"`); `chars[*at]` is where the word ended.
fn column_term(
    chars: &[char],
    at: &mut usize,
    column: usize,
    named: Column,
    rest: String,
) -> Result<Token, SyntaxError> {
    let (text, quoted) = if rest.is_empty() && chars.get(*at) == Some(&'"') {
        (quoted(chars, at)?, true)
    } else {
        (rest, false)
    };
    let star = if quoted {
        let star = chars.get(*at) == Some(&'*');
        *at += usize::from(star);
        star
    } else {
        text.ends_with('*')
    };
    let text = if quoted {
        text
    } else {
        text.trim_end_matches('*').to_owned()
    };
    if text.is_empty() {
        return error(
            column,
            format!(
                "{}: needs a word or a \"quoted phrase\" right after the colon",
                if named == Column::Title { "title" } else { "author" }
            ),
        );
    }
    Ok(match quoted {
        true => Token::Phrase {
            text,
            prefix: star,
            column: named,
        },
        false => Token::Word {
            text,
            prefix: star,
            column: named,
        },
    })
}

/// The text between the quote at `chars[*at]` and the next one; `at` moves
/// past the closing quote. An unclosed quote is an error at its column.
fn quoted(chars: &[char], at: &mut usize) -> Result<String, SyntaxError> {
    let open = *at;
    let Some(len) = chars[open + 1..].iter().position(|&c| c == '"') else {
        return error(open + 1, "this quote is not closed (a \" is missing)");
    };
    *at = open + len + 2;
    Ok(chars[open + 1..open + 1 + len].iter().collect())
}

/// The field a word names (`dir:notes` → Dir, `notes`), with its value
/// (empty when the word ends at the colon). A word whose name is no field
/// (`https://…`, `body:x`) is a word.
fn field_of(word: &str) -> Option<(Field, String)> {
    // `size>1MB`, `size<=2MiB`: the bound is the value.
    let bound = word.get(..4).filter(|n| n.eq_ignore_ascii_case("size"));
    if let Some(rest) = bound.and(word.get(4..)).filter(|r| r.starts_with(['<', '>'])) {
        return Some((Field::Size, rest.to_owned()));
    }
    let (name, value) = word.split_once(':')?;
    Some((Field::named(name)?, value.to_owned()))
}

/// The recursive reader over the tokens.
struct Reader<'t> {
    tokens: &'t [(usize, Token)],
    at: usize,
    tokenizer: Tokenizer,
    /// Terms read so far (words and phrases kept).
    terms: usize,
    /// The fields read so far, and the column of the first.
    filters: Vec<Filter>,
    first_field: Option<usize>,
    /// The last item read was a field (which `OR` may not join).
    last_was_field: bool,
}

impl Reader<'_> {
    fn peek(&self) -> Option<&(usize, Token)> {
        self.tokens.get(self.at)
    }

    /// Items up to the end, or up to the `)` that closes the `(` at column
    /// `open`: all of them must match, none of the excluded. None when
    /// nothing in it is searchable.
    fn sequence(&mut self, depth: usize, open: Option<usize>) -> Result<Option<Node>, SyntaxError> {
        let (mut must, mut not) = (Vec::new(), Vec::new());
        let mut first_excluded = None;
        loop {
            match self.peek() {
                None => match open {
                    Some(column) => return error(column, "this ( is not closed (a ) is missing)"),
                    None => break,
                },
                Some((column, Token::Close)) => match open {
                    Some(_) => {
                        self.at += 1;
                        break;
                    }
                    None => return error(*column, "this ) closes no ("),
                },
                Some((column, Token::Or)) => return error(*column, "OR needs a term before it"),
                Some(&(column, _)) => {
                    let (node, excluded) = self.either(depth)?;
                    match (node, excluded) {
                        (Some(node), true) => {
                            first_excluded.get_or_insert(column);
                            not.push(node);
                        }
                        (Some(node), false) => must.push(node),
                        (None, _) => {}
                    }
                }
            }
        }
        if must.is_empty() {
            if let Some(column) = first_excluded {
                let whole = if open.is_some() { "this group" } else { "the query" };
                return error(column, format!("{whole} only excludes: add a word to look for"));
            }
            return Ok(None);
        }
        if must.len() == 1 && not.is_empty() {
            return Ok(must.pop());
        }
        Ok(Some(Node::All { must, not }))
    }

    /// One item and the ones `OR` joins to it; whether it is excluded.
    fn either(&mut self, depth: usize) -> Result<(Option<Node>, bool), SyntaxError> {
        let (first, excluded) = self.unary(depth, false)?;
        let mut any: Vec<Node> = first.into_iter().collect();
        while let Some(&(column, Token::Or)) = self.peek() {
            if self.last_was_field {
                return error(
                    column,
                    "OR cannot join a field (dir:, path:, type:, size, after:, before:)",
                );
            }
            self.at += 1;
            match self.peek() {
                None | Some((_, Token::Close)) | Some((_, Token::Or)) => {
                    return error(column, "OR needs a term after it")
                }
                _ => {}
            }
            let (next, next_excluded) = self.unary(depth, false)?;
            if self.last_was_field {
                return error(
                    column,
                    "OR cannot join a field (dir:, path:, type:, size, after:, before:)",
                );
            }
            if excluded || next_excluded {
                return error(
                    column,
                    "OR cannot join an exclusion (-word or NOT word): exclude it beside the OR",
                );
            }
            any.extend(next);
        }
        let node = match any.len() {
            0 => None,
            1 => any.pop(),
            _ => Some(Node::Any(any)),
        };
        Ok((node, excluded))
    }

    /// A word, a phrase, a group or a field, maybe excluded (`negated`:
    /// after a `-` or `NOT`).
    fn unary(&mut self, depth: usize, negated: bool) -> Result<(Option<Node>, bool), SyntaxError> {
        let Some((column, token)) = self.peek().cloned() else {
            return Ok((None, false));
        };
        self.at += 1;
        self.last_was_field = false;
        match token {
            Token::Exclude => match self.peek() {
                None => error(column, "- or NOT needs a term after it"),
                Some((_, Token::Exclude)) => error(column, "two exclusions in a row"),
                Some((_, Token::Or)) | Some((_, Token::Close)) => {
                    error(column, "- or NOT needs a term after it")
                }
                Some(_) => Ok((self.unary(depth, true)?.0, true)),
            },
            Token::Open => {
                if depth + 1 > MAX_DEPTH {
                    return error(
                        column,
                        format!("more than {MAX_DEPTH} parentheses inside each other"),
                    );
                }
                Ok((self.sequence(depth + 1, Some(column))?, false))
            }
            Token::Field { field, value } => {
                if depth > 0 {
                    return error(
                        column,
                        "a field (dir:, path:, type:, size, after:, before:) goes at the top of a query, not inside ( )",
                    );
                }
                self.filters.push(Filter {
                    field,
                    value,
                    negated,
                });
                self.first_field.get_or_insert(column);
                self.last_was_field = true;
                Ok((None, negated))
            }
            Token::Word { text, prefix, column } => Ok((self.term(text, prefix, false, column), false)),
            Token::Phrase { text, prefix, column } => Ok((self.term(text, prefix, true, column), false)),
            Token::Close | Token::Or => unreachable!("sequence and either take these"),
        }
    }

    /// A term, or None when the index would find nothing in its text.
    fn term(&mut self, text: String, prefix: bool, quoted: bool, column: Column) -> Option<Node> {
        let searchable = match self.tokenizer {
            // The trigram tokenizer keeps every character but spaces and
            // controls count for nothing in a snippet.
            Tokenizer::Trigram => text.chars().any(|c| !c.is_whitespace() && !c.is_control()),
            Tokenizer::Unicode61 | Tokenizer::PgSimple => text.chars().any(char::is_alphanumeric),
        };
        if !searchable {
            return None;
        }
        self.terms += 1;
        Some(Node::Term {
            text,
            prefix,
            quoted,
            column,
        })
    }
}

/// `node` as an FTS5 expression: every term a quoted string, so FTS5 reads
/// nothing in it as an operator. With `prefixes` (a word index), prefixes
/// are kept and unquoted words in the scripts written without spaces are
/// searched as prefixes (see `query.rs`); without (the trigram index, where
/// any substring matches already), none is.
pub(crate) fn fts5(node: &Node, prefixes: bool) -> String {
    let grouped = |n: &Node| match n {
        Node::Term { .. } => fts5(n, prefixes),
        _ => format!("({})", fts5(n, prefixes)),
    };
    match node {
        Node::Term {
            text,
            prefix,
            quoted,
            column,
        } => {
            let glued = !quoted && text.chars().any(super::query::is_glued_script);
            let star = if prefixes && (*prefix || glued) { "*" } else { "" };
            let filter = column.fts5_filter();
            format!("{filter}\"{}\"{star}", text.replace('"', "\"\""))
        }
        Node::All { must, not } => {
            let mut out = must.iter().map(grouped).collect::<Vec<_>>().join(" AND ");
            if !not.is_empty() && must.len() > 1 {
                out = format!("({out})");
            }
            for n in not {
                out.push_str(" NOT ");
                out.push_str(&grouped(n));
            }
            out
        }
        Node::Any(any) => any.iter().map(grouped).collect::<Vec<_>>().join(" OR "),
    }
}

/// The terms of a query that is only words and phrases, all required, no
/// prefix: the one shape the trigram tokenizer's LIKE fallback can run.
pub(crate) fn plain_terms(node: &Node) -> Option<Vec<String>> {
    match node {
        Node::Term {
            text,
            prefix: false,
            column: Column::Any,
            ..
        } => Some(vec![text.clone()]),
        Node::All { must, not } if not.is_empty() => {
            let mut out = Vec::new();
            for n in must {
                out.extend(plain_terms(n)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// The first term of `node` whose text `pick` chooses.
pub(crate) fn first_term<'n>(node: &'n Node, pick: &dyn Fn(&str) -> bool) -> Option<&'n str> {
    match node {
        Node::Term { text, .. } => pick(text).then_some(text.as_str()),
        Node::All { must, not } => must.iter().chain(not).find_map(|n| first_term(n, pick)),
        Node::Any(any) => any.iter().find_map(|n| first_term(n, pick)),
    }
}

/// `node` as a PostgreSQL tsquery for `to_tsquery('simple', …)`: each term
/// quoted (the parser makes a phrase of several words, joined by `<->`),
/// prefixes `:*`, all `&`, excluded `& !`, any `|`.
// PostgreSQL only (feature `postgres`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn tsquery(node: &Node) -> String {
    match node {
        Node::Term {
            text,
            prefix,
            quoted,
            column,
        } => {
            let glued = !quoted && text.chars().any(super::query::is_glued_script);
            // The column's label in the stored tsvector, whose title and
            // author are read with TITLE_SEPARATORS as spaces (schema.pg.sql).
            let one = |text: &str, weight: &str| match *prefix || glued {
                true => pg_prefix(text, weight),
                false => format!("{}{}", super::query::pg_quoted(text), weight_suffix(weight)),
            };
            let spaced = text.replace(TITLE_SEPARATORS, " ");
            match column {
                // A word the parser would take whole (`plans.txt`) is also
                // looked for as the title and author hold it.
                Column::Any if spaced != *text => format!("({}) | ({})", one(text, ""), one(&spaced, "AB")),
                Column::Any => one(text, ""),
                Column::Title | Column::Author => one(&spaced, column.pg_label()),
            }
        }
        Node::All { must, not } => {
            let mut parts: Vec<String> = must.iter().map(|n| format!("({})", tsquery(n))).collect();
            parts.extend(not.iter().map(|n| format!("!({})", tsquery(n))));
            parts.join(" & ")
        }
        Node::Any(any) => any
            .iter()
            .map(|n| format!("({})", tsquery(n)))
            .collect::<Vec<_>>()
            .join(" | "),
    }
}

/// A prefix term as a tsquery: PostgreSQL's `:*` marks every lexeme parsed
/// from a quoted text, so only the last word takes it (`"big ca"*` is `big`
/// followed by a word starting `ca`, as in FTS5).
// PostgreSQL only (feature `postgres`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn pg_prefix(text: &str, weight: &str) -> String {
    use super::query::pg_quoted;
    let end = text.trim_end_matches(|c: char| !c.is_alphanumeric()).len();
    let start = text[..end]
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_alphanumeric())
        .last()
        .map_or(end, |(i, _)| i);
    let (head, last) = (&text[..start], &text[start..end]);
    if head.chars().any(char::is_alphanumeric) {
        format!(
            "{}{} <-> {}:*{weight}",
            pg_quoted(head),
            weight_suffix(weight),
            pg_quoted(last)
        )
    } else {
        format!("{}:*{weight}", pg_quoted(last))
    }
}

/// A tsquery operand's weight restriction: `:A`, or nothing.
// PostgreSQL only (feature `postgres`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn weight_suffix(weight: &str) -> String {
    match weight {
        "" => String::new(),
        w => format!(":{w}"),
    }
}

/// The trigram plan of a query in people's language: the LIKE fallback for
/// a plain list with a term shorter than three characters, a MATCH (no
/// prefixes: any substring matches already) otherwise, refused when such a
/// term is in a query with operators.
pub(crate) fn trigram_plan(node: &Node) -> Result<Plan, QueryError> {
    let short = |text: &str| text.chars().count() < 3;
    if let Some(terms) = plain_terms(node) {
        if terms.iter().any(|t| short(t)) {
            return Ok(Plan::Like(terms));
        }
    } else if let Some(t) = first_term(node, &short) {
        return Err(format!(
            "{t:?} is shorter than 3 characters: with the trigram tokenizer such terms work only \
             in a plain list of words (no OR, exclusions, prefixes, parentheses or title:)"
        ));
    }
    Ok(Plan::Match(fts5(node, false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fts(q: &str) -> String {
        fts5(&read(q, Tokenizer::Unicode61).unwrap().root, true)
    }

    fn refused(q: &str) -> SyntaxError {
        read(q, Tokenizer::Unicode61).unwrap_err()
    }

    #[test]
    fn every_word_is_a_quoted_string_for_the_tokenizer_to_cut() {
        assert_eq!(fts("qemu-img"), "\"qemu-img\"");
        assert_eq!(fts("C++ e-mail"), "\"C++\" AND \"e-mail\"");
        assert_eq!(
            fts("don't 2.0 libffi.so"),
            "\"don't\" AND \"2.0\" AND \"libffi.so\""
        );
        assert_eq!(fts("https://x.org/a?b=c"), "\"https://x.org/a?b=c\"");
        assert_eq!(fts("body:x"), "\"body:x\"");
        assert_eq!(fts("say\"s\""), "\"say\" AND \"s\"");
    }

    #[test]
    fn phrases_prefixes_exclusions_or_and_groups() {
        assert_eq!(fts("\"big cat\" dog*"), "\"big cat\" AND \"dog\"*");
        assert_eq!(fts("\"big ca\"*"), "\"big ca\"*");
        assert_eq!(fts("a -b"), "\"a\" NOT \"b\"");
        assert_eq!(fts("a b NOT c -d"), "(\"a\" AND \"b\") NOT \"c\" NOT \"d\"");
        assert_eq!(fts("a b OR c"), "\"a\" AND (\"b\" OR \"c\")");
        assert_eq!(fts("a | b"), "\"a\" OR \"b\"");
        assert_eq!(fts("(a b) OR c AND d"), "((\"a\" AND \"b\") OR \"c\") AND \"d\"");
        assert_eq!(fts("a -(b OR c)"), "\"a\" NOT (\"b\" OR \"c\")");
        assert_eq!(fts("a - b"), "\"a\" AND \"b\"", "a lone - is no exclusion");
        assert_eq!(fts("a -"), "\"a\"");
        assert_eq!(
            fts("--verbose -O2"),
            "\"--verbose\" NOT \"O2\"",
            "-- starts a word"
        );
        assert_eq!(
            fts("a\0b\tc"),
            "\"a\" AND \"b\" AND \"c\"",
            "controls separate words"
        );
        assert_eq!(fts("foo|bar"), "\"foo|bar\"", "| is OR as a word of its own");
        assert_eq!(
            fts("or and not"),
            "\"or\" AND \"and\" AND \"not\"",
            "lower case are words"
        );
    }

    #[test]
    fn words_with_nothing_to_index_are_left_out() {
        assert_eq!(fts("C + + e"), "\"C\" AND \"e\"");
        assert_eq!(fts("a — b"), "\"a\" AND \"b\"");
        assert_eq!(fts("a OR +"), "\"a\"");
        assert_eq!(refused("+ —").column, 1);
        let t = read("+ *", Tokenizer::Trigram).unwrap().root;
        assert_eq!(
            t,
            Node::Term {
                text: "+".into(),
                prefix: false,
                quoted: false,
                column: Column::Any
            }
        );
    }

    #[test]
    fn fields_narrow_at_the_top_and_other_colons_are_words() {
        let q = read(
            "report dir:notes -type:pdf path:\"q3 final\" TYPE:Docx",
            Tokenizer::Unicode61,
        )
        .unwrap();
        assert_eq!(fts5(&q.root, true), "\"report\"");
        let f = |field, value: &str, negated| Filter {
            field,
            value: value.into(),
            negated,
        };
        assert_eq!(
            q.filters,
            [
                f(Field::Dir, "notes", false),
                f(Field::Type, "pdf", true),
                f(Field::Path, "q3 final", false),
                f(Field::Type, "Docx", false)
            ]
        );
        assert!(read("https://x.org/a body:x", Tokenizer::Unicode61)
            .unwrap()
            .filters
            .is_empty());
        let cases = [
            ("dir:notes", 1, "add a word"),
            ("a (dir:x b)", 4, "top of a query"),
            ("a OR dir:x", 3, "cannot join a field"),
            ("dir:x OR a", 7, "cannot join a field"),
            ("a type:p.d", 3, "type: takes"),
            ("a dir:\"open", 7, "not closed"),
        ];
        for (q, column, says) in cases {
            let e = refused(q);
            assert_eq!(e.column, column, "{q:?}: {e}");
            assert!(e.to_string().contains(says), "{q:?}: {e}");
        }
    }

    #[test]
    fn sizes_and_dates_are_fields_and_bad_ones_name_their_column() {
        let q = read(
            "report size>1MB SIZE<=2MiB -after:2026-03 before:2027",
            Tokenizer::Unicode61,
        )
        .unwrap();
        let got: Vec<(Field, &str, bool)> = q
            .filters
            .iter()
            .map(|f| (f.field, f.value.as_str(), f.negated))
            .collect();
        assert_eq!(
            got,
            [
                (Field::Size, ">1MB", false),
                (Field::Size, "<=2MiB", false),
                (Field::After, "2026-03", true),
                (Field::Before, "2027", false),
            ]
        );
        assert_eq!(fts("sizeable size"), r#""sizeable" AND "size""#);
        let e = refused("report size>1XB");
        assert_eq!(e.column, 8, "{e}");
        assert!(e.why.contains("unknown unit"), "{e}");
        let e = refused("report after:2026-02-30");
        assert_eq!(e.column, 8, "{e}");
        assert!(refused("size>1MB").why.contains("add a word"));
    }

    #[test]
    fn glued_script_words_stay_prefixes_unless_quoted() {
        assert_eq!(fts("계정"), "\"계정\"*");
        assert_eq!(fts("\"계정 설정\""), "\"계정 설정\"");
        assert_eq!(fts("东京 tokyo"), "\"东京\"* AND \"tokyo\"");
    }

    #[test]
    fn what_cannot_be_read_names_its_column() {
        let cases = [
            ("a \"open", 3, "not closed"),
            ("(a b", 1, "( is not closed"),
            ("a b)", 4, "closes no ("),
            ("OR a", 1, "before it"),
            ("a OR", 3, "after it"),
            ("a OR -b", 3, "cannot join an exclusion"),
            ("-a -b", 1, "the query only excludes"),
            ("x (-a)", 4, "this group only excludes"),
            ("a -NOT b", 3, "two exclusions"),
            ("a NOT", 3, "after it"),
            ("", 1, "nothing to search for"),
        ];
        for (q, column, says) in cases {
            let e = refused(q);
            assert_eq!(e.column, column, "{q:?}: {e}");
            assert!(e.to_string().contains(says), "{q:?}: {e}");
        }
        let deep = format!("{}a{}", "(".repeat(40), ")".repeat(40));
        assert!(refused(&deep).why.contains("parentheses"));
    }

    #[test]
    fn the_caps_hold() {
        use crate::store::search::query::{MAX_QUERY_BYTES, MAX_QUERY_TERMS};
        let many = "new* ".repeat(MAX_QUERY_TERMS + 1);
        assert!(refused(&many).why.contains("65 terms; at most 64"));
        assert!(read(&"new* ".repeat(MAX_QUERY_TERMS), Tokenizer::Unicode61).is_ok());
        assert!(refused(&"x".repeat(MAX_QUERY_BYTES + 1))
            .why
            .contains("bytes long"));
    }

    #[test]
    fn plain_lists_only_for_like() {
        let node = |q| read(q, Tokenizer::Trigram).unwrap().root;
        assert_eq!(
            plain_terms(&node("ab \"c d\"")),
            Some(vec!["ab".into(), "c d".into()])
        );
        assert_eq!(plain_terms(&node("ab OR cd")), None);
        assert_eq!(plain_terms(&node("ab -cd")), None);
        assert_eq!(plain_terms(&node("ab*")), None);
    }

    #[test]
    fn tsquery_translation() {
        let ts = |q| tsquery(&read(q, Tokenizer::PgSimple).unwrap().root);
        assert_eq!(ts("qemu-img"), "'qemu-img'");
        assert_eq!(ts("계정"), "'계정':*");
        assert_eq!(ts("a b*"), "('a') & ('b':*)");
        assert_eq!(ts("\"big ca\"*"), "'big ' <-> 'ca':*");
        assert_eq!(ts("qemu-im*"), "'qemu-' <-> 'im':*");
        assert_eq!(
            ts("\"big cat\" OR dog -it's"),
            "(('big cat') | ('dog')) & !('it''s')"
        );
        assert_eq!(ts("title:report x"), "('report':A) & ('x')");
        assert_eq!(ts("title:\"big ca\"*"), "'big ':A <-> 'ca':*A");
        assert_eq!(ts("TITLE:rep*"), "'rep':*A");
        assert_eq!(ts("title:plans.txt"), "'plans txt':A");
        assert_eq!(ts("author:smith"), "'smith':B");
        assert_eq!(ts("plans.txt"), "('plans.txt') | ('plans txt':AB)");
        assert_eq!(
            ts("libffi.so*"),
            "('libffi.' <-> 'so':*) | ('libffi ':AB <-> 'so':*AB)"
        );
    }

    #[test]
    fn title_terms_search_the_title_column_and_join_like_words() {
        assert_eq!(fts("title:report"), "title : \"report\"");
        assert_eq!(
            fts("title:\"annual report\" q3"),
            "title : \"annual report\" AND \"q3\""
        );
        assert_eq!(
            fts("title:ann* -title:draft"),
            "title : \"ann\"* NOT title : \"draft\""
        );
        assert_eq!(
            fts("(title:walnut OR pelican) x"),
            "(title : \"walnut\" OR \"pelican\") AND \"x\""
        );
        assert_eq!(fts("title:qemu-img"), "title : \"qemu-img\"");
        assert_eq!(
            fts("Author:\"Jane Doe\" -author:smi*"),
            "author : \"Jane Doe\" NOT author : \"smi\"*"
        );
        assert_eq!(refused("x author:").column, 3);
        // Only a field in a list of alternatives is refused; a title term is a term.
        assert!(read("a OR title:b", Tokenizer::Unicode61).is_ok());
        let e = refused("a title:");
        assert_eq!(e.column, 3, "{e}");
        assert!(e.to_string().contains("title: needs a word"), "{e}");
        assert_eq!(refused("title:\"open").column, 7);
        // The LIKE fallback reads the text only: a title term is not a plain list.
        assert_eq!(
            plain_terms(&read("ab title:cd", Tokenizer::Trigram).unwrap().root),
            None
        );
    }
}
