//! Every built-in scenario through the real HTTP stack on loopback: the
//! simulator, reqwest, our SSE parser, each dialect, the governor and the
//! executor, with the scenarios' scaled-down timers (seconds, not minutes).

use std::sync::Arc;
use std::time::Duration;

use stallscope::core::category::{Category, TimerKind};
use stallscope::core::event::{EventKind, Outcome, VecSink};
use stallscope::core::executor::{Call, CallReport, Origin};
use stallscope::core::transport::ClientCache;
use stallscope::core::upstream::CallInput;
use stallscope::diagnosis::VerdictKind;
use stallscope::gui::live::{Choice, FIRST_RUN, RunForm};
use stallscope::providers::Dialect;
use stallscope::report::RunReport;
use stallscope::run::{executor, rig};
use stallscope::session::{RunSource, SessionPlan, run_session, settings_for};
use stallscope::sim::builtin;
use tokio_util::sync::CancellationToken;

/// What one call through a scenario produced.
struct Played {
    dialect: Dialect,
    report: CallReport,
    /// Every failure the executor classified, in order.
    classified: Vec<(Category, Option<TimerKind>, String)>,
}

async fn play(name: &str, dialect: Dialect, sets: &[&str]) -> Played {
    let rig = rig(builtin(name).unwrap(), dialect).await.unwrap();
    let overrides: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
    // A scenario reads no config file: a developer's own must not leak in.
    let source = RunSource::Scenario { name: name.to_owned(), dialect };
    let settings = settings_for(&source, &overrides, &[], &[]).unwrap();
    let sink = Arc::new(VecSink::new());
    let executor =
        executor(&settings, &rig.providers, &ClientCache::new(), sink.clone(), Origin::now(0), |_| None).unwrap();
    let call = Call {
        stream: 7,
        target: rig.target.clone(),
        input: CallInput { prompt: "Say hello.".into(), context_tokens: Some(3), ..CallInput::default() },
        not_before: None,
    };
    let report = executor.run(&call, &CancellationToken::new()).await;
    rig.server.shutdown().await;
    let classified = sink
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::ErrorClassified { category, timer, rule, .. } => Some((category, timer, rule)),
            _ => None,
        })
        .collect();
    Played { dialect, report, classified }
}

/// Plays a scenario in all three dialects at once.
async fn play_all(name: &str, sets: &[&str]) -> [Played; 3] {
    let (a, b, c) = tokio::join!(
        play(name, Dialect::OpenAiChat, sets),
        play(name, Dialect::OpenAiResponses, sets),
        play(name, Dialect::AnthropicMessages, sets)
    );
    [a, b, c]
}

fn categories(p: &Played) -> Vec<(Category, Option<TimerKind>)> {
    p.classified.iter().map(|(c, t, _)| (*c, *t)).collect()
}

fn tokens(n: usize) -> String {
    "tok ".repeat(n)
}

#[tokio::test]
async fn healthy() {
    for p in play_all("healthy", &[]).await {
        let r = &p.report;
        assert_eq!(
            (r.outcome, r.attempts, r.content.as_str()),
            (Outcome::Ok, 1, tokens(20).as_str()),
            "{:?}",
            p.dialect
        );
        assert!(r.error.is_none() && r.hops.is_empty() && r.backoff_sleeps.is_empty(), "{:?}", p.dialect);
        assert!(r.stop_reason.is_some(), "{:?}", p.dialect);
        assert!(r.ttfb.is_some() && r.bytes > 0 && r.events >= 23, "{:?}: {r:?}", p.dialect);
    }
}

#[tokio::test]
async fn slow_ttfb_is_abandoned_and_retried() {
    for p in play_all("slow-ttfb", &[]).await {
        assert_eq!((p.report.outcome, p.report.attempts), (Outcome::Ok, 2), "{:?}", p.dialect);
        assert_eq!(categories(&p), [(Category::Timeout, Some(TimerKind::Ttfb))], "{:?}", p.dialect);
    }
}

#[tokio::test]
async fn a_silent_stall_is_caught_by_the_idle_timer() {
    for p in play_all("silent-stall", &[]).await {
        assert_eq!((p.report.outcome, p.report.attempts), (Outcome::Ok, 2), "{:?}", p.dialect);
        assert_eq!(categories(&p), [(Category::Timeout, Some(TimerKind::Idle))], "{:?}", p.dialect);
        assert!(p.report.elapsed >= Duration::from_secs(1), "{:?}", p.dialect);
    }
}

