//! The HTTP transport against real sockets and real kernel faults.
//!
//! Namespace tests reproduce what a network does to a stream (a peer that
//! vanishes mid-stream, SYNs nobody answers, a reset, a refusal, an ICMP
//! error, a failed DNS lookup) with nft rules and sysctls inside a network
//! namespace each test makes for itself and always deletes. The test re-runs
//! its own binary under `ip netns exec` with `STALLSCOPE_NETNS_CHILD` set and
//! `--exact` its name; the child does the work on that namespace's loopback,
//! so nothing outside it is touched. Where that cannot run (not root, no
//! `ip`, no `nft`, no namespaces) such a test says why it is skipped and
//! passes; `.ci/run` installs what is missing and sets
//! `STALLSCOPE_REQUIRE_NETNS=1`, which turns a skip into a failure.
//!
//! Guard tests put `observe --guard` between a plain client (the agent)
//! and the simulator in such a namespace and blackhole the guard's path to
//! the simulator mid-call: the guard's clocks, not the agent's timeout or
//! the kernel's, end what the fault left hanging.
//!
//! Loopback tests check the socket options the keepalive tunables set and
//! that no layer below the executor sends a request twice.

mod observer;
mod support;

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use observer::{GUARD, Running};
use stallscope::core::category::TimerKind;
use stallscope::core::event::Outcome;
use stallscope::core::failure::{Failure, TransportKind};
use stallscope::core::transport::{ProxySetting, TransportSettings, build_client, failure_from_reqwest};
use stallscope::diagnosis::{Severity, VerdictKind};
use stallscope::observe::{ObserveSource, ObservedCall};
use stallscope::sim::{Scenario, SimServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Set in the child that runs a test's body inside its namespace.
const CHILD: &str = "STALLSCOPE_NETNS_CHILD";

/// Transport settings from the tunables with these overrides, going
/// straight to the server.
fn transport(sets: &[&str]) -> TransportSettings {
    TransportSettings { proxy: ProxySetting::Off, ..support::policy(sets).transport }
}

fn map(error: &reqwest::Error, settings: &TransportSettings) -> Failure {
    failure_from_reqwest(error, settings.connect_timeout, settings.read_timeout)
}

fn assert_kind(failure: &Failure, kind: TransportKind) {
    assert!(matches!(failure, Failure::Transport { kind: k, .. } if *k == kind), "want {kind}, got {failure}");
}

// ---------------------------------------------------------------------------
// Running a test body inside a network namespace.

/// Runs `body` on the loopback of a network namespace made for `test`
/// (which must be the calling test's name): in the parent, makes the
/// namespace, runs this test in a child inside it and deletes it; in the
/// child, runs `body`.
fn in_namespace<F, Fut>(test: &str, body: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    if std::env::var_os(CHILD).is_some() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(body());
        return;
    }
    let Some(namespace) = Namespace::create(test) else { return };
    let output = Command::new("ip")
        .args(["netns", "exec", &namespace.name])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The child's measurements, for `--nocapture` runs and failures.
    for measured in stdout.lines().filter_map(|l| l.find("measured:").map(|at| &l[at..])) {
        println!("{measured}");
    }
    assert!(output.status.success(), "the child in namespace {} failed:\n{stdout}\n{stderr}", namespace.name);
    assert!(stdout.contains("1 passed"), "the child did not run `{test}`:\n{stdout}\n{stderr}");
}

/// A network namespace, deleted when dropped (also when the test fails).
struct Namespace {
    name: String,
}

