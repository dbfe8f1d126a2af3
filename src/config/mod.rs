//! The TOML configuration file: accounts, the HTTP source and sink, the auth gate's
//! timings (DESIGN §6), notice channels and the outbox bounds.
//!
//! The file is read, parsed, validated and its passwords resolved once, at start,
//! before anything runs: a typo must stop the start with a message that names the
//! file and the key (`leasehold.toml: [sink.http] batch_size: must be at least 1`),
//! not show up an hour later as odd behaviour. For the same reason every table
//! refuses keys it does not know.
//!
//! Passwords never live in this file (DESIGN §7): an account names an environment
//! variable (`password_env`) or a file (`password_file`) that holds it, and an
//! inline `password` key is refused. The resolved value is a [`Secret`], which
//! does not print.
//!
//! # Example
//!
//! Every key is shown; all but the accounts and the URLs have the defaults shown.
//!
//! ```toml
//! # Accounts that share an upstream credential. A process uses one at a time, so
//! # a lock on one account stops only the processes using it.
//! [[account]]
//! name = "primary"
//! username = "extractor"
//! password_env = "LEASEHOLD_PRIMARY_PASSWORD"
//! expires_on = "2030-06-30"
//!
//! [[account]]
//! name = "spare"
//! username = "extractor-2"
//! password_file = "secrets/spare.password"
//!
//! [source.http]
//! base_url = "https://docs.example.com/api"
//! accounts = ["primary", "spare"]
//!
//! [sink.http]
//! url = "https://index.example.com/ingest"
//! account = "primary"
//! batch_size = 100
//! max_per_second = 10
//!
//! [auth]
//! lock_ttl = "30m"
//! probe_ttl = "60s"
//! notify_every = "1h"
//! expiry_warning = "14d"
//!
//! [notify]
//! command = ["/usr/local/bin/page-oncall", "--team", "docs"]
//! webhook = "https://hooks.example.com/leasehold"
//!
//! [outbox]
//! max_age = "24h"
//! max_bytes = "256MiB"
//!
//! # The database, when --db and LEASEHOLD_DB do not name one: a SQLite file
//! # (relative to this file) or a PostgreSQL URL without its password.
//! [store]
//! db = "postgres://leasehold@db.example.com/leasehold"
//! password_file = "secrets/db.password"
//! # How long `gc` keeps history lines (each document's last line stays).
//! history_keep = "30d"
//! # PostgreSQL: how far apart the machines' clocks may be; a lease granted
//! # less than this far ahead of a machine's now is not taken over.
//! clock_skew = "1s"
//!
//! # Where parsers run, and the limits of one document.
//! [extract]
//! isolation = true
//! timeout = "60s"
//! timeout_per_mib = "2s"
//! memory = "1GiB"
//! cpu = "60s"
//! cpu_per_mib = "1s"
//! max_text = "64MiB"
//! # Languages OCR reads in pictures and scanned pages, when tesseract is
//! # installed (default ["eng"]; [] for no OCR).
//! # ocr_languages = ["eng", "kor"]
//!
//! # The search index's tokenizer for a SQLite data directory made now:
//! # "unicode61" (words; the default) or "trigram" (substrings).
//! [search]
//! # tokenizer = "trigram"
//! # Whether a word also finds its other forms: "english" (the default) or "none".
//! # stemming = "none"
//! ```
//!
//! # Keys
//! - `[[account]]`: `name` (unique; letters, digits, `_`, `.`, `-`), `username`,
//!   exactly one of `password_env` (a variable name) or `password_file` (a path,
//!   relative to the directory of the configuration file; one trailing newline
//!   is trimmed), and optionally `expires_on` (`"YYYY-MM-DD"` or a bare TOML date).
//! - `[source.http]`: `base_url`, and either `account = "a"` or
//!   `accounts = ["a", "b"]` (1 to [`MAX_SOURCE_ACCOUNTS`], each an `[[account]]`).
//! - `[sink.http]`: `url`, `account`, `batch_size` (1 to [`MAX_BATCH_SIZE`]),
//!   `max_per_second` (requests per second, at least [`MIN_PER_SECOND`]).
//! - `[auth]`: durations in `humantime` form (`"90s"`, `"30m"`, `"14d"`).
//! - `[notify]`: `command` is an array (program, then its arguments) or a string
//!   that is the program's path; it is never split on whitespace, so a path with
//!   spaces works and no shell quoting rules apply. The command reads each notice
//!   as one JSON line on its standard input. `webhook` is a URL.
//! - `[outbox]`: `max_age` (a duration) and `max_bytes` (`"256MiB"` or a number of bytes).
//! - `[extract]`: `isolation` (run parsers in child processes; default true), and the
//!   limits of one document: `timeout` and `cpu` (durations), each grown by
//!   `timeout_per_mib` and `cpu_per_mib` (durations) for every MiB of the document,
//!   `memory` and `max_text` (sizes). The flags `--extract-timeout`,
//!   `--extract-timeout-per-mib`, `--extract-cpu`, `--extract-cpu-per-mib`,
//!   `--extract-memory`, `--max-text` and `--in-process` override them. `[extract.commands]` maps
//!   extensions to external converters, e.g. `pdf = ["pdftotext", "-enc", "UTF-8", "{}", "-"]`
//!   (`{}` is the document's temporary file; without it the document is on standard input);
//!   they run under the same limits. `ocr_languages` (tesseract's codes, e.g.
//!   `["eng", "kor"]`; default `["eng"]`, `[]` for no OCR) are read in pictures and in
//!   a PDF's pages without a text layer when `tesseract` (and, for PDFs, `pdftoppm`)
//!   is installed.
//! - `[store]`: `db`, a SQLite path (relative to the directory of the configuration
//!   file) or a `postgres://` URL, which must not hold a password; with a URL,
//!   optionally one of `password_env` or `password_file` (as for an account). The
//!   flag `--db` and the variable `LEASEHOLD_DB` override it.
//! - `[search]`: `tokenizer`, `"unicode61"` (the default) or `"trigram"`: the
//!   search index's tokenizer when the data directory is made (the flag
//!   `--tokenizer` overrides it). A data directory keeps the one it was made
//!   with; asking for another is refused until `leasehold reindex --tokenizer`.
//!   `stemming`, `"english"` (the default) or `"none"`: whether a query's words
//!   also find their other forms (the flag `--stemming` overrides it); recorded
//!   in the data directory, and changed at any time (the index does not
//!   depend on it).
//!   flag `--db` and the variable `LEASEHOLD_DB` override it. `history_keep` (a
//!   duration, default `"30d"`): `gc` removes history lines older than this,
//!   except each document's last. `clock_skew` (a duration, default `"1s"`,
//!   PostgreSQL only): how far apart the clocks of the machines sharing the
//!   database may be (see [`crate::StoreOptions::clock_skew`]).

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::clock::Millis;
use crate::secret::Secret;
use crate::store::DbLocation;

