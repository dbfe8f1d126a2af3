//! One worker: a claim taken as far as it goes, fetch → extract → mirror write
//! → fenced complete → cleanup (DESIGN §2 "worker").
//!
//! Every step after the claim runs under the claim's lease ([`LeaseKeeper`]);
//! the fenced `complete` is the final guard, and its refusal is reported as
//! [`Processed::Superseded`], never as success. Cleanup of the document's mirror
//! directory runs after every claim, whatever happened.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cleanup::OwedCleanups;
use super::lease::{Holding, LeaseFlag, LeaseKeeper};
use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::extract::{has_a_word, image_kind, was_ocred, ExtractError, Extracted, Extractor};
use crate::fault::{crash_point, stall_point, wait_out_stall, CrashPoint};
use crate::job::{Claim, Fenced, JobId, Parked, Rejection, Status};
use crate::mirror::{Mirror, Staged, Written};
use crate::source::{Source, SourceError};
use crate::store::search::parts::{PartReader, PART_BYTES, TX_TEXT_BYTES};
use crate::store::{Completion, Store};

/// What happened to one claim. Only `Indexed` means our result was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// Nothing was claimable.
    Idle,
    /// Our result was accepted.
    Indexed {
        /// The document.
        key: String,
        /// Its accepted result, relative to the mirror root.
        path: String,
    },
    /// Our completion was refused: someone else owns or finished the document.
    Superseded {
        /// The document.
        key: String,
        /// What the row holds now.
        rejection: Rejection,
    },
    /// Failed; will be retried at `at`.
    Retrying {
        /// The document.
        key: String,
        /// When it is claimable again.
        at: Millis,
        /// Why it failed.
        error: String,
    },
    /// Failed for good.
    Dead {
        /// The document.
        key: String,
        /// Why it failed.
        error: String,
    },
    /// A renewal was refused or failed; the work was abandoned.
    LeaseLost {
        /// The document.
        key: String,
        /// Why the lease is gone.
        reason: String,
    },
    /// Handed back without spending the attempt (the pool is stopping).
    Released {
        /// The document.
        key: String,
    },
    /// Handed back without spending the attempt until `until`: the source
    /// cannot be used now (a locked credential, a rate limit).
    Waiting {
        /// The document.
        key: String,
        /// When it is claimable again at the latest.
        until: Millis,
        /// What it waits for.
        reason: String,
    },
}

/// Everything a worker needs, shared by the pool's threads.
pub struct Pipeline {
    /// The queue.
    pub store: Store,
    /// Where results are written.
    pub mirror: Mirror,
    /// Where document bytes come from.
    pub source: Arc<dyn Source>,
    /// How text is extracted.
    pub extractor: Arc<dyn Extractor>,
    /// Larger inputs fail permanently.
    pub max_input_bytes: u64,
    /// Queue each accepted result's text for the sink (the outbox), in the
    /// transaction that accepts it.
    pub deliver_results: bool,
}

/// One worker: a name, a lease keeper and the pipeline. `process_one` is the
/// step tests drive directly.
pub struct Worker {
    pipeline: Arc<Pipeline>,
    keeper: LeaseKeeper,
    name: String,
    /// Set when the pool stops hard: finish the current stage, then release.
    hard_stop: Arc<AtomicBool>,
    /// Cleanups skipped as busy, shared by the pool's workers.
    owed: Arc<OwedCleanups>,
}

/// Why a claim ended before its fenced completion; `settle` turns it into the
/// one store write that ends the claim. Its reasons do not name the document:
/// whatever shows them (summary, progress, `inspect`) names it beside them.
enum Stop {
    /// A renewal was refused or failed: nothing is written, the lease runs out.
    Lost(String),
    /// The document's fault (or the source's): `fail`, retried or dead.
    Failed { error: String, permanent: bool },
    /// The pool is stopping: hand back without spending the attempt.
    Release,
    /// Not the document's fault and not now (a full disk, a locked account):
    /// hand back without spending the attempt, parked until what it waits for.
    Park { reason: String, parked: Parked },
}

