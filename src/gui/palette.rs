//! What the lanes' marks look like, and the legend that says so. Colours
//! come from the Okabe–Ito set (told apart by the common colour-blindness
//! types), and no two marks differ by colour alone: each timer has its own
//! line style as well as its own hue, events have their own shapes
//! (cross, diamond, triangle, star) and event ticks their own heights and
//! rows, so the lanes also read in grey.

use egui::{Color32, Painter, Pos2, Rect, RichText, Shape, Stroke, Ui, pos2, vec2};
use egui_plot::{LineStyle, MarkerShape};

use crate::core::category::TimerKind;

/// Cumulative bytes.
pub const BYTES: Color32 = Color32::from_rgb(86, 180, 233);
/// Content, reasoning and tool-call events.
pub const OUTPUT: Color32 = Color32::from_rgb(0, 158, 115);
/// Keep-alives.
pub const KEEPALIVE: Color32 = Color32::from_rgb(150, 150, 150);
/// Lifecycle events.
pub const LIFECYCLE: Color32 = Color32::from_rgb(170, 170, 235);
/// A backoff sleep's shading.
pub const SLEEP: Color32 = Color32::from_rgba_premultiplied(48, 46, 13, 50);
/// A backoff sleep's text and edge.
pub const SLEEP_EDGE: Color32 = Color32::from_rgb(240, 228, 66);
/// A timer that fired.
pub const FIRED: Color32 = Color32::from_rgb(255, 60, 60);
/// A failover hop.
pub const HOP: Color32 = Color32::from_rgb(190, 120, 255);
/// An attempt's start.
pub const ATTEMPT: Color32 = Color32::from_rgb(170, 170, 170);
/// A rate-limit bucket running low.
pub const LOW_BUCKET: Color32 = Color32::from_rgb(255, 200, 0);
/// Output arriving all at once.
pub const BURST: Color32 = Color32::from_rgb(0, 200, 150);
/// A replay's cursor.
pub const CURSOR: Color32 = Color32::from_rgb(255, 255, 255);

/// How a timer's line is drawn: its colour and its stroke pattern.
pub fn timer_style(kind: TimerKind) -> (Color32, LineStyle) {
    match kind {
        TimerKind::Connect => (Color32::from_rgb(120, 200, 200), LineStyle::Dashed { length: 3.0 }),
        TimerKind::Ttfb => (Color32::from_rgb(230, 159, 0), LineStyle::Dashed { length: 8.0 }),
        TimerKind::Idle => (Color32::from_rgb(213, 94, 0), LineStyle::Solid),
        TimerKind::DataStall => (Color32::from_rgb(204, 121, 167), LineStyle::Dotted { spacing: 4.0 }),
        // Okabe–Ito blue, in long dashes: the one line that is a rate.
        TimerKind::MinRate => (Color32::from_rgb(0, 114, 178), LineStyle::Dashed { length: 20.0 }),
        TimerKind::Total => (Color32::from_rgb(235, 235, 235), LineStyle::Dashed { length: 14.0 }),
        TimerKind::Deadline => (Color32::from_rgb(140, 140, 140), LineStyle::Dotted { spacing: 9.0 }),
    }
}

/// Every timer, in the legend's order.
pub const TIMERS: [TimerKind; 7] = TimerKind::ALL;

/// The marker shapes of point events, shared by the lanes and the legend.
pub mod shape {
    use egui_plot::MarkerShape;
    /// A timer fired.
    pub const FIRED: MarkerShape = MarkerShape::Cross;
    /// A failover hop.
    pub const HOP: MarkerShape = MarkerShape::Diamond;
    /// A bucket running low.
    pub const LOW_BUCKET: MarkerShape = MarkerShape::Down;
    /// A burst.
    pub const BURST: MarkerShape = MarkerShape::Asterisk;
}

/// How an event tick is drawn: a bar this tall (pixels), its middle this
/// far above the foot of the lane.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    /// Its colour.
    pub colour: Color32,
    /// Its height.
    pub height: f32,
    /// Its middle's height above the lane's foot.
    pub above: f32,
}

