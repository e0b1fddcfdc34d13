//! When watch rounds start: round N at N × the interval from the first,
//! on tokio's clock (so tests run it in paused time). A round that runs
//! past the next start does not make rounds pile up: the starts it ran
//! over are skipped, and the next round begins at the first start still
//! ahead.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One scheduled round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Its number: it starts at this many intervals after the first.
    pub index: u64,
    /// Starts skipped just before it, because the round before ran over them.
    pub skipped: u64,
}

/// The starts of a watch's rounds.
#[derive(Debug)]
pub struct Schedule {
    /// The first round's start: the first call to [`Schedule::next`].
    first: Option<Instant>,
    every: Duration,
    next: u64,
}

/// The longest interval: a year and a day. Round N starts N intervals
/// after the first on a clock that overflows at about 2.9e11 years, so
/// an interval of 10^15 hours would end the watch at its second round.
pub const MAX_EVERY: Duration = Duration::from_secs(366 * 86_400);

impl Schedule {
    /// Rounds every `every` (more than zero, at most [`MAX_EVERY`]), the
    /// first as soon as it is asked for.
    pub fn new(every: Duration) -> Schedule {
        Schedule { first: None, every: every.clamp(Duration::from_nanos(1), MAX_EVERY), next: 0 }
    }

    /// Waits for the next round's start and returns it; `None` once
    /// `cancel` fires.
    pub async fn next(&mut self, cancel: &CancellationToken) -> Option<Slot> {
        let now = Instant::now();
        let first = *self.first.get_or_insert(now);
        let elapsed = now.saturating_duration_since(first);
        // The first start not already behind us (one just reached counts).
        let due = elapsed.as_nanos().div_ceil(self.every.as_nanos());
        let index = self.next.max(u64::try_from(due).unwrap_or(u64::MAX));
        let at = first + self.every.saturating_mul(u32::try_from(index).unwrap_or(u32::MAX));
        tokio::select! {
            biased;
            () = cancel.cancelled() => return None,
            () = tokio::time::sleep_until(at) => {}
        }
        let slot = Slot { index, skipped: index - self.next };
        self.next = index + 1;
        Some(slot)
    }
}

/// Reads an interval: a number with a unit, `ms`, `s`, `m`, `h` or `d`
/// (`60s`, `1.5s`, `5m`, `7d`); a bare number is seconds. At least 1 ms,
/// at most [`MAX_EVERY`] (366 days).
pub fn parse_every(text: &str) -> Result<Duration, String> {
    let allowed = "a duration such as 500ms, 60s, 5m, 1h or 7d (at least 1 ms, at most 366d)";
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let scale = match unit.trim() {
        "ms" => 1e-3,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => return Err(format!("`{text}` is not {allowed}")),
    };
    let seconds = number.parse::<f64>().map(|n| n * scale).map_err(|_| format!("`{text}` is not {allowed}"))?;
    match Duration::try_from_secs_f64(seconds) {
        Ok(every) if (Duration::from_millis(1)..=MAX_EVERY).contains(&every) => Ok(every),
        _ => Err(format!("`{text}` is not {allowed}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs rounds taking `work(index)` each until `until`, and returns
    /// each round's start (seconds after the first) and skipped starts.
    async fn starts(every: Duration, until: Duration, work: impl Fn(u64) -> Duration) -> Vec<(f64, u64, u64)> {
        let cancel = CancellationToken::new();
        let mut schedule = Schedule::new(every);
        let first = Instant::now();
        let mut seen = Vec::new();
        while let Some(slot) = schedule.next(&cancel).await {
            let at = Instant::now() - first;
            if at > until {
                break;
            }
            seen.push((at.as_secs_f64(), slot.index, slot.skipped));
            tokio::time::sleep(work(slot.index)).await;
        }
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn round_n_starts_at_n_intervals_whatever_each_round_takes() {
        let every = Duration::from_secs(60);
        // Rounds of varying length, all shorter than the interval: no drift.
        let seen = starts(every, Duration::from_secs(240), |n| Duration::from_millis(100 + 7_000 * n)).await;
        assert_eq!(seen, vec![(0.0, 0, 0), (60.0, 1, 0), (120.0, 2, 0), (180.0, 3, 0), (240.0, 4, 0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_round_skips_the_starts_it_ran_over_instead_of_piling_up() {
        let every = Duration::from_secs(10);
        // Round 1 takes 25 s: the starts at 20 s and 30 s pass while it runs.
        let seen = starts(every, Duration::from_secs(60), |n| Duration::from_secs(if n == 1 { 25 } else { 1 })).await;
        assert_eq!(seen, vec![(0.0, 0, 0), (10.0, 1, 0), (40.0, 4, 2), (50.0, 5, 0), (60.0, 6, 0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_that_ends_on_the_next_start_runs_it_at_once_and_an_instant_one_waits() {
        let every = Duration::from_secs(10);
        let seen = starts(every, Duration::from_secs(30), |n| if n == 0 { every } else { Duration::ZERO }).await;
        assert_eq!(seen, vec![(0.0, 0, 0), (10.0, 1, 0), (20.0, 2, 0), (30.0, 3, 0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_ends_the_wait() {
        let cancel = CancellationToken::new();
        let mut schedule = Schedule::new(Duration::from_secs(3600));
        assert_eq!(schedule.next(&cancel).await, Some(Slot { index: 0, skipped: 0 }));
        let stop = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            stop.cancel();
        });
        let waited = Instant::now();
        assert_eq!(schedule.next(&cancel).await, None);
        assert_eq!(waited.elapsed(), Duration::from_secs(5));
    }

    #[test]
    fn intervals_read_with_their_units() {
        assert_eq!(parse_every("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_every("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_every("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_every("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_every("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_every("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_every("366d"), Ok(MAX_EVERY));
        for bad in ["0s", "", "fast", "10 fortnights", "-1s", "0.1ms"] {
            let err = parse_every(bad).unwrap_err();
            assert!(err.contains(&format!("`{bad}`")) && err.contains("60s"), "{err}");
        }
    }

    #[test]
    fn an_interval_over_a_year_and_a_day_is_refused_by_name() {
        // Review D10: 3e15 h overflowed the clock at the second round.
        for bad in ["367d", "3000000000000000h", "99999999999999999999d"] {
            let err = parse_every(bad).unwrap_err();
            assert!(err.contains(&format!("`{bad}`")) && err.contains("at most 366d"), "{err}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_interval_past_the_longest_is_the_longest() {
        let cancel = CancellationToken::new();
        let mut schedule = Schedule::new(Duration::from_secs(u64::MAX));
        let first = Instant::now();
        assert_eq!(schedule.next(&cancel).await, Some(Slot { index: 0, skipped: 0 }));
        assert_eq!(schedule.next(&cancel).await, Some(Slot { index: 1, skipped: 0 }));
        assert_eq!(first.elapsed(), MAX_EVERY);
    }
}
