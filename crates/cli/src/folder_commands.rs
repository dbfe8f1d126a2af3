//! `leasehold folders`: list the folders a data directory indexes, add
//! one, take one out (the record itself is `folders.rs`'s).

use std::path::PathBuf;
use std::process::ExitCode;

use leasehold::Store;

use super::config::Config;
use super::error::CliError;
use super::folders::{add, remove, Keys, Recorded};
use super::progress::say;
use super::shown::shown;

/// `leasehold folders` (`list`): each folder with how many documents it
/// holds (present ones, not those whose file was removed), and whether it
/// can be opened.
pub fn list(cfg: &Config, json: bool) -> Result<ExitCode, CliError> {
    let folders = cfg.recorded.folders();
    let counts = documents_per_folder(&cfg.store, &cfg.recorded)?;
    let rows: Vec<FolderRow> = folders
        .iter()
        .zip(counts)
        .map(|((root, keys), documents)| FolderRow {
            path: root.display().to_string(),
            documents,
            keys: match keys {
                Keys::Relative => "relative",
                Keys::FullPath => "full-path",
            },
            available: root.is_dir(),
        })
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        match &cfg.recorded.url {
            Some(url) => println!("no folder: {} indexes the HTTP source {url}", cfg.data_name()),
            None => println!("no folder yet: `leasehold run DIR` indexes one"),
        }
    }
    for row in &rows {
        let note = if row.available { "" } else { "  (not there now)" };
        println!("{:>9} {}{note}", row.documents, shown(&row.path));
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of `folders --json`.
#[derive(serde::Serialize)]
struct FolderRow {
    path: String,
    /// Documents present (their file not removed).
    documents: u64,
    /// How its documents are keyed: `relative` to it, or by `full-path`.
    keys: &'static str,
    /// Whether the folder is there now (a directory at its path).
    available: bool,
}

/// `leasehold folders add DIR…`.
pub fn add_command(cfg: &Config, dirs: &[PathBuf]) -> Result<ExitCode, CliError> {
    let before = cfg.recorded.folders().len();
    let roots = add(&cfg.store, cfg.data_name(), dirs)?;
    let after = Recorded::load(&cfg.store)?.folders().len();
    for root in &roots {
        println!("{}", shown(&root.display().to_string()));
    }
    if after > before {
        say(&format!(
            "leasehold: {} folder(s) added; `leasehold run` indexes them",
            after - before
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// `leasehold folders remove DIR…`.
pub fn remove_command(cfg: &Config, dirs: &[PathBuf]) -> Result<ExitCode, CliError> {
    for (root, gone) in remove(&cfg.store, cfg.data_name(), dirs)? {
        println!(
            "removed {}: {gone} document(s) left the index",
            shown(&root.display().to_string())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How many present documents each recorded folder holds, in
/// [`Recorded::folders`] order: a read of each folder's rows.
fn documents_per_folder(store: &Store, record: &Recorded) -> Result<Vec<u64>, CliError> {
    let prefixes = record.key_prefixes().into_iter();
    let counts = prefixes.map(|(_, prefix)| leasehold::source::count_folder_documents(store, &prefix));
    counts
        .collect::<leasehold::Result<_>>()
        .map_err(|e| CliError::Runtime(e.to_string()))
}
