//! Claim and the fenced writes on PostgreSQL: the rules of `store/write.rs`
//! (DESIGN §2, §3), statement for statement, with the same history lines.
//!
//! Why each is safe at READ COMMITTED:
//! - A claim selects its candidates `FOR UPDATE SKIP LOCKED`, set by set in
//!   the same order as SQLite's, so each candidate is locked by this
//!   transaction and its values are the newest committed ones; rows another
//!   claim holds are skipped, not waited for. The conditional UPDATE that
//!   takes (or buries) a candidate repeats the claimability and exhaustion
//!   guards all the same. The transaction ends before any work starts.
//! - A fenced write is one UPDATE guarded by id + token + `extracting`,
//!   never by the expiry. A concurrent claim that committed first is seen
//!   by the guard's re-check of the newest row version, so a stale owner
//!   changes nothing. A refusal reads the row `FOR UPDATE` to say why.
//! - History: every line for a document is written while this transaction
//!   holds the document's row lock (taken by the UPDATE, or by the refusal's
//!   read), so the `max(seq) + 1` of the next line, read after the lock was
//!   granted, sees every line before it: one row per transition, seq 1, 2, 3…
//!   A claim and an accepted completion write their lines in the statement
//!   that makes the change (one round trip, and outside a group-commit batch
//!   no transaction around it). That statement reads `max(seq)` in the
//!   snapshot it started with, which misses a line another transaction
//!   committed while this one waited for the row's lock (a refused write of
//!   a stale owner). The insert then collides on the key (job, seq), the
//!   statement fails as a whole, and `tx.rs` runs it again: never a gap,
//!   never a line lost.

use ::postgres::{GenericClient, Row, Transaction};

use super::conn::{Conn, Prepared, Tx};
use super::conn::{Fail, Sql};
use super::recover::{fresh_tokens, recover_in_flight, InFlight};
use crate::clock::Millis;
use crate::job::{Claim, Fenced, JobId, Owner, Parked, Status};
use crate::store::completion::Completion;
use crate::store::fencing::{
    self, complete_detail, complete_detail_after, status_of, Candidate, FenceRows, OwnerRow, LEASE_AHEAD,
    LEASE_EXPIRED,
};
use crate::store::options::Policy;
use crate::store::outbox::OutboxCap;