/// Content, reasoning and tool-call events: tall, top row.
pub const OUTPUT_TICK: Tick = Tick { colour: OUTPUT, height: 5.0, above: 9.0 };
/// Lifecycle events: middling, middle row.
pub const LIFECYCLE_TICK: Tick = Tick { colour: LIFECYCLE, height: 3.0, above: 4.5 };
/// Keep-alives: short, bottom row.
pub const KEEPALIVE_TICK: Tick = Tick { colour: KEEPALIVE, height: 2.0, above: 1.5 };

/// A legend entry's sample.
#[derive(Debug, Clone, Copy)]
enum Sample {
    Line(Color32, LineStyle, f32),
    Marker(Color32, MarkerShape),
    Bar(Tick),
    Area(Color32, Color32),
    Rule(Color32),
}

/// The legend: a sample of each mark and what it means, in the body text
/// size.
pub fn legend(ui: &mut Ui) {
    egui::CollapsingHeader::new("Legend").default_open(true).show(ui, |ui| {
        ui.horizontal_wrapped(|ui| {
            let entries = [
                (Sample::Line(BYTES, LineStyle::Solid, 1.5), "bytes received".to_owned()),
                (Sample::Bar(OUTPUT_TICK), "output event".to_owned()),
                (Sample::Bar(LIFECYCLE_TICK), "lifecycle event".to_owned()),
                (Sample::Bar(KEEPALIVE_TICK), "keep-alive".to_owned()),
                (Sample::Marker(BURST, shape::BURST), "burst (output all at once)".to_owned()),
                (Sample::Rule(ATTEMPT), "attempt start".to_owned()),
                (Sample::Area(SLEEP, SLEEP_EDGE), "backoff sleep".to_owned()),
                (Sample::Marker(HOP, shape::HOP), "failover".to_owned()),
                (Sample::Marker(LOW_BUCKET, shape::LOW_BUCKET), "rate limit low".to_owned()),
                (Sample::Marker(FIRED, shape::FIRED), "timer fired".to_owned()),
            ];
            for (sample, text) in &entries {
                entry(ui, *sample, text);
            }
        });
        ui.horizontal_wrapped(|ui| {
            ui.label("Timers:");
            for kind in TIMERS {
                let (colour, style) = timer_style(kind);
                entry(ui, Sample::Line(colour, style, 1.5), &format!("{kind}"));
            }
        });
        ui.label(
            "A timer's line climbs from the lane's foot (armed or reset) to its top, where it fires; \
             its label gives its threshold. Bytes are scaled per lane or to the largest lane (Bytes scale); \
             hovering a lane gives the bytes received by then.",
        );
    });
}

fn entry(ui: &mut Ui, sample: Sample, text: &str) {
    let (rect, _) = ui.allocate_exact_size(vec2(22.0, 14.0), egui::Sense::hover());
    paint(ui.painter(), rect, sample);
    ui.label(RichText::new(text));
    ui.add_space(6.0);
}

fn paint(painter: &Painter, rect: Rect, sample: Sample) {
    let (left, right, c) = (pos2(rect.left(), rect.center().y), pos2(rect.right(), rect.center().y), rect.center());
    match sample {
        Sample::Line(colour, style, width) => {
            let stroke = Stroke::new(width, colour);
            match style {
                LineStyle::Solid => {
                    painter.line_segment([left, right], stroke);
                }
                LineStyle::Dashed { length } => {
                    let dashes = Shape::dashed_line(&[left, right], stroke, length.min(8.0), length.min(8.0) / 2.0);
                    painter.extend(dashes);
                }
                LineStyle::Dotted { spacing } => {
                    painter.extend(Shape::dotted_line(&[left, right], colour, spacing.min(6.0), width));
                }
            }
        }
        Sample::Marker(colour, shape) => marker(painter, c, 5.0, colour, shape),
        Sample::Bar(tick) => {
            let foot = rect.bottom();
            for dx in [-6.0, -2.0, 2.0, 6.0] {
                let centre = pos2(c.x + dx, foot - tick.above * 0.8);
                painter.rect_filled(Rect::from_center_size(centre, vec2(1.5, tick.height)), 0.0, tick.colour);
            }
        }
        Sample::Area(fill, edge) => {
            painter.rect_filled(rect.shrink(1.0), 0.0, fill);
            painter.rect_stroke(rect.shrink(1.0), 0.0, Stroke::new(1.0, edge), egui::StrokeKind::Inside);
        }
        Sample::Rule(colour) => {
            painter.line_segment([pos2(c.x, rect.top()), pos2(c.x, rect.bottom())], Stroke::new(1.0, colour));
        }
    }
}

