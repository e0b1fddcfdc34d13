//! The timeline model: one lane per stream, built event by event from the
//! core's events (as a run goes, or read back from the store) into the
//! shapes the lanes draw: cumulative bytes, event ticks, each timer's
//! progress toward its threshold, backoff sleeps, attempts, failover hops
//! and the outcome, timers held for our own lateness (guard mode), where
//! our timers would have fired and the agent disconnected on an observed
//! call, and each stream's log for its detail
//! panel. Its source gives it each stream's verdict (the model never
//! diagnoses). Times are seconds from the start of the run.
//!
//! A [`Checkpoint`] remembers how far each lane had grown, so a timeline can
//! be rewound to an earlier point of its own history in time proportional
//! to its lanes, not its events (replay scrubs backward this way).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use egui_plot::PlotPoint;

use crate::core::category::{Category, TimerKind};
use crate::core::event::{AttemptEnd, Event, EventClass, EventKind, Outcome, SleepReason, StreamId};
use crate::core::failure::TransportKind;
use crate::core::rate_window::RateWindow;
use crate::diagnosis::{Diagnosis, VerdictKind};

/// Every stream of what is shown: one run, or several scenarios run together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// The lanes in the order their streams started.
    pub lanes: Vec<Lane>,
    /// The sources the lanes come from (one per scenario of a combined run).
    pub parts: Vec<Part>,
    /// Whether the parts are the same streams under different settings (a
    /// run and its what-if): lanes are then read stream by stream.
    pub parts_compared: bool,
    index: HashMap<(usize, StreamId), usize>,
    /// Each stream's verdict, once its source has one: the library
    /// diagnoses a stream when it finishes (live) or a whole stored run
    /// when it is read. Kept apart from the lanes, so rewinding a replay
    /// leaves them be: a lane shows its verdict once it has finished.
    verdicts: HashMap<(usize, StreamId), Arc<Diagnosis>>,
    end_s: f64,
    events: u64,
}

/// One source of a paired timeline ([`Timeline::paired`]).
#[derive(Debug, Clone, Default)]
pub struct Side {
    /// What its lanes are labelled with.
    pub label: String,
    /// Its events, in any order of streams.
    pub events: Vec<Event>,
    /// Each stream's verdict.
    pub verdicts: BTreeMap<StreamId, Diagnosis>,
}

/// One source of lanes: its label and where its clock starts on the shared axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// What the lanes are labelled with (a scenario name, a target).
    pub label: String,
    /// Seconds from the timeline's start to this part's start.
    pub offset_s: f64,
    /// How many calls it was started with, when the timeline is of a run
    /// going on (its lanes appear as they start).
    pub planned: Option<usize>,
}

/// One stream's life.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lane {
    /// The part it belongs to.
    pub part: usize,
    /// Its stream id within the part.
    pub stream: StreamId,
    /// When the call started.
    pub started_s: f64,
    /// The latest event's time.
    pub last_s: f64,
    /// Cumulative bytes received: (time, bytes so far).
    pub bytes: Vec<PlotPoint>,
    /// Bytes so far.
    pub total_bytes: u64,
    /// Times of content, reasoning and tool-call events.
    pub output_ticks: Vec<f64>,
    /// Times of keep-alives (comments, pings).
    pub keepalive_ticks: Vec<f64>,
    /// Times of lifecycle events (start, stop, usage).
    pub lifecycle_ticks: Vec<f64>,
    /// Every armed timer's run, in order.
    pub timers: Vec<TimerTrack>,
    /// Backoff sleeps before retries.
    pub sleeps: Vec<SleepSpan>,
    /// Where each attempt began.
    pub attempts: Vec<Mark>,
    /// Failover hops.
    pub hops: Vec<Mark>,
    /// Timers that fired.
    pub fired: Vec<Mark>,
    /// Timers that came due while our own runtime was late and were not
    /// acted on (guard mode): each starts its budget again there.
    pub held: Vec<Mark>,
    /// Rate-limit buckets that ran low.
    pub low_buckets: Vec<Mark>,
    /// Where output arrived all at once (a buffering proxy releasing a
    /// whole answer): [`BURST_EVENTS`] output events within [`BURST_WINDOW_S`].
    pub bursts: Vec<Mark>,
    /// Where the connection was closed or reset before the stream was
    /// done, with the silence before it (a hop's idle timer shows as the
    /// same silence on every cut).
    pub cuts: Vec<Mark>,
    /// Where our timers would have fired on an attempt observe relayed
    /// without acting (its clocks off), under the tunables in force.
    pub would_fire: Vec<WouldFire>,
    /// Where the observed agent disconnected before its response was
    /// complete, with the silence before it.
    pub agent_gone: Vec<Mark>,
    /// The stream's events in time order, for hovering and the detail panel:
    /// each event other than data as it came, and each run of data
    /// (chunks, parsed stream events) between two of them folded into one
    /// entry, so the log grows with the stream's decisions, not its bytes.
    pub log: Vec<LogEntry>,
    /// How the call ended, once it has.
    pub outcome: Option<Outcome>,
    /// When it ended.
    pub finished_s: Option<f64>,
    /// The last classified failure, `category/timer (rule)`.
    pub last_error: Option<String>,
    /// Retries scheduled, by category.
    pub retries: BTreeMap<Category, u32>,
    /// The target of the current (or last) attempt.
    pub target: String,
    /// Attempts started.
    pub attempt_count: u32,
    /// When the attempt last showed life (its start, its headers, its
    /// last byte), where a silence that ends in a cut began.
    last_sign_s: f64,
    open: [Option<usize>; TIMER_KINDS],
}

/// A point in time with a description.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// When.
    pub at_s: f64,
    /// What, in words.
    pub text: String,
}

/// Where one of our timers would have fired (observed: not acted on).
#[derive(Debug, Clone, PartialEq)]
pub struct WouldFire {
    /// Which timer.
    pub timer: TimerKind,
    /// Its budget in seconds.
    pub budget_s: f64,
    /// Where it would have fired.
    pub at_s: f64,
}

impl WouldFire {
    /// Its label on the lane: `idle 400 ms would fire`.
    pub fn label(&self) -> String {
        format!("{} {} would fire", self.timer, crate::gui::timeline::duration_label(self.budget_s))
    }
}

/// One entry of a lane's [log](Lane::log).
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// When it happened (a run of data: its first event).
    pub at_s: f64,
    /// The attempt it belongs to (0: the call, between attempts).
    pub attempt: u32,
    /// What happened.
    pub what: Logged,
}

/// What a [`LogEntry`] holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Logged {
    /// An event other than data, as it came.
    Event(EventKind),
    /// A recorded body, described: the body itself is not kept.
    Body(String),
    /// Consecutive chunks and parsed stream events of one attempt.
    Data(DataRun),
}

impl LogEntry {
    /// The entry in words, as hovering and the detail panel show it.
    pub fn text(&self) -> String {
        match &self.what {
            Logged::Event(kind) => describe(kind),
            Logged::Body(text) => text.clone(),
            Logged::Data(run) => run.describe(self.at_s),
        }
    }
}

/// A run of data events folded into one log entry.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DataRun {
    /// Its last event's time.
    pub end_s: f64,
    /// Chunks received.
    pub chunks: u32,
    /// Their bytes.
    pub bytes: u64,
    /// Parsed stream events by class, in [`EVENT_CLASSES`] order.
    pub events: [u32; EVENT_CLASSES.len()],
    /// Characters of text those events carried.
    pub chars: u64,
}

/// Every class of parsed stream event, in the order a [`DataRun`] counts them.
pub const EVENT_CLASSES: [EventClass; 6] = [
    EventClass::Content,
    EventClass::Reasoning,
    EventClass::ToolCall,
    EventClass::Lifecycle,
    EventClass::Keepalive,
    EventClass::Error,
];

