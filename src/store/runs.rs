//! Runs: what a run starts with (its tunables and providers, secrets
//! removed), how it ends, and the summaries the history lists.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::core::event::Outcome;
use crate::providers::setup::ProviderConfig;
use crate::report::{RunReport, StreamReport};
use crate::tunables::Tunables;

/// A run's id in the store (`RunReport::run_id`).
pub type RunId = i64;

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Being recorded (or its recorder is alive in another process).
    Running,
    /// Finished with a report.
    Completed,
    /// Its recording process ended without finishing it (a crash, a kill).
    Interrupted,
    /// Stopped by the user (Stop, Ctrl-C) and then finished with a report;
    /// stored as `completed` with its `stopped` column set.
    Stopped,
}

impl RunStatus {
    /// The name stored and shown.
    pub const fn name(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Stopped => "stopped",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [RunStatus::Running, RunStatus::Completed, RunStatus::Interrupted].into_iter().find(|s| s.name() == text)
    }
}

/// What a run starts with. Built by [`RunStart::new`], which keeps secrets
/// out: tunables go through `shown` (URL credentials masked) and provider
/// rows keep key variable *names* only.
#[derive(Debug, Clone, PartialEq)]
pub struct RunStart {
    /// Wall-clock start, Unix milliseconds.
    pub started_at_ms: i64,
    /// A free label (`--label`).
    pub label: Option<String>,
    /// The built-in scenario, when the run uses one.
    pub scenario: Option<String>,
    tunables: Map<String, Value>,
    providers: Value,
    /// What the core's decisions depended on beyond the tunables; runs
    /// recorded before it existed have none.
    pub meta: Option<RunMeta>,
    /// The batch the run was started in, if any.
    pub batch: Option<i64>,
}

/// What a replay needs to make the same decisions a run made: its shape,
/// its randomness, its clock and its rules.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RunMeta {
    /// Calls made.
    pub requests: u32,
    /// Calls in flight at once, at most.
    pub concurrency: u32,
    /// The seed every call's random numbers (jitter) derive from.
    pub seed: u64,
    /// The wall clock at the executor's epoch (`Event::at` = 0), in
    /// nanoseconds since the Unix epoch: the wall clock of any event is
    /// this plus its `at`.
    pub epoch_unix_ns: i64,
    /// The classifier's user rules, in order, as configured.
    pub rules: Value,
    /// Keys per provider pool (never the keys).
    pub pools: BTreeMap<String, usize>,
}

impl RunStart {
    /// A run starting now with these settings.
    pub fn new(
        label: Option<String>,
        scenario: Option<String>,
        tunables: &Tunables,
        providers: &[ProviderConfig],
    ) -> Self {
        RunStart {
            started_at_ms: now_ms(),
            label,
            scenario,
            tunables: tunables.sourced_snapshot(),
            providers: redacted_providers(providers),
            meta: None,
            batch: None,
        }
    }

    /// The same start, as part of `batch` (runs started together share it).
    pub fn in_batch(mut self, batch: Option<i64>) -> Self {
        self.batch = batch;
        self
    }

    /// The same start, with what replay needs.
    pub fn with_meta(mut self, meta: RunMeta) -> Self {
        self.meta = Some(meta);
        self
    }

    /// The tunables snapshot: name → `{"value": …, "source": "…"}`.
    pub fn tunables(&self) -> &Map<String, Value> {
        &self.tunables
    }

    /// The provider rows as stored (keys redacted).
    pub fn providers(&self) -> &Value {
        &self.providers
    }
}

