//! Diagnosis: a verdict for every stream, in words, with the evidence it
//! rests on, the tunable that governs it and what to try; and a run-level
//! summary that groups streams by verdict.
//!
//! The verdict shape is in [`verdict`]: a [`VerdictKind`] (a stable
//! snake_case name), a [`Severity`], a one-sentence summary, [`Evidence`]
//! with times, sizes and headers, and the structured [`Basis`] it rests on.

pub mod verdict;

pub use verdict::{Basis, DeniedBy, Diagnosis, Evidence, RunDiagnosis, Severity, Topic, VerdictGroup, VerdictKind};
