//! The synchronous HTTP client for the upstream API: listing documents,
//! fetching their bytes (the HTTP source) and posting extracted text back
//! (the HTTP sink), and reading every answer into one typed [`UpstreamError`]
//! so the caller can decide between "retry later", "pause this account" and
//! "give up on this request".
//!
//! # Credentials
//! Every request carries `Authorization: Basic base64(username:password)`.
//! Credentials never go into a URL: URLs end up in logs, error messages,
//! proxies' access logs and ureq's own error text, and a password there would
//! break DESIGN §7 (secrets are never logged or shown). A base URL that carries
//! `user:pass@` is refused for the same reason. The password is read through
//! [`Secret::expose`] in one place (`Account::authorization`), and every
//! `detail` string is scrubbed of it (and of the encoded header value) in case
//! a server echoes it back.
//!
//! # Why these error classes
//! The worker reacts to the class, not to the status code:
//! - [`UpstreamError::Auth`] / [`UpstreamError::Locked`] are credential
//!   problems: retrying with the same password would only lock the account
//!   (further), so the account is paused instead.
//! - [`UpstreamError::RateLimited`] / [`UpstreamError::Transient`] are worth
//!   retrying, after `Retry-After` when the server gave one.
//! - [`UpstreamError::Rejected`], [`UpstreamError::Protocol`] and
//!   [`UpstreamError::TooLarge`] are permanent for that request.
//!
//! # Transport
//! `https://` needs ureq's `tls` feature (see `Cargo.toml`). Without it an
//! https URL fails with [`UpstreamError::Protocol`] ("unknown scheme"), as
//! does any URL that can never be requested, rather than being retried
//! forever as [`UpstreamError::Transient`]. Redirects are not followed: a
//! redirect would either carry the password to another host or lose it, and
//! the API has no reason to redirect, so a 3xx is a [`UpstreamError::Rejected`].

use std::io::Read;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::secret::Secret;

/// Longest `detail` string, in characters: enough to recognise a server's
/// message, short enough for a log line.
const DETAIL_CHARS: usize = 200;

/// How much of an error response's body is read (for `detail` and for
/// spotting "locked"); the rest is left unread.
const ERROR_BODY_LIMIT: u64 = 4096;

/// Largest listing page accepted. A page is 50-odd small records; anything
/// near this size is a broken or hostile server, not a listing.
const LIST_BODY_LIMIT: u64 = 16 * 1024 * 1024;

/// One upstream account: a configured name (what logs and notices show) and
/// the credentials sent as HTTP Basic auth.
#[derive(Clone, Debug)]
pub struct Account {
    /// The account's name in the configuration; shown in errors and notices.
    pub name: String,
    /// The Basic-auth user name. RFC 7617 forbids `:` in it.
    pub username: String,
    /// The Basic-auth password; never printed.
    pub password: Secret,
}

impl Account {
    /// An account named `name` in the configuration, logging in as `username`.
    pub fn new(name: impl Into<String>, username: impl Into<String>, password: Secret) -> Account {
        Account {
            name: name.into(),
            username: username.into(),
            password,
        }
    }

    /// The `Authorization` header value. The only place the password is
    /// exposed.
    fn authorization(&self) -> String {
        format!("Basic {}", self.basic_token())
    }

    fn basic_token(&self) -> String {
        let pair = format!("{}:{}", self.username, self.password.expose());
        base64::engine::general_purpose::STANDARD.encode(pair)
    }

    /// `text` with the password and the encoded credentials replaced by
    /// `***`, for strings that came from the server or the transport.
    fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in [self.password.expose().to_string(), self.basic_token()] {
            if !secret.is_empty() {
                out = out.replace(&secret, "***");
            }
        }
        out
    }
}

/// One listed document: what to fetch and which version it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentRef {
    /// The API's id for the document; it becomes the document key and is what
    /// [`HttpClient::content`] fetches.
    pub id: String,
    /// The API's version of the document; a new one re-queues it.
    pub version: String,
    /// The document's display name, as the API gives it.
    pub name: String,
    /// The MIME type the API declares for it.
    pub content_type: String,
}

