//! The retry executor: the one loop per call that owns attempts, per-category
//! budgets, backoff and server-requested waits, timeout escalation,
//! credential rotation, failover and partial recovery.
//!
//! There is no other retry loop anywhere (seeds 000 and 003 show how nested
//! loops multiply). Every bound is checked here, against one call-wide
//! budget: retries across categories (`STALLSCOPE_PROVIDER_STREAM_RETRIES`)
//! and each category's own; a retry needs both. Failover hops are not
//! retries but are bounded by the chain, so the worst case stays additive:
//! at most `1 + retries + hops` attempts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::category::{Category, TimerKind};
use super::classify::{Classification, Classifier};
use super::event::{AttemptEnd, Event, EventKind, EventSink, Outcome, SleepReason, StreamId};
use super::failover::Target;
use super::failure::Failure;
use super::fleet::{Fleet, RetryPermit};
use super::governor::{AttemptProgress, AttemptScope, LowBucket, run_attempt};
use super::lag_probe::LagMeter;
use super::policy::CorePolicy;
use super::retry_after::DelaySource;
use super::upstream::{AttemptRequest, CallInput, Upstreams};

/// One call to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Its id within the run.
    pub stream: StreamId,
    /// The primary target.
    pub target: Target,
    /// What to ask.
    pub input: CallInput,
    /// The call starts no sooner than this once its turn comes: a replay
    /// holds a call to where its recording started it when that was
    /// the live runtime's lateness rather than a decision, as every later
    /// moment of the call hangs on it.
    pub not_before: Option<Instant>,
}

/// A category's retries: used so far and allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Used {
    /// Retries used.
    pub used: u32,
    /// Retries allowed.
    pub budget: u32,
}

/// A failover hop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hop {
    /// The target left.
    pub from: Target,
    /// The target taken.
    pub to: Target,
    /// The category that caused it.
    pub reason: Category,
}

/// How a call went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallReport {
    /// The call.
    pub stream: StreamId,
    /// How it ended.
    pub outcome: Outcome,
    /// The last target tried.
    pub target: Target,
    /// Attempts made.
    pub attempts: u32,
    /// From the call's start to its end.
    pub elapsed: Duration,
    /// Time to first byte of the last attempt that got one.
    pub ttfb: Option<Duration>,
    /// Body bytes over all attempts.
    pub bytes: u64,
    /// Parsed events over all attempts.
    pub events: u64,
    /// Keep-alives over all attempts.
    pub keepalives: u64,
    /// The output text (partial when the outcome is partial).
    pub content: String,
    /// The stop reason (`length` after partial recovery).
    pub stop_reason: Option<String>,
    /// The failure that ended the call, or the break partial recovery
    /// absorbed.
    #[serde(skip)]
    pub error: Option<Classification>,
    /// Failover hops.
    pub hops: Vec<Hop>,
    /// Every sleep before a retry.
    pub backoff_sleeps: Vec<Duration>,
    /// For each sleep, the wait the server asked for, if it asked.
    pub retry_after: Vec<Option<Duration>>,
    /// A server wait that was refused for exceeding the cap.
    pub refused_wait: Option<Duration>,
    /// Retries used and allowed, per category.
    pub retry_counts: BTreeMap<Category, Used>,
    /// Rate-limit buckets that ran low, in the order seen.
    pub low_buckets: Vec<LowBucket>,
}

/// Where a run's clocks and random numbers start: what a replay must be
/// given to make the same decisions.
#[derive(Debug, Clone, Copy)]
pub struct Origin {
    /// The monotonic epoch of event timestamps.
    pub epoch: Instant,
    /// The wall clock at `epoch`.
    pub wall_epoch: SystemTime,
    /// The run's seed.
    pub seed: u64,
}

impl Origin {
    /// An origin at this moment.
    pub fn now(seed: u64) -> Origin {
        Origin { epoch: Instant::now(), wall_epoch: SystemTime::now(), seed }
    }

    /// The wall clock at `epoch` in nanoseconds since the Unix epoch
    /// (negative before it).
    pub fn epoch_unix_ns(&self) -> i64 {
        match self.wall_epoch.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
            Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |ns| -ns),
        }
    }
}

