//! Markdown: parsed by pulldown-cmark (CommonMark plus the common GitHub extensions) and
//! flattened to the text a reader would see, so markup never reaches the search index.
//!
//! # The title
//!
//! Markdown has no title of its own, but a document's first heading is what its author
//! put at the top, so that is the title: the text of the first ATX (`#`) or setext
//! (underlined) heading of any level that has any, its markup dropped as in the text.
//! Raw HTML headings (`<h1>`) are not looked at. YAML front matter is not read (the text
//! keeps it as written), but a heading inside it is no title: front matter's closing `---`
//! would otherwise make its last line a setext heading ("title: My post").

use std::sync::atomic::AtomicBool;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use super::html;
use super::text::{self, Decoded};
use super::title::TitleText;
use crate::stop::check_stop;
use leasehold::extract::ExtractError;

/// Events between two polls of the stop flag: cheap enough to poll often, rare enough to
/// cost nothing next to the parsing.
const STOP_POLL_EVENTS: usize = 1024;

pub(super) fn extract(bytes: &[u8], stop: &AtomicBool) -> Result<Decoded, ExtractError> {
    let decoded = text::decode(bytes);
    let (text, title) = to_text(&decoded.text, stop)?;
    // Markdown has no standard place for an author or a date (front matter is not read).
    Ok(Decoded {
        text,
        encoding: decoded.encoding,
        title,
        author: None,
        date: None,
        pages: None,
        language: None,
    })
}

/// Markdown is parsed in segments of about this many bytes. pulldown-cmark finds every
/// block of its input before it yields the first event, which cannot be interrupted: on a
/// 60 MB document that first pass took 3.3 s (release build). Segments bound that to a few
/// milliseconds between polls of the stop flag.
const SEGMENT_BYTES: usize = 256 * 1024;

/// Walks the event stream keeping text and code, replacing block boundaries with line
/// breaks, and finds the title (the first heading). Raw HTML blocks are collected and
/// rendered by the HTML extractor so their text is kept but their tags (and any
/// script/style) are not.
fn to_text(source: &str, stop: &AtomicBool) -> Result<(String, Option<String>), ExtractError> {
    let mut out = String::new();
    let mut title = FirstHeading::new(front_matter_end(source));
    let mut base = 0;
    for segment in segments(source, SEGMENT_BYTES) {
        check_stop(stop)?;
        render(segment, base, &mut out, &mut title, stop)?;
        end_block(&mut out);
        base += segment.len();
    }
    out.truncate(out.trim_end().len());
    Ok((out, title.finish()))
}

/// Renders one segment, which starts `base` bytes into the document, onto `out`.
fn render(
    source: &str,
    base: usize,
    out: &mut String,
    title: &mut FirstHeading,
    stop: &AtomicBool,
) -> Result<(), ExtractError> {
    let mut flat = Flattener {
        out,
        html_block: String::new(),
        open_lists: 0,
    };
    let events = Parser::new_ext(source, options()).into_offset_iter();
    for (i, (event, at)) in events.enumerate() {
        if i % STOP_POLL_EVENTS == 0 {
            check_stop(stop)?;
        }
        title.event(&event, base + at.start);
        flat.event(event, stop)?;
    }
    Ok(())
}

/// Finds the document's title, its first heading with text, in the event stream.
struct FirstHeading {
    /// Headings that start before this byte are inside front matter.
    from: usize,
    state: HeadingState,
    text: TitleText,
}

/// Where the event stream is relative to the title's heading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeadingState {
    /// No heading with text yet.
    Looking,
    /// Inside a heading: its text is the title if it has any.
    Inside,
    /// The title is found; later headings are not looked at.
    Found,
}

impl FirstHeading {
    fn new(from: usize) -> Self {
        Self {
            from,
            state: HeadingState::Looking,
            text: TitleText::default(),
        }
    }

