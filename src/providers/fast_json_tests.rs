//! The fast JSON path (`fast_json` and each dialect's `scan`) held to its
//! contract: whenever it answers, serde accepts the same payload and builds
//! the same value. Payloads are generated in each dialect's shapes (any
//! field order, extra and duplicate fields, nulls, escapes, unicode,
//! surrogate pairs and lone halves, odd numbers), then mutated.

use proptest::prelude::*;
use serde::Deserialize;

use super::{anthropic, openai_chat, openai_responses};

/// The contract for one payload: returns whether the fast path answered.
fn same_as_serde<'a, T>(scan: fn(&'a str) -> Option<T>, payload: &'a str) -> Result<bool, TestCaseError>
where
    T: Deserialize<'a> + PartialEq + std::fmt::Debug,
{
    let Some(fast) = scan(payload) else { return Ok(false) };
    match serde_json::from_str::<T>(payload) {
        Ok(slow) => prop_assert_eq!(fast, slow, "payload {:?}", payload),
        Err(e) => prop_assert!(false, "fast path answered {:?} where serde fails ({}): {:?}", fast, e, payload),
    }
    Ok(true)
}

fn check_all(payload: &str) -> Result<(), TestCaseError> {
    same_as_serde(openai_chat::scan, payload)?;
    same_as_serde(anthropic::scan, payload)?;
    same_as_serde(openai_responses::scan, payload)?;
    Ok(())
}

/// Pieces of string contents, valid and not.
const STRING_PIECES: &[&str] = &[
    "tok ",
    "Hello",
    "",
    " ",
    "é",
    "日本語",
    "😀",
    "\\n",
    "\\t",
    "\\\"",
    "\\\\",
    "\\/",
    "\\b",
    "\\f",
    "\\r",
    "\\u00e9",
    "\\u0000",
    "\\u001f",
    "\\uD83D\\uDE00",
    "\\ud83d\\ude00",
    "\\uD83D",
    "\\uDE00",
    "\\uD83Dx",
    "\\uD83D\\u0041",
    "\\uD83D\\n",
    "\\uD83D\\uD83D\\uDE00",
    "\\uzzzz",
    "\\u12",
    "\\x",
    "\t",
    "\u{1}",
    "\u{7f}",
    "text_delta",
    "content_block_delta",
    "response.output_text.delta",
];

pub(super) fn json_string() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(STRING_PIECES), 0..4).prop_map(|p| format!("\"{}\"", p.concat()))
}

pub(super) fn number() -> impl Strategy<Value = String> {
    proptest::sample::select(
        &[
            "0",
            "-0",
            "7",
            "1700000000",
            "-12",
            "1.5",
            "0.25",
            "1e3",
            "2E+3",
            "-4e-2",
            "1e400",
            "18446744073709551616",
            "01",
            "-",
            "1.",
            ".5",
            "1e",
            "1e+",
            "+1",
            "0x10",
            "1.5.2",
        ][..],
    )
    .prop_map(str::to_owned)
}

fn whitespace() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(&["", "", "", " ", "\n", " \t\r\n "][..])
}

