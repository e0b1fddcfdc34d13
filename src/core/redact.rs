//! How URLs are shown without the credentials they may carry: user names
//! and passwords (`http://user:pass@proxy`) and query strings
//! (`?key=…`) never reach an event, a report or a log.

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

#[cfg(test)]
mod tests {
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
