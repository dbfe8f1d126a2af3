//! OCR: the text of pictures, and of a PDF's pages that have no text layer
//! (scans), read by `tesseract` when it is installed — Recoll's way.
//!
//! Each run is a supervised converter ([`run_command`]): its own process
//! group, the document's limits (deadline, CPU, memory), the stop flag. A PDF
//! is first read by the extractor it wraps; only the pages that gave no word
//! are drawn by poppler's `pdftoppm` (one page at a time, its long side
//! bounded, so a huge page cannot make a huge picture) and read by tesseract.
//! A result read this way says so in its note ([`ocr_note`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use leasehold::extract::{has_a_word, image_kind, ocr_note};

use super::command::{run_command, Silence, TempDoc};
use leasehold::extract::{ExtractError, Extracted, Extractor, LimitKind, Limits};

/// The long side, in pixels, of a PDF page drawn for OCR: an A4 page at
/// 300 dpi, what tesseract reads best; larger pages are scaled down to it.
const PAGE_PIXELS: u32 = 3508;

/// tesseract's page segmentation: "a single column of text of variable
/// sizes" (4), not its default, "fully automatic" (3), which finds no text at
/// all in many a clean Korean page ("Empty page!!"). Word recall against the
/// text, measured with tesseract 5.3: a Korean page printed by Chromium 0.25
/// with 3, 0.976 with 4; OCRmyPDF's two-column English test scan 0.964 with
/// 3, 0.963 with 4.
const PAGE_SEGMENTATION: &str = "4";

/// At most this many pages of one PDF are OCR'd (a page takes seconds): a
/// thousand-page scan is read in part, and its note says so, rather than
/// holding a worker for an hour; a hostile PDF of empty pages costs no more.
const MAX_OCR_PAGES: usize = 200;

/// How long `tesseract --list-langs` may take at start.
const LIST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// The OCR tools found on this machine and the languages to read.
#[derive(Debug, Clone)]
pub struct Ocr {
    /// The tesseract program.
    tesseract: String,
    /// poppler's pdftoppm, which draws a PDF page; without it PDFs are not OCR'd.
    pdftoppm: Option<String>,
    /// tesseract's language codes (`eng`, `kor`), tried together.
    languages: Languages,
    limits: Limits,
}

/// The languages an [`Ocr`] reads: given when it was made, or chosen from
/// what tesseract lists the first time a document needs OCR
/// ([`Ocr::choosing`]): listing them starts tesseract (30 ms of CPU here),
/// which a run that reads no picture and no scan never pays.
#[derive(Debug, Clone)]
enum Languages {
    Given(Vec<String>),
    /// `None` once chosen: tesseract could not list its languages, or has none.
    Chosen(Arc<OnceLock<Option<Vec<String>>>>, Announce),
}

/// Told once what a choosing [`Ocr`] chose: the languages, or why there are
/// none (OCR is then off, as if tesseract were not installed).
pub type Announce = fn(Result<&[String], &str>);

impl Ocr {
    /// OCR through `tesseract` in `languages` (at least one), drawing PDF pages
    /// with `pdftoppm` when given; every run under `limits`, scaled to its input.
    pub fn new(tesseract: String, pdftoppm: Option<String>, languages: Vec<String>, limits: Limits) -> Self {
        Ocr {
            tesseract,
            pdftoppm,
            languages: Languages::Given(languages),
            limits,
        }
    }

    /// [`Ocr::new`] whose languages are chosen the first time a document needs
    /// OCR: English when tesseract has it, else the first language it lists
    /// ([`Ocr::choose`]); `announce` is told the choice, once.
    pub fn choosing(tesseract: String, pdftoppm: Option<String>, limits: Limits, announce: Announce) -> Self {
        Ocr {
            tesseract,
            pdftoppm,
            languages: Languages::Chosen(Arc::new(OnceLock::new()), announce),
            limits,
        }
    }

    /// The languages read when none are configured, of those `installed`:
    /// English when there, else the first (not every pack at once: a full
    /// install would read each picture in a hundred).
    fn choose(installed: Vec<String>) -> Vec<String> {
        match installed.iter().any(|l| l == "eng") {
            true => vec!["eng".to_owned()],
            false => installed.into_iter().take(1).collect(),
        }
    }

    /// The languages to read now, choosing them if this is the first need;
    /// `None`: there are none, and OCR is off.
    fn languages_now(&self) -> Option<&[String]> {
        match &self.languages {
            Languages::Given(given) => Some(given),
            Languages::Chosen(chosen, announce) => chosen
                .get_or_init(|| {
                    let listed = Self::installed_languages(&self.tesseract).map(Self::choose);
                    match listed {
                        Ok(chosen) if !chosen.is_empty() => {
                            announce(Ok(&chosen));
                            Some(chosen)
                        }
                        Ok(_) => {
                            announce(Err("tesseract lists no language"));
                            None
                        }
                        Err(e) => {
                            announce(Err(&format!("tesseract cannot list its languages: {e}")));
                            None
                        }
                    }
                })
                .as_deref(),
        }
    }

