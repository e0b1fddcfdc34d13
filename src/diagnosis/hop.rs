//! Which intermediary a response's headers name, and the knobs of it that
//! matter to a stream: the one that cuts a stream left idle (with its
//! default) and, for those that buffer by default, the one that stops it.
//! The fingerprints and defaults are the vendors' documented ones, gathered
//! with their sources in the project's research on intermediaries; a
//! header names a hop only when its value says so (`server: nginx/1.24.0`,
//! `via: 1.1 host (squid/5.7)`), never by a guess from timing.
//!
//! Behind a plain CONNECT proxy (an `HTTPS_PROXY` without TLS inspection)
//! no hop can add a header, so none is named: the evidence then rests on
//! timing alone, and the verdicts say no more than that.

use std::time::Duration;

/// An intermediary a response header names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// What it is: `nginx`, `Squid`, `Cloudflare`, …
    pub name: &'static str,
    /// The header that names it, as received: (`server`, `nginx/1.24.0`).
    pub header: (String, String),
    /// Its knob that cuts a stream (or a wait for one) after this long,
    /// with the default.
    pub timeout: Option<Knob>,
    /// How to stop it holding a stream back, when it buffers by default.
    pub unbuffer: Option<&'static str>,
}

/// One of a hop's settings and its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knob {
    /// As its configuration spells it.
    pub name: &'static str,
    /// Its value unless set.
    pub default: Duration,
}

/// A header value that names a hop: `contains` is matched without case.
struct Fingerprint {
    header: &'static str,
    contains: &'static str,
    name: &'static str,
    timeout: Option<Knob>,
    unbuffer: Option<&'static str>,
}

const fn knob(name: &'static str, seconds: u64) -> Option<Knob> {
    Some(Knob { name, default: Duration::from_secs(seconds) })
}

/// Each header is tried against these in order; the first header that
/// one matches names the hop.
const FINGERPRINTS: [Fingerprint; 8] = [
    Fingerprint {
        header: "server",
        contains: "nginx",
        name: "nginx",
        timeout: knob("proxy_read_timeout", 60),
        unbuffer: Some("`proxy_buffering off` in its location, or `X-Accel-Buffering: no` from the upstream"),
    },
    Fingerprint {
        header: "server",
        contains: "envoy",
        name: "Envoy",
        timeout: knob("route timeout", 15),
        unbuffer: None,
    },
    Fingerprint {
        header: "server",
        contains: "awselb",
        name: "AWS load balancer",
        timeout: knob("idle_timeout.timeout_seconds", 60),
        unbuffer: None,
    },
    Fingerprint {
        header: "server",
        contains: "cloudflare",
        name: "Cloudflare",
        timeout: knob("Proxy Read Timeout", 100),
        unbuffer: None,
    },
    Fingerprint {
        header: "server",
        contains: "caddy",
        name: "Caddy",
        timeout: None,
        unbuffer: Some("`flush_interval -1` in its `reverse_proxy`, and no `encode` on the stream"),
    },
    Fingerprint {
        header: "via",
        contains: "cloudfront",
        name: "CloudFront",
        timeout: knob("origin response timeout", 30),
        unbuffer: None,
    },
    Fingerprint {
        header: "via",
        contains: "google",
        name: "Google Cloud load balancer",
        timeout: knob("backend service timeoutSec", 30),
        unbuffer: None,
    },
    Fingerprint {
        header: "via",
        contains: "squid",
        name: "Squid",
        timeout: knob("read_timeout", 15 * 60),
        unbuffer: None,
    },
];

/// The hop the first naming header of `headers` (names lower-case, in the
/// order received) names, if one does.
pub fn named_by(headers: &[(String, String)]) -> Option<Hop> {
    headers.iter().find_map(|(name, value)| {
        let lower = value.to_ascii_lowercase();
        let print = FINGERPRINTS.iter().find(|f| f.header == name && lower.contains(f.contains))?;
        Some(Hop {
            name: print.name,
            header: (name.clone(), value.clone()),
            timeout: print.timeout,
            unbuffer: print.unbuffer,
        })
    })
}

