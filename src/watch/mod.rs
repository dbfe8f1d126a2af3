//! Keeping the store current with a directory (`leasehold watch`): file
//! system notifications, debounced and coalesced into a bounded set of
//! paths, become discovery of just those paths; the worker pool beside it
//! extracts what that queues. Where notifications are unavailable (a network
//! file system, a kernel limit reached) it rescans the whole tree on a
//! timer instead, and says so once.
//!
//! The flow, on one thread of its own ([`Watcher`]):
//! notify (inotify) → notify-debouncer-full (quiet for `debounce`) →
//! the inbox (`notifier.rs`): the paths the source concerns, in a capped
//! set (`pending.rs`) → one pass: [`DirSource::discover_paths`] for the paths,
//! or [`DirSource::discover`] for a rescan (the first pass, an overflowed
//! queue, a set past its cap, a timer in fallback) → a [`WatchReport`].
//! Discovery wakes the pool through the store, as `run`'s does.

mod notifier;
mod pending;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

pub use notifier::NOTIFY_FAILS_ENV;
use notifier::{Inbox, Notifier};
use pending::Batch;
pub use pending::Why;

use crate::error::{Error, Result};
use crate::service::{Service, StopSignal};
use crate::source::{DirSource, Discovered};
use crate::store::Store;

/// How a [`Watcher`] runs.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// How long a path must be quiet before its change is taken: a file
    /// being written is looked at once, after the last write.
    pub debounce: Duration,
    /// How often the tree is rescanned when notifications are unavailable.
    pub rescan_every: Duration,
    /// The most paths kept waiting; past it, one full rescan instead (a
    /// burst of any size costs bounded memory).
    pub max_pending: usize,
    /// Never use notifications: rescan every `rescan_every` (for file
    /// systems whose notifications are known to be unreliable).
    pub poll: bool,
    /// Files over this many bytes are versioned by fingerprint, not read.
    pub max_input: u64,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            debounce: Duration::from_millis(200),
            rescan_every: Duration::from_secs(30),
            max_pending: 10_000,
            poll: false,
            max_input: 64 * 1024 * 1024,
        }
    }
}

/// What the watcher did, one report per pass (and one when it falls back).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WatchReport {
    /// One pass applied: the named paths, or the whole tree.
    Pass {
        /// A whole-tree scan (first pass, overflow, fallback), not named paths.
        full: bool,
        /// Why the whole tree was scanned (absent for named paths).
        #[serde(skip_serializing_if = "Option::is_none")]
        why: Option<Why>,
        /// Paths looked at (0 for a whole-tree scan).
        paths: usize,
        /// What discovery found.
        #[serde(flatten)]
        found: Discovered,
        /// How long the pass took.
        seconds: f64,
    },
    /// Notifications are unavailable: the tree is rescanned on a timer.
    Rescanning {
        /// Why (a network file system, a limit reached, `--poll`).
        reason: String,
        /// Seconds between rescans.
        every_seconds: f64,
    },
    /// A pass failed; what it covered is rescanned after a pause.
    Failed {
        /// The error, one line.
        error: String,
    },
}

/// The running watcher; [`Watcher::stop`] ends it (waiting a bounded time
/// for a pass in progress), and so does dropping it (waiting for the pass).
#[derive(Debug)]
pub struct Watcher {
    service: Service<()>,
}

impl Watcher {
    /// Start watching `source`'s tree into `store`, sending a report of every
    /// pass to `reports`. The first pass is a full scan (the initial run),
    /// taken after notifications started, so no change falls between the two.
    pub fn start(
        source: DirSource,
        store: Store,
        opts: WatchOptions,
        reports: Sender<WatchReport>,
    ) -> Result<Watcher> {
        let root = source.root().to_path_buf();
        let service = Service::start("leasehold-watch", move |stop| {
            Loop::new(source, store, opts, reports).run(&stop)
        })
        .map_err(|e| Error::Io {
            path: root,
            source: e,
        })?;
        Ok(Watcher { service })
    }

    /// Stop watching. A pass in progress gets [`STOP_WAIT`] to finish; one
    /// still running then (a full scan of a large tree) is left behind on
    /// its thread, so a process that is about to exit never waits on it.
    /// What it recorded stays: each batch of a scan is its own transaction,
    /// and the next scan does the rest.
    pub fn stop(self) {
        self.service.stop_within(STOP_WAIT);
    }
}

/// How long [`Watcher::stop`] waits for a pass in progress.
pub const STOP_WAIT: Duration = Duration::from_secs(5);
/// Pause after a failed pass, doubling up to [`MAX_RETRY_PAUSE`].
const FIRST_RETRY_PAUSE: Duration = Duration::from_secs(1);
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(30);
/// How often the loop looks whether notifications were lost, when nothing wakes it.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The watch thread's state.
struct Loop {
    source: DirSource,
    store: Store,
    opts: WatchOptions,
    reports: Sender<WatchReport>,
    inbox: Arc<Inbox>,
    wake: crossbeam_channel::Receiver<()>,
    /// `Some` while notifications work; `None`: rescans on a timer.
    notifier: Option<Notifier>,
    next_rescan: Option<Instant>,
    retry: Option<(Instant, Duration)>,
}

