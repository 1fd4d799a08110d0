//! Watches of one kind, straight from etcd: a watch from resourceVersion R is an etcd watch
//! from revision R + 1 over the kind's (or the namespace's) key prefix, with each event's
//! previous value so a DELETED event carries the object's last state. A revision etcd has
//! compacted away answers `Expired` (410 at the API), at once when the watch starts and
//! in-stream when it falls behind. The store serves a watch so only when it starts before the
//! watch hub's ring (`watch_hub.rs`). Its [`WatchProgress`] moves with its events and etcd's
//! own progress notifications, never with a requested one: etcd before 3.4.24 and 3.5.8 may
//! send that answer ahead of events still on their way (etcd issue 15220).

use super::super::{EventType, ObjectFilter, StoreError, WatchEvent, WatchProgress, WatchStream};
use super::commit::{decode, etcd_error, revision_of};
use etcd_client::{Client, EventType as EtcdEventType, GetOptions, WatchOptions};
use futures::StreamExt;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How long a closed store's watch waits for the changes before the close.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Events buffered between etcd and a slow reader.
const BUFFER: usize = 256;

/// What a watch selects.
pub struct Selection {
    /// The etcd key prefix (a kind, or one namespace of it).
    pub prefix: String,
    /// Only objects for which this is true.
    pub filter: Option<ObjectFilter>,
    /// Raised to each event's revision before the event is handed over (the store's reads
    /// for controllers wait for the watch cache to reach it).
    pub delivered: Arc<AtomicU64>,
}

/// Fails with `Expired` when revision `from` + 1 is no longer in etcd's history.
pub async fn check_not_compacted(
    client: &Client,
    probe_key: &str,
    from: u64,
) -> Result<(), StoreError> {
    let mut kv = client.kv_client();
    let at = i64::try_from(from + 1).unwrap_or(i64::MAX);
    match kv
        .get(
            probe_key,
            Some(GetOptions::new().with_count_only().with_revision(at)),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if is_compacted(&error) => Err(StoreError::Expired {
            requested: from,
            oldest: compacted_revision(client, probe_key, from + 1).await,
        }),
        // A revision ahead of the store (a client that saw another fleet) is not an error
        // here: the watch simply starts there.
        Err(error) if error.to_string().contains("future revision") => Ok(()),
        Err(error) => Err(etcd_error("check a watch's revision")(error)),
    }
}

fn is_compacted(error: &etcd_client::Error) -> bool {
    error.to_string().contains("compacted")
}

/// The oldest revision etcd still serves, learnt from a watch that starts too early.
async fn compacted_revision(client: &Client, key: &str, from: u64) -> u64 {
    let mut watcher = client.watch_client();
    let options = WatchOptions::new().with_start_revision(i64::try_from(from).unwrap_or(1).max(1));
    let Ok(mut stream) = watcher.watch(key, Some(options)).await else {
        return 0;
    };
    let learn = async {
        while let Ok(Some(response)) = stream.message().await {
            if response.compact_revision() > 0 {
                return revision_of(response.compact_revision());
            }
        }
        0
    };
    tokio::time::timeout(Duration::from_secs(2), learn)
        .await
        .unwrap_or(0)
}