    /// The languages `tesseract` has installed (`tesseract --list-langs`),
    /// without `osd`, which detects a script but reads no language.
    pub fn installed_languages(tesseract: &str) -> Result<Vec<String>, ExtractError> {
        let argv = vec![tesseract.to_owned(), "--list-langs".into()];
        let limits = Limits {
            deadline: LIST_DEADLINE,
            ..Limits::default()
        };
        let listed = run_command(&argv, b"", &limits, Silence::IsNoText, &AtomicBool::new(false))?;
        // The first line says where the data folder is ("List of available languages in ...").
        Ok(String::from_utf8_lossy(&listed)
            .lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.is_empty() && *l != "osd")
            .map(str::to_owned)
            .collect())
    }

    /// The text tesseract reads in a picture (any format it takes: PNG, JPEG,
    /// TIFF, WebP, GIF) in `languages`.
    fn read_picture(
        &self,
        languages: &[String],
        picture: &[u8],
        stop: &AtomicBool,
    ) -> Result<String, ExtractError> {
        let argv = vec![
            self.tesseract.clone(),
            "{}".into(),
            "stdout".into(),
            "-l".into(),
            languages.join("+"),
            "--psm".into(),
            PAGE_SEGMENTATION.into(),
        ];
        let limits = self.limits.for_input(picture.len() as u64);
        let text = run_command(&argv, picture, &limits, Silence::IsNoText, stop)?;
        Ok(String::from_utf8_lossy(&text).into_owned())
    }

    /// Page `number` (from 1) of the PDF at `pdf` (`size` bytes, written once for
    /// all its pages) drawn as a grey PNG.
    fn draw_page(
        &self,
        pdftoppm: &str,
        pdf: &TempDoc,
        size: u64,
        number: usize,
        stop: &AtomicBool,
    ) -> Result<Vec<u8>, ExtractError> {
        let page = number.to_string();
        let path = pdf.path().display().to_string();
        let argv: Vec<String> = [
            pdftoppm,
            "-f",
            &page,
            "-l",
            &page,
            "-scale-to",
            &PAGE_PIXELS.to_string(),
            "-gray",
            "-png",
            &path,
        ]
        .map(String::from)
        .into();
        run_command(&argv, b"", &self.limits.for_input(size), Silence::IsNoText, stop)
    }

    /// `text` (a PDF's `pages` pages joined by form feeds) with each page that
    /// has no word read by OCR, the first [`MAX_OCR_PAGES`] of them; the note's
    /// addition, or `None` when no page needed it (or the pages cannot be told
    /// apart: a form feed inside a page's text). A page OCR fails on keeps its
    /// text layer and is counted in the note: the rest of the PDF is not lost
    /// for it.
    fn fill_pages(
        &self,
        pdf: &[u8],
        pages: Option<u32>,
        text: &mut String,
        stop: &AtomicBool,
    ) -> Result<Option<String>, ExtractError> {
        let Some(pdftoppm) = self.pdftoppm.as_deref() else {
            return Ok(None);
        };
        // Looked at in place: most PDFs have no blank page, and their text is
        // the worker's to hold, not copied here.
        let count = text.split('\x0c').count();
        let blank: Vec<usize> = text
            .split('\x0c')
            .enumerate()
            .filter(|(_, page)| !has_a_word(page))
            .map(|(i, _)| i)
            .collect();
        if blank.is_empty() || pages.is_some_and(|n| n as usize != count) {
            return Ok(None);
        }
        let Some(languages) = self.languages_now() else {
            return Ok(None);
        };
        let mut texts: Vec<String> = text.split('\x0c').map(str::to_owned).collect();
        let copy = TempDoc::write(pdf).map_err(|e| ExtractError::Unavailable {
            reason: format!("cannot write a copy of the PDF for OCR: {e}"),
        })?;
        let (mut read, mut failed, mut total) = (0, 0, text.len());
        for &i in blank.iter().take(MAX_OCR_PAGES) {
            if stop.load(Ordering::Relaxed) {
                return Err(ExtractError::Stopped);
            }
            let page = self
                .draw_page(pdftoppm, &copy, pdf.len() as u64, i + 1, stop)
                .and_then(|picture| self.read_picture(languages, &picture, stop));
            match page {
                Ok(page) => {
                    // The cap is held page by page, not once all are read.
                    total = total - texts[i].len() + page.len();
                    if total as u64 > self.limits.max_output_bytes {
                        return Err(over_cap(&self.limits));
                    }
                    texts[i] = page;
                    read += 1;
                }
                Err(ExtractError::Stopped) => return Err(ExtractError::Stopped),
                Err(_) => failed += 1,
            }
        }
        *text = texts.join("\x0c");
        let mut note = format!("{} on {read} of {} pages", ocr_note(languages), texts.len());
        if failed > 0 {
            note.push_str(&format!(" ({failed} failed)"));
        }
        if blank.len() > MAX_OCR_PAGES {
            note.push_str(&format!(
                " (the first {MAX_OCR_PAGES} of {} without text)",
                blank.len()
            ));
        }
        Ok(Some(note))
    }
}

