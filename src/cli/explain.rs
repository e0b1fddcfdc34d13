//! `stallscope explain`: how one failure would be classified with the
//! configured rules, naming each rule tried and the one that matched. The
//! failure is given on the command line (status, headers, body, or another
//! kind of failure) or taken from a recorded attempt.

use std::io::Write;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::Cli;
use super::runs::DbArg;
use crate::core::category::TimerKind;
use crate::core::classify::{ERROR_KINDS, Explanation};
use crate::core::event::{AttemptEnd, Event, EventKind, StreamId};
use crate::core::failure::{Failure, TransportKind};
use crate::replay::recording::{RecordedAttempt, stream};
use crate::store::RunId;

/// Options of `stallscope explain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The response's HTTP status.
    #[arg(long, value_name = "CODE")]
    status: Option<u16>,
    /// A response header, `NAME: VALUE` (repeat for more).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// The response body, or the message of an in-stream error, a transport
    /// failure or a malformed stream.
    #[arg(long)]
    body: Option<String>,
    /// The content type of a 2xx response that is not an event stream.
    #[arg(long, value_name = "TYPE")]
    content_type: Option<String>,
    /// The kind of failure, as a classifier rule's `error_kind` names it
    /// (http, content_type, in_stream, malformed, timeout, a transport kind
    /// such as reset or refused), or cancelled (default: http with
    /// --status, timeout with --timer).
    #[arg(long, value_name = "KIND")]
    kind: Option<String>,
    /// The timer that fired, `NAME[:SECONDS]` (connect, ttfb, idle,
    /// data_stall, min_rate, total, deadline).
    #[arg(long, value_name = "NAME[:SECONDS]")]
    timer: Option<String>,
    /// The provider's error code of an in-stream error.
    #[arg(long)]
    code: Option<String>,
    /// Take the failure from this recorded run…
    #[arg(long, value_name = "ID", requires = "stream", conflicts_with_all = ["status", "headers", "body", "content_type", "kind", "timer", "code"])]
    run: Option<RunId>,
    /// …and this stream of it…
    #[arg(long, value_name = "N", requires = "run")]
    stream: Option<StreamId>,
    /// …and this attempt (default: its last failed attempt).
    #[arg(long, value_name = "K", requires = "run")]
    attempt: Option<u32>,
    #[command(flatten)]
    db: DbArg,
}

pub(super) fn run(cli: &Cli, args: &Args, out: &mut dyn Write) -> Result<()> {
    let classifier = cli.settings()?.classifier;
    let (failure, recorded) = match (args.run, args.stream) {
        (Some(run), Some(stream)) => {
            let (failure, recorded) = recorded_failure(args, run, stream)?;
            (failure, Some(recorded))
        }
        _ => (given_failure(args)?, None),
    };
    if let Some(recorded) = &recorded {
        writeln!(out, "{}, with the headers the recorder keeps", recorded.attempt)?;
    }
    let explanation = classifier.explain(&failure, SystemTime::now());
    print(&explanation, classifier.rules().len(), out)?;
    if let Some(verdict) = recorded.and_then(|r| r.verdict) {
        writeln!(out, "recorded verdict (the run's own rules): {verdict}")?;
    }
    Ok(())
}