/// A marker as egui_plot draws it, for the legend.
fn marker(painter: &Painter, c: Pos2, r: f32, colour: Color32, shape: MarkerShape) {
    let stroke = Stroke::new(1.5, colour);
    let at = |x: f32, y: f32| pos2(c.x + x * r, c.y + y * r);
    match shape {
        MarkerShape::Diamond => {
            let points = vec![at(0.0, -1.0), at(1.0, 0.0), at(0.0, 1.0), at(-1.0, 0.0)];
            painter.add(Shape::convex_polygon(points, colour, Stroke::NONE));
        }
        MarkerShape::Down => {
            let points = vec![at(-1.0, -0.8), at(1.0, -0.8), at(0.0, 0.9)];
            painter.add(Shape::convex_polygon(points, colour, Stroke::NONE));
        }
        MarkerShape::Cross => {
            painter.line_segment([at(-1.0, -1.0), at(1.0, 1.0)], stroke);
            painter.line_segment([at(-1.0, 1.0), at(1.0, -1.0)], stroke);
        }
        _ => {
            for (x, y) in [(0.0, 1.0), (0.87, 0.5), (0.87, -0.5)] {
                painter.line_segment([at(-x, -y), at(x, y)], stroke);
            }
        }
    }
}

/// Relative luminance (0–1) of a colour, as greyscale shows it.
pub fn luminance(colour: Color32) -> f32 {
    let [r, g, b, _] = colour.to_normalized_gamma_f32();
    0.2126 * r + 0.7152 * g + 0.0722 * b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_of_timers_differs_in_stroke_or_clearly_in_grey() {
        for (i, a) in TIMERS.iter().enumerate() {
            for b in &TIMERS[i + 1..] {
                let ((ca, sa), (cb, sb)) = (timer_style(*a), timer_style(*b));
                assert_ne!(ca, cb, "{a} and {b} share a colour");
                let grey_apart = (luminance(ca) - luminance(cb)).abs() >= 0.15;
                assert!(sa != sb || grey_apart, "{a} and {b} look alike in grey");
            }
        }
        // The three that looked alike (similar oranges) now differ in stroke.
        let styles: Vec<LineStyle> =
            [TimerKind::Ttfb, TimerKind::Idle, TimerKind::DataStall].iter().map(|k| timer_style(*k).1).collect();
        assert!(styles[0] != styles[1] && styles[1] != styles[2] && styles[0] != styles[2]);
    }

    #[test]
    fn point_events_have_shapes_of_their_own_and_ticks_heights_and_rows() {
        let shapes = [shape::FIRED, shape::HOP, shape::LOW_BUCKET, shape::BURST];
        for (i, a) in shapes.iter().enumerate() {
            assert!(!shapes[i + 1..].contains(a), "{a:?} used twice");
        }
        let ticks = [OUTPUT_TICK, LIFECYCLE_TICK, KEEPALIVE_TICK];
        for pair in ticks.windows(2) {
            let (upper, lower) = (pair[0], pair[1]);
            assert!(upper.height > lower.height, "{upper:?} {lower:?}");
            // Rows apart: the lower bar's top is below the upper bar's foot.
            assert!(lower.above + lower.height / 2.0 < upper.above - upper.height / 2.0, "{upper:?} {lower:?}");
        }
    }
}
