//! Retry backoff: how long to sleep before each retry of a failed streaming
//! call, and how much jitter to add to a wait the server asked for.
//!
//! Everything here is pure. Callers pass the retry number, the previous sleep
//! and a random number generator, so one seed always yields one schedule, and
//! worst-case budget analysis can use [`BackoffPolicy::min_delay`] and
//! [`BackoffPolicy::max_delay`] without sampling.
//!
//! No function in this module panics, whatever the field values:
//! [`BackoffPolicy::validate`] reports a bad configuration, and the computing
//! methods clamp whatever was not validated (see the table on
//! [`BackoffPolicy`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use thiserror::Error;

/// Why a backoff configuration or a jitter name was rejected.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BackoffError {
    /// [`BackoffPolicy::multiplier`] is NaN, infinite or below 1.
    #[error("backoff multiplier must be finite and at least 1, got {0}")]
    InvalidMultiplier(f64),
    /// [`BackoffPolicy::jitter_ratio`] is NaN or outside `[0, 1]`.
    #[error("jitter ratio must be within [0, 1], got {0}")]
    InvalidJitterRatio(f64),
    /// [`BackoffPolicy::cap`] is shorter than [`BackoffPolicy::base`].
    #[error("backoff cap ({cap:?}) is below its base ({base:?})")]
    CapBelowBase {
        /// The configured base.
        base: Duration,
        /// The configured cap.
        cap: Duration,
    },
    /// A string that names no [`Jitter`] kind.
    #[error(
        "unknown jitter {given:?}; expected one of: {}",
        Jitter::ALL.map(Jitter::name).join(", ")
    )]
    UnknownJitter {
        /// The string as given.
        given: String,
    },
    /// A string that names no [`ServerJitter`] kind.
    #[error(
        "unknown server jitter {given:?}; expected one of: {}",
        ServerJitter::ALL.map(ServerJitter::name).join(", ")
    )]
    UnknownServerJitter {
        /// The string as given.
        given: String,
    },
}

/// How the sleep before a retry is randomised around its nominal value.
///
/// `n` is [`BackoffPolicy::nominal`] for the retry, `r` the policy's
/// [`jitter_ratio`](BackoffPolicy::jitter_ratio), `base` and `cap` the
/// policy's fields, `u(a, b)` a uniform draw from `[a, b]`.
///
/// | name            | sleep                                   | lowest              | highest                         |
/// |-----------------|-----------------------------------------|---------------------|---------------------------------|
/// | `none`          | `n`                                     | `n`                 | `n`                             |
/// | `full`          | `u(0, n)`                               | `0`                 | `n`                             |
/// | `equal`         | `n/2 + u(0, n/2)`                       | `n/2`               | `n`                             |
/// | `decorrelated`  | `min(cap, u(base, max(base, 3·prev)))`  | `base`              | `min(cap, base·3^(retry+1))`    |
/// | `symmetric`     | `n·(1 + u(-r, r))`                      | `n·(1-r)`           | `n·(1+r)`, **may exceed `cap`** |
/// | `positive-only` | `n·(1 + u(0, r))`                       | `n`                 | `n·(1+r)`, **may exceed `cap`** |
///
/// `prev` is the previous sleep of the same call (`base` before the first
/// retry). Decorrelated jitter ignores `n` and the multiplier: it grows by
/// feeding each sleep into the next, as in AWS's "decorrelated jitter".
///
/// Parsed from and printed as the names above (parsing ignores ASCII case
/// and surrounding whitespace). The default is `symmetric`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Jitter {
    /// No randomness: always the nominal sleep.
    None,
    /// Anywhere between zero and the nominal sleep.
    Full,
    /// At least half the nominal sleep, at most all of it.
    Equal,
    /// AWS decorrelated jitter: between `base` and three times the previous
    /// sleep, capped.
    Decorrelated,
    /// The nominal sleep stretched or shrunk by up to `jitter_ratio`.
    #[default]
    Symmetric,
    /// The nominal sleep stretched by up to `jitter_ratio`, never shrunk.
    PositiveOnly,
}

