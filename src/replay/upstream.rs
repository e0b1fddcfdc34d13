//! The recorded upstream: an [`Upstream`] that plays a recording's attempts
//! back in (virtual) time, so the real executor, governor and classifier
//! decide on the traffic a run actually had.
//!
//! An attempt opens at its recorded offset, returns its recorded status and
//! headers, hands over its chunks stamped with their offsets (at once: see
//! [`Playback::horizon`]) and ends as it ended, once the clock gets there.
//! Without raw bodies, each chunk carries the events the decoder found in
//! it (a response brings its own decoder); with raw bodies the real bytes
//! go through the dialect's real decoder. The connect timeout and the read
//! backstop, which live in the HTTP client, are emulated here.
//!
//! Where the recording ends — an attempt our timer gave up on kept alive
//! longer, an attempt the run never made — the play depends on an
//! [`Assumptions`] choice, and every use of one is logged for the report:
//! nothing is invented silently.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;
use tokio::time::{Instant, Sleep};

use super::attempt_body::{BodyEnd, BodySource};
use super::recording::{RecordedAttempt, RecordedChunk, Recording};
use crate::core::category::TimerKind;
use crate::core::event::{AttemptEnd, EventClass, RecordedBody, StreamId};
use crate::core::failover::Target;
use crate::core::failure::{Failure, TransportKind};
use crate::core::upstream::{AttemptRequest, Chunk, Decoded, Decoder, Response, Upstream};
use crate::providers::Dialect;

/// What happens after the point where an attempt's recording stops while
/// the attempt still ran (our timer gave up on it, or the run was
/// cancelled).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StallAssumption {
    /// The stall continues: nothing more arrives.
    #[default]
    Silence,
    /// The stall continues with keep-alives at the rate recorded before it.
    Keepalives,
    /// Stop there: the stream's outcome is unknown.
    Stop,
}

/// How an attempt the recording never observed behaves (an extra retry, a
/// hop to a target never tried).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttemptAssumption {
    /// Like the stream's recorded attempt with the same number.
    SameOrdinal,
    /// Like the last recorded attempt to that target (this stream's, else
    /// any stream's).
    #[default]
    LastToTarget,
    /// Like whatever recorded attempt on that target covers that moment of
    /// the run: outages and 429 windows are shared by the fleet.
    Covering,
    /// Stop: the stream's outcome is unknown.
    Stop,
}

/// The assumptions a what-if may need.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Assumptions {
    /// After a recording stops mid-attempt.
    pub stall: StallAssumption,
    /// For attempts never recorded.
    pub attempt: AttemptAssumption,
}

impl StallAssumption {
    /// Every choice with its name.
    pub const ALL: [(&'static str, StallAssumption); 3] = [
        ("silence", StallAssumption::Silence),
        ("keepalives", StallAssumption::Keepalives),
        ("stop", StallAssumption::Stop),
    ];

    /// Its name, as `--assume stall=NAME` takes it.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(_, a)| *a == self).map_or("", |(name, _)| name)
    }
}

impl AttemptAssumption {
    /// Every choice with its name.
    pub const ALL: [(&'static str, AttemptAssumption); 4] = [
        ("same-ordinal", AttemptAssumption::SameOrdinal),
        ("last-to-target", AttemptAssumption::LastToTarget),
        ("covering", AttemptAssumption::Covering),
        ("stop", AttemptAssumption::Stop),
    ];

    /// Its name, as `--assume attempt=NAME` takes it.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(_, a)| *a == self).map_or("", |(name, _)| name)
    }
}

/// Which recorded attempt a replayed attempt played, and on what grounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Played {
    /// The replayed attempt's number.
    pub attempt: u32,
    /// The recorded attempt played: its stream and number; `None` when
    /// nothing was played (the assumption was to stop).
    pub source: Option<(StreamId, u32)>,
    /// Whether the recorded attempt completed (a healthy stream).
    pub healthy: bool,
    /// The assumption that chose it, when it is not this stream's own
    /// attempt with this number to this target.
    pub chosen_by: Option<AttemptAssumption>,
    /// The stall assumption, once the play went past where the recording
    /// stops.
    pub past_recording: Option<StallAssumption>,
    /// Whether it was stopped past the recording because keep-alives
    /// assumed to go on would reset the only clock armed to end it (the
    /// idle timer): it would never end, and its end is unknown.
    pub endless: bool,
}

/// Where the replayed attempts of a run came from.
#[derive(Debug, Default)]
pub struct PlayLog {
    streams: Mutex<BTreeMap<StreamId, Vec<Played>>>,
}

impl PlayLog {
    /// The attempts each stream played.
    pub fn take(&self) -> BTreeMap<StreamId, Vec<Played>> {
        self.streams.lock().map(|mut s| std::mem::take(&mut *s)).unwrap_or_default()
    }