/// What [`Worker::process_batch`] did.
#[derive(Debug)]
pub struct Batch {
    /// One answer per claim, in order; [`Processed::Idle`] alone when nothing
    /// was claimable.
    pub answers: Vec<Result<Processed>>,
}

/// A batch between the halves of [`Worker::process_batch`]: claimed and
/// staged, waiting for its sync round and completions.
pub struct StagedBatch(BatchState);

impl StagedBatch {
    /// A batch that failed before anything was staged: `finish_batch` answers
    /// `e` for it.
    pub fn failed(e: Error) -> StagedBatch {
        StagedBatch(BatchState::ClaimFailed(e))
    }

    /// Nothing was claimable.
    pub fn is_idle(&self) -> bool {
        matches!(self.0, BatchState::Idle)
    }

    /// How many documents it holds, and how long their own steps took (what
    /// sizes the next batch); None when nothing was staged.
    pub fn staged(&self) -> Option<(usize, Duration)> {
        match &self.0 {
            BatchState::Steps { steps, staging, .. } => Some((steps.len(), *staging)),
            BatchState::Idle | BatchState::ClaimFailed(_) => None,
        }
    }
}

enum BatchState {
    Idle,
    /// The claim itself failed (a store failure), or the staging panicked.
    ClaimFailed(Error),
    Steps {
        steps: Vec<(Claim, Step)>,
        staging: Duration,
        /// The batch's claims, kept alive by the worker's heartbeat until each
        /// one's ending write (or the batch is dropped unfinished).
        holding: Holding,
    },
}

impl std::fmt::Debug for StagedBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagedBatch")
            .field("staged", &self.staged())
            .finish()
    }
}

/// A result staged in the mirror, waiting for its sync round.
struct Staging {
    staged: Staged,
    text: Held,
    findings: Findings,
}

/// A result durable in the mirror, waiting for its fenced completion.
struct Ready {
    written: Written,
    text: Held,
    findings: Findings,
}

/// What extraction found besides the text, recorded by the completion.
struct Findings {
    /// What it decided (format, encoding, converter), for the history.
    note: Option<String>,
    /// Why the text holds no word ([`no_text_reason`]); None when it has.
    no_text: Option<String>,
    /// The title, the author and the date the document gives itself.
    title: Option<String>,
    author: Option<String>,
    date: Option<String>,
    /// Its page count and language, when it says.
    pages: Option<u32>,
    language: Option<String>,
}

impl Findings {
    /// `completion` with what was found.
    fn on<'a>(&'a self, completion: Completion<'a>) -> Completion<'a> {
        completion
            .note(self.note.as_deref())
            .no_text(self.no_text.as_deref())
            .title(self.title.as_deref())
            .author(self.author.as_deref())
            .date(self.date.as_deref())
            .pages(self.pages)
            .language(self.language.as_deref())
    }
}

/// A result's text as a worker holds it until its completion: in memory
/// while it and its batch's others are small; otherwise only in its mirror
/// file, read back a part of the search index at a time when it is indexed,
/// so that what a batch holds does not grow with its documents (DESIGN §15).
enum Held {
    Whole(String),
    InFile,
}

/// The most text a batch keeps in memory for its completions (a worker
/// holds two batches: the one completing and the next one staging).
const BATCH_HELD_BYTES: usize = 4 << 20;

impl Held {
    /// A text of at most one part of the index in memory, a longer one in its file.
    fn new(text: String) -> Held {
        if text.len() > PART_BYTES {
            Held::InFile
        } else {
            Held::Whole(text)
        }
    }

    /// Keep the text in memory only while the batch's texts so far (`held`
    /// bytes) stay within [`BATCH_HELD_BYTES`]; else let it go to its file.
    fn keep_within(&mut self, held: &mut usize) {
        if let Held::Whole(text) = self {
            if *held + text.len() > BATCH_HELD_BYTES {
                *self = Held::InFile;
            } else {
                *held += text.len();
            }
        }
    }
}