impl Jitter {
    /// Every jitter kind, in declaration order.
    pub const ALL: [Jitter; 6] =
        [Jitter::None, Jitter::Full, Jitter::Equal, Jitter::Decorrelated, Jitter::Symmetric, Jitter::PositiveOnly];
}

named_enum!(Jitter, BackoffError::UnknownJitter, {
    None => "none",
    Full => "full",
    Equal => "equal",
    Decorrelated => "decorrelated",
    Symmetric => "symmetric",
    PositiveOnly => "positive-only",
});

/// How a server-requested wait (`Retry-After`) is jittered by
/// [`BackoffPolicy::server_delay`].
///
/// `w` is the requested wait, `r` the policy's ratio and `f` the floor, the
/// policy's [`base`](BackoffPolicy::base) (its nominal sleep before the first
/// retry):
///
/// | name            | sleep when `w >= f`  | sleep when `w < f` (`0`, a past date) |
/// |-----------------|----------------------|---------------------------------------|
/// | `none`          | exactly `w`          | `f + u(0, r·f)`                       |
/// | `positive-only` | `w + u(0, r·w)`      | `f + u(0, r·f)`                       |
///
/// There is deliberately no kind that can shorten the wait: retrying before
/// the server said it is ready only earns another refusal. Adding jitter
/// keeps many clients told the same `Retry-After` from returning in lockstep.
///
/// A wait below the floor is jittered even under `none`. A server that says
/// "retry now" (`retry-after: 0`, `retry-after-ms: 0`, a date already past)
/// tells every client the same thing at the same moment, so honouring it
/// literally sends every stream back in lockstep, straight into the overload
/// that made the server refuse. `none` promises to sleep exactly what the
/// server asked for; below the floor the server asked for nothing, and the
/// sleep is our own backoff, which is always spread. The spread is the
/// ratio's share of the floor, so only a zero base or a zero ratio, which
/// also take the spread out of computed backoff, leaves it in lockstep.
///
/// Parsed from and printed as the names above (parsing ignores ASCII case
/// and surrounding whitespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerJitter {
    /// Sleep exactly as long as the server asked.
    None,
    /// Sleep as long as the server asked plus up to `jitter_ratio` of it.
    PositiveOnly,
}

impl ServerJitter {
    /// Every server jitter kind, in declaration order.
    pub const ALL: [ServerJitter; 2] = [ServerJitter::None, ServerJitter::PositiveOnly];
}

named_enum!(ServerJitter, BackoffError::UnknownServerJitter, {
    None => "none",
    PositiveOnly => "positive-only",
});

