//! Structured rate-limit state read from LLM provider response headers.
//!
//! OpenAI (`x-ratelimit-{limit,remaining,reset}-{requests,tokens}`) and
//! Anthropic (`anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`)
//! report per-bucket quotas on every response. Reading them lets the caller
//! cool a credential down for exactly as long as an exhausted bucket needs,
//! and slow down before the server starts refusing.
//!
//! Each field is parsed on its own: a garbage value leaves that field `None`
//! without discarding the rest of the bucket.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

use super::retry_after::{parse_reset_hint, server_clock};

/// One quota bucket (requests, tokens, …) as last reported by the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Capacity of the bucket per window.
    pub limit: Option<u64>,
    /// Capacity left in the current window.
    pub remaining: Option<u64>,
    /// Time from the response until the bucket is replenished.
    pub reset_after: Option<Duration>,
}

/// Every rate-limit bucket a provider reported on one response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimits {
    /// Requests per window.
    pub requests: Bucket,
    /// Tokens per window (OpenAI counts input and output together here).
    pub tokens: Bucket,
    /// Input tokens per window (Anthropic).
    pub input_tokens: Bucket,
    /// Output tokens per window (Anthropic).
    pub output_tokens: Bucket,
}

/// Candidate header names for one bucket's fields, OpenAI first then Anthropic.
struct BucketHeaders {
    limit: &'static [&'static str],
    remaining: &'static [&'static str],
    reset: &'static [&'static str],
}

const REQUESTS: BucketHeaders = BucketHeaders {
    limit: &["x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit"],
    remaining: &["x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining"],
    reset: &["x-ratelimit-reset-requests", "anthropic-ratelimit-requests-reset"],
};

const TOKENS: BucketHeaders = BucketHeaders {
    limit: &["x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit"],
    remaining: &["x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining"],
    reset: &["x-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-reset"],
};

const INPUT_TOKENS: BucketHeaders = BucketHeaders {
    limit: &["anthropic-ratelimit-input-tokens-limit"],
    remaining: &["anthropic-ratelimit-input-tokens-remaining"],
    reset: &["anthropic-ratelimit-input-tokens-reset"],
};

const OUTPUT_TOKENS: BucketHeaders = BucketHeaders {
    limit: &["anthropic-ratelimit-output-tokens-limit"],
    remaining: &["anthropic-ratelimit-output-tokens-remaining"],
    reset: &["anthropic-ratelimit-output-tokens-reset"],
};

impl RateLimits {
    /// Reads OpenAI- and Anthropic-style rate-limit headers.
    ///
    /// Returns `None` when no rate-limit header yields a usable value, so a
    /// response whose only rate-limit headers are garbage is treated like one
    /// without any. Absolute reset timestamps become delays against the
    /// response's `Date`, or against `now` (wall clock) without a valid one
    /// (see [`server_clock`]).
    pub fn from_headers(headers: &HeaderMap, now: SystemTime) -> Option<RateLimits> {
        let now = server_clock(headers, now);
        let limits = RateLimits {
            requests: Bucket::from_headers(headers, &REQUESTS, now),
            tokens: Bucket::from_headers(headers, &TOKENS, now),
            input_tokens: Bucket::from_headers(headers, &INPUT_TOKENS, now),
            output_tokens: Bucket::from_headers(headers, &OUTPUT_TOKENS, now),
        };
        (limits != RateLimits::default()).then_some(limits)
    }

    /// The longest reset among buckets whose remaining is 0 (exhausted) — feeds
    /// credential cooldowns.
    ///
    /// Only exhausted buckets count: a bucket with capacity left reports when
    /// it will be full again, which does not block the next request.
    pub fn exhausted_reset(&self) -> Option<Duration> {
        self.buckets().filter(|bucket| bucket.remaining == Some(0)).filter_map(|bucket| bucket.reset_after).max()
    }

