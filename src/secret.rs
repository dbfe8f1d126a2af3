//! Passwords that cannot be printed by accident, and the redaction of every
//! form of them from text that came from outside (DESIGN §7: secrets are never
//! logged or shown).
//!
//! # Never printed
//! [`Secret`]'s `Debug` and `Display` show a placeholder; the value is reachable
//! only through [`Secret::expose`], which the HTTP code calls when it builds the
//! `Authorization` header and nowhere else.
//!
//! # Redacted from what an upstream says
//! An upstream may echo the password back (a 401 body that quotes the request,
//! a debug page listing the headers). Every [`Secret`] made in this process is
//! remembered, and [`redact`] replaces each of its forms in a text by `***`:
//! - the value itself, ignoring case (`HUNTER2`, `hunter2`);
//! - with any of its characters escaped as JSON (`\"`, `\u00e9`, surrogate
//!   pairs), URL-encoded (`%C3%A9` or `%c3%a9`, `+` for a space) or as an HTML
//!   character reference (`&amp;`, `&#233;`, `&#xE9;`), in any mix;
//! - hex of its UTF-8 bytes, either case;
//! - base64, standard and URL-safe, padded or not, also inside a longer base64
//!   string such as `base64("user:password")`, at each of the three byte
//!   alignments. Only the characters that depend on the secret's bytes alone
//!   can be recognised there; the one or two at each end that mix in
//!   neighbouring bytes stay.
//!
//! Hex and base64 forms shorter than [`MIN_ENCODED_LEN`] characters are not
//! looked for (secrets of 2 bytes or less for hex, under 5 bytes at some base64
//! alignments): runs that short are found in ordinary text. The value itself,
//! however short, is always redacted, even if that leaves little to read.
//!
//! The upstream client redacts at the boundary, before any upstream text is
//! kept (src/upstream/client.rs), and the notifier redacts again before a
//! notice leaves the process (src/upstream/notify.rs).

use std::sync::Arc;
#[cfg(not(test))]
use std::sync::Mutex;

use base64::Engine as _;

/// A secret string.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a password; from here on it prints only as a placeholder, and
    /// [`redact`] removes it from any text in this process.
    pub fn new(value: impl Into<String>) -> Secret {
        let secret = Secret(value.into());
        remember(&secret.0);
        secret
    }

    /// The value itself. Only for building credentials on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// What a redacted secret is replaced by.
pub const REDACTED: &str = "***";

/// Shortest hex or base64 form looked for: shorter runs of letters and digits
/// are everywhere in ordinary text (the hex of a one-letter password is two
/// digits), and a secret that short is guessed faster than it is leaked.
pub const MIN_ENCODED_LEN: usize = 6;

/// The forms of one secret, each a sequence of characters matched with
/// [`match_len`] (ignoring case, any character possibly escaped).
struct Forms {
    value: String,
    patterns: Vec<Vec<char>>,
}

/// Every secret made in this process, once each.
#[cfg(not(test))]
static KNOWN: Mutex<Vec<Arc<Forms>>> = Mutex::new(Vec::new());

#[cfg(not(test))]
fn with_known<R>(f: impl FnOnce(&mut Vec<Arc<Forms>>) -> R) -> R {
    f(&mut KNOWN.lock().unwrap_or_else(|e| e.into_inner()))
}

// Unit tests run in parallel threads of one process, and some make short
// secrets (`"x"`) that would redact the others' texts: there, each test
// thread knows only the secrets it made. The binary (and the integration
// tests) use the one process-wide list above.
#[cfg(test)]
thread_local! {
    static KNOWN_HERE: std::cell::RefCell<Vec<Arc<Forms>>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(test)]
fn with_known<R>(f: impl FnOnce(&mut Vec<Arc<Forms>>) -> R) -> R {
    KNOWN_HERE.with(|k| f(&mut k.borrow_mut()))
}

fn known() -> Vec<Arc<Forms>> {
    with_known(|all| all.clone())
}

