//! OpenDocument (ODT, ODS, ODP): all three keep their text in `content.xml` as `<text:p>`
//! and `<text:h>` paragraphs, in the body of a text document, in spreadsheet cells or in
//! presentation frames, so one streaming pass serves them all.

use std::sync::atomic::AtomicBool;

use quick_xml::events::{BytesStart, Event};

use super::zipped::{check_output, event_text, Container};
use super::{ExtractError, Format};

const CONTENT_XML: &str = "content.xml";

/// One `<text:s/>` may stand for many spaces; more than this is layout, not text, and
/// clamping keeps a hostile count from turning a few bytes into gigabytes.
const MAX_SPACES: usize = 64;

/// Extracts the text of any ODF document; `format` only names it in errors.
pub(super) fn extract(bytes: &[u8], format: Format, max_inflated: u64, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut container = Container::open(bytes, format, max_inflated)?;
    let mut body = Body::default();
    container.each_xml_event(CONTENT_XML, stop, |event| {
        body.event(event, format)?;
        check_output(&body.out, max_inflated, format)
    })?;
    body.out.truncate(body.out.trim_end().len());
    Ok(body.out)
}

/// Where we are in the content. Elements are matched by local name, so any prefix works.
#[derive(Default)]
struct Body {
    out: String,
    /// Inside a paragraph or heading: only there is character data document text.
    para_depth: usize,
    /// Inside a table cell: paragraphs end the cell's line only at the end of the row.
    cell_depth: usize,
    /// Inside `<text:tracked-changes>`: deleted text kept for change tracking, not shown.
    changes_depth: usize,
}

impl Body {
    fn event(&mut self, event: Event<'_>, format: Format) -> Result<(), ExtractError> {
        match &event {
            Event::Start(e) => self.start(e.local_name().as_ref()),
            Event::End(e) => self.end(e.local_name().as_ref()),
            Event::Empty(e) => self.empty(e),
            _ if self.para_depth > 0 && self.changes_depth == 0 => {
                if let Some(text) = event_text(&event, format)? {
                    self.out.push_str(&text);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn start(&mut self, name: &[u8]) {
        match name {
            b"p" | b"h" => self.para_depth += 1,
            b"table-cell" => self.cell_depth += 1,
            b"tracked-changes" => self.changes_depth += 1,
            _ => {}
        }
    }

    fn end(&mut self, name: &[u8]) {
        match name {
            b"p" | b"h" => {
                self.para_depth = self.para_depth.saturating_sub(1);
                self.push(if self.cell_depth > 0 { ' ' } else { '\n' });
            }
            b"table-cell" => {
                self.cell_depth = self.cell_depth.saturating_sub(1);
                self.trim_spaces();
                self.push('\t');
            }
            b"table-row" => {
                self.out.truncate(self.out.trim_end_matches(['\t', ' ']).len());
                self.push('\n');
            }
            b"tracked-changes" => self.changes_depth = self.changes_depth.saturating_sub(1),
            _ => {}
        }
    }

    fn empty(&mut self, e: &BytesStart<'_>) {
        match e.local_name().as_ref() {
            b"s" => {
                let count = attr(e, b"c").and_then(|c| c.parse().ok()).unwrap_or(1);
                self.out.extend(std::iter::repeat_n(' ', usize::min(count, MAX_SPACES)));
            }
            b"tab" => self.push('\t'),
            b"line-break" => self.push('\n'),
            b"p" | b"h" if self.cell_depth == 0 => self.push('\n'),
            b"table-cell" => self.push('\t'),
            _ => {}
        }
    }

    fn trim_spaces(&mut self) {
        self.out.truncate(self.out.trim_end_matches(' ').len());
    }

    fn push(&mut self, c: char) {
        if self.changes_depth == 0 {
            self.out.push(c);
        }
    }
}

/// The value of the attribute with this local name, whatever its prefix.
pub(super) fn attr(e: &BytesStart<'_>, local: &[u8]) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == local)
        .and_then(|a| a.unescape_value().ok().map(|v| v.into_owned()))
}
