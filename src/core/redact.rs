//! How secrets are kept out of everything stallscope shows or keeps: URLs
//! without the credentials they may carry (user names and passwords,
//! `http://user:pass@proxy`, and query strings, `?key=…`), and text —
//! header values, error bodies, failure messages — with every token that
//! looks like a key replaced by `***`. Neither ever reaches an event, a
//! report, a recording or a log unmasked.

/// `url` with its user info and query masked; text that is not a URL is
/// returned as it is.
pub fn url(text: &str) -> String {
    shown(text, Some(MASK))
}

/// `url` with its user info and query removed, for a URL that is kept
/// (saved settings) rather than shown; a URL without them, and text that
/// is not a URL, are returned as they are.
pub fn without_credentials(text: &str) -> String {
    match reqwest::Url::parse(text) {
        Ok(parsed) if parsed.has_host() && !has_credentials(&parsed) => text.to_owned(),
        _ => shown(text, None),
    }
}

/// A parsed URL with its user info and query masked.
pub fn masked(url: &reqwest::Url) -> String {
    replaced(url, Some(MASK)).to_string()
}

/// What stands in for credentials that are shown masked.
const MASK: &str = "***";

/// `text` with the credentials it may carry replaced by `mask`, or removed.
fn shown(text: &str, mask: Option<&str>) -> String {
    match reqwest::Url::parse(text) {
        Ok(parsed) if parsed.has_host() => replaced(&parsed, mask).to_string(),
        // `user:pw@proxy:3128` parses as a URL of scheme `user` with no
        // host, and text that is no URL may still hold credentials.
        _ => match (text.rsplit_once('@'), mask) {
            (Some((_, host)), Some(mask)) => format!("{mask}@{host}"),
            (Some((_, host)), None) => host.to_owned(),
            (None, _) => text.to_owned(),
        },
    }
}

/// Whether `url` has user info or a query.
fn has_credentials(url: &reqwest::Url) -> bool {
    !url.username().is_empty() || url.password().is_some() || url.query().is_some()
}

/// `url` with its user info and query replaced by `mask`, or removed.
fn replaced(url: &reqwest::Url, mask: Option<&str>) -> reqwest::Url {
    let mut shown = url.clone();
    if !shown.username().is_empty() || shown.password().is_some() {
        // Setting these only fails for URLs that cannot have credentials,
        // and those have none to hide.
        let _ = shown.set_username(mask.unwrap_or(""));
        let _ = shown.set_password(None);
    }
    if shown.query().is_some() {
        shown.set_query(mask);
    }
    shown
}

/// Prefixes of provider API keys and tokens.
const KEY_PREFIXES: &[&str] = &["sk-", "sk_", "pk-", "rk-", "xai-", "gsk_", "ghp_", "gho_", "AIza", "hf_", "eyJ"];

/// Prefixes of the ids providers put in answers and headers (request,
/// message, response, completion, tool call): long and mixed like a key,
/// but what an operator quotes to a provider's support, so kept.
const ID_PREFIXES: &[&str] =
    &["req_", "req-", "msg_", "resp_", "chatcmpl-", "call_", "toolu_", "run_", "file-", "batch_", "cmpl-"];

/// Schemes after which the next token is a credential (`Bearer …`).
const SCHEMES: &[&str] = &["bearer", "basic"];

/// Names whose assigned value is a credential (`"api_key": "…"`, `key=…`).
const KEY_NAMES: &[&str] = &[
    "api_key",
    "api-key",
    "apikey",
    "x-api-key",
    "x-goog-api-key",
    "token",
    "access_token",
    "api_token",
    "auth_token",
    "id_token",
    "refresh_token",
    "session_token",
    "key",
    "password",
    "secret",
    "client_secret",
];

/// Names whose whole assigned value is a credential, whatever its scheme
/// (`Authorization: Token abc…`, `Authorization: SharedKey acct:sig`): every
/// token up to the end of the value is masked.
const WHOLE_VALUE_NAMES: &[&str] = &["authorization", "proxy-authorization"];

/// A run of characters this long with letters and digits mixed is treated
/// as a key even without a known prefix: Azure OpenAI's and Mistral's keys
/// are 32 characters with none.
const ANONYMOUS_KEY_LEN: usize = 32;

/// What the next tokens are, after the one just read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Text.
    Text,
    /// A credential: the value of a key name, or after a scheme.
    Credential,
    /// Credentials up to the end of the value (a quote, a comma, a
    /// semicolon or the end of the line).
    CredentialsToTheEnd,
}

