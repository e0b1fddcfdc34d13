//! The classifier: maps an attempt's failure to a category, and says which
//! rule decided.
//!
//! User rules (from config) are checked first, in order, and the first whose
//! every condition holds wins; then the built-in rules, in the order of
//! [`builtin`]; anything unmatched is `permanent` (seed 004: "a
//! classification of permanent is the registry's way of saying I have no
//! rule for this").

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::category::{Category, TimerKind};
use super::event::EventKind;
use super::failure::{Failure, TransportKind};
use super::ratelimit::RateLimits;
use super::retry_after::{DelaySource, ServerDelay, server_delay};

/// A user rule: every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A name for explanations; defaults to the rule's position.
    #[serde(default)]
    pub name: Option<String>,
    /// The HTTP status must equal this.
    #[serde(default)]
    pub status: Option<u16>,
    /// This response header must be present.
    #[serde(default)]
    pub header: Option<String>,
    /// …and its value must contain this (case-insensitive).
    #[serde(default)]
    pub header_contains: Option<String>,
    /// The body or in-stream error must contain this (case-insensitive).
    #[serde(default)]
    pub body_contains: Option<String>,
    /// The failure kind must be this: a transport kind (`refused`,
    /// `unreachable`, `dns`, `tls`, `proxy`, `connect_timed_out`, `connect`
    /// (any of the ones before it too), `reset`, `closed`, `kernel_timeout`,
    /// `read`, `transport`), or `timeout`, `http`, `content_type`,
    /// `in_stream`, `malformed`.
    #[serde(default)]
    pub error_kind: Option<String>,
    /// The category it assigns.
    pub category: Category,
}

/// The failure kinds a rule's `error_kind` may name.
pub const ERROR_KINDS: &[&str] = &[
    "refused",
    "unreachable",
    "dns",
    "tls",
    "proxy",
    "connect_timed_out",
    "connect",
    "reset",
    "closed",
    "kernel_timeout",
    "read",
    "transport",
    "timeout",
    "http",
    "content_type",
    "in_stream",
    "malformed",
];

/// A user rule that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// A rule with no condition would match everything.
    #[error("classifier rule {0} has no condition; give status, header, body_contains or error_kind")]
    NoCondition(String),
    /// `error_kind` names no failure kind.
    #[error("classifier rule {rule} has error_kind {value:?}; allowed: {}", ERROR_KINDS.join(", "))]
    UnknownKind {
        /// The rule.
        rule: String,
        /// The value given.
        value: String,
    },
    /// `header_contains` without `header`.
    #[error("classifier rule {0} has header_contains without header")]
    HeaderValueWithoutName(String),
    /// A match string is empty or only whitespace: as a substring it would
    /// match every failure (cancelled calls too), and as a header name or
    /// failure kind nothing.
    #[error("classifier rule {rule} has an empty or blank {field}; give {allowed}, or leave {field} out")]
    EmptyMatch {
        /// The rule.
        rule: String,
        /// The field, as written in the config file.
        field: &'static str,
        /// What the field may hold.
        allowed: String,
    },
}

impl Rule {
    fn label(&self, index: usize) -> String {
        match &self.name {
            Some(name) => format!("user rule {} ({name})", index + 1),
            None => format!("user rule {}", index + 1),
        }
    }

    fn validate(&self, index: usize) -> Result<(), RuleError> {
        let label = self.label(index);
        if self.status.is_none() && self.header.is_none() && self.body_contains.is_none() && self.error_kind.is_none() {
            return Err(RuleError::NoCondition(label));
        }
        let match_strings = [
            ("header", &self.header, "a response header name".to_owned()),
            ("header_contains", &self.header_contains, "text the header's value must contain".to_owned()),
            ("body_contains", &self.body_contains, "text the body or in-stream error must contain".to_owned()),
            ("error_kind", &self.error_kind, format!("one of {}", ERROR_KINDS.join(", "))),
        ];
        for (field, value, allowed) in match_strings {
            if value.as_deref().is_some_and(|value| value.trim().is_empty()) {
                return Err(RuleError::EmptyMatch { rule: label, field, allowed });
            }
        }
        if let Some(kind) = &self.error_kind
            && !ERROR_KINDS.contains(&kind.as_str())
        {
            return Err(RuleError::UnknownKind { rule: label, value: kind.clone() });
        }
        if self.header_contains.is_some() && self.header.is_none() {
            return Err(RuleError::HeaderValueWithoutName(label));
        }
        Ok(())
    }

    /// The first of the rule's conditions that `failure` does not meet, in
    /// the order they are written; `None` when it meets them all.
    fn first_miss(&self, failure: &Failure) -> Option<Condition> {
        if let Some(status) = self.status
            && failure.status() != Some(status)
        {
            return Some(Condition::Status);
        }
        if let Some(name) = &self.header {
            match (header_value(failure, name), &self.header_contains) {
                (None, _) => return Some(Condition::Header),
                (Some(value), Some(wanted)) if !contains_ci(value, wanted) => return Some(Condition::HeaderValue),
                _ => {}
            }
        }
        if let Some(wanted) = &self.body_contains
            && !contains_ci(&failure.body_text(), wanted)
        {
            return Some(Condition::Body);
        }
        if let Some(kind) = &self.error_kind {
            let connect_family =
                kind == "connect" && matches!(failure, Failure::Transport { kind, .. } if kind.is_connect());
            if failure.kind_name() != kind && !connect_family {
                return Some(Condition::Kind);
            }
        }
        None
    }

