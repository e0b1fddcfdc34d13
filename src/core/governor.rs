//! The stream governor: runs one attempt through its phases under three
//! separate clocks (seed 001 §3), an optional fourth, and the connect, TTFB
//! and total timers.
//!
//! - **Liveness** (`idle`): any byte resets it, pings included.
//! - **Progress** (`data_stall`): only a parsed event of a progress class
//!   resets it, so a proxy that keeps a dead stream alive with pings is
//!   still caught. Armed when headers arrive.
//! - **Deadline**: the whole call's, never reset; it interrupts the attempt
//!   in flight (the defect of seed 000 §4 was a deadline checked only
//!   between attempts).
//! - **Throughput floor** (`min_rate`, off by default): the progress events
//!   of a sliding window (see [`super::rate_window`]) fewer than the floor
//!   asks for, so a stream that keeps making a little progress — which
//!   resets both clocks above — is still caught. It starts at the first
//!   output (or the first progress event, or the headers: the policy's
//!   [`RateStart`]) and judges once a whole window has passed.
//! - **TTFB**: from the request until the first body byte; **total**: the
//!   attempt's optional cap; **connect** is enforced by the transport.
//!
//! Phases: connecting → awaiting headers → awaiting first content →
//! streaming (committed) → done. A response that is not an event stream is
//! read to a bounded size under the same timers (its data-stall clock is
//! never reset, so the whole body must arrive within that budget) and
//! turned into a failure: it never bypasses them.
//!
//! **Held for our own lateness** (guard mode, [`AttemptTimers::hold_when_late`]):
//! a clock that comes due while our runtime runs late by a tenth of its
//! budget or more ([`super::lag`]) only proves the stream was silent for
//! what is left of its budget, so it does not end the attempt: it is
//! reported held and starts again with its whole budget. The call deadline
//! is the caller's bound and is never held. The lag is read only when a
//! clock comes due, never per chunk.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use super::category::TimerKind;
use super::event::{AttemptPhase, Event, EventClass, EventKind, EventSink, RecordedBody, StreamId};
use super::evidence::{BodyCapture, recorded_error_body, recorded_headers};
use super::failure::{Failure, TransportKind};
use super::lag::lag_untrusts;
use super::lag_probe::LagMeter;
use super::policy::{AttemptTimers, BodySettings, RateFloor, RateStart};
use super::rate_window::RateWindow;
use super::ratelimit::RateLimits;
use super::upstream::{AttemptRequest, Body, Chunk, Decoded, Expect, Upstream, is_event_stream};
use super::wake_flag::WakeFlag;

/// How much of an error body is kept for classification.
pub const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Where the attempt's events go and what bounds it from outside.
pub struct AttemptScope<'a> {
    /// Event sink.
    pub sink: &'a dyn EventSink,
    /// The run's epoch, for event timestamps.
    pub epoch: Instant,
    /// The call.
    pub stream: StreamId,
    /// The attempt number.
    pub attempt: u32,
    /// The call's deadline, if any.
    pub deadline: Option<(Instant, Duration)>,
    /// Stops the attempt at once.
    pub cancel: &'a CancellationToken,
    /// The wall clock at `epoch` (see [`super::executor::Executor::wall_epoch`]).
    pub wall_epoch: SystemTime,
    /// What of the body the recording keeps.
    pub bodies: BodySettings,
    /// The run's lag probe, read when a timer fires; `None` reports no lag
    /// (virtual time).
    pub lag: Option<&'a LagMeter>,
    /// The response headers the user rules read, kept beside the
    /// allowlist ([`super::classify::Classifier::headers_read`]).
    pub rule_headers: &'a [String],
}

impl AttemptScope<'_> {
    /// Emits one event stamped now.
    pub fn emit(&self, kind: EventKind) {
        self.emit_at(Instant::now(), kind);
    }

    /// The wall clock at `now`, as the run's decisions see it.
    fn wall_at(&self, now: Instant) -> SystemTime {
        self.wall_epoch + now.saturating_duration_since(self.epoch)
    }

    /// Reports a timer with `budget` due at `due` that fired at `now`, with
    /// the runtime's lag when a probe measures it.
    pub fn timer_fired(&self, timer: TimerKind, budget: Duration, due: Instant, now: Instant) {
        self.fired_late(timer, budget, self.lateness(budget, due, now), now);
    }

    /// How late the runtime ran for a timer with `budget` due at `due` and
    /// noticed at `now`, when a probe measures it.
    fn lateness(&self, budget: Duration, due: Instant, now: Instant) -> Option<Duration> {
        self.lag.map(|meter| meter.lateness(budget, due, now))
    }

    /// Reports a timer with `budget` that fired at `now` while the runtime
    /// ran `lag` late, counted in the run's lag summary.
    fn fired_late(&self, timer: TimerKind, budget: Duration, lag: Option<Duration>, now: Instant) {
        if let (Some(meter), Some(lag)) = (self.lag, lag) {
            meter.count_fired(budget, lag);
        }
        self.emit_at(now, EventKind::TimerFired { timer, after: budget, lag });
    }

    /// Emits one event stamped `at` (saves a clock read per chunk).
    pub fn emit_at(&self, at: Instant, kind: EventKind) {
        self.emit_stamped(self.stamp(at), kind);
    }

    /// `at` as events are stamped: the time since the run's epoch.
    fn stamp(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.epoch)
    }

    /// Emits one event with its stamp worked out already: the events a
    /// chunk brings share one (a subtraction of instants is tens of
    /// instructions).
    fn emit_stamped(&self, stamp: Duration, kind: EventKind) {
        self.sink.emit(Event { at: stamp, stream: self.stream, attempt: self.attempt, kind });
    }
}

