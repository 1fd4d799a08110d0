//! Watches served from the mirror's one etcd watch (kube-apiserver's cacher): the mirror
//! hands every change it follows, decoded once, to the [`WatchHub`], which keeps the latest
//! [`RING_CAPACITY`] of them in order. A watch from resourceVersion R that the ring still
//! covers replays the ring's changes after R under its key prefix and then follows new ones,
//! without a watch or a decode of its own on etcd; one from before the ring (or after the
//! mirror had to list again) is left to an etcd watch of its own (`watch_stream.rs`), which
//! answers `Expired` when etcd compacted it. A watch that falls so far behind that the ring
//! dropped what it has not delivered ends with `Expired`, as a watch too slow for
//! kube-apiserver's cache is closed: the client lists again. The ring holds at most
//! [`RING_CAPACITY`] changes and [`RING_BYTES`] of their stored values.
//!
//! A watch's progress is the hub's position (the mirror's) once it delivered every change up
//! to it, so it moves with every write of the fleet and with the mirror's progress requests.

use super::super::{EventType, StoreError, WatchEvent, WatchProgress, WatchStream};
use super::watch_stream::{sleep_until, Selection};
use futures::StreamExt;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Changes the hub keeps for watches to start from or catch up with.
pub const RING_CAPACITY: usize = 16_384;

/// The most stored bytes (etcd's values) of the changes the hub keeps: each change holds an
/// object version the cache may have replaced already, so big objects shorten the ring
/// instead of growing the server (decoded JSON takes a few times its stored size).
pub const RING_BYTES: usize = 64 << 20;

/// Changes a watch takes from the ring at a time (the hub's lock is held meanwhile).
const TAKE: usize = 512;

/// Events buffered between the hub and a slow reader.
const BUFFER: usize = 256;

/// How long a closed store's watch waits for the changes before the close.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// One change of an object, as the mirror followed it.
#[derive(Clone, Debug)]
pub struct HubEvent {
    /// The object's etcd key.
    pub key: String,
    /// The change, as a watch delivers it.
    pub event: WatchEvent,
    /// The size of the object's stored value (what the ring's byte bound counts).
    pub bytes: usize,
}

struct Ring {
    events: VecDeque<Arc<HubEvent>>,
    /// The sequence number of `events[0]` (each change gets the next one).
    first_seq: u64,
    /// Every change after this revision is in `events` (or was dropped from its front).
    floor: u64,
    /// Every change up to this revision is in `events`.
    position: u64,
    /// Counts the lists again: a watch of an older epoch missed what the relist skipped.
    epoch: u64,
    /// The stored bytes of `events`.
    bytes: usize,
}

impl Ring {
    fn end_seq(&self) -> u64 {
        self.first_seq + self.events.len() as u64
    }

    /// The sequence number of the first change after revision `from`.
    fn seq_after(&self, from: u64) -> u64 {
        let index = self
            .events
            .partition_point(|e| e.event.resource_version <= from);
        self.first_seq + index as u64
    }
}

/// The ring of recent changes and the watches on it. See the module.
pub struct WatchHub {
    ring: Mutex<Ring>,
    /// The ring's end sequence number, for watches waiting for more.
    changed: watch::Sender<u64>,
}

/// Where a watch stands in the ring.
struct Cursor {
    epoch: u64,
    /// The next change to look at.
    seq: u64,
    /// Every matching change up to this revision has been delivered.
    delivered: u64,
    /// The revision the watch starts after: a change up to it that reaches the ring only
    /// after the watch began (the mirror was behind the client) is not delivered.
    after: u64,
}

/// What a watch's turn at the ring found.
enum Take {
    /// Changes to filter and deliver, and the position the watch reaches when they are out.
    Events(Vec<Arc<HubEvent>>, Option<u64>),
    /// The ring dropped what the watch still needed (or the mirror listed again).
    Behind { oldest: u64 },
}

impl Default for WatchHub {
    fn default() -> Self {
        Self {
            ring: Mutex::new(Ring {
                events: VecDeque::new(),
                first_seq: 0,
                floor: 0,
                position: 0,
                epoch: 0,
                bytes: 0,
            }),
            changed: watch::channel(0).0,
        }
    }
}

