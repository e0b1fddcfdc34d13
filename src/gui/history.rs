//! The history view: the stored runs as a sortable, filterable table;
//! opening one (its events become a replay with each stream's verdict,
//! built off the UI thread);
//! and comparing two (tunables that differ, outcomes side by side, streams
//! whose outcome changed). Every database read runs on a background
//! thread and is picked up by a later frame.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, channel};

use egui::{Color32, RichText, Ui};
use egui_extras::{Column, TableBuilder};
use serde::{Deserialize, Serialize};

use super::replay::Replay;
use crate::diagnosis::RecordedRun;
use crate::store::runs::{RunRecord, RunSummary, tunables_diff, utc_minute};
use crate::store::{RunId, Store};

/// The table's columns, for sorting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SortColumn {
    /// Start time.
    #[default]
    Started,
    /// Label.
    Label,
    /// Scenario or providers.
    Source,
    /// Failed streams.
    Failed,
    /// Median elapsed.
    P50,
    /// 99th-percentile elapsed.
    P99,
    /// Retries.
    Retries,
}

/// A stored run opened as a timeline.
#[derive(Debug)]
pub struct OpenedRun {
    /// Its id.
    pub id: RunId,
    /// A title: id, label, scenario.
    pub title: String,
    /// Its events, ready to play back.
    pub replay: Replay,
}

/// Two runs side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The first run.
    pub a: RunRecord,
    /// The second run.
    pub b: RunRecord,
    /// Tunables that differ: name → (a, b).
    pub tunables: BTreeMap<String, (Option<serde_json::Value>, Option<serde_json::Value>)>,
    /// Streams whose outcome differs: (index, outcome in a, outcome in b).
    pub changed_streams: Vec<(u64, String, String)>,
}

/// The view's state; filter and sort persist between launches.
#[derive(Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryView {
    /// Show only runs whose label, scenario or providers contain this.
    pub filter: String,
    /// The sort column.
    pub sort: SortColumn,
    /// Descending order.
    pub descending: bool,
    #[serde(skip)]
    runs: Vec<RunSummary>,
    #[serde(skip)]
    selected: [Option<RunId>; 2],
    #[serde(skip)]
    comparison: Option<Comparison>,
    #[serde(skip)]
    status: Option<String>,
    #[serde(skip)]
    pending: Pending,
}

impl Default for HistoryView {
    /// Newest first.
    fn default() -> Self {
        HistoryView {
            filter: String::new(),
            sort: SortColumn::Started,
            descending: true,
            runs: Vec::new(),
            selected: [None; 2],
            comparison: None,
            status: None,
            pending: Pending::default(),
        }
    }
}

#[derive(Debug, Default)]
struct Pending {
    list: Option<Receiver<Result<Vec<RunSummary>, String>>>,
    open: Option<Receiver<Result<OpenedRun, String>>>,
    compare: Option<Receiver<Result<Comparison, String>>>,
}

/// Runs `job` on a new thread; its answer arrives on the returned channel
/// (then `wake` is called so the UI repaints).
fn background<T: Send + 'static>(
    job: impl FnOnce() -> Result<T, String> + Send + 'static,
    wake: impl Fn() + Send + 'static,
) -> Receiver<Result<T, String>> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(job());
        wake();
    });
    rx
}

/// Opens the database for reading the history, without creating one.
fn open_store(db: &Option<PathBuf>) -> Result<Option<Store>, String> {
    match db {
        Some(path) if path.exists() => Store::open(path).map(Some).map_err(|e| e.to_string()),
        Some(_) => Ok(None),
        None => Err("no platform data directory: set STALLSCOPE_DB to a database file".to_owned()),
    }
}

impl HistoryView {
    /// Whether a background read is in flight.
    pub fn is_loading(&self) -> bool {
        self.pending.list.is_some() || self.pending.open.is_some() || self.pending.compare.is_some()
    }

    /// Reloads the list of runs in the background.
    pub fn refresh(&mut self, db: &Option<PathBuf>, ctx: &egui::Context) {
        let db = db.clone();
        let ctx = ctx.clone();
        self.pending.list = Some(background(
            move || {
                Ok(open_store(&db)?.map(|s| s.list_runs()).transpose().map_err(|e| e.to_string())?.unwrap_or_default())
            },
            move || ctx.request_repaint(),
        ));
    }

