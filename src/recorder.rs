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
//! written to the run's row (`dropped_events`) with every batch and at the
//! end, so it is visible even after a crash, and
//! [`RecorderHandle::finish`] returns it. Events of a batch that fails to
//! commit are counted the same way (and logged).
//!
//! Crash safety: a crash loses at most the events not yet committed (one
//! flush interval's worth). [`RecorderHandle::finish`] commits everything and
//! completes the run; dropping the handle without finishing commits what is
//! queued and leaves the run `running`, so the next open of the database,
//! in another process, marks it `interrupted`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::core::event::{Event, EventSink};
use crate::report::RunReport;
use crate::store::{RunId, RunStart, Store, StoreError};

/// How the recorder buffers and commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderOptions {
    /// Events the channel holds before new ones are dropped.
    pub capacity: usize,
    /// The longest an event waits before its batch is committed.
    pub flush_interval: Duration,
    /// A batch this large is committed at once.
    pub batch_events: usize,
}

impl Default for RecorderOptions {
    fn default() -> Self {
        RecorderOptions { capacity: 65_536, flush_interval: Duration::from_millis(200), batch_events: 16_384 }
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
        let dropped = Arc::new(AtomicU64::new(0));
        let writer = Writer { store, run, rx, dropped: Arc::clone(&dropped), options };
        let thread = std::thread::Builder::new()
            .name("stallscope-recorder".to_owned())
            .spawn(move || writer.run())
            .map_err(|source| StoreError::Thread { path: store_path.to_path_buf(), source })?;
        let sink = RecorderSink { tx: tx.clone(), dropped: Arc::clone(&dropped) };
        let handle = RecorderHandle { run, tx, dropped, thread: Some(thread), path: store_path.to_path_buf() };
        Ok((sink, handle))
    }
}

/// What travels to the writer.
enum Message {
    Event(Event),
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
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Message::Event(_) => "Event",
            Message::Flush(_) => "Flush",
            Message::Finish(..) => "Finish",
            Message::Close => "Close",
        })
    }
}

impl RecorderSink {
    /// Events dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl EventSink for RecorderSink {
    fn emit(&self, event: Event) {
        match self.tx.try_send(Message::Event(event)) {
            Ok(()) => {}
            // Full: the writer is behind. Disconnected: the run is finished
            // or the writer died. Either way the stream goes on.
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Controls a recording run: flush it, finish it.
#[derive(Debug)]
pub struct RecorderHandle {
    run: RunId,
    tx: SyncSender<Message>,
    dropped: Arc<AtomicU64>,
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
        self.dropped.load(Ordering::Relaxed)
    }

    fn gone(&self) -> StoreError {
        StoreError::WriterGone { path: self.path.clone() }
    }

    /// Blocks until every event emitted before this call is committed.
    pub fn flush(&self) -> Result<(), StoreError> {
        let (reply, answer) = sync_channel(1);
        self.tx.send(Message::Flush(reply)).map_err(|_| self.gone())?;
        answer.recv().map_err(|_| self.gone())?
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
    dropped: Arc<AtomicU64>,
    options: RecorderOptions,
}

/// What the writer does after a message.
enum Next {
    Continue,
    Stop,
}

impl Writer {
    fn run(mut self) {
        let mut batch: Vec<Event> = Vec::with_capacity(self.options.batch_events.min(65_536));
        let mut oldest: Option<Instant> = None;
        loop {
            let message = match oldest {
                None => match self.rx.recv() {
                    Ok(message) => message,
                    Err(_) => break,
                },
                Some(since) => {
                    let left = self.options.flush_interval.saturating_sub(since.elapsed());
                    match self.rx.recv_timeout(left) {
                        Ok(message) => message,
                        Err(RecvTimeoutError::Timeout) => {
                            let _ = self.commit(&mut batch, &mut oldest);
                            continue;
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            };
            if let Next::Stop = self.handle(message, &mut batch, &mut oldest) {
                return;
            }
            // Take whatever else is already queued without waiting.
            while let Ok(message) = self.rx.try_recv() {
                if let Next::Stop = self.handle(message, &mut batch, &mut oldest) {
                    return;
                }
            }
        }
        // Every sender is gone: keep what was queued.
        let _ = self.commit(&mut batch, &mut oldest);
    }

    fn handle(&mut self, message: Message, batch: &mut Vec<Event>, oldest: &mut Option<Instant>) -> Next {
        match message {
            Message::Event(event) => {
                if batch.is_empty() {
                    *oldest = Some(Instant::now());
                }
                batch.push(event);
                if batch.len() >= self.options.batch_events
                    || oldest.is_some_and(|since| since.elapsed() >= self.options.flush_interval)
                {
                    let _ = self.commit(batch, oldest);
                }
                Next::Continue
            }
            Message::Flush(reply) => {
                let result = self.commit(batch, oldest);
                let _ = reply.send(result);
                Next::Continue
            }
            Message::Finish(report, reply) => {
                let _ = self.commit(batch, oldest);
                let dropped = self.dropped.load(Ordering::Relaxed);
                let result = self.store.finish_run(self.run, &report, dropped).map(|()| dropped);
                let _ = reply.send(result);
                Next::Stop
            }
            Message::Close => {
                let _ = self.commit(batch, oldest);
                Next::Stop
            }
        }
    }

    /// Commits the batch. A failed commit is logged and its events counted
    /// as dropped; the writer keeps going.
    fn commit(&mut self, batch: &mut Vec<Event>, oldest: &mut Option<Instant>) -> Result<(), StoreError> {
        *oldest = None;
        if batch.is_empty() {
            return Ok(());
        }
        let dropped = self.dropped.load(Ordering::Relaxed);
        let result = self.store.append(self.run, batch, Some(dropped));
        if let Err(e) = &result {
            tracing::warn!(run = self.run, lost = batch.len(), error = %e, "recorder: a batch of events was not written");
            self.dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        batch.clear();
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
}
