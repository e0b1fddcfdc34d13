//! The recorder: events from the core to the run database without ever
//! slowing a stream.
//!
//! [`RecorderSink`] is the core's [`EventSink`]: it hands each event to a
//! bounded channel with `try_send` and returns. A writer thread owns the
//! SQLite connection, collects events into batches and commits each batch
//! in one transaction, at least every flush interval and whenever a batch
//! reaches its size limit.
//!
//! **Policy when the writer falls behind: counted drops.** When the channel
//! is full the event is dropped and counted, never waited for. The count is
//! written to the run's row (`dropped_events`) and, per stream, to its
//! stream's row with every batch and at the end, so it is visible even
//! after a crash, and [`RecorderHandle::finish`] returns it. Events of a
//! batch that fails to commit are counted the same way (and logged).
//!
//! **Bodies have a byte budget.** A recorded body (up to the per-attempt
//! cap, `STALLSCOPE_RECORD_BODY_MAX_KB`) can be large, so the bytes of the
//! bodies between the sink and their commit are counted, and a body that
//! would take them over [`RecorderOptions::body_budget`] is dropped and
//! counted (`dropped_bodies`, and among the dropped events), never waited
//! for: bodies can never pin more memory than the budget. The writer
//! commits early once half the budget is waiting, so the budget is left
//! for bursts.
//!
//! The run's own scheduling lag (the lag probe's readings, a few per
//! second) travels the same channel and is committed with the events; a
//! reading that finds the channel full is dropped and counted among the
//! run's dropped events.
//!
//! Crash safety: a crash loses at most the events not yet committed (one
//! flush interval's worth). [`RecorderHandle::finish`] commits everything and
//! completes the run; dropping the handle without finishing commits what is
//! queued and leaves the run `running`, so the next open of the database,
//! in another process, marks it `interrupted`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::core::event::{Event, EventKind, EventSink, RecordedBody, StreamId};
use crate::core::lag_probe::LagSample;
use crate::report::RunReport;
use crate::store::{Drops, RunId, RunStart, Store, StoreError};

/// How the recorder buffers and commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderOptions {
    /// Events the channel holds before new ones are dropped.
    pub capacity: usize,
    /// The longest an event waits before its batch is committed.
    pub flush_interval: Duration,
    /// A batch this large is committed at once.
    pub batch_events: usize,
    /// Bytes of recorded bodies waiting to be committed, at most; a body
    /// that would exceed it is dropped and counted.
    pub body_budget: u64,
}

impl Default for RecorderOptions {
    fn default() -> Self {
        RecorderOptions {
            capacity: 65_536,
            flush_interval: Duration::from_millis(200),
            batch_events: 16_384,
            body_budget: 64 << 20,
        }
    }
}

/// The bytes a recorded body holds in memory, for the body budget.
fn body_bytes(kind: &EventKind) -> Option<u64> {
    match kind {
        EventKind::BodyRecorded { body: RecordedBody::Raw { bytes, .. } } => Some(bytes.len() as u64),
        EventKind::BodyRecorded { body: RecordedBody::Text { texts, .. } } => {
            Some(texts.iter().map(|t| (t.len() + std::mem::size_of::<String>()) as u64).sum())
        }
        _ => None,
    }
}

/// What the sink and the writer count together.
#[derive(Debug, Default)]
struct Counters {
    /// Events not recorded, bodies included.
    dropped: AtomicU64,
    /// Bodies not recorded.
    dropped_bodies: AtomicU64,
    /// Events not recorded per stream. Only the drop path and the writer
    /// (when `dropped` moved) take the lock: emitting never does.
    dropped_by_stream: Mutex<HashMap<StreamId, u64>>,
    /// Bytes of bodies between the sink and their commit.
    body_bytes: AtomicU64,
}

impl Counters {
    /// Counts `n` events of `stream` not recorded, `bodies` of them bodies.
    #[cold]
    fn count_lost(&self, stream: StreamId, n: u64, bodies: u64) {
        *self.dropped_by_stream.lock().unwrap_or_else(PoisonError::into_inner).entry(stream).or_default() += n;
        self.dropped_bodies.fetch_add(bodies, Ordering::Relaxed);
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// The drop counts as they are now; per stream only when `with_streams`.
    fn drops(&self, with_streams: bool) -> Drops {
        // Totals before streams: `count_lost` counts the stream first, so the
        // streams read after the totals hold every drop the totals do, and
        // the writer, which writes the streams only when the total moved,
        // never leaves a counted drop unwritten.
        let events = self.dropped.load(Ordering::Relaxed);
        let bodies = self.dropped_bodies.load(Ordering::Relaxed);
        let by_stream = if with_streams {
            let map = self.dropped_by_stream.lock().unwrap_or_else(PoisonError::into_inner);
            map.iter().map(|(s, n)| (*s, *n)).collect()
        } else {
            Vec::new()
        };
        Drops { events, bodies, by_stream }
    }
}

/// Starts recorders.
#[derive(Debug)]
pub struct Recorder;

impl Recorder {
    /// Opens the database at `store_path`, begins a run and starts its
    /// writer thread, with the default options.
    pub fn start(store_path: &Path, start: RunStart) -> Result<(RecorderSink, RecorderHandle), StoreError> {
        Self::start_with(store_path, start, RecorderOptions::default())
    }

