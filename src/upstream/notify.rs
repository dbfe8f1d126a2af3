//! Sending notices: the lock, recovery and expiry messages of the auth gate
//! (DESIGN §6) to a log line, a command and a webhook.
//!
//! Deciding *whether* to send (once per lock, once a day, across processes) is the
//! gate's job; this module only delivers one [`Notice`] and says whether every
//! configured channel took it. On `Err` the caller keeps the notice and retries
//! the whole of it later, so a channel that succeeded the first time sees it again:
//! delivery is at least once, and receivers can use [`Notice::id`] to drop repeats.
//!
//! Nothing here handles the credential; a notice names the account, never its
//! password. As a last defence (the upstream client already redacts what a
//! server says), every text of a notice is passed through
//! [`crate::secret::redact`] before it goes anywhere.
//!
//! The notify command gets the notice on its standard input, never in its
//! arguments or environment: those are visible to every local user (`ps`,
//! `/proc/PID/environ` to the same user), and a notice quotes upstream text.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::client::one_line;
use crate::config::NotifyConfig;
use crate::process::{describe_exit, feed_stdin, kill_group, own_group, wait_bounded, Fed, Waited};
use crate::secret::redact;

/// How long a command or webhook may take before the attempt counts as failed.
/// A hung pager script must not hold the gate's tick forever.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One message for people.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Notice {
    /// Stable across retries, so receivers can de-duplicate.
    pub id: i64,
    /// `"lock"`, `"recovery"`, `"expiry"`, `"shared_cause"`, ...
    pub kind: String,
    /// The account's name (never its username or password).
    pub account: String,
    /// One human sentence.
    pub message: String,
    /// Anything structured a receiver may want (times, counts).
    pub details: serde_json::Value,
}

impl Notice {
    /// The same notice with every form of every configured secret removed
    /// from each of its texts (the `details` strings and keys included).
    fn redacted(&self) -> Notice {
        Notice {
            id: self.id,
            kind: redact(&self.kind),
            account: redact(&self.account),
            message: redact(&self.message),
            details: redact_json(&self.details),
        }
    }
}

fn redact_json(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(redact(s)),
        Value::Array(items) => Value::Array(items.iter().map(redact_json).collect()),
        Value::Object(fields) => {
            Value::Object(fields.iter().map(|(k, v)| (redact(k), redact_json(v))).collect())
        }
        other => other.clone(),
    }
}

/// What a notify command inherits of leasehold's environment.
const KEPT_ENV: [&str; 7] = ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// Delivers notices to the configured channels.
pub struct Notifier {
    /// Program and arguments, run as configured; the notice goes to its stdin.
    command: Option<Vec<String>>,
    webhook: Option<String>,
    /// Kept so webhook connections are reused between notices.
    agent: ureq::Agent,
    /// Per channel; [`DEFAULT_TIMEOUT`] unless a test shortens it.
    timeout: Duration,
}

/// Why a notice did not reach a channel.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The notify command could not be started, timed out, or exited with a failure.
    #[error("notify command {program}: {reason}")]
    Command {
        /// The program run (the command's first word), without its arguments.
        program: String,
        /// What went wrong, e.g. `exited with status 3`.
        reason: String,
    },
    /// `url` is the webhook's origin only (`https://hooks.example.com/…`):
    /// webhook URLs often carry a token in their path, and DESIGN §7 says secrets
    /// are never shown.
    #[error("notify webhook {url}: {reason}")]
    Webhook {
        /// The webhook's origin, never its path or query.
        url: String,
        /// The HTTP status it answered, or the transport's error.
        reason: String,
    },
}

