//! XLSX and PPTX: Office Open XML zips whose text we stream out of their XML parts with
//! quick-xml, under the shared inflate budget of [`Container`].
//!
//! calamine reads XLSX well, but it inflates whole parts with no cap we can set and has no
//! way to stop early; the part of XLSX that carries text (shared strings, cell values) is
//! small enough to read directly, and reading it here keeps the same zip-bomb guard, stop
//! polling and output bound as the other containers.

use std::sync::atomic::AtomicBool;

use std::collections::HashMap;

use quick_xml::events::{BytesStart, Event};
use quick_xml::XmlVersion;

use super::odf::attr;
use super::zipped::{check_output, event_text, numbered_parts, resolve, Container};
use super::{ExtractError, Format};

const SHARED_STRINGS: &str = "xl/sharedStrings.xml";

/// Extracts every worksheet's cells, a row per line, cells separated by tabs and sheets by
/// a blank line, in the order of the sheets' part numbers.
pub(super) fn extract_xlsx(
    bytes: &[u8],
    max_inflated: u64,
    stop: &AtomicBool,
) -> Result<String, ExtractError> {
    let mut container = Container::open(bytes, Format::Xlsx, max_inflated)?;
    let shared = if container.has(SHARED_STRINGS) {
        shared_strings(&mut container, stop)?
    } else {
        Vec::new()
    };
    let sheets = parts_in_order(
        &mut container,
        "xl/workbook.xml",
        "sheet",
        "xl/worksheets/sheet",
        stop,
    )?;
    let mut out = String::new();
    for sheet in sheets {
        let mut cells = Sheet::new(&sheet, &shared, &mut out);
        container.each_xml_event(&sheet, stop, |event| {
            cells.event(event)?;
            check_output(cells.out, max_inflated, Format::Xlsx)
        })?;
        end_section(&mut out);
    }
    out.truncate(out.trim_end().len());
    Ok(out)
}

