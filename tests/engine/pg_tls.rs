//! TLS to PostgreSQL with libpq's meanings (`store/postgres/tls.rs`), against
//! a real server started with `ssl=on` and certificates this test makes (an
//! authority, a server certificate for `localhost` and 127.0.0.1, a client
//! certificate, and an authority that signed none of them). For every mode
//! the store connects or refuses exactly as `psql` does with the same URL,
//! and the server says whether the session is encrypted.

use std::path::Path;
use std::process::Command;

use leasehold::{Store, StoreOptions};

use crate::common::pg::{self, PgServer};

/// The role that logs in by its client certificate alone, and its database.
const CERT_ROLE: &str = "lh_cert_role";
const CERT_DB: &str = "lh_cert_db";

/// `openssl` with `args` in `dir`; panics with its output when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `openssl req` with a new P-256 key (unencrypted) written to `key`, and
/// `more` arguments.
fn new_key_request(dir: &Path, key: &str, more: &[&str]) {
    let mut args = vec![
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        key,
    ];
    args.extend_from_slice(more);
    openssl(dir, &args);
}

/// An authority `name` (`name.key`, `name.crt`).
fn authority(dir: &Path, name: &str) {
    let (key, crt, subject) = (
        format!("{name}.key"),
        format!("{name}.crt"),
        format!("/CN={name}"),
    );
    new_key_request(
        dir,
        &key,
        &[
            "-x509",
            "-out",
            &crt,
            "-days",
            "2",
            "-subj",
            &subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// A certificate `name` for `cn`, signed by authority `ca`, with the
/// extensions in `ext` (an `openssl x509 -extfile`).
fn signed(dir: &Path, name: &str, cn: &str, ca: &str, ext: &str) {
    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    let ext_file = format!("{name}.ext");
    std::fs::write(dir.join(&ext_file), ext).unwrap();
    new_key_request(dir, &key, &["-out", &csr, "-subj", &format!("/CN={cn}")]);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext_file,
        ],
    );
}

/// The certificates, and a server that uses them.
fn tls_server(dir: &Path) -> PgServer {
    authority(dir, "ca");
    authority(dir, "other_ca");
    signed(
        dir,
        "server",
        "localhost",
        "ca",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    );
    signed(
        dir,
        "client",
        CERT_ROLE,
        "ca",
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
    );
    let server = pg::private_tls_server(dir, CERT_ROLE);
    let mut admin = server.admin();
    admin
        .batch_execute(&format!("CREATE ROLE {CERT_ROLE} LOGIN"))
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {CERT_DB} OWNER {CERT_ROLE}"))
        .unwrap();
    server
}

/// Whether `psql` connects with `url`, and whether its session is encrypted.
fn psql(url: &str, home: &Path) -> Option<bool> {
    let out = Command::new("psql")
        // -w: never ask for a password (a case that falls to a password line
        // fails at once instead of waiting on the terminal).
        .args([
            url,
            "-w",
            "-Atc",
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        ])
        // No ~/.postgresql of the machine's: the default root file is absent.
        .env("HOME", home)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("run psql (apt-get install postgresql-client)");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim() == "t")
}