impl Notifier {
    /// A notifier for the channels in `[notify]`; with none configured,
    /// [`Notifier::send`] only writes the log line.
    pub fn new(cfg: &NotifyConfig) -> Notifier {
        Notifier {
            command: cfg.command.clone(),
            webhook: cfg.webhook.clone(),
            agent: super::client::agent(DEFAULT_TIMEOUT),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same notifier with another per-channel timeout (tests use a short one).
    #[cfg(test)]
    fn with_timeout(mut self, timeout: Duration) -> Notifier {
        self.agent = super::client::agent(timeout);
        self.timeout = timeout;
        self
    }

    /// Every text of the notice is redacted first (see the module's doc).
    /// Always writes one log line to stderr: `leasehold: notice {kind} [{account}]: {message}`.
    /// Then runs the command, if configured, exactly as configured (nothing is
    /// added to its arguments): the notice, serialized as one line of JSON
    /// (`{"id", "kind", "account", "message", "details"}`) and a newline, is
    /// written to its standard input, which is then closed; its environment is
    /// a few of ours (`PATH`, `HOME`, ...) plus `LEASEHOLD_NOTICE_KIND`,
    /// `LEASEHOLD_NOTICE_ACCOUNT` (the configured name) and `LEASEHOLD_NOTICE_ID`,
    /// never the message. Its stdout is discarded (ours may be a `--json`
    /// report) and its stderr is ours; if it has not taken its input and ended
    /// within the timeout, it is killed with its process group; a non-zero exit
    /// is a failure. Then POSTs the notice as JSON to the webhook, if
    /// configured; anything but 2xx (redirects are not followed) is a failure.
    ///
    /// # Failure
    /// `Ok(())` only if every configured channel succeeded. Every channel is tried
    /// even if an earlier one failed, so one broken channel does not silence the
    /// others; the first failure is returned and later ones are logged to stderr.
    /// The caller retries the whole notice, so a channel may see a notice twice.
    pub fn send(&self, n: &Notice) -> Result<(), NotifyError> {
        let n = &n.redacted();
        tracing::info!(
            target: "leasehold::notice",
            event = "notice",
            id = n.id,
            kind = %one_line(&n.kind),
            account = %one_line(&n.account),
            message = %one_line(&n.message),
            "notice sent"
        );
        eprintln!(
            "leasehold: notice {} [{}]: {}",
            one_line(&n.kind),
            one_line(&n.account),
            one_line(&n.message)
        );
        let mut results = Vec::new();
        if let Some(argv) = &self.command {
            results.push(self.run_command(argv, n));
        }
        if let Some(url) = &self.webhook {
            results.push(self.post_webhook(url, n));
        }
        let mut errors = results.into_iter().filter_map(Result::err);
        let first = errors.next();
        for later in errors {
            eprintln!("leasehold: notice {}: {later}", n.id);
        }
        first.map_or(Ok(()), Err)
    }

    fn run_command(&self, argv: &[String], n: &Notice) -> Result<(), NotifyError> {
        let Some((program, args)) = argv.split_first() else {
            return Err(command_error("", "the command is empty".into()));
        };
        let fail = |reason: String| command_error(program, reason);
        let mut json =
            serde_json::to_string(n).map_err(|e| fail(format!("cannot serialize the notice: {e}")))?;
        json.push('\n');
        let mut cmd = Command::new(program);
        // A clean environment: the process's own may hold account passwords
        // (`password_env`), which a notify script must never see or log.
        cmd.env_clear();
        for name in KEPT_ENV {
            if let Some(v) = std::env::var_os(name) {
                cmd.env(name, v);
            }
        }
        cmd.args(args)
            .env("LEASEHOLD_NOTICE_KIND", &n.kind)
            .env("LEASEHOLD_NOTICE_ACCOUNT", &n.account)
            .env("LEASEHOLD_NOTICE_ID", n.id.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        let mut child = own_group(&mut cmd)
            .spawn()
            .map_err(|e| fail(format!("cannot start: {e}")))?;
        let deadline = Instant::now() + self.timeout;
        if let Some(stdin) = child.stdin.take() {
            match feed_stdin(stdin, json.as_bytes(), deadline) {
                Fed::Done => {}
                Fed::TimedOut => {
                    kill_group(&mut child);
                    return Err(fail(format!(
                        "did not read the notice within {:?}; killed",
                        self.timeout
                    )));
                }
                Fed::Failed(e) => {
                    kill_group(&mut child);
                    return Err(fail(format!("cannot write the notice to it: {e}")));
                }
            }
        }
        match wait_bounded(&mut child, deadline, None) {
            Waited::Exited(status) if status.success() => Ok(()),
            Waited::Exited(status) => Err(fail(describe_exit(status))),
            Waited::TimedOut | Waited::Stopped => {
                Err(fail(format!("did not finish within {:?}; killed", self.timeout)))
            }
            Waited::Failed(e) => Err(fail(format!("cannot wait for it: {e}"))),
        }
    }

    fn post_webhook(&self, url: &str, n: &Notice) -> Result<(), NotifyError> {
        // The reason quotes the receiver's status line or transport error:
        // text from outside, redacted like an upstream's.
        let fail = |reason: String| NotifyError::Webhook {
            url: url_origin(url),
            reason: one_line(&redact(&reason)),
        };
        let body = serde_json::to_vec(n).map_err(|e| fail(format!("cannot encode the notice: {e}")))?;
        // The agent hands every status back as a response (no redirects
        // followed); the answer's body is not read.
        let request = self.agent.post(url).header("Content-Type", "application/json");
        match request.send(&body[..]) {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => {
                let status = resp.status();
                let name = status.canonical_reason().unwrap_or("");
                Err(fail(format!("answered {} {name}", status.as_u16())))
            }
            Err(e) => Err(fail(describe_transport(&e))),
        }
    }
}

fn command_error(program: &str, reason: String) -> NotifyError {
    NotifyError::Command {
        program: program.to_string(),
        reason,
    }
}

/// The transport's error without the URL, which may hold a token: the errors
/// about a URL that ureq shows with the URL in them are described here
/// instead; the others (connection refused, timeout, TLS, a header HTTP
/// cannot carry) do not quote it.
fn describe_transport(e: &ureq::Error) -> String {
    match e {
        ureq::Error::BadUri(_) => "bad URL: no scheme, an unknown scheme or no host".to_string(),
        ureq::Error::RequireHttpsOnly(_) => "the URL is not https".to_string(),
        other => other.to_string(),
    }
}

/// `scheme://host[:port]`, plus `/…` when a path or query was cut off; any
/// `user:password@` is dropped.
fn url_origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let cut = if end < rest.len() && &rest[end..] != "/" {
        "/…"
    } else {
        ""
    };
    if scheme.is_empty() {
        format!("{host}{cut}")
    } else {
        format!("{scheme}://{host}{cut}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn notice() -> Notice {
        Notice {
            id: 42,
            kind: "lock".into(),
            account: "primary".into(),
            message: "credential rejected; locked for 30m".into(),
            details: serde_json::json!({ "until_ms": 1_800_000 }),
        }
    }

    fn notifier(command: Option<Vec<&str>>, webhook: Option<String>) -> Notifier {
        let command = command.map(|argv| argv.into_iter().map(String::from).collect());
        Notifier::new(&NotifyConfig { command, webhook })
    }

    /// A one-shot webhook on 127.0.0.1:0 answering `status`; yields the request
    /// body and its Content-Type.
    fn webhook(status: u16) -> (String, mpsc::Receiver<(String, String)>) {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut request = server.recv().unwrap();
            let mut body = String::new();
            request.as_reader().read_to_string(&mut body).unwrap();
            let content_type = request
                .headers()
                .iter()
                .find(|h| h.field.equiv("Content-Type"))
                .map(|h| h.value.to_string())
                .unwrap_or_default();
            request.respond(tiny_http::Response::empty(status)).unwrap();
            tx.send((body, content_type)).unwrap();
        });
        (format!("http://127.0.0.1:{port}/hooks/secret-token"), rx)
    }

    /// The events `f` emits on this thread, each as its target and its
    /// fields (`message` included) in the order given. One global subscriber,
    /// installed once for the test binary, keeps a thread's events only while
    /// that thread captures: a subscriber scoped to one thread would race with
    /// the tests beside it over tracing's per-callsite interest cache.
    fn captured_events(f: impl FnOnce()) -> Vec<(String, Vec<(String, String)>)> {
        use tracing::field::{Field, Visit};
        use tracing::span::{Attributes, Id, Record};
        use tracing::{Event, Metadata};
        type Captured = Vec<(String, Vec<(String, String)>)>;
        thread_local! {
            static EVENTS: std::cell::RefCell<Option<Captured>> = const { std::cell::RefCell::new(None) };
        }
        struct Fields(Vec<(String, String)>);
        impl Visit for Fields {
            fn record_str(&mut self, field: &Field, value: &str) {
                self.0.push((field.name().to_owned(), value.to_owned()));
            }
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                self.0.push((field.name().to_owned(), format!("{value:?}")));
            }
        }
        struct ThisThread;
        impl tracing::Subscriber for ThisThread {
            fn enabled(&self, _: &Metadata<'_>) -> bool {
                true
            }
            fn new_span(&self, _: &Attributes<'_>) -> Id {
                Id::from_u64(1)
            }
            fn record(&self, _: &Id, _: &Record<'_>) {}
            fn record_follows_from(&self, _: &Id, _: &Id) {}
            fn event(&self, event: &Event<'_>) {
                let mut fields = Fields(Vec::new());
                event.record(&mut fields);
                EVENTS.with(|e| {
                    if let Some(events) = e.borrow_mut().as_mut() {
                        events.push((event.metadata().target().to_owned(), fields.0));
                    }
                });
            }
            fn enter(&self, _: &Id) {}
            fn exit(&self, _: &Id) {}
        }
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            tracing::subscriber::set_global_default(ThisThread).expect("the only global subscriber");
        });
        EVENTS.with(|e| *e.borrow_mut() = Some(Vec::new()));
        f();
        EVENTS.with(|e| e.borrow_mut().take()).unwrap_or_default()
    }

    #[test]
    fn no_channels_only_logs() {
        let events = captured_events(|| notifier(None, None).send(&notice()).unwrap());
        let notices: Vec<&Vec<(String, String)>> = events
            .iter()
            .filter(|(target, _)| target == "leasehold::notice")
            .map(|(_, fields)| fields)
            .collect();
        assert_eq!(notices.len(), 1, "{events:?}");
        // `message` twice: the event's own ("notice sent"), then the notice's.
        for (name, value) in [
            ("message", "notice sent"),
            ("event", "notice"),
            ("id", "42"),
            ("kind", "lock"),
            ("account", "primary"),
            ("message", "credential rejected; locked for 30m"),
        ] {
            let want = (name.to_owned(), value.to_owned());
            assert!(notices[0].contains(&want), "{want:?} not in {:?}", notices[0]);
        }
    }

    #[test]
    fn command_gets_the_notice_on_stdin_and_nothing_of_it_in_arguments_or_environment() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = r#"{ printf 'ARGS:%s|' "$*"; env; printf 'STDIN:'; cat; } > "$1""#;
        let n = notifier(Some(vec!["sh", "-c", script, "sh", out.to_str().unwrap()]), None);
        n.send(&notice()).unwrap();

        let written = std::fs::read_to_string(&out).unwrap();
        let (before, stdin) = written.split_once("STDIN:").unwrap();
        assert_eq!(before.matches("credential rejected").count(), 0, "{written}");
        assert!(
            before.starts_with(&format!("ARGS:{}|", out.display())),
            "{written}"
        );
        assert!(before.contains("LEASEHOLD_NOTICE_KIND=lock\n"), "{written}");
        assert!(before.contains("LEASEHOLD_NOTICE_ID=42\n"), "{written}");
        assert!(before.contains("LEASEHOLD_NOTICE_ACCOUNT=primary\n"), "{written}");
        assert!(stdin.ends_with('\n') && stdin.lines().count() == 1, "{stdin:?}");
        let json: serde_json::Value = serde_json::from_str(stdin).unwrap();
        assert_eq!(json["id"], 42);
        assert_eq!(json["kind"], "lock");
        assert_eq!(json["message"], "credential rejected; locked for 30m");
        assert_eq!(json["details"]["until_ms"], 1_800_000);
    }

    #[test]
    fn a_command_that_never_reads_its_input_is_killed_at_the_timeout() {
        // A notice bigger than any pipe buffer: a blocking write would wait
        // for the command forever.
        let mut big = notice();
        big.message = "x".repeat(1 << 20);
        let n = notifier(Some(vec!["sh", "-c", "sleep 600 & sleep 600"]), None)
            .with_timeout(Duration::from_millis(300));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(n.send(&big)).unwrap());
        let e = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("send returned")
            .unwrap_err();
        assert!(e.to_string().contains("did not read the notice"), "{e}");
    }

    #[test]
    fn secrets_are_redacted_from_every_channel() {
        let _pw = crate::secret::Secret::new("n0tice-Secret");
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut leaky = notice();
        leaky.message = "upstream said N0TICE-SECRET and n0tice%2DSecret".into();
        leaky.details = serde_json::json!({ "error": "bad bjB0aWNlLVNlY3JldA==", "n0tice-Secret": [1] });
        let (url, rx) = webhook(200);
        let script = r#"{ env; cat; } > "$1""#;
        notifier(
            Some(vec!["sh", "-c", script, "sh", out.to_str().unwrap()]),
            Some(url),
        )
        .send(&leaky)
        .unwrap();
        let (body, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let seen = std::fs::read_to_string(&out).unwrap();
        for text in [&body, &seen] {
            assert!(!text.to_lowercase().contains("n0tice"), "{text}");
            assert!(!text.contains("bjB0aWNlLVNlY3JldA"), "{text}");
            assert!(text.contains("upstream said *** and ***"), "{text}");
        }
    }

    #[test]
    fn a_failing_command_is_an_error() {
        let e = notifier(Some(vec!["sh", "-c", "exit 3"]), None)
            .send(&notice())
            .unwrap_err();
        match &e {
            NotifyError::Command { program, reason } => {
                assert_eq!(program, "sh");
                assert_eq!(reason, "exited with status 3");
            }
            other => panic!("unexpected {other:?}"),
        }
        let e = notifier(Some(vec!["/nonexistent/leasehold-pager"]), None)
            .send(&notice())
            .unwrap_err();
        assert!(e.to_string().contains("cannot start"), "{e}");
    }

    #[test]
    fn a_hung_command_is_killed_after_the_timeout() {
        let started = Instant::now();
        let n =
            notifier(Some(vec!["sh", "-c", "sleep 30; true"]), None).with_timeout(Duration::from_millis(200));
        let e = n.send(&notice()).unwrap_err();
        assert!(e.to_string().contains("killed"), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn webhook_receives_the_notice_as_json() {
        let (url, rx) = webhook(204);
        notifier(None, Some(url)).send(&notice()).unwrap();
        let (body, content_type) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(content_type.starts_with("application/json"), "{content_type}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "id": 42, "kind": "lock", "account": "primary",
                "message": "credential rejected; locked for 30m",
                "details": { "until_ms": 1_800_000 }
            })
        );
    }

    #[test]
    fn a_webhook_500_is_an_error_that_does_not_show_the_path() {
        let (url, rx) = webhook(500);
        let e = notifier(None, Some(url)).send(&notice()).unwrap_err();
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let shown = e.to_string();
        assert!(matches!(e, NotifyError::Webhook { .. }), "{shown}");
        assert!(shown.contains("500"), "{shown}");
        assert!(!shown.contains("secret-token"), "{shown}");
    }

    #[test]
    fn an_unreachable_webhook_is_an_error_without_the_path() {
        // Bind then drop, so the port is (almost certainly) closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/hooks/secret-token");
        let e = notifier(None, Some(url)).send(&notice()).unwrap_err();
        assert!(!e.to_string().contains("secret-token"), "{e}");
    }

    #[test]
    fn every_channel_is_tried_even_when_one_fails() {
        let (url, rx) = webhook(200);
        let e = notifier(Some(vec!["false"]), Some(url))
            .send(&notice())
            .unwrap_err();
        assert!(matches!(e, NotifyError::Command { .. }), "{e}");
        rx.recv_timeout(Duration::from_secs(5))
            .expect("the webhook was still called");
    }

    #[test]
    fn url_origin_drops_path_query_and_credentials() {
        assert_eq!(
            url_origin("https://hooks.example.com/services/T/B/x"),
            "https://hooks.example.com/…"
        );
        assert_eq!(url_origin("http://u:p@h:8080?token=x"), "http://h:8080/…");
        assert_eq!(url_origin("https://h/"), "https://h");
        assert_eq!(url_origin("https://h"), "https://h");
    }

    #[test]
    fn log_text_is_one_line() {
        assert_eq!(one_line("a\nb\r\x1b[31mc"), "a b  [31mc");
    }
}
