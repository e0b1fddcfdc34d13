//! Reducing a long series to what a plot of a given pixel width can show:
//! per pixel column, the first, lowest, highest and last point. The drawn
//! line then looks the same as the full series (every spike survives)
//! while a frame walks only the visible part once and draws at most four
//! points per column. A timer's sawtooth, reset many times a column, is
//! reduced to its [envelope](envelope) instead: how near each column came
//! to firing, one point a column, not a solid band of resets.

use egui_plot::PlotPoint;

/// The points of `series` (sorted by x) that a plot of `columns` pixel
/// columns over `x_min..=x_max` needs, appended to `out`. One point either
/// side of the range is kept so lines run to the plot's edges.
pub fn min_max(series: &[PlotPoint], x_min: f64, x_max: f64, columns: usize, out: &mut Vec<PlotPoint>) {
    if series.is_empty() || x_max.partial_cmp(&x_min) != Some(std::cmp::Ordering::Greater) || columns == 0 {
        return;
    }
    let start = series.partition_point(|p| p.x < x_min).saturating_sub(1);
    let end = (series.partition_point(|p| p.x <= x_max) + 1).min(series.len());
    let visible = &series[start..end];
    if visible.len() <= columns * 4 {
        out.extend_from_slice(visible);
        return;
    }
    let width = (x_max - x_min) / columns as f64;
    let column_of = |x: f64| ((x - x_min) / width).floor().clamp(-1.0, columns as f64) as i64;
    let mut i = 0;
    while i < visible.len() {
        let column = column_of(visible[i].x);
        let first = i;
        let (mut low, mut high) = (i, i);
        i += 1;
        while i < visible.len() && column_of(visible[i].x) == column {
            if visible[i].y < visible[low].y {
                low = i;
            }
            if visible[i].y > visible[high].y {
                high = i;
            }
            i += 1;
        }
        let last = i - 1;
        let (a, b) = if low <= high { (low, high) } else { (high, low) };
        for index in [first, a, b, last] {
            if out.last() != Some(&visible[index]) {
                out.push(visible[index]);
            }
        }
    }
}

/// The points of `series` (sorted by x) a plot of `columns` pixel columns
/// over `x_min..=x_max` needs to show its upper envelope, appended to
/// `out`: the series itself while it has no more points than columns, else
/// the highest point of each column. One point either side of the range is
/// kept so lines run to the plot's edges.
pub fn envelope(series: &[PlotPoint], x_min: f64, x_max: f64, columns: usize, out: &mut Vec<PlotPoint>) {
    if series.is_empty() || x_max.partial_cmp(&x_min) != Some(std::cmp::Ordering::Greater) || columns == 0 {
        return;
    }
    let start = series.partition_point(|p| p.x < x_min).saturating_sub(1);
    let end = (series.partition_point(|p| p.x <= x_max) + 1).min(series.len());
    let visible = &series[start..end];
    if visible.len() <= columns {
        out.extend_from_slice(visible);
        return;
    }
    let width = (x_max - x_min) / columns as f64;
    let column_of = |x: f64| ((x - x_min) / width).floor().clamp(-1.0, columns as f64) as i64;
    let mut i = 0;
    while i < visible.len() {
        let column = column_of(visible[i].x);
        let mut high = i;
        i += 1;
        while i < visible.len() && column_of(visible[i].x) == column {
            if visible[i].y > visible[high].y {
                high = i;
            }
            i += 1;
        }
        out.push(visible[high]);
    }
}

