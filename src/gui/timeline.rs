//! Drawing a [`Timeline`]: lane controls (follow live, fit, compact, sort,
//! filter by outcome, verdict or text), a summary strip and the verdict
//! summary of the lanes shown, and one lane per stream on a shared, linked
//! time axis; a lane clicked (or reached with ↑/↓) opens its
//! [detail panel](super::detail) on the right. Only the lanes scrolled
//! into view are drawn, and each series is reduced to the plot's pixel
//! columns, so a frame's cost follows the window's size, not the run's.
//!
//! Every row (the axis and each lane) is split by [`lane_columns`], so
//! every plot spans the same pixels whatever its header holds: a time is
//! at the same x in every lane.

use egui::{Color32, Key, Modifiers, Rect, RichText, Ui, UiBuilder};
use egui_plot::{Line, MarkerShape, Plot, PlotPoint, PlotPoints, Points, Polygon, Text, VLine};
use serde::{Deserialize, Serialize};

use super::decimate;
use super::detail::{self, PanelAction};
use super::lanes::{Lane, Summary, Timeline};
use super::verdicts::{self, SummaryCache};
use crate::core::category::TimerKind;
use crate::core::event::{Outcome, StreamId};
use crate::diagnosis::{Diagnosis, VerdictKind};

/// Where the present is on a timeline's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clock {
    /// A run going on, this many seconds in.
    Live(f64),
    /// A finished run, which ended this many seconds in.
    Ended(f64),
    /// A stored run played back, its cursor this many seconds in.
    Cursor(f64),
}

impl Clock {
    /// Seconds from the run's start to the present.
    pub fn now_s(self) -> f64 {
        match self {
            Clock::Live(s) | Clock::Ended(s) | Clock::Cursor(s) => s,
        }
    }
}

/// How lanes are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SortBy {
    /// By part, then stream number (the order calls were started); by
    /// stream, then part, when the parts are a run and its what-if.
    #[default]
    Start,
    /// Failed first, then partial, cancelled, running and ok.
    Outcome,
    /// Longest first.
    Elapsed,
    /// By verdict: the most severe first (failed, partial, recovered,
    /// notice, ok), streams without one last.
    Verdict,
}

/// Which lanes are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum OutcomeFilter {
    /// Every lane.
    #[default]
    All,
    /// Lanes that did not end `ok` (failed, partial, cancelled, running).
    NotOk,
    /// Lanes with this outcome.
    Only(Outcome),
}

/// Which lanes are shown, by verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum VerdictFilter {
    /// Every lane.
    #[default]
    All,
    /// Lanes whose verdict is of this kind.
    Kind(VerdictKind),
    /// Lanes whose verdict is not trustworthy (the client was overloaded).
    Untrusted,
}

impl VerdictFilter {
    /// Whether a lane with `verdict` passes.
    pub fn passes(self, verdict: Option<&Diagnosis>) -> bool {
        match self {
            VerdictFilter::All => true,
            VerdictFilter::Kind(kind) => verdict.is_some_and(|d| d.kind == kind),
            VerdictFilter::Untrusted => verdict.is_some_and(|d| !d.trusted),
        }
    }

    /// How the filter is offered: `all verdicts`, `silent stall`.
    pub fn name(self) -> &'static str {
        match self {
            VerdictFilter::All => "all verdicts",
            VerdictFilter::Kind(kind) => kind.label(),
            VerdictFilter::Untrusted => "not trustworthy",
        }
    }
}

/// The view's options; they persist between launches.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineView {
    /// Keep the right edge of the time axis at the present while a run goes.
    pub follow_live: bool,
    /// The width of the time window while following, in seconds.
    pub window_s: f64,
    /// One line of text per lane instead of a plot.
    pub compact: bool,
    /// Lane order.
    pub sort: SortBy,
    /// Which outcomes are shown.
    pub outcome_filter: OutcomeFilter,
    /// Which verdicts are shown.
    pub verdict_filter: VerdictFilter,
    /// Lanes whose label, target or error contain this text.
    pub text_filter: String,
    #[serde(skip)]
    fit_requested: bool,
    /// The lane whose detail panel is open: (part, stream).
    #[serde(skip)]
    selected: Option<(usize, StreamId)>,
    /// Positions in the lane order drawn last frame.
    #[serde(skip)]
    rows_shown: std::ops::Range<usize>,
    /// A position the keyboard moved the selection to, to scroll into view.
    #[serde(skip)]
    scroll_to: Option<usize>,
    /// The verdict summary of the lanes shown, one per part when the parts
    /// are compared (a run and its what-if), else one for all.
    #[serde(skip)]
    verdict_summaries: Vec<SummaryCache>,
}

