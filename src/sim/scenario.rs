//! Scenarios: what the simulator does on each attempt of a stream, read from
//! TOML: the built-ins, or an operator's own file (`--scenario-file`). An
//! error names the file, the line and column of the key or value at fault
//! (of the step, for a step that does not add up) and what is allowed.
//!
//! A scenario is a list of per-attempt scripts. Attempt N of a stream (the
//! N-th request carrying the same `x-stallscope-stream` header) plays script
//! N; once the list runs out, the last script repeats.
//!
//! ```toml
//! description = "A VPN drops the stream after the opening event; the retry is healthy."
//!
//! [run]                                  # hints for the CLI demo (optional)
//! primary_unreachable = false            # true: put the primary provider on a closed port
//! STALLSCOPE_SSE_IDLE_TIMEOUT_S = 1      # tunable overrides, STALLSCOPE_… = value
//! STALLSCOPE_PROVIDER_STREAM_BACKOFF_S = 0.05
//!
//! [[attempts]]                           # attempt 1
//! steps = [{ preamble = true }, { stall_ms = "forever" }]
//!
//! [[attempts]]                           # attempt 2 (and every later one)
//! status = 429
//! headers = { "retry-after-ms" = "1500" }
//!
//! [[attempts]]
//! steps = [
//!   { reasoning = "hmm ", count = 3, every_ms = 20 },
//!   { content = "tok ", count = 20, every_ms = 10 },
//! ]
//! ```
//!
//! # Large requests
//!
//! A route can answer a short prompt and stall on a realistic one (a long
//! prefill, an MTU black hole that only big uploads fall into, a gateway
//! with a body limit). An optional `[large_requests]` table gives requests
//! whose body is at least `from_bytes` long scripts of their own, in the
//! same form and counted the same way (attempt N of a stream, whatever its
//! size, plays script N of its list):
//!
//! ```toml
//! [large_requests]
//! from_bytes = 4000
//!
//! [[large_requests.attempts]]
//! steps = [{ preamble = true }, { stall_ms = "forever" }]
//! ```
//!
//! # Attempt keys
//!
//! | key | default | meaning |
//! | --- | --- | --- |
//! | `status` | 200 | HTTP status, 200–599 |
//! | `headers` | none | extra response headers, `{ "name" = "value" }` |
//! | `retry_after_date_in_s` | none | adds `retry-after: <HTTP-date>` this many seconds after the response is made (rounded up to a whole second) |
//! | `headers_delay_ms` | 0 | wait before sending the status line and headers |
//! | `content_type` | `text/event-stream` for 2xx, else `application/json` | the `content-type` header |
//! | `body` | a realistic error body of the dialect for the status | a fixed body sent instead of a stream |
//! | `steps` | none | the stream of a 2xx answer, in order (not allowed with `body` or a non-2xx status) |
//!
//! # Steps
//!
//! Each step is an inline table with exactly one of the keys below; the
//! indented keys go with it. Times are milliseconds; a wait may also be
//! `"forever"`.
//!
//! - `preamble = true`: write the dialect's opening events now (chat's role
//!   chunk, `response.created`/`response.in_progress`, `message_start`).
//!   Otherwise they go out just before the first event, so a stream that
//!   starts with a stall sends headers and not one body byte.
//! - `open_block = true`: the opening events, then the text block or output
//!   item the answer's text goes in, opened now as it is just before the
//!   first delta (Anthropic `content_block_start` and its `ping`, Responses
//!   `response.output_item.added` and `response.content_part.added`; chat
//!   has no blocks: its role chunk), so a stall can come between a block's
//!   start and its first text.
//! - `content = "TEXT"`, `count` (1), `every_ms` (0): `count` content deltas,
//!   each one `every_ms` after the previous step.
//! - `reasoning = "TEXT"`, `count`, `every_ms`: the same with reasoning deltas.
//! - `pings_every_ms = N`, `for_ms` (`"forever"`): keep-alives only (`: keep-alive`
//!   comments for OpenAI dialects, `event: ping` for Anthropic); a stall that
//!   keeps the idle timer happy.
//! - `stall_ms = N` or `"forever"`: no bytes at all, socket held open.
//! - `drip_bytes = N`, `every_ms` (0): the rest of the stream is rendered and
//!   sent N bytes at a time, one piece every `every_ms`.
//! - `buffer_ms = N`: the rest of the stream is rendered, held, and written in
//!   one piece after N ms (a buffering proxy).
//! - `long_line_bytes = N`, `hold_ms` (0): a `data:` line of N filler bytes
//!   with no newline, held for `hold_ms` before the line is ended.
//! - `invalid_utf8 = true`: a content delta whose text holds invalid UTF-8.
//! - `missing_data = true`: an `event:` line with no `data:` field.
//! - `error = "overloaded" | "server_error" | "rate_limit"`, `message`,
//!   `failed` (false): an in-stream error event in the dialect's form, then the
//!   body ends; `failed = true` makes the Responses dialect send
//!   `response.failed` instead of an `error` event.
//! - `end = true`: finish normally with the dialect's terminal events (also
//!   what happens when the steps run out).
//! - `close = true`: the body ends cleanly with no terminal event.
//! - `hangup = true`: the connection is closed (FIN) mid-body, leaving the
//!   chunked body unterminated.
//! - `reset = true`: the connection is reset (RST).
//!
//! Drip and buffer steps take over the timing of everything after them:
//! waits inside their range are dropped, and the held bytes go out when the
//! stream ends, at the next drip or buffer step, or before a forever wait, a
//! hangup or a reset. Nothing may follow a step that ends the attempt
//! (`end`, `close`, `hangup`, `reset`, `error`, or a forever wait).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use toml::Spanned;

