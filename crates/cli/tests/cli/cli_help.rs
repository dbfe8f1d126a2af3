//! The command line as a user meets it: help for every flag, each command
//! showing only its own flags, sizes and durations as people write them,
//! environment variables, completions and the manual page, and the packaging
//! files. Through the built binary, except the walk over every argument,
//! which reads the same clap definition the binary parses with.

use std::process::{Command, Output};

use crate::common;
use crate::common::output::{stderr, stdout};

use common::{leasehold, samples, BIN};

fn bare(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run leasehold")
}

/// Every argument of `cmd` and its subcommands without help, as `path: --flag`.
fn without_help(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
    for arg in cmd.get_arguments() {
        let builtin = matches!(arg.get_id().as_str(), "help" | "version");
        if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
            missing.push(format!("{path}: {}", arg.get_id()));
        }
    }
    for sub in cmd.get_subcommands() {
        without_help(sub, &format!("{path} {}", sub.get_name()), missing);
    }
}

#[test]
fn every_argument_of_every_command_has_help() {
    let mut cmd = leasehold_cli::command();
    cmd.build();
    let mut missing = Vec::new();
    without_help(&cmd, "leasehold", &mut missing);
    assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    // And the built binary prints it: `--json` of `status` was one without.
    let help = stdout(&bare(&["status", "--help"]));
    let json_line = help
        .lines()
        .find(|l| l.contains("--json"))
        .expect("--json listed");
    assert!(json_line.trim() != "--json", "{help}");
}

