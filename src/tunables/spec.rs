//! The table of every tunable: name, type, unit, default, allowed values,
//! group and one line of help.
//!
//! The rows of seed 001 §5 keep their meaning and default under the
//! `STALLSCOPE_` prefix (`HTTPX_` became `HTTP_`); the rest come from the
//! other seeds (per-category budgets and escalation from seed 004, the
//! deadline from seeds 000 and 003, context scaling and credential
//! cooldowns from hermes-agent as described in seed 001 §2).

use super::value::Value;

/// The prefix every tunable's environment variable carries.
pub const PREFIX: &str = "STALLSCOPE_";

/// What values a tunable accepts.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`.
    Bool,
    /// A whole number within an inclusive range.
    Int {
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// A decimal number within an inclusive range.
    Float {
        /// Smallest allowed value.
        min: f64,
        /// Largest allowed value.
        max: f64,
    },
    /// One word out of a fixed list.
    Choice(&'static [&'static str]),
    /// A comma-separated list of words out of a fixed list (may be empty).
    List(&'static [&'static str]),
    /// Free text checked by a function; `allowed` describes the form.
    Text {
        /// What the text must look like, for error messages.
        allowed: &'static str,
        /// Returns the reason when the text is not acceptable.
        check: fn(&str) -> Result<(), String>,
    },
}

/// Where a tunable's default comes from.
#[derive(Debug, Clone, Copy)]
pub enum DefaultValue {
    /// A fixed value, written as it would be in the environment.
    Fixed(&'static str),
    /// Computed from the effective value of another tunable plus an offset
    /// (seed 001: the read backstop is idle + 60 s).
    Offset {
        /// The full name of the tunable it follows.
        from: &'static str,
        /// Added to that tunable's value.
        plus: f64,
    },
}

/// The groups tunables are listed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// Stream governor timers and event classes.
    Stream,
    /// Transport: connect, read backstop, keepalive, IP family, proxy.
    Http,
    /// Retries, backoff, Retry-After, deadline, partial recovery.
    Retry,
    /// Per-category retry budgets and timeout escalation.
    Budgets,
    /// Failover chain and credential pool.
    Failover,
    /// Limits shared by all calls of a run.
    Fleet,
    /// Recording runs to the database.
    Recorder,
    /// `observe --guard`: how the core acts on an agent's traffic.
    Guard,
    /// `observe` and `observe --guard`: the limits the proxy holds its
    /// agents to.
    Proxy,
}

impl Group {
    /// A human-readable title.
    pub const fn title(self) -> &'static str {
        match self {
            Group::Stream => "Stream timers",
            Group::Http => "HTTP transport",
            Group::Retry => "Retry and backoff",
            Group::Budgets => "Retry budgets and escalation",
            Group::Failover => "Failover and credentials",
            Group::Fleet => "Fleet limits",
            Group::Recorder => "Recording",
            Group::Guard => "Guard (observe --guard)",
            Group::Proxy => "Proxy limits (observe, observe --guard)",
        }
    }
}

/// One row of the tunables table.
#[derive(Debug, Clone, Copy)]
pub struct TunableSpec {
    /// The full environment-variable name, `STALLSCOPE_…`.
    pub name: &'static str,
    /// What values it accepts.
    pub kind: Kind,
    /// Unit of the value (`s`, `tokens`, `%`, `count`, or empty).
    pub unit: &'static str,
    /// Its default.
    pub default: DefaultValue,
    /// Where it is listed.
    pub group: Group,
    /// One line of help.
    pub help: &'static str,
}

impl Kind {
    /// The type's name in listings.
    pub const fn type_name(&self) -> &'static str {
        match self {
            Kind::Bool => "bool",
            Kind::Int { .. } => "int",
            Kind::Float { .. } => "float",
            Kind::Choice(_) => "choice",
            Kind::List(_) => "list",
            Kind::Text { .. } => "text",
        }
    }
}

