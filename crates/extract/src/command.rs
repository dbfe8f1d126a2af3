//! External converters: a command the user trusts (`pdftotext`, `pandoc`,
//! `tesseract`...) extracts the documents of chosen extensions, under the same
//! per-document limits as the built-in parsers; every other document goes to
//! the built-in extractor.
//!
//! The command gets the document on standard input, or, when an argument is
//! `{}`, as a private temporary file named there; its standard output is the
//! text. It runs in a process group of its own with `RLIMIT_AS` and
//! `RLIMIT_CPU` set before it starts; the deadline and the stop flag kill the
//! whole group. Its output is read up to the text cap and its error output only
//! for a few sanitised lines of a failure's reason: nothing it prints reaches
//! the user's terminal. On Windows there are no resource limits (the deadline
//! and the stop flag still kill the command, but not what it started).

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::detect::extension;
use crate::detect::CFB_MAGIC;
use leasehold::extract::{ExtractError, Extracted, Extractor, LimitKind, Limits};
use leasehold::process::{describe_exit, own_group, wait_bounded, Waited};

/// How much of a converter's error output is kept for a failure's reason.
const STDERR_TAIL: usize = 4096;
/// The placeholder an argument uses for the document's temporary file.
const FILE_PLACEHOLDER: &str = "{}";

/// Extensions mapped to commands; the rest goes to `fallback`.
pub struct CommandExtractor {
    commands: BTreeMap<String, Vec<String>>,
    limits: Limits,
    fallback: Arc<dyn Extractor>,
    /// Extensions whose command takes OLE compound files only ([`Self::compound_files_only`]).
    compound_only: std::collections::BTreeSet<String>,
    /// Second commands, tried when the first fails ([`Self::second_tries`]).
    second: BTreeMap<String, Vec<String>>,
}

impl CommandExtractor {
    /// Route documents whose extension (lower case, no dot) is a key of
    /// `commands` to that command (program then arguments), the others to
    /// `fallback`; every command runs under `limits`.
    pub fn new(
        commands: BTreeMap<String, Vec<String>>,
        limits: Limits,
        fallback: Arc<dyn Extractor>,
    ) -> Self {
        CommandExtractor {
            commands,
            limits,
            fallback,
            compound_only: Default::default(),
            second: Default::default(),
        }
    }

    /// The commands of `extensions` take only OLE compound files (as the legacy Office
    /// tools do); a file so named that is not one (RTF or HTML saved as `.doc`, a renamed
    /// DOCX) goes to the fallback, which reads those.
    pub fn compound_files_only(mut self, extensions: impl IntoIterator<Item = String>) -> Self {
        self.compound_only.extend(extensions);
        self
    }

    /// For each extension of `commands`, a command tried when the first one fails
    /// (exits with an error, or complains and writes nothing): catdoc reads Word files
    /// antiword refuses. Not after a limit (the second would only meet it again) or a
    /// stop.
    pub fn second_tries(mut self, commands: BTreeMap<String, Vec<String>>) -> Self {
        self.second.extend(commands);
        self
    }

    /// Run `argv` on the document as [`Extractor::extract_noted`] does.
    fn convert(
        &self,
        argv: &[String],
        bytes: &[u8],
        rule: Silence,
        stop: &AtomicBool,
    ) -> Result<Extracted, ExtractError> {
        let limits = self.limits.for_input(bytes.len() as u64);
        Ok(Extracted {
            note: Some(format!("converter {}", argv[0])),
            ..Extracted::text_only(run_converter(argv, bytes, &limits, rule, stop)?)
        })
    }
}

impl Extractor for CommandExtractor {
    fn extract(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
        self.extract_noted(name, bytes, stop).map(|done| done.text)
    }

