//! The checks of `leasehold doctor`: what is wrong with a data directory,
//! each problem with the command that mends it (the list is in `doctor.rs`).

use std::path::Path;
use std::process::ExitCode;

use leasehold::fs_kind::{fs_magic, fs_name, remote_fs};
use leasehold::mirror::Mirror;
use leasehold::pipeline::{sweep, Damage};
use leasehold::store::{Access, DbLocation, IndexedRow};
use leasehold::{Store, StoreOptions};

use crate::args::Global;
use crate::error::CliError;

/// Indexed rows read per query while verifying results (no read snapshot is held
/// across the file reads of a whole large store).
const PAGE: i64 = 500;

/// The commands problems name as their mend.
const FIX: &str = "leasehold doctor --fix";
const REINDEX: &str = "leasehold reindex";
const GC: &str = "leasehold gc";

/// What mends damage to the store's own tables (the documents, their
/// leases, history): nothing rebuilds them from elsewhere, as the search
/// index is rebuilt from the mirror.
const CORE_DAMAGE: &str = "the store's own tables are damaged, which neither `leasehold reindex` nor \
     `doctor --fix` can mend: restore the database from a backup";

/// One thing that is wrong.
#[derive(Debug, serde::Serialize)]
pub(super) struct Problem {
    /// What kind of check found it (e.g. `checksum_mismatch`).
    kind: &'static str,
    /// The path or document key it is about.
    subject: String,
    /// The whole line, as printed.
    pub(super) message: String,
    /// The command that mends it, when one does (`doctor --fix` runs it).
    fix: Option<&'static str>,
}

/// What was looked at, for `--json` and the healthy summary.
#[derive(Debug, Default, serde::Serialize)]
pub(super) struct Checked {
    database: String,
    mirror: String,
    /// File system type of each, e.g. "ext2/ext3/ext4 (0xef53)".
    filesystems: std::collections::BTreeMap<&'static str, String>,
    /// How the database was opened: "read-write", "read-only" or "immutable".
    pub(super) access: Option<&'static str>,
    journal_mode: Option<String>,
    /// "ok", the number of problems, or "not run".
    integrity_check: String,
    /// PostgreSQL: the server's clock minus this machine's, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    clock_offset_ms: Option<i64>,
    documents: u64,
    live_leases: u64,
    indexed: u64,
    pub(super) results_verified: u64,
    /// The search index: its tokenizer, its stemming and rows.
    search_tokenizer: Option<String>,
    search_stemming: Option<String>,
    search_rows: u64,
    /// Generation and temp files of known documents (kept and leftovers).
    mirror_files: u64,
    leftovers: u64,
    /// Leftovers of documents whose source was removed: not problems.
    leftovers_of_removed: u64,
    /// Entries that are not leasehold's; gc leaves them alone.
    unknown_entries: Vec<String>,
}

/// What `--fix` can mend, as the checks found it.
#[derive(Debug, Default)]
pub(super) struct Repairs {
    /// Accepted results missing or altered: (id, key, result path, damage).
    pub(super) results: Vec<(i64, String, String, Damage)>,
    /// The search index is damaged, or apart from the accepted results.
    pub(super) index: bool,
    /// The mirror holds files `gc` removes.
    pub(super) leftovers: bool,
}

#[derive(Debug, Default)]
pub(super) struct Doctor {
    /// The integrity check found pages of the store's own tables (not the
    /// search index's) damaged: what reads them fails, and is not the
    /// search index's problem.
    store_damaged: bool,
    pub(super) problems: Vec<Problem>,
    pub(super) notes: Vec<String>,
    pub(super) checked: Checked,
    pub(super) repairs: Repairs,
}

impl Doctor {
    fn problem(&mut self, kind: &'static str, subject: impl Into<String>, message: String) {
        self.push(kind, subject.into(), message, None);
    }

    /// A problem that `fix` mends: the line ends by naming it.
    fn mended_by(
        &mut self,
        fix: &'static str,
        kind: &'static str,
        subject: impl Into<String>,
        message: String,
    ) {
        let message = format!("{message} (fix: `{fix}`)");
        self.push(kind, subject.into(), message, Some(fix));
    }