    fn record(&self, stream: StreamId, played: Played) {
        if let Ok(mut streams) = self.streams.lock() {
            streams.entry(stream).or_default().push(played);
        }
    }

    fn went_past_recording(&self, stream: StreamId, attempt: u32, assumption: StallAssumption) {
        self.mark(stream, attempt, |played| played.past_recording = Some(assumption));
    }

    fn never_ends(&self, stream: StreamId, attempt: u32) {
        self.mark(stream, attempt, |played| played.endless = true);
    }

    fn mark(&self, stream: StreamId, attempt: u32, change: impl FnOnce(&mut Played)) {
        if let Ok(mut streams) = self.streams.lock()
            && let Some(played) =
                streams.get_mut(&stream).and_then(|p| p.iter_mut().rev().find(|p| p.attempt == attempt))
        {
            change(played);
        }
    }
}

/// Everything the recorded upstreams of one replay share.
#[derive(Debug)]
pub struct Playback {
    /// The recording.
    pub recording: Arc<Recording>,
    /// What to assume where it ends.
    pub assumptions: Assumptions,
    /// The HTTP client's connect timeout, emulated.
    pub connect_timeout: Duration,
    /// The HTTP client's read backstop, emulated.
    pub read_backstop: Option<Duration>,
    /// Whether the idle timer is the only clock that could end an attempt
    /// past its recording (no data-stall timer, total, throughput floor or
    /// deadline is armed): keep-alives assumed to go on there reset it
    /// forever, and rather than replay pings to the horizon (a wake and an
    /// event each, 86,400 a stream in a day at one a second) the play stops
    /// and says the stream's end is unknown.
    pub only_idle_ends: bool,
    /// The replay's epoch: "now" in the run is `Instant::now() - epoch`.
    pub epoch: Instant,
    /// Where the replay stops. A body hands over its chunks due before it
    /// at once, each stamped with its arrival, rather than waiting for the
    /// clock: a stream's body depends on nothing the other streams do, and
    /// a replay of millions of chunks then costs no wake of the clock per
    /// chunk. What comes after it (a keep-alive assumed forever) waits.
    pub horizon: Instant,
    /// Where each replayed attempt came from.
    pub log: PlayLog,
}

/// One provider's endpoint, replaying its recorded attempts.
#[derive(Debug, Clone)]
pub struct RecordedUpstream {
    dialect: Option<Dialect>,
    playback: Arc<Playback>,
}

impl RecordedUpstream {
    /// An endpoint of `dialect` (known: raw bodies are decoded for real).
    pub fn new(dialect: Option<Dialect>, playback: Arc<Playback>) -> Self {
        RecordedUpstream { dialect, playback }
    }
}

