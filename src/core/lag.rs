//! When our own runtime's lateness makes a timer's verdict untrustworthy.
//!
//! A timer that fires on an overloaded client may have fired because the
//! task that would have read the waiting bytes was not polled in time, not
//! because the network was silent. A timer with budget `B` that fired while
//! the runtime ran `L` late only proves the network was silent for `B − L`;
//! once `L` is a meaningful fraction of `B` the verdict says more about the
//! client than about the network, and reports must say so.

use std::time::Duration;

/// The share of a timer's budget the runtime may lag before the timer's
/// verdict is no longer the network's fault: a tenth, so a verdict we
/// still trust proves at least 90% of the silence it claims.
pub const UNTRUSTED_LAG_FRACTION: f64 = 0.1;

/// Whether a timer with `budget` that fired while the runtime lagged by
/// `lag` must be marked "client overloaded: not trustworthy".
pub fn lag_untrusts(budget: Duration, lag: Duration) -> bool {
    lag.as_secs_f64() >= budget.as_secs_f64() * UNTRUSTED_LAG_FRACTION
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenth_of_the_budget_is_where_trust_ends() {
        let budget = Duration::from_secs(1);
        assert!(!lag_untrusts(budget, Duration::ZERO));
        assert!(!lag_untrusts(budget, Duration::from_millis(99)));
        assert!(lag_untrusts(budget, Duration::from_millis(100)));
        assert!(lag_untrusts(Duration::from_millis(500), Duration::from_millis(60)));
        assert!(!lag_untrusts(Duration::from_secs(300), Duration::from_secs(1)));
    }
}