mod validate;

pub use crate::size::{format_size, parse_size, SIZE_FORM};

/// The example file from the module documentation, kept in one place so a unit
/// test proves the documented example is valid.
pub const EXAMPLE: &str = r#"# Accounts that share an upstream credential. A process uses one at a time, so
# a lock on one account stops only the processes using it.
[[account]]
name = "primary"
username = "extractor"
password_env = "LEASEHOLD_PRIMARY_PASSWORD"
expires_on = "2030-06-30"

[[account]]
name = "spare"
username = "extractor-2"
password_file = "secrets/spare.password"

[source.http]
base_url = "https://docs.example.com/api"
accounts = ["primary", "spare"]

[sink.http]
url = "https://index.example.com/ingest"
account = "primary"
batch_size = 100
max_per_second = 10

[auth]
lock_ttl = "30m"
probe_ttl = "60s"
notify_every = "1h"
expiry_warning = "14d"

[notify]
command = ["/usr/local/bin/page-oncall", "--team", "docs"]
webhook = "https://hooks.example.com/leasehold"

[outbox]
max_age = "24h"
max_bytes = "256MiB"

# The database, when --db and LEASEHOLD_DB do not name one: a SQLite file
# (relative to this file) or a PostgreSQL URL without its password.
[store]
db = "postgres://leasehold@db.example.com/leasehold"
password_file = "secrets/db.password"
# How long `gc` keeps history lines (each document's last line stays).
history_keep = "30d"
# PostgreSQL: how far apart the machines' clocks may be; a lease granted
# less than this far ahead of a machine's now is not taken over.
clock_skew = "1s"

# Where parsers run, and the limits of one document.
[extract]
isolation = true
timeout = "60s"
timeout_per_mib = "2s"
memory = "1GiB"
cpu = "60s"
cpu_per_mib = "1s"
max_text = "64MiB"
# Languages OCR reads in pictures and scanned pages, when tesseract is
# installed (default ["eng"]; [] for no OCR).
# ocr_languages = ["eng", "kor"]

# The search index's tokenizer for a SQLite data directory made now:
# "unicode61" (words; the default) or "trigram" (substrings).
[search]
# tokenizer = "trigram"
# Whether a word also finds its other forms: "english" (the default) or "none".
# stemming = "none"
"#;

/// The largest account pool a source may rotate through (DESIGN §6: "e.g. up to 5").
pub const MAX_SOURCE_ACCOUNTS: usize = 5;
/// The largest sink batch; beyond this one request body grows unreasonably large.
pub const MAX_BATCH_SIZE: usize = 10_000;
/// The slowest sink rate accepted: the drain waits `1 / max_per_second` between
/// requests, and a rate near 0 would make that wait overflow a `Duration`.
pub const MIN_PER_SECOND: f64 = 0.001;
/// A password file larger than this is almost certainly the wrong file.
const MAX_PASSWORD_FILE_BYTES: u64 = 64 * 1024;
/// Days from 4713 BC (the Julian day origin) to 1970-01-01.
const UNIX_EPOCH_JULIAN_DAY: i64 = 2_440_588;
const MS_PER_DAY: i64 = 86_400_000;

// ---------------------------------------------------------------------------
// Public, validated types
// ---------------------------------------------------------------------------

/// The whole configuration file, validated, with passwords resolved.
///
/// `Default` is the configuration of an absent file: no accounts, no HTTP source
/// or sink, and the default timings and bounds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FileConfig {
    /// Every `[[account]]`, in file order; names are unique.
    pub accounts: Vec<AccountConfig>,
    /// `[source.http]`: fetch documents from an HTTP API instead of a directory.
    pub source_http: Option<HttpSourceConfig>,
    /// `[sink.http]`: deliver results to an HTTP API (through the outbox).
    pub sink_http: Option<HttpSinkConfig>,
    /// `[auth]`: the shared-credential gate's timings.
    pub auth: AuthConfig,
    /// `[notify]`: where lock, recovery and expiry notices go.
    pub notify: NotifyConfig,
    /// `[outbox]`: how much undeliverable work is kept while locked.
    pub outbox: OutboxConfig,
    /// `[extract]`: where parsers run and the limits each document runs under.
    pub extract: ExtractConfig,
    /// `[store]`: where the database is, when `--db` and `LEASEHOLD_DB` do not say.
    pub store: StoreConfig,
    /// `[search]`: the search index's tokenizer for a new data directory.
    pub search: SearchConfig,
}

/// `[search]`: how the search index cuts text into terms.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SearchConfig {
    /// `tokenizer`: asked of the store when it is opened by a command that
    /// works (`None`: the data directory's own, the default for a new one).
    pub tokenizer: Option<crate::Tokenizer>,
    /// `stemming`: recorded in the store when a command that works opens it
    /// (`None`: the data directory's own).
    pub stemming: Option<crate::Stemming>,
}