/// The claimability condition every conditional UPDATE repeats: `$now` is
/// now (`$2` unless said), `$ahead` now plus the clock skew allowed (a lease
/// granted later than that was granted after now: the clock went back).
macro_rules! claimable_at {
    ($now:literal, $ahead:literal) => {
        concat!(
            "(status = 'discovered'
     OR (status = 'retrying' AND retry_at <= ",
            $now,
            ")
     OR (status = 'extracting' AND (lease_expires_at <= ",
            $now,
            " OR lease_expires_at - lease_ms > ",
            $ahead,
            ")))"
        )
    };
}
pub(super) use claimable_at;

macro_rules! claimable {
    ($ahead:literal) => {
        claimable_at!("$2", $ahead)
    };
}

/// Whether the row has used up what it may spend (see `store/write.rs`).
macro_rules! exhausted {
    ($max_lost:literal) => {
        concat!(
            "(CASE WHEN status = 'extracting' THEN lost_leases + 1 >= ",
            $max_lost,
            " ELSE attempts >= max_attempts END)"
        )
    };
}
pub(super) use exhausted;

/// The fence: id, token, extracting. Never the expiry.
macro_rules! fence {
    () => {
        "id = $1 AND owner_token = $2 AND status = 'extracting'"
    };
}

/// The next history seq of document `$job`, inside a statement that holds
/// the document's row lock (see the module's docs for the one case where it
/// is not the next, and what then happens).
macro_rules! next_seq {
    ($job:literal) => {
        concat!(
            "(SELECT coalesce(max(x.seq), 0) + 1 FROM history x WHERE x.job_id = ",
            $job,
            ")"
        )
    };
}
pub(super) use next_seq;

/// One claimable set's candidates as a CTE, its columns renamed so that the
/// UPDATE that takes them can name the row's own columns unqualified, and
/// tagged with the set's rank (`c_set`) and the row's place in it
/// (`c_order`, then `c_id`), by which the claim orders them. $1 is now, $2
/// now plus the clock skew allowed (for leases granted after now), $3 the
/// limit.
macro_rules! candidates_of {
    ($name:literal, $set:literal, $where:literal, $also:expr, $order:literal) => {
        concat!(
            $name,
            " AS (SELECT id AS c_id, status AS c_status, owner_token AS c_token, fence AS c_fence,
                     lease_expires_at AS c_expires, lost_leases AS c_lost, ",
            $set,
            " AS c_set, ",
            $order,
            " AS c_order
              FROM jobs WHERE ",
            $where,
            $also,
            " ORDER BY ",
            $order,
            ", id LIMIT $3 FOR UPDATE SKIP LOCKED)"
        )
    };
}
pub(super) use candidates_of;

/// The CTEs of a claim (DESIGN §2), `$also` a further condition on every
/// candidate (empty for [`CLAIM`]): the candidates of the four claimable
/// sets in SQLite's order (older work first: expired leases, leases granted
/// ahead, due retries, discovered; ties by id), each locking what it returns
/// and skipping what another claim holds; `c` the first $3 of them in that
/// order, stated by the SQL (`ORDER BY` the set's rank, the row's place in
/// its set, its id: `UNION ALL` promises no order), numbered by it; `t` the
/// conditional UPDATE that takes them (claimability and exhaustion repeated,
/// fence + 1, a fresh token); `h` their history lines. The sets are CTEs (a
/// locking clause is not allowed inside `UNION`). Every set is read, so when
/// several hold rows, up to $3 of each are locked for the statement's
/// length though only $3 in all are taken (another claim skips them
/// meanwhile): the price of an order that does not rest on how the server
/// reads a union. $4 is the workers, one per row
/// asked for (the candidate in position i is taken for the i-th), $5 the
/// lease's end, $6 its length, $7 the lost leases allowed, `$tokens` the
/// owner tokens, one per row asked for (made by the caller, so that a
/// statement whose answer was lost can be found by them: `recover.rs`). The `claimed`
/// history line's detail is worded as `store/write.rs: claim_detail` words
/// it ($8 and $9 its two ways a lease is over).
macro_rules! claim_ctes {
    ($also:expr, $tokens:literal) => {
        concat!(
            candidates_of!(
                "expired",
                "1",
                "status = 'extracting' AND lease_expires_at <= $1",
                $also,
                "lease_expires_at"
            ),
            ", ",
            candidates_of!(
                "ahead",
                "2",
                "status = 'extracting' AND lease_expires_at - lease_ms > $2",
                $also,
                "lease_expires_at - lease_ms"
            ),
            ", ",
            candidates_of!(
                "due",
                "3",
                "status = 'retrying' AND retry_at <= $1",
                $also,
                "retry_at"
            ),
            ", ",
            candidates_of!(
                "fresh",
                "4",
                "status = 'discovered' AND $1::BIGINT IS NOT NULL",
                $also,
                "id"
            ),
            ",
     c AS (
        SELECT u.*, row_number() OVER (ORDER BY u.c_set, u.c_order, u.c_id) AS c_pos FROM (
            SELECT * FROM expired UNION ALL SELECT * FROM ahead
            UNION ALL SELECT * FROM due UNION ALL SELECT * FROM fresh) u
        ORDER BY u.c_set, u.c_order, u.c_id LIMIT $3
     ),
     t AS (
        UPDATE jobs SET status = 'extracting', owner_token = (",
            $tokens,
            "::TEXT[])[c.c_pos],
                owner_worker = ($4::TEXT[])[c.c_pos],
                fence = fence + 1, lease_expires_at = $5, lease_ms = $6,
                attempts = CASE WHEN status = 'extracting' THEN attempts ELSE attempts + 1 END,
                lost_leases = lost_leases + CASE WHEN status = 'extracting' THEN 1 ELSE 0 END,
                retry_at = NULL, parked_on = NULL, updated_at = $1
        FROM c WHERE id = c.c_id AND ",
            claimable_at!("$1", "$2"),
            " AND NOT ",
            exhausted!("$7"),
            " RETURNING id, doc_key, version, owner_token, owner_worker, fence, attempts, lost_leases
     ),
     h AS (
        INSERT INTO history (job_id, seq, at, event, token, fence, detail)
        SELECT t.id, ",
            next_seq!("t.id"),
            ", $1, 'claimed', t.owner_token, t.fence,
               CASE WHEN c.c_status = 'extracting' AND c.c_token IS NOT NULL
                    THEN 'worker ' || t.owner_worker || '; took over from fence ' || c.c_fence
                         || ' (' || c.c_token || ') '
                         || CASE WHEN c.c_expires <= $1 THEN $8::TEXT ELSE $9::TEXT END
                         || '; attempt ' || t.attempts || ' refunded and kept; lost leases '
                         || t.lost_leases || '/' || $7
                    ELSE 'worker ' || t.owner_worker || '; from ' || c.c_status
                         || '; attempt ' || t.attempts END
        FROM t JOIN c ON c.c_id = t.id
     )"
        )
    };
}
pub(super) use claim_ctes;

/// What a claim answers per candidate, in [`take_some`]'s order: the
/// candidate as it was, and the taken row's new values (NULLs when it was
/// not taken).
macro_rules! claim_columns {
    () => {
        "c.c_id, c.c_status, c.c_token, c.c_fence, c.c_expires, c.c_lost,
            t.doc_key, t.version, t.owner_token, t.fence, t.attempts, t.lost_leases"
    };
}
pub(super) use claim_columns;

/// A claim in one statement ([`claim_ctes`]). Every candidate comes back,
/// with the taken row's new values, or NULLs when it was not taken (it has
/// used up what it may spend: the caller buries it).
const CLAIM: &str = concat!(
    "WITH ",
    claim_ctes!("", "$10"),
    " SELECT ",
    claim_columns!(),
    " FROM c LEFT JOIN t ON t.id = c.c_id ORDER BY c.c_pos"
);

const BURY: &str = concat!(
    "UPDATE jobs SET status = 'dead', owner_token = NULL, owner_worker = NULL,
                lease_expires_at = NULL, retry_at = NULL,
                attempts = CASE WHEN status = 'extracting' THEN GREATEST(attempts - 1, 0) ELSE attempts END,
                lost_leases = lost_leases + CASE WHEN status = 'extracting' THEN 1 ELSE 0 END,
                last_error = CASE WHEN last_error IS NULL THEN $3::TEXT
                                  ELSE $3::TEXT || '; last error: ' || last_error END,
                updated_at = $2
         WHERE id = $1 AND ",
    claimable!("$5"),
    " AND ",
    exhausted!("$4")
);

const RENEW: &str = concat!(
    "UPDATE jobs SET lease_expires_at = $3, lease_ms = $5, updated_at = $4 WHERE ",
    fence!()
);

/// The fenced completion and its `completed` history line in one statement:
/// $6 the fence, $7 the detail after the version (`complete_detail_after`),
/// $8 the result's size in bytes, $9 why its text has no word (NULL: it has),
/// $10–$12 the document's own title, author and date, $13–$14 its page count
/// and language.
/// It also takes the previous version's searchable text out (an accepted
/// result without text has none); a completion with text puts its own in
/// afterwards, in the same transaction (`search::accepted`).
const COMPLETE: &str = concat!(
    "WITH u AS (
        UPDATE jobs SET status = 'indexed', result_path = $3, checksum = $4, result_bytes = $8, no_text = $9, title = $10, author = $11, doc_date = $12,
                pages = $13, language = $14, owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL, retry_at = NULL,
                last_error = NULL, parked_on = NULL, updated_at = $5
         WHERE ",
    fence!(),
    " RETURNING id, version
     ),
     h AS (
        INSERT INTO history (job_id, seq, at, event, token, fence, detail)
        SELECT u.id, ",
    next_seq!("u.id"),
    ", $5, 'completed', $2, $6, 'version ' || u.version || $7 FROM u
     ),
     s AS (DELETE FROM search_text WHERE job_id IN (SELECT id FROM u))
     SELECT version FROM u"
);

const FAIL: &str = concat!(
    "UPDATE jobs SET
            status = CASE WHEN $3 OR attempts >= max_attempts THEN 'dead' ELSE 'retrying' END,
            retry_at = CASE WHEN $3 OR attempts >= max_attempts THEN NULL ELSE $4::BIGINT END,
            last_error = $5, owner_token = NULL, owner_worker = NULL, lease_expires_at = NULL,
            parked_on = NULL, updated_at = $6
         WHERE ",
    fence!(),
    " RETURNING status, retry_at"
);

const RELEASE: &str = concat!(
    "UPDATE jobs SET status = CASE WHEN $4::BIGINT IS NULL THEN 'discovered' ELSE 'retrying' END,
                retry_at = $4::BIGINT,
                last_error = CASE WHEN $4::BIGINT IS NULL THEN last_error ELSE $5::TEXT END,
                parked_on = $6::TEXT, attempts = GREATEST(attempts - 1, 0), owner_token = NULL,
                owner_worker = NULL, lease_expires_at = NULL, updated_at = $3
         WHERE ",
    fence!()
);

/// Most rows one [`CLAIM`] statement asks for; a caller that wants more
/// gets them from the statements that follow in the same transaction.
pub(crate) const CLAIM_ROWS: usize = 1024;

/// Claim documents (DESIGN §2) for several callers (a group-commit batch:
/// each a worker and how many it wants, one document or many) in the
/// caller's transaction, burying on the way the rows that have used up what
/// they may spend: one [`CLAIM`] statement for all the claims, with their
/// history lines (again only while rows were buried and more are wanted).
/// Every row wanted is a slot of [`CLAIM`]'s worker array, and the
/// candidate in that position is the slot's (its `owner_worker` and its
/// history say so). The claims come back per caller, in the callers' order;
/// earlier callers' slots come first, so they get the older work.
pub(crate) fn claim_for(
    tx: &mut Tx<'_>,
    now: Millis,
    policy: &Policy,
    wants: &[(&str, usize)],
) -> Sql<Vec<Vec<Claim>>> {
    let claim = tx.prepared(CLAIM)?;
    let mut rounds = InTransaction {
        tx,
        claim,
        now,
        policy,
    };
    claim_rounds(&mut rounds, wants, Rounds::All)
}

/// One caller's claim outside any transaction: each [`CLAIM`] statement
/// commits on its own (it writes its history lines itself), so a claim that
/// buries nothing costs one round trip. Rows to bury are buried in a
/// transaction of their own before the next statement, which runs only
/// while nothing was claimed: the claims of one call are one statement's,
/// and a failure after them cannot leave them orphaned (fewer than `max`
/// may come back when rows were buried on the way). `in_flight` is kept by
/// the caller across tries: a statement whose answer was lost with its
/// connection is looked for by its tokens before the claim runs again
/// (`recover.rs`), and what it claimed is the answer.
pub(crate) fn claim_alone(
    conn: &mut Conn,
    now: Millis,
    policy: &Policy,
    worker: &str,
    max: usize,
    in_flight: &mut Option<InFlight>,
) -> Sql<Vec<Claim>> {
    if let Some(found) = recover_in_flight(conn, in_flight)? {
        return Ok(found.claims.into_iter().map(|(_, claim)| claim).collect());
    }
    let claim = conn.prepared(CLAIM)?;
    let mut rounds = OnItsOwn {
        conn,
        claim,
        now,
        policy,
        in_flight,
    };
    let mut got = claim_rounds(&mut rounds, &[(worker, max)], Rounds::UntilClaimed)?;
    // Answered, and buried what was to bury: nothing is in flight.
    *rounds.in_flight = None;
    Ok(got.pop().unwrap_or_default())
}

/// How many rounds a claim runs: while rows were buried and more are
/// wanted, or only until one round claimed something.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rounds {
    All,
    UntilClaimed,
}

/// Where the rounds of a claim run.
trait Session {
    /// Run [`CLAIM`] for one row per worker in `workers`.
    fn take(&mut self, workers: &[&str]) -> Sql<Vec<Taken>>;
    /// Bury the candidates that were not taken; whether any was buried.
    fn bury(&mut self, dead: &[Candidate]) -> Sql<bool>;
}

/// Rounds inside the caller's transaction.
struct InTransaction<'a, 't> {
    tx: &'a mut Tx<'t>,
    claim: Prepared,
    now: Millis,
    policy: &'a Policy,
}

impl Session for InTransaction<'_, '_> {
    fn take(&mut self, workers: &[&str]) -> Sql<Vec<Taken>> {
        let tokens = fresh_tokens(workers.len());
        take_some(
            &mut **self.tx,
            &self.claim,
            self.now,
            self.policy,
            workers,
            &tokens,
        )
    }

    fn bury(&mut self, dead: &[Candidate]) -> Sql<bool> {
        let mut any = false;
        for c in dead {
            any |= bury(self.tx, self.now, self.policy, c)?;
        }
        Ok(any)
    }
}

/// Rounds whose statements commit on their own.
struct OnItsOwn<'a> {
    conn: &'a mut Conn,
    claim: Prepared,
    now: Millis,
    policy: &'a Policy,
    /// The last statement sent, until the whole claim has its answer: a
    /// try after a failure on the way (the statement's answer lost, or a
    /// burial after it) looks for what it did first.
    in_flight: &'a mut Option<InFlight>,
}

impl Session for OnItsOwn<'_> {
    fn take(&mut self, workers: &[&str]) -> Sql<Vec<Taken>> {
        let tokens = fresh_tokens(workers.len());
        *self.in_flight = Some(InFlight::sent(&tokens, &[]));
        // Replaced by each round: a round runs only while nothing was
        // claimed, so the one before it left nothing to find.
        take_some(
            &mut **self.conn,
            &self.claim,
            self.now,
            self.policy,
            workers,
            &tokens,
        )
    }

    fn bury(&mut self, dead: &[Candidate]) -> Sql<bool> {
        let mut tx = self.conn.transaction()?;
        let mut any = false;
        for c in dead {
            any |= bury(&mut tx, self.now, self.policy, c)?;
        }
        tx.commit()?;
        Ok(any)
    }
}

