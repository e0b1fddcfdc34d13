//! The lag probe: how late our own runtime runs while a run goes, so that
//! a timer that fires can say how much of its lateness was ours
//! ([`super::lag`] says when that makes its verdict untrustworthy).
//!
//! **What is measured.** Probe tasks on the run's runtime sleep a short
//! [`INTERVAL`] over and over and note how late each wake-up came (now −
//! deadline): the time a task whose moment has come waits for the timer
//! driver and then for a worker. Every stream's timers and reads wait the
//! same way, so this is the lateness an overloaded client adds to what it
//! blames on the network.
//!
//! **Why several tasks, and no pinning.** tokio cannot pin a task to a
//! worker thread. A task woken by the timer goes to the queue of the worker
//! that woke it, or to that worker's LIFO slot, which no other worker
//! steals from; one busy worker therefore delays only some tasks. The probe
//! runs one task per worker, at staggered phases, so its samples land in
//! more of the queues a stream's tasks wait in, and it samples more often.
//! tokio's stable runtime metrics count polls and parks but do not measure
//! scheduling delay (its latency histogram is unstable), so they cannot
//! replace this.
//!
//! **What a timer reads.** [`LagMeter::timer_fired`] gives a fired timer the
//! largest of its own lateness (now − its deadline: free and exact for that
//! timer), the largest lateness the probe saw since the timer's budget
//! began, and how long a probe task has been overdue right now: the bytes
//! that would have reset the timer may have waited in another task
//! (hyper's connection task) while the timer's own task was on time. The
//! last one matters most under saturation: tokio then serves the tasks
//! that circulate through its workers' local queues promptly while tasks
//! pushed to its global queue wait for seconds. A run of 10,000 streams
//! showed timers firing 5 ms late while a probe task, and the connection
//! tasks with it, waited 4 s; the probe could only say so once it ran.
//!
//! **What is kept.** The largest lateness per [`SLOT`] of the run, in a ring
//! of atomics covering [`HISTORY`]: writing a sample and reading a window
//! take no lock. Each finished slot is sent to the run's sink as a
//! [`LagSample`] ([`EventSink::runtime_lag`]), so the run's own lag is
//! recorded beside its events.
//!
//! The meter is handed to the executor, never found through a global: a
//! run without one (what-if and replay in virtual time, tests) reports
//! `lag: None` on its timers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::event::EventSink;
use super::lag::lag_untrusts;

/// How often each probe task measures. A stall between two samples is
/// still seen while it lasts (the probe task is overdue) and recorded once
/// it ends; a shorter interval only costs wake-ups.
pub const INTERVAL: Duration = Duration::from_millis(50);

/// The period of one kept reading: the largest lateness within it.
pub const SLOT: Duration = Duration::from_millis(100);

/// Readings kept; a window reaching further back sees only these.
const SLOTS: u64 = 128;

/// How far back a timer's window can see the probe's readings.
pub const HISTORY: Duration = Duration::from_millis(100 * SLOTS);

/// The largest lateness within one period of a run: run-level, about no
/// stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LagSample {
    /// When the period began, since the run's epoch; it lasts [`SLOT`].
    pub at: Duration,
    /// The largest lateness a probe task measured in it.
    pub lag: Duration,
}

/// What the run's timers said about trust, for its summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LagSummary {
    /// Timers that fired.
    pub fired: u64,
    /// Of those, the ones whose lag makes their verdict untrustworthy.
    pub untrusted: u64,
    /// The largest lag measured during the run, by the probe or by a
    /// timer's own lateness.
    pub max_lag: Duration,
}

impl LagSummary {
    /// The line a summary shows when any timer fired untrusted.
    pub fn overload_note(&self) -> Option<String> {
        (self.untrusted > 0).then(|| {
            format!(
                "client overloaded: {} of {} timeouts not trustworthy (runtime lag up to {:.0} ms)",
                self.untrusted,
                self.fired,
                self.max_lag.as_secs_f64() * 1e3
            )
        })
    }
}

/// A slot's reading packed in one word: the slot's number + 1 in the high
/// half (0: never written), the lateness in microseconds in the low half.
fn pack(slot: u64, lag: Duration) -> u64 {
    let micros = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX).min(u64::from(u32::MAX));
    ((slot + 1) << 32) | micros
}

fn unpack(word: u64) -> Option<(u64, Duration)> {
    let tag = word >> 32;
    (tag > 0).then(|| (tag - 1, Duration::from_micros(word & u64::from(u32::MAX))))
}

/// The readings, shared by the probe tasks, the meter and the probe.
#[derive(Debug)]
struct Readings {
    epoch: Instant,
    slots: [AtomicU64; SLOTS as usize],
    /// Per probe task, when it is due to wake: ns since `epoch` + 1 (0:
    /// not waiting).
    due: Vec<AtomicU64>,
    /// Slots before this number have been sent to the sink.
    reported: AtomicU64,
    fired: AtomicU64,
    untrusted: AtomicU64,
    /// Nanoseconds.
    max_lag: AtomicU64,
}