use super::error::SimError;

/// Largest `long_line_bytes` accepted: the line is held in memory.
pub const MAX_LONG_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Largest `count`, and most pings one bounded pings step may send: the
/// stream is rendered ahead, so these bound its memory.
pub const MAX_REPEATS: u64 = 100_000;

/// Largest `retry_after_date_in_s`: a year, far inside what an HTTP-date can say.
pub const MAX_RETRY_AFTER_DATE_S: u64 = 365 * 24 * 60 * 60;

/// Headers that hyper must own because they frame the body.
pub(super) const FRAMING_HEADERS: [&str; 3] = ["content-length", "transfer-encoding", "connection"];

/// A parsed, checked scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    description: String,
    run: RunHints,
    /// Never empty: [`Scenario::from_toml`] refuses a scenario without attempts.
    attempts: Vec<Attempt>,
    /// Scripts of their own for large requests, if the scenario has them.
    large: Option<LargeRequests>,
}

/// The optional `[large_requests]` table: what requests of at least
/// `from_bytes` bytes of body get instead of the scenario's attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct LargeRequests {
    /// The smallest request body, in bytes, that counts as large.
    pub from_bytes: usize,
    /// Never empty: the per-attempt scripts of large requests.
    attempts: Vec<Attempt>,
}

impl LargeRequests {
    /// Every attempt script of large requests, in order.
    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }
}

/// The optional `[run]` table: how the CLI demo should set up a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunHints {
    /// Put the primary provider on a closed port so connecting is refused and
    /// the call fails over to the simulator.
    pub primary_unreachable: bool,
    /// Recommended tunable overrides, full `STALLSCOPE_…` name to value text.
    pub tunables: BTreeMap<String, String>,
}

/// One attempt's script.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// The response status.
    pub status: StatusCode,
    /// Extra response headers.
    pub headers: HeaderMap,
    /// Render `retry-after` as an HTTP-date this far in the future.
    pub retry_after_date_in: Option<Duration>,
    /// Wait before the status line and headers.
    pub headers_delay: Duration,
    /// The `content-type` header, when not the default.
    pub content_type: Option<HeaderValue>,
    /// A fixed body, when not the stream or the default error body.
    pub body: Option<String>,
    /// The stream of a 2xx answer without a fixed body.
    pub steps: Vec<Step>,
}

/// How long a wait lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// A bounded wait.
    For(Duration),
    /// Until the client goes away.
    Forever,
}

/// The kind of an in-stream error event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamError {
    /// The provider is overloaded (Anthropic `overloaded_error`).
    Overloaded,
    /// A generic server failure (`server_error`, Anthropic `api_error`).
    ServerError,
    /// A rate limit hit mid-stream.
    RateLimit,
}

/// One step of a streamed body; see the module documentation.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Write the dialect's opening events now.
    Preamble,
    /// Write the opening events and open the text block or output item.
    OpenBlock,
    /// Content deltas at a rate.
    Content {
        /// The text of each delta.
        text: String,
        /// How many deltas.
        count: u32,
        /// The pause before each delta.
        every: Duration,
    },
    /// Reasoning deltas at a rate.
    Reasoning {
        /// The text of each delta.
        text: String,
        /// How many deltas.
        count: u32,
        /// The pause before each delta.
        every: Duration,
    },
    /// Keep-alives only.
    Pings {
        /// The pause before each keep-alive.
        every: Duration,
        /// How long the pings go on.
        lasting: Wait,
    },
    /// No bytes, socket open.
    Stall(Wait),
    /// The rest of the stream in small pieces.
    Drip {
        /// Bytes per piece.
        bytes: usize,
        /// The pause before each piece.
        every: Duration,
    },
    /// The rest of the stream held, then written at once.
    Buffer {
        /// How long it is held.
        delay: Duration,
    },
    /// A `data:` line of filler with no newline for a while.
    LongLine {
        /// Filler bytes on the line.
        bytes: usize,
        /// How long the line stays unterminated.
        hold: Duration,
    },
    /// A content delta holding invalid UTF-8.
    InvalidUtf8,
    /// An `event:` line without a `data:` field.
    MissingData,
    /// An in-stream error event, then the body ends.
    Error {
        /// Which error.
        kind: StreamError,
        /// A message replacing the realistic default.
        message: Option<String>,
        /// Responses dialect: send `response.failed` instead of `error`.
        failed: bool,
    },
    /// Finish with the dialect's terminal events.
    End,
    /// End the body cleanly without terminal events.
    Close,
    /// Close the connection (FIN) mid-body.
    Hangup,
    /// Reset the connection (RST).
    Reset,
}

