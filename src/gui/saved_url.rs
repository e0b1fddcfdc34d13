//! URLs the app keeps between launches (Observe's upstream, the OTLP
//! endpoint, a proxy typed as a tunable edit). eframe keeps its settings
//! in a plain file, so such a URL is saved as [`redact::url`] shows it:
//! the user name and host kept, the password and query masked
//! (`http://user:***@proxy:3128`). A credential typed into the app lasts
//! the session; after a relaunch the field holds the masked URL, and what
//! would use it says to type the credentials again rather than send the
//! mask as a password.

use std::collections::BTreeMap;

use crate::core::redact;
use crate::tunables::spec::URL_VALUED;

/// Serializes a URL masked (`serialize_with`).
pub fn serialize<S: serde::Serializer>(url: &str, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&redact::url(url))
}

/// Serializes tunable edits with the URL-valued ones masked
/// (`serialize_with`).
pub fn serialize_edits<S: serde::Serializer>(
    edits: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(edits.iter().map(|(name, text)| match URL_VALUED.contains(&name.as_str()) {
        true => (name.clone(), redact::url(text)),
        false => (name.clone(), text.clone()),
    }))
}

/// Why `url` (`what` names it) cannot be used as it is: it was read back
/// masked from the saved settings, or copied from a masked line.
pub fn masked(what: &str, url: &str) -> Option<String> {
    redact::is_masked(url).then(|| {
        format!("{what} {url} has its credentials masked (***): they are not kept between launches; type them again")
    })
}
