//! Copy reaches the system clipboard: the real app, on a virtual X display
//! (see tests/display), its clipboard read by another program (xclip).
//! egui_kittest cannot show this: it stops at the copy command, before
//! eframe hands it to the platform.
//!
//! Skipped with a reason when a program is missing, unless
//! `STALLSCOPE_REQUIRE_EXTERNAL=1` (CI installs them).

mod app;
mod display;
mod programs;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use app::Scratch;
use display::{display, headless, open_app, programs, tabs_to, window, xdotool};

/// The keys that press each of `buttons` in turn, from a fresh app, and
/// the text the last one copies.
fn keys_and_copy(dir: &Scratch, buttons: &[&str]) -> (Vec<String>, String) {
    let mut h = headless(dir);
    h.run();
    let (mut keys, mut copied) = (Vec::new(), None);
    for button in buttons {
        keys.extend(std::iter::repeat_n("Tab".to_owned(), tabs_to(&mut h, button)));
        keys.push("space".to_owned());
        // Down and up in frames of their own, so this frame's output is
        // the press's.
        h.key_down(egui::Key::Space);
        h.step();
        copied = app::copied(&h);
        h.key_up(egui::Key::Space);
        h.run();
    }
    (keys, copied.expect("the last button copies"))
}

/// The clipboard's text as another program reads it, once it is `want`
/// or after 20 s.
fn clipboard(display: &str, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new("xclip")
            .args(["-o", "-selection", "clipboard"])
            .env("DISPLAY", display)
            .stderr(Stdio::null())
            .output()
            .expect("xclip runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text == want || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Copy .env in the Tunables view puts the file's text where a shell's
/// paste finds it.
#[test]
fn copy_env_reaches_the_system_clipboard() {
    if !programs(&["xclip"]) {
        return;
    }
    let dir = Scratch::new("clipboard");
    std::fs::write(dir.config(), "").unwrap();
    let (keys, copied) = keys_and_copy(&dir, &["Tunables", "Copy .env"]);
    assert!(copied.contains("STALLSCOPE_SSE_IDLE_TIMEOUT_S="), "{copied}");

    let (_xvfb, display) = display();
    let _app = open_app(dir.path(), &display);
    let id = window(&display);
    xdotool(&display, &["windowfocus", "--sync", &id]);
    // A key a frame: a debug build under a software renderer may take a
    // good part of this delay to draw one.
    let mut press = vec!["key", "--delay", "250"];
    press.extend(keys.iter().map(String::as_str));
    xdotool(&display, &press);
    let pasted = clipboard(&display, &copied);
    assert!(pasted == copied, "the clipboard holds {pasted:?}, not the {} bytes Copy .env copied", copied.len());
}
