//! A route's cuts across runs: whether its streams are cut, or answered
//! by a gateway, after one fixed silence run after run ("route
//! office/openai: cut at 60.0 s of silence (±0.20 s) in 9 of 9 rounds"),
//! as `watch` says it after each round and `probe` after its two probes
//! of each route. One run's streams are grouped the same way by
//! [`super::summarize`]; this remembers the latest runs of each route.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::regularity::{Regular, silence_of};
use super::verdict::{Diagnosis, VerdictKind};

/// How many of a route's latest runs are remembered: enough for a pattern
/// to show, few enough that a hop reconfigured an hour ago stops counting.
const WINDOW: usize = 20;

/// The kinds whose silence is a hop's timer.
const TIMED: [VerdictKind; 2] = [VerdictKind::IdleCut, VerdictKind::GatewayTimeout];

/// One route's cuts of one kind, sharing a silence.
#[derive(Debug, Clone, PartialEq)]
pub struct FixedCut {
    /// `provider/model`.
    pub route: String,
    /// `idle_cut` or `gateway_timeout`.
    pub kind: VerdictKind,
    /// The silence they share.
    pub regular: Regular,
    /// Runs with a cut of this kind.
    pub runs_cut: usize,
    /// Runs of the route remembered.
    pub runs: usize,
}

impl FixedCut {
    /// "route office/openai: cut at 60.0 s of silence (±0.20 s) in 9 of 9
    /// rounds: a hop on this path closes streams idle for 60 s (the
    /// default of …)", counting runs as `runs_are` ("rounds", "probes").
    pub fn sentence(&self, runs_are: &str) -> String {
        let (what, gives_up) = silence_of(self.kind).unwrap_or_default();
        let verb = if self.kind == VerdictKind::IdleCut { "cut" } else { "answered by a gateway" };
        format!(
            "route {}: {verb} at {} in {} of {} {runs_are}: a hop on this path {gives_up} {}{}",
            self.route,
            self.regular.words(what),
            self.runs_cut,
            self.runs,
            self.regular.setting(),
            self.regular.default_words()
        )
    }
}

/// The cuts of each route's latest runs (20 of them).
#[derive(Debug, Clone, Default)]
pub struct RouteCuts {
    /// Per route, per run (oldest first), the kinds and silences of its
    /// cuts in that run.
    routes: BTreeMap<String, VecDeque<Vec<(VerdictKind, Duration)>>>,
}

impl RouteCuts {
    /// One run's verdicts; each counts for the route of the attempt it
    /// was read from. A route with no verdict in the run is not counted.
    pub fn push_run<'a>(&mut self, verdicts: impl IntoIterator<Item = &'a Diagnosis>) {
        let mut run: BTreeMap<&str, Vec<(VerdictKind, Duration)>> = BTreeMap::new();
        for d in verdicts {
            let Some(route) = d.basis.target.as_deref() else { continue };
            let cuts = run.entry(route).or_default();
            if let (true, Some(ms)) = (TIMED.contains(&d.kind), d.basis.idle_ms) {
                cuts.push((d.kind, Duration::from_secs_f64(ms.max(0.0) / 1000.0)));
            }
        }
        for (route, cuts) in run {
            let runs = self.routes.entry(route.to_owned()).or_default();
            runs.push_back(cuts);
            if runs.len() > WINDOW {
                runs.pop_front();
            }
        }
    }

    /// Each route whose cuts of one kind, over the runs remembered, share
    /// one silence (two cuts at least).
    pub fn fixed(&self) -> Vec<FixedCut> {
        let mut out = Vec::new();
        for (route, runs) in &self.routes {
            for kind in TIMED {
                let silences: Vec<Duration> =
                    runs.iter().flatten().filter(|(k, _)| *k == kind).map(|(_, silence)| *silence).collect();
                let Some(regular) = Regular::of(&silences) else { continue };
                let runs_cut = runs.iter().filter(|run| run.iter().any(|(k, _)| *k == kind)).count();
                out.push(FixedCut { route: route.clone(), kind, regular, runs_cut, runs: runs.len() });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::{Basis, Severity};

    fn verdict(route: &str, kind: VerdictKind, idle_ms: Option<f64>) -> Diagnosis {
        let basis = Basis { target: Some(route.to_owned()), idle_ms, ..Basis::default() };
        Diagnosis { basis, ..Diagnosis::bare(kind, Severity::Failed) }
    }

    #[test]
    fn a_route_cut_after_one_silence_round_after_round_says_so() {
        let mut cuts = RouteCuts::default();
        for silence in [60_100.0, 60_050.0, 59_900.0] {
            let office = verdict("office/openai", VerdictKind::IdleCut, Some(silence));
            let direct = verdict("direct/openai", VerdictKind::Healthy, None);
            cuts.push_run([&office, &direct]);
        }
        cuts.push_run([&verdict("office/openai", VerdictKind::Healthy, None)]);
        let fixed = cuts.fixed();
        assert_eq!(fixed.len(), 1, "{fixed:?}");
        assert_eq!(
            fixed[0].sentence("rounds"),
            "route office/openai: cut at 60.0 s of silence (±0.10 s) in 3 of 4 rounds: a hop on this path closes \
             streams idle for 60 s (the default of nginx's `proxy_read_timeout`, ingress-nginx's and the AWS load \
             balancer's idle timeout)"
        );
    }

    #[test]
    fn scattered_cuts_and_old_runs_do_not_count() {
        let mut cuts = RouteCuts::default();
        cuts.push_run([&verdict("r/m", VerdictKind::IdleCut, Some(2_000.0))]);
        cuts.push_run([&verdict("r/m", VerdictKind::IdleCut, Some(9_000.0))]);
        assert_eq!(cuts.fixed(), Vec::new(), "2 s and 9 s are no one timer");
        for _ in 0..WINDOW - 1 {
            cuts.push_run([&verdict("r/m", VerdictKind::GatewayTimeout, Some(1_000.0))]);
        }
        let fixed = cuts.fixed();
        assert_eq!(fixed.len(), 1, "the 2 s cut has left the window, the 9 s one not: {fixed:?}");
        assert_eq!((fixed[0].kind, fixed[0].runs_cut, fixed[0].runs), (VerdictKind::GatewayTimeout, 19, 20));
        assert!(fixed[0].sentence("rounds").starts_with("route r/m: answered by a gateway at 1.00 s of waiting"));
    }
}
