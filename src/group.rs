//! Group commit: concurrent callers from the threads of one process share one
//! piece of durability work.
//!
//! The store uses it so that concurrent writes share one `BEGIN IMMEDIATE`
//! transaction (SQLite pays one fsync per commit and has no group commit of its
//! own); the mirror uses it so that results finished at about the same moment
//! share their fsyncs. The scheme is LevelDB's leader–follower write path: a
//! caller queues its operation; if no leader is running, it becomes the leader,
//! takes *everything* queued, commits it as one batch and hands each caller its
//! own answer. A lone caller pays no thread hop, and no caller waits longer than
//! the batch in flight plus its own (in a gathering queue, below, plus the
//! next leader's gathering).
//!
//! A queue made [`GroupCommit::gathering`] adds one wait: a new leader whose
//! queue holds fewer operations than the last batch had waits for the rest,
//! for no longer than the last batch's commit took (and [`GATHER_CAP`]). It
//! is for a batch whose cost hardly grows with its size (PostgreSQL's one
//! statement, `store/postgres/batch.rs`): when the last batch is answered,
//! its callers come back one wake-up after another, and a leader that drains
//! at once commits part of them and leaves the rest to a batch of their own.
//! A caller that has been alone for a batch never waits (its last batch was
//! one operation); the first after a burst waits out the bound. Measured with
//! one queue per store handle (`store/postgres/mod.rs: LANES`): with more,
//! callers would go to another lane while a leader gathers, and it would
//! wait out its bound each time.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

/// What a waiting caller is told: its own answer, or that it leads next.
enum Wake<Out> {
    Done(Out),
    Lead,
}

/// One queued operation and the channel its caller waits on. Each caller is
/// woken exactly once per message meant for it: no thundering herd of
/// followers whose answers are not ready yet.
struct Slot<Op, Out> {
    op: Op,
    wake: Sender<Wake<Out>>,
}

struct Queue<Op, Out> {
    pending: VecDeque<Slot<Op, Out>>,
    leader_running: bool,
    /// How many pending operations a gathering leader waits for (0: none waits).
    awaited: usize,
    /// The last batch: how many operations it had and how long its commit
    /// took (recorded by gathering queues only).
    last: (usize, Duration),
}

/// The longest a gathering leader waits, whatever the last commit took: a
/// batch slowed by a lock or a disk does not make the next one wait as long.
// PostgreSQL only (feature `postgres`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) const GATHER_CAP: Duration = Duration::from_millis(2);

/// The leader–follower queue. `Op` is what callers submit, `Out` what each gets
/// back (typically a `Result`).
pub(crate) struct GroupCommit<Op, Out> {
    queue: Mutex<Queue<Op, Out>>,
    /// The longest a new leader waits for its batch to fill (see the module's
    /// docs); `None`: it does not wait.
    gather: Option<Duration>,
    /// Told when the queue holds what a gathering leader waits for.
    filled: Condvar,
    /// The answer for a caller whose batch could not answer it (the batch
    /// panicked, or answered the wrong number of operations).
    unanswered: fn(&str) -> Out,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the queue inconsistent:
    // every critical section is a push, a drain or a flag flip.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<Op, Out> GroupCommit<Op, Out> {
    /// A queue whose callers get `unanswered(reason)` when their batch fails
    /// without answering them.
    pub(crate) fn new(unanswered: fn(&str) -> Out) -> Self {
        GroupCommit {
            queue: Mutex::new(Queue {
                pending: VecDeque::new(),
                leader_running: false,
                awaited: 0,
                last: (0, Duration::ZERO),
            }),
            gather: None,
            filled: Condvar::new(),
            unanswered,
        }
    }

