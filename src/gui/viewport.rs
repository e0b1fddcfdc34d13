//! The span of time the lanes show, and the one way it moves: every
//! navigation (a drag, the wheel, a right-drag box, W/S/A/D and the
//! arrows, Fit, a click on the overview) is a [`TimeWindow`] turned into
//! another, so each lane and the axis show the same span in the same frame.

/// A span of the run's clock, in seconds from its start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeWindow {
    /// The left edge.
    pub start_s: f64,
    /// The right edge.
    pub end_s: f64,
}

/// The narrowest span shown: a tenth of a millisecond, below which the
/// recorded times carry no more detail.
pub const MIN_SPAN_S: f64 = 1e-4;

/// A W/S press zooms by this factor; an A/D or arrow press pans by this
/// share of the span (as in Perfetto, a press moves a fifth of the view).
pub const KEY_ZOOM: f64 = 0.8;
/// See [`KEY_ZOOM`].
pub const KEY_PAN: f64 = 0.2;

impl TimeWindow {
    /// The span between `a` and `b`, in either order, at least [`MIN_SPAN_S`]
    /// wide (widened about its middle); non-finite edges give `0..1 s`.
    pub fn new(a: f64, b: f64) -> Self {
        if !a.is_finite() || !b.is_finite() {
            return TimeWindow { start_s: 0.0, end_s: 1.0 };
        }
        let (start_s, end_s) = if a <= b { (a, b) } else { (b, a) };
        if end_s - start_s >= MIN_SPAN_S {
            return TimeWindow { start_s, end_s };
        }
        let middle = (start_s + end_s) / 2.0;
        TimeWindow { start_s: middle - MIN_SPAN_S / 2.0, end_s: middle + MIN_SPAN_S / 2.0 }
    }

    /// Its width in seconds.
    pub fn span_s(&self) -> f64 {
        self.end_s - self.start_s
    }

    /// Whether `at_s` is inside it.
    pub fn contains(&self, at_s: f64) -> bool {
        (self.start_s..=self.end_s).contains(&at_s)
    }

    /// Narrowed (`factor` < 1) or widened (> 1) about `about_s`, which
    /// stays at the same place on screen.
    pub fn zoomed(self, factor: f64, about_s: f64) -> Self {
        let factor = if factor.is_finite() && factor > 0.0 { factor } else { 1.0 };
        let about = if about_s.is_finite() { about_s } else { (self.start_s + self.end_s) / 2.0 };
        // At the narrowest, a zoom in must not drift the view.
        if factor < 1.0 && self.span_s() <= MIN_SPAN_S * (1.0 + 1e-9) {
            return self;
        }
        TimeWindow::new(about - (about - self.start_s) * factor, about + (self.end_s - about) * factor)
    }

    /// Moved later by `by_s` (earlier when negative).
    pub fn panned(self, by_s: f64) -> Self {
        if !by_s.is_finite() {
            return self;
        }
        TimeWindow { start_s: self.start_s + by_s, end_s: self.end_s + by_s }
    }

    /// The same span, moved so `at_s` is in its middle.
    pub fn centred_on(self, at_s: f64) -> Self {
        self.panned(at_s - (self.start_s + self.end_s) / 2.0)
    }

    /// The time at `x` on a plot spanning `left..left + width` pixels.
    pub fn time_at(&self, x: f32, left: f32, width: f32) -> f64 {
        self.start_s + f64::from((x - left) / width.max(1.0)) * self.span_s()
    }

    /// Seconds per pixel on a plot `width` pixels wide.
    pub fn per_pixel(&self, width: f32) -> f64 {
        self.span_s() / f64::from(width.max(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: TimeWindow, b: (f64, f64)) -> bool {
        (a.start_s - b.0).abs() < 1e-9 && (a.end_s - b.1).abs() < 1e-9
    }

    #[test]
    fn zooming_keeps_the_point_it_zooms_about_in_place() {
        let w = TimeWindow::new(0.0, 10.0);
        let z = w.zoomed(0.5, 8.0);
        assert!(close(z, (4.0, 9.0)), "{z:?}");
        // The point keeps its share of the width: 80 % from the left.
        assert!(((8.0 - z.start_s) / z.span_s() - 0.8).abs() < 1e-9);
        assert!(close(z.zoomed(2.0, 8.0), (0.0, 10.0)));
        // A zoom in and a zoom out by the key factors come back.
        let back = w.zoomed(KEY_ZOOM, 3.0).zoomed(1.0 / KEY_ZOOM, 3.0);
        assert!(close(back, (0.0, 10.0)), "{back:?}");
    }

    #[test]
    fn the_narrowest_span_holds_and_bad_input_changes_nothing() {
        let tiny = TimeWindow::new(5.0, 5.0);
        assert!((tiny.span_s() - MIN_SPAN_S).abs() < 1e-12 && tiny.contains(5.0));
        assert_eq!(tiny.zoomed(0.5, 5.0), tiny);
        let w = TimeWindow::new(2.0, 1.0);
        assert!(close(w, (1.0, 2.0)));
        assert_eq!(w.zoomed(f64::NAN, 1.5), w);
        assert_eq!(w.zoomed(-1.0, 1.5), w);
        assert_eq!(w.panned(f64::INFINITY), w);
        assert!(close(TimeWindow::new(f64::NAN, 3.0), (0.0, 1.0)));
    }

    #[test]
    fn panning_and_centring_keep_the_span_and_pixels_map_to_times() {
        let w = TimeWindow::new(10.0, 20.0);
        assert!(close(w.panned(-2.5), (7.5, 17.5)));
        assert!(close(w.centred_on(100.0), (95.0, 105.0)));
        assert!((w.time_at(150.0, 100.0, 200.0) - 12.5).abs() < 1e-9);
        assert!((w.per_pixel(1000.0) - 0.01).abs() < 1e-12);
    }
}
