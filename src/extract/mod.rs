//! Text extraction's vocabulary: what the pipeline asks of an extractor and
//! what it hears back.
//!
//! The worker pool hands each leased document to an [`Extractor`] and records
//! its [`Extracted`] text, or the [`ExtractError`] that says whose fault a
//! failure was ([`ExtractError::is_permanent`]). The formats themselves, the
//! supervised child processes that run them under [`Limits`], and external
//! converters live in the `leasehold-extract` crate, so an embedder that brings
//! its own extractor compiles none of their parsers.

mod title;

pub use title::{clean_date, clean_language, clean_title, TitleText, MAX_TITLE_CHARS};

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

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
    /// OpenDocument text (LibreOffice Writer).
    Odt,
    /// OpenDocument spreadsheet (LibreOffice Calc).
    Ods,
    /// OpenDocument presentation (LibreOffice Impress).
    Odp,
    /// EPUB e-book: its chapters in reading order.
    Epub,
    /// Rich Text Format.
    Rtf,
    /// Excel's Office Open XML workbook: cell text, sheet by sheet.
    Xlsx,
    /// PowerPoint's Office Open XML deck: slide text, slide by slide.
    Pptx,
    /// Hancom's Hangul word processor, HWP 5.x (an OLE compound file).
    Hwp,
    /// Hancom's Hangul word processor, HWPX (zip + OWPML XML).
    Hwpx,
    /// An e-mail message (`.eml`): headers, body and attachments.
    Email,
    /// A picture ([`image_kind`]): no text of its own, only what OCR reads in it.
    Image,
}

impl Format {
    /// Every format, for reading names back ([`Format::from_name`]).
    #[doc(hidden)]
    pub const ALL: [Format; 16] = [
        Format::PlainText,
        Format::Markdown,
        Format::Html,
        Format::Pdf,
        Format::Docx,
        Format::Odt,
        Format::Ods,
        Format::Odp,
        Format::Epub,
        Format::Rtf,
        Format::Xlsx,
        Format::Pptx,
        Format::Hwp,
        Format::Hwpx,
        Format::Email,
        Format::Image,
    ];

    /// The format [`Format::as_str`] names, e.g. in an error an extraction child sends.
    pub fn from_name(name: &str) -> Option<Format> {
        Self::ALL.into_iter().find(|format| format.as_str() == name)
    }

    /// A stable lower-case name, suitable for logs and for storing in the queue.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::PlainText => "plain_text",
            Format::Markdown => "markdown",
            Format::Html => "html",
            Format::Pdf => "pdf",
            Format::Docx => "docx",
            Format::Odt => "odt",
            Format::Ods => "ods",
            Format::Odp => "odp",
            Format::Epub => "epub",
            Format::Rtf => "rtf",
            Format::Xlsx => "xlsx",
            Format::Pptx => "pptx",
            Format::Hwp => "hwp",
            Format::Hwpx => "hwpx",
            Format::Email => "email",
            Format::Image => "image",
        }
    }
}

/// The kind of picture `bytes` hold, by their magic (PNG, JPEG, TIFF, WebP, GIF: what
/// tesseract reads), or `None`.
pub fn image_kind(bytes: &[u8]) -> Option<&'static str> {
    let riff_webp = bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP";
    Some(match bytes {
        _ if bytes.starts_with(b"\x89PNG\r\n\x1a\n") => "png",
        _ if bytes.starts_with(b"\xff\xd8\xff") => "jpeg",
        _ if bytes.starts_with(b"II*\0") || bytes.starts_with(b"MM\0*") => "tiff",
        _ if riff_webp => "webp",
        _ if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") => "gif",
        _ => return None,
    })
}

/// Whether `text` holds something a search can find: a letter or a digit, or a
/// private-use character, which the word index's tokenizer keeps too (a PDF's
/// custom font encoding gives them).
pub fn has_a_word(text: &str) -> bool {
    let private_use = |c: char| matches!(c as u32, 0xE000..=0xF8FF | 0xF0000..=0x10FFFD);
    text.chars().any(|c| c.is_alphanumeric() || private_use(c))
}

/// What the note of a text read by OCR says: "OCR by tesseract (eng+kor)".
pub fn ocr_note(languages: &[String]) -> String {
    format!("{OCR_NOTE} ({})", languages.join("+"))
}

/// Whether a result's note says its text, or part of it, was read by OCR.
pub fn was_ocred(note: Option<&str>) -> bool {
    note.is_some_and(|note| note.contains(OCR_NOTE))
}

