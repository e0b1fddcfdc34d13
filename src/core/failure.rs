//! What went wrong in one attempt, as observed, before classification.

use std::fmt;
use std::time::Duration;

use http::HeaderMap;

use super::category::TimerKind;

/// A transport-level failure, as far as the HTTP stack lets us tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// The connection could not be made (refused, DNS, unreachable, proxy).
    Connect,
    /// The connection was reset.
    Reset,
    /// The body ended before the stream said it was done.
    Closed,
    /// Reading the body failed otherwise.
    Read,
    /// Anything else the client reported.
    Other,
}

impl TransportKind {
    /// The name user classifier rules match on (`error_kind`).
    pub const fn name(self) -> &'static str {
        match self {
            TransportKind::Connect => "connect",
            TransportKind::Reset => "reset",
            TransportKind::Closed => "closed",
            TransportKind::Read => "read",
            TransportKind::Other => "transport",
        }
    }
}

/// One attempt's failure.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The transport failed.
    Transport {
        /// What kind of failure.
        kind: TransportKind,
        /// The client's description.
        message: String,
    },
    /// A timer fired.
    Timeout {
        /// Which one.
        timer: TimerKind,
        /// Its budget.
        after: Duration,
    },
    /// The server answered with an error status.
    Http {
        /// The status.
        status: u16,
        /// The response headers (boxed: they would triple the size of
        /// every body item's `Result`).
        headers: Box<HeaderMap>,
        /// The start of the body.
        body: String,
    },
    /// The server answered 2xx with something that is not an event stream.
    UnexpectedContentType {
        /// The status.
        status: u16,
        /// The content type, if any.
        content_type: Option<String>,
        /// The response headers (boxed: they would triple the size of
        /// every body item's `Result`).
        headers: Box<HeaderMap>,
        /// The start of the body.
        body: String,
    },
    /// The stream carried an error event.
    InStream {
        /// The provider's error type or code (`overloaded_error`,
        /// `rate_limit_exceeded`), when it gave one.
        code: Option<String>,
        /// The error message.
        message: String,
    },
    /// The stream's bytes could not be parsed.
    Malformed {
        /// What was wrong.
        message: String,
    },
    /// The call was cancelled from outside.
    Cancelled,
}

impl Failure {
    /// The name user classifier rules match on (`error_kind`).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Failure::Transport { kind, .. } => kind.name(),
            Failure::Timeout { .. } => "timeout",
            Failure::Http { .. } => "http",
            Failure::UnexpectedContentType { .. } => "content_type",
            Failure::InStream { .. } => "in_stream",
            Failure::Malformed { .. } => "malformed",
            Failure::Cancelled => "cancelled",
        }
    }

    /// The HTTP status, when the failure came with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Failure::Http { status, .. } | Failure::UnexpectedContentType { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The response headers, when the failure came with them.
    pub fn headers(&self) -> Option<&HeaderMap> {
        match self {
            Failure::Http { headers, .. } | Failure::UnexpectedContentType { headers, .. } => Some(headers),
            _ => None,
        }
    }

    /// The text rules search with `body_contains`: the body, or the
    /// in-stream error's code and message.
    pub fn body_text(&self) -> String {
        match self {
            Failure::Http { body, .. } | Failure::UnexpectedContentType { body, .. } => body.clone(),
            Failure::InStream { code, message } => match code {
                Some(code) => format!("{code}: {message}"),
                None => message.clone(),
            },
            Failure::Transport { message, .. } | Failure::Malformed { message } => message.clone(),
            Failure::Timeout { .. } | Failure::Cancelled => String::new(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Transport { kind, message } => write!(f, "{} failure: {message}", kind.name()),
            Failure::Timeout { timer, after } => {
                write!(f, "{timer} timer fired after {:.3} s", after.as_secs_f64())
            }
            Failure::Http { status, body, .. } => write!(f, "HTTP {status}: {}", snippet(body)),
            Failure::UnexpectedContentType { status, content_type, body, .. } => write!(
                f,
                "HTTP {status} with content type {} instead of an event stream: {}",
                content_type.as_deref().unwrap_or("(none)"),
                snippet(body)
            ),
            Failure::InStream { code: Some(code), message } => write!(f, "in-stream error {code}: {message}"),
            Failure::InStream { code: None, message } => write!(f, "in-stream error: {message}"),
            Failure::Malformed { message } => write!(f, "malformed stream: {message}"),
            Failure::Cancelled => f.write_str("cancelled"),
        }
    }
}

/// The first line of a body, shortened for messages.
fn snippet(body: &str) -> String {
    const MAX: usize = 200;
    let line = body.trim().lines().next().unwrap_or("");
    match line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}
