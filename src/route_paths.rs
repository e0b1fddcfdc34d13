//! Which path a fault follows: the routes to one provider endpoint that
//! differ only in how they reach it (directly, through one proxy, through
//! another), compared on the probe's realistic payload, so an operator
//! reads which hop a cut or a timeout follows ("the fault follows the path
//! via proxy.corp:3128: idle cut after 60.0 s of silence; direct:
//! healthy").
//!
//! Routes are one endpoint when their dialect, base URL and model are the
//! same; their paths are their proxies, as each call's client uses them:
//! the row's `proxy`, else `STALLSCOPE_PROXY`, else the environment's
//! `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` for the URL's scheme. A
//! proxy is named by its host and port only, never its credentials.

use serde::Serialize;

use crate::core::transport::ProxySetting;
use crate::diagnosis::{Severity, VerdictKind};
use crate::probe::ProbeResult;
use crate::providers::setup::ProviderConfig;

/// One path to the endpoint, and how the realistic probe went on it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComparedPath {
    /// The route, `provider/model`.
    pub route: String,
    /// The proxy's `host:port`, or `None` for a direct path.
    pub via: Option<String>,
    /// Whether the realistic probe succeeded with no failure.
    pub healthy: bool,
    /// How it went, in a few words ("healthy", "idle cut after 60.0 s of
    /// silence").
    pub words: String,
}

/// An endpoint reached on more than one path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The base URL, its password masked.
    pub endpoint: String,
    /// The model.
    pub model: String,
    /// Each path, in config order.
    pub paths: Vec<ComparedPath>,
    /// Which path the fault follows, in a sentence.
    pub finding: String,
}

/// The endpoints among `rows` reached on two paths or more, each path with
/// its realistic probe (`realistic(i)` for row `i`; unprobed rows are left
/// out). `default_proxy` is `STALLSCOPE_PROXY`'s setting; `env` the process
/// environment.
pub fn compare<'a>(
    rows: &[ProviderConfig],
    default_proxy: &ProxySetting,
    env: &[(String, String)],
    realistic: impl Fn(usize) -> Option<&'a ProbeResult>,
) -> Vec<Comparison> {
    let mut endpoints: Vec<(&ProviderConfig, Vec<ComparedPath>)> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let Some(probe) = realistic(i) else { continue };
        let path = ComparedPath {
            route: format!("{}/{}", row.name, row.model),
            via: proxy_of(row, default_proxy, env),
            healthy: probe.outcome == "ok" && probe.severity <= Severity::Notice,
            words: words(probe),
        };
        match endpoints.iter_mut().find(|(other, _)| same_endpoint(other, row)) {
            Some((_, paths)) => paths.push(path),
            None => endpoints.push((row, vec![path])),
        }
    }
    endpoints
        .into_iter()
        .filter(|(_, paths)| paths.iter().any(|p| p.via != paths[0].via))
        .map(|(row, paths)| Comparison {
            endpoint: crate::core::redact::url(&row.base_url),
            model: row.model.clone(),
            finding: finding(&paths),
            paths,
        })
        .collect()
}

/// Whether two rows call one endpoint: the same dialect, model and base
/// URL (a trailing `/` aside).
fn same_endpoint(a: &ProviderConfig, b: &ProviderConfig) -> bool {
    a.kind == b.kind && a.model == b.model && a.base_url.trim_end_matches('/') == b.base_url.trim_end_matches('/')
}

/// "direct" or "via host:port".
fn path_name(via: Option<&str>) -> String {
    via.map_or_else(|| "direct".to_owned(), |via| format!("via {via}"))
}

/// The proxy a row's calls go through, by its `host:port`.
fn proxy_of(row: &ProviderConfig, default_proxy: &ProxySetting, env: &[(String, String)]) -> Option<String> {
    let setting = row.proxy.as_deref().map_or_else(|| default_proxy.clone(), ProxySetting::parse);
    let url = match setting {
        ProxySetting::Off => return None,
        ProxySetting::Url(url) => url,
        ProxySetting::FromEnvironment => {
            let https = row.base_url.starts_with("https:");
            let names: &[&str] = if https { &["https_proxy", "all_proxy"] } else { &["http_proxy", "all_proxy"] };
            names.iter().find_map(|name| {
                env.iter().find(|(k, v)| k.eq_ignore_ascii_case(name) && !v.trim().is_empty()).map(|(_, v)| v.clone())
            })?
        }
    };
    Some(host_port(&url))
}

