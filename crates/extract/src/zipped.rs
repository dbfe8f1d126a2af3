//! The zip containers (DOCX, XLSX, PPTX, ODF, EPUB): opening them, telling them apart by
//! their entries, and reading their parts under one inflate budget.
//!
//! A zip's declared sizes are written by whoever made the file, so they prove nothing: the
//! budget counts the bytes that actually come out of the decompressor, summed over every
//! part a document reads, and stops at the first byte past it. A zip bomb therefore costs
//! at most the budget in CPU, and the streaming XML readers keep memory far below it.

use std::fmt;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::sync::atomic::AtomicBool;

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};
use zip::result::ZipError;
use zip::ZipArchive;

use super::text::Meta;
use super::title::{clean_language, DateText, TitleText};
use crate::stop::check_stop;
use leasehold::extract::{ExtractError, Format};

/// Names the zip-based format from the entries, or `None` for any other zip. ODF and EPUB
/// say what they are in a stored `mimetype` entry; the Office Open XML formats are known by
/// their main part.
pub(super) fn detect(bytes: &[u8]) -> Option<Format> {
    let mut archive = ZipArchive::new(Cursor::new(bytes)).ok()?;
    if let Some(format) = mimetype(&mut archive).as_deref().and_then(format_for_mimetype) {
        return Some(format);
    }
    let has = |name: &str| archive.index_for_name(name).is_some();
    if has("word/document.xml") {
        Some(Format::Docx)
    } else if has("xl/workbook.xml") {
        Some(Format::Xlsx)
    } else if has("ppt/presentation.xml") {
        Some(Format::Pptx)
    } else {
        None
    }
}

/// The `mimetype` entry's content: short by specification, so only its first bytes are read.
fn mimetype(archive: &mut ZipArchive<Cursor<&[u8]>>) -> Option<String> {
    let entry = archive.by_name("mimetype").ok()?;
    let mut head = String::new();
    entry.take(128).read_to_string(&mut head).ok()?;
    Some(head.trim().to_owned())
}

/// ODF templates (`.ott`...) hold the same content as documents, so they share a format.
fn format_for_mimetype(mimetype: &str) -> Option<Format> {
    let kind = mimetype.strip_prefix("application/vnd.oasis.opendocument.");
    match kind.map(|k| k.trim_end_matches("-template")) {
        Some("text") => Some(Format::Odt),
        Some("spreadsheet") => Some(Format::Ods),
        Some("presentation") => Some(Format::Odp),
        _ if mimetype == "application/epub+zip" => Some(Format::Epub),
        _ if mimetype == "application/hwp+zip" => Some(Format::Hwpx),
        _ => None,
    }
}

/// An opened container with what is left of its inflate budget.
pub(super) struct Container<'a> {
    archive: ZipArchive<Cursor<&'a [u8]>>,
    format: Format,
    budget: u64,
    limit: u64,
}

