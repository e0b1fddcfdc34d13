//! `stallscope sim`: serve a built-in scenario, a scenario file, or a
//! recorded run on loopback.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::runs::DbArg;
use crate::replay::recording::Recording;
use crate::sim::{Scenario, SimServer, builtin, builtin_names};
use crate::store::RunId;

/// Options of `stallscope sim`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The built-in scenario to serve.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["scenario_file", "from_run"])]
    scenario: Option<String>,
    /// Serve your own scenario file (the built-ins' TOML format; see
    /// assets/scenarios/).
    #[arg(long, value_name = "PATH", conflicts_with = "from_run")]
    scenario_file: Option<PathBuf>,
    /// Serve recorded run RUN as a live provider with its recorded timing:
    /// request N carrying `x-stallscope-stream: S` gets stream S's recorded
    /// attempt N (a 503 says so when the recording has none). Bodies are
    /// byte for byte when raw bodies were recorded (RECORD_BODIES=raw);
    /// otherwise they are re-rendered in the recorded dialect from the
    /// recorded events, so the event classes, text lengths and timing match
    /// but chunk sizes differ from the recording. Attempts that timed out
    /// are held open forever where the recording stops.
    #[arg(long, value_name = "RUN")]
    from_run: Option<RunId>,
    /// With --from-run: how much faster than recorded to play (0.1 to
    /// 1000); every delay is divided by it, but waits that headers ask for
    /// (retry-after) are served as recorded.
    #[arg(long, value_name = "X", default_value_t = 1.0, requires = "from_run")]
    speed: f64,
    #[command(flatten)]
    db: DbArg,
    /// The port (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// List the built-in scenarios and exit.
    #[arg(long)]
    list: bool,
}

/// What `sim` serves.
enum Served {
    Scenario(String, Scenario),
    Recording(Box<Recording>),
}

pub(super) fn run(args: &Args, out: &mut dyn Write) -> Result<()> {
    let served = match (&args.scenario, &args.scenario_file, args.from_run) {
        _ if args.list => None,
        (Some(name), _, _) => Some(Served::Scenario(format!("`{name}`"), builtin(name)?)),
        (None, Some(path), _) => Some(Served::Scenario(path.display().to_string(), Scenario::from_file(path)?)),
        (None, None, Some(run)) => {
            let store = args.db.open()?;
            let recording = Recording::load(&store, run).with_context(|| format!("--from-run {run}"))?;
            Some(Served::Recording(Box::new(recording)))
        }
        (None, None, None) => None,
    };
    let Some(served) = served else {
        for name in builtin_names() {
            let description = builtin(name).map(|s| s.description().to_owned()).unwrap_or_default();
            writeln!(out, "{name:<24} {}", description.lines().next().unwrap_or(""))?;
        }
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let (server, what) = match served {
            Served::Scenario(what, scenario) => (SimServer::start(scenario, args.port).await?, what),
            Served::Recording(recording) => {
                let server = SimServer::start_recording(&recording, args.speed, args.port).await?;
                (server, format!("recorded run {} at {}× speed", recording.run, args.speed))
            }
        };
        writeln!(out, "{}", server.base_url())?;
        out.flush()?;
        eprintln!("serving {what} (POST /v1/chat/completions, /v1/responses, /v1/messages); Ctrl-C stops");
        tokio::signal::ctrl_c().await?;
        server.shutdown().await;
        Ok(())
    })
}
