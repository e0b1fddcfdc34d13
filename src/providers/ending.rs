//! How a stream the guard cuts after content ends, in its dialect's own
//! terms, so the agent's SDK takes the end as its provider's.
//!
//! Once text has reached the agent a stall is never retried (the agent
//! would see it twice); the guard ends the agent's stream instead, as
//! [`AfterContent`] says (`GUARD_AFTER_CONTENT`). An [`EndingState`] is fed
//! each event the guard forwards and keeps what the ending must repeat or
//! close: the chat completion's `id`, `created` and `model`; Anthropic's
//! open content block and last output-token count; the Responses
//! `response` id, `created_at` and `model`, the next `sequence_number`, the
//! finished output items and the one being streamed. The ending is whole
//! SSE events, so the guard must have forwarded whole events before it.
//!
//! What each agent then sees (openai-python 3.51, anthropic 2.10,
//! openai-node 7.55, read in their sources and run by `tests/endings.rs`):
//!
//! - `error` (the default): every SDK yields the partial text, then raises.
//!   Chat sends `data: {"error":{…"type":"server_error"…}}`: openai-python
//!   raises `openai.APIError` (not an `APIStatusError`: no status goes
//!   with it), openai-node `APIError`. Responses sends `event: error` with
//!   the error nested under `error` as the live API does, the flat `code`,
//!   `message` and `param` the API reference documents alongside:
//!   openai-python raises `APIError` for a payload with an `error` key
//!   (a flat-only event it would yield as a plain item), openai-node for
//!   any `error` event; both `create(stream=True)` and `.stream()`.
//!   Anthropic sends `event: error` with `overloaded_error`: the anthropic
//!   SDK raises `anthropic.APIStatusError` with `status_code` 200 and
//!   `type` `overloaded_error` (it picks `OverloadedError` by HTTP status,
//!   and the status was 200). An SDK's own retries cover the request, not
//!   its stream: the agent's retry starts at once.
//! - `finish`: the dialect's normal end at the output limit. Chat:
//!   `finish_reason: "length"`, then `[DONE]`. Anthropic: the open block
//!   closed, `stop_reason: "max_tokens"`, `message_stop` (one
//!   `message_start` in all; `get_final_message()` works). Responses: the
//!   open item closed as `incomplete`, then `response.incomplete` with
//!   `incomplete_details.reason: "max_output_tokens"` and the output so
//!   far. Every SDK returns the partial text with that finish and raises
//!   nothing, but for two openai-python helpers whose final accessor
//!   refuses a cut answer, as it would the provider's own:
//!   `chat.completions.stream()`'s `get_final_completion()` raises
//!   `LengthFinishReasonError` on any `length` finish, and
//!   `responses.stream()`'s `get_final_response()` raises `RuntimeError`
//!   (it takes only `response.completed`); iterating either is fine.
//!   openai-node's `finalChatCompletion()` and `finalResponse()` return
//!   the partial answer (the former refuses `length` only for structured
//!   output and strict tools, as openai-python's `.parse()` does).
//!
//! The pieces of each dialect's events the simulator sends too (SSE
//! framing, error objects, finishes, Responses items) are rendered here,
//! once, for both.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use serde::Deserialize;

use super::Dialect;

/// What the guard sends when a clock catches a stall after content
/// reached the agent (`GUARD_AFTER_CONTENT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AfterContent {
    /// An in-stream error the SDK raises as its own API error, so the
    /// agent's retry starts at once.
    #[default]
    Error,
    /// The dialect's normal end at the output limit: the agent keeps the
    /// partial answer.
    Finish,
}

impl AfterContent {
    /// The tunable's choices, by name.
    pub const CHOICES: [&'static str; 2] = ["error", "finish"];

    /// The tunable's value for this choice.
    pub const fn name(self) -> &'static str {
        match self {
            AfterContent::Error => "error",
            AfterContent::Finish => "finish",
        }
    }
}

impl fmt::Display for AfterContent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AfterContent {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "error" => Ok(AfterContent::Error),
            "finish" => Ok(AfterContent::Finish),
            _ => Err(format!("`{s}` is not a way to end a stream after content; allowed: error, finish")),
        }
    }
}

/// What one forwarded stream has said so far that its ending needs.
#[derive(Debug)]
pub struct EndingState {
    /// The model, a JSON string literal: the request's until the stream
    /// names one (Anthropic's ending names none).
    model: String,
    seen: Seen,
}

/// The per-dialect part of [`EndingState`].
#[derive(Debug)]
enum Seen {
    Chat(ChatSeen),
    Anthropic(AnthropicSeen),
    Responses(ResponsesSeen),
}

