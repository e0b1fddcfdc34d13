//! Real agents' clients through `stallscope observe --guard` in front of
//! the simulator: the `openai` Python SDK (chat, and Responses through its
//! `.stream()` helper), the `anthropic` SDK (`messages.stream()`) and the
//! `openai` npm package (chat, Responses `.stream()`), each with its own
//! retries off (`max_retries=0`), so whatever recovers a call is the
//! guard. The helpers build the response from its events, as agents' do,
//! so a start event sent twice or a block the agent never opened breaks
//! them. Before content a silent stall, a keep-alive-only stall and a 429
//! with `retry-after-ms` are invisible but for time: each SDK returns the
//! healthy scenario's text, its start event once, and raises nothing;
//! so does a stall between a block's start and its first text
//! (`stall-after-block-start`), after which the anthropic SDK's final
//! message holds one text block.
//! After content (`stall-after-content`) each SDK yields the partial text,
//! then raises its own API error (`GUARD_AFTER_CONTENT=error`) or ends at
//! the output limit (`=finish`). The key each SDK sends is nowhere in the
//! recordings.
//!
//! Every case has a guard of its own: the simulator counts attempts per
//! stream, and a plain client names none, so each case needs a fresh one.
//! The clients come from `.ci/run` (see `tests/clients.rs`); where they
//! are absent the tests say so and pass (`STALLSCOPE_REQUIRE_EXTERNAL=1`
//! fails instead). Each case prints what the SDK did (`-- --nocapture`).

mod observer;
mod programs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use observer::{GUARD, Running};
use programs::{files_text, free_port, openai_node, python, temp_dir};
use serde_json::Value;
use stallscope::core::category::TimerKind;
use stallscope::core::event::Outcome;
use stallscope::observe::{ObserveSource, ObservedCall};
use stallscope::sim::{Scenario, SimServer};

/// A key only the clients send.
const KEY: &str = "sk-guarded-RECOGNISABLE-5127";

/// The clocks, scaled down (observe takes no tunables from a scenario): a
/// silence is caught by the idle clock after half a second, keep-alives
/// with no progress by the data-stall clock after 0.8 s, and retried after
/// 50 ms.
const CLOCKS: [&str; 3] = ["SSE_IDLE_TIMEOUT_S=0.5", "SSE_DATA_STALL_TIMEOUT_S=0.8", "PROVIDER_STREAM_BACKOFF_S=0.05"];

/// The shorter budget in [`CLOCKS`].
const BUDGET: Duration = Duration::from_millis(500);

/// Loose bound on a guarded call (the machine is shared): a stall's budget
/// and one backoff, a 429's two waits of 0.7 s, or a stall after content
/// caught, each well inside it.
const WITHIN: Duration = Duration::from_secs(5);

/// The Python cases: each reads one stream and prints one JSON line with
/// the text it yielded, the start events it saw, how the stream ended,
/// what it raised and how long the call took.
const PYTHON: &str = r#"
import json, signal, sys, time, openai, anthropic
key, cases = sys.argv[1], json.loads(sys.argv[2])
ask = [{"role": "user", "content": "hi"}]

# No case may hang the test: each is given up after 15 s.
def deadline(*_):
    raise TimeoutError("the case took 15 s")
signal.signal(signal.SIGALRM, deadline)

def chat(base, got):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=20)
    for chunk in client.chat.completions.create(model="gpt-x", messages=ask, stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            got["starts"] += delta.role == "assistant"
            got["text"] += delta.content or ""
            got["end"] = chunk.choices[0].finish_reason or got["end"]

def responses(base, got):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=20)
    # The helper accumulates the response from its events, as an agent's would.
    with client.responses.stream(model="gpt-x", input="hi") as stream:
        for event in stream:
            got["starts"] += event.type == "response.created"
            if event.type == "response.output_text.delta":
                got["text"] += event.delta
            if event.type in ("response.completed", "response.incomplete", "response.failed"):
                details = event.response.incomplete_details
                got["end"] = " ".join([event.type, event.response.status, details.reason if details else ""]).strip()
                got["final_text"] = event.response.output_text