    /// [`GroupCommit::new`], its leaders waiting for their batch to fill
    /// (see the module's docs).
    // PostgreSQL only (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn gathering(unanswered: fn(&str) -> Out) -> Self {
        Self::gathering_up_to(GATHER_CAP, unanswered)
    }

    /// [`GroupCommit::gathering`] with another longest wait than [`GATHER_CAP`].
    fn gathering_up_to(cap: Duration, unanswered: fn(&str) -> Out) -> Self {
        GroupCommit {
            gather: Some(cap),
            ..GroupCommit::new(unanswered)
        }
    }

    /// Whether no batch is being committed or gathered (a caller now would
    /// lead at once).
    // PostgreSQL only (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn is_idle(&self) -> bool {
        !lock(&self.queue).leader_running
    }

    /// Queue `op` and return its own answer. `commit` runs a whole batch as one
    /// unit and returns one answer per operation, in order.
    pub(crate) fn submit<F>(&self, op: Op, commit: F) -> Out
    where
        F: Fn(&[&Op]) -> Vec<Out>,
    {
        let (wake, woken) = crossbeam_channel::bounded(1);
        let lead_now = {
            let mut q = lock(&self.queue);
            q.pending.push_back(Slot { op, wake });
            if q.awaited > 0 && q.pending.len() >= q.awaited {
                q.awaited = 0;
                self.filled.notify_one();
            }
            !std::mem::replace(&mut q.leader_running, true)
        };
        if !lead_now {
            match woken.recv() {
                Ok(Wake::Done(answer)) => return answer,
                Ok(Wake::Lead) => {}
                Err(_) => return (self.unanswered)(ABANDONED),
            }
        }
        self.lead(&commit, &woken)
    }

    /// Commit everything queued (our own op is among it), answer each caller,
    /// then hand the lead to the oldest waiting caller, if any. Each operation
    /// is dropped before its caller is woken: whatever it holds (a file lock)
    /// is free by the time its caller goes on.
    fn lead<F>(&self, commit: &F, mine: &Receiver<Wake<Out>>) -> Out
    where
        F: Fn(&[&Op]) -> Vec<Out>,
    {
        let batch: Vec<Slot<Op, Out>> = self.gathered().pending.drain(..).collect();
        let ops: Vec<&Op> = batch.iter().map(|s| &s.op).collect();
        // Timed for a gathering queue only: the next leader's wait.
        let started = self.gather.map(|_| Instant::now());
        let answers = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commit(&ops)));
        if let Some(started) = started {
            lock(&self.queue).last = (batch.len(), started.elapsed());
        }
        let answers: Vec<Out> = match answers {
            Ok(answers) if answers.len() == batch.len() => answers,
            _ => batch.iter().map(|_| (self.unanswered)(PANICKED)).collect(),
        };
        for (Slot { op, wake }, answer) in batch.into_iter().zip(answers) {
            drop(op);
            let _ = wake.send(Wake::Done(answer));
        }
        self.hand_over();
        match mine.try_recv() {
            Ok(Wake::Done(answer)) => answer,
            _ => (self.unanswered)(ABANDONED),
        }
    }

    /// The queue, once it holds as many operations as the last batch had or
    /// the wait is over (at once unless [`GroupCommit::gathering`]).
    fn gathered(&self) -> MutexGuard<'_, Queue<Op, Out>> {
        let mut q = lock(&self.queue);
        let (wanted, took) = q.last;
        let Some(cap) = self.gather.filter(|_| wanted > 1) else {
            return q;
        };
        let until = Instant::now() + took.min(cap);
        while q.pending.len() < wanted {
            let Some(left) = until
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                break;
            };
            q.awaited = wanted;
            q = match self.filled.wait_timeout(q, left) {
                Ok((q, _)) => q,
                Err(e) => e.into_inner().0,
            };
        }
        q.awaited = 0;
        q
    }

    /// Wake the next leader, or mark that none is running.
    fn hand_over(&self) {
        let mut q = lock(&self.queue);
        match q.pending.front() {
            Some(next) => {
                let _ = next.wake.send(Wake::Lead);
            }
            None => q.leader_running = false,
        }
    }
}