const OCR_NOTE: &str = "OCR by tesseract";

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A document's text together with the decisions that produced it, so a caller can record
/// why the text looks the way it does (a wrong encoding guess shows as mojibake).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extraction {
    /// The extracted text.
    pub text: String,
    /// The format the registry chose, by content first and name second.
    pub format: Format,
    /// The character encoding the text was decoded from (WHATWG name, e.g. `"UTF-8"`,
    /// `"windows-1252"`, `"Shift_JIS"`), for the formats that are decoded from bytes
    /// (plain text, Markdown, HTML); `None` where the format fixes the encoding itself.
    pub encoding: Option<&'static str>,
    /// The title the document gives itself (HTML `<title>`, a PDF's Info title, an
    /// office document's core properties, Markdown's first heading), cleaned by
    /// [`clean_title`]; `None` when it gives none.
    pub title: Option<String>,
    /// Who the document says wrote it (a PDF's Info author, the `dc:creator` of an
    /// office document or an e-book, HTML's `<meta name="author">`, RTF's `\author`),
    /// cleaned by [`clean_title`]; `None` when it names nobody.
    pub author: Option<String>,
    /// The date the document gives itself: when it says it was last modified, else
    /// created, as [`clean_date`] writes it (`2026-01-15`); `None` when it gives none.
    pub date: Option<String>,
    /// How many pages (a PDF's, a word processor's count, a deck's slides) the
    /// document says it has; `None` when it does not say.
    pub pages: Option<u32>,
    /// The language the document says it is in (`ko`, `en-US`), as
    /// [`clean_language`] writes it; `None` when it does not say.
    pub language: Option<String>,
}

/// A document's text and a one-line note of what was decided on the way (the
/// format, the encoding, the converter), which the pipeline records in the
/// document's history so that odd text can be explained later.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extracted {
    /// The extracted text.
    pub text: String,
    /// e.g. `"html, encoding windows-1252"`; `None` when nothing worth saying was decided.
    pub note: Option<String>,
    /// The document's own title, cleaned by [`clean_title`]; `None` when it gives
    /// none (the store then titles it by its file name in the index).
    pub title: Option<String>,
    /// Who the document says wrote it ([`Extraction::author`]).
    pub author: Option<String>,
    /// The date the document gives itself ([`Extraction::date`]).
    pub date: Option<String>,
    /// Its page count ([`Extraction::pages`]).
    pub pages: Option<u32>,
    /// Its language ([`Extraction::language`]).
    pub language: Option<String>,
}

impl Extracted {
    /// `text` and nothing else: no note, nothing the document says of itself.
    pub fn text_only(text: String) -> Self {
        Extracted {
            text,
            ..Extracted::default()
        }
    }
}

impl Extraction {
    /// The decisions as one line: the format, and the encoding when the text was decoded.
    pub fn note(&self) -> String {
        match self.encoding {
            Some(encoding) => format!("{}, encoding {encoding}", self.format),
            None => self.format.to_string(),
        }
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
    /// The child's attempt was ended from outside (a signal leasehold did not send, a stop,
    /// a starved machine): not the document's fault, retried like any failed attempt.
    #[error("extraction interrupted from outside, not the document's fault: {cause}")]
    Interrupted {
        /// What happened to the child.
        cause: Interruption,
    },
    /// A configured external converter failed on the document.
    #[error("converter {program} failed: {reason}")]
    Converter {
        /// The command's program.
        program: String,
        /// How it ended, with its last lines of error output.
        reason: String,
    },
    /// No extraction process could be started (a child, or a converter):
    /// the machine's fault, not the document's.
    #[error("extractor unavailable: {reason}")]
    Unavailable {
        /// Why no child could be started or greeted.
        reason: String,
    },
}

impl ExtractError {
    /// Whether retrying the same bytes could ever succeed. `Stopped` depends on the worker,
    /// `Unavailable` on the machine and `Interrupted` on whatever reached the child from
    /// outside, rather than on the document, so only they are worth another attempt; every
    /// limit and crash the document provoked in an isolated child is its own fault.
    pub fn is_permanent(&self) -> bool {
        !matches!(
            self,
            ExtractError::Stopped | ExtractError::Unavailable { .. } | ExtractError::Interrupted { .. }
        )
    }

