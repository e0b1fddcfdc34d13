//! Route readiness: every configured provider/model called through the
//! core twice, once with a tiny prompt and once with a realistic payload,
//! and the matrix of which routes are ready.
//!
//! A preflight that only says "hi" calls a route ready that then stalls on
//! the real payload (seed 003: the preflight found 2 of 12 routes ready
//! with a 60-character prompt, and the review's 80 000 characters then
//! timed out on a route it had passed). So the second probe carries
//! [`DEFAULT_CONTEXT_TOKENS`] tokens of context unless told otherwise
//! (`--context-tokens`, or `context_tokens` in the config's `[probe]`
//! section).
//!
//! # Ready
//!
//! A route is **ready** when both probes end `ok` and neither verdict is
//! worse than `notice`: both calls succeeded without a failure, not even
//! one the core recovered from by retrying. A route whose provider cannot
//! be set up (a key variable that is not set, a bad URL) is not ready, and
//! says why; the others are probed all the same.
//!
//! Each route is probed alone: failover is off
//! (`STALLSCOPE_FALLBACK_MODELS=off`, on top of every other layer and
//! recorded as an override), so a failing route is not hidden by the next
//! one in its chain. Timers, retries and backoff are the configured ones,
//! so a probe meets the route as a real call would.
//!
//! # Paths compared
//!
//! Routes to one endpoint (dialect, base URL and model alike) that reach
//! it on different paths — directly and through a proxy, or through two
//! proxies — are compared on the realistic probe ([`crate::route_paths`]):
//! `Readiness::comparisons` says which path a fault follows, and
//! `stallscope probe --compare` prints it.
//!
//! # Recorded
//!
//! A probe is one recorded run, labelled `probe` (or `probe: LABEL`,
//! [`run_label`]): route `i` of the probed routes, in config order, is
//! streams `2i` (tiny) and `2i + 1` (realistic), so History, `runs show`,
//! export and what-if read it like any run. When no route can be set up nothing is called,
//! and nothing is recorded.
//!
//! # JSON
//!
//! [`Readiness`] serializes to this fixed shape (`stallscope probe
//! --json`); a probe that did not run is `null`, as are times that were
//! not reached:
//!
//! ```json
//! {"run_id": 7, "context_tokens": 20000, "ready": 1, "routes_total": 2, "stopped": false,
//!  "routes": [
//!   {"route": "openai/gpt-4o-mini", "ready": true, "problem": null,
//!    "verdict": "healthy", "severity": "ok", "summary": "healthy: …",
//!    "tiny": {"stream": 0, "outcome": "ok", "ttfb_ms": 210.0, "elapsed_ms": 640.2, "attempts": 1,
//!             "verdict": "healthy", "severity": "ok", "summary": "healthy: …", "silence_ms": null},
//!    "realistic": {"stream": 1, "outcome": "ok", "ttfb_ms": 1310.5, "elapsed_ms": 2210.0, "attempts": 1,
//!                  "verdict": "healthy_slow", "severity": "notice", "summary": "healthy but slow: …",
//!                  "silence_ms": null},
//!    "fixed_cut": null},
//!   {"route": "vpn/llama", "ready": false, "problem": "provider `vpn`: environment variable VPN_KEY is not set …",
//!    "verdict": null, "severity": null, "summary": null, "tiny": null, "realistic": null, "fixed_cut": null}],
//!  "comparisons": [
//!   {"endpoint": "https://api.openai.com/v1", "model": "gpt-4o-mini",
//!    "paths": [{"route": "openai/gpt-4o-mini", "via": null, "healthy": true, "words": "healthy"},
//!              {"route": "office/gpt-4o-mini", "via": "proxy.corp:3128", "healthy": false,
//!               "words": "idle cut after 60.0 s of silence (partial)"}],
//!    "finding": "the fault follows the path: via proxy.corp:3128: idle cut after 60.0 s of silence (partial); direct: healthy"}]}
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigError;
use crate::core::event::EventSink;
use crate::core::executor::{Call, CallReport};
use crate::core::failover::Target;
use crate::core::policy::CorePolicy;
use crate::core::transport::ClientCache;
use crate::core::upstream::CallInput;
use crate::diagnosis::{Diagnosis, RouteCuts, Severity, VerdictKind};
use crate::providers::setup::{ProviderConfig, connect};
use crate::report::{RunReport, StreamReport};
use crate::route_paths::{Comparison, compare};
use crate::run::estimated_tokens;
use crate::session::{
    CallList, RecordTo, RunSource, SessionError, SessionOutcome, run_call_list_recorded, settings_for,
};

