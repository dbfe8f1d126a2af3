//! The small commands: `discover`, `status`, `list`, `inspect`, `show`, `gc`,
//! `retry`.

use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use leasehold::pipeline::sweep;
use leasehold::source::key_for;
use leasehold::upstream::ListingReport;
use leasehold::{Job, JobFilter, JobId, Millis, Status, Store};

use super::config::Config;
use super::error::CliError;
use super::folders::Recorded;
use super::shown::{on_one_line, shown};
use leasehold::upstream::one_line;

fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// A time in the injected clock's milliseconds, as a local ISO 8601 time
/// with its offset (e.g. `2026-03-01T14:05:09.120+01:00`): what people read
/// their clocks in. UTC when the local offset cannot be found.
pub(super) fn when(ms: Millis) -> String {
    let (secs, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    match local_time(secs, millis) {
        Some(local) => local,
        None => {
            let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
            humantime::format_rfc3339_millis(t).to_string()
        }
    }
}

/// `secs` as a local time with `millis` and its offset; unix only (the C
/// library's zone), so elsewhere the caller shows UTC.
#[cfg(unix)]
fn local_time(secs: i64, millis: i64) -> Option<String> {
    let tm = local_tm(secs)?;
    Some(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{millis:03}{}",
        i64::from(tm.tm_year) + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        utc_offset(tm.tm_gmtoff)
    ))
}

#[cfg(not(unix))]
fn local_time(_secs: i64, _millis: i64) -> Option<String> {
    None
}

/// The broken-down local time of `secs` since the epoch (the `TZ` variable or
/// the system's zone).
#[cfg(unix)]
// libc marks `time_t` deprecated on musl (it becomes 64-bit with musl 1.2).
#[allow(deprecated)]
fn local_tm(secs: i64) -> Option<libc::tm> {
    let t = libc::time_t::try_from(secs).ok()?;
    // SAFETY: `tm` is plain data that localtime_r fills in; both pointers are
    // valid for the call, and tzset only reads the environment's TZ.
    unsafe {
        tzset();
        let mut tm: libc::tm = std::mem::zeroed();
        (!libc::localtime_r(&t, &mut tm).is_null()).then_some(tm)
    }
}

#[cfg(unix)]
extern "C" {
    /// POSIX: read `TZ` into the C library's zone (localtime_r need not).
    fn tzset();
}

/// `+HH:MM` / `-HH:MM` for an offset east of UTC in seconds.
#[cfg(unix)]
fn utc_offset(east_secs: libc::c_long) -> String {
    let sign = if east_secs < 0 { '-' } else { '+' };
    let minutes = east_secs.unsigned_abs() / 60;
    format!("{sign}{:02}:{:02}", minutes / 60, minutes % 60)
}

/// A history detail with the store's epoch times (`retrying at 1796072074398:
/// ...`) shown as local times.
fn readable_detail(detail: &str) -> String {
    let Some((head, rest)) = detail.split_once(" at ") else {
        return detail.to_owned();
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    match digits.parse::<Millis>() {
        Ok(ms) if digits.len() >= 10 => format!("{head} at {}{}", when(ms), &rest[digits.len()..]),
        _ => detail.to_owned(),
    }
}

/// `leasehold discover [DIR…]`.
pub fn discover(cfg: &Config, json: bool) -> Result<ExitCode, CliError> {
    let found = super::run::discover_all(cfg, &cfg.scanned)?;
    super::logs::discovered(&found);
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
            println!("  skipped {}", shown(s));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(serde::Serialize)]
struct StatusReport {
    database: String,
    mirror: String,
    /// The first of `sources` (what older releases printed).
    source: Option<String>,
    /// The folders the data directory indexes, or its HTTP source's URL.
    sources: Vec<String>,
    counts: leasehold::Counts,
    leases: Vec<leasehold::LiveLease>,
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
        source: cfg.recorded_sources().into_iter().next(),
        sources: cfg.recorded_sources(),
        counts: cfg.store.counts()?,
        leases: cfg.store.live_leases()?,
        listing: ListingReport::load(&cfg.store)?,
    };
    if json {
        print_json(&report);
        return Ok(ExitCode::SUCCESS);
    }
    println!("database {}", shown(&report.database));
    println!("mirror   {}", shown(&report.mirror));
    for s in &report.sources {
        println!("source   {}", shown(s));
    }
    for s in Status::ALL {
        println!("{:>11} {}", s.as_str(), report.counts.get(s));
    }
    println!("{:>11} {}", "removed", report.counts.removed);
    if report.counts.no_text > 0 {
        println!(
            "{:>11} {} of the indexed hold no word: `leasehold list --no-text` says why",
            "no text", report.counts.no_text
        );
    }
    if let Some(l) = &report.listing {
        print_listing(l);
    }
    println!("live leases: {}", report.leases.len());
    for l in &report.leases {
        let owner = shown(l.owner_worker.as_deref().unwrap_or("?"));
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
        println!("  last skipped: {}", one_line(reason));
    }
}

