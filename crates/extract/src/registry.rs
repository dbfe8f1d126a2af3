//! The built-in registry: the format a document is ([`detect`]), then the
//! reader of that format, inside the guards every reader shares (the input
//! limit, the inflate budget of a container, the stop flag, and a parser's
//! panic contained as that document's failure).

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;

use leasehold::extract::{image_kind, ExtractError, Extracted, Extraction, Extractor, Format, Limits};

use crate::detect;
#[cfg(feature = "mail")]
use crate::email;
#[cfg(feature = "html")]
use crate::html;
#[cfg(feature = "markdown")]
use crate::markdown;
#[cfg(feature = "pdf")]
use crate::pdf;
use crate::rtf;
use crate::stop::check_stop;
use crate::text::{self, Decoded};
#[cfg(feature = "office")]
use crate::{epub, odf, office};
#[cfg(feature = "hwp")]
use crate::{hwp, hwpx};

/// The built-in registry: chooses a format by content and by the extension of the name,
/// then extracts.
#[derive(Debug, Clone)]
pub struct ExtractorRegistry {
    max_input_bytes: u64,
}

/// How far a zip container's parts may inflate, in total, relative to the input limit. Real
/// documents compress XML about 5-10x, so this admits any honest document near the input
/// limit while still bounding a zip bomb to a small multiple of what we accepted. The same
/// figure bounds the text a container may produce (see `zipped::check_output`).
const INFLATE_FACTOR: u64 = 4;

impl ExtractorRegistry {
    /// The input limit when none is configured (64 MiB).
    pub const DEFAULT_MAX_INPUT_BYTES: u64 = Limits::DEFAULT_MAX_INPUT_BYTES;

    /// A registry refusing inputs over `max_input_bytes`.
    pub fn new(max_input_bytes: u64) -> Self {
        Self { max_input_bytes }
    }

    /// The input limit in bytes.
    pub fn max_input_bytes(&self) -> u64 {
        self.max_input_bytes
    }

    /// Chooses the format. Magic bytes come first because they cannot be wrong
    /// by accident (a zip is told apart by its entries); the extension decides
    /// between the text formats, which have no magic; content sniffing is the
    /// last resort for unnamed text. Binary content no reader names is
    /// `Unsupported` rather than decoded into garbage.
    pub fn detect(&self, name: &str, bytes: &[u8]) -> Result<Format, ExtractError> {
        detect::detect(name, bytes)
    }

    /// Extracts text and reports the format and encoding chosen for it, and the title the
    /// document gives itself (`None` for plain text and for an empty input). Cheap checks first
    /// (size, stop) so hostile or abandoned work costs nothing; empty input is a legitimate
    /// empty document in every format, so it never reaches a parser.
    pub fn extract_detailed(
        &self,
        name: &str,
        bytes: &[u8],
        stop: &AtomicBool,
    ) -> Result<Extraction, ExtractError> {
        self.check_size(bytes)?;
        check_stop(stop)?;
        let format = self.detect(name, bytes)?;
        if bytes.is_empty() {
            return Ok(Extraction {
                text: String::new(),
                format,
                encoding: None,
                title: None,
                author: None,
                date: None,
                pages: None,
                language: None,
            });
        }
        let decoded = guard_panics(format, || self.extract_as(format, bytes, stop))?;
        Ok(Extraction {
            text: decoded.text,
            format,
            encoding: decoded.encoding,
            title: decoded.title,
            author: decoded.author,
            date: decoded.date,
            pages: decoded.pages,
            language: decoded.language,
        })
    }

    /// The zip-bomb guard for the containers, derived from the input limit so one knob
    /// sizes both.
    fn max_inflated_bytes(&self) -> u64 {
        self.max_input_bytes.saturating_mul(INFLATE_FACTOR)
    }

    fn check_size(&self, bytes: &[u8]) -> Result<(), ExtractError> {
        let size = bytes.len() as u64;
        if size > self.max_input_bytes {
            return Err(ExtractError::TooLarge {
                size,
                limit: self.max_input_bytes,
            });
        }
        Ok(())
    }

