//! Tune from a history: a week of one-minute canary rounds (10,080 runs of
//! two calls each, about 1.7 M events), one round in a hundred with a
//! stall (goal: tuned in seconds once loaded).
//!
//! Run with `cargo bench --bench tune`. Without `--bench` (as under
//! `cargo test --benches`) the same code runs on a day's worth of rounds
//! an hour apart as a smoke test.
//!
//! The rounds are generated into a temporary database as `tests/history`
//! writes them (real-scale keep-alive stalls). Timed: loading every round
//! (`Recording::load`) and tuning them together. The baseline, in
//! the same run: reading the same events from the store alone
//! (`Store::run_events` for every round), which any tune of the history
//! must do.

use std::time::{Duration, Instant};

use stallscope::replay::recording::Recording;
use stallscope::replay::tune::{TuneOptions, tune};
use stallscope::store::{RunId, Store};

#[path = "../tests/history/mod.rs"]
mod history;

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let value = f();
    (value, started.elapsed())
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    // A week of one-minute rounds; a day of hourly ones as a smoke test.
    let (rounds, every_s) = if full { (7 * 24 * 60, 60) } else { (24, 3600) };
    let dir = std::env::temp_dir().join(format!("stallscope-bench-tune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rounds.db");
    let (runs, generated) = timed(|| {
        let mut store = Store::open(&path).unwrap();
        (0..rounds)
            .map(|i| {
                history::round(
                    &mut store,
                    i,
                    1_800_000_000_000_000_000 + (i * every_s) as i64 * 1_000_000_000,
                    i % 100 == 7,
                )
            })
            .collect::<Vec<RunId>>()
    });
    let store = Store::open(&path).unwrap();
    let (events, read) = timed(|| runs.iter().map(|&run| store.run_events(run).unwrap().len()).sum::<usize>());
    println!("history: {rounds} rounds of 2 calls, {events} events (written in {generated:.2?})");
    println!("baseline: Store::run_events of every round alone: {read:.2?}");
    let (recordings, loaded) =
        timed(|| runs.iter().map(|&run| Recording::load(&store, run).unwrap()).collect::<Vec<_>>());
    let ratio = |took: Duration| took.as_secs_f64() / read.as_secs_f64();
    println!("load (Recording::load of every round): {loaded:.2?} ({:.2}× the baseline)", ratio(loaded));
    let (report, took) = timed(|| tune(&recordings, &TuneOptions::default()).unwrap());
    println!(
        "tune: {took:.2?} ({:.2}× the baseline; {} healthy attempts, {} stalls, {} of {} rounds replayed, {} what-ifs)",
        ratio(took),
        report.healthy_attempts,
        report.stalls,
        report.replayed_runs,
        report.runs.len(),
        report.probes
    );
    match &report.combined {
        Some(combined) => println!("  {}", combined.sentence()),
        None => println!("  nothing suggested"),
    }
    assert_eq!(report.runs.len(), rounds as usize);
    let _ = std::fs::remove_dir_all(&dir);
}