/// One page of the listing. `next_cursor` is `None` on the last page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// The documents of this page, in the API's order.
    pub documents: Vec<DocumentRef>,
    /// Opaque; passed back verbatim. Absent, `null` and `""` all mean "no
    /// more pages" (an empty cursor would otherwise restart the listing).
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// One extracted result posted to the sink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The document key (the API's document id).
    pub key: String,
    /// The source version the text was extracted from.
    pub version: String,
    /// The SHA-256 of the accepted result.
    pub checksum: String,
    /// The extracted text.
    pub text: String,
}

/// The body of a sink POST.
#[derive(Serialize)]
struct Batch<'a> {
    results: &'a [Delivery],
}

/// How a request to the upstream API failed. `detail` strings are short
/// (at most ~200 characters) and never contain the password.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// 401: the credentials were refused. Retrying would not help and may
    /// lock the account.
    #[error("account {account}: credentials refused (HTTP {status}): {detail}")]
    Auth {
        /// The account's configured name.
        account: String,
        /// The HTTP status (401).
        status: u16,
        /// The server's message or the transport's error, shortened and scrubbed of credentials.
        detail: String,
    },
    /// 423, or a 403 that says "locked": the account is locked upstream.
    #[error("account {account}: locked upstream{}: {detail}", retry_note(.retry_after))]
    Locked {
        /// The account's configured name.
        account: String,
        /// How long the upstream said the lock lasts, if it said.
        retry_after: Option<Duration>,
        /// The server's message or the transport's error, shortened and scrubbed of credentials.
        detail: String,
    },
    /// 429: too many requests; wait `retry_after` if given.
    #[error("rate limited upstream{}", retry_note(.retry_after))]
    RateLimited {
        /// The `Retry-After` the upstream sent, if any.
        retry_after: Option<Duration>,
    },
    /// 5xx, timeouts, refused or reset connections: worth retrying.
    #[error("upstream unavailable: {detail}")]
    Transient {
        /// The server's message or the transport's error, shortened and scrubbed of credentials.
        detail: String,
    },
    /// Any other non-2xx answer (404, 400, 3xx, …): permanent for this request.
    #[error("upstream rejected the request (HTTP {status}): {detail}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The server's message or the transport's error, shortened and scrubbed of credentials.
        detail: String,
    },
    /// A 2xx whose body is unusable, or a URL that cannot be requested at
    /// all (bad syntax, https without TLS support, credentials in it).
    #[error("upstream protocol error: {detail}")]
    Protocol {
        /// What was wrong with the answer or the URL.
        detail: String,
    },
    /// The content is larger than the caller's limit. `size` is the declared
    /// `Content-Length` when there was one, else the bytes read before
    /// stopping (`limit + 1`), i.e. a lower bound.
    #[error("document too large: {size} bytes, limit {limit}")]
    TooLarge {
        /// The declared or lower-bound size, in bytes (see above).
        size: u64,
        /// The caller's limit, in bytes.
        limit: u64,
    },
}

impl UpstreamError {
    /// The account's credentials are the problem (refused or locked): pause
    /// the account rather than retry.
    pub fn is_credential_problem(&self) -> bool {
        matches!(self, UpstreamError::Auth { .. } | UpstreamError::Locked { .. })
    }

    /// Worth retrying later with the same request.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            UpstreamError::Transient { .. } | UpstreamError::RateLimited { .. }
        )
    }

    /// The server's `Retry-After`, for the variants that carry one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            UpstreamError::Locked { retry_after, .. } | UpstreamError::RateLimited { retry_after } => {
                *retry_after
            }
            _ => None,
        }
    }
}

/// ` (retry after 7s)` or nothing, for the error messages.
fn retry_note(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(" (retry after {})", humantime::format_duration(*d)),
        None => String::new(),
    }
}

/// The blocking client. Cheap to clone: clones share one connection pool.
#[derive(Clone, Debug)]
pub struct HttpClient {
    agent: ureq::Agent,
    timeout: Duration,
}