/// Everything a call needs, shared by the calls of a run.
#[derive(Clone)]
pub struct Executor {
    /// Settings.
    pub policy: Arc<CorePolicy>,
    /// Failure classifier.
    pub classifier: Arc<Classifier>,
    /// Endpoints.
    pub upstreams: Arc<Upstreams>,
    /// Credential pools and the fleet retry budget.
    pub fleet: Arc<Fleet>,
    /// Where events go.
    pub sink: Arc<dyn EventSink>,
    /// The run's epoch for event timestamps.
    pub epoch: Instant,
    /// The wall clock at `epoch`. Decisions that read the wall clock
    /// (HTTP-date Retry-After, rate-limit resets) read `wall_epoch` plus
    /// the time since `epoch`, so a replay in virtual time reads the same.
    pub wall_epoch: SystemTime,
    /// Every call's random numbers (jitter) come from this seed and the
    /// call's stream id, so a run repeated with its seed sleeps the same.
    pub seed: u64,
    /// The run's lag probe, read when a timer fires (`TimerFired::lag`);
    /// `None` where lag is not measured (virtual time).
    pub lag: Option<LagMeter>,
}

/// What the loop decided after a failure.
enum Next {
    /// Sleep, then retry the same target (holding the fleet budget's permit
    /// when the budget governs the failure).
    Retry { sleep: Duration, requested: Option<Duration>, permit: Option<RetryPermit> },
    /// Move to this target of the chain now.
    Failover {
        /// Its index in the chain.
        to: usize,
    },
    /// End the call with this classification.
    Fail(Box<Classification>),
}

impl Executor {
    /// The wall clock now, as the run's decisions see it.
    pub fn wall_now(&self) -> SystemTime {
        self.wall_epoch + Instant::now().saturating_duration_since(self.epoch)
    }

    /// Runs one call to its end. Never panics on any upstream behaviour;
    /// returns as soon as `cancel` fires.
    pub async fn run(&self, call: &Call, cancel: &CancellationToken) -> CallReport {
        let mut state = CallState::new(self, call);
        state.run(cancel).await
    }
}

impl CallReport {
    /// The report of call `stream` to `target` before anything happened:
    /// failed, with no attempt.
    pub fn empty(stream: StreamId, target: Target) -> CallReport {
        CallReport {
            stream,
            outcome: Outcome::Failed,
            target,
            attempts: 0,
            elapsed: Duration::ZERO,
            ttfb: None,
            bytes: 0,
            events: 0,
            keepalives: 0,
            content: String::new(),
            stop_reason: None,
            error: None,
            hops: Vec::new(),
            backoff_sleeps: Vec::new(),
            retry_after: Vec::new(),
            refused_wait: None,
            retry_counts: BTreeMap::new(),
            low_buckets: Vec::new(),
        }
    }
}

/// The mutable state of one call's loop.
struct CallState<'a> {
    exec: &'a Executor,
    call: &'a Call,
    chain: Vec<Target>,
    hop: usize,
    started: Instant,
    deadline: Option<(Instant, Duration)>,
    report: CallReport,
    total_retries: u32,
    timeout_retries: u32,
    previous_sleep: Option<Duration>,
    /// The provider and key of the previous attempt, to report rotations.
    last_credential: Option<(String, usize)>,
    rng: SmallRng,
}

impl<'a> CallState<'a> {
    fn new(exec: &'a Executor, call: &'a Call) -> Self {
        let policy = &exec.policy;
        let chain: Vec<Target> = policy
            .failover
            .fallback
            .chain(&call.target, &exec.upstreams.targets)
            .into_iter()
            .enumerate()
            // Fallbacks whose provider is not configured cannot be tried;
            // the primary stays so its absence is reported.
            .filter(|(i, t)| *i == 0 || exec.upstreams.providers.contains_key(&t.provider))
            .map(|(_, t)| t)
            .collect();
        let started = Instant::now();
        let retry_counts =
            Category::RETRYABLE.into_iter().map(|c| (c, Used { used: 0, budget: policy.retry.budget(c) })).collect();
        CallState {
            exec,
            call,
            report: CallReport { retry_counts, ..CallReport::empty(call.stream, call.target.clone()) },
            chain,
            hop: 0,
            started,
            deadline: policy.retry.deadline.map(|d| (started + d, d)),
            total_retries: 0,
            timeout_retries: 0,
            previous_sleep: None,
            last_credential: None,
            // Seeded per call so concurrent calls never retry in lockstep
            // (hermes-agent seeds from time ^ counter), and from the run's
            // seed so a run repeated with it makes the same draws.
            rng: SmallRng::seed_from_u64(call_seed(exec.seed, call.stream)),
        }
    }

