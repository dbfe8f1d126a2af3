//! Opening: bad files give a typed error naming the path and stay byte-for-byte
//! unchanged; WAL is in force; the claim statements are index seeks.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::TempStore;
use leasehold::store::Access;
use leasehold::{Error, NewDoc, Store, StoreOptions, Tokenizer};
use rusqlite::OptionalExtension;

fn open_err(path: &Path) -> Error {
    Store::open(path, StoreOptions::default()).expect_err("open must fail")
}

/// A store with some content, closed and fully checkpointed into the main file.
fn populated_store(t: &TempStore, docs: usize) {
    let store = t.handle(10_000);
    let batch: Vec<_> = (0..docs)
        .map(|i| NewDoc::new(format!("docs/file-{i:06}.txt"), "v1"))
        .collect();
    store.enqueue_many(&batch).unwrap();
    for c in store.claim_batch("w", docs / 2).unwrap() {
        assert!(store
            .complete(
                c,
                leasehold::Completion::new("some/result/path.txt", "0123456789abcdef")
            )
            .unwrap()
            .is_accepted());
    }
    drop(store); // the checkpointer truncates the WAL on the way out
    assert!(
        !t.path.with_extension("db-wal").exists()
            || std::fs::metadata(t.path.with_extension("db-wal")).unwrap().len() == 0
    );
}

/// The schema's sections up to and including `version`: what a file made by
/// the release of that version holds.
fn schema_up_to(version: u32) -> &'static str {
    let schema = include_str!("../../schema.sql");
    let next = format!("-- version: {}", version + 1);
    &schema[..schema.find(&next).expect("a later section")]
}

fn assert_names_path(err: &Error, path: &Path) {
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "error does not name the path: {msg}"
    );
}

#[test]
fn wal_is_in_force_and_reopening_keeps_the_data() {
    let t = TempStore::new();
    populated_store(&t, 10);
    let store = t.handle(10_000);
    assert_eq!(store.journal_mode().unwrap(), "wal");
    assert_eq!(store.counts().unwrap().total(), 10);
    assert!(store.check_integrity(true).unwrap().is_empty());
}

#[test]
fn not_a_database_is_refused_and_untouched() {
    let t = TempStore::new();
    let junk = b"this is a text file, not a database at all\n".repeat(200);
    std::fs::write(&t.path, &junk).unwrap();
    let err = open_err(&t.path);
    assert!(matches!(err, Error::NotADatabase { .. }), "{err:?}");
    assert!(err.is_corrupt());
    assert_names_path(&err, &t.path);
    assert_eq!(std::fs::read(&t.path).unwrap(), junk);
}

#[test]
fn truncated_database_is_refused_and_untouched() {
    let t = TempStore::new();
    populated_store(&t, 3000);
    let full = std::fs::read(&t.path).unwrap();
    let cut = &full[..full.len() / 2];
    std::fs::write(&t.path, cut).unwrap();
    let err = open_err(&t.path);
    assert!(err.is_corrupt(), "{err:?}");
    assert_names_path(&err, &t.path);
    assert_eq!(std::fs::read(&t.path).unwrap(), cut);
}

#[test]
fn smashed_pages_are_refused_and_untouched() {
    let t = TempStore::new();
    populated_store(&t, 3000);
    let mut bytes = std::fs::read(&t.path).unwrap();
    // Overwrite everything after the first page: the schema is readable, the tables are not.
    for (i, b) in bytes.iter_mut().enumerate().skip(4096) {
        *b = (i % 251) as u8;
    }
    std::fs::write(&t.path, &bytes).unwrap();
    let err = open_err(&t.path);
    assert!(err.is_corrupt(), "{err:?}");
    assert_names_path(&err, &t.path);
    assert_eq!(std::fs::read(&t.path).unwrap(), bytes);
}