/// `[store]`: the database, a SQLite file or a PostgreSQL database, and the
/// PostgreSQL password, which never lives in the file itself.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoreConfig {
    /// The database named by `db`: a SQLite path (resolved against the file's
    /// directory) or a PostgreSQL URL without a password.
    pub db: Option<DbLocation>,
    /// The PostgreSQL password from `password_env` or `password_file`.
    pub password: Option<Secret>,
    /// `history_keep`: how long `gc` keeps history lines; `None` keeps the
    /// store's default ([`crate::StoreOptions::history_keep`], 30 days).
    pub history_keep: Option<Duration>,
    /// `clock_skew` (PostgreSQL): how far apart the machines' clocks may be;
    /// `None` keeps the store's default ([`crate::StoreOptions::clock_skew`], 1 s).
    pub clock_skew: Option<Duration>,
}

impl StoreConfig {
    /// The location to open: `db`, with the password (percent-encoded) put
    /// into the URL's user information when there is one. `None` without `db`.
    pub fn location(&self) -> Option<DbLocation> {
        match (&self.db, &self.password) {
            (Some(DbLocation::Postgres(url)), Some(password)) => {
                Some(DbLocation::Postgres(with_password(url, password)))
            }
            (db, _) => db.clone(),
        }
    }
}

/// `url` with `password` after its user name (`scheme://user:password@host…`).
/// A URL without a user name gets none: the server then refuses the login,
/// and says so, rather than the password going to a user we guessed.
fn with_password(url: &str, password: &Secret) -> String {
    use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let encoded = utf8_percent_encode(password.expose(), NON_ALPHANUMERIC);
    format!("{scheme}://{}:{encoded}{}", &rest[..at], &rest[at..])
}

/// `[extract]`: parsers run in supervised child processes, each document under
/// these limits (DESIGN §9). Command-line flags override each key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractConfig {
    /// `[extract.commands]`: external converters by extension (lower case, no
    /// dot): the program and its arguments; an argument `{}` is the document's
    /// temporary file, else the document arrives on standard input.
    pub commands: std::collections::BTreeMap<String, Vec<String>>,
    /// Run parsers in child processes (the default); `false` runs them inside
    /// the worker process, where a hostile file can crash it.
    pub isolation: bool,
    /// Wall-clock time one document may take, before its size's allowance.
    pub timeout: Duration,
    /// Wall-clock time added per MiB of the document.
    pub timeout_per_mib: Duration,
    /// Address space of an extraction child, in bytes.
    pub memory: u64,
    /// CPU time one document may take, before its size's allowance.
    pub cpu: Duration,
    /// CPU time added per MiB of the document.
    pub cpu_per_mib: Duration,
    /// Extracted text of one document, in bytes.
    pub max_text: u64,
    /// `ocr_languages`: tesseract's languages for pictures and scanned pages;
    /// `None` reads English when its pack is installed, an empty list turns
    /// OCR off.
    pub ocr_languages: Option<Vec<String>>,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        use crate::extract::Limits;
        ExtractConfig {
            commands: Default::default(),
            isolation: true,
            timeout: Limits::DEFAULT_DEADLINE,
            timeout_per_mib: Limits::DEFAULT_DEADLINE_PER_MIB,
            memory: Limits::DEFAULT_MEMORY_BYTES,
            cpu: Limits::DEFAULT_CPU_TIME,
            cpu_per_mib: Limits::DEFAULT_CPU_TIME_PER_MIB,
            max_text: Limits::DEFAULT_MAX_OUTPUT_BYTES,
            ocr_languages: None,
        }
    }
}

/// One upstream credential.
#[derive(Debug, Clone, PartialEq)]
pub struct AccountConfig {
    /// The name other sections and the gate's rows refer to; never secret.
    pub name: String,
    /// The login sent to the upstream API with the password; not secret, so it may be logged.
    pub username: String,
    /// Resolved from `password_env` or `password_file`; never printed.
    pub password: Secret,
    /// The last day the credential is valid, if it expires; the gate warns
    /// [`AuthConfig::expiry_warning`] before it.
    pub expires_on: Option<Day>,
}

/// A calendar day as days since 1970-01-01 (UTC), so the gate can compare it with
/// the injected clock's ms / 86_400_000 (see [`Day::from_millis`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(pub i64);

/// `[source.http]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSourceConfig {
    /// Starts with `http://` or `https://`.
    pub base_url: String,
    /// The account pool, in preference order: 1 to [`MAX_SOURCE_ACCOUNTS`] names,
    /// each naming an `[[account]]`, no duplicates.
    pub accounts: Vec<String>,
}

/// `[sink.http]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSinkConfig {
    /// Starts with `http://` or `https://`.
    pub url: String,
    /// Names an `[[account]]`.
    pub account: String,
    /// Deliveries per request while draining the outbox; 1 to [`MAX_BATCH_SIZE`].
    pub batch_size: usize,
    /// Requests per second while draining; finite and at least [`MIN_PER_SECOND`].
    pub max_per_second: f64,
}

/// `[auth]`: the gate's timings (DESIGN §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthConfig {
    /// How long an authentication failure locks the account for everyone.
    pub lock_ttl: Duration,
    /// How long the single prober holds the probe slot before another may try.
    pub probe_ttl: Duration,
    /// The least time between two lock notices for one account.
    pub notify_every: Duration,
    /// How long before `expires_on` the daily expiry warning starts; 0 disables it.
    pub expiry_warning: Duration,
}

/// `[notify]`: the channels a notice goes to (besides the log line, which is always written).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NotifyConfig {
    /// Program, then its arguments, run as they are; the notice comes as one
    /// JSON line on its standard input (see `upstream/notify.rs`).
    pub command: Option<Vec<String>>,
    /// A URL that receives each notice as a JSON `POST`.
    pub webhook: Option<String>,
}

