//! A stream's last text delta kept as a template, so the next delta laid
//! out the same way is read by comparing bytes instead of parsing JSON.
//!
//! A provider sends nearly every event of a stream in one layout: the same
//! keys in the same order, the same id, model and flags, and only the text
//! (sometimes also a counter or random padding) different. A [`Shape`] is
//! one such payload split into constant bytes and holes: the text it
//! delivered, and the strings and numbers its dialect skipped. A new payload
//! matches when its constant bytes are the same and each hole holds a valid
//! token of its kind. Putting one JSON string token in place of another (or
//! a number for a number) keeps a document valid and changes nothing else
//! it means, so a matching payload decodes exactly as the learned one did,
//! with its own text; the fast path's contract with serde (see
//! `fast_json`) carries over. `providers::tests` checks that decoding with
//! shapes equals decoding without them. Anything else is read in full.

use std::borrow::Cow;

use super::fast_json::Scanner;
use crate::core::event::EventClass;
use crate::core::upstream::Decoded;

/// What may stand in a hole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// Any string (a value the dialect skips).
    String,
    /// Any number (a value the dialect skips).
    Number,
    /// The text the event delivers.
    Text,
}

/// A token's place in a payload, as byte offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hole {
    start: usize,
    end: usize,
    token: Token,
}

impl Hole {
    pub(super) fn string(start: usize, end: usize) -> Hole {
        Hole { start, end, token: Token::String }
    }

    pub(super) fn number(start: usize, end: usize) -> Hole {
        Hole { start, end, token: Token::Number }
    }

    pub(super) fn text(start: usize, end: usize) -> Hole {
        Hole { start, end, token: Token::Text }
    }
}

/// The holes a scanner noted in one payload, in order. Kept by the stream
/// and reused, so noting costs no allocation per event.
#[derive(Debug, Default)]
pub(super) struct Layout {
    holes: Vec<Hole>,
    /// The scanner read the whole payload (it did not decline).
    complete: bool,
}

impl Layout {
    pub(super) fn clear(&mut self) {
        self.holes.clear();
        self.complete = false;
    }

    pub(super) fn push(&mut self, hole: Hole) {
        self.holes.push(hole);
    }

    pub(super) fn complete(&mut self) {
        self.complete = true;
    }
}

/// A learned text delta: its SSE event name, its payload and holes, and the
/// class of event it decoded to.
#[derive(Debug)]
pub(super) struct Shape {
    event: String,
    payload: String,
    holes: Vec<Hole>,
    /// Which hole is the text.
    text: usize,
    class: EventClass,
}

impl Shape {
    /// A shape from a payload the fast path read whole (`layout`) and that
    /// decoded to exactly one event carrying its one text hole, not empty
    /// (chat turns an empty delta into a lifecycle event).
    pub(super) fn learn(event: &str, payload: &str, layout: &Layout, decoded: &[Decoded]) -> Option<Shape> {
        let [Decoded::Event { class, text }] = decoded else { return None };
        if !layout.complete || text.is_empty() {
            return None;
        }
        let mut texts = layout.holes.iter().enumerate().filter(|(_, hole)| hole.token == Token::Text);
        let (at, hole) = texts.next()?;
        if texts.next().is_some() || Scanner::at(payload, hole.start).text()? != **text {
            return None;
        }
        let (event, payload) = (event.to_owned(), payload.to_owned());
        Some(Shape { event, payload, holes: layout.holes.clone(), text: at, class: *class })
    }

