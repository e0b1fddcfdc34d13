//! The fault-tolerance core: classification, retry executor, stream
//! governor, failover, credentials, transport and worst-case analysis.
//!
//! Nothing here depends on the GUI or the store: the core emits typed
//! events to the sink it is given.

pub mod analysis;
pub mod backoff;
pub mod category;
pub mod classify;
pub mod credentials;
pub mod escalation;
pub mod event;
pub mod executor;
pub mod failover;
pub mod failure;
pub mod fleet;
pub mod governor;
pub mod policy;
pub mod ratelimit;
pub mod redact;
pub mod retry_after;
pub mod transport;
pub mod upstream;