impl WatchHub {
    /// Forgets every change: the mirror listed the store at `revision`, and what changed
    /// before it is unknown. Watches that were open end with `Expired`.
    pub fn reset(&self, revision: u64) {
        let end = {
            let mut ring = self.ring.lock();
            ring.first_seq = ring.end_seq();
            ring.events.clear();
            ring.bytes = 0;
            ring.floor = revision;
            ring.position = revision;
            ring.epoch += 1;
            ring.end_seq()
        };
        self.changed.send_replace(end);
    }

    /// Appends the changes up to `revision`, in order (`revision` may carry no change: a
    /// progress notification).
    pub fn publish(&self, changes: Vec<HubEvent>, revision: u64) {
        let end = {
            let mut ring = self.ring.lock();
            for change in changes {
                ring.bytes += change.bytes;
                ring.events.push_back(Arc::new(change));
            }
            while ring.events.len() > RING_CAPACITY
                || (ring.bytes > RING_BYTES && ring.events.len() > 1)
            {
                let Some(dropped) = ring.events.pop_front() else {
                    break;
                };
                ring.first_seq += 1;
                ring.bytes -= dropped.bytes;
                ring.floor = ring.floor.max(dropped.event.resource_version);
            }
            ring.position = ring.position.max(revision);
            ring.end_seq()
        };
        self.changed.send_replace(end);
    }

    /// The revision up to which the hub holds every change.
    #[cfg(test)]
    pub fn position(&self) -> u64 {
        self.ring.lock().position
    }

    /// Starts a watch of `selection` after revision `from`, or hands `selection` back when the
    /// ring no longer covers `from` (the caller watches etcd instead). Once `closing` holds a revision
    /// (the store closed), the watch delivers the changes up to it and ends.
    pub fn watch(
        self: &Arc<Self>,
        selection: Selection,
        from: u64,
        closing: watch::Receiver<Option<u64>>,
    ) -> Result<(WatchStream, WatchProgress), Selection> {
        let cursor = {
            let ring = self.ring.lock();
            if from < ring.floor {
                return Err(selection);
            }
            Cursor {
                epoch: ring.epoch,
                seq: ring.seq_after(from),
                delivered: from,
                after: from,
            }
        };
        let progress = WatchProgress::new(from);
        let (tx, rx) = mpsc::channel(BUFFER);
        tokio::spawn(
            self.clone()
                .serve(selection, cursor, progress.clone(), tx, closing),
        );
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx).boxed();
        Ok((stream, progress))
    }

    /// The changes after `cursor`, at most [`TAKE`] of them.
    fn take(&self, cursor: &Cursor) -> Take {
        let ring = self.ring.lock();
        if ring.epoch != cursor.epoch || cursor.seq < ring.first_seq {
            return Take::Behind { oldest: ring.floor };
        }
        let start = usize::try_from(cursor.seq - ring.first_seq).unwrap_or(usize::MAX);
        let events: Vec<_> = ring.events.iter().skip(start).take(TAKE).cloned().collect();
        let at_end = start + events.len() >= ring.events.len();
        // The position is reached only with the ring's last change out; a batch cut short
        // reaches only the revisions it completes.
        let reaches = if at_end { Some(ring.position) } else { None };
        Take::Events(events, reaches)
    }

    /// Delivers the ring's changes to one watch until it is dropped or the store closes.
    async fn serve(
        self: Arc<Self>,
        selection: Selection,
        mut cursor: Cursor,
        progress: WatchProgress,
        tx: mpsc::Sender<Result<WatchEvent, StoreError>>,
        mut closing: watch::Receiver<Option<u64>>,
    ) {
        let mut changed = self.changed.subscribe();
        let mut drain_until: Option<(u64, tokio::time::Instant)> = None;
        loop {
            match self.take(&cursor) {
                Take::Behind { oldest } => {
                    let _ = tx
                        .send(Err(StoreError::Expired {
                            requested: cursor.delivered,
                            oldest,
                        }))
                        .await;
                    return;
                }
                Take::Events(events, reaches) => {
                    cursor.seq += events.len() as u64;
                    for change in &events {
                        let revision = change.event.resource_version;
                        if revision > cursor.after
                            && change.key.starts_with(&selection.prefix)
                            && selection
                                .filter
                                .as_ref()
                                .is_none_or(|f| f(&change.event.object))
                        {
                            selection.delivered.fetch_max(revision, Ordering::AcqRel);
                            if tx.send(Ok(change.event.clone())).await.is_err() {
                                return;
                            }
                        }
                        cursor.delivered = cursor.delivered.max(revision);
                    }
                    match reaches {
                        Some(position) => {
                            cursor.delivered = cursor.delivered.max(position);
                            progress.advance(cursor.delivered);
                        }
                        // More is waiting in the ring: take it before anything else.
                        None => continue,
                    }
                }
            }
            if let Some((last, deadline)) = drain_until {
                if cursor.delivered >= last || tokio::time::Instant::now() >= deadline {
                    return;
                }
            }
            let deadline = drain_until.map(|(_, deadline)| deadline);
            tokio::select! {
                moved = changed.changed() => {
                    if moved.is_err() {
                        return;
                    }
                }
                closed = closing.changed(), if drain_until.is_none() => {
                    let last = if closed.is_err() { Some(0) } else { *closing.borrow() };
                    if let Some(last) = last {
                        drain_until = Some((last, tokio::time::Instant::now() + DRAIN_TIMEOUT));
                    }
                }
                () = sleep_until(deadline) => return,
                () = tx.closed() => return,
            }
        }
    }
}

