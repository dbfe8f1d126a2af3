//! Summaries that show the store, through the built binary: the store's totals
//! after a rerun, `--fail-on-error`'s rule and list, a raised `--max-input`
//! picking up what failed the old limit, a removed source in `inspect` and
//! `retry`, and the skipped list's count.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common;

use common::leasehold;

use common::output::{json, ok, stderr, stdout};

/// Two small text files and one of 5000 bytes, which dies under the 1000-byte
/// input limit the corpus is first run with.
struct Corpus {
    _dir: tempfile::TempDir,
    source: PathBuf,
    data: PathBuf,
}

impl Corpus {
    fn new() -> Corpus {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("docs");
        std::fs::create_dir(&source).unwrap();
        std::fs::write(source.join("a.txt"), "amber lighthouse").unwrap();
        std::fs::write(source.join("b.txt"), "copper kettle").unwrap();
        std::fs::write(source.join("big.txt"), "x".repeat(5000)).unwrap();
        let data = dir.path().join("data");
        Corpus {
            _dir: dir,
            source,
            data,
        }
    }

    fn src(&self) -> &str {
        self.source.to_str().unwrap()
    }

    /// `leasehold run SOURCE --max-input LIMIT` plus `extra`.
    fn run(&self, limit: &str, extra: &[&str]) -> Output {
        let mut args = vec!["run", self.src(), "--max-input", limit];
        args.extend_from_slice(extra);
        leasehold(&self.data, &args)
    }

    /// The first run: a.txt and b.txt indexed, big.txt dead.
    fn first_run(&self) {
        let s = json(self.run("1000", &["--json"]));
        assert_eq!(
            (s["indexed"].as_u64(), s["dead"].as_u64()),
            (Some(2), Some(1)),
            "{s}"
        );
    }
}

/// More failures than the summary lists: where the rest are is said once,
/// not again on the store's line; a removed source is counted in the first
/// line as removed, not failed.
#[test]
fn the_failed_hint_is_said_once_and_removed_sources_in_the_first_line() {
    let c = Corpus::new();
    for i in 0..21 {
        std::fs::write(c.source.join(format!("big{i}.txt")), "x".repeat(5000)).unwrap();
    }
    let text = stdout(&c.run("1000", &["-q"]));
    assert!(
        text.contains("... 2 more failures; `leasehold list --failed`"),
        "{text}"
    );
    assert_eq!(text.matches("leasehold list --failed").count(), 1, "{text}");
    std::fs::remove_file(c.source.join("a.txt")).unwrap();
    let text = stdout(&c.run("1000", &[]));
    let first = text.lines().next().unwrap();
    assert!(
        first.contains(", removed 1, ") && first.contains("failed 0 "),
        "{first}"
    );
    assert_eq!(
        text.matches("leasehold list --failed").count(),
        1,
        "the store line says it: {text}"
    );
}

#[test]
fn a_rerun_that_fails_nothing_still_reports_the_dead_in_the_store() {
    let c = Corpus::new();
    c.first_run();
    let rerun = json(c.run("1000", &["--json"]));
    assert_eq!(rerun["failed"], 0, "{rerun}");
    assert_eq!(rerun["unchanged"], 3, "{rerun}");
    let store = &rerun["store"];
    assert_eq!(store["indexed"], 2, "{rerun}");
    assert_eq!(store["dead"], 1, "{rerun}");
    assert_eq!(store["retrying"], 0, "{rerun}");
    assert_eq!(store["removed"], 0, "{rerun}");

    let text = stdout(&ok(c.run("1000", &[])));
    assert!(text.contains("failed 0"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("store: "))
        .unwrap_or_else(|| panic!("no store line in:\n{text}"));
    assert!(line.contains("2 indexed, 1 dead, 0 retrying"), "{line}");
    assert!(line.contains("leasehold list --failed"), "{line}");
}

#[test]
fn fail_on_error_fails_on_dead_documents_in_the_store_and_lists_them() {
    let c = Corpus::new();
    // A fresh failure: exit 1 and its name on stderr.
    let first = c.run("1000", &["--fail-on-error", "--quiet"]);
    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    assert!(
        stderr(&first).contains("--fail-on-error: 1 failed in this run"),
        "{}",
        stderr(&first)
    );
    assert!(stderr(&first).contains("\"big.txt\""), "{}", stderr(&first));
    // Nothing failed in this run, but big.txt is still dead: exit 1, named.
    let rerun = c.run("1000", &["--fail-on-error"]);
    assert_eq!(rerun.status.code(), Some(1), "{}", stdout(&rerun));
    let err = stderr(&rerun);
    assert!(err.contains("0 failed in this run; 1 dead in the store"), "{err}");
    assert!(err.contains("failed \"big.txt\": 5000 bytes is over"), "{err}");
    // Once it is gone (not a failure) the store is clean: exit 0.
    std::fs::remove_file(c.source.join("big.txt")).unwrap();
    let clean = c.run("1000", &["--fail-on-error"]);
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&clean),
        stderr(&clean)
    );
}

