//! The tunables editor: every tunable grouped as in the registry, with its
//! unit, default, allowed values and help; edits validated as they are
//! typed with the registry's own message; changed values marked with their
//! source and resettable; and the whole set exported as a `.env` file.
//! Valid edits become the top layer of the next run's settings.

use std::collections::BTreeMap;

use egui::{Color32, RichText, Ui};
use serde::{Deserialize, Serialize};

use crate::config::Settings;
use crate::tunables::{Effective, Group, Source, TUNABLES, TunableSpec, Tunables, shown};

/// The editor's state; the edits persist between launches.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TunablesEditor {
    /// Edited values by full name, as typed (valid or not).
    pub edits: BTreeMap<String, String>,
    /// Show only tunables whose name or help contain this.
    pub filter: String,
    /// The prefix of exported variables.
    pub env_prefix: String,
    /// Where "Export .env" writes.
    pub env_path: String,
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
            status: None,
        }
    }
}

impl TunablesEditor {
    /// Why an edit is not accepted, in the registry's words.
    pub fn error(&self, name: &str) -> Option<String> {
        let text = self.edits.get(name)?;
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

    /// Draws the editor over the effective `settings` (or why they cannot
    /// be formed).
    pub fn ui(&mut self, ui: &mut Ui, settings: &Result<Settings, String>) {
        ui.horizontal(|ui| {
            let label = ui.label("Filter tunables");
            ui.add(egui::TextEdit::singleline(&mut self.filter).desired_width(180.0)).labelled_by(label.id);
            if ui.add_enabled(!self.edits.is_empty(), egui::Button::new("Reset all edits")).clicked() {
                self.edits.clear();
            }
            ui.separator();
            let label = ui.label("Prefix");
            ui.add(egui::TextEdit::singleline(&mut self.env_prefix).desired_width(120.0)).labelled_by(label.id);
            let label = ui.label("File");
            ui.add(egui::TextEdit::singleline(&mut self.env_path).desired_width(160.0)).labelled_by(label.id);
            if let Ok(settings) = settings {
                let text = settings.tunables.to_env(&self.env_prefix);
                if ui.button("Export .env").clicked() {
                    self.status = Some(match std::fs::write(&self.env_path, &text) {
                        Ok(()) => format!("wrote {} tunables to {}", TUNABLES.len(), self.env_path),
                        Err(e) => format!("cannot write {}: {e}", self.env_path),
                    });
                }
                if ui.button("Copy .env").clicked() {
                    ui.ctx().copy_text(text);
                    self.status = Some("copied to the clipboard".to_owned());
                }
            }
        });
        if let Some(status) = &self.status {
            ui.label(status);
        }
        let settings = match settings {
            Ok(settings) => settings,
            Err(message) => {
                ui.label(RichText::new(message).color(Color32::LIGHT_RED));
                return;
            }
        };
        ui.label(format!(
            "{} edited · values apply to the next run and are saved with it. Hover a name or its help for all of it.",
            self.edits.len()
        ));
        let needle = self.filter.to_lowercase();
        egui::ScrollArea::vertical().auto_shrink([false, false]).show(ui, |ui| {
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
        ui.horizontal(|ui| {
            let name = ui.add_sized([300.0, 18.0], egui::Label::new(RichText::new(spec.short_name()).monospace()));
            let name = name.on_hover_text(format!("{}\n{}\nallowed: {}", spec.name, spec.help, spec.allowed()));
            let visible = shown(spec, &effective.value).to_string();
            // A masked value (a proxy with a password) is shown as a hint, so
            // typing starts afresh instead of editing the mask into the value.
            let masked = visible != effective.value.to_string();
            let mut text = match self.edits.get(spec.name) {
                Some(edit) => edit.clone(),
                None if masked => String::new(),
                None => visible.clone(),
            };
            let field = egui::TextEdit::singleline(&mut text).desired_width(160.0).hint_text(visible);
            let edit = ui.add(field).labelled_by(name.id);
            if edit.changed() {
                self.edits.insert(spec.name.to_owned(), text);
            }
            ui.label(spec.unit);
            ui.small(format!("default {}", tunables.default_of(spec)));
            let edited = self.edits.contains_key(spec.name);
            let origin = if edited { "edited".to_owned() } else { source.to_string() };
            let colour = if edited || source.is_explicit() {
                Color32::from_rgb(240, 200, 60)
            } else {
                ui.visuals().weak_text_color()
            };
            ui.label(RichText::new(origin).color(colour));
            if edited && ui.small_button(format!("Reset {}", spec.short_name())).clicked() {
                self.edits.remove(spec.name);
            }
            let help = RichText::new(format!("{} · allowed: {}", spec.help, spec.allowed())).small().weak();
            ui.add(egui::Label::new(help).truncate());
        });
        if let Some(error) = self.error(spec.name) {
            ui.label(RichText::new(error).color(Color32::LIGHT_RED));
        }
    }
}
