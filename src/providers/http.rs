//! An upstream over HTTP: one provider endpoint speaking one dialect, using
//! the shared clients for its transport settings (each stream's own).

use futures_util::future::BoxFuture;
use futures_util::{StreamExt, TryStreamExt};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::Dialect;
use crate::core::failure::Failure;
use crate::core::transport::{Clients, TransportSettings, failure_from_reqwest};
use crate::core::upstream::{AttemptRequest, Chunk, Decoder, Response, Upstream};

/// The Anthropic API version sent with every Messages request.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A provider endpoint.
pub struct HttpUpstream {
    dialect: Dialect,
    base_url: String,
    clients: Clients,
    extra_headers: HeaderMap,
    transport: TransportSettings,
}

impl std::fmt::Debug for HttpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpUpstream")
            .field("dialect", &self.dialect)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl HttpUpstream {
    /// An endpoint at `base_url` (the SDK convention of `dialect`) using
    /// `clients`, which were built for `transport`.
    pub fn new(
        dialect: Dialect,
        base_url: impl Into<String>,
        clients: Clients,
        extra_headers: HeaderMap,
        transport: TransportSettings,
    ) -> Self {
        HttpUpstream { dialect, base_url: base_url.into(), clients, extra_headers, transport }
    }
}

impl Upstream for HttpUpstream {
    fn open<'a>(&'a self, request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
        Box::pin(async move {
            let mut builder = self
                .clients
                .for_stream(request.stream)
                .post(self.dialect.url(&self.base_url))
                .header(http::header::ACCEPT, "text/event-stream")
                .header(HeaderName::from_static("x-stallscope-stream"), request.stream)
                .headers(self.extra_headers.clone())
                .json(&self.dialect.body(&request.target.model, request.input));
            builder = with_key(builder, self.dialect, request.credential.map(|c| c.secret.expose()));
            let (connect, read) = (self.transport.connect_timeout, self.transport.read_timeout);
            let response = builder.send().await.map_err(|e| failure_from_reqwest(&e, connect, read))?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response
                .bytes_stream()
                .map_ok(Chunk::from)
                .map_err(move |e| failure_from_reqwest(&e, connect, read))
                .boxed();
            Ok(Response::new(status, headers, body))
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(self.dialect.decoder())
    }
}

/// `builder` with `key` where `dialect` takes it (Anthropic's `x-api-key`
/// and its API version, OpenAI's bearer token); without a key, what the
/// dialect needs anyway.
pub fn with_key(builder: reqwest::RequestBuilder, dialect: Dialect, key: Option<&str>) -> reqwest::RequestBuilder {
    match (dialect, key) {
        (Dialect::AnthropicMessages, Some(key)) => builder
            .header(HeaderName::from_static("x-api-key"), sensitive(key))
            .header(HeaderName::from_static("anthropic-version"), ANTHROPIC_VERSION),
        (Dialect::AnthropicMessages, None) => {
            builder.header(HeaderName::from_static("anthropic-version"), ANTHROPIC_VERSION)
        }
        (Dialect::OpenAiChat | Dialect::OpenAiResponses, Some(key)) => {
            builder.header(http::header::AUTHORIZATION, sensitive(&format!("Bearer {key}")))
        }
        (Dialect::OpenAiChat | Dialect::OpenAiResponses, None) => builder,
    }
}

/// A header value marked sensitive so it is never printed by `Debug`.
fn sensitive(text: &str) -> HeaderValue {
    // Keys come from the environment; one that is not a valid header value
    // is sent empty and refused by the server as an auth failure.
    let mut value = HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}
