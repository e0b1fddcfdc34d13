//! One pass over a stream's events, folded into the facts the detectors
//! read: per attempt, counters and a few moments; per call, how it ended.
//!
//! Nothing is kept per chunk or per parsed event, and of headers and
//! error texts only what a verdict quotes, so a stream of a million chunks
//! costs the memory of one of ten and the live collector can hold every
//! stream of a large run. Events are taken in the order the core
//! emitted them (the store reads a stream back in that order), except
//! observe's would-fire marks, which are sent once their attempt has
//! ended and read back in their time place: either order folds alike.

use std::time::Duration;

use crate::core::category::{Category, TimerKind};
use crate::core::event::{AttemptEnd, AttemptPhase, Event, EventClass, EventKind, Outcome, SleepReason};
use crate::core::failover::Target;
use crate::core::rate_window::RateWindow;

use super::reading::{PEER_HEADERS, WAIT_HEADERS};
use super::text::{QUOTE, clip};

/// Bytes that arrive within this long of the first one count as one burst:
/// a proxy that held the stream releases it in a few reads this close
/// together, while a model streams tokens tens of milliseconds apart.
pub(super) const BURST_WINDOW: Duration = Duration::from_millis(50);

/// A timer that fired.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Fired {
    pub timer: TimerKind,
    /// The attempt the event named (for the deadline after an attempt, the
    /// attempt it followed).
    pub attempt: u32,
    pub budget: Duration,
    pub at: Duration,
    pub lag: Option<Duration>,
}

/// One of our timers that would have fired on an attempt observe relayed
/// without acting (its clocks off), under the tunables in force.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct WouldFire {
    pub timer: TimerKind,
    pub budget: Duration,
    /// Where it would have fired.
    pub at: Duration,
}

/// One of our timers that came due while our own runtime was late by a
/// tenth of its budget or more, and was held, not acted on (guard mode):
/// its clock started again there.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Hold {
    pub timer: TimerKind,
    pub budget: Duration,
    /// When it was noticed.
    pub at: Duration,
    pub lag: Duration,
}

/// The classifier's reading of a failure.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Classified {
    pub category: Category,
    pub status: Option<u16>,
    pub retryable: bool,
    pub rule: String,
    pub message: String,
    pub at: Duration,
}

/// The sleep before the next attempt.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Backoff {
    pub category: Category,
    pub sleep: Duration,
    /// What the server asked for, when it asked.
    pub requested: Option<(Duration, String)>,
    pub at: Duration,
}

/// The fleet retry budget refused a retry.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct FleetRefusal {
    pub provider: String,
    pub in_flight: usize,
    pub limit: usize,
    pub at: Duration,
}

/// One attempt, or a failure between attempts (`number` 0: no request was
/// sent, e.g. every key of the pool was resting), with what followed it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Try {
    pub number: u32,
    pub target: Option<Target>,
    pub started_at: Option<Duration>,
    pub phase: Option<AttemptPhase>,
    pub headers_at: Option<Duration>,
    pub status: Option<u16>,
    /// The headers verdicts read (who answered, waits asked for).
    pub headers: Vec<(String, String)>,
    /// The start of the error body, as much as a verdict quotes.
    pub error_body: Option<String>,
    pub chunks: u64,
    pub bytes: u64,
    pub first_byte_at: Option<Duration>,
    pub last_byte_at: Option<Duration>,
    /// Bytes and progress events within [`BURST_WINDOW`] of the first byte.
    pub burst_bytes: u64,
    pub burst_progress: u64,
    pub events: u64,
    pub progress: u64,
    pub keepalives_since_progress: u64,
    pub last_progress_at: Option<Duration>,
    pub first_reasoning_at: Option<Duration>,
    pub first_content_at: Option<Duration>,
    /// The longest time without a byte, counted as the idle timer counts:
    /// from the request, and again from the headers, which reset it.
    pub longest_silence: Duration,
    /// The longest time without progress, counted from the headers as the
    /// data-stall timer counts.
    pub longest_no_progress: Duration,
    /// The last budget each timer was armed with ([`TimerKind::ALL`] order);
    /// `None` when never armed or switched off.
    pub armed: [Option<Duration>; TimerKind::ALL.len()],
    /// The throughput floor as armed, with the progress it counted since.
    pub floor: Option<FloorSeen>,
    pub fired: Option<Fired>,
    /// Our timers held for our own lateness, in order.
    pub held: Vec<Hold>,
    pub end: Option<AttemptEnd>,
    pub ended_at: Option<Duration>,
    pub classified: Option<Classified>,
    /// The longest reset among exhausted rate-limit buckets.
    pub exhausted_reset: Option<Duration>,
    pub backoff: Option<Backoff>,
    /// A server wait refused for exceeding the cap: (asked, cap, when).
    pub wait_refused: Option<(Duration, Duration, Duration)>,
    pub fleet_refused: Option<FleetRefusal>,
    /// The call deadline fired after this attempt (a backoff would have
    /// crossed it).
    pub deadline_after: Option<Fired>,
    pub failed_over: Option<Hop>,
    /// When the agent whose call observe relayed disconnected before its
    /// response was complete.
    pub agent_gone_at: Option<Duration>,
    /// Our timer that would have fired on it, where observe's replay found
    /// one: read alike whether it comes after the call's end (as sent) or
    /// in its time place (as stored).
    pub would_fire: Option<WouldFire>,
    pub last_at: Duration,
}

