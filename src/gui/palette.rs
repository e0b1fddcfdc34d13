//! What the lanes' marks look like, and the legend that says so. Colours
//! come from the Okabe–Ito set (told apart by the common colour-blindness
//! types), and no two marks differ by colour alone: each timer has its own
//! line style as well as its own hue, events have their own shapes
//! (cross, plus, diamond, triangles, star, square, a hollow circle) and event
//! ticks their own heights and rows, so the lanes also read in grey.

use egui::{Color32, Painter, Pos2, Rect, RichText, Shape, Stroke, Ui, Visuals, pos2, vec2};
use egui_plot::{LineStyle, MarkerShape};

use crate::core::category::TimerKind;
use crate::core::event::Outcome;
use crate::diagnosis::Severity;

/// Every colour the app draws with besides egui's own, for one theme. A
/// colour drawn as text (labels on the lanes, outcomes, verdicts) reads at
/// WCAG AA (4.5:1) against the theme's panels and plots; one drawn as a
/// line, a mark or a cell reads at 3:1 (WCAG's non-text contrast).
#[derive(Debug, Clone, PartialEq)]
pub struct Palette {
    /// Cumulative bytes.
    pub bytes: Color32,
    /// Content, reasoning and tool-call events.
    pub output: Color32,
    /// Keep-alives.
    pub keepalive: Color32,
    /// Lifecycle events.
    pub lifecycle: Color32,
    /// A backoff sleep's shading.
    pub sleep: Color32,
    /// A backoff sleep's text and edge.
    pub sleep_edge: Color32,
    /// A timer that fired.
    pub fired: Color32,
    /// A failover hop.
    pub hop: Color32,
    /// An attempt's start.
    pub attempt: Color32,
    /// A rate-limit bucket running low.
    pub low_bucket: Color32,
    /// Output arriving all at once.
    pub burst: Color32,
    /// A replay's cursor.
    pub cursor: Color32,
    /// Each timer's line and label, in [`TimerKind::ALL`]'s order.
    timers: [Color32; 7],
    /// A stream that completed, a verdict that is fine, a replay that is
    /// faithful, a budget that fits.
    pub ok: Color32,
    /// A stream that finished by partial recovery.
    pub partial: Color32,
    /// A stream, or a verdict, that failed.
    pub failed: Color32,
    /// A stream that was cancelled.
    pub cancelled: Color32,
    /// A stream still going.
    pub running: Color32,
    /// A verdict worth knowing about.
    pub notice: Color32,
    /// A verdict of a failure recovered from; a replay that is approximate.
    pub recovered: Color32,
    /// A verdict of a partial answer.
    pub partial_verdict: Color32,
    /// A verdict decided while our own runtime lagged.
    pub untrusted: Color32,
    /// The overview's cells, least telling first (see [`super::overview::Heat`]):
    /// waiting, data, backoff, failover, timer fired, a failed stream's time,
    /// the failure itself.
    pub heat: [Color32; 7],
    /// The budget chart's inner layers.
    pub budget_inner: Color32,
    /// What a budget chart's layer adds.
    pub budget_added: Color32,
}

/// The dark theme's colours: the Okabe–Ito set, lightened where a label
/// needs it.
pub const DARK: Palette = Palette {
    bytes: Color32::from_rgb(86, 180, 233),
    output: Color32::from_rgb(0, 158, 115),
    keepalive: Color32::from_rgb(150, 150, 150),
    lifecycle: Color32::from_rgb(170, 170, 235),
    sleep: Color32::from_rgba_premultiplied(48, 46, 13, 50),
    sleep_edge: Color32::from_rgb(240, 228, 66),
    fired: Color32::from_rgb(255, 60, 60),
    hop: Color32::from_rgb(190, 120, 255),
    attempt: Color32::from_rgb(170, 170, 170),
    low_bucket: Color32::from_rgb(255, 200, 0),
    burst: Color32::from_rgb(0, 200, 150),
    cursor: Color32::from_rgb(255, 255, 255),
    timers: [
        Color32::from_rgb(120, 200, 200),
        Color32::from_rgb(230, 159, 0),
        Color32::from_rgb(230, 110, 30),
        Color32::from_rgb(204, 121, 167),
        Color32::from_rgb(120, 150, 255),
        Color32::from_rgb(235, 235, 235),
        Color32::from_rgb(150, 150, 150),
    ],
    ok: Color32::from_rgb(80, 200, 120),
    partial: Color32::from_rgb(240, 200, 60),
    failed: Color32::from_rgb(255, 80, 80),
    cancelled: Color32::from_rgb(160, 160, 160),
    running: Color32::from_rgb(90, 160, 255),
    notice: Color32::from_rgb(110, 170, 255),
    recovered: Color32::from_rgb(240, 180, 60),
    partial_verdict: Color32::from_rgb(255, 140, 50),
    untrusted: Color32::from_rgb(200, 130, 255),
    heat: [
        Color32::from_gray(70),
        Color32::from_rgb(65, 135, 175),
        Color32::from_rgb(240, 228, 66),
        Color32::from_rgb(190, 120, 255),
        Color32::from_rgb(255, 60, 60),
        Color32::from_rgb(205, 65, 65),
        Color32::from_rgb(255, 255, 255),
    ],
    budget_inner: Color32::from_rgb(90, 120, 170),
    budget_added: Color32::from_rgb(240, 160, 60),
};