/// The failure the command line describes.
fn given_failure(args: &Args) -> Result<Failure> {
    let kind = match (&args.kind, &args.timer, args.status) {
        (Some(kind), _, _) => kind.trim().to_ascii_lowercase(),
        (None, Some(_), _) => "timeout".to_owned(),
        (None, None, Some(status)) if (200..300).contains(&status) => "content_type".to_owned(),
        (None, None, Some(_)) => "http".to_owned(),
        (None, None, None) => bail!(
            "explain needs a failure: give --status (with --header, --body), --kind, --timer, or --run and --stream"
        ),
    };
    let body = args.body.clone().unwrap_or_default();
    let response = matches!(kind.as_str(), "http" | "content_type");
    for (given, flag) in [
        (args.status.is_some(), "--status"),
        (!args.headers.is_empty(), "--header"),
        (args.content_type.is_some(), "--content-type"),
    ] {
        if given && !response {
            bail!("{flag} does not go with --kind {kind}; it describes a response (--kind http or content_type)");
        }
    }
    if args.code.is_some() && kind != "in_stream" {
        bail!("--code does not go with --kind {kind}; it is the code of an in-stream error (--kind in_stream)");
    }
    if args.timer.is_some() && kind != "timeout" {
        bail!("--timer does not go with --kind {kind}; a timer that fired is --kind timeout");
    }
    Ok(match kind.as_str() {
        "http" => {
            let status = args.status.context("--kind http needs --status")?;
            if !(100..600).contains(&status) || (200..300).contains(&status) {
                bail!("--status {status} is not accepted for --kind http; allowed: 100 to 599 outside 2xx");
            }
            Failure::Http { status, headers: Box::new(headers(&args.headers)?), body }
        }
        "content_type" => {
            let status = args.status.unwrap_or(200);
            if !(200..300).contains(&status) {
                bail!("--status {status} is not accepted for --kind content_type; allowed: 200 to 299");
            }
            Failure::UnexpectedContentType {
                status,
                content_type: args.content_type.clone(),
                headers: Box::new(headers(&args.headers)?),
                body,
            }
        }
        "in_stream" => Failure::InStream { code: args.code.clone(), message: body },
        "malformed" => Failure::Malformed { message: body },
        "cancelled" => Failure::Cancelled,
        "timeout" => {
            let (timer, after) = timer(args.timer.as_deref().context("--kind timeout needs --timer NAME[:SECONDS]")?)?;
            Failure::Timeout { timer, after }
        }
        other => match TransportKind::ALL.iter().find(|k| k.name() == other) {
            Some(&kind) => Failure::Transport { kind, message: body },
            None => bail!("--kind {other} is not accepted; allowed: {}, cancelled", ERROR_KINDS.join(", ")),
        },
    })
}

fn headers(given: &[String]) -> Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    for text in given {
        let parsed = text.split_once(':').and_then(|(name, value)| {
            Some((HeaderName::try_from(name.trim()).ok()?, HeaderValue::try_from(value.trim()).ok()?))
        });
        let Some((name, value)) = parsed else {
            bail!("--header {text:?} is not accepted; allowed: NAME: VALUE with a valid header name and value");
        };
        headers.append(name, value);
    }
    Ok(headers)
}

fn timer(text: &str) -> Result<(TimerKind, Duration)> {
    let (name, seconds) = text.split_once(':').unwrap_or((text, "0"));
    let names: Vec<&str> = TimerKind::ALL.iter().map(|t| t.name()).collect();
    let Some(&timer) = TimerKind::ALL.iter().find(|t| t.name() == name.trim()) else {
        bail!("--timer {text} is not accepted; allowed: {}, optionally :SECONDS", names.join(", "));
    };
    let Some(after) = seconds.trim().parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok()) else {
        bail!("--timer {text} is not accepted; SECONDS must be a number of seconds of 0 or more");
    };
    Ok((timer, after))
}

/// Where a recorded failure came from, and what the run made of it.
struct Recorded {
    /// `attempt K of stream N of run R`.
    attempt: String,
    /// The verdict recorded for it.
    verdict: Option<String>,
}

