//! XLSX and PPTX: Office Open XML zips whose text we stream out of their XML parts with
//! quick-xml, under the shared inflate budget of [`Container`].
//!
//! calamine reads XLSX well, but it inflates whole parts with no cap we can set and has no
//! way to stop early; the part of XLSX that carries text (shared strings, cell values) is
//! small enough to read directly, and reading it here keeps the same zip-bomb guard, stop
//! polling and output bound as the other containers.

use std::sync::atomic::AtomicBool;

use quick_xml::events::Event;

use super::odf::attr;
use super::zipped::{check_output, event_text, numbered_parts, Container};
use super::{ExtractError, Format};

const SHARED_STRINGS: &str = "xl/sharedStrings.xml";

/// Extracts every worksheet's cells, a row per line, cells separated by tabs and sheets by
/// a blank line, in the order of the sheets' part numbers.
pub(super) fn extract_xlsx(bytes: &[u8], max_inflated: u64, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut container = Container::open(bytes, Format::Xlsx, max_inflated)?;
    let shared = if container.has(SHARED_STRINGS) {
        shared_strings(&mut container, stop)?
    } else {
        Vec::new()
    };
    let sheets = numbered_parts(&container.names(), "xl/worksheets/sheet", ".xml");
    let mut out = String::new();
    for sheet in sheets {
        let mut cells = Sheet::new(&shared, &mut out);
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
            Event::Start(e) if e.local_name().as_ref() == b"t" => in_t = true,
            Event::Start(e) if e.local_name().as_ref() == b"rPh" => in_phonetic = true,
            Event::End(e) => match e.local_name().as_ref() {
                b"t" => in_t = false,
                b"rPh" => in_phonetic = false,
                b"si" => strings.push(std::mem::take(&mut current)),
                _ => {}
            },
            Event::Empty(e) if e.local_name().as_ref() == b"si" => strings.push(String::new()),
            _ if in_t && !in_phonetic => {
                if let Some(text) = event_text(&event, Format::Xlsx)? {
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
    shared: &'s [String],
    out: &'s mut String,
    /// The cell's `t` attribute: `s` (shared string index), `inlineStr`, or a literal type.
    kind: Option<String>,
    value: String,
    /// Inside `<v>` (the value) or an inline string's `<t>`.
    in_value: bool,
}

impl<'s> Sheet<'s> {
    fn new(shared: &'s [String], out: &'s mut String) -> Self {
        Self {
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
                b"c" => {
                    self.kind = attr(e, b"t");
                    self.value.clear();
                }
                b"v" | b"t" => self.in_value = true,
                _ => {}
            },
            Event::End(e) => match e.local_name().as_ref() {
                b"v" | b"t" => self.in_value = false,
                b"c" => self.end_cell(),
                b"row" => end_row(self.out),
                _ => {}
            },
            _ if self.in_value => {
                if let Some(text) = event_text(&event, Format::Xlsx)? {
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
pub(super) fn extract_pptx(bytes: &[u8], max_inflated: u64, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut container = Container::open(bytes, Format::Pptx, max_inflated)?;
    let slides = numbered_parts(&container.names(), "ppt/slides/slide", ".xml");
    let mut out = String::new();
    for slide in slides {
        let mut in_text = false;
        container.each_xml_event(&slide, stop, |event| {
            match &event {
                Event::Start(e) if e.local_name().as_ref() == b"t" => in_text = true,
                Event::End(e) if e.local_name().as_ref() == b"t" => in_text = false,
                Event::End(e) if e.local_name().as_ref() == b"p" => end_row(&mut out),
                Event::Empty(e) if e.local_name().as_ref() == b"br" => out.push('\n'),
                _ if in_text => {
                    if let Some(text) = event_text(&event, Format::Pptx)? {
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
