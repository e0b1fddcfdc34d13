//! Drawing a [`Timeline`]: lane controls (follow live, fit, compact, sort,
//! filter by outcome, verdict or text, the bytes scale), a summary strip
//! and the verdict summary of the lanes shown, the overview strip of every
//! lane shown ([`super::overview`]), and one lane per stream on a shared time
//! axis; a lane clicked (or reached with ↑/↓ or from the overview) opens
//! its [detail panel](super::detail) on the right. Only the lanes scrolled
//! into view are drawn, and each series is reduced to the plot's pixel
//! columns, so a frame's cost follows the window's size, not the run's.
//!
//! The view owns the span shown (a [`TimeWindow`]) and sets it on every
//! plot each frame; dragging, Ctrl+wheel, a right-drag box and the keys
//! (W/S zoom, A/D and ←/→ pan, F fit, `/` filter, Esc) all move that one
//! window. A run that ends and a run opened are shown fitted, scrolled to
//! the top; navigating never changes the follow window, which only its
//! own control sets.
//!
//! Every row (the overview, the axis and each lane) is split by
//! [`lane_columns`], so every plot spans the same pixels whatever its
//! header holds: a time is at the same x in every lane.

use std::collections::HashMap;

use egui::{Color32, Key, Modifiers, PointerButton, Rect, RichText, Ui, UiBuilder};
use egui_plot::{Line, Plot, PlotPoint, PlotPoints, Points, Polygon, Text, VLine};
use serde::{Deserialize, Serialize};

use super::decimate;
use super::detail::{self, PanelAction};
use super::labels::{self, Placed, Wanted};
use super::lanes::{Lane, Summary, Timeline};
use super::overview::{self, Overview};
use super::palette::{self, shape};
use super::verdicts::{self, SummaryCache};
use super::viewport::{KEY_PAN, KEY_ZOOM, TimeWindow};
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

/// What the top of a lane's bytes line stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum BytesScale {
    /// The lane's own bytes so far: the shape of each stream's delivery.
    #[default]
    PerLane,
    /// The most bytes any lane received: lanes compare by height.
    Shared,
}

/// The view's options; they persist between launches. Where the view is
/// (the span shown, the scroll, the selection) does not.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineView {
    /// Keep the right edge of the time axis at the present while a run goes.
    pub follow_live: bool,
    /// The width of the time window while following, in seconds (set by
    /// its control only: zooming does not change it).
    pub window_s: f64,
    /// One line of text per lane instead of a plot.
    pub compact: bool,
    /// Lane order.
    pub sort: SortBy,
    /// Which outcomes are shown.
    pub outcome_filter: OutcomeFilter,
    /// Which verdicts are shown.
    pub verdict_filter: VerdictFilter,
    /// Lanes whose label, target, error, outcome or verdict contain this text.
    pub text_filter: String,
    /// What a lane's bytes line is scaled to.
    pub bytes_scale: BytesScale,
    /// Show the overview strip above the lanes.
    pub overview: bool,
    /// The height of one lane, in points ([`LANE_HEIGHTS`]): taller lanes
    /// for a large window.
    pub lane_height: f32,
    /// The span shown when not following (none yet: fitted when first drawn).
    #[serde(skip)]
    view: Option<TimeWindow>,
    /// The span drawn last frame.
    #[serde(skip)]
    shown: Option<TimeWindow>,
    #[serde(skip)]
    fit_requested: bool,
    #[serde(skip)]
    scroll_top: bool,
    /// Whether the clock was live last frame (`None` before the first).
    #[serde(skip)]
    was_live: Option<bool>,
    /// Where a right-drag box began, in seconds.
    #[serde(skip)]
    boxing: Option<f64>,
    /// The time under the pointer on a lane last frame (W/S zoom about it).
    #[serde(skip)]
    pointer_s: Option<f64>,
    /// The lane filter's field, for `/`.
    #[serde(skip)]
    filter_id: Option<egui::Id>,
    /// The lane whose detail panel is open: (part, stream).
    #[serde(skip)]
    selected: Option<(usize, StreamId)>,
    /// Positions in the lane order drawn last frame.
    #[serde(skip)]
    rows_shown: std::ops::Range<usize>,
    /// A position the keyboard or the overview moved to, to scroll into view.
    #[serde(skip)]
    scroll_to: Option<usize>,
    /// The verdict summary of the lanes shown, one per part when the parts
    /// are compared (a run and its what-if), else one for all.
    #[serde(skip)]
    verdict_summaries: Vec<SummaryCache>,
    /// The verdict summary's lines, for Copy summary.
    #[serde(skip)]
    verdict_lines: Vec<String>,
    /// The tallest the verdict summary has been since the timeline shown
    /// was opened or started: it keeps that room while a replay is
    /// scrubbed back, so the lanes under it do not move.
    #[serde(skip)]
    verdict_height: f32,
    /// The height the overview's legend took when last drawn.
    #[serde(skip)]
    overview_legend_height: f32,
    #[serde(skip)]
    strip: Overview,
}

impl TimelineView {
    /// The lane height asked for, within [`LANE_HEIGHTS`] (a saved value
    /// may come from anywhere).
    fn lane_height(&self) -> f32 {
        self.lane_height.clamp(*LANE_HEIGHTS.start(), *LANE_HEIGHTS.end())
    }
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
            bytes_scale: BytesScale::PerLane,
            overview: true,
            lane_height: LANE_HEIGHT,
            view: None,
            shown: None,
            fit_requested: true,
            scroll_top: false,
            was_live: None,
            boxing: None,
            pointer_s: None,
            filter_id: None,
            selected: None,
            rows_shown: 0..0,
            scroll_to: None,
            verdict_summaries: Vec::new(),
            verdict_lines: Vec::new(),
            verdict_height: 0.0,
            overview_legend_height: 0.0,
            strip: Overview::default(),
        }
    }
}