/// The wall clock in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` in UTC.
pub fn utc_second(unix_ms: i64) -> String {
    let (date, secs) = utc_date(unix_ms.div_euclid(1000));
    format!("{date} {:02}:{:02}:{:02}", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// Unix nanoseconds as `YYYY-MM-DD HH:MM:SS.mmm UTC`.
pub fn utc_millis(unix_ns: i64) -> String {
    let unix_ms = unix_ns.div_euclid(1_000_000);
    let (date, secs) = utc_date(unix_ms.div_euclid(1000));
    format!("{date} {:02}:{:02}:{:02}.{:03} UTC", secs / 3600, secs % 3600 / 60, secs % 60, unix_ms.rem_euclid(1000))
}

/// The UTC date (`YYYY-MM-DD`) of Unix seconds and the seconds into that
/// day (Howard Hinnant's civil-from-days).
fn utc_date(unix_s: i64) -> (String, i64) {
    let (days, rest) = (unix_s.div_euclid(86_400), unix_s.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (format!("{year:04}-{month:02}-{day:02}"), rest)
}

/// Provider rows as they may be stored: key variable names (never their
/// values), URLs with their passwords and queries masked
/// ([`crate::core::redact::url`]), header names with masked values (a
/// header may carry a token).
pub fn redacted_providers(rows: &[ProviderConfig]) -> Value {
    Value::Array(
        rows.iter()
            .map(|row| {
                let headers: Map<String, Value> = row.headers.keys().map(|k| (k.clone(), json!("***"))).collect();
                json!({
                    "name": row.name,
                    "kind": row.kind.to_string(),
                    "base_url": crate::core::redact::url(&row.base_url),
                    "model": row.model,
                    "api_key_env": row.api_key_env,
                    "api_key_envs": row.api_key_envs,
                    "proxy": row.proxy.as_deref().map(crate::core::redact::url),
                    "headers": headers,
                    "ca_file": row.ca_file.as_ref().map(|p| p.display().to_string()),
                })
            })
            .collect(),
    )
}

/// Streams by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outcomes {
    /// Completed.
    pub ok: u64,
    /// Finished by partial recovery.
    pub partial: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Still queued when the run was stopped: never started.
    pub not_started: u64,
}

/// One line of the history (`runs list`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// The run's id.
    pub id: RunId,
    /// Wall-clock start, Unix milliseconds.
    pub started_at_ms: i64,
    /// Wall-clock end (for an interrupted run: its last recorded event).
    pub ended_at_ms: Option<i64>,
    /// Running, completed or interrupted.
    pub status: RunStatus,
    /// The run's label.
    pub label: Option<String>,
    /// The built-in scenario, if any.
    pub scenario: Option<String>,
    /// The batch the run was started in (runs started together share it).
    pub batch: Option<i64>,
    /// The configured provider names, in row order.
    pub providers: Vec<String>,
    /// Streams by outcome (for a run without a report: from its recorded
    /// `Finished` events).
    pub outcomes: Outcomes,
    /// Median elapsed time of the streams that were not cancelled (a
    /// cancelled stream's time measures the stop, not the provider).
    pub p50_ms: Option<f64>,
    /// 99th-percentile stream elapsed time.
    pub p99_ms: Option<f64>,
    /// Retries used over all streams (completed runs only).
    pub retries: Option<u64>,
    /// Wall-clock of the whole run (completed runs only).
    pub elapsed_ms: Option<f64>,
    /// Events recorded.
    pub events: u64,
    /// Events not recorded (the recorder's channel was full, a batch
    /// failed, or a body did not fit the body budget).
    pub dropped_events: u64,
    /// Recorded bodies among the dropped events.
    pub dropped_bodies: u64,
}

/// A run with everything `runs compare` needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    /// Its summary.
    pub summary: RunSummary,
    /// Tunables snapshot: name → `{"value": …, "source": "…"}`.
    pub tunables: Map<String, Value>,
    /// Provider rows (keys redacted).
    pub providers: Value,
    /// What replay needs beyond the tunables; `None` for runs recorded
    /// without it (by an older stallscope).
    pub meta: Option<RunMeta>,
    /// The schema version of the stallscope that recorded the run (1: from
    /// before response headers and attempt ends were recorded).
    pub recorded_schema: i64,
    /// Events not recorded, per stream (streams that lost none are absent).
    pub dropped_by_stream: BTreeMap<u64, u64>,
}

impl RunRecord {
    /// What replay needs that this run's recording lacks, in words; empty
    /// when it has everything.
    pub fn lacks(&self) -> Vec<&'static str> {
        let mut lacks = Vec::new();
        if self.meta.is_none() {
            lacks.extend(["its seed", "its wall clock", "its rules", "its key pools"]);
        }
        if self.recorded_schema < 2 {
            lacks.extend(["response headers", "how attempts ended", "dropped events per stream"]);
        }
        lacks
    }

    /// One line saying what the run lacks for replay, when it lacks anything.
    pub fn replay_note(&self) -> Option<String> {
        let lacks = self.lacks();
        let (last, rest) = lacks.split_last()?;
        let listed = if rest.is_empty() { (*last).to_owned() } else { format!("{} or {last}", rest.join(", ")) };
        let by = if self.recorded_schema < 2 { "by an older stallscope " } else { "" };
        Some(format!(
            "run {} was recorded {by}without {listed}: replay cannot reproduce its decisions",
            self.summary.id
        ))
    }
}

/// The nearest-rank `p`th percentile of sorted values.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