/// The light theme's colours: the same hues, darkened until they read on
/// white.
pub const LIGHT: Palette = Palette {
    bytes: Color32::from_rgb(0, 114, 178),
    output: Color32::from_rgb(0, 140, 100),
    keepalive: Color32::from_rgb(120, 120, 120),
    lifecycle: Color32::from_rgb(110, 110, 200),
    sleep: Color32::from_rgba_premultiplied(60, 57, 16, 60),
    sleep_edge: Color32::from_rgb(120, 95, 0),
    fired: Color32::from_rgb(200, 0, 0),
    hop: Color32::from_rgb(130, 60, 200),
    attempt: Color32::from_rgb(120, 120, 120),
    low_bucket: Color32::from_rgb(170, 120, 0),
    burst: Color32::from_rgb(0, 130, 95),
    cursor: Color32::from_rgb(20, 20, 20),
    timers: [
        Color32::from_rgb(0, 120, 120),
        Color32::from_rgb(160, 90, 0),
        Color32::from_rgb(190, 70, 0),
        Color32::from_rgb(170, 60, 130),
        Color32::from_rgb(0, 90, 160),
        Color32::from_rgb(40, 40, 40),
        Color32::from_rgb(100, 100, 100),
    ],
    ok: Color32::from_rgb(0, 130, 60),
    partial: Color32::from_rgb(150, 100, 0),
    failed: Color32::from_rgb(200, 0, 0),
    cancelled: Color32::from_rgb(110, 110, 110),
    running: Color32::from_rgb(0, 90, 200),
    notice: Color32::from_rgb(0, 90, 200),
    recovered: Color32::from_rgb(150, 100, 0),
    partial_verdict: Color32::from_rgb(190, 80, 0),
    untrusted: Color32::from_rgb(130, 60, 200),
    heat: [
        Color32::from_gray(215),
        Color32::from_rgb(120, 180, 220),
        Color32::from_rgb(200, 170, 0),
        Color32::from_rgb(130, 60, 200),
        Color32::from_rgb(200, 0, 0),
        Color32::from_rgb(220, 80, 80),
        Color32::from_rgb(90, 0, 0),
    ],
    budget_inner: Color32::from_rgb(70, 100, 150),
    budget_added: Color32::from_rgb(190, 100, 0),
};

/// The colours of the theme `visuals` belong to.
pub fn of(visuals: &Visuals) -> &'static Palette {
    if visuals.dark_mode { &DARK } else { &LIGHT }
}

impl Palette {
    /// How a timer's line is drawn: its colour and its stroke pattern.
    pub fn timer(&self, kind: TimerKind) -> (Color32, LineStyle) {
        let colour = self.timers[TimerKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)];
        let style = match kind {
            TimerKind::Connect => LineStyle::Dashed { length: 3.0 },
            TimerKind::Ttfb => LineStyle::Dashed { length: 8.0 },
            TimerKind::Idle => LineStyle::Solid,
            TimerKind::DataStall => LineStyle::Dotted { spacing: 4.0 },
            // Long dashes: the one line that is a rate.
            TimerKind::MinRate => LineStyle::Dashed { length: 20.0 },
            TimerKind::Total => LineStyle::Dashed { length: 14.0 },
            TimerKind::Deadline => LineStyle::Dotted { spacing: 9.0 },
        };
        (colour, style)
    }

    /// The colour of an outcome (`None`: still running).
    pub fn outcome(&self, outcome: Option<Outcome>) -> Color32 {
        match outcome {
            Some(Outcome::Ok) => self.ok,
            Some(Outcome::Partial) => self.partial,
            Some(Outcome::Failed) => self.failed,
            Some(Outcome::Cancelled) => self.cancelled,
            None => self.running,
        }
    }

    /// The colour of a verdict's severity.
    pub fn severity(&self, severity: Severity) -> Color32 {
        match severity {
            Severity::Ok => self.ok,
            Severity::Notice => self.notice,
            Severity::Recovered => self.recovered,
            Severity::Partial => self.partial_verdict,
            Severity::Failed => self.failed,
        }
    }

    /// An event tick's colour and shape.
    pub fn ticks(&self) -> [(Color32, Tick); 3] {
        [(self.output, OUTPUT_TICK), (self.lifecycle, LIFECYCLE_TICK), (self.keepalive, KEEPALIVE_TICK)]
    }
}

