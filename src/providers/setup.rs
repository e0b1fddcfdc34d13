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
use crate::core::transport::{ClientCache, ProxySetting};
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
    /// Two rows of one provider disagree on where it is.
    #[error(
        "provider `{provider}`: rows disagree on {field} (`{first}` vs `{second}`); rows with one name are one endpoint"
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
        if !(row.base_url.starts_with("http://") || row.base_url.starts_with("https://")) {
            return Err(SetupError::BaseUrl { provider: row.name.clone(), url: row.base_url.clone() });
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
        let mut transport = policy.transport.clone();
        if let Some(proxy) = &row.proxy {
            transport.proxy = ProxySetting::parse(proxy);
        }
        transport.ca_file.clone_from(&row.ca_file);
        let client =
            clients.client(&transport).map_err(|source| SetupError::Client { provider: row.name.clone(), source })?;
        let headers = extra_headers(row)?;
        let upstream = HttpUpstream::new(row.kind, row.base_url.clone(), client, headers, transport);
        upstreams.providers.insert(row.name.clone(), Arc::new(upstream) as Arc<dyn Upstream>);
    }
    Ok((upstreams, pools))
}

fn check_same(first: &ProviderConfig, row: &ProviderConfig) -> Result<(), SetupError> {
    let conflict =
        |field, a: String, b: String| SetupError::Conflict { provider: row.name.clone(), field, first: a, second: b };
    if first.kind != row.kind {
        return Err(conflict("kind", first.kind.to_string(), row.kind.to_string()));
    }
    if first.base_url != row.base_url {
        return Err(conflict("base_url", first.base_url.clone(), row.base_url.clone()));
    }
    Ok(())
}

fn extra_headers(row: &ProviderConfig) -> Result<HeaderMap, SetupError> {
    let mut headers = HeaderMap::new();
    for (name, value) in &row.headers {
        let bad = |reason: String| SetupError::Header { provider: row.name.clone(), name: name.clone(), reason };
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|e| bad(e.to_string()))?;
        let value = HeaderValue::from_str(value).map_err(|e| bad(e.to_string()))?;
        headers.insert(header, value);
    }
    Ok(headers)
}