/// The shared string table: cells of type `s` hold an index into it. Phonetic guides
/// (`<rPh>`, East Asian reading aids) are not part of the string's text.
fn shared_strings(container: &mut Container<'_>, stop: &AtomicBool) -> Result<Vec<String>, ExtractError> {
    let mut strings = Vec::new();
    let mut current = String::new();
    let (mut in_t, mut in_phonetic) = (false, false);
    container.each_xml_event(SHARED_STRINGS, stop, |event| {
        match &event {
            Event::Start(e) if e.local_name().as_ref() == "t" => in_t = true,
            Event::Start(e) if e.local_name().as_ref() == "rPh" => in_phonetic = true,
            Event::End(e) => match e.local_name().as_ref() {
                "t" => in_t = false,
                "rPh" => in_phonetic = false,
                "si" => strings.push(std::mem::take(&mut current)),
                _ => {}
            },
            Event::Empty(e) if e.local_name().as_ref() == "si" => strings.push(String::new()),
            _ if in_t && !in_phonetic => {
                if let Some(text) = event_text(&event, SHARED_STRINGS, Format::Xlsx)? {
                    current.push_str(&text);
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(strings)
}

/// One worksheet being read: the value of the current cell and where the text goes.
struct Sheet<'s> {
    /// The worksheet's part, for errors.
    part: &'s str,
    shared: &'s [String],
    out: &'s mut String,
    /// The cell's `t` attribute: `s` (shared string index), `inlineStr`, or a literal type.
    kind: Option<String>,
    value: String,
    /// Inside `<v>` (the value) or an inline string's `<t>`.
    in_value: bool,
}

impl<'s> Sheet<'s> {
    fn new(part: &'s str, shared: &'s [String], out: &'s mut String) -> Self {
        Self {
            part,
            shared,
            out,
            kind: None,
            value: String::new(),
            in_value: false,
        }
    }

    fn event(&mut self, event: Event<'_>) -> Result<(), ExtractError> {
        match &event {
            Event::Start(e) => match e.local_name().as_ref() {
                "c" => {
                    self.kind = attr(e, "t");
                    self.value.clear();
                }
                "v" | "t" => self.in_value = true,
                _ => {}
            },
            Event::End(e) => match e.local_name().as_ref() {
                "v" | "t" => self.in_value = false,
                "c" => self.end_cell(),
                "row" => end_row(self.out),
                _ => {}
            },
            _ if self.in_value => {
                if let Some(text) = event_text(&event, self.part, Format::Xlsx)? {
                    self.value.push_str(&text);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Writes the cell: a shared string is looked up, anything else is written as stored
    /// (numbers as decimal text, booleans as 0/1, formulas' cached results).
    fn end_cell(&mut self) {
        let text = match self.kind.as_deref() {
            Some("s") => self
                .value
                .trim()
                .parse::<usize>()
                .ok()
                .and_then(|i| self.shared.get(i))
                .map_or("", String::as_str),
            _ => self.value.as_str(),
        };
        if !text.is_empty() {
            self.out.push_str(text);
            self.out.push('\t');
        }
    }
}

/// Extracts every slide's text, a paragraph per line and slides separated by a blank line,
/// in slide-number order.
pub(super) fn extract_pptx(
    bytes: &[u8],
    max_inflated: u64,
    stop: &AtomicBool,
) -> Result<String, ExtractError> {
    let mut container = Container::open(bytes, Format::Pptx, max_inflated)?;
    let slides = parts_in_order(
        &mut container,
        "ppt/presentation.xml",
        "sldId",
        "ppt/slides/slide",
        stop,
    )?;
    let mut out = String::new();
    for slide in slides {
        let mut in_text = false;
        container.each_xml_event(&slide, stop, |event| {
            match &event {
                Event::Start(e) if e.local_name().as_ref() == "t" => in_text = true,
                Event::End(e) if e.local_name().as_ref() == "t" => in_text = false,
                Event::End(e) if e.local_name().as_ref() == "p" => end_row(&mut out),
                Event::Empty(e) if e.local_name().as_ref() == "br" => out.push('\n'),
                _ if in_text => {
                    if let Some(text) = event_text(&event, &slide, Format::Pptx)? {
                        out.push_str(&text);
                    }
                }
                _ => {}
            }
            check_output(&out, max_inflated, Format::Pptx)
        })?;
        end_section(&mut out);
    }
    out.truncate(out.trim_end().len());
    Ok(out)
}

/// The sheets or slides in the order the workbook or presentation lists them (`<sheet>`,
/// `<p:sldId>`, each naming its part by relationship id), which is the order a reader sees:
/// a moved slide keeps its part name. Falls back to the parts' numbers (`sheet2.xml`) when
/// the listing or its relationships are missing, as in some generated files.
fn parts_in_order(
    container: &mut Container<'_>,
    main: &str,
    element: &str,
    numbered_prefix: &str,
    stop: &AtomicBool,
) -> Result<Vec<String>, ExtractError> {
    let (dir, file) = main.rsplit_once('/').unwrap_or(("", main));
    let rels = format!("{dir}/_rels/{file}.rels");
    if container.has(main) && container.has(&rels) {
        let mut ids = Vec::new();
        container.each_xml_event(main, stop, |event| {
            if let Event::Start(e) | Event::Empty(e) = &event {
                if e.local_name().as_ref() == element {
                    ids.extend(relationship_id(e));
                }
            }
            Ok(())
        })?;
        let targets = relationship_targets(container, &rels, dir, stop)?;
        let listed: Vec<String> = ids.iter().filter_map(|id| targets.get(id).cloned()).collect();
        if !listed.is_empty() {
            return Ok(listed);
        }
    }
    Ok(numbered_parts(&container.names(), numbered_prefix, ".xml"))
}

/// The `r:id` attribute: by local name `id` with a prefix, since `<p:sldId>` also has an
/// unprefixed `id` that is not a relationship.
fn relationship_id(e: &BytesStart<'_>) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == "id" && a.key.prefix().is_some())
        .and_then(|a| {
            a.normalized_value(XmlVersion::Implicit1_0)
                .ok()
                .map(|v| v.into_owned())
        })
}

/// Relationship id to part path, for the relationships of a part in `dir`.
fn relationship_targets(
    container: &mut Container<'_>,
    rels: &str,
    dir: &str,
    stop: &AtomicBool,
) -> Result<HashMap<String, String>, ExtractError> {
    let mut targets = HashMap::new();
    container.each_xml_event(rels, stop, |event| {
        if let Event::Start(e) | Event::Empty(e) = &event {
            if e.local_name().as_ref() == "Relationship" && attr(e, "TargetMode").is_none() {
                if let (Some(id), Some(target)) = (attr(e, "Id"), attr(e, "Target")) {
                    // A target outside the archive is skipped: the parts' numbers still
                    // give an order.
                    targets.extend(resolve(dir, &target).ok().map(|path| (id, path)));
                }
            }
        }
        Ok(())
    })?;
    Ok(targets)
}

/// Ends a line, dropping the separator after its last cell; empty lines are not kept.
fn end_row(out: &mut String) {
    out.truncate(out.trim_end_matches(['\t', ' ']).len());
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
}

/// Separates sheets or slides by one blank line.
fn end_section(out: &mut String) {
    end_row(out);
    if !out.is_empty() && !out.ends_with("\n\n") {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::super::docx::tests::zip_with;
    use super::*;

    const NO_LIMIT: u64 = u64::MAX;

    fn sample(file: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/../../samples/formats/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    fn sheet(rows: &str) -> String {
        format!(
            r#"<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>{rows}</sheetData></worksheet>"#
        )
    }

    fn xlsx(shared: &str, sheets: &[(&str, String)]) -> Vec<u8> {
        let strings = format!(
            r#"<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">{shared}</sst>"#
        );
        let mut files = vec![
            ("xl/workbook.xml", b"<workbook/>".as_slice()),
            (SHARED_STRINGS, strings.as_bytes()),
        ];
        files.extend(sheets.iter().map(|(name, xml)| (*name, xml.as_bytes())));
        zip_with(&files)
    }

    #[test]
    fn samples_have_their_phrases() {
        let no_stop = AtomicBool::new(false);
        let ledger = extract_xlsx(&sample("ledger.xlsx"), NO_LIMIT, &no_stop).unwrap();
        assert_eq!(ledger, "name\tamount\nwalnut glacier\t42\n\nplain\t1.5");
        let deck = extract_pptx(&sample("deck.pptx"), NO_LIMIT, &no_stop).unwrap();
        assert!(deck.contains("ivory pelican"), "{deck:?}");
    }

    #[test]
    fn shared_inline_and_literal_cells_in_sheet_number_order() {
        let shared = "<si><t>walnut</t></si><si><r><t>gla</t></r><r><t>cier</t></r><rPh><t>reading</t></rPh></si><si/>";
        let first = sheet(
            r#"<row><c t="s"><v>0</v></c><c t="s"><v>1</v></c><c t="s"><v>2</v></c><c t="s"><v>99</v></c></row>
            <row><c t="inlineStr"><is><t>inline</t></is></c><c><v>3.5</v></c><c t="b"><v>1</v></c><c t="str"><f>A1</f><v>calc</v></c></row>"#,
        );
        let tenth = sheet(r#"<row><c t="inlineStr"><is><t>last</t></is></c></row>"#);
        let bytes = xlsx(
            shared,
            &[
                ("xl/worksheets/sheet10.xml", tenth),
                ("xl/worksheets/sheet2.xml", first),
            ],
        );
        let text = extract_xlsx(&bytes, NO_LIMIT, &AtomicBool::new(false)).unwrap();
        assert_eq!(text, "walnut\tglacier\ninline\t3.5\t1\tcalc\n\nlast");
    }

    #[test]
    fn repeated_shared_strings_cannot_blow_up_the_output() {
        let big = "w".repeat(64 * 1024);
        let cells = r#"<c t="s"><v>0</v></c>"#.repeat(200);
        let bytes = xlsx(
            &format!("<si><t>{big}</t></si>"),
            &[("xl/worksheets/sheet1.xml", sheet(&format!("<row>{cells}</row>")))],
        );
        let err = extract_xlsx(&bytes, 1024 * 1024, &AtomicBool::new(false)).unwrap_err();
        assert!(
            err.to_string().contains("extracted text passes the limit"),
            "{err}"
        );
    }

    #[test]
    fn slides_in_number_order_with_paragraphs_and_breaks() {
        let slide =
            |body: &str| format!(r#"<p:sld xmlns:a="a" xmlns:p="p"><p:txBody>{body}</p:txBody></p:sld>"#);
        let two = slide("<a:p><a:r><a:t>ivory</a:t></a:r><a:br/><a:r><a:t>pelican</a:t></a:r></a:p><a:p><a:r><a:t>x &amp; y</a:t></a:r></a:p>");
        let ten = slide("<a:p><a:r><a:t>ten</a:t></a:r></a:p>");
        let bytes = zip_with(&[
            ("ppt/presentation.xml", b"<p:presentation/>".as_slice()),
            ("ppt/slides/slide10.xml", ten.as_bytes()),
            ("ppt/slides/slide2.xml", two.as_bytes()),
            ("ppt/slides/_rels/slide2.xml.rels", b"<Relationships/>".as_slice()),
        ]);
        let text = extract_pptx(&bytes, NO_LIMIT, &AtomicBool::new(false)).unwrap();
        assert_eq!(text, "ivory\npelican\nx & y\n\nten");
    }

    #[test]
    fn the_presentation_listing_decides_the_order_over_part_numbers() {
        let slide = |word: &str| {
            format!(r#"<p:sld xmlns:a="a" xmlns:p="p"><a:p><a:r><a:t>{word}</a:t></a:r></a:p></p:sld>"#)
        };
        let (one, two) = (slide("one"), slide("two"));
        let presentation = br#"<p:presentation xmlns:p="p" xmlns:r="r"><p:sldIdLst><p:sldId id="257" r:id="rId9"/><p:sldId id="256" r:id="rId8"/></p:sldIdLst></p:presentation>"#;
        let rels = br#"<Relationships><Relationship Id="rId8" Target="slides/slide1.xml"/><Relationship Id="rId9" Target="/ppt/slides/slide2.xml"/><Relationship Id="rId1" Target="https://example.invalid" TargetMode="External"/></Relationships>"#;
        let bytes = zip_with(&[
            ("ppt/presentation.xml", presentation.as_slice()),
            ("ppt/_rels/presentation.xml.rels", rels.as_slice()),
            ("ppt/slides/slide1.xml", one.as_bytes()),
            ("ppt/slides/slide2.xml", two.as_bytes()),
        ]);
        let text = extract_pptx(&bytes, NO_LIMIT, &AtomicBool::new(false)).unwrap();
        assert_eq!(text, "two\n\none");
    }

    #[test]
    fn raised_stop_flag_stops_both() {
        let stop = AtomicBool::new(true);
        assert!(matches!(
            extract_xlsx(&sample("ledger.xlsx"), NO_LIMIT, &stop),
            Err(ExtractError::Stopped)
        ));
        assert!(matches!(
            extract_pptx(&sample("deck.pptx"), NO_LIMIT, &stop),
            Err(ExtractError::Stopped)
        ));
    }
}
