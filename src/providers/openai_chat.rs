//! The OpenAI chat completions streaming dialect (`stream: true`):
//! `data: {chunk}` events, `data: [DONE]`, an optional usage chunk, and
//! `{"error": …}` objects in the stream.

use serde::Deserialize;
use serde_json::json;

use super::fast_json::{Scanner, Seen};
use super::shape::Layout;
use super::{Dialect, DialectState, ErrorObject, payload};
use crate::core::event::EventClass;
use crate::core::upstream::{CallInput, Decoded};

/// The request body.
pub(super) fn body(model: &str, input: &CallInput) -> serde_json::Value {
    json!({
        "model": model,
        "messages": [{ "role": "user", "content": input.prompt }],
        "stream": true,
        "stream_options": { "include_usage": true },
    })
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Chunk<'a> {
    /// The request asks for one choice; a server sending more gets the
    /// first one read (and no allocation per event for the list).
    #[serde(default, borrow, deserialize_with = "first_choice")]
    choices: Option<Choice<'a>>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<std::borrow::Cow<'a, str>>,
}

/// Reads the first element of `choices` and skips the rest.
fn first_choice<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Choice<'de>>, D::Error> {
    struct First;
    impl<'de> serde::de::Visitor<'de> for First {
        type Value = Option<Choice<'de>>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list of choices")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let first = seq.next_element::<Choice<'de>>()?;
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(first)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    deserializer.deserialize_any(First)
}

#[derive(Debug, PartialEq, Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
    /// DeepSeek, vLLM and others stream reasoning here.
    #[serde(default, borrow)]
    reasoning_content: Option<std::borrow::Cow<'a, str>>,
    /// OpenRouter and others use this name.
    #[serde(default, borrow)]
    reasoning: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct ToolCall {
    #[serde(default)]
    function: Option<ToolFunction>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct ToolFunction {
    #[serde(default)]
    arguments: Option<String>,
}

/// Maps one event's data to what it means (chat events carry no name),
/// noting the layout of a payload the fast path reads.
pub(super) fn decode(data: &str, state: &mut DialectState, layout: &mut Layout, out: &mut Vec<Decoded>) {
    if data.trim() == "[DONE]" {
        state.done = true;
        return out.push(Decoded::Done);
    }
    let fast = scan_from(Scanner::noting(data, layout));
    let chunk = match fast.map_or_else(|| payload(Dialect::OpenAiChat, "message", data), Ok) {
        Ok(chunk) => chunk,
        Err(malformed) => return out.push(malformed),
    };
    if let Some(error) = chunk.error {
        return out.push(error.into_decoded());
    }
    let mut emitted = false;
    if let Some(choice) = chunk.choices {
        if let Some(delta) = choice.delta {
            let reasoning = delta.reasoning_content.or(delta.reasoning).filter(|r| !r.is_empty());
            if let Some(text) = reasoning {
                out.push(Decoded::Event { class: EventClass::Reasoning, text: text.into_owned().into() });
                emitted = true;
            }
            if let Some(text) = delta.content.filter(|c| !c.is_empty()) {
                out.push(Decoded::Event { class: EventClass::Content, text: text.into_owned().into() });
                emitted = true;
            }
            for call in delta.tool_calls.unwrap_or_default() {
                let text = call.function.and_then(|f| f.arguments).unwrap_or_default();
                out.push(Decoded::Event { class: EventClass::ToolCall, text: text.into() });
                emitted = true;
            }
        }
        if let Some(reason) = choice.finish_reason {
            state.stop_reason_seen = true;
            out.push(Decoded::StopReason(reason.into_owned()));
        }
    }
    if !emitted {
        // Role announcements, finish and usage chunks.
        out.push(Decoded::Event { class: EventClass::Lifecycle, text: "".into() });
    }
}

/// [`scan_from`] on a fresh scanner (the fast path alone, for tests).
#[cfg(test)]
pub(super) fn scan(data: &str) -> Option<Chunk<'_>> {
    scan_from(Scanner::new(data))
}

/// The fast read of a chunk (see `fast_json`): text deltas, role, finish
/// and usage chunks. Tool calls and error objects are left to serde.
fn scan_from<'a>(mut scanner: Scanner<'a, '_>) -> Option<Chunk<'a>> {
    let (mut chunk, mut seen) = (Chunk { choices: None, error: None }, Seen::default());
    scanner.object(|s, key| match key {
        "choices" => {
            seen.first(0)?;
            chunk.choices = s.first_of(scan_choice)?;
            Some(())
        }
        "error" => {
            seen.first(1)?;
            s.null()
        }
        _ => s.skip(),
    })?;
    scanner.end()?;
    Some(chunk)
}

fn scan_choice<'a>(scanner: &mut Scanner<'a, '_>) -> Option<Choice<'a>> {
    let (mut choice, mut seen) = (Choice { delta: None, finish_reason: None }, Seen::default());
    scanner.object(|s, key| match key {
        "delta" => {
            seen.first(0)?;
            choice.delta = s.nullable(scan_delta)?;
            Some(())
        }
        "finish_reason" => {
            seen.first(1)?;
            choice.finish_reason = s.optional_text()?;
            Some(())
        }
        _ => s.skip(),
    })?;
    Some(choice)
}

fn scan_delta<'a>(scanner: &mut Scanner<'a, '_>) -> Option<Delta<'a>> {
    let mut delta = Delta { content: None, reasoning_content: None, reasoning: None, tool_calls: None };
    let mut seen = Seen::default();
    scanner.object(|s, key| {
        let field = match key {
            "content" => (0, &mut delta.content),
            "reasoning_content" => (1, &mut delta.reasoning_content),
            "reasoning" => (2, &mut delta.reasoning),
            "tool_calls" => {
                seen.first(3)?;
                return s.null();
            }
            _ => return s.skip(),
        };
        seen.first(field.0)?;
        *field.1 = s.optional_output()?;
        Some(())
    })?;
    Some(delta)
}

/// Some servers end with a finish reason and close without `[DONE]`.
pub(super) fn finish(state: &DialectState, out: &mut Vec<Decoded>) {
    if state.stop_reason_seen && !state.done {
        out.push(Decoded::Done);
    }
}