    fn scope<'s>(&'s self, attempt: u32, cancel: &'s CancellationToken) -> AttemptScope<'s> {
        AttemptScope {
            sink: self.exec.sink.as_ref(),
            epoch: self.exec.epoch,
            stream: self.call.stream,
            attempt,
            deadline: self.deadline,
            cancel,
            wall_epoch: self.exec.wall_epoch,
            bodies: self.exec.policy.bodies,
            lag: self.exec.lag.as_ref(),
            rule_headers: self.exec.classifier.headers_read(),
        }
    }

    /// Emits an event about the last attempt made (or the call, before
    /// any attempt).
    fn emit(&self, kind: EventKind) {
        self.emit_for(self.report.attempts, kind);
    }

    fn emit_for(&self, attempt: u32, kind: EventKind) {
        self.exec.sink.emit(Event {
            at: Instant::now().saturating_duration_since(self.exec.epoch),
            stream: self.call.stream,
            attempt,
            kind,
        });
    }

    async fn run(&mut self, cancel: &CancellationToken) -> CallReport {
        let exec = self.exec;
        self.emit(EventKind::CallStarted {
            target: self.call.target.clone(),
            context_tokens: self.call.input.context_tokens,
        });
        if let Some((_, budget)) = self.deadline {
            self.emit(EventKind::TimerArmed { timer: TimerKind::Deadline, after: budget, floor: None });
        }
        let mut active = exec.fleet.activate(&self.call.target.provider);
        let mut permit: Option<RetryPermit> = None;
        loop {
            let target = self.chain[self.hop].clone();
            self.report.target = target.clone();
            let mut progress = AttemptProgress::default();
            let (result, credential) = match self.attempt(&target, cancel, &mut progress).await {
                Ok(credential) => (Ok(()), credential),
                Err((failure, credential)) => (Err(failure), credential),
            };
            drop(permit.take());
            self.absorb(&mut progress);
            let failure = match result {
                Ok(()) => {
                    self.report.content = progress.content;
                    self.report.stop_reason = progress.stop_reason;
                    return self.finish(Outcome::Ok);
                }
                Err(failure) => failure,
            };
            let classification = match failure {
                Classified::Raw(failure) => self.classify(&failure),
                Classified::Done(c) => *c,
            };
            self.cool_down(&target, credential, &classification);

            if progress.committed {
                return self.after_commit(progress, classification);
            }
            if classification.category == Category::Cancelled {
                self.report.error = Some(classification);
                return self.finish(Outcome::Cancelled);
            }
            match self.decide(&target, credential, &classification) {
                Next::Retry { sleep, requested, permit: granted } => {
                    if let Some((at, budget)) = self.deadline
                        && Instant::now() + sleep >= at
                    {
                        // Sleeping would cross the deadline: end now rather
                        // than wake up out of time (seed 000 §4, :801).
                        return self.fail(self.backoff_crosses_deadline(at, budget, sleep));
                    }
                    let reason = match (&classification.server_delay, requested) {
                        (Some(delay), Some(_)) => SleepReason::ServerRequested { header: delay.source.header() },
                        _ => SleepReason::Backoff,
                    };
                    let category = classification.category;
                    self.report.error = Some(classification);
                    if !self.sleep(category, sleep, requested, reason, cancel).await {
                        return self.finish(Outcome::Cancelled);
                    }
                    permit = granted;
                }
                Next::Failover { to: hop } => {
                    let to = self.chain[hop].clone();
                    self.emit(EventKind::FailedOver {
                        from: target.clone(),
                        to: to.clone(),
                        reason: classification.category,
                    });
                    self.report.hops.push(Hop {
                        from: target.clone(),
                        to: to.clone(),
                        reason: classification.category,
                    });
                    if to.provider != target.provider {
                        active = exec.fleet.activate(&to.provider);
                    }
                    self.hop = hop;
                    self.report.error = Some(classification);
                }
                Next::Fail(classification) => {
                    drop(active);
                    return self.fail(*classification);
                }
            }
        }
    }

