//! Text extraction: turns the bytes of a document into plain text.
//!
//! The worker pool hands each leased document to an [`Extractor`]. The built-in
//! [`ExtractorRegistry`] picks a [`Format`] from the content (magic bytes win, because file
//! names lie; zips are told apart by their entries) and the name's extension, then runs one
//! submodule per format. Text formats are decoded by BOM, declared charset, UTF-8 or
//! chardetng's guess, and [`ExtractorRegistry::extract_detailed`] reports which.
//!
//! The parsing is third-party wherever a well-kept crate fits (html5ever's tokenizer,
//! pulldown-cmark, quick-xml over zip, pdf_oxide, office_oxide); the RTF reader is our
//! own because no crate fits (see `rtf.rs`). This module adds the guards a long-running
//! service needs: an input size limit, one decompression budget per zip container, an
//! output bound, a cooperative stop flag (polled inside every loop of our own readers, and
//! between the steps of the third-party ones), and panic containment.
//!
//! # Layout
//! - `registry`: [`ExtractorRegistry`], the guards every reader runs inside;
//!   `detect`: which format a document is; `stop`: the stop flag's check.
//! - `text`: decoding and binary sniffing; `html`, `markdown`: the markup formats.
//! - `zipped`: opening zip containers, naming them, the inflate budget; `odf` (ODT, ODS,
//!   ODP) and `epub` read their parts; `office` hands DOCX, XLSX and PPTX to office_oxide
//!   after `zipped`'s checks.
//! - `rtf`, `pdf`: the remaining binary formats.
//! - `title`: what every format hands the document's own title to, which cleans and
//!   bounds it; a title that cannot be read is no title, never a failed document.
//! - `email`, `hwp`, `hwpx`, `ocr`: e-mail (attachments read through the
//!   registry), Hangul, pictures' text through tesseract; `command`: external
//!   converters; `isolated`: the child processes the formats run in.

mod command;
mod detect;
#[cfg(feature = "mail")]
mod email;
#[cfg(feature = "office")]
mod epub;
#[cfg(feature = "html")]
mod html;
#[cfg(feature = "hwp")]
mod hwp;
#[cfg(feature = "hwp")]
mod hwpx;
mod isolated;
#[cfg(feature = "markdown")]
mod markdown;
mod ocr;
#[cfg(feature = "office")]
mod odf;
#[cfg(feature = "office")]
mod office;
#[cfg(feature = "pdf")]
mod pdf;
mod registry;
mod rtf;
mod stop;
mod text;
mod title;
#[cfg(feature = "office")]
mod zipped;

pub use command::CommandExtractor;
pub use isolated::{child_main, IsolatedExtractor, CHILD_ARG};
pub use leasehold::extract::{
    ExtractError, Extracted, Extraction, Extractor, Format, Interruption, LimitKind, Limits,
};
pub use ocr::{Ocr, OcrExtractor};
pub use registry::ExtractorRegistry;

