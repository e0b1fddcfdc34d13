//! The shape of a verdict: its kind (a stable snake_case name), how
//! serious it is, the evidence it rests on and what it rests on in
//! structured form, as reports, exports and the app show it.

use serde::{Deserialize, Serialize};

use crate::core::category::TimerKind;

/// The pattern a stream's events show. The snake_case names are part of
/// the JSON shape (`diagnosis.kind`) and never change meaning; new
/// patterns get new names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// Headers or some bytes, then nothing at all until a timer fired
    /// (a dead peer, a dropped VPN or NAT route).
    SilentStall,
    /// Keep-alives kept the connection warm but no progress came until the
    /// data-stall timer fired (a hung model behind a chatty gateway).
    KeepaliveOnlyStall,
    /// The request went out and no response headers came before a timer
    /// fired (a queue upstream, or a path that died before the answer).
    NoResponse,
    /// A long wait for the first body byte, then most of the body within a
    /// few milliseconds: something on the path held the stream back.
    ProxyBuffering,
    /// Many small reads per parsed event while progress continued (a
    /// congested or throttled link).
    SlowDrip,
    /// Progress kept coming, but slower than the throughput floor over a
    /// whole window (a congested link, a throttled proxy, a provider
    /// degrading under load).
    Crawl,
    /// Healthy but close to a timer: a long wait within budget, long
    /// reasoning with progress, or progress cut by the total timer or the
    /// call deadline.
    HealthySlow,
    /// Nothing worth naming.
    Healthy,
    /// The connection was reset after the request was sent.
    ResetMidStream,
    /// The body ended cleanly before the stream said it was done.
    ClosedEarly,
    /// The connection was closed or reset mid-response, after the headers
    /// and before the stream said it was done, after a silence: what a
    /// hop's idle timer does (`basis.idle_ms` is the silence).
    IdleCut,
    /// The kernel declared the connection dead (TCP keepalive probes or
    /// `TCP_USER_TIMEOUT`), not one of our timers.
    KeepaliveDeadPeer,
    /// Another transport failure (a read failure, an unnamed connect
    /// failure).
    TransportFailure,
    /// The server refused for rate limiting (429 or an in-stream rate-limit
    /// error), with the wait it asked for and whether it was honoured.
    RateLimited,
    /// The provider said it is overloaded (529, 503, `overloaded_error`).
    Overloaded,
    /// Another server error (5xx, an in-stream server error).
    ServerError,
    /// A gateway on the path answered 502, 504, 524 or 408 itself, with a
    /// page of its own (HTML, a proxy's words) rather than the provider's
    /// JSON error: its timeout on the provider ran out first.
    GatewayTimeout,
    /// The stream's bytes could not be parsed as the dialect's events.
    MalformedStream,
    /// The credential was refused (401, 403, 402).
    Auth,
    /// The request itself was refused (400, 404, 413, 422).
    InvalidRequest,
    /// The prompt does not fit the model's context window.
    ContextOverflow,
    /// A failure no rule calls transient (an unknown status, an empty
    /// quota, an unknown provider).
    PermanentError,
    /// The connection was refused (nothing listens at the port).
    Refused,
    /// No route to the network or host.
    Unreachable,
    /// The host name did not resolve.
    DnsFailure,
    /// The TLS handshake failed.
    TlsFailure,
    /// The proxy refused or failed the tunnel, or answered with a page of
    /// its own instead of an event stream.
    ProxyFailure,
    /// Connecting took longer than our connect timer or the kernel allows.
    ConnectTimeout,
    /// Observe's proxy refused the agent's request itself, by one of its
    /// limits (`PROXY_*`: a body too large or too slow, past the in-flight
    /// cap or the request buffer), before anything went upstream.
    ProxyLimit,
    /// A retry was refused by a limit beyond the failure's own budget: the
    /// fleet retry budget, the call deadline, the call's total retries or
    /// the cap on server-requested waits.
    RetryDenied,
    /// The call was cancelled from outside: an observed agent that
    /// disconnected before its response was complete (`basis.agent_disconnected_ms`),
    /// or a run or observe stopped.
    Cancelled,
    /// The recording ends before the call did (an interrupted run, or
    /// events the recorder could not keep).
    Incomplete,
    /// A what-if cannot tell how the stream ends: an assumption said stop
    /// where the recording ends, or the replay outlived its horizon.
    Unknown,
}

