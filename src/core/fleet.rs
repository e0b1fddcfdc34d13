//! State shared by every call of a run: each provider's credential pool
//! and the fleet-wide retry budget.
//!
//! The retry budget is Envoy's: retries in flight against a provider may be
//! at most a share of its active calls, with a floor, so a fleet of streams
//! in a 429 storm adds a bounded fraction of load instead of multiplying it.
//! (tower's `budget` module: "It's generally dangerous to implement retries
//! without some limiting factor.")

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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

    /// Asks for a retry against `provider`. The permit is held for the
    /// retry's sleep and attempt.
    pub fn try_retry(&self, provider: &str) -> Result<RetryPermit, BudgetRefusal> {
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
        Ok(RetryPermit { load: Arc::clone(&self.load), provider: provider.to_owned() })
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

    fn fleet(percent: f64, min: usize) -> Fleet {
        Fleet::new(FleetBudgetSettings { percent, min }, HashMap::new())
    }

    #[test]
    fn retries_in_flight_are_a_share_of_active_calls_with_a_floor() {
        let fleet = fleet(20.0, 3);
        let _calls: Vec<_> = (0..20).map(|_| fleet.activate("p")).collect();
        let permits: Vec<_> = (0..4).map(|_| fleet.try_retry("p").unwrap()).collect();
        assert_eq!(fleet.try_retry("p").unwrap_err(), BudgetRefusal { in_flight: 4, limit: 4 });
        // Another provider has its own budget.
        assert!(fleet.try_retry("q").is_ok());
        drop(permits);
        assert!(fleet.try_retry("p").is_ok());
    }

    #[test]
    fn the_floor_applies_to_small_fleets() {
        let fleet = fleet(20.0, 3);
        let _call = fleet.activate("p");
        let _permits: Vec<_> = (0..3).map(|_| fleet.try_retry("p").unwrap()).collect();
        assert_eq!(fleet.try_retry("p").unwrap_err().limit, 3);
    }
}