impl Readings {
    fn new(epoch: Instant, probes: usize) -> Readings {
        Readings {
            epoch,
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            due: (0..probes).map(|_| AtomicU64::new(0)).collect(),
            reported: AtomicU64::new(0),
            fired: AtomicU64::new(0),
            untrusted: AtomicU64::new(0),
            max_lag: AtomicU64::new(0),
        }
    }

    fn slot_of(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.epoch);
        u64::try_from(since.as_nanos() / SLOT.as_nanos()).unwrap_or(u64::MAX >> 33)
    }

    fn note_max(&self, lag: Duration) {
        self.max_lag.fetch_max(u64::try_from(lag.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn slot_start(&self, slot: u64) -> Instant {
        self.epoch + SLOT.saturating_mul(u32::try_from(slot).unwrap_or(u32::MAX))
    }

    /// Keeps `lag`, measured at `at`, if it is the largest of its slot.
    fn record(&self, at: Instant, lag: Duration) {
        self.note_max(lag);
        self.keep(self.slot_of(at), lag);
    }

    /// Keeps a probe's wake-up at `now` for `due`: every slot it overslept
    /// gets the lateness reached by its end.
    fn woke(&self, due: Instant, now: Instant) {
        self.note_max(now.saturating_duration_since(due));
        let last = self.slot_of(now);
        for slot in self.slot_of(due).max(last.saturating_sub(SLOTS - 1))..=last {
            let end = self.slot_start(slot + 1).min(now);
            self.keep(slot, end.saturating_duration_since(due));
        }
    }

    /// Marks probe `probe` as waiting until `due`.
    fn waits(&self, probe: usize, due: Instant) {
        let ns = u64::try_from(due.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1);
        self.due[probe].store(ns + 1, Ordering::Relaxed);
    }

    /// How long the most overdue probe task has been waiting for a worker.
    fn overdue(&self, now: Instant) -> Duration {
        let overdue = |due: &AtomicU64| match due.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            ns => now.saturating_duration_since(self.epoch + Duration::from_nanos(ns - 1)),
        };
        self.due.iter().map(overdue).max().unwrap_or(Duration::ZERO)
    }

    /// Keeps `lag` if it is the largest of `slot`.
    fn keep(&self, slot: u64, lag: Duration) {
        let cell = &self.slots[(slot % SLOTS) as usize];
        let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| match unpack(word) {
            Some((held, kept)) if held == slot && kept >= lag => None,
            // A writer that measured before a slow one moved the ring on.
            Some((held, _)) if held > slot => None,
            _ => Some(pack(slot, lag)),
        });
    }

    fn reading(&self, slot: u64) -> Option<Duration> {
        match unpack(self.slots[(slot % SLOTS) as usize].load(Ordering::Relaxed)) {
            Some((held, lag)) if held == slot => Some(lag),
            _ => None,
        }
    }

    /// The largest lateness kept for the slots from `since` to `now`.
    fn window_max(&self, since: Instant, now: Instant) -> Duration {
        let last = self.slot_of(now);
        let first = self.slot_of(since).max(last.saturating_sub(SLOTS - 1));
        (first..=last).filter_map(|slot| self.reading(slot)).max().unwrap_or(Duration::ZERO)
    }

    /// Sends every slot before `end` not sent yet. Callers racing each
    /// other each send a different range.
    fn report_until(&self, end: u64, sink: &dyn EventSink) {
        let from = self.reported.fetch_max(end, Ordering::AcqRel);
        // Slots older than the ring were overwritten.
        for slot in from.max(end.saturating_sub(SLOTS))..end {
            if let Some(lag) = self.reading(slot) {
                sink.runtime_lag(LagSample { at: self.slot_start(slot) - self.epoch, lag });
            }
        }
    }
}

/// Reads the probe's measurements when a timer fires. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LagMeter {
    readings: Arc<Readings>,
}

impl LagMeter {
    /// A meter with nothing measured yet, whose slots count from `epoch`.
    /// [`LagProbe::start`] makes one that its tasks fill.
    pub fn new(epoch: Instant) -> LagMeter {
        LagMeter { readings: Arc::new(Readings::new(epoch, 0)) }
    }

    /// Notes a lateness of `lag` measured at `at`, as the probe does.
    pub fn record(&self, at: Instant, lag: Duration) {
        self.readings.record(at, lag);
    }

