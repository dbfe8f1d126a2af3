//! The search index (DESIGN §12) on a real store: an accepted text is
//! searchable, a refused one never is, a new version replaces the old, a
//! source that went away leaves the index; Korean particles, trigram
//! substrings, and results equal to a brute-force scan of the texts. Each
//! body runs on SQLite and on PostgreSQL (`sqlite::NAME`, `postgres::NAME`).

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use common::{Backend, TestDb};
use leasehold::mirror::Mirror;
use leasehold::store::IndexDoc;
use leasehold::testing::dup;
use leasehold::{
    Claim, Completion, Error, Fenced, Hit, NewDoc, QuerySyntax, Search, Stemming, Store, StoreOptions,
    Tokenizer,
};

/// A real mirror shared by this file's tests: each completed text is also
/// written there as its result file, under a path of its own, as a worker
/// writes it, so that an index that keeps no copy of its texts (SQLite's
/// word index) cuts its snippets from the file.
fn mirror() -> &'static Mirror {
    static MIRROR: OnceLock<(tempfile::TempDir, Mirror)> = OnceLock::new();
    let (_, mirror) = MIRROR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let mirror = Mirror::open(dir.path()).expect("mirror");
        (dir, mirror)
    });
    mirror
}

/// Write `text` to a new result file in [`mirror`], named after `name`; its
/// path there (`r/NAME-N.txt`).
fn result_of(name: &str, text: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let rel = format!("r/{name}-{}.txt", NEXT.fetch_add(1, Ordering::Relaxed));
    let path = mirror().root().join(&rel);
    std::fs::create_dir_all(path.parent().expect("under r/")).expect("mkdir");
    std::fs::write(&path, text).expect("write result");
    rel
}

/// The hits of `query`, at most `limit`, with their snippets cut from the
/// results in [`mirror`].
fn search(store: &Store, query: &str, limit: usize) -> Vec<Hit> {
    store
        .search_page(&Search::new(query).limit(limit).mirror(mirror()))
        .unwrap_or_else(|e| panic!("{query:?}: {e}"))
        .hits
}

/// Complete `claim` with `text` as its accepted text (a result file of its
/// own in [`mirror`]).
fn finish(store: &Store, claim: Claim, text: &str) -> Fenced {
    let path = result_of(&format!("{}/{}", claim.id.0, claim.fence), text);
    let c = Completion::new(&path, "sum").index(text);
    store.complete(claim, c).expect("no store error")
}

/// Enqueue `key` at `version`, claim it and complete it with `text`.
fn index(store: &Store, key: &str, version: &str, text: &str) {
    store.enqueue(&NewDoc::new(key, version)).unwrap();
    let claim = store.claim("w").unwrap().expect("claimable");
    assert_eq!(claim.key, key);
    assert!(finish(store, claim, text).is_accepted());
}

/// A hit's snippet with its matches in brackets.
fn marked(hit: &Hit) -> String {
    hit.snippet.marked("[", "]")
}

/// The keys a query finds, in order.
fn keys(store: &Store, query: &str) -> Vec<String> {
    store
        .search(query, 1000)
        .unwrap_or_else(|e| panic!("{query:?}: {e}"))
        .into_iter()
        .map(|h| h.key)
        .collect()
}

fn accepted_text_is_searchable(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(1000);
    index(
        &store,
        "fox.txt",
        "v1",
        "The quick brown fox jumps over the lazy dog.",
    );
    index(&store, "cat.txt", "v1", "A sleepy cat.");
    // Two documents completed in one batch go in too.
    store.enqueue(&NewDoc::new("a.txt", "v1")).unwrap();
    store.enqueue(&NewDoc::new("b.txt", "v1")).unwrap();
    let claims = store.claim_batch("w", 2).unwrap();
    assert_eq!(claims.len(), 2);
    let texts = ["batch alpha text", "batch beta text"];
    let paths = texts.map(|text| result_of("batch", text));
    let done: Vec<(Claim, Completion<'_>)> = claims
        .into_iter()
        .zip(texts.iter().zip(&paths))
        .map(|(c, (text, path))| (c, Completion::new(path, "s").index(*text)))
        .collect();
    assert!(store.complete_many(done).unwrap().iter().all(|f| f.is_accepted()));

    let hits = search(&store, "fox", 10);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].key, "fox.txt");
    assert!(marked(&hits[0]).contains("[fox]"), "{:?}", hits[0].snippet);
    assert!(hits[0].result_path.starts_with("r/"), "{:?}", hits[0].result_path);
    assert!(
        hits[0].score > 0.0,
        "a better match has a higher score: {}",
        hits[0].score
    );
    assert_eq!(keys(&store, "\"brown fox\""), ["fox.txt"]);
    assert!(keys(&store, "\"fox brown\"").is_empty());
    assert_eq!(keys(&store, "sle*"), ["cat.txt"]);
    assert_eq!(keys(&store, "fox OR cat").len(), 2);
    assert_eq!(keys(&store, "quick NOT dog"), Vec::<String>::new());
    assert_eq!(keys(&store, "batch alpha"), ["a.txt"]);
    assert_eq!(keys(&store, "batch").len(), 2);
    assert_eq!(store.search("fox", 0).unwrap(), vec![]);
}

/// A claims, its lease runs out, B claims and completes; A's late completion
/// is refused and its text is never searchable, before or after B's.
fn a_refused_completion_is_never_searchable(b: Backend) {
    let t = TestDb::new(b);
    let (a, bb) = (t.handle(10), t.handle(10));
    a.enqueue(&NewDoc::new("doc", "v1")).unwrap();
    let claim_a = a.claim("A").unwrap().unwrap();
    t.clock.set(10);
    let claim_b = bb.claim("B").unwrap().expect("B takes the expired lease");
    assert!(!finish(&a, dup(&claim_a), "stale alpha").is_accepted());
    assert!(keys(&bb, "alpha").is_empty(), "a refused completion was indexed");
    assert!(finish(&bb, claim_b, "fresh bravo").is_accepted());
    // Late again, now in a batch with a document it does own.
    a.enqueue(&NewDoc::new("other", "v1")).unwrap();
    let other = a.claim("A").unwrap().unwrap();
    let out = a
        .complete_many(vec![
            (claim_a, Completion::new("r/a", "s").index("stale alpha")),
            (other, Completion::new("r/o", "s").index("charlie")),
        ])
        .unwrap();
    assert!(!out[0].is_accepted() && out[1].is_accepted());
    assert!(keys(&bb, "alpha").is_empty(), "a refused completion was indexed");
    assert_eq!(keys(&bb, "bravo"), ["doc"]);
    assert_eq!(keys(&bb, "charlie"), ["other"]);
    assert!(bb.check_search_index().unwrap().is_healthy());
}