/// The event a put of an object makes: Added when the put created the key.
pub fn put_event(created: bool) -> EventType {
    if created {
        EventType::Added
    } else {
        EventType::Modified
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::AtomicU64;

    const CONFIGMAPS: &str = "/f/objects/core/configmaps/";

    fn change(ns: &str, name: &str, revision: u64, event_type: EventType) -> HubEvent {
        HubEvent {
            key: format!("{CONFIGMAPS}{ns}/{name}"),
            event: WatchEvent {
                event_type,
                object: Arc::new(json!({"metadata": {"name": name, "namespace": ns,
                    "resourceVersion": revision.to_string()}})),
                resource_version: revision,
            },
            bytes: 100,
        }
    }

    fn selection(prefix: &str) -> Selection {
        Selection {
            prefix: prefix.to_string(),
            filter: None,
            delivered: Arc::new(AtomicU64::new(0)),
        }
    }

    fn never_closing() -> watch::Receiver<Option<u64>> {
        let (tx, rx) = watch::channel(None);
        std::mem::forget(tx);
        rx
    }

    async fn next(stream: &mut WatchStream) -> Result<(String, u64), StoreError> {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event within 5 s")
            .expect("the stream goes on")?;
        let name = event.object["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        Ok((name.to_string(), event.resource_version))
    }

    /// A watch replays the ring's changes after its revision under its prefix, then follows
    /// new ones; its progress reaches the hub's position once it delivered everything.
    #[tokio::test]
    async fn a_watch_replays_the_ring_after_its_revision_then_follows() {
        let hub = Arc::new(WatchHub::default());
        hub.reset(10);
        hub.publish(
            vec![
                change("a", "x", 11, EventType::Added),
                change("b", "y", 12, EventType::Added),
            ],
            12,
        );
        // Two keys in one transaction share a revision.
        hub.publish(
            vec![
                change("a", "x", 13, EventType::Modified),
                change("a", "z", 13, EventType::Added),
            ],
            13,
        );
        let Ok((mut all, progress)) = hub.watch(selection(CONFIGMAPS), 11, never_closing()) else {
            panic!("revision 11 is in the ring");
        };
        assert_eq!(next(&mut all).await.ok(), Some(("y".to_string(), 12)));
        assert_eq!(next(&mut all).await.ok(), Some(("x".to_string(), 13)));
        assert_eq!(next(&mut all).await.ok(), Some(("z".to_string(), 13)));
        let Ok((mut ns_a, _)) =
            hub.watch(selection(&format!("{CONFIGMAPS}a/")), 10, never_closing())
        else {
            panic!("revision 10 is the ring's floor");
        };
        assert_eq!(next(&mut ns_a).await.ok(), Some(("x".to_string(), 11)));
        assert_eq!(next(&mut ns_a).await.ok(), Some(("x".to_string(), 13)));
        assert_eq!(next(&mut ns_a).await.ok(), Some(("z".to_string(), 13)));

        // A progress notification moves the position without a change.
        hub.publish(Vec::new(), 20);
        crate::testing::eventually("progress at 20", Duration::from_secs(5), || async {
            match progress.get() {
                20 => Ok(()),
                other => Err(format!("progress {other}")),
            }
        })
        .await;
        hub.publish(vec![change("b", "w", 21, EventType::Deleted)], 21);
        assert_eq!(next(&mut all).await.ok(), Some(("w".to_string(), 21)));
    }

    /// A watch from a revision the mirror has not reached yet (the client read it through
    /// etcd or another server) delivers only the changes after it.
    #[tokio::test]
    async fn a_watch_ahead_of_the_mirror_skips_what_it_already_saw() {
        let hub = Arc::new(WatchHub::default());
        hub.reset(10);
        let Ok((mut stream, _)) = hub.watch(selection(CONFIGMAPS), 12, never_closing()) else {
            panic!("a revision ahead of the ring is served");
        };
        hub.publish(vec![change("a", "seen", 11, EventType::Added)], 11);
        hub.publish(vec![change("a", "seen", 12, EventType::Modified)], 12);
        hub.publish(vec![change("a", "new", 13, EventType::Added)], 13);
        assert_eq!(next(&mut stream).await.ok(), Some(("new".to_string(), 13)));
    }

    /// A watch from before the ring's floor is handed back (it reads etcd's history); one that
    /// falls behind the ring, or is open when the mirror lists again, ends with Expired.
    #[tokio::test]
    async fn a_watch_the_ring_cannot_serve_is_refused_or_expires() {
        let hub = Arc::new(WatchHub::default());
        hub.reset(100);
        assert!(
            hub.watch(selection(CONFIGMAPS), 99, never_closing())
                .is_err(),
            "revision 99 is before the ring"
        );

        // A reader that never reads: the ring moves on past what it has not taken.
        let Ok((mut slow, _)) = hub.watch(selection(CONFIGMAPS), 100, never_closing()) else {
            panic!("the floor is served");
        };
        let total = RING_CAPACITY + BUFFER + 2 * TAKE;
        for n in 0..total {
            let revision = 101 + n as u64;
            hub.publish(
                vec![change("a", &format!("o{n}"), revision, EventType::Added)],
                revision,
            );
        }
        let mut delivered = 0;
        let expired = loop {
            match next(&mut slow).await {
                Ok(_) => delivered += 1,
                Err(error) => break error,
            }
        };
        assert!(
            matches!(expired, StoreError::Expired { .. }),
            "{expired:?} after {delivered}"
        );
        assert!(delivered < total, "{delivered} of {total} delivered");

        let Ok((mut open, _)) = hub.watch(selection(CONFIGMAPS), hub.position(), never_closing())
        else {
            panic!("the position is served");
        };
        hub.reset(hub.position() + 50);
        assert!(
            matches!(next(&mut open).await, Err(StoreError::Expired { .. })),
            "a relist ends the watches open across it"
        );
    }

    /// Big objects shorten the ring instead of growing it: past [`RING_BYTES`] the oldest
    /// changes go, and a watch from before them reads etcd instead.
    #[tokio::test]
    async fn the_ring_keeps_at_most_its_bytes() {
        let hub = Arc::new(WatchHub::default());
        hub.reset(10);
        let big = RING_BYTES / 4;
        for revision in 11..=16 {
            let mut event = change("a", &format!("o{revision}"), revision, EventType::Added);
            event.bytes = big;
            hub.publish(vec![event], revision);
        }
        let ring = hub.ring.lock();
        assert_eq!(ring.events.len(), 4, "four of a quarter each fit");
        assert_eq!(ring.bytes, RING_BYTES);
        assert_eq!(ring.floor, 12);
        drop(ring);
        assert!(hub
            .watch(selection(CONFIGMAPS), 11, never_closing())
            .is_err());
        assert!(hub
            .watch(selection(CONFIGMAPS), 12, never_closing())
            .is_ok());
    }

    /// A closed store's watch delivers the changes up to the last write, then ends.
    #[tokio::test]
    async fn a_closed_stores_watch_delivers_up_to_the_last_write_then_ends() {
        let hub = Arc::new(WatchHub::default());
        hub.reset(1);
        let (closing, rx) = watch::channel(None);
        let Ok((mut stream, _)) = hub.watch(selection(CONFIGMAPS), 1, rx) else {
            panic!("served");
        };
        closing.send_replace(Some(3));
        hub.publish(vec![change("a", "x", 2, EventType::Added)], 2);
        hub.publish(vec![change("a", "y", 3, EventType::Added)], 3);
        assert_eq!(next(&mut stream).await.ok(), Some(("x".to_string(), 2)));
        assert_eq!(next(&mut stream).await.ok(), Some(("y".to_string(), 3)));
        let end = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
        assert!(
            matches!(end, Ok(None)),
            "the stream ends after the last write"
        );
    }
}