pub(crate) fn insert(conn: &Connection, start: &RunStart, pid: i64, pid_start: Option<i64>) -> rusqlite::Result<RunId> {
    let meta = match &start.meta {
        Some(meta) => {
            Some(serde_json::to_string(meta).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?)
        }
        None => None,
    };
    conn.prepare_cached(
        "INSERT INTO runs (started_at, status, label, scenario, pid, pid_start, tunables, providers, meta, \
         recorded_schema, batch) VALUES (?1, 'running', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        start.started_at_ms,
        start.label,
        start.scenario,
        pid,
        pid_start,
        Value::Object(start.tunables.clone()).to_string(),
        start.providers.to_string(),
        meta,
        super::SCHEMA_VERSION,
        start.batch,
    ])?;
    Ok(conn.last_insert_rowid())
}

/// Completes a run: its report (with `run_id` filled), summary columns and
/// per-stream rows. Returns false when there is no such run.
pub(crate) fn finish(tx: &Transaction<'_>, run: RunId, report: &RunReport, dropped: u64) -> rusqlite::Result<bool> {
    let mut report = report.clone();
    report.run_id = Some(run);
    let text = serde_json::to_string(&report).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    let timed = report.streams.iter().filter(|s| s.outcome != Outcome::Cancelled.name());
    let mut elapsed: Vec<f64> = timed.map(|s| s.elapsed_ms).collect();
    elapsed.sort_by(f64::total_cmp);
    let retries_of = |s: &crate::report::StreamReport| s.retry_counts.values().map(|u| u64::from(u.used)).sum::<u64>();
    let retries: u64 = report.streams.iter().map(retries_of).sum();
    // A run that counted its calls lists none: its counts stand in.
    let (p50, p99, retries) = match &report.counted {
        Some(counted) => (counted.p50_ms, counted.p99_ms, counted.retries),
        None => (percentile(&elapsed, 50.0), percentile(&elapsed, 99.0), retries),
    };
    let sum = &report.summary;
    let dropped = i64::try_from(dropped).unwrap_or(i64::MAX);
    let changed = tx.execute(
        "UPDATE runs SET status = 'completed', ended_at = ?2, report = ?3, \
         dropped_events = max(dropped_events, ?4), ok = ?5, partial = ?6, failed = ?7, cancelled = ?8, \
         p50_ms = ?9, p99_ms = ?10, retries = ?11, elapsed_ms = ?12, stopped = ?13, not_started = ?14 WHERE id = ?1",
        params![
            run,
            now_ms(),
            text,
            dropped,
            sum.ok as i64,
            sum.partial as i64,
            sum.failed as i64,
            sum.cancelled as i64,
            p50,
            p99,
            i64::try_from(retries).unwrap_or(i64::MAX),
            sum.elapsed_ms,
            report.stopped,
            i64::try_from(sum.not_started).unwrap_or(i64::MAX),
        ],
    )?;
    if changed == 0 {
        return Ok(false);
    }
    let mut upsert = tx.prepare_cached(
        "INSERT INTO streams (run_id, stream, provider, model, outcome, attempts, elapsed_ms, retries) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (run_id, stream) DO UPDATE SET \
         provider = coalesce(streams.provider, excluded.provider), model = coalesce(streams.model, excluded.model), \
         outcome = excluded.outcome, attempts = excluded.attempts, elapsed_ms = excluded.elapsed_ms, \
         retries = excluded.retries",
    )?;
    for s in &report.streams {
        upsert.execute(params![
            run,
            s.index as i64,
            s.provider,
            s.model,
            s.outcome,
            s.attempts,
            s.elapsed_ms,
            i64::try_from(retries_of(s)).unwrap_or(i64::MAX)
        ])?;
    }
    Ok(true)
}

const SUMMARY_COLUMNS: &str = "SELECT id, started_at, ended_at, status, label, scenario, providers, events, \
     dropped_events, ok, partial, failed, cancelled, p50_ms, p99_ms, retries, elapsed_ms, dropped_bodies, stopped, \
     not_started, batch FROM runs";

fn provider_names(providers: &Value) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for row in providers.as_array().into_iter().flatten() {
        if let Some(name) = row.get("name").and_then(Value::as_str)
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_owned());
        }
    }
    names
}

