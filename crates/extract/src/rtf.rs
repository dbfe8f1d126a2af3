//! RTF: a small streaming reader of our own.
//!
//! Why not a crate: the one maintained RTF crate on crates.io (`rtf-parser` 0.4) needs the
//! whole input as a `&str` (RTF is bytes), tokenizes all of it into a vector before parsing
//! (memory several times the input), reads `\'hh` escapes as Latin-1 whatever `\ansicpg`
//! says, and cannot be stopped. Text extraction needs little of RTF: groups, control words,
//! the escapes for bytes and Unicode, and which groups are not text ("destinations" such as
//! the font table or embedded pictures). This reader does that in one pass over the bytes,
//! with O(depth) state, polling `stop` as it goes.
//!
//! The title is the `{\title ...}` group inside `{\info ...}`, the document information
//! group, and the author its `{\author ...}`: their text is read like body text (code-page
//! and Unicode escapes alike) but collected apart, while the rest of `\info` stays
//! skipped. The date is `{\revtim\yrN\moN\dyN...}` (the last revision), else
//! `{\creatim...}`, in the same group.

use std::sync::atomic::AtomicBool;

use encoding_rs::Encoding;

use super::text::{Decoded, Meta};
use super::title::{clean_date, TitleText};
use crate::stop::check_stop;
use leasehold::extract::{ExtractError, Format};

/// Bytes between two polls of the stop flag.
const STOP_POLL_BYTES: usize = 64 * 1024;

/// Destinations whose content is not document text. Any group starting with `\*` is also
/// skipped (that is what `\*` means: "ignore if you do not know this destination").
const SKIPPED_DESTINATIONS: &[&str] = &[
    "fonttbl",
    "colortbl",
    "stylesheet",
    "info",
    "pict",
    "object",
    "objdata",
    "listtable",
    "listoverridetable",
    "revtbl",
    "rsidtbl",
    "generator",
    "xmlnstbl",
    "themedata",
    "colorschememapping",
    "datastore",
    "latentstyles",
    "pgdsctbl",
    "fldinst",
    "filetbl",
    "header",
    "headerl",
    "headerr",
    "headerf",
    "footer",
    "footerl",
    "footerr",
    "footerf",
];

/// Content sniffing: RTF opens with `{\rtf` (the version number follows).
pub(super) fn looks_like_rtf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"{\\rtf")
}

pub(super) fn extract(bytes: &[u8], stop: &AtomicBool) -> Result<Decoded, ExtractError> {
    if !looks_like_rtf(bytes) {
        return Err(ExtractError::malformed(Format::Rtf, "does not start with {\\rtf"));
    }
    let mut reader = RtfReader::new(bytes);
    reader.run(stop)?;
    Ok(reader.finish())
}

/// What a group inherits from its parent and may change for itself.
#[derive(Clone, Copy)]
struct Group {
    /// Inside a destination that is not text.
    skip: bool,
    /// How many fallback characters follow each `\uN` (set by `\ucN`).
    unicode_skip: usize,
    /// Inside the `\info` group, where the title, author and dates are.
    info: bool,
    /// Inside `\info`'s `\title` or `\author` group: text goes there, not to the body.
    field: Option<InfoText>,
    /// Inside `\info`'s `\revtim` or `\creatim` group: `\yr`, `\mo`, `\dy` set it.
    date: Option<InfoDate>,
}

/// The `\info` groups whose text is collected.
#[derive(Clone, Copy, PartialEq, Eq)]
enum InfoText {
    Title,
    Author,
}

/// The `\info` groups that hold a date as control words.
#[derive(Clone, Copy, PartialEq, Eq)]
enum InfoDate {
    Revised,
    Created,
}

/// A date written as `\yrN\moN\dyN` (and hours and minutes, which are not kept).
#[derive(Debug, Default, Clone, Copy)]
struct RtfDate {
    year: Option<i32>,
    month: Option<i32>,
    day: Option<i32>,
}

impl RtfDate {
    /// As much of the date as is given in range, read by `clean_date` like any other (so
    /// LibreOffice's `\yr0\mo0\dy0`, its "never", is no date).
    fn finish(self) -> Option<String> {
        let year = self.year.filter(|y| (1..=9999).contains(y))?;
        let part = |value: Option<i32>, max: i32| value.filter(|v| (1..=max).contains(v));
        let raw = match (part(self.month, 12), part(self.day, 31)) {
            (Some(month), Some(day)) => format!("{year:04}-{month:02}-{day:02}"),
            (Some(month), None) => format!("{year:04}-{month:02}"),
            (None, _) => format!("{year:04}"),
        };
        clean_date(&raw)
    }
}

