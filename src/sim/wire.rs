//! The SSE events of each dialect, byte for byte as the real services send
//! them.
//!
//! A [`Renderer`] is the state of one response stream: whether the opening
//! events went out, which content block (Anthropic) or output item
//! (Responses) is open, the Responses `sequence_number`, and the token count
//! the closing usage reports. Every method appends whole SSE events, one
//! [`Bytes`] each, so the server can send each as its own body frame.

use bytes::Bytes;

use super::provider_error::ProviderError;
use super::scenario::StreamError;
use crate::providers::Dialect;
use crate::providers::ending::{
    CHAT_DONE, ItemKind, ResponsesItem, anthropic_event, anthropic_message_delta, chat_chunk_head, chat_finish, event,
    quote, response_object, responses_event,
};

/// The `created`/`created_at` timestamp in every object; fixed so streams
/// are reproducible.
const CREATED: u64 = 1_700_000_000;
/// The chat completion `id`, a JSON string literal.
const CHAT_ID: &str = r#""chatcmpl-sim""#;
/// The Responses `id`, a JSON string literal.
const RESPONSE_ID: &str = r#""resp_sim""#;
/// The prompt size the usage objects report.
const PROMPT_TOKENS: u64 = 25;
/// The bytes a malformed delta carries in place of its text: a lone
/// continuation byte, a truncated two-byte sequence and two bytes that never
/// occur in UTF-8.
const INVALID_UTF8: &[u8] = b"\"\x80 \xc3( \xff\xfe\"";

/// Which kind of output is being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Output text.
    Text,
    /// Reasoning or thinking.
    Thinking,
    /// A tool call's arguments.
    Tool,
}

/// The name of the tool a rendered tool call calls.
const TOOL_NAME: &str = "sim_tool";

/// The open Anthropic content block or Responses output item.
#[derive(Debug)]
struct Block {
    kind: Kind,
    /// Anthropic block index, or Responses `output_index`.
    index: usize,
    /// Responses item id.
    id: String,
    /// Everything streamed into the block so far (the `done` events repeat it).
    text: String,
}

/// The state of one response stream in one dialect.
#[derive(Debug)]
pub(super) struct Renderer {
    dialect: Dialect,
    /// The model, already a JSON string literal.
    model: String,
    opened: bool,
    sequence: u64,
    output_tokens: u64,
    block: Option<Block>,
    blocks: usize,
    messages: usize,
    reasonings: usize,
    tools: usize,
    /// Responses: finished output items, for `response.completed`.
    items: Vec<String>,
    /// Anthropic sends one `ping` after the first block opens.
    pinged: bool,
}

impl Renderer {
    /// A fresh stream of `dialect` for `model`.
    pub fn new(dialect: Dialect, model: &str) -> Renderer {
        Renderer {
            dialect,
            model: quote(model),
            opened: false,
            sequence: 0,
            output_tokens: 0,
            block: None,
            blocks: 0,
            messages: 0,
            reasonings: 0,
            tools: 0,
            items: Vec::new(),
            pinged: false,
        }
    }

    /// A Responses event: `type`, then `fields` (a JSON object body without
    /// braces, may be empty), then the next `sequence_number`.
    fn responses(&mut self, kind: &str, fields: &[u8], out: &mut Vec<Bytes>) {
        out.push(responses_event(kind, fields, &mut self.sequence));
    }

    /// A chat completion chunk up to its `choices` value.
    fn chunk_head(&self) -> String {
        chat_chunk_head(CHAT_ID, CREATED, &self.model)
    }

    /// A chat completion chunk with `choices`, and more top-level fields.
    fn chunk(&self, choices: &str, extra: &str) -> String {
        format!("{}{choices}{extra}}}", self.chunk_head())
    }

    /// A Responses `response` object.
    fn response_object(&self, status: &str, rest: &str) -> String {
        response_object(RESPONSE_ID, CREATED, status, &self.model, rest)
    }

