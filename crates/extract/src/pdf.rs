//! PDF: text by pdf_oxide, with plain lopdf as the fallback.
//!
//! Chosen by measurement against `pdftotext` (poppler) on 363 public PDFs (the
//! test files of pypdf, pdfminer, PyPDF2 and pdf-parse, and the PDF manuals of
//! Debian's TeX and Ghostscript documentation packages; 29 encrypted, 26 with a
//! damaged cross-reference table), one process per file, 30 s each. pdftotext
//! reads 321 of them; "read" counts those of the 321 an engine also reads;
//! recall is the share of pdftotext's words an engine finds, on files both read.
//!
//! | engine | read | median / mean recall | empty password | damaged xref | panics | stdout junk |
//! |---|---|---|---|---|---|---|
//! | pdf-extract 0.7 (before) | 281 | 0.987 / 0.935 | 4 / 13 | 1 / 13 | 12 | 14.9 MB, 115 files |
//! | pdf-extract 0.12 | 292 | 0.989 / 0.947 | 12 / 13 | 1 / 13 | 10 | 0 |
//! | lopdf 0.47 | 306 | 0.970 / 0.832 | 13 / 13 | 13 / 13 | 0 | 0 |
//! | pdf_oxide 0.3.78 | 318 | 0.993 / 0.963 | 10 / 13 | 13 / 13 | 0 | 0 |
//! | unpdf 0.52 | 320 | 0.986 / 0.948 | 12 / 13 | 13 / 13 | 0 | 0 |
//! | **pdf_oxide, then lopdf** | **321** | **0.993 / 0.963** | **13 / 13** | **13 / 13** | 0 | 0 |
//!
//! pdf_oxide repairs damaged files itself and gives the best text; the three
//! files it misses are AES-256 (R5) documents it opens with the empty password
//! but returns no text for, which lopdf reads. lopdf alone reads nearly every
//! file but its text is poorer (66 files under 0.5 recall), so it is only the
//! fallback. The corpus recipe and the comparison harness are described in the
//! README's benchmarks section.
//!
//! Both engines are third-party parsers: the registry runs this module under
//! `catch_unwind`, and the isolated extractor runs it in a child process.

use std::sync::atomic::AtomicBool;

use super::{check_stop, ExtractError, Format};

/// The text of the PDF: pdf_oxide's, or lopdf's when pdf_oxide fails or finds
/// no words. The stop flag is checked between pages.
pub(super) fn extract(bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
    let first = with_pdf_oxide(bytes, stop);
    match &first {
        Ok(text) if has_words(text) => return first,
        Err(ExtractError::Stopped) => return first,
        _ => {}
    }
    match with_lopdf(bytes, stop) {
        Ok(text) if has_words(&text) => Ok(text),
        Err(ExtractError::Stopped) => Err(ExtractError::Stopped),
        // Neither found words: pdf_oxide's verdict stands (an empty text for a
        // scanned PDF, or its error).
        _ => first,
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

fn with_pdf_oxide(bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
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
    join_pages(pages, stop, |i| doc.extract_text_with_options(i, &options))
}

fn with_lopdf(bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut doc = lopdf::Document::load_mem(bytes).map_err(|e| ExtractError::malformed(Format::Pdf, e))?;
    if doc.is_encrypted() {
        doc.decrypt("").map_err(|e| needs_password(&e.to_string()))?;
    }
    let pages: Vec<u32> = doc.get_pages().keys().copied().collect();
    join_pages(pages.len(), stop, |i| doc.extract_text(&[pages[i]]))
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
        let text = extract(REPORT, &AtomicBool::new(false)).unwrap();
        assert!(text.contains("granite orchard"), "{text:?}");
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
