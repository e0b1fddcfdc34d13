//! The tunables registry: every knob of the core, with its effective value
//! and where that value came from.
//!
//! Values are layered: defaults < config file (`[tunables]`) < environment
//! (`STALLSCOPE_…`) < explicit overrides (`--set NAME=VALUE`). Each layer is
//! validated as it is applied, so a bad value is reported with the tunable's
//! name, the value, the layer it came from and what is allowed.

pub mod spec;
pub mod value;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

pub use spec::{DefaultValue, Group, Kind, PREFIX, TUNABLES, TunableSpec};
pub use value::Value;

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// A default computed from another tunable.
    Derived,
    /// The recommended settings of a built-in scenario.
    Scenario(String),
    /// The `[tunables]` table of a config file.
    ConfigFile(PathBuf),
    /// An environment variable.
    Environment,
    /// An explicit `--set`.
    Override,
    /// An edit in the app's tunables editor.
    Edit,
    /// Absent from a stored run's snapshot, which predates the tunable: the
    /// value the run had then ([`spec::BEFORE_THEY_EXISTED`]).
    BeforeItExisted,
}

impl Source {
    /// True when somebody chose this value (as opposed to a default).
    pub fn is_explicit(&self) -> bool {
        !matches!(self, Source::Default | Source::Derived | Source::BeforeItExisted)
    }
}

impl Source {
    /// The source a stored snapshot names: the inverse of its `Display`.
    pub fn parse(text: &str) -> Option<Source> {
        Some(match text {
            "default" => Source::Default,
            "derived" => Source::Derived,
            "env" => Source::Environment,
            "--set" => Source::Override,
            // Runs recorded before the plain words said "app edit".
            "the app's Tunables view" | "app edit" => Source::Edit,
            "before it existed" => Source::BeforeItExisted,
            _ => match text.split_once(' ') {
                Some(("scenario", name)) => Source::Scenario(name.to_owned()),
                Some(("config", path)) => Source::ConfigFile(PathBuf::from(path)),
                _ => return None,
            },
        })
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Derived => f.write_str("derived"),
            Source::Scenario(name) => write!(f, "scenario {name}"),
            Source::ConfigFile(path) => write!(f, "config {}", path.display()),
            Source::Environment => f.write_str("env"),
            Source::Override => f.write_str("--set"),
            Source::Edit => f.write_str("the app's Tunables view"),
            Source::BeforeItExisted => f.write_str("before it existed"),
        }
    }
}

/// A tunable name or value that cannot be accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TunableError {
    /// No tunable has this name.
    #[error("unknown tunable `{name}` (from {origin}){}", did_you_mean(suggestion))]
    Unknown {
        /// The name as given.
        name: String,
        /// The closest known name, if any is close.
        suggestion: Option<&'static str>,
        /// Where the name was given.
        origin: String,
    },
    /// The value does not parse or is outside the allowed values.
    #[error("{name}={value:?} (from {origin}) is not accepted: {reason}; allowed: {allowed}")]
    Invalid {
        /// The tunable's full name.
        name: &'static str,
        /// The value as given.
        value: String,
        /// What was wrong with it.
        reason: String,
        /// What is allowed.
        allowed: String,
        /// Where the value was given.
        origin: String,
    },
    /// A `--set` argument without `=`.
    #[error("`{0}` is not NAME=VALUE")]
    NotAnAssignment(String),
}

impl TunableError {
    /// The same error, saying which line of its file the value is on.
    pub fn at_line(self, line: usize) -> Self {
        match self {
            TunableError::Unknown { name, suggestion, origin } => {
                TunableError::Unknown { name, suggestion, origin: format!("{origin}, line {line}") }
            }
            TunableError::Invalid { name, value, reason, allowed, origin } => {
                TunableError::Invalid { name, value, reason, allowed, origin: format!("{origin}, line {line}") }
            }
            other => other,
        }
    }
}

fn did_you_mean(suggestion: &Option<&'static str>) -> String {
    suggestion.map(|s| format!("; did you mean {s}?")).unwrap_or_default()
}

/// One tunable's effective value and its provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// The value in force.
    pub value: Value,
    /// Where it came from.
    pub source: Source,
}