const LANE_HEIGHT: f32 = 74.0;
/// The heights a lane may have, in points.
pub const LANE_HEIGHTS: std::ops::RangeInclusive<f32> = 40.0..=400.0;
const COMPACT_HEIGHT: f32 = 20.0;
const HEADER_WIDTH: f32 = 230.0;
const AXIS_HEIGHT: f32 = 26.0;
/// A right-drag narrower than this is a click, not a box.
const BOX_MIN_PIXELS: f32 = 4.0;
/// Width of a character of small text, for placing labels (an estimate:
/// a label's room, not its exact ink).
const SMALL_CHAR_PIXELS: f32 = 6.2;
/// A lane's height in plot units: timers and bytes climb 0 to 1; below 0
/// is room for the event ticks, above 1 for the top row of labels.
const LANE_Y: (f64, f64) = (-0.25, 1.18);
/// Label rows of a lane, top to bottom, in plot units.
const LABEL_ROWS: [f64; 3] = [1.16, 0.8, 0.48];

/// A row split into its header, `HEADER_WIDTH` wide, and its plot, which
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

/// A duration as a threshold reads: `400 ms`, `1.5 s`, `30 s`.
pub fn duration_label(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        let text = format!("{s:.3}");
        format!("{} s", text.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// Bytes as people read them: `900 B`, `12.3 kB`, `4.1 MB`.
pub fn bytes_label(bytes: f64) -> String {
    match bytes {
        b if b < 1000.0 => format!("{b:.0} B"),
        b if b < 1e6 => format!("{:.1} kB", b / 1e3),
        b => format!("{:.1} MB", b / 1e6),
    }
}

/// An outcome's name (`running` for none).
pub fn outcome_name(outcome: Option<Outcome>) -> &'static str {
    outcome.map_or("running", Outcome::name)
}

/// How far a run that was started with a known number of calls has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The calls it was started with.
    pub planned: usize,
    /// Whether it is going on (or shown as of a moment while it was): calls
    /// not started yet are queued; once it has ended (stopped), they were
    /// never started.
    pub live: bool,
}

