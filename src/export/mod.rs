//! Recorded events in the formats other tools read: JSON lines (one event
//! per line), the Chrome trace-event format that Perfetto and
//! chrome://tracing open, and OpenTelemetry traces sent over OTLP
//! ([`otlp`]).
//!
//! In a trace each stream is its own process track: attempts and backoff
//! sleeps are spans, timers firing, attempt ends and failover hops are
//! instant events, as are, on an observed call, the agent disconnecting
//! and where our timers would have fired ("would fire: idle"), and the
//! stream's cumulative bytes are a counter. The stream's verdict
//! ([`crate::diagnosis`]) labels its track and is an instant annotation at
//! its last event, carrying the whole diagnosis.
//!
//! In JSON lines, every stream's verdict follows the events, one line each
//! (`{"stream": N, "diagnosis": {…}}`), and the run's verdicts grouped by
//! kind close the file (`{"run_diagnosis": {…}}`): a line is an event when
//! it has a `kind`.
//!
//! Recorded bodies are exported only on request: they are large, and a
//! trace or an event log is usually shared without them.

pub mod otlp;

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::core::event::{Event, EventKind, StreamId};
use crate::diagnosis::{Diagnosis, summarize};
use crate::store::{RunId, Store, StoreError};

/// One JSON object per line: the events (recorded bodies only when
/// `bodies`), then each stream's verdict, then the run's.
pub fn jsonl(events: &[Event], bodies: bool, diagnoses: &[(StreamId, Diagnosis)]) -> Result<String, serde_json::Error> {
    let mut out = String::new();
    for event in events.iter().filter(|e| bodies || !matches!(e.kind, EventKind::BodyRecorded { .. })) {
        out.push_str(&serde_json::to_string(event)?);
        out.push('\n');
    }
    for (stream, diagnosis) in diagnoses {
        out.push_str(&serde_json::to_string(&json!({"stream": stream, "diagnosis": diagnosis}))?);
        out.push('\n');
    }
    if !diagnoses.is_empty() {
        out.push_str(&serde_json::to_string(&json!({"run_diagnosis": summarize(diagnoses)}))?);
        out.push('\n');
    }
    Ok(out)
}

/// The Chrome trace of stored run `id`, every stream with its verdict
/// (what `stallscope export` writes and the app's History exports).
pub fn run_trace(store: &Store, id: RunId) -> Result<Value, StoreError> {
    let recorded = store.recorded_run(id)?;
    let streams = store
        .streams(id)?
        .into_iter()
        .map(|s| Ok((s, store.events(id, s)?)))
        .collect::<Result<Vec<_>, StoreError>>()?;
    let diagnoses: Vec<_> = streams.iter().map(|(s, events)| (*s, recorded.diagnose(*s, events))).collect();
    Ok(chrome_trace(&streams, &diagnoses))
}

