//! Whether cuts share one silence: the fingerprint of a hop's fixed timer
//! (every stream closed after 2.0 s of silence, every 504 after 60 s), as
//! against silences that merely happened to end in a break (a provider's
//! pauses, a flaky link). A run's verdict groups, a call's repeated
//! attempts, and `probe` and `watch` across rounds all ask it.

use std::time::Duration;

use super::hop;
use super::text::secs;
use super::verdict::VerdictKind;

/// For the kinds whose silence is a hop's timer, what the silence is
/// ("of silence", "of waiting") and what a hop that shares it does
/// ("closes streams idle for", "gives up on the provider after").
pub(super) fn silence_of(kind: VerdictKind) -> Option<(&'static str, &'static str)> {
    match kind {
        VerdictKind::IdleCut => Some(("of silence", "closes streams idle for")),
        VerdictKind::GatewayTimeout => Some(("of waiting", "gives up on the provider after")),
        _ => None,
    }
}

/// Silences agree when each lies within this share of their middle…
const SHARE: f64 = 0.05;

/// …or within this much, when that is wider: a hop's timer fires on its
/// own event loop's turn and our clock reads the cut a network away, and
/// nginx moves a running timer only when it would move by 300 ms or more
/// (`NGX_TIMER_LAZY_DELAY`), so its 2 s cuts a stream after 1.7 to 2.0 s
/// of silence.
const FLOOR: Duration = Duration::from_millis(300);

/// Silences that share one length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Regular {
    /// The middle of their range.
    pub centre: Duration,
    /// Half their range: each lies within this of the centre.
    pub spread: Duration,
    /// How many there are.
    pub count: usize,
}

impl Regular {
    /// The shared length of `silences` (two or more), if they share one.
    pub fn of(silences: &[Duration]) -> Option<Regular> {
        let low = silences.iter().min()?;
        let high = silences.iter().max()?;
        let centre = (*low + *high) / 2;
        let spread = (*high - *low) / 2;
        let allowed = FLOOR.max(centre.mul_f64(SHARE));
        (silences.len() >= 2 && spread <= allowed).then_some(Regular { centre, spread, count: silences.len() })
    }

    /// "2.00 s of silence (±0.05 s)", for `what` "of silence".
    pub fn words(&self, what: &str) -> String {
        format!("{} {what} (±{})", secs(self.centre), secs(self.spread))
    }

    /// The length a hop's timer would be set to, in round words: "1.5 s",
    /// "2 s", "60 s". Timers are mostly set in whole seconds and fire a
    /// little early or late (nginx's and HAProxy's 2 s after 1.9 s): within
    /// 0.3 s or 5% of a whole second it is that second, else
    /// tenths.
    pub fn setting(&self) -> String {
        let s = self.centre.as_secs_f64();
        let whole = s.round();
        let rounded = if (s - whole).abs() <= FLOOR.as_secs_f64().max(s * SHARE) || s >= 10.0 {
            whole
        } else {
            (s * 10.0).round() / 10.0
        };
        format!("{rounded} s")
    }

    /// Whose documented default the shared length is, as a clause to
    /// follow it: " (the default of nginx's `proxy_read_timeout`, …)", or
    /// nothing.
    pub fn default_words(&self) -> String {
        hop::default_matching(self.centre).map_or_else(String::new, |whose| format!(" (the default of {whose})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|&v| Duration::from_millis(v)).collect()
    }

    #[test]
    fn cuts_after_one_fixed_silence_are_regular_and_scattered_ones_are_not() {
        let nginx = Regular::of(&ms(&[2_004, 2_011, 2_050, 1_998])).unwrap();
        assert_eq!(nginx.count, 4);
        assert_eq!(nginx.words("of silence"), "2.02 s of silence (±0.03 s)");
        assert_eq!(nginx.setting(), "2 s");
        let early = Regular::of(&ms(&[1_922, 1_930])).unwrap();
        assert_eq!(early.setting(), "2 s", "nginx fires its 2 s a little early");
        assert_eq!(Regular::of(&ms(&[1_880, 1_885])).unwrap().setting(), "2 s");
        assert_eq!(Regular::of(&ms(&[1_500, 1_510])).unwrap().setting(), "1.5 s");
        assert_eq!(Regular::of(&ms(&[6_500, 6_510])).unwrap().setting(), "6.5 s");
        assert_eq!(nginx.default_words(), "");
        let alb = Regular::of(&ms(&[60_010, 60_900, 59_200])).unwrap();
        assert_eq!(alb.setting(), "60 s");
        assert!(alb.default_words().contains("nginx's `proxy_read_timeout`"), "{}", alb.default_words());
        assert!(Regular::of(&ms(&[1_750, 2_000])).is_some(), "nginx's lazy timer, one setting");
        assert_eq!(Regular::of(&ms(&[2_000, 2_700])), None, "0.7 s apart is not one timer at 2 s");
        assert_eq!(Regular::of(&ms(&[1_200, 5_000, 30_000])), None);
        assert_eq!(Regular::of(&ms(&[2_000])), None, "one cut is no pattern");
        assert_eq!(Regular::of(&[]), None);
    }
}