/// The summary strip's text; with `progress`, it leads with how many of the
/// planned calls are done while any are still to come.
pub fn summary_text(summary: &Summary, progress: Option<Progress>) -> String {
    let done = summary.ok + summary.partial + summary.failed + summary.cancelled + summary.unknown;
    let mut text = String::new();
    let waiting = progress.map(|p| (p, p.planned.saturating_sub(done + summary.running)));
    let to_come = waiting.filter(|(_, waiting)| summary.running > 0 || *waiting > 0);
    if let Some((progress, _)) = to_come {
        text.push_str(&format!("{} of {} done: ", grouped(done), grouped(progress.planned)));
    }
    text.push_str(&format!(
        "{} ok · {} partial · {} failed · {} cancelled · {} running",
        grouped(summary.ok),
        grouped(summary.partial),
        grouped(summary.failed),
        grouped(summary.cancelled),
        grouped(summary.running)
    ));
    if let Some((progress, waiting)) = to_come.filter(|(_, waiting)| *waiting > 0) {
        text.push_str(&format!(" · {} {}", grouped(waiting), if progress.live { "queued" } else { "not started" }));
    }
    if summary.unknown > 0 {
        text.push_str(&format!(" · {} unknown", grouped(summary.unknown)));
    }
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

/// A count with its thousands grouped: `1,588`.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut text = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}

/// Whether the user asked for a copy this frame (Ctrl+C, or the platform's copy).
fn copy_asked(ui: &Ui) -> bool {
    ui.input(|i| i.events.iter().any(|e| matches!(e, egui::Event::Copy)))
}

/// What the part of a timeline above its lanes worked out for them: the
/// lanes shown, in order, and the span they show.
#[derive(Debug, Clone)]
pub struct Shown {
    order: Vec<usize>,
    range: TimeWindow,
}

impl TimelineView {
    /// Draws the timeline as of `clock`; a replay's cursor is drawn across
    /// every lane. A selected lane's detail panel opens on the right.
    pub fn ui(&mut self, ui: &mut Ui, timeline: &Timeline, clock: Clock) {
        let shown = self.header(ui, timeline, clock);
        self.lanes(ui, timeline, clock, shown);
    }

    /// The part above the lanes: the controls, the summary, the verdicts,
    /// the legend and the overview, which a small window scrolls away with
    /// the rest of the view's header.
    pub fn header(&mut self, ui: &mut Ui, timeline: &Timeline, clock: Clock) -> Shown {
        let (now_s, live) = (clock.now_s(), matches!(clock, Clock::Live(_)));
        self.follow_the_clock(live);
        self.controls(ui, timeline, live);
        let order = self.visible_lanes(timeline, now_s);
        // Compared runs are summed up each on its own line, named: pooled,
        // their figures would be of neither.
        let summary = if timeline.parts_compared {
            let part_summary = |(part, p): (usize, &super::lanes::Part)| {
                let lanes = order.iter().copied().filter(|&i| timeline.lanes[i].part == part);
                format!("{}: {}", p.label, summary_text(&timeline.summary_of(lanes), None))
            };
            timeline.parts.iter().enumerate().map(part_summary).collect::<Vec<_>>().join("\n")
        } else {
            // Progress is of the whole run: a filter's share of it has no plan.
            let progress = timeline
                .planned()
                .filter(|_| order.len() == timeline.lanes.len())
                .map(|planned| Progress { planned, live: !matches!(clock, Clock::Ended(_)) });
            summary_text(&timeline.summary_of(order.iter().copied()), progress)
        };
        ui.horizontal(|ui| {
            ui.label(RichText::new(&summary).strong());
            let copy = ui.small_button("Copy summary").on_hover_text("The summary and the verdicts, as text");
            if copy.clicked() {
                ui.ctx().copy_text(
                    [summary.clone()].into_iter().chain(self.verdict_lines.clone()).collect::<Vec<_>>().join("\n"),
                );
            }
        });
        self.verdict_summary(ui, timeline, &order);
        palette::legend(ui);
        let range = self.x_range(timeline, &order, now_s, live);
        self.keys(ui, timeline, &order, range);
        if self.overview && order.len() > 1 {
            // As wide as the lanes below when no panel is open (their
            // scroll area keeps room for its bar).
            let width = ui.available_width() - ui.spacing().scroll.allocated_width();
            self.overview_strip(ui, timeline, &order, range, width, now_s, live);
        }
        Shown { order, range }
    }

    /// The lanes of what [`TimelineView::header`] worked out, and the
    /// detail panel of the one selected.
    pub fn lanes(&mut self, ui: &mut Ui, timeline: &Timeline, clock: Clock, shown: Shown) {
        let now_s = clock.now_s();
        let cursor = match clock {
            Clock::Cursor(s) => Some(s),
            Clock::Live(_) | Clock::Ended(_) => None,
        };
        let Shown { order, range } = shown;
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
        // The lanes' scroll area may keep room for its bar; the rows above
        // it must be exactly as wide as the rows below.
        let width = ui.available_width() - ui.spacing().scroll.allocated_width();
        let mut moved = None;
        if !self.compact {
            moved = self.axis(ui, range, width, cursor);
        }
        let row_height = if self.compact { COMPACT_HEIGHT } else { self.lane_height() };
        let mut scroll = egui::ScrollArea::vertical().auto_shrink([false, false]);
        if std::mem::take(&mut self.scroll_top) {
            scroll = scroll.vertical_scroll_offset(0.0);
        } else if let Some(at) = self.scroll_to.take().filter(|at| !self.rows_shown.contains(at)) {
            scroll = scroll.vertical_scroll_offset(at as f32 * (row_height + ui.spacing().item_spacing.y));
        }
        let mut clicked = None;
        let largest = timeline.lanes.iter().map(|l| l.total_bytes).max().unwrap_or(0);
        self.pointer_s = None;
        scroll.show_rows(ui, row_height, order.len(), |ui, rows| {
            self.rows_shown = rows.clone();
            for &index in &order[rows] {
                let lane = &timeline.lanes[index];
                let selected = self.selected == Some((lane.part, lane.stream));
                let picked = if self.compact {
                    let row = ui.horizontal(|ui| lane_header(ui, timeline, lane, now_s, false)).response;
                    pick(ui, row.rect, timeline, lane, selected)
                } else {
                    let full_scale = match self.bytes_scale {
                        BytesScale::PerLane => lane.total_bytes,
                        BytesScale::Shared => largest,
                    };
                    let row = LaneRow { range, width, now_s, cursor, selected, full_scale };
                    let (picked, navigated) = self.lane(ui, timeline, lane, &row);
                    moved = moved.or(navigated);
                    picked
                };
                if picked {
                    clicked = Some((lane.part, lane.stream));
                }
            }
        });
        if clicked.is_some() {
            self.selected = clicked;
        }
        self.go_to(ui, moved);
        self.shown = Some(range);
    }

    /// A run that starts is shown from the top of its lanes; a run that
    /// ends is fitted and shown from the top.
    fn follow_the_clock(&mut self, live: bool) {
        match (self.was_live, live) {
            (Some(true), false) => {
                self.fit_requested = true;
                self.scroll_top = true;
            }
            (None | Some(false), true) => {
                self.scroll_top = true;
                self.view = None;
                self.selected = None;
                self.verdict_height = 0.0;
            }
            _ => {}
        }
        self.was_live = Some(live);
    }

    /// Shows `to` from the next frame on, if the user moved the view.
    fn go_to(&mut self, ui: &Ui, to: Option<TimeWindow>) {
        if let Some(to) = to {
            self.view = Some(to);
            self.follow_live = false;
            ui.ctx().request_repaint();
        }
    }

    /// The overview strip, in the plot column, its legend in the header.
    #[allow(clippy::too_many_arguments)]
    fn overview_strip(
        &mut self,
        ui: &mut Ui,
        timeline: &Timeline,
        order: &[usize],
        range: TimeWindow,
        width: f32,
        now_s: f64,
        live: bool,
    ) {
        // Tall enough for its legend as last drawn, however few the lanes.
        let height = Overview::height(order.len()).max(self.overview_legend_height);
        let (row, _) = ui.allocate_exact_size(egui::vec2(width, height), egui::Sense::hover());
        let (header, area) = lane_columns(row, ui.spacing().item_spacing.x);
        let mut header_ui = ui.new_child(UiBuilder::new().max_rect(header).id_salt("overview-header"));
        header_ui.set_clip_rect(header.intersect(ui.clip_rect()));
        let legend = header_ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new(format!("Overview · {} streams", order.len())).strong());
            let colours = palette::of(ui.visuals());
            for heat in overview::Heat::DRAWN {
                // Swatch and name as one label, so they wrap together.
                let mut key = egui::text::LayoutJob::default();
                let font = egui::TextStyle::Small.resolve(ui.style());
                let format = |color| egui::TextFormat { font_id: font.clone(), color, ..Default::default() };
                key.append("■ ", 0.0, format(heat.colour(colours)));
                key.append(heat.name(), 0.0, format(ui.visuals().text_color()));
                ui.add(egui::Label::new(key).extend());
            }
        });
        let needed = legend.response.rect.height();
        if needed != self.overview_legend_height {
            self.overview_legend_height = needed;
            ui.ctx().request_repaint();
        }
        // The whole of the lanes, and the span shown if it reaches beyond
        // (a replay's lanes end at its cursor, its view at the run's end).
        let fitted = self.fitted(timeline, order, now_s);
        let span = TimeWindow::new(fitted.start_s.min(range.start_s), fitted.end_s.max(range.end_s));
        let frame =
            overview::Frame { timeline, order, span, view: range, rows_shown: self.rows_shown.clone(), now_s, live };
        if let Some(jump) = self.strip.ui(ui, area, &frame) {
            let lane = &timeline.lanes[order[jump.position]];
            self.selected = Some((lane.part, lane.stream));
            self.scroll_to = Some(jump.position);
            if !range.contains(jump.at_s) {
                self.go_to(ui, Some(range.centred_on(jump.at_s)));
            }
        }
    }

    /// The run-level verdict summary of the lanes in `order`; a click on a
    /// verdict's line shows only its lanes.
    fn verdict_summary(&mut self, ui: &mut Ui, timeline: &Timeline, order: &[usize]) {
        let parts: Vec<Option<usize>> =
            if timeline.parts_compared { (0..timeline.parts.len()).map(Some).collect() } else { vec![None] };
        self.verdict_summaries.resize_with(parts.len(), SummaryCache::default);
        self.verdict_lines.clear();
        let mut picked = None;
        let top = ui.cursor().top();
        for (cache, part) in self.verdict_summaries.iter_mut().zip(parts) {
            let shown = order
                .iter()
                .map(|&i| &timeline.lanes[i])
                .filter(|lane| part.is_none_or(|p| lane.part == p))
                .filter_map(|lane| timeline.verdict(lane).map(|d| (lane.stream, d.clone())))
                .collect();
            let title = part.and_then(|p| timeline.parts.get(p)).map(|p| p.label.as_str());
            let run = cache.of(shown);
            self.verdict_lines.extend(run.groups.iter().map(|g| g.summary.clone()));
            picked = verdicts::summary_ui(ui, title, run).or(picked);
        }
        let height = ui.cursor().top() - top;
        self.verdict_height = self.verdict_height.max(height);
        ui.add_space(self.verdict_height - height);
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

    /// The span of time the lanes showed last frame.
    pub fn shown_span(&self) -> Option<TimeWindow> {
        self.shown
    }

    /// Positions in the lane order scrolled into view last frame.
    pub fn rows_shown(&self) -> std::ops::Range<usize> {
        self.rows_shown.clone()
    }

    /// The keys, none while text is edited: F fits; W/S zoom (about the
    /// pointer on a lane, else the middle), A/D and ←/→ pan (a replay takes
    /// ←/→ first, to step); `/` goes to the lane filter; with a lane
    /// selected ↑ and ↓ select the lane above or below among those shown;
    /// Esc drops a box being drawn, else closes the panel.
    fn keys(&mut self, ui: &mut Ui, timeline: &Timeline, order: &[usize], range: TimeWindow) {
        if ui.ctx().text_edit_focused() {
            return;
        }
        let (fit, zoom_in, zoom_out, left, right, slash) = ui.input_mut(|i| {
            let slash =
                i.events.iter().any(|e| matches!(e, egui::Event::Text(t) if t == "/")) || i.key_pressed(Key::Slash);
            (
                i.consume_key(Modifiers::NONE, Key::F),
                i.consume_key(Modifiers::NONE, Key::W),
                i.consume_key(Modifiers::NONE, Key::S),
                i.consume_key(Modifiers::NONE, Key::A) | i.consume_key(Modifiers::NONE, Key::ArrowLeft),
                i.consume_key(Modifiers::NONE, Key::D) | i.consume_key(Modifiers::NONE, Key::ArrowRight),
                slash,
            )
        });
        if fit {
            self.fit_view();
            ui.ctx().request_repaint();
        }
        let about = self.pointer_s.filter(|s| range.contains(*s)).unwrap_or((range.start_s + range.end_s) / 2.0);
        let step = range.span_s() * KEY_PAN;
        let moved = match (zoom_in, zoom_out, left, right) {
            (true, false, _, _) => Some(range.zoomed(KEY_ZOOM, about)),
            (false, true, _, _) => Some(range.zoomed(1.0 / KEY_ZOOM, about)),
            (_, _, true, false) => Some(range.panned(-step)),
            (_, _, false, true) => Some(range.panned(step)),
            _ => None,
        };
        self.go_to(ui, moved);
        if slash && let Some(id) = self.filter_id {
            ui.memory_mut(|m| m.request_focus(id));
        }
        let (up, down, escape) = ui.input_mut(|i| {
            (
                self.selected.is_some() && i.consume_key(Modifiers::NONE, Key::ArrowUp),
                self.selected.is_some() && i.consume_key(Modifiers::NONE, Key::ArrowDown),
                (self.selected.is_some() || self.boxing.is_some()) && i.consume_key(Modifiers::NONE, Key::Escape),
            )
        });
        if escape {
            if self.boxing.take().is_none() {
                self.selected = None;
            }
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
        ui.horizontal_wrapped(|ui| {
            ui.add_enabled(live, egui::Checkbox::new(&mut self.follow_live, "Follow live"));
            let label = ui.label("Window");
            let window = egui::DragValue::new(&mut self.window_s).range(0.1..=3600.0).speed(0.1).suffix(" s");
            ui.add(window).labelled_by(label.id).on_hover_text("How much of the run the lanes show while following it");
            let fit = ui.button("Fit").on_hover_text("Show the whole of the lanes shown (F)");
            if fit.clicked() {
                self.fit_view();
            }
            ui.checkbox(&mut self.compact, "Compact lanes");
            ui.checkbox(&mut self.overview, "Overview");
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
            let field = egui::TextEdit::singleline(&mut self.text_filter)
                .hint_text("/ name, outcome, verdict")
                .desired_width(160.0);
            let field = ui.add(field).labelled_by(label.id);
            self.filter_id = Some(field.id);
            ui.separator();
            let scale = egui::ComboBox::from_label("Bytes scale").selected_text(match self.bytes_scale {
                BytesScale::PerLane => "each lane",
                BytesScale::Shared => "largest lane",
            });
            scale.show_ui(ui, |ui| {
                ui.selectable_value(&mut self.bytes_scale, BytesScale::PerLane, "each lane")
                    .on_hover_text("The top of a lane is its own bytes: the shape of each delivery");
                ui.selectable_value(&mut self.bytes_scale, BytesScale::Shared, "largest lane")
                    .on_hover_text("The top of every lane is the most bytes any lane received: lanes compare");
            });
        });
    }

    /// Shows the whole of the lanes shown on the next frame and stops following.
    fn fit_view(&mut self) {
        self.fit_requested = true;
        self.follow_live = false;
    }

    /// Shows a timeline just opened (a stored run, a what-if) whole: fitted
    /// to its lanes, scrolled to the top, not following.
    pub fn fit(&mut self) {
        self.fit_view();
        self.scroll_top = true;
        self.verdict_height = 0.0;
    }

    /// Indices of the lanes to draw, filtered and in order. The text
    /// filter matches a lane's label, target, error, outcome, verdict
    /// (kind, severity and summary) and `not trustworthy`.
    pub fn visible_lanes(&self, timeline: &Timeline, now_s: f64) -> Vec<usize> {
        let needle = self.text_filter.trim().to_lowercase();
        let matches = |text: &str| text.to_lowercase().contains(&needle);
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
                        || matches(timeline.label(lane))
                        || matches(&lane.target)
                        || matches(timeline.outcome_name(lane))
                        || lane.last_error.as_deref().is_some_and(matches)
                        || verdict.is_some_and(|d| {
                            matches(d.kind.label())
                                || matches(d.severity.name())
                                || matches(&d.summary)
                                || (!d.trusted && matches(VerdictFilter::Untrusted.name()))
                        }))
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
                // By the verdict a lane ends with, so a replay scrubbed back
                // before a lane's end does not move it.
                let worst_first =
                    |i: usize| std::cmp::Reverse(timeline.verdict_at_end(&timeline.lanes[i]).map(|d| d.severity));
                order.sort_by_key(|&i| worst_first(i));
            }
        }
        if timeline.parts_compared {
            together(&mut order, timeline);
        }
        order
    }

    /// The span covering the lanes at `order`, from the first one's start
    /// to the last one's end (the present for those still going), with a
    /// little room either side.
    pub fn fitted(&self, timeline: &Timeline, order: &[usize], now_s: f64) -> TimeWindow {
        let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
        for lane in order.iter().map(|&i| &timeline.lanes[i]) {
            first = first.min(lane.started_s);
            last = last.max(lane.finished_s.unwrap_or(now_s.max(lane.last_s)));
        }
        if !first.is_finite() || !last.is_finite() {
            return TimeWindow::new(0.0, now_s.max(0.1));
        }
        let room = ((last - first) * 0.02).max(0.005);
        TimeWindow::new(first - room, last + room)
    }

    /// The span to show this frame: the follow window while following a
    /// run, else the span the user navigated to (fitted when asked, or
    /// when nothing was shown yet).
    fn x_range(&mut self, timeline: &Timeline, order: &[usize], now_s: f64, live: bool) -> TimeWindow {
        if live && self.follow_live {
            let end = now_s.max(0.1);
            return TimeWindow::new((end - self.window_s).max(0.0), end + self.window_s * 0.02);
        }
        if std::mem::take(&mut self.fit_requested) || self.view.is_none() {
            self.view = Some(self.fitted(timeline, order, now_s));
        }
        self.view.unwrap_or_else(|| self.fitted(timeline, order, now_s))
    }

    /// The shared time axis above the lanes; returns where the user moved
    /// the view, if they did.
    fn axis(&mut self, ui: &mut Ui, range: TimeWindow, width: f32, cursor: Option<f64>) -> Option<TimeWindow> {
        let (row, _) = ui.allocate_exact_size(egui::vec2(width, AXIS_HEIGHT), egui::Sense::hover());
        let (_, area) = lane_columns(row, ui.spacing().item_spacing.x);
        let mut child = ui.new_child(UiBuilder::new().max_rect(area).id_salt("axis"));
        let cursor_colour = palette::of(ui.visuals()).cursor;
        let response = fixed_plot("timeline-axis", area)
            .show_axes([true, false])
            .show_grid([false, false])
            .show_background(false)
            .x_axis_formatter(|mark, range| time_label(mark.value, mark.step_size, range.end() - range.start()))
            .show(&mut child, |plot| {
                plot.set_plot_bounds_x(range.start_s..=range.end_s);
                plot.set_plot_bounds_y(0.0..=1.0);
                if let Some(at) = cursor {
                    plot.vline(cursor_line(at, cursor_colour));
                }
            });
        let label = || egui::WidgetInfo::labeled(egui::Role::Figure, true, "Time axis");
        response.response.widget_info(label);
        self.navigate(ui, &response.response, range)
    }

    /// What a drag, a Ctrl+wheel or a right-drag box on a plot asks of the
    /// view (the box is drawn while it is dragged); `None` if nothing.
    fn navigate(&mut self, ui: &Ui, response: &egui::Response, range: TimeWindow) -> Option<TimeWindow> {
        let rect = response.rect;
        let time_at = |x: f32| range.time_at(x, rect.left(), rect.width());
        if let Some(pointer) = response.hover_pos() {
            self.pointer_s = Some(time_at(pointer.x));
        }
        if response.dragged_by(PointerButton::Primary) && response.drag_delta().x != 0.0 {
            return Some(range.panned(-f64::from(response.drag_delta().x) * range.per_pixel(rect.width())));
        }
        if response.hovered() {
            let zoom = ui.input(|i| i.zoom_delta());
            if let (true, Some(pointer)) = (zoom != 1.0, response.hover_pos()) {
                return Some(range.zoomed(1.0 / f64::from(zoom), time_at(pointer.x)));
            }
        }
        if response.drag_started_by(PointerButton::Secondary) {
            self.boxing = ui.input(|i| i.pointer.press_origin()).map(|p| time_at(p.x));
        }
        let (from, to) = (self.boxing?, response.interact_pointer_pos().or(response.hover_pos()));
        let to = to.map(|p| p.x)?;
        let x_from = rect.left() + ((from - range.start_s) / range.span_s()) as f32 * rect.width();
        if response.dragged_by(PointerButton::Secondary) {
            let band = Rect::from_x_y_ranges(x_from.min(to)..=x_from.max(to), rect.y_range());
            let painter = ui.painter().with_clip_rect(rect);
            painter.rect_filled(band, 0.0, ui.visuals().selection.bg_fill.gamma_multiply(0.35));
            painter.rect_stroke(band, 0.0, ui.visuals().selection.stroke, egui::StrokeKind::Inside);
        }
        if response.drag_stopped_by(PointerButton::Secondary) {
            self.boxing = None;
            if (to - x_from).abs() >= BOX_MIN_PIXELS {
                return Some(TimeWindow::new(from, time_at(to)));
            }
        }
        None
    }

    /// Draws one lane; returns whether it was clicked (to select it), and
    /// where the user moved the view, if they did.
    fn lane(&mut self, ui: &mut Ui, timeline: &Timeline, lane: &Lane, row: &LaneRow) -> (bool, Option<TimeWindow>) {
        let LaneRow { range, width, now_s, cursor, selected, full_scale } = *row;
        let size = egui::vec2(width.min(ui.available_width()), self.lane_height() - ui.spacing().item_spacing.y);
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
        let cursor_colour = palette::of(ui.visuals()).cursor;
        let response = fixed_plot(("lane", lane.part, lane.stream), area)
            .link_cursor(egui::Id::unique("timeline-cursor"), [true, false])
            .show_axes([false, false])
            .show_grid([true, false])
            .show(&mut plot_ui, |plot| {
                plot.set_plot_bounds_x(range.start_s..=range.end_s);
                plot.set_plot_bounds_y(LANE_Y.0..=LANE_Y.1);
                let columns = area.width().max(1.0) as usize;
                draw_lane(plot, lane, timeline.outcome_name(lane), range, columns, now_s, full_scale);
                if let Some(at) = cursor {
                    plot.vline(cursor_line(at, cursor_colour));
                }
                plot.pointer_coordinate().and_then(|p| hover_text(lane, p.x, range.per_pixel(area.width()) * 6.0))
            });
        draw_ticks(ui, &response.transform, lane, range, area.width().max(1.0) as usize);
        let name = format!("Plot of {} stream {}", timeline.label(lane), lane.stream);
        response.response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Figure, true, &name));
        let clicked = response.response.clicked();
        let moved = self.navigate(ui, &response.response, range);
        if let Some(text) = response.inner {
            if copy_asked(ui) {
                ui.ctx().copy_text(text.clone());
            }
            response.response.on_hover_text_at_pointer(format!("{text}\n(Ctrl+C copies this)"));
        }
        (picked || clicked, moved)
    }
}

