//! Dialect decoding of real-shaped streams, whole and split at every byte.

use proptest::prelude::*;

use super::Dialect;
use crate::core::event::EventClass;
use crate::core::upstream::{Decoded, Decoder};

fn decode(dialect: Dialect, bytes: &[u8], splits: &[usize]) -> Vec<Decoded> {
    let mut decoder = dialect.decoder();
    let mut out = Vec::new();
    let mut start = 0;
    for &split in splits.iter().chain([&bytes.len()]) {
        let end = split.clamp(start, bytes.len());
        decoder.feed(&bytes[start..end], &mut out);
        start = end;
    }
    decoder.finish(&mut out);
    out
}

fn whole(dialect: Dialect, bytes: &[u8]) -> Vec<Decoded> {
    decode(dialect, bytes, &[])
}

fn event(class: EventClass, text: &str) -> Decoded {
    Decoded::Event { class, text: text.to_owned().into() }
}

const CHAT: &[u8] = include_bytes!("../../tests/fixtures/openai_chat.sse");
const CHAT_ERROR: &[u8] = include_bytes!("../../tests/fixtures/openai_chat_error.sse");
const RESPONSES: &[u8] = include_bytes!("../../tests/fixtures/openai_responses.sse");
const RESPONSES_FAILED: &[u8] = include_bytes!("../../tests/fixtures/openai_responses_failed.sse");
const ANTHROPIC: &[u8] = include_bytes!("../../tests/fixtures/anthropic.sse");
const ANTHROPIC_OVERLOADED: &[u8] = include_bytes!("../../tests/fixtures/anthropic_overloaded.sse");

#[test]
fn openai_chat_stream() {
    use EventClass::*;
    assert_eq!(
        whole(Dialect::OpenAiChat, CHAT),
        vec![
            event(Lifecycle, ""),
            event(Keepalive, ""),
            event(Content, "Hello"),
            event(Content, ", world"),
            event(ToolCall, ""),
            event(ToolCall, "{\"city\":\"Paris\"}"),
            Decoded::StopReason("stop".into()),
            event(Lifecycle, ""),
            event(Lifecycle, ""),
            Decoded::Done,
        ]
    );
}

#[test]
fn openai_chat_reasoning_and_in_stream_error() {
    let got = whole(Dialect::OpenAiChat, CHAT_ERROR);
    assert_eq!(got[0], event(EventClass::Reasoning, "Let me think"));
    assert_eq!(got[1], event(EventClass::Content, "Done thinking"));
    assert_eq!(
        got[2],
        Decoded::Error {
            code: Some("server_error".into()),
            message: "The server had an error while processing your request. Sorry about that!".into()
        }
    );
}

#[test]
fn openai_responses_stream() {
    use EventClass::*;
    assert_eq!(
        whole(Dialect::OpenAiResponses, RESPONSES),
        vec![
            event(Lifecycle, ""),
            event(Lifecycle, ""),
            event(Lifecycle, ""),
            event(Lifecycle, ""),
            event(Reasoning, "Considering"),
            event(Content, "Hi"),
            event(Content, " there!"),
            event(Lifecycle, ""),
            Decoded::StopReason("completed".into()),
            Decoded::Done,
        ]
    );
    let failed = whole(Dialect::OpenAiResponses, RESPONSES_FAILED);
    assert_eq!(
        failed[1],
        Decoded::Error {
            code: Some("server_error".into()),
            message: "The model failed to generate a response.".into()
        }
    );
}

#[test]
fn anthropic_stream() {
    use EventClass::*;
    assert_eq!(
        whole(Dialect::AnthropicMessages, ANTHROPIC),
        vec![
            event(Lifecycle, ""),
            event(Lifecycle, ""),
            event(Keepalive, ""),
            event(Reasoning, "The user greets me."),
            event(Lifecycle, ""),
            event(Lifecycle, ""),
            event(Lifecycle, ""),
            event(Content, "Hello"),
            event(Content, "!"),
            event(Lifecycle, ""),
            event(Lifecycle, ""),
            event(ToolCall, "{\"location\": \"San Fra"),
            event(Lifecycle, ""),
            Decoded::StopReason("end_turn".into()),
            event(Lifecycle, ""),
            Decoded::Done,
        ]
    );
    let overloaded = whole(Dialect::AnthropicMessages, ANTHROPIC_OVERLOADED);
    assert_eq!(
        overloaded.last(),
        Some(&Decoded::Error { code: Some("overloaded_error".into()), message: "Overloaded".into() })
    );
}

#[test]
fn broken_bytes_are_malformed_not_a_panic() {
    let got = whole(Dialect::OpenAiChat, b"data: {not json\n\n");
    assert!(
        matches!(&got[..], [Decoded::Malformed(m)] if m.contains("openai-chat event `message` is not the expected JSON")),
        "{got:?}"
    );
    let got = whole(Dialect::AnthropicMessages, b"event: ping\ndata: \xff\xfe\n\n");
    assert!(matches!(got.last(), Some(Decoded::Malformed(m)) if m.contains("UTF-8")), "{got:?}");
}

#[test]
fn chat_streams_closed_after_a_finish_reason_are_done() {
    let text = b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"length\"}]}\n\n";
    let got = whole(Dialect::OpenAiChat, text);
    assert_eq!(got.last(), Some(&Decoded::Done));
    let text = b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n";
    assert!(!whole(Dialect::OpenAiChat, text).contains(&Decoded::Done));
}

#[test]
fn urls_follow_each_sdk_convention() {
    assert_eq!(Dialect::OpenAiChat.url("https://api.openai.com/v1/"), "https://api.openai.com/v1/chat/completions");
    assert_eq!(Dialect::OpenAiResponses.url("https://api.openai.com/v1"), "https://api.openai.com/v1/responses");
    assert_eq!(Dialect::AnthropicMessages.url("https://api.anthropic.com"), "https://api.anthropic.com/v1/messages");
    for dialect in Dialect::ALL {
        assert_eq!(Dialect::from_server_path(dialect.server_path()), Some(dialect));
        let root = "http://127.0.0.1:1";
        let base = if dialect == Dialect::AnthropicMessages { root.to_owned() } else { format!("{root}/v1") };
        assert_eq!(dialect.url(&base), format!("{root}{}", dialect.server_path()));
    }
    assert_eq!(Dialect::from_server_path("/v1/completions"), None);
}

proptest! {
    /// However the bytes are split, every dialect decodes the same thing.
    #[test]
    fn splitting_never_changes_the_result(mut splits in proptest::collection::vec(0usize..2600, 0..40)) {
        splits.sort_unstable();
        for (dialect, bytes) in [
            (Dialect::OpenAiChat, CHAT),
            (Dialect::OpenAiChat, CHAT_ERROR),
            (Dialect::OpenAiResponses, RESPONSES),
            (Dialect::AnthropicMessages, ANTHROPIC),
            (Dialect::AnthropicMessages, ANTHROPIC_OVERLOADED),
        ] {
            prop_assert_eq!(decode(dialect, bytes, &splits), whole(dialect, bytes));
        }
    }

    /// Arbitrary bytes never panic any dialect.
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600), split in 0usize..600) {
        for dialect in Dialect::ALL {
            decode(dialect, &bytes, &[split]);
        }
    }
}
