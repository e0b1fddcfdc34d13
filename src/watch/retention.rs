//! How many watch rounds the database keeps, so a canary that runs for
//! months does not grow it without bound: the newest N rounds, or those of
//! the last D days. Rounds are a watch's runs, told apart by their label.

use std::path::{Path, PathBuf};

use crate::session::blocking;

use crate::store::{RunId, Store, StoreError};

/// Which rounds are kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Retention {
    /// The newest this many rounds.
    Rounds(usize),
    /// The rounds started within this many days.
    Days(f64),
}

impl Retention {
    /// The rounds to delete among `rounds` (id and start in Unix ms,
    /// newest first) at `now_ms`.
    pub fn expired(self, rounds: &[(RunId, i64)], now_ms: i64) -> Vec<RunId> {
        match self {
            Retention::Rounds(keep) => rounds.iter().skip(keep).map(|(id, _)| *id).collect(),
            Retention::Days(days) => {
                let cutoff = now_ms - (days * 86_400_000.0) as i64;
                rounds.iter().filter(|(_, started)| *started < cutoff).map(|(id, _)| *id).collect()
            }
        }
    }

    /// Deletes the rounds labelled `label` in `db` that this retention no
    /// longer keeps, never `spared` (an observer's run just closed, however
    /// long it ran), and returns their ids (oldest last).
    pub fn prune(self, db: &Path, label: &str, now_ms: i64, spared: Option<RunId>) -> Result<Vec<RunId>, StoreError> {
        let mut store = Store::open(db)?;
        let mut expired = self.expired(&store.ended_with_label(label)?, now_ms);
        expired.retain(|id| Some(*id) != spared);
        for id in &expired {
            store.delete_run(*id)?;
        }
        Ok(expired)
    }

    /// [`Retention::prune`] as of now, off the runtime's workers.
    pub async fn prune_now(self, db: PathBuf, label: String, spared: Option<RunId>) -> Result<Vec<RunId>, StoreError> {
        blocking(move || self.prune(&db, &label, crate::store::runs::now_ms(), spared)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_MS: i64 = 86_400_000;

    #[test]
    fn keeping_rounds_deletes_all_but_the_newest() {
        let rounds = [(9, 900), (7, 700), (4, 400), (2, 200)];
        assert_eq!(Retention::Rounds(2).expired(&rounds, 1000), vec![4, 2]);
        assert_eq!(Retention::Rounds(4).expired(&rounds, 1000), Vec::<RunId>::new());
        assert_eq!(Retention::Rounds(0).expired(&rounds, 1000), vec![9, 7, 4, 2]);
    }

    #[test]
    fn keeping_days_deletes_what_started_before_the_cutoff() {
        let now = 10 * DAY_MS;
        let rounds = [(3, now - DAY_MS / 2), (2, now - DAY_MS - 1), (1, now - 3 * DAY_MS)];
        assert_eq!(Retention::Days(1.0).expired(&rounds, now), vec![2, 1]);
        assert_eq!(Retention::Days(0.25).expired(&rounds, now), vec![3, 2, 1]);
        assert_eq!(Retention::Days(7.0).expired(&rounds, now), Vec::<RunId>::new());
    }
}