    /// Takes in one event, which starts `at` bytes into the document.
    fn event(&mut self, event: &Event<'_>, at: usize) {
        match (self.state, event) {
            (HeadingState::Looking, Event::Start(Tag::Heading { .. })) if at >= self.from => {
                self.state = HeadingState::Inside;
            }
            (
                HeadingState::Inside,
                Event::Text(t) | Event::Code(t) | Event::InlineMath(t) | Event::DisplayMath(t),
            ) => self.text.push_str(t),
            (HeadingState::Inside, Event::SoftBreak | Event::HardBreak) => self.text.push(' '),
            (HeadingState::Inside, Event::End(TagEnd::Heading(_))) => {
                self.state = if self.text.is_empty() {
                    HeadingState::Looking
                } else {
                    HeadingState::Found
                };
            }
            _ => {}
        }
    }

    fn finish(self) -> Option<String> {
        self.text.finish()
    }
}

/// Front matter is at most this long; a longer "block" is not front matter but a document
/// that opens with a thematic break.
const MAX_FRONT_MATTER_BYTES: usize = 64 * 1024;

/// The byte where YAML front matter ends (after its closing line), or 0 when the document
/// has none: a first line of `---`, then a line of `---` or `...` within
/// [`MAX_FRONT_MATTER_BYTES`].
fn front_matter_end(source: &str) -> usize {
    let mut lines = source.split_inclusive('\n');
    let Some(first) = lines.next().filter(|line| line.trim_end() == "---") else {
        return 0;
    };
    let mut end = first.len();
    for line in lines {
        end += line.len();
        if end > MAX_FRONT_MATTER_BYTES {
            return 0;
        }
        if matches!(line.trim_end(), "---" | "...") {
            return end;
        }
    }
    0
}

/// Turns the event stream into text. A block's words are never joined to the next
/// block's: every block starts on a line of its own as well as ending one, because blocks
/// nest without a paragraph around their text (a tight list item holds its text bare, then
/// its sub-list), so the end of one block is not always what comes before the next.
struct Flattener<'o> {
    out: &'o mut String,
    /// The raw HTML of the current HTML block, rendered as a whole at its end.
    html_block: String,
    /// Lists open around the current event: a sub-list ends its line, not a paragraph.
    open_lists: usize,
}

impl Flattener<'_> {
    fn event(&mut self, event: Event<'_>, stop: &AtomicBool) -> Result<(), ExtractError> {
        match event {
            Event::Text(t) | Event::Code(t) | Event::InlineMath(t) | Event::DisplayMath(t) => {
                self.out.push_str(&t)
            }
            Event::Html(raw) => self.html_block.push_str(&raw),
            // Most inline HTML is formatting, but `<br>` (common in table cells) and block
            // tags are line breaks as in the rendered page.
            Event::InlineHtml(raw) if html::is_line_break_tag(&raw) => end_line(self.out),
            Event::SoftBreak => self.out.push(' '),
            Event::HardBreak => self.out.push('\n'),
            Event::Rule => end_block(self.out),
            Event::Start(tag) => self.start(&tag),
            Event::End(TagEnd::HtmlBlock) => {
                self.out
                    .push_str(html::to_text(&self.html_block, stop)?.trim_end());
                self.html_block.clear();
                end_block(self.out);
            }
            Event::End(tag) => self.end(tag),
            // Other inline HTML is only tags; footnote markers and task boxes are decoration.
            _ => {}
        }
        Ok(())
    }

    fn start(&mut self, tag: &Tag<'_>) {
        match tag {
            Tag::List(_) => {
                self.open_lists += 1;
                end_line(self.out);
            }
            Tag::Paragraph
            | Tag::Heading { .. }
            | Tag::BlockQuote(_)
            | Tag::CodeBlock(_)
            | Tag::HtmlBlock
            | Tag::Item
            | Tag::FootnoteDefinition(_)
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::Table(_)
            | Tag::TableHead
            | Tag::TableRow => end_line(self.out),
            // Cells are separated at their end; the rest is inline.
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::List(_) => {
                self.open_lists = self.open_lists.saturating_sub(1);
                if self.open_lists > 0 {
                    end_line(self.out)
                } else {
                    end_block(self.out)
                }
            }
            TagEnd::Paragraph
            | TagEnd::Heading(_)
            | TagEnd::CodeBlock
            | TagEnd::BlockQuote(_)
            | TagEnd::Table
            | TagEnd::FootnoteDefinition
            | TagEnd::DefinitionList => end_block(self.out),
            TagEnd::Item
            | TagEnd::TableHead
            | TagEnd::TableRow
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition => end_line(self.out),
            TagEnd::TableCell => self.out.push('\t'),
            _ => {}
        }
    }
}

