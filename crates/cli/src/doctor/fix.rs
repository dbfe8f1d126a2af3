//! `doctor --fix`: the mends for what the checks found, then the second
//! verdict. A flag of the check rather than a command of its own, as `fsck -y`
//! and `borg check --repair` are: the repair acts on exactly what the check
//! found, and there is one command to remember.
//!
//! In this order:
//! - The search index damaged, or apart from the accepted results: built
//!   again from the mirror ([`leasehold::pipeline::reindex`], which drops a
//!   damaged index first). First, because a damaged index fails every write
//!   that touches it, a forgotten result's included.
//! - A result missing or altered: its document is forgotten and queued again
//!   ([`leasehold::pipeline::requeue_damaged`]; the reindex does it for those it
//!   meets); the next `run` or `work` extracts it under the usual limits and
//!   leases. Doctor extracts nothing itself: it knows no source, converter or
//!   limit, and runs no parser.
//! - Leftovers, and the files of the results just forgotten: removed by
//!   `gc`'s sweep.

use std::process::ExitCode;

use super::checks::{exit_code, one_line, Doctor};
use leasehold::mirror::Mirror;
use leasehold::pipeline::{reindex, requeue_damaged, sweep, Damage};
use leasehold::Store;

/// How many documents a line names.
const NAMED: usize = 20;

/// What one mend did (`Ok`, a line), or why it could not (`Err`).
type Mended = Result<String, String>;

/// Mend what the checks of `d` found, in the order of the module docs.
pub(super) fn mend(d: &Doctor, store: &Store, mirror: &Mirror) -> Vec<Mended> {
    let found = &d.repairs;
    let mut out = Vec::new();
    if found.index {
        out.push(rebuild_index(store, mirror));
    }
    if !found.results.is_empty() {
        out.push(requeue_results(d, store, mirror));
    }
    if found.leftovers || !found.results.is_empty() {
        out.push(sweep_leftovers(store, mirror));
    }
    out
}

/// Forget every damaged result and queue its document again (one the
/// reindex already forgot, or a newer result replaced, is left as it is).
/// When no result at all was found whole and every one is missing, the
/// mirror is another one (a wrong `--mirror`): nothing is forgotten then.
fn requeue_results(d: &Doctor, store: &Store, mirror: &Mirror) -> Mended {
    let found = &d.repairs;
    let all_missing = found.results.iter().all(|r| r.3 == Damage::Missing);
    if all_missing && d.checked.results_verified == 0 {
        return Err(format!(
            "none of the {} accepted results is in {} (wrong --mirror?): nothing was queued again",
            found.results.len(),
            mirror.root().display()
        ));
    }
    for (id, key, path, damage) in &found.results {
        requeue_damaged(store, *id, path, *damage)
            .map_err(|e| format!("queueing {key:?} again: {}", one_line(&e)))?;
    }
    let n = found.results.len();
    let keys: Vec<String> = found
        .results
        .iter()
        .take(NAMED)
        .map(|r| format!("{:?}", r.1))
        .collect();
    let more = if n > keys.len() {
        format!(" and {} more", n - keys.len())
    } else {
        String::new()
    };
    Ok(format!(
        "queued again {n} document(s) whose result was missing or altered ({}{more}); \
         `leasehold run DIR` or `leasehold work --until-empty` extracts them",
        keys.join(", ")
    ))
}

/// Build the search index again from the mirror.
fn rebuild_index(store: &Store, mirror: &Mirror) -> Mended {
    let r =
        reindex(store, mirror, None).map_err(|e| format!("rebuilding the search index: {}", one_line(&e)))?;
    let damaged = r
        .rebuilt
        .map(|why| format!(" (it was damaged: {why})"))
        .unwrap_or_default();
    Ok(format!(
        "built the search index again from the mirror{damaged}: {} text(s), {} stale row(s) removed",
        r.indexed, r.pruned
    ))
}

/// Remove what `gc` removes from the mirror (not the history: that is `gc`'s
/// retention, not damage).
fn sweep_leftovers(store: &Store, mirror: &Mirror) -> Mended {
    let r = sweep(store, mirror, false).map_err(|e| format!("removing leftovers: {}", one_line(&e)))?;
    let busy = if r.busy.is_empty() {
        String::new()
    } else {
        format!(
            "; {} document(s) skipped, their mirror lock held by another process (run `leasehold gc` later)",
            r.busy.len()
        )
    };
    Ok(format!("removed {} leftover file(s){busy}", r.removed.len()))
}

/// The report of `doctor --fix`: what the first check found, what was
/// mended, and the second check's verdict, by which it exits.
pub(super) fn report(before: Doctor, mended: Vec<Mended>, after: Doctor, json: bool) -> ExitCode {
    let healthy = after.problems.is_empty();
    if json {
        let (fixed, failed): (Vec<_>, Vec<_>) = mended.into_iter().partition(Result::is_ok);
        let out = serde_json::json!({
            "healthy": healthy,
            "problems": after.problems,
            "found": before.problems,
            "fixed": fixed.into_iter().flatten().collect::<Vec<_>>(),
            "not_fixed": failed.into_iter().filter_map(Result::err).collect::<Vec<_>>(),
            "notes": after.notes,
            "checked": after.checked,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return exit_code(healthy);
    }
    if before.problems.is_empty() {
        println!("nothing to fix");
    }
    for m in mended {
        match m {
            Ok(line) => println!("fixed: {line}"),
            Err(why) => eprintln!("leasehold: not fixed: {why}"),
        }
    }
    for p in &after.problems {
        println!("{}", p.message);
    }
    after.print_verdict();
    exit_code(healthy)
}
