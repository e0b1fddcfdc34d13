//! Where a guarded call may fail over: the configured `[[provider]]`
//! rows, each with its endpoint, headers, client and pool of keys (from
//! its variables, never the agent's), and every configured target for the
//! default chain. None without a config, or when only observing.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderMap;

use super::ObserveError;
use crate::core::credentials::{CredentialPool, Secret};
use crate::core::failover::Target;
use crate::core::policy::CorePolicy;
use crate::core::transport::build_client;
use crate::providers::Dialect;
use crate::providers::setup::{ProviderConfig, extra_headers};

/// A configured provider a guarded call may fail over to, with its own
/// key: the `[[provider]]` row's endpoint, headers and client.
#[derive(Clone)]
pub(super) struct Elsewhere {
    /// Its dialect: only calls of the same go there.
    pub dialect: Dialect,
    /// Its SDK-style base URL.
    pub base_url: String,
    /// Its extra headers.
    pub headers: HeaderMap,
    /// The client of its transport settings.
    pub client: reqwest::Client,
}

/// Where a guarded call may fail over: the configured providers, their
/// keys and targets (none without a config, or when only observing).
#[derive(Default)]
pub(super) struct Failover {
    /// Each provider's endpoint and client.
    pub elsewhere: Arc<HashMap<String, Elsewhere>>,
    /// Each provider's keys.
    pub pools: HashMap<String, Arc<CredentialPool>>,
    /// Every configured target, in config order.
    pub targets: Vec<Target>,
}

impl Failover {
    /// From the `[[provider]]` rows: each provider's endpoint, client and
    /// the keys of its variables that `env` has (a provider without its
    /// key is one a failover hop is refused by).
    pub fn of(
        rows: &[ProviderConfig],
        policy: &CorePolicy,
        env: &[(String, String)],
    ) -> Result<Failover, ObserveError> {
        let mut failover = Failover::default();
        let mut elsewhere = HashMap::new();
        let var = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.trim().to_owned());
        for row in rows {
            failover.targets.push(Target::new(&row.name, &row.model));
            if elsewhere.contains_key(&row.name) {
                continue;
            }
            let keys = row.api_key_env.iter().chain(&row.api_key_envs).filter_map(|v| var(v)).filter(|k| !k.is_empty());
            let pool = CredentialPool::new(keys.map(Secret::new).collect(), policy.credentials.rotation);
            failover.pools.insert(row.name.clone(), Arc::new(pool));
            let client_error = |message: String| ObserveError::Client { route: row.name.clone(), message };
            let client = build_client(&row.transport(&policy.transport)).map_err(|e| client_error(e.to_string()))?;
            let headers = extra_headers(row).map_err(|e| client_error(e.to_string()))?;
            elsewhere.insert(
                row.name.clone(),
                Elsewhere { dialect: row.kind, base_url: row.base_url.clone(), headers, client },
            );
        }
        failover.elsewhere = Arc::new(elsewhere);
        Ok(failover)
    }
}