    /// Runs one format's extractor. Kept separate from `extract_detailed` so the panic guard
    /// wraps exactly the parsing and nothing else.
    fn extract_as(&self, format: Format, bytes: &[u8], stop: &AtomicBool) -> Result<Decoded, ExtractError> {
        #[cfg_attr(not(feature = "office"), allow(unused_variables))]
        let inflate = self.max_inflated_bytes();
        match format {
            // Plain text has no place for a title: it stays `None`.
            Format::PlainText => Ok(text::extract(bytes)),
            #[cfg(feature = "markdown")]
            Format::Markdown => markdown::extract(bytes, stop),
            #[cfg(feature = "html")]
            Format::Html => html::extract(bytes, stop),
            #[cfg(feature = "pdf")]
            Format::Pdf => pdf::extract(bytes, stop),
            #[cfg(feature = "office")]
            Format::Docx | Format::Xlsx | Format::Pptx => office::extract(bytes, format, inflate, stop),
            #[cfg(feature = "office")]
            Format::Odt | Format::Ods | Format::Odp => odf::extract(bytes, format, inflate, stop),
            #[cfg(feature = "office")]
            Format::Epub => epub::extract(bytes, inflate, stop),
            Format::Rtf => rtf::extract(bytes, stop),
            #[cfg(feature = "hwp")]
            Format::Hwp => hwp::extract(bytes, inflate, stop),
            #[cfg(feature = "hwp")]
            Format::Hwpx => hwpx::extract(bytes, inflate, stop),
            #[cfg(feature = "mail")]
            Format::Email => email::extract(self, bytes, inflate, stop),
            Format::Image => image(bytes),
            #[allow(unreachable_patterns)]
            other => Err(not_built(other)),
        }
    }
}

impl Default for ExtractorRegistry {
    fn default() -> Self {
        Self::new(Self::DEFAULT_MAX_INPUT_BYTES)
    }
}

impl Extractor for ExtractorRegistry {
    /// The text of [`ExtractorRegistry::extract_detailed`], for callers that only want text.
    fn extract(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
        self.extract_detailed(name, bytes, stop)
            .map(|extraction| extraction.text)
    }

    fn extract_noted(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<Extracted, ExtractError> {
        let extraction = self.extract_detailed(name, bytes, stop)?;
        let note = Some(extraction.note());
        Ok(Extracted {
            text: extraction.text,
            note,
            title: extraction.title,
            author: extraction.author,
            date: extraction.date,
            pages: extraction.pages,
            language: extraction.language,
        })
    }
}

/// Contains panics from the parsers (a PDF parser in particular may panic on malformed
/// files) so one hostile document fails as `Malformed` instead of killing its worker thread.
/// The panic hook is left alone on purpose: the panic is still reported on stderr.
pub(crate) fn guard_panics<T>(
    format: Format,
    run: impl FnOnce() -> Result<T, ExtractError>,
) -> Result<T, ExtractError> {
    panic::catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|payload| {
        Err(ExtractError::malformed(
            format,
            format!("parser panicked: {}", panic_message(payload.as_ref())),
        ))
    })
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "non-string panic payload"
    }
}

/// A picture's own text: none (OCR, when installed, reads it: [`OcrExtractor`]); one
/// named as a picture that is none is malformed.
fn image(bytes: &[u8]) -> Result<Decoded, ExtractError> {
    match image_kind(bytes) {
        Some(_) => Ok(Decoded::described(String::new(), text::Meta::default())),
        None => Err(ExtractError::malformed(
            Format::Image,
            "named as a picture, but none of PNG, JPEG, TIFF, WebP or GIF",
        )),
    }
}

/// A format this build leaves out (a feature of `leasehold-extract` turned off):
/// the document is recognised, and the message says what would read it.
fn not_built(format: Format) -> ExtractError {
    let feature = match format {
        Format::Pdf => "pdf",
        Format::Html => "html",
        Format::Markdown => "markdown",
        Format::Hwp | Format::Hwpx => "hwp",
        Format::Email => "mail",
        _ => "office",
    };
    ExtractError::Unsupported {
        reason: format!(
            "{format}: this build reads no {format} (leasehold-extract's feature `{feature}` is off)"
        ),
    }
}

#[cfg(feature = "mail")]
impl email::ReadsParts for ExtractorRegistry {
    fn detect(&self, name: &str, bytes: &[u8]) -> Result<Format, ExtractError> {
        ExtractorRegistry::detect(self, name, bytes)
    }

    fn extract_detailed(
        &self,
        name: &str,
        bytes: &[u8],
        stop: &AtomicBool,
    ) -> Result<Extraction, ExtractError> {
        ExtractorRegistry::extract_detailed(self, name, bytes, stop)
    }
}