    /// Why the rule did (`miss` is `None`) or did not match `failure`, in
    /// words.
    fn why(&self, failure: &Failure, miss: Option<Condition>) -> String {
        let status = || failure.status().map_or_else(|| "no status".to_owned(), |s| format!("status {s}"));
        match miss {
            Some(Condition::Status) => {
                format!("wants status {}; the failure has {}", self.status.unwrap_or(0), status())
            }
            Some(Condition::Header) => {
                format!("wants header {}; the response has none", self.header.as_deref().unwrap_or(""))
            }
            Some(Condition::HeaderValue) => format!(
                "wants header {} to contain {:?}; it is {:?}",
                self.header.as_deref().unwrap_or(""),
                self.header_contains.as_deref().unwrap_or(""),
                self.header.as_deref().and_then(|name| header_value(failure, name)).unwrap_or("")
            ),
            Some(Condition::Body) => format!(
                "wants the body or error to contain {:?}; it does not",
                self.body_contains.as_deref().unwrap_or("")
            ),
            Some(Condition::Kind) => format!(
                "wants error kind {}; the failure is {}",
                self.error_kind.as_deref().unwrap_or(""),
                failure.kind_name()
            ),
            None => {
                let mut held = Vec::new();
                if let Some(wanted) = self.status {
                    held.push(format!("status {wanted}"));
                }
                match (&self.header, &self.header_contains) {
                    (Some(name), Some(wanted)) => held.push(format!("header {name} contains {wanted:?}")),
                    (Some(name), None) => held.push(format!("header {name} is present")),
                    _ => {}
                }
                if let Some(wanted) = &self.body_contains {
                    held.push(format!("the body or error contains {wanted:?}"));
                }
                if let Some(kind) = &self.error_kind {
                    held.push(format!("the error kind is {kind}"));
                }
                held.join("; ")
            }
        }
    }
}

/// A condition a user rule may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Condition {
    Status,
    Header,
    HeaderValue,
    Body,
    Kind,
}

fn header_value<'a>(failure: &'a Failure, name: &str) -> Option<&'a str> {
    failure.headers().and_then(|h| h.get(name)).and_then(|v| v.to_str().ok())
}

fn contains_ci(haystack: &str, needle: &str) -> bool {
    haystack.to_ascii_lowercase().contains(&needle.to_ascii_lowercase())
}

/// The verdict on one failure.
#[derive(Debug, Clone, PartialEq)]
pub struct Classification {
    /// The category.
    pub category: Category,
    /// The timer that fired, for timeouts.
    pub timer: Option<TimerKind>,
    /// The HTTP status, if any.
    pub status: Option<u16>,
    /// Whether the executor may retry it (the category's nature, adjusted by
    /// `x-should-retry` and by the deadline, which is final).
    pub retryable: bool,
    /// Which rule decided, e.g. `builtin: status 429` or `user rule 2 (vllm)`.
    pub rule: String,
    /// A short description of the failure.
    pub message: String,
    /// What the transport reported, for transport failures.
    pub transport: Option<TransportKind>,
    /// A wait the server asked for.
    pub server_delay: Option<ServerDelay>,
    /// Rate-limit state the response reported.
    pub rate_limits: Option<RateLimits>,
}

impl Classification {
    /// The event that reports it.
    pub fn event(&self) -> EventKind {
        EventKind::ErrorClassified {
            category: self.category,
            timer: self.timer,
            status: self.status,
            retryable: self.retryable,
            rule: self.rule.clone(),
            message: self.message.clone(),
        }
    }
}

impl Classification {
    /// The server's requested wait, if any.
    pub fn requested_wait(&self) -> Option<Duration> {
        self.server_delay.as_ref().map(|d| d.delay)
    }
}

/// User rules plus the built-ins.
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    rules: Vec<Rule>,
    /// The headers the user rules read, lower-case: the recording keeps
    /// them beside its allowlist, so a rule classifies in replay as it did
    /// live.
    headers_read: Vec<String>,
}

/// How one failure would be classified, rule by rule:
/// [`Classifier::explain`].
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// The failure, in words (secrets redacted).
    pub failure: String,
    /// Which built-in rules apply to a failure of its kind, e.g. `HTTP
    /// error responses`.
    pub builtins: &'static str,
    /// Every rule tried, in order: the user rules, then the built-ins that
    /// apply, up to and including the one that matched.
    pub tried: Vec<RuleCheck>,
    /// The verdict, as [`Classifier::classify`] gives it.
    pub classification: Classification,
    /// Why it is or is not retried.
    pub retryable_because: String,
}

/// One rule tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCheck {
    /// The rule, as verdicts name it (`user rule 2 (vllm)`, `builtin:
    /// status 429`).
    pub rule: String,
    /// Whether it matched.
    pub matched: bool,
    /// Why it did or did not.
    pub why: String,
}

/// Receives each rule as it is tried; classifying keeps nothing, explaining
/// keeps them all.
trait Trace {
    fn tried(&mut self, check: impl FnOnce() -> RuleCheck);
}

