//! From `[[provider]]` rows to endpoints and credential pools: one
//! endpoint per provider name, its models in row order, its keys read from
//! the environment variables the rows name.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;

use super::Dialect;
use super::http::HttpUpstream;
use crate::core::credentials::{CredentialPool, Secret};
use crate::core::failover::Target;
use crate::core::policy::CorePolicy;
use crate::core::redact;
use crate::core::transport::{ClientCache, ProxySetting, TransportSettings};
use crate::core::upstream::{Upstream, Upstreams};

/// One `[[provider]]` row: a provider and one of its models.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The provider's name (rows with the same name are one provider).
    pub name: String,
    /// Its dialect: `openai-chat`, `openai-responses` or
    /// `anthropic-messages`.
    pub kind: Dialect,
    /// The SDK-style base URL (OpenAI's includes `/v1`, Anthropic's not).
    pub base_url: String,
    /// The model of this row.
    pub model: String,
    /// The environment variable holding the key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Several variables: the provider's credential pool.
    #[serde(default)]
    pub api_key_envs: Vec<String>,
    /// A proxy for this provider (overrides `STALLSCOPE_PROXY`).
    #[serde(default)]
    pub proxy: Option<String>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Extra trusted CA certificates (PEM), for TLS-inspecting proxies and
    /// private endpoints.
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
}

impl ProviderConfig {
    /// `base` as this provider's requests go: through its own proxy and
    /// trusting its own CA file, when it names them.
    pub fn transport(&self, base: &TransportSettings) -> TransportSettings {
        let mut transport = base.clone();
        if let Some(proxy) = &self.proxy {
            transport.proxy = ProxySetting::parse(proxy);
        }
        transport.ca_file.clone_from(&self.ca_file);
        transport
    }

    /// A row for a server whose endpoints sit at `root` (as the simulator's
    /// do), with the base URL each SDK expects: OpenAI's under `/v1`,
    /// Anthropic's at the root. No key, proxy or extra headers.
    pub fn at_root(name: &str, kind: Dialect, root: &str, model: &str) -> Self {
        let root = root.trim_end_matches('/');
        let base_url = match kind {
            Dialect::AnthropicMessages => root.to_owned(),
            Dialect::OpenAiChat | Dialect::OpenAiResponses => format!("{root}/v1"),
        };
        ProviderConfig {
            name: name.to_owned(),
            kind,
            base_url,
            model: model.to_owned(),
            api_key_env: None,
            api_key_envs: Vec::new(),
            proxy: None,
            headers: BTreeMap::new(),
            ca_file: None,
        }
    }
}

/// Providers that cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A key variable is missing or empty.
    #[error("provider `{provider}`: environment variable {variable} is not set (it should hold the API key)")]
    MissingKey {
        /// The provider.
        provider: String,
        /// The variable.
        variable: String,
    },
    /// A later row of a provider sets an endpoint field unlike the first.
    #[error(
        "provider `{provider}`: a later row sets {field} to `{second}`, unlike the first row (`{first}`); \
         rows with one name are one endpoint, so set it on the first row only"
    )]
    Conflict {
        /// The provider.
        provider: String,
        /// The field.
        field: &'static str,
        /// The first row's value.
        first: String,
        /// The later row's value.
        second: String,
    },
    /// A header name or value cannot be sent.
    #[error("provider `{provider}`: header `{name}` cannot be sent: {reason}")]
    Header {
        /// The provider.
        provider: String,
        /// The header.
        name: String,
        /// Why.
        reason: String,
    },
    /// The base URL is not an http(s) URL.
    #[error("provider `{provider}`: base_url `{url}` is not an http:// or https:// URL")]
    BaseUrl {
        /// The provider.
        provider: String,
        /// The URL.
        url: String,
    },
    /// The HTTP client cannot be built (a bad proxy, for instance).
    #[error("provider `{provider}`: {source}")]
    Client {
        /// The provider.
        provider: String,
        /// Why.
        source: crate::core::transport::TransportError,
    },
}

/// The number of keys in each provider's pool, by name: the key variables
/// of its first row, as [`connect`] builds the pools (never the keys).
pub fn key_counts(rows: &[ProviderConfig]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for row in rows {
        counts.entry(row.name.clone()).or_insert_with(|| row.api_key_env.iter().chain(&row.api_key_envs).count());
    }
    counts
}

