//! Plain text: decoding only. Uploaded text comes in whatever encoding the author's editor
//! used. The order of evidence is the one browsers use: a byte-order mark, then what the
//! document declares (HTML's `<meta charset>`, passed in as a hint), then "it is valid
//! UTF-8", and only then chardetng's statistical guess among the legacy encodings. UTF-16
//! without a BOM (written by Windows tools) is recognised before UTF-8 by its pattern of
//! zero bytes, which ASCII-compatible text never has. Decoding never fails: anything
//! undecodable becomes U+FFFD so the rest is still searchable.

use chardetng::{Iso2022JpDetection, Utf8Detection};
use encoding_rs::Encoding;

/// How much of the input the binary and HTML sniffers look at: enough to see a header,
/// small enough that sniffing a large file stays cheap.
const SNIFF_BYTES: usize = 8 * 1024;

/// What a format's reader hands the registry: the text, the encoding it was decoded from,
/// by its WHATWG name (`"UTF-8"`, `"windows-1252"`, `"Shift_JIS"`, `"UTF-16LE"`...), for
/// the formats decoded from bytes, and what the document says of itself (title, author,
/// date), already cleaned (see `title.rs`, the only way these are made).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub(crate) text: String,
    pub(crate) encoding: Option<&'static str>,
    pub(crate) title: Option<String>,
    pub(crate) author: Option<String>,
    pub(crate) date: Option<String>,
    pub(crate) pages: Option<u32>,
    pub(crate) language: Option<String>,
}

/// What a document says of itself, read from the same metadata as its title: each field
/// cleaned (title and author by `TitleText`, the date by `clean_date`), `None` when absent
/// or unreadable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) title: Option<String>,
    pub(crate) author: Option<String>,
    pub(crate) date: Option<String>,
    /// Its page count (pages, or a deck's slides), when it says.
    pub(crate) pages: Option<u32>,
    /// Its language, cleaned by `clean_language`.
    pub(crate) language: Option<String>,
}

impl Meta {
    /// Each field of `self`, else `other`'s: for a format read twice (PDF's two engines).
    pub(crate) fn or(self, other: Meta) -> Meta {
        Meta {
            title: self.title.or(other.title),
            author: self.author.or(other.author),
            date: self.date.or(other.date),
            pages: self.pages.or(other.pages),
            language: self.language.or(other.language),
        }
    }
}

impl Decoded {
    /// The text of a format that fixes its own encoding, with what it says of itself.
    pub(crate) fn described(text: String, meta: Meta) -> Self {
        Self {
            text,
            encoding: None,
            title: meta.title,
            author: meta.author,
            date: meta.date,
            pages: meta.pages,
            language: meta.language,
        }
    }
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
        title: None,
        author: None,
        date: None,
        pages: None,
        language: None,
    }
}

/// Valid UTF-8 is taken as UTF-8: legacy text that happens to be valid UTF-8 is vanishingly
/// rare past pure ASCII, and chardetng would otherwise call ASCII "windows-1252". Anything
/// else goes to chardetng, which was trained on web content in the legacy encodings.
/// UTF-16 comes first because its ASCII is valid UTF-8 too (`a\0b\0`).
fn detect(bytes: &[u8]) -> &'static Encoding {
    if let Some(utf16) = utf16_without_bom(bytes) {
        return utf16;
    }
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
/// contains NUL (UTF-16, with or without a BOM, is recognised before this), and only a few
/// control characters are common in text; more than 1 in 10 of the rest means an unknown
/// binary. High bytes are not counted: they are just text in a legacy encoding.
pub(super) fn looks_binary(bytes: &[u8]) -> bool {
    if bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF") {
        return false;
    }
    if utf16_without_bom(bytes).is_some() {
        return false;
    }
    let sample = &bytes[..bytes.len().min(SNIFF_BYTES)];
    if sample.contains(&0) {
        return true;
    }
    let controls = sample.iter().filter(|&&b| is_binary_control(b)).count();
    controls * 10 > sample.len()
}

/// UTF-16 text has at least this many ASCII characters (a byte next to a zero byte) in
/// its sample: fewer are chance, not a pattern.
const UTF16_MIN_ASCII: usize = 4;

/// At least 1 in this many of a UTF-16 sample's code units must be an ASCII space or
/// line break for its zero bytes to count as UTF-16's pattern: every text has white space
/// between its words or at the end of its lines (Japanese and Chinese prose too), and a
/// binary's bytes next to zeros seldom are.
const UTF16_MIN_SPACE_SHARE: usize = 64;