/// What an attempt produced, kept on failure too (partial recovery needs it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptProgress {
    /// Output text so far.
    pub content: String,
    /// True once output has streamed: no retry or failover after this.
    pub committed: bool,
    /// The stop reason the stream reported.
    pub stop_reason: Option<String>,
    /// Time from the attempt's start to the first body byte.
    pub ttfb: Option<Duration>,
    /// Body bytes received.
    pub bytes: u64,
    /// Parsed events received.
    pub events: u64,
    /// Keep-alive events received.
    pub keepalives: u64,
    /// The body as recorded, when bodies are recorded.
    pub body: Option<RecordedBody>,
    /// Rate-limit buckets the response said were running low.
    pub low_buckets: Vec<LowBucket>,
}

/// A rate-limit bucket running low, as one response reported it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LowBucket {
    /// `requests`, `tokens`, `input_tokens` or `output_tokens`.
    pub bucket: &'static str,
    /// What was left.
    pub remaining: u64,
    /// The bucket's size, when reported.
    pub limit: Option<u64>,
}

/// One armed timer: it fires `span` after `from`. Kept as the two, not as
/// their sum, so that a reset (two per chunk) is a store: adding a
/// duration to an instant costs tens of instructions, and the sum is only
/// needed when the sleep comes due.
#[derive(Debug, Clone, Copy)]
struct Clock {
    budget: Duration,
    from: Instant,
    span: Duration,
}

impl Clock {
    fn start(budget: Option<Duration>, now: Instant) -> Option<Clock> {
        budget.map(|budget| Clock { budget, from: now, span: budget })
    }

    /// Starts the budget again from `now`.
    fn reset(&mut self, now: Instant) {
        self.from = now;
    }

    fn fires_at(&self) -> Instant {
        after(self.from, self.span)
    }
}

/// `now + budget`, or a moment no attempt reaches when escalation has grown
/// a budget past what an instant can hold.
fn after(now: Instant, budget: Duration) -> Instant {
    now.checked_add(budget).unwrap_or_else(far_future)
}

/// The armed timers of one attempt.
struct Clocks {
    idle: Option<Clock>,
    data_stall: Option<Clock>,
    min_rate: Option<Floor>,
    ttfb: Option<Clock>,
    total: Option<Clock>,
    deadline: Option<Clock>,
    /// Whether a clock that comes due while our runtime is late is held.
    hold_when_late: bool,
}

impl Clocks {
    /// Starts `timer`'s clock again from `now` with its whole budget (the
    /// throughput floor: a fresh window). False for the call deadline, the
    /// caller's bound, which never starts again.
    fn restart(&mut self, timer: TimerKind, now: Instant) -> bool {
        let clock = match timer {
            TimerKind::Idle => &mut self.idle,
            TimerKind::DataStall => &mut self.data_stall,
            TimerKind::Ttfb => &mut self.ttfb,
            TimerKind::Total => &mut self.total,
            TimerKind::MinRate => {
                if let Some(floor) = &mut self.min_rate {
                    floor.restart(now);
                }
                return true;
            }
            TimerKind::Deadline | TimerKind::Connect => return false,
        };
        if let Some(clock) = clock {
            clock.reset(now);
        }
        true
    }

    /// The timer that fires first.
    fn earliest(&self) -> Option<(TimerKind, Clock)> {
        [
            (TimerKind::Deadline, self.deadline),
            (TimerKind::Total, self.total),
            (TimerKind::Ttfb, self.ttfb),
            (TimerKind::DataStall, self.data_stall),
            (TimerKind::MinRate, self.min_rate.as_ref().map(|floor| floor.clock)),
            (TimerKind::Idle, self.idle),
        ]
        .into_iter()
        .filter_map(|(kind, clock)| clock.map(|c| (kind, c)))
        .min_by_key(|(_, c)| c.fires_at())
    }
}

/// The armed throughput floor. Its clock's `fires_at` is the first moment
/// the window could be below the floor, as of when it was last worked out:
/// progress only moves that later, so, like the other clocks' resets,
/// counting an event leaves the clock alone and [`on_wake`] works it out
/// again when it comes due.
struct Floor {
    clock: Clock,
    started: Instant,
    /// Where the window's current slot ends.
    slot_end: Instant,
    /// The events a whole window must hold.
    need: f64,
    window: RateWindow,
}

impl Floor {
    fn start(floor: &RateFloor, now: Instant) -> Floor {
        Floor::fresh(floor.window, floor.events_per_window(), now)
    }

