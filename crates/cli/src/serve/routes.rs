//! What the server answers, once the guard let a request through: the two
//! pages and their script, the search and status as JSON, a document's
//! original and its extracted text, and the one write, a retry.
//!
//! A document is named by its key and resolved from the store: an original
//! is read through the folder that owns the key (as a worker reads it, so a
//! link pointing out of the folder is refused there), only for a document
//! with an accepted text, and never from a path the request names.

use std::time::Duration;

use leasehold::{JobFilter, JobId, Search, Status};

use super::answer::Answer;
use super::guard::{Access, CSRF_HEADER};
use super::options::Options;
use super::query::query_pairs;
use super::sources::Sources;
use crate::config::Config;
use crate::error::CliError;

/// Matches per page.
const PAGE: usize = 20;
/// The longest query taken, in bytes.
pub const MAX_QUERY: usize = 1000;
/// How long one search may take before it is stopped.
const SEARCH_TIME: Duration = Duration::from_secs(2);
/// Failed documents the status lists.
const FAILURES_LISTED: usize = 100;

/// The pages and their assets, built into the binary: nothing is fetched
/// from anywhere else. Each page is its `<main>` in the frame both share.
const FRAME: &str = include_str!("assets/frame.html");
const SEARCH_PAGE: &str = include_str!("assets/search.html");
const STATUS_PAGE: &str = include_str!("assets/status.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

/// The answer to `GET`/`POST` `path` with `query`; `sources` are the
/// folders the data directory records now.
pub fn route(
    cfg: &Config,
    sources: &Sources,
    access: &Access,
    opts: &Options,
    (method, path, query): (&str, &str, &str),
) -> Answer {
    let param = |name: &str| query_pairs(query).find(|(k, _)| k == name).map(|(_, v)| v);
    match (method, path) {
        ("GET" | "HEAD", "/") => page(Page::Search, access, opts),
        ("GET" | "HEAD", "/status") => page(Page::Status, access, opts),
        ("GET" | "HEAD", "/assets/app.js") => Answer::bytes(200, "text/javascript; charset=utf-8", SCRIPT),
        ("GET" | "HEAD", "/assets/style.css") => Answer::bytes(200, "text/css; charset=utf-8", STYLE),
        ("GET" | "HEAD", "/api/search") => search(
            cfg,
            sources,
            &param("q").unwrap_or_default(),
            param("type"),
            param("folder"),
            param("offset"),
        ),
        ("GET" | "HEAD", "/api/status") => status(cfg, sources, opts),
        ("GET" | "HEAD", "/api/history") => match crate::page::figures(&cfg.store) {
            Ok(figures) => Answer::json(200, &figures),
            Err(e) => Answer::problem_owned(500, e.to_string()),
        },
        ("GET" | "HEAD", "/doc/original") => original(cfg, sources, &param("key").unwrap_or_default()),
        ("GET" | "HEAD", "/doc/text") => text(cfg, &param("key").unwrap_or_default()),
        ("POST", "/api/retry") if opts.allow_retry => retry(cfg, &param("key").unwrap_or_default()),
        ("POST", "/api/retry") => Answer::problem(
            403,
            "this server was started read-only: `leasehold serve --allow-retry` lets the page retry",
        ),
        (
            _,
            "/" | "/status" | "/api/search" | "/api/status" | "/api/history" | "/doc/original" | "/doc/text",
        ) => Answer::problem(405, "not answered with this method"),
        _ => Answer::problem(404, "no such page"),
    }
}

/// The two pages.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Page {
    Search,
    Status,
}

/// A page in its frame, with this server's CSRF token and whether it may retry.
fn page(which: Page, access: &Access, opts: &Options) -> Answer {
    let (name, title, main) = match which {
        Page::Search => ("search", "Search", SEARCH_PAGE),
        Page::Status => ("status", "Status", STATUS_PAGE),
    };
    let current = |page| {
        if which == page {
            " aria-current=\"page\""
        } else {
            ""
        }
    };
    let html = FRAME
        .replace("{{main}}", main)
        .replace("{{page}}", name)
        .replace("{{title}}", title)
        .replace("{{current_search}}", current(Page::Search))
        .replace("{{current_status}}", current(Page::Status))
        .replace("{{csrf}}", access.csrf())
        .replace("{{csrf_header}}", CSRF_HEADER)
        .replace("{{retry}}", if opts.allow_retry { "yes" } else { "no" });
    Answer::bytes(200, "text/html; charset=utf-8", html)
}

