//! Leader election through an etcd lease, etcd's own algorithm (`concurrency.Election`): a
//! candidate puts `<prefix>/leader/<lease id>` under its lease and leads once every key under
//! `<prefix>/leader/` created before its own is gone. A term is that key and its create
//! revision; a [`Fence`] on them makes every write of the term conditional on the term still
//! lasting, which Kubernetes' lease-object election does not give.
//!
//! The lease is renewed every retry period. A leader whose last successful renewal was sent
//! longer than the renew deadline ago ends its term ([`TermEnd::RenewDeadline`]) before etcd
//! can expire its lease, so a server that lost etcd stops acting before another may start.
//! A fenced write refused ends the term at once ([`TermEnd::Fenced`]). [`Term::resign`]
//! deletes the key, so the next candidate leads at once.

use super::timing::LeaderElectionTiming;
use crate::store::etcd::Fence;
use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, WatchOptions,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Why a term ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TermEnd {
    /// No renewal succeeded within the renew deadline.
    RenewDeadline,
    /// etcd says the lease is gone (it expired, or was revoked).
    LeaseLost,
    /// A write of the term was refused by its fence: another server leads.
    Fenced,
    /// This server resigned.
    Resigned,
}

impl TermEnd {
    /// The metric label and log word.
    pub fn as_str(self) -> &'static str {
        match self {
            TermEnd::RenewDeadline => "renew_deadline",
            TermEnd::LeaseLost => "lease_lost",
            TermEnd::Fenced => "fenced",
            TermEnd::Resigned => "resigned",
        }
    }
}

/// Why a campaign failed (the caller waits a retry period and campaigns again).
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// etcd refused or did not answer.
    #[error("etcd failed to {op}")]
    Etcd {
        op: &'static str,
        #[source]
        source: etcd_client::Error,
    },
    /// The candidate's lease lapsed while it waited.
    #[error("the candidate's lease lapsed while it waited ({0:?})")]
    Lapsed(TermEnd),
}

fn etcd(op: &'static str) -> impl Fn(etcd_client::Error) -> ElectionError {
    move |source| ElectionError::Etcd { op, source }
}

/// A server's candidacy in the fleet's election.
pub struct Elector {
    client: Client,
    prefix: String,
    identity: String,
    timing: LeaderElectionTiming,
}

/// One term of this server as leader.
pub struct Term {
    key: Vec<u8>,
    revision: i64,
    /// The store revision at which this server saw that it leads: every write of an earlier
    /// leader's term committed before it.
    won_at: i64,
    lease: i64,
    /// When the term started (this server's clock).
    pub since: Instant,
    end: watch::Sender<Option<TermEnd>>,
    keeper: JoinHandle<()>,
    client: Client,
    refusals: Arc<AtomicU64>,
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Term")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("revision", &self.revision)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Elector {
    /// A candidate of the fleet under `fleet_prefix` (the store's `--etcd-prefix`), named
    /// `identity` in the election key's value (for operators: who leads).
    pub fn new(
        client: Client,
        fleet_prefix: &str,
        identity: &str,
        timing: LeaderElectionTiming,
    ) -> Self {
        Self {
            client,
            prefix: election_prefix(fleet_prefix),
            identity: identity.to_string(),
            timing,
        }
    }

    /// The timing of this election.
    pub fn timing(&self) -> LeaderElectionTiming {
        self.timing
    }