/// A chat completion stream.
#[derive(Debug, Default)]
struct ChatSeen {
    /// The chunks' `id` (a JSON string literal) and `created`, once a
    /// chunk gave them.
    head: Option<(String, u64)>,
    /// The provider sent its own `finish_reason`.
    finished: bool,
    /// `[DONE]` went by.
    done: bool,
}

/// An Anthropic Messages stream.
#[derive(Debug, Default)]
struct AnthropicSeen {
    /// The index of the content block started and not yet stopped.
    open_block: Option<u64>,
    /// The last `usage.output_tokens` the provider reported (the guard
    /// counts no tokens).
    output_tokens: u64,
    /// A `message_delta` carried the provider's own stop reason.
    finished: bool,
    /// `message_stop` went by.
    done: bool,
}

/// An OpenAI Responses stream.
#[derive(Debug, Default)]
struct ResponsesSeen {
    /// The response's `id` (a JSON string literal) and `created_at`, once
    /// a lifecycle event gave them.
    head: Option<(String, u64)>,
    /// The `sequence_number` the next event takes.
    sequence: u64,
    /// Finished output items, as JSON.
    items: Vec<String>,
    /// The item being streamed.
    open: Option<ResponsesItem>,
    /// A terminal event (`response.completed`, `.incomplete`, `.failed`)
    /// went by.
    done: bool,
}

impl EndingState {
    /// The state of a stream of `dialect` asked of `model`, before any
    /// event.
    pub fn new(dialect: Dialect, model: &str) -> EndingState {
        let seen = match dialect {
            Dialect::OpenAiChat => Seen::Chat(ChatSeen::default()),
            Dialect::OpenAiResponses => Seen::Responses(ResponsesSeen::default()),
            Dialect::AnthropicMessages => Seen::Anthropic(AnthropicSeen::default()),
        };
        EndingState { model: quote(model), seen }
    }

    /// Notes one event forwarded to the agent (`event` and `data` as
    /// [`SseItem::Event`](super::sse::SseItem::Event) gives them). Events
    /// that change nothing here (deltas of chat and Anthropic, pings) are
    /// not parsed; one that is not the JSON expected is passed over.
    pub fn observe(&mut self, event: &str, data: &str) {
        match &mut self.seen {
            Seen::Chat(chat) => chat.observe(data, &mut self.model),
            Seen::Anthropic(anthropic) => anthropic.observe(event, data),
            Seen::Responses(responses) => responses.observe(data, &mut self.model),
        }
    }

    /// The `sequence_number` the next Responses event takes (0 in the
    /// other dialects, which number nothing).
    pub fn next_sequence(&self) -> u64 {
        match &self.seen {
            Seen::Responses(responses) => responses.sequence,
            Seen::Chat(_) | Seen::Anthropic(_) => 0,
        }
    }

    /// The events that end the stream as `how` says; `message` is the
    /// error's (unused by a finish).
    pub fn end(&self, how: AfterContent, message: &str) -> Vec<Bytes> {
        match how {
            AfterContent::Error => self.error(message),
            AfterContent::Finish => self.length_finish(),
        }
    }

