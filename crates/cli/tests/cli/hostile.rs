//! Hostile documents through the real binary (DESIGN §9): each one ends alone,
//! within its limit: indexed when today's parsers take it in their stride, else
//! failed with a reason that names what it hit; the rest of the corpus is
//! indexed; the process never aborts; standard output is one valid JSON
//! document; and the process's own memory stays small, because the parsers run
//! in supervised children.
//!
//! Real hostile files (a deeply nested PDF, a deflate bomb, deep HTML, a tag with
//! 200,000 attributes, a zip bomb, a text bomb, entity bombs, an EPUB pointing out
//! of its archive) are generated here; since the parsers in use now survive some of
//! them, documents that make an armed child overflow its stack, exhaust its
//! memory, spin, abort or print junk (`leasehold::testing::CHILD_FAULT_ENV`)
//! keep every way a child can die covered.

use crate::common;

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::hostile::{bomb_pdf, nested_html, nested_pdf, text_bomb_docx, text_pdf, zip_bomb_docx, zip_of};
use common::{samples, BIN, SAMPLE_PHRASES};
use leasehold::testing::{CHILD_FAULT_ENV, CHILD_FAULT_MARKER};

/// Longest the whole run may take before the test calls it hung.
const WATCHDOG: Duration = Duration::from_secs(300);

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo keeps no pointer.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// An XML part that starts a "billion laughs": each entity is ten of the one before.
fn laughs(root: &str) -> Vec<u8> {
    let mut doctype = String::from(r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol0 "lol">"#);
    for level in 1..10 {
        let refs = format!("&lol{};", level - 1).repeat(10);
        doctype.push_str(&format!(r#"<!ENTITY lol{level} "{refs}">"#));
    }
    format!("{doctype}]>{root}").into_bytes()
}

/// An entity bomb in the main part of each kind of container, and an EPUB whose
/// container points out of its archive.
fn hostile_containers() -> [(&'static str, Vec<u8>); 4] {
    [
        (
            "hostile/laughs.docx",
            zip_of(&[(
                "word/document.xml",
                &laughs("<w:document><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>"),
            )]),
        ),
        (
            "hostile/laughs.odt",
            zip_of(&[
                ("mimetype", b"application/vnd.oasis.opendocument.text"),
                ("content.xml", &laughs("<office:document-content><text:p>&lol9;</text:p></office:document-content>")),
            ]),
        ),
        (
            "hostile/laughs.xlsx",
            zip_of(&[
                ("xl/workbook.xml", b"<workbook/>"),
                ("xl/sharedStrings.xml", &laughs("<sst><si><t>&lol9;</t></si></sst>")),
            ]),
        ),
        (
            "hostile/escape.epub",
            zip_of(&[
                ("mimetype", b"application/epub+zip"),
                (
                    "META-INF/container.xml",
                    br#"<container><rootfiles><rootfile full-path="../../etc/passwd"/></rootfiles></container>"#,
                ),
            ]),
        ),
    ]
}

/// One tag with `count` distinct attributes around the phrase.
fn many_attributes_html(count: usize) -> String {
    let attributes: Vec<String> = (0..count).map(|i| format!("data-a{i}=\"x\"")).collect();
    format!(
        "<html><body><p {}>velvet harbor</p></body></html>",
        attributes.join(" ")
    )
}

/// The samples, plus one file for each way a document has broken a parser;
/// returns how many documents there are besides the samples.
fn hostile_corpus(root: &Path) -> usize {
    for (key, _) in SAMPLE_PHRASES {
        let to = root.join(key);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(samples().join(key), to).unwrap();
    }
    let files: [(&str, Vec<u8>); 7] = [
        // Deep enough to overflow even the child's large extraction stack.
        ("hostile/nested.pdf", nested_pdf(5_000_000)),
        ("hostile/bomb.pdf", bomb_pdf(1024)),
        ("hostile/deep.html", nested_html(200_000).into_bytes()),
        // A minute of html5ever's duplicate-attribute checks before they were bounded.
        (
            "hostile/attributes.html",
            many_attributes_html(200_000).into_bytes(),
        ),
        ("hostile/zip-bomb.docx", zip_bomb_docx(300)),
        ("hostile/text-bomb.docx", text_bomb_docx(24)),
        // A font no parser knows: pdf-extract, the engine before pdf_oxide, printed debug
        // lines about it on stdout in-process, and standard output must stay ours.
        ("hostile/junk-font.pdf", text_pdf("Junkfont", "hello junk")),
    ];
    std::fs::create_dir_all(root.join("hostile")).unwrap();
    let mut documents = 0;
    for (name, bytes) in files.into_iter().chain(hostile_containers()) {
        std::fs::write(root.join(name), bytes).unwrap();
        documents += 1;
    }
    for what in ["overflow", "alloc", "spin", "abort", "print"] {
        let doc = [CHILD_FAULT_MARKER, what.as_bytes()].concat();
        std::fs::write(root.join(format!("hostile/fault-{what}.txt")), doc).unwrap();
        documents += 1;
    }
    mkfifo(&root.join("hostile/pipe"));
    std::os::unix::fs::symlink(root.join("hostile/pipe"), root.join("hostile/link-to-pipe")).unwrap();
    documents
}

/// Run the binary with a watchdog; the output, and how long it took.
fn run_bounded(args: &[&str]) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let child = Command::new(BIN)
        .env(CHILD_FAULT_ENV, "1")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(WATCHDOG);
        // SAFETY: kill(2) with a pid we spawned; harmless if it has exited.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    drop(watchdog);
    (out, started.elapsed())
}

#[test]
fn each_hostile_file_fails_alone_with_its_reason_and_the_rest_is_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus");
    let hostile_documents = hostile_corpus(&corpus);
    if let Some(keep) = std::env::var_os("KEEP_CORPUS") {
        std::process::Command::new("cp")
            .arg("-a")
            .arg(&corpus)
            .arg(keep)
            .status()
            .unwrap();
    }
    let data = dir.path().join("data");
    // --quiet: stderr then carries only what the parent itself reports as an
    // error, so a child's own output leaking there is not hidden among the
    // failure lines (whose reasons may quote sanitised child lines).
    let (out, took) = run_bounded(&[
        "--quiet",
        "--data",
        data.to_str().unwrap(),
        "--workers",
        "2",
        "--extract-memory",
        "512MiB",
        "--extract-timeout",
        "5s",
        "--max-text",
        "4MiB",
        "run",
        corpus.to_str().unwrap(),
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(took < WATCHDOG, "the run hung (killed by the watchdog)");
    assert_eq!(out.status.code(), Some(0), "the process ended badly: {stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    for junk in [
        "panicked",
        "extraction child",
        "junk a parser printed",
        "overflowed",
    ] {
        assert!(
            !stderr.contains(junk),
            "a child's output reached stderr: {stderr}"
        );
    }

    let failures: Vec<(String, String)> = summary["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["key"].as_str().unwrap().to_owned(),
                f["error"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let reason = |key: &str| {
        failures
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| panic!("{key} did not fail: {summary}"))
    };
    // The children that died, each for its own reason, and at once (dead on
    // the first attempt: a crash is the document's fault).
    let overflow = reason("hostile/fault-overflow.txt");
    assert!(
        overflow.contains("extractor crashed: stack overflow"),
        "{overflow}"
    );
    let alloc = reason("hostile/fault-alloc.txt");
    assert!(alloc.contains("memory limit of 512 MiB"), "{alloc}");
    let spin = reason("hostile/fault-spin.txt");
    assert!(spin.contains("exceeded its 5 s deadline"), "{spin}");
    // What would let it through: the limit grows with a document's size.
    assert!(
        spin.contains("for a document of") && spin.contains("allowance per MiB"),
        "{spin}"
    );
    let abort = reason("hostile/fault-abort.txt");
    assert!(
        abort.contains("extractor crashed") && abort.contains("signal 6"),
        "{abort}"
    );
    // Real hostile files the parsers stop themselves.
    let zip = reason("hostile/zip-bomb.docx");
    assert!(zip.contains("inflates past the limit"), "{zip}");
    let text = reason("hostile/text-bomb.docx");
    assert!(text.contains("over the 4194304-byte cap"), "{text}");
    // Entity bombs fail alike in every container, naming the part and the
    // cause; a path out of the archive is refused as that, not looked up.
    for (key, format, part) in [
        ("hostile/laughs.docx", "docx", "word/document.xml"),
        ("hostile/laughs.odt", "odt", "content.xml"),
        ("hostile/laughs.xlsx", "xlsx", "xl/sharedStrings.xml"),
    ] {
        assert_eq!(
            reason(key),
            format!("malformed {format} document: {part} declares entities in its DOCTYPE (refused: entity expansion)")
        );
    }
    assert_eq!(
        reason("hostile/escape.epub"),
        "malformed epub document: META-INF/container.xml names \"../../etc/passwd\", a path outside the archive (refused)"
    );
    // Files once slow, linear now: indexed within the deadline.
    let attributes = failures.iter().find(|(k, _)| k == "hostile/attributes.html");
    assert!(attributes.is_none(), "{attributes:?}");
    // PDFs the parsers may now take in their stride (deep nesting, a deflate
    // bomb): indexed, or failed for a limit, never anything else.
    let mut expected_failures = 10;
    for key in ["hostile/nested.pdf", "hostile/bomb.pdf"] {
        if let Some((_, why)) = failures.iter().find(|(k, _)| k == key) {
            assert!(
                why.contains("exceeded its") || why.contains("extractor crashed"),
                "{why}"
            );
            expected_failures += 1;
        }
    }
    assert_eq!(failures.len(), expected_failures, "{failures:?}");
    assert_eq!(
        summary["dead"], expected_failures,
        "every hostile file failed for good at once: {summary}"
    );
    assert!(
        summary["skipped"].to_string().contains("link-to-pipe"),
        "{summary}"
    );

    // Everything else was indexed: the samples, the deep HTML and the tag with
    // many attributes (linear now), the PDF with a junk font, the document whose
    // child printed junk, and the hostile PDFs that did not fail.
    let total = SAMPLE_PHRASES.len() + hostile_documents;
    assert_eq!(summary["indexed"], total - expected_failures, "{summary}");
    assert!(
        took < Duration::from_secs(120),
        "the hostile corpus took {took:?}"
    );

    // The parsers' memory was the children's; this process stayed small.
    let peak = summary["peak_memory_bytes"].as_u64().unwrap();
    assert!(peak > 0 && peak < 256 << 20, "peak memory {peak} bytes");
}