    /// The failure as the reason a document of `input_bytes` records: a limit also says
    /// the document's size and what would let it through, since a big honest document
    /// and a hostile one end the same way.
    pub fn reason_for(&self, input_bytes: u64) -> String {
        let size = Size(input_bytes);
        match self {
            ExtractError::Limit {
                what: LimitKind::Deadline(_) | LimitKind::CpuTime { .. },
            } => format!(
                "{self} for a document of {size} (the limit grows with the size: raise it, or its allowance per MiB, to read this one)"
            ),
            ExtractError::Limit {
                what: LimitKind::Memory { .. } | LimitKind::Output { .. },
            } => format!("{self} for a document of {size} (raise the limit to read this one)"),
            other => other.to_string(),
        }
    }

    /// Shorthand used by the format modules, which all report parser failures the same way.
    #[doc(hidden)]
    pub fn malformed(format: Format, reason: impl fmt::Display) -> Self {
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

    /// [`Extractor::extract`], with a note of the decisions taken for the
    /// document's history. Extractors that decide nothing worth recording keep
    /// this default.
    fn extract_noted(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<Extracted, ExtractError> {
        self.extract(name, bytes, stop).map(Extracted::text_only)
    }
}

/// What one document may cost its child. The defaults suit a desktop or edge machine: a
/// minute of time, a gigabyte of memory. Deadline, CPU time and output cap apply per
/// document; memory, input size and stack are fixed when a child starts. The deadline and
/// the CPU time grow with the document ([`Limits::for_input`]): a 1,400-page PDF is not
/// hostile for needing more than a minute on a busy machine, while a small file that
/// hangs is still ended at the base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time from sending the document to having its text, measured by the
    /// parent, which kills the child when it passes. Starting a fresh child is not counted
    /// (it has its own bound of 10 s and fails as `Unavailable`). Default 60 s.
    pub deadline: Duration,
    /// Memory the parser may allocate, enforced with `RLIMIT_AS` in the child on top of the
    /// address space the child has mapped at start-up (binary, libraries, stacks). It also
    /// covers the child's copy of the document. Default 1 GiB.
    pub memory_bytes: u64,
    /// CPU time (user + system) for one document, enforced with `RLIMIT_CPU` in the child
    /// (whole seconds, rounded up; the child dies of SIGXCPU). Default 60 s.
    pub cpu_time: Duration,
    /// Added to the deadline for each MiB of the document (in proportion, so a small
    /// file adds next to nothing). Default 2 s.
    pub deadline_per_mib: Duration,
    /// Added to the CPU time for each MiB of the document. Default 1 s.
    pub cpu_time_per_mib: Duration,
    /// Largest extracted text accepted, in bytes. The child checks it, and the parent never
    /// reads more than this plus a small header. Default 64 MiB.
    pub max_output_bytes: u64,
    /// Largest document accepted, in bytes; bigger ones fail as `TooLarge` in the parent
    /// without reaching a child. Default: the registry's, 64 MiB.
    pub max_input_bytes: u64,
    /// Stack of the child's extraction thread: large, so that honest deeply nested documents
    /// parse, while a hostile one still overflows and is reported. Default 256 MiB (address
    /// space, reserved at start-up; only touched pages cost memory).
    pub stack_bytes: u64,
}

impl Limits {
    /// Wall-clock time one document may take: 60 s.
    pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);
    /// Address space of a child: 1 GiB.
    pub const DEFAULT_MEMORY_BYTES: u64 = 1 << 30;
    /// CPU time one document may take: 60 s.
    pub const DEFAULT_CPU_TIME: Duration = Duration::from_secs(60);
    /// Deadline added per MiB of input: 2 s (twice the CPU allowance, for a busy machine).
    pub const DEFAULT_DEADLINE_PER_MIB: Duration = Duration::from_secs(2);
    /// CPU time added per MiB of input: 1 s. The slowest honest PDFs measured (Chromium's
    /// printer, 57 MB) needed about 0.6 s of CPU per MiB.
    pub const DEFAULT_CPU_TIME_PER_MIB: Duration = Duration::from_secs(1);
    /// Extracted text of one document: 64 MiB.
    pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 64 << 20;
    /// Input of one document: 64 MiB.
    pub const DEFAULT_MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;
    /// Stack of the child's extraction thread: 256 MiB.
    pub const DEFAULT_STACK_BYTES: u64 = 256 << 20;

    /// The longest a time limit may grow to: a year, so that a deadline added to
    /// `Instant::now()` can never overflow, whatever a configuration says.
    pub const MAX_TIME_LIMIT: Duration = Duration::from_secs(365 * 24 * 3600);

