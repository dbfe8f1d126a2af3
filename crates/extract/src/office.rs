//! DOCX, XLSX and PPTX: text by office_oxide, behind our own zip checks.
//!
//! pdf_oxide depends on office_oxide whatever features are chosen, so every build with
//! PDF compiles a whole Office reader; this module uses it (the same version, compiled
//! once) instead of a second, hand-written one. It was chosen by measurement against the
//! streaming readers it replaced, on real and hostile packages (docs/DESIGN.md, "Why each
//! reader"): it reads the same files and more of their text (comments, text boxes, charts,
//! notes, dates and numbers as shown), and [`zipped::precheck`] refuses the bombs first.
//!
//! The price is memory: office_oxide holds a whole part and its parsed form, about five
//! times the part's inflated size, where the old reader streamed. The inflate budget
//! bounds it (4 x the input limit, so about 1.2 GB for a 64 MiB input); under the
//! isolated extractor a document that needs more fails at the child's memory limit.
//! The stop flag is polled between the pre-check's parts and before and after the parse,
//! not inside it (a 200 MiB part takes about 5 s).
//!
//! The title is the core properties' `<dc:title>` in `docProps/core.xml`, the author its
//! `<dc:creator>`, the date its `<dcterms:modified>` else `<dcterms:created>`, all read in
//! one pass by our own streaming reader (`zipped`'s inflate budget and entity refusal)
//! rather than through office_oxide, which would hold the whole part. Every producer we
//! know writes the core properties there; a package that puts them elsewhere (its root
//! relationships may) has none here. A package without the part, or with a broken one,
//! keeps its text and has no title, author or date.

use std::io::Cursor;
use std::sync::atomic::AtomicBool;

use office_oxide::options::ParseOptions;
use office_oxide::{Document, DocumentFormat};

use super::text::{Decoded, Meta};
use super::title;
use super::zipped::{check_output, precheck, Container};
use crate::detect::CFB_MAGIC;
use crate::stop::check_stop;
use leasehold::extract::{ExtractError, Format};

/// Where Office Open XML packages keep their core properties: title, author, dates.
const CORE_XML: &str = "docProps/core.xml";

/// The text of a DOCX, XLSX or PPTX; reads at most `max_inflated` bytes out of the zip
/// and writes at most as many bytes of text.
pub(super) fn extract(
    bytes: &[u8],
    format: Format,
    max_inflated: u64,
    stop: &AtomicBool,
) -> Result<Decoded, ExtractError> {
    let kind = match format {
        Format::Docx => DocumentFormat::Docx,
        Format::Xlsx => DocumentFormat::Xlsx,
        _ => DocumentFormat::Pptx,
    };
    if bytes.starts_with(CFB_MAGIC) {
        return Err(ExtractError::Unsupported {
            reason: format!("a password-protected (encrypted) {format} package: decryption is not supported"),
        });
    }
    precheck(bytes, format, max_inflated, stop)?;
    let mut options = ParseOptions::default();
    options.limits.package_bytes = max_inflated;
    options.limits.part_bytes = max_inflated;
    options.limits.text_chars = usize::try_from(max_inflated).unwrap_or(usize::MAX);
    let document = Document::from_reader_with(Cursor::new(bytes.to_vec()), kind, &options)
        .map_err(|e| ExtractError::malformed(format, e))?;
    check_stop(stop)?;
    let text = document.plain_text();
    check_stop(stop)?;
    // A text cut at office_oxide's budget carries a notice past it, so this refuses it.
    check_output(&text, max_inflated, format)?;
    let meta = title::lookup(core_properties(bytes, format, max_inflated, stop))?;
    Ok(Decoded::described(text.trim_end().to_owned(), meta))
}

/// The title, author (`dc:creator`), date (`dcterms:modified`, else `dcterms:created`) and
/// language in the package's core properties, and the page or slide count in its
/// extended properties, each part read in one pass. The pre-check has already held every
/// part to the budget and refused entities; the parts are read again under a budget of
/// their own.
fn core_properties(
    bytes: &[u8],
    format: Format,
    max_inflated: u64,
    stop: &AtomicBool,
) -> Result<Meta, ExtractError> {
    let mut container = Container::open(bytes, format, max_inflated)?;
    let core = container.metadata(CORE_XML, stop)?;
    let extended = container.metadata(APP_XML, stop)?;
    Ok(core.or(Meta {
        pages: extended.pages,
        ..Meta::default()
    }))
}

/// The package's extended properties, where Word counts pages and PowerPoint slides.
const APP_XML: &str = "docProps/app.xml";

#[cfg(test)]
pub(super) mod tests {
    use super::super::zipped::tests::zip_with;
    use super::*;

