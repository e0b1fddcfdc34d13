//! What of a response the recording keeps beyond timings: the headers that
//! decisions and diagnosis read (from an allowlist), the start of an error
//! body with anything that looks like a key redacted, and — when asked for —
//! the body itself, bounded per attempt.
//!
//! Replay needs exactly what the core's decisions depended on; nothing here
//! may ever carry a credential, so headers are allowed in by name, never
//! filtered out, and every kept value goes through [`redact_secrets`].

use http::HeaderMap;

use super::event::RecordedBody;
use super::policy::{BodyMode, BodySettings};

/// Headers kept by exact name.
const KEPT: &[&str] = &[
    "retry-after",
    "retry-after-ms",
    "x-should-retry",
    "date",
    "content-type",
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

/// The allowlisted headers of a response, lower-case, in the order
/// received, values redacted.
pub fn recorded_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            KEPT.contains(&name) || KEPT_PREFIXES.iter().any(|prefix| name.starts_with(prefix))
        })
        .map(|(name, value)| (name.as_str().to_owned(), redact_secrets(&String::from_utf8_lossy(value.as_bytes()))))
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
    (redact_secrets(&text[..cut]), truncated)
}

/// Prefixes of provider API keys and tokens.
const KEY_PREFIXES: &[&str] = &["sk-", "sk_", "pk-", "rk-", "xai-", "gsk_", "ghp_", "gho_", "AIza", "hf_", "eyJ"];

/// Schemes after which the next token is a credential (`Bearer …`).
const SCHEMES: &[&str] = &["bearer", "basic"];

/// Names whose assigned value is a credential (`"api_key": "…"`, `key=…`).
const KEY_NAMES: &[&str] = &["api_key", "api-key", "apikey", "x-api-key", "token", "access_token", "key", "password"];

/// A run of characters this long with letters and digits mixed is treated
/// as a key even without a known prefix (request ids are shorter).
const ANONYMOUS_KEY_LEN: usize = 40;

/// `text` with every token that looks like a credential replaced by `***`:
/// known key prefixes, the token after `Bearer` or assigned to a name such
/// as `api_key`, and long runs of mixed letters and digits.
pub fn redact_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut value_follows = false;
    let mut rest = text;
    while !rest.is_empty() {
        let token_len = rest.find(|c: char| !is_token_char(c)).unwrap_or(rest.len());
        let (token, after) = rest.split_at(token_len);
        let looks_like_key = KEY_PREFIXES.iter().any(|p| token.starts_with(p) && token.len() >= p.len() + 8)
            || (token.len() >= ANONYMOUS_KEY_LEN
                && token.bytes().any(|b| b.is_ascii_digit())
                && token.bytes().any(|b| b.is_ascii_alphabetic()));
        let lower = token.to_ascii_lowercase();
        if (value_follows && !token.is_empty()) || looks_like_key {
            out.push_str("***");
        } else {
            out.push_str(token);
        }
        let gap = after.find(is_token_char).unwrap_or(after.len());
        let (separators, next) = after.split_at(gap);
        // Only separators may stand between the word and its value: a
        // scheme is followed by spaces, a name by an `=` or a `:`.
        value_follows = if SCHEMES.contains(&lower.as_str()) {
            !separators.is_empty() && separators.chars().all(|c| c == ' ')
        } else if KEY_NAMES.contains(&lower.as_str()) {
            separators.chars().all(|c| matches!(c, ' ' | '"' | '\'' | ':' | '=')) && separators.contains([':', '='])
        } else {
            false
        };
        out.push_str(separators);
        rest = next;
    }
    out
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+' | '/')
}

/// An attempt's body being kept for the recording, up to a cap.
#[derive(Debug)]
pub struct BodyCapture {
    max_bytes: usize,
    kept: usize,
    truncated: bool,
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
        Some(BodyCapture { max_bytes: settings.max_bytes, kept: 0, truncated: false, body })
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
            RecordedBody::Text { truncated, .. } | RecordedBody::Raw { truncated, .. } => *truncated = self.truncated,
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
        let kept = recorded_headers(&headers);
        let names: Vec<&str> = kept.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["retry-after-ms", "x-ratelimit-remaining-requests", "anthropic-ratelimit-tokens-reset", "x-request-id"]
        );
        assert_eq!(kept[0].1, "700");
    }

    #[test]
    fn keys_in_bodies_are_redacted() {
        let cases = [
            (r#"{"error":"Incorrect API key provided: sk-proj-abcdefghijklmnop"}"#, "sk-proj"),
            ("Authorization: Bearer abcdefgh12345678", "abcdefgh12345678"),
            (r#"{"api_key": "zzzzzzzzzzzz"}"#, "zzzzzzzzzzzz"),
            ("url?key=AIzaSyA-1234567890abcdef", "AIzaSy"),
            ("id 0123456789abcdef0123456789abcdef01234567", "0123456789abcdef"),
        ];
        for (text, secret) in cases {
            let shown = redact_secrets(text);
            assert!(!shown.contains(secret), "{text} → {shown}");
            assert!(shown.contains("***"), "{text} → {shown}");
        }
        let plain = r#"{"error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#;
        assert_eq!(redact_secrets(plain), plain);
        let words = "Incorrect API key provided: check the key. Bearer tokens expire.";
        // Over-redacting a word after "Bearer" is the price of never missing a token.
        assert_eq!(redact_secrets(words), "Incorrect API key provided: check the key. Bearer *** expire.");
        assert_eq!(redact_secrets("ünïcode — fine"), "ünïcode — fine");
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
