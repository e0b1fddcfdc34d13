//! Where a lane's text labels go (backoff, failover, burst, outcome,
//! timer thresholds) so they never overprint: each label takes its
//! preferred row if the room is free there, else another row, else it
//! folds into the label before it, which then says how many it holds
//! (`+2`); hovering the lane lists them all. At full-run zoom a lane with
//! a dozen retries shows a few labels and counts, not a smear of text.

/// A label to place: where it starts and how wide it is, in pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wanted {
    /// Its left edge.
    pub x: f32,
    /// Its width.
    pub width: f32,
    /// The row it belongs in (0 is the top).
    pub row: usize,
}

/// Where a label went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// Drawn on this row.
    Row(usize),
    /// Not drawn: counted in the label at this index.
    Folded(usize),
}

/// Room kept free after each label, in pixels.
pub const GAP: f32 = 6.0;

/// Room a label keeps for the `+N` its folded neighbours add, in pixels.
pub const COUNT_WIDTH: f32 = 24.0;

/// Places `wanted` (any order) on `rows` rows; the result is in the same
/// order as `wanted`.
pub fn place(wanted: &[Wanted], rows: usize) -> Vec<Placed> {
    let rows = rows.max(1);
    let mut order: Vec<usize> = (0..wanted.len()).collect();
    order.sort_by(|&a, &b| wanted[a].x.total_cmp(&wanted[b].x));
    let mut free_from = vec![f32::NEG_INFINITY; rows];
    let mut last_on = vec![None; rows];
    let mut placed = vec![Placed::Row(0); wanted.len()];
    let mut last_drawn = None;
    for i in order {
        let label = wanted[i];
        let preferred = label.row.min(rows - 1);
        let row =
            std::iter::once(preferred).chain((0..rows).filter(|&r| r != preferred)).find(|&r| label.x >= free_from[r]);
        placed[i] = match row {
            Some(row) => {
                free_from[row] = label.x + label.width + COUNT_WIDTH + GAP;
                last_on[row] = Some(i);
                last_drawn = Some(i);
                Placed::Row(row)
            }
            // Every row is taken here: the nearest label on its own row
            // holds it, else the last one drawn.
            None => match last_on[preferred].or(last_drawn) {
                Some(into) => Placed::Folded(into),
                None => Placed::Row(preferred),
            },
        };
    }
    placed
}

/// How many labels each label holds besides itself, by index.
pub fn folded_counts(placed: &[Placed]) -> Vec<usize> {
    let mut counts = vec![0; placed.len()];
    for p in placed {
        if let Placed::Folded(into) = p {
            counts[*into] += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(x: f32, row: usize) -> Wanted {
        Wanted { x, width: 50.0, row }
    }

    #[test]
    fn labels_apart_keep_their_rows() {
        let wanted = [at(0.0, 0), at(200.0, 0), at(10.0, 1)];
        assert_eq!(place(&wanted, 2), [Placed::Row(0), Placed::Row(0), Placed::Row(1)]);
    }

    #[test]
    fn a_label_that_would_overprint_moves_to_a_free_row_then_folds() {
        let wanted = [at(0.0, 0), at(20.0, 0), at(40.0, 0), at(60.0, 0)];
        let placed = place(&wanted, 2);
        assert_eq!(placed, [Placed::Row(0), Placed::Row(1), Placed::Folded(0), Placed::Folded(0)]);
        assert_eq!(folded_counts(&placed), [2, 0, 0, 0]);
    }

    #[test]
    fn no_two_drawn_labels_overlap_whatever_the_input() {
        // A dense comb of 200 labels on 3 rows, given out of order.
        let wanted: Vec<Wanted> = (0..200).rev().map(|i| at(i as f32 * 7.0, i % 3)).collect();
        let placed = place(&wanted, 3);
        for row in 0..3 {
            let mut drawn: Vec<&Wanted> =
                wanted.iter().zip(&placed).filter(|(_, p)| **p == Placed::Row(row)).map(|(w, _)| w).collect();
            drawn.sort_by(|a, b| a.x.total_cmp(&b.x));
            for pair in drawn.windows(2) {
                assert!(pair[1].x >= pair[0].x + pair[0].width + COUNT_WIDTH, "{pair:?}");
            }
        }
        let counts = folded_counts(&placed);
        let drawn = placed.iter().filter(|p| matches!(p, Placed::Row(_))).count();
        assert_eq!(drawn + counts.iter().sum::<usize>(), 200, "every label drawn or counted");
        assert!(drawn < 60, "{drawn} drawn");
    }
}