/// The rounds of a claim: [`CLAIM`] for the open slots, the rows not taken
/// buried, again while rows were buried and more are wanted.
fn claim_rounds(session: &mut impl Session, wants: &[(&str, usize)], rounds: Rounds) -> Sql<Vec<Vec<Claim>>> {
    let mut got: Vec<Vec<Claim>> = wants.iter().map(|_| Vec::new()).collect();
    loop {
        let slots = open_slots(wants, &got);
        if slots.is_empty() {
            break;
        }
        let workers: Vec<&str> = slots.iter().map(|&i| wants[i].0).collect();
        let mut dead = Vec::new();
        let mut progressed = false;
        for ((c, taken), &i) in session.take(&workers)?.into_iter().zip(&slots) {
            match taken {
                Some(claim) => {
                    guard(status_of(&c.status), Status::Extracting)?;
                    got[i].push(claim);
                    progressed = true;
                }
                None => dead.push(c),
            }
        }
        if !dead.is_empty() {
            progressed |= session.bury(&dead)?;
        }
        let claimed = got.iter().any(|g| !g.is_empty());
        if !progressed || (rounds == Rounds::UntilClaimed && claimed) {
            break;
        }
    }
    Ok(got)
}

/// One slot per row still wanted (the index of the caller that wants it), in
/// the callers' order, at most [`CLAIM_ROWS`].
fn open_slots(wants: &[(&str, usize)], got: &[Vec<Claim>]) -> Vec<usize> {
    wants
        .iter()
        .zip(got)
        .enumerate()
        .flat_map(|(i, ((_, max), have))| std::iter::repeat_n(i, max.saturating_sub(have.len())))
        .take(CLAIM_ROWS)
        .collect()
}