/// Why a caller got no answer of its batch's own.
const PANICKED: &str = "the batch panicked before answering; its transaction was rolled back";
const ABANDONED: &str = "internal: an operation was left without an answer";

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn each_caller_gets_its_own_answer_under_contention() {
        answers_under_contention(Arc::new(GroupCommit::new(|r| Err(r.into()))));
    }

    /// Eight threads of 200 operations each through `g`: each gets its own
    /// answer, and every operation is committed exactly once.
    fn answers_under_contention(g: Arc<GroupCommit<u32, Result<u32, String>>>) {
        let committed = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..8u32)
            .map(|t| {
                let g = Arc::clone(&g);
                let committed = Arc::clone(&committed);
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        let op = t * 1000 + i;
                        let out = g
                            .submit(op, |ops| {
                                committed.fetch_add(ops.len(), Ordering::SeqCst);
                                std::thread::yield_now();
                                ops.iter().map(|o| Ok(**o * 2)).collect()
                            })
                            .unwrap();
                        assert_eq!(out, op * 2);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // Every op went through exactly one batch: none dropped, none committed twice.
        assert_eq!(committed.load(Ordering::SeqCst), 1600);
    }

    /// The batch sizes `g` committed, each commit recording its own.
    fn sizes_of(g: &GroupCommit<u32, Result<u32, String>>, op: u32, sizes: &Mutex<Vec<usize>>) -> u32 {
        g.submit(op, |ops| {
            sizes.lock().unwrap().push(ops.len());
            ops.iter().map(|o| Ok(**o)).collect()
        })
        .unwrap()
    }

    /// A leader queued alone while the last batch of `g` had three operations
    /// and took a minute; two more callers once it gathers (or has answered):
    /// the batches committed, how long the three took, and whether the
    /// leader was seen waiting to gather.
    fn three_callers(g: &GroupCommit<u32, Result<u32, String>>) -> (Vec<usize>, Duration, bool) {
        lock(&g.queue).last = (3, Duration::from_secs(60));
        let sizes = Mutex::new(Vec::new());
        let started = Instant::now();
        let mut gathered = false;
        std::thread::scope(|s| {
            let leader = s.spawn(|| sizes_of(g, 1, &sizes));
            // (A leader that does not gather has answered by itself.)
            while lock(&g.queue).awaited == 0 && !leader.is_finished() {
                std::thread::yield_now();
            }
            gathered = lock(&g.queue).awaited != 0;
            let others: Vec<_> = [2, 3]
                .map(|op| {
                    s.spawn({
                        let sizes = &sizes;
                        move || sizes_of(g, op, sizes)
                    })
                })
                .into();
            assert_eq!(leader.join().unwrap(), 1);
            for (op, t) in [2, 3].into_iter().zip(others) {
                assert_eq!(t.join().unwrap(), op);
            }
        });
        let sizes = sizes.into_inner().unwrap();
        (sizes, started.elapsed(), gathered)
    }

    /// A gathering queue whose leaders may wait up to `cap`.
    fn gathering(cap: Duration) -> GroupCommit<u32, Result<u32, String>> {
        GroupCommit::gathering_up_to(cap, |r| Err(r.into()))
    }

    #[test]
    fn a_gathering_leader_waits_for_as_many_as_the_last_batch_had() {
        // Up to the minute the last commit took, but woken by the third
        // operation, not by the end of the wait.
        let (sizes, took, gathered) = three_callers(&gathering(Duration::from_secs(60)));
        assert!(gathered);
        assert_eq!(sizes, vec![3]);
        assert!(
            took < Duration::from_secs(30),
            "the leader was not woken: {took:?}"
        );
    }

    #[test]
    fn a_plain_queue_never_gathers() {
        let g = GroupCommit::<u32, Result<u32, String>>::new(|r| Err(r.into()));
        let (sizes, _, gathered) = three_callers(&g);
        assert!(!gathered, "the leader waited to gather");
        assert_eq!(sizes.first(), Some(&1), "batches {sizes:?}");
    }

    /// A caller alone in `g`, whose last batch had five operations and took
    /// `took`: the batches committed, once it has its answer within 30 s.
    fn alone_after_five(g: &GroupCommit<u32, Result<u32, String>>, took: Duration) -> Vec<usize> {
        lock(&g.queue).last = (5, took);
        let sizes = Mutex::new(Vec::new());
        let started = Instant::now();
        assert_eq!(sizes_of(g, 7, &sizes), 7);
        let waited = started.elapsed();
        assert!(waited < Duration::from_secs(30), "waited {waited:?}");
        sizes.into_inner().unwrap()
    }

    #[test]
    fn a_gathering_leader_alone_waits_no_longer_than_its_cap() {
        // The last commit took a minute: the wait is the cap's.
        let g = gathering(Duration::from_millis(1));
        assert_eq!(alone_after_five(&g, Duration::from_secs(60)), vec![1]);
        // Now the last batch was one, so the next caller leads without waiting.
        assert_eq!(lock(&g.queue).last.0, 1);
    }

    #[test]
    fn a_gathering_leader_alone_waits_no_longer_than_the_last_commit_took() {
        let g = gathering(Duration::from_secs(60));
        assert_eq!(alone_after_five(&g, Duration::from_millis(1)), vec![1]);
    }

    #[test]
    fn each_caller_of_a_gathering_queue_gets_its_own_answer_under_contention() {
        answers_under_contention(Arc::new(gathering(GATHER_CAP)));
    }

    #[test]
    fn a_panicking_commit_answers_everyone_with_an_error() {
        let g = GroupCommit::<u32, Result<u32, String>>::new(|r| Err(r.into()));
        let r = g.submit(1, |_| panic!("boom"));
        assert!(r.is_err());
        // The queue is usable afterwards.
        assert_eq!(
            g.submit(2, |ops| ops.iter().map(|o| Ok(**o)).collect()).unwrap(),
            2
        );
    }
}
