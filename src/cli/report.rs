//! The small commands: `discover`, `status`, `inspect`, `gc`, `retry`.

use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use crate::pipeline::sweep;
use crate::upstream::ListingReport;
use crate::{Job, JobId, Millis, Status, Store};

use super::config::Config;
use super::CliError;

fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// A time in the injected clock's milliseconds, as RFC 3339.
fn when(ms: Millis) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// `leasehold discover DIR`.
pub fn discover(cfg: &Config, json: bool) -> Result<ExitCode, CliError> {
    let source = cfg
        .source
        .as_ref()
        .ok_or_else(|| CliError::Config("no source directory".into()))?;
    let found = source.discover(&cfg.store, cfg.max_input)?;
    if json {
        print_json(&found);
    } else {
        println!(
            "new {}, changed {}, unchanged {}, gone {}, skipped {}",
            found.new,
            found.changed,
            found.unchanged,
            found.gone,
            found.skipped.len()
        );
        for s in &found.skipped {
            println!("  skipped {s}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(serde::Serialize)]
struct StatusReport {
    database: String,
    mirror: String,
    source: Option<String>,
    counts: crate::Counts,
    leases: Vec<crate::LiveLease>,
    /// The last HTTP listing's figures; absent if this data directory was
    /// never listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    listing: Option<ListingReport>,
}

/// `leasehold status`.
pub fn status(cfg: &Config, json: bool) -> Result<ExitCode, CliError> {
    let report = StatusReport {
        database: cfg.store.path().display().to_string(),
        mirror: cfg.mirror.root().display().to_string(),
        source: cfg.source.as_ref().map(|s| s.root().display().to_string()),
        counts: cfg.store.counts()?,
        leases: cfg.store.live_leases()?,
        listing: ListingReport::load(&cfg.store)?,
    };
    if json {
        print_json(&report);
        return Ok(ExitCode::SUCCESS);
    }
    println!("database {}", report.database);
    println!("mirror   {}", report.mirror);
    if let Some(s) = &report.source {
        println!("source   {s}");
    }
    for s in Status::ALL {
        println!("{:>11} {}", s.as_str(), report.counts.get(s));
    }
    if let Some(l) = &report.listing {
        print_listing(l);
    }
    println!("live leases: {}", report.leases.len());
    for l in &report.leases {
        let owner = l.owner_worker.as_deref().unwrap_or("?");
        println!(
            "  {:?} (id {}) fence {} by {owner} until {}",
            l.key,
            l.id,
            l.fence,
            when(l.lease_expires_at)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The last listing, in two lines at most.
fn print_listing(l: &ListingReport) {
    let state = if l.complete {
        "complete"
    } else {
        "incomplete, nothing marked gone"
    };
    println!(
        "last listing {} ({state}): listed {}, new or changed {}, skipped {}, gone {}",
        when(l.at),
        l.listed,
        l.queued,
        l.skipped,
        l.gone
    );
    if let Some(reason) = &l.last_skip {
        println!("  last skipped: {reason}");
    }
}

/// A key, or a numeric id when no document has that key.
fn find(store: &Store, doc: &str) -> Result<Job, CliError> {
    if let Some(job) = store.job_by_key(doc)? {
        return Ok(job);
    }
    if let Ok(id) = doc.parse::<i64>() {
        if let Some(job) = store.job(JobId(id))? {
            return Ok(job);
        }
    }
    Err(CliError::Runtime(format!(
        "{doc:?}: no such document (key or id)"
    )))
}

/// `leasehold inspect KEY|ID`.
pub fn inspect(cfg: &Config, doc: &str, json: bool) -> Result<ExitCode, CliError> {
    let job = find(&cfg.store, doc)?;
    let history = cfg.store.history(JobId(job.id))?;
    if json {
        print_json(&serde_json::json!({ "job": job, "history": history }));
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:?} (id {})", job.key, job.id);
    println!(
        "  status {}  fence {}  attempts {}/{}  lost leases {}",
        job.status, job.fence, job.attempts, job.max_attempts, job.lost_leases
    );
    println!("  version {}", job.version);
    if let (Some(path), Some(sum)) = (&job.result_path, &job.checksum) {
        println!("  result {path} sha256 {sum}");
    }
    if let Some(at) = job.lease_expires_at {
        println!(
            "  lease until {} ({})",
            when(at),
            job.owner_worker.as_deref().unwrap_or("?")
        );
    }
    if let Some(at) = job.retry_at {
        println!("  retry at {}", when(at));
    }
    if let Some(e) = &job.last_error {
        println!("  last error: {e}");
    }
    println!("history:");
    for h in &history {
        let fence = h.fence.map(|f| format!(" fence {f}")).unwrap_or_default();
        let token = h
            .token
            .as_deref()
            .map(|t| format!(" token {t}"))
            .unwrap_or_default();
        println!(
            "  {} {}{fence}{token}  {}",
            when(h.at),
            h.event,
            h.detail.as_deref().unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `leasehold gc`: the fenced cleanup over every document directory. Refuses to
/// sweep a store that fails its quick check.
pub fn gc(cfg: &Config, dry_run: bool, json: bool) -> Result<ExitCode, CliError> {
    let problems = cfg.store.check_integrity(false)?;
    if !problems.is_empty() {
        return Err(CliError::Runtime(format!(
            "{}: corrupt store ({}); not sweeping the mirror",
            cfg.store.path().display(),
            problems[0].replace('\n', " ")
        )));
    }
    let report = sweep(&cfg.store, &cfg.mirror, dry_run)?;
    if json {
        print_json(&serde_json::json!({
            "dry_run": dry_run,
            "removed": report.removed,
            "unknown": report.unknown,
            "missing_rows": report.missing_rows,
            "busy": report.busy,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    println!(
        "{verb} {} file(s); kept {}",
        report.removed.len(),
        report.kept.len()
    );
    for f in &report.removed {
        println!("  {verb} {f}");
    }
    for f in &report.unknown {
        println!("  left alone (not ours) {f}");
    }
    if !report.busy.is_empty() {
        println!(
            "skipped {} document(s) whose mirror lock another process holds (run gc again later)",
            report.busy.len()
        );
        for id in &report.busy {
            println!("  skipped (locked) document id {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `leasehold retry KEY|--dead`.
pub fn retry(cfg: &Config, doc: Option<&str>, dead: bool) -> Result<ExitCode, CliError> {
    if dead {
        let n = cfg.store.requeue_dead("requeued by `leasehold retry --dead`")?;
        println!("requeued {n} dead document(s)");
        return Ok(ExitCode::SUCCESS);
    }
    let job = find(&cfg.store, doc.unwrap_or_default())?;
    if cfg
        .store
        .requeue(JobId(job.id), "requeued by `leasehold retry`")?
    {
        println!("requeued {:?}", job.key);
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::Runtime(format!(
            "{:?}: not requeued: it is {} (only settled documents whose source exists can be)",
            job.key, job.status
        )))
    }
}
