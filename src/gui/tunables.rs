//! The tunables editor: every tunable grouped as in the registry, with its
//! unit, default, allowed values and help; switches as checkboxes, choices
//! as pickers, the rest typed and validated with the registry's own
//! message; changed values marked with their source and resettable (a reset
//! of everything can be undone); and the whole set exported as a `.env`
//! file, never while an edit is not accepted, to a path shown in full, and
//! over an existing file only when the user says so. Every row and status
//! line keeps its height, so nothing moves under the pointer.
//! Valid edits become the top layer of the next run's settings.

use std::collections::BTreeMap;

use egui::{RichText, Ui};
use serde::{Deserialize, Serialize};

use super::form::labelled;
use super::save::{Overwrite, full_path};
use super::saved_url;
use crate::config::Settings;
use crate::tunables::{Effective, Group, Kind, Source, TUNABLES, TunableSpec, Tunables, Value, shown};

/// The editor's state; the edits persist between launches.
#[derive(Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct TunablesEditor {
    /// Edited values by full name, as typed (valid or not); a URL-valued
    /// one (a proxy) is saved with its password masked ([`saved_url`]).
    #[serde(serialize_with = "saved_url::serialize_edits")]
    pub edits: BTreeMap<String, String>,
    /// Show only tunables whose name or help contain this.
    pub filter: String,
    /// The prefix of exported variables.
    pub env_prefix: String,
    /// Where "Export .env" writes.
    pub env_path: String,
    /// Whether the export keeps a scenario's demo values (scaled down to
    /// show a failure in seconds) instead of their defaults. Off at each
    /// launch: it is a trap to ship by mistake.
    #[serde(skip)]
    pub env_scenario_values: bool,
    /// The edits "Reset all edits" removed, until undone or edited anew.
    #[serde(skip)]
    undo: Option<BTreeMap<String, String>>,
    #[serde(skip)]
    overwrite: Overwrite<String>,
    #[serde(skip)]
    status: Option<String>,
}

impl Default for TunablesEditor {
    fn default() -> Self {
        TunablesEditor {
            edits: BTreeMap::new(),
            filter: String::new(),
            env_prefix: crate::tunables::PREFIX.to_owned(),
            env_path: "stallscope.env".to_owned(),
            env_scenario_values: false,
            undo: None,
            overwrite: Overwrite::default(),
            status: None,
        }
    }
}

/// The height of every line that comes and goes, so rows stay put.
const LINE: f32 = 22.0;

impl TunablesEditor {
    /// Why an edit is not accepted, in the registry's words; a URL read
    /// back with its password masked is not accepted either.
    pub fn error(&self, name: &str) -> Option<String> {
        let text = self.edits.get(name)?;
        if let Some(why) = saved_url::masked(name, text) {
            return Some(why);
        }
        Tunables::defaults().set(name, text, Source::Edit).err().map(|e| e.to_string())
    }

    /// The valid edits as `NAME=VALUE` assignments.
    pub fn assignments(&self) -> Vec<String> {
        self.edits
            .iter()
            .filter(|(name, _)| self.error(name).is_none())
            .map(|(name, text)| format!("{name}={text}"))
            .collect()
    }

    /// How many edits are not accepted.
    pub fn invalid(&self) -> usize {
        self.edits.keys().filter(|name| self.error(name).is_some()).count()
    }

    /// Removes every edit; [`TunablesEditor::undo_reset`] brings them back.
    pub fn reset_all(&mut self) {
        if !self.edits.is_empty() {
            let count = self.edits.len();
            self.undo = Some(std::mem::take(&mut self.edits));
            self.status = Some(format!("reset {count} edit(s): Undo reset brings them back"));
        }
    }

    /// Brings back the edits the last reset removed (edits made since win).
    pub fn undo_reset(&mut self) {
        if let Some(undone) = self.undo.take() {
            let count = undone.len();
            for (name, text) in undone {
                self.edits.entry(name).or_insert(text);
            }
            self.status = Some(format!("restored {count} edit(s)"));
        }
    }

    /// Replaces the edits with `edits` (for "run again with these
    /// settings"); the ones replaced can be brought back like a reset.
    pub fn replace(&mut self, edits: BTreeMap<String, String>) {
        let old = std::mem::replace(&mut self.edits, edits);
        self.undo = (!old.is_empty()).then_some(old);
    }

