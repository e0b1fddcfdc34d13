//! The verdict on a whole call, from its attempts' readings and how it
//! ended.
//!
//! How each outcome is reported:
//!
//! - **ok, first try**: the reading of the successful attempt (`healthy`,
//!   or a pattern that put it at risk: `proxy_buffering`, `slow_drip`,
//!   `healthy_slow`), severity `ok` or `notice`.
//! - **ok after failures** (a retry or a failover recovered): the kind of
//!   the failure that cost the call the most time (its attempts plus the
//!   sleeps after them), severity `recovered`, the summary saying on which
//!   attempt it recovered.
//! - **partial**: the kind of the break partial recovery absorbed,
//!   severity `partial`.
//! - **failed**: the kind of the failure that ended the call, severity
//!   `failed`, unless a limit beyond that failure's own budget refused the
//!   retry it allowed — the fleet retry budget, the call deadline, the
//!   call's total retries, or the cap on server-requested waits for a
//!   failure other than a rate limit (a rate limit says so itself) — when
//!   it is `retry_denied`. A category budget that ran out is the pattern
//!   repeating: the kind stays the pattern and `basis.denied_by` says
//!   `category_budget`.
//! - **cancelled**: `cancelled`, severity `notice`; an observed agent that
//!   disconnected is said to have, from its attempt's start, with our
//!   timer that would have fired first and what to try.
//! - **no end recorded**: `incomplete`, severity `notice`, with what the
//!   last attempt was doing.
//!
//! A verdict is not trustworthy when a timer that decided it fired while
//! our own runtime was late, or when it turns on a timer held for that
//! lateness (guard mode): the attempt it reads completed, or was cancelled,
//! after one of our timers came due on a late runtime and was not acted on.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::category::{Category, TimerKind};
use crate::core::event::Outcome;
use crate::core::lag::lag_untrusts;
use crate::core::policy::RetrySettings;

use super::facts::{CallFacts, Fired, Hold, Try};
use super::reading::{PEER_HEADERS, Reading, end_of, read, verdict_hold};
use super::regularity::{Regular, silence_of};
use super::text::{budget, count, fact, percent, secs, timer};
use super::verdict::{Basis, DeniedBy, Diagnosis, Evidence, HeldTimer, Severity, Topic, VerdictKind, WouldHaveFired};

/// The prefix of an untrustworthy verdict's summary.
pub const UNTRUSTED: &str = "client overloaded: not trustworthy";

/// The verdict on a stream whose what-if cannot tell how it ends, with
/// why, one reason a line (the assumptions it rests on).
pub fn unknown(why: &[String]) -> Diagnosis {
    let first = why.first().map_or("the replay outlived its horizon", String::as_str);
    Diagnosis {
        kind: VerdictKind::Unknown,
        severity: Severity::Notice,
        summary: format!("{}: {first}", VerdictKind::Unknown.label()),
        evidence: why.iter().map(|w| fact(Topic::Recording, None, None, w.clone())).collect(),
        tunable: None,
        suggestion: None,
        checked: None,
        trusted: true,
        basis: Basis::default(),
    }
}

/// The verdict on one call.
pub(super) fn judge(facts: &CallFacts, limits: Option<&RetrySettings>) -> Diagnosis {
    if facts.events == 0 || (facts.tries.is_empty() && facts.finished.is_none()) {
        return Diagnosis {
            kind: VerdictKind::Incomplete,
            severity: Severity::Notice,
            summary: format!("{}: no attempt was recorded for this stream", VerdictKind::Incomplete.label()),
            evidence: vec![fact(Topic::Recording, None, None, format!("{} recorded", count(facts.events, "event")))],
            tunable: None,
            suggestion: None,
            checked: None,
            trusted: true,
            basis: Basis::default(),
        };
    }
    let call = Call::decide(facts, limits);
    let (tunable, suggestion) = call.advice();
    Diagnosis {
        kind: call.kind,
        severity: call.severity,
        summary: call.summary(),
        evidence: call.evidence(),
        tunable: tunable.map(str::to_owned),
        suggestion,
        checked: None,
        trusted: call.trusted(),
        basis: call.basis(),
    }
}

