//! PDF: text by pdf_oxide, with plain lopdf as the fallback (chosen by
//! measurement against `pdftotext` and the other engines: docs/DESIGN.md,
//! "Why each reader").
//!
//! pdf_oxide repairs damaged files itself and gives the best text; lopdf reads
//! the AES-256 (R5) documents pdf_oxide opens but returns no text for, and is
//! only the fallback because its text is poorer.
//!
//! Long documents (at least [`ONE_PASS_PAGES`] pages) and pages with a content stream
//! over [`ONE_PASS_CONTENT_BYTES`] are read one content-stream pass per page, pdf_oxide's
//! raw spans joined into lines here ([`spans_text`]), not through its layout path, which
//! makes three passes per page (one of them over every page of the document, for running
//! headers, on the first call), parses the whole structure tree of a tagged PDF and lays
//! out a page superlinearly in its text runs (`cargo bench --bench pdf` measures it).
//! Short documents keep the layout path: on small files one pass would lose form-field
//! and annotation text and figure labels. Given up on long documents: reading order from
//! the structure tree, its `/ActualText`, and vertical CJK handling.
//!
//! Both engines are third-party parsers: the registry runs this module under
//! `catch_unwind`, and the isolated extractor runs it in a child process.
//!
//! The title is the document information dictionary's `/Title` (the trailer's `/Info`),
//! read by the engine whose text is kept, or by pdf_oxide when lopdf's text is kept but
//! lopdf finds none; both hand over the raw (decrypted) string, which [`text_string`]
//! decodes as the PDF standard says a text string is written. The author is `/Author`
//! and the date `/ModDate`, else `/CreationDate`, read alike from the same dictionary
//! (each field from the kept engine, else from the other). The XMP metadata stream is
//! not read: producers that write it write the Info entries too.

use std::sync::atomic::AtomicBool;

use super::text::{Decoded, Meta};
use super::title::{clean_date, clean_language, TitleText};
use crate::stop::check_stop;
use leasehold::extract::{ExtractError, Format};

/// One engine's reading of the document: its text and the title, author and date its
/// Info dictionary gives, cleaned.
struct PdfText {
    text: String,
    meta: Meta,
}

/// The text of the PDF: pdf_oxide's, or lopdf's when pdf_oxide fails or finds
/// no words. The stop flag is checked between pages.
pub(super) fn extract(bytes: &[u8], stop: &AtomicBool) -> Result<Decoded, ExtractError> {
    let first = with_pdf_oxide(bytes, stop);
    match &first {
        Ok(found) if has_words(&found.text) => return first.map(PdfText::into_decoded),
        Err(ExtractError::Stopped) => return Err(ExtractError::Stopped),
        _ => {}
    }
    match with_lopdf(bytes, stop) {
        Ok(second) if has_words(&second.text) => {
            let meta = match first {
                Ok(found) => second.meta.or(found.meta),
                Err(_) => second.meta,
            };
            Ok(Decoded::described(second.text, meta))
        }
        Err(ExtractError::Stopped) => Err(ExtractError::Stopped),
        // Neither found words: pdf_oxide's verdict stands (an empty text for a
        // scanned PDF, or its error).
        _ => first.map(PdfText::into_decoded),
    }
}

impl PdfText {
    fn into_decoded(self) -> Decoded {
        Decoded::described(self.text, self.meta)
    }
}

fn has_words(text: &str) -> bool {
    text.split_whitespace().next().is_some()
}

/// The page texts, joined by form feeds; a page that fails is skipped, and
/// only a document whose every page fails is an error.
fn join_pages<E: std::fmt::Display>(
    pages: usize,
    stop: &AtomicBool,
    mut page: impl FnMut(usize) -> Result<String, E>,
) -> Result<String, ExtractError> {
    let mut text = String::new();
    let mut last_error = None;
    let mut failed = 0;
    for i in 0..pages {
        check_stop(stop)?;
        if i > 0 {
            text.push('\x0c');
        }
        match page(i) {
            Ok(t) => text.push_str(&t),
            Err(e) => {
                failed += 1;
                last_error = Some(e.to_string());
            }
        }
    }
    match last_error {
        Some(e) if failed == pages => Err(ExtractError::malformed(
            Format::Pdf,
            format!("no page could be read ({pages} pages; last: {e})"),
        )),
        _ => Ok(text),
    }
}

