//! Worst-case wall-clock analysis of one call, layer by layer.
//!
//! Seed 003 enumerates how nested retry layers multiply (3 × 90 s + 1.5 s =
//! 271.5 s per call, × 2 same-agent, × 12 candidates ≈ 6519 s) against a
//! caller's 120 s budget. This module computes the same enumeration from
//! the effective tunables plus any outer layers the operator describes, so
//! the mismatch is visible before it happens.
//!
//! Each attempt is bounded from the timers the governor itself would arm
//! for it ([`TimerSettings::for_attempt`](super::policy::TimerSettings::for_attempt)):
//! timeout escalation grows every timer on its own, so the timers are
//! escalated first and only then combined into the attempt's bound.

use std::time::Duration;

use serde::Serialize;

use super::category::{Category, TimerKind};
use super::event::EventClass;
use super::policy::{AttemptTimers, CorePolicy, RateStart};

/// A retry layer outside the core (a harness retrying the whole call).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OuterLayer {
    /// What it is.
    pub name: String,
    /// How many times it runs the layer inside it, at most.
    pub runs: u32,
    /// Total sleep between those runs, at most.
    pub sleeps: Duration,
}

impl OuterLayer {
    /// Parses `NAME:RUNS[:SLEEP_S]`, e.g. `candidates:12` or `agent:2:0.25`.
    pub fn parse(text: &str) -> Result<OuterLayer, String> {
        let mut parts = text.split(':');
        let name = parts.next().unwrap_or("").trim();
        let runs = parts.next().and_then(|r| r.trim().parse::<u32>().ok()).filter(|&r| r >= 1);
        let sleeps = match parts.next() {
            None => Some(Duration::ZERO),
            Some(s) => s.trim().parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok()),
        };
        match (name.is_empty(), runs, sleeps, parts.next()) {
            (false, Some(runs), Some(sleeps), None) => Ok(OuterLayer { name: name.to_owned(), runs, sleeps }),
            _ => Err(format!("layer `{text}` is not NAME:RUNS[:SLEEP_S] with RUNS >= 1 and SLEEP_S >= 0")),
        }
    }
}

/// What to analyse beyond the tunables.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BudgetInput {
    /// Layers outside the core, innermost first.
    pub outer: Vec<OuterLayer>,
    /// The caller's deadline for the outermost layer.
    pub caller_deadline: Option<Duration>,
    /// Failover hops available (defaults to what the setting allows).
    pub fallbacks: Option<usize>,
    /// The call's context size in tokens: it scales the data-stall timer
    /// and can switch the TTFB guard off.
    pub context_tokens: Option<u64>,
}

/// The worst case of one layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerBound {
    /// The layer.
    pub name: String,
    /// Its worst case including every layer inside it; `None` when
    /// unbounded.
    #[serde(serialize_with = "seconds_or_null")]
    pub worst: Option<Duration>,
    /// How it was computed.
    pub detail: String,
}

/// The analysis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetReport {
    /// Innermost first: attempt, call, then each outer layer.
    pub layers: Vec<LayerBound>,
    /// The caller's deadline.
    #[serde(serialize_with = "seconds_or_null")]
    pub caller_deadline: Option<Duration>,
    /// Whether the outermost worst case fits the caller's deadline.
    pub fits: Option<bool>,
    /// Caveats.
    pub notes: Vec<String>,
}

impl BudgetReport {
    /// The outermost layer's worst case.
    pub fn total(&self) -> Option<Duration> {
        self.layers.last().and_then(|l| l.worst)
    }
}

fn seconds_or_null<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", (d.as_secs_f64() * 1000.0).round() / 1000.0)
}

/// What ends the longest attempt that still fails, as the governor
/// ([`super::governor::run_attempt`]) runs its clocks.
///
/// TTFB and idle both count from the request, so the headers come before
/// the earlier of the two fires. The data-stall clock starts when the
/// headers arrive and only progress events reset it, while any body byte
/// stops TTFB and resets idle. So the longest stall the governor lets run
/// has its headers and a first keep-alive arrive just before that earlier
/// timer fires, then keep-alives until data stall fires: the two add up.
/// A throughput floor judging from the headers ends such a stall a window
/// after them (keep-alives are not progress), whichever comes first; one
/// judging from the first content or progress never sees it. The total
/// timer, when set and shorter, ends the attempt first.
#[derive(Debug, Clone, Copy, PartialEq)]
enum AttemptLimit {
    /// The total timer.
    Total(Duration),
    /// A stall covered by keep-alives.
    Stall {
        /// The timer the headers must beat: `TTFB` or `idle`.
        before: &'static str,
        /// Its budget.
        until_headers: Duration,
        /// The timer that ends the stall: data stall or the throughput floor.
        by: TimerKind,
        /// Its budget (the floor's: its window), counted from the headers.
        stall: Duration,
    },
    /// Keep-alives (or an upstream that never answers) hold the attempt
    /// open forever.
    Unbounded,
}