/// Summaries of every run (newest first), or of one.
pub(crate) fn summaries(conn: &Connection, only: Option<RunId>) -> rusqlite::Result<Vec<RunSummary>> {
    let sql = match only {
        Some(_) => format!("{SUMMARY_COLUMNS} WHERE id = ?1"),
        None => format!("{SUMMARY_COLUMNS} WHERE ?1 IS NULL ORDER BY started_at DESC, id DESC"),
    };
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut out: Vec<RunSummary> = stmt
        .query_map(params![only], |row| {
            let status = match RunStatus::parse(&row.get::<_, String>(3)?) {
                Some(RunStatus::Completed) if row.get::<_, bool>(18)? => RunStatus::Stopped,
                status => status.unwrap_or(RunStatus::Interrupted),
            };
            let providers: String = row.get(6)?;
            let count = |i| row.get::<_, Option<i64>>(i).map(|v| v.unwrap_or(0).max(0) as u64);
            Ok(RunSummary {
                id: row.get(0)?,
                started_at_ms: row.get(1)?,
                ended_at_ms: row.get(2)?,
                status,
                label: row.get(4)?,
                scenario: row.get(5)?,
                batch: row.get(20)?,
                providers: provider_names(&serde_json::from_str(&providers).unwrap_or(Value::Null)),
                outcomes: Outcomes {
                    ok: count(9)?,
                    partial: count(10)?,
                    failed: count(11)?,
                    cancelled: count(12)?,
                    not_started: count(19)?,
                },
                p50_ms: row.get(13)?,
                p99_ms: row.get(14)?,
                retries: row.get::<_, Option<i64>>(15)?.map(|v| v.max(0) as u64),
                elapsed_ms: row.get(16)?,
                events: count(7)?,
                dropped_events: count(8)?,
                dropped_bodies: count(17)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    for summary in out.iter_mut().filter(|s| !matches!(s.status, RunStatus::Completed | RunStatus::Stopped)) {
        from_streams(conn, summary)?;
    }
    Ok(out)
}

/// Outcome counts and percentiles of a run without a report, from the
/// streams its recorded events opened and closed.
fn from_streams(conn: &Connection, summary: &mut RunSummary) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "SELECT outcome, ended_ns - started_ns FROM streams WHERE run_id = ?1 AND outcome IS NOT NULL",
    )?;
    let rows =
        stmt.query_map(params![summary.id], |row| Ok((row.get::<_, String>(0)?, row.get::<_, Option<i64>>(1)?)))?;
    let mut outcomes = Outcomes::default();
    let mut elapsed = Vec::new();
    for row in rows {
        let (outcome, ns) = row?;
        match outcome.as_str() {
            "ok" => outcomes.ok += 1,
            "partial" => outcomes.partial += 1,
            "failed" => outcomes.failed += 1,
            _ => {
                outcomes.cancelled += 1;
                continue;
            }
        }
        elapsed.extend(ns.map(|ns| ns as f64 / 1e6));
    }
    elapsed.sort_by(f64::total_cmp);
    summary.outcomes = outcomes;
    summary.p50_ms = percentile(&elapsed, 50.0);
    summary.p99_ms = percentile(&elapsed, 99.0);
    Ok(())
}

/// The streams of a run as its recording keeps them, in stream order:
/// each one's outcome, target, attempts and wall-clock, from the events
/// that opened and closed it (for a report that counted its calls rather
/// than listing them). A stream whose end was not recorded has no row.
pub(crate) fn recorded_streams(conn: &Connection, id: RunId) -> rusqlite::Result<Vec<StreamReport>> {
    let mut stmt = conn.prepare_cached(
        "SELECT stream, provider, model, outcome, attempts, ended_ns - started_ns FROM streams \
         WHERE run_id = ?1 AND outcome IS NOT NULL ORDER BY stream",
    )?;
    let rows = stmt.query_map(params![id], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, Option<String>>(1)?,
            row.get::<_, Option<String>>(2)?,
            row.get::<_, String>(3)?,
            row.get::<_, Option<i64>>(4)?,
            row.get::<_, Option<i64>>(5)?,
        ))
    })?;
    let mut streams = Vec::new();
    for row in rows {
        let (stream, provider, model, outcome, attempts, ns) = row?;
        let Ok(outcome) = super::report::outcome(&outcome) else { continue };
        streams.push(StreamReport {
            index: stream.max(0) as u64,
            outcome,
            provider: provider.unwrap_or_default(),
            model: model.unwrap_or_default(),
            attempts: attempts.and_then(|a| u32::try_from(a).ok()).unwrap_or(0),
            elapsed_ms: ns.map_or(0.0, |ns| ns as f64 / 1e6),
            ..StreamReport::default()
        });
    }
    Ok(streams)
}

