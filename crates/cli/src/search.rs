//! `leasehold search` and `leasehold reindex`: the search index over the
//! accepted texts (DESIGN §12). The queries and the rebuild live in the
//! store and the pipeline; this room prints.

use std::process::ExitCode;

use leasehold::pipeline::ReindexReport;
use leasehold::{Hit, Tokenizer};

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

/// `leasehold search QUERY [--limit N] [--timeout D] [--json]`. A
/// malformed query or one beyond the caps is a usage error (exit 2) naming
/// what is wrong; one stopped at its time limit fails (exit 1) saying how to
/// narrow it or allow longer; no match is exit 0 with
/// a note on stderr (and `[]` with `--json`), unless the index is found
/// damaged (a search failing on it, or no match and a cheap look at its
/// pages): exit 1 naming `leasehold reindex`. A hit whose result file is
/// missing or altered (as far as a stat tells) is left out, with a line on
/// stderr that names the fix: its text would be the index's copy of a
/// result the mirror no longer holds, and `show` could not print it.
pub fn search(
    cfg: &Config,
    query: &str,
    limit: u64,
    timeout: std::time::Duration,
    json: bool,
) -> Result<ExitCode, CliError> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut hits = Vec::new();
    let found = cfg
        .store
        .search_within(query, limit, timeout)
        .map_err(damaged_index)?;
    if found.is_empty() {
        refuse_a_damaged_index(cfg)?;
    }
    for hit in found {
        if let Some(damage) =
            leasehold::pipeline::stat_damage(&cfg.store, &cfg.mirror, &hit.key, &hit.result_path)?
        {
            eprintln!(
                "leasehold: {:?}: {}: left out (`leasehold doctor --fix` queues it to be extracted again)",
                hit.key,
                damage.describe(&hit.result_path)
            );
            continue;
        }
        hits.push(HitLine::of(hit, cfg));
    }
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
            leasehold::upstream::one_line(&h.snippet)
        ));
    }
    super::print_bytes(text.as_bytes())
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
