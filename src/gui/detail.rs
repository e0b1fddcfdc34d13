//! The detail panel of the lane selected on the timeline (Perfetto's
//! selection panel, DevTools' Timing tab): what the stream was, its
//! verdict with the evidence and what to try, each attempt's response
//! (status, headers, error body), the timers in force for it and how it
//! ended, the stream's whole log with times, and copy buttons for the log
//! as text, the stream as JSON and the suggested `--set` lines.
//!
//! Everything here is read from the lane's [log](Lane::log), which the
//! timeline model keeps for live, stored, replayed and what-if lanes alike,
//! so the panel has one source whatever the lane came from.

use std::time::Duration;

use egui::{RichText, Ui};
use serde_json::{Value, json};

use super::lanes::{Lane, LogEntry, Logged, Timeline};
use super::verdicts;
use crate::core::category::TimerKind;
use crate::core::event::EventKind;
use crate::core::lag::lag_untrusts;

/// One attempt as the panel shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptDetail {
    /// Its number within the call, from 1.
    pub number: u32,
    /// `provider/model`.
    pub target: String,
    /// The pool key's index, when a pool was used.
    pub credential: Option<usize>,
    /// When it started.
    pub started_s: Option<f64>,
    /// The response's status, once headers came.
    pub status: Option<u16>,
    /// The response's content type.
    pub content_type: Option<String>,
    /// The recorded response headers.
    pub headers: Vec<(String, String)>,
    /// The start of an error body, and whether it was cut.
    pub error_body: Option<(String, bool)>,
    /// The timers in force for it, in the order they were set.
    pub timers: Vec<TimerSetting>,
    /// How it ended, and when.
    pub end: Option<(f64, String)>,
    /// The failure as classified.
    pub error: Option<String>,
    /// Body bytes received.
    pub bytes: u64,
}

/// One timer as set for an attempt (or, for the deadline, the call).
#[derive(Debug, Clone, PartialEq)]
pub struct TimerSetting {
    /// Which timer.
    pub timer: TimerKind,
    /// Its budget, when armed (the throughput floor's: its window).
    pub budget: Option<Duration>,
    /// The throughput floor, in progress events a second.
    pub floor: Option<f64>,
    /// Why it was off, when disarmed.
    pub disarmed: Option<String>,
    /// When it fired, if it did.
    pub fired_s: Option<f64>,
    /// Where it would have fired, on an attempt observe relayed without
    /// acting (its clocks off).
    pub would_fire_s: Option<f64>,
    /// How late our own runtime ran when it fired, if measured.
    pub lag: Option<Duration>,
    /// Where it came due while our own runtime was late and was held (not
    /// acted on, guard mode), with how late.
    pub held: Vec<(f64, Duration)>,
}

impl TimerSetting {
    /// Whether it fired while our own runtime lagged a meaningful share of
    /// its budget (the verdict then says more about the client than the
    /// network).
    pub fn untrusted(&self) -> bool {
        match (self.fired_s, self.budget, self.lag) {
            (Some(_), Some(budget), Some(lag)) => lag_untrusts(budget, lag),
            _ => false,
        }
    }

    /// `idle 1.000 s, fired at 2.100 s` / `ttfb off: large context` /
    /// `min_rate 5/s over 1.000 s`.
    pub fn describe(&self) -> String {
        let mut text = match (&self.disarmed, self.budget) {
            (Some(reason), _) => format!("{} off: {reason}", self.timer),
            (None, Some(budget)) => match self.floor {
                Some(floor) => format!("{} {floor}/s over {:.3} s", self.timer, budget.as_secs_f64()),
                None => format!("{} {:.3} s", self.timer, budget.as_secs_f64()),
            },
            (None, None) => self.timer.to_string(),
        };
        for (at, lag) in &self.held {
            let ms = lag.as_secs_f64() * 1000.0;
            text.push_str(&format!(
                ", held at {at:.3} s (our runtime {ms:.0} ms late: client overloaded, not acted on)"
            ));
        }
        if let Some(at) = self.fired_s {
            text.push_str(&format!(", FIRED at {at:.3} s"));
        }
        if let Some(at) = self.would_fire_s {
            text.push_str(&format!(", would have fired at {at:.3} s (observed: not acted on)"));
        }
        if let Some(lag) = self.lag.filter(|_| self.untrusted()) {
            let ms = lag.as_secs_f64() * 1000.0;
            text.push_str(&format!(" while our runtime lagged {ms:.0} ms: client overloaded, not trustworthy"));
        }
        text
    }
}