impl Namespace {
    /// Makes a namespace with its loopback up, or says why it cannot (and
    /// fails when CI requires namespaces).
    fn create(test: &str) -> Option<Namespace> {
        let name = format!("stallscope-{}-{test}", std::process::id());
        let made = unavailable()
            .map_or_else(|| ip(&["netns", "add", &name]).map_err(|e| format!("`ip netns add` failed: {e}")), Err);
        if let Err(reason) = made {
            let required = std::env::var("STALLSCOPE_REQUIRE_NETNS").is_ok_and(|v| v == "1");
            assert!(!required, "{reason}, and STALLSCOPE_REQUIRE_NETNS=1 (.ci/run sets it up)");
            eprintln!("skipped: {reason} (network-namespace tests need root, iproute2 and nftables)");
            return None;
        }
        let namespace = Namespace { name };
        ip(&["netns", "exec", &namespace.name, "ip", "link", "set", "lo", "up"]).unwrap();
        Some(namespace)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "delete", &self.name]) {
            eprintln!("could not delete network namespace {}: {e}", self.name);
        }
    }
}

/// Why namespace tests cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if !root {
        Some("not running as root".to_owned())
    } else if on_path("ip").is_none() {
        Some("`ip` (iproute2) is not installed".to_owned())
    } else if on_path("nft").is_none() {
        Some("`nft` (nftables) is not installed".to_owned())
    } else {
        None
    }
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| Path::new(dir).join(program)).find(|p| p.is_file())
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args, None)
}

fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut input = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut input, stdin.unwrap_or("").as_bytes()).map_err(|e| e.to_string())?;
    drop(input);
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    if output.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&output.stderr).trim().to_owned()) }
}

/// In the child: packets to or from `port` on the namespace's loopback
/// meet `verdict` (`drop`, `reject with tcp reset`, ...). `direction` is
/// `dport` (towards the server), `sport` (towards the client) or both.
fn nft_rule(port: u16, directions: &[&str], verdict: &str) {
    let matches: Vec<String> = directions.iter().map(|d| format!("tcp {d} {port}")).collect();
    nft_rules(&matches, verdict);
}

/// In the child: every packet of the one connection between ports
/// `client` and `server` is dropped; other connections to `server` go
/// through.
fn blackhole_connection(client: u16, server: u16) {
    nft_rules(
        &[format!("tcp sport {client} tcp dport {server}"), format!("tcp sport {server} tcp dport {client}")],
        "drop",
    );
}

/// In the child: packets that match any of `matches` (nft match
/// expressions) meet `verdict`.
fn nft_rules(matches: &[String], verdict: &str) {
    let rules: String = matches.iter().map(|m| format!("    {m} {verdict}\n")).collect();
    let script = format!(
        "table inet stallscope {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n{rules}  }}\n}}\n"
    );
    run("nft", &["-f", "-"], Some(&script)).unwrap();
}

/// In the child: a namespace-local sysctl.
fn sysctl(name: &str, value: &str) {
    std::fs::write(Path::new("/proc/sys").join(name.replace('.', "/")), value).unwrap();
}

// ---------------------------------------------------------------------------
// Servers.

/// The head of an event stream and its first event.
const STREAM_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: x\n\n\r\n";
/// One more event, in the same chunked body.
const STREAM_EVENT: &[u8] = b"9\r\ndata: y\n\n\r\n";

/// Serves one event stream: the head and an event, then one more event
/// after `then`, then holds the connection open.
async fn stream_server(then: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        socket.write_all(STREAM_HEAD).await.unwrap();
        tokio::time::sleep(then).await;
        // The route may be gone by now: that is the point.
        let _ = socket.write_all(STREAM_EVENT).await;
        std::future::pending::<()>().await;
    });
    addr
}

/// Reads one request head; false when the connection closed first.
async fn read_request(socket: &mut TcpStream) -> bool {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    true
}

/// Opens a stream, reads its first event, applies `fault` and returns the
/// body's failure and how long after the fault it came.
async fn stream_failure(settings: &TransportSettings, fault: impl FnOnce(u16)) -> (Failure, Duration) {
    let addr = stream_server(Duration::from_millis(200)).await;
    let client = build_client(settings).unwrap();
    let response = client.get(format!("http://{addr}/")).send().await.unwrap();
    let mut body = response.bytes_stream();
    body.next().await.unwrap().unwrap();
    fault(addr.port());
    let started = Instant::now();
    // Far below the 30 s a socket with reqwest's default user timeout takes.
    let deadline = Duration::from_secs(15);
    loop {
        match tokio::time::timeout(deadline, body.next()).await {
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(e))) => return (map(&e, settings), started.elapsed()),
            Ok(None) => panic!("the stream ended cleanly"),
            Err(_) => panic!("no failure within {deadline:?}"),
        }
    }
}