/// A plot whose span the view sets every frame: egui_plot's own
/// navigation is off, so every gesture goes through [`TimeWindow`].
fn fixed_plot(id: impl std::hash::Hash + std::fmt::Debug, area: Rect) -> Plot<'static> {
    Plot::new(id)
        .width(area.width())
        .height(area.height())
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .allow_double_click_reset(false)
        .show_x(false)
        .show_y(false)
}

/// What hovering a lane at `at_s` says: the time, the bytes received by
/// then (an absolute scale whatever the lane's), and the events near it.
fn hover_text(lane: &Lane, at_s: f64, tolerance_s: f64) -> Option<String> {
    if at_s < lane.started_s - tolerance_s || lane.finished_s.is_some_and(|end| at_s > end + tolerance_s) {
        return None;
    }
    let received = lane.bytes.partition_point(|p| p.x <= at_s).checked_sub(1).map_or(0.0, |i| lane.bytes[i].y);
    let mut text = format!("{at_s:.3} s · {} received", bytes_label(received));
    if let Some(near) = lane.describe_near(at_s, tolerance_s) {
        text.push('\n');
        text.push_str(&near);
    }
    Some(text)
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
    range: TimeWindow,
    width: f32,
    now_s: f64,
    cursor: Option<f64>,
    selected: bool,
    /// The bytes at the top of the lane.
    full_scale: u64,
}

