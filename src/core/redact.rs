//! How secrets are kept out of everything stallscope shows or keeps: URLs
//! with the credentials they may carry masked (passwords,
//! `http://user:***@proxy`, user names that are keys, and query strings,
//! `?***` for `?key=…`), and text —
//! header values, error bodies, failure messages — with every token that
//! looks like a key replaced by `***`. Neither ever reaches an event, a
//! report, a recording or a log unmasked.

/// `url` as it may be shown or kept anywhere (a line on stderr, an error,
/// the app's saved state, the database): the password of its user info
/// masked and its user name kept (`http://user:***@proxy:3128`), unless
/// the user name itself looks like a key (`https://***@host`, a token
/// given as the user); its query masked whole (`?***`, where `?key=…`
/// goes). The rest is kept as it was written, and text with no user info
/// or query (`off`, a plain host) is returned as it is. `user:pw@proxy`
/// without a scheme is masked the same way.
pub fn url(url: &str) -> String {
    let parts = UrlParts::of(url);
    let mut shown = String::with_capacity(url.len());
    shown.push_str(parts.scheme);
    if let Some(userinfo) = parts.userinfo {
        shown.push_str(&masked_userinfo(userinfo));
        shown.push('@');
    }
    shown.push_str(parts.rest);
    if parts.query.is_some() {
        shown.push('?');
        shown.push_str(MASK);
    }
    shown
}

/// A parsed URL, as [`url`] shows it.
pub fn masked(parsed: &reqwest::Url) -> String {
    url(parsed.as_str())
}

/// Whether `text` is a URL whose credentials [`url`] masked: a password,
/// user name or query that is the mask itself. Such a URL, read back
/// from saved state or a recording, cannot be used as it is: its
/// credentials must be given again.
pub fn is_masked(text: &str) -> bool {
    let parts = UrlParts::of(text);
    parts.userinfo.is_some_and(|userinfo| userinfo.split(':').any(|part| part == MASK))
        || parts.query.is_some_and(|query| query == MASK)
}

/// What stands in for credentials that are shown masked.
const MASK: &str = "***";

/// A URL's text cut where credentials may sit, as written (no parsing, so
/// what is shown is what was typed): `scheme://`, `userinfo@`, the host
/// and path, `?query`.
struct UrlParts<'a> {
    /// `https://`, or empty for `user:pw@proxy:3128`.
    scheme: &'a str,
    /// What comes before the host's `@`.
    userinfo: Option<&'a str>,
    /// The host, port and path.
    rest: &'a str,
    /// What comes after the first `?` (a fragment included).
    query: Option<&'a str>,
}

impl UrlParts<'_> {
    fn of(text: &str) -> UrlParts<'_> {
        let (scheme, after) = text.split_at(text.find("://").map_or(0, |i| i + 3));
        let (authority, path) = after.split_at(after.find(['/', '?', '#']).unwrap_or(after.len()));
        // The last `@` ends the user info: a password may hold one.
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo), host),
            None => (None, authority),
        };
        let (path, query) = match path.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path, None),
        };
        // The host and path are contiguous in `text`.
        let start = text.len() - after.len() + authority.len() - host.len();
        UrlParts { scheme, userinfo, rest: &text[start..start + host.len() + path.len()], query }
    }
}

/// `user:password` with the password masked, and the user name too when
/// it looks like a key.
fn masked_userinfo(userinfo: &str) -> String {
    let (user, password) = match userinfo.split_once(':') {
        Some((user, password)) => (user, Some(password)),
        None => (userinfo, None),
    };
    let user = if looks_like_key(user) { MASK } else { user };
    match password {
        Some(_) => format!("{user}:{MASK}"),
        None => user.to_owned(),
    }
}

