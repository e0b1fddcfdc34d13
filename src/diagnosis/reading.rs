//! What one attempt shows: the pattern its facts fit, in words, with the
//! evidence, the tunable that governs it and what to try.
//!
//! Each attempt is read once, from its folded facts: how it ended picks the
//! family (a timer, the transport, a status, the stream itself), and the
//! facts pick the pattern within it. A successful attempt is read for the
//! patterns that put healthy streams at risk of a false timeout.

use std::time::Duration;

use crate::core::category::{Category, TimerKind};
use crate::core::classify;
use crate::core::event::{AttemptEnd, AttemptPhase};
use crate::core::failure::{Failure, TransportKind};

use super::facts::{BURST_WINDOW, Hold, Try, WouldFire};
use super::hop;
use super::text::{budget, bytes, count, fact, percent, secs, timer, timer_tunable};
use super::verdict::{Evidence, Topic, VerdictKind};
use crate::tunables::PREFIX;

/// A wait for the first body byte at least this long, before a burst, reads
/// as buffering when a header names a proxy or cache on the path (`via`,
/// `x-cache`); shorter ones are a model's ordinary think time.
const BUFFERED_WAIT: Duration = Duration::from_millis(250);

/// Without a header naming a hop, the wait must be this long: a fast
/// provider's short answer (a canary's few words) or an edge that packs
/// frames into one read arrives in a burst after a few hundred
/// milliseconds, which is no sign of buffering.
const BUFFERED_WAIT_UNNAMED: Duration = Duration::from_secs(1);

/// The headers that name a hop which may hold a stream back.
const HOP_HEADERS: [&str; 2] = ["via", "x-cache"];

/// Statuses a gateway sends when its upstream did not answer, or not in
/// time: 502 (bad gateway), 504 (gateway timeout), Cloudflare's 524 (a
/// timeout occurred), Envoy's 408 (no upstream header before its idle
/// timeout).
const GATEWAY_STATUSES: [u16; 4] = [408, 502, 504, 524];

/// Words of the error pages intermediaries make themselves, lower-case
/// (Envoy's `upstream request timeout`, nginx's and HAProxy's
/// `Gateway Time-out`, Cloudflare's `A timeout occurred`).
const GATEWAY_PAGE_WORDS: [&str; 5] =
    ["upstream request timeout", "upstream connect error", "gateway time-out", "a timeout occurred", "bad gateway"];

/// Progress events a burst must carry to read as a held-back stream rather
/// than a short answer sent in one piece: a canary's five words or a
/// probe's one come in fewer, and a fast provider may well send those in
/// one write after its think time, which no timing can tell from a hop
/// that held them.
const BUFFERED_EVENTS: u64 = 16;

/// Progress events a read must carry on average, after a wait, for a body
/// to read as let go in lumps: a model's stream comes an event or two a
/// read, a hop releasing its 4 KiB buffer each time it fills (nginx with
/// its defaults) twenty or more.
const LUMP_EVENTS: u64 = 8;

/// A close or reset after the headers that followed a silence at least
/// this long is an idle cut, a hop's timer rather than a break: no
/// intermediary's idle timer is set shorter, and a break mid-flow (a
/// provider crashing, a load balancer recycling) comes between bytes.
const IDLE_CUT_SILENCE: Duration = Duration::from_secs(1);

/// A drip: at least this many reads, this many reads per parsed event, and
/// reads this small on average (a healthy stream reads about one event,
/// a hundred bytes or more, at a time).
const DRIP_READS: u64 = 20;
const DRIP_READS_PER_EVENT: u64 = 4;
const DRIP_MEAN_BYTES: u64 = 64;

/// A healthy attempt that used this share of a timer's budget was close
/// enough to a false timeout to say so.
const SLOW_SHARE: f64 = 0.5;

/// Reasoning this long before the first content is worth naming even when
/// every timer had room.
const LONG_REASONING: Duration = Duration::from_secs(30);

/// Progress this recent when the total timer or the deadline fired means
/// the stream was still working, not stalled.
const STILL_PROGRESSING: Duration = Duration::from_secs(1);

/// One attempt, read.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Reading {
    /// The pattern.
    pub kind: VerdictKind,
    /// The clause that follows the kind's label in a summary.
    pub detail: String,
    /// The facts, in order.
    pub evidence: Vec<Evidence>,
    /// The tunable that governs it.
    pub tunable: Option<&'static str>,
    /// What to try.
    pub suggestion: Option<String>,
    /// The timer that caught it, with its budget.
    pub timer: Option<(TimerKind, Duration)>,
    /// The silence before an idle cut or a cancel, or the wait before a
    /// gateway answered for the provider: what a hop's, or a caller's,
    /// fixed timer shows as.
    pub silence: Option<Duration>,
}

impl Reading {
    fn new(kind: VerdictKind, detail: String) -> Reading {
        Reading { kind, detail, evidence: Vec::new(), tunable: None, suggestion: None, timer: None, silence: None }
    }

    fn governed(mut self, tunable: &'static str, suggestion: impl Into<String>) -> Reading {
        self.tunable = Some(tunable);
        self.suggestion = Some(suggestion.into());
        self
    }

    fn suggest(mut self, suggestion: impl Into<String>) -> Reading {
        self.suggestion = Some(suggestion.into());
        self
    }
}

/// How an attempt ended, from its `AttemptEnded` event or, in recordings
/// made before that event existed, from the timer that fired or the
/// classifier's reading.
pub(super) fn end_of(t: &Try) -> Option<AttemptEnd> {
    if let Some(end) = &t.end {
        return Some(end.clone());
    }
    if let Some(fired) = &t.fired {
        return Some(AttemptEnd::Timer { timer: fired.timer });
    }
    let c = t.classified.as_ref()?;
    if c.category == Category::Cancelled {
        return Some(AttemptEnd::Cancelled);
    }
    if let Some(status) = c.status {
        return Some(AttemptEnd::Status { status });
    }
    // The built-in rules name each transport kind: read the kind back
    // from the rule the classifier recorded.
    let transport = TransportKind::ALL.into_iter().find(|&kind| {
        let (_, rule) = classify::builtin(&Failure::Transport { kind, message: String::new() });
        c.rule == format!("builtin: {rule}")
    });
    if let Some(kind) = transport {
        return Some(AttemptEnd::Transport { kind });
    }
    let (_, malformed) = classify::builtin(&Failure::Malformed { message: String::new() });
    (c.rule == format!("builtin: {malformed}")).then_some(AttemptEnd::Malformed)
}