/// A proxy URL's `host:port`, whatever credentials it carries.
fn host_port(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(parsed) if parsed.has_host() => {
            let host = parsed.host_str().unwrap_or_default();
            parsed.port_or_known_default().map_or_else(|| host.to_owned(), |port| format!("{host}:{port}"))
        }
        _ => crate::core::redact::url(url),
    }
}

/// How a probe went, in a few words.
fn words(probe: &ProbeResult) -> String {
    let after = |ms: f64, what: &str| format!("{} after {:.1} s{what}", probe.verdict.label(), ms / 1000.0);
    let mut words = match (probe.verdict, probe.silence_ms) {
        (VerdictKind::IdleCut, Some(ms)) => after(ms, " of silence"),
        (VerdictKind::GatewayTimeout, Some(ms)) => after(ms, ""),
        (kind, _) => kind.label().to_owned(),
    };
    if probe.outcome != "ok" {
        words.push_str(&format!(" ({})", probe.outcome));
    }
    words
}

/// Which path the fault follows: the ones that failed, against the ones
/// that did not.
fn finding(paths: &[ComparedPath]) -> String {
    let list = |healthy: bool| -> Vec<String> {
        paths
            .iter()
            .filter(|p| p.healthy == healthy)
            .map(|p| format!("{}: {}", path_name(p.via.as_deref()), p.words))
            .collect()
    };
    let (faulty, fine) = (list(false), list(true));
    match (faulty.is_empty(), fine.is_empty()) {
        (true, _) => "healthy on every path".to_owned(),
        (false, true) => {
            format!("not healthy on any path ({}): the provider, or a hop every path shares", faulty.join("; "))
        }
        (false, false) => format!("the fault follows the path: {}; {}", faulty.join("; "), fine.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::Dialect;

    fn row(name: &str, proxy: Option<&str>) -> ProviderConfig {
        ProviderConfig {
            proxy: proxy.map(str::to_owned),
            ..ProviderConfig::at_root(name, Dialect::OpenAiChat, "https://api.example.com", "m")
        }
    }

    fn probe(outcome: &'static str, verdict: VerdictKind, severity: Severity, silence_ms: Option<f64>) -> ProbeResult {
        ProbeResult {
            stream: 1,
            outcome,
            ttfb_ms: None,
            elapsed_ms: 0.0,
            attempts: 1,
            verdict,
            severity,
            summary: String::new(),
            silence_ms,
        }
    }

    #[test]
    fn the_fault_follows_the_path_through_the_proxy_that_cuts() {
        let rows = [
            row("direct", Some("off")),
            row("office", Some("http://user:secret@proxy.corp:3128")),
            ProviderConfig { model: "other".into(), ..row("alone", None) },
        ];
        let probes = [
            probe("ok", VerdictKind::Healthy, Severity::Ok, None),
            probe("partial", VerdictKind::IdleCut, Severity::Partial, Some(60_040.0)),
            probe("ok", VerdictKind::Healthy, Severity::Ok, None),
        ];
        let compared = compare(&rows, &ProxySetting::FromEnvironment, &[], |i| probes.get(i));
        assert_eq!(compared.len(), 1, "the third row's model has one path: {compared:?}");
        let c = &compared[0];
        assert_eq!((c.endpoint.as_str(), c.paths.len()), ("https://api.example.com/v1", 2));
        assert_eq!(c.paths[1].via.as_deref(), Some("proxy.corp:3128"), "no credentials");
        assert_eq!(
            c.finding,
            "the fault follows the path: via proxy.corp:3128: idle cut after 60.0 s of silence (partial); \
             direct: healthy"
        );
    }

    #[test]
    fn the_environment_s_proxy_is_a_path_and_every_path_failing_is_said() {
        let rows = [row("env", None), row("direct", Some("off"))];
        let env = [("HTTPS_PROXY".to_owned(), "http://gw.internal:8080".to_owned())];
        let failed = probe("failed", VerdictKind::SilentStall, Severity::Failed, None);
        let compared = compare(&rows, &ProxySetting::FromEnvironment, &env, |_| Some(&failed));
        assert_eq!(compared[0].paths[0].via.as_deref(), Some("gw.internal:8080"));
        assert!(compared[0].finding.starts_with("not healthy on any path"), "{}", compared[0].finding);
        let healthy = probe("ok", VerdictKind::Healthy, Severity::Ok, None);
        let compared = compare(&rows, &ProxySetting::FromEnvironment, &env, |_| Some(&healthy));
        assert_eq!(compared[0].finding, "healthy on every path");
        let same_path = compare(&rows, &ProxySetting::Off, &[], |_| Some(&healthy));
        assert_eq!(same_path.len(), 0, "both rows go direct: nothing to compare");
    }
}
