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
use super::title::{clean_date, clean_title};
use crate::stop::check_stop;
use leasehold::extract::Extraction;
use leasehold::extract::{ExtractError, Format};

/// Attachments read at most; the others are named as left out.
const MAX_ATTACHMENTS: usize = 256;
/// Messages inside messages read at most this deep.
const MAX_NESTED: usize = 4;
/// `message/rfc822` parts a message may declare at most: the parser nests plain (not
/// transfer-encoded) attached messages without a bound, and each level costs its stack
/// when the parsed tree is dropped, so a hostile chain of them is refused unparsed.
const MAX_DECLARED_MESSAGES: usize = 256;
/// The headers that make a file a message; without one, a file named `.eml` is text.
const MESSAGE_HEADERS: [&str; 6] = [
    "from",
    "date",
    "subject",
    "message-id",
    "received",
    "mime-version",
];

/// What reads an attachment by its own format: the registry, handed in by
/// its caller, so this reader knows no format but e-mail.
pub(crate) trait ReadsParts {
    /// The format of the part `name` holding `bytes`.
    fn detect(&self, name: &str, bytes: &[u8]) -> Result<Format, ExtractError>;
    /// The text of the part `name` holding `bytes`.
    fn extract_detailed(
        &self,
        name: &str,
        bytes: &[u8],
        stop: &AtomicBool,
    ) -> Result<Extraction, ExtractError>;
}

/// The text of a message; attachments go through `registry`, the whole stays within
/// `max_text` bytes.
pub(super) fn extract(
    registry: &dyn ReadsParts,
    bytes: &[u8],
    max_text: u64,
    stop: &AtomicBool,
) -> Result<Decoded, ExtractError> {
    let unwrapped = from_mailbox(bytes);
    let bytes = unwrapped.as_deref().unwrap_or(bytes);
    let message = match parse(bytes)? {
        Some(message) => message,
        // Headers were all it lacked: read it as the text it is.
        None => return Ok(super::text::extract(bytes)),
    };
    let mut writer = Writer {
        registry,
        stop,
        max_text,
        out: String::new(),
    };
    writer.message(&message, 0)?;
    let mut out = writer.out;
    out.truncate(out.trim_end().len());
    let meta = Meta {
        title: message.subject().and_then(clean_title),
        author: message
            .from()
            .and_then(|from| clean_title(from.first().and_then(|a| a.name().or(a.address()))?)),
        date: message.date().and_then(|date| clean_date(&date.to_rfc3339())),
        ..Meta::default()
    };
    Ok(Decoded::described(out, meta))
}

/// A message cut from a mailbox (a message of an mbox, or one saved with its
/// envelope, as Thunderbird's "Save as" writes `From - <date>`) starts with the
/// mailbox's `From ` line, and the writer escaped the lines of its own that start so
/// (`>From `, `>>From ` for an escaped one): the message without the envelope line and
/// with one `>` taken off each such line. `None` for a bare message. Not mail-parser's
/// mbox reader: it would end the message at a `From ` line a saved message left
/// unescaped, and lose the rest.
fn from_mailbox(bytes: &[u8]) -> Option<Vec<u8>> {
    if !bytes.starts_with(b"From ") {
        return None;
    }
    let body = bytes
        .iter()
        .position(|&b| b == b'\n')
        .map_or(&[][..], |end| &bytes[end + 1..]);
    let mut out = Vec::with_capacity(body.len());
    for line in body.split_inclusive(|&b| b == b'\n') {
        let quotes = line.iter().take_while(|&&b| b == b'>').count();
        let escaped = quotes > 0 && line[quotes..].starts_with(b"From ");
        out.extend_from_slice(if escaped { &line[1..] } else { line });
    }
    Some(out)
}

/// The message in `bytes`, or `None` when it has none of [`MESSAGE_HEADERS`]; a chain
/// of more than [`MAX_DECLARED_MESSAGES`] attached messages is refused before parsing.
fn parse(bytes: &[u8]) -> Result<Option<Message<'_>>, ExtractError> {
    let declared = count_ignoring_case(bytes, b"message/rfc822");
    if declared > MAX_DECLARED_MESSAGES {
        return Err(ExtractError::malformed(
            Format::Email,
            format!("{declared} attached messages declared, over the {MAX_DECLARED_MESSAGES} read"),
        ));
    }
    Ok(MessageParser::default().parse(bytes).filter(|message| {
        message.headers().iter().any(|h| {
            MESSAGE_HEADERS
                .iter()
                .any(|name| h.name().eq_ignore_ascii_case(name))
        })
    }))
}

/// How many times `needle` occurs in `bytes`, any ASCII case.
fn count_ignoring_case(bytes: &[u8], needle: &[u8]) -> usize {
    bytes
        .windows(needle.len())
        .filter(|w| w.eq_ignore_ascii_case(needle))
        .count()
}

