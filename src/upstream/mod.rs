//! The upstream API and the credential it is called with (DESIGN §6).
//!
//! # Layout
//! - `client.rs`: the synchronous HTTP client and how every answer is classified.
//! - `gate.rs`: the auth gate at run time: every request goes through [`Gate::call`].
//! - `source.rs`: the HTTP source, listing and fetching documents through the gate.
//! - `sink.rs`: the sink, draining the outbox in paced batches through the gate.
//! - `courier.rs`: the background component that sends notices and drains the outbox.
//! - `notify.rs`: where notices go (a command, a webhook, a log line).
//!
//! The rules themselves (locks, epochs, probes, notices, the outbox cap) live
//! next to their SQL in the store; this room decides what an HTTP answer means
//! for them and what a caller does while it waits.

mod client;
mod courier;
mod gate;
mod notify;
mod sink;
mod source;

pub use client::{
    document_url, Account, BadRecord, Delivery, DocumentRef, HttpClient, Page, SkippedRecord, UpstreamError,
    MAX_ID_BYTES,
};
pub use courier::{Courier, CourierHandle, Delivered};
pub use gate::{Gate, GateError};
pub use notify::{Notice, Notifier, NotifyError};
pub use sink::{DrainStep, Sink, WaitReason};
pub use source::{HttpSource, ListingReport};

#[doc(hidden)]
pub use client::one_line;
#[doc(hidden)]
pub use courier::nap_until;