/// Splits Markdown into pieces of at least `size` bytes, only where a new top-level block
/// starts: after a blank line, at a line that is not indented, not a block quote and not
/// inside a fenced code block. Every block is closed there, so the text is the same as from
/// one parse, except that a reference link whose definition is in another segment stays
/// literal and an HTML comment spanning blank lines across the cut shows its second half.
/// Documents under `size` are never split.
fn segments(source: &str, size: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let (mut start, mut pos) = (0, 0);
    let mut fence: Option<char> = None;
    let mut after_blank = false;
    for line in source.split_inclusive('\n') {
        let line_start = pos;
        pos += line.len();
        let content = line.trim_start_matches(' ');
        let indent = line.len() - content.len();
        let top_level = indent == 0 && !content.starts_with(['>', '\t', '\n', '\r']);
        if fence.is_none() && after_blank && top_level && line_start - start >= size {
            pieces.push(&source[start..line_start]);
            start = line_start;
        }
        if indent < 4 {
            fence = toggle_fence(fence, content);
        }
        after_blank = content.trim().is_empty();
    }
    pieces.push(&source[start..]);
    pieces
}

/// Tracks fenced code blocks: a line opening with three backticks or tildes opens one, and
/// the same character closes it.
fn toggle_fence(open: Option<char>, line: &str) -> Option<char> {
    let fence_char = ['`', '~']
        .into_iter()
        .find(|&c| line.starts_with(&c.to_string().repeat(3)));
    match (open, fence_char) {
        (None, Some(c)) => Some(c),
        (Some(open), Some(c)) if open == c => None,
        (open, _) => open,
    }
}

/// The syntax extensions whose content is real text (tables, footnotes, task lists...).
fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_DEFINITION_LIST
}