/// What the panel reads out of a lane's log: the call's own timers (the
/// deadline) and each attempt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamDetail {
    /// Timers of the call as a whole.
    pub call_timers: Vec<TimerSetting>,
    /// The attempts, in order.
    pub attempts: Vec<AttemptDetail>,
}

impl StreamDetail {
    /// Reads `lane`'s log.
    pub fn of(lane: &Lane) -> Self {
        let mut detail = StreamDetail::default();
        for entry in &lane.log {
            detail.take(entry);
        }
        detail
    }

    fn take(&mut self, entry: &LogEntry) {
        let at = entry.at_s;
        let timers = if entry.attempt == 0 {
            &mut self.call_timers
        } else {
            let i = match self.attempts.iter().position(|a| a.number == entry.attempt) {
                Some(i) => i,
                None => {
                    self.attempts.push(AttemptDetail { number: entry.attempt, ..AttemptDetail::default() });
                    self.attempts.len() - 1
                }
            };
            let attempt = &mut self.attempts[i];
            match &entry.what {
                Logged::Data(run) => attempt.bytes += run.bytes,
                Logged::Event(EventKind::AttemptStarted { target, credential }) => {
                    (attempt.target, attempt.credential, attempt.started_s) =
                        (target.to_string(), *credential, Some(at));
                }
                Logged::Event(EventKind::HeadersReceived { status, content_type }) => {
                    (attempt.status, attempt.content_type) = (Some(*status), content_type.clone());
                }
                Logged::Event(EventKind::ResponseHeaders { headers }) => attempt.headers.clone_from(headers),
                Logged::Event(EventKind::ErrorBody { body, truncated }) => {
                    attempt.error_body = Some((body.clone(), *truncated));
                }
                Logged::Event(EventKind::AttemptEnded { end, stop_reason }) => {
                    let stop = stop_reason.as_deref().map(|s| format!(", stop reason {s}")).unwrap_or_default();
                    attempt.end = Some((at, format!("{end}{stop}")));
                }
                Logged::Event(EventKind::ErrorClassified { category, timer, rule, retryable, .. }) => {
                    let timer = timer.map(|t| format!("/{t}")).unwrap_or_default();
                    let retry = if *retryable { "retryable" } else { "final" };
                    attempt.error = Some(format!("{category}{timer} ({retry}; rule {rule})"));
                }
                _ => {}
            }
            &mut attempt.timers
        };
        let Logged::Event(kind) = &entry.what else { return };
        match kind {
            EventKind::TimerArmed { timer, after, floor } => {
                let armed = setting(timers, *timer, true);
                (armed.budget, armed.floor, armed.disarmed) = (Some(*after), *floor, None);
            }
            EventKind::TimerDisarmed { timer, reason } => {
                setting(timers, *timer, false).disarmed = Some(reason.clone())
            }
            EventKind::TimerFired { timer, after, lag } => {
                let fired = setting(timers, *timer, false);
                fired.budget = fired.budget.or(Some(*after));
                (fired.fired_s, fired.lag) = (Some(at), *lag);
            }
            EventKind::TimerWouldFire { timer, after } => {
                let would = setting(timers, *timer, false);
                (would.budget, would.would_fire_s) = (would.budget.or(Some(*after)), Some(at));
            }
            EventKind::TimerHeld { timer, after, lag } => {
                let held = setting(timers, *timer, false);
                held.budget = held.budget.or(Some(*after));
                held.held.push((at, *lag));
            }
            _ => {}
        }
    }
}

/// The latest setting of `timer`, or a new one; `arming` starts a new one
/// after the latest fired (a timer armed again is a new run of it).
fn setting(timers: &mut Vec<TimerSetting>, timer: TimerKind, arming: bool) -> &mut TimerSetting {
    let latest = timers.iter().rposition(|t| t.timer == timer).filter(|&i| !(arming && timers[i].fired_s.is_some()));
    let i = latest.unwrap_or_else(|| {
        timers.push(TimerSetting {
            timer,
            budget: None,
            floor: None,
            disarmed: None,
            fired_s: None,
            would_fire_s: None,
            lag: None,
            held: Vec::new(),
        });
        timers.len() - 1
    });
    &mut timers[i]
}

/// The lane's title: `silent-stall #3`.
pub fn title(timeline: &Timeline, lane: &Lane) -> String {
    format!("{} #{}", timeline.label(lane), lane.stream)
}