impl<'a> Container<'a> {
    /// Opens `bytes` as a zip; `max_inflated` bounds the total of all parts read.
    pub(super) fn open(bytes: &'a [u8], format: Format, max_inflated: u64) -> Result<Self, ExtractError> {
        let archive = ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| ExtractError::malformed(format, format!("not a readable zip archive: {e}")))?;
        Ok(Self {
            archive,
            format,
            budget: max_inflated,
            limit: max_inflated,
        })
    }

    pub(super) fn malformed(&self, reason: impl fmt::Display) -> ExtractError {
        ExtractError::malformed(self.format, reason)
    }

    /// Entry names, in the archive's order; a name that does not decode cannot be asked
    /// for by name either, so it is left out.
    pub(super) fn names(&self) -> Vec<String> {
        self.archive
            .file_names()
            .filter_map(|name| name.ok().map(|n| n.into_owned()))
            .collect()
    }

    /// The part `href` names, resolved against `base` ([`resolve`]), or `Malformed` saying
    /// which part named what: a path that climbs out of the archive is refused as such
    /// rather than looked up and reported missing.
    pub(super) fn resolve(&self, base: &str, href: &str, named_in: &str) -> Result<String, ExtractError> {
        resolve(base, href).map_err(|bad| self.malformed(format!("{named_in} names {href:?}, {bad}")))
    }

    /// Runs `read` on the inflated bytes of one part, charging them to the budget. A part
    /// that runs past the budget is `Malformed` whatever `read` made of the truncated data.
    pub(super) fn with_part<T>(
        &mut self,
        name: &str,
        read: impl FnOnce(&mut dyn BufRead) -> Result<T, ExtractError>,
    ) -> Result<T, ExtractError> {
        let format = self.format;
        let entry = self.archive.by_name(name).map_err(|e| match e {
            ZipError::FileNotFound => ExtractError::malformed(format, format!("zip archive has no {name}")),
            e => ExtractError::malformed(format, format!("cannot open {name}: {e}")),
        })?;
        let mut capped = BufReader::new(Capped::new(entry, self.budget));
        let result = read(&mut capped);
        let capped = capped.into_inner();
        if capped.exceeded() {
            let limit = self.limit;
            return Err(ExtractError::malformed(
                format,
                format!("{name} inflates past the limit of {limit} bytes"),
            ));
        }
        self.budget = capped.remaining;
        result
    }

    /// Reads a whole part as text (UTF-8, as every XML part and EPUB chapter we read is
    /// required to be; stray bad bytes become U+FFFD).
    pub(super) fn read_string(&mut self, name: &str) -> Result<String, ExtractError> {
        let format = self.format;
        self.with_part(name, |reader| {
            let mut bytes = Vec::new();
            reader
                .read_to_end(&mut bytes)
                .map_err(|e| ExtractError::malformed(format, format!("cannot read {name}: {e}")))?;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        })
    }

    /// Reads one XML part up to its root element, refusing a DOCTYPE that declares
    /// entities; a part that is not XML is left to the reader that needs it.
    fn check_prolog(&mut self, name: &str) -> Result<(), ExtractError> {
        let format = self.format;
        self.with_part(name, |input| {
            let mut reader = Reader::from_reader(input);
            let mut buf = Vec::new();
            loop {
                match reader.read_event_into(&mut buf) {
                    Ok(Event::DocType(doctype)) => refuse_entities(&doctype, name, format)?,
                    Ok(Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::Text(_)) => {}
                    _ => return Ok(()),
                }
                buf.clear();
            }
        })
    }

    /// Streams one XML part, calling `on_event` for each event and polling `stop` between
    /// events, so a long part does not keep a worker busy after its lease is gone. Every
    /// XML part of every container is read here, so this is where entity declarations are
    /// refused ([`refuse_entities`]).
    pub(super) fn each_xml_event(
        &mut self,
        name: &str,
        stop: &AtomicBool,
        mut on_event: impl FnMut(Event<'_>) -> Result<(), ExtractError>,
    ) -> Result<(), ExtractError> {
        let format = self.format;
        self.with_part(name, |input| {
            let mut reader = Reader::from_reader(input);
            let mut buf = Vec::new();
            loop {
                check_stop(stop)?;
                let event = reader
                    .read_event_into(&mut buf)
                    .map_err(|e| ExtractError::malformed(format, format!("invalid XML in {name}: {e}")))?;
                match event {
                    Event::Eof => return Ok(()),
                    Event::DocType(doctype) => refuse_entities(&doctype, name, format)?,
                    event => on_event(event)?,
                }
                buf.clear();
            }
        })
    }

    /// What the metadata part `name` (ODF's `meta.xml`, OOXML's `docProps/core.xml`)
    /// says of the document: its title, author and date ([`MetaReader`]). The part is read
    /// under the same budget and rules as every other; a failure part-way (bad XML, the
    /// budget, no such part) keeps the fields read whole before it, since none of them
    /// depends on what follows, and costs the document nothing else.
    pub(super) fn metadata(&mut self, name: &str, stop: &AtomicBool) -> Result<Meta, ExtractError> {
        let format = self.format;
        let mut meta = MetaReader::default();
        let read = self.each_xml_event(name, stop, |event| {
            meta.event(&event, name, format);
            Ok(())
        });
        match read {
            Err(ExtractError::Stopped) => Err(ExtractError::Stopped),
            _ => Ok(meta.finish()),
        }
    }
}

