//! Plain text: decoding only. Uploaded text comes in whatever encoding the author's editor
//! used, so decoding is lossy instead of failing, and byte-order marks pick UTF-16.

/// How much of the input the binary and HTML sniffers look at: enough to see a header,
/// small enough that sniffing a large file stays cheap.
const SNIFF_BYTES: usize = 8 * 1024;

pub(super) fn extract(bytes: &[u8]) -> String {
    decode(bytes)
}

/// Decodes text, never failing: a UTF-8 BOM is dropped, a UTF-16 BOM selects UTF-16, and
/// anything invalid becomes U+FFFD so the rest of the document is still searchable.
pub(super) fn decode(bytes: &[u8]) -> String {
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        String::from_utf8_lossy(rest).into_owned()
    } else if let Some(rest) = bytes.strip_prefix(b"\xFF\xFE") {
        decode_utf16(rest, u16::from_le_bytes)
    } else if let Some(rest) = bytes.strip_prefix(b"\xFE\xFF") {
        decode_utf16(rest, u16::from_be_bytes)
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

/// The decoded start of the input, for content sniffing.
pub(super) fn decode_prefix(bytes: &[u8]) -> String {
    decode(&bytes[..bytes.len().min(SNIFF_BYTES)])
}

fn decode_utf16(bytes: &[u8], unit: fn([u8; 2]) -> u16) -> String {
    let units = bytes.chunks_exact(2).map(|pair| unit([pair[0], pair[1]]));
    let mut text: String = char::decode_utf16(units)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect();
    if bytes.len() % 2 == 1 {
        // A dangling half code unit: keep a marker rather than silently dropping data.
        text.push(char::REPLACEMENT_CHARACTER);
    }
    text
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

    #[test]
    fn invalid_utf8_decodes_lossily() {
        let text = extract(b"caf\xE9 amber \xC3 lighthouse \xFF");
        assert_eq!(text, "caf\u{FFFD} amber \u{FFFD} lighthouse \u{FFFD}");
    }

    #[test]
    fn utf8_bom_is_stripped() {
        assert_eq!(extract(b"\xEF\xBB\xBFamber lighthouse"), "amber lighthouse");
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
        assert_eq!(extract(&le), "h\u{e9}llo \u{1F600}");
        assert_eq!(extract(&be), "h\u{e9}llo");
        assert!(!looks_binary(&le), "UTF-16 has NULs but is text");
    }

    #[test]
    fn broken_utf16_is_replaced_not_fatal() {
        // A lone high surrogate, then an odd trailing byte.
        assert_eq!(extract(b"\xFF\xFEa\x00\x00\xD8b"), "a\u{FFFD}\u{FFFD}");
    }

    #[test]
    fn binary_sniffing_separates_text_from_junk() {
        assert!(!looks_binary(b""));
        assert!(!looks_binary(b"line\r\n\tindented\x0c\x1b[31mred\xE9"));
        assert!(looks_binary(b"text with one \0 byte"));
        assert!(looks_binary(&[0x01, 0x02, b'a', 0x03, 0x7F]));
    }
}
