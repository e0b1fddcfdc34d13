//! How URLs are shown without the credentials they may carry: user names
//! and passwords (`http://user:pass@proxy`) and query strings
//! (`?key=…`) never reach an event, a report or a log.

/// `url` with its user info and query masked; text that is not a URL is
/// returned as it is.
pub fn url(text: &str) -> String {
    match reqwest::Url::parse(text) {
        Ok(parsed) if parsed.has_host() => masked(&parsed),
        // `user:pw@proxy:3128` parses as a URL of scheme `user` with no
        // host, and text that is no URL may still hold credentials.
        _ => match text.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => text.to_owned(),
        },
    }
}

/// A parsed URL with its user info and query masked.
pub fn masked(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    if !shown.username().is_empty() || shown.password().is_some() {
        // Setting these only fails for URLs that cannot have credentials,
        // and those have none to hide.
        let _ = shown.set_username("***");
        let _ = shown.set_password(None);
    }
    if shown.query().is_some() {
        shown.set_query(Some("***"));
    }
    shown.to_string()
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
}