/// `[outbox]`: the caps on deliveries kept while the sink's account is locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxConfig {
    /// Entries older than this are dropped (and counted).
    pub max_age: Duration,
    /// Above this many bytes of payload the oldest entries are dropped (and counted).
    pub max_bytes: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            lock_ttl: Duration::from_secs(30 * 60),
            probe_ttl: Duration::from_secs(60),
            notify_every: Duration::from_secs(60 * 60),
            expiry_warning: Duration::from_secs(14 * 24 * 60 * 60),
        }
    }
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            max_age: Duration::from_secs(24 * 60 * 60),
            max_bytes: 256 * 1024 * 1024,
        }
    }
}

impl Day {
    /// The day (UTC) that a clock reading falls on; floors, so instants before
    /// 1970 land on the right day too.
    pub fn from_millis(ms: Millis) -> Day {
        Day(ms.div_euclid(MS_PER_DAY))
    }

    /// The first millisecond of this day, for comparing with clock readings.
    pub fn start_ms(self) -> Millis {
        self.0.saturating_mul(MS_PER_DAY)
    }

    /// Parses `YYYY-MM-DD`; `None` if it is not a real calendar date.
    pub fn parse(text: &str) -> Option<Day> {
        let format = time::macros::format_description!("[year]-[month]-[day]");
        let date = time::Date::parse(text, &format).ok()?;
        Some(Day(i64::from(date.to_julian_day()) - UNIX_EPOCH_JULIAN_DAY))
    }
}

/// `YYYY-MM-DD`, so notices can name the day.
impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let date = i32::try_from(self.0 + UNIX_EPOCH_JULIAN_DAY)
            .ok()
            .and_then(|julian| time::Date::from_julian_day(julian).ok());
        match date {
            Some(d) => write!(f, "{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day()),
            None => write!(f, "day {} since 1970-01-01", self.0),
        }
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why the configuration file was refused. Every variant names the file; the
/// validation variants also name the key. None ever contains a password.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown key, or a value of the wrong type. The message
    /// carries the line and column; it quotes the offending line only when the
    /// file holds no inline `password` (see [`FileConfig::parse`]).
    #[error("{path}: {message}")]
    Syntax {
        /// The configuration file.
        path: PathBuf,
        /// The TOML parser's message, with line and column (redacted if the file has an inline password).
        message: String,
    },
    /// A value that parsed but is not acceptable.
    #[error("{path}: {key}: {reason}")]
    Invalid {
        /// The configuration file.
        path: PathBuf,
        /// The section and key at fault, e.g. `[sink.http] batch_size`.
        key: String,
        /// What is wrong with the value and what would be accepted.
        reason: String,
    },
    /// A password could not be resolved, or was written inline.
    #[error("{path}: {key}: {reason}")]
    Password {
        /// The configuration file.
        path: PathBuf,
        /// The account and its password key at fault, e.g. `[[account]] "a" password_env`.
        key: String,
        /// Why the password could not be used; never contains the password itself.
        reason: String,
    },
}

impl ConfigError {
    /// The key the error is about (`[sink.http] batch_size`), when there is one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } | ConfigError::Password { key, .. } => Some(key),
            ConfigError::Read { .. } | ConfigError::Syntax { .. } => None,
        }
    }
}

// ---------------------------------------------------------------------------
// Loading (`FileConfig::load` and `parse` are in validate.rs, beside the raw
// as-written tables they read)
// ---------------------------------------------------------------------------

/// How an account's `password_env` is looked up; injected so tests need not
/// mutate the process environment (which is racy across test threads).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<OsString>;

impl FileConfig {
    /// The `[[account]]` called `name`.
    pub fn account(&self, name: &str) -> Option<&AccountConfig> {
        self.accounts.iter().find(|a| a.name == name)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const ORIGIN: &str = "leasehold.toml";

    /// An environment with one variable, so tests never mutate the process's.
    fn env_with(name: &'static str, value: &'static str) -> impl Fn(&str) -> Option<OsString> {
        move |n| (n == name).then(|| OsString::from(value))
    }

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        FileConfig::parse_with_env(text, Path::new(ORIGIN), &env_with("PW", "s3cret-value"))
    }

    fn err(text: &str) -> ConfigError {
        parse(text).expect_err("should be refused")
    }

    /// Asserts an Invalid/Password error on `key` and returns its Display.
    fn err_key(text: &str, key: &str) -> String {
        let e = err(text);
        assert_eq!(e.key(), Some(key), "{e}");
        let shown = e.to_string();
        assert!(shown.starts_with(&format!("{ORIGIN}: {key}: ")), "{shown}");
        shown
    }

    const ACCOUNTS: &str = "[[account]]\nname = \"a\"\nusername = \"u\"\npassword_env = \"PW\"\n\
                            [[account]]\nname = \"b\"\nusername = \"u\"\npassword_env = \"PW\"\n";

