//! Provider dialects over HTTP: how a call becomes a request for OpenAI chat
//! completions, OpenAI Responses or Anthropic Messages, and how each
//! stream's events are classed (keep-alive, lifecycle, reasoning, content,
//! tool call, error).
//!
//! Dialects never retry: they open one attempt and decode its bytes.

mod anthropic;
pub mod ending;
mod fast_json;
pub mod http;
mod openai_chat;
mod openai_responses;
pub mod setup;
mod shape;
pub mod sse;

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use crate::core::event::EventClass;
use crate::core::upstream::{CallInput, Decoded, Decoder};
use shape::{Layout, Shape};
use sse::{SseItem, SseParser};

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub enum Dialect {
    /// OpenAI chat completions (`{base_url}/chat/completions`).
    OpenAiChat,
    /// OpenAI Responses (`{base_url}/responses`).
    OpenAiResponses,
    /// Anthropic Messages (`{base_url}/v1/messages`).
    AnthropicMessages,
}

impl Dialect {
    /// Every dialect.
    pub const ALL: [Dialect; 3] = [Dialect::OpenAiChat, Dialect::OpenAiResponses, Dialect::AnthropicMessages];

    /// The name used in config (`kind = "…"`).
    pub const fn name(self) -> &'static str {
        match self {
            Dialect::OpenAiChat => "openai-chat",
            Dialect::OpenAiResponses => "openai-responses",
            Dialect::AnthropicMessages => "anthropic-messages",
        }
    }

    /// The request URL, following each official SDK's `base_url`
    /// convention: OpenAI's includes `/v1`, Anthropic's does not.
    pub fn url(self, base_url: &str) -> String {
        let base = base_url.trim_end_matches('/');
        match self {
            Dialect::OpenAiChat => format!("{base}/chat/completions"),
            Dialect::OpenAiResponses => format!("{base}/responses"),
            Dialect::AnthropicMessages => format!("{base}/v1/messages"),
        }
    }

    /// The path of this dialect's endpoint on a server root (what the
    /// simulator serves): the URL of a base URL at that root's SDK default.
    pub const fn server_path(self) -> &'static str {
        match self {
            Dialect::OpenAiChat => "/v1/chat/completions",
            Dialect::OpenAiResponses => "/v1/responses",
            Dialect::AnthropicMessages => "/v1/messages",
        }
    }

    /// The dialect served at `path` on a server root, if any.
    pub fn from_server_path(path: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.server_path() == path)
    }

    /// The JSON request body for one streaming call.
    pub fn body(self, model: &str, input: &CallInput) -> serde_json::Value {
        match self {
            Dialect::OpenAiChat => openai_chat::body(model, input),
            Dialect::OpenAiResponses => openai_responses::body(model, input),
            Dialect::AnthropicMessages => anthropic::body(model, input),
        }
    }

    /// A decoder for one response body.
    pub fn decoder(self) -> DialectDecoder {
        DialectDecoder {
            dialect: self,
            parser: SseParser::new(SseParser::DEFAULT_MAX_LINE),
            state: DialectState::default(),
            shapes: Shapes::default(),
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dialect {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dialect::ALL.into_iter().find(|d| d.name() == s.trim()).ok_or_else(|| {
            format!("`{s}` is not a provider kind; allowed: openai-chat, openai-responses, anthropic-messages")
        })
    }
}

impl serde::Serialize for Dialect {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl TryFrom<String> for Dialect {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// What a dialect remembers between events of one stream.
#[derive(Debug, Default)]
pub(crate) struct DialectState {
    /// A finish reason arrived (chat streams may then close without
    /// `[DONE]`).
    stop_reason_seen: bool,
    /// The terminal event arrived.
    done: bool,
}

/// The error object the three vendors share in shape:
/// `{"type": …, "code": …, "message": …}`.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub(crate) struct ErrorObject {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    code: Option<serde_json::Value>,
    #[serde(default)]
    message: Option<String>,
}

impl ErrorObject {
    fn into_decoded(self) -> Decoded {
        // The code is the most specific (`rate_limit_exceeded`), then the type
        // (`overloaded_error`); OpenAI sometimes sends a numeric code.
        let code = match self.code {
            Some(serde_json::Value::String(code)) => Some(code),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        Decoded::Error {
            code: code.or(self.kind),
            message: self.message.unwrap_or_else(|| "error without a message".to_owned()),
        }
    }
}

/// SSE framing plus one dialect's event mapping.
pub struct DialectDecoder {
    dialect: Dialect,
    parser: SseParser,
    state: DialectState,
    shapes: Shapes,
}

/// The stream's last text delta as a template (see `shape`), and the
/// layout the fast path notes of each payload it reads.
#[derive(Debug, Default)]
struct Shapes {
    learned: Option<Shape>,
    layout: Layout,
}

/// Maps one SSE item with the dialect's rules. Comments are keep-alives in
/// every dialect. A payload laid out like the last text delta is read from
/// that template; any other text delta read in full becomes the template.
fn decode(dialect: Dialect, item: SseItem<'_>, state: &mut DialectState, shapes: &mut Shapes, out: &mut Vec<Decoded>) {
    let SseItem::Event { event, data, .. } = item else {
        return out.push(Decoded::Event { class: EventClass::Keepalive, text: "".into() });
    };
    if let Some((class, text)) = shapes.learned.as_ref().and_then(|shape| shape.read(event, data)) {
        return out.push(Decoded::Event { class, text: text.into_owned().into() });
    }
    let first = out.len();
    let layout = &mut shapes.layout;
    match dialect {
        Dialect::OpenAiChat => openai_chat::decode(data, state, layout, out),
        Dialect::OpenAiResponses => openai_responses::decode(event, data, layout, out),
        Dialect::AnthropicMessages => anthropic::decode(event, data, layout, out),
    }
    if let Some(shape) = Shape::learn(event, data, layout, &out[first..]) {
        shapes.learned = Some(shape);
    }
}

/// Parses an event's JSON payload, or says which event was not JSON.
fn payload<'a, T: Deserialize<'a>>(dialect: Dialect, event: &str, data: &'a str) -> Result<T, Decoded> {
    serde_json::from_str(data)
        .map_err(|e| Decoded::Malformed(format!("{dialect} event `{event}` is not the expected JSON ({e})")))
}

impl Decoder for DialectDecoder {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<Decoded>) {
        let DialectDecoder { dialect, parser, state, shapes } = self;
        if let Err(e) = parser.feed(chunk, &mut |item| decode(*dialect, item, state, shapes, out)) {
            out.push(Decoded::Malformed(e.to_string()));
        }
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let DialectDecoder { dialect, parser, state, shapes } = self;
        if let Err(e) = parser.finish(&mut |item| decode(*dialect, item, state, shapes, out)) {
            out.push(Decoded::Malformed(e.to_string()));
        }
        if *dialect == Dialect::OpenAiChat {
            openai_chat::finish(state, out);
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fast_json_tests;
