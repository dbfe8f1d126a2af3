//! Model-based test of the jobs table (DESIGN §3): random interleavings of
//! enqueue / claim / renew / complete / fail / release and clock moves, by several
//! actors that each hold their own [`Store`] handle on one real database, run
//! step by step against a small reference model written here in plain Rust.
//! The same test runs on SQLite (`sqlite::store_agrees_with_the_model`, a file)
//! and on PostgreSQL (`postgres::store_agrees_with_the_model`, a fresh database
//! on the test binary's server per case).
//!
//! After every step the test asserts that store and model agree on
//! - the outcome of the operation: which document a claim took (or none), and
//!   `Accepted` vs `Rejected` with the exact [`Rejection`] (`OtherOwner { fence }`,
//!   `NotExtracting { status, fence }`);
//! - every row, field by field (status, owner token and worker, fence, lease,
//!   attempts, retry_at, last_error, result_path, checksum, timestamps);
//! - every document's history (event, time, token, fence), including refusals;
//!
//! and it checks these invariants explicitly:
//! - a rejected fenced write changes no row at all (table before == table after);
//! - fences only grow, by exactly one, and only on the document a claim took;
//! - an accepted completion comes only from the current owner and records that
//!   owner's result; no other step ever changes a result;
//! - attempts never exceed max_attempts, and no claim hands out an exhausted
//!   document: it is moved to `dead` on the claim that meets it;
//! - a takeover of a lease that is over (expired, or granted after now because
//!   the clock went back) refunds the lost claim's attempt and counts a lost
//!   lease; a document dies at `MAX_LOST_LEASES` lost leases;
//! - a claim that returns nothing leaves nothing claimable behind;
//! - a failure's `retry_at` lies inside the backoff window (the jitter is random,
//!   so the model reads the value the store chose after checking its bounds).
//!
//! The model follows the store's claim order: expired leases by
//! `lease_expires_at`, then leases granted after now by their grant time
//! (expiry minus length), then due retries by `retry_at`, then discovered rows by id.
//! Ties are broken by id, which is what the partial indexes on those columns yield;
//! DESIGN §3 itself only says "picks a claimable row".
//!
//! Actors keep every claim they ever received, stale ones included, so that late
//! writes from workers who lost their lease are tried all the time. The clock is
//! a shared [`leasehold::ManualClock`] that moves forward by up to two leases and
//! sometimes backwards (a little, or by several leases). Actors run with
//! different lease lengths, as processes started with different `--lease` do.
//!
//! `LEASEHOLD_MODEL_CASES` sets the number of SQLite cases (default 64, of up to
//! 60 steps each: about two seconds in release mode); `LEASEHOLD_MODEL_PG_CASES`
//! the PostgreSQL cases (default 24: each case creates a database and every
//! step makes a few dozen round trips to the server, so the default keeps the
//! suite's time on two cores within a minute). The long mode:
//!
//! ```text
//! LEASEHOLD_MODEL_CASES=10000 LEASEHOLD_MODEL_PG_CASES=2000 cargo test --release --test model
//! ```
//!
//! Failures are not persisted (no regression files in the repository); proptest
//! prints the shrunk sequence of operations, which can be replayed by hand (only
//! the tokens and the backoff jitter differ from run to run).

use crate::common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use common::{Backend, TestDb};
use leasehold::{Backoff, Claim, Enqueued, Fenced, Job, JobId, Millis, NewDoc, Rejection, Status, Store};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Actors, each with its own `Store::open` on the same file.
const ACTORS: usize = 4;
/// Distinct document keys.
const DOCS: usize = 5;
/// Operations per case, at most.
const MAX_STEPS: usize = 60;
const LEASE_MS: Millis = 10;
const MAX_ATTEMPTS: i64 = 3;
const MAX_LOST_LEASES: i64 = 3;
const START_MS: Millis = 1_000;
/// Small enough that retries come due within the clock moves; `max` caps the
/// second retry (5 << 1 = 10 > 8), so the cap is exercised too.
const BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(5),
    max: Duration::from_millis(8),
    jitter: 0.5,
};
const DEFAULT_CASES: u32 = 64;
/// PostgreSQL cases by default (see the module's docs).
const DEFAULT_PG_CASES: u32 = 24;

