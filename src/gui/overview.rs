//! The overview strip: every lane shown (filtered and sorted as the lanes
//! are) as one row of a streams × time heatmap over the whole run, drawn
//! above the lanes so it stays on screen however far they scroll. A cell
//! takes the most telling thing that happened in it (failed, timer fired,
//! failover, the time of a stream that failed, backoff, data, waiting), and
//! a row shared by several lanes the most telling of theirs, so with 500
//! streams the ones that failed stand out as rows of their own colour; the span the lanes show and the rows scrolled
//! into view are outlined on it, and a click jumps to the lane under the
//! pointer.
//!
//! The heatmap is an image of one texel per cell, made again only when
//! what it shows changes (and while a run goes, at most a few times a
//! second), so drawing it costs a frame one textured rectangle.

use egui::{Color32, ColorImage, Rect, Sense, TextureHandle, TextureOptions, Ui};

use super::lanes::{Lane, Timeline};
use super::palette::{self, Palette};
use super::viewport::TimeWindow;
use crate::core::event::Outcome;

/// What a cell shows, least telling first: a cell takes the largest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Heat {
    /// The stream was not going.
    Idle,
    /// Going, nothing received.
    Waiting,
    /// Bytes arrived.
    Data,
    /// A backoff sleep before a retry.
    Backoff,
    /// The stream went on to fail: all of its time, so a failed stream's
    /// row reads as failed even where its last cell is under a pixel.
    Lost,
    /// A failover hop.
    Hop,
    /// A timer fired, or the connection was cut (by a hop, or by the
    /// observed agent going): where an attempt broke.
    Fired,
    /// The stream failed here.
    Failed,
}

impl Heat {
    /// Every state drawn, in the legend's order (most telling first).
    pub const DRAWN: [Heat; 7] =
        [Heat::Failed, Heat::Lost, Heat::Fired, Heat::Hop, Heat::Backoff, Heat::Data, Heat::Waiting];

    /// Its colour in `palette`: light to dark and hue both differ between
    /// neighbours, so the strip reads in grey too.
    pub fn colour(self, palette: &Palette) -> Color32 {
        let [waiting, data, backoff, hop, fired, lost, failed] = palette.heat;
        match self {
            Heat::Idle => Color32::TRANSPARENT,
            Heat::Waiting => waiting,
            Heat::Data => data,
            Heat::Backoff => backoff,
            Heat::Lost => lost,
            Heat::Hop => hop,
            Heat::Fired => fired,
            Heat::Failed => failed,
        }
    }

    /// Its name in the legend.
    pub fn name(self) -> &'static str {
        match self {
            Heat::Idle => "not going",
            Heat::Waiting => "waiting",
            Heat::Data => "data",
            Heat::Backoff => "backoff",
            Heat::Lost => "a stream that failed",
            Heat::Hop => "failover",
            Heat::Fired => "timer fired or cut",
            Heat::Failed => "where it failed",
        }
    }
}

/// The tallest the strip gets, in pixels; more lanes than this share rows.
pub const MAX_HEIGHT: f32 = 96.0;
/// Pixels per lane while they fit.
const ROW_PIXELS: f32 = 4.0;
/// The shortest the strip gets (its legend beside it may ask for more).
const MIN_HEIGHT: f32 = 44.0;
/// While a run goes, the image is made again at most this often (seconds).
const LIVE_REFRESH_S: f64 = 0.25;

/// The cells of a heatmap, row by row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grid {
    /// Cells per row.
    pub columns: usize,
    /// Rows.
    pub rows: usize,
    /// `rows × columns` cells.
    pub cells: Vec<Heat>,
}

impl Grid {
    /// The heatmap of the lanes at `order` over `span`: `columns` wide, a
    /// row per lane (several lanes to a row when there are more than `rows`).
    pub fn of(timeline: &Timeline, order: &[usize], span: TimeWindow, columns: usize, rows: usize, now_s: f64) -> Self {
        let rows = rows.min(order.len()).max(1);
        let mut grid = Grid { columns, rows, cells: vec![Heat::Idle; columns * rows] };
        if columns == 0 {
            return grid;
        }
        for (position, &index) in order.iter().enumerate() {
            let row = position * rows / order.len().max(1);
            grid.paint_lane(row, &timeline.lanes[index], span, now_s);
        }
        grid
    }

    /// The cell at (`row`, `column`).
    pub fn at(&self, row: usize, column: usize) -> Heat {
        self.cells[row * self.columns + column]
    }

