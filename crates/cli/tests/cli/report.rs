//! `leasehold report --html FILE` on both engines: a history with
//! completions, failures of two formats, a takeover with a refused write and
//! a lock incident with its recovery becomes one self-contained page whose
//! every chart is present and drawn, which fetches nothing, and in which
//! text from the data is escaped.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{browser, Backend, TestDb, BIN};
use leasehold::store::{Admission, Answer, GatePolicy};
use leasehold::testing::dup;
use leasehold::NewDoc;

const START: i64 = 1_780_000_000_000;
const HOUR: i64 = 3_600_000;
const SECTIONS: [&str; 7] = [
    "throughput",
    "failures-by-reason",
    "failures-by-format",
    "queue-depth",
    "fencing",
    "gate",
    "slowest",
];

/// A day of work, written through the library with the test's clock.
fn a_day_of_work(t: &TestDb) {
    let store = t.handle(10_000);
    t.clock.set(START);
    for key in ["a.txt", "b.pdf", "c.docx", "x<y&z.txt", "e.md"] {
        store.enqueue(&NewDoc::new(key, "v1")).unwrap();
    }
    for hour in 0..5 {
        t.clock.set(START + hour * HOUR);
        let claim = store.claim("w").unwrap().expect("a document to claim");
        t.clock
            .advance(Duration::from_millis(1_500 + 1_000 * hour as u64));
        match claim.key.as_str() {
            "b.pdf" => assert!(store
                .fail(claim, "unsupported document: encrypted", true)
                .unwrap()
                .is_accepted()),
            "c.docx" => assert!(store
                .fail(claim, "extraction exceeded its 60 s deadline", true)
                .unwrap()
                .is_accepted()),
            "e.md" => {
                // A takeover: the first claim's lease runs out.
                t.clock.advance(Duration::from_millis(10_001));
                let taken = store.claim("thief").unwrap().expect("the expired lease");
                assert!(!store
                    .complete(dup(&claim), leasehold::Completion::new("late", "late"))
                    .unwrap()
                    .is_accepted());
                assert!(store
                    .complete(taken, leasehold::Completion::new("r", "s"))
                    .unwrap()
                    .is_accepted());
            }
            _ => assert!(store
                .complete(claim, leasehold::Completion::new("r", "s"))
                .unwrap()
                .is_accepted()),
        }
    }
    let policy = GatePolicy {
        lock_ttl: HOUR,
        probe_ttl: 60_000,
        notify_every: HOUR,
    };
    let gate = store.accounts();
    t.clock.set(START + 6 * HOUR);
    assert_eq!(gate.admit("main", "p1", &policy).unwrap(), Admission::Go);
    let rejected = Answer::Rejected {
        error: "credentials refused (HTTP 401)".into(),
        until: None,
    };
    gate.report("main", None, &rejected, &policy).unwrap();
    t.clock.set(START + 7 * HOUR + 1);
    let Admission::Probe(permit) = gate.admit("main", "p1", &policy).unwrap() else {
        panic!("the probe slot after the lock ran out");
    };
    gate.report("main", Some(&permit), &Answer::Accepted, &policy)
        .unwrap();
}

/// The `<svg>…</svg>` of the section `id`.
fn chart<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!("<section id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no section {id}"));
    let end = start + page[start..].find("</section>").expect("section closed");
    // A section holds its chart in a <details>, closed when it has no data.
    let section = page[start..end]
        .strip_suffix("</details>")
        .unwrap_or(&page[start..end]);
    let svg = section.find("<svg").unwrap_or_else(|| panic!("no chart in {id}"));
    assert!(section.ends_with("</svg>"), "{id}: {section}");
    &section[svg..]
}

