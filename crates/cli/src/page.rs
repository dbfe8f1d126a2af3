//! `leasehold report --html FILE`: one self-contained page drawn from the
//! history table (and the gate's history): throughput over time, failures by
//! reason and by format, queue depth over time, lease takeovers and refused
//! writes, the gate's incidents on a timeline, the slowest documents.
//!
//! Inline SVG and inline CSS only: no script, no font, no image, nothing the
//! page would fetch. The figures are read from the store, so the page says
//! the same whichever machine writes it; what `gc`'s retention removed is
//! not on it.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use leasehold::store::HistoryLine;
use leasehold::{Millis, Store};

use super::charts::{self, escape, Span};
use super::config::Config;
use super::error::CliError;
use super::metrics::{format_of, reason_class, write_atomically};
use super::report::when;

/// Time buckets of the charts over time.
const BUCKETS: usize = 24;
/// Documents in the slowest list.
const SLOWEST: usize = 10;

/// The time range of the page and its buckets.
struct Range {
    start: Millis,
    end: Millis,
}

impl Range {
    fn of(lines: &[HistoryLine], more: impl Iterator<Item = Millis>) -> Option<Range> {
        let times: Vec<Millis> = lines.iter().map(|l| l.at).chain(more).collect();
        let (start, end) = (*times.iter().min()?, *times.iter().max()?);
        Some(Range {
            start,
            end: end.max(start + 1),
        })
    }

    fn width(&self) -> f64 {
        (self.end - self.start) as f64 / BUCKETS as f64
    }

    /// The bucket `at` falls in.
    fn bucket(&self, at: Millis) -> usize {
        (((at - self.start) as f64 / self.width()) as usize).min(BUCKETS - 1)
    }

    /// Where `at` lies, from 0 (start) to 1 (end).
    fn fraction(&self, at: Millis) -> f64 {
        (at - self.start) as f64 / (self.end - self.start) as f64
    }

    /// Each bucket's start.
    fn starts(&self) -> Vec<Millis> {
        (0..BUCKETS)
            .map(|i| self.start + (self.width() * i as f64) as Millis)
            .collect()
    }

    /// Each bucket's start, as people read it.
    fn labels(&self) -> Vec<String> {
        self.starts().into_iter().map(when).collect()
    }
}

/// A claim that took a lease over from a lapsed one.
fn is_takeover(l: &HistoryLine) -> bool {
    l.event == "claimed" && l.detail.contains("took over from fence")
}

/// A write the fencing rule refused.
fn is_refused(l: &HistoryLine) -> bool {
    l.event.ends_with("_rejected")
}

/// Lines of `event` per bucket.
fn per_bucket(range: &Range, lines: &[HistoryLine], keep: impl Fn(&HistoryLine) -> bool) -> Vec<f64> {
    let mut counts = vec![0.0; BUCKETS];
    for l in lines.iter().filter(|l| keep(l)) {
        counts[range.bucket(l.at)] += 1.0;
    }
    counts
}

/// (category, value) pairs, largest first, as the bar charts show them.
type Ranked = Vec<(String, f64)>;

/// Sorted largest first, as the bar charts show them.
fn ranked(counts: BTreeMap<String, u64>) -> Ranked {
    let mut items: Vec<(String, f64)> = counts.into_iter().map(|(k, n)| (k, n as f64)).collect();
    items.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    items
}

/// Failures (`failed` and `dead` lines) by reason class and by format.
fn failures(lines: &[HistoryLine]) -> (Ranked, Ranked) {
    let (mut by_reason, mut by_format) = (BTreeMap::new(), BTreeMap::new());
    for l in lines.iter().filter(|l| l.event == "failed" || l.event == "dead") {
        *by_reason
            .entry(reason_class(&l.event, &l.detail).to_owned())
            .or_insert(0) += 1;
        *by_format.entry(format_of(&l.key)).or_insert(0) += 1;
    }
    (ranked(by_reason), ranked(by_format))
}

