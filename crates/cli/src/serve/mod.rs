//! `leasehold serve`: the search page and the status page of one data
//! directory, on a web server on the loopback interface.
//!
//! Every request passes the guard (`serve/guard.rs`) before a route
//! (`serve/routes.rs`) sees it; every answer carries headers that keep it
//! from being framed, sniffed, cached or read by another origin. The pages
//! are built into the binary and fetch nothing from the network. The HTTP
//! side (`serve/http.rs`) reads the connections on one thread; a fixed
//! number of handler threads do the work, so no more searches run at once
//! than there are handlers, however many connections are open.

mod guard;
mod http;
mod routes;

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use leasehold::source::Folders;
use leasehold::Store;

use crate::config::Config;
use crate::folders::Recorded;
use crate::CliError;

pub use guard::Access;

/// How `serve` was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The address to listen on (loopback unless given).
    pub listen: Option<IpAddr>,
    /// The port (0: any free one).
    pub port: u16,
    /// Open the page in the system's browser once listening.
    pub open: bool,
    /// Let the status page queue a failed document again (the one write).
    pub allow_retry: bool,
    /// Requests answered at once.
    pub handlers: usize,
    /// How long a request's head may take to arrive (and a connection idle).
    pub head_timeout: std::time::Duration,
}

/// The folders the data directory records, and each opened to read its
/// originals: read again when the record changed, so a folder a `run` adds
/// while the server runs is searched, listed and served without a restart.
pub struct Sources {
    pub recorded: Recorded,
    pub folders: Folders,
}

/// The [`Sources`] last read, shared by the handlers, and when the record
/// was last looked at.
struct Live(Mutex<(Arc<Sources>, Instant)>);

/// How often the record is read again: a folder added shows within it.
const RECORD_CHECKED_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

impl Live {
    fn new(cfg: &Config) -> Live {
        let sources = Arc::new(Sources::of(cfg.recorded.clone()));
        Live(Mutex::new((sources, Instant::now())))
    }

    /// The sources as the store records them, read again at most every
    /// [`RECORD_CHECKED_EVERY`]; the folders are opened again, outside the
    /// lock (a folder on a mount that does not answer stalls no other
    /// request), only when the record changed.
    fn current(&self, store: &Store) -> Arc<Sources> {
        let held = {
            let mut held = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if held.1.elapsed() < RECORD_CHECKED_EVERY {
                return held.0.clone();
            }
            held.1 = Instant::now();
            held.0.clone()
        };
        match Recorded::load(store) {
            Ok(now) if now != held.recorded => {
                let fresh = Arc::new(Sources::of(now));
                let mut held = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                held.0 = fresh.clone();
                fresh
            }
            _ => held,
        }
    }
}

impl Sources {
    fn of(recorded: Recorded) -> Sources {
        let (opened, _unavailable) = crate::folders::open(&recorded);
        Sources {
            recorded,
            folders: Folders::new(opened),
        }
    }
}