/// How a command names one document: by key (or a path to its file) or by id.
#[derive(Debug, Clone)]
pub enum DocRef {
    /// A key as given: the key itself, `./key`, or a path to the file inside
    /// the source directory (absolute or relative to the working directory);
    /// a number that is no key falls back to the id, as before `--id`.
    Key(String),
    /// `--id N`.
    Id(i64),
}

impl DocRef {
    /// From the positional argument and `--id` (clap makes exactly one present).
    pub fn of(doc: Option<String>, id: Option<i64>) -> DocRef {
        match (id, doc) {
            (Some(id), _) => DocRef::Id(id),
            (None, doc) => DocRef::Key(doc.unwrap_or_default()),
        }
    }
}

/// The document `doc` names, or a runtime error saying nothing matched.
fn find_ref(cfg: &Config, doc: &DocRef) -> Result<Job, CliError> {
    match doc {
        DocRef::Id(id) => cfg
            .store
            .job(JobId(*id))?
            .ok_or_else(|| CliError::Runtime(format!("id {id}: no such document"))),
        DocRef::Key(key) => {
            for candidate in key_candidates(key, &cfg.recorded) {
                if let Some(job) = cfg.store.job_by_key(&candidate)? {
                    return Ok(job);
                }
            }
            find(&cfg.store, key)
        }
    }
}

/// The keys `given` may stand for, most literal first: itself; the key of
/// the file it names (absolute, or relative to the working directory) in
/// the recorded folder holding it; and itself without `./` and other `.`
/// components.
fn key_candidates(given: &str, recorded: &Recorded) -> Vec<String> {
    let mut keys = vec![given.to_owned()];
    let path = Path::new(given);
    let absolute = match path.is_absolute() {
        true => Some(path.to_path_buf()),
        false => std::env::current_dir().ok().map(|d| d.join(path)),
    };
    if let Some(key) = absolute
        .and_then(|a| resolved(&a))
        .and_then(|a| recorded.key_of(&a))
    {
        keys.push(key);
    }
    if path.is_relative() {
        let plain: PathBuf = path
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect();
        if !plain.as_os_str().is_empty() {
            keys.push(key_for(&plain));
        }
    }
    keys.dedup();
    keys
}

/// `path` with its directory part resolved (symlinks, `..`) as the
/// recorded folders are; the file name is kept as it is: a document may
/// itself be a symbolic link, keyed by its own name.
fn resolved(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    Some(path.parent()?.canonicalize().ok()?.join(name))
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
        "{doc:?}: no such document (give its key, a path inside one of the folders, or --id N)"
    )))
}

/// The times of a document's row, by field name.
const JOB_TIMES: [&str; 4] = ["created_at", "updated_at", "lease_expires_at", "retry_at"];

/// `value` (a serialized row) with `<field>_iso` beside each epoch-ms field
/// of `fields` that is set: JSON keeps the raw number and adds the local time.
fn with_iso_times(mut value: serde_json::Value, fields: &[&str]) -> serde_json::Value {
    if let Some(map) = value.as_object_mut() {
        for field in fields {
            if let Some(ms) = map.get(*field).and_then(serde_json::Value::as_i64) {
                map.insert(format!("{field}_iso"), when(ms).into());
            }
        }
    }
    value
}

