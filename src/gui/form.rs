//! Rows of labelled fields that wrap in a narrow window, each label kept on
//! the same line as its field.
//!
//! In a wrapping row egui places a widget before it knows whether it fits,
//! so a label and its field grouped in a nested row overflow the window
//! instead of wrapping (and widen every view below). Here the pair's width
//! is measured first, and the row ends before a pair that would not fit.

use egui::{Response, TextStyle, TextWrapMode, Ui, WidgetText};

/// `label`, then its field (drawn by `field`, about `field_width` wide),
/// on this row of a wrapping layout if both fit, else on the next one.
/// Returns the field, labelled for screen readers.
pub fn labelled(ui: &mut Ui, label: &str, field_width: f32, field: impl FnOnce(&mut Ui) -> Response) -> Response {
    let text = WidgetText::from(label).into_galley(ui, Some(TextWrapMode::Extend), f32::INFINITY, TextStyle::Body);
    let needed = text.size().x + ui.spacing().item_spacing.x + field_width;
    if ui.available_width() < needed {
        ui.end_row();
    }
    let label = ui.label(label);
    field(ui).labelled_by(label.id)
}