impl DataRun {
    fn take(&mut self, at: f64, kind: &EventKind) {
        self.end_s = at;
        match kind {
            EventKind::ChunkReceived { bytes } => {
                self.chunks += 1;
                self.bytes += *bytes as u64;
            }
            EventKind::SseReceived { class, chars, .. } => {
                if let Some(i) = EVENT_CLASSES.iter().position(|c| c == class) {
                    self.events[i] += 1;
                }
                self.chars += *chars as u64;
            }
            _ => {}
        }
    }

    /// `12 chunks, 3,210 B; 10 content, 2 keepalive events (420 chars) over 0.800 s`.
    pub fn describe(&self, start_s: f64) -> String {
        let mut text = match self.chunks {
            0 => String::new(),
            1 => format!("1 chunk, {} B", self.bytes),
            n => format!("{n} chunks, {} B", self.bytes),
        };
        let classes: Vec<String> = EVENT_CLASSES
            .iter()
            .zip(self.events)
            .filter(|(_, n)| *n > 0)
            .map(|(class, n)| format!("{n} {}", class.name()))
            .collect();
        if !classes.is_empty() {
            let total: u32 = self.events.iter().sum();
            let noun = if total == 1 { "event" } else { "events" };
            let chars = if self.chars > 0 { format!(" ({} chars)", self.chars) } else { String::new() };
            let sep = if text.is_empty() { "" } else { "; " };
            text.push_str(&format!("{sep}{} {noun}{chars}", classes.join(", ")));
        }
        let span = self.end_s - start_s;
        if span > 0.0 {
            text.push_str(&format!(" over {span:.3} s"));
        }
        text
    }
}

/// One armed timer from arming to its end: how much of its budget had
/// elapsed over time (0 at each reset, 1 when it fires).
#[derive(Debug, Clone, PartialEq)]
pub struct TimerTrack {
    /// Which timer.
    pub kind: TimerKind,
    /// Its budget in seconds.
    pub budget_s: f64,
    /// (time, elapsed fraction of the budget), sorted by time; a reset is
    /// two points at the same time.
    pub progress: Vec<PlotPoint>,
    /// Whether it is still armed.
    pub open: bool,
    /// Whether it fired.
    pub fired: bool,
    /// The throughput floor's measure, for its track.
    pub rate: Option<RateTrack>,
    last_reset: f64,
}

/// The throughput floor's track climbs as the rate falls toward the floor:
/// its height is the floor over the rate of the window so far (the
/// events the floor asks for over those the window held), 1 at the floor.
#[derive(Debug, Clone, PartialEq)]
pub struct RateTrack {
    /// Progress events a second.
    pub floor: f64,
    window: RateWindow,
}

impl RateTrack {
    /// The floor over the rate at `since_s` after the floor started.
    fn fraction(&self, since_s: f64) -> f64 {
        let since = std::time::Duration::from_secs_f64(since_s.max(0.0));
        let need = self.floor * since.min(self.window.window()).as_secs_f64();
        match self.window.in_window(since) {
            0 if need > 0.0 => 1.0,
            0 => 0.0,
            held => (need / held as f64).min(1.0),
        }
    }
}

impl TimerTrack {
    /// The fraction of its budget elapsed at `now_s`, for an armed timer
    /// (for the throughput floor, how near the rate is to the floor).
    pub fn fraction_at(&self, now_s: f64) -> f64 {
        match &self.rate {
            Some(rate) => rate.fraction(now_s - self.last_reset),
            None => ((now_s - self.last_reset) / self.budget_s).clamp(0.0, 1.0),
        }
    }

    /// The label of its line: `idle 30 s`, `min_rate 2/s over 60 s`.
    pub fn label(&self) -> String {
        let budget = crate::gui::timeline::duration_label(self.budget_s);
        match &self.rate {
            Some(rate) => format!("{} {}/s over {budget}", self.kind, rate.floor),
            None => format!("{} {budget}", self.kind),
        }
    }
}

/// A backoff sleep.
#[derive(Debug, Clone, PartialEq)]
pub struct SleepSpan {
    /// When it began.
    pub start_s: f64,
    /// When it ends (or ended).
    pub end_s: f64,
    /// `backoff` or the header the server's wait came from.
    pub reason: String,
    /// The category retried.
    pub category: Category,
}

const TIMER_KINDS: usize = 7;

/// Output events this close together arrived at once (one read of the
/// socket, parsed in one go).
pub const BURST_WINDOW_S: f64 = 0.002;

/// Output events arriving at once that make a burst: more than one read of
/// a streaming answer ever holds in practice.
pub const BURST_EVENTS: usize = 8;

const fn slot(kind: TimerKind) -> usize {
    match kind {
        TimerKind::Connect => 0,
        TimerKind::Ttfb => 1,
        TimerKind::Idle => 2,
        TimerKind::DataStall => 3,
        TimerKind::Total => 4,
        TimerKind::Deadline => 5,
        TimerKind::MinRate => 6,
    }
}

impl Timeline {
    /// An empty timeline.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a source of lanes; returns its index for [`Timeline::ingest`].
    pub fn add_part(&mut self, label: impl Into<String>, offset_s: f64) -> usize {
        self.parts.push(Part { label: label.into(), offset_s, planned: None });
        self.parts.len() - 1
    }

    /// Says that `part` was started with `calls` calls, so the ones not
    /// yet started can be counted.
    pub fn plan(&mut self, part: usize, calls: usize) {
        if let Some(part) = self.parts.get_mut(part) {
            part.planned = Some(calls);
        }
    }

    /// The calls of every part, when each part says how many it has.
    pub fn planned(&self) -> Option<usize> {
        self.parts.iter().map(|p| p.planned).sum()
    }

    /// A timeline of one stored run.
    pub fn from_events(label: impl Into<String>, events: &[Event]) -> Self {
        let mut timeline = Timeline::new();
        let part = timeline.add_part(label, 0.0);
        for event in events {
            timeline.ingest(part, event);
        }
        timeline
    }

    /// Two sources of the same streams (a run and its what-if, or two runs
    /// of one scenario) on one axis from each one's start, each stream's
    /// two lanes next to each other, each with its verdict.
    pub fn paired(sides: [Side; 2]) -> Self {
        let mut timeline = Timeline { parts_compared: true, ..Timeline::new() };
        let mut by_stream: BTreeMap<StreamId, [Vec<Event>; 2]> = BTreeMap::new();
        let mut verdicts: [BTreeMap<StreamId, Diagnosis>; 2] = Default::default();
        for (part, side) in sides.into_iter().enumerate() {
            timeline.add_part(side.label, 0.0);
            verdicts[part] = side.verdicts;
            for event in side.events {
                by_stream.entry(event.stream).or_default()[part].push(event);
            }
        }
        for (stream, mut events) in by_stream {
            for (part, events) in events.iter_mut().enumerate() {
                // The store groups a run's events by stream; within one, by time.
                events.sort_by_key(|e| e.at);
                events.iter().for_each(|event| timeline.ingest(part, event));
                if !events.is_empty()
                    && let Some(verdict) = verdicts[part].remove(&stream)
                {
                    timeline.set_verdict(part, stream, verdict);
                }
            }
        }
        timeline
    }

    /// Takes in one event of `part`.
    pub fn ingest(&mut self, part: usize, event: &Event) {
        let offset = self.parts.get(part).map_or(0.0, |p| p.offset_s);
        let at = offset + event.at.as_secs_f64();
        let next = self.lanes.len();
        let index = *self.index.entry((part, event.stream)).or_insert(next);
        if index == next {
            self.lanes.push(Lane { part, stream: event.stream, started_s: at, ..Lane::default() });
        }
        self.lanes[index].ingest(at, event);
        self.end_s = self.end_s.max(at);
        self.events += 1;
    }

    /// The latest event's time.
    pub fn end_s(&self) -> f64 {
        self.end_s
    }

    /// Gives stream `stream` of `part` its verdict.
    pub fn set_verdict(&mut self, part: usize, stream: StreamId, diagnosis: Diagnosis) {
        self.verdicts.insert((part, stream), Arc::new(diagnosis));
    }