    /// The opening events, once per stream.
    pub fn open(&mut self, out: &mut Vec<Bytes>) {
        if std::mem::replace(&mut self.opened, true) {
            return;
        }
        match self.dialect {
            Dialect::OpenAiChat => {
                let choices = r#"[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]"#;
                out.push(event(None, &[self.chunk(choices, "").as_bytes()]));
            }
            Dialect::OpenAiResponses => {
                let response = self.response_object("in_progress", r#""output":[],"usage":null"#);
                let fields = format!(r#""response":{response}"#);
                self.responses("response.created", fields.as_bytes(), out);
                self.responses("response.in_progress", fields.as_bytes(), out);
            }
            Dialect::AnthropicMessages => {
                let fields = format!(
                    r#""message":{{"id":"msg_sim","type":"message","role":"assistant","model":{},"content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{PROMPT_TOKENS},"output_tokens":1}}}}"#,
                    self.model
                );
                out.push(anthropic_event("message_start", &fields));
            }
        }
    }

    /// The opening events, then the text block or output item open, as
    /// just before the first content delta (chat has none: its opening).
    pub fn open_text(&mut self, out: &mut Vec<Bytes>) {
        self.open(out);
        self.enter(Kind::Text, out);
    }

    /// Opens a block of `kind` unless one is open, closing another kind first.
    fn enter(&mut self, kind: Kind, out: &mut Vec<Bytes>) {
        if self.block.as_ref().is_some_and(|b| b.kind == kind) {
            return;
        }
        self.leave(out);
        let index = self.blocks;
        self.blocks += 1;
        let (prefix, nth) = match kind {
            Kind::Text => ("msg_sim", &mut self.messages),
            Kind::Thinking => ("rs_sim", &mut self.reasonings),
            Kind::Tool => ("fc_sim", &mut self.tools),
        };
        *nth += 1;
        let id = if *nth == 1 { prefix.to_owned() } else { format!("{prefix}_{nth}") };
        match (self.dialect, kind) {
            (Dialect::OpenAiChat, _) => {}
            (Dialect::OpenAiResponses, Kind::Text) => {
                let item = format!(
                    r#""output_index":{index},"item":{{"id":"{id}","type":"message","status":"in_progress","role":"assistant","content":[]}}"#
                );
                self.responses("response.output_item.added", item.as_bytes(), out);
                let part = format!(
                    r#""item_id":"{id}","output_index":{index},"content_index":0,"part":{{"type":"output_text","text":"","annotations":[]}}"#
                );
                self.responses("response.content_part.added", part.as_bytes(), out);
            }
            (Dialect::OpenAiResponses, Kind::Thinking) => {
                let item = format!(r#""output_index":{index},"item":{{"id":"{id}","type":"reasoning","summary":[]}}"#);
                self.responses("response.output_item.added", item.as_bytes(), out);
                let part = format!(
                    r#""item_id":"{id}","output_index":{index},"summary_index":0,"part":{{"type":"summary_text","text":""}}"#
                );
                self.responses("response.reasoning_summary_part.added", part.as_bytes(), out);
            }
            (Dialect::OpenAiResponses, Kind::Tool) => {
                let item = format!(
                    r#""output_index":{index},"item":{{"id":"{id}","type":"function_call","status":"in_progress","arguments":"","call_id":"call_{id}","name":"{TOOL_NAME}"}}"#
                );
                self.responses("response.output_item.added", item.as_bytes(), out);
            }
            (Dialect::AnthropicMessages, _) => {
                let tool;
                let block = match kind {
                    Kind::Text => r#"{"type":"text","text":""}"#,
                    Kind::Thinking => r#"{"type":"thinking","thinking":"","signature":""}"#,
                    Kind::Tool => {
                        tool = format!(r#"{{"type":"tool_use","id":"toolu_{id}","name":"{TOOL_NAME}","input":{{}}}}"#);
                        &tool
                    }
                };
                out.push(anthropic_event(
                    "content_block_start",
                    &format!(r#""index":{index},"content_block":{block}"#),
                ));
                if !std::mem::replace(&mut self.pinged, true) {
                    out.push(self.ping());
                }
            }
        }
        self.block = Some(Block { kind, index, id, text: String::new() });
    }

    /// Closes the open block, if any.
    fn leave(&mut self, out: &mut Vec<Bytes>) {
        let Some(Block { kind, index, id, text }) = self.block.take() else { return };
        match (self.dialect, kind) {
            (Dialect::OpenAiChat, _) => {}
            (Dialect::OpenAiResponses, kind) => {
                let (kind, part) = match kind {
                    Kind::Text => (ItemKind::Message, Some(0)),
                    Kind::Thinking => (ItemKind::Reasoning, Some(0)),
                    Kind::Tool => {
                        (ItemKind::FunctionCall { call_id: format!("call_{id}"), name: TOOL_NAME.to_owned() }, None)
                    }
                };
                let item = ResponsesItem { kind, id, index, part, text, parts: Vec::new() };
                let done = item.close("completed", &mut self.sequence, out);
                self.items.push(done);
            }
            (Dialect::AnthropicMessages, kind) => {
                if kind == Kind::Thinking {
                    // Real thinking blocks end with a signature over the thoughts.
                    let signature = r#"{"type":"signature_delta","signature":"c2ltdWxhdGVkIHNpZ25hdHVyZQ=="}"#;
                    let fields = format!(r#""index":{index},"delta":{signature}"#);
                    out.push(anthropic_event("content_block_delta", &fields));
                }
                out.push(anthropic_event("content_block_stop", &format!(r#""index":{index}"#)));
            }
        }
    }

    /// One delta whose text is the JSON string literal `quoted` (raw bytes,
    /// so a malformed one can be sent); `plain` is what the block records.
    fn delta(&mut self, kind: Kind, quoted: &[u8], plain: &str, out: &mut Vec<Bytes>) {
        self.open(out);
        self.enter(kind, out);
        self.output_tokens += 1;
        let Some(block) = self.block.as_mut() else { return };
        let first = block.text.is_empty();
        block.text.push_str(plain);
        let (index, id) = (block.index, block.id.clone());
        match (self.dialect, kind) {
            (Dialect::OpenAiChat, Kind::Tool) => {
                // The first delta of a call names it, as the real service does.
                let call = if first {
                    format!(
                        r#"{{"index":0,"id":"call_{id}","type":"function","function":{{"name":"{TOOL_NAME}","arguments":"#
                    )
                } else {
                    r#"{"index":0,"function":{"arguments":"#.to_owned()
                };
                let head = format!(r#"{}[{{"index":0,"delta":{{"tool_calls":[{call}"#, self.chunk_head());
                out.push(event(None, &[head.as_bytes(), quoted, br#"}}]},"finish_reason":null}]}"#]));
            }
            (Dialect::OpenAiChat, kind) => {
                let field = if kind == Kind::Text { "content" } else { "reasoning_content" };
                let head = format!(r#"{}[{{"index":0,"delta":{{"{field}":"#, self.chunk_head());
                out.push(event(None, &[head.as_bytes(), quoted, br#"},"finish_reason":null}]}"#]));
            }
            (Dialect::OpenAiResponses, Kind::Text) => {
                let at = format!(r#""item_id":"{id}","output_index":{index},"content_index":0,"delta":"#);
                self.responses("response.output_text.delta", &[at.as_bytes(), quoted].concat(), out);
            }
            (Dialect::OpenAiResponses, Kind::Thinking) => {
                let at = format!(r#""item_id":"{id}","output_index":{index},"summary_index":0,"delta":"#);
                self.responses("response.reasoning_summary_text.delta", &[at.as_bytes(), quoted].concat(), out);
            }
            (Dialect::OpenAiResponses, Kind::Tool) => {
                let at = format!(r#""item_id":"{id}","output_index":{index},"delta":"#);
                self.responses("response.function_call_arguments.delta", &[at.as_bytes(), quoted].concat(), out);
            }
            (Dialect::AnthropicMessages, kind) => {
                let (delta, field) = match kind {
                    Kind::Text => ("text_delta", "text"),
                    Kind::Thinking => ("thinking_delta", "thinking"),
                    Kind::Tool => ("input_json_delta", "partial_json"),
                };
                let head =
                    format!(r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"{delta}","{field}":"#);
                out.push(event(Some("content_block_delta"), &[head.as_bytes(), quoted, b"}}"]));
            }
        }
    }

    /// A content delta of `text`.
    pub fn content(&mut self, text: &str, out: &mut Vec<Bytes>) {
        self.delta(Kind::Text, quote(text).as_bytes(), text, out);
    }

    /// A reasoning delta of `text`.
    pub fn reasoning(&mut self, text: &str, out: &mut Vec<Bytes>) {
        self.delta(Kind::Thinking, quote(text).as_bytes(), text, out);
    }

    /// A tool call's arguments delta of `text`.
    pub fn tool_call(&mut self, text: &str, out: &mut Vec<Bytes>) {
        self.delta(Kind::Tool, quote(text).as_bytes(), text, out);
    }

    /// The stream's next bookkeeping event(s) on the way to output of kind
    /// `next` (`None`: no more output): the opening events, else the events
    /// that close the open block and open one of kind `next`, else those
    /// closing the open block before the end, else one event that changes
    /// nothing (an empty chat delta, Responses `response.in_progress`,
    /// Anthropic `message_delta` without a stop reason).
    pub fn bookkeeping(&mut self, next: Option<Kind>, out: &mut Vec<Bytes>) {
        let open_kind = self.block.as_ref().map(|b| b.kind);
        match next {
            _ if !self.opened => self.open(out),
            Some(kind) if open_kind != Some(kind) => self.enter(kind, out),
            None if open_kind.is_some() => self.leave(out),
            _ => match self.dialect {
                Dialect::OpenAiChat => {
                    let empty = self.chunk(r#"[{"index":0,"delta":{},"finish_reason":null}]"#, "");
                    out.push(event(None, &[empty.as_bytes()]));
                }
                Dialect::OpenAiResponses => {
                    let response = self.response_object("in_progress", r#""output":[],"usage":null"#);
                    self.responses("response.in_progress", format!(r#""response":{response}"#).as_bytes(), out);
                }
                Dialect::AnthropicMessages => out.push(anthropic_message_delta(None, self.output_tokens)),
            },
        }
    }

    /// A content delta whose text is not valid UTF-8.
    pub fn invalid_utf8(&mut self, out: &mut Vec<Bytes>) {
        self.delta(Kind::Text, INVALID_UTF8, "\u{FFFD}", out);
    }

    /// One keep-alive: a comment for OpenAI dialects, `event: ping` for
    /// Anthropic. Does not open the stream (callers do).
    pub fn ping(&self) -> Bytes {
        match self.dialect {
            Dialect::OpenAiChat | Dialect::OpenAiResponses => Bytes::from_static(b": keep-alive\n\n"),
            Dialect::AnthropicMessages => Bytes::from_static(b"event: ping\ndata: {\"type\": \"ping\"}\n\n"),
        }
    }

    /// An event with its `event:` line but no `data:` field.
    pub fn missing_data(&mut self, out: &mut Vec<Bytes>) {
        self.open(out);
        let name: &'static [u8] = match self.dialect {
            Dialect::OpenAiChat => b"event: message\n\n",
            Dialect::OpenAiResponses => b"event: response.output_text.delta\n\n",
            Dialect::AnthropicMessages => b"event: content_block_delta\n\n",
        };
        out.push(Bytes::from_static(name));
    }

    /// The start of a `data:` line of `bytes` filler bytes, without its end.
    pub fn long_line(&mut self, bytes: usize, out: &mut Vec<Bytes>) {
        self.open(out);
        let mut line = Vec::with_capacity(bytes + 6);
        line.extend_from_slice(b"data: ");
        line.resize(bytes + 6, b'x');
        out.push(Bytes::from(line));
    }

    /// An in-stream error event.
    pub fn error(&mut self, kind: StreamError, message: Option<&str>, failed: bool, out: &mut Vec<Bytes>) {
        self.open(out);
        let error = ProviderError::for_stream(kind, message);
        match self.dialect {
            Dialect::OpenAiChat => out.push(event(None, &[error.body(Dialect::OpenAiChat).as_bytes()])),
            Dialect::OpenAiResponses if failed => {
                let failure = format!(
                    r#""output":[],"usage":null,"error":{{"code":{},"message":{}}}"#,
                    quote(error.responses_code()),
                    quote(&error.openai_message)
                );
                let fields = format!(r#""response":{}"#, self.response_object("failed", &failure));
                self.responses("response.failed", fields.as_bytes(), out);
            }
            Dialect::OpenAiResponses => {
                let fields =
                    format!(r#""code":{},"message":{}"#, quote(error.responses_code()), quote(&error.openai_message));
                self.responses("error", fields.as_bytes(), out);
            }
            Dialect::AnthropicMessages => out.push(event(Some("error"), &[error.anthropic_event().as_bytes()])),
        }
    }

    /// The terminal events of a normal finish.
    pub fn finish(&mut self, out: &mut Vec<Bytes>) {
        self.open(out);
        self.leave(out);
        let (prompt, output) = (PROMPT_TOKENS, self.output_tokens);
        match self.dialect {
            Dialect::OpenAiChat => {
                out.push(chat_finish(&self.chunk_head(), "stop"));
                let usage = format!(
                    r#","usage":{{"prompt_tokens":{prompt},"completion_tokens":{output},"total_tokens":{}}}"#,
                    prompt + output
                );
                out.push(event(None, &[self.chunk("[]", &usage).as_bytes()]));
                out.push(Bytes::from_static(CHAT_DONE));
            }
            Dialect::OpenAiResponses => {
                let rest = format!(
                    r#""output":[{}],"usage":{{"input_tokens":{prompt},"output_tokens":{output},"total_tokens":{}}}"#,
                    self.items.join(","),
                    prompt + output
                );
                let fields = format!(r#""response":{}"#, self.response_object("completed", &rest));
                self.responses("response.completed", fields.as_bytes(), out);
            }
            Dialect::AnthropicMessages => {
                out.push(anthropic_message_delta(Some("end_turn"), output));
                out.push(anthropic_event("message_stop", ""));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(dialect: Dialect, script: impl FnOnce(&mut Renderer, &mut Vec<Bytes>)) -> Vec<String> {
        let mut renderer = Renderer::new(dialect, "m-1");
        let mut out = Vec::new();
        script(&mut renderer, &mut out);
        out.iter().map(|e| String::from_utf8_lossy(e).into_owned()).collect()
    }

    fn healthy(r: &mut Renderer, out: &mut Vec<Bytes>) {
        r.content("tok ", out);
        r.content("end", out);
        r.finish(out);
    }

    /// Every `data:` payload of a stream is JSON (except `[DONE]`).
    fn assert_json(events: &[String]) {
        for e in events {
            for line in e.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|d| *d != "[DONE]") {
                assert!(serde_json::from_str::<serde_json::Value>(line).is_ok(), "not JSON: {line}");
            }
        }
    }

    #[test]
    fn chat_stream_is_exact() {
        let events = render(Dialect::OpenAiChat, healthy);
        let head = r#"data: {"id":"chatcmpl-sim","object":"chat.completion.chunk","created":1700000000,"model":"m-1","choices":"#;
        let expected = [
            format!(
                "{head}[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"finish_reason\":null}}]}}\n\n"
            ),
            format!("{head}[{{\"index\":0,\"delta\":{{\"content\":\"tok \"}},\"finish_reason\":null}}]}}\n\n"),
            format!("{head}[{{\"index\":0,\"delta\":{{\"content\":\"end\"}},\"finish_reason\":null}}]}}\n\n"),
            format!("{head}[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n"),
            format!("{head}[],\"usage\":{{\"prompt_tokens\":25,\"completion_tokens\":2,\"total_tokens\":27}}}}\n\n"),
            "data: [DONE]\n\n".to_owned(),
        ];
        assert_eq!(events, expected);
        let reasoning = render(Dialect::OpenAiChat, |r, out| r.reasoning("hm", out));
        assert!(reasoning[1].contains(r#""delta":{"reasoning_content":"hm"},"finish_reason":null}]}"#));
    }

    #[test]
    fn responses_stream_is_exact_and_sequenced() {
        let events = render(Dialect::OpenAiResponses, healthy);
        let names: Vec<&str> = events.iter().map(|e| e.lines().next().unwrap_or("")).collect();
        assert_eq!(
            names,
            [
                "event: response.created",
                "event: response.in_progress",
                "event: response.output_item.added",
                "event: response.content_part.added",
                "event: response.output_text.delta",
                "event: response.output_text.delta",
                "event: response.output_text.done",
                "event: response.content_part.done",
                "event: response.output_item.done",
                "event: response.completed",
            ]
        );
        assert_eq!(
            events[4],
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_sim\",\
             \"output_index\":0,\"content_index\":0,\"delta\":\"tok \",\"sequence_number\":4}\n\n"
        );
        assert_json(&events);
        let done: serde_json::Value = serde_json::from_str(events[9].lines().nth(1).unwrap()[6..].trim()).unwrap();
        assert_eq!(done["type"], "response.completed");
        assert_eq!(done["sequence_number"], 9);
        assert_eq!(done["response"]["status"], "completed");
        assert_eq!(done["response"]["output"][0]["content"][0]["text"], "tok end");
        assert_eq!(done["response"]["usage"]["output_tokens"], 2);
    }

    #[test]
    fn responses_reasoning_then_text_are_two_items() {
        let events = render(Dialect::OpenAiResponses, |r, out| {
            r.reasoning("think", out);
            r.content("say", out);
            r.finish(out);
        });
        assert_json(&events);
        let joined = events.concat();
        assert!(joined.contains(r#""type":"response.reasoning_summary_text.delta","item_id":"rs_sim","output_index":0,"summary_index":0,"delta":"think""#));
        assert!(joined.contains(r#""type":"response.output_text.delta","item_id":"msg_sim","output_index":1"#));
        assert!(joined.find("response.reasoning_summary_part.done") < joined.find("response.content_part.added"));
    }

    #[test]
    fn anthropic_stream_is_exact() {
        let events = render(Dialect::AnthropicMessages, |r, out| {
            r.reasoning("think", out);
            healthy(r, out);
        });
        let expected = [
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_sim\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m-1\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
            "event: ping\ndata: {\"type\": \"ping\"}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"think\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"c2ltdWxhdGVkIHNpZ25hdHVyZQ==\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"tok \"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"end\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ];
        assert_eq!(events, expected);
    }

    #[test]
    fn errors_take_each_dialects_form() {
        let chat = render(Dialect::OpenAiChat, |r, out| r.error(StreamError::ServerError, None, false, out));
        assert_eq!(
            chat[1],
            "data: {\"error\":{\"message\":\"The server had an error while processing your request. Sorry about that!\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"
        );
        let anthropic = render(Dialect::AnthropicMessages, |r, out| r.error(StreamError::Overloaded, None, false, out));
        assert_eq!(
            anthropic[1],
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
        );
        let event =
            render(Dialect::OpenAiResponses, |r, out| r.error(StreamError::ServerError, Some("boom"), false, out));
        assert_eq!(
            event[2],
            "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"boom\",\"sequence_number\":2}\n\n"
        );
        let failed = render(Dialect::OpenAiResponses, |r, out| r.error(StreamError::ServerError, None, true, out));
        assert_json(&failed);
        assert!(failed[2].starts_with("event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{"));
        assert!(failed[2].contains(r#""status":"failed""#) && failed[2].contains(r#""error":{"code":"server_error""#));
    }

    #[test]
    fn malformed_events() {
        let mut renderer = Renderer::new(Dialect::AnthropicMessages, "m");
        let mut out = Vec::new();
        renderer.invalid_utf8(&mut out);
        let delta = out.last().unwrap();
        assert!(std::str::from_utf8(delta).is_err());
        assert!(delta.starts_with(b"event: content_block_delta\ndata: {"));
        out.clear();
        renderer.missing_data(&mut out);
        assert_eq!(out, [Bytes::from_static(b"event: content_block_delta\n\n")]);
        out.clear();
        renderer.long_line(100, &mut out);
        assert_eq!(out[0].len(), 106);
        assert!(out[0].starts_with(b"data: xxx") && !out[0].contains(&b'\n'));
    }
}