    fn extract_noted(&self, name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<Extracted, ExtractError> {
        let ext = extension(name).unwrap_or_default();
        let compound_only = self.compound_only.contains(&ext);
        let argv = Some(&ext)
            .filter(|_| !compound_only || bytes.starts_with(CFB_MAGIC))
            .and_then(|ext| self.commands.get(ext));
        // catdoc's tools exit 0 after "is not OLE file or Error": for them, no
        // text with a complaint is a failure, not an empty document.
        let rule = if compound_only {
            Silence::WithComplaintFails
        } else {
            Silence::IsNoText
        };
        let Some(argv) = argv else {
            return self.fallback.extract_noted(name, bytes, stop);
        };
        match (self.convert(argv, bytes, rule, stop), self.second.get(&ext)) {
            (Err(ExtractError::Converter { program, reason }), Some(second)) => {
                match self.convert(second, bytes, rule, stop) {
                    Ok(mut done) => {
                        done.note = Some(format!("converter {}, after {program} failed", second[0]));
                        Ok(done)
                    }
                    // Both reasons: the first is often the telling one.
                    Err(then) => Err(ExtractError::Converter {
                        program,
                        reason: format!("{reason}; then {then}"),
                    }),
                }
            }
            (done, _) => done,
        }
    }
}

/// Per-process counter for unique temporary file names.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// A private temporary copy of the document, removed on drop.
pub(crate) struct TempDoc(PathBuf);

impl TempDoc {
    pub(crate) fn write(bytes: &[u8]) -> io::Result<TempDoc> {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("leasehold-doc-{}-{seq}", std::process::id()));
        let mut f = leasehold::portable::private_open(OpenOptions::new().write(true).create_new(true), 0o600)
            .open(&path)?;
        let doc = TempDoc(path);
        f.write_all(bytes)?;
        Ok(doc)
    }
}

impl TempDoc {
    /// Where the copy is, for a command's argument.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDoc {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What a converter that exits 0 with no text means.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Silence {
    /// The document has no text (the rule for the user's own commands, since
    /// tools such as tesseract chatter on their error output as they succeed).
    IsNoText,
    /// If the command wrote to its error output, it failed with those words.
    WithComplaintFails,
}

/// Run `argv` on the document under `limits`; its standard output is the text.
fn run_converter(
    argv: &[String],
    bytes: &[u8],
    limits: &Limits,
    silence: Silence,
    stop: &AtomicBool,
) -> Result<String, ExtractError> {
    let output = run_command(argv, bytes, limits, silence, stop)?;
    Ok(String::from_utf8_lossy(&output).into_owned())
}

/// Run one converter on `bytes` under `limits`: its standard output (at most
/// `limits.max_output_bytes`), or why it gave none. OCR uses it for a page's
/// picture too, which is bytes, not text.
pub(crate) fn run_command(
    argv: &[String],
    bytes: &[u8],
    limits: &Limits,
    silence: Silence,
    stop: &AtomicBool,
) -> Result<Vec<u8>, ExtractError> {
    let program = argv.first().cloned().unwrap_or_default();
    let failed = |reason: String| ExtractError::Converter {
        program: program.clone(),
        reason,
    };
    let uses_file = argv.iter().any(|a| a.contains(FILE_PLACEHOLDER));
    let temp = if uses_file {
        Some(TempDoc::write(bytes).map_err(|e| unavailable(&program, &e))?)
    } else {
        None
    };
    let mut child = spawn(argv, temp.as_ref(), limits).map_err(|e| unavailable(&program, &e))?;
    if !uses_file {
        feed_stdin(&mut child, bytes.to_vec(), Instant::now() + limits.deadline);
    }
    let stdout = read_capped(child.stdout.take(), limits.max_output_bytes.saturating_add(1));
    let stderr = read_capped(child.stderr.take(), STDERR_TAIL as u64);
    let status = match wait_bounded(&mut child, Instant::now() + limits.deadline, Some(stop)) {
        Waited::Exited(status) => Ok(status),
        Waited::Stopped => Err(ExtractError::Stopped),
        Waited::TimedOut => Err(ExtractError::Limit {
            what: LimitKind::Deadline(limits.deadline),
        }),
        Waited::Failed(e) => Err(ExtractError::Unavailable {
            reason: format!("cannot wait for the converter: {e}"),
        }),
    };
    // A result that is thrown away (stopped, timed out) is not waited for.
    let status = status?;
    if !status.success() {
        let err_text = error_output(stderr, temp.as_ref());
        return Err(classify(status, limits).unwrap_or_else(|| failed(with_last_words(status, &err_text))));
    }
    let text = collect(stdout);
    let Some(text) = text else {
        return Err(failed(format!(
            "it ended but left a process that kept its output open for more than {} s",
            PIPE_GRACE.as_secs()
        )));
    };

    if silence == Silence::WithComplaintFails && text.iter().all(u8::is_ascii_whitespace) {
        if let Some(words) = last_words(&error_output(stderr, temp.as_ref())) {
            return Err(failed(format!("it wrote no text, only: {words}")));
        }
    }
    if text.len() as u64 > limits.max_output_bytes {
        return Err(ExtractError::Limit {
            what: LimitKind::Output {
                cap: limits.max_output_bytes,
            },
        });
    }
    Ok(text)
}

