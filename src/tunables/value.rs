//! A tunable's value, and how text becomes one.

use std::fmt;

use super::spec::Kind;

/// A parsed tunable value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A switch.
    Bool(bool),
    /// A whole number.
    Int(i64),
    /// A decimal number (seconds, ratios, percentages).
    Float(f64),
    /// A choice, a comma-separated list or free text, normalised.
    Text(String),
}

impl Value {
    /// Parses `text` as a value of `kind`; the error says what was wrong
    /// (the caller adds the tunable's name and the allowed values).
    pub fn parse(kind: &Kind, text: &str) -> Result<Value, String> {
        let trimmed = text.trim();
        match *kind {
            Kind::Bool => match trimmed.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(Value::Bool(true)),
                "0" | "false" | "no" | "off" => Ok(Value::Bool(false)),
                _ => Err("not a switch".to_owned()),
            },
            Kind::Int { min, max } => {
                let n: i64 = trimmed.parse().map_err(|_| "not a whole number".to_owned())?;
                if n < min || n > max {
                    return Err("out of range".to_owned());
                }
                Ok(Value::Int(n))
            }
            Kind::Float { min, max } => {
                let n: f64 = trimmed.parse().map_err(|_| "not a number".to_owned())?;
                if !n.is_finite() {
                    return Err("not a finite number".to_owned());
                }
                if n < min || n > max {
                    return Err("out of range".to_owned());
                }
                Ok(Value::Float(n))
            }
            Kind::Choice(choices) => {
                let word = trimmed.to_ascii_lowercase();
                choices
                    .iter()
                    .find(|c| **c == word)
                    .map(|c| Value::Text((*c).to_owned()))
                    .ok_or_else(|| "not one of the choices".to_owned())
            }
            Kind::List(items) => {
                let mut picked: Vec<&str> = Vec::new();
                for word in trimmed.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                    let word = word.to_ascii_lowercase();
                    let item = items
                        .iter()
                        .find(|i| **i == word)
                        .ok_or_else(|| format!("`{word}` is not one of the items"))?;
                    if !picked.contains(item) {
                        picked.push(item);
                    }
                }
                // Listing order, so equal sets print equally.
                picked.sort_by_key(|p| items.iter().position(|i| i == p));
                Ok(Value::Text(picked.join(",")))
            }
            Kind::Text { check, .. } => {
                check(trimmed)?;
                Ok(Value::Text(trimmed.to_owned()))
            }
        }
    }

    /// The value as a switch (false for anything else).
    pub fn as_bool(&self) -> bool {
        matches!(self, Value::Bool(true))
    }

    /// The value as a number (0 for text).
    pub fn as_f64(&self) -> f64 {
        match *self {
            Value::Bool(b) => f64::from(u8::from(b)),
            // Tunable ranges keep integers far below 2^53.
            Value::Int(n) => n as f64,
            Value::Float(x) => x,
            Value::Text(_) => 0.0,
        }
    }

    /// The value as a whole number (0 for text; floats are truncated).
    pub fn as_i64(&self) -> i64 {
        match *self {
            Value::Int(n) => n,
            ref other => other.as_f64() as i64,
        }
    }

    /// The value as text (empty for numbers and switches).
    pub fn as_str(&self) -> &str {
        match self {
            Value::Text(s) => s,
            _ => "",
        }
    }

    /// The value as JSON, for `--json` listings.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(n) => serde_json::Value::from(*n),
            Value::Float(x) => serde_json::Value::from(*x),
            Value::Text(s) => serde_json::Value::from(s.as_str()),
        }
    }
}

impl fmt::Display for Value {
    /// Prints the value as it would be written in the environment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => f.write_str(if *b { "1" } else { "0" }),
            Value::Int(n) => write!(f, "{n}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Text(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind() {
        assert_eq!(Value::parse(&Kind::Bool, " yes "), Ok(Value::Bool(true)));
        assert!(Value::parse(&Kind::Bool, "2").is_err());
        let int = Kind::Int { min: 0, max: 5 };
        assert_eq!(Value::parse(&int, "5"), Ok(Value::Int(5)));
        assert!(Value::parse(&int, "6").is_err());
        assert!(Value::parse(&int, "1.5").is_err());
        let float = Kind::Float { min: 0.0, max: 10.0 };
        assert_eq!(Value::parse(&float, "2.5"), Ok(Value::Float(2.5)));
        assert!(Value::parse(&float, "NaN").is_err());
        assert!(Value::parse(&float, "inf").is_err());
        assert!(Value::parse(&float, "-1").is_err());
        let list = Kind::List(&["a", "b", "c"]);
        assert_eq!(Value::parse(&list, "c, A,c"), Ok(Value::Text("a,c".into())));
        assert!(Value::parse(&list, "a,d").is_err());
    }

    #[test]
    fn floats_print_without_noise() {
        assert_eq!(Value::Float(1800.0).to_string(), "1800");
        assert_eq!(Value::Float(0.25).to_string(), "0.25");
    }
}