impl Upstream for RecordedUpstream {
    fn open<'a>(&'a self, request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
        let playback = &self.playback;
        let (chosen, chosen_by) = choose(playback, request.stream, request.attempt, request.target);
        let source = chosen.map(|(stream, index)| {
            let attempt = &playback.recording.streams[stream].attempts[index];
            (playback.recording.streams[stream].id, attempt.ordinal, attempt.completed())
        });
        playback.log.record(
            request.stream,
            Played {
                attempt: request.attempt,
                source: source.map(|(s, a, _)| (s, a)),
                healthy: source.is_some_and(|(_, _, healthy)| healthy),
                chosen_by,
                past_recording: None,
                endless: false,
            },
        );
        let raw_decodable = self.dialect.is_some();
        let playback = Arc::clone(&self.playback);
        let (stream, attempt) = (request.stream, request.attempt);
        Box::pin(async move {
            let Some((s, a)) = chosen else {
                // Nothing to play: the stream's outcome is unknown.
                return Err(Failure::Cancelled);
            };
            play(&playback, (s, a), (stream, attempt), raw_decodable).await
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        match self.dialect {
            Some(dialect) => Box::new(dialect.decoder()),
            // Every replayed response brings its own decoder unless its raw
            // bytes are decoded for real, which takes a known dialect.
            None => Box::new(Undecodable),
        }
    }
}

/// The recorded attempt (stream index, attempt index) a replayed attempt
/// plays, and the assumption that chose it, if one did.
fn choose(
    playback: &Playback,
    stream: StreamId,
    ordinal: u32,
    target: &Target,
) -> (Option<(usize, usize)>, Option<AttemptAssumption>) {
    let streams = &playback.recording.streams;
    let own = streams.binary_search_by_key(&stream, |s| s.id).ok();
    let find_own = |keep: &dyn Fn(&RecordedAttempt) -> bool| {
        own.and_then(|s| streams[s].attempts.iter().rposition(keep).map(|a| (s, a)))
    };
    if let Some(exact) = find_own(&|a| a.ordinal == ordinal && a.target == *target) {
        return (Some(exact), None);
    }
    let assumption = playback.assumptions.attempt;
    let to_target = || {
        streams.iter().enumerate().flat_map(|(s, st)| {
            st.attempts.iter().enumerate().filter(|(_, a)| a.target == *target).map(move |(a, at)| ((s, a), at))
        })
    };
    let chosen = match assumption {
        AttemptAssumption::SameOrdinal => find_own(&|a| a.ordinal == ordinal),
        AttemptAssumption::LastToTarget => {
            find_own(&|a| a.target == *target).or_else(|| to_target().max_by_key(|(_, a)| a.started).map(|(at, _)| at))
        }
        AttemptAssumption::Covering => {
            let now = Instant::now().saturating_duration_since(playback.epoch);
            let covering = to_target().find(|(_, a)| {
                let (start, end) = a.span();
                start <= now && now <= end
            });
            covering
                .or_else(|| to_target().filter(|(_, a)| a.started <= now).max_by_key(|(_, a)| a.started))
                .map(|(at, _)| at)
        }
        AttemptAssumption::Stop => None,
    };
    (chosen, Some(assumption))
}

/// How long past the moment an attempt's recording stops the replay still
/// counts as within it. The live timer that ended the recording fired a
/// little after it was due (the runtime's lateness, under a millisecond to
/// a few), and the replay's clock runs in whole milliseconds: the same
/// timer replayed fires within this of the recorded stop, and is no reason
/// to assume anything.
const RECORDING_GRACE: Duration = Duration::from_millis(10);

/// What follows an attempt's last recorded chunk.
enum Tail {
    /// The body ends.
    End,
    /// The body fails with this.
    Fail(Failure),
    /// The recording stops while the attempt still ran.
    Abandoned,
}

/// Plays one recorded attempt (stream and attempt index in the recording)
/// from the replayed attempt's start.
async fn play(
    playback: &Arc<Playback>,
    (s, a): (usize, usize),
    (stream, attempt): (StreamId, u32),
    raw_decodable: bool,
) -> Result<Response, Failure> {
    let recorded = &playback.recording.streams[s].attempts[a];
    let start = Instant::now();
    let offset = |at: Duration| at.saturating_sub(recorded.started);
    let (end_at, end) = match &recorded.ended {
        Some((at, end)) => (offset(*at), Some(end.clone())),
        None => (recorded.chunks.last().map_or(Duration::ZERO, |c| offset(c.at)), None),
    };
    let broken = |kind: TransportKind| {
        let shape = Failure::Transport { kind, message: String::new() };
        Failure::Transport { kind, message: recorded.failure_message(&shape).unwrap_or_else(|| "as recorded".into()) }
    };
    let connect = playback.connect_timeout;
    // The client's read backstop bounds the wait for headers too, from
    // when the request was sent.
    let backstop = playback.read_backstop.filter(|b| !b.is_zero());
    let headers_at = recorded.response.as_ref().map_or(end_at, |r| offset(r.at));
    if let Some(backstop) = backstop.filter(|&b| b < headers_at) {
        tokio::time::sleep(backstop).await;
        return Err(Failure::Timeout { timer: TimerKind::Idle, after: backstop });
    }
    let Some(response) = &recorded.response else {
        // No headers came: it failed (or was given up on) while connecting
        // or waiting for them.
        match (recorded.body_end(), &end) {
            (BodyEnd::Breaks(kind), _) => {
                if kind.is_connect() && !connect.is_zero() && connect < end_at {
                    tokio::time::sleep(connect).await;
                    return Err(Failure::Timeout { timer: TimerKind::Connect, after: connect });
                }
                tokio::time::sleep(end_at).await;
                return Err(broken(kind));
            }
            (_, Some(AttemptEnd::Timer { timer: TimerKind::Connect })) if !connect.is_zero() && connect <= end_at => {
                tokio::time::sleep(connect).await;
                return Err(Failure::Timeout { timer: TimerKind::Connect, after: connect });
            }
            _ => {
                tokio::time::sleep_until(start + end_at + RECORDING_GRACE).await;
                let assumption = playback.assumptions.stall;
                playback.log.went_past_recording(stream, attempt, assumption);
                if assumption == StallAssumption::Stop {
                    return Err(Failure::Cancelled);
                }
                // Still waiting: our connect timer is the first to end it,
                // when it reaches past the recording; else the backstop.
                if matches!(end, Some(AttemptEnd::Timer { timer: TimerKind::Connect })) && !connect.is_zero() {
                    tokio::time::sleep_until(start + connect).await;
                    return Err(Failure::Timeout { timer: TimerKind::Connect, after: connect });
                }
                if let Some(backstop) = backstop {
                    tokio::time::sleep_until(start + backstop).await;
                    return Err(Failure::Timeout { timer: TimerKind::Idle, after: backstop });
                }
                return std::future::pending().await;
            }
        }
    };
    tokio::time::sleep_until(start + headers_at).await;
    let mut headers = HeaderMap::new();
    for (name, value) in &response.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str())) {
            headers.append(name, value);
        }
    }
    if let Some(content_type) = &response.content_type
        && !headers.contains_key(http::header::CONTENT_TYPE)
        && let Ok(value) = HeaderValue::try_from(content_type.as_str())
    {
        headers.insert(http::header::CONTENT_TYPE, value);
    }
    let tail = match recorded.body_end() {
        BodyEnd::Abandoned => Tail::Abandoned,
        BodyEnd::Breaks(kind) => Tail::Fail(broken(kind)),
        BodyEnd::Ends => Tail::End,
    };
    // Raw stream bytes go through the dialect's real decoder (which takes
    // a known dialect); a body that is not a stream is read whole, as
    // recorded; the rest decode into their recorded events.
    let (source, real_bytes) = match recorded.body_source() {
        Some(BodySource::Raw(bytes)) if raw_decodable => (Some(Bytes::copy_from_slice(bytes)), true),
        Some(BodySource::Fixed(bytes)) => (Some(Bytes::copy_from_slice(bytes)), false),
        _ => (None, false),
    };
    // Only an attempt the recording stops in may go on pinging (worked out
    // only then: it reads every chunk of the attempt).
    let pings_past_recording =
        playback.assumptions.stall == StallAssumption::Keepalives && matches!(tail, Tail::Abandoned);
    let keepalive = if pings_past_recording { keepalive_rhythm(recorded) } else { None };
    let decoder: Option<Box<dyn Decoder>> = if real_bytes {
        None
    } else {
        Some(Box::new(RecordedEventsDecoder::new(recorded, end.as_ref(), keepalive.is_some())))
    };
    let play = Play {
        playback: Arc::clone(playback),
        chunks: Arc::clone(&recorded.chunks),
        started: recorded.started,
        ids: (stream, attempt),
        start,
        ahead_until: playback.horizon.saturating_duration_since(start),
        next: 0,
        source,
        used: 0,
        tail: Some(tail),
        end_at,
        last_byte: headers_at,
        pinged_at: end_at,
        waiting: None,
        keepalive,
        raw_pings: real_bytes,
        sleep: Box::pin(tokio::time::sleep_until(start)),
    };
    Ok(Response { decoder, ..Response::new(response.status, headers, play.boxed()) })
}

