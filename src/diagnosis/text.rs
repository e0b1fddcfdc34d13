//! How verdicts write numbers and names: durations, sizes, shares, timer
//! names and the evidence entries themselves, so every sentence reads
//! alike.

use std::time::Duration;

use crate::core::category::TimerKind;

use super::verdict::{Evidence, Topic};

/// A measured duration: two decimals below 10 s ("0.21 s"), one below
/// 100 s, whole seconds above.
pub(super) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.2} s")
    } else if s < 100.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

/// A configured budget, as short as it was set ("1 s", "0.5 s", "1.25 s").
pub(super) fn budget(d: Duration) -> String {
    let rounded = (d.as_secs_f64() * 1000.0).round() / 1000.0;
    format!("{rounded} s")
}

/// A byte count ("412 B", "4.0 KiB", "1.2 MiB").
pub(super) fn bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = n as f64;
    if f < KIB {
        format!("{n} B")
    } else if f < KIB * KIB {
        format!("{:.1} KiB", f / KIB)
    } else {
        format!("{:.1} MiB", f / (KIB * KIB))
    }
}

/// `n thing` or `n things`.
pub(super) fn count(n: u64, thing: &str) -> String {
    if n == 1 { format!("1 {thing}") } else { format!("{n} {thing}s") }
}

/// `part` as a whole percentage of `whole`.
pub(super) fn percent(part: Duration, whole: Duration) -> String {
    if whole.is_zero() {
        return "–".to_owned();
    }
    format!("{:.0}%", part.as_secs_f64() / whole.as_secs_f64() * 100.0)
}

/// A timer's name in sentences ("the data-stall timer").
pub(super) fn timer(t: TimerKind) -> &'static str {
    match t {
        TimerKind::Connect => "connect",
        TimerKind::Ttfb => "TTFB",
        TimerKind::Idle => "idle",
        TimerKind::DataStall => "data-stall",
        TimerKind::MinRate => "throughput-floor",
        TimerKind::Total => "total",
        TimerKind::Deadline => "call-deadline",
    }
}

/// The tunable that sets a timer's budget.
pub(super) const fn timer_tunable(t: TimerKind) -> &'static str {
    match t {
        TimerKind::Connect => "STALLSCOPE_HTTP_CONNECT_TIMEOUT_S",
        TimerKind::Ttfb => "STALLSCOPE_SSE_TTFB_TIMEOUT_S",
        TimerKind::Idle => "STALLSCOPE_SSE_IDLE_TIMEOUT_S",
        TimerKind::DataStall => "STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S",
        TimerKind::MinRate => "STALLSCOPE_SSE_MIN_RATE",
        TimerKind::Total => "STALLSCOPE_SSE_TOTAL_TIMEOUT_S",
        TimerKind::Deadline => "STALLSCOPE_CALL_DEADLINE_S",
    }
}

/// A piece of evidence about one moment of one attempt.
pub(super) fn fact(topic: Topic, attempt: Option<u32>, at: Option<Duration>, text: String) -> Evidence {
    Evidence { topic, attempt, at_ms: at.map(|d| d.as_secs_f64() * 1000.0), text }
}

/// How many characters of an error body or message a verdict quotes.
pub(super) const QUOTE: usize = 160;

/// At most `max` characters of `text`, on one line, with an ellipsis when
/// cut (error bodies as evidence).
pub(super) fn clip(text: &str, max: usize) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_alike() {
        assert_eq!(secs(Duration::from_millis(210)), "0.21 s");
        assert_eq!(secs(Duration::from_millis(12_340)), "12.3 s");
        assert_eq!(secs(Duration::from_secs(780)), "780 s");
        assert_eq!(budget(Duration::from_millis(500)), "0.5 s");
        assert_eq!(budget(Duration::from_secs(1800)), "1800 s");
        assert_eq!(bytes(412), "412 B");
        assert_eq!(bytes(4097), "4.0 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!((count(1, "chunk"), count(3, "chunk")), ("1 chunk".to_owned(), "3 chunks".to_owned()));
        assert_eq!(percent(Duration::from_millis(350), Duration::from_secs(1)), "35%");
        assert_eq!(clip("a  b\nc", 10), "a b c");
        assert_eq!(clip("ééééé", 3), "ééé…");
    }
}