/// Documents waiting or in work at the end of each bucket, replayed from the
/// history: a document is in the queue from its `enqueued`/`requeued` line
/// until a `completed` or `dead` line, or its last `failed` line when it is
/// dead now (a failure that gave up leaves no other trace).
fn queue_depth(range: &Range, lines: &[HistoryLine]) -> Vec<f64> {
    let last: HashMap<i64, usize> = lines.iter().enumerate().map(|(i, l)| (l.job_id, i)).collect();
    let mut queued: HashMap<i64, bool> = HashMap::new();
    let mut depth = 0i64;
    let mut out = vec![0.0; BUCKETS];
    let mut bucket = 0;
    for (i, l) in lines.iter().enumerate() {
        while bucket < range.bucket(l.at) {
            out[bucket] = depth as f64;
            bucket += 1;
        }
        let settled = l.event == "completed"
            || l.event == "dead"
            || (l.event == "failed" && last.get(&l.job_id) == Some(&i) && l.status == "dead");
        let waiting = matches!(
            l.event.as_str(),
            "enqueued" | "requeued" | "released" | "claimed" | "failed"
        );
        let now_in = if settled {
            false
        } else if waiting {
            true
        } else {
            queued.get(&l.job_id).copied().unwrap_or(false)
        };
        let was_in = queued.insert(l.job_id, now_in).unwrap_or(false);
        depth += i64::from(now_in) - i64::from(was_in);
    }
    for slot in out.iter_mut().skip(bucket) {
        *slot = depth as f64;
    }
    out
}

/// (key, seconds) of the slowest accepted extractions: the time the
/// completion says its document took (fetch, extraction and the write of
/// its text: `; took 12 ms`), or, for a line written before completions
/// said it, from the document's latest claim to its completion (which a
/// batch's documents share).
pub(crate) fn slowest(lines: &[HistoryLine]) -> Vec<(String, f64)> {
    let mut claimed: HashMap<i64, Millis> = HashMap::new();
    let mut took: Vec<(String, f64)> = Vec::new();
    for l in lines {
        match l.event.as_str() {
            "claimed" => {
                claimed.insert(l.job_id, l.at);
            }
            "completed" => {
                let own = took_ms(&l.detail).map(|ms| ms as f64 / 1000.0);
                let since_claim = claimed
                    .get(&l.job_id)
                    .map(|from| (l.at - from).max(0) as f64 / 1000.0);
                if let Some(seconds) = own.or(since_claim) {
                    took.push((l.key.clone(), seconds));
                }
            }
            _ => {}
        }
    }
    took.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    took.truncate(SLOWEST);
    took
}

/// The report's figures for the status page's charts (`serve`): each
/// bucket's start in milliseconds since the epoch, so that the page writes
/// the axes in its reader's local time, and the same series the report
/// draws. Nothing but `{"starts": []}` when the history is empty.
pub(crate) fn figures(store: &Store) -> leasehold::Result<serde_json::Value> {
    let lines = store.history_lines()?;
    let Some(range) = Range::of(&lines, std::iter::empty()) else {
        return Ok(serde_json::json!({ "starts": [] }));
    };
    let (by_reason, by_format) = failures(&lines);
    Ok(serde_json::json!({
        "starts": range.starts(),
        "end": range.end,
        "completed": per_bucket(&range, &lines, |l| l.event == "completed"),
        "takeovers": per_bucket(&range, &lines, is_takeover),
        "refused": per_bucket(&range, &lines, is_refused),
        "queue": queue_depth(&range, &lines),
        "failures_by_reason": by_reason,
        "failures_by_format": by_format,
        "slowest": slowest(&lines),
    }))
}

/// The milliseconds a completion's detail says its document took: the
/// worker's `took N ms`, after the extractor's note (`…; took N ms`) or as
/// the whole note when the extractor gave none (`extracted as took N ms`).
fn took_ms(detail: &str) -> Option<u64> {
    let (before, rest) = detail.rsplit_once("took ")?;
    if !(before.ends_with("; ") || before.ends_with("extracted as ")) {
        return None;
    }
    rest.strip_suffix(" ms")?.parse().ok()
}

/// One lock incident of one account.
struct Incident {
    account: String,
    from: Millis,
    /// Its recovery or manual unlock; `None` while it lasts.
    to: Option<Millis>,
    title: String,
}

