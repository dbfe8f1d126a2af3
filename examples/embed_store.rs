//! Embedding the store with your own worker loop.
//!
//! The queue alone: enqueue documents, claim them under a lease, do the work
//! yourself, and complete them. The store fences every write on the claim's
//! owner token, so a worker that lost its lease (here: one that was paused past
//! it) cannot overwrite the result of the worker that took over.
//!
//! Run with `cargo run --example embed_store`.

use std::sync::Arc;
use std::time::Duration;

use leasehold::{Fenced, ManualClock, NewDoc, Store, StoreOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // A manual clock makes the lease expiry below happen on cue; a real program
    // leaves the default system clock in place.
    let clock = ManualClock::new(0);
    let opts = StoreOptions::default()
        .lease(Duration::from_secs(30))
        .clock(Arc::new(clock.clone()));
    let store = Store::open(dir.path().join("queue.db"), opts)?;

    for key in ["reports/q1.txt", "reports/q2.txt", "reports/q3.txt"] {
        store.enqueue(&NewDoc::new(key, "v1"))?;
    }

    // A worker that claims a document and then stalls past its lease.
    let slow = store.claim("slow-worker")?.expect("three documents are queued");
    clock.advance(Duration::from_secs(31));

    // Your own loop: claim, work, renew between long steps, complete.
    while let Some(claim) = store.claim("my-worker")? {
        let text = claim.key.to_uppercase(); // the "extraction"
                                             // Between long steps, keep the lease (the pool's lease keeper does this
                                             // on a timer); a refused renewal means someone else owns it now.
        if let Fenced::Rejected(why) = store.renew(&claim.owner())? {
            println!("{}: lease lost ({why}), dropping the work", claim.key);
            continue;
        }
        let key = claim.key.clone();
        match store.complete(
            claim,
            leasehold::Completion::new(&format!("results/{key}"), &format!("{:x}", text.len())),
        )? {
            Fenced::Accepted => println!("{key}: accepted"),
            Fenced::Rejected(why) => println!("{key}: refused, {why}"),
        }
    }

    // The slow worker wakes up and tries to complete: refused, and recorded.
    let slow_key = slow.key.clone();
    let slow_id = slow.id;
    let answer = store.complete(slow, leasehold::Completion::new("results/late.txt", "0"))?;
    println!("{slow_key}: the late worker's completion: {answer:?}");
    assert!(!answer.is_accepted(), "a late write is never accepted");
    for h in store.history(slow_id)? {
        println!(
            "  {:>6} ms {:<18} {}",
            h.at,
            h.event,
            h.detail.unwrap_or_default()
        );
    }
    println!("counts: {:?}", store.counts()?);
    Ok(())
}
