//! Stemming: a word of a query also finds the other forms of it that the
//! index holds (`install` finds `installed`, `installation`, `installs`).
//!
//! # How
//! At query time, not in the index: each plain English word of a query is
//! reduced to its Snowball (Porter2) stem, the index's vocabulary is read
//! over the few terms that could share it (those that begin like the stem,
//! see [`vocabulary_range`]), and the terms whose stem is the same join the
//! word as alternatives. The index keeps the words as written, so:
//! - a word in quotes is searched as written, and the documents holding the
//!   words as written are ranked before those found only through a stem;
//! - nothing is re-indexed to turn stemming on or off, and data directories
//!   made before it gain it as they are;
//! - indexing costs nothing more.
//!
//! Measured against the alternatives (docs/DESIGN.md, "Stemming"): FTS5's
//! `porter` tokenizer gave the same recall but three times the extra
//! documents, changes the index, and cannot rank exact forms first; forms
//! generated from suffix rules gave the same recall but put a hundred absent
//! terms into each query, each scored on every matching row.
//!
//! What is expanded: a word of ASCII letters, not quoted, not a prefix, in
//! people's language on a word index (`unicode61`). Words in other scripts,
//! FTS5 syntax (`--fts`) and the trigram index (whose substrings find most
//! forms already) are searched as written.

use std::collections::HashMap;

use super::language::{Column, Node};

/// Whether the words of a query also find their other forms; chosen per
/// data directory (recorded in its meta table) and changed at any time, since
/// the index does not depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stemming {
    /// English (Snowball's Porter2): the default.
    #[default]
    English,
    /// Words are found only as written.
    Off,
}

impl Stemming {
    /// The setting named on the command line or in the configuration:
    /// `english` or `none`.
    pub fn parse(name: &str) -> crate::error::Result<Stemming> {
        match name.trim().to_ascii_lowercase().as_str() {
            "english" => Ok(Stemming::English),
            "none" | "off" => Ok(Stemming::Off),
            other => Err(crate::error::Error::InvalidInput {
                what: "stemming",
                reason: format!("{other:?} is not a stemming: use english (the default) or none"),
            }),
        }
    }

    /// The name recorded in the meta row and shown: `english` or `none`.
    pub fn name(self) -> &'static str {
        match self {
            Stemming::English => "english",
            Stemming::Off => "none",
        }
    }

    /// The setting a meta row records: absent (a data directory made before
    /// stemming), the default; a value this build does not know (a newer
    /// one's language), none, since words as written never find what the
    /// user did not ask for.
    pub(crate) fn recorded(value: Option<&str>) -> Stemming {
        match value {
            None => Stemming::default(),
            Some(v) => Stemming::parse(v).unwrap_or(Stemming::Off),
        }
    }
}

impl std::fmt::Display for Stemming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The meta row that records a data directory's stemming.
pub(crate) const STEMMING_META: &str = "search_stemming";

/// The most other forms one word takes: far beyond what English has
/// (`install` has nine), it bounds the expression a strange vocabulary
/// could make.
pub(crate) const MAX_FORMS: usize = 32;

/// The most terms of the vocabulary read for one word: a range holds a few
/// dozen in English, and reading one costs its posting list (FTS5 counts its
/// documents), so a vocabulary packed under one prefix (a hostile document)
/// cannot make a query read it all.
pub(crate) const MAX_SCANNED: usize = 10_000;

/// Lists the index's terms in a range, in order, to `visit`, until it
/// returns false.
pub(crate) type Vocabulary<'w, E> =
    dyn FnMut(&VocabularyRange, &mut dyn FnMut(&str) -> bool) -> Result<(), E> + 'w;

/// Of the candidate forms given, those the index holds (for an engine that
/// cannot list its vocabulary by range: PostgreSQL probes its GIN index).
pub(crate) type Probe<'w, E> = dyn FnMut(&[String]) -> Result<Vec<String>, E> + 'w;

/// Where the other forms of a word are looked up.
pub(crate) enum Lookup<'w, 'v, E> {
    /// The index's terms in a range (SQLite's `fts5vocab`).
    Range(&'w mut Vocabulary<'v, E>),
    /// Forms made from the stem by English endings, kept when the index
    /// holds them ([`candidates`]).
    Probe(&'w mut Probe<'v, E>),
}

