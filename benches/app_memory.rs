//! The desktop app's memory over many runs: the real binary on a virtual X
//! display (see tests/display), runs started with F5 as an operator starts
//! them, its resident memory read from /proc after each.
//!
//! Run with `cargo bench --bench app_memory` (build with `--release` first
//! to measure what operators run: it uses the binary cargo builds for the
//! bench's profile). The full plan: 30 runs of silent-stall, 500 calls at
//! concurrency 100; then one of 2,000 at 500; then three of 4 (the
//! memory the large run leaves behind). Without `--bench` (as under `cargo
//! test --benches`) two runs of 4 calls, as a smoke test. Skipped with a
//! reason when Xvfb, xdotool or xwd is missing (a failure under
//! `STALLSCOPE_REQUIRE_EXTERNAL=1`).
//!
//! The form's Requests and Concurrency fields are found where a headless
//! copy of the app at the same window size lays them out, and clicked there.

#[path = "../tests/app/mod.rs"]
mod app;
#[path = "../tests/display/mod.rs"]
mod display;
#[path = "../tests/programs/mod.rs"]
mod programs;

use std::time::{Duration, Instant};

use app::Scratch;
use egui_kittest::kittest::Queryable;
use stallscope::store::Store;
use stallscope::store::runs::RunStatus;

/// Resident and peak memory of `pid`, in MB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_default();
        line.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Where the form's number fields are in a fresh app's window: the centre
/// of Requests' and of Concurrency's field.
fn fields(dir: &Scratch) -> [egui::Pos2; 2] {
    let mut h = display::headless(dir);
    h.run();
    ["Requests", "Concurrency"].map(|label| {
        // The label and its field share the name; the field is to its right.
        let rects = h.query_all_by_label(label).map(|n| n.rect());
        rects.max_by(|a, b| a.left().total_cmp(&b.left())).expect("the form shows the field").center()
    })
}

/// Runs completed in `db`.
fn completed(db: &std::path::Path) -> usize {
    let Ok(store) = Store::open(db) else { return 0 };
    store.list_runs().map_or(0, |runs| runs.iter().filter(|r| r.status == RunStatus::Completed).count())
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    if !display::programs(&[]) {
        return;
    }
    let plan: Vec<(u32, u32)> =
        if full { [vec![(500, 100); 30], vec![(2000, 500)], vec![(4, 4); 3]].concat() } else { vec![(4, 4); 2] };
    let dir = Scratch::new("memory");
    std::fs::write(dir.config(), "").unwrap();
    let [requests, concurrency] = fields(&dir);
    let (_xvfb, screen) = display::display();
    let app = display::open_app(dir.path(), &screen);
    let pid = app.0.id();
    let window = display::window(&screen);
    display::xdotool(&screen, &["windowfocus", "--sync", &window]);
    let (rss, _) = memory(pid);
    println!("app_memory: fresh: {rss:.0} MB");
    let mut form = None;
    for (run, &(calls, at_once)) in plan.iter().enumerate() {
        if form != Some((calls, at_once)) {
            for (at, value) in [(requests, calls), (concurrency, at_once)] {
                let (x, y) = (format!("{}", at.x as i32), format!("{}", at.y as i32));
                display::xdotool(&screen, &["mousemove", "--window", &window, &x, &y, "click", "1"]);
                display::xdotool(&screen, &["key", "--delay", "100", "ctrl+a"]);
                display::xdotool(&screen, &["type", "--delay", "150", &value.to_string()]);
                display::xdotool(&screen, &["key", "--delay", "300", "Tab"]);
            }
            form = Some((calls, at_once));
        }
        display::xdotool(&screen, &["key", "F5"]);
        let deadline = Instant::now() + Duration::from_secs(300);
        while completed(&dir.db()) <= run {
            assert!(Instant::now() < deadline, "run {} never completed", run + 1);
            std::thread::sleep(Duration::from_millis(250));
        }
        // Its checks and the history's refresh settle.
        std::thread::sleep(Duration::from_secs(2));
        let (rss, peak) = memory(pid);
        println!("app_memory: run {:>2} ({calls} calls at {at_once}): {rss:.0} MB (peak {peak:.0} MB)", run + 1);
    }
    assert_eq!(completed(&dir.db()), plan.len(), "every run was started by F5 and completed");
}
