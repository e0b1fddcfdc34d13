//! Observe's listening side: accepting agents' connections under the
//! connection cap, serving each over HTTP/1.1 or HTTP/2 (an agent that
//! speaks HTTP/2 with prior knowledge, as `curl --http2-prior-knowledge`
//! or a gRPC-style client does, is served as HTTP/2), and closing them
//! when observe stops.
//!
//! Every wait on an agent is bounded ([`super::limits`]): a connection
//! must begin its first request within the header timeout and send each
//! request head whole within it (hyper's, for HTTP/1.1: kept alive, the
//! next head too); an HTTP/2 connection whose agent stops answering pings
//! is closed. An `accept` that fails (too many open files, say) is waited
//! out with a growing pause, never retried in a busy loop.
//!
//! **Stopping.** When observe stops, each connection is told to shut down
//! gracefully (an idle HTTP/1.1 connection closes at once; one with a
//! request closes once it is answered; HTTP/2 sends GOAWAY), and its
//! calls, cancelled, answer soon. [`Connections::close`] then waits a
//! little for them and drops the rest.

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::exchange;
use super::limits::Refusal;
use super::state::State;

/// The first bytes of every HTTP/2 connection with prior knowledge
/// (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How often an HTTP/2 connection is pinged, and how long its answer may
/// take before the connection counts as dead.
const H2_PING: Duration = Duration::from_secs(20);

/// The pause after a failed `accept`, doubled up to [`ACCEPT_PAUSE_MAX`]
/// while it keeps failing.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

/// How long connections may take to close once observe has stopped and
/// its calls have ended, before the rest are dropped.
const CLOSING: Duration = Duration::from_millis(500);

/// The protocol an agent's connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// The connections being served, for closing.
pub(super) struct Connections(JoinSet<()>);

impl Connections {
    /// Waits a little for the connections to close (each was told to when
    /// observe stopped), then drops the rest.
    pub async fn close(mut self) {
        let deadline = Instant::now() + CLOSING;
        while let Ok(Some(_)) = tokio::time::timeout_at(deadline, self.0.join_next()).await {}
        self.0.shutdown().await;
    }
}

/// Accepts connections until `cancel`, each served as its place under
/// the cap says; returns them, for closing once the calls in flight have
/// ended.
pub(super) async fn accept(listener: TcpListener, state: Arc<State>, cancel: CancellationToken) -> Connections {
    let mut connections = JoinSet::new();
    let mut pause = ACCEPT_PAUSE;
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => {
                pause = ACCEPT_PAUSE;
                stream
            }
            // A connection the agent reset before it was taken: nothing to
            // wait for.
            Err(e) if is_connection_error(&e) => continue,
            Err(_) => {
                state.limits.refused.count(Refusal::AcceptError);
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(pause) => {}
                }
                pause = (pause * 2).min(ACCEPT_PAUSE_MAX);
                continue;
            }
        };
        let Some(place) = state.limits.connection() else { continue };
        let _ = stream.set_nodelay(true);
        let (state, cancel) = (Arc::clone(&state), cancel.clone());
        connections.spawn(async move {
            serve(stream, state, cancel, place.overflow).await;
            drop(place);
        });
    }
    Connections(connections)
}

/// Whether `error` is one connection's own (reset or aborted before it
/// was accepted), not the listener's.
fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(error.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset)
}

/// Serves one connection until it closes: its requests answered
/// ([`exchange::handle`]), or each answered 503 when it is past the cap
/// (`overflow`). Told to shut down gracefully when observe stops.
async fn serve(stream: TcpStream, state: Arc<State>, cancel: CancellationToken, overflow: bool) {
    let header_timeout = state.limits.header_timeout;
    let protocol = match tokio::time::timeout(header_timeout, protocol(&stream)).await {
        Ok(Some(protocol)) => protocol,
        // Closed before it said anything.
        Ok(None) => return,
        Err(_) => {
            state.limits.refused.count(Refusal::HeaderTimeout);
            return;
        }
    };
    let limits_state = Arc::clone(&state);
    let service = service_fn(move |request| exchange::handle(Arc::clone(&state), request, overflow));
    let io = TokioIo::new(stream);
    let timed_out = match protocol {
        Protocol::Http1 => {
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
            let connection = builder.serve_connection(io, service);
            until_closed(connection, &cancel).await
        }
        Protocol::Http2 => {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder.timer(TokioTimer::new()).keep_alive_interval(H2_PING).keep_alive_timeout(H2_PING);
            let connection = builder.serve_connection(io, service);
            until_closed(connection, &cancel).await
        }
    };
    if timed_out {
        limits_state.limits.refused.count(Refusal::HeaderTimeout);
    }
}

/// Drives `connection` until it closes, telling it to shut down
/// gracefully once `cancel` is; true when it was closed for taking too
/// long over a request head.
async fn until_closed<C>(connection: C, cancel: &CancellationToken) -> bool
where
    C: GracefulConnection<Error = hyper::Error>,
{
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = cancel.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    ended.is_err_and(|e| e.is_timeout())
}

/// The protocol `stream` speaks, from its first bytes (read, not taken):
/// HTTP/2 when they are its preface, HTTP/1.1 as soon as they cannot be;
/// `None` when it closes first.
async fn protocol(stream: &TcpStream) -> Option<Protocol> {
    let mut first = [0u8; H2_PREFACE.len()];
    loop {
        let n = stream.peek(&mut first).await.ok()?;
        if n == 0 {
            return None;
        }
        if first[..n] != H2_PREFACE[..n] {
            return Some(Protocol::Http1);
        }
        if n == H2_PREFACE.len() {
            return Some(Protocol::Http2);
        }
        // A prefix of the preface: wait for more (peek returns at once
        // while the bytes are there).
        stream.readable().await.ok()?;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