impl Trace for () {
    fn tried(&mut self, _check: impl FnOnce() -> RuleCheck) {}
}

impl Trace for Vec<RuleCheck> {
    fn tried(&mut self, check: impl FnOnce() -> RuleCheck) {
        self.push(check());
    }
}

impl Classifier {
    /// A classifier with user rules checked before the built-ins.
    pub fn new(rules: Vec<Rule>) -> Result<Self, RuleError> {
        for (index, rule) in rules.iter().enumerate() {
            rule.validate(index)?;
        }
        let mut headers_read: Vec<String> =
            rules.iter().filter_map(|r| r.header.as_deref()).map(|h| h.trim().to_ascii_lowercase()).collect();
        headers_read.sort();
        headers_read.dedup();
        Ok(Classifier { rules, headers_read })
    }

    /// The user rules, in the order they are checked.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The response headers the user rules read, lower-case.
    pub fn headers_read(&self) -> &[String] {
        &self.headers_read
    }

    /// Classifies one failure. `now` is the wall clock, for HTTP-date
    /// Retry-After values.
    pub fn classify(&self, failure: &Failure, now: SystemTime) -> Classification {
        self.decide(failure, now, &mut ()).0
    }

    /// Classifies one failure as [`Classifier::classify`] does, saying
    /// which rules were tried, in order, why each did or did not match, and
    /// why the verdict is or is not retried.
    pub fn explain(&self, failure: &Failure, now: SystemTime) -> Explanation {
        let mut tried = Vec::new();
        let (classification, retry) = self.decide(failure, now, &mut tried);
        Explanation {
            failure: failure.to_string(),
            builtins: builtin_parts(failure).0,
            tried,
            retryable_because: retry.because(&classification),
            classification,
        }
    }

    fn decide(&self, failure: &Failure, now: SystemTime, trace: &mut impl Trace) -> (Classification, Retry) {
        let user = self.rules.iter().enumerate().find(|(index, rule)| {
            let miss = rule.first_miss(failure);
            trace.tried(|| RuleCheck {
                rule: rule.label(*index),
                matched: miss.is_none(),
                why: rule.why(failure, miss),
            });
            miss.is_none()
        });
        let (category, mut rule) = match user {
            Some((index, rule)) => (rule.category, rule.label(index)),
            None => {
                let (category, rule) = walk_builtins(failure, trace);
                (category, format!("builtin: {rule}"))
            }
        };
        let headers = failure.headers();
        let timer = match failure {
            Failure::Timeout { timer, .. } => Some(*timer),
            _ => None,
        };
        let mut retryable = category.is_retryable();
        let mut retry = Retry::Nature;
        if timer == Some(TimerKind::Deadline) {
            // The caller's deadline is final: retrying "with a new budget" is
            // the caller's decision, never ours (seed 000 §7).
            retryable = false;
            retry = Retry::Deadline;
        } else if let Some(hint) = headers.and_then(|h| h.get("x-should-retry")).and_then(|v| v.to_str().ok()) {
            // The SDK-retry bypass header: the server knows better.
            match hint.trim().to_ascii_lowercase().as_str() {
                "false" if retryable => {
                    retryable = false;
                    retry = Retry::ServerSaid(false);
                    rule.push_str("; x-should-retry: false");
                }
                "true" if !retryable && category != Category::Cancelled => {
                    retryable = true;
                    retry = Retry::ServerSaid(true);
                    rule.push_str("; x-should-retry: true");
                }
                _ => {}
            }
        }
        let rate_limits = headers.and_then(|h| RateLimits::from_headers(h, now));
        let server_delay = headers.and_then(|h| server_delay(h, now)).filter(|delay| match delay.source {
            // Providers send reset headers on every response; they only say
            // when a bucket refills. They are a wait only when the request
            // was refused for the rate and that bucket is empty.
            DelaySource::ResetHint { .. } => {
                category == Category::RateLimit && rate_limits.as_ref().is_some_and(|l| l.exhausted_reset().is_some())
            }
            _ => true,
        });
        let classification = Classification {
            category,
            timer,
            status: failure.status(),
            retryable,
            rule,
            message: failure.to_string(),
            transport: match failure {
                Failure::Transport { kind, .. } => Some(*kind),
                _ => None,
            },
            server_delay,
            rate_limits,
        };
        (classification, retry)
    }
}

/// What decided whether a verdict is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// The category's nature.
    Nature,
    /// The caller's deadline fired: final.
    Deadline,
    /// The server's `x-should-retry` header overrode the category.
    ServerSaid(bool),
}

impl Retry {
    fn because(self, c: &Classification) -> String {
        match self {
            Retry::Nature if c.retryable => format!("{} is retried", c.category),
            Retry::Nature => format!("{} is not retried", c.category),
            Retry::Deadline => "the call's deadline is final: never retried".to_owned(),
            Retry::ServerSaid(true) => format!("the server sent x-should-retry: true, so {} is retried", c.category),
            Retry::ServerSaid(false) => {
                format!("the server sent x-should-retry: false, so {} is not retried", c.category)
            }
        }
    }
}