    /// These limits for a document of `input_bytes`: the deadline and the CPU time each
    /// grown by their allowance per MiB, in proportion to the size (the deadline to the
    /// millisecond, the CPU time, which the child enforces in whole seconds, to the whole
    /// second below, so a small file's limits read as configured), at most
    /// [`Limits::MAX_TIME_LIMIT`]; the rest unchanged.
    pub fn for_input(&self, input_bytes: u64) -> Limits {
        let mib = input_bytes as f64 / (1024.0 * 1024.0);
        let grown = |base: Duration, per_mib: Duration, unit_ms: f64| {
            let extra_ms = (per_mib.as_secs_f64() * mib * 1000.0 / unit_ms).floor() * unit_ms;
            base.saturating_add(Duration::from_millis(extra_ms as u64))
                .min(Self::MAX_TIME_LIMIT)
        };
        Limits {
            deadline: grown(self.deadline, self.deadline_per_mib, 1.0),
            cpu_time: grown(self.cpu_time, self.cpu_time_per_mib, 1000.0),
            ..self.clone()
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Self::DEFAULT_DEADLINE,
            memory_bytes: Self::DEFAULT_MEMORY_BYTES,
            cpu_time: Self::DEFAULT_CPU_TIME,
            deadline_per_mib: Self::DEFAULT_DEADLINE_PER_MIB,
            cpu_time_per_mib: Self::DEFAULT_CPU_TIME_PER_MIB,
            max_output_bytes: Self::DEFAULT_MAX_OUTPUT_BYTES,
            max_input_bytes: Self::DEFAULT_MAX_INPUT_BYTES,
            stack_bytes: Self::DEFAULT_STACK_BYTES,
        }
    }
}

/// Which limit a document exceeded; carried by [`ExtractError::Limit`](ExtractError).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// The wall-clock deadline, as it was for the document (the base and its size's
    /// allowance, [`Limits::for_input`]).
    Deadline(Duration),
    /// The memory budget: an allocation failed under `RLIMIT_AS`.
    Memory {
        /// The budget in bytes.
        bytes: u64,
    },
    /// The per-document CPU time, in whole seconds.
    CpuTime {
        /// The budget in seconds.
        secs: u64,
    },
    /// The cap on extracted text, in bytes.
    Output {
        /// The cap in bytes.
        cap: u64,
    },
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitKind::Deadline(limit) => write!(f, "extraction exceeded its {} deadline", Seconds(*limit)),
            LimitKind::Memory { bytes } => {
                write!(f, "extraction exceeded its memory limit of {}", Bytes(*bytes))
            }
            LimitKind::CpuTime { secs } => write!(f, "extraction exceeded its CPU time limit of {secs} s"),
            LimitKind::Output { cap } => write!(f, "extracted text over the {cap}-byte cap"),
        }
    }
}

/// How a child's attempt at a document ended from outside, not by the document's doing;
/// carried by [`ExtractError::Interrupted`](ExtractError), which is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    /// Killed by a signal leasehold did not send and the child's code does not raise itself:
    /// SIGKILL from an operator or the kernel's OOM killer, SIGTERM, SIGHUP, ...
    Signal(i32),
    /// Found stopped (SIGSTOP, SIGTSTP, a debugger) when its deadline passed; the parent
    /// killed it.
    Stopped {
        /// The deadline, as configured.
        deadline: Duration,
    },
    /// The deadline passed while the child had had little CPU: it was stopped for a while or
    /// starved by a busy machine, not running on the document.
    Starved {
        /// The deadline, as configured.
        deadline: Duration,
        /// The CPU time the child used on the document.
        cpu: Duration,
    },
}

impl fmt::Display for Interruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Interruption::Signal(signal) => match signal_name(*signal) {
                Some(name) => write!(
                    f,
                    "the child was killed by {name} (signal {signal}), which leasehold did not send"
                ),
                None => write!(
                    f,
                    "the child was killed by signal {signal}, which leasehold did not send"
                ),
            },
            Interruption::Stopped { deadline } => {
                write!(
                    f,
                    "the child was found stopped at its {} deadline",
                    Seconds(*deadline)
                )
            }
            Interruption::Starved { deadline, cpu } => write!(
                f,
                "the child had only {} of CPU by its {} deadline (stopped or starved)",
                Seconds(*cpu),
                Seconds(*deadline)
            ),
        }
    }
}