    /// Every verdict given, finished as of a replay's cursor or not, by
    /// part and stream.
    pub fn verdicts(&self) -> impl Iterator<Item = ((usize, StreamId), &Arc<Diagnosis>)> {
        self.verdicts.iter().map(|(key, verdict)| (*key, verdict))
    }

    /// A lane's verdict, once it has finished (as of a replay's cursor); a
    /// stream whose recording ends before it finished shows its
    /// `incomplete` verdict whenever it is known.
    pub fn verdict(&self, lane: &Lane) -> Option<&Arc<Diagnosis>> {
        let verdict = self.verdicts.get(&(lane.part, lane.stream))?;
        (lane.outcome.is_some() || verdict.kind == VerdictKind::Incomplete).then_some(verdict)
    }

    /// The verdict its source has for a lane, whether or not the lane has
    /// reached its end yet (a replay's cursor may be before it).
    pub fn verdict_at_end(&self, lane: &Lane) -> Option<&Arc<Diagnosis>> {
        self.verdicts.get(&(lane.part, lane.stream))
    }

    /// Whether a lane's verdict says a what-if cannot tell how its stream
    /// ends: its replay ended in a cancellation that was never the call's.
    pub fn is_unknown(&self, lane: &Lane) -> bool {
        self.verdicts.get(&(lane.part, lane.stream)).is_some_and(|v| v.kind == VerdictKind::Unknown)
    }

    /// How a lane ended, as shown: `unknown` for a what-if lane whose end
    /// cannot be told, else its outcome (`running` until it has one).
    pub fn outcome_name(&self, lane: &Lane) -> &'static str {
        if self.is_unknown(lane) { "unknown" } else { super::timeline::outcome_name(lane.outcome) }
    }

    /// Events taken in.
    pub fn event_count(&self) -> u64 {
        self.events
    }

    /// The label of a lane's part.
    pub fn label(&self, lane: &Lane) -> &str {
        self.parts.get(lane.part).map_or("", |p| p.label.as_str())
    }

    /// Counts, retries and latency over every lane.
    pub fn summary(&self) -> Summary {
        self.summary_of(0..self.lanes.len())
    }

    /// Counts, retries and latency over the lanes at `indices` (those a
    /// filter shows).
    pub fn summary_of(&self, indices: impl IntoIterator<Item = usize>) -> Summary {
        let mut summary = Summary::default();
        let mut elapsed = Vec::new();
        for lane in indices.into_iter().filter_map(|i| self.lanes.get(i)) {
            match lane.outcome {
                _ if self.is_unknown(lane) => summary.unknown += 1,
                Some(Outcome::Ok) => summary.ok += 1,
                Some(Outcome::Partial) => summary.partial += 1,
                Some(Outcome::Failed) => summary.failed += 1,
                Some(Outcome::Cancelled) => summary.cancelled += 1,
                None => summary.running += 1,
            }
            for (category, n) in &lane.retries {
                *summary.retries.entry(*category).or_default() += n;
            }
            if let Some(end) = lane.finished_s {
                elapsed.push(end - lane.started_s);
            }
        }
        elapsed.sort_by(f64::total_cmp);
        let rank =
            |p: f64| elapsed.get(((p / 100.0 * elapsed.len() as f64).ceil() as usize).saturating_sub(1)).copied();
        summary.p50_s = rank(50.0);
        summary.p99_s = rank(99.0);
        summary
    }
}

/// How far a [`Timeline`] had grown at one point of its history: enough to
/// [rewind](Timeline::rewind) it there later. The series only grow, so a
/// checkpoint keeps their lengths, plus the few values that change in place
/// (a lane's totals, its armed timers); it costs a couple of hundred bytes
/// per lane, whatever the number of events.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    events: u64,
    end_s: f64,
    lanes: Vec<LaneCheckpoint>,
}

impl Checkpoint {
    /// Events the timeline had taken in when this was taken.
    pub fn event_count(&self) -> u64 {
        self.events
    }

    /// The bytes this checkpoint holds, roughly (for memory budgets).
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.lanes.iter().map(LaneCheckpoint::size_bytes).sum::<usize>()
    }
}

#[derive(Debug, Clone, PartialEq)]
struct LaneCheckpoint {
    /// Lengths of the lane's series, in the order [`Lane::series_lengths`] lists them.
    lengths: [usize; SERIES],
    last_s: f64,
    total_bytes: u64,
    outcome: Option<Outcome>,
    finished_s: Option<f64>,
    last_error: Option<String>,
    retries: BTreeMap<Category, u32>,
    target: String,
    attempt_count: u32,
    last_sign_s: f64,
    open: [Option<usize>; TIMER_KINDS],
    /// The armed timers: the only tracks that change after they are pushed.
    armed: Vec<ArmedTrack>,
    /// The log's last entry when it is a run of data, which grows in place.
    last_data: Option<DataRun>,
}

impl LaneCheckpoint {
    fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.last_error.as_ref().map_or(0, String::capacity)
            + self.target.capacity()
            + self.retries.len() * std::mem::size_of::<(Category, u32)>()
            + self.armed.capacity() * std::mem::size_of::<ArmedTrack>()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct ArmedTrack {
    index: usize,
    progress: usize,
    last_reset: f64,
    /// The throughput floor's window, which events change in place.
    rate: Option<RateWindow>,
}

/// The number of series a lane grows (see [`Lane::series_lengths`]).
const SERIES: usize = 16;

impl Timeline {
    /// Where this timeline stands now, to [`rewind`](Self::rewind) to later.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint { events: self.events, end_s: self.end_s, lanes: self.lanes.iter().map(Lane::checkpoint).collect() }
    }

    /// Goes back to `checkpoint`, which must have been taken from this
    /// timeline earlier while it took in the same events it has since (as
    /// replay does); the result equals the timeline as it was then.
    pub fn rewind(&mut self, checkpoint: &Checkpoint) {
        debug_assert!(checkpoint.events <= self.events, "a checkpoint from this timeline's past");
        let kept = checkpoint.lanes.len();
        self.lanes.truncate(kept);
        self.index.retain(|_, lane| *lane < kept);
        for (lane, mark) in self.lanes.iter_mut().zip(&checkpoint.lanes) {
            lane.rewind(mark);
        }
        self.events = checkpoint.events;
        self.end_s = checkpoint.end_s;
    }
}

/// The run at a glance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Streams that completed.
    pub ok: usize,
    /// Streams finished by partial recovery.
    pub partial: usize,
    /// Streams that failed.
    pub failed: usize,
    /// Streams cancelled.
    pub cancelled: usize,
    /// Streams still going.
    pub running: usize,
    /// What-if streams whose end cannot be told.
    pub unknown: usize,
    /// Retries scheduled, by category.
    pub retries: BTreeMap<Category, u32>,
    /// Median elapsed time of finished streams.
    pub p50_s: Option<f64>,
    /// 99th-percentile elapsed time of finished streams.
    pub p99_s: Option<f64>,
}