impl Step {
    /// Whether the attempt is over after this step.
    pub fn ends_attempt(&self) -> bool {
        matches!(
            self,
            Step::End
                | Step::Close
                | Step::Hangup
                | Step::Reset
                | Step::Error { .. }
                | Step::Stall(Wait::Forever)
                | Step::Pings { lasting: Wait::Forever, .. }
        )
    }
}

impl Scenario {
    /// Parses and checks a scenario; `origin` (a path or a built-in's name)
    /// is named in any error.
    pub fn from_toml(text: &str, origin: &str) -> Result<Scenario, SimError> {
        let fail = |span: &Range<usize>, detail: String| {
            let (line, column) = position(text, span);
            SimError::Scenario { origin: origin.to_owned(), line: Some(line), column: Some(column), detail }
        };
        let raw: RawScenario = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => {
                let key = key_before(text, &span).map(|k| format!("`{k}`: ")).unwrap_or_default();
                let (line, _) = position(text, &span);
                let context = text.lines().nth(line - 1).map(|l| format!(" (at `{}`)", l.trim())).unwrap_or_default();
                fail(&span, format!("{key}{}{context}", e.message().trim()))
            }
            None => SimError::Scenario {
                origin: origin.to_owned(),
                line: None,
                column: None,
                detail: e.message().trim().to_owned(),
            },
        })?;
        let run = match raw.run {
            Some(run) => check_run(run).map_err(|(span, detail)| fail(&span, format!("[run]: {detail}")))?,
            None => RunHints::default(),
        };
        let attempts = check_attempts(raw.attempts, ("[[attempts]]", "a scenario"), "", origin, &fail)?;
        let large = match raw.large_requests {
            Some(large) => {
                let from_bytes =
                    usize::try_from(*large.from_bytes.get_ref()).ok().filter(|bytes| *bytes > 0).ok_or_else(|| {
                        fail(&large.from_bytes.span(), "[large_requests]: `from_bytes` must be at least 1".to_owned())
                    })?;
                let table = ("[[large_requests.attempts]]", "[large_requests]");
                let attempts = check_attempts(large.attempts, table, "[large_requests] ", origin, &fail)?;
                Some(LargeRequests { from_bytes, attempts })
            }
            None => None,
        };
        Ok(Scenario { description: raw.description.unwrap_or_default(), run, attempts, large })
    }

    /// Reads and checks the scenario file at `path`; errors name the file.
    pub fn from_file(path: &Path) -> Result<Scenario, SimError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| SimError::Scenario {
            origin: origin.clone(),
            line: None,
            column: None,
            detail: format!("cannot be read: {e}"),
        })?;
        Scenario::from_toml(&text, &origin)
    }

    /// The story the scenario tells (empty when the file gives none).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The `[run]` hints for the CLI demo.
    pub fn run(&self) -> &RunHints {
        &self.run
    }

    /// Every attempt script, in order.
    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    /// The script of attempt `n` (1-based; 0 is read as 1); the last script
    /// repeats.
    pub fn attempt(&self, n: usize) -> &Attempt {
        nth(&self.attempts, n)
    }

    /// The `[large_requests]` table, if the scenario has one.
    pub fn large_requests(&self) -> Option<&LargeRequests> {
        self.large.as_ref()
    }

    /// The script of attempt `n` (as [`Scenario::attempt`]) of a request
    /// whose body is `request_bytes` long: a large request's own, when the
    /// scenario gives large requests scripts of their own.
    pub fn attempt_for(&self, n: usize, request_bytes: usize) -> &Attempt {
        match &self.large {
            Some(large) if request_bytes >= large.from_bytes => nth(&large.attempts, n),
            _ => self.attempt(n),
        }
    }
}

/// Script `n` (1-based; 0 is read as 1) of a non-empty list; the last
/// repeats.
fn nth(attempts: &[Attempt], n: usize) -> &Attempt {
    let last = attempts.len().saturating_sub(1);
    &attempts[n.saturating_sub(1).min(last)]
}

/// Checks one list of attempt tables. `table` is the list's name and what
/// needs it, for the error when it is empty; `prefix` goes before each
/// attempt's number in errors.
fn check_attempts(
    raw: Vec<Spanned<RawAttempt>>,
    (table, owner): (&str, &str),
    prefix: &str,
    origin: &str,
    fail: &dyn Fn(&Range<usize>, String) -> SimError,
) -> Result<Vec<Attempt>, SimError> {
    if raw.is_empty() {
        return Err(SimError::Scenario {
            origin: origin.to_owned(),
            line: None,
            column: None,
            detail: format!("no {table}; {owner} needs at least one attempt table"),
        });
    }
    let mut attempts = Vec::with_capacity(raw.len());
    for (i, attempt) in raw.into_iter().enumerate() {
        let span = attempt.span();
        let attempt = attempt.into_inner();
        let name = format!("{prefix}attempt {}", i + 1);
        let mut steps = Vec::with_capacity(attempt.steps.len());
        for (j, step) in attempt.steps.iter().enumerate() {
            let step_span = step.span();
            let step = step.get_ref().check().map_err(|d| fail(&step_span, format!("{name}, step {}: {d}", j + 1)))?;
            if steps.last().is_some_and(Step::ends_attempt) {
                return Err(fail(
                    &step_span,
                    format!("{name}, step {}: never runs, because step {j} ends the attempt", j + 1),
                ));
            }
            steps.push(step);
        }
        let attempt = attempt.check(steps).map_err(|(at, d)| fail(&at.unwrap_or(span), format!("{name}: {d}")))?;
        attempts.push(attempt);
    }
    Ok(attempts)
}

