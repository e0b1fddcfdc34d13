//! The detectors on hand-built event lists: the edge cases recorded runs
//! rarely show (an empty stream, a recording from before `AttemptEnded`,
//! a cancelled call, a late runtime, each limit that refuses a retry).

use std::time::Duration;

use super::*;
use crate::core::category::{Category, TimerKind};
use crate::core::event::{AttemptEnd, AttemptPhase, EventClass, EventKind, Outcome, SleepReason};
use crate::core::failover::Target;
use crate::core::failure::TransportKind;
use crate::core::policy::CorePolicy;
use crate::tunables::Tunables;

/// Builds one stream's events, a millisecond clock at a time.
struct Script {
    events: Vec<Event>,
    attempt: u32,
}

impl Script {
    fn new() -> Script {
        let mut s = Script { events: Vec::new(), attempt: 0 };
        s.at(0, EventKind::CallStarted { target: Target::new("p", "m"), context_tokens: None });
        s
    }

    fn at(&mut self, ms: u64, kind: EventKind) -> &mut Script {
        self.events.push(Event { at: Duration::from_millis(ms), stream: 3, attempt: self.attempt, kind });
        self
    }

    /// An attempt with the usual timers, its headers and `chunks` progress
    /// events 10 ms apart from `ms`.
    fn attempt(&mut self, ms: u64, idle_s: u64) -> &mut Script {
        self.attempt += 1;
        self.at(ms, EventKind::AttemptStarted { target: Target::new("p", "m"), credential: None })
            .at(ms, EventKind::TimerArmed { timer: TimerKind::Ttfb, after: Duration::from_secs(120), floor: None })
            .at(ms, EventKind::TimerArmed { timer: TimerKind::Idle, after: Duration::from_secs(idle_s), floor: None })
    }

    fn headers(&mut self, ms: u64, status: u16) -> &mut Script {
        self.at(ms, EventKind::HeadersReceived { status, content_type: None })
            .at(ms, EventKind::TimerArmed { timer: TimerKind::DataStall, after: Duration::from_secs(900), floor: None })
    }

    /// `n` progress events 10 ms apart from `from_ms`, as a model streams.
    fn content(&mut self, from_ms: u64, n: u64) -> &mut Script {
        self.progress_every(from_ms, n, 10)
    }

    /// `n` progress events 2 ms apart from `from_ms`: a burst, as a hop
    /// that held them lets them go.
    fn burst(&mut self, from_ms: u64, n: u64) -> &mut Script {
        self.progress_every(from_ms, n, 2)
    }

    /// `n` content events of 120 B, each its own read, `every_ms` apart.
    fn progress_every(&mut self, from_ms: u64, n: u64, every_ms: u64) -> &mut Script {
        for i in 0..n {
            let ms = from_ms + i * every_ms;
            self.at(ms, EventKind::ChunkReceived { bytes: 120 })
                .at(ms, EventKind::SseReceived { class: EventClass::Content, chars: 4, progress: true });
        }
        self
    }

    fn response_headers(&mut self, ms: u64, headers: &[(&str, &str)]) -> &mut Script {
        let headers = headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
        self.at(ms, EventKind::ResponseHeaders { headers })
    }

    /// `timer` (budget `after`) fires at `ms` and ends the attempt.
    fn fired(&mut self, ms: u64, timer: TimerKind, after: Duration) -> &mut Script {
        self.at(ms, EventKind::TimerFired { timer, after, lag: None })
            .at(ms, EventKind::AttemptEnded { end: AttemptEnd::Timer { timer }, stop_reason: None })
            .classified(ms, Category::Timeout, Some(timer), "builtin: timer fired")
    }

    fn classified(&mut self, ms: u64, category: Category, timer: Option<TimerKind>, rule: &str) -> &mut Script {
        self.at(
            ms,
            EventKind::ErrorClassified {
                category,
                timer,
                status: None,
                retryable: category.is_retryable(),
                rule: rule.to_owned(),
                message: rule.to_owned(),
            },
        )
    }

    fn finished(&mut self, ms: u64, outcome: Outcome) -> &mut Script {
        let attempts = self.attempt;
        self.at(ms, EventKind::Finished { outcome, attempts, stop_reason: None })
    }

    fn diagnose(&self) -> Diagnosis {
        diagnose(&self.events)
    }
}

fn backoff(retry: u32, category: Category) -> EventKind {
    EventKind::BackoffScheduled {
        retry,
        category,
        nominal: Duration::from_millis(50),
        sleep: Duration::from_millis(50),
        reason: SleepReason::Backoff,
    }
}

fn idle_fired(lag: Option<Duration>) -> EventKind {
    EventKind::TimerFired { timer: TimerKind::Idle, after: Duration::from_secs(1), lag }
}

#[test]
fn an_empty_stream_is_incomplete_not_healthy() {
    let d = diagnose(&[]);
    assert_eq!((d.kind, d.severity, d.trusted), (VerdictKind::Incomplete, Severity::Notice, true));
    assert!(d.summary.contains("no attempt was recorded"), "{}", d.summary);
}

#[test]
fn a_recording_that_stops_mid_stream_says_what_the_attempt_was_doing() {
    let mut s = Script::new();
    s.attempt(0, 1).headers(20, 200).content(30, 3);
    let d = s.diagnose();
    assert_eq!(d.kind, VerdictKind::Incomplete);
    assert!(d.summary.contains("the events end 0.05 s after attempt 1 began"), "{}", d.summary);
}

/// Recordings made before `AttemptEnded` existed still read: the end comes
/// from the timer that fired, or from the rule the classifier recorded.
#[test]
fn old_recordings_without_attempt_ended_read_from_the_classification() {
    let mut s = Script::new();
    s.attempt(0, 1).headers(10, 200).content(20, 1).at(1020, idle_fired(None));
    s.classified(1020, Category::Timeout, Some(TimerKind::Idle), "builtin: timer fired");
    s.at(1020, backoff(1, Category::Timeout));
    s.attempt(1080, 1);
    s.classified(1081, Category::Connection, None, "builtin: connection refused");
    s.finished(1081, Outcome::Failed);
    let d = s.diagnose();
    assert_eq!((d.kind, d.severity), (VerdictKind::Refused, Severity::Failed), "{}", d.summary);
    assert!(d.summary.contains("p/m after 0.00 s"), "{}", d.summary);
    assert!(d.evidence.iter().any(|e| e.text.contains("1.00 s of silence until the idle timer (1 s) fired")));
}

