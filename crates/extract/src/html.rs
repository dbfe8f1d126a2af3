//! HTML: a single streaming pass over html5ever's tokenizer (the browser-grade tokenizer
//! behind its tree builder), without building a DOM.
//!
//! # Why not a DOM renderer
//!
//! html2text builds an html5ever DOM and walks it; on deeply nested markup that costs
//! quadratic time (and it ignored the stop flag). The tokenizer alone is linear: each token
//! does O(1) work here, and the only state is a few counters. What we give up is the tree
//! builder's error recovery (implied end tags, foster parenting), which moves text around
//! rather than hiding or revealing it. On the real pages measured the words differ from
//! html2text's only where html2text decorates (strike-through as combining characters,
//! `O(n²)` for `O(n<sup>2</sup>)`).
//!
//! The timings against html2text, old and new, are in docs/DESIGN.md ("Why each
//! reader"): html2text grows quadratically with the nesting, this pass linearly.

//! # What counts as text
//!
//! Character data outside hidden elements (`script`, `style`, `noscript`, `template`,
//! `title` and the other raw-text containers, in any namespace, so SVG's `<style>` too).
//! Block elements become line breaks, table cells tabs, runs of white space one space
//! (except inside `<pre>`), as a reader of the rendered page would see them; an image's
//! `alt` text stands in for the image. Attributes past a tag's 64th never reach the
//! tokenizer (`attr_limit` says why).
//!
//! # The title
//!
//! The page's title is what a browser shows as `document.title`: the text of the first
//! `<title>` element, with its character references decoded, wherever it stands (a page
//! that forgot its `<head>` still has one). A `<title>` inside `<svg>` names the drawing,
//! not the page, and one inside `<template>` is not in the document: both are passed over.

use std::cell::RefCell;
use std::sync::atomic::AtomicBool;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::{
    BufferQueue, Tag, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};

use super::text::{self, Decoded};
use super::title::{clean_language, TitleText};
use crate::stop::check_stop;
use leasehold::extract::ExtractError;

mod attr_limit;

use attr_limit::{chunks, raw_kind, AttributeLimit};

/// Input is fed to the tokenizer in chunks of this many bytes, and `stop` is polled between
/// chunks: the tokenizer's work per chunk is linear in its size, so this bounds how long a
/// worker that lost its lease keeps going (well under a millisecond per chunk).
const CHUNK_BYTES: usize = 16 * 1024;

/// How far into the document a `<meta charset>` may appear and still count. The HTML
/// standard's prescan looks at the first 1024 bytes; a declaration later than that is
/// ignored by browsers too.
const META_PRESCAN_BYTES: usize = 1024;

/// Decodes (BOM, then `<meta charset>`, then UTF-8, then a guess) and renders.
pub(super) fn extract(bytes: &[u8], stop: &AtomicBool) -> Result<Decoded, ExtractError> {
    let declared = meta_charset(&bytes[..bytes.len().min(META_PRESCAN_BYTES)]);
    let decoded = text::decode_with_hint(bytes, declared);
    let rendered = render(&decoded.text, stop)?;
    // HTML has no standard date of its own: a page's date is left to its server.
    Ok(Decoded {
        text: rendered.text,
        encoding: decoded.encoding,
        title: rendered.title,
        author: rendered.author,
        date: None,
        pages: None,
        language: rendered.language,
    })
}

/// A page's visible text, its title, its author and its language.
pub(super) struct Rendered {
    pub(super) text: String,
    pub(super) title: Option<String>,
    pub(super) author: Option<String>,
    pub(super) language: Option<String>,
}

/// Renders HTML to text in one linear pass, polling `stop` every [`CHUNK_BYTES`].
pub(super) fn to_text(html: &str, stop: &AtomicBool) -> Result<String, ExtractError> {
    render(html, stop).map(|rendered| rendered.text)
}

/// [`to_text`], with the page's title (see the module's docs for which one).
pub(super) fn render(html: &str, stop: &AtomicBool) -> Result<Rendered, ExtractError> {
    let tokenizer = Tokenizer::new(TextSink::default(), TokenizerOpts::default());
    tokenize(&tokenizer, html, stop)?;
    Ok(tokenizer.sink.out.into_inner().finish())
}

