//! Text extraction: turns the bytes of a document into plain text.
//!
//! The worker pool hands each leased document to an [`Extractor`]. The built-in
//! [`ExtractorRegistry`] picks a [`Format`] from the content (magic bytes win, because file
//! names lie) and the name's extension, then runs one submodule per format. Every parser here
//! is a third-party crate; this module only adds the guards a long-running service needs:
//! an input size limit, a decompression limit, a cooperative stop flag and panic containment.

use std::any::Any;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

mod docx;
mod html;
mod isolated;
mod markdown;
mod pdf;
mod text;

pub use isolated::{child_main, IsolatedExtractor, LimitKind, Limits, CHILD_ARG};

/// Which extractor handles a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Text without markup (any encoding the decoder recognises).
    PlainText,
    /// CommonMark: the markup is dropped, the text kept.
    Markdown,
    /// HTML: visible text only (no script, style or head).
    Html,
    /// PDF.
    Pdf,
    /// Word's Office Open XML document.
    Docx,
}

impl Format {
    /// A stable lower-case name, suitable for logs and for storing in the queue.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::PlainText => "plain_text",
            Format::Markdown => "markdown",
            Format::Html => "html",
            Format::Pdf => "pdf",
            Format::Docx => "docx",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a document produced no text.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// The input is over the configured limit.
    #[error("document is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The input's size in bytes.
        size: u64,
        /// The limit in bytes.
        limit: u64,
    },
    /// No extractor handles this content.
    #[error("unsupported document: {reason}")]
    Unsupported {
        /// What the content was taken for.
        reason: String,
    },
    /// The format was recognised but the document is broken.
    #[error("malformed {format} document: {reason}")]
    Malformed {
        /// The format it was parsed as.
        format: Format,
        /// What the parser said.
        reason: String,
    },
    /// The stop flag was raised (the lease was lost or the pool stops hard):
    /// not the document's fault.
    #[error("extraction stopped: the worker lost its lease")]
    Stopped,

    // Raised by the isolated extractor (see `isolated`), whose child process runs the parser.
    /// The child hit one of its [`Limits`] and was killed or gave up: the document's fault.
    #[error("{what}")]
    Limit {
        /// Which limit, with its value.
        what: LimitKind,
    },
    /// The child died while extracting (stack overflow, a signal, an unexpected exit, or
    /// garbage on the protocol pipe): the document's fault.
    #[error("extractor crashed: {reason}")]
    Crashed {
        /// How it died, with a few sanitised lines of its stderr.
        reason: String,
    },
    /// No child could be started: the machine's fault, not the document's.
    #[error("isolated extractor unavailable: {reason}")]
    Unavailable {
        /// Why no child could be started or greeted.
        reason: String,
    },
}

impl ExtractError {
    /// Whether retrying the same bytes could ever succeed. `Stopped` depends on the worker and
    /// `Unavailable` on the machine rather than the document, so only they are worth handing
    /// to another worker; every limit and crash of an isolated child is the document's fault.
    pub fn is_permanent(&self) -> bool {
        !matches!(self, ExtractError::Stopped | ExtractError::Unavailable { .. })
    }

    /// Shorthand used by the format modules, which all report parser failures the same way.
    fn malformed(format: Format, reason: impl fmt::Display) -> Self {
        ExtractError::Malformed {
            format,
            reason: reason.to_string(),
        }
    }
}

/// Pluggable extractor: the worker pool calls this on a worker thread. `stop` is raised when the
/// worker lost its lease; long extractions may poll it and return [`ExtractError::Stopped`] early.
pub trait Extractor: Send + Sync {
    /// The text of the document `name` (a key or path, used for the extension)
    /// whose content is `bytes`; may return early with `Stopped` once `stop` is raised.
    fn extract(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError>;
}

/// The built-in registry: chooses a format by content and by the extension of the name,
/// then extracts.
#[derive(Debug, Clone)]
pub struct ExtractorRegistry {
    max_input_bytes: u64,
}

/// How far a DOCX's `word/document.xml` may inflate relative to the input limit. Real
/// documents compress XML about 5-10x, so this admits any honest document near the input
/// limit while still bounding a zip bomb to a small multiple of what we accepted.
const DOCX_INFLATE_FACTOR: u64 = 4;

impl ExtractorRegistry {
    /// The input limit when none is configured (64 MiB).
    pub const DEFAULT_MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;