#[test]
fn a_call_cancelled_while_streaming_is_cancelled() {
    let mut s = Script::new();
    s.attempt(0, 10).headers(10, 200).content(20, 2);
    s.at(40, EventKind::PhaseChanged { phase: AttemptPhase::Streaming });
    s.at(500, EventKind::AttemptEnded { end: AttemptEnd::Cancelled, stop_reason: None });
    s.classified(500, Category::Cancelled, None, "builtin: cancelled");
    s.finished(500, Outcome::Cancelled);
    let d = s.diagnose();
    assert_eq!((d.kind, d.severity, d.tunable.as_deref()), (VerdictKind::Cancelled, Severity::Notice, None));
    assert_eq!(d.summary, "cancelled after 0.50 s while streaming, 0.47 s after the last sign of life (attempt 1)");
}

/// A stall, then a healthy retry: still worth naming, as recovered.
#[test]
fn a_stall_that_a_retry_recovered_is_named_with_severity_recovered() {
    let mut s = Script::new();
    s.attempt(0, 1).headers(10, 200).content(20, 1).at(1030, idle_fired(Some(Duration::from_millis(2))));
    s.at(1030, EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::Idle }, stop_reason: None });
    s.classified(1030, Category::Timeout, Some(TimerKind::Idle), "builtin: timer fired");
    s.attempt(1100, 1).headers(1110, 200).content(1120, 20);
    s.at(1400, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: Some("stop".into()) });
    s.finished(1400, Outcome::Ok);
    let d = s.diagnose();
    assert_eq!((d.kind, d.severity, d.trusted), (VerdictKind::SilentStall, Severity::Recovered, true));
    assert_eq!(d.tunable.as_deref(), Some("STALLSCOPE_SSE_IDLE_TIMEOUT_S"));
    assert_eq!(
        (d.basis.attempt, d.basis.timer, d.basis.timer_budget_ms),
        (Some(1), Some(TimerKind::Idle), Some(1000.0))
    );
    assert!(d.summary.ends_with("recovered on attempt 2"), "{}", d.summary);
}

/// A timer that fired while our runtime ran late proves less silence than
/// it claims: the verdict says so and names the lag.
#[test]
fn a_timer_that_fired_late_makes_the_verdict_untrustworthy() {
    let mut s = Script::new();
    s.attempt(0, 1).headers(10, 200).at(1010, idle_fired(Some(Duration::from_millis(300))));
    s.at(1010, EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::Idle }, stop_reason: None });
    s.classified(1010, Category::Timeout, Some(TimerKind::Idle), "builtin: timer fired");
    s.finished(1010, Outcome::Failed);
    let d = s.diagnose();
    assert!(!d.trusted);
    assert!(d.summary.starts_with(UNTRUSTED), "{}", d.summary);
    let lag: Vec<&Evidence> = d.evidence.iter().filter(|e| e.topic == Topic::Lag).collect();
    assert_eq!(lag.len(), 1);
    assert!(lag[0].text.contains("0.30 s late (30% of its budget)"), "{}", lag[0].text);
    let run = summarize(&[(3, d)]);
    assert_eq!(run.untrusted, 1);
    assert!(run.groups[0].summary.contains("1 not trustworthy"), "{}", run.groups[0].summary);
}

/// Our idle timer (1 s) held at 1.35 s, 0.35 s late (guard mode).
fn idle_held() -> EventKind {
    EventKind::TimerHeld { timer: TimerKind::Idle, after: Duration::from_secs(1), lag: Duration::from_millis(350) }
}

/// The words every held idle timer of these tests reads with.
const IDLE_HELD: &str = "our idle timer (1 s) came due while our own runtime was 0.35 s late (35% of its budget): \
                         not acted on (client overloaded)";

/// A stream whose idle timer came due at 1.35 s on a late runtime (held,
/// when `held`), then came whole at 1.5 s.
fn completed_after_a_hold(held: bool) -> Vec<Event> {
    let mut s = Script::new();
    s.attempt(0, 1).headers(10, 200);
    if held {
        s.at(1350, idle_held());
    }
    s.burst(1500, 20).at(1600, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: None });
    s.finished(1600, Outcome::Ok);
    s.events
}

/// Without the hold the wait and the burst read as a hop holding the
/// stream back; with it, the verdict turns on our lateness and blames no
/// hop and no timer.
#[test]
fn a_stream_that_completed_after_a_hold_is_read_as_our_lateness_not_the_networks() {
    assert_eq!(diagnose(&completed_after_a_hold(false)).kind, VerdictKind::ProxyBuffering);
    let events = completed_after_a_hold(true);
    let d = diagnose(&events);
    assert_eq!(diagnose(&super::fixtures::stored(&events)), d, "read back from the store alike");
    assert_eq!((d.kind, d.severity, d.trusted), (VerdictKind::HealthySlow, Severity::Notice, false));
    assert_eq!(d.summary, format!("{UNTRUSTED} — healthy but slow: completed in 1.60 s though {IDLE_HELD}"));
    assert_eq!(d.tunable, None, "no timer of ours is to blame");
    assert_eq!(
        d.suggestion.as_deref(),
        Some(
            "run fewer streams at once: our own runtime was late when our idle timer came due, and the stream was \
             not cut for it"
        )
    );
    let lag: Vec<&Evidence> = d.evidence.iter().filter(|e| e.topic == Topic::Lag).collect();
    assert_eq!(lag.len(), 1);
    assert_eq!((lag[0].text.clone(), lag[0].at_ms), (format!("{IDLE_HELD}; it started again"), Some(1350.0)));
    let held = HeldTimer { timer: TimerKind::Idle, budget_ms: 1000.0, at_ms: 1350.0, lag_ms: 350.0 };
    assert_eq!(d.basis.held, [held]);
}

