//! Command-line flags, as clap parses them. `config.rs` turns them into
//! validated, built objects before anything runs.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Extract a directory of documents into a mirror, under fenced leases.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the data lives and how work is done; shared by every command.
#[derive(Debug, Args)]
pub struct Global {
    /// Data directory holding leasehold.db and mirror/.
    #[arg(long, global = true, default_value = "leasehold-data")]
    pub data: PathBuf,
    /// Database file (default: DATA/leasehold.db).
    #[arg(long, global = true)]
    pub db: Option<PathBuf>,
    /// Mirror directory for results (default: DATA/mirror).
    #[arg(long, global = true)]
    pub mirror: Option<PathBuf>,
    /// Worker threads (default: number of CPUs).
    #[arg(long, global = true)]
    pub workers: Option<usize>,
    /// Lease length, e.g. 30s, 2m.
    #[arg(long, global = true, default_value = "30s")]
    pub lease: String,
    /// Largest input file in bytes (larger files fail permanently).
    #[arg(long, global = true, default_value_t = 64 * 1024 * 1024)]
    pub max_input: u64,
    /// Attempts per document before it is declared dead.
    #[arg(long, global = true, default_value_t = 5)]
    pub max_attempts: u32,
    /// Configuration file: accounts, HTTP source and sink, auth gate, notices,
    /// outbox (default: DATA/leasehold.toml when it exists).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// SQLite durability: normal (survives process crashes) or full (and power loss).
    #[arg(long, global = true, value_enum, default_value_t = Sync::Normal)]
    pub synchronous: Sync,
    /// Wall-clock time one document's extraction may take, e.g. 60s
    /// (default: [extract] timeout, else 60s).
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub extract_timeout: Option<Duration>,
    /// Memory (address space) of an extraction process, e.g. 1GiB
    /// (default: [extract] memory, else 1GiB).
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size)]
    pub extract_memory: Option<u64>,
    /// CPU time one document's extraction may take, e.g. 60s
    /// (default: [extract] cpu, else 60s).
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub extract_cpu: Option<Duration>,
    /// Largest extracted text of one document, e.g. 64MiB
    /// (default: [extract] max_text, else 64MiB).
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size)]
    pub max_text: Option<u64>,
    /// Run parsers inside this process instead of supervised child processes:
    /// faster to debug, but a hostile file can crash or hang the whole run.
    #[arg(long, global = true)]
    pub in_process: bool,
}

/// A duration such as `60s`, `2m` or `1h30m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("{e}; expected a duration such as 60s, 2m or 1h30m"))?;
    if d.is_zero() {
        return Err("must be longer than 0".into());
    }
    Ok(d)
}

/// A size such as `64MiB`, `1GiB`, `500kB` or a number of bytes.
fn parse_size(text: &str) -> Result<u64, String> {
    let n = text
        .trim()
        .parse::<bytesize::ByteSize>()
        .map_err(|e| format!("{e}; expected a size such as 64MiB, 1GiB or a number of bytes"))?
        .as_u64();
    if n == 0 {
        return Err("must be more than 0 bytes".into());
    }
    Ok(n)
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Sync {
    Normal,
    Full,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Discover DIR, extract everything claimable, print a summary.
    Run {
        dir: PathBuf,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
        /// Exit 1 if any document failed.
        #[arg(long)]
        fail_on_error: bool,
        /// Also take files and directories whose names start with a dot.
        #[arg(long)]
        include_hidden: bool,
    },
    /// Enqueue new and changed files of DIR and mark vanished ones; without
    /// DIR, list the configured HTTP source (through the auth gate).
    Discover {
        dir: Option<PathBuf>,
        /// Fail instead of waiting when the source's account is locked.
        #[arg(long)]
        no_wait: bool,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        include_hidden: bool,
    },
    /// Work the queue (several processes may do this at once).
    Work {
        /// Exit when nothing is claimable and no lease is held.
        #[arg(long)]
        until_empty: bool,
        #[arg(long)]
        json: bool,
        /// With --until-empty: exit instead of waiting when the source's
        /// account is locked.
        #[arg(long)]
        no_wait: bool,
    },
    /// Counts by status and live leases.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// One document and its history, including refused stale writes.
    Inspect {
        /// Document key (its path relative to the source directory); also
        /// `./key`, or a path to the file inside the source directory.
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
        /// Only documents in this status.
        #[arg(long, value_name = "S",
              value_parser = ["discovered", "extracting", "indexed", "retrying", "dead"])]
        status: Option<String>,
        /// Only documents that failed: dead and retrying.
        #[arg(long, conflicts_with = "status")]
        failed: bool,
        /// Show at most N documents (then say how many more there are).
        #[arg(long, value_name = "N", default_value_t = 100,
              value_parser = clap::value_parser!(u64).range(1..))]
        limit: u64,
        /// Print a JSON array of documents.
        #[arg(long)]
        json: bool,
    },
    /// Print the accepted text of a document (checked against its checksum).
    Show {
        /// Document key (its path relative to the source directory); also
        /// `./key`, or a path to the file inside the source directory.
        #[arg(required_unless_present = "id", conflicts_with = "id")]
        doc: Option<String>,
        /// The document with this numeric id instead of a key.
        #[arg(long, value_name = "N")]
        id: Option<i64>,
    },
    /// Remove orphan generations and temp files from the whole mirror.
    Gc {
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
    /// Check a data directory: store integrity, WAL, leases, every accepted
    /// result's file and checksum, leftovers for gc, local file systems.
    /// Exit 0 when healthy, 1 with one line per problem otherwise.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Discover from the HTTP source, work until nothing is left to do, and
    /// deliver the results to the sink (all through the auth gate), then exit.
    Sync {
        #[arg(long)]
        json: bool,
        /// Fail instead of waiting when an account is locked.
        #[arg(long)]
        no_wait: bool,
    },
    /// The shared credentials: their state, and a manual unlock.
    Auth {
        #[command(subcommand)]
        command: AuthCommand,
    },
    /// Requeue a document (by key or id), or every dead one.
    Retry {
        #[arg(required_unless_present = "dead", conflicts_with = "dead")]
        doc: Option<String>,
        #[arg(long)]
        dead: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Per account: open/locked/probing, until when, epoch, last error, probes,
    /// days to expiry; and the outbox: depth, bytes, dropped.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Open a locked account now (recorded in the gate's history; a recovery
    /// notice is sent).
    Unlock { account: String },
}
