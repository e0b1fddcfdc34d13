//! The configuration file: providers, a `[tunables]` table and classifier
//! rules, and how it combines with the environment and `--set` overrides
//! into the effective settings.
//!
//! ```toml
//! [[provider]]
//! name = "openai"
//! kind = "openai-chat"            # or openai-responses, anthropic-messages
//! base_url = "https://api.openai.com/v1"
//! model = "gpt-4o-mini"
//! api_key_env = "OPENAI_API_KEY"  # or api_key_envs = ["KEY_A", "KEY_B"]
//!
//! [tunables]
//! SSE_IDLE_TIMEOUT_S = 300
//!
//! [[classifier.rule]]
//! name = "vllm queue"
//! body_contains = "queue full"
//! category = "rate_limit"
//!
//! [probe]
//! context_tokens = 20000          # the realistic payload of `stallscope probe`
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::core::classify::{Classifier, Rule, RuleError};
use crate::core::policy::CorePolicy;
use crate::tunables::{Source, TunableError, Tunables};

/// A parsed configuration file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Provider/model rows, in order (the default failover chain follows
    /// this order).
    #[serde(default, rename = "provider")]
    pub providers: Vec<crate::providers::setup::ProviderConfig>,
    /// Tunable values, by full or short name, with where they stand.
    #[serde(default)]
    pub tunables: BTreeMap<String, toml::Spanned<toml::Value>>,
    /// The text the file was read from (to turn spans into lines).
    #[serde(skip)]
    text: String,
    /// Classifier rules.
    #[serde(default)]
    pub classifier: ClassifierConfig,
    /// Route probes.
    #[serde(default)]
    pub probe: ProbeConfig,
}

/// The `[probe]` section: how `stallscope probe` sizes its realistic
/// payload (see [`crate::probe`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    /// Tokens of the realistic payload, about four characters each.
    pub context_tokens: Option<u64>,
}

/// The `[classifier]` section.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifierConfig {
    /// User rules, checked in order before the built-ins.
    #[serde(default, rename = "rule")]
    pub rules: Vec<Rule>,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read config {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys.
    #[error("config {}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A tunable value is not accepted.
    #[error(transparent)]
    Tunable(#[from] TunableError),
    /// A classifier rule is not usable.
    #[error("config {}: {source}", path.display())]
    Rule {
        /// The file.
        path: PathBuf,
        /// Why.
        source: RuleError,
    },
}

impl Config {
    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let mut config: Config = toml::from_str(&text)
            .map_err(|e| ConfigError::Parse { path: path.to_owned(), message: one_line(&e, &text) })?;
        config.text = text;
        Ok(config)
    }
}

/// A TOML error as one line: `line L, column C: message`.
pub(crate) fn one_line(error: &toml::de::Error, text: &str) -> String {
    let message = error.message().trim().replace('\n', " ");
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

/// Where the configuration lives when `--config` is not given.
pub fn default_path() -> Option<PathBuf> {
    directories::ProjectDirs::from("", "", "stallscope").map(|dirs| dirs.config_dir().join("config.toml"))
}

/// The process environment, for [`Settings::load`] and key lookups.
/// `vars()` would panic on a variable that is not UTF-8; such a variable
/// cannot be one of ours, so it is skipped.
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect()
}

/// The effective settings: tunables with their sources, the policy read
/// from them, the classifier and the providers.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The config file read, if any.
    pub path: Option<PathBuf>,
    /// Provider rows from the file.
    pub providers: Vec<crate::providers::setup::ProviderConfig>,
    /// Effective tunables.
    pub tunables: Tunables,
    /// The core policy.
    pub policy: CorePolicy,
    /// The classifier with the config's rules.
    pub classifier: Classifier,
    /// The config's `[probe]` section.
    pub probe: ProbeConfig,
}

/// Which configuration file to read.
#[derive(Debug, Clone, Copy, Default)]
pub enum ConfigFile<'a> {
    /// The default file ([`default_path`]), when it exists.
    #[default]
    Default,
    /// This file, which must exist.
    Path(&'a Path),
    /// None: defaults, environment and overrides only.
    None,
}

/// The layers above the defaults, lowest first (the environment comes
/// between the scenario and the overrides).
#[derive(Debug, Clone, Copy, Default)]
pub struct Layers<'a> {
    /// The config file.
    pub config: ConfigFile<'a>,
    /// A built-in scenario's name and recommended tunables.
    pub scenario: Option<(&'a str, &'a BTreeMap<String, String>)>,
    /// `--set NAME=VALUE` overrides.
    pub overrides: &'a [String],
    /// `NAME=VALUE` edits made in the app, the top layer.
    pub edits: &'a [String],
}