/// A timer that fired after one was held decides the verdict: the hold is
/// evidence, and a timer that fired on time is trusted.
#[test]
fn a_timer_that_fired_after_a_hold_decides_the_verdict_and_the_hold_is_evidence() {
    let mut s = Script::new();
    s.attempt(0, 1).headers(10, 200).content(20, 1).at(1350, idle_held());
    s.at(2350, idle_fired(Some(Duration::from_millis(5))));
    s.at(2350, EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::Idle }, stop_reason: None });
    s.classified(2350, Category::Timeout, Some(TimerKind::Idle), "builtin: timer fired");
    s.finished(2350, Outcome::Failed);
    let d = s.diagnose();
    assert_eq!((d.kind, d.trusted), (VerdictKind::SilentStall, true), "{}", d.summary);
    assert!(!d.summary.contains("not acted on"), "{}", d.summary);
    assert!(d.evidence.iter().any(|e| e.topic == Topic::Lag && e.text.starts_with(IDLE_HELD)), "{:#?}", d.evidence);
    assert_eq!(d.basis.held.len(), 1);
}

/// A call cancelled after a hold (the agent gave up while we held our
/// timer) says what we did not act on, and is not trustworthy.
#[test]
fn a_call_cancelled_after_a_hold_says_the_timer_was_not_acted_on() {
    let mut s = Script::new();
    s.attempt(0, 1).headers(10, 200).content(20, 1).at(1350, idle_held());
    s.at(1500, EventKind::AttemptEnded { end: AttemptEnd::Cancelled, stop_reason: None });
    s.classified(1500, Category::Cancelled, None, "builtin: cancelled");
    s.finished(1500, Outcome::Cancelled);
    let d = s.diagnose();
    assert_eq!((d.kind, d.trusted), (VerdictKind::Cancelled, false));
    assert!(d.summary.starts_with(UNTRUSTED), "{}", d.summary);
    assert!(d.summary.contains(&format!("; {IDLE_HELD} (attempt 1)")), "{}", d.summary);
}

fn failed_connect(s: &mut Script, ms: u64) {
    s.attempt(ms, 1);
    s.at(
        ms + 1,
        EventKind::AttemptEnded { end: AttemptEnd::Transport { kind: TransportKind::Refused }, stop_reason: None },
    );
    s.classified(ms + 1, Category::Connection, None, "builtin: connection refused");
}

#[test]
fn a_retry_the_fleet_budget_refused_is_retry_denied_and_says_so() {
    let mut s = Script::new();
    failed_connect(&mut s, 0);
    s.at(2, EventKind::RetryBudgetRefused { provider: "p".into(), in_flight: 3, limit: 3 });
    s.finished(2, Outcome::Failed);
    let d = s.diagnose();
    assert_eq!((d.kind, d.basis.denied_by), (VerdictKind::RetryDenied, Some(DeniedBy::FleetBudget)));
    assert!(d.summary.contains("the fleet retry budget of p refused a retry (3 in flight, limit 3)"), "{}", d.summary);
    assert!(d.summary.starts_with("retry denied by the fleet retry budget after connection refused"), "{}", d.summary);
    assert_eq!(d.tunable.as_deref(), Some("STALLSCOPE_FLEET_RETRY_BUDGET_PERCENT"));
}

#[test]
fn a_backoff_past_the_deadline_is_retry_denied_by_the_deadline() {
    let mut s = Script::new();
    failed_connect(&mut s, 0);
    s.at(2, EventKind::TimerFired { timer: TimerKind::Deadline, after: Duration::from_secs(2), lag: None });
    s.classified(2, Category::Timeout, Some(TimerKind::Deadline), "builtin: backoff would cross the deadline");
    s.finished(2, Outcome::Failed);
    let d = s.diagnose();
    assert_eq!((d.kind, d.basis.denied_by), (VerdictKind::RetryDenied, Some(DeniedBy::Deadline)), "{}", d.summary);
    assert!(d.summary.contains("would have crossed the 2 s call deadline"), "{}", d.summary);
}

/// With the run's limits, a spent category budget keeps the pattern as the
/// kind, and the call's total retries running out first is a denial.
#[test]
fn spent_budgets_are_told_apart_by_the_runs_limits() {
    let mut s = Script::new();
    for i in 0..3 {
        failed_connect(&mut s, i * 100);
        if i < 2 {
            s.at(i * 100 + 2, backoff(u32::try_from(i).unwrap() + 1, Category::Connection));
        }
    }
    s.finished(203, Outcome::Failed);
    let limits = |sets: &[&str]| {
        let mut t = Tunables::defaults();
        for set in sets {
            t.apply_override(set).unwrap();
        }
        CorePolicy::from_tunables(&t).unwrap().retry
    };
    let d = diagnose_with(&s.events, &limits(&["RETRY_BUDGET_CONNECTION=2"]));
    assert_eq!((d.kind, d.basis.denied_by), (VerdictKind::Refused, Some(DeniedBy::CategoryBudget)));
    assert!(d.summary.contains("the connection retry budget (2) is spent"), "{}", d.summary);
    let d = diagnose_with(&s.events, &limits(&["PROVIDER_STREAM_RETRIES=2"]));
    assert_eq!((d.kind, d.basis.denied_by), (VerdictKind::RetryDenied, Some(DeniedBy::TotalRetries)));
    let d = s.diagnose();
    assert_eq!((d.kind, d.basis.denied_by), (VerdictKind::Refused, Some(DeniedBy::RetryBudget)));
}