impl VerdictKind {
    /// Every kind, in a stable order (the documented list).
    pub const ALL: [VerdictKind; 33] = [
        VerdictKind::SilentStall,
        VerdictKind::KeepaliveOnlyStall,
        VerdictKind::NoResponse,
        VerdictKind::ProxyBuffering,
        VerdictKind::SlowDrip,
        VerdictKind::Crawl,
        VerdictKind::HealthySlow,
        VerdictKind::Healthy,
        VerdictKind::ResetMidStream,
        VerdictKind::ClosedEarly,
        VerdictKind::IdleCut,
        VerdictKind::KeepaliveDeadPeer,
        VerdictKind::TransportFailure,
        VerdictKind::RateLimited,
        VerdictKind::Overloaded,
        VerdictKind::ServerError,
        VerdictKind::GatewayTimeout,
        VerdictKind::MalformedStream,
        VerdictKind::Auth,
        VerdictKind::InvalidRequest,
        VerdictKind::ContextOverflow,
        VerdictKind::PermanentError,
        VerdictKind::Refused,
        VerdictKind::Unreachable,
        VerdictKind::DnsFailure,
        VerdictKind::TlsFailure,
        VerdictKind::ProxyFailure,
        VerdictKind::ConnectTimeout,
        VerdictKind::ProxyLimit,
        VerdictKind::RetryDenied,
        VerdictKind::Cancelled,
        VerdictKind::Incomplete,
        VerdictKind::Unknown,
    ];