    /// A floor asking `need` events of each `window`, its first window
    /// from `now`.
    fn fresh(window_length: Duration, need: f64, now: Instant) -> Floor {
        let window = RateWindow::new(window_length);
        Floor {
            clock: Clock { budget: window_length, from: now, span: window.first_below(need) },
            started: now,
            slot_end: after(now, window.slot_end()),
            need,
            window,
        }
    }

    /// Starts the window again from `now`, empty.
    fn restart(&mut self, now: Instant) {
        *self = Floor::fresh(self.clock.budget, self.need, now);
    }

    /// Counts a progress event: a comparison and two adds, but once a
    /// slot (the time from the start is a subtraction of instants, a call
    /// that cost a third of the floor's whole price when made per event).
    fn count(&mut self, now: Instant) {
        if now < self.slot_end {
            self.window.count_in_slot();
        } else {
            self.window.count(now.saturating_duration_since(self.started));
            self.slot_end = after(self.started, self.window.slot_end());
        }
    }

    /// Works out when the window first falls below the floor.
    fn refresh(&mut self) {
        self.clock.span = self.window.first_below(self.need);
    }
}

/// What ended one wait of the body loop.
enum Wait {
    /// The body's next chunk, or its end.
    Chunk(Option<Result<Chunk, Failure>>),
    /// The token was cancelled.
    Cancelled,
    /// The sleep reached its deadline.
    Timer,
}

/// What the body loop is doing with the bytes.
enum Reading {
    /// Decoding an event stream.
    Stream,
    /// Taking in a whole answer ([`Expect::Answer`]): counted until it
    /// ends.
    Answer,
    /// Collecting an error or non-stream body for classification.
    ErrorBody(ErrorBody),
}

/// An error or non-stream response, collected up to [`ERROR_BODY_LIMIT`].
struct ErrorBody {
    status: u16,
    headers: http::HeaderMap,
    content_type: Option<String>,
    body: Vec<u8>,
}

impl ErrorBody {
    /// Keeps what fits; true once the limit is reached.
    fn push(&mut self, chunk: &[u8]) -> bool {
        let room = ERROR_BODY_LIMIT.saturating_sub(self.body.len());
        self.body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        self.body.len() >= ERROR_BODY_LIMIT
    }

    /// The failure this response amounts to, at `now`, taking what was
    /// collected; records the start of the body.
    fn take_failure(&mut self, scope: &AttemptScope<'_>, now: Instant) -> Failure {
        let (recorded, truncated) = recorded_error_body(&self.body);
        scope.emit_at(now, EventKind::ErrorBody { body: recorded, truncated });
        let body = String::from_utf8_lossy(&self.body).into_owned();
        let (status, headers, content_type) =
            (self.status, std::mem::take(&mut self.headers), self.content_type.take());
        if (200..300).contains(&status) {
            Failure::UnexpectedContentType { status, content_type, headers: Box::new(headers), body }
        } else {
            Failure::Http { status, headers: Box::new(headers), body }
        }
    }
}

/// Runs one attempt to completion or failure. `progress` holds what
/// streamed either way, and the body when bodies are recorded.
pub async fn run_attempt(
    upstream: &dyn Upstream,
    request: AttemptRequest<'_>,
    timers: &AttemptTimers,
    scope: &AttemptScope<'_>,
    progress: &mut AttemptProgress,
) -> Result<(), Failure> {
    let mut capture = BodyCapture::new(scope.bodies);
    let result = govern(upstream, request, timers, scope, progress, &mut capture).await;
    progress.body = capture.map(BodyCapture::finish);
    result
}