/// The recorded rhythm of keep-alives (interval and chunk size), when the
/// attempt had any, for the assumption that a stall keeps pinging.
fn keepalive_rhythm(recorded: &RecordedAttempt) -> Option<(Duration, usize)> {
    let mut pings = recorded
        .chunks_with_events()
        .filter(|(_, events)| !events.is_empty() && events.iter().all(|(class, _)| *class == EventClass::Keepalive))
        .map(|(chunk, _)| chunk);
    let first = *pings.next()?;
    let (mut count, mut size, mut last) = (1u32, first.bytes as usize, first);
    for ping in pings {
        (count, size, last) = (count + 1, size + ping.bytes as usize, *ping);
    }
    let interval = last.at.saturating_sub(first.at) / (count - 1).max(1);
    (count > 1 && !interval.is_zero()).then_some((interval, size / count as usize))
}

/// Spaces the filler chunks and texts are cut from: a chunk's bytes only
/// matter for their count when its events travel with the response's
/// decoder, and a text the recording did not keep only for its length.
/// Checked as text once, when compiled, not per event.
static FILLER: &str = match std::str::from_utf8(&[b' '; 16 * 1024]) {
    Ok(spaces) => spaces,
    Err(_) => "",
};

/// One replayed body in progress: each recorded chunk at its offset, then
/// the tail. The read backstop is emulated: a gap longer than it ends the
/// body with the backstop's timeout, as the HTTP client would.
struct Play {
    playback: Arc<Playback>,
    /// The recorded attempt's chunks, held here rather than reached through
    /// the recording: each chunk of a long replay would otherwise walk
    /// three pointers whose memory other streams have long displaced.
    chunks: Arc<[RecordedChunk]>,
    /// When the recorded attempt started (since the run's epoch).
    started: Duration,
    ids: (StreamId, u32),
    start: Instant,
    /// The replay's horizon, from `start`: chunks due before it are handed
    /// over ahead of the clock.
    ahead_until: Duration,
    /// The next recorded chunk.
    next: usize,
    /// The bytes chunks are cut from (a raw body or an error body), if any.
    source: Option<Bytes>,
    used: usize,
    tail: Option<Tail>,
    end_at: Duration,
    /// When the last byte came, or the headers before the first (since the
    /// attempt's start): what the read backstop measures its gap from, as
    /// the client restarts it on the first body poll and after each frame.
    last_byte: Duration,
    /// When the last keep-alive assumed past the recording came (from the
    /// recording's end): the rhythm's anchor.
    pinged_at: Duration,
    /// What it waits for, once the sleep is set for it.
    waiting: Option<Due>,
    keepalive: Option<(Duration, usize)>,
    /// Whether keep-alives past the recording must be real SSE bytes.
    raw_pings: bool,
    /// The one timer the play sleeps on, reset for each chunk (cheaper
    /// than a new one per chunk, which a long recording has millions of).
    sleep: Pin<Box<Sleep>>,
}