    /// The stable snake_case name (`diagnosis.kind`).
    pub const fn name(self) -> &'static str {
        match self {
            VerdictKind::SilentStall => "silent_stall",
            VerdictKind::KeepaliveOnlyStall => "keepalive_only_stall",
            VerdictKind::NoResponse => "no_response",
            VerdictKind::ProxyBuffering => "proxy_buffering",
            VerdictKind::SlowDrip => "slow_drip",
            VerdictKind::Crawl => "crawl",
            VerdictKind::HealthySlow => "healthy_slow",
            VerdictKind::Healthy => "healthy",
            VerdictKind::ResetMidStream => "reset_mid_stream",
            VerdictKind::ClosedEarly => "closed_early",
            VerdictKind::IdleCut => "idle_cut",
            VerdictKind::KeepaliveDeadPeer => "keepalive_dead_peer",
            VerdictKind::TransportFailure => "transport_failure",
            VerdictKind::RateLimited => "rate_limited",
            VerdictKind::Overloaded => "overloaded",
            VerdictKind::ServerError => "server_error",
            VerdictKind::GatewayTimeout => "gateway_timeout",
            VerdictKind::MalformedStream => "malformed_stream",
            VerdictKind::Auth => "auth",
            VerdictKind::InvalidRequest => "invalid_request",
            VerdictKind::ContextOverflow => "context_overflow",
            VerdictKind::PermanentError => "permanent_error",
            VerdictKind::Refused => "refused",
            VerdictKind::Unreachable => "unreachable",
            VerdictKind::DnsFailure => "dns_failure",
            VerdictKind::TlsFailure => "tls_failure",
            VerdictKind::ProxyFailure => "proxy_failure",
            VerdictKind::ConnectTimeout => "connect_timeout",
            VerdictKind::ProxyLimit => "proxy_limit",
            VerdictKind::RetryDenied => "retry_denied",
            VerdictKind::Cancelled => "cancelled",
            VerdictKind::Incomplete => "incomplete",
            VerdictKind::Unknown => "unknown",
        }
    }

    /// The kind in words, as summaries begin.
    pub const fn label(self) -> &'static str {
        match self {
            VerdictKind::SilentStall => "silent stall",
            VerdictKind::KeepaliveOnlyStall => "keep-alive-only stall",
            VerdictKind::NoResponse => "no response",
            VerdictKind::ProxyBuffering => "proxy buffering",
            VerdictKind::SlowDrip => "slow drip",
            VerdictKind::Crawl => "crawl",
            VerdictKind::HealthySlow => "healthy but slow",
            VerdictKind::Healthy => "healthy",
            VerdictKind::ResetMidStream => "connection reset",
            VerdictKind::ClosedEarly => "closed early",
            VerdictKind::IdleCut => "idle cut",
            VerdictKind::KeepaliveDeadPeer => "dead peer found by TCP keepalive",
            VerdictKind::TransportFailure => "transport failure",
            VerdictKind::RateLimited => "rate limited",
            VerdictKind::Overloaded => "overloaded",
            VerdictKind::ServerError => "server error",
            VerdictKind::GatewayTimeout => "gateway timeout",
            VerdictKind::MalformedStream => "malformed stream",
            VerdictKind::Auth => "credential refused",
            VerdictKind::InvalidRequest => "invalid request",
            VerdictKind::ContextOverflow => "context overflow",
            VerdictKind::PermanentError => "permanent error",
            VerdictKind::Refused => "connection refused",
            VerdictKind::Unreachable => "unreachable",
            VerdictKind::DnsFailure => "DNS failure",
            VerdictKind::TlsFailure => "TLS failure",
            VerdictKind::ProxyFailure => "proxy failure",
            VerdictKind::ConnectTimeout => "connect timeout",
            VerdictKind::ProxyLimit => "refused by observe's limit",
            VerdictKind::RetryDenied => "retry denied",
            VerdictKind::Cancelled => "cancelled",
            VerdictKind::Incomplete => "incomplete recording",
            VerdictKind::Unknown => "unknown outcome",
        }
    }
}

impl std::fmt::Display for VerdictKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How serious a verdict is, mildest first (a GUI colours by it; sorting
/// by it puts the worst last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Healthy.
    Ok,
    /// The call succeeded at once, or was cancelled, or the recording ends
    /// early, but there is something worth knowing.
    Notice,
    /// A failure that retries or a failover recovered from: the call
    /// succeeded, later than it needed to.
    Recovered,
    /// A break after content that partial recovery turned into a
    /// truncated answer.
    Partial,
    /// The call failed.
    Failed,
}

impl Severity {
    /// The snake_case name.
    pub const fn name(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Notice => "notice",
            Severity::Recovered => "recovered",
            Severity::Partial => "partial",
            Severity::Failed => "failed",
        }
    }
}

/// What a piece of evidence is about (a GUI groups or highlights by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Topic {
    /// When things happened: headers, silences, timers.
    Timing,
    /// What the body carried: chunks, bytes, events.
    Body,
    /// Response headers and statuses.
    Response,
    /// An error body or the classifier's reading of a failure.
    Error,
    /// Retries, sleeps, refusals and failovers.
    Retry,
    /// Our own runtime's lateness when a timer fired.
    Lag,
    /// What the recording holds or lacks.
    Recording,
}

/// One short, concrete fact a verdict rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// What it is about.
    pub topic: Topic,
    /// The attempt it comes from, when one.
    pub attempt: Option<u32>,
    /// When it happened, in milliseconds since the run's epoch (the
    /// events' clock), when it is one moment.
    pub at_ms: Option<f64>,
    /// The fact in words, with times, sizes or headers.
    pub text: String,
}