/// The metadata elements a document describes itself with, by local name (any prefix, any
/// ASCII case), as Dublin Core and the formats' own vocabularies write them in ODF's
/// `meta.xml`, OOXML's `core.xml`, EPUB's package document and HWPX's `content.hpf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// `dc:title` (and old OEB packages' `dc:Title`).
    Title,
    /// ODF's `meta:initial-creator`: who wrote it, before `dc:creator` (who saved it last).
    InitialCreator,
    /// `dc:creator`, HWPX's `<opf:meta name="creator">`.
    Creator,
    /// OOXML's `dcterms:modified`, EPUB 3's `<meta property="dcterms:modified">`, HWPX's
    /// `<opf:meta name="ModifiedDate">`.
    Modified,
    /// `dc:date`: ODF's last save, EPUB's publication.
    Date,
    /// OOXML's `dcterms:created`, ODF's `meta:creation-date`, HWPX's
    /// `<opf:meta name="CreatedDate">`.
    Created,
    /// `dc:language`.
    Language,
    /// OOXML's extended properties (`docProps/app.xml`): `Pages` (a word
    /// processor's count), `Slides` (a deck's).
    Pages,
}

const FIELDS: usize = 8;

impl Field {
    fn of(e: &BytesStart<'_>) -> Option<Field> {
        let name = e.local_name();
        let local: &str = name.into_inner();
        let is = |wanted: &str| local.eq_ignore_ascii_case(wanted);
        Some(if is("title") {
            Field::Title
        } else if is("initial-creator") {
            Field::InitialCreator
        } else if is("creator") {
            Field::Creator
        } else if is("modified") {
            Field::Modified
        } else if is("date") {
            Field::Date
        } else if is("created") || is("creation-date") {
            Field::Created
        } else if is("language") {
            Field::Language
        } else if is("pages") || is("slides") {
            Field::Pages
        } else if is("meta") {
            Self::of_meta(e)?
        } else {
            return None;
        })
    }

    /// A `<meta>` element that names a field: EPUB 3's by `property`, HWPX's by `name`.
    fn of_meta(e: &BytesStart<'_>) -> Option<Field> {
        if attr(e, "property").is_some_and(|p| p.trim() == "dcterms:modified") {
            return Some(Field::Modified);
        }
        match attr(e, "name")?.trim() {
            "creator" => Some(Field::Creator),
            "ModifiedDate" => Some(Field::Modified),
            "CreatedDate" => Some(Field::Created),
            _ => None,
        }
    }

    fn is_date(self) -> bool {
        matches!(self, Field::Modified | Field::Date | Field::Created)
    }
}

/// The text of one field's first element, bounded as it arrives: words for a title or an
/// author, raw text for a date.
#[derive(Debug)]
enum FieldText {
    Words(TitleText),
    Date(DateText),
}

/// One field: its first element only (an EPUB's first `dc:creator` is its main author).
#[derive(Debug, Default)]
struct Slot {
    /// The element has been read whole (or could not be): later ones are ignored.
    done: bool,
    /// Its text could not be read (an unknown entity), or it held markup: no value.
    broken: bool,
    text: Option<FieldText>,
}

impl Slot {
    fn push(&mut self, text: &str) {
        match &mut self.text {
            Some(FieldText::Words(words)) => words.push_str(text),
            Some(FieldText::Date(date)) => date.push_str(text),
            None => {}
        }
    }

    fn finish(self) -> Option<String> {
        if !self.done || self.broken {
            return None;
        }
        match self.text? {
            FieldText::Words(words) => words.finish(),
            FieldText::Date(date) => date.finish(),
        }
    }
}

/// Reads a metadata part's events for the title, author and date, holding at most a
/// title's worth of text per field however long the elements are.
#[derive(Debug, Default)]
pub(super) struct MetaReader {
    slots: [Slot; FIELDS],
    /// ODF's `<meta:document-statistic meta:page-count="...">`, an attribute.
    page_count: Option<u32>,
    /// The field whose element is open, and how many elements are open inside it,
    /// counting itself.
    open: Option<(Field, usize)>,
}

impl MetaReader {
    /// Takes in one event of `part`; never ends the pass (an EPUB's spine follows).
    pub(super) fn event(&mut self, event: &Event<'_>, part: &str, format: Format) {
        match (self.open, event) {
            (Some((field, depth)), Event::Start(_)) => self.open = Some((field, depth + 1)),
            (Some((field, 1)), Event::End(_)) => {
                self.slots[field as usize].done = true;
                self.open = None;
            }
            (Some((field, depth)), Event::End(_)) => self.open = Some((field, depth - 1)),
            (Some((field, _)), event) => self.text(field, event, part, format),
            (None, Event::Start(e)) => self.start(e, false),
            (None, Event::Empty(e)) => self.start(e, true),
            _ => {}
        }
    }