/// The documented defaults a stream's cut or a gateway's answer lines up
/// with: an intermediary's timer that fires after a fixed time, from the
/// research on intermediaries (vendors' pages): low and high ends of the
/// range in seconds, and whose timers have that default.
const KNOWN_TIMEOUTS: [(u64, u64, &str); 9] = [
    (15, 15, "Envoy's route timeout"),
    (20, 20, "Azure Application Gateway's request timeout"),
    (30, 30, "the Google Cloud load balancer's backend timeout, Azure Front Door's and CloudFront's origin timeouts"),
    (55, 55, "Heroku's router"),
    (60, 60, "nginx's `proxy_read_timeout`, ingress-nginx's and the AWS load balancer's idle timeout"),
    (100, 125, "Cloudflare's Proxy Read Timeout"),
    (300, 300, "Envoy's `stream_idle_timeout`"),
    (350, 350, "the AWS Network Load Balancer's idle timeout"),
    (900, 900, "Squid's `read_timeout`"),
];

/// How far a measured time may lie from a default and still be it: a
/// hop's timer fires on its own event loop's turn and the client reads the
/// cut a network away, so a second or 3% either side.
fn slack(seconds: f64) -> f64 {
    (seconds * 0.03).max(1.0)
}

/// Whose default timeout `after` is, when it is one of the documented
/// ones: "nginx's `proxy_read_timeout`, …" for 60.2 s. A match is a hint,
/// never proof: many timers are set to round numbers.
pub fn default_matching(after: Duration) -> Option<&'static str> {
    let seconds = after.as_secs_f64();
    KNOWN_TIMEOUTS.iter().find_map(|&(low, high, whose)| {
        let (low, high) = (low as f64, high as f64);
        (seconds >= low - slack(low) && seconds <= high + slack(high)).then_some(whose)
    })
}

impl Hop {
    /// `nginx (server: nginx/1.24.0)`.
    pub fn described(&self) -> String {
        format!("{} (`{}: {}`)", self.name, self.header.0, self.header.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(headers: &[(&str, &str)]) -> Option<&'static str> {
        let headers: Vec<(String, String)> = headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
        named_by(&headers).map(|hop| hop.name)
    }

    #[test]
    fn each_fingerprint_names_its_hop_and_nothing_else_does() {
        let cases = [
            (("server", "nginx/1.24.0"), Some("nginx")),
            (("server", "nginx"), Some("nginx")),
            (("via", "1.1 proxy.corp (squid/5.7)"), Some("Squid")),
            (("server", "cloudflare"), Some("Cloudflare")),
            (("server", "awselb/2.0"), Some("AWS load balancer")),
            (("server", "envoy"), Some("Envoy")),
            (("server", "istio-envoy"), Some("Envoy")),
            (("via", "1.1 a1b2.cloudfront.net (CloudFront)"), Some("CloudFront")),
            (("via", "1.1 google"), Some("Google Cloud load balancer")),
            (("server", "Caddy"), Some("Caddy")),
            // What names no hop: a provider's own server, an unknown via,
            // a fingerprint under another header.
            (("server", "uvicorn"), None),
            (("via", "1.1 varnish"), None),
            (("x-powered-by", "nginx"), None),
        ];
        for ((name, value), want) in cases {
            assert_eq!(named(&[(name, value)]), want, "{name}: {value}");
        }
    }

    #[test]
    fn a_time_near_a_documented_default_names_whose_it_is() {
        let whose = |s: f64| default_matching(Duration::from_secs_f64(s));
        assert!(whose(60.2).is_some_and(|w| w.starts_with("nginx's `proxy_read_timeout`")));
        assert!(whose(59.1).is_some_and(|w| w.contains("AWS load balancer")));
        assert_eq!(whose(112.0), Some("Cloudflare's Proxy Read Timeout"));
        assert_eq!(whose(124.9), Some("Cloudflare's Proxy Read Timeout"));
        assert_eq!(whose(15.3), Some("Envoy's route timeout"));
        assert_eq!(whose(905.0), Some("Squid's `read_timeout`"));
        for other in [2.0, 45.0, 62.5, 200.0] {
            assert_eq!(whose(other), None, "{other} s is nobody's default");
        }
    }

    #[test]
    fn the_first_naming_header_wins_and_keeps_its_value_and_knobs() {
        let headers = [("content-type", "text/event-stream"), ("via", "1.1 squid (squid/6.1)"), ("server", "nginx")];
        let headers: Vec<(String, String)> = headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
        let hop = named_by(&headers).unwrap();
        assert_eq!(hop.described(), "Squid (`via: 1.1 squid (squid/6.1)`)");
        assert_eq!(hop.timeout, knob("read_timeout", 900));
        let nginx = named_by(&headers[2..]).unwrap();
        assert_eq!(nginx.timeout.map(|k| (k.name, k.default.as_secs())), Some(("proxy_read_timeout", 60)));
        assert!(nginx.unbuffer.is_some_and(|u| u.contains("proxy_buffering off")));
    }
}
