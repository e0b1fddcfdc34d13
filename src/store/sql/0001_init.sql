-- Schema version 1: runs, their streams and attempts, and compact events.
--
-- Times: `started_at`/`ended_at` are Unix milliseconds (wall clock);
-- `*_ns` columns are nanoseconds since the run's epoch (`Event::at`).
-- Integer codes (events.kind, events.code) are listed in src/store/events.rs;
-- they are part of the format and never change meaning.

PRAGMA application_id = 1397965648; -- "SSCP": refuse to migrate another program's database

CREATE TABLE runs (
    id             INTEGER PRIMARY KEY,
    started_at     INTEGER NOT NULL,
    ended_at       INTEGER,
    status         TEXT    NOT NULL DEFAULT 'running'
                           CHECK (status IN ('running', 'completed', 'interrupted')),
    label          TEXT,
    scenario       TEXT,
    -- The recording process, so a later open can tell a live run from a dead one.
    pid            INTEGER,
    -- Its start time in clock ticks since boot (Linux /proc/<pid>/stat field 22): guards against pid reuse.
    pid_start      INTEGER,
    -- Tunables snapshot: {"STALLSCOPE_…": {"value": …, "source": "…"}}, credentials in URLs masked.
    tunables       TEXT    NOT NULL,
    -- Provider rows with key variable NAMES only; URL credentials and header values masked.
    providers      TEXT    NOT NULL,
    -- The report `run --json` printed, once completed.
    report         TEXT,
    -- Events written, and events not recorded (channel full or a failed batch).
    events         INTEGER NOT NULL DEFAULT 0,
    dropped_events INTEGER NOT NULL DEFAULT 0,
    -- Summary of a completed run, from its report.
    ok             INTEGER,
    partial        INTEGER,
    failed         INTEGER,
    cancelled      INTEGER,
    p50_ms         REAL,
    p99_ms         REAL,
    retries        INTEGER,
    elapsed_ms     REAL
) STRICT;

CREATE INDEX runs_by_start ON runs (started_at);

-- One row per call: opened by its CallStarted event, closed by Finished,
-- completed from the report when the run finishes.
CREATE TABLE streams (
    run_id      INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    stream      INTEGER NOT NULL,
    provider    TEXT,
    model       TEXT,
    started_ns  INTEGER,
    ended_ns    INTEGER,
    outcome     TEXT,
    attempts    INTEGER,
    elapsed_ms  REAL,
    retries     INTEGER,
    PRIMARY KEY (run_id, stream)
) STRICT, WITHOUT ROWID;

-- One row per attempt, from AttemptStarted, HeadersReceived and ErrorClassified.
CREATE TABLE attempts (
    run_id      INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    stream      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    provider    TEXT    NOT NULL,
    model       TEXT    NOT NULL,
    credential  INTEGER,
    started_ns  INTEGER NOT NULL,
    status      INTEGER,
    category    INTEGER,
    PRIMARY KEY (run_id, stream, attempt)
) STRICT, WITHOUT ROWID;

-- One row per event, or per run of consecutive byte-chunk / SSE events of
-- one stream and attempt within a batch (kind 100, `n` events in `packed`).
CREATE TABLE events (
    id      INTEGER PRIMARY KEY,
    run_id  INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    stream  INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    at_ns   INTEGER NOT NULL,
    kind    INTEGER NOT NULL,
    n       INTEGER NOT NULL DEFAULT 1,
    code    INTEGER,
    value   INTEGER,
    aux     INTEGER,
    detail  TEXT,
    packed  BLOB
) STRICT;

-- "All events of one stream in time order" is a range scan of this index.
CREATE INDEX events_by_stream_time ON events (run_id, stream, at_ns);
