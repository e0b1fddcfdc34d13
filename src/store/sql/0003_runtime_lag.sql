-- Schema version 3: the run's own scheduling lag (issue 13).
--
-- The lag probe's readings (src/core/lag_probe.rs): for each 100 ms period
-- of the run, the largest lateness of the client's own runtime, which says
-- when the client, not the network, may have made its timers fire. One row
-- per period that has a reading; runs recorded before this version have
-- none. A plot reads `SELECT at_ns, lag_ns FROM runtime_lag WHERE run_id = ?
-- ORDER BY at_ns`.
CREATE TABLE runtime_lag (
    run_id  INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    -- When the period began, ns since the run's epoch (as events.at_ns).
    at_ns   INTEGER NOT NULL,
    -- The largest lateness measured in it, ns.
    lag_ns  INTEGER NOT NULL,
    PRIMARY KEY (run_id, at_ns)
) STRICT, WITHOUT ROWID;