/// A GET to 127.0.0.1:`port` that must fail, its failure and how long it took.
async fn send_failure(settings: &TransportSettings, url: &str) -> (Failure, Duration) {
    let started = Instant::now();
    let client = build_client(settings).unwrap();
    let error = tokio::time::timeout(Duration::from_secs(15), client.get(url).send())
        .await
        .expect("no failure within 15 s")
        .unwrap_err();
    (map(&error, settings), started.elapsed())
}

fn within(took: Duration, from_s: f64, to_s: f64) {
    assert!((from_s..to_s).contains(&took.as_secs_f64()), "took {took:?}, expected {from_s}..{to_s} s");
}

// ---------------------------------------------------------------------------
// Kernel faults, each in its own namespace.

/// A peer that vanishes mid-stream (every packet dropped) is noticed by
/// TCP keepalive after KEEPIDLE + KEEPINTVL × KEEPCNT (1 + 1 × 2 = 3 s), not
/// after reqwest's default 30 s user timeout, and is the kernel's timeout,
/// not one of our timers.
#[test]
fn blackhole_mid_stream_is_noticed_by_keepalive_as_configured() {
    in_namespace("blackhole_mid_stream_is_noticed_by_keepalive_as_configured", || async {
        let settings = transport(&["TCP_KEEPALIVE=1", "TCP_KEEPIDLE_S=1", "TCP_KEEPINTVL_S=1", "TCP_KEEPCNT=2"]);
        let (failure, took) = stream_failure(&settings, |port| nft_rule(port, &["dport", "sport"], "drop")).await;
        println!("measured: blackhole mid-stream, keepalive 1/1/2: {failure} after {took:.2?}");
        assert_kind(&failure, TransportKind::KernelTimeout);
        within(took, 2.5, 5.0);
    });
}

/// The client's acknowledgement of the next event is answered with a reset.
#[test]
fn reset_mid_stream_is_reset() {
    in_namespace("reset_mid_stream_is_reset", || async {
        let settings = transport(&[]);
        let (failure, took) =
            stream_failure(&settings, |port| nft_rule(port, &["dport"], "reject with tcp reset")).await;
        println!("measured: RST mid-stream: {failure} after {took:.2?}");
        assert_kind(&failure, TransportKind::Reset);
        within(took, 0.0, 1.0);
    });
}

/// SYNs dropped while the kernel gives up first (one SYN retry: 3 s) are
/// the kernel's connect timeout, not our 10 s connect timer. Keepalive is
/// off so the SYN retries alone decide: Linux 6.18 stretches them when a
/// `TCP_USER_TIMEOUT` is set (7.1 s here with the default 60 s).
#[test]
fn dropped_syns_time_out_in_the_kernel_before_our_connect_timer() {
    in_namespace("dropped_syns_time_out_in_the_kernel_before_our_connect_timer", || async {
        sysctl("net.ipv4.tcp_syn_retries", "1");
        nft_rule(9, &["dport"], "drop");
        let settings = transport(&["HTTP_CONNECT_TIMEOUT_S=10", "TCP_KEEPALIVE=0"]);
        let (failure, took) = send_failure(&settings, "http://127.0.0.1:9/").await;
        println!("measured: SYNs dropped, 1 SYN retry, connect timer 10 s: {failure} after {took:.2?}");
        assert_kind(&failure, TransportKind::ConnectTimedOut);
        within(took, 2.5, 5.0);
    });
}