/// Reads one try.
pub(super) fn read(t: &Try) -> Reading {
    if let Some(refused) = refused_by_proxy(t) {
        return refused;
    }
    let mut reading = match end_of(t) {
        Some(AttemptEnd::Done) => success(t),
        Some(AttemptEnd::Timer { timer }) => timed_out(t, timer),
        Some(AttemptEnd::Transport { kind }) => transport(t, kind),
        Some(AttemptEnd::Status { status }) => answered(t, Some(status)),
        Some(AttemptEnd::InStream { code }) => in_stream(t, code.as_deref()),
        Some(AttemptEnd::Malformed) => malformed(t),
        Some(AttemptEnd::Cancelled) => cancelled(t),
        None if t.started_at.is_none() => between_attempts(t),
        None if t.classified.is_some() => answered(t, t.status),
        None => Reading::new(VerdictKind::Incomplete, format!("attempt {} was {}", t.number, phase_words(t.phase))),
    };
    let mut evidence = response_evidence(t);
    evidence.append(&mut reading.evidence);
    reading.evidence = evidence;
    if let Some(mark) = &t.would_fire {
        would_have_fired(t, mark, &mut reading);
    }
    for hold in &t.held {
        let words = format!("{}; it started again", held_words(hold));
        reading.evidence.push(fact(Topic::Lag, Some(t.number), Some(hold.at), words));
    }
    // A completed attempt's reading says so itself (`held_through`).
    if reading.kind == VerdictKind::Cancelled
        && let Some(hold) = verdict_hold(t)
    {
        reading.detail.push_str(&format!("; {}", held_words(hold)));
    }
    reading
}

/// Our timer held for our own lateness, in words: "our idle timer (1 s)
/// came due while our own runtime was 0.35 s late (35% of its budget): not
/// acted on (client overloaded)".
pub(super) fn held_words(hold: &Hold) -> String {
    format!(
        "our {} timer ({}) came due while our own runtime was {} late ({} of its budget): not acted on \
         (client overloaded)",
        timer(hold.timer),
        budget(hold.budget),
        secs(hold.lag),
        percent(hold.lag, hold.budget)
    )
}

/// The hold an attempt's verdict turns on: its last, when nothing of ours
/// or the stream's ended it after (it completed, or was cancelled); a
/// timer that fired later, or a failure, is what its verdict reads.
pub(super) fn verdict_hold(t: &Try) -> Option<&Hold> {
    t.held.last().filter(|_| matches!(end_of(t), Some(AttemptEnd::Done | AttemptEnd::Cancelled)))
}

/// The call was cancelled from outside: where the attempt was, and how
/// long it had been silent, the wait that a caller's own timeout cut
/// short. An observed agent that disconnected is said to have (observe
/// stopping, Ctrl-C, is not the agent going), with what our timers make
/// of the silence it gave up on.
fn cancelled(t: &Try) -> Reading {
    let at = t.agent_gone_at.unwrap_or(t.stopped_at());
    let silence = at.saturating_sub(t.last_sign_of_life().unwrap_or(at));
    let place = format!("{}, {} after the last sign of life", phase_words(t.phase), secs(silence));
    let Some(gone) = t.agent_gone_at else {
        let mut reading = Reading::new(VerdictKind::Cancelled, place);
        reading.silence = Some(silence);
        return reading;
    };
    let after = secs(t.offset(gone));
    let mut reading = Reading::new(VerdictKind::Cancelled, format!("the agent disconnected after {after}, {place}"));
    reading.silence = Some(silence);
    reading.evidence.push(fact(
        Topic::Timing,
        Some(t.number),
        Some(gone),
        format!(
            "the agent disconnected after {after}, {} after the last sign of life: its own timeout, or it gave up",
            secs(silence)
        ),
    ));
    match &t.would_fire {
        Some(mark) => {
            let tunable = timer_tunable(mark.timer);
            let check = whatif_set(mark.timer, mark.budget)
                .map(|set| format!("; {set} shows which of the run's calls it saves and which healthy ones it cuts"))
                .unwrap_or_default();
            reading.governed(
                tunable,
                format!(
                    "the agent waited {} longer than our {} timer would have: with stallscope's core in its place \
                     the stall would have been noticed at {}{check}",
                    secs(gone.saturating_sub(mark.at)),
                    timer(mark.timer),
                    secs(t.offset(mark.at))
                ),
            )
        }
        None if silence >= IDLE_CUT_SILENCE => reading.governed(
            timer_tunable(TimerKind::Idle),
            format!(
                "no timer of ours, under the tunables in force, would have fired before the agent gave up; \
                 an idle timer below its silence would have: {} shows which of the run's calls that saves and \
                 which healthy ones it cuts",
                whatif_set(TimerKind::Idle, just_below(silence)).unwrap_or_default()
            ),
        ),
        None => reading,
    }
}

/// Our timer would have fired on the attempt (observed: our clocks only
/// watch): said after the reading's own words, and as evidence where it
/// would have fired.
fn would_have_fired(t: &Try, mark: &WouldFire, reading: &mut Reading) {
    let words = format!(
        "our {} timer ({}) would have fired at {}",
        timer(mark.timer),
        budget(mark.budget),
        secs(t.offset(mark.at))
    );
    let sooner = t
        .agent_gone_at
        .map(|gone| format!(", {} before the agent disconnected", secs(gone.saturating_sub(mark.at))))
        .unwrap_or_default();
    reading.evidence.push(fact(
        Topic::Timing,
        Some(t.number),
        Some(mark.at),
        format!("{words}{sooner} (observed: not acted on)"),
    ));
    reading.detail.push_str(&format!("; {words}"));
}

/// `stallscope whatif RUN --set NAME=VALUE`, quoted, for `timer` at
/// `value`: what checks a budget on the run. None for the throughput
/// floor, whose budget is its window, not the rate it is set by.
fn whatif_set(timer_kind: TimerKind, value: Duration) -> Option<String> {
    let tunable = timer_tunable(timer_kind);
    let name = tunable.strip_prefix(PREFIX).unwrap_or(tunable);
    (timer_kind != TimerKind::MinRate).then(|| format!("`stallscope whatif RUN --set {name}={}`", value.as_secs_f64()))
}

/// A budget just below `silence`, in tenths of a second: one that would
/// have ended it.
fn just_below(silence: Duration) -> Duration {
    Duration::from_secs_f64((silence.as_secs_f64() * 9.5).floor() / 10.0)
}

/// A budget just above `seen`, in tenths of a second: one that would have
/// let it be.
fn just_above(seen: Duration) -> Duration {
    Duration::from_secs_f64((seen.as_secs_f64() * 10.5).ceil() / 10.0)
}

