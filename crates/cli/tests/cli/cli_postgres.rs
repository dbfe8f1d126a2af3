//! The command line on the PostgreSQL edition, through the built binary and a
//! real server (tests/common/pg.rs): `--db`, `LEASEHOLD_DB` and the
//! configuration's `[store] db` pick the database; `run`, `status`, `list`
//! and `doctor` work on it; the password never reaches the output.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;

use common::output::{json, ok, stderr, stdout};
use common::{pg, samples, BIN, SAMPLE_PHRASES};

/// A password no message may show.
const PASSWORD: &str = "pw-7f3 q/@:%";

/// The binary with `--data data` and extra environment variables.
fn leasehold_env(data: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--data")
        .arg(data)
        .env_remove("LEASEHOLD_DB")
        .envs(env.iter().copied())
        .args(args)
        .output()
        .expect("run leasehold")
}

/// Neither the password nor any spelling of it a URL carries.
fn assert_no_password(shown: &str) {
    let encoded =
        percent_encoding::utf8_percent_encode(PASSWORD, percent_encoding::NON_ALPHANUMERIC).to_string();
    for spelling in [PASSWORD, encoded.as_str(), "7f3"] {
        assert!(!shown.contains(spelling), "{spelling:?} in: {shown}");
    }
}

/// Everything the process printed.
fn printed(out: &Output) -> String {
    format!("{}{}", stdout(out), stderr(out))
}

/// A fresh database owned by a login role that needs `PASSWORD`; its URL
/// without the password, and with it.
fn database_with_role() -> (String, String) {
    let server = pg::server();
    let role = server.create_role(PASSWORD);
    let admin_url = server.fresh_database();
    let name = admin_url.rsplit('/').next().unwrap().to_owned();
    let mut admin = server.admin();
    admin
        .batch_execute(&format!("ALTER DATABASE {name} OWNER TO {role}"))
        .unwrap();
    let port = server.port();
    let plain = format!("postgres://{role}@127.0.0.1:{port}/{name}");
    let encoded =
        percent_encoding::utf8_percent_encode(PASSWORD, percent_encoding::NON_ALPHANUMERIC).to_string();
    let with_password = format!("postgres://{role}:{encoded}@127.0.0.1:{port}/{name}");
    (plain, with_password)
}

#[test]
fn run_status_list_and_doctor_work_on_postgres_without_showing_the_password() {
    let (plain, url) = database_with_role();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let env = [("LEASEHOLD_DB", url.as_str())];
    let src = samples();
    let run = ok(leasehold_env(
        &data,
        &env,
        &["run", src.to_str().unwrap(), "--json"],
    ));
    let mut shown = printed(&run);
    let summary = json(run);
    assert_eq!(summary["indexed"], SAMPLE_PHRASES.len(), "{summary}");
    assert_eq!(summary["store"]["indexed"], SAMPLE_PHRASES.len(), "{summary}");

    let status = ok(leasehold_env(&data, &env, &["status", "--json"]));
    shown += &printed(&status);
    let status = json(status);
    assert_eq!(status["database"], plain.as_str(), "{status}");
    assert_eq!(status["counts"]["indexed"], SAMPLE_PHRASES.len(), "{status}");

    let list = ok(leasehold_env(&data, &env, &["list"]));
    shown += &printed(&list);
    assert_eq!(
        stdout(&list).lines().count(),
        SAMPLE_PHRASES.len(),
        "{}",
        stdout(&list)
    );

    let doctor = ok(leasehold_env(&data, &env, &["doctor"]));
    shown += &printed(&doctor);
    assert!(
        stdout(&doctor).starts_with(&format!(
            "healthy: {plain} ({n} documents, {n} results verified)",
            n = SAMPLE_PHRASES.len()
        )),
        "{}",
        stdout(&doctor)
    );

    // The queue is in PostgreSQL: nothing of SQLite's in the data directory.
    assert!(!data.join("leasehold.db").exists());
    assert_no_password(&shown);
}

