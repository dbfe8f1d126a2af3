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
//! [`Secret::expose`] in one place (`Account::authorization`).
//!
//! # Redaction at the boundary
//! Everything an upstream says that leasehold keeps (an error body, a status
//! line, a transport error, a parser's complaint about a listing, the reason a
//! listing record was skipped) passes through [`crate::secret::redact`] here,
//! before it is cut short and before it becomes an [`UpstreamError`]: so the
//! gate, the store, notices and logs only ever see redacted text, whatever
//! form of whichever configured password the server echoed.
//!
//! # The listing
//! A page is read record by record: a record that is unusable (not an object,
//! a missing or mistyped field, an empty id, control characters, an id of `.`
//! or `..`, an id or version too long, a configured secret in it) is skipped
//! with its reason in [`Page::skipped`], and the rest of the page is used. Only
//! a page that is not a listing at all fails the request. Ids are sent as one
//! percent-encoded path segment; `.` and `..` are refused rather than sent,
//! because `%2E%2E` is `..` too (RFC 3986 §6.2.2: percent-encoded unreserved
//! characters are the characters themselves), and a server or proxy that
//! normalises the path removes it as a dot segment, so no spelling of them
//! would reliably reach the server as a document id.
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
//! `https://` goes through rustls with the webpki roots (ureq's `rustls`
//! feature, see `Cargo.toml`); no proxy is used, whatever the environment
//! says. A URL that can never be requested (bad syntax, a scheme other than
//! http and https) fails with [`UpstreamError::Protocol`] rather than being
//! retried forever as [`UpstreamError::Transient`]. Redirects are not
//! followed: a redirect would either carry the password to another host or
//! lose it, and the API has no reason to redirect, so a 3xx is a
//! [`UpstreamError::Rejected`].

use std::io::Read;
use std::time::Duration;

use ureq::http::Response;
use ureq::Body;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::secret::{contains_secret, redact, Secret, REDACTED};

/// Longest `detail` string, in characters: enough to recognise a server's
/// message, short enough for a log line.
const DETAIL_CHARS: usize = 200;

/// How much of an error response's body is read (for `detail` and for
/// spotting "locked"); the rest is left unread.
const ERROR_BODY_LIMIT: u64 = 4096;

/// Longest document id or version accepted from a listing, in bytes. Ids
/// become keys, paths in URLs and names in logs; a longer one is a broken or
/// hostile record.
pub const MAX_ID_BYTES: usize = 1024;

/// How long connecting may take within a request's timeout (what ureq 2, the
/// client's earlier library, allowed by default).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

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

    /// `text` from the server or the transport, with every form of every
    /// configured secret and this account's `Authorization` token replaced by
    /// `***`, cut short to one line: the only way upstream text becomes a
    /// `detail`.
    fn detail(&self, text: &str) -> String {
        let token = self.basic_token();
        short(&redact(&text.replace(&token, REDACTED)))
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The usable documents of this page, in the API's order.
    pub documents: Vec<DocumentRef>,
    /// The records of this page that were skipped, and why.
    pub skipped: Vec<SkippedRecord>,
    /// Opaque; passed back verbatim. Absent, `null` and `""` all mean "no
    /// more pages" (an empty cursor would otherwise restart the listing).
    pub next_cursor: Option<String>,
}

impl Page {
    /// How many records the page held, usable or not.
    pub fn records(&self) -> usize {
        self.documents.len() + self.skipped.len()
    }
}

/// The page as the API sends it; records are read one by one afterwards.
#[derive(Deserialize)]
struct RawPage {
    documents: Vec<serde_json::Value>,
    #[serde(default)]
    next_cursor: Option<String>,
}

/// A listing record that was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRecord {
    /// Its position on its page, from 0.
    pub index: usize,
    /// Its id, when the id itself is fine (another field is not): the
    /// document is still listed, so it is not taken for gone.
    pub listed_id: Option<String>,
    /// Why it was skipped.
    pub reason: BadRecord,
}

