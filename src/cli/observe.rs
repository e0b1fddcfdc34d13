//! `stallscope observe`: the recording streaming proxy ([`crate::observe`])
//! in front of an agent: one line per finished call, the run recorded
//! until Ctrl-C.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Result;

use super::Cli;
use super::run::{RecordArgs, until_ctrl_c};
use crate::config::process_env;
use crate::observe::{ObservePlan, ObserveSource, ObservedCall, Observer};

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
    #[command(flatten)]
    record: RecordArgs,
}

pub(super) fn run(cli: &Cli, args: &Args, out: &mut dyn Write) -> Result<()> {
    let source = match (&args.upstream, &args.scenario) {
        (Some(url), _) => ObserveSource::Upstream(url.clone()),
        (None, Some(name)) => ObserveSource::Scenario(name.clone()),
        (None, None) => ObserveSource::Config(cli.config_path()),
    };
    let plan = ObservePlan {
        listen: args.listen,
        allow_remote: args.allow_remote,
        source,
        config: cli.config_path(),
        overrides: cli.overrides.clone(),
        edits: Vec::new(),
        recording: args.record.recording()?,
    };
    let env = process_env();
    let written = &mut *out;
    let outcome = until_ctrl_c(|cancel| async move {
        let out = written;
        let observer = Observer::bind(&plan, &env).await?;
        eprintln!("stallscope: observing on http://{} → {}", observer.addr(), observer.routes());
        // One line a call as it ends, written here: `out` is this thread's.
        let (lines, mut line) = tokio::sync::mpsc::unbounded_channel();
        let run = observer.run(&cancel, None, move |call| {
            let _ = lines.send(call_line(call));
        });
        tokio::pin!(run);
        loop {
            tokio::select! {
                outcome = &mut run => {
                    while let Ok(text) = line.try_recv() {
                        writeln!(out, "{text}")?;
                    }
                    break anyhow::Ok(outcome?);
                }
                Some(text) = line.recv() => {
                    writeln!(out, "{text}")?;
                    out.flush()?;
                }
            }
        }
    })??;
    let report = &outcome.report;
    let recorded = report.run_id.map(|id| format!("; recorded as run {id}")).unwrap_or_default();
    let dropped = match outcome.dropped_events {
        0 => String::new(),
        n => format!("; {n} events the recorder fell behind on were not kept"),
    };
    writeln!(out, "{}{recorded}{dropped}", report.summary_line())?;
    Ok(())
}

/// `stream 3  upstream/gpt-4o  ok  ttfb 212 ms  1840 ms  healthy: …`, and
/// what our clocks would have done when one would have fired.
fn call_line(call: &ObservedCall) -> String {
    let r = &call.report;
    let ttfb = r.ttfb.map_or_else(|| "-".to_owned(), |t| format!("{} ms", t.as_millis()));
    let would = call.would_fire.as_ref().map(|w| format!(" ({})", w.words())).unwrap_or_default();
    format!(
        "stream {}  {}  {}  ttfb {ttfb}  {} ms  {}{would}",
        r.stream,
        r.target,
        r.outcome.name(),
        r.elapsed.as_millis(),
        call.verdict.summary
    )
}
