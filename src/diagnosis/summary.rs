//! The run-level summary: streams grouped by verdict kind, one sentence per
//! group naming what they share — the timer that caught them and its
//! budget, the proxy or server that answered, how they ended.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::category::TimerKind;
use crate::core::event::StreamId;

use super::hop;
use super::regularity::{Regular, silence_of};
use super::text::{secs, timer};
use super::verdict::{Diagnosis, RunDiagnosis, Severity, VerdictGroup, VerdictKind};

/// Groups `diagnoses` by kind, worst severity first, then largest first.
pub fn summarize(diagnoses: &[(StreamId, Diagnosis)]) -> RunDiagnosis {
    let total = diagnoses.len();
    let mut by_kind: BTreeMap<VerdictKind, Vec<(StreamId, &Diagnosis)>> = BTreeMap::new();
    for (stream, d) in diagnoses {
        by_kind.entry(d.kind).or_default().push((*stream, d));
    }
    let mut groups: Vec<VerdictGroup> =
        by_kind.into_iter().map(|(kind, members)| group(kind, &members, total)).collect();
    groups.sort_by(|a, b| b.severity.cmp(&a.severity).then(b.streams.len().cmp(&a.streams.len())));
    RunDiagnosis { streams: total, untrusted: groups.iter().map(|g| g.untrusted).sum(), groups }
}

fn group(kind: VerdictKind, members: &[(StreamId, &Diagnosis)], total: usize) -> VerdictGroup {
    let mut streams: Vec<StreamId> = members.iter().map(|(s, _)| *s).collect();
    streams.sort_unstable();
    let severity = members.iter().map(|(_, d)| d.severity).max().unwrap_or(Severity::Ok);
    let untrusted = members.iter().filter(|(_, d)| !d.trusted).count();
    let diagnoses: Vec<&Diagnosis> = members.iter().map(|(_, d)| *d).collect();

    let mut sentence = format!("{} of {total} streams: {}", members.len(), kind.label());
    if let Some(by) = shared(&diagnoses, |d| d.basis.denied_by).filter(|_| kind == VerdictKind::RetryDenied) {
        sentence.push_str(&format!(" by {}", by.describe()));
    }
    for (name, words) in
        [("via", "behind the same proxy"), ("server", "from the same server"), ("x-cache", "through the same cache")]
    {
        if let Some(value) =
            shared(&diagnoses, |d| d.basis.peer.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()))
        {
            sentence.push_str(&format!(" {words} ({name}: {value})"));
            break;
        }
    }
    sentence.push_str(&silence_words(kind, &diagnoses));
    sentence.push_str(&observed_words(&diagnoses));
    if let Some(caught) = shared(&diagnoses, |d| d.basis.timer) {
        let budgets: Vec<f64> = diagnoses.iter().filter_map(|d| d.basis.timer_budget_ms).collect();
        let (low, high) = budgets.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), &b| (lo.min(b), hi.max(b)));
        let each = if low == high {
            format!("after {} s each", low / 1000.0)
        } else {
            format!("after {}–{} s", low / 1000.0, high / 1000.0)
        };
        if !budgets.is_empty() {
            sentence.push_str(&format!(", caught by the {} timer {each}", timer(caught)));
        }
    }
    let outcomes: Vec<String> = [Severity::Recovered, Severity::Partial, Severity::Failed]
        .into_iter()
        .filter_map(|s| {
            let n = diagnoses.iter().filter(|d| d.severity == s).count();
            (n > 0).then(|| format!("{n} {}", s.name()))
        })
        .collect();
    if !outcomes.is_empty() {
        sentence.push_str(&format!(" ({})", outcomes.join(", ")));
    }
    if untrusted > 0 {
        sentence.push_str(&format!("; {untrusted} not trustworthy: client overloaded"));
    }
    VerdictGroup {
        kind,
        severity,
        streams,
        untrusted,
        summary: sentence,
        tunable: shared(&diagnoses, |d| d.tunable.clone()),
        checked: shared(&diagnoses, |d| d.checked.clone()),
    }
}

/// For cuts and gateway timeouts, the silence before them: when they all
/// share one, the hop's timer that it is, named by the headers they share
/// or by the documented default it matches ("each after 2.00 s of silence
/// (±0.01 s): a hop on this path closes streams idle for 2 s").
fn silence_words(kind: VerdictKind, diagnoses: &[&Diagnosis]) -> String {
    let Some((waited, gives_up)) = silence_of(kind) else { return String::new() };
    let silences: Vec<Duration> =
        diagnoses.iter().filter_map(|d| d.basis.idle_ms).map(|ms| Duration::from_secs_f64(ms / 1000.0)).collect();
    let (Some(low), Some(high)) = (silences.iter().min(), silences.iter().max()) else { return String::new() };
    let Some(regular) = Regular::of(&silences) else {
        return if low == high {
            format!(", after {} {waited}", secs(*low))
        } else {
            format!(", after {}–{} {waited}", secs(*low).trim_end_matches(" s"), secs(*high))
        };
    };
    let peer = shared(diagnoses, |d| Some(d.basis.peer.clone())).unwrap_or_default();
    let whose = match hop::named_by(&peer) {
        Some(hop) => match hop.timeout {
            Some(knob) => format!(" ({}'s `{}`, {} unless set)", hop.name, knob.name, secs(knob.default)),
            None => format!(" ({}, named by `{}: {}`)", hop.name, hop.header.0, hop.header.1),
        },
        None => regular.default_words(),
    };
    format!(", each after {}: a hop on this path {gives_up} {}{whose}", regular.words(waited), regular.setting())
}

/// Of observed calls, how many the agent disconnected from and how many
/// our timers would have fired on (", the agent disconnected from 3, our
/// idle timer would have fired on 3"); nothing for others.
fn observed_words(diagnoses: &[&Diagnosis]) -> String {
    let mut words = String::new();
    let gone = diagnoses.iter().filter(|d| d.basis.agent_disconnected_ms.is_some()).count();
    if gone > 0 {
        words.push_str(&format!(", the agent disconnected from {gone}"));
    }
    let timers: Vec<TimerKind> = diagnoses.iter().filter_map(|d| d.basis.would_have_fired.map(|w| w.timer)).collect();
    if let Some(first) = timers.first() {
        let ours = if timers.iter().all(|t| t == first) {
            format!("our {} timer", timer(*first))
        } else {
            "our timers".to_owned()
        };
        words.push_str(&format!(", {ours} would have fired on {}", timers.len()));
    }
    words
}

/// The value every diagnosis has, when they all have the same one.
fn shared<T: PartialEq>(diagnoses: &[&Diagnosis], value: impl Fn(&Diagnosis) -> Option<T>) -> Option<T> {
    let mut values = diagnoses.iter().map(|d| value(d));
    let first = values.next()??;
    values.all(|v| v.as_ref() == Some(&first)).then_some(first)
}