/// One log line: `  1.100 s  #1  idle timer FIRED after 1.000 s`.
pub fn log_line(entry: &LogEntry) -> String {
    let attempt = if entry.attempt == 0 { "call".to_owned() } else { format!("#{}", entry.attempt) };
    format!("{:>9.3} s  {attempt:<4}  {}", entry.at_s, entry.text())
}

/// The lane's log as text (what **Copy log** copies): a title line, the
/// verdict's summary when there is one, then one line per entry.
pub fn log_text(timeline: &Timeline, lane: &Lane) -> String {
    let mut text = format!(
        "{} → {}: {} after {} attempt(s)\n",
        title(timeline, lane),
        lane.target,
        timeline.outcome_name(lane),
        lane.attempt_count
    );
    if let Some(verdict) = timeline.verdict(lane) {
        text.push_str(&format!("verdict: {}: {}\n", verdict.kind, verdict.summary));
    }
    for entry in &lane.log {
        text.push_str(&log_line(entry));
        text.push('\n');
    }
    text
}

/// The stream as JSON (what **Copy JSON** copies): what it was, its
/// verdict (`diagnosis`, as in `run --json`), each attempt and its timers,
/// and its log, each event in the shape the recording and `export --format
/// jsonl` give it, runs of data folded.
pub fn stream_json(timeline: &Timeline, lane: &Lane) -> Value {
    let detail = StreamDetail::of(lane);
    let timer = |t: &TimerSetting| {
        json!({
            "timer": t.timer.name(),
            "budget_s": t.budget.map(|b| b.as_secs_f64()),
            "floor_per_s": t.floor,
            "disarmed": t.disarmed,
            "fired_at_s": t.fired_s,
            "would_fire_at_s": t.would_fire_s,
            "held": t.held.iter().map(|(at, lag)| json!({"at_s": at, "lag_s": lag.as_secs_f64()})).collect::<Vec<_>>(),
            "lag_s": t.lag.map(|l| l.as_secs_f64()),
            "trusted": !t.untrusted(),
        })
    };
    let attempts: Vec<Value> = detail
        .attempts
        .iter()
        .map(|a| {
            json!({
                "attempt": a.number,
                "target": a.target,
                "credential": a.credential,
                "started_s": a.started_s,
                "status": a.status,
                "content_type": a.content_type,
                "headers": a.headers.iter().map(|(n, v)| json!([n, v])).collect::<Vec<_>>(),
                "error_body": a.error_body.as_ref().map(|(body, _)| body),
                "error_body_truncated": a.error_body.as_ref().map(|(_, cut)| cut),
                "timers": a.timers.iter().map(timer).collect::<Vec<_>>(),
                "end": a.end.as_ref().map(|(_, how)| how),
                "ended_s": a.end.as_ref().map(|(at, _)| at),
                "error": a.error,
                "bytes": a.bytes,
            })
        })
        .collect();
    let log: Vec<Value> = lane
        .log
        .iter()
        .map(|entry| {
            let mut value = match &entry.what {
                Logged::Event(kind) => serde_json::to_value(kind).unwrap_or(Value::Null),
                Logged::Body(text) => json!({ "type": "body_recorded", "summary": text }),
                Logged::Data(run) => json!({
                    "type": "data",
                    "until_s": run.end_s,
                    "chunks": run.chunks,
                    "bytes": run.bytes,
                    "events": super::lanes::EVENT_CLASSES
                        .iter()
                        .zip(run.events)
                        .filter(|(_, n)| *n > 0)
                        .map(|(class, n)| (class.name().to_owned(), json!(n)))
                        .collect::<serde_json::Map<_, _>>(),
                    "chars": run.chars,
                }),
            };
            if let Value::Object(map) = &mut value {
                map.insert("at_s".into(), json!(entry.at_s));
                map.insert("attempt".into(), json!(entry.attempt));
            }
            value
        })
        .collect();
    json!({
        "part": timeline.label(lane),
        "stream": lane.stream,
        "target": lane.target,
        "outcome": timeline.outcome_name(lane),
        "started_s": lane.started_s,
        "finished_s": lane.finished_s,
        "bytes": lane.total_bytes,
        "diagnosis": timeline.verdict(lane).map(|d| serde_json::to_value(&**d).unwrap_or(Value::Null)),
        "call_timers": detail.call_timers.iter().map(timer).collect::<Vec<_>>(),
        "attempts": attempts,
        "log": log,
    })
}

/// What the panel asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanelAction {
    /// Nothing.
    None,
    /// Close it (deselect the lane).
    Close,
}

