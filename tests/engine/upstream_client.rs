//! The upstream HTTP client (`leasehold::upstream`) against a real server:
//! listing, content, delivery, and how each failure answer is classified.

use crate::common::upstream_server;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use leasehold::secret::Secret;
use leasehold::upstream::{Account, Delivery, HttpClient, UpstreamError};
use upstream_server::{Mode, Upstream};

const PASSWORD: &str = "correct-horse-battery";

fn client() -> HttpClient {
    HttpClient::new(Duration::from_secs(5))
}

fn account(username: &str, password: &str) -> Account {
    Account::new(format!("acct-{username}"), username, Secret::new(password))
}

/// A server with account `alice` (password [`PASSWORD`]) and one document.
fn upstream() -> (Upstream, Account) {
    let up = Upstream::start();
    up.add_account("alice", PASSWORD);
    up.add_document("doc-1", "v1", "one.txt", "text/plain", b"hello upstream");
    (up, account("alice", PASSWORD))
}

fn list_err(up: &Upstream, acct: &Account) -> UpstreamError {
    client()
        .list(&up.base_url(), acct, None)
        .expect_err("the request should fail")
}

fn assert_password_hidden(err: &UpstreamError) {
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(PASSWORD), "password leaked: {shown}");
}

#[test]
fn list_follows_cursor_across_pages() {
    let (up, acct) = upstream();
    for i in 2..=120 {
        up.add_document(&format!("doc-{i}"), "v1", &format!("{i}.txt"), "text/plain", b"x");
    }
    let c = client();
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = Vec::new();
    loop {
        let page = c.list(&up.base_url(), &acct, cursor.as_deref()).expect("list");
        pages.push(page.documents.len());
        ids.extend(page.documents.into_iter().map(|d| d.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, vec![50, 50, 20]);
    let want: Vec<String> = (1..=120).map(|i| format!("doc-{i}")).collect();
    assert_eq!(ids, want);
    let paths: Vec<String> = up.request_log().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        vec!["/documents", "/documents?cursor=50", "/documents?cursor=100"]
    );
}

#[test]
fn list_returns_document_fields_and_accepts_trailing_slash() {
    let (up, acct) = upstream();
    let page = client()
        .list(&format!("{}/", up.base_url()), &acct, None)
        .expect("list");
    assert_eq!(page.next_cursor, None);
    let doc = &page.documents[0];
    assert_eq!(
        (
            doc.id.as_str(),
            doc.version.as_str(),
            doc.name.as_str(),
            doc.content_type.as_str()
        ),
        ("doc-1", "v1", "one.txt", "text/plain")
    );
}

#[test]
fn content_returns_the_bytes_for_an_id_that_needs_encoding() {
    let (up, acct) = upstream();
    let bytes: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    up.add_document("dir/a b?c%", "v1", "odd.bin", "application/octet-stream", &bytes);
    let got = client()
        .content(&up.base_url(), &acct, "dir/a b?c%", 10_000)
        .expect("content");
    assert_eq!(got, bytes);
    let got = client()
        .content(&up.base_url(), &acct, "doc-1", 10_000)
        .expect("content");
    assert_eq!(got, b"hello upstream");
}

#[test]
fn deliver_records_one_batch() {
    let (up, acct) = upstream();
    let results = vec![
        Delivery {
            key: "doc-1".into(),
            version: "v1".into(),
            checksum: "abc".into(),
            text: "hello".into(),
        },
        Delivery {
            key: "doc-2".into(),
            version: "v3".into(),
            checksum: "def".into(),
            text: "wörld".into(),
        },
    ];
    client()
        .deliver(&up.sink_url(), &acct, &results)
        .expect("deliver");
    let batches = up.sink_batches();
    assert_eq!(batches.len(), 1);
    let got: Vec<Delivery> = batches[0]
        .iter()
        .map(|v| serde_json::from_value(v.clone()).expect("a delivery"))
        .collect();
    assert_eq!(got, results);
}

#[test]
fn wrong_password_is_auth() {
    let (up, _) = upstream();
    let err = list_err(&up, &account("alice", "wrong-password"));
    assert!(
        matches!(&err, UpstreamError::Auth { status: 401, account, .. } if account == "acct-alice"),
        "{err:?}"
    );
    assert!(err.is_credential_problem() && !err.is_transient());
    assert_eq!(up.requests("alice"), 1);
}

#[test]
fn unknown_user_is_auth() {
    let (up, _) = upstream();
    let err = list_err(&up, &account("mallory", PASSWORD));
    assert!(matches!(err, UpstreamError::Auth { status: 401, .. }), "{err:?}");
}

#[test]
fn reject401_mode_is_auth_even_with_the_right_password() {
    let (up, acct) = upstream();
    up.set_mode("alice", Mode::Reject401);
    let err = list_err(&up, &acct);
    assert!(matches!(err, UpstreamError::Auth { status: 401, .. }), "{err:?}");
    assert_password_hidden(&err);
}

#[test]
fn lock423_with_retry_after_is_locked_for_7s() {
    let (up, acct) = upstream();
    up.set_mode("alice", Mode::Lock423 { retry_after: Some(7) });
    let err = list_err(&up, &acct);
    assert!(
        matches!(&err, UpstreamError::Locked { retry_after: Some(d), account, .. } if *d == Duration::from_secs(7) && account == "acct-alice"),
        "{err:?}"
    );
    assert!(err.is_credential_problem());
}

#[test]
fn lock423_without_retry_after_is_locked_without_one() {
    let (up, acct) = upstream();
    up.set_mode("alice", Mode::Lock423 { retry_after: None });
    let err = list_err(&up, &acct);
    assert!(
        matches!(
            err,
            UpstreamError::Locked {
                retry_after: None,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn locked403_is_locked() {
    let (up, acct) = upstream();
    up.set_mode("alice", Mode::Locked403);
    let err = list_err(&up, &acct);
    assert!(matches!(err, UpstreamError::Locked { .. }), "{err:?}");
    assert!(err.is_credential_problem());
}

#[test]
fn rate_limit429_is_rate_limited_with_retry_after() {
    let (up, acct) = upstream();
    up.set_mode("alice", Mode::RateLimit429 { retry_after: Some(3) });
    let err = list_err(&up, &acct);
    assert!(
        matches!(err, UpstreamError::RateLimited { retry_after: Some(d) } if d == Duration::from_secs(3)),
        "{err:?}"
    );
    assert!(err.is_transient() && !err.is_credential_problem());
}

#[test]
fn unavailable503_is_transient() {
    let (up, acct) = upstream();
    up.set_mode("alice", Mode::Unavailable503);
    let err = list_err(&up, &acct);
    assert!(matches!(err, UpstreamError::Transient { .. }), "{err:?}");
    assert!(err.is_transient());
}

#[test]
fn connection_refused_is_transient() {
    let (up, acct) = upstream();
    let base = up.base_url();
    drop(up);
    let err = client().list(&base, &acct, None).expect_err("nothing listens");
    assert!(matches!(err, UpstreamError::Transient { .. }), "{err:?}");
}

#[test]
fn unknown_content_is_rejected_404() {
    let (up, acct) = upstream();
    let err = client()
        .content(&up.base_url(), &acct, "no-such-doc", 1000)
        .expect_err("404");
    assert!(
        matches!(err, UpstreamError::Rejected { status: 404, .. }),
        "{err:?}"
    );
    assert!(!err.is_transient() && !err.is_credential_problem());
}

#[test]
fn oversize_content_is_too_large() {
    let (up, acct) = upstream();
    up.add_document("big", "v1", "big.bin", "application/octet-stream", &[7u8; 1000]);
    let err = client()
        .content(&up.base_url(), &acct, "big", 999)
        .expect_err("too large");
    assert!(
        matches!(
            err,
            UpstreamError::TooLarge {
                size: 1000,
                limit: 999
            }
        ),
        "{err:?}"
    );
    let exact = client()
        .content(&up.base_url(), &acct, "big", 1000)
        .expect("exactly the limit");
    assert_eq!(exact.len(), 1000);
}

#[test]
fn hang_past_the_timeout_is_transient_and_blocks_no_one_else() {
    let (up, acct) = upstream();
    up.add_account("bob", "bob-pw");
    up.set_mode("alice", Mode::Hang(Duration::from_secs(3)));
    let base = up.base_url();
    let hung =
        std::thread::spawn(move || HttpClient::new(Duration::from_millis(700)).list(&base, &acct, None));
    // Bob goes only once alice's request is in (and hanging) at the server.
    let deadline = Instant::now() + Duration::from_secs(10);
    while up.requests("alice") == 0 {
        assert!(Instant::now() < deadline, "alice's request never arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    client()
        .list(&up.base_url(), &account("bob", "bob-pw"), None)
        .expect("bob is served");
    // Bob was served while alice's request still hung: not queued behind it.
    assert!(
        !hung.is_finished(),
        "bob was served only after alice's request ended"
    );
    let err = hung.join().expect("thread").expect_err("alice times out");
    assert!(matches!(err, UpstreamError::Transient { .. }), "{err:?}");
}

#[test]
fn set_next_applies_in_order_then_the_standing_mode() {
    let (up, acct) = upstream();
    up.set_next(
        "alice",
        vec![Mode::Unavailable503, Mode::RateLimit429 { retry_after: None }],
    );
    assert!(matches!(list_err(&up, &acct), UpstreamError::Transient { .. }));
    assert!(matches!(
        list_err(&up, &acct),
        UpstreamError::RateLimited { retry_after: None }
    ));
    client()
        .list(&up.base_url(), &acct, None)
        .expect("back to Accept");
    assert_eq!(up.requests("alice"), 3);
}

#[test]
fn notices_need_no_auth_and_are_not_counted() {
    let (up, _) = upstream();
    ureq::post(&up.webhook_url())
        .header("Content-Type", "application/json")
        .send(serde_json::json!({"event": "paused", "account": "alice"}).to_string())
        .expect("notify");
    assert_eq!(
        up.notices(),
        vec![serde_json::json!({"event": "paused", "account": "alice"})]
    );
    assert_eq!(up.requests("alice"), 0);
}

#[test]
fn requests_carry_basic_auth_and_no_credentials_in_the_url() {
    let (up, acct) = upstream();
    client().list(&up.base_url(), &acct, None).expect("list");
    client()
        .content(&up.base_url(), &acct, "doc-1", 100)
        .expect("content");
    let log = up.request_log();
    assert_eq!(log.len(), 2);
    for record in log {
        assert_eq!(record.account.as_deref(), Some("alice"));
        assert_eq!(record.status, 200);
        assert!(
            !record.path.contains(PASSWORD) && !record.path.contains("alice"),
            "{}",
            record.path
        );
    }
}

#[test]
fn no_error_shows_the_password() {
    let (up, acct) = upstream();
    let modes = [
        Mode::Reject401,
        Mode::Lock423 { retry_after: Some(7) },
        Mode::Locked403,
        Mode::RateLimit429 { retry_after: Some(1) },
        Mode::Unavailable503,
    ];
    for mode in modes {
        up.set_mode("alice", mode);
        assert_password_hidden(&list_err(&up, &acct));
    }
    up.set_mode("alice", Mode::Accept);
    assert_password_hidden(&list_err(&up, &account("alice", "not-it")));
    assert_password_hidden(
        &client()
            .content(&up.base_url(), &acct, "nope", 10)
            .expect_err("404"),
    );
    assert_password_hidden(
        &client()
            .content(&up.base_url(), &acct, "doc-1", 1)
            .expect_err("too large"),
    );
    let base = up.base_url();
    drop(up);
    assert_password_hidden(&client().list(&base, &acct, None).expect_err("refused"));
}

/// A server that answers one request with `status_line`, `headers` (each
/// ending in CRLF) and `body`, in which `{auth}` becomes the request's
/// Authorization value and `{password}` the password: a server that echoes
/// credentials back.
fn one_shot(status_line: &'static str, headers: &'static str, body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).map(|n| n == 1).unwrap_or(false) {
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        let auth = head
            .lines()
            .find_map(|l| {
                l.split_once(": ")
                    .filter(|(n, _)| n.eq_ignore_ascii_case("Authorization"))
            })
            .map(|(_, value)| value)
            .unwrap_or("")
            .to_string();
        let body = body.replace("{auth}", &auth).replace("{password}", PASSWORD);
        let answer = format!(
            "HTTP/1.1 {status_line}\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(answer.as_bytes());
    });
    format!("http://{addr}")
}

#[test]
fn an_echoed_password_is_scrubbed_from_details() {
    let acct = account("alice", PASSWORD);
    let base = one_shot("401 Unauthorized", "", "bad password {password} in {auth}");
    let err = client().list(&base, &acct, None).expect_err("401");
    assert!(matches!(err, UpstreamError::Auth { .. }), "{err:?}");
    assert_password_hidden(&err);
    assert!(!format!("{err:?}").contains("Basic YWxp"), "{err:?}");
    // The server did echo both; they were replaced, not lost.
    assert!(err.to_string().contains("bad password *** in Basic ***"), "{err}");
}

#[test]
fn unreadable_listing_is_protocol() {
    let acct = account("alice", PASSWORD);
    let base = one_shot("200 OK", "Content-Type: text/html\r\n", "<html>not json</html>");
    let err = client().list(&base, &acct, None).expect_err("not JSON");
    assert!(matches!(err, UpstreamError::Protocol { .. }), "{err:?}");
}

#[test]
fn a_record_missing_fields_is_skipped_not_the_page() {
    let acct = account("alice", PASSWORD);
    let body = r#"{"documents":[{"id":"1"},{"id":"2","version":"v","name":"n","content_type":"t"}],"next_cursor":null}"#;
    let base = one_shot("200 OK", "", body);
    let page = client().list(&base, &acct, None).expect("a page");
    assert_eq!(page.documents.len(), 1, "{page:?}");
    assert_eq!(page.documents[0].id, "2");
    assert_eq!(page.skipped.len(), 1);
    assert_eq!(page.skipped[0].listed_id.as_deref(), Some("1"));
    assert!(page.skipped[0].to_string().contains("missing field"), "{page:?}");
}

#[test]
fn a_403_that_does_not_say_locked_is_rejected() {
    let acct = account("alice", PASSWORD);
    let base = one_shot("403 Forbidden", "", r#"{"error":"request blocked"}"#);
    let err = client().list(&base, &acct, None).expect_err("403");
    assert!(
        matches!(err, UpstreamError::Rejected { status: 403, .. }),
        "{err:?}"
    );
}

#[test]
fn a_403_whose_header_says_locked_is_locked() {
    let acct = account("alice", PASSWORD);
    let base = one_shot("403 Forbidden", "X-Account-Status: Locked\r\n", "forbidden");
    let err = client().list(&base, &acct, None).expect_err("403");
    assert!(matches!(err, UpstreamError::Locked { .. }), "{err:?}");
}

#[test]
fn a_url_that_can_never_work_is_protocol_not_transient() {
    let acct = account("alice", PASSWORD);
    for base in ["ftp://127.0.0.1:1", "http://[::1", "http://bob:pw@127.0.0.1:1"] {
        let err = client().list(base, &acct, None).expect_err("unusable URL");
        assert!(matches!(err, UpstreamError::Protocol { .. }), "{base}: {err:?}");
        assert!(!err.is_transient());
    }
}