async fn govern(
    upstream: &dyn Upstream,
    request: AttemptRequest<'_>,
    timers: &AttemptTimers,
    scope: &AttemptScope<'_>,
    progress: &mut AttemptProgress,
    capture: &mut Option<BodyCapture>,
) -> Result<(), Failure> {
    let started = Instant::now();
    let mut clocks = Clocks {
        idle: Clock::start(timers.idle, started),
        data_stall: None,
        min_rate: None,
        ttfb: Clock::start(timers.ttfb, started),
        total: Clock::start(timers.total, started),
        deadline: scope.deadline.map(|(fires_at, budget)| Clock { budget, from: fires_at, span: Duration::ZERO }),
        hold_when_late: timers.hold_when_late,
    };
    scope.emit(EventKind::PhaseChanged { phase: AttemptPhase::Connecting });
    for (timer, clock) in
        [(TimerKind::Ttfb, clocks.ttfb), (TimerKind::Idle, clocks.idle), (TimerKind::Total, clocks.total)]
    {
        if let Some(clock) = clock {
            scope.emit(EventKind::TimerArmed { timer, after: clock.budget, floor: None });
        }
    }
    if let Some(reason) = &timers.ttfb_off_reason {
        scope.emit(EventKind::TimerDisarmed { timer: TimerKind::Ttfb, reason: reason.clone() });
    }

    // Connecting and awaiting headers: the transport cannot tell us when the
    // connection is up, so both phases run under the same timers.
    scope.emit(EventKind::PhaseChanged { phase: AttemptPhase::AwaitingHeaders });
    let sleep = tokio::time::sleep_until(clocks.earliest().map_or_else(far_future, |(_, c)| c.fires_at()));
    tokio::pin!(sleep);
    // Made once: each `cancelled()` registers a waiter with the token.
    let cancelled = scope.cancel.cancelled();
    tokio::pin!(cancelled);
    let mut open = upstream.open(request);
    let response = loop {
        tokio::select! {
            biased;
            () = &mut cancelled => return Err(Failure::Cancelled),
            () = &mut sleep => {
                if let Some(fired) = on_wake(&mut clocks, sleep.as_mut(), Instant::now(), scope) {
                    return Err(fire(scope, fired).await);
                }
            }
            response = &mut open => match response {
                Ok(response) => break response,
                Err(failure) => {
                    // The connect timer lives in the HTTP client; when it
                    // is what fired, the timeline marks it like ours (its
                    // budget ran from about when the request began).
                    if let Failure::Timeout { timer: TimerKind::Connect, after: budget } = failure {
                        scope.timer_fired(TimerKind::Connect, budget, after(started, budget), Instant::now());
                    }
                    return Err(failure);
                }
            },
        }
    };
    let now = Instant::now();
    if let Some(idle) = &mut clocks.idle {
        idle.reset(now);
    }
    let content_type = super::upstream::content_type(&response.headers).map(str::to_owned);
    scope.emit_at(now, EventKind::HeadersReceived { status: response.status, content_type: content_type.clone() });
    scope.emit_at(now, EventKind::ResponseHeaders { headers: recorded_headers(&response.headers, scope.rule_headers) });
    observe_rate_limits(scope, &response.headers, now, &mut progress.low_buckets);
    // The data-stall clock runs for every body. An error or non-stream body
    // has no progress events, so it must arrive whole within that budget: a
    // body trickling a byte per idle period cannot hold the attempt open.
    clocks.data_stall = Clock::start(timers.data_stall, now);
    if let Some(clock) = clocks.data_stall {
        scope.emit(EventKind::TimerArmed { timer: TimerKind::DataStall, after: clock.budget, floor: None });
        rearm_if_earlier(&clocks, sleep.as_mut());
    }
    let answer = request.input.expect == Expect::Answer && (200..300).contains(&response.status);
    let mut reading = if answer {
        // A whole answer has no progress events for the clock to see.
        if clocks.data_stall.take().is_some() {
            let reason = "a whole answer, not a stream".to_owned();
            scope.emit(EventKind::TimerDisarmed { timer: TimerKind::DataStall, reason });
        }
        if let Some(capture) = capture {
            capture.not_a_stream();
        }
        Reading::Answer
    } else if is_event_stream(response.status, content_type.as_deref()) {
        scope.emit(EventKind::PhaseChanged { phase: AttemptPhase::AwaitingFirstContent });
        if let Some(floor) = timers.min_rate.filter(|f| f.after == RateStart::Headers) {
            arm_floor(&mut clocks, &floor, scope, sleep.as_mut(), now);
        }
        Reading::Stream
    } else {
        if let Some(capture) = capture {
            capture.not_a_stream();
        }
        Reading::ErrorBody(ErrorBody {
            status: response.status,
            headers: response.headers,
            content_type,
            body: Vec::new(),
        })
    };

    let mut decoder = response.decoder.unwrap_or_else(|| upstream.decoder());
    let mut accepted = response.accepted;
    let mut decoded = Vec::new();
    let mut body = response.body;
    // The body is the busy source. The sleep and the token are polled with
    // `sleep_and_cancel_woke`'s waker, and only once they have woken the
    // task or the sleep has moved, so a flowing stream pays for neither
    // (see `wake_flag`).
    let mut sleep_and_cancel_woke = WakeFlag::new();
    // How far the attempt got: a body that hands its chunks over ahead of
    // the clock (a replay) takes the attempt past "now".
    let mut ahead_until = now;
    let read = async {
        loop {
            let next = std::future::poll_fn(|cx| {
                if let Poll::Ready(chunk) = body.poll_next_unpin(cx) {
                    return Poll::Ready(Wait::Chunk(chunk));
                }
                if sleep_and_cancel_woke.take(cx) {
                    let mut woke_cx = Context::from_waker(sleep_and_cancel_woke.waker());
                    if cancelled.as_mut().poll(&mut woke_cx).is_ready() {
                        return Poll::Ready(Wait::Cancelled);
                    }
                    if sleep.as_mut().poll(&mut woke_cx).is_ready() {
                        return Poll::Ready(Wait::Timer);
                    }
                }
                Poll::Pending
            })
            .await;
            let chunk = match next {
                Wait::Chunk(chunk) => chunk,
                Wait::Cancelled => return Err(cancelled_while(&mut reading, scope)),
                // A sleep that moved is only sure to wake the task once polled
                // again: raising the flag has the next wait poll it.
                Wait::Timer => match on_wake(&mut clocks, sleep.as_mut(), Instant::now(), scope) {
                    Some(fired) => return Err(timed_out_reading(scope, fired, body)),
                    None => {
                        sleep_and_cancel_woke.raise();
                        continue;
                    }
                },
            };
            let arrived = match &chunk {
                Some(Ok(Chunk { arrived, .. })) => *arrived,
                _ => None,
            };
            let now = arrived.unwrap_or_else(Instant::now);
            ahead_until = now;
            // A token cancelled while chunks keep coming has raised the flag
            // (which starts raised, before the token was first polled with it).
            if sleep_and_cancel_woke.is_raised() && scope.cancel.is_cancelled() {
                return Err(cancelled_while(&mut reading, scope));
            }
            // The sleep is never later than the earliest clock, so a chunk that
            // comes before it needs no look at the clocks (this runs per chunk).
            // A chunk stamped with its arrival meets each deadline before it as
            // the clock would have: at that deadline, where a timer due fired
            // first.
            while sleep.deadline() <= now {
                let woke = if arrived.is_some() { sleep.deadline() } else { now };
                if let Some(fired) = on_wake(&mut clocks, sleep.as_mut(), woke, scope) {
                    ahead_until = woke;
                    return Err(timed_out_reading(scope, fired, body));
                }
                sleep_and_cancel_woke.raise();
            }
            let chunk = match chunk {
                Some(Ok(Chunk { bytes, .. })) => bytes,
                Some(Err(failure)) => return Err(failure),
                None => {
                    return match &mut reading {
                        Reading::Answer => Ok(()),
                        Reading::ErrorBody(collected) => Err(collected.take_failure(scope, now)),
                        Reading::Stream => {
                            decoder.finish(&mut decoded);
                            let arrival = Arrival::at(now, scope);
                            match absorb(
                                &mut decoded,
                                timers,
                                &mut clocks,
                                sleep.as_mut(),
                                scope,
                                progress,
                                capture,
                                arrival,
                            ) {
                                Some(result) => result,
                                None => Err(Failure::Transport {
                                    kind: TransportKind::Closed,
                                    message: "the body ended before the stream said it was done".to_owned(),
                                }),
                            }
                        }
                    };
                }
            };
            if progress.ttfb.is_none() {
                progress.ttfb = Some(now.saturating_duration_since(started));
                clocks.ttfb = None;
            }
            progress.bytes += chunk.len() as u64;
            if let Some(idle) = &mut clocks.idle {
                idle.reset(now);
            }
            let arrival = Arrival::at(now, scope);
            scope.emit_stamped(arrival.stamp, EventKind::ChunkReceived { bytes: chunk.len() });
            if let Some(capture) = capture {
                capture.chunk(&chunk);
            }
            // Matched in place: moving the reading out and back for every chunk
            // copies an error body's headers each time.
            match &mut reading {
                Reading::Answer => {}
                Reading::ErrorBody(collected) => {
                    if collected.push(&chunk) {
                        return Err(collected.take_failure(scope, now));
                    }
                }
                Reading::Stream => {
                    decoder.feed(&chunk, &mut decoded);
                    let absorbed =
                        absorb(&mut decoded, timers, &mut clocks, sleep.as_mut(), scope, progress, capture, arrival);
                    if let Some(accepted) = accepted.as_mut().filter(|_| !matches!(absorbed, Some(Err(_)))) {
                        accepted(&chunk);
                    }
                    if let Some(result) = absorbed {
                        return result;
                    }
                }
            }
        }
    };
    let result = read.await;
    // What follows the attempt meets the rest of the run at the moment it
    // ended, not before.
    if ahead_until > Instant::now() {
        tokio::time::sleep_until(ahead_until).await;
    }
    result
}

