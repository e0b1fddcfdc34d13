//! The answers the proxy gives itself, when no upstream answer can reach
//! the agent: a path no route takes, a request refused by a limit, an
//! upgrade, an upstream that could not be reached, observe stopping. One
//! shape per dialect: a request of a dialect gets its error body as that
//! dialect's SDKs read one (OpenAI's `{"error": {…}}`, Anthropic's
//! `{"type": "error", …}`), so the SDK raises its own error type with our
//! message; any other request gets the message as text. A refusal the
//! agent may retry says when (`Retry-After`), and the SDKs' own retries
//! honour it.

use bytes::Bytes;
use http::HeaderValue;
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};

use crate::providers::Dialect;
use crate::providers::ending::{anthropic_error, chat_error, openai_error_object};

/// The body of any response to the agent.
pub(super) type ResponseBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// An answer of the proxy's own.
#[derive(Debug, Clone)]
pub(super) struct OwnAnswer {
    /// Its status.
    pub status: u16,
    /// What it says, starting `stallscope observe:` or `stallscope guard:`.
    pub message: String,
    /// Seconds the agent should wait before it tries again, when it may.
    pub retry_after: Option<u64>,
    /// The connection closes after it.
    pub close: bool,
}

impl OwnAnswer {
    /// `status` saying `message`.
    pub fn new(status: u16, message: impl Into<String>) -> OwnAnswer {
        OwnAnswer { status, message: message.into(), retry_after: None, close: false }
    }

    /// The agent may try again after `seconds`.
    pub fn retry_after(self, seconds: u64) -> OwnAnswer {
        OwnAnswer { retry_after: Some(seconds), ..self }
    }

    /// The connection closes after it.
    pub fn closing(self) -> OwnAnswer {
        OwnAnswer { close: true, ..self }
    }

    /// Its head and body for a request of `dialect` (`None`: of none).
    pub fn parts(&self, dialect: Option<Dialect>) -> (http::HeaderMap, Vec<u8>) {
        let mut headers = http::HeaderMap::new();
        let (content_type, body) = match dialect {
            Some(dialect) => ("application/json", error_body(dialect, self.status, &self.message).into_bytes()),
            None => ("text/plain; charset=utf-8", format!("{}\n", self.message).into_bytes()),
        };
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(http::header::CONTENT_LENGTH, body.len().into());
        if let Some(seconds) = self.retry_after {
            headers.insert(http::header::RETRY_AFTER, seconds.into());
        }
        if self.close {
            headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        (headers, body)
    }

    /// The response for a request of `dialect`.
    pub fn response(&self, dialect: Option<Dialect>) -> hyper::Response<ResponseBody> {
        let (headers, body) = self.parts(dialect);
        let mut response =
            hyper::Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync());
        *response.status_mut() = http::StatusCode::from_u16(self.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
        *response.headers_mut() = headers;
        response
    }
}

/// The error body of `dialect` for `status`, saying `message`, of the
/// error type its API gives that status.
pub(super) fn error_body(dialect: Dialect, status: u16, message: &str) -> String {
    match dialect {
        Dialect::OpenAiChat | Dialect::OpenAiResponses => {
            let kind = match status {
                400..=499 => "invalid_request_error",
                _ => "server_error",
            };
            chat_error(&openai_error_object(message, kind, None, None))
        }
        Dialect::AnthropicMessages => {
            let kind = match status {
                408 => "timeout_error",
                413 => "request_too_large",
                400..=499 => "invalid_request_error",
                503 | 529 => "overloaded_error",
                _ => "api_error",
            };
            anthropic_error(kind, message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_gets_its_own_error_shape_and_a_retry_is_timed() {
        let busy = OwnAnswer::new(503, "stallscope observe: 2048 requests in flight").retry_after(1);
        let (headers, body) = busy.parts(Some(Dialect::AnthropicMessages));
        let said: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(said["type"], "error");
        assert_eq!(said["error"]["type"], "overloaded_error");
        assert_eq!(headers["retry-after"], "1");
        let (_, body) = OwnAnswer::new(413, "too large").parts(Some(Dialect::OpenAiResponses));
        let said: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(said["error"]["type"], "invalid_request_error");
        assert_eq!(said["error"]["message"], "too large");
        let (headers, body) = OwnAnswer::new(404, "no route").closing().parts(None);
        assert_eq!(
            (headers["content-type"].to_str().unwrap(), body.as_slice()),
            ("text/plain; charset=utf-8", &b"no route\n"[..])
        );
        assert_eq!(headers["connection"], "close");
    }
}