/// A call with its attempts read and its verdict decided.
struct Call<'a> {
    facts: &'a CallFacts,
    readings: Vec<Reading>,
    /// The attempt the verdict is read from.
    basis: usize,
    severity: Severity,
    kind: VerdictKind,
    denial: Option<Denial>,
    /// Timers that fired on a runtime too late to trust them.
    untrusted: Vec<&'a Fired>,
    /// The timer held for our own lateness that the verdict turns on.
    held: Option<&'a Hold>,
}

impl<'a> Call<'a> {
    fn decide(facts: &'a CallFacts, limits: Option<&RetrySettings>) -> Call<'a> {
        let readings: Vec<Reading> = facts.tries.iter().map(read).collect();
        let last = facts.tries.len().saturating_sub(1);
        let outcome = facts.finished.as_ref().map(|f| f.outcome);
        let denial = match outcome {
            Some(Outcome::Failed) => facts.tries.last().and_then(|t| denial(facts, t, limits)),
            _ => None,
        };
        let (basis, severity) = match outcome {
            None | Some(Outcome::Cancelled) => (last, Severity::Notice),
            Some(Outcome::Ok) => match costliest_failure(facts, &readings) {
                Some(index) => (index, Severity::Recovered),
                None if readings.get(last).is_none_or(|r| r.kind == VerdictKind::Healthy) => (last, Severity::Ok),
                None => (last, Severity::Notice),
            },
            Some(Outcome::Partial) => (last, Severity::Partial),
            Some(Outcome::Failed) => (last, Severity::Failed),
        };
        let pattern = readings.get(basis).map_or(VerdictKind::Incomplete, |r| r.kind);
        // Retries switched off (none allowed at all, as `observe` runs)
        // refuse nothing beyond the failure: the failure is the verdict.
        let retries_off = limits.is_some_and(|l| l.max_retries == 0);
        let denied_beyond = match denial.as_ref().map(|d| d.by) {
            Some(DeniedBy::FleetBudget | DeniedBy::Deadline) => true,
            Some(DeniedBy::TotalRetries) => !retries_off,
            Some(DeniedBy::ServerWaitCap) => pattern != VerdictKind::RateLimited,
            _ => false,
        };
        let kind = match outcome {
            None => VerdictKind::Incomplete,
            Some(Outcome::Cancelled) => VerdictKind::Cancelled,
            Some(Outcome::Failed) if denied_beyond => VerdictKind::RetryDenied,
            _ => pattern,
        };
        let untrusted = facts
            .tries
            .iter()
            .flat_map(|t| [&t.fired, &t.deadline_after])
            .flatten()
            .filter(|f| f.lag.is_some_and(|lag| lag_untrusts(f.budget, lag)))
            .collect();
        let held = facts.tries.get(basis).and_then(verdict_hold);
        Call { facts, readings, basis, severity, kind, denial, untrusted, held }
    }

    /// Whether our own runtime's lateness decided nothing of the verdict.
    fn trusted(&self) -> bool {
        self.untrusted.is_empty() && self.held.is_none()
    }

    fn reading(&self) -> Option<&Reading> {
        self.readings.get(self.basis)
    }

    fn basis_try(&self) -> Option<&'a Try> {
        self.facts.tries.get(self.basis)
    }

