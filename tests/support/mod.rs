//! Scripted upstreams for executor tests in paused time.
//!
//! A script is per attempt: how long until headers, the status and headers
//! (or a failure to open), then body steps. The body uses a tiny line
//! protocol decoded by [`LineDecoder`]: `c:TEXT` content, `r:TEXT`
//! reasoning, `t:TEXT` tool call, `p` ping, `s:REASON` stop reason, `d` done,
//! `e:CODE:MESSAGE` in-stream error. The real SSE dialects are tested
//! against the simulator over HTTP.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::{self, StreamExt};
use http::{HeaderMap, HeaderName, HeaderValue};
use stallscope::core::credentials::{CredentialPool, Secret};
use stallscope::core::event::{EventClass, EventSink, VecSink};
use stallscope::core::executor::{Call, Executor};
use stallscope::core::failover::Target;
use stallscope::core::failure::Failure;
use stallscope::core::fleet::Fleet;
use stallscope::core::policy::CorePolicy;
use stallscope::core::upstream::{AttemptRequest, CallInput, Decoded, Decoder, Response, Upstream, Upstreams};
use stallscope::tunables::Tunables;

/// One body step.
#[derive(Debug, Clone)]
pub enum Step {
    /// Wait this long.
    Wait(Duration),
    /// Send these bytes.
    Send(&'static str),
    /// Fail the body with this.
    Fail(Failure),
    /// Never send anything again (the socket stays open).
    Hang,
}

/// A status with its headers.
pub type Head = (u16, Vec<(&'static str, &'static str)>);

/// One attempt's script.
#[derive(Debug, Clone)]
pub struct Script {
    pub headers_after: Duration,
    pub open: Result<Head, Failure>,
    pub body: Vec<Step>,
}

impl Script {
    /// A 200 event stream with this body.
    pub fn stream(body: Vec<Step>) -> Self {
        Script { headers_after: Duration::ZERO, open: Ok((200, vec![("content-type", "text/event-stream")])), body }
    }

    /// A healthy stream: one content event, then done.
    pub fn ok(text: &'static str) -> Self {
        Self::stream(vec![Step::Send(text), Step::Send("d\n")])
    }

    /// An error status with headers and body.
    pub fn status(status: u16, headers: Vec<(&'static str, &'static str)>, body: &'static str) -> Self {
        Script { headers_after: Duration::ZERO, open: Ok((status, headers)), body: vec![Step::Send(body)] }
    }

    /// A failure before headers.
    pub fn refuse(failure: Failure) -> Self {
        Script { headers_after: Duration::ZERO, open: Err(failure), body: vec![] }
    }
}

/// An upstream playing scripts in order (the last one repeats).
pub struct Scripted {
    scripts: Vec<Script>,
    next: AtomicUsize,
    /// Models asked for, and key indexes used, in order.
    pub seen: Mutex<Vec<(String, Option<usize>)>>,
}

impl Scripted {
    pub fn new(scripts: Vec<Script>) -> Arc<Self> {
        Arc::new(Scripted { scripts, next: AtomicUsize::new(0), seen: Mutex::default() })
    }

    pub fn opened(&self) -> usize {
        self.next.load(Ordering::SeqCst)
    }
}

impl Upstream for Scripted {
    fn open<'a>(&'a self, request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let script = self.scripts[n.min(self.scripts.len() - 1)].clone();
        self.seen.lock().unwrap().push((request.target.model.clone(), request.credential.map(|c| c.index)));
        Box::pin(async move {
            tokio::time::sleep(script.headers_after).await;
            let (status, pairs) = script.open?;
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(HeaderName::from_static(name), HeaderValue::from_static(value));
            }
            let body = stream::unfold(script.body.into_iter(), |mut steps| async move {
                loop {
                    match steps.next()? {
                        Step::Wait(d) => tokio::time::sleep(d).await,
                        Step::Send(text) => return Some((Ok(Bytes::from_static(text.as_bytes()).into()), steps)),
                        Step::Fail(failure) => return Some((Err(failure), steps)),
                        Step::Hang => std::future::pending::<()>().await,
                    }
                }
            });
            Ok(Response::new(status, headers, body.boxed()))
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(LineDecoder::default())
    }
}

/// Decodes the test line protocol, however the bytes are split.
#[derive(Default)]
pub struct LineDecoder {
    pending: Vec<u8>,
}

impl Decoder for LineDecoder {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<Decoded>) {
        self.pending.extend_from_slice(chunk);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]).into_owned();
            let (tag, rest) = line.split_once(':').unwrap_or((line.as_str(), ""));
            let event = |class| Decoded::Event { class, text: rest.to_owned().into() };
            out.push(match tag {
                "c" => event(EventClass::Content),
                "r" => event(EventClass::Reasoning),
                "t" => event(EventClass::ToolCall),
                "p" => event(EventClass::Keepalive),
                "s" => Decoded::StopReason(rest.to_owned()),
                "d" => Decoded::Done,
                "e" => {
                    let (code, message) = rest.split_once(':').unwrap_or(("", rest));
                    Decoded::Error {
                        code: Some(code.to_owned()).filter(|c| !c.is_empty()),
                        message: message.to_owned(),
                    }
                }
                other => Decoded::Malformed(format!("unknown line `{other}`")),
            });
        }
    }

    fn finish(&mut self, _out: &mut Vec<Decoded>) {}
}

/// A policy from defaults plus overrides.
pub fn policy(sets: &[&str]) -> CorePolicy {
    let mut t = Tunables::defaults();
    for s in sets {
        t.apply_override(s).unwrap();
    }
    CorePolicy::from_tunables(&t).unwrap()
}

/// A test harness: providers with scripts, and the executor over them.
pub struct Harness {
    pub executor: Executor,
    pub sink: Arc<VecSink>,
}

impl Harness {
    /// `providers`: (provider, models, scripts, keys).
    pub fn new(policy: CorePolicy, providers: Vec<(&str, Vec<&str>, Arc<Scripted>, usize)>) -> Self {
        let mut upstreams = Upstreams::default();
        let mut pools = HashMap::new();
        for (name, models, scripted, keys) in providers {
            upstreams.providers.insert(name.to_owned(), scripted as Arc<dyn Upstream>);
            upstreams.targets.extend(models.into_iter().map(|m| Target::new(name, m)));
            let keys = (0..keys).map(|i| Secret::new(format!("{name}-key-{i}"))).collect();
            pools.insert(name.to_owned(), Arc::new(CredentialPool::new(keys, policy.credentials.rotation)));
        }
        let sink = Arc::new(VecSink::new());
        let executor = Executor {
            fleet: Arc::new(Fleet::new(policy.fleet, pools)),
            policy: Arc::new(policy),
            classifier: Arc::default(),
            upstreams: Arc::new(upstreams),
            sink: Arc::clone(&sink) as Arc<dyn EventSink>,
            epoch: tokio::time::Instant::now(),
            wall_epoch: std::time::SystemTime::now(),
            seed: 0,
            lag: None,
        };
        Harness { executor, sink }
    }

    /// One provider `p` with models `m1`, `m2`, `m3` and no keys.
    pub fn single(policy: CorePolicy, scripted: Arc<Scripted>) -> Self {
        Self::new(policy, vec![("p", vec!["m1", "m2", "m3"], scripted, 0)])
    }

    pub fn call(&self, model: &str) -> Call {
        Call { stream: 1, target: Target::new("p", model), input: CallInput::default(), not_before: None }
    }
}