/// The effective value of every tunable.
#[derive(Debug, Clone, PartialEq)]
pub struct Tunables {
    values: BTreeMap<&'static str, Effective>,
}

impl Default for Tunables {
    fn default() -> Self {
        Self::defaults()
    }
}

impl Tunables {
    /// Every tunable at its default.
    pub fn defaults() -> Self {
        let mut values = BTreeMap::new();
        for spec in TUNABLES {
            if let DefaultValue::Fixed(text) = spec.default {
                // The spec tests parse every default, so this cannot fail
                // for a shipped table; fall back to text to stay total.
                let value = Value::parse(&spec.kind, text).unwrap_or(Value::Text(text.to_owned()));
                values.insert(spec.name, Effective { value, source: Source::Default });
            }
        }
        let mut tunables = Tunables { values };
        tunables.derive_defaults();
        tunables
    }

    /// Rebuilds the tunables a run had from its stored snapshot
    /// ([`Tunables::sourced_snapshot`]: name → `{"value", "source"}`),
    /// values and sources alike, so a value set explicitly to its default
    /// stays distinguishable from the default. Tunables the snapshot lacks
    /// (added after it was stored) take their defaults, unless their default
    /// differs from what the run did before they existed: those take that
    /// value ([`spec::BEFORE_THEY_EXISTED`], source
    /// [`Source::BeforeItExisted`]), so an old run replays as it ran.
    /// Derived values are kept as stored, not recomputed.
    ///
    /// URL credentials were masked before the snapshot was stored (`***`):
    /// such a value is rebuilt masked, naming the proxy the run used with
    /// its source, but it cannot authenticate to it.
    pub fn from_snapshot(snapshot: &serde_json::Map<String, serde_json::Value>) -> Result<Tunables, TunableError> {
        const ORIGIN: &str = "a stored snapshot";
        let mut tunables = Tunables::defaults();
        for &(name, text) in spec::BEFORE_THEY_EXISTED {
            if let Some(spec) = spec::find(name) {
                let value = Value::parse(&spec.kind, text).unwrap_or(Value::Text(text.to_owned()));
                tunables.values.insert(spec.name, Effective { value, source: Source::BeforeItExisted });
            }
        }
        for (name, entry) in snapshot {
            let spec = spec::find(name).ok_or_else(|| TunableError::Unknown {
                name: name.clone(),
                suggestion: suggest(name),
                origin: ORIGIN.to_owned(),
            })?;
            let invalid = |value: String, reason: &str, allowed: String| TunableError::Invalid {
                name: spec.name,
                value,
                reason: reason.to_owned(),
                allowed,
                origin: ORIGIN.to_owned(),
            };
            let source = match entry.get("source") {
                Some(serde_json::Value::String(text)) => Source::parse(text).ok_or_else(|| {
                    let allowed = "default, derived, scenario NAME, config PATH, env, --set or the app's Tunables view";
                    invalid(text.clone(), "not a known source", allowed.to_owned())
                })?,
                _ => return Err(invalid(entry.to_string(), "no source", "{\"value\": …, \"source\": …}".to_owned())),
            };
            let text = match entry.get("value") {
                Some(serde_json::Value::String(text)) => text.clone(),
                Some(serde_json::Value::Bool(b)) => b.to_string(),
                Some(serde_json::Value::Number(n)) => n.to_string(),
                _ => return Err(invalid(entry.to_string(), "no value", spec.allowed())),
            };
            let value =
                Value::parse(&spec.kind, &text).map_err(|reason| invalid(text.clone(), &reason, spec.allowed()))?;
            tunables.values.insert(spec.name, Effective { value, source });
        }
        Ok(tunables)
    }

    /// Applies a table of values (a config file's `[tunables]`, a
    /// scenario's recommendations). Keys may be given with or without the
    /// `STALLSCOPE_` prefix.
    pub fn apply_table(&mut self, table: &toml::Table, source: Source) -> Result<(), TunableError> {
        for (key, item) in table {
            self.apply_value(key, item, source.clone())?;
        }
        Ok(())
    }

    /// Sets one tunable from a TOML value (a list becomes comma-separated).
    pub fn apply_value(&mut self, key: &str, item: &toml::Value, source: Source) -> Result<(), TunableError> {
        let text = match item {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(x) => x.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(","),
            other => other.to_string(),
        };
        self.set(key, &text, source)
    }