    /// A registry refusing inputs over `max_input_bytes`.
    pub fn new(max_input_bytes: u64) -> Self {
        Self { max_input_bytes }
    }

    /// The input limit in bytes.
    pub fn max_input_bytes(&self) -> u64 {
        self.max_input_bytes
    }

    /// Chooses the format. Magic bytes come first because they cannot be wrong by accident;
    /// the extension decides between the text formats, which have no magic; content sniffing
    /// is the last resort for unnamed text. Binary content we cannot name is `Unsupported`
    /// rather than decoded into garbage.
    pub fn detect(&self, name: &str, bytes: &[u8]) -> Result<Format, ExtractError> {
        let ext = extension(name);
        if bytes.starts_with(b"%PDF-") {
            return Ok(Format::Pdf);
        }
        if bytes.starts_with(b"PK\x03\x04") {
            return detect_zip(ext.as_deref(), bytes);
        }
        match ext.as_deref() {
            // Named as a binary format but without its magic: let that extractor say how
            // it is broken instead of calling it unsupported.
            Some("pdf") => return Ok(Format::Pdf),
            Some("docx") => return Ok(Format::Docx),
            _ => {}
        }
        if text::looks_binary(bytes) {
            return Err(ExtractError::Unsupported {
                reason: "binary content of no known format".into(),
            });
        }
        Ok(text_format(ext.as_deref()).unwrap_or_else(|| sniff_text(bytes)))
    }