/// The realistic payload's size when neither `--context-tokens` nor the
/// config's `[probe] context_tokens` says: about the diff and context of a
/// code review (seed 003's review sent up to 84 000 characters).
pub const DEFAULT_CONTEXT_TOKENS: u64 = 20_000;

/// The largest realistic payload, in tokens (a prompt of about 4 MB).
pub const MAX_CONTEXT_TOKENS: u64 = 1_000_000;

/// How many probes run at once when not told.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// The tiny probe's prompt, and the question the realistic payload ends
/// with: a one-word answer keeps both cheap.
pub const TINY_PROMPT: &str = "Reply with the single word: ok";

/// The label a recorded probe carries (before the user's own label).
pub const LABEL: &str = "probe";

/// Whether a recorded run's label says it is a probe.
pub fn is_probe_label(label: &str) -> bool {
    label == LABEL || label.strip_prefix(LABEL).is_some_and(|rest| rest.starts_with(": "))
}

/// The label a probe given `label` is recorded with: `probe`, `probe:
/// LABEL`, or `label` itself when it already says it is a probe (so a
/// caller that prunes by label, as a watch does, can make the label it
/// finds its probes by).
pub fn run_label(label: Option<&str>) -> String {
    match label.map(str::trim) {
        Some(label) if is_probe_label(label) => label.to_owned(),
        Some(label) if !label.is_empty() => format!("{LABEL}: {label}"),
        _ => LABEL.to_owned(),
    }
}

/// The setting that probes each route alone.
const FAILOVER_OFF: &str = "STALLSCOPE_FALLBACK_MODELS=off";

/// What to probe, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePlan {
    /// The config file whose routes are probed (`None`: the default location).
    pub config: Option<PathBuf>,
    /// `NAME=VALUE` overrides (`--set`).
    pub overrides: Vec<String>,
    /// `NAME=VALUE` edits from the app, above the overrides.
    pub edits: Vec<String>,
    /// The realistic payload's tokens; `None` reads the config's `[probe]
    /// context_tokens`, else [`DEFAULT_CONTEXT_TOKENS`].
    pub context_tokens: Option<u64>,
    /// Probes at once.
    pub concurrency: usize,
    /// Record the probe (labelled [`run_label`] of its label), or not.
    pub recording: Option<RecordTo>,
    /// The seed of the calls' random draws; `None` draws one.
    pub seed: Option<u64>,
}

/// A probe that could not run.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The settings could not be read, or the run could not be recorded.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The config has no `[[provider]]` row.
    #[error("no route to probe: the config file has no [[provider]] row (give --config PATH)")]
    NoRoutes,
    /// The realistic payload's size is out of range.
    #[error("{origin}: context_tokens {value} is not allowed; use 1 to {MAX_CONTEXT_TOKENS}")]
    ContextTokens {
        /// Where it was given.
        origin: String,
        /// The value given.
        value: u64,
    },
}

impl From<ConfigError> for ProbeError {
    fn from(error: ConfigError) -> Self {
        ProbeError::Session(SessionError::Config(error))
    }
}

/// Which of a route's two probes a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// [`TINY_PROMPT`].
    Tiny,
    /// The realistic payload.
    Realistic,
}

/// One probe of one route.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeResult {
    /// Its stream in the recorded run.
    pub stream: u64,
    /// `ok`, `partial`, `failed` or `cancelled`.
    pub outcome: &'static str,
    /// Time to first byte of the last attempt that got one.
    pub ttfb_ms: Option<f64>,
    /// The call's wall-clock.
    pub elapsed_ms: f64,
    /// Attempts made.
    pub attempts: u32,
    /// The verdict's kind.
    pub verdict: VerdictKind,
    /// The verdict's severity.
    pub severity: Severity,
    /// The verdict in one sentence.
    pub summary: String,
    /// The silence before a cut, or the wait before a gateway answered
    /// (`basis.idle_ms`).
    pub silence_ms: Option<f64>,
}