/// Remember `value` so that [`redact`] removes it. Empty values are not
/// secrets (there is nothing to find).
fn remember(value: &str) {
    if value.is_empty() {
        return;
    }
    with_known(|all| {
        if !all.iter().any(|f| f.value == value) {
            all.push(Arc::new(Forms {
                value: value.to_string(),
                patterns: patterns(value),
            }));
        }
    });
}

/// Whether `text` holds any form of any secret made in this process.
pub fn contains_secret(text: &str) -> bool {
    let all = known();
    char_starts(text).any(|at| all.iter().any(|f| longest_match(f, text, at).is_some()))
}

/// `text` with every form of every secret made in this process replaced by
/// [`REDACTED`]. Apply it to text as it arrives, before cutting it short: a
/// cut could leave a secret's start that no longer matches.
pub fn redact(text: &str) -> String {
    let all = known();
    if all.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        match all.iter().filter_map(|f| longest_match(f, text, at)).max() {
            Some(end) => {
                out.push_str(REDACTED);
                at = end;
            }
            None => {
                let c = text[at..].chars().next().unwrap_or_default();
                out.push(c);
                at += c.len_utf8().max(1);
            }
        }
    }
    out
}

fn char_starts(text: &str) -> impl Iterator<Item = usize> + '_ {
    text.char_indices().map(|(i, _)| i)
}

/// Where the longest form of `forms` starting at byte `at` of `text` ends.
fn longest_match(forms: &Forms, text: &str, at: usize) -> Option<usize> {
    forms.patterns.iter().filter_map(|p| match_len(p, text, at)).max()
}

/// The patterns one secret is looked for as: itself, hex, and base64 (see the
/// module's doc).
fn patterns(value: &str) -> Vec<Vec<char>> {
    let bytes = value.as_bytes();
    let mut encoded: Vec<String> = vec![hex::encode(bytes)];
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
    ] {
        // The secret alone (the padding, if any, is left as is).
        encoded.push(engine.encode(bytes).trim_end_matches('=').to_string());
        for lead in 0..3 {
            encoded.push(base64_run(engine, bytes, lead));
        }
    }
    let mut out = vec![value.to_string()];
    out.extend(encoded.into_iter().filter(|e| e.len() >= MIN_ENCODED_LEN));
    out.sort();
    out.dedup();
    out.into_iter().map(|p| p.chars().collect()).collect()
}

/// The base64 characters that encode only `bytes` when `lead` bytes precede
/// them in a longer string: whatever those bytes are, these characters are
/// the same.
fn base64_run(engine: &base64::engine::GeneralPurpose, bytes: &[u8], lead: usize) -> String {
    let mut padded = vec![0u8; lead];
    padded.extend_from_slice(bytes);
    let encoded = engine.encode(&padded);
    // Character i holds bits 6i..6i+6; the secret holds bits 8*lead..8*(lead+n).
    let first = (8 * lead).div_ceil(6);
    let end = (8 * (lead + bytes.len())) / 6;
    encoded.get(first..end).unwrap_or_default().to_string()
}

/// If `pattern` is found at byte `at` of `text` (each character in any case,
/// literally or escaped; see [`read_char`]), where the longest such match ends.
/// Tracks every reachable end at once, so a text built to make matching
/// branch cannot make it slow: the set of ends never exceeds the text's length.
fn match_len(pattern: &[char], text: &str, at: usize) -> Option<usize> {
    let mut ends = vec![at];
    for &want in pattern {
        let mut next: Vec<usize> = Vec::new();
        for &pos in &ends {
            for (got, end) in read_char(text, pos) {
                if same_ignoring_case(got, want) && !next.contains(&end) {
                    next.push(end);
                }
            }
        }
        if next.is_empty() {
            return None;
        }
        ends = next;
    }
    ends.into_iter().max()
}

fn same_ignoring_case(a: char, b: char) -> bool {
    a == b || a.to_lowercase().eq(b.to_lowercase())
}

