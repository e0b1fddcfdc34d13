//! Watches the config file from a thread of its own, so a fix saved in an
//! editor is read while the window is idle: the thread looks at the file's
//! modification time once a second (a `stat`, no frame drawn) and wakes
//! the UI only when it changed. The app reads the file again on the frame
//! that wakes it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

/// How often the file is looked at.
pub const CHECK: Duration = Duration::from_secs(1);

/// A watch on one file; it ends when dropped.
#[derive(Debug)]
pub struct ConfigWatch {
    changed: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl ConfigWatch {
    /// Watches `path` (`None`: nothing to watch), waking `ctx` when its
    /// modification time differs from the one it had when the watch began.
    pub fn new(path: Option<PathBuf>, ctx: egui::Context) -> Self {
        let (changed, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        if let Some(path) = path {
            let (flag, stopped) = (Arc::clone(&changed), Arc::clone(&stop));
            let modified = move || std::fs::metadata(&path).and_then(|m| m.modified()).ok();
            let mut seen: Option<SystemTime> = modified();
            // Without a thread the file is still read at launch; only the
            // live reload is lost, so a failure to start one is not fatal.
            let _ = std::thread::Builder::new().name("stallscope-config".into()).spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(CHECK);
                    let now = modified();
                    if now != seen {
                        seen = now;
                        flag.store(true, Ordering::Relaxed);
                        ctx.request_repaint();
                    }
                }
            });
        }
        ConfigWatch { changed, stop }
    }

    /// Whether the file changed since this was last asked.
    pub fn changed(&self) -> bool {
        self.changed.swap(false, Ordering::Relaxed)
    }
}

impl Drop for ConfigWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