struct RtfReader<'a> {
    input: &'a [u8],
    pos: usize,
    stack: Vec<Group>,
    group: Group,
    /// The code page of `\'hh` bytes, from `\ansicpg`.
    encoding: &'static Encoding,
    /// `\'hh` bytes not yet decoded: a double-byte character comes as two escapes.
    pending: Vec<u8>,
    /// Fallback characters still to drop after a `\uN`.
    to_skip: usize,
    /// The first half of a surrogate pair written as two `\uN`.
    high_surrogate: Option<u16>,
    /// The group just opened: its first control word may name a destination.
    at_group_start: bool,
    out: String,
    /// The text of the `\title` group, apart from the body's.
    title: TitleText,
    /// The text of the `\author` group.
    author: TitleText,
    /// The `\revtim` group's date.
    revised: RtfDate,
    /// The `\creatim` group's date.
    created: RtfDate,
}

impl<'a> RtfReader<'a> {
    fn new(input: &'a [u8]) -> Self {
        Self {
            input,
            pos: 0,
            stack: Vec::new(),
            group: Group {
                skip: false,
                unicode_skip: 1,
                info: false,
                field: None,
                date: None,
            },
            encoding: encoding_rs::WINDOWS_1252,
            pending: Vec::new(),
            to_skip: 0,
            high_surrogate: None,
            at_group_start: false,
            out: String::new(),
            title: TitleText::default(),
            author: TitleText::default(),
            revised: RtfDate::default(),
            created: RtfDate::default(),
        }
    }

    fn run(&mut self, stop: &AtomicBool) -> Result<(), ExtractError> {
        let mut next_poll = 0;
        while let Some(&byte) = self.input.get(self.pos) {
            if self.pos >= next_poll {
                check_stop(stop)?;
                next_poll = self.pos + STOP_POLL_BYTES;
            }
            self.pos += 1;
            match byte {
                b'{' => self.open_group(),
                b'}' => {
                    if !self.close_group() {
                        break; // The document's own closing brace: anything after is junk.
                    }
                }
                b'\\' => self.control(),
                b'\r' | b'\n' => {}
                _ => self.text_byte(byte),
            }
        }
        Ok(())
    }

    fn open_group(&mut self) {
        self.flush();
        self.to_skip = 0;
        self.stack.push(self.group);
        self.at_group_start = true;
    }

    /// Returns false when the outermost group closes.
    fn close_group(&mut self) -> bool {
        self.flush();
        self.to_skip = 0;
        self.at_group_start = false;
        match self.stack.pop() {
            Some(parent) => {
                self.group = parent;
                !self.stack.is_empty()
            }
            None => false,
        }
    }

    /// After a backslash: a control word (letters, optional number, optional space) or a
    /// control symbol (one non-letter).
    fn control(&mut self) {
        let Some(&first) = self.input.get(self.pos) else {
            return;
        };
        if !first.is_ascii_alphabetic() {
            self.pos += 1;
            self.symbol(first);
            self.at_group_start = false;
            return;
        }
        let start = self.pos;
        while self.input.get(self.pos).is_some_and(u8::is_ascii_alphabetic) {
            self.pos += 1;
        }
        let word = std::str::from_utf8(&self.input[start..self.pos]).unwrap_or("");
        let param = self.parameter();
        if self.input.get(self.pos) == Some(&b' ') {
            self.pos += 1;
        }
        let group_start = std::mem::replace(&mut self.at_group_start, false);
        if group_start {
            self.destination(word);
        }
        self.word(word, param);
    }

    /// The first control word of a group, which may name a destination: one that is not
    /// text is skipped, except that `\info`'s `\title` and `\author` are read into their
    /// fields, and its `\revtim` and `\creatim` into their dates.
    fn destination(&mut self, word: &str) {
        let info_text = match word {
            "title" => Some(InfoText::Title),
            "author" => Some(InfoText::Author),
            _ => None,
        };
        let info_date = match word {
            "revtim" => Some(InfoDate::Revised),
            "creatim" => Some(InfoDate::Created),
            _ => None,
        };
        if self.group.info && info_text.is_some() {
            self.group.field = info_text;
            self.group.skip = false;
        } else if self.group.info && info_date.is_some() {
            self.group.date = info_date;
        } else if SKIPPED_DESTINATIONS.contains(&word) {
            self.group.skip = true;
            self.group.info |= word == "info";
        }
    }