/// Every timer, in the legend's order.
pub const TIMERS: [TimerKind; 7] = TimerKind::ALL;

/// The marker shapes of point events, shared by the lanes and the legend.
pub mod shape {
    use egui_plot::MarkerShape;
    /// A timer fired.
    pub const FIRED: MarkerShape = MarkerShape::Cross;
    /// A timer came due while our runtime was late and was held (the
    /// fired cross turned upright: not acted on).
    pub const HELD: MarkerShape = MarkerShape::Plus;
    /// A failover hop.
    pub const HOP: MarkerShape = MarkerShape::Diamond;
    /// A bucket running low.
    pub const LOW_BUCKET: MarkerShape = MarkerShape::Down;
    /// A burst.
    pub const BURST: MarkerShape = MarkerShape::Asterisk;
    /// The connection cut before the stream was done.
    pub const CUT: MarkerShape = MarkerShape::Square;
    /// The observed agent disconnected.
    pub const AGENT_GONE: MarkerShape = MarkerShape::Left;
    /// One of our timers would have fired (drawn hollow, in the timer's
    /// colour).
    pub const WOULD_FIRE: MarkerShape = MarkerShape::Circle;
}

/// How an event tick is drawn: a bar this tall (pixels), its middle this
/// far above the foot of the lane (its colour is the theme's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    /// Its height.
    pub height: f32,
    /// Its middle's height above the lane's foot.
    pub above: f32,
}

/// Content, reasoning and tool-call events: tall, top row.
pub const OUTPUT_TICK: Tick = Tick { height: 5.0, above: 9.0 };
/// Lifecycle events: middling, middle row.
pub const LIFECYCLE_TICK: Tick = Tick { height: 3.0, above: 4.5 };
/// Keep-alives: short, bottom row.
pub const KEEPALIVE_TICK: Tick = Tick { height: 2.0, above: 1.5 };

/// A legend entry's sample.
#[derive(Debug, Clone, Copy)]
enum Sample {
    Line(Color32, LineStyle, f32),
    Marker(Color32, MarkerShape),
    /// A timer's climb in its colour and stroke, to a hollow mark.
    WouldFire(Color32, LineStyle),
    Bar(Color32, Tick),
    Area(Color32, Color32),
    Rule(Color32),
}

