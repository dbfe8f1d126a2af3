//! The e-mail reader's tests, through the real registry (an attachment is
//! read by its own format).

use super::*;
use crate::ExtractorRegistry;

const NO_LIMIT: u64 = 1 << 30;

fn run(bytes: &[u8]) -> Result<Decoded, ExtractError> {
    extract(
        &ExtractorRegistry::default(),
        bytes,
        NO_LIMIT,
        &AtomicBool::new(false),
    )
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A message by Eudora Pro (2000): Latin-1 quoted-printable text, encoded headers, a
/// PNG and a text file attached.
#[test]
fn a_real_message_reads_with_its_headers_and_attachments() {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../samples/formats/fable.eml"
    ))
    .unwrap();
    let read = run(&bytes).unwrap();
    for words in [
        "Subject: Die Hasen und die Frösche",
        "To: Jürgen Schmürgen",
        "Die Hasen klagten einst über ihre mißliche Lage",
        "[attachment: farmerandstork.txt]",
        "[attachment: blueball.png]\n",
    ] {
        assert!(read.text.contains(words), "{words:?} in {}", read.text);
    }
    // A picture has no text of its own (OCR is the command line's, outside).
    assert!(!read.text.contains("[not read"), "{}", read.text);
    assert_eq!(read.title.as_deref(), Some("Die Hasen und die Frösche"));
    assert_eq!(read.author.as_deref(), Some("Doug Sauder"));
    assert_eq!(read.date.as_deref(), Some("2000-05-19"));
}

/// A message cut from a mailbox: its envelope line is not a header, and its
/// escaped `>From ` lines read as written.
#[test]
fn a_message_from_a_mailbox_loses_its_envelope_and_escapes() {
    let bytes = b"From ann@example.org Tue Jul 23 19:39:23 2002\n\
                  From: Ann <ann@example.org>\nSubject: Harbour tides\n\n\
                  The tide turns at noon.\n>From the pier, wave.\n>>From quoted\n\
                  From the log: calm.\n";
    let read = run(bytes).unwrap();
    assert_eq!(read.title.as_deref(), Some("Harbour tides"));
    assert_eq!(read.author.as_deref(), Some("Ann"));
    assert!(read.text.contains("\nFrom the pier, wave."), "{}", read.text);
    assert!(read.text.contains("\n>From quoted"), "{}", read.text);
    assert!(!read.text.contains("19:39:23"), "{}", read.text);
    // A line a saved message left unescaped is the message's, not a new one.
    assert!(read.text.contains("\nFrom the log: calm."), "{}", read.text);
}

/// An HTML body is read as text; a DOCX attached is read by its own format; a
/// message attached as a file nests, and only so deep.
#[test]
fn attachments_are_read_by_their_format_and_nesting_is_bounded() {
    let docx = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/letter.docx")).unwrap();
    let inner = "From: Ann <ann@example.com>\r\nSubject: inner\r\n\r\ndeepest words\r\n";
    let mut nested = inner.to_owned();
    for level in 0..6 {
        nested = format!(
            "From: level{level}@example.com\r\nSubject: level {level}\r\nContent-Type: multipart/mixed; boundary=b{level}\r\n\r\n--b{level}\r\nContent-Type: text/plain\r\n\r\nwrapper {level}\r\n--b{level}\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"fwd{level}.eml\"\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n--b{level}--\r\n",
            base64(nested.as_bytes())
        );
    }
    let message = format!(
        "From: Bo <bo@example.com>\r\nSubject: letters\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\nContent-Type: text/html\r\n\r\n<p>See <b>attached</b></p><script>hidden()</script>\r\n--x\r\nContent-Type: application/vnd.openxmlformats-officedocument.wordprocessingml.document\r\nContent-Disposition: attachment; filename=\"letter.docx\"\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n--x\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"chain.eml\"\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n--x--\r\n",
        base64(&docx),
        base64(nested.as_bytes()),
    );
    let read = run(message.as_bytes()).unwrap();
    assert!(read.text.contains("See attached"), "{}", read.text);
    assert!(!read.text.contains("hidden()"), "{}", read.text);
    assert!(read.text.contains("[attachment: letter.docx]\n") && read.text.contains("silver meadow"));
    assert!(
        read.text.contains("wrapper 5") && read.text.contains("wrapper 3"),
        "{}",
        read.text
    );
    assert!(!read.text.contains("wrapper 2"), "{}", read.text);
    assert!(
        read.text.contains("[a message nested too deep: not read]"),
        "{}",
        read.text
    );
    assert_eq!(
        (read.title.as_deref(), read.author.as_deref()),
        (Some("letters"), Some("Bo"))
    );
}

