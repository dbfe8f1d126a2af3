//! A document's title crosses the isolated extractor's process boundary: the
//! child (the built binary) sends it in its reply's header, and the parent
//! hands it on in `Extracted::title`, the same as the in-process registry's.
//! Children need unix (`isolated`); elsewhere every document is `Unavailable`.
#![cfg_attr(not(unix), allow(dead_code, unused_imports))]

use std::sync::atomic::AtomicBool;

use leasehold_extract::{Extracted, Extractor, ExtractorRegistry, IsolatedExtractor, Limits};

use crate::common::BIN;

/// The isolated extractor with the built binary as its child, as `run` has it.
fn extractor() -> IsolatedExtractor {
    IsolatedExtractor::new(std::path::PathBuf::from(BIN), Limits::default())
}

fn extract(extractor: &dyn Extractor, name: &str, bytes: &[u8]) -> Extracted {
    extractor
        .extract_noted(name, bytes, &AtomicBool::new(false))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn read(path: &str) -> Vec<u8> {
    let full = crate::common::workspace().join(path);
    std::fs::read(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
#[cfg(unix)]
fn titles_cross_the_process_boundary() {
    let isolated = extractor();
    let page = b"<html><head><title>Harbor\n  News &amp; Notes</title></head><body><p>velvet harbor</p></body></html>";
    let done = extract(&isolated, "page.html", page);
    assert_eq!(done.title.as_deref(), Some("Harbor News & Notes"));
    assert_eq!(done.text, "velvet harbor");
    assert_eq!(done.note.as_deref(), Some("html, encoding UTF-8"));
    // The same child serves the next document, which has no title: none is left over.
    let done = extract(&isolated, "notes.txt", b"amber lighthouse");
    assert_eq!((done.title, done.text.as_str()), (None, "amber lighthouse"));
    assert_eq!(isolated.idle_children(), 1, "one child served both");
    // Beyond ASCII, through the JSON header: a PDF's UTF-16 Info title.
    let done = extract(&isolated, "tides.pdf", &read("tests/fixtures/tides.pdf"));
    assert_eq!(
        done.title.as_deref(),
        Some("Tides of the \u{c5}land sea \u{2013} \u{6f6e}\u{6c50}")
    );
    // A megabyte title arrives cut to one line of at most 300 characters.
    let long = format!("<title>{}</title><p>x</p>", "tide ".repeat(220_000));
    let done = extract(&isolated, "long.html", long.as_bytes());
    assert_eq!(done.title.map(|t| t.chars().count()), Some(299));
}

#[test]
#[cfg(unix)]
fn isolated_and_in_process_extractions_agree_on_every_sample() {
    let isolated = extractor();
    let registry = ExtractorRegistry::default();
    for file in [
        "samples/notes.txt",
        "samples/guide.md",
        "samples/page.html",
        "samples/report.pdf",
        "samples/letter.docx",
        "samples/formats/notes.odt",
        "samples/formats/inventory.ods",
        "samples/formats/slides.odp",
        "samples/formats/book.epub",
        "samples/formats/memo.rtf",
        "samples/formats/ledger.xlsx",
        "samples/formats/deck.pptx",
    ] {
        let bytes = read(file);
        let there = extract(&isolated, file, &bytes);
        let here = extract(&registry, file, &bytes);
        assert_eq!(there, here, "{file}");
    }
    let titled = read("samples/letter.docx");
    assert_eq!(
        extract(&isolated, "letter.docx", &titled).title.as_deref(),
        Some("Letter")
    );
}

#[test]
#[cfg(unix)]
fn authors_and_dates_cross_the_process_boundary() {
    let isolated = extractor();
    // The sample workbook's core properties: openpyxl as creator, its modified date.
    let done = extract(&isolated, "ledger.xlsx", &read("samples/formats/ledger.xlsx"));
    assert_eq!(done.author.as_deref(), Some("openpyxl"));
    assert_eq!(done.date.as_deref(), Some("2026-12-03"));
    let rtf = b"{\\rtf1{\\info{\\author Ana \\u201? Ruiz}{\\revtim\\yr2026\\mo1\\dy15}}crimson}";
    let done = extract(&isolated, "memo.rtf", rtf);
    assert_eq!(done.author.as_deref(), Some("Ana \u{c9} Ruiz"));
    assert_eq!(done.date.as_deref(), Some("2026-01-15"));
    assert_eq!(done.text, "crimson");
    // The same child serves the next document, which has neither: none is left over.
    let done = extract(&isolated, "notes.txt", b"amber lighthouse");
    assert_eq!((done.author, done.date), (None, None));
    // A megabyte author arrives cut to one line of at most 300 characters.
    let long = format!(
        r#"<meta name="author" content="{}"><p>x</p>"#,
        "tide ".repeat(220_000)
    );
    let done = extract(&isolated, "long.html", long.as_bytes());
    assert_eq!(done.author.map(|a| a.chars().count()), Some(299));
}

/// Page counts and languages, as real producers write them, cross the process boundary:
/// a PDF printed by Chromium (its catalog's `/Lang`, one page), a PDF joined by poppler's
/// `pdfunite` (two pages, no language), a Korean public body's HWPX (`<opf:language>`),
/// an e-book (`dc:language`) and a page's `<html lang>`.
#[test]
#[cfg(unix)]
fn page_counts_and_languages_cross_the_process_boundary() {
    let isolated = extractor();
    let registry = ExtractorRegistry::default();
    for (file, pages, language) in [
        ("tests/fixtures/korean-notice.pdf", Some(1), Some("ko")),
        ("tests/fixtures/scanned-page.pdf", Some(2), None),
        ("samples/formats/draft-form.hwpx", None, Some("ko")),
        ("samples/formats/book.epub", None, Some("en")),
        ("samples/page.html", None, Some("en")),
        ("samples/notes.txt", None, None),
    ] {
        let bytes = read(file);
        let there = extract(&isolated, file, &bytes);
        assert_eq!(
            (there.pages, there.language.as_deref()),
            (pages, language),
            "{file}"
        );
        assert_eq!(there, extract(&registry, file, &bytes), "{file}");
    }
}

/// What a document says of its pages and language is kept with its result:
/// `inspect` shows it and `inspect --json` carries it.
#[test]
#[cfg(unix)]
fn the_page_count_and_language_are_kept_and_shown() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("notice.pdf"), read("tests/fixtures/korean-notice.pdf")).unwrap();
    let data = dir.path().join("data");
    let run = crate::common::leasehold(&data, &["run", docs.to_str().unwrap()]);
    assert!(run.status.success(), "{run:?}");
    let shown = crate::common::leasehold(&data, &["inspect", "notice.pdf"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("  title 주간 업무 보고\n"), "{shown}");
    assert!(shown.contains("  pages 1\n  language ko\n"), "{shown}");
    let json = crate::common::leasehold(&data, &["inspect", "notice.pdf", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        (&json["job"]["pages"], &json["job"]["language"]),
        (&1.into(), &"ko".into())
    );
}