/// Every tunable a verdict names or suggests is one that exists.
#[test]
fn every_named_tunable_exists() {
    let defaults = Tunables::defaults();
    let known: Vec<&str> = defaults.iter().map(|(spec, _)| spec.name).collect();
    let sources = [include_str!("reading.rs"), include_str!("call.rs"), include_str!("text.rs")];
    let named: Vec<&str> = sources
        .iter()
        .flat_map(|text| text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')))
        .filter(|word| word.starts_with("STALLSCOPE_"))
        .collect();
    assert!(named.len() > 20, "{named:?}");
    for name in named {
        assert!(known.contains(&name), "{name} is not a tunable");
    }
}

/// How an attempt ended picks the family; each transport kind and our
/// connect timer get their own name.
#[test]
fn connection_failures_are_named_for_what_failed() {
    let cases = [
        (AttemptEnd::Transport { kind: TransportKind::KernelTimeout }, VerdictKind::KeepaliveDeadPeer),
        (AttemptEnd::Transport { kind: TransportKind::Dns }, VerdictKind::DnsFailure),
        (AttemptEnd::Transport { kind: TransportKind::Unreachable }, VerdictKind::Unreachable),
        (AttemptEnd::Transport { kind: TransportKind::ConnectTimedOut }, VerdictKind::ConnectTimeout),
        (AttemptEnd::Transport { kind: TransportKind::Read }, VerdictKind::TransportFailure),
        (AttemptEnd::Timer { timer: TimerKind::Connect }, VerdictKind::ConnectTimeout),
    ];
    for (end, kind) in cases {
        let mut s = Script::new();
        s.attempt(0, 1);
        s.at(30, EventKind::AttemptEnded { end: end.clone(), stop_reason: None });
        s.classified(30, Category::Connection, None, "builtin: whatever");
        s.finished(30, Outcome::Failed);
        let d = s.diagnose();
        assert_eq!((d.kind, d.severity), (kind, Severity::Failed), "{end:?}: {}", d.summary);
    }
}

/// The total timer cutting a stream that was still making progress is not
/// a stall.
#[test]
fn progress_cut_by_the_total_timer_is_healthy_but_slow() {
    let mut s = Script::new();
    s.attempt(0, 10).headers(10, 200).content(20, 50);
    s.at(520, EventKind::TimerFired { timer: TimerKind::Total, after: Duration::from_millis(520), lag: None });
    s.at(520, EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::Total }, stop_reason: None });
    s.classified(520, Category::Timeout, Some(TimerKind::Total), "builtin: timer fired");
    s.finished(520, Outcome::Failed);
    let d = s.diagnose();
    assert_eq!((d.kind, d.tunable.as_deref()), (VerdictKind::HealthySlow, Some("STALLSCOPE_SSE_TOTAL_TIMEOUT_S")));
    assert!(d.summary.contains("still making progress (50 progress events in 0.52 s)"), "{}", d.summary);
}

/// Keep-alives that stopped before the idle timer fired leave silence:
/// the idle timer never catches a keep-alive-only stall.
#[test]
fn the_idle_timer_after_keepalives_stopped_is_a_silent_stall() {
    let mut s = Script::new();
    s.attempt(0, 1).headers(10, 200).content(20, 1);
    for ms in [100, 200] {
        s.at(ms, EventKind::ChunkReceived { bytes: 14 });
        s.at(ms, EventKind::SseReceived { class: EventClass::Keepalive, chars: 0, progress: false });
    }
    s.at(1200, idle_fired(None));
    s.at(1200, EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::Idle }, stop_reason: None });
    s.finished(1200, Outcome::Failed);
    assert_eq!(s.diagnose().kind, VerdictKind::SilentStall);
}

/// A failure before any request (every key resting) reads from the
/// classifier's message; what follows it belongs to it.
#[test]
fn a_failure_between_attempts_is_read_without_a_request() {
    let mut s = Script::new();
    s.at(
        0,
        EventKind::ErrorClassified {
            category: Category::RateLimit,
            timer: None,
            status: None,
            retryable: true,
            rule: "builtin: every key of the pool is cooling down".into(),
            message: "every key of `p` rests after rate_limit failures".into(),
        },
    );
    s.at(0, EventKind::ServerWaitRefused { requested: Duration::from_secs(600), cap: Duration::from_secs(60) });
    s.finished(0, Outcome::Failed);
    let d = s.diagnose();
    assert_eq!(
        (d.kind, d.basis.denied_by, d.basis.attempt),
        (VerdictKind::RateLimited, Some(DeniedBy::ServerWaitCap), Some(0))
    );
    assert!(d.summary.contains("no request sent: every key of `p` rests"), "{}", d.summary);
    assert!(d.summary.contains("asked to wait 600 s, refused: over the 60 s cap"), "{}", d.summary);
}

/// Streams that share a proxy are said to; a kind's sentence counts how
/// they ended.
#[test]
fn the_run_summary_names_what_streams_share() {
    let stalled = |via: &str| {
        let mut s = Script::new();
        s.attempt(0, 1).headers(10, 200);
        s.at(10, EventKind::ResponseHeaders { headers: vec![("via".into(), via.into())] });
        s.at(1010, idle_fired(None));
        s.at(1010, EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::Idle }, stop_reason: None });
        s.finished(1010, Outcome::Failed);
        s.diagnose()
    };
    let run = summarize(&[(0, stalled("1.1 squid")), (1, stalled("1.1 squid")), (2, diagnose(&[]))]);
    assert_eq!(run.streams, 3);
    assert_eq!(
        run.groups[0].summary,
        "2 of 3 streams: silent stall behind the same proxy (via: 1.1 squid), caught by the idle timer after 1 s each (2 failed)"
    );
    assert_eq!(run.groups[1].summary, "1 of 3 streams: incomplete recording");
    let run = summarize(&[(0, stalled("1.1 squid")), (1, stalled("1.1 other"))]);
    assert!(!run.groups[0].summary.contains("via"), "{}", run.groups[0].summary);
}

/// A live view takes each stream's verdict as the stream finishes: the
/// one `diagnose` gives, after which the collector holds nothing of it.
#[test]
fn a_collector_gives_up_a_finished_stream_with_its_verdict() {
    let mut s = Script::new();
    s.attempt(0, 1).headers(10, 200).content(20, 3);
    s.at(60, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: None }).finished(60, Outcome::Ok);
    let collector = Collector::new(None);
    s.events.iter().for_each(|e| collector.push(e));
    assert_eq!(collector.take(3), Some(s.diagnose()));
    assert_eq!(collector.take(3), None);
    assert!(collector.diagnoses().is_empty());
}

/// Review D6: the idle clock restarts when the headers come, so the
/// longest silence of a healthy stream whose headers took 40 s and whose
/// first byte came 40 s after them is 40 s, not the 80 s since the request.
#[test]
fn the_longest_silence_restarts_at_the_headers_as_the_idle_timer_does() {
    let mut s = Script::new();
    s.attempt(0, 60).headers(40_000, 200).content(80_000, 3);
    s.at(80_020, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: None });
    s.finished(80_020, Outcome::Ok);
    let d = s.diagnose();
    assert_eq!(d.kind, VerdictKind::HealthySlow, "{d:?}");
    assert!(d.summary.contains("the longest silence (40.0 s) used 67% of the idle timer's 60 s"), "{}", d.summary);
}