    /// An element starts: if it is a field's first, its text is collected (an empty one
    /// is that field's first, with no value).
    fn start(&mut self, e: &BytesStart<'_>, empty: bool) {
        if e.local_name()
            .into_inner()
            .eq_ignore_ascii_case("document-statistic")
            && self.page_count.is_none()
        {
            self.page_count = attr(e, "page-count").and_then(|n| n.trim().parse().ok());
        }
        let Some(field) = Field::of(e) else { return };
        let slot = &mut self.slots[field as usize];
        if slot.done || slot.text.is_some() {
            return;
        }
        slot.text = Some(if field.is_date() {
            FieldText::Date(DateText::default())
        } else {
            FieldText::Words(TitleText::default())
        });
        if empty {
            slot.done = true;
        } else {
            self.open = Some((field, 1));
        }
    }

    fn text(&mut self, field: Field, event: &Event<'_>, part: &str, format: Format) {
        let slot = &mut self.slots[field as usize];
        match event_text(event, part, format) {
            Ok(Some(text)) => slot.push(&text),
            Ok(None) => {}
            Err(_) => slot.broken = true,
        }
    }

    /// The cleaned fields: a field whose element was cut off inside (the part ended or
    /// failed there) has lost how it ends, and is `None`. The author is who first wrote
    /// the document if it says, else its creator; the date is the last change it records,
    /// else its date, else its creation. The page count is what the metadata
    /// says (ODF's statistics, OOXML's extended properties), not a count of pages.
    pub(super) fn finish(self) -> Meta {
        let [title, initial_creator, creator, modified, date, created, language, pages] = self.slots;
        Meta {
            language: language.finish().and_then(|l| clean_language(&l)),
            // Zero is no count (a generator that wrote its default), not a document.
            pages: pages
                .finish()
                .and_then(|n| n.parse().ok())
                .or(self.page_count)
                .filter(|&n| n > 0),
            title: title.finish(),
            author: initial_creator.finish().or_else(|| creator.finish()),
            date: modified
                .finish()
                .or_else(|| date.finish())
                .or_else(|| created.finish()),
        }
    }
}

/// Checks an Office Open XML package before office_oxide reads it (see `office.rs`), so
/// that it is held to the same rules as every other container: the sizes its entries
/// declare must fit the inflate budget together (the zip reader stops any entry at its
/// declared size, so a forged size cannot let more through; office_oxide then counts what
/// it actually inflates against the same budget), and no XML part may declare entities.
/// Only each part's prolog is read, up to its root element; the stop flag is polled
/// between parts.
pub(super) fn precheck(
    bytes: &[u8],
    format: Format,
    max_inflated: u64,
    stop: &AtomicBool,
) -> Result<(), ExtractError> {
    let mut container = Container::open(bytes, format, max_inflated)?;
    let mut declared = 0u64;
    for index in 0..container.archive.len() {
        check_stop(stop)?;
        let entry = container
            .archive
            .by_index_raw(index)
            .map_err(|e| ExtractError::malformed(format, format!("cannot open entry {index}: {e}")))?;
        declared = declared.saturating_add(entry.size());
        if declared > max_inflated {
            let name = entry
                .name()
                .map(|n| n.into_owned())
                .unwrap_or_else(|_| format!("entry {index}"));
            return Err(ExtractError::malformed(
                format,
                format!("{name} inflates past the limit of {max_inflated} bytes"),
            ));
        }
    }
    for name in container.names() {
        if name.ends_with(".xml") || name.ends_with(".rels") {
            check_stop(stop)?;
            container.check_prolog(&name)?;
        }
    }
    Ok(())
}

/// A DOCTYPE that declares entities is refused. Entities are never expanded here (quick-xml
/// knows only the five predefined ones), and no office or e-book format needs its own:
/// declaring them is how an entity-expansion bomb ("billion laughs") starts, so the part
/// fails saying so rather than on the first entity it cannot resolve. A DOCTYPE without
/// declarations (old OEB packages name their DTD) is harmless and passes.
fn refuse_entities(doctype: &str, part: &str, format: Format) -> Result<(), ExtractError> {
    if doctype.contains("<!ENTITY") {
        return Err(ExtractError::malformed(
            format,
            format!("{part} declares entities in its DOCTYPE (refused: entity expansion)"),
        ));
    }
    Ok(())
}