    /// `payload` decoded, if it matches this shape and its text is not
    /// empty.
    pub(super) fn read<'q>(&self, event: &str, payload: &'q str) -> Option<(EventClass, Cow<'q, str>)> {
        // Most events have no name; comparing two empty strings with
        // `!=` can cost 100 ns here (glibc's memcmp probes a dangling
        // pointer with a masked load, which some CPUs handle in microcode).
        if event.len() != self.event.len() || (!event.is_empty() && event != self.event) {
            return None;
        }
        let (learned, new) = (self.payload.as_bytes(), payload.as_bytes());
        // Usually everything before the text is byte for byte the same.
        let before = self.holes[self.text].start;
        let (mut holes, mut at_learned, mut at_new) = match new.get(..before) {
            Some(same) if same == &learned[..before] => (&self.holes[self.text..], before, before),
            _ => (&self.holes[..], 0, 0),
        };
        let mut text = None;
        while let Some((hole, rest)) = holes.split_first() {
            holes = rest;
            // The constant bytes and the same token as learned, or else the
            // constant bytes and any token of the hole's kind.
            let same = &learned[at_learned..hole.end];
            if hole.token != Token::Text && new[at_new..].starts_with(same) {
                (at_learned, at_new) = (hole.end, at_new + same.len());
                continue;
            }
            let constant = &learned[at_learned..hole.start];
            if !new[at_new..].starts_with(constant) {
                return None;
            }
            let mut scanner = Scanner::at(payload, at_new + constant.len());
            match hole.token {
                Token::String => scanner.string_token()?,
                Token::Number => scanner.number()?,
                Token::Text => text = Some(scanner.text()?),
            }
            (at_learned, at_new) = (hole.end, scanner.position());
        }
        if new[at_new..] != learned[at_learned..] {
            return None;
        }
        text.filter(|text| !text.is_empty()).map(|text| (self.class, text))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::fast_json_tests::{
        anthropic_event, chat_chunk, edits, json_string, mutate, number, responses_event,
    };
    use super::super::{Dialect, Shapes, decode, sse::SseItem};
    use super::*;

    const CHAT: &str = r#"{"id":"chatcmpl-B9","object":"chat.completion.chunk","created":1741570252,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"tok "},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x1"}"#;

    /// Decodes `payloads` in order on one stream; returns the last one's
    /// output and whether a learned shape read it.
    fn last_of(dialect: Dialect, event: &str, payloads: &[&str]) -> (Vec<Decoded>, bool) {
        let (mut state, mut shapes) = (Default::default(), Shapes::default());
        let mut out = Vec::new();
        let mut read = false;
        for data in payloads {
            out.clear();
            read = shapes.learned.as_ref().is_some_and(|shape| shape.read(event, data).is_some());
            decode(dialect, SseItem::Event { event, data, id: None }, &mut state, &mut shapes, &mut out);
        }
        (out, read)
    }

    /// What a fresh stream learns from its first event.
    fn learned_from(dialect: Dialect, event: &str, data: &str) -> Option<Shape> {
        let (mut state, mut shapes, mut out) = (Default::default(), Shapes::default(), Vec::new());
        decode(dialect, SseItem::Event { event, data, id: None }, &mut state, &mut shapes, &mut out);
        shapes.learned
    }

    fn chat_with(from: &str, to: &str) -> String {
        assert!(CHAT.contains(from), "{from}");
        CHAT.replacen(from, to, 1)
    }

    fn content(text: &str) -> Vec<Decoded> {
        vec![Decoded::Event { class: EventClass::Content, text: text.to_owned().into() }]
    }

    #[test]
    fn a_delta_laid_out_like_the_last_is_read_from_the_shape() {
        let cases = [
            (chat_with("tok ", "Hello"), "Hello"),
            (chat_with("tok ", r#"a\"b\u00e9\ud83d\ude00"#), "a\"b\u{e9}\u{1f600}"),
            (chat_with("x1", "padding that varies"), "tok "),
            (chat_with("1741570252", "-1.5e3"), "tok "),
            (chat_with("chatcmpl-B9", r"chatcmpl-C0\n"), "tok "),
            (chat_with("tok ", "é").replacen("x1", "", 1).replacen("\"index\":0", "\"index\":12", 1), "é"),
        ];
        for (payload, text) in cases {
            let (out, read) = last_of(Dialect::OpenAiChat, "", &[CHAT, &payload]);
            assert_eq!(out, content(text), "{payload}");
            assert!(read, "not read from the shape: {payload}");
        }
    }

    #[test]
    fn anything_else_is_read_in_full_and_decodes_the_same() {
        let cases = [
            // Another layout: a key added, renamed or reordered.
            chat_with(r#""usage":null"#, r#""usage":null,"extra":1"#),
            chat_with("model", "modal"),
            chat_with(r#""logprobs":null,"finish_reason":null"#, r#""finish_reason":null,"logprobs":null"#),
            // A value the dialect reads, changed.
            chat_with(r#""finish_reason":null"#, r#""finish_reason":"stop""#),
            chat_with(r#"{"content":"tok "}"#, r#"{"content":"tok ","tool_calls":[]}"#),
            // An empty text (chat makes it a lifecycle event).
            chat_with("tok ", ""),
            // A hole holding something other than its kind of token.
            chat_with("1741570252", r#""1741570252""#),
            chat_with(r#""chatcmpl-B9""#, "7"),
            chat_with(r#""x1""#, "null"),
            chat_with("1741570252", "01"),
            chat_with("tok ", "\u{1}"),
            chat_with("tok ", r"\ud83d"),
            chat_with("tok ", r"\x"),
            // Not JSON any more.
            chat_with(r#""x1"}"#, r#""x1""#),
            chat_with("tok ", "tok\""),
            format!("{CHAT} x"),
        ];
        for payload in cases {
            let (out, read) = last_of(Dialect::OpenAiChat, "", &[CHAT, &payload]);
            assert!(!read, "read from the shape: {payload}");
            assert_eq!(out, last_of(Dialect::OpenAiChat, "", &[&payload]).0, "{payload}");
        }
    }

    #[test]
    fn named_events_match_their_name_too() {
        let delta = r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","logprobs":[]}"#;
        let next = delta.replacen(":4,", ":5,", 1).replacen("Hi", " there", 1);
        let event = "response.output_text.delta";
        let (out, read) = last_of(Dialect::OpenAiResponses, event, &[delta, &next]);
        assert!(read);
        assert_eq!(out, content(" there"));
        // A nameless copy is not the same event (the JSON type wins either
        // way here, but the shape does not know that).
        let shape = learned_from(Dialect::OpenAiResponses, event, delta).expect("a text delta is learned");
        assert!(shape.read("", &next).is_none());
    }

    #[test]
    fn only_single_text_deltas_become_shapes() {
        let not_learned = [
            (Dialect::OpenAiChat, chat_with(r#""finish_reason":null"#, r#""finish_reason":"stop""#)),
            (Dialect::OpenAiChat, chat_with(r#"{"content":"tok "}"#, r#"{"content":"a","reasoning_content":"b"}"#)),
            (Dialect::OpenAiChat, chat_with(r#"{"content":"tok "}"#, r#"{"role":"assistant","content":""}"#)),
            (Dialect::OpenAiChat, chat_with("tok ", r"\ud83d")),
            (Dialect::AnthropicMessages, r#"{"type":"ping"}"#.to_owned()),
            (
                Dialect::AnthropicMessages,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","text":"x"}}"#.to_owned(),
            ),
        ];
        for (dialect, payload) in not_learned {
            assert!(learned_from(dialect, "", &payload).is_none(), "learned {payload}");
        }
    }

    /// Text deltas of one dialect, two at a time: the same members in the
    /// same (generated) order, with values generated for each, the second
    /// then edited, so it often matches the first's shape and sometimes
    /// only nearly.
    fn delta_pairs(dialect: Dialect) -> impl Strategy<Value = (String, String)> {
        // Mostly valid tokens, so that pairs often match; now and then any.
        let string = || {
            const PIECES: &[&str] =
                &["tok ", "Hello", " ", "é", "日本語", "😀", r"\n", r#"\""#, r"\u00e9", r"\uD83D\uDE00"];
            let valid = proptest::collection::vec(proptest::sample::select(PIECES), 1..4)
                .prop_map(|pieces| format!("\"{}\"", pieces.concat()));
            prop_oneof![6 => valid, 1 => json_string()]
        };
        let number = || {
            let valid = proptest::sample::select(&["0", "7", "1700000000", "-12", "1.5", "1e3", "-4e-2"][..]);
            prop_oneof![6 => valid.prop_map(str::to_owned), 1 => number()]
        };
        let values = move || (proptest::collection::vec(string(), 4), proptest::collection::vec(number(), 3));
        let members = match dialect {
            Dialect::OpenAiChat => 7,
            Dialect::AnthropicMessages => 3,
            Dialect::OpenAiResponses => 8,
        };
        (Just((0..members).collect::<Vec<usize>>()).prop_shuffle(), values(), values(), edits()).prop_map(
            move |(order, (s1, n1), (s2, n2), edits)| {
                let first = delta(dialect, &order, &s1, &n1);
                let second = mutate(&delta(dialect, &order, &s2, &n2), &edits);
                (first, second)
            },
        )
    }

    /// One text delta from its member order, strings `s` (the text is
    /// `s[0]`) and numbers `n`.
    fn delta(dialect: Dialect, order: &[usize], s: &[String], n: &[String]) -> String {
        let members = match dialect {
            Dialect::OpenAiChat => vec![
                format!(r#""id":{}"#, s[1]),
                r#""object":"chat.completion.chunk""#.to_owned(),
                format!(r#""created":{}"#, n[0]),
                format!(r#""model":{}"#, s[2]),
                format!(
                    r#""choices":[{{"index":{},"delta":{{"content":{}}},"logprobs":null,"finish_reason":null}}]"#,
                    n[1], s[0]
                ),
                r#""usage":null"#.to_owned(),
                format!(r#""obfuscation":{}"#, s[3]),
            ],
            Dialect::AnthropicMessages => vec![
                r#""type":"content_block_delta""#.to_owned(),
                format!(r#""index":{}"#, n[0]),
                format!(r#""delta":{{"type":"text_delta","text":{}}}"#, s[0]),
            ],
            Dialect::OpenAiResponses => vec![
                r#""type":"response.output_text.delta""#.to_owned(),
                format!(r#""sequence_number":{}"#, n[0]),
                format!(r#""item_id":{}"#, s[1]),
                format!(r#""output_index":{}"#, n[1]),
                format!(r#""content_index":{}"#, n[2]),
                format!(r#""delta":{}"#, s[0]),
                r#""logprobs":[]"#.to_owned(),
                format!(r#""obfuscation":{}"#, s[2]),
            ],
        };
        let members: Vec<&str> = order.iter().map(|&i| members[i].as_str()).collect();
        format!("{{{}}}", members.join(","))
    }

    /// The contract: `second`, decoded after `first` on one stream, decodes
    /// as it does on a fresh stream. Returns whether a shape read it.
    fn same_after(dialect: Dialect, event: &str, first: &str, second: &str) -> Result<bool, TestCaseError> {
        let (after, read) = last_of(dialect, event, &[first, second]);
        prop_assert_eq!(after, last_of(dialect, event, &[second]).0, "after {:?}: {:?}", first, second);
        Ok(read)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn chat_shapes_decode_as_a_full_read((first, second) in delta_pairs(Dialect::OpenAiChat)) {
            same_after(Dialect::OpenAiChat, "", &first, &second)?;
        }

        #[test]
        fn anthropic_shapes_decode_as_a_full_read((first, second) in delta_pairs(Dialect::AnthropicMessages)) {
            same_after(Dialect::AnthropicMessages, "content_block_delta", &first, &second)?;
        }

        #[test]
        fn responses_shapes_decode_as_a_full_read((first, second) in delta_pairs(Dialect::OpenAiResponses)) {
            same_after(Dialect::OpenAiResponses, "response.output_text.delta", &first, &second)?;
        }

        #[test]
        fn any_event_after_any_event_decodes_as_a_full_read(
            first in prop_oneof![chat_chunk(), anthropic_event(), responses_event()],
            second in prop_oneof![chat_chunk(), anthropic_event(), responses_event()],
            edits in edits(),
        ) {
            for dialect in Dialect::ALL {
                same_after(dialect, "", &first, &mutate(&second, &edits))?;
            }
        }
    }

    /// The properties above test the shape's answers, not only its
    /// refusals: it reads a good share of the generated pairs.
    #[test]
    fn generated_pairs_are_often_read_from_a_shape() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;

        let mut runner = TestRunner::deterministic();
        for dialect in Dialect::ALL {
            let strategy = delta_pairs(dialect);
            let read = (0..1000)
                .filter(|_| {
                    let (first, second) = strategy.new_tree(&mut runner).expect("a pair").current();
                    same_after(dialect, "", &first, &second).expect("agrees")
                })
                .count();
            assert!(read >= 150, "{dialect}: only {read} of 1000 pairs were read from a shape");
        }
    }
}