/// Body phrases that make any status a context overflow (permanent for this
/// request: retrying the same prompt cannot fit it).
const CONTEXT_OVERFLOW: &[&str] =
    &["context_length_exceeded", "maximum context length", "prompt is too long", "context window", "too many tokens"];

/// A condition of a built-in rule.
#[derive(Debug, Clone, Copy)]
enum When {
    /// Always holds: a kind's last resort.
    Always,
    /// The transport reported this kind.
    Transport(TransportKind),
    /// The status is one of these.
    Status(&'static [u16]),
    /// The status is a 5xx.
    ServerStatus,
    /// The body or in-stream error (lower-case) contains one of these.
    Says(&'static [&'static str]),
    /// The body is a JSON object with an `"error"`.
    JsonError,
}

/// A built-in rule: what it is called, what it assigns, and the conditions
/// that must all hold.
#[derive(Debug)]
struct Builtin {
    name: &'static str,
    category: Category,
    when: &'static [When],
}

const fn rule(name: &'static str, category: Category, when: &'static [When]) -> Builtin {
    Builtin { name, category, when }
}

/// The rules for one kind of failure, in order, in parts: the conditions
/// every rule of a part also needs, and the part's rules.
type Parts = &'static [(&'static [When], &'static [Builtin])];

const CANCELLED: Parts = &[(&[], &[rule("cancelled", Category::Cancelled, &[When::Always])])];
const TIMER: Parts = &[(&[], &[rule("timer fired", Category::Timeout, &[When::Always])])];
const MALFORMED: Parts = &[(&[], &[rule("malformed stream", Category::ServerError, &[When::Always])])];

const fn transport(name: &'static str, kind: &'static [When]) -> Builtin {
    rule(name, Category::Connection, kind)
}

const TRANSPORT: Parts = &[(
    &[],
    &[
        transport("connection refused", &[When::Transport(TransportKind::Refused)]),
        transport("network unreachable", &[When::Transport(TransportKind::Unreachable)]),
        transport("DNS failure", &[When::Transport(TransportKind::Dns)]),
        transport("TLS failure", &[When::Transport(TransportKind::Tls)]),
        transport("proxy failure", &[When::Transport(TransportKind::Proxy)]),
        transport("connect timed out in the kernel", &[When::Transport(TransportKind::ConnectTimedOut)]),
        transport("connect failure", &[When::Transport(TransportKind::Connect)]),
        transport("connection reset", &[When::Transport(TransportKind::Reset)]),
        transport("stream closed before completion", &[When::Transport(TransportKind::Closed)]),
        transport("dead connection (kernel keepalive/user timeout)", &[When::Transport(TransportKind::KernelTimeout)]),
        transport("read failure", &[When::Transport(TransportKind::Read)]),
        transport("transport failure", &[When::Transport(TransportKind::Other)]),
    ],
)];

/// Error statuses, in order.
const STATUSES: &[Builtin] = &[
    rule("context overflow", Category::InvalidRequest, &[When::Says(CONTEXT_OVERFLOW)]),
    // A 429 for an empty account will not clear by waiting.
    rule(
        "status 429 insufficient_quota",
        Category::Permanent,
        &[When::Status(&[429]), When::Says(&["insufficient_quota"])],
    ),
    rule("status 429", Category::RateLimit, &[When::Status(&[429])]),
    rule("status 401/403", Category::Auth, &[When::Status(&[401, 403])]),
    rule("status 402", Category::Auth, &[When::Status(&[402])]),
    // The server gave up on the request; no timer of ours fired.
    rule("status 408", Category::ServerError, &[When::Status(&[408])]),
    rule("status 409", Category::ServerError, &[When::Status(&[409])]),
    rule("status 529", Category::Overloaded, &[When::Status(&[529])]),
    rule("status 503", Category::Overloaded, &[When::Status(&[503])]),
    rule("5xx overloaded body", Category::Overloaded, &[When::ServerStatus, When::Says(&["overloaded"])]),
    rule("status 5xx", Category::ServerError, &[When::ServerStatus]),
    rule("status 4xx request", Category::InvalidRequest, &[When::Status(&[400, 404, 405, 413, 415, 422])]),
];

/// Error types and phrases from the providers' error payloads, lower-case,
/// in order.
const PHRASES: &[Builtin] = &[
    rule("overloaded error", Category::Overloaded, &[When::Says(&["overloaded"])]),
    rule("rate-limit error", Category::RateLimit, &[When::Says(&["rate_limit"])]),
    rule("rate-limit error", Category::RateLimit, &[When::Says(&["rate limit"])]),
    rule("authentication error", Category::Auth, &[When::Says(&["authentication_error"])]),
    rule("permission error", Category::Auth, &[When::Says(&["permission_error"])]),
    rule("invalid API key", Category::Auth, &[When::Says(&["invalid_api_key"])]),
    rule("context overflow", Category::InvalidRequest, &[When::Says(&["context_length_exceeded"])]),
    rule("context overflow", Category::InvalidRequest, &[When::Says(&["prompt is too long"])]),
    rule("request too large", Category::InvalidRequest, &[When::Says(&["request_too_large"])]),
    rule("invalid request error", Category::InvalidRequest, &[When::Says(&["invalid_request_error"])]),
    rule("insufficient quota", Category::Permanent, &[When::Says(&["insufficient_quota"])]),
    rule("API error", Category::ServerError, &[When::Says(&["api_error"])]),
    rule("server error", Category::ServerError, &[When::Says(&["server_error"])]),
    rule("internal error", Category::ServerError, &[When::Says(&["internal error"])]),
    rule("internal error", Category::ServerError, &[When::Says(&["internal_error"])]),
    rule("rate-limit error", Category::RateLimit, &[When::Says(&["too_many_requests"])]),
    rule("invalid prompt", Category::InvalidRequest, &[When::Says(&["invalid_prompt"])]),
    rule("invalid image", Category::InvalidRequest, &[When::Says(&["invalid_image"])]),
    // A timeout the server reports is not one of our timers.
    rule("server-side timeout", Category::ServerError, &[When::Says(&["timeout"])]),
];