/// SYNs dropped while our connect timer is the shorter: our timer fired.
#[test]
fn dropped_syns_fire_our_connect_timer_when_it_is_shorter() {
    in_namespace("dropped_syns_fire_our_connect_timer_when_it_is_shorter", || async {
        sysctl("net.ipv4.tcp_syn_retries", "1");
        nft_rule(9, &["dport"], "drop");
        let settings = transport(&["HTTP_CONNECT_TIMEOUT_S=0.5"]);
        let (failure, took) = send_failure(&settings, "http://127.0.0.1:9/").await;
        println!("measured: SYNs dropped, connect timer 0.5 s: {failure} after {took:.2?}");
        assert!(
            matches!(failure, Failure::Timeout { timer: TimerKind::Connect, after } if after == Duration::from_millis(500)),
            "{failure}"
        );
        within(took, 0.45, 1.5);
    });
}

/// A SYN answered with a reset is refused; one answered with ICMP host
/// unreachable is unreachable.
#[test]
fn refused_and_unreachable_connects_are_told_apart() {
    in_namespace("refused_and_unreachable_connects_are_told_apart", || async {
        nft_rule(9, &["dport"], "reject with tcp reset");
        nft_rule(10, &["dport"], "reject with icmpx type host-unreachable");
        let settings = transport(&[]);
        let (refused, took) = send_failure(&settings, "http://127.0.0.1:9/").await;
        println!("measured: SYN answered by RST: {refused} after {took:.2?}");
        assert_kind(&refused, TransportKind::Refused);
        let (unreachable, took) = send_failure(&settings, "http://127.0.0.1:10/").await;
        println!("measured: SYN answered by ICMP host unreachable: {unreachable} after {took:.2?}");
        assert_kind(&unreachable, TransportKind::Unreachable);
    });
}

/// A name that cannot be resolved (the namespace has no route to any name
/// server) is a DNS failure.
#[test]
fn an_unresolvable_host_is_a_dns_failure() {
    in_namespace("an_unresolvable_host_is_a_dns_failure", || async {
        let settings = transport(&[]);
        let (failure, took) = send_failure(&settings, "http://stallscope-test.invalid/").await;
        println!("measured: unresolvable host: {failure} after {took:.2?}");
        assert_kind(&failure, TransportKind::Dns);
    });
}

// ---------------------------------------------------------------------------
// The guard behind a kernel fault, each in its own namespace.

/// A streamed chat request, as an agent sends it.
const STREAMED: &str = r#"{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// The guard's idle budget in these tests, in seconds.
const GUARD_IDLE_S: f64 = 1.0;

/// Serves the scenario `text` (TOML) on the namespace's loopback.
async fn simulator(text: &str) -> SimServer {
    SimServer::start(Scenario::from_toml(text, "netfaults.toml").unwrap(), 0).await.unwrap()
}

/// `observe --guard` in front of `sim`, with the idle budget and `sets`.
async fn guard(sim: &SimServer, sets: &[&str]) -> Running {
    let idle = format!("SSE_IDLE_TIMEOUT_S={GUARD_IDLE_S}");
    let sets: Vec<&str> = [GUARD, idle.as_str()].into_iter().chain(sets.iter().copied()).collect();
    Running::start_with(ObserveSource::Upstream(sim.base_url()), None, &sets).await
}

/// An agent's streamed chat call through a guard, read as it comes.
struct AgentCall {
    response: reqwest::Response,
    /// What it has read so far.
    text: String,
}