/// The lease length of `actor`'s store: odd actors hold twice the base lease.
fn lease_of(actor: usize) -> Millis {
    LEASE_MS * (1 + (actor % 2) as Millis)
}

// ----- operations -----

/// Which of an actor's claims (stale ones included) a fenced write uses.
#[derive(Debug, Clone, Copy)]
enum Pick {
    /// The newest claim the actor received.
    Latest,
    /// Any of them (index modulo how many it holds).
    Any(usize),
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Enqueue `doc-{doc}`; with `new_version`, a known document gets a new version.
    Enqueue {
        actor: usize,
        doc: usize,
        new_version: bool,
    },
    Claim {
        actor: usize,
    },
    Renew {
        actor: usize,
        pick: Pick,
    },
    Complete {
        actor: usize,
        pick: Pick,
    },
    Fail {
        actor: usize,
        pick: Pick,
        permanent: bool,
    },
    Release {
        actor: usize,
        pick: Pick,
    },
    /// Move the clock forward by `ms` (0 to two leases).
    Advance {
        ms: Millis,
    },
    /// Move the clock back by `ms`.
    Rewind {
        ms: Millis,
    },
}

impl Op {
    fn actor(&self) -> usize {
        match *self {
            Op::Enqueue { actor, .. }
            | Op::Claim { actor }
            | Op::Renew { actor, .. }
            | Op::Complete { actor, .. }
            | Op::Fail { actor, .. }
            | Op::Release { actor, .. } => actor,
            Op::Advance { .. } | Op::Rewind { .. } => 0,
        }
    }
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![Just(Pick::Latest), (0usize..8).prop_map(Pick::Any)]
}

fn op() -> impl Strategy<Value = Op> {
    let actor = 0..ACTORS;
    prop_oneof![
        3 => (actor.clone(), 0..DOCS, prop::bool::weighted(0.25))
            .prop_map(|(actor, doc, new_version)| Op::Enqueue { actor, doc, new_version }),
        6 => actor.clone().prop_map(|actor| Op::Claim { actor }),
        2 => (actor.clone(), pick()).prop_map(|(actor, pick)| Op::Renew { actor, pick }),
        2 => (actor.clone(), pick()).prop_map(|(actor, pick)| Op::Complete { actor, pick }),
        3 => (actor.clone(), pick(), prop::bool::weighted(0.15))
            .prop_map(|(actor, pick, permanent)| Op::Fail { actor, pick, permanent }),
        1 => (actor, pick()).prop_map(|(actor, pick)| Op::Release { actor, pick }),
        4 => (0..=2 * LEASE_MS).prop_map(|ms| Op::Advance { ms }),
        1 => (1..=LEASE_MS / 2).prop_map(|ms| Op::Rewind { ms }),
        1 => (LEASE_MS..=4 * LEASE_MS).prop_map(|ms| Op::Rewind { ms }),
    ]
}

/// `default` cases unless the environment variable `var` says how many.
fn config(var: &str, default: u32) -> ProptestConfig {
    let cases = match std::env::var(var) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v:?} is not a number of cases")),
        Err(_) => default,
    };
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// One case: the operations on a fresh database of `backend`, beside the model.
fn run_case(backend: Backend, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut world = World::new(backend)?;
    for (n, op) in ops.iter().enumerate() {
        world.step(n, op)?;
    }
    Ok(())
}

mod sqlite {
    use super::*;

    proptest! {
        #![proptest_config(config("LEASEHOLD_MODEL_CASES", DEFAULT_CASES))]

        #[test]
        fn store_agrees_with_the_model(ops in prop::collection::vec(op(), 1..=MAX_STEPS)) {
            run_case(Backend::Sqlite, &ops)?;
        }
    }
}

mod postgres {
    use super::*;

    proptest! {
        #![proptest_config(config("LEASEHOLD_MODEL_PG_CASES", DEFAULT_PG_CASES))]

        #[test]
        fn store_agrees_with_the_model(ops in prop::collection::vec(op(), 1..=MAX_STEPS)) {
            run_case(Backend::Postgres, &ops)?;
        }
    }
}

// ----- the reference model of DESIGN §3 -----

/// One history line as the model predicts it (the free-text detail is not compared).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    at: Millis,
    event: String,
    token: Option<String>,
    fence: Option<i64>,
}