/// How far one claim got before the sync round.
type Step = std::result::Result<Staging, Stop>;
/// How far one claim got before its completion.
type Synced = std::result::Result<Ready, Stop>;

/// The released claim's history line.
const RELEASED_STOPPING: &str = "released: the worker pool is stopping";

impl Worker {
    /// A worker named `name` (recorded with its claims) over `pipeline`.
    pub fn new(pipeline: Arc<Pipeline>, keeper: LeaseKeeper, name: impl Into<String>) -> Self {
        Worker {
            pipeline,
            keeper,
            name: name.into(),
            hard_stop: Arc::new(AtomicBool::new(false)),
            owed: Arc::default(),
        }
    }

    pub(super) fn with_hard_stop(mut self, flag: Arc<AtomicBool>) -> Self {
        self.hard_stop = flag;
        self
    }

    pub(super) fn with_owed_cleanups(mut self, owed: Arc<OwedCleanups>) -> Self {
        self.owed = owed;
        self
    }

    /// The worker's name, as recorded with its claims.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pipeline this worker runs.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Claim one document and take it as far as it goes. Never reports success
    /// for a refused completion; runs cleanup either way.
    pub fn process_one(&self) -> Result<Processed> {
        let mut done = self.process_batch(1).answers;
        done.pop().unwrap_or(Ok(Processed::Idle))
    }

    /// Claim up to `n` documents in one transaction and take each as far as it
    /// goes: their stages run one after the other, each under its own lease;
    /// their mirror writes become durable in one sync round and their
    /// completions are accepted (or refused) in one transaction. One answer per
    /// claim, in order ([`Processed::Idle`] alone when nothing was claimable);
    /// an `Err` is a store failure for that document, whose claim is left to
    /// expire. Cleanup runs for every claim, whatever happened.
    ///
    /// [`Worker::stage_batch`] then [`Worker::finish_batch`]; the pool runs the
    /// two halves on two threads, so one batch's sync round and completion
    /// overlap the next batch's extraction.
    pub fn process_batch(&self, n: usize) -> Batch {
        self.finish_batch(self.stage_batch(n))
    }

    /// The first half of [`Worker::process_batch`]: claim up to `n` documents
    /// and run each one's own steps (fetch, extract, staged mirror write).
    pub fn stage_batch(&self, n: usize) -> StagedBatch {
        wait_out_stall();
        let claims = match self.pipeline.store.claim_batch(&self.name, n.max(1)) {
            Ok(claims) if claims.is_empty() => return StagedBatch(BatchState::Idle),
            Ok(claims) => claims,
            Err(e) => return StagedBatch(BatchState::ClaimFailed(e)),
        };
        // Every claim is renewed from now until its ending write, whichever
        // thread has it meanwhile: waiting its turn in this batch, staged for
        // the finisher, or being completed (issue 26, point 7).
        let holding = self.keeper.hold(&claims);
        for c in &claims {
            tracing::debug!(
                target: "leasehold::document",
                event = "claimed",
                key = c.key.as_str(),
                doc_id = c.id.0,
                fence = c.fence,
                attempt = c.attempts,
                worker = self.name.as_str(),
                "claimed a document"
            );
        }
        let started = Instant::now();
        let mut held = 0;
        let steps: Vec<(Claim, Step)> = claims
            .into_iter()
            .map(|claim| {
                let mut step = self.staged_step(&claim);
                if let Ok(staging) = &mut step {
                    staging.text.keep_within(&mut held);
                }
                (claim, step)
            })
            .collect();
        StagedBatch(BatchState::Steps {
            steps,
            staging: started.elapsed(),
            holding,
        })
    }

