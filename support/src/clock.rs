//! Time as the server, the agent and the member runtimes see it. Every timeout (thresholds,
//! toleration seconds, grace periods, lease renewals, the sim's pod timings) reads a [`Clock`]
//! so that tests drive time with a [`FakeClock`] instead of sleeping.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use parking_lot::Mutex;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to. Clones share one time: a test keeps a clone and
/// moves the clock the code under test reads.
#[derive(Clone, Debug)]
pub struct FakeClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl FakeClock {
    /// A fake clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward (it stays put rather than overflow past the end of time).
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock();
        *now = now.checked_add_signed(by).unwrap_or(*now);
    }

    /// Sets the clock.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock() = to;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn fake_clock_clones_share_one_time() {
        let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let clock = FakeClock::new(start);
        let shared: SharedClock = Arc::new(clock.clone());
        clock.advance(Duration::seconds(90));
        assert_eq!(shared.now(), start + Duration::seconds(90));
        clock.advance(Duration::MAX);
        assert_eq!(shared.now(), start + Duration::seconds(90));
        clock.set(start);
        assert_eq!(shared.now(), start);
    }
}