fn phase_words(phase: Option<AttemptPhase>) -> &'static str {
    match phase {
        None | Some(AttemptPhase::Connecting) => "while connecting",
        Some(AttemptPhase::AwaitingHeaders) => "while awaiting the response headers",
        Some(AttemptPhase::AwaitingFirstContent) => "before any content",
        Some(AttemptPhase::Streaming) => "while streaming",
        Some(AttemptPhase::Done) => "after the stream was done",
    }
}

/// The headers that say who answered: a shared proxy or server is what
/// ties many streams' verdicts together.
pub(super) const PEER_HEADERS: [&str; 3] = ["via", "server", "x-cache"];

/// The headers a server asks to be waited for with.
pub(super) const WAIT_HEADERS: [&str; 2] = ["retry-after-ms", "retry-after"];

/// The response itself: status and the headers that say who answered.
fn response_evidence(t: &Try) -> Vec<Evidence> {
    let n = Some(t.number);
    let mut out = Vec::new();
    if let (Some(at), Some(status)) = (t.headers_at, t.status) {
        out.push(fact(Topic::Response, n, Some(at), format!("HTTP {status} after {}", secs(t.offset(at)))));
    }
    for (name, value) in t.headers.iter().filter(|(name, _)| PEER_HEADERS.contains(&name.as_str())) {
        out.push(fact(Topic::Response, n, t.headers_at, format!("{name}: {value}")));
    }
    out
}

/// What the body carried up to `at`, e.g. "3 chunks / 412 B, 2 progress events".
fn body_words(t: &Try) -> String {
    if t.chunks == 0 {
        return "no body byte".to_owned();
    }
    let mut words = format!("{} / {}", count(t.chunks, "chunk"), bytes(t.bytes));
    if t.progress > 0 {
        words.push_str(&format!(", {}", count(t.progress, "progress event")));
    }
    words
}

/// An attempt's times in its words are durations from its start ("headers
/// after 0.01 s"); only the evidence's stamps are on the run's clock, so
/// the two never read as times on one axis.
fn head_words(t: &Try) -> String {
    match (t.headers_at, t.status) {
        (Some(at), Some(status)) => format!("headers after {} ({status})", secs(t.offset(at))),
        _ => "no response headers".to_owned(),
    }
}

/// A timer of ours ended the attempt.
fn timed_out(t: &Try, timer_kind: TimerKind) -> Reading {
    let fired_at = t.stopped_at();
    let budget_d = t.fired.as_ref().map(|f| f.budget).or(t.armed(timer_kind)).unwrap_or_default();
    let named = format!("the {} timer ({})", timer(timer_kind), budget(budget_d));
    let silence = fired_at.saturating_sub(t.last_sign_of_life().unwrap_or(fired_at));
    let no_progress = fired_at.saturating_sub(t.last_progress_at.or(t.headers_at).or(t.started_at).unwrap_or(fired_at));
    let tunable = timer_tunable(timer_kind);
    let mut reading = if timer_kind == TimerKind::Connect {
        Reading::new(VerdictKind::ConnectTimeout, format!("no connection within {named}")).governed(
            tunable,
            "the host did not accept a connection in time: check the route (VPN, firewall); \
             a longer connect timer only helps on a slow but working path",
        )
    } else if t.headers_at.is_none() {
        Reading::new(
            VerdictKind::NoResponse,
            format!("request sent, no response headers in {} until {named} fired", secs(t.offset(fired_at))),
        )
        .governed(
            tunable,
            format!(
                "a queue upstream or a dead path: if the provider is merely slow to answer, \
                 raise {tunable} above its usual wait; otherwise keep it and let the retry go elsewhere"
            ),
        )
    } else if timer_kind == TimerKind::MinRate {
        crawled(t, fired_at, &named)
    } else if matches!(timer_kind, TimerKind::Total | TimerKind::Deadline)
        && t.last_progress_at.is_some_and(|p| fired_at.saturating_sub(p) <= STILL_PROGRESSING)
    {
        Reading::new(
            VerdictKind::HealthySlow,
            format!(
                "still making progress ({} in {}) when {named} cut it",
                count(t.progress, "progress event"),
                secs(t.offset(fired_at))
            ),
        )
        .governed(
            tunable,
            format!("the stream was working, not stalled: raise {tunable} if answers this long are expected"),
        )
    } else if timer_kind != TimerKind::Idle && t.keepalives_since_progress > 0 {
        // Keep-alives until the end (the idle timer firing means even they
        // had stopped: that is silence).
        let progress = match t.last_progress_at {
            Some(at) => format!("{} in the first {}", count(t.progress, "progress event"), secs(t.offset(at))),
            None => "no progress event".to_owned(),
        };
        Reading::new(
            VerdictKind::KeepaliveOnlyStall,
            format!(
                "{}, {progress}, then {} and no progress for {} until {named} fired",
                head_words(t),
                count(t.keepalives_since_progress, "keep-alive"),
                secs(no_progress)
            ),
        )
        .governed(
            "STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S",
            "keep-alives hide the stall from the idle timer: only the data-stall timer catches it; \
             lower STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S to catch it sooner, above the longest pause \
             between progress events of healthy streams",
        )
    } else if timer_kind == TimerKind::DataStall && is_drip(t) {
        Reading::new(
            VerdictKind::SlowDrip,
            format!("{}; no event completed for {} until {named} fired", drip_words(t), secs(no_progress)),
        )
        .governed(tunable, format!("the link delivers events slower than {tunable} allows: raise it, or fix the link"))
    } else {
        Reading::new(
            VerdictKind::SilentStall,
            format!("{}, {}, then {} of silence until {named} fired", head_words(t), body_words(t), secs(silence)),
        )
        .governed(
            tunable,
            format!(
                "nothing arrived for {}: a dead peer or a dropped route; a lower {tunable} notices it sooner, \
                 but keep it above the longest silence of healthy streams",
                secs(silence)
            ),
        )
    };
    // A held-back stream looks the same whichever clock runs out first:
    // the data-stall timer's, with TTFB off for a large prompt and idle's
    // budget longer, as often as the others.
    if matches!(timer_kind, TimerKind::Ttfb | TimerKind::Idle | TimerKind::DataStall) && t.headers_at.is_some() {
        if let Some(buffered) = buffered_until(t, &named, tunable) {
            reading = buffered;
        } else if t.chunks == 0 {
            let hop = t
                .first_header(&HOP_HEADERS)
                .map_or_else(|| "see `via`".to_owned(), |(name, value)| format!("{name}: {value}"));
            reading.suggestion = Some(format!(
                "headers came but no body byte: a buffering proxy ({hop}) holds streams like this; \
                 if so, raise {tunable} above its delay or switch its buffering off; otherwise a lower {tunable} \
                 notices a dead peer sooner"
            ));
        }
    }
    reading.timer = Some((timer_kind, budget_d));
    reading.evidence.push(fact(Topic::Timing, Some(t.number), Some(fired_at), reading.detail.clone()));
    reading
}