/// Exponential backoff with jitter for retries of one call.
///
/// The nominal sleep before retry `k` (0 for the first retry) is
/// `min(base · multiplier^k, cap)`; [`jitter`](Self::jitter) then randomises
/// it as described on [`Jitter`].
///
/// | field          | default     | valid                 | if invalid anyway, methods treat it as |
/// |----------------|-------------|-----------------------|----------------------------------------|
/// | `base`         | 1 s         | `<= cap`              | capped: every bound becomes `cap`      |
/// | `cap`          | 30 s        | `>= base`             | (as above)                             |
/// | `multiplier`   | 2.0         | finite, `>= 1`        | NaN or `< 1`: 1; `+inf`: `cap` from retry 1 on |
/// | `jitter`       | `symmetric` | any                   | —                                      |
/// | `jitter_ratio` | 0.25        | `[0, 1]`              | NaN: 0; otherwise clamped to `[0, 1]`  |
///
/// A zero `base` is valid and means "retry at once". `cap` bounds the
/// nominal sleep, not the jittered one: `symmetric` and `positive-only`
/// jitter can sleep up to `cap · (1 + jitter_ratio)`.
///
/// Durations are scaled in `f64` nanoseconds and saturate at
/// [`Duration::MAX`], so no input overflows or panics; durations above about
/// 104 days lose nanosecond precision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffPolicy {
    /// Nominal sleep before the first retry; also the floor of decorrelated
    /// jitter.
    pub base: Duration,
    /// Ceiling of the nominal sleep and of decorrelated jitter.
    pub cap: Duration,
    /// Growth of the nominal sleep from one retry to the next.
    pub multiplier: f64,
    /// How the nominal sleep is randomised.
    pub jitter: Jitter,
    /// Relative spread of `symmetric` and `positive-only` jitter and of
    /// [`ServerJitter::PositiveOnly`].
    pub jitter_ratio: f64,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl BackoffPolicy {
    /// The defaults listed in the type docs: 1 s base, 30 s cap, ×2 growth,
    /// symmetric jitter of ±25 %.
    pub const DEFAULT: Self = Self {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(30),
        multiplier: 2.0,
        jitter: Jitter::Symmetric,
        jitter_ratio: 0.25,
    };

    /// Checks the fields against the "valid" column of the type docs.
    ///
    /// # Errors
    ///
    /// The first violation found, as a [`BackoffError`].
    pub fn validate(&self) -> Result<(), BackoffError> {
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return Err(BackoffError::InvalidMultiplier(self.multiplier));
        }
        if !(0.0..=1.0).contains(&self.jitter_ratio) {
            return Err(BackoffError::InvalidJitterRatio(self.jitter_ratio));
        }
        if self.cap < self.base {
            return Err(BackoffError::CapBelowBase { base: self.base, cap: self.cap });
        }
        Ok(())
    }

    /// The un-jittered sleep before retry `retry` (0 for the first retry):
    /// `min(base · multiplier^retry, cap)`.
    ///
    /// Never below `base` (unless `cap` is), never above `cap`, and
    /// non-decreasing in `retry`; saturates at `cap` for any `retry`, up to
    /// `u32::MAX`.
    pub fn nominal(&self, retry: u32) -> Duration {
        let grown = scale(self.base, self.growth().powf(f64::from(retry)));
        // Rounding in f64 can land a hair under `base` for large bases; the
        // true value never does.
        grown.max(self.base).min(self.cap)
    }

    /// The jittered sleep before retry `retry`, drawn from `rng` as described
    /// on [`Jitter`].
    ///
    /// `previous` is the sleep this call took before the previous retry (as
    /// returned by this method); only decorrelated jitter reads it, and
    /// `None` stands for `base`. A `previous` longer than this policy could
    /// have produced for retry `retry - 1` is first clamped to that bound,
    /// so the result always lies within
    /// [`min_delay`](Self::min_delay)`..=`[`max_delay`](Self::max_delay).
    pub fn delay(&self, retry: u32, previous: Option<Duration>, rng: &mut impl Rng) -> Duration {
        match self.jitter {
            Jitter::None => self.nominal(retry),
            Jitter::Full => uniform(Duration::ZERO, self.nominal(retry), rng),
            Jitter::Equal => {
                let nominal = self.nominal(retry);
                uniform(nominal - nominal / 2, nominal, rng)
            }
            Jitter::Decorrelated => {
                let previous = previous.unwrap_or(self.base).min(self.decorrelated_bound(u64::from(retry)));
                let high = previous.saturating_mul(3).max(self.base);
                uniform(self.base, high, rng).min(self.cap)
            }
            Jitter::Symmetric => {
                let ratio = self.ratio();
                scale(self.nominal(retry), uniform_f64(1.0 - ratio, 1.0 + ratio, rng))
            }
            Jitter::PositiveOnly => self.stretched(self.nominal(retry), rng),
        }
    }

    /// The longest sleep [`delay`](Self::delay) can return for retry
    /// `retry`, whatever the random draw and whatever `previous`: the
    /// "highest" column of the [`Jitter`] table.
    pub fn max_delay(&self, retry: u32) -> Duration {
        match self.jitter {
            Jitter::None | Jitter::Full | Jitter::Equal => self.nominal(retry),
            Jitter::Decorrelated => self.decorrelated_bound(u64::from(retry) + 1),
            Jitter::Symmetric => scale(self.nominal(retry), 1.0 + self.ratio()),
            Jitter::PositiveOnly => self.stretched_max(self.nominal(retry)),
        }
    }

    /// The shortest sleep [`delay`](Self::delay) can return for retry
    /// `retry`, whatever the random draw and whatever `previous`: the
    /// "lowest" column of the [`Jitter`] table.
    pub fn min_delay(&self, retry: u32) -> Duration {
        match self.jitter {
            Jitter::None | Jitter::PositiveOnly => self.nominal(retry),
            Jitter::Full => Duration::ZERO,
            Jitter::Equal => {
                let nominal = self.nominal(retry);
                nominal - nominal / 2
            }
            Jitter::Decorrelated => self.base.min(self.cap),
            Jitter::Symmetric => scale(self.nominal(retry), 1.0 - self.ratio()),
        }
    }

    /// The sleep for a wait the server requested (`Retry-After`), jittered
    /// as described on [`ServerJitter`] with this policy's `jitter_ratio`.
    ///
    /// Never shorter than `requested`, nor than the floor (`base`, or `cap`
    /// if that is smaller). A wait of at least the floor is honoured as
    /// asked, at most `requested · (1 + jitter_ratio)`, neither `base` nor
    /// `cap` capping it, because the server knows better than our schedule.
    /// A shorter wait is a draw from `floor ..= floor · (1 + jitter_ratio)`.
    pub fn server_delay(&self, requested: Duration, jitter: ServerJitter, rng: &mut impl Rng) -> Duration {
        let floor = self.server_floor();
        match jitter {
            ServerJitter::None if requested >= floor => requested,
            ServerJitter::None | ServerJitter::PositiveOnly => self.stretched(requested.max(floor), rng),
        }
    }

    /// Upper bound of [`Self::server_delay`] for `requested` and for every
    /// shorter wait, whatever the random draw. Worst-case budget analysis
    /// knows only the longest wait honoured, and under `none` a wait just
    /// below the floor may sleep longer than one just above it.
    pub fn server_delay_max(&self, requested: Duration, jitter: ServerJitter) -> Duration {
        let floor = self.server_floor();
        match jitter {
            ServerJitter::None => requested.max(self.stretched_max(floor)),
            ServerJitter::PositiveOnly => self.stretched_max(requested.max(floor)),
        }
    }

    /// The shortest sleep for a server-requested wait: the nominal sleep
    /// before the first retry, so "retry now" waits like a first retry.
    /// Taken exactly rather than through [`Self::nominal`], whose `f64`
    /// scaling can round a huge base up by a few nanoseconds.
    fn server_floor(&self) -> Duration {
        self.base.min(self.cap)
    }

    /// `duration` stretched by a uniform draw of up to `jitter_ratio` of it.
    fn stretched(&self, duration: Duration, rng: &mut impl Rng) -> Duration {
        duration.saturating_add(scale(duration, uniform_f64(0.0, self.ratio(), rng)))
    }

    /// The longest [`Self::stretched`] can return for `duration`.
    fn stretched_max(&self, duration: Duration) -> Duration {
        duration.saturating_add(scale(duration, self.ratio()))
    }

    /// The multiplier as used: NaN and shrinking multipliers would make the
    /// schedule non-monotonic or meaningless, so they count as 1.
    fn growth(&self) -> f64 {
        if self.multiplier >= 1.0 { self.multiplier } else { 1.0 }
    }

    /// The jitter ratio as used, so a bad ratio can neither produce a
    /// negative factor nor a NaN.
    fn ratio(&self) -> f64 {
        if self.jitter_ratio > 0.0 { self.jitter_ratio.min(1.0) } else { 0.0 }
    }

    /// `min(cap, base · 3^exponent)`, exact in integer nanoseconds.
    fn decorrelated_bound(&self, exponent: u64) -> Duration {
        let mut bound = self.base;
        for _ in 0..exponent {
            // Stopping at the cap (or at a zero base, which never grows)
            // bounds the loop by ~60 rounds even for `u32::MAX` retries.
            if bound >= self.cap || bound.is_zero() {
                break;
            }
            bound = bound.saturating_mul(3);
        }
        bound.min(self.cap)
    }
}