/// The failure of an attempt cancelled while `reading`: an error status
/// already answered is that answer (its body as far as it came: a caller
/// that stops reading an error body has the status it asked for),
/// anything else is cancelled.
fn cancelled_while(reading: &mut Reading, scope: &AttemptScope<'_>) -> Failure {
    match reading {
        Reading::ErrorBody(collected) => collected.take_failure(scope, Instant::now()),
        Reading::Stream | Reading::Answer => Failure::Cancelled,
    }
}

/// When a chunk came, and the same as its events' stamp.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    at: Instant,
    stamp: Duration,
}

impl Arrival {
    fn at(at: Instant, scope: &AttemptScope<'_>) -> Arrival {
        Arrival { at, stamp: scope.stamp(at) }
    }
}

/// Applies decoded events to the clocks and progress. Returns the attempt's
/// result once the stream is done or has failed.
#[allow(clippy::too_many_arguments)]
fn absorb(
    decoded: &mut Vec<Decoded>,
    timers: &AttemptTimers,
    clocks: &mut Clocks,
    mut sleep: Pin<&mut Sleep>,
    scope: &AttemptScope<'_>,
    progress: &mut AttemptProgress,
    capture: &mut Option<BodyCapture>,
    arrival: Arrival,
) -> Option<Result<(), Failure>> {
    for item in decoded.drain(..) {
        match item {
            Decoded::Event { class, text } => {
                if let Some(capture) = capture {
                    capture.event(&text);
                }
                progress.events += 1;
                if class == EventClass::Keepalive {
                    progress.keepalives += 1;
                }
                let resets = timers.progress_classes.contains(&class);
                if resets && let Some(stall) = &mut clocks.data_stall {
                    stall.reset(arrival.at);
                }
                let starts_floor = match timers.min_rate {
                    Some(RateFloor { after: RateStart::Content, .. }) => class.is_output(),
                    Some(RateFloor { after: RateStart::Progress, .. }) => resets,
                    _ => false,
                };
                if starts_floor
                    && clocks.min_rate.is_none()
                    && let Some(floor) = &timers.min_rate
                {
                    arm_floor(clocks, floor, scope, sleep.as_mut(), arrival.at);
                }
                if resets && let Some(floor) = &mut clocks.min_rate {
                    floor.count(arrival.at);
                }
                // After the floor's arming, which counts this event: what
                // reads the events back counts it too.
                scope.emit_stamped(
                    arrival.stamp,
                    EventKind::SseReceived { class, chars: text.chars().count(), progress: resets },
                );
                let commits = class.is_output() || (timers.reasoning_commits && class == EventClass::Reasoning);
                if commits && !progress.committed {
                    progress.committed = true;
                    scope.emit_stamped(arrival.stamp, EventKind::PhaseChanged { phase: AttemptPhase::Streaming });
                }
                if class == EventClass::Content {
                    progress.content.push_str(&text);
                }
            }
            Decoded::StopReason(reason) => progress.stop_reason = Some(reason),
            Decoded::Done => {
                scope.emit_stamped(arrival.stamp, EventKind::PhaseChanged { phase: AttemptPhase::Done });
                return Some(Ok(()));
            }
            Decoded::Error { code, message } => return Some(Err(Failure::InStream { code, message })),
            Decoded::Malformed(message) => return Some(Err(Failure::Malformed { message })),
        }
    }
    None
}

