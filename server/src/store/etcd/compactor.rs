//! Kubernetes' etcd compactor (the apiserver's `etcd3/compact.go`, `--etcd-compaction-interval`):
//! etcd keeps every revision until told to compact, and etcd's own auto-compaction stays off,
//! so every server runs this loop, and the servers of a fleet coordinate through one key,
//! `<prefix>/compact_rev_key`, so that one compaction happens per interval and at least one
//! interval of history is kept.
//!
//! Each interval a server runs one [`compact_round`]: a transaction that, if the key's version
//! is still the one this server last saw, bumps it (writing the revision it is about to compact
//! to), else reads it. The server whose compare held wins the round and compacts etcd to the
//! header revision it saw one round earlier; a server that lost adopts the key's version and
//! the round's revision, and may win the next round. So after a quiet start the fleet compacts
//! every interval to a revision at least one interval old (between one and two intervals when
//! the winner changes, as Kubernetes says of failover). A server's first winning round, with no
//! earlier revision to compact to, only records.

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Kubernetes' `DefaultCompactInterval`: `--etcd-compaction-interval` when not given.
pub const DEFAULT_COMPACTION_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// The compactor's key under a fleet's prefix (a trailing `/` of the prefix is ignored).
pub fn compact_rev_key(prefix: &str) -> String {
    format!("{}/compact_rev_key", prefix.trim_end_matches('/'))
}

/// What one server remembers between rounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactState {
    /// The version of the compactor's key this server last saw (0: it has seen none), which
    /// its next transaction compares.
    pub version: i64,
    /// The store's revision at this server's last round (0: no round yet): what its next
    /// winning round compacts to.
    pub revision: i64,
}

/// What one [`compact_round`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactOutcome {
    /// This server won the round but had no earlier revision: it recorded `revision` (the
    /// store's revision now) for its next round and compacted nothing.
    Recorded { revision: i64 },
    /// This server won the round and compacted etcd to `revision`, recorded one round earlier.
    Compacted { revision: i64 },
    /// Another server bumped the key since this one last saw it: this one adopted its
    /// `version` and compacts nothing this round.
    Lost { version: i64 },
}

/// One round of the compactor, pure of timing: the caller decides when rounds happen (the
/// loop of [`Compactor`] every interval; tests back to back). `state` is updated even when the
/// compaction itself fails, as Kubernetes does, so the next round starts from what etcd said.
pub async fn compact_round(
    client: &mut Client,
    key: &[u8],
    state: &mut CompactState,
) -> Result<CompactOutcome, etcd_client::Error> {
    // The compare holds when nobody bumped the key since this server last saw it; the put
    // bumps its version (the value, the revision compacted to, is for people reading etcd).
    let txn = Txn::new()
        .when([Compare::version(key, CompareOp::Equal, state.version)])
        .and_then([TxnOp::put(key, state.revision.to_string(), None)])
        .or_else([TxnOp::get(key, None)]);
    let response = client.txn(txn).await?;
    let revision = response.header().map(|h| h.revision()).unwrap_or_default();
    if !response.succeeded() {
        let version = response
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Get(get) => Some(get.kvs().first().map_or(0, |kv| kv.version())),
                _ => None,
            })
            .unwrap_or_default();
        *state = CompactState { version, revision };
        return Ok(CompactOutcome::Lost { version });
    }
    let compact_to = state.revision;
    *state = CompactState {
        version: state.version + 1,
        revision,
    };
    if compact_to == 0 {
        // Nothing recorded yet: never compact on a server's first round.
        return Ok(CompactOutcome::Recorded { revision });
    }
    client.compact(compact_to, None).await?;
    tracing::info!(revision = compact_to, "etcd compacted");
    Ok(CompactOutcome::Compacted {
        revision: compact_to,
    })
}

/// The compactor loop of one server, on the tokio runtime; aborted when stopped or dropped.
#[derive(Debug)]
pub struct Compactor {
    task: Option<JoinHandle<()>>,
    compacted: Arc<AtomicI64>,
}