impl HttpClient {
    /// A client whose every request (connect, send, and reading the whole
    /// answer) must finish within `timeout`; past it the request fails as
    /// [`UpstreamError::Transient`].
    pub fn new(timeout: Duration) -> HttpClient {
        HttpClient {
            agent: agent(timeout),
            timeout,
        }
    }

    /// The per-request timeout this client was built with.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `GET {base_url}/documents[?cursor=C]`: one page of the listing. The
    /// first page is asked for without a cursor.
    pub fn list(
        &self,
        base_url: &str,
        account: &Account,
        cursor: Option<&str>,
    ) -> Result<Page, UpstreamError> {
        let url = endpoint(base_url, &["documents"])?;
        let mut request = self.request("GET", &url, account);
        if let Some(cursor) = cursor {
            request = request.query("cursor", cursor);
        }
        let response = answer(request.call(), account)?;
        let body = read_at_most(response, LIST_BODY_LIMIT + 1).map_err(|e| read_failed(&e, account))?;
        if body.len() as u64 > LIST_BODY_LIMIT {
            return Err(UpstreamError::Protocol {
                detail: format!("listing page larger than {LIST_BODY_LIMIT} bytes"),
            });
        }
        parse_page(&body)
    }

    /// `GET {base_url}/documents/{id}/content`: the document's bytes. At most
    /// `max_bytes + 1` bytes are ever read; more than `max_bytes` is
    /// [`UpstreamError::TooLarge`]. `id` is percent-encoded into one path
    /// segment, so ids with `/`, spaces or `?` are safe.
    pub fn content(
        &self,
        base_url: &str,
        account: &Account,
        id: &str,
        max_bytes: u64,
    ) -> Result<Vec<u8>, UpstreamError> {
        let url = endpoint(base_url, &["documents", id, "content"])?;
        let response = answer(self.request("GET", &url, account).call(), account)?;
        if let Some(size) = declared_length(&response).filter(|&size| size > max_bytes) {
            return Err(UpstreamError::TooLarge {
                size,
                limit: max_bytes,
            });
        }
        let body =
            read_at_most(response, max_bytes.saturating_add(1)).map_err(|e| read_failed(&e, account))?;
        match body.len() as u64 {
            size if size > max_bytes => Err(UpstreamError::TooLarge {
                size,
                limit: max_bytes,
            }),
            _ => Ok(body),
        }
    }

    /// `POST {url}` with `{"results": [...]}`. Any 2xx means delivered; the
    /// answer's body is not looked at.
    pub fn deliver(&self, url: &str, account: &Account, results: &[Delivery]) -> Result<(), UpstreamError> {
        refuse_userinfo(url)?;
        let body = serde_json::to_vec(&Batch { results }).map_err(|e| UpstreamError::Protocol {
            detail: short(&format!("cannot encode results: {e}")),
        })?;
        let request = self
            .request("POST", url, account)
            .set("Content-Type", "application/json");
        let response = answer(request.send_bytes(&body), account)?;
        // Drain a little so the connection can go back to the pool; a failure
        // here does not undo the delivery the status already confirmed.
        let _ = read_at_most(response, ERROR_BODY_LIMIT);
        Ok(())
    }

    /// A request with the account's credentials attached.
    fn request(&self, method: &str, url: &str, account: &Account) -> ureq::Request {
        self.agent
            .request(method, url)
            .set("Authorization", &account.authorization())
            .set("Accept", "application/json, */*")
    }
}

/// The 2xx response, or the error the answer means.
fn answer(
    result: Result<ureq::Response, ureq::Error>,
    account: &Account,
) -> Result<ureq::Response, UpstreamError> {
    match result {
        Ok(response) if (200..300).contains(&response.status()) => Ok(response),
        Ok(response) | Err(ureq::Error::Status(_, response)) => Err(status_error(response, account)),
        Err(ureq::Error::Transport(transport)) => Err(transport_error(&transport, account)),
    }
}