/// The gate's incidents: one span per account and incident, from its first
/// line to its recovery (or a manual unlock), else to the end of the range.
/// Also every account's name, incidents or not.
fn incidents(store: &Store) -> leasehold::Result<(Vec<String>, Vec<Incident>)> {
    let mut lanes = Vec::new();
    let mut spans = Vec::new();
    for account in store.accounts().states()? {
        let events = store.accounts().history(&account.name)?;
        let mut by_epoch: BTreeMap<i64, (Millis, Option<Millis>, usize)> = BTreeMap::new();
        for e in events.iter().filter(|e| e.epoch > 0) {
            let entry = by_epoch.entry(e.epoch).or_insert((e.at, None, 0));
            entry.0 = entry.0.min(e.at);
            if e.event == "recovered" || e.event == "manual_unlock" {
                entry.1 = Some(e.at);
            }
            entry.2 += usize::from(e.event.starts_with("probe"));
        }
        for (epoch, (from, to, probes)) in by_epoch {
            let title = format!("{}: incident {epoch}, {probes} probe line(s)", account.name);
            spans.push(Incident {
                account: account.name.clone(),
                from,
                to,
                title,
            });
        }
        lanes.push(account.name);
    }
    Ok((lanes, spans))
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:800px}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}summary h2{display:inline}summary{cursor:pointer}svg text{font-size:11px;fill:#333}";

/// The whole page.
pub fn render(store: &Store) -> leasehold::Result<String> {
    let lines = store.history_lines()?;
    let (lanes, gate) = incidents(store)?;
    let range = Range::of(&lines, gate.iter().flat_map(|g| [Some(g.from), g.to]).flatten());
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>leasehold report</title><style>{STYLE}</style></head><body>\
         <h1>leasehold report</h1><p>{} history line(s) of {}",
        lines.len(),
        escape(&store.path().display().to_string())
    );
    if let Some(r) = &range {
        let _ = write!(
            html,
            ", from {} to {}",
            escape(&when(r.start)),
            escape(&when(r.end))
        );
    }
    html.push_str(".</p>");
    let t = store.totals()?;
    let _ = write!(
        html,
        "<p id=\"store\">Now: {} indexed, of which {} without text (nothing in them to search: \
         <code>leasehold list --no-text</code>); {} failed ({} retrying, {} dead); {} removed; {} queued.</p>",
        t.indexed,
        t.no_text,
        t.retrying + t.dead,
        t.retrying,
        t.dead,
        t.removed,
        t.queued + t.extracting
    );
    let labels = range.as_ref().map(Range::labels).unwrap_or_default();
    let over_time = |keep: &dyn Fn(&HistoryLine) -> bool| -> Vec<f64> {
        range
            .as_ref()
            .map(|r| per_bucket(r, &lines, keep))
            .unwrap_or_default()
    };
    let completed = over_time(&|l| l.event == "completed");
    section(
        &mut html,
        "throughput",
        "Throughput: documents completed over time",
        &charts::columns(
            "documents completed per interval",
            &labels,
            &[("completed", completed)],
        ),
    );
    let (by_reason, by_format) = failures(&lines);
    section(
        &mut html,
        "failures-by-reason",
        "Failures by reason",
        &charts::bars("failures by reason class", &by_reason),
    );
    section(
        &mut html,
        "failures-by-format",
        "Failures by format",
        &charts::bars("failures by document format", &by_format),
    );
    let depth = range.as_ref().map(|r| queue_depth(r, &lines)).unwrap_or_default();
    section(
        &mut html,
        "queue-depth",
        "Queue depth over time",
        &charts::line("documents waiting or in work", &labels, &depth),
    );
    let takeovers = over_time(&is_takeover);
    let refused = over_time(&is_refused);
    section(
        &mut html,
        "fencing",
        "Lease takeovers and refused writes",
        &charts::columns(
            "takeovers and refused writes per interval",
            &labels,
            &[("lease takeovers", takeovers), ("refused writes", refused)],
        ),
    );
    let spans: Vec<Span> = match &range {
        Some(r) => gate
            .iter()
            .map(|g| Span {
                lane: g.account.clone(),
                from: r.fraction(g.from),
                to: g.to.map_or(1.0, |t| r.fraction(t)),
                title: g.title.clone(),
            })
            .collect(),
        None => Vec::new(),
    };
    let ends = range
        .as_ref()
        .map(|r| (when(r.start), when(r.end)))
        .unwrap_or_default();
    section(
        &mut html,
        "gate",
        "The gate's incidents",
        &charts::timeline("lock incidents per account", &lanes, &spans, (&ends.0, &ends.1)),
    );
    let slow = slowest(&lines);
    section(
        &mut html,
        "slowest",
        "Slowest documents (seconds each took: fetch, extraction, write; from claim to completion before that was recorded)",
        &charts::bars("slowest documents", &slow),
    );
    html.push_str("</body></html>\n");
    Ok(html)
}