/// A limit that refused a retry the failure itself would have allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeniedBy {
    /// The failure's category had spent its own budget
    /// (`STALLSCOPE_RETRY_BUDGET_<CATEGORY>`).
    CategoryBudget,
    /// The call had spent its retries across categories
    /// (`STALLSCOPE_PROVIDER_STREAM_RETRIES`).
    TotalRetries,
    /// Retries were spent, and the run's limits are unknown, so which of
    /// the two budgets ran out cannot be said.
    RetryBudget,
    /// The fleet-wide retry budget of the provider.
    FleetBudget,
    /// The backoff would have crossed the call deadline.
    Deadline,
    /// The server asked for a wait longer than the cap
    /// (`STALLSCOPE_RETRY_AFTER_MAX_S`).
    ServerWaitCap,
}

impl DeniedBy {
    /// The limit in words.
    pub const fn describe(self) -> &'static str {
        match self {
            DeniedBy::CategoryBudget => "the category's retry budget",
            DeniedBy::TotalRetries => "the call's total retries",
            DeniedBy::RetryBudget => "the retry budget",
            DeniedBy::FleetBudget => "the fleet retry budget",
            DeniedBy::Deadline => "the call deadline",
            DeniedBy::ServerWaitCap => "the cap on server-requested waits",
        }
    }
}

/// What a verdict rests on, in structured form: for grouping streams
/// (`summarize`), filtering and jumping to the attempt in a GUI.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Basis {
    /// The attempt the kind was read from (0: a failure between attempts).
    pub attempt: Option<u32>,
    /// That attempt's `provider/model`.
    pub target: Option<String>,
    /// The timer that caught it, when one did.
    pub timer: Option<TimerKind>,
    /// That timer's budget, in milliseconds.
    pub timer_budget_ms: Option<f64>,
    /// The response headers that name who answered (`server`, `via`,
    /// `x-cache`), lower-case, as received.
    pub peer: Vec<(String, String)>,
    /// The silence that ended in a cut (`idle_cut`) or a cancel (until an
    /// observed agent disconnected: `cancelled`), or the wait before a
    /// gateway answered for the provider (`gateway_timeout`), in
    /// milliseconds: what a hop's, or a caller's, fixed timer shows as.
    #[serde(default)]
    pub idle_ms: Option<f64>,
    /// The limit that refused the last retry, when one did.
    pub denied_by: Option<DeniedBy>,
    /// Attempts the call made.
    pub attempts: u32,
    /// Our timer that would have fired on the attempt, where observe
    /// relayed it without acting: not a timer that caught it (`timer`).
    #[serde(default)]
    pub would_have_fired: Option<WouldHaveFired>,
    /// When the observed agent disconnected before its response was
    /// complete, in milliseconds from the attempt's start.
    #[serde(default)]
    pub agent_disconnected_ms: Option<f64>,
    /// Our timers that came due on the attempt while our own runtime was
    /// late, and were held, not acted on (guard mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<HeldTimer>,
}

/// One of our timers that came due while our own runtime ran late by a
/// tenth of its budget or more, and was held instead of ending the attempt
/// (guard mode): what our lateness decided, not the network.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HeldTimer {
    /// Which.
    pub timer: TimerKind,
    /// Its budget, in milliseconds.
    pub budget_ms: f64,
    /// Where it was held, in milliseconds from the attempt's start.
    pub at_ms: f64,
    /// How late our runtime ran, in milliseconds.
    pub lag_ms: f64,
}

/// One of our timers that would have fired, under the tunables in force,
/// on an attempt observe relayed with its clocks off: what stallscope's
/// core would have done, not what happened.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WouldHaveFired {
    /// Which.
    pub timer: TimerKind,
    /// Its budget, in milliseconds.
    pub budget_ms: f64,
    /// Where it would have fired, in milliseconds from the attempt's start.
    pub after_ms: f64,
}

