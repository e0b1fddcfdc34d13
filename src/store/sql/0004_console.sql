-- Schema version 4: what the history needs to say what happened (issue 14).
--
-- `stopped`: 1 when the user stopped the run (Stop, Ctrl-C) before all its
-- calls finished; its status stays 'completed' (it has a report), and the
-- history shows it as stopped.
-- `not_started`: calls still queued when the run was stopped. They have no
-- stream row and count in no percentile.
-- `batch`: runs started together as one batch (the app's "all failure
-- stories") share this number; NULL for a run on its own.
ALTER TABLE runs ADD COLUMN stopped INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN not_started INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN batch INTEGER;

CREATE INDEX runs_by_batch ON runs (batch) WHERE batch IS NOT NULL;
