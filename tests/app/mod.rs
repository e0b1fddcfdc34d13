//! What the app's headless tests share: a scratch directory for the app's
//! config and database, and waiting for the UI to show something while
//! real time passes.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use egui_kittest::Harness;
use stallscope::gui::{App, Launch};

/// A scratch directory removed when the test ends.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("stallscope-app-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn db(&self) -> PathBuf {
        self.0.join("runs.db")
    }

    pub fn config(&self) -> PathBuf {
        self.0.join("config.toml")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The app over `dir`'s config (written empty when absent) and database,
/// with no environment (a developer's own settings must not leak in).
pub fn open(dir: &Scratch) -> Harness<'static, App> {
    let (config, db) = (dir.config(), dir.db());
    if !config.exists() {
        std::fs::write(&config, "").unwrap();
    }
    Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_eframe(move |cc| App::new(cc, Launch { config: Some(config), overrides: vec![] }, Some(db), vec![]))
}

/// Steps frames (real time passes between them) until the UI shows what
/// `shown` looks for, for at most 30 s.
pub fn wait_for(h: &mut Harness<'_, App>, what: &str, shown: impl Fn(&Harness<'_, App>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !shown(h) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        h.step();
        std::thread::sleep(Duration::from_millis(10));
    }
    h.step();
}

/// The text the last frame put on the clipboard, if any.
pub fn copied<S>(h: &Harness<'_, S>) -> Option<String> {
    h.output().platform_output.commands.iter().find_map(|c| match c {
        egui::OutputCommand::CopyText(text) => Some(text.clone()),
        _ => None,
    })
}
