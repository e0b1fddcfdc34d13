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

    fn matches(&self, failure: &Failure) -> bool {
        if let Some(status) = self.status
            && failure.status() != Some(status)
        {
            return false;
        }
        if let Some(name) = &self.header {
            let value = failure.headers().and_then(|h| h.get(name.as_str())).and_then(|v| v.to_str().ok());
            match (value, &self.header_contains) {
                (None, _) => return false,
                (Some(value), Some(wanted)) if !contains_ci(value, wanted) => return false,
                _ => {}
            }
        }
        if let Some(wanted) = &self.body_contains
            && !contains_ci(&failure.body_text(), wanted)
        {
            return false;
        }
        if let Some(kind) = &self.error_kind {
            let connect_family =
                kind == "connect" && matches!(failure, Failure::Transport { kind, .. } if kind.is_connect());
            if failure.kind_name() != kind && !connect_family {
                return false;
            }
        }
        true
    }
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
    /// The server's requested wait, if any.
    pub fn requested_wait(&self) -> Option<Duration> {
        self.server_delay.as_ref().map(|d| d.delay)
    }
}

/// User rules plus the built-ins.
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    rules: Vec<Rule>,
}

impl Classifier {
    /// A classifier with user rules checked before the built-ins.
    pub fn new(rules: Vec<Rule>) -> Result<Self, RuleError> {
        for (index, rule) in rules.iter().enumerate() {
            rule.validate(index)?;
        }
        Ok(Classifier { rules })
    }