/// A failover hop after a try.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Hop {
    pub from: Target,
    pub to: Target,
    pub at: Duration,
}

/// The throughput floor of one attempt: its rate, when it started, and
/// the progress events since, counted as the governor counts them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct FloorSeen {
    /// Progress events a second.
    pub floor: f64,
    /// When it was armed.
    pub since: Duration,
    pub window: RateWindow,
}

impl FloorSeen {
    /// The progress events of the window that ended at `at` (the one the
    /// floor judged when it fired then).
    pub fn held_before(&self, at: Duration) -> u64 {
        self.window.in_window(at.saturating_sub(self.since).saturating_sub(Duration::from_nanos(1)))
    }
}

impl Try {
    /// A timer's armed budget.
    pub fn armed(&self, timer: TimerKind) -> Option<Duration> {
        self.armed[timer_index(timer)]
    }

    /// When the attempt's clock stops: its end, else its last event.
    pub fn stopped_at(&self) -> Duration {
        self.ended_at.unwrap_or(self.last_at)
    }

    /// A header's value (the first of that name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The first of `names` it has, with its value.
    pub fn first_header(&self, names: &[&'static str]) -> Option<(&'static str, &str)> {
        names.iter().find_map(|&name| self.header(name).map(|value| (name, value)))
    }

    /// Whether the attempt was a failure (it ended other than done).
    pub fn failed(&self) -> bool {
        self.classified.is_some() || self.end.as_ref().is_some_and(|e| *e != AttemptEnd::Done)
    }

    /// Whether anything followed it within the call: a retry or a hop.
    pub fn followed(&self) -> bool {
        self.backoff.is_some() || self.failed_over.is_some()
    }

    fn settled(&self) -> bool {
        self.end.is_some() || self.classified.is_some()
    }

    /// When the idle clock last restarted: the last byte, else the
    /// headers, else the request.
    pub fn last_sign_of_life(&self) -> Option<Duration> {
        self.last_byte_at.or(self.headers_at).or(self.started_at)
    }

    fn headers(&mut self, at: Duration, status: u16) {
        let since = self.started_at.unwrap_or(at);
        self.longest_silence = self.longest_silence.max(at.saturating_sub(since));
        self.headers_at = Some(at);
        self.status = Some(status);
    }

    fn chunk(&mut self, at: Duration, n: usize) {
        let n = n as u64;
        let since = self.last_sign_of_life().unwrap_or(at);
        self.longest_silence = self.longest_silence.max(at.saturating_sub(since));
        let first = *self.first_byte_at.get_or_insert(at);
        if at.saturating_sub(first) <= BURST_WINDOW {
            self.burst_bytes += n;
        }
        self.last_byte_at = Some(at);
        self.chunks += 1;
        self.bytes += n;
    }

    fn parsed(&mut self, at: Duration, class: EventClass, progress: bool) {
        self.events += 1;
        match class {
            EventClass::Keepalive => self.keepalives_since_progress += 1,
            EventClass::Reasoning => {
                self.first_reasoning_at.get_or_insert(at);
            }
            EventClass::Content | EventClass::ToolCall => {
                self.first_content_at.get_or_insert(at);
            }
            EventClass::Lifecycle | EventClass::Error => {}
        }
        if progress {
            let since = self.last_progress_at.or(self.headers_at).unwrap_or(at);
            self.longest_no_progress = self.longest_no_progress.max(at.saturating_sub(since));
            self.last_progress_at = Some(at);
            self.progress += 1;
            self.keepalives_since_progress = 0;
            if let Some(floor) = &mut self.floor {
                floor.window.count(at.saturating_sub(floor.since));
            }
            if self.first_byte_at.is_some_and(|first| at.saturating_sub(first) <= BURST_WINDOW) {
                self.burst_progress += 1;
            }
        }
    }

    /// Counts the silence the attempt's timers saw up to its end.
    fn close(&mut self, at: Duration) {
        if self.ended_at.is_none() {
            self.ended_at = Some(at);
            let since = self.last_sign_of_life().unwrap_or(at);
            self.longest_silence = self.longest_silence.max(at.saturating_sub(since));
            if let Some(headers) = self.headers_at {
                let since = self.last_progress_at.unwrap_or(headers);
                self.longest_no_progress = self.longest_no_progress.max(at.saturating_sub(since));
            }
        }
    }

    /// Time from the attempt's start to `at`, for evidence.
    pub fn offset(&self, at: Duration) -> Duration {
        at.saturating_sub(self.started_at.unwrap_or(at))
    }
}

/// How the call ended.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Finished {
    pub outcome: Outcome,
    pub at: Duration,
}

