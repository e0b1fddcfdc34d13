//! Where an agent's request goes: one upstream whose URL prefixes every
//! request's path (as a reverse proxy does), or one route per configured
//! provider under its name (`/openai/v1/chat/completions` → that
//! provider's base URL); and which dialect a request speaks, from its
//! path. Nothing outside these upstreams is ever reached: observe is no
//! open proxy.

use crate::core::failover::FallbackSetting;
use crate::core::redact;
use crate::metrics::LabelNames;
use crate::providers::Dialect;
use crate::providers::setup::ProviderConfig;
use crate::tunables::Tunables;

/// One upstream an agent's requests may go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Its name: the provider's, or `upstream` for `--upstream`.
    pub name: String,
    /// Its root, without a trailing `/`: a request's path is appended.
    pub root: String,
}

/// How requests are routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routes {
    /// Every request to this upstream, its path appended to the
    /// upstream's (`http://gw/llm` + `/v1/chat/completions`).
    One(Route),
    /// `/<name>/rest` to route `name` with `/rest` appended.
    Named(Vec<Route>),
}

/// A request routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed<'a> {
    /// The route.
    pub route: &'a Route,
    /// The upstream URL, query included.
    pub url: String,
    /// The dialect the path names, when it names one.
    pub dialect: Option<Dialect>,
}