impl Default for TimelineView {
    fn default() -> Self {
        TimelineView {
            follow_live: true,
            window_s: 10.0,
            compact: false,
            sort: SortBy::Start,
            outcome_filter: OutcomeFilter::All,
            verdict_filter: VerdictFilter::All,
            text_filter: String::new(),
            fit_requested: true,
            selected: None,
            rows_shown: 0..0,
            scroll_to: None,
            verdict_summaries: Vec::new(),
        }
    }
}

const LANE_HEIGHT: f32 = 74.0;
const COMPACT_HEIGHT: f32 = 20.0;
const HEADER_WIDTH: f32 = 230.0;
const AXIS_HEIGHT: f32 = 26.0;

/// A row split into its header, [`HEADER_WIDTH`] wide, and its plot, which
/// starts `gap` further right and takes the rest. The split depends on
/// nothing the header holds (a long label is cut, never pushes the plot).
pub fn lane_columns(row: Rect, gap: f32) -> (Rect, Rect) {
    let split = (row.left() + HEADER_WIDTH).min(row.right());
    let header = Rect::from_min_max(row.min, egui::pos2(split, row.bottom()));
    let plot = Rect::from_min_max(egui::pos2((split + gap).min(row.right()), row.top()), row.max);
    (header, plot)
}

/// A time axis label: milliseconds when the visible span is under a
/// second, seconds otherwise, with the decimals that tell marks `step_s`
/// apart.
pub fn time_label(value_s: f64, step_s: f64, span_s: f64) -> String {
    let (scale, unit) = if span_s < 1.0 { (1000.0, "ms") } else { (1.0, "s") };
    let (value, step) = (value_s * scale, step_s * scale);
    let decimals = if step >= 1.0 || step <= 0.0 { 0 } else { (-step.log10() - 1e-9).ceil().min(6.0) as usize };
    // Rounding error must not print a mark at zero as "-0".
    let value = if value.abs() < step.abs() * 1e-6 { 0.0 } else { value };
    format!("{value:.decimals$} {unit}")
}

/// Colours, shared with the legend.
mod colour {
    use egui::Color32;
    pub const BYTES: Color32 = Color32::from_rgb(90, 160, 255);
    pub const OUTPUT: Color32 = Color32::from_rgb(80, 200, 120);
    pub const KEEPALIVE: Color32 = Color32::from_rgb(150, 150, 150);
    pub const LIFECYCLE: Color32 = Color32::from_rgb(120, 120, 220);
    pub const SLEEP: Color32 = Color32::from_rgba_premultiplied(110, 80, 10, 70);
    pub const SLEEP_TEXT: Color32 = Color32::from_rgb(240, 180, 60);
    pub const FIRED: Color32 = Color32::from_rgb(255, 70, 70);
    pub const HOP: Color32 = Color32::from_rgb(200, 110, 255);
    pub const ATTEMPT: Color32 = Color32::from_rgb(170, 170, 170);
    pub const LOW_BUCKET: Color32 = Color32::from_rgb(255, 220, 0);
    pub const CURSOR: Color32 = Color32::from_rgb(255, 255, 255);
}

fn timer_colour(kind: TimerKind) -> Color32 {
    match kind {
        TimerKind::Connect => Color32::from_rgb(120, 200, 200),
        TimerKind::Ttfb => Color32::from_rgb(255, 200, 80),
        TimerKind::Idle => Color32::from_rgb(255, 130, 60),
        TimerKind::DataStall => Color32::from_rgb(230, 90, 160),
        TimerKind::Total => Color32::from_rgb(160, 160, 255),
        TimerKind::Deadline => Color32::from_rgb(255, 255, 255),
    }
}

/// The colour of an outcome (`None`: still running).
pub fn outcome_colour(outcome: Option<Outcome>) -> Color32 {
    match outcome {
        Some(Outcome::Ok) => Color32::from_rgb(80, 200, 120),
        Some(Outcome::Partial) => Color32::from_rgb(240, 200, 60),
        Some(Outcome::Failed) => Color32::from_rgb(255, 80, 80),
        Some(Outcome::Cancelled) => Color32::from_rgb(160, 160, 160),
        None => Color32::from_rgb(90, 160, 255),
    }
}

/// An outcome's name (`running` for none).
pub fn outcome_name(outcome: Option<Outcome>) -> &'static str {
    outcome.map_or("running", Outcome::name)
}

