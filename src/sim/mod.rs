//! The fault-injecting simulator: a real HTTP/1.1 server on loopback that
//! speaks OpenAI chat completions, OpenAI Responses and Anthropic Messages
//! streaming, and misbehaves on purpose as a [`Scenario`] says: slow
//! headers, stalls with and without keep-alives, byte drips, buffering
//! proxies, resets, rate limits with each `Retry-After` form, in-stream
//! errors and malformed SSE.
//!
//! Attempt N of a stream (requests sharing an `x-stallscope-stream` header)
//! plays the scenario's script N, the last one repeating, so a retry or
//! failover can be watched recovering. Or it serves a recorded run as the
//! provider it recorded, with the recorded timing.
//!
//! Start one with [`SimServer::start`] on a [`Scenario`] (a built-in from
//! [`builtin`], or a file read with [`Scenario::from_toml`]), point a
//! provider's base URL at [`SimServer::base_url`] (OpenAI dialects under
//! `/v1`), and read [`SimServer::attempts`] to see how often each stream
//! was tried. The scenario file format is documented in [`scenario`].
//!
//! [`SimServer::start_recording`] serves a recorded run instead: request N
//! naming stream S gets S's recorded attempt N, with its recorded timing.

mod error;
mod library;
mod plan;
mod player;
mod provider_error;
mod recorded;
mod reply;
pub mod scenario;
mod server;
mod wire;

#[cfg(test)]
mod tests;

pub use error::SimError;
pub use library::{builtin, builtin_names};
pub use recorded::SPEEDS;
pub use scenario::{Attempt, LargeRequests, RunHints, Scenario, Step, StreamError, Wait};
pub use server::{STREAM_HEADER, SimServer, TlsIdentity};