    fn edit(&mut self, name: &str, text: String) {
        self.edits.insert(name.to_owned(), text);
    }

    /// Why nothing can be exported now, if it cannot.
    fn export_blocked(&self) -> Option<String> {
        match self.invalid() {
            0 => None,
            n => Some(format!(
                "{n} edited tunable(s) are not accepted: fix them before exporting (the file would hold defaults instead)"
            )),
        }
    }

    fn write(&mut self, path: &std::path::Path, text: &str) {
        self.status = Some(match std::fs::write(path, text) {
            Ok(()) => format!("wrote {} tunables to {}", TUNABLES.len(), path.display()),
            Err(e) => format!("cannot write {}: {e}", path.display()),
        });
    }

    /// Draws the editor over the effective `settings` (or why they cannot
    /// be formed).
    pub fn ui(&mut self, ui: &mut Ui, settings: &Result<Settings, String>) {
        ui.horizontal_wrapped(|ui| {
            labelled(ui, "Filter tunables", 160.0, |ui| {
                ui.add(egui::TextEdit::singleline(&mut self.filter).desired_width(160.0))
            });
            if ui.add_enabled(!self.edits.is_empty(), egui::Button::new("Reset all edits")).clicked() {
                self.reset_all();
            }
            if ui.add_enabled(self.undo.is_some(), egui::Button::new("Undo reset")).clicked() {
                self.undo_reset();
            }
        });
        let blocked = self.export_blocked();
        ui.horizontal_wrapped(|ui| {
            labelled(ui, "Prefix", 110.0, |ui| {
                ui.add(egui::TextEdit::singleline(&mut self.env_prefix).desired_width(110.0))
            });
            labelled(ui, "File", 160.0, |ui| {
                ui.add(egui::TextEdit::singleline(&mut self.env_path).desired_width(160.0))
            });
            let scenario = settings
                .as_ref()
                .ok()
                .is_some_and(|s| s.tunables.iter().any(|(_, e)| matches!(e.source, Source::Scenario(_))));
            if scenario {
                ui.checkbox(&mut self.env_scenario_values, "With the scenario's demo values").on_hover_text(
                    "A scenario's values are scaled down to show its failure in seconds; unticked, the export \
                     writes their defaults and names the scenario's value in a comment",
                );
            }
            let text = settings.as_ref().ok().map(|s| s.tunables.to_env(&self.env_prefix, self.env_scenario_values));
            let can = blocked.is_none() && text.is_some();
            let export = ui.add_enabled(can, egui::Button::new("Export .env"));
            let copy = ui.add_enabled(can, egui::Button::new("Copy .env"));
            if let Some(why) = &blocked {
                export.on_disabled_hover_text(why);
                copy.on_disabled_hover_text(why);
            } else if let Some(text) = text {
                if export.clicked()
                    && let Some((path, text)) = self.overwrite.check(full_path(&self.env_path), text.clone())
                {
                    self.write(&path, &text);
                } else if copy.clicked() {
                    ui.ctx().copy_text(text);
                    self.status = Some("copied to the clipboard".to_owned());
                }
            }
            ui.label(RichText::new(format!("→ {}", full_path(&self.env_path).display())).weak());
        });
        // One line, always there: the question, the block or the news.
        ui.horizontal(|ui| {
            ui.set_min_height(LINE);
            if self.overwrite.is_asking() {
                if let Some((path, text)) = self.overwrite.ui(ui) {
                    self.write(&path, &text);
                }
            } else if let Some(why) = &blocked {
                ui.add(egui::Label::new(RichText::new(why).color(ui.visuals().error_fg_color)).truncate());
            } else {
                ui.add(egui::Label::new(self.status.as_deref().unwrap_or("")).truncate());
            }
        });
        let settings = match settings {
            Ok(settings) => settings,
            Err(message) => {
                ui.label(RichText::new(message).color(ui.visuals().error_fg_color));
                return;
            }
        };
        ui.label(format!(
            "{} edited · values apply to the next run and are saved with it. Hover a name or its help for all of it.",
            self.edits.len()
        ));
        let needle = self.filter.to_lowercase();
        egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
            let mut group: Option<Group> = None;
            for (spec, effective) in settings.tunables.iter() {
                if !needle.is_empty()
                    && !spec.name.to_lowercase().contains(&needle)
                    && !spec.help.to_lowercase().contains(&needle)
                {
                    continue;
                }
                if group != Some(spec.group) {
                    group = Some(spec.group);
                    ui.add_space(6.0);
                    ui.heading(spec.group.title());
                }
                self.row(ui, spec, effective, &settings.tunables);
            }
        });
    }

    fn row(&mut self, ui: &mut Ui, spec: &'static TunableSpec, effective: &Effective, tunables: &Tunables) {
        let source = &effective.source;
        let full_help = format!("{}\n{}\nallowed: {}", spec.name, spec.help, spec.allowed());
        ui.horizontal(|ui| {
            ui.set_min_height(LINE);
            let name = column(ui, 280.0, |ui| ui.label(RichText::new(spec.short_name()).monospace()));
            let name = name.on_hover_text(&full_help);
            self.value(ui, spec, effective, name.id);
            ui.label(spec.unit);
            ui.label(RichText::new(format!("default {}", tunables.default_of(spec))).weak());
            let edited = self.edits.contains_key(spec.name);
            let origin = if edited { "edited here".to_owned() } else { source.to_string() };
            let colour = if edited || source.is_explicit() {
                ui.visuals().warn_fg_color
            } else {
                ui.visuals().weak_text_color()
            };
            ui.label(RichText::new(origin).color(colour));
            if edited && ui.small_button(format!("Reset {}", spec.short_name())).clicked() {
                self.edits.remove(spec.name);
            }
        });
        // The help, or what is wrong with the edit, on one line of its own
        // that is always there (all of it on hover).
        let line = match self.error(spec.name) {
            Some(error) => RichText::new(error).color(ui.visuals().error_fg_color),
            None => RichText::new(format!("{} · allowed: {}", spec.help, spec.allowed())),
        };
        ui.horizontal(|ui| {
            ui.add_space(12.0);
            ui.add(egui::Label::new(line).truncate()).on_hover_text(&full_help);
        });
    }

    /// The value's widget: a checkbox for a switch, a picker for a choice,
    /// a text field for the rest.
    fn value(&mut self, ui: &mut Ui, spec: &'static TunableSpec, effective: &Effective, label: egui::Id) {
        let edit = self.edits.get(spec.name);
        match spec.kind {
            Kind::Bool => {
                let current = edit.and_then(|t| Value::parse(&spec.kind, t).ok()).unwrap_or(effective.value.clone());
                let mut on = current.as_bool();
                let response = column(ui, 160.0, |ui| ui.add(egui::Checkbox::without_text(&mut on))).labelled_by(label);
                if response.changed() {
                    self.edit(spec.name, if on { "1" } else { "0" }.to_owned());
                }
            }
            Kind::Choice(options) => {
                let current = edit.cloned().unwrap_or_else(|| effective.value.to_string());
                let mut chosen = current.clone();
                let picker = egui::ComboBox::from_id_salt(spec.name).selected_text(&current).width(150.0);
                let response = picker.show_ui(ui, |ui| {
                    for option in options {
                        ui.selectable_value(&mut chosen, (*option).to_owned(), *option);
                    }
                });
                response.response.labelled_by(label);
                if chosen != current {
                    self.edit(spec.name, chosen);
                }
            }
            Kind::Int { .. } | Kind::Float { .. } | Kind::List(_) | Kind::Text { .. } => {
                let visible = shown(spec, &effective.value).to_string();
                // A masked value (a proxy with a password) is shown as a hint, so
                // typing starts afresh instead of editing the mask into the value.
                let masked = visible != effective.value.to_string();
                let mut text = match edit {
                    Some(edit) => edit.clone(),
                    None if masked => String::new(),
                    None => visible.clone(),
                };
                let field = egui::TextEdit::singleline(&mut text).desired_width(160.0).hint_text(visible);
                if ui.add(field).labelled_by(label).changed() {
                    self.edit(spec.name, text);
                }
            }
        }
    }
}

/// A cell `width` wide holding what `add` draws at its left, so names and
/// values line up in columns from row to row.
fn column(ui: &mut Ui, width: f32, add: impl FnOnce(&mut Ui) -> egui::Response) -> egui::Response {
    let layout = egui::Layout::left_to_right(egui::Align::Center);
    ui.allocate_ui_with_layout(egui::vec2(width, 18.0), layout, |ui| {
        ui.set_min_width(width);
        add(ui)
    })
    .inner
}
