//! The limits observe's proxy holds its agents to, held to nginx's
//! standard: every wait on an agent has a timeout, every buffer a bound,
//! and each limit that acts is counted ([`Refusals`]), so an operator sees
//! what was turned away and why. Each is a `PROXY_*` tunable.
//!
//! | limit | tunable | when it acts |
//! |---|---|---|
//! | a request head's read | `PROXY_HEADER_TIMEOUT_S` | the connection is closed |
//! | a request body's read | `PROXY_BODY_TIMEOUT_S` | 408, recorded |
//! | one request body | `PROXY_MAX_REQUEST_MB` | 413, recorded |
//! | request bodies held at once | `PROXY_REQUEST_BUFFER_MB` | 503 with Retry-After, recorded |
//! | connections open | `PROXY_MAX_CONNECTIONS` | 503 with Retry-After, then closed |
//! | requests in flight | `PROXY_MAX_IN_FLIGHT` | 503 with Retry-After, recorded |

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::Metrics;
use crate::tunables::Tunables;

/// The proxy's limits, and what each has turned away.
pub(super) struct Limits {
    /// How long an agent's connection may take to send a request head.
    pub header_timeout: Duration,
    /// How long a request body may take to arrive whole.
    pub body_timeout: Duration,
    /// The largest request body taken, in bytes.
    pub max_request_bytes: usize,
    /// Request body bytes that may be held at once.
    buffer: Arc<Semaphore>,
    buffer_bytes: usize,
    /// Connections that may be open at once.
    connections: Arc<Semaphore>,
    /// Connections past the cap that are answered 503 before they are
    /// closed; past these, a connection is closed at once.
    overflow: Arc<Semaphore>,
    /// Requests that may be in flight at once.
    in_flight: Arc<Semaphore>,
    /// What was turned away.
    pub refused: Arc<Refusals>,
}

/// Why the proxy turned a connection or a request away: a closed set, the
/// `reason` of its metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// A connection sent no whole request head in time (closed).
    HeaderTimeout,
    /// A request body did not arrive whole in time (408).
    BodyTimeout,
    /// A request body broke off or was not valid framing (400).
    BrokenBody,
    /// A request body over the limit (413).
    TooLarge,
    /// The request bodies held at once would pass their bound (503).
    Buffer,
    /// More connections than the cap (503, then closed; past the overflow,
    /// closed at once).
    Connections,
    /// More requests in flight than the cap (503).
    InFlight,
    /// A protocol upgrade (websocket, the Realtime API), which the proxy
    /// does not carry (501).
    Upgrade,
    /// A request that came while observe was stopping (503).
    Stopping,
    /// `accept` failed (too many open files, say): the proxy waited before
    /// accepting again.
    AcceptError,
}

impl Refusal {
    /// Every reason, in the order they are reported.
    pub const ALL: [Refusal; 10] = [
        Refusal::HeaderTimeout,
        Refusal::BodyTimeout,
        Refusal::BrokenBody,
        Refusal::TooLarge,
        Refusal::Buffer,
        Refusal::Connections,
        Refusal::InFlight,
        Refusal::Upgrade,
        Refusal::Stopping,
        Refusal::AcceptError,
    ];

    /// Its name, as metrics and reports give it.
    pub const fn name(self) -> &'static str {
        match self {
            Refusal::HeaderTimeout => "header_timeout",
            Refusal::BodyTimeout => "body_timeout",
            Refusal::BrokenBody => "broken_body",
            Refusal::TooLarge => "too_large",
            Refusal::Buffer => "request_buffer",
            Refusal::Connections => "connections",
            Refusal::InFlight => "in_flight",
            Refusal::Upgrade => "upgrade",
            Refusal::Stopping => "stopping",
            Refusal::AcceptError => "accept_error",
        }
    }

    /// The tunable that sets it, when one does.
    pub const fn tunable(self) -> Option<&'static str> {
        match self {
            Refusal::HeaderTimeout => Some("STALLSCOPE_PROXY_HEADER_TIMEOUT_S"),
            Refusal::BodyTimeout => Some("STALLSCOPE_PROXY_BODY_TIMEOUT_S"),
            Refusal::TooLarge => Some("STALLSCOPE_PROXY_MAX_REQUEST_MB"),
            Refusal::Buffer => Some("STALLSCOPE_PROXY_REQUEST_BUFFER_MB"),
            Refusal::Connections => Some("STALLSCOPE_PROXY_MAX_CONNECTIONS"),
            Refusal::InFlight => Some("STALLSCOPE_PROXY_MAX_IN_FLIGHT"),
            Refusal::BrokenBody | Refusal::Upgrade | Refusal::Stopping | Refusal::AcceptError => None,
        }
    }

    /// What it is, in words, for a count of them.
    pub const fn words(self) -> &'static str {
        match self {
            Refusal::HeaderTimeout => "connections closed by the header timeout",
            Refusal::BodyTimeout => "request bodies too slow (408)",
            Refusal::BrokenBody => "request bodies that broke off (400)",
            Refusal::TooLarge => "request bodies too large (413)",
            Refusal::Buffer => "requests past the request buffer (503)",
            Refusal::Connections => "connections past the connection cap",
            Refusal::InFlight => "requests past the in-flight cap (503)",
            Refusal::Upgrade => "upgrades refused (501)",
            Refusal::Stopping => "requests while stopping (503)",
            Refusal::AcceptError => "accept errors waited out",
        }
    }
}

/// How many of each [`Refusal`] there have been, counted in the metrics
/// too when they are served.
#[derive(Default)]
pub struct Refusals {
    counts: [AtomicU64; Refusal::ALL.len()],
    metrics: OnceLock<(Arc<Metrics>, String)>,
}

