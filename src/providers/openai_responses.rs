//! The OpenAI Responses streaming dialect: named events such as
//! `response.output_text.delta`, ending in `response.completed`,
//! `response.incomplete` or `response.failed`; `error` events in the stream.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::json;

use super::fast_json::{Scanner, Seen};
use super::shape::Layout;
use super::{Dialect, ErrorObject, payload};
use crate::core::event::EventClass;
use crate::core::upstream::{CallInput, Decoded};

/// The request body.
pub(super) fn body(model: &str, input: &CallInput) -> serde_json::Value {
    json!({ "model": model, "input": input.prompt, "stream": true })
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Payload<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    response: Option<ResponseObject>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
    /// The API nests an `error` event's fields here.
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct ResponseObject {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    error: Option<ErrorObject>,
    #[serde(default)]
    incomplete_details: Option<Incomplete>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct Incomplete {
    #[serde(default)]
    reason: Option<String>,
}

/// Maps one event to what it means, noting the layout of a payload the
/// fast path reads.
pub(super) fn decode(event: &str, data: &str, layout: &mut Layout, out: &mut Vec<Decoded>) {
    let fast = scan_from(Scanner::noting(data, layout));
    let payload = match fast.map_or_else(|| payload(Dialect::OpenAiResponses, event, data), Ok) {
        Ok(payload) => payload,
        Err(malformed) => return out.push(malformed),
    };
    // The JSON `type` is authoritative; the SSE event name is its copy.
    let kind = if payload.kind.is_empty() { event } else { payload.kind.as_ref() };
    let delta = |class| Decoded::Event { class, text: payload.delta.as_deref().unwrap_or("").to_owned().into() };
    match kind {
        "response.output_text.delta" | "response.refusal.delta" => out.push(delta(EventClass::Content)),
        "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
            out.push(delta(EventClass::Reasoning));
        }
        "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
            out.push(delta(EventClass::ToolCall));
        }
        "response.completed" | "response.incomplete" => {
            let response = payload.response;
            let reason = response
                .as_ref()
                .and_then(|r| r.incomplete_details.as_ref().and_then(|d| d.reason.clone()).or_else(|| r.status.clone()))
                .unwrap_or_else(|| "completed".to_owned());
            out.push(Decoded::StopReason(reason));
            out.push(Decoded::Done);
        }
        "response.failed" => {
            let error = payload.response.and_then(|r| r.error).unwrap_or_default();
            out.push(error.into_decoded());
        }
        "error" => out.push(match payload.error {
            Some(error) => error.into_decoded(),
            None => Decoded::Error {
                code: payload.code,
                message: payload.message.unwrap_or_else(|| "error event without a message".to_owned()),
            },
        }),
        _ => out.push(Decoded::Event { class: EventClass::Lifecycle, text: "".into() }),
    }
}

/// [`scan_from`] on a fresh scanner (the fast path alone, for tests).
#[cfg(test)]
pub(super) fn scan(data: &str) -> Option<Payload<'_>> {
    scan_from(Scanner::new(data))
}

/// The fast read of an event (see `fast_json`): deltas and the other events
/// without a `response` object or nested error, which are left to serde.
fn scan_from<'a>(mut scanner: Scanner<'a, '_>) -> Option<Payload<'a>> {
    let mut payload =
        Payload { kind: Cow::Borrowed(""), delta: None, response: None, code: None, message: None, error: None };
    let mut seen = Seen::default();
    scanner.object(|s, key| {
        let (bit, field) = match key {
            "type" => {
                seen.first(0)?;
                payload.kind = s.text()?;
                return Some(());
            }
            "delta" => {
                seen.first(1)?;
                payload.delta = s.optional_output()?;
                return Some(());
            }
            "response" | "error" => {
                seen.first(if key == "response" { 2 } else { 3 })?;
                return s.null();
            }
            "code" => (4, &mut payload.code),
            "message" => (5, &mut payload.message),
            _ => return s.skip(),
        };
        seen.first(bit)?;
        *field = s.optional_text()?.map(Cow::into_owned);
        Some(())
    })?;
    scanner.end()?;
    Some(payload)
}