def messages(base, got):
    client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=20)
    with client.messages.stream(model="claude-x", max_tokens=64, messages=ask) as stream:
        for event in stream:
            got["starts"] += event.type == "message_start"
            if event.type == "text":
                got["text"] += event.text
        message = stream.get_final_message()
        got["end"] = message.stop_reason
        got["final_text"] = "".join(b.text for b in message.content if b.type == "text")
        got["blocks"] = [b.type for b in message.content]

for name, base in cases:
    got = {"client": name, "text": "", "starts": 0, "end": None, "raised": None}
    started = time.monotonic()
    signal.alarm(15)
    try:
        {"openai-python chat": chat, "openai-python responses": responses, "anthropic messages": messages}[name](base, got)
    except Exception as e:
        got["raised"] = type(e).__name__
        got["detail"] = {k: str(getattr(e, k)) for k in ("status_code", "type", "code") if getattr(e, k, None) is not None}
    signal.alarm(0)
    got["took"] = time.monotonic() - started
    print(json.dumps(got), flush=True)
"#;

/// The same with the openai npm package.
const NODE: &str = r#"
const OpenAI = require(process.argv[1]);
const [key, cases] = [process.argv[2], JSON.parse(process.argv[3])];
const ask = [{ role: 'user', content: 'hi' }];
const connect = (base) => new (OpenAI.default || OpenAI)({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
// No case may hang the test: each is given up after 15 s.
const deadline = () => ({ signal: AbortSignal.timeout(15000) });

async function chat(base, got) {
  const stream = await connect(base).chat.completions.create({ model: 'gpt-x', messages: ask, stream: true }, deadline());
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    got.starts += choice?.delta?.role === 'assistant' ? 1 : 0;
    got.text += choice?.delta?.content ?? '';
    got.end = choice?.finish_reason ?? got.end;
  }
}

async function responses(base, got) {
  // The helper accumulates the response from its events, as an agent's would.
  const stream = connect(base).responses.stream({ model: 'gpt-x', input: 'hi' }, deadline());
  for await (const event of stream) {
    got.starts += event.type === 'response.created' ? 1 : 0;
    if (event.type === 'response.output_text.delta') got.text += event.delta;
    if (['response.completed', 'response.incomplete', 'response.failed'].includes(event.type)) {
      const reason = event.response.incomplete_details?.reason ?? '';
      got.end = [event.type, event.response.status, reason].join(' ').trim();
    }
  }
  got.final_text = (await stream.finalResponse()).output_text;
}

(async () => {
  for (const [name, base] of cases) {
    const got = { client: name, text: '', starts: 0, end: null, raised: null };
    const started = performance.now();
    try {
      await { 'openai-node chat': chat, 'openai-node responses': responses }[name](base, got);
    } catch (e) {
      got.raised = e.constructor.name;
      got.detail = {};
      for (const k of ['status', 'type', 'code']) if (e[k] != null) got.detail[k] = String(e[k]);
    }
    got.took = (performance.now() - started) / 1000;
    console.log(JSON.stringify(got));
  }
})();
"#;

/// The Python clients' cases.
const PYTHON_CLIENTS: [&str; 3] = ["openai-python chat", "openai-python responses", "anthropic messages"];

/// The npm package's cases.
const NODE_CLIENTS: [&str; 2] = ["openai-node chat", "openai-node responses"];

/// The keep-alive-only stall: the stream opens, then keep-alives come and
/// not one event of data, forever; only the data-stall clock can tell.
/// The retry is healthy. (`ping-flood-stall` streams reasoning before its
/// keep-alives.)
const KEEPALIVE_ONLY: &str = r#"
description = "The stream opens, then only keep-alives, forever; attempt 2 is healthy."

[[attempts]]
steps = [{ preamble = true }, { pings_every_ms = 100 }]

[[attempts]]
steps = [{ content = "tok ", count = 20, every_ms = 25 }]
"#;

/// What a case's guard is in front of.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Story {
    /// A built-in scenario's simulator.
    Builtin(&'static str),
    /// [`KEEPALIVE_ONLY`]'s simulator.
    KeepaliveOnly,
}

impl Story {
    /// What the cases' lines call it.
    fn name(self) -> &'static str {
        match self {
            Story::Builtin(name) => name,
            Story::KeepaliveOnly => "keep-alive-only stall",
        }
    }
}

