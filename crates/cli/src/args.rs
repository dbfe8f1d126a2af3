//! Command-line flags, as clap parses them. `config.rs` turns them into
//! validated, built objects before anything runs.
//!
//! Two kinds of flags: [`Global`] ones say where the data lives and are taken
//! by every command; [`WorkFlags`] say how work is done and belong to the
//! commands that work the queue (`run`, `work`, `sync`; `discover` takes
//! `--max-input`), so `status --help` does not list them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{ArgMatches, Args, FromArgMatches, Parser, Subcommand, ValueEnum, ValueHint};

/// Extract a directory of documents into a mirror, under fenced leases.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    /// Work flags written before the subcommand, as `leasehold --workers 2 work`.
    #[command(flatten)]
    pub early: EarlyWorkFlags,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the data lives; taken by every command.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Data directory holding leasehold.db and mirror/ (default:
    /// ./leasehold-data where it exists, else the user's data directory:
    /// $XDG_DATA_HOME/leasehold on Linux, ~/Library/Application
    /// Support/leasehold on macOS, %LOCALAPPDATA%\leasehold on Windows).
    #[arg(id = "data", long = "data", global = true, env = "LEASEHOLD_DATA", value_name = "DIR",
          value_hint = ValueHint::DirPath)]
    pub data_given: Option<PathBuf>,
    /// The data directory in force: `data_given`, else the default
    /// ([`Global::settle_data`]).
    #[arg(skip)]
    pub data: PathBuf,
    /// Database: a SQLite file, or a PostgreSQL database as
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/NAME (default: [store] db in
    /// the configuration, else DATA/leasehold.db). Give a password through
    /// LEASEHOLD_DB or the configuration's password_env, not on the command
    /// line, where other users can read it.
    #[arg(long, global = true, env = "LEASEHOLD_DB", hide_env_values = true,
          value_name = "FILE|URL", value_hint = ValueHint::FilePath)]
    pub db: Option<PathBuf>,
    /// Mirror directory for results (default: DATA/mirror).
    #[arg(long, global = true, value_name = "DIR", value_hint = ValueHint::DirPath)]
    pub mirror: Option<PathBuf>,
    /// Configuration file: accounts, HTTP source and sink, auth gate, notices,
    /// outbox, extraction (default: DATA/leasehold.toml when it exists).
    #[arg(long, global = true, env = "LEASEHOLD_CONFIG", value_name = "FILE",
          value_hint = ValueHint::FilePath)]
    pub config: Option<PathBuf>,
    /// Print only the summary (and errors): no progress, no failure lines.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Also print each document as it finishes.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Log level on stderr: error, warn, info, debug, trace, or directives
    /// as RUST_LOG takes them (default: RUST_LOG, else info for work and
    /// sync, warn without each failed document for the others and with
    /// --quiet).
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// How log lines look: text, or one JSON object per line.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

/// The data directory of a command line that names none, in the current
/// directory: the one older releases made there keeps being used.
pub const LOCAL_DATA_DIR: &str = "leasehold-data";

impl Global {
    /// Decide the data directory: `--data` or `LEASEHOLD_DATA` when given;
    /// else `./leasehold-data` where it exists (a data directory made by an
    /// older release, or on purpose beside a project); else the user's data
    /// directory ([`dirs::data_local_dir`]: `$XDG_DATA_HOME` or
    /// `~/.local/share` on Linux and the BSDs, `~/Library/Application
    /// Support` on macOS, `%LOCALAPPDATA%` on Windows) and `leasehold`
    /// below it, so that one index serves every folder wherever the command
    /// runs; `./leasehold-data` again when the system names no such place.
    pub fn settle_data(&mut self) {
        self.data = match &self.data_given {
            Some(given) => given.clone(),
            None if Path::new(LOCAL_DATA_DIR).is_dir() => PathBuf::from(LOCAL_DATA_DIR),
            None => match dirs::data_local_dir() {
                Some(user) => user.join("leasehold"),
                None => PathBuf::from(LOCAL_DATA_DIR),
            },
        };
    }
}