/// The summary strip's text.
pub fn summary_text(summary: &Summary) -> String {
    let mut text = format!(
        "{} ok · {} partial · {} failed · {} cancelled · {} running",
        summary.ok, summary.partial, summary.failed, summary.cancelled, summary.running
    );
    let ms = |s: Option<f64>| s.map_or_else(|| "-".to_owned(), |s| format!("{:.0} ms", s * 1000.0));
    text.push_str(&format!("   p50 {}  p99 {}", ms(summary.p50_s), ms(summary.p99_s)));
    if summary.retries.is_empty() {
        text.push_str("   no retries");
    } else {
        let retries: Vec<String> = summary.retries.iter().map(|(c, n)| format!("{c} {n}")).collect();
        text.push_str(&format!("   retries: {}", retries.join(", ")));
    }
    text
}

impl TimelineView {
    /// Draws the timeline as of `clock`; a replay's cursor is drawn across
    /// every lane. A selected lane's detail panel opens on the right.
    pub fn ui(&mut self, ui: &mut Ui, timeline: &Timeline, clock: Clock) {
        let (now_s, live) = (clock.now_s(), matches!(clock, Clock::Live(_)));
        let cursor = match clock {
            Clock::Cursor(s) => Some(s),
            Clock::Live(_) | Clock::Ended(_) => None,
        };
        self.controls(ui, timeline, live);
        let order = self.visible_lanes(timeline, now_s);
        ui.label(RichText::new(summary_text(&timeline.summary_of(order.iter().copied()))).strong());
        self.verdict_summary(ui, timeline, &order);
        legend(ui);
        self.keys(ui, timeline, &order);
        if let Some(lane) = self.selected_lane(timeline) {
            let panel = egui::Panel::right("lane-detail").resizable(true).default_size(480.0).min_size(300.0);
            if panel.show(ui, |ui| detail::ui(ui, timeline, lane, now_s)).inner == PanelAction::Close {
                self.selected = None;
            }
        }
        if order.is_empty() {
            ui.label(if timeline.lanes.is_empty() { "No streams yet." } else { "No lane matches the filter." });
            return;
        }
        let range = self.x_range(timeline, now_s, live);
        let link = egui::Id::unique("timeline-x");
        // The lanes' scroll area may keep room for its bar; the axis above
        // it must be exactly as wide as the rows below.
        let width = ui.available_width() - ui.spacing().scroll.allocated_width();
        if !self.compact {
            self.axis(ui, link, range, width, cursor);
        }
        let row_height = if self.compact { COMPACT_HEIGHT } else { LANE_HEIGHT };
        let mut scroll = egui::ScrollArea::vertical().auto_shrink([false, false]);
        if let Some(at) = self.scroll_to.take().filter(|at| !self.rows_shown.contains(at)) {
            scroll = scroll.vertical_scroll_offset(at as f32 * (row_height + ui.spacing().item_spacing.y));
        }
        let mut clicked = None;
        scroll.show_rows(ui, row_height, order.len(), |ui, rows| {
            self.rows_shown = rows.clone();
            for &index in &order[rows] {
                let lane = &timeline.lanes[index];
                let selected = self.selected == Some((lane.part, lane.stream));
                let picked = if self.compact {
                    let row = ui.horizontal(|ui| lane_header(ui, timeline, lane, now_s, false)).response;
                    pick(ui, row.rect, timeline, lane, selected)
                } else {
                    let row = LaneRow { link, range, width, now_s, cursor, selected };
                    self.lane(ui, timeline, lane, &row)
                };
                if picked {
                    clicked = Some((lane.part, lane.stream));
                }
            }
        });
        if clicked.is_some() {
            self.selected = clicked;
        }
    }

    /// The run-level verdict summary of the lanes in `order`; a click on a
    /// verdict's line shows only its lanes.
    fn verdict_summary(&mut self, ui: &mut Ui, timeline: &Timeline, order: &[usize]) {
        let parts: Vec<Option<usize>> =
            if timeline.parts_compared { (0..timeline.parts.len()).map(Some).collect() } else { vec![None] };
        self.verdict_summaries.resize_with(parts.len(), SummaryCache::default);
        let mut picked = None;
        for (cache, part) in self.verdict_summaries.iter_mut().zip(parts) {
            let shown = order
                .iter()
                .map(|&i| &timeline.lanes[i])
                .filter(|lane| part.is_none_or(|p| lane.part == p))
                .filter_map(|lane| timeline.verdict(lane).map(|d| (lane.stream, d.clone())))
                .collect();
            let title = part.and_then(|p| timeline.parts.get(p)).map(|p| p.label.as_str());
            picked = verdicts::summary_ui(ui, title, cache.of(shown)).or(picked);
        }
        if let Some(kind) = picked {
            self.verdict_filter = VerdictFilter::Kind(kind);
        }
    }