#[test]
fn read_only_database_is_refused_and_untouched() {
    let t = TempStore::new();
    populated_store(&t, 10);
    let before = std::fs::read(&t.path).unwrap();
    std::fs::set_permissions(&t.path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let err = open_err(&t.path);
    assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
    assert!(err.is_config());
    assert_names_path(&err, &t.path);
    assert_eq!(std::fs::read(&t.path).unwrap(), before);
}

#[test]
fn read_only_directory_is_refused() {
    let t = TempStore::new();
    let dir = t.dir.path().join("ro");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let path = dir.join("q.db");
    let err = open_err(&path);
    assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
    assert!(!path.exists(), "nothing created");
}

#[test]
fn newer_schema_is_refused_and_untouched() {
    let t = TempStore::new();
    populated_store(&t, 10);
    {
        let c = rusqlite::Connection::open(&t.path).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }
    let before = std::fs::read(&t.path).unwrap();
    let err = open_err(&t.path);
    match &err {
        Error::SchemaTooNew { found, supported, .. } => {
            assert_eq!((*found, *supported), (99, leasehold::store::schema_version()))
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    assert_names_path(&err, &t.path);
    assert_eq!(std::fs::read(&t.path).unwrap(), before);
}

#[test]
fn missing_directory_is_refused_and_nothing_is_created() {
    let t = TempStore::new();
    let path = t.dir.path().join("no/such/dir/q.db");
    let err = open_err(&path);
    assert!(matches!(err, Error::MissingDirectory { .. }), "{err:?}");
    assert!(err.to_string().contains("no/such/dir"), "{err}");
    assert!(!t.dir.path().join("no").exists());
}

#[test]
fn a_foreign_sqlite_database_is_refused_and_untouched() {
    let t = TempStore::new();
    {
        let c = rusqlite::Connection::open(&t.path).unwrap();
        c.execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
            .unwrap();
    }
    let before = std::fs::read(&t.path).unwrap();
    let err = open_err(&t.path);
    assert!(matches!(err, Error::ForeignSchema { .. }), "{err:?}");
    assert_eq!(std::fs::read(&t.path).unwrap(), before);
}

/// Each claim statement must be an index seek on its own partial index: a full
/// scan of `jobs` would step over every indexed row and every live lease.
#[test]
fn every_claim_statement_uses_its_partial_index() {
    let t = TempStore::new();
    populated_store(&t, 100);
    let c = rusqlite::Connection::open(&t.path).unwrap();
    // Planned as the store's connections plan: without looking at the
    // values bound (SQLite's query planner stability guarantee).
    c.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .unwrap();
    c.execute_batch("ANALYZE").unwrap();
    let expected = [
        "jobs_lease_expiry",
        "jobs_lease_granted",
        "jobs_retry_due",
        "jobs_discovered",
    ];
    assert_eq!(
        leasehold::testing::claim_candidate_queries().len(),
        expected.len()
    );
    for (sql, index) in leasehold::testing::claim_candidate_queries().iter().zip(expected) {
        let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let plan: Vec<String> = stmt
            .query_map(rusqlite::params![1_000i64, 32i64], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let joined = plan.join(" | ");
        assert!(joined.contains(index), "{sql}\nplan: {joined}");
        assert!(
            !plan
                .iter()
                .any(|l| l.trim() == "SCAN jobs" || l.contains("TEMP B-TREE")),
            "full scan or sort in plan: {joined}"
        );
    }
}

#[test]
fn several_openers_of_a_fresh_file_all_succeed() {
    // Creating the file switches it to WAL, which needs its exclusive lock:
    // openers that race for it must wait their turn, not fail.
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("fresh-{round}.db"));
        let openers: Vec<_> = (0..4)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || Store::open(&path, StoreOptions::default()).map(|_| ()))
            })
            .collect();
        for o in openers {
            if let Err(e) = o.join().unwrap() {
                panic!("round {round}: {e}");
            }
        }
    }
}

/// A version 3 file (before per-claim lease lengths and lost leases) with a
/// lease in flight is migrated in place: the row keeps its lease, which expires
/// as before (its length is unknown, so it is never judged granted ahead), and a
/// renewal records the length.
#[test]
fn a_version_3_file_with_a_lease_in_flight_migrates_to_version_4() {
    let t = TempStore::new();
    let v3 = schema_up_to(3);
    {
        let c = rusqlite::Connection::open(&t.path).unwrap();
        c.execute_batch(v3).unwrap();
        c.execute_batch(
            "INSERT INTO jobs (doc_key, status, owner_token, fence, lease_expires_at, attempts,
                               max_attempts, created_at, updated_at)
             VALUES ('old', 'extracting', 'tok', 1, 5000, 1, 5, 0, 0);
             PRAGMA user_version = 3;",
        )
        .unwrap();
    }
    t.clock.set(0);
    let store = t.handle(1_000);
    let v: i64 = rusqlite::Connection::open(&t.path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, leasehold::store::schema_version());
    let row = store.job_by_key("old").unwrap().unwrap();
    assert_eq!((row.lost_leases, row.lease_expires_at), (0, Some(5_000)));
    assert!(store.claim("w").unwrap().is_none(), "its lease still runs");
    t.clock.set(5_000);
    let c = store.claim("w").unwrap().expect("expired as before");
    assert_eq!((c.attempts, c.fence), (1, 2));
    assert_eq!(store.job(c.id).unwrap().unwrap().lost_leases, 1);
}

