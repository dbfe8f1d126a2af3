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