/// `duration · factor`, rounded down to the nanosecond and saturating at
/// [`Duration::MAX`]; a NaN or negative product gives zero.
///
/// Non-decreasing in `factor`, which is what keeps the jittered sleeps
/// inside the bounds computed with the extreme factors.
pub(crate) fn scale(duration: Duration, factor: f64) -> Duration {
    // `as` from f64 saturates and maps NaN to 0, so this cannot panic.
    duration_from_nanos((duration.as_nanos() as f64 * factor) as u128)
}

/// A duration of `nanos` nanoseconds, saturating at [`Duration::MAX`].
pub(crate) fn duration_from_nanos(nanos: u128) -> Duration {
    const PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / PER_SEC) {
        // The remainder is below one billion, so it fits a u32.
        Ok(secs) => Duration::new(secs, (nanos % PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

/// A uniform draw from `[low, high]`, in whole nanoseconds.
fn uniform(low: Duration, high: Duration, rng: &mut impl Rng) -> Duration {
    let low = low.as_nanos();
    // rand panics on an empty range; an inverted one degrades to `low`.
    let high = high.as_nanos().max(low);
    duration_from_nanos(rng.random_range(low..=high))
}

/// A uniform draw from `[low, high]`, clamped so rounding can never step
/// outside the bounds that `min_delay`/`max_delay` compute from the ends.
fn uniform_f64(low: f64, high: f64, rng: &mut impl Rng) -> f64 {
    (low + (high - low) * rng.random::<f64>()).max(low).min(high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    /// Durations from zero to [`Duration::MAX`], weighted towards the
    /// realistic millisecond-to-minute range.
    fn any_duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            3 => (0u64..600_000).prop_map(Duration::from_millis),
            1 => (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
            1 => Just(Duration::ZERO),
            1 => Just(Duration::MAX),
        ]
    }

    fn any_retry() -> impl Strategy<Value = u32> {
        prop_oneof![
            3 => 0u32..64,
            1 => any::<u32>(),
            1 => Just(u32::MAX),
        ]
    }

    fn any_jitter() -> impl Strategy<Value = Jitter> {
        prop::sample::select(Jitter::ALL.to_vec())
    }

    fn valid_policy() -> impl Strategy<Value = BackoffPolicy> {
        (
            any_duration(),
            any_duration(),
            prop_oneof![Just(1.0), Just(2.0), 1.0f64..16.0],
            any_jitter(),
            prop_oneof![Just(0.0), Just(1.0), 0.0f64..=1.0],
        )
            .prop_map(|(a, b, multiplier, jitter, jitter_ratio)| BackoffPolicy {
                base: a.min(b),
                cap: a.max(b),
                multiplier,
                jitter,
                jitter_ratio,
            })
    }

    /// Any field values at all, including NaN, infinities and `cap < base`.
    fn any_policy() -> impl Strategy<Value = BackoffPolicy> {
        (any_duration(), any_duration(), prop::num::f64::ANY, any_jitter(), prop::num::f64::ANY).prop_map(
            |(base, cap, multiplier, jitter, jitter_ratio)| BackoffPolicy {
                base,
                cap,
                multiplier,
                jitter,
                jitter_ratio,
            },
        )
    }

    fn assert_within(
        policy: &BackoffPolicy,
        retry: u32,
        previous: Option<Duration>,
        seed: u64,
    ) -> Result<Duration, TestCaseError> {
        let mut rng = StdRng::seed_from_u64(seed);
        let delay = policy.delay(retry, previous, &mut rng);
        let (low, high) = (policy.min_delay(retry), policy.max_delay(retry));
        prop_assert!(low <= high, "min {low:?} > max {high:?}");
        prop_assert!(low <= delay, "delay {delay:?} < min {low:?}");
        prop_assert!(delay <= high, "delay {delay:?} > max {high:?}");
        Ok(delay)
    }

    proptest! {
        #[test]
        fn delay_stays_within_bounds(
            policy in valid_policy(),
            retry in any_retry(),
            previous in proptest::option::of(any_duration()),
            seed in any::<u64>(),
        ) {
            assert_within(&policy, retry, previous, seed)?;
        }

        #[test]
        fn invalid_policies_never_panic_and_keep_bounds(
            policy in any_policy(),
            retry in any_retry(),
            previous in proptest::option::of(any_duration()),
            requested in any_duration(),
            seed in any::<u64>(),
        ) {
            assert_within(&policy, retry, previous, seed)?;
            let mut rng = StdRng::seed_from_u64(seed);
            for jitter in ServerJitter::ALL {
                let sleep = policy.server_delay(requested, jitter, &mut rng);
                prop_assert!(requested <= sleep && sleep <= policy.server_delay_max(requested, jitter));
            }
        }

        #[test]
        fn decorrelated_chain_stays_within_bounds(
            policy in valid_policy(),
            seed in any::<u64>(),
        ) {
            let policy = BackoffPolicy { jitter: Jitter::Decorrelated, ..policy };
            let mut rng = StdRng::seed_from_u64(seed);
            let mut previous = None;
            for retry in 0..40 {
                let delay = policy.delay(retry, previous, &mut rng);
                prop_assert!(policy.min_delay(retry) <= delay);
                prop_assert!(delay <= policy.max_delay(retry));
                previous = Some(delay);
            }
        }

        #[test]
        fn nominal_is_monotonic_and_capped(policy in valid_policy(), retry in any_retry()) {
            let here = policy.nominal(retry);
            prop_assert!(policy.base <= here && here <= policy.cap);
            if let Some(next) = retry.checked_add(1) {
                prop_assert!(here <= policy.nominal(next));
            }
            prop_assert!(policy.nominal(0) <= here);
        }

        #[test]
        fn no_jitter_is_deterministic(
            policy in valid_policy(),
            retry in any_retry(),
            previous in proptest::option::of(any_duration()),
            seeds in (any::<u64>(), any::<u64>()),
        ) {
            let policy = BackoffPolicy { jitter: Jitter::None, ..policy };
            let first = policy.delay(retry, previous, &mut StdRng::seed_from_u64(seeds.0));
            let second = policy.delay(retry, previous, &mut StdRng::seed_from_u64(seeds.1));
            prop_assert_eq!(first, policy.nominal(retry));
            prop_assert_eq!(first, second);
        }

        #[test]
        fn server_delay_never_undercuts_the_server(
            policy in valid_policy(),
            requested in any_duration(),
            seed in any::<u64>(),
        ) {
            let mut rng = StdRng::seed_from_u64(seed);
            let floor = policy.base;
            let exact = policy.server_delay(requested, ServerJitter::None, &mut rng);
            if requested >= floor {
                prop_assert_eq!(exact, requested);
            } else {
                prop_assert!(floor <= exact && exact <= floor.saturating_add(scale(floor, policy.jitter_ratio)));
            }
            let at_least = requested.max(floor);
            let jittered = policy.server_delay(requested, ServerJitter::PositiveOnly, &mut rng);
            prop_assert!(at_least <= jittered);
            prop_assert!(jittered <= at_least.saturating_add(scale(at_least, policy.jitter_ratio)));
        }

        /// `retry-after: 0`, `retry-after-ms: 0` or a past date must not send
        /// every stream back at once: each sleep is a draw from the floor's
        /// range, and the draws differ.
        #[test]
        fn waits_below_the_floor_are_spread_over_the_floor(
            base_ms in 1u64..=30_000,
            jitter_ratio in 0.05f64..=1.0,
            below in 0.0f64..1.0,
            jitter in prop::sample::select(ServerJitter::ALL.to_vec()),
            seed in any::<u64>(),
        ) {
            let base = Duration::from_millis(base_ms);
            let policy = BackoffPolicy { base, jitter_ratio, ..BackoffPolicy::DEFAULT };
            let requested = scale(base, below);
            let mut rng = StdRng::seed_from_u64(seed);
            let draws: Vec<Duration> = (0..8).map(|_| policy.server_delay(requested, jitter, &mut rng)).collect();
            let highest = base.saturating_add(scale(base, jitter_ratio));
            for &sleep in &draws {
                prop_assert!(base <= sleep && sleep <= highest, "{sleep:?} outside {base:?}..={highest:?}");
            }
            prop_assert!(draws.iter().any(|&sleep| sleep != draws[0]), "eight identical draws {:?}", draws[0]);
        }

        #[test]
        fn server_delay_max_bounds_every_shorter_wait(
            policy in valid_policy(),
            longest in any_duration(),
            shorter in 0.0f64..=1.0,
            seed in any::<u64>(),
        ) {
            let requested = scale(longest, shorter);
            let mut rng = StdRng::seed_from_u64(seed);
            for jitter in ServerJitter::ALL {
                let sleep = policy.server_delay(requested, jitter, &mut rng);
                prop_assert!(sleep <= policy.server_delay_max(longest, jitter), "{jitter}: {sleep:?}");
            }
        }

        #[test]
        fn validate_rejects_exactly_the_invalid_fields(policy in any_policy()) {
            let valid = policy.multiplier.is_finite()
                && policy.multiplier >= 1.0
                && (0.0..=1.0).contains(&policy.jitter_ratio)
                && policy.base <= policy.cap;
            prop_assert_eq!(policy.validate().is_ok(), valid);
        }
    }

    #[test]
    fn defaults_match_the_documented_table() {
        let policy = BackoffPolicy::default();
        assert_eq!(policy, BackoffPolicy::DEFAULT);
        assert_eq!(policy.base, Duration::from_secs(1));
        assert_eq!(policy.cap, Duration::from_secs(30));
        assert_eq!(policy.multiplier, 2.0);
        assert_eq!(policy.jitter, Jitter::Symmetric);
        assert_eq!(policy.jitter_ratio, 0.25);
        assert_eq!(Jitter::default(), Jitter::Symmetric);
        assert!(policy.validate().is_ok());
    }

    #[test]
    fn nominal_doubles_up_to_the_cap() {
        let secs: Vec<u64> = (0..7).map(|retry| BackoffPolicy::DEFAULT.nominal(retry).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(BackoffPolicy::DEFAULT.nominal(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn bounds_follow_the_jitter_table() {
        let policy = |jitter| BackoffPolicy { jitter, ..BackoffPolicy::DEFAULT };
        let bounds = |jitter, retry| {
            let policy = policy(jitter);
            (policy.min_delay(retry), policy.max_delay(retry))
        };
        let ms = Duration::from_millis;
        assert_eq!(bounds(Jitter::None, 2), (ms(4000), ms(4000)));
        assert_eq!(bounds(Jitter::Full, 2), (ms(0), ms(4000)));
        assert_eq!(bounds(Jitter::Equal, 2), (ms(2000), ms(4000)));
        assert_eq!(bounds(Jitter::Symmetric, 2), (ms(3000), ms(5000)));
        assert_eq!(bounds(Jitter::PositiveOnly, 2), (ms(4000), ms(5000)));
        assert_eq!(bounds(Jitter::Symmetric, 9), (ms(22_500), ms(37_500)));
        assert_eq!(bounds(Jitter::Decorrelated, 0), (ms(1000), ms(3000)));
        assert_eq!(bounds(Jitter::Decorrelated, 2), (ms(1000), ms(27_000)));
        assert_eq!(bounds(Jitter::Decorrelated, 3), (ms(1000), ms(30_000)));
    }

    #[test]
    fn draws_spread_across_the_range() {
        let policy = BackoffPolicy { jitter: Jitter::Full, ..BackoffPolicy::DEFAULT };
        let mut rng = StdRng::seed_from_u64(7);
        let draws: Vec<f64> = (0..2000).map(|_| policy.delay(3, None, &mut rng).as_secs_f64()).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 4.0).abs() < 0.3, "mean of full jitter over [0, 8] was {mean}");
        assert!(draws.iter().any(|&d| d < 1.0) && draws.iter().any(|&d| d > 7.0));
    }

    #[test]
    fn decorrelated_feeds_on_the_previous_sleep() {
        let policy = BackoffPolicy { jitter: Jitter::Decorrelated, ..BackoffPolicy::DEFAULT };
        let mut rng = StdRng::seed_from_u64(11);
        let short = Some(Duration::from_secs(1));
        for _ in 0..100 {
            assert_eq!(policy.delay(5, Some(Duration::ZERO), &mut rng), policy.base);
            assert!(policy.delay(5, short, &mut rng) <= Duration::from_secs(3));
        }
    }

    #[test]
    fn an_immediate_retry_after_waits_a_spread_first_backoff() {
        let mut rng = StdRng::seed_from_u64(3);
        for jitter in ServerJitter::ALL {
            let draws: Vec<f64> = (0..2000)
                .map(|_| BackoffPolicy::DEFAULT.server_delay(Duration::ZERO, jitter, &mut rng).as_secs_f64())
                .collect();
            let (low, high) = draws.iter().fold((f64::MAX, 0.0f64), |(low, high), &d| (low.min(d), high.max(d)));
            assert!((1.0..1.02).contains(&low), "{jitter}: shortest sleep {low}");
            assert!(high > 1.23 && high <= 1.25, "{jitter}: longest sleep {high}");
        }
        let secs = Duration::from_secs;
        assert_eq!(
            BackoffPolicy::DEFAULT.server_delay_max(Duration::ZERO, ServerJitter::None),
            Duration::from_millis(1250)
        );
        assert_eq!(BackoffPolicy::DEFAULT.server_delay_max(secs(60), ServerJitter::None), secs(60));
        assert_eq!(BackoffPolicy::DEFAULT.server_delay_max(secs(60), ServerJitter::PositiveOnly), secs(75));
    }

    #[test]
    fn names_round_trip_and_errors_list_them() {
        for jitter in Jitter::ALL {
            assert_eq!(jitter.to_string().parse::<Jitter>(), Ok(jitter));
        }
        for jitter in ServerJitter::ALL {
            assert_eq!(jitter.to_string().parse::<ServerJitter>(), Ok(jitter));
        }
        assert_eq!(" Positive-Only ".parse(), Ok(Jitter::PositiveOnly));
        assert_eq!(format!("[{:>6}]", Jitter::Full), "[  full]");

        let err = "gaussian".parse::<Jitter>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown jitter \"gaussian\"; expected one of: \
             none, full, equal, decorrelated, symmetric, positive-only"
        );
        let err = "full".parse::<ServerJitter>().unwrap_err().to_string();
        assert_eq!(err, "unknown server jitter \"full\"; expected one of: none, positive-only");
    }

    #[test]
    fn validate_names_the_offending_field() {
        let with =
            |multiplier, jitter_ratio, cap| BackoffPolicy { multiplier, jitter_ratio, cap, ..BackoffPolicy::DEFAULT };
        let secs = Duration::from_secs;
        assert_eq!(with(0.5, 0.25, secs(30)).validate(), Err(BackoffError::InvalidMultiplier(0.5)));
        assert!(matches!(with(f64::NAN, 0.25, secs(30)).validate(), Err(BackoffError::InvalidMultiplier(_))));
        assert_eq!(with(f64::INFINITY, 0.25, secs(30)).validate(), Err(BackoffError::InvalidMultiplier(f64::INFINITY)));
        assert_eq!(with(2.0, -0.1, secs(30)).validate(), Err(BackoffError::InvalidJitterRatio(-0.1)));
        assert_eq!(with(2.0, 1.5, secs(30)).validate(), Err(BackoffError::InvalidJitterRatio(1.5)));
        assert_eq!(
            with(2.0, 0.25, Duration::from_millis(999)).validate(),
            Err(BackoffError::CapBelowBase { base: secs(1), cap: Duration::from_millis(999) })
        );
    }
}