    /// [`Recorder::start`] with explicit options.
    pub fn start_with(
        store_path: &Path,
        start: RunStart,
        options: RecorderOptions,
    ) -> Result<(RecorderSink, RecorderHandle), StoreError> {
        let mut store = Store::open(store_path)?;
        let run = store.begin_run(&start)?;
        let (tx, rx) = sync_channel(options.capacity.max(1));
        let counters = Arc::new(Counters::default());
        let body_budget = options.body_budget;
        let writer = Writer {
            store,
            run,
            rx,
            counters: Arc::clone(&counters),
            options,
            written_drops: 0,
            streams_written: Instant::now(),
        };
        let thread = std::thread::Builder::new()
            .name("stallscope-recorder".to_owned())
            .spawn(move || writer.run())
            .map_err(|source| StoreError::Thread { path: store_path.to_path_buf(), source })?;
        let sink = RecorderSink { tx: tx.clone(), counters: Arc::clone(&counters), body_budget };
        let handle = RecorderHandle { run, tx, counters, thread: Some(thread), path: store_path.to_path_buf() };
        Ok((sink, handle))
    }
}

/// What travels to the writer.
enum Message {
    Event(Event),
    Lag(LagSample),
    /// Commit everything before this, then answer.
    Flush(SyncSender<Result<(), StoreError>>),
    /// Commit everything, complete the run, answer with the dropped count, stop.
    Finish(Box<RunReport>, SyncSender<Result<u64, StoreError>>),
    /// Commit everything and stop (the run stays `running`).
    Close,
}

/// The core's sink into the recorder. Cheap to clone; never blocks.
#[derive(Debug, Clone)]
pub struct RecorderSink {
    tx: SyncSender<Message>,
    counters: Arc<Counters>,
    body_budget: u64,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Message::Event(_) => "Event",
            Message::Lag(_) => "Lag",
            Message::Flush(_) => "Flush",
            Message::Finish(..) => "Finish",
            Message::Close => "Close",
        })
    }
}

impl RecorderSink {
    /// Events dropped so far.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// Bodies dropped so far.
    pub fn dropped_bodies(&self) -> u64 {
        self.counters.dropped_bodies.load(Ordering::Relaxed)
    }
}

impl RecorderSink {
    /// Queues a body only while the bodies waiting stay within the budget.
    /// Bodies are rare: this is kept off the path of every other event.
    #[cold]
    fn emit_body(&self, event: Event, size: u64) {
        let stream = event.stream;
        let waiting = self.counters.body_bytes.fetch_add(size, Ordering::Relaxed);
        if waiting.saturating_add(size) > self.body_budget || self.tx.try_send(Message::Event(event)).is_err() {
            self.counters.body_bytes.fetch_sub(size, Ordering::Relaxed);
            self.counters.count_lost(stream, 1, 1);
        }
    }
}

impl EventSink for RecorderSink {
    fn emit(&self, event: Event) {
        if let Some(size) = body_bytes(&event.kind) {
            return self.emit_body(event, size);
        }
        let stream = event.stream;
        // Full: the writer is behind. Disconnected: the run is finished or
        // the writer died. Either way the stream goes on.
        if self.tx.try_send(Message::Event(event)).is_err() {
            self.counters.count_lost(stream, 1, 0);
        }
    }

    fn runtime_lag(&self, sample: LagSample) {
        if self.tx.try_send(Message::Lag(sample)).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Controls a recording run: flush it, finish it.
#[derive(Debug)]
pub struct RecorderHandle {
    run: RunId,
    tx: SyncSender<Message>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
    path: std::path::PathBuf,
}

impl RecorderHandle {
    /// The run being recorded.
    pub fn run_id(&self) -> RunId {
        self.run
    }

    /// Events dropped so far.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    fn gone(&self) -> StoreError {
        StoreError::WriterGone { path: self.path.clone() }
    }

    /// Blocks until every event emitted before this call is committed.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.flusher().flush()
    }

