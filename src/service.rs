//! One start/stop shape for background components (the checkpointer, the lease
//! keeper's heartbeat, the courier, the worker pool's threads), after River's
//! services: `start` spawns the component's loop on a named thread and returns a
//! handle; [`Service::stop`], or dropping the handle, asks the loop to end and
//! joins its thread. A component's loop is a timer plus a step: it naps on its
//! [`StopSignal`] between steps, so a stop is seen within one nap and no thread
//! outlives its handle.

use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

/// A running background component; stopped and joined on [`Service::stop`] or drop.
#[derive(Debug)]
pub(crate) struct Service<T: Send + 'static = ()> {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<T>>,
}

/// What a component's loop watches: closed when its handle stops it.
#[derive(Debug, Clone)]
pub(crate) struct StopSignal(Receiver<()>);

impl StopSignal {
    /// Sleep up to `d`; false once a stop was asked (at once if it already was).
    pub(crate) fn nap(&self, d: Duration) -> bool {
        matches!(self.0.recv_timeout(d), Err(RecvTimeoutError::Timeout))
    }

    /// The channel itself, for loops that `select!` over several sources.
    pub(crate) fn receiver(&self) -> &Receiver<()> {
        &self.0
    }
}

impl<T: Send + 'static> Service<T> {
    /// Run `body` on a thread named `name`. A thread that cannot be spawned is
    /// an error the caller decides about (the store runs without a checkpointer,
    /// a pool refuses to start).
    pub(crate) fn start(
        name: &str,
        body: impl FnOnce(StopSignal) -> T + Send + 'static,
    ) -> std::io::Result<Service<T>> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || body(StopSignal(stopped)))?;
        Ok(Service {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Ask the loop to end and wait for it; its answer, or `None` if it panicked.
    // Used by the courier, which a build may leave out (feature `http`).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn stop(mut self) -> Option<T> {
        self.shutdown()
    }

    /// Ask the loop to end and wait for it at most `within`: a loop still
    /// busy then (a step that cannot be interrupted, such as a scan of a
    /// large tree) is left to finish on its own thread, detached, and `None`
    /// is returned. For components whose step is safe to abandon when the
    /// process is about to exit.
    // Used by the watcher, which a build may leave out (feature `watch`).
    #[cfg_attr(not(feature = "watch"), allow(dead_code))]
    pub(crate) fn stop_within(mut self, within: Duration) -> Option<T> {
        drop(self.stop.take());
        let deadline = std::time::Instant::now() + within;
        let thread = self.thread.take()?;
        while !thread.is_finished() {
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        thread.join().ok()
    }

    /// Wait for the loop to return on its own, without asking it to stop.
    pub(crate) fn join(mut self) -> Option<T> {
        self.thread.take()?.join().ok()
    }

    fn shutdown(&mut self) -> Option<T> {
        drop(self.stop.take());
        self.thread.take()?.join().ok()
    }
}

impl<T: Send + 'static> Drop for Service<T> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_ends_the_loop_and_returns_its_answer() {
        let svc = Service::start("test-service", |stop| {
            let mut naps = 0;
            while stop.nap(Duration::from_millis(1)) {
                naps += 1;
            }
            naps
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(svc.stop().unwrap() > 0);
    }

    #[test]
    fn stop_within_leaves_a_busy_loop_behind() {
        let (release, busy) = crossbeam_channel::bounded::<()>(0);
        let svc = Service::start("test-service", move |_stop| {
            let _ = busy.recv();
            "done"
        })
        .unwrap();
        let started = std::time::Instant::now();
        assert_eq!(svc.stop_within(Duration::from_millis(50)), None);
        assert!(started.elapsed() < Duration::from_secs(5), "the wait was bounded");
        drop(release);
        let quick =
            Service::start("test-service", |stop| while stop.nap(Duration::from_secs(60)) {}).unwrap();
        assert_eq!(quick.stop_within(Duration::from_secs(5)), Some(()));
    }

    #[test]
    fn dropping_the_handle_joins_the_thread() {
        let (tx, rx) = crossbeam_channel::unbounded();
        drop(
            Service::start("test-service", move |stop| {
                while stop.nap(Duration::from_secs(60)) {}
                tx.send("ended").unwrap();
            })
            .unwrap(),
        );
        assert_eq!(rx.try_recv(), Ok("ended"), "the loop ended before drop returned");
    }
}