/// Reads what a non-2xx answer says and classifies it.
fn status_error(response: ureq::Response, account: &Account) -> UpstreamError {
    let status = response.status();
    let retry_after = response.header("Retry-After").and_then(parse_retry_after);
    let headers_locked = headers_say_locked(&response);
    let status_text = response.status_text().to_string();
    let body = read_at_most(response, ERROR_BODY_LIMIT).unwrap_or_default();
    let body = String::from_utf8_lossy(&body);
    let text = if body.trim().is_empty() {
        status_text.as_str()
    } else {
        body.trim()
    };
    let answer = Answer {
        status,
        retry_after,
        locked: headers_locked || says_locked(&body),
        detail: short(&account.scrub(text)),
    };
    classify(answer, account)
}

/// The parts of a non-2xx answer that decide its class.
struct Answer {
    status: u16,
    retry_after: Option<Duration>,
    /// The body or a header says the account is locked.
    locked: bool,
    /// Short, scrubbed text for the error.
    detail: String,
}

/// Status code (and, for 403, what the answer says) → error class.
fn classify(answer: Answer, account: &Account) -> UpstreamError {
    let Answer {
        status,
        retry_after,
        locked,
        detail,
    } = answer;
    let account = account.name.clone();
    match status {
        401 => UpstreamError::Auth {
            account,
            status,
            detail,
        },
        423 => UpstreamError::Locked {
            account,
            retry_after,
            detail,
        },
        403 if locked => UpstreamError::Locked {
            account,
            retry_after,
            detail,
        },
        429 => UpstreamError::RateLimited { retry_after },
        500..=599 => UpstreamError::Transient {
            detail: format!("HTTP {status}: {detail}"),
        },
        _ => UpstreamError::Rejected { status, detail },
    }
}

/// Connection problems are transient; a URL that can never be requested is
/// not.
fn transport_error(transport: &ureq::Transport, account: &Account) -> UpstreamError {
    let detail = short(&account.scrub(&transport.to_string()));
    match transport.kind() {
        ureq::ErrorKind::InvalidUrl
        | ureq::ErrorKind::UnknownScheme
        | ureq::ErrorKind::InsecureRequestHttpsOnly => UpstreamError::Protocol { detail },
        _ => UpstreamError::Transient { detail },
    }
}

/// A body that broke off mid-read (timeout, reset) is worth retrying.
fn read_failed(error: &std::io::Error, account: &Account) -> UpstreamError {
    UpstreamError::Transient {
        detail: short(&account.scrub(&format!("reading the answer: {error}"))),
    }
}

/// Up to `limit` bytes of the body; never more, whatever the server sends.
fn read_at_most(response: ureq::Response, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    response.into_reader().take(limit).read_to_end(&mut body)?;
    Ok(body)
}

/// The `Content-Length` the server declared, if it is a number.
fn declared_length(response: &ureq::Response) -> Option<u64> {
    response.header("Content-Length")?.trim().parse().ok()
}

/// A listing page, or `Protocol` naming what is wrong with it.
fn parse_page(body: &[u8]) -> Result<Page, UpstreamError> {
    let mut page: Page = serde_json::from_slice(body).map_err(|e| UpstreamError::Protocol {
        detail: short(&format!("unreadable listing: {e}")),
    })?;
    if page.next_cursor.as_deref() == Some("") {
        page.next_cursor = None;
    }
    Ok(page)
}