/// Draws the panel for `lane`.
pub fn ui(ui: &mut Ui, timeline: &Timeline, lane: &Lane, now_s: f64) -> PanelAction {
    let mut action = PanelAction::None;
    let detail = StreamDetail::of(lane);
    ui.horizontal(|ui| {
        ui.heading(title(timeline, lane));
        let outcome = timeline.outcome_name(lane);
        ui.label(
            RichText::new(format!("■ {outcome}"))
                .color(super::palette::of(ui.visuals()).outcome(lane.outcome))
                .strong(),
        );
        ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
            if ui.button("Close").on_hover_text("Esc").clicked() {
                action = PanelAction::Close;
            }
        });
    });
    ui.label(format!(
        "{} · {} attempt(s) · {:.3} s · {} B · started at {:.3} s",
        lane.target,
        lane.attempt_count,
        lane.elapsed_s(now_s),
        lane.total_bytes,
        lane.started_s
    ));
    ui.horizontal_wrapped(|ui| {
        if ui.button("Copy log").on_hover_text("The event log below, as text").clicked() {
            ui.ctx().copy_text(log_text(timeline, lane));
        }
        if ui.button("Copy JSON").on_hover_text("The stream: its attempts, timers and log").clicked() {
            let json = stream_json(timeline, lane);
            ui.ctx().copy_text(serde_json::to_string_pretty(&json).unwrap_or_default());
        }
    });
    ui.separator();
    // Each lane scrolls on its own, so another lane opens at its verdict,
    // not at the offset the last one was read down to.
    let lane_id = (lane.part, lane.stream);
    let top = egui::ScrollArea::vertical().id_salt(("detail-top", lane_id)).max_height(ui.available_height() * 0.6);
    top.show(ui, |ui| {
        match timeline.verdict(lane) {
            Some(verdict) => verdicts::verdict_ui(ui, verdict),
            None if lane.outcome.is_none() => {
                ui.label("No verdict yet: the stream is still going.");
            }
            None => {
                ui.label("No verdict for this stream.");
            }
        }
        ui.separator();
        if !detail.call_timers.is_empty() {
            let timers: Vec<String> = detail.call_timers.iter().map(TimerSetting::describe).collect();
            ui.label(format!("Call: {}", timers.join(" · ")));
        }
        for attempt in &detail.attempts {
            attempt_ui(ui, attempt);
        }
    });
    ui.separator();
    ui.strong(format!("Event log ({} entries)", lane.log.len()));
    egui::ScrollArea::vertical().id_salt(("detail-log", lane_id)).auto_shrink([false, true]).show(ui, |ui| {
        for entry in &lane.log {
            let line = RichText::new(log_line(entry)).monospace();
            // What decided how the call went stands out: a timer firing or
            // held, and on an observed call the agent going and our timer's
            // mark.
            let decided = matches!(
                entry.what,
                Logged::Event(
                    EventKind::TimerFired { .. }
                        | EventKind::TimerHeld { .. }
                        | EventKind::TimerWouldFire { .. }
                        | EventKind::AgentDisconnected
                )
            );
            // Wrapped, so a long line is read whole in the panel; its time
            // leads it.
            ui.add(egui::Label::new(if decided { line.strong() } else { line }).wrap());
        }
    });
    action
}

