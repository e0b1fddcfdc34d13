//! Options the long-running commands share (`watch`, `observe`): which of
//! their runs the database keeps, and the OTLP receiver their calls go to
//! as traces.

use anyhow::Result;

use crate::export::otlp::Destination;
use crate::watch::Retention;

/// Which runs of the command's label the database keeps.
#[derive(Debug, clap::Args)]
pub(super) struct KeepArgs {
    /// Keep the newest N runs of this label in the database (default 1000).
    #[arg(long, value_name = "N", conflicts_with = "keep_days", value_parser = clap::value_parser!(u32).range(1..))]
    keep: Option<u32>,
    /// Keep the runs of the last D days instead.
    #[arg(long, value_name = "D", value_parser = positive_days)]
    keep_days: Option<f64>,
}

impl KeepArgs {
    /// The retention asked for.
    pub(super) fn retention(&self) -> Retention {
        self.keep_days.map_or(Retention::Rounds(self.keep.unwrap_or(1000) as usize), Retention::Days)
    }
}

fn positive_days(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(days) if days > 0.0 && days.is_finite() => Ok(days),
        _ => Err(format!("`{text}` is not a number of days above 0")),
    }
}

/// Where recorded calls go as OpenTelemetry traces.
#[derive(Debug, clap::Args)]
pub(super) struct OtlpArgs {
    /// Also send each recorded call as an OpenTelemetry trace to this
    /// OTLP/HTTP receiver: its base URL (…/v1/traces is appended) or its
    /// traces URL. Phoenix: http://127.0.0.1:6006
    #[arg(long, value_name = "URL", conflicts_with = "no_record")]
    otlp: Option<String>,
    /// A header sent with every OTLP request, NAME=VALUE (repeatable), for
    /// a receiver's API key: NAME=env:VAR reads the value from the
    /// environment variable VAR, so the key is on no command line. Values
    /// are never printed.
    #[arg(long, value_name = "NAME=VALUE", requires = "otlp")]
    otlp_header: Vec<String>,
}

impl OtlpArgs {
    /// The receiver, when one is given (`env`: the process environment).
    pub(super) fn destination(&self, env: &[(String, String)]) -> Result<Option<Destination>> {
        Ok(self.otlp.as_deref().map(|url| Destination::parse(url, &self.otlp_header, env)).transpose()?)
    }
}