impl std::fmt::Display for SkippedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "record {} of its page", self.index + 1)?;
        if let Some(id) = &self.listed_id {
            write!(f, " (id {:?})", short_id(id))?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// Why a listing record was skipped. The text never holds the bad value
/// itself when the value is the problem (it may hold control characters or a
/// secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRecord {
    /// Not a JSON object, or a field missing or of the wrong type; `detail`
    /// is the parser's message, redacted and shortened.
    #[error("not a document record: {detail}")]
    Unreadable {
        /// What the parser said.
        detail: String,
    },
    /// `id` is `""`.
    #[error("empty id")]
    EmptyId,
    /// `field` holds a control character (NUL, newline, escape, ...).
    #[error("{field} contains a control character (U+{code:04X})")]
    ControlCharacter {
        /// `id` or `version`.
        field: &'static str,
        /// The first control character's code point.
        code: u32,
    },
    /// `field` is longer than [`MAX_ID_BYTES`].
    #[error("{field} is {bytes} bytes long (at most {MAX_ID_BYTES})")]
    TooLong {
        /// `id` or `version`.
        field: &'static str,
        /// Its length.
        bytes: usize,
    },
    /// `id` is `.` or `..`: see the module's doc.
    #[error("id is a dot segment ({0:?}), which cannot be requested as a document")]
    DotSegment(&'static str),
    /// A field holds a form of a configured secret.
    #[error("{field} contains a configured secret")]
    Secret {
        /// The field.
        field: &'static str,
    },
}

/// At most 60 characters of an id that passed the checks, for messages.
fn short_id(id: &str) -> String {
    match id.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &id[..cut]),
        None => id.to_string(),
    }
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
    /// The account the error names in its own message (credential problems
    /// do), so that a wrapper does not name it a second time.
    pub fn account(&self) -> Option<&str> {
        match self {
            UpstreamError::Auth { account, .. } | UpstreamError::Locked { account, .. } => Some(account),
            _ => None,
        }
    }

    /// The message without the account's name, for what is shown beside the
    /// account already (its row in `auth status`, its lock notice).
    pub fn without_account(&self) -> String {
        let shown = self.to_string();
        match self.account() {
            Some(account) => match shown.strip_prefix(&format!("account {account}: ")) {
                Some(reason) => reason.to_owned(),
                None => shown,
            },
            None => shown,
        }
    }

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
        let mut request = authorized(self.agent.get(&url), account);
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
        let response = answer(authorized(self.agent.get(&url), account).call(), account)?;
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
            detail: short(&redact(&format!("cannot encode results: {e}"))),
        })?;
        let request = authorized(self.agent.post(url), account).header("Content-Type", "application/json");
        let response = answer(request.send(&body[..]), account)?;
        // Drain a little so the connection can go back to the pool; a failure
        // here does not undo the delivery the status already confirmed.
        let _ = read_at_most(response, ERROR_BODY_LIMIT);
        Ok(())
    }
}

/// `request` with the account's credentials attached.
fn authorized<B>(request: ureq::RequestBuilder<B>, account: &Account) -> ureq::RequestBuilder<B> {
    request
        .header("Authorization", account.authorization())
        .header("Accept", "application/json, */*")
}

/// The 2xx response, or the error the answer means. The agent hands every
/// status back as a response (see [`agent`]), so an `Err` is the transport's.
fn answer(
    result: Result<Response<Body>, ureq::Error>,
    account: &Account,
) -> Result<Response<Body>, UpstreamError> {
    match result {
        Ok(response) if response.status().is_success() => Ok(response),
        Ok(response) => Err(status_error(response, account)),
        Err(error) => Err(transport_error(&error, account)),
    }
}

