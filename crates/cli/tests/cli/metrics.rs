//! `leasehold metrics` and `--metrics-file`: the text is parsed by a strict
//! parser of the Prometheus text format written here, and its figures are
//! checked against `leasehold status --json` and what the run did. The
//! history's figures are checked on both engines.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use common::{Backend, TestDb};
use leasehold::testing::dup;
use leasehold::NewDoc;

/// One sample: metric name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

fn name_ok(name: &str, colon: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (!first && c.is_ascii_digit())
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

/// `{a="x",b="y\"z"}` → labels; the rest of the line after the closing brace.
fn parse_labels(text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = text.strip_prefix('{').ok_or("labels must start with {")?;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !name_ok(name, false) {
            return Err(format!("bad label name {name:?}"));
        }
        let mut chars = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value must be quoted")?
            .char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    c => return Err(format!("bad escape \\{c}")),
                },
                (i, '"') => break i,
                (_, '\n') => return Err("raw line feed in a label value".into()),
                (_, c) => value.push(c),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        let after = &rest[eq + 1..][1 + end + 1..];
        rest = after.strip_prefix(',').unwrap_or(after);
    }
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        v => v.parse().map_err(|_| format!("bad value {v:?}")),
    }
}

/// A strict parser: HELP and TYPE once per family, TYPE before its samples,
/// known types, valid names, every sample in a declared family (a histogram's
/// `_bucket`/`_sum`/`_count`), no sample twice, a histogram's buckets
/// cumulative and ending at `+Inf` equal to its `_count`.
fn parse(text: &str) -> Result<(BTreeMap<String, String>, Vec<Sample>), String> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helps = HashSet::new();
    let mut seen = HashSet::new();
    let mut samples = Vec::new();
    if !text.ends_with('\n') {
        return Err("the text must end with a line feed".into());
    }
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            if !name_ok(name, true) || !helps.insert(name.to_owned()) {
                return Err(format!("bad or repeated HELP: {line}"));
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or(format!("bad TYPE: {line}"))?;
            let known = ["counter", "gauge", "histogram", "summary", "untyped"];
            if !name_ok(name, true) || !known.contains(&kind) || types.contains_key(name) {
                return Err(format!("bad or repeated TYPE: {line}"));
            }
            types.insert(name.to_owned(), kind.to_owned());
        } else if line.starts_with('#') || line.is_empty() {
            return Err(format!("unexpected line {line:?}"));
        } else {
            let end = line.find(['{', ' ']).ok_or(format!("no value: {line}"))?;
            let name = &line[..end];
            let (labels, rest) = if line[end..].starts_with('{') {
                parse_labels(&line[end..])?
            } else {
                (BTreeMap::new(), &line[end..])
            };
            let value = parse_value(
                rest.strip_prefix(' ')
                    .ok_or(format!("no space before value: {line}"))?,
            )?;
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
                })
                .unwrap_or(name);
            if !name_ok(name, true) || !types.contains_key(family) {
                return Err(format!("sample of an undeclared family: {line}"));
            }
            if !seen.insert(format!("{name}{labels:?}")) {
                return Err(format!("sample twice: {line}"));
            }
            samples.push((name.to_owned(), labels, value));
        }
    }
    check_histograms(&types, &samples)?;
    Ok((types, samples))
}

fn check_histograms(types: &BTreeMap<String, String>, samples: &[Sample]) -> Result<(), String> {
    for (family, _) in types.iter().filter(|(_, k)| *k == "histogram") {
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for (name, labels, v) in samples
            .iter()
            .filter(|(n, _, _)| *n == format!("{family}_bucket"))
        {
            let mut rest = labels.clone();
            let le = parse_value(&rest.remove("le").ok_or(format!("{name} without le"))?)?;
            series.entry(format!("{rest:?}")).or_default().push((le, *v));
        }
        for (key, buckets) in series {
            let cumulative = buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1);
            let last = buckets.last().ok_or("empty histogram")?;
            let count = samples
                .iter()
                .find(|(n, l, _)| *n == format!("{family}_count") && format!("{l:?}") == key)
                .ok_or(format!("{family}{key} without _count"))?;
            if !cumulative || last.0 != f64::INFINITY || last.1 != count.2 {
                return Err(format!("{family}{key}: buckets {buckets:?}, count {}", count.2));
            }
        }
    }
    Ok(())
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<String, String> = labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    samples
        .iter()
        .find(|(n, l, _)| n == name && *l == want)
        .map(|s| s.2)
}

