//! What-if on a large recording: 1,000 streams over an hour, about 10 M
//! events (goals: loading under 2 s, a what-if under 1 s once loaded).
//!
//! Run with `cargo bench --bench whatif`. Without `--bench` (as under
//! `cargo test --benches`) the same code runs on a small recording as a
//! smoke test. `--chunks N` keeps the 1,000 streams but gives each N
//! chunks: a size callgrind can count in minutes, whose counts, unlike
//! times, do not depend on what else the machine runs. `--whatif-only`
//! skips the two references below, for a profiler to see the what-ifs.
//!
//! The recording is generated into a temporary database, as the recorder
//! would have written it: each stream opens, then a chunk carrying one
//! content event every 0.72 s for an hour, then completes. Timed: loading
//! it (`Recording::load`), a what-if with its own tunables (nothing fires),
//! and one with a data-stall timeout the stream's gaps exceed (every
//! stream changes). The baseline, in the same run: reading the same events
//! from the store alone (`Store::run_events`), which any replay must do.
//! A second reference, also in the same run: tokio's paused clock alone
//! waking one task per stream at each of its chunk times (a sleep reset
//! and awaited per chunk, and nothing else) — the floor of a replay that
//! steps tokio's clock once per chunk, as this one did until its bodies
//! handed their chunks over ahead of the clock.

use std::time::{Duration, Instant};

use stallscope::core::event::{AttemptEnd, Event, EventClass, EventKind, Outcome};
use stallscope::core::failover::Target;
use stallscope::providers::Dialect;
use stallscope::providers::setup::ProviderConfig;
use stallscope::replay::recording::Recording;
use stallscope::replay::whatif::{WhatIf, what_if};
use stallscope::store::runs::{RunMeta, RunStart};
use stallscope::store::{RunId, Store};
use stallscope::tunables::Tunables;

/// Writes a recording of `streams` streams, each `chunks` chunks over
/// `seconds`, into `store`.
fn generate(store: &mut Store, streams: u64, chunks: u64, seconds: f64) -> RunId {
    let providers = [ProviderConfig::at_root("sim", Dialect::OpenAiChat, "http://127.0.0.1:9", "model")];
    let meta = RunMeta {
        requests: u32::try_from(streams).unwrap(),
        concurrency: u32::try_from(streams).unwrap(),
        seed: 7,
        epoch_unix_ns: 1_800_000_000_000_000_000,
        rules: serde_json::json!([]),
        pools: [("sim".to_owned(), 0)].into(),
    };
    let start = RunStart::new(Some("whatif bench".into()), None, &Tunables::defaults(), &providers).with_meta(meta);
    let run = store.begin_run(&start).unwrap();
    let target = Target::new("sim", "model");
    let step = seconds / chunks as f64;
    for stream in 0..streams {
        let at = |s: f64| Duration::from_secs_f64(s);
        let event = |s: f64, attempt, kind| Event { at: at(s), stream, attempt, kind };
        let t0 = stream as f64 * 0.001;
        let mut events = vec![
            event(t0, 0, EventKind::CallStarted { target: target.clone(), context_tokens: Some(3) }),
            event(t0, 1, EventKind::AttemptStarted { target: target.clone(), credential: None }),
            event(
                t0 + 0.2,
                1,
                EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) },
            ),
            event(
                t0 + 0.2,
                1,
                EventKind::ResponseHeaders { headers: vec![("content-type".into(), "text/event-stream".into())] },
            ),
        ];
        for i in 0..chunks {
            let t = t0 + 0.2 + i as f64 * step;
            events.push(event(t, 1, EventKind::ChunkReceived { bytes: 90 }));
            events.push(event(t, 1, EventKind::SseReceived { class: EventClass::Content, chars: 4, progress: true }));
        }
        let end = t0 + 0.2 + seconds;
        events.push(event(end, 1, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: Some("stop".into()) }));
        events.push(event(
            end,
            1,
            EventKind::Finished { outcome: Outcome::Ok, attempts: 1, stop_reason: Some("stop".into()) },
        ));
        store.append_events(run, &events).unwrap();
    }
    run
}

