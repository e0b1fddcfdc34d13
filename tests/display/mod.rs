//! The real app on a virtual X display, for tests and benchmarks that
//! need what egui_kittest cannot give (the platform's clipboard, the
//! process's memory): Xvfb, keys from xdotool, the window looked at with
//! xwd. Keys are found in a headless copy of the same app: Tab moves focus
//! through the same widgets in the same order, so the number of presses
//! that reaches a widget there reaches it on the display.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use stallscope::gui::{App, Launch};

use super::app::Scratch;
use super::programs::{Running, external, on_path};

/// The binary's window size.
pub const WINDOW: egui::Vec2 = egui::vec2(1440.0, 900.0);

/// Whether every program this needs is installed: each one missing is
/// said (and fails where CI requires it, see tests/programs).
pub fn programs(extra: &[&str]) -> bool {
    let mut all = true;
    for program in ["Xvfb", "xdotool", "xwd"].iter().chain(extra) {
        all &= external(program, on_path(program)).is_some();
    }
    all
}

/// A virtual display on a free number, which Xvfb picks itself.
pub fn display() -> (Running, String) {
    let mut xvfb = Command::new("Xvfb")
        .args(["-displayfd", "1", "-nolisten", "tcp", "-screen", "0", "1600x1000x24"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("Xvfb starts");
    let mut number = String::new();
    BufReader::new(xvfb.stdout.take().unwrap()).read_line(&mut number).unwrap();
    (Running(xvfb), format!(":{}", number.trim()))
}

/// The app as the binary opens it, over the scratch config and database.
pub fn headless(dir: &Scratch) -> Harness<'static, App> {
    let (config, db) = (dir.config(), dir.db());
    Harness::builder()
        .with_size(WINDOW)
        .build_eframe(move |cc| App::new(cc, Launch { config: Some(config), overrides: vec![] }, Some(db), vec![]))
}

/// Presses Tab until the widget labelled `label` has the focus, and says
/// how many presses that took.
pub fn tabs_to(h: &mut Harness<'_, App>, label: &str) -> usize {
    for presses in 1..=200 {
        h.key_press(egui::Key::Tab);
        h.run();
        if h.get_by_label(label).is_focused() {
            return presses;
        }
    }
    panic!("Tab never reaches {label}");
}

pub fn xdotool(display: &str, args: &[&str]) -> String {
    let out = Command::new("xdotool").args(args).env("DISPLAY", display).output().expect("xdotool runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The app's window, once it has drawn its first frame (at most 60 s: a
/// debug build's first frame under a software renderer is slow). Keys sent
/// before then reach the app in one batch, and a batch of Tabs moves the
/// focus once.
pub fn window(display: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = xdotool(display, &["search", "--onlyvisible", "--name", "^stallscope$"]);
        if let Some(id) = found.lines().next()
            && drawn(display, id)
        {
            return id.to_owned();
        }
        assert!(Instant::now() < deadline, "the app's window never drew");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether the window shows anything but the black it is mapped with: its
/// dump is mostly pixels, and a drawn panel is never black.
pub fn drawn(display: &str, id: &str) -> bool {
    let dump = Command::new("xwd").args(["-silent", "-id", id]).env("DISPLAY", display).output();
    dump.is_ok_and(|dump| dump.stdout.len() > 1024 && dump.stdout[dump.stdout.len() / 2..].iter().any(|&b| b != 0))
}

pub fn open_app(dir: &Path, display: &str) -> Running {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    Running(
        Command::new(env!("CARGO_BIN_EXE_stallscope"))
            .arg("--config")
            .arg(dir.join("config.toml"))
            .arg("--db")
            .arg(dir.join("runs.db"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("XDG_DATA_HOME", home.join("data"))
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("DISPLAY", display)
            .env("WINIT_X11_SCALE_FACTOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the app starts"),
    )
}
