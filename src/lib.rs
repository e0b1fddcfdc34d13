//! stallscope: a fault-tolerance core for streaming LLM calls, with the
//! tools to watch, record and replay what it decides.
//!
//! Data flows one way: [`tunables`] → [`core`] → providers. The core emits
//! typed [`core::event::Event`]s to a sink; front ends (the CLI in
//! [`cli`]) are thin layers over library calls.
//!
//! Start with [`core::executor::Executor`] (one call's retry loop) and
//! [`core::governor`] (one attempt's timers).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
pub mod config;
pub mod core;
pub mod export;
pub mod providers;
pub mod recorder;
pub mod report;
pub mod run;
pub mod sim;
pub mod store;
pub mod tunables;