impl TunableSpec {
    /// The name without the `STALLSCOPE_` prefix.
    pub fn short_name(&self) -> &'static str {
        self.name.strip_prefix(PREFIX).unwrap_or(self.name)
    }

    /// The allowed values, for help and error messages.
    pub fn allowed(&self) -> String {
        match self.kind {
            Kind::Bool => "1 or 0 (true/false, yes/no, on/off)".to_owned(),
            Kind::Int { min, max } => format!("a whole number from {min} to {max}"),
            Kind::Float { min, max } => {
                format!("a number from {} to {}", Value::Float(min), Value::Float(max))
            }
            Kind::Choice(choices) => format!("one of {}", choices.join(", ")),
            Kind::List(items) => format!("a comma-separated list of {}", items.join(", ")),
            Kind::Text { allowed, .. } => allowed.to_owned(),
        }
    }
}

/// Tunables whose value is a URL that may carry a user name and password:
/// shown with those masked.
pub const URL_VALUED: &[&str] = &["STALLSCOPE_PROXY"];

/// Event classes a stream is parsed into (see `core::event::EventClass`).
pub const EVENT_CLASSES: &[&str] = &["keepalive", "lifecycle", "reasoning", "content", "tool_call"];
/// Categories failover may act on.
pub const FAILOVER_CATEGORIES: &[&str] = &["connection", "timeout", "rate_limit", "overloaded", "server_error", "auth"];
/// Failures whose retries the fleet retry budget may govern (see
/// `core::policy::BudgetScope`): a category, or a timeout by the timer that
/// fired (`timeout` alone: whichever fired). `auth`, `invalid_request` and
/// `permanent` are retried only by rotating to another key (auth) or when a
/// server forces it.
pub const FLEET_BUDGET_CATEGORIES: &[&str] = &[
    "connection",
    "timeout",
    "timeout:connect",
    "timeout:ttfb",
    "timeout:idle",
    "timeout:data_stall",
    "timeout:min_rate",
    "timeout:total",
    "rate_limit",
    "overloaded",
    "server_error",
    "auth",
    "invalid_request",
    "permanent",
];
/// When the throughput floor starts judging (see `core::policy::RateStart`).
pub const RATE_STARTS: &[&str] = &["content", "progress", "headers"];
/// Backoff jitter kinds.
pub const JITTER_KINDS: &[&str] = &["none", "full", "equal", "decorrelated", "symmetric", "positive-only"];

const fn float(min: f64, max: f64) -> Kind {
    Kind::Float { min, max }
}
const fn int(min: i64, max: i64) -> Kind {
    Kind::Int { min, max }
}
const SECONDS: Kind = float(0.0, 86_400.0);
const DAY_INT: i64 = 100;

macro_rules! tunable {
    ($name:literal, $kind:expr, $unit:literal, $default:literal, $group:ident, $help:literal) => {
        TunableSpec {
            name: concat!("STALLSCOPE_", $name),
            kind: $kind,
            unit: $unit,
            default: DefaultValue::Fixed($default),
            group: Group::$group,
            help: $help,
        }
    };
}

