//! A headless canary: rounds of calls on a schedule, forever, each
//! recorded like a run and counted into Prometheus metrics served on
//! `/metrics`, until cancelled.
//!
//! A round runs through the same session path as `stallscope run`
//! ([`crate::session::run_session`]); what a round is lives in [`Round`],
//! when it starts in [`Schedule`], which rounds the database keeps in
//! [`Retention`]. The CLI's `watch` only parses and prints.
//!
//! **What a canary survives.** A provider outage is data: its calls fail,
//! and the round is recorded and counted like any other. A database that
//! cannot be written (read-only, a full disk, a path that cannot be
//! created) turns recording off for the round: the calls still run (again,
//! when the recorder could not even start) and are still counted, the
//! round's report says so once ([`RecordingChange`]), and every round
//! tries to record again, so recording resumes when the disk does.
//! Cancelling (Ctrl-C) stops the round's calls; the round is recorded as
//! stopped and the watch returns. Only the first round ends the watch on
//! an error: a config, key or scenario that cannot work at all.
//!
//! Rounds are runs labelled [`round_label`] (`watch@SITE`, and `probe:
//! watch@SITE` when the round is a probe, so the history knows it for a
//! probe too), so the history lists them, and retention deletes only them.
//! A probe round's matrix also sets each route's readiness gauge. With an
//! OTLP endpoint, each recorded round is also sent as OpenTelemetry traces
//! ([`crate::export::otlp`]), before retention may delete it; a receiver
//! that is down, or accepts and never answers, costs that round's traces
//! (after the exporter's timeouts at most), never the watch. Cancelling
//! stops a send too: the traces of a round that ends cancelled are not
//! sent (`export --otlp` sends its record later).

mod retention;
mod round;
mod schedule;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::core::failover::Target;
use crate::diagnosis::{FixedCut, RouteCuts};
use crate::export::otlp::{self, Destination, OtlpError, Sender, Sent};
use crate::metrics::{Metrics, MetricsServer, RoundResult, ServeError};
use crate::probe::{self, Readiness};
use crate::report::RunReport;
use crate::session::{RecordTo, SessionError, settings_for};
use crate::store::{RunId, Store};

pub use retention::Retention;
pub use round::{CallPlan, Round, RoundError};
pub use schedule::{MAX_EVERY, Schedule, Slot, parse_every};

/// Everything a watch needs.
#[derive(Debug, Clone)]
pub struct WatchPlan {
    /// What each round does.
    pub round: Round,
    /// The calls of each round.
    pub calls: CallPlan,
    /// The interval between round starts.
    pub every: Duration,
    /// Where the canary measures from: the `site` label of its metrics and
    /// part of its rounds' label.
    pub site: String,
    /// The database rounds are recorded in; `None` records nothing.
    pub db: Option<PathBuf>,
    /// Which rounds the database keeps.
    pub retention: Retention,
    /// Where `/metrics` is served; `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// The OTLP/HTTP receiver recorded rounds are sent to as traces.
    pub otlp: Option<Destination>,
}

/// The label of a site's rounds of this kind in the run history: a probe
/// round is also labelled a probe ([`probe::is_probe_label`]), as the
/// history must not run it again as one list of calls.
pub fn round_label(round: &Round, site: &str) -> String {
    let label = format!("watch@{site}");
    match round {
        Round::Probe { .. } => probe::run_label(Some(&label)),
        Round::Scenario { .. } | Round::Calls { .. } => label,
    }
}

/// Recording turned off or on again, said once when it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordingChange {
    /// The database could not be written; rounds go on unrecorded.
    Stopped(String),
    /// The database is written again.
    Resumed,
}

/// How one round went.
#[derive(Debug, Clone)]
pub struct RoundReport {
    /// Its place in the schedule.
    pub slot: Slot,
    /// Recorded, ran unrecorded, or could not run.
    pub result: RoundResult,
    /// Its report (`run_id` set when recorded); `None` when it could not
    /// run or its record was lost.
    pub report: Option<RunReport>,
    /// A probe round's readiness matrix; `None` for other kinds, or when
    /// the probe could not run or its record was lost.
    pub readiness: Option<Readiness>,
    /// Why it could not run, or could not be recorded.
    pub error: Option<String>,
    /// Recording turned off or on again with this round.
    pub recording: Option<RecordingChange>,
    /// Rounds retention deleted after it.
    pub deleted: Vec<RunId>,
    /// The routes whose streams, over the latest rounds, were cut (or
    /// answered by a gateway) after one fixed silence: a hop's timer.
    pub fixed_cuts: Vec<FixedCut>,
    /// Its traces sent to the OTLP endpoint, or why they were not; `None`
    /// without an endpoint or a record to send.
    pub traces: Option<Result<Sent, String>>,
    /// How long it took.
    pub took: Duration,
}

