//! `leasehold doctor`: say plainly what is wrong with a data directory.
//!
//! Checks, each reported as one line naming the thing (a path, a document key):
//! - the database and the mirror are on local file systems (statfs magic);
//! - the store opens; a SQLite file passes the full `integrity_check` and has
//!   WAL in force (a PostgreSQL database keeps its own files; its rows are
//!   checked like SQLite's);
//! - leases: no two rows share a key or an owner token, every `extracting` row
//!   has a token and a lease, no other row has a token;
//! - every `indexed` row's result file exists and its SHA-256 matches;
//! - the search index holds exactly the accepted texts: every document with
//!   an accepted result is in it (searchable) with that result's text, and
//!   nothing else is (`leasehold reindex` mends it);
//! - the mirror holds no generation, temp or probe file that `gc` would remove,
//!   and no document directory the database does not know (a document whose
//!   lock another process holds is skipped, with a note).
//!
//! Unlike the other commands, doctor never creates anything: a missing database
//! or mirror is a problem to report, not something to set up, and the mirror's
//! writability is asked of the kernel (`access(2)`) instead of tried with a
//! probe file. Every failure,
//! including a store that cannot be opened at all, becomes a problem line (exit
//! 1), so a damaged data directory gets a diagnosis rather than a refusal.
//!
//! The row checks' SQL lives in the store (`store/check.rs` for SQLite, the
//! PostgreSQL engine for PostgreSQL); this room only decides what is a problem
//! and how it reads.

use std::path::Path;
use std::process::ExitCode;

use crate::fs_kind::{fs_magic, fs_name, remote_fs};
use crate::mirror::Mirror;
use crate::pipeline::sweep;
use crate::store::{DbLocation, IndexedRow};
use crate::{Store, StoreOptions};

use super::args::Global;
use super::CliError;

/// Indexed rows read per query while verifying results (no read snapshot is held
/// across the file reads of a whole large store).
const PAGE: i64 = 500;

/// One thing that is wrong.
#[derive(Debug, serde::Serialize)]
struct Problem {
    /// What kind of check found it (e.g. `checksum_mismatch`).
    kind: &'static str,
    /// The path or document key it is about.
    subject: String,
    /// The whole line, as printed.
    message: String,
}

/// What was looked at, for `--json` and the healthy summary.
#[derive(Debug, Default, serde::Serialize)]
struct Checked {
    database: String,
    mirror: String,
    /// File system type of each, e.g. "ext2/ext3/ext4 (0xef53)".
    filesystems: std::collections::BTreeMap<&'static str, String>,
    journal_mode: Option<String>,
    /// "ok", the number of problems, or "not run".
    integrity_check: String,
    /// PostgreSQL: the server's clock minus this machine's, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    clock_offset_ms: Option<i64>,
    documents: u64,
    live_leases: u64,
    indexed: u64,
    results_verified: u64,
    /// The search index: its tokenizer and rows.
    search_tokenizer: Option<String>,
    search_rows: u64,
    /// Generation and temp files of known documents (kept and leftovers).
    mirror_files: u64,
    leftovers: u64,
    /// Entries that are not leasehold's; gc leaves them alone.
    unknown_entries: Vec<String>,
}

#[derive(Debug, Default)]
struct Doctor {
    problems: Vec<Problem>,
    notes: Vec<String>,
    checked: Checked,
}

impl Doctor {
    fn problem(&mut self, kind: &'static str, subject: impl Into<String>, message: String) {
        // One line per problem, whatever SQLite's messages hold.
        self.problems.push(Problem {
            kind,
            subject: subject.into(),
            message: message.replace('\n', " "),
        });
    }
}

/// `leasehold doctor`.
pub fn doctor(g: &Global, json: bool) -> Result<ExitCode, CliError> {
    // Nothing to examine is a usage error, not a finding (exit 2).
    if let Some(line) = super::config::missing_data_directory(g) {
        return Err(CliError::Config(line));
    }
    let mut d = Doctor::default();
    let file = d.file_config(g);
    let db = super::config::database(g, file.as_ref());
    let mirror_root = super::config::mirror_root(g);
    d.checked.mirror = mirror_root.display().to_string();
    if let DbLocation::Sqlite(path) = &db {
        d.checked.database = path.display().to_string();
        d.filesystem("database", path, true);
    }
    d.filesystem("mirror", &mirror_root, !matches!(db, DbLocation::Postgres(_)));
    let clock_skew = file.as_ref().and_then(|f| f.store.clock_skew);
    let store = d.open_store(&db, clock_skew);
    let mirror = d.open_mirror(&mirror_root);
    if let Some(store) = &store {
        let sound = d.store_checks(store);
        d.row_checks(store);
        d.search_index(store);
        if let Some(mirror) = &mirror {
            d.results(store, mirror);
            if sound {
                d.leftovers(store, mirror);
            } else {
                d.notes.push(
                    "mirror leftovers not checked: the store is damaged, its rows cannot be trusted".into(),
                );
            }
        }
    }
    Ok(d.report(json))
}