/// The form of the log lines on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    // Plain comments, not doc comments: a documented value makes clap print
    // every command's help in its long, two-line layout.
    // One readable line per event.
    #[default]
    Text,
    // One JSON object per line (`timestamp`, `level`, `target`, `message`
    // and the event's fields).
    Json,
}

/// The default lease length.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The default largest input file.
pub const DEFAULT_MAX_INPUT: u64 = 64 * 1024 * 1024;
/// The default attempts per document.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// How work is done: the flags of the commands that claim and extract
/// documents. Every value is optional so that flags given before the
/// subcommand ([`EarlyWorkFlags`]) can fill in what is not given after it;
/// the defaults are applied in `config.rs`.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Work options")]
pub struct WorkFlags {
    /// Worker threads, at most 256 (default: number of CPUs).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Most documents a worker claims at once when documents are small and
    /// fast (one transaction, one shared fsync round); above 1 a worker also
    /// extracts its next batch while the last one is saved, so it may hold
    /// twice this many; 1 claims one at a time; at most 1024 (default: 128).
    #[arg(long, value_name = "N")]
    pub claim_ahead: Option<usize>,
    /// Lease length, e.g. 30s, 2m (default: 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lease: Option<Duration>,
    #[command(flatten)]
    pub input: InputFlags,
    /// Attempts per document before it is declared dead (default: 5).
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// SQLite durability: normal (survives process crashes) or full (and
    /// power loss) (default: normal).
    #[arg(long, value_enum, value_name = "MODE")]
    pub synchronous: Option<Sync>,
    /// Wall-clock time one document's extraction may take, e.g. 60s
    /// (default: [extract] timeout, else 60s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub extract_timeout: Option<Duration>,
    /// Wall-clock time added to the extraction timeout for each MiB of a
    /// document, e.g. 2s; 0s for none (default: [extract] timeout_per_mib, else 2s).
    #[arg(long, value_name = "DURATION", value_parser = parse_allowance)]
    pub extract_timeout_per_mib: Option<Duration>,
    /// Memory (address space) of an extraction process, e.g. 1GiB
    /// (default: [extract] memory, else 1GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub extract_memory: Option<u64>,
    /// CPU time one document's extraction may take, e.g. 60s
    /// (default: [extract] cpu, else 60s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub extract_cpu: Option<Duration>,
    /// CPU time added to the extraction CPU limit for each MiB of a document,
    /// e.g. 1s; 0s for none (default: [extract] cpu_per_mib, else 1s).
    #[arg(long, value_name = "DURATION", value_parser = parse_allowance)]
    pub extract_cpu_per_mib: Option<Duration>,
    /// Largest extracted text of one document, e.g. 64MiB
    /// (default: [extract] max_text, else 64MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_text: Option<u64>,
    /// Run parsers inside this process instead of supervised child processes:
    /// faster to debug, but a hostile file can crash or hang the whole run.
    #[arg(long)]
    pub in_process: bool,
    /// Keep this file up to date with `leasehold metrics`'s text (rewritten
    /// atomically every few seconds and at exit), for node_exporter's
    /// textfile collector.
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub metrics_file: Option<PathBuf>,
    #[command(flatten)]
    pub search: SearchFlags,
}

/// The search index's tokenizer, chosen when the data directory is made,
/// and its stemming.
#[derive(Debug, Clone, Default, Args)]
pub struct SearchFlags {
    /// The search index's tokenizer for a new data directory: unicode61
    /// (words; the default) or trigram (any substring of 3 or more
    /// characters). Recorded in the data directory; change it later with
    /// `leasehold reindex --tokenizer`.
    #[arg(long, value_enum, value_name = "NAME")]
    pub tokenizer: Option<TokenizerName>,
    /// Whether a search word also finds its other forms (`install` finds
    /// `installed`, `installation`): english (the default) or none. Recorded
    /// in the data directory; change it at any time, nothing is re-indexed.
    /// A word in quotes is always searched as written.
    #[arg(long, value_enum, value_name = "NAME")]
    pub stemming: Option<StemmingName>,
}

