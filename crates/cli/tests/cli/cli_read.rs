//! The commands that read, through the built binary: they create nothing and
//! name a missing data directory (exit 2); `list`, `show`, `inspect --id`,
//! keys given as paths; and `run .` with the data directory inside the source.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common;

use common::{leasehold, samples, BIN, SAMPLE_PHRASES};

/// The binary run in `cwd` with extra environment variables.
fn leasehold_in(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(cwd)
        .envs(env.iter().copied())
        .args(args)
        .output()
        .expect("run leasehold")
}

use common::output::{json, ok, stderr, stdout};

/// A copy of the samples plus one broken PDF (which dies), run once into
/// `data`: every sample indexed, 1 dead.
struct Corpus {
    _dir: tempfile::TempDir,
    source: PathBuf,
    data: PathBuf,
}

fn corpus() -> Corpus {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("docs");
    common::copy_tree(&samples(), &source);
    std::fs::write(source.join("broken.pdf"), b"%PDF-1.4 this is not a pdf").unwrap();
    let data = dir.path().join("data");
    let summary = json(leasehold(&data, &["run", source.to_str().unwrap(), "--json"]));
    assert_eq!(summary["indexed"], SAMPLE_PHRASES.len(), "{summary}");
    assert_eq!(summary["dead"], 1, "{summary}");
    Corpus {
        _dir: dir,
        source,
        data,
    }
}

fn id_of(data: &Path, key: &str) -> i64 {
    let c = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    c.query_row("SELECT id FROM jobs WHERE doc_key = ?1", [key], |r| r.get(0))
        .unwrap()
}

#[test]
fn read_commands_on_a_missing_data_directory_exit_2_create_nothing_and_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo").join("x");
    let commands: [&[&str]; 9] = [
        &["status"],
        &["status", "--json"],
        &["list"],
        &["inspect", "guide.md"],
        &["show", "guide.md"],
        &["auth", "status"],
        &["gc", "--dry-run"],
        &["retry", "guide.md"],
        &["retry", "--dead"],
    ];
    for args in commands {
        let out = leasehold(&missing, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.contains(&missing.display().to_string()),
            "{args:?}: names it: {err}"
        );
        assert!(stdout(&out).is_empty(), "{args:?}: nothing on stdout");
        assert!(
            !dir.path().join("typo").exists(),
            "{args:?} created {}",
            missing.display()
        );
    }

    // A data directory without a database: the database is named, none made.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = leasehold(&empty, &["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("leasehold.db"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "nothing created in it"
    );
}

/// Commands that need only the database (`auth`, `retry`) create no mirror, and
/// the read commands leave an existing one exactly as it was.
#[test]
fn read_commands_create_no_mirror_and_touch_none() {
    let c = corpus();
    let mirror = c.data.join("mirror");
    let moved = c.data.join("mirror-elsewhere");
    std::fs::rename(&mirror, &moved).unwrap();
    for args in [&["auth", "status"][..], &["retry", "--dead"]] {
        let out = leasehold(&c.data, args);
        assert!(!mirror.exists(), "{args:?} created the mirror: {}", stderr(&out));
    }
    std::fs::rename(&moved, &mirror).unwrap();
    let before = std::fs::metadata(&mirror).unwrap().modified().unwrap();
    for args in [
        &["status"][..],
        &["list"],
        &["show", "guide.md"],
        &["inspect", "guide.md"],
    ] {
        ok(leasehold(&c.data, args));
    }
    let after = std::fs::metadata(&mirror).unwrap().modified().unwrap();
    assert_eq!(before, after, "a read command wrote in the mirror root");
}

