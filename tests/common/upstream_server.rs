//! A real upstream API on 127.0.0.1 for integration tests: document listing
//! and content (the HTTP source), a results sink, and a webhook endpoint, all
//! behind HTTP Basic auth, with per-account failure modes (refused, locked,
//! rate limited, unavailable, hanging).
//!
//! Each request is answered on a thread of its own, so a request held open by
//! [`Mode::Hang`] never delays another account's (or the same account's)
//! requests. Dropping the [`Upstream`] closes the listening socket; requests
//! already hanging still answer when their sleep ends.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// Documents per listing page.
pub const PAGE_SIZE: usize = 50;

/// How the server answers an account's requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Check the credentials and serve the request if they are right.
    Accept,
    /// 401 even with the right password.
    Reject401,
    /// 423, with `Retry-After: N` when given.
    Lock423 { retry_after: Option<u64> },
    /// 403 with body `{"error":"account locked"}`.
    Locked403,
    /// 429, with `Retry-After: N` when given.
    RateLimit429 { retry_after: Option<u64> },
    /// 503.
    Unavailable503,
    /// Sleep this long, then answer as [`Mode::Accept`].
    Hang(Duration),
}

/// One request the server saw. `at` is its arrival; it is logged once it has
/// been answered (after the sleep, for [`Mode::Hang`]).
#[derive(Clone, Debug)]
pub struct RequestRecord {
    pub at: Instant,
    /// The Basic-auth user name, if the request carried one (right or wrong).
    pub account: Option<String>,
    pub method: String,
    /// The raw request target, query included.
    pub path: String,
    pub status: u16,
}

struct Document {
    id: String,
    version: String,
    name: String,
    content_type: String,
    body: Vec<u8>,
}

#[derive(Default)]
struct State {
    passwords: HashMap<String, String>,
    documents: Vec<Document>,
    standing: HashMap<String, Mode>,
    queued: HashMap<String, VecDeque<Mode>>,
    counts: HashMap<String, u64>,
    log: Vec<RequestRecord>,
    sink: Vec<Vec<Value>>,
    notices: Vec<Value>,
}

/// What to send back.
struct Reply {
    status: u16,
    content_type: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn json(status: u16, value: Value) -> Reply {
        Reply {
            status,
            content_type: "application/json".to_string(),
            headers: Vec::new(),
            body: value.to_string().into_bytes(),
        }
    }

    fn error(status: u16, message: &str) -> Reply {
        Reply::json(status, json!({ "error": message }))
    }

    fn retry_after(mut self, seconds: Option<u64>) -> Reply {
        if let Some(seconds) = seconds {
            self.headers
                .push(("Retry-After".to_string(), seconds.to_string()));
        }
        self
    }

    /// The whole HTTP/1.1 response, closing the connection after it.
    fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            head += &format!("{name}: {value}\r\n");
        }
        head += "\r\n";
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        423 => "Locked",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// The running server. Dropping it stops accepting connections.
pub struct Upstream {
    state: Arc<Mutex<State>>,
    listener: Arc<TcpListener>,
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Upstream {
    /// Listens on an ephemeral port of 127.0.0.1.
    pub fn start() -> Upstream {
        let listener = Arc::new(TcpListener::bind("127.0.0.1:0").expect("bind test upstream"));
        let addr = listener.local_addr().expect("a local address");
        let state = Arc::new(Mutex::new(State::default()));
        let stopping = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let (listener, state, stopping) = (listener.clone(), state.clone(), stopping.clone());
            std::thread::Builder::new()
                .name("upstream-accept".to_string())
                .spawn(move || accept_loop(&listener, &state, &stopping))
                .expect("spawn acceptor")
        };
        Upstream {
            state,
            listener,
            addr,
            stopping,
            acceptor: Some(acceptor),
        }
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn sink_url(&self) -> String {
        format!("{}/sink", self.base_url())
    }

    pub fn webhook_url(&self) -> String {
        format!("{}/notify", self.base_url())
    }

    /// Adds (or re-passwords) an account; its mode starts as [`Mode::Accept`].
    pub fn add_account(&self, username: &str, password: &str) {
        self.lock()
            .passwords
            .insert(username.to_string(), password.to_string());
    }

    /// Adds a document at the end of the listing, or replaces the one with
    /// the same id in place (a new version).
    pub fn add_document(&self, id: &str, version: &str, name: &str, content_type: &str, body: &[u8]) {
        let doc = Document {
            id: id.to_string(),
            version: version.to_string(),
            name: name.to_string(),
            content_type: content_type.to_string(),
            body: body.to_vec(),
        };
        let mut state = self.lock();
        match state.documents.iter_mut().find(|d| d.id == id) {
            Some(existing) => *existing = doc,
            None => state.documents.push(doc),
        }
    }

    /// The standing mode for every request from `username`.
    pub fn set_mode(&self, username: &str, mode: Mode) {
        self.lock().standing.insert(username.to_string(), mode);
    }

    /// The next `modes.len()` requests from `username` get these modes in
    /// order (replacing any still queued); then the standing mode again. A
    /// request with a wrong password still uses up its queued mode.
    pub fn set_next(&self, username: &str, modes: Vec<Mode>) {
        self.lock().queued.insert(username.to_string(), modes.into());
    }

    /// Requests that carried `username` in Basic auth, any path, any outcome
    /// (counted on arrival, so a hanging request counts at once).
    pub fn requests(&self, username: &str) -> u64 {
        self.lock().counts.get(username).copied().unwrap_or(0)
    }

    /// Every answered request, in the order they were answered.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.lock().log.clone()
    }