impl AgentCall {
    /// Sends the request to the guard at `base`, whose answer must be a
    /// guarded 200.
    async fn send(base: &str) -> AgentCall {
        // The agent's own read timeout: far above any budget here.
        let client = reqwest::Client::builder().read_timeout(Duration::from_secs(20)).build().unwrap();
        let response = client.post(format!("{base}/v1/chat/completions")).body(STREAMED).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers().get("x-stallscope-guard").unwrap(), "on");
        AgentCall { response, text: String::new() }
    }

    /// Reads until what it has read holds `wanted`.
    async fn read_until(&mut self, wanted: &str) {
        while !self.text.contains(wanted) {
            let chunk = self.response.chunk().await.unwrap();
            let chunk = chunk.unwrap_or_else(|| panic!("the stream ended before {wanted}: {}", self.text));
            self.text.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Reads to the stream's end once `fault` is in place; how long that
    /// took, and the call as `observer` saw it end.
    async fn read_to_end(&mut self, observer: &Running, fault: &str) -> (Duration, ObservedCall) {
        let started = Instant::now();
        while let Some(chunk) = self.response.chunk().await.unwrap() {
            self.text.push_str(&String::from_utf8_lossy(&chunk));
        }
        let took = started.elapsed();
        let call = observer.ended(1).await.remove(0);
        println!(
            "measured: {fault}, guard idle {GUARD_IDLE_S} s: the agent's stream ended {took:.2?} after it; {}",
            call.verdict.summary
        );
        (took, call)
    }

    /// How many content deltas it has read.
    fn deltas(&self) -> usize {
        self.text.matches(r#""content":"tok ""#).count()
    }
}

/// The path to the upstream blackholes mid-answer (a tunnel gone, every
/// packet dropped, nothing said): text has reached the agent, so the guard
/// does not retry; its idle clock catches the silence and ends the agent's
/// stream with chat's in-stream error about the idle budget after the
/// fault, where the agent alone would wait out its own read timeout.
#[test]
fn a_blackhole_after_content_behind_the_guard_ends_the_agent_s_stream_in_the_idle_budget() {
    in_namespace("a_blackhole_after_content_behind_the_guard_ends_the_agent_s_stream_in_the_idle_budget", || async {
        // Four seconds of healthy answer.
        let sim = simulator("[[attempts]]\nsteps = [{ content = \"tok \", count = 80, every_ms = 50 }]\n").await;
        let observer = guard(&sim, &[]).await;
        let mut agent = AgentCall::send(&observer.base).await;
        agent.read_until("tok ").await;
        nft_rule(sim.addr().port(), &["dport", "sport"], "drop");
        let (took, call) = agent.read_to_end(&observer, "blackhole after content").await;
        let (report, verdict) = (&call.report, &call.verdict);
        within(took, GUARD_IDLE_S * 0.8, GUARD_IDLE_S + 2.0);
        assert!((1..80).contains(&agent.deltas()), "part of the answer, then the cut: {}", agent.text);
        let last = agent.text.lines().filter_map(|l| l.strip_prefix("data: ")).rfind(|d| *d != "[DONE]");
        let last: serde_json::Value = serde_json::from_str(last.unwrap()).unwrap();
        assert_eq!(last["error"]["type"], "server_error", "{}", agent.text);
        assert_eq!((report.outcome, report.attempts), (Outcome::Failed, 1), "{}", verdict.summary);
        assert_eq!(report.error.as_ref().and_then(|c| c.timer), Some(TimerKind::Idle), "{}", verdict.summary);
        assert_eq!(verdict.kind, VerdictKind::SilentStall, "{}", verdict.summary);
        observer.stop().await;
    });
}

/// One connection blackholes right after the head and the opening event
/// (a NAT entry or a tunnel that died; a new connection takes a path that
/// works): nothing of the answer has reached the agent, so the guard's
/// idle clock catches the silence and the core retries on a new
/// connection. The agent reads one whole answer, its role chunk once.
#[test]
fn a_connection_blackholed_before_content_behind_the_guard_is_retried() {
    in_namespace("a_connection_blackholed_before_content_behind_the_guard_is_retried", || async {
        // Attempt 1 opens and thinks for half a second before it answers,
        // time enough to blackhole it first; attempt 2 answers at once.
        let sim = simulator(
            "[[attempts]]\nsteps = [{ preamble = true }, { stall_ms = 500 }, { content = \"tok \", count = 20, every_ms = 25 }]\n\n\
             [[attempts]]\nsteps = [{ content = \"tok \", count = 20, every_ms = 25 }]\n",
        )
        .await;
        let observer = guard(&sim, &["PROVIDER_STREAM_BACKOFF_S=0.01", "PROVIDER_STREAM_BACKOFF_MAX_S=0.05"]).await;
        let mut agent = AgentCall::send(&observer.base).await;
        agent.read_until(r#""role":"assistant""#).await;
        let server = sim.addr().port();
        let clients: Vec<u16> =
            tcp_sockets().iter().filter(|s| s.remote_port == server).map(|s| s.local_port).collect();
        assert_eq!(clients.len(), 1, "the guard's connections to the simulator: {clients:?}");
        blackhole_connection(clients[0], server);
        let (took, call) = agent.read_to_end(&observer, "one connection blackholed before content").await;
        let (report, verdict) = (&call.report, &call.verdict);
        // The idle budget, a backoff, the half-second answer, and room.
        within(took, GUARD_IDLE_S * 0.8, GUARD_IDLE_S + 2.5);
        assert_eq!(agent.deltas(), 20, "the whole answer, once: {}", agent.text);
        assert_eq!(agent.text.matches(r#""role":"assistant""#).count(), 1, "one start: {}", agent.text);
        assert!(agent.text.ends_with("data: [DONE]\n\n"), "{}", agent.text);
        assert_eq!((report.outcome, report.attempts), (Outcome::Ok, 2), "{}", verdict.summary);
        assert_eq!(
            (verdict.kind, verdict.severity),
            (VerdictKind::SilentStall, Severity::Recovered),
            "{}",
            verdict.summary
        );
        observer.stop().await;
    });
}

// ---------------------------------------------------------------------------
// Socket options, on loopback.

/// An IPv4 TCP socket of this process's network namespace.
struct TcpSocket {
    local_port: u16,
    remote_port: u16,
    inode: String,
}

/// Every IPv4 TCP socket of this process's network namespace, listeners
/// included (remote port 0), from `/proc/net/tcp`.
fn tcp_sockets() -> Vec<TcpSocket> {
    let port = |address: &str| u16::from_str_radix(address.rsplit(':').next().unwrap(), 16).unwrap();
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    tcp.lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .map(|f| TcpSocket { local_port: port(f[1]), remote_port: port(f[2]), inode: f[9].to_owned() })
        .collect()
}

/// The options of the client's socket for the connection whose local
/// port is `port`.
#[derive(Debug, PartialEq)]
struct Options {
    keepalive: bool,
    idle: Duration,
    interval: Duration,
    count: u32,
    user_timeout: Option<Duration>,
}

fn client_socket_options(port: u16) -> Options {
    let inode = tcp_sockets()
        .into_iter()
        .find(|s| s.local_port == port)
        .map(|s| s.inode)
        .unwrap_or_else(|| panic!("no socket with local port {port} in /proc/net/tcp"));
    let link = format!("socket:[{inode}]");
    let fd: i32 = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|target| target.to_str() == Some(link.as_str())))
        .and_then(|e| e.file_name().to_str()?.parse().ok())
        .expect("the client's socket is not among this process's descriptors");
    // SAFETY: the descriptor is the pooled connection of a client the
    // caller keeps alive, so it stays open while it is borrowed here.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let socket = socket2::SockRef::from(&fd);
    Options {
        keepalive: socket.keepalive().unwrap(),
        idle: socket.tcp_keepalive_time().unwrap(),
        interval: socket.tcp_keepalive_interval().unwrap(),
        count: socket.tcp_keepalive_retries().unwrap(),
        user_timeout: socket.tcp_user_timeout().unwrap(),
    }
}

/// Makes one request with `settings` and returns the options of the
/// (pooled, still open) client socket, with the client that holds it.
async fn options_with(settings: &TransportSettings) -> (Options, reqwest::Client) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut socket, peer) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.unwrap();
        (socket, peer)
    });
    let client = build_client(settings).unwrap();
    let body = client.get(format!("http://{addr}/")).send().await.unwrap().text().await.unwrap();
    assert_eq!(body, "ok");
    let (_socket, peer) = server.await.unwrap();
    (client_socket_options(peer.port()), client)
}

