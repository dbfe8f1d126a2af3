//! The HTTP source (`[source.http]`): lists documents and fetches their bytes
//! through the auth gate, so a locked credential defers work instead of failing it.

use std::sync::Arc;
use std::time::Duration;

use super::gate::PROBE_RECHECK_MS;
use super::{Gate, GateError, HttpClient, UpstreamError};
use crate::clock::{duration_ms, Millis};
use crate::config::HttpSourceConfig;
use crate::source::{Source, SourceError};
use crate::store::NewDoc;

/// Documents from an HTTP API (`[source.http]`). Keys are the upstream ids.
pub struct HttpSource {
    client: HttpClient,
    base_url: String,
    pool: Vec<String>,
    gate: Arc<Gate>,
}

impl HttpSource {
    /// The source of `cfg`, calling through `gate` with `client`.
    pub fn new(cfg: &HttpSourceConfig, gate: Arc<Gate>, client: HttpClient) -> HttpSource {
        HttpSource {
            client,
            base_url: cfg.base_url.clone(),
            pool: cfg.accounts.clone(),
            gate,
        }
    }

    /// List every page and enqueue each id/version (a new version re-queues the
    /// document). Waits out locks unless `wait` is false. Returns how many
    /// documents the listing held and how many were new or changed.
    pub fn discover(
        &self,
        wait: bool,
        on_wait: &mut dyn FnMut(&GateError),
    ) -> Result<(usize, usize), GateError> {
        let (mut listed, mut queued) = (0, 0);
        let mut cursor: Option<String> = None;
        loop {
            let account = self.gate.hold(&self.pool)?;
            let page = self.gate.call_waiting(account, wait, on_wait, |a| {
                self.client.list(&self.base_url, a, cursor.as_deref())
            })?;
            let docs: Vec<NewDoc> = page
                .documents
                .iter()
                .map(|d| NewDoc::new(&d.id, &d.version))
                .collect();
            listed += docs.len();
            let out = self.gate.store().enqueue_many(&docs)?;
            queued += out.iter().filter(|e| e.queued()).count();
            match page.next_cursor {
                Some(next) if !docs.is_empty() || Some(&next) != cursor.as_ref() => cursor = Some(next),
                _ => return Ok((listed, queued)),
            }
        }
    }
}

impl Source for HttpSource {
    fn ready_at(&self) -> Option<Millis> {
        // The account this process last held: no hold renewal (a write) per claim.
        let account = self.gate.last_held(&self.pool)?;
        self.gate.blocked_until(&account)
    }

    fn fetch(&self, key: &str, max_bytes: u64) -> Result<Vec<u8>, SourceError> {
        let upstream = |detail: String, transient: bool| SourceError::Upstream {
            key: key.to_owned(),
            detail,
            transient,
        };
        let account = self
            .gate
            .hold(&self.pool)
            .map_err(|e| upstream(e.to_string(), true))?;
        let now = self.gate.store().now();
        match self.gate.call(account, |a| {
            self.client.content(&self.base_url, a, key, max_bytes)
        }) {
            Ok(bytes) => Ok(bytes),
            // Another process is probing: look again soon rather than at the
            // end of its slot, since a successful probe opens the account at once.
            Err(
                e @ GateError::Locked {
                    probing: true, until, ..
                },
            ) => Err(SourceError::Deferred {
                key: key.to_owned(),
                reason: e.to_string(),
                until: until.min(now + PROBE_RECHECK_MS),
                account: Some(account.name.clone()),
            }),
            Err(e @ GateError::Paced { until, .. }) => Err(SourceError::Deferred {
                key: key.to_owned(),
                reason: e.to_string(),
                until,
                account: None,
            }),
            Err(e @ GateError::Locked { until, .. })
            | Err(
                e @ GateError::Upstream {
                    locked_until: Some(until),
                    ..
                },
            ) => Err(SourceError::Deferred {
                key: key.to_owned(),
                reason: e.to_string(),
                until,
                account: Some(account.name.clone()),
            }),
            Err(GateError::Upstream {
                error: UpstreamError::TooLarge { size, limit },
                ..
            }) => Err(SourceError::TooLarge {
                key: key.to_owned(),
                size,
                limit,
            }),
            Err(GateError::Upstream {
                error: e @ UpstreamError::RateLimited { .. },
                ..
            }) => Err(SourceError::Deferred {
                key: key.to_owned(),
                until: now + duration_ms(e.retry_after().unwrap_or(Duration::from_secs(1))),
                reason: e.to_string(),
                account: None,
            }),
            Err(GateError::Upstream { error, .. }) => {
                let transient = error.is_transient() || matches!(error, UpstreamError::Protocol { .. });
                Err(upstream(error.to_string(), transient))
            }
            Err(e) => Err(upstream(e.to_string(), true)),
        }
    }
}