    fn summary(&self) -> String {
        let facts = self.facts;
        let number = self.basis_try().map_or(0, |t| t.number);
        let mut summary = String::new();
        if !self.trusted() {
            summary.push_str(UNTRUSTED);
            summary.push_str(" — ");
        }
        summary.push_str(self.kind.label());
        let Some(r) = self.reading() else { return summary };
        match self.kind {
            VerdictKind::RetryDenied => {
                let by = self.denial.as_ref().map_or("", |d| d.by.describe());
                summary.push_str(&format!(" by {by} after {}: {}", r.kind.label(), r.detail));
            }
            VerdictKind::Incomplete => {
                let began = self.basis_try().and_then(|t| t.started_at).unwrap_or(facts.last_at);
                summary.push_str(&format!(
                    ": the events end {} after attempt {number} began, {}",
                    secs(facts.last_at.saturating_sub(began)),
                    r.detail
                ));
            }
            // The agent's going is said from its attempt's start.
            VerdictKind::Cancelled if self.basis_try().is_some_and(|t| t.agent_gone_at.is_some()) => {
                summary.push_str(&format!(": {} (attempt {number})", r.detail));
            }
            VerdictKind::Cancelled => {
                let at = facts.finished.as_ref().map_or(facts.last_at, |f| f.at);
                summary.push_str(&format!(" after {}", secs(at.saturating_sub(facts.started_at.unwrap_or(at)))));
                if facts.cancelled_between {
                    let (label, detail) = (r.kind.label(), &r.detail);
                    summary.push_str(&format!(" while waiting to retry after attempt {number} ({label}: {detail})"));
                } else {
                    summary.push_str(&format!(" {} (attempt {number})", r.detail));
                }
            }
            _ if !r.detail.is_empty() => {
                summary.push_str(": ");
                summary.push_str(&r.detail);
            }
            _ => {}
        }
        summary.push_str(&self.ending());
        summary
    }

    /// How the call ended, as the summary's closing clause.
    fn ending(&self) -> String {
        let facts = self.facts;
        let Some(finished) = &facts.finished else { return String::new() };
        let kind = self.readings[self.basis].kind;
        let alike: Vec<&Reading> = self.readings.iter().filter(|r| r.kind == kind).collect();
        let silences: Option<Vec<Duration>> = alike.iter().map(|r| r.silence).collect();
        let shared = silence_of(kind).zip(silences.as_deref().and_then(Regular::of));
        let repeated = match shared {
            Some(((what, _), shared)) => {
                format!(" ({} attempts alike, each after {})", alike.len(), shared.words(what))
            }
            None if alike.len() > 1 => format!(" ({} attempts alike)", alike.len()),
            None => String::new(),
        };
        let last = facts.tries.last();
        match finished.outcome {
            Outcome::Ok if self.basis + 1 < facts.tries.len() => {
                let hopped = facts.tries.iter().any(|t| t.failed_over.is_some());
                let on = match last.and_then(|t| t.target.as_ref()) {
                    Some(target) if hopped => format!(" on {target} after a failover"),
                    _ => String::new(),
                };
                format!("{repeated}; recovered on attempt {}{on}", last.map_or(0, |t| t.number))
            }
            Outcome::Ok | Outcome::Cancelled => String::new(),
            Outcome::Partial => {
                format!("; partial recovery kept {}", count(facts.partial_chars.unwrap_or(0) as u64, "character"))
            }
            Outcome::Failed => {
                let mut clause = format!("{repeated}; failed after {}", count(attempts(facts).into(), "attempt"));
                // A refused server wait is told by the reading of the answer.
                if let Some(d) = self.denial.as_ref().filter(|d| d.by != DeniedBy::ServerWaitCap) {
                    clause.push_str(&format!("; {}", d.because));
                } else if let Some(fired) =
                    last.and_then(|t| t.fired.as_ref()).filter(|f| f.timer == TimerKind::Deadline)
                {
                    clause.push_str(&format!("; the call deadline ({}) ended it", budget(fired.budget)));
                } else if let Some(c) = last.and_then(|t| t.classified.as_ref()).filter(|c| !c.retryable) {
                    clause.push_str(&format!("; not retried: {} is not retryable", c.category));
                }
                clause
            }
        }
    }

