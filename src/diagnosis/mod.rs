//! Diagnosis: a verdict for every stream, in words, with the evidence it
//! rests on, the tunable that governs it and what to try; and a run-level
//! summary that groups streams by verdict.
//!
//! [`diagnose`] is a pure function over one stream's events, as the core
//! emits them and as the store reads them back; the CLI, the app, exports
//! and reports all call it (or the [`Collector`], which does the same for
//! many interleaved streams at once). [`summarize`] groups a run's
//! verdicts into sentences like "12 of 40 streams: keep-alive-only stall,
//! caught by the data-stall timer after 0.5 s each".
//!
//! # Kinds
//!
//! `kind` is one of these snake_case names (stable: a name never changes
//! meaning; new patterns get new names), documented on [`VerdictKind`]:
//!
//! | kind | the evidence shows |
//! | --- | --- |
//! | `silent_stall` | headers or some bytes, then nothing until a timer fired |
//! | `keepalive_only_stall` | keep-alives but no progress until the data-stall timer fired |
//! | `no_response` | no response headers before a timer fired |
//! | `proxy_buffering` | a wait for the first body byte (1 s, or 250 ms behind a `via` / `x-cache`), then a reply of 16 progress events or more either whole within 50 ms or in lumps of 8 or more a read; or, when a timer fired, no body byte behind a hop that buffers by default (nginx, Caddy) |
//! | `slow_drip` | many small reads per parsed event while progress continued |
//! | `healthy_slow` | healthy but within half a timer's budget of firing, long reasoning, or progress cut by the total timer or the deadline |
//! | `healthy` | nothing worth naming |
//! | `reset_mid_stream`, `closed_early` | a reset, or a clean close before the stream was done |
//! | `idle_cut` | a close or reset after the headers and a second or more of silence, before the stream was done: a hop's idle timer, named by its headers ([`hop`]) and grouped by the silence ([`regularity`]) |
//! | `keepalive_dead_peer` | the kernel's TCP keepalive or user timeout declared the peer dead |
//! | `transport_failure` | another transport failure |
//! | `rate_limited` | a rate limit, with the wait asked for and whether it was honoured or refused by the cap |
//! | `overloaded`, `server_error`, `malformed_stream` | the provider's side failed (a 502, 504 or 524 says it may be a gateway on the path, naming it by its headers) |
//! | `gateway_timeout` | a gateway on the path answered 502, 504, 524 or 408 with a page of its own, not the provider's JSON error: named by its headers ([`hop`]), with the knob that ran out |
//! | `auth`, `invalid_request`, `context_overflow`, `permanent_error` | the request or its credential was refused |
//! | `refused`, `unreachable`, `dns_failure`, `tls_failure`, `proxy_failure`, `connect_timeout` | no connection was made |
//! | `proxy_limit` | observe's proxy refused the agent's request by one of its limits (`PROXY_*`), before anything went upstream |
//! | `retry_denied` | a limit beyond the failure's own budget refused its retry (`basis.denied_by`: `fleet_budget`, `deadline`, `total_retries`, `server_wait_cap`) |
//! | `cancelled` | the call was cancelled from outside: an observed agent that disconnected says so, with our timer that would have fired first |
//! | `incomplete` | the recording ends before the call did |
//! | `unknown` | a what-if cannot tell how the stream ends (an assumption said stop, or the replay outlived its horizon) |
//!
//! How a call that failed and then recovered is reported (the kind of the
//! failure that cost it the most time, severity `recovered`), and the other
//! outcomes, is described in `call`.
//!
//! # Trust
//!
//! A timer that fired while our own runtime was late may have fired
//! because we did not read the bytes in time. When a timer that decided a
//! verdict fired with a lag that [`crate::core::lag::lag_untrusts`] calls
//! too large, the verdict is `trusted: false`, its summary starts with
//! "client overloaded: not trustworthy" and its evidence names the lag. A
//! timer whose lag was not measured (`None`) is trusted.
//!
//! In guard mode such a timer is held instead: it does not end the attempt
//! and starts again (`TimerHeld`). Each hold is evidence ("our idle timer
//! (1 s) came due while our own runtime was 0.35 s late (35% of its
//! budget): not acted on (client overloaded)", `basis.held`); a verdict
//! that turns on one (its attempt then completed, or was cancelled) says
//! so in its summary instead of reading its late-measured timings as the
//! network's, and is not trustworthy either.

mod call;
mod collector;
pub mod course;
mod facts;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod hop;
mod reading;
mod recorded;
pub mod regularity;
mod route_cuts;
mod summary;
mod text;
pub mod verdict;

use crate::core::event::Event;
use crate::core::policy::RetrySettings;

pub use call::{UNTRUSTED, unknown};
pub use collector::Collector;
pub use course::{AttemptClocks, CourseOutcome, FiredTimer, StreamCourse};
pub use reading::proxy_rule;
pub use recorded::RecordedRun;
pub use route_cuts::{FixedCut, RouteCuts};
pub use summary::summarize;
pub use verdict::{
    Basis, CheckedSuggestion, DeniedBy, Diagnosis, Evidence, HeldTimer, RunDiagnosis, Severity, Topic, VerdictGroup,
    VerdictKind, WouldHaveFired,
};

/// The verdict on one stream, from its events in order. Without the run's
/// retry limits, a spent budget is reported as `retry_budget` (see
/// [`diagnose_with`]).
pub fn diagnose(events: &[Event]) -> Diagnosis {
    fold(events, None)
}

/// The verdict on one stream, telling a spent category budget from the
/// call's spent total retries by the run's retry settings.
pub fn diagnose_with(events: &[Event], limits: &RetrySettings) -> Diagnosis {
    fold(events, Some(limits))
}

fn fold(events: &[Event], limits: Option<&RetrySettings>) -> Diagnosis {
    StreamFold::of(events).verdict(limits)
}

/// One stream's events folded once, keeping no event: what its verdict
/// and its course ([`StreamCourse`]) are both read from, so the two never
/// disagree about what happened (where a silence starts, which failure an
/// attempt had). For a caller that keeps its streams apart: a replay's
/// sink, the metrics, a recording loaded for replay.
#[derive(Debug, Clone, Default)]
pub struct StreamFold(facts::CallFacts);

impl StreamFold {
    /// The fold of one stream's events, in order.
    pub fn of(events: &[Event]) -> StreamFold {
        let mut fold = StreamFold::default();
        for event in events {
            fold.push(event);
        }
        fold
    }

    /// Folds the stream's next event in.
    pub fn push(&mut self, event: &Event) {
        self.0.push(event);
    }

    /// The verdict on the events so far, retry denials read against
    /// `limits` when known (see [`diagnose_with`]).
    pub fn verdict(&self, limits: Option<&RetrySettings>) -> Diagnosis {
        call::judge(&self.0, limits)
    }

    /// What happened to the stream so far.
    pub fn course(&self) -> StreamCourse {
        StreamCourse::of_facts(&self.0)
    }

    /// The timer that fired last, once one has.
    pub fn last_fired(&self) -> Option<FiredTimer> {
        StreamCourse::last_fired(&self.0)
    }

    /// What each attempt's clocks saw.
    pub fn attempt_clocks(&self) -> Vec<AttemptClocks> {
        course::attempt_clocks(&self.0)
    }
}

#[cfg(test)]
mod tests;