    fn push(&mut self, kind: &'static str, subject: String, message: String, fix: Option<&'static str>) {
        // One line per problem, whatever SQLite's messages hold.
        self.problems.push(Problem {
            kind,
            subject,
            message: message.replace('\n', " "),
            fix,
        });
    }
}

/// Where the data directory's parts are, as the flags and configuration say.
pub(super) struct Place {
    pub(super) db: DbLocation,
    pub(super) mirror: std::path::PathBuf,
    pub(super) clock_skew: Option<std::time::Duration>,
}

impl Doctor {
    /// A doctor for the data directory at `place`, its file systems checked.
    pub(super) fn at(place: &Place) -> Doctor {
        let mut d = Doctor::default();
        d.checked.mirror = place.mirror.display().to_string();
        if let DbLocation::Sqlite(path) = &place.db {
            d.checked.database = path.display().to_string();
            d.filesystem("database", path, true);
        }
        d.filesystem(
            "mirror",
            &place.mirror,
            !matches!(place.db, DbLocation::Postgres(_)),
        );
        d
    }

    /// Every check of the store and, when it opened, the mirror.
    pub(super) fn examine(&mut self, store: &Store, mirror: Option<&Mirror>) {
        let sound = self.store_checks(store);
        self.row_checks(store);
        self.search_index(store);
        if let Some(mirror) = mirror {
            self.results(store, mirror);
            if sound {
                self.leftovers(store, mirror);
            } else {
                self.notes.push(
                    "mirror leftovers not checked: the store is damaged, its rows cannot be trusted".into(),
                );
            }
        }
    }

    /// A configuration file that cannot be used is a problem (the commands
    /// that need it refuse to start); the checks go on without it.
    pub(super) fn broken_config(&mut self, g: &Global, e: &CliError) {
        let path = crate::config::file_config_path(g).unwrap_or_default();
        self.problem(
            "config",
            path.display().to_string(),
            format!("{e} (the commands that work refuse to start until it is fixed)"),
        );
        self.notes.push(
            "the database was looked for at its default place, not where the configuration file may say"
                .into(),
        );
    }