/// A history line's fields: at, event, token, fence, detail.
type Line = (i64, String, Option<String>, Option<i64>, Option<String>);

/// A version 16 file, whose history is clustered on (job_id, seq), is
/// migrated in place to the appended history: every line kept with its
/// fields and order, a document's next line numbered after its last, and the
/// new line written at the end of the table rather than beside its
/// document's earlier lines.
#[test]
fn a_version_16_history_is_moved_to_the_appended_form_with_every_line() {
    let t = TempStore::new();
    {
        let c = rusqlite::Connection::open(&t.path).unwrap();
        c.execute_batch(schema_up_to(16)).unwrap();
        c.execute_batch(
            "INSERT INTO jobs (id, doc_key, status, result_path, checksum, max_attempts, created_at, updated_at)
             VALUES (1, 'a.txt', 'discovered', NULL, NULL, 5, 0, 0),
                    (2, 'b.txt', 'indexed', 'r/2', 'sum', 5, 0, 0);
             INSERT INTO history (job_id, seq, at, event, token, fence, detail)
             VALUES (2, 1, 5, 'enqueued', NULL, NULL, 'version v1'),
                    (2, 2, 6, 'claimed', 'tok', 1, 'worker w'),
                    (2, 3, 7, 'completed', 'tok', 1, 'r/2'),
                    (1, 1, 10, 'enqueued', NULL, NULL, 'version v1');
             PRAGMA user_version = 16;",
        )
        .unwrap();
        let sql: String = c
            .query_row("SELECT sql FROM sqlite_master WHERE name = 'history'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert!(sql.contains("WITHOUT ROWID"), "the old form: {sql}");
    }
    t.clock.set(1_000);
    let store = t.handle(1_000);
    let lines = |id| -> Vec<Line> {
        store
            .history(leasehold::JobId(id))
            .unwrap()
            .into_iter()
            .map(|h| (h.at, h.event, h.token, h.fence, h.detail))
            .collect()
    };
    assert_eq!(
        lines(2),
        [
            (5, "enqueued".into(), None, None, Some("version v1".into())),
            (
                6,
                "claimed".into(),
                Some("tok".into()),
                Some(1),
                Some("worker w".into())
            ),
            (
                7,
                "completed".into(),
                Some("tok".into()),
                Some(1),
                Some("r/2".into())
            ),
        ]
    );
    let claimed = store.claim("w").unwrap().expect("a.txt is claimable");
    assert_eq!(claimed.id, leasehold::JobId(1));
    assert_eq!(
        lines(1).iter().map(|l| l.1.as_str()).collect::<Vec<_>>(),
        ["enqueued", "claimed"]
    );

    let c = rusqlite::Connection::open(&t.path).unwrap();
    let sql: String = c
        .query_row("SELECT sql FROM sqlite_master WHERE name = 'history'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(!sql.contains("WITHOUT ROWID"), "{sql}");
    // The claim's line is the table's last row, where in the key's order it
    // would come before document 2's lines.
    let last: (i64, i64, String) = c
        .query_row(
            "SELECT job_id, seq, event FROM history ORDER BY rowid DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(last, (1, 2, "claimed".into()));
    let duplicate = c.execute(
        "INSERT INTO history (job_id, seq, at, event) VALUES (1, 2, 0, 'claimed')",
        [],
    );
    assert!(duplicate.is_err(), "(job_id, seq) stays unique");
}

/// The one value `sql` reads from the file at `path`, if it reads a row.
fn file_value<T: rusqlite::types::FromSql>(path: &Path, sql: &str) -> Option<T> {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .optional()
        .unwrap()
}

/// FTS5's `automerge` setting of the word index: how many segments a level
/// holds before commits merge them (`None`: FTS5's default, 4).
fn automerge(path: &Path) -> Option<i64> {
    file_value(path, "SELECT v FROM search_text_config WHERE k = 'automerge'")
}

/// The word index merges a level of 8 segments, not of 4: in a new store, in
/// a store whose table was made before this setting once opened, and in an
/// index made again with another tokenizer.
#[test]
fn the_word_index_merges_eight_segments_at_a_time() {
    let t = TempStore::new();
    drop(t.handle(1_000));
    assert_eq!(automerge(&t.path), Some(8), "a new store");

    // A table made before the setting has no `automerge` row: this one's
    // is taken away.
    let old = TempStore::new();
    drop(old.handle(1_000));
    rusqlite::Connection::open(&old.path)
        .unwrap()
        .execute("DELETE FROM search_text_config WHERE k = 'automerge'", [])
        .unwrap();
    assert_eq!(automerge(&old.path), None, "FTS5's default before the open");
    let store = old.handle(1_000);
    assert_eq!(automerge(&old.path), Some(8), "a table made before the setting");
    store.reset_search_index(Tokenizer::Trigram).unwrap();
    assert_eq!(automerge(&old.path), Some(8), "an index made again");
}

/// A version 11 file (before titles) is migrated in place: its search
/// index is remade with a title column and the tokenizer it was made with,
/// every row kept (a long text's further part too), each document titled by
/// its file name; its text is found as before.
#[test]
fn a_version_11_index_gets_titles_and_keeps_its_tokenizer_and_rows() {
    let v11 = schema_up_to(11);
    for (tokenizer, spec) in [
        (Tokenizer::Unicode61, "unicode61 remove_diacritics 2"),
        (Tokenizer::Trigram, "trigram"),
    ] {
        let t = TempStore::new();
        {
            let c = rusqlite::Connection::open(&t.path).unwrap();
            c.execute_batch(v11).unwrap();
            c.execute_batch(&format!(
                "DROP TABLE search_text;
                 CREATE VIRTUAL TABLE search_text USING fts5 (body, path UNINDEXED, checksum UNINDEXED, tokenize = '{spec}');
                 INSERT INTO meta (name, value) VALUES ('search_tokenizer', '{spec}');
                 INSERT INTO jobs (id, doc_key, status, result_path, checksum, max_attempts, created_at, updated_at)
                 VALUES (7, 'notes/heron-sightings.txt', 'indexed', 'r/7', 'sum', 5, 0, 0);
                 INSERT INTO search_text (rowid, body, path, checksum)
                 VALUES (7, 'a cobalt heron by the weir', 'r/7', 'sum'),
                        (281474976710656, 'the second part mentions kingfishers', 'r/7', 'sum');
                 INSERT INTO search_parts (rowid, doc, tag, state) VALUES (281474976710656, 7, 'sum', 'live');
                 PRAGMA user_version = 11;"
            ))
            .unwrap();
        }
        let store = t.handle(1_000);
        assert_eq!(store.search_tokenizer().unwrap(), tokenizer);
        let keys =
            |q: &str| -> Vec<String> { store.search(q, 10).unwrap().into_iter().map(|h| h.key).collect() };
        assert_eq!(keys("cobalt"), ["notes/heron-sightings.txt"], "{spec}");
        assert_eq!(keys("kingfishers"), ["notes/heron-sightings.txt"], "{spec}");
        assert_eq!(keys("title:sightings"), ["notes/heron-sightings.txt"], "{spec}");
        assert!(keys("title:cobalt").is_empty(), "{spec}");
        let check = store.check_search_index().unwrap();
        assert_eq!(
            (check.rows, check.missing, check.accepted),
            (1, 0, 1),
            "{check:?}"
        );
        assert_eq!(
            store
                .job_by_key("notes/heron-sightings.txt")
                .unwrap()
                .unwrap()
                .title,
            None
        );
    }
}

/// A word index made before it dropped its copy of the texts (version 14:
/// titled, prefix indexes of 2 and 3 characters, the texts kept) is moved at
/// the next read-write open to the form that keeps none, every row kept (a
/// long text's further part too) and found as before, the path and checksum
/// still read back; its snippets are then cut from the result in the mirror,
/// for a further part from that part of the file. A trigram index keeps its
/// texts (its short terms are matched by LIKE over them).
#[test]
fn a_word_index_with_its_texts_is_moved_to_one_without_them() {
    let t = TempStore::new();
    let mirror = leasehold::mirror::Mirror::open(t.dir.path().join("mirror")).unwrap();
    let first = format!("a cobalt heron by the weir {}", "alpha ".repeat(180_000));
    let cut = first.as_bytes()[..1 << 20]
        .iter()
        .rposition(|b| *b == b' ')
        .unwrap()
        + 1;
    let text = format!("{}the second part mentions kingfishers", &first[..cut]);
    let (part0, part1) = text.split_at(cut);
    std::fs::create_dir_all(mirror.root().join("r")).unwrap();
    std::fs::write(mirror.root().join("r/7.txt"), &text).unwrap();
    drop(t.handle(1_000));
    {
        let c = rusqlite::Connection::open(&t.path).unwrap();
        c.execute_batch(
            "DROP TABLE search_text;
             DROP TABLE IF EXISTS search_text_content;
             CREATE VIRTUAL TABLE search_text USING fts5 (
                 body, title, author, path UNINDEXED, checksum UNINDEXED,
                 prefix = '2 3', tokenize = 'unicode61 remove_diacritics 2');
             INSERT INTO jobs (id, doc_key, status, result_path, checksum, max_attempts, created_at, updated_at)
             VALUES (7, 'notes/heron-sightings.txt', 'indexed', 'r/7.txt', 'sum', 5, 0, 0);
             INSERT INTO search_parts (rowid, doc, tag, state) VALUES (281474976710656, 7, 'sum', 'live');",
        )
        .unwrap();
        c.execute(
            "INSERT INTO search_text (rowid, body, title, path, checksum)
             VALUES (7, ?1, 'heron-sightings.txt', 'r/7.txt', 'sum'),
                    (281474976710656, ?2, 'heron-sightings.txt', 'r/7.txt', 'sum')",
            [part0, part1],
        )
        .unwrap();
    }
    let store = t.handle(1_000);
    let sql = index_definition(&t.path);
    let c = rusqlite::Connection::open(&t.path).unwrap();
    assert!(
        sql.contains("content = ''") && sql.contains("prefix = '2',"),
        "{sql}"
    );
    let stored: Option<String> = c
        .query_row("SELECT body FROM search_text WHERE rowid = 7", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, None, "no copy of the text is kept");
    let found = |q: &str| {
        store
            .search_page(&leasehold::Search::new(q).mirror(&mirror))
            .unwrap()
            .hits
    };
    for (query, marked) in [
        ("cobalt", "[cobalt]"),
        ("kingfishers", "[kingfishers]"),
        ("weir", "[weir]"),
    ] {
        let hits = found(query);
        assert_eq!(hits.len(), 1, "{query}");
        assert_eq!(
            (hits[0].key.as_str(), hits[0].result_path.as_str()),
            ("notes/heron-sightings.txt", "r/7.txt")
        );
        let snippet = hits[0].snippet.marked("[", "]");
        assert!(snippet.contains(marked), "{query}: {snippet:?}");
    }
    assert!(found("title:sightings").len() == 1 && found("title:cobalt").is_empty());
    // An expression in FTS5's own syntax that names a column the snippet's
    // table must know too.
    let fts = leasehold::Search::new("kingfishers OR path:nowhere").syntax(leasehold::QuerySyntax::Fts5);
    let hits = store.search_page(&fts.mirror(&mirror)).unwrap().hits;
    assert!(
        hits[0].snippet.marked("[", "]").contains("[kingfishers]"),
        "{:?}",
        hits[0].snippet
    );
    let check = store.check_search_index().unwrap();
    assert_eq!(
        (check.rows, check.missing, check.accepted),
        (1, 0, 1),
        "{check:?}"
    );
    assert!(check.is_healthy(), "{check:?}");
    // Without the mirror the hit is still found, without a snippet.
    assert!(store.search("kingfishers", 10).unwrap()[0]
        .snippet
        .text()
        .is_empty());

    let trigram = TempStore::new();
    drop(
        Store::open(
            &trigram.path,
            trigram.options(1_000).tokenizer(Tokenizer::Trigram),
        )
        .unwrap(),
    );
    let sql = index_definition(&trigram.path);
    assert!(!sql.contains("content"), "{sql}");
}

/// The search index's table definition in the file at `path`.
fn index_definition(path: &Path) -> String {
    file_value(path, "SELECT sql FROM sqlite_master WHERE name = 'search_text'").expect("the index's table")
}

/// A version 11 file whose index has a damaged page still opens: the index
/// cannot be copied into the titled table, so it is made again, empty, and
/// every document is kept for a reindex to index again.
#[test]
fn a_version_11_file_with_a_damaged_index_opens_with_an_empty_one() {
    let v11 = schema_up_to(11);
    let t = TempStore::new();
    {
        let c = rusqlite::Connection::open(&t.path).unwrap();
        c.execute_batch(v11).unwrap();
        for i in 0..40 {
            let words: Vec<String> = (0..200).map(|w| format!("w{i}x{w}")).collect();
            c.execute(
                "INSERT INTO jobs (id, doc_key, status, result_path, checksum, max_attempts, created_at, updated_at)
                 VALUES (?1, 'doc' || ?1, 'indexed', 'r/' || ?1, 'sum', 5, 0, 0)",
                [i + 1],
            )
            .unwrap();
            c.execute(
                "INSERT INTO search_text (rowid, body, path, checksum) VALUES (?1, ?2, 'r/' || ?1, 'sum')",
                rusqlite::params![i + 1, words.join(" ")],
            )
            .unwrap();
        }
        c.execute_batch("PRAGMA user_version = 11").unwrap();
    }
    common::damage_a_page(&t.path, "search_text_content");
    let store = t.handle(1_000);
    assert_eq!(store.counts().unwrap().total(), 40, "every document kept");
    let check = store.check_search_index().unwrap();
    assert_eq!((check.rows, check.missing), (0, 40), "{check:?}");
    assert!(store.search("w7x3", 10).unwrap().is_empty());
}

/// A read-only open reads what is there, refuses every write with a typed
/// error, and leaves the file as it was; one of a missing file creates none.
#[test]
fn a_read_only_open_reads_and_refuses_every_write() {
    let t = TempStore::new();
    populated_store(&t, 10);
    let before = std::fs::read(&t.path).unwrap();
    let store = Store::open(&t.path, t.options(10_000).read_only(true)).unwrap();
    assert_eq!(store.access(), Access::ReadOnly);
    assert_eq!(store.counts().unwrap().total(), 10);
    assert_eq!(store.counts().unwrap().indexed, 5);
    let refused = [
        store.enqueue(&NewDoc::new("new.txt", "v1")).map(|_| ()),
        store.claim("w").map(|_| ()),
        store.set_meta("k", "v"),
        store.prune_search_index().map(|_| ()),
    ];
    for r in refused {
        let err = r.expect_err("a write must fail");
        assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
        assert_names_path(&err, &t.path);
    }
    drop(store);
    assert_eq!(std::fs::read(&t.path).unwrap(), before);

    let missing = t.dir.path().join("missing.db");
    let err = Store::open(&missing, StoreOptions::default().read_only(true)).unwrap_err();
    assert!(matches!(err, Error::NoStore { .. }), "{err:?}");
    assert!(!missing.exists(), "nothing created");
}

/// SQLite takes a read-only open as a URI: a path with `?`, `#`, `%` or a
/// space in it still names the file it names.
#[test]
fn a_read_only_open_takes_any_path() {
    let t = TempStore::new();
    let dir = t.dir.path().join("a?b#c %41 ü");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("leasehold.db");
    let store = Store::open(&path, t.options(10_000)).unwrap();
    store.enqueue(&NewDoc::new("a.txt", "v1")).unwrap();
    drop(store);
    let store = Store::open(&path, t.options(10_000).read_only(true)).unwrap();
    assert_eq!(store.counts().unwrap().total(), 1);
    assert_eq!(store.path(), path.as_path());
}

/// When the last handle's drop returns, every connection is closed, so the
/// WAL is checkpointed and removed. A read takes the pool's idle connection
/// and r2d2 opens another in the background to replace it; that open used to
/// keep the pool, and the WAL, alive after the drop had returned.
#[test]
fn the_last_drop_closes_every_connection() {
    let t = TempStore::new();
    let mut wal = t.path.clone().into_os_string();
    wal.push("-wal");
    let wal = std::path::PathBuf::from(wal);
    for round in 0..100 {
        // No checkpoint thread: its last checkpoint, on the way out, would
        // give the background open time to finish before the pool goes.
        let store = Store::open(&t.path, t.options(10_000).checkpoint_every(None)).unwrap();
        store
            .enqueue(&NewDoc::new(format!("docs/{round}.txt"), "v1"))
            .unwrap();
        store.counts().unwrap();
        drop(store);
        assert!(
            !wal.exists(),
            "round {round}: {} outlived the last handle",
            wal.display()
        );
    }
}