/// What the play waits for.
enum Due {
    /// The body's next item (`None`: its end) at this offset.
    Item(Duration, Option<Result<Bytes, Failure>>),
    /// The point where the recording stops, to go past it.
    PastRecording(Duration),
    /// Nothing ever comes again.
    Never,
}

impl Play {
    /// What comes next, and when. The read backstop is the client's: a gap
    /// since the last byte longer than it comes first, as its timeout.
    fn due(&mut self) -> Due {
        let due = if let Some((at, size)) = self.next_chunk() {
            Due::Item(at, Some(Ok(self.take_chunk(size))))
        } else {
            match self.tail.take() {
                Some(Tail::End) => Due::Item(self.end_at, None),
                Some(Tail::Fail(failure)) => Due::Item(self.end_at, Some(Err(failure))),
                Some(Tail::Abandoned) => Due::PastRecording(self.end_at + RECORDING_GRACE),
                None => match (self.playback.assumptions.stall, self.keepalive) {
                    (StallAssumption::Keepalives, Some((interval, size))) => {
                        self.tail = None;
                        let bytes = if self.raw_pings { Bytes::from_static(b": keep-alive\n\n") } else { filler(size) };
                        self.pinged_at += interval;
                        Due::Item(self.pinged_at, Some(Ok(bytes)))
                    }
                    _ => Due::Never,
                },
            }
        };
        let at = match &due {
            Due::Item(at, _) | Due::PastRecording(at) => *at,
            Due::Never => Duration::MAX,
        };
        match self.playback.read_backstop {
            Some(backstop) if !self.backstop_allows(at) => {
                let timeout = Failure::Timeout { timer: TimerKind::Idle, after: backstop };
                Due::Item(self.last_byte + backstop, Some(Err(timeout)))
            }
            _ => due,
        }
    }

    /// The next recorded chunk's offset from the attempt's start, and its
    /// size.
    #[inline]
    fn next_chunk(&self) -> Option<(Duration, usize)> {
        self.chunks.get(self.next).map(|chunk| (chunk.at.saturating_sub(self.started), chunk.bytes as usize))
    }

    /// Takes the next recorded chunk's bytes, `size` of them.
    #[inline]
    fn take_chunk(&mut self, size: usize) -> Bytes {
        self.next += 1;
        self.cut(size)
    }

    /// Whether the client's read backstop lets the gap since the last byte
    /// reach `at`.
    fn backstop_allows(&self, at: Duration) -> bool {
        self.playback
            .read_backstop
            .is_none_or(|backstop| backstop.is_zero() || at.saturating_sub(self.last_byte) <= backstop)
    }

    /// The next `size` bytes of the source, or filler. Inlined, as are the
    /// filler makers: returned through memory from a call, the bytes were
    /// read back before the write had landed, a stall that was a fifth of
    /// the replayed body's time.
    #[inline]
    fn cut(&mut self, size: usize) -> Bytes {
        match &self.source {
            None => filler(size),
            Some(source) => cut_from(source, &mut self.used, size),
        }
    }
}

/// A hand-written stream rather than `stream::unfold`: the play stays in
/// place instead of moving through a new future for each of a long
/// recording's millions of chunks.
impl futures_util::Stream for Play {
    type Item = Result<Chunk, Failure>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let play = self.get_mut();
        loop {
            if play.waiting.is_none() {
                // A recorded chunk is handed over ahead of the clock (see
                // `Playback::horizon`), without building what `due` makes
                // of it: this runs for every chunk of a replay.
                if let Some((at, size)) = play.next_chunk()
                    && at <= play.ahead_until
                    && play.backstop_allows(at)
                {
                    play.last_byte = at;
                    let bytes = play.take_chunk(size);
                    return Poll::Ready(Some(Ok(Chunk { bytes, arrived: Some(play.start + at) })));
                }
                // The rest waits for the clock: what the attempt does after
                // its body ends or fails meets the other streams in time.
                match play.due() {
                    Due::Never => return Poll::Pending,
                    due @ (Due::Item(at, _) | Due::PastRecording(at)) => {
                        play.sleep.as_mut().reset(play.start + at);
                        play.waiting = Some(due);
                    }
                }
            }
            if play.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            match play.waiting.take() {
                Some(Due::Item(at, item)) => {
                    play.last_byte = at;
                    if matches!(item, Some(Err(_))) {
                        // A failure ends the body: nothing follows it.
                        (play.next, play.tail) = (usize::MAX, Some(Tail::End));
                    }
                    let arrived = Some(play.start + at);
                    return Poll::Ready(item.map(|item| item.map(|bytes| Chunk { bytes, arrived })));
                }
                Some(Due::PastRecording(_)) => {
                    // The play reached where the recording stops: from here
                    // on it plays what is assumed.
                    let assumption = play.playback.assumptions.stall;
                    play.playback.log.went_past_recording(play.ids.0, play.ids.1, assumption);
                    if play.keepalive.is_some() && play.playback.only_idle_ends {
                        play.playback.log.never_ends(play.ids.0, play.ids.1);
                        return Poll::Ready(Some(Err(Failure::Cancelled)));
                    }
                    if assumption == StallAssumption::Stop {
                        return Poll::Ready(Some(Err(Failure::Cancelled)));
                    }
                }
                Some(Due::Never) | None => return Poll::Pending,
            }
        }
    }
}

