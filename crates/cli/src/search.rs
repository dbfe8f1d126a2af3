//! `leasehold search` and `leasehold reindex`: the search index over the
//! accepted texts (DESIGN §12). The queries and the rebuild live in the
//! store and the pipeline; this room prints.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use leasehold::pipeline::ReindexReport;
use leasehold::{Hit, QuerySyntax, Search, Snippet, Tokenizer};

use super::args::ColorWhen;
use super::config::{Config, Location};
use super::error::CliError;
use super::folders::Recorded;
use super::shown::{on_one_line, shown};

/// A search as the command line asked for it.
pub struct Asked {
    pub query: String,
    pub fts: bool,
    /// Words as written only (no stemming).
    pub exact: bool,
    /// None: the default (20, all with `--files`); 0: all.
    pub limit: Option<u64>,
    pub offset: u64,
    pub output: Output,
    pub timeout: Duration,
}

/// How the matches are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// A block per match, then the total; colours or not.
    Text {
        color: bool,
    },
    /// The originals' locations only, each ended by a line break or a NUL.
    Files {
        null: bool,
    },
    Json,
}

impl Output {
    /// From the flags; `auto` colours a terminal unless `NO_COLOR` is set
    /// (to anything but the empty string, as no-color.org says).
    pub fn of(files: bool, null: bool, json: bool, color: ColorWhen) -> Output {
        if json {
            return Output::Json;
        }
        if files {
            return Output::Files { null };
        }
        let color = match color {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => {
                std::io::stdout().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && console_takes_ansi()
            }
        };
        Output::Text { color }
    }
}

/// Whether the terminal reads ANSI colour codes. Every Unix terminal does.
/// A Windows console does only when a program switched it to virtual
/// terminal processing; Windows Terminal (`WT_SESSION`) and the Unix-like
/// terminals (`TERM`, as mintty and ConEmu set) have it on, so `auto`
/// colours those and leaves a plain console alone.
fn console_takes_ansi() -> bool {
    !cfg!(windows) || std::env::var_os("WT_SESSION").is_some() || std::env::var_os("TERM").is_some()
}

/// The default page: 20 matches, or all of them for a list of files.
const DEFAULT_LIMIT: u64 = 20;

/// One match as `search` prints it (and `serve` sends it).
#[derive(Debug, serde::Serialize)]
pub(crate) struct HitLine {
    key: String,
    /// Where the original is: its path, or its URL for an HTTP source; null
    /// when the data directory records no source.
    location: Option<String>,
    /// The title the document gives itself (HTML `<title>`, a PDF's or an
    /// office document's properties, Markdown's first heading); null when
    /// it gives none (the index then searches its file name as its title).
    title: Option<String>,
    /// Who it says wrote it; null when it names nobody.
    author: Option<String>,
    /// The date it gives itself (`2026-01-15`, or `2026-01`, `2026`); null
    /// when it gives none.
    date: Option<String>,
    /// The original's type, as `type:` filters it: its extension, lower
    /// case (null without one).
    #[serde(rename = "type")]
    kind: Option<String>,
    /// The original's size in bytes and modification time (RFC 3339, UTC),
    /// as a stat finds them now; null for an HTTP source or a file gone.
    size: Option<u64>,
    modified: Option<String>,
    /// Higher is better.
    score: f64,
    /// The text around the match, on one line.
    snippet: String,
    /// The matched pieces of `snippet`, as [start, end) byte offsets.
    highlights: Vec<[usize; 2]>,
    /// The accepted text: relative to the mirror root, and as a path.
    result_path: String,
    text_path: String,
    #[serde(skip)]
    marked: Snippet,
}

