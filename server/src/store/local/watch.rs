//! The bounded event log and watch streams.
//!
//! Every write appends one event per changed object to tree `events` (key: the
//! resourceVersion as 20 zero-padded digits) in the same atomic batch as the object, and trims
//! the oldest events beyond the capacity in that batch. [`EventLog`] mirrors the tree in memory
//! (reloaded at open), so a watch never reads the engine.
//!
//! The capacity is a number of events *and* a byte budget (the events' JSON): every event
//! holds a whole object (a delete holds its last state), so a count alone let ten thousand
//! events of multi-megabyte objects keep gigabytes in memory and on disk after the objects
//! themselves were gone.
//!
//! Watchers do not get events pushed into a channel of their own. A `tokio::sync::watch`
//! carries the newest *durable* resourceVersion; each watcher keeps a cursor and reads the ring
//! after it. Nothing is lost, a slow watcher never slows writers, and order is strictly by
//! resourceVersion. A watcher whose cursor falls behind the trimmed log ends with `Expired`.

use super::super::{EventType, ObjectFilter, StoreError, WatchEvent, WatchProgress, WatchStream};
use super::engine::EngineError;
use flotilla_migrations::EVENTS_TREE;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// Events a watcher copies out of the ring per lock.
const READ_BATCH: usize = 256;

/// One event of the log.
#[derive(Clone, Debug)]
pub(crate) struct LoggedEvent {
    pub(crate) resource_version: u64,
    pub(crate) event_type: EventType,
    /// Storage name of the kind.
    pub(crate) resource: String,
    /// Storage key of the object.
    pub(crate) key: String,
    /// The object after the change (for Deleted: its last state).
    pub(crate) object: Arc<Value>,
    /// Bytes of the event's JSON in tree `events` (what the byte budget counts).
    pub(crate) size: usize,
}

impl LoggedEvent {
    fn namespace(&self) -> Option<&str> {
        self.object
            .get("metadata")?
            .get("namespace")?
            .as_str()
            .filter(|s| !s.is_empty())
    }
}

#[derive(Serialize)]
struct RecordRef<'a> {
    #[serde(rename = "type")]
    event_type: EventType,
    resource: &'a str,
    key: &'a str,
    object: &'a Value,
}

#[derive(Deserialize)]
struct Record {
    #[serde(rename = "type")]
    event_type: EventType,
    resource: String,
    key: String,
    object: Value,
}

/// The key of an event: its resourceVersion as 20 zero-padded digits.
pub(crate) fn event_key(resource_version: u64) -> String {
    format!("{resource_version:020}")
}

/// The JSON of an event in tree `events`.
pub(crate) fn encode_event(event: &LoggedEvent) -> Result<Vec<u8>, EngineError> {
    serde_json::to_vec(&RecordRef {
        event_type: event.event_type,
        resource: &event.resource,
        key: &event.key,
        object: &event.object,
    })
    .map_err(|source| EngineError::Encode {
        tree: EVENTS_TREE.to_string(),
        source,
    })
}

/// As [`encode_event`], with the object's JSON given already encoded (the writer encoded it
/// for the object's own tree): the object is not serialized a second time.
pub(crate) fn encode_event_with(
    event: &LoggedEvent,
    object_json: &[u8],
) -> Result<Vec<u8>, EngineError> {
    #[derive(Serialize)]
    struct Head<'a> {
        #[serde(rename = "type")]
        event_type: EventType,
        resource: &'a str,
        key: &'a str,
    }
    let mut out = Vec::with_capacity(object_json.len() + event.key.len() + 64);
    serde_json::to_writer(
        &mut out,
        &Head {
            event_type: event.event_type,
            resource: &event.resource,
            key: &event.key,
        },
    )
    .map_err(|source| EngineError::Encode {
        tree: EVENTS_TREE.to_string(),
        source,
    })?;
    // `{"type":…,"key":"…"}` → `{"type":…,"key":"…","object":<object>}`
    out.pop();
    out.extend_from_slice(b",\"object\":");
    out.extend_from_slice(object_json);
    out.push(b'}');
    Ok(out)
}

/// Reads an event of tree `events`.
pub(crate) fn decode_event(key: &[u8], value: &[u8]) -> Result<LoggedEvent, EngineError> {
    let corrupt = |message: String| EngineError::Corrupt {
        tree: EVENTS_TREE.to_string(),
        key: String::from_utf8_lossy(key).into_owned(),
        message,
    };
    let resource_version = std::str::from_utf8(key)
        .ok()
        .and_then(|k| k.parse().ok())
        .ok_or_else(|| corrupt("key is not a resourceVersion".to_string()))?;
    let record: Record = serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
    Ok(LoggedEvent {
        resource_version,
        event_type: record.event_type,
        resource: record.resource,
        key: record.key,
        object: Arc::new(record.object),
        size: value.len(),
    })
}