#[derive(Debug, Clone)]
struct Row {
    id: i64,
    key: String,
    version: u32,
    status: Status,
    /// The current owner: an index into `Model::claims`.
    owner: Option<usize>,
    fence: i64,
    lease_expires_at: Option<Millis>,
    /// The length of the lease that runs to `lease_expires_at`.
    lease_ms: Millis,
    attempts: i64,
    max_attempts: i64,
    lost_leases: i64,
    retry_at: Option<Millis>,
    last_error: Option<String>,
    /// `(result_path, checksum)`.
    result: Option<(String, String)>,
    created_at: Millis,
    updated_at: Millis,
    history: Vec<Event>,
}

impl Row {
    fn leave_extracting(&mut self, now: Millis) {
        self.owner = None;
        self.lease_expires_at = None;
        self.updated_at = now;
    }
}

/// A claim an actor received; kept after it goes stale.
struct Held {
    claim: Claim,
    actor: usize,
}

struct Model {
    now: Millis,
    rows: BTreeMap<i64, Row>,
    ids: HashMap<String, i64>,
    /// Every claim ever handed out, in order.
    claims: Vec<Held>,
    /// Per actor: indices into `claims`.
    held: Vec<Vec<usize>>,
}

fn worker_name(actor: usize) -> String {
    format!("actor-{actor}")
}

fn doc_key(doc: usize) -> String {
    format!("doc-{doc}")
}

fn version_name(v: u32) -> String {
    format!("v{v}")
}

impl Model {
    fn new(now: Millis) -> Model {
        Model {
            now,
            rows: BTreeMap::new(),
            ids: HashMap::new(),
            claims: Vec::new(),
            held: vec![Vec::new(); ACTORS],
        }
    }

    fn token(&self, c: usize) -> String {
        self.claims[c].claim.token.clone()
    }

    /// DESIGN §2: discovered; retrying with retry_at <= now; extracting with a
    /// lease that is over.
    fn claimable(&self, r: &Row) -> bool {
        match r.status {
            Status::Discovered => true,
            Status::Retrying => r.retry_at.is_some_and(|t| t <= self.now),
            Status::Extracting => lease_over(r.lease_expires_at, r.lease_ms, self.now),
            Status::Indexed | Status::Dead => false,
        }
    }

    /// What one claim does: walk the claimable rows in the store's order, bury the
    /// exhausted ones met on the way, take the first that has attempts left.
    /// Returns `(buried ids, taken id)`.
    fn claim_plan(&self) -> (Vec<i64>, Option<i64>) {
        let mut tiers: [Vec<(Millis, i64)>; 4] = Default::default();
        for r in self.rows.values().filter(|r| self.claimable(r)) {
            let expiry = r.lease_expires_at.unwrap_or_default();
            match r.status {
                Status::Extracting if expiry <= self.now => tiers[0].push((expiry, r.id)),
                Status::Extracting => tiers[1].push((expiry - r.lease_ms, r.id)),
                Status::Retrying => tiers[2].push((r.retry_at.unwrap_or_default(), r.id)),
                _ => tiers[3].push((r.id, r.id)),
            }
        }
        let mut buried = Vec::new();
        for mut tier in tiers {
            tier.sort_unstable();
            for (_, id) in tier {
                if !exhausted(&self.rows[&id]) {
                    return (buried, Some(id));
                }
                buried.push(id);
            }
        }
        (buried, None)
    }

    /// The outcome a fenced write with claim `c` must get: only the current
    /// owner of an extracting row may write; lease expiry does not matter.
    fn fenced_outcome(&self, c: usize) -> Fenced {
        let r = &self.rows[&self.claims[c].claim.id.0];
        match r.status {
            Status::Extracting if r.owner == Some(c) => Fenced::Accepted,
            Status::Extracting => Fenced::Rejected(Rejection::OtherOwner { fence: r.fence }),
            status => Fenced::Rejected(Rejection::NotExtracting {
                status,
                fence: r.fence,
            }),
        }
    }

