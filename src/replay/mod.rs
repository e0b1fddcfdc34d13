//! Replay and what-if: a recorded run loaded from the store
//! ([`recording`]), played back through the real core in virtual time by a
//! recorded [`upstream`], under the recorded or changed tunables
//! ([`whatif`]), each stream's course read the same way from the recording
//! and from its replay ([`StreamCourse`](crate::diagnosis::StreamCourse));
//! the tightest timers a
//! recording supports, each checked by what-if ([`tune`]), and attached to
//! the verdicts they would have changed ([`advice`]).

pub mod advice;
pub mod attempt_body;
pub mod recording;
pub mod tune;
pub mod tune_text;
pub mod upstream;
pub mod whatif;