/// A stall between a block's start and its first text is before content:
/// caught by the idle timer and retried, and the retry's whole answer is
/// the call's, in every dialect.
#[tokio::test]
async fn a_stall_after_a_block_start_is_retried_before_content() {
    for p in play_all("stall-after-block-start", &[]).await {
        let r = &p.report;
        assert_eq!(
            (r.outcome, r.attempts, r.content.as_str()),
            (Outcome::Ok, 2, tokens(20).as_str()),
            "{:?}",
            p.dialect
        );
        assert_eq!(categories(&p), [(Category::Timeout, Some(TimerKind::Idle))], "{:?}", p.dialect);
    }
}

/// Runs `plan` unrecorded: its report, and how many retries the fleet
/// budget refused.
async fn session(plan: &SessionPlan) -> (RunReport, usize) {
    let events = Arc::new(VecSink::new());
    let outcome = run_session(plan, &[], Some(events.clone()), &CancellationToken::new(), |_, _| {}).await.unwrap();
    let refused = events.kinds().iter().filter(|k| matches!(k, EventKind::RetryBudgetRefused { .. })).count();
    (outcome.report, refused)
}

fn scenario_plan(name: &str, calls: usize) -> SessionPlan {
    SessionPlan {
        source: RunSource::Scenario { name: name.to_owned(), dialect: Dialect::OpenAiChat },
        requests: calls,
        concurrency: calls,
        prompt: "Say hello.".to_owned(),
        overrides: Vec::new(),
        edits: Vec::new(),
        recording: None,
        seed: Some(7),
    }
}

/// The app's first run (its form's defaults on the first-run scenario):
/// every call's stall is caught and retried, and the fleet budget, which
/// governs the retries that load a provider, refuses none of a silent
/// path's.
#[tokio::test]
async fn the_first_run_recovers_every_stall_without_a_fleet_refusal() {
    let form = RunForm { choice: Choice::Scenario(FIRST_RUN.to_owned()), ..RunForm::default() };
    let plans = form.plans(None, Vec::new(), Vec::new(), None);
    let [(_, plan)] = plans.as_slice() else { panic!("one part: {plans:?}") };
    assert_eq!(plan.source, RunSource::Scenario { name: "silent-stall".to_owned(), dialect: Dialect::OpenAiChat });
    let (report, refused) = session(plan).await;
    assert_eq!((report.summary.ok, report.summary.failed, refused), (form.requests as usize, 0, 0));
    let verdicts = report.diagnosis.unwrap();
    assert!(verdicts.groups.iter().all(|g| g.kind != VerdictKind::RetryDenied), "{verdicts:?}");
}

/// A hundred calls stalling at once are a hundred retries at once, far
/// past the budget's share (20 of 100): each is still retried, as a path
/// that went silent says nothing about the provider's load.
#[tokio::test]
async fn a_mass_silent_stall_is_not_failed_by_the_fleet_budget() {
    let (report, refused) = session(&scenario_plan("silent-stall", 100)).await;
    assert_eq!((report.summary.ok, report.summary.failed, refused), (100, 0, 0));
}

/// Where the budget protects a provider: four calls refused with 429 at
/// once may not all retry (three may, the floor), so the fourth fails at
/// once instead of adding to the load of a provider asking for less.
#[tokio::test]
async fn a_429_storm_is_where_the_fleet_budget_refuses() {
    let (report, refused) = session(&scenario_plan("rate-limited-ms", 4)).await;
    assert_eq!((report.summary.ok, report.summary.failed, refused), (3, 1, 1));
    let denied = report.diagnosis.unwrap().groups.into_iter().find(|g| g.kind == VerdictKind::RetryDenied);
    assert!(denied.is_some_and(|g| g.summary.contains("fleet retry budget")));
}

#[tokio::test]
async fn a_ping_flood_is_caught_by_the_data_stall_timer_not_idle() {
    for p in play_all("ping-flood-stall", &[]).await {
        assert_eq!((p.report.outcome, p.report.attempts), (Outcome::Ok, 2), "{:?}", p.dialect);
        assert_eq!(categories(&p), [(Category::Timeout, Some(TimerKind::DataStall))], "{:?}", p.dialect);
        assert!(p.report.keepalives >= 3, "{:?}: {}", p.dialect, p.report.keepalives);
    }
}

