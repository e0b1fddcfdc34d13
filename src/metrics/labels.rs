//! The label sets of the metric families: each a closed list of values or
//! a name from the configuration, never a stream id, a message or a key.
//! Provider and model names pass through [`LabelNames`], which keeps only
//! the configured ones: a name a request chose (an observed agent's
//! `model`) counts as `other`, so no caller can add series.

use std::collections::BTreeSet;

use prometheus_client::encoding::EncodeLabelSet;

use crate::core::failover::{FallbackSetting, Target};
use crate::providers::setup::ProviderConfig;

/// The label value of a provider or model that is not configured.
const OTHER: &str = "other";

/// The provider and model names the metrics keep as label values; any
/// other name is counted as `other`. None by default: every call then
/// counts under `other`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelNames {
    providers: BTreeSet<String>,
    models: BTreeSet<String>,
}

impl LabelNames {
    /// These providers and models.
    pub fn new<P, M>(providers: P, models: M) -> LabelNames
    where
        P: IntoIterator,
        P::Item: Into<String>,
        M: IntoIterator,
        M::Item: Into<String>,
    {
        LabelNames {
            providers: providers.into_iter().map(Into::into).collect(),
            models: models.into_iter().map(Into::into).collect(),
        }
    }

    /// The names a configuration gives: each `[[provider]]` row's provider
    /// and model, and each target `fallback` (`STALLSCOPE_FALLBACK_MODELS`)
    /// names.
    pub fn configured(rows: &[ProviderConfig], fallback: &FallbackSetting) -> LabelNames {
        let named = match fallback {
            FallbackSetting::Explicit(targets) => targets.as_slice(),
            FallbackSetting::SameProvider | FallbackSetting::Off => &[],
        };
        let rows = rows.iter().map(|row| Target::new(&row.name, &row.model));
        rows.chain(named.iter().cloned()).fold(LabelNames::default(), |names, target| names.with_target(&target))
    }

    /// These names and `target`'s provider and model.
    pub fn with_target(mut self, target: &Target) -> LabelNames {
        self.providers.insert(target.provider.clone());
        self.models.insert(target.model.clone());
        self
    }

    /// These names and `providers`.
    pub fn with_providers(mut self, providers: impl IntoIterator<Item = String>) -> LabelNames {
        self.providers.extend(providers);
        self
    }

    /// `provider` as a label value.
    fn provider(&self, provider: &str) -> String {
        kept(&self.providers, provider)
    }

    /// `model` as a label value.
    fn model(&self, model: &str) -> String {
        kept(&self.models, model)
    }

    /// `target` as `from`/`to` label values, `provider/model`.
    pub(super) fn target(&self, target: &Target) -> String {
        format!("{}/{}", self.provider(&target.provider), self.model(&target.model))
    }
}

fn kept(names: &BTreeSet<String>, name: &str) -> String {
    match names.contains(name) {
        true => name.to_owned(),
        false => OTHER.to_owned(),
    }
}

/// Where a watch or run measures from.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SiteLabels {
    pub site: String,
}

impl SiteLabels {
    pub fn new(site: &str) -> SiteLabels {
        SiteLabels { site: site.to_owned() }
    }
}

/// A site and a target, its names kept as `names` says.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Route {
    pub site: String,
    pub provider: String,
    pub model: String,
}

impl Route {
    pub fn new(site: &str, target: &Target, names: &LabelNames) -> Route {
        Route { site: site.to_owned(), provider: names.provider(&target.provider), model: names.model(&target.model) }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CallLabels {
    #[prometheus(flatten)]
    pub route: Route,
    pub outcome: &'static str,
    pub verdict: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    #[prometheus(flatten)]
    pub route: Route,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct AttemptLabels {
    #[prometheus(flatten)]
    pub route: Route,
    pub end: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CategoryLabels {
    #[prometheus(flatten)]
    pub route: Route,
    pub category: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TimerLabels {
    #[prometheus(flatten)]
    pub route: Route,
    pub timer: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SleepLabels {
    #[prometheus(flatten)]
    pub route: Route,
    pub reason: &'static str,
}

/// `from` and `to` are `provider/model`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct HopLabels {
    pub site: String,
    pub from: String,
    pub to: String,
    pub reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RoundLabels {
    pub site: String,
    pub result: &'static str,
}

/// Why observe's proxy turned an agent away: a closed list
/// (`observe::Refusal::name`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RefusedLabels {
    pub site: String,
    pub reason: &'static str,
}
