//! `leasehold migrate --to LOCATION`: move the store into another database,
//! then build the target's search index from the mirror.

use std::ffi::OsStr;
use std::process::ExitCode;

use super::config::Config;
use super::error::CliError;
use leasehold::store::migrate::{self, MigrateError, Migration};
use leasehold::store::{DbLocation, Store};

/// `leasehold migrate`: open (and migrate the schema of) the target, copy,
/// verify, print what moved. Every database is named without its password.
pub fn migrate(cfg: &Config, to: &OsStr, json: bool) -> Result<ExitCode, CliError> {
    let target_location = DbLocation::of(to);
    refuse_the_source_itself(&cfg.store, &target_location)?;
    // The target is made (its schema applied) if it is new; the source was
    // opened as an existing store.
    let opts = cfg.store.options().clone().create_if_missing(true);
    let target = Store::open(&target_location, opts)?;
    let moved = migrate::migrate(&cfg.store, &target).map_err(|e| match e {
        MigrateError::Store(e) => CliError::from(e),
        refused => CliError::Runtime(refused.to_string().replace('\n', " ")),
    })?;
    // The search index is not copied (each engine indexes its own way): the
    // target's is built from the mirror's accepted results.
    let rebuilt = leasehold::pipeline::reindex(&target, &cfg.mirror, None)?;
    for p in &rebuilt.problems {
        eprintln!("leasehold: search index: {p}");
    }
    if json {
        let text = serde_json::to_string_pretty(&moved)
            .map_err(|e| CliError::Runtime(format!("cannot encode the report: {e}")))?;
        println!("{text}");
    } else {
        print_table(&moved);
    }
    Ok(ExitCode::SUCCESS)
}

/// A SQLite target that is the source's own file would be refused as not
/// empty, but say what happened instead.
fn refuse_the_source_itself(source: &Store, target: &DbLocation) -> Result<(), CliError> {
    let Some(path) = target.path() else {
        return Ok(());
    };
    let same = match (path.canonicalize(), source.path().canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        return Err(CliError::Config(format!(
            "{}: the target is the source database",
            path.display()
        )));
    }
    Ok(())
}

fn print_table(m: &Migration) {
    println!("migrated {} -> {}", m.source, m.target);
    println!("{:<16} {:>10}  sha256", "table", "rows");
    for t in &m.tables {
        println!("{:<16} {:>10}  {}", t.table, t.rows, t.sha256);
    }
    println!("verified: every table's row count and checksum agree");
}
