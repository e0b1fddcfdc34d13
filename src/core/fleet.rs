//! State shared by every call of a run: each provider's credential pool
//! and the fleet-wide retry budget.
//!
//! The retry budget is Envoy's: retries in flight against a provider may be
//! at most a share of its active calls, with a floor, so a fleet of streams
//! in a 429 storm adds a bounded fraction of load instead of multiplying it.
//! (tower's `budget` module: "It's generally dangerous to implement retries
//! without some limiting factor.")
//!
//! It governs the retries of the failures that say the provider is loaded
//! (`STALLSCOPE_FLEET_RETRY_BUDGET_CATEGORIES`, by default rate limits,
//! overload, server errors and a wait for the first byte that ran out), as
//! those are the retries that multiply the load. A retry of any other
//! failure (a path gone silent after the response began, a refused
//! connection) neither asks it nor counts against it: refusing it would
//! turn a recoverable stall into a failed call and protect nobody.
//! docs/ARCHITECTURE.md gives the evidence.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::category::{Category, TimerKind};
use super::credentials::CredentialPool;
use super::policy::FleetBudgetSettings;

#[derive(Debug, Default, Clone, Copy)]
struct Load {
    active: usize,
    retrying: usize,
}

/// A refusal by the fleet retry budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetRefusal {
    /// Retries in flight at the time.
    pub in_flight: usize,
    /// The limit in force.
    pub limit: usize,
}

/// Shared by all calls of a run.
#[derive(Debug)]
pub struct Fleet {
    budget: FleetBudgetSettings,
    pools: HashMap<String, Arc<CredentialPool>>,
    load: Arc<Mutex<HashMap<String, Load>>>,
}

impl Fleet {
    /// A fleet with these credential pools (by provider name).
    pub fn new(budget: FleetBudgetSettings, pools: HashMap<String, Arc<CredentialPool>>) -> Self {
        Fleet { budget, pools, load: Arc::default() }
    }

    /// The pool of `provider` (None: the provider needs no key).
    pub fn pool(&self, provider: &str) -> Option<&Arc<CredentialPool>> {
        self.pools.get(provider)
    }

    /// Counts a call as active against `provider` until the guard drops.
    pub fn activate(&self, provider: &str) -> ActiveCall {
        self.update(provider, |l| l.active += 1);
        ActiveCall { load: Arc::clone(&self.load), provider: provider.to_owned() }
    }

    /// Asks for a retry against `provider` of a failure of `category` (a
    /// timeout: fired by `timer`). The permit is held for the retry's sleep
    /// and attempt; there is none (`Ok(None)`) for a failure the budget
    /// does not govern, whose retry it neither bounds nor counts.
    pub fn try_retry(
        &self,
        provider: &str,
        category: Category,
        timer: Option<TimerKind>,
    ) -> Result<Option<RetryPermit>, BudgetRefusal> {
        if !self.budget.governs.covers(category, timer) {
            return Ok(None);
        }
        let Ok(mut load) = self.load.lock() else {
            return Err(BudgetRefusal { in_flight: 0, limit: 0 });
        };
        let entry = load.entry(provider.to_owned()).or_default();
        // Truncation is the point: a share of whole calls.
        let share = (entry.active as f64 * self.budget.percent / 100.0).floor() as usize;
        let limit = share.max(self.budget.min);
        if entry.retrying >= limit {
            return Err(BudgetRefusal { in_flight: entry.retrying, limit });
        }
        entry.retrying += 1;
        Ok(Some(RetryPermit { load: Arc::clone(&self.load), provider: provider.to_owned() }))
    }

    fn update(&self, provider: &str, change: impl FnOnce(&mut Load)) {
        if let Ok(mut load) = self.load.lock() {
            change(load.entry(provider.to_owned()).or_default());
        }
    }
}

fn release(load: &Mutex<HashMap<String, Load>>, provider: &str, change: impl FnOnce(&mut Load)) {
    if let Ok(mut load) = load.lock()
        && let Some(entry) = load.get_mut(provider)
    {
        change(entry);
    }
}

/// Marks a call active against a provider while it lives.
#[derive(Debug)]
pub struct ActiveCall {
    load: Arc<Mutex<HashMap<String, Load>>>,
    provider: String,
}

impl Drop for ActiveCall {
    fn drop(&mut self) {
        release(&self.load, &self.provider, |l| l.active = l.active.saturating_sub(1));
    }
}

/// A retry in flight against a provider while it lives.
#[derive(Debug)]
pub struct RetryPermit {
    load: Arc<Mutex<HashMap<String, Load>>>,
    provider: String,
}

impl Drop for RetryPermit {
    fn drop(&mut self) {
        release(&self.load, &self.provider, |l| l.retrying = l.retrying.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::BudgetScope;

    const RATE_LIMIT: (Category, Option<TimerKind>) = (Category::RateLimit, None);

    fn fleet(percent: f64, min: usize) -> Fleet {
        let governs = BudgetScope::parse("timeout:ttfb,rate_limit,overloaded,server_error");
        Fleet::new(FleetBudgetSettings { percent, min, governs }, HashMap::new())
    }

    fn retry(fleet: &Fleet, provider: &str, (category, timer): (Category, Option<TimerKind>)) -> Option<RetryPermit> {
        fleet.try_retry(provider, category, timer).unwrap()
    }

    #[test]
    fn retries_in_flight_are_a_share_of_active_calls_with_a_floor() {
        let fleet = fleet(20.0, 3);
        let _calls: Vec<_> = (0..20).map(|_| fleet.activate("p")).collect();
        let permits: Vec<_> = (0..4).map(|_| retry(&fleet, "p", RATE_LIMIT).unwrap()).collect();
        let refusal = fleet.try_retry("p", Category::Overloaded, None).unwrap_err();
        assert_eq!(refusal, BudgetRefusal { in_flight: 4, limit: 4 });
        // Another provider has its own budget.
        assert!(retry(&fleet, "q", RATE_LIMIT).is_some());
        drop(permits);
        assert!(retry(&fleet, "p", RATE_LIMIT).is_some());
    }

    #[test]
    fn the_floor_applies_to_small_fleets() {
        let fleet = fleet(20.0, 3);
        let _call = fleet.activate("p");
        let _permits: Vec<_> = (0..3).map(|_| retry(&fleet, "p", RATE_LIMIT).unwrap()).collect();
        assert_eq!(fleet.try_retry("p", Category::ServerError, None).unwrap_err().limit, 3);
    }

    #[test]
    fn retries_it_does_not_govern_are_neither_refused_nor_counted() {
        let fleet = fleet(0.0, 1);
        let _call = fleet.activate("p");
        let stalls = [
            (Category::Timeout, Some(TimerKind::Idle)),
            (Category::Timeout, Some(TimerKind::DataStall)),
            (Category::Connection, None),
            (Category::Auth, None),
        ];
        for stall in stalls {
            assert!(retry(&fleet, "p", stall).is_none(), "{stall:?} took a permit");
        }
        // None of them used the one retry the floor allows.
        let _permit = retry(&fleet, "p", (Category::Timeout, Some(TimerKind::Ttfb))).unwrap();
        assert_eq!(
            fleet.try_retry("p", Category::RateLimit, None).unwrap_err(),
            BudgetRefusal { in_flight: 1, limit: 1 }
        );
    }
}
