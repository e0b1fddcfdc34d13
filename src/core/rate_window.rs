//! The throughput floor's measure: progress events counted over a sliding
//! window, and the moment the window would first hold fewer than the floor
//! asks for if no more came.
//!
//! The window is a fixed ring of per-slot counts, a tenth of the window a
//! slot, rather than an exponentially decayed rate. "Below the floor for a
//! whole window" is a statement about a window with edges, which a decayed
//! rate blurs (a burst long past still weighs on it, so how long a crawl
//! runs before it is caught would depend on what came before it); the ring
//! answers it exactly to a tenth of the window, the same way live and in a
//! replay of the recorded event times, for an add and a comparison per
//! event, no allocation and no floating point. The window is judged at slot
//! boundaries only, so the floor may notice a crawl up to a slot late.
//!
//! Times are offsets from when the floor started, so the governor (tokio
//! instants) and the timeline (recorded seconds) share one mechanism.

use std::time::Duration;

/// Slots of a window.
pub const SLOTS: usize = 10;

/// Progress events over a sliding window (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateWindow {
    slot_ns: u64,
    counts: [u32; SLOTS],
    /// The slot events are counted into now, numbered from the start.
    slot: u64,
    /// Its place in the ring (`slot % SLOTS`, kept: a division per event
    /// would cost more than the rest of counting it).
    current: usize,
    /// Where that slot ends, from the start.
    slot_end: Duration,
    /// The events the ring holds.
    held: u64,
}

impl RateWindow {
    /// An empty window of `window` (at least a nanosecond a slot).
    pub fn new(window: Duration) -> RateWindow {
        let slot_ns = u64::try_from(window.as_nanos() / SLOTS as u128).unwrap_or(u64::MAX).max(1);
        RateWindow {
            slot_ns,
            counts: [0; SLOTS],
            slot: 0,
            current: 0,
            slot_end: Duration::from_nanos(slot_ns),
            held: 0,
        }
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.slot_ns.saturating_mul(SLOTS as u64))
    }

    /// Counts one progress event `at` from the start (never earlier than
    /// the last one counted).
    pub fn count(&mut self, at: Duration) {
        if at >= self.slot_end {
            self.advance(nanos(at) / self.slot_ns);
        }
        self.count_in_slot();
    }

    /// Counts one progress event into the current slot: for a caller that
    /// knows the event comes before [`RateWindow::slot_end`].
    pub fn count_in_slot(&mut self) {
        self.counts[self.current] += 1;
        self.held += 1;
    }

    /// Where the current slot ends, from the start.
    pub fn slot_end(&self) -> Duration {
        self.slot_end
    }

    /// Moves the current slot on to `slot`, emptying the slots passed.
    fn advance(&mut self, slot: u64) {
        let passed = slot - self.slot;
        if passed >= SLOTS as u64 {
            self.counts = [0; SLOTS];
            self.held = 0;
        } else {
            for s in self.slot + 1..=slot {
                let i = self.index(s);
                self.held -= u64::from(self.counts[i]);
                self.counts[i] = 0;
            }
        }
        self.slot = slot;
        self.current = self.index(slot);
        self.slot_end = Duration::from_nanos(slot.saturating_add(1).saturating_mul(self.slot_ns));
    }

    fn index(&self, slot: u64) -> usize {
        (slot % SLOTS as u64) as usize
    }

    /// Events in the whole slots of the window that ends with the slot
    /// holding `at` (at or after the last event counted).
    pub fn in_window(&self, at: Duration) -> u64 {
        let slot = (nanos(at) / self.slot_ns).max(self.slot);
        // Of the ring's slots, those before `slot - SLOTS + 1` have left.
        let gone = (slot - self.slot).min(SLOTS as u64);
        let oldest = (self.slot + 1).saturating_sub(SLOTS as u64 - gone);
        (oldest..=self.slot).map(|s| u64::from(self.counts[self.index(s)])).sum()
    }

    /// When, if no more events come, the floor first finds a whole window
    /// holding fewer than `need` events: the first slot boundary at least a
    /// window after the start where that holds. A later event only moves
    /// it later.
    pub fn first_below(&self, need: f64) -> Duration {
        // The window ending at boundary `b` is slots `b - SLOTS .. b`. It is
        // judged from the first boundary after the current slot, where it is
        // the ring, and no earlier than a whole window from the start; each
        // boundary after that drops the ring's oldest slot.
        let mut boundary = (self.slot + 1).max(SLOTS as u64);
        let mut held = self.held;
        while held as f64 >= need && boundary - (SLOTS as u64) <= self.slot {
            held -= u64::from(self.counts[self.index(boundary - SLOTS as u64)]);
            boundary += 1;
        }
        Duration::from_nanos(boundary.saturating_mul(self.slot_ns))
    }
}