/// Feeds `html` to the tokenizer in chunks, each tag's attributes bounded first (see
/// `attr_limit`: the tokenizer's work on one tag grows with the square of their number).
fn tokenize<S: TokenSink>(
    tokenizer: &Tokenizer<S>,
    html: &str,
    stop: &AtomicBool,
) -> Result<(), ExtractError> {
    let queue = BufferQueue::default();
    let mut limit = AttributeLimit::default();
    for chunk in chunks(html, CHUNK_BYTES) {
        check_stop(stop)?;
        queue.push_back(StrTendril::from_slice(&limit.filter(chunk)));
        // `Script` results only happen for sinks that run scripts; ours never asks.
        let _ = tokenizer.feed(&queue);
    }
    check_stop(stop)?;
    tokenizer.end();
    Ok(())
}

/// `<template>` holds ordinary markup that is never rendered; it nests, so it is counted.
const TEMPLATE: &str = "template";

/// `<svg>` may hold a `<title>` of its own (the drawing's); it nests, so it is counted.
const SVG: &str = "svg";

/// Elements that start and end a line when rendered.
fn is_block(name: &str) -> bool {
    matches!(
        name,
        "address"
            | "article"
            | "aside"
            | "blockquote"
            | "br"
            | "dd"
            | "details"
            | "dialog"
            | "div"
            | "dl"
            | "dt"
            | "fieldset"
            | "figcaption"
            | "figure"
            | "footer"
            | "form"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "header"
            | "hr"
            | "li"
            | "main"
            | "nav"
            | "ol"
            | "p"
            | "pre"
            | "section"
            | "summary"
            | "table"
            | "tr"
            | "ul"
            | "caption"
            | "body"
            | "html"
            | "textarea"
            | "option"
    )
}

/// Whether one raw tag (`<br>`, `</div>`, `<p class=x>`) breaks the line when rendered:
/// for Markdown's inline HTML, which arrives as single tags rather than a document.
#[cfg_attr(not(feature = "markdown"), allow(dead_code))]
pub(super) fn is_line_break_tag(raw: &str) -> bool {
    let name = raw.strip_prefix('<').unwrap_or(raw);
    let name = name.strip_prefix('/').unwrap_or(name);
    let len = name
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(name.len());
    is_block(&name[..len].to_ascii_lowercase())
}

/// The tokenizer's sink. html5ever (0.40) hands the sink `&self`, hence the `RefCell`s.
#[derive(Default)]
struct TextSink {
    out: RefCell<TextOut>,
}

/// The rendered text so far and the state that decides what to do with the next token.
#[derive(Default)]
struct TextOut {
    text: String,
    /// Inside a raw-text hidden element (`script`, `style`...): the tokenizer emits no tags
    /// there but the closing one, so the next end tag ends it.
    in_raw: bool,
    /// Depth of open `<template>` elements.
    template_depth: usize,
    /// Depth of `<pre>`: white space inside is kept as written.
    pre_depth: usize,
    /// A space is owed before the next word (collapsed white space).
    pending_space: bool,
    /// Depth of open `<svg>` elements, whose `<title>` is not the page's.
    svg_depth: usize,
    /// Where the page's title is in the token stream.
    title: TitleState,
    /// The text of the title element, once it starts.
    title_text: TitleText,
    /// The first `<meta name="author">`'s content, once one is met.
    author: Option<TitleText>,
    /// The root `<html>` element's `lang` once that element is met (`Some(None)`:
    /// met, without a language one can read).
    language: Option<Option<String>>,
}

/// Where the tokenizer is relative to the page's title: the first `<title>` counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum TitleState {
    /// No `<title>` has started yet.
    #[default]
    Before,
    /// Inside the page's `<title>`: its characters are the title.
    Inside,
    /// The title has ended; later `<title>` elements are ignored.
    Taken,
}