/// `leasehold report --html` on `t`'s database: the file and the page.
fn write_report(t: &TestDb) -> (PathBuf, String) {
    let data = t.dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let file = t.dir.path().join("report.html");
    let out = std::process::Command::new(BIN)
        .arg("--data")
        .arg(&data)
        .arg("--db")
        .arg(&t.location)
        .args(["report", "--html"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(&file).unwrap();
    (file, page)
}

fn report_draws_every_chart_and_fetches_nothing(backend: Backend) {
    let t = TestDb::new(backend);
    a_day_of_work(&t);
    let (_, page) = write_report(&t);

    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(page.trim_end().ends_with("</html>"));
    for (open, close) in [
        ("<svg", "</svg>"),
        ("<section", "</section>"),
        ("<text", "</text>"),
    ] {
        assert_eq!(
            page.matches(open).count(),
            page.matches(close).count(),
            "unbalanced {open}"
        );
    }
    for id in SECTIONS {
        let svg = chart(&page, id);
        assert!(!svg.contains("no data"), "{id} is empty: {svg}");
    }
    assert_eq!(chart(&page, "throughput").matches("class=\"bar\"").count(), 24);
    let formats = chart(&page, "failures-by-format");
    assert!(
        formats.contains(">pdf<") && formats.contains(">docx<"),
        "{formats}"
    );
    let reasons = chart(&page, "failures-by-reason");
    assert!(
        reasons.contains(">unsupported<") && reasons.contains(">timeout<"),
        "{reasons}"
    );
    assert!(chart(&page, "queue-depth").contains("<polyline"));
    assert!(chart(&page, "fencing").contains("lease takeovers: 1"));
    assert!(chart(&page, "fencing").contains("refused writes: 1"));
    let gate = chart(&page, "gate");
    assert_eq!(gate.matches("class=\"incident\"").count(), 1, "{gate}");
    assert!(gate.contains(">main<"));
    let slowest = chart(&page, "slowest");
    assert!(slowest.contains("x&lt;y&amp;z.txt"), "{slowest}");
    assert!(!page.contains("x<y&z"), "a key unescaped");
    // Self-contained: nothing to fetch.
    for banned in [
        "http://", "https://", "<script", "<link", "<img", "<iframe", "url(", "@import", "src=",
    ] {
        assert!(!page.contains(banned), "the page holds {banned}");
    }
}

on_both_backends!(report_draws_every_chart_and_fetches_nothing);

/// The page in a real browser (Chromium's headless shell, installed by the
/// test's setup when missing): it parses into every section with its chart,
/// and a screenshot shows the charts drawn in their colours (the bars of the
/// throughput, the red of the refused writes and the incident).
#[test]
fn the_report_renders_in_a_headless_browser() {
    let t = TestDb::new(Backend::Sqlite);
    a_day_of_work(&t);
    let (file, _) = write_report(&t);
    let dom = browser::run(&file, &["--dump-dom"]);
    assert!(dom.status.success(), "{}", String::from_utf8_lossy(&dom.stderr));
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(dom.matches("<svg").count(), SECTIONS.len(), "{dom}");
    for id in SECTIONS {
        assert!(
            dom.contains(&format!("<section id=\"{id}\">")),
            "{id} missing from the DOM"
        );
    }
    let shot = t.dir.path().join("report.png");
    let out = browser::run(
        &file,
        &[
            "--window-size=800,2600",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (width, height, pixels) = browser::decode_png(&std::fs::read(&shot).unwrap());
    assert_eq!((width, height), (800, 2600));
    let count = |rgb: [u8; 3]| pixels.iter().filter(|p| **p == rgb).count();
    let blue = count([0x3a, 0x6e, 0xa5]);
    let red = count([0xc0, 0x50, 0x4d]);
    let ink = pixels.iter().filter(|p| **p != [255, 255, 255]).count();
    assert!(blue > 2_000, "the charts' bars are not drawn: {blue} blue pixels");
    assert!(
        red > 300,
        "refused writes and incidents are not drawn: {red} red pixels"
    );
    assert!(
        ink * 50 > pixels.len(),
        "the page is nearly blank: {ink} of {} pixels",
        pixels.len()
    );
}