    /// The `results` array of each POST /sink answered 2xx, in order.
    pub fn sink_batches(&self) -> Vec<Vec<Value>> {
        self.lock().sink.clone()
    }

    /// The bodies POSTed to /notify, in order.
    pub fn notices(&self) -> Vec<Value> {
        self.lock().notices.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocked accept() so the loop sees `stopping`.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        // The last `Arc<TcpListener>` goes with `self`, closing the socket.
    }
}

/// A panicking test thread must not take every later assertion down with it.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A thread per connection, one request per connection: nothing a client
/// sends can wait behind another client's connection.
fn accept_loop(listener: &TcpListener, state: &Arc<Mutex<State>>, stopping: &AtomicBool) {
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            break;
        }
        if let Ok(stream) = stream {
            let state = state.clone();
            std::thread::spawn(move || serve_connection(stream, &state));
        }
    }
}

/// One parsed request.
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn serve_connection(mut stream: TcpStream, state: &Mutex<State>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    if let Some(request) = read_request(&mut stream) {
        let reply = handle(request, state);
        let _ = stream.write_all(&reply.to_bytes());
        let _ = stream.flush();
    }
}

/// Read the head until its blank line, parse it, then read Content-Length bytes.
fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        if let httparse::Status::Complete(head_len) = req.parse(&buf).ok()? {
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).into_owned()))
                .collect();
            let length: usize = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
            let (method, path) = (req.method?.to_string(), req.path?.to_string());
            let mut body = buf[head_len..].to_vec();
            while body.len() < length {
                let n = stream.read(&mut chunk).ok()?;
                if n == 0 {
                    return None;
                }
                body.extend_from_slice(&chunk[..n]);
            }
            body.truncate(length);
            return Some(Request {
                method,
                path,
                headers,
                body,
            });
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Who the request says it is.
struct Caller {
    username: String,
    password: String,
}

fn basic_auth(request: &Request) -> Option<Caller> {
    let (_, value) = request
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("Authorization"))?;
    let token = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let (username, password) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some(Caller {
        username: username.to_string(),
        password: password.to_string(),
    })
}

fn handle(request: Request, state: &Mutex<State>) -> Reply {
    let at = Instant::now();
    let caller = basic_auth(&request);
    let Request {
        method, path, body, ..
    } = request;
    let reply = if method == "POST" && route(&path).0 == "/notify" {
        notify(state, &body)
    } else {
        authorised(state, caller.as_ref(), &method, &path, &body)
    };
    lock(state).log.push(RequestRecord {
        at,
        account: caller.map(|c| c.username),
        method,
        path,
        status: reply.status,
    });
    reply
}

fn notify(state: &Mutex<State>, body: &[u8]) -> Reply {
    match serde_json::from_slice::<Value>(body) {
        Ok(notice) => {
            lock(state).notices.push(notice);
            Reply::json(200, json!({ "ok": true }))
        }
        Err(_) => Reply::error(400, "notice is not JSON"),
    }
}