/// A timer caught a stream a hop was holding back: the body's first byte
/// came after a long wait as one burst and then nothing more, or no body
/// byte came at all behind a hop that buffers unless told not to (its
/// headers name it). `named` is the timer in words.
fn buffered_until(t: &Try, named: &str, tunable: &'static str) -> Option<Reading> {
    let hop = hop::named_by(&t.headers);
    let fired_at = t.stopped_at();
    let detail = match held_back(t) {
        Some(held) => format!("{}, {}, then nothing until {named} fired", head_words(t), held.words),
        None if t.chunks == 0 => {
            let buffering = hop.as_ref().filter(|hop| hop.unbuffer.is_some())?;
            let since = t.headers_at.unwrap_or(fired_at);
            format!(
                "{}, then no body byte for {} until {named} fired, behind {}, which buffers responses unless told \
                 not to",
                head_words(t),
                secs(fired_at.saturating_sub(since)),
                buffering.described()
            )
        }
        None => return None,
    };
    let unbuffer = unbuffer_words(hop.as_ref());
    Some(Reading::new(VerdictKind::ProxyBuffering, detail).governed(
        tunable,
        format!(
            "a hop that holds the stream back and lets it go in lumps trips our timers as a stall would: \
             {unbuffer}, or keep {tunable} above its delay; if its buffering is off, the provider stalled and \
             a lower {tunable} notices sooner"
        ),
    ))
}

/// A body a hop held back, as its timing shows it.
struct Held {
    /// How long the first body byte waited.
    wait: Duration,
    /// How the body came, as a clause: "then no body byte until 1.50 s,
    /// then 2.3 KiB (20 progress events) within 50 ms".
    words: String,
}

/// Whether a hop held the body back, and how: a wait of
/// [`BUFFERED_WAIT_UNNAMED`] (or [`BUFFERED_WAIT`] behind a `via` or
/// `x-cache`, or a hop that buffers by default) and [`BUFFERED_EVENTS`]
/// progress events or more, which came either whole (nine tenths of the
/// bytes within [`BURST_WINDOW`] of the first) or in lumps
/// ([`LUMP_EVENTS`] progress events a read, the reads as far apart: a hop
/// letting a buffer go each time it fills).
fn held_back(t: &Try) -> Option<Held> {
    let wait = t.offset(t.first_byte_at?);
    let named =
        t.first_header(&HOP_HEADERS).is_some() || hop::named_by(&t.headers).is_some_and(|h| h.unbuffer.is_some());
    let least = if named { BUFFERED_WAIT } else { BUFFERED_WAIT_UNNAMED };
    if wait < least || t.progress < BUFFERED_EVENTS {
        return None;
    }
    if t.burst_bytes * 10 >= t.bytes * 9 && t.burst_progress >= BUFFERED_EVENTS {
        let words = format!(
            "then no body byte until {}, then {} ({}) within {} ms",
            secs(wait),
            bytes(t.burst_bytes),
            count(t.burst_progress, "progress event"),
            BURST_WINDOW.as_millis()
        );
        return Some(Held { wait, words });
    }
    (t.progress >= LUMP_EVENTS * t.chunks).then(|| Held {
        wait,
        words: format!(
            "then no body byte until {}, then {} ({}) in {}, up to {} apart",
            secs(wait),
            bytes(t.bytes),
            count(t.progress, "progress event"),
            count(t.chunks, "read"),
            secs(t.longest_silence)
        ),
    })
}

/// How to stop the hop holding streams back: its own knob when a header
/// names it and it has one, else nginx's, the usual culprit.
fn unbuffer_words(hop: Option<&hop::Hop>) -> String {
    match hop.and_then(|hop| Some((hop, hop.unbuffer?))) {
        Some((hop, how)) => format!("switch {}'s buffering off ({how})", hop.name),
        None => "switch the buffering off (nginx `proxy_buffering off`, `X-Accel-Buffering: no`)".to_owned(),
    }
}

/// The throughput floor ended the attempt: progress came, too slowly.
fn crawled(t: &Try, fired_at: Duration, named: &str) -> Reading {
    let pace = match t.floor {
        Some(floor) => {
            let window = floor.window.window();
            let held = floor.held_before(fired_at);
            format!(
                "then {} in the {} before it fired ({:.2}/s) against a floor of {}/s",
                count(held, "progress event"),
                secs(window),
                held as f64 / window.as_secs_f64(),
                floor.floor
            )
        }
        None => "then too few to keep up the floor".to_owned(),
    };
    Reading::new(
        VerdictKind::Crawl,
        format!(
            "{}, {} in {}, {pace}, until {named} fired",
            head_words(t),
            count(t.progress, "progress event"),
            secs(t.offset(fired_at))
        ),
    )
    .governed(
        "STALLSCOPE_SSE_MIN_RATE",
        "progress kept coming, too slowly (a congested link, a throttled proxy, a provider under load): \
         a higher STALLSCOPE_SSE_MIN_RATE ends such a crawl sooner, but keep it below the slowest window \
         of healthy streams (`stallscope tune` finds that value and checks it)",
    )
}

fn is_drip(t: &Try) -> bool {
    let parsed = t.events.max(1);
    t.chunks >= DRIP_READS && t.chunks >= parsed * DRIP_READS_PER_EVENT && t.bytes / t.chunks <= DRIP_MEAN_BYTES
}

fn drip_words(t: &Try) -> String {
    let span = t.last_byte_at.zip(t.first_byte_at).map_or(Duration::ZERO, |(l, f)| l.saturating_sub(f));
    let rate = if span.is_zero() { t.bytes as f64 } else { t.bytes as f64 / span.as_secs_f64() };
    format!(
        "{} of {} on average for {} ({:.1} reads per event), {:.0} B/s",
        count(t.chunks, "read"),
        bytes(t.bytes / t.chunks.max(1)),
        count(t.events, "parsed event"),
        t.chunks as f64 / t.events.max(1) as f64,
        rate
    )
}