/// What one client did with one guarded stream, and the call the guard
/// recorded.
struct Case {
    story: Story,
    client: &'static str,
    /// The client's JSON line.
    got: Value,
    call: ObservedCall,
}

impl Case {
    /// The text the SDK yielded.
    fn text(&self) -> &str {
        self.got["text"].as_str().unwrap_or_default()
    }

    /// How long the call took, as the client timed it.
    fn took(&self) -> Duration {
        Duration::from_secs_f64(self.got["took"].as_f64().unwrap_or_default())
    }

    /// The type of the exception the SDK raised, if it raised one.
    fn raised(&self) -> Option<&str> {
        self.got["raised"].as_str()
    }

    /// The story and the client, to name the case in failures.
    fn name(&self) -> String {
        format!("{} with {}", self.story.name(), self.client)
    }
}

/// Runs `program` off the runtime's workers; its JSON lines.
async fn lines(program: PathBuf, args: Vec<String>) -> Vec<Value> {
    let output = tokio::task::spawn_blocking(move || Command::new(program).args(args).output().unwrap()).await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// A guard of its own for one case, in front of `story`, with `sets`,
/// recording into `db`; the simulator of a story of this file's own.
async fn guard(story: Story, sets: &[&str], db: &Path) -> (Running, Option<SimServer>) {
    match story {
        Story::Builtin(name) => (Running::start_with(ObserveSource::Scenario(name.into()), Some(db), sets).await, None),
        Story::KeepaliveOnly => {
            let scenario = Scenario::from_toml(KEEPALIVE_ONLY, "guard_clients.rs").unwrap();
            let server = SimServer::start(scenario, 0).await.unwrap();
            let source = ObserveSource::Upstream(server.base_url());
            (Running::start_with(source, Some(db), sets).await, Some(server))
        }
    }
}

/// Each client in front of each story, through a guard of its own with
/// [`CLOCKS`] and `sets`, recorded under a scratch directory: the Python
/// and npm clients at once, each one's cases in turn. Each case is
/// printed; the key is checked absent from every recording. None when the
/// clients are absent.
async fn guarded(stories: &[Story], sets: &[&str]) -> Option<Vec<Case>> {
    let (Some(python), Some(module)) = (python(), openai_node()) else { return None };
    let dir = temp_dir(&format!("guard-clients-{}", free_port()));
    let sets: Vec<&str> = [GUARD].iter().chain(&CLOCKS).chain(sets).copied().collect();
    let mut guards = Vec::new();
    for &story in stories {
        for client in PYTHON_CLIENTS.into_iter().chain(NODE_CLIENTS) {
            let db = dir.join(format!("{} {client}.db", story.name()));
            let (observer, server) = guard(story, &sets, &db).await;
            guards.push((story, client, observer, server));
        }
    }
    // Both programs run their cases in the order given: the guards'.
    let cases_of = |clients: &[&str]| {
        let cases: Vec<(&str, &str)> = guards
            .iter()
            .filter(|(_, client, ..)| clients.contains(client))
            .map(|(_, client, observer, _)| (*client, observer.base.as_str()))
            .collect();
        serde_json::to_string(&cases).unwrap()
    };
    let python_args = vec!["-c".into(), PYTHON.into(), KEY.into(), cases_of(&PYTHON_CLIENTS)];
    let node_args = vec!["-e".into(), NODE.into(), module.display().to_string(), KEY.into(), cases_of(&NODE_CLIENTS)];
    let (from_python, from_node) = tokio::join!(lines(python, python_args), lines(PathBuf::from("node"), node_args));
    let (mut from_python, mut from_node) = (from_python.into_iter(), from_node.into_iter());
    let mut cases = Vec::new();
    for (story, client, observer, server) in guards {
        let printed = if PYTHON_CLIENTS.contains(&client) { from_python.next() } else { from_node.next() };
        let got = printed.unwrap_or_else(|| panic!("{} with {client}: the client printed nothing", story.name()));
        assert_eq!(got["client"], client);
        let call = observer.ended(1).await.pop().unwrap_or_else(|| panic!("{} with {client}: no call", story.name()));
        observer.stop().await;
        if let Some(server) = server {
            server.shutdown().await;
        }
        let case = Case { story, client, got, call };
        let raised = case.raised().map_or_else(|| "nothing".to_owned(), |r| format!("{r} {}", case.got["detail"]));
        println!(
            "{}: yielded {:?} in {:.2} s, {} start event(s), ended {}, raised {raised}; the guard: {}",
            case.name(),
            case.text(),
            case.took().as_secs_f64(),
            case.got["starts"],
            case.got["end"],
            case.call.verdict.summary
        );
        cases.push(case);
    }
    assert!(!files_text(&dir).contains("RECOGNISABLE"), "a client's key was recorded");
    let _ = std::fs::remove_dir_all(&dir);
    Some(cases)
}

/// Fails with every case's `check` that found something wrong.
fn judge(cases: &[Case], check: impl Fn(&Case) -> Vec<String>) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let wrong = check(case);
            (!wrong.is_empty()).then(|| format!("{}: {}", case.name(), wrong.join("; ")))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What every case must have, wrong in `case`: the SDK saw the start
/// event once and took at least `waited` and at most [`WITHIN`]; the
/// guard's call ended as `outcome` after `attempts`, caught by `timer`
/// when a clock caught it.
fn common_wrong(
    case: &Case,
    waited: Duration,
    (outcome, attempts): (Outcome, u32),
    timer: Option<TimerKind>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    if case.got["starts"] != 1 {
        wrong.push(format!("{} start events", case.got["starts"]));
    }
    if case.took() < waited || case.took() > WITHIN {
        wrong.push(format!("took {:?}", case.took()));
    }
    let (report, verdict) = (&case.call.report, &case.call.verdict);
    let was = (report.outcome, report.attempts, verdict.basis.timer);
    if was != (outcome, attempts, timer) {
        wrong.push(format!("the guard: {was:?}: {}", verdict.summary));
    }
    wrong
}

/// Before content the guard's retries are invisible but for time: a
/// silent stall (the idle clock), one after the text block or output item
/// opened, a keep-alive-only stall (the data-stall clock) and a 429 with
/// `retry-after-ms` (twice 0.7 s) each give every SDK the text it reads
/// from `healthy`, its start event once, the provider's own finish, and no
/// exception (the Responses helpers accumulate the response as they read
/// it), in about the budget and one backoff (the 429: its two waits); the
/// anthropic SDK's final message has one text block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_content_each_sdk_reads_the_healthy_answer() {
    let stories = [
        Story::Builtin("healthy"),
        Story::Builtin("silent-stall"),
        Story::Builtin("stall-after-block-start"),
        Story::KeepaliveOnly,
        Story::Builtin("rate-limited-ms"),
    ];
    let Some(cases) = guarded(&stories, &[]).await else { return };
    judge(&cases, |case| {
        let healthy = cases.iter().find(|c| c.story == stories[0] && c.client == case.client).unwrap();
        let (attempts, timer, waited) = match case.story {
            Story::Builtin("healthy") => (1, None, Duration::ZERO),
            Story::Builtin("silent-stall" | "stall-after-block-start") => (2, Some(TimerKind::Idle), BUDGET),
            Story::KeepaliveOnly => (2, Some(TimerKind::DataStall), BUDGET),
            _ => (3, None, Duration::from_millis(1400)),
        };
        let mut wrong = common_wrong(case, waited, (Outcome::Ok, attempts), timer);
        if case.text() != "tok ".repeat(20) || case.text() != healthy.text() {
            wrong.push(format!("text {:?}", case.text()));
        }
        if let Some(raised) = case.raised() {
            wrong.push(format!("raised {raised} {}", case.got["detail"]));
        }
        if case.got["end"].is_null() || case.got["end"] != healthy.got["end"] {
            wrong.push(format!("ended {}", case.got["end"]));
        }
        if case.got.get("final_text").is_some_and(|t| t != healthy.text()) {
            wrong.push(format!("final text {}", case.got["final_text"]));
        }
        let texts = |blocks: &Value| blocks.as_array().map(|b| b.iter().filter(|b| *b == "text").count());
        if case.got.get("blocks").is_some_and(|blocks| texts(blocks) != Some(1)) {
            wrong.push(format!("final message's blocks {}", case.got["blocks"]));
        }
        wrong
    });
}