const HTTP: Parts =
    &[(&[], STATUSES), (&[], PHRASES), (&[], &[rule("unrecognised status", Category::Permanent, &[When::Always])])];

const NOT_A_STREAM: Parts = &[
    (&[When::JsonError], PHRASES),
    (&[When::JsonError], &[rule("JSON error body on a 2xx", Category::ServerError, &[When::Always])]),
    // A captive portal or a proxy's error page: the route, not the
    // request, is at fault.
    (&[], &[rule("non-event-stream response", Category::Connection, &[When::Always])]),
];

const IN_STREAM: Parts = &[(&[], PHRASES), (&[], &[rule("in-stream error", Category::ServerError, &[When::Always])])];

/// Which built-in rules apply to `failure`, named for explanations.
fn builtin_parts(failure: &Failure) -> (&'static str, Parts) {
    match failure {
        Failure::Cancelled => ("cancelled calls", CANCELLED),
        Failure::Timeout { .. } => ("timers that fired", TIMER),
        Failure::Transport { .. } => ("transport failures", TRANSPORT),
        Failure::Http { .. } => ("HTTP error responses", HTTP),
        Failure::UnexpectedContentType { .. } => ("2xx responses that are not an event stream", NOT_A_STREAM),
        Failure::InStream { .. } => ("in-stream errors", IN_STREAM),
        // Corrupted framing is usually a proxy or server fault: worth a
        // retry or two, which the server-error budget bounds.
        Failure::Malformed { .. } => ("malformed streams", MALFORMED),
    }
}

/// The built-in rules, in order. Returns the category and the rule's name.
pub fn builtin(failure: &Failure) -> (Category, &'static str) {
    walk_builtins(failure, &mut ())
}

/// Tries the built-in rules for `failure` in order; the first whose every
/// condition holds decides. Each kind's rules end with one that always
/// holds.
fn walk_builtins(failure: &Failure, trace: &mut impl Trace) -> (Category, &'static str) {
    let subject = Subject::of(failure);
    let (_, parts) = builtin_parts(failure);
    for (shared, rules) in parts {
        for rule in *rules {
            let miss = shared.iter().chain(rule.when).find(|when| !subject.holds(**when));
            trace.tried(|| RuleCheck {
                rule: format!("builtin: {}", rule.name),
                matched: miss.is_none(),
                why: match miss {
                    Some(when) => subject.why(*when, false),
                    None => {
                        let held: Vec<String> =
                            shared.iter().chain(rule.when).map(|when| subject.why(*when, true)).collect();
                        held.join("; ")
                    }
                },
            });
            if miss.is_none() {
                return (rule.category, rule.name);
            }
        }
    }
    // Unreachable by construction (each kind ends with `Always`), and still
    // no reason to panic.
    (Category::Permanent, "unrecognised failure")
}

/// What the built-in conditions look at in one failure.
struct Subject<'a> {
    failure: &'a Failure,
    /// The body, or the in-stream error's code and message, lower-case.
    text: String,
}

impl<'a> Subject<'a> {
    fn of(failure: &'a Failure) -> Self {
        let text = match failure {
            Failure::Http { body, .. } | Failure::UnexpectedContentType { body, .. } => body.to_ascii_lowercase(),
            Failure::InStream { code, message } => {
                format!("{} {}", code.as_deref().unwrap_or(""), message).to_ascii_lowercase()
            }
            _ => String::new(),
        };
        Subject { failure, text }
    }

    fn holds(&self, when: When) -> bool {
        match when {
            When::Always => true,
            When::Transport(kind) => matches!(self.failure, Failure::Transport { kind: k, .. } if *k == kind),
            When::Status(statuses) => self.failure.status().is_some_and(|s| statuses.contains(&s)),
            When::ServerStatus => self.failure.status().is_some_and(|s| (500..=599).contains(&s)),
            When::Says(phrases) => phrases.iter().any(|p| self.text.contains(p)),
            When::JsonError => self.text.trim_start().starts_with('{') && self.text.contains("\"error\""),
        }
    }