    /// The lane whose detail panel is open, if it is in `timeline` (a
    /// replay's cursor may be before its stream started).
    pub fn selected_lane<'a>(&self, timeline: &'a Timeline) -> Option<&'a Lane> {
        let (part, stream) = self.selected?;
        timeline.lanes.iter().find(|l| l.part == part && l.stream == stream)
    }

    /// With a lane selected, ↑ and ↓ select the lane above or below among
    /// those shown, and Esc closes the panel; not while text is edited.
    fn keys(&mut self, ui: &mut Ui, timeline: &Timeline, order: &[usize]) {
        if self.selected.is_none() || ui.ctx().text_edit_focused() {
            return;
        }
        let (up, down, close) = ui.input_mut(|i| {
            (
                i.consume_key(Modifiers::NONE, Key::ArrowUp),
                i.consume_key(Modifiers::NONE, Key::ArrowDown),
                i.consume_key(Modifiers::NONE, Key::Escape),
            )
        });
        if close {
            self.selected = None;
            return;
        }
        let key = |i: usize| (timeline.lanes[i].part, timeline.lanes[i].stream);
        let at = order.iter().position(|&i| Some(key(i)) == self.selected);
        let next = match (at, up, down) {
            (Some(at), true, false) => at.checked_sub(1),
            (Some(at), false, true) => Some(at + 1).filter(|&n| n < order.len()),
            (None, true, _) | (None, _, true) => (!order.is_empty()).then_some(0),
            _ => None,
        };
        if let Some(next) = next {
            self.selected = Some(key(order[next]));
            self.scroll_to = Some(next);
        }
    }

    fn controls(&mut self, ui: &mut Ui, timeline: &Timeline, live: bool) {
        ui.horizontal(|ui| {
            ui.add_enabled(live, egui::Checkbox::new(&mut self.follow_live, "Follow live"));
            if ui.button("Fit").on_hover_text("Show the whole run").clicked() {
                self.fit();
            }
            ui.checkbox(&mut self.compact, "Compact lanes");
            ui.separator();
            egui::ComboBox::from_label("Sort")
                .selected_text(match self.sort {
                    SortBy::Start => "start",
                    SortBy::Outcome => "outcome",
                    SortBy::Elapsed => "elapsed",
                    SortBy::Verdict => "verdict",
                })
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut self.sort, SortBy::Start, "start");
                    ui.selectable_value(&mut self.sort, SortBy::Outcome, "outcome");
                    ui.selectable_value(&mut self.sort, SortBy::Elapsed, "elapsed");
                    ui.selectable_value(&mut self.sort, SortBy::Verdict, "verdict");
                });
            ui.separator();
            egui::ComboBox::from_label("Show").selected_text(filter_name(self.outcome_filter)).show_ui(ui, |ui| {
                for filter in [
                    OutcomeFilter::All,
                    OutcomeFilter::NotOk,
                    OutcomeFilter::Only(Outcome::Ok),
                    OutcomeFilter::Only(Outcome::Partial),
                    OutcomeFilter::Only(Outcome::Failed),
                    OutcomeFilter::Only(Outcome::Cancelled),
                ] {
                    ui.selectable_value(&mut self.outcome_filter, filter, filter_name(filter));
                }
            });
            let verdicts = egui::ComboBox::from_label("Verdict").selected_text(self.verdict_filter.name());
            verdicts.show_ui(ui, |ui| {
                // Only the kinds this timeline holds, with their counts.
                let mut kinds = std::collections::BTreeMap::new();
                let mut untrusted = 0;
                for verdict in timeline.lanes.iter().filter_map(|lane| timeline.verdict(lane)) {
                    *kinds.entry(verdict.kind).or_insert(0) += 1;
                    untrusted += usize::from(!verdict.trusted);
                }
                ui.selectable_value(&mut self.verdict_filter, VerdictFilter::All, VerdictFilter::All.name());
                let untrusted_name = format!("{} ({untrusted})", VerdictFilter::Untrusted.name());
                ui.selectable_value(&mut self.verdict_filter, VerdictFilter::Untrusted, untrusted_name);
                if let VerdictFilter::Kind(kind) = self.verdict_filter {
                    kinds.entry(kind).or_insert(0);
                }
                for (kind, n) in kinds {
                    let filter = VerdictFilter::Kind(kind);
                    ui.selectable_value(&mut self.verdict_filter, filter, format!("{} ({n})", kind.label()));
                }
            });
            let label = ui.label("Filter lanes");
            ui.add(egui::TextEdit::singleline(&mut self.text_filter).desired_width(140.0)).labelled_by(label.id);
        });
    }

    /// Shows the whole timeline on the next frame and stops following.
    pub fn fit(&mut self) {
        self.fit_requested = true;
        self.follow_live = false;
    }

    /// Indices of the lanes to draw, filtered and in order.
    pub fn visible_lanes(&self, timeline: &Timeline, now_s: f64) -> Vec<usize> {
        let needle = self.text_filter.to_lowercase();
        let mut order: Vec<usize> = (0..timeline.lanes.len())
            .filter(|&i| {
                let lane = &timeline.lanes[i];
                let outcome_ok = match self.outcome_filter {
                    OutcomeFilter::All => true,
                    OutcomeFilter::NotOk => lane.outcome != Some(Outcome::Ok),
                    OutcomeFilter::Only(o) => lane.outcome == Some(o),
                };
                let verdict = timeline.verdict(lane).map(|d| &**d);
                outcome_ok
                    && self.verdict_filter.passes(verdict)
                    && (needle.is_empty()
                        || timeline.label(lane).to_lowercase().contains(&needle)
                        || lane.target.to_lowercase().contains(&needle)
                        || lane.last_error.as_deref().is_some_and(|e| e.to_lowercase().contains(&needle))
                        || verdict.is_some_and(|d| d.kind.label().contains(&needle)))
            })
            .collect();
        match self.sort {
            SortBy::Start if timeline.parts_compared => {
                order.sort_by_key(|&i| (timeline.lanes[i].stream, timeline.lanes[i].part));
            }
            SortBy::Start => order.sort_by_key(|&i| (timeline.lanes[i].part, timeline.lanes[i].stream)),
            SortBy::Outcome => order.sort_by_key(|&i| outcome_rank(timeline.lanes[i].outcome)),
            SortBy::Elapsed => order
                .sort_by(|&a, &b| timeline.lanes[b].elapsed_s(now_s).total_cmp(&timeline.lanes[a].elapsed_s(now_s))),
            SortBy::Verdict => {
                let worst_first =
                    |i: usize| std::cmp::Reverse(timeline.verdict(&timeline.lanes[i]).map(|d| d.severity));
                order.sort_by_key(|&i| worst_first(i));
            }
        }
        order
    }

    /// The time range to show this frame, or `None` to leave the linked
    /// axis where the user put it.
    fn x_range(&mut self, timeline: &Timeline, now_s: f64, live: bool) -> Option<(f64, f64)> {
        if live && self.follow_live {
            let end = now_s.max(0.1);
            return Some(((end - self.window_s).max(0.0), end + self.window_s * 0.02));
        }
        if std::mem::take(&mut self.fit_requested) {
            let end = timeline.end_s().max(now_s).max(0.1);
            return Some((0.0, end * 1.02));
        }
        None
    }

    /// The shared time axis above the lanes.
    fn axis(&mut self, ui: &mut Ui, link: egui::Id, range: Option<(f64, f64)>, width: f32, cursor: Option<f64>) {
        let (row, _) = ui.allocate_exact_size(egui::vec2(width, AXIS_HEIGHT), egui::Sense::hover());
        let (_, area) = lane_columns(row, ui.spacing().item_spacing.x);
        let mut child = ui.new_child(UiBuilder::new().max_rect(area).id_salt("axis"));
        let response = Plot::new(link.with("axis"))
            .width(area.width())
            .height(area.height())
            .link_axis(link, [true, false])
            .show_axes([true, false])
            .show_grid([false, false])
            .show_background(false)
            .allow_zoom([true, false])
            .allow_drag([true, false])
            .allow_scroll(false)
            .show_x(false)
            .show_y(false)
            .x_axis_formatter(|mark, range| time_label(mark.value, mark.step_size, range.end() - range.start()))
            .show(&mut child, |plot| {
                if let Some((a, b)) = range {
                    plot.set_plot_bounds_x(a..=b);
                }
                plot.set_plot_bounds_y(0.0..=1.0);
                self.note_user_zoom(plot);
                if let Some(at) = cursor {
                    plot.vline(cursor_line(at));
                }
            });
        let label = || egui::WidgetInfo::labeled(egui::Role::Figure, true, "Time axis");
        response.response.widget_info(label);
    }

    fn note_user_zoom(&mut self, plot: &egui_plot::PlotUi<'_>) {
        let response = plot.response();
        let zoomed = response.hovered() && plot.ctx().input(|i| i.zoom_delta() != 1.0);
        if response.dragged() || zoomed {
            self.follow_live = false;
            self.window_s = plot.plot_bounds().width().max(0.01);
        }
    }

    /// Draws one lane; returns whether it was clicked (to select it).
    fn lane(&mut self, ui: &mut Ui, timeline: &Timeline, lane: &Lane, row: &LaneRow) -> bool {
        let LaneRow { link, range, width, now_s, cursor, selected } = *row;
        let size = egui::vec2(width.min(ui.available_width()), LANE_HEIGHT - ui.spacing().item_spacing.y);
        let (rect, _) = ui.allocate_exact_size(size, egui::Sense::hover());
        let (header, area) = lane_columns(rect, ui.spacing().item_spacing.x);
        let id = (lane.part, lane.stream);
        let mut header_ui = ui.new_child(
            UiBuilder::new().max_rect(header).id_salt(("header", id)).layout(egui::Layout::top_down(egui::Align::Min)),
        );
        header_ui.set_clip_rect(header.intersect(ui.clip_rect()));
        if selected {
            ui.painter().rect_filled(header, 3.0, ui.visuals().selection.bg_fill.gamma_multiply(0.4));
        }
        lane_header(&mut header_ui, timeline, lane, now_s, true);
        let picked = pick(ui, header, timeline, lane, selected);
        let mut plot_ui = ui.new_child(UiBuilder::new().max_rect(area).id_salt(("plot", id)));
        let response = Plot::new(link.with(("lane", lane.part, lane.stream)))
            .width(area.width())
            .height(area.height())
            .link_axis(link, [true, false])
            .link_cursor(link, [true, false])
            .show_axes([false, false])
            .show_grid([true, false])
            .allow_zoom([true, false])
            .allow_drag([true, false])
            .allow_scroll(false)
            .allow_double_click_reset(false)
            .show_x(false)
            .show_y(false)
            .show(&mut plot_ui, |plot| {
                if let Some((a, b)) = range {
                    plot.set_plot_bounds_x(a..=b);
                }
                plot.set_plot_bounds_y(-0.1..=1.18);
                self.note_user_zoom(plot);
                let bounds = plot.plot_bounds();
                let columns = plot.response().rect.width().max(1.0) as usize;
                draw_lane(plot, lane, bounds.min()[0], bounds.max()[0], columns, now_s);
                if let Some(at) = cursor {
                    plot.vline(cursor_line(at));
                }
                let per_pixel = bounds.width() / columns as f64;
                plot.pointer_coordinate().and_then(|p| lane.describe_near(p.x, per_pixel * 6.0))
            });
        let name = format!("Plot of {} stream {}", timeline.label(lane), lane.stream);
        response.response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Figure, true, &name));
        let clicked = response.response.clicked();
        if let Some(text) = response.inner {
            response.response.on_hover_text_at_pointer(text);
        }
        picked || clicked
    }
}