    /// The lag of a timer with `budget`, due at `due` and noticed at `now`:
    /// the largest of its own lateness, the largest lateness measured since
    /// its budget began (as far back as [`HISTORY`]) and how long a probe
    /// task has been overdue. Counts the timer in the run's [`LagSummary`].
    pub fn timer_fired(&self, budget: Duration, due: Instant, now: Instant) -> Duration {
        let lag = self.lateness(budget, due, now);
        self.count_fired(budget, lag);
        lag
    }

    /// What [`timer_fired`](Self::timer_fired) reads, without counting a
    /// timer: a timer that came due is read before it is known to fire
    /// (guard mode holds it when the lag is too large to trust it).
    pub fn lateness(&self, budget: Duration, due: Instant, now: Instant) -> Duration {
        let readings = &self.readings;
        let since = due.checked_sub(budget).unwrap_or(readings.epoch);
        let own = now.saturating_duration_since(due);
        let lag = readings.window_max(since, now).max(own).max(readings.overdue(now));
        readings.note_max(lag);
        lag
    }

    /// Counts a timer with `budget` that fired with `lag` in the run's
    /// [`LagSummary`].
    pub fn count_fired(&self, budget: Duration, lag: Duration) {
        let readings = &self.readings;
        readings.fired.fetch_add(1, Ordering::Relaxed);
        if lag_untrusts(budget, lag) {
            readings.untrusted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What the timers said so far.
    pub fn summary(&self) -> LagSummary {
        let readings = &self.readings;
        LagSummary {
            fired: readings.fired.load(Ordering::Relaxed),
            untrusted: readings.untrusted.load(Ordering::Relaxed),
            max_lag: Duration::from_nanos(readings.max_lag.load(Ordering::Relaxed)),
        }
    }
}

/// The probe tasks of one run. Dropping the probe stops them.
pub struct LagProbe {
    meter: LagMeter,
    sink: Arc<dyn EventSink>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for LagProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LagProbe").field("meter", &self.meter).field("tasks", &self.tasks.len()).finish_non_exhaustive()
    }
}

impl LagProbe {
    /// Starts one probe task per worker of the current runtime, with slots
    /// counted from `epoch` (the run's), sending each finished slot to
    /// `sink`. Must be called from within the runtime the run's calls use.
    pub fn start(epoch: Instant, sink: Arc<dyn EventSink>) -> LagProbe {
        let workers = tokio::runtime::Handle::current().metrics().num_workers().max(1);
        let meter = LagMeter { readings: Arc::new(Readings::new(epoch, workers)) };
        let tasks = (0..workers)
            .map(|i| {
                let readings = Arc::clone(&meter.readings);
                // Only the first task sends samples: one sender is enough,
                // and any of them would do.
                let reporter = (i == 0).then(|| Arc::clone(&sink));
                let phase = INTERVAL.mul_f64(i as f64 / workers as f64);
                tokio::spawn(probe(readings, i, phase, reporter))
            })
            .collect();
        LagProbe { meter, sink, tasks }
    }

    /// The meter the run's executor reads.
    pub fn meter(&self) -> LagMeter {
        self.meter.clone()
    }

    /// Stops the tasks, sends the slots not sent yet (the current one
    /// included) and returns what the run's timers said.
    pub fn stop(mut self) -> LagSummary {
        self.abort();
        let readings = &self.meter.readings;
        readings.report_until(readings.slot_of(Instant::now()) + 1, self.sink.as_ref());
        self.meter.summary()
    }

