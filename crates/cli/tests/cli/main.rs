//! The command line's tests, one binary: each module was once its own test
//! binary; linking one instead of thirty is most of what CI's test build costs.
//! Each module runs the built `leasehold` (Cargo names it for this crate's
//! tests) against real directories, stores and servers.
//!
//! Unix only: they send signals, stop processes and read `/proc`; the
//! fallbacks other systems take run here through LEASEHOLD_FORCE_PORTABLE.
#![cfg(unix)]

#[path = "../../../../tests/common/mod.rs"]
#[macro_use]
mod common;

mod auth_gate;
mod auth_more;
mod cli;
mod cli_help;
mod cli_limits;
mod cli_postgres;
mod cli_progress;
mod cli_read;
mod cli_search;
mod cli_signals;
mod cli_source;
mod cli_summary;
mod cli_watch;
mod crash;
mod doctor;
mod extract_encodings;
mod extract_legacy;
mod extract_mailbox;
mod extract_ocr;
mod extract_titles;
mod faults;
mod folders;
mod gate_pool;
mod history_retention;
mod hostile;
mod http_listing;
mod logs;
mod metrics;
mod migrate;
mod private_files;
mod report;
mod serve;
mod serve_browser;
mod soak;
mod stopped_lock;
mod store_failures;