fn leasehold(data: &Path, args: &[&str]) -> std::process::Output {
    let out = common::leasehold(data, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_parser_refuses_what_the_format_does_not_allow() {
    let ok = "# HELP a_b Help.\n# TYPE a_b counter\na_b{x=\"q\\\"\\\\\\n\"} 1\n";
    let (_, samples) = parse(ok).unwrap();
    assert_eq!(samples[0].1["x"], "q\"\\\n");
    for bad in [
        "a 1\n",                                          // no TYPE
        "# TYPE a counter\na{x=\"1\"} 1\na{x=\"1\"} 2\n", // twice
        "# TYPE a counter\na{x=\"1} 1\n",                 // unterminated
        "# TYPE 1a counter\n",                            // bad name
        "# TYPE a counter\na 1",                          // no final line feed
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
    ] {
        assert!(parse(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn metrics_match_status_and_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (docs, data) = (dir.path().join("docs"), dir.path().join("data"));
    std::fs::create_dir_all(&docs).unwrap();
    for i in 0..4 {
        std::fs::write(docs.join(format!("n{i}.txt")), format!("note {i}")).unwrap();
    }
    std::fs::write(docs.join("guide.md"), "# Guide\n\ntext").unwrap();
    std::fs::write(docs.join("big.txt"), "x".repeat(4096)).unwrap();
    let file = dir.path().join("leasehold.prom");
    let docs_arg = docs.to_str().unwrap();
    let file_arg = file.to_str().unwrap();
    leasehold(
        &data,
        &["run", docs_arg, "--max-input", "1KiB", "--metrics-file", file_arg],
    );

    let text = String::from_utf8(leasehold(&data, &["metrics"]).stdout).unwrap();
    let (types, samples) = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let status: serde_json::Value =
        serde_json::from_slice(&leasehold(&data, &["status", "--json"]).stdout).unwrap();
    for s in ["discovered", "extracting", "indexed", "retrying", "dead"] {
        let want = status["counts"][s].as_u64().unwrap() as f64;
        assert_eq!(
            value(&samples, "leasehold_documents", &[("status", s)]),
            Some(want),
            "{s}\n{text}"
        );
    }
    let leases = status["leases"].as_array().unwrap().len() as f64;
    assert_eq!(value(&samples, "leasehold_live_leases", &[]), Some(leases));
    assert_eq!(types["leasehold_claims_total"], "counter");
    assert_eq!(
        value(&samples, "leasehold_claims_total", &[]),
        Some(6.0),
        "{text}"
    );
    assert_eq!(
        value(
            &samples,
            "leasehold_completions_total",
            &[("outcome", "accepted")]
        ),
        Some(5.0)
    );
    assert_eq!(
        value(&samples, "leasehold_completions_total", &[("outcome", "refused")]),
        Some(0.0)
    );
    assert_eq!(value(&samples, "leasehold_lease_takeovers_total", &[]), Some(0.0));
    assert_eq!(
        value(&samples, "leasehold_failures_total", &[("reason", "limit")]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &samples,
            "leasehold_extraction_seconds_count",
            &[("format", "txt")]
        ),
        Some(4.0)
    );
    assert_eq!(
        value(
            &samples,
            "leasehold_extraction_seconds_count",
            &[("format", "md")]
        ),
        Some(1.0)
    );
    // The accepted texts' sizes, read from the mirror: four notes of 6 bytes.
    assert_eq!(
        value(&samples, "leasehold_extracted_bytes_count", &[("format", "txt")]),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        value(&samples, "leasehold_extracted_bytes_sum", &[("format", "txt")]),
        Some(24.0)
    );
    assert_eq!(
        value(
            &samples,
            "leasehold_extracted_bytes_bucket",
            &[("format", "txt"), ("le", "1024")]
        ),
        Some(4.0)
    );
    // The run's waits for the write lock, folded into the store by the run
    // and read back by another process.
    let waits = value(&samples, "leasehold_write_lock_wait_seconds_count", &[]).unwrap_or(0.0);
    assert!(waits >= 6.0, "at least one wait per claim: {waits}\n{text}");
    assert_eq!(
        value(
            &samples,
            "leasehold_write_lock_wait_seconds_bucket",
            &[("le", "+Inf")]
        ),
        Some(waits)
    );
    assert_eq!(value(&samples, "leasehold_outbox_depth", &[]), Some(0.0));
    // The file the run kept was written at its exit, from the same store.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// The history's figures on both engines: a takeover, a refused completion,
/// the time from claim to completion.
fn history_figures_on_both(backend: Backend) {
    let t = TestDb::new(backend);
    let store = t.handle(10);
    store.enqueue(&NewDoc::new("a/report.PDF", "v1")).unwrap();
    let late = store.claim("late").unwrap().unwrap();
    t.clock.advance(Duration::from_millis(11));
    let taken = store.claim("thief").unwrap().unwrap();
    assert!(!store
        .complete(dup(&late), leasehold::Completion::new("x", "y"))
        .unwrap()
        .is_accepted());
    t.clock.advance(Duration::from_millis(1500));
    assert!(store
        .complete(taken, leasehold::Completion::new("r", "s"))
        .unwrap()
        .is_accepted());
    let f = store.history_figures().unwrap();
    assert_eq!(f.events.get("claimed"), Some(&2));
    assert_eq!(f.events.get("completed"), Some(&1));
    assert_eq!(f.events.get("complete_rejected"), Some(&1));
    assert_eq!(f.takeovers, 1);
    assert_eq!(f.extractions, vec![("a/report.PDF".to_owned(), 1500)]);
}

on_both_backends!(history_figures_on_both);

/// A write held off by another connection's transaction counts its wait, and
/// the wait is folded into the store where another handle reads it.
#[test]
fn a_write_held_off_by_another_transaction_counts_its_wait() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let store = leasehold::Store::open(&db, leasehold::StoreOptions::default()).unwrap();
    let before = store.write_waits().unwrap().expect("SQLite measures");
    let mut other = rusqlite::Connection::open(&db).unwrap();
    let held = other
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let (asking, asked) = std::sync::mpsc::channel();
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            asking.send(()).unwrap();
            store.enqueue(&NewDoc::new("a.txt", "v1")).unwrap();
            store.fold_write_waits().unwrap();
        })
    };
    asked.recv().unwrap();
    // The writer cannot take the lock until this transaction ends. Its wait
    // is measured from its asking for a write transaction, which it does
    // holding the turnstile's `-write` lock (src/store/turnstile.rs): once
    // that lock is seen taken the wait has begun, and the transaction is
    // held 150 ms longer, so the wait is longer than 0.1 s however the
    // threads are scheduled. The deadline only bounds a hang.
    let turn = {
        let mut p = db.clone().into_os_string();
        p.push("-write");
        std::path::PathBuf::from(p)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never asked for the lock"
        );
        if let Ok(f) = std::fs::File::open(&turn) {
            if fs2::FileExt::try_lock_exclusive(&f).is_err() {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(150));
    held.commit().unwrap();
    writer.join().unwrap();

    let reader = leasehold::Store::open(&db, leasehold::StoreOptions::default()).unwrap();
    let after = reader.write_waits().unwrap().unwrap();
    assert!(after.count > before.count, "{after:?}");
    let slow: u64 = after.buckets[5..].iter().sum();
    assert_eq!(slow, 1, "one wait longer than 0.1 s: {after:?}");
    assert!(after.sum_us >= 100_000, "{after:?}");
}

/// A command folds its last waits into the store as it ends, with or
/// without a metrics file.
#[test]
fn a_run_leaves_its_write_lock_waits_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let (docs, data) = (dir.path().join("docs"), dir.path().join("data"));
    std::fs::create_dir_all(&docs).unwrap();
    for i in 0..3 {
        std::fs::write(docs.join(format!("n{i}.txt")), format!("note {i}")).unwrap();
    }
    leasehold(&data, &["run", docs.to_str().unwrap()]);
    let text = String::from_utf8(leasehold(&data, &["metrics"]).stdout).unwrap();
    let (_, samples) = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    // At least the scan, a claim and a completion: each a write transaction.
    let waits = value(&samples, "leasehold_write_lock_wait_seconds_count", &[]).unwrap_or(0.0);
    assert!(waits >= 3.0, "{text}");
}
