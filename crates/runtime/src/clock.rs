//! Time for the runtime: the wall clock the journal stamps rows with, plus a way to wait for an
//! instant on it. Both come from one [`Clock`], so a test that moves a [`testing::TestClock`]
//! moves timers, deadlines and timestamps together instead of sleeping.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use chrono::{DateTime, Utc};

/// A future that ends at or after an instant of its clock.
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The runtime's clock: the journal's wall clock ([`durably_lock::Clock`]) and a sleep on it.
pub trait Clock: durably_lock::Clock {
    /// Waits until [`durably_lock::Clock::now`] is at or past `at`; at once if it already is.
    ///
    /// Implementations must re-read `now` before they return, never trusting a timer alone, so
    /// that everything a caller does after the wait is stamped at or after `at`.
    fn sleep_until(&self, at: DateTime<Utc>) -> Sleep<'_>;
}

/// The system's real-time clock, sleeping on tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl durably_lock::Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

impl Clock for SystemClock {
    fn sleep_until(&self, at: DateTime<Utc>) -> Sleep<'_> {
        Box::pin(async move {
            // The wall clock may be stepped while a timer runs, so the loop re-reads it after
            // every wake-up and sleeps the rest. A timer never ends early on its own clock, so
            // each pass but the last is caused by the wall clock stepping back.
            loop {
                let Ok(remaining) = (at - Utc::now()).to_std() else {
                    return;
                };
                if remaining.is_zero() {
                    return;
                }
                tokio::time::sleep(remaining).await;
            }
        })
    }
}

/// Clocks for tests.
pub mod testing {
    use super::{Clock, DateTime, Mutex, Sleep, Utc};

    /// A clock that stands still until the test moves it. Give the same `Arc<TestClock>` to the
    /// journal ([`durably_journal::JournalBuilder::clock`]) and the runtime, then
    /// [`TestClock::advance`] it: every sleep whose instant is reached ends at once, and
    /// nothing waits for real time.
    #[derive(Debug)]
    pub struct TestClock {
        now: Mutex<DateTime<Utc>>,
        /// Bumped on every move; sleepers wait for a change and re-read `now`.
        moved: tokio::sync::watch::Sender<()>,
    }

    impl TestClock {
        /// A clock standing at `start`.
        pub fn new(start: DateTime<Utc>) -> Self {
            Self {
                now: Mutex::new(start),
                moved: tokio::sync::watch::Sender::new(()),
            }
        }

        /// Moves the clock forward by `by`, waking every sleep that is now due.
        pub fn advance(&self, by: std::time::Duration) {
            let by = chrono::TimeDelta::from_std(by).unwrap_or(chrono::TimeDelta::MAX);
            let mut now = self.lock();
            *now = now
                .checked_add_signed(by)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            drop(now);
            self.moved.send_replace(());
        }

        /// Sets the clock to `to`, forward or back (a stepped wall clock), waking every sleep
        /// that is now due.
        pub fn set(&self, to: DateTime<Utc>) {
            *self.lock() = to;
            self.moved.send_replace(());
        }

        /// How many sleeps are waiting on this clock now: a test waits for this to reach the
        /// number it expects before it advances the clock, instead of sleeping and hoping.
        pub fn sleepers(&self) -> usize {
            self.moved.receiver_count()
        }

        fn lock(&self) -> std::sync::MutexGuard<'_, DateTime<Utc>> {
            // The guarded value is a plain instant, valid whatever a panicking holder did.
            self.now
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    impl Default for TestClock {
        /// A clock standing at 2026-01-01T00:00:00Z.
        fn default() -> Self {
            Self::new(DateTime::<Utc>::from_timestamp(1_767_225_600, 0).unwrap_or_default())
        }
    }

    impl durably_lock::Clock for TestClock {
        fn now(&self) -> DateTime<Utc> {
            *self.lock()
        }
    }

    impl Clock for TestClock {
        fn sleep_until(&self, at: DateTime<Utc>) -> Sleep<'_> {
            // Subscribed before the first read of `now`, so a move between the read and the
            // wait is seen as a change, never lost.
            let mut moved = self.moved.subscribe();
            Box::pin(async move {
                while durably_lock::Clock::now(self) < at {
                    if moved.changed().await.is_err() {
                        // Unreachable while `self` is borrowed: the sender lives in it.
                        return;
                    }
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use durably_lock::Clock as _;

    use super::testing::TestClock;
    use super::*;

    fn poll(sleep: &mut Sleep<'_>) -> Poll<()> {
        sleep.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }

    /// A sleep on the test clock ends exactly when the clock is moved to its instant, not
    /// before, and without real time passing.
    #[test]
    fn test_clock_sleeps_end_when_the_clock_is_moved() {
        let clock = Arc::new(TestClock::default());
        let at = clock.now() + Duration::from_hours(1);
        let mut sleep = clock.sleep_until(at);
        assert!(poll(&mut sleep).is_pending());
        assert_eq!(clock.sleepers(), 1);
        clock.advance(Duration::from_secs(3599));
        assert!(poll(&mut sleep).is_pending(), "one second early");
        clock.advance(Duration::from_secs(1));
        assert!(poll(&mut sleep).is_ready());
        drop(sleep);
        assert_eq!(clock.sleepers(), 0);
    }

    /// A sleep to an instant already past ends at once; a clock set back makes a due sleep
    /// wait again.
    #[test]
    fn test_clock_past_instants_and_steps_back() {
        let clock = TestClock::default();
        let start = clock.now();
        assert!(poll(&mut clock.sleep_until(start)).is_ready());
        clock.set(start - Duration::from_secs(10));
        assert!(poll(&mut clock.sleep_until(start)).is_pending());
    }

    /// The system clock's sleep to a past instant ends at once.
    #[tokio::test]
    async fn system_clock_past_instants_end_at_once() {
        SystemClock
            .sleep_until(Utc::now() - Duration::from_secs(1))
            .await;
    }
}
