//! Many calls through one executor: at most C at once, each in a task of
//! its own, started in the order given and none before its `not_before`.
//! A live run, a watch round, a probe and a what-if's replay all schedule
//! their calls here, so they meet the fleet budget, the key pools and the
//! concurrency limit the same way.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::executor::{Call, CallReport, Executor};

/// Runs `calls` with at most `concurrency` at once, started in the order
/// given (and none before its `not_before`); `on_finish` sees each call as
/// it ends. Returns the report of every call that started, in stream
/// order: a call still waiting for its turn when `cancel` fires is never
/// started, so it has neither events nor a report (a stopped run's queue
/// is not a list of 0 ms cancellations).
pub async fn run_call_list(
    executor: &Executor,
    calls: impl IntoIterator<Item = Call>,
    concurrency: usize,
    cancel: &CancellationToken,
    on_finish: impl Fn(&CallReport) + Send + Sync + 'static,
) -> Vec<CallReport> {
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let on_finish = Arc::new(on_finish);
    let mut tasks = Vec::new();
    for call in calls {
        let (executor, cancel, permits, on_finish) =
            (executor.clone(), cancel.clone(), Arc::clone(&permits), Arc::clone(&on_finish));
        // Streams are consumed in spawned tasks, never in the runtime's
        // main future (which costs extra CPU per chunk on a multi-thread
        // runtime).
        tasks.push(tokio::spawn(async move {
            let _permit = tokio::select! {
                biased;
                () = cancel.cancelled() => return None,
                permit = permits.acquire_owned() => permit.ok(),
            };
            if cancel.is_cancelled() {
                return None;
            }
            if let Some(at) = call.not_before {
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return None,
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            let report = executor.run(&call, &cancel).await;
            on_finish(&report);
            // Boxed: tokio moves a task's poll result through two frames on
            // every poll, Pending included, so its size is paid per chunk.
            Some(Box::new(report))
        }));
    }
    let mut reports = Vec::with_capacity(tasks.len());
    for task in tasks {
        // A task only fails if it panicked; the others' reports still count.
        if let Ok(Some(report)) = task.await {
            reports.push(*report);
        }
    }
    reports.sort_by_key(|r| r.stream);
    reports
}