impl Settings {
    /// Layers defaults < scenario < config file < environment < overrides < edits.
    pub fn load<I, K, V>(layers: Layers<'_>, env: I) -> Result<Settings, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let path = match layers.config {
            ConfigFile::Default => default_path().filter(|p| p.exists()),
            ConfigFile::Path(path) => Some(path.to_path_buf()),
            ConfigFile::None => None,
        };
        let (file, origin) = match &path {
            Some(path) => (Config::load(path)?, path.clone()),
            None => (Config::default(), PathBuf::new()),
        };
        let mut tunables = Tunables::defaults();
        if let Some((name, recommended)) = layers.scenario {
            for (key, value) in recommended {
                tunables.set(key, value, Source::Scenario(name.to_owned()))?;
            }
        }
        for (key, value) in &file.tunables {
            let line = file.text[..value.span().start.min(file.text.len())].matches('\n').count() + 1;
            tunables
                .apply_value(key, value.get_ref(), Source::ConfigFile(origin.clone()))
                .map_err(|e| e.at_line(line))?;
        }
        tunables.apply_env(env)?;
        for assignment in layers.overrides {
            tunables.apply_override(assignment)?;
        }
        for assignment in layers.edits {
            tunables.apply_assignment(assignment, Source::Edit)?;
        }
        let policy = CorePolicy::from_tunables(&tunables)?;
        let classifier =
            Classifier::new(file.classifier.rules).map_err(|source| ConfigError::Rule { path: origin, source })?;
        Ok(Settings { path, providers: file.providers, tunables, policy, classifier, probe: file.probe })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempdir::Dir, PathBuf) {
        let dir = tempdir::Dir::new();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    /// A directory removed on drop (no extra crate for one test helper).
    mod tempdir {
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let path = std::env::temp_dir().join(format!("stallscope-config-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn layers_file_env_and_overrides() {
        let (_dir, path) = write(
            "[tunables]\nSSE_IDLE_TIMEOUT_S = 300\nTCP_KEEPCNT = 4\n\n[[classifier.rule]]\nstatus = 500\ncategory = \"permanent\"\n",
        );
        let env = [("STALLSCOPE_TCP_KEEPCNT", "5")];
        let overrides = ["PROVIDER_STREAM_RETRIES=1".to_owned()];
        let layers = Layers { config: ConfigFile::Path(&path), overrides: &overrides, ..Layers::default() };
        let settings = Settings::load(layers, env).unwrap();
        let t = &settings.tunables;
        assert_eq!(t.get("STALLSCOPE_SSE_IDLE_TIMEOUT_S").source.to_string(), format!("config {}", path.display()));
        assert_eq!(t.get("STALLSCOPE_TCP_KEEPCNT").value.as_i64(), 5);
        assert_eq!(settings.policy.retry.max_retries, 1);
    }

    #[test]
    fn app_edits_sit_above_overrides_and_say_so() {
        let overrides = ["TCP_KEEPCNT=4".to_owned(), "TCP_KEEPIDLE_S=20".to_owned()];
        let edits = ["TCP_KEEPCNT=6".to_owned()];
        let layers = Layers { config: ConfigFile::None, overrides: &overrides, edits: &edits, ..Layers::default() };
        let t = Settings::load(layers, Vec::<(String, String)>::new()).unwrap().tunables;
        assert_eq!(
            (t.get("STALLSCOPE_TCP_KEEPCNT").value.as_i64(), &t.get("STALLSCOPE_TCP_KEEPCNT").source),
            (6, &Source::Edit)
        );
        assert_eq!(t.get("STALLSCOPE_TCP_KEEPIDLE_S").source, Source::Override);
        assert_eq!(Source::Edit.to_string(), "the app's Tunables view");
        assert_eq!(Source::parse("app edit"), Some(Source::Edit), "as runs recorded before said it");
    }

    fn load(path: &Path) -> Result<Settings, ConfigError> {
        Settings::load(Layers { config: ConfigFile::Path(path), ..Layers::default() }, Vec::<(String, String)>::new())
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let (_dir, path) = write("[tunables]\nSSE_IDLE_TIMEOUT_S = \n");
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()) && err.contains("line 2, column"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        let (_dir, path) = write("[tunables]\nTCP_KEEPCNT = 3\nSSE_IDLE_TIMEOUT_S = \"soon\"\n");
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains(&format!("(from config {}, line 3)", path.display())), "{err}");
        let (_dir, path) = write("[tunabels]\n");
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("tunabels"), "{err}");
        let (_dir, path) = write("[[classifier.rule]]\ncategory = \"timeout\"\n");
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("no condition"), "{err}");
        let missing = Path::new("/nonexistent/stallscope.toml");
        let err = load(missing).unwrap_err().to_string();
        assert!(err.starts_with("cannot read config /nonexistent/stallscope.toml"), "{err}");
    }
}
