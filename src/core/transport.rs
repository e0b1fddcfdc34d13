//! The HTTP transport: the shared reqwest clients of each transport
//! configuration, built with the timeouts, keepalive, IP family, protocol
//! and proxy the tunables ask for, and the mapping of client errors to
//! attempt failures.
//!
//! A configuration has [`CLIENT_SHARDS`] clients and a call uses the one
//! its stream id picks ([`Clients::for_stream`]). hyper-util's pool queues
//! every checkout that finds no idle connection and scans that whole queue
//! whenever a checkout is dropped, which happens each time a new connection
//! wins the race against the pool: N calls opening connections together
//! cost O(N²) under the pool's lock. With 10,000 streams started at once
//! that scan was 16% of the process's CPU, serialising both workers while
//! every stream's first bytes waited. Spread over K clients it costs N²/K;
//! a stream's retries keep its client, and so its pooled connections.
//!
//! The transport never retries: every attempt is the executor's decision.
//! reqwest's own retry policy (HTTP/2 refused streams and graceful
//! `GOAWAY`s, twice by default) is switched off. hyper-util's retry of
//! "canceled" requests cannot be reached through reqwest 0.13 and stays on;
//! it only re-sends a request that never left: one handed to a pooled
//! connection found closed before the request's first byte was written.
//!
//! Failures name what happened, not what `reqwest::Error::is_timeout` says:
//! that is also true for a kernel `ETIMEDOUT` (SYN retries, keepalive,
//! `TCP_USER_TIMEOUT`), which is not one of our timers.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::category::TimerKind;
use super::failure::{Failure, TransportKind};
use super::redact;

/// TCP keepalive probe timing (seed 001: 30/10/3 → a dead peer is noticed
/// in about a minute). The socket's `TCP_USER_TIMEOUT` follows it (see
/// [`Keepalive::dead_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Keepalive {
    /// Idle time before the first probe.
    pub idle: Duration,
    /// Time between probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dead.
    pub count: u32,
}

impl Keepalive {
    /// How long a silent peer takes to be declared dead:
    /// `idle + interval × count`. It is also the socket's `TCP_USER_TIMEOUT`,
    /// for two reasons. Linux ignores the probe count once a user timeout
    /// is set (reqwest sets 30 s unless told otherwise, which made 1/1/2
    /// take 30 s instead of 3 s); with the user timeout at exactly this
    /// value the last probe's deadline and the user timeout coincide. And
    /// data sent but never acknowledged (a request written into a dead
    /// route) is given up on after the same time, where the kernel's own
    /// retransmission limit would take about 15 minutes.
    pub fn dead_after(&self) -> Duration {
        self.idle.saturating_add(self.interval.saturating_mul(self.count))
    }
}

/// Which proxy to use.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ProxySetting {
    /// Follow `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY`.
    FromEnvironment,
    /// No proxy, whatever the environment says.
    Off,
    /// This proxy (`http://`, `https://`, `socks5://`, `socks5h://`);
    /// `NO_PROXY` still applies.
    Url(String),
}

impl ProxySetting {
    /// Reads `STALLSCOPE_PROXY` (already validated).
    pub fn parse(text: &str) -> Self {
        let text = text.trim();
        if text.is_empty() {
            ProxySetting::FromEnvironment
        } else if text.eq_ignore_ascii_case("off") {
            ProxySetting::Off
        } else {
            ProxySetting::Url(text.to_owned())
        }
    }
}

/// Everything that shapes a client. Two calls with equal settings share a
/// client (and its connection pool).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TransportSettings {
    /// TCP and TLS set-up budget.
    pub connect_timeout: Duration,
    /// Per-read backstop under the governor.
    pub read_timeout: Option<Duration>,
    /// Keepalive probes and the matching user timeout; `None` = neither
    /// (no `SO_KEEPALIVE`, the kernel's default retransmission limit).
    pub keepalive: Option<Keepalive>,
    /// Bind an IPv4 source address.
    pub force_ipv4: bool,
    /// Speak HTTP/1.1 only.
    pub http1_only: bool,
    /// Proxy.
    pub proxy: ProxySetting,
    /// Extra trusted CA certificates (a PEM file), merged with the
    /// platform's roots: for TLS-inspecting corporate proxies and private
    /// endpoints.
    pub ca_file: Option<PathBuf>,
}

