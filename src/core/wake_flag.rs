//! A waker that remembers it was used, so a loop that waits on a busy
//! source and on quiet ones (a stream's body, and its timer and
//! cancellation) polls the quiet ones only after they have woken it.
//!
//! Polling a tokio `Sleep` or a cancellation future again registers the
//! task with it again (an atomic handshake, and a mutex for the token).
//! Done on every wait of a flowing stream, that costs more than reading the
//! chunk that ends the wait. The quiet sources are instead polled with this
//! waker: it raises its flag and wakes the task it forwards to, and the
//! loop polls them again only when the flag is up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake};

use futures_util::task::AtomicWaker;

/// See the module documentation.
#[derive(Debug)]
pub struct WakeFlag {
    raised: AtomicBool,
    task: AtomicWaker,
}

impl WakeFlag {
    /// A flag that starts raised, so the first wait polls every source.
    pub fn new() -> Arc<WakeFlag> {
        Arc::new(WakeFlag { raised: AtomicBool::new(true), task: AtomicWaker::new() })
    }

    /// Forwards later wakes to the task polling with `cx`, and lowers the
    /// flag: true if it was up (a quiet source woke the task, or [`raise`]
    /// asked for a poll).
    ///
    /// [`raise`]: WakeFlag::raise
    pub fn take(&self, cx: &Context<'_>) -> bool {
        // Registering first means a wake that comes after the swap still
        // reaches this task.
        self.task.register(cx.waker());
        self.raised.swap(false, Ordering::AcqRel)
    }

    /// Whether a quiet source has woken the task since the last [`take`].
    ///
    /// [`take`]: WakeFlag::take
    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    /// Asks for the quiet sources to be polled at the next wait (after one
    /// of them was changed, say a timer moved).
    pub fn raise(&self) {
        self.raised.store(true, Ordering::Release);
    }
}

impl Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.raise();
        self.task.wake();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Waker;

    use super::*;

    /// Counts its wakes.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_wake_raises_the_flag_and_reaches_the_task_that_last_took_it() {
        let flag = WakeFlag::new();
        let (first, second) = (Arc::new(Counter(AtomicUsize::new(0))), Arc::new(Counter(AtomicUsize::new(0))));
        let (first_waker, second_waker) = (Waker::from(first.clone()), Waker::from(second.clone()));
        assert!(flag.take(&Context::from_waker(&first_waker)), "it starts raised");
        assert!(!flag.take(&Context::from_waker(&first_waker)));
        assert!(!flag.is_raised());

        let source = Waker::from(flag.clone());
        flag.take(&Context::from_waker(&second_waker));
        source.wake_by_ref();
        assert!(flag.is_raised());
        assert_eq!((first.0.load(Ordering::SeqCst), second.0.load(Ordering::SeqCst)), (0, 1));
        assert!(flag.take(&Context::from_waker(&second_waker)));
        assert!(!flag.is_raised());

        flag.raise();
        assert!(flag.take(&Context::from_waker(&second_waker)));
    }
}