/// A candidate of [`CLAIM`], and the claim when it was taken (`None`: it
/// has used up what it may spend).
pub(super) type Taken = (Candidate, Option<Claim>);

/// Run [`CLAIM`] for up to one row per worker in `workers`: the candidate
/// in position i (the rows come back in the candidates' order) is taken, if
/// it is, for `workers[i]`.
fn take_some(
    db: &mut impl GenericClient,
    claim: &Prepared,
    now: Millis,
    policy: &Policy,
    workers: &[&str],
    tokens: &[String],
) -> Sql<Vec<Taken>> {
    let limit = i64::try_from(workers.len()).unwrap_or(i64::MAX);
    let ahead = now.saturating_add(policy.clock_skew_ms);
    let lease_until = now.saturating_add(policy.lease_ms);
    let rows = claim.query(
        db,
        &[
            &now,
            &ahead,
            &limit,
            &workers,
            &lease_until,
            &policy.lease_ms,
            &policy.max_lost_leases,
            &LEASE_EXPIRED,
            &LEASE_AHEAD,
            &tokens,
        ],
    )?;
    rows.iter().map(|r| taken_of(r, lease_until)).collect()
}

/// One row of [`claim_columns`]: the candidate, and its claim if it was
/// taken (with a lease until `lease_until`).
pub(super) fn taken_of(r: &Row, lease_until: Millis) -> Sql<Taken> {
    let c = Candidate {
        id: r.try_get(0)?,
        status: r.try_get(1)?,
        token: r.try_get(2)?,
        fence: r.try_get(3)?,
        lease_expires_at: r.try_get(4)?,
        lost_leases: r.try_get(5)?,
    };
    let key: Option<String> = r.try_get(6)?;
    let took_over = c.lease_lost();
    let taken = match key {
        None => None,
        Some(key) => Some(Claim {
            id: JobId(c.id),
            key,
            version: r.try_get(7)?,
            token: r.try_get(8)?,
            fence: r.try_get(9)?,
            attempts: r.try_get(10)?,
            lease_expires_at: lease_until,
            took_over,
        }),
    };
    Ok((c, taken))
}

