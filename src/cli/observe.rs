//! `stallscope observe`: the recording streaming proxy ([`crate::observe`])
//! in front of an agent: one line per finished call, the run recorded
//! until Ctrl-C.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;

use super::Cli;
use super::run::{RecordArgs, until_ctrl_c};
use super::service::{KeepArgs, OtlpArgs};
use crate::config::process_env;
use crate::observe::{ObserveEvent, ObservePlan, ObserveSource, ObservedCall, Observer, Service};
use crate::watch::parse_every;

/// Options of `stallscope observe`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Point the agent at the proxy: OPENAI_BASE_URL=http://127.0.0.1:8787/v1 (with --upstream \
https://api.openai.com), ANTHROPIC_BASE_URL=http://127.0.0.1:8787, or with a config's routes \
http://127.0.0.1:8787/<provider> for the [[provider]] row of that name.

Requests and responses pass through unchanged, the agent's key included; responses come back chunk \
by chunk as they are read. Nothing is retried, timed out or changed: the agent's own behaviour is what \
is recorded. Each call is a stream of one run labelled observe@ADDR (runs show, export, whatif and tune \
read it like any run); the request headers, keys included, are never recorded.

A long-running observer: --rotate starts a new run every interval (the database keeps them as --keep \
says), --site names where it runs (its runs and metrics are labelled observe@SITE), --metrics-addr serves the \
Prometheus metrics `watch` serves, --otlp sends each call once it is over as a trace. A call is over when it \
ended well, or when the agent can no longer retry it (--retry-window).

--guard puts stallscope's core in force instead of watching: the runs are labelled guard@ADDR (guard@SITE), \
and an agent's streamed call is retried before content and ended in its dialect's terms after it \
(GUARD_AFTER_CONTENT); see the README's Guard section.

Ctrl-C stops: calls in flight end cancelled, and the run is recorded as stopped.")]
pub struct Args {
    /// Where to listen (loopback unless --allow-remote).
    #[arg(long, default_value = "127.0.0.1:8787")]
    listen: SocketAddr,
    /// Listen on a non-loopback address: other machines' requests are
    /// forwarded, with their keys, to the upstream.
    #[arg(long)]
    allow_remote: bool,
    /// The one upstream, e.g. https://api.openai.com; a path prefixes every
    /// request's (default: one route per [[provider]] of the config, under
    /// its name).
    #[arg(long, value_name = "URL", conflicts_with = "scenario")]
    upstream: Option<String>,
    /// Serve a built-in scenario's simulator behind the proxy: no key, no
    /// network (`stallscope sim --list` names them).
    #[arg(long, value_name = "NAME")]
    scenario: Option<String>,
    /// Start a new run every interval (10m, 1h, 1d), once the last one has
    /// had a call, as watch rounds do; the database keeps them as --keep
    /// says.
    #[arg(long, value_name = "DURATION", value_parser = parse_every)]
    rotate: Option<Duration>,
    /// Where this observer runs: its runs are labelled observe@SITE, and so
    /// is the `site` of its metrics (default: the listen address).
    #[arg(long, value_name = "NAME")]
    site: Option<String>,
    /// Serve Prometheus metrics on /metrics at HOST:PORT (the metrics
    /// `watch` serves: calls by route, outcome and verdict, TTFB,
    /// detection and duration histograms, our timers' would-fire counts,
    /// our own runtime's lag).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// How long after a call that failed or was cut a request with the
    /// same body counts as the agent's retry of it (an attempt of the same
    /// call); a call is counted and sent as a trace once no retry of it can
    /// come.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_every)]
    retry_window: Duration,
    /// Act on the agent's streamed calls with stallscope's core under the
    /// tunables in force: before content, a stall, a failure or a retryable
    /// answer is retried (with the core's backoff, budgets, Retry-After and
    /// failover) and the agent gets one well-formed response; after
    /// content, a stall ends the stream in the dialect's own terms
    /// (GUARD_AFTER_CONTENT). Every guarded response carries
    /// x-stallscope-guard: on.
    #[arg(long)]
    guard: bool,
    #[command(flatten)]
    keep: KeepArgs,
    #[command(flatten)]
    otlp: OtlpArgs,
    #[command(flatten)]
    record: RecordArgs,
}

/// Call lines that may wait for a slow stdout.
const LINES: usize = 4096;