/// Text of an XML text, CDATA or reference event of `part`: the reader splits text at
/// every `&...;`, and a reference here is a character reference or one of the five
/// predefined entities; any other name fails the part (entities are never declared:
/// [`refuse_entities`]).
pub(super) fn event_text(
    event: &Event<'_>,
    part: &str,
    format: Format,
) -> Result<Option<String>, ExtractError> {
    let bad = |what: String| ExtractError::malformed(format, format!("bad XML text in {part}: {what}"));
    match event {
        Event::Text(t) => Ok(Some(t.xml10_content().into_owned())),
        Event::CData(t) => Ok(Some(t.xml10_content().into_owned())),
        Event::GeneralRef(r) => match r.resolve_char_ref().map_err(|e| bad(e.to_string()))? {
            Some(c) => Ok(Some(c.to_string())),
            None => match quick_xml::escape::resolve_predefined_entity(r) {
                Some(text) => Ok(Some(text.to_owned())),
                None => Err(bad(format!("unknown entity &{};", &**r))),
            },
        },
        _ => Ok(None),
    }
}

/// Fails once extracted text passes `limit`. Most formats cannot produce more text than
/// they inflate, but some can repeat it (an XLSX cell refers to a shared string; an ODF
/// `<text:s text:c="N"/>` stands for N spaces), so output gets its own bound.
pub(super) fn check_output(out: &str, limit: u64, format: Format) -> Result<(), ExtractError> {
    if out.len() as u64 > limit {
        return Err(ExtractError::malformed(
            format,
            format!("extracted text passes the limit of {limit} bytes"),
        ));
    }
    Ok(())
}

/// Why a path named inside a container does not lead to one of its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BadPath {
    /// More `..` than directories: the path climbs out of the archive.
    Outside,
    /// A `%` not followed by two hex digits, or escapes that are not UTF-8.
    BadEscape,
}

impl fmt::Display for BadPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BadPath::Outside => "a path outside the archive (refused)",
            BadPath::BadEscape => "a path with a bad percent-escape",
        })
    }
}

/// Resolves a relative URL inside the zip (an EPUB manifest `href`, an OOXML relationship
/// `Target`) against the directory of the part that holds it. Only the parts these formats
/// use: `..` segments, a `#fragment`, percent-escapes (spaces are common), and a leading
/// `/` for the zip's root.
pub(super) fn resolve(base: &str, href: &str) -> Result<String, BadPath> {
    let href = href.split('#').next().unwrap_or_default();
    let href = percent_decode(href).ok_or(BadPath::BadEscape)?;
    let base = if href.starts_with('/') { "" } else { base };
    let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
    for segment in href.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop().ok_or(BadPath::Outside)?;
            }
            s => parts.push(s),
        }
    }
    Ok(parts.join("/"))
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A reader that fails once more than `remaining` bytes come through, remembering that it
/// did so the caller can tell a zip bomb from ordinary bad content.
pub(super) struct Capped<R> {
    inner: R,
    remaining: u64,
    exceeded: bool,
}

impl<R> Capped<R> {
    pub(super) fn new(inner: R, limit: u64) -> Self {
        Self {
            inner,
            remaining: limit,
            exceeded: false,
        }
    }

    /// Whether the limit was hit (then the last read failed).
    pub(super) fn exceeded(&self) -> bool {
        self.exceeded
    }

    /// How many bytes may still come through.
    pub(super) fn remaining(&self) -> u64 {
        self.remaining
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Ask for one byte past the limit: getting it proves the entry is too big.
        let want = buf.len().min(
            usize::try_from(self.remaining)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
        );
        let n = self.inner.read(&mut buf[..want])?;
        if n as u64 > self.remaining {
            self.exceeded = true;
            return Err(io::Error::other("decompressed size limit exceeded"));
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

/// The value of the attribute with this local name, whatever its prefix.
pub(crate) fn attr(e: &BytesStart<'_>, local: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == local)
        .and_then(|a| {
            a.normalized_value(XmlVersion::Implicit1_0)
                .ok()
                .map(|v| v.into_owned())
        })
}

#[cfg(test)]
pub(super) mod tests {
    use std::io::{Cursor, Write};

    use zip::write::SimpleFileOptions;
    use zip::{CompressionMethod, ZipWriter};

    /// Builds a deflated zip in memory; shared by the container tests.
    pub(in super::super) fn zip_with(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
        let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
        for (name, data) in files {
            zip.start_file(*name, options).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }
}
