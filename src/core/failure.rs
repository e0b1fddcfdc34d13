//! What went wrong in one attempt, as observed, before classification.

use std::fmt;
use std::time::Duration;

use http::HeaderMap;
use serde::{Deserialize, Serialize};

use super::category::TimerKind;
use super::redact;

/// A transport-level failure, as far as the HTTP stack and the kernel let
/// us tell. None of these is one of our timers: a kernel timeout is the
/// kernel's (SYN retries, TCP keepalive, `TCP_USER_TIMEOUT`), and is
/// reported as such, never as the connect or idle timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// The peer refused the connection (a RST answered the SYN).
    Refused,
    /// No route: the network or host is unreachable (ICMP, or no route).
    Unreachable,
    /// The host name could not be resolved.
    Dns,
    /// The TLS handshake failed (certificate, protocol, alert).
    Tls,
    /// The proxy refused or failed the tunnel (HTTP `CONNECT`, SOCKS).
    Proxy,
    /// The kernel gave up connecting (SYNs unanswered): not our connect timer.
    ConnectTimedOut,
    /// The connection could not be made for another reason.
    Connect,
    /// The connection was reset.
    Reset,
    /// The body ended cleanly (EOF) before the stream said it was done.
    Closed,
    /// The kernel declared an established connection dead: keepalive
    /// probes went unanswered or sent data stayed unacknowledged past
    /// `TCP_USER_TIMEOUT`.
    KernelTimeout,
    /// Reading the body failed otherwise.
    Read,
    /// Anything else the client reported.
    Other,
}

impl TransportKind {
    /// Every kind, in a stable order.
    pub const ALL: [TransportKind; 12] = [
        TransportKind::Refused,
        TransportKind::Unreachable,
        TransportKind::Dns,
        TransportKind::Tls,
        TransportKind::Proxy,
        TransportKind::ConnectTimedOut,
        TransportKind::Connect,
        TransportKind::Reset,
        TransportKind::Closed,
        TransportKind::KernelTimeout,
        TransportKind::Read,
        TransportKind::Other,
    ];

    /// The name user classifier rules match on (`error_kind`) and reports
    /// print.
    pub const fn name(self) -> &'static str {
        match self {
            TransportKind::Refused => "refused",
            TransportKind::Unreachable => "unreachable",
            TransportKind::Dns => "dns",
            TransportKind::Tls => "tls",
            TransportKind::Proxy => "proxy",
            TransportKind::ConnectTimedOut => "connect_timed_out",
            TransportKind::Connect => "connect",
            TransportKind::Reset => "reset",
            TransportKind::Closed => "closed",
            TransportKind::KernelTimeout => "kernel_timeout",
            TransportKind::Read => "read",
            TransportKind::Other => "transport",
        }
    }

    /// Whether the failure happened before a connection was made: a rule's
    /// `error_kind = "connect"` matches every such kind, as it did before
    /// they were told apart.
    pub const fn is_connect(self) -> bool {
        matches!(
            self,
            TransportKind::Refused
                | TransportKind::Unreachable
                | TransportKind::Dns
                | TransportKind::Tls
                | TransportKind::Proxy
                | TransportKind::ConnectTimedOut
                | TransportKind::Connect
        )
    }

    /// What happened, in words, for reports.
    pub const fn describe(self) -> &'static str {
        match self {
            TransportKind::Refused => "connection refused",
            TransportKind::Unreachable => "network or host unreachable",
            TransportKind::Dns => "DNS lookup failed",
            TransportKind::Tls => "TLS handshake failed",
            TransportKind::Proxy => "the proxy refused or failed the tunnel",
            TransportKind::ConnectTimedOut => "connect: timed out by the kernel",
            TransportKind::Connect => "connect failure",
            TransportKind::Reset => "connection reset",
            TransportKind::Closed => "closed cleanly before the stream was done",
            TransportKind::KernelTimeout => "dead connection: keepalive or user timeout (kernel)",
            TransportKind::Read => "read failure",
            TransportKind::Other => "transport failure",
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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
            Failure::Transport { kind, message } => write!(f, "{}: {message}", kind.describe()),
            Failure::Timeout { timer: TimerKind::MinRate, after } => {
                write!(f, "min_rate timer fired: progress below the floor over {:.3} s", after.as_secs_f64())
            }
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
            Failure::InStream { code: Some(code), message } => {
                write!(f, "in-stream error {code}: {}", redact::text(message))
            }
            Failure::InStream { code: None, message } => write!(f, "in-stream error: {}", redact::text(message)),
            Failure::Malformed { message } => write!(f, "malformed stream: {message}"),
            Failure::Cancelled => f.write_str("cancelled"),
        }
    }
}

/// The first line of a body, shortened for messages.
/// Bodies echo what was sent (a provider's "Incorrect API key provided:
/// sk-…"), and messages reach events and reports: keys are redacted.
fn snippet(body: &str) -> String {
    const MAX: usize = 200;
    let line = body.trim().lines().next().unwrap_or("");
    match line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", redact::text(&line[..cut])),
        None => redact::text(line),
    }
}