#[test]
fn the_configuration_names_the_database_and_its_password_file() {
    let (plain, _) = database_with_role();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("db.password"), format!("{PASSWORD}\n")).unwrap();
    std::fs::write(
        data.join("leasehold.toml"),
        format!("[store]\ndb = \"{plain}\"\npassword_file = \"db.password\"\n"),
    )
    .unwrap();
    let src = samples();
    let run = ok(leasehold_env(
        &data,
        &[],
        &["run", src.to_str().unwrap(), "--json"],
    ));
    assert_eq!(json(run)["indexed"], SAMPLE_PHRASES.len());
    let status = json(ok(leasehold_env(&data, &[], &["status", "--json"])));
    assert_eq!(status["database"], plain.as_str(), "{status}");
    assert!(!data.join("leasehold.db").exists());
    // `--db` overrides the configuration: a SQLite file beside it (with a
    // mirror of its own: its ids would name the same generation files).
    let file = dir.path().join("other.db");
    let other_mirror = dir.path().join("other-mirror");
    let out = ok(leasehold_env(
        &data,
        &[],
        &[
            "--db",
            file.to_str().unwrap(),
            "--mirror",
            other_mirror.to_str().unwrap(),
            "run",
            src.to_str().unwrap(),
            "--json",
        ],
    ));
    assert_eq!(json(out)["indexed"], SAMPLE_PHRASES.len());
    assert!(file.is_file());
}

#[test]
fn a_refused_login_names_the_database_but_never_the_password() {
    let (plain, _) = database_with_role();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let wrong = plain.replacen('@', ":Wr0ng-s3cret@", 1);
    let src = samples();
    let src = src.to_str().unwrap();
    for env in [vec![("LEASEHOLD_DB", wrong.as_str())], vec![]] {
        let mut args = vec!["run", src];
        if env.is_empty() {
            args = vec!["--db", &wrong, "run", src];
        }
        let out = leasehold_env(&data, &env, &args);
        let shown = printed(&out);
        assert_eq!(out.status.code(), Some(1), "{shown}");
        assert!(shown.contains(&plain), "names the database: {shown}");
        assert!(shown.contains("password authentication failed"), "{shown}");
        assert!(!shown.contains("Wr0ng-s3cret"), "{shown}");
    }
}

#[test]
fn a_mistyped_scheme_is_refused_by_its_name_alone() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let src = samples();
    let typo = format!("postgress://lh:{PASSWORD}@127.0.0.1:1/q");
    // A data directory with a mirror, so `status` gets as far as the database.
    ok(leasehold_env(&data, &[], &["run", src.to_str().unwrap()]));
    for args in [
        vec!["--db", typo.as_str(), "run", src.to_str().unwrap()],
        vec!["--db", typo.as_str(), "status"],
    ] {
        let out = leasehold_env(&data, &[], &args);
        let shown = printed(&out);
        assert_eq!(out.status.code(), Some(2), "{shown}");
        assert!(shown.contains("postgress:// is not a database"), "{shown}");
        assert_no_password(&shown);
    }
    // Nothing was made of the URL as a path.
    assert!(!Path::new("postgress").exists() && !data.join("postgress").exists());
}

#[test]
fn reading_commands_create_nothing_in_an_empty_database() {
    let server = pg::server();
    let url = server.fresh_database();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A data directory with a mirror, from a SQLite run.
    ok(leasehold_env(&data, &[], &["run", samples().to_str().unwrap()]));
    for args in [vec!["status"], vec!["doctor"], vec!["list"]] {
        let out = leasehold_env(&data, &[("LEASEHOLD_DB", url.as_str())], &args);
        let shown = printed(&out);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {shown}");
        assert!(shown.contains("no leasehold database here"), "{args:?}: {shown}");
    }
    let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let tables: i64 = c
        .query_one("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", &[])
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "a reading command made tables");
}

#[test]
fn doctor_reports_a_clock_far_from_the_servers() {
    let url = pg::server().fresh_database();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let env = [("LEASEHOLD_DB", url.as_str())];
    ok(leasehold_env(&data, &env, &["run", samples().to_str().unwrap()]));
    let report = json(ok(leasehold_env(&data, &env, &["doctor", "--json"])));
    let offset = report["checked"]["clock_offset_ms"].as_i64().expect("an offset");
    assert!(offset.abs() < 500, "{report}");
    // This machine's clock five seconds ahead (the test clock offset).
    let clock = dir.path().join("clock-offset");
    std::fs::write(&clock, "5000").unwrap();
    let clock = clock.to_str().unwrap();
    let ahead = [
        ("LEASEHOLD_DB", url.as_str()),
        ("LEASEHOLD_TEST_CLOCK_FILE", clock),
    ];
    let out = leasehold_env(&data, &ahead, &["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", printed(&out));
    assert!(
        stdout(&out).contains("ms from the database server's"),
        "{}",
        printed(&out)
    );
    // Machines allowed 20 s apart (`[store] clock_skew`, half of it each
    // way): five seconds is within it.
    let config = dir.path().join("leasehold.toml");
    std::fs::write(&config, "[store]\nclock_skew = \"20s\"\n").unwrap();
    let out = leasehold_env(&data, &ahead, &["--config", config.to_str().unwrap(), "doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", printed(&out));
}
