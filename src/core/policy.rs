//! The core's settings, read once from the effective tunables into typed
//! values, with the checks that span several tunables.

use std::collections::BTreeMap;
use std::time::Duration;

use super::backoff::{BackoffPolicy, Jitter, ServerJitter};
use super::category::{Category, TimerKind};
use super::credentials::Rotation;
use super::escalation::{Escalation, EscalationStrategy};
use super::event::EventClass;
use super::failover::FallbackSetting;
use super::transport::{Keepalive, ProxySetting, TransportSettings};
use crate::tunables::{TunableError, Tunables, spec};

/// Stream governor settings for one attempt (before context scaling and
/// escalation, which [`TimerSettings::for_attempt`] applies).
#[derive(Debug, Clone, PartialEq)]
pub struct TimerSettings {
    /// No byte at all; `None` = off.
    pub idle: Option<Duration>,
    /// No progress event; `None` = off.
    pub data_stall: Option<Duration>,
    /// One attempt's total; `None` = off.
    pub total: Option<Duration>,
    /// Time to first byte; `None` = off.
    pub ttfb: Option<Duration>,
    /// The TTFB guard is off above this context size (tokens).
    pub ttfb_disable_above_tokens: Option<u64>,
    /// Tiers scaling the data-stall timeout by context size, when it was
    /// not set explicitly: `(tokens, factor)` ascending.
    pub stale_tiers: Vec<(u64, f64)>,
    /// Event classes that reset the data-stall timer (and that the
    /// throughput floor counts).
    pub progress_classes: Vec<EventClass>,
    /// The throughput floor; `None` = off.
    pub min_rate: Option<RateFloor>,
    /// Whether a clock that comes due while our own runtime runs late by a
    /// tenth of its budget or more is held instead of ending the attempt
    /// (the call deadline never is). Not a tunable: off, except where the
    /// guard turns it on (it does not cut an agent's stream for our own
    /// lateness).
    pub hold_when_late: bool,
    /// Whether reasoning counts as content: once it has streamed, no retry
    /// or failover (the stream is committed). Not a tunable: off (our own
    /// calls keep no reasoning a retry could repeat), except where the
    /// guard turns it on (an agent has the reasoning it relayed).
    pub reasoning_commits: bool,
}

/// The throughput floor (`STALLSCOPE_SSE_MIN_RATE*`): the fourth clock, for
/// a stream that keeps making a little progress, which neither the idle nor
/// the data-stall clock ever sees (curl's `--speed-limit`/`--speed-time`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateFloor {
    /// Progress events per second, at least, over the window.
    pub floor: f64,
    /// The window the rate is measured over.
    pub window: Duration,
    /// When the floor starts judging.
    pub after: RateStart,
}

impl RateFloor {
    /// The progress events a whole window must hold to be at the floor.
    pub fn events_per_window(&self) -> f64 {
        self.floor * self.window.as_secs_f64()
    }
}

/// When the throughput floor starts judging an attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RateStart {
    /// At the first output event (content or a tool call): a long prefill
    /// or reasoning phase is not judged.
    #[default]
    Content,
    /// At the first progress event: reasoning is judged too.
    Progress,
    /// When the response headers arrive: the wait for the first event is
    /// judged too.
    Headers,
}

impl RateStart {
    /// The start `STALLSCOPE_SSE_MIN_RATE_AFTER` names (`content` for
    /// anything else: the tunable's check has refused it already).
    pub fn parse(text: &str) -> RateStart {
        match text {
            "progress" => RateStart::Progress,
            "headers" => RateStart::Headers,
            _ => RateStart::Content,
        }
    }
}