/// Makes `rect` (a lane's header or compact row) a button that selects its
/// lane, found by screen readers and tests as `Lane <title>`; returns
/// whether it was clicked (or activated from the keyboard).
fn pick(ui: &mut Ui, rect: Rect, timeline: &Timeline, lane: &Lane, selected: bool) -> bool {
    let response = ui.interact(rect, ui.scope_id().with(("pick", lane.part, lane.stream)), egui::Sense::click());
    let name = format!("Lane {}", detail::title(timeline, lane));
    response.widget_info(|| egui::WidgetInfo::selected(egui::Role::Button, true, selected, &name));
    response.on_hover_text("Open this stream's details (↑ ↓ to move, Esc to close)").clicked()
}

/// What every lane row of a frame shares.
#[derive(Debug, Clone, Copy)]
struct LaneRow {
    link: egui::Id,
    range: Option<(f64, f64)>,
    width: f32,
    now_s: f64,
    cursor: Option<f64>,
    selected: bool,
}

/// The replay cursor, drawn across a plot.
fn cursor_line(at_s: f64) -> VLine {
    VLine::new("cursor", at_s).color(colour::CURSOR).width(1.5).allow_hover(false)
}

fn filter_name(filter: OutcomeFilter) -> &'static str {
    match filter {
        OutcomeFilter::All => "all outcomes",
        OutcomeFilter::NotOk => "all but ok",
        OutcomeFilter::Only(o) => o.name(),
    }
}