    fn paint_lane(&mut self, row: usize, lane: &Lane, span: TimeWindow, now_s: f64) {
        let columns = self.columns;
        let per = span.span_s() / columns as f64;
        let column = |at: f64| ((at - span.start_s) / per).floor().clamp(0.0, (columns - 1) as f64) as usize;
        let cells = &mut self.cells[row * columns..(row + 1) * columns];
        let mut mark = |from: usize, to: usize, heat: Heat| {
            for cell in &mut cells[from..=to.max(from)] {
                *cell = (*cell).max(heat);
            }
        };
        let end = lane.finished_s.unwrap_or(now_s.max(lane.last_s));
        mark(column(lane.started_s), column(end), Heat::Waiting);
        // Chunks sorted by time: one look per column they fall in.
        let mut last = usize::MAX;
        for point in &lane.bytes {
            let c = column(point.x);
            if c != last {
                mark(c, c, Heat::Data);
                last = c;
            }
        }
        for sleep in &lane.sleeps {
            mark(column(sleep.start_s), column(sleep.end_s), Heat::Backoff);
        }
        for hop in &lane.hops {
            mark(column(hop.at_s), column(hop.at_s), Heat::Hop);
        }
        // Our timers' would-fire marks are not drawn: the strip shows what
        // happened, and they are what our clocks would have done.
        for fired in lane.fired.iter().chain(&lane.cuts).chain(&lane.agent_gone) {
            mark(column(fired.at_s), column(fired.at_s), Heat::Fired);
        }
        if let (Some(Outcome::Failed), Some(at)) = (lane.outcome, lane.finished_s) {
            mark(column(lane.started_s), column(at), Heat::Lost);
            mark(column(at), column(at), Heat::Failed);
        }
    }

    fn image(&self, palette: &Palette) -> ColorImage {
        let pixels = self.cells.iter().map(|h| h.colour(palette)).collect();
        ColorImage::new([self.columns.max(1), self.rows], pixels)
    }
}

/// What the strip was last made from.
#[derive(Debug, Clone, PartialEq)]
struct Made {
    events: u64,
    order: Vec<usize>,
    columns: usize,
    rows: usize,
    span: (u64, u64),
    now_s: u64,
    dark: bool,
}

/// The strip and its cached image.
#[derive(Default)]
pub struct Overview {
    made: Option<(Made, f64)>,
    texture: Option<TextureHandle>,
}

impl std::fmt::Debug for Overview {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overview").field("made", &self.made.as_ref().map(|m| m.1)).finish_non_exhaustive()
    }
}

impl Clone for Overview {
    /// A copy makes its own image when first drawn.
    fn clone(&self) -> Self {
        Overview::default()
    }
}

/// What a click on the strip asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jump {
    /// The position in the lane order of the lane clicked.
    pub position: usize,
    /// The time clicked.
    pub at_s: f64,
}

/// How the strip is to be drawn this frame.
pub struct Frame<'a> {
    /// The lanes and their order.
    pub timeline: &'a Timeline,
    /// Indices of the lanes shown, in order.
    pub order: &'a [usize],
    /// The whole run.
    pub span: TimeWindow,
    /// The span the lanes show, outlined.
    pub view: TimeWindow,
    /// Positions in the order scrolled into view, outlined.
    pub rows_shown: std::ops::Range<usize>,
    /// The present, for lanes still going.
    pub now_s: f64,
    /// Whether a run goes on (the image then refreshes at a limited rate).
    pub live: bool,
}

impl Overview {
    /// The strip's height for `lanes` lanes.
    pub fn height(lanes: usize) -> f32 {
        (lanes as f32 * ROW_PIXELS).clamp(MIN_HEIGHT, MAX_HEIGHT)
    }