/// Marks at the x positions of `xs` (sorted), at most one per pixel column
/// over `x_min..=x_max`, as points at height `y`, appended to `out`.
pub fn ticks(xs: &[f64], y: f64, x_min: f64, x_max: f64, columns: usize, out: &mut Vec<PlotPoint>) {
    if xs.is_empty() || x_max.partial_cmp(&x_min) != Some(std::cmp::Ordering::Greater) || columns == 0 {
        return;
    }
    let start = xs.partition_point(|&x| x < x_min);
    let end = xs.partition_point(|&x| x <= x_max);
    let width = (x_max - x_min) / columns as f64;
    let mut last_column = i64::MIN;
    for &x in &xs[start..end] {
        let column = ((x - x_min) / width) as i64;
        if column != last_column {
            out.push(PlotPoint::new(x, y));
            last_column = column;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn points(ys: &[f64]) -> Vec<PlotPoint> {
        ys.iter().enumerate().map(|(i, &y)| PlotPoint::new(i as f64, y)).collect()
    }

    #[test]
    fn short_series_pass_through_whole() {
        let series = points(&[1.0, 5.0, 2.0]);
        let mut out = Vec::new();
        min_max(&series, 0.0, 2.0, 100, &mut out);
        assert_eq!(out, series);
    }

    #[test]
    fn a_single_spike_survives_a_thousandfold_reduction() {
        let mut ys = vec![0.0; 100_000];
        ys[54_321] = 9.0;
        let mut out = Vec::new();
        min_max(&points(&ys), 0.0, 100_000.0, 100, &mut out);
        assert!(out.len() <= 400, "{} points", out.len());
        assert!(out.iter().any(|p| p.y == 9.0 && p.x == 54_321.0));
    }

    #[test]
    fn ticks_keep_one_mark_per_column() {
        let xs: Vec<f64> = (0..1000).map(|i| f64::from(i) / 1000.0).collect();
        let mut out = Vec::new();
        ticks(&xs, 0.5, 0.0, 1.0, 10, &mut out);
        assert_eq!(out.len(), 10);
        assert!(out.iter().all(|p| p.y == 0.5));
    }

    #[test]
    fn a_dense_sawtooth_becomes_its_peaks_and_a_sparse_one_stays_whole() {
        // 10,000 resets over 100 columns, climbing to 0.3 except one to 0.9.
        let mut series = Vec::new();
        for i in 0..10_000 {
            let x = f64::from(i) / 100.0;
            series.push(PlotPoint::new(x, 0.0));
            series.push(PlotPoint::new(x + 0.009, if i == 5_432 { 0.9 } else { 0.3 }));
        }
        let mut out = Vec::new();
        envelope(&series, 0.0, 100.0, 100, &mut out);
        assert!(out.len() <= 102, "{} points", out.len());
        assert!(out.iter().all(|p| p.y >= 0.3), "only peaks");
        assert!(out.iter().any(|p| p.y == 0.9));
        let sparse = points(&[0.1, 0.5, 0.0, 0.4]);
        out.clear();
        envelope(&sparse, 0.0, 3.0, 100, &mut out);
        assert_eq!(out, sparse);
    }

    proptest! {
        /// Whatever the data, the reduced series stays sorted, within the
        /// bounds, small, and keeps each visible column's extremes.
        #[test]
        fn reduction_keeps_order_and_extremes(
            ys in prop::collection::vec(-1e6f64..1e6, 0..3000),
            columns in 1usize..200,
            from in 0.0f64..1.0,
            span in 0.01f64..1.0,
        ) {
            let series = points(&ys);
            let n = ys.len() as f64;
            let (x_min, x_max) = (from * n, (from + span) * n);
            let mut out = Vec::new();
            min_max(&series, x_min, x_max, columns, &mut out);
            prop_assert!(out.len() <= columns * 4 + 8);
            prop_assert!(out.windows(2).all(|w| w[0].x <= w[1].x));
            let inside: Vec<&PlotPoint> = series.iter().filter(|p| p.x >= x_min && p.x <= x_max).collect();
            if let (Some(max), Some(min)) = (
                inside.iter().map(|p| p.y).reduce(f64::max),
                inside.iter().map(|p| p.y).reduce(f64::min),
            ) {
                prop_assert!(out.iter().any(|p| p.y == max));
                prop_assert!(out.iter().any(|p| p.y == min));
            }
        }
    }
}
