//! Mirror cleanup fenced by the database (issue 14, DESIGN §12): on the
//! PostgreSQL edition the machines share one mirror root, whose file system
//! may not lock (a network mount), so a document's cleanup decides and
//! deletes while holding the document's row lock instead of an fs2 lock.
//!
//! While the row is locked no claim can take it (claims skip locked rows),
//! no completion can accept another path (the fenced UPDATE waits), so the
//! accepted path and the current owner's fence the cleanup keeps cannot
//! change under it. A transaction that holds the lock longer than
//! [`ROW_LOCK_WAIT`] (a stopped process) makes the cleanup give up, like a
//! busy fs2 lock: nothing waits forever.

use std::time::Instant;

use ::postgres::error::SqlState;

use super::conn::Fail;
use super::read::job_by_id_locked;
use super::{PgStore, CLEANUP_DEADLINE, ROW_LOCK_WAIT};
use crate::error::Result;
use crate::job::Job;
use crate::store::fencing::RowLock;

impl PgStore {
    /// Lock document `id`'s row (`SELECT … FOR UPDATE`, waiting at most
    /// [`ROW_LOCK_WAIT`]), run `f` on it while the lock is held, then end the
    /// transaction. `f` writes nothing to the database; it deletes files, and
    /// only before the instant it is given ([`CLEANUP_DEADLINE`] after the
    /// lock was granted), while the lock is surely still held.
    pub(crate) fn with_job_locked<T>(
        &self,
        id: i64,
        f: impl FnOnce(Option<Job>, Instant) -> T,
    ) -> Result<RowLock<T>> {
        let mut client = self.connection()?;
        let locked = (|| -> std::result::Result<RowLock<T>, Fail> {
            let mut tx = client.transaction()?;
            let wait = format!("SET LOCAL lock_timeout = '{}ms'", ROW_LOCK_WAIT.as_millis());
            tx.batch_execute(&wait)?;
            let job = match job_by_id_locked(&mut tx, id) {
                Err(Fail::Pg(e)) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                    return Ok(RowLock::Busy);
                }
                other => other?,
            };
            let answer = f(job, Instant::now() + CLEANUP_DEADLINE);
            tx.commit()?;
            Ok(RowLock::Held(answer))
        })();
        locked.map_err(|e| self.error(e))
    }
}