    /// The optional signed decimal parameter of a control word.
    fn parameter(&mut self) -> Option<i32> {
        let start = self.pos;
        if self.input.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        while self.input.get(self.pos).is_some_and(u8::is_ascii_digit) && self.pos - start < 11 {
            self.pos += 1;
        }
        std::str::from_utf8(&self.input[start..self.pos])
            .ok()?
            .parse()
            .ok()
    }

    fn symbol(&mut self, symbol: u8) {
        match symbol {
            b'*' => self.group.skip = true,
            b'\'' => {
                let hex = self.input.get(self.pos..self.pos + 2);
                self.pos = (self.pos + 2).min(self.input.len());
                let byte = hex
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(byte) = byte {
                    if !self.skip_fallback() && !self.group.skip {
                        self.pending.push(byte);
                    }
                }
            }
            b'\\' | b'{' | b'}' => self.text_byte(symbol),
            b'~' => self.push_char('\u{a0}'),
            b'_' => self.push_char('-'),
            b'\r' | b'\n' => self.push_char('\n'),
            _ => {} // `\-` (optional hyphen), `\:` (index subentry) and the like.
        }
    }

    fn word(&mut self, word: &str, param: Option<i32>) {
        match word {
            "par" | "line" | "sect" | "page" | "row" => self.push_char('\n'),
            "tab" | "cell" => self.push_char('\t'),
            "emdash" => self.push_char('\u{2014}'),
            "endash" => self.push_char('\u{2013}'),
            "bullet" => self.push_char('\u{2022}'),
            "lquote" => self.push_char('\u{2018}'),
            "rquote" => self.push_char('\u{2019}'),
            "ldblquote" => self.push_char('\u{201c}'),
            "rdblquote" => self.push_char('\u{201d}'),
            "u" => self.unicode(param.unwrap_or(0)),
            "uc" => self.group.unicode_skip = param.unwrap_or(1).clamp(0, 16) as usize,
            "ansicpg" => self.encoding = code_page(param.unwrap_or(1252)),
            "yr" | "mo" | "dy" => self.date_part(word, param),
            "mac" => self.encoding = encoding_rs::MACINTOSH,
            "bin" => {
                // Raw binary data of the given length: not text, and may contain braces.
                let len = usize::try_from(param.unwrap_or(0)).unwrap_or(0);
                self.pos = self.pos.saturating_add(len).min(self.input.len());
            }
            _ => {}
        }
    }

    /// A part of the date whose group this is (`\yr`, `\mo`, `\dy`); elsewhere nothing.
    fn date_part(&mut self, word: &str, param: Option<i32>) {
        let date = match self.group.date {
            Some(InfoDate::Revised) => &mut self.revised,
            Some(InfoDate::Created) => &mut self.created,
            None => return,
        };
        match word {
            "yr" => date.year = param,
            "mo" => date.month = param,
            _ => date.day = param,
        }
    }

    /// `\uN`: a UTF-16 code unit as a signed 16-bit number, then fallback characters for old
    /// readers, which we drop. Surrogate pairs come as two `\u`s.
    fn unicode(&mut self, value: i32) {
        let unit = value.rem_euclid(65_536) as u16;
        if !self.group.skip {
            self.flush();
            self.push_unit(unit);
        }
        self.to_skip = self.group.unicode_skip;
    }