/// 20,000 attachments: the first ones are read, the rest named as left out.
#[test]
fn a_message_of_many_parts_stays_bounded() {
    let mut message =
        String::from("From: a@example.com\r\nContent-Type: multipart/mixed; boundary=p\r\n\r\n");
    for n in 0..20_000 {
        message.push_str(&format!(
            "--p\r\nContent-Type: text/plain\r\nContent-Disposition: attachment; filename=\"{n}.txt\"\r\n\r\npart{n}\r\n"
        ));
    }
    message.push_str("--p--\r\n");
    let read = run(message.as_bytes()).unwrap();
    assert!(read.text.contains("part255\n"), "the first attachments are read");
    assert!(!read.text.contains("part256\n"));
    assert!(read
        .text
        .contains("[attachments past the first 256 are not read]"));
}

/// An HTML body whose page names the charset it was sent in is read as the UTF-8
/// the parser decoded it to; an image beside it is read once, as an attachment;
/// people are written with their addresses.
#[test]
fn html_in_its_declared_charset_inline_images_and_addresses() {
    let message = "From: Bo <bo@example.com>\r\nTo: Jürgen <j@example.com>, x@example.com\r\nSubject: s\r\nContent-Type: multipart/related; boundary=r\r\n\r\n--r\r\nContent-Type: text/html; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n<html><head><meta http-equiv=3D\"Content-Type\" content=3D\"text/html; charset=3Dwindows-1252\"></head><body>Gr=FC=DFe, J=FCrgen</body></html>\r\n--r\r\nContent-Type: image/png\r\nContent-Disposition: inline; filename=\"dot.png\"\r\n\r\nnot really a png\r\n--r--\r\n";
    let read = run(message.as_bytes()).unwrap();
    assert!(read.text.contains("Grüße, Jürgen"), "{}", read.text);
    let image = "[attachment: dot.png]\n[not read: malformed image document";
    assert_eq!(read.text.matches(image).count(), 1, "{}", read.text);
    assert!(
        read.text
            .contains("From: Bo <bo@example.com>\nTo: Jürgen <j@example.com>, x@example.com"),
        "{}",
        read.text
    );
}

/// A file named `.eml` with none of a message's headers is the text it is; a chain
/// of attached messages past the bound is refused before it is parsed.
#[test]
fn text_named_eml_and_a_chain_of_messages() {
    let notes = b"Agenda: budget\n\nfirst item, second item\n";
    assert_eq!(run(notes).unwrap().text.as_bytes(), notes);
    let mut chain = String::from("Subject: core\r\n\r\ncore text\r\n");
    for level in 0..300 {
        chain = format!("Subject: l{level}\r\nContent-Type: message/rfc822\r\n\r\n{chain}");
    }
    let err = run(chain.as_bytes()).unwrap_err().to_string();
    assert!(
        err.contains("300 attached messages declared, over the 256 read"),
        "{err}"
    );
}

#[test]
fn no_headers_a_cap_and_a_stop_end_the_message() {
    assert_eq!(run(b"").unwrap().text, "");
    let big = format!("Subject: long\r\n\r\n{}", "word ".repeat(10_000));
    let err = extract(
        &ExtractorRegistry::default(),
        big.as_bytes(),
        1000,
        &AtomicBool::new(false),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("passes the limit of 1000 bytes"),
        "{err}"
    );
    let err = extract(
        &ExtractorRegistry::default(),
        big.as_bytes(),
        NO_LIMIT,
        &AtomicBool::new(true),
    )
    .unwrap_err();
    assert!(matches!(err, ExtractError::Stopped), "{err}");
}