    /// The second half of [`Worker::process_batch`]: the batch's sync round,
    /// its fenced completions, and cleanup for every claim.
    pub fn finish_batch(&self, staged: StagedBatch) -> Batch {
        let alone = |answer| Batch {
            answers: vec![answer],
        };
        let (steps, holding) = match staged.0 {
            BatchState::Idle => {
                // Nothing to claim, so the pool's writers are at rest: the
                // time to retry the cleanups they made busy.
                self.owed.retry(&self.pipeline.store, &self.pipeline.mirror);
                return alone(Ok(Processed::Idle));
            }
            BatchState::ClaimFailed(e) => return alone(Err(e)),
            BatchState::Steps { steps, holding, .. } => (steps, holding),
        };
        let ids: Vec<JobId> = steps.iter().map(|(c, _)| c.id).collect();
        let steps = self.sync_all(steps);
        let mut answers = self.finish_all(steps);
        let docs: Vec<(JobId, Option<&str>)> = ids
            .iter()
            .zip(answers.iter())
            .map(|(id, answer)| match answer {
                Ok(Processed::Indexed { path, .. }) => (*id, Some(path.as_str())),
                _ => (*id, None),
            })
            .collect();
        let cleaned = self.cleanup(&docs);
        for (answer, cleaned) in answers.iter_mut().zip(cleaned) {
            if let Err(e) = cleaned {
                if answer.is_ok() {
                    *answer = Err(e);
                }
            }
        }
        // Every claim was let go before its ending write; what was left
        // (a store failure's claims, left to run out) is let go here.
        drop(holding);
        Batch { answers }
    }

    /// fetch → extract → staged mirror write of one claim; a panic fails it.
    fn staged_step(&self, claim: &Claim) -> Step {
        catch_unwind(AssertUnwindSafe(|| self.work_on(claim))).unwrap_or_else(|panic| {
            Err(Stop::Failed {
                error: format!("worker panicked: {}", panic_message(&*panic)),
                permanent: true,
            })
        })
    }

    /// Make every staged write of the batch durable in one round; a write that
    /// could not be synced stops its document as a failed write would.
    fn sync_all(&self, steps: Vec<(Claim, Step)>) -> Vec<(Claim, Synced)> {
        let mut staged = Vec::new();
        let mut rest = Vec::new();
        for (claim, step) in steps {
            match step {
                Ok(ready) => {
                    staged.push(ready.staged);
                    rest.push((claim, Ok((ready.text, ready.findings))));
                }
                Err(stop) => rest.push((claim, Err(stop))),
            }
        }
        let mut synced = self.pipeline.mirror.sync(staged).into_iter();
        rest.into_iter()
            .map(|(claim, step)| {
                let done = step.and_then(|(text, findings)| match synced.next() {
                    Some(Ok(written)) => Ok(Ready {
                        written,
                        text,
                        findings,
                    }),
                    Some(Err(e)) => Err(self.stop_for_mirror(&claim, e)),
                    None => Err(Stop::Failed {
                        error: "mirror write failed: its sync round gave no answer".into(),
                        permanent: false,
                    }),
                });
                (claim, done)
            })
            .collect()
    }

