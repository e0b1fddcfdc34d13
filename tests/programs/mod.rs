//! Programs we did not write, started by tests: finding them (or saying
//! why a test is skipped), free loopback ports, waiting for a listener,
//! a loopback HTTP server for them to talk to, scratch directories, and
//! killing them when the test ends.
//!
//! A test whose program is absent says so and passes, so a fresh
//! checkout's `cargo test` works; `.ci/run` installs every program and
//! sets `STALLSCOPE_REQUIRE_EXTERNAL=1`, which turns a missing one into a
//! failure.

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::StreamBody;
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// Returns the program's path, or says why the test is skipped (and fails
/// when CI requires the program: `STALLSCOPE_REQUIRE_EXTERNAL=1`).
pub fn external(what: &str, found: Option<PathBuf>) -> Option<PathBuf> {
    if found.is_none() {
        let required = std::env::var("STALLSCOPE_REQUIRE_EXTERNAL").is_ok_and(|v| v == "1");
        assert!(!required, "{what} is missing and STALLSCOPE_REQUIRE_EXTERNAL=1; .ci/run installs it");
        eprintln!("skipped: {what} is not installed (.ci/run installs it)");
    }
    found
}

/// `program` on the `PATH`, if it is there.
pub fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| Path::new(dir).join(program)).find(|p| p.is_file())
}

/// The Python of the virtualenv with the openai and anthropic SDKs
/// (`$STALLSCOPE_CLIENTS_PYTHON`, else `~/.cache/stallscope-clients`).
pub fn python() -> Option<PathBuf> {
    let venv = std::env::var_os("STALLSCOPE_CLIENTS_PYTHON").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"));
        cache.join("stallscope-clients/bin/python")
    });
    external("the openai and anthropic Python SDKs (a virtualenv)", Some(venv).filter(|p| p.is_file()))
}

/// The `openai` npm package under `.tools/openai-node`, with node.
pub fn openai_node() -> Option<PathBuf> {
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/openai-node/node_modules/openai");
    external("the openai npm package (with node)", on_path("node").and(Some(module)).filter(|p| p.is_dir()))
}

/// What a [`serve`]d request is answered: status, headers, and the body's
/// chunks, each written after its wait.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub chunks: Vec<(Duration, Bytes)>,
}

/// Serves `answer` on a loopback port (HTTP/1.1), each request on its
/// connection's task; the server's address.
pub async fn serve(answer: fn(&hyper::Request<Incoming>) -> Answer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let service = service_fn(|request: hyper::Request<Incoming>| async move {
                    let Answer { status, headers, chunks } = answer(&request);
                    let frames = futures_util::stream::iter(chunks).then(|(wait, chunk)| async move {
                        tokio::time::sleep(wait).await;
                        Ok::<_, Infallible>(Frame::data(chunk))
                    });
                    let mut response = hyper::Response::new(StreamBody::new(frames));
                    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                    for (name, value) in headers {
                        response.headers_mut().insert(name, value.parse().unwrap());
                    }
                    Ok::<_, Infallible>(response)
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(socket), service).await;
            });
        }
    });
    addr
}

/// A child process killed when the test ends.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port nothing listens on (as of now).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Held while a program picks its port and starts listening, so two
/// tests never race for one port.
pub static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `command` started quietly, once it listens on `port`.
pub fn listening(command: &mut std::process::Command, port: u16) -> Running {
    use std::process::Stdio;
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_for_port(port, &mut child, Duration::from_secs(20));
    Running(child)
}

/// Waits until `child` listens on `port`, for at most `limit`.
pub fn wait_for_port(port: u16, child: &mut Child, limit: Duration) {
    let deadline = Instant::now() + limit;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "the program exited before listening on {port}");
        assert!(Instant::now() < deadline, "nothing listens on {port} after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every byte of the files under `dir` (a database and its journal), as
/// text, to look for what must never be kept there.
pub fn files_text(dir: &Path) -> String {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        seen.extend(std::fs::read(entry.path()).unwrap_or_default());
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// A scratch directory for this test process (tests of one process that
/// ask for the same name share it).
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stallscope-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `stallscope ARGS --db DB` (no environment), sends it SIGINT
/// (Ctrl-C) once `streams` of its streams have started, and waits for it
/// to end.
pub fn interrupt_once_started(args: &[&str], db: &Path, streams: i64) -> std::process::Output {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .args(args)
        .arg("--db")
        .arg(db)
        .env_clear()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The recorder writes a stream when it starts (it commits every 200 ms).
    let started = || {
        let Ok(conn) = rusqlite::Connection::open(db) else { return 0 };
        conn.query_row("SELECT count(*) FROM streams WHERE started_ns IS NOT NULL", [], |r| r.get(0)).unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while started() < streams {
        assert!(Instant::now() < deadline, "{streams} streams never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let kill = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    child.wait_with_output().unwrap()
}