    /// Why `when` held (`held`) or did not, in words.
    fn why(&self, when: When, held: bool) -> String {
        let status = self.failure.status().map_or_else(|| "none".to_owned(), |s| s.to_string());
        let quoted = |phrases: &[&str]| phrases.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>().join(", ");
        let text = if matches!(self.failure, Failure::InStream { .. }) { "the error" } else { "the body" };
        match (when, held) {
            (When::Always, _) => "no earlier rule matched".to_owned(),
            (When::Transport(kind), true) => format!("the transport reported {kind}"),
            (When::Transport(kind), false) => match self.failure {
                Failure::Transport { kind: actual, .. } => format!("wants {kind}; the transport reported {actual}"),
                _ => format!("wants {kind}; not a transport failure"),
            },
            (When::Status(_), true) => format!("status {status}"),
            (When::Status(statuses), false) => {
                let wanted: Vec<String> = statuses.iter().map(u16::to_string).collect();
                format!("wants status {}; the status is {status}", wanted.join(" or "))
            }
            (When::ServerStatus, true) => format!("status {status} is a 5xx"),
            (When::ServerStatus, false) => format!("wants a 5xx; the status is {status}"),
            (When::Says(phrases), true) => {
                let found: Vec<&str> = phrases.iter().copied().filter(|p| self.text.contains(p)).collect();
                format!("{text} contains {}", quoted(&found))
            }
            (When::Says(phrases), false) if phrases.len() == 1 => format!("{text} lacks {}", quoted(phrases)),
            (When::Says(phrases), false) => format!("{text} has none of {}", quoted(phrases)),
            (When::JsonError, true) => "the body is a JSON error object".to_owned(),
            (When::JsonError, false) => "the body is not a JSON error object".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use http::{HeaderMap, HeaderValue};
    use proptest::prelude::*;

    use super::*;

    fn http(status: u16, body: &str) -> Failure {
        Failure::Http { status, headers: Box::default(), body: body.to_owned() }
    }

    fn classify(failure: &Failure) -> Classification {
        Classifier::default().classify(failure, SystemTime::UNIX_EPOCH)
    }

    #[test]
    fn statuses_map_to_categories() {
        let cases = [
            (429, "", Category::RateLimit),
            (429, r#"{"error":{"code":"insufficient_quota"}}"#, Category::Permanent),
            (401, "", Category::Auth),
            (529, "", Category::Overloaded),
            (500, "", Category::ServerError),
            (502, "", Category::ServerError),
            (500, "Overloaded", Category::Overloaded),
            (400, r#"{"error":{"code":"context_length_exceeded"}}"#, Category::InvalidRequest),
            (404, "", Category::InvalidRequest),
            (418, "", Category::Permanent),
        ];
        for (status, body, want) in cases {
            assert_eq!(classify(&http(status, body)).category, want, "{status} {body}");
        }
    }

    #[test]
    fn in_stream_errors_use_the_payload() {
        let overloaded = Failure::InStream { code: Some("overloaded_error".into()), message: "Overloaded".into() };
        assert_eq!(classify(&overloaded).category, Category::Overloaded);
        let xai = Failure::InStream { code: None, message: "Internal error during token generation".into() };
        let c = classify(&xai);
        assert_eq!((c.category, c.rule.as_str()), (Category::ServerError, "builtin: internal error"));
    }

    #[test]
    fn timeouts_carry_their_timer_and_the_deadline_is_final() {
        for timer in TimerKind::ALL.into_iter().filter(|&t| t != TimerKind::Deadline) {
            let c = classify(&Failure::Timeout { timer, after: Duration::from_secs(1) });
            assert_eq!((c.category, c.timer, c.retryable), (Category::Timeout, Some(timer), true));
        }
        let deadline = Failure::Timeout { timer: TimerKind::Deadline, after: Duration::from_secs(1) };
        assert!(!classify(&deadline).retryable);
    }

    #[test]
    fn should_retry_header_overrides_retryability() {
        let mut headers = HeaderMap::new();
        headers.insert("x-should-retry", HeaderValue::from_static("false"));
        let c = classify(&Failure::Http { status: 503, headers: Box::new(headers.clone()), body: String::new() });
        assert!(!c.retryable);
        assert!(c.rule.ends_with("x-should-retry: false"), "{}", c.rule);
        headers.insert("x-should-retry", HeaderValue::from_static("true"));
        let c = classify(&Failure::Http { status: 409, headers: Box::new(headers), body: String::new() });
        assert!(c.retryable);
    }

    #[test]
    fn retry_after_and_rate_limits_are_read() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
        headers.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("0"));
        headers.insert("x-ratelimit-reset-requests", HeaderValue::from_static("6m0s"));
        let c = classify(&Failure::Http { status: 429, headers: Box::new(headers), body: String::new() });
        assert_eq!(c.requested_wait(), Some(Duration::from_millis(1500)));
        assert_eq!(c.rate_limits.unwrap().exhausted_reset(), Some(Duration::from_secs(360)));
    }

    #[test]
    fn user_rules_come_first_and_explain_themselves() {
        let rules = vec![
            Rule {
                name: Some("vllm queue".into()),
                body_contains: Some("QUEUE FULL".into()),
                category: Category::RateLimit,
                ..Rule::default()
            },
            Rule { status: Some(500), category: Category::Permanent, ..Rule::default() },
        ];
        let classifier = Classifier::new(rules).unwrap();
        let c = classifier.classify(&http(500, "queue full, try later"), SystemTime::UNIX_EPOCH);
        assert_eq!((c.category, c.rule.as_str()), (Category::RateLimit, "user rule 1 (vllm queue)"));
        let c = classifier.classify(&http(500, "boom"), SystemTime::UNIX_EPOCH);
        assert_eq!((c.category, c.rule.as_str()), (Category::Permanent, "user rule 2"));
        let c = classifier.classify(&http(502, "boom"), SystemTime::UNIX_EPOCH);
        assert_eq!(c.rule, "builtin: status 5xx");
    }

    #[test]
    fn invalid_rules_are_refused() {
        assert!(matches!(Classifier::new(vec![Rule::default()]), Err(RuleError::NoCondition(_))));
        let rule = Rule { error_kind: Some("gateway".into()), ..Rule::default() };
        assert!(matches!(Classifier::new(vec![rule]), Err(RuleError::UnknownKind { .. })));
        let rule = Rule { status: Some(500), header_contains: Some("x".into()), ..Rule::default() };
        assert!(matches!(Classifier::new(vec![rule]), Err(RuleError::HeaderValueWithoutName(_))));
    }

    /// An empty substring is in every string, so `body_contains = ""` would
    /// claim every failure, a cancelled call included; each empty match
    /// string is refused at load, naming the rule, the field and what it may
    /// hold.
    #[test]
    fn empty_match_strings_are_refused() {
        let named = |rule: Rule| Rule { name: Some("catch-all".into()), category: Category::RateLimit, ..rule };
        let some = |text: &str| Some(text.to_owned());
        let kinds = ERROR_KINDS.join(", ");
        let cases = [
            (
                Rule { header: some(""), ..Rule::default() },
                "has an empty or blank header; give a response header name, or leave header out".to_owned(),
            ),
            (
                Rule { header: some("x-error"), header_contains: some(""), ..Rule::default() },
                "has an empty or blank header_contains; give text the header's value must contain, \
                 or leave header_contains out"
                    .to_owned(),
            ),
            (
                Rule { body_contains: some(""), ..Rule::default() },
                "has an empty or blank body_contains; give text the body or in-stream error must contain, \
                 or leave body_contains out"
                    .to_owned(),
            ),
            (
                Rule { error_kind: some(""), ..Rule::default() },
                format!("has an empty or blank error_kind; give one of {kinds}, or leave error_kind out"),
            ),
            (
                Rule { status: Some(503), body_contains: some(" \t "), ..Rule::default() },
                "has an empty or blank body_contains; give text the body or in-stream error must contain, \
                 or leave body_contains out"
                    .to_owned(),
            ),
        ];
        let valid = Rule { status: Some(429), category: Category::RateLimit, ..Rule::default() };
        for (rule, message) in cases {
            // Second in the list, so the label must say which rule it is.
            let err = Classifier::new(vec![valid.clone(), named(rule)]).expect_err(&message);
            assert_eq!(err.to_string(), format!("classifier rule user rule 2 (catch-all) {message}"));
        }
        // The loaded form refuses it too.
        let rules: Vec<Rule> = toml::from_str::<BTreeMap<String, Vec<Rule>>>(
            "[[rule]]\nbody_contains = \"\"\ncategory = \"rate_limit\"\n",
        )
        .expect("toml")
        .remove("rule")
        .expect("rules");
        assert!(matches!(Classifier::new(rules), Err(RuleError::EmptyMatch { field: "body_contains", .. })));
    }

    /// Each rule tried is listed in order with why it did or did not
    /// match, up to the one that decided; rules after it are not tried.
    #[test]
    fn an_explanation_names_every_rule_tried_and_the_match() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("3"));
        let failure = Failure::Http { status: 429, headers: Box::new(headers), body: "slow down".into() };
        let rules = vec![Rule {
            name: Some("vllm".into()),
            status: Some(500),
            category: Category::Overloaded,
            ..Rule::default()
        }];
        let explanation = Classifier::new(rules).unwrap().explain(&failure, SystemTime::UNIX_EPOCH);
        let tried: Vec<(&str, bool, &str)> =
            explanation.tried.iter().map(|c| (c.rule.as_str(), c.matched, c.why.as_str())).collect();
        assert_eq!(
            tried,
            [
                ("user rule 1 (vllm)", false, "wants status 500; the failure has status 429"),
                (
                    "builtin: context overflow",
                    false,
                    "the body has none of \"context_length_exceeded\", \"maximum context length\", \
                     \"prompt is too long\", \"context window\", \"too many tokens\""
                ),
                ("builtin: status 429 insufficient_quota", false, "the body lacks \"insufficient_quota\""),
                ("builtin: status 429", true, "status 429"),
            ]
        );
        assert_eq!(explanation.builtins, "HTTP error responses");
        let c = &explanation.classification;
        assert_eq!((c.category, c.rule.as_str(), c.retryable), (Category::RateLimit, "builtin: status 429", true));
        assert_eq!(c.requested_wait(), Some(Duration::from_secs(3)));
        assert_eq!(explanation.retryable_because, "rate_limit is retried");
    }

