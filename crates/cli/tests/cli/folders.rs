//! Several folders in one data directory (`run DIR…`, `folders`): each
//! keeps its own keys, scans and removals touch only their folder, nested
//! folders are refused, and a data directory of one folder made before
//! there could be several opens unchanged. The default data directory is the
//! user's, with `./leasehold-data` still taken where it exists.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common;

use common::{leasehold, samples, BIN};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(out: Output) -> Output {
    assert!(out.status.success(), "{}", stderr(&out));
    out
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stderr(out)))
}

/// `docs/` and `notes/` under a temporary directory, both with a `sub/b.txt`
/// (the same key relative to each folder), canonical.
fn two_folders() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (docs, notes) = (tmp.path().join("docs"), tmp.path().join("notes"));
    for (dir, word) in [(&docs, "alpha"), (&notes, "notebook")] {
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.txt"), format!("{word} shared words\n")).unwrap();
        std::fs::write(dir.join("sub/b.txt"), format!("{word} deeper shared words\n")).unwrap();
    }
    let docs = docs.canonicalize().unwrap();
    let notes = notes.canonicalize().unwrap();
    (tmp, docs, notes)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The originals `search QUERY --files` names, sorted.
fn found(data: &Path, query: &str) -> Vec<String> {
    let out = leasehold(data, &["search", query, "--files"]);
    let mut paths: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    paths.sort();
    paths
}

#[test]
fn several_folders_share_one_data_directory_and_keep_their_own_keys() {
    let (tmp, docs, notes) = two_folders();
    let data = tmp.path().join("data");
    let first = json(&ok(leasehold(&data, &["run", s(&docs), "--json"])));
    assert_eq!(first["indexed"], 2, "{first}");

    // Naming a second folder adds it, and says so.
    let out = ok(leasehold(&data, &["run", s(&notes), "--json"]));
    assert_eq!(json(&out)["indexed"], 2);
    assert!(stderr(&out).contains("now indexes"), "{}", stderr(&out));

    // Every original is found where it is, the same relative key in both.
    let all = found(&data, "shared");
    let want: Vec<String> = [
        docs.join("a.txt"),
        docs.join("sub/b.txt"),
        notes.join("a.txt"),
        notes.join("sub/b.txt"),
    ]
    .iter()
    .map(|p| p.display().to_string())
    .collect();
    assert_eq!(all, want);
    // `dir:` takes a folder by its full path, whichever way its keys are made.
    assert_eq!(found(&data, &format!("shared dir:{}", s(&notes))), want[2..]);
    assert_eq!(found(&data, &format!("shared dir:{}/sub/", s(&notes))), want[3..]);
    assert_eq!(found(&data, &format!("shared dir:{}", s(&docs))), want[..2]);
    assert_eq!(found(&data, &format!("shared dir:{}/sub", s(&docs))), want[1..2]);
    assert_eq!(found(&data, &format!("shared -dir:{}", s(&docs))), want[2..]);
    assert_eq!(found(&data, "shared dir:sub"), want[1..2]);

    // `run` alone runs them all: nothing new, nothing gone.
    let again = json(&ok(leasehold(&data, &["run", "--json"])));
    assert_eq!(
        (again["unchanged"].clone(), again["gone"].clone()),
        (4.into(), 0.into()),
        "{again}"
    );

    let listed = json(&ok(leasehold(&data, &["folders", "list", "--json"])));
    assert_eq!(listed[0]["path"], s(&docs));
    assert_eq!(listed[0]["documents"], 2);
    assert_eq!(listed[1]["path"], s(&notes));
    assert_eq!(listed[1]["documents"], 2);
    let status = String::from_utf8_lossy(&ok(leasehold(&data, &["status"])).stdout).into_owned();
    assert!(
        status.contains(s(&docs)) && status.contains(s(&notes)),
        "{status}"
    );

    // A document is found by its file's path, in either folder.
    let shown = json(&ok(leasehold(
        &data,
        &["inspect", s(&notes.join("sub/b.txt")), "--json"],
    )));
    assert_eq!(shown["job"]["key"], format!("{}/sub/b.txt", s(&notes)), "{shown}");
    let rel = ok(leasehold(&data, &["inspect", "sub/b.txt", "--json"]));
    assert_eq!(json(&rel)["job"]["key"], "sub/b.txt");

    // A file removed from one folder is gone only when that folder is scanned.
    std::fs::remove_file(notes.join("a.txt")).unwrap();
    let docs_only = json(&ok(leasehold(&data, &["run", s(&docs), "--json"])));
    assert_eq!(docs_only["gone"], 0, "{docs_only}");
    let every = json(&ok(leasehold(&data, &["run", "--json"])));
    assert_eq!(every["gone"], 1, "{every}");
    assert_eq!(found(&data, "shared").len(), 3);
}

