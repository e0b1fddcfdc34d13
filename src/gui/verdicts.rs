//! Verdicts in the app: the badge each lane carries (a shape, the verdict
//! in words and a colour, by severity, so it reads without colour too), the
//! run-level summary strip over the lanes shown, the verdict section of the
//! detail panel, and the `--set` lines of a checked suggestion.
//!
//! The verdicts themselves are the library's ([`crate::diagnosis`]); the
//! timeline model holds them, and nothing here diagnoses.

use std::sync::Arc;

use egui::{Color32, RichText, Ui, Visuals};

use super::palette;

use crate::core::event::StreamId;
use crate::diagnosis::{Diagnosis, RunDiagnosis, Severity, VerdictGroup, VerdictKind, summarize};

/// What a verdict's mark looks like, by severity: a shape that tells the
/// severities apart without colour, and the theme's colour.
pub fn severity_mark(severity: Severity, visuals: &Visuals) -> (&'static str, Color32) {
    (severity_shape(severity), palette::of(visuals).severity(severity))
}

fn severity_shape(severity: Severity) -> &'static str {
    match severity {
        Severity::Ok => "●",
        Severity::Notice => "◆",
        Severity::Recovered => "▲",
        Severity::Partial => "◐",
        Severity::Failed => "■",
    }
}

/// What marks a verdict a timer decided while our own runtime lagged.
pub const UNTRUSTED_MARK: &str = "‼ client overloaded: not trustworthy";

/// A lane's badge: `▲ silent stall (recovered)`, and `‼ not trustworthy`
/// after it when the verdict is not to be trusted.
pub fn badge_text(diagnosis: &Diagnosis) -> String {
    let shape = severity_shape(diagnosis.severity);
    let mut text = format!("{shape} {} ({})", diagnosis.kind.label(), diagnosis.severity.name());
    if !diagnosis.trusted {
        text.push_str(" ‼ not trustworthy");
    }
    text
}

/// Draws a lane's badge, its summary on hover.
pub fn badge(ui: &mut Ui, diagnosis: &Diagnosis) {
    let colours = palette::of(ui.visuals());
    let colour = if diagnosis.trusted { colours.severity(diagnosis.severity) } else { colours.untrusted };
    ui.add(egui::Label::new(RichText::new(badge_text(diagnosis)).small().color(colour)).truncate())
        .on_hover_text(&diagnosis.summary);
}

/// The run-level summary of the verdicts given (the lanes a filter shows),
/// computed again only when that set changes: it is drawn every frame.
#[derive(Debug, Clone, Default)]
pub struct SummaryCache {
    shown: Vec<(StreamId, Arc<Diagnosis>)>,
    summary: Option<RunDiagnosis>,
}

impl SummaryCache {
    /// The summary of `verdicts`.
    pub fn of(&mut self, verdicts: Vec<(StreamId, Arc<Diagnosis>)>) -> &RunDiagnosis {
        let same = self.shown.len() == verdicts.len()
            && self.shown.iter().zip(&verdicts).all(|(a, b)| a.0 == b.0 && Arc::ptr_eq(&a.1, &b.1));
        if !same || self.summary.is_none() {
            let owned: Vec<(StreamId, Diagnosis)> = verdicts.iter().map(|(s, d)| (*s, Diagnosis::clone(d))).collect();
            self.summary = Some(summarize(&owned));
            self.shown = verdicts;
        }
        self.summary.get_or_insert_with(|| summarize(&[]))
    }
}

/// Draws a run's summary: one line per verdict kind, worst first; the
/// first few shown, the rest behind a fold. `title` names what it covers
/// when a timeline shows several things side by side (a run and its
/// what-if). Returns the kind whose line was clicked (to filter by it).
pub fn summary_ui(ui: &mut Ui, title: Option<&str>, run: &RunDiagnosis) -> Option<VerdictKind> {
    const FIRST: usize = 3;
    let mut picked = None;
    if run.groups.is_empty() {
        return None;
    }
    let untrusted = if run.untrusted > 0 {
        format!(" · {} not trustworthy (client overloaded)", run.untrusted)
    } else {
        String::new()
    };
    let streams = match run.streams {
        1 => "1 stream".to_owned(),
        n => format!("{n} streams"),
    };
    let heading = match title {
        Some(title) => format!("Verdicts, {title}: {streams}{untrusted}"),
        None => format!("Verdicts: {streams}{untrusted}"),
    };
    ui.label(RichText::new(heading).strong());
    let mut line = |ui: &mut Ui, group: &VerdictGroup| {
        let (shape, colour) = severity_mark(group.severity, ui.visuals());
        let text = RichText::new(format!("{shape} {}", group.summary)).color(colour);
        let tunable = group.tunable.as_deref().map(|t| format!("\nGoverned by {t}.")).unwrap_or_default();
        let checked =
            group.checked.as_ref().map(|c| format!("\nChecked by what-if: {}", c.sentence)).unwrap_or_default();
        let hint = format!("Show only these lanes{tunable}{checked}");
        if ui.add(egui::Label::new(text).sense(egui::Sense::click())).on_hover_text(hint).clicked() {
            picked = Some(group.kind);
        }
    };
    for group in run.groups.iter().take(FIRST) {
        line(ui, group);
    }
    if run.groups.len() > FIRST {
        let rest = &run.groups[FIRST..];
        egui::CollapsingHeader::new(format!("{} more verdict kinds", rest.len()))
            .id_salt(("more verdicts", title))
            .show(ui, |ui| rest.iter().for_each(|group| line(ui, group)));
    }
    picked
}