/// Starts the throughput floor at `now` and reports it.
fn arm_floor(clocks: &mut Clocks, floor: &RateFloor, scope: &AttemptScope<'_>, sleep: Pin<&mut Sleep>, now: Instant) {
    clocks.min_rate = Some(Floor::start(floor, now));
    scope.emit_at(
        now,
        EventKind::TimerArmed { timer: TimerKind::MinRate, after: floor.window, floor: Some(floor.floor) },
    );
    rearm_if_earlier(clocks, sleep);
}

/// Reads the rate-limit headers of any response (a successful one says a
/// bucket is running low before a 429 does) and reports the low buckets.
fn observe_rate_limits(scope: &AttemptScope<'_>, headers: &http::HeaderMap, now: Instant, low: &mut Vec<LowBucket>) {
    let Some(limits) = RateLimits::from_headers(headers, scope.wall_at(now)) else { return };
    scope.emit_at(
        now,
        EventKind::RateLimitObserved {
            requests_remaining: limits.requests.remaining,
            tokens_remaining: limits.tokens.remaining,
            exhausted_reset: limits.exhausted_reset(),
        },
    );
    for (bucket, state) in limits.named_buckets() {
        if let Some(remaining) = state.remaining
            && state.is_low(LOW_BUCKET_FRACTION)
        {
            let (limit, reset) = (state.limit, state.reset_after);
            low.push(LowBucket { bucket, remaining, limit });
            scope.emit_at(now, EventKind::RateLimitLow { bucket: bucket.to_owned(), remaining, limit, reset });
        }
    }
}

/// A bucket with at most this share of its limit left is running low.
const LOW_BUCKET_FRACTION: f64 = 0.1;

/// A moment no attempt reaches, for a timer with nothing armed.
fn far_future() -> Instant {
    let now = Instant::now();
    // A century, or as far as the platform's clock reaches.
    [100 * 365, 365, 30].iter().find_map(|days| now.checked_add(Duration::from_secs(days * 24 * 3600))).unwrap_or(now)
}

/// A timer that expired, noticed at `now`, with how late our runtime ran
/// for it when a probe measures that.
#[derive(Debug, Clone, Copy)]
struct Fired {
    timer: TimerKind,
    clock: Clock,
    now: Instant,
    lag: Option<Duration>,
}

/// Handles the shared sleep's deadline having passed at `now`. Resets only
/// ever move clocks later, so the sleep is re-armed lazily here instead of
/// on every chunk: it wakes at the earliest deadline it knew of and either
/// reports the timer that expired or sleeps on to the new earliest one. A
/// clock [held](hold) for our own lateness starts again, and the next
/// earliest is looked at.
fn on_wake(clocks: &mut Clocks, sleep: Pin<&mut Sleep>, now: Instant, scope: &AttemptScope<'_>) -> Option<Fired> {
    if let Some(floor) = &mut clocks.min_rate
        && floor.clock.fires_at() <= now
    {
        floor.refresh();
    }
    loop {
        match clocks.earliest() {
            Some((timer, clock)) if clock.fires_at() <= now => {
                let fired = Fired { timer, clock, now, lag: scope.lateness(clock.budget, clock.fires_at(), now) };
                if !hold(clocks, scope, fired) {
                    return Some(fired);
                }
            }
            Some((_, clock)) => {
                sleep.reset(clock.fires_at());
                return None;
            }
            None => {
                sleep.reset(far_future());
                return None;
            }
        }
    }
}