/// An answer before it is sent.
pub struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn bytes(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            status,
            content_type: content_type.to_owned(),
            body: body.into(),
            headers: Vec::new(),
        }
    }

    fn json(status: u16, value: &serde_json::Value) -> Answer {
        Answer::bytes(status, "application/json", value.to_string())
    }

    /// A refusal or failure: `{"error": why}`, which the pages show.
    fn problem(status: u16, why: &str) -> Answer {
        Answer::json(status, &serde_json::json!({ "error": why }))
    }

    fn problem_owned(status: u16, why: String) -> Answer {
        Answer::problem(status, &why)
    }

    fn header(&mut self, name: &str, value: &str) {
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

/// `leasehold serve`: listen, print the address (with its token), answer
/// until the process is stopped.
pub fn serve(cfg: &Config, opts: &Options) -> Result<ExitCode, CliError> {
    let ip = opts.listen.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    if !ip.is_loopback() {
        eprintln!(
            "leasehold: warning: listening on {ip}, which other machines can reach; \
             the token in the address is all that keeps them out, and nothing is encrypted"
        );
    }
    let cannot =
        |e: std::io::Error| CliError::Runtime(format!("cannot listen on {ip} port {}: {e}", opts.port));
    let listener = std::net::TcpListener::bind(SocketAddr::new(ip, opts.port)).map_err(cannot)?;
    let access = Arc::new(Access::new(http::bound(&listener).map_err(cannot)?));
    let live = Live::new(cfg);
    let url = format!("{}/?token={}", access.origin(), access.token());
    let mut out = std::io::stdout().lock();
    writeln!(out, "{url}")
        .and_then(|_| out.flush())
        .map_err(|e| CliError::Runtime(format!("writing the address: {e}")))?;
    drop(out);
    eprintln!("leasehold: serving {} (Ctrl-C stops)", cfg.store.path().display());
    if opts.open {
        open_in_browser(&url, cfg);
    }
    let (jobs, queued) = crossbeam_channel::bounded::<http::Job>(http::QUEUE);
    std::thread::scope(|scope| {
        for _ in 0..opts.handlers.max(1) {
            let (queued, live, access) = (queued.clone(), &live, &access);
            scope.spawn(move || {
                for job in queued {
                    // Its client is gone (a keystroke the page no longer shows).
                    if job.reply.is_closed() {
                        continue;
                    }
                    let asked = (job.method.as_str(), job.path.as_str(), job.query.as_str());
                    // A bug in one route answers 500 and leaves this handler
                    // serving: a handler that died would leave its queue unread.
                    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        let sources = live.current(&cfg.store);
                        routes::route(cfg, &sources, access, opts, asked)
                    }))
                    .unwrap_or_else(|_| Answer::problem(500, "the server failed on this request"));
                    let _ = job.reply.send(answer);
                }
            });
        }
        let served = http::run(listener, access.clone(), jobs, opts.head_timeout);
        served.map_err(|e| CliError::Runtime(format!("serving: {e}")))
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The HTTP response of `answer` (hyper leaves a `HEAD`'s body out and still
/// says its length).
fn response(answer: Answer) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
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
    builder
        .body(http_body_util::Full::new(hyper::body::Bytes::from(answer.body)))
        .unwrap_or_else(|_| {
            // A header value the answer made that HTTP cannot carry.
            let mut refused = hyper::Response::new(http_body_util::Full::new(hyper::body::Bytes::new()));
            *refused.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
            refused
        })
}

/// Open `url` with the system's opener; a failure is said, not fatal. The
/// opener is given a page in the data directory, readable by this user
/// only, that sends the browser on to `url`: a command line is seen by
/// every user of the machine (`ps`), and the token must not be.
fn open_in_browser(url: &str, cfg: &Config) {
    let page = cfg.mirror.root().with_file_name(".serve-open.html");
    let redirect = format!(
        "<!DOCTYPE html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\">\
         <title>leasehold</title><a href=\"{url}\">Open leasehold</a>\n"
    );
    let _ = std::fs::remove_file(&page);
    let mut options = std::fs::OpenOptions::new();
    leasehold::portable::private_open(options.write(true).create_new(true), 0o600);
    if let Err(e) = options
        .open(&page)
        .and_then(|mut f| f.write_all(redirect.as_bytes()))
    {
        eprintln!("leasehold: cannot open a browser ({e}); open the address above");
        return;
    }
    let target = page.display().to_string();
    let url = target.as_str();
    #[cfg(target_os = "macos")]
    let mut command = std::process::Command::new("open");
    #[cfg(windows)]
    let mut command = {
        let mut c = std::process::Command::new("cmd");
        c.args(["/C", "start", ""]);
        c
    };
    #[cfg(not(any(target_os = "macos", windows)))]
    let mut command = std::process::Command::new("xdg-open");
    let opened = command
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = opened {
        eprintln!("leasehold: cannot open a browser ({e}); open the address above");
    }
}