/// Applies the account's mode, then (if it lets the request through) serves it.
fn authorised(state: &Mutex<State>, caller: Option<&Caller>, method: &str, path: &str, body: &[u8]) -> Reply {
    let Some(caller) = caller else {
        return unauthorized();
    };
    let (mode, password_ok) = admit(state, caller);
    if !password_ok {
        return unauthorized();
    }
    match mode {
        Mode::Accept => serve(state, method, path, body),
        Mode::Hang(pause) => {
            std::thread::sleep(pause);
            serve(state, method, path, body)
        }
        Mode::Reject401 => unauthorized(),
        Mode::Lock423 { retry_after } => Reply::error(423, "account locked").retry_after(retry_after),
        Mode::Locked403 => Reply::error(403, "account locked"),
        Mode::RateLimit429 { retry_after } => Reply::error(429, "too many requests").retry_after(retry_after),
        Mode::Unavailable503 => Reply::error(503, "service unavailable"),
    }
}

/// Counts the request, picks its mode and checks the password.
fn admit(state: &Mutex<State>, caller: &Caller) -> (Mode, bool) {
    let mut state = lock(state);
    *state.counts.entry(caller.username.clone()).or_default() += 1;
    let queued = state
        .queued
        .get_mut(&caller.username)
        .and_then(VecDeque::pop_front);
    let mode = queued
        .or_else(|| state.standing.get(&caller.username).cloned())
        .unwrap_or(Mode::Accept);
    let password_ok = state.passwords.get(&caller.username) == Some(&caller.password);
    (mode, password_ok)
}

fn unauthorized() -> Reply {
    let mut reply = Reply::error(401, "unauthorized");
    reply.headers.push((
        "WWW-Authenticate".to_string(),
        "Basic realm=\"upstream\"".to_string(),
    ));
    reply
}

/// Path and query of a request target.
fn route(target: &str) -> (&str, Option<&str>) {
    match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    }
}

fn serve(state: &Mutex<State>, method: &str, target: &str, body: &[u8]) -> Reply {
    let (path, query) = route(target);
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        ("GET", ["documents"]) => list(state, query),
        ("GET", ["documents", id, "content"]) => content(state, &percent_decode(id)),
        ("POST", ["sink"]) => sink(state, body),
        _ => Reply::error(404, "no such endpoint"),
    }
}

/// The `cursor` query parameter as an offset; absent means 0.
fn cursor(query: Option<&str>) -> Result<usize, ()> {
    let value = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("cursor="));
    match value {
        None => Ok(0),
        Some(value) => percent_decode(value).parse().map_err(|_| ()),
    }
}

fn list(state: &Mutex<State>, query: Option<&str>) -> Reply {
    let Ok(offset) = cursor(query) else {
        return Reply::error(400, "bad cursor");
    };
    let state = lock(state);
    let end = (offset + PAGE_SIZE).min(state.documents.len());
    let documents: Vec<Value> = state
        .documents
        .get(offset..end)
        .unwrap_or_default()
        .iter()
        .map(|d| json!({ "id": d.id, "version": d.version, "name": d.name, "content_type": d.content_type }))
        .collect();
    let next_cursor = (end < state.documents.len()).then(|| end.to_string());
    Reply::json(200, json!({ "documents": documents, "next_cursor": next_cursor }))
}

fn content(state: &Mutex<State>, id: &str) -> Reply {
    let state = lock(state);
    match state.documents.iter().find(|d| d.id == id) {
        Some(doc) => Reply {
            status: 200,
            content_type: doc.content_type.clone(),
            headers: Vec::new(),
            body: doc.body.clone(),
        },
        None => Reply::error(404, "no such document"),
    }
}

fn sink(state: &Mutex<State>, body: &[u8]) -> Reply {
    let parsed: Option<Vec<Value>> = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("results")?.as_array().cloned());
    match parsed {
        Some(results) => {
            let count = results.len();
            lock(state).sink.push(results);
            Reply::json(200, json!({ "accepted": count }))
        }
        None => Reply::error(400, "body must be {\"results\": [...]}"),
    }
}

/// `%XX` decoding of a path segment or query value (invalid escapes are
/// kept as they are).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