/// A probe's outcome, TTFB and elapsed as the matrix shows them: whole
/// milliseconds, `-` for what was not reached or not probed.
pub fn cells(probe: Option<&ProbeResult>) -> [String; 3] {
    let ms = |v: f64| format!("{v:.0} ms");
    match probe {
        Some(p) => [p.outcome.to_owned(), p.ttfb_ms.map_or_else(|| "-".to_owned(), ms), ms(p.elapsed_ms)],
        None => ["-".to_owned(), "-".to_owned(), "-".to_owned()],
    }
}

/// One route's row of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteReadiness {
    /// `provider/model`.
    pub route: String,
    /// Both probes ended `ok` with verdicts no worse than `notice`.
    pub ready: bool,
    /// Why the route was not probed (its provider cannot be set up, or the
    /// probe was stopped first).
    pub problem: Option<String>,
    /// The worse of the two verdicts (the realistic one on a tie).
    pub verdict: Option<VerdictKind>,
    /// Its severity.
    pub severity: Option<Severity>,
    /// Its sentence.
    pub summary: Option<String>,
    /// The tiny probe.
    pub tiny: Option<ProbeResult>,
    /// The realistic probe.
    pub realistic: Option<ProbeResult>,
    /// When both probes were cut, or answered by a gateway, after the same
    /// silence: that, in a sentence ("route …: cut at 2.00 s of silence
    /// (±0.01 s) in 2 of 2 probes: a hop on this path closes streams idle
    /// for 2 s").
    pub fixed_cut: Option<String>,
}

/// The readiness matrix: every configured route, in config order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Readiness {
    /// The recorded run, when the probe was recorded.
    pub run_id: Option<i64>,
    /// The realistic payload's size, in tokens.
    pub context_tokens: u64,
    /// Routes ready.
    pub ready: usize,
    /// Routes configured.
    pub routes_total: usize,
    /// The probe was stopped before every call finished.
    pub stopped: bool,
    /// One row per route.
    pub routes: Vec<RouteReadiness>,
    /// The endpoints configured on more than one path (directly and
    /// through a proxy, or through two), compared on the realistic probe:
    /// which path a fault follows.
    pub comparisons: Vec<Comparison>,
}

impl Readiness {
    /// Whether every route is ready.
    pub fn all_ready(&self) -> bool {
        self.ready == self.routes_total
    }
}

/// The realistic payload: filler text of about `tokens` tokens (as
/// [`estimated_tokens`] counts them), ending with [`TINY_PROMPT`]'s
/// question so the answer stays short.
pub fn realistic_prompt(tokens: u64) -> String {
    let question = format!("\n\n{TINY_PROMPT}");
    let target = usize::try_from(tokens.saturating_mul(4)).unwrap_or(usize::MAX).max(question.len());
    let mut text = String::with_capacity(target);
    let mut line = 0;
    while text.len() + question.len() < target {
        line += 1;
        text.push_str(&format!(
            "Line {line}: context that stands in for a real workload's diff, documents and history.\n"
        ));
    }
    text.truncate(target - question.len());
    text.push_str(&question);
    text
}

/// A probe that ran: its matrix, and the run its calls were.
#[derive(Debug, Clone)]
pub struct Probed {
    /// The readiness matrix.
    pub readiness: Readiness,
    /// The run; `None` when no route could be set up, so nothing was
    /// called.
    pub outcome: Option<SessionOutcome>,
}

/// Probes every route of the config, recording the probe as one run when
/// the plan says so. Events also go to `watcher`; `cancel` stops the
/// probe (routes not probed by then are not ready).
pub async fn probe(
    plan: &ProbePlan,
    env: &[(String, String)],
    watcher: Option<Arc<dyn EventSink>>,
    cancel: &CancellationToken,
) -> Result<Readiness, ProbeError> {
    Ok(probe_run(plan, env, watcher, cancel, |_, _| {}).await?.readiness)
}

