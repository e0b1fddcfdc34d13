//! Credentials in URLs are never shown or kept, and an agent's request
//! adds no metric series (issue 32; review D10, D8): the real binary,
//! `stallscope observe`, in front of a simulator whose URL carries a user
//! name and a password. The password is on no line it prints, in no body
//! a client gets, in no byte of the database (its WAL included) and in no
//! export; the user name is kept, with `***` for the password. The
//! models the agent names are not the configuration's: `/metrics` counts
//! them as `other`.

mod programs;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use programs::{files_text, free_port, temp_dir, wait_for_port};
use stallscope::sim::{SimServer, builtin};

const PASSWORD: &str = "s3cretpass";

/// `stallscope observe ARGS --listen 127.0.0.1:LISTEN` with no environment
/// but a home that holds no config, running until it listens.
fn observe(args: &[&str], listen: u16) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .arg("observe")
        .args(args)
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_port(listen, &mut child, Duration::from_secs(30));
    child
}

/// Sends `child` SIGINT (Ctrl-C) and waits for it to end, for at most a
/// minute (past it, it is killed and the test fails).
fn interrupt(mut child: Child) -> Output {
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("observe still ran a minute after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn printed(output: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// `stallscope export --db DB 1 --format jsonl ARGS`'s standard output.
fn exported(db: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .args(["export", "--db", db.to_str().unwrap(), "1", "--format", "jsonl"])
        .args(args)
        .env_clear()
        .output()
        .unwrap();
    let text = printed(&output);
    assert!(output.status.success(), "{text}");
    text
}

fn chat(model: &str) -> String {
    format!(r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"hi from {model}"}}]}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_s_password_is_in_no_output_body_record_or_export_and_models_add_no_series() {
    let sim = SimServer::start(builtin("healthy").unwrap(), 0).await.unwrap();
    let port = sim.addr().port();
    let dir = temp_dir("secrets");
    let client = reqwest::Client::new();

    // Config routes: the 404 any client gets names them, masked.
    let config = dir.join("routes.toml");
    let row = format!(
        "[[provider]]\nname = \"gw\"\nkind = \"openai-chat\"\nbase_url = \"http://user:{PASSWORD}@127.0.0.1:{port}/v1\"\nmodel = \"configured-model\"\n"
    );
    std::fs::write(&config, row).unwrap();
    let listen = free_port();
    let routed = observe(&["--config", config.to_str().unwrap(), "--no-record"], listen);
    let response = client.get(format!("http://127.0.0.1:{listen}/elsewhere/v1/models")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let body = response.text().await.unwrap();
    assert!(body.contains(&format!("/gw/… → http://user:***@127.0.0.1:{port}/v1")), "{body}");
    assert!(!body.contains(PASSWORD), "{body}");
    let text = printed(&interrupt(routed));
    assert!(text.contains(&format!("→ /gw/… → http://user:***@127.0.0.1:{port}/v1")), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");

    // One upstream, recorded, with its metrics served.
    let db_dir = dir.join("db");
    std::fs::create_dir_all(&db_dir).unwrap();
    let db = db_dir.join("observe.db");
    let (listen, metrics_port) = (free_port(), free_port());
    let upstream = format!("http://user:{PASSWORD}@127.0.0.1:{port}");
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let args = ["--upstream", &upstream, "--db", db.to_str().unwrap(), "--metrics-addr", &metrics_addr];
    let observer = observe(&args, listen);
    // Forty calls, each naming a model of its own, ten at a time.
    let url = format!("http://127.0.0.1:{listen}/v1/chat/completions");
    for batch in 0..4 {
        let calls = (0..10).map(|i| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let response = client.post(&url).body(chat(&format!("made-up-{batch}-{i}"))).send().await.unwrap();
                assert_eq!(response.status(), 200);
                response.text().await.unwrap()
            })
        });
        for call in calls {
            assert!(call.await.unwrap().contains("[DONE]"));
        }
    }
    let metrics = format!("http://{metrics_addr}/metrics");
    let calls = r#"stallscope_calls_total{site="observe@127.0.0.1"#;
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = client.get(&metrics).send().await.unwrap().text().await.unwrap();
        let counted: f64 = text
            .lines()
            .filter(|l| l.starts_with(calls))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if counted >= 40.0 {
            break text;
        }
        assert!(Instant::now() < deadline, "the 40 calls were never counted:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!text.contains("made-up"), "{text}");
    let ok = format!(r#"{calls}:{listen}",provider="upstream",model="other",outcome="ok",verdict="healthy"}} 40"#);
    assert!(text.lines().any(|l| l == ok), "no `{ok}` in:\n{text}");
    let output = interrupt(observer);
    let text = printed(&output);
    assert!(text.contains(&format!("→ http://user:***@127.0.0.1:{port}\n")), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");

    let kept = files_text(&db_dir);
    assert!(kept.contains(&format!("http://user:***@127.0.0.1:{port}")), "the upstream is recorded, masked");
    assert!(!kept.contains(PASSWORD), "the password is in the database or its WAL");
    for args in [&[][..], &["--bodies"]] {
        let export = exported(&db, args);
        assert!(export.lines().count() > 40, "{export}");
        assert!(!export.contains(PASSWORD), "{export}");
    }
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