/// Holds a clock that came due while our runtime ran too late to trust it
/// (a tenth of its budget or more, [`lag_untrusts`]), where the attempt
/// holds late clocks: it starts again from now with its whole budget, the
/// stream getting back the time our lateness took, and is reported held.
/// Returns whether it held. Without a probe (virtual time) nothing is late.
fn hold(clocks: &mut Clocks, scope: &AttemptScope<'_>, fired: Fired) -> bool {
    let Fired { timer, clock, now, lag } = fired;
    match lag.filter(|&lag| clocks.hold_when_late && lag_untrusts(clock.budget, lag)) {
        Some(lag) if clocks.restart(timer, now) => {
            scope.emit_at(now, EventKind::TimerHeld { timer, after: clock.budget, lag });
            true
        }
        _ => false,
    }
}

/// Moves the sleep earlier when a newly armed clock fires before it.
fn rearm_if_earlier(clocks: &Clocks, sleep: Pin<&mut Sleep>) {
    if let Some((_, clock)) = clocks.earliest()
        && clock.fires_at() < sleep.deadline()
    {
        sleep.reset(clock.fires_at());
    }
}

/// How long after its timer fired a response's connection is closed.
/// Closing one costs tens of microseconds of CPU at each end, and when many
/// streams stall at once (a VPN or proxy drop) closing each as its stall is
/// noticed delays noticing the next ones: with 1,000 streams stalling
/// together, the 99th percentile of lateness doubled. Nothing more is read
/// from a connection given up on, so closing it a moment later only holds a
/// socket that much longer.
pub const CLOSE_DELAY: Duration = Duration::from_millis(100);

/// Reports a timer that fired while the response body was being read, and
/// hands the body to a task that closes it [`CLOSE_DELAY`] later.
fn timed_out_reading(scope: &AttemptScope<'_>, fired: Fired, body: Body) -> Failure {
    tokio::spawn(async move {
        tokio::time::sleep_until(fired.now + CLOSE_DELAY).await;
        drop(body);
    });
    timed_out(scope, fired)
}

/// Reports a timer that fired before the response came, then yields once
/// before the caller drops the request: tearing down a connection costs
/// more than noticing a stall, and timers due at the same moment should all
/// be noticed first.
async fn fire(scope: &AttemptScope<'_>, fired: Fired) -> Failure {
    let failure = timed_out(scope, fired);
    tokio::task::yield_now().await;
    failure
}