/// The attempt completed: read it for the patterns that risk a false
/// timeout on a healthy stream.
fn success(t: &Try) -> Reading {
    let n = Some(t.number);
    if let Some(hold) = verdict_hold(t) {
        return held_through(t, hold);
    }
    let first_byte = t.first_byte_at.map(|at| t.offset(at));
    if let Some(Held { wait, words }) = held_back(t) {
        let (closest, share) = closest_timer(t, &[(TimerKind::Ttfb, wait), (TimerKind::Idle, t.longest_silence)]);
        let mut reading = Reading::new(VerdictKind::ProxyBuffering, format!("{}, {words}", head_words(t)));
        reading.evidence.push(fact(
            Topic::Body,
            n,
            t.first_byte_at,
            format!(
                "{} of {} arrived within {} ms of the first byte",
                bytes(t.burst_bytes),
                bytes(t.bytes),
                BURST_WINDOW.as_millis()
            ),
        ));
        if let Some((timer_kind, budget_d)) = closest {
            let tunable = timer_tunable(timer_kind);
            reading.evidence.push(fact(
                Topic::Timing,
                n,
                None,
                format!("the wait used {share} of the {} timer's {}", timer(timer_kind), budget(budget_d)),
            ));
            let hop = hop::named_by(&t.headers);
            let unbuffer = unbuffer_words(hop.as_ref());
            let who = hop.map_or_else(
                || "something on the path holds the stream back (see `via`)".to_owned(),
                |hop| format!("{} may hold the stream back", hop.described()),
            );
            reading = reading.governed(tunable, format!("{who}: keep {tunable} above {} or {unbuffer}", secs(wait)));
        }
        return reading;
    }
    if is_drip(t) {
        let mut reading = Reading::new(VerdictKind::SlowDrip, drip_words(t)).governed(
            "STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S",
            format!(
                "events assemble slowly on this link: the data-stall timer must allow the slowest event ({})",
                secs(t.longest_no_progress)
            ),
        );
        reading.evidence.push(fact(Topic::Body, n, t.last_byte_at, drip_words(t)));
        return reading;
    }
    let ttfb = first_byte.unwrap_or_default();
    let observed = [
        (TimerKind::Ttfb, ttfb),
        (TimerKind::Idle, t.longest_silence),
        (TimerKind::DataStall, t.longest_no_progress),
        (TimerKind::Total, t.offset(t.stopped_at())),
    ];
    let (closest, share) = closest_timer(t, &observed);
    let seen = |timer_kind| observed.iter().find(|(k, _)| *k == timer_kind).map_or(Duration::ZERO, |(_, d)| *d);
    let used = closest.map_or(0.0, |(timer_kind, budget_d)| {
        seen(timer_kind).as_secs_f64() / budget_d.as_secs_f64().max(f64::MIN_POSITIVE)
    });
    let took = t.offset(t.stopped_at());
    let summary = completed_words(t);
    let mut reading = match (&t.would_fire, closest) {
        (Some(mark), _) => {
            let counted = observed.iter().find(|(k, _)| *k == mark.timer).map_or(took, |(_, d)| *d);
            would_have_cut(mark, counted, took)
        }
        (None, Some((timer_kind, budget_d))) if used >= SLOW_SHARE => {
            let tunable = timer_tunable(timer_kind);
            let what = match timer_kind {
                TimerKind::Ttfb => "the wait for the first byte",
                TimerKind::Idle => "the longest silence",
                TimerKind::DataStall => "the longest wait between progress events",
                _ => "the attempt",
            };
            Reading::new(
                VerdictKind::HealthySlow,
                format!(
                    "{what} ({}) used {share} of the {} timer's {}",
                    secs(seen(timer_kind)),
                    timer(timer_kind),
                    budget(budget_d)
                ),
            )
            .governed(tunable, format!("a tighter {tunable} would cut healthy streams like this one off"))
        }
        _ => match t.first_reasoning_at.zip(t.first_content_at) {
            Some((thinking, content)) if content.saturating_sub(thinking) >= LONG_REASONING => Reading::new(
                VerdictKind::HealthySlow,
                format!(
                    "reasoned for {} with progress before the first content",
                    secs(content.saturating_sub(thinking))
                ),
            )
            .suggest("long reasoning is progress: keep reasoning among STALLSCOPE_PROGRESS_EVENT_CLASSES"),
            _ => Reading::new(VerdictKind::Healthy, summary.clone()),
        },
    };
    reading.evidence.push(fact(Topic::Body, n, t.ended_at, summary));
    if let Some((timer_kind, budget_d)) = closest {
        reading.evidence.push(fact(
            Topic::Timing,
            n,
            None,
            format!("closest to a timer: {} at {share} of its {}", timer(timer_kind), budget(budget_d)),
        ));
    }
    reading
}

/// A completed attempt in words: "headers after 0.01 s (200), first byte
/// after 0.02 s, 12 events / 1.2 KiB in 0.80 s".
fn completed_words(t: &Try) -> String {
    format!(
        "{}, first byte after {}, {} / {} in {}",
        head_words(t),
        secs(t.first_byte_at.map(|at| t.offset(at)).unwrap_or_default()),
        count(t.events, "event"),
        bytes(t.bytes),
        secs(t.offset(t.stopped_at()))
    )
}

/// A stream that completed though one of our timers came due on it while
/// our own runtime was late, and was held (guard mode): not cut for our
/// lateness. Its silences and waits were measured by a late runtime, so no
/// pattern is read from them; what to try is the call's (less load).
fn held_through(t: &Try, hold: &Hold) -> Reading {
    let took = secs(t.offset(t.stopped_at()));
    let mut reading =
        Reading::new(VerdictKind::HealthySlow, format!("completed in {took} though {}", held_words(hold)));
    reading.evidence.push(fact(Topic::Body, Some(t.number), t.ended_at, completed_words(t)));
    reading
}

/// A stream that completed though our timer, as in force, would have cut
/// it (observed, where our clocks only watch): healthy, slow for that
/// budget, and no failure; `seen` is what the timer counted (the whole
/// attempt for the total timer and the deadline), `took` how long the
/// attempt took. What follows is said by [`would_have_fired`].
fn would_have_cut(mark: &WouldFire, seen: Duration, took: Duration) -> Reading {
    let how = match mark.timer {
        TimerKind::Ttfb => format!(", its first byte after {}", secs(seen)),
        TimerKind::Idle => format!(" after a silence of {}", secs(seen)),
        TimerKind::DataStall => format!(" after {} without progress", secs(seen)),
        _ => String::new(),
    };
    let tunable = timer_tunable(mark.timer);
    let raise = match whatif_set(mark.timer, just_above(seen)) {
        Some(set) => format!(
            "raise {tunable} above {} for calls like it; {set} shows which of the run's calls that lets be \
             and which stalls it still catches",
            secs(seen)
        ),
        None => format!("lower {tunable} for calls like it"),
    };
    Reading::new(VerdictKind::HealthySlow, format!("completed in {}{how}", secs(took))).governed(
        tunable,
        format!("our {} timer, as in force, would cut healthy streams like this one off: {raise}", timer(mark.timer)),
    )
}