/// Reads what a non-2xx answer says and classifies it.
fn status_error(response: Response<Body>, account: &Account) -> UpstreamError {
    let status = response.status();
    let retry_after = header(&response, "Retry-After").and_then(|value| parse_retry_after(&value));
    let headers_locked = headers_say_locked(&response);
    let body = read_at_most(response, ERROR_BODY_LIMIT).unwrap_or_default();
    let body = String::from_utf8_lossy(&body);
    // HTTP/1.1 clients keep no reason phrase: an empty body is described by
    // the status's standard name.
    let text = if body.trim().is_empty() {
        status.canonical_reason().unwrap_or("")
    } else {
        body.trim()
    };
    let status = status.as_u16();
    let answer = Answer {
        status,
        retry_after,
        locked: headers_locked || says_locked(&body),
        detail: account.detail(text),
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

/// Connection problems (refused, reset, timed out, a failed TLS handshake)
/// are transient; a request that can never be made is not: a URL that does
/// not parse or has an unknown scheme or no host, https in a build without
/// TLS, or a header value HTTP cannot carry.
fn transport_error(error: &ureq::Error, account: &Account) -> UpstreamError {
    let detail = account.detail(&error.to_string());
    match error {
        ureq::Error::BadUri(_)
        | ureq::Error::Http(_)
        | ureq::Error::RequireHttpsOnly(_)
        | ureq::Error::TlsRequired => UpstreamError::Protocol { detail },
        _ => UpstreamError::Transient { detail },
    }
}

/// A body that broke off mid-read (timeout, reset) is worth retrying.
fn read_failed(error: &std::io::Error, account: &Account) -> UpstreamError {
    UpstreamError::Transient {
        detail: account.detail(&format!("reading the answer: {error}")),
    }
}

/// Up to `limit` bytes of the body; never more, whatever the server sends.
fn read_at_most(response: Response<Body>, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .take(limit)
        .read_to_end(&mut body)?;
    Ok(body)
}

/// The first value of header `name`, as text (bytes that are not UTF-8
/// replaced).
fn header(response: &Response<Body>, name: &str) -> Option<String> {
    let value = response.headers().get(name)?;
    Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// The `Content-Length` the server declared, if it is a number.
fn declared_length(response: &Response<Body>) -> Option<u64> {
    header(response, "Content-Length")?.trim().parse().ok()
}

/// A listing page, or `Protocol` naming what is wrong with it. A page whose
/// records are bad is still a page: they are skipped (see [`read_record`]).
fn parse_page(body: &[u8]) -> Result<Page, UpstreamError> {
    let raw: RawPage = serde_json::from_slice(body).map_err(|e| UpstreamError::Protocol {
        detail: short(&redact(&format!("unreadable listing: {e}"))),
    })?;
    let mut page = Page {
        documents: Vec::with_capacity(raw.documents.len()),
        skipped: Vec::new(),
        next_cursor: raw.next_cursor.filter(|c| !c.is_empty()),
    };
    for (index, record) in raw.documents.into_iter().enumerate() {
        match read_record(record) {
            Ok(doc) => page.documents.push(doc),
            Err((listed_id, reason)) => page.skipped.push(SkippedRecord {
                index,
                listed_id,
                reason,
            }),
        }
    }
    Ok(page)
}

/// One listing record as a document, or why it cannot be one (with its id
/// when the id alone is fine).
fn read_record(record: serde_json::Value) -> Result<DocumentRef, (Option<String>, BadRecord)> {
    let id_ok = record
        .get("id")
        .and_then(|v| v.as_str())
        .filter(|id| check_id(id).is_ok())
        .map(str::to_owned);
    let fail = |reason: BadRecord| (id_ok.clone(), reason);
    let doc: DocumentRef = serde_json::from_value(record).map_err(|e| {
        let reason = BadRecord::Unreadable {
            detail: short(&redact(&e.to_string())),
        };
        fail(reason)
    })?;
    // An id that passed above is the same string: checked once.
    if id_ok.is_none() {
        check_id(&doc.id).map_err(|reason| (None, reason))?;
    }
    // `name` and `content_type` are not kept anywhere, so not checked.
    check_field("version", &doc.version).map_err(fail)?;
    Ok(doc)
}

/// An id becomes a key, a URL path segment and a name in logs: not empty, not
/// a dot segment, and [`check_field`].
fn check_id(id: &str) -> Result<(), BadRecord> {
    match id {
        "" => Err(BadRecord::EmptyId),
        "." => Err(BadRecord::DotSegment(".")),
        ".." => Err(BadRecord::DotSegment("..")),
        _ => check_field("id", id),
    }
}

/// No control characters, at most [`MAX_ID_BYTES`], no configured secret.
fn check_field(field: &'static str, value: &str) -> Result<(), BadRecord> {
    if value.len() > MAX_ID_BYTES {
        return Err(BadRecord::TooLong {
            field,
            bytes: value.len(),
        });
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(BadRecord::ControlCharacter {
            field,
            code: u32::from(c),
        });
    }
    if contains_secret(value) {
        return Err(BadRecord::Secret { field });
    }
    Ok(())
}

/// The HTTP agent of every leasehold request: `timeout` for the whole request
/// (connecting, sending, and reading the whole answer), of which connecting
/// may take at most [`CONNECT_TIMEOUT`]; no redirects (a redirected POST may
/// become a GET or be re-sent elsewhere; the operator fixes the URL instead):
/// a 3xx is handed back as it is; every status is an answer to read, not an
/// error (the callers classify it, reading at most a capped part of its
/// body); no proxy from the environment (none was ever used; an
/// `HTTPS_PROXY` meant for other programs would otherwise see every
/// request); leasehold's user agent.
pub(crate) fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
        .max_redirects(0)
        .http_status_as_error(false)
        .proxy(None)
        .user_agent(concat!("leasehold/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent()
}

/// `Retry-After` as delta-seconds. The HTTP-date form is not parsed and, like
/// anything else unreadable, gives `None`: the caller's own backoff applies.
fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Whether any header name or value says "locked". Names come lower-cased.
fn headers_say_locked(response: &Response<Body>) -> bool {
    response.headers().iter().any(|(name, value)| {
        says_locked(name.as_str()) || says_locked(&String::from_utf8_lossy(value.as_bytes()))
    })
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

/// Where document `id` of the source at `base_url` is read from (`GET
/// {base_url}/documents/{id}/content`): what a search shows as its
/// location. None for a base URL that carries credentials.
pub fn document_url(base_url: &str, id: &str) -> Option<String> {
    endpoint(base_url, &["documents", id, "content"]).ok()
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
pub fn one_line(text: &str) -> String {
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
    fn detail_removes_password_token_and_encoded_forms() {
        let a = account();
        let text = format!(
            "echo s3cret-pw, S3CRET-PW, s3cret%2Dpw and {}; 401\nagain",
            a.basic_token()
        );
        assert_eq!(a.detail(&text), "echo ***, ***, *** and ***; 401 again");
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
            parse_page(b"<html>"),
            Err(UpstreamError::Protocol { .. })
        ));
        assert!(matches!(
            parse_page(br#"{"documents":{"id":"1"}}"#),
            Err(UpstreamError::Protocol { .. })
        ));
    }

    fn record(id: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"id": id, "version": "v", "name": "n", "content_type": "text/plain"})
    }

    #[test]
    fn bad_records_are_skipped_with_their_reason_and_the_rest_is_kept() {
        let _pw = Secret::new("rec0rd-Secret");
        let long = "x".repeat(MAX_ID_BYTES + 1);
        let records = vec![
            record("good-1".into()),
            record("".into()),
            record(r"a\0b".into()),
            record("nul\u{0}".into()),
            record("..".into()),
            record(".".into()),
            record(long.into()),
            record(5.into()),
            serde_json::json!({"id": "no-version", "name": "n", "content_type": "t"}),
            serde_json::json!("not an object"),
            record("REC0RD-SECRET".into()),
            record("good-2".into()),
        ];
        let body = serde_json::json!({"documents": records, "next_cursor": "2"}).to_string();
        let page = parse_page(body.as_bytes()).unwrap();
        let ids: Vec<&str> = page.documents.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["good-1", r"a\0b", "good-2"]);
        let reasons: Vec<String> = page.skipped.iter().map(|s| s.reason.to_string()).collect();
        assert_eq!(page.records(), 12, "{reasons:?}");
        assert_eq!(page.skipped[0].reason, BadRecord::EmptyId);
        assert_eq!(
            page.skipped[1].reason,
            BadRecord::ControlCharacter { field: "id", code: 0 }
        );
        assert_eq!(page.skipped[2].reason, BadRecord::DotSegment(".."));
        assert_eq!(page.skipped[3].reason, BadRecord::DotSegment("."));
        assert!(matches!(
            page.skipped[4].reason,
            BadRecord::TooLong { field: "id", .. }
        ));
        assert!(matches!(page.skipped[5].reason, BadRecord::Unreadable { .. }));
        // The id is fine, the version is missing: still listed.
        assert_eq!(page.skipped[6].listed_id.as_deref(), Some("no-version"));
        assert!(matches!(page.skipped[7].reason, BadRecord::Unreadable { .. }));
        assert_eq!(page.skipped[8].reason, BadRecord::Secret { field: "id" });
        assert!(page.skipped.iter().all(|s| !s.to_string().contains("rec0rd")));
        assert_eq!(page.next_cursor.as_deref(), Some("2"));
    }

    #[test]
    fn an_id_is_sent_as_the_one_path_segment_it_was_encoded_to() {
        // The HTTP library sends the path as built: an id that merely looks
        // like a dot segment keeps its own spelling, encoded.
        let url = endpoint("http://x", &["documents", "%2E%2E", "content"]).unwrap();
        assert_eq!(url_path(&url), "/documents/%252E%252E/content");
        let url = endpoint("http://x", &["documents", "...", "content"]).unwrap();
        assert_eq!(url_path(&url), "/documents/.../content");
        let url = endpoint("http://x", &["documents", "a/b", "content"]).unwrap();
        assert_eq!(url_path(&url), "/documents/a%2Fb/content");
    }

    /// The path the HTTP library would send for `url`.
    fn url_path(url: &str) -> String {
        let request = ureq::get(url);
        request.uri_ref().unwrap().path().to_string()
    }

    #[test]
    fn the_agent_follows_no_redirect_reads_no_proxy_and_answers_every_status() {
        let agent = agent(Duration::from_secs(7));
        let config = agent.config();
        assert_eq!(config.max_redirects(), 0);
        assert!(!config.http_status_as_error());
        assert!(config.proxy().is_none());
        assert_eq!(config.timeouts().global, Some(Duration::from_secs(7)));
        assert_eq!(config.timeouts().connect, Some(Duration::from_secs(7)));
        let long = super::agent(Duration::from_secs(300));
        assert_eq!(long.config().timeouts().connect, Some(CONNECT_TIMEOUT));
    }

    /// A server on 127.0.0.1 that answers one request with `status`,
    /// `headers` and `body`, then goes away.
    fn answer_once(
        status: u16,
        headers: &[(&str, &str)],
        body: impl std::io::Read + Send + 'static,
    ) -> String {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let base = format!("http://{}", server.server_addr().to_ip().unwrap());
        let headers: Vec<tiny_http::Header> = headers
            .iter()
            .map(|(name, value)| tiny_http::Header::from_bytes(*name, *value).unwrap())
            .collect();
        std::thread::spawn(move || {
            let request = server.recv().unwrap();
            let response = tiny_http::Response::new(status.into(), headers, body, None, None);
            let _ = request.respond(response);
        });
        base
    }

    #[test]
    fn a_redirect_is_rejected_not_followed() {
        let base = answer_once(302, &[("Location", "/documents?followed=1")], std::io::empty());
        let err = HttpClient::new(Duration::from_secs(30))
            .list(&base, &account(), None)
            .unwrap_err();
        // Followed, the second request would find the server gone (Transient).
        assert!(
            matches!(err, UpstreamError::Rejected { status: 302, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn an_endless_error_body_is_read_only_up_to_its_cap() {
        let base = answer_once(500, &[], std::io::repeat(b'x'));
        let err = HttpClient::new(Duration::from_secs(30))
            .list(&base, &account(), None)
            .unwrap_err();
        // Read to its end, the body would have ended in the timeout, and the
        // detail would be the status's name instead of the body's start.
        match &err {
            UpstreamError::Transient { detail } => assert!(detail.starts_with("HTTP 500: xxxx"), "{detail}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn https_goes_through_tls() {
        // A plain-HTTP answer to an https request: the TLS handshake fails,
        // which is a connection problem (not an unusable URL).
        use std::io::Write as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            let _ = stream.read(&mut [0u8; 1024]);
        });
        let err = HttpClient::new(Duration::from_secs(30))
            .list(&base, &account(), None)
            .unwrap_err();
        match &err {
            // rustls's complaint about the plaintext it read.
            UpstreamError::Transient { detail } => assert!(detail.contains("corrupt message"), "{detail}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn locked_display_names_account_and_retry() {
        let err = classify(answer(423, false), &account());
        let shown = err.to_string();
        assert!(shown.contains("main") && shown.contains("3s"), "{shown}");
    }
}