/// The replay cursor, drawn across a plot.
fn cursor_line(at_s: f64, colour: Color32) -> VLine {
    VLine::new("cursor", at_s).color(colour).width(1.5).allow_hover(false)
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

/// Puts each stream's lanes of a compared timeline together, in part
/// order, where the first of them is in `order`: the pairs keep the order
/// of a sort, and each stays a pair.
fn together(order: &mut Vec<usize>, timeline: &Timeline) {
    let mut by_stream: HashMap<StreamId, Vec<usize>> = HashMap::new();
    for &i in order.iter() {
        by_stream.entry(timeline.lanes[i].stream).or_default().push(i);
    }
    let sorted = std::mem::take(order);
    for i in sorted {
        if let Some(mut lanes) = by_stream.remove(&timeline.lanes[i].stream) {
            lanes.sort_by_key(|&l| timeline.lanes[l].part);
            order.extend(lanes);
        }
    }
}

/// The lane's text: which stream, how it ended, how long, why.
fn lane_header(ui: &mut Ui, timeline: &Timeline, lane: &Lane, now_s: f64, full: bool) {
    let outcome = timeline.outcome_name(lane);
    let title = detail::title(timeline, lane);
    let colours = palette::of(ui.visuals());
    let headline = RichText::new(format!("{title}  {outcome}")).color(colours.outcome(lane.outcome)).strong();
    // One line, cut with "…" (the whole of it on hover), so a long label
    // leaves room for the rest of the header.
    ui.add(egui::Label::new(headline).truncate());
    let detail = format!(
        "{} · {} attempt(s) · {:.2} s · {}",
        lane.target,
        lane.attempt_count,
        lane.elapsed_s(now_s),
        bytes_label(lane.total_bytes as f64)
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
                let tint = if lane.outcome == Some(Outcome::Failed) { colours.fired } else { colours.sleep_edge };
                ui.small(RichText::new(error).color(tint));
            }
        }
        None => {
            ui.small(format!("{detail}  {}", lane.last_error.as_deref().unwrap_or("")));
        }
    }
}

