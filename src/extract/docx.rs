//! DOCX: a zip (read by the zip crate) whose `word/document.xml` holds the body text in
//! `<w:t>` runs, streamed through quick-xml. Streaming plus a cap on inflated bytes means a
//! zip bomb costs at most the cap in CPU and nothing like it in memory.

use std::io::{self, BufReader, Cursor};
use std::sync::atomic::AtomicBool;

use quick_xml::events::Event;
use quick_xml::Reader;
use zip::result::ZipError;
use zip::ZipArchive;

use super::zipped::Capped;
use super::{check_stop, ExtractError, Format};

/// The main document part (also how `zipped::detect` knows a DOCX); headers, footers and notes live in other parts we skip.
const DOCUMENT_XML: &str = "word/document.xml";

/// Extracts the body text, reading at most `max_xml_bytes` of inflated XML.
pub(super) fn extract(bytes: &[u8], max_xml_bytes: u64, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut archive = ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| malformed(format!("not a readable zip archive: {e}")))?;
    let entry = archive.by_name(DOCUMENT_XML).map_err(|e| match e {
        ZipError::FileNotFound => malformed(format!("zip archive has no {DOCUMENT_XML}")),
        e => malformed(format!("cannot open {DOCUMENT_XML}: {e}")),
    })?;
    let mut reader = Reader::from_reader(BufReader::new(Capped::new(entry, max_xml_bytes)));
    let result = collect_text(&mut reader, stop);
    if reader.get_ref().get_ref().exceeded() {
        return Err(malformed(format!(
            "{DOCUMENT_XML} inflates past the limit of {max_xml_bytes} bytes"
        )));
    }
    result
}

fn malformed(reason: impl std::fmt::Display) -> ExtractError {
    ExtractError::malformed(Format::Docx, reason)
}

/// Pulls XML events until the end, polling `stop` on each: large documents are many
/// thousands of events, so this bounds how long a worker keeps going without its lease.
fn collect_text<R: io::BufRead>(reader: &mut Reader<R>, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut body = Body::default();
    let mut buf = Vec::new();
    loop {
        check_stop(stop)?;
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| malformed(format!("invalid XML in {DOCUMENT_XML}: {e}")))?;
        match event {
            Event::Start(e) => body.start(e.local_name().as_ref()),
            Event::Empty(e) => body.empty(e.local_name().as_ref()),
            Event::End(e) => body.end(e.local_name().as_ref()),
            Event::Text(t) if body.in_text() => {
                let text = t
                    .unescape()
                    .map_err(|e| malformed(format!("bad text in {DOCUMENT_XML}: {e}")))?;
                body.out.push_str(&text);
            }
            Event::CData(t) if body.in_text() => {
                body.out.push_str(&String::from_utf8_lossy(&t.into_inner()));
            }
            Event::Eof => return Ok(body.out),
            _ => {}
        }
        buf.clear();
    }
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
    fn in_text(&self) -> bool {
        self.text_depth > 0 && self.fallback_depth == 0
    }

    fn start(&mut self, name: &[u8]) {
        match name {
            b"t" => self.text_depth += 1,
            b"r" => self.run_depth += 1,
            b"Fallback" => self.fallback_depth += 1,
            _ => {}
        }
    }

    fn end(&mut self, name: &[u8]) {
        match name {
            b"t" => self.text_depth = self.text_depth.saturating_sub(1),
            b"r" => self.run_depth = self.run_depth.saturating_sub(1),
            b"Fallback" => self.fallback_depth = self.fallback_depth.saturating_sub(1),
            b"p" => self.push('\n'),
            _ => {}
        }
    }

    fn empty(&mut self, name: &[u8]) {
        match name {
            b"p" => self.push('\n'),
            b"tab" if self.run_depth > 0 => self.push('\t'),
            b"br" | b"cr" if self.run_depth > 0 => self.push('\n'),
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
    use std::io::Write;

    use zip::write::SimpleFileOptions;
    use zip::{CompressionMethod, ZipWriter};

    use super::super::{Extractor, ExtractorRegistry};
    use super::*;

    const LETTER: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/samples/letter.docx"));
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
