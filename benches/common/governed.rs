//! One attempt's stream governed in memory: the body is ready chunks of
//! one content event each, so what is timed is the governor's own work per
//! chunk (shared by the `decisions` and `floor` benches).

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream;
use http::{HeaderMap, HeaderValue};
use stallscope::core::event::NullSink;
use stallscope::core::failover::Target;
use stallscope::core::failure::Failure;
use stallscope::core::governor::{AttemptProgress, AttemptScope, run_attempt};
use stallscope::core::policy::{AttemptTimers, RateFloor, RateStart};
use stallscope::core::upstream::{AttemptRequest, CallInput, Chunk, Decoder, Response, Upstream};
use tokio_util::sync::CancellationToken;

use crate::support::LineDecoder;

/// Chunks in one attempt.
pub const CHUNKS: usize = 10_000;
const CHUNK: &[u8] = b"c:a token of content\n";

/// An upstream whose body is `CHUNKS` ready chunks, then done.
struct InMemory;

impl Upstream for InMemory {
    fn open<'a>(&'a self, _request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
        Box::pin(async {
            let mut headers = HeaderMap::new();
            headers.insert("content-type", HeaderValue::from_static("text/event-stream"));
            Ok(Response::new(200, headers, body().boxed()))
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(LineDecoder::default())
    }
}

/// The body: `CHUNKS` content chunks, then the end.
pub fn body() -> impl futures_util::Stream<Item = Result<Chunk, Failure>> {
    stream::iter((0..=CHUNKS).map(|i| Ok(Bytes::from_static(if i == CHUNKS { b"d\n" } else { CHUNK }).into())))
}

/// Runs one attempt over the in-memory body under `timers`.
pub async fn govern_all(timers: &AttemptTimers, cancel: &CancellationToken) -> u64 {
    let scope = AttemptScope {
        sink: &NullSink,
        epoch: tokio::time::Instant::now(),
        wall_epoch: std::time::SystemTime::now(),
        bodies: stallscope::core::policy::BodySettings::default(),
        lag: None,
        rule_headers: &[],
        stream: 1,
        attempt: 1,
        deadline: None,
        cancel,
    };
    let mut progress = AttemptProgress::default();
    let (target, input) = (Target::new("p", "m"), CallInput::default());
    let request = AttemptRequest { stream: 1, attempt: 1, target: &target, credential: None, input: &input };
    run_attempt(&InMemory, request, timers, &scope, &mut progress).await.unwrap();
    progress.events
}

/// `timers` with the throughput floor on, at a floor no stream of ready
/// chunks goes below: what it then costs is counting each progress event.
pub fn floored(timers: &AttemptTimers) -> AttemptTimers {
    let mut floored = timers.clone();
    floored.min_rate = Some(RateFloor { floor: 1.0, window: Duration::from_secs(60), after: RateStart::Content });
    floored
}
