//! PDF: text via pdf-extract (on top of lopdf). pdf-extract panics on many malformed files;
//! the registry runs this module under `catch_unwind` (see `guard_panics` in the parent), so
//! such a panic surfaces as `Malformed` rather than unwinding through the worker.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use pdf_extract::{Document, MediaBox, OutputDev, OutputError, PlainTextOutput, Transform};

use super::{ExtractError, Format};

/// Parses the document, then renders its text page by page while polling `stop`, so a
/// worker that lost its lease gives up a long document between characters.
pub(super) fn extract(bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
    let doc = load(bytes)?;
    let mut text = String::new();
    let result = pdf_extract::output_doc(
        &doc,
        &mut StopAware {
            inner: PlainTextOutput::new(&mut text),
            stop,
        },
    );
    if stop.load(Ordering::Relaxed) {
        return Err(ExtractError::Stopped);
    }
    result.map_err(|e| ExtractError::malformed(Format::Pdf, e))?;
    Ok(text)
}

/// Loads and, when it needs no password, decrypts the document. A PDF that needs a
/// password is intact but unreadable to us, hence `Unsupported` rather than `Malformed`.
fn load(bytes: &[u8]) -> Result<Document, ExtractError> {
    let mut doc = Document::load_mem(bytes).map_err(|e| ExtractError::malformed(Format::Pdf, e))?;
    if doc.is_encrypted() {
        doc.decrypt("").map_err(|e| ExtractError::Unsupported {
            reason: format!("encrypted PDF that needs a password: {e}"),
        })?;
    }
    Ok(doc)
}

/// Forwards to pdf-extract's plain-text renderer, failing every callback once `stop` is
/// raised; that is the only way to leave `output_doc` early. The error used is a
/// placeholder: `extract` checks the flag itself and reports `Stopped`.
struct StopAware<'a, W: pdf_extract::ConvertToFmt> {
    inner: PlainTextOutput<W>,
    stop: &'a AtomicBool,
}

impl<W: pdf_extract::ConvertToFmt> StopAware<'_, W> {
    fn check(&self) -> Result<(), OutputError> {
        if self.stop.load(Ordering::Relaxed) {
            Err(OutputError::FormatError(fmt::Error))
        } else {
            Ok(())
        }
    }
}

impl<W: pdf_extract::ConvertToFmt> OutputDev for StopAware<'_, W> {
    fn begin_page(
        &mut self,
        page_num: u32,
        media_box: &MediaBox,
        art_box: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), OutputError> {
        self.check()?;
        self.inner.begin_page(page_num, media_box, art_box)
    }

    fn end_page(&mut self) -> Result<(), OutputError> {
        self.check()?;
        self.inner.end_page()
    }

    fn output_character(
        &mut self,
        trm: &Transform,
        width: f64,
        spacing: f64,
        font_size: f64,
        char: &str,
    ) -> Result<(), OutputError> {
        self.check()?;
        self.inner.output_character(trm, width, spacing, font_size, char)
    }

    fn begin_word(&mut self) -> Result<(), OutputError> {
        self.check()?;
        self.inner.begin_word()
    }

    fn end_word(&mut self) -> Result<(), OutputError> {
        self.check()?;
        self.inner.end_word()
    }

    fn end_line(&mut self) -> Result<(), OutputError> {
        self.check()?;
        self.inner.end_line()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Extractor, ExtractorRegistry};
    use super::*;

    const REPORT: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/samples/report.pdf"));

    fn via_registry(bytes: &[u8]) -> Result<String, ExtractError> {
        ExtractorRegistry::default().extract("report.pdf", bytes, &AtomicBool::new(false))
    }

    #[test]
    fn sample_text_is_extracted() {
        let text = extract(REPORT, &AtomicBool::new(false)).unwrap();
        assert!(text.contains("granite orchard"), "{text:?}");
    }

    #[test]
    fn truncated_pdf_is_malformed() {
        for len in [8, REPORT.len() / 3, REPORT.len() / 2, REPORT.len() - 40] {
            let err = via_registry(&REPORT[..len]).unwrap_err();
            assert!(
                matches!(
                    err,
                    ExtractError::Malformed {
                        format: Format::Pdf,
                        ..
                    }
                ),
                "truncated to {len}: {err:?}"
            );
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
    fn parser_panic_is_contained_as_malformed() {
        // pdf-extract panics on an unknown font encoding name; same length keeps the xref valid.
        let bytes = replace(REPORT, b"/WinAnsiEncoding", b"/NoSuchEncoding1");
        match via_registry(&bytes) {
            Err(ExtractError::Malformed {
                format: Format::Pdf,
                reason,
            }) => assert!(reason.contains("panicked"), "{reason}"),
            other => panic!("expected a contained panic, got {other:?}"),
        }
    }

    fn replace(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        assert_eq!(from.len(), to.len());
        let at = haystack
            .windows(from.len())
            .position(|w| w == from)
            .expect("pattern present");
        let mut out = haystack.to_vec();
        out[at..at + to.len()].copy_from_slice(to);
        out
    }

    #[test]
    fn stop_aware_output_fails_before_rendering_anything() {
        let doc = load(REPORT).unwrap();
        let mut text = String::new();
        let result = pdf_extract::output_doc(
            &doc,
            &mut StopAware {
                inner: PlainTextOutput::new(&mut text),
                stop: &AtomicBool::new(true),
            },
        );
        assert!(result.is_err());
        assert_eq!(text, "");
    }

    #[test]
    fn raised_stop_flag_interrupts_rendering() {
        // Called directly, past the registry's up-front check, so this exercises the
        // polling inside page rendering.
        let err = extract(REPORT, &AtomicBool::new(true)).unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err:?}");
    }
}
