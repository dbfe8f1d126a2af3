//! How `serve` was asked to run.

use std::net::IpAddr;

/// How `serve` was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The address to listen on (loopback unless given).
    pub listen: Option<IpAddr>,
    /// The port (0: any free one).
    pub port: u16,
    /// Open the page in the system's browser once listening.
    pub open: bool,
    /// Let the status page queue a failed document again (the one write).
    pub allow_retry: bool,
    /// Requests answered at once.
    pub handlers: usize,
    /// How long a request's head may take to arrive (and a connection idle).
    pub head_timeout: std::time::Duration,
}