/// Starts a watch of `selection` after revision `from`. Once `closing` holds a revision (the
/// store was closed), the stream delivers the changes up to it and ends.
pub async fn start(
    client: &Client,
    selection: Selection,
    from: u64,
    mut closing: watch::Receiver<Option<u64>>,
) -> Result<(WatchStream, WatchProgress), StoreError> {
    let mut watcher = client.watch_client();
    let options = WatchOptions::new()
        .with_prefix()
        .with_prev_key()
        .with_progress_notify()
        .with_start_revision(i64::try_from(from + 1).unwrap_or(i64::MAX));
    let stream = watcher
        .watch(selection.prefix.as_str(), Some(options))
        .await
        .map_err(etcd_error("start a watch"))?;
    // The request half stays open with the watch.
    let (_requests, mut responses) = stream.split();
    let progress = WatchProgress::new(from);
    let seen = progress.clone();
    let (tx, rx) = mpsc::channel::<Result<WatchEvent, StoreError>>(BUFFER);
    tokio::spawn(async move {
        let mut drain_until: Option<(u64, tokio::time::Instant)> = None;
        loop {
            if let Some((last, deadline)) = drain_until {
                if seen.get() >= last || tokio::time::Instant::now() >= deadline {
                    return;
                }
            }
            tokio::select! {
                changed = closing.changed(), if drain_until.is_none() => {
                    let last = if changed.is_err() { Some(0) } else { *closing.borrow() };
                    if let Some(last) = last {
                        drain_until = Some((last, tokio::time::Instant::now() + DRAIN_TIMEOUT));
                    }
                }
                () = sleep_until(drain_until.map(|(_, deadline)| deadline)) => return,
                () = tx.closed() => return,
                message = responses.message() => {
                    let response = match message {
                        Ok(Some(response)) => response,
                        Ok(None) => {
                            let _ = tx.send(Err(StoreError::Engine(Box::new(
                                super::super::EngineError::Closed,
                            )))).await;
                            return;
                        }
                        Err(error) => {
                            let _ = tx.send(Err(etcd_error("watch")(error))).await;
                            return;
                        }
                    };
                    if response.canceled() {
                        let error = if response.compact_revision() > 0 {
                            StoreError::Expired {
                                requested: seen.get(),
                                oldest: revision_of(response.compact_revision()),
                            }
                        } else {
                            StoreError::Engine(Box::new(super::super::EngineError::Closed))
                        };
                        let _ = tx.send(Err(error)).await;
                        return;
                    }
                    for event in response.events() {
                        let Some(kv) = event.kv() else { continue };
                        let revision = revision_of(kv.mod_revision());
                        let decoded = match event.event_type() {
                            EtcdEventType::Put => decode(kv.key(), kv.value(), kv.mod_revision())
                                .map(|object| {
                                    let kind = if kv.create_revision() == kv.mod_revision() {
                                        EventType::Added
                                    } else {
                                        EventType::Modified
                                    };
                                    (kind, object)
                                }),
                            EtcdEventType::Delete => deleted_state(kv.key(), event.prev_kv(), kv.mod_revision())
                                .map(|object| (EventType::Deleted, object)),
                        };
                        let (event_type, object) = match decoded {
                            Ok(decoded) => decoded,
                            Err(error) => {
                                let _ = tx.send(Err(error)).await;
                                return;
                            }
                        };
                        if selection.filter.as_ref().is_none_or(|f| f(&object)) {
                            selection.delivered.fetch_max(revision, Ordering::AcqRel);
                            let event = WatchEvent {
                                event_type,
                                object: Arc::new(object),
                                resource_version: revision,
                            };
                            if tx.send(Ok(event)).await.is_err() {
                                return;
                            }
                        }
                        seen.advance(revision);
                    }
                    if response.events().is_empty() && !response.created() {
                        if let Some(header) = response.header() {
                            seen.advance(revision_of(header.revision()));
                        }
                    }
                }
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).boxed();
    Ok((stream, progress))
}

/// Sleeps until `deadline`, forever when there is none.
pub async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The state a DELETED event carries: the last stored state, its resourceVersion the
/// deletion's revision.
pub fn deleted_state(
    key: &[u8],
    prev: Option<&etcd_client::KeyValue>,
    revision: i64,
) -> Result<Value, StoreError> {
    match prev {
        Some(prev) => decode(key, prev.value(), revision),
        // etcd compacted the previous value away: the event still names the object.
        None => Ok(serde_json::json!({
            "metadata": {"name": String::from_utf8_lossy(key).rsplit('/').next().unwrap_or_default(),
                         "resourceVersion": revision.to_string()}
        })),
    }
}
