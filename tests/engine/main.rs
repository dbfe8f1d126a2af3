//! The engine's integration tests, one binary: each module was once its own
//! test binary; linking one instead of eighteen is most of what their build
//! costs. They live in a package of their own (`tests/engine/Cargo.toml`) so
//! the engine's dev-dependencies stay what its unit tests, benches and
//! examples need: building `examples/embed_store.rs` compiles the lean engine,
//! not the formats, PostgreSQL and the upstream these tests drive.
//!
//! Tests that run a child process re-run this binary with one test's full
//! name (`common::this_test`), so a child is always one exact test.
//!
//! Unix only: they send signals, stop processes and read `/proc`; the
//! fallbacks other systems take run here through LEASEHOLD_FORCE_PORTABLE.
#![cfg(unix)]

#[path = "../common/mod.rs"]
#[macro_use]
mod common;

mod contention;
mod dir_scan;
mod fenced_cleanup;
mod gate_seed;
mod gate_store;
mod mirror_busy;
mod mirror_modes;
mod model;
mod paused_neighbour;
mod pg_batch;
mod pg_cluster;
mod pg_lost_commit;
mod pg_plans;
mod pg_pooler;
mod pg_schema;
mod pg_store;
mod pg_tls;
mod pipeline;
mod search;
mod store_batch;
mod store_fencing;
mod store_leases;
mod store_open;
mod store_race;
mod upstream_client;
