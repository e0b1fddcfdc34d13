//! Reducing a long series to what a plot of a given pixel width can show.
//! A lane's series are cumulative bytes (never falling) and timers'
//! sawtooths (a climb, then a reset to zero); either is drawn faithfully
//! by its upper envelope, the highest point of each pixel column: for
//! bytes that is the column's last point, for a timer reset many times a
//! column it is how near it came to firing (a solid band of resets would
//! say nothing more). Every peak survives, a frame walks only the visible
//! part of a series once, and a plot draws one point a column.

use egui_plot::PlotPoint;

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
    let mut i = 0;
    while i < visible.len() {
        // Where this point's column ends: the walk compares, it does not
        // divide, point by point.
        let next = x_min + (((visible[i].x - x_min) / width).floor() + 1.0) * width;
        let mut high = i;
        i += 1;
        while i < visible.len() && visible[i].x < next {
            if visible[i].y > visible[high].y {
                high = i;
            }
            i += 1;
        }
        out.push(visible[high]);
    }
}

/// The times of `xs` (sorted) to mark on a plot of `columns` pixel
/// columns over `x_min..=x_max`, at most one a column, appended to `out`.
pub fn ticks(xs: &[f64], x_min: f64, x_max: f64, columns: usize, out: &mut Vec<f64>) {
    if xs.is_empty() || x_max.partial_cmp(&x_min) != Some(std::cmp::Ordering::Greater) || columns == 0 {
        return;
    }
    let start = xs.partition_point(|&x| x < x_min);
    let end = xs.partition_point(|&x| x <= x_max);
    let width = (x_max - x_min) / columns as f64;
    let mut next = f64::NEG_INFINITY;
    for &x in &xs[start..end] {
        // Past the column of the last mark: compare, not divide, per tick.
        if x >= next {
            out.push(x);
            next = x_min + (((x - x_min) / width).floor() + 1.0) * width;
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
    fn ticks_keep_one_mark_per_column() {
        let xs: Vec<f64> = (0..1000).map(|i| f64::from(i) / 1000.0).collect();
        let mut out = Vec::new();
        ticks(&xs, 0.0, 1.0, 10, &mut out);
        assert_eq!(out.len(), 10);
        assert!(out.windows(2).all(|w| w[1] - w[0] >= 0.099), "{out:?}");
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
        /// Whatever the data, the reduced series stays sorted, small, and
        /// keeps the highest point of the visible part.
        #[test]
        fn reduction_keeps_order_and_peaks(
            ys in prop::collection::vec(-1e6f64..1e6, 0..3000),
            columns in 1usize..200,
            from in 0.0f64..1.0,
            span in 0.01f64..1.0,
        ) {
            let series = points(&ys);
            let n = ys.len() as f64;
            let (x_min, x_max) = (from * n, (from + span) * n);
            let mut out = Vec::new();
            envelope(&series, x_min, x_max, columns, &mut out);
            prop_assert!(out.len() <= columns + 3);
            prop_assert!(out.windows(2).all(|w| w[0].x < w[1].x));
            let inside = series.iter().filter(|p| p.x >= x_min && p.x <= x_max).map(|p| p.y).reduce(f64::max);
            if let Some(max) = inside {
                prop_assert!(out.iter().any(|p| p.y == max));
            }
        }
    }
}