/// Endpoints and credential pools for `rows`. `env` looks up variables.
pub fn connect(
    rows: &[ProviderConfig],
    policy: &CorePolicy,
    clients: &ClientCache,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(Upstreams, HashMap<String, Arc<CredentialPool>>), SetupError> {
    let mut upstreams = Upstreams::default();
    let mut pools = HashMap::new();
    let mut first_rows: HashMap<&str, &ProviderConfig> = HashMap::new();
    for row in rows {
        upstreams.targets.push(Target::new(&row.name, &row.model));
        if let Some(first) = first_rows.get(row.name.as_str()) {
            check_same(first, row)?;
            continue;
        }
        first_rows.insert(&row.name, row);
        let parsed = reqwest::Url::parse(&row.base_url).ok();
        if !parsed.is_some_and(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some()) {
            return Err(SetupError::BaseUrl { provider: row.name.clone(), url: redact::url(&row.base_url) });
        }
        let variables = row.api_key_env.iter().chain(&row.api_key_envs);
        let keys = variables
            .map(|variable| {
                env(variable)
                    .filter(|k| !k.trim().is_empty())
                    .map(|k| Secret::new(k.trim()))
                    .ok_or_else(|| SetupError::MissingKey { provider: row.name.clone(), variable: variable.clone() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        pools.insert(row.name.clone(), Arc::new(CredentialPool::new(keys, policy.credentials.rotation)));
        let transport = row.transport(&policy.transport);
        let clients =
            clients.clients(&transport).map_err(|source| SetupError::Client { provider: row.name.clone(), source })?;
        let headers = extra_headers(row)?;
        let upstream = HttpUpstream::new(row.kind, row.base_url.clone(), clients, headers, transport);
        upstreams.providers.insert(row.name.clone(), Arc::new(upstream) as Arc<dyn Upstream>);
    }
    Ok((upstreams, pools))
}

/// Rows after a provider's first add only a model: anything else they set
/// must match the first row, or a user who names a key on every row would
/// believe in a pool that does not exist.
fn check_same(first: &ProviderConfig, row: &ProviderConfig) -> Result<(), SetupError> {
    let conflict =
        |field, a: String, b: String| SetupError::Conflict { provider: row.name.clone(), field, first: a, second: b };
    if first.kind != row.kind {
        return Err(conflict("kind", first.kind.to_string(), row.kind.to_string()));
    }
    if first.base_url != row.base_url {
        return Err(conflict("base_url", redact::url(&first.base_url), redact::url(&row.base_url)));
    }
    let keys = |r: &ProviderConfig| r.api_key_env.iter().chain(&r.api_key_envs).cloned().collect::<Vec<_>>().join(",");
    let proxy = |r: &ProviderConfig| r.proxy.as_deref().map(redact::url).unwrap_or_default();
    let headers = |r: &ProviderConfig| r.headers.keys().cloned().collect::<Vec<_>>().join(",");
    let ca_file = |r: &ProviderConfig| r.ca_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    /// A field's name, how it is shown, and whether the rows differ on it.
    type Field = (&'static str, fn(&ProviderConfig) -> String, bool);
    let fields: [Field; 4] = [
        ("api_key_env(s)", keys, first.api_key_env != row.api_key_env || first.api_key_envs != row.api_key_envs),
        ("proxy", proxy, first.proxy != row.proxy),
        ("headers", headers, first.headers != row.headers),
        ("ca_file", ca_file, first.ca_file != row.ca_file),
    ];
    for (field, show, differs) in fields {
        // An unset field on a later row simply inherits the first row's.
        if differs && !show(row).is_empty() {
            return Err(conflict(field, show(first), show(row)));
        }
    }
    Ok(())
}

pub(crate) fn extra_headers(row: &ProviderConfig) -> Result<HeaderMap, SetupError> {
    let mut headers = HeaderMap::new();
    for (name, value) in &row.headers {
        let bad = |reason: String| SetupError::Header { provider: row.name.clone(), name: name.clone(), reason };
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|e| bad(e.to_string()))?;
        let value = HeaderValue::from_str(value).map_err(|e| bad(e.to_string()))?;
        headers.insert(header, value);
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(model: &str) -> ProviderConfig {
        ProviderConfig::at_root("p", Dialect::OpenAiChat, "http://127.0.0.1:9", model)
    }

    fn setup(rows: &[ProviderConfig]) -> Result<(Upstreams, HashMap<String, Arc<CredentialPool>>), SetupError> {
        let env = |name: &str| (name == "KEY_A" || name == "KEY_B").then(|| format!("secret-{name}"));
        connect(rows, &CorePolicy::default(), &ClientCache::new(), env)
    }

    #[test]
    fn rows_of_one_name_are_one_endpoint_with_its_models_in_order() {
        let first = ProviderConfig { api_key_envs: vec!["KEY_A".into(), "KEY_B".into()], ..row("m1") };
        let (upstreams, pools) = setup(&[first, row("m2")]).unwrap();
        assert_eq!(upstreams.providers.len(), 1);
        assert_eq!(upstreams.targets, [Target::new("p", "m1"), Target::new("p", "m2")]);
        assert_eq!(pools["p"].len(), 2);
    }

    #[test]
    fn a_later_row_cannot_quietly_change_the_endpoint() {
        let second = ProviderConfig { api_key_env: Some("KEY_B".into()), ..row("m2") };
        let first = ProviderConfig { api_key_env: Some("KEY_A".into()), ..row("m1") };
        let err = setup(&[first, second]).unwrap_err().to_string();
        assert!(err.contains("a later row sets api_key_env(s) to `KEY_B`"), "{err}");
        let other_url = ProviderConfig { base_url: "http://127.0.0.1:10/v1".into(), ..row("m2") };
        assert!(matches!(setup(&[row("m1"), other_url]), Err(SetupError::Conflict { field: "base_url", .. })));
    }

    #[test]
    fn missing_keys_and_bad_urls_are_named() {
        let needs = ProviderConfig { api_key_env: Some("NOPE".into()), ..row("m1") };
        let err = setup(&[needs]).unwrap_err().to_string();
        assert_eq!(err, "provider `p`: environment variable NOPE is not set (it should hold the API key)");
        for url in ["127.0.0.1:9/v1", "ftp://host/v1", "http://", "https://user:pw@ho st"] {
            let bad = ProviderConfig { base_url: url.into(), ..row("m1") };
            assert!(matches!(setup(&[bad]), Err(SetupError::BaseUrl { .. })), "{url}");
        }
    }
}