/// The next `size` bytes of `source` after the `used` ones, padded with
/// spaces past its end.
fn cut_from(source: &Bytes, used: &mut usize, size: usize) -> Bytes {
    let start = (*used).min(source.len());
    *used += size;
    if *used <= source.len() {
        source.slice(start..*used)
    } else {
        let mut bytes = source.slice(start..).to_vec();
        bytes.resize(size, b' ');
        Bytes::from(bytes)
    }
}

#[inline]
fn filler(size: usize) -> Bytes {
    match FILLER.as_bytes().get(..size) {
        Some(bytes) => Bytes::from_static(bytes),
        None => long_filler(size),
    }
}

/// Filler longer than [`FILLER`]: rare, and kept out of line so that the
/// common case inlines.
#[cold]
fn long_filler(size: usize) -> Bytes {
    Bytes::from(vec![b' '; size])
}

/// A decoder that finds in each chunk the events the recording says the
/// live decoder found there (the chunk's bytes are filler).
struct RecordedEventsDecoder {
    /// The recorded attempt's chunks and events (held here for the reason
    /// [`Play`] holds its chunks).
    chunks: Arc<[RecordedChunk]>,
    events: Arc<[(EventClass, u32)]>,
    /// The next chunk and the next of the attempt's events.
    chunk: usize,
    event: usize,
    /// The recorded texts, when text bodies were recorded.
    texts: std::vec::IntoIter<String>,
    /// Decoded at the last chunk: how the stream ended.
    ending: Vec<Decoded>,
    keepalives_after: bool,
}

impl RecordedEventsDecoder {
    fn new(recorded: &RecordedAttempt, end: Option<&AttemptEnd>, keepalives_after: bool) -> Self {
        let texts = match &recorded.body {
            Some(RecordedBody::Text { texts, .. }) => texts.clone(),
            _ => Vec::new(),
        };
        let ending = match end {
            Some(AttemptEnd::Done) => {
                recorded.stop_reason.iter().cloned().map(Decoded::StopReason).chain([Decoded::Done]).collect()
            }
            Some(AttemptEnd::InStream { code }) => {
                let shape = Failure::InStream { code: code.clone(), message: String::new() };
                vec![Decoded::Error {
                    code: code.clone(),
                    message: recorded.failure_message(&shape).unwrap_or_default(),
                }]
            }
            Some(AttemptEnd::Malformed) => {
                let shape = Failure::Malformed { message: String::new() };
                vec![Decoded::Malformed(recorded.failure_message(&shape).unwrap_or_default())]
            }
            _ => Vec::new(),
        };
        RecordedEventsDecoder {
            chunks: Arc::clone(&recorded.chunks),
            events: Arc::clone(&recorded.events),
            chunk: 0,
            event: 0,
            texts: texts.into_iter(),
            ending,
            keepalives_after,
        }
    }
}

/// The decoder of a provider row whose dialect the recording does not know.
struct Undecodable;

impl Decoder for Undecodable {
    fn feed(&mut self, _chunk: &[u8], out: &mut Vec<Decoded>) {
        out.push(Decoded::Malformed("the recording names no dialect this stallscope knows".to_owned()));
    }

    fn finish(&mut self, _out: &mut Vec<Decoded>) {}
}

/// Text of the recorded length: content the recording did not keep. A
/// slice of the filler, neither built nor allocated: a long replay makes
/// millions.
#[inline]
fn filler_text(class: EventClass, chars: u32) -> Cow<'static, str> {
    if class == EventClass::Keepalive {
        return Cow::Borrowed("");
    }
    match FILLER.get(..chars as usize) {
        Some(spaces) => Cow::Borrowed(spaces),
        None => Cow::Owned(" ".repeat(chars as usize)),
    }
}