/// [`probe`], also returning the run, with `on_finish` seeing each call as
/// it ends with its verdict (as [`crate::session::run_session`]'s does):
/// what a watch round that is a probe needs to count and report it like
/// any round.
pub async fn probe_run(
    plan: &ProbePlan,
    env: &[(String, String)],
    watcher: Option<Arc<dyn EventSink>>,
    cancel: &CancellationToken,
    on_finish: impl Fn(&CallReport, &Diagnosis) + Send + Sync + 'static,
) -> Result<Probed, ProbeError> {
    let source = RunSource::Config { path: plan.config.clone(), target: None };
    let mut settings = settings_for(&source, &plan.overrides, &plan.edits, env)?;
    settings.tunables.apply_override(FAILOVER_OFF).map_err(ConfigError::from)?;
    settings.policy = CorePolicy::from_tunables(&settings.tunables).map_err(ConfigError::from)?;
    let context_tokens = match (plan.context_tokens, settings.probe.context_tokens) {
        (Some(value), _) => checked_tokens(value, || "--context-tokens".to_owned())?,
        (None, Some(value)) => checked_tokens(value, || {
            let path = settings.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            format!("config {path} [probe]")
        })?,
        (None, None) => DEFAULT_CONTEXT_TOKENS,
    };
    let rows = std::mem::take(&mut settings.providers);
    if rows.is_empty() {
        return Err(ProbeError::NoRoutes);
    }
    let routes: Vec<Target> = rows.iter().map(|r| Target::new(&r.name, &r.model)).collect();
    let problems = setup_problems(&rows, &settings.policy, env);
    let probed: Vec<usize> = (0..routes.len()).filter(|i| !problems.contains_key(&routes[*i].provider)).collect();
    if probed.is_empty() {
        return Ok(Probed { readiness: matrix(&routes, &problems, &probed, None, context_tokens), outcome: None });
    }
    let realistic = realistic_prompt(context_tokens);
    let mut calls = Vec::with_capacity(2 * probed.len());
    for (n, &route) in probed.iter().enumerate() {
        for (kind, prompt) in [(ProbeKind::Tiny, TINY_PROMPT), (ProbeKind::Realistic, realistic.as_str())] {
            calls.push(Call {
                stream: stream_of(n, kind),
                target: routes[route].clone(),
                input: CallInput {
                    prompt: prompt.to_owned(),
                    context_tokens: Some(estimated_tokens(prompt)),
                    ..CallInput::default()
                },
                not_before: None,
            });
        }
    }
    let recording = plan.recording.clone().map(|r| RecordTo { label: Some(run_label(r.label.as_deref())), ..r });
    let default_proxy = settings.policy.transport.proxy.clone();
    let providers = rows.iter().filter(|r| !problems.contains_key(&r.name)).cloned().collect();
    let list = CallList {
        settings,
        providers,
        scenario: None,
        calls,
        concurrency: plan.concurrency.max(1),
        recording,
        seed: plan.seed,
    };
    let outcome = run_call_list_recorded(list, env, watcher, cancel, on_finish).await?;
    let mut readiness = matrix(&routes, &problems, &probed, Some(&outcome.report), context_tokens);
    readiness.comparisons = compare(&rows, &default_proxy, env, |i| readiness.routes[i].realistic.as_ref());
    Ok(Probed { readiness, outcome: Some(outcome) })
}

fn checked_tokens(value: u64, origin: impl FnOnce() -> String) -> Result<u64, ProbeError> {
    match value {
        1..=MAX_CONTEXT_TOKENS => Ok(value),
        _ => Err(ProbeError::ContextTokens { origin: origin(), value }),
    }
}

/// The stream of the `n`-th probed route's probe of `kind`.
fn stream_of(n: usize, kind: ProbeKind) -> u64 {
    2 * n as u64 + u64::from(kind == ProbeKind::Realistic)
}