/// The retained events and their total size.
#[derive(Default)]
struct Ring {
    events: VecDeque<Arc<LoggedEvent>>,
    bytes: usize,
}

/// How many events and bytes the log keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Capacity {
    /// Events kept (at least 1).
    pub(crate) events: usize,
    /// Bytes of event JSON kept; the newest event is kept whatever its size.
    pub(crate) bytes: usize,
}

impl Capacity {
    /// How many of the oldest of `count` events of `bytes` in all to drop so the rest fit;
    /// `sizes` are their sizes, oldest first (read only as far as the drop goes).
    pub(crate) fn excess(
        &self,
        mut count: usize,
        mut bytes: usize,
        sizes: impl Iterator<Item = usize>,
    ) -> usize {
        let mut drop = 0;
        for size in sizes {
            if count <= 1 || (count <= self.events.max(1) && bytes <= self.bytes) {
                break;
            }
            count -= 1;
            bytes = bytes.saturating_sub(size);
            drop += 1;
        }
        drop
    }
}

/// The in-memory mirror of tree `events` and the durable-resourceVersion channel.
pub(crate) struct EventLog {
    ring: RwLock<Ring>,
    capacity: Capacity,
    durable: Arc<watch::Sender<u64>>,
    closed: AtomicBool,
}

impl EventLog {
    /// A log holding `events` (ascending, already within `capacity`), with everything up to
    /// `durable_rv` visible to watchers.
    pub(crate) fn new(events: Vec<LoggedEvent>, capacity: Capacity, durable_rv: u64) -> Self {
        let (durable, _) = watch::channel(durable_rv);
        let bytes = events.iter().map(|e| e.size).sum();
        Self {
            ring: RwLock::new(Ring {
                events: events.into_iter().map(Arc::new).collect(),
                bytes,
            }),
            capacity,
            durable: Arc::new(durable),
            closed: AtomicBool::new(false),
        }
    }

    /// The sender of the newest durable resourceVersion (for the committer).
    pub(crate) fn durable_sender(&self) -> Arc<watch::Sender<u64>> {
        self.durable.clone()
    }

    /// Publishes `rv` as durable (never moves backwards).
    pub(crate) fn publish_durable(&self, rv: u64) {
        self.durable.send_if_modified(|current| {
            let newer = rv > *current;
            if newer {
                *current = rv;
            }
            newer
        });
    }

    /// The newest durable resourceVersion.
    pub(crate) fn durable_rv(&self) -> u64 {
        *self.durable.borrow()
    }

    /// The resourceVersion of the oldest retained event.
    pub(crate) fn oldest(&self) -> Option<u64> {
        self.ring.read().events.front().map(|e| e.resource_version)
    }

    /// Number of retained events.
    pub(crate) fn len(&self) -> usize {
        self.ring.read().events.len()
    }

    /// Bytes of the retained events' JSON.
    pub(crate) fn bytes(&self) -> usize {
        self.ring.read().bytes
    }

    /// The resourceVersions to drop from the log when the new events `adding` (resourceVersion
    /// and size) are appended: the oldest beyond the capacity, possibly some of the new ones.
    pub(crate) fn trim_plan(&self, adding: &[(u64, usize)]) -> Vec<u64> {
        let ring = self.ring.read();
        let all = ring
            .events
            .iter()
            .map(|e| (e.resource_version, e.size))
            .chain(adding.iter().copied());
        let count = ring.events.len() + adding.len();
        let bytes = ring.bytes + adding.iter().map(|(_, size)| size).sum::<usize>();
        let excess = self
            .capacity
            .excess(count, bytes, all.clone().map(|(_, size)| size));
        all.take(excess).map(|(rv, _)| rv).collect()
    }

    /// Appends events already written to the tree and drops the `trimmed` oldest.
    pub(crate) fn append(&self, events: Vec<LoggedEvent>, trimmed: usize) {
        let mut ring = self.ring.write();
        for event in events {
            ring.bytes += event.size;
            ring.events.push_back(Arc::new(event));
        }
        for _ in 0..trimmed {
            if let Some(old) = ring.events.pop_front() {
                ring.bytes -= old.size;
            }
        }
    }

