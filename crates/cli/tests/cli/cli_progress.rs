//! Through the built binary: what a run shows while it works. The progress
//! bar on a pseudo-terminal (`script` from util-linux), plain lines without
//! control codes when piped, `--quiet`, `--verbose`, and what `work` waits for.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common;

use common::{leasehold, BIN};

/// A data directory with `n` documents discovered, two of which (d0001,
/// d0003) are removed from the folder afterwards, so they fail when worked.
fn discovered_with_two_gone(n: usize) -> (tempfile::TempDir, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let docs = tempfile::tempdir().unwrap();
    for i in 0..n {
        std::fs::write(docs.path().join(format!("d{i:04}.txt")), format!("doc {i}\n")).unwrap();
    }
    let out = leasehold(data.path(), &["discover", docs.path().to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    std::fs::remove_file(docs.path().join("d0001.txt")).unwrap();
    std::fs::remove_file(docs.path().join("d0003.txt")).unwrap();
    (data, docs)
}

/// `work --until-empty` with stdout and stderr piped.
fn work_piped(data: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--data")
        .arg(data)
        .args(["work", "--until-empty", "--max-attempts", "1"])
        .args(extra)
        .env("LEASEHOLD_TEST_EXTRACTOR", "sleep:1:2")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn on_a_terminal_the_bar_shows_elapsed_rate_and_estimate_and_failures_above_it() {
    let (data, _docs) = discovered_with_two_gone(150);
    // `script` runs the command on a pseudo-terminal and copies what it
    // wrote (stdout and stderr both) to our stdout.
    let command = format!(
        "{BIN} --data {} work --until-empty --workers 1 --max-attempts 1",
        data.path().display()
    );
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("LEASEHOLD_TEST_EXTRACTOR", "sleep:5:10")
        .stdin(Stdio::null())
        .output()
        .expect("`script` (util-linux) runs the command on a pseudo-terminal");
    let screen = text(&out.stdout);
    assert!(out.status.success(), "{screen}");
    let bar = regex_like_progress(&screen).unwrap_or_else(|| panic!("no progress line in {screen:?}"));
    assert!(bar.contains(" elapsed, "), "{bar}");
    assert!(bar.contains("/s, about ") && bar.contains(" left"), "{bar}");
    // No rate with four decimals.
    assert!(
        !bar.split(", ")
            .any(|p| p.ends_with("/s") && p.split('.').nth(1).is_some_and(|d| d.len() > 3)),
        "{bar}"
    );
    // Each failure once, above the bar (before the summary), not in a second list.
    for key in ["d0001.txt", "d0003.txt"] {
        let line = format!("failed \"{key}\" (dead)");
        assert_eq!(screen.matches(&line).count(), 1, "{key}: {screen:?}");
        assert!(screen.find(&line) < screen.find("indexed 148"), "{screen:?}");
    }
    assert!(screen.contains("2 failure(s) shown above"), "{screen:?}");
}

/// The first drawn bar message with an estimate, e.g. "12/150 done, 0
/// failed, 0s elapsed, 65.1/s, about 2s left".
fn regex_like_progress(screen: &str) -> Option<&str> {
    let start = screen.find("/150 done, ")?;
    let line_start = screen[..start].rfind(' ').map_or(0, |i| i + 1);
    let end = screen[start..].find(" left")? + start + " left".len();
    Some(&screen[line_start..end])
}

#[test]
fn piped_progress_has_no_control_codes_and_failures_are_said_once() {
    let (data, _docs) = discovered_with_two_gone(30);
    let out = work_piped(data.path(), &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains('\x1b') && !stderr.contains('\r'), "{stderr:?}");
    assert_eq!(stderr.matches("failed \"d0001.txt\"").count(), 1, "{stderr}");
    // Piped, the summary keeps its own list (it may be a file of its own).
    assert!(stdout.contains("failed \"d0001.txt\""), "{stdout}");
}

#[test]
fn quiet_prints_the_summary_only() {
    let (data, _docs) = discovered_with_two_gone(30);
    let out = work_piped(data.path(), &["--quiet"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stderr, "", "quiet, yet stderr said something");
    assert!(stdout.starts_with("indexed 28, failed 2"), "{stdout}");
    assert!(stdout.contains("failed \"d0001.txt\""), "{stdout}");
}

#[test]
fn verbose_says_each_document_as_it_finishes() {
    let (data, _docs) = discovered_with_two_gone(30);
    let out = work_piped(data.path(), &["-v"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for i in [0, 2, 4, 29] {
        assert!(
            stderr.contains(&format!("indexed \"d{i:04}.txt\" -> ")),
            "{i}: {stderr}"
        );
    }
    let quiet_and_verbose = leasehold(data.path(), &["-q", "-v", "status"]);
    assert_eq!(
        quiet_and_verbose.status.code(),
        Some(2),
        "-q and -v together are refused"
    );
}

/// `work` without `--until-empty` says on stderr what it waits for, then
/// stops on Ctrl-C with its summary.
#[test]
fn an_idle_worker_says_what_it_waits_for() {
    let data = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let out = leasehold(data.path(), &["discover", empty.path().to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let mut child = Command::new(BIN)
        .arg("--data")
        .arg(data.path())
        .arg("work")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    kill_after_a_minute(&child);
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    // Past the log's lines (`work` logs its start at info).
    while !line.starts_with("leasehold: ") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "stderr ended");
    }
    assert_eq!(
        line,
        "leasehold: waiting for work (nothing queued; `leasehold discover` adds documents)\n"
    );
    common::signal(child.id(), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert!(
        text(&out.stdout).contains("interrupted by SIGINT, 0 left"),
        "{out:?}"
    );
}

/// Nothing waits forever: if the line awaited from the child never comes,
/// the child is killed, its stderr ends, and the test fails instead of hanging.
fn kill_after_a_minute(child: &std::process::Child) {
    let pid = child.id() as libc::pid_t;
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        // SAFETY: kill(2) on our own child's pid (a no-op error if it has been reaped).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
}