/// The HTTP agent of every leasehold request: `timeout` for the whole request,
/// no redirects (a redirected POST may become a GET or be re-sent elsewhere;
/// the operator fixes the URL instead), leasehold's user agent.
pub(crate) fn agent(timeout: Duration) -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(timeout)
        .redirects(0)
        .user_agent(concat!("leasehold/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// `Retry-After` as delta-seconds. The HTTP-date form is not parsed and, like
/// anything else unreadable, gives `None`: the caller's own backoff applies.
fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Whether any header name or value says "locked".
fn headers_say_locked(response: &ureq::Response) -> bool {
    response
        .headers_names()
        .iter()
        .any(|name| says_locked(name) || response.all(name).iter().any(|value| says_locked(value)))
}

/// Whether `text` says "locked" as a word, case-insensitively: `account
/// locked`, `ACCOUNT_LOCKED`, `AccountLocked` do; `unlocked` and `blocked` do
/// not (a firewall's "request blocked" 403 is not a locked account, and
/// pausing an account for it would be wrong).
fn says_locked(text: &str) -> bool {
    let bytes = text.as_bytes();
    let lower = text.to_ascii_lowercase();
    lower
        .match_indices("locked")
        .any(|(at, _)| starts_word(bytes, at))
}

/// Whether a word starts at byte `at`: at the start, after a non-letter, or
/// at a camel-case hump (`accountLocked`), but not right after `un`.
fn starts_word(bytes: &[u8], at: usize) -> bool {
    if at >= 2 && bytes[at - 2..at].eq_ignore_ascii_case(b"un") {
        return false;
    }
    match at.checked_sub(1).map(|i| bytes[i]) {
        None => true,
        Some(before) if !before.is_ascii_alphabetic() => true,
        Some(before) => before.is_ascii_lowercase() && bytes[at].is_ascii_uppercase(),
    }
}

/// `base_url` joined with path `segments`, each percent-encoded. Trailing
/// slashes on the base are ignored, so `http://x/` and `http://x` agree.
fn endpoint(base_url: &str, segments: &[&str]) -> Result<String, UpstreamError> {
    refuse_userinfo(base_url)?;
    let mut url = base_url.trim_end_matches('/').to_string();
    for segment in segments {
        url.push('/');
        url.push_str(&percent_encode(segment));
    }
    Ok(url)
}

/// Refuses `scheme://user:pass@host` URLs: credentials belong in the
/// account, and a URL is printed in errors.
fn refuse_userinfo(url: &str) -> Result<(), UpstreamError> {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(UpstreamError::Protocol {
            detail: "credentials in a URL are refused; put them in the account".to_string(),
        });
    }
    Ok(())
}

/// RFC 3986 percent-encoding of everything but the unreserved characters,
/// so a value is always exactly one path segment.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for &byte in value.as_bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Control characters (newlines, terminal escapes) from upstream text would
/// break a one-line log format or the operator's terminal.
pub(crate) fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// At most [`DETAIL_CHARS`] characters of `text`, on one line.
fn short(text: &str) -> String {
    let one_line = one_line(text);
    let mut chars = one_line.char_indices();
    match chars.nth(DETAIL_CHARS) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> Account {
        Account::new("main", "alice", Secret::new("s3cret-pw"))
    }

    fn answer(status: u16, locked: bool) -> Answer {
        Answer {
            status,
            retry_after: Some(Duration::from_secs(3)),
            locked,
            detail: "d".to_string(),
        }
    }

    #[test]
    fn retry_after_reads_delta_seconds() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 120 "), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("0"), Some(Duration::ZERO));
    }

    #[test]
    fn retry_after_ignores_dates_and_junk() {
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-5"), None);
        assert_eq!(parse_retry_after("1.5"), None);
        assert_eq!(parse_retry_after(""), None);
    }

    #[test]
    fn locked_is_found_as_a_word_in_any_case() {
        for text in [
            r#"{"error":"account locked"}"#,
            "Locked",
            "ACCOUNT_LOCKED",
            "AccountLocked",
            "locked-out",
        ] {
            assert!(says_locked(text), "{text}");
        }
    }

    #[test]
    fn unlocked_blocked_and_other_403s_are_not_locked() {
        for text in [
            "account unlocked",
            "UNLOCKED",
            "request blocked by policy",
            "forbidden",
            "",
        ] {
            assert!(!says_locked(text), "{text}");
        }
    }

    #[test]
    fn classify_maps_statuses_to_classes() {
        let a = account();
        assert!(matches!(
            classify(answer(401, false), &a),
            UpstreamError::Auth { status: 401, .. }
        ));
        assert!(matches!(
            classify(answer(423, false), &a),
            UpstreamError::Locked {
                retry_after: Some(_),
                ..
            }
        ));
        assert!(matches!(
            classify(answer(403, true), &a),
            UpstreamError::Locked { .. }
        ));
        assert!(matches!(
            classify(answer(403, false), &a),
            UpstreamError::Rejected { status: 403, .. }
        ));
        assert!(matches!(
            classify(answer(429, false), &a),
            UpstreamError::RateLimited { retry_after: Some(_) }
        ));
        assert!(matches!(
            classify(answer(503, false), &a),
            UpstreamError::Transient { .. }
        ));
        assert!(matches!(
            classify(answer(404, false), &a),
            UpstreamError::Rejected { status: 404, .. }
        ));
        assert!(matches!(
            classify(answer(302, false), &a),
            UpstreamError::Rejected { status: 302, .. }
        ));
    }

    #[test]
    fn error_classes_answer_the_two_questions() {
        let a = account();
        assert!(classify(answer(401, false), &a).is_credential_problem());
        assert!(classify(answer(423, false), &a).is_credential_problem());
        assert!(classify(answer(429, false), &a).is_transient());
        assert!(classify(answer(500, false), &a).is_transient());
        let rejected = classify(answer(400, false), &a);
        assert!(!rejected.is_transient() && !rejected.is_credential_problem());
    }

    #[test]
    fn endpoint_ignores_trailing_slashes_and_encodes_segments() {
        let want = "http://x:1/documents";
        assert_eq!(endpoint("http://x:1", &["documents"]).unwrap(), want);
        assert_eq!(endpoint("http://x:1/", &["documents"]).unwrap(), want);
        assert_eq!(
            endpoint("http://x:1/api//", &["documents"]).unwrap(),
            "http://x:1/api/documents"
        );
        assert_eq!(
            endpoint("http://x", &["documents", "a/b c?d%é", "content"]).unwrap(),
            "http://x/documents/a%2Fb%20c%3Fd%25%C3%A9/content"
        );
    }

    #[test]
    fn endpoint_refuses_credentials_in_the_url() {
        let err = endpoint("http://bob:pw@x/", &["documents"]).unwrap_err();
        assert!(matches!(err, UpstreamError::Protocol { .. }));
        assert!(!err.to_string().contains("pw"));
        assert!(endpoint("http://x/path@odd", &["documents"]).is_ok());
    }

    #[test]
    fn authorization_is_basic_base64_of_user_colon_password() {
        assert_eq!(account().authorization(), "Basic YWxpY2U6czNjcmV0LXB3");
    }

    #[test]
    fn scrub_removes_password_and_token() {
        let a = account();
        let text = format!("echo s3cret-pw and {}", a.basic_token());
        assert_eq!(a.scrub(&text), "echo *** and ***");
    }

    #[test]
    fn short_truncates_on_a_char_boundary_to_one_line() {
        let long = "é".repeat(500);
        let cut = short(&long);
        assert_eq!(cut.chars().count(), DETAIL_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(short("a\nb"), "a b");
    }

    #[test]
    fn parse_page_reads_cursor_and_rejects_missing_fields() {
        let page = parse_page(br#"{"documents":[{"id":"1","version":"v","name":"n","content_type":"text/plain"}],"next_cursor":"50"}"#).unwrap();
        assert_eq!(page.documents.len(), 1);
        assert_eq!(page.next_cursor.as_deref(), Some("50"));
        assert_eq!(
            parse_page(br#"{"documents":[],"next_cursor":null}"#)
                .unwrap()
                .next_cursor,
            None
        );
        assert_eq!(
            parse_page(br#"{"documents":[],"next_cursor":""}"#)
                .unwrap()
                .next_cursor,
            None
        );
        assert!(matches!(
            parse_page(br#"{"documents":[{"id":"1"}]}"#),
            Err(UpstreamError::Protocol { .. })
        ));
        assert!(matches!(
            parse_page(b"<html>"),
            Err(UpstreamError::Protocol { .. })
        ));
    }

    #[test]
    fn locked_display_names_account_and_retry() {
        let err = classify(answer(423, false), &account());
        let shown = err.to_string();
        assert!(shown.contains("main") && shown.contains("3s"), "{shown}");
    }
}
