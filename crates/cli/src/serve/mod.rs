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

mod answer;
mod file_body;
mod guard;
mod http;
mod options;
mod query;
mod routes;
mod sources;

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use crate::config::Config;
use crate::error::CliError;

use answer::Answer;
pub use guard::Access;
pub use options::Options;
use sources::Live;

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