/// The stemmings a data directory may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StemmingName {
    /// English words (Snowball's Porter2).
    English,
    /// Words as written only.
    None,
}

impl StemmingName {
    pub fn stemming(self) -> leasehold::Stemming {
        match self {
            StemmingName::English => leasehold::Stemming::English,
            StemmingName::None => leasehold::Stemming::Off,
        }
    }
}

/// When to colour output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

/// The tokenizers a data directory may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TokenizerName {
    /// Words, case and diacritics folded; Hangul, Han, Kana and Thai query
    /// words are searched as prefixes.
    Unicode61,
    /// Substrings of three or more characters; shorter terms are scanned.
    Trigram,
}

impl TokenizerName {
    pub fn tokenizer(self) -> leasehold::Tokenizer {
        match self {
            TokenizerName::Unicode61 => leasehold::Tokenizer::Unicode61,
            TokenizerName::Trigram => leasehold::Tokenizer::Trigram,
        }
    }
}

/// The input limit, which discovery applies too (a file over it is skipped).
#[derive(Debug, Clone, Default, Args)]
pub struct InputFlags {
    /// Largest input file, e.g. 64MiB, 500kB or a number of bytes; larger
    /// files fail permanently. At most half the extraction memory
    /// (--extract-memory) (default: 64MiB, or half that memory if less).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_input: Option<u64>,
}

impl WorkFlags {
    /// These flags, with what is not given here taken from `earlier`.
    pub fn or(self, earlier: WorkFlags) -> WorkFlags {
        WorkFlags {
            workers: self.workers.or(earlier.workers),
            claim_ahead: self.claim_ahead.or(earlier.claim_ahead),
            lease: self.lease.or(earlier.lease),
            input: InputFlags {
                max_input: self.input.max_input.or(earlier.input.max_input),
            },
            max_attempts: self.max_attempts.or(earlier.max_attempts),
            synchronous: self.synchronous.or(earlier.synchronous),
            extract_timeout: self.extract_timeout.or(earlier.extract_timeout),
            extract_timeout_per_mib: self.extract_timeout_per_mib.or(earlier.extract_timeout_per_mib),
            extract_memory: self.extract_memory.or(earlier.extract_memory),
            extract_cpu: self.extract_cpu.or(earlier.extract_cpu),
            extract_cpu_per_mib: self.extract_cpu_per_mib.or(earlier.extract_cpu_per_mib),
            max_text: self.max_text.or(earlier.max_text),
            in_process: self.in_process || earlier.in_process,
            search: SearchFlags {
                tokenizer: self.search.tokenizer.or(earlier.search.tokenizer),
                stemming: self.search.stemming.or(earlier.search.stemming),
            },
            metrics_file: self.metrics_file.or(earlier.metrics_file),
        }
    }
}

/// [`WorkFlags`] written before the subcommand (`leasehold --workers 2 work`),
/// as when every flag was global: still accepted by every command, so scripts
/// written that way keep working, but hidden from help, which shows each
/// command only the flags it uses. Flags after the subcommand win.
#[derive(Debug, Clone, Default)]
pub struct EarlyWorkFlags(pub WorkFlags);

impl FromArgMatches for EarlyWorkFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        WorkFlags::from_arg_matches(matches).map(EarlyWorkFlags)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }
}

impl Args for EarlyWorkFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        hide_work_flags(WorkFlags::augment_args(cmd))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        hide_work_flags(WorkFlags::augment_args_for_update(cmd))
    }
}

