//! The PostgreSQL edition's schema on a real server (tests/common/pg.rs):
//! migrations apply once, in order, under concurrency; a newer database is
//! refused; `schema.pg.sql` is the twin of `schema.sql`; no error shows a
//! password.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Barrier;

use common::pg;
use leasehold::store::pg_schema_version as schema_version;
use leasehold::{Error, Status, Store, StoreOptions};

fn open(url: &str) -> leasehold::Result<Store> {
    Store::open(url, StoreOptions::default().pool_size(2))
}

fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).expect("connect to the test database")
}

/// The tables of the current schema and their columns, with whether each may be NULL.
fn pg_columns(url: &str) -> BTreeMap<String, BTreeMap<String, bool>> {
    let mut out: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    let rows = client(url)
        .query(
            "SELECT table_name::text, column_name::text, is_nullable = 'YES'
               FROM information_schema.columns WHERE table_schema = current_schema()",
            &[],
        )
        .expect("read information_schema");
    for row in rows {
        out.entry(row.get(0)).or_default().insert(row.get(1), row.get(2));
    }
    out
}

#[test]
fn the_schema_applies_on_an_empty_database_and_a_second_open_applies_nothing() {
    let url = pg::server().fresh_database();
    let store = open(&url).expect("first open");
    assert_eq!(store.applied_version().unwrap(), schema_version());
    assert!(schema_version() >= 4);
    let tables = pg_columns(&url);
    for table in [
        "jobs",
        "history",
        "meta",
        "accounts",
        "outbox",
        "outbox_totals",
        "leasehold_schema",
    ] {
        assert!(tables.contains_key(table), "{table} missing: {:?}", tables.keys());
    }
    // A section applied again would rewrite the version row (a new xmin) or
    // fail on a table that exists.
    let xmin = |url: &str| -> String {
        client(url)
            .query_one("SELECT xmin::text FROM leasehold_schema", &[])
            .unwrap()
            .get(0)
    };
    let before = xmin(&url);
    drop(store);
    let again = open(&url).expect("second open");
    assert_eq!(again.applied_version().unwrap(), schema_version());
    assert_eq!(xmin(&url), before, "the second open wrote the version row");
    assert_eq!(pg_columns(&url), tables);
    let totals: i64 = client(&url)
        .query_one("SELECT count(*) FROM outbox_totals", &[])
        .unwrap()
        .get(0);
    assert_eq!(totals, 1, "the one totals row");
}

/// A fresh database made by `schema.pg.sql`'s sections up to `version` and
/// recorded at it, then `rows` run in it; its URL and a client of it.
fn database_at(version: i64, rows: &str) -> (String, postgres::Client) {
    let url = pg::server().fresh_database();
    let schema = include_str!("../../schema.pg.sql");
    let next = format!("-- version: {}", version + 1);
    let sections = &schema[..schema.find(&next).expect("a later section")];
    let mut c = client(&url);
    c.batch_execute(&format!(
        "CREATE TABLE leasehold_schema (id INTEGER PRIMARY KEY CHECK (id = 1), version BIGINT NOT NULL);
         {sections}
         INSERT INTO leasehold_schema (id, version) VALUES (1, {version});
         {rows}"
    ))
    .unwrap_or_else(|e| panic!("a version {version} database: {e}"));
    (url, c)
}

/// A version 11 database (before titles) with an indexed document is
/// migrated in place: its rows are titled by their file names, which
/// `title:` finds word by word, and its text is found as before.
#[test]
fn a_version_11_index_gets_titles_from_file_names() {
    let (url, _) = database_at(
        11,
        "INSERT INTO jobs (id, doc_key, status, result_path, checksum, max_attempts, created_at, updated_at)
         VALUES (7, 'notes/heron-sightings.txt', 'indexed', 'r/7', 'sum', 5, 0, 0);
         INSERT INTO search_text (job_id, body, path, checksum) VALUES (7, 'a cobalt heron by the weir', 'r/7', 'sum');",
    );
    let store = open(&url).expect("the open migrates");
    assert_eq!(store.applied_version().unwrap(), schema_version());
    let keys = |q: &str| -> Vec<String> { store.search(q, 10).unwrap().into_iter().map(|h| h.key).collect() };
    assert_eq!(keys("cobalt"), ["notes/heron-sightings.txt"]);
    assert_eq!(keys("title:sightings"), ["notes/heron-sightings.txt"]);
    assert_eq!(
        keys("title:\"heron-sightings.txt\""),
        ["notes/heron-sightings.txt"]
    );
    assert!(keys("title:cobalt").is_empty());
}

/// Foreign keys of the history table.
fn history_foreign_keys(c: &mut postgres::Client) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = 'history'::regclass AND contype = 'f'",
        &[],
    )
    .expect("read pg_constraint")
    .get(0)
}