/// `GET /api/search?q=&type=&folder=&offset=`: a page of matches, the
/// filters added to the query as its fields (`type:`, `dir:`), so the page
/// and the command line take one language.
fn search(
    cfg: &Config,
    sources: &Sources,
    q: &str,
    kind: Option<String>,
    folder: Option<String>,
    offset: Option<String>,
) -> Answer {
    if q.len() > MAX_QUERY {
        return Answer::problem(414, "the query is longer than 1000 bytes");
    }
    // The filters first (fields hold for the whole query wherever they
    // stand): an operator the words end with (`tide NOT`, half typed) would
    // take a field after it as its term, and negate the filter.
    let mut query = String::new();
    if let Some(kind) = kind.filter(|k| !k.is_empty()) {
        if !kind.bytes().all(|b| b.is_ascii_alphanumeric()) || kind.len() > 16 {
            return Answer::problem(400, "type: takes a file type, such as pdf");
        }
        query.push_str(&format!("type:{kind} "));
    }
    if let Some(folder) = folder.filter(|f| !f.is_empty()) {
        if folder.contains('"') {
            return Answer::problem(400, "a folder with a double quote in its name cannot be a filter");
        }
        query.push_str(&format!("dir:\"{folder}\" "));
    }
    query.push_str(q.trim());
    let offset: usize = match offset.as_deref().map(str::parse).transpose() {
        Ok(n) => n.unwrap_or(0),
        Err(_) => return Answer::problem(400, "offset takes a number"),
    };
    if q.trim().is_empty() {
        return Answer::json(
            200,
            &serde_json::json!({"query": q, "total": 0, "offset": offset, "hits": []}),
        );
    }
    let folders = sources.recorded.key_prefixes();
    let request = Search::new(&query)
        .offset(offset)
        .limit(PAGE)
        .time_limit(SEARCH_TIME)
        .folders(&folders);
    let left_out = |line: &str| tracing::warn!(target: "leasehold::serve", "{line}");
    match crate::search::find(cfg, &sources.recorded, &request, left_out) {
        Ok(found) => Answer::json(
            200,
            &serde_json::json!({
                "query": q,
                "total": found.total,
                "offset": offset,
                "limit": PAGE,
                "listed": found.listed,
                "hits": found.hits,
            }),
        ),
        Err(CliError::Config(why)) => Answer::problem_owned(400, why),
        Err(e) => Answer::problem_owned(500, e.to_string()),
    }
}

/// `GET /api/status`: the counts, the folders, the failed documents.
fn status(cfg: &Config, sources: &Sources, opts: &Options) -> Answer {
    let read = || -> Result<serde_json::Value, CliError> {
        let totals = cfg.store.totals()?;
        let failed = cfg
            .store
            .jobs_where(&JobFilter::status(Status::Dead), JobId(0), FAILURES_LISTED)?;
        let failures: Vec<serde_json::Value> = failed
            .iter()
            .map(|job| {
                serde_json::json!({
                    "key": job.key,
                    "error": job.last_error,
                    "attempts": job.attempts,
                    "location": location(sources, &job.key),
                })
            })
            .collect();
        let folders: Vec<String> = sources
            .recorded
            .folders()
            .iter()
            .map(|(root, _)| root.display().to_string())
            .collect();
        Ok(serde_json::json!({
            "totals": {
                "queued": totals.queued,
                "extracting": totals.extracting,
                "indexed": totals.indexed,
                "no_text": totals.no_text,
                "retrying": totals.retrying,
                "failed": totals.dead,
                "removed": totals.removed,
            },
            "folders": folders,
            "failures": failures,
            "failures_listed": FAILURES_LISTED,
            "can_retry": opts.allow_retry,
        }))
    };
    match read() {
        Ok(value) => Answer::json(200, &value),
        Err(e) => Answer::problem_owned(500, e.to_string()),
    }
}

/// Where document `key`'s original is, as search shows it.
fn location(sources: &Sources, key: &str) -> Option<String> {
    sources.recorded.location(key).map(|l| match l {
        crate::config::Location::Path(p) => p.display().to_string(),
        crate::config::Location::Url(u) => u,
    })
}