/// Endings English adds to a stem (alone, and followed by `s` or `es`):
/// with the stem, its form ending in `e` and the other bases of
/// [`candidates`], they make the forms a word's stem stands for.
const ENDINGS: [&str; 55] = [
    "", "e", "ed", "d", "ing", "er", "or", "ion", "ation", "ition", "ational", "ment", "able", "ably",
    "ible", "ability", "al", "ally", "ive", "ively", "ivity", "ity", "ies", "ied", "ier", "iest", "est",
    "ism", "ist", "ize", "ized", "izing", "ization", "ise", "ance", "ancy", "ence", "ency", "encies",
    "ancies", "ant", "antly", "ent", "ently", "ful", "fully", "fulness", "less", "ous", "ure", "ary", "ory",
    "ic", "ical", "ness",
];

/// The forms of `word` that share its stem, made by endings rather than
/// read from the index: the word, its stem and the stem's variants (an `e`
/// added, an `i` made `y`, a last consonant doubled) followed by every
/// ending, kept when Porter2 stems them to the same stem. On the corpus
/// bench's 48 verbs against `recollq` these found what the vocabulary's
/// range finds (recall 0.990 both), at a hundred or more candidates a
/// word, most of which no index holds: they are probed, not searched.
fn candidates(stemmer: &rust_stemmers::Stemmer, word: &str) -> Vec<String> {
    let stem = stem(stemmer, word);
    let mut bases = vec![word.to_owned(), stem.clone(), format!("{stem}e")];
    if let Some(base) = stem.strip_suffix('i') {
        bases.push(format!("{base}y"));
    }
    if let Some(base) = word.strip_suffix('e') {
        bases.push(base.to_owned());
    }
    if let Some(last) = stem
        .chars()
        .last()
        .filter(|c| stem.len() >= 3 && !"aeiouwxy".contains(*c))
    {
        bases.push(format!("{stem}{last}"));
    }
    let mut out = std::collections::BTreeSet::new();
    for base in &bases {
        for ending in ENDINGS {
            for plural in ["", "s", "es"] {
                let form = format!("{base}{ending}{plural}");
                if form != word && self::stem(stemmer, &form) == stem {
                    out.insert(form);
                }
            }
        }
    }
    out.into_iter().collect()
}

/// The terms of the index a word's other forms lie among: those from `lo`
/// (inclusive) to `hi` (exclusive), in the index's byte order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VocabularyRange {
    pub lo: String,
    pub hi: String,
}

/// The word `text` lower-cased when stemming applies to it: one run of ASCII
/// letters, three or more, maybe with punctuation around it that the index
/// drops (`install,`). None for anything else (digits, other scripts, words
/// the index cuts in several terms, and two-letter words, whose other forms
/// Porter2 barely conflates: `goes` is `goe`, `does` is `doe`).
fn stemmable(text: &str) -> Option<String> {
    let core = text.trim_matches(|c: char| !c.is_alphanumeric());
    let ok = core.len() >= 3 && core.bytes().all(|b| b.is_ascii_alphabetic());
    ok.then(|| core.to_ascii_lowercase())
}

/// The English Snowball stem of `word` (lower case).
fn stem(stemmer: &rust_stemmers::Stemmer, word: &str) -> String {
    stemmer.stem(word).into_owned()
}

/// Where the forms sharing `stem` lie: the terms that begin with it, or
/// with it less its last letter where Porter2 may have rewritten that
/// letter: an `e` it added or that forms drop (`hoping` → `hope`, `using` →
/// `use`), a `y` made `i` (`happy` → `happi`), `-ble` from `-bility`
/// (`possibility` → `possibl`). Every other step only cuts endings, so
/// its forms begin with the stem. Reading the vocabulary costs every term in
/// the range (FTS5 counts their documents), so the range is kept to that.
fn vocabulary_range(stem: &str) -> VocabularyRange {
    let rewritten = stem.ends_with(['e', 'i']) || stem.ends_with("bl");
    let keep = match rewritten && stem.len() >= 3 {
        true => stem.len() - 1,
        false => stem.len(),
    };
    let lo = stem[..keep].to_owned();
    // U+10FFFF sorts after every character in UTF-8 byte order.
    let hi = format!("{lo}\u{10FFFF}");
    VocabularyRange { lo, hi }
}

/// `node` with each stemmable word joined by its other forms in the index,
/// which `words` lists. None when no word gained a form (the query is run
/// as written).
pub(crate) fn expand<E>(node: &Node, words: &mut Vocabulary<'_, E>) -> Result<Option<Node>, E> {
    expand_with(node, Lookup::Range(words))
}