    /// Draws the strip in `rect`; returns the lane clicked, if one was.
    pub fn ui(&mut self, ui: &mut Ui, rect: Rect, frame: &Frame<'_>) -> Option<Jump> {
        let columns = rect.width().max(1.0) as usize;
        let rows = (rect.height().max(1.0) as usize).min(frame.order.len()).max(1);
        let made = Made {
            events: frame.timeline.event_count(),
            order: frame.order.to_vec(),
            columns,
            rows,
            span: (frame.span.start_s.to_bits(), frame.span.end_s.to_bits()),
            now_s: frame.now_s.to_bits(),
            dark: ui.visuals().dark_mode,
        };
        let time = ui.input(|i| i.time);
        let stale = match &self.made {
            None => true,
            Some((was, _))
                if was.order != made.order || was.columns != columns || was.rows != rows || was.dark != made.dark =>
            {
                true
            }
            Some((was, _)) if *was == made => false,
            // The run grew: again, but while it goes at a limited rate.
            Some((_, at)) => !frame.live || time - at >= LIVE_REFRESH_S,
        };
        if stale || self.texture.is_none() {
            let grid = Grid::of(frame.timeline, frame.order, frame.span, columns, rows, frame.now_s);
            let image = grid.image(palette::of(ui.visuals()));
            match &mut self.texture {
                Some(texture) => texture.set(image, TextureOptions::NEAREST),
                None => self.texture = Some(ui.ctx().load_texture("overview", image, TextureOptions::NEAREST)),
            }
            self.made = Some((made, time));
        }
        if frame.live {
            ui.ctx().request_repaint_after(std::time::Duration::from_secs_f64(LIVE_REFRESH_S));
        }
        let response = ui.interact(rect, ui.scope_id().with("overview"), Sense::click());
        let name = format!("Overview of {} streams", frame.order.len());
        response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Figure, true, &name));
        let painter = ui.painter().with_clip_rect(rect.intersect(ui.clip_rect()));
        painter.rect_filled(rect, 0.0, ui.visuals().extreme_bg_color);
        if let Some(texture) = &self.texture {
            let uv = Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0));
            painter.image(texture.id(), rect, uv, Color32::WHITE);
        }
        let n = frame.order.len().max(1) as f32;
        let x = |at: f64| rect.left() + ((at - frame.span.start_s) / frame.span.span_s()) as f32 * rect.width();
        let y = |position: usize| rect.top() + position as f32 / n * rect.height();
        let shown = Rect::from_x_y_ranges(
            x(frame.view.start_s).max(rect.left())..=x(frame.view.end_s).min(rect.right()),
            y(frame.rows_shown.start)..=y(frame.rows_shown.end).max(y(frame.rows_shown.start) + 1.0),
        );
        painter.rect_stroke(shown, 0.0, (1.0, ui.visuals().strong_text_color()), egui::StrokeKind::Outside);
        let under = |pos: egui::Pos2| {
            let position = (((pos.y - rect.top()) / rect.height()) * n).floor().clamp(0.0, n - 1.0) as usize;
            let at_s = frame.span.start_s + f64::from((pos.x - rect.left()) / rect.width()) * frame.span.span_s();
            Jump { position, at_s }
        };
        let hovered = response.hover_pos().map(under);
        let clicked = response.clicked().then(|| response.interact_pointer_pos()).flatten().map(under);
        if let Some(jump) = hovered {
            let lane = &frame.timeline.lanes[frame.order[jump.position]];
            let text = format!(
                "{} #{} · {} · {:.3} s\nClick to go to this lane",
                frame.timeline.label(lane),
                lane.stream,
                frame.timeline.outcome_name(lane),
                jump.at_s
            );
            response.on_hover_text_at_pointer(text);
        }
        clicked
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::category::{Category, TimerKind};
    use crate::core::event::{Event, EventKind, SleepReason};
    use crate::core::failover::Target;

    fn event(ms: u64, stream: u64, kind: EventKind) -> Event {
        Event { at: Duration::from_millis(ms), stream, attempt: 1, kind }
    }

    /// Stream 0 streams for a second and ends ok; stream 1 stalls, its idle
    /// timer fires at 0.55 s, it sleeps 0.2 s and then fails at 0.95 s
    /// (times mid-column on a 10-column grid of the first second).
    fn two() -> Timeline {
        let start = || EventKind::CallStarted { target: Target::new("sim", "m"), context_tokens: None };
        let mut events = vec![event(0, 0, start()), event(0, 1, start())];
        for ms in (150..1000).step_by(100) {
            events.push(event(ms, 0, EventKind::ChunkReceived { bytes: 10 }));
        }
        events.extend([
            event(1000, 0, EventKind::Finished { outcome: Outcome::Ok, attempts: 1, stop_reason: None }),
            event(
                500,
                1,
                EventKind::TimerFired { timer: TimerKind::Idle, after: Duration::from_millis(500), lag: None },
            ),
            event(
                500,
                1,
                EventKind::BackoffScheduled {
                    retry: 1,
                    category: Category::Timeout,
                    nominal: Duration::from_millis(200),
                    sleep: Duration::from_millis(200),
                    reason: SleepReason::Backoff,
                },
            ),
            event(950, 1, EventKind::Finished { outcome: Outcome::Failed, attempts: 2, stop_reason: None }),
        ]);
        events.sort_by_key(|e| e.at);
        Timeline::from_events("x", &events)
    }

    #[test]
    fn each_cell_shows_the_most_telling_thing_in_it() {
        let timeline = two();
        let grid = Grid::of(&timeline, &[0, 1], TimeWindow::new(0.0, 1.0), 10, 10, 1.0);
        assert_eq!((grid.rows, grid.columns), (2, 10));
        let row = |r: usize| (0..10).map(|c| grid.at(r, c)).collect::<Vec<_>>();
        assert_eq!(row(0)[0], Heat::Waiting);
        assert!(row(0)[1..].iter().all(|h| *h == Heat::Data), "{:?}", row(0));
        let stalled = row(1);
        assert_eq!(stalled[5], Heat::Fired, "{stalled:?}");
        // Its backoff, as the rest of a stream that failed, reads as failed.
        assert_eq!(stalled[6], Heat::Lost, "{stalled:?}");
        assert_eq!(stalled[9], Heat::Failed, "{stalled:?}");
        assert_eq!(stalled[3], Heat::Lost, "{stalled:?}");
    }

    /// An observed agent that went is where its attempt broke; where our
    /// timer would have fired is not drawn: it did not happen.
    #[test]
    fn an_observed_agent_going_is_a_break_and_our_would_fire_mark_is_not() {
        let events = crate::diagnosis::fixtures::agent_gone_on_a_silent_stall(0);
        let timeline = Timeline::from_events("observe", &events);
        // A column a tenth of a second: the mark at 0.41 s, the agent gone at 1.01 s.
        let grid = Grid::of(&timeline, &[0], TimeWindow::new(0.0, 1.1), 11, 1, 1.1);
        let row: Vec<Heat> = (0..11).map(|c| grid.at(0, c)).collect();
        assert_eq!(row[10], Heat::Fired, "{row:?}");
        assert!(row[..10].iter().all(|h| *h == Heat::Waiting), "{row:?}");
    }

    #[test]
    fn more_lanes_than_rows_share_rows_and_keep_the_worst() {
        let timeline = two();
        // Both lanes in one row, the stalled one second: its marks win, and
        // its failure colours the row over the other's data.
        let grid = Grid::of(&timeline, &[0, 1], TimeWindow::new(0.0, 1.0), 10, 1, 1.0);
        assert_eq!(grid.rows, 1);
        assert_eq!((grid.at(0, 5), grid.at(0, 2), grid.at(0, 9)), (Heat::Fired, Heat::Lost, Heat::Failed));
    }

    /// 500 streams on a strip 96 rows tall: the one that failed colours its
    /// shared row for its whole life, not one cell at its end.
    #[test]
    fn a_failed_stream_shows_at_500_streams_across_its_row() {
        let start = || EventKind::CallStarted { target: Target::new("sim", "m"), context_tokens: None };
        let mut events = Vec::new();
        for stream in 0..500 {
            events.push(event(0, stream, start()));
            events.push(event(500, stream, EventKind::ChunkReceived { bytes: 10 }));
            let outcome = if stream == 321 { Outcome::Failed } else { Outcome::Ok };
            events.push(event(1000, stream, EventKind::Finished { outcome, attempts: 1, stop_reason: None }));
        }
        let timeline = Timeline::from_events("x", &events);
        let order: Vec<usize> = (0..500).collect();
        let grid = Grid::of(&timeline, &order, TimeWindow::new(0.0, 1.0), 100, MAX_HEIGHT as usize, 1.0);
        let failed_row = 321 * grid.rows / 500;
        let grid = &grid;
        let row = |r: usize| (0..grid.columns).map(move |c| grid.at(r, c));
        assert!(row(failed_row).take(99).all(|h| h == Heat::Lost), "{:?}", row(failed_row).collect::<Vec<_>>());
        assert_eq!(grid.at(failed_row, 99), Heat::Failed);
        let others = (0..grid.rows).filter(|r| *r != failed_row);
        assert!(others.flat_map(row).all(|h| h < Heat::Lost));
    }

    #[test]
    fn the_heat_order_and_its_colours_tell_every_state_apart() {
        let all =
            [Heat::Idle, Heat::Waiting, Heat::Data, Heat::Backoff, Heat::Lost, Heat::Hop, Heat::Fired, Heat::Failed];
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        for palette in [&palette::DARK, &palette::LIGHT] {
            for (i, a) in all.iter().enumerate() {
                for b in &all[i + 1..] {
                    assert_ne!(a.colour(palette), b.colour(palette), "{a:?} and {b:?}");
                }
            }
        }
        // The legend names every state a cell can show.
        let mut drawn = Heat::DRAWN.to_vec();
        drawn.sort();
        assert_eq!(drawn, all[1..]);
    }
}
