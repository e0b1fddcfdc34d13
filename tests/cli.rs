//! The command line as a user runs it: the real binary, its stdout, stderr
//! and exit code.

use std::process::{Command, Output};

fn stallscope(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stallscope"));
    // No inherited STALLSCOPE_* variables and no default config file.
    command.env_clear().env("HOME", "/nonexistent").env("XDG_CONFIG_HOME", "/nonexistent");
    command.args(args).envs(env.iter().copied()).output().expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn tunables_json_lists_every_tunable_with_its_source() {
    let out = stdout(&stallscope(
        &["--set", "SSE_IDLE_TIMEOUT_S=600", "tunables", "--json"],
        &[("STALLSCOPE_TCP_KEEPCNT", "5")],
    ));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), stallscope::tunables::TUNABLES.len());
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap().clone();
    let idle = row("STALLSCOPE_SSE_IDLE_TIMEOUT_S");
    assert_eq!(
        (idle["value"].as_f64(), idle["default"].as_f64(), idle["source"].as_str()),
        (Some(600.0), Some(1800.0), Some("--set"))
    );
    assert_eq!(
        (idle["unit"].as_str(), idle["type"].as_str(), idle["group"].as_str()),
        (Some("s"), Some("float"), Some("stream"))
    );
    assert!(idle["allowed"].as_str().unwrap().contains("86400"), "{idle}");
    assert_eq!(row("STALLSCOPE_TCP_KEEPCNT")["source"], "env");
    let read = row("STALLSCOPE_HTTP_READ_TIMEOUT_S");
    assert_eq!((read["value"].as_f64(), read["source"].as_str()), (Some(660.0), Some("derived")));
}

#[test]
fn tunables_table_and_env_export() {
    let table = stdout(&stallscope(&["tunables"], &[]));
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S"), "{table}");
    let env =
        stdout(&stallscope(&["--set", "FALLBACK_MODELS=off", "tunables", "--env", "--prefix", "OPENPROGRAM_"], &[]));
    assert!(env.contains("\nOPENPROGRAM_FALLBACK_MODELS=off\n"), "{env}");
    assert!(env.contains("\nOPENPROGRAM_SSE_IDLE_TIMEOUT_S=1800\n"), "{env}");
    assert!(!env.contains("STALLSCOPE_"), "{env}");
}

#[test]
fn bad_input_gets_one_clear_line_and_a_non_zero_exit() {
    /// Arguments, environment, and what stderr must say.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 4] = [
        (&["--set", "SSE_IDLE_TIMOUT_S=3", "tunables"], &[], "did you mean STALLSCOPE_SSE_IDLE_TIMEOUT_S?"),
        (
            &["tunables"],
            &[("STALLSCOPE_TCP_KEEPCNT", "lots")],
            "STALLSCOPE_TCP_KEEPCNT=\"lots\" (from env) is not accepted",
        ),
        (&["--config", "/nonexistent/x.toml", "tunables"], &[], "cannot read config /nonexistent/x.toml"),
        (&["budget", "--layer", "candidates"], &[], "layer `candidates` is not NAME:RUNS"),
    ];
    for (args, env, wanted) in cases {
        let output = stallscope(args, env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("stallscope: ") && stderr.contains(wanted), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}

#[test]
fn budget_reproduces_seed_003_from_the_command_line() {
    let sets = [
        "SSE_TOTAL_TIMEOUT_S=90",
        "PROVIDER_STREAM_RETRIES=2",
        "PROVIDER_STREAM_BACKOFF_S=0.5",
        "PROVIDER_STREAM_BACKOFF_MAX_S=8",
        "BACKOFF_JITTER=full",
        "RETRY_AFTER_MAX_S=0",
        "FALLBACK_MODELS=off",
    ];
    let mut args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s]).collect();
    args.extend(["budget", "--deadline", "120", "--layer", "same-agent:2:0.25", "--layer", "candidates:12", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&stallscope(&args, &[]))).unwrap();
    let worst: Vec<f64> = report["layers"].as_array().unwrap().iter().map(|l| l["worst"].as_f64().unwrap()).collect();
    assert_eq!(worst, [90.0, 271.5, 543.25, 6519.0]);
    assert_eq!(report["fits"], false);

    args.pop();
    let text = stdout(&stallscope(&args, &[]));
    assert!(text.contains("does NOT fit the caller's deadline of 120.000 s"), "{text}");
}
