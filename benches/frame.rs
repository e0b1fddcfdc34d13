//! Frame time of the live view with a large run: 100 streams and 1,000,000
//! events in total, the overview strip drawn (goal: 8 ms a frame with the
//! whole run fitted, for 120 Hz displays, on this 2-core machine).
//!
//! Run with `cargo bench --bench frame`; `-- --only fitted` (or `following`,
//! `compact`, `scrub`) runs the baseline and that case alone, with more
//! frames (for a profiler). Without `--bench` (as under `cargo test
//! --benches`) the same code runs on a small run as a smoke test.
//!
//! A frame here is what the UI thread does for one repaint: egui lays out
//! the view (summary, controls, the lanes scrolled into view, each series
//! reduced to its pixel columns) and tessellates the shapes into meshes,
//! in a 1600 × 900 window. Uploading the meshes and drawing them is the
//! GPU's part and is not included. Each case is measured over 60 frames
//! after 10 warm-up frames. The baseline, in the same run: egui_plot
//! drawing the same visible lanes' series point by point (its own culling
//! and banding, no reduction of ours), which is what the lanes would cost
//! without [`stallscope::gui::decimate`].
//!
//! Then replay's scrubbing, on 1,000 streams and 1,000,000 events: moving
//! the cursor backward (rewind to a checkpoint, fold in the events after
//! it) against folding the same events into a fresh model from the start,
//! in the same run, and what the checkpoints and the events kept cost.

use std::time::{Duration, Instant};

use egui_plot::{Line, Plot, PlotPoint, PlotPoints, Points};
use stallscope::core::category::TimerKind;
use stallscope::core::event::{Event, EventClass, EventKind, Outcome};
use stallscope::core::failover::Target;
use stallscope::gui::lanes::{Lane, Timeline};
use stallscope::gui::replay::Replay;
use stallscope::gui::timeline::{Clock, TimelineView};

/// A run like a long streaming session: each stream arms its timers, then
/// alternates chunks and content events, with a keep-alive every tenth
/// event and a stall midway, over `seconds`. Grouped by stream, as the
/// store returns a run.
fn synthetic(streams: u64, events_per_stream: u64, seconds: f64) -> Vec<Event> {
    let mut events = Vec::with_capacity((streams * events_per_stream) as usize);
    let at = |s: f64| Duration::from_secs_f64(s);
    for stream in 0..streams {
        let event = |s: f64, kind| Event { at: at(s), stream, attempt: 1, kind };
        let target = Target::new("sim", "model");
        let start = stream as f64 * 0.01;
        let head = [
            EventKind::CallStarted { target: target.clone(), context_tokens: Some(100) },
            EventKind::AttemptStarted { target, credential: None },
            EventKind::TimerArmed { timer: TimerKind::Ttfb, after: Duration::from_secs(120), floor: None },
            EventKind::TimerArmed { timer: TimerKind::Idle, after: Duration::from_secs(30), floor: None },
            EventKind::TimerArmed { timer: TimerKind::DataStall, after: Duration::from_secs(90), floor: None },
        ];
        let body = events_per_stream.saturating_sub(head.len() as u64 + 1);
        for kind in head {
            events.push(event(start, kind));
        }
        let step = seconds / body as f64;
        for i in 0..body {
            // A 5 s gap halfway: the timers climb toward their thresholds.
            let gap = if i > body / 2 { 5.0 } else { 0.0 };
            let t = start + i as f64 * step + gap;
            let kind = if i % 2 == 0 {
                EventKind::ChunkReceived { bytes: 120 + (i % 37) as usize }
            } else if i % 10 == 1 {
                EventKind::SseReceived { class: EventClass::Keepalive, chars: 0, progress: false }
            } else {
                EventKind::SseReceived { class: EventClass::Content, chars: 4, progress: true }
            };
            events.push(event(t, kind));
        }
        let end = start + seconds + 5.0;
        events.push(event(end, EventKind::Finished { outcome: Outcome::Ok, attempts: 1, stop_reason: None }));
    }
    events
}

