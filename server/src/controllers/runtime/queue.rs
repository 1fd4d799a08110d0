//! A de-duplicating, rate-limited work queue of string keys, as client-go's: a key is queued at
//! most once, is never handed to two workers at once (a key added while it is being processed
//! is queued again when the worker is done), can be added after a delay, and is retried with
//! per-key exponential backoff after failures. It keeps its own gauges up to date (keys waiting;
//! reconciles running plus feeds still listing), so a scrape sees the queue as it is, also
//! while its workers are busy: the restart benchmark reads them to tell when every controller
//! has caught up.

use parking_lot::Mutex;
use prometheus::IntGauge;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Backoff of failed keys: `base * 2^failures`, capped at `max`.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    /// First retry delay.
    pub base: Duration,
    /// Longest retry delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(5),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The delay after `failures` consecutive failures (1 = the first).
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(30));
        self.base.saturating_mul(factor).min(self.max)
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    queued: HashSet<String>,
    processing: HashSet<String>,
    dirty: HashSet<String>,
    delayed: BTreeMap<(Instant, u64), String>,
    /// When each delayed key is due: a key waits at most once, at its earliest time.
    delayed_keys: HashMap<String, (Instant, u64)>,
    delayed_seq: u64,
    failures: HashMap<String, u32>,
    shut_down: bool,
    /// Feeds listing their kind into the queue now.
    lists: usize,
    gauges: Option<Gauges>,
}

/// The gauges a queue keeps up to date.
struct Gauges {
    /// Keys waiting now (not counting delayed ones).
    waiting: IntGauge,
    /// Keys being reconciled plus feeds listing.
    busy: IntGauge,
}

impl State {
    /// Sets the gauges to the queue's state (after every change of it).
    fn publish(&self) {
        if let Some(g) = &self.gauges {
            g.waiting
                .set(i64::try_from(self.queue.len()).unwrap_or(i64::MAX));
            g.busy.set(
                i64::try_from(self.processing.len().saturating_add(self.lists)).unwrap_or(i64::MAX),
            );
        }
    }
}

/// A feed's list in progress: counted as busy from its creation to its drop (also when the
/// feed is aborted mid-list).
pub struct Listing {
    state: Arc<Mutex<State>>,
}

impl Drop for Listing {
    fn drop(&mut self) {
        let mut s = self.state.lock();
        s.lists = s.lists.saturating_sub(1);
        s.publish();
    }
}

/// The queue. Cheap to clone; clones share the queue.
#[derive(Clone)]
pub struct WorkQueue {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    backoff: Backoff,
}

impl Default for WorkQueue {
    fn default() -> Self {
        Self::new(Backoff::default())
    }
}

