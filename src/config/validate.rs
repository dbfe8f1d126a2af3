//! Turning the file's raw TOML tables into validated configuration: every key
//! checked and named in its error, passwords resolved from their variable or file.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::*;

impl FileConfig {
    /// Reads, parses and validates the file at `path`, and resolves passwords.
    ///
    /// # Failure
    /// [`ConfigError::Read`] if the file cannot be read; otherwise as [`FileConfig::parse`].
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        FileConfig::parse(&text, path)
    }

    /// Parses and validates `text`, resolving `password_env` from the process
    /// environment. `origin` is the file the text came from: it names the file in
    /// errors, and relative `password_file` paths are resolved against its directory.
    ///
    /// # Failure
    /// The first problem found, naming its key. A TOML error quotes the offending
    /// line only if the text contains no inline `password` key; otherwise it gives
    /// just the line and column, so a refused password is never echoed.
    pub fn parse(text: &str, origin: &Path) -> Result<FileConfig, ConfigError> {
        FileConfig::parse_with_env(text, origin, &|name| std::env::var_os(name))
    }

    /// [`FileConfig::parse`] with `password_env` looked up through `env` instead
    /// of the process environment (for tests, and for embedders that keep secrets elsewhere).
    pub fn parse_with_env(text: &str, origin: &Path, env: EnvLookup<'_>) -> Result<FileConfig, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: origin.to_path_buf(),
            message: toml_message(text, &e),
        })?;
        Validator { path: origin, env }.file(raw)
    }
}

