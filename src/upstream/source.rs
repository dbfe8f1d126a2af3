//! The HTTP source (`[source.http]`): lists documents and fetches their bytes
//! through the auth gate, so a locked credential defers work instead of failing it.
//!
//! A listing is a scan, like a directory walk (src/source/dir.rs): it stamps
//! every document it lists, and only a complete listing (every page read
//! without error) marks the documents it did not list as gone. A bad record
//! is skipped and counted, never the end of the listing; the figures of the
//! last listing are kept in the `meta` table ([`ListingReport`]) for `status`.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use super::client::{HttpClient, UpstreamError};
use super::gate::PROBE_RECHECK_MS;
use super::gate::{Gate, GateError};
use crate::clock::{duration_ms, Millis};
use crate::config::HttpSourceConfig;
use crate::source::{Source, SourceError};
use crate::store::{NewDoc, Store};

/// The `meta` row holding the last listing's [`ListingReport`], as JSON.
const LISTING_META: &str = "http_listing";

/// What the last listing did; `status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListingReport {
    /// When it ended (ms from the injected clock).
    pub at: Millis,
    /// Every page was read without error (so unlisted documents were marked gone).
    pub complete: bool,
    /// Usable documents listed.
    pub listed: usize,
    /// Of those, how many were new or changed (queued).
    pub queued: usize,
    /// Records skipped as unusable.
    pub skipped: usize,
    /// Why the last skipped record was skipped (redacted, never the bad value).
    pub last_skip: Option<String>,
    /// Documents marked gone because a complete listing no longer held them.
    pub gone: usize,
}

impl ListingReport {
    /// The last listing's figures, if this data directory was ever listed
    /// (and the row is readable).
    pub fn load(store: &Store) -> crate::Result<Option<ListingReport>> {
        Ok(store
            .meta(LISTING_META)?
            .and_then(|json| serde_json::from_str(&json).ok()))
    }

    fn save(&self, store: &Store) -> crate::Result<()> {
        let json = serde_json::to_string(self).unwrap_or_default();
        store.set_meta(LISTING_META, &json)
    }
}

fn cursor_hash(cursor: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cursor.hash(&mut h);
    h.finish()
}

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
    /// document); skip and count bad records; after a complete listing, mark
    /// the documents it no longer holds gone. Waits out locks unless `wait` is
    /// false. The figures are saved for `status` whether or not the listing
    /// completed; on error the listing so far stays enqueued and nothing is
    /// marked gone.
    pub fn discover(
        &self,
        wait: bool,
        on_wait: &mut dyn FnMut(&GateError),
    ) -> Result<ListingReport, GateError> {
        let store = self.gate.store();
        let scan = store.begin_scan()?;
        let mut report = ListingReport::default();
        let listed = self.list_pages(scan, wait, on_wait, &mut report);
        if listed.is_ok() {
            report.gone = store.finish_listing(scan)?;
            report.complete = true;
        }
        report.at = store.now();
        let saved = report.save(store);
        listed?;
        saved?;
        Ok(report)
    }

    /// Every page, each recorded in one write as part of scan `scan`.
    fn list_pages(
        &self,
        scan: i64,
        wait: bool,
        on_wait: &mut dyn FnMut(&GateError),
        report: &mut ListingReport,
    ) -> Result<(), GateError> {
        let mut cursor: Option<String> = None;
        // Hashes of the cursors followed: a listing that comes back to one
        // would go round for ever. Eight bytes a page.
        let mut followed: HashSet<u64> = HashSet::new();
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
            // A record whose id is fine but another field is not still lists
            // its document: it must not be taken for gone.
            let still_listed: Vec<String> = page.skipped.iter().filter_map(|s| s.listed_id.clone()).collect();
            let out = self.gate.store().record_scan(scan, &still_listed, &docs)?;
            report.listed += docs.len();
            report.queued += out.iter().filter(|e| e.queued()).count();
            report.skipped += page.skipped.len();
            if let Some(last) = page.skipped.last() {
                report.last_skip = Some(last.to_string());
            }
            let next = match page.next_cursor {
                // An empty page that repeats its own cursor ends the listing.
                Some(next) if page.records() > 0 || Some(&next) != cursor.as_ref() => next,
                _ => return Ok(()),
            };
            if !followed.insert(cursor_hash(&next)) {
                return Err(GateError::Upstream {
                    account: account.name.clone(),
                    error: UpstreamError::Protocol {
                        detail: "the listing came back to a cursor it had already given; stopped".into(),
                    },
                    locked_until: None,
                });
            }
            cursor = Some(next);
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