impl Doctor {
    /// The configuration file, if there is one and it is valid; one that is
    /// not is a problem (the commands that need it refuse to start), and the
    /// checks go on without it.
    fn file_config(&mut self, g: &Global) -> Option<crate::config::FileConfig> {
        match super::config::load_file_config(g) {
            Ok(file) => file,
            Err(e) => {
                let path = super::config::file_config_path(g).unwrap_or_default();
                self.problem(
                    "config",
                    path.display().to_string(),
                    format!("{e} (the commands that work refuse to start until it is fixed)"),
                );
                self.notes
                    .push("the database was looked for at its default place, not where the configuration file may say".into());
                None
            }
        }
    }

    fn report(self, json: bool) -> ExitCode {
        let healthy = self.problems.is_empty();
        if json {
            let out = serde_json::json!({
                "healthy": healthy,
                "problems": self.problems,
                "notes": self.notes,
                "checked": self.checked,
            });
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        } else {
            for p in &self.problems {
                println!("{}", p.message);
            }
            for n in &self.notes {
                eprintln!("leasehold: note: {n}");
            }
            if healthy {
                let c = &self.checked;
                println!(
                    "healthy: {} ({} documents, {} results verified), mirror {}",
                    c.database, c.documents, c.results_verified, c.mirror
                );
            } else {
                eprintln!("leasehold: doctor found {} problem(s)", self.problems.len());
            }
        }
        if healthy {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }
    }

    /// WAL needs shared memory on one host and flock over a network file
    /// system is emulated (DESIGN §8): refuse anything that may be remote.
    /// `local_only` is false for the PostgreSQL edition's mirror, which the
    /// machines share (its cleanup is fenced by row locks, not flock).
    fn filesystem(&mut self, what: &'static str, path: &Path, local_only: bool) {
        let Some(existing) = path.ancestors().find(|p| p.exists()) else {
            return;
        };
        match fs_magic(existing) {
            Ok(magic) => {
                let name = fs_name(magic);
                self.checked
                    .filesystems
                    .insert(what, format!("{name} ({magic:#x})"));
                if let Some(remote) = remote_fs(magic).filter(|_| local_only) {
                    self.problem(
                        "network_filesystem",
                        path.display().to_string(),
                        format!(
                            "{}: the {what} is on {remote}; keep the database and the mirror on a local \
                             file system (WAL needs shared memory on one host, flock is emulated there)",
                            path.display()
                        ),
                    );
                }
            }
            Err(e) => self.notes.push(format!(
                "{}: file system type not checked: {e}",
                existing.display()
            )),
        }
    }

    /// A PostgreSQL database is named by the store once open (its URL
    /// without the password); one that cannot be opened is named by the
    /// error, which leaves the password out too. `clock_skew` is the
    /// configuration's, which the clock check judges by.
    fn open_store(&mut self, db: &DbLocation, clock_skew: Option<std::time::Duration>) -> Option<Store> {
        if let DbLocation::Sqlite(path) = db {
            if !path.exists() {
                self.problem(
                    "store",
                    path.display().to_string(),
                    format!(
                        "{}: no database here (nothing to check; wrong --data or --db?)",
                        path.display()
                    ),
                );
                return None;
            }
        }
        // The clock every other command uses (a test's, when one is set):
        // the clock check compares it with the server's.
        let base = match super::testing::clock() {
            Some(clock) => StoreOptions::default().clock(clock),
            None => StoreOptions::default(),
        };
        let mut opts = base.checkpoint_every(None).pool_size(2).create_if_missing(false);
        if let Some(skew) = clock_skew {
            opts = opts.clock_skew(skew);
        }
        match Store::open(db, opts) {
            Ok(store) => {
                self.checked.database = store.path().display().to_string();
                Some(store)
            }
            Err(e) => {
                let subject = db
                    .path()
                    .map_or_else(|| "database".into(), |p| p.display().to_string());
                self.problem("store", subject, one_line(&e));
                None
            }
        }
    }

