//! Small statistics the benchmarks report with.

/// The median of `values` (the upper one of an even count); NaN when there
/// are none.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    if values.is_empty() { f64::NAN } else { values[values.len() / 2] }
}
