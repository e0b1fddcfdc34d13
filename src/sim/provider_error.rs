//! What provider errors look like: the JSON error bodies of non-2xx answers
//! and the fields of in-stream error events, per dialect, worded as the real
//! services word them so classifiers see realistic text.

use http::StatusCode;

use super::scenario::StreamError;
use crate::providers::Dialect;
pub(super) use crate::providers::ending::quote;
use crate::providers::ending::{anthropic_error, chat_error, openai_error_object};

/// One error as both vendors would describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ProviderError {
    /// OpenAI `error.type`.
    pub openai_type: &'static str,
    /// OpenAI `error.code` (`null` when absent).
    pub openai_code: Option<&'static str>,
    /// OpenAI `error.param` (`null` when absent).
    pub openai_param: Option<&'static str>,
    /// OpenAI `error.message`.
    pub openai_message: String,
    /// Anthropic `error.type`.
    pub anthropic_type: &'static str,
    /// Anthropic `error.message`.
    pub anthropic_message: String,
}

const OPENAI_OVERLOADED: &str = "That model is currently overloaded with other requests. You can retry your request, \
     or contact us through our help center at help.openai.com if the error persists.";
const OPENAI_SERVER_ERROR: &str = "The server had an error while processing your request. Sorry about that!";
const ANTHROPIC_RATE_LIMIT: &str = "Number of request tokens has exceeded your per-minute rate limit \
     (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. \
     Please reduce the prompt length or the maximum tokens requested, or try again later.";

impl ProviderError {
    /// The error a provider answers with for `status` when asked for `model`.
    pub fn for_status(status: StatusCode, model: &str) -> ProviderError {
        let reason = status.canonical_reason().unwrap_or("Error").to_owned();
        let (openai_type, openai_code, openai_param, openai_message) = match status.as_u16() {
            400 => (
                "invalid_request_error",
                Some("context_length_exceeded"),
                Some("messages"),
                "This model's maximum context length is 128000 tokens. However, your messages resulted in \
                 131072 tokens. Please reduce the length of the messages."
                    .to_owned(),
            ),
            401 => (
                "invalid_request_error",
                Some("invalid_api_key"),
                None,
                "Incorrect API key provided: sk-sim-****. You can find your API key at \
                 https://platform.openai.com/account/api-keys."
                    .to_owned(),
            ),
            404 => (
                "invalid_request_error",
                Some("model_not_found"),
                Some("model"),
                format!("The model `{model}` does not exist or you do not have access to it."),
            ),
            429 => (
                "requests",
                Some("rate_limit_exceeded"),
                None,
                format!(
                    "Rate limit reached for {model} in organization org-sim on requests per min (RPM): Limit 500, \
                     Used 500, Requested 1. Please try again later."
                ),
            ),
            500 => ("server_error", None, None, OPENAI_SERVER_ERROR.to_owned()),
            502 => ("server_error", None, None, "Bad gateway.".to_owned()),
            503 | 529 => ("server_error", None, None, OPENAI_OVERLOADED.to_owned()),
            _ if status.is_server_error() => ("server_error", None, None, reason.clone()),
            _ => ("invalid_request_error", None, None, reason.clone()),
        };
        let (anthropic_type, anthropic_message) = match status.as_u16() {
            400 => ("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum".to_owned()),
            401 => ("authentication_error", "invalid x-api-key".to_owned()),
            403 => {
                ("permission_error", "Your API key does not have permission to use the specified resource.".to_owned())
            }
            404 => ("not_found_error", format!("model: {model}")),
            413 => ("request_too_large", "Request exceeds the maximum allowed number of bytes.".to_owned()),
            429 => ("rate_limit_error", ANTHROPIC_RATE_LIMIT.to_owned()),
            500 => ("api_error", "Internal server error".to_owned()),
            503 | 529 => ("overloaded_error", "Overloaded".to_owned()),
            _ if status.is_server_error() => ("api_error", reason),
            _ => ("invalid_request_error", reason),
        };
        ProviderError { openai_type, openai_code, openai_param, openai_message, anthropic_type, anthropic_message }
    }

