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

/// Walks the event stream keeping text and code, replacing block boundaries with line
/// breaks. Raw HTML blocks are collected and rendered by the HTML extractor so their text
/// is kept but their tags (and any script/style) are not.
fn to_text(source: &str, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut out = String::new();
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
                end_block(&mut out);
            }
            Event::End(tag) => end_tag(&mut out, tag),
            // Inline HTML is only tags; footnote markers and task boxes are decoration.
            _ => {}
        }
    }
    out.truncate(out.trim_end().len());
    Ok(out)
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
    fn invalid_utf8_and_empty_input_are_fine() {
        let no_stop = AtomicBool::new(false);
        assert_eq!(extract(b"", &no_stop).unwrap().text, "");
        // Not UTF-8, so decoded as the likeliest legacy encoding (was U+FFFD before).
        let decoded = extract(b"# caf\xE9 cr\xE8me br\xFBl\xE9e", &no_stop).unwrap();
        assert_eq!(decoded.text, "caf\u{e9} cr\u{e8}me br\u{fb}l\u{e9}e");
        assert_eq!(decoded.encoding, Some("windows-1252"));
    }
}