#[tokio::test]
async fn a_drip_is_reassembled_without_a_retry() {
    for p in play_all("drip", &[]).await {
        let r = &p.report;
        assert_eq!(
            (r.outcome, r.attempts, r.content.as_str()),
            (Outcome::Ok, 1, tokens(5).as_str()),
            "{:?}",
            p.dialect
        );
        assert!(r.bytes > 100 && r.events > 5, "{:?}", p.dialect);
    }
}

#[tokio::test]
async fn a_crawl_is_caught_by_the_throughput_floor_and_its_text_kept() {
    for p in play_all("crawl", &[]).await {
        let r = &p.report;
        assert_eq!((r.outcome, r.attempts), (Outcome::Partial, 1), "{:?}: {r:?}", p.dialect);
        assert_eq!(categories(&p), [(Category::Timeout, Some(TimerKind::MinRate))], "{:?}", p.dialect);
        assert!(r.content.starts_with(&tokens(20)) && r.content.len() < tokens(32).len(), "{:?}", p.dialect);
    }
    // With the floor off the stream just crawls to its end.
    for p in play_all("crawl", &["SSE_MIN_RATE=0"]).await {
        let r = &p.report;
        assert_eq!(
            (r.outcome, r.attempts, r.content.as_str()),
            (Outcome::Ok, 1, tokens(32).as_str()),
            "{:?}",
            p.dialect
        );
        assert!(p.classified.is_empty(), "{:?}: {:?}", p.dialect, p.classified);
    }
}

/// Every dialect of `scenario` answers whole at once, after waiting at
/// least `waits`; with `sets` (a tighter timer, no retry, no fallback) the
/// same wait is taken for a stall that `timer` catches.
async fn a_wait_within_budget_then_a_stall_under(scenario: &str, waits: Duration, sets: &[&str], timer: TimerKind) {
    for p in play_all(scenario, &[]).await {
        let r = &p.report;
        assert_eq!(
            (r.outcome, r.attempts, r.content.as_str()),
            (Outcome::Ok, 1, tokens(20).as_str()),
            "{:?}",
            p.dialect
        );
        assert!(r.elapsed >= waits, "{:?}: {:?}", p.dialect, r.elapsed);
    }
    let p = play(scenario, Dialect::OpenAiChat, sets).await;
    assert_eq!((p.report.outcome, categories(&p)), (Outcome::Failed, vec![(Category::Timeout, Some(timer))]));
}

/// A buffering proxy delivers everything at once after 1.5 s; with less
/// patience than the proxy's delay, the wait looks like a stall.
#[tokio::test]
async fn a_buffering_proxy_delivers_everything_at_once() {
    let sets = ["SSE_TTFB_TIMEOUT_S=0.5", "RETRY_BUDGET_TIMEOUT=0", "FALLBACK_MODELS=off"];
    a_wait_within_budget_then_a_stall_under("proxy-buffered", Duration::from_millis(1500), &sets, TimerKind::Ttfb)
        .await;
}

#[tokio::test]
async fn a_reset_after_the_first_token_keeps_the_partial_text() {
    for p in play_all("reset-after-first-token", &[]).await {
        let r = &p.report;
        assert_eq!((r.outcome, r.attempts, r.content.as_str()), (Outcome::Partial, 1, "Hello"), "{:?}", p.dialect);
        assert_eq!(r.stop_reason.as_deref(), Some("length"), "{:?}", p.dialect);
        assert_eq!(r.error.as_ref().unwrap().category, Category::Connection, "{:?}", p.dialect);
    }
    let p = play("reset-after-first-token", Dialect::AnthropicMessages, &["PARTIAL_RECOVERY=0"]).await;
    assert_eq!((p.report.outcome, p.report.attempts, p.report.hops.len()), (Outcome::Failed, 1, 0));
}

/// A silent stall after content is caught by the idle timer and never
/// retried (the text would come twice), on any attempt: partial recovery
/// keeps the text; without it the call fails with the stall.
#[tokio::test]
async fn a_stall_after_content_is_never_retried() {
    for p in play_all("stall-after-content", &[]).await {
        let r = &p.report;
        assert_eq!(
            (r.outcome, r.attempts, r.content.as_str()),
            (Outcome::Partial, 1, tokens(5).as_str()),
            "{:?}",
            p.dialect
        );
        assert_eq!(r.stop_reason.as_deref(), Some("length"), "{:?}", p.dialect);
        assert_eq!(categories(&p), [(Category::Timeout, Some(TimerKind::Idle))], "{:?}", p.dialect);
    }
    let p = play("stall-after-content", Dialect::OpenAiResponses, &["PARTIAL_RECOVERY=0"]).await;
    assert_eq!((p.report.outcome, p.report.attempts, p.report.hops.len()), (Outcome::Failed, 1, 0));
    assert_eq!(p.report.content, tokens(5));
}