    /// Runs one attempt; returns the credential index it used. When no
    /// request can be sent (no such provider, every key resting) no attempt
    /// is counted and the failure is the executor's own, between attempts.
    async fn attempt(
        &mut self,
        target: &Target,
        cancel: &CancellationToken,
        progress: &mut AttemptProgress,
    ) -> Result<Option<usize>, (Classified, Option<usize>)> {
        let exec = self.exec;
        let Some(upstream) = exec.upstreams.providers.get(&target.provider) else {
            let c = self.builtin(
                BETWEEN_ATTEMPTS,
                Category::Permanent,
                "builtin: unknown provider",
                format!("no provider named `{}` is configured", target.provider),
            );
            return Err((Classified::Done(Box::new(c)), None));
        };
        let credential = match exec.fleet.pool(&target.provider).map(|p| p.pick(Instant::now())) {
            None | Some(Ok(None)) => None,
            Some(Ok(Some(credential))) => Some(credential),
            Some(Err(resting)) => {
                // Every key rests. After rate limits that is the same
                // decision as a server asking to wait that long; after auth
                // refusals the keys are bad, and waiting will not fix them.
                let message = format!(
                    "every key of `{}` rests after {} failures; the first is usable again in {:.1} s",
                    target.provider,
                    resting.cause,
                    resting.ready_in.as_secs_f64()
                );
                let mut c = self.builtin(
                    BETWEEN_ATTEMPTS,
                    resting.cause,
                    "builtin: every key of the pool is cooling down",
                    message,
                );
                if resting.cause == Category::RateLimit {
                    c.server_delay = Some(super::retry_after::ServerDelay {
                        delay: resting.ready_in,
                        source: DelaySource::ResetHint { header: "credential cooldown".to_owned() },
                        raw: String::new(),
                    });
                }
                return Err((Classified::Done(Box::new(c)), None));
            }
        };
        self.report.attempts += 1;
        let attempt = self.report.attempts;
        let index = credential.as_ref().map(|c| c.index);
        if let Some(index) = index {
            if let Some((provider, from)) = &self.last_credential
                && *provider == target.provider
                && *from != index
            {
                self.emit(EventKind::CredentialRotated { provider: provider.clone(), from: *from, to: index });
            }
            self.last_credential = Some((target.provider.clone(), index));
        }
        let scope = self.scope(attempt, cancel);
        scope.emit(EventKind::AttemptStarted { target: target.clone(), credential: index });
        let policy = &exec.policy;
        let timers = policy.timers.for_attempt(
            self.call.input.context_tokens,
            &policy.retry.escalation,
            self.timeout_retries,
            policy.retry.budget(Category::Timeout),
        );
        let request = AttemptRequest {
            stream: self.call.stream,
            attempt,
            target,
            credential: credential.as_ref(),
            input: &self.call.input,
        };
        let result = run_attempt(upstream.as_ref(), request, &timers, &scope, progress).await;
        scope.emit(EventKind::AttemptEnded {
            end: result.as_ref().map_or_else(AttemptEnd::of, |()| AttemptEnd::Done),
            stop_reason: progress.stop_reason.clone(),
        });
        result.map(|()| index).map_err(|failure| (Classified::Raw(failure), index))
    }

    fn absorb(&mut self, progress: &mut AttemptProgress) {
        self.report.low_buckets.append(&mut progress.low_buckets);
        if let Some(body) = progress.body.take() {
            self.emit(EventKind::BodyRecorded { body });
        }
        self.report.bytes += progress.bytes;
        self.report.events += progress.events;
        self.report.keepalives += progress.keepalives;
        if progress.ttfb.is_some() {
            self.report.ttfb = progress.ttfb;
        }
    }

    fn classify(&self, failure: &Failure) -> Classification {
        let c = self.exec.classifier.classify(failure, self.exec.wall_now());
        self.emit(c.event());
        c
    }

    /// A classification the executor makes itself (not from a failure),
    /// reported as of `attempt`.
    fn builtin(&self, attempt: u32, category: Category, rule: &str, message: String) -> Classification {
        let c = Classification {
            category,
            timer: None,
            status: None,
            retryable: category.is_retryable(),
            rule: rule.to_owned(),
            message,
            transport: None,
            server_delay: None,
            rate_limits: None,
        };
        self.emit_for(attempt, c.event());
        c
    }