/// UTF-16LE or BE without a byte-order mark, judged on the first [`SNIFF_BYTES`]. Two
/// pieces of evidence are needed. The pattern: an ASCII character is its byte next to a
/// zero byte, on the same side of every code unit (the zero is second in LE, first in BE),
/// text has many spaces and line breaks, and not three quarters of its code units are two
/// ASCII bytes (8-bit text with stray zero bytes). Then decoding: the sample must decode to
/// text, with at most about 1 in 50 characters that text does not hold ([`is_not_text`]).
/// Binaries that keep the pattern up for a while (tables of small integers) decode to
/// controls, unassigned or private-use code points, and stay binary.
fn utf16_without_bom(bytes: &[u8]) -> Option<&'static Encoding> {
    let sample = &bytes[..bytes.len().min(SNIFF_BYTES) & !1];
    let units = sample.len() / 2;
    let le = AsciiUnits::count(sample, false);
    let be = AsciiUnits::count(sample, true);
    let (encoding, ascii) = if le.all >= be.all {
        (encoding_rs::UTF_16LE, le)
    } else {
        (encoding_rs::UTF_16BE, be)
    };
    let patterned =
        ascii.all >= UTF16_MIN_ASCII && ascii.spaces > 0 && ascii.spaces * UTF16_MIN_SPACE_SHARE >= units;
    let eight_bit = ascii_pairs(sample) * 4 >= units * 3;
    (patterned && !eight_bit && decodes_to_text(sample, encoding)).then_some(encoding)
}

/// The code units of a sample that are ASCII characters in one byte order.
struct AsciiUnits {
    /// Printable characters and white space.
    all: usize,
    /// Space, tab, CR and LF.
    spaces: usize,
}

impl AsciiUnits {
    fn count(sample: &[u8], big_endian: bool) -> Self {
        let mut counts = AsciiUnits { all: 0, spaces: 0 };
        for unit in sample.chunks_exact(2) {
            let (high, low) = if big_endian {
                (unit[0], unit[1])
            } else {
                (unit[1], unit[0])
            };
            if high == 0 && is_ascii_text(low) {
                counts.all += 1;
                counts.spaces += usize::from(!low.is_ascii_graphic());
            }
        }
        counts
    }
}