fn unavailable(program: &str, e: &io::Error) -> ExtractError {
    ExtractError::Unavailable {
        reason: format!("converter {program}: cannot start: {e}"),
    }
}

/// Start the command in its own process group, limits set before it runs.
fn spawn(argv: &[String], temp: Option<&TempDoc>, limits: &Limits) -> io::Result<Child> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::other("the command is empty"))?;
    let path = temp.map(|t| t.0.display().to_string()).unwrap_or_default();
    let args: Vec<String> = args.iter().map(|a| a.replace(FILE_PLACEHOLDER, &path)).collect();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if temp.is_some() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // One converter runs per worker: a thread pool of its own (tesseract's
        // OpenMP) would fight the others for the cores and slow them all.
        .env("OMP_THREAD_LIMIT", "1");
    own_group(&mut cmd);
    #[cfg(unix)]
    limit_before_exec(&mut cmd, limits);
    #[cfg(not(unix))]
    let _ = limits;
    cmd.spawn()
}

/// `RLIMIT_AS` and `RLIMIT_CPU` for the command, set between fork and exec. Only Linux is
/// held to the memory limit: macOS does not enforce `RLIMIT_AS` and may refuse to set it.
/// The CPU limit's hard value is a second past the soft one: at the soft limit the
/// command gets SIGXCPU, which [`classify`] names as the CPU limit; Linux checks the hard
/// limit first and would send SIGKILL, indistinguishable from a kill from outside, were
/// they equal. A command that ignores SIGXCPU still dies at the hard limit on Linux;
/// elsewhere the deadline ends it.
#[cfg(unix)]
fn limit_before_exec(cmd: &mut Command, limits: &Limits) {
    use leasehold::process::set_limit;
    use std::os::unix::process::CommandExt;
    let (memory, cpu) = (limits.memory_bytes, limits.cpu_time.as_secs().max(1));
    // SAFETY: the closure runs in the forked child before exec and calls only
    // setrlimit, which is async-signal-safe, on plain values copied in.
    unsafe {
        cmd.pre_exec(move || {
            let memory_set = set_limit(libc::RLIMIT_AS, memory, memory);
            if cfg!(target_os = "linux") {
                memory_set?;
            }
            // SIGXCPU's default action dumps core: none, in whatever directory.
            set_limit(libc::RLIMIT_CORE, 0, 0)?;
            set_limit(libc::RLIMIT_CPU, cpu, cpu.saturating_add(1))
        });
    }
}

