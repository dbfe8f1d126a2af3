//! OpenDocument (ODT, ODS, ODP): all three keep their text in `content.xml` as `<text:p>`
//! and `<text:h>` paragraphs, in the body of a text document, in spreadsheet cells or in
//! presentation frames, so one streaming pass serves them all. The title is `meta.xml`'s
//! `<dc:title>` (inside `<office:meta>`), the author its `<meta:initial-creator>` else its
//! `<dc:creator>`, the date its `<dc:date>` (the last save) else `<meta:creation-date>`,
//! all read in one pass after the text under what is left of the same inflate budget; a
//! package without them, or with a broken `meta.xml`, has none.

use std::sync::atomic::AtomicBool;

use quick_xml::events::{BytesStart, Event};

use super::text::Decoded;
use super::zipped::{attr, check_output, event_text, Container};
use leasehold::extract::{ExtractError, Format};

const CONTENT_XML: &str = "content.xml";

/// The part that holds the document's metadata: title, author, dates.
const META_XML: &str = "meta.xml";

/// One `<text:s/>` may stand for many spaces; more than this is layout, not text, and
/// clamping keeps a hostile count from turning a few bytes into gigabytes.
const MAX_SPACES: usize = 64;

/// Extracts the text of any ODF document; `format` only names it in errors.
pub(super) fn extract(
    bytes: &[u8],
    format: Format,
    max_inflated: u64,
    stop: &AtomicBool,
) -> Result<Decoded, ExtractError> {
    let mut container = Container::open(bytes, format, max_inflated)?;
    let mut body = Body::default();
    container.each_xml_event(CONTENT_XML, stop, |event| {
        body.event(event, format)?;
        check_output(&body.out, max_inflated, format)
    })?;
    body.out.truncate(body.out.trim_end().len());
    // A metadata part that cannot be read is no title, author or date: `metadata` says so.
    let meta = container.metadata(META_XML, stop)?;
    Ok(Decoded::described(body.out, meta))
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
                if let Some(text) = event_text(&event, CONTENT_XML, format)? {
                    self.out.push_str(&text);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn start(&mut self, name: &str) {
        match name {
            "p" | "h" => self.para_depth += 1,
            "table-cell" => self.cell_depth += 1,
            "tracked-changes" => self.changes_depth += 1,
            _ => {}
        }
    }

    fn end(&mut self, name: &str) {
        match name {
            "p" | "h" => {
                self.para_depth = self.para_depth.saturating_sub(1);
                self.push(if self.cell_depth > 0 { ' ' } else { '\n' });
            }
            "table-cell" => {
                self.cell_depth = self.cell_depth.saturating_sub(1);
                self.trim_spaces();
                self.push('\t');
            }
            "table-row" => {
                self.out.truncate(self.out.trim_end_matches(['\t', ' ']).len());
                self.push('\n');
            }
            "tracked-changes" => self.changes_depth = self.changes_depth.saturating_sub(1),
            _ => {}
        }
    }

    fn empty(&mut self, e: &BytesStart<'_>) {
        match e.local_name().as_ref() {
            "s" => {
                let count = attr(e, "c").and_then(|c| c.parse().ok()).unwrap_or(1);
                self.out
                    .extend(std::iter::repeat_n(' ', usize::min(count, MAX_SPACES)));
            }
            "tab" => self.push('\t'),
            "line-break" => self.push('\n'),
            "p" | "h" if self.cell_depth == 0 => self.push('\n'),
            "table-cell" => self.push('\t'),
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

#[cfg(test)]
mod tests {
    use super::super::zipped::tests::zip_with;
    use super::*;

    fn odt(body: &str) -> Vec<u8> {
        let xml = format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"><office:body><office:text>{body}</office:text></office:body></office:document-content>"#
        );
        zip_with(&[
            ("mimetype", b"application/vnd.oasis.opendocument.text".as_slice()),
            (CONTENT_XML, xml.as_bytes()),
        ])
    }

    fn run(bytes: &[u8]) -> Result<String, ExtractError> {
        extract(bytes, Format::Odt, u64::MAX, &AtomicBool::new(false)).map(|done| done.text)
    }

    /// An ODT with one paragraph and `meta` as its `meta.xml`.
    fn odt_with_meta(meta: &[u8]) -> Vec<u8> {
        let content = br#"<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text><text:p>cobalt heron</text:p></office:text></office:body></office:document-content>"#;
        zip_with(&[
            ("mimetype", b"application/vnd.oasis.opendocument.text".as_slice()),
            (CONTENT_XML, content.as_slice()),
            (META_XML, meta),
        ])
    }

    fn titled(bytes: &[u8]) -> Decoded {
        extract(bytes, Format::Odt, u64::MAX, &AtomicBool::new(false)).unwrap()
    }

    #[test]
    fn the_title_is_meta_xmls_dc_title() {
        let meta = br#"<?xml version="1.0"?><office:document-meta xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0"><office:meta><meta:generator>x</meta:generator><dc:title>Field
            notes &amp; sketches</dc:title><dc:title>second</dc:title></office:meta></office:document-meta>"#;
        let done = titled(&odt_with_meta(meta));
        assert_eq!(done.title.as_deref(), Some("Field notes & sketches"));
        assert_eq!(done.text, "cobalt heron");
    }

    /// A `meta.xml` whose `<office:meta>` holds `fields`.
    fn meta_with(fields: &str) -> Vec<u8> {
        format!(r#"<?xml version="1.0"?><office:document-meta xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0"><office:meta>{fields}</office:meta></office:document-meta>"#).into_bytes()
    }

    #[test]
    fn the_author_is_the_initial_creator_else_the_creator() {
        let author = |fields: &str| titled(&odt_with_meta(&meta_with(fields))).author;
        let both = "<dc:creator>Last Saver</dc:creator><meta:initial-creator>Ana Ruiz</meta:initial-creator>";
        assert_eq!(author(both).as_deref(), Some("Ana Ruiz"));
        assert_eq!(
            author("<dc:creator>Last Saver</dc:creator>").as_deref(),
            Some("Last Saver")
        );
        assert_eq!(author("<meta:generator>odfpy</meta:generator>"), None);
    }

    #[test]
    fn page_count_and_language_are_the_statistics_and_dc_language() {
        let meta = meta_with(
            r#"<dc:language>de-DE</dc:language><meta:document-statistic meta:table-count="0" meta:page-count="12" meta:word-count="3012"/>"#,
        );
        let done = titled(&odt_with_meta(&meta));
        assert_eq!((done.pages, done.language.as_deref()), (Some(12), Some("de-DE")));
        let odd =
            meta_with(r#"<dc:language>x-none</dc:language><meta:document-statistic meta:page-count="0"/>"#);
        let done = titled(&odt_with_meta(&odd));
        assert_eq!((done.pages, done.language), (None, None));
    }

    #[test]
    fn the_date_is_dc_date_else_the_creation_date() {
        let date = |fields: &str| titled(&odt_with_meta(&meta_with(fields))).date;
        let both = "<meta:creation-date>2024-03-01T08:00:00</meta:creation-date><dc:date>2026-01-15T09:30:00.123</dc:date>";
        assert_eq!(date(both).as_deref(), Some("2026-01-15"));
        let created = "<meta:creation-date>2024-03-01T08:00:00</meta:creation-date>";
        assert_eq!(date(created).as_deref(), Some("2024-03-01"));
        assert_eq!(date("<dc:date>15/01/2026</dc:date>"), None, "not ISO 8601");
    }

    #[test]
    fn a_missing_or_broken_meta_xml_is_no_title_but_the_text_stays() {
        let broken: [&[u8]; 4] = [
            b"<office:meta><dc:title>unclosed</office:meta",
            b"<office:meta><dc:title>bad &nosuch; entity</dc:title></office:meta>",
            b"<office:meta><dc:title/></office:meta>",
            b"not xml at all \xFF\xFE",
        ];
        for meta in broken {
            let done = titled(&odt_with_meta(meta));
            assert_eq!(
                (done.title, done.text.as_str()),
                (None, "cobalt heron"),
                "{meta:?}"
            );
        }
        assert_eq!(titled(&odt("<text:p>x</text:p>")).title, None, "no meta.xml");
    }

    #[test]
    fn samples_have_their_phrases() {
        for (file, format, phrase) in [
            ("notes.odt", Format::Odt, "cobalt heron"),
            ("inventory.ods", Format::Ods, "juniper anvil\t3"),
            ("slides.odp", Format::Odp, "marble falcon"),
        ] {
            let bytes = std::fs::read(format!(
                "{}/../../samples/formats/{file}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap();
            let text = extract(&bytes, format, u64::MAX, &AtomicBool::new(false))
                .unwrap()
                .text;
            assert!(text.contains(phrase), "{file}: {text:?}");
        }
    }

    #[test]
    fn spaces_tabs_breaks_and_tables() {
        let body = r#"<text:h>Title</text:h><text:p>cobalt<text:s/>heron<text:s text:c="3"/>x<text:tab/>y<text:line-break/>z &amp; w</text:p>
            <table:table><table:table-row><table:table-cell><text:p>a</text:p><text:p>b</text:p></table:table-cell><table:table-cell/><table:table-cell><text:p>c</text:p></table:table-cell></table:table-row></table:table>"#;
        assert_eq!(
            run(&odt(body)).unwrap(),
            "Title\ncobalt heron   x\ty\nz & w\na b\t\tc"
        );
    }

    #[test]
    fn deleted_text_in_tracked_changes_is_skipped() {
        let body = r#"<text:tracked-changes><text:changed-region><text:deletion><text:p>removed words</text:p></text:deletion></text:changed-region></text:tracked-changes><text:p>kept</text:p>"#;
        assert_eq!(run(&odt(body)).unwrap(), "kept");
    }

    #[test]
    fn a_huge_space_count_is_clamped() {
        let text = run(&odt(r#"<text:p>a<text:s text:c="4000000000"/>b</text:p>"#)).unwrap();
        assert_eq!(text.len(), 2 + MAX_SPACES);
    }

    #[test]
    fn missing_content_or_bad_xml_is_malformed() {
        let no_content = zip_with(&[("mimetype", b"application/vnd.oasis.opendocument.text".as_slice())]);
        let bad = zip_with(&[(CONTENT_XML, b"<text:p>a</text:h>".as_slice())]);
        for (bytes, reason) in [(no_content, "content.xml"), (bad, "invalid XML")] {
            match run(&bytes) {
                Err(ExtractError::Malformed {
                    format: Format::Odt,
                    reason: r,
                }) => assert!(r.contains(reason), "{r}"),
                other => panic!("expected Malformed odt, got {other:?}"),
            }
        }
    }

    #[test]
    fn zip_bomb_and_stop_flag() {
        let padding = " ".repeat(1 << 20);
        let bomb = odt(&padding);
        assert!(bomb.len() < 8192);
        let err = extract(&bomb, Format::Odt, 64 * 1024, &AtomicBool::new(false)).unwrap_err();
        assert!(err.to_string().contains("limit"), "{err}");
        let err = extract(
            &odt("<text:p>x</text:p>"),
            Format::Odt,
            u64::MAX,
            &AtomicBool::new(true),
        )
        .unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err:?}");
    }
}