/// A client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {message}")]
pub struct TransportError {
    message: String,
}

/// Builds a client for `settings`.
pub fn build_client(settings: &TransportSettings) -> Result<reqwest::Client, TransportError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout)
        // Streams are small writes read as they come: Nagle only adds delay.
        .tcp_nodelay(true)
        // A redirect would carry `x-api-key` and custom key headers to
        // whatever host it names; an LLM endpoint has no reason to redirect.
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never());
    if let Some(read) = settings.read_timeout {
        builder = builder.read_timeout(read);
    }
    builder = keepalive(builder, settings.keepalive);
    if settings.force_ipv4 {
        builder = builder.local_address(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    }
    if settings.http1_only {
        builder = builder.http1_only();
    }
    builder = match &settings.proxy {
        ProxySetting::FromEnvironment => builder,
        ProxySetting::Off => builder.no_proxy(),
        ProxySetting::Url(url) => {
            let proxy = reqwest::Proxy::all(url.as_str())
                .map_err(|e| TransportError { message: format!("proxy {}: {e}", redact::url(url)) })?
                .no_proxy(reqwest::NoProxy::from_env());
            builder.proxy(proxy)
        }
    };
    if let Some(path) = &settings.ca_file {
        let pem =
            std::fs::read(path).map_err(|e| TransportError { message: format!("CA file {}: {e}", path.display()) })?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| TransportError { message: format!("CA file {}: {}", path.display(), error_chain(&e)) })?;
        if certs.is_empty() {
            return Err(TransportError { message: format!("CA file {} holds no PEM certificate", path.display()) });
        }
        builder = builder.tls_certs_merge(certs);
    }
    builder.build().map_err(|e| TransportError { message: error_chain(&e) })
}

/// Sets every keepalive option, on or off: reqwest's defaults (15 s, 15 s,
/// 3 probes, 30 s user timeout) apply to any left unset, and hyper-util
/// turns `SO_KEEPALIVE` on when any one of the three probe settings is set.
fn keepalive(builder: reqwest::ClientBuilder, keepalive: Option<Keepalive>) -> reqwest::ClientBuilder {
    let builder = builder
        .tcp_keepalive(keepalive.map(|k| k.idle))
        .tcp_keepalive_interval(keepalive.map(|k| k.interval))
        .tcp_keepalive_retries(keepalive.map(|k| k.count));
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    let builder = builder.tcp_user_timeout(keepalive.map(|k| k.dead_after()));
    builder
}

/// How many clients one transport configuration spreads its calls over.
pub const CLIENT_SHARDS: usize = 16;

/// The clients of one transport configuration. Cheap to clone.
///
/// The first is built with the set, the others when a stream first needs
/// one: building a client loads the platform's root certificates (tens of
/// milliseconds in a debug build), and a set built whole would hold a
/// runtime worker for that long sixteen times over.
#[derive(Debug, Clone)]
pub struct Clients(Arc<Shards>);

#[derive(Debug)]
struct Shards {
    settings: TransportSettings,
    first: reqwest::Client,
    rest: [OnceLock<reqwest::Client>; CLIENT_SHARDS - 1],
}

impl Clients {
    /// The clients of `settings`, the first one built.
    pub fn build(settings: &TransportSettings) -> Result<Clients, TransportError> {
        let first = build_client(settings)?;
        Ok(Clients(Arc::new(Shards {
            settings: settings.clone(),
            first,
            rest: std::array::from_fn(|_| OnceLock::new()),
        })))
    }

    /// The client of stream `stream`'s attempts.
    pub fn for_stream(&self, stream: u64) -> &reqwest::Client {
        let shards = &self.0;
        match (stream % CLIENT_SHARDS as u64) as usize {
            0 => &shards.first,
            // The settings built the first client; should another build
            // fail (a CA file removed since), its streams share the first.
            index => shards.rest[index - 1]
                .get_or_init(|| build_client(&shards.settings).unwrap_or_else(|_| shards.first.clone())),
        }
    }
}

/// Clients shared by every call of a process, one set per settings value.
#[derive(Debug, Default)]
pub struct ClientCache {
    clients: Mutex<HashMap<TransportSettings, Clients>>,
}