    #[test]
    fn the_readme_examples_are_valid_files() {
        let readme = include_str!("../../README.md");
        let blocks: Vec<&str> = readme
            .split("```toml\n")
            .skip(1)
            .map(|b| &b[..b.find("```").unwrap()])
            // A Cargo manifest (how to depend on leasehold) is not a leasehold.toml.
            .filter(|b| !b.contains("[dependencies]"))
            .collect();
        let env = env_with("LEASEHOLD_PASSWORD", "x");
        let parsed: Vec<FileConfig> = blocks
            .iter()
            .map(|text| {
                FileConfig::parse_with_env(text, Path::new(ORIGIN), &env)
                    .unwrap_or_else(|e| panic!("README example: {e}\n{text}"))
            })
            .collect();
        let upstream = parsed
            .iter()
            .find(|c| c.sink_http.is_some())
            .expect("the upstream example");
        assert_eq!(upstream.sink_http.as_ref().map(|s| s.batch_size), Some(100));
        assert_eq!(upstream.notify.command.as_ref().map(|v| v.len()), Some(1));
        let converters = parsed
            .iter()
            .find(|c| !c.extract.commands.is_empty())
            .expect("the converters example");
        assert_eq!(converters.extract.commands["md"], ["pandoc", "-t", "plain"]);
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c, FileConfig::default());
        assert_eq!(c.auth.lock_ttl, Duration::from_secs(1800));
        assert_eq!(c.auth.probe_ttl, Duration::from_secs(60));
        assert_eq!(c.auth.notify_every, Duration::from_secs(3600));
        assert_eq!(c.auth.expiry_warning, Duration::from_secs(14 * 86_400));
        assert_eq!(c.outbox.max_age, Duration::from_secs(86_400));
        assert_eq!(c.outbox.max_bytes, 256 * 1024 * 1024);
        assert_eq!(
            c.notify,
            NotifyConfig {
                command: None,
                webhook: None
            }
        );
        assert!(c.source_http.is_none() && c.sink_http.is_none() && c.accounts.is_empty());
    }

    #[test]
    fn the_documented_example_is_valid_and_matches_the_module_docs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("secrets")).unwrap();
        std::fs::write(dir.path().join("secrets/spare.password"), "spare-pw\n").unwrap();
        std::fs::write(dir.path().join("secrets/db.password"), "db pw/@:%\n").unwrap();
        let origin = dir.path().join("leasehold.toml");
        let env = env_with("LEASEHOLD_PRIMARY_PASSWORD", "primary-pw");
        let c = FileConfig::parse_with_env(EXAMPLE, &origin, &env).unwrap();

        assert_eq!(c.accounts.len(), 2);
        let primary = c.account("primary").unwrap();
        assert_eq!(primary.password.expose(), "primary-pw");
        assert_eq!(primary.expires_on, Day::parse("2030-06-30"));
        assert_eq!(c.account("spare").unwrap().password.expose(), "spare-pw");
        assert!(c.account("nobody").is_none());
        assert_eq!(c.source_http.as_ref().unwrap().accounts, ["primary", "spare"]);
        let sink = c.sink_http.as_ref().unwrap();
        assert_eq!((sink.batch_size, sink.max_per_second), (100, 10.0));
        assert_eq!(c.auth, AuthConfig::default());
        assert_eq!(c.outbox, OutboxConfig::default());
        assert_eq!(c.extract, ExtractConfig::default());
        assert_eq!(c.search.tokenizer, None);
        assert_eq!(c.notify.command.as_ref().unwrap().len(), 3);
        // The password goes into the URL's user information, percent-encoded.
        assert_eq!(
            c.store.location(),
            Some(DbLocation::Postgres(
                "postgres://leasehold:db%20pw%2F%40%3A%25@db.example.com/leasehold".into()
            ))
        );

        // The module docs show the same text, line for line.
        let source = include_str!("mod.rs");
        let documented: String = source
            .lines()
            .skip_while(|l| *l != "//! ```toml")
            .skip(1)
            .take_while(|l| *l != "//! ```")
            .map(|l| format!("{}\n", l.strip_prefix("//! ").unwrap_or("")))
            .collect();
        assert_eq!(documented, EXAMPLE);
    }

    #[test]
    fn store_db_is_a_path_beside_the_file_or_a_url_without_password() {
        let dir = tempfile::tempdir().unwrap();
        let origin = dir.path().join("leasehold.toml");
        let at = |text: &str| FileConfig::parse_with_env(text, &origin, &env_with("PW", "p@ss word"));
        let c = at("[store]\ndb = \"queue.db\"\n").unwrap();
        assert_eq!(
            c.store.location(),
            Some(DbLocation::Sqlite(dir.path().join("queue.db")))
        );
        let c =
            at("[store]\ndb = \"postgres://lh@h:5433/q?sslmode=disable\"\npassword_env = \"PW\"\n").unwrap();
        assert_eq!(
            c.store.location(),
            Some(DbLocation::Postgres(
                "postgres://lh:p%40ss%20word@h:5433/q?sslmode=disable".into()
            ))
        );
        let c = at("[store]\ndb = \"postgresql://h/q\"\n").unwrap();
        assert_eq!(
            c.store.location(),
            Some(DbLocation::Postgres("postgresql://h/q".into()))
        );
        assert_eq!(parse("").unwrap().store.location(), None);
    }

    #[test]
    fn store_refuses_an_inline_password_and_a_password_without_a_url() {
        for db in [
            "postgres://lh:hunter2@h/q",
            "postgres://h/q?password=hunter2",
            "postgres://h/q?user=a&PASSWORD=hunter2",
        ] {
            let shown = err_key(&format!("[store]\ndb = \"{db}\"\n"), "[store] db");
            assert!(shown.contains("inline passwords are not accepted"), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        err_key(
            "[store]\ndb = \"q.db\"\npassword_env = \"PW\"\n",
            "[store] password_env",
        );
        err_key("[store]\npassword_env = \"PW\"\n", "[store] db");
        err_key("[store]\ndb = \"\"\n", "[store] db");
        let unknown = err("[store]\nsb = \"q.db\"\n").to_string();
        assert!(unknown.contains("unknown field `sb`"), "{unknown}");
    }

    #[test]
    fn load_reads_the_file_and_resolves_a_relative_password_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pw"), "from-file\r\n").unwrap();
        let path = dir.path().join("leasehold.toml");
        std::fs::write(
            &path,
            "[[account]]\nname = \"a\"\nusername = \"u\"\npassword_file = \"pw\"\n",
        )
        .unwrap();
        let c = FileConfig::load(&path).unwrap();
        assert_eq!(c.accounts[0].password.expose(), "from-file");

        let missing = FileConfig::load(&dir.path().join("absent.toml")).unwrap_err();
        assert!(matches!(missing, ConfigError::Read { .. }), "{missing}");
        assert!(missing.to_string().contains("absent.toml"));
    }

    #[test]
    fn password_file_keeps_all_but_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pw"), " two \n\n").unwrap();
        let text = "[[account]]\nname = \"a\"\nusername = \"u\"\npassword_file = \"pw\"\n";
        let c = FileConfig::parse_with_env(text, &dir.path().join("x.toml"), &no_env).unwrap();
        assert_eq!(c.accounts[0].password.expose(), " two \n");
    }

    #[test]
    fn password_file_errors_name_the_path_not_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        let origin = dir.path().join("x.toml");
        let text =
            |file: &str| format!("[[account]]\nname = \"a\"\nusername = \"u\"\npassword_file = \"{file}\"\n");

        let e = FileConfig::parse_with_env(&text("nope"), &origin, &no_env).unwrap_err();
        assert!(matches!(e, ConfigError::Password { .. }), "{e}");
        assert_eq!(e.key(), Some("[[account]] \"a\" password_file"));
        assert!(
            e.to_string()
                .contains(&dir.path().join("nope").display().to_string()),
            "{e}"
        );

        std::fs::write(dir.path().join("empty"), "\n").unwrap();
        let e = FileConfig::parse_with_env(&text("empty"), &origin, &no_env).unwrap_err();
        assert!(e.to_string().ends_with("empty: is empty"), "{e}");

        std::fs::write(dir.path().join("bin"), [0xff, 0xfe, b'x']).unwrap();
        let e = FileConfig::parse_with_env(&text("bin"), &origin, &no_env).unwrap_err();
        assert!(e.to_string().contains("not valid UTF-8"), "{e}");
    }

    #[test]
    fn password_env_errors_name_the_variable_not_the_value() {
        let base = "[[account]]\nname = \"a\"\nusername = \"u\"\npassword_env = \"PW\"\n";
        let c = parse(base).unwrap();
        assert_eq!(c.accounts[0].password.expose(), "s3cret-value");
        assert!(!format!("{c:?}").contains("s3cret-value"));

        let e = FileConfig::parse_with_env(base, Path::new(ORIGIN), &no_env).unwrap_err();
        assert!(matches!(e, ConfigError::Password { .. }));
        assert_eq!(
            e.to_string(),
            "leasehold.toml: [[account]] \"a\" password_env: environment variable PW is not set"
        );
        let e = FileConfig::parse_with_env(base, Path::new(ORIGIN), &env_with("PW", "")).unwrap_err();
        assert!(e.to_string().ends_with("environment variable PW is empty"), "{e}");

        err_key(
            &base.replace("\"PW\"", "\"A=B\""),
            "[[account]] \"a\" password_env",
        );
    }

    #[test]
    fn inline_password_is_refused_without_echoing_it() {
        let text = "[[account]]\nname = \"a\"\nusername = \"u\"\npassword = \"hunter2-inline\"\n";
        let e = err(text);
        assert!(matches!(e, ConfigError::Password { .. }), "{e}");
        let shown = err_key(text, "[[account]] \"a\" password");
        assert!(
            shown.contains("password_env") && shown.contains("password_file"),
            "{shown}"
        );
        assert!(!format!("{shown} {e:?}").contains("hunter2"), "{shown}");
    }

    #[test]
    fn toml_errors_never_quote_an_inline_password() {
        let broken = [
            "[[account]]\nname = \"a\"\npassword = \"hunter2-inline\n", // unterminated string
            "[[account]]\nname = \"a\"\npassword = hunter2-inline\n",   // bare value
            "[[account]]\npassword = \"hunter2-inline\"\nnmae = \"a\"\n", // unknown key nearby
            "[[account]]\npassword = \"hunter2-inline\"\npassword = \"x\"\n", // duplicate key
            "[[account]]\nname = 5\npassword = \"hunter2-inline\"\n",   // type error nearby
        ];
        for text in broken {
            let e = err(text);
            assert!(matches!(e, ConfigError::Syntax { .. }), "{e}");
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("line "), "{shown}");
        }
        // A mistyped key's value is never quoted either, password or not.
        let e = err("[[account]]\nname = \"a\"\npasswd = \"hunter2-typo\"\n");
        assert!(!format!("{e} {e:?}").contains("hunter2"), "{e}");
        assert!(e.to_string().contains("passwd"), "the key is named: {e}");
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        for (text, key) in [
            ("colour = 1\n", "colour"),
            ("[auth]\nlock_tll = \"1m\"\n", "lock_tll"),
            (
                "[sink.http]\nurl = \"http://x\"\naccount = \"a\"\nbatch_sise = 1\n",
                "batch_sise",
            ),
            ("[source.ftp]\n", "ftp"),
            ("[[account]]\nname = \"a\"\nusrname = \"u\"\n", "usrname"),
            ("[outbox]\nmax_size = 1\n", "max_size"),
            ("[notify]\nemail = \"x\"\n", "email"),
        ] {
            let e = err(text);
            assert!(matches!(e, ConfigError::Syntax { .. }), "{e}");
            assert!(e.to_string().contains(&format!("`{key}`")), "{e}");
        }
    }

    #[test]
    fn account_validation_names_its_key() {
        let acct = |body: &str| format!("[[account]]\n{body}\n");
        err_key(
            &acct("username = \"u\"\npassword_env = \"PW\""),
            "[[account]] #1 name",
        );
        err_key(
            &acct("name = \"\"\nusername = \"u\"\npassword_env = \"PW\""),
            "[[account]] #1 name",
        );
        err_key(
            &acct("name = \"a b\"\nusername = \"u\"\npassword_env = \"PW\""),
            "[[account]] #1 name",
        );
        err_key(
            &acct("name = \"a\"\npassword_env = \"PW\""),
            "[[account]] \"a\" username",
        );
        err_key(
            &acct("name = \"a\"\nusername = \"\"\npassword_env = \"PW\""),
            "[[account]] \"a\" username",
        );
        err_key(
            &acct("name = \"a\"\nusername = \"u\""),
            "[[account]] \"a\" password_env",
        );
        err_key(
            &acct("name = \"a\"\nusername = \"u\"\npassword_env = \"PW\"\npassword_file = \"f\""),
            "[[account]] \"a\" password_env",
        );
        err_key(
            &acct("name = \"a\"\nusername = \"u\"\npassword_env = \"PW\"\nexpires_on = \"2030-02-30\""),
            "[[account]] \"a\" expires_on",
        );
        err_key(
            &acct("name = \"a\"\nusername = \"u\"\npassword_env = \"PW\"\nexpires_on = 5"),
            "[[account]] \"a\" expires_on",
        );
    }

    #[test]
    fn duplicate_account_names_are_refused() {
        let text = ACCOUNTS.replace("name = \"b\"", "name = \"a\"");
        let shown = err_key(&text, "[[account]] #2 name");
        assert!(shown.contains("#1"), "{shown}");
    }

    #[test]
    fn source_accounts_single_list_and_limits() {
        let src = |line: &str| format!("{ACCOUNTS}[source.http]\nbase_url = \"https://x\"\n{line}\n");
        assert_eq!(
            parse(&src("account = \"b\""))
                .unwrap()
                .source_http
                .unwrap()
                .accounts,
            ["b"]
        );
        assert_eq!(
            parse(&src("accounts = [\"b\", \"a\"]"))
                .unwrap()
                .source_http
                .unwrap()
                .accounts,
            ["b", "a"]
        );
        err_key(&src("account = \"zed\""), "[source.http] accounts");
        let shown = err_key(&src("accounts = [\"a\", \"zed\"]"), "[source.http] accounts");
        assert!(shown.contains("\"zed\""), "{shown}");
        err_key(&src("accounts = [\"a\", \"a\"]"), "[source.http] accounts");
        err_key(&src("accounts = []"), "[source.http] accounts");
        err_key(
            &src("account = \"a\"\naccounts = [\"b\"]"),
            "[source.http] accounts",
        );
        err_key(&src(""), "[source.http] account");
        let six = src("accounts = [\"a\", \"b\", \"a\", \"b\", \"a\", \"b\"]");
        let shown = err_key(&six, "[source.http] accounts");
        assert!(shown.contains("at most 5"), "{shown}");
    }

    #[test]
    fn urls_must_be_http() {
        let shown = err_key(
            &format!("{ACCOUNTS}[source.http]\nbase_url = \"ftp://x/token\"\naccount = \"a\"\n"),
            "[source.http] base_url",
        );
        assert!(!shown.contains("token"), "the value is not echoed: {shown}");
        err_key(
            &format!("{ACCOUNTS}[source.http]\naccount = \"a\"\n"),
            "[source.http] base_url",
        );
        err_key(
            &format!("{ACCOUNTS}[sink.http]\nurl = \"x\"\naccount = \"a\"\n"),
            "[sink.http] url",
        );
        err_key("[notify]\nwebhook = \"hooks.example.com\"\n", "[notify] webhook");
        err_key("[notify]\nwebhook = \"https://\"\n", "[notify] webhook");
        assert!(parse("[notify]\nwebhook = \"http://127.0.0.1:9/x\"\n").is_ok());
    }

    #[test]
    fn sink_defaults_and_bounds() {
        let sink =
            |extra: &str| format!("{ACCOUNTS}[sink.http]\nurl = \"http://s\"\naccount = \"b\"\n{extra}\n");
        let s = parse(&sink("")).unwrap().sink_http.unwrap();
        assert_eq!(
            (s.url.as_str(), s.account.as_str(), s.batch_size, s.max_per_second),
            ("http://s", "b", 100, 10.0)
        );
        let s = parse(&sink("batch_size = 10000\nmax_per_second = 0.5"))
            .unwrap()
            .sink_http
            .unwrap();
        assert_eq!((s.batch_size, s.max_per_second), (10_000, 0.5));

        assert_eq!(
            err_key(&sink("batch_size = 0"), "[sink.http] batch_size"),
            "leasehold.toml: [sink.http] batch_size: must be at least 1"
        );
        err_key(&sink("batch_size = -3"), "[sink.http] batch_size");
        err_key(&sink("batch_size = 10001"), "[sink.http] batch_size");
        err_key(&sink("max_per_second = 0"), "[sink.http] max_per_second");
        err_key(&sink("max_per_second = -1.5"), "[sink.http] max_per_second");
        err_key(&sink("max_per_second = 1e-300"), "[sink.http] max_per_second");
        err_key(&sink("max_per_second = nan"), "[sink.http] max_per_second");
        err_key(&sink("max_per_second = inf"), "[sink.http] max_per_second");
        err_key(
            &format!("{ACCOUNTS}[sink.http]\nurl = \"http://s\"\n"),
            "[sink.http] account",
        );
        err_key(
            &format!("{ACCOUNTS}[sink.http]\nurl = \"http://s\"\naccount = \"c\"\n"),
            "[sink.http] account",
        );
    }

    #[test]
    fn ocr_languages_are_codes_named_once_and_an_empty_list_is_no_ocr() {
        assert_eq!(parse("").unwrap().extract.ocr_languages, None);
        let c = parse("[extract]\nocr_languages = [\"eng\", \"kor\", \"chi_sim\"]\n").unwrap();
        assert_eq!(
            c.extract.ocr_languages,
            Some(vec!["eng".into(), "kor".into(), "chi_sim".into()])
        );
        let off = parse("[extract]\nocr_languages = []\n").unwrap();
        assert_eq!(off.extract.ocr_languages, Some(vec![]));
        err_key(
            "[extract]\nocr_languages = [\"../../etc/x\"]\n",
            "[extract] ocr_languages",
        );
        err_key(
            "[extract]\nocr_languages = [\"eng\", \"eng\"]\n",
            "[extract] ocr_languages",
        );
        err_key("[extract]\nocr_languages = [\"\"]\n", "[extract] ocr_languages");
    }

    #[test]
    fn durations_parse_with_humantime() {
        let c = parse("[auth]\nlock_ttl = \"2s\"\nprobe_ttl = \"1m 30s\"\nnotify_every = \"2h\"\nexpiry_warning = \"0s\"\n[outbox]\nmax_age = \"3d\"\n").unwrap();
        assert_eq!(c.auth.lock_ttl, Duration::from_secs(2));
        assert_eq!(c.auth.probe_ttl, Duration::from_secs(90));
        assert_eq!(c.auth.notify_every, Duration::from_secs(7200));
        assert_eq!(c.auth.expiry_warning, Duration::ZERO);
        assert_eq!(c.outbox.max_age, Duration::from_secs(3 * 86_400));

        err_key("[auth]\nlock_ttl = \"30 minutes-ish\"\n", "[auth] lock_ttl");
        err_key("[auth]\nprobe_ttl = \"0s\"\n", "[auth] probe_ttl");
        err_key("[auth]\nnotify_every = \"\"\n", "[auth] notify_every");
        err_key("[auth]\nexpiry_warning = \"soon\"\n", "[auth] expiry_warning");
        err_key("[outbox]\nmax_age = \"0s\"\n", "[outbox] max_age");

        // The time limits' allowances per MiB may be turned off; the bases may not.
        let c = parse("[extract]\ntimeout_per_mib = \"5s\"\ncpu_per_mib = \"0s\"\n").unwrap();
        assert_eq!(
            (c.extract.timeout_per_mib, c.extract.cpu_per_mib),
            (Duration::from_secs(5), Duration::ZERO)
        );
        assert_eq!(parse("").unwrap().extract.timeout_per_mib, Duration::from_secs(2));
        err_key("[extract]\ntimeout = \"0s\"\n", "[extract] timeout");
        err_key("[extract]\ncpu_per_mib = \"lots\"\n", "[extract] cpu_per_mib");
    }

    #[test]
    fn sizes_accept_strings_and_integers() {
        let size = |v: &str| parse(&format!("[outbox]\nmax_bytes = {v}\n")).map(|c| c.outbox.max_bytes);
        assert_eq!(size("\"256MiB\"").unwrap(), 256 * 1024 * 1024);
        assert_eq!(size("\"1 GB\"").unwrap(), 1_000_000_000);
        assert_eq!(size("\"4096\"").unwrap(), 4096);
        assert_eq!(size("1048576").unwrap(), 1_048_576);
        for bad in ["0", "-1", "\"lots\"", "\"0B\"", "1.5", "true"] {
            let e = size(bad).unwrap_err();
            assert_eq!(e.key(), Some("[outbox] max_bytes"), "{bad}: {e}");
        }
    }

    #[test]
    fn notify_command_is_an_array_or_one_program_path() {
        let cmd = |v: &str| parse(&format!("[notify]\ncommand = {v}\n")).map(|c| c.notify.command.unwrap());
        assert_eq!(cmd("[\"/bin/echo\", \"-n\"]").unwrap(), ["/bin/echo", "-n"]);
        assert_eq!(
            cmd("\"/opt/my tools/page me\"").unwrap(),
            ["/opt/my tools/page me"]
        );
        for bad in ["[]", "\"\"", "[\"\"]", "[\"x\", 1]", "7"] {
            let e = cmd(bad).unwrap_err();
            assert_eq!(e.key(), Some("[notify] command"), "{bad}: {e}");
        }
    }

    #[test]
    fn days_count_from_the_unix_epoch() {
        assert_eq!(Day::parse("1970-01-01"), Some(Day(0)));
        assert_eq!(Day::parse("1970-01-02"), Some(Day(1)));
        assert_eq!(Day::parse("1969-12-31"), Some(Day(-1)));
        assert_eq!(Day::parse("2000-03-01"), Some(Day(11_017)));
        assert_eq!(Day::parse("2023-02-29"), None);
        assert_eq!(Day::parse("2023-2-1"), None);
        assert_eq!(Day::parse("yesterday"), None);
        assert_eq!(Day(11_017).to_string(), "2000-03-01");
        assert_eq!(Day::from_millis(86_400_000 - 1), Day(0));
        assert_eq!(Day::from_millis(86_400_000), Day(1));
        assert_eq!(Day::from_millis(-1), Day(-1));
        assert_eq!(Day(2).start_ms(), 2 * 86_400_000);
        assert!(Day(1) < Day(2));

        let text =
            "[[account]]\nname = \"a\"\nusername = \"u\"\npassword_env = \"PW\"\nexpires_on = 1970-01-02\n";
        assert_eq!(parse(text).unwrap().accounts[0].expires_on, Some(Day(1)));
    }

    #[test]
    fn extract_commands_are_read_by_extension_and_checked() {
        let c = parse("[extract.commands]\npdf = [\"pdftotext\", \"{}\", \"-\"]\nmd = \"pandoc\"\n").unwrap();
        assert_eq!(c.extract.commands["pdf"], ["pdftotext", "{}", "-"]);
        assert_eq!(c.extract.commands["md"], ["pandoc"]);
        assert!(c.extract.isolation);
        assert!(err_key(
            "[extract.commands]\n\".PDF\" = \"x\"\n",
            "[extract.commands] .PDF"
        )
        .contains("lower case"));
        assert!(err_key("[extract.commands]\npdf = [\"\"]\n", "[extract.commands] pdf").contains("empty"));
    }
}
