//! [`RevisionProbe`]: etcd's current revision for reads that must be fresh (KEP-2340's
//! consistent reads from cache). A read learns the revision with one linearizable count-only
//! get of one key, then waits until the watch cache has reached it. Concurrent reads share a
//! request, but only one sent after they began: a revision learnt before a read began could
//! be older than a write acknowledged before it began.
//!
//! One request is in flight at a time. A read that arrives while one is in flight waits for
//! it; if that request was sent after the read began, the read takes its answer, otherwise
//! the first such read sends the next request and the others that began before it share it.

use super::super::StoreError;
use super::commit;
use etcd_client::Client;
use std::sync::atomic::{AtomicU64, Ordering};

/// The answer of the last request that completed.
#[derive(Default)]
struct Answered {
    /// The request's number (requests are numbered from 1 in the order they are sent).
    request: u64,
    /// The revision it answered.
    revision: u64,
}

/// Coalesced requests for etcd's current revision. See the module.
pub struct RevisionProbe {
    client: Client,
    /// The key the count-only get reads (any key: only the header's revision is used).
    key: String,
    /// Requests sent so far; a request numbered above a read's start was sent after it.
    sent: AtomicU64,
    /// Held while a request is in flight.
    answered: tokio::sync::Mutex<Answered>,
}

impl RevisionProbe {
    /// A probe over `client` that reads `key`.
    pub fn new(client: Client, key: String) -> Self {
        Self {
            client,
            key,
            sent: AtomicU64::new(0),
            answered: tokio::sync::Mutex::new(Answered::default()),
        }
    }

    /// etcd's current revision, learnt by a request sent after this call began.
    pub async fn current(&self) -> Result<u64, StoreError> {
        let began = self.sent.load(Ordering::Acquire);
        let mut answered = self.answered.lock().await;
        if answered.request > began {
            return Ok(answered.revision);
        }
        // Numbered before it is sent: a read that saw the old count began before the send.
        let request = self.sent.fetch_add(1, Ordering::AcqRel) + 1;
        let revision = commit::current_revision(&self.client, &self.key).await?;
        *answered = Answered { request, revision };
        Ok(revision)
    }

    /// Requests sent so far (for tests and benchmarks).
    pub fn requests(&self) -> u64 {
        self.sent.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::etcd::EtcdCluster;
    use std::sync::Arc;

    /// Reads that begin together share requests; a read never takes a revision learnt before
    /// it began, so it sees every write acknowledged before it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_reads_share_requests_sent_after_they_began() {
        let etcd = EtcdCluster::start(1).await.expect("etcd starts");
        let client = etcd.client().await.expect("an etcd client");
        let probe = Arc::new(RevisionProbe::new(client.clone(), "/probe".to_string()));
        let mut kv = client.kv_client();
        for round in 0..20 {
            let written = kv
                .put("/probe-test/key", format!("{round}"), None)
                .await
                .expect("the put")
                .header()
                .map_or(0, |h| commit::revision_of(h.revision()));
            let before = probe.requests();
            let reads: Vec<_> = (0..32)
                .map(|_| {
                    let probe = probe.clone();
                    tokio::spawn(async move { probe.current().await })
                })
                .collect();
            for read in reads {
                let revision = read.await.expect("the task").expect("the revision");
                assert!(
                    revision >= written,
                    "round {round}: answered {revision}, below the write at {written}"
                );
            }
            let sent = probe.requests() - before;
            assert!(
                (1..32).contains(&sent),
                "round {round}: 32 reads sent {sent} requests"
            );
        }
    }
}