    pub(super) fn report(self, json: bool) -> ExitCode {
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
            self.print_verdict();
        }
        exit_code(healthy)
    }

    /// The notes, and the healthy line or the count of problems.
    pub(super) fn print_verdict(&self) {
        for n in &self.notes {
            eprintln!("leasehold: note: {n}");
        }
        if self.problems.is_empty() {
            let c = &self.checked;
            println!(
                "healthy: {} ({} documents, {} results verified), mirror {}",
                c.database, c.documents, c.results_verified, c.mirror
            );
            return;
        }
        let fixable = self.problems.iter().filter(|p| p.fix.is_some()).count();
        let hint = if fixable > 0 {
            format!("; `{FIX}` mends {fixable} of them")
        } else {
            String::new()
        };
        eprintln!("leasehold: doctor found {} problem(s){hint}", self.problems.len());
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
    /// error, which leaves the password out too. The clock skew is the
    /// configuration's, which the clock check judges by. Without `fix`, a
    /// read-only SQLite file (or directory, or medium) is opened read-only.
    pub(super) fn open_store(&mut self, place: &Place, fix: bool) -> Option<Store> {
        if let DbLocation::Sqlite(path) = &place.db {
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
        let base = match crate::testing::clock() {
            Some(clock) => StoreOptions::default().clock(clock),
            None => StoreOptions::default(),
        };
        let mut opts = base.checkpoint_every(None).pool_size(2).create_if_missing(false);
        if let Some(skew) = place.clock_skew {
            opts = opts.clock_skew(skew);
        }
        let opened = match Store::open(&place.db, opts.clone()) {
            Err(leasehold::Error::ReadOnly { .. }) if !fix => Store::open(&place.db, opts.read_only(true)),
            opened => opened,
        };
        match opened {
            Ok(store) => {
                self.checked.database = store.path().display().to_string();
                self.note_access(&store);
                Some(store)
            }
            Err(e) => {
                let subject = place
                    .db
                    .path()
                    .map_or_else(|| "database".into(), |p| p.display().to_string());
                let way_on = if e.is_corrupt() {
                    "; restore it from a backup (no leasehold command rebuilds the store's own tables)"
                } else if matches!(e, leasehold::Error::ReadOnly { .. }) {
                    "; `doctor --fix` writes, and cannot here"
                } else {
                    ""
                };
                self.problem("store", subject, format!("{}{way_on}", one_line(&e)));
                None
            }
        }
    }

    /// How the store was opened, and a note when it is read-only.
    fn note_access(&mut self, store: &Store) {
        let access = store.access();
        self.checked.access = Some(match access {
            Access::ReadWrite => "read-write",
            Access::ReadOnly => "read-only",
            Access::Immutable => "immutable",
        });
        if let Some(note) = crate::config::immutable_note(store) {
            self.notes.push(note);
        } else if access == Access::ReadOnly {
            self.notes.push(format!(
                "{}: read-only, opened for reading only: commands that write (run, work, gc, doctor --fix) cannot change it",
                store.path().display()
            ));
        }
    }

    /// The mirror, opened to read (creating nothing). One that is not
    /// writable is a problem, unless the whole data directory is read-only
    /// (its store too): a copy to read, as a backup is.
    pub(super) fn open_mirror(&mut self, root: &Path, store: &Store) -> Option<Mirror> {
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
        let mirror = match Mirror::inspect_readable(root) {
            Ok(m) => m,
            Err(e) => {
                self.problem("mirror", root.display().to_string(), one_line(&e));
                return None;
            }
        };
        if let Err(e) = mirror.writable() {
            if store.access() == Access::ReadWrite {
                self.problem("mirror", root.display().to_string(), one_line(&e));
            } else {
                self.notes.push(one_line(&e));
            }
        }
        Some(mirror)
    }

    /// Integrity, journal mode and counts through the store. True when the
    /// store's rows can be trusted for cleanup decisions.
    fn store_checks(&mut self, store: &Store) -> bool {
        let path = store.path().display().to_string();
        let sound = if store.checks_pages() {
            self.sqlite_checks(store, &path)
        } else {
            // The server keeps its own files sound (and checks its pages
            // where checksums are on); what follows checks the rows.
            self.checked.integrity_check = "not applicable (the database server keeps its own pages)".into();
            true
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
            Err(e) if self.store_damaged => {
                // Its query reads the documents too: the damage above.
                return self.notes.push(format!(
                    "the search index was not compared with the accepted results: {}",
                    one_line(&e)
                ));
            }
            Err(e) => {
                self.repairs.index = true;
                return self.mended_by(REINDEX, "search_index", &path, one_line(&e));
            }
        };
        self.checked.search_tokenizer = check.tokenizer.map(|t| t.name().to_owned());
        self.checked.search_stemming = store.search_stemming().ok().map(|s| s.name().to_owned());
        self.checked.search_rows = check.rows;
        if check.is_healthy() {
            return;
        }
        self.repairs.index = true;
        let named = check.examples.len() as u64;
        for line in &check.examples {
            let subject = line
                .split(':')
                .next()
                .unwrap_or_default()
                .trim_matches('"')
                .to_owned();
            self.mended_by(REINDEX, "search_index", subject, line.clone());
        }
        let all = check.missing + check.stale + check.extra;
        if all > named {
            self.mended_by(
                REINDEX,
                "search_index",
                &path,
                format!(
                    "{path}: {} more search index problem(s): {} missing, {} stale, {} extra in all",
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

    /// SQLite's full integrity check and journal mode; true when the file is
    /// sound. A line about the search index (FTS5's own check: "malformed
    /// inverted index for FTS5 table main.search_text") is the index's
    /// problem, mended by building it again; the rows stay trusted.
    fn sqlite_checks(&mut self, store: &Store, path: &str) -> bool {
        let sound = match store.check_integrity_by_table(true) {
            Ok(lines) if lines.is_empty() => {
                self.checked.integrity_check = "ok".into();
                true
            }
            Ok(lines) => {
                self.checked.integrity_check = format!("{} problem(s)", lines.len());
                let (index, rest): (Vec<_>, Vec<_>) = lines
                    .into_iter()
                    .partition(|p| p.is_search_index() || p.line.contains("search_text"));
                for p in &index {
                    self.repairs.index = true;
                    let message = format!("{path}: the search index is damaged: integrity_check: {}", p.line);
                    self.mended_by(REINDEX, "search_index_damaged", path, message);
                }
                for p in &rest {
                    let whose = p
                        .table
                        .as_deref()
                        .map(|t| format!(" (table {t})"))
                        .unwrap_or_default();
                    self.problem(
                        "integrity",
                        path,
                        format!("{path}: integrity_check: {}{whose}; {CORE_DAMAGE}", p.line),
                    );
                }
                self.store_damaged = !rest.is_empty();
                rest.is_empty()
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
        if store.access() == Access::Immutable {
            // SQLite then reads the main file alone, and answers "delete".
            self.notes
                .push("journal mode not checked: the file was opened immutable".into());
            return sound;
        }
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
        let file = mirror.root().join(rel);
        let (kind, damage, message) = match mirror.verify(rel, sum) {
            Ok(true) => {
                self.checked.results_verified += 1;
                return;
            }
            Ok(false) => (
                "checksum_mismatch",
                Damage::Altered,
                format!(
                    "{key:?}: result {} does not match its checksum {sum} (changed or partial)",
                    file.display()
                ),
            ),
            Err(e) if e.is_not_found() => (
                "result_missing",
                Damage::Missing,
                format!("{key:?}: result file {} is missing", file.display()),
            ),
            Err(e) => {
                let message = format!("{key:?}: result {rel:?} cannot be checked: {}", one_line(&e));
                return self.problem("result_unreadable", key, message);
            }
        };
        self.repairs
            .results
            .push((row.id, key.clone(), rel.clone(), damage));
        let message = format!("{message}; the document is to be extracted again");
        self.mended_by(FIX, kind, key, message);
    }

    /// What `gc` would remove (a dry run of its sweep: nothing is deleted), and
    /// document directories of ids the database does not have. The files of
    /// documents whose source was removed are counted in a note: `gc` (or the
    /// next `doctor --fix`) removes them, as it should after a deletion.
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
                self.repairs.leftovers = true;
                let message = format!("{file}: leftover writability probe of a killed process");
                self.mended_by(GC, "probe_leftover", file, message);
                continue;
            }
            if of_removed_source(store, rel) {
                self.checked.leftovers_of_removed += 1;
                continue;
            }
            self.repairs.leftovers = true;
            let message = format!("{file}: leftover generation or temp file");
            self.mended_by(GC, "leftover", file, message);
        }
        if self.checked.leftovers_of_removed > 0 {
            self.notes.push(format!(
                "{} file(s) of documents whose source was removed wait for `{GC}` to remove them",
                self.checked.leftovers_of_removed
            ));
        }
        for id in &report.busy {
            let dir = doc_files(mirror, *id);
            self.notes.push(format!(
                "{dir}: not checked for leftovers: another process holds the document's mirror lock"
            ));
        }
        for id in &report.missing_rows {
            let dir = doc_files(mirror, *id);
            let message = format!(
                "{dir}: results of document id {id}, which the database does not have \
                 (a mirror of another database?); gc keeps them: remove them by hand \
                 if they belong to no other database"
            );
            self.problem("orphan_directory", dir, message);
        }
        self.checked.unknown_entries = report.unknown;
    }
}

/// Where document `id`'s files are: its directory of the layout before
/// shards if it has one, else its files in its shard (`{shard}/{id}.*`).
fn doc_files(mirror: &Mirror, id: i64) -> String {
    match mirror.legacy_doc_dir(id) {
        Ok(dir) if dir.is_dir() => dir.display().to_string(),
        _ => mirror
            .doc_dir(id)
            .map(|d| d.join(format!("{id}.*")).display().to_string())
            .unwrap_or_default(),
    }
}

/// Whether the mirror file `rel` belongs to a document whose source was
/// removed (dead with its result forgotten): what is left of it waits for
/// `gc`, the ordinary state after a deletion.
fn of_removed_source(store: &Store, rel: &str) -> bool {
    let id = Mirror::doc_id_of(rel);
    id.and_then(|id| store.job(leasehold::job::JobId(id)).ok().flatten())
        .is_some_and(|job| job.source_gone && job.result_path.is_none())
}

pub(super) fn exit_code(healthy: bool) -> ExitCode {
    if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// An error as one line.
pub(super) fn one_line(e: &dyn std::fmt::Display) -> String {
    leasehold::upstream::one_line(&e.to_string())
}
