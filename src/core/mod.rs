//! The fault-tolerance core: classification, retry executor, stream
//! governor, failover, credentials, transport and worst-case analysis.
//!
//! Nothing here depends on the GUI or the store: the core emits typed
//! events to the sink it is given.

/// Gives a fieldless enum with an `ALL` list its `name()`, a padded
/// `Display`, and a `FromStr` that ignores ASCII case and surrounding
/// spaces and fails with `$error::$unknown { given }`.
macro_rules! named_enum {
    ($ty:ident, $error:ident::$unknown:ident, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// The name used by [`FromStr`] and [`Display`](fmt::Display).
            pub const fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.name())
            }
        }

        impl FromStr for $ty {
            type Err = $error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let wanted = s.trim();
                Self::ALL
                    .into_iter()
                    .find(|kind| kind.name().eq_ignore_ascii_case(wanted))
                    .ok_or_else(|| $error::$unknown { given: s.to_owned() })
            }
        }
    };
}

pub mod analysis;
pub mod backoff;
pub mod category;
pub mod classify;
pub mod credentials;
pub mod escalation;
pub mod event;
pub mod evidence;
pub mod executor;
pub mod failover;
pub mod failure;
pub mod fleet;
pub mod governor;
pub mod lag;
pub mod lag_probe;
pub mod per_stream;
pub mod policy;
pub mod rate_window;
pub mod ratelimit;
pub mod redact;
pub mod retry_after;
pub mod schedule;
pub mod transport;
pub mod upstream;
pub mod wake_flag;