/// What a watch tells its front end.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// `/metrics` is served on this address.
    Serving(SocketAddr),
    /// A round ended.
    Round(Box<RoundReport>),
}

/// A watch that could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The settings, the config, a key, the scenario or the probe cannot
    /// work.
    #[error(transparent)]
    Setup(#[from] RoundError),
    /// `/metrics` could not be served.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The OTLP endpoint is not one traces can be sent to.
    #[error(transparent)]
    Otlp(#[from] OtlpError),
}

/// Runs rounds on the plan's schedule until `cancel`, counting into
/// `metrics`; `on_event` sees where metrics are served and each round.
/// Returns how many rounds ran. `env` is the process environment (the
/// tunable layer between the config file and the overrides, and where
/// key variables are looked up).
pub async fn watch(
    plan: &WatchPlan,
    env: &[(String, String)],
    metrics: Arc<Metrics>,
    cancel: &CancellationToken,
    mut on_event: impl FnMut(WatchEvent),
) -> Result<u64, WatchError> {
    // A bad tunable or config file ends the watch before anything is served.
    settings_for(&plan.round.source(), &plan.calls.overrides, &[], env).map_err(RoundError::from)?;
    let server = match plan.metrics_addr {
        Some(addr) => {
            let server = MetricsServer::start(addr, Arc::clone(&metrics)).await?;
            on_event(WatchEvent::Serving(server.addr()));
            Some(server)
        }
        None => None,
    };
    // A bad endpoint would fail every round the same way.
    let sender = plan.otlp.as_ref().map(Destination::sender).transpose()?;
    let mut watcher = Watcher { plan, env, metrics, recording: true, sender, cuts: RouteCuts::default() };
    let mut schedule = Schedule::new(plan.every);
    let mut rounds = 0;
    while let Some(slot) = schedule.next(cancel).await {
        if slot.skipped > 0 {
            watcher.metrics.rounds_skipped(&plan.site, slot.skipped);
        }
        let (report, failure) = watcher.round(slot, cancel).await;
        if let (0, Some(error)) = (rounds, failure) {
            return Err(error.into());
        }
        rounds += 1;
        on_event(WatchEvent::Round(Box::new(report)));
        if cancel.is_cancelled() {
            break;
        }
    }
    if let Some(server) = server {
        server.shutdown().await;
    }
    Ok(rounds)
}

/// Each route of a probe's matrix, and whether it is ready.
fn route_readiness(readiness: &Readiness) -> Vec<(Target, bool)> {
    // A row names its route `provider/model`, which is how a target reads back.
    readiness.routes.iter().filter_map(|row| Some((Target::parse(&row.route).ok()?, row.ready))).collect()
}

/// A watch's state between rounds.
struct Watcher<'a> {
    plan: &'a WatchPlan,
    env: &'a [(String, String)],
    metrics: Arc<Metrics>,
    /// Whether the last round that ran was recorded (true before any).
    recording: bool,
    /// Sends recorded rounds' traces to the OTLP endpoint.
    sender: Option<Sender>,
    /// The latest rounds' cuts, by route.
    cuts: RouteCuts,
}

