//! Exponential backoff with jitter for every retried call of the pull loops: the ceiling
//! doubles from 100 ms to 10 s, and each delay is drawn from the upper half of the ceiling
//! ("equal jitter"), so many agents restarted together do not retry in lockstep.

use std::time::Duration;

use rand::Rng;

/// Retry delays.
#[derive(Clone, Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(10))
    }
}

impl Backoff {
    /// Delays from `base`, doubling, capped at `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            attempt: 0,
        }
    }

    /// The ceiling of the next delay: `min(max, base × 2^attempt)`.
    pub fn ceiling(&self) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.min(30));
        self.base.saturating_mul(factor).min(self.max)
    }

    /// The next delay with `unit` ∈ [0, 1] as the jitter draw: `ceiling/2 + unit × ceiling/2`.
    pub fn next_with(&mut self, unit: f64) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        let half = ceiling / 2;
        half + half.mul_f64(unit.clamp(0.0, 1.0))
    }

    /// The next delay, with a random jitter.
    pub fn next_delay(&mut self) -> Duration {
        let unit = rand::thread_rng().gen_range(0.0..=1.0);
        self.next_with(unit)
    }

    /// Back to the first delay (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// How many delays were handed out since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

/// `period` stretched by up to `fraction` at random, so periodic work of many members spreads.
pub fn jittered(period: Duration, fraction: f64) -> Duration {
    let unit = rand::thread_rng().gen_range(0.0..=fraction.max(0.0));
    period + period.mul_f64(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_then_resets() {
        let mut b = Backoff::default();
        let ceilings: Vec<u128> = (0..10)
            .map(|_| {
                let c = b.ceiling().as_millis();
                b.next_with(1.0);
                c
            })
            .collect();
        assert_eq!(
            ceilings,
            [100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000]
        );
        assert_eq!(b.attempts(), 10);
        b.reset();
        assert_eq!(b.ceiling(), Duration::from_millis(100));
    }

    #[test]
    fn jitter_stays_in_the_upper_half() {
        let cases = [(0.0, 50), (0.5, 75), (1.0, 100), (7.0, 100), (-1.0, 50)];
        for (unit, want_ms) in cases {
            let mut b = Backoff::default();
            assert_eq!(
                b.next_with(unit),
                Duration::from_millis(want_ms),
                "unit {unit}"
            );
        }
        let mut b = Backoff::default();
        for _ in 0..100 {
            let c = b.ceiling();
            let d = b.next_delay();
            assert!(
                d >= c / 2 && d <= c,
                "{d:?} not within [{:?}, {c:?}]",
                c / 2
            );
        }
        // Far past the cap nothing overflows.
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        for _ in 0..100 {
            b.next_with(1.0);
        }
        assert_eq!(b.next_with(1.0), Duration::from_secs(10));
        let j = jittered(Duration::from_secs(10), 0.1);
        assert!(j >= Duration::from_secs(10) && j <= Duration::from_secs(11));
    }
}