/// Retry-After is slept as asked (positive-only jitter adds at most 25 %),
/// and the server's numbers are reported beside the sleeps.
#[tokio::test]
async fn rate_limits_honour_each_retry_after_form() {
    for p in play_all("rate-limited-ms", &[]).await {
        let r = &p.report;
        assert_eq!((r.outcome, r.attempts), (Outcome::Ok, 3), "{:?}", p.dialect);
        assert_eq!(r.retry_after, [Some(Duration::from_millis(700)); 2], "{:?}", p.dialect);
        for sleep in &r.backoff_sleeps {
            assert!(*sleep >= Duration::from_millis(700) && *sleep <= Duration::from_millis(875), "{sleep:?}");
        }
        assert!(r.elapsed >= Duration::from_millis(1400), "{:?}", r.elapsed);
        assert_eq!(r.retry_counts[&Category::RateLimit].used, 2);
    }
    for p in play_all("rate-limited-seconds", &["RETRY_AFTER_JITTER=none"]).await {
        assert_eq!(p.report.backoff_sleeps, [Duration::from_secs(1)], "{:?}", p.dialect);
        assert_eq!(p.report.outcome, Outcome::Ok);
    }
    for p in play_all("rate-limited-date", &["RETRY_AFTER_JITTER=none"]).await {
        // An HTTP-date has whole seconds, so "2 s ahead" lands within a
        // second of that, as the simulator rounds it.
        let asked = p.report.retry_after[0].unwrap();
        assert!(asked > Duration::from_secs(1) && asked <= Duration::from_secs(3), "{asked:?}");
        assert_eq!((p.report.outcome, p.report.backoff_sleeps[0]), (Outcome::Ok, asked), "{:?}", p.dialect);
    }
}

#[tokio::test]
async fn a_wait_longer_than_the_cap_is_reported_not_slept() {
    let p = play("rate-limited-ms", Dialect::OpenAiChat, &["RETRY_AFTER_MAX_S=0.5", "FALLBACK_MODELS=off"]).await;
    let r = &p.report;
    assert_eq!((r.outcome, r.attempts), (Outcome::Failed, 1));
    assert_eq!(r.refused_wait, Some(Duration::from_millis(700)));
    assert!(r.backoff_sleeps.is_empty() && r.elapsed < Duration::from_millis(700), "{:?}", r.elapsed);
    // With the default chain, the refused wait moves the call to the next model.
    let p = play("rate-limited-ms", Dialect::OpenAiChat, &["RETRY_AFTER_MAX_S=0.5"]).await;
    assert_eq!(p.report.hops.len(), 2, "{:?}", p.report.hops);
    assert_eq!(p.report.hops[0].to.to_string(), "sim/sim-model-b");
    assert_eq!(p.report.outcome, Outcome::Ok);
}

#[tokio::test]
async fn overload_in_stream_then_529_then_healthy() {
    for p in play_all("overloaded-in-stream", &[]).await {
        let r = &p.report;
        assert_eq!((r.outcome, r.attempts), (Outcome::Ok, 3), "{:?}", p.dialect);
        assert_eq!(categories(&p), [(Category::Overloaded, None); 2], "{:?}", p.dialect);
        assert_eq!(r.retry_after, [None, Some(Duration::from_millis(300))], "{:?}", p.dialect);
    }
}

#[tokio::test]
async fn a_server_error_backs_off_and_recovers() {
    for p in play_all("server-error-then-ok", &["BACKOFF_JITTER=none"]).await {
        let r = &p.report;
        assert_eq!((r.outcome, r.attempts), (Outcome::Ok, 2), "{:?}", p.dialect);
        assert_eq!(categories(&p), [(Category::ServerError, None)], "{:?}", p.dialect);
        assert_eq!(r.backoff_sleeps, [Duration::from_millis(50)], "{:?}", p.dialect);
        assert_eq!(r.retry_after, [None]);
    }
}