/// A lane's event ticks (output, lifecycle, keep-alive), at most one a
/// pixel column per kind, as one mesh of small bars over its plot: drawn
/// as plot markers, thousands of dots cost more than the rest of the lane.
fn draw_ticks(ui: &Ui, transform: &egui_plot::PlotTransform, lane: &Lane, range: TimeWindow, columns: usize) {
    let frame = *transform.frame();
    let mut mesh = egui::Mesh::default();
    let mut times = Vec::new();
    let [output, lifecycle, keepalive] = palette::of(ui.visuals()).ticks();
    for (ticks, (colour, tick)) in
        [(&lane.output_ticks, output), (&lane.lifecycle_ticks, lifecycle), (&lane.keepalive_ticks, keepalive)]
    {
        decimate::ticks(ticks, range.start_s, range.end_s, columns, &mut times);
        for t in times.drain(..) {
            let at = egui::pos2(transform.position_from_point_x(t), frame.bottom() - tick.above);
            mesh.add_colored_rect(Rect::from_center_size(at, egui::vec2(1.5, tick.height)), colour);
        }
    }
    if !mesh.is_empty() {
        ui.painter().with_clip_rect(frame.intersect(ui.clip_rect())).add(mesh);
    }
}

/// A text label a lane wants drawn: where, on which row, in what colour.
struct LaneLabel {
    at_s: f64,
    row: usize,
    text: String,
    colour: Color32,
    strong: bool,
}

