//! The simulator's HTTP/1.1 server on loopback: routes each request to its
//! dialect, counts attempts per stream, and answers with the scenario's
//! script for that attempt.
//!
//! Each accepted connection is served by hyper's HTTP/1 connection with no
//! timers, so a scripted stall really holds the socket open with no bytes;
//! Nagle is off so every event leaves as it is written. A scripted hangup or
//! reset drops the connection from its own task; for a reset, SO_LINGER 0 is
//! set first through a second handle on the socket, so closing sends an RST.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use http::header::{ALLOW, RETRY_AFTER};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use super::error::SimError;
use super::player::{Abort, SimBody, body};
use super::recorded::RecordedReplies;
use super::reply::{Reply, ReplyBody};
use super::scenario::Scenario;
use crate::providers::Dialect;
use crate::replay::recording::Recording;

/// The request header naming the stream an attempt belongs to.
pub const STREAM_HEADER: &str = "x-stallscope-stream";

/// The model echoed when a request names none.
const DEFAULT_MODEL: &str = "sim-model";

/// How long the accept loop rests after a failed accept (such as running
/// out of file descriptors) before trying again, instead of spinning.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// What the server answers from.
enum Script {
    /// A scenario: attempt N of a stream plays its script N.
    Scenario(Scenario),
    /// A recorded run: attempt N of stream S plays S's recorded attempt N.
    Recording(RecordedReplies),
}

impl Script {
    fn reply(
        &self,
        stream: Option<&str>,
        attempt: usize,
        request_bytes: usize,
        dialect: Dialect,
        model: &str,
    ) -> Reply {
        match self {
            Script::Scenario(scenario) => Reply::scripted(scenario.attempt_for(attempt, request_bytes), dialect, model),
            Script::Recording(recording) => recording.reply(stream, attempt),
        }
    }
}

/// What every connection shares.
struct Shared {
    script: Script,
    /// Present when the simulator speaks HTTPS.
    tls: Option<TlsAcceptor>,
    /// Requests seen per stream id (the empty id for requests without one).
    attempts: Mutex<HashMap<String, usize>>,
}

impl Shared {
    /// Counts one more attempt of `stream`; returns its 1-based number.
    fn next_attempt(&self, stream: &str) -> usize {
        let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = attempts.entry(stream.to_owned()).or_default();
        *count += 1;
        *count
    }
}

/// A running simulator; stops when shut down or dropped.
pub struct SimServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The accept loop; it owns every connection task, so aborting it ends them all.
    accept: JoinHandle<()>,
}

impl SimServer {
    /// Binds 127.0.0.1:`port` (0 picks a free port) and serves `scenario`
    /// until shut down or dropped.
    pub async fn start(scenario: Scenario, port: u16) -> Result<SimServer, SimError> {
        Self::serve(Script::Scenario(scenario), port, None).await
    }

    /// Binds 127.0.0.1:`port` (0 picks a free port) and serves `recording`
    /// as a live provider with its recorded timing, every delay divided by
    /// `speed` (0.1 to 1000): byte for byte where raw bodies were recorded
    /// in full, otherwise re-rendered in the recorded dialect from the
    /// recorded events. Request N naming stream S in `x-stallscope-stream`
    /// gets S's recorded attempt N.
    pub async fn start_recording(recording: &Recording, speed: f64, port: u16) -> Result<SimServer, SimError> {
        let replies = RecordedReplies::new(recording, speed)?;
        Self::serve(Script::Recording(replies), port, None).await
    }

    /// Like [`SimServer::start`], but speaking HTTPS with `identity` (for
    /// tests of proxies' CONNECT tunnels and of custom CA files).
    pub async fn start_tls(scenario: Scenario, port: u16, identity: &TlsIdentity) -> Result<SimServer, SimError> {
        Self::serve(Script::Scenario(scenario), port, Some(identity.acceptor()?)).await
    }

