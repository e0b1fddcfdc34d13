-- Schema version 2: what a replay needs (issue 11).
--
-- Runs recorded before this version keep NULL `meta` and `recorded_schema`
-- 1: they list, show and export as before, and say what they lack.

-- RunMeta as JSON ({"requests", "concurrency", "seed", "epoch_unix_ns",
-- "rules", "pools"}): one column, read whole by replay, searchable with
-- json_extract(meta, '$.seed'); the seed is a u64, which an INTEGER column
-- cannot hold. NULL for runs recorded without it.
ALTER TABLE runs ADD COLUMN meta TEXT;
-- The schema version of the stallscope that recorded the run: 1 for runs
-- recorded before response headers and attempt ends were events.
ALTER TABLE runs ADD COLUMN recorded_schema INTEGER NOT NULL DEFAULT 1;
-- Bodies not recorded (the recorder's body budget was full, or the channel
-- was); they count among dropped_events too.
ALTER TABLE runs ADD COLUMN dropped_bodies INTEGER NOT NULL DEFAULT 0;

-- Events of this stream that were not recorded.
ALTER TABLE streams ADD COLUMN dropped_events INTEGER NOT NULL DEFAULT 0;

-- How and when the attempt ended, from its AttemptEnded event: `end_code`
-- and `end_value` as the event row's `code` and `value`.
ALTER TABLE attempts ADD COLUMN ended_ns INTEGER;
ALTER TABLE attempts ADD COLUMN end_code INTEGER;
ALTER TABLE attempts ADD COLUMN end_value INTEGER;

-- Recorded bodies (STALLSCOPE_RECORD_BODIES), one per BodyRecorded event
-- row (`event_id`), which keeps the body's place in its stream.
CREATE TABLE bodies (
    event_id  INTEGER PRIMARY KEY,
    run_id    INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    stream    INTEGER NOT NULL,
    attempt   INTEGER NOT NULL,
    mode      TEXT    NOT NULL CHECK (mode IN ('text', 'raw')),
    truncated INTEGER NOT NULL,
    -- Bytes before compression: raw, the body's; text, the JSON array of its texts.
    length    INTEGER NOT NULL,
    -- zlib.
    data      BLOB    NOT NULL
) STRICT;

CREATE INDEX bodies_by_run ON bodies (run_id, stream, attempt);
