//! Plain text: decoding only. Uploaded text comes in whatever encoding the author's editor
//! used. The order of evidence is the one browsers use: a byte-order mark, then what the
//! document declares (HTML's `<meta charset>`, passed in as a hint), then "it is valid
//! UTF-8", and only then chardetng's statistical guess among the legacy encodings. Decoding
//! never fails: anything undecodable becomes U+FFFD so the rest is still searchable.

use chardetng::{Iso2022JpDetection, Utf8Detection};
use encoding_rs::Encoding;

/// How much of the input the binary and HTML sniffers look at: enough to see a header,
/// small enough that sniffing a large file stays cheap.
const SNIFF_BYTES: usize = 8 * 1024;

/// Decoded text and the encoding it was decoded from, by its WHATWG name
/// (`"UTF-8"`, `"windows-1252"`, `"Shift_JIS"`, `"UTF-16LE"`...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub(crate) text: String,
    pub(crate) encoding: Option<&'static str>,
}

pub(super) fn extract(bytes: &[u8]) -> Decoded {
    decode(bytes)
}

/// Decodes text with no declared encoding: BOM, then UTF-8, then chardetng's guess.
pub(super) fn decode(bytes: &[u8]) -> Decoded {
    decode_with_hint(bytes, None)
}

/// Decodes text, preferring a BOM over `declared` (as browsers do) and `declared` over
/// detection.
pub(super) fn decode_with_hint(bytes: &[u8], declared: Option<&'static Encoding>) -> Decoded {
    let (encoding, body) = match Encoding::for_bom(bytes) {
        Some((encoding, bom_len)) => (encoding, &bytes[bom_len..]),
        None => (declared.unwrap_or_else(|| detect(bytes)), bytes),
    };
    let (text, _had_errors) = encoding.decode_without_bom_handling(body);
    let text = text.into_owned();
    Decoded {
        text,
        encoding: Some(encoding.name()),
    }
}

/// Valid UTF-8 is taken as UTF-8: legacy text that happens to be valid UTF-8 is vanishingly
/// rare past pure ASCII, and chardetng would otherwise call ASCII "windows-1252". Anything
/// else goes to chardetng, which was trained on web content in the legacy encodings.
fn detect(bytes: &[u8]) -> &'static Encoding {
    if std::str::from_utf8(bytes).is_ok() {
        return encoding_rs::UTF_8;
    }
    // ISO-2022-JP is 7-bit and so valid UTF-8: it never gets here, so it is not guessed.
    let mut detector = chardetng::EncodingDetector::new(Iso2022JpDetection::Deny);
    detector.feed(bytes, true);
    // No top-level domain hint; allow UTF-8 in case the invalid bytes are a few stray ones
    // in an otherwise UTF-8 document.
    detector.guess(None, Utf8Detection::Allow)
}

/// The decoded start of the input, for content sniffing.
pub(super) fn decode_prefix(bytes: &[u8]) -> String {
    decode(&bytes[..bytes.len().min(SNIFF_BYTES)]).text
}

/// Whether the input is binary rather than text in some 8-bit or UTF encoding. Text never
/// contains NUL (UTF-16 is recognised by its BOM before this), and only a few control
/// characters are common in text; more than 1 in 10 of the rest means an unknown binary.
/// High bytes are not counted: they are just text in a legacy encoding.
pub(super) fn looks_binary(bytes: &[u8]) -> bool {
    if bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF") {
        return false;
    }
    let sample = &bytes[..bytes.len().min(SNIFF_BYTES)];
    if sample.contains(&0) {
        return true;
    }
    let controls = sample.iter().filter(|&&b| is_binary_control(b)).count();
    controls * 10 > sample.len()
}

/// Control characters that do not occur in text: all but tab, LF, FF, CR and ESC (the last
/// for terminal logs with colour codes).
fn is_binary_control(byte: u8) -> bool {
    (byte < 0x20 && !matches!(byte, b'\t' | b'\n' | b'\x0C' | b'\r' | 0x1B)) || byte == 0x7F
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: &[u8]) -> String {
        extract(bytes).text
    }

    #[test]
    fn invalid_utf8_is_decoded_as_the_likeliest_legacy_encoding() {
        // Before encoding detection this became U+FFFD; now it reads as a person wrote it.
        let decoded = extract(b"caf\xE9 amber lighthouse, na\xEFve d\xE9j\xE0 vu");
        assert_eq!(
            decoded.text,
            "caf\u{e9} amber lighthouse, na\u{ef}ve d\u{e9}j\u{e0} vu"
        );
        assert_eq!(decoded.encoding, Some("windows-1252"));
    }

    #[test]
    fn valid_utf8_and_ascii_are_utf8() {
        assert_eq!(extract("caf\u{e9}".as_bytes()).encoding, Some("UTF-8"));
        assert_eq!(extract(b"amber lighthouse").encoding, Some("UTF-8"));
    }

    #[test]
    fn utf8_bom_is_stripped() {
        let decoded = extract(b"\xEF\xBB\xBFamber lighthouse");
        assert_eq!(decoded.text, "amber lighthouse");
        assert_eq!(decoded.encoding, Some("UTF-8"));
    }

    #[test]
    fn utf16_with_bom_is_decoded_both_ways() {
        let le: Vec<u8> = b"\xFF\xFE"
            .iter()
            .copied()
            .chain("h\u{e9}llo \u{1F600}".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        let be: Vec<u8> = b"\xFE\xFF"
            .iter()
            .copied()
            .chain("h\u{e9}llo".encode_utf16().flat_map(u16::to_be_bytes))
            .collect();
        assert_eq!(
            extract(&le),
            Decoded {
                text: "h\u{e9}llo \u{1F600}".into(),
                encoding: Some("UTF-16LE")
            }
        );
        assert_eq!(
            extract(&be),
            Decoded {
                text: "h\u{e9}llo".into(),
                encoding: Some("UTF-16BE")
            }
        );
        assert!(!looks_binary(&le), "UTF-16 has NULs but is text");
    }

    #[test]
    fn broken_utf16_is_replaced_not_fatal() {
        // A lone high surrogate, then an odd trailing byte.
        let decoded = text(b"\xFF\xFEa\x00\x00\xD8b");
        assert!(decoded.starts_with("a\u{FFFD}"), "{decoded:?}");
        assert!(decoded.ends_with('\u{FFFD}'), "{decoded:?}");
    }

    #[test]
    fn declared_encoding_wins_over_detection_but_not_over_a_bom() {
        let koi8 = encoding_rs::KOI8_R;
        let (bytes, _, _) = koi8.encode("\u{41f}\u{440}\u{438}\u{432}\u{435}\u{442}");
        assert_eq!(
            decode_with_hint(&bytes, Some(koi8)).text,
            "\u{41f}\u{440}\u{438}\u{432}\u{435}\u{442}"
        );
        let with_bom = [b"\xEF\xBB\xBF".as_slice(), "\u{e9}".as_bytes()].concat();
        assert_eq!(decode_with_hint(&with_bom, Some(koi8)).text, "\u{e9}");
    }

    #[test]
    fn binary_sniffing_separates_text_from_junk() {
        assert!(!looks_binary(b""));
        assert!(!looks_binary(b"line\r\n\tindented\x0c\x1b[31mred\xE9"));
        assert!(looks_binary(b"text with one \0 byte"));
        assert!(looks_binary(&[0x01, 0x02, b'a', 0x03, 0x7F]));
    }
}