impl ClientCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The shared clients for `settings`, built on first use.
    pub fn clients(&self, settings: &TransportSettings) -> Result<Clients, TransportError> {
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| TransportError { message: "client cache poisoned by an earlier panic".to_owned() })?;
        if let Some(client) = clients.get(settings) {
            return Ok(client.clone());
        }
        let built = Clients::build(settings)?;
        clients.insert(settings.clone(), built.clone());
        Ok(built)
    }

    /// How many distinct configurations have clients.
    pub fn len(&self) -> usize {
        self.clients.lock().map_or(0, |c| c.len())
    }

    /// True before the first client is built.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Maps a client error to an attempt failure. `read_timeout` is the
/// backstop in force, reported when it is what fired.
///
/// Only our own clocks are reported as timers: reqwest's connect timeout
/// (`connect_timeout`) and its read timeout (the backstop). Everything
/// else is a [`TransportKind`] read from the error's causes.
pub fn failure_from_reqwest(
    error: &reqwest::Error,
    connect_timeout: Duration,
    read_timeout: Option<Duration>,
) -> Failure {
    let causes = causes(error);
    if causes.iter().any(|cause| is_our_timer(*cause)) {
        return if error.is_connect() {
            Failure::Timeout { timer: TimerKind::Connect, after: connect_timeout }
        } else {
            // The read backstop: no byte for that long, like the idle timer.
            Failure::Timeout { timer: TimerKind::Idle, after: read_timeout.unwrap_or_default() }
        };
    }
    let mut message = error_chain(error);
    if let Some(url) = error.url() {
        message = message.replace(url.as_str(), &redact::masked(url));
    }
    Failure::Transport { kind: transport_kind(error, &causes), message }
}