/// The 1-based line and column (in characters) where `span` starts.
fn position(text: &str, span: &Range<usize>) -> (usize, usize) {
    let before = text.get(..span.start).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

/// The key whose value starts at `span`, so a type error can name its field
/// even when several keys share a line.
fn key_before<'a>(text: &'a str, span: &Range<usize>) -> Option<&'a str> {
    let before = text.get(..span.start)?.trim_end().strip_suffix('=')?.trim_end();
    let key = before.rsplit(|c: char| c.is_whitespace() || matches!(c, '{' | ',' | '[')).next()?;
    Some(key.trim_matches('"')).filter(|k| !k.is_empty())
}

impl<'de> Deserialize<'de> for Wait {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Wait, D::Error> {
        struct WaitVisitor;
        impl Visitor<'_> for WaitVisitor {
            type Value = Wait;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of milliseconds (0 or more) or \"forever\"")
            }
            fn visit_i64<E: de::Error>(self, ms: i64) -> Result<Wait, E> {
                u64::try_from(ms)
                    .map(|ms| Wait::For(Duration::from_millis(ms)))
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(ms), &self))
            }
            fn visit_u64<E: de::Error>(self, ms: u64) -> Result<Wait, E> {
                Ok(Wait::For(Duration::from_millis(ms)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Wait, E> {
                if s == "forever" { Ok(Wait::Forever) } else { Err(E::invalid_value(de::Unexpected::Str(s), &self)) }
            }
        }
        deserializer.deserialize_any(WaitVisitor)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    description: Option<String>,
    /// Read key by key (not as a struct) so every key and value keeps its
    /// place in the file for [`check_run`]'s messages.
    run: Option<BTreeMap<Spanned<String>, Spanned<toml::Value>>>,
    #[serde(default)]
    attempts: Vec<Spanned<RawAttempt>>,
    large_requests: Option<RawLarge>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLarge {
    from_bytes: Spanned<u64>,
    #[serde(default)]
    attempts: Vec<Spanned<RawAttempt>>,
}

/// The `[run]` table: `primary_unreachable`, and tunables by full name.
/// An error carries the span of the key or value at fault.
fn check_run(table: BTreeMap<Spanned<String>, Spanned<toml::Value>>) -> Result<RunHints, (Range<usize>, String)> {
    let mut hints = RunHints::default();
    for (name, value) in table {
        let (value_span, value) = (value.span(), value.into_inner());
        if name.get_ref() == "primary_unreachable" {
            hints.primary_unreachable = value.as_bool().ok_or_else(|| {
                (
                    value_span,
                    format!("`primary_unreachable` is a TOML {}; it takes a boolean, true or false", value.type_str()),
                )
            })?;
            continue;
        }
        let (name_span, name) = (name.span(), name.into_inner());
        let well_formed = name.strip_prefix("STALLSCOPE_").is_some_and(|rest| {
            !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        });
        if !well_formed {
            return Err((
                name_span,
                format!(
                    "`{name}` is neither `primary_unreachable` nor a tunable name (STALLSCOPE_ followed by upper-case letters, digits and _)"
                ),
            ));
        }
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(x) => x.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err((
                    value_span,
                    format!("`{name}` is a TOML {}; a tunable value is a string, number or boolean", other.type_str()),
                ));
            }
        };
        hints.tunables.insert(name, text);
    }
    Ok(hints)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAttempt {
    status: Option<Spanned<u16>>,
    #[serde(default)]
    headers: BTreeMap<Spanned<String>, Spanned<String>>,
    retry_after_date_in_s: Option<Spanned<u64>>,
    #[serde(default)]
    headers_delay_ms: u64,
    content_type: Option<Spanned<String>>,
    body: Option<Spanned<String>>,
    #[serde(default)]
    steps: Vec<Spanned<RawStep>>,
}

impl RawAttempt {
    /// The attempt; an error carries the span of the key at fault, when
    /// one is (else the table's is used).
    fn check(self, steps: Vec<Step>) -> Result<Attempt, (Option<Range<usize>>, String)> {
        let status_span = self.status.as_ref().map(Spanned::span);
        let status = self.status.map_or(200, Spanned::into_inner);
        let status = StatusCode::from_u16(status)
            .ok()
            .filter(|s| (200..=599).contains(&s.as_u16()))
            .ok_or_else(|| (status_span.clone(), format!("status {status} is not allowed; use 200 to 599")))?;
        if !steps.is_empty() && !status.is_success() {
            let detail = format!("status {status} has steps; steps stream a 2xx answer (use `body` for an error body)");
            return Err((status_span, detail));
        }
        if let Some(body) = &self.body
            && !steps.is_empty()
        {
            return Err((Some(body.span()), "has both `body` and `steps`; give one".to_owned()));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let (name_span, text) = (Some(name.span()), name.get_ref());
            let header = HeaderName::from_bytes(text.as_bytes())
                .map_err(|_| (name_span.clone(), format!("header name {text:?} is not a valid HTTP header name")))?;
            if header == http::header::CONTENT_TYPE {
                return Err((
                    name_span.clone(),
                    "set the content type with `content_type`, not in `headers`".to_owned(),
                ));
            }
            if FRAMING_HEADERS.contains(&header.as_str()) {
                let detail =
                    format!("header {text:?} frames the body and is set by the server; allowed: any other header");
                return Err((name_span.clone(), detail));
            }
            let header_value = HeaderValue::from_str(value.get_ref()).map_err(|_| {
                (
                    Some(value.span()),
                    format!("header {text:?} has a value that is not valid in HTTP: {:?}", value.get_ref()),
                )
            })?;
            headers.append(header, header_value);
        }
        let retry_after_date_in = match &self.retry_after_date_in_s {
            Some(seconds) if *seconds.get_ref() > MAX_RETRY_AFTER_DATE_S => {
                let detail = format!("retry_after_date_in_s must be 0 to {MAX_RETRY_AFTER_DATE_S} (a year)");
                return Err((Some(seconds.span()), detail));
            }
            Some(seconds) if headers.contains_key(http::header::RETRY_AFTER) => {
                let detail = "has both `retry_after_date_in_s` and a `retry-after` header; give one".to_owned();
                return Err((Some(seconds.span()), detail));
            }
            Some(seconds) => Some(Duration::from_secs(*seconds.get_ref())),
            None => None,
        };
        let content_type = self
            .content_type
            .map(|ct| {
                HeaderValue::from_str(ct.get_ref()).map_err(|_| {
                    (Some(ct.span()), format!("content_type {:?} is not a valid header value", ct.get_ref()))
                })
            })
            .transpose()?;
        Ok(Attempt {
            status,
            headers,
            retry_after_date_in,
            headers_delay: Duration::from_millis(self.headers_delay_ms),
            content_type,
            body: self.body.map(Spanned::into_inner),
            steps,
        })
    }
}

/// A step as written: every key optional, sorted out by [`RawStep::check`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    preamble: Option<bool>,
    open_block: Option<bool>,
    content: Option<String>,
    reasoning: Option<String>,
    count: Option<u32>,
    every_ms: Option<u64>,
    pings_every_ms: Option<u64>,
    for_ms: Option<Wait>,
    stall_ms: Option<Wait>,
    drip_bytes: Option<usize>,
    buffer_ms: Option<u64>,
    long_line_bytes: Option<usize>,
    hold_ms: Option<u64>,
    invalid_utf8: Option<bool>,
    missing_data: Option<bool>,
    error: Option<StreamError>,
    message: Option<String>,
    failed: Option<bool>,
    end: Option<bool>,
    close: Option<bool>,
    hangup: Option<bool>,
    reset: Option<bool>,
}

