//! `leasehold serve` over a real data directory, asked through a plain TCP
//! client: what it answers with the token, and what it refuses without it,
//! from another host or origin, past its limits, or outside the index.

use std::path::{Path, PathBuf};

use crate::common::leasehold;
use crate::common::output::ok;
use crate::common::served::{request, Served};

/// A folder of the shipped samples and a PDF that is not one, indexed.
fn indexed(dir: &Path) -> (PathBuf, PathBuf) {
    let docs = dir.join("docs");
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples");
    std::fs::create_dir_all(docs.join("formats")).unwrap();
    for file in ["notes.txt", "report.pdf", "page.html", "letter.docx"] {
        std::fs::copy(samples.join(file), docs.join(file)).unwrap();
    }
    std::fs::copy(samples.join("formats/memo.rtf"), docs.join("formats/memo.rtf")).unwrap();
    std::fs::write(docs.join("broken.pdf"), b"%PDF-1.7\nthis is no PDF at all\n").unwrap();
    let data = dir.join("data");
    leasehold(&data, &["run", docs.to_str().unwrap(), "-q"]);
    (docs, data)
}

#[test]
fn the_page_searches_and_serves_originals_and_texts() {
    let dir = tempfile::tempdir().unwrap();
    let (docs, data) = indexed(dir.path());
    let served = Served::start(&data, &[]);

    // The printed address trades its token for a cookie.
    let first = served.send("GET", &format!("/?q=tide&token={}", served.token), &[]);
    assert_eq!(first.status, 303, "{}", first.text());
    assert_eq!(first.header("Location"), Some("/?q=tide"));
    let cookie = first.header("Set-Cookie").unwrap();
    assert!(cookie.starts_with(&served.cookie()), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );

    let page = served.get("/");
    assert_eq!(page.status, 200);
    assert!(page.text().contains("<input id=\"q\""), "{}", page.text());
    assert!(page
        .header("Content-Security-Policy")
        .unwrap()
        .contains("script-src 'self'"));
    assert_eq!(page.header("X-Frame-Options"), Some("DENY"));
    assert!(page.header("Access-Control-Allow-Origin").is_none());
    assert_eq!(served.get("/assets/app.js").status, 200);

    let found = served.get("/api/search?q=lighthouse").json();
    assert_eq!(found["total"], 1, "{found}");
    let hit = &found["hits"][0];
    assert_eq!(hit["key"], "notes.txt");
    assert_eq!(
        hit["location"],
        docs.join("notes.txt")
            .canonicalize()
            .unwrap()
            .display()
            .to_string()
    );
    assert!(hit["snippet"].as_str().unwrap().contains("lighthouse"), "{hit}");

    let original = served.get("/doc/original?key=notes.txt");
    assert_eq!(original.status, 200);
    assert_eq!(original.body, std::fs::read(docs.join("notes.txt")).unwrap());
    assert_eq!(original.header("Content-Type"), Some("text/plain"));
    assert_eq!(
        original.header("Content-Disposition"),
        Some("inline; filename=\"notes.txt\"; filename*=UTF-8''notes%2Etxt")
    );
    let pdf = served.get("/doc/original?key=report.pdf");
    assert_eq!(
        (pdf.status, pdf.header("Content-Type")),
        (200, Some("application/pdf"))
    );
    // A page among the originals runs no script as this server.
    let html = served.get("/doc/original?key=page.html");
    assert!(html
        .header("Content-Security-Policy")
        .unwrap()
        .starts_with("sandbox"));
    let text = served.get("/doc/text?key=formats/memo.rtf");
    assert_eq!(text.status, 200);
    assert!(text.text().contains("crimson tundra"), "{}", text.text());

    // Filters are the query language's fields; a page of 20 moves on.
    let typed = served.get("/api/search?q=the&type=pdf").json();
    assert!(
        typed["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["type"] == "pdf"),
        "{typed}"
    );
    let folder = docs.join("formats").canonicalize().unwrap();
    let target = format!("/api/search?q=crimson&folder={}", folder.display());
    let in_folder = served.get(&target).json();
    assert_eq!(in_folder["hits"][0]["key"], "formats/memo.rtf", "{in_folder}");
    let empty = served.get("/api/search?q=lighthouse&offset=20").json();
    assert_eq!(
        (&empty["total"], empty["hits"].as_array().unwrap().len()),
        (&1.into(), 0)
    );

    // A HEAD says what a GET would, without the body.
    let head = served.send(
        "HEAD",
        "/doc/original?key=notes.txt",
        &[("Cookie", &served.cookie())],
    );
    assert_eq!((head.status, head.body.len()), (200, 0));
    let size = std::fs::metadata(docs.join("notes.txt"))
        .unwrap()
        .len()
        .to_string();
    assert_eq!(head.header("Content-Length"), Some(size.as_str()));

    // Words that end with an operator, half typed, never turn the filter
    // round: `lighthouse NOT` is an error, not "all but the PDFs".
    let half = served.get("/api/search?q=lighthouse+NOT&type=pdf");
    assert_eq!(half.status, 400, "{}", half.text());
    let either = served.get("/api/search?q=lighthouse+OR+report&type=text").json();
    assert_eq!(either["hits"][0]["key"], "notes.txt", "{either}");
    assert_eq!(either["total"], 1, "{either}");

    // A malformed query says why.
    let bad = served.get("/api/search?q=after%3Anot-a-date");
    assert_eq!(bad.status, 400, "{}", bad.text());
    assert!(
        bad.json()["error"].as_str().unwrap().contains("after:"),
        "{}",
        bad.text()
    );

    let status = served.get("/api/status").json();
    assert_eq!(status["totals"]["indexed"], 5, "{status}");
    assert_eq!(status["totals"]["failed"], 1, "{status}");
    assert_eq!(status["failures"][0]["key"], "broken.pdf");
    assert_eq!(status["can_retry"], false);
}

#[test]
fn what_is_not_asked_rightly_is_refused_and_nothing_served() {
    let dir = tempfile::tempdir().unwrap();
    let (_docs, data) = indexed(dir.path());
    let served = Served::start(&data, &[]);
    let cookie = served.cookie();
    let secret_words = "lighthouse";
    let refused = |answer: &crate::common::served::Answer, status: u16| {
        assert_eq!(answer.status, status, "{}", answer.text());
        assert!(!answer.text().contains(secret_words), "{}", answer.text());
        assert!(answer.header("Access-Control-Allow-Origin").is_none());
    };

    // No token, a wrong one, and a token in the address of another host.
    refused(&served.send("GET", "/api/search?q=lighthouse", &[]), 401);
    refused(
        &served.send(
            "GET",
            "/doc/original?key=notes.txt",
            &[("Cookie", "leasehold_1=x")],
        ),
        401,
    );
    let wrong = format!("leasehold_{}={}0", served.port, &served.token[1..]);
    refused(
        &served.send("GET", "/api/search?q=lighthouse", &[("Cookie", &wrong)]),
        401,
    );
    for host in ["evil.example", "evil.example:80", "127.0.0.1:1"] {
        let target = format!("/api/search?q=lighthouse&token={}", served.token);
        let answer = request(
            served.port,
            "GET",
            &target,
            &[("Host", host), ("Cookie", &cookie)],
        );
        refused(&answer, 421);
    }
    refused(
        &request(
            served.port,
            "GET",
            "/api/search?q=lighthouse",
            &[("Cookie", &cookie)],
        ),
        421,
    );

    // Paths, not keys of indexed documents: nothing outside the index is read.
    for target in [
        "/doc/original?key=../../../../etc/passwd",
        "/doc/original?key=%2Fetc%2Fpasswd",
        "/doc/original?key=broken.pdf",
        "/doc/text?key=..%2Fdata%2Fleasehold.db",
        "/../../etc/passwd",
        "/assets/../../../etc/passwd",
    ] {
        let answer = served.get(target);
        refused(&answer, 404);
        assert!(!answer.text().contains("root:"), "{target}: {}", answer.text());
    }

    // Writes: from another origin, without the page's token, by the
    // address's token, or at all on a server started read-only.
    let csrf = served.csrf();
    let post = |headers: &[(&str, &str)]| served.send("POST", "/api/retry?key=broken.pdf", headers);
    refused(
        &post(&[
            ("Cookie", &cookie),
            ("X-Leasehold-Csrf", &csrf),
            ("Origin", "http://evil.example"),
        ]),
        403,
    );
    refused(
        &post(&[
            ("Cookie", &cookie),
            ("Sec-Fetch-Site", "cross-site"),
            ("X-Leasehold-Csrf", &csrf),
        ]),
        403,
    );
    refused(&post(&[("Cookie", &cookie)]), 403);
    let by_address = format!("/api/retry?key=broken.pdf&token={}", served.token);
    refused(
        &served.send("POST", &by_address, &[("X-Leasehold-Csrf", &csrf)]),
        401,
    );
    let read_only = post(&[("Cookie", &cookie), ("X-Leasehold-Csrf", &csrf)]);
    refused(&read_only, 403);
    assert!(read_only.text().contains("--allow-retry"), "{}", read_only.text());

    // Past the limits.
    let long_query = format!("/api/search?q={}", "lighthouse+".repeat(100));
    refused(&served.get(&long_query), 414);
    let long_target = format!("/api/search?q=x&pad={}", "a".repeat(5000));
    refused(&served.get(&long_target), 414);
    let body = served.send("GET", "/", &[("Cookie", &cookie), ("Content-Length", "999999")]);
    refused(&body, 413);

    // Still answering the right request after all that.
    assert_eq!(served.get("/api/search?q=lighthouse").json()["total"], 1);
}

#[test]
fn a_failed_document_is_retried_from_the_status_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (_docs, data) = indexed(dir.path());
    let served = Served::start(&data, &["--allow-retry"]);
    let csrf = served.csrf();
    let cookie = served.cookie();
    let post = |key: &str| {
        let target = format!("/api/retry?key={key}");
        served.send(
            "POST",
            &target,
            &[("Cookie", &cookie), ("X-Leasehold-Csrf", &csrf)],
        )
    };
    assert_eq!(post("notes.txt").status, 409, "only a failed document");
    assert_eq!(post("nothing.txt").status, 404);
    let retried = post("broken.pdf");
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(retried.json()["requeued"], true);
    let status = served.get("/api/status").json();
    assert_eq!(
        (&status["totals"]["failed"], &status["totals"]["queued"]),
        (&0.into(), &1.into()),
        "{status}"
    );
    let inspect = crate::common::output::stdout(&ok(leasehold(&data, &["inspect", "broken.pdf"])));
    assert!(inspect.contains("requeued from leasehold serve"), "{inspect}");
}