#[test]
fn raising_max_input_picks_up_what_failed_the_old_limit() {
    let c = Corpus::new();
    c.first_run();
    let raised = json(c.run("10000", &["--json"]));
    assert_eq!(raised["indexed"], 1, "{raised}");
    assert_eq!(raised["changed"], 1, "{raised}");
    assert_eq!(raised["store"]["dead"], 0, "{raised}");
    assert_eq!(raised["store"]["indexed"], 3, "{raised}");
    // Lowering it again does not take back what was indexed.
    let lowered = json(c.run("1000", &["--json"]));
    assert_eq!(lowered["unchanged"], 3, "{lowered}");
    assert_eq!(lowered["store"]["indexed"], 3, "{lowered}");
}

#[test]
fn retry_requeues_a_document_that_failed_a_limit() {
    for how in [&["retry", "big.txt"][..], &["retry", "--dead"][..]] {
        let c = Corpus::new();
        c.first_run();
        let out = stdout(&ok(leasehold(&c.data, how)));
        assert!(out.starts_with("requeued"), "{how:?}: {out}");
        let work = json(leasehold(
            &c.data,
            &["work", "--until-empty", "--max-input", "10000", "--json"],
        ));
        assert_eq!(work["indexed"], 1, "{how:?}: {work}");
        assert_eq!(work["store"]["dead"], 0, "{how:?}: {work}");
    }
}

#[test]
fn a_removed_source_says_so_in_inspect_and_retry() {
    let c = Corpus::new();
    c.first_run();
    let dead_before = json(c.run("1000", &["--json"]))["store"]["dead"].clone();
    std::fs::remove_file(c.source.join("a.txt")).unwrap();
    let s = json(c.run("1000", &["--json"]));
    assert_eq!(s["gone"], 1, "{s}");
    // Removed is its own count, never dead or failed.
    assert_eq!(s["store"]["removed"], 1, "{s}");
    assert_eq!(s["store"]["dead"], dead_before, "{s}");
    let text = stdout(&ok(c.run("1000", &[])));
    let line = text.lines().find(|l| l.starts_with("store: ")).unwrap();
    assert!(
        line.contains(&format!(" {dead_before} dead, 1 removed, ")),
        "{line}"
    );
    let status = json(leasehold(&c.data, &["status", "--json"]));
    assert_eq!(status["counts"]["removed"], 1, "{status}");
    assert_eq!(status["counts"]["dead"], dead_before, "{status}");
    let status = stdout(&ok(leasehold(&c.data, &["status"])));
    assert!(status.contains("    removed 1\n"), "{status}");
    let keys = |args: &[&str]| -> Vec<String> {
        let v = json(leasehold(&c.data, args));
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| format!("{} {}", r["key"].as_str().unwrap(), r["status"].as_str().unwrap()))
            .collect()
    };
    assert_eq!(keys(&["list", "--removed", "--json"]), ["a.txt removed"]);
    assert_eq!(
        keys(&["list", "--status", "removed", "--json"]),
        ["a.txt removed"]
    );
    assert!(!keys(&["list", "--failed", "--json"])
        .iter()
        .any(|k| k.starts_with("a.txt")));
    assert!(!keys(&["list", "--status", "dead", "--json"])
        .iter()
        .any(|k| k.starts_with("a.txt")));
    assert!(keys(&["list", "--json"]).contains(&"a.txt removed".to_string()));
    let metrics = stdout(&ok(leasehold(&c.data, &["metrics"])));
    assert!(
        metrics.contains("leasehold_documents{status=\"removed\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("leasehold_documents{{status=\"dead\"}} {dead_before}\n")),
        "{metrics}"
    );

    let shown = stdout(&ok(leasehold(&c.data, &["inspect", "a.txt"])));
    assert!(
        shown.contains("\n  source gone: it was removed from the source"),
        "{shown}"
    );

    let one = leasehold(&c.data, &["retry", "a.txt"]);
    assert_eq!(one.status.code(), Some(1));
    let err = stderr(&one);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("\"a.txt\": not requeued: its source is gone"),
        "{err}"
    );

    let all = stdout(&ok(leasehold(&c.data, &["retry", "--dead"])));
    assert!(all.contains("requeued 1 dead document(s)"), "{all}");
    assert!(
        all.contains("not requeued: 1 document(s) whose source was removed"),
        "{all}"
    );
}

/// `n` named pipes in `dir`: entries discovery skips (not regular files).
fn fifos(dir: &Path, n: usize) {
    for i in 0..n {
        let path = std::ffi::CString::new(format!("{}/pipe{i:02}", dir.display())).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo keeps no pointer.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    }
}

