//! Running the worker pool with your own `Source` and `Extractor`.
//!
//! The pool claims documents, fetches their bytes from the source, extracts
//! text, writes it to the mirror, and completes each claim, all under leases.
//! Here the documents live in memory and the "extraction" counts words; a real
//! program would read from its own storage and call its own parser.
//!
//! Run with `cargo run --example custom_pipeline`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use leasehold::extract::{ExtractError, Extractor};
use leasehold::mirror::Mirror;
use leasehold::pipeline::{Pipeline, PoolOptions, Processed, WorkerPool};
use leasehold::source::{Source, SourceError};
use leasehold::{NewDoc, Store, StoreOptions};

/// Documents held in memory, keyed like the queue.
struct MemorySource {
    docs: HashMap<String, Vec<u8>>,
}

impl Source for MemorySource {
    fn fetch(&self, key: &str, max_bytes: u64) -> Result<Vec<u8>, SourceError> {
        let bytes = self
            .docs
            .get(key)
            .ok_or_else(|| SourceError::NotFound { key: key.to_owned() })?;
        if bytes.len() as u64 > max_bytes {
            return Err(SourceError::TooLarge {
                key: key.to_owned(),
                size: bytes.len() as u64,
                limit: max_bytes,
            });
        }
        Ok(bytes.clone())
    }
}

/// "Extracts" a one-line summary: the word count and the first words.
struct WordCount;

impl Extractor for WordCount {
    fn extract(&self, _name: &str, bytes: &[u8], stop: &AtomicBool) -> Result<String, ExtractError> {
        // A long extraction polls the stop flag: it is raised when the lease is
        // lost or the pool stops hard.
        if stop.load(Ordering::Relaxed) {
            return Err(ExtractError::Stopped);
        }
        let text = String::from_utf8_lossy(bytes);
        let words: Vec<&str> = text.split_whitespace().collect();
        Ok(format!(
            "{} words: {}",
            words.len(),
            words.iter().take(5).copied().collect::<Vec<_>>().join(" ")
        ))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("queue.db"), StoreOptions::default())?;
    let mirror = Mirror::open(dir.path().join("mirror"))?;
    let docs: HashMap<String, Vec<u8>> = [
        ("notes/a", "the amber lighthouse stands on the rock"),
        ("notes/b", "a copper kettle sings on the stove"),
        ("notes/c", "quiet lantern light over the water"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
    .collect();
    for key in docs.keys() {
        store.enqueue(&NewDoc::new(key.clone(), "v1"))?;
    }

    let pipeline = Pipeline {
        store: store.clone(),
        mirror: mirror.clone(),
        source: Arc::new(MemorySource { docs }),
        extractor: Arc::new(WordCount),
        max_input_bytes: 1 << 20,
        deliver_results: false,
    };
    let opts = PoolOptions {
        workers: 2,
        until_idle: true, // return once nothing is claimable and no lease is held
        ..PoolOptions::default()
    };
    let (events, seen) = crossbeam_channel::unbounded();
    WorkerPool::start(pipeline, opts, Some(events))?.join();

    for event in seen.try_iter() {
        if let Ok(Processed::Indexed { key, path }) = event.outcome {
            let text = String::from_utf8(mirror.read(&path)?)?;
            println!("{key} -> {path}: {text}");
        }
    }
    println!("counts: {:?}", store.counts()?);
    Ok(())
}