/// Everything of one lane within `range`, reduced to `columns`; its bytes
/// line reaches the top at `full_scale` bytes.
fn draw_lane(
    plot: &mut egui_plot::PlotUi<'_>,
    lane: &Lane,
    outcome: &str,
    range: TimeWindow,
    columns: usize,
    now_s: f64,
    full_scale: u64,
) {
    let (x_min, x_max) = (range.start_s, range.end_s);
    let visible = |a: f64, b: f64| b >= x_min && a <= x_max;
    let colours = palette::of(&plot.ctx().global_style().visuals);
    let mut texts = Vec::new();
    for sleep in lane.sleeps.iter().filter(|s| visible(s.start_s, s.end_s)) {
        let (a, b) = (sleep.start_s, sleep.end_s);
        let rect = vec![[a, LANE_Y.0], [b, LANE_Y.0], [b, LANE_Y.1], [a, LANE_Y.1]];
        let area = Polygon::new("backoff", rect).fill_color(colours.sleep).stroke((1.0, colours.sleep_edge));
        plot.polygon(area.allow_hover(false));
        let text = format!("{} {} ({})", sleep.reason, duration_label(b - a), sleep.category);
        texts.push(LaneLabel { at_s: a, row: 0, text, colour: colours.sleep_edge, strong: false });
    }
    for mark in lane.attempts.iter().filter(|m| visible(m.at_s, m.at_s)) {
        plot.vline(VLine::new("attempt", mark.at_s).color(colours.attempt).width(1.0).allow_hover(false));
    }
    let mut points = Vec::new();
    if lane.total_bytes > 0 && full_scale > 0 {
        // Cumulative, so never falling: a column's highest point is its
        // last, and one point a column draws the same line.
        decimate::envelope(&lane.bytes, x_min, x_max, columns, &mut points);
        let scale = 1.0 / full_scale as f64;
        for p in &mut points {
            p.y *= scale;
        }
        if lane.outcome.is_none() && now_s > points.last().map_or(f64::MAX, |p| p.x) {
            points.push(PlotPoint::new(now_s, lane.total_bytes as f64 * scale));
        }
        let bytes = Line::new("bytes", PlotPoints::Owned(std::mem::take(&mut points)));
        // Already one point a column; egui_plot's banding would draw a
        // staircase as a filled band.
        plot.line(bytes.color(colours.bytes).width(1.5).allow_band(false));
    }
    for track in lane.timers.iter() {
        let (start, end) =
            (track.progress[0].x, if track.open { now_s } else { track.progress.last().map_or(0.0, |p| p.x) });
        if !visible(start, end) {
            continue;
        }
        // Resets closer than two columns apart show as the envelope of the
        // climbs (how near it came to firing), not a solid band of strokes.
        decimate::envelope(&track.progress, x_min, x_max, columns.div_ceil(2), &mut points);
        if track.open {
            points.push(PlotPoint::new(now_s, track.fraction_at(now_s)));
        }
        let (colour, style) = colours.timer(track.kind);
        let line = Line::new(format!("{} timer", track.kind), PlotPoints::Owned(std::mem::take(&mut points)));
        plot.line(line.color(colour).width(1.2).style(style).allow_band(false));
        let text = track.label();
        texts.push(LaneLabel { at_s: start.max(x_min), row: 0, text, colour, strong: false });
    }
    // Where our timers would have fired (observed: not acted on): the climb
    // a timer's line would have made to the top, in its colour and stroke,
    // to a hollow mark where a fired one's cross would be; labelled below
    // the mark, clear of it.
    for mark in lane.would_fire.iter().filter(|m| visible(m.at_s - m.budget_s, m.at_s)) {
        let (colour, style) = colours.timer(mark.timer);
        let name = mark.label();
        let climb = PlotPoints::new(vec![[mark.at_s - mark.budget_s, 0.0], [mark.at_s, 1.0]]);
        plot.line(Line::new(name.clone(), climb).color(colour).width(1.2).style(style).allow_band(false));
        let at = vec![[mark.at_s, 1.0]];
        plot.points(Points::new(name.clone(), at).color(colour).radius(6.0).shape(shape::WOULD_FIRE).filled(false));
        texts.push(LaneLabel { at_s: mark.at_s, row: 1, text: name, colour, strong: false });
    }
    // Point events: (marks, name, height, colour, radius, shape, label row).
    let kinds = [
        (&lane.fired, "fired", 1.0, colours.fired, 6.0, shape::FIRED, None),
        // Where a fired timer's cross would be, in the colour of a verdict
        // our lateness decided.
        (&lane.held, "held", 1.0, colours.untrusted, 6.0, shape::HELD, Some(1)),
        (&lane.low_buckets, "rate limit low", 0.9, colours.low_bucket, 5.0, shape::LOW_BUCKET, None),
        (&lane.bursts, "burst", 0.5, colours.burst, 8.0, shape::BURST, Some(1)),
        (&lane.hops, "failover", 0.5, colours.hop, 6.0, shape::HOP, Some(1)),
        (&lane.cuts, "cut", 0.8, colours.fired, 6.0, shape::CUT, Some(1)),
        // Where a fired timer's cross would be (the agent's own timeout,
        // often), in the colour of the cancel it makes.
        (&lane.agent_gone, "agent gone", 1.0, colours.cancelled, 6.0, shape::AGENT_GONE, Some(1)),
    ];
    for (marks, name, y, colour, radius, marker, row) in kinds {
        let shown: Vec<&super::lanes::Mark> = marks.iter().filter(|m| visible(m.at_s, m.at_s)).collect();
        if shown.is_empty() {
            continue;
        }
        if let Some(row) = row {
            let strong = false;
            texts.extend(shown.iter().map(|m| LaneLabel { at_s: m.at_s, row, text: m.text.clone(), colour, strong }));
        }
        let at: Vec<[f64; 2]> = shown.iter().map(|m| [m.at_s, y]).collect();
        plot.points(Points::new(name, at).color(colour).radius(radius).shape(marker).filled(true));
    }
    if let Some(end) = lane.finished_s.filter(|&t| visible(t, t)) {
        let text = format!("■ {outcome}");
        texts.push(LaneLabel { at_s: end, row: 2, text, colour: colours.outcome(lane.outcome), strong: true });
    }
    draw_labels(plot, &texts, range, columns);
}

