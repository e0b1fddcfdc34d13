//! What every connection of an observer shares: the routes and their
//! clients, the run in force, the calls that failed waiting for the
//! agent's retry, and the two ends of a call in it: its admission (a new
//! call, or the next attempt of one the agent retries) and its end (its
//! verdict, its would-fire mark, its count and trace once it is over).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::guard::Delivered;
use super::limits::Limits;
use super::retries::{Ended, Key, Recent};
use super::routes::Routes;
use super::segment::Segment;
use super::traces::Traces;
use super::{ObserveEvent, ObservedCall};
use crate::core::event::{Outcome, StreamId};
use crate::core::executor::CallReport;
use crate::diagnosis::Diagnosis;

/// What every connection shares.
pub(super) struct State {
    pub(super) routes: Routes,
    pub(super) clients: HashMap<String, reqwest::Client>,
    /// The run new calls go to.
    pub(super) current: Mutex<Arc<Segment>>,
    /// Calls that failed or were cut, waiting for the agent's retry.
    pub(super) recent: Recent,
    /// Calls that are over, to send as traces.
    pub(super) traces: Option<Arc<Traces>>,
    pub(super) on_event: Box<dyn Fn(ObserveEvent<'_>) + Send + Sync>,
    pub(super) cancel: CancellationToken,
    /// The core acts on the streamed calls (`--guard`).
    pub(super) guards: bool,
    /// What the proxy holds its agents to, and what it turned away.
    pub(super) limits: Arc<Limits>,
}

impl State {
    /// The run in force.
    pub(super) fn current(&self) -> Arc<Segment> {
        Arc::clone(&self.current.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A request's call: the call it retries (`retried`) when that call's
    /// run still takes calls, else a new call of the run in force. A retry
    /// that cannot go on is a new call, and the call it retried is over.
    /// `None` once observe is stopping: the last run is retired and no
    /// other will take its place.
    pub(super) fn admit(&self, retried: Option<Ended>) -> Option<(Arc<Segment>, StreamId, Option<Ended>)> {
        if let Some(ended) = retried {
            if let Some(stream) = ended.segment.admit(Some(ended.stream)) {
                return Some((Arc::clone(&ended.segment), stream, Some(ended)));
            }
            self.over(&ended.segment, &ended.report, &ended.verdict);
        }
        // A rotated-out run is retired only once another is in force: a run
        // that takes no calls when asked twice has no successor.
        for _ in 0..2 {
            let segment = self.current();
            if let Some(stream) = segment.admit(None) {
                return Some((segment, stream, None));
            }
        }
        None
    }

    /// Takes a call's report once it has ended, with what our clocks would
    /// have done on its latest attempt (replayed on observe's replay
    /// thread, and marked in its events); returns why it failed, for the
    /// 502 of a call the upstream never answered.
    pub(super) async fn finished(
        self: &Arc<Self>,
        segment: Arc<Segment>,
        report: CallReport,
        key: Key,
        retried: Option<Ended>,
        delivered: Option<Delivered>,
    ) -> Option<String> {
        let (stream, now) = (report.stream, Instant::now());
        let report = match retried {
            Some(ended) => {
                segment.forget(&ended.report, &ended.verdict);
                let gap = now.saturating_duration_since(ended.at).saturating_sub(report.elapsed);
                ended.continued(report, gap)
            }
            None => report,
        };
        let mut record = segment.going.take(stream);
        let would_fire = match &segment.clocks {
            Some(clocks) => clocks.first(stream, &record).await,
            None => None,
        };
        let would_fire = would_fire.map(|(would, mark)| {
            record.push(&mark);
            segment.out.emit(mark);
            if let Some(metrics) = &segment.metrics {
                metrics.would_fire(&report.target, would.timer);
            }
            would
        });
        let verdict = record.fold().verdict(Some(&segment.limits));
        let why = report.error.as_ref().map(|e| e.message.clone());
        let call = ObservedCall { report, verdict, would_fire, delivered };
        (self.on_event)(ObserveEvent::Call(&call));
        let ObservedCall { report, verdict, .. } = call;
        segment.keep(&report, &verdict);
        // A call that failed or was cut may be retried by the agent.
        if report.outcome != Outcome::Ok && !self.cancel.is_cancelled() && segment.admitting() {
            let kept = Ended { key, stream, at: now, record, report, verdict, segment: Arc::clone(&segment) };
            if let Some(oldest) = self.recent.keep(kept) {
                self.over(&oldest.segment, &oldest.report, &oldest.verdict);
            }
        } else {
            self.over(&segment, &report, &verdict);
        }
        segment.release();
        why
    }

    /// A call is over: it ended well, or no retry of it will come. Counted
    /// (by the route it was made for, its outcome and verdict) and sent as
    /// a trace.
    pub(super) fn over(&self, segment: &Segment, report: &CallReport, verdict: &Diagnosis) {
        if let Some(metrics) = &segment.metrics {
            metrics.on_finish(report, verdict);
        }
        if let Some(traces) = &self.traces {
            traces.over(segment, report.stream);
        }
    }

    /// The calls whose retry window has passed are over.
    pub(super) fn expire(&self, now: Instant) {
        for ended in self.recent.expired(now) {
            self.over(&ended.segment, &ended.report, &ended.verdict);
        }
    }
}
