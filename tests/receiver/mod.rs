//! A loopback OTLP/HTTP receiver for tests: it answers every request with
//! one status, or accepts and never answers, and keeps each request it
//! read (its headers and body) for the test to look at.
//!
//! It runs on its own threads (std, no runtime), so both plain tests that
//! start the binary and tokio tests can use it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How the receiver answers.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    /// With this status and a short text body.
    Status(u16),
    /// Not at all: the request is read and the connection held open.
    Never,
}

/// A request as read.
#[derive(Debug, Clone)]
pub struct Request {
    /// Its headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Vec<u8>,
}

impl Request {
    /// The value of header `name` (lower case), if it came.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Seen {
    requests: Mutex<Vec<Request>>,
    arrived: Condvar,
}

/// A receiver listening on a loopback port until the test process ends.
pub struct Receiver {
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its port.
    pub port: u16,
    seen: Arc<Seen>,
}

impl Receiver {
    /// Starts one that answers `answer`.
    pub fn start(answer: Answer) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Seen::default());
        let shared = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = Arc::clone(&shared);
                std::thread::spawn(move || serve(stream, answer, &seen));
            }
        });
        Receiver { base: format!("http://127.0.0.1:{port}"), port, seen }
    }

    /// The requests read so far.
    pub fn requests(&self) -> Vec<Request> {
        self.seen.requests.lock().unwrap().clone()
    }

    /// Waits until `n` requests have been read, for at most `limit` (a
    /// guard against a hang, not a measurement); the requests.
    pub fn wait_for(&self, n: usize, limit: Duration) -> Vec<Request> {
        let deadline = Instant::now() + limit;
        let mut requests = self.seen.requests.lock().unwrap();
        while requests.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "{} of {n} requests after {limit:?}", requests.len());
            requests = self.seen.arrived.wait_timeout(requests, left).unwrap().0;
        }
        requests.clone()
    }
}

/// Reads requests from one connection and answers each, until it closes.
fn serve(stream: TcpStream, answer: Answer, seen: &Seen) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    while let Some(request) = read_request(&mut reader) {
        seen.requests.lock().unwrap().push(request);
        seen.arrived.notify_all();
        match answer {
            Answer::Status(status) => {
                let body = "answered by the test receiver";
                let head = format!(
                    "HTTP/1.1 {status} Test\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                if writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(body.as_bytes())).is_err() {
                    return;
                }
            }
            // Hold the connection until the client gives up on it.
            Answer::Never => {
                let _ = reader.read_to_end(&mut Vec::new());
                return;
            }
        }
    }
}

/// One HTTP/1.1 request with a `content-length` body; `None` once the
/// connection closes.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length = headers.iter().find(|(n, _)| n == "content-length").map_or(0, |(_, v)| v.parse().unwrap_or(0));
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { headers, body })
}