    #[test]
    fn an_explanation_says_why_a_user_rule_matched_and_what_overrode_retrying() {
        let mut headers = HeaderMap::new();
        headers.insert("x-should-retry", HeaderValue::from_static("false"));
        headers.insert("x-error", HeaderValue::from_static("Queue Full"));
        let failure = Failure::Http { status: 503, headers: Box::new(headers), body: String::new() };
        let rules = vec![
            Rule {
                header: Some("x-error".into()),
                header_contains: Some("quota".into()),
                category: Category::Permanent,
                ..Rule::default()
            },
            Rule {
                header: Some("x-error".into()),
                header_contains: Some("queue".into()),
                error_kind: Some("http".into()),
                category: Category::RateLimit,
                ..Rule::default()
            },
        ];
        let explanation = Classifier::new(rules).unwrap().explain(&failure, SystemTime::UNIX_EPOCH);
        let tried: Vec<(&str, &str)> = explanation.tried.iter().map(|c| (c.rule.as_str(), c.why.as_str())).collect();
        assert_eq!(
            tried,
            [
                ("user rule 1", "wants header x-error to contain \"quota\"; it is \"Queue Full\""),
                ("user rule 2", "header x-error contains \"queue\"; the error kind is http"),
            ]
        );
        assert!(explanation.tried[1].matched && !explanation.tried[0].matched);
        assert_eq!(explanation.classification.rule, "user rule 2; x-should-retry: false");
        assert_eq!(
            explanation.retryable_because,
            "the server sent x-should-retry: false, so rate_limit is not retried"
        );
    }