/// "60 s"; "200 ms" below a second; "174.3 s" off the whole second above it (a
/// deadline grown with a document's size), or "60 s" when the tenths are nought.
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenths = (self.0.as_secs_f64() * 10.0).round() as u64;
        if self.0.subsec_nanos() != 0 && self.0 < Duration::from_secs(1) {
            write!(f, "{} ms", self.0.as_millis())
        } else if tenths.is_multiple_of(10) {
            write!(f, "{} s", tenths / 10)
        } else {
            write!(f, "{}.{} s", tenths / 10, tenths % 10)
        }
    }
}

/// A document's size as a person reads it: "57.0 MiB", "12.5 KiB", "300 bytes".
struct Size(u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0 as f64;
        if n >= 1024.0 * 1024.0 {
            write!(f, "{:.1} MiB", n / (1024.0 * 1024.0))
        } else if n >= 1024.0 {
            write!(f, "{:.1} KiB", n / 1024.0)
        } else {
            write!(f, "{} bytes", self.0)
        }
    }
}

/// "1 GiB", "256 MiB", or plain bytes when not a whole number of either.
struct Bytes(u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const GIB: u64 = 1 << 30;
        const MIB: u64 = 1 << 20;
        match self.0 {
            0 => write!(f, "0 bytes"),
            n if n % GIB == 0 => write!(f, "{} GiB", n / GIB),
            n if n % MIB == 0 => write!(f, "{} MiB", n / MIB),
            n => write!(f, "{n} bytes"),
        }
    }
}

/// The usual name of the signals that end or stop processes from outside.
#[doc(hidden)]
#[cfg(unix)]
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => return None,
    })
}

/// No signals outside Unix: every number stays a number.
#[doc(hidden)]
#[cfg(not(unix))]
pub fn signal_name(_signal: i32) -> Option<&'static str> {
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn time_limits_grow_with_the_input_and_the_reason_names_its_size() {
        let limits = Limits::default();
        let small = limits.for_input(30);
        assert_eq!(
            (small.deadline, small.cpu_time),
            (limits.deadline, limits.cpu_time)
        );
        let big = limits.for_input(57 << 20);
        assert_eq!(big.deadline, Duration::from_secs(60 + 2 * 57));
        assert_eq!(big.cpu_time, Duration::from_secs(60 + 57));
        assert_eq!(
            (big.memory_bytes, big.max_output_bytes),
            (limits.memory_bytes, limits.max_output_bytes)
        );
        let half = limits.for_input(3 << 19);
        assert_eq!(
            (half.deadline, half.cpu_time),
            (Duration::from_secs(63), Duration::from_secs(61))
        );
        // A kilobyte adds 1 ms to the deadline (1.95, to the ms below) and nothing to the CPU time.
        let kib = limits.for_input(1024);
        assert_eq!(
            (kib.deadline, kib.cpu_time),
            (Duration::from_millis(60_001), limits.cpu_time)
        );
        assert_eq!(limits.for_input(u64::MAX).deadline, Limits::MAX_TIME_LIMIT);

        let err = ExtractError::Limit {
            what: LimitKind::Deadline(Duration::from_millis(174_300)),
        };
        assert_eq!(
            err.reason_for(59_768_832),
            "extraction exceeded its 174.3 s deadline for a document of 57.0 MiB \
             (the limit grows with the size: raise it, or its allowance per MiB, to read this one)"
        );
        let err = ExtractError::Limit {
            what: LimitKind::Memory { bytes: 1 << 30 },
        };
        assert!(err
            .reason_for(2048)
            .ends_with("for a document of 2.0 KiB (raise the limit to read this one)"));
        let crash = ExtractError::Crashed {
            reason: "stack overflow".into(),
        };
        assert_eq!(crash.reason_for(10), crash.to_string());
    }

    use super::*;

    #[test]
    fn limits_read_as_sentences() {
        let deadline = LimitKind::Deadline(Limits::DEFAULT_DEADLINE).to_string();
        assert_eq!(deadline, "extraction exceeded its 60 s deadline");
        let short = LimitKind::Deadline(Duration::from_millis(200)).to_string();
        assert_eq!(short, "extraction exceeded its 200 ms deadline");
        let memory = LimitKind::Memory { bytes: 256 << 20 }.to_string();
        assert_eq!(memory, "extraction exceeded its memory limit of 256 MiB");
        let output = LimitKind::Output { cap: 10 }.to_string();
        assert_eq!(output, "extracted text over the 10-byte cap");
    }
}
