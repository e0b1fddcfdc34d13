//! Placeholder replaced by the stream benchmarks.
fn main() {}