impl WorkQueue {
    /// An empty queue.
    pub fn new(backoff: Backoff) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::default())),
            notify: Arc::new(Notify::new()),
            backoff,
        }
    }

    /// Queues a key now (no-op if already queued; deferred if being processed).
    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut s = self.state.lock();
        if s.shut_down {
            return;
        }
        if s.processing.contains(&key) {
            s.dirty.insert(key);
            return;
        }
        if s.queued.insert(key.clone()) {
            s.queue.push_back(key);
            s.publish();
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Queues a key after `delay` (no-op if it is already queued to run now: that reconcile
    /// has not started, so it reads whatever prompted this).
    pub fn add_after(&self, key: impl Into<String>, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let mut s = self.state.lock();
        if s.shut_down {
            return;
        }
        let key = key.into();
        if s.queued.contains(&key) {
            return;
        }
        let at = Instant::now() + delay;
        if let Some(&(existing, seq)) = s.delayed_keys.get(&key) {
            if existing <= at {
                return;
            }
            s.delayed.remove(&(existing, seq));
        }
        s.delayed_seq += 1;
        let seq = s.delayed_seq;
        s.delayed.insert((at, seq), key.clone());
        s.delayed_keys.insert(key, (at, seq));
        drop(s);
        self.notify.notify_one();
    }

    /// Queues a key after its backoff and counts the failure.
    pub fn add_rate_limited(&self, key: &str) {
        let failures = {
            let mut s = self.state.lock();
            let f = s.failures.entry(key.to_string()).or_insert(0);
            *f += 1;
            *f
        };
        self.add_after(key, self.backoff.delay(failures));
    }

    /// Forgets a key's failures (after a success).
    pub fn forget(&self, key: &str) {
        self.state.lock().failures.remove(key);
    }

    /// Consecutive failures of a key.
    pub fn failures(&self, key: &str) -> u32 {
        self.state.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Keeps `waiting` (keys waiting now) and `busy` (keys being reconciled plus feeds
    /// listing) up to date from now on.
    pub fn report_to(&self, waiting: IntGauge, busy: IntGauge) {
        let mut s = self.state.lock();
        s.gauges = Some(Gauges { waiting, busy });
        s.publish();
    }

    /// Marks a feed's list of its kind in progress until the guard is dropped. A feed takes it
    /// before it is spawned, so the list counts from the moment the feed exists.
    pub fn listing(&self) -> Listing {
        let mut s = self.state.lock();
        s.lists += 1;
        s.publish();
        Listing {
            state: self.state.clone(),
        }
    }

    /// Keys waiting now (not counting delayed ones).
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    /// Whether no key waits now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys waiting for a delay.
    pub fn delayed_len(&self) -> usize {
        self.state.lock().delayed.len()
    }

    /// Moves due delayed keys into the queue; returns when the next one is due.
    fn promote_due(&self, s: &mut State) -> Option<Instant> {
        let now = Instant::now();
        while let Some((&(at, seq), _)) = s.delayed.iter().next() {
            if at > now {
                return Some(at);
            }
            if let Some(key) = s.delayed.remove(&(at, seq)) {
                s.delayed_keys.remove(&key);
                if s.processing.contains(&key) {
                    s.dirty.insert(key);
                } else if s.queued.insert(key.clone()) {
                    s.queue.push_back(key);
                }
            }
        }
        None
    }

    /// Waits for the next key; `None` once the queue is shut down.
    pub async fn next(&self) -> Option<String> {
        loop {
            let notified = self.notify.notified();
            let wake_at = {
                let mut s = self.state.lock();
                if s.shut_down {
                    return None;
                }
                let wake_at = self.promote_due(&mut s);
                if let Some(key) = s.queue.pop_front() {
                    s.queued.remove(&key);
                    s.processing.insert(key.clone());
                    s.publish();
                    if !s.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
                wake_at
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks a key processed; re-queues it if it was added meanwhile.
    pub fn done(&self, key: &str) {
        let mut s = self.state.lock();
        s.processing.remove(key);
        let again = s.dirty.remove(key) && s.queued.insert(key.to_string());
        if again {
            s.queue.push_back(key.to_string());
        }
        s.publish();
        drop(s);
        if again {
            self.notify.notify_one();
        }
    }

    /// Stops the queue: `next` returns `None` from now on.
    pub fn shut_down(&self) {
        self.state.lock().shut_down = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn deduplicates_and_orders() {
        let q = WorkQueue::default();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await.as_deref(), Some("a"));
        assert_eq!(q.next().await.as_deref(), Some("b"));
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn a_key_added_while_processing_comes_back_after_done() {
        let q = WorkQueue::default();
        q.add("a");
        let k = q.next().await.unwrap();
        q.add("a");
        assert!(q.is_empty(), "not handed out twice at once");
        q.done(&k);
        assert_eq!(q.next().await.as_deref(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_keys_wait_their_time() {
        let q = WorkQueue::default();
        q.add_after("later", Duration::from_secs(10));
        q.add_after("sooner", Duration::from_secs(5));
        let start = Instant::now();
        assert_eq!(q.next().await.as_deref(), Some("sooner"));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(q.next().await.as_deref(), Some("later"));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_waits_once_at_its_earliest_time() {
        let q = WorkQueue::default();
        q.add_after("k", Duration::from_secs(10));
        q.add_after("k", Duration::from_secs(20));
        q.add_after("k", Duration::from_secs(5));
        assert_eq!(q.delayed_len(), 1);
        let start = Instant::now();
        assert_eq!(q.next().await.as_deref(), Some("k"));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(q.delayed_len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_add_of_a_key_queued_now_is_dropped() {
        let q = WorkQueue::default();
        q.add("k");
        q.add_after("k", Duration::from_secs(1));
        assert_eq!(q.delayed_len(), 0, "the queued reconcile covers it");
        assert_eq!(q.next().await.as_deref(), Some("k"));
        // Once handed out, a delayed add waits for its time again.
        q.add_after("k", Duration::from_secs(1));
        assert_eq!(q.delayed_len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_until_forgotten() {
        let q = WorkQueue::new(Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        });
        let table = [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1000), (6, 1000)];
        for (failures, ms) in table {
            let start = Instant::now();
            q.add_rate_limited("k");
            assert_eq!(q.failures("k"), failures);
            let k = q.next().await.unwrap();
            assert_eq!(
                start.elapsed(),
                Duration::from_millis(ms),
                "after {failures} failures"
            );
            q.done(&k);
        }
        q.forget("k");
        assert_eq!(q.failures("k"), 0);
    }

    #[tokio::test]
    async fn shut_down_wakes_waiters() {
        let q = WorkQueue::default();
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.next().await });
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(waiter.await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_gauges_follow_the_queue_as_it_changes() {
        let q = WorkQueue::default();
        let (waiting, busy) = (
            IntGauge::new("waiting", "w").unwrap(),
            IntGauge::new("busy", "b").unwrap(),
        );
        q.add("early");
        q.report_to(waiting.clone(), busy.clone());
        let gauges = || (waiting.get(), busy.get());
        assert_eq!(gauges(), (1, 0), "what was queued before counts");
        let list = q.listing();
        assert_eq!(gauges(), (1, 1), "a feed listing is work");
        q.add("a");
        q.add("a");
        q.add_after("later", Duration::from_secs(1));
        assert_eq!(gauges(), (2, 1), "duplicates and delayed keys do not wait");
        drop(list);
        assert_eq!(gauges(), (2, 0));
        let k = q.next().await.unwrap();
        assert_eq!(gauges(), (1, 1), "a key handed out is being reconciled");
        q.add(k.clone());
        assert_eq!(
            gauges(),
            (1, 1),
            "re-added while processing: queued after done"
        );
        q.done(&k);
        assert_eq!(gauges(), (2, 0));
        for _ in 0..2 {
            let k = q.next().await.unwrap();
            q.done(&k);
        }
        assert_eq!(gauges(), (0, 0));
        let k = q.next().await.unwrap();
        assert_eq!(k, "later");
        assert_eq!(
            gauges(),
            (0, 1),
            "a delayed key counts once it is due and taken"
        );
        q.done(&k);
        assert_eq!(gauges(), (0, 0));
    }
}
