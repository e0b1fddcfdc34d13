//! stallscope: a fault-tolerance core for streaming LLM calls, with the
//! tools to watch, record and replay what it decides.
//!
//! Data flows one way: [`tunables`] → [`core`] → providers. The core emits
//! typed [`core::event::Event`]s to a sink; front ends (the CLI in
//! [`cli`]) are thin layers over library calls.
//!
//! Start with [`core::executor::Executor`] (one call's retry loop) and
//! [`core::governor`] (one attempt's timers).
//!
//! Tunables are layered and know where each value came from:
//!
//! ```
//! use stallscope::core::policy::CorePolicy;
//! use stallscope::tunables::{Source, Tunables};
//!
//! let mut tunables = Tunables::defaults();
//! tunables.apply_override("SSE_IDLE_TIMEOUT_S=300").unwrap();
//! let idle = tunables.get("STALLSCOPE_SSE_IDLE_TIMEOUT_S");
//! assert_eq!((idle.value.to_string(), &idle.source), ("300".to_owned(), &Source::Override));
//! let policy = CorePolicy::from_tunables(&tunables).unwrap();
//! assert_eq!(policy.timers.idle, Some(std::time::Duration::from_secs(300)));
//! ```

// No unsafe code, but for one audited call without pointers
// (gui::memory::give_back, glibc's malloc_trim), allowed where it is.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
pub mod config;
pub mod core;
pub mod diagnosis;
pub mod export;
pub mod gui;
pub mod metrics;
pub mod observe;
pub mod probe;
pub mod providers;
pub mod recorder;
pub mod replay;
pub mod report;
pub mod route_paths;
pub mod run;
pub mod session;
pub mod sim;
pub mod store;
pub mod tunables;
pub mod watch;
