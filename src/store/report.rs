//! Reading a stored [`RunReport`] back, number for number.
//!
//! The report is stored as the JSON `run --json` prints. Reading it back
//! needs two things serde does not give for free: `RunReport` has no
//! `Deserialize` (its outcome is a `&'static str`), and serde_json's default
//! float parser is off by one ulp for about one in ten of the millisecond
//! values reports carry (`55794.528960999996` reads back as
//! `55794.528961`). So the text is read through mirror types, with every
//! fractional number first quoted and then parsed by `str::parse::<f64>`,
//! which rounds correctly.

use std::collections::BTreeMap;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::{Map, Value};

use crate::core::event::Outcome;
use crate::core::executor::Used;
use crate::report::{Counted, ErrorReport, HopReport, LowBucketReport, RunReport, StreamReport, Summary};

/// An `f64` read exactly from a quoted fractional number (or from a plain
/// number or `null`, which serde_json writes for NaN).
#[derive(Clone, Copy)]
struct Exact(f64);

impl<'de> Deserialize<'de> for Exact {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Exact;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Exact, E> {
                v.parse().map(Exact).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Exact, E> {
                Ok(Exact(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Exact, E> {
                Ok(Exact(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Exact, E> {
                Ok(Exact(v as f64))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Exact, E> {
                Ok(Exact(f64::NAN))
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[derive(Deserialize)]
struct ReportMirror {
    run_id: Option<i64>,
    scenario: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
    summary: SummaryMirror,
    #[serde(default)]
    stopped: bool,
    streams: Vec<StreamMirror>,
    #[serde(default)]
    counted: Option<CountedMirror>,
}

#[derive(Deserialize)]
struct CountedMirror {
    p50_ms: Option<Exact>,
    p99_ms: Option<Exact>,
    retries: u64,
    verdicts: BTreeMap<crate::diagnosis::verdict::VerdictKind, usize>,
    untrusted: usize,
}

#[derive(Deserialize)]
struct TunablesOnly {
    tunables: Map<String, Value>,
}

#[derive(Deserialize)]
struct SummaryMirror {
    ok: usize,
    partial: usize,
    failed: usize,
    cancelled: usize,
    // Reports stored before runs could be stopped have neither.
    #[serde(default)]
    not_started: usize,
    elapsed_ms: Exact,
}

#[derive(Deserialize)]
struct StreamMirror {
    index: u64,
    outcome: String,
    provider: String,
    model: String,
    attempts: u32,
    elapsed_ms: Exact,
    ttfb_ms: Option<Exact>,
    bytes: u64,
    events: u64,
    keepalives: u64,
    content: String,
    stop_reason: Option<String>,
    error: Option<ErrorMirror>,
    failover_hops: Vec<HopMirror>,
    backoff_sleeps_ms: Vec<Exact>,
    retry_after_ms: Vec<Option<Exact>>,
    retry_counts: BTreeMap<String, UsedMirror>,
    #[serde(default)]
    rate_limits_low: Vec<LowBucketReport>,
}

#[derive(Deserialize)]
struct ErrorMirror {
    category: String,
    timer: Option<String>,
    #[serde(default)]
    transport: Option<String>,
    status: Option<u16>,
    retryable: bool,
    rule: String,
    message: String,
}

#[derive(Deserialize)]
struct HopMirror {
    from: String,
    to: String,
    reason: String,
}

#[derive(Deserialize)]
struct UsedMirror {
    used: u32,
    budget: u32,
}

/// The JSON text with every fractional number (outside strings) quoted.
fn quote_fractions(json: &str) -> String {
    let bytes = json.as_bytes();
    let mut out = String::with_capacity(json.len() + json.len() / 8);
    let (mut i, mut copied) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // Skip the string, escapes included.
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len() && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                    i += 1;
                }
                let token = &json[start..i];
                if token.contains(['.', 'e', 'E']) {
                    out.push_str(&json[copied..start]);
                    out.push('"');
                    out.push_str(token);
                    out.push('"');
                    copied = i;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&json[copied.min(json.len())..]);
    out
}

/// JSON text as a value whose fractional numbers are exactly the ones
/// written (serde_json's default parser may be one ulp off).
pub(crate) fn exact_json(text: &str) -> Result<Value, String> {
    fn restore(value: &mut Value, exact: Value) {
        match (value, exact) {
            (value @ Value::Number(_), Value::String(s)) => {
                if let Some(n) = s.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                    *value = Value::Number(n);
                }
            }
            (Value::Array(items), Value::Array(exact)) => {
                items.iter_mut().zip(exact).for_each(|(v, e)| restore(v, e));
            }
            (Value::Object(map), Value::Object(exact)) => {
                for (key, e) in exact {
                    if let Some(v) = map.get_mut(&key) {
                        restore(v, e);
                    }
                }
            }
            _ => {}
        }
    }
    let mut value: Value = parse(text)?;
    restore(&mut value, parse(&quote_fractions(text))?);
    Ok(value)
}

fn parse<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| format!("stored report: {e}"))
}

pub(super) fn outcome(name: &str) -> Result<&'static str, String> {
    [Outcome::Ok, Outcome::Partial, Outcome::Failed, Outcome::Cancelled]
        .into_iter()
        .map(Outcome::name)
        .find(|n| *n == name)
        .ok_or_else(|| format!("stored report: unknown outcome `{name}`"))
}

/// The report stored as `text`.
pub(crate) fn decode(text: &str) -> Result<RunReport, String> {
    let quoted = quote_fractions(text);
    let mirror: ReportMirror = parse(&quoted)?;
    // Tunables keep their JSON types, with exact fractional values.
    let TunablesOnly { tunables } =
        serde_json::from_value(exact_json(text)?).map_err(|e| format!("stored report: {e}"))?;
    let streams = mirror
        .streams
        .into_iter()
        .map(|s| {
            Ok(StreamReport {
                index: s.index,
                outcome: outcome(&s.outcome)?,
                provider: s.provider,
                model: s.model,
                attempts: s.attempts,
                elapsed_ms: s.elapsed_ms.0,
                ttfb_ms: s.ttfb_ms.map(|x| x.0),
                bytes: s.bytes,
                events: s.events,
                keepalives: s.keepalives,
                content: s.content,
                stop_reason: s.stop_reason,
                error: s.error.map(|e| ErrorReport {
                    category: e.category,
                    timer: e.timer,
                    transport: e.transport,
                    status: e.status,
                    retryable: e.retryable,
                    rule: e.rule,
                    message: e.message,
                }),
                failover_hops: s
                    .failover_hops
                    .into_iter()
                    .map(|h| HopReport { from: h.from, to: h.to, reason: h.reason })
                    .collect(),
                backoff_sleeps_ms: s.backoff_sleeps_ms.into_iter().map(|x| x.0).collect(),
                retry_after_ms: s.retry_after_ms.into_iter().map(|x| x.map(|x| x.0)).collect(),
                retry_counts: s
                    .retry_counts
                    .into_iter()
                    .map(|(k, u)| (k, Used { used: u.used, budget: u.budget }))
                    .collect(),
                rate_limits_low: s.rate_limits_low,
                // Verdicts are computed from the stored events, never read
                // back (see `Store::diagnosed_report`).
                diagnosis: None,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let sum = mirror.summary;
    Ok(RunReport {
        run_id: mirror.run_id,
        scenario: mirror.scenario,
        seed: mirror.seed,
        tunables,
        summary: Summary {
            ok: sum.ok,
            partial: sum.partial,
            failed: sum.failed,
            cancelled: sum.cancelled,
            not_started: sum.not_started,
            elapsed_ms: sum.elapsed_ms.0,
        },
        stopped: mirror.stopped,
        streams,
        diagnosis: None,
        counted: mirror.counted.map(|c| Counted {
            p50_ms: c.p50_ms.map(|x| x.0),
            p99_ms: c.p99_ms.map(|x| x.0),
            retries: c.retries,
            verdicts: c.verdicts,
            untrusted: c.untrusted,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_are_quoted_outside_strings_only() {
        let text = r#"{"a":1.5,"b":-2e3,"c":7,"d":"x\"1.5","e":[0.25,null]}"#;
        assert_eq!(quote_fractions(text), r#"{"a":"1.5","b":"-2e3","c":7,"d":"x\"1.5","e":["0.25",null]}"#);
    }

    #[test]
    fn exact_json_keeps_types_and_reads_fractions_exactly() {
        let x = 55794.528960999996_f64;
        let text = format!(r#"{{"a":[{x},"{x}",7],"b":{{"c":{x},"d":true}}}}"#);
        let value = exact_json(&text).unwrap();
        assert_eq!(value["a"][0].as_f64().map(f64::to_bits), Some(x.to_bits()));
        assert_eq!(value["b"]["c"].as_f64().map(f64::to_bits), Some(x.to_bits()));
        assert_eq!(
            (&value["a"][1], &value["a"][2], &value["b"]["d"]),
            (&Value::from(x.to_string()), &Value::from(7), &Value::from(true))
        );
    }

    #[test]
    fn floats_read_back_exactly() {
        // serde_json's default parser reads this one ulp off.
        let x = 55794.528960999996_f64;
        let text = serde_json::to_string(&x).unwrap();
        let Exact(y) = serde_json::from_str(&quote_fractions(&text)).unwrap();
        assert_eq!(x.to_bits(), y.to_bits());
    }
}