/// Write the document to the command's standard input from a detached thread
/// (its output is read at the same time), never past `deadline`: a command
/// that never reads cannot block us, nor keep the thread and its copy of the
/// document alive.
fn feed_stdin(child: &mut Child, bytes: Vec<u8>, deadline: Instant) {
    if let Some(stdin) = child.stdin.take() {
        std::thread::spawn(move || leasehold::process::feed_stdin(stdin, &bytes, deadline));
    }
}

/// Read at most `cap` bytes of a pipe on a detached thread; the rest is
/// drained and dropped. The bytes arrive on the returned channel at end of file.
fn read_capped(pipe: Option<impl Read + Send + 'static>, cap: u64) -> Option<Receiver<Vec<u8>>> {
    let mut pipe = pipe?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = (&mut pipe).take(cap).read_to_end(&mut kept);
        let _ = io::copy(&mut pipe, &mut io::sink());
        let _ = tx.send(kept);
    });
    Some(rx)
}

/// How long a pipe may stay open after the command ended: only a process that
/// left its group (and kept the pipe) holds it longer, and is not waited for.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// What a reader collected, waiting at most [`PIPE_GRACE`] for the end of
/// file; `None` when the pipe stayed open (its text cannot be trusted whole).
fn collect(reader: Option<Receiver<Vec<u8>>>) -> Option<Vec<u8>> {
    match reader {
        Some(r) => r.recv_timeout(PIPE_GRACE).ok(),
        None => Some(Vec::new()),
    }
}

/// A death by one of our limits, named as such.
#[cfg(not(unix))]
fn classify(_status: ExitStatus, _limits: &Limits) -> Option<ExtractError> {
    None
}

/// A death by one of our limits, named as such.
#[cfg(unix)]
fn classify(status: ExitStatus, limits: &Limits) -> Option<ExtractError> {
    use std::os::unix::process::ExitStatusExt;
    match status.signal()? {
        libc::SIGXCPU => Some(ExtractError::Limit {
            what: LimitKind::CpuTime {
                secs: limits.cpu_time.as_secs().max(1),
            },
        }),
        _ => None,
    }
}

/// What the command wrote to its error output, with the temporary copy's path
/// (a machine path, and no name of the user's) said as "the document".
fn error_output(stderr: Option<Receiver<Vec<u8>>>, temp: Option<&TempDoc>) -> Vec<u8> {
    let text = String::from_utf8_lossy(&collect(stderr).unwrap_or_default()).into_owned();
    match temp {
        Some(doc) => text
            .replace(&*doc.0.to_string_lossy(), "the document")
            .into_bytes(),
        None => text.into_bytes(),
    }
}

/// How the command ended, with the last few lines it wrote to its error output.
fn with_last_words(status: ExitStatus, stderr: &[u8]) -> String {
    let how = describe_exit(status);
    match last_words(stderr) {
        Some(words) => format!("{how} ({words})"),
        None => how,
    }
}

/// The last three non-empty lines of a command's error output, without control
/// characters, each cut to 200 characters.
fn last_words(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .rev()
        .take(3)
        .map(|l| l.chars().filter(|c| !c.is_control()).take(200).collect())
        .collect();
    if lines.is_empty() {
        return None;
    }
    let tail: Vec<String> = lines.into_iter().rev().collect();
    Some(tail.join(" | "))
}