/// The legend: a sample of each mark and what it means, in the body text
/// size.
pub fn legend(ui: &mut Ui) {
    let colours = of(ui.visuals());
    egui::CollapsingHeader::new("Legend").default_open(true).show(ui, |ui| {
        ui.horizontal_wrapped(|ui| {
            let [output, lifecycle, keepalive] = colours.ticks();
            let idle = colours.timer(TimerKind::Idle);
            let entries = [
                (Sample::Line(colours.bytes, LineStyle::Solid, 1.5), "bytes received"),
                (Sample::Bar(output.0, output.1), "output event"),
                (Sample::Bar(lifecycle.0, lifecycle.1), "lifecycle event"),
                (Sample::Bar(keepalive.0, keepalive.1), "keep-alive"),
                (Sample::Marker(colours.burst, shape::BURST), "burst (output all at once)"),
                (Sample::Rule(colours.attempt), "attempt start"),
                (Sample::Area(colours.sleep, colours.sleep_edge), "backoff sleep"),
                (Sample::Marker(colours.hop, shape::HOP), "failover"),
                (Sample::Marker(colours.low_bucket, shape::LOW_BUCKET), "rate limit low"),
                (Sample::Marker(colours.fired, shape::FIRED), "timer fired"),
                (Sample::Marker(colours.untrusted, shape::HELD), "timer held: client late (not acted on)"),
                (Sample::Marker(colours.fired, shape::CUT), "connection cut (after its silence)"),
                (Sample::WouldFire(idle.0, idle.1), "our timer would fire (observed: not acted on)"),
                (Sample::Marker(colours.cancelled, shape::AGENT_GONE), "agent gone (observed)"),
            ];
            for (sample, text) in entries {
                entry(ui, sample, text);
            }
        });
        ui.horizontal_wrapped(|ui| {
            ui.label("Timers:");
            for kind in TIMERS {
                let (colour, style) = colours.timer(kind);
                entry(ui, Sample::Line(colour, style, 1.5), &format!("{kind}"));
            }
        });
        ui.label(
            "A timer's line climbs from the lane's foot (armed or reset) to its top, where it fires; \
             its label gives its threshold. Where it came due while our own runtime was late (guard mode), \
             it is held instead: it starts again from the foot, under an upright cross. On a watched call \
             (observe@…) our timers only watch: where one would have fired, its climb ends in a hollow mark in \
             its colour and stroke; under the guard (observe --guard, guard@…) they act, as in a run. Bytes \
             are scaled per lane or to the largest lane (Bytes scale); hovering a lane gives the bytes received \
             by then.",
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
        Sample::Line(colour, style, width) => line(painter, [left, right], colour, style, width),
        Sample::Marker(colour, shape) => marker(painter, c, 5.0, colour, shape),
        Sample::WouldFire(colour, style) => {
            let top = pos2(rect.right() - 5.0, rect.top() + 4.0);
            line(painter, [pos2(rect.left() + 1.0, rect.bottom() - 1.0), top], colour, style, 1.5);
            marker(painter, top, 3.5, colour, shape::WOULD_FIRE);
        }
        Sample::Bar(colour, tick) => {
            let foot = rect.bottom();
            for dx in [-6.0, -2.0, 2.0, 6.0] {
                let centre = pos2(c.x + dx, foot - tick.above * 0.8);
                painter.rect_filled(Rect::from_center_size(centre, vec2(1.5, tick.height)), 0.0, colour);
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

/// A line in `style`, as egui_plot draws one, for the legend (its dashes
/// and dots shortened to fit a sample).
fn line(painter: &Painter, ends: [Pos2; 2], colour: Color32, style: LineStyle, width: f32) {
    let stroke = Stroke::new(width, colour);
    match style {
        LineStyle::Solid => {
            painter.line_segment(ends, stroke);
        }
        LineStyle::Dashed { length } => {
            painter.extend(Shape::dashed_line(&ends, stroke, length.min(8.0), length.min(8.0) / 2.0));
        }
        LineStyle::Dotted { spacing } => painter.extend(Shape::dotted_line(&ends, colour, spacing.min(6.0), width)),
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
        MarkerShape::Plus => {
            painter.line_segment([at(-1.0, 0.0), at(1.0, 0.0)], stroke);
            painter.line_segment([at(0.0, -1.0), at(0.0, 1.0)], stroke);
        }
        MarkerShape::Square => {
            painter.rect_filled(egui::Rect::from_two_pos(at(-0.8, -0.8), at(0.8, 0.8)), 0.0, colour);
        }
        MarkerShape::Left => {
            let points = vec![at(-1.0, 0.0), at(0.5, -0.87), at(0.5, 0.87)];
            painter.add(Shape::convex_polygon(points, colour, Stroke::NONE));
        }
        // Hollow, as the lanes draw it.
        MarkerShape::Circle => {
            painter.circle_stroke(c, r, stroke);
        }
        _ => {
            for (x, y) in [(0.0, 1.0), (0.87, 0.5), (0.87, -0.5)] {
                painter.line_segment([at(-x, -y), at(x, y)], stroke);
            }
        }
    }
}

/// WCAG's relative luminance (0–1) of an opaque colour.
pub fn luminance(colour: Color32) -> f32 {
    let linear = egui::Rgba::from(colour);
    0.2126 * linear.r() + 0.7152 * linear.g() + 0.0722 * linear.b()
}

/// WCAG's contrast ratio of two opaque colours, 1 to 21.
pub fn contrast(a: Color32, b: Color32) -> f32 {
    let (a, b) = (luminance(a), luminance(b));
    (a.max(b) + 0.05) / (a.min(b) + 0.05)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_of_timers_differs_in_stroke_or_clearly_in_grey() {
        for (i, a) in TIMERS.iter().enumerate() {
            for b in &TIMERS[i + 1..] {
                let ((ca, sa), (cb, sb)) = (DARK.timer(*a), DARK.timer(*b));
                assert_ne!(ca, cb, "{a} and {b} share a colour");
                let grey_apart = contrast(ca, cb) >= 1.5;
                assert!(sa != sb || grey_apart, "{a} and {b} look alike in grey");
            }
        }
        // The three that looked alike (similar oranges) now differ in stroke.
        let styles: Vec<LineStyle> =
            [TimerKind::Ttfb, TimerKind::Idle, TimerKind::DataStall].iter().map(|k| DARK.timer(*k).1).collect();
        assert!(styles[0] != styles[1] && styles[1] != styles[2] && styles[0] != styles[2]);
    }

    /// The themes' backgrounds: panels, and plots and the overview strip.
    fn themes() -> [(&'static str, &'static Palette, [Color32; 2]); 2] {
        let (dark, light) = (Visuals::dark(), Visuals::light());
        [
            ("dark", &DARK, [dark.panel_fill, dark.extreme_bg_color]),
            ("light", &LIGHT, [light.panel_fill, light.extreme_bg_color]),
        ]
    }

    /// A translucent (premultiplied) fill over an opaque background.
    fn over(fill: Color32, background: Color32) -> Color32 {
        let a = fill.a() as f32 / 255.0;
        let mix = |f: u8, b: u8| (f as f32 + b as f32 * (1.0 - a)).round().min(255.0) as u8;
        Color32::from_rgb(mix(fill.r(), background.r()), mix(fill.g(), background.g()), mix(fill.b(), background.b()))
    }

    #[test]
    fn every_label_reads_at_wcag_aa_and_every_mark_at_three_to_one_in_both_themes() {
        for (theme, p, backgrounds) in themes() {
            let timers = TIMERS.map(|k| (format!("{k} timer"), p.timer(k).0));
            let text = [
                ("backoff", p.sleep_edge),
                ("fired", p.fired),
                ("failover", p.hop),
                ("burst", p.burst),
                ("ok", p.ok),
                ("partial", p.partial),
                ("failed", p.failed),
                ("cancelled", p.cancelled),
                ("running", p.running),
                ("notice", p.notice),
                ("recovered", p.recovered),
                ("partial verdict", p.partial_verdict),
                ("untrusted", p.untrusted),
            ]
            .map(|(name, colour)| (name.to_owned(), colour));
            let marks = [
                ("bytes", p.bytes),
                ("output", p.output),
                ("lifecycle", p.lifecycle),
                ("keep-alive", p.keepalive),
                ("attempt", p.attempt),
                ("rate limit low", p.low_bucket),
                ("cursor", p.cursor),
                ("budget inner", p.budget_inner),
                ("budget added", p.budget_added),
                ("overview: timer fired", p.heat[4]),
                ("overview: failed stream", p.heat[5]),
                ("overview: failure", p.heat[6]),
            ];
            for background in backgrounds {
                for (name, colour) in timers.iter().chain(&text) {
                    let ratio = contrast(*colour, background);
                    assert!(ratio >= 4.5, "{theme}: {name} text {colour:?} on {background:?} is {ratio:.2}:1");
                }
                for (name, colour) in marks {
                    let ratio = contrast(colour, background);
                    assert!(ratio >= 3.0, "{theme}: {name} {colour:?} on {background:?} is {ratio:.2}:1");
                }
            }
            // A backoff's label is drawn on its own shading, on a plot.
            let shaded = over(p.sleep, backgrounds[1]);
            let ratio = contrast(p.sleep_edge, shaded);
            assert!(ratio >= 4.5, "{theme}: a backoff label on its shading is {ratio:.2}:1");
            // Every overview state stands apart from the strip and from the
            // next state, and a failure from a failed stream's time.
            for heat in p.heat {
                assert!(contrast(heat, backgrounds[1]) >= 1.2, "{theme}: {heat:?} on the strip");
            }
            assert!(contrast(p.heat[5], p.heat[6]) >= 2.0, "{theme}: a failure on its stream's time");
        }
    }

    #[test]
    fn point_events_have_shapes_of_their_own_and_ticks_heights_and_rows() {
        let shapes = [
            shape::FIRED,
            shape::HELD,
            shape::HOP,
            shape::LOW_BUCKET,
            shape::BURST,
            shape::CUT,
            shape::AGENT_GONE,
            shape::WOULD_FIRE,
        ];
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