impl Routes {
    /// Where `path_and_query` (`/v1/chat/completions?x=1`) goes; `None`
    /// when no route takes it.
    pub fn route<'a>(&'a self, path_and_query: &str) -> Option<Routed<'a>> {
        let (route, rest) = match self {
            Routes::One(route) => (route, path_and_query),
            Routes::Named(routes) => {
                let trimmed = path_and_query.strip_prefix('/')?;
                let (name, rest) = trimmed.split_at(trimmed.find(['/', '?']).unwrap_or(trimmed.len()));
                (routes.iter().find(|r| r.name == name)?, rest)
            }
        };
        let path = rest.split('?').next().unwrap_or_default();
        Some(Routed { route, url: format!("{}{rest}", route.root), dialect: dialect_of(path) })
    }

    /// Every route's name and root, for messages (stderr, the app, the
    /// 404 a client gets): each root with its password masked.
    pub fn describe(&self) -> String {
        match self {
            Routes::One(route) => redact::url(&route.root),
            Routes::Named(routes) => routes
                .iter()
                .map(|r| format!("/{}/… → {}", r.name, redact::url(&r.root)))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

impl Routes {
    /// The names observe's metrics keep: each route's and the providers its
    /// calls are recorded under ([`provider_name`]), and what the
    /// configuration names (`rows`, and the `STALLSCOPE_FALLBACK_MODELS` of
    /// the tunables `in_force`). The model an agent's request names is
    /// kept only when it is one of those; any other counts as `other`.
    pub fn metric_names(&self, rows: &[ProviderConfig], in_force: &Tunables) -> LabelNames {
        // The setting was checked when the tunables were loaded.
        let fallback = FallbackSetting::parse(in_force.get("STALLSCOPE_FALLBACK_MODELS").value.as_str())
            .unwrap_or(FallbackSetting::Off);
        let routes = match self {
            Routes::One(route) => std::slice::from_ref(route),
            Routes::Named(routes) => routes.as_slice(),
        };
        let recorded =
            routes.iter().flat_map(|route| Dialect::ALL.map(|dialect| provider_name(&route.name, Some(dialect))));
        LabelNames::configured(rows, &fallback).with_providers(recorded)
    }
}

/// The provider an observed call of `dialect` on route `route` is
/// recorded under: the route's name for chat completions and for requests
/// of no dialect, `ROUTE.responses` and `ROUTE.messages` for the others, so
/// each recorded provider speaks one dialect, as a replay needs.
pub fn provider_name(route: &str, dialect: Option<Dialect>) -> String {
    match dialect {
        None | Some(Dialect::OpenAiChat) => route.to_owned(),
        Some(Dialect::OpenAiResponses) => format!("{route}.responses"),
        Some(Dialect::AnthropicMessages) => format!("{route}.messages"),
    }
}

/// The dialect whose endpoint `path` is: what the official SDKs call,
/// under whatever prefix a gateway puts in front.
pub fn dialect_of(path: &str) -> Option<Dialect> {
    let path = path.trim_end_matches('/');
    if path.ends_with("/chat/completions") {
        Some(Dialect::OpenAiChat)
    } else if path.ends_with("/responses") {
        Some(Dialect::OpenAiResponses)
    } else if path.ends_with("/messages") {
        Some(Dialect::AnthropicMessages)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(name: &str, root: &str) -> Route {
        Route { name: name.into(), root: root.into() }
    }

    #[test]
    fn one_upstream_prefixes_the_path_as_a_reverse_proxy_does() {
        let routes = Routes::One(route("upstream", "http://gw.internal/llm"));
        let routed = routes.route("/v1/chat/completions?trace=1").unwrap();
        assert_eq!(routed.url, "http://gw.internal/llm/v1/chat/completions?trace=1");
        assert_eq!(routed.dialect, Some(Dialect::OpenAiChat));
        assert_eq!(routes.route("/v1/models").unwrap().dialect, None);
    }

    #[test]
    fn named_routes_take_their_prefix_and_nothing_else_is_routed() {
        let routes = Routes::Named(vec![
            route("openai", "https://api.openai.com"),
            route("claude", "https://api.anthropic.com"),
        ]);
        let routed = routes.route("/claude/v1/messages").unwrap();
        assert_eq!(
            (routed.route.name.as_str(), routed.url.as_str()),
            ("claude", "https://api.anthropic.com/v1/messages")
        );
        assert_eq!(routed.dialect, Some(Dialect::AnthropicMessages));
        assert_eq!(routes.route("/openai/v1/responses").unwrap().dialect, Some(Dialect::OpenAiResponses));
        assert_eq!(routes.route("/other/v1/messages"), None, "no open proxy");
        assert_eq!(routes.route("/v1/messages"), None);
    }

    #[test]
    fn metrics_keep_the_routes_their_recorded_providers_and_the_configured_models() {
        let routes = Routes::Named(vec![route("openai", "https://api.openai.com/v1")]);
        let rows = [ProviderConfig::at_root("openai", Dialect::OpenAiChat, "https://api.openai.com", "gpt-4o")];
        let mut in_force = Tunables::defaults();
        in_force.apply_override("STALLSCOPE_FALLBACK_MODELS=backup/gpt-b").unwrap();
        let providers = ["openai", "openai.responses", "openai.messages", "backup"];
        assert_eq!(routes.metric_names(&rows, &in_force), LabelNames::new(providers, ["gpt-4o", "gpt-b"]));
        let one = Routes::One(route("upstream", "http://gw"));
        let providers = ["upstream", "upstream.responses", "upstream.messages"];
        assert_eq!(one.metric_names(&[], &Tunables::defaults()), LabelNames::new(providers, [] as [&str; 0]));
    }

    /// Review D10: the upstream's password was on stderr and in the 404
    /// any client gets.
    #[test]
    fn routes_are_described_with_their_passwords_masked() {
        let one = Routes::One(route("upstream", "http://user:s3cretpass@gw.internal/llm"));
        assert_eq!(one.describe(), "http://user:***@gw.internal/llm");
        let named = Routes::Named(vec![
            route("openai", "https://api.openai.com/v1"),
            route("gw", "https://sk-abcdefghijklmnop@gw.internal"),
        ]);
        assert_eq!(named.describe(), "/openai/… → https://api.openai.com/v1, /gw/… → https://***@gw.internal");
        // The routes themselves keep the credentials they send.
        assert_eq!(one.route("/v1/models").unwrap().url, "http://user:s3cretpass@gw.internal/llm/v1/models");
    }
}