/// `text` with the user info of every URL in it (`scheme://user:pw@host`)
/// masked as [`url`] masks it; the query is left to the token rules.
fn userinfo_masked(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("://") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (before, after) = rest.split_at(i + 3);
        out.push_str(before);
        let end = after
            .find(|c: char| c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '(' | ')'))
            .unwrap_or(after.len());
        let (authority, tail) = after.split_at(end);
        match authority.rsplit_once('@') {
            Some((userinfo, host)) => {
                out.push_str(&masked_userinfo(userinfo));
                out.push('@');
                out.push_str(host);
            }
            None => out.push_str(authority),
        }
        rest = tail;
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
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
/// the password in a URL's user info, known key prefixes, the token after
/// `Bearer` or assigned to a name such as `api_key`, the whole value of an
/// `Authorization`, and long runs of mixed letters and digits that are not
/// a provider's id.
pub fn text(text: &str) -> String {
    let text = userinfo_masked(text);
    let text = text.as_ref();
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
    fn passwords_are_masked_and_user_names_kept() {
        let cases = [
            ("http://user:s3cret@proxy:3128", "http://user:***@proxy:3128"),
            ("https://user:s3cretpass@host/llm", "https://user:***@host/llm"),
            // A password may hold an `@`: the last one ends the user info.
            ("http://user:p@ss@proxy:3128/", "http://user:***@proxy:3128/"),
            ("socks5://bob:@127.0.0.1:1080", "socks5://bob:***@127.0.0.1:1080"),
            ("user:pw@proxy:3128", "user:***@proxy:3128"),
            // A user name alone is kept; a key given as the user is not.
            ("https://alice@gw.example/v1", "https://alice@gw.example/v1"),
            ("https://sk-proj-abcdefghijkl@gw.example/v1", "https://***@gw.example/v1"),
            ("https://ghp_0123456789abcdef:x-oauth-basic@github.com", "https://***:***@github.com"),
            ("https://0123456789abcdef0123456789abcdef@o1.ingest.example/2", "https://***@o1.ingest.example/2"),
            ("https://api.example/v1/chat?key=abc", "https://api.example/v1/chat?***"),
            ("https://otel:pa55@otel.example:4318/otlp?key=abc", "https://otel:***@otel.example:4318/otlp?***"),
            // Nothing to mask: kept as written.
            ("socks5://127.0.0.1:1080", "socks5://127.0.0.1:1080"),
            ("https://api.openai.com/v1", "https://api.openai.com/v1"),
            ("http://host/a@b", "http://host/a@b"),
            ("off", "off"),
            ("", ""),
        ];
        for (url, shown) in cases {
            assert_eq!(super::url(url), shown, "{url}");
            // Masking what is masked changes nothing.
            assert_eq!(super::url(shown), shown, "{shown}");
        }
        let parsed = reqwest::Url::parse("http://otel:pa55word@127.0.0.1:4318/v1/traces?key=k3y").unwrap();
        assert_eq!(super::masked(&parsed), "http://otel:***@127.0.0.1:4318/v1/traces?***");
    }

    #[test]
    fn a_masked_url_is_told_from_one_that_can_be_used() {
        for masked in
            ["http://user:***@proxy:3128", "https://***@gw.example", "https://h/v1?***", "user:***@proxy:3128"]
        {
            assert!(super::is_masked(masked), "{masked}");
        }
        for usable in [
            "http://user:s3cret@proxy:3128",
            "https://alice@gw.example/v1",
            "https://h/v1?key=abc",
            "https://api.openai.com/v1",
            "http://host/a***b",
            "off",
            "",
        ] {
            assert!(!super::is_masked(usable), "{usable}");
        }
    }

    #[test]
    fn passwords_of_urls_in_text_are_masked() {
        let said = "error sending request for url (http://user:s3cretpass@127.0.0.1:9/llm/v1/chat/completions)";
        let shown = super::text(said);
        assert_eq!(shown, "error sending request for url (http://user:***@127.0.0.1:9/llm/v1/chat/completions)");
        assert_eq!(
            super::text("proxy socks5://bob:hunter2@proxy:1080 refused"),
            "proxy socks5://bob:***@proxy:1080 refused"
        );
        assert_eq!(super::text("see https://docs.example/a@b"), "see https://docs.example/a@b");
    }
}