impl TokenSink for TextSink {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        let mut out = self.out.borrow_mut();
        match token {
            Token::TagToken(tag) => return out.tag(&tag),
            Token::CharacterTokens(chars) if out.title == TitleState::Inside => {
                out.title_text.push_str(&chars)
            }
            Token::CharacterTokens(chars) if !out.hidden() => out.chars(&chars),
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

impl TextOut {
    fn hidden(&self) -> bool {
        self.in_raw || self.template_depth > 0
    }

    fn tag(&mut self, tag: &Tag) -> TokenSinkResult<()> {
        let name: &str = &tag.name;
        if self.in_raw {
            self.in_raw = tag.kind != TagKind::EndTag;
            if !self.in_raw && self.title == TitleState::Inside {
                self.title = TitleState::Taken;
            }
            return TokenSinkResult::Continue;
        }
        match tag.kind {
            TagKind::StartTag => {
                if let Some(kind) = raw_kind(name) {
                    self.in_raw = true;
                    self.title_starts(name);
                    return TokenSinkResult::RawData(kind);
                }
                if name == TEMPLATE && !tag.self_closing {
                    self.template_depth += 1;
                }
                if name == SVG && !tag.self_closing {
                    self.svg_depth += 1;
                }
            }
            TagKind::EndTag if name == TEMPLATE => {
                self.template_depth = self.template_depth.saturating_sub(1);
            }
            TagKind::EndTag if name == SVG => {
                self.svg_depth = self.svg_depth.saturating_sub(1);
            }
            TagKind::EndTag => {}
        }
        if !self.hidden() {
            self.author_meta(tag);
            self.root_language(tag);
            self.visible_tag(tag);
        }
        TokenSinkResult::Continue
    }

    /// `<meta name="author" content="...">` (the standard metadata name, in any ASCII
    /// case): the first one outside SVG and templates names the page's author, even with
    /// no content (the page then says it has none).
    fn author_meta(&mut self, tag: &Tag) {
        if tag.kind != TagKind::StartTag || &*tag.name != "meta" || self.author.is_some() {
            return;
        }
        let value = |name: &str| {
            tag.attrs
                .iter()
                .find(|a| &*a.name.local == name)
                .map(|a| &*a.value)
        };
        let named_author = value("name").is_some_and(|n| n.trim().eq_ignore_ascii_case("author"));
        if named_author && self.svg_depth == 0 {
            let mut author = TitleText::default();
            author.push_str(value("content").unwrap_or_default());
            self.author = Some(author);
        }
    }

    /// `<html lang="...">`: the page's language (the first `<html>` tag's, as a
    /// browser takes it), as `clean_language` reads it.
    fn root_language(&mut self, tag: &Tag) {
        if tag.kind != TagKind::StartTag || &*tag.name != "html" || self.language.is_some() {
            return;
        }
        let lang = tag.attrs.iter().find(|a| &*a.name.local == "lang");
        self.language = Some(lang.and_then(|a| clean_language(&a.value)));
    }

    /// A raw-text element `name` has started: if it is the page's first `<title>` outside
    /// SVG and templates, its characters are the title.
    fn title_starts(&mut self, name: &str) {
        let in_document = self.svg_depth == 0 && self.template_depth == 0;
        if name == "title" && self.title == TitleState::Before && in_document {
            self.title = TitleState::Inside;
        }
    }

    fn visible_tag(&mut self, tag: &Tag) {
        let (kind, name) = (tag.kind, &*tag.name);
        if name == "pre" {
            self.pre_depth = match kind {
                TagKind::StartTag => self.pre_depth + 1,
                TagKind::EndTag => self.pre_depth.saturating_sub(1),
            };
        }
        if is_block(name) {
            self.line_break();
        } else if matches!(name, "td" | "th") && kind == TagKind::StartTag {
            self.separate('\t');
        } else if name == "img" && kind == TagKind::StartTag {
            // Alt text stands in for the image for readers who cannot see it; it is text
            // a person would search for.
            if let Some(alt) = tag.attrs.iter().find(|a| &*a.name.local == "alt") {
                self.pending_space = true;
                self.chars(&alt.value);
                self.pending_space = true;
            }
        }
    }

    fn chars(&mut self, chars: &str) {
        if self.pre_depth > 0 {
            self.flush_space();
            self.text.push_str(chars);
            return;
        }
        for (i, word) in chars.split(is_html_space).enumerate() {
            if i > 0 {
                self.pending_space = true;
            }
            if !word.is_empty() {
                self.flush_space();
                self.text.push_str(word);
            }
        }
    }

    /// Writes the owed space, unless the line is empty (leading white space is not shown).
    fn flush_space(&mut self) {
        if self.pending_space && !self.text.is_empty() && !self.text.ends_with(['\n', '\t']) {
            self.text.push(' ');
        }
        self.pending_space = false;
    }

    /// Ends the current line once: nested blocks must not add a break each.
    fn line_break(&mut self) {
        self.pending_space = false;
        if self.text.ends_with(['\t', ' ']) {
            self.text.truncate(self.text.trim_end_matches(['\t', ' ']).len());
        }
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.text.push('\n');
        }
    }

    fn separate(&mut self, sep: char) {
        self.pending_space = false;
        if !self.text.is_empty() && !self.text.ends_with(['\n', sep]) {
            self.text.push(sep);
        }
    }

    fn finish(mut self) -> Rendered {
        self.text.truncate(self.text.trim_end().len());
        Rendered {
            text: self.text,
            title: self.title_text.finish(),
            author: self.author.and_then(TitleText::finish),
            language: self.language.flatten(),
        }
    }
}

/// HTML's definition of white space (not Unicode's: U+00A0 is a visible non-breaking space).
fn is_html_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0C' | '\r')
}

