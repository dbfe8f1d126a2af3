//! The frames parent and child exchange over the child's stdin and (duplicated) stdout.
//!
//! Every frame is `[u32 LE header length][u64 LE body length][JSON header][raw body]`. The
//! header is small and typed (serde); the body is the document's bytes (request) or the
//! extracted UTF-8 text (response) and is never escaped or copied into JSON. Both lengths come
//! first so a reader can refuse an oversized frame before reading any of it.

use std::io::{self, Read};

use serde::{Deserialize, Serialize};

use leasehold::extract::LimitKind;
use leasehold::extract::{ExtractError, Format};

/// Bytes before the header: its length (u32) and the body's length (u64).
pub(super) const PREFIX_LEN: usize = 12;

/// Largest header either side accepts. Headers hold a document name and a few numbers, or an
/// error reason; anything bigger is a broken peer.
pub(super) const MAX_HEADER_LEN: u32 = 64 * 1024;

/// Sent by the child in its greeting; a parent refuses a child that speaks another.
pub(super) const PROTOCOL_VERSION: u32 = 3;

/// What the parent asks of the child for one document.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Request {
    /// The document's name, used only for format detection by extension.
    pub name: String,
    /// The per-document limits the child enforces itself.
    pub max_output_bytes: u64,
    pub cpu_secs: u64,
}

/// The header of every frame the child sends: its answer, and the CPU time it had used when
/// it sent it. The parent keeps the latter as where the next document starts, so that at a
/// deadline it can tell a child that ran on the document from one that was stopped or
/// starved (see `ending`).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Reply {
    pub response: Response,
    /// User plus system CPU time of the whole child, in microseconds.
    pub cpu_us: u64,
}

/// The child's answers: one greeting when it is set up, then one per document (the text
/// itself travels as the body).
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Response {
    /// Sent once, after the protocol pipe, panic hook and limits are in place. Without it the
    /// program is not a leasehold child (a wrong path, an embedding program that does not
    /// dispatch [`CHILD_ARG`](super::CHILD_ARG)), which is no document's fault.
    Ready {
        protocol: u32,
    },
    /// The text follows the header; `note` is the registry's note of its decisions and
    /// `title` the document's own title (at most `MAX_TITLE_CHARS` characters, so the
    /// header stays far below [`MAX_HEADER_LEN`]), `author` its author (as bounded) and
    /// `date` its date (`YYYY-MM-DD` at most), `pages` and `language` its page count and
    /// language tag (35 characters at most). A child that sends none of them (an older
    /// build) means none, so the protocol's version did not change.
    Ok {
        note: Option<String>,
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        author: Option<String>,
        #[serde(default)]
        date: Option<String>,
        #[serde(default)]
        pages: Option<u32>,
        #[serde(default)]
        language: Option<String>,
    },
    Err(WireError),
}

/// [`ExtractError`] as it crosses the pipe. Kept separate so the public error type needs no
/// serde derive and so a child from another build cannot make the parent panic: an unknown
/// format name simply becomes `Unsupported`.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum WireError {
    TooLarge { size: u64, limit: u64 },
    Unsupported { reason: String },
    Malformed { format: String, reason: String },
    Stopped,
    OutputCap { cap: u64 },
}

impl WireError {
    pub(super) fn from_error(error: &ExtractError) -> Self {
        match error {
            ExtractError::TooLarge { size, limit } => WireError::TooLarge {
                size: *size,
                limit: *limit,
            },
            ExtractError::Malformed { format, reason } => WireError::Malformed {
                format: format.as_str().to_owned(),
                reason: reason.clone(),
            },
            ExtractError::Unsupported { reason } => WireError::Unsupported {
                reason: reason.clone(),
            },
            ExtractError::Stopped => WireError::Stopped,
            ExtractError::Limit {
                what: LimitKind::Output { cap },
            } => WireError::OutputCap { cap: *cap },
            other => WireError::Unsupported {
                reason: other.to_string(),
            },
        }
    }