    async fn serve(script: Script, port: u16, tls: Option<TlsAcceptor>) -> Result<SimServer, SimError> {
        let requested = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let bind_error = |source| SimError::Bind { addr: requested, source };
        let listener = listen(requested).map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let shared = Arc::new(Shared { script, tls, attempts: Mutex::new(HashMap::new()) });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(SimServer { addr, shared, accept })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS), without a trailing
    /// slash.
    pub fn base_url(&self) -> String {
        let scheme = if self.shared.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Requests seen so far for the stream id `stream` (`""` counts requests
    /// without an `x-stallscope-stream` header).
    pub fn attempts(&self, stream: &str) -> usize {
        self.shared.attempts.lock().unwrap_or_else(PoisonError::into_inner).get(stream).copied().unwrap_or(0)
    }

    /// The scenario being served (`None` when serving a recording).
    pub fn scenario(&self) -> Option<&Scenario> {
        match &self.shared.script {
            Script::Scenario(scenario) => Some(scenario),
            Script::Recording(_) => None,
        }
    }

    /// Stops listening and drops every connection; returns once the
    /// listening socket is closed.
    pub async fn shutdown(mut self) {
        self.accept.abort();
        // Cancellation is the expected outcome; the loop has no other result.
        let _ = (&mut self.accept).await;
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A certificate chain and its private key, in PEM.
#[derive(Debug, Clone)]
pub struct TlsIdentity {
    /// The server certificate, then any intermediates.
    pub cert_chain_pem: Vec<u8>,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key_pem: Vec<u8>,
}

impl TlsIdentity {
    fn acceptor(&self) -> Result<TlsAcceptor, SimError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let bad = |e: &dyn std::fmt::Display| SimError::Tls(e.to_string());
        let certs =
            CertificateDer::pem_slice_iter(&self.cert_chain_pem).collect::<Result<Vec<_>, _>>().map_err(|e| bad(&e))?;
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|e| bad(&e))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(&e))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| bad(&e))?;
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// Pending connections the listening socket queues: tokio's default (1024)
/// overflows when a run opens a thousand streams at once.
const LISTEN_BACKLOG: i32 = 4096;

fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    TcpListener::from_std(socket.into())
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Dropped with this task, which aborts every connection still open.
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        match listener.accept().await {
            Ok((stream, _)) => {
                connections.spawn(serve_connection(stream, Arc::clone(&shared)));
            }
            Err(_) => tokio::time::sleep(ACCEPT_RETRY_PAUSE).await,
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    // Events must leave one by one, not wait to be coalesced.
    if stream.set_nodelay(true).is_err() {
        return;
    }
    // A second handle on the socket, kept here so a reset can set SO_LINGER
    // after hyper has taken the stream.
    let Ok(std_stream) = stream.into_std() else { return };
    let Ok(handle) = std_stream.try_clone() else { return };
    let Ok(stream) = TcpStream::from_std(std_stream) else { return };
    let (abort_tx, mut abort_rx) = mpsc::unbounded_channel();
    let tls = shared.tls.clone();
    let service = service_fn(move |request| respond(request, Arc::clone(&shared), abort_tx.clone()));
    // No timer is given to the builder, so hyper applies no timeouts.
    let builder = http1::Builder::new();
    let connection = async move {
        match tls {
            Some(acceptor) => {
                if let Ok(stream) = acceptor.accept(stream).await {
                    let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                }
            }
            None => {
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
            }
        }
    };
    tokio::select! {
        () = connection => {}
        Some(abort) = abort_rx.recv() => {
            if abort == Abort::Reset {
                // If this fails the close below is a plain FIN; nothing better is possible.
                let _ = socket2::SockRef::from(&handle).set_linger(Some(Duration::ZERO));
            }
        }
    }
    // Both handles are closed here (the connection's on leaving `select!`,
    // `handle` now); the last close sends the FIN or, with linger 0, the RST.
    drop(handle);
}

#[derive(Deserialize)]
struct ModelField {
    model: Option<String>,
}

async fn respond(
    request: Request<Incoming>,
    shared: Arc<Shared>,
    abort: UnboundedSender<Abort>,
) -> Result<Response<SimBody>, Infallible> {
    let Some(dialect) = Dialect::from_server_path(request.uri().path()) else {
        let paths = Dialect::ALL.map(Dialect::server_path).join(", ");
        let message = format!("no endpoint {}; the simulator serves POST {paths}", request.uri().path());
        return Ok(answer(Reply::error(StatusCode::NOT_FOUND, &message), abort).await);
    };
    if request.method() != Method::POST {
        let message = format!("{} takes POST", dialect.server_path());
        let mut response = answer(Reply::error(StatusCode::METHOD_NOT_ALLOWED, &message), abort).await;
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("POST"));
        return Ok(response);
    }
    let stream = request.headers().get(STREAM_HEADER).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let n = shared.next_attempt(stream.as_deref().unwrap_or(""));
    // Only `model` and the body's size are read; a body that is not JSON
    // just gets the default model.
    let body = request.into_body().collect().await.map(|collected| collected.to_bytes()).unwrap_or_default();
    let model = serde_json::from_slice::<ModelField>(&body).ok().and_then(|b| b.model);
    let model = model.unwrap_or_else(|| DEFAULT_MODEL.to_owned());
    let reply = shared.script.reply(stream.as_deref(), n, body.len(), dialect, &model);
    Ok(answer(reply, abort).await)
}

/// Plays `reply`: waits its delay, then answers, or tears the connection
/// down (or holds it) without answering.
async fn answer(reply: Reply, abort: UnboundedSender<Abort>) -> Response<SimBody> {
    match reply {
        Reply::Unanswered { delay, abort: teardown } => {
            tokio::time::sleep(delay).await;
            if let Some(teardown) = teardown {
                // An error only means the connection is already gone.
                let _ = abort.send(teardown);
            }
            std::future::pending().await
        }
        Reply::Respond { delay, head, body: reply_body } => {
            tokio::time::sleep(delay).await;
            let body = match reply_body {
                ReplyBody::Fixed(bytes) => Full::new(bytes).boxed_unsync(),
                ReplyBody::Timed(plan) => body(plan, abort),
            };
            let mut response = Response::new(body);
            *response.status_mut() = head.status;
            *response.headers_mut() = head.headers;
            if let Some(wait) = head.retry_after_date_in {
                response.headers_mut().insert(RETRY_AFTER, retry_after_date(wait));
            }
            response
        }
    }
}

/// An HTTP-date `wait` from now, rounded up to the next whole second (the
/// format has no fractions), so the client never waits less than asked.
fn retry_after_date(wait: Duration) -> HeaderValue {
    let Some(at) = SystemTime::now().checked_add(wait) else { return HeaderValue::from(wait.as_secs()) };
    let fraction = at.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let at = if fraction == 0 { at } else { at + Duration::from_nanos(u64::from(1_000_000_000 - fraction)) };
    // An HTTP-date is plain ASCII, so this cannot fail; fall back to seconds anyway.
    HeaderValue::from_str(&httpdate::fmt_http_date(at)).unwrap_or_else(|_| HeaderValue::from(wait.as_secs()))
}