    /// Rests a key refused for auth or rate limiting (hermes-agent: 401 → 5
    /// min, 429 → 1 h or the server's reset hint).
    fn cool_down(&self, target: &Target, credential: Option<usize>, c: &Classification) {
        let (Some(index), Some(pool)) = (credential, self.exec.fleet.pool(&target.provider)) else { return };
        let settings = &self.exec.policy.credentials;
        let cooldown = match c.category {
            Category::Auth => settings.auth_cooldown,
            Category::RateLimit => c
                .rate_limits
                .as_ref()
                .and_then(|l| l.exhausted_reset())
                .or_else(|| c.requested_wait())
                .unwrap_or(settings.rate_limit_cooldown),
            _ => return,
        };
        if pool.cool_down(index, cooldown, c.category, Instant::now()) {
            self.emit(EventKind::CredentialCooledDown {
                provider: target.provider.clone(),
                credential: index,
                cooldown,
            });
        }
    }

    /// Decides what follows a failure before any content streamed.
    fn decide(&mut self, target: &Target, credential: Option<usize>, c: &Classification) -> Next {
        let policy = &self.exec.policy;
        if c.timer == Some(TimerKind::Deadline) {
            return Next::Fail(Box::new(c.clone()));
        }
        let refusal = match self.retry_here(target, credential, c) {
            Ok(next) => return next,
            Err(refusal) => refusal,
        };
        if !policy.failover.on.contains(&c.category) {
            return Next::Fail(Box::new(c.clone()));
        }
        // The fleet budget refuses retries to a provider that is failing for
        // many calls at once: hopping at once, without a sleep, to another
        // of its models would multiply the load the budget exists to bound.
        let leaves_provider = |t: &Target| refusal != Refusal::FleetBudget || t.provider != target.provider;
        match (self.hop + 1..self.chain.len()).find(|&i| leaves_provider(&self.chain[i])) {
            Some(to) => Next::Failover { to },
            None => Next::Fail(Box::new(c.clone())),
        }
    }

    /// A retry on the same target, if every bound allows one. Every retry
    /// is counted under its category and bounded by that category's budget:
    /// a retryable category's own; for a rotation after an auth refusal,
    /// one per other key of the pool; for a retry the server forced with
    /// `x-should-retry: true`, `STALLSCOPE_RETRY_BUDGET_SERVER_FORCED`.
    fn retry_here(&mut self, target: &Target, credential: Option<usize>, c: &Classification) -> Result<Next, Refusal> {
        let exec = self.exec;
        let retry = &exec.policy.retry;
        if self.total_retries >= retry.max_retries {
            return Err(Refusal::Bound);
        }
        let other_keys = exec.fleet.pool(&target.provider).map_or(0, |p| p.len().saturating_sub(1));
        let rotation = c.category == Category::Auth && credential.is_some() && other_keys > 0;
        if !c.retryable && !rotation {
            return Err(Refusal::Bound);
        }
        let budget = if c.category.is_retryable() {
            retry.budget(c.category)
        } else if rotation {
            u32::try_from(other_keys).unwrap_or(u32::MAX)
        } else {
            retry.server_forced_budget
        };
        let used = self.report.retry_counts.entry(c.category).or_insert(Used { used: 0, budget });
        if used.used >= used.budget {
            return Err(Refusal::Bound);
        }
        let requested = c.requested_wait();
        if let Some(wanted) = requested
            && wanted > retry.retry_after_max
        {
            self.emit(EventKind::ServerWaitRefused { requested: wanted, cap: retry.retry_after_max });
            self.report.refused_wait = Some(wanted);
            return Err(Refusal::Bound);
        }
        let permit = match exec.fleet.try_retry(&target.provider, c.category, c.timer) {
            Ok(permit) => permit,
            Err(refusal) => {
                self.emit(EventKind::RetryBudgetRefused {
                    provider: target.provider.clone(),
                    in_flight: refusal.in_flight,
                    limit: refusal.limit,
                });
                return Err(Refusal::FleetBudget);
            }
        };
        let sleep = if rotation {
            // Another key is a fresh chance, not a wait for the same one.
            Duration::ZERO
        } else {
            match requested {
                Some(wanted) => retry.backoff.server_delay(wanted, retry.server_jitter, &mut self.rng),
                None => retry.backoff.delay(self.total_retries, self.previous_sleep, &mut self.rng),
            }
        };
        Ok(Next::Retry { sleep, requested: if rotation { None } else { requested }, permit })
    }