/// [`fencing::bury`] on this transaction.
pub(super) fn bury(tx: &mut Transaction<'_>, now: Millis, policy: &Policy, c: &Candidate) -> Sql<bool> {
    fencing::bury(tx, now, policy, c)
}

/// [`fencing::renew`] on this transaction.
pub(crate) fn renew(tx: &mut Transaction<'_>, now: Millis, policy: &Policy, o: &Owner) -> Sql<Fenced> {
    fencing::renew(tx, now, policy, o)
}

/// Accept `path` and `checksum` as the document's result.
pub(crate) fn complete(tx: &mut Tx<'_>, now: Millis, o: &Owner, c: &Completion<'_>) -> Sql<Fenced> {
    let update = tx.prepared(COMPLETE)?;
    if completed(&mut **tx, &update, now, o, c)? {
        return Ok(Fenced::Accepted);
    }
    settle(tx, now, o, 0, "complete", None)
}

/// [`complete`] outside any transaction: the statement commits on its own
/// with its history line, one round trip; a refusal is settled (read and
/// recorded) in a transaction of its own.
pub(crate) fn complete_alone(conn: &mut Conn, now: Millis, o: &Owner, c: &Completion<'_>) -> Sql<Fenced> {
    let update = conn.prepared(COMPLETE)?;
    if completed(&mut **conn, &update, now, o, c)? {
        return Ok(Fenced::Accepted);
    }
    let mut tx = conn.transaction()?;
    let out = settle(&mut tx, now, o, 0, "complete", None)?;
    tx.commit()?;
    Ok(out)
}