/// `text` with every token that looks like a credential replaced by `***`:
/// known key prefixes, the token after `Bearer` or assigned to a name such
/// as `api_key`, the whole value of an `Authorization`, and long runs of
/// mixed letters and digits that are not a provider's id.
pub fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut next = Next::Text;
    let mut rest = text;
    while !rest.is_empty() {
        let token_len = rest.find(|c: char| !is_token_char(c)).unwrap_or(rest.len());
        let (token, after) = rest.split_at(token_len);
        if (next != Next::Text && !token.is_empty()) || looks_like_key(token) {
            out.push_str(MASK);
        } else {
            out.push_str(token);
        }
        let gap = after.find(is_token_char).unwrap_or(after.len());
        let (separators, following) = after.split_at(gap);
        let lower = token.to_ascii_lowercase();
        let assigned =
            separators.chars().all(|c| matches!(c, ' ' | '"' | '\'' | ':' | '=')) && separators.contains([':', '=']);
        // Only spaces may stand between a scheme and its token.
        let spaced = !separators.is_empty() && separators.chars().all(|c| c == ' ');
        next = if SCHEMES.contains(&lower.as_str()) && spaced {
            Next::Credential
        } else if WHOLE_VALUE_NAMES.contains(&lower.as_str()) && assigned {
            Next::CredentialsToTheEnd
        } else if KEY_NAMES.contains(&lower.as_str()) && assigned {
            Next::Credential
        } else if next == Next::CredentialsToTheEnd && !separators.contains(['"', '\'', ',', ';', '\n', '\r']) {
            Next::CredentialsToTheEnd
        } else {
            Next::Text
        };
        out.push_str(separators);
        rest = following;
    }
    out
}

/// Whether a token is shaped like a key: a known key prefix with a body,
/// or a long mixed run that is neither a provider's id nor a UUID.
fn looks_like_key(token: &str) -> bool {
    if KEY_PREFIXES.iter().any(|p| token.starts_with(p) && token.len() >= p.len() + 8) {
        return true;
    }
    token.len() >= ANONYMOUS_KEY_LEN
        && token.bytes().any(|b| b.is_ascii_digit())
        && token.bytes().any(|b| b.is_ascii_alphabetic())
        && !ID_PREFIXES.iter().any(|p| token.starts_with(p))
        && !is_uuid(token)
}

/// `8-4-4-4-12` hexadecimal digits: a request id, not a key.
fn is_uuid(token: &str) -> bool {
    let groups: Vec<&str> = token.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+' | '/')
}

#[cfg(test)]
mod tests {
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
            let shown = super::text(text);
            assert!(!shown.contains(secret), "{text} → {shown}");
            assert!(shown.contains("***"), "{text} → {shown}");
        }
        let plain = r#"{"error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#;
        assert_eq!(super::text(plain), plain);
        for (text, secret) in [
            // Azure OpenAI's and Mistral's: 32 characters, no prefix.
            ("key 0123456789abcdef0123456789abcdef was refused", "0123456789abcdef"),
            ("invalid key: Jq7zXk2LmN9pQr4StUv6WxY8zA1bC3dE", "Jq7zXk2L"),
            (r#"{"client_secret": "abcdef"}"#, "abcdef"),
            ("secret=hunter2", "hunter2"),
            ("api_token: t0k3n", "t0k3n"),
            ("auth_token=xyz", "xyz"),
            (r#"{"refresh_token":"r-123"}"#, "r-123"),
            ("Authorization: Token abc123, next", "abc123"),
            ("authorization: SharedKey acct:c2lnbmF0dXJl", "c2lnbmF0dXJl"),
            ("Authorization: Bearer plainword", "plainword"),
        ] {
            let shown = super::text(text);
            assert!(!shown.contains(secret), "{text} → {shown}");
        }
        assert_eq!(super::text("Authorization: Token abc123, next"), "Authorization: *** ***, next");
        // Ids a provider's support asks for stay readable.
        for id in [
            "req_0123456789abcdef0123456789abcdef",
            "chatcmpl-AbCdEf0123456789AbCdEf0123456789",
            "msg_01XFDUDYJgAACzvnptvVoYEL0123",
            "550e8400-e29b-41d4-a716-446655440000",
        ] {
            assert_eq!(super::text(id), id);
        }
        let words = "Incorrect API key provided: check the key. Bearer tokens expire.";
        // Over-redacting a word after "Bearer" is the price of never missing a token.
        assert_eq!(super::text(words), "Incorrect API key provided: check the key. Bearer *** expire.");
        assert_eq!(super::text("ünïcode — fine"), "ünïcode — fine");
    }

    #[test]
    fn credentials_and_queries_are_masked() {
        assert_eq!(super::url("http://user:s3cret@proxy:3128"), "http://***@proxy:3128/");
        assert_eq!(super::url("https://api.example/v1/chat?key=abc"), "https://api.example/v1/chat?***");
        assert_eq!(super::url("socks5://127.0.0.1:1080"), "socks5://127.0.0.1:1080");
        assert_eq!(super::url("off"), "off");
        assert_eq!(super::url("user:pw@proxy:3128"), "***@proxy:3128");
        assert_eq!(super::url(""), "");
    }

    #[test]
    fn credentials_and_queries_can_be_removed() {
        let kept = super::without_credentials;
        assert_eq!(kept("https://user:s3cret@otel.example:4318/otlp?key=abc"), "https://otel.example:4318/otlp");
        assert_eq!(kept("http://127.0.0.1:6006"), "http://127.0.0.1:6006");
        assert_eq!(kept("user:pw@otel.example:4318"), "otel.example:4318");
        assert_eq!(kept("off"), "off");
    }
}