/// Every tunable, in listing order.
pub static TUNABLES: &[TunableSpec] = &[
    // Stream timers (seed 001 §3 and §5; hermes-agent context rules, §2).
    tunable!(
        "SSE_IDLE_TIMEOUT_S",
        SECONDS,
        "s",
        "1800",
        Stream,
        "No byte at all (pings included) for this long ends the attempt; 0 disables."
    ),
    tunable!(
        "SSE_DATA_STALL_TIMEOUT_S",
        SECONDS,
        "s",
        "900",
        Stream,
        "No progress event for this long ends the attempt even while pings arrive; 0 disables."
    ),
    tunable!(
        "SSE_TOTAL_TIMEOUT_S",
        SECONDS,
        "s",
        "0",
        Stream,
        "Optional cap on one attempt's total duration; 0 disables."
    ),
    tunable!(
        "SSE_TTFB_TIMEOUT_S",
        SECONDS,
        "s",
        "120",
        Stream,
        "No response byte this long after the attempt started (connecting and the TLS handshake count) ends the attempt; 0 disables."
    ),
    tunable!(
        "SSE_MIN_RATE",
        float(0.0, 100_000.0),
        "events/s",
        "0",
        Stream,
        "Throughput floor: fewer progress events a second than this over a whole window ends the attempt (an answer that crawls). Counts the PROGRESS_EVENT_CLASSES events, about a token each in every dialect, never bytes: keep-alives and framing must not count as progress; 0 disables."
    ),
    tunable!(
        "SSE_MIN_RATE_WINDOW_S",
        float(0.001, 86_400.0),
        "s",
        "60",
        Stream,
        "The sliding window the throughput floor averages over, in tenths; it judges only once a whole window has passed since it started."
    ),
    tunable!(
        "SSE_MIN_RATE_AFTER",
        Kind::Choice(RATE_STARTS),
        "",
        "content",
        Stream,
        "When the throughput floor starts: content (the first output, so a long prefill or reasoning phase is not judged), progress (the first progress event: reasoning is judged) or headers (the wait for the first event is judged too)."
    ),
    tunable!(
        "TTFB_DISABLE_ABOVE_TOKENS",
        int(0, 100_000_000),
        "tokens",
        "25000",
        Stream,
        "Above this estimated context size the TTFB guard is off (long prefill is not a stall); 0 keeps it on. An explicit TTFB stays on unless this is set too."
    ),
    tunable!(
        "STALE_CONTEXT_SCALING",
        Kind::Bool,
        "",
        "1",
        Stream,
        "Scale a default (not explicitly set) data-stall timeout by the call's context size."
    ),
    TunableSpec {
        name: "STALLSCOPE_STALE_CONTEXT_TIERS",
        kind: Kind::Text {
            allowed: "TOKENS:FACTOR pairs separated by commas, e.g. 50000:1.33,100000:1.67 (factors >= 1)",
            check: check_tiers,
        },
        unit: "",
        default: DefaultValue::Fixed("50000:1.33,100000:1.67"),
        group: Group::Stream,
        help: "Context-size tiers for stale scaling: above TOKENS the data-stall default is multiplied by FACTOR.",
    },
    tunable!(
        "PROGRESS_EVENT_CLASSES",
        Kind::List(EVENT_CLASSES),
        "",
        "reasoning,content,tool_call",
        Stream,
        "Event classes that reset the data-stall timer (any byte resets the idle timer)."
    ),
    // HTTP transport (seed 001 §4).
    tunable!(
        "HTTP_CONNECT_TIMEOUT_S",
        float(0.001, 3600.0),
        "s",
        "30",
        Http,
        "TCP and TLS connection set-up budget (fast-fail a dead VPN route)."
    ),
    TunableSpec {
        name: "STALLSCOPE_HTTP_READ_TIMEOUT_S",
        kind: SECONDS,
        unit: "s",
        default: DefaultValue::Offset { from: "STALLSCOPE_SSE_IDLE_TIMEOUT_S", plus: 60.0 },
        group: Group::Http,
        help: "Per-read backstop under the governor; defaults to idle + 60 s (installed only when shorter than idle); 0 disables.",
    },
    tunable!(
        "HTTP1_ONLY",
        Kind::Bool,
        "",
        "1",
        Http,
        "Speak HTTP/1.1 only (avoids HTTP/2 stream resets behind proxies)."
    ),
    tunable!(
        "TCP_KEEPALIVE",
        Kind::Bool,
        "",
        "1",
        Http,
        "Enable TCP keepalive probes (dead-peer detection in about a minute); the socket's TCP_USER_TIMEOUT is set to KEEPIDLE + KEEPINTVL × KEEPCNT too, so sent data left unacknowledged that long also ends the connection. 0: neither, the kernel's defaults apply."
    ),
    tunable!("TCP_KEEPIDLE_S", float(1.0, 7200.0), "s", "30", Http, "Idle time before the first keepalive probe."),
    tunable!("TCP_KEEPINTVL_S", float(1.0, 600.0), "s", "10", Http, "Interval between keepalive probes."),
    tunable!(
        "TCP_KEEPCNT",
        int(1, 100),
        "count",
        "3",
        Http,
        "Unanswered probes before the connection is declared dead."
    ),
    tunable!(
        "FORCE_IPV4",
        Kind::Bool,
        "",
        "0",
        Http,
        "Bind an IPv4 source address (escape hatch for broken-IPv6 VPNs)."
    ),
    TunableSpec {
        name: "STALLSCOPE_PROXY",
        kind: Kind::Text {
            allowed: "empty (use HTTPS_PROXY/ALL_PROXY/NO_PROXY), off, or an http://, https://, socks5:// or socks5h:// URL",
            check: check_proxy,
        },
        unit: "",
        default: DefaultValue::Fixed(""),
        group: Group::Http,
        help: "Proxy for providers without their own; empty follows the standard *_PROXY variables, off ignores them.",
    },
    // Retry and backoff (seed 001 §5, seed 000 §4, seed 004).
    tunable!(
        "PROVIDER_STREAM_RETRIES",
        int(0, DAY_INT),
        "count",
        "3",
        Retry,
        "Retries of one call across all categories; each category's budget also applies."
    ),
    tunable!(
        "PROVIDER_STREAM_BACKOFF_S",
        SECONDS,
        "s",
        "1.0",
        Retry,
        "Backoff base: the nominal sleep before the first retry."
    ),
    tunable!(
        "PROVIDER_STREAM_BACKOFF_MAX_S",
        SECONDS,
        "s",
        "30.0",
        Retry,
        "Cap on the exponential backoff component (a server Retry-After has its own cap)."
    ),
    tunable!(
        "BACKOFF_MULTIPLIER",
        float(1.0, 10.0),
        "",
        "2.0",
        Retry,
        "Growth factor of the nominal backoff per retry."
    ),
    tunable!(
        "BACKOFF_JITTER",
        Kind::Choice(JITTER_KINDS),
        "",
        "symmetric",
        Retry,
        "Jitter applied to computed backoff sleeps."
    ),
    tunable!(
        "BACKOFF_JITTER_RATIO",
        float(0.0, 1.0),
        "",
        "0.25",
        Retry,
        "Spread of symmetric and positive-only jitter, as a fraction of the sleep."
    ),
    tunable!(
        "RETRY_AFTER_MAX_S",
        SECONDS,
        "s",
        "60",
        Retry,
        "Longest server-requested wait honoured; a longer one fails over or fails fast, reporting it."
    ),
    tunable!(
        "RETRY_AFTER_JITTER",
        Kind::Choice(&["none", "positive-only"]),
        "",
        "positive-only",
        Retry,
        "Jitter on server-requested waits; positive-only never sleeps less than asked."
    ),
    tunable!(
        "CALL_DEADLINE_S",
        SECONDS,
        "s",
        "0",
        Retry,
        "Whole-call deadline over attempts and sleeps; interrupts the attempt in flight; 0 = none."
    ),
    tunable!(
        "PARTIAL_RECOVERY",
        Kind::Bool,
        "",
        "1",
        Retry,
        "After content has streamed, a transient break finishes the call with the partial text (stop reason length)."
    ),
    // Per-category budgets (seed 004 defaults) and escalation.
    tunable!(
        "RETRY_BUDGET_CONNECTION",
        int(0, DAY_INT),
        "count",
        "3",
        Budgets,
        "Retries allowed for connection failures."
    ),
    tunable!("RETRY_BUDGET_TIMEOUT", int(0, DAY_INT), "count", "3", Budgets, "Retries allowed for timeouts."),
    tunable!(
        "RETRY_BUDGET_RATE_LIMIT",
        int(0, DAY_INT),
        "count",
        "5",
        Budgets,
        "Retries allowed for rate limiting (429)."
    ),
    tunable!(
        "RETRY_BUDGET_OVERLOADED",
        int(0, DAY_INT),
        "count",
        "5",
        Budgets,
        "Retries allowed for overloaded providers (529, 503)."
    ),
    tunable!(
        "RETRY_BUDGET_SERVER_ERROR",
        int(0, DAY_INT),
        "count",
        "2",
        Budgets,
        "Retries allowed for other server errors (5xx)."
    ),
    tunable!(
        "RETRY_BUDGET_SERVER_FORCED",
        int(0, DAY_INT),
        "count",
        "2",
        Budgets,
        "Retries a server forces with `x-should-retry: true` on a failure whose category is not retried."
    ),
    tunable!(
        "TIMEOUT_ESCALATION",
        Kind::Choice(&["none", "additive", "multiplicative", "linear"]),
        "",
        "none",
        Budgets,
        "How stream timers grow on each timeout retry."
    ),
    tunable!(
        "TIMEOUT_ESCALATION_INCREMENT_S",
        SECONDS,
        "s",
        "30",
        Budgets,
        "Additive escalation: seconds added per timeout retry."
    ),
    tunable!(
        "TIMEOUT_ESCALATION_MULTIPLIER",
        float(1.0, 10.0),
        "",
        "2.0",
        Budgets,
        "Multiplicative escalation: factor per timeout retry."
    ),
    tunable!(
        "TIMEOUT_ESCALATION_MAX_S",
        SECONDS,
        "s",
        "0",
        Budgets,
        "Ceiling of escalated timers (the endpoint of linear escalation); 0 = no ceiling."
    ),
    // Failover and credentials (seed 001 §4, hermes-agent credential pool).
    TunableSpec {
        name: "STALLSCOPE_FALLBACK_MODELS",
        kind: Kind::Text {
            allowed: "empty (same-provider chain of at most 2), off, none, or provider/model,provider/model,…",
            check: check_fallback_models,
        },
        unit: "",
        default: DefaultValue::Fixed(""),
        group: Group::Failover,
        help: "Failover chain tried before the first content token; empty = the provider's other models (at most 2).",
    },
    tunable!(
        "FAILOVER_ON",
        Kind::List(FAILOVER_CATEGORIES),
        "",
        "connection,timeout,rate_limit,overloaded,server_error",
        Failover,
        "Categories that move the call to the next target once it cannot be retried where it is."
    ),
    tunable!(
        "CREDENTIAL_ROTATION",
        Kind::Choice(&["round-robin", "least-used"]),
        "",
        "round-robin",
        Failover,
        "How the next key of a provider's pool is picked."
    ),
    tunable!(
        "CREDENTIAL_COOLDOWN_AUTH_S",
        SECONDS,
        "s",
        "300",
        Failover,
        "How long a key refused with 401/403/402 rests before reuse."
    ),
    tunable!(
        "CREDENTIAL_COOLDOWN_RATE_LIMIT_S",
        SECONDS,
        "s",
        "3600",
        Failover,
        "How long a rate-limited key rests when the server gives no reset hint."
    ),
    // Fleet-wide retry budget (Envoy's retry budget).
    tunable!(
        "FLEET_RETRY_BUDGET_PERCENT",
        float(0.0, 100.0),
        "%",
        "20",
        Fleet,
        "Retries in flight per provider (of the failures FLEET_RETRY_BUDGET_CATEGORIES names) may be at most this share of its active calls…"
    ),
    tunable!("FLEET_RETRY_BUDGET_MIN", int(0, 1_000_000), "count", "3", Fleet, "…or this many, whichever is larger."),
    tunable!(
        "FLEET_RETRY_BUDGET_CATEGORIES",
        Kind::List(FLEET_BUDGET_CATEGORIES),
        "",
        "timeout:ttfb,rate_limit,overloaded,server_error",
        Fleet,
        "The failures whose retries the fleet budget governs: those that say the provider is loaded (429, overloaded, 5xx, no response byte before the TTFB timer), whose retries would add to that load. A stall after the response began, a refused connection or a key rotation says nothing about its load, so their retries are neither refused nor counted. Empty: the budget refuses nothing."
    ),
    // Recording (SPEC §6: a crash loses at most the last unflushed batch).
    tunable!(
        "RECORDER_FLUSH_MS",
        int(10, 10_000),
        "ms",
        "200",
        Recorder,
        "How often recorded events are committed to the database; a crash loses at most this much."
    ),
    tunable!(
        "RECORD_BODIES",
        Kind::Choice(&["off", "text", "raw"]),
        "",
        "off",
        Recorder,
        "Record response bodies: off; text (each event's text); raw (the exact bytes of an event stream, compressed; an error body with anything that looks like a key redacted, as the recorded error body is). Replay plays raw bodies through the real decoder."
    ),
    tunable!(
        "RECORD_BODY_MAX_KB",
        int(1, 1_048_576),
        "KiB",
        "1024",
        Recorder,
        "The most of one attempt's body that is recorded; the rest is cut and the cut is marked."
    ),
    tunable!(
        "RECORDER_BODY_BUDGET_MB",
        int(1, 65_536),
        "MiB",
        "64",
        Recorder,
        "Body bytes waiting for the recorder at once, at most; a body over it is dropped and counted, never waited for."
    ),
    tunable!(
        "GUARD_AFTER_CONTENT",
        Kind::Choice(&crate::providers::ending::AfterContent::CHOICES),
        "",
        "error",
        Guard,
        "How the guard ends an agent's stream that one of our clocks caught stalled after content reached the agent (never retried: the agent would see text twice): error, the dialect's own in-stream error, which the SDK raises so the agent's retry starts at once; finish, the dialect's normal end at the output limit (finish_reason length, stop_reason max_tokens) with the partial answer."
    ),
    // The agent side of observe's proxy, held to nginx's standard: every
    // wait has a timeout and every buffer a bound (nginx's
    // client_header_timeout, client_body_timeout, client_max_body_size,
    // worker_connections).
    tunable!(
        "PROXY_HEADER_TIMEOUT_S",
        float(0.1, 3_600.0),
        "s",
        "30",
        Proxy,
        "An agent's connection that has not sent a whole request head this long after it was ready for one (opened, or kept alive after its last answer) is closed (nginx: client_header_timeout 60 s and keepalive_timeout 75 s; hyper: 30 s)."
    ),
    tunable!(
        "PROXY_BODY_TIMEOUT_S",
        float(0.1, 3_600.0),
        "s",
        "60",
        Proxy,
        "An agent's request body must have arrived whole this long after its head; else the request is answered 408 and recorded (nginx: client_body_timeout, 60 s between reads)."
    ),
    tunable!(
        "PROXY_MAX_REQUEST_MB",
        int(1, 4_096),
        "MiB",
        "64",
        Proxy,
        "The largest request body the proxy takes; a larger one is answered 413 and recorded (a million-token prompt is about 4 MiB)."
    ),
    tunable!(
        "PROXY_REQUEST_BUFFER_MB",
        int(1, 65_536),
        "MiB",
        "512",
        Proxy,
        "Request bodies held at once, all agents together, at most; a request that would go past it is answered 503 with Retry-After and recorded."
    ),
    tunable!(
        "PROXY_MAX_CONNECTIONS",
        int(1, 1_000_000),
        "count",
        "4096",
        Proxy,
        "Agent connections open at once, at most; past it a connection's requests are answered 503 with Retry-After and it is closed (nginx: worker_connections)."
    ),
    tunable!(
        "PROXY_MAX_IN_FLIGHT",
        int(1, 1_000_000),
        "count",
        "2048",
        Proxy,
        "Agent requests in flight at once, at most; past it a request is answered 503 with Retry-After in its dialect's error shape, and recorded."
    ),
];