    /// Stops every watch stream once it has delivered what is durable.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.durable.send_modify(|_| {});
    }

    /// Events with `after < rv <= upto`, at most `max`; `Err(oldest)` when some of them
    /// were trimmed already.
    fn read_after(&self, after: u64, upto: u64, max: usize) -> Result<Vec<Arc<LoggedEvent>>, u64> {
        let ring = &self.ring.read().events;
        let Some(front) = ring.front() else {
            return Ok(Vec::new());
        };
        if upto > after && front.resource_version > after + 1 {
            return Err(front.resource_version);
        }
        let start = ring.partition_point(|e| e.resource_version <= after);
        Ok(ring
            .range(start..)
            .take_while(|e| e.resource_version <= upto)
            .take(max)
            .cloned()
            .collect())
    }

    /// Checks that a watch from `from` can be served.
    pub(crate) fn check_from(&self, from: u64) -> Result<(), StoreError> {
        let ring = &self.ring.read().events;
        match ring.front() {
            Some(front) if front.resource_version > from.saturating_add(1) => {
                Err(StoreError::Expired {
                    requested: from,
                    oldest: front.resource_version,
                })
            }
            _ => Ok(()),
        }
    }
}

/// What one watcher wants.
pub(crate) struct Selector {
    pub(crate) resource: String,
    pub(crate) namespace: Option<String>,
    pub(crate) filter: Option<ObjectFilter>,
}

impl Selector {
    fn matches(&self, event: &LoggedEvent) -> bool {
        event.resource == self.resource
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| event.namespace() == Some(ns))
            && self.filter.as_ref().is_none_or(|f| f(&event.object))
    }
}

struct Watcher {
    log: Arc<EventLog>,
    durable: watch::Receiver<u64>,
    cursor: u64,
    selector: Selector,
    pending: VecDeque<WatchEvent>,
    done: bool,
    /// The cursor, published whenever nothing read up to it is still pending.
    progress: WatchProgress,
}

impl Watcher {
    async fn next(mut self) -> Option<(Result<WatchEvent, StoreError>, Self)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if self.pending.is_empty() {
                    // Published in the same poll that yields the event: whoever reads the
                    // progress next has been handed the event already.
                    self.progress.advance(self.cursor);
                }
                return Some((Ok(event), self));
            }
            self.progress.advance(self.cursor);
            if self.done {
                return None;
            }
            let durable = *self.durable.borrow_and_update();
            if durable > self.cursor {
                match self.log.read_after(self.cursor, durable, READ_BATCH) {
                    Err(oldest) => {
                        self.done = true;
                        let requested = self.cursor;
                        return Some((Err(StoreError::Expired { requested, oldest }), self));
                    }
                    Ok(events) if events.is_empty() => self.cursor = durable,
                    Ok(events) => {
                        for event in events {
                            self.cursor = event.resource_version;
                            if self.selector.matches(&event) {
                                self.pending.push_back(WatchEvent {
                                    event_type: event.event_type,
                                    object: event.object.clone(),
                                    resource_version: event.resource_version,
                                });
                            }
                        }
                    }
                }
                continue;
            }
            if self.log.closed.load(Ordering::Acquire) {
                // The last durable resourceVersion was published before the log closed:
                // deliver up to it, then end.
                if *self.durable.borrow() <= self.cursor {
                    self.done = true;
                }
                continue;
            }
            if self.durable.changed().await.is_err() {
                self.done = true;
            }
        }
    }
}