/// Whether the store opens `url`, and whether the server sees its sessions
/// in the URL's database encrypted (they name themselves `leasehold`), or
/// the error's text.
fn store(server: &PgServer, url: &str) -> Result<bool, String> {
    let opened = Store::open(url, StoreOptions::default()).map_err(|e| e.to_string())?;
    let after_host = url.split_once("://").unwrap().1.split_once('/').unwrap().1;
    let db = after_host.split('?').next().unwrap();
    let encrypted: Option<bool> = server
        .admin()
        .query_one(
            "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
             WHERE a.application_name = 'leasehold' AND a.datname = $1",
            &[&db],
        )
        .unwrap()
        .get(0);
    let encrypted = encrypted.unwrap_or_else(|| {
        let seen: Vec<(Option<String>, Option<String>)> = server
            .admin()
            .query("SELECT application_name, datname FROM pg_stat_activity", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        panic!("no session of the store's in {db}: {seen:?} ({url})")
    });
    drop(opened);
    Ok(encrypted)
}

#[test]
fn every_sslmode_connects_or_refuses_as_libpq_does() {
    // The store reads this process's own default root file, psql an empty
    // HOME's: with such a file here the two would judge `require` apart.
    let own_root = std::env::var_os("HOME").map(|h| Path::new(&h).join(".postgresql/root.crt"));
    if own_root.as_ref().is_some_and(|r| r.exists()) {
        eprintln!("skipped: {} exists on this machine", own_root.unwrap().display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = tls_server(d);
    let port = server.port();
    let ca = d.join("ca.crt").display().to_string();
    let other = d.join("other_ca.crt").display().to_string();
    let (cert, key) = (
        d.join("client.crt").display().to_string(),
        d.join("client.key").display().to_string(),
    );
    // The certificate role works in a database of its own (it may not
    // create tables in another's `public` schema).
    let url = |host: &str, user: &str, query: &str| {
        let db = if user == CERT_ROLE { CERT_DB } else { "postgres" };
        format!("postgres://{user}@{host}:{port}/{db}?hostaddr=127.0.0.1&{query}")
    };
    let su = pg::SUPERUSER;
    // (URL, connects, encrypted): the table libpq's documentation gives.
    let cases: Vec<(String, Option<bool>)> = vec![
        (url("localhost", su, "sslmode=disable"), Some(false)),
        (url("localhost", su, "application_name=leasehold"), Some(true)), // prefer, the default
        (url("localhost", su, "sslmode=prefer"), Some(true)),
        // An address without a host name: encrypted all the same.
        (
            format!("postgres://{su}@/postgres?hostaddr=127.0.0.1&port={port}&sslmode=require"),
            Some(true),
        ),
        (url("localhost", su, "sslmode=require"), Some(true)),
        (
            url("localhost", su, &format!("sslmode=require&sslrootcert={other}")),
            None,
        ),
        (
            url("localhost", su, &format!("sslmode=verify-ca&sslrootcert={ca}")),
            Some(true),
        ),
        (
            url("localhost", su, &format!("sslmode=verify-ca&sslrootcert={other}")),
            None,
        ),
        (url("localhost", su, "sslmode=verify-full"), None),
        (
            url("localhost", su, &format!("sslmode=verify-full&sslrootcert={ca}")),
            Some(true),
        ),
        (
            url("127.0.0.1", su, &format!("sslmode=verify-full&sslrootcert={ca}")),
            Some(true),
        ),
        (
            url(
                "wrong.example",
                su,
                &format!("sslmode=verify-full&sslrootcert={ca}"),
            ),
            None,
        ),
        (
            url(
                "wrong.example",
                su,
                &format!("sslmode=verify-ca&sslrootcert={ca}"),
            ),
            Some(true),
        ),
        (
            url(
                "localhost",
                CERT_ROLE,
                &format!("sslmode=verify-full&sslrootcert={ca}"),
            ),
            None,
        ),
        (
            url(
                "localhost",
                CERT_ROLE,
                &format!("sslmode=verify-full&sslrootcert={ca}&sslcert={cert}&sslkey={key}"),
            ),
            Some(true),
        ),
    ];
    for (url, expected) in &cases {
        let oracle = psql(url, home.path());
        assert_eq!(oracle, *expected, "psql with {url}");
        let ours = store(&server, url);
        assert_eq!(
            ours.as_ref().ok().copied(),
            *expected,
            "leasehold with {url}: {ours:?}"
        );
    }
    // The public roots (psql 15 here reads `system` as a file name: no oracle)
    // mean verify-full, and they do not vouch for the test's authority.
    let public = store(&server, &url("localhost", su, "sslrootcert=system")).unwrap_err();
    assert!(public.contains("not signed by an authority"), "{public}");
    // The refusals say why, in one line.
    let wrong_ca = store(
        &server,
        &url(
            "localhost",
            su,
            &format!("sslmode=verify-full&sslrootcert={other}"),
        ),
    )
    .unwrap_err();
    assert!(
        wrong_ca.contains("not signed by an authority among the root certificates")
            && !wrong_ca.contains('\n'),
        "{wrong_ca}"
    );
    let wrong_host = store(
        &server,
        &url(
            "wrong.example",
            su,
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
    )
    .unwrap_err();
    assert!(
        wrong_host.contains("wrong.example") && !wrong_host.contains('\n'),
        "{wrong_host}"
    );
    let no_root = store(&server, &url("localhost", su, "sslmode=verify-full")).unwrap_err();
    assert!(no_root.contains("sslrootcert"), "{no_root}");
}

#[test]
fn a_server_without_tls_is_refused_by_require_and_taken_plain_by_prefer() {
    let home = tempfile::tempdir().unwrap();
    let server = pg::server();
    let base = server.fresh_database();
    let with = |query: &str| format!("{base}?{query}");
    for (url, expected) in [
        (with("sslmode=prefer"), Some(false)),
        (with("sslmode=disable"), Some(false)),
        (with("sslmode=require"), None),
    ] {
        assert_eq!(psql(&url, home.path()), expected, "psql with {url}");
        let ours = store(server, &url);
        assert_eq!(
            ours.as_ref().ok().copied(),
            expected,
            "leasehold with {url}: {ours:?}"
        );
    }
}
