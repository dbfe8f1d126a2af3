//! HTML: rendered to plain text by html2text, which parses with html5ever (a browser-grade
//! parser that tolerates any tag soup). html2text skips `<head>` and HTML `<script>` and
//! `<style>`, but not the SVG/MathML `<style>` and `<script>` elements nor `<noscript>`, so
//! those are pruned from the parsed DOM before rendering.

use html2text::render::TrivialDecorator;
use html2text::RcDom;

use super::{text, ExtractError, Format};

/// Line width handed to html2text. Wrapping would split phrases across lines and break
/// search, so it is wide enough that ordinary paragraphs never wrap.
const WRAP_WIDTH: usize = 10_000;

pub(super) fn extract(bytes: &[u8]) -> Result<String, ExtractError> {
    to_text(&text::decode(bytes))
}

/// Elements whose content is never visible text. `noscript` is included because with
/// scripting on (html5ever's default) its content is unparsed markup, not text.
const HIDDEN_ELEMENTS: [&str; 3] = ["script", "style", "noscript"];

/// Renders HTML with the trivial decorator, which emits the text only: no `*emphasis*`
/// markers, link footnotes or table borders that would pollute the extracted text.
pub(super) fn to_text(html: &str) -> Result<String, ExtractError> {
    let config = html2text::config::with_decorator(TrivialDecorator::new())
        .allow_width_overflow()
        .no_table_borders()
        .no_link_wrapping();
    let dom = config.parse_html(html.as_bytes()).map_err(malformed)?;
    prune_hidden(&dom);
    let tree = config.dom_to_render_tree(&dom).map_err(malformed)?;
    config.render_to_string(tree, WRAP_WIDTH).map_err(malformed)
}

fn malformed(e: html2text::Error) -> ExtractError {
    ExtractError::malformed(Format::Html, e)
}

/// Removes hidden elements from the whole DOM, in any namespace. Iterative, because hostile
/// pages nest elements deeply enough to overflow a recursive walk.
fn prune_hidden(dom: &RcDom) {
    let mut pending = vec![dom.document.clone()];
    while let Some(node) = pending.pop() {
        let mut children = node.children.borrow_mut();
        children.retain(|child| {
            child
                .element_name()
                .is_none_or(|name| !HIDDEN_ELEMENTS.contains(&name.as_str()))
        });
        pending.extend(children.iter().cloned());
    }
}

/// Content sniffing for unnamed input: true if the text opens with a doctype or `<html>`.
pub(super) fn looks_like_html(text: &str) -> bool {
    let head: String = text.trim_start().chars().take(14).collect();
    let head = head.to_ascii_lowercase();
    head.starts_with("<!doctype html") || head.starts_with("<html")
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
<p>First <b>bold</b> paragraph with a <a href="https://example.invalid/x">link</a>.</p>
<script type="module">import "forbidden-module";</script>
<style>p::after { content: "forbidden-inline-style" }</style>
<svg><style>circle { fill: forbidden-svg }</style><text>drawn</text></svg>
<math><mtext>formula</mtext><script>forbidden-math</script></math>
<noscript><p>forbidden noscript</p></noscript>
<ul><li>one &amp; two</li></ul>
</body></html>"#;

    #[test]
    fn text_survives_without_markup() {
        let text = to_text(PAGE).unwrap();
        for wanted in [
            "Velvet harbor notes",
            "First bold paragraph",
            "link",
            "drawn",
            "formula",
            "one & two",
        ] {
            assert!(text.contains(wanted), "{wanted:?} missing from {text:?}");
        }
        for markup in ["<", "*", "https://", "&amp;"] {
            assert!(!text.contains(markup), "{markup:?} leaked into {text:?}");
        }
    }

    #[test]
    fn script_and_style_contents_are_dropped() {
        let text = to_text(PAGE).unwrap();
        for hidden in ["forbidden", "color", "console", "display"] {
            assert!(!text.contains(hidden), "{hidden:?} leaked into {text:?}");
        }
    }

    #[test]
    fn deeply_nested_markup_does_not_overflow_the_stack() {
        let depth = 3_000;
        let html = format!("{}velvet harbor{}", "<div>".repeat(depth), "</div>".repeat(depth));
        let text = std::thread::spawn(move || to_text(&html))
            .join()
            .expect("no stack overflow or panic")
            .unwrap();
        assert!(text.contains("velvet harbor"));
    }

    #[test]
    fn long_paragraphs_are_not_wrapped_mid_phrase() {
        let filler = "word ".repeat(500);
        let text = to_text(&format!("<p>{filler} velvet harbor {filler}</p>")).unwrap();
        assert!(text.contains("velvet harbor"));
    }

    #[test]
    fn tag_soup_and_invalid_utf8_are_tolerated() {
        let text = extract(b"<p>unclosed <b>velvet <i>harbor\xFF</p></div></table>").unwrap();
        assert!(text.contains("velvet harbor\u{FFFD}"), "{text:?}");
    }

    #[test]
    fn sniffing_needs_a_doctype_or_html_tag() {
        assert!(looks_like_html("\n  <!doctype HTML>"));
        assert!(looks_like_html("<html lang=en>"));
        assert!(!looks_like_html("<p>fragment</p>"));
        assert!(!looks_like_html("about <html> tags"));
        assert!(!looks_like_html("<ht"));
    }
}
