//! Rebuilding the search index from the mirror (`leasehold reindex`): after
//! a change of tokenizer, a move to another database, or when `doctor` finds
//! the index and the accepted results apart, or the index itself damaged.
//!
//! An index whose own structures are damaged (FTS5's check finds a
//! "malformed inverted index", or a page of its tables cannot be read)
//! cannot be mended row by row: every write to it may fail as a corrupt
//! database. It is dropped and made again, empty, first (when its pages are
//! too damaged to drop, removed from the schema and the file vacuumed:
//! `store/sqlite/search_salvage.rs`); the mirror holds every accepted text, so
//! nothing is lost.
//!
//! Every document with an accepted result is read back from the mirror,
//! checked against its checksum, and put into the index in batches, each one
//! short write transaction; the files are read before the transaction, never
//! inside it (DESIGN §8). A batch's text goes in only if it is still its
//! document's accepted result, so workers may run meanwhile: a completion
//! indexes its own text in its own transaction. A result that is missing or
//! does not match its checksum is forgotten and its document queued again
//! (`recheck.rs`), so it is not left searchable with text the mirror no
//! longer holds. Last, rows that are not the accepted text of their document
//! are deleted.

use std::io::BufReader;

use super::recheck::{requeue_damaged, Damage};
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::mirror::Mirror;
use crate::store::search::parts::{PartReader, TX_TEXT_BYTES};
use crate::store::{IndexDoc, Store, Tokenizer};

/// Documents read per page of the store.
const PAGE: usize = 256;
/// How many problems a report names.
const NAMED: usize = 20;

/// What a reindex did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReindexReport {
    /// The tokenizer the index is made with now.
    pub tokenizer: String,
    /// What FTS5 found wrong with the index before it was dropped and made
    /// again (its first line); `None` when the index was sound.
    pub rebuilt: Option<String>,
    /// Texts put into the index.
    pub indexed: u64,
    /// Documents whose accepted result was missing or did not match its
    /// checksum: forgotten and queued again, searchable once extracted anew.
    pub requeued: u64,
    /// Accepted results that could not be read (an I/O error): left as
    /// they were, in the index too.
    pub unreadable: u64,
    /// Up to 20 requeued or unreadable results, one line each.
    pub problems: Vec<String>,
    /// Rows deleted at the end: not the accepted text of their document.
    pub pruned: u64,
}

impl ReindexReport {
    fn name(&mut self, line: String) {
        if self.problems.len() < NAMED {
            self.problems.push(line);
        }
    }
}