    /// Every attempt's facts and what followed each, the refusal, the
    /// late timers and the end, in time order.
    fn evidence(&self) -> Vec<Evidence> {
        let facts = self.facts;
        let mut evidence: Vec<Evidence> = Vec::new();
        for (t, r) in facts.tries.iter().zip(&self.readings) {
            evidence.extend(r.evidence.iter().cloned());
            evidence.extend(after_evidence(t));
        }
        if let Some(d) = self.denial.as_ref().filter(|d| d.by != DeniedBy::ServerWaitCap) {
            evidence.push(d.evidence.clone());
        }
        for f in &self.untrusted {
            let lag = f.lag.unwrap_or_default();
            evidence.push(fact(
                Topic::Lag,
                None,
                Some(f.at),
                format!(
                    "the {} timer ({}) fired while our runtime ran {} late ({} of its budget): \
                     the silence may be ours, not the network's",
                    timer(f.timer),
                    budget(f.budget),
                    secs(lag),
                    percent(lag, f.budget)
                ),
            ));
        }
        if let Some(finished) = &facts.finished {
            let text = format!("{} after {}", finished.outcome.name(), count(attempts(facts).into(), "attempt"));
            evidence.push(fact(Topic::Retry, None, Some(finished.at), text));
        }
        in_time_order(&mut evidence);
        evidence
    }

    /// The tunable and what to try: the refusal's for `retry_denied`, else
    /// the pattern's (a cancel's only when an observed agent went: a cancel
    /// while waiting to retry is not the failure's to advise on); an
    /// untrustworthy verdict first asks for less load.
    fn advice(&self) -> (Option<&'static str>, Option<String>) {
        let (tunable, suggestion) = match (self.kind, &self.denial) {
            (VerdictKind::RetryDenied, Some(d)) => (d.tunable, Some(d.suggestion.clone())),
            (VerdictKind::Cancelled, _) if self.facts.cancelled_between => (None, None),
            (VerdictKind::Incomplete | VerdictKind::Healthy, _) => (None, None),
            _ => (self.reading().and_then(|r| r.tunable), self.reading().and_then(|r| r.suggestion.clone())),
        };
        let first = match (self.untrusted.first(), self.held) {
            (Some(_), _) => "run fewer streams at once: our own runtime was late when the timer fired".to_owned(),
            (None, Some(hold)) => format!(
                "run fewer streams at once: our own runtime was late when our {} timer came due, and the stream \
                 was not cut for it",
                timer(hold.timer)
            ),
            (None, None) => return (tunable, suggestion),
        };
        (tunable, Some(suggestion.map_or_else(|| first.clone(), |s| format!("{first}; then: {s}"))))
    }

    fn basis(&self) -> Basis {
        let t = self.basis_try();
        let caught = self.reading().and_then(|r| r.timer);
        Basis {
            attempt: t.map(|t| t.number),
            target: t.and_then(|t| t.target.as_ref()).map(ToString::to_string),
            timer: caught.map(|(timer, _)| timer),
            timer_budget_ms: caught.map(|(_, budget)| budget.as_secs_f64() * 1000.0),
            peer: t.map_or_else(Vec::new, |t| {
                t.headers.iter().filter(|(name, _)| PEER_HEADERS.contains(&name.as_str())).cloned().collect()
            }),
            idle_ms: self.reading().and_then(|r| r.silence).map(|d| d.as_secs_f64() * 1000.0),
            denied_by: self.denial.as_ref().map(|d| d.by),
            attempts: attempts(self.facts),
            would_have_fired: t.and_then(|t| {
                let mark = t.would_fire.as_ref()?;
                let budget_ms = mark.budget.as_secs_f64() * 1000.0;
                Some(WouldHaveFired {
                    timer: mark.timer,
                    budget_ms,
                    after_ms: t.offset(mark.at).as_secs_f64() * 1000.0,
                })
            }),
            agent_disconnected_ms: t.and_then(|t| Some(t.offset(t.agent_gone_at?).as_secs_f64() * 1000.0)),
            held: t.map_or_else(Vec::new, |t| {
                t.held
                    .iter()
                    .map(|hold| HeldTimer {
                        timer: hold.timer,
                        budget_ms: hold.budget.as_secs_f64() * 1000.0,
                        at_ms: t.offset(hold.at).as_secs_f64() * 1000.0,
                        lag_ms: hold.lag.as_secs_f64() * 1000.0,
                    })
                    .collect()
            }),
        }
    }
}