impl Lane {
    fn ingest(&mut self, at: f64, event: &Event) {
        self.last_s = self.last_s.max(at);
        match &event.kind {
            EventKind::ChunkReceived { bytes } => {
                self.last_sign_s = at;
                self.total_bytes += *bytes as u64;
                self.bytes.push(PlotPoint::new(at, self.total_bytes as f64));
                self.reset(TimerKind::Idle, at);
                self.close(TimerKind::Ttfb, at, false);
                self.log_data(at, event);
                return;
            }
            EventKind::SseReceived { class, progress, .. } => {
                match class {
                    EventClass::Keepalive => self.keepalive_ticks.push(at),
                    EventClass::Lifecycle | EventClass::Error => self.lifecycle_ticks.push(at),
                    EventClass::Content | EventClass::Reasoning | EventClass::ToolCall => {
                        self.output_ticks.push(at);
                        self.mark_burst();
                    }
                }
                if *progress {
                    self.reset(TimerKind::DataStall, at);
                    self.count_progress(at);
                }
                self.log_data(at, event);
                return;
            }
            EventKind::TimerArmed { timer, after, floor } => {
                self.close(*timer, at, false);
                self.open[slot(*timer)] = Some(self.timers.len());
                self.timers.push(TimerTrack {
                    kind: *timer,
                    budget_s: after.as_secs_f64().max(1e-9),
                    progress: vec![PlotPoint::new(at, 0.0)],
                    open: true,
                    fired: false,
                    rate: floor.map(|floor| RateTrack { floor, window: RateWindow::new(*after) }),
                    last_reset: at,
                });
            }
            EventKind::TimerDisarmed { timer, .. } => self.close(*timer, at, false),
            EventKind::TimerFired { timer, .. } => {
                self.close(*timer, at, true);
                self.fired.push(Mark { at_s: at, text: format!("{timer} timer fired") });
            }
            EventKind::TimerHeld { timer, .. } => {
                self.restart(*timer, at);
                self.held.push(Mark { at_s: at, text: format!("{timer} held: client late") });
            }
            EventKind::TimerWouldFire { timer, after } => {
                self.would_fire.push(WouldFire { timer: *timer, budget_s: after.as_secs_f64(), at_s: at });
            }
            EventKind::AgentDisconnected => {
                let text = format!("agent gone after {:.2} s of silence", at - self.last_sign_s);
                self.agent_gone.push(Mark { at_s: at, text });
            }
            EventKind::AttemptStarted { target, .. } => {
                self.last_sign_s = at;
                self.close_all(at);
                self.attempt_count = event.attempt.max(self.attempt_count + 1);
                self.target = target.to_string();
                self.attempts.push(Mark { at_s: at, text: format!("attempt {} → {target}", self.attempt_count) });
            }
            EventKind::CallStarted { target, .. } => self.target = target.to_string(),
            EventKind::HeadersReceived { .. } => self.last_sign_s = at,
            EventKind::AttemptEnded {
                end: AttemptEnd::Transport { kind: kind @ (TransportKind::Closed | TransportKind::Reset) },
                ..
            } => {
                let how = if *kind == TransportKind::Reset { "reset" } else { "closed" };
                let text = format!("{how} after {:.2} s of silence", at - self.last_sign_s);
                self.cuts.push(Mark { at_s: at, text });
            }
            EventKind::PhaseChanged { phase: crate::core::event::AttemptPhase::Done } => self.close_all(at),
            EventKind::ErrorClassified { category, timer, rule, .. } => {
                self.close_all(at);
                let timer = timer.map(|t| format!("/{t}")).unwrap_or_default();
                self.last_error = Some(format!("{category}{timer} ({rule})"));
            }
            EventKind::BackoffScheduled { category, sleep, reason, .. } => {
                *self.retries.entry(*category).or_default() += 1;
                let reason = match reason {
                    SleepReason::Backoff => "backoff".to_owned(),
                    SleepReason::ServerRequested { header } => header.clone(),
                };
                let end_s = at + sleep.as_secs_f64();
                self.sleeps.push(SleepSpan { start_s: at, end_s, reason, category: *category });
            }
            EventKind::FailedOver { from, to, reason } => {
                self.hops.push(Mark { at_s: at, text: format!("{from} → {to} ({reason})") });
            }
            EventKind::RateLimitLow { bucket, remaining, .. } => {
                self.low_buckets.push(Mark { at_s: at, text: format!("{remaining} {bucket} left") });
            }
            EventKind::Finished { outcome, .. } => {
                self.close_all(at);
                self.close(TimerKind::Deadline, at, false);
                self.outcome = Some(*outcome);
                self.finished_s = Some(at);
            }
            _ => {}
        }
        let what = match &event.kind {
            EventKind::BodyRecorded { .. } => Logged::Body(describe(&event.kind)),
            kind => Logged::Event(kind.clone()),
        };
        // In its time place: observe sends our timers' marks once their
        // attempt has ended (after the call's end, live), and hovering
        // looks entries up by time.
        let place = self.log.partition_point(|entry| entry.at_s <= at);
        self.log.insert(place, LogEntry { at_s: at, attempt: event.attempt, what });
    }

    /// Marks a burst when the last [`BURST_EVENTS`] output ticks came within
    /// [`BURST_WINDOW_S`] and the tick before them did not: once per burst,
    /// however long it goes on, read from the ticks alone (so a rewind,
    /// which truncates both, needs nothing more).
    fn mark_burst(&mut self) {
        let ticks = &self.output_ticks;
        let Some(first) = ticks.len().checked_sub(BURST_EVENTS) else { return };
        let at = ticks[ticks.len() - 1];
        let starts = first.checked_sub(1).is_none_or(|before| ticks[first] - ticks[before] > BURST_WINDOW_S);
        if at - ticks[first] <= BURST_WINDOW_S && starts {
            self.bursts.push(Mark { at_s: ticks[first], text: "burst".to_owned() });
        }
    }

    /// Folds a data event into the log's last entry when that is a run of
    /// data of the same attempt, else starts one.
    fn log_data(&mut self, at: f64, event: &Event) {
        if let Some(LogEntry { attempt, what: Logged::Data(run), .. }) = self.log.last_mut()
            && *attempt == event.attempt
        {
            run.take(at, &event.kind);
            return;
        }
        let mut run = DataRun::default();
        run.take(at, &event.kind);
        self.log.push(LogEntry { at_s: at, attempt: event.attempt, what: Logged::Data(run) });
    }

    /// The lengths of every series the lane grows, in a fixed order.
    fn series_lengths(&self) -> [usize; SERIES] {
        // Listing every field makes a new one a compile error here until
        // it is sorted into "grows" (a length), "changes" (kept whole in
        // the checkpoint) or "fixed".
        let Lane {
            part: _,
            stream: _,
            started_s: _,
            last_s: _,
            bytes,
            total_bytes: _,
            output_ticks,
            keepalive_ticks,
            lifecycle_ticks,
            timers,
            sleeps,
            attempts,
            hops,
            fired,
            held,
            low_buckets,
            bursts,
            cuts,
            would_fire,
            agent_gone,
            log,
            outcome: _,
            finished_s: _,
            last_error: _,
            retries: _,
            target: _,
            attempt_count: _,
            last_sign_s: _,
            open: _,
        } = self;
        [
            bytes.len(),
            output_ticks.len(),
            keepalive_ticks.len(),
            lifecycle_ticks.len(),
            timers.len(),
            sleeps.len(),
            attempts.len(),
            hops.len(),
            fired.len(),
            held.len(),
            low_buckets.len(),
            bursts.len(),
            cuts.len(),
            would_fire.len(),
            agent_gone.len(),
            log.len(),
        ]
    }

    fn checkpoint(&self) -> LaneCheckpoint {
        let armed = self
            .open
            .iter()
            .flatten()
            .map(|&index| {
                let track = &self.timers[index];
                ArmedTrack {
                    index,
                    progress: track.progress.len(),
                    last_reset: track.last_reset,
                    rate: track.rate.as_ref().map(|rate| rate.window),
                }
            })
            .collect();
        LaneCheckpoint {
            lengths: self.series_lengths(),
            last_s: self.last_s,
            total_bytes: self.total_bytes,
            outcome: self.outcome,
            finished_s: self.finished_s,
            last_error: self.last_error.clone(),
            retries: self.retries.clone(),
            target: self.target.clone(),
            attempt_count: self.attempt_count,
            last_sign_s: self.last_sign_s,
            open: self.open,
            armed,
            last_data: match self.log.last() {
                Some(LogEntry { what: Logged::Data(run), .. }) => Some(*run),
                _ => None,
            },
        }
    }