    /// What flushes this recording from elsewhere while this handle stays
    /// with whoever finishes the run.
    pub fn flusher(&self) -> Flusher {
        Flusher { tx: self.tx.clone(), path: self.path.clone() }
    }

    /// Commits every queued event, stores `report` and completes the run.
    /// Returns the number of events that were not recorded.
    pub fn finish(mut self, report: &RunReport) -> Result<u64, StoreError> {
        let (reply, answer) = sync_channel(1);
        let sent = self.tx.send(Message::Finish(Box::new(report.clone()), reply));
        let result = match sent {
            Ok(()) => answer.recv().map_err(|_| self.gone()).and_then(|r| r),
            Err(_) => Err(self.gone()),
        };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        result
    }
}

/// Flushes a recording ([`RecorderHandle::flusher`]).
#[derive(Debug, Clone)]
pub struct Flusher {
    tx: SyncSender<Message>,
    path: std::path::PathBuf,
}

impl Flusher {
    /// Blocks until every event emitted before this call is committed; an
    /// error once the run is finished (its events are all committed then).
    pub fn flush(&self) -> Result<(), StoreError> {
        let gone = || StoreError::WriterGone { path: self.path.clone() };
        let (reply, answer) = sync_channel(1);
        self.tx.send(Message::Flush(reply)).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}

impl Drop for RecorderHandle {
    /// Without [`RecorderHandle::finish`]: commits what is queued and stops
    /// the writer; the run stays `running` (seen as interrupted later).
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take()
            && self.tx.send(Message::Close).is_ok()
        {
            let _ = thread.join();
        }
    }
}

/// The writer thread's state.
struct Writer {
    store: Store,
    run: RunId,
    rx: Receiver<Message>,
    counters: Arc<Counters>,
    options: RecorderOptions,
    /// The dropped-event count when the per-stream counts were last
    /// written, so they are written only when they moved...
    written_drops: u64,
    /// ...and at most every [`STREAM_DROPS_EVERY`] while the run goes on:
    /// a writer that falls behind drops on every stream, and one row per
    /// stream with every batch would slow it further.
    streams_written: Instant,
}

/// How often the writer takes what has been sent while a batch is open:
/// often enough that the channel holds a small part of its capacity (20 ms
/// of 100,000 events a second is 2,000), seldom enough that the writer
/// sleeps between.
const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// How often the per-stream drop counts are written while a run goes on
/// (they are always written by a flush and at the end).
const STREAM_DROPS_EVERY: Duration = Duration::from_secs(1);

/// Events waiting for their commit.
#[derive(Default)]
struct Batch {
    events: Vec<Event>,
    lag: Vec<LagSample>,
    /// When the oldest of them arrived.
    oldest: Option<Instant>,
    /// Bytes of the bodies among them, counted in the body budget until committed.
    body_bytes: u64,
}

/// What the writer does after a message.
enum Next {
    Continue,
    Stop,
}

impl Writer {
    fn run(mut self) {
        let mut batch = Batch { events: Vec::with_capacity(self.options.batch_events.min(65_536)), ..Batch::default() };
        loop {
            let message = match batch.oldest {
                None => match self.rx.recv() {
                    Ok(message) => message,
                    Err(_) => break,
                },
                // A batch is open: take what comes in steps, not event by
                // event. A writer waiting in `recv` is woken by every event
                // sent, and at thousands of streams those wake-ups (and the
                // senders' contention on the channel's waker) cost more
                // than the writes.
                Some(since) => {
                    let left = self.options.flush_interval.saturating_sub(since.elapsed());
                    if left.is_zero() {
                        let _ = self.commit(&mut batch, false);
                        continue;
                    }
                    std::thread::sleep(left.min(DRAIN_EVERY));
                    match self.rx.try_recv() {
                        Ok(message) => message,
                        Err(TryRecvError::Empty) => continue,
                        Err(TryRecvError::Disconnected) => break,
                    }
                }
            };
            if let Next::Stop = self.handle(message, &mut batch) {
                return;
            }
            // Take whatever else is already queued without waiting.
            while let Ok(message) = self.rx.try_recv() {
                if let Next::Stop = self.handle(message, &mut batch) {
                    return;
                }
            }
        }
        // Every sender is gone: keep what was queued.
        let _ = self.commit(&mut batch, true);
    }

