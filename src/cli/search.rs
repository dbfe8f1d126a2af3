//! `leasehold search` and `leasehold reindex`: the search index over the
//! accepted texts (DESIGN §12). The queries and the rebuild live in the
//! store and the pipeline; this room prints.

use std::process::ExitCode;

use crate::pipeline::ReindexReport;
use crate::{Hit, Tokenizer};

use super::config::Config;
use super::shown::shown;
use super::CliError;

/// One match as `search` prints it.
#[derive(Debug, serde::Serialize)]
struct HitLine {
    key: String,
    /// bm25: lower is better.
    rank: f64,
    snippet: String,
    /// The accepted result, relative to the mirror root.
    result_path: String,
    /// The same, as a path to open.
    path: String,
}

impl HitLine {
    fn of(hit: Hit, cfg: &Config) -> HitLine {
        HitLine {
            path: cfg.mirror.root().join(&hit.result_path).display().to_string(),
            key: hit.key,
            // JSON has no NaN or infinity; bm25 gives neither, but say 0 if it did.
            rank: if hit.rank.is_finite() { hit.rank } else { 0.0 },
            snippet: hit.snippet,
            result_path: hit.result_path,
        }
    }
}

/// `leasehold search QUERY [--limit N] [--json]`. A malformed query is a
/// usage error (exit 2) naming what is wrong; no match is exit 0 with a note
/// on stderr (and `[]` with `--json`).
pub fn search(cfg: &Config, query: &str, limit: u64, json: bool) -> Result<ExitCode, CliError> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let hits: Vec<HitLine> = cfg
        .store
        .search(query, limit)?
        .into_iter()
        .map(|h| HitLine::of(h, cfg))
        .collect();
    if json {
        let text = serde_json::to_string_pretty(&hits)
            .map_err(|e| CliError::Runtime(format!("cannot encode the matches: {e}")))?;
        return super::print_bytes(format!("{text}\n").as_bytes());
    }
    if hits.is_empty() {
        eprintln!("leasehold: no document matches {query:?}");
        return Ok(ExitCode::SUCCESS);
    }
    // Keys, paths and the snippet (the document's own text) as a terminal
    // may show them.
    let mut text = String::new();
    for h in &hits {
        text.push_str(&format!(
            "{}  {:.3}  {}\n    {}\n",
            shown(&h.key),
            h.rank,
            shown(&h.path),
            crate::upstream::one_line(&h.snippet)
        ));
    }
    super::print_bytes(text.as_bytes())
}

/// `leasehold reindex [--tokenizer NAME] [--json]`. Exit 1 when some
/// accepted result could not be read back (each named), 0 otherwise.
pub fn reindex(cfg: &Config, tokenizer: Option<Tokenizer>, json: bool) -> Result<ExitCode, CliError> {
    let report = crate::pipeline::reindex(&cfg.store, &cfg.mirror, tokenizer)?;
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
    for p in &r.problems {
        eprintln!("leasehold: {p}");
    }
    println!(
        "reindexed {} document(s) with {}; {} stale row(s) removed{}",
        r.indexed,
        r.tokenizer,
        r.pruned,
        if r.unreadable > 0 {
            format!(
                "; {} result(s) could not be read back (not searchable)",
                r.unreadable
            )
        } else {
            String::new()
        }
    );
}