    /// Takes in whatever background reads finished; returns a run that
    /// finished opening.
    pub fn poll(&mut self) -> Option<OpenedRun> {
        if let Some(result) = take(&mut self.pending.list) {
            match result {
                Ok(runs) => self.runs = runs,
                Err(e) => self.status = Some(e),
            }
        }
        if let Some(result) = take(&mut self.pending.compare) {
            match result {
                Ok(comparison) => self.comparison = Some(comparison),
                Err(e) => self.status = Some(e),
            }
        }
        match take(&mut self.pending.open)? {
            Ok(opened) => {
                self.status = Some(format!("opened {} in the Live view", opened.title));
                Some(opened)
            }
            Err(e) => {
                self.status = Some(e);
                None
            }
        }
    }

    fn open(&mut self, id: RunId, title: String, db: &Option<PathBuf>, ctx: &egui::Context) {
        let db = db.clone();
        let ctx = ctx.clone();
        self.status = Some(format!("opening run {id}…"));
        self.pending.open = Some(background(
            move || {
                let store = open_store(&db)?.ok_or("the database is gone")?;
                let events = store.run_events(id).map_err(|e| e.to_string())?;
                // Verdicts read retry denials against the run's own limits.
                let record = store.run(id).map_err(|e| e.to_string())?.ok_or_else(|| format!("no run {id}"))?;
                let recorded = RecordedRun::new(&record.tunables, &record.dropped_by_stream);
                let collector = recorded.collector();
                events.iter().for_each(|e| collector.push(e));
                let mut replay = Replay::new(title.clone(), events);
                replay.set_verdicts(recorded.diagnoses(&collector));
                Ok(OpenedRun { id, title, replay })
            },
            move || ctx.request_repaint(),
        ));
    }

    fn compare(&mut self, a: RunId, b: RunId, db: &Option<PathBuf>, ctx: &egui::Context) {
        let db = db.clone();
        let ctx = ctx.clone();
        self.pending.compare = Some(background(
            move || {
                let store = open_store(&db)?.ok_or("the database is gone")?;
                let read = |id| -> Result<RunRecord, String> {
                    store.run(id).map_err(|e| e.to_string())?.ok_or_else(|| format!("no run {id}"))
                };
                let (ra, rb) = (read(a)?, read(b)?);
                let outcomes = |id| -> Result<Vec<(u64, String)>, String> {
                    let report = store.run_report(id).map_err(|e| e.to_string())?;
                    Ok(report
                        .map(|r| r.streams.iter().map(|s| (s.index, s.outcome.to_owned())).collect())
                        .unwrap_or_default())
                };
                let (oa, ob): (BTreeMap<_, _>, BTreeMap<_, _>) =
                    (outcomes(a)?.into_iter().collect(), outcomes(b)?.into_iter().collect());
                let missing = || "-".to_owned();
                let changed_streams = oa
                    .keys()
                    .chain(ob.keys())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .filter_map(|i| {
                        let (x, y) =
                            (oa.get(i).cloned().unwrap_or_else(missing), ob.get(i).cloned().unwrap_or_else(missing));
                        (x != y).then_some((*i, x, y))
                    })
                    .collect();
                let tunables = tunables_diff(&ra.tunables, &rb.tunables);
                Ok(Comparison { a: ra, b: rb, tunables, changed_streams })
            },
            move || ctx.request_repaint(),
        ));
    }

