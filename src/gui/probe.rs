//! The app's route readiness: the **Probe** button of the Live view, which
//! runs the library's probe ([`crate::probe`]) of every configured route
//! on the runner's background runtime, and the matrix it returns, the same
//! one `stallscope probe` prints.

use std::sync::mpsc::{Receiver, channel};

use egui::{RichText, Ui};

use super::runner::Runner;
use super::verdicts::severity_mark;
use crate::probe::{ProbePlan, Readiness, cells, probe};

/// The probe going on, and the last one's matrix or error.
#[derive(Debug, Default)]
pub struct ProbeView {
    pending: Option<Receiver<Result<Readiness, String>>>,
    readiness: Option<Readiness>,
    error: Option<String>,
}

/// What the button's hover says: what a probe does and the rule.
const ABOUT: &str = "Call every configured provider/model through the core, once with a tiny prompt and once \
                     with a realistic payload (the config's [probe] context_tokens, else 20000 tokens), each \
                     route alone (failover off). A route is ready when both probes end ok and neither verdict \
                     is worse than notice. Every call is billed; the probe is recorded as a run labelled probe.";

impl ProbeView {
    /// Starts a probe of `plan` on `runner`'s runtime; `ctx` repaints when
    /// it ends.
    pub fn start(&mut self, runner: &Runner, plan: ProbePlan, env: Vec<(String, String)>, ctx: &egui::Context) {
        let (tx, rx) = channel();
        let ctx = ctx.clone();
        runner.spawn(async move {
            let cancel = tokio_util::sync::CancellationToken::new();
            let _ = tx.send(probe(&plan, &env, None, &cancel).await.map_err(|e| e.to_string()));
            ctx.request_repaint();
        });
        (self.pending, self.error) = (Some(rx), None);
    }

    /// Takes in a finished probe; true when one arrived.
    pub fn poll(&mut self) -> bool {
        let Some(rx) = &self.pending else { return false };
        let Ok(result) = rx.try_recv() else { return false };
        self.pending = None;
        match result {
            Ok(readiness) => self.readiness = Some(readiness),
            Err(e) => self.error = Some(e),
        }
        true
    }

    /// Whether a probe is going on.
    pub fn is_running(&self) -> bool {
        self.pending.is_some()
    }

    /// The last probe's matrix.
    pub fn readiness(&self) -> Option<&Readiness> {
        self.readiness.as_ref()
    }

    /// The **Probe** button; `blocked` says why it cannot be pressed.
    /// True when pressed.
    pub fn button(&self, ui: &mut Ui, blocked: Option<&str>) -> bool {
        let button = ui.add_enabled(blocked.is_none() && !self.is_running(), egui::Button::new("Probe"));
        match blocked {
            Some(why) => {
                button.on_disabled_hover_text(why);
                false
            }
            None => button.on_hover_text(ABOUT).clicked(),
        }
    }

    /// The probe's progress, error, or matrix.
    pub fn ui(&self, ui: &mut Ui) {
        if self.is_running() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Probing every configured route…");
            });
        }
        if let Some(error) = &self.error {
            ui.label(RichText::new(format!("Probe could not run: {error}")).color(ui.visuals().error_fg_color));
        }
        let Some(readiness) = &self.readiness else { return };
        let recorded = readiness.run_id.map(|id| format!(", recorded as run {id}")).unwrap_or_default();
        let title = format!(
            "Route readiness: {} of {} routes ready (realistic payload: {} tokens{recorded})",
            readiness.ready, readiness.routes_total, readiness.context_tokens
        );
        egui::CollapsingHeader::new(title).id_salt("route-readiness").default_open(true).show(ui, |ui| {
            matrix(ui, readiness);
        });
    }
}

fn matrix(ui: &mut Ui, readiness: &Readiness) {
    egui::Grid::new("readiness-matrix").striped(true).num_columns(9).show(ui, |ui| {
        for head in ["Route", "Ready", "Tiny", "TTFB", "Elapsed", "Realistic", "TTFB", "Elapsed", "Verdict"] {
            ui.label(RichText::new(head).strong());
        }
        ui.end_row();
        for route in &readiness.routes {
            ui.label(&route.route);
            let (ready, colour) = match route.ready {
                true => ("yes", ui.visuals().text_color()),
                false => ("no", ui.visuals().error_fg_color),
            };
            ui.label(RichText::new(ready).color(colour).strong());
            for cell in [cells(route.tiny.as_ref()), cells(route.realistic.as_ref())].concat() {
                ui.label(cell);
            }
            let why = route.problem.as_deref().or(route.summary.as_deref()).unwrap_or_default();
            match (route.verdict, route.severity) {
                (Some(kind), Some(severity)) => {
                    let (shape, colour) = severity_mark(severity, ui.visuals());
                    let text = format!("{shape} {} ({})", kind.label(), severity.name());
                    ui.label(RichText::new(text).color(colour)).on_hover_text(why);
                }
                _ => {
                    ui.label(RichText::new(why).color(ui.visuals().warn_fg_color));
                }
            }
            ui.end_row();
        }
    });
}