/// A chart under its title; one with no data is a closed section saying so.
fn section(html: &mut String, id: &str, title: &str, chart: &str) {
    let (open, none) = match chart.contains(charts::EMPTY_MARK) {
        true => ("", " <small>(no data)</small>"),
        false => (" open", ""),
    };
    let _ = write!(
        html,
        "<section id=\"{id}\"><details{open}><summary><h2>{}{none}</h2></summary>{chart}</details></section>",
        escape(title)
    );
}

/// `leasehold report --html FILE`: write the page (atomically).
pub fn report(cfg: &Config, file: &Path) -> Result<ExitCode, CliError> {
    let page = render(&cfg.store)?;
    write_atomically(file, &page).map_err(|e| CliError::Runtime(format!("{}: {e}", file.display())))?;
    println!("wrote {}", file.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(job_id: i64, at: Millis, event: &str, status: &str) -> HistoryLine {
        HistoryLine {
            job_id,
            at,
            event: event.into(),
            detail: String::new(),
            key: format!("k{job_id}.txt"),
            status: status.into(),
        }
    }

    #[test]
    fn a_chart_without_data_is_a_closed_section() {
        let mut html = String::new();
        section(
            &mut html,
            "a",
            "Empty",
            &charts::columns("c", &[], &[("x", vec![])]),
        );
        section(&mut html, "b", "Full", &charts::line("l", &["t".into()], &[1.0]));
        assert!(
            html.contains("<section id=\"a\"><details><summary><h2>Empty <small>(no data)</small>"),
            "{html}"
        );
        assert!(
            html.contains("<section id=\"b\"><details open><summary><h2>Full</h2>"),
            "{html}"
        );
    }

    /// A batch's documents share their claim and completion times; each is
    /// timed by what its completion says it took.
    #[test]
    fn the_slowest_are_timed_each_by_its_own_work() {
        let mut lines = Vec::new();
        for (id, took) in [(1, 40), (2, 900), (3, 7)] {
            lines.push(line(id, 1_000, "claimed", "extracting"));
            let mut done = line(id, 2_000, "completed", "indexed");
            done.detail =
                format!("version v; r; sha256 s; extracted as plain_text, encoding utf-8; took {took} ms");
            lines.push(done);
        }
        // An extractor that names no format: the time is the whole note.
        let mut bare = line(5, 2_000, "completed", "indexed");
        bare.detail = "version v; r; sha256 s; extracted as took 300 ms".into();
        lines.push(line(5, 1_000, "claimed", "extracting"));
        lines.push(bare);
        let mut old = line(4, 2_500, "completed", "indexed");
        old.detail = "version v; r; sha256 s; extracted as plain_text".into();
        lines.push(line(4, 1_000, "claimed", "extracting"));
        lines.push(old);
        assert_eq!(
            slowest(&lines),
            [
                ("k4.txt".to_owned(), 1.5),
                ("k2.txt".to_owned(), 0.9),
                ("k5.txt".to_owned(), 0.3),
                ("k1.txt".to_owned(), 0.04),
                ("k3.txt".to_owned(), 0.007)
            ]
        );
    }

    #[test]
    fn the_queue_is_replayed_from_the_history() {
        let lines = vec![
            line(1, 0, "enqueued", "indexed"),
            line(2, 0, "enqueued", "dead"),
            line(1, 10, "claimed", "indexed"),
            line(1, 20, "completed", "indexed"),
            line(2, 30, "claimed", "dead"),
            line(2, 2400, "failed", "dead"),
        ];
        let range = Range::of(&lines, std::iter::empty()).unwrap();
        let depth = queue_depth(&range, &lines);
        assert_eq!(depth.len(), BUCKETS);
        assert_eq!(depth[0], 1.0, "one done in the first interval, one waiting");
        assert_eq!(depth[BUCKETS - 1], 0.0, "the failure gave up");
        assert_eq!(slowest(&lines), vec![("k1.txt".to_owned(), 0.01)]);
    }
}