/// The timers of one attempt after context rules and escalation.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptTimers {
    /// No byte at all.
    pub idle: Option<Duration>,
    /// No progress event.
    pub data_stall: Option<Duration>,
    /// One attempt's total.
    pub total: Option<Duration>,
    /// Time to first byte.
    pub ttfb: Option<Duration>,
    /// Why the TTFB guard is off, when a context rule switched it off.
    pub ttfb_off_reason: Option<String>,
    /// Event classes that reset the data-stall timer.
    pub progress_classes: Vec<EventClass>,
    /// The throughput floor, when on.
    pub min_rate: Option<RateFloor>,
    /// Whether a clock that comes due while our runtime is late is held
    /// ([`TimerSettings::hold_when_late`]).
    pub hold_when_late: bool,
    /// Whether reasoning commits the stream
    /// ([`TimerSettings::reasoning_commits`]).
    pub reasoning_commits: bool,
}

impl TimerSettings {
    /// The timers for an attempt of a call with `context_tokens` of context
    /// after `timeout_retries` timeout retries.
    pub fn for_attempt(
        &self,
        context_tokens: Option<u64>,
        escalation: &Escalation,
        timeout_retries: u32,
        timeout_budget: u32,
    ) -> AttemptTimers {
        let tokens = context_tokens.unwrap_or(0);
        let factor =
            self.stale_tiers.iter().rev().find(|(above, _)| tokens > *above).map_or(1.0, |&(_, factor)| factor);
        let data_stall = self.data_stall.map(|d| d.mul_f64(factor));
        let (ttfb, ttfb_off_reason) = match (self.ttfb, self.ttfb_disable_above_tokens) {
            (Some(_), Some(limit)) if tokens > limit => {
                (None, Some(format!("context of {tokens} tokens is above {limit}: long prefill is not a stall")))
            }
            (ttfb, _) => (ttfb, None),
        };
        let grow = |d: Option<Duration>| d.map(|d| escalation.escalate(d, timeout_retries, timeout_budget));
        AttemptTimers {
            idle: grow(self.idle),
            data_stall: grow(data_stall),
            total: grow(self.total),
            ttfb: grow(ttfb),
            ttfb_off_reason,
            progress_classes: self.progress_classes.clone(),
            // Escalation buys patience with pauses; a crawl does not speed
            // up for being watched longer, so the floor stays as set.
            min_rate: self.min_rate,
            hold_when_late: self.hold_when_late,
            reasoning_commits: self.reasoning_commits,
        }
    }
}

/// Retry settings of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySettings {
    /// Retries of one call across all categories.
    pub max_retries: u32,
    /// Each retryable category's own budget.
    pub budgets: BTreeMap<Category, u32>,
    /// Retries of categories that are not retried, forced by the server
    /// with `x-should-retry: true`; counted under their own category.
    pub server_forced_budget: u32,
    /// Computed backoff.
    pub backoff: BackoffPolicy,
    /// Jitter on server-requested waits.
    pub server_jitter: ServerJitter,
    /// The longest server-requested wait honoured.
    pub retry_after_max: Duration,
    /// Timer growth on timeout retries.
    pub escalation: Escalation,
    /// The whole-call deadline.
    pub deadline: Option<Duration>,
    /// Keep partial text after a transient break.
    pub partial_recovery: bool,
}

impl RetrySettings {
    /// The budget of one category (0 for categories that carry none).
    pub fn budget(&self, category: Category) -> u32 {
        self.budgets.get(&category).copied().unwrap_or(0)
    }
}

/// Failover settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FailoverSettings {
    /// The chain setting.
    pub fallback: FallbackSetting,
    /// Categories that move a call on once it cannot be retried in place.
    pub on: Vec<Category>,
}

/// Credential pool settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CredentialSettings {
    /// How the next key is picked.
    pub rotation: Rotation,
    /// Rest after 401/403/402.
    pub auth_cooldown: Duration,
    /// Rest after 429 with no reset hint.
    pub rate_limit_cooldown: Duration,
}

/// The fleet-wide retry budget (Envoy's: a share of active calls, with a
/// floor), over the failures it governs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetBudgetSettings {
    /// Share of active calls, in percent.
    pub percent: f64,
    /// The floor.
    pub min: usize,
    /// The failures whose retries it bounds and counts.
    pub governs: BudgetScope,
}