    pub(super) fn into_error(self) -> ExtractError {
        match self {
            WireError::TooLarge { size, limit } => ExtractError::TooLarge { size, limit },
            WireError::Unsupported { reason } => ExtractError::Unsupported { reason },
            WireError::Malformed { format, reason } => match format_named(&format) {
                Some(format) => ExtractError::Malformed { format, reason },
                None => ExtractError::Unsupported { reason },
            },
            WireError::Stopped => ExtractError::Stopped,
            WireError::OutputCap { cap } => ExtractError::Limit {
                what: LimitKind::Output { cap },
            },
        }
    }
}

fn format_named(name: &str) -> Option<Format> {
    Format::from_name(name)
}

/// One whole frame in one buffer (the tests' way to build a frame).
#[cfg(test)]
pub(super) fn encode<H: Serialize>(header: &H, body: &[u8]) -> Vec<u8> {
    let mut frame = encode_head(header, body.len());
    frame.extend_from_slice(body);
    frame
}

/// The frame of `header` and `body` as two pieces to write one after the
/// other: a small body goes in one buffer with its header (one write), a
/// large one is left where it is (not copied, which would double what a
/// side holds of a large document or text).
pub(super) fn encode_split<'b, H: Serialize>(header: &H, body: &'b [u8]) -> (Vec<u8>, &'b [u8]) {
    let mut head = encode_head(header, body.len());
    if body.len() <= FRAME_INLINE {
        head.extend_from_slice(body);
        return (head, &[]);
    }
    (head, body)
}

/// The frame of `header` up to its body of `body_len` bytes.
fn encode_head<H: Serialize>(header: &H, body_len: usize) -> Vec<u8> {
    let json = serde_json::to_vec(header).expect("protocol headers always serialise");
    let mut frame = Vec::with_capacity(PREFIX_LEN + json.len() + body_len.min(FRAME_INLINE));
    frame.extend_from_slice(&(json.len() as u32).to_le_bytes());
    frame.extend_from_slice(&(body_len as u64).to_le_bytes());
    frame.extend_from_slice(&json);
    frame
}

/// Room kept for a small body after a header.
const FRAME_INLINE: usize = 64 * 1024;

/// Splits a frame prefix into (header length, body length).
pub(super) fn lengths(prefix: &[u8; PREFIX_LEN]) -> (u32, u64) {
    let header = u32::from_le_bytes(prefix[..4].try_into().expect("4 bytes"));
    let body = u64::from_le_bytes(prefix[4..].try_into().expect("8 bytes"));
    (header, body)
}

