//! The Anthropic Messages streaming dialect: `message_start`,
//! `content_block_*`, `ping`, `message_delta`, `message_stop`, and in-stream
//! `error` events such as `overloaded_error`.

use serde::Deserialize;
use serde_json::json;

use super::{Dialect, ErrorObject, payload};
use crate::core::event::EventClass;
use crate::core::upstream::{CallInput, Decoded};

/// The request body.
pub(super) fn body(model: &str, input: &CallInput) -> serde_json::Value {
    json!({
        "model": model,
        "max_tokens": 4096,
        "messages": [{ "role": "user", "content": input.prompt }],
        "stream": true,
    })
}

#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    text: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    stop_reason: Option<String>,
}

/// Maps one event to what it means.
pub(super) fn decode(event: &str, data: &str, out: &mut Vec<Decoded>) {
    let payload: Payload<'_> = match payload(Dialect::AnthropicMessages, event, data) {
        Ok(payload) => payload,
        Err(malformed) => return out.push(malformed),
    };
    let kind = if payload.kind.is_empty() { event } else { payload.kind.as_ref() };
    match kind {
        "ping" => out.push(Decoded::Event { class: EventClass::Keepalive, text: String::new() }),
        "content_block_delta" => {
            let Some(delta) = payload.delta else {
                return out.push(Decoded::Malformed("content_block_delta without a delta".to_owned()));
            };
            let (class, text) = match delta.kind.as_ref() {
                "text_delta" => (EventClass::Content, delta.text),
                "thinking_delta" => (EventClass::Reasoning, delta.thinking),
                "input_json_delta" => (EventClass::ToolCall, delta.partial_json),
                // signature_delta and future kinds carry no output.
                _ => (EventClass::Lifecycle, None),
            };
            out.push(Decoded::Event { class, text: text.map(|t| t.into_owned()).unwrap_or_default() });
        }
        "message_delta" => {
            if let Some(reason) = payload.delta.and_then(|d| d.stop_reason) {
                out.push(Decoded::StopReason(reason));
            }
            out.push(Decoded::Event { class: EventClass::Lifecycle, text: String::new() });
        }
        "message_stop" => out.push(Decoded::Done),
        "error" => out.push(payload.error.unwrap_or_default().into_decoded()),
        _ => out.push(Decoded::Event { class: EventClass::Lifecycle, text: String::new() }),
    }
}