    #[test]
    fn a_transport_failure_is_explained_by_the_transport_rules_alone() {
        let failure = Failure::Transport { kind: TransportKind::Reset, message: "peer reset".into() };
        let explanation = Classifier::default().explain(&failure, SystemTime::UNIX_EPOCH);
        assert_eq!(explanation.builtins, "transport failures");
        assert_eq!(explanation.tried.len(), 8, "{:?}", explanation.tried);
        assert_eq!(explanation.tried[0].why, "wants refused; the transport reported reset");
        let last = explanation.tried.last().unwrap();
        assert_eq!((last.rule.as_str(), last.matched), ("builtin: connection reset", true));
        let deadline = Failure::Timeout { timer: TimerKind::Deadline, after: Duration::from_secs(1) };
        let explanation = Classifier::default().explain(&deadline, SystemTime::UNIX_EPOCH);
        assert_eq!(explanation.tried[0].why, "no earlier rule matched");
        assert_eq!(explanation.retryable_because, "the call's deadline is final: never retried");
    }

    fn any_failure() -> impl Strategy<Value = Failure> {
        prop_oneof![
            (100u16..600, ".{0,40}").prop_map(|(status, body)| http(status, &body)),
            (proptest::option::of("[a-z_]{0,12}"), ".{0,40}")
                .prop_map(|(code, message)| Failure::InStream { code, message }),
            Just(Failure::Transport { kind: TransportKind::Reset, message: "reset".into() }),
            Just(Failure::Cancelled),
        ]
    }

    fn any_rule() -> impl Strategy<Value = Rule> {
        (
            proptest::option::of(prop_oneof![Just(429u16), Just(500), Just(503)]),
            proptest::option::of(prop_oneof![Just("overloaded".to_owned()), Just("quota".to_owned())]),
            proptest::option::of(prop_oneof![Just("http".to_owned()), Just("in_stream".to_owned())]),
            proptest::sample::select(Category::ALL.to_vec()),
        )
            .prop_filter("a rule needs a condition", |(s, b, k, _)| s.is_some() || b.is_some() || k.is_some())
            .prop_map(|(status, body_contains, error_kind, category)| Rule {
                status,
                body_contains,
                error_kind,
                category,
                ..Rule::default()
            })
    }

    proptest! {
        /// The first matching user rule decides; with none matching, the
        /// built-ins decide exactly as they would with no user rules.
        #[test]
        fn first_matching_user_rule_wins(rules in proptest::collection::vec(any_rule(), 0..5), failure in any_failure()) {
            let classifier = Classifier::new(rules.clone()).unwrap();
            let got = classifier.classify(&failure, SystemTime::UNIX_EPOCH);
            match rules.iter().position(|r| r.first_miss(&failure).is_none()) {
                Some(index) => {
                    prop_assert_eq!(got.category, rules[index].category);
                    let label = format!("user rule {}", index + 1);
                    prop_assert!(got.rule.starts_with(&label), "{} does not start with {}", got.rule, label);
                }
                None => {
                    let plain = Classifier::default().classify(&failure, SystemTime::UNIX_EPOCH);
                    prop_assert_eq!(got, plain);
                }
            }
        }

        /// An explanation reaches the verdict `classify` gives, and lists
        /// the rules tried with exactly one match: the last, which decided.
        #[test]
        fn an_explanation_agrees_with_the_verdict(
            rules in proptest::collection::vec(any_rule(), 0..5),
            failure in any_failure(),
        ) {
            let classifier = Classifier::new(rules).unwrap();
            let explanation = classifier.explain(&failure, SystemTime::UNIX_EPOCH);
            prop_assert_eq!(&explanation.classification, &classifier.classify(&failure, SystemTime::UNIX_EPOCH));
            let (last, before) = explanation.tried.split_last().expect("some rule decides");
            prop_assert!(last.matched && before.iter().all(|c| !c.matched), "{:?}", explanation.tried);
            prop_assert!(explanation.classification.rule.starts_with(&last.rule));
        }
    }
}