/// The keys that say what a step is, each with the keys that may go with it.
const STEP_KINDS: [(&str, &[&str]); 16] = [
    ("preamble", &[]),
    ("open_block", &[]),
    ("content", &["count", "every_ms"]),
    ("reasoning", &["count", "every_ms"]),
    ("pings_every_ms", &["for_ms"]),
    ("stall_ms", &[]),
    ("drip_bytes", &["every_ms"]),
    ("buffer_ms", &[]),
    ("long_line_bytes", &["hold_ms"]),
    ("invalid_utf8", &[]),
    ("missing_data", &[]),
    ("error", &["message", "failed"]),
    ("end", &[]),
    ("close", &[]),
    ("hangup", &[]),
    ("reset", &[]),
];

impl RawStep {
    /// The keys present, in [`STEP_KINDS`] order then modifiers.
    fn keys(&self) -> Vec<&'static str> {
        let present = [
            ("preamble", self.preamble.is_some()),
            ("open_block", self.open_block.is_some()),
            ("content", self.content.is_some()),
            ("reasoning", self.reasoning.is_some()),
            ("pings_every_ms", self.pings_every_ms.is_some()),
            ("stall_ms", self.stall_ms.is_some()),
            ("drip_bytes", self.drip_bytes.is_some()),
            ("buffer_ms", self.buffer_ms.is_some()),
            ("long_line_bytes", self.long_line_bytes.is_some()),
            ("invalid_utf8", self.invalid_utf8.is_some()),
            ("missing_data", self.missing_data.is_some()),
            ("error", self.error.is_some()),
            ("end", self.end.is_some()),
            ("close", self.close.is_some()),
            ("hangup", self.hangup.is_some()),
            ("reset", self.reset.is_some()),
            ("count", self.count.is_some()),
            ("every_ms", self.every_ms.is_some()),
            ("for_ms", self.for_ms.is_some()),
            ("hold_ms", self.hold_ms.is_some()),
            ("message", self.message.is_some()),
            ("failed", self.failed.is_some()),
        ];
        present.into_iter().filter(|(_, here)| *here).map(|(key, _)| key).collect()
    }

    fn check(&self) -> Result<Step, String> {
        let keys = self.keys();
        let kinds: Vec<(&str, &[&str])> = STEP_KINDS.iter().copied().filter(|(kind, _)| keys.contains(kind)).collect();
        let all_kinds = || STEP_KINDS.map(|(kind, _)| kind).join(", ");
        let (kind, extras) = match kinds.as_slice() {
            [one] => *one,
            [] => return Err(format!("a step needs one of: {}", all_kinds())),
            many => {
                let found = many.iter().map(|(kind, _)| *kind).collect::<Vec<_>>().join(" and ");
                return Err(format!("a step has exactly one of {}; this one has {found}", all_kinds()));
            }
        };
        if let Some(stray) = keys.iter().find(|k| **k != kind && !extras.contains(k)) {
            let takes = if extras.is_empty() { "nothing else".to_owned() } else { extras.join(", ") };
            return Err(format!("`{stray}` does not go with `{kind}`; `{kind}` takes: {takes}"));
        }
        let flag = |value: Option<bool>| {
            if value == Some(false) {
                Err(format!("`{kind} = false` does nothing; write `{kind} = true` or drop the step"))
            } else {
                Ok(())
            }
        };
        let every = Duration::from_millis(self.every_ms.unwrap_or(0));
        let count = self.count.unwrap_or(1);
        if !(1..=MAX_REPEATS).contains(&u64::from(count)) {
            return Err(format!("`count` must be 1 to {MAX_REPEATS}"));
        }
        let step = match kind {
            "preamble" => flag(self.preamble).map(|()| Step::Preamble)?,
            "open_block" => flag(self.open_block).map(|()| Step::OpenBlock)?,
            "content" => Step::Content { text: self.content.clone().unwrap_or_default(), count, every },
            "reasoning" => Step::Reasoning { text: self.reasoning.clone().unwrap_or_default(), count, every },
            "pings_every_ms" => {
                let every = self.pings_every_ms.unwrap_or(0);
                let lasting = self.for_ms.unwrap_or(Wait::Forever);
                if every == 0 {
                    return Err("`pings_every_ms` must be at least 1".to_owned());
                }
                if let Wait::For(total) = lasting
                    && total.as_millis() / u128::from(every) > u128::from(MAX_REPEATS)
                {
                    return Err(format!(
                        "`for_ms` / `pings_every_ms` makes more than {MAX_REPEATS} pings; use fewer or for_ms = \"forever\""
                    ));
                }
                Step::Pings { every: Duration::from_millis(every), lasting }
            }
            "stall_ms" => Step::Stall(self.stall_ms.unwrap_or(Wait::Forever)),
            "drip_bytes" => match self.drip_bytes {
                Some(0) => return Err("`drip_bytes` must be at least 1".to_owned()),
                bytes => Step::Drip { bytes: bytes.unwrap_or(1), every },
            },
            "buffer_ms" => Step::Buffer { delay: Duration::from_millis(self.buffer_ms.unwrap_or(0)) },
            "long_line_bytes" => match self.long_line_bytes {
                Some(bytes @ 1..=MAX_LONG_LINE_BYTES) => {
                    Step::LongLine { bytes, hold: Duration::from_millis(self.hold_ms.unwrap_or(0)) }
                }
                _ => return Err(format!("`long_line_bytes` must be 1 to {MAX_LONG_LINE_BYTES}")),
            },
            "invalid_utf8" => flag(self.invalid_utf8).map(|()| Step::InvalidUtf8)?,
            "missing_data" => flag(self.missing_data).map(|()| Step::MissingData)?,
            "error" => Step::Error {
                kind: self.error.unwrap_or(StreamError::ServerError),
                message: self.message.clone(),
                failed: self.failed.unwrap_or(false),
            },
            "end" => flag(self.end).map(|()| Step::End)?,
            "close" => flag(self.close).map(|()| Step::Close)?,
            "hangup" => flag(self.hangup).map(|()| Step::Hangup)?,
            _ => flag(self.reset).map(|()| Step::Reset)?,
        };
        Ok(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, String> {
        Scenario::from_toml(text, "test.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn full_example_parses() {
        let text = r#"
description = "story"
[run]
primary_unreachable = true
STALLSCOPE_SSE_IDLE_TIMEOUT_S = 1
STALLSCOPE_PROVIDER_STREAM_BACKOFF_S = 0.05
STALLSCOPE_PARTIAL_RECOVERY = false
STALLSCOPE_BACKOFF_JITTER = "none"

[[attempts]]
steps = [{ preamble = true }, { stall_ms = "forever" }]

[[attempts]]
status = 429
headers = { "retry-after-ms" = "1500", "x-ratelimit-remaining-requests" = "0" }

[[attempts]]
status = 503
retry_after_date_in_s = 2

[[attempts]]
headers_delay_ms = 250
content_type = "text/event-stream; charset=utf-8"
steps = [
  { reasoning = "hmm ", count = 3, every_ms = 20 },
  { content = "tok ", count = 20, every_ms = 10 },
  { pings_every_ms = 100, for_ms = 300 },
  { drip_bytes = 5, every_ms = 10 },
  { long_line_bytes = 1024, hold_ms = 5 },
  { invalid_utf8 = true },
  { missing_data = true },
  { buffer_ms = 50 },
  { stall_ms = 20 },
  { error = "overloaded", failed = true, message = "busy" },
]
"#;
        let scenario = parse(text).unwrap();
        assert_eq!(scenario.description(), "story");
        assert!(scenario.run().primary_unreachable);
        let tunables = &scenario.run().tunables;
        assert_eq!(tunables["STALLSCOPE_SSE_IDLE_TIMEOUT_S"], "1");
        assert_eq!(tunables["STALLSCOPE_PROVIDER_STREAM_BACKOFF_S"], "0.05");
        assert_eq!(tunables["STALLSCOPE_PARTIAL_RECOVERY"], "false");
        assert_eq!(tunables["STALLSCOPE_BACKOFF_JITTER"], "none");
        assert_eq!(scenario.attempts().len(), 4);
        assert_eq!(scenario.attempt(1).steps, vec![Step::Preamble, Step::Stall(Wait::Forever)]);
        assert_eq!(scenario.attempt(2).status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(scenario.attempt(2).headers["retry-after-ms"], "1500");
        assert_eq!(scenario.attempt(3).retry_after_date_in, Some(Duration::from_secs(2)));
        let last = scenario.attempt(4);
        assert_eq!(last.headers_delay, Duration::from_millis(250));
        assert_eq!(last.steps.len(), 10);
        assert_eq!(
            last.steps[2],
            Step::Pings { every: Duration::from_millis(100), lasting: Wait::For(Duration::from_millis(300)) }
        );
        assert_eq!(
            last.steps[9],
            Step::Error { kind: StreamError::Overloaded, message: Some("busy".to_owned()), failed: true }
        );
        // The last script repeats.
        assert_eq!(scenario.attempt(9), last);
        assert_eq!(scenario.attempt(0), scenario.attempt(1));
    }

    #[test]
    fn defaults_apply() {
        let scenario = parse("[[attempts]]\nsteps = [{ content = \"x\" }]").unwrap();
        let attempt = scenario.attempt(1);
        assert_eq!(attempt.status, StatusCode::OK);
        assert_eq!(attempt.steps, vec![Step::Content { text: "x".to_owned(), count: 1, every: Duration::ZERO }]);
        assert_eq!(scenario.run(), &RunHints::default());
        assert_eq!(scenario.description(), "");
    }

    #[test]
    fn large_requests_play_their_own_scripts_counted_with_the_others() {
        let text = r#"
[[attempts]]
steps = [{ content = "small" }]

[large_requests]
from_bytes = 100

[[large_requests.attempts]]
steps = [{ preamble = true }, { stall_ms = "forever" }]

[[large_requests.attempts]]
status = 503
"#;
        let scenario = parse(text).unwrap();
        let small = scenario.attempt(1);
        assert_eq!(scenario.large_requests().map(|l| (l.from_bytes, l.attempts().len())), Some((100, 2)));
        assert_eq!(scenario.attempt_for(1, 99), small);
        assert_eq!(scenario.attempt_for(1, 100).steps, vec![Step::Preamble, Step::Stall(Wait::Forever)]);
        assert_eq!(scenario.attempt_for(2, 5000).status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(scenario.attempt_for(7, 5000).status, StatusCode::SERVICE_UNAVAILABLE, "the last repeats");
        assert_eq!(scenario.attempt_for(7, 10), small);
        // Without the table, size changes nothing.
        let plain = parse("[[attempts]]\nsteps = [{ content = \"x\" }]").unwrap();
        assert_eq!((plain.large_requests(), plain.attempt_for(1, 1 << 20)), (None, plain.attempt(1)));
    }

    #[test]
    fn bad_large_requests_tables_say_where_and_what() {
        let base = "[[attempts]]\nstatus = 200\n";
        let cases: &[(&str, &[&str])] = &[
            (
                "[large_requests]\nfrom_bytes = 0\n[[large_requests.attempts]]",
                &["line 4, column 14", "`from_bytes` must be at least 1"],
            ),
            ("[large_requests]\nfrom_bytes = 10", &["no [[large_requests.attempts]]", "at least one attempt"]),
            ("[large_requests]\n[[large_requests.attempts]]", &["from_bytes"]),
            (
                "[large_requests]\nfrom_bytes = 10\n[[large_requests.attempts]]\nsteps = [{ reset = true }, { end = true }]",
                &["line 6", "[large_requests] attempt 1, step 2: never runs"],
            ),
            ("[large_requests]\nfrom_bytes = 10\nsize = 3", &["size", "from_bytes"]),
        ];
        for (tail, words) in cases {
            let message = parse(&format!("{base}{tail}")).unwrap_err();
            for word in *words {
                assert!(message.contains(word), "{tail:?} gave {message}, missing {word:?}");
            }
            assert!(!message.contains('\n'), "one line: {message}");
        }
    }

    /// Each bad file, the line and column the error must name (where the
    /// offending key or value starts, or the step's table), and words it
    /// must hold.
    #[test]
    fn bad_files_name_line_column_field_and_what_is_allowed() {
        let cases: &[(&str, (usize, usize), &[&str])] = &[
            ("[[attempts]]\nstatus = \"x\"", (2, 10), &["`status`: invalid type", "u16"]),
            ("[[attempts]]\nsteps = [{ content = \"a\", every_ms = -1 }]", (2, 38), &["`every_ms`: invalid value"]),
            ("[[attempts]]\nheaders = { \"retry-after\" = 2 }", (2, 29), &["`retry-after`:", "expected a string"]),
            ("[run]\nprimary_unreachable = \"yes\"\n[[attempts]]", (2, 23), &["`primary_unreachable`", "boolean"]),
            ("[[attempts]]\nstatsu = 200", (2, 1), &["statsu", "expected one of `status`"]),
            ("descripton = \"x\"\n[[attempts]]", (1, 1), &["descripton", "`description`, `run`, `attempts`"]),
            ("[[attempts]]\nstatus = 700", (2, 10), &["attempt 1", "200 to 599"]),
            (
                "[[attempts]]\nsteps = [\n  { content = \"a\" },\n  { contnet = \"a\" },\n]",
                (4, 5),
                &["contnet", "reasoning"],
            ),
            ("[[attempts]]\nsteps = [{ content = \"a\", stall_ms = 5 }]", (2, 10), &["step 1", "content and stall_ms"]),
            ("[[attempts]]\nsteps = [{ stall_ms = 5, count = 2 }]", (2, 10), &["`count` does not go with `stall_ms`"]),
            ("[[attempts]]\nsteps = [{ stall_ms = \"never\" }]", (2, 23), &["forever", "milliseconds"]),
            ("[[attempts]]\nsteps = [{ error = \"boom\" }]", (2, 20), &["boom", "overloaded", "rate_limit"]),
            ("[[attempts]]\nsteps = [{ reset = true }, { content = \"a\" }]", (2, 28), &["step 2", "never runs"]),
            ("[[attempts]]\nsteps = [{ reset = false }]", (2, 10), &["reset = true"]),
            ("[[attempts]]\nsteps = [{ count = 2 }]", (2, 10), &["needs one of", "content"]),
            ("[[attempts]]\nsteps = [{ content = \"a\", count = 0 }]", (2, 10), &["`count` must be 1 to 100000"]),
            ("[[attempts]]\nsteps = [{ pings_every_ms = 1, for_ms = 1000000 }]", (2, 10), &["more than 100000 pings"]),
            ("[[attempts]]\nsteps = [{ long_line_bytes = 0 }]", (2, 10), &["long_line_bytes", "1 to"]),
            ("\n[[attempts]]\nstatus = 429\nsteps = [{ content = \"a\" }]", (3, 10), &["attempt 1", "2xx"]),
            ("[[attempts]]\nbody = \"x\"\nsteps = [{ end = true }]", (2, 8), &["both `body` and `steps`"]),
            ("[[attempts]]\nheaders = { \"é\" = \"1\", \"bad name\" = \"1\" }", (2, 24), &["bad name"]),
            (
                "[[attempts]]\nheaders = { \"content-length\" = \"1\" }",
                (2, 13),
                &["content-length", "set by the server"],
            ),
            ("[[attempts]]\nheaders = { \"x-a\" = \"\\u0001\" }", (2, 21), &["x-a", "not valid in HTTP"]),
            ("[[attempts]]\nstatus = 503\nretry_after_date_in_s = 99999999", (3, 25), &["0 to 31536000"]),
            ("[[attempts]]\nheaders = { \"retry-after\" = \"1\" }\nretry_after_date_in_s = 1", (3, 25), &["give one"]),
            ("[[attempts]]\ncontent_type = \"a\\nb\"", (2, 16), &["content_type", "not a valid header value"]),
            ("[run]\nIDLE = 1\n[[attempts]]", (2, 1), &["[run]", "IDLE", "STALLSCOPE_"]),
            ("[run]\nSTALLSCOPE_X = [1]\n[[attempts]]", (2, 16), &["STALLSCOPE_X", "array"]),
        ];
        for (text, (line, column), words) in cases {
            let message = parse(text).unwrap_err();
            let at = format!("scenario test.toml, line {line}, column {column}: ");
            assert!(message.starts_with(&at), "{text:?} gave {message}");
            for word in *words {
                assert!(message.contains(word), "{text:?} gave {message}, missing {word:?}");
            }
            assert!(!message.contains('\n'), "one line: {message}");
        }
        let message = parse("description = \"x\"").unwrap_err();
        assert!(message.contains("needs at least one attempt"), "{message}");
    }
}