/// Sorts evidence by time, stably; a fact without a time of its own stays
/// right after the fact before it.
fn in_time_order(evidence: &mut Vec<Evidence>) {
    let mut last = f64::NEG_INFINITY;
    let mut keyed: Vec<(f64, Evidence)> = evidence
        .drain(..)
        .map(|e| {
            last = e.at_ms.unwrap_or(last);
            (last, e)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
    evidence.extend(keyed.into_iter().map(|(_, e)| e));
}

fn attempts(facts: &CallFacts) -> u32 {
    facts.tries.iter().map(|t| t.number).max().unwrap_or(0)
}

/// The failed attempt whose kind cost the call the most time (its
/// attempts and the sleeps after them); the first of its kind, for the
/// summary. `None` when no attempt failed.
fn costliest_failure(facts: &CallFacts, readings: &[Reading]) -> Option<usize> {
    let mut cost: BTreeMap<VerdictKind, (Duration, usize)> = BTreeMap::new();
    for (index, (t, r)) in facts.tries.iter().zip(readings).enumerate() {
        if !t.failed() || end_of(t).is_some_and(|e| e == crate::core::event::AttemptEnd::Done) {
            continue;
        }
        let spent = t.stopped_at().saturating_sub(t.started_at.unwrap_or(t.stopped_at()))
            + t.backoff.as_ref().map_or(Duration::ZERO, |b| b.sleep);
        let entry = cost.entry(r.kind).or_insert((Duration::ZERO, index));
        entry.0 += spent;
    }
    // Most time first; among equals, the kind seen first.
    cost.into_values().max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1))).map(|(_, index)| index)
}

/// Evidence of what followed one attempt: the sleep, a refusal, a hop.
fn after_evidence(t: &Try) -> Vec<Evidence> {
    let n = (t.number > 0).then_some(t.number);
    let mut out = Vec::new();
    if let Some(b) = &t.backoff {
        let why = match &b.requested {
            Some((asked, header)) => format!(" (the server asked for {} with {header})", secs(*asked)),
            None => String::new(),
        };
        out.push(fact(
            Topic::Retry,
            n,
            Some(b.at),
            format!("slept {} before retrying {}{why}", secs(b.sleep), b.category),
        ));
    }
    if let Some(hop) = &t.failed_over {
        out.push(fact(Topic::Retry, n, Some(hop.at), format!("failed over to {}", hop.to)));
    }
    out
}

/// The limit that refused the retry a failure allowed.
#[derive(Debug, Clone)]
struct Denial {
    by: DeniedBy,
    /// Why, as a clause ("the fleet retry budget of p refused a retry (3 in flight, limit 3)").
    because: String,
    evidence: Evidence,
    tunable: Option<&'static str>,
    suggestion: String,
}

