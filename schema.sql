-- leasehold schema: the one source of truth (DESIGN §2).
--
-- src/store/open.rs applies each "-- version: N" section once, in order, each in
-- its own BEGIN IMMEDIATE transaction that ends with PRAGMA user_version = N.
-- Never edit a released section: add a new one.

-- version: 1

-- One row per document. Times are integer milliseconds from the injected clock.
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY,
    doc_key          TEXT    NOT NULL UNIQUE,
    -- the source version (e.g. size+mtime+hash); a new version re-queues the row
    version          TEXT    NOT NULL DEFAULT '',
    -- cheap fingerprint of the source (e.g. size:mtime); when it is unchanged a
    -- re-scan does not read the file to confirm the version
    source_stat      TEXT    NOT NULL DEFAULT '',
    status           TEXT    NOT NULL DEFAULT 'discovered'
        CHECK (status IN ('discovered', 'extracting', 'indexed', 'retrying', 'dead')),
    -- UUID of the current claim; fenced writes match on it
    owner_token      TEXT,
    -- who holds the claim (for status/inspect); never used to fence
    owner_worker     TEXT,
    -- +1 on every claim, never reused; names the mirror generation
    fence            INTEGER NOT NULL DEFAULT 0 CHECK (fence >= 0),
    lease_expires_at INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    retry_at         INTEGER,
    last_error       TEXT,
    -- the accepted result: a path relative to the mirror root, and its SHA-256
    result_path      TEXT,
    checksum         TEXT,
    -- the source file disappeared; gc removes the mirror files, the row stays
    source_gone      INTEGER NOT NULL DEFAULT 0 CHECK (source_gone IN (0, 1)),
    -- the last directory scan that saw the source; rows a finished scan did not
    -- see are marked gone (keeps discovery's memory flat whatever the tree holds)
    seen_scan        INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    -- an extracting row always has an owner and a lease; no other row has either
    CHECK ((status = 'extracting') = (owner_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CHECK (status <> 'retrying' OR retry_at IS NOT NULL),
    CHECK (status <> 'indexed' OR (result_path IS NOT NULL AND checksum IS NOT NULL))
);

-- One partial index per claimable state, so that each claim query is an index
-- seek that never steps over rows of another state (a single index over both
-- 'discovered' and 'extracting' would walk every live lease first). Queries must
-- repeat the WHERE term for SQLite to use them.
CREATE INDEX jobs_discovered ON jobs (id) WHERE status = 'discovered';
CREATE INDEX jobs_retry_due ON jobs (retry_at) WHERE status = 'retrying';
CREATE INDEX jobs_lease_expiry ON jobs (lease_expires_at) WHERE status = 'extracting';

-- Append-only: every transition and every refused fenced write. Clustered on
-- (job_id, seq) so that a document's history is one range of one b-tree and an
-- insert writes that b-tree only (a rowid table plus an index on job_id wrote
-- two, about a fifth of a claim+complete pair's cost).
CREATE TABLE history (
    job_id  INTEGER NOT NULL REFERENCES jobs (id),
    -- 1, 2, 3... within the document
    seq     INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    -- claimed, completed, failed, released, dead, enqueued, requeued, ..., *_rejected
    event   TEXT    NOT NULL,
    -- the caller's token and fence (for a rejection: the refused ones)
    token   TEXT,
    fence   INTEGER,
    detail  TEXT,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;

-- Settings of this data directory, e.g. the source root its keys are relative to.
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- version: 2

-- The shared credential (DESIGN §6): one row per account, checked by every
-- process before it uses the account.
CREATE TABLE accounts (
    name            TEXT    PRIMARY KEY,
    state           TEXT    NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'locked')),
    -- +1 at every new incident (open -> locked); a probe permit carries it
    epoch           INTEGER NOT NULL DEFAULT 0,
    locked_until    INTEGER,
    -- when the current incident began
    locked_at       INTEGER,
    -- the probe slot: set-if-absent, with its own expiry
    probe_token     TEXT,
    probe_until     INTEGER,
    -- probes made in the current incident (a transient answer does not count)
    probes          INTEGER NOT NULL DEFAULT 0,
    -- what the upstream said last; never a secret
    last_error      TEXT,
    -- a 429 asked everyone to hold off until then (a pace, never a lock)
    paced_until     INTEGER,
    -- the last lock notice; cleared by a recovery so the next lock is told
    lock_notice_at  INTEGER,
    -- the day (days since 1970-01-01) of the last expiry warning
    expiry_warned   INTEGER,
    -- outbox drops counted when the incident began, for the recovery notice
    dropped_at_lock INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL,
    CHECK ((state = 'locked') = (locked_until IS NOT NULL))
);

-- Which process uses which account of a pool: a lease per holder, renewed on use.
CREATE TABLE account_holders (
    holder     TEXT    PRIMARY KEY,
    account    TEXT    NOT NULL REFERENCES accounts (name),
    expires_at INTEGER NOT NULL
);

-- Append-only history of the gate: locks, probes, recoveries, manual unlocks.
CREATE TABLE auth_history (
    id      INTEGER PRIMARY KEY,
    account TEXT    NOT NULL,
    at      INTEGER NOT NULL,
    event   TEXT    NOT NULL,
    epoch   INTEGER NOT NULL,
    detail  TEXT
);

-- Notices, written in the transaction of the change they announce and sent by
-- whichever process gets there first (a short sending lease), until sent.
CREATE TABLE notices (
    id            INTEGER PRIMARY KEY,
    account       TEXT    NOT NULL,
    kind          TEXT    NOT NULL,
    message       TEXT    NOT NULL,
    -- JSON object with the figures of the notice
    details       TEXT    NOT NULL DEFAULT '{}',
    created_at    INTEGER NOT NULL,
    sent_at       INTEGER,
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_try_at   INTEGER NOT NULL,
    sender        TEXT,
    sending_until INTEGER,
    last_error    TEXT
);
CREATE INDEX notices_unsent ON notices (next_try_at) WHERE sent_at IS NULL;

-- Accepted results waiting for the sink. A row is written in the transaction
-- that accepts the result, and removed only after its batch got a 2xx.
CREATE TABLE outbox (
    id            INTEGER PRIMARY KEY,
    job_id        INTEGER NOT NULL,
    doc_key       TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    checksum      TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    bytes         INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    -- a drain in flight: who sends it and until when
    sender        TEXT,
    sending_until INTEGER
);

-- Running totals of the outbox (one row), so the cap is checked without a scan,
-- and the shared pace of the sink (the earliest time the next batch may go).
CREATE TABLE outbox_totals (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    rows          INTEGER NOT NULL DEFAULT 0,
    bytes         INTEGER NOT NULL DEFAULT 0,
    dropped       INTEGER NOT NULL DEFAULT 0,
    dropped_bytes INTEGER NOT NULL DEFAULT 0,
    delivered     INTEGER NOT NULL DEFAULT 0,
    next_send_at  INTEGER NOT NULL DEFAULT 0
);
INSERT INTO outbox_totals (id) VALUES (1);

-- version: 3

-- What a document handed back without spending an attempt waits for, besides
-- its retry_at: the name of a locked account. The account's recovery wakes
-- exactly the rows parked on it (a coincidence of timestamps never decides).
ALTER TABLE jobs ADD COLUMN parked_on TEXT;
CREATE INDEX jobs_parked_on ON jobs (parked_on) WHERE parked_on IS NOT NULL;

-- version: 4

-- The lease length (ms) of the latest claim or renewal of the row. Processes
-- may run with different leases, so the row says which one its expiry was
-- counted from: a lease whose expiry lies further ahead than now plus its
-- length was granted "in the future" (the clock went back) and counts as
-- expired. NULL for leases granted before this version (they expire as before).
ALTER TABLE jobs ADD COLUMN lease_ms INTEGER CHECK (lease_ms IS NULL OR lease_ms > 0);
-- Claims of the current version whose lease expired and was taken over: the
-- worker died or stalled. A takeover refunds the lost claim's attempt and counts
-- here instead, so that crashed workers do not make a healthy document dead;
-- a document that keeps losing its worker dies at a separate, larger cap.
ALTER TABLE jobs ADD COLUMN lost_leases INTEGER NOT NULL DEFAULT 0 CHECK (lost_leases >= 0);
-- When the lease of an extracting row was granted (expiry minus length): an
-- index seek finds leases granted after now (the clock went back) without
-- walking the live ones. Queries must repeat the expression and the WHERE term.
CREATE INDEX jobs_lease_granted ON jobs (lease_expires_at - lease_ms) WHERE status = 'extracting';

-- version: 5

-- The search index (DESIGN §12): the accepted text of every document that has
-- one (`jobs.result_path` set), one row per document, rowid = jobs.id. It is
-- written in the transaction of the fenced completion that accepts the text,
-- replaced by the next accepted version, and deleted with the result when the
-- source goes away; `leasehold reindex` rebuilds it from the mirror. `path`
-- and `checksum` are the accepted result the text came from, so `doctor` can
-- tell a stale row from a current one. The tokenizer is the data directory's
-- choice, recorded in `meta` (search_tokenizer); this section makes the
-- default; a store created with another choice remakes the empty table
-- with it (src/store/search/sqlite.rs), as `reindex --tokenizer` does later.
-- `prefix`: indexes of each term's first 2 and 3 characters, so that a short
-- prefix query (`ka*`, and `계정*` for a Korean noun) reads one list instead
-- of merging every term it begins.
CREATE VIRTUAL TABLE search_text USING fts5 (
    body, path UNINDEXED, checksum UNINDEXED,
    prefix = '2 3', tokenize = 'unicode61 remove_diacritics 2'
);
-- A deleted or replaced text leaves no terms behind in the index's pages (as
-- `secure_delete` does for rows): a gone document's words are not readable
-- from the file until a merge happens to drop them.
INSERT INTO search_text (search_text, rank) VALUES ('secure-delete', 1);

-- version: 6

-- The further parts of long texts in the search index (DESIGN §14). A text is
-- indexed in parts of at most 1 MiB, so that neither FTS5's memory for one
-- row nor any one write transaction grows with the document: the first part
-- is the row at rowid = jobs.id, written by the completion as before; the
-- others are rows at rowids from 2^48 up, each listed here. A worker writes
-- them before its completion, in short transactions of their own, `staged`:
-- search skips them until the transaction that accepts the result makes them
-- `live`. The parts of a replaced, refused or removed text are `retired` in
-- that transaction and deleted from the index later, a few at a time.
-- `tag` names the version the parts belong to: the claim's token (a worker)
-- or the result's checksum (`reindex`).
CREATE TABLE search_parts (
    rowid INTEGER PRIMARY KEY CHECK (rowid >= 281474976710656),
    doc   INTEGER NOT NULL,
    tag   TEXT    NOT NULL,
    state TEXT    NOT NULL CHECK (state IN ('staged', 'live', 'retired'))
);
CREATE INDEX search_parts_doc ON search_parts (doc, state);
-- What is left to delete: found without walking the live parts.
CREATE INDEX search_parts_gone ON search_parts (state) WHERE state <> 'live';

-- version: 7

-- The accepted result's size in bytes, recorded with it by the fenced
-- completion: a rerun finds a result file that was truncated or added to with
-- one stat, without reading it (a full check of the checksum is `doctor`'s).
-- NULL for results accepted before this version, or through a completion that
-- did not give it; their files are then checked for existence only.
ALTER TABLE jobs ADD COLUMN result_bytes INTEGER CHECK (result_bytes IS NULL OR result_bytes >= 0);

-- version: 8

-- A directory scan reads the documents in the byte order of their keys
-- beside a walk in the same order (src/source/dir.rs). `doc_key`'s unique
-- index compares with the BINARY collation, which is that order; PostgreSQL
-- needs an index of its own (schema.pg.sql, version 8).

-- version: 9

-- FTS5's `secure-delete` off: with it on, each deleted row was searched for
-- in every older segment, and replacing a document cost tens of times what
-- adding one did, growing with the index. Deleted text is purged from the
-- index's pages on a schedule instead (src/store/sqlite/search_purge.rs).
INSERT INTO search_text (search_text, rank) VALUES ('secure-delete', 0);

-- version: 10

-- The summary's counts by status (`totals`, read after every run) add up
-- counts over the partial indexes of the states that are not `indexed`,
-- and that one is the rest of `count(*)`: a grouped scan of every row took
-- a fifth of a rerun over an unchanged tree of 100k documents. `dead` is the
-- one state without an index of its own; this gives it one. Partial, so that
-- no claim query can take it for an index on `status`.
CREATE INDEX jobs_dead ON jobs (source_gone) WHERE status = 'dead';

-- version: 11

-- An accepted result whose text holds no word (no letter or digit): an empty
-- file, a PDF of scanned pages without a text layer. NULL for a result with
-- words, and for results accepted before this version; otherwise why there
-- is none, as far as the worker could tell. Written by every fenced
-- completion, so a changed source that now yields text clears it. Counted
-- and listed apart from the indexed (`status`, `list --no-text`) through
-- the partial index, which holds only those rows.
ALTER TABLE jobs ADD COLUMN no_text TEXT;
CREATE INDEX jobs_no_text ON jobs (id) WHERE no_text IS NOT NULL;

-- version: 12

-- The title, the author and the date a document gives itself (HTML
-- <title>, a PDF's Info dictionary, an office document's core properties,
-- Markdown's first heading; the date as YYYY-MM-DD, or YYYY-MM or YYYY),
-- recorded by every fenced completion like `no_text`; NULL when it gives
-- none, and for results accepted before this version. The search index
-- gains `title` and `author` columns, ranked above the text, the title
-- being the document's or else its file name: FTS5 cannot add a column to a
-- table, so the table is remade after the migrations with the tokenizer it
-- had, and its rows copied into it, titled by their file names
-- (src/store/sqlite/search_index.rs, `add_metadata_columns`).
ALTER TABLE jobs ADD COLUMN title TEXT;
ALTER TABLE jobs ADD COLUMN author TEXT;
ALTER TABLE jobs ADD COLUMN doc_date TEXT;

-- version: 13

-- No table changes. A data directory may index several folders: the first
-- keyed relative to it (`source_root` in meta), the ones added after it by
-- full path (`source_folders`, a JSON array). A release that knows one
-- folder only would scan the first and take every other folder's documents
-- for removed files; this version makes such a release refuse the data
-- directory ("newer schema") instead.
SELECT 1;

-- version: 14

-- How many pages a document says it has (a PDF's page count, a word
-- processor's statistics, a deck's slides) and the language it says it is in
-- (HTML's lang, dc:language, a PDF's /Lang; a BCP 47 tag as clean_language
-- writes it), recorded by every fenced completion like the title; NULL when
-- it does not say, and for results accepted before this version.
ALTER TABLE jobs ADD COLUMN pages INTEGER;
ALTER TABLE jobs ADD COLUMN language TEXT;

-- version: 15

-- No table changes. SQLite's word index keeps no copy of its texts from
-- this version (the mirror holds them; src/store/sqlite/search_table.rs
-- makes the table, and the open copies an older one into that form). A
-- release that reads the texts back from the index (snippets, its damage
-- probe) or drops the table the old way would fail on it; this version makes
-- such a release refuse the data directory ("newer schema") instead.
SELECT 1;

-- version: 16

-- No table changes. PostgreSQL's history lines lost their foreign key to
-- their document (see schema.pg.sql's version 16); kept as the twin of that
-- section. A SQLite data directory at this version holds the same tables as
-- at 15, but a release that knows 15 at most refuses it ("newer schema"),
-- and a read-only open of a version 15 file is refused until one
-- read-write open has brought it to 16.
SELECT 1;

-- version: 17

-- History in the order it is written: a rowid table, its primary key
-- (job_id, seq) an index beside it. Clustered on (job_id, seq) (version
-- 1, WITHOUT ROWID), a line went into the page of its document's earlier
-- lines: a rerun that changes documents scattered over the store rewrote
-- one such page per document in each of its three transactions (the scan's
-- requeue, the claim, the completion), and split it when full, since the
-- first run had packed the pages. Appended, the lines of one transaction
-- share the table's last pages, and only the index's small entries land in
-- the document's page (DESIGN §14 has the figures). The lines are copied
-- in the order of the key. The lines no longer carry a foreign key to their
-- document, as PostgreSQL's have not since its version 16: every line is
-- written by the statement that changes its document's row or after reading
-- it, and a line whose row was deleted by hand would have stopped this copy.
CREATE TABLE history_appended (
    job_id  INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    event   TEXT    NOT NULL,
    token   TEXT,
    fence   INTEGER,
    detail  TEXT,
    PRIMARY KEY (job_id, seq)
);
INSERT INTO history_appended (job_id, seq, at, event, token, fence, detail)
    SELECT job_id, seq, at, event, token, fence, detail FROM history ORDER BY job_id, seq;
DROP TABLE history;
ALTER TABLE history_appended RENAME TO history;