/// The failures whose retries the fleet budget governs
/// (`STALLSCOPE_FLEET_RETRY_BUDGET_CATEGORIES`): whole categories, and
/// timeouts by the timer that fired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetScope {
    /// A bit per category (its place in the enum): every failure of it.
    categories: u16,
    /// A bit per timer: the timeouts it fired.
    timers: u8,
}

impl BudgetScope {
    /// The scope a list names: `rate_limit`, `timeout` (whichever timer
    /// fired), `timeout:ttfb` (that timer only), … Words outside the list
    /// are skipped: the tunable's check has refused them already.
    pub fn parse(list: &str) -> BudgetScope {
        let mut scope = BudgetScope::default();
        for word in list.split(',').map(str::trim) {
            if let Some(timer) = word.strip_prefix("timeout:") {
                if let Some(&timer) = TimerKind::ALL.iter().find(|t| t.name() == timer) {
                    scope.timers |= 1 << timer as u8;
                }
            } else if let Ok(category) = word.parse::<Category>() {
                scope.categories |= 1 << category as u16;
            }
        }
        scope
    }

    /// Whether a retry of a failure of `category` (a timeout: fired by
    /// `timer`) is the budget's to bound.
    pub fn covers(&self, category: Category, timer: Option<TimerKind>) -> bool {
        self.categories & (1 << category as u16) != 0
            || (category == Category::Timeout && timer.is_some_and(|t| self.timers & (1 << t as u8) != 0))
    }
}

/// What of each attempt's response body the governor keeps for the
/// recording (`STALLSCOPE_RECORD_BODIES`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BodyMode {
    /// Nothing.
    #[default]
    Off,
    /// Each parsed event's text.
    Text,
    /// The exact bytes.
    Raw,
}

/// Body recording settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BodySettings {
    /// What is kept.
    pub mode: BodyMode,
    /// The most kept of one attempt's body, in bytes.
    pub max_bytes: usize,
}

/// Every core setting.
#[derive(Debug, Clone, PartialEq)]
pub struct CorePolicy {
    /// Stream governor.
    pub timers: TimerSettings,
    /// Retry executor.
    pub retry: RetrySettings,
    /// Failover chain.
    pub failover: FailoverSettings,
    /// Credential pools.
    pub credentials: CredentialSettings,
    /// Fleet retry budget.
    pub fleet: FleetBudgetSettings,
    /// Transport.
    pub transport: TransportSettings,
    /// What of each body the recording keeps.
    pub bodies: BodySettings,
}

impl Default for CorePolicy {
    fn default() -> Self {
        // The shipped defaults satisfy every cross-tunable check.
        CorePolicy::from_tunables(&Tunables::defaults()).unwrap_or_else(|e| panic!("shipped defaults are invalid: {e}"))
    }
}

fn invalid(
    tunables: &Tunables,
    name: &'static str,
    reason: impl Into<String>,
    allowed: impl Into<String>,
) -> TunableError {
    let effective = tunables.get(name);
    TunableError::Invalid {
        name,
        value: effective.value.to_string(),
        reason: reason.into(),
        allowed: allowed.into(),
        origin: effective.source.to_string(),
    }
}

