//! How far this machine's clock is from the database server's.
//!
//! Leases are judged by each machine's own clock (DESIGN §2): a machine whose
//! clock runs ahead grants leases that the others see as granted after now
//! and take over, once past [`crate::StoreOptions::clock_skew`]. The server's
//! clock is the one reference every machine shares, so `doctor` compares
//! against it.

use std::time::Instant;

use super::PgStore;
use crate::error::Result;

impl PgStore {
    /// The server's clock minus this process's clock (its injected one), in
    /// milliseconds, read at the midpoint of one round trip; with the round
    /// trip's length, the reading's uncertainty.
    pub(crate) fn clock_offset_ms(&self) -> Result<(i64, i64)> {
        self.read(|c| {
            let sent = Instant::now();
            let before = self.now();
            let row = c.query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT",
                &[],
            )?;
            let round_trip = sent.elapsed().as_millis() as i64;
            let server: i64 = row.try_get(0)?;
            Ok((server - (before + round_trip / 2), round_trip))
        })
    }
}
