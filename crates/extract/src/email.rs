//! E-mail messages (`.eml`: RFC 5322 with MIME), parsed by the `mail-parser` crate, which
//! decodes the transfer encodings, the character sets and the encoded headers; an HTML
//! body is read by the html family.
//!
//! The text is the message as a person reads it: its subject, sender, recipients and
//! date, its body, then each attachment under a line naming it, read by the attachment's
//! own format through the registry (a PDF, a DOCX...). A message attached to a message is
//! read the same way, up to [`MAX_NESTED`] deep. An attachment that cannot be read is named
//! with the reason and costs the message nothing else. The subject is the title, the
//! sender the author, the `Date:` header the date.
//!
//! A MIME bomb stays bounded by what reads it: only [`MAX_ATTACHMENTS`] attachments are
//! read, messages nest only so deep, the text is held to the same cap as a container's,
//! and the child's memory limit and deadline hold the parser (which splits every part
//! before anything is read) like any other.

use std::sync::atomic::AtomicBool;

use mail_parser::{Addr, Message, MessageParser, MessagePart, MimeHeaders};

use super::text::{Decoded, Meta};
use super::title::{clean_date, TitleText};
use super::{check_stop, ExtractError, ExtractorRegistry, Format};

/// Attachments read at most; the others are named as left out.
const MAX_ATTACHMENTS: usize = 256;
/// Messages inside messages read at most this deep.
const MAX_NESTED: usize = 4;

/// The text of a message; attachments go through `registry`, the whole stays within
/// `max_text` bytes.
pub(super) fn extract(
    registry: &ExtractorRegistry,
    bytes: &[u8],
    max_text: u64,
    stop: &AtomicBool,
) -> Result<Decoded, ExtractError> {
    let message = parse(bytes)?;
    let mut out = String::new();
    write_message(registry, &message, 0, stop, &mut out)?;
    if out.len() as u64 > max_text {
        return Err(ExtractError::malformed(
            Format::Email,
            format!("extracted text passes the limit of {max_text} bytes"),
        ));
    }
    out.truncate(out.trim_end().len());
    let meta = Meta {
        title: words(message.subject()),
        author: message
            .from()
            .and_then(|from| words(from.first().and_then(addr_name))),
        date: message.date().and_then(|date| clean_date(&date.to_rfc3339())),
    };
    Ok(Decoded::described(out, meta))
}

fn parse(bytes: &[u8]) -> Result<Message<'_>, ExtractError> {
    MessageParser::default()
        .parse(bytes)
        .filter(|message| !message.headers().is_empty())
        .ok_or_else(|| ExtractError::malformed(Format::Email, "no message headers"))
}

/// Appends one message: its headers, its body, its attachments.
fn write_message(
    registry: &ExtractorRegistry,
    message: &Message<'_>,
    depth: usize,
    stop: &AtomicBool,
    out: &mut String,
) -> Result<(), ExtractError> {
    check_stop(stop)?;
    if let Some(subject) = message.subject() {
        out.push_str(&format!("Subject: {subject}\n"));
    }
    for (label, list) in [
        ("From", message.from()),
        ("To", message.to()),
        ("Cc", message.cc()),
    ] {
        let names: Vec<&str> = list
            .into_iter()
            .flat_map(|l| l.iter())
            .filter_map(addr_name)
            .collect();
        if !names.is_empty() {
            out.push_str(&format!("{label}: {}\n", names.join(", ")));
        }
    }
    if let Some(date) = message.date() {
        out.push_str(&format!("Date: {}\n", date.to_rfc3339()));
    }
    out.push('\n');
    for body in message.text_bodies() {
        check_stop(stop)?;
        write_part(registry, body, "body", depth, stop, out)?;
    }
    for (n, part) in message.attachments().enumerate() {
        check_stop(stop)?;
        if n == MAX_ATTACHMENTS {
            out.push_str(&format!(
                "\n[attachments past the first {MAX_ATTACHMENTS} are not read]\n"
            ));
            break;
        }
        let name = part.attachment_name().unwrap_or("attachment");
        out.push_str(&format!("\n[attachment: {name}]\n"));
        write_part(registry, part, name, depth, stop, out)?;
    }
    Ok(())
}

/// Appends one part: a message nests (so deep), plain text is itself, anything else
/// (HTML, a PDF, a DOCX...) is read by its own format; what cannot be read is named
/// with the reason.
fn write_part(
    registry: &ExtractorRegistry,
    part: &MessagePart<'_>,
    name: &str,
    depth: usize,
    stop: &AtomicBool,
    out: &mut String,
) -> Result<(), ExtractError> {
    let attached;
    let nested = match part.message() {
        Some(nested) => Some(nested),
        // A message attached as a file (not as `message/rfc822`) is a message all the
        // same, and nests as one: the registry would read it with no bound on the depth.
        None if registry.detect(name, part.contents()).ok() == Some(Format::Email) => {
            attached = parse(part.contents()).ok();
            attached.as_ref()
        }
        None => None,
    };
    if let Some(nested) = nested {
        if depth + 1 < MAX_NESTED {
            return write_message(registry, nested, depth + 1, stop, out);
        }
        out.push_str("[a message nested too deep: not read]\n");
        return Ok(());
    }
    if part.is_text() && !part.is_text_html() {
        out.push_str(part.text_contents().unwrap_or_default());
        out.push('\n');
        return Ok(());
    }
    let name = if part.is_text_html() { "part.html" } else { name };
    match registry.extract_detailed(name, part.contents(), stop) {
        Ok(read) => {
            out.push_str(&read.text);
            out.push('\n');
        }
        Err(ExtractError::Stopped) => return Err(ExtractError::Stopped),
        Err(why) => out.push_str(&format!("[not read: {why}]\n")),
    }
    Ok(())
}

/// An address as a person reads it: the name, else the address.
fn addr_name<'a>(addr: &'a Addr<'_>) -> Option<&'a str> {
    addr.name().or(addr.address())
}

/// A header as a title or author: cleaned, bounded, no placeholder.
fn words(raw: Option<&str>) -> Option<String> {
    let mut text = TitleText::default();
    text.push_str(raw?);
    text.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

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
            "[attachment: blueball.png]\n[not read: ",
        ] {
            assert!(read.text.contains(words), "{words:?} in {}", read.text);
        }
        assert_eq!(read.title.as_deref(), Some("Die Hasen und die Frösche"));
        assert_eq!(read.author.as_deref(), Some("Doug Sauder"));
        assert_eq!(read.date.as_deref(), Some("2000-05-19"));
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

    #[test]
    fn no_headers_a_cap_and_a_stop_end_the_message() {
        let err = run(b"").unwrap_err();
        assert!(err.to_string().contains("no message headers"), "{err}");
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
}
