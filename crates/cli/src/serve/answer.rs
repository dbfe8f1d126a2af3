//! What a route answers, and the HTTP response it becomes, with the headers
//! every answer carries.

use http_body_util::{Either, Full};
use hyper::body::Bytes;

use super::file_body::FileBody;

/// An answer before it is sent.
pub struct Answer {
    pub(super) status: u16,
    content_type: String,
    body: Body,
    headers: Vec<(String, String)>,
}

/// What an answer carries: bytes made for it, or a file's first bytes, read
/// as they are sent (`file_body.rs`).
enum Body {
    Bytes(Vec<u8>),
    File { file: std::fs::File, len: u64 },
}

/// The body of a response: [`Answer`]'s bytes, or a file's read in pieces.
pub(super) type ResponseBody = Either<Full<Bytes>, FileBody>;

impl Answer {
    pub(super) fn bytes(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            status,
            content_type: content_type.to_owned(),
            body: Body::Bytes(body.into()),
            headers: Vec::new(),
        }
    }

    /// The first `len` bytes of `file`, from where it stands, sent as the
    /// client reads them.
    pub(super) fn file(status: u16, content_type: &str, file: std::fs::File, len: u64) -> Answer {
        Answer {
            status,
            content_type: content_type.to_owned(),
            body: Body::File { file, len },
            headers: Vec::new(),
        }
    }

    pub(super) fn json(status: u16, value: &serde_json::Value) -> Answer {
        Answer::bytes(status, "application/json", value.to_string())
    }

    /// A refusal or failure: `{"error": why}`, which the pages show.
    pub(super) fn problem(status: u16, why: &str) -> Answer {
        Answer::json(status, &serde_json::json!({ "error": why }))
    }

    pub(super) fn problem_owned(status: u16, why: String) -> Answer {
        Answer::problem(status, &why)
    }

    pub(super) fn header(&mut self, name: &str, value: &str) {
        self.headers.push((name.to_owned(), value.to_owned()));
    }
}

/// Headers every answer carries: no framing, no sniffing, no cache, no
/// referrer (an address may hold the token), and for the pages a policy
/// that runs only their own script.
const ALWAYS: [(&str, &str); 5] = [
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-store"),
    ("Referrer-Policy", "no-referrer"),
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
];

/// The HTTP response of `answer` (hyper leaves a `HEAD`'s body out and still
/// says its length).
pub(super) fn response(answer: Answer) -> hyper::Response<ResponseBody> {
    // An original's own policy replaces the pages' one.
    let own_policy = |name: &str| answer.headers.iter().any(|(n, _)| n == name);
    let mut builder = hyper::Response::builder().status(answer.status);
    let headers = ALWAYS
        .iter()
        .filter(|(name, _)| !own_policy(name))
        .map(|(n, v)| (*n, *v))
        .chain([("Content-Type", answer.content_type.as_str())])
        .chain(answer.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    let body = match answer.body {
        Body::Bytes(bytes) => Either::Left(Full::new(Bytes::from(bytes))),
        Body::File { file, len } => Either::Right(FileBody::new(file, len)),
    };
    builder.body(body).unwrap_or_else(|_| {
        // A header value the answer made that HTTP cannot carry.
        let mut refused = hyper::Response::new(Either::Left(Full::new(Bytes::new())));
        *refused.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        refused
    })
}
