//! The child's stderr, drained on a thread into a small ring buffer so a chatty or dying
//! child can never block on a full pipe, and never reaches the user's terminal. Only the
//! last few sanitised lines are ever shown, inside a failure reason.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::process::ChildStderr;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// How much of the tail of the child's stderr is kept. Crash messages are short and come
/// last, so a few KiB always holds them even after pages of parser debug output.
const RING_BYTES: usize = 4096;
/// At most this many lines go into a failure reason...
const MAX_LINES: usize = 3;
/// ...each cut to this many characters.
const MAX_LINE_CHARS: usize = 200;

#[derive(Default)]
struct Ring {
    bytes: VecDeque<u8>,
    /// The pipe reached end of file: every writer (the child) is gone.
    closed: bool,
}

/// The shared tail of one child's stderr.
#[derive(Default)]
pub(super) struct Capture {
    ring: Mutex<Ring>,
    changed: Condvar,
}

impl Capture {
    /// Starts the drain thread. It ends by itself when the child's end of the pipe closes.
    pub(super) fn start(stderr: ChildStderr) -> io::Result<Arc<Capture>> {
        let capture = Arc::new(Capture::default());
        let shared = Arc::clone(&capture);
        thread::Builder::new()
            .name("leasehold-child-stderr".into())
            .spawn(move || shared.drain(stderr))?;
        Ok(capture)
    }

    fn drain(&self, mut stderr: ChildStderr) {
        let mut chunk = [0u8; 4096];
        loop {
            let n = match stderr.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => 0,
            };
            let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
            if n == 0 {
                ring.closed = true;
                self.changed.notify_all();
                return;
            }
            ring.bytes.extend(&chunk[..n]);
            let excess = ring.bytes.len().saturating_sub(RING_BYTES);
            ring.bytes.drain(..excess);
        }
    }

    /// Forgets what earlier documents made the child say, so a crash is explained by the
    /// document that caused it (and a hostile document cannot plant words for the next one).
    /// Bytes still in the pipe from the previous document may survive; that is rare and
    /// only ever adds context.
    pub(super) fn clear(&self) {
        self.ring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
            .clear();
    }

    /// Waits, at most `bound`, for the child's last words to be drained, then returns the
    /// captured tail as text. Called after the child has been reaped.
    pub(super) fn tail(&self, bound: Duration) -> String {
        let until = Instant::now() + bound;
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        while !ring.closed {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            ring = self
                .changed
                .wait_timeout(ring, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let (a, b) = ring.bytes.as_slices();
        String::from_utf8_lossy(&[a, b].concat()).into_owned()
    }
}

/// The last [`MAX_LINES`] non-blank lines of `text`, control characters removed and each cut
/// at [`MAX_LINE_CHARS`], joined with " | ". Empty when the child said nothing.
pub(super) fn last_lines(text: &str) -> String {
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let clean: String = line.chars().filter(|c| !c.is_control()).collect();
            let clean = clean.trim();
            match clean.char_indices().nth(MAX_LINE_CHARS) {
                Some((cut, _)) => format!("{}…", &clean[..cut]),
                None => clean.to_owned(),
            }
        })
        .filter(|line| !line.is_empty())
        .collect();
    lines[lines.len().saturating_sub(MAX_LINES)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_are_few_clean_and_short() {
        let long = "x".repeat(500);
        let text = format!("first\nsecond\n\x1b[31mred\x07\n\n{long}\nlast\r\n");
        let lines = last_lines(&text);
        assert_eq!(lines, format!("[31mred | {}… | last", "x".repeat(200)));
        assert_eq!(last_lines(""), "");
    }
}