    fn rewind(&mut self, mark: &LaneCheckpoint) {
        let [
            bytes,
            output,
            keepalive,
            lifecycle,
            timers,
            sleeps,
            attempts,
            hops,
            fired,
            held,
            low,
            bursts,
            cuts,
            would_fire,
            agent_gone,
            log,
        ] = mark.lengths;
        self.bytes.truncate(bytes);
        self.output_ticks.truncate(output);
        self.keepalive_ticks.truncate(keepalive);
        self.lifecycle_ticks.truncate(lifecycle);
        self.timers.truncate(timers);
        self.sleeps.truncate(sleeps);
        self.attempts.truncate(attempts);
        self.hops.truncate(hops);
        self.fired.truncate(fired);
        self.held.truncate(held);
        self.low_buckets.truncate(low);
        self.bursts.truncate(bursts);
        self.cuts.truncate(cuts);
        self.would_fire.truncate(would_fire);
        self.agent_gone.truncate(agent_gone);
        self.log.truncate(log);
        if let (Some(was), Some(LogEntry { what: Logged::Data(run), .. })) = (mark.last_data, self.log.last_mut()) {
            *run = was;
        }
        // A track closed by then never changed again; an armed one may have
        // been reset or closed since.
        for armed in &mark.armed {
            let track = &mut self.timers[armed.index];
            track.progress.truncate(armed.progress);
            track.last_reset = armed.last_reset;
            if let (Some(rate), Some(window)) = (&mut track.rate, armed.rate) {
                rate.window = window;
            }
            track.open = true;
            track.fired = false;
        }
        self.last_s = mark.last_s;
        self.total_bytes = mark.total_bytes;
        self.outcome = mark.outcome;
        self.finished_s = mark.finished_s;
        self.last_error.clone_from(&mark.last_error);
        self.retries.clone_from(&mark.retries);
        self.target.clone_from(&mark.target);
        self.attempt_count = mark.attempt_count;
        self.last_sign_s = mark.last_sign_s;
        self.open = mark.open;
    }

    /// A timer restarts its budget.
    fn reset(&mut self, kind: TimerKind, at: f64) {
        if let Some(track) = self.open[slot(kind)].and_then(|i| self.timers.get_mut(i)) {
            let reached = track.fraction_at(at);
            track.progress.push(PlotPoint::new(at, reached));
            track.progress.push(PlotPoint::new(at, 0.0));
            track.last_reset = at;
        }
    }

    /// A held timer reached its top and starts again with its whole budget
    /// (the throughput floor: an empty window).
    fn restart(&mut self, kind: TimerKind, at: f64) {
        if let Some(track) = self.open[slot(kind)].and_then(|i| self.timers.get_mut(i)) {
            track.progress.push(PlotPoint::new(at, 1.0));
            track.progress.push(PlotPoint::new(at, 0.0));
            track.last_reset = at;
            if let Some(rate) = &mut track.rate {
                rate.window = RateWindow::new(rate.window.window());
            }
        }
    }

    /// The throughput floor's window takes in a progress event.
    fn count_progress(&mut self, at: f64) {
        if let Some(track) = self.open[slot(TimerKind::MinRate)].and_then(|i| self.timers.get_mut(i))
            && let Some(rate) = &mut track.rate
        {
            rate.window.count(std::time::Duration::from_secs_f64((at - track.last_reset).max(0.0)));
            let reached = track.fraction_at(at);
            track.progress.push(PlotPoint::new(at, reached));
        }
    }

    /// A timer stops (it fired, was disarmed, or its attempt ended).
    fn close(&mut self, kind: TimerKind, at: f64, fired: bool) {
        if let Some(track) = self.open[slot(kind)].take().and_then(|i| self.timers.get_mut(i)) {
            let reached = if fired { 1.0 } else { track.fraction_at(at) };
            track.progress.push(PlotPoint::new(at, reached));
            track.open = false;
            track.fired = fired;
        }
    }

    /// The attempt's timers stop; the call's deadline runs on.
    fn close_all(&mut self, at: f64) {
        for kind in TimerKind::ALL.into_iter().filter(|&kind| kind != TimerKind::Deadline) {
            self.close(kind, at, false);
        }
    }

    /// Elapsed time: to the finish, or to `now_s` while it runs.
    pub fn elapsed_s(&self, now_s: f64) -> f64 {
        self.finished_s.unwrap_or(now_s) - self.started_s
    }

    /// The description of what happened within `tolerance_s` of `at_s`:
    /// the noted events there, else the nearest tick.
    pub fn describe_near(&self, at_s: f64, tolerance_s: f64) -> Option<String> {
        // Decisions come in bursts (a timer fires, the failure is classified,
        // a backoff is scheduled, all at once): show the whole burst.
        let from = self.log.partition_point(|m| m.at_s < at_s - tolerance_s);
        let to = self.log.partition_point(|m| m.at_s <= at_s + tolerance_s);
        let mut burst = self.log[from..to].iter().filter(|e| !matches!(e.what, Logged::Data(_)));
        const MOST: usize = 8;
        let mut lines: Vec<String> =
            burst.by_ref().take(MOST).map(|e| format!("{:.3} s  {}", e.at_s, e.text())).collect();
        if !lines.is_empty() {
            let more = burst.count();
            if more > 0 {
                lines.push(format!("… and {more} more"));
            }
            return Some(lines.join("\n"));
        }
        let ticks: [(&[f64], &str); 3] = [
            (&self.output_ticks, "output event"),
            (&self.keepalive_ticks, "keep-alive"),
            (&self.lifecycle_ticks, "lifecycle event"),
        ];
        ticks
            .iter()
            .filter_map(|(ticks, what)| nearest(ticks, |t| *t, at_s, tolerance_s).map(|t| (*t, *what)))
            .min_by(|a, b| (a.0 - at_s).abs().total_cmp(&(b.0 - at_s).abs()))
            .map(|(t, what)| {
                let bytes = self.bytes.partition_point(|p| p.x <= t);
                let so_far = bytes.checked_sub(1).map_or(0.0, |i| self.bytes[i].y);
                format!("{t:.3} s  {what} ({so_far:.0} bytes so far)")
            })
    }
}

/// The item of `items` (sorted by `time`) nearest `at`, within `tolerance`.
fn nearest<T>(items: &[T], time: impl Fn(&T) -> f64, at: f64, tolerance: f64) -> Option<&T> {
    let i = items.partition_point(|item| time(item) < at);
    [i.checked_sub(1), Some(i)]
        .into_iter()
        .flatten()
        .filter_map(|i| items.get(i))
        .filter(|item| (time(item) - at).abs() <= tolerance)
        .min_by(|a, b| (time(a) - at).abs().total_cmp(&(time(b) - at).abs()))
}