/// Frame times of `count` frames of `view` over `timeline`, after a warm-up.
fn view_frames(timeline: &Timeline, mut view: TimelineView, clock: Clock, count: usize) -> Vec<Duration> {
    frames(count, |ui| view.ui(ui, timeline, clock))
}

/// The baseline: as many lanes as the view shows at once, each an
/// egui_plot of the raw series (bytes, every timer, every tick).
fn raw_frames(timeline: &Timeline, lanes: usize, count: usize) -> Vec<Duration> {
    let ticks: Vec<Vec<PlotPoint>> = timeline.lanes[..lanes]
        .iter()
        .map(|lane| lane.output_ticks.iter().map(|&x| PlotPoint::new(x, 0.0)).collect())
        .collect();
    frames(count, |ui| {
        for (lane, ticks) in timeline.lanes[..lanes].iter().zip(&ticks) {
            Plot::new(("raw", lane.stream)).height(70.0).show(ui, |plot| {
                plot.line(Line::new("bytes", PlotPoints::Borrowed(&lane.bytes)));
                for track in &lane.timers {
                    plot.line(Line::new("timer", PlotPoints::Borrowed(&track.progress)));
                }
                plot.points(Points::new("ticks", PlotPoints::Borrowed(ticks)).radius(1.5));
            });
        }
    })
}

/// Frame times of `count` frames of `draw`, after a warm-up.
fn frames(count: usize, mut draw: impl FnMut(&mut egui::Ui)) -> Vec<Duration> {
    let ctx = egui::Context::default();
    let input = || egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(1600.0, 900.0))),
        ..Default::default()
    };
    let mut times = Vec::with_capacity(count);
    for i in 0..count + 10 {
        let started = Instant::now();
        let mut output = ctx.run_ui(input(), |ui| {
            egui::CentralPanel::default().show(ui, |ui| draw(ui));
        });
        // The shapes move into the tessellator, as eframe hands them over.
        let meshes = ctx.tessellate(std::mem::take(&mut output.shapes), output.pixels_per_point);
        let elapsed = started.elapsed();
        std::hint::black_box(meshes);
        output.drop_without_applying_deltas();
        if i >= 10 {
            times.push(elapsed);
        }
    }
    times.sort();
    times
}

/// A frame's budget at 120 Hz.
const GOAL: Duration = Duration::from_millis(8);

fn report(name: &str, times: &[Duration], baseline: Duration) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = times[times.len() / 2];
    let p99 = times[(times.len() * 99 / 100).min(times.len() - 1)];
    println!(
        "{name:<44} median {:>7.2} ms  p99 {:>7.2} ms  ({:.3} of the baseline)  {}",
        ms(median),
        ms(p99),
        median.as_secs_f64() / baseline.as_secs_f64(),
        if median <= GOAL { "goal met (median ≤ 8 ms)" } else { "over 8 ms" }
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).map(String::as_str);
    let runs = |case: &str| only.is_none_or(|o| o == case);
    let (streams, per_stream, mut count) = if full { (100, 10_000, 60) } else { (5, 200, 3) };
    if only.is_some() {
        count *= 10;
    }
    let built = Instant::now();
    let timeline = Timeline::from_events("bench", &synthetic(streams, per_stream, 60.0));
    println!(
        "live view frame time: {} streams, {} events, 1600×900 (built in {:.0} ms)",
        timeline.lanes.len(),
        timeline.event_count(),
        built.elapsed().as_secs_f64() * 1000.0
    );
    let end = timeline.end_s();
    // The lanes a 900-pixel window shows at once.
    let raw = raw_frames(&timeline, timeline.lanes.len().min(11), count);
    let baseline = raw[raw.len() / 2];
    report("baseline: egui_plot, every point, 11 lanes", &raw, baseline);
    if runs("fitted") {
        let fitted = view_frames(&timeline, TimelineView::default(), Clock::Ended(end), count);
        report("whole run fitted", &fitted, baseline);
        let mut bare = TimelineView::default();
        bare.overview = false;
        report("whole run fitted, no overview", &view_frames(&timeline, bare, Clock::Ended(end), count), baseline);
    }
    if runs("following") {
        let mut following = TimelineView::default();
        following.window_s = 5.0;
        let frames = view_frames(&timeline, following, Clock::Live(end * 0.6), count);
        report("following live, last 5 s", &frames, baseline);
    }
    if runs("compact") {
        let mut compact = TimelineView::default();
        compact.compact = true;
        report("compact lanes", &view_frames(&timeline, compact, Clock::Ended(end), count), baseline);
    }
    drop(timeline);
    if runs("scrub") {
        let (streams, per_stream, reps) = if full { (1000, 1000, 5) } else { (20, 100, 1) };
        scrubbing(synthetic(streams, per_stream, 60.0), reps);
    }
}

