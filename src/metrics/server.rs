//! `/metrics` over HTTP/1.1 (hyper), for a Prometheus server to scrape.
//! Every other path is 404; every method but GET and HEAD is 405.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{ALLOW, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use super::Metrics;

/// The metrics server could not listen.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve /metrics on {addr}: {source}; choose another address (--metrics-addr HOST:PORT)")]
pub struct ServeError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// Why.
    pub source: std::io::Error,
}

/// A running `/metrics` server; stops when shut down or dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0 picks a free one) and serves `metrics`.
    pub async fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<MetricsServer, ServeError> {
        let listener = TcpListener::bind(addr).await.map_err(|source| ServeError { addr, source })?;
        let bound = listener.local_addr().map_err(|source| ServeError { addr, source })?;
        let accept = tokio::spawn(accept_loop(listener, metrics));
        Ok(MetricsServer { addr: bound, accept })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening and drops every connection.
    pub async fn shutdown(mut self) {
        self.accept.abort();
        // Cancellation is the expected outcome; the loop has no other result.
        let _ = (&mut self.accept).await;
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, metrics: Arc<Metrics>) {
    // Dropped with this task, which aborts every connection still open.
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors, most likely: rest rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let metrics = Arc::clone(&metrics);
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let metrics = Arc::clone(&metrics);
                async move { Ok::<_, Infallible>(answer(&request, &metrics)) }
            });
            // A scraper that hangs up mid-answer is not our failure.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn answer(request: &Request<Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
    };
    if request.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "only /metrics is served here\n".to_owned());
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = reply(StatusCode::METHOD_NOT_ALLOWED, String::new());
        response.headers_mut().insert(ALLOW, http::HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let mut response = reply(StatusCode::OK, metrics.encode());
    response.headers_mut().insert(CONTENT_TYPE, http::HeaderValue::from_static(super::CONTENT_TYPE));
    response
}