/// One run with its tunables, providers, meta and drops per stream.
pub(crate) fn record(conn: &Connection, id: RunId) -> rusqlite::Result<Option<RunRecord>> {
    let Some(summary) = summaries(conn, Some(id))?.pop() else { return Ok(None) };
    let (tunables, providers, meta, recorded_schema): (String, String, Option<String>, i64) = conn.query_row(
        "SELECT tunables, providers, meta, recorded_schema FROM runs WHERE id = ?1",
        params![id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    let unreadable = |column: usize, e: String| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, e.into())
    };
    // Exact floats: a tunables snapshot must rebuild the very values the run had.
    let tunables = match super::report::exact_json(&tunables) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let meta = match meta {
        Some(text) => Some(serde_json::from_str(&text).map_err(|e| unreadable(2, format!("run meta: {e}")))?),
        None => None,
    };
    let mut stmt = conn.prepare_cached(
        "SELECT stream, dropped_events FROM streams WHERE run_id = ?1 AND dropped_events > 0 ORDER BY stream",
    )?;
    let dropped_by_stream = stmt
        .query_map(params![id], |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)?.max(0) as u64)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Some(RunRecord {
        summary,
        tunables,
        providers: serde_json::from_str(&providers).unwrap_or(Value::Null),
        meta,
        recorded_schema,
        dropped_by_stream,
    }))
}

/// The stored report text of a completed run.
pub(crate) fn report_text(conn: &Connection, id: RunId) -> rusqlite::Result<Option<String>> {
    Ok(conn
        .query_row("SELECT report FROM runs WHERE id = ?1", params![id], |r| r.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

/// A run left `running`, with the process id and start time that recorded it.
pub(crate) type Owned = (RunId, Option<i64>, Option<i64>);

/// Runs left `running` and the process that recorded each.
pub(crate) fn running(conn: &Connection) -> rusqlite::Result<Vec<Owned>> {
    let mut stmt = conn.prepare_cached("SELECT id, pid, pid_start FROM runs WHERE status = 'running'")?;
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect()
}

/// The runs labelled `label` that are no longer running, newest first:
/// their ids and wall-clock starts (Unix milliseconds).
pub(crate) fn ended(conn: &Connection, label: Option<&str>, since_ms: i64) -> rusqlite::Result<Vec<(RunId, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, started_at FROM runs WHERE (?1 IS NULL OR label = ?1) AND started_at >= ?2 \
         AND status != 'running' ORDER BY started_at DESC, id DESC",
    )?;
    stmt.query_map(params![label, since_ms], |r| Ok((r.get(0)?, r.get(1)?)))?.collect()
}

/// Marks a run interrupted, ending it at its last recorded event.
pub(crate) fn interrupt(tx: &Transaction<'_>, id: RunId) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE runs SET status = 'interrupted', \
         ended_at = started_at + coalesce((SELECT max(at_ns) FROM events WHERE run_id = ?1), 0) / 1000000 \
         WHERE id = ?1 AND status = 'running'",
        params![id],
    )?;
    Ok(())
}

/// Tunables that differ between two snapshots: name → (a, b), `None` when
/// a side lacks the tunable. For `runs compare`.
pub fn tunables_diff(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
) -> BTreeMap<String, (Option<Value>, Option<Value>)> {
    let value = |m: &Map<String, Value>, k: &str| m.get(k).map(|e| e.get("value").cloned().unwrap_or(e.clone()));
    a.keys()
        .chain(b.keys())
        .filter_map(|k| {
            let (va, vb) = (value(a, k), value(b, k));
            (va != vb).then(|| (k.clone(), (va, vb)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_in_utc() {
        assert_eq!(utc_second(0), "1970-01-01 00:00:00");
        assert_eq!(utc_second(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc_second(1_795_982_918_799), "2026-11-29 20:08:38");
        assert_eq!(utc_millis(1_795_982_918_799_123_456), "2026-11-29 20:08:38.799 UTC");
        assert_eq!(utc_millis(-1), "1969-12-31 23:59:59.999 UTC");
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn tunable_diffs_compare_values_not_sources() {
        let a = json!({"X": {"value": 1, "source": "default"}, "Y": {"value": 2, "source": "env"}});
        let b = json!({"X": {"value": 1, "source": "env"}, "Y": {"value": 3, "source": "env"}, "Z": {"value": 0}});
        let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
        let diff = tunables_diff(a, b);
        assert_eq!(diff.keys().collect::<Vec<_>>(), ["Y", "Z"]);
        assert_eq!(diff["Z"], (None, Some(json!(0))));
    }
}
