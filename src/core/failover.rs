//! The failover chain: which provider/model pairs a call may move to, and
//! in what order.
//!
//! Failover happens only before the first content token (seed 001 §4), so
//! the chain is a list of places to *start* a stream. With nothing
//! configured the chain is the primary's provider's other models (at most
//! two, in config order): the same credential, never a provider the user
//! did not configure. An explicit `provider/model,…` list may cross
//! providers; `off` or `none` disables failover.

use std::fmt;

use serde::{Serialize, Serializer};

/// How many same-provider fallbacks the default chain holds.
pub const DEFAULT_CHAIN_FALLBACKS: usize = 2;

/// A provider and one of its models.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// The provider's configured name.
    pub provider: String,
    /// The model.
    pub model: String,
}

impl Target {
    /// A target from its two parts.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Target { provider: provider.into(), model: model.into() }
    }

    /// Parses `provider/model` (the model may itself contain `/`).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().split_once('/') {
            Some((provider, model)) if !provider.trim().is_empty() && !model.trim().is_empty() => {
                Ok(Target::new(provider.trim(), model.trim()))
            }
            _ => Err(format!("`{}` is not provider/model", text.trim())),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

impl Serialize for Target {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Target {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Target::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The `STALLSCOPE_FALLBACK_MODELS` setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FallbackSetting {
    /// Empty: the primary provider's other models, at most two.
    SameProvider,
    /// `off` or `none`: never fail over.
    Off,
    /// An explicit chain, tried in order after the primary.
    Explicit(Vec<Target>),
}

impl FallbackSetting {
    /// Parses the tunable's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(FallbackSetting::SameProvider);
        }
        if text.eq_ignore_ascii_case("off") || text.eq_ignore_ascii_case("none") {
            return Ok(FallbackSetting::Off);
        }
        text.split(',')
            .filter(|part| !part.trim().is_empty())
            .map(Target::parse)
            .collect::<Result<Vec<_>, _>>()
            .map(FallbackSetting::Explicit)
    }

    /// The full chain for a call whose primary is `primary`, given every
    /// configured target in config order. The primary comes first and no
    /// target appears twice.
    pub fn chain(&self, primary: &Target, configured: &[Target]) -> Vec<Target> {
        let mut chain = vec![primary.clone()];
        let candidates: Vec<Target> = match self {
            FallbackSetting::Off => Vec::new(),
            FallbackSetting::Explicit(list) => list.clone(),
            FallbackSetting::SameProvider => configured
                .iter()
                .filter(|t| t.provider == primary.provider && *t != primary)
                .take(DEFAULT_CHAIN_FALLBACKS)
                .cloned()
                .collect(),
        };
        for target in candidates {
            if !chain.contains(&target) {
                chain.push(target);
            }
        }
        chain
    }

    /// The most fallbacks this setting can add (for budget analysis when
    /// the configured targets are not known).
    pub fn max_fallbacks(&self) -> usize {
        match self {
            FallbackSetting::SameProvider => DEFAULT_CHAIN_FALLBACKS,
            FallbackSetting::Off => 0,
            FallbackSetting::Explicit(list) => list.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Target {
        Target::parse(s).unwrap()
    }

    #[test]
    fn default_chain_is_same_provider_at_most_two_in_config_order() {
        let configured = [t("a/m1"), t("b/x"), t("a/m2"), t("a/m3"), t("a/m4")];
        let chain = FallbackSetting::parse("").unwrap().chain(&t("a/m1"), &configured);
        assert_eq!(chain, vec![t("a/m1"), t("a/m2"), t("a/m3")]);
    }

    #[test]
    fn explicit_chain_may_cross_providers_and_skips_duplicates() {
        let setting = FallbackSetting::parse("b/x, a/m1 ,c/org/model").unwrap();
        let chain = setting.chain(&t("a/m1"), &[]);
        assert_eq!(chain, vec![t("a/m1"), t("b/x"), t("c/org/model")]);
    }

    #[test]
    fn off_and_none_disable_failover() {
        for text in ["off", "NONE"] {
            let setting = FallbackSetting::parse(text).unwrap();
            assert_eq!(setting.chain(&t("a/m1"), &[t("a/m2")]), vec![t("a/m1")]);
        }
        assert!(FallbackSetting::parse("gpt-4o").is_err());
        assert!(FallbackSetting::parse("/m").is_err());
    }
}