#[test]
fn nested_folders_are_refused_and_nothing_is_recorded() {
    let (tmp, docs, _) = two_folders();
    let data = tmp.path().join("data");
    ok(leasehold(&data, &["run", s(&docs), "-q"]));
    let inside = leasehold(&data, &["run", s(&docs.join("sub"))]);
    assert_eq!(inside.status.code(), Some(2), "{}", stderr(&inside));
    assert!(stderr(&inside).contains("is inside"), "{}", stderr(&inside));
    let holds = leasehold(&data, &["folders", "add", s(tmp.path())]);
    assert_eq!(holds.status.code(), Some(2), "{}", stderr(&holds));
    assert!(stderr(&holds).contains("folders remove"), "{}", stderr(&holds));
    assert_eq!(stderr(&holds).trim().lines().count(), 1, "{}", stderr(&holds));
    let listed = json(&ok(leasehold(&data, &["folders", "list", "--json"])));
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
}

#[test]
fn a_removed_folder_leaves_the_index_and_the_others_stay() {
    let (tmp, docs, notes) = two_folders();
    let data = tmp.path().join("data");
    ok(leasehold(&data, &["run", s(&docs), s(&notes), "-q"]));
    assert_eq!(found(&data, "notebook").len(), 2);
    let out = ok(leasehold(&data, &["folders", "remove", s(&notes)]));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 document(s) left the index"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(found(&data, "notebook").is_empty());
    assert_eq!(found(&data, "alpha").len(), 2);
    let again = json(&ok(leasehold(&data, &["run", "--json"])));
    assert_eq!(
        (again["unchanged"].clone(), again["new"].clone()),
        (2.into(), 0.into()),
        "{again}"
    );
    let not_there = leasehold(&data, &["folders", "remove", s(&notes)]);
    assert_eq!(not_there.status.code(), Some(2), "{}", stderr(&not_there));

    // The first folder can go too; a folder added after it is keyed by full
    // path, and adding the removed one back finds its files again.
    ok(leasehold(&data, &["folders", "remove", s(&docs)]));
    assert!(found(&data, "shared").is_empty());
    let back = json(&ok(leasehold(&data, &["run", s(&notes), s(&docs), "--json"])));
    assert_eq!(back["indexed"], 4, "{back}");
    assert_eq!(found(&data, "shared").len(), 4);
}