fn with_pdf_oxide(bytes: &[u8], stop: &AtomicBool) -> Result<PdfText, ExtractError> {
    let doc = pdf_oxide::PdfDocument::from_bytes(bytes.to_vec())
        .map_err(|e| ExtractError::malformed(Format::Pdf, e))?;
    // Opening tries the empty password; pdf_oxide then answers an undecryptable
    // file with empty text rather than an error, so ask.
    match doc.authenticate(b"") {
        Ok(true) => {}
        Ok(false) => return Err(needs_password("the empty user password is not it")),
        Err(e) => return Err(needs_password(&e.to_string())),
    }
    let pages = doc
        .page_count()
        .map_err(|e| ExtractError::malformed(Format::Pdf, e))?;
    // Plain text for indexing: no table detection (pdf_oxide's `extract_text`
    // default, which lays tables out as padded rows) and no heading detection.
    // Same words: on the bench corpus's 70 PDFs (`cargo bench --bench pdf`)
    // recall against pdftotext stayed 0.994 median / 0.957 mean, and the median
    // time per file fell from 86 to 60 ms (pdftotext: 52 ms).
    let options = pdf_oxide::converters::ConversionOptions {
        extract_tables: false,
        detect_headings: false,
        ..Default::default()
    };
    // A long document, or a page with a huge content stream, is read in one
    // content-stream pass per page (see the module's docs for why and the figures).
    let one_pass_document = pages >= ONE_PASS_PAGES;
    let merging = pdf_oxide::extractors::SpanMergingConfig::default();
    let text = join_pages(pages, stop, |i| {
        let one_pass = one_pass_document
            || doc
                .get_page_content_data(i)
                .is_ok_and(|content| content.len() > ONE_PASS_CONTENT_BYTES);
        if one_pass {
            doc.extract_spans_with_config(i, merging.clone())
                .map(|spans| spans_text(&spans))
        } else {
            doc.extract_text_with_options(i, &options)
        }
    })?;
    Ok(PdfText {
        text,
        meta: Meta {
            pages: u32::try_from(pages).ok(),
            language: oxide_language(&doc),
            ..info_meta(|key| oxide_info(&doc, key))
        },
    })
}

/// The catalog's `/Lang` (the document's natural language, ISO 32000-2, 14.9.2) through
/// pdf_oxide, as `clean_language` reads it.
fn oxide_language(doc: &pdf_oxide::PdfDocument) -> Option<String> {
    let root = doc.catalog().ok()?;
    let lang = doc.resolve_object(root.as_dict()?.get("Lang")?).ok()?;
    clean_language(&text_string(lang.as_string()?)?)
}

/// Documents of this many pages or more are read one content-stream pass per page
/// ([`spans_text`]) rather than through `extract_text_with_options`.
const ONE_PASS_PAGES: usize = 100;

/// A page whose decoded content stream is longer than this is read in one pass
/// too, whatever the document's length: pdf_oxide's layout passes grow
/// superlinearly with a page's text runs (a one-page Chromium print with 37,000
/// runs took 21x pdftotext's CPU). Four of the bench corpus's 363 files have such
/// a page (three MetaPost drawings and pypdf's issue-301.pdf); one pass reads them
/// within 0.004 of pdf_oxide's recall, or better.
const ONE_PASS_CONTENT_BYTES: usize = 1 << 20;

/// A page's text from its raw spans in content-stream order: a line break where
/// the baseline moves by more than half the font size, a space where the gap to
/// the previous span on the line exceeds a tenth of it or the span starts left of
/// the previous one's end by more than the font size.
fn spans_text(spans: &[pdf_oxide::layout::TextSpan]) -> String {
    let mut text = String::new();
    // (baseline, right edge, font size) of the previous span.
    let mut previous: Option<(f32, f32, f32)> = None;
    for span in spans {
        if span.text.is_empty() {
            continue;
        }
        let size = span.font_size.abs().max(1.0);
        if let Some((y, right, previous_size)) = previous {
            let spaced = text.ends_with(char::is_whitespace) || span.text.starts_with(char::is_whitespace);
            if (span.bbox.y - y).abs() > 0.5 * size.max(previous_size) {
                text.push('\n');
            } else if !spaced && (span.bbox.x - right > 0.1 * size || span.bbox.x < right - size) {
                text.push(' ');
            }
        }
        text.push_str(&span.text);
        previous = Some((span.bbox.y, span.bbox.x + span.bbox.width, size));
    }
    text
}