    /// The fenced completions of the ready documents in one transaction, and
    /// the early ends of the others, one answer per claim in order.
    fn finish_all(&self, steps: Vec<(Claim, Synced)>) -> Vec<Result<Processed>> {
        let mut ready = Vec::new();
        let mut answers: Vec<Option<Result<Processed>>> = Vec::with_capacity(steps.len());
        for (claim, step) in steps {
            match step {
                Ok(done) => {
                    ready.push((answers.len(), claim, done));
                    answers.push(None);
                }
                Err(stop) => answers.push(Some(self.settle(claim, stop))),
            }
        }
        for (slot, answer) in self.complete(ready) {
            answers[slot] = Some(answer);
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(Error::Internal("a claim was left without an answer".into()))))
            .collect()
    }

    /// fetch → extract → mirror write (staged, not yet durable), each under
    /// the lease. The note says how long the three took for this document
    /// (`; took 12 ms`): a batch's claims and completions share their times,
    /// so the history's slowest documents are timed by it.
    fn work_on(&self, claim: &Claim) -> std::result::Result<Staging, Stop> {
        let started = Instant::now();
        let p = &self.pipeline;
        let bytes = self
            .stage(claim, |_| p.source.fetch(&claim.key, p.max_input_bytes))?
            .map_err(|e| self.stop_for_fetch(claim, e))?;
        let Extracted {
            text,
            note,
            title,
            author,
            date,
            pages,
            language,
        } = self.extract(claim, &bytes)?;
        let no_text = no_text_reason(&bytes, &text, note.as_deref());
        let staged = self
            .stage(claim, |_| {
                p.mirror.stage(claim.id.0, claim.fence, text.as_bytes())
            })?
            .map_err(|e| self.stop_for_mirror(claim, e))?;
        let took = format!("took {} ms", started.elapsed().as_millis());
        let note = Some(note.map_or(took.clone(), |note| format!("{note}; {took}")));
        Ok(Staging {
            staged,
            findings: Findings {
                note,
                no_text,
                title,
                author,
                date,
                pages,
                language,
            },
            text: Held::new(text),
        })
    }

    /// The extract stage: a panic in a parser fails the document, a raised stop
    /// flag hands it back.
    fn extract(&self, claim: &Claim, bytes: &[u8]) -> std::result::Result<Extracted, Stop> {
        let extractor = &self.pipeline.extractor;
        let run = |flag: &LeaseFlag| {
            catch_unwind(AssertUnwindSafe(|| {
                extractor.extract_noted(&claim.key, bytes, flag.stop_signal())
            }))
        };
        match self.stage(claim, run)? {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(ExtractError::Stopped)) => Err(Stop::Release),
            // No extraction process could be started: the machine's fault, not
            // the document's; it waits without spending the attempt.
            Ok(Err(e @ ExtractError::Unavailable { .. })) => Err(self.park_for_backoff(claim, e.to_string())),
            Ok(Err(e)) => {
                let error = e.reason_for(bytes.len() as u64);
                if matches!(e, ExtractError::Limit { .. } | ExtractError::TooLarge { .. }) {
                    log_limit(&claim.key, &error);
                }
                Err(Stop::Failed {
                    permanent: e.is_permanent(),
                    error,
                })
            }
            Err(panic) => Err(Stop::Failed {
                error: format!("extractor panicked: {}", panic_message(&*panic)),
                permanent: true,
            }),
        }
    }

    /// A fetch that failed: a deferral (a locked credential, a rate limit)
    /// parks the document without spending the attempt; anything else fails it.
    fn stop_for_fetch(&self, claim: &Claim, e: SourceError) -> Stop {
        match e {
            SourceError::Deferred {
                until, ref account, ..
            } => {
                let parked = match account {
                    Some(name) => Parked::Account {
                        name: name.clone(),
                        until,
                    },
                    None => Parked::Until(until),
                };
                Stop::Park {
                    reason: without_key(&claim.key, &e),
                    parked,
                }
            }
            e => {
                if matches!(e, SourceError::TooLarge { .. }) {
                    log_limit(&claim.key, &without_key(&claim.key, &e));
                }
                Stop::Failed {
                    permanent: e.is_permanent(),
                    error: without_key(&claim.key, &e),
                }
            }
        }
    }

    /// A mirror write that failed: a full or unwritable disk, or a document
    /// lock held by a stopped process, is not the document's fault (parked
    /// with backoff); anything else is retried.
    fn stop_for_mirror(&self, claim: &Claim, e: crate::mirror::MirrorError) -> Stop {
        if e.is_disk_full() || e.is_unwritable() || e.is_busy() {
            return self.park_for_backoff(claim, format!("mirror write failed, will retry: {e}"));
        }
        Stop::Failed {
            error: format!("mirror write failed: {e}"),
            permanent: false,
        }
    }

    /// Hand the document back without spending the attempt, claimable again
    /// after the backoff its attempts so far would earn.
    fn park_for_backoff(&self, claim: &Claim, why: String) -> Stop {
        let store = &self.pipeline.store;
        Stop::Park {
            reason: why,
            parked: Parked::Until(store.now() + store.options().backoff.delay_ms(claim.attempts)),
        }
    }

    /// Run one stage under the lease, unless the pool is stopping hard.
    fn stage<T>(&self, claim: &Claim, f: impl FnOnce(&LeaseFlag) -> T) -> std::result::Result<T, Stop> {
        if self.hard_stop.load(Ordering::SeqCst) {
            return Err(Stop::Release);
        }
        self.keeper.run(claim, f).map_err(|lost| Stop::Lost(lost.reason))
    }

    /// The fenced completions of `ready` (each with its answer's slot): the
    /// texts held whole together ([`Store::finish_many`]), each long one on
    /// its own ([`Worker::complete_long`]); every claim is spent whatever the
    /// answer.
    fn complete(&self, ready: Vec<(usize, Claim, Ready)>) -> Vec<(usize, Result<Processed>)> {
        if ready.is_empty() {
            return Vec::new();
        }
        stall_point();
        let (whole, long): (Vec<_>, Vec<_>) = ready
            .into_iter()
            .partition(|(_, _, r)| matches!(r.text, Held::Whole(_)));
        let mut answers = self.complete_whole(whole);
        for (slot, claim, r) in long {
            answers.push((slot, self.complete_long(claim, r)));
        }
        answers
    }

    /// The fenced completions of texts held whole, in as few transactions
    /// as the store makes them.
    fn complete_whole(&self, ready: Vec<(usize, Claim, Ready)>) -> Vec<(usize, Result<Processed>)> {
        if ready.is_empty() {
            return Vec::new();
        }
        let deliver = self.pipeline.deliver_results;
        let mut slots = Vec::with_capacity(ready.len());
        let mut claims = Vec::with_capacity(ready.len());
        let mut results = Vec::with_capacity(ready.len());
        for (slot, claim, r) in ready {
            slots.push((slot, claim.key.clone()));
            claims.push(claim);
            results.push(r);
        }
        for claim in &claims {
            self.keeper.let_go(claim);
        }
        let done: Vec<(Claim, Completion<'_>)> = claims
            .into_iter()
            .zip(&results)
            .map(|(claim, r)| {
                let text = match &r.text {
                    Held::Whole(text) => Some(text.as_str()),
                    Held::InFile => None,
                };
                let completion = r
                    .findings
                    .on(Completion::new(&r.written.rel_path, &r.written.sha256))
                    .deliver(text.filter(|_| deliver))
                    .index(text)
                    .result_bytes(r.written.len);
                (claim, completion)
            })
            .collect();
        let answers = match self.pipeline.store.complete_many(done) {
            Ok(answers) => answers,
            Err(e) => return store_failed(slots, e),
        };
        slots
            .into_iter()
            .zip(results)
            .zip(answers)
            .map(|(((slot, key), r), answer)| (slot, Ok(processed(key, r.written.rel_path, answer))))
            .collect()
    }

    /// The completion of a text held in its mirror file ([`Held::InFile`]):
    /// read back (checked against its checksum) a part of the search index
    /// at a time, the further parts staged under the claim in short
    /// transactions, then the completion with the first part. Delivered to a
    /// sink, the text is read whole, one such document at a time.
    fn complete_long(&self, claim: Claim, r: Ready) -> Result<Processed> {
        let (store, mirror) = (&self.pipeline.store, &self.pipeline.mirror);
        let result = (r.written.rel_path.as_str(), r.written.sha256.as_str());
        let first = match self.stage_from_file(&claim, result, &r.findings) {
            Ok(first) => first,
            Err(why) => {
                let error = format!("could not index the result: {why}");
                return self.settle(
                    claim,
                    Stop::Failed {
                        error,
                        permanent: false,
                    },
                );
            }
        };
        let whole = match self.pipeline.deliver_results {
            true => match mirror.read(result.0) {
                Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
                Err(e) => {
                    let error = format!("could not read the result back for the sink: {e}");
                    return self.settle(
                        claim,
                        Stop::Failed {
                            error,
                            permanent: false,
                        },
                    );
                }
            },
            false => None,
        };
        let completion = r
            .findings
            .on(Completion::new(result.0, result.1))
            .deliver(whole.as_deref())
            .index(first.as_deref());
        let key = claim.key.clone();
        self.keeper.let_go(&claim);
        let answer = store.complete(claim, completion)?;
        Ok(processed(key, r.written.rel_path, answer))
    }

    /// Stage the further parts of `claim`'s result text, read from its
    /// mirror file `result` (path, checksum), in runs of at most
    /// [`TX_TEXT_BYTES`]; its first part. A refused staging stops there
    /// (the claim is no longer ours, and its completion will be refused).
    fn stage_from_file(
        &self,
        claim: &Claim,
        result: (&str, &str),
        findings: &Findings,
    ) -> std::result::Result<Option<String>, String> {
        let (store, mirror) = (&self.pipeline.store, &self.pipeline.mirror);
        let file = mirror
            .open_verified(result.0, result.1)
            .map_err(|e| e.to_string())?
            .ok_or("the result file changed after it was written")?;
        let mut parts = PartReader::new(std::io::BufReader::new(file));
        let first = parts.next().transpose().map_err(|e| e.to_string())?;
        let mut run: Vec<String> = Vec::new();
        let mut bytes = 0;
        loop {
            let next = parts.next().transpose().map_err(|e| e.to_string())?;
            let full = next.as_ref().is_some_and(|p| bytes + p.len() > TX_TEXT_BYTES);
            if (full || next.is_none()) && !run.is_empty() {
                let texts: Vec<&str> = run.iter().map(String::as_str).collect();
                let out = store
                    .stage_search_parts(
                        claim,
                        result,
                        findings.title.as_deref(),
                        findings.author.as_deref(),
                        &texts,
                    )
                    .map_err(|e| e.to_string())?;
                if !out.is_accepted() {
                    break;
                }
                run.clear();
                bytes = 0;
            }
            let Some(part) = next else { break };
            bytes += part.len();
            run.push(part);
        }
        Ok(first)
    }

    /// Write what ended the claim early, and say what the row became.
    fn settle(&self, claim: Claim, stop: Stop) -> Result<Processed> {
        self.keeper.let_go(&claim);
        let store = &self.pipeline.store;
        let (key, id) = (claim.key.clone(), claim.id);
        let fenced = match &stop {
            Stop::Lost(reason) => {
                return Ok(Processed::LeaseLost {
                    key,
                    reason: reason.clone(),
                })
            }
            Stop::Release => store.release(claim, RELEASED_STOPPING)?,
            Stop::Park { reason, parked } => store.park(claim, reason, parked.clone())?,
            Stop::Failed { error, permanent } => store.fail(claim, error, *permanent)?,
        };
        if let Fenced::Rejected(rejection) = fenced {
            return Ok(Processed::Superseded { key, rejection });
        }
        Ok(match stop {
            Stop::Lost(reason) => Processed::LeaseLost { key, reason },
            Stop::Release => Processed::Released { key },
            Stop::Park {
                reason,
                parked: parked @ Parked::Account { .. },
            } => Processed::Waiting {
                key,
                until: parked.until(),
                reason,
            },
            Stop::Park { reason, parked } => Processed::Retrying {
                key,
                at: parked.until(),
                error: reason,
            },
            Stop::Failed { error, .. } => self.failed(key, id, error)?,
        })
    }

    /// A failure was written: retrying (with when) or dead.
    fn failed(&self, key: String, id: JobId, error: String) -> Result<Processed> {
        Ok(match self.pipeline.store.job(id)? {
            Some(job) if job.status == Status::Retrying => Processed::Retrying {
                key,
                at: job.retry_at.unwrap_or_default(),
                error,
            },
            _ => Processed::Dead { key, error },
        })
    }

    /// Remove every generation of each document that is neither accepted nor the
    /// current owner's (after our own result was accepted, nothing when it is
    /// all there is). One skipped as busy is owed ([`OwedCleanups`]); a failure
    /// other than a damaged store is left to `gc`.
    fn cleanup(&self, docs: &[(JobId, Option<&str>)]) -> Vec<Result<()>> {
        let (store, mirror) = (&self.pipeline.store, &self.pipeline.mirror);
        super::cleanup::cleanup_all(store, mirror, docs)
            .into_iter()
            .map(|done| match done {
                Ok(report) => {
                    self.owed.note(&report);
                    Ok(())
                }
                Err(super::cleanup::CleanupError::Store(e)) if e.is_corrupt() => Err(e),
                Err(_) => Ok(()),
            })
            .collect()
    }
}