/// Hide the [`WorkFlags`] among `cmd`'s arguments (and only those).
fn hide_work_flags(cmd: clap::Command) -> clap::Command {
    let work = WorkFlags::augment_args(clap::Command::new("work-flags"));
    let ids: Vec<clap::Id> = work.get_arguments().map(|a| a.get_id().clone()).collect();
    cmd.mut_args(|arg| {
        if ids.contains(arg.get_id()) {
            arg.hide(true)
        } else {
            arg
        }
    })
}

/// How durations are written.
const DURATION_FORM: &str = "expected a number with a unit, e.g. 30s, 2m or 1h30m";

/// A duration such as `60s`, `2m` or `1h30m`. The error says what is
/// expected; clap puts the flag and the value in front of it.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        let detail = match e {
            // "expected number at 0" says where, not what: the form says it.
            humantime::DurationError::NumberExpected(_)
            | humantime::DurationError::InvalidCharacter(_)
            | humantime::DurationError::Empty => String::new(),
            other => format!(" ({other})"),
        };
        format!("{DURATION_FORM}{detail}")
    })?;
    if d.is_zero() {
        return Err("must be longer than 0".into());
    }
    Ok(d)
}

/// [`parse_duration`] that also takes zero: an allowance that may be turned off.
pub fn parse_allowance(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text.trim()) {
        Ok(zero) if zero.is_zero() => Ok(zero),
        _ => parse_duration(text),
    }
}

/// A size such as `64MiB`, `1GiB`, `500kB` or a number of bytes: the same
/// parser the configuration file's sizes go through. The error says what is
/// wrong (too large, an unknown unit...); clap puts the flag and the value in
/// front of it.
pub fn parse_size(text: &str) -> Result<u64, String> {
    leasehold::config::parse_size(text)
}

