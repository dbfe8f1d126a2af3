//! What a user passes is bounded and checked before anything runs, and what
//! the tool prints about files it did not choose cannot work the terminal:
//! sizes too large for any limit, limits that contradict each other, a worker
//! count no machine runs, file names with newlines and escape sequences,
//! links that loop, files nobody may read, and a configuration file that is
//! not TOML. Through the built binary, on real directories and files.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;
use crate::common::output::{stderr, stdout};

use common::{leasehold, BIN};

/// A corpus directory with one small text file, and a data directory beside it.
fn corpus() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (docs, data) = (dir.path().join("docs"), dir.path().join("data"));
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("note.txt"), "a small note").unwrap();
    (dir, docs, data)
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A size no limit can be (more than 64 bits of bytes, or a unit that
/// overflows them) is refused by every size flag with one line naming the
/// flag, the value and why; so is the configuration file's key.
#[test]
fn a_size_too_large_names_the_flag_the_value_and_why() {
    let (dir, docs, data) = corpus();
    for flag in ["--max-input", "--extract-memory", "--max-text"] {
        for value in ["99999999999999999999999", "20000PiB"] {
            let out = leasehold(&data, &["run", arg(&docs), flag, value]);
            let said = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{flag} {value}: {said}");
            let first = said.lines().next().unwrap_or_default();
            assert!(
                first.contains(flag) && first.contains(value) && first.contains("too large"),
                "{flag} {value}: {said}"
            );
            assert!(!said.contains("SI unit"), "{said}");
        }
    }
    assert!(
        !data.join("leasehold.db").exists(),
        "refused before anything was made"
    );

    for (table, key) in [
        ("extract", "memory"),
        ("extract", "max_text"),
        ("outbox", "max_bytes"),
    ] {
        let config = dir.path().join("big.toml");
        std::fs::write(
            &config,
            format!("[{table}]\n{key} = \"99999999999999999999999\"\n"),
        )
        .unwrap();
        let out = leasehold(&data, &["--config", arg(&config), "run", arg(&docs)]);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{said}");
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(
            said.contains("big.toml")
                && said.contains(&format!("[{table}] {key}"))
                && said.contains("too large"),
            "{said}"
        );
    }
}

/// An input limit the extraction memory cannot hold (more than half of it)
/// is refused before anything is made, in one line naming both limits and
/// what would work; the memory may come from the flag, the configuration
/// file's `[extract] memory` or the default. Without `--max-input`, a small
/// memory brings the default input limit down with it.
#[test]
fn an_input_limit_the_extraction_memory_cannot_hold_is_refused() {
    let (dir, docs, data) = corpus();
    let out = leasehold(&data, &["run", arg(&docs), "--max-input", "3GiB"]);
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    for part in [
        "--max-input 3GiB",
        "--extract-memory 1GiB",
        "--max-input 512MiB or less",
        "6GiB",
    ] {
        assert!(said.contains(part), "{part:?} missing: {said}");
    }
    assert!(!data.exists(), "refused before the data directory was made");

    let out = leasehold(
        &data,
        &[
            "run",
            arg(&docs),
            "--max-input",
            "3GiB",
            "--extract-memory",
            "6GiB",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let config = dir.path().join("small.toml");
    std::fs::write(&config, "[extract]\nmemory = \"100MiB\"\n").unwrap();
    let with_file = |extra: &[&str]| {
        let mut args = vec!["--config", arg(&config), "run", arg(&docs), "--json"];
        args.extend_from_slice(extra);
        leasehold(&data, &args)
    };
    let out = with_file(&["--max-input", "60MiB"]);
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("[extract] memory = \"100MiB\"") && said.contains("small.toml"),
        "{said}"
    );
    assert!(said.contains("--max-input 50MiB or less"), "{said}");

    // No --max-input: the limit is half the file's memory, 50 MiB.
    let big = std::fs::File::create(docs.join("big.txt")).unwrap();
    big.set_len(51 << 20).unwrap();
    let out = with_file(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["failures"][0]["key"], "big.txt", "{summary}");
    let why = summary["failures"][0]["error"].as_str().unwrap();
    assert!(why.contains(&format!("{}-byte input limit", 50 << 20)), "{why}");
}

/// A worker count no machine runs (each worker is threads and a process;
/// 100,000 of them aborted the process after 13 s and 515 MB) is refused at
/// once with the most there may be; the most is accepted.
#[test]
fn more_workers_than_a_pool_runs_are_refused_before_any_starts() {
    let (_dir, docs, data) = corpus();
    for (flag, n, most) in [
        ("--workers", "100000", "256"),
        ("--workers", "257", "256"),
        ("--claim-ahead", "1025", "1024"),
    ] {
        let out = leasehold(&data, &["run", arg(&docs), flag, n]);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flag} {n}: {said}");
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(
            said.contains(&format!("{flag} {n}: at most {most}")),
            "{flag} {n}: {said}"
        );
    }
    let out = leasehold(&data, &["run", arg(&docs), "--workers", "256", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["indexed"], 1, "{summary}");
}

/// File names with a newline and an escape sequence: `list`, `search` and
/// the summary's skipped lines show them escaped and quoted (one line per
/// document, no ESC byte reaches the terminal), and `--json` keeps them
/// exact.
#[test]
fn names_with_control_characters_are_escaped_on_the_terminal_and_exact_in_json() {
    let (_dir, docs, data) = corpus();
    let (newline, escape) = ("new\nline.txt", "esc\u{1b}[31mred.txt");
    std::fs::write(docs.join(newline), "lighthouse keeper").unwrap();
    std::fs::write(docs.join(escape), "lighthouse beam \u{1b}[2J").unwrap();
    // A failure whose reason names the file: the reason is shown on one line.
    std::os::unix::fs::symlink("loop\u{1b}[2J", docs.join("loop\u{1b}[2J")).unwrap();
    let fifo = std::ffi::CString::new(arg(&docs.join("pipe\u{1b}]0;title\u{7}"))).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo touches no memory of ours.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let no_raw = |what: &str, text: &str| {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{what}: {text:?}"
        );
    };

    let out = leasehold(&data, &["run", arg(&docs)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = String::from_utf8_lossy(&out.stdout);
    no_raw("run", &summary);
    no_raw("run's progress", &stderr(&out));
    assert!(
        summary.contains(r#"failed "loop\u{1b}[2J": cannot read"#),
        "{summary}"
    );
    assert!(
        summary.contains(r#"skipped "#) && summary.contains(r"pipe\u{1b}]0;title\u{7}"),
        "{summary}"
    );

    let out = leasehold(&data, &["list"]);
    let list = String::from_utf8_lossy(&out.stdout);
    no_raw("list", &list);
    assert_eq!(list.lines().count(), 4, "one line per document: {list}");
    assert!(list.contains(r#""new\nline.txt""#), "{list}");
    assert!(list.contains(r#""esc\u{1b}[31mred.txt""#), "{list}");
    assert!(
        list.lines().any(|l| l.starts_with("note.txt ")),
        "plain names as they are: {list}"
    );

    let out = leasehold(&data, &["search", "lighthouse"]);
    let found = String::from_utf8_lossy(&out.stdout);
    no_raw("search", &found);
    assert_eq!(
        found.lines().count(),
        7,
        "three lines per match, then the total: {found}"
    );
    assert!(found.contains(r#"/new\nline.txt""#), "{found}");

    for args in [&["list", "--json"][..], &["search", "lighthouse", "--json"]] {
        let out = leasehold(&data, args);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows = v.get("hits").unwrap_or(&v).as_array().unwrap().clone();
        let mut keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
        keys.sort();
        keys.retain(|k| *k != "note.txt" && !k.starts_with("loop"));
        assert_eq!(keys, [escape, newline], "{args:?}");
    }
}

/// `leasehold` bound by file permissions as any user is: run as root, it
/// loses the capabilities that let root read every file (dropped from the
/// bounding set before exec, so neither it nor its children have them).
fn bound_by_permissions(data: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("--data").arg(data).args(args);
    #[cfg(target_os = "linux")]
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        const CAP_DAC_OVERRIDE: libc::c_ulong = 1;
        const CAP_DAC_READ_SEARCH: libc::c_ulong = 2;
        // SAFETY: the closure runs in the forked child before exec and only
        // calls prctl, which is async-signal-safe, on plain values.
        unsafe {
            cmd.pre_exec(|| {
                for cap in [CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH] {
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
    cmd.output().expect("run leasehold")
}

/// A loop of symbolic links and a file nobody may read fail for good at
/// once, each saying what it is (not "will retry" five times); once the
/// file's permissions are fixed, a rerun takes it.
#[test]
fn a_link_loop_and_an_unreadable_file_fail_for_good_and_a_rerun_takes_the_fixed_file() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let (_dir, docs, data) = corpus();
    symlink("loop-b", docs.join("loop-a")).unwrap();
    symlink("loop-a", docs.join("loop-b")).unwrap();
    symlink("self", docs.join("self")).unwrap();
    let secret = docs.join("secret.txt");
    std::fs::write(&secret, "private words").unwrap();
    let mode = |m| std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(m)).unwrap();
    mode(0o000);

    let out = bound_by_permissions(&data, &["run", arg(&docs), "--json"]);
    let said = stderr(&out);
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("will retry"), "{said}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&summary["dead"], &summary["retrying"]),
        (&4.into(), &0.into()),
        "{summary}"
    );
    for failure in summary["failures"].as_array().unwrap() {
        let (key, error) = (
            failure["key"].as_str().unwrap(),
            failure["error"].as_str().unwrap(),
        );
        let expected = match key {
            "secret.txt" => "permission denied (fix its permissions, then run again)",
            _ => "a loop of symbolic links",
        };
        assert!(
            error.contains(expected) && error.contains(&format!("/{key}")),
            "{failure}"
        );
    }

    mode(0o644);
    let out = bound_by_permissions(&data, &["run", arg(&docs), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["indexed"], 1, "{summary}");
    assert_eq!(summary["store"]["dead"], 3, "only the loops stay dead: {summary}");
    let out = leasehold(&data, &["show", "secret.txt"]);
    assert_eq!(stdout(&out), "private words", "{}", stderr(&out));
}

/// A `leasehold.toml` in the data directory that is not TOML: the commands
/// that only read go on with a warning naming the file and the parse error
/// (on stderr; stdout stays theirs); `doctor` reports it as a problem; the
/// commands that need the configuration stop with one line naming both.
#[test]
fn a_broken_configuration_file_blocks_work_but_not_reading() {
    let (_dir, docs, data) = corpus();
    let out = leasehold(&data, &["run", arg(&docs)]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(data.join("leasehold.toml"), "this is [not toml\n").unwrap();
    let named = |said: &str| said.contains("leasehold.toml") && said.contains("TOML parse error at line 1");

    for args in [
        &["status"][..],
        &["status", "--json"],
        &["list", "--json"],
        &["inspect", "note.txt"],
        &["show", "note.txt"],
        &["search", "small"],
        &["metrics"],
    ] {
        let out = leasehold(&data, args);
        let said = stderr(&out);
        assert!(out.status.success(), "{args:?}: {said}");
        assert!(
            said.starts_with("leasehold: warning: ") && named(&said),
            "{args:?}: {said}"
        );
        assert!(!stdout(&out).contains("TOML"), "{args:?}: the warning on stdout");
        if args.contains(&"--json") {
            serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("stdout stays JSON");
        }
    }
    assert_eq!(stdout(&leasehold(&data, &["show", "note.txt"])), "a small note");

    let out = leasehold(&data, &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{report}");
    assert_eq!(problems[0]["kind"], "config", "{report}");
    assert!(named(problems[0]["message"].as_str().unwrap()), "{report}");
    assert_eq!(
        report["checked"]["documents"], 1,
        "the other checks still ran: {report}"
    );

    for args in [
        &["run", arg(&docs)][..],
        &["work", "--until-empty"],
        &["gc"],
        &["retry", "note.txt"],
        &["auth", "status"],
    ] {
        let out = leasehold(&data, args);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
        assert_eq!(said.lines().count(), 1, "{args:?}: {said}");
        assert!(named(&said), "{args:?}: {said}");
    }
}
