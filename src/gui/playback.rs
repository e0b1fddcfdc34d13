//! Playing a stored run back: where the time cursor is, whether it moves
//! and how fast. A plain state machine in the manner of rerun's
//! `TimeControl`: it is stepped with the frame's `dt` (never the wall
//! clock) and told what to do through [`Command`]s, and each call returns
//! what [changed](Change), so tests drive it with fixed steps and buttons
//! and shortcuts share one path.

/// The speeds offered, slowest first.
pub const SPEEDS: [f64; 11] = [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 100.0, 300.0, 1000.0];

/// What the transport bar and the shortcuts ask for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Command {
    /// Play if paused, pause if playing.
    TogglePlay,
    /// Pause and move to the next moment with events.
    StepForward,
    /// Pause and move to the previous moment with events.
    StepBack,
    /// Move to the start of the run.
    Start,
    /// Move to the end of the run.
    End,
    /// Move to this many seconds (clamped to the run).
    Seek(f64),
    /// Play at this multiple of real time (clamped to [`SPEEDS`]' range).
    Speed(f64),
}

/// What a step or a command changed.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Change {
    /// The cursor moved: the lanes must be brought to it.
    pub moved: bool,
    /// Playback goes on: another frame is wanted.
    pub needs_repaint: bool,
}

/// The cursor over a run of a given duration.
#[derive(Debug, Clone, PartialEq)]
pub struct Playback {
    position_s: f64,
    duration_s: f64,
    playing: bool,
    speed: f64,
}

impl Playback {
    /// Paused at the end of a run of `duration_s` seconds (the whole run
    /// shown, as it was recorded), at real-time speed.
    pub fn new(duration_s: f64) -> Self {
        let duration_s = if duration_s.is_finite() { duration_s.max(0.0) } else { 0.0 };
        Playback { position_s: duration_s, duration_s, playing: false, speed: 1.0 }
    }

    /// The cursor, in seconds from the run's start.
    pub fn position_s(&self) -> f64 {
        self.position_s
    }

    /// The run's length in seconds.
    pub fn duration_s(&self) -> f64 {
        self.duration_s
    }

    /// Whether the cursor moves with time.
    pub fn is_playing(&self) -> bool {
        self.playing
    }

    /// The multiple of real time it plays at.
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// Lets `dt_s` seconds of real time pass: a playing cursor moves by
    /// `dt_s × speed` and stops at the end.
    pub fn advance(&mut self, dt_s: f64) -> Change {
        if !self.playing {
            return Change::default();
        }
        let moved = self.move_to(self.position_s + dt_s.max(0.0) * self.speed);
        if self.position_s >= self.duration_s {
            self.playing = false;
        }
        Change { moved, needs_repaint: self.playing }
    }

    /// Carries out `command`; `moments` are the times with events, sorted,
    /// which the steps move between.
    pub fn apply(&mut self, command: Command, moments: &[f64]) -> Change {
        let moved = match command {
            Command::TogglePlay => {
                self.playing = !self.playing;
                // Play at the end starts over, as a media player does.
                self.playing && self.position_s >= self.duration_s && self.move_to(0.0)
            }
            Command::StepForward => {
                self.playing = false;
                let next = moments.partition_point(|&t| t <= self.position_s);
                self.move_to(moments.get(next).copied().unwrap_or(self.duration_s))
            }
            Command::StepBack => {
                self.playing = false;
                let previous = moments.partition_point(|&t| t < self.position_s);
                self.move_to(previous.checked_sub(1).map_or(0.0, |i| moments[i]))
            }
            Command::Start => self.move_to(0.0),
            Command::End => self.move_to(self.duration_s),
            Command::Seek(to_s) => self.move_to(to_s),
            Command::Speed(speed) => {
                if speed.is_finite() {
                    self.speed = speed.clamp(SPEEDS[0], SPEEDS[SPEEDS.len() - 1]);
                }
                false
            }
        };
        Change { moved, needs_repaint: self.playing }
    }