#[tokio::test]
async fn keepalive_on_sets_the_probe_timing_and_a_matching_user_timeout() {
    let settings = transport(&["TCP_KEEPALIVE=1", "TCP_KEEPIDLE_S=7", "TCP_KEEPINTVL_S=3", "TCP_KEEPCNT=4"]);
    let (options, _client) = options_with(&settings).await;
    let expected = Options {
        keepalive: true,
        idle: Duration::from_secs(7),
        interval: Duration::from_secs(3),
        count: 4,
        user_timeout: Some(Duration::from_secs(19)),
    };
    assert_eq!(options, expected);
}

#[tokio::test]
async fn keepalive_off_leaves_the_socket_without_keepalive_or_user_timeout() {
    let (options, _client) = options_with(&transport(&["TCP_KEEPALIVE=0"])).await;
    assert!(!options.keepalive, "{options:?}");
    assert_eq!(options.user_timeout, None, "{options:?}");
}

// ---------------------------------------------------------------------------
// No retries below the executor, on loopback.

/// A pooled HTTP/1 connection that breaks (the server reads the second
/// request and hangs up, or closes the idle connection before it) never
/// makes the client send a request twice: the server sees exactly one per
/// `send`.
#[tokio::test]
async fn a_broken_pooled_connection_is_not_retried_underneath() {
    let requests = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::clone(&requests);
    tokio::spawn(async move {
        // Connection 1: answers one request, reads the next and hangs up.
        // Later connections: answer one request each and close.
        let mut connection = 0;
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            connection += 1;
            let answered = if connection == 1 { 1 } else { 0 };
            for n in 0..=answered {
                if !read_request(&mut socket).await {
                    break;
                }
                seen.fetch_add(1, Ordering::SeqCst);
                if n < answered || connection > 1 {
                    socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.unwrap();
                }
            }
        }
    });
    let settings = transport(&[]);
    let client = build_client(&settings).unwrap();
    let url = format!("http://{addr}/");
    assert_eq!(client.get(&url).send().await.unwrap().text().await.unwrap(), "ok");
    let error = client.get(&url).send().await.unwrap_err();
    assert_kind(&map(&error, &settings), TransportKind::Closed);
    assert_eq!(requests.load(Ordering::SeqCst), 2, "a send was retried underneath");
    // Connection 2 closes after its answer; the next send finds it closed.
    assert_eq!(client.get(&url).send().await.unwrap().text().await.unwrap(), "ok");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(client.get(&url).send().await.unwrap().text().await.unwrap(), "ok");
    assert_eq!(requests.load(Ordering::SeqCst), 4, "a send was retried underneath");
}

/// reqwest retries an HTTP/2 stream the server refused (`REFUSED_STREAM`)
/// twice by itself unless told not to: the server must see one request.
#[tokio::test]
async fn a_refused_http2_stream_is_not_retried_underneath() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let fixture = |name: &str| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls").join(name);
    let certs = CertificateDer::pem_file_iter(fixture("server.pem")).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_file(fixture("server.key")).unwrap();
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let requests = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::clone(&requests);
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(socket).await else { return };
                let Ok(mut connection) = h2::server::handshake(tls).await else { return };
                while let Some(Ok((_request, mut respond))) = connection.accept().await {
                    seen.fetch_add(1, Ordering::SeqCst);
                    respond.send_reset(h2::Reason::REFUSED_STREAM);
                }
            });
        }
    });

    let settings = TransportSettings { http1_only: false, ca_file: Some(fixture("ca.pem")), ..transport(&[]) };
    let client = build_client(&settings).unwrap();
    let error = client.get(format!("https://{addr}/")).send().await.unwrap_err();
    assert!(format!("{error:?}").contains("REFUSED_STREAM"), "not refused over HTTP/2: {error:?}");
    assert_eq!(requests.load(Ordering::SeqCst), 1, "the refused stream was retried underneath");
}
