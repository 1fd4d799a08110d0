//! Time as the agent sees it. The sim runtime and the pull loops read the time through
//! [`Clock`] so that unit tests drive them with a [`FakeClock`] instead of sleeping.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use parking_lot::Mutex;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct FakeClock {
    now: Mutex<DateTime<Utc>>,
}

impl FakeClock {
    /// A fake clock starting at `start`.
    pub fn new(start: DateTime<Utc>) -> Arc<Self> {
        Arc::new(FakeClock {
            now: Mutex::new(start),
        })
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        let by = Duration::from_std(by).unwrap_or(Duration::MAX);
        let mut now = self.now.lock();
        *now = now.checked_add_signed(by).unwrap_or(*now);
    }

    /// Sets the clock to `at`.
    pub fn set(&self, at: DateTime<Utc>) {
        *self.now.lock() = at;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock()
    }
}