#[test]
fn list_shows_documents_by_status_failed_ones_json_and_says_how_many_more() {
    let c = corpus();
    let all = stdout(&ok(leasehold(&c.data, &["list"])));
    assert_eq!(all.lines().count(), SAMPLE_PHRASES.len() + 1, "{all}");
    let guide = all
        .lines()
        .find(|l| l.starts_with("guide.md "))
        .expect("guide.md listed");
    assert!(guide.contains("indexed") && guide.contains("1/5"), "{guide}");
    let result = guide.split_whitespace().nth(3).expect("a result column");
    assert!(
        std::fs::read_to_string(result).unwrap().contains("copper kettle"),
        "{result} is guide.md's text"
    );
    // Aligned: the status column starts at the same place on every line.
    let at: Vec<usize> = all
        .lines()
        .map(|l| l.find(" indexed").or_else(|| l.find(" dead")).unwrap())
        .map(|i| i + 1)
        .collect();
    assert!(at.windows(2).all(|w| w[0] == w[1]), "aligned columns:\n{all}");

    let failed = stdout(&ok(leasehold(&c.data, &["list", "--failed"])));
    assert_eq!(failed.lines().count(), 1, "{failed}");
    assert!(
        failed.starts_with("broken.pdf ") && failed.contains("dead"),
        "{failed}"
    );
    assert!(failed.contains("pdf"), "the last error is shown: {failed}");

    let indexed = json(leasehold(&c.data, &["list", "--status", "indexed", "--json"]));
    let rows = indexed.as_array().expect("a JSON array");
    assert_eq!(rows.len(), SAMPLE_PHRASES.len());
    for row in rows {
        assert_eq!(row["status"], "indexed", "{row}");
        assert_eq!(row["attempts"], 1, "{row}");
        assert!(Path::new(row["result"].as_str().unwrap()).is_file(), "{row}");
        assert!(row["last_error"].is_null(), "{row}");
    }
    let dead = json(leasehold(&c.data, &["list", "--status", "dead", "--json"]));
    assert_eq!(dead.as_array().unwrap().len(), 1);
    assert_eq!(dead[0]["key"], "broken.pdf");
    assert!(dead[0]["result"].is_null());

    let limited = stdout(&ok(leasehold(&c.data, &["list", "--limit", "3"])));
    let lines: Vec<&str> = limited.lines().collect();
    assert_eq!(lines.len(), 4, "{limited}");
    // The samples and the broken PDF, three of them shown.
    let more = SAMPLE_PHRASES.len() + 1 - 3;
    assert_eq!(lines[3], format!("... {more} more (use --limit)"));
    let limited = json(leasehold(&c.data, &["list", "--json", "--limit", "2"]));
    assert_eq!(limited.as_array().unwrap().len(), 2);
    // 0: every document, as `search --limit 0`.
    let all = json(leasehold(&c.data, &["list", "--json", "--limit", "0"]));
    assert_eq!(all.as_array().unwrap().len(), SAMPLE_PHRASES.len() + 1);
    let all = stdout(&ok(leasehold(&c.data, &["list", "--limit", "0"])));
    assert_eq!(all.lines().count(), SAMPLE_PHRASES.len() + 1, "{all}");

    let bad = leasehold(&c.data, &["list", "--status", "banana"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn show_prints_the_accepted_text_and_refuses_a_document_without_one() {
    let c = corpus();
    let text = stdout(&ok(leasehold(&c.data, &["show", "guide.md"])));
    assert!(text.contains("copper kettle"), "{text}");
    let id = id_of(&c.data, "nested/more.md").to_string();
    let text = stdout(&ok(leasehold(&c.data, &["show", "--id", &id])));
    assert!(text.contains("quiet lantern"), "{text}");

    let dead = leasehold(&c.data, &["show", "broken.pdf"]);
    assert_eq!(dead.status.code(), Some(1));
    assert!(stdout(&dead).is_empty());
    let err = stderr(&dead);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("broken.pdf") && err.contains("dead"), "{err}");

    let unknown = leasehold(&c.data, &["show", "no-such.txt"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(stderr(&unknown).contains("no-such.txt"), "{}", stderr(&unknown));

    // A result whose bytes no longer match the checksum is not printed.
    let listed = json(leasehold(&c.data, &["list", "--status", "indexed", "--json"]));
    let notes = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "notes.txt")
        .unwrap();
    std::fs::write(notes["result"].as_str().unwrap(), b"tampered").unwrap();
    let tampered = leasehold(&c.data, &["show", "notes.txt"]);
    assert_eq!(tampered.status.code(), Some(1));
    assert!(stdout(&tampered).is_empty());
    assert!(stderr(&tampered).contains("checksum"), "{}", stderr(&tampered));
}

#[test]
fn inspect_takes_an_id_a_dot_key_and_paths_inside_the_source_with_local_times() {
    let c = corpus();
    let data = c.data.to_str().unwrap();
    let utc_plus_2 = [("TZ", "XXX-2")];
    // `--id N` is the id even when a file is named like another id.
    let guide_id = id_of(&c.data, "guide.md");
    let by_id = json(leasehold(
        &c.data,
        &["inspect", "--id", &guide_id.to_string(), "--json"],
    ));
    assert_eq!(by_id["job"]["key"], "guide.md");

    let expect_guide = |out: Output, how: &str| {
        let text = stdout(&ok(out));
        assert!(
            text.starts_with(&format!("\"guide.md\" (id {guide_id})")),
            "{how}: {text}"
        );
        text
    };
    let dot = leasehold_in(&c.source, &utc_plus_2, &["--data", data, "inspect", "./guide.md"]);
    let text = expect_guide(dot, "./guide.md");
    // Local ISO times with the zone's offset; no raw epoch milliseconds.
    let created = text
        .lines()
        .find(|l| l.trim_start().starts_with("created "))
        .unwrap();
    let history = text.lines().skip_while(|l| *l != "history:").skip(1);
    for line in std::iter::once(created.trim_start().trim_start_matches("created ")).chain(history) {
        let time = line.split_whitespace().next().unwrap_or_default();
        // e.g. 2026-03-01T14:05:09.120+02:00
        assert_eq!(time.len(), 29, "{line}");
        assert_eq!(&time[10..11], "T", "{line}");
        assert!(time.ends_with("+02:00"), "{line}");
    }
    let absolute = c.source.join("guide.md");
    let out = leasehold(&c.data, &["inspect", absolute.to_str().unwrap()]);
    expect_guide(out, "absolute path");
    let parent = c.source.parent().unwrap();
    let out = leasehold_in(parent, &[], &["--data", data, "inspect", "docs/guide.md"]);
    expect_guide(out, "path relative to the working directory");
    let nested = leasehold_in(
        &c.source.join("nested"),
        &[],
        &["--data", data, "inspect", "../guide.md"],
    );
    expect_guide(nested, "../guide.md");

    // JSON keeps the raw milliseconds and adds the ISO times.
    let j = json(leasehold_in(
        &c.source,
        &utc_plus_2,
        &["--data", data, "inspect", "guide.md", "--json"],
    ));
    assert!(j["job"]["created_at"].is_i64(), "{j}");
    assert!(
        j["job"]["created_at_iso"].as_str().unwrap().ends_with("+02:00"),
        "{j}"
    );
    assert!(j["history"][0]["at"].is_i64(), "{j}");
    assert!(j["history"][0]["at_iso"].is_string(), "{j}");

    // A path outside the source is no key.
    let outside = leasehold(&c.data, &["inspect", "/etc/hostname"]);
    assert_eq!(outside.status.code(), Some(1), "{}", stdout(&outside));
}

#[test]
fn run_dot_with_the_data_directory_inside_the_source_never_indexes_its_own_files() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("docs");
    common::copy_tree(&samples(), &source);
    let run = || {
        json(leasehold_in(
            &source,
            &[],
            &["--data", "leasehold-data", "run", ".", "--json"],
        ))
    };
    let first = run();
    assert_eq!(first["new"], SAMPLE_PHRASES.len(), "{first}");
    assert_eq!(first["indexed"], SAMPLE_PHRASES.len(), "{first}");
    let second = run();
    assert_eq!(second["new"], 0, "{second}");
    assert_eq!(second["changed"], 0, "{second}");
    assert_eq!(second["indexed"], 0, "{second}");
    assert_eq!(second["failed"], 0, "{second}");

    let c = rusqlite::Connection::open(source.join("leasehold-data/leasehold.db")).unwrap();
    let own: i64 = c
        .query_row(
            "SELECT count(*) FROM jobs WHERE doc_key LIKE 'leasehold-data%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(own, 0, "the data directory's files were enqueued");
    let total: i64 = c
        .query_row("SELECT count(*) FROM jobs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(total as usize, SAMPLE_PHRASES.len());
}

/// Every file and directory under `path` (itself included) made read-only,
/// or writable again.
fn set_read_only(path: &Path, read_only: bool) {
    use std::os::unix::fs::PermissionsExt;
    for entry in walkdir::WalkDir::new(path) {
        let entry = entry.unwrap();
        let mode = match (entry.file_type().is_dir(), read_only) {
            (true, true) => 0o555,
            (true, false) => 0o755,
            (false, true) => 0o444,
            (false, false) => 0o644,
        };
        std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// The commands that read, each with what its output must hold.
const READS: [(&[&str], &str); 6] = [
    (&["status"], "indexed"),
    (&["list"], "guide.md"),
    (&["show", "guide.md"], "copper kettle"),
    (&["inspect", "guide.md"], "guide.md"),
    (&["search", "copper kettle"], "guide.md"),
    (&["metrics"], "leasehold_documents"),
];

/// A data directory whose files and directories are all read-only (by their
/// modes: tests run as root here, whom modes do not stop, so this is the
/// check leasehold makes by hand; a read-only mount is the next test): the
/// commands that read work, the ones that write fail in one line (exit 1),
/// and the database is left as it was.
#[test]
fn a_read_only_data_directory_is_read_and_refuses_writes_in_one_line() {
    let c = corpus();
    let db = c.data.join("leasehold.db");
    set_read_only(&c.data, true);
    let before = std::fs::read(&db).unwrap();
    for (args, holds) in READS {
        let out = leasehold(&c.data, args);
        assert!(stdout(&ok(out)).contains(holds), "{args:?}");
    }
    let out = leasehold(&c.data, &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("read-only"), "{}", stderr(&out));

    let source = c.source.to_str().unwrap();
    let writes: [&[&str]; 5] = [
        &["run", source],
        &["gc"],
        &["retry", "broken.pdf"],
        &["reindex"],
        &["work", "--until-empty"],
    ];
    for args in writes {
        let out = leasehold(&c.data, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains("read-only"), "{args:?}: {err}");
    }
    let out = leasehold(&c.data, &["doctor", "--fix"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("read-only"), "{}", stdout(&out));
    assert_eq!(std::fs::read(&db).unwrap(), before, "the database changed");
    set_read_only(&c.data, false);
}

/// `cmd` run with `view` a read-only bind mount of `data`, in mount (and,
/// when not root, user) namespaces of its own; `None` where this machine
/// cannot make one.
fn through_read_only_mount(data: &Path, view: &Path, args: &[&str]) -> Option<Output> {
    let script = r#"mount --bind -o ro "$1" "$2" && shift 2 && exec "$@""#;
    let out = Command::new("unshare")
        .args(["-r", "-m", "sh", "-c", script, "sh"])
        .arg(data)
        .arg(view)
        .arg(BIN)
        .arg("--data")
        .arg(view)
        .args(args)
        .output()
        .ok()?;
    let err = stderr(&out);
    let refused = err.contains("unshare:") || err.contains("mount:");
    (!refused).then_some(out)
}

/// A data directory on a read-only medium (a read-only bind mount): with
/// its `-wal` and `-shm`, SQLite shares them read-only; without (a copy
/// checkpointed first), it is opened immutable, and says so. Reading works
/// both ways; a write fails in one line.
#[test]
fn a_data_directory_on_a_read_only_mount_is_read_immutable_when_it_has_no_wal() {
    let c = corpus();
    let tmp = tempfile::tempdir().unwrap();
    let view = tmp.path().join("view");
    std::fs::create_dir(&view).unwrap();
    // A data directory as a process leaves it while it works: its `-wal` and
    // `-shm` beside the database (copied while a connection holds them; a
    // command that ends takes them away).
    let live = tmp.path().join("live");
    {
        let db = rusqlite::Connection::open(c.data.join("leasehold.db")).unwrap();
        db.execute_batch("CREATE TABLE wal_probe (x); DROP TABLE wal_probe;")
            .unwrap();
        common::copy_tree(&c.data, &live);
    }
    for sidecar in ["leasehold.db-wal", "leasehold.db-shm"] {
        assert!(live.join(sidecar).exists(), "{sidecar} not copied");
    }
    let Some(probe) = through_read_only_mount(&live, &view, &["status"]) else {
        eprintln!("skipped: no read-only bind mount here (unshare -r -m refused)");
        return;
    };
    assert!(probe.status.success(), "{}", stderr(&probe));
    assert!(!stderr(&probe).contains("immutable"), "{}", stderr(&probe));

    let copy = tmp.path().join("copy");
    common::copy_tree(&c.data, &copy);
    {
        let db = rusqlite::Connection::open(copy.join("leasehold.db")).unwrap();
        db.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }
    for sidecar in ["leasehold.db-wal", "leasehold.db-shm"] {
        let _ = std::fs::remove_file(copy.join(sidecar));
    }
    for (data, immutable) in [(&live, false), (&copy, true)] {
        for (args, holds) in READS {
            let out = through_read_only_mount(data, &view, args).expect("mounted before");
            let err = stderr(&out);
            assert!(out.status.success(), "{args:?}: {err}");
            assert!(stdout(&out).contains(holds), "{args:?}: {}", stdout(&out));
            assert_eq!(err.contains("opened immutable"), immutable, "{args:?}: {err}");
        }
        let out = through_read_only_mount(data, &view, &["run", c.source.to_str().unwrap()]).unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("read-only"), "{err}");
    }
}

/// A damaged database is what a command met, not how it was asked: exit 1,
/// one line naming it and `doctor`.
#[test]
fn a_corrupt_store_is_a_runtime_failure_in_one_line() {
    let c = corpus();
    let db = c.data.join("leasehold.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }
    let full = std::fs::read(&db).unwrap();
    std::fs::write(&db, &full[..full.len() / 2]).unwrap();
    for args in [&["status"][..], &["list"], &["run", c.source.to_str().unwrap()]] {
        let out = leasehold(&c.data, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(&db.display().to_string()) && err.contains("doctor"),
            "{err}"
        );
    }
}