/// Why each provider that cannot be set up cannot, by name; its routes are
/// not probed.
fn setup_problems(rows: &[ProviderConfig], policy: &CorePolicy, env: &[(String, String)]) -> BTreeMap<String, String> {
    let clients = ClientCache::new();
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut problems = BTreeMap::new();
    let names: BTreeSet<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    for name in names {
        let own: Vec<ProviderConfig> = rows.iter().filter(|r| r.name == name).cloned().collect();
        if let Err(e) = connect(&own, policy, &clients, lookup) {
            problems.insert(name.to_owned(), e.to_string());
        }
    }
    problems
}

/// The matrix of `routes` (in config order) from the probe's report:
/// `probed` are the indices of the routes that were probed, the `n`-th of
/// them as streams `2n` and `2n + 1`; the others are in `problems` by
/// provider.
pub fn matrix(
    routes: &[Target],
    problems: &BTreeMap<String, String>,
    probed: &[usize],
    report: Option<&RunReport>,
    context_tokens: u64,
) -> Readiness {
    let find = |index: u64| report?.streams.iter().find(|s| s.index == index);
    let stream = |index: u64| find(index).and_then(result);
    let rows: Vec<RouteReadiness> = routes
        .iter()
        .enumerate()
        .map(|(i, route)| {
            let n = probed.iter().position(|p| *p == i);
            let (tiny, realistic) = match n {
                Some(n) => (stream(stream_of(n, ProbeKind::Tiny)), stream(stream_of(n, ProbeKind::Realistic))),
                None => (None, None),
            };
            // Each probe counts as a run of the route: two cuts after one
            // silence are its timer.
            let mut cuts = RouteCuts::default();
            for kind in [ProbeKind::Tiny, ProbeKind::Realistic] {
                let verdict = n.and_then(|n| find(stream_of(n, kind))).and_then(|s| s.diagnosis.as_ref());
                cuts.push_run(verdict);
            }
            let fixed_cut = cuts.fixed().first().map(|cut| cut.sentence("probes"));
            let problem = match (problems.get(&route.provider), &tiny, &realistic) {
                (Some(problem), _, _) => Some(problem.clone()),
                (None, None, _) | (None, _, None) => Some("not probed: the probe was stopped first".to_owned()),
                (None, Some(_), Some(_)) => None,
            };
            RouteReadiness { fixed_cut, ..route_row(route, problem, tiny, realistic) }
        })
        .collect();
    Readiness {
        run_id: report.and_then(|r| r.run_id),
        context_tokens,
        ready: rows.iter().filter(|r| r.ready).count(),
        routes_total: rows.len(),
        stopped: report.is_some_and(|r| r.stopped),
        routes: rows,
        comparisons: Vec::new(),
    }
}

fn result(stream: &StreamReport) -> Option<ProbeResult> {
    let diagnosis = stream.diagnosis.as_ref()?;
    Some(ProbeResult {
        stream: stream.index,
        outcome: stream.outcome,
        ttfb_ms: stream.ttfb_ms,
        elapsed_ms: stream.elapsed_ms,
        attempts: stream.attempts,
        verdict: diagnosis.kind,
        severity: diagnosis.severity,
        summary: diagnosis.summary.clone(),
        silence_ms: diagnosis.basis.idle_ms,
    })
}