/// Any JSON value (and some near misses), nested a few levels.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        3 => json_string(),
        2 => number(),
        2 => proptest::sample::select(&["null", "true", "false", "nul", "nulll", "[]", "{}"][..]).prop_map(str::to_owned),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(|items| format!("[{}]", items.join(","))),
            proptest::collection::vec((json_string(), inner), 0..4).prop_map(|members| {
                let members: Vec<String> = members.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

/// Text or null, as text fields carry.
fn optional_text() -> impl Strategy<Value = String> {
    prop_oneof![4 => json_string(), 1 => Just("null".to_owned()), 1 => value()]
}

/// An object of `members` in the generated order, with whitespace.
fn object(members: impl Strategy<Value = (&'static str, String)>, max: usize) -> impl Strategy<Value = String> {
    (proptest::collection::vec(members, 0..max), whitespace()).prop_map(|(members, ws)| {
        let members: Vec<String> = members.into_iter().map(|(k, v)| format!("{ws}\"{k}\"{ws}:{ws}{v}{ws}")).collect();
        format!("{{{}}}", members.join(","))
    })
}

fn keyed(key: &'static str, value: impl Strategy<Value = String>) -> impl Strategy<Value = (&'static str, String)> {
    value.prop_map(move |v| (key, v))
}

pub(super) fn chat_chunk() -> impl Strategy<Value = String> {
    let delta = object(
        prop_oneof![
            keyed("role", json_string()),
            keyed("content", optional_text()),
            keyed("reasoning_content", optional_text()),
            keyed("reasoning", optional_text()),
            keyed("tool_calls", prop_oneof![Just("null".to_owned()), value()]),
            keyed("refusal", value()),
            keyed("cont\\u0065nt", json_string()),
        ],
        4,
    );
    let choice = object(
        prop_oneof![
            1 => keyed("index", number()),
            1 => keyed("delta", prop_oneof![4 => delta, 1 => Just("null".to_owned()), 1 => value()]),
            1 => keyed("logprobs", value()),
            1 => keyed("finish_reason", optional_text()),
        ],
        5,
    );
    let choices = prop_oneof![
        6 => (choice, proptest::collection::vec(value(), 0..2)).prop_map(|(first, rest)| {
            format!("[{}]", std::iter::once(first).chain(rest).collect::<Vec<_>>().join(","))
        }),
        1 => Just("[]".to_owned()),
        1 => Just("null".to_owned()),
        1 => value(),
    ];
    object(
        prop_oneof![
            1 => keyed("id", json_string()),
            1 => keyed("object", json_string()),
            1 => keyed("created", number()),
            4 => keyed("choices", choices),
            1 => keyed("usage", value()),
            1 => keyed("error", prop_oneof![Just("null".to_owned()), value()]),
        ],
        7,
    )
}

pub(super) fn anthropic_event() -> impl Strategy<Value = String> {
    let delta = object(
        prop_oneof![
            keyed("type", json_string()),
            keyed("text", optional_text()),
            keyed("thinking", optional_text()),
            keyed("partial_json", optional_text()),
            keyed("stop_reason", optional_text()),
            keyed("signature", value()),
        ],
        5,
    );
    object(
        prop_oneof![
            2 => keyed("type", json_string()),
            1 => keyed("index", number()),
            3 => keyed("delta", prop_oneof![4 => delta, 1 => Just("null".to_owned()), 1 => value()]),
            1 => keyed("error", prop_oneof![Just("null".to_owned()), value()]),
            1 => keyed("message", value()),
        ],
        5,
    )
}

pub(super) fn responses_event() -> impl Strategy<Value = String> {
    object(
        prop_oneof![
            2 => keyed("type", json_string()),
            2 => keyed("delta", optional_text()),
            1 => keyed("item_id", json_string()),
            1 => keyed("sequence_number", number()),
            1 => keyed("response", prop_oneof![Just("null".to_owned()), value()]),
            1 => keyed("code", optional_text()),
            1 => keyed("message", optional_text()),
            1 => keyed("error", prop_oneof![Just("null".to_owned()), value()]),
        ],
        6,
    )
}

/// One edit of a payload, at a char position.
#[derive(Debug, Clone)]
pub(super) enum Edit {
    Delete(usize, usize),
    Insert(usize, &'static str),
}

pub(super) fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let insert = proptest::sample::select(
        &[
            "\"", "\\", "\\u", "{", "}", "[", "]", ",", ":", " ", "null", "0", "-", "e", ".", "\u{1}", "é", "}}",
            "\"a\":1,",
        ][..],
    );
    let edit = prop_oneof![
        (any::<usize>(), 1usize..4).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<usize>(), insert).prop_map(|(at, text)| Edit::Insert(at, text)),
    ];
    proptest::collection::vec(edit, 0..3)
}

pub(super) fn mutate(payload: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = payload.chars().collect();
    for edit in edits {
        match *edit {
            Edit::Delete(at, n) if !chars.is_empty() => {
                let at = at % chars.len();
                chars.drain(at..(at + n).min(chars.len()));
            }
            Edit::Delete(..) => {}
            Edit::Insert(at, text) => {
                let at = at % (chars.len() + 1);
                chars.splice(at..at, text.chars());
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn chat_fast_path_matches_serde(payload in chat_chunk(), edits in edits()) {
        check_all(&mutate(&payload, &edits))?;
    }

    #[test]
    fn anthropic_fast_path_matches_serde(payload in anthropic_event(), edits in edits()) {
        check_all(&mutate(&payload, &edits))?;
    }

    #[test]
    fn responses_fast_path_matches_serde(payload in responses_event(), edits in edits()) {
        check_all(&mutate(&payload, &edits))?;
    }

    #[test]
    fn any_text_matches_serde(payload in "[ -~é😀\\\\\"{}\\[\\]:,]{0,40}") {
        check_all(&payload)?;
    }
}

/// Every JSON payload of the fixtures: the fast path agrees with serde, and
/// it reads the common events (it is not declining its way to agreement).
#[test]
fn fixtures_match_serde_and_common_events_take_the_fast_path() {
    let fixtures: [(&str, &[u8]); 4] = [
        ("chat", include_bytes!("../../tests/fixtures/openai_chat.sse")),
        ("chat", include_bytes!("../../tests/fixtures/openai_chat_error.sse")),
        ("responses", include_bytes!("../../tests/fixtures/openai_responses.sse")),
        ("anthropic", include_bytes!("../../tests/fixtures/anthropic.sse")),
    ];
    let mut answered = 0;
    for (dialect, bytes) in fixtures {
        let text = std::str::from_utf8(bytes).expect("fixtures are UTF-8");
        for payload in text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim) {
            if !payload.starts_with('{') {
                continue;
            }
            let fast = match dialect {
                "chat" => same_as_serde(openai_chat::scan, payload),
                "responses" => same_as_serde(openai_responses::scan, payload),
                _ => same_as_serde(anthropic::scan, payload),
            };
            let fast = fast.unwrap_or_else(|e| panic!("{e}"));
            let delta = ["\"content\":\"", "output_text.delta", "text_delta"].iter().any(|m| payload.contains(m));
            assert!(fast || !delta, "a plain text delta was left to serde: {payload}");
            answered += usize::from(fast);
        }
    }
    assert!(answered >= 15, "the fast path answered only {answered} fixture payloads");
}

/// The shapes the fast path exists for, escapes included.
#[test]
fn text_deltas_are_read_fast_and_exactly() {
    let chat = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a\"b\\c\nd\u00e9\ud83d\ude00/"},"logprobs":null,"finish_reason":null}],"usage":null}"#;
    let chunk = openai_chat::scan(chat).expect("a chat text delta takes the fast path");
    assert_eq!(chunk, serde_json::from_str(chat).expect("valid"));
    let anthropic = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi \u2603"}}"#;
    assert!(same_as_serde(anthropic::scan, anthropic).expect("agrees"));
    let responses = r#"{"type":"response.output_text.delta","sequence_number":5,"item_id":"m","output_index":0,"content_index":0,"delta":"Hi"}"#;
    assert!(same_as_serde(openai_responses::scan, responses).expect("agrees"));
    for declined in [
        r#"{"choices":[{"delta":{"content":"\ud83d"}}]}"#,
        r#"{"choices":[{"delta":{"content":"a"},"delta":null}]}"#,
        r#"{"choices":[{"delta":{"cont\u0065nt":"a"}}]}"#,
        r#"{"choices":[{"delta":{"content":"a"}}]} x"#,
        r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
        r#"{"error":{"message":"boom"}}"#,
    ] {
        assert_eq!(openai_chat::scan(declined), None, "{declined}");
    }
}

/// The generated payloads reach the fast path often, so the properties
/// above test its answers, not only its refusals.
#[test]
fn generated_payloads_often_take_the_fast_path() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let mut sample = |strategy: BoxedStrategy<String>, scan: fn(&str) -> bool| {
        let answered =
            (0..1000).filter(|_| scan(&strategy.new_tree(&mut runner).expect("a payload").current())).count();
        assert!(answered >= 200, "the fast path answered only {answered} of 1000 generated payloads");
    };
    sample(chat_chunk().boxed(), |p| openai_chat::scan(p).is_some());
    sample(anthropic_event().boxed(), |p| anthropic::scan(p).is_some());
    sample(responses_event().boxed(), |p| openai_responses::scan(p).is_some());
}