/// Run [`COMPLETE`]: whether the owner's result was accepted (and its
/// history line written).
fn completed(
    db: &mut impl GenericClient,
    update: &Prepared,
    now: Millis,
    o: &Owner,
    c: &Completion<'_>,
) -> Sql<bool> {
    let (path, checksum) = (&*c.result_path, &*c.checksum);
    let after = complete_detail_after(path, checksum, c.note.as_deref());
    let bytes = c.result_bytes.and_then(|b| i64::try_from(b).ok());
    let no_text = c.no_text.as_deref();
    let (title, author, date) = (c.title.as_deref(), c.author.as_deref(), c.date.as_deref());
    let (pages, language) = (pages_column(c.pages), c.language.as_deref());
    let row = update.query_opt(
        db,
        &[
            &o.id.0, &o.token, &path, &checksum, &now, &o.fence, &after, &bytes, &no_text, &title, &author,
            &date, &pages, &language,
        ],
    )?;
    Ok(row.is_some())
}

/// A page count as the `pages` column (BIGINT, as every count here) takes it.
pub(super) fn pages_column(pages: Option<u32>) -> Option<i64> {
    pages.map(i64::from)
}

/// Record a failure: retrying with backoff, or dead.
pub(crate) fn fail(
    tx: &mut Transaction<'_>,
    now: Millis,
    policy: &Policy,
    o: &Owner,
    error: &str,
    permanent: bool,
) -> Sql<Fenced> {
    fencing::fail(tx, now, policy, o, error, permanent)
}

/// Hand back without spending the attempt, parked or not.
pub(crate) fn release(
    tx: &mut Transaction<'_>,
    now: Millis,
    o: &Owner,
    reason: &str,
    parked: Option<&Parked>,
) -> Sql<Fenced> {
    fencing::release(tx, now, o, reason, parked)
}

/// [`fencing::settle`] on this transaction.
pub(super) fn settle(
    tx: &mut Transaction<'_>,
    now: Millis,
    o: &Owner,
    changed: u64,
    what: &str,
    detail: Option<&str>,
) -> Sql<Fenced> {
    fencing::settle(tx, now, o, changed, what, detail)
}

/// [`fencing::guard`] for this engine.
pub(super) fn guard(from: Status, to: Status) -> Sql<()> {
    fencing::guard::<Transaction<'_>>(from, to)
}

impl crate::store::driver::Rows for Transaction<'_> {
    type Error = Fail;
}

