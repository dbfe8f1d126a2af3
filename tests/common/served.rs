//! A real `leasehold serve` for the tests: started on a data directory, its
//! address read from its first line of output, stopped when dropped; and a
//! plain HTTP/1.1 client over a TCP stream, so a test says exactly what is
//! sent (a wrong Host, no cookie, a forged Origin) and sees exactly what
//! comes back.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A running server.
pub struct Served {
    child: Child,
    /// The address printed, with its token.
    pub url: String,
    pub port: u16,
    pub token: String,
}

impl Served {
    /// `leasehold --data DATA serve ARGS`, once it printed its address.
    pub fn start(data: &std::path::Path, args: &[&str]) -> Served {
        let mut child = super::leasehold_command(data)
            .arg("serve")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start leasehold serve");
        // Read on a thread of its own, so that a server that never prints
        // fails the test instead of hanging it.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("serve prints its address within a minute");
        let url = line.trim().to_owned();
        let rest = url
            .strip_prefix("http://127.0.0.1:")
            .unwrap_or_else(|| panic!("address {url:?}"));
        let (port, token) = rest.split_once("/?token=").expect("the token in the address");
        Served {
            port: port.parse().unwrap(),
            token: token.to_owned(),
            url: url.clone(),
            child,
        }
    }

    /// The cookie the server trades its token for.
    pub fn cookie(&self) -> String {
        format!("leasehold_{}={}", self.port, self.token)
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `GET target` with the cookie and the right Host.
    pub fn get(&self, target: &str) -> Answer {
        self.send("GET", target, &[("Cookie", &self.cookie())])
    }

    /// A request with the right Host and these headers (no cookie unless given).
    pub fn send(&self, method: &str, target: &str, headers: &[(&str, &str)]) -> Answer {
        let host = self.host();
        let mut all = vec![("Host", host.as_str())];
        all.extend_from_slice(headers);
        request(self.port, method, target, &all)
    }

    /// The CSRF token of the page at `/`.
    pub fn csrf(&self) -> String {
        let page = self.get("/").text();
        let at = page
            .find("name=\"csrf\" content=\"")
            .expect("the page's CSRF token")
            + 21;
        page[at..at + 64].to_owned()
    }
}

impl Served {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop the server now (dropping it does the same).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An answer as it came.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }
}

/// One request on its own connection (`Connection: close`); every header as
/// given, nothing added but an empty body's length when none is given. The
/// read timeout only bounds a hang.
pub fn request(port: u16, method: &str, target: &str, headers: &[(&str, &str)]) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to serve");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!("{method} {target} HTTP/1.1\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        head.push_str("Content-Length: 0\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the answer");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}