/// Reads one frame from a blocking reader (the child's side). `Ok(None)` is a clean end of
/// input between frames: the parent closed the pipe, so the child exits.
pub(super) fn read_frame<H: for<'de> Deserialize<'de>>(
    input: &mut impl Read,
    max_body: u64,
) -> io::Result<Option<(H, Vec<u8>)>> {
    let mut prefix = [0u8; PREFIX_LEN];
    match input.read_exact(&mut prefix) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let (header_len, body_len) = lengths(&prefix);
    if header_len > MAX_HEADER_LEN || body_len > max_body {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {header_len}+{body_len} bytes is over the limit"),
        ));
    }
    let mut header = vec![0u8; header_len as usize];
    input.read_exact(&mut header)?;
    let header =
        serde_json::from_slice(&header).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let mut body = vec![0u8; body_len as usize];
    input.read_exact(&mut body)?;
    Ok(Some((header, body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_frame_round_trips_with_raw_body() {
        let request = Request {
            name: "a.txt".into(),
            max_output_bytes: 10,
            cpu_secs: 3,
        };
        let frame = encode(&request, b"\0raw\xff");
        let (back, body): (Request, Vec<u8>) = read_frame(&mut &frame[..], 100).unwrap().unwrap();
        assert_eq!(back.name, "a.txt");
        assert_eq!((back.max_output_bytes, back.cpu_secs), (10, 3));
        assert_eq!(body, b"\0raw\xff");
        assert!(read_frame::<Request>(&mut &[][..], 100).unwrap().is_none());
    }

    #[test]
    fn oversized_body_is_refused_before_reading_it() {
        let frame = encode(
            &Response::Ok {
                note: None,
                title: None,
                author: None,
                date: None,
                pages: None,
                language: None,
            },
            &[b'x'; 64],
        );
        let err = read_frame::<Response>(&mut &frame[..], 63).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_title_crosses_in_the_header_and_an_absent_one_is_none() {
        let title = "\u{ac}".repeat(leasehold::extract::MAX_TITLE_CHARS);
        let ok = Response::Ok {
            note: Some("html, encoding UTF-8".into()),
            title: Some(title.clone()),
            author: Some(title.clone()),
            date: Some("2026-01-15".into()),
            pages: Some(1446),
            language: Some("en-US".into()),
        };
        let frame = encode(&ok, b"text");
        let (header_len, _) = lengths(frame[..PREFIX_LEN].try_into().unwrap());
        assert!(header_len < MAX_HEADER_LEN / 16, "{header_len}");
        let (back, body): (Response, Vec<u8>) = read_frame(&mut &frame[..], 4).unwrap().unwrap();
        assert!(matches!(
            back,
            Response::Ok { title: Some(ref t), author: Some(ref a), date: Some(ref d), pages: Some(1446), language: Some(ref l), .. }
                if *t == title && *a == title && d == "2026-01-15" && l == "en-US"
        ));
        assert_eq!(body, b"text");
        let old: Response = serde_json::from_str(r#"{"Ok":{"note":null}}"#).unwrap();
        assert!(matches!(
            old,
            Response::Ok {
                title: None,
                note: None,
                author: None,
                date: None,
                pages: None,
                language: None
            }
        ));
    }

    #[test]
    fn a_reply_carries_the_childs_cpu_time() {
        let reply = Reply {
            response: Response::Ready {
                protocol: PROTOCOL_VERSION,
            },
            cpu_us: 1234,
        };
        let frame = encode(&reply, b"");
        let (back, _): (Reply, Vec<u8>) = read_frame(&mut &frame[..], 0).unwrap().unwrap();
        assert_eq!(back.cpu_us, 1234);
        assert!(matches!(back.response, Response::Ready { protocol } if protocol == PROTOCOL_VERSION));
    }

    #[test]
    fn errors_keep_their_type_across_the_wire() {
        let malformed = ExtractError::Malformed {
            format: Format::Pdf,
            reason: "bad xref".into(),
        };
        let back = WireError::from_error(&malformed).into_error();
        assert!(
            matches!(back, ExtractError::Malformed { format: Format::Pdf, ref reason } if reason == "bad xref")
        );
        let back = WireError::from_error(&ExtractError::TooLarge { size: 9, limit: 8 }).into_error();
        assert!(matches!(back, ExtractError::TooLarge { size: 9, limit: 8 }));
        assert!(matches!(
            WireError::from_error(&ExtractError::Stopped).into_error(),
            ExtractError::Stopped
        ));
    }

    /// An unsupported document's message reads the same after the pipe: the
    /// reason crosses alone, not already prefixed with "unsupported document:".
    #[test]
    fn unsupported_reads_the_same_across_the_wire() {
        let unsupported = ExtractError::Unsupported {
            reason: "encrypted PDF that needs a password".into(),
        };
        let back = WireError::from_error(&unsupported).into_error();
        assert_eq!(back.to_string(), unsupported.to_string());
    }

    #[test]
    fn a_split_frame_is_the_whole_frame_in_two_pieces() {
        for len in [0, 10, FRAME_INLINE, FRAME_INLINE + 1, 3 * FRAME_INLINE] {
            let body = vec![7u8; len];
            let (head, rest) = encode_split(
                &Response::Ok {
                    note: None,
                    title: None,
                    author: None,
                    date: None,
                    pages: None,
                    language: None,
                },
                &body,
            );
            assert_eq!(
                [head.as_slice(), rest].concat(),
                encode(
                    &Response::Ok {
                        note: None,
                        title: None,
                        author: None,
                        date: None,
                        pages: None,
                        language: None,
                    },
                    &body
                )
            );
            // A large body is not copied.
            assert_eq!(rest.is_empty(), len <= FRAME_INLINE);
        }
    }
}