    /// Applies every `STALLSCOPE_…` variable of an environment. Variables
    /// that name no tunable are errors (a typo must not pass silently),
    /// except the few that configure the program rather than the core.
    pub fn apply_env<I, K, V>(&mut self, vars: I) -> Result<(), TunableError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        const NOT_TUNABLES: &[&str] = &["STALLSCOPE_CONFIG", "STALLSCOPE_DB", "STALLSCOPE_LOG"];
        for (key, value) in vars {
            let key = key.as_ref();
            if key.starts_with(PREFIX) && !NOT_TUNABLES.contains(&key) {
                self.set(key, value.as_ref(), Source::Environment)?;
            }
        }
        Ok(())
    }

    /// Applies one `NAME=VALUE` override.
    pub fn apply_override(&mut self, assignment: &str) -> Result<(), TunableError> {
        self.apply_assignment(assignment, Source::Override)
    }

    /// Applies one `NAME=VALUE` assignment from `source`.
    pub fn apply_assignment(&mut self, assignment: &str, source: Source) -> Result<(), TunableError> {
        let (name, value) =
            assignment.split_once('=').ok_or_else(|| TunableError::NotAnAssignment(assignment.to_owned()))?;
        self.set(name, value, source)
    }

    /// Sets one tunable from text, validating it.
    pub fn set(&mut self, name: &str, text: &str, source: Source) -> Result<(), TunableError> {
        let spec = spec::find(name).ok_or_else(|| TunableError::Unknown {
            name: name.to_owned(),
            suggestion: suggest(name),
            origin: source.to_string(),
        })?;
        let value = Value::parse(&spec.kind, text).map_err(|reason| TunableError::Invalid {
            name: spec.name,
            value: text.to_owned(),
            reason,
            allowed: spec.allowed(),
            origin: source.to_string(),
        })?;
        self.values.insert(spec.name, Effective { value, source });
        self.derive_defaults();
        Ok(())
    }

    /// Resets one tunable to its default.
    pub fn reset(&mut self, name: &str) {
        if let Some(spec) = spec::find(name) {
            if let DefaultValue::Fixed(text) = spec.default {
                if let Ok(value) = Value::parse(&spec.kind, text) {
                    self.values.insert(spec.name, Effective { value, source: Source::Default });
                }
            } else {
                self.values.remove(spec.name);
            }
            self.derive_defaults();
        }
    }

    /// Recomputes derived defaults that nobody set explicitly.
    fn derive_defaults(&mut self) {
        for spec in TUNABLES {
            let DefaultValue::Offset { from, plus } = spec.default else { continue };
            if self.values.get(spec.name).is_some_and(|e| e.source.is_explicit()) {
                continue;
            }
            let base = self.values.get(from).map_or(0.0, |e| e.value.as_f64());
            let value = if base == 0.0 { Value::Float(0.0) } else { Value::Float(base + plus) };
            self.values.insert(spec.name, Effective { value, source: Source::Derived });
        }
    }

    /// The effective value and source of one tunable.
    ///
    /// # Panics
    /// When `name` is not in the table: names in code are checked by tests.
    pub fn get(&self, name: &str) -> &Effective {
        match self.values.get(name) {
            Some(effective) => effective,
            None => panic!("tunable {name} is not in the table"),
        }
    }

    /// A number of seconds as a duration (0 stays zero).
    pub fn seconds(&self, name: &str) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.get(name).value.as_f64().max(0.0))
    }

    /// A number of seconds where 0 means "off".
    pub fn optional_seconds(&self, name: &str) -> Option<std::time::Duration> {
        let d = self.seconds(name);
        (!d.is_zero()).then_some(d)
    }

    /// Every tunable with its spec and effective value, in listing order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static TunableSpec, &Effective)> {
        TUNABLES.iter().filter_map(|spec| self.values.get(spec.name).map(|e| (spec, e)))
    }

    /// The default value of a tunable given the other effective values.
    pub fn default_of(&self, spec: &TunableSpec) -> Value {
        match spec.default {
            DefaultValue::Fixed(text) => Value::parse(&spec.kind, text).unwrap_or(Value::Text(text.to_owned())),
            DefaultValue::Offset { from, plus } => {
                let base = self.get(from).value.as_f64();
                Value::Float(if base == 0.0 { 0.0 } else { base + plus })
            }
        }
    }

    /// The tunables as a `.env` file under another prefix (for example
    /// `OPENPROGRAM_`), each preceded by its help and, when it was changed,
    /// where the change came from. A value a scenario set (a demo value)
    /// is written as its default, the scenario's value in the comment,
    /// unless `scenario_values`.
    pub fn to_env(&self, prefix: &str, scenario_values: bool) -> String {
        let mut out = String::new();
        let mut group = None;
        for (spec, effective) in self.iter() {
            if group != Some(spec.group) {
                group = Some(spec.group);
                out.push_str(&format!("\n# {}\n", spec.group.title()));
            }
            let mut value = shown(spec, &effective.value);
            let origin = match &effective.source {
                // A scenario's values are scaled down to show a failure in
                // seconds: shipped by mistake, they would cut real streams.
                Source::Scenario(name) if !scenario_values => {
                    let demo = std::mem::replace(&mut value, self.default_of(spec));
                    format!(" [scenario {name} sets {demo}, a demo value: its default here]")
                }
                source if source.is_explicit() => format!(" [{source}]"),
                _ => String::new(),
            };
            out.push_str(&format!("# {}{origin}\n", spec.help));
            out.push_str(&format!("{prefix}{}={}\n", spec.short_name(), env_quote(&value)));
        }
        out.trim_start().to_owned()
    }

    /// The listing `stallscope tunables --json` prints.
    pub fn to_json(&self) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = self
            .iter()
            .map(|(spec, effective)| {
                serde_json::json!({
                    "name": spec.name,
                    "value": shown(spec, &effective.value).to_json(),
                    "default": self.default_of(spec).to_json(),
                    "type": spec.kind.type_name(),
                    "unit": spec.unit,
                    "source": effective.source.to_string(),
                    "group": spec.group,
                    "allowed": spec.allowed(),
                    "help": spec.help,
                })
            })
            .collect();
        serde_json::Value::Array(rows)
    }

    /// Every tunable with its effective value and where it came from, as
    /// a run is stored: `{"STALLSCOPE_…": {"value": …, "source": "default"
    /// | "env" | …}}`; [`Tunables::from_snapshot`] reads it back.
    pub fn sourced_snapshot(&self) -> serde_json::Map<String, serde_json::Value> {
        self.iter()
            .map(|(spec, e)| {
                let entry =
                    serde_json::json!({ "value": shown(spec, &e.value).to_json(), "source": e.source.to_string() });
                (spec.name.to_owned(), entry)
            })
            .collect()
    }

    /// Name → value of every tunable, as reports embed it.
    pub fn snapshot(&self) -> serde_json::Map<String, serde_json::Value> {
        self.iter().map(|(spec, e)| (spec.name.to_owned(), shown(spec, &e.value).to_json())).collect()
    }
}

