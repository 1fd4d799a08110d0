//! Creates that nobody waits on durably (the Events controllers record,
//! [`crate::store::Store::create_eventually_durable`]) committed several to one etcd
//! transaction: each etcd transaction costs every etcd member a raft entry, a WAL write and an
//! apply, and a failover records thousands of Events, so the creates queued while one
//! transaction is in flight go together in the next. Each create keeps its own precondition
//! (the key must be new) and the view's fence; when a key of the shared transaction exists,
//! its halves are committed again until the create that failed is alone, and when the
//! transaction fails otherwise each create is committed on its own, so every caller gets the
//! answer its create alone would have had. The creates of one transaction share its revision,
//! as the writes of any transaction do.

use super::super::StoreError;
use super::commit::{Fence, Write};
use super::etcd_store::Inner;
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// The most creates one transaction carries (etcd refuses more than 128 compares or operations
/// in one by default; each create brings one of each).
pub const MAX_BATCH: usize = 48;

/// The answer to one create: the revision it committed at, `None` when its key existed.
type Answer = Result<Option<u64>, StoreError>;

struct Pending {
    writes: Vec<Write>,
    answer: oneshot::Sender<Answer>,
}

/// The queue of one store view's batched creates and the task that commits them.
pub struct CreateBatcher {
    queue: mpsc::UnboundedSender<Pending>,
}

impl CreateBatcher {
    /// Starts committing the creates of the view whose writes `fence` guards (the task ends
    /// with the batcher).
    pub fn start(inner: Arc<Inner>, fence: Option<Fence>) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(inner, fence, rx));
        Self { queue }
    }

    /// Commits `writes` (one create's: the object's key, which must be new, and the kind's
    /// record when it is not stored yet) with whatever else is queued.
    pub async fn commit(&self, writes: Vec<Write>) -> Answer {
        let (answer, rx) = oneshot::channel();
        self.queue
            .send(Pending { writes, answer })
            .map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }
}

fn closed() -> StoreError {
    StoreError::Engine(Box::new(super::super::EngineError::Closed))
}

async fn run(inner: Arc<Inner>, fence: Option<Fence>, mut rx: mpsc::UnboundedReceiver<Pending>) {
    let mut next: Option<Pending> = None;
    loop {
        let first = match next.take() {
            Some(first) => first,
            None => match rx.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let mut batch = vec![first];
        let mut keys: HashSet<String> = object_keys(&batch[0]).collect();
        while batch.len() < MAX_BATCH {
            let Ok(pending) = rx.try_recv() else { break };
            // One transaction may not write a key twice: the same name waits for the next.
            if object_keys(&pending).any(|k| keys.contains(&k)) {
                next = Some(pending);
                break;
            }
            keys.extend(object_keys(&pending));
            batch.push(pending);
        }
        commit_batch(&inner, fence.as_ref(), batch).await;
    }
}

/// The keys a create must find new (its object's).
fn object_keys(pending: &Pending) -> impl Iterator<Item = String> + '_ {
    pending
        .writes
        .iter()
        .filter(|w| w.precondition.is_some())
        .map(|w| w.key.clone())
}

/// Commits `batch` in one transaction; when a create's key exists (the transaction's
/// precondition failed), the halves again, down to the create alone that answers
/// AlreadyExists; when the transaction fails otherwise, each create on its own, for its own
/// answer.
fn commit_batch<'a>(
    inner: &'a Inner,
    fence: Option<&'a Fence>,
    mut batch: Vec<Pending>,
) -> futures::future::BoxFuture<'a, ()> {
    Box::pin(async move {
        if batch.len() == 1 {
            let pending = batch.remove(0);
            let answer = inner.commit(fence, &pending.writes).await;
            let _ = pending.answer.send(answer);
            return;
        }
        match inner.commit(fence, &merged(&batch)).await {
            Ok(Some(revision)) => {
                for pending in batch {
                    let _ = pending.answer.send(Ok(Some(revision)));
                }
            }
            Ok(None) => {
                let second = batch.split_off(batch.len() / 2);
                commit_batch(inner, fence, batch).await;
                commit_batch(inner, fence, second).await;
            }
            Err(_) => {
                for pending in batch {
                    let answer = inner.commit(fence, &pending.writes).await;
                    let _ = pending.answer.send(answer);
                }
            }
        }
    })
}

/// The writes of every create in one list, each key once (a kind's record, the same whoever
/// writes it, may come with several).
fn merged(batch: &[Pending]) -> Vec<Write> {
    let mut seen = HashSet::new();
    batch
        .iter()
        .flat_map(|p| p.writes.iter())
        .filter(|w| seen.insert(w.key.clone()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::store::etcd::{EtcdStore, EtcdStoreOptions};
    use crate::store::{Store, StoreConfig, StoreError};
    use crate::testing::etcd::EtcdCluster;
    use flotilla_api::kinds::builtin_by_plural;
    use serde_json::{json, Value};
    use std::time::Duration;

    fn event(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Event",
               "metadata": {"name": name, "namespace": "default"}, "reason": "Test"})
    }

    /// Eventually durable creates made at once share transactions; each still gets its own
    /// answer (one whose name exists: AlreadyExists, the rest created and readable).
    #[tokio::test]
    async fn creates_made_at_once_share_transactions_and_keep_their_own_answers() {
        let etcd = EtcdCluster::start(1).await.expect("etcd starts");
        let client = etcd.client().await.expect("an etcd client");
        let options = EtcdStoreOptions {
            compaction_interval: Duration::ZERO,
            ..EtcdStoreOptions::default()
        };
        let store = EtcdStore::open_with_client(client, "/batch", StoreConfig::default(), options)
            .await
            .expect("the store opens");
        let events = builtin_by_plural("", "events").expect("a kind");
        store
            .create(&events, event("taken"))
            .await
            .expect("the first create");

        let (before, _) = store.durability_counts();
        let names: Vec<String> = (0..40).map(|i| format!("e{i}")).collect();
        let created = futures::future::join_all(
            names
                .iter()
                .map(|name| store.create_eventually_durable(&events, event(name))),
        )
        .await;
        assert!(created.iter().all(Result::is_ok), "{created:?}");
        let (after, _) = store.durability_counts();
        assert!(
            after - before <= 10,
            "40 creates took {} transactions",
            after - before
        );

        let names: Vec<String> = (0..40)
            .map(|i| {
                if i == 17 {
                    "taken".to_string()
                } else {
                    format!("f{i}")
                }
            })
            .collect();
        let created = futures::future::join_all(
            names
                .iter()
                .map(|name| store.create_eventually_durable(&events, event(name))),
        )
        .await;
        for (name, result) in names.iter().zip(&created) {
            match (name.as_str(), result) {
                ("taken", Err(StoreError::AlreadyExists { .. })) => {}
                ("taken", other) => panic!("taken: {other:?}"),
                (_, Ok(object)) => {
                    let rv = &object["metadata"]["resourceVersion"];
                    let stored = store
                        .get(&events, Some("default"), name)
                        .await
                        .expect("each created Event is stored");
                    assert_eq!(&stored["metadata"]["resourceVersion"], rv);
                }
                (_, Err(error)) => panic!("{name}: {error}"),
            }
        }
    }
}