    /// The error an in-stream error event of `kind` carries, with `message`
    /// replacing the default wording when given.
    pub fn for_stream(kind: StreamError, message: Option<&str>) -> ProviderError {
        let mut error = match kind {
            StreamError::Overloaded => ProviderError {
                openai_type: "server_error",
                openai_code: None,
                openai_param: None,
                openai_message: OPENAI_OVERLOADED.to_owned(),
                anthropic_type: "overloaded_error",
                anthropic_message: "Overloaded".to_owned(),
            },
            StreamError::ServerError => ProviderError {
                openai_type: "server_error",
                openai_code: None,
                openai_param: None,
                openai_message: OPENAI_SERVER_ERROR.to_owned(),
                anthropic_type: "api_error",
                anthropic_message: "Internal server error".to_owned(),
            },
            StreamError::RateLimit => ProviderError {
                openai_type: "requests",
                openai_code: Some("rate_limit_exceeded"),
                openai_param: None,
                openai_message: "Rate limit reached for requests. Please try again later.".to_owned(),
                anthropic_type: "rate_limit_error",
                anthropic_message: ANTHROPIC_RATE_LIMIT.to_owned(),
            },
        };
        if let Some(message) = message {
            message.clone_into(&mut error.openai_message);
            message.clone_into(&mut error.anthropic_message);
        }
        error
    }

    /// The Responses API `code`: OpenAI's code, else its type.
    pub fn responses_code(&self) -> &'static str {
        self.openai_code.unwrap_or(self.openai_type)
    }

    /// The JSON error body of a non-2xx answer in `dialect` (also the
    /// payload of a chat completions in-stream error).
    pub fn body(&self, dialect: Dialect) -> String {
        match dialect {
            Dialect::OpenAiChat | Dialect::OpenAiResponses => chat_error(&openai_error_object(
                &self.openai_message,
                self.openai_type,
                self.openai_param,
                self.openai_code,
            )),
            Dialect::AnthropicMessages => self.anthropic_event(),
        }
    }

    /// Anthropic's error object, the same in a body and in an `error` event.
    pub fn anthropic_event(&self) -> String {
        anthropic_error(self.anthropic_type, &self.anthropic_message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_match_the_vendors() {
        let error = ProviderError::for_status(StatusCode::from_u16(529).unwrap(), "m");
        assert_eq!(
            error.body(Dialect::AnthropicMessages),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        );
        let error = ProviderError::for_status(StatusCode::TOO_MANY_REQUESTS, "gpt-x");
        let body: serde_json::Value = serde_json::from_str(&error.body(Dialect::OpenAiChat)).unwrap();
        assert_eq!(body["error"]["type"], "requests");
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
        assert_eq!(body["error"]["param"], serde_json::Value::Null);
        assert!(body["error"]["message"].as_str().unwrap().contains("gpt-x"));
        let error = ProviderError::for_status(StatusCode::INTERNAL_SERVER_ERROR, "m");
        assert_eq!(
            error.body(Dialect::OpenAiResponses),
            r#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#
        );
        let overflow = ProviderError::for_status(StatusCode::BAD_REQUEST, "m");
        assert!(overflow.body(Dialect::OpenAiChat).contains(r#""code":"context_length_exceeded""#));
        assert!(overflow.body(Dialect::AnthropicMessages).contains("prompt is too long"));
        let auth = ProviderError::for_status(StatusCode::UNAUTHORIZED, "m");
        assert!(auth.body(Dialect::OpenAiChat).contains("invalid_api_key"));
        assert!(auth.body(Dialect::AnthropicMessages).contains("authentication_error"));
        let teapot = ProviderError::for_status(StatusCode::IM_A_TEAPOT, "m");
        assert!(
            teapot.body(Dialect::AnthropicMessages).contains(r#""invalid_request_error","message":"I'm a teapot""#)
        );
    }

    #[test]
    fn stream_errors_take_a_custom_message() {
        let error = ProviderError::for_stream(StreamError::Overloaded, Some("say \"hi\""));
        assert_eq!(
            error.anthropic_event(),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"say \"hi\""}}"#
        );
        assert_eq!(ProviderError::for_stream(StreamError::RateLimit, None).responses_code(), "rate_limit_exceeded");
        assert_eq!(ProviderError::for_stream(StreamError::ServerError, None).responses_code(), "server_error");
    }
}