impl FenceRows for Transaction<'_> {
    /// Locked: the refusal is recorded against the row as it stands.
    fn owner_row(&mut self, id: i64) -> Sql<Option<OwnerRow>> {
        self.query_opt(
            "SELECT status, owner_token, fence FROM jobs WHERE id = $1 FOR UPDATE",
            &[&id],
        )?
        .map(|r| Ok::<_, Fail>((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .transpose()
    }

    fn record(
        &mut self,
        job_id: i64,
        now: Millis,
        event: &str,
        token: Option<&str>,
        fence: Option<i64>,
        detail: Option<&str>,
    ) -> Sql<()> {
        record(self, job_id, now, event, token, fence, detail)
    }

    /// A lease granted after now plus the skew allowed is over too.
    fn bury_row(&mut self, id: i64, now: Millis, why: &str, policy: &Policy) -> Sql<u64> {
        let ahead = now.saturating_add(policy.clock_skew_ms);
        Ok(self.execute(BURY, &[&id, &now, &why, &policy.max_lost_leases, &ahead])?)
    }

    fn renew_row(&mut self, o: &Owner, until: Millis, now: Millis, lease_ms: i64) -> Sql<u64> {
        Ok(self.execute(RENEW, &[&o.id.0, &o.token, &until, &now, &lease_ms])?)
    }

    fn fail_row(
        &mut self,
        o: &Owner,
        permanent: bool,
        retry_at: Millis,
        error: &str,
        now: Millis,
    ) -> Sql<Option<(String, Option<Millis>)>> {
        self.query_opt(FAIL, &[&o.id.0, &o.token, &permanent, &retry_at, &error, &now])?
            .map(|r| Ok::<_, Fail>((r.try_get(0)?, r.try_get(1)?)))
            .transpose()
    }

    fn release_row(
        &mut self,
        o: &Owner,
        now: Millis,
        until: Option<Millis>,
        reason: &str,
        account: Option<&str>,
    ) -> Sql<u64> {
        Ok(self.execute(RELEASE, &[&o.id.0, &o.token, &now, &until, &reason, &account])?)
    }

    fn refuse(why: String) -> Fail {
        Fail::Refused(why)
    }
}

/// One history line; $1 the document, whose row lock the caller holds.
const RECORD: &str = "INSERT INTO history (job_id, seq, at, event, token, fence, detail)
     VALUES ($1, (SELECT coalesce(max(seq), 0) + 1 FROM history WHERE job_id = $1), $2, $3, $4, $5, $6)";

/// Append one line to the history table. The caller holds the document's
/// row lock (see the module's docs), so the seq read here is the next one.
pub(crate) fn record(
    tx: &mut Transaction<'_>,
    job_id: i64,
    now: Millis,
    event: &str,
    token: Option<&str>,
    fence: Option<i64>,
    detail: Option<&str>,
) -> Sql<()> {
    tx.execute(RECORD, &[&job_id, &now, &event, &token, &fence, &detail])?;
    Ok(())
}

/// [`record`] for many documents: one line each, all of one event.
const RECORD_EACH: &str = "INSERT INTO history (job_id, seq, at, event, token, fence, detail)
     SELECT l.job_id, (SELECT coalesce(max(h.seq), 0) + 1 FROM history h WHERE h.job_id = l.job_id),
            $1, $2, l.token, l.fence, l.detail
     FROM unnest($3::BIGINT[], $4::TEXT[], $5::BIGINT[], $6::TEXT[]) AS l (job_id, token, fence, detail)";

/// The columns of many history lines of one event: job ids (distinct), and
/// for each its token, fence and detail.
type Lines<'a> = (
    &'a [i64],
    &'a [Option<&'a str>],
    &'a [Option<i64>],
    &'a [Option<&'a str>],
);

/// Append one line per document to the history table, all of one `event`, in
/// one INSERT. The caller holds every document's row lock and the ids are
/// distinct, so each line's seq is its document's next one (see [`record`]).
fn record_each(
    tx: &mut Tx<'_>,
    now: Millis,
    event: &str,
    (ids, tokens, fences, details): Lines<'_>,
) -> Sql<()> {
    let insert = tx.prepared(RECORD_EACH)?;
    insert.execute(&mut **tx, &[&now, &event, &ids, &tokens, &fences, &details])?;
    Ok(())
}

/// [`COMPLETE`] for many claims of distinct documents in one statement.
const COMPLETE_EACH: &str = "UPDATE jobs SET status = 'indexed', result_path = d.path, checksum = d.sum,
            result_bytes = d.bytes, no_text = d.no_text, title = d.title, author = d.author, doc_date = d.date,
            pages = d.pages, language = d.language, owner_token = NULL, owner_worker = NULL,
            lease_expires_at = NULL, retry_at = NULL, last_error = NULL, parked_on = NULL, updated_at = $1
     FROM unnest($2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::BIGINT[], $7::TEXT[], $8::TEXT[],
                 $9::TEXT[], $10::TEXT[], $11::BIGINT[], $12::TEXT[])
          AS d (id, token, path, sum, bytes, no_text, title, author, date, pages, language)
     WHERE jobs.id = d.id AND jobs.owner_token = d.token AND jobs.status = 'extracting'
     RETURNING jobs.id, jobs.version";

