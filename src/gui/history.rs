//! The history view: the stored runs as a sortable, filterable table that
//! scrolls both ways, a batch of runs started together as one row that
//! unfolds into its parts; from each row, opening the run (its events
//! become a replay with each stream's verdict, built off the UI thread),
//! running it again with its settings, exporting its Perfetto trace,
//! sending it as OpenTelemetry traces to an OTLP receiver and
//! deleting it (after a confirmation); tuning the runs picked together
//! ([`super::tune_runs`]); and comparing two runs (every
//! figure side by side with its change and unit, tunables that differ,
//! streams whose outcome changed, and both runs' lanes stream by stream on
//! one axis in the Live view). Every database access runs on a
//! background thread and is picked up by a later frame.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, channel};

use egui::{RichText, Ui};
use egui_extras::{Column, TableBuilder};
use serde::{Deserialize, Serialize};

use super::form::labelled;
use super::lanes::{Side, Timeline};
use super::live::Choice;
use super::replay::Replay;
use super::save::{Overwrite, full_path};
use super::saved_url;
use super::tune_runs::TuneRuns;
use crate::core::redact;
use crate::diagnosis::RecordedRun;
use crate::export::otlp;
use crate::sim::builtin_names;
use crate::store::runs::{Outcomes, RunRecord, RunStatus, RunSummary, tunables_diff, utc_second};
use crate::store::{OutcomeChange, RunId, Store};
use crate::tunables::{Source, Tunables};

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

/// What "Run again with these settings" starts: the stored run's source,
/// size and explicitly set tunables.
#[derive(Debug, Clone, PartialEq)]
pub struct RunAgain {
    /// The run it repeats.
    pub from: RunId,
    /// What to call.
    pub choice: Choice,
    /// Calls per part.
    pub requests: u32,
    /// Calls at once.
    pub concurrency: u32,
    /// Tunables the run had set explicitly (not by default, its scenario
    /// or the config file, which apply again by themselves), as edits.
    pub edits: BTreeMap<String, String>,
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
    /// Streams whose outcome differs.
    pub changed_streams: Vec<OutcomeChange>,
}

/// One line of the table: a run on its own, or a batch with its parts.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    /// The run, or the batch summed up.
    summary: RunSummary,
    /// The batch's runs (indices into the runs), oldest first; empty for a
    /// run on its own.
    parts: Vec<usize>,
}

/// A row drawn: an entry, or a part of an unfolded batch.
#[derive(Debug, Clone, Copy)]
enum Row {
    /// An entry.
    Entry(usize),
    /// A run of a batch.
    Part(usize),
}

/// The view's state; filter, sort and export folder persist between
/// launches.
#[derive(Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryView {
    /// Show only runs whose label, scenario, providers or status contain this.
    pub filter: String,
    /// The sort column.
    pub sort: SortColumn,
    /// Descending order.
    pub descending: bool,
    /// Where traces are exported, `run-ID.trace.json` each.
    pub export_dir: String,
    /// The OTLP/HTTP receiver runs are sent to as OpenTelemetry traces.
    /// Saved with its password and query masked ([`saved_url`]).
    #[serde(serialize_with = "saved_url::serialize")]
    pub otlp_endpoint: String,
    #[serde(skip)]
    runs: Vec<RunSummary>,
    #[serde(skip)]
    unfolded: BTreeSet<i64>,
    #[serde(skip)]
    selected: [Option<RunId>; 2],
    #[serde(skip)]
    tuning: TuneRuns,
    #[serde(skip)]
    comparison: Option<Comparison>,
    #[serde(skip)]
    deleting: Option<Vec<RunId>>,
    #[serde(skip)]
    overwrite: Overwrite<RunId>,
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
            export_dir: ".".to_owned(),
            otlp_endpoint: "http://127.0.0.1:6006".to_owned(),
            runs: Vec::new(),
            unfolded: BTreeSet::new(),
            selected: [None; 2],
            tuning: TuneRuns::default(),
            comparison: None,
            deleting: None,
            overwrite: Overwrite::default(),
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
    compared: Option<Receiver<Result<(String, Timeline), String>>>,
    again: Option<Receiver<Result<RunAgain, String>>>,
    /// Deletions and exports: what was done, in words.
    done: Option<Receiver<Result<String, String>>>,
}

/// Runs `job` over the database `db` on a new thread; its answer arrives
/// on the returned channel, and the UI repaints to pick it up.
fn background<T: Send + 'static>(
    db: &Option<PathBuf>,
    ctx: &egui::Context,
    job: impl FnOnce(&Option<PathBuf>) -> Result<T, String> + Send + 'static,
) -> Receiver<Result<T, String>> {
    let (db, ctx) = (db.clone(), ctx.clone());
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(job(&db));
        ctx.request_repaint();
    });
    rx
}