    fn push_unit(&mut self, unit: u16) {
        let high = self.high_surrogate.take();
        match (high, unit) {
            (None, 0xD800..=0xDBFF) => self.high_surrogate = Some(unit),
            (Some(high), 0xDC00..=0xDFFF) => {
                let c = char::decode_utf16([high, unit]).next().and_then(Result::ok);
                self.emit(c.unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            (high, unit) => {
                if high.is_some() {
                    self.emit(char::REPLACEMENT_CHARACTER);
                }
                let c = char::from_u32(u32::from(unit)).unwrap_or(char::REPLACEMENT_CHARACTER);
                self.emit(c);
            }
        }
    }

    /// Writes one character of text: to the title inside `\title`, the author inside
    /// `\author`, else to the body.
    fn emit(&mut self, c: char) {
        match self.group.field {
            Some(InfoText::Title) => self.title.push(c),
            Some(InfoText::Author) => self.author.push(c),
            None => self.out.push(c),
        }
    }

    /// Counts down the fallback characters after `\uN`; true if this one is dropped.
    fn skip_fallback(&mut self) -> bool {
        if self.to_skip > 0 {
            self.to_skip -= 1;
            true
        } else {
            false
        }
    }

    fn text_byte(&mut self, byte: u8) {
        self.at_group_start = false;
        if self.skip_fallback() || self.group.skip {
            return;
        }
        if byte.is_ascii() {
            self.flush();
            self.emit(char::from(byte));
        } else {
            // Raw 8-bit text is in the document code page, like `\'hh`.
            self.pending.push(byte);
        }
    }

    fn push_char(&mut self, c: char) {
        if !self.group.skip {
            self.flush();
            self.emit(c);
        }
    }

    /// Decodes the pending code-page bytes, which belong to the current group.
    fn flush(&mut self) {
        if !self.pending.is_empty() {
            let (text, _) = self.encoding.decode_without_bom_handling(&self.pending);
            match self.group.field {
                Some(InfoText::Title) => self.title.push_str(&text),
                Some(InfoText::Author) => self.author.push_str(&text),
                None => self.out.push_str(&text),
            }
            self.pending.clear();
        }
    }

    /// The body text, with the title, the author and the date (the last revision's,
    /// else the creation's).
    fn finish(mut self) -> Decoded {
        self.flush();
        self.out.truncate(self.out.trim_end().len());
        let meta = Meta {
            title: self.title.finish(),
            author: self.author.finish(),
            date: self.revised.finish().or_else(|| self.created.finish()),
            ..Meta::default()
        };
        Decoded::described(self.out, meta)
    }
}

/// The encoding of a Windows code page number; unknown ones read as Windows-1252, the
/// default of RTF writers, so at least ASCII and the common Latin letters come through.
fn code_page(number: i32) -> &'static Encoding {
    let label = match number {
        932 => "shift_jis",
        936 => "gbk",
        949 => "euc-kr",
        950 => "big5",
        866 => "ibm866",
        874 => "windows-874",
        1250..=1258 => {
            return Encoding::for_label(format!("windows-{number}").as_bytes())
                .unwrap_or(encoding_rs::WINDOWS_1252)
        }
        10000 => "macintosh",
        65001 => "utf-8",
        _ => "windows-1252",
    };
    Encoding::for_label(label.as_bytes()).unwrap_or(encoding_rs::WINDOWS_1252)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMO: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../samples/formats/memo.rtf"
    ));

    fn run(rtf: &[u8]) -> String {
        extract(rtf, &AtomicBool::new(false)).unwrap().text
    }

    fn title(rtf: &[u8]) -> Option<String> {
        extract(rtf, &AtomicBool::new(false)).unwrap().title
    }

    #[test]
    fn the_title_is_the_info_groups_title() {
        let rtf = br"{\rtf1\ansi\ansicpg1252{\info{\author Someone}{\title Crimson {\b tundra} caf\'e9 \u8212? memo}{\subject other}}\pard body text\par}";
        let done = extract(rtf, &AtomicBool::new(false)).unwrap();
        assert_eq!(
            done.title.as_deref(),
            Some("Crimson tundra caf\u{e9} \u{2014} memo")
        );
        assert_eq!(done.text, "body text");
        // A `\title` outside `\info` is not the document's title, and is body text.
        assert_eq!(title(br"{\rtf1 {\title not info}x}"), None);
        assert_eq!(title(br"{\rtf1 {\info{\title   }}x}"), None);
        assert_eq!(title(br"{\rtf1 {\info{\title Untitled}}x}"), None);
        // The sample, from LibreOffice, has an `\info` group without a title.
        assert_eq!(title(MEMO), None);
    }

    #[test]
    fn author_and_date_are_the_info_groups() {
        let rtf = br"{\rtf1\ansi\ansicpg1252{\info{\title T}{\author Ana \'c9lise {\i Ruiz}}{\creatim\yr2024\mo3\dy1\hr9\min5}{\revtim\yr2026\mo1\dy15\hr10\min0}}\pard body\par}";
        let done = extract(rtf, &AtomicBool::new(false)).unwrap();
        assert_eq!(done.author.as_deref(), Some("Ana \u{c9}lise Ruiz"));
        assert_eq!(
            done.date.as_deref(),
            Some("2026-01-15"),
            "the revision before the creation"
        );
        assert_eq!(done.text, "body");
        let date = |rtf: &[u8]| extract(rtf, &AtomicBool::new(false)).unwrap().date;
        assert_eq!(
            date(br"{\rtf1{\info{\creatim\yr2024\mo3\dy1}{\revtim\yr0\mo0\dy0}}x}").as_deref(),
            Some("2024-03-01"),
            "LibreOffice's zero revision is no date"
        );
        assert_eq!(
            date(br"{\rtf1{\info{\revtim\yr2026\mo13\dy40}}x}").as_deref(),
            Some("2026")
        );
        assert_eq!(date(br"{\rtf1{\info{\revtim\yr99999999999}}x}"), None);
        assert_eq!(date(br"{\rtf1\yr2026{\revtim\yr2026}x}"), None, "outside \\info");
        // `\author` outside `\info` is not the document's author, and is body text.
        let outside = extract(br"{\rtf1 {\author not info}x}", &AtomicBool::new(false)).unwrap();
        assert_eq!((outside.author, outside.text.as_str()), (None, "not infox"));
        // The sample, from LibreOffice, has no author and zero dates.
        let memo = extract(MEMO, &AtomicBool::new(false)).unwrap();
        assert_eq!((memo.author, memo.date), (None, None));
    }

    #[test]
    fn a_megabyte_title_or_author_is_cut_and_the_body_is_whole() {
        for word in ["title", "author"] {
            let rtf = format!(r"{{\rtf1{{\info{{\{word} {}}}}}body}}", "word ".repeat(250_000));
            let done = extract(rtf.as_bytes(), &AtomicBool::new(false)).unwrap();
            let label = if word == "title" { done.title } else { done.author };
            assert_eq!(label.unwrap().chars().count(), 299, "{word}");
            assert_eq!(done.text, "body");
        }
    }

    #[test]
    fn sample_text_is_extracted_without_tables_or_styles() {
        let text = run(MEMO);
        assert!(text.contains("crimson tundra caf\u{e9}"), "{text:?}");
        for table_junk in ["Times New Roman", "Heading", "LibreOffice", "red0"] {
            assert!(!text.contains(table_junk), "{table_junk:?} leaked into {text:?}");
        }
    }

    #[test]
    fn control_words_escapes_and_paragraphs() {
        let rtf = br"{\rtf1\ansi{\fonttbl{\f0 Arial;}}{\*\unknown hidden}\f0 crimson\~tundra\par
two \{braces\} and \\ back\tab tab\line x\emdash y}trailing";
        assert_eq!(
            run(rtf),
            "crimson\u{a0}tundra\ntwo {braces} and \\ back\ttab\nx\u{2014}y"
        );
    }

    #[test]
    fn code_page_escapes_follow_ansicpg() {
        // Cyrillic in Windows-1251, and Shift_JIS double bytes as two escapes each.
        assert_eq!(
            run(br"{\rtf1\ansi\ansicpg1251 \'cf\'f0\'e8\'e2\'e5\'f2}"),
            "\u{41f}\u{440}\u{438}\u{432}\u{435}\u{442}"
        );
        assert_eq!(
            run(br"{\rtf1\ansi\ansicpg932 \'93\'fa\'96\'7b}"),
            "\u{65e5}\u{672c}"
        );
        assert_eq!(run(br"{\rtf1\ansi caf\'e9}"), "caf\u{e9}");
    }

    #[test]
    fn unicode_escapes_drop_their_fallbacks() {
        assert_eq!(
            run(br"{\rtf1 caf\u233?, \uc2\u-3913\'3f\'3f!}"),
            "caf\u{e9}, \u{f0b7}!"
        );
        // A surrogate pair, each half with a one-character fallback.
        assert_eq!(run(br"{\rtf1 \u-10179?\u-8704?}"), "\u{1F600}");
        assert_eq!(run(br"{\rtf1 {\uc0\u233}x}"), "\u{e9}x");
    }

    #[test]
    fn binary_data_is_skipped_even_with_braces() {
        assert_eq!(run(b"{\\rtf1 a{\\pict\\bin4 }{}{b}c}"), "ac");
        assert_eq!(run(b"{\\rtf1 a\\bin3 {}{b}"), "ab");
    }

    #[test]
    fn broken_rtf_is_tolerated_or_malformed() {
        assert_eq!(run(br"{\rtf1 unclosed {group \'zz \'"), "unclosed group");
        assert_eq!(
            run(br"{\rtf1 deep"
                .iter()
                .chain(&[b'{'; 100_000])
                .copied()
                .collect::<Vec<_>>()
                .as_slice()),
            "deep"
        );
        assert!(matches!(
            extract(b"plain text", &AtomicBool::new(false)),
            Err(ExtractError::Malformed {
                format: Format::Rtf,
                ..
            })
        ));
    }

    #[test]
    fn raised_stop_flag_stops_parsing() {
        let err = extract(MEMO, &AtomicBool::new(true)).unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err:?}");
    }
}
