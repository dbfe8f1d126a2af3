//! The pipeline (DESIGN §2 "worker", §4, §5): synchronous worker threads that
//! each loop claim → fetch → extract → mirror write → complete → cleanup.
//!
//! # Layout
//! - `worker.rs`: a batch of claims (one, or a few small documents claimed
//!   ahead) taken as far as they go, with one outcome per claim.
//! - `lease.rs`: running a stage under the claim's lease (heartbeat, loss flag),
//!   and every claim a worker holds renewed on the same heartbeat.
//! - `cleanup.rs`: the fenced cleanup rule joining the store and the mirror.
//! - `pool.rs`: N worker threads and the handle that stops them.
//! - `reindex.rs`: the search index rebuilt from the mirror's accepted results.
//! - `memory.rs`: the bound on the process's memory that the above keep.
//! - `recheck.rs`: accepted results found missing or altered, forgotten and
//!   queued again.

mod cleanup;
mod lease;
mod memory;
mod pool;
mod recheck;
mod reindex;
mod worker;

pub use cleanup::{cleanup, cleanup_accepted, keep_for, sweep, CleanupError};
pub use lease::{Holding, LeaseFlag, LeaseKeeper, LeaseLost, Ticks};
pub use memory::parent_memory_bound;
pub use pool::{Event, PoolOptions, StopHandle, WorkerPool};
pub use recheck::{
    recheck_results, recheck_results_writing_after, requeue_damaged, stat_damage, Damage, Rechecked,
};
pub use reindex::{reindex, ReindexReport};
pub use worker::{Batch, Pipeline, Processed, StagedBatch, Worker};
