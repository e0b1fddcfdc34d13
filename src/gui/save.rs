//! Writing a file from the app: the path is shown in full, and a file that
//! already exists is replaced only after the user says so.

use std::path::{Path, PathBuf};

use egui::{RichText, Ui};

/// `text` as a full path (relative paths are taken from the working
/// directory, which the user may not know).
pub fn full_path(text: &str) -> PathBuf {
    let text = text.trim();
    std::path::absolute(text).unwrap_or_else(|_| PathBuf::from(text))
}

/// A write that waits for the user's word before replacing a file, with
/// what it is to write (`T`) kept until then.
#[derive(Debug)]
pub struct Overwrite<T> {
    asking: Option<(PathBuf, T)>,
}

impl<T> Default for Overwrite<T> {
    fn default() -> Self {
        Overwrite { asking: None }
    }
}

impl<T> Overwrite<T> {
    /// `(path, what)` when `path` may be written now; otherwise asks first
    /// and keeps `what` until [`Overwrite::ui`] is answered.
    pub fn check(&mut self, path: PathBuf, what: T) -> Option<(PathBuf, T)> {
        if path.exists() {
            self.asking = Some((path, what));
            None
        } else {
            self.asking = None;
            Some((path, what))
        }
    }

    /// Whether a question is open.
    pub fn is_asking(&self) -> bool {
        self.asking.is_some()
    }

    /// The question, while one is open, on one line; returns the write
    /// once the user confirms it.
    pub fn ui(&mut self, ui: &mut Ui) -> Option<(PathBuf, T)> {
        let path = self.asking.as_ref().map(|(path, _)| path.clone())?;
        let mut answer = None;
        ui.horizontal_wrapped(|ui| {
            ui.label(
                RichText::new(format!("{} exists: replace it?", path.display())).color(ui.visuals().warn_fg_color),
            );
            if ui.button(format!("Replace {}", file_name(&path))).clicked() {
                answer = Some(true);
            }
            if ui.button("Keep the file").clicked() {
                answer = Some(false);
            }
        });
        match answer {
            Some(true) => self.asking.take(),
            Some(false) => {
                self.asking = None;
                None
            }
            None => None,
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_file_is_asked_about_and_a_new_one_is_not() {
        let dir = std::env::temp_dir().join(format!("stallscope-save-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (old, new) = (dir.join("old.env"), dir.join("new.env"));
        std::fs::write(&old, "x").unwrap();
        let mut overwrite = Overwrite::default();
        assert_eq!(overwrite.check(new.clone(), 1), Some((new, 1)));
        assert!(!overwrite.is_asking());
        assert_eq!(overwrite.check(old, 2), None);
        assert!(overwrite.is_asking());
        assert!(full_path("a.env").is_absolute());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
