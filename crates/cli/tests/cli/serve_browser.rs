//! The search page and the status page in a real browser (headless
//! Chromium through its DevTools pipe) against a real `leasehold serve`:
//! typing a query shows the matching titles, a hit opens its original, the
//! pager and the type filter move through the results, the address keeps
//! the search, the status shows a `run` progressing and retries a failed
//! document. Screenshots of both pages are kept in the target directory
//! (`target/tmp/screenshots/`), as the run's artefacts.

use std::path::{Path, PathBuf};

use crate::common::cdp::Browser;
use crate::common::leasehold;
use crate::common::served::Served;

/// 30 tide reports (plain text, so each is titled by its file name), the
/// samples' PDF and a PDF that is not one.
fn corpus(dir: &Path) -> (PathBuf, PathBuf) {
    let docs = dir.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    for n in 1..=30 {
        let text = format!("Tide report {n:02}\n\nHigh water at the harbour wall, {n} minutes past noon.\n");
        std::fs::write(docs.join(format!("tide-{n:02}.txt")), text).unwrap();
    }
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples");
    std::fs::copy(samples.join("report.pdf"), docs.join("report.pdf")).unwrap();
    std::fs::write(docs.join("broken.pdf"), b"%PDF-1.7\nnot a PDF after all\n").unwrap();
    let data = dir.join("data");
    leasehold(&data, &["run", docs.to_str().unwrap(), "-q"]);
    (docs, data)
}

fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots")
}

const TITLES: &str = "[...document.querySelectorAll('#hits .title')].map(a => a.textContent)";

#[test]
fn search_open_page_and_filter_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let (docs, data) = corpus(dir.path());
    let served = Served::start(&data, &[]);
    let mut browser = Browser::open(&served.url);
    let origin = format!("http://{}", served.host());

    // The token is traded for a cookie and the box has the focus.
    browser.wait_for(
        "document.readyState === 'complete' && location.pathname === '/' && !location.search.includes('token')",
        "the redirect",
    );
    browser.wait_for(
        "document.activeElement && document.activeElement.id === 'q'",
        "focus on the box",
    );

    browser.type_text("harbour wall");
    let titles = browser.wait_for(&format!("{TITLES}.length === 20 && {TITLES}"), "a page of titles");
    assert!(
        titles
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.as_str().unwrap().starts_with("tide-")),
        "{titles}"
    );
    let summary = browser.eval("document.getElementById('summary').textContent");
    assert_eq!(summary, "30 documents match, 1–20 shown");
    assert!(browser
        .eval("document.querySelector('#hits mark').textContent")
        .as_str()
        .unwrap()
        .eq_ignore_ascii_case("harbour"));
    assert_eq!(browser.eval("location.search"), "?q=harbour+wall");
    browser.screenshot(&screenshots().join("search.png"));

    // The next page, in the address too.
    browser.eval("document.getElementById('next').click()");
    browser.wait_for(
        "document.getElementById('summary').textContent.endsWith('21–30 shown')",
        "page 2",
    );
    assert_eq!(browser.eval("location.search"), "?q=harbour+wall&page=2");

    // Down to the first hit and Enter: its original, byte for byte.
    browser.press("ArrowDown");
    browser.wait_for(
        "document.querySelector('#hits .hit.selected') !== null",
        "a selected hit",
    );
    let key = browser.eval(
        "decodeURIComponent(document.querySelector('#hits .hit.selected .title').href.split('key=')[1])",
    );
    browser.press("Enter");
    browser.wait_for("location.pathname === '/doc/original'", "the original");
    let shown = browser.wait_for("document.body && document.body.innerText", "its text");
    let file = std::fs::read_to_string(docs.join(key.as_str().unwrap())).unwrap();
    assert_eq!(shown.as_str().unwrap().trim_end(), file.trim_end());

    // A search in the address is shown on load, its filter applied from the page.
    browser.go(&format!("{origin}/?q=report"));
    browser.wait_for(&format!("{TITLES}.length > 1"), "matches of 'report'");
    browser.eval(
        "const t = document.getElementById('type'); t.value = 'pdf'; t.dispatchEvent(new Event('change'))",
    );
    let wheres = "[...document.querySelectorAll('#hits .where')].map(w => w.textContent)";
    let only_pdf = format!(
        "location.search === '?q=report&type=pdf' && {wheres}.length > 0 && {wheres}.every(w => w.endsWith('.pdf')) && {wheres}"
    );
    let wheres = browser.wait_for(&only_pdf, "only PDFs");
    assert_eq!(wheres.as_array().unwrap().len(), 1, "{wheres}");
}