/// The armed timer whose budget the observed durations used the most of,
/// with that share in words.
fn closest_timer(t: &Try, observed: &[(TimerKind, Duration)]) -> (Option<(TimerKind, Duration)>, String) {
    let best = observed
        .iter()
        .filter_map(|&(timer_kind, seen)| {
            let budget_d = t.armed(timer_kind).filter(|b| !b.is_zero())?;
            Some((timer_kind, budget_d, seen.as_secs_f64() / budget_d.as_secs_f64(), seen))
        })
        .max_by(|a, b| a.2.total_cmp(&b.2));
    match best {
        Some((timer_kind, budget_d, _, seen)) => (Some((timer_kind, budget_d)), percent(seen, budget_d)),
        None => (None, String::new()),
    }
}

fn transport(t: &Try, kind: TransportKind) -> Reading {
    let at = t.stopped_at();
    let when = match &t.target {
        Some(target) if kind.is_connect() => format!("{target} after {}", secs(t.offset(at))),
        _ => format!("after {}", secs(t.offset(at))),
    };
    let mid = |k| {
        let place = if t.headers_at.is_some() {
            format!("{when}, {}, {}", head_words(t), body_words(t))
        } else {
            format!("{when}, before any response")
        };
        Reading::new(k, place)
    };
    let silence = at.saturating_sub(t.last_sign_of_life().unwrap_or(at));
    let mut reading = match kind {
        TransportKind::Reset | TransportKind::Closed if t.headers_at.is_some() && silence >= IDLE_CUT_SILENCE => {
            idle_cut(t, kind, silence)
        }
        TransportKind::Reset | TransportKind::Closed => {
            let kind =
                if kind == TransportKind::Reset { VerdictKind::ResetMidStream } else { VerdictKind::ClosedEarly };
            let reading = mid(kind);
            if t.first_content_at.is_some() {
                reading.governed(
                    "STALLSCOPE_PARTIAL_RECOVERY",
                    "content had streamed, so neither a retry nor a failover may restart the answer; \
                     partial recovery keeps the text (a load balancer recycling, a VPN rekey)",
                )
            } else {
                reading.governed(
                    "STALLSCOPE_RETRY_BUDGET_CONNECTION",
                    "nothing had streamed, so a retry is safe; frequent breaks point at the path \
                     (a load balancer's idle limit, a VPN rekey)",
                )
            }
        }
        TransportKind::KernelTimeout => Reading::new(
            VerdictKind::KeepaliveDeadPeer,
            format!("{when}, {} after the last byte; {}", secs(silence), body_words(t)),
        )
        .governed(
            "STALLSCOPE_TCP_KEEPIDLE_S",
            "the kernel's keepalive probes (KEEPIDLE + KEEPINTVL × KEEPCNT) found the peer dead before \
                 our timers did: lower them to notice sooner, or lower STALLSCOPE_SSE_IDLE_TIMEOUT_S",
        ),
        TransportKind::Refused => Reading::new(VerdictKind::Refused, when.clone()).governed(
            "STALLSCOPE_FALLBACK_MODELS",
            "nothing listens at the provider's address: check base_url, or give the call a fallback",
        ),
        TransportKind::Unreachable => Reading::new(VerdictKind::Unreachable, when.clone()).governed(
            "STALLSCOPE_FORCE_IPV4",
            "no route to the host: check the VPN or route; if only IPv6 fails, STALLSCOPE_FORCE_IPV4=1 avoids it",
        ),
        TransportKind::Dns => Reading::new(VerdictKind::DnsFailure, when.clone())
            .suggest("the host name did not resolve: check base_url and the resolver (VPN split DNS)"),
        TransportKind::Tls => Reading::new(VerdictKind::TlsFailure, when.clone())
            .suggest("a TLS-inspecting proxy needs its CA certificate: give the provider row a ca_file"),
        TransportKind::Proxy => Reading::new(VerdictKind::ProxyFailure, when.clone())
            .governed("STALLSCOPE_PROXY", "the proxy refused or failed the tunnel: check STALLSCOPE_PROXY and *_PROXY"),
        TransportKind::ConnectTimedOut => {
            Reading::new(VerdictKind::ConnectTimeout, format!("{when}: the kernel gave up (SYNs unanswered)")).governed(
                "STALLSCOPE_HTTP_CONNECT_TIMEOUT_S",
                "the kernel gave up before our connect timer: a firewall dropping packets, or a dead route",
            )
        }
        TransportKind::Connect | TransportKind::Read | TransportKind::Other => {
            Reading::new(VerdictKind::TransportFailure, format!("{} {when}", kind.describe()))
                .governed("STALLSCOPE_RETRY_BUDGET_CONNECTION", "retried under the connection budget")
        }
    };
    reading.evidence.push(fact(Topic::Error, Some(t.number), Some(at), format!("{} {when}", kind.describe())));
    reading
}

/// The connection was closed or reset after the headers and `silence`
/// without a byte, before the stream said it was done: a hop's idle timer
/// (named when a header names it), or the provider closing a quiet
/// stream. Which of the two, one stream cannot say; a run's streams cut
/// after the same silence can ([`super::regularity`]).
fn idle_cut(t: &Try, kind: TransportKind, silence: Duration) -> Reading {
    let at = t.stopped_at();
    let how = if kind == TransportKind::Reset { "reset" } else { "closed" };
    let mut reading = Reading::new(
        VerdictKind::IdleCut,
        format!(
            "the connection was {how} after {} of silence, {} into the attempt; {}, {}",
            secs(silence),
            secs(t.offset(at)),
            head_words(t),
            body_words(t)
        ),
    );
    reading.silence = Some(silence);
    let hop = hop::named_by(&t.headers);
    let knob = match hop.as_ref() {
        Some(h) => {
            let timeout = h.timeout.map_or_else(|| "idle timeout".to_owned(), knob_words);
            format!("{} is on this path: if it cut the stream, raise its {timeout}", h.described())
        }
        None => "no header names a hop: if one cut the stream, raise its idle timeout".to_owned(),
    };
    reading.evidence.extend(default_evidence(t, silence, "of silence"));
    let retry = if t.first_content_at.is_some() {
        "content had streamed, so no retry may restart the answer (partial recovery keeps the text)"
    } else {
        "nothing had streamed, so a retry is safe"
    };
    reading.governed(
        "STALLSCOPE_SSE_IDLE_TIMEOUT_S",
        format!(
            "{knob} above the longest silence expected, have the provider send keep-alives the hop counts as \
             traffic, or take a route without it; {retry}. {} shows what our idle timer just below the cut would \
             have done",
            whatif_set(TimerKind::Idle, just_below(silence)).unwrap_or_default()
        ),
    )
}