/// The text cap of `limits`, passed.
fn over_cap(limits: &Limits) -> ExtractError {
    ExtractError::Limit {
        what: LimitKind::Output {
            cap: limits.max_output_bytes,
        },
    }
}

/// Pictures read by OCR, PDFs read by `inner` and their pages without text by
/// OCR; everything else by `inner` alone.
pub struct OcrExtractor {
    ocr: Ocr,
    inner: Arc<dyn Extractor>,
}

impl OcrExtractor {
    /// `inner` with OCR for what it cannot read.
    pub fn new(ocr: Ocr, inner: Arc<dyn Extractor>) -> Self {
        OcrExtractor { ocr, inner }
    }
}

impl Extractor for OcrExtractor {
    fn extract(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
        self.extract_noted(name, bytes, stop).map(|done| done.text)
    }

    fn extract_noted(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<Extracted, ExtractError> {
        if let Some(kind) = image_kind(bytes) {
            // No language to read in: as if OCR were not installed.
            let Some(languages) = self.ocr.languages_now() else {
                return self.inner.extract_noted(name, bytes, stop);
            };
            return Ok(Extracted {
                note: Some(format!("{kind} image, {}", ocr_note(languages))),
                ..Extracted::text_only(self.ocr.read_picture(languages, bytes, stop)?)
            });
        }
        let mut done = self.inner.extract_noted(name, bytes, stop)?;
        if bytes.starts_with(b"%PDF-") {
            if let Some(added) = self.ocr.fill_pages(bytes, done.pages, &mut done.text, stop)? {
                done.note = Some(match done.note {
                    Some(note) => format!("{note}, {added}"),
                    None => added,
                });
            }
        }
        Ok(done)
    }
}

impl std::fmt::Debug for OcrExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OcrExtractor")
            .field("ocr", &self.ocr)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// An extractor that gives a fixed text, as the PDF reader would.
    struct Fixed(&'static str);

    impl Extractor for Fixed {
        fn extract(&self, _: &str, _: &[u8], _: &AtomicBool) -> Result<String, ExtractError> {
            Ok(self.0.to_owned())
        }
    }

    /// A shell script named `name` in `dir` that runs `body`.
    fn script(dir: &std::path::Path, name: &str, body: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    /// Stand-ins for the tools: pdftoppm "draws" the page number it was asked
    /// for (its second argument), tesseract "reads" back what it was given.
    fn ocr(dir: &std::path::Path) -> Ocr {
        let tesseract = script(dir, "tesseract", "printf 'read %s' \"$(cat \"$1\")\"");
        let pdftoppm = script(dir, "pdftoppm", "printf 'page %s' \"$2\"");
        Ocr::new(tesseract, Some(pdftoppm), vec!["eng".into()], Limits::default())
    }

    /// What choosing [`Ocr`]s of these tests announced.
    static ANNOUNCED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

    fn announce(chosen: Result<&[String], &str>) {
        ANNOUNCED.lock().unwrap().push(match chosen {
            Ok(languages) => languages.join("+"),
            Err(why) => format!("none: {why}"),
        });
    }

    #[test]
    fn a_choosing_ocr_lists_the_languages_once_and_only_when_a_document_needs_it() {
        let dir = tempfile::tempdir().unwrap();
        let listed = dir.path().join("listed");
        let tesseract = script(
            dir.path(),
            "tesseract",
            &format!(
                "if [ \"$1\" = --list-langs ]; then echo x >> '{}'; \
                 printf 'List of available languages in \"/t\" (3):\\nkor\\neng\\nosd\\n'; \
                 else printf 'read %s' \"$(cat \"$1\")\"; fi",
                listed.display()
            ),
        );
        let ocr = Ocr::choosing(tesseract, None, Limits::default(), announce);
        let x = OcrExtractor::new(ocr, Arc::new(Fixed("a text")));
        let stop = AtomicBool::new(false);
        // A document that needs no OCR never starts tesseract.
        assert_eq!(x.extract_noted("a.txt", b"text", &stop).unwrap().text, "a text");
        assert!(!listed.exists(), "tesseract was asked for its languages");
        // The first picture has them listed (English chosen of three), the next not again.
        for _ in 0..2 {
            let done = x.extract_noted("a.png", b"\x89PNG\r\n\x1a\nrest", &stop).unwrap();
            assert_eq!(done.note.as_deref(), Some("png image, OCR by tesseract (eng)"));
        }
        assert_eq!(std::fs::read_to_string(&listed).unwrap().lines().count(), 1);
        assert!(ANNOUNCED.lock().unwrap().iter().any(|a| a == "eng"));
    }

    #[test]
    fn a_choosing_ocr_that_finds_no_language_leaves_pictures_to_the_reader_it_wraps() {
        let dir = tempfile::tempdir().unwrap();
        let tesseract = script(
            dir.path(),
            "tesseract",
            "printf 'List of available languages in \"/t\" (1):\\nosd\\n'",
        );
        let ocr = Ocr::choosing(tesseract, None, Limits::default(), announce);
        let x = OcrExtractor::new(ocr, Arc::new(Fixed("as if OCR were off")));
        let done = x
            .extract_noted("a.png", b"\x89PNG\r\n\x1a\nrest", &AtomicBool::new(false))
            .unwrap();
        assert_eq!((done.text.as_str(), done.note), ("as if OCR were off", None));
        assert!(ANNOUNCED
            .lock()
            .unwrap()
            .iter()
            .any(|a| a == "none: tesseract lists no language"));
    }

    #[test]
    fn only_the_pages_without_a_word_are_read_and_the_note_says_how_many() {
        let dir = tempfile::tempdir().unwrap();
        let x = OcrExtractor::new(ocr(dir.path()), Arc::new(Fixed("first\x0c \x0cthird\x0c")));
        let done = x
            .extract_noted("a.pdf", b"%PDF-1.7 scan", &AtomicBool::new(false))
            .unwrap();
        assert_eq!(done.text, "first\x0cread page 2\x0cthird\x0cread page 4");
        assert_eq!(
            done.note.as_deref(),
            Some("OCR by tesseract (eng) on 2 of 4 pages")
        );

        let picture = b"\x89PNG\r\n\x1a\nrest";
        let done = x
            .extract_noted("a.png", picture, &AtomicBool::new(false))
            .unwrap();
        assert_eq!(done.text, format!("read {}", String::from_utf8_lossy(picture)));
        assert_eq!(done.note.as_deref(), Some("png image, OCR by tesseract (eng)"));

        // Not a PDF: the wrapped extractor's text, untouched.
        let done = x
            .extract_noted("a.txt", b"text", &AtomicBool::new(false))
            .unwrap();
        assert_eq!((done.text.as_str(), done.note), ("first\x0c \x0cthird\x0c", None));
    }

    #[test]
    fn a_raised_stop_flag_ends_before_the_next_page_and_a_failing_tool_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let x = OcrExtractor::new(ocr(dir.path()), Arc::new(Fixed(" \x0c ")));
        let err = x
            .extract_noted("a.pdf", b"%PDF-1.7", &AtomicBool::new(true))
            .unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err:?}");

        let broken = script(
            dir.path(),
            "broken",
            "echo 'Error during processing.' >&2; exit 1",
        );
        let ocr = Ocr::new(broken, None, vec!["eng".into()], Limits::default());
        let err = OcrExtractor::new(ocr, Arc::new(Fixed("")))
            .extract_noted("a.jpg", b"\xff\xd8\xff\xe0", &AtomicBool::new(false))
            .unwrap_err();
        assert!(
            err.to_string()
                .ends_with("exited with status 1 (Error during processing.)"),
            "{err}"
        );

        // In a PDF, a page OCR fails on keeps its text layer: the document is not lost.
        let failing = script(dir.path(), "failing", "exit 1");
        let pdftoppm = script(dir.path(), "pdftoppm", "printf 'page %s' \"$2\"");
        let ocr = Ocr::new(failing, Some(pdftoppm), vec!["eng".into()], Limits::default());
        let done = OcrExtractor::new(ocr, Arc::new(Fixed("first\x0c ")))
            .extract_noted("a.pdf", b"%PDF-1.7", &AtomicBool::new(false))
            .unwrap();
        assert_eq!(done.text, "first\x0c ");
        assert_eq!(
            done.note.as_deref(),
            Some("OCR by tesseract (eng) on 0 of 2 pages (1 failed)")
        );
    }
}