impl HitLine {
    fn of(hit: Hit, cfg: &Config, origin: &Recorded) -> HitLine {
        let location = origin.location(&hit.key);
        let (size, modified) = match &location {
            Some(Location::Path(path)) => match std::fs::metadata(path) {
                Ok(meta) => (Some(meta.len()), meta.modified().ok().and_then(rfc3339)),
                Err(_) => (None, None),
            },
            _ => (None, None),
        };
        HitLine {
            kind: extension(&hit.key),
            location: location.map(|l| match l {
                Location::Path(p) => p.display().to_string(),
                Location::Url(u) => u,
            }),
            size,
            modified,
            text_path: cfg.mirror.root().join(&hit.result_path).display().to_string(),
            key: hit.key,
            title: hit.title,
            author: hit.author,
            date: hit.date,
            // JSON has no NaN or infinity; the ranks give neither, but say 0 if one did.
            score: if hit.score.is_finite() { hit.score } else { 0.0 },
            snippet: hit.snippet.text().to_owned(),
            highlights: hit
                .snippet
                .highlights()
                .iter()
                .map(|h| [h.start, h.end])
                .collect(),
            result_path: hit.result_path,
            marked: hit.snippet,
        }
    }
}

/// The extension of the file a key names, lower case: `pdf` for
/// `reports/Q3.PDF`; None for `README` or `.profile`.
fn extension(key: &str) -> Option<String> {
    if key.starts_with("hex:") {
        return None;
    }
    let name = key.rsplit(['/', '\\']).next().unwrap_or(key);
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() => Some(ext.to_ascii_lowercase()),
        _ => None,
    }
}

/// `t` as RFC 3339 in UTC, to the second; None outside the years 1970 to
/// 9999, which humantime cannot write (a file may carry any time).
fn rfc3339(t: std::time::SystemTime) -> Option<String> {
    const YEAR_10000: u64 = 253_402_300_800;
    let since = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    (since.as_secs() < YEAR_10000).then(|| humantime::format_rfc3339_seconds(t).to_string())
}

/// What `--json` prints: the page and the total.
#[derive(Debug, serde::Serialize)]
struct Page<'a> {
    query: &'a str,
    total: u64,
    offset: u64,
    hits: Vec<HitLine>,
}

/// `leasehold search QUERY...`. A malformed query or one beyond the caps is
/// a usage error (exit 2) naming what is wrong and where; one stopped at its
/// time limit fails (exit 1) saying how to narrow it or allow longer; no
/// match is exit 1, as for grep, with a line on stderr (an empty page with
/// `--json`), unless the index is found damaged (a search failing on it, or
/// no match and a cheap look at its pages): exit 1 naming `leasehold
/// reindex`. A hit whose result file is missing or altered (as far as a
/// stat tells) is left out, with a line on stderr that names the fix: its
/// text would be the index's copy of a result the mirror no longer holds,
/// and `show` could not print it.
pub fn search(cfg: &Config, asked: &Asked) -> Result<ExitCode, CliError> {
    let limit = match (asked.limit, asked.output) {
        (Some(n), _) => n,
        (None, Output::Files { .. }) => 0,
        (None, _) => DEFAULT_LIMIT,
    };
    let folders = cfg.recorded.key_prefixes();
    let mut request = Search::new(&asked.query)
        .offset(usize::try_from(asked.offset).unwrap_or(usize::MAX))
        .time_limit(asked.timeout)
        .folders(&folders);
    request = match usize::try_from(limit) {
        Ok(0) | Err(_) => request.unlimited(),
        Ok(n) => request.limit(n),
    };
    if asked.fts {
        request = request.syntax(QuerySyntax::Fts5);
    }
    if asked.exact {
        request = request.stemming(leasehold::Stemming::Off);
    }
    if matches!(asked.output, Output::Files { .. }) {
        request = request.without_snippets();
    }
    let found = find(cfg, &cfg.recorded, &request, |line| {
        eprintln!("leasehold: {line}")
    })?;
    let (hits, shown_to) = (found.hits, asked.offset.saturating_add(found.listed));
    let code = if found.total == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    let out = match asked.output {
        Output::Json => {
            let page = Page {
                query: &asked.query,
                total: found.total,
                offset: asked.offset,
                hits,
            };
            let text = serde_json::to_string_pretty(&page)
                .map_err(|e| CliError::Runtime(format!("cannot encode the matches: {e}")))?;
            format!("{text}\n")
        }
        Output::Files { null } => files(&hits, null, std::io::stdout().is_terminal()),
        Output::Text { color } => {
            if found.total == 0 {
                eprintln!("leasehold: no document matches {:?}", asked.query);
                return Ok(code);
            }
            let mut text = String::new();
            for h in &hits {
                block(&mut text, h, color);
            }
            text.push_str(&total_line(found.total, asked.offset, shown_to));
            text
        }
    };
    super::error::print_bytes(out.as_bytes())?;
    Ok(code)
}