/// [`expand`] through `lookup`.
pub(crate) fn expand_with<E>(node: &Node, lookup: Lookup<'_, '_, E>) -> Result<Option<Node>, E> {
    let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
    let mut expander = Expander {
        stemmer,
        lookup,
        seen: HashMap::new(),
    };
    let expanded = expander.node(node)?;
    Ok((expanded != *node).then_some(expanded))
}

/// One query's expansion: the stemmer, the vocabulary, and the forms found
/// for each word already met (a word repeated is looked up once).
struct Expander<'w, 'v, E> {
    stemmer: rust_stemmers::Stemmer,
    lookup: Lookup<'w, 'v, E>,
    seen: HashMap<String, Vec<String>>,
}

impl<E> Expander<'_, '_, E> {
    fn node(&mut self, node: &Node) -> Result<Node, E> {
        Ok(match node {
            Node::Term {
                text,
                prefix: false,
                quoted: false,
                column,
            } => self.term(text, *column)?,
            Node::Term { .. } => node.clone(),
            Node::All { must, not } => Node::All {
                must: self.nodes(must)?,
                not: self.nodes(not)?,
            },
            Node::Any(any) => Node::Any(self.nodes(any)?),
        })
    }

    fn nodes(&mut self, nodes: &[Node]) -> Result<Vec<Node>, E> {
        nodes.iter().map(|n| self.node(n)).collect()
    }

    /// The word as written, or it OR its other forms (in the same column).
    fn term(&mut self, text: &str, column: Column) -> Result<Node, E> {
        let written = Node::Term {
            text: text.to_owned(),
            prefix: false,
            quoted: false,
            column,
        };
        let Some(word) = stemmable(text) else {
            return Ok(written);
        };
        let forms = match self.seen.get(&word) {
            Some(forms) => forms.clone(),
            None => {
                let forms = self.forms(&word)?;
                self.seen.insert(word.clone(), forms.clone());
                forms
            }
        };
        if forms.is_empty() {
            return Ok(written);
        }
        let mut any = vec![written];
        any.extend(forms.into_iter().map(|text| Node::Term {
            text,
            prefix: false,
            quoted: true,
            column,
        }));
        Ok(Node::Any(any))
    }