/// A healthy attempt whose body came in one burst of `events` progress
/// events after `wait_ms`, with `headers` recorded.
fn burst_of(events: u64, wait_ms: u64, headers: &[(&str, &str)]) -> Diagnosis {
    let mut s = Script::new();
    s.attempt(0, 30).headers(10, 200).response_headers(10, headers).burst(wait_ms, events);
    s.at(wait_ms + 50, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: None });
    s.finished(wait_ms + 50, Outcome::Ok);
    s.diagnose()
}

/// A reply long enough to be held back (20 progress events) in one burst.
fn burst_after(wait_ms: u64, headers: &[(&str, &str)]) -> Diagnosis {
    burst_of(20, wait_ms, headers)
}

/// Review R5 and issue 24: a fast provider's short answer is not
/// buffering, even behind a `via` and after a long think: the canary's own
/// prompt ("Say hello in five words.": a role chunk and seven deltas) in
/// one burst after 400 ms, or after 1.5 s; a whole reply in one burst is,
/// after 400 ms behind a `via` or 1.5 s with no header at all.
#[test]
fn a_short_answer_that_came_fast_is_not_proxy_buffering() {
    let canary = |wait| burst_of(8, wait, &[("via", "1.1 squid")]).kind;
    assert_eq!(canary(400), VerdictKind::Healthy);
    assert_eq!(canary(1500), VerdictKind::Healthy);
    assert_eq!(burst_after(400, &[]).kind, VerdictKind::Healthy);
    assert_eq!(burst_after(400, &[("via", "1.1 squid")]).kind, VerdictKind::ProxyBuffering);
    assert_eq!(burst_after(1500, &[]).kind, VerdictKind::ProxyBuffering);
}

/// An answer with `status`, `headers` and `body` after 2 s.
fn gateway_answer(status: u16, headers: &[(&str, &str)], body: &str) -> Diagnosis {
    let mut s = Script::new();
    s.attempt(0, 30).headers(2_000, status).response_headers(2_000, headers);
    s.at(2_001, EventKind::ErrorBody { body: body.to_owned(), truncated: false });
    s.at(2_001, EventKind::AttemptEnded { end: AttemptEnd::Status { status }, stop_reason: None });
    s.classified(2_001, Category::ServerError, None, &format!("builtin: status {status}"));
    s.finished(2_001, Outcome::Failed);
    s.diagnose()
}

/// A 504 page nginx made itself is its gateway timeout, named with the
/// knob that ran out; Envoy's words are Envoy's; a page with no naming
/// header is a gateway's; the provider's own JSON 504, even behind
/// Cloudflare, stays the provider's server error.
#[test]
fn a_gateway_that_answers_with_a_page_of_its_own_is_a_gateway_timeout() {
    let page = "<html>\r\n<head><title>504 Gateway Time-out</title></head>\r\n<body>\r\n<center><h1>504 Gateway \
                Time-out</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n";
    let nginx = gateway_answer(504, &[("server", "nginx/1.22.1")], page);
    assert_eq!(nginx.kind, VerdictKind::GatewayTimeout, "{}", nginx.summary);
    assert!(nginx.summary.contains("nginx answered HTTP 504 after 2.00 s with a page of its own"), "{}", nginx.summary);
    let suggestion = nginx.suggestion.clone().unwrap_or_default();
    assert!(suggestion.contains("(nginx (`server: nginx/1.22.1`))"), "{suggestion}");
    assert!(suggestion.contains("raise its `proxy_read_timeout` (60.0 s unless set) above it"), "{suggestion}");
    assert_eq!(nginx.tunable, None, "the hop's knob is the fix, not our retries");

    let envoy = gateway_answer(504, &[("server", "envoy")], "upstream request timeout");
    assert_eq!(envoy.kind, VerdictKind::GatewayTimeout);
    assert!(envoy.suggestion.unwrap_or_default().contains("`route timeout` (15.0 s unless set)"));
    let unnamed = gateway_answer(502, &[], "<html><body>Bad Gateway</body></html>");
    assert_eq!(unnamed.kind, VerdictKind::GatewayTimeout);
    assert!(unnamed.summary.contains("a gateway answered HTTP 502"), "{}", unnamed.summary);

    let provider =
        r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}"#;
    let own = gateway_answer(504, &[("server", "cloudflare")], provider);
    assert_eq!(own.kind, VerdictKind::ServerError, "{}", own.summary);
    assert_eq!(gateway_answer(504, &[("server", "nginx")], "").kind, VerdictKind::ServerError, "no page, no proof");
}

/// A buffering hop its header names is named, with the knob that switches
/// its buffering off; an unnamed one is "something on the path".
#[test]
fn a_buffered_answer_names_the_hop_and_its_knob_when_a_header_names_it() {
    let nginx = burst_after(1500, &[("server", "nginx/1.24.0")]);
    assert_eq!(nginx.kind, VerdictKind::ProxyBuffering);
    let suggestion = nginx.suggestion.unwrap_or_default();
    assert!(suggestion.starts_with("nginx (`server: nginx/1.24.0`) may hold the stream back: keep "), "{suggestion}");
    assert!(suggestion.contains("switch nginx's buffering off (`proxy_buffering off` in its location"), "{suggestion}");
    let unnamed = burst_after(1500, &[]).suggestion.unwrap_or_default();
    assert!(unnamed.starts_with("something on the path holds the stream back"), "{unnamed}");
}

/// Review R3: headers and then no body byte until the data-stall timer
/// fired (TTFB off for a large prompt) reads as possible buffering, with
/// the hop the headers name, not as a dead peer to catch sooner.
#[test]
fn no_body_byte_until_the_data_stall_timer_may_be_a_buffering_proxy() {
    let mut s = Script::new();
    s.attempt(0, 1800).headers(10, 200);
    s.at(10, EventKind::ResponseHeaders { headers: vec![("via".to_owned(), "1.1 proxy.corp (squid/5.7)".to_owned())] });
    let fired = 900_010;
    s.at(fired, EventKind::TimerFired { timer: TimerKind::DataStall, after: Duration::from_secs(900), lag: None });
    s.at(fired, EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::DataStall }, stop_reason: None });
    s.classified(fired, Category::Timeout, Some(TimerKind::DataStall), "builtin: timer fired");
    s.finished(fired, Outcome::Failed);
    let d = s.diagnose();
    let suggestion = d.suggestion.unwrap_or_default();
    assert!(
        suggestion.starts_with("headers came but no body byte: a buffering proxy (via: 1.1 proxy.corp (squid/5.7))"),
        "{suggestion}"
    );
    assert!(!suggestion.contains("a dead peer or a dropped route"), "{suggestion}");
}