    /// An in-stream error saying `message`, which the dialect's SDKs raise
    /// as their API error: chat `server_error`, a Responses `error` event
    /// with `server_error`, Anthropic `overloaded_error`.
    pub fn error(&self, message: &str) -> Vec<Bytes> {
        let data = match &self.seen {
            Seen::Chat(_) => chat_error(&openai_error_object(message, "server_error", None, None)),
            Seen::Anthropic(_) => return vec![anthropic_error_event("overloaded_error", message)],
            Seen::Responses(responses) => {
                // The live API nests the error; the reference documents it flat.
                let nested = openai_error_object(message, "server_error", None, Some("server_error"));
                let fields =
                    format!(r#""error":{nested},"code":"server_error","message":{},"param":null"#, quote(message));
                let mut sequence = responses.sequence;
                return vec![responses_event("error", fields.as_bytes(), &mut sequence)];
            }
        };
        vec![event(None, &[data.as_bytes()])]
    }

    /// The dialect's normal end at the output limit, closing what is open;
    /// after the provider's own finish only what it had yet to send.
    pub fn length_finish(&self) -> Vec<Bytes> {
        let mut out = Vec::new();
        match &self.seen {
            Seen::Chat(chat) => {
                if !chat.finished {
                    let (id, created) = chat.head.as_ref().map_or((FALLBACK_CHAT_ID, 0), |(id, at)| (id.as_str(), *at));
                    out.push(chat_finish(&chat_chunk_head(id, created, &self.model), "length"));
                }
                if !chat.done {
                    out.push(Bytes::from_static(CHAT_DONE));
                }
            }
            Seen::Anthropic(anthropic) => {
                if anthropic.done {
                    return out;
                }
                if let Some(index) = anthropic.open_block {
                    out.push(anthropic_event("content_block_stop", &format!(r#""index":{index}"#)));
                }
                if !anthropic.finished {
                    out.push(anthropic_message_delta(Some("max_tokens"), anthropic.output_tokens));
                }
                out.push(anthropic_event("message_stop", ""));
            }
            Seen::Responses(responses) => {
                if responses.done {
                    return out;
                }
                let mut sequence = responses.sequence;
                let mut items = responses.items.clone();
                if let Some(open) = &responses.open {
                    items.push(open.close("incomplete", &mut sequence, &mut out));
                }
                let (id, created) =
                    responses.head.as_ref().map_or((FALLBACK_RESPONSE_ID, 0), |(id, at)| (id.as_str(), *at));
                let rest = format!(
                    r#""incomplete_details":{{"reason":"max_output_tokens"}},"output":[{}],"usage":null"#,
                    items.join(",")
                );
                let fields =
                    format!(r#""response":{}"#, response_object(id, created, "incomplete", &self.model, &rest));
                out.push(responses_event("response.incomplete", fields.as_bytes(), &mut sequence));
            }
        }
        out
    }
}

/// The chat `id` of an ending before any chunk named one (never after
/// content: every chunk carries it).
const FALLBACK_CHAT_ID: &str = r#""chatcmpl-stallscope""#;
/// The Responses `id` of an ending before `response.created`.
const FALLBACK_RESPONSE_ID: &str = r#""resp_stallscope""#;

/// Takes a model named by the stream, as a JSON string literal.
fn note_model(model: &mut String, named: Option<Cow<'_, str>>) {
    if let Some(named) = named.filter(|m| !m.is_empty()) {
        *model = quote(&named);
    }
}

#[derive(Deserialize)]
struct ChatChunk<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    created: Option<u64>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Vec<ChatChoice<'a>>,
}

#[derive(Deserialize)]
struct ChatChoice<'a> {
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

impl ChatSeen {
    fn observe(&mut self, data: &str, model: &mut String) {
        if data.trim() == "[DONE]" {
            self.done = true;
            return;
        }
        // OpenAI's content chunks say `"finish_reason":null`: once the head
        // is known, only other chunks are read.
        if self.head.is_some() && data.contains(r#""finish_reason":null"#) {
            return;
        }
        let Ok(chunk) = serde_json::from_str::<ChatChunk<'_>>(data) else { return };
        if self.head.is_none()
            && let Some(id) = chunk.id
        {
            self.head = Some((quote(&id), chunk.created.unwrap_or(0)));
            note_model(model, chunk.model);
        }
        // The request asks for one choice, as the decoder reads it.
        if chunk.choices.first().is_some_and(|c| c.finish_reason.is_some()) {
            self.finished = true;
        }
    }
}

#[derive(Deserialize)]
struct AnthropicPayload<'a> {
    #[serde(default)]
    message: Option<AnthropicMessage>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<AnthropicDelta<'a>>,
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

#[derive(Deserialize)]
struct AnthropicMessage {
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

#[derive(Deserialize)]
struct AnthropicDelta<'a> {
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct AnthropicUsage {
    #[serde(default)]
    output_tokens: Option<u64>,
}

impl AnthropicSeen {
    /// Anthropic names every event (its SDKs drop one without a name), so
    /// deltas and pings are passed over by name.
    fn observe(&mut self, event: &str, data: &str) {
        if !matches!(event, "message_start" | "content_block_start" | "content_block_stop" | "message_delta") {
            self.done |= event == "message_stop";
            return;
        }
        let Ok(payload) = serde_json::from_str::<AnthropicPayload<'_>>(data) else { return };
        let usage = match event {
            "message_start" => payload.message.and_then(|m| m.usage),
            "content_block_start" => {
                self.open_block = payload.index;
                None
            }
            "content_block_stop" => {
                self.open_block = None;
                None
            }
            _ => {
                self.finished |= payload.delta.is_some_and(|d| d.stop_reason.is_some());
                payload.usage
            }
        };
        if let Some(tokens) = usage.and_then(|u| u.output_tokens) {
            self.output_tokens = tokens;
        }
    }
}

#[derive(Deserialize)]
struct ResponsesPayload<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    sequence_number: Option<u64>,
    #[serde(default, borrow)]
    item_id: Option<Cow<'a, str>>,
    #[serde(default)]
    output_index: Option<usize>,
    #[serde(default)]
    content_index: Option<usize>,
    #[serde(default)]
    summary_index: Option<usize>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    item: Option<serde_json::Value>,
    #[serde(default)]
    part: Option<serde_json::Value>,
    #[serde(default, borrow)]
    response: Option<ResponseHead<'a>>,
}

#[derive(Deserialize)]
struct ResponseHead<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    created_at: Option<u64>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
}

impl ResponsesSeen {
    fn observe(&mut self, data: &str, model: &mut String) {
        let Ok(payload) = serde_json::from_str::<ResponsesPayload<'_>>(data) else { return };
        if let Some(sequence) = payload.sequence_number {
            self.sequence = sequence + 1;
        }
        // The item an event is about, if it is the one being streamed.
        let open = self.open.as_mut().filter(|open| {
            Some(open.index) == payload.output_index && payload.item_id.as_ref().is_none_or(|id| *id == open.id)
        });
        match payload.kind.as_ref() {
            "response.created" | "response.queued" | "response.in_progress" => {
                let Some(response) = payload.response else { return };
                if let Some(id) = response.id {
                    self.head = Some((quote(&id), response.created_at.unwrap_or(0)));
                }
                note_model(model, response.model);
            }
            "response.output_item.added" => {
                let (Some(item), Some(index)) = (payload.item, payload.output_index) else { return };
                self.open = Some(ResponsesItem::added(item, index));
            }
            "response.content_part.added" | "response.reasoning_summary_part.added" => {
                let Some(open) = open else { return };
                let part_type = payload.part.as_ref().and_then(|p| p["type"].as_str());
                let index = if open.kind == ItemKind::Message { payload.content_index } else { payload.summary_index };
                open.part = index.filter(|_| part_type == Some(open.kind.part_type()));
                open.text.clear();
            }
            kind @ ("response.output_text.delta"
            | "response.reasoning_summary_text.delta"
            | "response.function_call_arguments.delta") => {
                let Some(open) = open else { return };
                let streaming = match &open.kind {
                    ItemKind::Message => kind.ends_with("output_text.delta") && open.part == payload.content_index,
                    ItemKind::Reasoning => kind.ends_with("summary_text.delta") && open.part == payload.summary_index,
                    ItemKind::FunctionCall { .. } => kind.ends_with("arguments.delta"),
                    ItemKind::Other(_) => false,
                };
                if streaming {
                    open.text.push_str(payload.delta.as_deref().unwrap_or(""));
                }
            }
            "response.content_part.done" | "response.reasoning_summary_part.done" => {
                let (Some(open), Some(part)) = (open, payload.part) else { return };
                open.parts.push(part.to_string());
                open.part = None;
                open.text.clear();
            }
            "response.output_item.done" => {
                if let Some(item) = payload.item {
                    self.items.push(item.to_string());
                }
                self.open = None;
            }
            "response.completed" | "response.incomplete" | "response.failed" => self.done = true,
            _ => {}
        }
    }
}

/// `text` as a JSON string literal.
pub(crate) fn quote(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// One SSE event from pieces of its `data:` line.
pub(crate) fn event(name: Option<&str>, data: &[&[u8]]) -> Bytes {
    let mut out = Vec::with_capacity(64 + data.iter().map(|piece| piece.len()).sum::<usize>());
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    for piece in data {
        out.extend_from_slice(piece);
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// OpenAI's error object (a chat error's, a Responses error event's).
pub(crate) fn openai_error_object(message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> String {
    format!(
        r#"{{"message":{},"type":{},"param":{},"code":{}}}"#,
        quote(message),
        quote(kind),
        param.map_or_else(|| "null".to_owned(), quote),
        code.map_or_else(|| "null".to_owned(), quote),
    )
}

/// An OpenAI error body, also a chat completion's in-stream error:
/// `{"error": object}`.
pub(crate) fn chat_error(object: &str) -> String {
    format!(r#"{{"error":{object}}}"#)
}

/// The end of a chat completion stream.
pub(crate) const CHAT_DONE: &[u8] = b"data: [DONE]\n\n";

/// A chat completion chunk up to its `choices` value; `id` and `model` are
/// JSON string literals.
pub(crate) fn chat_chunk_head(id: &str, created: u64, model: &str) -> String {
    format!(r#"{{"id":{id},"object":"chat.completion.chunk","created":{created},"model":{model},"choices":"#)
}

/// The chunk that gives the finish reason, after `head`
/// ([`chat_chunk_head`]).
pub(crate) fn chat_finish(head: &str, reason: &str) -> Bytes {
    event(None, &[head.as_bytes(), br#"[{"index":0,"delta":{},"finish_reason":"#, quote(reason).as_bytes(), b"}]}"])
}

/// Anthropic's error object, the same in a body and in an `error` event.
pub(crate) fn anthropic_error(kind: &str, message: &str) -> String {
    format!(r#"{{"type":"error","error":{{"type":{},"message":{}}}}}"#, quote(kind), quote(message))
}

/// An Anthropic `error` event.
fn anthropic_error_event(kind: &str, message: &str) -> Bytes {
    event(Some("error"), &[anthropic_error(kind, message).as_bytes()])
}

/// An Anthropic event whose JSON `type` is its name, with more `fields`
/// (a JSON object body without braces, may be empty).
pub(crate) fn anthropic_event(name: &str, fields: &str) -> Bytes {
    let comma = if fields.is_empty() { "" } else { "," };
    event(Some(name), &[format!(r#"{{"type":"{name}"{comma}{fields}}}"#).as_bytes()])
}

/// An Anthropic `message_delta` with its stop reason (`None`: not yet) and
/// the output tokens so far.
pub(crate) fn anthropic_message_delta(stop_reason: Option<&str>, output_tokens: u64) -> Bytes {
    let reason = stop_reason.map_or_else(|| "null".to_owned(), quote);
    let fields = format!(
        r#""delta":{{"stop_reason":{reason},"stop_sequence":null}},"usage":{{"output_tokens":{output_tokens}}}"#
    );
    anthropic_event("message_delta", &fields)
}

/// A Responses event: `type`, then `fields` (a JSON object body without
/// braces, may be empty), then the next `sequence_number`, counted on.
pub(crate) fn responses_event(kind: &str, fields: &[u8], sequence: &mut u64) -> Bytes {
    let head = format!(r#"{{"type":"{kind}","#);
    let tail = format!(r#"{}"sequence_number":{}}}"#, if fields.is_empty() { "" } else { "," }, sequence);
    *sequence += 1;
    event(Some(kind), &[head.as_bytes(), fields, tail.as_bytes()])
}

/// A Responses `response` object; `id` and `model` are JSON string
/// literals, `rest` the fields after them.
pub(crate) fn response_object(id: &str, created_at: u64, status: &str, model: &str, rest: &str) -> String {
    format!(r#"{{"id":{id},"object":"response","created_at":{created_at},"status":"{status}","model":{model},{rest}}}"#)
}

/// What a Responses output item is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ItemKind {
    /// An assistant message, streaming `output_text`.
    Message,
    /// Reasoning, streaming its summary.
    Reasoning,
    /// A function call, streaming its arguments.
    FunctionCall {
        /// Its `call_id`.
        call_id: String,
        /// The function's name.
        name: String,
    },
    /// Anything else (a built-in tool's call), as it was added.
    Other(serde_json::Value),
}

impl ItemKind {
    /// The type of the parts whose text the item streams.
    fn part_type(&self) -> &'static str {
        match self {
            ItemKind::Message => "output_text",
            ItemKind::Reasoning => "summary_text",
            ItemKind::FunctionCall { .. } | ItemKind::Other(_) => "",
        }
    }
}

/// A Responses output item being streamed: what its closing events repeat.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResponsesItem {
    /// What it is.
    pub kind: ItemKind,
    /// Its `id`.
    pub id: String,
    /// Its `output_index`.
    pub index: usize,
    /// The `content_index` (message) or `summary_index` (reasoning) of
    /// the part streaming text, if one is.
    pub part: Option<usize>,
    /// That part's text so far, or the function call's arguments.
    pub text: String,
    /// Parts finished before it, as JSON.
    pub parts: Vec<String>,
}

impl ResponsesItem {
    /// The item an `output_item.added` event announced at `index`.
    fn added(item: serde_json::Value, index: usize) -> ResponsesItem {
        let text = |key: &str| item[key].as_str().unwrap_or_default().to_owned();
        let (id, kind) = match item["type"].as_str() {
            Some("message") => (text("id"), ItemKind::Message),
            Some("reasoning") => (text("id"), ItemKind::Reasoning),
            Some("function_call") => {
                (text("id"), ItemKind::FunctionCall { call_id: text("call_id"), name: text("name") })
            }
            _ => (text("id"), ItemKind::Other(item)),
        };
        ResponsesItem { kind, id, index, part: None, text: String::new(), parts: Vec::new() }
    }

    /// The events that finish the item with `status` (messages and calls;
    /// reasoning items carry none), numbered from `sequence`; returns the
    /// finished item's JSON.
    pub(crate) fn close(&self, status: &str, sequence: &mut u64, out: &mut Vec<Bytes>) -> String {
        let ResponsesItem { kind, id, index, part, text, parts } = self;
        let (id_json, text) = (quote(id), quote(text));
        let mut parts = parts.clone();
        let item = match kind {
            ItemKind::Message => {
                if let Some(part) = part {
                    let at = format!(r#""item_id":{id_json},"output_index":{index},"content_index":{part}"#);
                    out.push(responses_event(
                        "response.output_text.done",
                        format!(r#"{at},"text":{text}"#).as_bytes(),
                        sequence,
                    ));
                    let done = format!(r#"{{"type":"output_text","text":{text},"annotations":[]}}"#);
                    out.push(responses_event(
                        "response.content_part.done",
                        format!(r#"{at},"part":{done}"#).as_bytes(),
                        sequence,
                    ));
                    parts.push(done);
                }
                format!(
                    r#"{{"id":{id_json},"type":"message","status":"{status}","role":"assistant","content":[{}]}}"#,
                    parts.join(",")
                )
            }
            ItemKind::Reasoning => {
                if let Some(part) = part {
                    let at = format!(r#""item_id":{id_json},"output_index":{index},"summary_index":{part}"#);
                    let text_done = format!(r#"{at},"text":{text}"#);
                    out.push(responses_event("response.reasoning_summary_text.done", text_done.as_bytes(), sequence));
                    let done = format!(r#"{{"type":"summary_text","text":{text}}}"#);
                    let part_done = format!(r#"{at},"part":{done}"#);
                    out.push(responses_event("response.reasoning_summary_part.done", part_done.as_bytes(), sequence));
                    parts.push(done);
                }
                format!(r#"{{"id":{id_json},"type":"reasoning","summary":[{}]}}"#, parts.join(","))
            }
            ItemKind::FunctionCall { call_id, name } => {
                let at = format!(r#""item_id":{id_json},"output_index":{index}"#);
                let done = format!(r#"{at},"arguments":{text}"#);
                out.push(responses_event("response.function_call_arguments.done", done.as_bytes(), sequence));
                format!(
                    r#"{{"id":{id_json},"type":"function_call","status":"{status}","arguments":{text},"call_id":{},"name":{}}}"#,
                    quote(call_id),
                    quote(name)
                )
            }
            ItemKind::Other(added) => {
                let mut item = added.clone();
                if let Some(was) = item.get_mut("status") {
                    *was = status.into();
                }
                item.to_string()
            }
        };
        let done = format!(r#""output_index":{index},"item":{item}"#);
        out.push(responses_event("response.output_item.done", done.as_bytes(), sequence));
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::EventClass;
    use crate::core::upstream::{Decoded, Decoder};
    use crate::providers::sse::{SseItem, SseParser};

    const CHAT: &[u8] = include_bytes!("../../tests/fixtures/openai_chat.sse");
    const RESPONSES: &[u8] = include_bytes!("../../tests/fixtures/openai_responses.sse");
    const ANTHROPIC: &[u8] = include_bytes!("../../tests/fixtures/anthropic.sse");

    /// The first `count` events of `fixture`, as the guard forwards them:
    /// their bytes, and the state fed with them.
    fn forwarded(dialect: Dialect, fixture: &[u8], count: usize) -> (Vec<u8>, EndingState) {
        let mut state = EndingState::new(dialect, "asked-model");
        let text = std::str::from_utf8(fixture).unwrap();
        let events: Vec<&str> = text.split_inclusive("\n\n").filter(|e| !e.starts_with(':')).take(count).collect();
        let bytes = events.concat().into_bytes();
        SseParser::new(SseParser::DEFAULT_MAX_LINE)
            .feed(&bytes, &mut |item| {
                if let SseItem::Event { event, data, .. } = item {
                    state.observe(event, data);
                }
            })
            .unwrap();
        (bytes, state)
    }

    /// What the dialect's decoder makes of a stream.
    fn decoded(dialect: Dialect, bytes: &[u8]) -> Vec<Decoded> {
        let mut decoder = dialect.decoder();
        let mut out = Vec::new();
        decoder.feed(bytes, &mut out);
        decoder.finish(&mut out);
        out
    }

    /// `prefix` then `ending`, decoded: the decoded ending but its
    /// lifecycle events, after checking
    /// that every event of it is an SSE event with JSON data.
    fn ending_decoded(dialect: Dialect, prefix: &[u8], ending: &[Bytes]) -> Vec<Decoded> {
        for event in ending {
            let mut events = 0;
            SseParser::new(SseParser::DEFAULT_MAX_LINE)
                .feed(event, &mut |item| {
                    let SseItem::Event { data, .. } = item else { panic!("not an event: {item:?}") };
                    assert!(data == "[DONE]" || serde_json::from_str::<serde_json::Value>(data).is_ok(), "{data}");
                    events += 1;
                })
                .unwrap();
            assert_eq!(events, 1, "one whole event: {}", String::from_utf8_lossy(event));
        }
        let before = decoded(dialect, prefix).len();
        let mut all = prefix.to_vec();
        all.extend(ending.iter().flat_map(|e| e.iter().copied()));
        // The prefix decodes alone as it does in front of the ending (chat
        // says nothing at the end of a stream without a finish); the
        // ending's bookkeeping events carry nothing.
        let mut ending = decoded(dialect, &all).split_off(before);
        ending.retain(|d| !matches!(d, Decoded::Event { class: EventClass::Lifecycle, .. }));
        ending
    }

    fn json(event: &Bytes) -> serde_json::Value {
        let text = std::str::from_utf8(event).unwrap();
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        serde_json::from_str(data).unwrap()
    }

    fn stop(reason: &str) -> Vec<Decoded> {
        vec![Decoded::StopReason(reason.to_owned()), Decoded::Done]
    }

    fn error(code: &str, message: &str) -> Vec<Decoded> {
        vec![Decoded::Error { code: Some(code.to_owned()), message: message.to_owned() }]
    }

    #[test]
    fn chat_endings_repeat_the_stream_s_head() {
        let (prefix, state) = forwarded(Dialect::OpenAiChat, CHAT, 3);
        let finish = state.length_finish();
        assert_eq!(
            finish,
            [
                "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\
                 \"created\":1741570252,\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"index\":0,\"delta\":{},\
                 \"finish_reason\":\"length\"}]}\n\n",
                "data: [DONE]\n\n",
            ]
        );
        assert_eq!(ending_decoded(Dialect::OpenAiChat, &prefix, &finish), stop("length"));
        let error_ending = state.end(AfterContent::Error, "stalled \"here\"");
        assert_eq!(
            error_ending,
            [
                "data: {\"error\":{\"message\":\"stalled \\\"here\\\"\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"
            ]
        );
        assert_eq!(
            ending_decoded(Dialect::OpenAiChat, &prefix, &error_ending),
            error("server_error", "stalled \"here\"")
        );
    }

    #[test]
    fn anthropic_endings_close_the_open_block() {
        let (prefix, state) = forwarded(Dialect::AnthropicMessages, ANTHROPIC, 8);
        let finish = state.length_finish();
        assert_eq!(
            finish,
            [
                "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
                "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\
                 \"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\n",
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            ]
        );
        assert_eq!(ending_decoded(Dialect::AnthropicMessages, &prefix, &finish), stop("max_tokens"));
        let error_ending = state.error("stalled");
        assert_eq!(
            error_ending,
            [
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"stalled\"}}\n\n"
            ]
        );
        assert_eq!(
            ending_decoded(Dialect::AnthropicMessages, &prefix, &error_ending),
            error("overloaded_error", "stalled")
        );
        // Between blocks nothing is open.
        let (prefix, state) = forwarded(Dialect::AnthropicMessages, ANTHROPIC, 10);
        let finish = state.length_finish();
        assert!(finish[0].starts_with(b"event: message_delta\n"), "{finish:?}");
        assert_eq!(ending_decoded(Dialect::AnthropicMessages, &prefix, &finish), stop("max_tokens"));
    }

    #[test]
    fn responses_endings_close_the_open_item() {
        let (prefix, state) = forwarded(Dialect::OpenAiResponses, RESPONSES, 7);
        let finish = state.length_finish();
        let types: Vec<String> = finish.iter().map(|e| json(e)["type"].as_str().unwrap().to_owned()).collect();
        assert_eq!(
            types,
            [
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.incomplete"
            ]
        );
        let sequence: Vec<u64> = finish.iter().map(|e| json(e)["sequence_number"].as_u64().unwrap()).collect();
        assert_eq!(sequence, [7, 8, 9, 10]);
        // The fixture's stray reasoning delta belongs to another item.
        assert_eq!(json(&finish[0])["text"], "Hi there!");
        let item = &json(&finish[2])["item"];
        assert_eq!(
            (item["status"].as_str(), item["content"][0]["text"].as_str()),
            (Some("incomplete"), Some("Hi there!"))
        );
        let response = &json(&finish[3])["response"];
        assert_eq!(response["id"], "resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654");
        assert_eq!(
            (response["created_at"].as_u64(), response["model"].as_str()),
            (Some(1741290958), Some("gpt-4.1-2025-04-14"))
        );
        assert_eq!(
            (response["status"].as_str(), response["incomplete_details"]["reason"].as_str()),
            (Some("incomplete"), Some("max_output_tokens"))
        );
        assert_eq!(response["output"][0], *item);
        assert_eq!(ending_decoded(Dialect::OpenAiResponses, &prefix, &finish), stop("max_output_tokens"));

        let error_ending = state.error("stalled");
        let event = json(&error_ending[0]);
        assert!(error_ending[0].starts_with(b"event: error\n"));
        assert_eq!((event["type"].as_str(), event["sequence_number"].as_u64()), (Some("error"), Some(7)));
        assert_eq!(event["error"]["code"], "server_error");
        assert_eq!((event["code"].as_str(), event["message"].as_str()), (Some("server_error"), Some("stalled")));
        assert_eq!(ending_decoded(Dialect::OpenAiResponses, &prefix, &error_ending), error("server_error", "stalled"));
    }

    #[test]
    fn a_responses_call_and_reasoning_close_as_their_kind() {
        let mut state = EndingState::new(Dialect::OpenAiResponses, "gpt-x");
        let events = [
            r#"{"type":"response.created","response":{"id":"resp_1","created_at":5,"model":"gpt-y","output":[]},"sequence_number":0}"#,
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]},"sequence_number":1}"#,
            r#"{"type":"response.reasoning_summary_part.added","item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""},"sequence_number":2}"#,
            r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"hm","sequence_number":3}"#,
        ];
        for data in events {
            state.observe("", data);
        }
        let finish = state.length_finish();
        assert_eq!(
            json(&finish[2])["item"],
            serde_json::json!({"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"hm"}]})
        );
        let done = [
            r#"{"type":"response.reasoning_summary_part.done","item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":"hm"},"sequence_number":4}"#,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"hm"}]},"sequence_number":5}"#,
            r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_9","name":"lookup"},"sequence_number":6}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{\"q\":","sequence_number":7}"#,
        ];
        for data in done {
            state.observe("", data);
        }
        let finish = state.length_finish();
        let types: Vec<String> = finish.iter().map(|e| json(e)["type"].as_str().unwrap().to_owned()).collect();
        assert_eq!(
            types,
            ["response.function_call_arguments.done", "response.output_item.done", "response.incomplete"]
        );
        let call = serde_json::json!({"id":"fc_1","type":"function_call","status":"incomplete","arguments":"{\"q\":","call_id":"call_9","name":"lookup"});
        assert_eq!(json(&finish[1])["item"], call);
        let response = &json(&finish[2])["response"];
        assert_eq!((response["id"].as_str(), response["model"].as_str()), (Some("resp_1"), Some("gpt-y")));
        assert_eq!(response["output"][0]["id"], "rs_1");
        assert_eq!(response["output"][1], call);
        assert_eq!(json(&finish[2])["sequence_number"], 10);
    }

    #[test]
    fn after_the_provider_s_own_finish_only_the_rest_is_sent() {
        let (prefix, state) = forwarded(Dialect::OpenAiChat, CHAT, 6);
        assert_eq!(state.length_finish(), ["data: [DONE]\n\n"]);
        assert_eq!(decoded(Dialect::OpenAiChat, &prefix).last(), Some(&Decoded::Done), "a finish without [DONE] ends");
        let (_, state) = forwarded(Dialect::AnthropicMessages, ANTHROPIC, 14);
        assert_eq!(state.length_finish(), ["event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"]);
        let (_, state) = forwarded(Dialect::AnthropicMessages, ANTHROPIC, 15);
        assert!(state.length_finish().is_empty());
        let (_, state) = forwarded(Dialect::OpenAiResponses, RESPONSES, 9);
        assert!(state.length_finish().is_empty());
    }

    #[test]
    fn an_ending_before_any_event_is_still_the_dialect_s() {
        for dialect in Dialect::ALL {
            let state = EndingState::new(dialect, "asked \"model\"");
            let finish = state.length_finish();
            let reason = match dialect {
                Dialect::OpenAiChat => "length",
                Dialect::OpenAiResponses => "max_output_tokens",
                Dialect::AnthropicMessages => "max_tokens",
            };
            assert_eq!(ending_decoded(dialect, b"", &finish), stop(reason), "{dialect}");
            assert!(
                String::from_utf8_lossy(&finish[0]).contains(r#""asked \"model\"""#)
                    || dialect == Dialect::AnthropicMessages
            );
            assert!(
                matches!(ending_decoded(dialect, b"", &state.error("e"))[..], [Decoded::Error { .. }]),
                "{dialect}"
            );
        }
    }

    #[test]
    fn the_tunable_names_its_choices() {
        for choice in AfterContent::CHOICES {
            assert_eq!(choice.parse::<AfterContent>().unwrap().name(), choice);
        }
        assert_eq!(AfterContent::default(), AfterContent::Error);
        assert_eq!(
            "retry".parse::<AfterContent>().unwrap_err(),
            "`retry` is not a way to end a stream after content; allowed: error, finish"
        );
    }
}