/// Everything one stream's events say.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct CallFacts {
    pub events: u64,
    pub started_at: Option<Duration>,
    pub tries: Vec<Try>,
    pub finished: Option<Finished>,
    /// Characters partial recovery kept.
    pub partial_chars: Option<usize>,
    /// Cancelled while sleeping before a retry.
    pub cancelled_between: bool,
    pub last_at: Duration,
}

impl CallFacts {
    /// Folds one event in.
    pub fn push(&mut self, event: &Event) {
        let at = event.at;
        self.events += 1;
        self.last_at = self.last_at.max(at);
        match &event.kind {
            EventKind::CallStarted { .. } => {
                self.started_at.get_or_insert(at);
            }
            EventKind::AttemptStarted { target, .. } => {
                self.tries.push(Try {
                    number: event.attempt,
                    target: Some(target.clone()),
                    started_at: Some(at),
                    last_at: at,
                    ..Try::default()
                });
            }
            EventKind::ErrorClassified { category, status, retryable, rule, message, .. } => {
                let classified = Classified {
                    category: *category,
                    status: *status,
                    retryable: *retryable,
                    rule: rule.clone(),
                    message: clip(message, QUOTE),
                    at,
                };
                let own_reading = self.tries.iter().rev().find(|t| t.number == event.attempt);
                if event.attempt == 0 {
                    // A failure between attempts: no request was sent.
                    self.tries.push(Try { classified: Some(classified), last_at: at, ..Try::default() });
                } else if own_reading.is_some_and(|t| t.classified.is_some()) {
                    // The executor's own reading after the attempt's
                    // (cancelled in backoff, a backoff past the deadline)
                    // never replaces what the attempt's failure was.
                    self.cancelled_between |= *category == Category::Cancelled;
                } else {
                    self.attempt(event.attempt, at).classified = Some(classified);
                }
            }
            EventKind::Finished { outcome, .. } => {
                self.finished = Some(Finished { outcome: *outcome, at });
                if let Some(last) = self.tries.last_mut() {
                    last.close(at);
                }
            }
            EventKind::PartialRecovered { chars, .. } => self.partial_chars = Some(*chars),
            // The call's deadline, armed before any attempt.
            EventKind::TimerArmed { .. } if event.attempt == 0 && self.tries.is_empty() => {}
            kind => self.attempt_event(event.attempt, at, kind),
        }
    }

    /// The try an event belongs to: the last one, unless the event names
    /// another attempt (a try is made for an attempt whose start was not
    /// recorded).
    fn attempt(&mut self, number: u32, at: Duration) -> &mut Try {
        let index = match self.tries.iter().rposition(|t| t.number == number) {
            Some(index) => index,
            None if number == 0 && !self.tries.is_empty() => self.tries.len() - 1,
            None => {
                self.tries.push(Try { number, last_at: at, ..Try::default() });
                self.tries.len() - 1
            }
        };
        &mut self.tries[index]
    }

