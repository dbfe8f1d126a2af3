//! DOCX: a zip (read by the zip crate) whose `word/document.xml` holds the body text in
//! `<w:t>` runs, streamed through quick-xml; then the headers, footers, footnotes and
//! endnotes, which live in parts of their own and are searched for as much as the body
//! (Recoll reads them too). Streaming plus one cap on the inflated bytes of all parts
//! together means a zip bomb costs at most the cap in CPU and nothing like it in memory.

use std::sync::atomic::AtomicBool;

use quick_xml::events::Event;

use super::zipped::{event_text, Container};
use super::{ExtractError, Format};

/// The main document part (also how `zipped::detect` knows a DOCX).
const DOCUMENT_XML: &str = "word/document.xml";

/// Extracts the body text, then the text of the side parts ([`side_parts`]), each after a
/// line break; reads at most `max_xml_bytes` of inflated XML in all.
pub(super) fn extract(bytes: &[u8], max_xml_bytes: u64, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut container = Container::open(bytes, Format::Docx, max_xml_bytes)?;
    let mut out = read_part(&mut container, DOCUMENT_XML, stop)?;
    for name in side_parts(&container.names()) {
        let text = read_part(&mut container, &name, stop)?;
        if text.trim().is_empty() {
            continue;
        }
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&text);
    }
    Ok(out)
}

/// The parts besides the body that hold text a reader sees: headers and footers (in name
/// order), then footnotes and endnotes.
fn side_parts(names: &[String]) -> Vec<String> {
    let numbered = |kind: &str| {
        let mut parts: Vec<String> = names
            .iter()
            .filter(|n| {
                n.strip_prefix("word/")
                    .and_then(|n| n.strip_prefix(kind))
                    .and_then(|n| n.strip_suffix(".xml"))
                    .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
            })
            .cloned()
            .collect();
        parts.sort();
        parts
    };
    let mut parts = numbered("header");
    parts.extend(numbered("footer"));
    for notes in ["word/footnotes.xml", "word/endnotes.xml"] {
        if names.iter().any(|n| n == notes) {
            parts.push(notes.to_owned());
        }
    }
    parts
}

/// The text of one part, streamed like every container's XML (stop polling, the shared
/// inflate budget, entity declarations refused).
fn read_part(container: &mut Container<'_>, name: &str, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut body = Body::default();
    container.each_xml_event(name, stop, |event| body.event(&event, name))?;
    Ok(body.out)
}

/// Tracks where we are in WordprocessingML. Elements are matched by local name so any
/// namespace prefix works (and math `m:t` text is kept too).
#[derive(Default)]
struct Body {
    out: String,
    /// Inside a `<w:t>`: only its character data is document text.
    text_depth: usize,
    /// Inside a `<w:r>` run: `<w:tab/>` also appears in paragraph tab-stop definitions,
    /// where it is not text, so tabs and breaks count only inside runs.
    run_depth: usize,
    /// Inside `<mc:Fallback>`: Word repeats text boxes there for old readers; skipping it
    /// avoids extracting that text twice.
    fallback_depth: usize,
}