/// Fields that need a message naming the key when missing or mistyped are
/// `Option` or `toml::Value` here and checked in the validation pass.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    #[serde(default)]
    account: Vec<RawAccount>,
    #[serde(default)]
    source: RawSource,
    #[serde(default)]
    sink: RawSink,
    #[serde(default)]
    auth: RawAuth,
    #[serde(default)]
    notify: RawNotify,
    #[serde(default)]
    outbox: RawOutbox,
    #[serde(default)]
    extract: RawExtract,
    #[serde(default)]
    store: RawStore,
    #[serde(default)]
    search: RawSearch,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSearch {
    tokenizer: Option<String>,
    stemming: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    db: Option<String>,
    password_env: Option<String>,
    password_file: Option<String>,
    history_keep: Option<String>,
    clock_skew: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAccount {
    name: Option<String>,
    username: Option<String>,
    password_env: Option<String>,
    password_file: Option<String>,
    /// Accepted by the parser only so it can be refused by name; `IgnoredAny`
    /// keeps the value itself out of memory and out of any type error.
    password: Option<IgnoredAny>,
    expires_on: Option<toml::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    http: Option<RawHttpSource>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttpSource {
    base_url: Option<String>,
    account: Option<String>,
    accounts: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSink {
    http: Option<RawHttpSink>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttpSink {
    url: Option<String>,
    account: Option<String>,
    batch_size: Option<i64>,
    max_per_second: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    lock_ttl: Option<String>,
    probe_ttl: Option<String>,
    notify_every: Option<String>,
    expiry_warning: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotify {
    command: Option<toml::Value>,
    webhook: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutbox {
    max_age: Option<String>,
    max_bytes: Option<toml::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExtract {
    isolation: Option<bool>,
    timeout: Option<String>,
    timeout_per_mib: Option<String>,
    memory: Option<toml::Value>,
    cpu: Option<String>,
    cpu_per_mib: Option<String>,
    max_text: Option<toml::Value>,
    ocr_languages: Option<Vec<String>>,
    #[serde(default)]
    commands: toml::Table,
}

/// Whether a PostgreSQL URL carries a password: in its user information
/// (`user:password@`) or as a `password=` parameter.
pub(super) fn url_has_password(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (authority, query) = match rest.split_once('?') {
        Some((before, query)) => (before.split('/').next().unwrap_or(""), query),
        None => (rest.split('/').next().unwrap_or(""), ""),
    };
    let in_userinfo = authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'));
    let in_query = query.split('&').any(|pair| {
        pair.split('=')
            .next()
            .is_some_and(|k| k.eq_ignore_ascii_case("password"))
    });
    in_userinfo || in_query
}

/// A TOML error as line, column and message; toml's own rendering would quote
/// the source line.
pub(super) fn toml_message(text: &str, err: &toml::de::Error) -> String {
    // Never the quoted line: a mistyped key (`passwd = "..."`) would put a
    // secret in the error.
    let message = err.message().trim_end().replace('\n', "; ");
    match err.span().and_then(|span| line_column(text, span.start)) {
        Some((line, column)) => format!("TOML parse error at line {line}, column {column}: {message}"),
        None => format!("TOML parse error: {message}"),
    }
}

/// 1-based line and column (in characters) of byte `offset`.
pub(super) fn line_column(text: &str, offset: usize) -> Option<(usize, usize)> {
    let before = text.get(..offset)?;
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    Some((line, column))
}

/// Builds the public types from the raw ones; every error names the file and key.
pub(super) struct Validator<'a> {
    pub(super) path: &'a Path,
    pub(super) env: EnvLookup<'a>,
}

impl Validator<'_> {
    fn invalid(&self, key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            key: key.into(),
            reason: reason.into(),
        }
    }

    fn password_error(&self, key: String, reason: String) -> ConfigError {
        ConfigError::Password {
            path: self.path.to_path_buf(),
            key,
            reason,
        }
    }

    pub(super) fn file(&self, raw: RawFile) -> Result<FileConfig, ConfigError> {
        let accounts = self.accounts(raw.account)?;
        let names: Vec<&str> = accounts.iter().map(|a| a.name.as_str()).collect();
        let source_http = raw.source.http.map(|s| self.source(s, &names)).transpose()?;
        let sink_http = raw.sink.http.map(|s| self.sink(s, &names)).transpose()?;
        Ok(FileConfig {
            source_http,
            sink_http,
            auth: self.auth(raw.auth)?,
            notify: self.notify(raw.notify)?,
            outbox: self.outbox(raw.outbox)?,
            extract: self.extract(raw.extract)?,
            store: self.store(raw.store)?,
            search: self.search(raw.search)?,
            accounts,
        })
    }

    /// `[search]`: `tokenizer` is `unicode61` or `trigram`, `stemming`
    /// `english` or `none`.
    fn search(&self, raw: RawSearch) -> Result<SearchConfig, ConfigError> {
        let tokenizer = self.named(raw.tokenizer, "tokenizer", "\"unicode61\" or \"trigram\"", |n| {
            crate::Tokenizer::parse(n).ok()
        })?;
        let stemming = self.named(raw.stemming, "stemming", "\"english\" or \"none\"", |n| {
            crate::Stemming::parse(n).ok()
        })?;
        Ok(SearchConfig { tokenizer, stemming })
    }

    /// `[search] key`'s value read by `parse`; one it cannot read is refused
    /// naming the ones it takes (`choices`).
    fn named<T>(
        &self,
        value: Option<String>,
        key: &str,
        choices: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<T>, ConfigError> {
        value
            .map(|name| {
                parse(&name).ok_or_else(|| {
                    self.invalid(format!("[search] {key}"), format!("{name:?}: use {choices}"))
                })
            })
            .transpose()
    }

    // ----- store -----

    /// `[store]`: a SQLite path (relative to this file's directory) or a
    /// PostgreSQL URL without its password, which comes from `password_env`
    /// or `password_file` like an account's.
    fn store(&self, raw: RawStore) -> Result<StoreConfig, ConfigError> {
        let has_password = raw.password_env.is_some() || raw.password_file.is_some();
        let history_keep = raw
            .history_keep
            .map(|text| self.duration("[store] history_keep", Some(text), Duration::ZERO, false))
            .transpose()?;
        let clock_skew = raw
            .clock_skew
            .map(|text| self.duration("[store] clock_skew", Some(text), Duration::ZERO, false))
            .transpose()?;
        let Some(db) = raw.db else {
            if has_password {
                return Err(self.invalid("[store] db", "is required with a password"));
            }
            return Ok(StoreConfig {
                history_keep,
                clock_skew,
                ..StoreConfig::default()
            });
        };
        if db.is_empty() {
            return Err(self.invalid("[store] db", "must not be empty"));
        }
        let db = match DbLocation::of(&db) {
            DbLocation::Unsupported(scheme) => {
                return Err(self.invalid(
                    "[store] db",
                    format!("{scheme} is not a database leasehold opens (a SQLite path or postgres://)"),
                ));
            }
            DbLocation::Postgres(url) => {
                if url_has_password(&url) {
                    return Err(self.invalid(
                        "[store] db",
                        "inline passwords are not accepted; use password_env (an environment \
                         variable) or password_file (a file that holds it)",
                    ));
                }
                DbLocation::Postgres(url)
            }
            DbLocation::Sqlite(path) => {
                if has_password {
                    return Err(self.invalid(
                        "[store] password_env",
                        "a password is for a postgres:// database, not a SQLite file",
                    ));
                }
                DbLocation::Sqlite(self.path.parent().unwrap_or(Path::new("")).join(path))
            }
        };
        let password = if has_password {
            Some(self.resolve_password("[store]", raw.password_env, raw.password_file)?)
        } else {
            None
        };
        Ok(StoreConfig {
            db: Some(db),
            password,
            history_keep,
            clock_skew,
        })
    }

    // ----- accounts -----

    fn accounts(&self, raw: Vec<RawAccount>) -> Result<Vec<AccountConfig>, ConfigError> {
        let mut out: Vec<AccountConfig> = Vec::with_capacity(raw.len());
        for (index, account) in raw.into_iter().enumerate() {
            let built = self.account(index + 1, account)?;
            if let Some(first) = out.iter().position(|a| a.name == built.name) {
                return Err(self.invalid(
                    format!("[[account]] #{} name", index + 1),
                    format!(
                        "{:?} is already the name of [[account]] #{}",
                        built.name,
                        first + 1
                    ),
                ));
            }
            out.push(built);
        }
        Ok(out)
    }

    /// `number` is 1-based, for messages about accounts whose name is not usable yet.
    fn account(&self, number: usize, raw: RawAccount) -> Result<AccountConfig, ConfigError> {
        let name = self.account_name(number, raw.name)?;
        let label = format!("[[account]] {name:?}");
        if raw.password.is_some() {
            return Err(self.password_error(
                format!("{label} password"),
                "inline passwords are not accepted; use password_env (an environment variable) \
                 or password_file (a file that holds it)"
                    .into(),
            ));
        }
        let username = match raw.username {
            Some(u) if !u.is_empty() => u,
            Some(_) => return Err(self.invalid(format!("{label} username"), "must not be empty")),
            None => return Err(self.invalid(format!("{label} username"), "is required")),
        };
        let password = self.resolve_password(&label, raw.password_env, raw.password_file)?;
        let expires_on = raw
            .expires_on
            .map(|v| self.day(&format!("{label} expires_on"), &v))
            .transpose()?;
        Ok(AccountConfig {
            name,
            username,
            password,
            expires_on,
        })
    }

    /// Names are restricted because they appear in log lines, notices, database
    /// rows and environment-variable-like contexts, where spaces or quotes confuse.
    fn account_name(&self, number: usize, name: Option<String>) -> Result<String, ConfigError> {
        let key = format!("[[account]] #{number} name");
        let name = name.ok_or_else(|| self.invalid(&key, "is required"))?;
        if name.is_empty() {
            return Err(self.invalid(key, "must not be empty"));
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
        if let Some(bad) = name.chars().find(|c| !allowed(*c)) {
            return Err(self.invalid(
                key,
                format!("{name:?} contains {bad:?}; use only letters, digits, '_', '.' and '-'"),
            ));
        }
        Ok(name)
    }

    fn resolve_password(
        &self,
        label: &str,
        env: Option<String>,
        file: Option<String>,
    ) -> Result<Secret, ConfigError> {
        match (env, file) {
            (Some(var), None) => self.password_from_env(&format!("{label} password_env"), &var),
            (None, Some(file)) => self.password_from_file(&format!("{label} password_file"), &file),
            (Some(_), Some(_)) => Err(self.invalid(
                format!("{label} password_env"),
                "set exactly one of password_env or password_file, not both",
            )),
            (None, None) => {
                Err(self.invalid(format!("{label} password_env"), "is required (or password_file)"))
            }
        }
    }

    /// Errors name the variable, never its value.
    fn password_from_env(&self, key: &str, var: &str) -> Result<Secret, ConfigError> {
        // `=` and NUL cannot be part of a variable name; refuse them rather than
        // hand them to the platform's lookup.
        if var.is_empty() || var.contains(['=', '\0']) {
            return Err(self.invalid(key, format!("{var:?} is not a usable environment variable name")));
        }
        let fail = |reason: String| self.password_error(key.to_string(), reason);
        let value = (self.env)(var).ok_or_else(|| fail(format!("environment variable {var} is not set")))?;
        let value = value
            .into_string()
            .map_err(|_| fail(format!("environment variable {var} is not valid UTF-8")))?;
        if value.is_empty() {
            return Err(fail(format!("environment variable {var} is empty")));
        }
        Ok(Secret::new(value))
    }

    /// Errors name the file, never its contents.
    fn password_from_file(&self, key: &str, file: &str) -> Result<Secret, ConfigError> {
        if file.is_empty() {
            return Err(self.invalid(key, "must not be empty"));
        }
        let path = self.path.parent().unwrap_or(Path::new("")).join(file);
        let value = read_password_file(&path).map_err(|reason| {
            self.password_error(key.to_string(), format!("{}: {reason}", path.display()))
        })?;
        Ok(Secret::new(value))
    }

    fn day(&self, key: &str, value: &toml::Value) -> Result<Day, ConfigError> {
        let text = match value {
            toml::Value::String(s) => s.clone(),
            // A bare TOML date (`expires_on = 2030-06-30`) is accepted too.
            toml::Value::Datetime(d) if d.time.is_none() && d.offset.is_none() => d.to_string(),
            _ => return Err(self.invalid(key, "expected a date such as \"2030-06-30\"")),
        };
        Day::parse(&text).ok_or_else(|| {
            self.invalid(
                key,
                format!("{text:?} is not a calendar date in the form YYYY-MM-DD"),
            )
        })
    }

    // ----- source and sink -----

    fn source(&self, raw: RawHttpSource, names: &[&str]) -> Result<HttpSourceConfig, ConfigError> {
        const S: &str = "[source.http]";
        let base_url = self.http_url(&format!("{S} base_url"), raw.base_url)?;
        let accounts = match (raw.account, raw.accounts) {
            (Some(one), None) => vec![one],
            (None, Some(many)) => many,
            (Some(_), Some(_)) => {
                return Err(self.invalid(
                    format!("{S} accounts"),
                    "set either account or accounts, not both",
                ))
            }
            (None, None) => {
                return Err(self.invalid(format!("{S} account"), "is required (or accounts = [...])"))
            }
        };
        self.account_pool(&format!("{S} accounts"), &accounts, names)?;
        Ok(HttpSourceConfig { base_url, accounts })
    }

    fn account_pool(&self, key: &str, pool: &[String], names: &[&str]) -> Result<(), ConfigError> {
        if pool.is_empty() {
            return Err(self.invalid(key, "must name at least one account"));
        }
        if pool.len() > MAX_SOURCE_ACCOUNTS {
            return Err(self.invalid(
                key,
                format!(
                    "names {} accounts; at most {MAX_SOURCE_ACCOUNTS} are supported",
                    pool.len()
                ),
            ));
        }
        for (i, name) in pool.iter().enumerate() {
            self.known_account(key, name, names)?;
            if pool[..i].contains(name) {
                return Err(self.invalid(key, format!("{name:?} is listed twice")));
            }
        }
        Ok(())
    }

    fn known_account(&self, key: &str, name: &str, names: &[&str]) -> Result<(), ConfigError> {
        if names.contains(&name) {
            Ok(())
        } else {
            Err(self.invalid(key, format!("{name:?} is not the name of any [[account]]")))
        }
    }

    fn sink(&self, raw: RawHttpSink, names: &[&str]) -> Result<HttpSinkConfig, ConfigError> {
        const S: &str = "[sink.http]";
        let url = self.http_url(&format!("{S} url"), raw.url)?;
        let key = format!("{S} account");
        let account = raw.account.ok_or_else(|| self.invalid(&key, "is required"))?;
        self.known_account(&key, &account, names)?;
        let batch_size = self.batch_size(&format!("{S} batch_size"), raw.batch_size.unwrap_or(100))?;
        let max_per_second = raw.max_per_second.unwrap_or(10.0);
        if !(max_per_second.is_finite() && max_per_second >= MIN_PER_SECOND) {
            let reason = format!("must be a number of at least {MIN_PER_SECOND} (one request per 1000 s)");
            return Err(self.invalid(format!("{S} max_per_second"), reason));
        }
        Ok(HttpSinkConfig {
            url,
            account,
            batch_size,
            max_per_second,
        })
    }

    fn batch_size(&self, key: &str, value: i64) -> Result<usize, ConfigError> {
        if value < 1 {
            return Err(self.invalid(key, "must be at least 1"));
        }
        match usize::try_from(value) {
            Ok(n) if n <= MAX_BATCH_SIZE => Ok(n),
            _ => Err(self.invalid(key, format!("must be at most {MAX_BATCH_SIZE}"))),
        }
    }

    /// Only the scheme is checked here; the value is not echoed, because webhook
    /// URLs often carry a token.
    fn http_url(&self, key: &str, value: Option<String>) -> Result<String, ConfigError> {
        let url = value.ok_or_else(|| self.invalid(key, "is required"))?;
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"));
        match rest {
            Some(host) if !host.is_empty() => Ok(url),
            Some(_) => Err(self.invalid(key, "has no host after the scheme")),
            None => Err(self.invalid(key, "must start with http:// or https://")),
        }
    }

    // ----- auth, notify, outbox -----

    fn auth(&self, raw: RawAuth) -> Result<AuthConfig, ConfigError> {
        let d = AuthConfig::default();
        Ok(AuthConfig {
            lock_ttl: self.duration("[auth] lock_ttl", raw.lock_ttl, d.lock_ttl, false)?,
            probe_ttl: self.duration("[auth] probe_ttl", raw.probe_ttl, d.probe_ttl, false)?,
            notify_every: self.duration("[auth] notify_every", raw.notify_every, d.notify_every, false)?,
            expiry_warning: self.duration(
                "[auth] expiry_warning",
                raw.expiry_warning,
                d.expiry_warning,
                true,
            )?,
        })
    }

    fn duration(
        &self,
        key: &str,
        value: Option<String>,
        default: Duration,
        zero_ok: bool,
    ) -> Result<Duration, ConfigError> {
        let Some(text) = value else { return Ok(default) };
        let parsed = humantime::parse_duration(text.trim())
            .map_err(|e| self.invalid(key, format!("{text:?}: {e}; expected a duration such as \"30m\"")))?;
        if parsed.is_zero() && !zero_ok {
            return Err(self.invalid(key, "must be longer than 0"));
        }
        Ok(parsed)
    }

    fn notify(&self, raw: RawNotify) -> Result<NotifyConfig, ConfigError> {
        let command = raw
            .command
            .map(|v| self.command("[notify] command", &v))
            .transpose()?;
        let webhook = raw
            .webhook
            .map(|w| self.http_url("[notify] webhook", Some(w)))
            .transpose()?;
        Ok(NotifyConfig { command, webhook })
    }

    /// A string is the program's path, whole: splitting it on whitespace would
    /// break paths with spaces and invite shell-quoting expectations it cannot meet.
    /// A command line: a program path, or an array of program and arguments.
    fn command(&self, key: &str, value: &toml::Value) -> Result<Vec<String>, ConfigError> {
        let expected = "expected a program path or an array [program, args...]";
        let argv = match value {
            toml::Value::String(program) => vec![program.clone()],
            toml::Value::Array(items) => items
                .iter()
                .map(|item| item.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.invalid(key, "every element must be a string"))?,
            _ => return Err(self.invalid(key, expected)),
        };
        match argv.first() {
            Some(program) if !program.is_empty() => Ok(argv),
            _ => Err(self.invalid(key, "the program must not be empty")),
        }
    }

    fn outbox(&self, raw: RawOutbox) -> Result<OutboxConfig, ConfigError> {
        let d = OutboxConfig::default();
        Ok(OutboxConfig {
            max_age: self.duration("[outbox] max_age", raw.max_age, d.max_age, false)?,
            max_bytes: match raw.max_bytes {
                Some(v) => self.size("[outbox] max_bytes", &v)?,
                None => d.max_bytes,
            },
        })
    }

    fn extract(&self, raw: RawExtract) -> Result<ExtractConfig, ConfigError> {
        let d = ExtractConfig::default();
        let size = |key: &str, v: Option<toml::Value>, default: u64| match v {
            Some(v) => self.size(key, &v),
            None => Ok(default),
        };
        Ok(ExtractConfig {
            commands: self.converters(raw.commands)?,
            isolation: raw.isolation.unwrap_or(d.isolation),
            timeout: self.duration("[extract] timeout", raw.timeout, d.timeout, false)?,
            timeout_per_mib: self.duration(
                "[extract] timeout_per_mib",
                raw.timeout_per_mib,
                d.timeout_per_mib,
                true,
            )?,
            memory: size("[extract] memory", raw.memory, d.memory)?,
            cpu: self.duration("[extract] cpu", raw.cpu, d.cpu, false)?,
            cpu_per_mib: self.duration("[extract] cpu_per_mib", raw.cpu_per_mib, d.cpu_per_mib, true)?,
            max_text: size("[extract] max_text", raw.max_text, d.max_text)?,
            ocr_languages: raw.ocr_languages.map(|l| self.ocr_languages(l)).transpose()?,
        })
    }

    /// `[extract] ocr_languages`: tesseract's codes (`eng`, `chi_sim`), each
    /// once; a code names a file in its data folder, so nothing else is taken.
    fn ocr_languages(&self, languages: Vec<String>) -> Result<Vec<String>, ConfigError> {
        let key = "[extract] ocr_languages";
        let code = |l: &String| {
            !l.is_empty() && l.len() <= 32 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        };
        if let Some(bad) = languages.iter().find(|l| !code(l)) {
            return Err(self.invalid(
                key,
                format!("{bad:?} is not a tesseract language code such as \"eng\" or \"chi_sim\""),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(twice) = languages.iter().find(|l| !seen.insert(*l)) {
            return Err(self.invalid(key, format!("names {twice} twice")));
        }
        Ok(languages)
    }

    /// `[extract.commands]`: each key an extension, each value a command line.
    fn converters(&self, raw: toml::Table) -> Result<BTreeMap<String, Vec<String>>, ConfigError> {
        let mut out = BTreeMap::new();
        for (ext, value) in raw {
            let key = format!("[extract.commands] {ext}");
            if ext.is_empty() || !ext.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
                return Err(self.invalid(key, "must be a file extension in lower case, without the dot"));
            }
            out.insert(ext, self.command(&key, &value)?);
        }
        Ok(out)
    }

    /// A size as a string (`"256MiB"`, read as the flags read theirs) or a
    /// number of bytes.
    fn size(&self, key: &str, value: &toml::Value) -> Result<u64, ConfigError> {
        match value {
            toml::Value::Integer(n) => match u64::try_from(*n) {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(self.invalid(key, "must be more than 0 bytes")),
            },
            toml::Value::String(s) => {
                parse_size(s).map_err(|reason| self.invalid(key, format!("{s:?}: {reason}")))
            }
            _ => Err(self.invalid(key, SIZE_FORM)),
        }
    }
}

/// The file's contents minus one trailing newline (`\n` or `\r\n`, as editors
/// add one). The error is a reason only; the caller adds the path.
pub(super) fn read_password_file(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_PASSWORD_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_PASSWORD_FILE_BYTES {
        return Err(format!(
            "is larger than {MAX_PASSWORD_FILE_BYTES} bytes; is this the right file?"
        ));
    }
    let mut text = String::from_utf8(bytes).map_err(|_| "is not valid UTF-8".to_string())?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err("is empty".into());
    }
    Ok(text)
}