impl CorePolicy {
    /// Reads the policy from effective tunables, checking the rules that
    /// span several of them.
    pub fn from_tunables(t: &Tunables) -> Result<CorePolicy, TunableError> {
        let text = |name: &str| t.get(name).value.as_str().to_owned();
        let count = |name: &str| u32::try_from(t.get(name).value.as_i64()).unwrap_or(0);

        let data_stall_explicit = t.get("STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S").source.is_explicit();
        let scaling = t.get("STALLSCOPE_STALE_CONTEXT_SCALING").value.as_bool();
        let stale_tiers = if scaling && !data_stall_explicit {
            spec::parse_tiers(&text("STALLSCOPE_STALE_CONTEXT_TIERS"))
                .map_err(|reason| invalid(t, "STALLSCOPE_STALE_CONTEXT_TIERS", reason, "TOKENS:FACTOR,…"))?
        } else {
            // An explicit user value always wins over a derived default.
            Vec::new()
        };
        let progress_classes = text("STALLSCOPE_PROGRESS_EVENT_CLASSES")
            .split(',')
            .filter_map(|name| match name {
                "keepalive" => Some(EventClass::Keepalive),
                "lifecycle" => Some(EventClass::Lifecycle),
                "reasoning" => Some(EventClass::Reasoning),
                "content" => Some(EventClass::Content),
                "tool_call" => Some(EventClass::ToolCall),
                _ => None,
            })
            .collect();
        // Switching TTFB off for a large context is a derived default: a TTFB
        // the user set explicitly stays on, unless they also set the
        // threshold explicitly.
        let threshold = t.get("STALLSCOPE_TTFB_DISABLE_ABOVE_TOKENS");
        let ttfb_explicit = t.get("STALLSCOPE_SSE_TTFB_TIMEOUT_S").source.is_explicit();
        let ttfb_limit = if ttfb_explicit && !threshold.source.is_explicit() { 0 } else { threshold.value.as_i64() };
        let timers = TimerSettings {
            idle: t.optional_seconds("STALLSCOPE_SSE_IDLE_TIMEOUT_S"),
            data_stall: t.optional_seconds("STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S"),
            total: t.optional_seconds("STALLSCOPE_SSE_TOTAL_TIMEOUT_S"),
            ttfb: t.optional_seconds("STALLSCOPE_SSE_TTFB_TIMEOUT_S"),
            ttfb_disable_above_tokens: u64::try_from(ttfb_limit).ok().filter(|&n| n > 0),
            stale_tiers,
            progress_classes,
            min_rate: rate_floor(t),
            hold_when_late: false,
            reasoning_commits: false,
        };

        let backoff = BackoffPolicy {
            base: t.seconds("STALLSCOPE_PROVIDER_STREAM_BACKOFF_S"),
            cap: t.seconds("STALLSCOPE_PROVIDER_STREAM_BACKOFF_MAX_S"),
            multiplier: t.get("STALLSCOPE_BACKOFF_MULTIPLIER").value.as_f64(),
            jitter: text("STALLSCOPE_BACKOFF_JITTER").parse::<Jitter>().unwrap_or_default(),
            jitter_ratio: t.get("STALLSCOPE_BACKOFF_JITTER_RATIO").value.as_f64(),
        };
        if backoff.cap < backoff.base {
            return Err(invalid(
                t,
                "STALLSCOPE_PROVIDER_STREAM_BACKOFF_MAX_S",
                "below the backoff base",
                format!("at least STALLSCOPE_PROVIDER_STREAM_BACKOFF_S ({} s)", backoff.base.as_secs_f64()),
            ));
        }
        let escalation = Escalation {
            strategy: text("STALLSCOPE_TIMEOUT_ESCALATION").parse::<EscalationStrategy>().unwrap_or_default(),
            increment: t.seconds("STALLSCOPE_TIMEOUT_ESCALATION_INCREMENT_S"),
            multiplier: t.get("STALLSCOPE_TIMEOUT_ESCALATION_MULTIPLIER").value.as_f64(),
            max: t.optional_seconds("STALLSCOPE_TIMEOUT_ESCALATION_MAX_S"),
        };
        if escalation.strategy == EscalationStrategy::Linear && escalation.max.is_none() {
            return Err(invalid(
                t,
                "STALLSCOPE_TIMEOUT_ESCALATION_MAX_S",
                "linear escalation needs an endpoint",
                "a ceiling above 0 when STALLSCOPE_TIMEOUT_ESCALATION=linear",
            ));
        }
        let budgets = Category::RETRYABLE
            .into_iter()
            .map(|c| (c, count(&format!("STALLSCOPE_RETRY_BUDGET_{}", c.name().to_ascii_uppercase()))))
            .collect();
        let retry = RetrySettings {
            max_retries: count("STALLSCOPE_PROVIDER_STREAM_RETRIES"),
            budgets,
            server_forced_budget: count("STALLSCOPE_RETRY_BUDGET_SERVER_FORCED"),
            backoff,
            server_jitter: text("STALLSCOPE_RETRY_AFTER_JITTER")
                .parse::<ServerJitter>()
                .unwrap_or(ServerJitter::PositiveOnly),
            retry_after_max: t.seconds("STALLSCOPE_RETRY_AFTER_MAX_S"),
            escalation,
            deadline: t.optional_seconds("STALLSCOPE_CALL_DEADLINE_S"),
            partial_recovery: t.get("STALLSCOPE_PARTIAL_RECOVERY").value.as_bool(),
        };

        let fallback = FallbackSetting::parse(&text("STALLSCOPE_FALLBACK_MODELS"))
            .map_err(|reason| invalid(t, "STALLSCOPE_FALLBACK_MODELS", reason, "provider/model,…, off or none"))?;
        let failover = FailoverSettings {
            fallback,
            on: text("STALLSCOPE_FAILOVER_ON").split(',').filter_map(|c| c.parse().ok()).collect(),
        };
        let credentials = CredentialSettings {
            rotation: if text("STALLSCOPE_CREDENTIAL_ROTATION") == "least-used" {
                Rotation::LeastUsed
            } else {
                Rotation::RoundRobin
            },
            auth_cooldown: t.seconds("STALLSCOPE_CREDENTIAL_COOLDOWN_AUTH_S"),
            rate_limit_cooldown: t.seconds("STALLSCOPE_CREDENTIAL_COOLDOWN_RATE_LIMIT_S"),
        };
        let fleet = FleetBudgetSettings {
            percent: t.get("STALLSCOPE_FLEET_RETRY_BUDGET_PERCENT").value.as_f64(),
            min: usize::try_from(t.get("STALLSCOPE_FLEET_RETRY_BUDGET_MIN").value.as_i64()).unwrap_or(0),
            governs: BudgetScope::parse(&text("STALLSCOPE_FLEET_RETRY_BUDGET_CATEGORIES")),
        };
        let proxy_text = text("STALLSCOPE_PROXY");
        let transport = TransportSettings {
            connect_timeout: t.seconds("STALLSCOPE_HTTP_CONNECT_TIMEOUT_S"),
            // The governor's idle clock already ends an attempt after that
            // long without a byte; a read backstop no shorter can never fire
            // first, and reqwest's costs two clock reads and a timer reset
            // per chunk (about a sixth of the stream path), so it is only
            // installed when it would be the first to notice.
            read_timeout: t
                .optional_seconds("STALLSCOPE_HTTP_READ_TIMEOUT_S")
                .filter(|read| timers.idle.is_none_or(|idle| *read < idle)),
            keepalive: t.get("STALLSCOPE_TCP_KEEPALIVE").value.as_bool().then(|| Keepalive {
                idle: t.seconds("STALLSCOPE_TCP_KEEPIDLE_S"),
                interval: t.seconds("STALLSCOPE_TCP_KEEPINTVL_S"),
                count: count("STALLSCOPE_TCP_KEEPCNT"),
            }),
            force_ipv4: t.get("STALLSCOPE_FORCE_IPV4").value.as_bool(),
            http1_only: t.get("STALLSCOPE_HTTP1_ONLY").value.as_bool(),
            proxy: ProxySetting::parse(&proxy_text),
            ca_file: None,
        };
        let bodies = BodySettings {
            mode: match text("STALLSCOPE_RECORD_BODIES").as_str() {
                "text" => BodyMode::Text,
                "raw" => BodyMode::Raw,
                _ => BodyMode::Off,
            },
            max_bytes: usize::try_from(t.get("STALLSCOPE_RECORD_BODY_MAX_KB").value.as_i64()).unwrap_or(0) * 1024,
        };
        Ok(CorePolicy { timers, retry, failover, credentials, fleet, transport, bodies })
    }
}