    fn abort(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for LagProbe {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Probe task `index`: measures its own wake-up lateness every
/// [`INTERVAL`] and, as the reporter, sends each slot once it is over.
async fn probe(readings: Arc<Readings>, index: usize, phase: Duration, reporter: Option<Arc<dyn EventSink>>) {
    let mut due = Instant::now() + phase;
    loop {
        readings.waits(index, due);
        tokio::time::sleep_until(due).await;
        let now = Instant::now();
        readings.woke(due, now);
        if let Some(sink) = &reporter {
            readings.report_until(readings.slot_of(now), sink.as_ref());
        }
        // From now, not from `due`: after a stall the probe measures again
        // one interval later instead of catching up in a burst.
        due = now + INTERVAL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::Event;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Samples(Mutex<Vec<LagSample>>);

    impl EventSink for Samples {
        fn emit(&self, _event: Event) {}
        fn runtime_lag(&self, sample: LagSample) {
            self.0.lock().unwrap().push(sample);
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_slot_keeps_its_largest_reading_and_a_lap_of_the_ring_forgets_it() {
        let epoch = Instant::now();
        let r = Readings::new(epoch, 0);
        r.record(epoch + ms(10), ms(3));
        r.record(epoch + ms(20), ms(7));
        r.record(epoch + ms(30), ms(5));
        assert_eq!(r.reading(0), Some(ms(7)));
        assert_eq!(r.reading(1), None);
        r.record(epoch + SLOT * SLOTS as u32 + ms(1), ms(2));
        assert_eq!(r.reading(0), None, "overwritten by the slot a lap later");
        assert_eq!(r.reading(SLOTS), Some(ms(2)));
        // A late writer never puts an old slot back.
        r.record(epoch + ms(40), ms(9));
        assert_eq!(r.reading(SLOTS), Some(ms(2)));
    }

    #[test]
    fn a_timer_reads_the_largest_lateness_since_its_budget_began_or_its_own() {
        let epoch = Instant::now();
        let meter = LagMeter::new(epoch);
        meter.record(epoch + ms(150), ms(400));
        meter.record(epoch + ms(950), ms(20));
        // An idle timer of 1 s due at 1.1 s: its budget began at 0.1 s.
        assert_eq!(meter.timer_fired(ms(1000), epoch + ms(1100), epoch + ms(1101)), ms(400));
        // A data-stall timer of 0.5 s due at 1.1 s began after that stall.
        assert_eq!(meter.timer_fired(ms(500), epoch + ms(1100), epoch + ms(1101)), ms(20));
        // Its own lateness counts when it is larger.
        assert_eq!(meter.timer_fired(ms(500), epoch + ms(1100), epoch + ms(1180)), ms(80));
        let summary = meter.summary();
        assert_eq!((summary.fired, summary.untrusted, summary.max_lag), (3, 2, ms(400)));
        assert_eq!(
            summary.overload_note().as_deref(),
            Some("client overloaded: 2 of 3 timeouts not trustworthy (runtime lag up to 400 ms)")
        );
        assert_eq!(LagMeter::new(epoch).summary().overload_note(), None);
    }

    #[test]
    fn a_window_longer_than_the_history_sees_the_history() {
        let epoch = Instant::now();
        let meter = LagMeter::new(epoch);
        meter.record(epoch + ms(50), ms(900));
        let late = epoch + HISTORY + SLOT * 2;
        meter.record(late, ms(30));
        assert_eq!(meter.timer_fired(Duration::from_secs(300), late, late), ms(30));
    }

    #[test]
    fn an_overdue_probe_counts_before_it_wakes_and_fills_the_slots_it_overslept() {
        let epoch = Instant::now();
        let r = Arc::new(Readings::new(epoch, 2));
        let meter = LagMeter { readings: Arc::clone(&r) };
        r.waits(0, epoch + ms(110));
        r.waits(1, epoch + ms(400));
        // A timer at 0.9 s: probe 0 has waited 790 ms past its time.
        assert_eq!(meter.timer_fired(ms(500), epoch + ms(900), epoch + ms(900)), ms(790));
        r.woke(epoch + ms(110), epoch + ms(950));
        r.waits(0, epoch + ms(960));
        assert_eq!(r.reading(1), Some(ms(90)));
        assert_eq!(r.reading(5), Some(ms(490)));
        assert_eq!(r.reading(9), Some(ms(840)));
        // Once it has woken, what it overslept stays in the window.
        assert_eq!(meter.timer_fired(ms(500), epoch + ms(1200), epoch + ms(1200)), ms(840));
    }

    #[test]
    fn each_slot_is_reported_once_with_when_it_began() {
        let epoch = Instant::now();
        let r = Readings::new(epoch, 0);
        let sink = Samples::default();
        r.record(epoch + ms(10), ms(1));
        r.record(epoch + ms(250), ms(6));
        r.report_until(3, &sink);
        r.report_until(3, &sink);
        r.record(epoch + ms(320), ms(2));
        r.report_until(4, &sink);
        let got = sink.0.lock().unwrap().clone();
        let want = [(0, 1), (200, 6), (300, 2)].map(|(at, lag)| LagSample { at: ms(at), lag: ms(lag) });
        assert_eq!(got, want);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_worker_shows_in_the_probe_and_stopping_sends_the_last_slot() {
        let sink = Arc::new(Samples::default());
        let probe = LagProbe::start(Instant::now(), Arc::clone(&sink) as Arc<dyn EventSink>);
        tokio::time::sleep(INTERVAL * 3).await;
        // The only worker is this one: nothing else runs while it sleeps.
        std::thread::sleep(ms(250));
        tokio::time::sleep(INTERVAL * 3).await;
        let summary = probe.stop();
        let samples = sink.0.lock().unwrap().clone();
        let worst = samples.iter().map(|s| s.lag).max().unwrap_or_default();
        assert!(worst >= ms(200), "{samples:?}");
        assert!(summary.max_lag >= ms(200));
        assert_eq!(summary.fired, 0);
        let mut starts: Vec<Duration> = samples.iter().map(|s| s.at).collect();
        starts.dedup();
        assert_eq!(starts.len(), samples.len(), "a slot was sent twice: {samples:?}");
    }
}