/// A route's row: ready by the rule in the module documentation.
fn route_row(
    route: &Target,
    problem: Option<String>,
    tiny: Option<ProbeResult>,
    realistic: Option<ProbeResult>,
) -> RouteReadiness {
    let healthy =
        |p: &Option<ProbeResult>| p.as_ref().is_some_and(|p| p.outcome == "ok" && p.severity <= Severity::Notice);
    let worst = [&tiny, &realistic].into_iter().flatten().reduce(|a, b| if a.severity > b.severity { a } else { b });
    RouteReadiness {
        route: route.to_string(),
        ready: problem.is_none() && healthy(&tiny) && healthy(&realistic),
        problem,
        verdict: worst.map(|w| w.verdict),
        severity: worst.map(|w| w.severity),
        summary: worst.map(|w| w.summary.clone()),
        tiny,
        realistic,
        fixed_cut: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_realistic_payload_has_the_size_asked_for_and_asks_for_one_word() {
        for tokens in [1, 7, 2_000, 20_000] {
            let prompt = realistic_prompt(tokens);
            assert_eq!(estimated_tokens(&prompt), tokens.max(estimated_tokens(&format!("\n\n{TINY_PROMPT}"))));
            assert!(prompt.ends_with(TINY_PROMPT), "{tokens}");
        }
        assert!(realistic_prompt(2_000).starts_with("Line 1: "));
    }

    fn probe(stream: u64, outcome: &'static str, kind: VerdictKind, severity: Severity) -> ProbeResult {
        let summary = format!("{}: stream {stream}", kind.label());
        ProbeResult {
            stream,
            outcome,
            ttfb_ms: Some(5.0),
            elapsed_ms: 9.0,
            attempts: 1,
            verdict: kind,
            severity,
            summary,
            silence_ms: None,
        }
    }

    #[test]
    fn ready_needs_both_probes_ok_with_no_failure_even_a_recovered_one() {
        let route = Target::new("p", "m");
        let ok = |s| probe(s, "ok", VerdictKind::Healthy, Severity::Ok);
        let slow = probe(1, "ok", VerdictKind::HealthySlow, Severity::Notice);
        let recovered = probe(1, "ok", VerdictKind::SilentStall, Severity::Recovered);
        let failed = probe(1, "failed", VerdictKind::SilentStall, Severity::Failed);
        let cases = [
            (Some(ok(0)), Some(ok(1)), true, VerdictKind::Healthy),
            (Some(ok(0)), Some(slow.clone()), true, VerdictKind::HealthySlow),
            (Some(ok(0)), Some(recovered), false, VerdictKind::SilentStall),
            (Some(ok(0)), Some(failed.clone()), false, VerdictKind::SilentStall),
            (Some(failed), Some(slow), false, VerdictKind::SilentStall),
        ];
        for (tiny, realistic, ready, verdict) in cases {
            let row = route_row(&route, None, tiny.clone(), realistic.clone());
            assert_eq!((row.ready, row.verdict), (ready, Some(verdict)), "{tiny:?} {realistic:?}");
        }
        // On a tie the realistic probe's verdict is the route's.
        let row = route_row(&route, None, Some(ok(0)), Some(ok(1)));
        assert_eq!(row.summary.as_deref(), Some("healthy: stream 1"));
        let row = route_row(&route, Some("no key".to_owned()), Some(ok(0)), Some(ok(1)));
        assert!(!row.ready, "a route with a problem is never ready");
    }

    #[test]
    fn a_probe_is_labelled_once_whatever_label_it_is_given() {
        assert_eq!(run_label(None), "probe");
        assert_eq!(run_label(Some("  ")), "probe");
        assert_eq!(run_label(Some(" nightly ")), "probe: nightly");
        // A label that already says "probe" is kept, not wrapped again.
        assert_eq!(run_label(Some("probe: watch@lab")), "probe: watch@lab");
        assert_eq!(run_label(Some("probe")), "probe");
        assert_eq!(run_label(Some("probes")), "probe: probes");
        for label in [None, Some("nightly"), Some("probe: x"), Some("watch@lab")] {
            assert!(is_probe_label(&run_label(label)), "{label:?}");
        }
        assert!(!is_probe_label("watch@lab") && !is_probe_label("probes"));
    }

    #[test]
    fn unprobed_routes_say_why_and_count_as_not_ready() {
        let routes = [Target::new("a", "m1"), Target::new("b", "m"), Target::new("a", "m2")];
        let problems = BTreeMap::from([("b".to_owned(), "provider `b`: environment variable K is not set".to_owned())]);
        let readiness = matrix(&routes, &problems, &[0, 2], None, 10);
        assert_eq!((readiness.ready, readiness.routes_total, readiness.run_id), (0, 3, None));
        let problems: Vec<&str> = readiness.routes.iter().filter_map(|r| r.problem.as_deref()).collect();
        assert_eq!(problems[1], "provider `b`: environment variable K is not set");
        assert!(problems[0].contains("stopped") && problems[2].contains("stopped"), "{problems:?}");
        assert_eq!(stream_of(1, ProbeKind::Realistic), 3);
    }
}