/// Draws `texts` where [`labels::place`] puts them: none overprints
/// another; one that found no room is counted in its neighbour's `+N`.
fn draw_labels(plot: &mut egui_plot::PlotUi<'_>, texts: &[LaneLabel], range: TimeWindow, columns: usize) {
    let per_pixel = range.per_pixel(columns as f32);
    let wanted: Vec<Wanted> = texts
        .iter()
        .map(|t| Wanted {
            x: ((t.at_s - range.start_s) / per_pixel) as f32,
            width: t.text.chars().count() as f32 * SMALL_CHAR_PIXELS,
            row: t.row,
        })
        .collect();
    let placed = labels::place(&wanted, LABEL_ROWS.len());
    let counts = labels::folded_counts(&placed);
    for ((label, placed), count) in texts.iter().zip(&placed).zip(counts) {
        let Placed::Row(row) = *placed else { continue };
        let text = if count > 0 { format!("{} +{count}", label.text) } else { label.text.clone() };
        let mut rich = RichText::new(text).small().color(label.colour);
        if label.strong {
            rich = rich.strong();
        }
        let at = PlotPoint::new(label.at_s, LABEL_ROWS[row]);
        plot.text(Text::new("label", at, rich).anchor(egui::Align2::LEFT_TOP).allow_hover(false));
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
    fn a_run_going_on_says_how_many_of_its_calls_are_done_running_and_queued() {
        let summary = Summary { ok: 40, failed: 272, running: 100, ..Summary::default() };
        let live = Some(Progress { planned: 2000, live: true });
        let text = summary_text(&summary, live);
        assert!(
            text.starts_with(
                "312 of 2,000 done: 40 ok · 0 partial · 272 failed · 0 cancelled · 100 running · 1,588 queued   "
            ),
            "{text}"
        );
        let stopped = Summary { running: 0, cancelled: 100, ..summary };
        let text = summary_text(&stopped, Some(Progress { planned: 2000, live: false }));
        assert!(
            text.starts_with(
                "412 of 2,000 done: 40 ok · 0 partial · 272 failed · 100 cancelled · 0 running · 1,588 not started"
            ),
            "{text}"
        );
        // All done, or no plan to measure against: the counts alone.
        let done = Summary { ok: 4, ..Summary::default() };
        for progress in [Some(Progress { planned: 4, live: true }), None] {
            assert!(
                summary_text(&done, progress)
                    .starts_with("4 ok · 0 partial · 0 failed · 0 cancelled · 0 running   p50")
            );
        }
        assert_eq!([0, 999, 1000, 1588, 1_234_567].map(grouped), ["0", "999", "1,000", "1,588", "1,234,567"]);
    }

    /// Two runs of two streams whose verdicts swap: sorted worst first,
    /// each stream's lanes stay together, run by run, and the summary
    /// names the run each line is for.
    #[test]
    fn compared_runs_keep_each_streams_pair_together_under_any_sort() {
        use crate::core::event::{Event, EventKind};
        use crate::core::failover::Target;
        use crate::diagnosis::Severity;
        use std::time::Duration;

        let verdict = |severity| Diagnosis::bare(VerdictKind::Healthy, severity);
        let side = |label: &str, failed: StreamId| {
            let mut events = Vec::new();
            for stream in 0..2 {
                let at = |ms| Duration::from_millis(ms);
                let start = EventKind::CallStarted { target: Target::new("sim", "m"), context_tokens: None };
                let outcome = if stream == failed { Outcome::Failed } else { Outcome::Ok };
                events.push(Event { at: at(0), stream, attempt: 0, kind: start });
                let end = EventKind::Finished { outcome, attempts: 1, stop_reason: None };
                events.push(Event { at: at(100), stream, attempt: 0, kind: end });
            }
            let severity = |s| if s == failed { Severity::Failed } else { Severity::Ok };
            let verdicts = (0..2).map(|s| (s, verdict(severity(s)))).collect();
            super::super::lanes::Side { label: label.to_owned(), events, verdicts }
        };
        let timeline = Timeline::paired([side("run 1", 1), side("run 22", 0)]);
        let lanes = |order: Vec<usize>| -> Vec<(usize, StreamId)> {
            order.into_iter().map(|i| (timeline.lanes[i].part, timeline.lanes[i].stream)).collect()
        };
        for sort in [SortBy::Start, SortBy::Outcome, SortBy::Elapsed, SortBy::Verdict] {
            let view = TimelineView { sort, ..TimelineView::default() };
            let order = lanes(view.visible_lanes(&timeline, 1.0));
            for pair in order.chunks(2) {
                assert_eq!((pair[0].0, pair[1].0, pair[0].1), (0, 1, pair[1].1), "{sort:?}: {order:?}");
            }
        }
        // Each run has one failure: the pair of the first lane sorted worst
        // (run 22's stream 0) leads.
        let view = TimelineView { sort: SortBy::Verdict, ..TimelineView::default() };
        assert_eq!(lanes(view.visible_lanes(&timeline, 1.0)), [(0, 0), (1, 0), (0, 1), (1, 1)]);

        // A replay scrubbed back before the lanes' ends sorts them by the
        // verdicts they end with, as at the end: nothing moves.
        let mut scrubbed = Timeline::new();
        let part = scrubbed.add_part("run 1", 0.0);
        for stream in 0..3 {
            let start = EventKind::CallStarted { target: Target::new("sim", "m"), context_tokens: None };
            scrubbed.ingest(part, &Event { at: Duration::ZERO, stream, attempt: 0, kind: start });
            let severity = if stream == 2 { Severity::Failed } else { Severity::Ok };
            scrubbed.set_verdict(part, stream, verdict(severity));
        }
        let order = view.visible_lanes(&scrubbed, 0.5);
        assert_eq!(order.first().map(|&i| scrubbed.lanes[i].stream), Some(2), "{order:?}");
    }

    #[test]
    fn thresholds_and_byte_counts_read_as_people_write_them() {
        let durations = [(0.4, "400 ms"), (1.0, "1 s"), (1.5, "1.5 s"), (30.0, "30 s"), (0.0126, "13 ms")];
        for (s, text) in durations {
            assert_eq!(duration_label(s), text);
        }
        let sizes = [(0.0, "0 B"), (999.0, "999 B"), (12_345.0, "12.3 kB"), (4_100_000.0, "4.1 MB")];
        for (b, text) in sizes {
            assert_eq!(bytes_label(b), text);
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