    /// Draws the table and the comparison.
    pub fn ui(&mut self, ui: &mut Ui, db: &Option<PathBuf>) {
        let ctx = ui.ctx().clone();
        ui.horizontal(|ui| {
            if ui.button("Refresh").clicked() {
                self.refresh(db, &ctx);
            }
            let label = ui.label("Filter runs");
            ui.add(egui::TextEdit::singleline(&mut self.filter).desired_width(180.0)).labelled_by(label.id);
            let [a, b] = self.selected;
            let ready = matches!((a, b), (Some(a), Some(b)) if a != b);
            let text = match (a, b) {
                (Some(a), Some(b)) => format!("Compare run {a} with run {b}"),
                _ => "Compare (pick A and B)".to_owned(),
            };
            if ui.add_enabled(ready, egui::Button::new(text)).clicked()
                && let (Some(a), Some(b)) = (a, b)
            {
                self.compare(a, b, db, &ctx);
            }
            if self.is_loading() {
                ui.spinner();
            }
            ui.label(db.as_ref().map_or_else(|| "no database".to_owned(), |p| p.display().to_string()));
        });
        if let Some(status) = &self.status {
            ui.label(status);
        }
        if let Some(comparison) = &self.comparison {
            let mut open = true;
            egui::Window::new("Comparison")
                .open(&mut open)
                .default_width(520.0)
                .show(ui.ctx(), |ui| comparison_ui(ui, comparison));
            if !open {
                self.comparison = None;
            }
        }
        let rows = self.sorted_rows();
        if rows.is_empty() {
            ui.label(if self.runs.is_empty() {
                "No stored runs yet: press Run in the Live view."
            } else {
                "No run matches the filter."
            });
            return;
        }
        let mut clicked_sort = None;
        let mut open_run = None;
        TableBuilder::new(ui)
            .id_salt("history-table")
            .striped(true)
            .resizable(true)
            .column(Column::exact(28.0))
            .column(Column::exact(28.0))
            .column(Column::initial(44.0).at_least(30.0))
            .column(Column::initial(130.0).at_least(60.0))
            .column(Column::initial(120.0).at_least(40.0))
            .column(Column::initial(180.0).at_least(60.0))
            .column(Column::initial(90.0).at_least(60.0))
            .column(Column::initial(130.0).at_least(60.0))
            .column(Column::initial(70.0).at_least(40.0))
            .column(Column::initial(70.0).at_least(40.0))
            .column(Column::initial(60.0).at_least(40.0))
            .column(Column::remainder().at_least(60.0))
            .header(22.0, |mut header| {
                header.col(|ui| {
                    ui.strong("A");
                });
                header.col(|ui| {
                    ui.strong("B");
                });
                header.col(|ui| {
                    ui.strong("ID");
                });
                for (name, column) in [
                    ("Started (UTC)", SortColumn::Started),
                    ("Label", SortColumn::Label),
                    ("Scenario / providers", SortColumn::Source),
                ] {
                    header.col(|ui| {
                        if ui.button(self.sort_title(name, column)).clicked() {
                            clicked_sort = Some(column);
                        }
                    });
                }
                header.col(|ui| {
                    ui.strong("Status");
                });
                header.col(|ui| {
                    if ui.button(self.sort_title("ok/part/fail/canc", SortColumn::Failed)).clicked() {
                        clicked_sort = Some(SortColumn::Failed);
                    }
                });
                for (name, column) in
                    [("p50", SortColumn::P50), ("p99", SortColumn::P99), ("Retries", SortColumn::Retries)]
                {
                    header.col(|ui| {
                        if ui.button(self.sort_title(name, column)).clicked() {
                            clicked_sort = Some(column);
                        }
                    });
                }
                header.col(|ui| {
                    ui.strong("");
                });
            })
            .body(|body| {
                body.rows(22.0, rows.len(), |mut row| {
                    let run = &self.runs[rows[row.index()]];
                    let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0} ms"));
                    for slot in 0..2 {
                        row.col(|ui| {
                            let mut chosen = self.selected[slot] == Some(run.id);
                            let name = format!("{} {}", ["A", "B"][slot], run.id);
                            let response = ui.add(egui::Checkbox::without_text(&mut chosen));
                            // The column header says A or B; a screen reader needs the run too.
                            response
                                .widget_info(|| egui::WidgetInfo::selected(egui::Role::CheckBox, true, chosen, &name));
                            if response.on_hover_text(&name).changed() {
                                self.selected[slot] = chosen.then_some(run.id);
                            }
                        });
                    }
                    row.col(|ui| {
                        ui.label(run.id.to_string());
                    });
                    row.col(|ui| {
                        ui.label(utc_minute(run.started_at_ms));
                    });
                    row.col(|ui| {
                        ui.label(run.label.as_deref().unwrap_or(""));
                    });
                    row.col(|ui| {
                        ui.label(source(run));
                    });
                    row.col(|ui| {
                        ui.label(run.status.name());
                    });
                    row.col(|ui| {
                        let o = &run.outcomes;
                        let colour = if o.failed > 0 { Color32::LIGHT_RED } else { ui.visuals().text_color() };
                        ui.label(
                            RichText::new(format!("{}/{}/{}/{}", o.ok, o.partial, o.failed, o.cancelled)).color(colour),
                        );
                    });
                    row.col(|ui| {
                        ui.label(ms(run.p50_ms));
                    });
                    row.col(|ui| {
                        ui.label(ms(run.p99_ms));
                    });
                    row.col(|ui| {
                        ui.label(run.retries.map_or("-".to_owned(), |n| n.to_string()));
                    });
                    row.col(|ui| {
                        if ui.button(format!("Open run {}", run.id)).clicked() {
                            open_run = Some((run.id, title(run)));
                        }
                    });
                });
            });
        if let Some(column) = clicked_sort {
            if self.sort == column {
                self.descending = !self.descending;
            } else {
                (self.sort, self.descending) = (column, true);
            }
        }
        if let Some((id, title)) = open_run {
            self.open(id, title, db, &ctx);
        }
    }

    fn sort_title(&self, name: &str, column: SortColumn) -> String {
        match (self.sort == column, self.descending) {
            (true, true) => format!("{name} ▼"),
            (true, false) => format!("{name} ▲"),
            (false, _) => name.to_owned(),
        }
    }

    /// Indices into the runs, filtered and sorted.
    fn sorted_rows(&self) -> Vec<usize> {
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<usize> = (0..self.runs.len())
            .filter(|&i| {
                let run = &self.runs[i];
                needle.is_empty()
                    || run.label.as_deref().unwrap_or("").to_lowercase().contains(&needle)
                    || source(run).to_lowercase().contains(&needle)
                    || run.status.name().contains(&needle)
            })
            .collect();
        let runs = &self.runs;
        let key = |i: usize| -> (f64, String) {
            let run = &runs[i];
            let none = f64::NEG_INFINITY;
            match self.sort {
                SortColumn::Started => (run.started_at_ms as f64, String::new()),
                SortColumn::Label => (0.0, run.label.clone().unwrap_or_default()),
                SortColumn::Source => (0.0, source(run)),
                SortColumn::Failed => (run.outcomes.failed as f64, String::new()),
                SortColumn::P50 => (run.p50_ms.unwrap_or(none), String::new()),
                SortColumn::P99 => (run.p99_ms.unwrap_or(none), String::new()),
                SortColumn::Retries => (run.retries.map_or(none, |r| r as f64), String::new()),
            }
        };
        rows.sort_by(|&a, &b| {
            let (ka, kb) = (key(a), key(b));
            let order = ka.0.total_cmp(&kb.0).then_with(|| ka.1.cmp(&kb.1)).then_with(|| runs[a].id.cmp(&runs[b].id));
            if self.descending { order.reverse() } else { order }
        });
        rows
    }
}