/// A value as it may be shown anywhere (listings, reports, `.env` files):
/// URL-valued tunables have their credentials masked, since a proxy
/// password is as secret as an API key.
pub fn shown(spec: &TunableSpec, value: &Value) -> Value {
    match value {
        Value::Text(text) if spec::URL_VALUED.contains(&spec.name) => Value::Text(crate::core::redact::url(text)),
        other => other.clone(),
    }
}

/// Quotes a value for a `.env` file when it holds characters a shell or
/// dotenv parser would split on.
fn env_quote(value: &Value) -> String {
    let text = value.to_string();
    if text.is_empty() || text.chars().all(|c| c.is_ascii_alphanumeric() || "._-,:/+@".contains(c)) {
        text
    } else {
        format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// The known name closest to `name`, when it is close enough to be a typo.
fn suggest(name: &str) -> Option<&'static str> {
    let wanted = name.trim().to_ascii_uppercase();
    let wanted = wanted.strip_prefix(PREFIX).unwrap_or(&wanted).to_owned();
    TUNABLES
        .iter()
        .map(|spec| (strsim::damerau_levenshtein(&wanted, spec.short_name()), spec.name))
        .filter(|&(distance, _)| distance <= (wanted.len() / 3).max(2))
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_parses() {
        for spec in TUNABLES {
            if let DefaultValue::Fixed(text) = spec.default {
                Value::parse(&spec.kind, text).unwrap_or_else(|e| panic!("{} default {text:?}: {e}", spec.name));
            }
        }
        assert_eq!(Tunables::defaults().iter().count(), TUNABLES.len());
    }

    #[test]
    fn layers_apply_in_order_and_keep_their_source() {
        let mut t = Tunables::defaults();
        let table: toml::Table = toml::from_str("SSE_IDLE_TIMEOUT_S = 600\nSTALLSCOPE_TCP_KEEPCNT = 5").unwrap();
        t.apply_table(&table, Source::ConfigFile("/etc/s.toml".into())).unwrap();
        t.apply_env([("STALLSCOPE_TCP_KEEPCNT", "7"), ("HOME", "/root")]).unwrap();
        t.apply_override("tcp_keepcnt=9").unwrap();
        assert_eq!(t.get("STALLSCOPE_SSE_IDLE_TIMEOUT_S").value, Value::Float(600.0));
        assert_eq!(t.get("STALLSCOPE_SSE_IDLE_TIMEOUT_S").source, Source::ConfigFile("/etc/s.toml".into()));
        assert_eq!(t.get("STALLSCOPE_TCP_KEEPCNT").value, Value::Int(9));
        assert_eq!(t.get("STALLSCOPE_TCP_KEEPCNT").source, Source::Override);
        // The read backstop follows idle while nobody sets it.
        let read = t.get("STALLSCOPE_HTTP_READ_TIMEOUT_S");
        assert_eq!((read.value.clone(), read.source.clone()), (Value::Float(660.0), Source::Derived));
        t.apply_override("STALLSCOPE_HTTP_READ_TIMEOUT_S=5").unwrap();
        t.apply_override("STALLSCOPE_SSE_IDLE_TIMEOUT_S=10").unwrap();
        assert_eq!(t.get("STALLSCOPE_HTTP_READ_TIMEOUT_S").value, Value::Float(5.0));
    }

    #[test]
    fn unknown_names_get_a_suggestion() {
        let mut t = Tunables::defaults();
        let err = t.apply_override("STALLSCOPE_SSE_IDEL_TIMEOUT_S=3").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown tunable `STALLSCOPE_SSE_IDEL_TIMEOUT_S` (from --set); did you mean STALLSCOPE_SSE_IDLE_TIMEOUT_S?"
        );
        let err = t.apply_env([("STALLSCOPE_ZZZ", "1")]).unwrap_err();
        assert!(matches!(err, TunableError::Unknown { suggestion: None, .. }), "{err}");
    }

    #[test]
    fn bad_values_name_tunable_value_and_allowed() {
        let mut t = Tunables::defaults();
        let err = t.apply_override("STALLSCOPE_TCP_KEEPCNT=0").unwrap_err().to_string();
        assert_eq!(
            err,
            "STALLSCOPE_TCP_KEEPCNT=\"0\" (from --set) is not accepted: out of range; allowed: a whole number from 1 to 100"
        );
        let err = t.apply_override("STALLSCOPE_BACKOFF_JITTER=gaussian").unwrap_err().to_string();
        assert!(err.contains("one of none, full, equal, decorrelated, symmetric, positive-only"), "{err}");
        let err = t.apply_override("STALLSCOPE_FALLBACK_MODELS=gpt-4o").unwrap_err().to_string();
        assert!(err.contains("provider/model"), "{err}");
        let err = t.apply_override("FLEET_RETRY_BUDGET_CATEGORIES=rate_limit,idle").unwrap_err().to_string();
        assert_eq!(
            err,
            "STALLSCOPE_FLEET_RETRY_BUDGET_CATEGORIES=\"rate_limit,idle\" (from --set) is not accepted: `idle` is not \
             one of the items; allowed: a comma-separated list of connection, timeout, timeout:connect, timeout:ttfb, \
             timeout:idle, timeout:data_stall, timeout:min_rate, timeout:total, rate_limit, overloaded, server_error, \
             auth, invalid_request, permanent"
        );
        t.apply_override("FLEET_RETRY_BUDGET_CATEGORIES=Rate_Limit, timeout:idle").unwrap();
        let categories = t.get("STALLSCOPE_FLEET_RETRY_BUDGET_CATEGORIES");
        assert_eq!(categories.value, Value::Text("timeout:idle,rate_limit".into()), "listing order, lower case");
        assert!(matches!(t.apply_override("NOEQUALS"), Err(TunableError::NotAnAssignment(_))));
    }

    #[test]
    fn env_export_uses_the_requested_prefix() {
        let mut t = Tunables::defaults();
        t.apply_override("SSE_IDLE_TIMEOUT_S=120").unwrap();
        let env = t.to_env("OPENPROGRAM_", false);
        assert!(env.contains("\nOPENPROGRAM_SSE_IDLE_TIMEOUT_S=120\n"), "{env}");
        assert!(env.contains("[--set]"), "{env}");
        assert!(env.contains("OPENPROGRAM_FALLBACK_MODELS=\n"), "{env}");
        assert_eq!(env.lines().filter(|l| l.starts_with("OPENPROGRAM_")).count(), TUNABLES.len());
    }

    /// Gui review D16: a scenario's demo values (scaled down to show a
    /// failure in seconds) are exported as their defaults, and said so,
    /// unless asked for.
    #[test]
    fn a_scenarios_demo_values_are_exported_only_when_asked() {
        let mut t = Tunables::defaults();
        let scenario = toml::from_str("STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S = 3").unwrap();
        t.apply_table(&scenario, Source::Scenario("silent-stall".into())).unwrap();
        let env = t.to_env("X_", false);
        assert!(
            env.contains(
                "[scenario silent-stall sets 3, a demo value: its default here]\nX_SSE_DATA_STALL_TIMEOUT_S=900\n"
            ),
            "{env}"
        );
        let asked = t.to_env("X_", true);
        assert!(asked.contains("[scenario silent-stall]\nX_SSE_DATA_STALL_TIMEOUT_S=3\n"), "{asked}");
    }

    #[test]
    fn proxy_passwords_are_never_shown() {
        let mut t = Tunables::defaults();
        t.apply_override("PROXY=http://user:s3cret@proxy:3128").unwrap();
        let shown =
            [t.to_env("X_", false), t.to_json().to_string(), serde_json::Value::Object(t.snapshot()).to_string()];
        for text in shown {
            assert!(!text.contains("s3cret") && text.contains("***@proxy:3128"), "{text}");
        }
    }

    #[test]
    fn a_snapshot_rebuilds_values_and_sources() {
        let mut t = Tunables::defaults();
        // Explicitly set to its default: must stay explicit.
        t.apply_override("SSE_IDLE_TIMEOUT_S=1800").unwrap();
        t.apply_env([("STALLSCOPE_TCP_KEEPCNT", "7")]).unwrap();
        let table: toml::Table = toml::from_str("HTTP_CONNECT_TIMEOUT_S = 2.5").unwrap();
        t.apply_table(&table, Source::ConfigFile("/etc/stall scope.toml".into())).unwrap();
        t.apply_table(&toml::from_str("BACKOFF_JITTER = \"full\"").unwrap(), Source::Scenario("flaky".into())).unwrap();
        t.set("FALLBACK_MODELS", "off", Source::Edit).unwrap();
        t.set("RECORD_BODIES", "raw", Source::Override).unwrap();
        let snapshot = t.sourced_snapshot();
        let rebuilt = Tunables::from_snapshot(&snapshot).unwrap();
        assert_eq!(rebuilt, t);
        let idle = rebuilt.get("STALLSCOPE_SSE_IDLE_TIMEOUT_S");
        assert_eq!((&idle.value, &idle.source), (&Value::Float(1800.0), &Source::Override));
        assert_ne!(rebuilt, Tunables::defaults(), "same value, explicitly set, is not the default");
        let read = rebuilt.get("STALLSCOPE_HTTP_READ_TIMEOUT_S");
        assert_eq!(read.source, Source::Derived);
        // A tunable the snapshot lacks (added since) takes its default.
        let mut older = snapshot.clone();
        older.remove("STALLSCOPE_RECORD_BODIES");
        let rebuilt = Tunables::from_snapshot(&older).unwrap();
        assert_eq!(rebuilt.get("STALLSCOPE_RECORD_BODIES"), Tunables::defaults().get("STALLSCOPE_RECORD_BODIES"));
    }

    /// A run recorded before the fleet budget's categories could be chosen
    /// ran with the budget over every retry: its snapshot lacks the
    /// tunable, and it must replay as it ran, not under today's default.
    #[test]
    fn a_snapshot_from_before_a_tunable_existed_keeps_what_the_run_did() {
        const NAME: &str = "STALLSCOPE_FLEET_RETRY_BUDGET_CATEGORIES";
        let mut older = Tunables::defaults().sourced_snapshot();
        older.remove(NAME);
        let rebuilt = Tunables::from_snapshot(&older).unwrap();
        let categories = rebuilt.get(NAME);
        assert_eq!(categories.source, Source::BeforeItExisted);
        assert_eq!(
            categories.value.as_str(),
            "connection,timeout,rate_limit,overloaded,server_error,auth,invalid_request,permanent"
        );
        assert!(!categories.source.is_explicit());
        // Stored again, it reads back the same.
        assert_eq!(Tunables::from_snapshot(&rebuilt.sourced_snapshot()).unwrap(), rebuilt);
        // A snapshot that has it keeps its value, the default included.
        let current = Tunables::from_snapshot(&Tunables::defaults().sourced_snapshot()).unwrap();
        assert_eq!(current.get(NAME), Tunables::defaults().get(NAME));
    }

    #[test]
    fn a_masked_proxy_is_rebuilt_masked_with_its_source() {
        let mut t = Tunables::defaults();
        t.apply_override("PROXY=http://user:s3cret@proxy:3128").unwrap();
        let rebuilt = Tunables::from_snapshot(&t.sourced_snapshot()).unwrap();
        let proxy = rebuilt.get("STALLSCOPE_PROXY");
        assert_eq!(
            (&proxy.value, &proxy.source),
            (&Value::Text("http://user:***@proxy:3128".into()), &Source::Override)
        );
    }

    #[test]
    fn a_bad_snapshot_is_refused_naming_the_tunable() {
        let snapshot = |json: serde_json::Value| json.as_object().unwrap().clone();
        let err = Tunables::from_snapshot(&snapshot(serde_json::json!({
            "STALLSCOPE_SSE_IDEL_TIMEOUT_S": {"value": 3, "source": "env"}
        })))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown tunable `STALLSCOPE_SSE_IDEL_TIMEOUT_S` (from a stored snapshot); did you mean STALLSCOPE_SSE_IDLE_TIMEOUT_S?"
        );
        let err = Tunables::from_snapshot(&snapshot(serde_json::json!({
            "STALLSCOPE_TCP_KEEPCNT": {"value": 0, "source": "env"}
        })))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "STALLSCOPE_TCP_KEEPCNT=\"0\" (from a stored snapshot) is not accepted: out of range; \
             allowed: a whole number from 1 to 100"
        );
        for entry in [
            serde_json::json!({"value": 5, "source": "somewhere"}),
            serde_json::json!({"value": 5}),
            serde_json::json!(5),
            serde_json::json!({"value": [5], "source": "env"}),
        ] {
            let err = Tunables::from_snapshot(&snapshot(serde_json::json!({ "STALLSCOPE_TCP_KEEPCNT": entry })));
            assert!(matches!(err, Err(TunableError::Invalid { name: "STALLSCOPE_TCP_KEEPCNT", .. })), "{err:?}");
        }
    }

    #[test]
    fn every_source_parses_back_from_its_name() {
        let sources = [
            Source::Default,
            Source::Derived,
            Source::Scenario("rate limited".into()),
            Source::ConfigFile("/a b/c.toml".into()),
            Source::Environment,
            Source::Override,
            Source::Edit,
            Source::BeforeItExisted,
        ];
        for source in sources {
            assert_eq!(Source::parse(&source.to_string()), Some(source));
        }
        assert_eq!(Source::parse("scenario"), None);
    }

    #[test]
    fn reset_restores_default_and_derived_values() {
        let mut t = Tunables::defaults();
        t.apply_override("HTTP_READ_TIMEOUT_S=5").unwrap();
        t.reset("HTTP_READ_TIMEOUT_S");
        assert_eq!(t.get("STALLSCOPE_HTTP_READ_TIMEOUT_S").value, Value::Float(1860.0));
        assert_eq!(t, Tunables::defaults());
    }
}