/// The old text stays searchable while the new version is extracted and
/// leaves when the new one is accepted.
fn a_new_version_replaces_the_old_text(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(1000);
    index(&store, "doc", "v1", "oldword here");
    store.enqueue(&NewDoc::new("doc", "v2")).unwrap();
    assert_eq!(
        keys(&store, "oldword"),
        ["doc"],
        "the accepted text stays until a new one is"
    );
    let claim = store.claim("w").unwrap().unwrap();
    assert!(finish(&store, claim, "newword here").is_accepted());
    assert!(keys(&store, "oldword").is_empty());
    assert_eq!(keys(&store, "newword"), ["doc"]);
    assert_eq!(keys(&store, "here"), ["doc"], "one row per document");
    let check = store.check_search_index().unwrap();
    assert!(check.is_healthy(), "{check:?}");
    assert_eq!((check.accepted, check.rows), (1, 1));
}

fn a_removed_source_leaves_the_index(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(1000);
    index(&store, "kept", "v1", "shared kept");
    index(&store, "gone", "v1", "shared gone");
    let scan = store.begin_scan().unwrap();
    store.record_scan(scan, &["kept".to_owned()], &[]).unwrap();
    assert_eq!(store.finish_scan(scan).unwrap(), 1);
    assert!(keys(&store, "gone").is_empty());
    assert_eq!(keys(&store, "shared"), ["kept"]);
    assert!(store.check_search_index().unwrap().is_healthy());
}

/// A path `watch` saw removed (a file, or a directory and all under it)
/// leaves the index in the transaction that marks it gone.
fn a_path_marked_gone_leaves_the_index(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(1000);
    index(&store, "kept.txt", "v1", "shared kept");
    index(&store, "gone.txt", "v1", "shared gone");
    index(&store, "dir/under.txt", "v1", "shared under");
    let gone = store
        .mark_gone(&["gone.txt".to_owned()], &["dir/".to_owned()])
        .unwrap();
    assert_eq!(gone, 2);
    assert_eq!(keys(&store, "shared"), ["kept.txt"]);
    assert!(store.check_search_index().unwrap().is_healthy());
}

/// `계정` finds `계정이` with the default tokenizer (a noun with its
/// particle attached is one word); a Japanese run is found from its start.
fn korean_particles_and_unspaced_scripts(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(1000);
    index(&store, "ko", "v1", "계정이 잠겼습니다. 비밀번호를 확인하세요.");
    index(&store, "ja", "v1", "東京都に住んでいます");
    let hits = search(&store, "계정", 10);
    assert_eq!(hits.iter().map(|h| h.key.as_str()).collect::<Vec<_>>(), ["ko"]);
    assert!(marked(&hits[0]).contains("[계정이]"), "{:?}", hits[0].snippet);
    assert_eq!(keys(&store, "비밀번호"), ["ko"]);
    assert_eq!(keys(&store, "계정 비밀번호"), ["ko"]);
    assert_eq!(keys(&store, "東京"), ["ja"]);
}