/// The document `key`, when it has an accepted text.
fn indexed(cfg: &Config, key: &str) -> Result<leasehold::Job, Answer> {
    match cfg.store.job_by_key(key) {
        Ok(Some(job)) if job.status == Status::Indexed => Ok(job),
        Ok(_) => Err(Answer::problem(404, "no indexed document has this key")),
        Err(e) => Err(Answer::problem_owned(500, e.to_string())),
    }
}

/// `GET /doc/original?key=`: the original's bytes, read through its folder,
/// typed by its name; a page or a picture that could hold script is
/// sandboxed, so it never runs as this server's origin.
fn original(cfg: &Config, sources: &Sources, key: &str) -> Answer {
    use leasehold::source::Original;
    if let Err(refused) = indexed(cfg, key) {
        return refused;
    }
    let original = match sources.folders.open_original(key, cfg.max_input) {
        Ok(original) => original,
        Err(e) => return Answer::problem_owned(404, format!("the original cannot be read: {e}")),
    };
    let name = key.rsplit(['/', '\\']).next().unwrap_or(key);
    let mime = mime_guess::from_path(name).first_or_octet_stream();
    let mut answer = match original {
        Original::File { file, len } => Answer::file(200, mime.essence_str(), file, len),
        Original::Message(bytes) => Answer::bytes(200, mime.essence_str(), bytes),
    };
    answer.header("Content-Disposition", &disposition(name));
    if may_hold_script(mime.essence_str()) {
        answer.header(
            "Content-Security-Policy",
            "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'",
        );
    }
    answer
}

/// Whether a browser runs script in a document of type `mime` (HTML, XML,
/// SVG): such an original is sandboxed. Others are not (a sandboxed PDF is
/// not drawn), and `nosniff` keeps them from being taken for HTML.
fn may_hold_script(mime: &str) -> bool {
    mime.starts_with("text/html") || mime.contains("xml") || mime.starts_with("image/svg")
}

/// `inline` with the file's name: plain ASCII for old readers, and the
/// UTF-8 name percent-encoded (RFC 6266, RFC 8187).
fn disposition(name: &str) -> String {
    let ascii: String = name
        .chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => '_',
        })
        .collect();
    let encoded = percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
    format!("inline; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

/// `GET /doc/text?key=`: the accepted text, checked against its checksum.
fn text(cfg: &Config, key: &str) -> Answer {
    let job = match indexed(cfg, key) {
        Ok(job) => job,
        Err(refused) => return refused,
    };
    let (Some(path), Some(sum)) = (&job.result_path, &job.checksum) else {
        return Answer::problem(404, "no accepted text");
    };
    let file = match cfg.mirror.open_verified(path, sum) {
        Ok(Some(file)) => file,
        Ok(None) => return Answer::problem(500, "the text was altered: `leasehold doctor --fix` mends it"),
        Err(e) => return Answer::problem_owned(500, format!("the text cannot be read: {e}")),
    };
    match file.metadata() {
        Ok(meta) => Answer::file(200, "text/plain; charset=utf-8", file, meta.len()),
        Err(e) => Answer::problem_owned(500, format!("the text cannot be read: {e}")),
    }
}

/// `POST /api/retry?key=`: queue a failed document again, as `leasehold
/// retry KEY` does.
fn retry(cfg: &Config, key: &str) -> Answer {
    let job = match cfg.store.job_by_key(key) {
        Ok(Some(job)) => job,
        Ok(None) => return Answer::problem(404, "no document has this key"),
        Err(e) => return Answer::problem_owned(500, e.to_string()),
    };
    if job.source_gone {
        return Answer::problem(409, "its source was removed; it is queued again if it comes back");
    }
    if job.status != Status::Dead {
        return Answer::problem(409, "only a failed document is retried from here");
    }
    match cfg.store.requeue(JobId(job.id), "requeued from leasehold serve") {
        Ok(true) => Answer::json(200, &serde_json::json!({"key": key, "requeued": true})),
        Ok(false) => Answer::problem(409, "it changed meanwhile; look again"),
        Err(e) => Answer::problem_owned(500, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disposition_names_the_file_safely() {
        assert_eq!(
            disposition("보고서 \"final\".pdf"),
            "inline; filename=\"___ _final_.pdf\"; filename*=UTF-8''%EB%B3%B4%EA%B3%A0%EC%84%9C%20%22final%22%2Epdf"
        );
    }
}