    fn handle(&mut self, message: Message, batch: &mut Batch) -> Next {
        match message {
            Message::Lag(sample) => {
                batch.oldest.get_or_insert_with(Instant::now);
                batch.lag.push(sample);
                Next::Continue
            }
            Message::Event(event) => {
                batch.oldest.get_or_insert_with(Instant::now);
                batch.body_bytes += body_bytes(&event.kind).unwrap_or(0);
                batch.events.push(event);
                if batch.events.len() >= self.options.batch_events
                    || batch.body_bytes >= self.options.body_budget / 2
                    || batch.oldest.is_some_and(|since| since.elapsed() >= self.options.flush_interval)
                {
                    let _ = self.commit(batch, false);
                }
                Next::Continue
            }
            Message::Flush(reply) => {
                let result = self.commit(batch, true);
                let _ = reply.send(result);
                Next::Continue
            }
            Message::Finish(report, reply) => {
                let _ = self.commit(batch, true);
                let dropped = self.counters.dropped.load(Ordering::Relaxed);
                let result = self.store.finish_run(self.run, &report, dropped).map(|()| dropped);
                let _ = reply.send(result);
                Next::Stop
            }
            Message::Close => {
                let _ = self.commit(batch, true);
                Next::Stop
            }
        }
    }

    /// Commits the batch with the drop counts, per stream too when they
    /// moved and are due (`streams_now`: whenever they moved). A failed
    /// commit is logged and its events counted as dropped; the writer
    /// keeps going.
    fn commit(&mut self, batch: &mut Batch, streams_now: bool) -> Result<(), StoreError> {
        batch.oldest = None;
        let moved = self.counters.dropped.load(Ordering::Relaxed) != self.written_drops;
        let streams = moved && (streams_now || self.streams_written.elapsed() >= STREAM_DROPS_EVERY);
        if batch.events.is_empty() && batch.lag.is_empty() && !streams {
            return Ok(());
        }
        let drops = self.counters.drops(streams);
        let result = self.store.append(self.run, &batch.events, &batch.lag, Some(&drops));
        match &result {
            Ok(()) if streams => {
                self.written_drops = drops.events;
                self.streams_written = Instant::now();
            }
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(run = self.run, lost = batch.events.len() + batch.lag.len(), error = %e, "recorder: a batch of events was not written");
                let mut lost: HashMap<StreamId, (u64, u64)> = HashMap::new();
                for event in &batch.events {
                    let entry = lost.entry(event.stream).or_default();
                    entry.0 += 1;
                    entry.1 += u64::from(body_bytes(&event.kind).is_some());
                }
                for (stream, (events, bodies)) in lost {
                    self.counters.count_lost(stream, events, bodies);
                }
                self.counters.dropped.fetch_add(batch.lag.len() as u64, Ordering::Relaxed);
            }
        }
        self.counters.body_bytes.fetch_sub(batch.body_bytes, Ordering::Relaxed);
        batch.body_bytes = 0;
        batch.events.clear();
        batch.lag.clear();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::EventKind;

    #[test]
    fn events_are_committed_within_the_flush_interval_without_a_flush_call() {
        let dir = std::env::temp_dir().join(format!("stallscope-recorder-unit-{}", std::process::id()));
        let path = dir.join("runs.db");
        let start = RunStart::new(None, None, &crate::tunables::Tunables::defaults(), &[]);
        let options = RecorderOptions { flush_interval: Duration::from_millis(20), ..RecorderOptions::default() };
        let (sink, handle) = Recorder::start_with(&path, start, options).unwrap();
        sink.emit(Event {
            at: Duration::from_millis(1),
            stream: 0,
            attempt: 1,
            kind: EventKind::ChunkReceived { bytes: 3 },
        });
        let reader = Store::open(&path).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while reader.events(handle.run_id(), 0).unwrap().is_empty() {
            assert!(Instant::now() < deadline, "the event was never committed");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(handle);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn lag_readings_are_committed_with_the_run() {
        let dir = std::env::temp_dir().join(format!("stallscope-recorder-lag-{}", std::process::id()));
        let path = dir.join("runs.db");
        let start = RunStart::new(None, None, &crate::tunables::Tunables::defaults(), &[]);
        let (sink, handle) = Recorder::start(&path, start).unwrap();
        let sample = LagSample { at: Duration::from_millis(100), lag: Duration::from_millis(7) };
        sink.runtime_lag(sample);
        handle.flush().unwrap();
        assert_eq!(Store::open(&path).unwrap().runtime_lag(handle.run_id()).unwrap(), [sample]);
        drop(handle);
        let _ = std::fs::remove_dir_all(dir);
    }
}