impl Body {
    fn event(&mut self, event: &Event<'_>, part: &str) -> Result<(), ExtractError> {
        match event {
            Event::Start(e) => self.start(e.local_name().as_ref()),
            Event::Empty(e) => self.empty(e.local_name().as_ref()),
            Event::End(e) => self.end(e.local_name().as_ref()),
            Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) if self.in_text() => {
                if let Some(text) = event_text(event, part, Format::Docx)? {
                    self.out.push_str(&text);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn in_text(&self) -> bool {
        self.text_depth > 0 && self.fallback_depth == 0
    }

    fn start(&mut self, name: &str) {
        match name {
            "t" => self.text_depth += 1,
            "r" => self.run_depth += 1,
            "Fallback" => self.fallback_depth += 1,
            _ => {}
        }
    }

    fn end(&mut self, name: &str) {
        match name {
            "t" => self.text_depth = self.text_depth.saturating_sub(1),
            "r" => self.run_depth = self.run_depth.saturating_sub(1),
            "Fallback" => self.fallback_depth = self.fallback_depth.saturating_sub(1),
            "p" => self.push('\n'),
            _ => {}
        }
    }

    fn empty(&mut self, name: &str) {
        match name {
            "p" => self.push('\n'),
            "tab" if self.run_depth > 0 => self.push('\t'),
            "br" | "cr" if self.run_depth > 0 => self.push('\n'),
            _ => {}
        }
    }

    fn push(&mut self, c: char) {
        if self.fallback_depth == 0 {
            self.out.push(c);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::io::{Cursor, Write};

    use zip::write::SimpleFileOptions;
    use zip::{CompressionMethod, ZipWriter};

    use super::super::{Extractor, ExtractorRegistry};
    use super::*;

    const LETTER: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/letter.docx"));
    const NO_LIMIT: u64 = u64::MAX;

    /// Builds a deflated zip in memory; shared with the registry tests.
    pub(in super::super) fn zip_with(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
        let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
        for (name, data) in files {
            zip.start_file(*name, options).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    fn docx_with_body(body: &str) -> Vec<u8> {
        let xml = format!(
            r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"><w:body>{body}</w:body></w:document>"#
        );
        zip_with(&[(DOCUMENT_XML, xml.as_bytes())])
    }

    fn run(bytes: &[u8]) -> Result<String, ExtractError> {
        extract(bytes, NO_LIMIT, &AtomicBool::new(false))
    }

    fn assert_malformed(result: Result<String, ExtractError>, reason_part: &str) {
        match result {
            Err(ExtractError::Malformed {
                format: Format::Docx,
                reason,
            }) => {
                assert!(reason.contains(reason_part), "{reason}")
            }
            other => panic!("expected Malformed docx, got {other:?}"),
        }
    }

    #[test]
    fn sample_text_is_extracted() {
        let text = run(LETTER).unwrap();
        assert!(text.contains("silver meadow"), "{text:?}");
        assert_eq!(super::super::zipped::detect(LETTER), Some(Format::Docx));
    }

    #[test]
    fn paragraphs_tabs_and_breaks_are_kept_but_tab_stops_are_not() {
        let body = r#"<w:p><w:pPr><w:tabs><w:tab w:val="left" w:pos="720"/></w:tabs></w:pPr>
            <w:r><w:t xml:space="preserve">silver </w:t></w:r><w:r><w:t>meadow</w:t><w:tab/><w:t>A &amp; B</w:t></w:r></w:p>
            <w:p/><w:p><w:r><w:t>line</w:t><w:br/><w:t>two</w:t></w:r><w:r><w:instrText>PAGE</w:instrText></w:r></w:p>"#;
        assert_eq!(
            run(&docx_with_body(body)).unwrap(),
            "silver meadow\tA & B\n\nline\ntwo\n"
        );
    }

    #[test]
    fn character_references_and_predefined_entities_are_text_and_other_entities_are_malformed() {
        let body = "<w:p><w:r><w:t>&#65;&#x42;&lt;&gt;&quot;&apos;&#x1F600;</w:t></w:r></w:p>";
        assert_eq!(run(&docx_with_body(body)).unwrap(), "AB<>\"'\u{1F600}\n");
        let undeclared = "<w:p><w:r><w:t>a &nbsp; b</w:t></w:r></w:p>";
        assert_malformed(run(&docx_with_body(undeclared)), "nbsp");
    }

    #[test]
    fn fallback_copies_of_text_boxes_are_skipped() {
        let body = r#"<w:p><w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:t>boxed</w:t></mc:Choice>
            <mc:Fallback><w:p><w:r><w:t>boxed</w:t></w:r></w:p></mc:Fallback></mc:AlternateContent></w:r></w:p>"#;
        assert_eq!(run(&docx_with_body(body)).unwrap(), "boxed\n");
    }

    #[test]
    fn random_bytes_after_zip_header_are_malformed() {
        let mut bytes = b"PK\x03\x04".to_vec();
        bytes.extend((0u32..2000).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        assert_eq!(super::super::zipped::detect(&bytes), None);
        let result = ExtractorRegistry::default().extract("x.docx", &bytes, &AtomicBool::new(false));
        assert_malformed(result, "zip");
    }

    #[test]
    fn truncated_docx_is_malformed() {
        assert_malformed(run(&LETTER[..LETTER.len() / 2]), "zip");
    }

    #[test]
    fn zip_without_document_xml_is_malformed() {
        let bytes = zip_with(&[("word/styles.xml", b"<w:styles/>".as_slice())]);
        assert_malformed(run(&bytes), DOCUMENT_XML);
    }

    #[test]
    fn broken_xml_is_malformed() {
        let bytes = zip_with(&[(DOCUMENT_XML, b"<w:p><w:t>a</w:x></w:p>".as_slice())]);
        assert_malformed(run(&bytes), "invalid XML");
    }

    fn part(root: &str, inner: &str) -> Vec<u8> {
        format!(
            r#"<w:{root} xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">{inner}</w:{root}>"#
        )
        .into_bytes()
    }

    /// Headers, footers and notes are read after the body, in that order; parts
    /// with no text (a separator footnote) add nothing.
    #[test]
    fn headers_footers_and_notes_follow_the_body() {
        let body = part(
            "document",
            "<w:body><w:p><w:r><w:t>body words</w:t></w:r></w:p></w:body>",
        );
        let header = part("hdr", "<w:p><w:r><w:t>ACME GROUP</w:t></w:r></w:p>");
        let footer = part("ftr", "<w:p><w:r><w:t>page footer</w:t></w:r></w:p>");
        let notes = part(
            "footnotes",
            r#"<w:footnote w:type="separator"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>
               <w:footnote w:id="1"><w:p><w:r><w:t>a footnote</w:t></w:r></w:p></w:footnote>"#,
        );
        let bytes = zip_with(&[
            ("word/footnotes.xml", notes.as_slice()),
            ("word/footer1.xml", footer.as_slice()),
            (DOCUMENT_XML, body.as_slice()),
            ("word/header1.xml", header.as_slice()),
            ("word/headerstyle.xml", header.as_slice()),
        ]);
        assert_eq!(
            run(&bytes).unwrap(),
            "body words\nACME GROUP\npage footer\n\na footnote\n"
        );
    }

    #[test]
    fn a_broken_or_inflating_header_fails_like_the_body() {
        let body = part(
            "document",
            "<w:body><w:p><w:r><w:t>body</w:t></w:r></w:p></w:body>",
        );
        let broken = zip_with(&[
            (DOCUMENT_XML, body.as_slice()),
            ("word/header2.xml", b"<w:hdr><w:t>a</w:x></w:hdr>".as_slice()),
        ]);
        assert_malformed(run(&broken), "invalid XML in word/header2.xml");
        // The body and the header share one inflate budget.
        let huge = vec![b' '; 1 << 20];
        let bomb = zip_with(&[
            (DOCUMENT_XML, body.as_slice()),
            ("word/header1.xml", huge.as_slice()),
        ]);
        assert_malformed(
            extract(&bomb, 64 * 1024, &AtomicBool::new(false)),
            "word/header1.xml inflates past the limit",
        );
    }

    #[test]
    fn zip_bomb_is_cut_off_at_the_inflate_limit() {
        let huge = vec![b' '; 1 << 20];
        let bytes = zip_with(&[(DOCUMENT_XML, huge.as_slice())]);
        assert!(bytes.len() < 4096, "deflate should squeeze the padding");
        assert_malformed(extract(&bytes, 64 * 1024, &AtomicBool::new(false)), "limit");
        // The registry derives the cap from its input limit.
        let registry = ExtractorRegistry::new(4096);
        let result = registry.extract("bomb.docx", &bytes, &AtomicBool::new(false));
        assert_malformed(result, "limit");
        assert!(
            run(&bytes).is_ok(),
            "under a big enough cap it is just whitespace"
        );
    }

    #[test]
    fn raised_stop_flag_interrupts_parsing() {
        // Called directly, past the registry's up-front check, so this exercises the
        // polling inside the XML loop.
        let err = extract(LETTER, NO_LIMIT, &AtomicBool::new(true)).unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err:?}");
    }
}