/// A page of matches as they are shown.
pub(crate) struct Found {
    pub total: u64,
    pub hits: Vec<HitLine>,
    /// How many the page held, the left-out ones counted: where it ends.
    pub listed: u64,
}

/// The page of matches `request` asks for, each with where its original
/// is, as `origin` records it. A match whose accepted result is missing or altered (as far as a
/// stat tells) is left out and said through `left_out` (one line naming
/// the fix): its text would be the index's copy of a result the mirror no
/// longer holds. No match at all is checked for a damaged index.
pub(crate) fn find(
    cfg: &Config,
    origin: &Recorded,
    request: &Search<'_>,
    left_out: impl Fn(&str),
) -> Result<Found, CliError> {
    let request = request.clone().mirror(&cfg.mirror);
    let found = cfg.store.search_page(&request).map_err(damaged_index)?;
    if found.total == 0 {
        refuse_a_damaged_index(cfg)?;
    }
    let listed = found.hits.len() as u64;
    let mut hits = Vec::new();
    for hit in found.hits {
        if let Some(damage) =
            leasehold::pipeline::stat_damage(&cfg.store, &cfg.mirror, &hit.key, &hit.result_path)?
        {
            left_out(&format!(
                "{:?}: {}: left out (`leasehold doctor --fix` queues it to be extracted again)",
                hit.key,
                damage.describe(&hit.result_path)
            ));
            continue;
        }
        hits.push(HitLine::of(hit, cfg, origin));
    }
    Ok(Found {
        total: found.total,
        hits,
        listed,
    })
}

/// The locations, one per line or NUL-ended, as they are for a tool that
/// reads them, or on a terminal (without `-0`) as [`shown`] shows names, so
/// no name drives the terminal or forges a line; a document with no
/// location is named by its key.
fn files(hits: &[HitLine], null: bool, terminal: bool) -> String {
    let end = if null { '\0' } else { '\n' };
    let mut out = String::new();
    for h in hits {
        let name = h.location.as_deref().unwrap_or(&h.key);
        match terminal && !null {
            true => out.push_str(&shown(name)),
            false => out.push_str(name),
        }
        out.push(end);
    }
    out
}

/// Colours of a terminal: a location as ripgrep shows a path, a match in
/// bold red.
const PATH_COLOR: &str = "\x1b[35m";
const MATCH_COLOR: &str = "\x1b[1;31m";
const RESET: &str = "\x1b[0m";

/// One match: its location, then its title, author, date, type, size, time and score,
/// then the snippet, indented.
fn block(out: &mut String, h: &HitLine, color: bool) {
    let location = h.location.as_deref().unwrap_or(&h.key);
    let (path_on, off) = if color { (PATH_COLOR, RESET) } else { ("", "") };
    out.push_str(&format!("{path_on}{}{off}\n", shown(location)));
    let mut facts = Vec::new();
    if let Some(title) = &h.title {
        facts.push(on_one_line(title));
    }
    if let Some(author) = &h.author {
        facts.push(format!("by {}", on_one_line(author)));
    }
    if let Some(date) = &h.date {
        facts.push(format!("dated {}", on_one_line(date)));
    }
    if let Some(kind) = &h.kind {
        facts.push(on_one_line(kind));
    }
    if let Some(size) = h.size {
        facts.push(size_shown(size));
    }
    if let Some(modified) = &h.modified {
        facts.push(modified.clone());
    }
    facts.push(format!("score {:.2}", h.score));
    out.push_str(&format!("    {}\n", facts.join(" · ")));
    // The document's own text made safe piece by piece (what a terminal
    // acts on becomes spaces), the marks or colour codes put around.
    let (open, close) = if color { (MATCH_COLOR, RESET) } else { ("[", "]") };
    let mut snippet = String::new();
    for (piece, matched) in h.marked.pieces() {
        match matched {
            true => snippet.extend([open, &on_one_line(piece), close]),
            false => snippet.push_str(&on_one_line(piece)),
        }
    }
    if !snippet.is_empty() {
        out.push_str(&format!("    {snippet}\n"));
    }
}