/// The throughput floor the tunables set, when it is on.
fn rate_floor(t: &Tunables) -> Option<RateFloor> {
    let floor = t.get("STALLSCOPE_SSE_MIN_RATE").value.as_f64();
    (floor > 0.0).then(|| RateFloor {
        floor,
        window: t.seconds("STALLSCOPE_SSE_MIN_RATE_WINDOW_S"),
        after: RateStart::parse(t.get("STALLSCOPE_SSE_MIN_RATE_AFTER").value.as_str()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_read_every_tunable() {
        let policy = CorePolicy::default();
        assert_eq!(policy.timers.idle, Some(Duration::from_secs(1800)));
        assert_eq!(policy.timers.data_stall, Some(Duration::from_secs(900)));
        assert_eq!(policy.timers.total, None);
        assert_eq!(policy.retry.max_retries, 3);
        assert_eq!(policy.retry.budget(Category::RateLimit), 5);
        assert_eq!(policy.retry.budget(Category::ServerError), 2);
        assert_eq!(policy.retry.budget(Category::Auth), 0);
        // The default backstop (idle + 60 s) can never fire before idle.
        assert_eq!(policy.transport.read_timeout, None);
        let mut t = Tunables::defaults();
        t.apply_override("HTTP_READ_TIMEOUT_S=60").unwrap();
        assert_eq!(CorePolicy::from_tunables(&t).unwrap().transport.read_timeout, Some(Duration::from_secs(60)));
        assert_eq!(policy.failover.fallback, FallbackSetting::SameProvider);
        assert_eq!(policy.failover.on.len(), 5);
        assert_eq!(policy.timers.progress_classes, [EventClass::Reasoning, EventClass::Content, EventClass::ToolCall]);
        assert_eq!(policy.timers.min_rate, None, "the throughput floor is off by default");
        assert!(!policy.timers.hold_when_late, "timers are held for lateness only where the guard says so");
    }

    #[test]
    fn holding_late_timers_reaches_every_attempt() {
        let mut policy = CorePolicy::default();
        let escalation = Escalation::default();
        assert!(!policy.timers.for_attempt(None, &escalation, 0, 3).hold_when_late);
        policy.timers.hold_when_late = true;
        assert!(policy.timers.for_attempt(Some(120_000), &escalation, 2, 3).hold_when_late);
    }

    #[test]
    fn the_fleet_budget_governs_the_failures_that_say_the_provider_is_loaded() {
        let governs = CorePolicy::default().fleet.governs;
        for category in [Category::RateLimit, Category::Overloaded, Category::ServerError] {
            assert!(governs.covers(category, None), "{category}");
        }
        assert!(governs.covers(Category::Timeout, Some(TimerKind::Ttfb)));
        let path = [TimerKind::Connect, TimerKind::Idle, TimerKind::DataStall, TimerKind::MinRate, TimerKind::Total];
        for timer in path {
            assert!(!governs.covers(Category::Timeout, Some(timer)), "{timer}");
        }
        for category in [Category::Connection, Category::Auth, Category::InvalidRequest, Category::Permanent] {
            assert!(!governs.covers(category, None), "{category}");
        }
    }

    #[test]
    fn every_item_of_the_fleet_budget_list_names_failures() {
        let everything = BudgetScope::parse(&spec::FLEET_BUDGET_CATEGORIES.join(","));
        for item in spec::FLEET_BUDGET_CATEGORIES {
            assert_ne!(BudgetScope::parse(item), BudgetScope::default(), "{item} names nothing");
        }
        for category in Category::ALL.into_iter().filter(|&c| c != Category::Cancelled) {
            for timer in TimerKind::ALL.into_iter().map(Some).chain([None]) {
                assert!(everything.covers(category, timer), "{category} {timer:?}");
            }
        }
        let ttfb = BudgetScope::parse("timeout:ttfb");
        assert!(ttfb.covers(Category::Timeout, Some(TimerKind::Ttfb)));
        assert!(!ttfb.covers(Category::Timeout, Some(TimerKind::Idle)) && !ttfb.covers(Category::Timeout, None));
        assert!(!ttfb.covers(Category::Connection, None));
    }

    #[test]
    fn the_throughput_floor_reads_its_three_tunables_and_does_not_escalate() {
        let mut t = Tunables::defaults();
        t.apply_override("SSE_MIN_RATE=2.5").unwrap();
        t.apply_override("SSE_MIN_RATE_WINDOW_S=30").unwrap();
        t.apply_override("SSE_MIN_RATE_AFTER=progress").unwrap();
        let policy = CorePolicy::from_tunables(&t).unwrap();
        let floor = RateFloor { floor: 2.5, window: Duration::from_secs(30), after: RateStart::Progress };
        assert_eq!(policy.timers.min_rate, Some(floor));
        assert_eq!(floor.events_per_window(), 75.0);
        let doubling = Escalation { strategy: EscalationStrategy::Multiplicative, ..Escalation::default() };
        assert_eq!(policy.timers.for_attempt(None, &doubling, 2, 3).min_rate, Some(floor));
        let err = t.apply_override("SSE_MIN_RATE_WINDOW_S=0").unwrap_err().to_string();
        assert!(err.contains("SSE_MIN_RATE_WINDOW_S") && err.contains("0.001"), "{err}");
        let err = t.apply_override("SSE_MIN_RATE_AFTER=bytes").unwrap_err().to_string();
        assert!(err.contains("content, progress, headers"), "{err}");
    }

    #[test]
    fn context_rules_apply_to_defaults_only() {
        let policy = CorePolicy::default();
        let none = Escalation::default();
        let small = policy.timers.for_attempt(Some(1_000), &none, 0, 3);
        assert_eq!(small.ttfb, Some(Duration::from_secs(120)));
        assert_eq!(small.data_stall, Some(Duration::from_secs(900)));
        let big = policy.timers.for_attempt(Some(120_000), &none, 0, 3);
        assert_eq!(big.ttfb, None);
        assert!(big.ttfb_off_reason.is_some());
        assert_eq!(big.data_stall, Some(Duration::from_secs(900).mul_f64(1.67)));

        let mut t = Tunables::defaults();
        t.apply_override("SSE_DATA_STALL_TIMEOUT_S=900").unwrap();
        t.apply_override("SSE_TTFB_TIMEOUT_S=60").unwrap();
        let explicit = CorePolicy::from_tunables(&t).unwrap();
        let big = explicit.timers.for_attempt(Some(120_000), &none, 0, 3);
        assert_eq!(big.data_stall, Some(Duration::from_secs(900)));
        assert_eq!(big.ttfb, Some(Duration::from_secs(60)));

        // An explicit threshold applies to an explicit TTFB too.
        t.apply_override("TTFB_DISABLE_ABOVE_TOKENS=100000").unwrap();
        let both = CorePolicy::from_tunables(&t).unwrap();
        assert_eq!(both.timers.for_attempt(Some(120_000), &none, 0, 3).ttfb, None);
        assert_eq!(both.timers.for_attempt(Some(90_000), &none, 0, 3).ttfb, Some(Duration::from_secs(60)));
    }

    #[test]
    fn cross_tunable_checks_name_the_tunable() {
        let mut t = Tunables::defaults();
        t.apply_override("PROVIDER_STREAM_BACKOFF_S=10").unwrap();
        t.apply_override("PROVIDER_STREAM_BACKOFF_MAX_S=5").unwrap();
        let err = CorePolicy::from_tunables(&t).unwrap_err().to_string();
        assert!(err.starts_with("STALLSCOPE_PROVIDER_STREAM_BACKOFF_MAX_S=\"5\""), "{err}");
        let mut t = Tunables::defaults();
        t.apply_override("TIMEOUT_ESCALATION=linear").unwrap();
        let err = CorePolicy::from_tunables(&t).unwrap_err().to_string();
        assert!(err.contains("STALLSCOPE_TIMEOUT_ESCALATION_MAX_S"), "{err}");
    }
}