// The format tests need every format built in (the default features).
#[cfg(all(
    test,
    feature = "pdf",
    feature = "office",
    feature = "html",
    feature = "markdown",
    feature = "hwp",
    feature = "mail"
))]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::detect::{binary_format, extension, text_format};
    use super::registry::guard_panics;
    use super::*;

    /// Reads a file from the committed sample corpus.
    macro_rules! sample {
        ($path:literal) => {
            std::fs::read(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../samples/",
                $path
            ))
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

    /// The office and e-book samples: file under `samples/`, format, phrase. Made by real
    /// producers (odfpy, openpyxl, python-pptx, ebooklib, LibreOffice) with
    /// `tests/make_samples.py`.
    const CONTAINER_SAMPLES: [(&str, Format, &str); 10] = [
        ("formats/notes.odt", Format::Odt, "cobalt heron"),
        ("formats/inventory.ods", Format::Ods, "juniper anvil"),
        ("formats/slides.odp", Format::Odp, "marble falcon"),
        ("formats/book.epub", Format::Epub, "indigo compass"),
        ("formats/memo.rtf", Format::Rtf, "crimson tundra"),
        ("formats/ledger.xlsx", Format::Xlsx, "walnut glacier"),
        ("formats/deck.pptx", Format::Pptx, "ivory pelican"),
        ("letter.docx", Format::Docx, "silver meadow"),
        ("formats/weekly-report.hwp", Format::Hwp, "주간업무보고서"),
        ("formats/draft-form.hwpx", Format::Hwpx, "생산등록번호"),
    ];

    fn read_sample(file: &str) -> Vec<u8> {
        std::fs::read(format!("{}/../../samples/{file}", env!("CARGO_MANIFEST_DIR")))
            .expect("sample file is readable")
    }

    #[test]
    fn container_samples_have_their_phrases() {
        for (file, format, phrase) in CONTAINER_SAMPLES {
            assert_sample(file, &read_sample(file), format, phrase);
        }
    }

    /// Every sample and the title it gives itself: HTML's `<title>`, Markdown's first
    /// heading, the PDF's Info title, the core properties or `meta.xml` of the office
    /// files (set by `tests/make_samples.py`), the EPUB's `dc:title`. Plain text has no
    /// place for one, and the RTF (from LibreOffice) and python-pptx's template leave it out,
    /// as Naver's HWP form and the HWPX draft form do (their titles are empty); a
    /// message's is its subject.
    const SAMPLE_TITLES: [(&str, Option<&str>); 16] = [
        ("notes.txt", None),
        ("guide.md", Some("Brewing Guide")),
        ("nested/more.md", Some("Evening Reading")),
        ("page.html", Some("Harbor News")),
        ("report.pdf", Some("Quarterly Report")),
        ("letter.docx", Some("Letter")),
        ("formats/notes.odt", Some("Field notes: herons")),
        ("formats/inventory.ods", Some("Workshop inventory")),
        ("formats/slides.odp", Some("Falcon sightings \u{2013} 2026")),
        ("formats/book.epub", Some("Sample book")),
        ("formats/memo.rtf", None),
        ("formats/ledger.xlsx", Some("Walnut ledger")),
        ("formats/deck.pptx", Some("Quarterly review deck")),
        ("formats/weekly-report.hwp", None),
        ("formats/draft-form.hwpx", None),
        ("formats/fable.eml", Some("Die Hasen und die Frösche")),
    ];

    #[test]
    fn every_sample_reports_its_own_title() {
        let registry = ExtractorRegistry::default();
        let no_stop = AtomicBool::new(false);
        for (file, title) in SAMPLE_TITLES {
            let bytes = read_sample(file);
            let extraction = registry.extract_detailed(file, &bytes, &no_stop).unwrap();
            assert_eq!(extraction.title.as_deref(), title, "{file}");
            // The title reaches the pipeline's `Extracted` too, beside the text.
            let noted = registry.extract_noted(file, &bytes, &no_stop).unwrap();
            assert_eq!(noted.title.as_deref(), title, "{file}");
            assert_eq!(noted.text, extraction.text, "{file}");
        }
    }

    /// Every sample's author and date, as their producers wrote them: python-docx's and
    /// openpyxl's `dc:creator`, openpyxl's and python-pptx's template's `dcterms:modified`,
    /// ebooklib's `dcterms:modified`. odfpy, reportlab and the HTML, Markdown and
    /// LibreOffice's RTF (its zero dates) give none.
    const SAMPLE_META: [(&str, Option<&str>, Option<&str>); 13] = [
        ("notes.txt", None, None),
        ("guide.md", None, None),
        ("nested/more.md", None, None),
        ("page.html", None, None),
        ("report.pdf", None, None),
        ("letter.docx", Some("leasehold sample generator"), None),
        ("formats/notes.odt", None, None),
        ("formats/inventory.ods", None, None),
        ("formats/slides.odp", None, None),
        ("formats/book.epub", None, Some("2026-11-30")),
        ("formats/memo.rtf", None, None),
        ("formats/ledger.xlsx", Some("openpyxl"), Some("2026-12-03")),
        ("formats/deck.pptx", None, Some("2013-01-27")),
    ];

    #[test]
    fn every_sample_reports_its_own_author_and_date() {
        let registry = ExtractorRegistry::default();
        let no_stop = AtomicBool::new(false);
        for (file, author, date) in SAMPLE_META {
            let bytes = read_sample(file);
            let extraction = registry.extract_detailed(file, &bytes, &no_stop).unwrap();
            assert_eq!(extraction.author.as_deref(), author, "{file}");
            assert_eq!(extraction.date.as_deref(), date, "{file}");
            let noted = registry.extract_noted(file, &bytes, &no_stop).unwrap();
            assert_eq!(
                (noted.author, noted.date),
                (extraction.author, extraction.date),
                "{file}"
            );
        }
    }

    /// A DOCX whose text is "silver meadow" and whose `docProps/core.xml` is `core`.
    fn docx_with_core(core: &[u8]) -> Vec<u8> {
        zipped::tests::zip_with(&[
            ("[Content_Types].xml", br#"<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#.as_slice()),
            ("_rels/.rels", br#"<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#.as_slice()),
            ("word/document.xml", br#"<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>silver meadow</w:t></w:r></w:p></w:body></w:document>"#.as_slice()),
            ("docProps/core.xml", core),
        ])
    }

    /// Author and date from each format's own metadata, through the registry.
    #[test]
    fn authors_and_dates_in_every_format() {
        let core = br#"<cp:coreProperties xmlns:cp="c" xmlns:dc="d" xmlns:dcterms="t"><dc:creator>Ana Ruiz</dc:creator><dcterms:modified>2026-01-15T09:30:00Z</dcterms:modified></cp:coreProperties>"#;
        let docx = docx_with_core(core);
        let registry = ExtractorRegistry::default();
        let no_stop = AtomicBool::new(false);
        let cases: [(&str, &[u8], Option<&str>); 3] = [
            (
                "a.html",
                br#"<meta name="author" content="Ana Ruiz"><p>x</p>"#,
                None,
            ),
            (
                "a.rtf",
                b"{\\rtf1{\\info{\\author Ana Ruiz}{\\revtim\\yr2026\\mo1\\dy15}}x}",
                Some("2026-01-15"),
            ),
            ("a.docx", &docx, Some("2026-01-15")),
        ];
        for (name, bytes, date) in cases {
            let extraction = registry.extract_detailed(name, bytes, &no_stop).unwrap();
            assert_eq!(extraction.author.as_deref(), Some("Ana Ruiz"), "{name}");
            assert_eq!(extraction.date.as_deref(), date, "{name}");
        }
    }

    #[test]
    fn a_title_is_found_whatever_the_documents_name() {
        let registry = ExtractorRegistry::default();
        let bytes = read_sample("formats/notes.odt");
        let extraction = registry
            .extract_detailed("upload.bin", &bytes, &AtomicBool::new(false))
            .unwrap();
        assert_eq!(extraction.title.as_deref(), Some("Field notes: herons"));
    }

    /// A title that is no one line of text is cleaned on the way out, whatever the format.
    #[test]
    fn titles_are_cleaned_in_every_format() {
        let core = br#"<cp:coreProperties xmlns:cp="c" xmlns:dc="d"><dc:title>
            Two	lines &#9; and a bell</dc:title></cp:coreProperties>"#;
        let docx = docx_with_core(core);
        let registry = ExtractorRegistry::default();
        let no_stop = AtomicBool::new(false);
        let cases: [(&str, &[u8]); 4] = [
            ("a.html", b"<title>\n  Two\tlines &#7; and a bell \n</title>"),
            ("a.md", b"Two\tlines \x07 and a bell\n===\n"),
            (
                "a.rtf",
                b"{\\rtf1{\\info{\\title Two\\tab lines \\'07 and a bell}}x}",
            ),
            ("a.docx", &docx),
        ];
        for (name, bytes) in cases {
            let extraction = registry.extract_detailed(name, bytes, &no_stop).unwrap();
            assert_eq!(
                extraction.title.as_deref(),
                Some("Two lines and a bell"),
                "{name}: {:?}",
                extraction.text
            );
        }
    }

    #[test]
    fn container_samples_are_detected_without_or_with_a_wrong_extension() {
        let registry = ExtractorRegistry::default();
        for (file, format, phrase) in CONTAINER_SAMPLES {
            let bytes = read_sample(file);
            for name in [
                "upload",
                "upload.txt",
                "upload.docx",
                "upload.pdf",
                "dir.odt/blob",
            ] {
                let extraction = registry
                    .extract_detailed(name, &bytes, &AtomicBool::new(false))
                    .unwrap_or_else(|e| panic!("{file} as {name}: {e}"));
                assert_eq!(extraction.format, format, "{file} as {name}");
                assert!(extraction.text.contains(phrase), "{file} as {name}");
                assert_eq!(extraction.encoding, None, "{file}: the format fixes the encoding");
            }
        }
    }

    #[test]
    fn extract_detailed_records_format_and_encoding() {
        let registry = ExtractorRegistry::default();
        let run = |name: &str, bytes: &[u8]| {
            registry
                .extract_detailed(name, bytes, &AtomicBool::new(false))
                .unwrap()
        };
        let latin1 = run("notes.txt", b"amber lighthouse caf\xE9");
        assert_eq!(
            (latin1.format, latin1.encoding),
            (Format::PlainText, Some("windows-1252"))
        );
        assert_eq!(latin1.text, "amber lighthouse caf\u{e9}");
        let utf8 = run("guide.md", "# caf\u{e9}".as_bytes());
        assert_eq!((utf8.format, utf8.encoding), (Format::Markdown, Some("UTF-8")));
        let pdf = run("r.pdf", &sample!("report.pdf"));
        assert_eq!((pdf.format, pdf.encoding), (Format::Pdf, None));
        let empty = run("a.docx", b"");
        assert_eq!((empty.format, empty.text.as_str()), (Format::Docx, ""));
    }

    #[test]
    fn containers_share_one_inflate_budget_and_bound_their_output() {
        // Two parts, each under the budget alone but over it together.
        let slide = |text: &str| office::tests::slide(text, 40 * 1024);
        let bytes = office::tests::pptx_with(&[slide("ivory"), slide("pelican")]);
        let small = ExtractorRegistry::new(16 * 1024); // inflate budget 64 KiB
        match extract_with(&small, "deck.pptx", &bytes) {
            Err(ExtractError::Malformed {
                format: Format::Pptx,
                reason,
            }) => {
                assert!(
                    reason.contains("slide2.xml") && reason.contains("limit"),
                    "{reason}"
                )
            }
            other => panic!("expected the budget to run out on slide 2, got {other:?}"),
        }
        let text = extract("deck.pptx", &bytes).unwrap();
        assert!(text.contains("ivory") && text.contains("pelican"), "{text:?}");
    }

    /// The start of a "billion laughs": entities that expand to ten of the one before.
    const LAUGHS: &str = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;"><!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">]>"#;

    #[test]
    fn entity_bombs_fail_alike_in_every_container() {
        let laughs = |root: &str| format!("{LAUGHS}{root}").into_bytes();
        let cases = [
            (
                Format::Docx,
                "word/document.xml",
                zipped::tests::zip_with(&[(
                    "word/document.xml",
                    &laughs("<w:document><w:t>&lol2;</w:t></w:document>"),
                )]),
            ),
            (
                Format::Odt,
                "content.xml",
                zipped::tests::zip_with(&[
                    ("mimetype", b"application/vnd.oasis.opendocument.text".as_slice()),
                    (
                        "content.xml",
                        &laughs("<office:document-content><text:p>&lol2;</text:p></office:document-content>"),
                    ),
                ]),
            ),
            (
                Format::Xlsx,
                "xl/sharedStrings.xml",
                zipped::tests::zip_with(&[
                    ("xl/workbook.xml", b"<workbook/>".as_slice()),
                    (
                        "xl/sharedStrings.xml",
                        &laughs("<sst><si><t>&lol2;</t></si></sst>"),
                    ),
                ]),
            ),
            (
                Format::Pptx,
                "ppt/slides/slide1.xml",
                zipped::tests::zip_with(&[
                    ("ppt/presentation.xml", b"<p:presentation/>".as_slice()),
                    (
                        "ppt/slides/slide1.xml",
                        &laughs("<p:sld><a:t>&lol2;</a:t></p:sld>"),
                    ),
                ]),
            ),
            (
                Format::Epub,
                "META-INF/container.xml",
                zipped::tests::zip_with(&[
                    ("mimetype", b"application/epub+zip".as_slice()),
                    (
                        "META-INF/container.xml",
                        &laughs(r#"<container><rootfile full-path="&lol2;"/></container>"#),
                    ),
                ]),
            ),
        ];
        for (format, part, bytes) in cases {
            let err = extract("upload", &bytes).unwrap_err();
            assert!(err.is_permanent());
            assert_eq!(
                err.to_string(),
                format!("malformed {format} document: {part} declares entities in its DOCTYPE (refused: entity expansion)")
            );
        }
    }

    #[test]
    fn a_doctype_without_entities_is_read() {
        let opf = br#"<?xml version="1.0"?><!DOCTYPE package PUBLIC "+//ISBN 0-9673008-1-9//DTD OEB 1.2 Package//EN" "http://openebook.org/dtds/oeb-1.2/oebpkg12.dtd"><package><manifest><item id="c" href="c.html" media-type="text/html"/></manifest><spine><itemref idref="c"/></spine></package>"#;
        let bytes = zipped::tests::zip_with(&[
            ("mimetype", b"application/epub+zip".as_slice()),
            (
                "META-INF/container.xml",
                br#"<container><rootfile full-path="book.opf"/></container>"#.as_slice(),
            ),
            ("book.opf", opf.as_slice()),
            ("c.html", b"<p>indigo compass</p>".as_slice()),
        ]);
        assert_eq!(extract("old.epub", &bytes).unwrap(), "indigo compass");
    }

    #[test]
    fn non_document_zips_and_rtf_magic() {
        let registry = ExtractorRegistry::default();
        let zip = zipped::tests::zip_with(&[("mimetype", b"application/x-other".as_slice())]);
        assert!(matches!(
            registry.detect("a.zip", &zip),
            Err(ExtractError::Unsupported { .. })
        ));
        assert_eq!(registry.detect("named.ods", &zip).unwrap(), Format::Ods);
        assert!(matches!(
            extract("named.ods", &zip),
            Err(ExtractError::Malformed {
                format: Format::Ods,
                ..
            })
        ));
        assert_eq!(registry.detect("memo.txt", b"{\\rtf1 hi}").unwrap(), Format::Rtf);
        assert_eq!(registry.detect("memo.rtf", b"plain").unwrap(), Format::Rtf);
        assert!(matches!(
            extract("memo.rtf", b"plain"),
            Err(ExtractError::Malformed {
                format: Format::Rtf,
                ..
            })
        ));
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
        let controls: Vec<u8> = (1u8..32).cycle().take(256).collect();
        for (name, bytes) in [("noext", &controls[..]), ("notes.txt", &controls[..])] {
            let err = extract(name, bytes).unwrap_err();
            assert!(matches!(err, ExtractError::Unsupported { .. }), "{name}: {err:?}");
            assert!(err.is_permanent());
        }
    }

    /// A picture by its magic, whatever its name, has no text of its own (OCR reads
    /// it: `ocr.rs`); a file named as a picture that is none is malformed.
    #[test]
    fn pictures_have_no_text_of_their_own_and_a_false_one_is_malformed() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01";
        let webp = b"RIFF\x24\0\0\0WEBPVP8 ";
        for (name, bytes) in [
            ("image.png", &png[..]),
            ("notes.txt", &png[..]),
            ("photo.jpg", &b"\xff\xd8\xff\xe0\0\x10JFIF"[..]),
            ("scan.tif", &b"II*\0\x08\0\0\0"[..]),
            ("fax.tiff", &b"MM\0*\0\0\0\x08"[..]),
            ("pic.webp", &webp[..]),
            ("anim.gif", &b"GIF89a\x01\0\x01\0"[..]),
        ] {
            let registry = ExtractorRegistry::default();
            let got = registry
                .extract_detailed(name, bytes, &AtomicBool::new(false))
                .unwrap();
            assert_eq!((got.format, got.text.as_str()), (Format::Image, ""), "{name}");
        }
        let err = extract("holiday.jpg", b"not a picture at all").unwrap_err();
        assert!(
            matches!(
                err,
                ExtractError::Malformed {
                    format: Format::Image,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn plain_zip_is_unsupported_but_named_docx_is_malformed() {
        let zip = zipped::tests::zip_with(&[("readme.txt", b"hello".as_slice())]);
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
    fn every_format_is_read_back_from_its_name() {
        let names: std::collections::HashSet<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
        assert_eq!(names.len(), Format::ALL.len(), "names are distinct");
        for format in Format::ALL {
            assert_eq!(Format::from_name(format.as_str()), Some(format));
        }
        // Every variant is listed: each one's own extension or zip maps into the list.
        for ext in ["pdf", "docx", "odt", "ods", "odp", "epub", "rtf", "xlsx", "pptx"] {
            assert!(Format::ALL.contains(&binary_format(ext).unwrap()), "{ext}");
        }
        for ext in ["txt", "md", "html"] {
            assert!(Format::ALL.contains(&text_format(Some(ext)).unwrap()), "{ext}");
        }
        assert_eq!(Format::from_name("docx "), None);
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