/// The fewest progress events any judged window of a stream held: its
/// events at `events` (ascending, from when the floor starts), its end at
/// `end`. A floor of that many a window (or fewer) never fires on a stream
/// like it. A stream that ended before a whole window passed is taken as
/// judged at its end (all it held): a floor above its pace would have cut
/// it had it gone on. Between two events a window only loses events, so
/// the last boundary before each event (and before the end) is the one to
/// look at.
pub fn fewest_in_a_window(window: Duration, events: impl IntoIterator<Item = Duration>, end: Duration) -> u64 {
    let mut ring = RateWindow::new(window);
    let slot_ns = ring.slot_ns;
    let mut fewest: Option<u64> = None;
    let mut last_ns = None::<u64>;
    let mut look = |ring: &RateWindow, at_ns: u64, last_ns: Option<u64>| {
        // The last boundary at or before `at`, when it is judged and
        // after the last event counted.
        let boundary = at_ns / slot_ns;
        if boundary >= SLOTS as u64 && last_ns.is_none_or(|last| boundary * slot_ns > last) {
            let held = ring.in_window(Duration::from_nanos(boundary * slot_ns - 1));
            fewest = Some(fewest.map_or(held, |f| f.min(held)));
        }
    };
    for at in events {
        let at_ns = nanos(at);
        look(&ring, at_ns, last_ns);
        ring.count(at);
        last_ns = Some(at_ns);
    }
    look(&ring, nanos(end), last_ns);
    fewest.unwrap_or(ring.held)
}

fn nanos(at: Duration) -> u64 {
    u64::try_from(at.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn an_empty_window_is_below_any_floor_a_window_after_the_start() {
        let ring = RateWindow::new(ms(1000));
        assert_eq!(ring.first_below(0.5), ms(1000));
        assert_eq!(ring.in_window(ms(5000)), 0);
    }

    #[test]
    fn a_steady_stream_holds_the_floor_and_its_end_is_found_a_window_on() {
        // 10 events a second for 3 s, then nothing: a floor of 5 a second
        // (5 events a window of 1 s) holds until half the window is empty.
        let mut ring = RateWindow::new(ms(1000));
        for i in 0..30 {
            ring.count(ms(i * 100 + 50));
        }
        assert_eq!(ring.in_window(ms(2950)), 10);
        assert_eq!(ring.first_below(5.0), ms(3600), "the window 2.6–3.6 s holds 4 events");
        assert_eq!(ring.first_below(10.0), ms(3100));
        assert_eq!(ring.in_window(ms(3450)), 5, "the slots from 2.5 s to 3.5 s: those to 3.0 s held events");
    }

    #[test]
    fn a_crawl_is_below_the_floor_and_a_gap_longer_than_the_window_empties_it() {
        let mut ring = RateWindow::new(ms(1000));
        // Two events a second against a floor of three.
        for i in 0..6 {
            ring.count(ms(i * 500));
        }
        assert_eq!(ring.first_below(3.0), ms(2600), "judged from the boundary after the last event");
        ring.count(ms(9_000));
        assert_eq!(ring.in_window(ms(9_000)), 1);
        assert_eq!(ring.first_below(3.0), ms(9_100), "each boundary after the last event is judged");
        assert_eq!(ring.first_below(1.0), ms(10_100), "the window ending at 10 s still holds the event at 9 s");
    }

    #[test]
    fn the_fewest_events_a_window_held_is_what_a_floor_may_ask_for() {
        // Ten a second for 3 s, then a pause of 0.55 s, then ten more a second.
        let mut events: Vec<Duration> = (0..30).map(|i| ms(i * 100 + 50)).collect();
        events.extend((0..10).map(|i| ms(3_600 + i * 100)));
        // Judged at each boundary from 1 s: the window ending at 3.6 s holds
        // 2.6–3.0 s, four events; from 3.7 s they come back.
        assert_eq!(fewest_in_a_window(ms(1000), events.iter().copied(), ms(4_500)), 4);
        // A floor of four a window never fires on it; of five, at 3.6 s.
        let mut ring = RateWindow::new(ms(1000));
        events.iter().take_while(|&&at| at < ms(3_600)).for_each(|&at| ring.count(at));
        assert_eq!((ring.first_below(4.0) > ms(3_600), ring.first_below(5.0)), (true, ms(3_600)));
        // Ending before a whole window, it is taken as judged at its end.
        assert_eq!(fewest_in_a_window(ms(1000), [ms(10), ms(20)], ms(999)), 2);
        // Nothing after the start: the first window is empty.
        assert_eq!(fewest_in_a_window(ms(1000), [], ms(1000)), 0);
    }

    #[test]
    fn the_first_judgement_waits_for_a_whole_window() {
        let mut ring = RateWindow::new(ms(1000));
        ring.count(ms(0));
        // One event: below a floor of 2 a window, but not judged before 1 s.
        assert_eq!(ring.first_below(2.0), ms(1000));
        assert_eq!(ring.first_below(1.0), ms(1100));
    }
}