/// The text `stall-after-content` streams before it stalls.
fn partial() -> String {
    "tok ".repeat(5)
}

/// After content the guard never retries; with `GUARD_AFTER_CONTENT=error`
/// (the default) each SDK yields the partial text, then raises its own API
/// error, once the idle clock caught the stall: openai-python `APIError`,
/// anthropic `APIStatusError` (status 200, type `overloaded_error`),
/// openai-node `APIError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_content_error_each_sdk_raises_its_own_api_error() {
    let Some(cases) = guarded(&[Story::Builtin("stall-after-content")], &["GUARD_AFTER_CONTENT=error"]).await else {
        return;
    };
    judge(&cases, |case| {
        let raises = if case.client.starts_with("anthropic") { "APIStatusError" } else { "APIError" };
        let mut wrong = common_wrong(case, BUDGET, (Outcome::Failed, 1), Some(TimerKind::Idle));
        if (case.text(), case.raised()) != (partial().as_str(), Some(raises)) {
            wrong.push(format!("yielded {:?}, raised {:?} {}", case.text(), case.raised(), case.got["detail"]));
        }
        if case.client.starts_with("anthropic") && case.got["detail"]["type"] != "overloaded_error" {
            wrong.push(format!("raised {}", case.got["detail"]));
        }
        wrong
    });
}