/// Review R4: a 504 that nginx sent reads as what a gateway sends, naming
/// it and the hop's knob, not as a fault on the provider's side; a 500
/// stays the provider's.
#[test]
fn a_gateway_status_names_the_hop_that_may_have_sent_it() {
    let answer = |status| {
        let mut s = Script::new();
        s.attempt(0, 30).headers(60_000, status);
        s.at(60_000, EventKind::ResponseHeaders { headers: vec![("server".to_owned(), "nginx".to_owned())] });
        s.at(60_001, EventKind::AttemptEnded { end: AttemptEnd::Status { status }, stop_reason: None });
        s.classified(60_001, Category::ServerError, None, &format!("builtin: status {status}"));
        s.finished(60_001, Outcome::Failed);
        s.diagnose()
    };
    let gateway = answer(504);
    assert_eq!(gateway.kind, VerdictKind::ServerError);
    let suggestion = gateway.suggestion.unwrap_or_default();
    assert!(suggestion.starts_with("nginx (`server: nginx`) answered HTTP 504 after 60.0 s"), "{suggestion}");
    assert!(suggestion.contains("that wait is its `proxy_read_timeout` (60.0 s unless set)"), "{suggestion}");
    assert!(!suggestion.contains("provider's side"), "{suggestion}");
    let provider = answer(500).suggestion.unwrap_or_default();
    assert!(provider.contains("a fault on the provider's side"), "{provider}");
}

/// A stream with nginx's `headers`, three events from 20 ms (the last at
/// 40 ms), then the connection ended by `kind` after `silence_ms` more.
fn cut_after(silence_ms: u64, kind: TransportKind, headers: &[(&str, &str)]) -> Diagnosis {
    let mut s = Script::new();
    s.attempt(0, 300).headers(10, 200).response_headers(10, headers).content(20, 3);
    let at = 40 + silence_ms;
    s.at(at, EventKind::AttemptEnded { end: AttemptEnd::Transport { kind }, stop_reason: None });
    s.classified(at, Category::Connection, None, "builtin: connection closed");
    s.finished(at, Outcome::Partial);
    s.diagnose()
}

/// Issue 24: a close or reset after the headers and a silence is an idle
/// cut, with the silence as its basis, the hop its headers name and its
/// knob, a documented default the silence matches, and the what-if of our
/// idle timer just below it; a break between bytes stays what it was.
#[test]
fn a_cut_after_a_silence_is_an_idle_cut_naming_the_hop() {
    let nginx = cut_after(2_000, TransportKind::Closed, &[("server", "nginx/1.22.1")]);
    assert_eq!(nginx.kind, VerdictKind::IdleCut, "{}", nginx.summary);
    assert_eq!(nginx.basis.idle_ms, Some(2_000.0));
    assert!(
        nginx.summary.contains("the connection was closed after 2.00 s of silence, 2.04 s into"),
        "{}",
        nginx.summary
    );
    assert_eq!(nginx.tunable.as_deref(), Some("STALLSCOPE_SSE_IDLE_TIMEOUT_S"));
    let suggestion = nginx.suggestion.unwrap_or_default();
    assert!(
        suggestion.starts_with(
            "nginx (`server: nginx/1.22.1`) is on this path: if it cut the stream, raise its `proxy_read_timeout` \
             (60.0 s unless set) above the longest silence expected"
        ),
        "{suggestion}"
    );
    assert!(suggestion.contains("content had streamed, so no retry may restart the answer"), "{suggestion}");
    assert!(suggestion.contains("`stallscope whatif RUN --set SSE_IDLE_TIMEOUT_S=1.9`"), "{suggestion}");

    let alb = cut_after(60_100, TransportKind::Reset, &[]);
    assert_eq!(alb.kind, VerdictKind::IdleCut);
    assert!(alb.summary.contains("the connection was reset after 60.1 s of silence"), "{}", alb.summary);
    assert!(alb.suggestion.unwrap_or_default().starts_with("no header names a hop"));
    assert!(
        alb.evidence
            .iter()
            .any(|e| e.text.starts_with("60.1 s of silence is the default of nginx's `proxy_read_timeout`")),
        "{:?}",
        alb.evidence
    );

    assert_eq!(cut_after(200, TransportKind::Closed, &[]).kind, VerdictKind::ClosedEarly);
    assert_eq!(cut_after(200, TransportKind::Reset, &[]).kind, VerdictKind::ResetMidStream);
}

/// A run's idle cuts after one silence say so, with the hop's knob; cuts
/// after scattered silences give the range and claim no timer.
#[test]
fn cuts_after_one_silence_are_grouped_as_a_hop_s_timer() {
    let nginx = [("server", "nginx/1.22.1")];
    let regular: Vec<(u64, Diagnosis)> = [2_000, 2_010, 1_995, 2_050]
        .into_iter()
        .enumerate()
        .map(|(i, ms)| (i as u64, cut_after(ms, TransportKind::Closed, &nginx)))
        .collect();
    let run = summarize(&regular);
    let summary = &run.groups[0].summary;
    assert!(
        summary.starts_with(
            "4 of 4 streams: idle cut from the same server (server: nginx/1.22.1), each after 2.02 s of silence \
             (±0.03 s): a hop on this path closes streams idle for 2 s (nginx's `proxy_read_timeout`, 60.0 s unless set)"
        ),
        "{summary}"
    );
    let scattered: Vec<(u64, Diagnosis)> = [1_200, 5_000]
        .into_iter()
        .enumerate()
        .map(|(i, ms)| (i as u64, cut_after(ms, TransportKind::Closed, &[])))
        .collect();
    let summary = &summarize(&scattered).groups[0].summary;
    assert!(summary.starts_with("2 of 2 streams: idle cut, after 1.20–5.00 s of silence"), "{summary}");
    assert!(!summary.contains("a hop on this path"), "{summary}");
}