impl std::fmt::Debug for CommandExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandExtractor")
            .field("commands", &self.commands)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::ExtractorRegistry;
    use std::time::Duration;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into(), "sh".into()]
    }

    fn with(ext: &str, argv: Vec<String>, limits: Limits) -> CommandExtractor {
        let commands = BTreeMap::from([(ext.to_owned(), argv)]);
        CommandExtractor::new(commands, limits, Arc::new(ExtractorRegistry::default()))
    }

    fn run(x: &CommandExtractor, name: &str, bytes: &[u8]) -> Result<String, ExtractError> {
        x.extract(name, bytes, &AtomicBool::new(false))
    }

    #[test]
    fn stdin_and_file_commands_give_their_output_and_others_fall_back() {
        let upper = with("up", sh("tr a-z A-Z"), Limits::default());
        assert_eq!(
            run(&upper, "a.UP", b"amber lighthouse").unwrap(),
            "AMBER LIGHTHOUSE"
        );
        assert_eq!(
            run(&upper, "a.txt", b"plain").unwrap(),
            "plain",
            "not mapped: built-in"
        );
        let by_file = with("doc", vec!["cat".into(), "{}".into()], Limits::default());
        assert_eq!(
            run(&by_file, "x/y.doc", b"copper kettle").unwrap(),
            "copper kettle"
        );
    }

    #[test]
    fn a_failing_command_is_an_error_naming_it_with_its_last_words() {
        let x = with(
            "bad",
            sh("echo 'cannot parse page 1' >&2; exit 3"),
            Limits::default(),
        );
        let err = run(&x, "f.bad", b"x").unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.contains("converter sh") && shown.contains("status 3"),
            "{shown}"
        );
        assert!(shown.contains("cannot parse page 1"), "{shown}");
        assert!(err.is_permanent());
        let missing = with("gone", vec!["/nonexistent/converter".into()], Limits::default());
        let err = run(&missing, "f.gone", b"x").unwrap_err();
        assert!(matches!(err, ExtractError::Unavailable { .. }), "{err:?}");
    }

    #[test]
    fn a_legacy_tool_that_only_complains_failed_and_a_users_command_found_no_text() {
        let mut complain = sh("echo \"$1 is not OLE file or Error\" >&2; exit 0");
        complain.push(FILE_PLACEHOLDER.into());
        let mut ole = CFB_MAGIC.to_vec();
        ole.extend_from_slice(b"rest of the container");
        let legacy =
            with("doc", complain.clone(), Limits::default()).compound_files_only(["doc".to_string()]);
        let err = run(&legacy, "f.doc", &ole).unwrap_err();
        assert_eq!(
            err.to_string(),
            "converter sh failed: it wrote no text, only: the document is not OLE file or Error"
        );
        let quiet = with("doc", sh("exit 0"), Limits::default()).compound_files_only(["doc".to_string()]);
        assert_eq!(run(&quiet, "f.doc", &ole).unwrap(), "");
        let users = with("png", complain, Limits::default());
        assert_eq!(run(&users, "f.png", b"x").unwrap(), "");
    }

    #[test]
    fn a_second_command_is_tried_when_the_first_fails_but_not_after_a_limit() {
        let ole = [CFB_MAGIC, b"rest"].concat();
        let legacy = |first: Vec<String>, second: Vec<String>| {
            with("doc", first, Limits::default())
                .compound_files_only(["doc".to_string()])
                .second_tries(BTreeMap::from([("doc".to_string(), second)]))
        };
        let x = legacy(
            sh("echo 'not a Word document' >&2; exit 1"),
            sh("echo read by the second"),
        );
        let done = x.extract_noted("f.doc", &ole, &AtomicBool::new(false)).unwrap();
        assert_eq!(done.text, "read by the second\n");
        assert_eq!(done.note.as_deref(), Some("converter sh, after sh failed"));

        let x = legacy(
            sh("echo 'not a Word document' >&2; exit 1"),
            sh("echo 'nor this' >&2; exit 2"),
        );
        let err = x
            .extract_noted("f.doc", &ole, &AtomicBool::new(false))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "converter sh failed: exited with status 1 (not a Word document); then converter sh failed: exited with status 2 (nor this)"
        );

        let small = Limits {
            max_output_bytes: 4,
            ..Limits::default()
        };
        let x = with("doc", sh("echo 'far too long'"), small)
            .compound_files_only(["doc".to_string()])
            .second_tries(BTreeMap::from([("doc".to_string(), sh("echo ok"))]));
        let err = x
            .extract_noted("f.doc", &ole, &AtomicBool::new(false))
            .unwrap_err();
        assert!(matches!(err, ExtractError::Limit { .. }), "{err:?}");
    }

    #[test]
    fn the_deadline_kills_the_whole_group_and_stop_ends_it_early() {
        let limits = Limits {
            deadline: Duration::from_millis(300),
            ..Limits::default()
        };
        // The shell starts a grandchild that would keep the pipe open.
        let x = with("slow", sh("sleep 30 & sleep 30"), limits);
        let started = Instant::now();
        let err = run(&x, "f.slow", b"").unwrap_err();
        assert!(
            matches!(
                err,
                ExtractError::Limit {
                    what: LimitKind::Deadline(_)
                }
            ),
            "{err:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );

        let x = with("slow", sh("sleep 30"), Limits::default());
        let stop = AtomicBool::new(true);
        let err = x.extract("f.slow", b"", &stop).unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err:?}");
    }

    /// A converter that spins is ended by the CPU limit, and says so.
    #[test]
    fn a_converter_over_its_cpu_time_is_named_as_such() {
        let limits = Limits {
            cpu_time: Duration::from_secs(1),
            cpu_time_per_mib: Duration::ZERO,
            ..Limits::default()
        };
        let x = with("spin", sh("while :; do :; done"), limits);
        let err = run(&x, "f.spin", b"").unwrap_err();
        assert!(
            matches!(
                err,
                ExtractError::Limit {
                    what: LimitKind::CpuTime { secs: 1 }
                }
            ),
            "{err:?}"
        );
    }

    /// A converter that hangs on a 64 KiB document is killed at the deadline grown by
    /// that size's allowance (300 ms and 2 s per MiB: 425 ms), not later.
    #[test]
    fn a_hanging_converter_is_killed_at_its_size_scaled_deadline() {
        let limits = Limits {
            deadline: Duration::from_millis(300),
            deadline_per_mib: Duration::from_secs(2),
            ..Limits::default()
        };
        let x = with("slow", sh("sleep 30"), limits);
        let started = Instant::now();
        let err = run(&x, "f.slow", &[b'x'; 64 << 10]).unwrap_err();
        assert!(
            matches!(err, ExtractError::Limit { what: LimitKind::Deadline(d) } if d == Duration::from_millis(425)),
            "{err:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn output_over_the_cap_is_refused() {
        let limits = Limits {
            max_output_bytes: 1000,
            ..Limits::default()
        };
        let x = with("big", sh("head -c 100000 /dev/zero"), limits);
        let err = run(&x, "f.big", b"").unwrap_err();
        assert!(
            matches!(
                err,
                ExtractError::Limit {
                    what: LimitKind::Output { cap: 1000 }
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn the_temporary_copy_is_private_and_removed() {
        // The converter says its copy's mode and path; that path, not a
        // name pattern other tests running at the same time also make, must
        // be gone afterwards.
        let mut argv = sh("stat -c %a \"$1\"; echo \"$1\"");
        argv.push("{}".into());
        let x = with("doc", argv, Limits::default());
        let out = run(&x, "a.doc", b"secret").unwrap();
        let mut lines = out.lines();
        assert_eq!(lines.next().map(str::trim), Some("600"), "{out:?}");
        let copy = lines.next().expect("the copy's path").trim().to_owned();
        assert!(copy.contains("leasehold-doc-"), "{copy:?}");
        assert!(
            !std::path::Path::new(&copy).exists(),
            "temporary copy left behind: {copy}"
        );
    }

    #[test]
    fn a_process_that_escapes_the_group_with_the_pipe_open_is_not_waited_for() {
        // `setsid` leaves our process group, so killing the group misses it, and
        // it keeps the output pipe open for 30 s.
        let x = with("esc", sh("setsid sleep 30 & echo done"), Limits::default());
        let started = Instant::now();
        let err = run(&x, "f.esc", b"").unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(err.to_string().contains("kept its output open"), "{err}");
    }
}