    /// The zip-bomb guard for DOCX, derived from the input limit so one knob sizes both.
    fn max_inflated_bytes(&self) -> u64 {
        self.max_input_bytes.saturating_mul(DOCX_INFLATE_FACTOR)
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

    /// Runs one format's extractor. Kept separate from `extract` so the panic guard wraps
    /// exactly the third-party parsing and nothing else.
    fn extract_as(&self, format: Format, bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
        match format {
            Format::PlainText => Ok(text::extract(bytes)),
            Format::Markdown => markdown::extract(bytes),
            Format::Html => html::extract(bytes),
            Format::Pdf => pdf::extract(bytes, stop),
            Format::Docx => docx::extract(bytes, self.max_inflated_bytes(), stop),
        }
    }
}

impl Default for ExtractorRegistry {
    fn default() -> Self {
        Self::new(Self::DEFAULT_MAX_INPUT_BYTES)
    }
}

impl Extractor for ExtractorRegistry {
    /// Cheap checks first (size, stop) so hostile or abandoned work costs nothing; empty
    /// input is a legitimate empty document in every format, so it never reaches a parser.
    fn extract(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
        self.check_size(bytes)?;
        check_stop(stop)?;
        if bytes.is_empty() {
            return Ok(String::new());
        }
        let format = self.detect(name, bytes)?;
        guard_panics(format, || self.extract_as(format, bytes, stop))
    }
}

/// Returns `Stopped` once the lease is gone, so callers can bail out with `?`.
fn check_stop(stop: &AtomicBool) -> Result<(), ExtractError> {
    if stop.load(Ordering::Relaxed) {
        Err(ExtractError::Stopped)
    } else {
        Ok(())
    }
}

/// Contains panics from the parsers (pdf-extract in particular panics on many malformed
/// files) so one hostile document fails as `Malformed` instead of killing its worker thread.
/// The panic hook is left alone on purpose: the panic is still reported on stderr.
fn guard_panics<T>(format: Format, run: impl FnOnce() -> Result<T, ExtractError>) -> Result<T, ExtractError> {
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

/// The lower-cased extension of the last path component; accepts `/` and `\` separators
/// because names come from any platform.
fn extension(name: &str) -> Option<String> {
    let file = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let (stem, ext) = file.rsplit_once('.')?;
    if stem.is_empty() || ext.is_empty() {
        return None;
    }
    Some(ext.to_ascii_lowercase())
}

/// A zip is only a DOCX if it has the main document part, unless the name insists: then the
/// DOCX extractor reports exactly what is missing or corrupt.
fn detect_zip(ext: Option<&str>, bytes: &[u8]) -> Result<Format, ExtractError> {
    if ext == Some("docx") || docx::is_docx(bytes) {
        Ok(Format::Docx)
    } else {
        Err(ExtractError::Unsupported {
            reason: "zip archive that is not a DOCX document".into(),
        })
    }
}

fn text_format(ext: Option<&str>) -> Option<Format> {
    match ext? {
        "txt" | "text" | "log" => Some(Format::PlainText),
        "md" | "markdown" => Some(Format::Markdown),
        "html" | "htm" => Some(Format::Html),
        _ => None,
    }
}

/// For text without a telling extension: HTML announces itself in its first tag.
fn sniff_text(bytes: &[u8]) -> Format {
    if html::looks_like_html(&text::decode_prefix(bytes)) {
        Format::Html
    } else {
        Format::PlainText
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads a file from the committed sample corpus.
    macro_rules! sample {
        ($path:literal) => {
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/samples/", $path))
                .expect("sample file is readable")
        };
    }

    fn extract_with(registry: &ExtractorRegistry, name: &str, bytes: &[u8]) -> Result<String, ExtractError> {
        registry.extract(name, bytes, &AtomicBool::new(false))
    }

    fn extract(name: &str, bytes: &[u8]) -> Result<String, ExtractError> {
        extract_with(&ExtractorRegistry::default(), name, bytes)
    }

    /// Extracts a sample, checks its detected format and that its phrase survived.
    fn assert_sample(name: &str, bytes: &[u8], format: Format, phrase: &str) {
        let registry = ExtractorRegistry::default();
        assert_eq!(registry.detect(name, bytes).unwrap(), format, "{name}");
        let text = extract_with(&registry, name, bytes).unwrap();
        assert!(text.contains(phrase), "{name}: {phrase:?} not in {text:?}");
    }

    #[test]
    fn sample_txt_has_its_phrase() {
        let bytes = sample!("notes.txt");
        assert_sample("notes.txt", &bytes, Format::PlainText, "amber lighthouse");
    }

    #[test]
    fn sample_md_has_its_phrase_without_markup() {
        let bytes = sample!("guide.md");
        assert_sample("guide.md", &bytes, Format::Markdown, "copper kettle");
        let text = extract("guide.md", &bytes).unwrap();
        assert!(!text.contains('#') && !text.contains("**") && !text.contains('`'));
    }

    #[test]
    fn sample_nested_md_has_its_phrase() {
        let bytes = sample!("nested/more.md");
        assert_sample("nested/more.md", &bytes, Format::Markdown, "quiet lantern");
    }

    #[test]
    fn sample_html_has_its_phrase_but_no_script_or_style() {
        let bytes = sample!("page.html");
        assert_sample("page.html", &bytes, Format::Html, "velvet harbor");
        let text = extract("page.html", &bytes).unwrap();
        for hidden in ["forbidden script", "forbidden style", "color", "console"] {
            assert!(!text.contains(hidden), "{hidden:?} leaked into {text:?}");
        }
    }

    #[test]
    fn sample_pdf_has_its_phrase() {
        let bytes = sample!("report.pdf");
        assert_sample("report.pdf", &bytes, Format::Pdf, "granite orchard");
    }

    #[test]
    fn sample_docx_has_its_phrase() {
        let bytes = sample!("letter.docx");
        assert_sample("letter.docx", &bytes, Format::Docx, "silver meadow");
    }

    #[test]
    fn binary_samples_are_detected_by_content_not_name() {
        let registry = ExtractorRegistry::default();
        assert_eq!(
            registry.detect("blob", &sample!("report.pdf")).unwrap(),
            Format::Pdf
        );
        assert_eq!(
            registry.detect("blob.txt", &sample!("letter.docx")).unwrap(),
            Format::Docx
        );
    }

    #[test]
    fn text_formats_are_detected_by_extension_then_sniffing() {
        let registry = ExtractorRegistry::default();
        let html = b"  <!DOCTYPE html><html><body>x</body></html>";
        assert_eq!(registry.detect("a.MD", b"# x").unwrap(), Format::Markdown);
        assert_eq!(registry.detect("dir/a.htm", b"x").unwrap(), Format::Html);
        assert_eq!(registry.detect("a.log", html).unwrap(), Format::PlainText);
        assert_eq!(registry.detect("upload", html).unwrap(), Format::Html);
        assert_eq!(registry.detect("upload", b"<HTML>x").unwrap(), Format::Html);
        assert_eq!(
            registry.detect("upload.bin", b"just words").unwrap(),
            Format::PlainText
        );
        assert_eq!(registry.detect(".md", b"x").unwrap(), Format::PlainText);
    }

    #[test]
    fn empty_input_is_empty_text_in_every_format() {
        for name in ["a.txt", "a.md", "a.html", "a.pdf", "a.docx", "unnamed"] {
            assert_eq!(extract(name, b"").unwrap(), "", "{name}");
        }
    }

    #[test]
    fn oversized_input_is_too_large_before_anything_else() {
        let registry = ExtractorRegistry::new(8);
        let err = extract_with(&registry, "a.txt", b"nine byte").unwrap_err();
        assert!(
            matches!(err, ExtractError::TooLarge { size: 9, limit: 8 }),
            "{err:?}"
        );
        assert!(err.is_permanent());
        let message = err.to_string();
        assert!(message.contains('9') && message.contains('8'), "{message}");
        assert_eq!(extract_with(&registry, "a.txt", b"8 bytes!").unwrap(), "8 bytes!");
    }

    #[test]
    fn binary_junk_is_unsupported() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01";
        let controls: Vec<u8> = (1u8..32).cycle().take(256).collect();
        for (name, bytes) in [
            ("image.png", &png[..]),
            ("notes.txt", &png[..]),
            ("noext", &controls[..]),
        ] {
            let err = extract(name, bytes).unwrap_err();
            assert!(matches!(err, ExtractError::Unsupported { .. }), "{name}: {err:?}");
            assert!(err.is_permanent());
        }
    }

    #[test]
    fn plain_zip_is_unsupported_but_named_docx_is_malformed() {
        let zip = docx::tests::zip_with(&[("readme.txt", b"hello".as_slice())]);
        assert!(matches!(
            extract("archive.zip", &zip),
            Err(ExtractError::Unsupported { .. })
        ));
        assert!(matches!(
            extract("letter.docx", &zip),
            Err(ExtractError::Malformed {
                format: Format::Docx,
                ..
            })
        ));
    }

    #[test]
    fn raised_stop_flag_stops_before_any_work() {
        let stop = AtomicBool::new(true);
        let registry = ExtractorRegistry::default();
        for (name, bytes) in [
            ("notes.txt", sample!("notes.txt")),
            ("r.pdf", sample!("report.pdf")),
        ] {
            let err = registry.extract(name, &bytes, &stop).unwrap_err();
            assert!(matches!(err, ExtractError::Stopped), "{name}: {err:?}");
            assert!(!err.is_permanent());
        }
    }

    #[test]
    fn panics_become_malformed() {
        let result: Result<(), _> = guard_panics(Format::Pdf, || panic!("boom"));
        match result {
            Err(ExtractError::Malformed { format, reason }) => {
                assert_eq!(format, Format::Pdf);
                assert!(reason.contains("boom"), "{reason}");
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn extension_handles_paths_and_dotfiles() {
        assert_eq!(extension("a/b/C.DocX").as_deref(), Some("docx"));
        assert_eq!(extension(r"dir\file.md").as_deref(), Some("md"));
        assert_eq!(extension("dir.d/file"), None);
        assert_eq!(extension(".bashrc"), None);
        assert_eq!(extension("trailing."), None);
    }

    #[test]
    fn registry_reports_its_limit_and_is_an_extractor_object() {
        let registry: Box<dyn Extractor> = Box::new(ExtractorRegistry::new(5));
        assert!(registry
            .extract("a.txt", b"123456", &AtomicBool::new(false))
            .is_err());
        assert_eq!(ExtractorRegistry::default().max_input_bytes(), 64 * 1024 * 1024);
        assert_eq!(Format::Docx.as_str(), "docx");
    }
}