/// Complete many claims in the caller's transaction, each fenced on its own
/// token, with what the sink is given queued for the accepted ones: the same
/// rows, history and outbox rows as one [`complete`] after another, in one
/// UPDATE and one history INSERT (refusals are settled one by one, as after
/// [`complete`]). Claims of one document twice go one at a time.
pub(crate) fn complete_each(
    tx: &mut Tx<'_>,
    now: Millis,
    cap: &OutboxCap,
    done: &[(Owner, Completion<'_>)],
) -> Sql<Vec<Fenced>> {
    let mut ids: Vec<i64> = done.iter().map(|(o, _)| o.id.0).collect();
    ids.sort_unstable();
    ids.dedup();
    if done.len() < 2 || ids.len() < done.len() {
        return done
            .iter()
            .map(|(o, c)| complete_and_push(tx, now, cap, o, c))
            .collect();
    }
    let ids: Vec<i64> = done.iter().map(|(o, _)| o.id.0).collect();
    let tokens: Vec<&str> = done.iter().map(|(o, _)| o.token.as_str()).collect();
    let paths: Vec<&str> = done.iter().map(|(_, c)| &*c.result_path).collect();
    let sums: Vec<&str> = done.iter().map(|(_, c)| &*c.checksum).collect();
    let sizes: Vec<Option<i64>> = done
        .iter()
        .map(|(_, c)| c.result_bytes.and_then(|b| i64::try_from(b).ok()))
        .collect();
    let no_text: Vec<Option<&str>> = done.iter().map(|(_, c)| c.no_text.as_deref()).collect();
    let titles: Vec<Option<&str>> = done.iter().map(|(_, c)| c.title.as_deref()).collect();
    let authors: Vec<Option<&str>> = done.iter().map(|(_, c)| c.author.as_deref()).collect();
    let dates: Vec<Option<&str>> = done.iter().map(|(_, c)| c.date.as_deref()).collect();
    let pages: Vec<Option<i64>> = done.iter().map(|(_, c)| pages_column(c.pages)).collect();
    let languages: Vec<Option<&str>> = done.iter().map(|(_, c)| c.language.as_deref()).collect();
    let rows = tx.query(
        COMPLETE_EACH,
        &[
            &now, &ids, &tokens, &paths, &sums, &sizes, &no_text, &titles, &authors, &dates, &pages,
            &languages,
        ],
    )?;
    let mut versions: Vec<Option<String>> = vec![None; done.len()];
    for r in &rows {
        let id: i64 = r.try_get(0)?;
        if let Some(i) = ids.iter().position(|&x| x == id) {
            versions[i] = Some(r.try_get(1)?);
        }
    }
    let accepted: Vec<usize> = (0..done.len()).filter(|&i| versions[i].is_some()).collect();
    let details: Vec<String> = accepted
        .iter()
        .map(|&i| {
            let c = &done[i].1;
            complete_detail(
                versions[i].as_deref().unwrap_or_default(),
                &c.result_path,
                &c.checksum,
                c.note.as_deref(),
            )
        })
        .collect();
    let line_ids: Vec<i64> = accepted.iter().map(|&i| ids[i]).collect();
    let line_tokens: Vec<Option<&str>> = accepted.iter().map(|&i| Some(tokens[i])).collect();
    let line_fences: Vec<Option<i64>> = accepted.iter().map(|&i| Some(done[i].0.fence)).collect();
    let line_details: Vec<Option<&str>> = details.iter().map(|d| Some(d.as_str())).collect();
    if !accepted.is_empty() {
        record_each(
            tx,
            now,
            "completed",
            (&line_ids, &line_tokens, &line_fences, &line_details),
        )?;
    }
    done.iter()
        .zip(&versions)
        .map(|((o, c), v)| {
            if v.is_none() {
                return settle(tx, now, o, 0, "complete", None);
            }
            if let Some(text) = &c.deliver {
                crate::store::outbox::push(tx, now, cap, o.id.0, &c.checksum, text)?;
            }
            crate::store::postgres::search_index::accepted(tx, o.id.0, c)?;
            Ok(Fenced::Accepted)
        })
        .collect()
}

/// The fenced completion, and, when it is accepted and carries text for the
/// sink, its outbox row, in the caller's transaction: an accepted result is
/// queued exactly once, a refused one never.
pub(crate) fn complete_and_push(
    tx: &mut Tx<'_>,
    now: Millis,
    cap: &OutboxCap,
    o: &Owner,
    c: &Completion<'_>,
) -> Sql<Fenced> {
    let out = complete(tx, now, o, c)?;
    if let (Fenced::Accepted, Some(text)) = (&out, &c.deliver) {
        crate::store::outbox::push(tx, now, cap, o.id.0, &c.checksum, text)?;
    }
    // `COMPLETE` took the old text out of the index; only new text is left.
    if out.is_accepted() && c.index.is_some() {
        crate::store::postgres::search_index::accepted(tx, o.id.0, c)?;
    }
    Ok(out)
}
