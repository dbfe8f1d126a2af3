//! The PostgreSQL edition behind the store's facade: `Store::open` picks it by
//! the location's scheme, and what belongs to SQLite's file is refused by
//! name (DESIGN §12). The rules themselves are the conformance suite's
//! (`store_fencing`, `store_leases`, `store_race`, `model`, `gate_store`,
//! `auth_gate`, `auth_more`, `gate_pool`), run on both engines.

use crate::common;

use common::{Backend, TestDb};
use leasehold::{Error, NewDoc};

#[test]
fn a_postgres_url_opens_the_postgres_engine_and_names_it_without_its_password() {
    let t = TestDb::new(Backend::Postgres);
    let store = t.handle(1_000);
    assert!(store.locks_rows() && !store.checks_pages());
    let name = store.path().display().to_string();
    assert!(name.starts_with("postgres://"), "{name}");
    let sqlite = TestDb::new(Backend::Sqlite).handle(1_000);
    assert!(!sqlite.locks_rows() && sqlite.checks_pages());
}

#[test]
fn what_belongs_to_the_sqlite_file_is_refused_by_name() {
    let t = TestDb::new(Backend::Postgres);
    let store = t.handle(1_000);
    for err in [store.journal_mode().err(), store.check_integrity(false).err()] {
        assert!(matches!(err, Some(Error::SqliteOnly { .. })), "{err:?}");
    }
}

/// A completion writes its history line in the statement that accepts it,
/// and reads the next seq in that statement's snapshot. When it waited for
/// the row's lock behind a transaction that wrote a line of the same
/// document (as a stale owner's refusal does), the seq it read is taken: the
/// statement is run again, the result is accepted, and the document's lines
/// stay 1, 2, 3… with none lost.
#[test]
fn a_completion_that_waited_behind_another_history_line_is_run_again() {
    let t = TestDb::new(Backend::Postgres);
    let store = t.handle(600_000);
    let id = store.enqueue(&NewDoc::new("doc", "v1")).unwrap().id();
    let claim = store.claim("owner").unwrap().expect("claimable");
    let mut other = postgres::Client::connect(&t.location, postgres::NoTls).unwrap();
    let mut tx = other.transaction().unwrap();
    tx.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", &[&id.0])
        .unwrap();
    tx.execute(
        "INSERT INTO history (job_id, seq, at, event)
         VALUES ($1, (SELECT max(seq) + 1 FROM history WHERE job_id = $1), 0, 'complete_rejected')",
        &[&id.0],
    )
    .unwrap();
    let owner = {
        let store = store.clone();
        std::thread::spawn(move || store.complete(claim, leasehold::Completion::new("r", "s")))
    };
    wait_for_a_lock_waiter(&t.location);
    tx.commit().unwrap();
    let done = owner.join().unwrap().expect("accepted, not an error");
    assert!(done.is_accepted(), "{done:?}");
    let lines = other
        .query(
            "SELECT seq, event FROM history WHERE job_id = $1 ORDER BY seq",
            &[&id.0],
        )
        .unwrap();
    let seqs: Vec<i64> = lines.iter().map(|r| r.get(0)).collect();
    let events: Vec<String> = lines.iter().map(|r| r.get(1)).collect();
    assert_eq!(seqs, (1..=lines.len() as i64).collect::<Vec<_>>(), "{events:?}");
    assert_eq!(events[events.len() - 2..], ["complete_rejected", "completed"]);
}

/// Until a session of this database waits for a lock (bounded: a test that
/// never gets there fails instead of hanging).
fn wait_for_a_lock_waiter(url: &str) {
    let mut watcher = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .unwrap()
            .get(0);
        if waiting > 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "the completion never waited for the row"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