/// Opens the database for reading the history, without creating one.
fn open_store(db: &Option<PathBuf>) -> Result<Option<Store>, String> {
    match db {
        Some(path) if path.exists() => Store::open(path).map(Some).map_err(|e| e.to_string()),
        Some(_) => Ok(None),
        None => Err("no platform data directory: start with --db PATH or set STALLSCOPE_DB".to_owned()),
    }
}

/// The store of a run that must exist.
fn existing_store(db: &Option<PathBuf>) -> Result<Store, String> {
    open_store(db)?.ok_or_else(|| "the database is gone".to_owned())
}

fn read_record(store: &Store, id: RunId) -> Result<RunRecord, String> {
    store.run(id).map_err(|e| e.to_string())?.ok_or_else(|| format!("no run {id}"))
}

/// Run `id`'s events and each stream's verdict, as lanes labelled `label`.
fn stored_side(store: &Store, id: RunId, label: String) -> Result<Side, String> {
    let events = store.run_events(id).map_err(|e| e.to_string())?;
    // Verdicts read retry denials against the run's own limits.
    let record = read_record(store, id)?;
    let recorded = RecordedRun::new(&record.tunables, &record.dropped_by_stream);
    let verdicts = recorded.diagnose_all(&events).into_iter().collect();
    Ok(Side { label, events, verdicts })
}

impl HistoryView {
    /// How many runs the last read of the database found.
    pub fn stored(&self) -> usize {
        self.runs.len()
    }

    /// Whether a background read is in flight.
    pub fn is_loading(&self) -> bool {
        let p = &self.pending;
        p.list.is_some()
            || p.open.is_some()
            || p.compare.is_some()
            || p.compared.is_some()
            || p.again.is_some()
            || p.done.is_some()
            || self.tuning.is_running()
    }

    /// Reloads the list of runs in the background.
    pub fn refresh(&mut self, db: &Option<PathBuf>, ctx: &egui::Context) {
        self.pending.list = Some(background(db, ctx, move |db| {
            Ok(open_store(db)?.map(|s| s.list_runs()).transpose().map_err(|e| e.to_string())?.unwrap_or_default())
        }));
    }

    /// Takes in whatever background work finished; returns a run that
    /// finished opening, or settings to run again.
    pub fn poll(&mut self, db: &Option<PathBuf>, ctx: &egui::Context) -> Option<Picked> {
        if let Some(result) = take(&mut self.pending.list) {
            match result {
                Ok(runs) => self.runs = runs,
                Err(e) => self.status = Some(e),
            }
        }
        if let Some(error) = self.tuning.poll() {
            self.status = Some(error);
        }
        if let Some(result) = take(&mut self.pending.compare) {
            match result {
                Ok(comparison) => self.comparison = Some(comparison),
                Err(e) => self.status = Some(e),
            }
        }
        if let Some(result) = take(&mut self.pending.done) {
            self.status = Some(result.unwrap_or_else(|e| e));
            self.refresh(db, ctx);
        }
        if let Some(result) = take(&mut self.pending.compared) {
            match result {
                Ok((title, timeline)) => {
                    self.status = Some(format!("showing {title} in the Live view"));
                    return Some(Picked::Compared { title, timeline });
                }
                Err(e) => self.status = Some(e),
            }
        }
        if let Some(result) = take(&mut self.pending.again) {
            match result {
                Ok(again) => {
                    self.status = Some(format!("running run {} again in the Live view", again.from));
                    return Some(Picked::Again(again));
                }
                Err(e) => self.status = Some(e),
            }
        }
        match take(&mut self.pending.open)? {
            Ok(opened) => {
                self.status = Some(format!("opened {} in the Live view", opened.title));
                Some(Picked::Open(Box::new(opened)))
            }
            Err(e) => {
                self.status = Some(e);
                None
            }
        }
    }

    fn open(&mut self, id: RunId, title: String, db: &Option<PathBuf>, ctx: &egui::Context) {
        self.status = Some(format!("opening run {id}…"));
        self.pending.open = Some(background(db, ctx, move |db| {
            let side = stored_side(&existing_store(db)?, id, title.clone())?;
            let mut replay = Replay::new(title.clone(), side.events);
            replay.set_verdicts(side.verdicts.into_iter().collect());
            Ok(OpenedRun { id, title, replay })
        }));
    }

    /// Lays out runs `a` and `b` stream by stream on one axis.
    fn compare_lanes(&mut self, a: RunId, b: RunId, db: &Option<PathBuf>, ctx: &egui::Context) {
        self.status = Some(format!("reading runs {a} and {b}…"));
        self.pending.compared = Some(background(db, ctx, move |db| {
            let store = existing_store(db)?;
            let sides = [stored_side(&store, a, format!("run {a}"))?, stored_side(&store, b, format!("run {b}"))?];
            Ok((format!("runs {a} and {b}"), Timeline::paired(sides)))
        }));
    }

