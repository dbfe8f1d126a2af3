//! `leasehold search`, `reindex` and doctor's index check, as real processes
//! on a real data directory.

use crate::common;

use std::path::Path;

use common::{leasehold, pg, samples, BIN};

/// The binary on `data` with `LEASEHOLD_DB` set to `db` (or unset).
fn leasehold_on(db: Option<&str>, data: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("--data").arg(data).env_remove("LEASEHOLD_DB");
    if let Some(db) = db {
        cmd.env("LEASEHOLD_DB", db);
    }
    cmd.args(args).output().expect("run leasehold")
}

/// A source directory with English, Korean and Japanese text, run into `data`.
fn indexed_data_dir(extra: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    indexed_on(None, extra)
}

/// [`indexed_data_dir`] with the database `db` (a `postgres://` URL) if given.
fn indexed_on(db: Option<&str>, extra: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let files = [
        (
            "fox.txt",
            "The quick brown fox jumps over the lazy dog.\nFoxes are quick.",
        ),
        ("ko.txt", "계정이 잠겼습니다. 비밀번호를 확인하세요."),
        ("ja.txt", "東京都に住んでいます"),
        ("cards.md", "# Cards\n\nA cardinal, a cart and a carton of cards."),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let data = dir.path().join("data");
    let mut args = vec!["run", src.to_str().unwrap(), "-q"];
    args.extend_from_slice(extra);
    let out = leasehold_on(db, &data, &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (dir, data)
}

fn search_json(data: &Path, query: &str) -> serde_json::Value {
    search_json_on(None, data, query)
}

/// `search QUERY --json`: exit 0 with matches, 1 without (as grep), and
/// the page as JSON either way.
fn search_json_on(db: Option<&str>, data: &Path, query: &str) -> serde_json::Value {
    let out = leasehold_on(db, data, &["search", query, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let want = if v["total"] == 0 { 1 } else { 0 };
    assert_eq!(
        out.status.code(),
        Some(want),
        "{query}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    v
}

fn hits(v: &serde_json::Value) -> &Vec<serde_json::Value> {
    v["hits"].as_array().expect("a page has its hits")
}

fn hit_keys(v: &serde_json::Value) -> Vec<String> {
    hits(v)
        .iter()
        .map(|h| h["key"].as_str().unwrap().to_owned())
        .collect()
}

/// A JSON hit's snippet with its highlights in brackets.
fn marked(hit: &serde_json::Value) -> String {
    let text = hit["snippet"].as_str().unwrap();
    let mut out = String::new();
    let mut at = 0;
    for h in hit["highlights"].as_array().unwrap() {
        let (start, end) = (h[0].as_u64().unwrap() as usize, h[1].as_u64().unwrap() as usize);
        out.push_str(&format!("{}[{}]", &text[at..start], &text[start..end]));
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

const QUERIES: [&str; 8] = [
    "quick",
    "\"brown fox\"",
    "car*",
    "계정",
    "東京",
    "fox OR cards",
    "quick NOT lazy",
    "nothing",
];

#[test]
fn search_prints_the_original_its_facts_score_and_snippet_then_the_total() {
    let (dir, data) = indexed_data_dir(&[]);
    let src = dir.path().join("src");
    let out = leasehold(&data, &["search", "계정"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], src.join("ko.txt").display().to_string(), "{text}");
    let size = std::fs::metadata(src.join("ko.txt")).unwrap().len();
    assert!(
        lines[1].starts_with(&format!("    txt · {size} B · 20")),
        "{text}"
    );
    assert!(lines[1].contains(" · score "), "{text}");
    assert!(lines[2].contains("[계정이] 잠겼습니다"), "{text}");
    assert_eq!(lines[3], "1 document matches; showing 1–1", "{text}");
    assert!(!text.contains('\u{1b}'), "no colour when not a terminal");

    let v = search_json(&data, "\"brown fox\"");
    assert_eq!(hit_keys(&v), ["fox.txt"]);
    assert_eq!(v["total"], 1);
    let hit = &hits(&v)[0];
    assert!(hit["score"].as_f64().unwrap() > 0.0);
    assert!(marked(hit).contains("[brown fox]"), "{hit}");
    assert_eq!(hit["location"], src.join("fox.txt").display().to_string());
    let size = std::fs::metadata(src.join("fox.txt")).unwrap().len();
    assert_eq!(hit["size"], size);
    assert_eq!(hit["type"], "txt");
    assert!(hit["modified"].as_str().unwrap().ends_with('Z'), "{hit}");
    let stored = std::fs::read_to_string(hit["text_path"].as_str().unwrap()).expect("the accepted text");
    assert!(stored.contains("brown fox"));
    assert_eq!(hit_keys(&search_json(&data, "car*")), ["cards.md"]);

    // No match: exit 1 as grep, a line on stderr, an empty page in JSON.
    let none = leasehold(&data, &["search", "nothing"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(none.stdout.is_empty());
    assert!(String::from_utf8_lossy(&none.stderr).contains("no document matches"));
    assert_eq!(
        search_json(&data, "nothing"),
        serde_json::json!({"query": "nothing", "total": 0, "offset": 0, "hits": []})
    );

    // Pages: --limit, --offset, the total and the hint for more.
    let limited = leasehold(
        &data,
        &["search", "quick OR 계정 OR cards", "--limit", "2", "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&limited.stdout).unwrap();
    assert_eq!((hits(&v).len(), v["total"].as_u64()), (2, Some(3)));
    let all = leasehold(
        &data,
        &["search", "quick", "OR", "계정", "OR", "cards", "--limit", "0"],
    );
    let text = String::from_utf8(all.stdout).unwrap();
    assert!(text.ends_with("3 documents match; showing 1–3\n"), "{text}");
    let page = leasehold(
        &data,
        &[
            "search",
            "quick OR 계정 OR cards",
            "--limit",
            "1",
            "--offset",
            "1",
        ],
    );
    let text = String::from_utf8(page.stdout).unwrap();
    assert!(
        text.ends_with("3 documents match; showing 2–2 (--offset 2 for more)\n"),
        "{text}"
    );
}

/// The search corpus (`tests/search/corpus`, with the repository's samples
/// under `samples/`: real files in every format, English and Korean, UTF-8
/// and CP949) answers every query of `tests/search/queries.tsv` with exactly
/// the documents the table names.
#[test]
fn the_search_corpus_answers_its_table_of_queries() {
    let here = common::workspace().join("tests/search");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    common::copy_tree(&here.join("corpus"), &src);
    common::copy_tree(&samples(), &src.join("samples"));
    // 2020-06-15T12:00:00Z, for the table's dates.
    let june = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_592_222_400);
    let file = std::fs::File::options()
        .write(true)
        .open(src.join("notes/installs.txt"))
        .unwrap();
    file.set_modified(june).unwrap();
    drop(file);
    let data = dir.path().join("data");
    let out = leasehold(&data, &["run", src.to_str().unwrap(), "-q"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = std::fs::read_to_string(here.join("queries.tsv")).unwrap();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for line in table.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (query, want) = line.split_once('\t').expect("query TAB keys");
        let mut want: Vec<&str> = want.split(' ').filter(|k| *k != "-").collect();
        want.sort_unstable();
        let v = search_json(&data, query);
        let mut got = hit_keys(&v);
        got.sort();
        if got != want {
            wrong.push(format!("{query:?}: found {got:?}, the table says {want:?}"));
        }
        assert_eq!(v["total"].as_u64(), Some(got.len() as u64), "{query:?}: {v}");
        checked += 1;
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked >= 40, "the table was read: {checked} queries");
    titles_are_shown(&data);
}

/// A match in a title ranks first; the title the document gives itself is
/// in `--json` (null without one), on the facts line, and in `inspect`.
fn titles_are_shown(data: &Path) {
    let v = search_json(data, "quarterly");
    let shown: Vec<(&str, &serde_json::Value)> = hits(&v)
        .iter()
        .map(|h| (h["key"].as_str().unwrap(), &h["title"]))
        .collect();
    assert_eq!(
        shown,
        [
            ("samples/report.pdf", &serde_json::json!("Quarterly Report")),
            (
                "samples/formats/deck.pptx",
                &serde_json::json!("Quarterly review deck")
            ),
        ]
    );
    let v = search_json(data, "lighthouse");
    assert_eq!(hits(&v)[0]["title"], serde_json::Value::Null, "{v}");
    let text = leasehold(data, &["search", "quarterly", "--color", "never"]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("\n    Quarterly Report · pdf · "), "{text}");
    let inspect = leasehold(data, &["inspect", "samples/report.pdf"]);
    let inspect = String::from_utf8(inspect.stdout).unwrap();
    assert!(inspect.contains("\n  title Quarterly Report\n"), "{inspect}");
    let v = search_json(data, "author:openpyxl");
    let hit = &hits(&v)[0];
    assert_eq!(
        (&hit["author"], &hit["date"]),
        (&serde_json::json!("openpyxl"), &serde_json::json!("2026-12-03")),
        "{v}"
    );
    let text = leasehold(data, &["search", "author:openpyxl", "--color", "never"]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains(" · by openpyxl · dated 2026-12-03 · xlsx · "),
        "{text}"
    );
    let inspect = leasehold(data, &["inspect", "samples/formats/ledger.xlsx"]);
    let inspect = String::from_utf8(inspect.stdout).unwrap();
    assert!(
        inspect.contains("\n  author openpyxl\n  dated 2026-12-03\n"),
        "{inspect}"
    );
}

/// Stemming: a word finds its other forms, the documents holding it as
/// written come first (however often the others use its forms), quotes and
/// `--exact` keep it as written, and the data directory records the
/// setting, which a later run changes without re-indexing.
fn a_word_finds_its_forms_written_first_and_the_setting_is_recorded(db: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let (src, data) = (dir.path().join("src"), dir.path().join("data"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("forms.txt"), "Installation: the installer installed it.").unwrap();
    let filler = "pebble ".repeat(300);
    std::fs::write(src.join("word.txt"), format!("{filler} install {filler}")).unwrap();
    std::fs::write(src.join("other.txt"), "An instance of nothing").unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", src.to_str().unwrap(), "-q"];
        args.extend_from_slice(extra);
        let out = leasehold_on(db, &data, &args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[]);
    let v = search_json_on(db, &data, "install");
    assert_eq!(hit_keys(&v), ["word.txt", "forms.txt"], "{v}");
    let scores: Vec<f64> = hits(&v).iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(
        scores[1] > scores[0],
        "ranked first for the word as written, not by score: {v}"
    );
    // (PostgreSQL's headline leaves the full stop out.)
    let snippet = marked(&hits(&v)[1]);
    assert!(
        snippet.starts_with("[Installation]: the [installer] [installed] it"),
        "{snippet}"
    );
    assert_eq!(hit_keys(&search_json_on(db, &data, "\"install\"")), ["word.txt"]);
    assert_eq!(
        hit_keys(&search_json_on(db, &data, "installing")),
        ["forms.txt", "word.txt"]
    );
    let exact = leasehold_on(db, &data, &["search", "--exact", "-l", "install"]);
    assert_eq!(String::from_utf8_lossy(&exact.stdout).lines().count(), 1);
    assert!(String::from_utf8_lossy(&exact.stdout).ends_with("word.txt\n"));

    // Recorded: a run asked for none keeps words as written from then on...
    run(&["--stemming", "none"]);
    assert_eq!(hit_keys(&search_json_on(db, &data, "install")), ["word.txt"]);
    run(&[]);
    assert_eq!(hit_keys(&search_json_on(db, &data, "install")), ["word.txt"]);
    // ...until one asks for English again, with no re-indexing.
    run(&["--stemming", "english"]);
    assert_eq!(
        hit_keys(&search_json_on(db, &data, "install")),
        ["word.txt", "forms.txt"]
    );
    // The configuration file says the same.
    std::fs::write(data.join("leasehold.toml"), "[search]\nstemming = \"none\"\n").unwrap();
    run(&[]);
    assert_eq!(hit_keys(&search_json_on(db, &data, "install")), ["word.txt"]);
    std::fs::write(data.join("leasehold.toml"), "[search]\nstemming = \"porter\"\n").unwrap();
    let out = leasehold_on(db, &data, &["run", src.to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[search] stemming"));
}

#[test]
fn a_word_finds_its_forms_written_first_on_sqlite() {
    a_word_finds_its_forms_written_first_and_the_setting_is_recorded(None);
}

#[test]
fn a_word_finds_its_forms_written_first_on_postgres() {
    let url = pg::server().fresh_database();
    a_word_finds_its_forms_written_first_and_the_setting_is_recorded(Some(&url));
}

/// A file dated before 1970 (archives carry any date) is found and shown
/// with no time, not a crash.
#[test]
fn a_file_from_before_1970_is_shown_without_a_time() {
    let (dir, data) = indexed_data_dir(&[]);
    let old = std::time::UNIX_EPOCH - std::time::Duration::from_secs(86_400);
    let file = std::fs::File::options()
        .write(true)
        .open(dir.path().join("src/fox.txt"))
        .unwrap();
    file.set_modified(old).unwrap();
    let v = search_json(&data, "fox");
    assert_eq!(hit_keys(&v), ["fox.txt"]);
    assert!(hits(&v)[0]["modified"].is_null(), "{v}");
    let out = leasehold(&data, &["search", "fox"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn files_lists_only_the_originals_for_other_tools() {
    let (dir, data) = indexed_data_dir(&[]);
    let src = dir.path().join("src");
    let out = leasehold(&data, &["search", "-l", "quick OR 계정"]);
    assert_eq!(out.status.code(), Some(0));
    let mut listed: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    listed.sort();
    let want = [src.join("fox.txt"), src.join("ko.txt")].map(|p| p.display().to_string());
    assert_eq!(listed, want);
    let out = leasehold(&data, &["search", "--files", "-0", "계정"]);
    assert_eq!(out.stdout, format!("{}\0", want[1]).into_bytes());
    let none = leasehold(&data, &["search", "-l", "nothing"]);
    assert_eq!((none.status.code(), none.stdout.len()), (Some(1), 0));
}

#[test]
fn color_marks_matches_on_request_and_never_forges_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(
        src.join("esc.txt"),
        "bell \u{7} escape \u{1b}[2J amber \u{202e}rtl",
    )
    .unwrap();
    let data = dir.path().join("data");
    assert!(leasehold(&data, &["run", src.to_str().unwrap(), "-q"])
        .status
        .success());
    let out = leasehold(&data, &["search", "--color", "always", "amber"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("\u{1b}[1;31mamber\u{1b}[0m"), "{text:?}");
    assert!(
        !text.contains("\u{1b}[2J") && !text.contains('\u{7}') && !text.contains('\u{202e}'),
        "{text:?}"
    );
    let plain = leasehold(&data, &["search", "--color", "never", "amber"]);
    let text = String::from_utf8(plain.stdout).unwrap();
    assert!(text.contains("[amber]") && !text.contains('\u{1b}'), "{text:?}");
}

/// Terms people type, which FTS5's own syntax refuses or misreads, found as
/// written; `--fts` still takes FTS5's syntax.
#[test]
fn ordinary_terms_just_work_and_fts_syntax_stays_behind_a_flag() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let files = [
        ("qemu.txt", "Resize a disk with qemu-img resize."),
        ("mail.txt", "Send an e-mail; don't wait."),
        ("cpp.txt", "C++ code links libffi.so from release 2.0"),
        ("url.txt", "See https://example.org/docs?page=2 for more"),
        ("apart.txt", "img then qemu, mail e, so libffi, org example"),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let data = dir.path().join("data");
    assert!(leasehold(&data, &["run", src.to_str().unwrap(), "-q"])
        .status
        .success());
    for (query, key) in [
        ("qemu-img", "qemu.txt"),
        ("e-mail", "mail.txt"),
        ("don't", "mail.txt"),
        ("C++ libffi.so", "cpp.txt"),
        ("2.0", "cpp.txt"),
        ("https://example.org/docs?page=2", "url.txt"),
    ] {
        assert_eq!(hit_keys(&search_json(&data, query)), [key], "{query}");
    }
    let out = leasehold(&data, &["search", "--", "qemu", "-img"]);
    assert_eq!(out.status.code(), Some(1), "qemu without img: none");
    let out = leasehold(&data, &["search", "--fts", "qemu NOT resize", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hit_keys(&v), ["apart.txt"]);
    let out = leasehold(&data, &["search", "--fts", "qemu-img"]);
    assert_eq!(out.status.code(), Some(2), "FTS5's syntax reads - as an operator");
}

#[test]
fn reindex_rebuilds_the_same_results_and_changes_the_tokenizer() {
    let (_dir, data) = indexed_data_dir(&[]);
    let before: Vec<serde_json::Value> = QUERIES.iter().map(|q| search_json(&data, q)).collect();
    let out = leasehold(&data, &["reindex", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["indexed"], 4);
    assert_eq!(report["tokenizer"], "unicode61");
    let after: Vec<serde_json::Value> = QUERIES.iter().map(|q| search_json(&data, q)).collect();
    assert_eq!(before, after);

    let out = leasehold(&data, &["reindex", "--tokenizer", "trigram"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(hit_keys(&search_json(&data, "ick bro")), ["fox.txt"]);
    assert_eq!(hit_keys(&search_json(&data, "住ん")), ["ja.txt"]);
    // The data directory keeps its choice: a run asking for another is refused.
    let src = data.parent().unwrap().join("src");
    let out = leasehold(&data, &["run", src.to_str().unwrap(), "--tokenizer", "unicode61"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("reindex --tokenizer unicode61"));

    let out = leasehold(&data, &["reindex", "--tokenizer", "unicode61"]);
    assert!(out.status.success());
    let back: Vec<serde_json::Value> = QUERIES.iter().map(|q| search_json(&data, q)).collect();
    assert_eq!(before, back);
}

#[test]
fn a_data_directory_made_with_trigram_keeps_it() {
    let (_dir, data) = indexed_data_dir(&["--tokenizer", "trigram"]);
    assert_eq!(hit_keys(&search_json(&data, "정이")), ["ko.txt"]);
    assert_eq!(hit_keys(&search_json(&data, "uick")), ["fox.txt"]);
    let src = data.parent().unwrap().join("src");
    let out = leasehold(&data, &["run", src.to_str().unwrap(), "-q"]);
    assert!(
        out.status.success(),
        "a run without --tokenizer keeps the recorded one"
    );
    assert_eq!(hit_keys(&search_json(&data, "uick")), ["fox.txt"]);
}

#[test]
fn doctor_finds_a_missing_and_an_extra_index_row_and_reindex_mends_them() {
    let (_dir, data) = indexed_data_dir(&[]);
    let healthy = leasehold(&data, &["doctor"]);
    assert!(
        healthy.status.success(),
        "{}",
        String::from_utf8_lossy(&healthy.stdout)
    );
    let db = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    let fox: i64 = db
        .query_row("SELECT id FROM jobs WHERE doc_key = 'fox.txt'", [], |r| r.get(0))
        .unwrap();
    db.execute("DELETE FROM search_text WHERE rowid = ?1", [fox])
        .unwrap();
    db.execute(
        "INSERT INTO search_text (rowid, body, path, checksum) VALUES (9999, 'ghost', 'x', 'y')",
        [],
    )
    .unwrap();
    let out = leasehold(&data, &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lines: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "search_index")
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{v}");
    assert!(lines
        .iter()
        .any(|l| l.contains("\"fox.txt\": its accepted text is not in the search index")));
    assert!(lines
        .iter()
        .any(|l| l.contains("document id 9999: in the search index without")));

    assert!(leasehold(&data, &["reindex"]).status.success());
    let mended = leasehold(&data, &["doctor"]);
    assert!(
        mended.status.success(),
        "{}",
        String::from_utf8_lossy(&mended.stdout)
    );
    assert!(hits(&search_json(&data, "ghost")).is_empty());
    assert_eq!(hit_keys(&search_json(&data, "fox")), ["fox.txt"]);
}

#[test]
fn a_deleted_source_file_leaves_the_index_on_the_next_run() {
    let (dir, data) = indexed_data_dir(&[]);
    std::fs::remove_file(dir.path().join("src/fox.txt")).unwrap();
    std::fs::write(dir.path().join("src/cards.md"), "Only kettles now.").unwrap();
    let src = dir.path().join("src");
    assert!(leasehold(&data, &["run", src.to_str().unwrap(), "-q"])
        .status
        .success());
    assert!(hits(&search_json(&data, "fox")).is_empty());
    assert!(hits(&search_json(&data, "cardinal")).is_empty());
    assert_eq!(hit_keys(&search_json(&data, "kettles")), ["cards.md"]);
    // The gone document's file waits for gc; the index has nothing to mend.
    assert!(leasehold(&data, &["gc"]).status.success());
    let doctor = leasehold(&data, &["doctor"]);
    assert!(
        doctor.status.success(),
        "{}",
        String::from_utf8_lossy(&doctor.stdout)
    );
}

/// The same command on the PostgreSQL edition: its own full-text search,
/// `계정` finding `계정이`, doctor's check, reindex, and no tokenizer choice.
#[test]
fn search_on_postgres() {
    let url = pg::server().fresh_database();
    let db = Some(url.as_str());
    let (_dir, data) = indexed_on(db, &[]);
    let v = search_json_on(db, &data, "계정");
    assert_eq!(hit_keys(&v), ["ko.txt"]);
    assert!(marked(&hits(&v)[0]).contains("[계정이]"), "{v}");
    assert!(hits(&v)[0]["score"].as_f64().unwrap() > 0.0);
    assert_eq!(v["total"], 1);
    assert_eq!(
        hit_keys(&search_json_on(db, &data, "qemu-img OR fox -lazy")),
        Vec::<String>::new()
    );
    assert_eq!(hit_keys(&search_json_on(db, &data, "cards -fox")), ["cards.md"]);
    assert_eq!(hit_keys(&search_json_on(db, &data, "\"brown fox\"")), ["fox.txt"]);
    assert_eq!(hit_keys(&search_json_on(db, &data, "car*")), ["cards.md"]);
    // Stems, through candidate forms probed in the GIN index.
    let none = Vec::<String>::new();
    assert_eq!(hit_keys(&search_json_on(db, &data, "jumping")), ["fox.txt"]);
    assert_eq!(hit_keys(&search_json_on(db, &data, "\"jumping\"")), none);
    let exact = leasehold_on(db, &data, &["search", "--exact", "jumping", "--json"]);
    assert_eq!(exact.status.code(), Some(1), "no match as written");
    // Sizes and dates from the fingerprint, in PostgreSQL's SQL.
    assert_eq!(
        hit_keys(&search_json_on(db, &data, "cards size>10 size<1kB")),
        ["cards.md"]
    );
    assert_eq!(hit_keys(&search_json_on(db, &data, "cards size>1MB")), none);
    assert_eq!(
        hit_keys(&search_json_on(db, &data, "cards after:2000")),
        ["cards.md"]
    );
    assert_eq!(
        hit_keys(&search_json_on(db, &data, "cards before:2000-01-01")),
        none
    );
    assert_eq!(
        hit_keys(&search_json_on(db, &data, "cards -before:2000")),
        ["cards.md"]
    );
    assert_eq!(
        hit_keys(&search_json_on(db, &data, "quick NOT lazy")),
        Vec::<String>::new()
    );
    let bad = leasehold_on(db, &data, &["search", "a AND ("]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let doctor = leasehold_on(db, &data, &["doctor"]);
    assert!(
        doctor.status.success(),
        "{}",
        String::from_utf8_lossy(&doctor.stdout)
    );
    let before: Vec<serde_json::Value> = QUERIES.iter().map(|q| search_json_on(db, &data, q)).collect();
    assert!(leasehold_on(db, &data, &["reindex"]).status.success());
    let after: Vec<serde_json::Value> = QUERIES.iter().map(|q| search_json_on(db, &data, q)).collect();
    assert_eq!(before, after);
    let out = leasehold_on(db, &data, &["reindex", "--tokenizer", "trigram"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `[search] tokenizer` in the configuration file chooses it too; a bad
/// value is a configuration error naming the key.
#[test]
fn the_configuration_file_chooses_the_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let (src, data) = (dir.path().join("src"), dir.path().join("data"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(src.join("fox.txt"), "The quick brown fox").unwrap();
    std::fs::write(data.join("leasehold.toml"), "[search]\ntokenizer = \"trigram\"\n").unwrap();
    let out = leasehold(&data, &["run", src.to_str().unwrap(), "-q"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(hit_keys(&search_json(&data, "uick")), ["fox.txt"]);
    std::fs::write(data.join("leasehold.toml"), "[search]\ntokenizer = \"porter\"\n").unwrap();
    let out = leasehold(&data, &["run", src.to_str().unwrap(), "-q"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[search] tokenizer"));
}

/// Words spelled from numbers, every one distinct, about `bytes` of them:
/// what makes FTS5's memory for one row grow without bound.
fn distinct_words(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 16);
    let mut i = 0_u64;
    while out.len() < bytes {
        out.push('z');
        common::push_spelled(&mut out, i);
        out.push(if i % 12 == 11 { '\n' } else { ' ' });
        i += 1;
    }
    out
}

/// The parent's memory stays under the bound the README states
/// (`parent_memory_bound`) with a text of a million distinct words beside
/// ordinary files: before, FTS5 held all of one document's terms at once
/// (a 60 MB text took the parent to 1.35 GB). Its words are all found.
#[test]
fn a_text_of_a_million_distinct_words_keeps_the_parent_within_its_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let text = distinct_words(8 << 20);
    std::fs::write(src.join("words.txt"), &text).unwrap();
    for i in 0..5 {
        std::fs::write(src.join(format!("note{i}.txt")), format!("an ordinary note {i}")).unwrap();
    }
    let data = dir.path().join("data");
    let (max_input, max_text) = (16_u64 << 20, 16_u64 << 20);
    let out = leasehold_on(
        None,
        &data,
        &[
            "run",
            src.to_str().unwrap(),
            "--workers",
            "1",
            "--max-input",
            "16MiB",
            "--max-text",
            "16MiB",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["indexed"], 6, "{summary}");
    let peak = summary["peak_memory_bytes"].as_u64().unwrap();
    let bound = leasehold::pipeline::parent_memory_bound(1, max_input, max_text);
    assert!(peak > 0, "no peak memory measured: {summary}");
    assert!(
        peak < bound,
        "the parent peaked at {} MiB, over its bound of {} MiB",
        peak >> 20,
        bound >> 20
    );
    let last = text.split_whitespace().last().unwrap();
    assert_eq!(hit_keys(&search_json(&data, last)), ["words.txt"]);
    assert_eq!(hit_keys(&search_json(&data, "zab")), ["words.txt"]);
    // Rebuilt from the mirror, a part at a time, with nothing twice.
    let out = leasehold_on(None, &data, &["reindex", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(hit_keys(&search_json(&data, last)), ["words.txt"]);
    let out = leasehold_on(None, &data, &["doctor"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// A query of 12,000 prefixes (which ran for minutes) is refused at once
/// in one line that does not echo all of it; one at the cap runs.
#[test]
fn a_query_beyond_the_caps_is_refused_in_one_short_line() {
    let (_dir, data) = indexed_data_dir(&[]);
    let huge = "new* ".repeat(12_000);
    let out = leasehold_on(None, &data, &["search", &huge]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("60000 bytes long; at most 4096"), "{err}");
    assert!(
        err.len() < 400,
        "the message echoes the whole query: {} bytes",
        err.len()
    );
    let many = "ne* ".repeat(100);
    let out = leasehold_on(None, &data, &["search", &many]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("100 terms; at most 64"), "{err}");
    let at_cap = "fox ".repeat(64);
    let out = leasehold_on(None, &data, &["search", &at_cap, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let long = format!("fox {}", "x".repeat(5000));
    let out = leasehold_on(None, &data, &["search", &long]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bytes long; at most 4096"));
}