/// The encoding named by a `<meta charset=...>` or `<meta http-equiv content="...;
/// charset=...">` in `head`, in the way the HTML standard's prescan finds it (simplified:
/// a case-insensitive search for `charset=` inside a `<meta` tag).
fn meta_charset(head: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let lower = head.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = find(&lower[from..], b"<meta") {
        let start = from + at;
        let end = lower[start..]
            .iter()
            .position(|&b| b == b'>')
            .map_or(lower.len(), |e| start + e);
        if let Some(found) = charset_in(&lower[start..end]) {
            return Some(found);
        }
        from = end;
    }
    None
}

/// The `charset=` value in one meta tag's bytes, if it names an encoding.
fn charset_in(tag: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let at = find(tag, b"charset")? + b"charset".len();
    let rest = tag[at..]
        .trim_ascii_start()
        .strip_prefix(b"=")?
        .trim_ascii_start();
    let rest = rest
        .strip_prefix(b"\"")
        .or_else(|| rest.strip_prefix(b"'"))
        .unwrap_or(rest);
    let len = rest
        .iter()
        .position(|&b| matches!(b, b'"' | b'\'' | b';' | b'/' | b'>') || b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    let found = encoding_rs::Encoding::for_label(&rest[..len])?;
    // A page that says UTF-16 in ASCII bytes is not UTF-16; the standard reads it as UTF-8.
    if found == encoding_rs::UTF_16LE || found == encoding_rs::UTF_16BE {
        Some(encoding_rs::UTF_8)
    } else {
        Some(found)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<!DOCTYPE html>
<html><head><title>Title words</title>
<style>body { color: red; } .forbidden-style { display: none }</style>
<script>var forbidden = "script text"; console.log(forbidden);</script>
</head>
<body>
<h1>Velvet <em>harbor</em> notes</h1>
<p>First <b>bold</b> paragraph with a <a href="https://example.invalid/x">link</a>.<img src=x alt="harbor map"></p>
<script type="module">import "forbidden-module";</script>
<style>p::after { content: "forbidden-inline-style" }</style>
<svg><style>circle { fill: forbidden-svg }</style><text>drawn</text></svg>
<math><mtext>formula</mtext><script>forbidden-math</script></math>
<noscript><p>forbidden noscript</p></noscript>
<template><p>forbidden template</p><template>nested</template>forbidden still</template>
<ul><li>one &amp; two</li></ul>
</body></html>"#;

    fn render(html: &str) -> String {
        to_text(html, &AtomicBool::new(false)).unwrap()
    }

    fn extract_text(bytes: &[u8]) -> Decoded {
        extract(bytes, &AtomicBool::new(false)).unwrap()
    }

    #[test]
    fn text_survives_without_markup() {
        let text = render(PAGE);
        for wanted in [
            "Velvet harbor notes",
            "First bold paragraph",
            "link",
            "drawn",
            "formula",
            "one & two",
            "link. harbor map",
        ] {
            assert!(text.contains(wanted), "{wanted:?} missing from {text:?}");
        }
        for markup in ["<", "*", "https://", "&amp;"] {
            assert!(!text.contains(markup), "{markup:?} leaked into {text:?}");
        }
    }

    #[test]
    fn script_and_style_contents_are_dropped() {
        let text = render(PAGE);
        for hidden in ["forbidden", "color", "console", "display", "nested", "Title"] {
            assert!(!text.contains(hidden), "{hidden:?} leaked into {text:?}");
        }
    }

    fn title(html: &str) -> Option<String> {
        super::render(html, &AtomicBool::new(false)).unwrap().title
    }

    #[test]
    fn the_title_is_the_first_title_elements_text_decoded() {
        assert_eq!(
            extract_text(PAGE.as_bytes()).title.as_deref(),
            Some("Title words")
        );
        assert_eq!(
            title("<title>\n  Fish &amp; chips &#8211;\tmenu </title><title>second</title>").as_deref(),
            Some("Fish & chips \u{2013} menu")
        );
        // No head, no html: a browser still finds it.
        assert_eq!(
            title("<p>body first</p><title>late</title>").as_deref(),
            Some("late")
        );
        // The title is not page text, and the text is the same with or without one.
        assert_eq!(render("<title>T</title><p>x</p>"), "x");
    }

    #[test]
    fn titles_of_drawings_and_templates_are_not_the_pages() {
        let page = "<html><body><svg><title>a circle</title><circle/></svg>\
                    <template><title>templated</title></template><title>Page</title></body></html>";
        assert_eq!(title(page).as_deref(), Some("Page"));
        assert_eq!(title("<svg><title>only the drawing</title></svg>"), None);
    }

    fn author(html: &str) -> Option<String> {
        super::render(html, &AtomicBool::new(false)).unwrap().author
    }

    #[test]
    fn the_author_is_the_first_author_meta() {
        let page = r#"<head><meta name="description" content="not this"><META NAME=" Author " CONTENT="Ana
            Ruiz &amp; co"><meta name="author" content="second"></head><p>x</p>"#;
        assert_eq!(author(page).as_deref(), Some("Ana Ruiz & co"));
        assert_eq!(render(page), "x", "the author is not page text");
        assert_eq!(author(r#"<meta property="author" content="og"><p>x</p>"#), None);
        assert_eq!(
            author(r#"<meta name="author"><meta name="author" content="late">"#),
            None
        );
        let hidden = r#"<template><meta name="author" content="templated"></template><svg><meta name="author" content="drawn"/></svg>"#;
        assert_eq!(author(hidden), None);
        let long = format!(r#"<meta name="author" content="{}">"#, "word ".repeat(220_000));
        assert_eq!(author(&long).map(|a| a.chars().count()), Some(299));
        let done = extract_text(br#"<meta name=author content="Bo Li"><p>x</p>"#);
        assert_eq!((done.author.as_deref(), done.date), (Some("Bo Li"), None));
    }

    #[test]
    fn no_title_empty_titles_and_placeholders_are_none() {
        for page in [
            "<p>no title</p>",
            "<title></title><p>x</p>",
            "<title>  \n </title>",
            "<title>Untitled Document</title>",
            "<title>untitled</title><title>the second is not looked at</title>",
        ] {
            assert_eq!(title(page), None, "{page:?}");
        }
    }

    #[test]
    fn a_megabyte_title_is_cut_to_one_line_of_300_characters() {
        let words = "harbor ".repeat(150_000);
        let page = format!("<title>{words}</title><p>velvet harbor</p>");
        assert!(page.len() > 1 << 20);
        let rendered = super::render(&page, &AtomicBool::new(false)).unwrap();
        let kept = rendered.title.expect("a title");
        // 43 words of 6 letters and the 42 spaces between them.
        assert_eq!(kept.chars().count(), 300);
        assert!(kept.starts_with("harbor harbor") && !kept.contains("  "));
        assert_eq!(rendered.text, "velvet harbor");
        let one_word = format!("<title>{}</title>", "x".repeat(1 << 20));
        assert_eq!(title(&one_word).unwrap().len(), 300);
    }

    #[test]
    fn blocks_become_lines_and_inline_white_space_collapses() {
        let html = "<div>one\n   two<p>three</p><ul><li>four</li><li>five</li></ul>six<br>seven</div>\
                    <table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>\
                    <pre>  kept\n    as is</pre>";
        assert_eq!(
            render(html),
            "one two\nthree\nfour\nfive\nsix\nseven\na\tb\nc\n  kept\n    as is"
        );
    }

    #[test]
    fn deeply_nested_markup_does_not_overflow_the_stack() {
        let depth = 3_000;
        let html = format!("{}velvet harbor{}", "<div>".repeat(depth), "</div>".repeat(depth));
        let text = std::thread::spawn(move || render(&html))
            .join()
            .expect("no stack overflow or panic");
        assert_eq!(text, "velvet harbor");
    }

    #[test]
    fn long_paragraphs_are_not_wrapped_mid_phrase() {
        let filler = "word ".repeat(500);
        let text = render(&format!("<p>{filler} velvet harbor {filler}</p>"));
        assert!(text.contains("velvet harbor"));
    }

    #[test]
    fn tag_soup_and_stray_bytes_are_tolerated() {
        // Not UTF-8: decoded as the likeliest legacy encoding rather than failing.
        let decoded = extract_text(b"<p>unclosed <b>velvet <i>harbor\xFF</p></div></table>");
        assert!(decoded.text.contains("velvet harbor\u{FF}"), "{decoded:?}");
        let soup = render("<p>a<<b>b</p><p x='<'>c</ p><!-- velvet --><");
        assert!(
            soup.contains("a<b") && soup.contains('c') && !soup.contains("velvet"),
            "{soup:?}"
        );
    }

    #[test]
    fn meta_charset_decides_the_encoding() {
        let (body, _, _) = encoding_rs::WINDOWS_1251.encode("\u{41f}\u{440}\u{438}\u{432}\u{435}\u{442}");
        let page = [
            b"<html><head><meta http-equiv=\"Content-Type\" content=\"text/html; charset=windows-1251\">"
                .as_slice(),
            b"</head><body><p>",
            &body,
            b"</p></body></html>",
        ]
        .concat();
        let decoded = extract_text(&page);
        assert_eq!(decoded.text, "\u{41f}\u{440}\u{438}\u{432}\u{435}\u{442}");
        assert_eq!(decoded.encoding, Some("windows-1251"));
        let (latin, _, _) = encoding_rs::WINDOWS_1252.encode("<meta charset='iso-8859-1'><p>caf\u{e9}");
        assert_eq!(extract_text(&latin).encoding, Some("windows-1252"));
    }

    #[test]
    fn meta_charset_is_honoured_only_in_the_first_1024_bytes() {
        assert_eq!(
            meta_charset(b"<META CHARSET=\"Shift_JIS\">"),
            Some(encoding_rs::SHIFT_JIS)
        );
        assert_eq!(meta_charset(b"<meta charset=utf-16>"), Some(encoding_rs::UTF_8));
        assert_eq!(meta_charset(b"<meta name=x><p>charset=koi8-r</p>"), None);
        let late = format!("{}<meta charset=koi8-r>caf\u{e9}", " ".repeat(1024));
        assert_eq!(extract_text(late.as_bytes()).encoding, Some("UTF-8"));
    }

    #[test]
    fn raised_stop_flag_stops_between_chunks() {
        let html = "<p>velvet harbor</p>".repeat(10_000);
        let err = to_text(&html, &AtomicBool::new(true)).unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err:?}");
    }

    #[test]
    fn tags_and_references_split_across_chunks_are_whole() {
        for cut in 1..12 {
            let pad = "a".repeat(CHUNK_BYTES - cut);
            let text = render(&format!(
                "{pad} <script>hidden</script><p>velvet &amp; harbor</p>"
            ));
            assert!(
                text.ends_with("\nvelvet & harbor"),
                "cut {cut}: {:?}",
                &text[pad.len()..]
            );
        }
    }

    /// Records the most attributes one tag had when the tokenizer emitted it.
    #[derive(Default)]
    struct MostAttributes(std::cell::Cell<usize>);

    impl TokenSink for MostAttributes {
        type Handle = ();

        fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
            if let Token::TagToken(tag) = token {
                self.0.set(self.0.get().max(tag.attrs.len()));
            }
            TokenSinkResult::Continue
        }
    }

    #[test]
    fn a_tag_with_20k_attributes_reaches_the_tokenizer_with_the_limit() {
        let attributes: Vec<String> = (0..20_000).map(|i| format!("a{i}=\"x>\"")).collect();
        let html = format!("<p>velvet <b {}>harbor</b></p>", attributes.join(" "));
        let tokenizer = Tokenizer::new(MostAttributes::default(), TokenizerOpts::default());
        tokenize(&tokenizer, &html, &AtomicBool::new(false)).unwrap();
        assert_eq!(tokenizer.sink.0.get(), attr_limit::MAX_ATTRIBUTES);
        assert_eq!(render(&html), "velvet harbor");
    }

    #[test]
    fn chunks_split_on_char_boundaries() {
        let s = "\u{e9}".repeat(10);
        let pieces: Vec<&str> = chunks(&s, 3).collect();
        assert_eq!(pieces.concat(), s);
        assert!(pieces.iter().all(|p| p.len() == 4));
    }

    #[test]
    fn sniffing_needs_a_doctype_or_html_tag() {
        assert!(super::super::text::looks_like_html("\n  <!doctype HTML>"));
        assert!(super::super::text::looks_like_html("<html lang=en>"));
        assert!(!super::super::text::looks_like_html("<p>fragment</p>"));
        assert!(!super::super::text::looks_like_html("about <html> tags"));
        assert!(!super::super::text::looks_like_html("<ht"));
    }
}