    /// The row as `Store::job` must return it.
    fn job(&self, r: &Row) -> Job {
        Job {
            id: r.id,
            key: r.key.clone(),
            version: version_name(r.version),
            status: r.status,
            owner_token: r.owner.map(|c| self.token(c)),
            owner_worker: r.owner.map(|c| worker_name(self.claims[c].actor)),
            fence: r.fence,
            lease_expires_at: r.lease_expires_at,
            attempts: r.attempts,
            max_attempts: r.max_attempts,
            lost_leases: r.lost_leases,
            retry_at: r.retry_at,
            last_error: r.last_error.clone(),
            result_path: r.result.as_ref().map(|(p, _)| p.clone()),
            checksum: r.result.as_ref().map(|(_, s)| s.clone()),
            // `Store::complete` gives no size.
            result_bytes: None,
            // Nor a reason for having no text.
            no_text: None,
            // Nor a title, an author or a date.
            title: None,
            author: None,
            doc_date: None,
            pages: None,
            language: None,
            source_gone: false,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// The delay window for retry number `attempts`, computed here from the
/// documented rule (exponential from base, capped at max, up to `jitter` of it
/// taken off), independently of `Backoff::delay_ms`.
fn backoff_window(attempts: i64) -> (Millis, Millis) {
    let base = BACKOFF.base.as_millis() as Millis;
    let max = BACKOFF.max.as_millis() as Millis;
    let capped = (base << (attempts.clamp(1, 20) - 1)).min(max);
    let lo = capped - (capped as f64 * BACKOFF.jitter).floor() as Millis;
    (lo, capped)
}

/// A lease is over when it expired, or when it was granted after now (its
/// expiry lies further ahead than now plus its length: the clock went back).
fn lease_over(expiry: Option<Millis>, lease_ms: Millis, now: Millis) -> bool {
    expiry.is_some_and(|t| t <= now || t - lease_ms > now)
}

/// Whether a claimable row has used up what it may spend: an extracting row
/// (its lease is over) its lost leases, counting this one; any other row its
/// attempts.
fn exhausted(r: &Row) -> bool {
    if r.status == Status::Extracting {
        r.lost_leases + 1 >= MAX_LOST_LEASES
    } else {
        r.attempts >= r.max_attempts
    }
}

/// Claimability of a stored row (its lease length from the model, which the
/// row does not show), for the "an empty claim leaves nothing claimable" check.
fn job_claimable(j: &Job, lease_ms: Millis, now: Millis) -> bool {
    match j.status {
        Status::Discovered => true,
        Status::Retrying => j.retry_at.is_some_and(|t| t <= now),
        Status::Extracting => lease_over(j.lease_expires_at, lease_ms, now),
        Status::Indexed | Status::Dead => false,
    }
}

// ----- running the store beside the model -----

#[derive(Debug, Clone, Copy)]
enum Write {
    Renew,
    Complete,
    Fail { permanent: bool },
    Release,
}

impl Write {
    fn name(self) -> &'static str {
        match self {
            Write::Renew => "renew",
            Write::Complete => "complete",
            Write::Fail { .. } => "fail",
            Write::Release => "release",
        }
    }
}

/// What the store was asked and answered in one step.
enum Did {
    Nothing,
    Enqueue {
        key: String,
        version: u32,
        got: Enqueued,
    },
    Claim {
        actor: usize,
        got: Option<Claim>,
    },
    Fenced {
        write: Write,
        c: usize,
        /// For `Complete`: the result path and checksum sent.
        result: Option<(String, String)>,
        got: Fenced,
    },
}

/// What a step changed, for the generic invariants.
#[derive(Default)]
struct Effect {
    claimed: Option<i64>,
    completed: Option<i64>,
}

type Table = BTreeMap<i64, Job>;

fn store_err(what: &str, e: leasehold::Error) -> TestCaseError {
    TestCaseError::fail(format!("{what}: unexpected store error: {e}"))
}

struct World {
    // Dropped before the temp dir.
    stores: Vec<Store>,
    t: TestDb,
    model: Model,
    tokens: HashSet<String>,
}

impl World {
    fn new(backend: Backend) -> Result<World, TestCaseError> {
        let t = TestDb::new(backend);
        t.clock.set(START_MS);
        let opts = |actor| {
            t.options(lease_of(actor) as u64)
                .max_attempts(MAX_ATTEMPTS as u32)
                .max_lost_leases(MAX_LOST_LEASES as u32)
                .backoff(BACKOFF)
                .pool_size(2)
                .checkpoint_every(None)
        };
        let stores = (0..ACTORS)
            .map(|actor| Store::open(&t.location, opts(actor)))
            .collect::<leasehold::Result<Vec<_>>>()
            .map_err(|e| store_err("open", e))?;
        Ok(World {
            stores,
            t,
            model: Model::new(START_MS),
            tokens: HashSet::new(),
        })
    }

    /// Every row the model knows (and `new`, a row just inserted), read through
    /// `via`; the store must have no others.
    fn table(&self, via: &Store, ctx: &str, new: Option<i64>) -> Result<Table, TestCaseError> {
        let mut out = Table::new();
        for id in self.model.rows.keys().copied().chain(new) {
            let job = via
                .job(JobId(id))
                .map_err(|e| store_err(ctx, e))?
                .ok_or_else(|| TestCaseError::fail(format!("{ctx}: row {id} is missing")))?;
            out.insert(id, job);
        }
        let total = via.counts().map_err(|e| store_err(ctx, e))?.total();
        prop_assert_eq!(
            total,
            out.len() as u64,
            "{}: the store holds rows the model does not",
            ctx
        );
        let pending = out
            .values()
            .filter(|j| {
                matches!(
                    j.status,
                    Status::Discovered | Status::Retrying | Status::Extracting
                )
            })
            .count() as u64;
        let counted = via.count_pending().map_err(|e| store_err(ctx, e))?;
        prop_assert_eq!(counted, pending, "{}: count_pending", ctx);
        let of = |s: Status| out.values().filter(|j| j.status == s).count() as u64;
        let removed = out
            .values()
            .filter(|j| j.status == Status::Dead && j.source_gone)
            .count() as u64;
        let t = via.totals().map_err(|e| store_err(ctx, e))?;
        prop_assert_eq!(
            [t.queued, t.extracting, t.indexed, t.retrying, t.dead, t.removed],
            [
                of(Status::Discovered),
                of(Status::Extracting),
                of(Status::Indexed),
                of(Status::Retrying),
                of(Status::Dead) - removed,
                removed
            ],
            "{}: totals",
            ctx
        );
        Ok(out)
    }

    fn step(&mut self, n: usize, op: &Op) -> Result<(), TestCaseError> {
        let ctx = format!("step {n}: {op:?} at t={}", self.model.now);
        // Read through another actor's handle than the one that writes.
        let reader = self.stores[(op.actor() + 1) % ACTORS].clone();
        let before = self.table(&reader, &ctx, None)?;
        let did = self.run(op, &ctx)?;
        let inserted = match did {
            Did::Enqueue {
                got: Enqueued::Inserted(JobId(id)),
                ..
            } => Some(id),
            _ => None,
        };
        let after = self.table(&reader, &ctx, inserted)?;
        let effect = self.apply(did, &ctx, &before, &after)?;
        self.check_invariants(&ctx, &before, &after, &effect)?;
        self.check_agreement(&ctx, &reader, &after)
    }

    /// Ask the store; nothing of the model changes here except the clock.
    fn run(&mut self, op: &Op, ctx: &str) -> Result<Did, TestCaseError> {
        let err = |e| store_err(ctx, e);
        Ok(match *op {
            Op::Advance { ms } => {
                self.model.now += ms;
                self.t.clock.advance(Duration::from_millis(ms as u64));
                Did::Nothing
            }
            Op::Rewind { ms } => {
                self.model.now -= ms;
                self.t.clock.set(self.model.now);
                Did::Nothing
            }
            Op::Enqueue {
                actor,
                doc,
                new_version,
            } => {
                let key = doc_key(doc);
                let version = match self.model.ids.get(&key) {
                    None => 1,
                    Some(id) => self.model.rows[id].version + u32::from(new_version),
                };
                let got = self.stores[actor]
                    .enqueue(&NewDoc::new(key.clone(), version_name(version)))
                    .map_err(err)?;
                Did::Enqueue { key, version, got }
            }
            Op::Claim { actor } => Did::Claim {
                actor,
                got: self.stores[actor].claim(&worker_name(actor)).map_err(err)?,
            },
            Op::Renew { actor, pick }
            | Op::Complete { actor, pick }
            | Op::Fail { actor, pick, .. }
            | Op::Release { actor, pick } => {
                let held = &self.model.held[actor];
                if held.is_empty() {
                    return Ok(Did::Nothing);
                }
                let c = match pick {
                    Pick::Latest => held[held.len() - 1],
                    Pick::Any(i) => held[i % held.len()],
                };
                let claim = &self.model.claims[c].claim;
                let store = &self.stores[actor];
                let (write, result, got) = match *op {
                    Op::Renew { .. } => (Write::Renew, None, store.renew(&claim.owner())),
                    Op::Complete { .. } => {
                        let path = format!("mirror/{}/{}-{}", claim.id, claim.fence, worker_name(actor));
                        let sum = format!("sha-of-claim-{c}");
                        let got = store.complete(
                            leasehold::testing::dup(claim),
                            leasehold::Completion::new(&path, &sum),
                        );
                        (Write::Complete, Some((path, sum)), got)
                    }
                    Op::Fail { permanent, .. } => {
                        let got =
                            store.fail(leasehold::testing::dup(claim), &format!("error {c}"), permanent);
                        (Write::Fail { permanent }, None, got)
                    }
                    _ => (
                        Write::Release,
                        None,
                        store.release(leasehold::testing::dup(claim), "shutdown"),
                    ),
                };
                Did::Fenced {
                    write,
                    c,
                    result,
                    got: got.map_err(err)?,
                }
            }
        })
    }

    /// Check the store's answer against the model and move the model on.
    fn apply(&mut self, did: Did, ctx: &str, before: &Table, after: &Table) -> Result<Effect, TestCaseError> {
        let now = self.model.now;
        let mut effect = Effect::default();
        match did {
            Did::Nothing => {
                prop_assert_eq!(before, after, "{}: rows changed without a write", ctx);
            }
            Did::Enqueue { key, version, got } => self.apply_enqueue(ctx, key, version, got)?,
            Did::Claim { actor, got } => effect.claimed = self.apply_claim(ctx, actor, got, after)?,
            Did::Fenced {
                write,
                c,
                result,
                got,
            } => {
                let id = self.model.claims[c].claim.id.0;
                let fence = self.model.claims[c].claim.fence;
                let token = self.model.token(c);
                let expected = self.model.fenced_outcome(c);
                prop_assert_eq!(
                    &got,
                    &expected,
                    "{}: {} with claim #{} of doc {} (fence {})",
                    ctx,
                    write.name(),
                    c,
                    id,
                    fence
                );
                if let Fenced::Rejected(_) = got {
                    // A stale (or finished) owner changes nothing, anywhere.
                    prop_assert_eq!(
                        before,
                        after,
                        "{}: a rejected {} changed the table",
                        ctx,
                        write.name()
                    );
                    self.model.rows.get_mut(&id).unwrap().history.push(Event {
                        at: now,
                        event: format!("{}_rejected", write.name()),
                        token: Some(token),
                        fence: Some(fence),
                    });
                    return Ok(effect);
                }
                // Accepted: only ever from the current owner of an extracting row.
                prop_assert_eq!(before[&id].status, Status::Extracting, "{}", ctx);
                prop_assert_eq!(
                    before[&id].owner_token.as_deref(),
                    Some(token.as_str()),
                    "{}",
                    ctx
                );
                let lease = lease_of(self.model.claims[c].actor);
                let r = self.model.rows.get_mut(&id).unwrap();
                let event = match write {
                    Write::Renew => {
                        // Re-anchored from now, even if that is earlier.
                        r.lease_expires_at = Some(now + lease);
                        r.lease_ms = lease;
                        r.updated_at = now;
                        None
                    }
                    Write::Complete => {
                        let result = result.expect("a completion sends a result");
                        prop_assert_eq!(
                            after[&id].result_path.as_deref(),
                            Some(result.0.as_str()),
                            "{}",
                            ctx
                        );
                        prop_assert_eq!(after[&id].checksum.as_deref(), Some(result.1.as_str()), "{}", ctx);
                        effect.completed = Some(id);
                        r.status = Status::Indexed;
                        r.result = Some(result);
                        r.retry_at = None;
                        r.last_error = None;
                        r.leave_extracting(now);
                        Some("completed")
                    }
                    Write::Fail { permanent } => {
                        r.last_error = Some(format!("error {c}"));
                        if permanent || r.attempts >= r.max_attempts {
                            r.status = Status::Dead;
                            r.retry_at = None;
                        } else {
                            // The jitter is random: check the store's choice, then adopt it.
                            let at = after[&id].retry_at;
                            let (lo, hi) = backoff_window(r.attempts);
                            prop_assert!(
                                at.is_some_and(|at| (now + lo..=now + hi).contains(&at)),
                                "{}: retry_at {:?} outside [{}, {}] for attempt {}",
                                ctx,
                                at,
                                now + lo,
                                now + hi,
                                r.attempts
                            );
                            r.status = Status::Retrying;
                            r.retry_at = at;
                        }
                        r.leave_extracting(now);
                        Some("failed")
                    }
                    Write::Release => {
                        r.status = Status::Discovered;
                        r.attempts = (r.attempts - 1).max(0);
                        r.leave_extracting(now);
                        Some("released")
                    }
                };
                if let Some(event) = event {
                    r.history.push(Event {
                        at: now,
                        event: event.into(),
                        token: Some(token),
                        fence: Some(fence),
                    });
                }
            }
        }
        Ok(effect)
    }

    fn apply_enqueue(
        &mut self,
        ctx: &str,
        key: String,
        version: u32,
        got: Enqueued,
    ) -> Result<(), TestCaseError> {
        let now = self.model.now;
        let Some(&id) = self.model.ids.get(&key) else {
            let Enqueued::Inserted(JobId(id)) = got else {
                return Err(TestCaseError::fail(format!("{ctx}: a new key gave {got:?}")));
            };
            prop_assert!(!self.model.rows.contains_key(&id), "{}: id {} reused", ctx, id);
            self.model.ids.insert(key.clone(), id);
            self.model.rows.insert(
                id,
                Row {
                    id,
                    key,
                    version,
                    status: Status::Discovered,
                    owner: None,
                    fence: 0,
                    lease_expires_at: None,
                    lease_ms: 0,
                    attempts: 0,
                    max_attempts: MAX_ATTEMPTS,
                    lost_leases: 0,
                    retry_at: None,
                    last_error: None,
                    result: None,
                    created_at: now,
                    updated_at: now,
                    history: vec![Event {
                        at: now,
                        event: "enqueued".into(),
                        token: None,
                        fence: None,
                    }],
                },
            );
            return Ok(());
        };
        let r = self.model.rows.get_mut(&id).unwrap();
        if version == r.version {
            prop_assert_eq!(got, Enqueued::Unchanged(JobId(id)), "{}", ctx);
            return Ok(());
        }
        // A new version: back to discovered with fresh attempts; the fence and the
        // accepted result stay; whoever extracts the old version is fenced out.
        prop_assert_eq!(got, Enqueued::Requeued(JobId(id)), "{}", ctx);
        r.version = version;
        r.status = Status::Discovered;
        r.attempts = 0;
        r.lost_leases = 0;
        r.max_attempts = MAX_ATTEMPTS;
        r.retry_at = None;
        r.last_error = None;
        r.leave_extracting(now);
        r.history.push(Event {
            at: now,
            event: "requeued".into(),
            token: None,
            fence: None,
        });
        Ok(())
    }

    fn apply_claim(
        &mut self,
        ctx: &str,
        actor: usize,
        got: Option<Claim>,
        after: &Table,
    ) -> Result<Option<i64>, TestCaseError> {
        let now = self.model.now;
        let (buried, take) = self.model.claim_plan();
        prop_assert_eq!(
            got.as_ref().map(|c| c.id.0),
            take,
            "{}: the document claimed (model: bury {:?} first)",
            ctx,
            buried
        );
        for id in &buried {
            // An exhausted document is moved to dead, not handed out.
            let stored = &after[id];
            prop_assert_eq!(
                stored.status,
                Status::Dead,
                "{}: exhausted doc {} not buried",
                ctx,
                id
            );
            let old_token = self.model.rows[id].owner.map(|c| self.model.token(c));
            let r = self.model.rows.get_mut(id).unwrap();
            prop_assert!(exhausted(r), "{}", ctx);
            let lease_lost = r.status == Status::Extracting;
            let why = stored.last_error.clone().unwrap_or_default();
            let reason = if lease_lost {
                "lost leases exhausted"
            } else {
                "attempts exhausted"
            };
            prop_assert!(why.starts_with(reason), "{}: last_error {:?}", ctx, why);
            if lease_lost {
                // The lost claim's attempt is refunded, its lost lease counted.
                r.attempts = (r.attempts - 1).max(0);
                r.lost_leases += 1;
            }
            if let Some(prev) = &r.last_error {
                prop_assert!(why.contains(prev.as_str()), "{}: {:?} lost {:?}", ctx, why, prev);
            }
            r.history.push(Event {
                at: now,
                event: "dead".into(),
                token: old_token,
                fence: Some(r.fence),
            });
            r.status = Status::Dead;
            r.retry_at = None;
            r.last_error = Some(why);
            r.leave_extracting(now);
        }
        let Some(claim) = got else {
            // Nothing handed out: nothing claimable may be left.
            for j in after.values() {
                let lease_ms = self.model.rows[&j.id].lease_ms;
                prop_assert!(
                    !job_claimable(j, lease_ms, now),
                    "{}: empty claim left {:?}",
                    ctx,
                    j
                );
            }
            return Ok(None);
        };
        let id = claim.id.0;
        let c = self.model.claims.len();
        let lease = lease_of(actor);
        let r = self.model.rows.get_mut(&id).unwrap();
        prop_assert!(!exhausted(r), "{}: an exhausted doc was handed out", ctx);
        // A takeover refunds the lost claim's attempt and counts a lost lease.
        let takeover = r.status == Status::Extracting;
        let attempts = r.attempts + i64::from(!takeover);
        prop_assert_eq!(&claim.key, &r.key, "{}", ctx);
        prop_assert_eq!(&claim.version, &version_name(r.version), "{}", ctx);
        prop_assert_eq!(claim.fence, r.fence + 1, "{}: claim fence", ctx);
        prop_assert_eq!(claim.attempts, attempts, "{}: claim attempts", ctx);
        prop_assert_eq!(claim.lease_expires_at, now + lease, "{}: claim lease", ctx);
        prop_assert!(self.tokens.insert(claim.token.clone()), "{}: token reused", ctx);
        r.status = Status::Extracting;
        r.owner = Some(c);
        r.fence += 1;
        r.lease_expires_at = Some(now + lease);
        r.lease_ms = lease;
        r.attempts = attempts;
        r.lost_leases += i64::from(takeover);
        r.retry_at = None;
        r.updated_at = now;
        r.history.push(Event {
            at: now,
            event: "claimed".into(),
            token: Some(claim.token.clone()),
            fence: Some(r.fence),
        });
        self.model.claims.push(Held { claim, actor });
        self.model.held[actor].push(c);
        Ok(Some(id))
    }

    /// The invariants that hold whatever the model says.
    fn check_invariants(
        &self,
        ctx: &str,
        before: &Table,
        after: &Table,
        effect: &Effect,
    ) -> Result<(), TestCaseError> {
        for (id, b) in before {
            let a = &after[id];
            // Fences only grow, by one, on the claimed document only.
            prop_assert!(
                a.fence >= b.fence,
                "{}: fence of {} went {} -> {}",
                ctx,
                id,
                b.fence,
                a.fence
            );
            let grew = i64::from(effect.claimed == Some(*id));
            prop_assert_eq!(a.fence - b.fence, grew, "{}: fence of {}", ctx, id);
            // A result changes only by an accepted completion of that document.
            if (&a.result_path, &a.checksum) != (&b.result_path, &b.checksum) {
                prop_assert_eq!(effect.completed, Some(*id), "{}: result of {} changed", ctx, id);
            }
        }
        for a in after.values() {
            prop_assert!(
                (0..=a.max_attempts).contains(&a.attempts),
                "{}: attempts {} of {} (max {})",
                ctx,
                a.attempts,
                a.id,
                a.max_attempts
            );
            prop_assert_eq!(
                a.status == Status::Extracting,
                a.owner_token.is_some(),
                "{}: owner of {}",
                ctx,
                a.id
            );
        }
        Ok(())
    }

    /// Every row and every history equal the model's.
    fn check_agreement(&self, ctx: &str, via: &Store, after: &Table) -> Result<(), TestCaseError> {
        for (id, r) in &self.model.rows {
            prop_assert_eq!(&after[id], &self.model.job(r), "{}: row {}", ctx, id);
            let history: Vec<Event> = via
                .history(JobId(*id))
                .map_err(|e| store_err(ctx, e))?
                .into_iter()
                .map(|h| Event {
                    at: h.at,
                    event: h.event,
                    token: h.token,
                    fence: h.fence,
                })
                .collect();
            prop_assert_eq!(&history, &r.history, "{}: history of {}", ctx, id);
        }
        Ok(())
    }
}