    /// The user rules, in the order they are checked.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Classifies one failure. `now` is the wall clock, for HTTP-date
    /// Retry-After values.
    pub fn classify(&self, failure: &Failure, now: SystemTime) -> Classification {
        let (category, rule) = self
            .rules
            .iter()
            .enumerate()
            .find(|(_, rule)| rule.matches(failure))
            .map(|(index, rule)| (rule.category, rule.label(index)))
            .unwrap_or_else(|| {
                let (category, rule) = builtin(failure);
                (category, format!("builtin: {rule}"))
            });
        let headers = failure.headers();
        let timer = match failure {
            Failure::Timeout { timer, .. } => Some(*timer),
            _ => None,
        };
        let mut retryable = category.is_retryable();
        let mut rule = rule;
        if timer == Some(TimerKind::Deadline) {
            // The caller's deadline is final: retrying "with a new budget" is
            // the caller's decision, never ours (seed 000 §7).
            retryable = false;
        } else if let Some(hint) = headers.and_then(|h| h.get("x-should-retry")).and_then(|v| v.to_str().ok()) {
            // The SDK-retry bypass header: the server knows better.
            match hint.trim().to_ascii_lowercase().as_str() {
                "false" if retryable => {
                    retryable = false;
                    rule.push_str("; x-should-retry: false");
                }
                "true" if !retryable && category != Category::Cancelled => {
                    retryable = true;
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
        Classification {
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
        }
    }
}

/// Body phrases that make any status a context overflow (permanent for this
/// request: retrying the same prompt cannot fit it).
const CONTEXT_OVERFLOW: &[&str] =
    &["context_length_exceeded", "maximum context length", "prompt is too long", "context window", "too many tokens"];

/// The built-in rules, in order. Returns the category and the rule's name.
pub fn builtin(failure: &Failure) -> (Category, &'static str) {
    match failure {
        Failure::Cancelled => (Category::Cancelled, "cancelled"),
        Failure::Timeout { .. } => (Category::Timeout, "timer fired"),
        Failure::Transport { kind, .. } => match kind {
            TransportKind::Refused => (Category::Connection, "connection refused"),
            TransportKind::Unreachable => (Category::Connection, "network unreachable"),
            TransportKind::Dns => (Category::Connection, "DNS failure"),
            TransportKind::Tls => (Category::Connection, "TLS failure"),
            TransportKind::Proxy => (Category::Connection, "proxy failure"),
            TransportKind::ConnectTimedOut => (Category::Connection, "connect timed out in the kernel"),
            TransportKind::Connect => (Category::Connection, "connect failure"),
            TransportKind::Reset => (Category::Connection, "connection reset"),
            TransportKind::Closed => (Category::Connection, "stream closed before completion"),
            TransportKind::KernelTimeout => (Category::Connection, "dead connection (kernel keepalive/user timeout)"),
            TransportKind::Read => (Category::Connection, "read failure"),
            TransportKind::Other => (Category::Connection, "transport failure"),
        },
        Failure::Http { status, body, .. } => by_status(*status, body),
        Failure::UnexpectedContentType { body, .. } => {
            let lower = body.to_ascii_lowercase();
            if lower.trim_start().starts_with('{') && lower.contains("\"error\"") {
                by_body(&lower).unwrap_or((Category::ServerError, "JSON error body on a 2xx"))
            } else {
                // A captive portal or a proxy's error page: the route, not
                // the request, is at fault.
                (Category::Connection, "non-event-stream response")
            }
        }
        Failure::InStream { code, message } => {
            let text = format!("{} {}", code.as_deref().unwrap_or(""), message).to_ascii_lowercase();
            by_body(&text).unwrap_or((Category::ServerError, "in-stream error"))
        }
        // Corrupted framing is usually a proxy or server fault: worth a
        // retry or two, which the server-error budget bounds.
        Failure::Malformed { .. } => (Category::ServerError, "malformed stream"),
    }
}

fn by_status(status: u16, body: &str) -> (Category, &'static str) {
    let lower = body.to_ascii_lowercase();
    if CONTEXT_OVERFLOW.iter().any(|p| lower.contains(p)) {
        return (Category::InvalidRequest, "context overflow");
    }
    match status {
        // A 429 for an empty account will not clear by waiting.
        429 if lower.contains("insufficient_quota") => (Category::Permanent, "status 429 insufficient_quota"),
        429 => (Category::RateLimit, "status 429"),
        401 | 403 => (Category::Auth, "status 401/403"),
        402 => (Category::Auth, "status 402"),
        // The server gave up on the request; no timer of ours fired.
        408 => (Category::ServerError, "status 408"),
        409 => (Category::ServerError, "status 409"),
        529 => (Category::Overloaded, "status 529"),
        503 => (Category::Overloaded, "status 503"),
        500..=599 if lower.contains("overloaded") => (Category::Overloaded, "5xx overloaded body"),
        500..=599 => (Category::ServerError, "status 5xx"),
        400 | 404 | 405 | 413 | 415 | 422 => (Category::InvalidRequest, "status 4xx request"),
        _ => by_body(&lower).unwrap_or((Category::Permanent, "unrecognised status")),
    }
}

/// Error types and phrases from the providers' error payloads, lower-case.
fn by_body(lower: &str) -> Option<(Category, &'static str)> {
    const PHRASES: &[(&str, Category, &str)] = &[
        ("overloaded", Category::Overloaded, "overloaded error"),
        ("rate_limit", Category::RateLimit, "rate-limit error"),
        ("rate limit", Category::RateLimit, "rate-limit error"),
        ("authentication_error", Category::Auth, "authentication error"),
        ("permission_error", Category::Auth, "permission error"),
        ("invalid_api_key", Category::Auth, "invalid API key"),
        ("context_length_exceeded", Category::InvalidRequest, "context overflow"),
        ("prompt is too long", Category::InvalidRequest, "context overflow"),
        ("request_too_large", Category::InvalidRequest, "request too large"),
        ("invalid_request_error", Category::InvalidRequest, "invalid request error"),
        ("insufficient_quota", Category::Permanent, "insufficient quota"),
        ("api_error", Category::ServerError, "API error"),
        ("server_error", Category::ServerError, "server error"),
        ("internal error", Category::ServerError, "internal error"),
        ("internal_error", Category::ServerError, "internal error"),
        ("too_many_requests", Category::RateLimit, "rate-limit error"),
        ("invalid_prompt", Category::InvalidRequest, "invalid prompt"),
        ("invalid_image", Category::InvalidRequest, "invalid image"),
        // A timeout the server reports is not one of our timers.
        ("timeout", Category::ServerError, "server-side timeout"),
    ];
    PHRASES.iter().find(|(phrase, _, _)| lower.contains(phrase)).map(|&(_, category, rule)| (category, rule))
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
        let stall = Failure::Timeout { timer: TimerKind::DataStall, after: Duration::from_secs(1) };
        let c = classify(&stall);
        assert_eq!((c.category, c.timer, c.retryable), (Category::Timeout, Some(TimerKind::DataStall), true));
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
            match rules.iter().position(|r| r.matches(&failure)) {
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
    }
}
