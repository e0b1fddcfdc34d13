//! The transport bar of a replay (play/pause, steps, the scrubber, the
//! speed, the cursor's time) and its keyboard shortcuts: space plays or
//! pauses, ← and → step, Home and End jump to the start and the end. Both
//! only produce [`Command`]s; the playback state machine carries them out.

use egui::{Key, Modifiers, Ui};

use super::playback::{Command, Playback, SPEEDS};

/// The shortcuts pressed this frame, taken out of the input so a focused
/// button does not also act on the same space bar. None while text is
/// being edited: a space typed into a field is text.
pub fn shortcuts(ui: &mut Ui) -> Vec<Command> {
    if ui.ctx().text_edit_focused() {
        return Vec::new();
    }
    let keys = [
        (Key::Space, Command::TogglePlay),
        (Key::ArrowRight, Command::StepForward),
        (Key::ArrowLeft, Command::StepBack),
        (Key::Home, Command::Start),
        (Key::End, Command::End),
    ];
    ui.input_mut(|input| {
        keys.into_iter().filter(|(key, _)| input.consume_key(Modifiers::NONE, *key)).map(|(_, c)| c).collect()
    })
}

/// The bar; returns what was asked for. `events` is (shown, total).
pub fn bar(ui: &mut Ui, playback: &Playback, events: (u64, usize)) -> Vec<Command> {
    let mut commands = Vec::new();
    // Wrapped, so a narrow window puts the scrubber and speed on a line of
    // their own instead of past its edge.
    ui.horizontal_wrapped(|ui| {
        let play = if playback.is_playing() { "Pause" } else { "Play" };
        let clicked = |ui: &mut Ui, text: &str, hint: &str| ui.button(text).on_hover_text(hint).clicked();
        // As wide as the wider of its two words, so the buttons after it
        // do not move under the pointer when it turns from one to the other.
        let widest = ["Play", "Pause"]
            .map(|word| {
                egui::WidgetText::from(word).into_galley(ui, None, f32::INFINITY, egui::TextStyle::Button).size().x
            })
            .into_iter()
            .fold(0.0, f32::max);
        let width = widest + 2.0 * ui.spacing().button_padding.x;
        let toggle = ui.add(egui::Button::new(play).min_size(egui::vec2(width, 0.0)));
        if toggle.on_hover_text("Space").clicked() {
            commands.push(Command::TogglePlay);
        }
        if clicked(ui, "Step back", "← : back to the previous moment with events") {
            commands.push(Command::StepBack);
        }
        if clicked(ui, "Step forward", "→ : on to the next moment with events") {
            commands.push(Command::StepForward);
        }
        if clicked(ui, "Start", "Home") {
            commands.push(Command::Start);
        }
        if clicked(ui, "End", "End") {
            commands.push(Command::End);
        }
        let mut at = playback.position_s();
        let duration = playback.duration_s();
        let label = ui.label("Cursor");
        let scrubber = egui::Slider::new(&mut at, 0.0..=duration.max(f64::MIN_POSITIVE))
            .show_value(false)
            .clamping(egui::SliderClamping::Always);
        ui.spacing_mut().slider_width = (ui.available_width() - 420.0).max(120.0);
        if ui.add(scrubber).labelled_by(label.id).changed() {
            commands.push(Command::Seek(at));
        }
        ui.label(format!("{:.3} s of {:.3} s · {} of {} events", at, duration, events.0, events.1));
        let speeds = egui::ComboBox::from_label("Speed").selected_text(speed_name(playback.speed()));
        // Tall enough for every speed: a scrolled list hides the fastest.
        speeds.height(400.0).show_ui(ui, |ui| {
            for speed in SPEEDS {
                if ui.selectable_label(playback.speed() == speed, speed_name(speed)).clicked() {
                    commands.push(Command::Speed(speed));
                }
            }
        });
    });
    commands
}

/// A speed as offered: `0.25×`, `1000×`.
fn speed_name(speed: f64) -> String {
    format!("{speed}×")
}