/// A data directory of one folder as the last release made it records the
/// folder as `source_root` and keys relative to it; this release writes the
/// same for one folder, adds the next one beside it, and keeps every key and
/// result of the first.
#[test]
fn a_one_folder_data_directory_gets_a_second_folder_without_touching_the_first() {
    let (tmp, docs, notes) = two_folders();
    let data = tmp.path().join("data");
    ok(leasehold(&data, &["run", s(&docs), "-q"]));
    let db = rusqlite::Connection::open(data.join("leasehold.db")).unwrap();
    let settings = |db: &rusqlite::Connection| -> Vec<(String, String)> {
        let mut q = db
            .prepare("SELECT name, value FROM meta WHERE name LIKE 'source%' ORDER BY name")
            .unwrap();
        q.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        settings(&db),
        vec![("source_root".to_owned(), s(&docs).to_owned())]
    );
    let keys = |db: &rusqlite::Connection| -> Vec<(String, i64)> {
        let mut q = db
            .prepare("SELECT doc_key, fence FROM jobs ORDER BY doc_key")
            .unwrap();
        q.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let before = keys(&db);
    assert_eq!(
        before.iter().map(|k| k.0.as_str()).collect::<Vec<_>>(),
        ["a.txt", "sub/b.txt"]
    );

    let both = json(&ok(leasehold(&data, &["run", s(&docs), s(&notes), "--json"])));
    assert_eq!(
        (both["unchanged"].clone(), both["indexed"].clone()),
        (2.into(), 2.into()),
        "{both}"
    );
    let after = keys(&db);
    assert_eq!(
        &after[after.len() - 2..],
        &before[..],
        "the first folder's rows are as they were"
    );
    let prefix = format!("{}/", s(&notes));
    assert!(
        after[..2].iter().all(|(k, _)| k.starts_with(&prefix)),
        "{after:?}"
    );
    assert_eq!(
        settings(&db)[0],
        (
            "source_folders".to_owned(),
            serde_json::json!([s(&notes)]).to_string()
        )
    );
}

/// Without `--data` or `LEASEHOLD_DATA` the data directory is the user's
/// (here `$XDG_DATA_HOME/leasehold`), whatever the working directory; a
/// `./leasehold-data` where the command runs is still taken. Linux: the
/// user's data directory is found elsewhere on other systems.
#[cfg(target_os = "linux")]
#[test]
fn the_default_data_directory_is_the_users_and_leasehold_data_still_works() {
    let tmp = tempfile::tempdir().unwrap();
    let xdg = tmp.path().join("xdg");
    let (here, there) = (tmp.path().join("here"), tmp.path().join("there"));
    std::fs::create_dir_all(&here).unwrap();
    std::fs::create_dir_all(&there).unwrap();
    let command = |cwd: &Path, args: &[&str]| -> Output {
        Command::new(BIN)
            .args(args)
            .current_dir(cwd)
            .env_remove("LEASEHOLD_DATA")
            .env_remove("LEASEHOLD_DB")
            .env_remove("LEASEHOLD_CONFIG")
            .env("XDG_DATA_HOME", &xdg)
            .env("HOME", tmp.path().join("home"))
            .output()
            .unwrap()
    };
    ok(command(&here, &["run", samples().to_str().unwrap(), "-q"]));
    assert!(xdg.join("leasehold/leasehold.db").is_file());
    assert!(!here.join("leasehold-data").exists());
    let status = ok(command(&there, &["status", "--json"]));
    let database = json(&status)["database"].as_str().unwrap().to_owned();
    assert!(database.starts_with(s(&xdg)), "{database}");

    // A ./leasehold-data where the command runs is the one taken.
    ok(command(
        &there,
        &["--data", "leasehold-data", "run", s(&here), "-q"],
    ));
    let status = json(&ok(command(&there, &["status", "--json"])));
    let database = status["database"].as_str().unwrap();
    assert!(
        !database.starts_with(s(&xdg)) && database.contains("leasehold-data"),
        "{database}"
    );
    assert_eq!(
        status["sources"],
        serde_json::json!([s(&here.canonicalize().unwrap())])
    );
}

/// A recorded folder that is not there (an unmounted disk) is left out of
/// a run with a warning, its documents kept as they were: only a scan of
/// the folder itself marks files gone.
#[test]
fn a_folder_that_is_not_there_is_left_out_and_its_documents_kept() {
    let (tmp, docs, notes) = two_folders();
    let data = tmp.path().join("data");
    ok(leasehold(&data, &["run", s(&docs), s(&notes), "-q"]));
    // One more queued in the folder, not extracted yet, when it goes away.
    std::fs::write(notes.join("queued.txt"), "notebook queued shared\n").unwrap();
    ok(leasehold(&data, &["discover", s(&notes)]));
    let away = tmp.path().join("away");
    std::fs::rename(&notes, &away).unwrap();
    let out = ok(leasehold(&data, &["run", "--json"]));
    assert_eq!(json(&out)["gone"], 0, "{}", stderr(&out));
    let status = json(&ok(leasehold(&data, &["status", "--json"])));
    assert_eq!(status["counts"]["dead"], 0, "the queued document waits: {status}");
    assert!(stderr(&out).contains(s(&notes)), "{}", stderr(&out));
    let listed = json(&ok(leasehold(&data, &["folders", "list", "--json"])));
    assert_eq!(listed[1]["available"], false, "{listed}");
    assert_eq!(listed[1]["documents"], 3, "{listed}");
    assert_eq!(found(&data, "notebook").len(), 2);
    std::fs::rename(&away, &notes).unwrap();
    let back = json(&ok(leasehold(&data, &["run", "--json"])));
    assert_eq!(
        (back["unchanged"].clone(), back["gone"].clone()),
        (4.into(), 0.into()),
        "{back}"
    );
    // The queued one waits out its minute (the folder was away), kept.
    assert_eq!(
        (back["resumed"].clone(), back["dead"].clone()),
        (1.into(), 0.into()),
        "{back}"
    );
}