/// "60.1 s of silence is the default of nginx's `proxy_read_timeout`, …",
/// when `took` is a documented default.
fn default_evidence(t: &Try, took: Duration, what: &str) -> Option<Evidence> {
    let whose = hop::default_matching(took)?;
    Some(fact(Topic::Timing, Some(t.number), None, format!("{} {what} is the default of {whose}", secs(took))))
}

/// The category a failure with this status falls in: the classifier's
/// recorded reading, else what its built-in rules make of it.
fn category(t: &Try, status: Option<u16>) -> Category {
    match (&t.classified, status) {
        (Some(c), _) => c.category,
        (None, Some(status)) => {
            let failure =
                Failure::Http { status, headers: Box::default(), body: t.error_body.clone().unwrap_or_default() };
            classify::builtin(&failure).0
        }
        (None, None) => Category::Permanent,
    }
}

/// The server answered with an error status (or the classifier read a
/// failure with no recorded end).
fn answered(t: &Try, status: Option<u16>) -> Reading {
    let n = Some(t.number);
    let what = match status {
        Some(status) => format!("HTTP {status} after {}", answered_after(t)),
        None => t.classified.as_ref().map_or_else(String::new, |c| c.message.clone()),
    };
    let mut reading = by_category(t, category(t, status), what);
    if let Some(body) = &t.error_body {
        reading.evidence.push(fact(Topic::Error, n, t.ended_at, format!("body: {}", body)));
    }
    reading
}

fn in_stream(t: &Try, code: Option<&str>) -> Reading {
    let what = format!(
        "an in-stream error{} {} after {}",
        code.map(|c| format!(" ({c})")).unwrap_or_default(),
        phase_words(t.phase),
        secs(t.offset(t.stopped_at()))
    );
    let mut reading = by_category(t, t.classified.as_ref().map_or(Category::ServerError, |c| c.category), what);
    if let Some(c) = &t.classified {
        reading.evidence.push(fact(Topic::Error, Some(t.number), Some(c.at), c.message.clone()));
    }
    reading
}

fn malformed(t: &Try) -> Reading {
    let message = t.classified.as_ref().map_or_else(|| "unparseable bytes".to_owned(), |c| c.message.clone());
    let what = message.strip_prefix("malformed stream: ").unwrap_or(&message);
    let mut reading =
        Reading::new(VerdictKind::MalformedStream, format!("{what} after {}, {}", head_words(t), body_words(t)))
            .governed(
                "STALLSCOPE_RETRY_BUDGET_SERVER_ERROR",
                "bytes that are not the dialect's events come from a proxy rewriting the body or a bug upstream \
         (see `via`); retries are bounded by the server-error budget",
            );
    reading.evidence.push(fact(Topic::Error, Some(t.number), t.ended_at, message));
    reading
}

/// A failure between attempts: no request was sent.
fn between_attempts(t: &Try) -> Reading {
    let message = t.classified.as_ref().map_or_else(String::new, |c| c.message.clone());
    let mut reading = by_category(t, category(t, None), format!("no request sent: {message}"));
    reading.evidence.push(fact(Topic::Error, None, t.classified.as_ref().map(|c| c.at), message));
    reading
}

/// The limits of observe's proxy that answer a request themselves.
const PROXY_LIMITS: [&str; 4] = [
    "STALLSCOPE_PROXY_BODY_TIMEOUT_S",
    "STALLSCOPE_PROXY_MAX_REQUEST_MB",
    "STALLSCOPE_PROXY_REQUEST_BUFFER_MB",
    "STALLSCOPE_PROXY_MAX_IN_FLIGHT",
];

/// A request observe's proxy answered itself, by one of its limits: no
/// request was sent.
fn refused_by_proxy(t: &Try) -> Option<Reading> {
    let classified = t.classified.as_ref().filter(|_| t.started_at.is_none())?;
    let limit = PROXY_LIMITS.iter().find(|l| classified.rule == proxy_rule(l))?;
    let message = classified.message.clone();
    let mut reading = Reading::new(VerdictKind::ProxyLimit, message.clone()).governed(
        limit,
        "observe's own limit answered the agent before anything went upstream: raise it if the agent's requests \
         need more",
    );
    reading.evidence.push(fact(Topic::Error, None, Some(classified.at), message));
    Some(reading)
}

/// The rule a refusal by `limit` (a `PROXY_*` tunable that answers requests) is classified
/// by: `stallscope proxy: PROXY_MAX_REQUEST_MB`.
pub fn proxy_rule(limit: &str) -> String {
    format!("stallscope proxy: {}", limit.strip_prefix(crate::tunables::PREFIX).unwrap_or(limit))
}

/// A failure the classifier put in `category`, described by `what`.
fn by_category(t: &Try, category: Category, what: String) -> Reading {
    let is_rule = |rule: &str| t.classified.as_ref().is_some_and(|c| c.rule.contains(rule));
    let reading = match category {
        Category::RateLimit => Reading::new(VerdictKind::RateLimited, what).governed(
            "STALLSCOPE_RETRY_BUDGET_RATE_LIMIT",
            "the account or key is over its limit: spread calls, add keys to the pool, or lower concurrency",
        ),
        Category::Overloaded => Reading::new(VerdictKind::Overloaded, what).governed(
            "STALLSCOPE_RETRY_BUDGET_OVERLOADED",
            "the provider sheds load: retries back off under the overloaded budget; a fallback model \
             (STALLSCOPE_FALLBACK_MODELS) takes the call elsewhere",
        ),
        Category::ServerError if t.status.is_some_and(|s| GATEWAY_STATUSES.contains(&s)) => {
            if gateway_page(t) {
                gateway_timeout(t)
            } else {
                Reading::new(VerdictKind::ServerError, what)
                    .governed("STALLSCOPE_RETRY_BUDGET_SERVER_ERROR", gateway_words(t))
            }
        }
        Category::ServerError => Reading::new(VerdictKind::ServerError, what).governed(
            "STALLSCOPE_RETRY_BUDGET_SERVER_ERROR",
            "a fault on the provider's side: retried under the server-error budget",
        ),
        Category::Auth => Reading::new(VerdictKind::Auth, what)
            .suggest("check the key in the provider row's variable; with a pool (api_key_envs) the next key is tried"),
        Category::InvalidRequest if is_rule("context overflow") => Reading::new(VerdictKind::ContextOverflow, what)
            .governed(
                "STALLSCOPE_FALLBACK_MODELS",
                "the prompt does not fit: trim it, or fall back to a model with a larger window",
            ),
        Category::InvalidRequest => Reading::new(VerdictKind::InvalidRequest, what)
            .suggest("the request itself is refused: retrying the same request cannot help; read the error body"),
        // A page that is not an event stream on a success status: a captive
        // portal or a proxy answering for the provider.
        Category::Connection => Reading::new(VerdictKind::ProxyFailure, what).governed(
            "STALLSCOPE_PROXY",
            "something on the path answered instead of the provider (a captive portal, a proxy's error page)",
        ),
        Category::Timeout => Reading::new(VerdictKind::NoResponse, what),
        Category::Cancelled => Reading::new(VerdictKind::Cancelled, what),
        Category::Permanent => Reading::new(VerdictKind::PermanentError, what)
            .suggest("no rule calls this transient; a classifier rule can if it is (see `stallscope explain`)"),
    };
    server_wait(t, reading)
}

