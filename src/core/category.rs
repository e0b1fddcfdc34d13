//! The error taxonomy: what kind of failure ended an attempt, and which
//! timer noticed it when the failure was a timeout.
//!
//! Categories are the routing key between classification and retry budgets
//! (seed 004): the classifier maps a failure to one category, and the
//! executor looks the category up to decide whether to retry, rotate a
//! credential or fail over.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What kind of failure ended an attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// DNS, refused or reset connections, dropped sockets, proxy failures.
    Connection,
    /// A timer fired; the classification says which one.
    Timeout,
    /// 429 and in-stream rate-limit errors.
    RateLimit,
    /// The provider is overloaded (529, 503, `overloaded_error`).
    Overloaded,
    /// Other 5xx responses and in-stream server errors.
    ServerError,
    /// The credential was refused (401, 403, 402); retried only by rotating
    /// to another key of the pool.
    Auth,
    /// The request itself is wrong (400, 404, 413, 422, context overflow).
    InvalidRequest,
    /// The call was cancelled from outside.
    Cancelled,
    /// Anything no rule recognises, and errors that retrying cannot fix.
    #[default]
    Permanent,
}

impl Category {
    /// Every category, in a stable order (used for listings and reports).
    pub const ALL: [Category; 9] = [
        Category::Connection,
        Category::Timeout,
        Category::RateLimit,
        Category::Overloaded,
        Category::ServerError,
        Category::Auth,
        Category::InvalidRequest,
        Category::Cancelled,
        Category::Permanent,
    ];

    /// The categories that carry a retry budget of their own.
    pub const RETRYABLE: [Category; 5] =
        [Category::Connection, Category::Timeout, Category::RateLimit, Category::Overloaded, Category::ServerError];

    /// The snake_case name used in config, tunables and reports.
    pub const fn name(self) -> &'static str {
        match self {
            Category::Connection => "connection",
            Category::Timeout => "timeout",
            Category::RateLimit => "rate_limit",
            Category::Overloaded => "overloaded",
            Category::ServerError => "server_error",
            Category::Auth => "auth",
            Category::InvalidRequest => "invalid_request",
            Category::Cancelled => "cancelled",
            Category::Permanent => "permanent",
        }
    }

    /// Whether a failure of this category may be retried on the same target
    /// (subject to budgets). Auth is retried only through rotation.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            Category::Connection
                | Category::Timeout
                | Category::RateLimit
                | Category::Overloaded
                | Category::ServerError
        )
    }

    /// Whether a failure of this category is transient: partial-response
    /// recovery may salvage the text streamed before it.
    pub const fn is_transient(self) -> bool {
        self.is_retryable()
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Category {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('-', "_");
        Category::ALL
            .into_iter()
            .find(|c| c.name() == wanted)
            .ok_or_else(|| format!("one of {}", names(&Category::ALL)))
    }
}

/// Which timer fired when a failure is a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerKind {
    /// TCP (and TLS) connection set-up took too long.
    Connect,
    /// No response byte arrived within the time-to-first-byte budget.
    Ttfb,
    /// No byte at all (pings included) within the idle budget.
    Idle,
    /// No progress event (content, reasoning, tool call) within the
    /// data-stall budget, even if keep-alives kept arriving.
    DataStall,
    /// Progress (the data-stall timer's events) came slower than the
    /// throughput floor over a whole window: a stream that crawls.
    MinRate,
    /// The optional cap on one attempt's total duration.
    Total,
    /// The whole-call deadline, across attempts and backoff sleeps.
    Deadline,
}

impl TimerKind {
    /// Every timer, in a stable order.
    pub const ALL: [TimerKind; 7] = [
        TimerKind::Connect,
        TimerKind::Ttfb,
        TimerKind::Idle,
        TimerKind::DataStall,
        TimerKind::MinRate,
        TimerKind::Total,
        TimerKind::Deadline,
    ];

    /// The snake_case name used in events and reports.
    pub const fn name(self) -> &'static str {
        match self {
            TimerKind::Connect => "connect",
            TimerKind::Ttfb => "ttfb",
            TimerKind::Idle => "idle",
            TimerKind::DataStall => "data_stall",
            TimerKind::MinRate => "min_rate",
            TimerKind::Total => "total",
            TimerKind::Deadline => "deadline",
        }
    }
}

impl fmt::Display for TimerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Joins names as `a, b or c` for "allowed values" messages.
pub(crate) fn names<T: fmt::Display>(items: &[T]) -> String {
    let words: Vec<String> = items.iter().map(ToString::to_string).collect();
    match words.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Category::ALL {
            assert_eq!(c.name().parse::<Category>(), Ok(c));
        }
        assert_eq!("rate-limit".parse::<Category>(), Ok(Category::RateLimit));
        let err = "ratelimit".parse::<Category>().unwrap_err();
        assert!(err.contains("rate_limit"), "{err}");
    }

    #[test]
    fn timers_serialize_as_their_names() {
        for t in TimerKind::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.name());
        }
        assert_eq!(TimerKind::MinRate.name(), "min_rate");
    }

    #[test]
    fn only_transient_categories_are_retryable() {
        let retryable: Vec<_> = Category::ALL.into_iter().filter(|c| c.is_retryable()).collect();
        assert_eq!(retryable, Category::RETRYABLE);
    }
}