/// The error and every cause below it, including the payload of an
/// `io::Error` (whose `source` skips it: a rustls error or a tokio `Elapsed`
/// sits there).
fn causes<'a>(error: &'a (dyn std::error::Error + 'static)) -> Vec<&'a (dyn std::error::Error + 'static)> {
    let mut causes = Vec::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        causes.push(cause);
        next = match cause.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
            Some(payload) => Some(payload as &(dyn std::error::Error + 'static)),
            None => cause.source(),
        };
    }
    causes
}

/// Whether `cause` is one of reqwest's own clocks running out: its connect
/// and read timeouts end with a private `TimedOut` marker (no source, shown
/// as "operation timed out"), and hyper-util's share of the connect budget
/// with a tokio `Elapsed` inside an `io::Error`. A kernel `ETIMEDOUT` is an
/// OS error, neither of these.
fn is_our_timer(cause: &(dyn std::error::Error + 'static)) -> bool {
    cause.is::<tokio::time::error::Elapsed>()
        || (!cause.is::<std::io::Error>() && cause.source().is_none() && cause.to_string() == REQWEST_TIMED_OUT)
}

/// How reqwest's private `TimedOut` marker displays itself.
const REQWEST_TIMED_OUT: &str = "operation timed out";

/// How hyper-util's proxy errors display themselves: their types
/// (`TunnelError`, `SocksError`, reqwest's `SocksProxyError`) are not
/// exported, so their fixed text is all there is to recognise them by.
const PROXY_ERROR_PREFIXES: [&str; 4] =
    ["tunnel error: ", "SOCKS error: ", "error connecting to socks proxy", "error resolving for socks proxy"];

fn transport_kind(error: &reqwest::Error, causes: &[&(dyn std::error::Error + 'static)]) -> TransportKind {
    use std::io::ErrorKind;
    // A proxy that refuses or fails is the proxy's failure, whatever the
    // socket error under it.
    if causes.iter().any(|c| {
        let text = c.to_string();
        PROXY_ERROR_PREFIXES.iter().any(|prefix| text.starts_with(prefix))
    }) {
        return TransportKind::Proxy;
    }
    if error.is_dns() {
        return TransportKind::Dns;
    }
    if causes.iter().any(|c| c.is::<rustls::Error>()) {
        return TransportKind::Tls;
    }
    let io_kind = causes.iter().find_map(|c| c.downcast_ref::<std::io::Error>()).map(std::io::Error::kind);
    match io_kind {
        Some(ErrorKind::ConnectionRefused) => return TransportKind::Refused,
        Some(ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable) => return TransportKind::Unreachable,
        Some(ErrorKind::TimedOut) if error.is_connect() => return TransportKind::ConnectTimedOut,
        Some(ErrorKind::TimedOut) => return TransportKind::KernelTimeout,
        Some(ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe) => {
            return TransportKind::Reset;
        }
        // hyper reports a body cut short as an unexpected end of file.
        Some(ErrorKind::UnexpectedEof) => return TransportKind::Closed,
        _ => {}
    }
    if error.is_connect() {
        TransportKind::Connect
    } else if causes.iter().filter_map(|c| c.downcast_ref::<hyper::Error>()).any(hyper::Error::is_incomplete_message) {
        // The connection closed cleanly before the response was complete.
        TransportKind::Closed
    } else if error.is_body() || error.is_decode() {
        TransportKind::Read
    } else {
        TransportKind::Other
    }
}

/// The error and its sources joined with `: `, the way `{:#}` prints them.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(err) = source {
        let part = err.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = err.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::core::policy::CorePolicy;

    fn settings() -> TransportSettings {
        CorePolicy::default().transport
    }

    #[test]
    fn equal_settings_share_their_clients_and_a_stream_keeps_its_own() {
        let cache = ClientCache::new();
        let clients = cache.clients(&settings()).unwrap();
        cache.clients(&settings()).unwrap();
        assert_eq!(cache.len(), 1);
        let mut other = settings();
        other.force_ipv4 = true;
        cache.clients(&other).unwrap();
        assert_eq!(cache.len(), 2);
        let same = |a: &reqwest::Client, b: &reqwest::Client| std::ptr::eq(a, b);
        assert!(same(clients.for_stream(3), clients.for_stream(3 + CLIENT_SHARDS as u64)));
        assert!(!same(clients.for_stream(3), clients.for_stream(4)));
    }

    #[tokio::test]
    async fn error_messages_never_carry_credentials_of_the_url() {
        let client = build_client(&settings()).unwrap();
        let err = client.get("http://user:s3cret@127.0.0.1:9/v1?key=k3y").send().await.unwrap_err();
        let failure = failure_from_reqwest(&err, Duration::from_secs(1), None).to_string();
        assert!(!failure.contains("s3cret") && !failure.contains("k3y"), "{failure}");
        assert!(failure.contains("127.0.0.1:9"), "{failure}");
    }

    #[test]
    fn bad_proxy_is_an_error_not_a_panic() {
        let mut s = settings();
        s.proxy = ProxySetting::Url("http://[not-an-address".into());
        assert!(build_client(&s).is_err());
    }

    #[tokio::test]
    async fn speaks_http1_over_ipv4_and_maps_refused_connections() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, peer) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = socket.read(&mut buf).await.unwrap();
            let request = String::from_utf8_lossy(&buf[..n]).to_string();
            socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await.unwrap();
            (request, peer)
        });
        let mut s = settings();
        s.force_ipv4 = true;
        s.proxy = ProxySetting::Off;
        let client = build_client(&s).unwrap();
        let body = client.get(format!("http://{addr}/x")).send().await.unwrap().text().await.unwrap();
        assert_eq!(body, "ok");
        let (request, peer) = server.await.unwrap();
        assert!(request.starts_with("GET /x HTTP/1.1"), "{request}");
        assert!(peer.is_ipv4());

        // Nothing listens on the port any more.
        let err = client.get(format!("http://{addr}/")).send().await.unwrap_err();
        let failure = failure_from_reqwest(&err, s.connect_timeout, s.read_timeout);
        assert!(matches!(failure, Failure::Transport { kind: TransportKind::Refused, .. }), "{failure}");
    }

    /// A one-connection server on loopback: reads the request, writes
    /// `reply`, then does what `then` says with the socket.
    async fn serve_once<F, Fut>(reply: &'static [u8], then: F) -> std::net::SocketAddr
    where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = socket.read(&mut buf).await.unwrap();
            socket.write_all(reply).await.unwrap();
            then(socket).await;
        });
        addr
    }

    fn direct() -> TransportSettings {
        TransportSettings { proxy: ProxySetting::Off, ..settings() }
    }

    /// The first body error of a GET to `url` with `s`, as a failure.
    async fn body_failure(s: &TransportSettings, url: &str) -> Failure {
        use futures_util::StreamExt;
        let client = build_client(s).unwrap();
        let response = client.get(url).send().await.unwrap();
        let mut body = response.bytes_stream();
        loop {
            match body.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => return failure_from_reqwest(&e, s.connect_timeout, s.read_timeout),
                None => panic!("the body ended without an error"),
            }
        }
    }

    const STREAM_HEAD: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 100\r\n\r\ndata: x\n\n";

    /// reqwest marks its own read timeout with a private error shown as
    /// "operation timed out"; that, and only that, is the read backstop.
    #[tokio::test]
    async fn reqwests_own_read_timeout_is_the_read_backstop() {
        let addr = serve_once(STREAM_HEAD, |socket| async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(socket);
        })
        .await;
        let s = TransportSettings { read_timeout: Some(Duration::from_millis(200)), ..direct() };
        let failure = body_failure(&s, &format!("http://{addr}/")).await;
        assert!(
            matches!(failure, Failure::Timeout { timer: TimerKind::Idle, after } if after == Duration::from_millis(200)),
            "{failure}"
        );
    }

    #[tokio::test]
    async fn a_body_cut_short_by_a_clean_close_is_closed() {
        let addr = serve_once(STREAM_HEAD, |socket| async move { drop(socket) }).await;
        let failure = body_failure(&direct(), &format!("http://{addr}/")).await;
        assert!(matches!(failure, Failure::Transport { kind: TransportKind::Closed, .. }), "{failure}");
    }

    #[tokio::test]
    async fn a_reset_mid_body_is_reset() {
        let addr = serve_once(STREAM_HEAD, |socket| async move {
            // Give the client time to read the head, then close with a RST.
            tokio::time::sleep(Duration::from_millis(100)).await;
            socket2::SockRef::from(&socket).set_linger(Some(Duration::ZERO)).unwrap();
            drop(socket);
        })
        .await;
        let failure = body_failure(&direct(), &format!("http://{addr}/")).await;
        assert!(matches!(failure, Failure::Transport { kind: TransportKind::Reset, .. }), "{failure}");
    }

    #[tokio::test]
    async fn an_untrusted_certificate_is_a_tls_failure() {
        let fixture = |name: &str| {
            std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls").join(name))
                .unwrap()
        };
        let identity =
            crate::sim::TlsIdentity { cert_chain_pem: fixture("server.pem"), key_pem: fixture("server.key") };
        let server =
            crate::sim::SimServer::start_tls(crate::sim::builtin("healthy").unwrap(), 0, &identity).await.unwrap();
        let s = direct();
        let err = build_client(&s).unwrap().get(server.base_url()).send().await.unwrap_err();
        let failure = failure_from_reqwest(&err, s.connect_timeout, s.read_timeout);
        assert!(matches!(failure, Failure::Transport { kind: TransportKind::Tls, .. }), "{failure}");
        server.shutdown().await;
    }

    /// An HTTP proxy that refuses the tunnel and a SOCKS proxy that hangs
    /// up are both the proxy's failure.
    #[tokio::test]
    async fn a_refused_tunnel_and_a_broken_socks_proxy_are_proxy_failures() {
        let http_proxy = serve_once(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n", |_| async {}).await;
        let socks_proxy = serve_once(b"", |socket| async move { drop(socket) }).await;
        for proxy in [format!("http://{http_proxy}"), format!("socks5://{socks_proxy}")] {
            let s = TransportSettings { proxy: ProxySetting::Url(proxy.clone()), ..settings() };
            let err = build_client(&s).unwrap().get("https://127.0.0.1:9/").send().await.unwrap_err();
            let failure = failure_from_reqwest(&err, s.connect_timeout, s.read_timeout);
            assert!(matches!(failure, Failure::Transport { kind: TransportKind::Proxy, .. }), "{proxy}: {failure}");
        }
    }

    #[test]
    fn a_dead_peer_is_declared_after_idle_plus_every_probe() {
        let k = Keepalive { idle: Duration::from_secs(30), interval: Duration::from_secs(10), count: 3 };
        assert_eq!(k.dead_after(), Duration::from_secs(60));
    }
}