#[tokio::test]
async fn a_dead_primary_fails_over_before_any_content() {
    for p in play_all("dead-primary", &[]).await {
        let r = &p.report;
        assert_eq!((r.outcome, r.attempts), (Outcome::Ok, 3), "{:?}", p.dialect);
        assert_eq!(r.hops.len(), 1);
        assert_eq!(
            (r.hops[0].from.to_string(), r.hops[0].to.to_string()),
            ("unreachable/sim-model-a".into(), "sim/sim-model-a".into())
        );
        assert_eq!(r.hops[0].reason, Category::Connection);
        assert!(
            p.classified.iter().all(|(c, _, rule)| *c == Category::Connection && rule == "builtin: connection refused")
        );
    }
}

#[tokio::test]
async fn permanent_refusals_fail_fast() {
    for (name, category) in [("auth-expired", Category::Auth), ("context-overflow", Category::InvalidRequest)] {
        for p in play_all(name, &[]).await {
            let r = &p.report;
            assert_eq!((r.outcome, r.attempts), (Outcome::Failed, 1), "{name} {:?}", p.dialect);
            let error = r.error.as_ref().unwrap();
            assert_eq!(
                (error.category, error.status, error.retryable),
                (category, Some(if category == Category::Auth { 401 } else { 400 }), false)
            );
        }
    }
}

#[tokio::test]
async fn malformed_streams_end_in_a_classified_error_never_a_hang() {
    for p in play_all("malformed-sse", &[]).await {
        let r = &p.report;
        // Two server-error retries, then a hop to each of the other two models.
        assert_eq!((r.outcome, r.attempts, r.hops.len()), (Outcome::Failed, 5, 2), "{:?}", p.dialect);
        let error = r.error.as_ref().unwrap();
        assert_eq!((error.category, error.rule.as_str()), (Category::ServerError, "builtin: malformed stream"));
        assert!(error.message.contains("UTF-8"), "{}", error.message);
    }
    for p in play_all("malformed-long-line", &[]).await {
        assert_eq!((p.report.outcome, p.report.attempts), (Outcome::Ok, 2), "{:?}", p.dialect);
        assert!(p.classified[0].2 == "builtin: malformed stream", "{:?}", p.classified);
    }
    for p in play_all("malformed-missing-data", &[]).await {
        assert_eq!((p.report.outcome, p.report.content.as_str()), (Outcome::Ok, tokens(6).as_str()), "{:?}", p.dialect);
    }
}

/// A break before content is a failure, not an answer, and nothing had
/// streamed, so the call retries and the retry is healthy: a clean end of
/// the body with no terminal event (`closed-early`), and a hop that closes
/// a quiet stream (`idle-cut`'s nginx, after 1.5 s of silence: the hop's
/// timer, not our idle timer's 5 s, which never fires).
#[tokio::test]
async fn a_break_before_content_is_retried() {
    for name in ["closed-early", "idle-cut"] {
        for p in play_all(name, &[]).await {
            let r = &p.report;
            assert_eq!(
                (r.outcome, r.attempts, r.content.as_str()),
                (Outcome::Ok, 2, tokens(20).as_str()),
                "{name} {:?}",
                p.dialect
            );
            assert_eq!(p.classified.len(), 1, "{name} {:?}", p.dialect);
            assert_eq!(
                (p.classified[0].0, p.classified[0].1, p.classified[0].2.as_str()),
                (Category::Connection, None, "builtin: stream closed before completion"),
                "{name} {:?}",
                p.dialect
            );
        }
    }
}

/// A silent think inside the idle budget succeeds at once; the same
/// silence under a tighter idle timer is taken for a stall.
#[tokio::test]
async fn a_silent_think_within_the_idle_budget_is_not_a_stall() {
    let sets = ["SSE_IDLE_TIMEOUT_S=0.6", "RETRY_BUDGET_TIMEOUT=0", "FALLBACK_MODELS=off"];
    a_wait_within_budget_then_a_stall_under("slow-first-token", Duration::from_millis(1200), &sets, TimerKind::Idle)
        .await;
}

#[test]
fn every_builtin_scenario_is_tested_here() {
    let source = include_str!("scenarios.rs");
    for name in stallscope::sim::builtin_names() {
        assert!(source.contains(&format!("\"{name}\"")), "scenario {name} has no test");
    }
}