    /// Campaigns until this server leads (`Some(term)`) or `stop` turns true (`None`, the
    /// candidacy withdrawn).
    pub async fn campaign(
        &self,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Option<Term>, ElectionError> {
        let mut leases = self.client.lease_client();
        let granted_at = Instant::now();
        let lease = leases
            .grant(self.timing.lease_seconds(), None)
            .await
            .map_err(etcd("grant the election lease"))?
            .id();
        let (end, mut ended) = watch::channel(None);
        let keeper = tokio::spawn(keep_alive(
            self.client.clone(),
            lease,
            self.timing,
            granted_at,
            end.clone(),
        ));
        let term = Term {
            key: format!("{}{lease:016x}", self.prefix).into_bytes(),
            revision: 0,
            won_at: 0,
            lease,
            since: Instant::now(),
            end,
            keeper,
            client: self.client.clone(),
            refusals: Arc::new(AtomicU64::new(0)),
        };
        let outcome = tokio::select! {
            won = self.win(term.key.clone(), lease) => won.map(Some),
            lapsed = ended.wait_for(Option::is_some) => {
                let why = lapsed.ok().and_then(|w| *w).unwrap_or(TermEnd::LeaseLost);
                Err(ElectionError::Lapsed(why))
            }
            _ = stop.wait_for(|s| *s) => Ok(None),
        };
        match outcome {
            Ok(Some((revision, won_at))) => {
                let mut term = term;
                term.revision = revision;
                term.won_at = won_at;
                term.since = Instant::now();
                Ok(Some(term))
            }
            Ok(None) => {
                term.resign().await;
                Ok(None)
            }
            Err(error) => {
                term.resign().await;
                Err(error)
            }
        }
    }

    /// Puts the candidate's key and waits until every earlier candidate's key is gone;
    /// answers the key's create revision and the revision at which it saw none left.
    async fn win(&self, key: Vec<u8>, lease: i64) -> Result<(i64, i64), ElectionError> {
        let mut kv = self.client.kv_client();
        let txn = Txn::new()
            .when(vec![Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then(vec![TxnOp::put(
                key.clone(),
                self.identity.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else(vec![TxnOp::get(key.clone(), None)]);
        let response = kv.txn(txn).await.map_err(etcd("put the election key"))?;
        let revision = if response.succeeded() {
            response.header().map_or(0, |h| h.revision())
        } else {
            response
                .op_responses()
                .iter()
                .find_map(|op| match op {
                    etcd_client::TxnOpResponse::Get(get) => {
                        get.kvs().first().map(|kv| kv.create_revision())
                    }
                    _ => None,
                })
                .unwrap_or(0)
        };
        loop {
            // The newest key created before ours: we lead once it is gone (and, in turn, all
            // before it).
            let options = GetOptions::new()
                .with_prefix()
                .with_max_create_revision(revision - 1)
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1);
            let response = kv
                .get(self.prefix.clone(), Some(options))
                .await
                .map_err(etcd("read the election"))?;
            let Some(ahead) = response.kvs().first() else {
                tracing::info!(
                    identity = %self.identity,
                    key = %String::from_utf8_lossy(&key),
                    revision,
                    "elected leader"
                );
                return Ok((revision, response.header().map_or(0, |h| h.revision())));
            };
            let ahead_key = ahead.key().to_vec();
            let header = response.header().map_or(0, |h| h.revision());
            tracing::debug!(
                ahead = %String::from_utf8_lossy(&ahead_key),
                "waiting for the leader's term to end"
            );
            let mut watcher = self.client.watch_client();
            let mut stream = watcher
                .watch(
                    ahead_key,
                    Some(WatchOptions::new().with_start_revision(header + 1)),
                )
                .await
                .map_err(etcd("watch the leader"))?;
            'deleted: loop {
                let Some(message) = stream.message().await.map_err(etcd("watch the leader"))?
                else {
                    break 'deleted;
                };
                if message.canceled()
                    || message
                        .events()
                        .iter()
                        .any(|e| e.event_type() == EventType::Delete)
                {
                    break 'deleted;
                }
            }
        }
    }
}

/// The first server that takes part in the election of the fleet under `fleet_prefix` (a
/// leader, or a candidate that renews its key while it waits), as its key and identity; `None`
/// when no server does. A server started with `--leader-elect=false` runs its controllers
/// unfenced and must be the fleet's only one: it refuses to start when this answers `Some`.
pub async fn election_holder(
    client: &Client,
    fleet_prefix: &str,
) -> Result<Option<(String, String)>, ElectionError> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let response = client
        .kv_client()
        .get(election_prefix(fleet_prefix), Some(options))
        .await
        .map_err(etcd("read the election keys"))?;
    Ok(response.kvs().first().map(|kv| {
        (
            String::from_utf8_lossy(kv.key()).into_owned(),
            String::from_utf8_lossy(kv.value()).into_owned(),
        )
    }))
}

/// Every election key of a fleet starts with this.
pub fn election_prefix(fleet_prefix: &str) -> String {
    format!("{}/leader/", fleet_prefix.trim_end_matches('/'))
}

/// Renews the lease every retry period until it lapses; says why in `end`.
async fn keep_alive(
    client: Client,
    lease: i64,
    timing: LeaderElectionTiming,
    granted_at: Instant,
    end: watch::Sender<Option<TermEnd>>,
) {
    let mut leases = client.lease_client();
    let mut keeper = None;
    let mut last_ok = granted_at;
    let mut tick = tokio::time::interval(timing.retry_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if end.borrow().is_some() {
            return;
        }
        let sent = Instant::now();
        let renewed = tokio::time::timeout(timing.retry_period, async {
            match &mut keeper {
                None => {
                    let (k, stream) = leases.keep_alive(lease).await?;
                    keeper = Some((k, stream));
                    Ok::<Option<i64>, etcd_client::Error>(Some(1))
                }
                Some((k, stream)) => {
                    k.keep_alive().await?;
                    Ok(stream.message().await?.map(|r| r.ttl()))
                }
            }
        })
        .await;
        match renewed {
            Ok(Ok(Some(ttl))) if ttl > 0 => last_ok = sent,
            Ok(Ok(Some(_))) => {
                end.send_replace(Some(TermEnd::LeaseLost));
                return;
            }
            Ok(Err(error)) if error.to_string().contains("lease not found") => {
                end.send_replace(Some(TermEnd::LeaseLost));
                return;
            }
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                // The stream broke or etcd did not answer in time: open it again next time.
                keeper = None;
            }
        }
        if timing.lapsed(last_ok, Instant::now()) {
            tracing::warn!(lease, "no renewal within the renew deadline; the term ends");
            end.send_replace(Some(TermEnd::RenewDeadline));
            return;
        }
    }
}

impl Term {
    /// The fence of this term's writes: each refused write ends the term and is counted.
    pub fn fence(&self) -> Fence {
        let end = self.end.clone();
        let refusals = self.refusals.clone();
        Fence {
            key: self.key.clone(),
            revision: self.revision,
            refused: Arc::new(move || {
                refusals.fetch_add(1, Ordering::Relaxed);
                if end.borrow().is_none() {
                    tracing::warn!("a write of this term was refused by its fence: another server leads; stopping the controllers");
                    end.send_replace(Some(TermEnd::Fenced));
                }
            }),
            committed: Arc::new(|_| {}),
        }
    }

    /// The election key's create revision (the term's number).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The store revision at which this server saw that it leads.
    pub fn won_at(&self) -> i64 {
        self.won_at
    }

    /// Writes of this term its fence refused.
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// Waits until the term ends, and says why.
    pub async fn ended(&self) -> TermEnd {
        let mut rx = self.end.subscribe();
        let why = match rx.wait_for(Option::is_some).await {
            Ok(why) => (*why).unwrap_or(TermEnd::LeaseLost),
            Err(_) => TermEnd::LeaseLost,
        };
        why
    }

    /// True once the term has ended.
    pub fn is_over(&self) -> bool {
        self.end.borrow().is_some()
    }

    /// Ends the term: deletes the election key (if it is still this term's) and revokes the
    /// lease, so the next candidate leads at once. Best effort: an etcd that does not answer
    /// lets the lease expire instead.
    pub async fn resign(self) {
        if self.end.borrow().is_none() {
            self.end.send_replace(Some(TermEnd::Resigned));
        }
        self.keeper.abort();
        let mut kv = self.client.kv_client();
        let mut leases = self.client.lease_client();
        let wait = self.client_timeout();
        let delete = Txn::new()
            .when(vec![Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                self.revision,
            )])
            .and_then(vec![TxnOp::delete(self.key.clone(), None)]);
        if self.revision > 0 {
            let _ = tokio::time::timeout(wait, kv.txn(delete)).await;
        }
        let _ = tokio::time::timeout(wait, leases.revoke(self.lease)).await;
        tracing::info!(key = %String::from_utf8_lossy(&self.key), "resigned the leadership");
    }

    fn client_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(2)
    }
}

impl Drop for Term {
    /// Stops renewing. A candidacy dropped before it won (a cancelled campaign) also revokes
    /// its lease, so it does not hold up the candidates behind it; a term dropped without
    /// [`Term::resign`] ends when its lease expires, as a crashed leader's does.
    fn drop(&mut self) {
        self.keeper.abort();
        if self.revision == 0 && self.end.borrow().is_none() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let mut leases = self.client.lease_client();
                let lease = self.lease;
                runtime.spawn(async move {
                    let _ = tokio::time::timeout(
                        std::time::Duration::from_secs(2),
                        leases.revoke(lease),
                    )
                    .await;
                });
            }
        }
    }
}