#[test]
fn the_status_page_follows_a_run_and_retries_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let (_docs, data) = corpus(dir.path());
    let served = Served::start(&data, &["--allow-retry"]);
    let mut browser = Browser::open(&served.url);
    let origin = format!("http://{}", served.host());
    browser.wait_for(
        "document.readyState === 'complete' && location.pathname === '/'",
        "the redirect",
    );
    browser.go(&format!("{origin}/status"));
    browser.wait_for(
        "document.querySelector('#failures tr[data-key=\"broken.pdf\"]') !== null",
        "the failure listed",
    );

    // A run of 60 documents that each take 80-120 ms (the test extractor):
    // some seconds, against the page's poll every second.
    let more = dir.path().join("more");
    std::fs::create_dir_all(&more).unwrap();
    for n in 0..60 {
        std::fs::write(more.join(format!("log-{n:02}.txt")), format!("entry {n}\n")).unwrap();
    }
    let mut run = crate::common::leasehold_command(&data)
        .args(["run", more.to_str().unwrap(), "-q", "--workers", "1"])
        .env("LEASEHOLD_TEST_EXTRACTOR", "sleep:80:120")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let progress = "[document.getElementById('progress').value, document.getElementById('progress').max]";
    let mut seen = std::collections::BTreeSet::new();
    let first = browser.wait_for(
        &format!("{progress}[1] > 40 && {progress}"),
        "the run's documents counted",
    );
    seen.insert(first[0].as_u64().unwrap());
    let settled = loop {
        let now = browser.wait_for(progress, "the progress");
        let (value, max) = (now[0].as_u64().unwrap(), now[1].as_u64().unwrap());
        seen.insert(value);
        if value == max {
            break now;
        }
        browser.wait_for(
            &format!("document.getElementById('progress').value !== {value}"),
            "the progress to move",
        );
    };
    assert!(run.wait().unwrap().success());
    assert!(seen.len() >= 3, "the bar moved while the run worked: {seen:?}");
    assert_eq!(settled[1], 32 + 60, "{settled}");
    // The folder the run added is listed without a restart.
    browser.wait_for(
        "[...document.querySelectorAll('#folders li')].some(li => li.textContent.endsWith('/more'))",
        "the folder the run added",
    );
    // The history's charts: times on the axis in local time (no ISO
    // stamps), the legend off the plot, empty sections closed, the slowest
    // documents timed each by its own work (80-120 ms here, not the batch's).
    let ticks = browser.wait_for(
        "[...document.querySelectorAll('#chart-throughput text.tick')].map(t => t.textContent)",
        "the throughput chart's time axis",
    );
    let ticks: Vec<&str> = ticks
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        !ticks.is_empty()
            && ticks
                .iter()
                .all(|t| t.contains(':') && !t.contains('T') && !t.contains('Z')),
        "{ticks:?}"
    );
    assert!(browser.eval("document.querySelectorAll('#chart-throughput rect').length > 0") == true);
    assert_eq!(
        browser.eval("document.getElementById('chart-fencing').open"),
        false
    );
    let values =
        "[...document.querySelectorAll('#chart-slowest text.value')].map(t => parseFloat(t.textContent))";
    let slowest = browser.wait_for(
        &format!("{values}.length >= 5 && {values}[0] >= 0.08 && {values}"),
        "the run's documents among the slowest",
    );
    let slowest: Vec<f64> = slowest
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    // The batch of 60 was claimed together and completed together, some
    // seconds apart: its time is not any document's.
    assert!(slowest.iter().all(|&s| s < 1.0), "no batch's time: {slowest:?}");
    assert!(
        slowest.iter().any(|&s| s != slowest[0]),
        "each document its own time: {slowest:?}"
    );
    browser.screenshot(&screenshots().join("status.png"));

    // Retry the failed PDF: queued, no longer failed.
    browser.eval("document.querySelector('#failures tr[data-key=\"broken.pdf\"] button.retry').click()");
    browser.wait_for(
        "document.querySelector('[data-count=\"queued\"] dd').textContent === '1'",
        "the retried document queued",
    );
    browser.wait_for(
        "document.getElementById('failures-section').hidden",
        "no failure left",
    );
}