/// Issue 24: a hop that holds a stream back reads as buffering whichever
/// clock caught it: no body byte behind nginx until the data-stall timer
/// fired (TTFB off for a large prompt), or a whole reply in one burst after
/// a long wait and then nothing until the idle timer fired.
#[test]
fn a_buffering_hop_caught_by_another_clock_is_proxy_buffering() {
    let mut s = Script::new();
    s.attempt(0, 1800).headers(10, 200).response_headers(10, &[("server", "nginx/1.22.1")]);
    s.fired(5_010, TimerKind::DataStall, Duration::from_secs(5)).finished(5_010, Outcome::Failed);
    let d = s.diagnose();
    assert_eq!(d.kind, VerdictKind::ProxyBuffering, "{}", d.summary);
    assert!(
        d.summary.contains(
            "then no body byte for 5.00 s until the data-stall timer (5 s) fired, behind nginx (`server: \
             nginx/1.22.1`), which buffers responses unless told not to"
        ),
        "{}",
        d.summary
    );
    let suggestion = d.suggestion.unwrap_or_default();
    assert!(suggestion.contains("switch nginx's buffering off (`proxy_buffering off`"), "{suggestion}");
    assert!(suggestion.contains("if its buffering is off, the provider stalled"), "{suggestion}");
    assert_eq!(d.basis.timer, Some(TimerKind::DataStall));

    let mut s = Script::new();
    s.attempt(0, 30).headers(10, 200).burst(1_500, 20);
    s.fired(31_538, TimerKind::Idle, Duration::from_secs(30)).finished(31_538, Outcome::Partial);
    let d = s.diagnose();
    assert_eq!(d.kind, VerdictKind::ProxyBuffering, "{}", d.summary);
    assert!(
        d.summary.contains("then 2.3 KiB (20 progress events) within 50 ms, then nothing until the idle"),
        "{}",
        d.summary
    );
}

/// A gateway's 504 after the same wait on both attempts says so.
#[test]
fn a_gateway_timeout_on_every_attempt_after_one_wait_says_so() {
    let page = "<html><body><h1>504 Gateway Time-out</h1></body></html>";
    let mut s = Script::new();
    for (n, start) in [(1, 0), (2, 2_100)] {
        s.attempt(start, 30).headers(start + 2_000, 504).response_headers(start + 2_000, &[("server", "nginx")]);
        s.at(start + 2_001, EventKind::ErrorBody { body: page.to_owned(), truncated: false });
        s.at(start + 2_001, EventKind::AttemptEnded { end: AttemptEnd::Status { status: 504 }, stop_reason: None });
        s.classified(start + 2_001, Category::ServerError, None, "builtin: status 504");
        if n == 1 {
            s.at(start + 2_001, backoff(1, Category::ServerError));
        }
    }
    s.finished(4_101, Outcome::Failed);
    let d = s.diagnose();
    assert_eq!(d.kind, VerdictKind::GatewayTimeout, "{}", d.summary);
    assert!(d.summary.contains("(2 attempts alike, each after 2.00 s of waiting (±0.00 s))"), "{}", d.summary);
}

/// nginx with its defaults lets a held reply go a 4 KiB buffer at a time:
/// 43 progress events in 2 reads after a 1.18 s wait is buffering; the
/// same events two a read, as a fast model's reads carry them, is not.
#[test]
fn a_reply_let_go_in_lumps_is_proxy_buffering() {
    let lumps = |reads: &[(u64, u64)]| {
        let mut s = Script::new();
        s.attempt(0, 30).headers(1_180, 200).response_headers(1_180, &[("server", "nginx/1.22.1")]);
        for &(ms, events) in reads {
            s.at(ms, EventKind::ChunkReceived { bytes: 170 * events as usize });
            for _ in 0..events {
                s.at(ms, EventKind::SseReceived { class: EventClass::Content, chars: 6, progress: true });
            }
        }
        let end = reads.last().unwrap().0;
        s.at(end, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: None });
        s.finished(end, Outcome::Ok);
        s.diagnose()
    };
    let nginx = lumps(&[(1_180, 23), (2_060, 20)]);
    assert_eq!(nginx.kind, VerdictKind::ProxyBuffering, "{}", nginx.summary);
    assert!(
        nginx.summary.contains(
            "then no body byte until 1.18 s, then 7.1 KiB (43 progress events) in 2 reads, up to 1.18 s apart"
        ),
        "{}",
        nginx.summary
    );
    let paired: Vec<(u64, u64)> = (0..20).map(|i| (1_180 + i * 45, 2)).collect();
    assert_eq!(lumps(&paired).kind, VerdictKind::Healthy);
}

impl Script {
    /// An attempt as observe relays it: no timer of ours armed.
    fn observed(&mut self, ms: u64) -> &mut Script {
        self.attempt += 1;
        self.at(ms, EventKind::AttemptStarted { target: Target::new("p", "m"), credential: None })
    }

    /// Observe's replay found `timer` (budget `budget_ms`) would have
    /// fired at `ms`.
    fn would_fire(&mut self, ms: u64, timer: TimerKind, budget_ms: u64) -> &mut Script {
        self.at(ms, EventKind::TimerWouldFire { timer, after: Duration::from_millis(budget_ms) })
    }

    /// The same events as the store reads them back.
    fn stored(&self) -> Vec<Event> {
        super::fixtures::stored(&self.events)
    }
}

