//! Running many calls through the core: N calls, at most C at once, each
//! in its own task, all sharing one executor (and so one fleet budget,
//! one set of credential pools and one client per transport).

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::core::executor::{Call, CallReport, Executor};
use crate::core::failover::Target;
use crate::core::upstream::CallInput;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlan {
    /// How many calls.
    pub requests: usize,
    /// How many at once.
    pub concurrency: usize,
    /// The primary target of every call.
    pub target: Target,
    /// The prompt.
    pub prompt: String,
}

/// Runs the plan; `on_finish` sees each call as it ends (for progress).
/// Returns every call's report in index order.
pub async fn run_calls(
    executor: &Executor,
    plan: &RunPlan,
    cancel: &CancellationToken,
    on_finish: impl Fn(&CallReport) + Send + Sync + 'static,
) -> Vec<CallReport> {
    let permits = Arc::new(Semaphore::new(plan.concurrency.max(1)));
    let on_finish = Arc::new(on_finish);
    // A rough context size: about four characters a token.
    let context_tokens = Some(plan.prompt.len().div_ceil(4) as u64);
    let mut tasks = Vec::with_capacity(plan.requests);
    for index in 0..plan.requests {
        let call = Call {
            stream: index as u64,
            target: plan.target.clone(),
            input: CallInput { prompt: plan.prompt.clone(), context_tokens },
        };
        let (executor, cancel, permits, on_finish) =
            (executor.clone(), cancel.clone(), Arc::clone(&permits), Arc::clone(&on_finish));
        // Streams are consumed in spawned tasks, never in the runtime's
        // main future (which costs extra CPU per chunk on a multi-thread
        // runtime).
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await.ok();
            let report = executor.run(&call, &cancel).await;
            on_finish(&report);
            report
        }));
    }
    let mut reports = Vec::with_capacity(tasks.len());
    for task in tasks {
        // A task only fails if it panicked; the others' reports still count.
        if let Ok(report) = task.await {
            reports.push(report);
        }
    }
    reports.sort_by_key(|r| r.stream);
    reports
}