/// The text being written, and what every part needs to be read.
struct Writer<'r> {
    registry: &'r dyn ReadsParts,
    stop: &'r AtomicBool,
    max_text: u64,
    out: String,
}

impl Writer<'_> {
    /// Appends `text` and a line break, within the cap.
    fn push(&mut self, text: &str) -> Result<(), ExtractError> {
        self.out.push_str(text);
        self.out.push('\n');
        if self.out.len() as u64 > self.max_text {
            return Err(ExtractError::malformed(
                Format::Email,
                format!("extracted text passes the limit of {} bytes", self.max_text),
            ));
        }
        Ok(())
    }

    /// One message: its headers, its body, its attachments.
    fn message(&mut self, message: &Message<'_>, depth: usize) -> Result<(), ExtractError> {
        check_stop(self.stop)?;
        if let Some(subject) = message.subject() {
            self.push(&format!("Subject: {subject}"))?;
        }
        for (label, list) in [
            ("From", message.from()),
            ("To", message.to()),
            ("Cc", message.cc()),
        ] {
            let people: Vec<String> = list
                .into_iter()
                .flat_map(|l| l.iter())
                .filter_map(person)
                .collect();
            if !people.is_empty() {
                self.push(&format!("{label}: {}", people.join(", ")))?;
            }
        }
        if let Some(date) = message.date() {
            self.push(&format!("Date: {}", date.to_rfc3339()))?;
        }
        self.push("")?;
        // Inline images and the like are in the body's list too; they are read once,
        // as attachments.
        for body in message.text_bodies().filter(|part| part.is_text()) {
            check_stop(self.stop)?;
            self.part(body, "body", depth)?;
        }
        for (n, part) in message.attachments().enumerate() {
            check_stop(self.stop)?;
            if n == MAX_ATTACHMENTS {
                return self.push(&format!(
                    "\n[attachments past the first {MAX_ATTACHMENTS} are not read]"
                ));
            }
            let name = part.attachment_name().unwrap_or("attachment");
            self.push(&format!("\n[attachment: {name}]"))?;
            self.part(part, name, depth)?;
        }
        Ok(())
    }

    /// One part: a message nests (so deep), plain text is itself, anything else (HTML,
    /// a PDF, a DOCX...) is read by its own format; what cannot be read is named with
    /// the reason.
    fn part(&mut self, part: &MessagePart<'_>, name: &str, depth: usize) -> Result<(), ExtractError> {
        let attached;
        let nested = match part.message() {
            Some(nested) => Some(nested),
            // A message attached as a file (not as `message/rfc822`) is a message all the
            // same, and nests as one: the registry would read it with no bound on the depth.
            None if self.registry.detect(name, part.contents()).ok() == Some(Format::Email) => {
                attached = parse(part.contents()).ok().flatten();
                attached.as_ref()
            }
            None => None,
        };
        if let Some(nested) = nested {
            if depth + 1 < MAX_NESTED {
                return self.message(nested, depth + 1);
            }
            return self.push("[a message nested too deep: not read]");
        }
        if is_plain_text(part) {
            return self.push(part.text_contents().unwrap_or_default());
        }
        let read = if part.is_text_html() {
            // Decoded to UTF-8 already: a byte-order mark says so over the page's own
            // `<meta charset>`, which names the charset it was sent in.
            let html = [b"\xEF\xBB\xBF".as_slice(), part.contents()].concat();
            self.registry.extract_detailed("part.html", &html, self.stop)
        } else {
            self.registry.extract_detailed(name, part.contents(), self.stop)
        };
        match read {
            Ok(read) => self.push(&read.text),
            Err(ExtractError::Stopped) => Err(ExtractError::Stopped),
            Err(why) => self.push(&format!("[not read: {why}]")),
        }
    }
}

/// A `text/plain` part, or a text part that names no type (plain by default): written
/// as it is. Other text (`text/rtf`, `text/xml`) is read by its format.
fn is_plain_text(part: &MessagePart<'_>) -> bool {
    match part.content_type() {
        Some(kind) => {
            kind.ctype().eq_ignore_ascii_case("text")
                && kind.subtype().is_none_or(|sub| sub.eq_ignore_ascii_case("plain"))
        }
        None => part.is_text(),
    }
}

/// A person as a header names them: `Name <address>`, or whichever of the two it gives.
fn person(addr: &Addr<'_>) -> Option<String> {
    match (addr.name(), addr.address()) {
        (Some(name), Some(address)) => Some(format!("{name} <{address}>")),
        (name, address) => name.or(address).map(str::to_owned),
    }
}

#[cfg(test)]
mod tests;
