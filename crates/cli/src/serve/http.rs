//! The HTTP side of `serve`: hyper's HTTP/1.1 on a one-thread tokio runtime
//! reads and writes every connection; the work (a search, a status, an
//! original) runs on the handler threads, which borrow the command's
//! configuration as any other command's code does.
//!
//! What keeps it standing: at most [`MAX_CONNECTIONS`] connections (more are
//! closed as they come), each closed when a request's head takes longer than
//! the head timeout to arrive (a client that connects and sends nothing, or
//! sends a byte a minute, or idles between requests) or when an answer's
//! write makes no progress for as long (a client that stopped reading, which
//! would otherwise hold its connection for ever); a head of at most 16
//! KiB; a queue of [`QUEUE`] requests before the handlers, past which the
//! answer is 503 at once. A burst of keep-alive connections is read by the
//! runtime, not by a thread per connection, so none waits on another's.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};

use super::answer::{response, Answer, ResponseBody};
use super::guard::{self, Access};

/// Connections open at once; more are closed as they are accepted.
pub const MAX_CONNECTIONS: usize = 256;
/// Requests waiting for a handler; more are answered 503 at once.
pub const QUEUE: usize = 256;
/// How long a request may wait for its handler's answer: a folder on a mount
/// that stopped answering holds a handler, not the client for ever (504);
/// and how long an answer read from a file may wait for one piece of it
/// (`file_body.rs`), after which its connection is closed.
pub(super) const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest request head read (hyper answers 431 past it).
const MAX_HEAD: usize = 16 * 1024;

/// A request the guard let through, for a handler thread.
pub struct Job {
    pub method: String,
    pub path: String,
    pub query: String,
    pub reply: tokio::sync::oneshot::Sender<Answer>,
}

/// What every connection's tasks share.
struct Shared {
    access: Arc<Access>,
    jobs: crossbeam_channel::Sender<Job>,
}

/// Accept and answer on `listener` until the process ends; the guarded
/// requests go to `jobs`. `head_timeout` bounds each request head's arrival,
/// and how long an answer's write may make no progress.
pub fn run(
    listener: std::net::TcpListener,
    access: Arc<Access>,
    jobs: crossbeam_channel::Sender<Job>,
    head_timeout: Duration,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let shared = Arc::new(Shared { access, jobs });
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                // Out of descriptors, a connection reset before it was taken: go on.
                Err(e) => {
                    tracing::warn!(target: "leasehold::serve", "accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Answers go out as they are written, not held for Nagle's delay.
            let _ = stream.set_nodelay(true);
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::warn!(target: "leasehold::serve", "{peer}: refused, {MAX_CONNECTIONS} connections open");
                continue;
            };
            let shared = shared.clone();
            let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
            stream.set_write_timeout(Some(head_timeout));
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| answer(shared.clone(), request));
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(head_timeout)
                    .max_buf_size(MAX_HEAD)
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(Box::pin(stream)), service);
                if let Err(e) = connection.await {
                    tracing::debug!(target: "leasehold::serve", "{peer}: {e}");
                }
                drop(slot);
            });
        }
    })
}

/// Judge `request`; hand what passes to a handler and wait for its answer.
async fn answer(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let target = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    // A body sent in chunks has no length up front: too large, as no route reads one.
    let body_length = match header("transfer-encoding") {
        Some(_) => Some(usize::MAX),
        None => header("content-length").map(|l| l.parse().unwrap_or(usize::MAX)),
    };
    let asked = guard::Asked {
        method: &method,
        target: &target,
        host: header("host"),
        cookie: header("cookie"),
        origin: header("origin"),
        fetch_site: header("sec-fetch-site"),
        csrf: header(guard::CSRF_HEADER),
        body_length,
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let answer = match shared.access.judge(&asked) {
        guard::Verdict::Pass => hand_over(&shared, &method, path, query).await,
        guard::Verdict::TradeForCookie { location } => {
            let mut answer = Answer::bytes(303, "text/plain; charset=utf-8", "");
            answer.header("Location", &location);
            answer.header("Set-Cookie", &shared.access.cookie());
            answer
        }
        guard::Verdict::Refuse(status, why) => Answer::problem(status, why),
    };
    // The path only: a query may hold the token, or words someone searched for.
    tracing::info!(
        target: "leasehold::serve",
        method = %method,
        path = %path,
        status = answer.status,
        ms = started.elapsed().as_millis() as u64,
        "request"
    );
    Ok(response(answer))
}

/// The answer of a handler thread, or 503 when the queue is full.
async fn hand_over(shared: &Shared, method: &str, path: &str, query: &str) -> Answer {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let job = Job {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        reply,
    };
    if shared.jobs.try_send(job).is_err() {
        return Answer::problem(503, "busy: too many requests at once; try again");
    }
    match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Answer::problem(500, "the request was dropped"),
        Err(_) => Answer::problem(504, "no answer within 60 s (a folder that does not answer?)"),
    }
}

/// The listening address of `listener`.
pub fn bound(listener: &std::net::TcpListener) -> std::io::Result<SocketAddr> {
    listener.local_addr()
}