    /// Puts the cursor at `to_s` (clamped to the run); true if it moved.
    fn move_to(&mut self, to_s: f64) -> bool {
        if to_s.is_nan() {
            return false;
        }
        let to_s = to_s.clamp(0.0, self.duration_s);
        let moved = to_s != self.position_s;
        self.position_s = to_s;
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 60 Hz frame.
    const DT: f64 = 1.0 / 60.0;

    fn at(playback: &Playback) -> f64 {
        playback.position_s()
    }

    #[test]
    fn a_stored_run_opens_paused_at_its_end() {
        let mut playback = Playback::new(10.0);
        assert_eq!((at(&playback), playback.is_playing(), playback.speed()), (10.0, false, 1.0));
        assert_eq!(playback.advance(DT), Change::default());
        assert_eq!(at(&playback), 10.0);
    }

    #[test]
    fn playing_moves_the_cursor_by_dt_times_speed_and_stops_at_the_end() {
        let mut playback = Playback::new(10.0);
        // Play at the end starts over from the beginning.
        assert_eq!(playback.apply(Command::TogglePlay, &[]), Change { moved: true, needs_repaint: true });
        assert_eq!(at(&playback), 0.0);
        for _ in 0..60 {
            assert_eq!(playback.advance(DT), Change { moved: true, needs_repaint: true });
        }
        assert!((at(&playback) - 1.0).abs() < 1e-9, "{}", at(&playback));
        let _ = playback.apply(Command::Speed(100.0), &[]);
        for _ in 0..5 {
            let _ = playback.advance(DT);
        }
        assert!((at(&playback) - (1.0 + 5.0 * DT * 100.0)).abs() < 1e-9, "{}", at(&playback));
        // Past the end: clamped, paused, and no more frames wanted.
        assert_eq!(playback.advance(1.0), Change { moved: true, needs_repaint: false });
        assert_eq!((at(&playback), playback.is_playing()), (10.0, false));
        assert_eq!(playback.advance(DT), Change::default());
    }

    #[test]
    fn pause_holds_the_cursor_whatever_time_passes() {
        let mut playback = Playback::new(10.0);
        let _ = playback.apply(Command::Start, &[]);
        let _ = playback.apply(Command::TogglePlay, &[]);
        let _ = playback.advance(0.5);
        assert_eq!(playback.apply(Command::TogglePlay, &[]), Change { moved: false, needs_repaint: false });
        assert_eq!(playback.advance(3.0), Change::default());
        assert_eq!(at(&playback), 0.5);
    }

    #[test]
    fn steps_move_between_moments_with_events_and_pause() {
        let moments = [0.0, 0.0, 0.25, 0.25, 1.0, 4.0];
        let mut playback = Playback::new(5.0);
        let _ = playback.apply(Command::Start, &moments);
        let _ = playback.apply(Command::TogglePlay, &moments);
        let mut visited = vec![];
        while at(&playback) < 5.0 {
            let change = playback.apply(Command::StepForward, &moments);
            assert!(change.moved && !change.needs_repaint && !playback.is_playing());
            visited.push(at(&playback));
        }
        // Equal times are one step; the last step reaches the end.
        assert_eq!(visited, [0.25, 1.0, 4.0, 5.0]);
        assert_eq!(playback.apply(Command::StepForward, &moments), Change::default());
        visited.clear();
        while at(&playback) > 0.0 {
            let _ = playback.apply(Command::StepBack, &moments);
            visited.push(at(&playback));
        }
        assert_eq!(visited, [4.0, 1.0, 0.25, 0.0]);
        // Between moments, a step goes to the neighbour on that side.
        let _ = playback.apply(Command::Seek(0.6), &moments);
        let _ = playback.apply(Command::StepBack, &moments);
        assert_eq!(at(&playback), 0.25);
    }

    #[test]
    fn seeks_and_speeds_are_kept_within_range() {
        let mut playback = Playback::new(2.0);
        let _ = playback.apply(Command::Seek(-3.0), &[]);
        assert_eq!(at(&playback), 0.0);
        let _ = playback.apply(Command::Seek(9.0), &[]);
        assert_eq!(at(&playback), 2.0);
        assert_eq!(playback.apply(Command::Seek(f64::NAN), &[]), Change::default());
        assert_eq!(at(&playback), 2.0);
        let _ = playback.apply(Command::Speed(0.0), &[]);
        assert_eq!(playback.speed(), 0.1);
        let _ = playback.apply(Command::Speed(1e9), &[]);
        assert_eq!(playback.speed(), 1000.0);
        let _ = playback.apply(Command::Speed(f64::INFINITY), &[]);
        assert_eq!(playback.speed(), 1000.0);
        let _ = playback.apply(Command::Start, &[]);
        assert_eq!(playback.apply(Command::End, &[]), Change { moved: true, needs_repaint: false });
    }

    #[test]
    fn an_empty_run_has_nowhere_to_go() {
        let mut playback = Playback::new(f64::NAN);
        assert_eq!(playback.duration_s(), 0.0);
        let change = playback.apply(Command::TogglePlay, &[]);
        assert!(!change.moved);
        assert_eq!(playback.advance(DT), Change { moved: false, needs_repaint: false });
        assert!(!playback.is_playing());
    }
}
