//! Worst-case wall-clock analysis of one call, layer by layer.
//!
//! Seed 003 enumerates how nested retry layers multiply (3 × 90 s + 1.5 s =
//! 271.5 s per call, × 2 same-agent, × 12 candidates ≈ 6519 s) against a
//! caller's 120 s budget. This module computes the same enumeration from
//! the effective tunables plus any outer layers the operator describes, so
//! the mismatch is visible before it happens.

use std::time::Duration;

use serde::Serialize;

use super::category::Category;
use super::escalation::Escalation;
use super::policy::CorePolicy;

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

/// Computes the worst case of one call and of each outer layer.
pub fn analyse(policy: &CorePolicy, input: &BudgetInput) -> BudgetReport {
    // The timers of a first attempt for this context; escalation is applied
    // per attempt below.
    let timers = policy.timers.for_attempt(input.context_tokens, &Escalation::default(), 0, 0);
    let retry = &policy.retry;
    let mut notes = Vec::new();

    // One failing attempt: the total cap if set; otherwise the longest a
    // stall can go unnoticed (first byte just before TTFB/idle fires, then
    // keep-alives until the data-stall timer fires).
    let before_body = timers.ttfb.or(timers.idle);
    let after_body = timers.data_stall.or(timers.idle);
    let stall_bound = before_body.zip(after_body).map(|(a, b)| a.saturating_add(b));
    let attempt_base = match (timers.total, stall_bound) {
        (Some(total), Some(stall)) => Some(total.min(stall)),
        (Some(total), None) => Some(total),
        (None, stall) => {
            notes.push(
                "a stream that keeps making progress without finishing is unbounded; \
                 set STALLSCOPE_SSE_TOTAL_TIMEOUT_S to cap an attempt"
                    .to_owned(),
            );
            stall
        }
    };
    let timeout_budget = retry.budget(Category::Timeout);
    let attempt_bound = |timeout_retries: u32| {
        attempt_base.map(|d| retry.escalation.escalate(d, timeout_retries.min(timeout_budget), timeout_budget))
    };
    let mut layers = vec![LayerBound {
        name: "attempt".to_owned(),
        worst: attempt_base,
        detail: match timers.total {
            Some(total) => format!("total timer {}", secs(total)),
            None => "time to first byte (or idle) + data stall".to_owned(),
        },
    }];

    // One call: every retry the budgets allow, each after its longest sleep,
    // then every failover hop (no sleep before a hop).
    let category_sum: u32 = Category::RETRYABLE.iter().map(|&c| retry.budget(c)).sum();
    let retries = retry.max_retries.min(category_sum);
    let hops =
        u32::try_from(input.fallbacks.unwrap_or_else(|| policy.failover.fallback.max_fallbacks())).unwrap_or(u32::MAX);
    let server_wait = if retry.retry_after_max.is_zero() {
        Duration::ZERO
    } else {
        retry.backoff.server_delay_max(retry.retry_after_max, retry.server_jitter)
    };
    let mut call = Some(Duration::ZERO);
    let mut sleeps = Duration::ZERO;
    for i in 0..=retries {
        call = call.zip(attempt_bound(i)).map(|(a, b)| a.saturating_add(b));
        if i < retries {
            let sleep = retry.backoff.max_delay(i).max(server_wait);
            sleeps = sleeps.saturating_add(sleep);
            call = call.map(|c| c.saturating_add(sleep));
        }
    }
    for _ in 0..hops {
        call = call.zip(attempt_bound(retries)).map(|(a, b)| a.saturating_add(b));
    }
    let mut detail = format!(
        "{} attempts ({retries} retries + {hops} failover hops) + {} of sleeps",
        1 + retries + hops,
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
    use super::*;
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
}
