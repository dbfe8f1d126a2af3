//! A headless Chromium driven through the DevTools protocol over a pipe
//! (`--remote-debugging-pipe`: JSON messages ended by NUL, read by the browser
//! on descriptor 3 and written on 4), so a test types, clicks, reads the page
//! and takes screenshots the way a person's browser would, with no WebDriver
//! and no network. The browser is the one `browser.rs` installs.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one protocol call or one wait may take before the test fails:
/// a bound on a hang, never a measure of speed.
const PATIENCE: Duration = Duration::from_secs(30);

/// One browser with one page.
pub struct Browser {
    child: Child,
    to_browser: std::io::PipeWriter,
    from_browser: Receiver<Value>,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A browser showing `url`, 1280 × 900.
    pub fn open(url: &str) -> Browser {
        let (browser_reads, to_browser) = std::io::pipe().unwrap();
        let (from_browser, browser_writes) = std::io::pipe().unwrap();
        let (read_fd, write_fd) = (browser_reads.as_raw_fd(), browser_writes.as_raw_fd());
        let profile = tempfile::tempdir().unwrap();
        let mut command = Command::new(super::browser::chromium());
        command
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
            .args([
                "--remote-debugging-pipe",
                "--window-size=1280,900",
                "--no-first-run",
            ])
            .arg("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: between fork and exec only async-signal-safe calls (fcntl,
        // dup2) put the pipe's ends on descriptors 3 and 4, first moved above
        // them so that neither is overwritten before it is copied.
        unsafe {
            command.pre_exec(move || {
                let (r, w) = (
                    libc::fcntl(read_fd, libc::F_DUPFD, 10),
                    libc::fcntl(write_fd, libc::F_DUPFD, 10),
                );
                if r < 0 || w < 0 || libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("start the browser");
        drop((browser_reads, browser_writes));
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(from_browser);
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).is_ok_and(|n| n > 0) {
                message.pop();
                if let Ok(value) = serde_json::from_slice::<Value>(&message) {
                    if tx.send(value).is_err() {
                        return;
                    }
                }
                message.clear();
            }
        });
        let mut browser = Browser {
            child,
            to_browser,
            from_browser: rx,
            session: String::new(),
            next_id: 0,
            _profile: profile,
        };
        let target = browser.call_browser("Target.createTarget", json!({ "url": "about:blank" }));
        let target = target["targetId"].as_str().expect("a target id").to_owned();
        let attached = browser.call_browser(
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        browser.session = attached["sessionId"].as_str().expect("a session").to_owned();
        browser.call("Page.enable", json!({}));
        browser.call("Runtime.enable", json!({}));
        browser.go(url);
        browser
    }

    fn send(&mut self, method: &str, params: Value, session: bool) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if session {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.to_browser.write_all(&bytes).expect("write to the browser");
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = self
                .from_browser
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("the browser did not answer {method} within {PATIENCE:?}"));
            if answer["id"] == id {
                assert!(answer["error"].is_null(), "{method}: {}", answer["error"]);
                return answer["result"].clone();
            }
        }
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, false)
    }

    /// A protocol call on the page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, true)
    }

    /// Load `url` (relative to nothing: give it whole).
    pub fn go(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url }));
    }

    /// The value of a JavaScript expression on the page (promises awaited).
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(
            result["exceptionDetails"].is_null(),
            "{expression}: {}",
            result["exceptionDetails"]
        );
        result["result"]["value"].clone()
    }

    /// Poll `expression` until it is truthy (its value), failing after
    /// [`PATIENCE`] with what it last was and `what` was awaited.
    pub fn wait_for(&mut self, expression: &str, what: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            // A navigation in flight destroys the context: try again.
            let result = self.call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            );
            let value = result["result"]["value"].clone();
            let truthy = result["exceptionDetails"].is_null()
                && !matches!(value, Value::Null | Value::Bool(false))
                && value != json!(0)
                && value != json!("");
            if truthy {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "waited {PATIENCE:?} for {what}; last: {value}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Type `text` where the focus is, as a keyboard would (input events).
    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({ "text": text }));
    }

    /// Press and release a named key (`ArrowDown`, `Enter`).
    pub fn press(&mut self, key: &str) {
        let code = match key {
            "ArrowDown" => 40,
            "ArrowUp" => 38,
            "Enter" => 13,
            other => panic!("no key code for {other}"),
        };
        for kind in ["rawKeyDown", "keyUp"] {
            let mut event = json!({ "type": kind, "key": key, "code": key, "windowsVirtualKeyCode": code });
            if key == "Enter" && kind == "rawKeyDown" {
                event["text"] = json!("\r");
                event["type"] = json!("keyDown");
            }
            self.call("Input.dispatchKeyEvent", event);
        }
    }

    /// A PNG of the page as shown, written to `path`.
    pub fn screenshot(&mut self, path: &std::path::Path) {
        use base64::Engine;
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("PNG data"))
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