/// A source error as the document's reason. The key is left out: every
/// place that shows a document's error (the summary, `inspect`, the progress
/// line) shows its key beside it, and `SourceError` starts with the key so
/// that it reads alone elsewhere (a scan, the library's callers).
/// Log a document that hit a limit (input size, extraction time, memory,
/// CPU, text size): the operator may want to raise it.
fn log_limit(key: &str, limit: &str) {
    tracing::warn!(
        target: "leasehold::extract",
        event = "limit_hit",
        key,
        limit,
        "a document hit a limit"
    );
}

fn without_key(key: &str, e: &SourceError) -> String {
    let shown = e.to_string();
    match shown.strip_prefix(&format!("{key:?}: ")) {
        Some(reason) => reason.to_owned(),
        None => shown,
    }
}

/// What a completion's answer means for the claim of `key` whose result is `path`.
fn processed(key: String, path: String, answer: Fenced) -> Processed {
    match answer {
        Fenced::Accepted => {
            crash_point(CrashPoint::AfterCommit);
            Processed::Indexed { key, path }
        }
        Fenced::Rejected(rejection) => Processed::Superseded { key, rejection },
    }
}

/// One store failure answering every completion of a batch: the first slot
/// gets the error itself, the others its text.
fn store_failed(slots: Vec<(usize, String)>, e: Error) -> Vec<(usize, Result<Processed>)> {
    let shown = e.to_string();
    let mut first = Some(e);
    slots
        .into_iter()
        .map(|(slot, _)| {
            let e = first.take().unwrap_or_else(|| Error::Internal(shown.clone()));
            (slot, Err(e))
        })
        .collect()
}