    fn run_again(&mut self, id: RunId, batch: bool, db: &Option<PathBuf>, ctx: &egui::Context) {
        self.pending.again =
            Some(background(db, ctx, move |db| run_again(&read_record(&existing_store(db)?, id)?, batch)));
    }

    fn delete(&mut self, ids: Vec<RunId>, db: &Option<PathBuf>, ctx: &egui::Context) {
        self.selected = self.selected.map(|s| s.filter(|id| !ids.contains(id)));
        self.tuning.forget(&ids);
        self.pending.done = Some(background(db, ctx, move |db| {
            let mut store = existing_store(db)?;
            for id in &ids {
                store.delete_run(*id).map_err(|e| e.to_string())?;
            }
            Ok(match ids[..] {
                [id] => format!("deleted run {id}"),
                _ => format!("deleted the {} runs of the batch", ids.len()),
            })
        }));
    }

    fn export(&mut self, id: RunId, path: PathBuf, db: &Option<PathBuf>, ctx: &egui::Context) {
        self.status = Some(format!("exporting run {id}…"));
        self.pending.done = Some(background(db, ctx, move |db| {
            let trace = crate::export::run_trace(&existing_store(db)?, id).map_err(|e| e.to_string())?;
            let text = serde_json::to_string(&trace).map_err(|e| e.to_string())? + "\n";
            std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(format!("wrote run {id}'s trace to {} (open it at ui.perfetto.dev)", path.display()))
        }));
    }

    /// Sends runs `ids` to the OTLP endpoint; within the exporter's
    /// timeouts, so a receiver that never answers ends in an error shown.
    fn send_traces(&mut self, ids: Vec<RunId>, db: &Option<PathBuf>, ctx: &egui::Context) {
        if let Some(why) = saved_url::masked("the OTLP endpoint", self.otlp_endpoint.trim()) {
            self.status = Some(why);
            return;
        }
        let destination = otlp::Destination::new(self.otlp_endpoint.trim());
        self.status = Some(format!("sending traces to {}…", redact::url(&destination.endpoint)));
        self.pending.done = Some(background(db, ctx, move |db| {
            let sent = otlp::send_runs(&existing_store(db)?, &ids, &destination).map_err(|e| e.to_string())?;
            let runs = match ids[..] {
                [id] => format!("run {id}"),
                _ => format!("the {} runs of the batch", ids.len()),
            };
            Ok(format!("sent {runs} to {}: {} calls, {} spans", sent.url, sent.calls, sent.spans))
        }));
    }

    fn compare(&mut self, a: RunId, b: RunId, db: &Option<PathBuf>, ctx: &egui::Context) {
        self.pending.compare = Some(background(db, ctx, move |db| {
            let store = existing_store(db)?;
            let (ra, rb) = (read_record(&store, a)?, read_record(&store, b)?);
            let changed_streams = store.outcome_changes(a, b).map_err(|e| e.to_string())?;
            let tunables = tunables_diff(&ra.tunables, &rb.tunables);
            Ok(Comparison { a: ra, b: rb, tunables, changed_streams })
        }));
    }

    /// The trace file of run `id` in the export folder.
    fn trace_path(&self, id: RunId) -> PathBuf {
        full_path(&self.export_dir).join(format!("run-{id}.trace.json"))
    }

