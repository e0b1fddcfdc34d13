//! What of a response the recording keeps beyond timings: the headers that
//! decisions and diagnosis read (from an allowlist), the start of an error
//! body with anything that looks like a key redacted, and — when asked for —
//! the body itself, bounded per attempt.
//!
//! Replay needs exactly what the core's decisions depended on; nothing here
//! may ever carry a credential, so headers are allowed in by name, never
//! filtered out, and every kept value goes through [`redact::text`]: header
//! values, the start of an error body, and under `RECORD_BODIES=raw` a
//! body that is not an event stream (an error body, where providers and
//! gateways echo a key). A raw event stream is kept as it came, byte for
//! byte, for the replay's real decoder: it is the provider's answer, and
//! `RECORD_BODIES=raw` says so where it is chosen.

use http::HeaderMap;

use super::event::RecordedBody;
use super::policy::{BodyMode, BodySettings};
use super::redact;

/// Headers kept by exact name.
const KEPT: &[&str] = &[
    "retry-after",
    "retry-after-ms",
    "x-should-retry",
    "date",
    "content-type",
    "content-encoding",
    "server",
    "via",
    "x-cache",
    "x-request-id",
    "request-id",
    "x-amzn-requestid",
    "x-amz-request-id",
    "cf-ray",
    "openai-processing-ms",
];

/// Headers kept by prefix: the rate-limit buckets.
const KEPT_PREFIXES: &[&str] = &["x-ratelimit-", "anthropic-ratelimit-"];

/// How much of an error body is recorded.
pub const ERROR_BODY_RECORDED: usize = 4 * 1024;

/// The allowlisted headers of a response, and those the user rules read
/// (`rule_headers`, lower-case), lower-case, in the order received, values
/// redacted.
pub fn recorded_headers(headers: &HeaderMap, rule_headers: &[String]) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            KEPT.contains(&name)
                || KEPT_PREFIXES.iter().any(|prefix| name.starts_with(prefix))
                || rule_headers.iter().any(|h| h == name)
        })
        .map(|(name, value)| (name.as_str().to_owned(), redact::text(&String::from_utf8_lossy(value.as_bytes()))))
        .collect()
}

/// The start of an error body as recorded: at most
/// [`ERROR_BODY_RECORDED`] bytes (cut on a character boundary), secrets
/// redacted. Returns the text and whether it was cut.
pub fn recorded_error_body(body: &[u8]) -> (String, bool) {
    let text = String::from_utf8_lossy(body);
    let truncated = text.len() > ERROR_BODY_RECORDED;
    let mut cut = text.len().min(ERROR_BODY_RECORDED);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    (redact::text(&text[..cut]), truncated)
}

/// An attempt's body being kept for the recording, up to a cap.
#[derive(Debug)]
pub struct BodyCapture {
    max_bytes: usize,
    kept: usize,
    truncated: bool,
    /// The body is not an event stream (an error body, most often): its
    /// raw bytes are redacted when the capture ends.
    not_a_stream: bool,
    body: RecordedBody,
}

impl BodyCapture {
    /// A capture for one attempt, or `None` when bodies are not recorded.
    pub fn new(settings: BodySettings) -> Option<BodyCapture> {
        let body = match settings.mode {
            BodyMode::Off => return None,
            BodyMode::Text => RecordedBody::Text { texts: Vec::new(), truncated: false },
            BodyMode::Raw => RecordedBody::Raw { bytes: Vec::new(), truncated: false },
        };
        Some(BodyCapture { max_bytes: settings.max_bytes, kept: 0, truncated: false, not_a_stream: false, body })
    }

    /// Says the body being kept is not an event stream: an error body, or
    /// an answer that does not stream. Raw bytes of such a body are
    /// redacted like the error body the recording keeps, as they are where
    /// providers and gateways echo a key ("Incorrect API key provided:
    /// sk-…"); an event stream's bytes are kept as they came.
    pub fn not_a_stream(&mut self) {
        self.not_a_stream = true;
    }

    /// Keeps a chunk's bytes (raw mode).
    pub fn chunk(&mut self, chunk: &[u8]) {
        if let RecordedBody::Raw { bytes, .. } = &mut self.body {
            let room = self.max_bytes - self.kept;
            let take = chunk.len().min(room);
            bytes.extend_from_slice(&chunk[..take]);
            self.kept += take;
            self.truncated |= take < chunk.len();
        }
    }

    /// Keeps one parsed event's text (text mode). Once the cap is reached
    /// the events that follow are not kept at all, so the texts kept are
    /// always those of the first events, in order.
    pub fn event(&mut self, text: &str) {
        if let RecordedBody::Text { texts, .. } = &mut self.body {
            if self.truncated || self.kept + text.len() > self.max_bytes {
                self.truncated = true;
                return;
            }
            self.kept += text.len();
            texts.push(text.to_owned());
        }
    }

