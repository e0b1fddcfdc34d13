//! The Anthropic Messages streaming dialect: `message_start`,
//! `content_block_*`, `ping`, `message_delta`, `message_stop`, and in-stream
//! `error` events such as `overloaded_error`.

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
    json!({
        "model": model,
        "max_tokens": 4096,
        "messages": [{ "role": "user", "content": input.prompt }],
        "stream": true,
    })
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Payload<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default)]
    stop_reason: Option<String>,
}

/// Maps one event to what it means, noting the layout of a payload the
/// fast path reads.
pub(super) fn decode(event: &str, data: &str, layout: &mut Layout, out: &mut Vec<Decoded>) {
    let fast = scan_from(Scanner::noting(data, layout));
    let payload = match fast.map_or_else(|| payload(Dialect::AnthropicMessages, event, data), Ok) {
        Ok(payload) => payload,
        Err(malformed) => return out.push(malformed),
    };
    let kind = if payload.kind.is_empty() { event } else { payload.kind.as_ref() };
    match kind {
        "ping" => out.push(Decoded::Event { class: EventClass::Keepalive, text: "".into() }),
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
            out.push(Decoded::Event { class, text: text.map(|t| t.into_owned().into()).unwrap_or_default() });
        }
        "message_delta" => {
            if let Some(reason) = payload.delta.and_then(|d| d.stop_reason) {
                out.push(Decoded::StopReason(reason));
            }
            out.push(Decoded::Event { class: EventClass::Lifecycle, text: "".into() });
        }
        "message_stop" => out.push(Decoded::Done),
        "error" => out.push(payload.error.unwrap_or_default().into_decoded()),
        _ => out.push(Decoded::Event { class: EventClass::Lifecycle, text: "".into() }),
    }
}

/// [`scan_from`] on a fresh scanner (the fast path alone, for tests).
#[cfg(test)]
pub(super) fn scan(data: &str) -> Option<Payload<'_>> {
    scan_from(Scanner::new(data))
}

/// The fast read of an event (see `fast_json`): everything but in-stream
/// errors, which are left to serde.
fn scan_from<'a>(mut scanner: Scanner<'a, '_>) -> Option<Payload<'a>> {
    let (mut payload, mut seen) = (Payload { kind: Cow::Borrowed(""), delta: None, error: None }, Seen::default());
    scanner.object(|s, key| match key {
        "type" => {
            seen.first(0)?;
            payload.kind = s.text()?;
            Some(())
        }
        "delta" => {
            seen.first(1)?;
            payload.delta = s.nullable(scan_delta)?;
            Some(())
        }
        "error" => {
            seen.first(2)?;
            s.null()
        }
        _ => s.skip(),
    })?;
    scanner.end()?;
    Some(payload)
}

fn scan_delta<'a>(scanner: &mut Scanner<'a, '_>) -> Option<Delta<'a>> {
    let mut delta =
        Delta { kind: Cow::Borrowed(""), text: None, thinking: None, partial_json: None, stop_reason: None };
    let mut seen = Seen::default();
    scanner.object(|s, key| {
        let (bit, field) = match key {
            "type" => {
                seen.first(0)?;
                delta.kind = s.text()?;
                return Some(());
            }
            "stop_reason" => {
                seen.first(1)?;
                delta.stop_reason = s.optional_text()?.map(Cow::into_owned);
                return Some(());
            }
            "text" => (2, &mut delta.text),
            "thinking" => (3, &mut delta.thinking),
            "partial_json" => (4, &mut delta.partial_json),
            _ => return s.skip(),
        };
        seen.first(bit)?;
        *field = s.optional_output()?;
        Some(())
    })?;
    Some(delta)
}
