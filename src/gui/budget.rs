//! The budget view: the worst-case wall-clock of one call and of the
//! layers around it, under the tunables being edited, as one stacked bar
//! per layer (what the inner layer costs, and what this layer adds) against
//! an editable external deadline. It is recomputed every frame, so every
//! edit shows at once.

use std::time::Duration;

use egui::{RichText, Ui};
use egui_plot::{Bar, BarChart, Plot, VLine};
use serde::{Deserialize, Serialize};

use super::timeline::duration_label;
use crate::config::Settings;
use crate::core::analysis::{BudgetInput, BudgetReport, OuterLayer, analyse};

/// The view's inputs; they persist between launches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BudgetView {
    /// The caller's deadline in seconds (0: none).
    pub deadline_s: f64,
    /// Times an outer harness retries the whole call.
    pub outer_retries: u32,
    /// The call's context size in tokens (0: unknown).
    pub context_tokens: u64,
}

impl Default for BudgetView {
    fn default() -> Self {
        BudgetView { deadline_s: 600.0, outer_retries: 0, context_tokens: 0 }
    }
}

impl BudgetView {
    /// The analysis of `settings` with this view's inputs.
    pub fn report(&self, settings: &Settings) -> BudgetReport {
        let outer = (self.outer_retries > 0)
            .then(|| OuterLayer {
                name: "outer retries".to_owned(),
                runs: self.outer_retries + 1,
                sleeps: Duration::ZERO,
            })
            .into_iter()
            .collect();
        let input = BudgetInput {
            outer,
            caller_deadline: Duration::try_from_secs_f64(self.deadline_s).ok().filter(|d| !d.is_zero()),
            fallbacks: None,
            context_tokens: (self.context_tokens > 0).then_some(self.context_tokens),
        };
        analyse(&settings.policy, &input)
    }

    /// Draws the inputs, the verdict, the bars and the layer table.
    pub fn ui(&mut self, ui: &mut Ui, settings: &Result<Settings, String>) {
        ui.horizontal(|ui| {
            let label = ui.label("External deadline (s)");
            ui.add(egui::DragValue::new(&mut self.deadline_s).range(0.0..=1e7).speed(1.0)).labelled_by(label.id);
            let label = ui.label("Outer retries");
            ui.add(egui::DragValue::new(&mut self.outer_retries).range(0..=1000)).labelled_by(label.id);
            let label = ui.label("Context tokens");
            ui.add(egui::DragValue::new(&mut self.context_tokens).range(0..=10_000_000).speed(100.0))
                .labelled_by(label.id);
        });
        let settings = match settings {
            Ok(settings) => settings,
            Err(message) => {
                ui.label(RichText::new(message).color(ui.visuals().error_fg_color));
                return;
            }
        };
        let report = self.report(settings);
        let colour = match report.fits {
            Some(true) => super::palette::of(ui.visuals()).ok,
            Some(false) => ui.visuals().error_fg_color,
            None => ui.visuals().text_color(),
        };
        ui.label(RichText::new(verdict(&report)).strong().color(colour));
        for note in &report.notes {
            ui.label(RichText::new(format!("note: {note}")).color(ui.visuals().warn_fg_color));
        }
        // Told its columns, the grid gives the last one the rest of the row;
        // untold, it wraps it in its first frame's width, a button's.
        egui::Grid::new("budget-layers").striped(true).num_columns(3).show(ui, |ui| {
            ui.strong("layer");
            ui.strong("worst case");
            ui.strong("how");
            ui.end_row();
            for layer in &report.layers {
                ui.label(&layer.name);
                ui.label(layer.worst.map_or_else(|| "unbounded".to_owned(), |d| duration_label(d.as_secs_f64())));
                // Wrapped in what is left of the row, inside a narrow window.
                ui.add(egui::Label::new(&layer.detail).wrap());
                ui.end_row();
            }
        });
        self.chart(ui, &report);
    }

    fn chart(&self, ui: &mut Ui, report: &BudgetReport) {
        let mut inner_bars = Vec::new();
        let mut added_bars = Vec::new();
        let mut inner = 0.0;
        for (i, layer) in report.layers.iter().enumerate() {
            let Some(worst) = layer.worst.map(|d| d.as_secs_f64()) else { continue };
            let y = (report.layers.len() - 1 - i) as f64;
            inner_bars.push(Bar::new(y, inner).name(format!("{}: inner layers", layer.name)).width(0.6));
            added_bars.push(Bar::new(y, worst - inner).name(format!("{}: added", layer.name)).width(0.6));
            inner = worst;
        }
        let names: Vec<String> = report.layers.iter().rev().map(|l| l.name.clone()).collect();
        let colours = super::palette::of(ui.visuals());
        let inner_chart = BarChart::new("inner layers", inner_bars).horizontal().color(colours.budget_inner);
        let added_chart = BarChart::new("this layer adds", added_bars)
            .horizontal()
            .color(colours.budget_added)
            .stack_on(&[&inner_chart]);
        let deadline = report.caller_deadline.map(|d| d.as_secs_f64());
        let over = ui.visuals().error_fg_color;
        Plot::new("budget-bars")
            .height(ui.available_height().clamp(160.0, 420.0))
            .legend(egui_plot::Legend::default())
            .allow_scroll(false)
            .y_axis_formatter(move |mark, _| {
                let i = mark.value.round();
                if (mark.value - i).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_axis_formatter(|mark, _| format!("{} s", mark.value))
            .show(ui, |plot| {
                plot.bar_chart(inner_chart);
                plot.bar_chart(added_chart);
                if let Some(deadline) = deadline {
                    plot.vline(VLine::new("external deadline", deadline).color(over).width(2.0));
                }
            });
    }
}

/// The one-line answer: the worst case and whether it fits the deadline.
pub fn verdict(report: &BudgetReport) -> String {
    let worst = report.total().map_or_else(|| "unbounded".to_owned(), |d| duration_label(d.as_secs_f64()));
    match (report.caller_deadline, report.fits) {
        (Some(deadline), Some(true)) => {
            format!("Worst case {worst} fits the external deadline of {}", duration_label(deadline.as_secs_f64()))
        }
        (Some(deadline), _) => {
            format!(
                "Worst case {worst} does NOT fit the external deadline of {}",
                duration_label(deadline.as_secs_f64())
            )
        }
        (None, _) => format!("Worst case {worst}; no external deadline set"),
    }
}