/// A size as people read it (`107 B`, `12.40 KiB`).
fn size_shown(bytes: u64) -> String {
    indicatif::HumanBytes(bytes).to_string()
}

/// "37 documents match; showing 1–20" and how to see more.
fn total_line(total: u64, offset: u64, shown_to: u64) -> String {
    let noun = if total == 1 {
        "document matches"
    } else {
        "documents match"
    };
    if shown_to <= offset {
        return format!("{total} {noun}; none shown from --offset {offset}\n");
    }
    let more = if shown_to < total {
        format!(" (--offset {shown_to} for more)")
    } else {
        String::new()
    };
    format!("{total} {noun}; showing {}–{shown_to}{more}\n", offset + 1)
}

/// A search that found nothing, when a cheap look at the index's pages
/// finds them damaged: "no match" could be the damage's answer, so it is a
/// failure naming the mend instead.
fn refuse_a_damaged_index(cfg: &Config) -> Result<(), CliError> {
    match cfg.store.search_index_looks_damaged() {
        Ok(None) => Ok(()),
        Ok(Some(why)) => Err(CliError::Runtime(format!(
            "{}: the search index is damaged ({why}), so no match may be wrong; \
             `leasehold reindex` builds it again from the mirror",
            cfg.store.path().display()
        ))),
        Err(e) => Err(damaged_index(e)),
    }
}

/// A search that met a damaged index says what mends it.
fn damaged_index(e: leasehold::Error) -> CliError {
    if e.is_corrupt() {
        return CliError::Runtime(format!(
            "{}; if it is the search index, `leasehold reindex` builds it again from the mirror \
             (`leasehold doctor` says)",
            e.to_string().replace('\n', " ")
        ));
    }
    e.into()
}

/// `leasehold reindex [--tokenizer NAME] [--json]`. Exit 1 when some
/// accepted result could not be read back (each named), 0 otherwise: one
/// missing or altered was forgotten and queued again, which mends it.
pub fn reindex(cfg: &Config, tokenizer: Option<Tokenizer>, json: bool) -> Result<ExitCode, CliError> {
    let report = leasehold::pipeline::reindex(&cfg.store, &cfg.mirror, tokenizer)?;
    if json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::Runtime(format!("cannot encode the report: {e}")))?;
        println!("{text}");
    } else {
        print_report(&report);
    }
    Ok(if report.unreadable == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_report(r: &ReindexReport) {
    if let Some(damage) = &r.rebuilt {
        println!("the search index was damaged ({damage}): dropped and built again from the mirror");
    }
    for p in &r.problems {
        eprintln!("leasehold: {p}");
    }
    println!(
        "reindexed {} document(s) with {}; {} stale row(s) removed",
        r.indexed, r.tokenizer, r.pruned
    );
    if r.requeued > 0 {
        println!(
            "{} document(s) whose result was missing or altered were taken out of the index and queued \
             again: `leasehold run DIR` or `leasehold work --until-empty` extracts them",
            r.requeued
        );
    }
    if r.unreadable > 0 {
        println!(
            "{} result(s) could not be read back and were left as they were (`leasehold doctor` names them)",
            r.unreadable
        );
    }
}