/// A Chrome trace of the streams' events (each in time order, or as sent:
/// observe's would-fire marks after their call's end), with each stream's
/// verdict from `diagnoses` where it has one.
pub fn chrome_trace(streams: &[(StreamId, Vec<Event>)], diagnoses: &[(StreamId, Diagnosis)]) -> Value {
    let verdicts: HashMap<StreamId, &Diagnosis> = diagnoses.iter().map(|(stream, d)| (*stream, d)).collect();
    let mut trace = Vec::new();
    for (stream, events) in streams {
        // Process ids must be positive; stream ids start at 0.
        let pid = stream + 1;
        let verdict = verdicts.get(stream).copied();
        trace.push(json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": format!("stream {stream}")}}));
        trace.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "attempts"}}));
        if let Some(d) = verdict {
            let label =
                if d.trusted { d.kind.name().to_owned() } else { format!("{} (not trustworthy)", d.kind.name()) };
            trace.push(json!({"name": "process_labels", "ph": "M", "pid": pid, "tid": 1, "args": {"labels": label}}));
        }
        let mut bytes: u64 = 0;
        let mut open_attempt: Option<(u32, f64, String)> = None;
        let close = |trace: &mut Vec<Value>, open: &mut Option<(u32, f64, String)>, end: f64| {
            if let Some((attempt, start, target)) = open.take() {
                trace.push(json!({
                    "name": format!("attempt {attempt}"), "cat": "attempt", "ph": "X", "pid": pid, "tid": 1,
                    "ts": start, "dur": (end - start).max(0.0), "args": {"target": target},
                }));
            }
        };
        for event in events {
            let ts = event.at.as_secs_f64() * 1e6;
            match &event.kind {
                EventKind::AttemptStarted { target, .. } => {
                    close(&mut trace, &mut open_attempt, ts);
                    open_attempt = Some((event.attempt, ts, target.to_string()));
                }
                EventKind::BackoffScheduled { sleep, category, reason, .. } => {
                    close(&mut trace, &mut open_attempt, ts);
                    trace.push(json!({
                        "name": "backoff", "cat": "backoff", "ph": "X", "pid": pid, "tid": 1, "ts": ts,
                        "dur": sleep.as_secs_f64() * 1e6, "args": {"category": category, "reason": reason},
                    }));
                }
                EventKind::Finished { outcome, .. } => {
                    close(&mut trace, &mut open_attempt, ts);
                    trace.push(instant(pid, ts, &format!("finished: {}", outcome.name()), json!({})));
                }
                EventKind::AttemptEnded { end, stop_reason } => {
                    close(&mut trace, &mut open_attempt, ts);
                    // `how` and what goes with it (kind, timer, status, code).
                    let mut args = serde_json::to_value(end).unwrap_or_else(|_| json!({}));
                    if let (Some(reason), Some(args)) = (stop_reason, args.as_object_mut()) {
                        args.insert("stop_reason".to_owned(), json!(reason));
                    }
                    trace.push(instant(pid, ts, &format!("attempt {} ended: {end}", event.attempt), args));
                }
                EventKind::TimerFired { timer, after, .. } => {
                    let args = json!({"after_ms": after.as_secs_f64() * 1e3});
                    trace.push(instant(pid, ts, &format!("{timer} timer fired"), args));
                }
                EventKind::TimerHeld { timer, after, lag } => {
                    let args = json!({"after_ms": after.as_secs_f64() * 1e3, "lag_ms": lag.as_secs_f64() * 1e3});
                    trace.push(instant(pid, ts, &format!("{timer} timer held: client late"), args));
                }
                EventKind::TimerWouldFire { timer, after } => {
                    let args = json!({"after_ms": after.as_secs_f64() * 1e3, "attempt": event.attempt});
                    trace.push(instant(pid, ts, &format!("would fire: {timer}"), args));
                }
                EventKind::AgentDisconnected => {
                    trace.push(instant(pid, ts, "agent disconnected", json!({"attempt": event.attempt})));
                }
                EventKind::FailedOver { from, to, reason } => {
                    let args = json!({"from": from.to_string(), "to": to.to_string(), "reason": reason});
                    trace.push(instant(pid, ts, "failover", args));
                }
                EventKind::ErrorClassified { category, rule, .. } => {
                    trace.push(instant(pid, ts, &format!("error: {category}"), json!({"rule": rule})));
                }
                EventKind::ChunkReceived { bytes: n } => {
                    bytes += *n as u64;
                    trace.push(json!({"name": "bytes", "ph": "C", "pid": pid, "ts": ts, "args": {"bytes": bytes}}));
                }
                _ => {}
            }
        }
        if let Some(last) = events.iter().map(|e| e.at).max() {
            let ts = last.as_secs_f64() * 1e6;
            close(&mut trace, &mut open_attempt, ts);
            if let Some(d) = verdict {
                let args = serde_json::to_value(d).unwrap_or_else(|_| json!({}));
                trace.push(instant(pid, ts, &format!("verdict: {}", d.summary), args));
            }
        }
    }
    json!({ "traceEvents": trace, "displayTimeUnit": "ms" })
}