    /// Draws the table and the comparison; returns nothing (what was
    /// picked arrives through [`HistoryView::poll`]).
    pub fn ui(&mut self, ui: &mut Ui, db: &Option<PathBuf>) {
        let ctx = ui.ctx().clone();
        ui.horizontal_wrapped(|ui| {
            if ui.button("Refresh").clicked() {
                self.refresh(db, &ctx);
            }
            labelled(ui, "Filter runs", 160.0, |ui| {
                ui.add(egui::TextEdit::singleline(&mut self.filter).desired_width(160.0))
            });
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
            self.tuning.button_ui(ui, db);
            let folder = full_path(&self.export_dir).display().to_string();
            labelled(ui, "Export folder", 120.0, |ui| {
                ui.add(egui::TextEdit::singleline(&mut self.export_dir).desired_width(120.0))
            })
            .on_hover_text(folder);
            labelled(ui, "OTLP endpoint", 160.0, |ui| {
                ui.add(egui::TextEdit::singleline(&mut self.otlp_endpoint).desired_width(160.0))
            })
            .on_hover_text("An OTLP/HTTP receiver's base URL (Phoenix: http://127.0.0.1:6006) or its /v1/traces URL");
            if self.is_loading() {
                ui.spinner();
            }
        });
        ui.label(
            RichText::new(db.as_ref().map_or_else(|| "no database".to_owned(), |p| p.display().to_string())).weak(),
        );
        self.status_line(ui, db, &ctx);
        self.tuning.window_ui(&ctx);
        if let Some(comparison) = &self.comparison {
            let (mut open, mut lanes) = (true, false);
            egui::Window::new("Comparison")
                .open(&mut open)
                .default_width(560.0)
                .vscroll(true)
                .show(ui.ctx(), |ui| lanes = comparison_ui(ui, comparison));
            let (a, b) = (comparison.a.summary.id, comparison.b.summary.id);
            if lanes {
                self.compare_lanes(a, b, db, &ctx);
            }
            if !open || lanes {
                self.comparison = None;
            }
        }
        let entries = self.entries();
        if entries.is_empty() {
            ui.label(if self.runs.is_empty() {
                "No stored runs yet: press Run in the Live view."
            } else {
                "No run matches the filter."
            });
            return;
        }
        let rows: Vec<Row> = entries
            .iter()
            .enumerate()
            .flat_map(|(i, e)| {
                let unfolded = e.summary.batch.is_some_and(|b| self.unfolded.contains(&b));
                let parts = if unfolded { e.parts.as_slice() } else { &[] };
                std::iter::once(Row::Entry(i)).chain(parts.iter().map(|&p| Row::Part(p)))
            })
            .collect();
        let mut clicked_sort = None;
        let mut asked = None;
        // The table is wider than a small window: it scrolls sideways, so
        // the last columns stay reachable.
        // The bar always shows, so a narrow window tells it has more.
        let sideways = egui::ScrollArea::horizontal()
            .id_salt("history-sideways")
            .scroll_bar_visibility(egui::scroll_area::ScrollBarVisibility::AlwaysVisible);
        sideways.show(ui, |ui| {
            TableBuilder::new(ui)
                .id_salt("history-table")
                .striped(true)
                .resizable(true)
                .column(Column::exact(26.0))
                .column(Column::exact(26.0))
                .column(Column::exact(38.0))
                .column(Column::initial(80.0).at_least(40.0))
                .column(Column::initial(140.0).at_least(60.0))
                .column(Column::initial(90.0).at_least(40.0))
                .column(Column::initial(160.0).at_least(60.0))
                .column(Column::initial(140.0).at_least(60.0))
                .column(Column::initial(110.0).at_least(60.0))
                .column(Column::initial(70.0).at_least(40.0))
                .column(Column::initial(70.0).at_least(40.0))
                .column(Column::initial(60.0).at_least(40.0))
                .column(Column::initial(190.0).at_least(120.0))
                .header(22.0, |mut header| {
                    for name in ["A", "B", "Tune", "ID"] {
                        header.col(|ui| {
                            ui.strong(name);
                        });
                    }
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
                        ui.strong("Actions");
                    });
                })
                .body(|body| {
                    body.rows(24.0, rows.len(), |mut row| {
                        let (summary, parts, is_part) = match rows[row.index()] {
                            Row::Entry(i) => (entries[i].summary.clone(), entries[i].parts.as_slice(), false),
                            Row::Part(i) => (self.runs[i].clone(), &[][..], true),
                        };
                        let summary = &summary;
                        let batch = (!parts.is_empty()).then_some(summary.batch).flatten();
                        // A batch's row stands for all its parts.
                        let ids: Vec<RunId> = match parts {
                            [] => vec![summary.id],
                            parts => parts.iter().map(|&p| self.runs[p].id).collect(),
                        };
                        for slot in 0..2 {
                            row.col(|ui| {
                                if batch.is_none() {
                                    self.pick_ui(ui, slot, summary.id);
                                }
                            });
                        }
                        row.col(|ui| {
                            let name = if parts.is_empty() { "run" } else { "batch" };
                            self.tuning.checkbox_ui(ui, &ids, &format!("{name} {}", summary.id));
                        });
                        row.col(|ui| match batch {
                            Some(b) => {
                                let verb = if self.unfolded.contains(&b) { "Hide" } else { "Show" };
                                let button = ui.button(format!("{verb} {} parts", parts.len()));
                                if button.on_hover_text("Show or hide the runs of this batch").clicked()
                                    && !self.unfolded.remove(&b)
                                {
                                    self.unfolded.insert(b);
                                }
                            }
                            None if is_part => {
                                ui.label(format!("  └ {}", summary.id));
                            }
                            None => {
                                ui.label(summary.id.to_string());
                            }
                        });
                        row.col(|ui| {
                            ui.label(utc_second(summary.started_at_ms));
                        });
                        row.col(|ui| {
                            ui.label(summary.label.as_deref().unwrap_or(""));
                        });
                        row.col(|ui| {
                            let source = source(summary);
                            ui.add(egui::Label::new(&source).truncate()).on_hover_text(&source);
                        });
                        row.col(|ui| {
                            status_ui(ui, summary);
                        });
                        row.col(|ui| {
                            let o = &summary.outcomes;
                            let colour =
                                if o.failed > 0 { ui.visuals().error_fg_color } else { ui.visuals().text_color() };
                            let text = format!("{}/{}/{}/{}", o.ok, o.partial, o.failed, o.cancelled);
                            ui.label(RichText::new(text).color(colour));
                        });
                        row.col(|ui| {
                            ui.label(ms(summary.p50_ms));
                        });
                        row.col(|ui| {
                            ui.label(ms(summary.p99_ms));
                        });
                        row.col(|ui| {
                            ui.label(summary.retries.map_or("-".to_owned(), |n| n.to_string()));
                        });
                        row.col(|ui| {
                            asked = actions_ui(ui, summary, ids).or(asked.take());
                        });
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
        match asked {
            Some(Asked::Open(id, title)) => self.open(id, title, db, &ctx),
            Some(Asked::Again(id, batch)) => self.run_again(id, batch, db, &ctx),
            Some(Asked::Export(id)) => {
                if let Some((path, id)) = self.overwrite.check(self.trace_path(id), id) {
                    self.export(id, path, db, &ctx);
                }
            }
            Some(Asked::SendTraces(ids)) => self.send_traces(ids, db, &ctx),
            Some(Asked::Delete(ids)) => self.deleting = Some(ids),
            None => {}
        }
    }

    /// The one line under the toolbar: a question (delete, replace a
    /// file) or the latest news. It is always there, so the table never
    /// moves under the pointer.
    fn status_line(&mut self, ui: &mut Ui, db: &Option<PathBuf>, ctx: &egui::Context) {
        ui.horizontal(|ui| {
            ui.set_min_height(24.0);
            if self.overwrite.is_asking() {
                if let Some((path, id)) = self.overwrite.ui(ui) {
                    self.export(id, path, db, ctx);
                }
            } else if let Some(ids) = self.deleting.clone() {
                let what = match ids[..] {
                    [id] => format!("run {id}"),
                    _ => format!("the {} runs of this batch", ids.len()),
                };
                let warn = ui.visuals().warn_fg_color;
                let question = RichText::new(format!("Delete {what} and everything recorded for it?")).color(warn);
                ui.add(egui::Label::new(question).truncate());
                if ui.button(format!("Delete {what}")).clicked() {
                    self.deleting = None;
                    self.delete(ids, db, ctx);
                } else if ui.button("Keep").clicked() {
                    self.deleting = None;
                }
            } else {
                ui.add(egui::Label::new(self.status.as_deref().unwrap_or("")).truncate());
            }
        });
    }

    /// The A or B checkbox of run `id`.
    fn pick_ui(&mut self, ui: &mut Ui, slot: usize, id: RunId) {
        let mut chosen = self.selected[slot] == Some(id);
        let name = format!("{} {}", ["A", "B"][slot], id);
        let response = ui.add(egui::Checkbox::without_text(&mut chosen));
        // The column header says A or B; a screen reader needs the run too.
        response.widget_info(|| egui::WidgetInfo::selected(egui::Role::CheckBox, true, chosen, &name));
        if response.on_hover_text(&name).changed() {
            self.selected[slot] = chosen.then_some(id);
        }
    }

    fn sort_title(&self, name: &str, column: SortColumn) -> String {
        match (self.sort == column, self.descending) {
            (true, true) => format!("{name} ▼"),
            (true, false) => format!("{name} ▲"),
            (false, _) => name.to_owned(),
        }
    }

    /// The table's entries, filtered and sorted: each run on its own, and
    /// each batch as one entry summing its parts.
    fn entries(&self) -> Vec<Entry> {
        let mut batches: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        let mut entries = Vec::new();
        for (i, run) in self.runs.iter().enumerate() {
            match run.batch {
                Some(b) => batches.entry(b).or_default().push(i),
                None => entries.push(Entry { summary: run.clone(), parts: Vec::new() }),
            }
        }
        for (_, mut parts) in batches {
            parts.sort_by_key(|&i| self.runs[i].id);
            entries.push(Entry {
                summary: batch_summary(&parts.iter().map(|&i| &self.runs[i]).collect::<Vec<_>>()),
                parts,
            });
        }
        let needle = self.filter.to_lowercase();
        let matches = |run: &RunSummary| {
            needle.is_empty()
                || run.label.as_deref().unwrap_or("").to_lowercase().contains(&needle)
                || source(run).to_lowercase().contains(&needle)
                || run.status.name().contains(&needle)
        };
        entries.retain(|e| matches(&e.summary) || e.parts.iter().any(|&p| matches(&self.runs[p])));
        let key = |run: &RunSummary| -> (f64, String) {
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
        entries.sort_by(|a, b| {
            let (ka, kb) = (key(&a.summary), key(&b.summary));
            let order =
                ka.0.total_cmp(&kb.0).then_with(|| ka.1.cmp(&kb.1)).then_with(|| a.summary.id.cmp(&b.summary.id));
            if self.descending { order.reverse() } else { order }
        });
        entries
    }
}

/// What History hands to the app.
#[derive(Debug)]
pub enum Picked {
    /// A run opened for the Live view.
    Open(Box<OpenedRun>),
    /// Settings to run again.
    Again(RunAgain),
    /// Two runs' lanes on one axis, stream by stream.
    Compared {
        /// Which runs, in words.
        title: String,
        /// Their lanes.
        timeline: Timeline,
    },
}

/// What a row's buttons asked for.
enum Asked {
    Open(RunId, String),
    /// Run again: the run, and whether it was a batch's.
    Again(RunId, bool),
    Export(RunId),
    /// Send as OpenTelemetry traces: the row's runs.
    SendTraces(Vec<RunId>),
    Delete(Vec<RunId>),
}

/// A row's actions: Open and a menu with the rest. `ids` are the row's
/// runs (a batch's parts, or the run).
fn actions_ui(ui: &mut Ui, run: &RunSummary, ids: Vec<RunId>) -> Option<Asked> {
    let mut asked = None;
    let batch = ids.len() > 1;
    // A batch is named by its first run; its parts open one by one.
    let name = format!("{} {}", if batch { "batch" } else { "run" }, run.id);
    ui.horizontal(|ui| {
        if !batch && ui.button(format!("Open run {}", run.id)).clicked() {
            asked = Some(Asked::Open(run.id, title(run)));
        }
        ui.menu_button(format!("More on {name}"), |ui| {
            let again = ui.button(format!("Run {name} again with these settings"));
            if again.on_hover_text("Same source, size and explicitly set tunables, as a new run").clicked() {
                asked = Some(Asked::Again(run.id, batch));
            }
            if ui.add_enabled(!batch, egui::Button::new(format!("Export run {} as a Perfetto trace", run.id))).clicked()
            {
                asked = Some(Asked::Export(run.id));
            }
            let send = ui.button(format!("Send {name} as OpenTelemetry traces"));
            if send.on_hover_text("A trace per call, over OTLP/HTTP to the OTLP endpoint above").clicked() {
                asked = Some(Asked::SendTraces(ids.clone()));
            }
            if ui.button(format!("Delete {name}…")).clicked() {
                asked = Some(Asked::Delete(ids));
            }
        });
    });
    asked
}

/// The status, with calls never started after a stop, and what an
/// interrupted run lacks.
fn status_ui(ui: &mut Ui, run: &RunSummary) {
    let text = match run.status {
        RunStatus::Stopped if run.outcomes.not_started > 0 => {
            format!("stopped, {} not started", run.outcomes.not_started)
        }
        status => status.name().to_owned(),
    };
    let label = ui.label(text);
    let why = match run.status {
        RunStatus::Stopped => "Stopped by the user: calls still queued never started and count in no percentile",
        RunStatus::Interrupted => "Its recording process ended without finishing it (a crash or a kill)",
        RunStatus::Running => "Being recorded now",
        RunStatus::Completed => "Every call ran to its end",
    };
    label.on_hover_text(why);
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.0} ms"))
}

/// A batch summed up: the first part's id, start and label, every
/// scenario, the worst status, and outcome and retry totals; percentiles
/// of parts do not combine, so it has none.
fn batch_summary(parts: &[&RunSummary]) -> RunSummary {
    let mut sum = parts[0].clone();
    let scenarios: Vec<&str> = parts.iter().filter_map(|p| p.scenario.as_deref()).collect();
    sum.scenario = Some(format!("{} scenarios: {}", parts.len(), scenarios.join(", ")));
    sum.status = [RunStatus::Running, RunStatus::Interrupted, RunStatus::Stopped]
        .into_iter()
        .find(|s| parts.iter().any(|p| p.status == *s))
        .unwrap_or(RunStatus::Completed);
    let mut outcomes = Outcomes::default();
    for p in parts {
        let o = &p.outcomes;
        outcomes.ok += o.ok;
        outcomes.partial += o.partial;
        outcomes.failed += o.failed;
        outcomes.cancelled += o.cancelled;
        outcomes.not_started += o.not_started;
    }
    sum.outcomes = outcomes;
    (sum.p50_ms, sum.p99_ms) = (None, None);
    sum.retries = parts.iter().map(|p| p.retries).sum();
    sum
}

/// What running `record` again takes: its source, size and the tunables
/// it had set explicitly. `batch`: the record is a part of a batch, which
/// runs again whole.
fn run_again(record: &RunRecord, batch: bool) -> Result<RunAgain, String> {
    let id = record.summary.id;
    // Its calls were one per route and payload, not a run of one source.
    if record.summary.label.as_deref().is_some_and(crate::probe::is_probe_label) {
        return Err(format!("run {id} is a probe: press Probe in the Live view to probe every route again"));
    }
    let choice = match (&record.summary.scenario, batch) {
        (_, true) => Choice::AllStories,
        (Some(name), false) if builtin_names().contains(&name.as_str()) => Choice::Scenario(name.clone()),
        (Some(file), false) => {
            return Err(format!(
                "run {id} served the scenario file {file}: run it again with `stallscope run --scenario-file {file}`"
            ));
        }
        (None, false) => {
            let first = record.providers.as_array().and_then(|rows| rows.first());
            let field = |name| first.and_then(|r| r.get(name)).and_then(serde_json::Value::as_str);
            match (field("name"), field("model")) {
                (Some(provider), Some(model)) => Choice::Provider(format!("{provider}/{model}")),
                _ => return Err(format!("run {id} recorded no provider to call")),
            }
        }
    };
    let tunables = Tunables::from_snapshot(&record.tunables).map_err(|e| format!("run {id}: {e}"))?;
    let edits = tunables
        .iter()
        .filter(|(_, e)| matches!(e.source, Source::Environment | Source::Override | Source::Edit))
        .map(|(spec, e)| (spec.name.to_owned(), e.value.to_string()))
        // A masked value cannot be used again; the user's own setting applies.
        .filter(|(_, text)| !redact::is_masked(text))
        .collect();
    let meta = record.meta.as_ref();
    Ok(RunAgain {
        from: id,
        choice,
        requests: meta.map_or(1, |m| m.requests),
        concurrency: meta.map_or(1, |m| m.concurrency),
        edits,
    })
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

/// `b - a` with its unit and sign; "-" when either side is unknown.
fn delta(a: Option<f64>, b: Option<f64>, unit: &str) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:+.0} {unit}", b - a),
        _ => "-".to_owned(),
    }
}

/// Draws the comparison; true when its lanes are asked for.
fn comparison_ui(ui: &mut Ui, c: &Comparison) -> bool {
    let (a, b) = (&c.a.summary, &c.b.summary);
    ui.heading(format!("Run {} → run {}", a.id, b.id));
    let lanes = ui
        .button("Show both runs' lanes")
        .on_hover_text("In the Live view, each stream's lane in both runs, one above the other, on one time axis")
        .clicked();
    changed_streams_ui(ui, &c.changed_streams);
    ui.separator();
    /// A figure of a run, if it has one.
    type Figure = fn(&RunSummary) -> Option<f64>;
    fn count(n: u64) -> Option<f64> {
        Some(n as f64)
    }
    let figures: [(&str, Figure, &str); 9] = [
        ("ok", |s| count(s.outcomes.ok), "calls"),
        ("partial", |s| count(s.outcomes.partial), "calls"),
        ("failed", |s| count(s.outcomes.failed), "calls"),
        ("cancelled", |s| count(s.outcomes.cancelled), "calls"),
        ("not started", |s| count(s.outcomes.not_started), "calls"),
        ("p50", |s| s.p50_ms, "ms"),
        ("p99", |s| s.p99_ms, "ms"),
        ("retries", |s| s.retries.map(|r| r as f64), "retries"),
        ("elapsed", |s| s.elapsed_ms, "ms"),
    ];
    egui::Grid::new("compare-outcomes").striped(true).show(ui, |ui| {
        for cell in ["", &format!("run {}", a.id), &format!("run {}", b.id), "change"] {
            ui.strong(cell);
        }
        ui.end_row();
        ui.label("status");
        ui.label(a.status.name());
        ui.label(b.status.name());
        ui.label("");
        ui.end_row();
        for (name, figure, unit) in figures {
            let (x, y) = (figure(a), figure(b));
            let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0} {unit}"));
            ui.label(name);
            ui.label(show(x));
            ui.label(show(y));
            ui.label(delta(x, y, unit));
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
    lanes
}

/// The streams whose outcome changed, first in the comparison (what an
/// operator opens it for), those the fleet budget decided told apart.
fn changed_streams_ui(ui: &mut Ui, changes: &[OutcomeChange]) {
    let shared = changes.iter().filter(|c| c.fleet_refused).count();
    let heading = match shared {
        0 => format!("Streams whose outcome changed: {}", changes.len()),
        n => format!("Streams whose outcome changed: {} ({n} on the {})", changes.len(), OutcomeChange::FLEET_MARK),
    };
    ui.strong(heading);
    if changes.is_empty() {
        return;
    }
    egui::ScrollArea::vertical().id_salt("compare-changes").max_height(160.0).show(ui, |ui| {
        for change in changes {
            let line = format!("#{}: {} → {}", change.stream, change.a, change.b);
            if change.fleet_refused {
                let line = RichText::new(format!("{line} ({})", OutcomeChange::FLEET_MARK)).weak();
                ui.label(line).on_hover_text(OutcomeChange::FLEET_NOTE);
            } else {
                ui.label(line);
            }
        }
    });
    if shared > 0 {
        ui.label(RichText::new(format!("{}: {}", OutcomeChange::FLEET_MARK, OutcomeChange::FLEET_NOTE)).weak());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: RunId, batch: Option<i64>, status: RunStatus, failed: u64) -> RunSummary {
        RunSummary {
            id,
            started_at_ms: id * 1000,
            ended_at_ms: None,
            status,
            label: None,
            scenario: Some(format!("s{id}")),
            batch,
            providers: Vec::new(),
            outcomes: Outcomes { ok: 1, failed, ..Outcomes::default() },
            p50_ms: Some(10.0),
            p99_ms: Some(20.0),
            retries: Some(2),
            elapsed_ms: Some(30.0),
            events: 0,
            dropped_events: 0,
            dropped_bodies: 0,
        }
    }

    #[test]
    fn a_batch_is_one_entry_summing_its_parts() {
        let runs = vec![
            run(1, None, RunStatus::Completed, 0),
            run(2, Some(7), RunStatus::Completed, 1),
            run(3, Some(7), RunStatus::Stopped, 2),
        ];
        let mut view = HistoryView { runs, ..HistoryView::default() };
        let entries = view.entries();
        assert_eq!(entries.len(), 2);
        let batch = entries.iter().find(|e| !e.parts.is_empty()).unwrap();
        assert_eq!((batch.summary.id, batch.summary.status), (2, RunStatus::Stopped));
        assert_eq!((batch.summary.outcomes.ok, batch.summary.outcomes.failed), (2, 3));
        assert_eq!((batch.summary.p50_ms, batch.summary.retries), (None, Some(4)));
        assert_eq!(batch.summary.scenario.as_deref(), Some("2 scenarios: s2, s3"));
        // The filter finds a batch by any of its parts.
        view.filter = "s3".to_owned();
        assert_eq!(view.entries().len(), 1);
    }

    #[test]
    fn a_probe_is_not_run_again_as_a_run_of_its_first_provider() {
        let record = |label: &str| RunRecord {
            summary: RunSummary {
                label: Some(label.to_owned()),
                scenario: None,
                ..run(4, None, RunStatus::Completed, 0)
            },
            tunables: serde_json::Map::new(),
            providers: serde_json::json!([{"name": "p", "model": "m"}]),
            meta: None,
            recorded_schema: 2,
            dropped_by_stream: BTreeMap::new(),
        };
        let refused = run_again(&record("probe: office"), false).unwrap_err();
        assert!(refused.contains("run 4 is a probe: press Probe"), "{refused}");
        assert!(run_again(&record("probe"), false).is_err());
        assert_eq!(run_again(&record("probes of mine"), false).map(|a| a.choice), Ok(Choice::Provider("p/m".into())));
    }

    /// Review R1: the endpoint was saved as typed, password and all.
    #[test]
    fn the_endpoint_is_saved_without_its_credentials() {
        let view = HistoryView {
            otlp_endpoint: "https://otel:pa55word@otel.example:4318/?key=t0ken".to_owned(),
            ..HistoryView::default()
        };
        let saved = serde_json::to_string(&view).unwrap();
        assert!(saved.contains(r#""otlp_endpoint":"https://otel:***@otel.example:4318/?***""#), "{saved}");
        assert!(!saved.contains("pa55word") && !saved.contains("t0ken"), "{saved}");
        // Read back, the endpoint is not sent with the mask as its password.
        let mut back: HistoryView = serde_json::from_str(&saved).unwrap();
        back.send_traces(vec![1], &None, &egui::Context::default());
        let status = back.status.clone().unwrap_or_default();
        assert!(status.contains("credentials masked") && status.contains("type them again"), "{status}");
        assert!(back.pending.done.is_none(), "nothing is sent");
        let plain = serde_json::to_string(&HistoryView::default()).unwrap();
        assert!(plain.contains(r#""otlp_endpoint":"http://127.0.0.1:6006""#), "{plain}");
    }

    #[test]
    fn deltas_carry_sign_and_unit() {
        assert_eq!(delta(Some(100.0), Some(250.0), "ms"), "+150 ms");
        assert_eq!(delta(Some(3.0), Some(1.0), "calls"), "-2 calls");
        assert_eq!(delta(None, Some(1.0), "ms"), "-");
    }
}