/// The title (`/Title`), author (`/Author`) and date (`/ModDate`, else `/CreationDate`) of
/// an Info dictionary whose entries `text` looks up by key and decodes ([`text_string`]).
/// A date is a text string too (ISO 32000-2, 7.9.4), decoded alike (so cut at a title's
/// length) before `clean_date` reads it.
fn info_meta(text: impl Fn(&str) -> Option<String>) -> Meta {
    let date = |key: &str| text(key).and_then(|raw| clean_date(&raw));
    Meta {
        title: text("Title"),
        author: text("Author"),
        date: date("ModDate").or_else(|| date("CreationDate")),
        ..Meta::default()
    }
}

/// The text string `key` of the trailer's `/Info` through pdf_oxide, whose `load_object`
/// decrypts the strings of the objects it loads; `None` when any step is missing or fails.
fn oxide_info(doc: &pdf_oxide::PdfDocument, key: &str) -> Option<String> {
    let info = doc.trailer().as_dict()?.get("Info")?;
    let info = doc.resolve_object(info).ok()?;
    let value = doc.resolve_object(info.as_dict()?.get(key)?).ok()?;
    text_string(value.as_string()?)
}

fn with_lopdf(bytes: &[u8], stop: &AtomicBool) -> Result<PdfText, ExtractError> {
    let mut doc = lopdf::Document::load_mem(bytes).map_err(|e| ExtractError::malformed(Format::Pdf, e))?;
    if doc.is_encrypted() {
        doc.decrypt("").map_err(|e| needs_password(&e.to_string()))?;
    }
    let pages: Vec<u32> = doc.get_pages().keys().copied().collect();
    let text = join_pages(pages.len(), stop, |i| doc.extract_text(&[pages[i]]))?;
    Ok(PdfText {
        text,
        meta: Meta {
            pages: u32::try_from(pages.len()).ok(),
            language: lopdf_language(&doc),
            ..info_meta(|key| lopdf_info(&doc, key))
        },
    })
}

/// The catalog's `/Lang` through lopdf.
fn lopdf_language(doc: &lopdf::Document) -> Option<String> {
    let lang = doc.catalog().ok()?.get_deref(b"Lang", doc).ok()?.as_str().ok()?;
    clean_language(&text_string(lang)?)
}

/// The text string `key` of the trailer's `/Info` through lopdf (decrypted with the
/// document).
fn lopdf_info(doc: &lopdf::Document, key: &str) -> Option<String> {
    let info = doc.trailer.get_deref(b"Info", doc).ok()?.as_dict().ok()?;
    text_string(info.get_deref(key.as_bytes(), doc).ok()?.as_str().ok()?)
}

/// A PDF text string (ISO 32000-2, 7.9.2.2), decoded and cleaned: UTF-16BE after the
/// byte-order mark `FE FF`, UTF-8 after `EF BB BF` (PDF 2.0), otherwise PDFDocEncoding.
/// UTF-16LE after `FF FE` is not in the standard but some producers write it, and it
/// cannot be mistaken for PDFDocEncoding text (which would start `ÿþ`). In UTF-16 a
/// language tag may sit between two U+001B escapes; it is not title text. Only as much
/// of the string as the title keeps is decoded.
fn text_string(raw: &[u8]) -> Option<String> {
    let mut title = TitleText::default();
    if let Some(be) = raw.strip_prefix(b"\xFE\xFF") {
        utf16_title(be, u16::from_be_bytes, &mut title);
    } else if let Some(le) = raw.strip_prefix(b"\xFF\xFE") {
        utf16_title(le, u16::from_le_bytes, &mut title);
    } else if let Some(utf8) = raw.strip_prefix(b"\xEF\xBB\xBF") {
        title.push_str(&String::from_utf8_lossy(
            &utf8[..utf8.len().min(TITLE_UTF8_BYTES)],
        ));
    } else {
        for &byte in raw {
            if title.is_full() {
                break;
            }
            title.push(pdf_doc_char(byte));
        }
    }
    title.finish()
}

/// Bytes of a UTF-8 text string decoded: enough for any title the title keeps (four bytes
/// to a character), unless the string opens with a long run of spaces.
const TITLE_UTF8_BYTES: usize = 64 * 1024;

/// Decodes UTF-16 code units into `title` until it is full, skipping language escapes.
fn utf16_title(bytes: &[u8], unit: fn([u8; 2]) -> u16, title: &mut TitleText) {
    let units = bytes.chunks_exact(2).map(|pair| unit([pair[0], pair[1]]));
    let mut in_language_tag = false;
    for c in char::decode_utf16(units) {
        if title.is_full() {
            return;
        }
        match c.unwrap_or(char::REPLACEMENT_CHARACTER) {
            '\u{1B}' => in_language_tag = !in_language_tag,
            _ if in_language_tag => {}
            c => title.push(c),
        }
    }
}