    /// What was kept.
    pub fn finish(mut self) -> RecordedBody {
        match &mut self.body {
            RecordedBody::Text { truncated, .. } => *truncated = self.truncated,
            RecordedBody::Raw { truncated, bytes } => {
                *truncated = self.truncated;
                if self.not_a_stream {
                    *bytes = redact::text(&String::from_utf8_lossy(bytes)).into_bytes();
                }
            }
        }
        self.body
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn only_allowlisted_headers_are_kept_in_order() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after-ms", HeaderValue::from_static("700"));
        headers.insert("set-cookie", HeaderValue::from_static("session=abc"));
        headers.insert("authorization", HeaderValue::from_static("Bearer sk-live-1234567890"));
        headers.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("0"));
        headers.insert("anthropic-ratelimit-tokens-reset", HeaderValue::from_static("2026-12-01T00:00:00Z"));
        headers.insert("x-request-id", HeaderValue::from_static("req_123"));
        headers.insert("openai-organization", HeaderValue::from_static("org-secret"));
        headers.insert("x-envoy-overloaded", HeaderValue::from_static("true"));
        let kept = recorded_headers(&headers, &[]);
        let names: Vec<&str> = kept.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["retry-after-ms", "x-ratelimit-remaining-requests", "anthropic-ratelimit-tokens-reset", "x-request-id"]
        );
        assert_eq!(kept[0].1, "700");
        // Review D5: a header a user rule reads is kept too.
        let kept = recorded_headers(&headers, &["x-envoy-overloaded".to_owned()]);
        assert!(kept.contains(&("x-envoy-overloaded".to_owned(), "true".to_owned())), "{kept:?}");
    }

    /// Review R2: a raw error body is redacted as the error body the
    /// recording keeps is; a raw event stream is kept byte for byte.
    #[test]
    fn raw_error_bodies_are_redacted_and_streams_kept_as_they_came() {
        let settings = BodySettings { mode: BodyMode::Raw, max_bytes: 1024 };
        let echoed = br#"{"error":{"message":"Incorrect API key provided: sk-proj-abcdefghijklmnop"}}"#;
        let mut error = BodyCapture::new(settings).unwrap();
        error.not_a_stream();
        error.chunk(echoed);
        let RecordedBody::Raw { bytes, .. } = error.finish() else { panic!("raw") };
        let kept = String::from_utf8(bytes).unwrap();
        assert_eq!(kept, r#"{"error":{"message":"Incorrect API key provided: ***"}}"#);

        let mut stream = BodyCapture::new(settings).unwrap();
        stream.chunk(b"data: {\"id\":\"sk-not-a-key-but-bytes\"}\n\n");
        let RecordedBody::Raw { bytes, .. } = stream.finish() else { panic!("raw") };
        assert_eq!(bytes, b"data: {\"id\":\"sk-not-a-key-but-bytes\"}\n\n");
    }

    #[test]
    fn error_bodies_are_bounded_on_a_character_boundary() {
        let body = "é".repeat(ERROR_BODY_RECORDED);
        let (text, truncated) = recorded_error_body(body.as_bytes());
        assert!(truncated);
        assert!(text.len() <= ERROR_BODY_RECORDED && text.chars().all(|c| c == 'é'));
        assert_eq!(recorded_error_body(b"short"), ("short".to_owned(), false));
    }

    #[test]
    fn captures_stop_at_their_cap_and_say_so() {
        let settings = |mode| BodySettings { mode, max_bytes: 10 };
        assert!(BodyCapture::new(settings(BodyMode::Off)).is_none());

        let mut raw = BodyCapture::new(settings(BodyMode::Raw)).unwrap();
        raw.chunk(b"data: 1234");
        raw.chunk(b"more");
        raw.event("ignored in raw mode");
        assert_eq!(raw.finish(), RecordedBody::Raw { bytes: b"data: 1234".to_vec(), truncated: true });

        let mut text = BodyCapture::new(settings(BodyMode::Text)).unwrap();
        text.chunk(b"ignored in text mode");
        text.event("Hello");
        text.event("");
        text.event("world!");
        text.event("!");
        assert_eq!(text.finish(), RecordedBody::Text { texts: vec!["Hello".into(), String::new()], truncated: true });

        let mut whole = BodyCapture::new(settings(BodyMode::Text)).unwrap();
        whole.event("fits");
        assert_eq!(whole.finish(), RecordedBody::Text { texts: vec!["fits".into()], truncated: false });
    }
}