/// Every way to read one character at byte `at` of `text`: the character
/// itself, `+` as a space, percent-encoded UTF-8, a JSON escape, an HTML
/// character reference. Each with the byte where it ends.
fn read_char(text: &str, at: usize) -> Vec<(char, usize)> {
    let rest = &text.as_bytes()[at.min(text.len())..];
    let mut out = Vec::with_capacity(2);
    let Some(c) = text.get(at..).and_then(|s| s.chars().next()) else {
        return out;
    };
    out.push((c, at + c.len_utf8()));
    match c {
        '+' => out.push((' ', at + 1)),
        '%' => out.extend(percent_char(rest).map(|(c, n)| (c, at + n))),
        '\\' => out.extend(json_escape(rest).map(|(c, n)| (c, at + n))),
        '&' => out.extend(html_reference(rest).map(|(c, n)| (c, at + n))),
        _ => {}
    }
    out
}

fn hex_value(digits: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(digits).ok()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

/// `%XX` (up to four of them, one UTF-8 character) at the start of `rest`.
fn percent_char(rest: &[u8]) -> Option<(char, usize)> {
    let mut bytes = Vec::with_capacity(4);
    while bytes.len() < 4 && rest.len() >= 3 * (bytes.len() + 1) {
        let at = 3 * bytes.len();
        if rest[at] != b'%' {
            break;
        }
        bytes.push(u8::try_from(hex_value(&rest[at + 1..at + 3])?).ok()?);
        if let Ok(s) = std::str::from_utf8(&bytes) {
            return s.chars().next().map(|c| (c, 3 * bytes.len()));
        }
    }
    None
}

/// A JSON string escape at the start of `rest`: `\"`, `\n`, `\u00e9`, a
/// surrogate pair.
fn json_escape(rest: &[u8]) -> Option<(char, usize)> {
    let short = match rest.get(1)? {
        b'"' => Some('"'),
        b'\\' => Some('\\'),
        b'/' => Some('/'),
        b'n' => Some('\n'),
        b'r' => Some('\r'),
        b't' => Some('\t'),
        b'b' => Some('\u{8}'),
        b'f' => Some('\u{c}'),
        _ => None,
    };
    if let Some(c) = short {
        return Some((c, 2));
    }
    let unit = |at: usize| -> Option<u32> {
        if rest.get(at..at + 2)? != b"\\u" {
            return None;
        }
        hex_value(rest.get(at + 2..at + 6)?)
    };
    let high = unit(0)?;
    if let Some(c) = char::from_u32(high) {
        return Some((c, 6));
    }
    let low = unit(6)?;
    let c = char::decode_utf16([high as u16, low as u16]).next()?.ok()?;
    Some((c, 12))
}

/// An HTML character reference at the start of `rest`: `&amp;`, `&#233;`, `&#xE9;`.
fn html_reference(rest: &[u8]) -> Option<(char, usize)> {
    let end = rest.iter().take(12).position(|&b| b == b';')?;
    let name = std::str::from_utf8(&rest[1..end]).ok()?;
    let c = match name.to_ascii_lowercase().as_str() {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        n if n.starts_with("#x") => char::from_u32(hex_value(&n.as_bytes()[2..])?)?,
        n if n.starts_with('#') && n.len() > 1 && n[1..].bytes().all(|b| b.is_ascii_digit()) => {
            char::from_u32(n[1..].parse().ok()?)?
        }
        _ => return None,
    };
    Some((c, end + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PW: &str = "pä ss/W\"d+%1";

    fn encoded_forms() -> Vec<(&'static str, String)> {
        let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
        let b64url = |s: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let url_upper: String = PW.bytes().map(|b| format!("%{b:02X}")).collect();
        let url_lower: String = PW.bytes().map(|b| format!("%{b:02x}")).collect();
        let form = PW
            .replace('%', "%25")
            .replace('+', "%2B")
            .replace(' ', "+")
            .replace('/', "%2F");
        let ascii_json: String = PW.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
        vec![
            ("raw", PW.to_string()),
            ("upper", PW.to_uppercase()),
            ("lower", PW.to_lowercase()),
            ("json", serde_json::to_string(PW).unwrap()),
            ("json ascii", ascii_json),
            (
                "json slash",
                serde_json::to_string(PW).unwrap().replace('/', "\\/"),
            ),
            ("url upper hex", url_upper),
            ("url lower hex", url_lower),
            ("form", form),
            (
                "url of upper",
                PW.to_uppercase().bytes().map(|b| format!("%{b:02X}")).collect(),
            ),
            (
                "html",
                PW.replace('&', "&amp;")
                    .replace('"', "&quot;")
                    .replace('ä', "&#228;"),
            ),
            ("hex", hex::encode(PW)),
            ("HEX", hex::encode_upper(PW)),
            ("base64", b64(PW.as_bytes())),
            ("base64url", b64url(PW.as_bytes())),
            ("basic 0", b64(format!("u:{PW}").as_bytes())),
            ("basic 1", b64(format!("us:{PW}").as_bytes())),
            ("basic 2", b64(format!("usr:{PW}").as_bytes())),
            ("basic url", b64url(format!("usr:{PW}:tail").as_bytes())),
        ]
    }

    #[test]
    fn formatting_never_shows_the_value() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s:?} {s} {:?}", Some(&s)).contains("hunter2"));
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn every_form_is_redacted_in_the_middle_of_other_text() {
        let _s = Secret::new(PW);
        for (what, form) in encoded_forms() {
            let text = format!("{{\"error\":\"bad password {form} for user\"}}");
            assert!(contains_secret(&text), "{what}: {form}");
            let out = redact(&text);
            assert!(out.contains(REDACTED), "{what}: {out}");
            assert!(out.starts_with("{\"error\":\"bad password "), "{what}: {out}");
            assert!(out.ends_with(" for user\"}"), "{what}: {out}");
            assert!(!contains_secret(&out), "{what}: {out}");
            if !what.starts_with("basic") {
                // At most the characters at the ends of a base64 run remain.
                let left = out.len() + form.len() - REDACTED.len() - text.len();
                assert!(left <= 4, "{what}: {form} left {left} characters: {out}");
            }
        }
    }

    #[test]
    fn short_encoded_forms_are_not_looked_for_but_the_value_is() {
        let _s = Secret::new("z");
        // hex "7a", base64 "eg": ordinary text keeps them.
        assert_eq!(redact("7a eg Z z"), "7a eg *** ***");
    }

    #[test]
    fn a_text_without_secrets_is_unchanged() {
        let _s = Secret::new(PW);
        let text = "401 Unauthorized: {\"error\":\"bad credentials\"} %41 \\u0041 &amp; é";
        assert_eq!(redact(text), text);
        assert!(!contains_secret(text));
    }

    #[test]
    fn base64_runs_are_the_bytes_of_the_secret_alone() {
        let engine = &base64::engine::general_purpose::STANDARD;
        // "abc" at alignment 0 is exactly "YWJj".
        assert_eq!(base64_run(engine, b"abc", 0), "YWJj");
        for lead in 0..3 {
            let run = base64_run(engine, b"secret-value", lead);
            for prefix in [b"\0\0\0".as_slice(), b"xyz", b"\xff\xff\xff"] {
                let mut all = prefix[..lead].to_vec();
                all.extend_from_slice(b"secret-value");
                all.extend_from_slice(b"!?");
                assert!(engine.encode(&all).contains(&run), "lead {lead}");
            }
        }
    }

    #[test]
    fn a_secret_of_escape_characters_is_found_however_each_is_written() {
        let _s = Secret::new("%%+%%&x");
        assert_eq!(redact("a %25%+%%25&amp;x b"), "a *** b");
        assert_eq!(redact("a %25%+%%25&amp;y b"), "a %25%+%%25&amp;y b");
    }

    #[test]
    fn escapes_are_read_one_character_at_a_time() {
        assert_eq!(percent_char(b"%C3%A9x"), Some(('é', 6)));
        assert_eq!(percent_char(b"%c3%a9"), Some(('é', 6)));
        assert_eq!(percent_char(b"%zz"), None);
        assert_eq!(json_escape(b"\\ud83d\\ude00"), Some(('😀', 12)));
        assert_eq!(json_escape(b"\\\""), Some(('"', 2)));
        assert_eq!(html_reference(b"&#xe9;"), Some(('é', 6)));
        assert_eq!(html_reference(b"&#233;"), Some(('é', 6)));
        assert_eq!(html_reference(b"&bogus;"), None);
    }
}
