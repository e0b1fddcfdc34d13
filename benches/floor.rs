//! The throughput floor's cost per chunk: the governed in-memory stream
//! of `decisions`'s `stream/governed`, with the floor off and on, run in
//! alternation (one attempt of each, a thousand times over), so load from
//! anything else on the machine falls on both alike. Prints each side's
//! median and fastest attempt and the floor's ratio to no floor (goal:
//! within 5%).
//!
//! Run with `cargo bench --bench floor`. Without `--bench` (as under
//! `cargo test --benches`) it runs a few rounds as a smoke test.

#[path = "common/governed.rs"]
mod governed;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use governed::{CHUNKS, floored, govern_all};
use stallscope::core::policy::CorePolicy;
use tokio_util::sync::CancellationToken;

fn main() {
    let rounds = if std::env::args().any(|a| a == "--bench") { 1000 } else { 3 };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let policy = CorePolicy::default();
    let timers = policy.timers.for_attempt(None, &policy.retry.escalation, 0, 3);
    let floor = floored(&timers);
    let cancel = CancellationToken::new();
    let time = |timers| {
        let started = Instant::now();
        let events = runtime.block_on(govern_all(timers, &cancel));
        assert_eq!(events, CHUNKS as u64, "every chunk is one event");
        started.elapsed()
    };
    // Warm-up: caches, the allocator and the CPU's clock settle.
    for _ in 0..rounds / 10 {
        time(&timers);
        time(&floor);
    }
    let (mut off, mut on) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for round in 0..rounds {
        // Which goes first alternates too, so neither always follows the other.
        if round % 2 == 0 {
            off.push(time(&timers));
            on.push(time(&floor));
        } else {
            on.push(time(&floor));
            off.push(time(&timers));
        }
    }
    let (off, on) = (Summary::of(off), Summary::of(on));
    let per_chunk = |d: Duration| d.as_nanos() as f64 / CHUNKS as f64;
    println!(
        "floor/off  median {:7.1} ns/chunk  fastest {:7.1} ns/chunk",
        per_chunk(off.median),
        per_chunk(off.fastest)
    );
    println!("floor/on   median {:7.1} ns/chunk  fastest {:7.1} ns/chunk", per_chunk(on.median), per_chunk(on.fastest));
    println!(
        "floor on / off: {:.3} (medians), {:.3} (fastest), over {rounds} alternating attempts of {CHUNKS} chunks",
        on.median.as_secs_f64() / off.median.as_secs_f64(),
        on.fastest.as_secs_f64() / off.fastest.as_secs_f64(),
    );
}

/// The median and fastest of a side's attempts.
struct Summary {
    median: Duration,
    fastest: Duration,
}

impl Summary {
    fn of(mut times: Vec<Duration>) -> Summary {
        times.sort_unstable();
        Summary { median: times[times.len() / 2], fastest: times[0] }
    }
}