/// One byte of PDFDocEncoding (ISO 32000-2, Annex D). It is Latin-1 except for two ranges:
/// 0x18-0x1F hold spacing accents, 0x80-0xA0 typographic marks and a few letters; the
/// bytes it leaves undefined (0x7F, 0x9F, 0xAD) become U+FFFD.
fn pdf_doc_char(byte: u8) -> char {
    const ACCENTS: [char; 8] = [
        '\u{2D8}', '\u{2C7}', '\u{2C6}', '\u{2D9}', '\u{2DD}', '\u{2DB}', '\u{2DA}', '\u{2DC}',
    ];
    const MARKS: [char; 33] = [
        '\u{2022}', '\u{2020}', '\u{2021}', '\u{2026}', '\u{2014}', '\u{2013}', '\u{192}', '\u{2044}',
        '\u{2039}', '\u{203A}', '\u{2212}', '\u{2030}', '\u{201E}', '\u{201C}', '\u{201D}', '\u{2018}',
        '\u{2019}', '\u{201A}', '\u{2122}', '\u{FB01}', '\u{FB02}', '\u{141}', '\u{152}', '\u{160}',
        '\u{178}', '\u{17D}', '\u{131}', '\u{142}', '\u{153}', '\u{161}', '\u{17E}', '\u{FFFD}', '\u{20AC}',
    ];
    match byte {
        0x18..=0x1F => ACCENTS[usize::from(byte - 0x18)],
        0x80..=0xA0 => MARKS[usize::from(byte - 0x80)],
        0x7F | 0xAD => char::REPLACEMENT_CHARACTER,
        _ => char::from(byte),
    }
}

