//! `stallscope tunables`: list the effective tunables, or print them as a
//! `.env` file for a system with another prefix.

use std::io::Write;

use anyhow::Result;

use crate::config::Settings;
use crate::tunables::PREFIX;

/// Options of `stallscope tunables`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON (one array of objects).
    #[arg(long, conflicts_with = "env")]
    json: bool,
    /// Print a .env file.
    #[arg(long)]
    env: bool,
    /// The variable prefix of the .env file (e.g. OPENPROGRAM_).
    #[arg(long, requires = "env", default_value = PREFIX)]
    prefix: String,
}

pub(super) fn run(args: &Args, settings: &Settings, out: &mut dyn Write) -> Result<()> {
    let t = &settings.tunables;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&t.to_json())?)?;
    } else if args.env {
        write!(out, "{}", t.to_env(&args.prefix, false))?;
    } else {
        let rows: Vec<[String; 5]> = t
            .iter()
            .map(|(spec, e)| {
                [
                    spec.name.to_owned(),
                    crate::tunables::shown(spec, &e.value).to_string(),
                    t.default_of(spec).to_string(),
                    spec.unit.to_owned(),
                    e.source.to_string(),
                ]
            })
            .collect();
        let header = ["NAME", "VALUE", "DEFAULT", "UNIT", "SOURCE"].map(str::to_owned);
        let widths: Vec<usize> =
            (0..4).map(|i| rows.iter().chain([&header]).map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
        for row in std::iter::once(&header).chain(&rows) {
            writeln!(
                out,
                "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
                row[0],
                row[1],
                row[2],
                row[3],
                row[4],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2],
                w3 = widths[3]
            )?;
        }
    }
    Ok(())
}