/// `leasehold inspect KEY|--id N`.
pub fn inspect(cfg: &Config, doc: &DocRef, json: bool) -> Result<ExitCode, CliError> {
    let job = find_ref(cfg, doc)?;
    let history = cfg.store.history(JobId(job.id))?;
    if json {
        let history: Vec<serde_json::Value> = history
            .iter()
            .map(|h| with_iso_times(serde_json::to_value(h).unwrap_or_default(), &["at"]))
            .collect();
        let job = with_iso_times(serde_json::to_value(&job).unwrap_or_default(), &JOB_TIMES);
        print_json(&serde_json::json!({ "job": job, "history": history }));
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:?} (id {})", job.key, job.id);
    println!(
        "  status {}  fence {}  attempts {}/{}  lost leases {}",
        job.status, job.fence, job.attempts, job.max_attempts, job.lost_leases
    );
    println!("  version {}", job.version);
    if let Some(title) = &job.title {
        println!("  title {}", on_one_line(title));
    }
    if let Some(author) = &job.author {
        println!("  author {}", on_one_line(author));
    }
    if let Some(date) = &job.doc_date {
        println!("  dated {}", on_one_line(date));
    }
    if let Some(pages) = job.pages {
        println!("  pages {pages}");
    }
    if let Some(language) = &job.language {
        println!("  language {}", on_one_line(language));
    }
    if let (Some(path), Some(sum)) = (&job.result_path, &job.checksum) {
        let file = cfg.mirror.root().join(path);
        println!(
            "  result {} sha256 {}",
            shown(&file.display().to_string()),
            one_line(sum)
        );
    }
    if let (Some(why), Status::Indexed) = (&job.no_text, job.status) {
        println!("  no text: {} (a search cannot find it)", one_line(why));
    }
    if let Some(at) = job.lease_expires_at {
        println!(
            "  lease until {} ({})",
            when(at),
            shown(job.owner_worker.as_deref().unwrap_or("?"))
        );
    }
    if let Some(at) = job.retry_at {
        println!("  retry at {}", when(at));
    }
    if let Some(e) = &job.last_error {
        println!("  last error: {}", one_line(e));
    }
    if job.source_gone {
        println!("  source gone: {GONE_WHY}");
    }
    println!(
        "  created {}  updated {}",
        when(job.created_at),
        when(job.updated_at)
    );
    println!("history:");
    for h in &history {
        let fence = h.fence.map(|f| format!(" fence {f}")).unwrap_or_default();
        let token = h
            .token
            .as_deref()
            .map(|t| format!(" token {}", shown(t)))
            .unwrap_or_default();
        println!(
            "  {} {}{fence}{token}  {}",
            when(h.at),
            h.event,
            one_line(&readable_detail(h.detail.as_deref().unwrap_or("")))
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Which documents `list` shows.
#[derive(Debug, Clone)]
pub struct ListFilter {
    filter: JobFilter,
}

impl ListFilter {
    /// From `--status S` (one of clap's possible values, or `removed`),
    /// `--failed` (dead and retrying, not removed) and `--removed`; none
    /// means every document.
    pub fn of(status: Option<&str>, failed: bool, removed: bool) -> ListFilter {
        let filter = match (status, failed, removed) {
            (_, true, _) => JobFilter::failed(),
            (Some("removed"), _, _) | (_, _, true) => JobFilter::removed(),
            (Some(s), _, _) => s
                .parse::<Status>()
                .map_or_else(|_| JobFilter::default(), JobFilter::status),
            (None, false, false) => JobFilter::default(),
        };
        ListFilter { filter }
    }

    /// `--no-text`: the indexed documents whose text holds no word.
    pub fn no_text() -> ListFilter {
        ListFilter {
            filter: JobFilter::no_text(),
        }
    }
}

/// Documents read per query by `list`: memory stays bounded by a page, and no
/// read snapshot is held while lines are printed.
const LIST_PAGE: usize = 500;

/// One document as `list` shows it.
#[derive(Debug, serde::Serialize)]
struct ListLine {
    id: i64,
    key: String,
    status: &'static str,
    attempts: i64,
    max_attempts: i64,
    /// The accepted result's file (absolute), if any.
    result: Option<String>,
    last_error: Option<String>,
    /// Why the accepted text holds no word, when it holds none.
    no_text: Option<String>,
}

impl ListLine {
    fn of(job: Job, mirror: &leasehold::mirror::Mirror) -> ListLine {
        ListLine {
            id: job.id,
            result: job
                .result_path
                .as_ref()
                .map(|p| mirror.root().join(p).display().to_string()),
            last_error: job.last_error.as_deref().map(one_line),
            no_text: job
                .no_text
                .as_deref()
                .filter(|_| job.status == Status::Indexed)
                .map(one_line),
            // A dead document whose source was removed did not fail.
            status: if job.status == Status::Dead && job.source_gone {
                "removed"
            } else {
                job.status.as_str()
            },
            key: job.key,
            attempts: job.attempts,
            max_attempts: job.max_attempts,
        }
    }
}

/// `leasehold list [--status S|--failed] [--limit N] [--json]`: pages through
/// the store in id order (`--limit 0`: all of it); text columns are aligned
/// within each page.
pub fn list(cfg: &Config, filter: &ListFilter, limit: u64, json: bool) -> Result<ExitCode, CliError> {
    // 0: no limit, as `search --limit 0`.
    let limit = if limit == 0 { u64::MAX } else { limit };
    let total = filter.filter.count(&cfg.store.counts()?);
    let mut out = Out::default();
    let (mut after, mut shown) = (0_i64, 0_u64);
    if json {
        out.line("[");
    }
    while shown < limit {
        let want = usize::try_from(limit - shown)
            .unwrap_or(usize::MAX)
            .min(LIST_PAGE);
        let page = cfg.store.jobs_where(&filter.filter, JobId(after), want)?;
        let Some(last) = page.last() else { break };
        after = last.id;
        let lines: Vec<ListLine> = page.into_iter().map(|j| ListLine::of(j, &cfg.mirror)).collect();
        if json {
            for l in &lines {
                let sep = if shown == 0 { "" } else { "," };
                out.line(&format!("{sep}{}", serde_json::to_string(l).unwrap_or_default()));
                shown += 1;
            }
        } else {
            print_list_page(&mut out, &lines);
            shown += lines.len() as u64;
        }
        if out.closed {
            return Ok(ExitCode::SUCCESS);
        }
    }
    let more = total.saturating_sub(shown);
    if json {
        out.line("]");
        if more > 0 {
            eprintln!("leasehold: {more} more document(s) not listed (use --limit)");
        }
    } else if more > 0 {
        out.line(&format!("... {more} more (use --limit)"));
    } else if shown == 0 {
        eprintln!("leasehold: no documents match");
    }
    Ok(ExitCode::SUCCESS)
}

/// Lines of `list` in aligned columns: key, status, attempts, result, error.
/// Keys and paths holding control characters are shown escaped and quoted.
fn print_list_page(out: &mut Out, lines: &[ListLine]) {
    let keys: Vec<_> = lines.iter().map(|l| shown(&l.key)).collect();
    let key_width = keys.iter().map(|k| k.chars().count()).max().unwrap_or(0);
    for (l, key) in lines.iter().zip(&keys) {
        let tries = format!("{}/{}", l.attempts, l.max_attempts);
        let mut line = format!("{key:<key_width$}  {:<10}  {tries:>5}", l.status);
        if let Some(r) = &l.result {
            line.push_str(&format!("  {}", shown(r)));
        }
        if let Some(e) = &l.last_error {
            line.push_str(&format!("  {e}"));
        }
        if let Some(why) = &l.no_text {
            line.push_str(&format!("  no text: {why}"));
        }
        out.line(line.trim_end());
    }
}

/// Standard output that stops quietly when the reader goes away (`| head`).
#[derive(Default)]
struct Out {
    /// The reader closed the pipe; nothing more is written.
    closed: bool,
}

impl Out {
    fn line(&mut self, text: &str) {
        use std::io::Write;
        if !self.closed && writeln!(std::io::stdout(), "{text}").is_err() {
            self.closed = true;
        }
    }
}

/// `leasehold show KEY|--id N`: the accepted text, verified against its
/// checksum before a byte is printed, then streamed (never held whole).
pub fn show(cfg: &Config, doc: &DocRef) -> Result<ExitCode, CliError> {
    use std::io::Write;
    let job = find_ref(cfg, doc)?;
    let (Status::Indexed, Some(path), Some(sum)) = (job.status, &job.result_path, &job.checksum) else {
        let why = job
            .last_error
            .as_deref()
            .map(|e| format!(" ({})", one_line(e)))
            .unwrap_or_default();
        return Err(CliError::Runtime(format!(
            "{:?}: no accepted text: it is {}{why}",
            job.key, job.status
        )));
    };
    let damaged = |damage: leasehold::pipeline::Damage| {
        CliError::Runtime(format!(
            "{:?}: {}; `leasehold doctor --fix` queues it to be extracted again",
            job.key,
            damage.describe(&shown(path))
        ))
    };
    let mut file = match cfg.mirror.open_verified(path, sum) {
        Ok(Some(file)) => file,
        Ok(None) => return Err(damaged(leasehold::pipeline::Damage::Altered)),
        Err(e) if e.is_not_found() => return Err(damaged(leasehold::pipeline::Damage::Missing)),
        Err(e) => {
            return Err(CliError::Runtime(format!(
                "{:?}: result {}: {}",
                job.key,
                shown(path),
                one_line(&e.to_string())
            )))
        }
    };
    let mut stdout = std::io::stdout().lock();
    match std::io::copy(&mut file, &mut stdout).and_then(|_| stdout.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(CliError::Runtime(format!("writing the text: {e}"))),
    }
}

/// `leasehold gc`: the fenced cleanup over every document directory, then the
/// history retention (`[store] history_keep`). Refuses to
/// sweep a SQLite store that fails its quick check (a PostgreSQL server keeps
/// its own files sound).
pub fn gc(cfg: &Config, dry_run: bool, json: bool) -> Result<ExitCode, CliError> {
    let problems = if cfg.store.checks_pages() {
        cfg.store.check_integrity(false)?
    } else {
        Vec::new()
    };
    if !problems.is_empty() {
        return Err(CliError::Runtime(format!(
            "{}: corrupt store ({}); not sweeping the mirror",
            cfg.store.path().display(),
            problems[0].replace('\n', " ")
        )));
    }
    let report = sweep(&cfg.store, &cfg.mirror, dry_run)?;
    let history = cfg.store.prune_history(dry_run)?;
    if !dry_run {
        // Parts of long texts a completion replaced: left to delete later.
        cfg.store.purge_search_parts()?;
    }
    if json {
        print_json(&serde_json::json!({
            "dry_run": dry_run,
            "removed": report.removed,
            "unknown": report.unknown,
            "missing_rows": report.missing_rows,
            "busy": report.busy,
            "history": history,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    println!(
        "{verb} {} history line(s) from before {} ({} of them refused writes); \
         kept {} older line(s), each its document's last",
        history.removed,
        when(history.cutoff),
        history.removed_rejected,
        history.kept_last
    );
    println!(
        "{verb} {} file(s); kept {}",
        report.removed.len(),
        report.kept.len()
    );
    for f in &report.removed {
        println!("  {verb} {}", shown(f));
    }
    for f in &report.unknown {
        println!("  left alone (not ours) {}", shown(f));
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

/// What a document whose source is gone is, in `inspect` and `retry`.
const GONE_WHY: &str = "it was removed from the source; its results were forgotten \
    (`leasehold gc` removes their files); it is queued again if it comes back";

/// `leasehold retry KEY|--dead`: fresh attempts, under the limits of the next
/// run (a document that failed a limit succeeds once the limit is raised).
pub fn retry(cfg: &Config, doc: Option<&str>, dead: bool) -> Result<ExitCode, CliError> {
    if dead {
        let n = cfg.store.requeue_dead("requeued by `leasehold retry --dead`")?;
        println!("requeued {n} dead document(s)");
        let gone = cfg.store.totals()?.removed;
        if gone > 0 {
            println!("not requeued: {gone} document(s) whose source was removed (one that comes back is queued again)");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let job = find_ref(cfg, &DocRef::Key(doc.unwrap_or_default().to_owned()))?;
    if job.source_gone {
        return Err(CliError::Runtime(format!(
            "{:?}: not requeued: its source is gone (removed from the source; it is queued again if it comes back)",
            job.key
        )));
    }
    if cfg
        .store
        .requeue(JobId(job.id), "requeued by `leasehold retry`")?
    {
        println!("requeued {:?}", job.key);
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::Runtime(format!(
            "{:?}: not requeued: it is {} (only indexed, retrying and dead documents can be)",
            job.key, job.status
        )))
    }
}