impl Refusals {
    /// One more `why`.
    pub fn count(&self, why: Refusal) {
        self.counts[why as usize].fetch_add(1, Ordering::Relaxed);
        if let Some((metrics, site)) = self.metrics.get() {
            metrics.proxy_refused(site, why.name());
        }
    }

    /// How many `why` so far.
    pub fn of(&self, why: Refusal) -> u64 {
        self.counts[why as usize].load(Ordering::Relaxed)
    }

    /// From now on each is counted in `metrics` too, for `site`.
    pub(super) fn report_to(&self, metrics: Arc<Metrics>, site: String) {
        let _ = self.metrics.set((metrics, site));
    }

    /// The counts that are not zero, in words: "3 request bodies too large
    /// (413), 1 upgrades refused (501)"; `None` when nothing was refused.
    pub fn words(&self) -> Option<String> {
        let said: Vec<String> = Refusal::ALL
            .iter()
            .filter(|why| self.of(**why) > 0)
            .map(|why| format!("{} {}", self.of(*why), why.words()))
            .collect();
        (!said.is_empty()).then(|| said.join(", "))
    }
}

/// An open connection's place under the cap, held while it is open.
pub(super) struct Place {
    /// Past the cap, within the overflow: each of its requests is answered
    /// 503, then it is closed.
    pub overflow: bool,
    _held: OwnedSemaphorePermit,
}

impl Limits {
    /// The limits the `PROXY_*` tunables in `tunables` set.
    pub fn of(tunables: &Tunables) -> Limits {
        let count = |name: &str| usize::try_from(tunables.get(name).value.as_i64()).unwrap_or(1).max(1);
        let mib = |name: &str| count(name).saturating_mul(1 << 20);
        let connections = count("STALLSCOPE_PROXY_MAX_CONNECTIONS");
        let buffer_bytes = mib("STALLSCOPE_PROXY_REQUEST_BUFFER_MB").min(Semaphore::MAX_PERMITS);
        Limits {
            header_timeout: tunables.seconds("STALLSCOPE_PROXY_HEADER_TIMEOUT_S"),
            body_timeout: tunables.seconds("STALLSCOPE_PROXY_BODY_TIMEOUT_S"),
            max_request_bytes: mib("STALLSCOPE_PROXY_MAX_REQUEST_MB"),
            buffer: Arc::new(Semaphore::new(buffer_bytes)),
            buffer_bytes,
            connections: Arc::new(Semaphore::new(connections)),
            overflow: Arc::new(Semaphore::new((connections / 16).max(16))),
            in_flight: Arc::new(Semaphore::new(count("STALLSCOPE_PROXY_MAX_IN_FLIGHT"))),
            refused: Arc::default(),
        }
    }

    /// The place of a connection that was just accepted: served, or past
    /// the cap answered 503 (counted); `None`: past the overflow too, to be
    /// closed at once (counted).
    pub fn connection(&self) -> Option<Place> {
        if let Ok(held) = Arc::clone(&self.connections).try_acquire_owned() {
            return Some(Place { overflow: false, _held: held });
        }
        self.refused.count(Refusal::Connections);
        let held = Arc::clone(&self.overflow).try_acquire_owned().ok()?;
        Some(Place { overflow: true, _held: held })
    }

    /// A request's place among those in flight; `None` past the cap.
    pub fn in_flight(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.in_flight).try_acquire_owned().ok()
    }

    /// Room for `bytes` more of request bodies; `None` when that would
    /// pass the bound on what is held at once. A body larger than the
    /// whole bound takes it all (one request can always be taken alone).
    pub fn buffer(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let bytes = u32::try_from(bytes.min(self.buffer_bytes)).unwrap_or(u32::MAX);
        Arc::clone(&self.buffer).try_acquire_many_owned(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(sets: &[&str]) -> Limits {
        let mut tunables = Tunables::defaults();
        for set in sets {
            tunables.apply_override(set).unwrap();
        }
        Limits::of(&tunables)
    }

    #[test]
    fn connections_past_the_cap_are_answered_then_closed_and_counted() {
        let limits = limits(&["PROXY_MAX_CONNECTIONS=2"]);
        let served: Vec<Place> = (0..2).filter_map(|_| limits.connection()).collect();
        assert!(served.len() == 2 && served.iter().all(|p| !p.overflow));
        let overflow: Vec<Place> = (0..16).filter_map(|_| limits.connection()).collect();
        assert!(overflow.len() == 16 && overflow.iter().all(|p| p.overflow), "16 at least are told why");
        assert!(limits.connection().is_none());
        assert_eq!(limits.refused.of(Refusal::Connections), 17);
        drop(served);
        assert!(limits.connection().is_some_and(|p| !p.overflow), "a closed connection frees its place");
    }

    #[test]
    fn the_request_buffer_bounds_what_is_held_at_once() {
        let limits = limits(&["PROXY_REQUEST_BUFFER_MB=2", "PROXY_MAX_IN_FLIGHT=1"]);
        let first = limits.buffer(1 << 20).expect("1 MiB of 2");
        assert!(limits.buffer(3 << 19).is_none(), "1.5 MiB more would pass the bound");
        drop(first);
        assert!(limits.buffer(5 << 20).is_some(), "a body over the whole bound is taken alone");
        let flight = limits.in_flight();
        assert!(flight.is_some() && limits.in_flight().is_none());
    }

    #[test]
    fn refusals_are_said_in_words_only_when_there_were_some() {
        let refused = Refusals::default();
        assert_eq!(refused.words(), None);
        refused.count(Refusal::TooLarge);
        refused.count(Refusal::TooLarge);
        refused.count(Refusal::Upgrade);
        assert_eq!(refused.words().unwrap(), "2 request bodies too large (413), 1 upgrades refused (501)");
    }
}