/// Rebuild the search index of `store` from `mirror`; with `tokenizer`, the
/// index is first emptied and made again with it (the data directory then
/// records it), as it is, with the tokenizer recorded, when FTS5 finds it
/// damaged.
///
/// # Failure
/// A store error stops the reindex; what was put in so far stays, and a
/// second run finishes it. A result that cannot be read is counted and
/// named, not an error. None of the first accepted results in the mirror is
/// [`Error::InvalidInput`] (a wrong `--mirror`): nothing is forgotten then.
pub fn reindex(store: &Store, mirror: &Mirror, tokenizer: Option<Tokenizer>) -> Result<ReindexReport> {
    refuse_another_mirror(store, mirror)?;
    let mut report = ReindexReport {
        rebuilt: store.search_index_damage()?.into_iter().next(),
        ..ReindexReport::default()
    };
    let remake = match tokenizer {
        Some(t) => Some(t),
        None if report.rebuilt.is_some() => Some(recorded_or_table(store)?),
        None => recorded_elsewhere(store)?,
    };
    if let Some(t) = remake {
        store.reset_search_index(t)?;
    }
    let mut after = 0_i64;
    loop {
        let page = store.jobs_after(&[], JobId(after), PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.id;
        let mut batch: Vec<(i64, String, String, String)> = Vec::new();
        let mut bytes = 0;
        for job in page {
            let (Some(path), Some(sum)) = (job.result_path, job.checksum) else {
                continue;
            };
            match first_part_staging_rest(store, mirror, job.id, &path, &sum) {
                Ok(text) => {
                    bytes += text.len();
                    batch.push((job.id, path, sum, text));
                }
                Err(Unread::Damaged(damage)) => {
                    if requeue_damaged(store, job.id, &path, damage)? {
                        report.requeued += 1;
                        report.name(format!("{:?}: {}; queued again", job.key, damage.describe(&path)));
                    }
                }
                Err(Unread::Failed(why)) => {
                    report.unreadable += 1;
                    report.name(format!("{:?}: {path}: {why}", job.key));
                }
            }
            if bytes >= TX_TEXT_BYTES {
                report.indexed += put(store, &mut batch)?;
                bytes = 0;
            }
        }
        report.indexed += put(store, &mut batch)?;
    }
    report.pruned = store.prune_search_index()? as u64;
    store.purge_search_parts()?;
    report.tokenizer = store.search_tokenizer()?.name().to_owned();
    Ok(report)
}

/// [`Error::InvalidInput`] when the store has accepted results and not one
/// of the first of them is in `mirror`: the mirror is another one (a wrong
/// `--mirror`), and forgetting every result as missing would only queue the
/// whole store for extraction.
fn refuse_another_mirror(store: &Store, mirror: &Mirror) -> Result<()> {
    let first = store.indexed_page(i64::MIN, PAGE as i64)?;
    let present = first.iter().any(|row| {
        row.result_path.as_deref().is_some_and(|p| {
            !matches!(
                mirror.stat_result(p, None),
                Ok(crate::mirror::ResultFile::Missing)
            )
        })
    });
    if first.is_empty() || present {
        return Ok(());
    }
    Err(Error::InvalidInput {
        what: "mirror",
        reason: format!(
            "{}: none of the first {} accepted results is there (wrong --mirror?); nothing was changed",
            mirror.root().display(),
            first.len()
        ),
    })
}

/// The tokenizer the data directory records, when the index is made with
/// another (a store moved by `migrate` keeps its record, while its new index
/// was made with the default): the reindex then makes it with the recorded one.
fn recorded_elsewhere(store: &Store) -> Result<Option<Tokenizer>> {
    let table = store.search_tokenizer()?;
    Ok(recorded(store)?.filter(|r| *r != table && store.tokenizers().contains(r)))
}

/// The tokenizer a remade index gets: the recorded one, else the table's.
fn recorded_or_table(store: &Store) -> Result<Tokenizer> {
    match recorded(store)? {
        Some(t) => Ok(t),
        None => store.search_tokenizer(),
    }
}

/// The tokenizer the data directory records, if any.
fn recorded(store: &Store) -> Result<Option<Tokenizer>> {
    Ok(store
        .meta(crate::store::search::TOKENIZER_META)?
        .as_deref()
        .and_then(Tokenizer::from_spec))
}

/// Put `batch` into the index in one transaction and empty it.
fn put(store: &Store, batch: &mut Vec<(i64, String, String, String)>) -> Result<u64> {
    let docs: Vec<IndexDoc<'_>> = batch
        .iter()
        .map(|(id, path, sum, text)| IndexDoc {
            id: *id,
            result_path: path,
            checksum: sum,
            text,
        })
        .collect();
    let n = store.reindex_texts(&docs)?;
    batch.clear();
    Ok(n as u64)
}

/// Why an accepted result was not read back.
enum Unread {
    /// Missing or altered: the result is no longer what was accepted.
    Damaged(Damage),
    /// Could not be read (an I/O error); it may be whole.
    Failed(String),
}

/// The first part of the accepted text at `path`, if it matches `sum`
/// (else why not), its further parts staged in the index under `sum` for
/// [`Store::reindex_texts`] to make live with it: the text is read a part
/// at a time, and each write transaction stays short.
fn first_part_staging_rest(
    store: &Store,
    mirror: &Mirror,
    id: i64,
    path: &str,
    sum: &str,
) -> std::result::Result<String, Unread> {
    let file = match mirror.open_verified(path, sum) {
        Ok(Some(file)) => file,
        Ok(None) => return Err(Unread::Damaged(Damage::Altered)),
        Err(e) if e.is_not_found() => return Err(Unread::Damaged(Damage::Missing)),
        Err(e) => return Err(Unread::Failed(e.to_string().replace('\n', " "))),
    };
    let failed = |e: std::io::Error| Unread::Failed(e.to_string());
    let mut parts = PartReader::new(BufReader::new(file));
    let first = parts.next().transpose().map_err(failed)?.unwrap_or_default();
    let doc = IndexDoc {
        id,
        result_path: path,
        checksum: sum,
        text: &first,
    };
    let mut fresh = true;
    for part in parts {
        let part = part.map_err(failed)?;
        store
            .reindex_stage_parts(&doc, &[&part], fresh)
            .map_err(|e| Unread::Failed(e.to_string()))?;
        fresh = false;
    }
    Ok(first)
}