/// Connections that send nothing, or half a request, are closed when the
/// head timeout passes, and past the cap at once; the server answers the
/// next right request whatever they hold.
#[test]
fn idle_and_slow_connections_are_closed_and_others_served() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let dir = tempfile::tempdir().unwrap();
    let (_docs, data) = indexed(dir.path());
    let served = Served::start(&data, &["--head-timeout", "300ms"]);
    let connect = || TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    // More idle connections than the server keeps (256).
    let idle: Vec<TcpStream> = (0..300).map(|_| connect()).collect();
    let mut slow = connect();
    slow.write_all(b"GET /api/search?q=lighthouse HTTP/1.1\r\nHost: ")
        .unwrap();

    // Each is closed by the server: its read ends (the timeout bounds a hang).
    let closed = |mut stream: TcpStream| {
        // Shorter than hyper's own default (30 s): the flag's 300 ms must be what closes it.
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut answer = Vec::new();
        if let Err(e) = stream.read_to_end(&mut answer) {
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset,
                "not closed by the server: {e}"
            );
        }
        assert!(
            answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"),
            "{:?}",
            String::from_utf8_lossy(&answer)
        );
    };
    closed(slow);
    for stream in idle {
        closed(stream);
    }
    assert_eq!(served.get("/api/search?q=lighthouse").json()["total"], 1);
}