    /// True when any bucket's remaining/limit is at or below `fraction` (e.g. 0.05).
    ///
    /// A bucket with `remaining == 0` counts as low even without a known limit,
    /// since an empty bucket is at or below any non-negative fraction. Buckets
    /// missing `remaining` are ignored, and a NaN `fraction` never matches.
    pub fn is_low(&self, fraction: f64) -> bool {
        self.buckets().any(|bucket| bucket.is_low(fraction))
    }

    /// Each bucket with its name: `requests`, `tokens`, `input_tokens`,
    /// `output_tokens`.
    pub fn named_buckets(&self) -> [(&'static str, &Bucket); 4] {
        [
            ("requests", &self.requests),
            ("tokens", &self.tokens),
            ("input_tokens", &self.input_tokens),
            ("output_tokens", &self.output_tokens),
        ]
    }

    fn buckets(&self) -> impl Iterator<Item = &Bucket> {
        [&self.requests, &self.tokens, &self.input_tokens, &self.output_tokens].into_iter()
    }
}

impl Bucket {
    /// True when at most `fraction` of the limit is left, or nothing is
    /// (see [`RateLimits::is_low`]).
    pub fn is_low(&self, fraction: f64) -> bool {
        match (self.remaining, self.limit) {
            (Some(0), _) => fraction >= 0.0,
            // Multiplying instead of dividing sidesteps a zero limit.
            (Some(remaining), Some(limit)) => remaining as f64 <= fraction * limit as f64,
            _ => false,
        }
    }

