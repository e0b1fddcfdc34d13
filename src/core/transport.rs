//! The HTTP transport: one shared reqwest client per transport
//! configuration, built with the timeouts, keepalive, IP family, protocol
//! and proxy the tunables ask for, and the mapping of client errors to
//! attempt failures.
//!
//! The transport never retries: every attempt is the executor's decision.

use std::collections::HashMap;
use std::error::Error as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use super::category::TimerKind;
use super::failure::{Failure, TransportKind};
use super::redact;

/// TCP keepalive probe timing (seed 001: 30/10/3 → a dead peer is noticed
/// in about a minute).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Keepalive {
    /// Idle time before the first probe.
    pub idle: Duration,
    /// Time between probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dead.
    pub count: u32,
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
    /// Keepalive probes; `None` = off.
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
        .redirect(reqwest::redirect::Policy::none());
    if let Some(read) = settings.read_timeout {
        builder = builder.read_timeout(read);
    }
    builder = match settings.keepalive {
        Some(k) => builder.tcp_keepalive(k.idle).tcp_keepalive_interval(k.interval).tcp_keepalive_retries(k.count),
        None => builder.tcp_keepalive(None),
    };
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

/// Clients shared by every call of a process, one per settings value.
#[derive(Debug, Default)]
pub struct ClientCache {
    clients: Mutex<HashMap<TransportSettings, reqwest::Client>>,
}

impl ClientCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The shared client for `settings`, built on first use.
    pub fn client(&self, settings: &TransportSettings) -> Result<reqwest::Client, TransportError> {
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| TransportError { message: "client cache poisoned by an earlier panic".to_owned() })?;
        if let Some(client) = clients.get(settings) {
            return Ok(client.clone());
        }
        let client = build_client(settings)?;
        clients.insert(settings.clone(), client.clone());
        Ok(client)
    }

    /// How many distinct clients have been built.
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
pub fn failure_from_reqwest(
    error: &reqwest::Error,
    connect_timeout: Duration,
    read_timeout: Option<Duration>,
) -> Failure {
    let mut message = error_chain(error);
    if let Some(url) = error.url() {
        message = message.replace(url.as_str(), &redact::masked(url));
    }
    if error.is_timeout() {
        return if error.is_connect() {
            Failure::Timeout { timer: TimerKind::Connect, after: connect_timeout }
        } else {
            // The read backstop: no byte for that long, like the idle timer.
            Failure::Timeout { timer: TimerKind::Idle, after: read_timeout.unwrap_or_default() }
        };
    }
    let kind = if error.is_connect() {
        TransportKind::Connect
    } else if io_kind(error).is_some_and(|k| {
        matches!(
            k,
            std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe
        )
    }) || message.contains("reset")
    {
        TransportKind::Reset
    } else if io_kind(error) == Some(std::io::ErrorKind::UnexpectedEof) || message.contains("EOF") {
        // hyper reports a body cut short as an unexpected end of file.
        TransportKind::Closed
    } else if error.is_body() || error.is_decode() {
        TransportKind::Read
    } else {
        TransportKind::Other
    };
    Failure::Transport { kind, message }
}

fn io_kind(error: &reqwest::Error) -> Option<std::io::ErrorKind> {
    let mut source = error.source();
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = err.source();
    }
    None
}

/// The error and its sources joined with `: `, the way `{:#}` prints them.
fn error_chain(error: &dyn std::error::Error) -> String {
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
    fn equal_settings_share_one_client() {
        let cache = ClientCache::new();
        cache.client(&settings()).unwrap();
        cache.client(&settings()).unwrap();
        assert_eq!(cache.len(), 1);
        let mut other = settings();
        other.force_ipv4 = true;
        cache.client(&other).unwrap();
        assert_eq!(cache.len(), 2);
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
        assert!(matches!(failure, Failure::Transport { kind: TransportKind::Connect, .. }), "{failure}");
    }
}