/// The verdict on one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// The pattern the evidence shows.
    pub kind: VerdictKind,
    /// How serious it is.
    pub severity: Severity,
    /// One sentence: the pattern, the key numbers and how the call ended.
    /// Starts with "client overloaded: not trustworthy" when `trusted` is
    /// false.
    pub summary: String,
    /// The facts, in the order they happened.
    pub evidence: Vec<Evidence>,
    /// The `STALLSCOPE_` tunable that governs this pattern, when one does.
    pub tunable: Option<String>,
    /// What to try, in words (not checked against the run: `checked`
    /// holds what what-if found).
    pub suggestion: Option<String>,
    /// A setting what-if checked on the run this stream comes from, when
    /// one would have caught it sooner (`None` until checked: see
    /// [`crate::replay::advice`]).
    #[serde(default)]
    pub checked: Option<CheckedSuggestion>,
    /// False when a timer that decided the verdict fired while our own
    /// runtime lagged a meaningful share of its budget
    /// ([`crate::core::lag::lag_untrusts`]), or the verdict turns on a
    /// timer held for that lag (guard mode).
    pub trusted: bool,
    /// What the verdict rests on.
    pub basis: Basis,
}

#[cfg(test)]
impl Diagnosis {
    /// A verdict of `kind` and `severity` with its kind's label for a
    /// summary and nothing else, for tests that need one to hold.
    pub(crate) fn bare(kind: VerdictKind, severity: Severity) -> Diagnosis {
        Diagnosis {
            kind,
            severity,
            summary: kind.label().to_owned(),
            evidence: Vec::new(),
            tunable: None,
            suggestion: None,
            checked: None,
            trusted: true,
            basis: Basis::default(),
        }
    }
}

/// A suggestion checked by what-if on the recorded run: "SSE_IDLE_TIMEOUT_S=2
/// would have caught these 12 stalls 28 s sooner and fired on none of the
/// 28 healthy streams (what-if on this run)".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckedSuggestion {
    /// The settings, `NAME=VALUE` each, as `--set` takes them.
    pub settings: Vec<String>,
    /// What they would have done on the run, in one sentence.
    pub sentence: String,
    /// Stalls they would have caught sooner.
    pub caught: usize,
    /// How much sooner, in all, in seconds.
    pub sooner_s: f64,
    /// Attempts the recording shows healthy that a timer would have cut.
    pub false_positives: usize,
    /// Healthy attempts it was checked against (0 in reports stored before
    /// this was kept).
    #[serde(default)]
    pub healthy_attempts: usize,
}

/// Streams of a run that share a verdict kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictGroup {
    /// The kind.
    pub kind: VerdictKind,
    /// The worst severity among them.
    pub severity: Severity,
    /// The streams, in order.
    pub streams: Vec<u64>,
    /// How many of them are not trustworthy.
    pub untrusted: usize,
    /// One sentence, e.g. "12 of 40 streams: keep-alive-only stall, caught
    /// by the data-stall timer after 0.5 s each".
    pub summary: String,
    /// The tunable that governs them, when they share one.
    pub tunable: Option<String>,
    /// The checked suggestion they share, when they all have the same one.
    #[serde(default)]
    pub checked: Option<CheckedSuggestion>,
}

/// The verdicts of a whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDiagnosis {
    /// Streams diagnosed.
    pub streams: usize,
    /// Streams whose verdict is not trustworthy.
    pub untrusted: usize,
    /// One group per kind, worst severity first, then largest first.
    pub groups: Vec<VerdictGroup>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_as_their_documented_names() {
        let mut names = std::collections::BTreeSet::new();
        for kind in VerdictKind::ALL {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, kind.name(), "{kind:?}");
            assert_eq!(serde_json::from_value::<VerdictKind>(json).unwrap(), kind);
            assert!(names.insert(kind.name()), "{} twice", kind.name());
        }
        for severity in [Severity::Ok, Severity::Notice, Severity::Recovered, Severity::Partial, Severity::Failed] {
            assert_eq!(serde_json::to_value(severity).unwrap(), severity.name());
        }
    }
}
