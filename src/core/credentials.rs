//! A provider's credential pool: several keys, rotation between them, and
//! cooldowns after auth and rate-limit failures (hermes-agent's pool).
//!
//! A pool of one key never cools it down: resting the only credential would
//! lock the user out for no benefit (seed 001 §4), so on a single account
//! rotation is a clean no-op.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::category::Category;

/// An API key. Its `Debug` and `Display` never print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Secret(key.into())
    }

    /// The key itself, for the one header that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// How the next key is picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    /// In turn.
    RoundRobin,
    /// The key used least so far.
    LeastUsed,
}

/// The key picked for an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// Its index in the pool (what events and reports show).
    pub index: usize,
    /// The key.
    pub secret: Secret,
}

/// Why no key could be picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllCoolingDown {
    /// When the first key becomes usable again.
    pub ready_in: Duration,
    /// Why that key rests (auth or rate limit).
    pub cause: Category,
}

#[derive(Debug)]
struct Slot {
    secret: Secret,
    /// Until when the key rests, and why.
    rest: Option<(Instant, Category)>,
    uses: u64,
}

/// A provider's keys.
#[derive(Debug)]
pub struct CredentialPool {
    rotation: Rotation,
    state: Mutex<PoolState>,
}

#[derive(Debug)]
struct PoolState {
    slots: Vec<Slot>,
    next: usize,
}

impl CredentialPool {
    /// A pool of `keys` (may be empty: the provider needs no key).
    pub fn new(keys: Vec<Secret>, rotation: Rotation) -> Self {
        let slots = keys.into_iter().map(|secret| Slot { secret, rest: None, uses: 0 }).collect();
        CredentialPool { rotation, state: Mutex::new(PoolState { slots, next: 0 }) }
    }

    /// How many keys the pool holds.
    pub fn len(&self) -> usize {
        self.state.lock().map_or(0, |s| s.slots.len())
    }

    /// True when the provider needs no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Picks a key that is not resting. `Ok(None)` for an empty pool.
    pub fn pick(&self, now: Instant) -> Result<Option<Credential>, AllCoolingDown> {
        let Ok(mut state) = self.state.lock() else { return Ok(None) };
        let n = state.slots.len();
        if n == 0 {
            return Ok(None);
        }
        let usable = |slot: &Slot| slot.rest.is_none_or(|(until, _)| until <= now);
        let index = match self.rotation {
            Rotation::RoundRobin => (0..n).map(|k| (state.next + k) % n).find(|&i| usable(&state.slots[i])),
            Rotation::LeastUsed => (0..n).filter(|&i| usable(&state.slots[i])).min_by_key(|&i| state.slots[i].uses),
        };
        match index {
            Some(i) => {
                state.next = (i + 1) % n;
                let slot = &mut state.slots[i];
                slot.uses += 1;
                slot.rest = None;
                Ok(Some(Credential { index: i, secret: slot.secret.clone() }))
            }
            None => {
                let (ready, cause) = state
                    .slots
                    .iter()
                    .filter_map(|s| s.rest)
                    .min_by_key(|(until, _)| *until)
                    .unwrap_or((now, Category::RateLimit));
                Err(AllCoolingDown { ready_in: ready.saturating_duration_since(now), cause })
            }
        }
    }

    /// Rests key `index` for `cooldown` because of a failure of `cause`.
    /// Returns false (and does nothing) for a pool of one key.
    pub fn cool_down(&self, index: usize, cooldown: Duration, cause: Category, now: Instant) -> bool {
        let Ok(mut state) = self.state.lock() else { return false };
        if state.slots.len() < 2 {
            return false;
        }
        match state.slots.get_mut(index) {
            Some(slot) => {
                let until = now.checked_add(cooldown).unwrap_or(now + Duration::from_secs(365 * 24 * 3600));
                slot.rest = Some((until, cause));
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize, rotation: Rotation) -> CredentialPool {
        CredentialPool::new((0..n).map(|i| Secret::new(format!("key-{i}"))).collect(), rotation)
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk-live-123");
        assert_eq!(format!("{s} {s:?}"), "*** Secret(***)");
    }

    #[tokio::test(start_paused = true)]
    async fn round_robin_skips_resting_keys_until_they_recover() {
        let p = pool(3, Rotation::RoundRobin);
        let now = Instant::now();
        let picks: Vec<usize> = (0..4).map(|_| p.pick(now).unwrap().unwrap().index).collect();
        assert_eq!(picks, [0, 1, 2, 0]);
        assert!(p.cool_down(1, Duration::from_secs(60), Category::Auth, now));
        assert_eq!(p.pick(now).unwrap().unwrap().index, 2);
        assert_eq!(p.pick(now).unwrap().unwrap().index, 0);
        assert_eq!(p.pick(now + Duration::from_secs(61)).unwrap().unwrap().index, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn all_resting_reports_when_the_first_recovers() {
        let p = pool(2, Rotation::LeastUsed);
        let now = Instant::now();
        p.cool_down(0, Duration::from_secs(30), Category::RateLimit, now);
        p.cool_down(1, Duration::from_secs(10), Category::Auth, now);
        assert_eq!(p.pick(now), Err(AllCoolingDown { ready_in: Duration::from_secs(10), cause: Category::Auth }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_single_key_is_never_rested_and_an_empty_pool_needs_none() {
        let p = pool(1, Rotation::RoundRobin);
        let now = Instant::now();
        assert!(!p.cool_down(0, Duration::from_secs(300), Category::Auth, now));
        assert_eq!(p.pick(now).unwrap().unwrap().index, 0);
        assert_eq!(pool(0, Rotation::RoundRobin).pick(now), Ok(None));
    }

    #[tokio::test(start_paused = true)]
    async fn least_used_balances() {
        let p = pool(2, Rotation::LeastUsed);
        let now = Instant::now();
        p.pick(now).unwrap();
        p.cool_down(1, Duration::from_secs(5), Category::RateLimit, now);
        p.pick(now).unwrap();
        p.pick(now).unwrap();
        // Key 0 has 3 uses, key 1 none: once key 1 is back it is preferred.
        assert_eq!(p.pick(now + Duration::from_secs(6)).unwrap().unwrap().index, 1);
    }
}