    fn open_mirror(&mut self, root: &Path) -> Option<Mirror> {
        if std::fs::symlink_metadata(root).is_err() {
            self.problem(
                "mirror",
                root.display().to_string(),
                format!("{}: mirror root does not exist", root.display()),
            );
            return None;
        }
        // `inspect`, not `open`: doctor creates nothing, not even a probe file;
        // writability is asked of the kernel instead of tried.
        match Mirror::inspect(root) {
            Ok(m) => Some(m),
            Err(e) => {
                self.problem("mirror", root.display().to_string(), one_line(&e));
                None
            }
        }
    }

    /// Integrity, journal mode and counts through the store. True when the
    /// store's rows can be trusted for cleanup decisions.
    fn store_checks(&mut self, store: &Store) -> bool {
        let path = store.path().display().to_string();
        let sound = if store.is_postgres() {
            // The server keeps its own files sound (and checks its pages
            // where checksums are on); what follows checks the rows.
            self.checked.integrity_check = "not applicable (PostgreSQL)".into();
            true
        } else {
            self.sqlite_checks(store, &path)
        };
        self.clock_check(store, &path);
        match (store.counts(), store.live_leases()) {
            (Ok(c), Ok(l)) => {
                self.checked.documents = c.total();
                self.checked.live_leases = l.len() as u64;
            }
            (Err(e), _) | (_, Err(e)) => self.problem("store", &path, one_line(&e)),
        }
        sound
    }

    /// The search index against the accepted results: one problem line per
    /// document found wrong (the first 20), and a count of the rest.
    fn search_index(&mut self, store: &Store) {
        let path = store.path().display().to_string();
        let check = match store.check_search_index() {
            Ok(check) => check,
            Err(e) => return self.problem("search_index", &path, one_line(&e)),
        };
        self.checked.search_tokenizer = check.tokenizer.map(|t| t.name().to_owned());
        self.checked.search_rows = check.rows;
        if check.is_healthy() {
            return;
        }
        let named = check.examples.len() as u64;
        for line in &check.examples {
            let subject = line
                .split(':')
                .next()
                .unwrap_or_default()
                .trim_matches('"')
                .to_owned();
            self.problem(
                "search_index",
                subject,
                format!("{line} (run `leasehold reindex`)"),
            );
        }
        let all = check.missing + check.stale + check.extra;
        if all > named {
            self.problem(
                "search_index",
                &path,
                format!(
                    "{path}: {} more search index problem(s): {} missing, {} stale, {} extra in all (run `leasehold reindex`)",
                    all - named,
                    check.missing,
                    check.stale,
                    check.extra
                ),
            );
        }
    }

    /// PostgreSQL: this machine's clock against the server's. Leases are
    /// judged by each machine's clock; one that is off by more than half the
    /// clock-skew allowance makes the others take its fresh leases over.
    fn clock_check(&mut self, store: &Store, path: &str) {
        let allowed = store.options().clock_skew.as_millis() as i64 / 2;
        match store.clock_offset_ms() {
            Ok(None) => {}
            Ok(Some((offset, round_trip))) => {
                self.checked.clock_offset_ms = Some(offset);
                if offset.abs() > allowed + round_trip {
                    self.problem(
                        "clock",
                        path,
                        format!(
                            "{path}: this machine's clock is {offset} ms from the database server's (allowed: {allowed} ms); keep the machines on NTP, or leases they grant are taken over"
                        ),
                    );
                }
            }
            Err(e) => self.problem("clock", path, one_line(&e)),
        }
    }

    /// SQLite's full integrity check and journal mode; true when the file is sound.
    fn sqlite_checks(&mut self, store: &Store, path: &str) -> bool {
        let sound = match store.check_integrity(true) {
            Ok(lines) if lines.is_empty() => {
                self.checked.integrity_check = "ok".into();
                true
            }
            Ok(lines) => {
                self.checked.integrity_check = format!("{} problem(s)", lines.len());
                for l in lines {
                    self.problem("integrity", path, format!("{path}: integrity_check: {l}"));
                }
                false
            }
            Err(e) => {
                self.checked.integrity_check = "not run".into();
                self.problem(
                    "integrity",
                    path,
                    format!("integrity_check failed: {}", one_line(&e)),
                );
                false
            }
        };
        match store.journal_mode() {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => self.checked.journal_mode = Some(mode),
            Ok(mode) => {
                self.problem(
                    "journal_mode",
                    path,
                    format!("{path}: journal_mode is {mode:?}, expected \"wal\""),
                );
                self.checked.journal_mode = Some(mode);
            }
            Err(e) => self.problem("journal_mode", path, one_line(&e)),
        }
        sound
    }