#[test]
fn a_version_15_history_loses_its_foreign_key_and_keeps_its_lines() {
    let (url, mut c) = database_at(
        15,
        "INSERT INTO jobs (id, doc_key, version, status, max_attempts, created_at, updated_at)
         VALUES (7, 'notes/heron-sightings.txt', 'v1', 'discovered', 5, 0, 0);
         INSERT INTO history (job_id, seq, at, event) VALUES (7, 1, 0, 'enqueued');",
    );
    assert_eq!(history_foreign_keys(&mut c), 1);
    let store = open(&url).expect("the open migrates");
    assert_eq!(store.applied_version().unwrap(), schema_version());
    assert_eq!(history_foreign_keys(&mut c), 0);
    // The line stays, and the claim's and the completion's follow it.
    let claim = store.claim("w").unwrap().expect("the queued document");
    assert!(store
        .complete(claim, leasehold::Completion::new("r/7", "sum"))
        .unwrap()
        .is_accepted());
    let events: Vec<String> = c
        .query("SELECT event FROM history WHERE job_id = 7 ORDER BY seq", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(events, ["enqueued", "claimed", "completed"]);
}

#[test]
fn eight_openers_at_once_all_succeed_and_migrate_once() {
    let url = pg::server().fresh_database();
    let start = Barrier::new(8);
    let results: Vec<leasehold::Result<i64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    open(&url).and_then(|store| store.applied_version())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("opener thread"))
            .collect()
    });
    for result in results {
        match result {
            Ok(version) => assert_eq!(version, schema_version()),
            Err(e) => panic!("an opener failed: {e}"),
        }
    }
    let rows: i64 = client(&url)
        .query_one("SELECT count(*) FROM leasehold_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

#[test]
fn a_database_of_a_newer_leasehold_is_refused_with_the_typed_error() {
    let newer = schema_version() + 1;
    // Migrated, then marked newer.
    let url = pg::server().fresh_database();
    drop(open(&url).expect("open"));
    client(&url)
        .execute("UPDATE leasehold_schema SET version = $1", &[&newer])
        .unwrap();
    assert_too_new(open(&url).err(), newer);

    // Marked newer before this build ever saw it: refused before any section runs.
    let url = pg::server().fresh_database();
    client(&url)
        .batch_execute(&format!(
            "CREATE TABLE leasehold_schema (id SMALLINT PRIMARY KEY, version BIGINT NOT NULL);
             INSERT INTO leasehold_schema VALUES (1, {newer});"
        ))
        .unwrap();
    assert_too_new(open(&url).err(), newer);
    assert!(
        !pg_columns(&url).contains_key("jobs"),
        "a section ran on a newer database"
    );
}

fn assert_too_new(err: Option<Error>, newer: i64) {
    match err {
        Some(Error::SchemaTooNew { found, supported, .. }) => {
            assert_eq!(found, newer);
            assert_eq!(supported, schema_version());
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

/// SQLite's tables and columns after `schema.sql`, with whether each may be
/// NULL, read with `pragma table_info` from a file the Store created. The
/// search index is left out: it is an FTS5 virtual table (with FTS5's own
/// tables behind it) on SQLite and a table with a tsvector on PostgreSQL.
fn sqlite_columns() -> BTreeMap<String, BTreeMap<String, bool>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leasehold.db");
    drop(Store::open(&path, StoreOptions::default()).expect("open the SQLite store"));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let tables: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
             AND name NOT LIKE 'search%'",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut out = BTreeMap::new();
    for table in tables {
        let columns: BTreeMap<String, bool> = conn
            .prepare("SELECT name, \"notnull\" = 0 AND pk = 0 FROM pragma_table_info(?1)")
            .unwrap()
            .query_map([&table], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        out.insert(table, columns);
    }
    out
}

#[test]
fn every_sqlite_table_and_column_exists_in_postgres_alike() {
    let sqlite = sqlite_columns();
    assert!(sqlite.contains_key("jobs") && sqlite["jobs"].contains_key("lost_leases"));
    let url = pg::server().fresh_database();
    drop(open(&url).expect("open"));
    let mut pg = pg_columns(&url);
    let search = pg.remove("search_text").expect("the search index's table");
    assert!(
        search.contains_key("tsv") && search.contains_key("body"),
        "{search:?}"
    );
    for (table, columns) in &sqlite {
        let Some(pg_table) = pg.get(table) else {
            panic!("table {table} is missing in PostgreSQL");
        };
        for (column, nullable) in columns {
            match pg_table.get(column) {
                None => panic!("column {table}.{column} is missing in PostgreSQL"),
                Some(pg_nullable) => assert_eq!(
                    pg_nullable, nullable,
                    "{table}.{column}: nullable in SQLite {nullable}, in PostgreSQL {pg_nullable}"
                ),
            }
        }
        assert_eq!(
            pg_table.len(),
            columns.len(),
            "{table} has other columns in PostgreSQL: {pg_table:?}"
        );
    }
}

/// The search index is each engine's own (an FTS5 table and the parts of
/// long texts on SQLite, a tsvector on PostgreSQL): its indexes are left out.
#[test]
fn every_sqlite_index_exists_in_postgres_and_is_partial_alike() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leasehold.db");
    drop(Store::open(&path, StoreOptions::default()).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let sqlite: BTreeMap<String, bool> = conn
        .prepare(
            "SELECT name, sql LIKE '% WHERE %' FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL
               AND tbl_name NOT LIKE 'search%'",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(sqlite.len() >= 5, "{sqlite:?}");
    let url = pg::server().fresh_database();
    drop(open(&url).expect("open"));
    let pg: BTreeMap<String, bool> = client(&url)
        .query(
            "SELECT indexname::text, indexdef LIKE '% WHERE %' FROM pg_indexes
              WHERE schemaname = current_schema()",
            &[],
        )
        .unwrap()
        .into_iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (name, partial) in &sqlite {
        assert_eq!(
            pg.get(name),
            Some(partial),
            "index {name} (partial: {partial}) in PostgreSQL: {pg:?}"
        );
    }
}

/// Values tried in each CHECKed state column: the real states and near misses.
fn candidates() -> Vec<String> {
    let mut out: Vec<String> = Status::ALL.iter().map(|s| s.as_str().to_string()).collect();
    out.extend(
        [
            "open",
            "locked",
            "bogus",
            "DEAD",
            "Discovered",
            "",
            " dead",
            "locked ",
        ]
        .into_iter()
        .map(String::from),
    );
    out
}

/// Inserts one row per candidate state that satisfies every other CHECK for
/// that state, so only the list of states decides. `{p}` is where the engine's
/// placeholder for the state goes.
const JOB_ROW: &str = "INSERT INTO jobs (doc_key, status, owner_token, lease_expires_at, retry_at,
        result_path, checksum, max_attempts, created_at, updated_at)
    VALUES ('k' || {p}, {p}, CASE WHEN {p} = 'extracting' THEN 't' END,
        CASE WHEN {p} = 'extracting' THEN 1 END, 1, 'r', 'c', 1, 0, 0)";
const ACCOUNT_ROW: &str = "INSERT INTO accounts (name, state, locked_until, updated_at)
    VALUES ('a' || {p}, {p}, CASE WHEN {p} = 'locked' THEN 1 END, 0)";

fn accepted_sqlite(conn: &rusqlite::Connection, template: &str) -> BTreeSet<String> {
    let sql = template.replace("{p}", "CAST(?1 AS TEXT)");
    candidates()
        .into_iter()
        .filter(|c| conn.execute(&sql, [c]).is_ok())
        .collect()
}

fn accepted_pg(client: &mut postgres::Client, template: &str) -> BTreeSet<String> {
    let sql = template.replace("{p}", "$1::text");
    candidates()
        .into_iter()
        .filter(|c| client.execute(sql.as_str(), &[c]).is_ok())
        .collect()
}

#[test]
fn the_checked_states_are_the_same_sets_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leasehold.db");
    drop(Store::open(&path, StoreOptions::default()).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let url = pg::server().fresh_database();
    drop(open(&url).expect("open"));
    let mut pg = client(&url);

    let jobs = accepted_sqlite(&conn, JOB_ROW);
    let states: BTreeSet<String> = Status::ALL.iter().map(|s| s.as_str().to_string()).collect();
    assert_eq!(jobs, states, "SQLite's jobs.status");
    assert_eq!(accepted_pg(&mut pg, JOB_ROW), jobs, "PostgreSQL's jobs.status");

    let accounts = accepted_sqlite(&conn, ACCOUNT_ROW);
    assert_eq!(
        accounts,
        BTreeSet::from(["open".to_string(), "locked".to_string()])
    );
    assert_eq!(
        accepted_pg(&mut pg, ACCOUNT_ROW),
        accounts,
        "PostgreSQL's accounts.state"
    );
}

#[test]
fn a_wrong_password_is_refused_and_never_shown() {
    let server = pg::server();
    let role = server.create_role("right-horse-battery");
    let password = "wrong-staple-9731";
    let url = format!(
        "postgres://{role}:{password}@127.0.0.1:{}/postgres",
        server.port()
    );
    let err = open(&url).expect_err("a wrong password must be refused");
    assert!(matches!(err, Error::PostgresConnect { .. }), "{err:?}");
    assert_no_password(&err, password);
    let text = err.to_string();
    assert!(
        text.contains(&role) && text.contains("127.0.0.1"),
        "names the login: {text}"
    );

    // Nobody listens there: the error names the address, still without the password.
    let closed = pg::free_port();
    let url = format!("postgres://{role}:{password}@127.0.0.1:{closed}/postgres?connect_timeout=5");
    let err = open(&url).expect_err("nobody listens");
    assert!(matches!(err, Error::PostgresConnect { .. }), "{err:?}");
    assert_no_password(&err, password);
    assert!(err.to_string().contains(&format!("127.0.0.1:{closed}")), "{err}");
}

/// Neither the message, nor the Debug form, nor any error in its chain holds the password.
fn assert_no_password(err: &Error, password: &str) {
    let mut texts = vec![err.to_string(), format!("{err:?}")];
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        texts.push(e.to_string());
        texts.push(format!("{e:?}"));
        source = e.source();
    }
    for text in texts {
        assert!(!text.contains(password), "the password shows in: {text}");
        assert!(!text.contains("staple"), "part of the password shows in: {text}");
    }
}