fn a_malformed_query_is_an_invalid_input(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(1000);
    index(&store, "doc", "v1", "some text");
    for bad in ["\"open", "a AND (", "   ", "-some", "a OR", "+ —"] {
        match store.search(bad, 10) {
            Err(Error::InvalidInput { what, reason }) => {
                assert_eq!(what, "search query");
                assert!(reason.contains("at column"), "{bad:?}: {reason}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // FTS5's own syntax, asked for, is judged by FTS5 (or its translation).
    let fts = |q| store.search_page(&Search::new(q).syntax(QuerySyntax::Fts5));
    assert!(matches!(fts("a AND ("), Err(Error::InvalidInput { .. })));
    assert_eq!(fts("some NOT other").unwrap().total, 1);
}

/// Fields narrow a search by the document's key: a folder (at any depth,
/// not a sibling that shares its start), a piece of the path, a type by
/// extension or family; several of one field are alternatives, negated ones
/// exclude; the total counts only what they leave.
fn fields_narrow_by_folder_path_and_type(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(60_000);
    for key in [
        "notes/a.txt",
        "notes/old/b.md",
        "notesx/c.pdf",
        "docs/d.PDF",
        "docs/e.docx",
    ] {
        index(&store, key, "v1", "common words here");
    }
    index(&store, "notes/z.txt", "v1", "other words");
    // A key made on Windows, a hidden file named like an extension, and a
    // name that is not UTF-8 (`hex:` and the bytes of `notes/` and 0xff).
    for key in ["notes\\w.txt", "docs/.pdf", "hex:6e6f7465732fff"] {
        index(&store, key, "v1", "rare tokens here");
    }
    for (query, want) in [
        ("rare dir:notes", &["notes\\w.txt", "hex:6e6f7465732fff"][..]),
        ("rare type:pdf", &[]),
        ("rare path:notes/w", &["notes\\w.txt"]),
        ("rare path:ff", &[]),
        ("common dir:notes", &["notes/a.txt", "notes/old/b.md"][..]),
        ("common dir:./notes/", &["notes/a.txt", "notes/old/b.md"]),
        ("common dir:notes -dir:notes/old", &["notes/a.txt"]),
        ("common type:pdf", &["docs/d.PDF", "notesx/c.pdf"]),
        (
            "common type:pdf type:docx",
            &["docs/d.PDF", "docs/e.docx", "notesx/c.pdf"],
        ),
        ("common type:word", &["docs/e.docx"]),
        ("common path:OLD", &["notes/old/b.md"]),
        (
            "common -type:pdf",
            &["docs/e.docx", "notes/a.txt", "notes/old/b.md"],
        ),
        ("common dir:notes type:pdf", &[]),
        (
            "words dir:notes",
            &["notes/a.txt", "notes/old/b.md", "notes/z.txt"],
        ),
    ] {
        let found: BTreeSet<String> = keys(&store, query).into_iter().collect();
        let want: BTreeSet<String> = want.iter().map(|k| k.to_string()).collect();
        assert_eq!(found, want, "{query:?}");
    }
    // A cut page counts what the fields leave.
    let page = store
        .search_page(&Search::new("words dir:notes").limit(1))
        .unwrap();
    assert_eq!((page.hits.len(), page.total), (1, 3));
    match store.search("dir:notes", 10) {
        Err(Error::InvalidInput { reason, .. }) => assert!(reason.contains("add a word"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

/// People's language: a word with punctuation is the phrase of its parts,
/// exclusions, OR binding tighter than the space, groups; pages and the
/// total.
fn ordinary_terms_are_searched_as_written(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(60_000);
    index(
        &store,
        "qemu",
        "v1",
        "Convert images with qemu-img convert; see e-mail.",
    );
    index(
        &store,
        "cpp",
        "v1",
        "C++ and libffi.so.8 in release 2.0 (don't panic)",
    );
    index(&store, "url", "v1", "Read https://example.org/a?b=c first");
    index(
        &store,
        "apart",
        "v1",
        "qemu and img apart; mail e later; so libffi",
    );
    index(&store, "windows", "v1", "qemu-img on windows, e-mail too");
    for (query, want) in [
        ("qemu-img", &["qemu", "windows"][..]),
        ("qemu-img -windows", &["qemu"]),
        ("qemu-img NOT windows", &["qemu"]),
        ("e-mail", &["qemu", "windows"]),
        ("libffi.so", &["cpp"]),
        ("2.0", &["cpp"]),
        ("don't", &["cpp"]),
        ("C++ release", &["cpp"]),
        ("https://example.org/a?b=c", &["url"]),
        ("qemu-im*", &["qemu", "windows"]),
        ("\"img apart\"", &["apart"]),
        ("img (apart OR windows)", &["apart", "windows"]),
        ("convert OR first panic", &[]),
        ("panic convert OR release", &["cpp"]),
        ("panic | read", &["cpp", "url"]),
        ("qemu -(windows OR apart)", &["qemu"]),
        ("body:x", &[]),
    ] {
        let found: BTreeSet<String> = keys(&store, query).into_iter().collect();
        let want: BTreeSet<String> = want.iter().map(|k| k.to_string()).collect();
        assert_eq!(found, want, "{query:?}");
    }
    // Pages: the total whatever the page, the pages in rank order.
    let all = store.search_page(&Search::new("qemu").unlimited()).unwrap();
    assert_eq!(all.total, 3);
    assert_eq!(all.hits.len(), 3);
    let second = store
        .search_page(&Search::new("qemu").offset(1).limit(1))
        .unwrap();
    assert_eq!(second.total, 3);
    assert_eq!(second.hits.len(), 1);
    assert_eq!(second.hits[0].key, all.hits[1].key);
    let past = store.search_page(&Search::new("qemu").offset(5)).unwrap();
    assert_eq!((past.total, past.hits.len()), (3, 0));
    let bare = store
        .search_page(&Search::new("qemu").without_snippets())
        .unwrap();
    assert!(bare.hits.iter().all(|h| h.snippet.text().is_empty()));
    // The snippet's highlights cover the matched words.
    let hit = &search(&store, "e-mail", 1)[0];
    let words: Vec<&str> = hit
        .snippet
        .highlights()
        .iter()
        .map(|h| &hit.snippet.text()[h.clone()])
        .collect();
    assert!(
        !words.is_empty() && words.iter().all(|w| w.contains("mail") || *w == "e"),
        "{words:?}"
    );
}

/// A smaller corpus, searched through the index and by a scan of the texts
/// (unicode61's rule for ASCII: words are runs of letters and digits, case
/// folded): the same documents for every single-word, phrase and prefix query.
fn results_equal_a_brute_force_scan(b: Backend) {
    const WORDS: [&str; 16] = [
        "card", "cardinal", "cart", "carton", "amber", "anchor", "delta", "deltas", "echo", "ember", "fable",
        "harbor", "harp", "orbit", "orchid", "zinc",
    ];
    let t = TestDb::new(b);
    let store = t.handle(60_000);
    let mut rng = fastrand::Rng::with_seed(15);
    let mut texts = Vec::new();
    for i in 0..200 {
        let n = rng.usize(3..25);
        let words: Vec<String> = (0..n)
            .map(|_| {
                let w = WORDS[rng.usize(..WORDS.len())];
                if rng.u8(..10) == 0 {
                    w.to_uppercase()
                } else {
                    w.to_owned()
                }
            })
            .collect();
        let seps = [" ", ", ", ". ", "\n", " - "];
        let mut text = String::new();
        for (j, w) in words.iter().enumerate() {
            if j > 0 {
                text.push_str(seps[rng.usize(..seps.len())]);
            }
            text.push_str(w);
        }
        let key = format!("doc{i:03}");
        store.enqueue(&NewDoc::new(&key, "v1")).unwrap();
        texts.push((key, text));
    }
    let claims = store.claim_batch("w", texts.len()).unwrap();
    let done: Vec<(Claim, Completion<'_>)> = claims
        .into_iter()
        .map(|c| {
            let text = &texts.iter().find(|(k, _)| *k == c.key).unwrap().1;
            (c, Completion::new("r", "s").index(text.as_str()))
        })
        .collect();
    assert!(store.complete_many(done).unwrap().iter().all(|f| f.is_accepted()));
    let tokens: Vec<(String, Vec<String>)> = texts
        .iter()
        .map(|(k, text)| {
            let words = text
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_lowercase)
                .collect();
            (k.clone(), words)
        })
        .collect();
    let scan = |pred: &dyn Fn(&[String]) -> bool| -> BTreeSet<String> {
        tokens
            .iter()
            .filter(|(_, w)| pred(w))
            .map(|(k, _)| k.clone())
            .collect()
    };
    let found = |q: &str| -> BTreeSet<String> { keys(&store, q).into_iter().collect() };
    let as_written = |q: &str| -> BTreeSet<String> {
        let page = store
            .search_page(&Search::new(q).unlimited().stemming(Stemming::Off))
            .unwrap();
        page.hits.into_iter().map(|h| h.key).collect()
    };
    // Of the words, only these two share a stem (English Snowball), on
    // both engines, whose stores stem by default.
    assert_eq!(store.search_stemming().unwrap(), Stemming::English);
    let same_word = |w: &str, x: &str| x == w || matches!((w, x), ("delta", "deltas") | ("deltas", "delta"));
    let mut checked = 0;
    for w in WORDS {
        assert_eq!(as_written(w), scan(&|ws| ws.iter().any(|x| x == w)), "word {w}");
        assert_eq!(
            found(w),
            scan(&|ws| ws.iter().any(|x| same_word(w, x))),
            "word {w}, stemmed"
        );
        let prefix = &w[..3];
        let q = format!("{prefix}*");
        assert_eq!(
            found(&q),
            scan(&|ws| ws.iter().any(|x| x.starts_with(prefix))),
            "prefix {q}"
        );
        let next = WORDS[(w.len() * 7) % WORDS.len()];
        let q = format!("\"{w} {next}\"");
        let expected = scan(&|ws| ws.windows(2).any(|p| p[0] == w && p[1] == next));
        checked += expected.len();
        assert_eq!(found(&q), expected, "phrase {q}");
    }
    assert!(
        checked > 0,
        "the phrases matched nothing: the corpus is too small to tell"
    );
}

/// The check finds texts missing from the index; a rebuild puts back only
/// what is still the accepted result, and prunes what is not.
fn the_check_and_a_rebuild_through_the_library(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(1000);
    index(&store, "one", "v1", "first text");
    index(&store, "two", "v1", "second text");
    store
        .reset_search_index(store.search_tokenizer().unwrap())
        .unwrap();
    let check = store.check_search_index().unwrap();
    assert_eq!(
        (check.missing, check.rows, check.accepted),
        (2, 0, 2),
        "{check:?}"
    );
    assert_eq!(check.examples.len(), 2);
    assert!(keys(&store, "text").is_empty());
    let jobs: Vec<_> = ["one", "two"]
        .iter()
        .map(|k| store.job_by_key(k).unwrap().unwrap())
        .collect();
    let docs: Vec<IndexDoc<'_>> = jobs
        .iter()
        .zip(["first text", "second text"])
        .map(|(j, text)| IndexDoc {
            id: j.id,
            result_path: j.result_path.as_deref().unwrap(),
            // The second is not the accepted result any more: left out.
            checksum: if j.key == "two" {
                "another"
            } else {
                j.checksum.as_deref().unwrap()
            },
            text,
        })
        .collect();
    assert_eq!(store.reindex_texts(&docs).unwrap(), 1);
    assert_eq!(keys(&store, "text"), ["one"]);
    assert_eq!(store.check_search_index().unwrap().missing, 1);
    assert_eq!(store.prune_search_index().unwrap(), 0);
}

/// Complete `key` at `version` with `text` and the title the document
/// gives itself, if any.
fn index_titled(store: &Store, key: &str, version: &str, text: &str, title: Option<&str>) {
    store.enqueue(&NewDoc::new(key, version)).unwrap();
    let claim = store.claim("w").unwrap().expect("claimable");
    let path = format!("r/{}/{}", claim.id.0, claim.fence);
    let c = Completion::new(&path, "sum").index(text).title(title);
    assert!(store.complete(claim, c).unwrap().is_accepted());
}

/// A title is searched with the text and ranked above it; `title:` looks
/// there only; a document without a title is titled by its file name; the
/// title is recorded with the result (a new version without one clears it)
/// and comes back in hits and through a rebuild of the index.
fn titles_rank_first_are_searched_alone_and_survive_a_rebuild(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(1000);
    let filler = "the orchard notes go on about the weather and the soil ".repeat(4);
    index_titled(
        &store,
        "deep/pelican-plans.txt",
        "v1",
        &format!("{filler} walnut walnut walnut"),
        None,
    );
    index_titled(
        &store,
        "recipes.html",
        "v1",
        &format!("{filler} walnut"),
        Some("Walnut Recipes"),
    );
    index_titled(
        &store,
        "other.md",
        "v1",
        &format!("{filler} almond"),
        // A title from an embedder's extractor is cleaned as the built-in ones are.
        Some(" Almond\0notes \n"),
    );
    let other = store.job_by_key("other.md").unwrap().unwrap();
    assert_eq!(other.title.as_deref(), Some("Almond notes"));
    // An author is searched too (author: alone), and the date is recorded as a day.
    store.enqueue(&NewDoc::new("memo.pdf", "v1")).unwrap();
    let claim = store.claim("w").unwrap().expect("claimable");
    let path = format!("r/{}/{}", claim.id.0, claim.fence);
    let text = format!("{filler} chestnut");
    let c = Completion::new(&path, "sum")
        .index(&text)
        .author("Jane Chestnutt")
        .date("D:20260115093000+01'00'")
        .pages(12)
        .language("en_GB");
    assert!(store.complete(claim, c).unwrap().is_accepted());
    let memo = store.job_by_key("memo.pdf").unwrap().unwrap();
    assert_eq!(
        (memo.author.as_deref(), memo.doc_date.as_deref()),
        (Some("Jane Chestnutt"), Some("2026-01-15"))
    );
    assert_eq!((memo.pages, memo.language.as_deref()), (Some(12), Some("en-GB")));
    // In a batch too; a tag that is none is left out.
    for key in ["scan-1.pdf", "scan-2.pdf"] {
        store.enqueue(&NewDoc::new(key, "v1")).unwrap();
    }
    let claims = [
        store.claim("w").unwrap().unwrap(),
        store.claim("w").unwrap().unwrap(),
    ];
    let done = claims
        .into_iter()
        .zip([(3, "ko"), (4, "not a language")])
        .map(|(c, (pages, language))| (c, Completion::new("r/s", "s").pages(pages).language(language)))
        .collect();
    assert!(store.complete_many(done).unwrap().iter().all(|f| f.is_accepted()));
    let scans: Vec<_> = ["scan-1.pdf", "scan-2.pdf"]
        .iter()
        .map(|k| store.job_by_key(k).unwrap().unwrap())
        .map(|j| (j.pages, j.language))
        .collect();
    assert_eq!(scans, [(Some(3), Some("ko".to_owned())), (Some(4), None)]);
    assert_eq!(keys(&store, "author:jane"), ["memo.pdf"]);
    assert!(keys(&store, "author:chestnut").is_empty());
    assert_eq!(keys(&store, "jane"), ["memo.pdf"]);
    let hit = &store.search("author:chestnutt", 1).unwrap()[0];
    assert_eq!(
        (hit.author.as_deref(), hit.date.as_deref()),
        (Some("Jane Chestnutt"), Some("2026-01-15"))
    );
    // One walnut in the text under a walnut title beats three in the text.
    assert_eq!(keys(&store, "walnut"), ["recipes.html", "deep/pelican-plans.txt"]);
    assert_eq!(keys(&store, "title:walnut"), ["recipes.html"]);
    let mut untitled = keys(&store, "orchard -title:walnut");
    untitled.sort();
    assert_eq!(untitled, ["deep/pelican-plans.txt", "memo.pdf", "other.md"]);
    // Stemming reaches into the title: `recipe` finds "Recipes".
    assert_eq!(keys(&store, "title:recipe"), ["recipes.html"]);
    // No title of its own: its file name is searched as its title.
    assert_eq!(keys(&store, "title:pelican"), ["deep/pelican-plans.txt"]);
    assert_eq!(keys(&store, "pelican"), ["deep/pelican-plans.txt"]);
    // A file name as one word finds its title on both engines (PostgreSQL's
    // parser takes `pelican-plans.txt` whole in the query).
    assert_eq!(keys(&store, "pelican-plans.txt"), ["deep/pelican-plans.txt"]);
    let hits = store.search("walnut", 10).unwrap();
    let titles: Vec<_> = hits.iter().map(|h| h.title.as_deref()).collect();
    assert_eq!(titles, [Some("Walnut Recipes"), None]);
    let job = store.job_by_key("recipes.html").unwrap().unwrap();
    assert_eq!(job.title.as_deref(), Some("Walnut Recipes"));
    // A rebuild takes the titles from the documents' rows.
    let texts = [format!("{filler} walnut")];
    store
        .reset_search_index(store.search_tokenizer().unwrap())
        .unwrap();
    let docs = [IndexDoc {
        id: job.id,
        result_path: job.result_path.as_deref().unwrap(),
        checksum: job.checksum.as_deref().unwrap(),
        text: &texts[0],
    }];
    assert_eq!(store.reindex_texts(&docs).unwrap(), 1);
    assert_eq!(keys(&store, "title:walnut"), ["recipes.html"]);
    // A new version without a title clears it, and its file name stands in.
    index_titled(&store, "recipes.html", "v2", "just walnut", None);
    assert_eq!(store.job_by_key("recipes.html").unwrap().unwrap().title, None);
    assert!(keys(&store, "title:walnut").is_empty());
    assert_eq!(keys(&store, "title:recipes"), ["recipes.html"]);
}

/// A result found missing or altered is forgotten: its text leaves the index
/// and the document is queued again with fresh attempts, while that result
/// is still the accepted one (a newer one stands). A completion records the
/// result's size it is given.
fn a_forgotten_result_leaves_the_index_and_queues_its_document(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(1000);
    store.enqueue(&NewDoc::new("fox.txt", "v1")).unwrap();
    let claim = store.claim("w").unwrap().expect("claimable");
    let id = claim.id;
    let done = Completion::new("r/fox/1", "sum1")
        .index("The quick brown fox")
        .result_bytes(19);
    assert!(store.complete(claim, done).unwrap().is_accepted());
    assert_eq!(store.job(id).unwrap().unwrap().result_bytes, Some(19));
    assert_eq!(keys(&store, "fox"), ["fox.txt"]);

    // Another result than the accepted one changes nothing.
    assert!(!store.forget_result(id, "r/fox/0", "stale").unwrap());
    assert_eq!(keys(&store, "fox"), ["fox.txt"]);

    assert!(store
        .forget_result(id, "r/fox/1", "its result is missing")
        .unwrap());
    let job = store.job(id).unwrap().unwrap();
    assert_eq!(job.status, leasehold::Status::Discovered);
    assert_eq!(
        (job.result_path, job.checksum, job.result_bytes),
        (None, None, None)
    );
    assert_eq!(job.attempts, 0);
    assert!(keys(&store, "fox").is_empty(), "its text left the index");
    assert!(store.check_search_index().unwrap().is_healthy());
    let history = store.history(id).unwrap();
    let last = history.last().unwrap();
    assert_eq!(
        (last.event.as_str(), last.detail.as_deref()),
        ("requeued", Some("its result is missing"))
    );
    // Queued again: the next worker extracts it anew.
    let claim = store.claim("w").unwrap().expect("claimable again");
    assert_eq!(claim.id, id);
    assert!(finish(&store, claim, "The quick brown fox, again").is_accepted());
    assert_eq!(keys(&store, "again"), ["fox.txt"]);
}

on_both_backends!(
    a_forgotten_result_leaves_the_index_and_queues_its_document,
    a_path_marked_gone_leaves_the_index,
    the_check_and_a_rebuild_through_the_library,
    accepted_text_is_searchable,
    a_refused_completion_is_never_searchable,
    a_new_version_replaces_the_old_text,
    a_removed_source_leaves_the_index,
    korean_particles_and_unspaced_scripts,
    a_malformed_query_is_an_invalid_input,
    ordinary_terms_are_searched_as_written,
    fields_narrow_by_folder_path_and_type,
    results_equal_a_brute_force_scan,
    the_best_match_comes_first_and_ties_keep_id_order,
    titles_rank_first_are_searched_alone_and_survive_a_rebuild,
);

/// The trigram tokenizer finds any substring of three or more characters,
/// and shorter ones by LIKE; the default tokenizer finds neither.
#[test]
fn sqlite_only_trigram_finds_substrings() {
    let t = TestDb::new(Backend::Sqlite);
    let store = t.open(t.options(1000).tokenizer(Tokenizer::Trigram));
    assert_eq!(store.search_tokenizer().unwrap(), Tokenizer::Trigram);
    index(&store, "fox", "v1", "The quick brown fox");
    index(&store, "ja", "v1", "東京都に住んでいます");
    index(&store, "ko", "v1", "계정이 잠겼습니다");
    assert_eq!(keys(&store, "ick bro"), ["fox"]);
    assert_eq!(keys(&store, "\"k bro\""), ["fox"]);
    assert_eq!(keys(&store, "住んで"), ["ja"]);
    let short = store.search("住ん", 10).unwrap();
    assert_eq!(short.iter().map(|h| h.key.as_str()).collect::<Vec<_>>(), ["ja"]);
    assert!(marked(&short[0]).contains("[住ん]"), "{:?}", short[0].snippet);
    assert_eq!(keys(&store, "정이"), ["ko"]);
    assert_eq!(keys(&store, "계정"), ["ko"]);
    assert!(matches!(
        store.search("ab OR abc", 10),
        Err(Error::InvalidInput { .. })
    ));

    let plain = TestDb::new(Backend::Sqlite);
    let store = plain.handle(1000);
    index(&store, "fox", "v1", "The quick brown fox");
    assert!(keys(&store, "ick").is_empty());
}

/// The tokenizer is recorded in the data directory; asking a store with
/// text for another one is refused, and `reset_search_index` changes it.
#[test]
fn sqlite_only_the_tokenizer_is_recorded_and_changed_only_by_a_reset() {
    let t = TestDb::new(Backend::Sqlite);
    let store = t.open(t.options(1000).tokenizer(Tokenizer::Unicode61));
    index(&store, "doc", "v1", "some text");
    drop(store);
    let meta = |path: &str| -> String {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row(
                "SELECT value FROM meta WHERE name = 'search_tokenizer'",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(meta(&t.location), "unicode61 remove_diacritics 2");
    match Store::open(&t.location, t.options(1000).tokenizer(Tokenizer::Trigram)) {
        Err(Error::InvalidInput {
            what: "tokenizer",
            reason,
        }) => {
            assert!(reason.contains("reindex --tokenizer trigram"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let store = t.handle(1000);
    store.reset_search_index(Tokenizer::Trigram).unwrap();
    assert_eq!(meta(&t.location), "trigram");
    assert!(keys(&store, "some").is_empty(), "a reset empties the index");
    assert_eq!(store.check_search_index().unwrap().missing, 1);
    let again = Store::open(&t.location, StoreOptions::default().tokenizer(Tokenizer::Trigram)).unwrap();
    assert_eq!(again.search_tokenizer().unwrap(), Tokenizer::Trigram);
}

/// The best match comes first and ties keep the order the documents came
/// in: a text that holds the word more often (at the same length) ranks
/// above one that holds it less, though it was indexed last; a text with
/// more of an OR query's words ranks above one with fewer; equal texts are
/// in id order, also where the limit cuts them; ranks never decrease.
fn the_best_match_comes_first_and_ties_keep_id_order(b: Backend) {
    let t = TestDb::new(b);
    let store = t.handle(60_000);
    for i in 0..8 {
        index(&store, &format!("once{i}"), "v1", "apple stone river cloud");
    }
    index(&store, "twice", "v1", "apple apple river cloud");
    index(&store, "thrice", "v1", "apple apple apple cloud");
    index(&store, "both", "v1", "apple pear river cloud");

    let hits = store.search("apple", 5).unwrap();
    let found: Vec<&str> = hits.iter().map(|h| h.key.as_str()).collect();
    assert_eq!(found, ["thrice", "twice", "once0", "once1", "once2"]);
    assert!(
        hits.windows(2).all(|w| w[0].score >= w[1].score),
        "scores in order: {hits:?}"
    );
    assert!(hits[0].score > hits[1].score && hits[1].score > hits[2].score);
    assert_eq!(hits[2].score, hits[4].score, "equal texts score equal");

    let found = keys(&store, "pear OR river");
    assert_eq!(found[0], "both", "{found:?}");
    assert_eq!(found.len(), 10);
    // Every tie after it in id order.
    let tied: Vec<String> = (0..8)
        .map(|i| format!("once{i}"))
        .chain(["twice".to_owned()])
        .collect();
    assert_eq!(found[1..], tied[..]);
}

/// Whether any page of the index holds `term` (FTS5's `search_text_data`,
/// read here to look at the file, as an attacker with the file could).
fn pages_hold(t: &TestDb, term: &str) -> bool {
    let conn = rusqlite::Connection::open(&t.location).unwrap();
    let mut blocks = conn.prepare("SELECT block FROM search_text_data").unwrap();
    let pages: Vec<Vec<u8>> = blocks
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    pages
        .iter()
        .any(|p| p.windows(term.len()).any(|w| w == term.as_bytes()))
}

/// Enqueue `keys` at `version`, claim them in one batch and complete them
/// together, each with the text `text_of` gives its key.
fn batch(store: &Store, keys: &[String], version: &str, text_of: impl Fn(&str) -> String) {
    let docs: Vec<NewDoc> = keys.iter().map(|k| NewDoc::new(k, version)).collect();
    store.enqueue_many(&docs).unwrap();
    let claims = store.claim_batch("w", keys.len()).unwrap();
    assert_eq!(claims.len(), keys.len());
    let texts: Vec<(String, String)> = claims
        .iter()
        .map(|c| (format!("r/{}/{}", c.id.0, c.fence), text_of(&c.key)))
        .collect();
    let done: Vec<(Claim, Completion<'_>)> = claims
        .into_iter()
        .zip(&texts)
        .map(|(c, (path, text))| (c, Completion::new(path, "sum").index(text)))
        .collect();
    assert!(store.complete_many(done).unwrap().iter().all(|f| f.is_accepted()));
}

/// A replaced text's words stay in the index's pages (FTS5's secure-delete
/// is off: it made a change cost tens of times an addition) until the
/// purge `gc` runs, and not after it.
#[test]
fn sqlite_only_a_replaced_text_leaves_no_terms_in_the_index_once_purged() {
    let t = TestDb::new(Backend::Sqlite);
    let store = t.handle(60_000);
    let docs = ["a".to_string(), "b".to_string()];
    let secret = "zanzibarquux ".repeat(3000);
    batch(&store, &docs, "v1", |k| {
        if k == "a" {
            secret.clone()
        } else {
            "plain words".into()
        }
    });
    assert_eq!(keys(&store, "zanzibarquux"), ["a"]);
    batch(&store, &docs, "v2", |k| {
        if k == "a" {
            "other text now ".repeat(3000)
        } else {
            "plain words again".into()
        }
    });
    assert!(keys(&store, "zanzibarquux").is_empty());
    assert_eq!(keys(&store, "other"), ["a"]);
    assert!(
        pages_hold(&t, "zanzibarquux"),
        "two replacements make no purge due"
    );
    store.purge_search_parts().unwrap();
    assert!(
        !pages_hold(&t, "zanzibarquux"),
        "the purge left the replaced text's term"
    );
    assert_eq!(keys(&store, "other"), ["a"], "the purge keeps what is live");
}

/// How many records FTS5 keeps for the index (`search_text_data`): each
/// flush of what a transaction wrote adds a segment of at least one.
fn index_records(t: &TestDb) -> i64 {
    let conn = rusqlite::Connection::open(&t.location).unwrap();
    conn.query_row("SELECT count(*) FROM search_text_data", [], |r| r.get(0))
        .unwrap()
}

/// A batch's completion writes the index once, as one segment, whether its
/// documents are new or replaced: a statement with a statement transaction
/// between two documents' index writes made FTS5 flush each document as a
/// segment of its own, which then cost merge work (every first run and
/// every change paid it).
#[test]
fn sqlite_only_a_batch_is_one_segment_of_the_index_new_or_replaced() {
    let t = TestDb::new(Backend::Sqlite);
    let store = t.handle(60_000);
    {
        // No merging, so that every flush stays a segment to count.
        let conn = rusqlite::Connection::open(&t.location).unwrap();
        for (option, value) in [("automerge", 0), ("crisismerge", 1000)] {
            conn.execute(
                "INSERT INTO search_text (search_text, rank) VALUES (?1, ?2)",
                rusqlite::params![option, value],
            )
            .unwrap();
        }
    }
    // Fewer replacements than make a purge due (which merges).
    let docs: Vec<String> = (0..30).map(|i| format!("doc{i:02}")).collect();
    let before = index_records(&t);
    batch(&store, &docs, "v1", |k| format!("first words of {k}"));
    let first = index_records(&t);
    assert!(first - before <= 2, "{before} records, then {first}");
    batch(&store, &docs, "v2", |k| format!("second words of {k}"));
    let second = index_records(&t);
    assert!(second - first <= 2, "{first} records, then {second}");
    assert_eq!(keys(&store, "second").len(), 30);
    assert!(keys(&store, "first").is_empty());
}

/// Once a tenth of the index (at least 32 rows) has been deleted, the purge
/// runs by itself, a step after each completion, and the deleted words leave
/// the pages without a `gc`.
#[test]
fn sqlite_only_deleted_text_is_purged_on_schedule() {
    let t = TestDb::new(Backend::Sqlite);
    let store = t.handle(60_000);
    let docs: Vec<String> = (0..40).map(|i| format!("doc{i:02}")).collect();
    batch(&store, &docs, "v1", |k| format!("zanzibarquux {k} words"));
    batch(&store, &docs, "v2", |k| format!("replaced {k} words"));
    // Completions of other documents carry the purge's steps.
    for i in 0..10 {
        index(&store, &format!("later{i}"), "v1", "later words");
    }
    assert!(
        !pages_hold(&t, "zanzibarquux"),
        "40 replaced rows left their terms"
    );
    assert_eq!(keys(&store, "replaced").len(), 40);
    assert_eq!(keys(&store, "later").len(), 10);
}

/// A reindex batch that names one document twice leaves its last text, as
/// two batches one after the other would.
#[test]
fn sqlite_only_a_document_twice_in_one_reindex_batch_keeps_the_last_text() {
    let t = TestDb::new(Backend::Sqlite);
    let store = t.handle(1000);
    index(&store, "doc", "v1", "original words");
    let id = store.search("original", 10).unwrap()[0].result_path.clone();
    let (result_path, checksum) = (id.as_str(), "sum");
    let doc_id: i64 = result_path.split('/').nth(1).unwrap().parse().unwrap();
    let docs = [
        IndexDoc {
            id: doc_id,
            result_path,
            checksum,
            text: "first pass",
        },
        IndexDoc {
            id: doc_id,
            result_path,
            checksum,
            text: "second pass",
        },
    ];
    store.reindex_texts(&docs).unwrap();
    assert_eq!(keys(&store, "second"), ["doc"]);
    assert!(keys(&store, "first").is_empty());
    assert!(keys(&store, "original").is_empty());
    assert!(store.check_search_index().unwrap().is_healthy());
}

/// `n` distinct words (`w0 w1 …` spelled with letters), about 8 bytes each.
fn distinct_words(prefix: &str, n: usize) -> String {
    let mut out = String::with_capacity(n * 8);
    for i in 0..n {
        out.push_str(prefix);
        common::push_spelled(&mut out, i as u64);
        out.push(' ');
    }
    out
}

/// Rows of `search_parts` by state, read from the file.
fn part_states(t: &TestDb) -> Vec<(String, i64)> {
    let conn = rusqlite::Connection::open(&t.location).unwrap();
    let mut stmt = conn
        .prepare("SELECT state, count(*) FROM search_parts GROUP BY state ORDER BY state")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A text longer than one part of the index (1 MiB) goes in parts: every
/// word in it is found, the document once, and a new version takes all of
/// the old text out (its further parts retired, then deleted with no term
/// left in the index's pages).
#[test]
fn sqlite_only_a_long_text_is_searchable_in_parts_and_replaced_whole() {
    let t = TestDb::new(Backend::Sqlite);
    let store = t.handle(60_000);
    let long = format!(
        "alphastart {} {} omegaend",
        "common filler words ".repeat(60_000),
        distinct_words("mid", 120_000)
    );
    assert!(long.len() > 2 * 1024 * 1024);
    index(&store, "long.txt", "v1", &long);
    index(&store, "short.txt", "v1", "common short words");
    assert_eq!(keys(&store, "alphastart"), ["long.txt"]);
    assert_eq!(keys(&store, "omegaend"), ["long.txt"], "a word of the last part");
    // Every part is searched with the document's title (its file name here).
    assert_eq!(keys(&store, "title:long omegaend"), ["long.txt"]);
    assert!(keys(&store, "omegaend -title:long").is_empty());
    // Counted (the page is cut) as one document, whichever parts match.
    for q in ["omegaend", "alphastart OR omegaend"] {
        assert_eq!(
            store.search_page(&Search::new(q).limit(0)).unwrap().total,
            1,
            "{q}"
        );
    }
    assert_eq!(keys(&store, "midzzz"), ["long.txt"]);
    let both = keys(&store, "common");
    assert_eq!(both.len(), 2, "one hit per document, not per part: {both:?}");
    let check = store.check_search_index().unwrap();
    assert!(check.is_healthy(), "{check:?}");
    assert_eq!((check.accepted, check.rows), (2, 2));
    let live = part_states(&t);
    assert!(
        matches!(live.as_slice(), [(s, n)] if s == "live" && *n >= 2),
        "{live:?}"
    );

    store.enqueue(&NewDoc::new("long.txt", "v2")).unwrap();
    let claim = store.claim("w").unwrap().unwrap();
    assert!(finish(&store, claim, "now a short text").is_accepted());
    assert!(
        keys(&store, "omegaend").is_empty(),
        "the old last part is still found"
    );
    assert!(keys(&store, "alphastart").is_empty());
    assert_eq!(keys(&store, "common").len(), 1);
    store.purge_search_parts().unwrap();
    assert!(part_states(&t).is_empty(), "{:?}", part_states(&t));
    let conn = rusqlite::Connection::open(&t.location).unwrap();
    let pages: Vec<Vec<u8>> = conn
        .prepare("SELECT block FROM search_text_data")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(!pages.iter().any(|p| p.windows(8).any(|w| w == b"omegaend")));
    assert!(store.check_search_index().unwrap().is_healthy());
}

/// The further parts a worker staged are not searchable before its
/// completion is accepted, and never when it is refused: a worker that lost
/// its lease cannot stage any more, and what it staged before is retired by
/// the completion of the one that took over.
#[test]
fn sqlite_only_staged_parts_are_searchable_only_through_an_accepted_completion() {
    let t = TestDb::new(Backend::Sqlite);
    let (a, b) = (t.handle(10), t.handle(10));
    a.enqueue(&NewDoc::new("doc", "v1")).unwrap();
    let claim_a = a.claim("A").unwrap().unwrap();
    let staged = a
        .stage_search_parts(&claim_a, ("r/a", "sum-a"), None, None, &["stalepart words"])
        .unwrap();
    assert!(staged.is_accepted());
    assert!(keys(&a, "stalepart").is_empty(), "a staged part was searchable");
    t.clock.set(20);
    let claim_b = b.claim("B").unwrap().expect("B takes the expired lease");
    let late = a
        .stage_search_parts(&claim_a, ("r/a", "sum-a"), None, None, &["laterpart words"])
        .unwrap();
    assert!(!late.is_accepted(), "a worker that lost its lease staged a part");
    assert!(finish(&b, claim_b, "fresh words").is_accepted());
    let long_stale = format!("{} stalelong", "x ".repeat(700_000));
    assert!(!finish(&a, claim_a, &long_stale).is_accepted());
    for word in ["stalepart", "laterpart", "stalelong"] {
        assert!(keys(&b, word).is_empty(), "{word} is searchable");
    }
    assert_eq!(keys(&b, "fresh"), ["doc"]);
    b.purge_search_parts().unwrap();
    assert!(part_states(&t).is_empty(), "{:?}", part_states(&t));
    assert!(b.check_search_index().unwrap().is_healthy());
}

/// A reindex puts a long text back in parts; one that was interrupted after
/// staging leaves nothing twice when it runs again.
#[test]
fn sqlite_only_a_reindex_puts_a_long_text_back_once() {
    let t = TestDb::new(Backend::Sqlite);
    let store = t.handle(60_000);
    let long = format!("firstword {} lastword", "filler ".repeat(400_000));
    index(&store, "long.txt", "v1", &long);
    let hit = store.search("firstword", 10).unwrap().remove(0);
    let id: i64 = hit.result_path.split('/').nth(1).unwrap().parse().unwrap();
    let doc = IndexDoc {
        id,
        result_path: &hit.result_path,
        checksum: "sum",
        text: &long,
    };
    store.reset_search_index(Tokenizer::Unicode61).unwrap();
    // An interrupted reindex: further parts staged, the first never put in.
    store
        .reindex_stage_parts(&doc, &["lastword again"], true)
        .unwrap();
    assert_eq!(store.reindex_texts(&[doc]).unwrap(), 1);
    assert_eq!(keys(&store, "lastword"), ["long.txt"]);
    assert_eq!(
        keys(&store, "title:long lastword"),
        ["long.txt"],
        "the parts put back are titled"
    );
    assert!(
        keys(&store, "again").is_empty(),
        "the interrupted reindex's part is live"
    );
    let states = part_states(&t);
    assert!(states.iter().all(|(s, _)| s != "staged"), "{states:?}");
    store.purge_search_parts().unwrap();
    let live: i64 = part_states(&t).iter().map(|(_, n)| n).sum();
    assert_eq!(
        live,
        (long.len() as i64 - 1) / (1024 * 1024),
        "one row per further part"
    );
    assert!(store.check_search_index().unwrap().is_healthy());
}

/// While a long text is indexed, another worker's renewals get through
/// between its short transactions: the write lock is never held for the
/// whole text (issue 26, 7). Before, one transaction took the text whole
/// and a renewal waited for all of it. No clock: a renewal is seen to commit
/// after some of the text's parts were committed (staged) and before the
/// completion that makes them live, which one transaction for the whole text
/// cannot show.
#[test]
fn sqlite_only_renewals_get_through_while_a_long_text_is_indexed() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leasehold.db");
    let open = || Store::open(&path, StoreOptions::default().lease(Duration::from_secs(60))).unwrap();
    let (writer, renewer) = (open(), open());
    writer.enqueue(&NewDoc::new("long", "v1")).unwrap();
    writer.enqueue(&NewDoc::new("other", "v1")).unwrap();
    let long_claim = writer.claim("writer").unwrap().unwrap();
    let other = renewer.claim("renewer").unwrap().unwrap();
    let text = distinct_words("q", 3_000_000);
    let look = rusqlite::Connection::open(&path).unwrap();
    let staged = || -> i64 {
        look.query_row(
            "SELECT count(*) FROM search_parts WHERE state = 'staged'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let done = AtomicBool::new(false);
    let (renewals, between) = std::thread::scope(|s| {
        let indexing = s.spawn(|| {
            let out = finish(&writer, long_claim, &text);
            done.store(true, Ordering::SeqCst);
            out
        });
        let (mut renewals, mut between) = (0, 0);
        while !done.load(Ordering::SeqCst) {
            let before = staged();
            assert!(renewer.renew(&other.owner()).unwrap().is_accepted());
            renewals += 1;
            if before > 0 && staged() > 0 {
                between += 1;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(indexing.join().unwrap().is_accepted());
        (renewals, between)
    });
    assert!(
        between > 0,
        "no renewal of {renewals} got in between the long text's transactions"
    );
    assert_eq!(staged(), 0, "the accepted completion made every part live");
    assert_eq!(keys(&renewer, "qzzzz"), ["long"]);
}

/// A search past its time limit is stopped with a message saying so (SQLite's
/// progress handler), and the connections it used work on afterwards: the
/// limit does not stay on them.
#[test]
fn sqlite_only_a_search_past_its_time_limit_is_stopped_and_nothing_stays_stopped() {
    let t = TestDb::new(Backend::Sqlite);
    let store = t.handle(60_000);
    let docs: Vec<NewDoc> = (0..600).map(|i| NewDoc::new(format!("d{i}"), "v1")).collect();
    store.enqueue_many(&docs).unwrap();
    let claims = store.claim_batch("w", 600).unwrap();
    let texts: Vec<String> = (0..600).map(|i| format!("common words number {i}")).collect();
    let done: Vec<(Claim, Completion<'_>)> = claims
        .into_iter()
        .zip(&texts)
        .map(|(c, text)| (c, Completion::new("r/x", "s").index(text)))
        .collect();
    assert!(store.complete_many(done).unwrap().iter().all(|f| f.is_accepted()));
    for _ in 0..3 {
        let err = store
            .search_page(&Search::new("common").time_limit(std::time::Duration::from_nanos(1)))
            .unwrap_err();
        assert!(matches!(err, Error::SearchTimedOut { .. }), "{err:?}");
        assert!(!err.is_config(), "a slow query is not a usage error: {err}");
        assert!(err.to_string().contains("time limit"), "{err}");
        // A long read on the pool's connections: interrupted if a limit stayed.
        assert!(store.check_search_index().unwrap().is_healthy());
        assert_eq!(store.search("common", 1000).unwrap().len(), 600);
    }
    store.enqueue(&NewDoc::new("after", "v1")).unwrap();
}

/// A page of the index's data or content table damaged: the index is
/// removed without reading it and made again, every other row kept, and
/// the file passes SQLite's integrity check.
#[test]
fn sqlite_only_an_index_with_a_damaged_page_is_reset_and_the_rest_kept() {
    for table in ["search_text_data", "search_text_content"] {
        let t = common::TempStore::new();
        {
            let store = t.handle(1000);
            for i in 0..40 {
                index(
                    &store,
                    &format!("doc{i}"),
                    "v1",
                    &distinct_words(&format!("w{i}x"), 200),
                );
            }
            store.checkpoint().unwrap();
        }
        common::damage_a_page(&t.path, table);
        let store = t.handle(1000);
        let found = store.check_integrity_by_table(true).unwrap();
        assert!(!found.is_empty(), "{table}: the damage is seen");
        assert!(
            found.iter().all(|p| p.is_search_index()),
            "{table}: the index's: {found:?}"
        );
        store.reset_search_index(Tokenizer::Unicode61).unwrap();
        assert_eq!(
            store.check_integrity(true).unwrap(),
            Vec::<String>::new(),
            "{table}"
        );
        assert_eq!(
            store.counts().unwrap().total(),
            40,
            "{table}: every document kept"
        );
        let job = store.job_by_key("doc7").unwrap().unwrap();
        assert!(job.result_path.is_some());
        assert!(keys(&store, "w7xa").is_empty());
        let doc = IndexDoc {
            id: job.id,
            result_path: job.result_path.as_deref().unwrap(),
            checksum: job.checksum.as_deref().unwrap(),
            text: "back again",
        };
        assert_eq!(store.reindex_texts(&[doc]).unwrap(), 1);
        assert_eq!(keys(&store, "back"), ["doc7"], "{table}");
        index(&store, "later", "v1", "written after");
        assert_eq!(keys(&store, "written"), ["later"], "{table}");
        assert!(store.search_index_damage().unwrap().is_empty(), "{table}");
    }
}