#[test]
fn the_skipped_list_says_how_many_more_it_left_out() {
    let c = Corpus::new();
    fifos(&c.source, 25);
    let text = stdout(&ok(c.run("1000", &[])));
    let listed = text.lines().filter(|l| l.starts_with("  skipped ")).count();
    assert_eq!(listed, 20, "{text}");
    assert!(text.contains("  ... and 5 more skipped"), "{text}");
    let s = json(c.run("1000", &["--json"]));
    assert_eq!(s["skipped"].as_array().map(Vec::len), Some(25), "{s}");
}

/// A PDF of one page with no text on it, as a scanner's image-only page
/// is to a text extractor.
fn pdf_without_text() -> Vec<u8> {
    let objects: [&[u8]; 4] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << >> >>",
        b"<< /Length 0 >>\nstream\n\nendstream",
    ];
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        pdf.extend_from_slice(o);
        pdf.extend_from_slice(b"\nendobj\n");
    }
    let xref = pdf.len();
    pdf.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for o in offsets {
        pdf.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    let trailer = format!(
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        objects.len() + 1
    );
    pdf.extend_from_slice(trailer.as_bytes());
    pdf
}

/// Documents that yield no word are indexed, but said apart with why: the
/// store's line, `status` (and its JSON), `list --no-text`, `inspect` and
/// the metrics; one that later yields words is no longer among them. On
/// both engines (`db`: a PostgreSQL URL).
fn documents_without_text_are_counted_listed_and_explained(db: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let (source, data) = (dir.path().join("docs"), dir.path().join("data"));
    std::fs::create_dir(&source).unwrap();
    std::fs::write(source.join("words.txt"), "amber lighthouse").unwrap();
    std::fs::write(source.join("empty.txt"), "").unwrap();
    std::fs::write(source.join("blank.txt"), " \n\t\u{c} ").unwrap();
    std::fs::write(source.join("scan.pdf"), pdf_without_text()).unwrap();
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(common::BIN);
        cmd.arg("--data").arg(&data).env_remove("LEASEHOLD_DB");
        if let Some(db) = db {
            cmd.env("LEASEHOLD_DB", db);
        }
        cmd.args(args).output().unwrap()
    };
    let first = run(&["run", source.to_str().unwrap()]);
    let said = stdout(&ok(first));
    assert!(said.contains("indexed 4,"), "{said}");
    assert!(
        said.contains("store: 4 indexed (3 without text: `leasehold list --no-text`)"),
        "{said}"
    );
    let status = json(run(&["status", "--json"]));
    assert_eq!(status["counts"]["indexed"], 4, "{status}");
    assert_eq!(status["counts"]["no_text"], 3, "{status}");
    assert!(stdout(&ok(run(&["status"]))).contains("no text 3 of the indexed"));

    let listed = stdout(&ok(run(&["list", "--no-text"])));
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(
        lines[0].starts_with("blank.txt") && lines[0].ends_with("no text: its text holds no letter or digit")
    );
    assert!(lines[1].starts_with("empty.txt") && lines[1].ends_with("no text: the file is empty"));
    assert!(lines[2].starts_with("scan.pdf") && lines[2].contains("no text: a PDF without a text layer"));
    let listed = json(run(&["list", "--no-text", "--json"]));
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    assert_eq!(listed[1]["no_text"], "the file is empty");
    assert!(stdout(&ok(run(&["inspect", "scan.pdf"]))).contains("no text: a PDF without a text layer"));
    let all = json(run(&["list", "--json"]));
    let words = all
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["key"] == "words.txt")
        .unwrap();
    assert!(words["no_text"].is_null(), "{words}");
    assert!(stdout(&ok(run(&["metrics"]))).contains("leasehold_documents_no_text 3"));
    let page = dir.path().join("report.html");
    ok(run(&["report", "--html", page.to_str().unwrap()]));
    let page = std::fs::read_to_string(&page).unwrap();
    assert!(page.contains("4 indexed, of which 3 without text"), "{page}");

    // A file that now has words leaves the list; the summary stops saying so
    // when none is left.
    std::fs::write(source.join("empty.txt"), "copper kettle").unwrap();
    ok(run(&["run", source.to_str().unwrap()]));
    assert_eq!(json(run(&["status", "--json"]))["counts"]["no_text"], 2);
    let listed = stdout(&ok(run(&["list", "--no-text"])));
    assert!(!listed.contains("empty.txt"), "{listed}");
    std::fs::remove_file(source.join("blank.txt")).unwrap();
    std::fs::remove_file(source.join("scan.pdf")).unwrap();
    let said = stdout(&ok(run(&["run", source.to_str().unwrap()])));
    assert!(!said.contains("without text"), "{said}");
    assert_eq!(json(run(&["status", "--json"]))["counts"]["no_text"], 0);
}

#[test]
fn documents_without_text_on_sqlite() {
    documents_without_text_are_counted_listed_and_explained(None);
}

#[test]
fn documents_without_text_on_postgres() {
    let url = common::pg::server().fresh_database();
    documents_without_text_are_counted_listed_and_explained(Some(&url));
}