    /// Lease invariants the schema's constraints should already guarantee; read
    /// without indexes, so that a damaged index cannot hide a duplicate.
    fn row_checks(&mut self, store: &Store) {
        let path = store.path().display().to_string();
        let found = store.lease_violations();
        match found {
            Ok(lines) => {
                for (subject, message) in lines {
                    self.problem("lease", subject, message);
                }
            }
            Err(e) => self.problem("lease", &path, format!("{path}: cannot check leases: {e}")),
        }
    }

    /// Every accepted result exists and matches its checksum.
    fn results(&mut self, store: &Store, mirror: &Mirror) {
        let path = store.path().display().to_string();
        let mut after = i64::MIN;
        loop {
            let page = match store.indexed_page(after, PAGE) {
                Ok(p) => p,
                Err(e) => {
                    return self.problem("result", &path, format!("{path}: cannot list results: {e}"));
                }
            };
            let Some(last) = page.last() else { return };
            after = last.id;
            for row in &page {
                self.checked.indexed += 1;
                self.verify(mirror, row);
            }
        }
    }

    fn verify(&mut self, mirror: &Mirror, row: &IndexedRow) {
        let key = &row.key;
        let (Some(rel), Some(sum)) = (&row.result_path, &row.checksum) else {
            let message = format!("{key:?}: indexed without a result path or checksum");
            return self.problem("result_missing", key, message);
        };
        match mirror.verify(rel, sum) {
            Ok(true) => self.checked.results_verified += 1,
            Ok(false) => {
                let file = mirror.root().join(rel);
                let message = format!(
                    "{key:?}: result {} does not match its checksum {sum} (changed or partial)",
                    file.display()
                );
                self.problem("checksum_mismatch", key, message);
            }
            Err(e) if e.is_not_found() => {
                let file = mirror.root().join(rel);
                let message = format!("{key:?}: result file {} is missing", file.display());
                self.problem("result_missing", key, message);
            }
            Err(e) => {
                let message = format!("{key:?}: result {rel:?} cannot be checked: {}", one_line(&e));
                self.problem("result_unreadable", key, message);
            }
        }
    }

    /// What `gc` would remove (a dry run of its sweep: nothing is deleted), and
    /// document directories of ids the database does not have.
    fn leftovers(&mut self, store: &Store, mirror: &Mirror) {
        let swept = sweep(store, mirror, true);
        let report = match swept {
            Ok(r) => r,
            Err(e) => {
                let root = mirror.root().display().to_string();
                let message = format!("{root}: cannot check for leftovers: {}", one_line(&e));
                return self.problem("mirror", root, message);
            }
        };
        self.checked.mirror_files = (report.kept.len() + report.removed.len()) as u64;
        self.checked.leftovers = report.removed.len() as u64;
        for rel in &report.removed {
            let file = mirror.root().join(rel).display().to_string();
            if Mirror::is_probe_name(rel) {
                let message = format!(
                    "{file}: leftover writability probe of a killed process (`leasehold gc` removes it)"
                );
                self.problem("probe_leftover", file, message);
                continue;
            }
            let message = format!("{file}: leftover generation or temp file (`leasehold gc` removes it)");
            self.problem("leftover", file, message);
        }
        for id in &report.busy {
            let dir = mirror
                .doc_dir(*id)
                .map(|d| d.display().to_string())
                .unwrap_or_default();
            self.notes.push(format!(
                "{dir}: not checked for leftovers: another process holds the document's mirror lock"
            ));
        }
        for id in &report.missing_rows {
            let dir = mirror
                .doc_dir(*id)
                .map(|d| d.display().to_string())
                .unwrap_or_default();
            let message = format!(
                "{dir}: results of document id {id}, which the database does not have \
                 (a mirror of another database?); gc keeps them"
            );
            self.problem("orphan_directory", dir, message);
        }
        self.checked.unknown_entries = report.unknown;
    }
}

/// An error as one line.
fn one_line(e: &dyn std::fmt::Display) -> String {
    crate::upstream::one_line(&e.to_string())
}
