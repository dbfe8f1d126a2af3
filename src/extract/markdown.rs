//! Markdown: parsed by pulldown-cmark (CommonMark plus the common GitHub extensions) and
//! flattened to the text a reader would see, so markup never reaches the search index.

use pulldown_cmark::{Event, Options, Parser, TagEnd};

use super::{html, text, ExtractError};

pub(super) fn extract(bytes: &[u8]) -> Result<String, ExtractError> {
    to_text(&text::decode(bytes))
}

/// Walks the event stream keeping text and code, replacing block boundaries with line
/// breaks. Raw HTML blocks are collected and rendered by the HTML extractor so their text
/// is kept but their tags (and any script/style) are not.
fn to_text(source: &str) -> Result<String, ExtractError> {
    let mut out = String::new();
    let mut html_block = String::new();
    for event in Parser::new_ext(source, options()) {
        match event {
            Event::Text(t) | Event::Code(t) | Event::InlineMath(t) | Event::DisplayMath(t) => {
                out.push_str(&t)
            }
            Event::Html(raw) => html_block.push_str(&raw),
            Event::SoftBreak => out.push(' '),
            Event::HardBreak | Event::Rule => out.push('\n'),
            Event::End(TagEnd::HtmlBlock) => {
                out.push_str(html::to_text(&html_block)?.trim_end());
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

    #[test]
    fn blocks_become_lines_without_markup() {
        let md = "# The *copper* kettle\n\nSome **bold** and `code` text\nwrapped.\n\n\
                  - item [one](https://example.invalid)\n- item two\n\n> quoted\n";
        assert_eq!(
            to_text(md).unwrap(),
            "The copper kettle\n\nSome bold and code text wrapped.\n\n\
             item one\nitem two\n\nquoted"
        );
    }

    #[test]
    fn code_blocks_keep_their_lines() {
        let md = "Intro\n\n```rust\nfn main() {\n    kettle();\n}\n```\nAfter\n";
        assert_eq!(
            to_text(md).unwrap(),
            "Intro\n\nfn main() {\n    kettle();\n}\n\nAfter"
        );
    }

    #[test]
    fn tables_and_hard_breaks_are_separated() {
        let md = "| a | b |\n|---|---|\n| copper | kettle |\n\nline one  \nline two\n";
        assert_eq!(to_text(md).unwrap(), "a\tb\ncopper\tkettle\n\nline one\nline two");
    }

    #[test]
    fn raw_html_keeps_text_but_drops_tags_and_scripts() {
        let md = "before\n\n<div class=\"x\">\n<p>copper kettle</p>\n</div>\n\n\
                  <script>forbidden()</script>\n\nafter <b>inline</b>\n";
        let text = to_text(md).unwrap();
        assert!(text.contains("copper kettle"), "{text:?}");
        assert!(text.contains("after inline"), "{text:?}");
        assert!(!text.contains('<') && !text.contains("forbidden"), "{text:?}");
    }

    #[test]
    fn invalid_utf8_and_empty_input_are_fine() {
        assert_eq!(extract(b"").unwrap(), "");
        assert_eq!(extract(b"# caf\xE9").unwrap(), "caf\u{FFFD}");
    }
}
