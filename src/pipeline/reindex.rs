//! Rebuilding the search index from the mirror (`leasehold reindex`): after
//! a change of tokenizer, a move to another database, or when `doctor` finds
//! the index and the accepted results apart.
//!
//! Every document with an accepted result is read back from the mirror,
//! checked against its checksum, and put into the index in batches, each one
//! short write transaction; the files are read before the transaction, never
//! inside it (DESIGN §8). A batch's text goes in only if it is still its
//! document's accepted result, so workers may run meanwhile: a completion
//! indexes its own text in its own transaction. Last, rows that are not the
//! accepted text of their document are deleted.

use std::io::BufReader;

use crate::error::Result;
use crate::job::JobId;
use crate::mirror::Mirror;
use crate::store::search::parts::{PartReader, TX_TEXT_BYTES};
use crate::store::{IndexDoc, Store, Tokenizer};

/// Documents read per page of the store.
const PAGE: usize = 256;
/// How many unreadable results a report names.
const NAMED: usize = 20;

/// What a reindex did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReindexReport {
    /// The tokenizer the index is made with now.
    pub tokenizer: String,
    /// Texts put into the index.
    pub indexed: u64,
    /// Accepted results that could not be read or did not match their
    /// checksum; their documents are not searchable (`doctor` names them).
    pub unreadable: u64,
    /// Up to 20 of them, one line each.
    pub problems: Vec<String>,
    /// Rows deleted at the end: not the accepted text of their document.
    pub pruned: u64,
}

/// Rebuild the search index of `store` from `mirror`; with `tokenizer`, the
/// index is first emptied and made again with it (the data directory then
/// records it).
///
/// # Failure
/// A store error stops the reindex; what was put in so far stays, and a
/// second run finishes it. A result that cannot be read is counted and
/// named, not an error.
pub fn reindex(store: &Store, mirror: &Mirror, tokenizer: Option<Tokenizer>) -> Result<ReindexReport> {
    if let Some(t) = tokenizer.map_or_else(|| recorded_elsewhere(store), |t| Ok(Some(t)))? {
        store.reset_search_index(t)?;
    }
    let mut report = ReindexReport::default();
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
                Err(why) => {
                    report.unreadable += 1;
                    if report.problems.len() < NAMED {
                        report.problems.push(format!("{:?}: {path}: {why}", job.key));
                    }
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

/// The tokenizer the data directory records, when the index is made with
/// another (a store moved by `migrate` keeps its record, while its new index
/// was made with the default): the reindex then makes it with the recorded one.
fn recorded_elsewhere(store: &Store) -> Result<Option<Tokenizer>> {
    if store.is_postgres() {
        return Ok(None);
    }
    let recorded = store
        .meta(crate::store::search::TOKENIZER_META)?
        .as_deref()
        .and_then(Tokenizer::from_spec);
    let table = store.search_tokenizer()?;
    Ok(recorded.filter(|r| *r != table))
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
) -> std::result::Result<String, String> {
    let file = mirror
        .open_verified(path, sum)
        .map_err(|e| e.to_string().replace('\n', " "))?
        .ok_or_else(|| "does not match its checksum".to_owned())?;
    let mut parts = PartReader::new(BufReader::new(file));
    let first = parts
        .next()
        .transpose()
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    let doc = IndexDoc {
        id,
        result_path: path,
        checksum: sum,
        text: &first,
    };
    let mut fresh = true;
    for part in parts {
        let part = part.map_err(|e| e.to_string())?;
        store
            .reindex_stage_parts(&doc, &[&part], fresh)
            .map_err(|e| e.to_string())?;
        fresh = false;
    }
    Ok(first)
}