    const NO_LIMIT: u64 = u64::MAX;
    const REL: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
    const P: &str = "http://schemas.openxmlformats.org/presentationml/2006/main";
    const A: &str = "http://schemas.openxmlformats.org/drawingml/2006/main";
    const S: &str = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";

    fn types(overrides: &[(&str, &str)]) -> String {
        let parts: String = overrides
            .iter()
            .map(|(part, kind)| {
                format!(r#"<Override PartName="/{part}" ContentType="application/vnd.openxmlformats-officedocument.{kind}+xml"/>"#)
            })
            .collect();
        format!(
            r#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>{parts}</Types>"#
        )
    }

    fn rels(targets: &[(&str, &str)]) -> String {
        let list: String = targets
            .iter()
            .enumerate()
            .map(|(i, (kind, target))| {
                format!(
                    r#"<Relationship Id="rId{}" Type="{REL}/{kind}" Target="{target}"/>"#,
                    i + 1
                )
            })
            .collect();
        format!(
            r#"<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{list}</Relationships>"#
        )
    }

    /// A presentation of one text box per slide, each given as its paragraph XML.
    pub(in super::super) fn pptx_with(slides: &[Vec<u8>]) -> Vec<u8> {
        let names: Vec<String> = (1..=slides.len())
            .map(|i| format!("ppt/slides/slide{i}.xml"))
            .collect();
        let mut overrides = vec![("ppt/presentation.xml", "presentationml.presentation.main")];
        overrides.extend(names.iter().map(|n| (n.as_str(), "presentationml.slide")));
        let ids: String = (1..=slides.len())
            .map(|i| format!(r#"<p:sldId id="{}" r:id="rId{i}"/>"#, 255 + i))
            .collect();
        let presentation = format!(
            r#"<p:presentation xmlns:p="{P}" xmlns:r="{REL}"><p:sldIdLst>{ids}</p:sldIdLst></p:presentation>"#
        );
        let targets: Vec<String> = (1..=slides.len())
            .map(|i| format!("slides/slide{i}.xml"))
            .collect();
        let slide_rels: Vec<(&str, &str)> = targets.iter().map(|t| ("slide", t.as_str())).collect();
        let (types, root_rels, pres_rels) = (
            types(&overrides),
            rels(&[("officeDocument", "ppt/presentation.xml")]),
            rels(&slide_rels),
        );
        let mut files: Vec<(&str, &[u8])> = vec![
            ("[Content_Types].xml", types.as_bytes()),
            ("_rels/.rels", root_rels.as_bytes()),
            ("ppt/presentation.xml", presentation.as_bytes()),
            ("ppt/_rels/presentation.xml.rels", pres_rels.as_bytes()),
        ];
        files.extend(
            names
                .iter()
                .map(String::as_str)
                .zip(slides.iter().map(Vec::as_slice)),
        );
        zip_with(&files)
    }

    /// A slide with one text box holding `text`, then `padding`.
    pub(in super::super) fn slide(text: &str, padding: usize) -> Vec<u8> {
        let mut xml = format!(
            r#"<p:sld xmlns:p="{P}" xmlns:a="{A}"><p:cSld><p:spTree><p:sp><p:txBody><a:p><a:r><a:t>{text}</a:t></a:r></a:p></p:txBody></p:sp></p:spTree></p:cSld></p:sld>"#
        )
        .into_bytes();
        xml.extend(std::iter::repeat_n(b' ', padding));
        xml
    }

    /// A workbook whose one cell holds the date 2021-01-01 as Excel stores it: the
    /// serial 44197 in a cell styled with the built-in date format 14.
    fn dated_xlsx() -> Vec<u8> {
        let workbook = format!(
            r#"<workbook xmlns="{S}" xmlns:r="{REL}"><sheets><sheet name="Dates" sheetId="1" r:id="rId1"/></sheets></workbook>"#
        );
        let styles = format!(
            r#"<styleSheet xmlns="{S}"><cellXfs count="2"><xf numFmtId="0"/><xf numFmtId="14" applyNumberFormat="1"/></cellXfs></styleSheet>"#
        );
        let sheet = format!(
            r#"<worksheet xmlns="{S}"><sheetData><row r="1"><c r="A1" s="1"><v>44197</v></c></row></sheetData></worksheet>"#
        );
        let types = types(&[
            ("xl/workbook.xml", "spreadsheetml.sheet.main"),
            ("xl/worksheets/sheet1.xml", "spreadsheetml.worksheet"),
            ("xl/styles.xml", "spreadsheetml.styles"),
        ]);
        let root_rels = rels(&[("officeDocument", "xl/workbook.xml")]);
        let book_rels = rels(&[("worksheet", "worksheets/sheet1.xml"), ("styles", "styles.xml")]);
        zip_with(&[
            ("[Content_Types].xml", types.as_bytes()),
            ("_rels/.rels", root_rels.as_bytes()),
            ("xl/workbook.xml", workbook.as_bytes()),
            ("xl/_rels/workbook.xml.rels", book_rels.as_bytes()),
            ("xl/styles.xml", styles.as_bytes()),
            ("xl/worksheets/sheet1.xml", sheet.as_bytes()),
        ])
    }

    fn run(bytes: &[u8], format: Format) -> Result<String, ExtractError> {
        extract(bytes, format, NO_LIMIT, &AtomicBool::new(false)).map(|done| done.text)
    }

    /// A one-slide deck with `core` as its `docProps/core.xml`, added after the parts
    /// office_oxide reads.
    fn pptx_with_core(core: &[u8]) -> Vec<u8> {
        with_part(&pptx_with(&[slide("ivory pelican", 0)]), CORE_XML, core)
    }

    fn titled(bytes: &[u8]) -> Decoded {
        extract(bytes, Format::Pptx, NO_LIMIT, &AtomicBool::new(false)).unwrap()
    }

    const CORE_NS: &str = r#"xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/""#;

    #[test]
    fn the_title_is_the_core_properties_dc_title() {
        let core = format!(
            r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><cp:coreProperties {CORE_NS}><dc:creator>someone</dc:creator><dc:title>  Quarterly
            review &#8212; Q3</dc:title></cp:coreProperties>"#
        );
        let done = titled(&pptx_with_core(core.as_bytes()));
        assert_eq!(done.title.as_deref(), Some("Quarterly review \u{2014} Q3"));
        assert!(done.text.contains("ivory pelican"), "{:?}", done.text);
        // No core properties at all: no title.
        assert_eq!(titled(&pptx_with(&[slide("x", 0)])).title, None);
    }

    #[test]
    fn pages_are_the_extended_properties_slides_and_language_the_core_properties() {
        let core =
            format!(r#"<cp:coreProperties {CORE_NS}><dc:language>ko-KR</dc:language></cp:coreProperties>"#);
        let mut deck = pptx_with_core(core.as_bytes());
        let app = br#"<Properties xmlns="http://schemas.openxmlformats.org/officeDocument/2006/extended-properties"><Application>Microsoft Office PowerPoint</Application><TitlesOfParts/><Slides>7</Slides><Notes>0</Notes></Properties>"#;
        deck = with_part(&deck, APP_XML, app);
        let done = titled(&deck);
        assert_eq!((done.pages, done.language.as_deref()), (Some(7), Some("ko-KR")));
        assert!(done.text.contains("ivory pelican"), "{:?}", done.text);
    }

    /// `bytes` (a zip) with one more part.
    fn with_part(bytes: &[u8], name: &str, data: &[u8]) -> Vec<u8> {
        let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        for i in 0..archive.len() {
            let mut entry = archive.by_index(i).unwrap();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
            files.push((entry.name().unwrap().into_owned(), data));
        }
        files.push((name.to_owned(), data.to_vec()));
        let borrowed: Vec<(&str, &[u8])> = files.iter().map(|(n, d)| (n.as_str(), d.as_slice())).collect();
        zip_with(&borrowed)
    }

    const TERMS_NS: &str =
        r#"xmlns:dcterms="http://purl.org/dc/terms/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance""#;

    #[test]
    fn author_and_date_are_the_core_properties_creator_and_last_change() {
        let core = format!(
            r#"<cp:coreProperties {CORE_NS} {TERMS_NS}><dc:creator> Ana
            Ruiz &amp; co</dc:creator><dc:creator>second</dc:creator><cp:lastModifiedBy>Bo</cp:lastModifiedBy><dcterms:created xsi:type="dcterms:W3CDTF">2024-03-01T08:00:00Z</dcterms:created><dcterms:modified xsi:type="dcterms:W3CDTF">2026-01-15T09:30:00Z</dcterms:modified></cp:coreProperties>"#
        );
        let done = titled(&pptx_with_core(core.as_bytes()));
        assert_eq!(done.author.as_deref(), Some("Ana Ruiz & co"));
        assert_eq!(done.date.as_deref(), Some("2026-01-15"));
        assert!(done.text.contains("ivory pelican"), "{:?}", done.text);
        // No modified date, or a malformed one: the creation date.
        for modified in ["", "<dcterms:modified>last Tuesday</dcterms:modified>"] {
            let core = format!(
                r#"<cp:coreProperties {CORE_NS} {TERMS_NS}>{modified}<dcterms:created>2024-03-01T08:00:00Z</dcterms:created></cp:coreProperties>"#
            );
            let done = titled(&pptx_with_core(core.as_bytes()));
            assert_eq!((done.author, done.date.as_deref()), (None, Some("2024-03-01")));
        }
    }

    #[test]
    fn a_megabyte_creator_is_cut_and_a_megabyte_date_is_none() {
        let core = format!(
            r#"<cp:coreProperties {CORE_NS} {TERMS_NS}><dc:creator>{}</dc:creator><dcterms:modified>2026-01-15{}</dcterms:modified></cp:coreProperties>"#,
            "word ".repeat(220_000),
            "0".repeat(1 << 20)
        );
        let done = titled(&pptx_with_core(core.as_bytes()));
        assert_eq!(done.author.map(|a| a.chars().count()), Some(299));
        assert_eq!(done.date, None);
        assert!(done.text.contains("ivory pelican"), "{:?}", done.text);
    }

    #[test]
    fn a_malformed_core_xml_keeps_what_came_before_the_fault_and_the_text() {
        let core = format!(
            r#"<cp:coreProperties {CORE_NS} {TERMS_NS}><dc:creator>Ana</dc:creator><dcterms:modified>2026-01-15</dcterms:modified><dc:title>cut"#
        );
        let done = titled(&pptx_with_core(core.as_bytes()));
        assert_eq!(
            (done.title, done.author.as_deref(), done.date.as_deref()),
            (None, Some("Ana"), Some("2026-01-15"))
        );
        let core = format!(
            r#"<cp:coreProperties {CORE_NS}><dc:creator>&nosuch; Ana</dc:creator></cp:coreProperties>"#
        );
        let done = titled(&pptx_with_core(core.as_bytes()));
        assert_eq!(done.author, None);
        assert!(done.text.contains("ivory pelican"), "{:?}", done.text);
    }

    #[test]
    fn a_malformed_core_xml_is_no_title_and_the_text_still_extracts() {
        let broken: Vec<Vec<u8>> = vec![
            format!(r#"<cp:coreProperties {CORE_NS}><dc:title>half"#).into_bytes(),
            format!(r#"<cp:coreProperties {CORE_NS}><dc:title>a</dc:creator></cp:coreProperties>"#)
                .into_bytes(),
            format!(r#"<cp:coreProperties {CORE_NS}><dc:title>&unknown;</dc:title></cp:coreProperties>"#)
                .into_bytes(),
            format!(r#"<cp:coreProperties {CORE_NS}><dc:title>Untitled</dc:title></cp:coreProperties>"#)
                .into_bytes(),
            b"\x00\x01 binary junk, not XML <<<".to_vec(),
        ];
        for core in broken {
            let done = titled(&pptx_with_core(&core));
            assert_eq!(done.title, None, "{:?}", String::from_utf8_lossy(&core));
            assert!(done.text.contains("ivory pelican"), "{:?}", done.text);
        }
    }

    #[test]
    fn dates_read_as_excel_shows_them_with_the_sheet_name() {
        let text = run(&dated_xlsx(), Format::Xlsx).unwrap();
        assert!(text.contains("2021-01-01") && text.contains("Dates"), "{text:?}");
    }

    #[test]
    fn slides_in_the_presentation_order() {
        let bytes = pptx_with(&[slide("ivory", 0), slide("pelican", 0)]);
        let text = run(&bytes, Format::Pptx).unwrap();
        let (ivory, pelican) = (text.find("ivory").unwrap(), text.find("pelican").unwrap());
        assert!(ivory < pelican, "{text:?}");
    }

    #[test]
    fn declared_sizes_past_the_budget_are_refused_before_inflating() {
        let bytes = pptx_with(&[slide("ivory", 0), slide("pelican", 1 << 20)]);
        let err = extract(&bytes, Format::Pptx, 64 * 1024, &AtomicBool::new(false)).unwrap_err();
        assert!(
            err.to_string()
                .contains("slide2.xml inflates past the limit of 65536 bytes"),
            "{err}"
        );
    }

    #[test]
    fn an_encrypted_package_is_named_as_such() {
        let mut bytes = CFB_MAGIC.to_vec();
        bytes.resize(4096, 0);
        let err = run(&bytes, Format::Docx).unwrap_err();
        assert!(matches!(err, ExtractError::Unsupported { .. }), "{err:?}");
        assert!(err.to_string().contains("encrypted"), "{err}");
    }

    #[test]
    fn raised_stop_flag_stops_before_the_parse() {
        let bytes = pptx_with(&[slide("ivory", 0)]);
        let err = extract(&bytes, Format::Pptx, NO_LIMIT, &AtomicBool::new(true)).unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err:?}");
    }
}