    /// The index's terms other than `word` whose stem is `word`'s, at most
    /// [`MAX_FORMS`], from at most [`MAX_SCANNED`] terms of its range.
    fn forms(&mut self, word: &str) -> Result<Vec<String>, E> {
        let stemmer = &self.stemmer;
        let words = match &mut self.lookup {
            Lookup::Range(words) => words,
            Lookup::Probe(probe) => {
                let mut held = probe(&candidates(stemmer, word))?;
                held.truncate(MAX_FORMS);
                return Ok(held);
            }
        };
        let stem = stem(stemmer, word);
        let (mut forms, mut scanned) = (Vec::new(), 0);
        words(&vocabulary_range(&stem), &mut |t: &str| {
            scanned += 1;
            let alike = t != word && t.bytes().all(|b| b.is_ascii_alphabetic());
            if alike && self::stem(stemmer, t) == stem {
                forms.push(t.to_owned());
            }
            forms.len() < MAX_FORMS && scanned < MAX_SCANNED
        })?;
        Ok(forms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::search::language::{self, fts5};
    use crate::store::search::Tokenizer;

    /// A vocabulary: the terms of `vocab` in the range, as the index lists them.
    fn expanded(query: &str, vocab: &[&str]) -> Option<String> {
        let root = language::read(query, Tokenizer::Unicode61).unwrap().root;
        let mut sorted: Vec<&str> = vocab.to_vec();
        sorted.sort_unstable();
        let mut words = |r: &VocabularyRange, visit: &mut dyn FnMut(&str) -> bool| -> Result<(), ()> {
            for t in sorted
                .iter()
                .filter(|t| **t >= r.lo.as_str() && **t < r.hi.as_str())
            {
                if !visit(t) {
                    break;
                }
            }
            Ok(())
        };
        expand(&root, &mut words).unwrap().map(|n| fts5(&n, true))
    }

    const VOCAB: &[&str] = &[
        "install",
        "installation",
        "installed",
        "installer",
        "instance",
        "happy",
        "happiness",
        "hope",
        "hoping",
        "hop",
        "run",
        "running",
        "runs",
        "rung",
        "use",
        "used",
        "useful",
        "usage",
        "using",
        "us",
        "uses",
        "2024",
    ];

    #[test]
    fn a_word_finds_the_forms_of_it_the_index_holds() {
        assert_eq!(
            expanded("install", VOCAB).as_deref(),
            Some(r#""install" OR "installation" OR "installed" OR "installer""#)
        );
        // The stem's last letter may be rewritten: happy → happi, hoping → hope.
        assert_eq!(
            expanded("happy", VOCAB).as_deref(),
            Some(r#""happy" OR "happiness""#)
        );
        assert_eq!(expanded("hope", VOCAB).as_deref(), Some(r#""hope" OR "hoping""#));
        // Only the forms of the same stem, not every term in the range.
        assert_eq!(
            expanded("running", VOCAB).as_deref(),
            Some(r#""running" OR "run" OR "runs""#)
        );
        assert_eq!(
            expanded("Used", VOCAB).as_deref(),
            Some(r#""Used" OR "use" OR "useful" OR "uses" OR "using""#)
        );
    }

    #[test]
    fn quoted_words_prefixes_other_scripts_and_lone_forms_stay_as_written() {
        for q in [
            r#""install""#,
            "instal*",
            "2024",
            "계정",
            "us",
            "qemu-img",
            "zebra",
        ] {
            assert_eq!(expanded(q, VOCAB), None, "{q}");
        }
    }

    #[test]
    fn every_word_of_the_tree_is_expanded_once_where_it_stands() {
        assert_eq!(
            expanded("install -hoping (happy OR \"use\") install", VOCAB).as_deref(),
            Some(
                r#"(("install" OR "installation" OR "installed" OR "installer") AND (("happy" OR "happiness") OR "use") AND ("install" OR "installation" OR "installed" OR "installer")) NOT ("hoping" OR "hope")"#
            )
        );
    }

    #[test]
    fn the_range_holds_every_form_and_bounds_short_stems() {
        assert_eq!(
            vocabulary_range("happi"),
            VocabularyRange {
                lo: "happ".into(),
                hi: "happ\u{10FFFF}".into()
            }
        );
        assert_eq!(vocabulary_range("use").lo, "us");
        assert_eq!(vocabulary_range("possibl").lo, "possib");
        assert_eq!(vocabulary_range("run").lo, "run");
        assert_eq!(vocabulary_range("instal").lo, "instal");
        // The bound is above every longer term of the prefix, in byte order.
        let r = vocabulary_range("happi");
        assert!(r.lo.as_str() <= "happzzzz" && "happzzzz" < r.hi.as_str());
        assert!("happ\u{ffff}" < r.hi.as_str() && "hapq" > r.hi.as_str());
    }

    #[test]
    fn forms_made_by_endings_share_the_stem_and_probing_keeps_the_held_ones() {
        let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
        let made = candidates(&stemmer, "install");
        for form in [
            "installation",
            "installations",
            "installed",
            "installer",
            "installing",
            "installs",
        ] {
            assert!(made.iter().any(|m| m == form), "{form} in {made:?}");
        }
        assert!(
            !made.iter().any(|m| m == "install"),
            "the word itself is not a candidate"
        );
        assert!(made.iter().all(|m| stem(&stemmer, m) == "instal"));
        let happy = candidates(&stemmer, "happy");
        assert!(happy.iter().any(|m| m == "happiness"), "{happy:?}");
        // Probing: the index holds two of them.
        let root = language::read("install \"install\"", Tokenizer::Unicode61)
            .unwrap()
            .root;
        let mut probe = |asked: &[String]| -> Result<Vec<String>, ()> {
            Ok(asked
                .iter()
                .filter(|f| ["installed", "installs"].contains(&f.as_str()))
                .cloned()
                .collect())
        };
        let node = expand_with(&root, Lookup::Probe(&mut probe)).unwrap().unwrap();
        assert_eq!(
            fts5(&node, true),
            r#"("install" OR "installed" OR "installs") AND "install""#
        );
    }

    #[test]
    fn settings_read_and_record() {
        assert_eq!(Stemming::parse(" English ").unwrap(), Stemming::English);
        assert_eq!(Stemming::parse("none").unwrap(), Stemming::Off);
        assert!(Stemming::parse("porter").is_err());
        assert_eq!(Stemming::recorded(None), Stemming::English);
        assert_eq!(Stemming::recorded(Some("none")), Stemming::Off);
        assert_eq!(
            Stemming::recorded(Some("french")),
            Stemming::Off,
            "a newer build's"
        );
    }
}
