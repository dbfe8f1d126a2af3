//! Change notifications: notify's recommended watcher (inotify on Linux)
//! behind notify-debouncer-full, feeding the [`Inbox`]. Events are filtered
//! on arrival (paths the source does not concern, reads) so that only paths
//! worth a look take memory, and errors that mean notifications can no
//! longer be trusted are turned into a reason to rescan instead.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{new_debouncer_opt, DebounceEventResult, Debouncer, NoCache};

use super::pending::{Batch, Pending, Why};
use crate::source::DirSource;

/// The running notifier; dropping it stops the notifications.
pub(super) type Notifier = Debouncer<RecommendedWatcher, NoCache>;

/// Test hook: set (to anything) in a `watch` process's environment, the
/// notifier fails to start as if the inotify watch limit were reached, so
/// tests can see the fallback to rescans without root's `sysctl`.
pub const NOTIFY_FAILS_ENV: &str = "LEASEHOLD_TEST_NOTIFY_FAILS";

/// What the debouncer's thread hands the watch loop: the changes noted, and
/// why notifications stopped being trustworthy, if they did.
#[derive(Debug)]
pub(super) struct Inbox {
    pending: Mutex<Pending>,
    lost: Mutex<Option<String>>,
    /// Wakes the loop; capacity one, so a burst is one wake-up.
    wake: Sender<()>,
}

impl Inbox {
    pub(super) fn new(max_pending: usize, wake: Sender<()>) -> Inbox {
        Inbox {
            pending: Mutex::new(Pending::new(max_pending)),
            lost: Mutex::new(None),
            wake,
        }
    }

    /// Ask for a full rescan and wake the loop.
    pub(super) fn rescan(&self, why: Why) {
        self.pending().rescan(why);
        let _ = self.wake.try_send(());
    }

    /// What waits, taken.
    pub(super) fn take(&self) -> Option<Batch> {
        self.pending().take()
    }

    /// Why notifications stopped, once.
    pub(super) fn take_lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One delivery of the debouncer.
    fn receive(&self, source: &DirSource, result: DebounceEventResult) {
        match result {
            Ok(events) => {
                let mut pending = self.pending();
                for event in events {
                    if event.need_rescan() {
                        // The kernel's queue overflowed: events were lost.
                        pending.rescan(Why::Overflow);
                    } else if worth_a_look(&event.kind) {
                        for path in &event.paths {
                            if source.concerns(path) {
                                pending.add(path.clone());
                            }
                        }
                    }
                }
            }
            Err(errors) => {
                for e in &errors {
                    match (lost_reason(e), &e.kind) {
                        (Some(why), _) => {
                            let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
                            lost.get_or_insert(why);
                        }
                        // A directory that vanished while its watch was being
                        // added: its removal has an event of its own.
                        (None, notify::ErrorKind::PathNotFound | notify::ErrorKind::WatchNotFound) => {}
                        // Something else: an event may be missing, so look at
                        // everything again.
                        (None, _) => self.pending().rescan(Why::NotifyError),
                    }
                }
            }
        }
        if !self.pending().is_empty() || self.lost.lock().is_ok_and(|l| l.is_some()) {
            let _ = self.wake.try_send(());
        }
    }
}