/// Tunables whose absence from a run's stored snapshot does not mean their
/// default: the run was recorded before the tunable existed and ran with
/// this value, which its replay must keep. The fleet budget governed every
/// retry before its categories could be chosen.
pub const BEFORE_THEY_EXISTED: &[(&str, &str)] = &[(
    "STALLSCOPE_FLEET_RETRY_BUDGET_CATEGORIES",
    "connection,timeout,rate_limit,overloaded,server_error,auth,invalid_request,permanent",
)];

/// Looks up a tunable by its full or short name (case-insensitive).
pub fn find(name: &str) -> Option<&'static TunableSpec> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with(PREFIX) { upper } else { format!("{PREFIX}{upper}") };
    TUNABLES.iter().find(|spec| spec.name == full)
}

fn check_tiers(text: &str) -> Result<(), String> {
    parse_tiers(text).map(|_| ())
}

/// Parses `TOKENS:FACTOR,…` into ascending `(tokens, factor)` pairs.
pub fn parse_tiers(text: &str) -> Result<Vec<(u64, f64)>, String> {
    let mut tiers = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (tokens, factor) = part.split_once(':').ok_or_else(|| format!("`{part}` has no `:`"))?;
        let tokens: u64 = tokens.trim().parse().map_err(|_| format!("`{tokens}` is not a token count"))?;
        let factor: f64 = factor
            .trim()
            .parse()
            .ok()
            .filter(|f: &f64| f.is_finite() && *f >= 1.0 && *f <= 100.0)
            .ok_or_else(|| format!("`{factor}` is not a factor from 1 to 100"))?;
        tiers.push((tokens, factor));
    }
    tiers.sort_by_key(|&(tokens, _)| tokens);
    Ok(tiers)
}