impl AttemptLimit {
    fn of(timers: &AttemptTimers) -> AttemptLimit {
        // `min_by_key` keeps the first of equals, as the governor's
        // `Clocks::earliest` does: TTFB wins a tie.
        let until_headers = [("TTFB", timers.ttfb), ("idle", timers.idle)]
            .into_iter()
            .filter_map(|(name, budget)| budget.map(|b| (name, b)))
            .min_by_key(|&(_, budget)| budget);
        let keepalives_are_progress = timers.progress_classes.contains(&EventClass::Keepalive);
        let floor = timers.min_rate.filter(|f| f.after == RateStart::Headers).map(|f| f.window);
        // The first of equals, as in `Clocks::earliest`: data stall wins a tie.
        let ends_stall = [(TimerKind::DataStall, timers.data_stall), (TimerKind::MinRate, floor)]
            .into_iter()
            .filter_map(|(by, budget)| budget.map(|b| (by, b)))
            .filter(|_| !keepalives_are_progress)
            .min_by_key(|&(_, budget)| budget);
        let stall = until_headers.zip(ends_stall).map(|((before, until_headers), (by, stall))| AttemptLimit::Stall {
            before,
            until_headers,
            by,
            stall,
        });
        match (timers.total, stall) {
            (Some(total), Some(stall)) if stall.worst().is_some_and(|s| total <= s) => AttemptLimit::Total(total),
            (_, Some(stall)) => stall,
            (Some(total), None) => AttemptLimit::Total(total),
            (None, None) => AttemptLimit::Unbounded,
        }
    }

    fn worst(self) -> Option<Duration> {
        match self {
            AttemptLimit::Total(total) => Some(total),
            AttemptLimit::Stall { until_headers, stall, .. } => Some(until_headers.saturating_add(stall)),
            AttemptLimit::Unbounded => None,
        }
    }

    /// The terms of [`worst`](Self::worst), in words.
    fn terms(self) -> String {
        match self {
            AttemptLimit::Total(total) => format!("total timer {}", secs(total)),
            AttemptLimit::Stall { before, until_headers, by, stall } => {
                format!("{before} {} + {} {}", secs(until_headers), stall_name(by), secs(stall))
            }
            AttemptLimit::Unbounded => "no timer ends a stall (see the notes)".to_owned(),
        }
    }
}

/// The timer that ends a keep-alive stall, in the attempt's terms.
fn stall_name(by: TimerKind) -> &'static str {
    if by == TimerKind::MinRate { "throughput-floor window" } else { "data stall" }
}

/// Why an attempt with these timers can run forever, and what to set
/// about it; empty when the total timer caps it. The throughput floor is
/// no cap: a stream at or above it runs as long as it likes.
fn unbounded_notes(timers: &AttemptTimers) -> Vec<String> {
    if timers.total.is_some() {
        return Vec::new();
    }
    let progress = match timers.min_rate {
        None => "a stream that keeps making progress without finishing is unbounded, however slowly it crawls \
                 (STALLSCOPE_SSE_MIN_RATE ends one slower than a floor)"
            .to_owned(),
        Some(floor) => {
            let from = match floor.after {
                RateStart::Content => ", judging nothing before the first output",
                RateStart::Progress => ", judging nothing before the first progress event",
                RateStart::Headers => "",
            };
            format!(
                "the throughput floor ends a stream slower than {} progress events/s a window ({}) after it fell \
                 below, at most a tenth of a window later{from}; a stream at or above the floor that never \
                 finishes is still unbounded",
                floor.floor,
                secs(floor.window)
            )
        }
    };
    let mut notes = vec![format!("{progress}; set STALLSCOPE_SSE_TOTAL_TIMEOUT_S to cap an attempt")];
    if timers.ttfb.is_none() && timers.idle.is_none() {
        notes.push(
            "with no TTFB or idle timer an upstream that never sends headers holds an attempt open forever; \
             set STALLSCOPE_SSE_TTFB_TIMEOUT_S or STALLSCOPE_SSE_IDLE_TIMEOUT_S (or STALLSCOPE_SSE_TOTAL_TIMEOUT_S)"
                .to_owned(),
        );
    }
    let floor_from_headers = timers.min_rate.is_some_and(|f| f.after == RateStart::Headers);
    if timers.data_stall.is_none() && !floor_from_headers {
        notes.push(
            "with the data-stall timer off, keep-alives hold a stalled attempt open forever; \
             set STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S (or STALLSCOPE_SSE_TOTAL_TIMEOUT_S)"
                .to_owned(),
        );
    } else if timers.progress_classes.contains(&EventClass::Keepalive) {
        notes.push(
            "STALLSCOPE_PROGRESS_EVENT_CLASSES counts keep-alives as progress, so they hold a stalled attempt \
             open forever; remove keepalive from it (or set STALLSCOPE_SSE_TOTAL_TIMEOUT_S)"
                .to_owned(),
        );
    }
    notes
}

