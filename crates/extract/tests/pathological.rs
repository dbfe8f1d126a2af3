//! Hostile nesting in HTML and Markdown: extraction finishes on an ordinary thread (no deep
//! recursion), and a stop raised while it runs ends it with `Stopped`. No wall-clock
//! assertions: the timings that show the work is linear are in the docs of `html.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use leasehold_extract::{ExtractError, Extractor, ExtractorRegistry};

/// Runs an extraction on a freshly spawned thread, whose stack is the default 2 MiB: a
/// parser that recursed once per nesting level would overflow it long before 200k levels.
fn extract_on_thread(
    name: &'static str,
    doc: String,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<Result<String, ExtractError>> {
    thread::spawn(move || ExtractorRegistry::default().extract(name, doc.as_bytes(), &stop))
}

fn nested(open: &str, close: &str, depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", open.repeat(depth), close.repeat(depth))
}

#[test]
fn html_200k_nested_divs_complete() {
    let doc = nested("<div>", "</div>", 200_000, "velvet harbor");
    let text = extract_on_thread("deep.html", doc, Arc::default())
        .join()
        .expect("no stack overflow")
        .unwrap();
    assert_eq!(text, "velvet harbor");
}

#[test]
fn html_200k_nested_mixed_and_hidden_elements_complete() {
    let doc = format!(
        "{}<p>velvet harbor</p>{}",
        "<div><span><table><tr><td><template>".repeat(40_000),
        "</template></td></tr></table></span></div>".repeat(40_000)
    );
    let text = extract_on_thread("deep.html", doc, Arc::default())
        .join()
        .expect("no stack overflow")
        .unwrap();
    assert!(!text.contains("velvet harbor"), "template content is never shown");
}

/// Raises `stop` 20 ms into the extraction of `make(1)` and expects `Stopped`. How far
/// 20 ms gets depends on the build and the machine: a document finished before the stop
/// proves nothing, so `make(2)`, `make(4)`, ... (the document twice as long) is tried
/// until one is stopped; a stop that is never obeyed fails at the largest.
fn assert_stops_midway(name: &'static str, make: impl Fn(usize) -> String) {
    for scale in [1, 2, 4] {
        let stop = Arc::new(AtomicBool::new(false));
        let worker = extract_on_thread(name, make(scale), Arc::clone(&stop));
        thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
        match worker.join().expect("no panic") {
            Err(ExtractError::Stopped) => return,
            Ok(_) => continue,
            other => panic!("{name}: {other:?}"),
        }
    }
    panic!("{name}: finished every time, never stopped");
}

#[test]
fn html_stops_midway() {
    // 1.5 million levels, over 30 MB, at the smallest scale.
    assert_stops_midway("deep.html", |scale| {
        nested("<div><p>velvet harbor ", "</p></div>", 1_500_000 * scale, "x")
    });
}

#[test]
fn markdown_50k_nested_quotes_and_lists_complete() {
    for (open, name) in [
        (">", "quotes"),
        ("> ", "spaced quotes"),
        ("* ", "lists"),
        ("- ", "dashes"),
    ] {
        let doc = format!("{} copper kettle\n\nafter\n", open.repeat(50_000));
        let text = extract_on_thread("deep.md", doc, Arc::default())
            .join()
            .expect("no stack overflow")
            .unwrap();
        assert!(
            text.contains("copper kettle") && text.contains("after"),
            "{name}: {text:?}"
        );
    }
}

#[test]
fn markdown_deep_html_blocks_complete() {
    let doc = format!(
        "intro\n\n{}\n\nafter\n",
        nested("<div>", "</div>", 200_000, "copper kettle")
    );
    let text = extract_on_thread("deep.md", doc, Arc::default())
        .join()
        .expect("no stack overflow")
        .unwrap();
    assert!(
        text.contains("copper kettle") && text.contains("after"),
        "{text:?}"
    );
}

#[test]
fn markdown_stops_midway() {
    let line = "> * copper **kettle** [link](x) `code`\n";
    // A million lines, over 30 MB, at the smallest scale.
    assert!(line.len() * 1_000_000 > 30 << 20);
    assert_stops_midway("big.md", |scale| line.repeat(1_000_000 * scale));
}