/// A stream of the events after `from` that `selector` matches, and how far it has looked: its
/// cursor moves with every durable write, matching or not.
pub(crate) fn stream(
    log: Arc<EventLog>,
    from: u64,
    selector: Selector,
) -> (WatchStream, WatchProgress) {
    let durable = log.durable.subscribe();
    let progress = WatchProgress::new(from);
    let watcher = Watcher {
        log,
        durable,
        cursor: from,
        selector,
        pending: VecDeque::new(),
        done: false,
        progress: progress.clone(),
    };
    (
        Box::pin(futures::stream::unfold(watcher, Watcher::next)),
        progress,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(rv: u64) -> LoggedEvent {
        LoggedEvent {
            resource_version: rv,
            event_type: EventType::Added,
            resource: "core/configmaps".to_string(),
            key: format!("ns/c{rv}"),
            object: Arc::new(json!({"metadata": {"name": format!("c{rv}"), "namespace": "ns"}})),
            size: 10,
        }
    }

    fn capacity(events: usize, bytes: usize) -> Capacity {
        Capacity { events, bytes }
    }

    #[test]
    fn events_round_trip_through_their_json() {
        let e = event(7);
        let bytes = encode_event(&e).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with(r#"{"type":"ADDED","resource":"core/configmaps","key":"ns/c7""#));
        let back = decode_event(event_key(7).as_bytes(), &bytes).unwrap();
        assert_eq!(back.resource_version, 7);
        assert_eq!(back.object, e.object);
        assert_eq!(event_key(7), "00000000000000000007");
        assert!(decode_event(b"x", &bytes).is_err());
        // With the object's JSON spliced in: the same bytes, read back the same.
        let spliced = encode_event_with(&e, &serde_json::to_vec(&*e.object).unwrap()).unwrap();
        assert_eq!(spliced, bytes);
        let mut odd = event(8);
        odd.key = "ns/\"quoted\"\\key".to_string();
        let spliced = encode_event_with(&odd, &serde_json::to_vec(&*odd.object).unwrap()).unwrap();
        assert_eq!(spliced, encode_event(&odd).unwrap());
    }

    #[test]
    fn trimming_keeps_the_newest_capacity_events() {
        let log = EventLog::new((1..=3).map(event).collect(), capacity(4, 1000), 3);
        let new = |rvs: &[u64]| rvs.iter().map(|&rv| (rv, 10)).collect::<Vec<_>>();
        assert_eq!(log.trim_plan(&new(&[4])), Vec::<u64>::new());
        assert_eq!(log.trim_plan(&new(&[4, 5, 6])), [1, 2]);
        assert_eq!(log.trim_plan(&new(&[4, 5, 6, 7, 8, 9])), [1, 2, 3, 4, 5]);
        log.append((4..=6).map(event).collect(), 2);
        assert_eq!(log.oldest(), Some(3));
        assert_eq!(log.len(), 4);
        assert_eq!(log.bytes(), 40);
        assert!(log.check_from(2).is_ok());
        assert!(matches!(
            log.check_from(1),
            Err(StoreError::Expired {
                requested: 1,
                oldest: 3
            })
        ));
        assert_eq!(log.read_after(1, 6, 10).unwrap_err(), 3);
        let got: Vec<u64> = log
            .read_after(3, 5, 10)
            .unwrap()
            .iter()
            .map(|e| e.resource_version)
            .collect();
        assert_eq!(got, [4, 5]);
    }

    #[tokio::test]
    async fn progress_moves_past_what_the_selector_skips_once_nothing_is_pending() {
        use futures::StreamExt;
        let other = |rv: u64| LoggedEvent {
            resource: "core/secrets".to_string(),
            ..event(rv)
        };
        let log = Arc::new(EventLog::new(Vec::new(), capacity(100, 1 << 20), 0));
        let selector = Selector {
            resource: "core/configmaps".to_string(),
            namespace: None,
            filter: None,
        };
        let (mut stream, progress) = stream(log.clone(), 0, selector);
        assert_eq!(progress.get(), 0);
        // One match among writes of another kind: the match comes, and with it the progress
        // up to everything read.
        log.append(vec![other(1), event(2), other(3)], 0);
        log.publish_durable(3);
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.resource_version, 2);
        assert_eq!(progress.get(), 3);
        // Only other kinds: nothing is yielded, the progress follows the log.
        log.append(vec![other(4), other(5)], 0);
        log.publish_durable(5);
        let nothing =
            tokio::time::timeout(std::time::Duration::from_millis(50), stream.next()).await;
        assert!(nothing.is_err(), "nothing matched");
        assert_eq!(progress.get(), 5);
        // Never ahead of a match still pending: two matches read in one batch.
        log.append(vec![event(6), event(7)], 0);
        log.publish_durable(7);
        let six = stream.next().await.unwrap().unwrap();
        assert_eq!(six.resource_version, 6);
        assert!(progress.get() < 7, "7 is read but not yet yielded");
        let seven = stream.next().await.unwrap().unwrap();
        assert_eq!(seven.resource_version, 7);
        assert_eq!(progress.get(), 7);
    }

    #[test]
    fn the_byte_budget_trims_like_the_count() {
        // (capacity, sizes oldest first, events to drop)
        let table: &[((usize, usize), &[usize], usize)] = &[
            ((10, 100), &[10, 10, 10], 0),
            ((2, 100), &[10, 10, 10], 1),
            ((10, 25), &[10, 10, 10], 1),
            ((10, 25), &[10, 10, 30], 2),
            // The newest event stays, even over the budget on its own.
            ((10, 25), &[10, 50], 1),
            ((10, 0), &[5], 0),
            ((0, 100), &[5, 5], 1),
        ];
        for ((events, bytes), sizes, want) in table {
            let got = capacity(*events, *bytes).excess(
                sizes.len(),
                sizes.iter().sum(),
                sizes.iter().copied(),
            );
            assert_eq!(
                got, *want,
                "{events} events, {bytes} bytes, sizes {sizes:?}"
            );
        }
        let big = |rv: u64| LoggedEvent {
            size: 3 << 20,
            ..event(rv)
        };
        let log = EventLog::new(vec![big(1), big(2)], capacity(10_000, 8 << 20), 2);
        assert_eq!(log.trim_plan(&[(3, 3 << 20)]), [1]);
        log.append(vec![big(3)], 1);
        assert_eq!((log.len(), log.bytes()), (2, 6 << 20));
        assert_eq!(log.oldest(), Some(2));
    }
}
