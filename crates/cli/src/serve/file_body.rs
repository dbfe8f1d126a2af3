//! An answer's body read from a file a piece at a time, as the client takes
//! it: an original or a text of tens of megabytes is never held whole, so
//! what the server holds for its answers is bounded by its connections,
//! not by the documents' sizes.
//!
//! Each piece is read on tokio's blocking threads (a read of a folder on a
//! mount that stopped answering stalls that answer only, not the runtime
//! that serves every connection), and a piece not read within
//! [`ANSWER_TIMEOUT`] ends the answer: the connection is closed (its
//! headers are sent, so no 504 can be), though the blocked read keeps its
//! thread until the mount answers. No more than the length the answer
//! promised is read; a file that shrank since ends the answer with an
//! error, and hyper closes the connection rather than send a short body
//! under that length. While it is sent the file stays open (on Windows a
//! file deleted meanwhile is gone only when the answer ends).

use std::fs::File;
use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Bytes, Frame, SizeHint};
use tokio::task::JoinHandle;
use tokio::time::Sleep;

use super::http::ANSWER_TIMEOUT;

/// Bytes read per piece.
const PIECE: usize = 64 * 1024;

/// A file's first `len` bytes as a body.
pub struct FileBody {
    state: State,
    left: u64,
}

enum State {
    /// Waiting to be asked for the next piece.
    Idle(Option<File>),
    /// A piece being read, the file coming back with it, and when it is
    /// given up.
    Reading(JoinHandle<std::io::Result<(File, Vec<u8>)>>, Pin<Box<Sleep>>),
}

impl FileBody {
    /// The first `len` bytes of `file`, from where it stands.
    pub fn new(file: File, len: u64) -> FileBody {
        FileBody {
            state: State::Idle(Some(file)),
            left: len,
        }
    }
}

/// Up to `want` bytes of `file` (fewer only at its end).
fn read_piece(mut file: File, want: usize) -> std::io::Result<(File, Vec<u8>)> {
    let mut piece = Vec::with_capacity(want);
    (&mut file).take(want as u64).read_to_end(&mut piece)?;
    Ok((file, piece))
}

impl hyper::body::Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        loop {
            if this.left == 0 {
                return Poll::Ready(None);
            }
            match &mut this.state {
                State::Idle(file) => {
                    let Some(file) = file.take() else {
                        return Poll::Ready(None);
                    };
                    let want = this.left.min(PIECE as u64) as usize;
                    let reading = tokio::task::spawn_blocking(move || read_piece(file, want));
                    this.state = State::Reading(reading, Box::pin(tokio::time::sleep(ANSWER_TIMEOUT)));
                }
                State::Reading(reading, deadline) => {
                    let read = match Pin::new(reading).poll(cx) {
                        Poll::Ready(joined) => joined.map_err(std::io::Error::other).and_then(|r| r),
                        Poll::Pending => match deadline.as_mut().poll(cx) {
                            Poll::Pending => return Poll::Pending,
                            Poll::Ready(()) => {
                                this.left = 0;
                                let stuck = std::io::Error::new(
                                    std::io::ErrorKind::TimedOut,
                                    "a piece of the file was not read in time",
                                );
                                return Poll::Ready(Some(Err(stuck)));
                            }
                        },
                    };
                    this.state = State::Idle(None);
                    let (file, piece) = match read {
                        Ok(read) => read,
                        Err(e) => return Poll::Ready(Some(Err(e))),
                    };
                    if piece.is_empty() {
                        let short = std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the file shrank while it was sent",
                        );
                        return Poll::Ready(Some(Err(short)));
                    }
                    this.left -= piece.len() as u64;
                    this.state = State::Idle(Some(file));
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(piece)))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}