fn take<T>(pending: &mut Option<Receiver<T>>) -> Option<T> {
    let answer = pending.as_ref()?.try_recv().ok()?;
    *pending = None;
    Some(answer)
}

fn source(run: &RunSummary) -> String {
    run.scenario.clone().unwrap_or_else(|| run.providers.join(", "))
}

fn title(run: &RunSummary) -> String {
    let mut title = format!("run {}", run.id);
    for part in [run.label.as_deref(), run.scenario.as_deref()].into_iter().flatten() {
        title.push_str(&format!(" · {part}"));
    }
    title
}

fn comparison_ui(ui: &mut Ui, c: &Comparison) {
    let (a, b) = (c.a.summary.id, c.b.summary.id);
    ui.heading(format!("Run {a} → run {b}"));
    egui::Grid::new("compare-outcomes").striped(true).show(ui, |ui| {
        for cell in ["", "ok", "partial", "failed", "cancelled", "p50", "p99", "retries"] {
            ui.strong(cell);
        }
        ui.end_row();
        for record in [&c.a, &c.b] {
            let s = &record.summary;
            let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0} ms"));
            ui.label(format!("run {}", s.id));
            for n in [s.outcomes.ok, s.outcomes.partial, s.outcomes.failed, s.outcomes.cancelled] {
                ui.label(n.to_string());
            }
            ui.label(ms(s.p50_ms));
            ui.label(ms(s.p99_ms));
            ui.label(s.retries.map_or("-".to_owned(), |r| r.to_string()));
            ui.end_row();
        }
    });
    ui.separator();
    ui.strong(format!("Tunables that differ: {}", c.tunables.len()));
    let show = |v: &Option<serde_json::Value>| v.as_ref().map_or("-".to_owned(), ToString::to_string);
    egui::Grid::new("compare-tunables").striped(true).show(ui, |ui| {
        for (name, (va, vb)) in &c.tunables {
            ui.monospace(name);
            ui.label(show(va));
            ui.label("→");
            ui.label(show(vb));
            ui.end_row();
        }
    });
    ui.separator();
    ui.strong(format!("Streams whose outcome changed: {}", c.changed_streams.len()));
    for (index, x, y) in c.changed_streams.iter().take(200) {
        ui.label(format!("#{index}: {x} → {y}"));
    }
}