/// The failure of a recorded attempt.
fn recorded_failure(args: &Args, run: RunId, id: StreamId) -> Result<(Failure, Recorded)> {
    let store = args.db.open()?;
    store.run(run)?.with_context(|| format!("no run {run} in the store"))?;
    let events = store.events(run, id)?;
    if events.is_empty() {
        bail!("run {run} has no stream {id}");
    }
    let recorded = stream(id, &events, &store.recorded_run(run)?);
    let failed = |a: &&RecordedAttempt| !a.completed() && a.ended.is_some();
    let attempt = match args.attempt {
        Some(k) => recorded.attempts.iter().find(|a| a.ordinal == k).with_context(|| {
            format!("stream {id} of run {run} has no attempt {k}; it made {}", recorded.attempts.len())
        })?,
        None => recorded
            .attempts
            .iter()
            .rev()
            .find(failed)
            .with_context(|| format!("stream {id} of run {run} has no failed attempt to explain"))?,
    };
    let k = attempt.ordinal;
    let Some((_, end)) = &attempt.ended else {
        bail!("attempt {k} of stream {id} has no recorded end: nothing to classify");
    };
    // The recorded message is the failure as described; the description's
    // own words come off to leave what the client or server said.
    let message = attempt.message.clone().unwrap_or_default();
    let said = |prefix: &str| message.strip_prefix(prefix).unwrap_or(&message).to_owned();
    let failure = match end {
        AttemptEnd::Done => bail!("attempt {k} of stream {id} completed: nothing to classify"),
        AttemptEnd::Cancelled => Failure::Cancelled,
        AttemptEnd::Transport { kind } => {
            Failure::Transport { kind: *kind, message: said(&format!("{}: ", kind.describe())) }
        }
        AttemptEnd::Timer { timer } => Failure::Timeout { timer: *timer, after: budget(&events, k, *timer) },
        AttemptEnd::InStream { code } => {
            let prefix =
                code.as_ref().map_or_else(|| "in-stream error: ".to_owned(), |c| format!("in-stream error {c}: "));
            Failure::InStream { code: code.clone(), message: said(&prefix) }
        }
        AttemptEnd::Malformed => Failure::Malformed { message: said("malformed stream: ") },
        AttemptEnd::Status { status } => {
            let response = attempt.response.as_ref().context("the recorded status came without its response")?;
            let pairs: Vec<String> = response.headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
            let headers = Box::new(headers(&pairs)?);
            let body = response.error_body.clone().unwrap_or_default();
            if (200..300).contains(status) {
                Failure::UnexpectedContentType {
                    status: *status,
                    content_type: response.content_type.clone(),
                    headers,
                    body,
                }
            } else {
                Failure::Http { status: *status, headers, body }
            }
        }
    };
    let verdict = events.iter().find_map(|e| match &e.kind {
        EventKind::ErrorClassified { category, rule, .. } if e.attempt == k => Some(format!("{category} by {rule}")),
        _ => None,
    });
    Ok((failure, Recorded { attempt: format!("attempt {k} of stream {id} of run {run}"), verdict }))
}

/// The budget of the timer that fired in attempt `k`.
fn budget(events: &[Event], k: u32, timer: TimerKind) -> Duration {
    events
        .iter()
        .find_map(|e| match e.kind {
            EventKind::TimerFired { timer: fired, after, .. } if e.attempt == k && fired == timer => Some(after),
            _ => None,
        })
        .unwrap_or_default()
}

fn print(explanation: &Explanation, user_rules: usize, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "failure: {}", explanation.failure)?;
    let users = match user_rules {
        0 => "no user rules".to_owned(),
        1 => "1 user rule".to_owned(),
        n => format!("{n} user rules"),
    };
    writeln!(out, "rules tried, in order ({users}, then the built-ins for {}):", explanation.builtins)?;
    for check in &explanation.tried {
        let mark = if check.matched { "MATCH" } else { "no" };
        writeln!(out, "  {mark:<5} {}: {}", check.rule, check.why)?;
    }
    let c = &explanation.classification;
    writeln!(out, "verdict: {} by {}; {}", c.category, c.rule, explanation.retryable_because)?;
    if let Some(delay) = &c.server_delay {
        writeln!(out, "the server asked to wait {:.3} s (header value {:?})", delay.delay.as_secs_f64(), delay.raw)?;
    }
    Ok(())
}