/// The verdict section of the detail panel: the verdict, its summary, the
/// evidence, the tunable, the suggestion and the setting what-if checked,
/// with a copy button for its `--set` lines.
pub fn verdict_ui(ui: &mut Ui, diagnosis: &Diagnosis) {
    let (shape, colour) = severity_mark(diagnosis.severity, ui.visuals());
    ui.horizontal_wrapped(|ui| {
        let kind = format!("{shape} {} · {}", diagnosis.kind.label(), diagnosis.severity.name());
        ui.label(RichText::new(kind).color(colour).strong());
        if !diagnosis.trusted {
            ui.label(RichText::new(UNTRUSTED_MARK).color(palette::of(ui.visuals()).untrusted).strong()).on_hover_text(
                "A timer that decided this verdict fired while our own runtime ran late by a meaningful share \
                 of its budget: the silence it reports may be ours, not the network's.",
            );
        }
    });
    ui.add(egui::Label::new(&diagnosis.summary).wrap());
    if !diagnosis.evidence.is_empty() {
        ui.label(RichText::new("Evidence").strong());
        for fact in &diagnosis.evidence {
            let at = fact.at_ms.map(|ms| format!("{:.3} s  ", ms / 1000.0)).unwrap_or_default();
            let attempt = fact.attempt.map(|n| format!("#{n}  ")).unwrap_or_default();
            ui.add(egui::Label::new(format!("• {at}{attempt}{}", fact.text)).wrap());
        }
    }
    if let Some(tunable) = &diagnosis.tunable {
        ui.label(format!("Tunable: {tunable}"));
    }
    // What what-if showed comes before advice in words: it is the
    // stronger of the two.
    if let Some(checked) = &diagnosis.checked {
        ui.add(egui::Label::new(RichText::new(format!("Checked by what-if: {}", checked.sentence)).strong()).wrap());
        let lines = set_lines(diagnosis);
        let button = ui.button("Copy --set lines").on_hover_text(lines.join("\n"));
        if button.clicked() {
            ui.ctx().copy_text(lines.join("\n"));
        }
    }
    if let Some(suggestion) = &diagnosis.suggestion {
        ui.add(egui::Label::new(format!("Suggestion: {suggestion}")).wrap());
    }
}

/// The `--set NAME=VALUE` lines of the setting what-if checked for a
/// verdict; none until one is checked.
pub fn set_lines(diagnosis: &Diagnosis) -> Vec<String> {
    diagnosis.checked.iter().flat_map(|c| &c.settings).map(|setting| format!("--set {setting}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::CheckedSuggestion;

    fn verdict(kind: VerdictKind, severity: Severity, suggestion: Option<&str>) -> Diagnosis {
        Diagnosis {
            summary: "summary".into(),
            suggestion: suggestion.map(str::to_owned),
            ..Diagnosis::bare(kind, severity)
        }
    }

    #[test]
    fn the_set_lines_are_the_checked_settings_and_prose_gives_none() {
        let mut stalled = verdict(
            VerdictKind::KeepaliveOnlyStall,
            Severity::Recovered,
            Some("lower STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S=5 to catch it sooner"),
        );
        assert!(set_lines(&stalled).is_empty(), "prose is not a checked setting");
        stalled.checked = Some(CheckedSuggestion {
            settings: vec!["SSE_DATA_STALL_TIMEOUT_S=2".into(), "SSE_IDLE_TIMEOUT_S=1.5".into()],
            sentence: "SSE_DATA_STALL_TIMEOUT_S=2 would have caught this stall 3 s sooner".into(),
            caught: 1,
            sooner_s: 3.0,
            false_positives: 0,
            healthy_attempts: 4,
        });
        assert_eq!(set_lines(&stalled), ["--set SSE_DATA_STALL_TIMEOUT_S=2", "--set SSE_IDLE_TIMEOUT_S=1.5"]);
    }

    #[test]
    fn every_severity_has_its_own_shape_and_colour_and_distrust_is_spelled_out() {
        let all = [Severity::Ok, Severity::Notice, Severity::Recovered, Severity::Partial, Severity::Failed];
        for visuals in [Visuals::dark(), Visuals::light()] {
            let untrusted = palette::of(&visuals).untrusted;
            for (i, a) in all.iter().enumerate() {
                for b in &all[i + 1..] {
                    let (ma, mb) = (severity_mark(*a, &visuals), severity_mark(*b, &visuals));
                    assert!(ma.0 != mb.0 && ma.1 != mb.1, "{a:?} and {b:?} look alike");
                    assert_ne!(mb.1, untrusted);
                }
            }
        }
        let mut stalled = verdict(VerdictKind::SilentStall, Severity::Recovered, None);
        assert_eq!(badge_text(&stalled), "▲ silent stall (recovered)");
        stalled.trusted = false;
        assert_eq!(badge_text(&stalled), "▲ silent stall (recovered) ‼ not trustworthy");
    }

    #[test]
    fn the_summary_is_computed_again_only_when_the_verdicts_shown_change() {
        let a = Arc::new(verdict(VerdictKind::SilentStall, Severity::Failed, None));
        let b = Arc::new(verdict(VerdictKind::Healthy, Severity::Ok, None));
        let mut cache = SummaryCache::default();
        assert_eq!(cache.of(vec![(0, a.clone()), (1, b.clone())]).streams, 2);
        // Marked, so a summary computed again would show.
        cache.summary.as_mut().unwrap().streams = 99;
        assert_eq!(cache.of(vec![(0, a.clone()), (1, b.clone())]).streams, 99, "the same verdicts: kept");
        assert_eq!(cache.of(vec![(0, a.clone()), (1, Arc::new(Diagnosis::clone(&b)))]).streams, 2, "another verdict");
        let only = cache.of(vec![(0, a)]);
        assert_eq!((only.streams, only.groups[0].kind), (1, VerdictKind::SilentStall));
    }
}
