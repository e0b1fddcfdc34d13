//! The endings the guard gives a stream it cuts after content
//! (`providers::ending`), read by the real SDKs: the `openai` and
//! `anthropic` Python SDKs and the `openai` npm package, each streaming
//! from a loopback server that sends a few text deltas of its dialect,
//! then stalls briefly and ends as the guard would. With `error` each SDK
//! yields the partial text and then raises its own API error; with
//! `finish` it returns the partial text with a length finish and raises
//! nothing (bar the one helper that refuses a cut answer by design).
//!
//! Each case prints what the SDK did, to cite (`-- --nocapture`). The
//! clients come from `.ci/run` (see `tests/clients.rs`); where they are
//! absent the tests say so and pass (`STALLSCOPE_REQUIRE_EXTERNAL=1` fails
//! instead).

mod programs;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use programs::{Answer, openai_node, python, serve};
use serde_json::Value;
use stallscope::providers::Dialect;
use stallscope::providers::ending::{AfterContent, EndingState};
use stallscope::providers::sse::{SseItem, SseParser};

/// The text the deltas carry, which every SDK must have yielded.
const PARTIAL: &str = "Hello, world";

/// The error ending's message.
const MESSAGE: &str = "stallscope guard: the stream stalled after content (idle timer, 30 s)";