/// With `GUARD_AFTER_CONTENT=finish` each SDK returns the partial text
/// with its dialect's length finish and raises nothing: chat `length`,
/// Anthropic `max_tokens` (its accumulated message: one `message_start`,
/// the partial text), Responses `response.incomplete` for
/// `max_output_tokens` (its response: the partial text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_content_finish_each_sdk_returns_the_partial_text_cut_at_the_limit() {
    let Some(cases) = guarded(&[Story::Builtin("stall-after-content")], &["GUARD_AFTER_CONTENT=finish"]).await else {
        return;
    };
    judge(&cases, |case| {
        let end = match case.client {
            "anthropic messages" => "max_tokens",
            "openai-python responses" | "openai-node responses" => "response.incomplete incomplete max_output_tokens",
            _ => "length",
        };
        let mut wrong = common_wrong(case, BUDGET, (Outcome::Partial, 1), Some(TimerKind::Idle));
        if (case.text(), case.got["end"].as_str(), case.raised()) != (partial().as_str(), Some(end), None) {
            wrong.push(format!("yielded {:?}, ended {}, raised {:?}", case.text(), case.got["end"], case.raised()));
        }
        if case.got.get("final_text").is_some_and(|t| *t != partial()) {
            wrong.push(format!("final text {}", case.got["final_text"]));
        }
        wrong
    });
}