    fn from_headers(headers: &HeaderMap, names: &BucketHeaders, now: SystemTime) -> Bucket {
        Bucket {
            limit: first_parsed(headers, names.limit, parse_count),
            remaining: first_parsed(headers, names.remaining, parse_count),
            reset_after: first_parsed(headers, names.reset, |value| parse_reset_hint(value, now)),
        }
    }
}

/// The first of `names` whose value parses. Values that are not visible ASCII
/// cannot hold a count or a time, so they are skipped like garbage.
fn first_parsed<T>(headers: &HeaderMap, names: &[&str], parse: impl Fn(&str) -> Option<T>) -> Option<T> {
    names.iter().find_map(|name| headers.get(*name).and_then(|value| value.to_str().ok()).and_then(&parse))
}

fn parse_count(value: &str) -> Option<u64> {
    value.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;
    use std::time::UNIX_EPOCH;

    /// 2026-11-29T18:13:20Z.
    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_795_976_000)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for &(name, value) in pairs {
            map.insert(name, HeaderValue::from_str(value).expect("test value"));
        }
        map
    }

    #[test]
    fn openai_headers() {
        let map = headers(&[
            ("x-ratelimit-limit-requests", "10000"),
            ("x-ratelimit-remaining-requests", "9999"),
            ("x-ratelimit-reset-requests", "6ms"),
            ("x-ratelimit-limit-tokens", "2000000"),
            ("x-ratelimit-remaining-tokens", "1999874"),
            ("x-ratelimit-reset-tokens", "3ms"),
            ("content-type", "text/event-stream"),
        ]);
        assert_eq!(
            RateLimits::from_headers(&map, now()),
            Some(RateLimits {
                requests: Bucket {
                    limit: Some(10_000),
                    remaining: Some(9_999),
                    reset_after: Some(Duration::from_millis(6)),
                },
                tokens: Bucket {
                    limit: Some(2_000_000),
                    remaining: Some(1_999_874),
                    reset_after: Some(Duration::from_millis(3)),
                },
                ..RateLimits::default()
            })
        );
    }

    #[test]
    fn anthropic_headers() {
        let map = headers(&[
            ("anthropic-ratelimit-requests-limit", "4000"),
            ("anthropic-ratelimit-requests-remaining", "3999"),
            ("anthropic-ratelimit-requests-reset", "2026-11-29T18:13:21Z"),
            ("anthropic-ratelimit-tokens-limit", "480000"),
            ("anthropic-ratelimit-tokens-remaining", "480000"),
            ("anthropic-ratelimit-tokens-reset", "2026-11-29T18:13:20Z"),
            ("anthropic-ratelimit-input-tokens-limit", "400000"),
            ("anthropic-ratelimit-input-tokens-remaining", "400000"),
            ("anthropic-ratelimit-input-tokens-reset", "2026-11-29T18:13:20Z"),
            ("anthropic-ratelimit-output-tokens-limit", "80000"),
            ("anthropic-ratelimit-output-tokens-remaining", "0"),
            ("anthropic-ratelimit-output-tokens-reset", "2026-11-29T20:14:00.5+02:00"),
            ("retry-after", "40"),
        ]);
        let limits = RateLimits::from_headers(&map, now()).expect("limits");
        assert_eq!(
            limits.requests,
            Bucket { limit: Some(4000), remaining: Some(3999), reset_after: Some(Duration::from_secs(1)) }
        );
        assert_eq!(limits.tokens.reset_after, Some(Duration::ZERO));
        assert_eq!(limits.input_tokens.limit, Some(400_000));
        assert_eq!(
            limits.output_tokens,
            Bucket { limit: Some(80_000), remaining: Some(0), reset_after: Some(Duration::from_millis(40_500)) }
        );
        assert_eq!(limits.exhausted_reset(), Some(Duration::from_millis(40_500)));
        assert!(limits.is_low(0.05));
    }

    #[test]
    fn reset_timestamps_are_read_against_the_servers_date() {
        let reset = |pairs: &[(&'static str, &str)]| {
            RateLimits::from_headers(&headers(pairs), now()).and_then(|limits| limits.requests.reset_after)
        };
        let at = ("anthropic-ratelimit-requests-reset", "2026-11-29T18:13:50Z");
        // 30 s from `now()` by our clock.
        assert_eq!(reset(&[at]), Some(Duration::from_secs(30)));
        // A server 5 minutes ahead means 30 s from its own now…
        assert_eq!(
            reset(&[
                ("date", "Sun, 29 Nov 2026 18:18:20 GMT"),
                ("anthropic-ratelimit-requests-reset", "2026-11-29T18:18:50Z")
            ]),
            Some(Duration::from_secs(30))
        );
        // …and one 5 minutes behind too.
        assert_eq!(
            reset(&[
                ("date", "Sun, 29 Nov 2026 18:08:20 GMT"),
                ("anthropic-ratelimit-requests-reset", "2026-11-29T18:08:50Z")
            ]),
            Some(Duration::from_secs(30))
        );
        // A `Date` that is not an HTTP-date leaves the wall clock.
        assert_eq!(reset(&[("date", "2026-11-29T18:08:20Z"), at]), Some(Duration::from_secs(30)));
    }

    #[test]
    fn exhausted_reset_picks_longest_exhausted_bucket() {
        let limits = RateLimits {
            requests: Bucket { remaining: Some(0), reset_after: Some(Duration::from_secs(2)), ..Bucket::default() },
            tokens: Bucket { remaining: Some(10), reset_after: Some(Duration::from_secs(600)), ..Bucket::default() },
            input_tokens: Bucket {
                remaining: Some(0),
                reset_after: Some(Duration::from_secs(30)),
                ..Bucket::default()
            },
            output_tokens: Bucket { remaining: Some(0), ..Bucket::default() },
        };
        assert_eq!(limits.exhausted_reset(), Some(Duration::from_secs(30)));
        assert_eq!(RateLimits::default().exhausted_reset(), None);
    }

    #[test]
    fn garbage_is_ignored_per_field() {
        let map = headers(&[
            ("x-ratelimit-limit-requests", "lots"),
            ("x-ratelimit-remaining-requests", "12"),
            ("x-ratelimit-reset-requests", "-1s"),
            ("x-ratelimit-limit-tokens", "-5"),
            ("x-ratelimit-remaining-tokens", "99999999999999999999999"),
            ("x-ratelimit-reset-tokens", "1m"),
        ]);
        let limits = RateLimits::from_headers(&map, now()).expect("limits");
        assert_eq!(limits.requests, Bucket { remaining: Some(12), ..Bucket::default() });
        assert_eq!(limits.tokens, Bucket { reset_after: Some(Duration::from_secs(60)), ..Bucket::default() });

        let mut non_ascii = HeaderMap::new();
        non_ascii.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_bytes(b"1\xe92").expect("obs-text is a legal header byte"),
        );
        assert_eq!(RateLimits::from_headers(&non_ascii, now()), None);
    }

    #[test]
    fn falls_back_to_anthropic_name_when_openai_value_is_garbage() {
        let map = headers(&[("x-ratelimit-remaining-tokens", "n/a"), ("anthropic-ratelimit-tokens-remaining", "7")]);
        let limits = RateLimits::from_headers(&map, now()).expect("limits");
        assert_eq!(limits.tokens.remaining, Some(7));
    }

    #[test]
    fn none_without_rate_limit_headers() {
        assert_eq!(RateLimits::from_headers(&HeaderMap::new(), now()), None);
        let unrelated = headers(&[("retry-after", "3"), ("x-request-id", "req_1")]);
        assert_eq!(RateLimits::from_headers(&unrelated, now()), None);
        let garbage = headers(&[("x-ratelimit-limit-requests", "")]);
        assert_eq!(RateLimits::from_headers(&garbage, now()), None);
    }

    #[test]
    fn is_low_thresholds() {
        let with = |limit, remaining| RateLimits {
            tokens: Bucket { limit, remaining, reset_after: None },
            ..RateLimits::default()
        };
        assert!(with(Some(1000), Some(50)).is_low(0.05));
        assert!(!with(Some(1000), Some(51)).is_low(0.05));
        assert!(with(None, Some(0)).is_low(0.05));
        assert!(with(Some(0), Some(0)).is_low(0.0));
        assert!(!with(Some(0), Some(3)).is_low(0.05));
        assert!(!with(Some(1000), None).is_low(0.05));
        assert!(!with(Some(1000), Some(0)).is_low(f64::NAN));
        assert!(!with(Some(1000), Some(10)).is_low(-1.0));
        assert!(!RateLimits::default().is_low(1.0));
    }

    const ALL_HEADERS: [&str; 18] = [
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-input-tokens-limit",
        "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-output-tokens-limit",
        "anthropic-ratelimit-output-tokens-remaining",
        "anthropic-ratelimit-output-tokens-reset",
    ];

    fn exercise(map: &HeaderMap, fraction: f64) {
        if let Some(limits) = RateLimits::from_headers(map, now()) {
            let _ = limits.exhausted_reset();
            let _ = limits.is_low(fraction);
        }
    }

    proptest! {
        #[test]
        fn arbitrary_values_never_panic(
            values in proptest::collection::vec(".*", ALL_HEADERS.len()),
            fraction in any::<f64>(),
        ) {
            let mut map = HeaderMap::new();
            for (name, value) in ALL_HEADERS.iter().zip(&values) {
                if let Ok(value) = HeaderValue::from_str(value) {
                    map.insert(*name, value);
                }
            }
            exercise(&map, fraction);
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..32), ALL_HEADERS.len()),
            fraction in any::<f64>(),
        ) {
            let mut map = HeaderMap::new();
            for (name, value) in ALL_HEADERS.iter().zip(&values) {
                if let Ok(value) = HeaderValue::from_bytes(value) {
                    map.insert(*name, value);
                }
            }
            exercise(&map, fraction);
        }

        #[test]
        fn counts_round_trip(limit in any::<u64>(), remaining in any::<u64>()) {
            let mut map = HeaderMap::new();
            map.insert("anthropic-ratelimit-tokens-limit", HeaderValue::from(limit));
            map.insert("x-ratelimit-remaining-tokens", HeaderValue::from(remaining));
            let limits = RateLimits::from_headers(&map, now()).expect("limits");
            prop_assert_eq!(limits.tokens.limit, Some(limit));
            prop_assert_eq!(limits.tokens.remaining, Some(remaining));
        }
    }
}