/// What to make of a 502, 504 or 524: the status a gateway sends when its
/// upstream did not answer in time, so it may be a hop on the path and not
/// the provider. A hop a header names is named with its timeout's knob.
fn gateway_words(t: &Try) -> String {
    let status = t.status.unwrap_or_default();
    let waited = answered_after(t);
    let then = "raise it above this provider's time to first byte, or fail over (STALLSCOPE_FALLBACK_MODELS); \
                retries under the server-error budget meet the same timeout whenever the provider is as slow again";
    match hop::named_by(&t.headers) {
        Some(hop) => {
            let timeout = hop.timeout.map_or_else(|| "timeout".to_owned(), knob_words);
            let knob =
                format!("; if it comes after the same wait on every attempt, that wait is its {timeout}: {then}");
            format!(
                "{} answered HTTP {status} after {waited}, what a gateway sends when its upstream did not answer, \
                 or not in time: it may be this hop rather than the provider{knob}",
                hop.described()
            )
        }
        None => {
            let who = t
                .first_header(&PEER_HEADERS)
                .map(|(name, value)| format!("`{name}: {value}` answered"))
                .unwrap_or_else(|| "no header names who answered".to_owned());
            format!(
                "HTTP {status} is what a gateway sends when its upstream did not answer, or not in time ({who}, \
                 after {waited}): it may be a hop on the path rather than the provider. If it comes after the \
                 same wait on every attempt, that wait is the hop's timeout (nginx `proxy_read_timeout` 60 s, \
                 Cloudflare 100 s): {then}"
            )
        }
    }
}

/// How long after the attempt's start the answer came: its headers, else
/// its end.
fn answered_in(t: &Try) -> Duration {
    t.offset(t.headers_at.unwrap_or(t.stopped_at()))
}

/// [`answered_in`], in words.
fn answered_after(t: &Try) -> String {
    secs(answered_in(t))
}

/// A hop's knob in words: "`proxy_read_timeout` (60.0 s unless set)".
fn knob_words(knob: hop::Knob) -> String {
    format!("`{}` ({} unless set)", knob.name, secs(knob.default))
}

/// Whether an error answer's body is a page an intermediary made, not the
/// provider's: not the JSON error every provider sends, but HTML or a
/// proxy's own words. An empty body says neither.
fn gateway_page(t: &Try) -> bool {
    let body = t.error_body.as_deref().unwrap_or_default().trim_start().to_ascii_lowercase();
    !body.starts_with('{') && (body.starts_with('<') || GATEWAY_PAGE_WORDS.iter().any(|w| body.contains(w)))
}

/// A gateway answered for the provider, after this wait: the hop its
/// headers name (else "a gateway") and the knob of its that ran out. Our
/// retries meet the same timeout whenever the provider is as slow again;
/// raising the hop's is the fix.
fn gateway_timeout(t: &Try) -> Reading {
    let status = t.status.unwrap_or_default();
    let waited = answered_after(t);
    let hop = hop::named_by(&t.headers);
    let who = hop.as_ref().map_or("a gateway", |hop| hop.name);
    let knob = match hop.as_ref().and_then(|hop| hop.timeout) {
        Some(k) => format!("raise its {}", knob_words(k)),
        None => "raise its timeout on the provider".to_owned(),
    };
    let named = hop.as_ref().map_or_else(String::new, |hop| format!(" ({})", hop.described()));
    let mut reading = Reading::new(
        VerdictKind::GatewayTimeout,
        format!("{who} answered HTTP {status} after {waited} with a page of its own"),
    );
    let wait = answered_in(t);
    reading.silence = Some(wait);
    reading.evidence.extend(default_evidence(t, wait, "of waiting"));
    reading.suggest(format!(
        "a hop on the path{named} gave up on the provider before it answered: its timeout is shorter than \
             this provider's time to first byte for this payload. {knob} above it, or take a route without it; \
             our retries meet the same timeout whenever the provider is as slow again"
    ))
}

/// What the server asked about waiting (`retry-after*`, an exhausted
/// rate-limit bucket) and whether the wait was honoured or refused by the
/// cap, added to any reading of an answer.
fn server_wait(t: &Try, mut reading: Reading) -> Reading {
    let n = Some(t.number);
    let mut asked = Vec::new();
    for name in WAIT_HEADERS {
        if let Some(value) = t.header(name) {
            asked.push(format!("{name}: {value}"));
        }
    }
    if let Some(reset) = t.exhausted_reset {
        asked.push(format!("an exhausted bucket resets in {}", secs(reset)));
    }
    if !asked.is_empty() {
        reading.evidence.push(fact(Topic::Response, n, t.headers_at, asked.join(", ")));
    }
    if let Some((requested, cap, at)) = t.wait_refused {
        reading.detail.push_str(&format!("; asked to wait {}, refused: over the {} cap", secs(requested), budget(cap)));
        reading.evidence.push(fact(
            Topic::Retry,
            n,
            Some(at),
            format!("the server asked to wait {}, over the {} cap: not slept", secs(requested), budget(cap)),
        ));
        return reading.governed(
            "STALLSCOPE_RETRY_AFTER_MAX_S",
            format!(
                "raise STALLSCOPE_RETRY_AFTER_MAX_S above {} to wait as asked, or keep the cap and let the call \
                 fail over",
                secs(requested)
            ),
        );
    }
    if let Some(b) = &t.backoff
        && let Some((asked, header)) = &b.requested
    {
        reading.detail.push_str(&format!(
            "; asked to wait {} ({header}), honoured: slept {}",
            secs(*asked),
            secs(b.sleep)
        ));
    }
    reading
}
