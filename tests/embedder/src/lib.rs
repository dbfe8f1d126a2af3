//! A program that uses rusqlite for its own tables and leasehold for its
//! queue, in one SQLite build. The test is the proof that the two link
//! together; it also shows the embedder's own connection reading leasehold's
//! store file (which leasehold keeps to itself: it refuses a file with
//! tables of another schema).

/// The SQLite this build links, e.g. `3.50.4`: bundled or the system's.
pub fn sqlite_version() -> &'static str {
    rusqlite::version()
}

#[cfg(test)]
mod tests {
    use leasehold::{NewDoc, Store, StoreOptions};

    #[test]
    fn the_embedders_rusqlite_and_leasehold_share_one_sqlite() {
        let dir = tempfile::tempdir().unwrap();

        // The embedder's own database, through its own rusqlite.
        let own = rusqlite::Connection::open(dir.path().join("app.db")).unwrap();
        own.execute_batch("CREATE TABLE notes(body TEXT NOT NULL)")
            .unwrap();
        own.execute("INSERT INTO notes(body) VALUES (?1)", ["kept"])
            .unwrap();

        // leasehold's queue beside it.
        let queue = dir.path().join("queue.db");
        let store = Store::open(&queue, StoreOptions::default()).unwrap();
        store.enqueue(&NewDoc::new("a.txt", "v1")).unwrap();
        let claim = store.claim("embedder").unwrap().expect("one document is queued");
        let outcome = store
            .complete(claim, leasehold::Completion::new("results/a.txt", "sum"))
            .unwrap();
        assert!(outcome.is_accepted());

        // The embedder's connection reads leasehold's file, in one SQLite build.
        own.execute("ATTACH DATABASE ?1 AS queue", [queue.to_str().unwrap()])
            .unwrap();
        let indexed: i64 = own
            .query_row(
                "SELECT count(*) FROM queue.jobs WHERE status = 'indexed'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(indexed, 1);
        let notes: i64 = own
            .query_row("SELECT count(*) FROM notes", [], |r| r.get(0))
            .unwrap();
        assert_eq!(notes, 1);
        assert!(!super::sqlite_version().is_empty());
    }
}
