//! What the server does with one request, whatever scripted it: a
//! scenario's attempt or a recorded run's attempt both become a [`Reply`],
//! and one path in the server plays every reply (the head after its delay,
//! then the body's [`Plan`] through the one player).

use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, StatusCode};

use super::plan::{Plan, plan};
use super::player::Abort;
use super::provider_error::{ProviderError, quote};
use super::scenario::Attempt;
use super::wire::Renderer;
use crate::providers::Dialect;

/// One request's answer, or the lack of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// After `delay`, a response.
    Respond {
        /// The wait before the status line and headers.
        delay: Duration,
        /// The status line and headers.
        head: Head,
        /// The body.
        body: ReplyBody,
    },
    /// No response: after `delay` the connection is closed or reset as
    /// `abort` says, or with `None` held open until the client leaves.
    Unanswered {
        /// The wait before the connection is torn down.
        delay: Duration,
        /// How it is torn down; `None` holds it.
        abort: Option<Abort>,
    },
}

/// A response's status line and headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Head {
    /// The status.
    pub status: StatusCode,
    /// Every header but a dated `retry-after`, content type included.
    pub headers: HeaderMap,
    /// Adds `retry-after: <HTTP-date>` this long after the head is sent
    /// (a date is only right when it is made).
    pub retry_after_date_in: Option<Duration>,
}

/// A response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ReplyBody {
    /// Sent whole, with a content length.
    Fixed(Bytes),
    /// Played in time, chunked.
    Timed(Plan),
}

impl Reply {
    /// The reply a scenario's `attempt` scripts, in `dialect` for `model`.
    pub fn scripted(attempt: &Attempt, dialect: Dialect, model: &str) -> Reply {
        let streaming = attempt.status.is_success() && attempt.body.is_none();
        let default_type = if attempt.status.is_success() { "text/event-stream" } else { "application/json" };
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, attempt.content_type.clone().unwrap_or(HeaderValue::from_static(default_type)));
        let body = if streaming {
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            ReplyBody::Timed(plan(&attempt.steps, &mut Renderer::new(dialect, model)))
        } else {
            let text =
                attempt.body.clone().unwrap_or_else(|| ProviderError::for_status(attempt.status, model).body(dialect));
            ReplyBody::Fixed(Bytes::from(text))
        };
        headers.extend(attempt.headers.clone());
        let head = Head { status: attempt.status, headers, retry_after_date_in: attempt.retry_after_date_in };
        Reply::Respond { delay: attempt.headers_delay, head, body }
    }

    /// An immediate JSON error saying `message`.
    pub fn error(status: StatusCode, message: &str) -> Reply {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let json = format!(r#"{{"error":{{"message":{}}}}}"#, quote(message));
        let head = Head { status, headers, retry_after_date_in: None };
        Reply::Respond { delay: Duration::ZERO, head, body: ReplyBody::Fixed(Bytes::from(json)) }
    }
}