/// The text of a panic payload.
pub(super) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

/// Why `text`, extracted from the source `bytes` with the extractor's
/// `note`, holds no word (no letter or digit, so a search can never find it),
/// as far as the bytes tell: an empty file, a picture or a PDF without a text
/// layer, and whether OCR read them. None when it has a word.
fn no_text_reason(bytes: &[u8], text: &str, note: Option<&str>) -> Option<String> {
    if has_a_word(text) {
        return None;
    }
    let (pdf, picture, ocred) = (
        bytes.starts_with(b"%PDF-"),
        image_kind(bytes).is_some(),
        was_ocred(note),
    );
    let why = if bytes.is_empty() {
        "the file is empty"
    } else if pdf && ocred {
        "a PDF without a text layer, and OCR found no word in it"
    } else if picture && ocred {
        "a picture in which OCR found no word"
    } else if pdf {
        "a PDF without a text layer (scanned pages or images): OCR reads them when tesseract and pdftoppm are installed"
    } else if picture {
        "a picture: OCR reads it when tesseract is installed"
    } else {
        "its text holds no letter or digit"
    };
    Some(why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_keeps_at_most_its_budget_of_text_in_memory() {
        assert!(matches!(Held::new("x".repeat(PART_BYTES + 1)), Held::InFile));
        let mut held = 0;
        let mut texts: Vec<Held> = (0..8).map(|_| Held::new("x".repeat(PART_BYTES))).collect();
        for text in &mut texts {
            text.keep_within(&mut held);
        }
        let kept = texts.iter().filter(|t| matches!(t, Held::Whole(_))).count();
        assert_eq!(kept, BATCH_HELD_BYTES / PART_BYTES);
        assert_eq!(held, BATCH_HELD_BYTES);
        let mut small = Held::new("y".repeat(10));
        small.keep_within(&mut held);
        assert!(
            matches!(small, Held::InFile),
            "over the budget, even a short text waits in its file"
        );
    }
}