fn outcome_rank(outcome: Option<Outcome>) -> u8 {
    match outcome {
        Some(Outcome::Failed) => 0,
        Some(Outcome::Partial) => 1,
        Some(Outcome::Cancelled) => 2,
        None => 3,
        Some(Outcome::Ok) => 4,
    }
}

/// The lane's text: which stream, how it ended, how long, why.
fn lane_header(ui: &mut Ui, timeline: &Timeline, lane: &Lane, now_s: f64, full: bool) {
    let outcome = outcome_name(lane.outcome);
    let title = detail::title(timeline, lane);
    let headline = RichText::new(format!("{title}  {outcome}")).color(outcome_colour(lane.outcome)).strong();
    // One line, cut with "…" (the whole of it on hover), so a long label
    // leaves room for the rest of the header.
    ui.add(egui::Label::new(headline).truncate());
    let detail = format!(
        "{} · {} attempt(s) · {:.2} s · {} B",
        lane.target,
        lane.attempt_count,
        lane.elapsed_s(now_s),
        lane.total_bytes
    );
    // The verdict says more than the last error, once there is one.
    match timeline.verdict(lane) {
        Some(verdict) => {
            ui.small(detail);
            verdicts::badge(ui, verdict);
        }
        None if full => {
            ui.small(detail);
            if let Some(error) = &lane.last_error {
                // Red only when the failure was final; a recovered one is history.
                let tint = if lane.outcome == Some(Outcome::Failed) { colour::FIRED } else { colour::SLEEP_TEXT };
                ui.small(RichText::new(error).color(tint));
            }
        }
        None => {
            ui.small(format!("{detail}  {}", lane.last_error.as_deref().unwrap_or("")));
        }
    }
}