fn timed_out(scope: &AttemptScope<'_>, Fired { timer, clock, now, lag }: Fired) -> Failure {
    scope.fired_late(timer, clock.budget, lag, now);
    Failure::Timeout { timer, after: clock.budget }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures_util::future::BoxFuture;
    use futures_util::stream;
    use http::{HeaderMap, HeaderValue};

    use super::*;
    use crate::core::event::VecSink;
    use crate::core::failover::Target;
    use crate::core::upstream::{CallInput, Decoder, Response};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// An event stream whose chunks come at these times from the request,
    /// then nothing more (the connection stays open).
    struct Paced(Vec<(u64, &'static str)>);

    impl Upstream for Paced {
        fn open<'a>(&'a self, _request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
            let start = Instant::now();
            let chunks = stream::iter(self.0.clone()).then(move |(at, text)| async move {
                tokio::time::sleep_until(start + ms(at)).await;
                Ok(Bytes::from_static(text.as_bytes()).into())
            });
            let mut headers = HeaderMap::new();
            headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            let body = chunks.chain(stream::pending()).boxed();
            Box::pin(async move { Ok(Response::new(200, headers, body)) })
        }

        fn decoder(&self) -> Box<dyn Decoder> {
            Box::new(Letters)
        }
    }

    /// `c` is a content event, `d` the stream's end.
    struct Letters;

    impl Decoder for Letters {
        fn feed(&mut self, chunk: &[u8], out: &mut Vec<Decoded>) {
            for letter in chunk {
                out.push(match letter {
                    b'd' => Decoded::Done,
                    _ => Decoded::Event { class: EventClass::Content, text: "c".into() },
                });
            }
        }

        fn finish(&mut self, _out: &mut Vec<Decoded>) {}
    }

    /// A 1 s idle timer, held when late if `hold`.
    fn idle(hold: bool) -> AttemptTimers {
        AttemptTimers {
            idle: Some(ms(1000)),
            data_stall: None,
            total: None,
            ttfb: None,
            ttfb_off_reason: None,
            progress_classes: vec![EventClass::Content],
            min_rate: None,
            hold_when_late: hold,
            reasoning_commits: false,
        }
    }

    /// What one attempt over `body` did, its runtime's lag measured by a
    /// meter whose only reading is `lag` at 0.6 s (inside the first idle
    /// budget), under a call deadline of `deadline` when given.
    struct Ran {
        result: Result<(), Failure>,
        content: String,
        /// Each timer that fired or was held: (when, in ms, the event).
        timers: Vec<(u128, EventKind)>,
        summary: crate::core::lag_probe::LagSummary,
    }

    async fn run(
        timers: AttemptTimers,
        lag: Duration,
        deadline: Option<Duration>,
        body: Vec<(u64, &'static str)>,
    ) -> Ran {
        let epoch = Instant::now();
        let meter = LagMeter::new(epoch);
        meter.record(epoch + ms(600), lag);
        let (sink, cancel) = (VecSink::new(), CancellationToken::new());
        let scope = AttemptScope {
            sink: &sink,
            epoch,
            stream: 1,
            attempt: 1,
            deadline: deadline.map(|budget| (epoch + budget, budget)),
            cancel: &cancel,
            wall_epoch: SystemTime::UNIX_EPOCH,
            bodies: BodySettings::default(),
            lag: Some(&meter),
            rule_headers: &[],
        };
        let (target, input) = (Target::new("p", "m"), CallInput::default());
        let request = AttemptRequest { stream: 1, attempt: 1, target: &target, credential: None, input: &input };
        let mut progress = AttemptProgress::default();
        let result = run_attempt(&Paced(body), request, &timers, &scope, &mut progress).await;
        let timers = sink
            .events()
            .into_iter()
            .filter(|e| matches!(e.kind, EventKind::TimerFired { .. } | EventKind::TimerHeld { .. }))
            .map(|e| (e.at.as_millis(), e.kind))
            .collect();
        Ran { result, content: progress.content, timers, summary: meter.summary() }
    }

    /// A chunk, then 1.5 s of silence, then the rest: the idle timer comes
    /// due at 1.0 s.
    fn late_rest() -> Vec<(u64, &'static str)> {
        vec![(0, "c"), (1500, "cd")]
    }

    fn fired(timer: TimerKind, after: Duration, lag: Duration) -> EventKind {
        EventKind::TimerFired { timer, after, lag: Some(lag) }
    }

    /// Switched off, a late timer ends the attempt as it always did;
    /// switched on, so does one late by less than a tenth of its budget.
    #[tokio::test(start_paused = true)]
    async fn a_timer_fires_as_before_when_holding_is_off_or_it_was_not_late_enough() {
        for (hold, lag, untrusted) in [(false, ms(350), 1), (true, ms(50), 0)] {
            let ran = run(idle(hold), lag, None, late_rest()).await;
            let idle_fired = matches!(ran.result, Err(Failure::Timeout { timer: TimerKind::Idle, .. }));
            assert!(idle_fired, "hold {hold}: {:?}", ran.result);
            assert_eq!(ran.timers, [(1000, fired(TimerKind::Idle, ms(1000), lag))], "hold {hold}");
            assert_eq!((ran.summary.fired, ran.summary.untrusted), (1, untrusted), "hold {hold}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn switched_on_a_late_timer_is_held_and_the_attempt_reads_on_to_its_end() {
        let ran = run(idle(true), ms(350), None, late_rest()).await;
        assert!(ran.result.is_ok(), "{:?}", ran.result);
        assert_eq!(ran.content, "cc");
        let held = EventKind::TimerHeld { timer: TimerKind::Idle, after: ms(1000), lag: ms(350) };
        assert_eq!(ran.timers, [(1000, held)], "stamped when it came due");
        assert_eq!(ran.summary.fired, 0, "a held timer is no timeout");
    }

    /// Held, its clock starts again with its whole budget: a stream that
    /// stays silent is cut a budget later, the lag before that budget
    /// no longer its.
    #[tokio::test(start_paused = true)]
    async fn a_held_timer_fires_a_whole_budget_later_on_a_stream_that_stays_silent() {
        let ran = run(idle(true), ms(350), None, vec![(0, "c")]).await;
        assert!(matches!(ran.result, Err(Failure::Timeout { timer: TimerKind::Idle, .. })), "{:?}", ran.result);
        let held = EventKind::TimerHeld { timer: TimerKind::Idle, after: ms(1000), lag: ms(350) };
        assert_eq!(ran.timers, [(1000, held), (2000, fired(TimerKind::Idle, ms(1000), Duration::ZERO))]);
    }

    /// The call's deadline is the caller's bound: never held.
    #[tokio::test(start_paused = true)]
    async fn the_deadline_is_never_held() {
        let timers = AttemptTimers { idle: Some(ms(5000)), ..idle(true) };
        let ran = run(timers, ms(500), Some(ms(1000)), late_rest()).await;
        assert!(matches!(ran.result, Err(Failure::Timeout { timer: TimerKind::Deadline, .. })), "{:?}", ran.result);
        assert_eq!(ran.timers, [(1000, fired(TimerKind::Deadline, ms(1000), ms(500)))]);
    }

    /// The throughput floor is held like the other clocks, and judges a
    /// whole window again from where it was held.
    #[tokio::test(start_paused = true)]
    async fn a_late_throughput_floor_is_held_too() {
        let floor = RateFloor { floor: 2.0, window: ms(1000), after: RateStart::Content };
        let timers = AttemptTimers { idle: None, min_rate: Some(floor), ..idle(true) };
        // One event a second: below the floor of two from the first window.
        let body = vec![(0, "c"), (1100, "c"), (1900, "cd")];
        let ran = run(timers, ms(350), None, body).await;
        assert!(ran.result.is_ok(), "{:?}", ran.result);
        let held = EventKind::TimerHeld { timer: TimerKind::MinRate, after: ms(1000), lag: ms(350) };
        assert_eq!(ran.timers, [(1000, held)]);
    }
}