/// Tokio's paused clock alone: one task per stream wakes at each of the
/// generated chunk times (as `generate` spaces them); returns the wakes.
fn paused_clock_alone(streams: u64, chunks: u64, seconds: f64) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    runtime.block_on(async {
        let start = tokio::time::Instant::now();
        let step = seconds / chunks as f64;
        let tasks: Vec<_> = (0..streams)
            .map(|stream| {
                tokio::spawn(async move {
                    let t0 = stream as f64 * 0.001 + 0.2;
                    let sleep = tokio::time::sleep_until(start);
                    tokio::pin!(sleep);
                    for i in 0..chunks {
                        sleep.as_mut().reset(start + Duration::from_secs_f64(t0 + i as f64 * step));
                        sleep.as_mut().await;
                    }
                    chunks
                })
            })
            .collect();
        let mut wakes = 0;
        for task in tasks {
            wakes += task.await.unwrap();
        }
        wakes
    })
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let value = f();
    (value, started.elapsed())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let (streams, chunks, seconds) = if full { (1000, 5000, 3600.0) } else { (10, 50, 36.0) };
    let asked = args.iter().position(|a| a == "--chunks").map(|i| {
        let n = args.get(i + 1).and_then(|n| n.parse::<u64>().ok());
        n.expect("--chunks takes a whole number of chunks per stream")
    });
    let (streams, chunks, seconds) = match asked {
        Some(chunks) => (1000, chunks, chunks as f64 * 0.72),
        None => (streams, chunks, seconds),
    };
    let dir = std::env::temp_dir().join(format!("stallscope-bench-whatif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.db");
    let (run, generated) = timed(|| generate(&mut Store::open(&path).unwrap(), streams, chunks, seconds));
    let store = Store::open(&path).unwrap();
    let events = streams * (chunks * 2 + 6);
    println!(
        "recording: {streams} streams × {chunks} chunks over {seconds} s = {events} events (written in {generated:.2?})"
    );
    // The two references (reading the events; the paused clock alone),
    // unless `--whatif-only`.
    let references = (!args.iter().any(|a| a == "--whatif-only")).then(|| {
        let (read, took) = timed(|| store.run_events(run).unwrap().len());
        assert_eq!(read as u64, events);
        println!("baseline: Store::run_events alone: {took:.2?}");
        let (wakes, clock) = timed(|| paused_clock_alone(streams, chunks, seconds));
        println!(
            "reference: tokio's paused clock alone, {wakes} wakes at the chunk times: {clock:.2?} ({:.0} ns a wake)",
            clock.as_nanos() as f64 / wakes as f64
        );
        (took, clock)
    });
    let ratio = |took: Duration, reference: Option<Duration>, what: &str| {
        reference.map_or_else(String::new, |r| format!("{:.2}× {what}; ", took.as_secs_f64() / r.as_secs_f64()))
    };
    let (recording, loaded) = timed(|| Recording::load(&store, run).unwrap());
    println!(
        "load (Recording::load): {loaded:.2?} ({}goal under 2 s)",
        ratio(loaded, references.map(|(read, _)| read), "the baseline")
    );
    for sets in [vec![], vec!["SSE_DATA_STALL_TIMEOUT_S=0.5".to_owned()]] {
        let whatif = WhatIf { overrides: sets.clone(), ..WhatIf::default() };
        let (report, took) = timed(|| what_if(&recording, &whatif).unwrap());
        assert_eq!(report.streams.len(), streams as usize);
        println!(
            "what-if {:?}: {took:.2?} ({:.0} events/s; {}{} of {} streams changed; goal under 1 s)",
            sets,
            events as f64 / took.as_secs_f64(),
            ratio(took, references.map(|(_, clock)| clock), "the paused clock alone"),
            report.summary.changed,
            report.summary.streams
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
