//! A token bucket that several workers (or several controllers) share: at most `burst` actions
//! at once, refilled at `per_second`. The runtime makes a controller's workers take a token
//! before each reconcile when its [`super::controller::ControllerConfig::limiter`] is set; the eviction
//! brake of the failover controllers shares one bucket between them. Time is tokio's
//! [`Instant`], so tests drive it with paused time; the arithmetic is the pure
//! [`TokenBucket::try_take_at`].

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How fast a bucket refills and how many tokens it holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Tokens added per second (> 0).
    pub per_second: f64,
    /// Tokens the bucket holds when full (at least 1).
    pub burst: u32,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// A shared token bucket. Cheap to clone; clones share the tokens.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: Rate,
    state: Arc<Mutex<Bucket>>,
}

impl TokenBucket {
    /// A full bucket as of `now`.
    pub fn new_at(rate: Rate, now: Instant) -> Self {
        let rate = Rate {
            per_second: if rate.per_second.is_finite() && rate.per_second > 0.0 {
                rate.per_second
            } else {
                f64::MIN_POSITIVE
            },
            burst: rate.burst.max(1),
        };
        Self {
            rate,
            state: Arc::new(Mutex::new(Bucket {
                tokens: f64::from(rate.burst),
                last: now,
            })),
        }
    }

    /// An empty bucket as of `now`: its first token comes after `1 / per_second` (what
    /// Kubernetes' `SwapLimiter` does to a new limiter while the old one had none to give).
    pub fn drained_at(rate: Rate, now: Instant) -> Self {
        let bucket = Self::new_at(rate, now);
        bucket.state.lock().tokens = 0.0;
        bucket
    }

    /// Whether a token could be taken at `now` (takes none).
    pub fn has_token_at(&self, now: Instant) -> bool {
        let b = self.state.lock();
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        (b.tokens + elapsed * self.rate.per_second).min(f64::from(self.rate.burst)) >= 1.0
    }

    /// A full bucket as of tokio's now.
    pub fn new(rate: Rate) -> Self {
        Self::new_at(rate, Instant::now())
    }

    /// The bucket's rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes a token at `now` if there is one; otherwise says how long until there is.
    pub fn try_take_at(&self, now: Instant) -> Result<(), Duration> {
        let mut b = self.state.lock();
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.rate.per_second).min(f64::from(self.rate.burst));
        if now > b.last {
            b.last = now;
        }
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            let missing = 1.0 - b.tokens;
            let wait = Duration::try_from_secs_f64(missing / self.rate.per_second)
                .unwrap_or(Duration::MAX);
            Err(wait.max(Duration::from_micros(1)))
        }
    }

    /// Reserves the next token at `now`: `Duration::ZERO` when there is one now, else how
    /// long until the one reserved (which no later caller can take). Later reservations
    /// queue behind it, one per `1 / per_second`.
    pub fn reserve_at(&self, now: Instant) -> Duration {
        let mut b = self.state.lock();
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.rate.per_second).min(f64::from(self.rate.burst));
        if now > b.last {
            b.last = now;
        }
        b.tokens -= 1.0;
        if b.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-b.tokens / self.rate.per_second)
                .unwrap_or(Duration::MAX)
                .max(Duration::from_micros(1))
        }
    }

    /// Takes a token at tokio's now if there is one.
    pub fn try_take(&self) -> Result<(), Duration> {
        self.try_take_at(Instant::now())
    }

    /// Waits for a token and takes it.
    pub async fn take(&self) {
        loop {
            match self.try_take() {
                Ok(()) => return,
                Err(wait) => tokio::time::sleep(wait).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_queue_one_per_interval_and_tokens_honour_them() {
        let t0 = Instant::now();
        let bucket = TokenBucket::new_at(rate(2.0, 1), t0);
        assert_eq!(bucket.reserve_at(t0), Duration::ZERO);
        assert_eq!(bucket.reserve_at(t0), ms(500));
        assert_eq!(bucket.reserve_at(t0), ms(1000));
        // A taker finds no token before the reserved ones are due.
        assert_eq!(bucket.try_take_at(t0 + ms(1000)), Err(ms(500)));
        assert_eq!(bucket.try_take_at(t0 + ms(1500)), Ok(()));
    }

    #[test]
    fn a_drained_bucket_gives_its_first_token_after_one_interval() {
        let t0 = Instant::now();
        let rate = rate(2.0, 1);
        let bucket = TokenBucket::drained_at(rate, t0);
        assert!(!bucket.has_token_at(t0));
        assert!(!bucket.has_token_at(t0 + ms(499)));
        assert!(bucket.has_token_at(t0 + ms(500)));
        assert_eq!(bucket.reserve_at(t0), ms(500));
        assert!(!bucket.has_token_at(t0 + ms(900)));
        let full = TokenBucket::new_at(rate, t0);
        assert!(full.has_token_at(t0));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// `per_second` tokens a second, at most `burst` at once.
    fn rate(per_second: f64, burst: u32) -> Rate {
        Rate { per_second, burst }
    }

    #[test]
    fn a_bucket_gives_its_burst_then_refills_at_its_rate() {
        let t0 = Instant::now();
        let bucket = TokenBucket::new_at(rate(10.0, 2), t0);
        // (offset from t0, expected result)
        let table: [(u64, Result<(), Duration>); 7] = [
            (0, Ok(())),
            (0, Ok(())),
            (0, Err(ms(100))), // empty: one token per 100 ms
            (40, Err(ms(60))),
            (100, Ok(())),
            (100, Err(ms(100))),
            (1_000, Ok(())), // refilled, but never above the burst
        ];
        for (i, (at, want)) in table.into_iter().enumerate() {
            let got = bucket.try_take_at(t0 + ms(at));
            match (got, want) {
                (Ok(()), Ok(())) => {}
                (Err(g), Err(w)) => assert!(
                    g.abs_diff(w) < Duration::from_micros(10),
                    "row {i}: {g:?} vs {w:?}"
                ),
                (g, w) => panic!("row {i}: {g:?}, want {w:?}"),
            }
        }
        assert!(bucket.try_take_at(t0 + ms(1_000)).is_ok());
        assert!(bucket.try_take_at(t0 + ms(1_000)).is_err(), "burst is 2");
    }

    #[test]
    fn clones_share_the_tokens_and_bad_rates_are_clamped() {
        let t0 = Instant::now();
        let a = TokenBucket::new_at(rate(1.0, 1), t0);
        let b = a.clone();
        assert!(a.try_take_at(t0).is_ok());
        assert!(b.try_take_at(t0).is_err());
        let odd = TokenBucket::new_at(rate(-3.0, 0), t0);
        assert_eq!(odd.rate().burst, 1);
        assert!(odd.try_take_at(t0).is_ok());
        assert!(odd.try_take_at(t0 + Duration::from_secs(3600)).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn workers_sharing_a_bucket_are_paced_together() {
        let bucket = TokenBucket::new(rate(5.0, 1));
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..3 {
            let b = bucket.clone();
            tasks.spawn(async move {
                for _ in 0..2 {
                    b.take().await;
                }
                Instant::now()
            });
        }
        let mut last = start;
        while let Some(done) = tasks.join_next().await {
            last = last.max(done.expect("task"));
        }
        // Six tokens: one at once, five more at 200 ms each.
        let took = last - start;
        assert!(took >= ms(1_000) && took < ms(1_050), "{took:?}");
    }
}
