//! The simulator's typed errors: a scenario that cannot be used, a built-in
//! name that does not exist, a recording that cannot be served, a port that
//! cannot be bound, a TLS identity that cannot be used.

use std::io;
use std::net::SocketAddr;

/// Why a scenario could not be loaded or the simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A scenario file is not valid; the message names the file, the line
    /// and column (when known), the field and what is allowed.
    #[error(
        "scenario {origin}{}{}: {detail}",
        line.map(|n| format!(", line {n}")).unwrap_or_default(),
        column.map(|n| format!(", column {n}")).unwrap_or_default()
    )]
    Scenario {
        /// Where the text came from (a path or `built-in NAME`).
        origin: String,
        /// The 1-based line the problem is on, when it can be located.
        line: Option<usize>,
        /// The 1-based column (in characters) it starts at, when known.
        column: Option<usize>,
        /// What is wrong and what is allowed instead.
        detail: String,
    },
    /// [`crate::sim::builtin`] was asked for a name the library does not have.
    #[error("no built-in scenario named {name:?}; the built-ins are: {known}")]
    UnknownScenario {
        /// The name asked for.
        name: String,
        /// Every built-in name, comma-separated.
        known: String,
    },
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The loopback address asked for.
        addr: SocketAddr,
        /// The operating system's reason.
        source: io::Error,
    },
    /// A replay speed outside [`crate::sim::SPEEDS`].
    #[error("speed {0} is not allowed; use 0.1 to 1000 (times the recorded pace)")]
    Speed(f64),
    /// A recorded attempt must be re-rendered, but its target's dialect is unknown.
    #[error(
        "run {run}, stream {stream}, attempt {attempt}: no dialect is recorded for {target}, so its body cannot be re-rendered"
    )]
    NoDialect {
        /// The run.
        run: crate::store::RunId,
        /// The stream.
        stream: crate::core::event::StreamId,
        /// The attempt.
        attempt: u32,
        /// Its target, `provider/model`.
        target: String,
    },
    /// The TLS certificate or key cannot be used.
    #[error("the simulator's TLS identity cannot be used: {0}")]
    Tls(String),
}