/// Ends the current line once: blocks nest, and each level must not add its own break.
fn end_line(out: &mut String) {
    if out.ends_with('\t') {
        out.pop();
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
}

/// Separates blocks by one blank line, like paragraphs in the rendered document.
fn end_block(out: &mut String) {
    end_line(out);
    if !out.is_empty() && !out.ends_with("\n\n") {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(md: &str) -> String {
        to_text(md, &AtomicBool::new(false)).unwrap().0
    }

    fn title(md: &str) -> Option<String> {
        to_text(md, &AtomicBool::new(false)).unwrap().1
    }

    #[test]
    fn the_title_is_the_first_heading_with_text_of_any_level() {
        let cases: &[(&str, Option<&str>)] = &[
            ("# The *copper* `kettle`\n\n# Second\n", Some("The copper kettle")),
            ("Intro text.\n\n### Deep &amp; low\n\n# Top\n", Some("Deep & low")),
            (
                "Setext *title*\nwrapped\n===\n\n# Later\n",
                Some("Setext title wrapped"),
            ),
            ("Minor\n-----\n", Some("Minor")),
            (
                "#\n\n## ![logo](l.png) Real <em>one</em>\n",
                Some("logo Real one"),
            ),
            ("no heading at all\n", None),
            ("    # indented code, not a heading\n", None),
            ("# Untitled\n", None),
        ];
        for (md, expected) in cases {
            assert_eq!(title(md).as_deref(), *expected, "{md:?}");
        }
    }

    #[test]
    fn front_matter_is_no_heading() {
        // Without the skip its last line would be a setext heading: "title: My post".
        let md = "---\ntitle: My post\n---\n\nBody text.\n\n## Section\n";
        assert_eq!(title(md).as_deref(), Some("Section"));
        assert_eq!(front_matter_end(md), 23);
        assert_eq!(title("---\ntitle: x\n...\n").as_deref(), None);
        // A thematic break that never closes is not front matter.
        assert_eq!(front_matter_end("---\nHeading\n===\n"), 0);
        assert_eq!(title("---\nHeading\n===\n").as_deref(), Some("Heading"));
        let long = format!("---\n{}---\n", "key: value\n".repeat(10_000));
        assert_eq!(front_matter_end(&long), 0);
    }

    #[test]
    fn the_title_is_found_past_the_first_segment() {
        let md = format!("{}# Far down\n", "para\n\n".repeat(SEGMENT_BYTES / 3));
        assert!(segments(&md, SEGMENT_BYTES).len() > 1);
        assert_eq!(title(&md).as_deref(), Some("Far down"));
    }

    #[test]
    fn blocks_become_lines_without_markup() {
        let md = "# The *copper* kettle\n\nSome **bold** and `code` text\nwrapped.\n\n\
                  - item [one](https://example.invalid)\n- item two\n\n> quoted\n";
        assert_eq!(
            run(md),
            "The copper kettle\n\nSome bold and code text wrapped.\n\n\
             item one\nitem two\n\nquoted"
        );
    }

    /// Blocks nested inside other blocks, each with the text it must give: no two words of
    /// different blocks may run together (tight list items hold their text without a
    /// paragraph, so only the start of the nested block separates them).
    const NESTED: &[(&str, &str, &str)] = &[
        (
            "lists in lists",
            "- apple\n  - banana\n    - cherry\n- damson\n",
            "apple\nbanana\ncherry\ndamson",
        ),
        (
            "ordered list in an item",
            "- fruit\n  1. apple\n  2. banana\n",
            "fruit\napple\nbanana",
        ),
        (
            "list in an ordered item",
            "1. fruit\n   - apple\n2. nuts\n",
            "fruit\napple\nnuts",
        ),
        ("quote in an item", "- apple\n  > banana\n", "apple\nbanana"),
        (
            "code block in an item",
            "- apple\n  ```\n  banana\n  ```\n",
            "apple\nbanana",
        ),
        (
            "indented code in an item",
            "- apple\n\n      banana\n",
            "apple\n\nbanana",
        ),
        (
            "table in an item",
            "- apple\n  | a | b |\n  |---|---|\n  | banana | cherry |\n",
            "apple\na\tb\nbanana\tcherry",
        ),
        ("heading in an item", "- # apple\n  banana\n", "apple\n\nbanana"),
        (
            "html block in an item",
            "- apple\n  <div>banana</div>\n",
            "apple\nbanana",
        ),
        (
            "list in a quote",
            "> apple\n> - banana\n> - cherry\n",
            "apple\n\nbanana\ncherry",
        ),
        ("quote in a quote", "> apple\n>> banana\n", "apple\n\nbanana"),
        (
            "list in a footnote",
            "apple[^n]\n\n[^n]: banana\n    - cherry\n",
            "apple\n\nbanana\n\ncherry",
        ),
        (
            "footnote after text",
            "apple[^n] banana\n\n[^n]: cherry\n",
            "apple banana\n\ncherry",
        ),
        (
            "task list in a list",
            "- apple\n  - [ ] banana\n  - [x] cherry\n",
            "apple\nbanana\ncherry",
        ),
        (
            "definition list",
            "apple\n: banana\n: cherry\n",
            "apple\nbanana\ncherry",
        ),
        (
            "hard breaks",
            "apple  \nbanana\\\ncherry\n",
            "apple\nbanana\ncherry",
        ),
        ("soft break", "apple\nbanana\n", "apple banana"),
        (
            "inline html breaks in a table cell",
            "| a |\n|---|\n| apple<br>banana<BR/>cherry |\n",
            "a\napple\nbanana\ncherry",
        ),
        (
            "inline html that is formatting",
            "ap<span>ple</span> <b>banana</b>\n",
            "apple banana",
        ),
        (
            "rule between items",
            "- apple\n\n  ***\n- banana\n",
            "apple\n\nbanana",
        ),
        (
            "loose items keep their paragraphs",
            "- apple\n\n  banana\n- cherry\n",
            "apple\n\nbanana\n\ncherry",
        ),
    ];

    #[test]
    fn nested_blocks_never_join_words() {
        let mut wrong = Vec::new();
        for (what, md, expected) in NESTED {
            let text = run(md);
            if text != *expected {
                wrong.push(format!("{what}: {md:?} gave {text:?}, expected {expected:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn code_blocks_keep_their_lines() {
        let md = "Intro\n\n```rust\nfn main() {\n    kettle();\n}\n```\nAfter\n";
        assert_eq!(run(md), "Intro\n\nfn main() {\n    kettle();\n}\n\nAfter");
    }

    #[test]
    fn tables_and_hard_breaks_are_separated() {
        let md = "| a | b |\n|---|---|\n| copper | kettle |\n\nline one  \nline two\n";
        assert_eq!(run(md), "a\tb\ncopper\tkettle\n\nline one\nline two");
    }

    #[test]
    fn raw_html_keeps_text_but_drops_tags_and_scripts() {
        let md = "before\n\n<div class=\"x\">\n<p>copper kettle</p>\n</div>\n\n\
                  <script>forbidden()</script>\n\nafter <b>inline</b>\n";
        let text = run(md);
        assert!(text.contains("copper kettle"), "{text:?}");
        assert!(text.contains("after inline"), "{text:?}");
        assert!(!text.contains('<') && !text.contains("forbidden"), "{text:?}");
    }

    #[test]
    fn segments_cut_only_between_top_level_blocks() {
        let doc = "# Title\n\npara one\n\n```\ncode\n\nstill code\n```\n\n> quote\n\n> more\n\n    indented\n\nlast\n";
        let pieces = segments(doc, 1);
        assert_eq!(pieces.concat(), doc);
        assert_eq!(
            pieces,
            [
                "# Title\n\n",
                "para one\n\n",
                "```\ncode\n\nstill code\n```\n\n> quote\n\n> more\n\n    indented\n\n",
                "last\n"
            ]
        );
        assert_eq!(segments(doc, SEGMENT_BYTES), [doc]);
    }

    #[test]
    fn segmented_text_equals_whole_text() {
        let block = "# The *copper* kettle\n\nSome **bold** text\nwrapped.\n\n- item\n- item two\n\n  continued\n\n\
                     ```\nfn main() {}\n\n```\n\n| a | b |\n|---|---|\n| c | d |\n\n<div>\n<p>html</p>\n</div>\n\n";
        let doc = block.repeat(50);
        let no_stop = AtomicBool::new(false);
        let mut whole = String::new();
        render(&doc, 0, &mut whole, &mut FirstHeading::new(0), &no_stop).unwrap();
        whole.truncate(whole.trim_end().len());
        let mut pieces = String::new();
        let mut title = FirstHeading::new(0);
        for segment in segments(&doc, 300) {
            render(segment, 0, &mut pieces, &mut title, &no_stop).unwrap();
            end_block(&mut pieces);
        }
        pieces.truncate(pieces.trim_end().len());
        assert!(segments(&doc, 300).len() > 20);
        assert_eq!(pieces, whole);
    }

    #[test]
    fn invalid_utf8_and_empty_input_are_fine() {
        let no_stop = AtomicBool::new(false);
        assert_eq!(extract(b"", &no_stop).unwrap().text, "");
        // Not UTF-8, so decoded as the likeliest legacy encoding (was U+FFFD before).
        let decoded = extract(b"# caf\xE9 cr\xE8me br\xFBl\xE9e", &no_stop).unwrap();
        assert_eq!(decoded.text, "caf\u{e9} cr\u{e8}me br\u{fb}l\u{e9}e");
        assert_eq!(decoded.encoding, Some("windows-1252"));
    }
}
