//! Encoding detection through the public API and the built binary: text in legacy
//! encodings and UTF-16, made here from known strings, comes back as the same string, with
//! the encoding recorded.

use std::path::Path;
use std::process::Output;
use std::sync::atomic::AtomicBool;

use encoding_rs::{Encoding, SHIFT_JIS, UTF_16BE, UTF_16LE, WINDOWS_1252};
use leasehold_extract::{ExtractError, Extraction, ExtractorRegistry, Format};

use crate::common::BIN;

const FRENCH: &str =
    "Le cr\u{e8}me br\u{fb}l\u{e9}e du caf\u{e9} \u{e9}tait d\u{e9}j\u{e0} froide, na\u{ef}ve id\u{e9}e.";
const GERMAN_1252: &str =
    "\u{201e}Gr\u{fc}\u{df}e\u{201c} \u{2013} sch\u{f6}ne \u{c4}pfel f\u{fc}r 5 \u{20ac}.";
const KOREAN: &str = "\u{d55c}\u{ad6d}\u{c5b4} \u{bb38}\u{c11c}\u{c785}\u{b2c8}\u{b2e4}. \u{b2e4}\u{b78c}\u{c950}\u{ac00} \u{d5cc} \u{ccc7}\u{bc14}\u{d034}\u{b97c} \u{b3cc}\u{b9bd}\u{b2c8}\u{b2e4}.\n\u{ac00}\u{c744} \u{d558}\u{b298}\u{c740} \u{b192}\u{ace0} \u{d478}\u{b985}\u{b2c8}\u{b2e4}.";
const ENGLISH: &str = "The amber lighthouse on the point was already lit,\r\nits beam sweeping the water.";
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
    [bom, &utf16_without_bom(text, big_endian)].concat()
}

/// UTF-16 as Windows tools write it when told not to add a byte-order mark.
fn utf16_without_bom(text: &str, big_endian: bool) -> Vec<u8> {
    text.encode_utf16()
        .flat_map(|u| {
            if big_endian {
                u.to_be_bytes()
            } else {
                u.to_le_bytes()
            }
        })
        .collect()
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

#[test]
fn utf16_without_bom_in_every_text_format() {
    for big_endian in [false, true] {
        let expected = Some(if big_endian { "UTF-16BE" } else { "UTF-16LE" });
        for text in [ENGLISH, KOREAN] {
            let txt = extract("notes.txt", &utf16_without_bom(text, big_endian));
            assert_eq!((txt.text.as_str(), txt.encoding), (text, expected));
            // A heading, then a paragraph.
            let md = extract("guide.md", &utf16_without_bom(&format!("# {text}"), big_endian));
            let blocks = text.lines().collect::<Vec<_>>().join("\n\n");
            assert_eq!((md.text.as_str(), md.encoding), (blocks.as_str(), expected));
            let page = format!("<!DOCTYPE html>\n<p>{text}</p>\n");
            let html = extract("unnamed", &utf16_without_bom(&page, big_endian));
            let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
            assert_eq!(
                (html.text.as_str(), html.encoding, html.format),
                (collapsed.as_str(), expected, Format::Html)
            );
        }
    }
}

/// Real binaries with zero bytes stay refused now that zero bytes can mean UTF-16: this
/// test's own executable and the built `leasehold`, and a table of 16-bit integers.
#[test]
fn binaries_are_still_refused() {
    let table: Vec<u8> = (0u16..8192).flat_map(|i| (i % 300).to_le_bytes()).collect();
    let executables = [std::env::current_exe().unwrap(), BIN.into()];
    let mut inputs: Vec<(String, Vec<u8>)> = executables
        .iter()
        .map(|path| (path.display().to_string(), std::fs::read(path).unwrap()))
        .collect();
    inputs.push(("a table of integers".into(), table));
    for (what, bytes) in inputs {
        let result = ExtractorRegistry::default().extract_detailed("blob", &bytes, &AtomicBool::new(false));
        match result {
            Err(ExtractError::Unsupported { reason }) => {
                assert_eq!(reason, "binary content of no known format", "{what}")
            }
            other => panic!("{what}: expected it refused, got {:?}", other.map(|x| x.encoding)),
        }
    }
}

/// The binary's JSON on `data` with `args`, which must succeed.
fn leasehold(data: &Path, args: &[&str]) -> serde_json::Value {
    let out: Output = crate::common::leasehold(data, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Through the binary: BOM-less UTF-16 files are indexed with their text, `inspect` names
/// the encoding decided, and a binary beside them is still refused as one.
#[test]
fn run_indexes_utf16_without_bom_and_inspect_names_the_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let (src, data) = (dir.path().join("src"), dir.path().join("data"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("english.txt"), utf16_without_bom(ENGLISH, false)).unwrap();
    std::fs::write(src.join("korean.txt"), utf16_without_bom(KOREAN, true)).unwrap();
    let program = std::fs::read(BIN).unwrap();
    std::fs::write(src.join("program.txt"), &program[..program.len().min(1 << 20)]).unwrap();

    let summary = leasehold(&data, &["run", src.to_str().unwrap(), "--json"]);
    assert_eq!(summary["indexed"], 2, "{summary}");
    let failures = summary["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{summary}");
    assert_eq!(failures[0]["key"], "program.txt");
    let error = failures[0]["error"].as_str().unwrap();
    assert!(error.contains("binary content of no known format"), "{error}");

    for (key, text, encoding) in [
        ("english.txt", ENGLISH, "UTF-16LE"),
        ("korean.txt", KOREAN, "UTF-16BE"),
    ] {
        let inspect = leasehold(&data, &["inspect", key, "--json"]);
        let history = inspect["history"].as_array().unwrap();
        let completed = history.iter().find(|h| h["event"] == "completed").unwrap();
        let detail = completed["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("extracted as plain_text, encoding {encoding}; took ")),
            "{key}: {detail}"
        );
        let result = inspect["job"]["result_path"].as_str().unwrap();
        let stored = std::fs::read_to_string(data.join("mirror").join(result)).unwrap();
        assert_eq!(stored, text, "{key}");
    }
}