/// The SSE events a provider of `dialect` sends before it stalls: its
/// opening, then the deltas of [`PARTIAL`].
fn before_stall(dialect: Dialect) -> Vec<String> {
    let deltas = ["Hello", ", wor", "ld"];
    match dialect {
        Dialect::OpenAiChat => {
            let chunk = |delta: &str| {
                format!(
                    r#"data: {{"id":"chatcmpl-e1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-x","choices":[{{"index":0,"delta":{delta},"finish_reason":null}}]}}"#
                )
            };
            let mut events = vec![chunk(r#"{"role":"assistant","content":""}"#)];
            events.extend(deltas.iter().map(|d| chunk(&format!(r#"{{"content":"{d}"}}"#))));
            events
        }
        Dialect::OpenAiResponses => {
            let response = r#"{"id":"resp_e1","object":"response","created_at":1700000000,"status":"in_progress","model":"gpt-x","output":[],"usage":null}"#;
            let mut fields = vec![
                ("response.created", format!(r#""response":{response}"#)),
                ("response.in_progress", format!(r#""response":{response}"#)),
                (
                    "response.output_item.added",
                    r#""output_index":0,"item":{"id":"msg_e1","type":"message","status":"in_progress","role":"assistant","content":[]}"#.to_owned(),
                ),
                (
                    "response.content_part.added",
                    r#""item_id":"msg_e1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}"#.to_owned(),
                ),
            ];
            fields.extend(deltas.iter().map(|d| {
                (
                    "response.output_text.delta",
                    format!(r#""item_id":"msg_e1","output_index":0,"content_index":0,"delta":"{d}""#),
                )
            }));
            let numbered = fields.into_iter().enumerate();
            numbered
                .map(|(n, (name, f))| {
                    format!(r#"event: {name}{}data: {{"type":"{name}",{f},"sequence_number":{n}}}"#, "\n")
                })
                .collect()
        }
        Dialect::AnthropicMessages => {
            let mut events = vec![
                r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_e1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":1}}}"#.to_owned(),
                r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
                "event: ping\ndata: {\"type\": \"ping\"}".to_owned(),
            ];
            events.extend(deltas.iter().map(|d| {
                format!(
                    "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{d}\"}}}}"
                )
            }));
            events
        }
    }
}

/// What the server sends for a request to `path`
/// (`/{error|finish}{dialect's path}`): the events before the stall,
/// forwarded as the guard does (each noted in an [`EndingState`]), then
/// the ending, after 50 ms of silence.
fn stream(path: &str) -> Option<Vec<(Duration, Bytes)>> {
    let (how, rest) = path.strip_prefix('/')?.split_once('/')?;
    let how: AfterContent = how.parse().ok()?;
    let dialect = Dialect::from_server_path(&format!("/{rest}"))?;
    let mut state = EndingState::new(dialect, "asked-model");
    let mut frames = Vec::new();
    let mut parser = SseParser::new(SseParser::DEFAULT_MAX_LINE);
    for event in before_stall(dialect) {
        let bytes = Bytes::from(format!("{event}\n\n"));
        parser
            .feed(&bytes, &mut |item| {
                if let SseItem::Event { event, data, .. } = item {
                    state.observe(event, data);
                }
            })
            .unwrap();
        frames.push((Duration::from_millis(5), bytes));
    }
    let ending = state.end(how, MESSAGE);
    frames.extend(ending.into_iter().enumerate().map(|(n, e)| (Duration::from_millis(if n == 0 { 50 } else { 0 }), e)));
    Some(frames)
}

/// Serves [`stream`]s on loopback.
async fn server() -> SocketAddr {
    serve(|request| {
        let chunks = stream(request.uri().path());
        let status = if chunks.is_some() { 200 } else { 404 };
        let headers = vec![("content-type", "text/event-stream".to_owned())];
        Answer { status, headers, chunks: chunks.unwrap_or_default() }
    })
    .await
}

/// Each Python SDK way of streaming, against each ending: one JSON line a
/// case with the text it yielded, how it ended and what it raised.
const PYTHON: &str = r#"
import json, sys, openai, anthropic
root, key = sys.argv[1], sys.argv[2]
ask = [{"role": "user", "content": "hi"}]

def run(case, ending, body):
    got = {"sdk": case.split(" ")[0], "case": case, "ending": ending, "text": "", "end": None, "raised": None}
    try:
        body(got)
    except Exception as e:
        got["raised"] = type(e).__name__
        got["detail"] = {k: str(getattr(e, k)) for k in ("status_code", "type", "code") if getattr(e, k, None) is not None}
    print(json.dumps(got), flush=True)

for ending in ("error", "finish"):
    oa = openai.OpenAI(base_url=f"{root}/{ending}/v1", api_key=key, max_retries=0, timeout=10)
    an = anthropic.Anthropic(base_url=f"{root}/{ending}", api_key=key, max_retries=0, timeout=10)

    def chat(got):
        for chunk in oa.chat.completions.create(model="gpt-x", messages=ask, stream=True):
            if chunk.choices:
                got["text"] += chunk.choices[0].delta.content or ""
                got["end"] = chunk.choices[0].finish_reason or got["end"]

    def chat_helper(got):
        with oa.chat.completions.stream(model="gpt-x", messages=ask) as stream:
            for event in stream:
                if event.type == "content.delta":
                    got["text"] += event.delta
                if event.type == "chunk" and event.chunk.choices:
                    got["end"] = event.chunk.choices[0].finish_reason or got["end"]
            stream.get_final_completion()

    def terminal(got, event):
        if event.type in ("response.completed", "response.incomplete", "response.failed"):
            details = event.response.incomplete_details
            got["end"] = " ".join([event.type, event.response.status, details.reason if details else ""]).strip()
            got["final_text"] = event.response.output_text

    def responses(got):
        for event in oa.responses.create(model="gpt-x", input="hi", stream=True):
            if event.type == "response.output_text.delta":
                got["text"] += event.delta
            terminal(got, event)

    def responses_helper(got):
        with oa.responses.stream(model="gpt-x", input="hi") as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    got["text"] += event.delta
                terminal(got, event)
            stream.get_final_response()

    def messages_stream(got):
        starts = 0
        with an.messages.stream(model="claude-x", max_tokens=64, messages=ask) as stream:
            for event in stream:
                starts += event.type == "message_start"
                if event.type == "text":
                    got["text"] += event.text
            message = stream.get_final_message()
            got["end"], got["message_starts"] = message.stop_reason, starts
            got["final_text"] = "".join(b.text for b in message.content if b.type == "text")

    def messages_create(got):
        for event in an.messages.create(model="claude-x", max_tokens=64, messages=ask, stream=True):
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                got["text"] += event.delta.text
            if event.type == "message_delta":
                got["end"] = event.delta.stop_reason

    run("openai-python chat.completions.create(stream=True)", ending, chat)
    run("openai-python chat.completions.stream()", ending, chat_helper)
    run("openai-python responses.create(stream=True)", ending, responses)
    run("openai-python responses.stream()", ending, responses_helper)
    run("anthropic messages.stream()", ending, messages_stream)
    run("anthropic messages.create(stream=True)", ending, messages_create)
"#;

/// The same with the openai npm package.
const NODE: &str = r#"
const OpenAI = require(process.argv[1]);
const [root, key] = process.argv.slice(2);
const ask = [{ role: 'user', content: 'hi' }];

async function run(caseName, ending, body) {
  const got = { sdk: 'openai-node', case: caseName, ending, text: '', end: null, raised: null };
  try {
    await body(got);
  } catch (e) {
    got.raised = e.constructor.name;
    got.detail = {};
    for (const k of ['status', 'type', 'code']) if (e[k] != null) got.detail[k] = String(e[k]);
  }
  console.log(JSON.stringify(got));
}

function terminal(got, event) {
  if (['response.completed', 'response.incomplete', 'response.failed'].includes(event.type)) {
    const reason = event.response.incomplete_details?.reason ?? '';
    got.end = [event.type, event.response.status, reason].join(' ').trim();
  }
}

(async () => {
  for (const ending of ['error', 'finish']) {
    const client = new (OpenAI.default || OpenAI)({ baseURL: `${root}/${ending}/v1`, apiKey: key, maxRetries: 0 });
    await run('openai-node chat.completions.create({stream: true})', ending, async (got) => {
      const stream = await client.chat.completions.create({ model: 'gpt-x', messages: ask, stream: true });
      for await (const chunk of stream) {
        got.text += chunk.choices[0]?.delta?.content ?? '';
        got.end = chunk.choices[0]?.finish_reason ?? got.end;
      }
    });
    await run('openai-node chat.completions.stream()', ending, async (got) => {
      const stream = client.chat.completions.stream({ model: 'gpt-x', messages: ask });
      stream.on('content', (delta) => { got.text += delta; });
      got.end = (await stream.finalChatCompletion()).choices[0].finish_reason;
    });
    await run('openai-node responses.create({stream: true})', ending, async (got) => {
      const stream = await client.responses.create({ model: 'gpt-x', input: 'hi', stream: true });
      for await (const event of stream) {
        if (event.type === 'response.output_text.delta') got.text += event.delta;
        terminal(got, event);
      }
    });
    await run('openai-node responses.stream()', ending, async (got) => {
      const stream = client.responses.stream({ model: 'gpt-x', input: 'hi' });
      for await (const event of stream) {
        if (event.type === 'response.output_text.delta') got.text += event.delta;
        terminal(got, event);
      }
      got.final_text = (await stream.finalResponse()).output_text;
    });
  }
})();
"#;

/// Runs an SDK program off the runtime's workers; its cases, one JSON
/// object each, printed as they came.
async fn cases(program: PathBuf, args: Vec<String>) -> Vec<Value> {
    let output = tokio::task::spawn_blocking(move || Command::new(program).args(args).output().unwrap()).await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let cases: Vec<Value> =
        String::from_utf8_lossy(&output.stdout).lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    for case in &cases {
        let raised =
            case["raised"].as_str().map_or_else(|| "nothing".to_owned(), |r| format!("{r} {}", case["detail"]));
        println!(
            "{} with `{}`: yielded {}, ended {}, raised {raised}",
            case["case"].as_str().unwrap(),
            case["ending"].as_str().unwrap(),
            case["text"],
            case["end"]
        );
    }
    cases
}

/// The case named `name` with `ending`.
fn case<'a>(cases: &'a [Value], name: &str, ending: &str) -> &'a Value {
    cases
        .iter()
        .find(|c| c["case"] == name && c["ending"] == ending)
        .unwrap_or_else(|| panic!("no case {name} {ending}"))
}

/// Each case yielded the partial text; with `error` it raised `raised`.
fn assert_error(cases: &[Value], name: &str, raised: &str) {
    let got = case(cases, name, "error");
    assert_eq!((got["text"].as_str(), got["raised"].as_str()), (Some(PARTIAL), Some(raised)), "{name}: {got}");
}

/// With `finish` the case yielded the partial text, ended with `end` and
/// raised `raised` (nothing, but for a helper refusing a cut answer).
fn assert_finish(cases: &[Value], name: &str, end: &str, raised: Option<&str>) {
    let got = case(cases, name, "finish");
    assert_eq!(
        (got["text"].as_str(), got["end"].as_str(), got["raised"].as_str()),
        (Some(PARTIAL), Some(end), raised),
        "{name}: {got}"
    );
}

/// openai-python and anthropic: `error` raises each SDK's API error after
/// the partial text (openai `APIError`; anthropic `APIStatusError` with
/// status 200 and type `overloaded_error`), `finish` returns the partial
/// text with a length finish; the anthropic message has one
/// `message_start` and stops at `max_tokens`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdks_take_each_ending_as_their_provider_s() {
    let Some(python) = python() else { return };
    let root = format!("http://{}", server().await);
    let cases = cases(python, vec!["-c".into(), PYTHON.into(), root, "sk-endings".into()]).await;
    assert_eq!(cases.len(), 12);
    for name in [
        "openai-python chat.completions.create(stream=True)",
        "openai-python chat.completions.stream()",
        "openai-python responses.create(stream=True)",
        "openai-python responses.stream()",
    ] {
        assert_error(&cases, name, "APIError");
        assert_eq!(case(&cases, name, "error")["detail"]["type"], "server_error", "{name}");
    }
    for name in ["anthropic messages.stream()", "anthropic messages.create(stream=True)"] {
        assert_error(&cases, name, "APIStatusError");
        let detail = &case(&cases, name, "error")["detail"];
        assert_eq!((detail["status_code"].as_str(), detail["type"].as_str()), (Some("200"), Some("overloaded_error")));
    }
    assert_finish(&cases, "openai-python chat.completions.create(stream=True)", "length", None);
    // Its get_final_completion() refuses any `length` finish.
    assert_finish(&cases, "openai-python chat.completions.stream()", "length", Some("LengthFinishReasonError"));
    let incomplete = "response.incomplete incomplete max_output_tokens";
    assert_finish(&cases, "openai-python responses.create(stream=True)", incomplete, None);
    assert_eq!(case(&cases, "openai-python responses.create(stream=True)", "finish")["final_text"], PARTIAL);
    // Its get_final_response() takes only `response.completed`.
    assert_finish(&cases, "openai-python responses.stream()", incomplete, Some("RuntimeError"));
    assert_finish(&cases, "anthropic messages.stream()", "max_tokens", None);
    let message = case(&cases, "anthropic messages.stream()", "finish");
    assert_eq!((message["message_starts"].as_u64(), message["final_text"].as_str()), (Some(1), Some(PARTIAL)));
    assert_finish(&cases, "anthropic messages.create(stream=True)", "max_tokens", None);
}

/// The openai npm package: `error` raises `APIError` after the partial
/// text, `finish` returns it with a length finish, `finalResponse()`
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_node_takes_each_ending_as_its_provider_s() {
    let Some(module) = openai_node() else { return };
    let root = format!("http://{}", server().await);
    let args = vec!["-e".into(), NODE.into(), module.display().to_string(), root, "sk-endings".into()];
    let cases = cases(PathBuf::from("node"), args).await;
    assert_eq!(cases.len(), 8);
    let names = [
        "openai-node chat.completions.create({stream: true})",
        "openai-node chat.completions.stream()",
        "openai-node responses.create({stream: true})",
        "openai-node responses.stream()",
    ];
    for name in names {
        assert_error(&cases, name, "APIError");
    }
    assert_finish(&cases, names[0], "length", None);
    assert_finish(&cases, names[1], "length", None);
    let incomplete = "response.incomplete incomplete max_output_tokens";
    assert_finish(&cases, names[2], incomplete, None);
    assert_finish(&cases, names[3], incomplete, None);
    assert_eq!(case(&cases, names[3], "finish")["final_text"], PARTIAL);
}