impl Compactor {
    /// Starts the loop on the current tokio runtime: a round every `interval` (the first one
    /// interval from now), on the key `<prefix>/compact_rev_key`. A zero `interval` starts
    /// nothing, as Kubernetes' `--etcd-compaction-interval 0`. A failed round is logged and the
    /// next one tries again; a round longer than the interval is abandoned.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start(client: Client, prefix: &str, interval: Duration) -> Compactor {
        let compacted = Arc::new(AtomicI64::new(0));
        if interval.is_zero() {
            tracing::info!("etcd compaction disabled (--etcd-compaction-interval 0)");
            return Compactor {
                task: None,
                compacted,
            };
        }
        let key = compact_rev_key(prefix);
        tracing::info!(key = %key, interval_ms = interval.as_millis() as u64, "etcd compactor started");
        let task = tokio::spawn(run(client, key, interval, compacted.clone()));
        Compactor {
            task: Some(task),
            compacted,
        }
    }

    /// The revision this server last compacted etcd to (0: never), for tests and metrics.
    pub fn compacted(&self) -> i64 {
        self.compacted.load(Ordering::Relaxed)
    }

    /// Stops the loop (a round under way is abandoned; etcd applies a compaction whole or not
    /// at all).
    pub fn stop(mut self) {
        self.abort();
    }

    fn abort(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.abort();
    }
}