/// Printable ASCII, space, tab, CR or LF.
fn is_ascii_text(byte: u8) -> bool {
    byte.is_ascii_graphic() || matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// The code units of `sample` that are two ASCII text bytes. In 8-bit text with stray zero
/// bytes nearly all are, and as UTF-16 they read as ideographs; in UTF-16 text fewer are:
/// none in Latin or Korean text (ASCII is its byte and a zero, Hangul has a high byte),
/// up to about half in Japanese (whose hiragana are `0` and a letter).
fn ascii_pairs(sample: &[u8]) -> usize {
    sample
        .chunks_exact(2)
        .filter(|unit| unit.iter().all(|&b| is_ascii_text(b)))
        .count()
}

/// Whether `sample` decodes to text with at most 1 in 50 characters (plus one, for a
/// surrogate pair cut at the sample's end) that text does not contain.
fn decodes_to_text(sample: &[u8], encoding: &'static Encoding) -> bool {
    let (text, _) = encoding.decode_without_bom_handling(sample);
    let (mut chars, mut odd) = (0usize, 0usize);
    for c in text.chars() {
        chars += 1;
        odd += usize::from(is_not_text(c));
    }
    odd <= 1 + chars / 50
}

/// Characters that text decoded from UTF-16 does not hold, or rarely: the binary controls
/// (NUL and the rest of C0 as in [`is_binary_control`], and C1), U+FFFD (what an unpaired
/// surrogate decodes to), and past ASCII whatever is neither a letter, a digit nor white
/// space outside the blocks of punctuation and symbols text uses: unassigned and
/// private-use code points, which a binary's integers decode to.
fn is_not_text(c: char) -> bool {
    if let Ok(byte) = u8::try_from(c) {
        return is_binary_control(byte) || (0x80..0xA0).contains(&byte);
    }
    let symbols = matches!(c,
        '\u{300}'..='\u{36F}'         // combining accents (decomposed text)
        | '\u{2000}'..='\u{2BFF}'     // punctuation, currency, arrows, maths, shapes
        | '\u{3000}'..='\u{303F}'     // CJK punctuation
        | '\u{FF00}'..='\u{FFEF}'     // full-width forms
        | '\u{10000}'..                // a valid surrogate pair: emoji, rare scripts
    );
    !(symbols || c.is_alphanumeric() || c.is_whitespace())
}

/// Control characters that do not occur in text: all but tab, LF, FF, CR and ESC (the last
/// for terminal logs with colour codes).
fn is_binary_control(byte: u8) -> bool {
    (byte < 0x20 && !matches!(byte, b'\t' | b'\n' | b'\x0C' | b'\r' | 0x1B)) || byte == 0x7F
}

/// Content sniffing for unnamed input: true if the text opens with a doctype or `<html>`.
pub(super) fn looks_like_html(text: &str) -> bool {
    let head: String = text.trim_start().chars().take(14).collect();
    let head = head.to_ascii_lowercase();
    head.starts_with("<!doctype html") || head.starts_with("<html")
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
                encoding: Some("UTF-16LE"),
                title: None,
                author: None,
                date: None,
                pages: None,
                language: None,
            }
        );
        assert_eq!(
            extract(&be),
            Decoded {
                text: "h\u{e9}llo".into(),
                encoding: Some("UTF-16BE"),
                title: None,
                author: None,
                date: None,
                pages: None,
                language: None,
            }
        );
        assert!(!looks_binary(&le), "UTF-16 has NULs but is text");
    }

    const ENGLISH: &str = "The amber lighthouse on the point was lit.\r\nIts beam swept the water.\r\n";
    const KOREAN: &str = "\u{d55c}\u{ad6d}\u{c5b4} \u{bb38}\u{c11c}\u{c785}\u{b2c8}\u{b2e4}. \u{b2e4}\u{b78c}\u{c950}\u{ac00} \u{d5cc} \u{ccc7}\u{bc14}\u{d034}\u{b97c} \u{b3cc}\u{b9bd}\u{b2c8}\u{b2e4}.\n\u{ac00}\u{c744} \u{d558}\u{b298}\u{c740} \u{b192}\u{ace0} \u{d478}\u{b985}\u{b2c8}\u{b2e4}.\n";

    /// Hiragana-heavy, the Japanese that looks most like pairs of ASCII bytes.
    const JAPANESE: &str = "\u{304d}\u{3087}\u{3046}\u{306f} \u{3044}\u{3044} \u{3066}\u{3093}\u{304d}\u{3067}\u{3059}\u{306d}\u{3002}\n\u{3042}\u{3057}\u{305f}\u{3082} \u{306f}\u{308c}\u{308b}\u{3067}\u{3057}\u{3087}\u{3046}\u{3002}\n";

    fn utf16_no_bom(text: &str, big_endian: bool) -> Vec<u8> {
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
    fn utf16_without_bom_is_recognised_and_decoded() {
        for text in [ENGLISH, KOREAN, JAPANESE, "hi there\n"] {
            for (big_endian, name) in [(false, "UTF-16LE"), (true, "UTF-16BE")] {
                let bytes = utf16_no_bom(text, big_endian);
                assert!(!looks_binary(&bytes), "{name} {text:?}");
                let decoded = extract(&bytes);
                assert_eq!(decoded.encoding, Some(name), "{text:?}");
                assert_eq!(decoded.text, text);
            }
        }
    }

    #[test]
    fn utf16_sniffing_survives_the_sample_cutting_a_surrogate_pair() {
        // The emoji's two code units straddle the end of the sniffed sample.
        let text = format!(
            "{}\u{1F600} amber lighthouse\n",
            "a ".repeat(SNIFF_BYTES / 4 - 1) + "a"
        );
        let bytes = utf16_no_bom(&text, false);
        assert_eq!(&bytes[SNIFF_BYTES - 2..SNIFF_BYTES], &[0x3D, 0xD8]);
        assert_eq!(extract(&bytes).text, text);
    }

    /// Inputs with zero bytes on one side that are not UTF-16, each refused by one check
    /// alone (the comment names it).
    #[test]
    fn binaries_with_zero_bytes_on_one_side_stay_binary() {
        // Decoding: small integers as u16 LE (a table, an image's rows) have spaces and
        // line breaks next to their zeros, but also controls.
        let small: Vec<u8> = (0u16..4096).flat_map(|i| (i % 128).to_le_bytes()).collect();
        // White space: u32 BE offsets whose second byte is a letter and whose third and
        // fourth make an ideograph (an ar archive's symbol table) decode to text, but none
        // of their units is a space or a line break.
        let offsets: Vec<u8> = (0u32..2048)
            .flat_map(|i| (0x004E_6000 + i * 4 % 0x1000).to_be_bytes())
            .collect();
        // Pairs of ASCII bytes: 8-bit text with a zero every 16 bytes has spaces next to
        // its zeros, and its pairs of letters decode to ideographs.
        let words = "the amber lighthouse was lit and its beam swept the water every twelve seconds ";
        let stray_zeros: Vec<u8> = words
            .repeat(40)
            .bytes()
            .enumerate()
            .map(|(i, b)| if i % 16 == 0 { 0 } else { b })
            .collect();
        // Too few ASCII units to be a pattern: short Latin-1 text with a stray zero.
        let short = b"ab \0\xE9t".to_vec();
        for (what, bytes) in [
            ("small integers", small),
            ("offsets", offsets),
            ("stray zeros", stray_zeros),
            ("short", short),
        ] {
            assert_eq!(utf16_without_bom(&bytes), None, "{what}");
            assert!(looks_binary(&bytes), "{what}");
        }
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
