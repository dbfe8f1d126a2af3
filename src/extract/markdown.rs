//! Markdown: parsed by pulldown-cmark (CommonMark plus the common GitHub extensions) and
//! flattened to the text a reader would see, so markup never reaches the search index.

use std::sync::atomic::AtomicBool;

use pulldown_cmark::{Event, Options, Parser, TagEnd};

use super::{check_stop, html, text, Decoded, ExtractError};

/// Events between two polls of the stop flag: cheap enough to poll often, rare enough to
/// cost nothing next to the parsing.
const STOP_POLL_EVENTS: usize = 1024;

pub(super) fn extract(bytes: &[u8], stop: &AtomicBool) -> Result<Decoded, ExtractError> {
    let decoded = text::decode(bytes);
    Ok(Decoded {
        text: to_text(&decoded.text, stop)?,
        encoding: decoded.encoding,
    })
}

/// Markdown is parsed in segments of about this many bytes. pulldown-cmark finds every
/// block of its input before it yields the first event, which cannot be interrupted: on a
/// 60 MB document that first pass took 3.3 s (release build). Segments bound that to a few
/// milliseconds between polls of the stop flag.
const SEGMENT_BYTES: usize = 256 * 1024;

/// Walks the event stream keeping text and code, replacing block boundaries with line
/// breaks. Raw HTML blocks are collected and rendered by the HTML extractor so their text
/// is kept but their tags (and any script/style) are not.
fn to_text(source: &str, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut out = String::new();
    for segment in segments(source, SEGMENT_BYTES) {
        check_stop(stop)?;
        render(segment, &mut out, stop)?;
        end_block(&mut out);
    }
    out.truncate(out.trim_end().len());
    Ok(out)
}

fn render(source: &str, out: &mut String, stop: &AtomicBool) -> Result<(), ExtractError> {
    let mut html_block = String::new();
    for (i, event) in Parser::new_ext(source, options()).enumerate() {
        if i % STOP_POLL_EVENTS == 0 {
            check_stop(stop)?;
        }
        match event {
            Event::Text(t) | Event::Code(t) | Event::InlineMath(t) | Event::DisplayMath(t) => {
                out.push_str(&t)
            }
            Event::Html(raw) => html_block.push_str(&raw),
            Event::SoftBreak => out.push(' '),
            Event::HardBreak | Event::Rule => out.push('\n'),
            Event::End(TagEnd::HtmlBlock) => {
                out.push_str(html::to_text(&html_block, stop)?.trim_end());
                html_block.clear();
                end_block(out);
            }
            Event::End(tag) => end_tag(out, tag),
            // Inline HTML is only tags; footnote markers and task boxes are decoration.
            _ => {}
        }
    }
    Ok(())
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

fn end_tag(out: &mut String, tag: TagEnd) {
    match tag {
        TagEnd::Paragraph
        | TagEnd::Heading(_)
        | TagEnd::CodeBlock
        | TagEnd::BlockQuote(_)
        | TagEnd::List(_)
        | TagEnd::Table
        | TagEnd::FootnoteDefinition
        | TagEnd::DefinitionList => end_block(out),
        TagEnd::Item
        | TagEnd::TableHead
        | TagEnd::TableRow
        | TagEnd::DefinitionListTitle
        | TagEnd::DefinitionListDefinition => end_line(out),
        TagEnd::TableCell => out.push('\t'),
        _ => {}
    }
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
        to_text(md, &AtomicBool::new(false)).unwrap()
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
        let mut whole = String::new();
        render(&doc, &mut whole, &AtomicBool::new(false)).unwrap();
        whole.truncate(whole.trim_end().len());
        let mut pieces = String::new();
        for segment in segments(&doc, 300) {
            render(segment, &mut pieces, &AtomicBool::new(false)).unwrap();
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