impl Decoder for RecordedEventsDecoder {
    fn feed(&mut self, _chunk: &[u8], out: &mut Vec<Decoded>) {
        let Some(chunk) = self.chunks.get(self.chunk) else {
            if self.keepalives_after {
                out.push(Decoded::Event { class: EventClass::Keepalive, text: Cow::Borrowed("") });
            }
            return;
        };
        self.chunk += 1;
        let own = self.event..self.event + chunk.events as usize;
        self.event = own.end;
        for &(class, chars) in self.events.get(own).unwrap_or_default() {
            let text = self.texts.next().map_or_else(|| filler_text(class, chars), Cow::Owned);
            out.push(Decoded::Event { class, text });
        }
        // The stream's end comes with its last chunk (or, when it had none,
        // at the body's end).
        if self.chunk == self.chunks.len() {
            out.append(&mut self.ending);
        }
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        out.append(&mut self.ending);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::StreamCourse;
    use crate::replay::recording::{RecordedChunk, RecordedResponse, RecordedStream};
    use crate::store::runs::RunMeta;
    use crate::tunables::Tunables;

    /// A chunk: when (ms), its size, and the events found in it.
    type Chunk<'a> = (u64, u32, &'a [(EventClass, u32)]);

    fn attempt(chunks: &[Chunk<'_>], end: Option<(u64, AttemptEnd)>) -> RecordedAttempt {
        RecordedAttempt {
            ordinal: 1,
            target: Target::new("p", "m"),
            started: Duration::from_millis(100),
            response: Some(RecordedResponse {
                at: Duration::from_millis(110),
                status: 200,
                content_type: Some("text/event-stream".into()),
                headers: vec![],
                error_body: None,
                error_body_cut: false,
            }),
            chunks: chunks
                .iter()
                .map(|&(ms, bytes, events)| RecordedChunk {
                    at: Duration::from_millis(ms),
                    bytes,
                    events: events.len() as u32,
                })
                .collect(),
            events: chunks.iter().flat_map(|(_, _, events)| events.iter().copied()).collect(),
            ended: end.map(|(ms, e)| (Duration::from_millis(ms), e)),
            stop_reason: Some("stop".into()),
            message: None,
            body: None,
        }
    }

    fn playback(attempt: RecordedAttempt) -> Arc<Playback> {
        playback_with(attempt, None)
    }

    fn playback_with(attempt: RecordedAttempt, read_backstop: Option<Duration>) -> Arc<Playback> {
        let stream = RecordedStream {
            id: 0,
            target: attempt.target.clone(),
            context_tokens: None,
            course: StreamCourse::of(&[]),
            verdict: crate::diagnosis::diagnose(&[]),
            started: Duration::ZERO,
            last_at: Duration::ZERO,
            attempts: vec![attempt],
            clocks: Vec::new(),
        };
        let meta = RunMeta {
            requests: 1,
            concurrency: 1,
            seed: 0,
            epoch_unix_ns: 0,
            rules: serde_json::json!([]),
            pools: Default::default(),
        };
        let recording = Recording {
            run: 1,
            tunables: Tunables::defaults(),
            meta,
            rules: Vec::new(),
            providers: Vec::new(),
            streams: vec![stream],
        };
        Arc::new(Playback {
            recording: Arc::new(recording),
            assumptions: Assumptions::default(),
            connect_timeout: Duration::from_secs(10),
            read_backstop,
            only_idle_ends: false,
            epoch: Instant::now(),
            horizon: Instant::now() + Duration::from_secs(3600),
            log: PlayLog::default(),
        })
    }

    #[tokio::test]
    async fn a_recorded_decoder_finds_each_chunks_events_and_the_end_in_the_last() {
        let content: &[(EventClass, u32)] = &[(EventClass::Content, 2)];
        let a = attempt(&[(120, 10, content), (130, 4, &[])], Some((130, AttemptEnd::Done)));
        let mut decoder = RecordedEventsDecoder::new(&a, Some(&AttemptEnd::Done), false);
        let mut out = Vec::new();
        decoder.feed(b"xxxxxxxxxx", &mut out);
        assert_eq!(out, [Decoded::Event { class: EventClass::Content, text: "  ".into() }]);
        out.clear();
        decoder.feed(b"xxxx", &mut out);
        assert_eq!(out, [Decoded::StopReason("stop".into()), Decoded::Done]);
    }

    #[test]
    fn keepalives_keep_their_recorded_rhythm() {
        let ping: &[(EventClass, u32)] = &[(EventClass::Keepalive, 0)];
        let a =
            attempt(&[(120, 20, &[(EventClass::Content, 3)]), (200, 14, ping), (300, 14, ping), (400, 14, ping)], None);
        assert_eq!(keepalive_rhythm(&a), Some((Duration::from_millis(100), 14)));
        assert_eq!(keepalive_rhythm(&attempt(&[(120, 20, ping)], None)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn error_bodies_are_replayed_as_recorded_text_at_their_offsets() {
        let mut a = attempt(&[(120, 5, &[]), (125, 10, &[])], Some((125, AttemptEnd::Status { status: 529 })));
        let response = a.response.as_mut().unwrap();
        (response.status, response.content_type) = (529, Some("application/json".into()));
        response.error_body = Some("overloaded_error".to_owned());
        let up = RecordedUpstream::new(None, playback(a));
        let target = Target::new("p", "m");
        let input = crate::core::upstream::CallInput::default();
        let request = AttemptRequest { stream: 0, attempt: 1, target: &target, credential: None, input: &input };
        let started = Instant::now();
        let response = up.open(request).await.unwrap();
        assert_eq!((response.status, started.elapsed()), (529, Duration::from_millis(10)));
        // The chunks are handed over at once, each stamped with when it
        // arrived; the body's end waits for the clock.
        let chunks: Vec<(Bytes, Duration)> =
            response.body.map(|c| c.map(|c| (c.bytes, c.arrived.unwrap() - started)).unwrap()).collect().await;
        assert_eq!(started.elapsed(), Duration::from_millis(25));
        assert_eq!(
            chunks,
            [
                (Bytes::from_static(b"overl"), Duration::from_millis(20)),
                (Bytes::from_static(b"oaded_erro"), Duration::from_millis(25))
            ]
        );
    }

    /// A failure as the test reads it: what it says and when it came.
    type Failed = (String, Duration);

    /// Opens the attempt and reads its body: each chunk's offset from the
    /// open, or the failure and when it came.
    async fn read(up: &RecordedUpstream) -> Result<Vec<Result<Duration, Failed>>, Failed> {
        let target = Target::new("p", "m");
        let input = crate::core::upstream::CallInput::default();
        let request = AttemptRequest { stream: 0, attempt: 1, target: &target, credential: None, input: &input };
        let started = Instant::now();
        let response = up.open(request).await.map_err(|f| (f.to_string(), started.elapsed()))?;
        let items: Vec<Result<crate::core::upstream::Chunk, Failure>> = response.body.collect().await;
        Ok(items
            .into_iter()
            .map(|item| match item {
                Ok(chunk) => Ok(chunk.arrived.map_or_else(|| started.elapsed(), |at| at - started)),
                Err(failure) => Err((failure.to_string(), started.elapsed())),
            })
            .collect())
    }

    /// Review D4: the client's read backstop bounds the wait for headers
    /// from the request, and then each gap from the headers or the last
    /// byte, as reqwest arms it; past the recording it still runs from
    /// the last byte.
    #[tokio::test(start_paused = true)]
    async fn the_read_backstop_runs_from_the_request_then_from_the_headers_and_each_byte() {
        let ms = Duration::from_millis;
        let content: &[(EventClass, u32)] = &[(EventClass::Content, 2)];
        // Headers 10 ms in, the first byte 25 ms after them (35 ms in).
        let healthy = attempt(&[(135, 10, content)], Some((135, AttemptEnd::Done)));
        let up = RecordedUpstream::new(None, playback_with(healthy, Some(ms(30))));
        assert_eq!(read(&up).await.unwrap(), [Ok(ms(35))]);

        // No headers before our idle timer gave up at 50 ms: the backstop
        // ends the wait at 30 ms.
        let mut waiting = attempt(&[], Some((150, AttemptEnd::Timer { timer: TimerKind::Idle })));
        waiting.response = None;
        let up = RecordedUpstream::new(None, playback_with(waiting, Some(ms(30))));
        assert_eq!(read(&up).await.unwrap_err(), ("idle timer fired after 0.030 s".to_owned(), ms(30)));

        // The last byte 20 ms in, our data-stall timer gave up at 70 ms; a
        // 100 ms backstop ends the silence 100 ms after the last byte.
        let stalled = attempt(&[(120, 10, content)], Some((170, AttemptEnd::Timer { timer: TimerKind::DataStall })));
        let up = RecordedUpstream::new(None, playback_with(stalled, Some(ms(100))));
        let backstop = ("idle timer fired after 0.100 s".to_owned(), ms(120));
        assert_eq!(read(&up).await.unwrap(), [Ok(ms(20)), Err(backstop)]);
    }

    /// Review D7: a failure rebuilt from its recorded description carries
    /// the message it described, not the description again.
    #[tokio::test(start_paused = true)]
    async fn a_replayed_break_carries_its_recorded_message_once() {
        let content: &[(EventClass, u32)] = &[(EventClass::Content, 2)];
        let mut reset =
            attempt(&[(120, 10, content)], Some((130, AttemptEnd::Transport { kind: TransportKind::Reset })));
        reset.message =
            Some(Failure::Transport { kind: TransportKind::Reset, message: "peer reset".into() }.to_string());
        let up = RecordedUpstream::new(None, playback(reset));
        let items = read(&up).await.unwrap();
        assert_eq!(items[1], Err(("connection reset: peer reset".to_owned(), Duration::from_millis(30))));
    }
}
