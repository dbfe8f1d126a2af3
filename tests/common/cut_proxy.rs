//! A TCP proxy in front of a PostgreSQL server that can lose one answer: once
//! armed, the reply to the next statement a client runs (its Bind message,
//! whatever else came with it), or to the next COMMIT, is not passed on, and
//! that connection is cut both ways. The server has run the statement, and committed it when it
//! commits on its own, before it answers: this is a commit whose answer was
//! lost with its connection.
//!
//! Everything else is relayed byte for byte. Each connection has two
//! threads; they end when either side closes.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// The proxy; it stops accepting when dropped (connections made end with
/// their sides).
pub struct CutProxy {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    /// How many of the next statements' answers are to be lost.
    armed: AtomicUsize,
    /// How many of the next COMMITs' answers are to be lost.
    armed_commits: AtomicUsize,
    /// Answers lost so far.
    cuts: AtomicUsize,
    stop: AtomicBool,
}

impl CutProxy {
    /// A proxy on a free loopback port, relaying to `127.0.0.1:server_port`.
    pub fn start(server_port: u16) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        let shared = Arc::new(Shared {
            armed: AtomicUsize::new(0),
            armed_commits: AtomicUsize::new(0),
            cuts: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)) else {
                    continue;
                };
                relay(client, server, Arc::clone(&accepting));
            }
        });
        CutProxy { port, shared }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Lose the answer to the next statement any client runs (one more
    /// each call: the statements after it, on the connections made then).
    pub fn arm(&self) {
        self.shared.armed.fetch_add(1, Ordering::SeqCst);
    }

    /// Lose the answer to the next COMMIT any client sends.
    pub fn arm_commit(&self) {
        self.shared.armed_commits.fetch_add(1, Ordering::SeqCst);
    }

    /// Answers lost so far.
    pub fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accepting thread so that it sees the stop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Relay one connection both ways; the server's reply to a statement sent
/// while armed is dropped and both sides closed.
fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    // Each exchange is passed on at once, as without the proxy (Nagle's
    // wait behind a delayed ACK would cost each round trip 40 ms).
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let doomed = Arc::new(AtomicBool::new(false));
    let (mut from_client, mut to_server) = (
        client.try_clone().expect("clone"),
        server.try_clone().expect("clone"),
    );
    let (mut from_server, mut to_client) = (server, client);
    let marked = Arc::clone(&doomed);
    let arming = Arc::clone(&shared);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_client.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let take = |left: usize| left.checked_sub(1);
            let chunk = &buf[..n];
            let statement = has_message(chunk, |t, _| t == b'B')
                && arming
                    .armed
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
                    .is_ok();
            let commit = has_message(chunk, |t, body| t == b'Q' && body.starts_with(b"COMMIT"))
                && arming
                    .armed_commits
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
                    .is_ok();
            if statement || commit {
                marked.store(true, Ordering::SeqCst);
            }
            if to_server.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_server.shutdown(Shutdown::Both);
    });
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_server.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if doomed.load(Ordering::SeqCst) {
                shared.cuts.fetch_add(1, Ordering::SeqCst);
                let _ = to_client.shutdown(Shutdown::Both);
                let _ = from_server.shutdown(Shutdown::Both);
                break;
            }
            if to_client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(Shutdown::Both);
    });
}

/// Whether `chunk`, read from a client after its start-up, holds a message
/// that `is` (its type byte and body): the protocol's messages are a type
/// byte and a length (which counts itself) each.
fn has_message(chunk: &[u8], is: impl Fn(u8, &[u8]) -> bool) -> bool {
    let mut at = 0;
    while at + 5 <= chunk.len() {
        let len = u32::from_be_bytes([chunk[at + 1], chunk[at + 2], chunk[at + 3], chunk[at + 4]]) as usize;
        let end = (at + 1 + len.max(4)).min(chunk.len());
        if is(chunk[at], &chunk[at + 5..end.max(at + 5)]) {
            return true;
        }
        at += 1 + len.max(4);
    }
    false
}