/// Why the last failure of a failed call was not retried, when a limit
/// refused a retry it allowed.
fn denial(facts: &CallFacts, t: &Try, limits: Option<&RetrySettings>) -> Option<Denial> {
    let n = (t.number > 0).then_some(t.number);
    if let Some(f) = &t.fleet_refused {
        let because = format!(
            "the fleet retry budget of {} refused a retry ({} in flight, limit {})",
            f.provider, f.in_flight, f.limit
        );
        return Some(Denial {
            by: DeniedBy::FleetBudget,
            evidence: fact(Topic::Retry, n, Some(f.at), because.clone()),
            because,
            tunable: Some("STALLSCOPE_FLEET_RETRY_BUDGET_PERCENT"),
            suggestion: "many calls to this provider were retrying at once; the fleet budget keeps retries from \
                         multiplying the load: raise STALLSCOPE_FLEET_RETRY_BUDGET_PERCENT (or _MIN) only if the \
                         provider can take it, or leave this failure out of STALLSCOPE_FLEET_RETRY_BUDGET_CATEGORIES \
                         if it says nothing about the provider's load"
                .to_owned(),
        });
    }
    if let Some(f) = &t.deadline_after {
        let because = format!("the next retry would have crossed the {} call deadline", budget(f.budget));
        return Some(Denial {
            by: DeniedBy::Deadline,
            evidence: fact(Topic::Retry, n, Some(f.at), because.clone()),
            because,
            tunable: Some("STALLSCOPE_CALL_DEADLINE_S"),
            suggestion: "the call ran out of time before it ran out of retries: raise STALLSCOPE_CALL_DEADLINE_S, \
                         or shorten the timers so each attempt gives up sooner"
                .to_owned(),
        });
    }
    if let Some((requested, cap, at)) = t.wait_refused {
        let because = format!("the server asked to wait {}, over the {} cap", secs(requested), budget(cap));
        return Some(Denial {
            by: DeniedBy::ServerWaitCap,
            evidence: fact(Topic::Retry, n, Some(at), because.clone()),
            because,
            tunable: Some("STALLSCOPE_RETRY_AFTER_MAX_S"),
            suggestion: format!(
                "raise STALLSCOPE_RETRY_AFTER_MAX_S above {} to wait as asked, or keep the cap and fail over",
                secs(requested)
            ),
        });
    }
    let c = t.classified.as_ref().filter(|c| c.retryable)?;
    if t.followed() {
        return None;
    }
    let used = |category: Option<Category>| {
        facts
            .tries
            .iter()
            .filter_map(|t| t.backoff.as_ref())
            .filter(|b| category.is_none_or(|c| b.category == c))
            .count() as u32
    };
    let (spent, total) = (used(Some(c.category)), used(None));
    // Retries of a category that is not retried were forced by the server
    // and counted against their own budget.
    let own = |l: &RetrySettings| {
        if c.category.is_retryable() { l.budget(c.category) } else { l.server_forced_budget }
    };
    let (by, because, tunable) = match limits {
        Some(l) if spent >= own(l) => (
            DeniedBy::CategoryBudget,
            format!("the {} retry budget ({}) is spent", c.category, own(l)),
            Some(budget_tunable(c.category)),
        ),
        Some(l) if l.max_retries == 0 => (
            DeniedBy::TotalRetries,
            "retries are off (STALLSCOPE_PROVIDER_STREAM_RETRIES=0)".to_owned(),
            Some("STALLSCOPE_PROVIDER_STREAM_RETRIES"),
        ),
        Some(l) if total >= l.max_retries => (
            DeniedBy::TotalRetries,
            format!("the call's {} retries are spent", l.max_retries),
            Some("STALLSCOPE_PROVIDER_STREAM_RETRIES"),
        ),
        Some(_) => return None,
        None => (
            DeniedBy::RetryBudget,
            format!("its retries are spent ({} made, {} of them {})", total, spent, c.category),
            None,
        ),
    };
    let suggestion = format!(
        "raising {} only helps a failure that clears by itself; the pattern says whether this one does",
        tunable.unwrap_or("the retry budgets")
    );
    Some(Denial { by, evidence: fact(Topic::Retry, n, Some(c.at), because.clone()), because, tunable, suggestion })
}

/// The tunable of a category's own retry budget.
fn budget_tunable(category: Category) -> &'static str {
    match category {
        Category::Connection => "STALLSCOPE_RETRY_BUDGET_CONNECTION",
        Category::Timeout => "STALLSCOPE_RETRY_BUDGET_TIMEOUT",
        Category::RateLimit => "STALLSCOPE_RETRY_BUDGET_RATE_LIMIT",
        Category::Overloaded => "STALLSCOPE_RETRY_BUDGET_OVERLOADED",
        Category::ServerError => "STALLSCOPE_RETRY_BUDGET_SERVER_ERROR",
        Category::Auth | Category::InvalidRequest | Category::Cancelled | Category::Permanent => {
            "STALLSCOPE_RETRY_BUDGET_SERVER_FORCED"
        }
    }
}