/// A client that asks for a large answer and stops reading holds its
/// connection no longer than the head timeout: the server stops writing
/// and drops it, and serves the next request.
#[test]
fn a_client_that_stops_reading_is_dropped() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    // Far more than the loopback's socket buffers hold, so the write stalls.
    let big = "lighthouse keeper\n".repeat(24 << 20 >> 4);
    std::fs::write(docs.join("big.txt"), &big).unwrap();
    let data = dir.path().join("data");
    leasehold(&data, &["run", docs.to_str().unwrap(), "-q"]);
    let served = Served::start(&data, &["--head-timeout", "500ms"]);
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    let ask = format!(
        "GET /doc/original?key=big.txt HTTP/1.1\r\nHost: {}\r\nCookie: {}\r\n\r\n",
        served.host(),
        served.cookie()
    );
    stream.write_all(ask.as_bytes()).unwrap();
    // Not reading, for several times the timeout: the server's write stalls.
    std::thread::sleep(std::time::Duration::from_secs(3));
    // What arrives now is what the buffers held: the server gave up on the
    // rest and closed (the read timeout only bounds a hang: without the
    // bound the whole answer comes, then the kept-alive connection waits).
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    match stream.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "not closed: {e}"),
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got[..got.len().min(200)])
    );
    assert!(
        got.len() < big.len(),
        "the whole answer arrived ({} bytes)",
        got.len()
    );
    // The server answers the next request.
    assert_eq!(served.get("/api/status").status, 200);
}