/// Reads change nothing: a worker fetching a file must not bring it back
/// as work. A file closed after writing is a change.
fn worth_a_look(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Why an error means the notifications cannot cover the tree any more
/// (so the watcher must rescan on a timer instead), or `None` for an error
/// about one path.
pub(super) fn lost_reason(e: &notify::Error) -> Option<String> {
    const WATCHES: &str = "the inotify watch limit is reached (sysctl fs.inotify.max_user_watches)";
    #[cfg(target_os = "linux")]
    const INSTANCES: &str = "the inotify instance limit is reached (sysctl fs.inotify.max_user_instances)";
    match &e.kind {
        notify::ErrorKind::MaxFilesWatch => Some(WATCHES.into()),
        // inotify's answers when a limit is reached (Linux only).
        #[cfg(target_os = "linux")]
        notify::ErrorKind::Io(io) => match io.raw_os_error() {
            Some(libc::ENOSPC) => Some(WATCHES.into()),
            Some(libc::EMFILE) => Some(INSTANCES.into()),
            _ => None,
        },
        _ => None,
    }
}

/// Start notifications for the whole tree under the source's root, debounced
/// by `debounce`. The error is why not, in words (a limit reached, or what
/// the kernel said).
pub(super) fn start(source: &DirSource, inbox: Arc<Inbox>, debounce: Duration) -> Result<Notifier, String> {
    if std::env::var_os(NOTIFY_FAILS_ENV).is_some() {
        let e = notify::Error::new(notify::ErrorKind::MaxFilesWatch);
        return Err(lost_reason(&e).unwrap_or_default());
    }
    let root: &Path = source.root();
    let filter = source.clone();
    let handler = move |result: DebounceEventResult| inbox.receive(&filter, result);
    // Links are not followed, as the scan enters no linked directory.
    let config = notify::Config::default().with_follow_symlinks(false);
    let describe =
        |e: notify::Error| lost_reason(&e).unwrap_or_else(|| format!("cannot watch {}: {e}", root.display()));
    let mut notifier =
        new_debouncer_opt::<_, RecommendedWatcher, NoCache>(debounce, None, handler, NoCache::new(), config)
            .map_err(describe)?;
    notifier.watch(root, RecursiveMode::Recursive).map_err(describe)?;
    Ok(notifier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn limits_mean_rescans_and_other_errors_do_not() {
        let max = notify::Error::new(notify::ErrorKind::MaxFilesWatch);
        assert!(lost_reason(&max).unwrap().contains("max_user_watches"));
        let enospc = notify::Error::io(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(lost_reason(&enospc).unwrap().contains("max_user_watches"));
        let emfile = notify::Error::io(std::io::Error::from_raw_os_error(libc::EMFILE));
        assert!(lost_reason(&emfile).unwrap().contains("max_user_instances"));
        let gone = notify::Error::new(notify::ErrorKind::PathNotFound);
        assert_eq!(lost_reason(&gone), None);
    }

    /// What the debouncer hands over becomes the right batch: the source's
    /// paths (not hidden ones, not reads, not outside), an overflow a
    /// rescan, a limit a reason to fall back, a vanished directory nothing.
    #[test]
    fn deliveries_become_paths_rescans_or_a_fallback() {
        use notify::event::{CreateKind, Flag, ModifyKind};
        use notify::Event;
        use notify_debouncer_full::DebouncedEvent;
        let dir = tempfile::tempdir().unwrap();
        let source = DirSource::open(dir.path()).unwrap();
        let root = source.root().to_path_buf();
        let (wake, woken) = crossbeam_channel::bounded(1);
        let inbox = Inbox::new(100, wake);
        let event = |kind, path: PathBuf| {
            DebouncedEvent::new(Event::new(kind).add_path(path), std::time::Instant::now())
        };
        inbox.receive(
            &source,
            Ok(vec![
                event(EventKind::Create(CreateKind::File), root.join("a.txt")),
                event(EventKind::Modify(ModifyKind::Any), root.join("a.txt")),
                event(EventKind::Create(CreateKind::File), root.join(".hidden")),
                event(
                    EventKind::Access(AccessKind::Open(AccessMode::Read)),
                    root.join("b.txt"),
                ),
                event(
                    EventKind::Create(CreateKind::File),
                    PathBuf::from("/elsewhere/c.txt"),
                ),
            ]),
        );
        assert!(woken.try_recv().is_ok(), "the loop is woken");
        assert_eq!(inbox.take(), Some(Batch::Paths(vec![root.join("a.txt")])));

        let overflow = Event::new(EventKind::Other).set_flag(Flag::Rescan);
        inbox.receive(
            &source,
            Ok(vec![DebouncedEvent::new(overflow, std::time::Instant::now())]),
        );
        assert_eq!(inbox.take(), Some(Batch::Rescan(Why::Overflow)));

        inbox.receive(
            &source,
            Err(vec![notify::Error::new(notify::ErrorKind::PathNotFound)]),
        );
        assert_eq!(inbox.take(), None);
        assert_eq!(inbox.take_lost(), None);

        inbox.receive(
            &source,
            Err(vec![notify::Error::new(notify::ErrorKind::MaxFilesWatch)]),
        );
        assert!(inbox.take_lost().unwrap().contains("max_user_watches"));
        assert_eq!(inbox.take_lost(), None, "said once");
    }

    #[test]
    fn reads_are_not_changes() {
        assert!(!worth_a_look(&EventKind::Access(AccessKind::Open(
            AccessMode::Read
        ))));
        assert!(!worth_a_look(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(worth_a_look(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(worth_a_look(&EventKind::Remove(notify::event::RemoveKind::File)));
    }
}