/// Computes the worst case of one call and of each outer layer.
pub fn analyse(policy: &CorePolicy, input: &BudgetInput) -> BudgetReport {
    let retry = &policy.retry;
    let timeout_budget = retry.budget(Category::Timeout);
    // The governor's own timers: escalation grows each timer on its own, so
    // an attempt's bound is taken from the escalated timers, never by
    // escalating a bound.
    let timers_after = |timeout_retries: u32| {
        policy.timers.for_attempt(input.context_tokens, &retry.escalation, timeout_retries, timeout_budget)
    };
    let first_timers = timers_after(0);
    let first = AttemptLimit::of(&first_timers);
    let notes = unbounded_notes(&first_timers);

    // One call: every retry the budgets allow, each after its longest sleep,
    // then every failover hop (no sleep before a hop).
    // A server can force retries of the three categories that are not
    // retried (auth, invalid request, permanent), each up to its own
    // budget; key rotations after auth refusals are bounded only by the
    // pool, so the call-wide limit is what bounds them here.
    let forced = retry.server_forced_budget.saturating_mul(3);
    let category_sum: u32 = Category::RETRYABLE.iter().map(|&c| retry.budget(c)).fold(forced, u32::saturating_add);
    let retries = retry.max_retries.min(category_sum);
    let hops =
        u32::try_from(input.fallbacks.unwrap_or_else(|| policy.failover.fallback.max_fallbacks())).unwrap_or(u32::MAX);
    // The executor counts timeout retries only while their budget lasts and
    // never resets the count, not even on a failover hop. Spending that
    // budget first makes each later attempt as long as it can be: attempt i
    // runs after min(i, budget) timeout retries, and the rest (other
    // categories' retries, then the hops) keep the last escalated timers.
    let timeout_retries = retries.min(timeout_budget);
    let mut attempts = Some(Duration::ZERO);
    for n in 0..=timeout_retries {
        attempts = attempts.zip(AttemptLimit::of(&timers_after(n)).worst()).map(|(sum, a)| sum.saturating_add(a));
    }
    let last = AttemptLimit::of(&timers_after(timeout_retries));
    let repeats = (retries - timeout_retries).saturating_add(hops);
    attempts = attempts.zip(last.worst()).map(|(sum, a)| sum.saturating_add(a.saturating_mul(repeats)));

    let mut detail = if first == last {
        first.terms()
    } else {
        format!("{} after {timeout_retries} timeout retries, from {} on the first attempt", last.terms(), first.terms())
    };
    if let AttemptLimit::Stall { before, by, .. } = last {
        let name = stall_name(by);
        detail.push_str(&format!(" (headers just before {before} fires, then keep-alives until {name} fires)"));
    }
    let mut layers = vec![LayerBound { name: "attempt".to_owned(), worst: last.worst(), detail }];

    let server_wait = if retry.retry_after_max.is_zero() {
        Duration::ZERO
    } else {
        retry.backoff.server_delay_max(retry.retry_after_max, retry.server_jitter)
    };
    let mut sleeps = Duration::ZERO;
    for i in 0..retries {
        sleeps = sleeps.saturating_add(retry.backoff.max_delay(i).max(server_wait));
    }
    let mut call = attempts.map(|a| a.saturating_add(sleeps));
    let each = match (first.worst(), last.worst(), attempts) {
        (Some(first), Some(last), Some(sum)) if first == last => {
            format!(" of {} each, {} in all", secs(first), secs(sum))
        }
        (Some(first), Some(last), Some(sum)) => format!(
            " of {} rising to {} over {timeout_retries} timeout retries, {} in all",
            secs(first),
            secs(last),
            secs(sum)
        ),
        _ => ", each unbounded".to_owned(),
    };
    let mut detail = format!(
        "{} attempts (1 + {retries} retries + {hops} failover hops){each}, + {} of sleeps",
        retries.saturating_add(hops).saturating_add(1),
        secs(sleeps)
    );
    if !server_wait.is_zero() {
        detail.push_str(&format!(" (a server may ask for up to {} per retry)", secs(server_wait)));
    }
    if let Some(deadline) = retry.deadline {
        call = Some(call.map_or(deadline, |c| c.min(deadline)));
        detail.push_str(&format!("; capped by the call deadline {}", secs(deadline)));
    }
    layers.push(LayerBound { name: "call".to_owned(), worst: call, detail });

    let mut inner = call;
    for layer in &input.outer {
        inner = inner.map(|d| d.saturating_mul(layer.runs).saturating_add(layer.sleeps));
        layers.push(LayerBound {
            name: layer.name.clone(),
            worst: inner,
            detail: format!("{} × inner + {} of sleeps", layer.runs, secs(layer.sleeps)),
        });
    }
    let fits = input.caller_deadline.map(|deadline| inner.is_some_and(|total| total <= deadline));
    BudgetReport { layers, caller_deadline: input.caller_deadline, fits, notes }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use bytes::Bytes;
    use futures_util::StreamExt;
    use futures_util::future::BoxFuture;
    use futures_util::stream;
    use http::{HeaderMap, HeaderValue};
    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::core::escalation::Escalation;
    use crate::core::event::NullSink;
    use crate::core::failover::Target;
    use crate::core::failure::Failure;
    use crate::core::governor::{AttemptProgress, AttemptScope, run_attempt};
    use crate::core::upstream::{AttemptRequest, CallInput, Decoded, Decoder, Response, Upstream};
    use crate::tunables::Tunables;

    fn policy(sets: &[&str]) -> CorePolicy {
        let mut t = Tunables::defaults();
        for s in sets {
            t.apply_override(s).unwrap();
        }
        CorePolicy::from_tunables(&t).unwrap()
    }

    /// Seed 003's enumeration: ModelClient(timeout=90, max_retries=2) with
    /// uniform(0, min(8, 0.5·2^n)) backoff, the same-agent retry (2 calls,
    /// ~0.25 s), and 12 candidates.
    #[test]
    fn reproduces_seed_003() {
        let p = policy(&[
            "SSE_TOTAL_TIMEOUT_S=90",
            "PROVIDER_STREAM_RETRIES=2",
            "PROVIDER_STREAM_BACKOFF_S=0.5",
            "PROVIDER_STREAM_BACKOFF_MAX_S=8",
            "BACKOFF_MULTIPLIER=2",
            "BACKOFF_JITTER=full",
            "RETRY_AFTER_MAX_S=0",
            "FALLBACK_MODELS=off",
        ]);
        let input = BudgetInput {
            outer: vec![
                OuterLayer::parse("same-agent retry:2:0.25").unwrap(),
                OuterLayer::parse("candidates:12").unwrap(),
            ],
            caller_deadline: Some(Duration::from_secs(120)),
            ..BudgetInput::default()
        };
        let report = analyse(&p, &input);
        let worst: Vec<f64> = report.layers.iter().map(|l| l.worst.unwrap().as_secs_f64()).collect();
        assert_eq!(worst, [90.0, 271.5, 543.25, 6519.0]);
        assert_eq!(report.fits, Some(false));
    }

    #[test]
    fn the_deadline_caps_the_call() {
        let p = policy(&["CALL_DEADLINE_S=100", "SSE_TOTAL_TIMEOUT_S=90"]);
        let report =
            analyse(&p, &BudgetInput { caller_deadline: Some(Duration::from_secs(120)), ..Default::default() });
        assert_eq!(report.total(), Some(Duration::from_secs(100)));
        assert_eq!(report.fits, Some(true));
    }

    #[test]
    fn defaults_count_retries_hops_and_server_waits() {
        let report = analyse(&CorePolicy::default(), &BudgetInput::default());
        // Attempt: TTFB 120 s + data stall 900 s.
        assert_eq!(report.layers[0].worst, Some(Duration::from_secs(1020)));
        // 1 + 3 retries + 2 hops, three sleeps of up to 60 s × 1.25.
        assert_eq!(report.layers[1].worst, Some(Duration::from_secs(6 * 1020) + Duration::from_secs_f64(3.0 * 75.0)));
        assert_eq!(report.notes.len(), 1);
    }

    #[test]
    fn context_size_scales_the_stall_bound() {
        let input = BudgetInput { context_tokens: Some(120_000), ..BudgetInput::default() };
        let report = analyse(&CorePolicy::default(), &input);
        // No TTFB guard above 25k tokens: idle 1800 s, then data stall 900 s × 1.67.
        assert_eq!(report.layers[0].worst, Some(Duration::from_secs(1800) + Duration::from_secs(900).mul_f64(1.67)));
    }

    #[test]
    fn layer_syntax_is_checked() {
        assert!(OuterLayer::parse("x:0").is_err());
        assert!(OuterLayer::parse("x").is_err());
        assert!(OuterLayer::parse(":3").is_err());
        assert!(OuterLayer::parse("x:3:-1").is_err());
        assert!(OuterLayer::parse("x:3:1e300").is_err());
        // Huge layers saturate instead of overflowing.
        let input = BudgetInput {
            outer: vec![OuterLayer::parse("x:4000000000").unwrap(), OuterLayer::parse("y:4000000000").unwrap()],
            ..BudgetInput::default()
        };
        assert_eq!(analyse(&CorePolicy::default(), &input).total(), Some(Duration::MAX));
        assert_eq!(OuterLayer::parse("x:3").unwrap().runs, 3);
    }

    fn s(seconds: f64) -> Duration {
        Duration::from_secs_f64(seconds)
    }

    /// The defaults' sleeps: three retries, each after a server wait of up
    /// to 60 s with 25 % positive jitter (longer than any computed backoff).
    const DEFAULT_SLEEPS: f64 = 3.0 * 75.0;

    /// The defaults' attempts, as timeout retries before each: the three
    /// retries are all timeouts (the budget is 3), then two failover hops
    /// keep the count.
    const DEFAULT_LEVELS: [u32; 6] = [0, 1, 2, 3, 3, 3];

    /// The worst call from the governor's own timers: one attempt per entry
    /// of `levels` (the timeout retries before it), each lasting TTFB + data
    /// stall (or the total timer when shorter), plus `sleeps`.
    fn from_governor_timers(p: &CorePolicy, levels: &[u32], sleeps: f64) -> Duration {
        let budget = p.retry.budget(Category::Timeout);
        let attempt = |&n: &u32| {
            let t = p.timers.for_attempt(None, &p.retry.escalation, n, budget);
            let stall = t.ttfb.unwrap() + t.data_stall.unwrap();
            t.total.map_or(stall, |total| total.min(stall))
        };
        levels.iter().map(attempt).sum::<Duration>() + s(sleeps)
    }

    /// The example: additive escalation by 30 s grows TTFB and data
    /// stall by 30 s each per timeout retry, not their sum by 30 s.
    #[test]
    fn additive_escalation_grows_each_timer_before_they_are_summed() {
        let p = policy(&["TIMEOUT_ESCALATION=additive"]);
        let report = analyse(&p, &BudgetInput::default());
        // 6 × 1020 s + 2 timers × 30 s × (0+1+2+3+3+3) + 225 s of sleeps.
        assert_eq!(report.layers[1].worst, Some(s(7065.0)));
        assert_eq!(report.layers[1].worst, Some(from_governor_timers(&p, &DEFAULT_LEVELS, DEFAULT_SLEEPS)));
        // The longest attempt: TTFB 210 s + data stall 990 s.
        assert_eq!(report.layers[0].worst, Some(s(1200.0)));
        assert_eq!(
            report.layers[0].detail,
            "TTFB 210 s + data stall 990 s after 3 timeout retries, from TTFB 120 s + data stall 900 s \
             on the first attempt (headers just before TTFB fires, then keep-alives until data stall fires)"
        );
        assert_eq!(
            report.layers[1].detail,
            "6 attempts (1 + 3 retries + 2 failover hops) of 1020 s rising to 1200 s over 3 timeout retries, \
             6840 s in all, + 225 s of sleeps (a server may ask for up to 75 s per retry)"
        );
    }

    /// Every strategy, with and without a ceiling; a ceiling below the sum
    /// of the timers (but above one of them) still lets that one grow.
    #[test]
    fn each_strategy_escalates_each_timer_up_to_its_ceiling() {
        let cases: [(&[&str], f64); 6] = [
            // TTFB 120 → 150 and held there; data stall 900 is above the
            // ceiling, which never shortens a timer.
            (&["TIMEOUT_ESCALATION=additive", "TIMEOUT_ESCALATION_MAX_S=150"], 120.0 + 5.0 * 150.0 + 6.0 * 900.0),
            // × 1, 2, 4, 8, 8, 8 = × 31.
            (&["TIMEOUT_ESCALATION=multiplicative"], 31.0 * 1020.0),
            // TTFB 120, 240, 480, 960, 960, 960; data stall 900, then 1000.
            (
                &["TIMEOUT_ESCALATION=multiplicative", "TIMEOUT_ESCALATION_MAX_S=1000"],
                120.0 + 240.0 + 480.0 + 3.0 * 960.0 + 900.0 + 5.0 * 1000.0,
            ),
            // Three equal steps to 1200 s: TTFB 120, 480, 840, 1200 × 3;
            // data stall 900, 1000, 1100, 1200 × 3.
            (
                &["TIMEOUT_ESCALATION=linear", "TIMEOUT_ESCALATION_MAX_S=1200"],
                120.0 + 480.0 + 840.0 + 3.0 * 1200.0 + 900.0 + 1000.0 + 1100.0 + 3.0 * 1200.0,
            ),
            // TTFB 120, 280, 440, 600 × 3; data stall 900 throughout.
            (
                &["TIMEOUT_ESCALATION=linear", "TIMEOUT_ESCALATION_MAX_S=600"],
                120.0 + 280.0 + 440.0 + 3.0 * 600.0 + 6.0 * 900.0,
            ),
            (&["TIMEOUT_ESCALATION=none", "TIMEOUT_ESCALATION_MAX_S=600"], 6.0 * 1020.0),
        ];
        for (sets, attempts) in cases {
            let p = policy(sets);
            let call = analyse(&p, &BudgetInput::default()).layers[1].worst;
            assert_eq!(call, Some(s(attempts + DEFAULT_SLEEPS)), "{sets:?}");
            assert_eq!(call, Some(from_governor_timers(&p, &DEFAULT_LEVELS, DEFAULT_SLEEPS)), "{sets:?}");
        }
        // Linear escalation has no uncapped form: it climbs to the ceiling.
        let mut t = Tunables::defaults();
        t.apply_override("TIMEOUT_ESCALATION=linear").unwrap();
        assert!(CorePolicy::from_tunables(&t).is_err());
    }

    /// The total timer escalates too, and caps each attempt after
    /// escalation: 1100 s + 30 s·n against 1020 s + 60 s·n.
    #[test]
    fn the_total_timer_escalates_and_caps_each_escalated_attempt() {
        let p = policy(&["TIMEOUT_ESCALATION=additive", "SSE_TOTAL_TIMEOUT_S=1100"]);
        let report = analyse(&p, &BudgetInput::default());
        let attempts = 1020.0 + 1080.0 + 1140.0 + 3.0 * 1190.0;
        assert_eq!(report.layers[1].worst, Some(s(attempts + DEFAULT_SLEEPS)));
        assert_eq!(report.layers[1].worst, Some(from_governor_timers(&p, &DEFAULT_LEVELS, DEFAULT_SLEEPS)));
        assert_eq!(report.layers[0].worst, Some(s(1190.0)));
        assert!(report.layers[0].detail.starts_with("total timer 1190 s after 3 timeout retries"));
        assert!(report.notes.is_empty(), "{:?}", report.notes);

        let p = policy(&["TIMEOUT_ESCALATION=additive", "SSE_TOTAL_TIMEOUT_S=90", "FALLBACK_MODELS=off"]);
        let call = analyse(&p, &BudgetInput::default()).layers[1].worst;
        assert_eq!(call, Some(s(90.0 + 120.0 + 150.0 + 180.0 + DEFAULT_SLEEPS)));
    }

    /// Only timeout retries escalate, and only while their budget lasts;
    /// later retries of other categories keep the last escalated timers.
    #[test]
    fn the_timeout_budget_bounds_escalation() {
        let p = policy(&["TIMEOUT_ESCALATION=additive", "RETRY_BUDGET_TIMEOUT=1"]);
        let call = analyse(&p, &BudgetInput::default()).layers[1].worst;
        assert_eq!(call, Some(s(1020.0 + 5.0 * 1080.0 + DEFAULT_SLEEPS)));
        assert_eq!(call, Some(from_governor_timers(&p, &[0, 1, 1, 1, 1, 1], DEFAULT_SLEEPS)));

        let p = policy(&["TIMEOUT_ESCALATION=additive", "RETRY_BUDGET_TIMEOUT=0"]);
        assert_eq!(analyse(&p, &BudgetInput::default()).layers[1].worst, Some(s(6.0 * 1020.0 + DEFAULT_SLEEPS)));

        // Five retries, three of them timeouts, then two hops.
        let p = policy(&["TIMEOUT_ESCALATION=additive", "PROVIDER_STREAM_RETRIES=5"]);
        let call = analyse(&p, &BudgetInput::default()).layers[1].worst;
        assert_eq!(call, Some(s(1020.0 + 1080.0 + 1140.0 + 5.0 * 1200.0 + 5.0 * 75.0)));
        assert_eq!(call, Some(from_governor_timers(&p, &[0, 1, 2, 3, 3, 3, 3, 3], 5.0 * 75.0)));
    }

    /// A retry the server forces with `x-should-retry: true` is a retry
    /// like any other: with every category budget at 0, it is the only one.
    #[test]
    fn retries_the_server_forces_count_toward_the_call() {
        let none = ["RETRY_BUDGET_CONNECTION=0", "RETRY_BUDGET_TIMEOUT=0", "RETRY_BUDGET_RATE_LIMIT=0"];
        let none =
            [&none[..], &["RETRY_BUDGET_OVERLOADED=0", "RETRY_BUDGET_SERVER_ERROR=0", "FALLBACK_MODELS=off"]].concat();
        let forced_off = [&none[..], &["RETRY_BUDGET_SERVER_FORCED=0"]].concat();
        assert_eq!(analyse(&policy(&forced_off), &BudgetInput::default()).layers[1].worst, Some(s(1020.0)));
        let forced_one = [&none[..], &["RETRY_BUDGET_SERVER_FORCED=1"]].concat();
        // Three categories may be forced once each, within the call's three retries.
        let call = analyse(&policy(&forced_one), &BudgetInput::default()).layers[1].worst.unwrap();
        assert!(call >= s(4.0 * 1020.0), "{call:?}");
    }

    #[test]
    fn an_idle_timer_shorter_than_ttfb_bounds_the_wait_for_headers() {
        let report = analyse(&policy(&["SSE_IDLE_TIMEOUT_S=60"]), &BudgetInput::default());
        assert_eq!(report.layers[0].worst, Some(s(960.0)));
        assert!(report.layers[0].detail.starts_with("idle 60 s + data stall 900 s"), "{}", report.layers[0].detail);
    }

    /// Keep-alives reset idle, so when nothing else ends a stall they hold
    /// an attempt open forever: the analysis must say so, not sum timers.
    #[test]
    fn keepalives_that_nothing_stops_make_an_attempt_unbounded() {
        let cases = [
            (["SSE_DATA_STALL_TIMEOUT_S=0"], "set STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S"),
            (["PROGRESS_EVENT_CLASSES=keepalive,content"], "remove keepalive from it"),
        ];
        for (sets, remedy) in cases {
            let report = analyse(
                &policy(&sets),
                &BudgetInput { caller_deadline: Some(Duration::from_secs(120)), ..BudgetInput::default() },
            );
            assert_eq!(report.layers[0].worst, None, "{sets:?}");
            assert_eq!(report.layers[1].worst, None, "{sets:?}");
            assert_eq!(report.fits, Some(false));
            assert!(report.notes.iter().any(|n| n.contains(remedy)), "{sets:?}: {:?}", report.notes);

            // A total timer caps it again (escalated on timeout retries).
            let capped = policy(&[sets[0], "SSE_TOTAL_TIMEOUT_S=300"]);
            let report = analyse(&capped, &BudgetInput::default());
            assert_eq!(report.layers[0].worst, Some(s(300.0)));
            assert_eq!(report.layers[1].worst, Some(s(6.0 * 300.0 + DEFAULT_SLEEPS)));
            assert!(report.notes.is_empty(), "{:?}", report.notes);

            // So does the call deadline, for the call.
            let report = analyse(&policy(&[sets[0], "CALL_DEADLINE_S=600"]), &BudgetInput::default());
            assert_eq!((report.layers[0].worst, report.layers[1].worst), (None, Some(s(600.0))));
        }
        let report = analyse(&policy(&["SSE_TTFB_TIMEOUT_S=0", "SSE_IDLE_TIMEOUT_S=0"]), &BudgetInput::default());
        assert_eq!(report.layers[0].worst, None);
        assert!(report.notes.iter().any(|n| n.contains("never sends headers")), "{:?}", report.notes);
    }

    #[test]
    fn the_notes_say_what_the_throughput_floor_bounds_and_what_it_does_not() {
        let off = analyse(&policy(&[]), &BudgetInput::default());
        assert!(off.notes[0].contains("however slowly it crawls (STALLSCOPE_SSE_MIN_RATE"), "{:?}", off.notes);
        let on = analyse(&policy(&["SSE_MIN_RATE=2", "SSE_MIN_RATE_WINDOW_S=30"]), &BudgetInput::default());
        let note = &on.notes[0];
        assert!(note.contains("slower than 2 progress events/s a window (30 s) after it fell below"), "{note}");
        assert!(note.contains("judging nothing before the first output"), "{note}");
        assert!(note.contains("at or above the floor that never finishes is still unbounded"), "{note}");
        // Judged from the first output, it ends no stall the bound counts.
        assert_eq!(on.layers, off.layers);
    }

    /// An upstream at its most stubborn: headers and a first keep-alive
    /// after `headers_after`, then a keep-alive every 0.7 s, forever.
    struct KeepAlivesOnly {
        headers_after: Duration,
    }

    impl Upstream for KeepAlivesOnly {
        fn open<'a>(&'a self, _request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
            let headers_after = self.headers_after;
            Box::pin(async move {
                tokio::time::sleep(headers_after).await;
                let ping = || Ok(Bytes::from_static(b"p").into());
                let later = stream::unfold((), move |()| async move {
                    tokio::time::sleep(Duration::from_millis(700)).await;
                    Some((ping(), ()))
                });
                let mut headers = HeaderMap::new();
                headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
                Ok(Response::new(200, headers, stream::once(async move { ping() }).chain(later).boxed()))
            })
        }

        fn decoder(&self) -> Box<dyn Decoder> {
            Box::new(EveryChunkIsAKeepAlive)
        }
    }

    struct EveryChunkIsAKeepAlive;

    impl Decoder for EveryChunkIsAKeepAlive {
        fn feed(&mut self, _chunk: &[u8], out: &mut Vec<Decoded>) {
            out.push(Decoded::Event { class: EventClass::Keepalive, text: "".into() });
        }

        fn finish(&mut self, _out: &mut Vec<Decoded>) {}
    }

    /// Runs one attempt through the governor against [`KeepAlivesOnly`]
    /// for at most `limit`: how it ended (`None` if still running) and when.
    async fn governed(timers: &AttemptTimers, headers_after: Duration, limit: Duration) -> (Option<Failure>, Duration) {
        let upstream = KeepAlivesOnly { headers_after };
        let cancel = CancellationToken::new();
        let started = Instant::now();
        let scope = AttemptScope {
            sink: &NullSink,
            epoch: started,
            stream: 1,
            attempt: 1,
            deadline: None,
            cancel: &cancel,
            wall_epoch: SystemTime::UNIX_EPOCH,
            bodies: crate::core::policy::BodySettings::default(),
            lag: None,
            rule_headers: &[],
        };
        let (target, input) = (Target::new("p", "m"), CallInput::default());
        let request = AttemptRequest { stream: 1, attempt: 1, target: &target, credential: None, input: &input };
        let mut progress = AttemptProgress::default();
        let attempt = run_attempt(&upstream, request, timers, &scope, &mut progress);
        let ended = tokio::time::timeout(limit, attempt).await.ok().map(|r| r.expect_err("keep-alives never finish"));
        (ended, started.elapsed())
    }

    /// The bound is the governor's: headers a moment before the earlier of
    /// TTFB and idle fires, then keep-alives, fail by data stall a moment
    /// before the bound (or at the total timer); headers any later never
    /// come. Checked on escalated timers too.
    #[tokio::test(start_paused = true)]
    async fn the_governor_runs_a_keepalive_stall_to_the_bound_and_no_further() {
        let moment = Duration::from_millis(1);
        let escalating = ["TIMEOUT_ESCALATION=additive", "TIMEOUT_ESCALATION_INCREMENT_S=5"];
        let floor = ["SSE_MIN_RATE=1", "SSE_MIN_RATE_AFTER=headers"];
        let setups: [&[&str]; 5] = [
            &["SSE_TTFB_TIMEOUT_S=10", "SSE_IDLE_TIMEOUT_S=30", "SSE_DATA_STALL_TIMEOUT_S=20"],
            &["SSE_TTFB_TIMEOUT_S=10", "SSE_IDLE_TIMEOUT_S=8", "SSE_DATA_STALL_TIMEOUT_S=20"],
            &["SSE_TTFB_TIMEOUT_S=10", "SSE_DATA_STALL_TIMEOUT_S=20", "SSE_TOTAL_TIMEOUT_S=33"],
            // The floor from the headers ends a keep-alive stall, and the
            // earlier of it and data stall does.
            &["SSE_TTFB_TIMEOUT_S=10", "SSE_DATA_STALL_TIMEOUT_S=0", floor[0], floor[1], "SSE_MIN_RATE_WINDOW_S=20"],
            &["SSE_TTFB_TIMEOUT_S=10", "SSE_DATA_STALL_TIMEOUT_S=30", floor[0], floor[1], "SSE_MIN_RATE_WINDOW_S=20"],
        ];
        for sets in setups {
            let p = policy(&[sets, &escalating].concat());
            for level in 0..=3 {
                let timers = p.timers.for_attempt(None, &p.retry.escalation, level, 3);
                let limit = AttemptLimit::of(&timers);
                let worst = limit.worst().unwrap();
                let (until_headers, expected) = match limit {
                    AttemptLimit::Stall { until_headers, by, .. } => (until_headers, by),
                    AttemptLimit::Total(_) => (timers.ttfb.unwrap(), TimerKind::Total),
                    AttemptLimit::Unbounded => panic!("{sets:?} is bounded"),
                };
                let (ended, elapsed) = governed(&timers, until_headers - moment, worst * 2).await;
                assert!(
                    matches!(ended, Some(Failure::Timeout { timer, .. }) if timer == expected),
                    "{sets:?} at {level}: {ended:?}"
                );
                let exact = if expected == TimerKind::Total { worst } else { worst - moment };
                assert_eq!(elapsed, exact, "{sets:?} at {level}");

                let (ended, elapsed) = governed(&timers, until_headers, worst * 2).await;
                assert!(matches!(ended, Some(Failure::Timeout { .. })), "{ended:?}");
                assert_eq!(elapsed, until_headers, "{sets:?} at {level}: the headers came too late");
            }
        }
    }

    /// What the analysis calls unbounded, the governor never ends.
    #[tokio::test(start_paused = true)]
    async fn the_governor_never_ends_a_stall_the_analysis_calls_unbounded() {
        let setups: [&[&str]; 3] = [
            &["SSE_DATA_STALL_TIMEOUT_S=0"],
            &["PROGRESS_EVENT_CLASSES=keepalive,content"],
            // A floor from the first content never sees a stall before it.
            &["SSE_DATA_STALL_TIMEOUT_S=0", "SSE_MIN_RATE=1", "SSE_MIN_RATE_WINDOW_S=20"],
        ];
        for sets in setups {
            let timers = policy(sets).timers.for_attempt(None, &Escalation::default(), 0, 0);
            assert_eq!(AttemptLimit::of(&timers), AttemptLimit::Unbounded);
            // Far past every default timer, idle (1800 s) included.
            let hours = Duration::from_secs(3 * 3600);
            let (ended, _) = governed(&timers, Duration::from_secs(100), hours).await;
            assert!(ended.is_none(), "{sets:?}: {ended:?}");
        }
    }
}
