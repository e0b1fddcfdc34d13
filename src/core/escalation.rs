//! Timeout escalation: longer per-attempt timeouts after timeout retries.
//!
//! When an attempt fails because a timer fired (connect, first byte, stall,
//! total), retrying with the very same timeout often fails the very same
//! way: the model may simply need longer for this prompt. [`Escalation`]
//! grows the timeout of each further attempt of that timeout category, up
//! to an optional ceiling, so a slow-but-working upstream eventually gets
//! through while a dead one still fails within a bounded time.
//!
//! Everything here is pure and saturating: no input panics or overflows.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use thiserror::Error;

use super::backoff::{duration_from_nanos, scale};

/// Why an escalation configuration or strategy name was rejected.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum EscalationError {
    /// [`Escalation::multiplier`] is NaN, infinite or below 1.
    #[error("escalation multiplier must be finite and at least 1, got {0}")]
    InvalidMultiplier(f64),
    /// A string that names no [`EscalationStrategy`].
    #[error(
        "unknown escalation strategy {given:?}; expected one of: {}",
        EscalationStrategy::ALL.map(EscalationStrategy::name).join(", ")
    )]
    UnknownStrategy {
        /// The string as given.
        given: String,
    },
}

/// How the timeout grows with the number of timeout retries so far.
///
/// `base` is the configured timeout, `n` the number of timeout-category
/// retries already made (0 for the first attempt), `budget` the category's
/// retry budget, `inc`, `mult` and `max` the [`Escalation`] fields.
///
/// | name             | timeout for attempt `n`                              |
/// |------------------|------------------------------------------------------|
/// | `none`           | `base`                                               |
/// | `additive`       | `min(base + inc·n, max)`                             |
/// | `multiplicative` | `min(base · mult^n, max)`                            |
/// | `linear`         | `base + (max − base) · min(n, budget) / budget`; `base` without `max` or with `budget` 0 |
///
/// Linear spreads the gap between `base` and `max` evenly over the budget,
/// so the last allowed retry gets exactly `max`.
///
/// Parsed from and printed as the names above (parsing ignores ASCII case
/// and surrounding whitespace). The default is `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EscalationStrategy {
    /// Every attempt gets the configured timeout.
    #[default]
    None,
    /// Each timeout retry adds a fixed increment.
    Additive,
    /// Each timeout retry multiplies the timeout.
    Multiplicative,
    /// The timeout climbs from `base` to `max` in equal steps over the budget.
    Linear,
}

impl EscalationStrategy {
    /// Every strategy, in declaration order.
    pub const ALL: [EscalationStrategy; 4] = [
        EscalationStrategy::None,
        EscalationStrategy::Additive,
        EscalationStrategy::Multiplicative,
        EscalationStrategy::Linear,
    ];
}

named_enum!(EscalationStrategy, EscalationError::UnknownStrategy, {
    None => "none",
    Additive => "additive",
    Multiplicative => "multiplicative",
    Linear => "linear",
});

/// Growth of a per-attempt timeout across timeout-category retries.
///
/// | field        | default | valid          | used by                    | if invalid anyway |
/// |--------------|---------|----------------|----------------------------|-------------------|
/// | `strategy`   | `none`  | any            | —                          | —                 |
/// | `increment`  | 15 s    | any            | `additive`                 | —                 |
/// | `multiplier` | 2.0     | finite, `>= 1` | `multiplicative`           | NaN or `< 1`: 1; `+inf`: `max` (or [`Duration::MAX`]) from retry 1 on |
/// | `max`        | none    | any            | all (ceiling); `linear` (target) | —           |
///
/// Whatever the strategy, [`escalate`](Self::escalate):
/// - never returns less than `base`: a `max` below `base` yields `base`;
/// - never returns more than `max` when `max >= base`;
/// - returns [`Duration::ZERO`] for a zero `base`, which means "timer
///   disabled" and must stay disabled;
/// - is non-decreasing in the number of timeout retries;
/// - saturates at [`Duration::MAX`] instead of overflowing.
///
/// The default is no escalation; the increment and multiplier defaults only
/// matter once a strategy is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Escalation {
    /// How the timeout grows.
    pub strategy: EscalationStrategy,
    /// Added per timeout retry by [`EscalationStrategy::Additive`].
    pub increment: Duration,
    /// Applied per timeout retry by [`EscalationStrategy::Multiplicative`].
    pub multiplier: f64,
    /// Ceiling of every strategy, and the target of
    /// [`EscalationStrategy::Linear`]; `None` leaves growth unbounded.
    pub max: Option<Duration>,
}