#[test]
fn commands_that_do_no_work_do_not_list_the_work_flags() {
    let work_flags = [
        "--workers",
        "--lease",
        "--max-input",
        "--max-attempts",
        "--extract-timeout",
        "--in-process",
    ];
    for args in [
        &["status", "--help"][..],
        &["inspect", "--help"],
        &["--help"],
        &["auth", "status", "--help"],
    ] {
        let out = bare(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let help = stdout(&out);
        for flag in work_flags {
            assert!(!help.contains(flag), "{args:?} lists {flag}:\n{help}");
        }
        assert!(
            help.contains("--data"),
            "{args:?} lost the global --data:\n{help}"
        );
    }
    for args in [&["run", "--help"][..], &["work", "--help"], &["sync", "--help"]] {
        let help = stdout(&bare(args));
        for flag in work_flags {
            assert!(help.contains(flag), "{args:?} does not list {flag}:\n{help}");
        }
    }
    assert!(stdout(&bare(&["discover", "--help"])).contains("--max-input"));
}

#[test]
fn work_flags_are_still_taken_before_the_subcommand() {
    let data = tempfile::tempdir().unwrap();
    let dir = samples();
    let out = leasehold(
        data.path(),
        &["--workers", "2", "--lease", "10s", "run", dir.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // After the subcommand wins over before it.
    let out = leasehold(
        data.path(),
        &["--workers", "2", "work", "--until-empty", "--workers", "0"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--workers"), "{}", stderr(&out));
}

#[test]
fn sizes_take_units_and_mean_them() {
    let data = tempfile::tempdir().unwrap();
    let corpus = tempfile::tempdir().unwrap();
    std::fs::write(corpus.path().join("small.txt"), "a small note").unwrap();
    std::fs::write(corpus.path().join("large.txt"), "word ".repeat(400)).unwrap();
    let dir = corpus.path().to_str().unwrap();
    let out = leasehold(data.path(), &["run", dir, "--max-input", "1KiB", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["indexed"], 1, "{summary}");
    assert_eq!(summary["failed"], 1, "{summary}");
    assert_eq!(summary["failures"][0]["key"], "large.txt", "{summary}");

    let data = tempfile::tempdir().unwrap();
    let out = leasehold(
        data.path(),
        &["run", dir, "--max-input", "64MiB", "--max-text", "1MB", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["indexed"], 2, "{summary}");

    let out = leasehold(data.path(), &["run", dir, "--max-input", "64 parsecs"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("64MiB"),
        "says what a size looks like: {}",
        stderr(&out)
    );
}

#[test]
fn a_bad_duration_says_what_a_duration_looks_like() {
    let data = tempfile::tempdir().unwrap();
    for flag in ["--lease", "--extract-timeout", "--extract-cpu"] {
        let out = leasehold(data.path(), &["work", "--until-empty", flag, "banana"]);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{said}");
        let first = said.lines().next().unwrap_or_default();
        assert!(first.contains(flag) && first.contains("banana"), "{said}");
        assert!(first.contains("a number with a unit, e.g. 30s"), "{said}");
        assert!(!said.contains("expected number at"), "{said}");
    }
}

#[test]
fn environment_variables_name_the_data_directory_and_the_configuration() {
    let home = tempfile::tempdir().unwrap();
    let from_env = home.path().join("from-env");
    let out = Command::new(BIN)
        .args(["run", samples().to_str().unwrap()])
        .env("LEASEHOLD_DATA", &from_env)
        .env_remove("LEASEHOLD_CONFIG")
        .current_dir(home.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(from_env.join("leasehold.db").exists(), "LEASEHOLD_DATA not used");
    assert!(
        !home.path().join("leasehold-data").exists(),
        "the default was used"
    );

    // --data wins over the variable: `status` looks in the flagged directory
    // (which does not exist) although the variable's one does.
    let flagged = home.path().join("flagged");
    let out = Command::new(BIN)
        .args(["--data", flagged.to_str().unwrap(), "status"])
        .env("LEASEHOLD_DATA", &from_env)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("flagged"), "{}", stderr(&out));

    // `status` only reads: it names the broken file in a warning and goes on.
    let config = home.path().join("odd.toml");
    std::fs::write(&config, "this is = = not toml").unwrap();
    let out = Command::new(BIN)
        .args(["status"])
        .env("LEASEHOLD_DATA", &from_env)
        .env("LEASEHOLD_CONFIG", &config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("odd.toml"),
        "LEASEHOLD_CONFIG not read: {}",
        stderr(&out)
    );
}

#[test]
fn completions_and_manual_pages_come_from_the_flags() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = bare(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for word in ["leasehold", "inspect", "max-input"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let out = bare(&["man"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = stdout(&out);
    assert!(page.contains(".TH leasehold 1"), "{page}");
    assert!(page.contains("inspect"), "{page}");
    let run_page = stdout(&bare(&["man", "run"]));
    assert!(run_page.contains(".TH leasehold-run 1"), "{run_page}");
    assert!(run_page.contains("max\\-input"), "{run_page}");
    let out = bare(&["man", "nonesuch"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_licences_cargo_names_are_there() {
    let root = &common::workspace();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("license = \"MIT OR Apache-2.0\""));
    let mit = std::fs::read_to_string(root.join("LICENSE-MIT")).expect("LICENSE-MIT");
    assert!(mit.contains("Permission is hereby granted, free of charge"));
    assert!(mit.contains("The leasehold developers"));
    let apache = std::fs::read_to_string(root.join("LICENSE-APACHE")).expect("LICENSE-APACHE");
    assert!(apache.contains("Apache License") && apache.contains("Version 2.0, January 2004"));
    assert!(apache.contains("END OF TERMS AND CONDITIONS"));
}

/// `cargo install` and `cargo build --release` build with the package's own
/// release profile: it stays the lean default; symbols are for the benches
/// and the `profiling` profile.
#[test]
fn the_release_profile_carries_no_debug_info() {
    let root = &common::workspace();
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let profiles = manifest.get("profile").and_then(|p| p.as_table());
    let release = profiles.and_then(|p| p.get("release")).and_then(|r| r.as_table());
    assert!(
        release.is_none_or(|r| !r.contains_key("debug")),
        "[profile.release] sets debug: {release:?}"
    );
    let profiling = profiles
        .and_then(|p| p.get("profiling"))
        .and_then(|r| r.as_table());
    let profiling = profiling.expect("[profile.profiling] for profilers");
    assert_eq!(
        profiling.get("inherits").and_then(|v| v.as_str()),
        Some("release")
    );
    assert!(profiling.contains_key("debug"));
    let bench = profiles.and_then(|p| p.get("bench")).and_then(|r| r.as_table());
    assert!(
        bench.is_some_and(|b| b.contains_key("debug")),
        "benches keep their symbols"
    );
}

#[test]
fn a_failure_names_its_document_once() {
    let data = tempfile::tempdir().unwrap();
    let corpus = tempfile::tempdir().unwrap();
    std::fs::write(corpus.path().join("x.pdf"), "%PDF-1.4 not really").unwrap();
    std::fs::write(corpus.path().join("huge.txt"), "word ".repeat(400)).unwrap();
    let dir = corpus.path().to_str().unwrap();
    let out = leasehold(data.path(), &["run", dir, "--max-input", "1024"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    for key in ["x.pdf", "huge.txt"] {
        let line = said
            .lines()
            .find(|l| l.contains(key))
            .unwrap_or_else(|| panic!("{key} not reported: {said}"));
        assert_eq!(line.matches(key).count(), 1, "{line}");
        let shown = stdout(&leasehold(data.path(), &["inspect", key, "--json"]));
        let doc: serde_json::Value = serde_json::from_str(&shown).expect("inspect --json");
        let error = doc.to_string();
        assert!(error.contains("last_error"), "{doc}");
        let last = doc.pointer("/job/last_error").or_else(|| doc.get("last_error"));
        let last = last
            .and_then(|e| e.as_str())
            .unwrap_or_else(|| panic!("no last_error: {doc}"));
        assert!(!last.contains(key), "the stored reason repeats the key: {last}");
    }
}