fn legend(ui: &mut Ui) {
    ui.horizontal_wrapped(|ui| {
        let key = |ui: &mut Ui, colour: Color32, text: &str| {
            ui.label(RichText::new("■").color(colour));
            ui.small(text);
        };
        key(ui, colour::BYTES, "cumulative bytes");
        key(ui, colour::OUTPUT, "output event");
        key(ui, colour::KEEPALIVE, "keep-alive");
        key(ui, colour::LIFECYCLE, "lifecycle");
        for kind in [TimerKind::Ttfb, TimerKind::Idle, TimerKind::DataStall, TimerKind::Total, TimerKind::Deadline] {
            key(ui, timer_colour(kind), &format!("{kind} timer (1 = fires)"));
        }
        key(ui, colour::FIRED, "fired");
        key(ui, colour::SLEEP_TEXT, "backoff sleep");
        key(ui, colour::HOP, "failover hop");
        key(ui, colour::ATTEMPT, "attempt start");
        key(ui, colour::LOW_BUCKET, "rate limit running low");
    });
}

/// Everything of one lane within `x_min..=x_max`, reduced to `columns`.
fn draw_lane(plot: &mut egui_plot::PlotUi<'_>, lane: &Lane, x_min: f64, x_max: f64, columns: usize, now_s: f64) {
    let visible = |a: f64, b: f64| b >= x_min && a <= x_max;
    for sleep in lane.sleeps.iter().filter(|s| visible(s.start_s, s.end_s)) {
        let (a, b) = (sleep.start_s, sleep.end_s);
        let rect = vec![[a, -0.1], [b, -0.1], [b, 1.18], [a, 1.18]];
        plot.polygon(Polygon::new("backoff", rect).fill_color(colour::SLEEP).width(0.0).allow_hover(false));
        let text = format!("{} {:.2} s ({})", sleep.reason, b - a, sleep.category);
        plot.text(
            Text::new("backoff", PlotPoint::new(a, 1.15), RichText::new(text).small().color(colour::SLEEP_TEXT))
                .anchor(egui::Align2::LEFT_TOP),
        );
    }
    for mark in lane.attempts.iter().filter(|m| visible(m.at_s, m.at_s)) {
        plot.vline(VLine::new("attempt", mark.at_s).color(colour::ATTEMPT).width(1.0).allow_hover(false));
    }
    let mut points = Vec::new();
    if lane.total_bytes > 0 {
        decimate::min_max(&lane.bytes, x_min, x_max, columns, &mut points);
        let scale = 1.0 / lane.total_bytes as f64;
        for p in &mut points {
            p.y *= scale;
        }
        if lane.outcome.is_none() && now_s > points.last().map_or(f64::MAX, |p| p.x) {
            points.push(PlotPoint::new(now_s, 1.0));
        }
        let bytes = Line::new("bytes", PlotPoints::Owned(std::mem::take(&mut points)));
        plot.line(bytes.color(colour::BYTES).width(1.5));
    }
    for track in lane.timers.iter() {
        let (start, end) =
            (track.progress[0].x, if track.open { now_s } else { track.progress.last().map_or(0.0, |p| p.x) });
        if !visible(start, end) {
            continue;
        }
        // A reset is a vertical stroke; one bucket per two columns keeps
        // a dense comb legible at half the vertices.
        decimate::min_max(&track.progress, x_min, x_max, columns.div_ceil(2), &mut points);
        if track.open {
            points.push(PlotPoint::new(now_s, track.fraction_at(now_s)));
        }
        let line = Line::new(format!("{} timer", track.kind), PlotPoints::Owned(std::mem::take(&mut points)));
        // Already reduced per column; egui_plot's own banding would fill
        // the area under a climb that crosses few columns.
        plot.line(line.color(timer_colour(track.kind)).width(1.0).allow_band(false));
    }
    for (ticks, y, c) in [
        (&lane.output_ticks, -0.03, colour::OUTPUT),
        (&lane.lifecycle_ticks, -0.055, colour::LIFECYCLE),
        (&lane.keepalive_ticks, -0.08, colour::KEEPALIVE),
    ] {
        // A tick is a dot as wide as three columns: one per dot's width shows the same.
        decimate::ticks(ticks, y, x_min, x_max, columns.div_ceil(3), &mut points);
        if !points.is_empty() {
            let series = PlotPoints::Owned(std::mem::take(&mut points));
            plot.points(Points::new("events", series).color(c).radius(1.5).shape(MarkerShape::Circle));
        }
    }
    let marks = |marks: &[super::lanes::Mark], y: f64| -> Vec<[f64; 2]> {
        marks.iter().filter(|m| visible(m.at_s, m.at_s)).map(|m| [m.at_s, y]).collect()
    };
    let fired = marks(&lane.fired, 1.0);
    if !fired.is_empty() {
        plot.points(Points::new("fired", fired).color(colour::FIRED).radius(6.0).shape(MarkerShape::Cross));
    }
    let low = marks(&lane.low_buckets, 0.9);
    if !low.is_empty() {
        let points = Points::new("rate limit low", low).color(colour::LOW_BUCKET).radius(5.0);
        plot.points(points.shape(MarkerShape::Down).filled(true));
    }
    for hop in lane.hops.iter().filter(|m| visible(m.at_s, m.at_s)) {
        plot.points(
            Points::new("failover", vec![[hop.at_s, 0.5]])
                .color(colour::HOP)
                .radius(6.0)
                .shape(MarkerShape::Diamond)
                .filled(true),
        );
        plot.text(
            Text::new("failover", PlotPoint::new(hop.at_s, 0.62), RichText::new(&hop.text).small().color(colour::HOP))
                .anchor(egui::Align2::LEFT_BOTTOM),
        );
    }
    if let Some(end) = lane.finished_s.filter(|&t| visible(t, t)) {
        let text = format!("■ {}", outcome_name(lane.outcome));
        plot.text(
            Text::new(
                "outcome",
                PlotPoint::new(end, 0.35),
                RichText::new(text).strong().color(outcome_colour(lane.outcome)),
            )
            .anchor(egui::Align2::LEFT_CENTER),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_labels_switch_from_seconds_to_milliseconds_as_the_view_narrows() {
        // (value, step between marks, visible span) → label
        let cases = [
            (30.0, 10.0, 60.0, "30 s"),
            (2.5, 0.5, 5.0, "2.5 s"),
            (2.5, 0.1, 1.2, "2.5 s"),
            (0.3, 0.1, 0.9, "300 ms"),
            (0.02, 0.01, 0.05, "20 ms"),
            (0.0015, 0.0001, 0.005, "1.5 ms"),
            (0.00125, 0.00001, 0.0002, "1.25 ms"),
            (0.0, 1.0, 10.0, "0 s"),
            (-1e-17, 0.001, 0.01, "0 ms"),
            (-0.2, 0.1, 3.0, "-0.2 s"),
        ];
        for (value, step, span, label) in cases {
            assert_eq!(time_label(value, step, span), label, "{value} s, marks {step} s apart, {span} s shown");
        }
    }

    #[test]
    fn a_row_splits_at_the_header_width_whatever_its_height_or_width() {
        for row in [
            Rect::from_min_size(egui::pos2(8.0, 100.0), egui::vec2(1200.0, 70.0)),
            Rect::from_min_size(egui::pos2(8.0, 900.0), egui::vec2(800.0, 26.0)),
        ] {
            let (header, plot) = lane_columns(row, 8.0);
            assert_eq!((header.left(), header.right()), (8.0, 8.0 + HEADER_WIDTH));
            assert_eq!((plot.left(), plot.right()), (16.0 + HEADER_WIDTH, row.right()));
            assert_eq!((header.top(), plot.bottom()), (row.top(), row.bottom()));
        }
        // Narrower than a header: the plot is empty, never inverted.
        let (_, plot) = lane_columns(Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(100.0, 20.0)), 8.0);
        assert_eq!(plot.width(), 0.0);
    }
}
