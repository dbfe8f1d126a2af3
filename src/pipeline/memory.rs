//! What a process running the pipeline may hold in memory, whatever its
//! documents contain (DESIGN §15): the README states this bound, and a test
//! feeds a document made to exceed it (millions of distinct words) and
//! checks the process stays under it. Extraction children are bounded by
//! their own limit (`--extract-memory`) on top.

/// The program, SQLite's page caches, and the search index's writes: FTS5
/// holds the terms of one part of a text (at most 1 MiB, about 35 MiB of
/// memory when every word in it is distinct) while it writes it, and one
/// connection writes at a time.
const BASE: u64 = 64 << 20;

/// Per worker, besides its document's bytes and text: the texts of the two
/// batches it may hold (at most 4 MiB each; the others wait in their mirror
/// files), one part of a long text read back for the index, and its
/// threads' stacks.
const PER_WORKER: u64 = 12 << 20;

/// The most memory (resident bytes) a process running `workers` workers
/// holds, with `max_input` bytes of input and `max_text` bytes of text a
/// document at most: while a child extracts, a worker holds the document's
/// bytes and then receives its text, which it writes to the mirror and
/// lets go of when it is long.
pub fn parent_memory_bound(workers: usize, max_input: u64, max_text: u64) -> u64 {
    let per_worker = max_input.saturating_add(max_text).saturating_add(PER_WORKER);
    BASE.saturating_add(per_worker.saturating_mul(workers as u64))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_defaults_on_two_workers() {
        assert_eq!(super::parent_memory_bound(2, 64 << 20, 64 << 20), 344 << 20);
    }
}