    /// Sleeps before a retry, counting it. Returns false when cancelled.
    async fn sleep(
        &mut self,
        category: Category,
        sleep: Duration,
        requested: Option<Duration>,
        reason: SleepReason,
        cancel: &CancellationToken,
    ) -> bool {
        self.total_retries += 1;
        if category == Category::Timeout {
            self.timeout_retries += 1;
        }
        if let Some(used) = self.report.retry_counts.get_mut(&category) {
            used.used += 1;
        }
        let retry = self.total_retries;
        let nominal = requested.unwrap_or_else(|| self.exec.policy.retry.backoff.nominal(retry - 1));
        self.emit(EventKind::BackoffScheduled { retry, category, nominal, sleep, reason });
        self.report.backoff_sleeps.push(sleep);
        self.report.retry_after.push(requested);
        self.previous_sleep = Some(sleep);
        tokio::select! {
            biased;
            () = cancel.cancelled() => {
                let c = self.builtin(
                    self.report.attempts,
                    Category::Cancelled,
                    "builtin: cancelled",
                    "cancelled during backoff".to_owned(),
                );
                self.report.error = Some(c);
                false
            }
            () = tokio::time::sleep(sleep) => true,
        }
    }

    fn backoff_crosses_deadline(&self, due: Instant, budget: Duration, sleep: Duration) -> Classification {
        let lag = self.exec.lag.as_ref().map(|meter| meter.timer_fired(budget, due, Instant::now()));
        self.emit(EventKind::TimerFired { timer: TimerKind::Deadline, after: budget, lag });
        let mut c = self.builtin(
            self.report.attempts,
            Category::Timeout,
            "builtin: backoff would cross the deadline",
            format!(
                "a {:.3} s backoff would cross the {:.3} s call deadline",
                sleep.as_secs_f64(),
                budget.as_secs_f64()
            ),
        );
        c.timer = Some(TimerKind::Deadline);
        c.retryable = false;
        c
    }

    /// A failure after content streamed: partial recovery or failure.
    fn after_commit(&mut self, progress: AttemptProgress, c: Classification) -> CallReport {
        self.report.content = progress.content;
        self.report.stop_reason = progress.stop_reason;
        if c.category == Category::Cancelled {
            self.report.error = Some(c);
            return self.finish(Outcome::Cancelled);
        }
        // Only text is worth keeping: half a tool call's arguments is not.
        if self.exec.policy.retry.partial_recovery && c.category.is_transient() && !self.report.content.is_empty() {
            self.emit(EventKind::PartialRecovered { chars: self.report.content.chars().count(), category: c.category });
            self.report.stop_reason = Some("length".to_owned());
            self.report.error = Some(c);
            return self.finish(Outcome::Partial);
        }
        self.fail(c)
    }

    fn fail(&mut self, c: Classification) -> CallReport {
        let cancelled = c.category == Category::Cancelled;
        self.report.error = Some(c);
        self.finish(if cancelled { Outcome::Cancelled } else { Outcome::Failed })
    }

    fn finish(&mut self, outcome: Outcome) -> CallReport {
        self.report.outcome = outcome;
        if outcome == Outcome::Ok {
            self.report.error = None;
        }
        self.report.elapsed = Instant::now().saturating_duration_since(self.started);
        self.emit(EventKind::Finished {
            outcome,
            attempts: self.report.attempts,
            stop_reason: self.report.stop_reason.clone(),
        });
        self.report.clone()
    }
}

/// The seed of one call's random numbers: the run's seed mixed with the
/// stream id (SplitMix64's finaliser), so neighbouring ids draw apart.
fn call_seed(run_seed: u64, stream: StreamId) -> u64 {
    let mut z = run_seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Why a retry on the same target was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// A bound of the call: its retries, the category's budget, the cap on
    /// server waits, or the failure is not retryable.
    Bound,
    /// The fleet-wide retry budget of the target's provider.
    FleetBudget,
}

/// The attempt number of events about no attempt (`Event::attempt`).
const BETWEEN_ATTEMPTS: u32 = 0;

/// A failure as the attempt returned it, or already classified by the
/// executor (unknown provider, all keys resting).
enum Classified {
    Raw(Failure),
    Done(Box<Classification>),
}