impl Default for Escalation {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Escalation {
    /// The defaults listed in the type docs: no escalation.
    pub const DEFAULT: Self =
        Self { strategy: EscalationStrategy::None, increment: Duration::from_secs(15), multiplier: 2.0, max: None };

    /// Checks the fields against the "valid" column of the type docs.
    ///
    /// # Errors
    ///
    /// [`EscalationError::InvalidMultiplier`] for a NaN, infinite or
    /// shrinking multiplier.
    pub fn validate(&self) -> Result<(), EscalationError> {
        if self.multiplier.is_finite() && self.multiplier >= 1.0 {
            Ok(())
        } else {
            Err(EscalationError::InvalidMultiplier(self.multiplier))
        }
    }

    /// The timeout for an attempt made after `timeout_retries`
    /// timeout-category retries (0 for the first attempt), given that
    /// category's retry `budget`; see [`EscalationStrategy`] for the
    /// formulas and [`Escalation`] for the guarantees.
    pub fn escalate(&self, base: Duration, timeout_retries: u32, budget: u32) -> Duration {
        if base.is_zero() {
            return base;
        }
        let escalated = match self.strategy {
            EscalationStrategy::None => base,
            EscalationStrategy::Additive => base.saturating_add(self.increment.saturating_mul(timeout_retries)),
            EscalationStrategy::Multiplicative => scale(base, self.growth().powf(f64::from(timeout_retries))),
            EscalationStrategy::Linear => match self.max {
                Some(max) if budget > 0 => {
                    let steps = u128::from(timeout_retries.min(budget));
                    // At most ~1.8e28 ns times ~4.3e9 steps: far below
                    // u128::MAX, so the product cannot overflow.
                    let gap = max.saturating_sub(base).as_nanos() * steps;
                    base.saturating_add(duration_from_nanos(gap / u128::from(budget)))
                }
                _ => base,
            },
        };
        let capped = match self.max {
            Some(max) => escalated.min(max),
            None => escalated,
        };
        // Escalation exists to lengthen timeouts; a `max` below `base` must
        // not be able to shorten one.
        capped.max(base)
    }

