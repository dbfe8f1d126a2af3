//! Encoding detection through the public API: text in legacy encodings and UTF-16, made
//! here from known strings, comes back as the same string, with the encoding recorded.

use std::sync::atomic::AtomicBool;

use encoding_rs::{Encoding, SHIFT_JIS, UTF_16BE, UTF_16LE, WINDOWS_1252};
use leasehold::extract::{Extraction, ExtractorRegistry, Format};

const FRENCH: &str =
    "Le cr\u{e8}me br\u{fb}l\u{e9}e du caf\u{e9} \u{e9}tait d\u{e9}j\u{e0} froide, na\u{ef}ve id\u{e9}e.";
const GERMAN_1252: &str =
    "\u{201e}Gr\u{fc}\u{df}e\u{201c} \u{2013} sch\u{f6}ne \u{c4}pfel f\u{fc}r 5 \u{20ac}.";
const JAPANESE: &str = "\u{65e5}\u{672c}\u{8a9e}\u{306e}\u{6587}\u{7ae0}\u{3067}\u{3059}\u{3002}\u{3053}\u{308c}\u{306f}\u{30c6}\u{30b9}\u{30c8}\u{3067}\u{3059}\u{3002}";

fn extract(name: &str, bytes: &[u8]) -> Extraction {
    ExtractorRegistry::default()
        .extract_detailed(name, bytes, &AtomicBool::new(false))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn encode(encoding: &'static Encoding, text: &str) -> Vec<u8> {
    let (bytes, _, unmappable) = encoding.encode(text);
    assert!(!unmappable, "{text:?} fits {}", encoding.name());
    bytes.into_owned()
}

fn utf16(text: &str, big_endian: bool) -> Vec<u8> {
    let bom: &[u8] = if big_endian { b"\xFE\xFF" } else { b"\xFF\xFE" };
    let units = text.encode_utf16().flat_map(|u| {
        if big_endian {
            u.to_be_bytes()
        } else {
            u.to_le_bytes()
        }
    });
    bom.iter().copied().chain(units).collect()
}

#[test]
fn latin1_text_is_read_as_windows_1252() {
    // ISO-8859-1 is a subset of windows-1252 for letters, and WHATWG maps the label to it.
    let bytes: Vec<u8> = FRENCH
        .chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap())
        .collect();
    let extraction = extract("notes.txt", &bytes);
    assert_eq!(extraction.text, FRENCH);
    assert_eq!(extraction.encoding, Some("windows-1252"));
    assert_eq!(extraction.format, Format::PlainText);
}

#[test]
fn windows_1252_specials_survive() {
    let extraction = extract("notes.txt", &encode(WINDOWS_1252, GERMAN_1252));
    assert_eq!(extraction.text, GERMAN_1252);
    assert_eq!(extraction.encoding, Some("windows-1252"));
}

#[test]
fn shift_jis_is_detected_in_text_and_markdown() {
    let bytes = encode(SHIFT_JIS, JAPANESE);
    let text = extract("notes.txt", &bytes);
    assert_eq!((text.text.as_str(), text.encoding), (JAPANESE, Some("Shift_JIS")));
    let md = [b"# ".as_slice(), &bytes].concat();
    let markdown = extract("guide.md", &md);
    assert_eq!(
        (markdown.text.as_str(), markdown.encoding),
        (JAPANESE, Some("Shift_JIS"))
    );
}

#[test]
fn utf16_with_either_bom_in_every_text_format() {
    for big_endian in [false, true] {
        let expected = if big_endian {
            UTF_16BE.name()
        } else {
            UTF_16LE.name()
        };
        let txt = extract("notes.txt", &utf16(JAPANESE, big_endian));
        assert_eq!((txt.text.as_str(), txt.encoding), (JAPANESE, Some(expected)));
        let md = extract("guide.md", &utf16(&format!("# {FRENCH}"), big_endian));
        assert_eq!((md.text.as_str(), md.encoding), (FRENCH, Some(expected)));
        // The BOM wins over a <meta charset> that says otherwise, as in browsers.
        let page = format!("<!DOCTYPE html><meta charset=windows-1252><p>{JAPANESE}</p>");
        let html = extract("unnamed", &utf16(&page, big_endian));
        assert_eq!(
            (html.text.as_str(), html.encoding, html.format),
            (JAPANESE, Some(expected), Format::Html)
        );
    }
}

#[test]
fn html_meta_charset_is_honoured_and_undeclared_html_is_detected() {
    let declared = [
        b"<html><head><meta charset=\"shift_jis\"></head><body><p>".as_slice(),
        &encode(SHIFT_JIS, JAPANESE),
        b"</p>",
    ]
    .concat();
    let html = extract("page.html", &declared);
    assert_eq!((html.text.as_str(), html.encoding), (JAPANESE, Some("Shift_JIS")));
    let undeclared = [b"<p>".as_slice(), &encode(WINDOWS_1252, FRENCH), b"</p>"].concat();
    let html = extract("page.html", &undeclared);
    assert_eq!(
        (html.text.as_str(), html.encoding),
        (FRENCH, Some("windows-1252"))
    );
}

#[test]
fn plain_utf8_stays_utf8() {
    for (name, text) in [("a.txt", FRENCH), ("a.md", JAPANESE), ("a.html", GERMAN_1252)] {
        let extraction = extract(name, text.as_bytes());
        assert_eq!(
            (extraction.text.as_str(), extraction.encoding),
            (text, Some("UTF-8")),
            "{name}"
        );
    }
}