fn check_proxy(text: &str) -> Result<(), String> {
    let text = text.trim();
    if text.is_empty() || text.eq_ignore_ascii_case("off") {
        return Ok(());
    }
    let scheme = text.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("http" | "https" | "socks5" | "socks5h") => Ok(()),
        _ => Err(format!("`{text}` is not an http, https, socks5 or socks5h URL")),
    }
}

fn check_fallback_models(text: &str) -> Result<(), String> {
    crate::core::failover::FallbackSetting::parse(text).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_prefixed_and_upper_case() {
        let mut seen = std::collections::BTreeSet::new();
        for spec in TUNABLES {
            assert!(spec.name.starts_with(PREFIX), "{}", spec.name);
            assert_eq!(spec.name, spec.name.to_ascii_uppercase());
            assert!(seen.insert(spec.name), "duplicate {}", spec.name);
            assert!(!spec.help.is_empty());
        }
    }

    #[test]
    fn seed_001_rows_exist_with_their_defaults() {
        // Seed 001 §5, with OPENPROGRAM_ → STALLSCOPE_ and HTTPX_ → HTTP_.
        let rows = [
            ("SSE_IDLE_TIMEOUT_S", "1800"),
            ("SSE_DATA_STALL_TIMEOUT_S", "900"),
            ("SSE_TOTAL_TIMEOUT_S", "0"),
            ("HTTP_CONNECT_TIMEOUT_S", "30"),
            ("PROVIDER_STREAM_RETRIES", "3"),
            ("PROVIDER_STREAM_BACKOFF_S", "1.0"),
            ("PROVIDER_STREAM_BACKOFF_MAX_S", "30.0"),
            ("TCP_KEEPALIVE", "1"),
            ("TCP_KEEPIDLE_S", "30"),
            ("TCP_KEEPINTVL_S", "10"),
            ("TCP_KEEPCNT", "3"),
            ("FORCE_IPV4", "0"),
            ("PARTIAL_RECOVERY", "1"),
            ("FALLBACK_MODELS", ""),
        ];
        for (short, default) in rows {
            let spec = find(short).unwrap_or_else(|| panic!("missing {short}"));
            match spec.default {
                DefaultValue::Fixed(d) => assert_eq!(d, default, "{short}"),
                DefaultValue::Offset { .. } => panic!("{short} should be fixed"),
            }
        }
        let read = find("HTTP_READ_TIMEOUT_S").unwrap();
        assert!(matches!(read.default, DefaultValue::Offset { from: "STALLSCOPE_SSE_IDLE_TIMEOUT_S", plus: 60.0 }));
    }

    #[test]
    fn what_runs_did_before_a_tunable_existed_is_a_value_it_accepts_and_not_its_default() {
        for &(name, before) in BEFORE_THEY_EXISTED {
            let spec = find(name).unwrap_or_else(|| panic!("{name} is no tunable"));
            assert_eq!(spec.name, name, "the full name");
            let DefaultValue::Fixed(default) = spec.default else { panic!("{name} has a derived default") };
            let parse = |text| Value::parse(&spec.kind, text).unwrap_or_else(|e| panic!("{name} {text:?}: {e}"));
            assert_ne!(parse(before), parse(default), "{name}: the same as the default needs no entry");
        }
    }

    #[test]
    fn tiers_parse_and_sort() {
        assert_eq!(parse_tiers("100000:1.67, 50000:1.33").unwrap(), vec![(50000, 1.33), (100000, 1.67)]);
        assert!(parse_tiers("50000").is_err());
        assert!(parse_tiers("50000:0.5").is_err());
        assert_eq!(parse_tiers("").unwrap(), vec![]);
    }
}