    fn attempt_event(&mut self, number: u32, at: Duration, kind: &EventKind) {
        // What follows a failure (a sleep, a refusal, a hop, the deadline
        // between attempts) belongs to the last try, which may be a failure
        // between attempts that carries no number of its own.
        let settled = self.tries.iter().rev().find(|t| t.number == number).is_some_and(Try::settled);
        let after = matches!(
            kind,
            EventKind::BackoffScheduled { .. }
                | EventKind::ServerWaitRefused { .. }
                | EventKind::RetryBudgetRefused { .. }
                | EventKind::FailedOver { .. }
        ) || (settled && matches!(kind, EventKind::TimerFired { .. }));
        if after {
            if let Some(last) = self.tries.last_mut() {
                last.last_at = last.last_at.max(at);
                last.after(number, at, kind);
            }
            return;
        }
        let t = self.attempt(number, at);
        t.last_at = t.last_at.max(at);
        match kind {
            EventKind::PhaseChanged { phase } => t.phase = Some(*phase),
            EventKind::HeadersReceived { status, .. } => t.headers(at, *status),
            EventKind::ResponseHeaders { headers } => {
                let read = |name: &str| PEER_HEADERS.contains(&name) || WAIT_HEADERS.contains(&name);
                t.headers.extend(headers.iter().filter(|(name, _)| read(name)).cloned());
            }
            EventKind::ErrorBody { body, .. } => t.error_body = Some(clip(body, QUOTE)),
            EventKind::ChunkReceived { bytes } => t.chunk(at, *bytes),
            EventKind::SseReceived { class, progress, .. } => t.parsed(at, *class, *progress),
            EventKind::TimerArmed { timer, after, floor } => {
                t.armed[timer_index(*timer)] = Some(*after);
                if let Some(floor) = floor {
                    t.floor = Some(FloorSeen { floor: *floor, since: at, window: RateWindow::new(*after) });
                }
            }
            EventKind::TimerDisarmed { timer, .. } => t.armed[timer_index(*timer)] = None,
            EventKind::TimerFired { timer, after, lag } => {
                t.fired = Some(Fired { timer: *timer, attempt: number, budget: *after, at, lag: *lag });
                t.close(at);
            }
            EventKind::TimerHeld { timer, after, lag } => {
                t.held.push(Hold { timer: *timer, budget: *after, at, lag: *lag });
                // A held floor judges a fresh window from here, as the
                // governor's does.
                if *timer == TimerKind::MinRate
                    && let Some(floor) = &mut t.floor
                {
                    *floor = FloorSeen { since: at, window: RateWindow::new(floor.window.window()), ..*floor };
                }
            }
            EventKind::RateLimitObserved { exhausted_reset, .. } => {
                t.exhausted_reset = t.exhausted_reset.max(*exhausted_reset);
            }
            EventKind::AttemptEnded { end, .. } => {
                t.end = Some(end.clone());
                t.close(at);
            }
            EventKind::AgentDisconnected => t.agent_gone_at = Some(at),
            EventKind::TimerWouldFire { timer, after } => {
                t.would_fire = Some(WouldFire { timer: *timer, budget: *after, at });
            }
            _ => {}
        }
    }
}

impl Try {
    /// Folds in an event about what followed this try.
    fn after(&mut self, number: u32, at: Duration, kind: &EventKind) {
        match kind {
            EventKind::BackoffScheduled { category, nominal, sleep, reason, .. } => {
                let requested = match reason {
                    SleepReason::ServerRequested { header } => Some((*nominal, header.clone())),
                    SleepReason::Backoff => None,
                };
                self.backoff = Some(Backoff { category: *category, sleep: *sleep, requested, at });
            }
            EventKind::ServerWaitRefused { requested, cap } => self.wait_refused = Some((*requested, *cap, at)),
            EventKind::RetryBudgetRefused { provider, in_flight, limit } => {
                self.fleet_refused =
                    Some(FleetRefusal { provider: provider.clone(), in_flight: *in_flight, limit: *limit, at });
            }
            EventKind::FailedOver { from, to, .. } => {
                self.failed_over = Some(Hop { from: from.clone(), to: to.clone(), at });
            }
            EventKind::TimerFired { timer, after, lag } => {
                self.deadline_after = Some(Fired { timer: *timer, attempt: number, budget: *after, at, lag: *lag });
            }
            _ => {}
        }
    }
}

fn timer_index(timer: TimerKind) -> usize {
    TimerKind::ALL.iter().position(|&t| t == timer).unwrap_or(0)
}
