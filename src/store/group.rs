//! Group commit: concurrent writes from the threads of one process share one
//! `BEGIN IMMEDIATE` transaction.
//!
//! SQLite pays one fsync per commit and has no group commit of its own, so this
//! is the one lever that moves throughput under `synchronous=FULL`. The scheme is
//! LevelDB's leader–follower write path: a caller queues its operation; if no
//! leader is running, it becomes the leader, takes *everything* queued, commits it
//! in one transaction and hands each caller its own answer. A lone caller pays no
//! thread hop, and no caller waits longer than the batch in flight plus its own.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::error::{Error, Result};

/// One queued operation and the slot its answer lands in.
struct Slot<Op, Out> {
    op: Op,
    answer: Mutex<Option<Result<Out>>>,
}

struct Queue<Op, Out> {
    pending: VecDeque<Arc<Slot<Op, Out>>>,
    leader_running: bool,
}

/// The leader–follower queue. `Op` is what callers submit, `Out` what each gets back.
pub(crate) struct GroupCommit<Op, Out> {
    queue: Mutex<Queue<Op, Out>>,
    done: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave them inconsistent: every
    // critical section is a push, a drain or a flag flip.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<Op, Out> GroupCommit<Op, Out> {
    pub(crate) fn new() -> Self {
        GroupCommit {
            queue: Mutex::new(Queue {
                pending: VecDeque::new(),
                leader_running: false,
            }),
            done: Condvar::new(),
        }
    }

    /// Queue `op` and return its own answer. `commit` runs a whole batch in one
    /// transaction and returns one answer per operation, in order.
    pub(crate) fn submit<F>(&self, op: Op, commit: F) -> Result<Out>
    where
        F: Fn(&[&Op]) -> Vec<Result<Out>>,
    {
        let mine = Arc::new(Slot {
            op,
            answer: Mutex::new(None),
        });
        let mut q = lock(&self.queue);
        q.pending.push_back(Arc::clone(&mine));
        loop {
            if let Some(answer) = lock(&mine.answer).take() {
                return answer;
            }
            if q.leader_running {
                q = self.done.wait(q).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            q.leader_running = true;
            let batch: Vec<_> = q.pending.drain(..).collect();
            drop(q);
            self.lead(&batch, &commit);
            q = lock(&self.queue);
            q.leader_running = false;
            self.done.notify_all();
        }
    }

    /// Run one batch and fill every slot, even if `commit` panics, so that no
    /// follower waits forever.
    fn lead<F>(&self, batch: &[Arc<Slot<Op, Out>>], commit: &F)
    where
        F: Fn(&[&Op]) -> Vec<Result<Out>>,
    {
        let ops: Vec<&Op> = batch.iter().map(|s| &s.op).collect();
        let answers = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commit(&ops)));
        match answers {
            Ok(answers) if answers.len() == batch.len() => {
                for (slot, a) in batch.iter().zip(answers) {
                    *lock(&slot.answer) = Some(a);
                }
            }
            _ => {
                for slot in batch {
                    *lock(&slot.answer) = Some(Err(Error::InvalidInput {
                        what: "group commit",
                        reason: "the batch commit panicked; the transaction was rolled back".into(),
                    }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn each_caller_gets_its_own_answer_and_batches_form_under_contention() {
        let g = Arc::new(GroupCommit::<u32, u32>::new());
        let batches = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..8u32)
            .map(|t| {
                let g = Arc::clone(&g);
                let batches = Arc::clone(&batches);
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        let op = t * 1000 + i;
                        let out = g
                            .submit(op, |ops| {
                                batches.fetch_add(1, Ordering::SeqCst);
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
        assert!(batches.load(Ordering::SeqCst) <= 1600);
    }

    #[test]
    fn a_panicking_commit_answers_everyone_with_an_error() {
        let g = GroupCommit::<u32, u32>::new();
        let r = g.submit(1, |_| panic!("boom"));
        assert!(r.is_err());
        // The queue is usable afterwards.
        assert_eq!(
            g.submit(2, |ops| ops.iter().map(|o| Ok(**o)).collect()).unwrap(),
            2
        );
    }
}