fn instant(pid: u64, ts: f64, name: &str, args: Value) -> Value {
    json!({"name": name, "ph": "i", "s": "t", "pid": pid, "tid": 1, "ts": ts, "args": args})
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::category::{Category, TimerKind};
    use crate::core::event::{AttemptEnd, Outcome, RecordedBody, SleepReason};
    use crate::core::failover::Target;
    use crate::core::failure::TransportKind;
    use crate::diagnosis::fixtures::{agent_gone_on_a_silent_stall, held_on_a_late_runtime, stored};

    fn at(ms: u64, attempt: u32, kind: EventKind) -> Event {
        Event { at: Duration::from_millis(ms), stream: 0, attempt, kind }
    }

    #[test]
    fn a_trace_has_spans_instants_and_a_byte_counter_per_stream() {
        let target = Target::new("p", "m");
        let events = vec![
            at(0, 1, EventKind::AttemptStarted { target: target.clone(), credential: None }),
            at(5, 1, EventKind::ChunkReceived { bytes: 10 }),
            at(1000, 1, EventKind::TimerFired { timer: TimerKind::Idle, after: Duration::from_secs(1), lag: None }),
            at(
                1000,
                1,
                EventKind::BackoffScheduled {
                    retry: 1,
                    category: Category::Timeout,
                    nominal: Duration::from_millis(50),
                    sleep: Duration::from_millis(50),
                    reason: SleepReason::Backoff,
                },
            ),
            at(1050, 2, EventKind::AttemptStarted { target: target.clone(), credential: None }),
            at(1060, 2, EventKind::ChunkReceived { bytes: 5 }),
            at(1100, 2, EventKind::Finished { outcome: Outcome::Ok, attempts: 2, stop_reason: None }),
        ];
        let trace = chrome_trace(&[(0, events.clone())], &[]);
        let items = trace["traceEvents"].as_array().unwrap();
        let spans: Vec<(&str, f64, f64)> = items
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| (e["name"].as_str().unwrap(), e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect();
        assert_eq!(
            spans,
            [("attempt 1", 0.0, 1_000_000.0), ("backoff", 1_000_000.0, 50_000.0), ("attempt 2", 1_050_000.0, 50_000.0)]
        );
        let counters: Vec<u64> =
            items.iter().filter(|e| e["ph"] == "C").map(|e| e["args"]["bytes"].as_u64().unwrap()).collect();
        assert_eq!(counters, [10, 15]);
        assert!(items.iter().any(|e| e["ph"] == "i" && e["name"] == "idle timer fired"));
        assert!(items.iter().all(|e| e["pid"] == 1));

        let lines = jsonl(&events, false, &[]).unwrap();
        assert_eq!(lines.lines().count(), events.len());
        let back: Event = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
        assert_eq!(back, events[0]);
    }

    #[test]
    fn an_attempt_ends_at_its_attempt_ended_event_with_how_it_ended() {
        let target = Target::new("p", "m");
        let events = vec![
            at(0, 1, EventKind::AttemptStarted { target: target.clone(), credential: None }),
            at(
                300,
                1,
                EventKind::AttemptEnded {
                    end: AttemptEnd::Transport { kind: TransportKind::Reset },
                    stop_reason: None,
                },
            ),
            at(400, 2, EventKind::AttemptStarted { target, credential: None }),
            at(900, 2, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: Some("stop".into()) }),
            at(950, 2, EventKind::Finished { outcome: Outcome::Ok, attempts: 2, stop_reason: None }),
        ];
        let trace = chrome_trace(&[(0, events)], &[]);
        let items = trace["traceEvents"].as_array().unwrap();
        let spans: Vec<(f64, f64)> = items
            .iter()
            .filter(|e| e["cat"] == "attempt")
            .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect();
        assert_eq!(spans, [(0.0, 300_000.0), (400_000.0, 500_000.0)]);
        let ends: Vec<(&str, &Value)> = items
            .iter()
            .filter(|e| e["ph"] == "i" && e["name"].as_str().unwrap().contains("ended"))
            .map(|e| (e["name"].as_str().unwrap(), &e["args"]))
            .collect();
        assert_eq!(
            ends,
            [
                ("attempt 1 ended: connection reset", &json!({"how": "transport", "kind": "reset"})),
                ("attempt 2 ended: done", &json!({"how": "done", "stop_reason": "stop"})),
            ]
        );
    }

    /// An observed agent that gave up, with our timer's mark after the
    /// call's end as observe sends it, or in its time place as stored: each
    /// is an instant of its own in the trace and a line in JSON lines.
    #[test]
    fn an_observed_call_s_marks_are_instants_and_lines_in_either_order() {
        let sent = agent_gone_on_a_silent_stall(0);
        for events in [stored(&sent), sent] {
            let diagnoses = [(0, crate::diagnosis::diagnose(&events))];
            let trace = chrome_trace(&[(0, events.clone())], &diagnoses);
            let items = trace["traceEvents"].as_array().unwrap();
            let instant = |name: &str| items.iter().find(|e| e["ph"] == "i" && e["name"] == name).unwrap();
            // Microseconds, to the nearest.
            let us = |e: &Value, key: &str| e[key].as_f64().unwrap().round();
            let would = instant("would fire: idle");
            assert_eq!((us(would, "ts"), would["args"]["after_ms"].as_f64()), (410_000.0, Some(400.0)));
            assert_eq!(us(instant("agent disconnected"), "ts"), 1_010_000.0);
            let verdict = items.iter().find(|e| e["name"].as_str().unwrap().starts_with("verdict: ")).unwrap();
            assert_eq!(us(verdict, "ts"), 1_011_000.0, "at the call's end, whatever the order");
            assert!(verdict["name"].as_str().unwrap().contains("the agent disconnected after 1.01 s"), "{verdict}");
            let spans: Vec<f64> = items.iter().filter(|e| e["cat"] == "attempt").map(|e| us(e, "dur")).collect();
            assert_eq!(spans, [1_011_000.0]);

            let lines: Vec<Value> =
                jsonl(&events, false, &[]).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            let kinds: Vec<&str> = lines.iter().filter_map(|l| l["kind"]["type"].as_str()).collect();
            assert!(kinds.contains(&"agent_disconnected") && kinds.contains(&"timer_would_fire"), "{lines:?}");
        }
    }

    /// A timer held for our own lateness is an instant of its own, with
    /// its lag, and a line in JSON lines.
    #[test]
    fn a_held_timer_is_an_instant_with_its_lag() {
        let events = held_on_a_late_runtime(0);
        let trace = chrome_trace(&[(0, events.clone())], &[]);
        let items = trace["traceEvents"].as_array().unwrap();
        let held = items.iter().find(|e| e["ph"] == "i" && e["name"] == "idle timer held: client late").unwrap();
        assert_eq!(held["ts"].as_f64().map(f64::round), Some(1_350_000.0));
        assert_eq!((held["args"]["after_ms"].as_f64(), held["args"]["lag_ms"].as_f64()), (Some(1000.0), Some(350.0)));
        assert!(!items.iter().any(|e| e["name"] == "idle timer fired"), "held, not fired");
        let lines = jsonl(&events, false, &[]).unwrap();
        assert!(lines.contains(r#""type":"timer_held""#), "{lines}");
    }

    #[test]
    fn bodies_are_exported_only_on_request() {
        let body = RecordedBody::Raw { bytes: b"data: {}\n\n".to_vec(), truncated: false };
        let events = vec![
            at(1, 1, EventKind::ChunkReceived { bytes: 10 }),
            at(2, 1, EventKind::BodyRecorded { body: body.clone() }),
        ];
        assert_eq!(jsonl(&events, false, &[]).unwrap().lines().count(), 1);
        let with = jsonl(&events, true, &[]).unwrap();
        let back: Vec<Event> = with.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(back, events);
        let trace = chrome_trace(&[(0, events)], &[]).to_string();
        assert!(!trace.contains("body"), "{trace}");
    }

    /// A stream's verdict labels its track and is an instant at its last
    /// event carrying the whole diagnosis; in JSON lines it follows the
    /// events, then the run's verdicts.
    #[test]
    fn verdicts_annotate_the_trace_and_follow_the_events() {
        let target = Target::new("p", "m");
        let events = vec![
            at(0, 0, EventKind::CallStarted { target: target.clone(), context_tokens: None }),
            at(0, 1, EventKind::AttemptStarted { target, credential: None }),
            at(
                2,
                1,
                EventKind::AttemptEnded {
                    end: AttemptEnd::Transport { kind: TransportKind::Refused },
                    stop_reason: None,
                },
            ),
            at(3, 1, EventKind::Finished { outcome: Outcome::Failed, attempts: 1, stop_reason: None }),
        ];
        let diagnoses = [(0, crate::diagnosis::diagnose(&events))];
        let trace = chrome_trace(&[(0, events.clone())], &diagnoses);
        let items = trace["traceEvents"].as_array().unwrap();
        let labels = items.iter().find(|e| e["name"] == "process_labels").unwrap();
        assert_eq!(labels["args"]["labels"], "refused");
        let verdict = items.iter().find(|e| e["name"].as_str().unwrap().starts_with("verdict: ")).unwrap();
        assert_eq!((verdict["ph"].as_str(), verdict["ts"].as_f64()), (Some("i"), Some(3000.0)));
        assert_eq!(
            (verdict["args"]["kind"].as_str(), verdict["args"]["severity"].as_str()),
            (Some("refused"), Some("failed"))
        );

        let lines: Vec<Value> =
            jsonl(&events, false, &diagnoses).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), events.len() + 2);
        assert!(lines[..events.len()].iter().all(|l| l.get("kind").is_some()));
        assert_eq!((&lines[4]["stream"], &lines[4]["diagnosis"]["kind"]), (&json!(0), &json!("refused")));
        assert_eq!(lines[5]["run_diagnosis"]["groups"][0]["summary"], "1 of 1 streams: connection refused (1 failed)");
    }
}