/// One line for an event, as shown on hover.
pub fn describe(kind: &EventKind) -> String {
    let secs = |d: &std::time::Duration| format!("{:.3} s", d.as_secs_f64());
    match kind {
        EventKind::CallStarted { target, context_tokens } => match context_tokens {
            Some(tokens) => format!("call started → {target} (~{tokens} context tokens)"),
            None => format!("call started → {target}"),
        },
        EventKind::AttemptStarted { target, credential } => match credential {
            Some(key) => format!("attempt started → {target} with key #{key}"),
            None => format!("attempt started → {target}"),
        },
        EventKind::PhaseChanged { phase } => format!("phase: {}", phase.name()),
        EventKind::HeadersReceived { status, content_type } => {
            format!("headers: HTTP {status} {}", content_type.as_deref().unwrap_or("(no content-type)"))
        }
        EventKind::ResponseHeaders { headers } => {
            let pairs: Vec<String> = headers.iter().map(|(name, value)| format!("{name}: {value}")).collect();
            format!("response headers: {}", pairs.join("; "))
        }
        EventKind::ErrorBody { body, truncated } => {
            format!("error body{}: {}", if *truncated { " (cut)" } else { "" }, body.lines().next().unwrap_or(""))
        }
        EventKind::ChunkReceived { bytes } => format!("{bytes} bytes"),
        EventKind::SseReceived { class, chars, progress } => {
            format!("{} event, {chars} chars{}", class.name(), if *progress { ", progress" } else { "" })
        }
        EventKind::TimerArmed { timer, after, floor: Some(floor) } => {
            format!("{timer} timer armed: {floor} progress events/s over {}", secs(after))
        }
        EventKind::TimerArmed { timer, after, floor: None } => format!("{timer} timer armed: {}", secs(after)),
        EventKind::TimerDisarmed { timer, reason } => format!("{timer} timer off: {reason}"),
        EventKind::TimerFired { timer, after, .. } => format!("{timer} timer FIRED after {}", secs(after)),
        EventKind::TimerHeld { timer, after, lag } => format!(
            "{timer} timer held after {}: our runtime ran {} late, not acted on (client overloaded)",
            secs(after),
            secs(lag)
        ),
        EventKind::TimerWouldFire { timer, after } => {
            format!("our {timer} timer ({}) would have fired here (observed: not acted on)", secs(after))
        }
        EventKind::AgentDisconnected => "the agent disconnected".to_owned(),
        EventKind::RateLimitObserved { requests_remaining, tokens_remaining, exhausted_reset } => {
            let n = |v: &Option<u64>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
            let reset = exhausted_reset.as_ref().map(|d| format!(", resets in {}", secs(d))).unwrap_or_default();
            format!("rate limit: {} requests, {} tokens left{reset}", n(requests_remaining), n(tokens_remaining))
        }
        EventKind::RateLimitLow { bucket, remaining, limit, reset } => {
            let of = limit.map(|l| format!(" of {l}")).unwrap_or_default();
            let reset = reset.as_ref().map(|d| format!(", refills in {}", secs(d))).unwrap_or_default();
            format!("rate limit running low: {remaining}{of} {bucket} left{reset}")
        }
        EventKind::AttemptEnded { end, stop_reason } => {
            let stop = stop_reason.as_deref().map(|s| format!(", stop reason {s}")).unwrap_or_default();
            format!("attempt ended: {end}{stop}")
        }
        EventKind::BodyRecorded { body } => match body {
            crate::core::event::RecordedBody::Text { texts, truncated } => {
                format!("body recorded: {} event texts{}", texts.len(), if *truncated { " (cut)" } else { "" })
            }
            crate::core::event::RecordedBody::Raw { bytes, truncated } => {
                format!("body recorded: {} bytes{}", bytes.len(), if *truncated { " (cut)" } else { "" })
            }
        },
        EventKind::ErrorClassified { category, timer, status, retryable, rule, message } => {
            let timer = timer.map(|t| format!("/{t}")).unwrap_or_default();
            let status = status.map(|s| format!(" HTTP {s}")).unwrap_or_default();
            let retry = if *retryable { "retryable" } else { "final" };
            format!("error {category}{timer}{status} ({retry}; rule {rule}): {message}")
        }
        EventKind::BackoffScheduled { retry, category, nominal, sleep, reason } => {
            let why = match reason {
                SleepReason::Backoff => format!("backoff, nominal {}", secs(nominal)),
                SleepReason::ServerRequested { header } => format!("server asked via {header}: {}", secs(nominal)),
            };
            format!("retry {retry} ({category}) after sleeping {} ({why})", secs(sleep))
        }
        EventKind::ServerWaitRefused { requested, cap } => {
            format!("server asked to wait {}, above the cap {}: not slept", secs(requested), secs(cap))
        }
        EventKind::RetryBudgetRefused { provider, in_flight, limit } => {
            format!("fleet retry budget refused a retry on {provider} ({in_flight} in flight, limit {limit})")
        }
        EventKind::FailedOver { from, to, reason } => format!("failover {from} → {to} ({reason})"),
        EventKind::CredentialCooledDown { provider, credential, cooldown } => {
            format!("{provider} key #{credential} rests for {}", secs(cooldown))
        }
        EventKind::CredentialRotated { provider, from, to } => format!("{provider} key #{from} → #{to}"),
        EventKind::PartialRecovered { chars, category } => format!("partial recovery: kept {chars} chars ({category})"),
        EventKind::Finished { outcome, attempts, stop_reason } => {
            let stop = stop_reason.as_deref().map(|s| format!(", stop reason {s}")).unwrap_or_default();
            format!("finished: {} after {attempts} attempt(s){stop}", outcome.name())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::failover::Target;
    use crate::diagnosis::fixtures::{agent_gone_on_a_silent_stall, held_on_a_late_runtime, stored};

    fn event(ms: u64, stream: StreamId, attempt: u32, kind: EventKind) -> Event {
        Event { at: Duration::from_millis(ms), stream, attempt, kind }
    }

    /// Gui review D17: the log names a phase in the JSON's words, not the
    /// enum's Rust name.
    #[test]
    fn the_log_names_a_phase_as_the_json_does() {
        let phase = EventKind::PhaseChanged { phase: crate::core::event::AttemptPhase::AwaitingHeaders };
        assert_eq!(describe(&phase), "phase: awaiting_headers");
    }

    /// A stall, a backoff, a second attempt that completes.
    fn stalled_then_ok() -> Vec<Event> {
        let t = Target::new("sim", "a");
        let idle = |ms, kind| event(ms, 0, 1, kind);
        vec![
            event(0, 0, 0, EventKind::CallStarted { target: t.clone(), context_tokens: None }),
            idle(0, EventKind::AttemptStarted { target: t.clone(), credential: None }),
            idle(0, EventKind::TimerArmed { timer: TimerKind::Idle, after: Duration::from_secs(1), floor: None }),
            idle(100, EventKind::ChunkReceived { bytes: 50 }),
            idle(100, EventKind::SseReceived { class: EventClass::Lifecycle, chars: 0, progress: false }),
            idle(1100, EventKind::TimerFired { timer: TimerKind::Idle, after: Duration::from_secs(1), lag: None }),
            idle(
                1100,
                EventKind::BackoffScheduled {
                    retry: 1,
                    category: Category::Timeout,
                    nominal: Duration::from_millis(50),
                    sleep: Duration::from_millis(60),
                    reason: SleepReason::Backoff,
                },
            ),
            event(1160, 0, 2, EventKind::AttemptStarted { target: t, credential: None }),
            event(1200, 0, 2, EventKind::ChunkReceived { bytes: 70 }),
            event(1200, 0, 2, EventKind::SseReceived { class: EventClass::Content, chars: 4, progress: true }),
            event(1300, 0, 2, EventKind::Finished { outcome: Outcome::Ok, attempts: 2, stop_reason: None }),
        ]
    }

    /// Two streams interleaved in time: the stall that recovers, and a call
    /// under a deadline that hits a rate limit, fails over and fails.
    fn two_streams() -> Vec<Event> {
        let (p, q) = (Target::new("p", "m"), Target::new("q", "m"));
        let mut events = stalled_then_ok();
        let second = |ms, attempt, kind| event(ms, 1, attempt, kind);
        events.extend([
            second(20, 0, EventKind::CallStarted { target: p.clone(), context_tokens: Some(10) }),
            second(
                20,
                0,
                EventKind::TimerArmed { timer: TimerKind::Deadline, after: Duration::from_secs(2), floor: None },
            ),
            second(20, 1, EventKind::AttemptStarted { target: p.clone(), credential: Some(0) }),
            second(
                20,
                1,
                EventKind::TimerArmed { timer: TimerKind::Ttfb, after: Duration::from_millis(500), floor: None },
            ),
            second(
                90,
                1,
                EventKind::RateLimitLow { bucket: "requests".into(), remaining: 1, limit: None, reset: None },
            ),
            second(
                90,
                1,
                EventKind::ErrorClassified {
                    category: Category::RateLimit,
                    timer: None,
                    status: Some(429),
                    retryable: true,
                    rule: "builtin".into(),
                    message: "HTTP 429".into(),
                },
            ),
            second(95, 1, EventKind::FailedOver { from: p, to: q.clone(), reason: Category::RateLimit }),
            second(95, 2, EventKind::AttemptStarted { target: q, credential: None }),
            second(
                95,
                2,
                EventKind::TimerArmed { timer: TimerKind::Idle, after: Duration::from_millis(300), floor: None },
            ),
            second(150, 2, EventKind::ChunkReceived { bytes: 10 }),
            second(300, 2, EventKind::ChunkReceived { bytes: 12 }),
            second(
                600,
                2,
                EventKind::TimerFired { timer: TimerKind::Idle, after: Duration::from_millis(300), lag: None },
            ),
            second(600, 2, EventKind::Finished { outcome: Outcome::Failed, attempts: 2, stop_reason: None }),
        ]);
        events.sort_by_key(|e| e.at);
        events
    }

    /// A throughput floor of 5 a second over 1 s: twenty events in the
    /// first half second, then one every half second, until it fires.
    fn crawl() -> Vec<Event> {
        let e = |ms, kind| event(ms, 1, 1, kind);
        let armed =
            EventKind::TimerArmed { timer: TimerKind::MinRate, after: Duration::from_secs(1), floor: Some(5.0) };
        let progress = || EventKind::SseReceived { class: EventClass::Content, chars: 4, progress: true };
        let mut events = vec![e(0, armed)];
        events.extend((0..20).map(|i| e(i * 25, progress())));
        events.extend([975, 1475].map(|ms| e(ms, progress())));
        let fired = EventKind::TimerFired { timer: TimerKind::MinRate, after: Duration::from_secs(1), lag: None };
        events.push(e(1500, fired));
        events
    }

    #[test]
    fn the_floor_s_track_climbs_as_the_rate_falls_to_the_floor() {
        let events = crawl();
        let timeline = Timeline::from_events("x", &events);
        let track = &timeline.lanes[0].timers[0];
        assert_eq!((track.kind, track.label().as_str()), (TimerKind::MinRate, "min_rate 5/s over 1 s"));
        let at = |s: f64| track.progress.iter().rev().find(|p| (p.x - s).abs() < 1e-9).map(|p| p.y).unwrap();
        // Half a second in, the floor asked for 2.5 events and 20 came.
        assert!((at(0.475) - 2.375 / 20.0).abs() < 1e-9, "{}", at(0.475));
        assert!((at(0.975) - 4.875 / 21.0).abs() < 1e-9, "{}", at(0.975));
        // The window to 1.475 s held two: below the floor's five.
        assert_eq!((at(1.475), track.fired), (1.0, true));

        // A rewind restores the window the events changed in place.
        assert_rewinds_across(&events, 22);
    }

    /// A timeline of `events` rewound to its checkpoint after the first
    /// `at` of them is the timeline of those alone.
    fn assert_rewinds_across(events: &[Event], at: usize) {
        let mut live = Timeline::new();
        let part = live.add_part("x", 0.0);
        events[..at].iter().for_each(|e| live.ingest(part, e));
        let mark = live.checkpoint();
        events[at..].iter().for_each(|e| live.ingest(part, e));
        live.rewind(&mark);
        assert_eq!(live, Timeline::from_events("x", &events[..at]));
    }

    #[test]
    fn rewinding_to_a_checkpoint_then_taking_events_again_gives_the_same_timeline() {
        let events = two_streams();
        let build = |n: usize| Timeline::from_events("x", &events[..n]);
        let mut whole = Timeline::new();
        let part = whole.add_part("x", 0.0);
        let mut checkpoints = vec![whole.checkpoint()];
        for event in &events {
            whole.ingest(part, event);
            checkpoints.push(whole.checkpoint());
        }
        assert_eq!(whole, build(events.len()));
        // From every later point, back to every checkpoint and forward again.
        for (at, checkpoint) in checkpoints.iter().enumerate() {
            assert_eq!(checkpoint.event_count(), at as u64);
            for to in at..=events.len() {
                for from in to..=events.len() {
                    let mut timeline = build(from);
                    timeline.rewind(checkpoint);
                    assert_eq!(timeline, build(at), "rewound from {from} to {at}");
                    for event in &events[at..to] {
                        timeline.ingest(part, event);
                    }
                    assert_eq!(timeline, build(to), "rewound from {from} to {at}, then forward to {to}");
                }
            }
        }
    }

    /// An observed agent that gave up on a silent stream, as observe sends
    /// it (our timer's mark after the call's end) and as the store reads it
    /// back (in its time place): the same lane, the mark and the agent's
    /// going on it, and its log in time order for hovering.
    #[test]
    fn an_observed_call_s_marks_read_alike_sent_and_stored() {
        let sent = agent_gone_on_a_silent_stall(0);
        let live = Timeline::from_events("observe", &sent);
        assert_eq!(live, Timeline::from_events("observe", &stored(&sent)));
        let lane = &live.lanes[0];
        assert_eq!(lane.would_fire, [WouldFire { timer: TimerKind::Idle, budget_s: 0.4, at_s: 0.41 }]);
        assert_eq!(lane.would_fire[0].label(), "idle 400 ms would fire");
        let gone: Vec<&str> = lane.agent_gone.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(gone, ["agent gone after 1.00 s of silence"]);
        assert!(lane.log.windows(2).all(|w| w[0].at_s <= w[1].at_s), "{:?}", lane.log);
        let near = lane.describe_near(0.41, 0.005).unwrap();
        assert!(near.ends_with("our idle timer (0.400 s) would have fired here (observed: not acted on)"), "{near}");
        assert!(lane.describe_near(1.01, 0.0005).unwrap().ends_with("the agent disconnected"));
    }

    /// A timer held for our own lateness is not a fired one: its line
    /// reaches the top and climbs again from the foot, its mark is its own,
    /// hovering names the lag, and a rewind across it restores the lane.
    #[test]
    fn a_held_timer_starts_again_under_a_mark_of_its_own() {
        let events = held_on_a_late_runtime(0);
        let timeline = Timeline::from_events("guard", &events);
        let lane = &timeline.lanes[0];
        assert!(lane.fired.is_empty(), "{:?}", lane.fired);
        assert_eq!(lane.held, [Mark { at_s: 1.35, text: "idle held: client late".to_owned() }]);
        let idle = &lane.timers[0];
        let points: Vec<(f64, f64)> = idle.progress.iter().map(|p| (p.x, p.y)).collect();
        let held = points.iter().position(|&p| p == (1.35, 1.0)).unwrap();
        assert_eq!(points[held + 1], (1.35, 0.0), "{points:?}");
        assert!(!idle.fired && !idle.open, "closed by the stream's end, not fired");
        let near = lane.describe_near(1.35, 0.005).unwrap();
        assert!(
            near.ends_with(
                "idle timer held after 1.000 s: our runtime ran 0.350 s late, not acted on (client overloaded)"
            ),
            "{near}"
        );
        assert_rewinds_across(&events, 6);
    }

    #[test]
    fn a_lane_shows_the_stall_the_sleep_and_the_retry() {
        let timeline = Timeline::from_events("silent-stall", &stalled_then_ok());
        assert_eq!(timeline.lanes.len(), 1);
        let lane = &timeline.lanes[0];
        assert_eq!(lane.total_bytes, 120);
        assert_eq!(lane.bytes.last().map(|p| (p.x, p.y)), Some((1.2, 120.0)));
        assert_eq!((lane.output_ticks.len(), lane.lifecycle_ticks.len()), (1, 1));
        assert_eq!(lane.attempts.len(), 2);
        assert_eq!(lane.attempt_count, 2);
        let idle = &lane.timers[0];
        assert!(idle.fired && !idle.open);
        // Armed at 0, reset by the chunk at 0.1 (10 % of its budget), fired at 1.1.
        let ys: Vec<f64> = idle.progress.iter().map(|p| p.y).collect();
        assert_eq!(ys.len(), 4);
        assert!((ys[1] - 0.1).abs() < 1e-9 && ys[2] == 0.0 && ys[3] == 1.0, "{ys:?}");
        assert_eq!(lane.fired.len(), 1);
        assert_eq!(lane.sleeps[0].reason, "backoff");
        assert!((lane.sleeps[0].end_s - 1.16).abs() < 1e-9);
        assert_eq!(lane.retries[&Category::Timeout], 1);
        assert_eq!(lane.outcome, Some(Outcome::Ok));
        let summary = timeline.summary();
        assert_eq!((summary.ok, summary.running), (1, 0));
        assert!((summary.p50_s.unwrap() - 1.3).abs() < 1e-9);
    }

    #[test]
    fn the_call_deadline_runs_across_attempts() {
        let mut events = stalled_then_ok();
        let armed = EventKind::TimerArmed { timer: TimerKind::Deadline, after: Duration::from_secs(10), floor: None };
        events.insert(1, event(0, 0, 0, armed));
        let timeline = Timeline::from_events("x", &events);
        let deadline = timeline.lanes[0].timers.iter().find(|t| t.kind == TimerKind::Deadline).unwrap();
        // Still armed through the first attempt's failure and the retry; it
        // stops at the finish, 13 % of the way.
        assert_eq!(deadline.progress.len(), 2);
        assert!(!deadline.open && !deadline.fired);
        assert!((deadline.progress[1].x - 1.3).abs() < 1e-9 && (deadline.progress[1].y - 0.13).abs() < 1e-9);
    }

    /// A connection closed before the stream was done is marked with the
    /// silence before it, from the attempt's last sign of life.
    #[test]
    fn a_cut_is_marked_with_the_silence_before_it() {
        let closed =
            EventKind::AttemptEnded { end: AttemptEnd::Transport { kind: TransportKind::Closed }, stop_reason: None };
        let events = [
            event(0, 0, 1, EventKind::AttemptStarted { target: Target::new("p", "m"), credential: None }),
            event(10, 0, 1, EventKind::HeadersReceived { status: 200, content_type: None }),
            event(90, 0, 1, EventKind::ChunkReceived { bytes: 100 }),
            event(2_010, 0, 1, closed),
        ];
        let timeline = Timeline::from_events("x", &events);
        assert_eq!(timeline.lanes[0].cuts, [Mark { at_s: 2.01, text: "closed after 1.92 s of silence".into() }]);
    }

    #[test]
    fn a_bucket_running_low_is_marked_and_described() {
        let mut events = stalled_then_ok();
        let low = EventKind::RateLimitLow {
            bucket: "tokens".into(),
            remaining: 40,
            limit: Some(1000),
            reset: Some(Duration::from_secs(6)),
        };
        events.insert(2, event(50, 0, 1, low));
        let lane = &Timeline::from_events("x", &events).lanes[0];
        assert_eq!(lane.low_buckets, [Mark { at_s: 0.05, text: "40 tokens left".into() }]);
        let hover = lane.describe_near(0.05, 0.001).unwrap();
        assert!(hover.contains("rate limit running low: 40 of 1000 tokens left, refills in 6.000 s"), "{hover}");
    }

    #[test]
    fn output_arriving_all_at_once_is_one_burst_and_a_steady_stream_none() {
        let content = || EventKind::SseReceived { class: EventClass::Content, chars: 4, progress: true };
        // A steady stream, 25 ms apart, then twelve events in one read at 2 s.
        let mut events: Vec<Event> = (0..20).map(|i| event(i * 25, 0, 1, content())).collect();
        events.extend((0..12).map(|_| event(2000, 0, 1, content())));
        let whole = Timeline::from_events("x", &events);
        let lane = &whole.lanes[0];
        assert_eq!(lane.bursts.len(), 1, "{:?}", lane.bursts);
        assert!((lane.bursts[0].at_s - 2.0).abs() < 1e-9);
        // Rewound to before the burst, then forward: the same, once.
        let mut timeline = Timeline::from_events("x", &events[..20]);
        let checkpoint = timeline.checkpoint();
        for event in &events[20..] {
            timeline.ingest(0, event);
        }
        timeline.rewind(&checkpoint);
        assert!(timeline.lanes[0].bursts.is_empty());
        for event in &events[20..] {
            timeline.ingest(0, event);
        }
        assert_eq!(timeline, whole);
    }

    #[test]
    fn hovering_finds_the_nearest_event() {
        let timeline = Timeline::from_events("x", &stalled_then_ok());
        let lane = &timeline.lanes[0];
        let burst = lane.describe_near(1.09, 0.02).unwrap();
        let lines: Vec<&str> = burst.lines().collect();
        assert_eq!(lines.len(), 2, "{burst}");
        assert!(lines[0].contains("idle timer FIRED") && lines[1].contains("retry 1 (timeout)"), "{burst}");
        let tick = lane.describe_near(0.1, 0.01).unwrap();
        assert!(tick.contains("lifecycle event") && tick.contains("50 bytes"), "{tick}");
        assert_eq!(lane.describe_near(0.5, 0.01), None);
    }

    fn verdict(kind: VerdictKind) -> Diagnosis {
        Diagnosis::bare(kind, crate::diagnosis::Severity::Recovered)
    }

    #[test]
    fn a_lane_shows_its_verdict_once_it_has_finished_and_keeps_it_through_a_rewind() {
        let events = stalled_then_ok();
        let mut timeline = Timeline::new();
        let part = timeline.add_part("x", 0.0);
        timeline.set_verdict(part, 0, verdict(VerdictKind::SilentStall));
        let (last, before) = events.split_last().unwrap();
        for event in before {
            timeline.ingest(part, event);
        }
        let checkpoint = timeline.checkpoint();
        assert_eq!(timeline.verdict(&timeline.lanes[0]), None, "still going");
        timeline.ingest(part, last);
        assert_eq!(timeline.verdict(&timeline.lanes[0]).map(|d| d.kind), Some(VerdictKind::SilentStall));
        timeline.rewind(&checkpoint);
        assert_eq!(timeline.verdict(&timeline.lanes[0]), None);
        timeline.ingest(part, last);
        assert_eq!(timeline.verdict(&timeline.lanes[0]).map(|d| d.kind), Some(VerdictKind::SilentStall));
        // A recording that ends before its stream did: incomplete, whatever the cursor.
        timeline.set_verdict(part, 0, verdict(VerdictKind::Incomplete));
        timeline.rewind(&checkpoint);
        assert_eq!(timeline.verdict(&timeline.lanes[0]).map(|d| d.kind), Some(VerdictKind::Incomplete));
    }

    /// Gui review D6: a what-if stream whose end cannot be told ends its
    /// replay in a cancellation that was never the call's; its lane reads
    /// and counts as unknown.
    #[test]
    fn a_what_if_lane_whose_end_is_unknown_reads_unknown_not_cancelled() {
        let mut timeline = Timeline::new();
        let part = timeline.add_part("what-if", 0.0);
        let start = event(0, 0, 0, EventKind::CallStarted { target: Target::new("p", "m"), context_tokens: None });
        let cancelled =
            event(5, 0, 0, EventKind::Finished { outcome: Outcome::Cancelled, attempts: 1, stop_reason: None });
        for e in [&start, &cancelled] {
            timeline.ingest(part, e);
        }
        assert_eq!(timeline.outcome_name(&timeline.lanes[0]), "cancelled");
        timeline.set_verdict(part, 0, verdict(VerdictKind::Unknown));
        assert_eq!(timeline.outcome_name(&timeline.lanes[0]), "unknown");
        let summary = timeline.summary();
        assert_eq!((summary.cancelled, summary.unknown), (0, 1));
    }

    #[test]
    fn parts_keep_their_streams_apart_and_shift_their_clocks() {
        let mut timeline = Timeline::new();
        let a = timeline.add_part("healthy", 0.0);
        let b = timeline.add_part("drip", 2.0);
        let start =
            |ms| event(ms, 0, 0, EventKind::CallStarted { target: Target::new("p", "m"), context_tokens: None });
        timeline.ingest(a, &start(10));
        timeline.ingest(b, &start(10));
        assert_eq!(timeline.lanes.len(), 2);
        assert_eq!(timeline.label(&timeline.lanes[1]), "drip");
        assert!((timeline.lanes[1].started_s - 2.01).abs() < 1e-9);
        assert_eq!(timeline.summary().running, 2);
    }
}
