//! The label sets of the metric families: each a closed list of values or
//! a name from the configuration, never a stream id, a message or a key.

use prometheus_client::encoding::EncodeLabelSet;

use crate::core::failover::Target;

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

/// A site and a target.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Route {
    pub site: String,
    pub provider: String,
    pub model: String,
}

impl Route {
    pub fn new(site: &str, target: &Target) -> Route {
        Route { site: site.to_owned(), provider: target.provider.clone(), model: target.model.clone() }
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