#[test]
fn an_agent_that_disconnected_reads_so_with_our_timer_that_would_have_fired_in_either_order() {
    let s = Script { events: super::fixtures::agent_gone_on_a_silent_stall(3), attempt: 1 };
    let d = s.diagnose();
    assert_eq!(diagnose(&s.stored()), d, "the mark after the end, or in its time place, reads alike");
    assert_eq!((d.kind, d.severity, d.trusted), (VerdictKind::Cancelled, Severity::Notice, true));
    assert_eq!(
        d.summary,
        "cancelled: the agent disconnected after 1.01 s, before any content, 1.00 s after the last sign of life; \
         our idle timer (0.4 s) would have fired at 0.41 s (attempt 1)"
    );
    let texts: Vec<&str> = d.evidence.iter().map(|e| e.text.as_str()).collect();
    let mark = texts.iter().position(|t| {
        *t == "our idle timer (0.4 s) would have fired at 0.41 s, 0.60 s before the agent disconnected \
               (observed: not acted on)"
    });
    let gone = texts.iter().position(|t| t.starts_with("the agent disconnected after 1.01 s, 1.00 s after the last"));
    assert!(mark.is_some() && gone.is_some() && mark < gone, "in time order: {texts:#?}");
    assert_eq!(d.tunable.as_deref(), Some("STALLSCOPE_SSE_IDLE_TIMEOUT_S"));
    let suggestion = d.suggestion.as_deref().unwrap();
    assert!(suggestion.starts_with("the agent waited 0.60 s longer than our idle timer would have"), "{suggestion}");
    assert!(suggestion.contains("`stallscope whatif RUN --set SSE_IDLE_TIMEOUT_S=0.4`"), "{suggestion}");
    assert_eq!(d.basis.agent_disconnected_ms, Some(1010.0));
    assert_eq!(d.basis.timer, None, "our timer caught nothing: it only watched");
    let mark = d.basis.would_have_fired.unwrap();
    assert_eq!((mark.timer, mark.budget_ms, mark.after_ms), (TimerKind::Idle, 400.0, 410.0));
    assert_eq!(d.basis.idle_ms, Some(1000.0), "the silence the agent gave up on");
    let run = summarize(&[(3, d.clone()), (4, d)]);
    assert_eq!(
        run.groups[0].summary,
        "2 of 2 streams: cancelled, the agent disconnected from 2, our idle timer would have fired on 2"
    );
}

/// An agent that gave up before any timer of ours would have fired: the
/// silence it gave up on, and the idle timer just below it to try.
#[test]
fn an_agent_that_gave_up_first_is_told_what_would_have_caught_it() {
    let mut s = Script::new();
    s.observed(0).headers(10, 200).content(20, 2);
    s.at(30, EventKind::PhaseChanged { phase: AttemptPhase::Streaming });
    s.at(2030, EventKind::AgentDisconnected);
    s.at(2030, EventKind::AttemptEnded { end: AttemptEnd::Cancelled, stop_reason: None });
    s.finished(2030, Outcome::Cancelled);
    let d = s.diagnose();
    assert_eq!(
        d.summary,
        "cancelled: the agent disconnected after 2.03 s, while streaming, 2.00 s after the last sign of life (attempt 1)"
    );
    assert_eq!(d.basis.would_have_fired, None);
    let suggestion = d.suggestion.as_deref().unwrap();
    assert!(suggestion.starts_with("no timer of ours, under the tunables in force, would have fired"), "{suggestion}");
    assert!(suggestion.contains("`stallscope whatif RUN --set SSE_IDLE_TIMEOUT_S=1.9`"), "{suggestion}");
    // Going while the stream flowed is no silence of ours to tune.
    let mut s = Script::new();
    s.observed(0).headers(10, 200).content(20, 2);
    s.at(40, EventKind::AgentDisconnected);
    s.at(40, EventKind::AttemptEnded { end: AttemptEnd::Cancelled, stop_reason: None });
    s.finished(40, Outcome::Cancelled);
    let d = s.diagnose();
    assert_eq!((d.tunable, d.suggestion), (None, None));
}

/// A stream that went silent 45 s and then completed, where our idle
/// timer at 30 s would have fired: healthy but slow for that budget, not
/// a failure, in either order.
#[test]
fn a_healthy_stream_our_timer_would_have_cut_is_healthy_but_slow() {
    let mut s = Script::new();
    s.observed(0).headers(10, 200).content(20, 2).content(45_030, 3);
    s.at(45_060, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: None });
    s.finished(45_060, Outcome::Ok);
    s.would_fire(30_030, TimerKind::Idle, 30_000);
    let d = s.diagnose();
    assert_eq!(diagnose(&s.stored()), d);
    assert_eq!((d.kind, d.severity), (VerdictKind::HealthySlow, Severity::Notice), "{}", d.summary);
    assert_eq!(
        d.summary,
        "healthy but slow: completed in 45.1 s after a silence of 45.0 s; our idle timer (30 s) would have fired at 30.0 s"
    );
    assert!(
        d.evidence
            .iter()
            .any(|e| e.text == "our idle timer (30 s) would have fired at 30.0 s (observed: not acted on)"
                && e.at_ms == Some(30_030.0)),
        "{:#?}",
        d.evidence
    );
    assert_eq!(d.tunable.as_deref(), Some("STALLSCOPE_SSE_IDLE_TIMEOUT_S"));
    let suggestion = d.suggestion.as_deref().unwrap();
    assert!(suggestion.contains("raise STALLSCOPE_SSE_IDLE_TIMEOUT_S above 45.0 s"), "{suggestion}");
    assert!(suggestion.contains("`stallscope whatif RUN --set SSE_IDLE_TIMEOUT_S=47.3`"), "{suggestion}");
    assert_eq!(d.basis.timer, None);
    // Without the mark, the same stream is healthy: nothing was armed.
    s.events.retain(|e| !matches!(e.kind, EventKind::TimerWouldFire { .. }));
    assert_eq!(s.diagnose().kind, VerdictKind::Healthy);
}

/// A mark on an attempt that broke on its own keeps the break's verdict
/// and says where our timer would have been first.
#[test]
fn a_mark_on_a_cut_keeps_the_cut_and_adds_our_timer() {
    let mut s = Script::new();
    s.observed(0).headers(10, 200).content(20, 1);
    let closed = AttemptEnd::Transport { kind: TransportKind::Closed };
    s.at(60_020, EventKind::AttemptEnded { end: closed, stop_reason: None });
    s.finished(60_020, Outcome::Failed);
    s.would_fire(30_020, TimerKind::Idle, 30_000);
    let d = s.diagnose();
    assert_eq!(diagnose(&s.stored()), d);
    assert_eq!(d.kind, VerdictKind::IdleCut, "{}", d.summary);
    assert!(
        d.summary.contains(
            "60.0 s of silence, 60.0 s into the attempt; headers after 0.01 s (200), 1 chunk / 120 B, \
                            1 progress event; our idle timer (30 s) would have fired at 30.0 s; failed after 1 attempt"
        ),
        "{}",
        d.summary
    );
    assert!(d.evidence.iter().any(|e| e.text.starts_with("our idle timer (30 s) would have fired at 30.0 s")));
}