/// Backward scrubs against rebuilding from zero, and what replay keeps.
fn scrubbing(events: Vec<Event>, reps: usize) {
    let count = events.len();
    let built = Instant::now();
    let mut replay = Replay::new("bench", events.clone());
    let load = built.elapsed();
    let mut sorted = events;
    sorted.sort_by_key(|e| e.at);
    let end = replay.duration_s();
    let (checkpoints, checkpoint_bytes) = replay.checkpoint_cost();
    let model = model_bytes(replay.timeline());
    let kept = count * std::mem::size_of::<Event>();
    let cloned = Instant::now();
    let copy = replay.timeline().clone();
    let clone = cloned.elapsed();
    drop(copy);
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "\nreplay: {} streams, {count} events; opening (sort, fold in, checkpoints) {:.0} ms",
        replay.timeline().lanes.len(),
        ms(load)
    );
    println!(
        "  model at the end ~{:.1} MiB (a clone of it: {:.1} ms); events kept {:.1} MiB ({} B each); \
         {checkpoints} checkpoints {:.2} MiB ({:.1} B per event)",
        mib(model),
        ms(clone),
        mib(kept),
        std::mem::size_of::<Event>(),
        mib(checkpoint_bytes),
        checkpoint_bytes as f64 / count as f64
    );
    for fraction in [0.9, 0.5, 0.1] {
        let to_s = end * fraction;
        let (mut back, mut fresh) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            replay.seek(end);
            let started = Instant::now();
            replay.seek(to_s);
            back.push(started.elapsed());
            let started = Instant::now();
            let upto = sorted.partition_point(|e| e.at.as_secs_f64() <= to_s);
            let rebuilt = Timeline::from_events("bench", &sorted[..upto]);
            fresh.push(started.elapsed());
            assert_eq!(rebuilt.event_count(), replay.timeline().event_count());
        }
        back.sort();
        fresh.sort();
        let (back, fresh) = (back[back.len() / 2], fresh[fresh.len() / 2]);
        let ratio = back.as_secs_f64() / fresh.as_secs_f64();
        println!(
            "  end → {:>2.0}% of the run: backward scrub {:>7.3} ms, from zero {:>8.1} ms, ratio {ratio:.4}",
            fraction * 100.0,
            ms(back),
            ms(fresh)
        );
    }
}

/// The heap a timeline's lanes hold, roughly (series by capacity).
fn model_bytes(timeline: &Timeline) -> usize {
    use std::mem::size_of;
    let lane = |l: &Lane| {
        let marks =
            |m: &[stallscope::gui::lanes::Mark]| m.iter().map(|m| size_of_val(m) + m.text.capacity()).sum::<usize>();
        size_of::<Lane>()
            + l.bytes.capacity() * size_of::<PlotPoint>()
            + (l.output_ticks.capacity() + l.keepalive_ticks.capacity() + l.lifecycle_ticks.capacity()) * 8
            + l.timers.iter().map(|t| size_of_val(t) + t.progress.capacity() * size_of::<PlotPoint>()).sum::<usize>()
            + l.log.capacity() * size_of::<stallscope::gui::lanes::LogEntry>()
            + marks(&l.attempts)
            + marks(&l.fired)
            + marks(&l.hops)
            + marks(&l.low_buckets)
            + marks(&l.bursts)
    };
    timeline.lanes.iter().map(lane).sum()
}