/// Several clients asking for a large original at once cost the server a
/// piece each, not the original each: it reads the file as it sends it.
/// The whole answer still arrives, byte for byte, and so does the text.
#[cfg(target_os = "linux")]
#[test]
fn large_answers_are_read_as_they_are_sent() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let big: String = (0..(16 << 20) / 32)
        .map(|i| format!("harbour pilot {i:>17}\n"))
        .collect();
    std::fs::write(docs.join("big.txt"), &big).unwrap();
    let data = dir.path().join("data");
    leasehold(&data, &["run", docs.to_str().unwrap(), "-q"]);
    let served = Served::start(&data, &["--head-timeout", "10s"]);
    let ask = format!(
        "GET /doc/original?key=big.txt HTTP/1.1\r\nHost: {}\r\nCookie: {}\r\n\r\n",
        served.host(),
        served.cookie()
    );
    let resident = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", served.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    };
    assert_eq!(served.get("/api/status").status, 200);
    let before = resident();
    // Eight clients ask and do not read: each answer stalls once the
    // loopback's buffers are full.
    let stalled: Vec<std::net::TcpStream> = (0..8)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", served.port)).unwrap();
            s.write_all(ask.as_bytes()).unwrap();
            s
        })
        .collect();
    let mut most = before;
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        most = most.max(resident());
    }
    let grew = most.saturating_sub(before);
    assert!(
        grew < big.len() as u64,
        "eight answers of {} bytes took {grew} bytes of the server's memory",
        big.len()
    );
    drop(stalled);

    // Read whole, it is the file.
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    let ask_closing = ask.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n");
    stream.write_all(ask_closing.as_bytes()).unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).unwrap();
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&got[..head_end]).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains(&format!("content-length: {}", big.len())), "{head}");
    assert!(got[head_end..] == *big.as_bytes(), "the body is not the file");
    let text = served.get("/doc/text?key=big.txt");
    assert_eq!(text.status, 200);
    assert!(text.body == big.as_bytes(), "the text is not the file's");
}