fn attempt_ui(ui: &mut Ui, attempt: &AttemptDetail) {
    let start = attempt.started_s.map(|s| format!(" at {s:.3} s")).unwrap_or_default();
    let key = attempt.credential.map(|k| format!(" with key #{k}")).unwrap_or_default();
    let heading = format!("Attempt {} → {}{key}{start}", attempt.number, attempt.target);
    egui::CollapsingHeader::new(RichText::new(heading).strong())
        .id_salt(("attempt", attempt.number))
        .default_open(true)
        .show(ui, |ui| {
            match attempt.status {
                Some(status) => {
                    let kind = attempt.content_type.as_deref().unwrap_or("(no content-type)");
                    ui.label(format!("HTTP {status} {kind}"));
                }
                None => {
                    ui.label("No response headers");
                }
            }
            if !attempt.headers.is_empty() {
                egui::Grid::new(("headers", attempt.number)).num_columns(2).striped(true).show(ui, |ui| {
                    for (name, value) in &attempt.headers {
                        ui.monospace(name);
                        ui.add(egui::Label::new(RichText::new(value).monospace()).wrap());
                        ui.end_row();
                    }
                });
            }
            if let Some((body, cut)) = &attempt.error_body {
                ui.label(if *cut { "Error body (cut):" } else { "Error body:" });
                ui.add(egui::Label::new(RichText::new(body).monospace()).wrap());
            }
            for timer in &attempt.timers {
                let text = RichText::new(format!("timer: {}", timer.describe()));
                ui.label(if timer.untrusted() {
                    text.color(ui.visuals().warn_fg_color)
                } else if timer.fired_s.is_some() {
                    text.strong()
                } else {
                    text
                });
            }
            if let Some(error) = &attempt.error {
                ui.label(format!("error: {error}"));
            }
            match &attempt.end {
                Some((at, how)) => ui.label(format!("ended at {at:.3} s: {how} · {} B", attempt.bytes)),
                None => ui.label(format!("going on · {} B", attempt.bytes)),
            };
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::category::Category;
    use crate::core::event::{AttemptEnd, Event, EventClass, Outcome};
    use crate::core::failover::Target;

    fn event(ms: u64, attempt: u32, kind: EventKind) -> Event {
        Event { at: Duration::from_millis(ms), stream: 3, attempt, kind }
    }

    /// A 429 with a Retry-After and an error body, then an attempt that
    /// streams and stalls until the idle timer fires with the runtime late.
    fn rate_limited_then_stalled() -> Vec<Event> {
        let t = Target::new("sim", "m");
        let secs = Duration::from_secs;
        vec![
            event(0, 0, EventKind::CallStarted { target: t.clone(), context_tokens: None }),
            event(0, 0, EventKind::TimerArmed { timer: TimerKind::Deadline, after: secs(30), floor: None }),
            event(0, 1, EventKind::AttemptStarted { target: t.clone(), credential: Some(1) }),
            event(0, 1, EventKind::TimerArmed { timer: TimerKind::Ttfb, after: secs(5), floor: None }),
            event(0, 1, EventKind::TimerDisarmed { timer: TimerKind::Idle, reason: "not configured".into() }),
            event(40, 1, EventKind::HeadersReceived { status: 429, content_type: Some("application/json".into()) }),
            event(40, 1, EventKind::ResponseHeaders { headers: vec![("retry-after-ms".into(), "200".into())] }),
            event(41, 1, EventKind::ErrorBody { body: "{\"error\":\"slow down\"}".into(), truncated: false }),
            event(41, 1, EventKind::AttemptEnded { end: AttemptEnd::Status { status: 429 }, stop_reason: None }),
            event(
                41,
                1,
                EventKind::ErrorClassified {
                    category: Category::RateLimit,
                    timer: None,
                    status: Some(429),
                    retryable: true,
                    rule: "builtin: status 429".into(),
                    message: "HTTP 429".into(),
                },
            ),
            event(250, 2, EventKind::AttemptStarted { target: t, credential: Some(0) }),
            event(250, 2, EventKind::TimerArmed { timer: TimerKind::Idle, after: secs(1), floor: None }),
            event(300, 2, EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) }),
            event(310, 2, EventKind::ChunkReceived { bytes: 30 }),
            event(310, 2, EventKind::SseReceived { class: EventClass::Content, chars: 5, progress: true }),
            event(320, 2, EventKind::ChunkReceived { bytes: 20 }),
            event(320, 2, EventKind::SseReceived { class: EventClass::Keepalive, chars: 0, progress: false }),
            event(
                1320,
                2,
                EventKind::TimerFired { timer: TimerKind::Idle, after: secs(1), lag: Some(Duration::from_millis(250)) },
            ),
            event(
                1320,
                2,
                EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::Idle }, stop_reason: None },
            ),
            event(1320, 0, EventKind::Finished { outcome: Outcome::Partial, attempts: 2, stop_reason: None }),
        ]
    }

    #[test]
    fn each_attempt_gets_its_response_its_timers_and_its_end() {
        let timeline = Timeline::from_events("story", &rate_limited_then_stalled());
        let detail = StreamDetail::of(&timeline.lanes[0]);
        assert_eq!(detail.call_timers.len(), 1);
        assert_eq!(detail.call_timers[0].describe(), "deadline 30.000 s");
        let [first, second] = &detail.attempts[..] else { panic!("{:?}", detail.attempts) };
        assert_eq!((first.number, first.target.as_str(), first.credential), (1, "sim/m", Some(1)));
        assert_eq!(first.status, Some(429));
        assert_eq!(first.headers, [("retry-after-ms".to_owned(), "200".to_owned())]);
        assert_eq!(first.error_body, Some(("{\"error\":\"slow down\"}".to_owned(), false)));
        assert_eq!(first.end, Some((0.041, "HTTP 429".to_owned())));
        assert!(first.error.as_deref().unwrap().starts_with("rate_limit (retryable"), "{:?}", first.error);
        let timers: Vec<String> = first.timers.iter().map(TimerSetting::describe).collect();
        assert_eq!(timers, ["ttfb 5.000 s", "idle off: not configured"]);
        assert_eq!((second.status, second.bytes, second.credential), (Some(200), 50, Some(0)));
        let idle = &second.timers[0];
        assert!(idle.untrusted(), "a quarter of the budget late");
        assert!(idle.describe().starts_with("idle 1.000 s, FIRED at 1.320 s while our runtime lagged 250 ms"));
    }

    /// The panel's words for the first attempt's timers.
    fn first_attempt_timers(lane: &Lane) -> Vec<String> {
        StreamDetail::of(lane).attempts[0].timers.iter().map(TimerSetting::describe).collect()
    }

    /// An observed attempt: our timer's mark, sent after the call's end,
    /// is a timer of the attempt in the panel and a line of its log, in
    /// its time place.
    #[test]
    fn an_observed_attempt_shows_our_timer_that_would_have_fired() {
        let events = crate::diagnosis::fixtures::agent_gone_on_a_silent_stall(3);
        let timeline = Timeline::from_events("observe", &events);
        let lane = &timeline.lanes[0];
        assert_eq!(first_attempt_timers(lane), ["idle 0.400 s, would have fired at 0.410 s (observed: not acted on)"]);
        let text = log_text(&timeline, lane);
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines[4..6],
            [
                "    0.410 s  #1    our idle timer (0.400 s) would have fired here (observed: not acted on)",
                "    1.010 s  #1    the agent disconnected",
            ],
            "{text}"
        );
        assert_eq!(stream_json(&timeline, lane)["attempts"][0]["timers"][0]["would_fire_at_s"], 0.41);
    }

    /// A guarded attempt's timer held for our own lateness: said in the
    /// panel's timers, with the lag, and in its JSON.
    #[test]
    fn a_held_timer_is_shown_with_the_lag_it_was_held_for() {
        let timeline = Timeline::from_events("guard", &crate::diagnosis::fixtures::held_on_a_late_runtime(3));
        let lane = &timeline.lanes[0];
        assert_eq!(
            first_attempt_timers(lane),
            ["idle 1.000 s, held at 1.350 s (our runtime 350 ms late: client overloaded, not acted on)"]
        );
        let held = &stream_json(&timeline, lane)["attempts"][0]["timers"][0]["held"];
        assert_eq!(held, &json!([{"at_s": 1.35, "lag_s": 0.35}]));
    }

    #[test]
    fn the_log_folds_data_between_decisions_and_reads_as_text_and_json() {
        let timeline = Timeline::from_events("story", &rate_limited_then_stalled());
        let lane = &timeline.lanes[0];
        let text = log_text(&timeline, lane);
        let lines: Vec<&str> = text.lines().collect();
        // A title, then every event but the four data events, folded into one line.
        assert_eq!(lines.len(), 1 + 20 - 4 + 1, "{text}");
        assert_eq!(lines[0], "story #3 → sim/m: partial after 2 attempt(s)");
        assert!(
            lines.contains(&"    0.310 s  #2    2 chunks, 50 B; 1 content, 1 keepalive events (5 chars) over 0.010 s")
        );
        assert!(lines.contains(&"    0.040 s  #1    response headers: retry-after-ms: 200"), "{text}");
        assert!(lines.contains(&"    0.000 s  call  deadline timer armed: 30.000 s"), "{text}");
        let json = stream_json(&timeline, lane);
        assert_eq!(json["outcome"], "partial");
        assert_eq!(json["attempts"][0]["error_body"], "{\"error\":\"slow down\"}");
        assert_eq!(json["attempts"][1]["timers"][0]["trusted"], false);
        let log = json["log"].as_array().unwrap();
        assert_eq!(log.len(), lines.len() - 1);
        let data = log.iter().find(|e| e["type"] == "data").unwrap();
        assert_eq!((data["bytes"].as_u64(), data["events"]["keepalive"].as_u64()), (Some(50), Some(1)));
        assert_eq!(log[5]["type"], "headers_received");
        assert_eq!((log[5]["status"].as_u64(), log[5]["attempt"].as_u64()), (Some(429), Some(1)));
    }
}