impl Watcher<'_> {
    /// Runs one round; the error when it could not run at all.
    async fn round(&mut self, slot: Slot, cancel: &CancellationToken) -> (RoundReport, Option<RoundError>) {
        let (plan, started) = (self.plan, Instant::now());
        let label = round_label(&plan.round, &plan.site);
        // Settings that cannot be read fail the round; the names stay.
        if let Ok(names) = plan.round.label_names(&plan.calls, self.env) {
            self.metrics.set_names(names);
        }
        let sink = Arc::new(self.metrics.calls(&plan.site));
        let recording = plan.db.clone().map(|db| RecordTo { db, label: Some(label.clone()), batch: None });
        let mut ran = plan.round.run(&plan.calls, recording, &sink, self.env, cancel).await;
        let mut store_error = None;
        if let Err(RoundError::Session(SessionError::Store(error))) = &ran.result {
            store_error = Some(error.to_string());
            // The recorder could not start, so no call ran: run them unrecorded.
            if ran.calls_ended == 0 && !cancel.is_cancelled() {
                ran = plan.round.run(&plan.calls, None, &sink, self.env, cancel).await;
            }
        }
        // A stopped probe says nothing of the routes it did not reach.
        if let Some(readiness) = ran.readiness.as_ref().filter(|r| !r.stopped) {
            self.metrics.routes_ready(&plan.site, &route_readiness(readiness));
        }
        let (result, report, error, failure) = match ran.result {
            Ok(outcome) => {
                self.metrics.recorder_dropped(&plan.site, outcome.dropped_events);
                let result =
                    if outcome.report.run_id.is_some() { RoundResult::Recorded } else { RoundResult::Unrecorded };
                (result, Some(outcome.report), store_error, None)
            }
            // The calls ran (and were counted); their record was lost.
            Err(RoundError::Session(SessionError::Store(error))) => {
                (RoundResult::Unrecorded, None, Some(error.to_string()), None)
            }
            Err(error) => (RoundResult::Failed, None, Some(error.to_string()), Some(error)),
        };
        if let Some(report) = &report {
            self.cuts.push_run(report.streams.iter().filter_map(|s| s.diagnosis.as_ref()));
        }
        let mut change = None;
        if plan.db.is_some() && result != RoundResult::Failed {
            let recorded = result == RoundResult::Recorded;
            change = match (self.recording, recorded) {
                (true, false) => Some(RecordingChange::Stopped(error.clone().unwrap_or_default())),
                (false, true) => Some(RecordingChange::Resumed),
                _ => None,
            };
            self.recording = recorded;
        }
        // Sent before pruning, which may delete this very round.
        let traces = match (&self.sender, plan.db.clone(), report.as_ref().and_then(|r| r.run_id)) {
            (Some(sender), Some(db), Some(id)) => Some(send_traces(sender, db, id, cancel).await),
            _ => None,
        };
        let (mut deleted, mut error) = (Vec::new(), error);
        if let (RoundResult::Recorded, Some(db)) = (result, plan.db.clone()) {
            match plan.retention.prune_now(db, label, None).await {
                Ok(ids) => deleted = ids,
                Err(e) => error = Some(format!("retention: {e}")),
            }
        }
        let took = started.elapsed();
        let ended_unix_s = crate::store::runs::now_ms() as f64 / 1e3;
        self.metrics.round_finished(&plan.site, result, took, ended_unix_s);
        (
            RoundReport {
                slot,
                result,
                report,
                readiness: ran.readiness,
                error,
                recording: change,
                deleted,
                fixed_cuts: self.cuts.fixed(),
                traces,
                took,
            },
            failure,
        )
    }
}

/// Sends recorded round `id`'s traces with `sender`, unless `cancel` fires
/// first.
async fn send_traces(sender: &Sender, db: PathBuf, id: RunId, cancel: &CancellationToken) -> Result<Sent, String> {
    let read = tokio::task::spawn_blocking(move || otlp::run_traces(&Store::open(&db)?, id));
    let traces = match read.await {
        Ok(read) => read.map_err(|e| e.to_string())?,
        // Reading panicked: let the panic continue rather than invent an error.
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    };
    tokio::select! {
        biased;
        () = cancel.cancelled() => Err(OtlpError::Cancelled { url: sender.url().to_owned() }.to_string()),
        sent = sender.send(&traces) => sent.map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_round_is_labelled_a_probe_of_its_site_and_other_rounds_are_not() {
        let scenario = Round::Scenario { name: "healthy".into(), dialect: crate::providers::Dialect::OpenAiChat };
        let calls = Round::Calls { config: None, target: None };
        let probe = Round::Probe { config: None, context_tokens: Some(10) };
        assert_eq!(round_label(&scenario, "lab"), "watch@lab");
        assert_eq!(round_label(&calls, "lab"), "watch@lab");
        assert_eq!(round_label(&probe, "lab"), "probe: watch@lab");
        // The probe keeps the label it is given, so retention finds its rounds.
        assert_eq!(probe::run_label(Some(&round_label(&probe, "lab"))), round_label(&probe, "lab"));
        assert!(probe::is_probe_label(&round_label(&probe, "lab")));
        assert!(!probe::is_probe_label(&round_label(&calls, "lab")));
    }
}