impl Loop {
    fn new(source: DirSource, store: Store, opts: WatchOptions, reports: Sender<WatchReport>) -> Loop {
        let (wake_tx, wake) = crossbeam_channel::bounded(1);
        let inbox = Arc::new(Inbox::new(opts.max_pending, wake_tx));
        let mut this = Loop {
            source,
            store,
            opts,
            reports,
            inbox,
            wake,
            notifier: None,
            next_rescan: None,
            retry: None,
        };
        match this.notifications() {
            Ok(n) => this.notifier = Some(n),
            Err(reason) => this.fall_back(reason),
        }
        // The initial run's scan, after notifications started.
        this.inbox.rescan(Why::Start);
        this
    }

    /// Notifications for the tree, or why there are none.
    fn notifications(&self) -> std::result::Result<Notifier, String> {
        if self.opts.poll {
            return Err("--poll".into());
        }
        let root = self.source.root();
        if let Some(fs) = crate::fs_kind::fs_magic(root)
            .ok()
            .and_then(crate::fs_kind::remote_fs)
        {
            return Err(format!(
                "{} is on {fs}, which sends no change notifications for other machines' writes",
                root.display()
            ));
        }
        notifier::start(&self.source, Arc::clone(&self.inbox), self.opts.debounce)
    }

    /// From now on, rescan on a timer; said once.
    fn fall_back(&mut self, reason: String) {
        self.notifier = None;
        self.next_rescan = Some(Instant::now() + self.opts.rescan_every);
        let _ = self.reports.send(WatchReport::Rescanning {
            reason,
            every_seconds: self.opts.rescan_every.as_secs_f64(),
        });
    }

    fn run(mut self, stop: &StopSignal) {
        loop {
            let timeout = self.next_deadline().saturating_duration_since(Instant::now());
            crossbeam_channel::select! {
                recv(stop.receiver()) -> _ => return,
                recv(self.wake) -> _ => {}
                default(timeout) => {}
            }
            self.step();
        }
    }

    /// When the loop must look again without being woken.
    fn next_deadline(&self) -> Instant {
        let mut at = Instant::now() + LOOK_EVERY;
        if let Some(t) = self.next_rescan {
            at = at.min(t);
        }
        if let Some((t, _)) = self.retry {
            at = at.min(t);
        }
        at
    }

    /// One look: fall back if notifications were lost, start a timed rescan
    /// if one is due, then apply what waits (unless pausing after a failure).
    fn step(&mut self) {
        if self.notifier.is_some() {
            if let Some(reason) = self.inbox.take_lost() {
                self.fall_back(reason);
                self.inbox.rescan(Why::Lost);
            }
        }
        let now = Instant::now();
        if self.next_rescan.is_some_and(|t| now >= t) {
            self.inbox.rescan(Why::Timer);
        }
        if self.retry.is_some_and(|(t, _)| now < t) {
            return;
        }
        let Some(batch) = self.inbox.take() else { return };
        let full = matches!(batch, Batch::Rescan(_));
        let started = Instant::now();
        let (paths, why) = match &batch {
            Batch::Paths(p) => (p.len(), None),
            Batch::Rescan(why) => (0, Some(*why)),
        };
        let report = match self.apply(batch) {
            Ok((found, full)) => {
                self.retry = None;
                WatchReport::Pass {
                    full,
                    why,
                    paths,
                    found,
                    seconds: started.elapsed().as_secs_f64(),
                }
            }
            Err(e) => {
                let pause = self
                    .retry
                    .map_or(FIRST_RETRY_PAUSE, |(_, p)| (p * 2).min(MAX_RETRY_PAUSE));
                self.retry = Some((Instant::now() + pause, pause));
                self.inbox.rescan(Why::Retry);
                WatchReport::Failed {
                    error: e.to_string().replace('\n', " "),
                }
            }
        };
        if full && self.notifier.is_none() {
            // The next timed rescan counts from the end of this one, so a
            // slow tree is never scanned back to back.
            self.next_rescan = Some(Instant::now() + self.opts.rescan_every);
        }
        let _ = self.reports.send(report);
    }

    /// Discovery for one batch; whether it was a full scan.
    fn apply(&self, batch: Batch) -> Result<(Discovered, bool)> {
        let max = self.opts.max_input;
        match batch {
            Batch::Rescan(_) => Ok((self.source.discover(&self.store, max)?, true)),
            Batch::Paths(paths) => self
                .source
                .discover_paths(&self.store, &paths, max)
                .map(|found| (found, false)),
        }
    }
}
