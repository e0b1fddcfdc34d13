//! Checked suggestions: what [`tune`](super::tune) found on a run,
//! attached to the verdicts of the streams a suggested setting would have
//! caught sooner, so a verdict carries a setting with the what-if behind
//! it ("SSE_IDLE_TIMEOUT_S=2 would have caught these 12 stalls 28 s sooner
//! and fired on none of the 28 healthy streams (what-if on this run)")
//! instead of advice in words alone.

use std::collections::BTreeMap;

use super::tune::{Checked, TuneReport};
use crate::core::event::StreamId;
use crate::diagnosis::{CheckedSuggestion, Diagnosis, Severity};
use crate::report::RunReport;
use crate::store::RunId;
use crate::tunables::PREFIX;

/// Whether a run with these verdicts is worth checking: only a failure
/// (recovered from or not) can need a setting changed.
pub fn worth_checking<'a>(verdicts: impl IntoIterator<Item = &'a Diagnosis>) -> bool {
    verdicts.into_iter().any(|d| d.severity >= Severity::Recovered)
}

/// The suggestion a checked setting makes.
pub fn suggestion(checked: &Checked) -> CheckedSuggestion {
    CheckedSuggestion {
        settings: checked.settings.clone(),
        sentence: checked.sentence(),
        caught: checked.caught.len(),
        sooner_s: checked.sooner_s,
        false_positives: checked.false_positive_attempts(),
        healthy_attempts: checked.healthy_attempts,
    }
}

/// For each stream of run `run` a suggested timer would have caught
/// sooner, the suggestions that would have, each with how much sooner for
/// that stream. Only suggestions that together fire on no healthy attempt
/// and lose no stream are made (tune drops the rest), and each is checked
/// clean alone as well.
pub fn by_stream(tune: &TuneReport, run: RunId) -> BTreeMap<StreamId, Vec<(f64, CheckedSuggestion)>> {
    let mut streams: BTreeMap<StreamId, Vec<(f64, CheckedSuggestion)>> = BTreeMap::new();
    if !tune.combined.as_ref().is_some_and(Checked::is_clean) {
        return streams;
    }
    for timer in &tune.timers {
        let (Some(_), Some(evidence)) = (timer.suggested_s, &timer.evidence) else { continue };
        if !evidence.is_clean() {
            continue;
        }
        let made = suggestion(evidence);
        for caught in evidence.caught.iter().filter(|c| c.run == run) {
            streams.entry(caught.stream).or_default().push((caught.sooner_s, made.clone()));
        }
    }
    streams
}

/// The suggestion for `diagnosis` among a stream's `candidates`: the one
/// that sets the tunable the verdict names, else the one that would have
/// caught the stream soonest.
pub fn choose(diagnosis: &Diagnosis, candidates: &[(f64, CheckedSuggestion)]) -> Option<CheckedSuggestion> {
    let governs = |c: &CheckedSuggestion| {
        let Some(tunable) = &diagnosis.tunable else { return false };
        let name = tunable.strip_prefix(PREFIX).unwrap_or(tunable);
        c.settings.iter().any(|s| s.split_once('=').is_some_and(|(n, _)| n == name))
    };
    candidates
        .iter()
        .find(|(_, c)| governs(c))
        .or_else(|| candidates.iter().max_by(|a, b| a.0.total_cmp(&b.0)))
        .map(|(_, c)| c.clone())
}

/// Gives every verdict of `report` that tune's suggestions would have
/// caught sooner its checked suggestion, and the run's summary the ones
/// its groups share; returns how many streams got one.
pub fn attach(report: &mut RunReport, run: RunId, tune: &TuneReport) -> usize {
    let candidates = by_stream(tune, run);
    let mut given = 0;
    let diagnoses = report
        .streams
        .iter()
        .filter_map(|s| {
            let mut diagnosis = s.diagnosis.clone()?;
            if let Some(c) = candidates.get(&s.index) {
                diagnosis.checked = choose(&diagnosis, c);
                given += usize::from(diagnosis.checked.is_some());
            }
            Some((s.index, diagnosis))
        })
        .collect();
    report.attach_diagnoses(diagnoses);
    given
}