    /// The multiplier as used: NaN and shrinking multipliers would make
    /// timeouts shrink or become meaningless, so they count as 1.
    fn growth(&self) -> f64 {
        if self.multiplier >= 1.0 { self.multiplier } else { 1.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secs(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
        values.into_iter().map(Duration::from_secs).collect()
    }

    fn schedule(escalation: &Escalation, base: u64, budget: u32, last: u32) -> Vec<Duration> {
        (0..=last).map(|n| escalation.escalate(Duration::from_secs(base), n, budget)).collect()
    }

    #[test]
    fn additive_matches_the_design_doc() {
        let escalation = Escalation {
            strategy: EscalationStrategy::Additive,
            increment: Duration::from_secs(15),
            max: Some(Duration::from_secs(180)),
            ..Escalation::DEFAULT
        };
        assert_eq!(schedule(&escalation, 30, 3, 4), secs([30, 45, 60, 75, 90]));
    }

    #[test]
    fn multiplicative_matches_the_design_doc() {
        let escalation = Escalation {
            strategy: EscalationStrategy::Multiplicative,
            multiplier: 2.0,
            max: Some(Duration::from_secs(120)),
            ..Escalation::DEFAULT
        };
        assert_eq!(schedule(&escalation, 15, 4, 4), secs([15, 30, 60, 120, 120]));
    }

    #[test]
    fn linear_matches_the_design_doc() {
        let escalation = Escalation {
            strategy: EscalationStrategy::Linear,
            max: Some(Duration::from_secs(120)),
            ..Escalation::DEFAULT
        };
        assert_eq!(schedule(&escalation, 30, 3, 3), secs([30, 60, 90, 120]));
        assert_eq!(escalation.escalate(Duration::from_secs(30), 9, 3), Duration::from_secs(120));
    }

    #[test]
    fn linear_without_target_or_budget_keeps_base() {
        let linear = Escalation { strategy: EscalationStrategy::Linear, ..Escalation::DEFAULT };
        let base = Duration::from_secs(30);
        assert_eq!(linear.escalate(base, 2, 3), base);
        let targeted = Escalation { max: Some(Duration::from_secs(120)), ..linear };
        assert_eq!(targeted.escalate(base, 2, 0), base);
    }

    #[test]
    fn none_zero_base_and_low_max_keep_base() {
        let base = Duration::from_secs(30);
        assert_eq!(Escalation::DEFAULT.escalate(base, 5, 3), base);
        for strategy in EscalationStrategy::ALL {
            let escalation = Escalation { strategy, max: Some(Duration::from_secs(10)), ..Escalation::DEFAULT };
            assert_eq!(escalation.escalate(Duration::ZERO, 5, 3), Duration::ZERO);
            assert_eq!(escalation.escalate(base, 5, 3), base);
        }
    }

    #[test]
    fn huge_inputs_saturate() {
        let base = Duration::from_secs(1);
        let additive =
            Escalation { strategy: EscalationStrategy::Additive, increment: Duration::MAX, ..Escalation::DEFAULT };
        assert_eq!(additive.escalate(base, u32::MAX, u32::MAX), Duration::MAX);
        let multiplicative = Escalation {
            strategy: EscalationStrategy::Multiplicative,
            multiplier: f64::INFINITY,
            ..Escalation::DEFAULT
        };
        assert_eq!(multiplicative.escalate(base, 0, 1), base);
        assert_eq!(multiplicative.escalate(base, 1, 1), Duration::MAX);
        let linear =
            Escalation { strategy: EscalationStrategy::Linear, max: Some(Duration::MAX), ..Escalation::DEFAULT };
        assert_eq!(linear.escalate(base, u32::MAX, u32::MAX), Duration::MAX);
    }

    #[test]
    fn defaults_validation_and_names() {
        assert_eq!(Escalation::default(), Escalation::DEFAULT);
        assert_eq!(Escalation::DEFAULT.strategy, EscalationStrategy::None);
        assert_eq!(Escalation::DEFAULT.increment, Duration::from_secs(15));
        assert_eq!(Escalation::DEFAULT.multiplier, 2.0);
        assert_eq!(Escalation::DEFAULT.max, None);
        assert!(Escalation::DEFAULT.validate().is_ok());
        for multiplier in [0.5, -1.0, f64::INFINITY, f64::NEG_INFINITY] {
            let escalation = Escalation { multiplier, ..Escalation::DEFAULT };
            assert_eq!(escalation.validate(), Err(EscalationError::InvalidMultiplier(multiplier)));
        }
        let nan = Escalation { multiplier: f64::NAN, ..Escalation::DEFAULT };
        assert!(nan.validate().is_err());

        for strategy in EscalationStrategy::ALL {
            assert_eq!(strategy.to_string().parse(), Ok(strategy));
        }
        assert_eq!(" Linear".parse(), Ok(EscalationStrategy::Linear));
        assert_eq!(
            "exponential".parse::<EscalationStrategy>().unwrap_err().to_string(),
            "unknown escalation strategy \"exponential\"; \
             expected one of: none, additive, multiplicative, linear"
        );
    }

    fn any_duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            3 => (0u64..3_600_000).prop_map(Duration::from_millis),
            1 => (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
            1 => Just(Duration::ZERO),
            1 => Just(Duration::MAX),
        ]
    }

    fn any_count() -> impl Strategy<Value = u32> {
        prop_oneof![3 => 0u32..32, 1 => any::<u32>(), 1 => Just(u32::MAX)]
    }

    fn any_escalation(multiplier: BoxedStrategy<f64>) -> impl Strategy<Value = Escalation> {
        (
            prop::sample::select(EscalationStrategy::ALL.to_vec()),
            any_duration(),
            multiplier,
            proptest::option::of(any_duration()),
        )
            .prop_map(|(strategy, increment, multiplier, max)| Escalation {
                strategy,
                increment,
                multiplier,
                max,
            })
    }

    fn valid_multiplier() -> BoxedStrategy<f64> {
        prop_oneof![Just(1.0), Just(2.0), 1.0f64..16.0].boxed()
    }

    proptest! {
        #[test]
        fn escalation_is_monotonic_and_bounded(
            escalation in any_escalation(valid_multiplier()),
            base in any_duration(),
            n in any_count(),
            budget in any_count(),
        ) {
            let here = escalation.escalate(base, n, budget);
            prop_assert!(here >= base);
            if base.is_zero() {
                prop_assert_eq!(here, Duration::ZERO);
            }
            if let Some(max) = escalation.max {
                if max >= base {
                    prop_assert!(here <= max);
                } else {
                    prop_assert_eq!(here, base);
                }
            }
            if let Some(next) = n.checked_add(1) {
                prop_assert!(here <= escalation.escalate(base, next, budget));
            }
            prop_assert!(escalation.escalate(base, 0, budget) <= here);
        }

        #[test]
        fn any_multiplier_never_panics(
            escalation in any_escalation(prop::num::f64::ANY.boxed()),
            base in any_duration(),
            n in any_count(),
            budget in any_count(),
        ) {
            let here = escalation.escalate(base, n, budget);
            prop_assert!(here >= base);
            if let Some(next) = n.checked_add(1) {
                prop_assert!(here <= escalation.escalate(base, next, budget));
            }
        }
    }
}