pub(super) fn run(cli: &Cli, args: &Args, out: &mut dyn Write) -> Result<()> {
    let source = match (&args.upstream, &args.scenario) {
        (Some(url), _) => ObserveSource::Upstream(url.clone()),
        (None, Some(name)) => ObserveSource::Scenario(name.clone()),
        (None, None) => ObserveSource::Config(cli.config_path()),
    };
    let env = process_env();
    let plan = ObservePlan {
        listen: args.listen,
        allow_remote: args.allow_remote,
        source,
        config: cli.config_path(),
        overrides: cli.overrides.clone(),
        edits: Vec::new(),
        recording: args.record.recording()?,
        guard: args.guard,
        service: Service {
            rotate: args.rotate,
            retention: Some(args.keep.retention()),
            site: args.site.clone(),
            metrics_addr: args.metrics_addr,
            otlp: args.otlp.destination(&env)?,
            retry_window: Some(args.retry_window),
        },
    };
    let written = &mut *out;
    let outcome = until_ctrl_c(|cancel| async move {
        let out = written;
        let observer = Observer::bind(&plan, &env).await?;
        let refusals = observer.refusals();
        let doing = if observer.guards() { "guarding" } else { "observing" };
        eprintln!("stallscope: {doing} on http://{} → {}", observer.addr(), observer.routes());
        // One line a call as it ends, written here: `out` is this thread's;
        // what goes to stderr is written where it happens.
        // At most LINES wait for a slow stdout; past them a line is
        // counted, not kept.
        let (lines, mut line) = tokio::sync::mpsc::channel(LINES);
        let unprinted = Arc::new(AtomicU64::new(0));
        let missed = Arc::clone(&unprinted);
        let run = observer.run_watched(&cancel, None, move |event| {
            if let Some(text) = event_line(&event)
                && lines.try_send(text).is_err()
            {
                missed.fetch_add(1, Ordering::Relaxed);
            }
        });
        tokio::pin!(run);
        loop {
            tokio::select! {
                outcome = &mut run => {
                    while let Ok(text) = line.try_recv() {
                        writeln!(out, "{text}")?;
                    }
                    break anyhow::Ok((outcome?, refusals, unprinted.load(Ordering::Relaxed)));
                }
                Some(text) = line.recv() => {
                    writeln!(out, "{text}")?;
                    out.flush()?;
                }
            }
        }
    })??;
    let (outcome, refusals, unprinted) = outcome;
    let report = &outcome.report;
    let recorded = report.run_id.map(|id| format!("; recorded as run {id}")).unwrap_or_default();
    let dropped = match outcome.dropped_events {
        0 => String::new(),
        n => format!("; {n} events the recorder fell behind on were not kept"),
    };
    let unreplayed = match outcome.unreplayed_calls {
        0 => String::new(),
        n => format!("; {n} calls the would-fire replay fell behind on were not replayed"),
    };
    let refused = refusals.words().map(|said| format!("; the proxy's limits acted: {said}")).unwrap_or_default();
    let unprinted = match unprinted {
        0 => String::new(),
        n => format!("; {n} lines stdout fell behind on were not printed"),
    };
    writeln!(out, "{}{recorded}{dropped}{unreplayed}{refused}{unprinted}", report.summary_line())?;
    Ok(())
}

/// The line of `event` on stdout, when it has one; what is said on
/// stderr is said here.
fn event_line(event: &ObserveEvent<'_>) -> Option<String> {
    match event {
        ObserveEvent::Serving(addr) => eprintln!("stallscope: serving metrics on http://{addr}/metrics"),
        ObserveEvent::Call(call) => return Some(call_line(call)),
        ObserveEvent::Rotated(ended) => {
            let report = &ended.outcome.report;
            let mut line = format!("run {}", report.summary_line());
            if let Some(id) = report.run_id {
                line.push_str(&format!(", recorded as run {id}"));
            }
            if ended.outcome.dropped_events > 0 {
                line.push_str(&format!(
                    ", {} events the recorder fell behind on not kept",
                    ended.outcome.dropped_events
                ));
            }
            if ended.outcome.unreplayed_calls > 0 {
                line.push_str(&format!(
                    ", {} calls the would-fire replay fell behind on not replayed",
                    ended.outcome.unreplayed_calls
                ));
            }
            if !ended.deleted.is_empty() {
                line.push_str(&format!(", {} old runs deleted", ended.deleted.len()));
            }
            if let Some(error) = &ended.error {
                eprintln!("stallscope: {error}");
            }
            return Some(line);
        }
        ObserveEvent::NotRotated(error) => {
            eprintln!("stallscope: a new run could not be recorded ({error}); the run in force goes on")
        }
        ObserveEvent::Traces(Err(why)) => eprintln!("stallscope: traces not sent: {why}"),
        ObserveEvent::Traces(Ok(_)) => {}
    }
    None
}

/// `stream 3  upstream/gpt-4o  ok  ttfb 212 ms  1840 ms  healthy: …`, and
/// what our clocks would have done when one would have fired.
fn call_line(call: &ObservedCall) -> String {
    let r = &call.report;
    let ttfb = r.ttfb.map_or_else(|| "-".to_owned(), |t| format!("{} ms", t.as_millis()));
    let would = call.would_fire.as_ref().map(|w| format!(" ({})", w.words())).unwrap_or_default();
    let got = call.delivered.map(|d| format!("; the agent got {}", d.words())).unwrap_or_default();
    format!(
        "stream {}  {}  {}  ttfb {ttfb}  {} ms  {}{would}{got}",
        r.stream,
        r.target,
        r.outcome.name(),
        r.elapsed.as_millis(),
        call.verdict.summary
    )
}
