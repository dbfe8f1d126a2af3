//! The sink (`[sink.http]`): drains the outbox to the upstream in batches,
//! under the gate and the shared pace.

use std::sync::Arc;
use std::time::Duration;

use super::client::{Delivery, HttpClient, UpstreamError};
use super::gate::{Gate, GateError};
use crate::clock::{duration_ms, Millis};
use crate::config::HttpSinkConfig;
use crate::fault::{crash_point, CrashPoint};
use crate::store::Drain;

/// What one drain step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainStep {
    /// A batch of this many results reached the sink.
    Sent(usize),
    /// Nothing waits in the outbox.
    Empty,
    /// Not before `until`, for `why`.
    Wait {
        /// When the next batch may go.
        until: Millis,
        /// What holds it.
        why: WaitReason,
    },
}

/// What holds the sink's next batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// The sink's own shared pace (`max_per_second` across processes).
    Pace,
    /// The upstream asked to slow down (429, or a pace another process met).
    RateLimited,
    /// The sink's account is locked.
    Locked,
    /// The last batch failed (5xx, timeout): tried again shortly.
    SinkFailed,
}

/// The sink (`[sink.http]`): drains the outbox in batches, under the gate and
/// at most `max_per_second` batches per second across every process.
pub struct Sink {
    client: HttpClient,
    url: String,
    account: String,
    batch_size: usize,
    interval: Duration,
    gate: Arc<Gate>,
}

impl Sink {
    /// The sink of `cfg`, calling through `gate` with `client`.
    pub fn new(cfg: &HttpSinkConfig, gate: Arc<Gate>, client: HttpClient) -> Sink {
        Sink {
            client,
            url: cfg.url.clone(),
            account: cfg.account.clone(),
            batch_size: cfg.batch_size,
            interval: Duration::from_secs_f64(1.0 / cfg.max_per_second),
            gate,
        }
    }

    /// Until when the sink's account may not be used, if not now.
    pub fn blocked_until(&self) -> Option<Millis> {
        self.gate.blocked_until(&self.account)
    }

    /// Claim the next batch and send it. A batch's rows are removed only after
    /// a 2xx; anything else puts them back, and the pace holds the next batch.
    pub fn drain_once(&self) -> Result<DrainStep, GateError> {
        let store = self.gate.store();
        // A locked account is waited for here, before any batch is claimed, so
        // the outbox's shared pace only ever holds the sink's own rate.
        if let Some(until) = self.blocked_until() {
            return Ok(DrainStep::Wait {
                until,
                why: WaitReason::Locked,
            });
        }
        let lease = self.client.timeout() * 2 + Duration::from_secs(5);
        let mut batch = match store.outbox().claim(self.batch_size, lease, self.interval)? {
            Drain::Empty => return Ok(DrainStep::Empty),
            Drain::Paced { until } => {
                return Ok(DrainStep::Wait {
                    until,
                    why: WaitReason::Pace,
                })
            }
            Drain::Send(b) => b,
        };
        // The texts move into the request: reporting back needs only the ids.
        let results: Vec<Delivery> = batch
            .items
            .iter_mut()
            .map(|i| Delivery {
                key: std::mem::take(&mut i.key),
                version: std::mem::take(&mut i.version),
                checksum: std::mem::take(&mut i.checksum),
                text: std::mem::take(&mut i.text),
            })
            .collect();
        let account = self.gate.account(&self.account)?;
        let now = store.now();
        let (until, why) = match self
            .gate
            .call(account, |a| self.client.deliver(&self.url, a, &results))
        {
            Ok(()) => {
                crash_point(CrashPoint::AfterDelivery);
                return Ok(DrainStep::Sent(store.outbox().delivered(&batch)?));
            }
            Err(GateError::Locked { until, .. })
            | Err(GateError::Upstream {
                locked_until: Some(until),
                ..
            }) => {
                store.outbox().undelivered(&batch, now)?;
                return Ok(DrainStep::Wait {
                    until,
                    why: WaitReason::Locked,
                });
            }
            Err(GateError::Paced { until, .. }) => (until, WaitReason::RateLimited),
            Err(GateError::Upstream { error, .. }) if matches!(error, UpstreamError::RateLimited { .. }) => {
                let pause = error.retry_after().unwrap_or(self.interval * 2);
                (now + duration_ms(pause), WaitReason::RateLimited)
            }
            Err(GateError::Upstream { .. }) => (now + 1000, WaitReason::SinkFailed),
            Err(e) => {
                store.outbox().undelivered(&batch, now)?;
                return Err(e);
            }
        };
        store.outbox().undelivered(&batch, until)?;
        Ok(DrainStep::Wait { until, why })
    }
}