/// Intact but unreadable to us: hence `Unsupported` rather than `Malformed`.
fn needs_password(detail: &str) -> ExtractError {
    ExtractError::Unsupported {
        reason: format!("encrypted PDF that needs a password: {detail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Extractor, ExtractorRegistry};
    use super::*;

    const REPORT: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/report.pdf"));

    fn via_registry(bytes: &[u8]) -> Result<String, ExtractError> {
        ExtractorRegistry::default().extract("report.pdf", bytes, &AtomicBool::new(false))
    }

    #[test]
    fn sample_text_is_extracted() {
        let done = extract(REPORT, &AtomicBool::new(false)).unwrap();
        assert!(done.text.contains("granite orchard"), "{:?}", done.text);
        assert_eq!(done.title.as_deref(), Some("Quarterly Report"));
    }

    /// A one-page PDF saying "granite orchard" whose Info dictionary (object 6) is `info`.
    fn pdf_with_info(info: &[u8]) -> Vec<u8> {
        const CONTENT: &str = "BT /F1 14 Tf 72 720 Td (granite orchard) Tj ET";
        let objects: [Vec<u8>; 6] = [
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>".to_vec(),
            format!("<< /Length {} >>\nstream\n{CONTENT}\nendstream", CONTENT.len()).into_bytes(),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
            info.to_vec(),
        ];
        assemble(&objects, "/Info 6 0 R")
    }

    /// A PDF file of `objects` (numbered from 1, the first the catalog) with its
    /// cross-reference table, and `trailer` added to the trailer's dictionary.
    fn assemble(objects: &[Vec<u8>], trailer: &str) -> Vec<u8> {
        let mut pdf = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (i, body) in objects.iter().enumerate() {
            offsets.push(pdf.len());
            pdf.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
            pdf.extend_from_slice(body);
            pdf.extend_from_slice(b"\nendobj\n");
        }
        let xref = pdf.len();
        let size = objects.len() + 1;
        pdf.extend_from_slice(format!("xref\n0 {size}\n0000000000 65535 f \n").as_bytes());
        for offset in offsets {
            pdf.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
        }
        let trailer =
            format!("trailer\n<< /Size {size} /Root 1 0 R {trailer} >>\nstartxref\n{xref}\n%%EOF\n");
        pdf.extend_from_slice(trailer.as_bytes());
        pdf
    }

    fn run(bytes: &[u8]) -> Decoded {
        extract(bytes, &AtomicBool::new(false)).unwrap()
    }

    /// A PDF of `pages` pages, each of two lines in Helvetica: "page N granite" and,
    /// below it, two runs set apart on one line ("left" and "right").
    fn pdf_of_pages(pages: usize) -> Vec<u8> {
        let mut objects: Vec<Vec<u8>> = vec![
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            Vec::new(),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
        ];
        let mut kids = Vec::new();
        for n in 1..=pages {
            let content = format!(
                "BT /F1 12 Tf 72 720 Td (page {n} granite) Tj ET BT /F1 12 Tf 72 700 Td (left) Tj ET BT /F1 12 Tf 300 700 Td (right) Tj ET"
            );
            let page = objects.len() + 1;
            kids.push(format!("{page} 0 R"));
            objects.push(format!("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>", page + 1).into_bytes());
            objects
                .push(format!("<< /Length {} >>\nstream\n{content}\nendstream", content.len()).into_bytes());
        }
        objects[1] = format!("<< /Type /Pages /Kids [{}] /Count {pages} >>", kids.join(" ")).into_bytes();
        assemble(&objects, "")
    }

    /// A document of `ONE_PASS_PAGES` pages is read one content-stream pass per page and
    /// gives the words, lines and spaces the layout path gives one page shorter.
    #[test]
    fn a_long_document_is_read_in_one_pass_per_page_with_the_same_words() {
        let long = run(&pdf_of_pages(ONE_PASS_PAGES));
        let short = run(&pdf_of_pages(ONE_PASS_PAGES - 1));
        let pages: Vec<&str> = long.text.split('\x0c').collect();
        assert_eq!(
            (pages.len(), long.pages),
            (ONE_PASS_PAGES, Some(ONE_PASS_PAGES as u32))
        );
        assert_eq!(pages[0].trim(), "page 1 granite\nleft right");
        assert_eq!(
            pages[ONE_PASS_PAGES - 1].trim(),
            format!("page {ONE_PASS_PAGES} granite\nleft right")
        );
        let words = |text: &str| text.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let laid_out: Vec<String> = short.text.split('\x0c').flat_map(words).collect();
        let one_pass: Vec<String> = pages[..ONE_PASS_PAGES - 1]
            .iter()
            .flat_map(|p| words(p))
            .collect();
        assert_eq!(one_pass, laid_out);
    }

    #[test]
    fn the_title_is_the_info_title_of_a_real_producer_in_utf16() {
        // reportlab's output (tests/make_samples.py): UTF-16BE after FE FF, in octal escapes.
        let tides = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/tides.pdf"
        ));
        let done = run(tides);
        assert!(done.text.contains("saffron lagoon"), "{:?}", done.text);
        assert_eq!(
            done.title.as_deref(),
            Some("Tides of the \u{c5}land sea \u{2013} \u{6f6e}\u{6c50}")
        );
    }

    #[test]
    fn titles_in_each_encoding_of_a_text_string() {
        let cases: [(&[u8], &str); 4] = [
            // PDFDocEncoding: Latin-1 but for its own marks (fi ligature, em dash, euro).
            (
                b"<< /Title (caf\\351 \\223x \\204 \\240) >>",
                "caf\u{e9} \u{fb01}x \u{2014} \u{20ac}",
            ),
            (b"<< /Title <FEFF00480069> >>", "Hi"),
            (b"<< /Title <EFBBBF48C3A9> >>", "H\u{e9}"),
            (b"<< /Title (Two\\nlines) /Author (x) >>", "Two lines"),
        ];
        for (info, expected) in cases {
            let done = run(&pdf_with_info(info));
            assert_eq!(
                done.title.as_deref(),
                Some(expected),
                "{}",
                String::from_utf8_lossy(info)
            );
            assert_eq!(done.text.trim(), "granite orchard");
        }
    }

    #[test]
    fn a_missing_or_odd_info_title_is_none_and_the_text_stays() {
        for info in [
            b"<< /Author (no title) >>".as_slice(),
            b"<< /Title 42 >>",
            b"<< /Title 99 0 R >>",
            b"<< /Title 6 0 R >>",
            b"<< /Title (Untitled) >>",
            b"<< /Title () >>",
            b"(not a dictionary)",
        ] {
            let done = run(&pdf_with_info(info));
            assert_eq!(done.title, None, "{}", String::from_utf8_lossy(info));
            assert_eq!(done.text.trim(), "granite orchard");
        }
    }

    #[test]
    fn author_and_date_come_from_the_info_dictionary() {
        let done = run(&pdf_with_info(
            b"<< /Title (T) /Author <FEFF00C50073006100200042> /CreationDate (D:20240301) /ModDate (D:20260115093000+01'00') >>",
        ));
        assert_eq!(done.author.as_deref(), Some("\u{c5}sa B"));
        assert_eq!(
            done.date.as_deref(),
            Some("2026-01-15"),
            "ModDate before CreationDate"
        );
        let created = run(&pdf_with_info(b"<< /CreationDate (D:202403) >>"));
        assert_eq!(created.date.as_deref(), Some("2024-03"), "else CreationDate");
        // A malformed ModDate is no date; the creation date stands in for it.
        let odd = run(&pdf_with_info(
            b"<< /ModDate (yesterday) /CreationDate (D:2024) /Author 7 >>",
        ));
        assert_eq!((odd.author, odd.date.as_deref()), (None, Some("2024")));
        let bad = run(&pdf_with_info(b"<< /ModDate (D:20261399) >>"));
        assert_eq!(bad.date, None);
        assert_eq!(bad.text.trim(), "granite orchard");
    }

    #[test]
    fn a_megabyte_title_or_author_is_cut_to_one_line() {
        for key in ["Title", "Author"] {
            let open = format!("<< /{key} (");
            let info = [open.as_bytes(), &b"tide ".repeat(220_000), b") >>"].concat();
            let done = run(&pdf_with_info(&info));
            let label = if key == "Title" { done.title } else { done.author };
            assert_eq!(label.unwrap().chars().count(), 299, "{key}");
            assert_eq!(done.text.trim(), "granite orchard");
        }
    }

    #[test]
    fn text_strings_decode_as_the_standard_says() {
        let utf16 = |text: &str, be: bool| -> Vec<u8> {
            let bom: &[u8] = if be { b"\xFE\xFF" } else { b"\xFF\xFE" };
            let units = text
                .encode_utf16()
                .flat_map(|u| if be { u.to_be_bytes() } else { u.to_le_bytes() });
            bom.iter().copied().chain(units).collect()
        };
        assert_eq!(
            text_string(&utf16("\u{6f6e} tide", true)).as_deref(),
            Some("\u{6f6e} tide")
        );
        assert_eq!(
            text_string(&utf16("low tide", false)).as_deref(),
            Some("low tide")
        );
        // A language tag between escapes is not text.
        assert_eq!(
            text_string(&utf16("\u{1b}en\u{1b}tide", true)).as_deref(),
            Some("tide")
        );
        // A lone surrogate and an odd last byte do not fail the title.
        assert_eq!(
            text_string(b"\xFE\xFF\xD8\x00\x00a\x00").as_deref(),
            Some("\u{fffd}a")
        );
        assert_eq!(
            text_string(b"\x18a\x7F\x9F\xAD\xFF").as_deref(),
            Some("\u{2d8}a\u{fffd}\u{fffd}\u{fffd}\u{ff}")
        );
        assert_eq!(text_string(b"\xFE\xFF"), None);
        assert_eq!(text_string(b""), None);
    }

    #[test]
    fn truncated_pdf_is_malformed_or_repaired_never_a_panic() {
        for len in [8, REPORT.len() / 3, REPORT.len() / 2, REPORT.len() - 40] {
            match via_registry(&REPORT[..len]) {
                Ok(_) => {} // repaired: pdf_oxide rebuilds a damaged cross-reference table
                Err(ExtractError::Malformed {
                    format: Format::Pdf, ..
                }) => {}
                Err(other) => panic!("truncated to {len}: {other:?}"),
            }
        }
    }

    #[test]
    fn header_without_body_and_garbage_are_malformed() {
        for bytes in [&b"%PDF-1.7\n"[..], b"%PDF-\xFF\xFE\x00garbage", b"not a pdf"] {
            let err = via_registry(bytes).unwrap_err();
            assert!(matches!(err, ExtractError::Malformed { .. }), "{err:?}");
        }
    }

    #[test]
    fn raised_stop_flag_stops_between_pages() {
        // Called directly, past the registry's up-front check.
        let err = extract(REPORT, &AtomicBool::new(true)).unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err:?}");
    }

    #[test]
    fn a_page_that_fails_is_skipped_and_all_failing_is_malformed() {
        let stop = AtomicBool::new(false);
        let some = join_pages(3, &stop, |i| {
            if i == 1 {
                Err("bad page")
            } else {
                Ok(format!("p{i}"))
            }
        });
        assert_eq!(some.unwrap(), "p0\x0c\x0cp2");
        let none = join_pages(2, &stop, |_| Err::<String, _>("bad page"));
        assert!(matches!(none, Err(ExtractError::Malformed { .. })), "{none:?}");
    }
}
