//! The built-in scenarios, one TOML file each under `assets/scenarios/`,
//! compiled into the binary so the demo needs no files at run time.

use super::error::SimError;
use super::scenario::Scenario;

/// Lists the built-ins once: the names, and the text of each file.
macro_rules! library {
    ($($name:literal),* $(,)?) => {
        const NAMES: &[&str] = &[$($name),*];

        fn source(name: &str) -> Option<&'static str> {
            match name {
                $($name => Some(include_str!(concat!("../../assets/scenarios/", $name, ".toml"))),)*
                _ => None,
            }
        }
    };
}

library!(
    "healthy",
    "slow-ttfb",
    "silent-stall",
    "ping-flood-stall",
    "drip",
    "crawl",
    "proxy-buffered",
    "reset-after-first-token",
    "stall-after-content",
    "stall-after-block-start",
    "rate-limited-ms",
    "rate-limited-seconds",
    "rate-limited-date",
    "overloaded-in-stream",
    "server-error-then-ok",
    "dead-primary",
    "auth-expired",
    "context-overflow",
    "malformed-sse",
    "malformed-long-line",
    "malformed-missing-data",
    "closed-early",
    "idle-cut",
    "slow-first-token",
);

/// The names of every built-in scenario, in listing order.
pub fn builtin_names() -> &'static [&'static str] {
    NAMES
}

/// The built-in scenario `name`; an unknown name's error lists them all.
pub fn builtin(name: &str) -> Result<Scenario, SimError> {
    let text =
        source(name).ok_or_else(|| SimError::UnknownScenario { name: name.to_owned(), known: NAMES.join(", ") })?;
    Scenario::from_toml(text, &format!("built-in {name} (assets/scenarios/{name}.toml)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_tells_its_story() {
        for name in builtin_names() {
            let scenario = builtin(name).unwrap_or_else(|e| panic!("{e}"));
            assert!(scenario.description().len() > 40, "{name} needs a description");
            assert!(!scenario.run().tunables.is_empty(), "{name} needs [run] tunables");
        }
        assert!(builtin("dead-primary").unwrap().run().primary_unreachable);
    }

    #[test]
    fn every_file_is_listed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/scenarios");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".toml").map(str::to_owned))
            .collect();
        files.sort();
        let mut names: Vec<&str> = builtin_names().to_vec();
        names.sort_unstable();
        assert_eq!(files, names);
    }

    #[test]
    fn unknown_name_lists_the_builtins() {
        let message = builtin("stall").unwrap_err().to_string();
        assert!(message.contains("\"stall\"") && message.contains("silent-stall, ping-flood-stall"), "{message}");
    }
}
