//! A waker that remembers it was used, so a loop that waits on a busy
//! source and on quiet ones (a stream's body, and its timer and
//! cancellation) polls the quiet ones only after they have woken it.
//!
//! Polling a tokio `Sleep` or a cancellation future again registers the
//! task with it again (an atomic handshake, and a mutex for the token).
//! Done on every wait of a flowing stream, that costs more than reading the
//! chunk that ends the wait. The quiet sources are instead polled with this
//! flag's waker, which raises the flag and wakes the task; the loop polls
//! them again only when the flag is up. Between wakes a wait costs a pointer
//! comparison and a load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Wake, Waker};

/// See the module documentation. Owned by the waiting loop.
#[derive(Debug)]
pub struct WakeFlag {
    shared: Arc<Shared>,
    /// What the quiet sources are polled with.
    waker: Waker,
    /// The task the shared part wakes (kept here to compare without a lock).
    task: Option<Waker>,
}

/// What the quiet sources' wakes reach.
#[derive(Debug)]
struct Shared {
    raised: AtomicBool,
    /// Kept, not taken, by a wake, so it is set again only when the task's
    /// waker changes. The lock is taken on that change and on wakes: rare.
    task: Mutex<Option<Waker>>,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.raised.store(true, Ordering::Release);
        if let Some(task) = &*self.task.lock().unwrap_or_else(PoisonError::into_inner) {
            task.wake_by_ref();
        }
    }
}

impl Default for WakeFlag {
    fn default() -> Self {
        Self::new()
    }
}

impl WakeFlag {
    /// A flag that starts raised, so the first wait polls every source.
    pub fn new() -> WakeFlag {
        let shared = Arc::new(Shared { raised: AtomicBool::new(true), task: Mutex::new(None) });
        WakeFlag { waker: Waker::from(Arc::clone(&shared)), shared, task: None }
    }

    /// The waker to poll the quiet sources with.
    pub fn waker(&self) -> &Waker {
        &self.waker
    }

    /// Has later wakes reach the task polling with `cx`, and lowers the
    /// flag: true if it was up (a quiet source woke the task, or [`raise`]
    /// asked for a poll).
    ///
    /// [`raise`]: WakeFlag::raise
    pub fn take(&mut self, cx: &Context<'_>) -> bool {
        if !self.task.as_ref().is_some_and(|task| task.will_wake(cx.waker())) {
            // Set before the flag is read: a wake after this reaches the
            // new task, one before it has raised the flag.
            *self.shared.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
            self.task = Some(cx.waker().clone());
        }
        self.is_raised() && self.shared.raised.swap(false, Ordering::AcqRel)
    }

    /// Whether a quiet source has woken the task since the last [`take`].
    ///
    /// [`take`]: WakeFlag::take
    pub fn is_raised(&self) -> bool {
        self.shared.raised.load(Ordering::Acquire)
    }

    /// Asks for the quiet sources to be polled at the next wait (after one
    /// of them was changed, say a timer moved).
    pub fn raise(&self) {
        self.shared.raised.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Counts its wakes.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Counter>, Waker) {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        (counter.clone(), Waker::from(counter))
    }

    #[test]
    fn a_wake_raises_the_flag_and_reaches_the_task_that_last_took_it() {
        let mut flag = WakeFlag::new();
        let ((first, first_waker), (second, second_waker)) = (counter(), counter());
        assert!(flag.take(&Context::from_waker(&first_waker)), "it starts raised");
        assert!(!flag.take(&Context::from_waker(&first_waker)));
        assert!(!flag.is_raised());

        flag.take(&Context::from_waker(&second_waker));
        flag.waker().wake_by_ref();
        assert!(flag.is_raised());
        assert_eq!((first.0.load(Ordering::SeqCst), second.0.load(Ordering::SeqCst)), (0, 1));
        assert!(flag.take(&Context::from_waker(&second_waker)));
        assert!(!flag.is_raised());

        flag.raise();
        assert!(flag.take(&Context::from_waker(&second_waker)));
    }

    #[test]
    fn every_wake_reaches_the_task_not_only_the_first() {
        let mut flag = WakeFlag::new();
        let (task, task_waker) = counter();
        for wakes in 1..=3 {
            flag.take(&Context::from_waker(&task_waker));
            flag.waker().wake_by_ref();
            assert_eq!(task.0.load(Ordering::SeqCst), wakes);
        }
        // Woken again while the flag was already up: still woken.
        flag.waker().wake_by_ref();
        assert_eq!(task.0.load(Ordering::SeqCst), 4);
    }
}