/// SQLite's durability setting.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Sync {
    /// Survives process crashes.
    Normal,
    /// Survives power loss too.
    Full,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Discover the folders, extract everything claimable, print a summary.
    Run {
        /// Folders to index: each not indexed yet is added to the data
        /// directory (`leasehold folders` lists them); none given runs every
        /// folder the data directory indexes.
        #[arg(value_name = "DIR", value_hint = ValueHint::DirPath)]
        dirs: Vec<PathBuf>,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
        /// Exit 1 if a document failed in this run (even one that will be
        /// retried) or the store holds dead documents from any run (those whose
        /// source was removed excepted); the failed documents are listed on
        /// stderr (the first 20).
        #[arg(long)]
        fail_on_error: bool,
        /// Also take files and directories whose names start with a dot.
        #[arg(long)]
        include_hidden: bool,
        #[command(flatten)]
        work: WorkFlags,
    },
    /// Run the folders, then keep them current until SIGINT or SIGTERM:
    /// files created or changed are extracted, removed ones marked gone.
    /// Without change notifications (a network file system, inotify limits)
    /// it rescans on a timer and says so.
    Watch {
        /// Folders to watch, added as `run` adds them; none given watches
        /// every folder the data directory indexes.
        #[arg(value_name = "DIR", value_hint = ValueHint::DirPath)]
        dirs: Vec<PathBuf>,
        /// One JSON object per line on stdout: each pass of discovery
        /// (`"kind": "pass"`), a fallback to rescans (`"rescanning"`), a
        /// failed pass (`"failed"`), and the summary at the end (`"summary"`).
        #[arg(long)]
        json: bool,
        /// Exit 1 at the end if a document failed while watching or the
        /// store holds dead documents whose source exists (as `run`).
        #[arg(long)]
        fail_on_error: bool,
        /// Also take files and directories whose names start with a dot.
        #[arg(long)]
        include_hidden: bool,
        /// How long a file must be quiet before it is taken, e.g. 200ms
        /// (default: 200ms).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        debounce: Option<Duration>,
        /// How often to rescan the whole tree when there are no change
        /// notifications (or with --poll), e.g. 30s (default: 30s).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        rescan_every: Option<Duration>,
        /// Never use change notifications: rescan every --rescan-every.
        #[arg(long)]
        poll: bool,
        /// The most changed paths kept waiting; past it one full rescan
        /// stands for them all (default: 10000). Hidden: a bound on memory
        /// that tests make small.
        #[arg(long, value_name = "N", hide = true)]
        max_pending: Option<usize>,
        #[command(flatten)]
        work: WorkFlags,
    },
    /// Enqueue new and changed files of the folders and mark vanished ones;
    /// without DIR, list the configured HTTP source (through the auth gate),
    /// else every folder the data directory indexes.
    Discover {
        /// Folders to scan, added as `run` adds them.
        #[arg(value_name = "DIR", value_hint = ValueHint::DirPath)]
        dirs: Vec<PathBuf>,
        /// Fail instead of waiting when the source's account is locked.
        #[arg(long)]
        no_wait: bool,
        /// Print what was found as JSON.
        #[arg(long)]
        json: bool,
        /// Also take files and directories whose names start with a dot.
        #[arg(long)]
        include_hidden: bool,
        #[command(flatten)]
        input: InputFlags,
        #[command(flatten)]
        search: SearchFlags,
    },
    /// Work the queue (several processes may do this at once).
    Work {
        /// Exit when nothing is claimable and no lease is held.
        #[arg(long)]
        until_empty: bool,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
        /// With --until-empty: exit instead of waiting when the source's
        /// account is locked.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        work: WorkFlags,
    },
    /// The folders this data directory indexes: list them (the default),
    /// add some, or take some out.
    Folders {
        #[command(subcommand)]
        action: Option<FoldersAction>,
    },
    /// Counts by status and live leases.
    Status {
        /// Print the counts and leases as JSON.
        #[arg(long)]
        json: bool,
    },
    /// One document and its history, including refused stale writes.
    Inspect {
        /// Document key (its path relative to the first folder, or its full
        /// path in a folder added after it); also `./key`, or a path to the
        /// file inside one of the folders.
        #[arg(required_unless_present = "id", conflicts_with = "id")]
        doc: Option<String>,
        /// The document with this numeric id instead of a key.
        #[arg(long, value_name = "N")]
        id: Option<i64>,
        /// Print the document and its history as JSON (times as epoch
        /// milliseconds and as ISO 8601).
        #[arg(long)]
        json: bool,
    },
    /// Documents, one line each: key, status, attempts, result file, last
    /// error; in id order.
    List {
        /// Only documents in this status (removed: their source is gone;
        /// dead: given up on, their source still there).
        #[arg(long, value_name = "S",
              value_parser = ["discovered", "extracting", "indexed", "retrying", "dead", "removed"])]
        status: Option<String>,
        /// Only documents that failed: dead and retrying (not removed).
        #[arg(long, conflicts_with_all = ["status", "removed"])]
        failed: bool,
        /// Only documents whose source was removed (--status removed).
        #[arg(long, conflicts_with = "status")]
        removed: bool,
        /// Only indexed documents whose text holds no word (an empty file,
        /// a PDF of scanned pages), with why.
        #[arg(long, conflicts_with_all = ["status", "failed", "removed"])]
        no_text: bool,
        /// Show at most N documents (then say how many more there are); 0
        /// shows them all.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: u64,
        /// Print a JSON array of documents.
        #[arg(long)]
        json: bool,
    },
    /// Search the accepted texts: per match the original's location, its
    /// type, size and modification time, a score (higher is better) and a snippet
    /// with the matched terms highlighted; then how many documents match.
    /// Exit 1 when nothing matches.
    ///
    /// QUERY: words (each must occur; one with punctuation, such as
    /// qemu-img, C++ or a URL, is searched as the phrase of its parts),
    /// "a phrase", prefix*, -word or NOT word to exclude, OR (or |) between
    /// alternatives, (parentheses); fields dir:FOLDER, path:TEXT,
    /// type:pdf (or a family: text, word, spreadsheet...), size>1MB,
    /// size<=500kB, after:2026-01-31 and before:2026-01 (the source's
    /// modification day, UTC) narrow it, -dir: and the like exclude;
    /// title:WORD and author:NAME look in the document's title or author
    /// only (a title is searched with the text too, ranked higher). Several arguments are one query. An
    /// argument starting with - is read as an option: write NOT word, or put
    /// the query after -- (leasehold search -- linux -windows). Words in
    /// Hangul, Han, Kana and Thai are searched as prefixes (계정 finds 계정이).
    /// An English word also finds its other forms (install finds installed
    /// and installation; those with the word as written come first) unless
    /// it is in quotes, --exact is given or the data directory's stemming is
    /// none.
    Search {
        /// What to look for.
        #[arg(value_name = "QUERY", required = true, num_args = 1..)]
        query: Vec<String>,
        /// Read QUERY in SQLite FTS5's own syntax (AND, OR, NOT, NEAR,
        /// column filters) instead.
        #[arg(long)]
        fts: bool,
        /// Search every word as written only, without its other forms (as
        /// if each were in quotes).
        #[arg(long)]
        exact: bool,
        /// Show at most N matches, best first; 0 shows all [default: 20,
        /// all with --files].
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// Skip the best N matches (the next page).
        #[arg(long, value_name = "N", default_value_t = 0)]
        offset: u64,
        /// Print only the originals' locations, one per line, for other
        /// tools to read.
        #[arg(short = 'l', long = "files", conflicts_with = "json")]
        files: bool,
        /// With --files: end each location with a NUL byte instead of a
        /// line break (for xargs -0).
        #[arg(short = '0', long = "null", requires = "files")]
        null: bool,
        /// Highlight matches and locations: auto (on a terminal, unless
        /// NO_COLOR is set), always or never.
        #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorWhen::Auto)]
        color: ColorWhen,
        /// Stop a search still running after this long (a query too broad
        /// to rank in time), with a message saying so.
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
        timeout: Duration,
        /// Print the matches and their total as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild the search index from the mirror's accepted results (e.g.
    /// with another tokenizer, after `migrate`, or when `doctor` finds the
    /// index wrong). Workers may run meanwhile.
    Reindex {
        /// Make the index again with this tokenizer, recorded in the data
        /// directory (nothing is searchable until the rebuild ends).
        #[arg(long, value_enum, value_name = "NAME")]
        tokenizer: Option<TokenizerName>,
        /// Print what was done as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the accepted text of a document (checked against its checksum).
    Show {
        /// Document key (its path relative to the first folder, or its full
        /// path in a folder added after it); also `./key`, or a path to the
        /// file inside one of the folders.
        #[arg(required_unless_present = "id", conflicts_with = "id")]
        doc: Option<String>,
        /// The document with this numeric id instead of a key.
        #[arg(long, value_name = "N")]
        id: Option<i64>,
    },
    /// Remove orphan generations and temp files from the whole mirror, and
    /// history lines older than `[store] history_keep` (default 30 days;
    /// each document's last line stays).
    Gc {
        /// Only list what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Print what was (or would be) removed as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the search page and the status page on a local web server:
    /// prints the address to open (it holds a random token every request
    /// must carry) and answers until stopped.
    Serve {
        /// Listen on this address instead of 127.0.0.1 (say, 0.0.0.0 for
        /// every interface: other machines can then reach it).
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::IpAddr>,
        /// The port (default: any free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Open the page in the system's browser.
        #[arg(long)]
        open: bool,
        /// Let the status page queue failed documents again (otherwise the
        /// server writes nothing).
        #[arg(long)]
        allow_retry: bool,
        /// Requests answered at once.
        #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
        handlers: u16,
        /// How long a request's head may take to arrive, and a connection
        /// stay idle, e.g. 10s. Hidden: tests make it short.
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration, hide = true)]
        head_timeout: std::time::Duration,
    },
    /// A self-contained HTML page of charts drawn from the history:
    /// throughput, failures by reason and format, queue depth, takeovers and
    /// refused writes, the gate's incidents, the slowest documents.
    Report {
        /// Write the page to FILE (inline SVG; it fetches nothing).
        #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
        html: PathBuf,
    },
    /// The store's figures, once, in the Prometheus text format (documents
    /// by status, claims, completions, takeovers, failures, outbox, accounts,
    /// extraction times).
    Metrics,
    /// Check a data directory: store integrity, WAL, leases, every accepted
    /// result's file and checksum, the search index, leftovers for gc, local
    /// file systems. Exit 0 when healthy, 1 with one line per problem
    /// otherwise, each naming the command that mends it.
    Doctor {
        /// Print the checks and problems as JSON.
        #[arg(long)]
        json: bool,
        /// Mend what can be mended, then check again: documents whose result
        /// is missing or altered are queued again (the next `run` or `work`
        /// extracts them), a damaged or wrong search index is built again
        /// from the mirror, leftovers are removed as `gc` removes them.
        #[arg(long)]
        fix: bool,
    },
    /// Discover from the HTTP source, work until nothing is left to do, and
    /// deliver the results to the sink (all through the auth gate), then exit.
    Sync {
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
        /// Fail instead of waiting when an account is locked.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        work: WorkFlags,
    },
    /// The shared credentials: their state, and a manual unlock.
    Auth {
        #[command(subcommand)]
        command: AuthCommand,
    },
    /// Requeue a document (by key or id), or every dead one.
    ///
    /// With fresh attempts: e.g. after raising a limit it failed (the input
    /// size, the extraction timeout, memory or text cap), the next run tries
    /// it under the new limit. A document whose source was removed is not
    /// requeued; it comes back when its file does.
    Retry {
        /// Document key, or numeric id.
        #[arg(
            value_name = "KEY|ID",
            required_unless_present = "dead",
            conflicts_with = "dead"
        )]
        doc: Option<String>,
        /// Requeue every dead document instead of one.
        #[arg(long)]
        dead: bool,
    },
    /// Copy the database (queue, history, gate state, notices, outbox) into
    /// another one, a PostgreSQL database or a SQLite file, and verify it:
    /// per table the row count and a SHA-256 over the rows, equal on both
    /// sides or nothing is committed. The target must be empty, and no
    /// worker may hold a live lease on the source (stop the workers first).
    Migrate {
        /// The target: a `postgres://` URL or a SQLite file path.
        #[arg(long, value_name = "LOCATION", value_hint = ValueHint::Other)]
        to: std::ffi::OsString,
        /// Print the tables, counts and checksums as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script, e.g.
    /// `leasehold completions bash > ~/.local/share/bash-completion/completions/leasehold`.
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `leasehold man | man -l -`.
    Man {
        /// The page of this subcommand (e.g. `run`) instead of the main page.
        #[arg(value_name = "COMMAND")]
        command: Option<String>,
    },
}

/// `leasehold folders`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum FoldersAction {
    /// List the folders, with how many documents each holds.
    List {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add folders to index (`leasehold run` then indexes them); a folder
    /// inside an indexed one, or holding one, is refused.
    Add {
        /// The folders to add.
        #[arg(value_name = "DIR", required = true, value_hint = ValueHint::DirPath)]
        dirs: Vec<PathBuf>,
    },
    /// Take folders out: they are no longer run or watched, and their
    /// documents leave the index (`gc` then removes their results).
    Remove {
        /// The folders to take out (as `leasehold folders` lists them, or
        /// any path to them; one that no longer exists too).
        #[arg(value_name = "DIR", required = true, value_hint = ValueHint::DirPath)]
        dirs: Vec<PathBuf>,
    },
}

/// `leasehold auth`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Per account: open/locked/probing, until when, epoch, last error, probes,
    /// days to expiry; and the outbox: depth, bytes, dropped.
    Status {
        /// Print the accounts and the outbox as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Open a locked account now (recorded in the gate's history; a recovery
    /// notice is sent).
    Unlock {
        /// The account's name in the configuration file.
        account: String,
    },
}