async fn run(mut client: Client, key: String, interval: Duration, compacted: Arc<AtomicI64>) {
    let mut state = CompactState::default();
    loop {
        tokio::time::sleep(interval).await;
        let round = compact_round(&mut client, key.as_bytes(), &mut state);
        match tokio::time::timeout(interval, round).await {
            Ok(Ok(CompactOutcome::Compacted { revision })) => {
                compacted.store(revision, Ordering::Relaxed);
            }
            Ok(Ok(outcome)) => {
                tracing::debug!(?outcome, version = state.version, "etcd compaction round");
            }
            Ok(Err(error)) => {
                tracing::warn!(
                    key = %key,
                    error = %flotilla_support::error_chain(&error),
                    "etcd compaction round failed"
                );
            }
            Err(_) => {
                tracing::warn!(key = %key, timeout_ms = interval.as_millis() as u64, "etcd compaction round took longer than the interval; abandoned");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::etcd::EtcdCluster;
    use crate::testing::eventually;
    use etcd_client::GetOptions;

    /// Whether etcd refused a read because its revision was compacted away.
    fn is_compacted(error: &etcd_client::Error) -> bool {
        error
            .to_string()
            .contains("required revision has been compacted")
    }

    /// Writes a few keys, so that there is history to compact.
    async fn write_history(client: &mut Client, round: usize) {
        for i in 0..3 {
            client
                .put(format!("/history/{round}/{i}"), "x", None)
                .await
                .unwrap();
        }
    }

    #[test]
    fn the_key_lies_under_the_prefix() {
        assert_eq!(compact_rev_key("/flotilla"), "/flotilla/compact_rev_key");
        assert_eq!(compact_rev_key("/flotilla/"), "/flotilla/compact_rev_key");
        assert_eq!(compact_rev_key(""), "/compact_rev_key");
    }

    #[tokio::test]
    async fn two_compactors_share_the_key_one_wins_each_round() {
        let cluster = EtcdCluster::start(1).await.unwrap();
        let mut a_client = cluster.client().await.unwrap();
        let mut b_client = cluster.client().await.unwrap();
        let key = compact_rev_key("/flotilla");
        let key = key.as_bytes();
        let (mut a, mut b) = (CompactState::default(), CompactState::default());
        write_history(&mut a_client, 0).await;

        // Round 1: A first. It wins, but has nothing recorded: it records, compacts nothing.
        let a1 = compact_round(&mut a_client, key, &mut a).await.unwrap();
        let recorded = match a1 {
            CompactOutcome::Recorded { revision } => revision,
            other => panic!("round 1, A: {other:?}"),
        };
        assert_eq!(
            a,
            CompactState {
                version: 1,
                revision: recorded
            }
        );
        let b1 = compact_round(&mut b_client, key, &mut b).await.unwrap();
        assert_eq!(b1, CompactOutcome::Lost { version: 1 });
        assert_eq!(b.version, 1);
        // Nothing is compacted yet: the first revision still reads.
        a_client
            .get("/", Some(GetOptions::new().with_revision(1)))
            .await
            .unwrap();
        let value = a_client.get(key, None).await.unwrap();
        assert_eq!(value.kvs()[0].value(), b"0", "round 1 compacted to nothing");

        write_history(&mut a_client, 1).await;

        // Round 2: A first again. It compacts to the revision it recorded in round 1.
        let a2 = compact_round(&mut a_client, key, &mut a).await.unwrap();
        assert_eq!(a2, CompactOutcome::Compacted { revision: recorded });
        let b2 = compact_round(&mut b_client, key, &mut b).await.unwrap();
        assert_eq!(b2, CompactOutcome::Lost { version: 2 });
        let value = a_client.get(key, None).await.unwrap();
        assert_eq!(value.kvs()[0].value(), recorded.to_string().as_bytes());
        // History before the compacted revision is gone; from it on it reads.
        let err = a_client
            .get("/", Some(GetOptions::new().with_revision(recorded - 1)))
            .await
            .unwrap_err();
        assert!(is_compacted(&err), "{err}");
        a_client
            .get("/", Some(GetOptions::new().with_revision(recorded)))
            .await
            .unwrap();

        write_history(&mut a_client, 2).await;

        // Round 3: B first. It adopted the key in round 2, so it wins, and compacts to the
        // revision it saw then.
        let b_saw = b.revision;
        assert!(b_saw > recorded);
        let b3 = compact_round(&mut b_client, key, &mut b).await.unwrap();
        assert_eq!(b3, CompactOutcome::Compacted { revision: b_saw });
        let a3 = compact_round(&mut a_client, key, &mut a).await.unwrap();
        assert_eq!(a3, CompactOutcome::Lost { version: 3 });
        let err = a_client
            .get("/", Some(GetOptions::new().with_revision(b_saw - 1)))
            .await
            .unwrap_err();
        assert!(is_compacted(&err), "{err}");
    }

    #[tokio::test]
    async fn a_deleted_key_is_a_lost_round_then_starts_over() {
        let cluster = EtcdCluster::start(1).await.unwrap();
        let mut client = cluster.client().await.unwrap();
        let key = compact_rev_key("/flotilla");
        let mut state = CompactState::default();
        compact_round(&mut client, key.as_bytes(), &mut state)
            .await
            .unwrap();
        client.delete(key.as_str(), None).await.unwrap();
        let lost = compact_round(&mut client, key.as_bytes(), &mut state)
            .await
            .unwrap();
        assert_eq!(lost, CompactOutcome::Lost { version: 0 });
        let won = compact_round(&mut client, key.as_bytes(), &mut state)
            .await
            .unwrap();
        assert!(matches!(won, CompactOutcome::Compacted { .. }), "{won:?}");
    }

    #[tokio::test]
    async fn the_loop_compacts_every_interval_and_stops() {
        let cluster = EtcdCluster::start(1).await.unwrap();
        let mut client = cluster.client().await.unwrap();
        write_history(&mut client, 0).await;
        let compactor = Compactor::start(client.clone(), "/flotilla", Duration::from_millis(100));
        let revision = eventually("a compaction by the loop", Duration::from_secs(10), || {
            let done = compactor.compacted();
            async move { (done > 0).then_some(done) }
        })
        .await;
        let err = client
            .get("/", Some(GetOptions::new().with_revision(revision - 1)))
            .await
            .unwrap_err();
        assert!(is_compacted(&err), "{err}");
        compactor.stop();

        let off = Compactor::start(client, "/flotilla", Duration::ZERO);
        assert!(off.task.is_none());
        assert_eq!(off.compacted(), 0);
    }
}
